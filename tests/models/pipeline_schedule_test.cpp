// The pipeline schedules' per-rank orders: 1F1B, GPipe, interleaved and ZB-H1 orders written out
// by hand, the activations each rank holds at its peak, and a list-scheduling makespan (test
// code only: the library computes no time) that runs the orders against their cross-stage
// dependencies, to show that none deadlocks and that their idle share is the textbook bubble.

#include "comptrain/models/pipeline_schedule.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace comptrain::models {
namespace {

using Kind = PipelineStep::Kind;
using ::testing::HasSubstr;

// An order as text: "F3" forward of micro-batch 3, "B3" backward, "I3"/"W3" the input- and
// weight-gradient halves of a split backward; ".1" after the micro-batch names chunk 1 (written
// only when `chunks`).
std::string text_of(const std::vector<PipelineStep>& order, bool chunks = false) {
  std::ostringstream out;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const PipelineStep& s = order[i];
    if (i > 0) out << ' ';
    switch (s.kind) {
      case Kind::forward: out << 'F'; break;
      case Kind::backward: out << 'B'; break;
      case Kind::backward_input: out << 'I'; break;
      case Kind::backward_weight: out << 'W'; break;
    }
    out << s.micro_batch;
    if (chunks) out << '.' << s.chunk;
  }
  return out.str();
}

struct StepTimes {
  double forward = 1;
  double backward = 1;         // a whole backward
  double backward_input = 1;   // the split backward's halves
  double backward_weight = 1;
  double of(Kind kind) const {
    switch (kind) {
      case Kind::forward: return forward;
      case Kind::backward: return backward;
      case Kind::backward_input: return backward_input;
      case Kind::backward_weight: return backward_weight;
    }
    return 0;
  }
};

struct Makespan {
  double iteration = 0;  // when the last step ends
  double idle_fraction = 0;  // 1 - work / (ranks x iteration)
};

// List scheduling: each rank runs its steps in order, each as soon as the rank is free and its
// dependencies have ended. Virtual stage s = chunk x P + rank; F(mb, s) needs F(mb, s-1); the
// backward (or its input half) of (mb, s) needs F(mb, s) and the backward (input half) of
// (mb, s+1); a weight half needs its input half. Communication takes no time. nullopt when the
// orders deadlock (no rank can run its next step) or a step's pairs are not each run once.
std::optional<Makespan> list_schedule(const std::vector<std::vector<PipelineStep>>& orders, const StepTimes& times) {
  const int ranks = static_cast<int>(orders.size());
  int chunks = 1;
  for (const auto& order : orders)
    for (const PipelineStep& s : order) chunks = std::max(chunks, s.chunk + 1);
  const int stages = ranks * chunks;
  // When each (kind, micro-batch, virtual stage) ended; a whole backward is filed under
  // backward_input too, the kind its upstream stage waits for.
  std::map<std::tuple<Kind, int, int>, double> ended;
  std::vector<std::size_t> next(static_cast<std::size_t>(ranks), 0);
  std::vector<double> free_at(static_cast<std::size_t>(ranks), 0);
  double work = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (int rank = 0; rank < ranks; ++rank) {
      const auto& order = orders[static_cast<std::size_t>(rank)];
      std::size_t& at = next[static_cast<std::size_t>(rank)];
      while (at < order.size()) {
        const PipelineStep& s = order[at];
        const int stage = s.chunk * ranks + rank;
        std::vector<std::tuple<Kind, int, int>> needs;
        if (s.kind == Kind::forward && stage > 0) needs.emplace_back(Kind::forward, s.micro_batch, stage - 1);
        if (s.kind == Kind::backward || s.kind == Kind::backward_input) {
          needs.emplace_back(Kind::forward, s.micro_batch, stage);
          if (stage < stages - 1) needs.emplace_back(Kind::backward_input, s.micro_batch, stage + 1);
        }
        if (s.kind == Kind::backward_weight) needs.emplace_back(Kind::backward_input, s.micro_batch, stage);
        double start = free_at[static_cast<std::size_t>(rank)];
        bool ready = true;
        for (const auto& need : needs) {
          const auto found = ended.find(need);
          if (found == ended.end()) {
            ready = false;
            break;
          }
          start = std::max(start, found->second);
        }
        if (!ready) break;
        const double end = start + times.of(s.kind);
        const Kind filed = s.kind == Kind::backward ? Kind::backward_input : s.kind;
        if (!ended.emplace(std::tuple{filed, s.micro_batch, stage}, end).second) return std::nullopt;  // run twice
        work += times.of(s.kind);
        free_at[static_cast<std::size_t>(rank)] = end;
        ++at;
        progress = true;
      }
    }
  }
  for (int rank = 0; rank < ranks; ++rank) {
    if (next[static_cast<std::size_t>(rank)] < orders[static_cast<std::size_t>(rank)].size()) return std::nullopt;
  }
  Makespan result;
  result.iteration = *std::max_element(free_at.begin(), free_at.end());
  result.idle_fraction = 1 - work / (ranks * result.iteration);
  return result;
}

// Every (micro-batch, chunk) of every rank has one forward and one backward (or one of each half).
void expect_complete(const std::vector<std::vector<PipelineStep>>& orders, int micro_batches, int chunks, bool split) {
  for (const auto& order : orders) {
    std::map<std::tuple<Kind, int, int>, int> count;
    for (const PipelineStep& s : order) ++count[{s.kind, s.micro_batch, s.chunk}];
    const std::vector<Kind> kinds = split ? std::vector<Kind>{Kind::forward, Kind::backward_input, Kind::backward_weight}
                                          : std::vector<Kind>{Kind::forward, Kind::backward};
    EXPECT_EQ(order.size(), kinds.size() * static_cast<std::size_t>(micro_batches * chunks));
    for (const Kind kind : kinds)
      for (int mb = 0; mb < micro_batches; ++mb)
        for (int chunk = 0; chunk < chunks; ++chunk) EXPECT_EQ((count[{kind, mb, chunk}]), 1);
  }
}

std::vector<int> in_flight_per_rank(const std::vector<std::vector<PipelineStep>>& orders) {
  std::vector<int> counts;
  for (const auto& order : orders) counts.push_back(max_in_flight(order));
  return counts;
}

TEST(OneFOneB, FourStagesEightMicroBatchesByHand) {
  // Rank r: min(P-1-r, M) warm-up forwards, then F/B pairs, then the remaining backwards.
  const auto orders = pipeline_orders(PipelineSchedule::one_f_one_b, 4, 8, 1);
  ASSERT_EQ(orders.size(), 4u);
  EXPECT_EQ(text_of(orders[0]), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  EXPECT_EQ(text_of(orders[1]), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
  EXPECT_EQ(text_of(orders[2]), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  EXPECT_EQ(text_of(orders[3]), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  for (const auto& order : orders)
    for (const PipelineStep& s : order) EXPECT_EQ(s.chunk, 0);
  EXPECT_EQ(in_flight_per_rank(orders), (std::vector<int>{4, 3, 2, 1}));
}

TEST(OneFOneB, FewerMicroBatchesThanStages) {
  // min(P - r, M) with M = 2: the warm-up takes every micro-batch on ranks 0 and 1.
  const auto orders = pipeline_orders(PipelineSchedule::one_f_one_b, 4, 2, 1);
  EXPECT_EQ(text_of(orders[0]), "F0 F1 B0 B1");
  EXPECT_EQ(text_of(orders[2]), "F0 F1 B0 B1");
  EXPECT_EQ(text_of(orders[3]), "F0 B0 F1 B1");
  EXPECT_EQ(in_flight_per_rank(orders), (std::vector<int>{2, 2, 2, 1}));
}

TEST(GPipe, EveryRankHoldsEveryMicroBatch) {
  const auto orders = pipeline_orders(PipelineSchedule::gpipe, 4, 4, 1);
  for (const auto& order : orders) EXPECT_EQ(text_of(order), "F0 F1 F2 F3 B0 B1 B2 B3");
  EXPECT_EQ(in_flight_per_rank(orders), (std::vector<int>{4, 4, 4, 4}));
}

TEST(Interleaved, FourStagesTwoChunksEightMicroBatchesByHand) {
  // Forwards in groups of P = 4 micro-batches, each group through chunk 0 then chunk 1:
  //   (0..3 chunk 0) (0..3 chunk 1) (4..7 chunk 0) (4..7 chunk 1);
  // backward k is forward k's micro-batch on the mirrored chunk (1 - chunk). Warm-up: rank 0
  // 2 x 3 + 1 x 4 = 10 forwards, rank 3 0 + 4 = 4; then forward k + warm-up and backward k
  // alternate; the rest are backwards.
  const auto orders = pipeline_orders(PipelineSchedule::interleaved, 4, 8, 2);
  EXPECT_EQ(text_of(orders[0], true),
            "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 F5.0 "
            "F6.0 B0.1 F7.0 B1.1 F4.1 B2.1 F5.1 B3.1 F6.1 B0.0 F7.1 B1.0 "
            "B2.0 B3.0 B4.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0");
  EXPECT_EQ(text_of(orders[3], true),
            "F0.0 F1.0 F2.0 F3.0 "
            "F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 F4.0 B0.0 F5.0 B1.0 F6.0 B2.0 F7.0 B3.0 "
            "F4.1 B4.1 F5.1 B5.1 F6.1 B6.1 F7.1 B7.1 B4.0 B5.0 B6.0 B7.0");
  // The forward chunk sequence of rank 0: 0000 1111 0000 1111.
  std::string chunk_sequence;
  for (const PipelineStep& s : orders[0])
    if (s.kind == Kind::forward) chunk_sequence += static_cast<char>('0' + s.chunk);
  EXPECT_EQ(chunk_sequence, "0000111100001111");
  // Held at the peak: the warm-up plus the first steady forward, 2(P-1-r) + (V-1)P + 1.
  EXPECT_EQ(in_flight_per_rank(orders), (std::vector<int>{11, 9, 7, 5}));
  expect_complete(orders, 8, 2, false);
  EXPECT_DOUBLE_EQ(ideal_bubble_fraction(PipelineSchedule::interleaved, 4, 8, 2), 3.0 / 19.0);
}

TEST(Interleaved, WarmUpCappedAtEveryChunkOfEveryMicroBatch) {
  // P 4, V 4, M 4: rank 0's warm-up 6 + 12 = 18 exceeds the 16 forwards: all forwards first.
  const auto orders = pipeline_orders(PipelineSchedule::interleaved, 4, 4, 4);
  EXPECT_EQ(max_in_flight(orders[0]), 16);
  EXPECT_EQ(orders[0][15].kind, Kind::forward);
  EXPECT_EQ(orders[0][16].kind, Kind::backward);
}

TEST(ZeroBubble, FourStagesEightMicroBatchesByHand) {
  // 1F1B's order with each backward split into I and W; rank r holds back r W passes.
  const auto orders = pipeline_orders(PipelineSchedule::zero_bubble, 4, 8, 1);
  EXPECT_EQ(text_of(orders[0]), "F0 F1 F2 F3 I0 W0 F4 I1 W1 F5 I2 W2 F6 I3 W3 F7 I4 W4 I5 W5 I6 W6 I7 W7");
  EXPECT_EQ(text_of(orders[3]), "F0 I0 F1 I1 F2 I2 F3 I3 W0 F4 I4 W1 F5 I5 W2 F6 I6 W3 F7 I7 W4 W5 W6 W7");
  expect_complete(orders, 8, 1, true);
}

TEST(ZeroBubble, KeepsOneFOneBsPeak) {
  // Every rank holds at most what 1F1B's rank 0 holds, min(P, M): ZB-H1's memory bound.
  for (int stages = 1; stages <= 8; ++stages) {
    for (int micro_batches = 1; micro_batches <= 16; ++micro_batches) {
      const auto zb = in_flight_per_rank(pipeline_orders(PipelineSchedule::zero_bubble, stages, micro_batches, 1));
      const auto base = in_flight_per_rank(pipeline_orders(PipelineSchedule::one_f_one_b, stages, micro_batches, 1));
      EXPECT_EQ(*std::max_element(zb.begin(), zb.end()), *std::max_element(base.begin(), base.end()))
          << "P " << stages << " M " << micro_batches;
      EXPECT_EQ(zb.front(), base.front());
    }
  }
}

TEST(ZeroBubble, ShorterThanOneFOneB) {
  // F = I = W = 1 against 1F1B's F = 1, B = 2: the same work, (P-1) x 1 of bubble instead of
  // (P-1) x 3 (M >= P). P 4, M 8: 3 x 8 + 3 = 27 against 3 x 8 + 9 = 33.
  StepTimes times;
  times.backward = 2;
  const auto zb = list_schedule(pipeline_orders(PipelineSchedule::zero_bubble, 4, 8, 1), times);
  const auto base = list_schedule(pipeline_orders(PipelineSchedule::one_f_one_b, 4, 8, 1), times);
  ASSERT_TRUE(zb && base);
  EXPECT_DOUBLE_EQ(zb->iteration, 27);
  EXPECT_DOUBLE_EQ(base->iteration, 33);
  for (int stages = 2; stages <= 8; ++stages) {
    for (int micro_batches = 1; micro_batches <= 16; ++micro_batches) {
      const auto split = list_schedule(pipeline_orders(PipelineSchedule::zero_bubble, stages, micro_batches, 1), times);
      const auto whole = list_schedule(pipeline_orders(PipelineSchedule::one_f_one_b, stages, micro_batches, 1), times);
      ASSERT_TRUE(split && whole);
      EXPECT_LT(split->iteration, whole->iteration) << "P " << stages << " M " << micro_batches;
    }
  }
}

TEST(IdealBubbleFraction, TextbookForms) {
  EXPECT_DOUBLE_EQ(ideal_bubble_fraction(PipelineSchedule::one_f_one_b, 4, 8, 1), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(ideal_bubble_fraction(PipelineSchedule::gpipe, 4, 8, 1), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(ideal_bubble_fraction(PipelineSchedule::interleaved, 4, 8, 2), 3.0 / 19.0);
  EXPECT_DOUBLE_EQ(ideal_bubble_fraction(PipelineSchedule::zero_bubble, 4, 8, 1), 3.0 / 27.0);
  // Fewer micro-batches than stages: the fill-drain path 2M + 2P - 1 = 11 against 3M = 6 of work.
  EXPECT_DOUBLE_EQ(ideal_bubble_fraction(PipelineSchedule::zero_bubble, 4, 2, 1), 5.0 / 11.0);
  EXPECT_DOUBLE_EQ(ideal_bubble_fraction(PipelineSchedule::one_f_one_b, 1, 8, 1), 0.0);
}

TEST(ListSchedule, MatchesTheIdealBubbleAndNeverDeadlocks) {
  StepTimes equal;  // F = B = I = W = 1
  StepTimes double_backward;
  double_backward.backward = 2;
  for (int stages = 1; stages <= 8; ++stages) {
    for (int micro_batches = 1; micro_batches <= 16; ++micro_batches) {
      for (const PipelineSchedule schedule :
           {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b, PipelineSchedule::zero_bubble}) {
        const auto orders = pipeline_orders(schedule, stages, micro_batches, 1);
        expect_complete(orders, micro_batches, 1, schedule == PipelineSchedule::zero_bubble);
        const double ideal = ideal_bubble_fraction(schedule, stages, micro_batches, 1);
        const auto run = list_schedule(orders, equal);
        ASSERT_TRUE(run) << to_string(schedule) << " P " << stages << " M " << micro_batches << " deadlocks";
        EXPECT_NEAR(run->idle_fraction, ideal, 1e-12) << to_string(schedule) << " P " << stages << " M " << micro_batches;
        if (schedule != PipelineSchedule::zero_bubble) {
          // The bubble share does not depend on the backward taking twice the forward.
          const auto slow_backward = list_schedule(orders, double_backward);
          ASSERT_TRUE(slow_backward);
          EXPECT_NEAR(slow_backward->idle_fraction, ideal, 1e-12)
              << to_string(schedule) << " P " << stages << " M " << micro_batches << " B = 2F";
        }
      }
      if (micro_batches % stages != 0) continue;
      for (int chunks = 1; chunks <= 4; ++chunks) {
        // Each chunk holds 1/V of the rank's layers: its steps take 1/V.
        StepTimes chunk_times;
        chunk_times.forward = 1.0 / chunks;
        chunk_times.backward = 1.0 / chunks;
        const auto orders = pipeline_orders(PipelineSchedule::interleaved, stages, micro_batches, chunks);
        expect_complete(orders, micro_batches, chunks, false);
        const auto run = list_schedule(orders, chunk_times);
        ASSERT_TRUE(run) << "interleaved P " << stages << " M " << micro_batches << " V " << chunks << " deadlocks";
        EXPECT_NEAR(run->idle_fraction, ideal_bubble_fraction(PipelineSchedule::interleaved, stages, micro_batches, chunks),
                    1e-12)
            << "interleaved P " << stages << " M " << micro_batches << " V " << chunks;
      }
    }
  }
}

TEST(ListSchedule, DetectsADeadlock) {
  // The helper itself: rank 1, the last stage, lists its backward before the forward that
  // backward needs, so neither it nor rank 0's backward (which waits for rank 1's) can run.
  std::vector<std::vector<PipelineStep>> orders = {
      {{Kind::forward, 0, 0}, {Kind::backward, 0, 0}},
      {{Kind::backward, 0, 0}, {Kind::forward, 0, 0}},
  };
  EXPECT_FALSE(list_schedule(orders, StepTimes{}));
  orders[1] = {{Kind::forward, 0, 0}, {Kind::backward, 0, 0}};
  const auto run = list_schedule(orders, StepTimes{});
  ASSERT_TRUE(run);
  EXPECT_DOUBLE_EQ(run->iteration, 4);  // F on rank 0, F on 1, B on 1, B on 0
  EXPECT_DOUBLE_EQ(run->idle_fraction, 0.5);
}

TEST(MaxInFlight, CountsUntilTheActivationsAreFreed) {
  EXPECT_EQ(max_in_flight({}), 0);
  // A whole backward frees; a split backward frees at its weight half, not its input half.
  EXPECT_EQ(max_in_flight({{Kind::forward, 0, 0}, {Kind::backward, 0, 0}, {Kind::forward, 1, 0}}), 1);
  EXPECT_EQ(max_in_flight({{Kind::forward, 0, 0}, {Kind::backward_input, 0, 0}, {Kind::forward, 1, 0},
                           {Kind::backward_weight, 0, 0}}),
            2);
  // Chunks count separately.
  EXPECT_EQ(max_in_flight({{Kind::forward, 0, 0}, {Kind::forward, 0, 1}}), 2);
}

// The message of the std::invalid_argument a call throws; empty when it does not throw.
template <typename Call>
std::string invalid_argument_message(Call call) {
  try {
    call();
  } catch (const std::invalid_argument& error) {
    return error.what();
  }
  return "";
}

TEST(PipelineOrders, InvalidArgumentsNameTheArgument) {
  using S = PipelineSchedule;
  EXPECT_THAT(invalid_argument_message([] { pipeline_orders(S::one_f_one_b, 0, 4, 1); }), HasSubstr("stages is 0"));
  EXPECT_THAT(invalid_argument_message([] { pipeline_orders(S::gpipe, 4, 0, 1); }), HasSubstr("micro_batches is 0"));
  EXPECT_THAT(invalid_argument_message([] { pipeline_orders(S::interleaved, 4, 4, 0); }), HasSubstr("virtual_stages is 0"));
  EXPECT_THAT(invalid_argument_message([] { pipeline_orders(S::one_f_one_b, 4, 4, 2); }),
              HasSubstr("virtual_stages is 2 with the 1f1b schedule"));
  EXPECT_THAT(invalid_argument_message([] { pipeline_orders(S::zero_bubble, 4, 4, 2); }),
              HasSubstr("virtual_stages is 2 with the zero_bubble schedule"));
  EXPECT_THAT(invalid_argument_message([] { pipeline_orders(S::interleaved, 4, 6, 2); }),
              HasSubstr("micro_batches is 6; the interleaved schedule expects a multiple of the 4 stages"));
  EXPECT_THAT(invalid_argument_message([] { ideal_bubble_fraction(S::gpipe, 4, -1, 1); }), HasSubstr("micro_batches is -1"));
  EXPECT_THAT(invalid_argument_message([] { ideal_bubble_fraction(S::gpipe, 4, 4, 3); }), HasSubstr("virtual_stages is 3"));
  // The interleaved bubble form itself takes any micro-batch count.
  EXPECT_DOUBLE_EQ(ideal_bubble_fraction(S::interleaved, 4, 6, 2), 3.0 / 15.0);
}

}  // namespace
}  // namespace comptrain::models

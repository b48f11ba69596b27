// The pipeline stage transform (models/pipeline_parallel.hpp): a hand-made one-micro-batch chunk
// schedule whose buffer sizes give every rank's peak by hand, run through 1F1B, GPipe, ZB-H1 and
// the interleaved schedule; the transfers' messages checked end against end across the ranks; a
// chunk that brings its own sends and receives; the orders the transform refuses; and a zoo GPT
// as a one-chunk stage.

#include "comptrain/models/pipeline_parallel.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "comptrain/models/op_time.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "common/must_apply.hpp"
#include "traces/hand_traces.hpp"

namespace comptrain::models {
namespace {

using ::testing::HasSubstr;
using Kind = PipelineStep::Kind;

// The hand chunk's buffer sizes, in bytes. Chosen so that a micro-batch's memory peaks in its
// backward pass (at b1, below), even with the gradients already allocated by an earlier
// micro-batch: what b1 holds of its own micro-batch (kA1 + kDh + kDx = 640) exceeds what the last
// forward op holds (kA1 + kA2 + kTemp + kOut = 380, plus the received input on a later stage).
constexpr std::int64_t kWeight = 1000;    // resident
constexpr std::int64_t kOptState = 2000;  // resident
constexpr std::int64_t kGrad = 1000;      // held to the end, made by b1
constexpr std::int64_t kA1 = 100;         // saved by f1, read by b1
constexpr std::int64_t kA2 = 200;         // saved by f2, read by b2
constexpr std::int64_t kTemp = 30;        // f2's workspace, read by f3
constexpr std::int64_t kOut = 50;         // f3's output: the stage's output
constexpr std::int64_t kDh = 40;          // b2's output gradient, read by b1
constexpr std::int64_t kDx = 500;         // b1's input gradient: what goes to the previous stage
constexpr std::int64_t kBoundary = 64;    // the boundary activation (and gradient) of one micro-batch

// What one micro-batch keeps from its forward to its backward on a stage with no received input.
constexpr std::int64_t kKept = kA1 + kA2;

// The trace behind the hand schedule: three forward ops, two backward ops, an optimizer op. Only
// the ops' phases matter to the transform.
traces::Trace hand_trace() {
  traces::testing::HandTrace h;
  const auto w = h.tensor("w", kWeight, traces::TensorRole::weight);
  const auto x = h.tensor("x", 16, traces::TensorRole::input);
  const auto a1 = h.tensor("a1", kA1, traces::TensorRole::activation);
  const auto a2 = h.tensor("a2", kA2, traces::TensorRole::activation);
  const auto t = h.tensor("t", kTemp);
  const auto y = h.tensor("y", kOut);
  const auto dh = h.tensor("dh", kDh);
  const auto g = h.tensor("g", kGrad, traces::TensorRole::gradient);
  const auto dx = h.tensor("dx", kDx);
  const auto s = h.tensor("s", kOptState, traces::TensorRole::optimizer_state);
  h.op("f1", {x, w}, {a1});
  h.op("f2", {a1}, {a2, t});
  h.op("f3", {a2, t}, {y});
  h.op("b2", {a2}, {dh}, traces::Phase::backward);
  h.op("b1", {dh, a1, w}, {g, dx}, traces::Phase::backward);
  h.op("adam", {w, g, s}, {}, traces::Phase::optimizer);
  return h.build();
}

struct HandSchedule {
  Schedule s;
  BufferId buffer(const std::string& name, std::int64_t bytes, MemoryRole role, bool resident = false, bool held = false) {
    Buffer b;
    b.name = name;
    b.bytes = bytes;
    b.role = role;
    b.resident = resident;
    b.held_to_end = held;
    s.buffers.push_back(b);
    return s.buffers.size() - 1;
  }
  TaskId op(const std::string& name, traces::OpIndex op, std::vector<BufferId> creates, std::vector<BufferId> uses, std::vector<TaskId> after = {}) {
    Task t;
    t.name = name;
    t.op = op;
    t.seconds = 1e-3;
    t.creates = std::move(creates);
    t.uses = std::move(uses);
    t.after = std::move(after);
    s.tasks.push_back(t);
    return s.tasks.size() - 1;
  }
  TaskId transfer(const std::string& name, TaskKind kind, bool gradient, std::vector<BufferId> creates, std::vector<BufferId> uses,
                  std::vector<TaskId> after = {}) {
    Task t;
    t.name = name;
    t.kind = kind;
    t.stream = Stream::p2p;
    t.bytes = kBoundary;
    t.message = PipelineMessage{.peer = 0, .gradient = gradient, .micro_batch = 0, .chunk = 0};
    t.creates = std::move(creates);
    t.uses = std::move(uses);
    t.after = std::move(after);
    s.tasks.push_back(t);
    return s.tasks.size() - 1;
  }
};

// One micro-batch of the hand chunk, as build_schedule would give it: every op on the compute
// stream in trace order. With `own_transfers`, the chunk of a middle stage that receives and sends
// itself (a chunk trace with communication ops): its received input saved until b1, the received
// gradient read by b2.
Schedule hand_chunk(bool own_transfers = false) {
  HandSchedule h;
  h.s.strategy = "hand";
  const auto w = h.buffer("w", kWeight, MemoryRole::weight, true);
  const auto s = h.buffer("s", kOptState, MemoryRole::optimizer_state, true);
  const auto a1 = h.buffer("a1", kA1, MemoryRole::activation);
  const auto a2 = h.buffer("a2", kA2, MemoryRole::activation);
  const auto t = h.buffer("t", kTemp, MemoryRole::temporary);
  const auto y = h.buffer("y", kOut, MemoryRole::temporary);
  const auto dh = h.buffer("dh", kDh, MemoryRole::temporary);
  const auto g = h.buffer("g", kGrad, MemoryRole::gradient, false, true);
  const auto dx = h.buffer("dx", kDx, MemoryRole::temporary);
  if (!own_transfers) {
    h.op("f1", 0, {a1}, {w});
    h.op("f2", 1, {a2, t}, {a1});
    h.op("f3", 2, {y}, {a2, t});
    h.op("b2", 3, {dh}, {a2});
    h.op("b1", 4, {g, dx}, {dh, a1, w});
  } else {
    const auto x = h.buffer("x", kBoundary, MemoryRole::activation);
    const auto dy = h.buffer("dy", kBoundary, MemoryRole::temporary);
    const auto recv_x = h.transfer("recv x", TaskKind::recv, false, {x}, {});
    h.op("f1", 0, {a1}, {w, x}, {recv_x});
    h.op("f2", 1, {a2, t}, {a1});
    const auto f3 = h.op("f3", 2, {y}, {a2, t});
    h.transfer("send y", TaskKind::send, false, {}, {y}, {f3});
    const auto recv_dy = h.transfer("recv dy", TaskKind::recv, true, {dy}, {});
    h.op("b2", 3, {dh}, {a2, dy}, {recv_dy});
    const auto b1 = h.op("b1", 4, {g, dx}, {dh, a1, w, x});
    h.transfer("send dx", TaskKind::send, true, {}, {dx}, {b1});
  }
  h.op("adam", 5, {}, {w, g, s});
  return h.s;
}

Schedule stage(const Schedule& chunk, const traces::Trace& trace, PipelineSchedule schedule, int stages, int micro_batches, int rank) {
  PipelineStageSpec spec;
  spec.rank = rank;
  spec.stages = stages;
  spec.order = pipeline_orders(schedule, stages, micro_batches)[static_cast<std::size_t>(rank)];
  spec.boundary_bytes = kBoundary;
  return apply_pipeline_stage({chunk}, {&trace}, spec);
}

std::vector<const Task*> of_kind(const Schedule& s, TaskKind kind, std::optional<bool> gradient = std::nullopt) {
  std::vector<const Task*> out;
  for (const Task& t : s.tasks) {
    if (t.kind == kind && (!gradient || (t.message && t.message->gradient == *gradient))) out.push_back(&t);
  }
  return out;
}

std::size_t position_of(const Schedule& s, const std::string& name) {
  const auto it = std::find_if(s.tasks.begin(), s.tasks.end(), [&](const Task& t) { return t.name == name; });
  EXPECT_NE(it, s.tasks.end()) << name;
  return static_cast<std::size_t>(it - s.tasks.begin());
}

// One transfer as the replay pairs them: (sender, receiver, gradient, micro-batch, chunk).
using Transfer = std::tuple<int, int, bool, int, int>;

// Every send of every rank has exactly one recv on its peer with the same message, and the other
// way round.
void expect_ends_match(const std::vector<Schedule>& ranks) {
  std::map<Transfer, int> sent;
  std::map<Transfer, int> received;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    for (const Task& t : ranks[static_cast<std::size_t>(r)].tasks) {
      if (!t.message) continue;
      const PipelineMessage& m = *t.message;
      if (t.kind == TaskKind::send) ++sent[{r, m.peer, m.gradient, m.micro_batch, m.chunk}];
      if (t.kind == TaskKind::recv) ++received[{m.peer, r, m.gradient, m.micro_batch, m.chunk}];
    }
  }
  EXPECT_EQ(sent, received);
  for (const auto& [transfer, count] : sent) EXPECT_EQ(count, 1) << "a transfer sent twice";
}

// The buffers of micro-batch `m` (their names end with the copy's label).
std::size_t buffers_of_micro_batch(const Schedule& s, const std::string& label) {
  return static_cast<std::size_t>(
      std::count_if(s.buffers.begin(), s.buffers.end(), [&](const Buffer& b) { return b.name.ends_with("(" + label + ")"); }));
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no std::invalid_argument";
}

TEST(PipelineStage, OneFOneBOnFourStagesAddsTheTransfersEachStageHas) {
  const traces::Trace trace = hand_trace();
  const Schedule chunk = hand_chunk();
  constexpr int kStages = 4;
  constexpr int kMicroBatches = 8;
  std::vector<Schedule> ranks;
  for (int r = 0; r < kStages; ++r) ranks.push_back(stage(chunk, trace, PipelineSchedule::one_f_one_b, kStages, kMicroBatches, r));

  for (int r = 0; r < kStages; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const Schedule& s = ranks[static_cast<std::size_t>(r)];
    ASSERT_NO_THROW(s.validate());
    const bool first = r == 0;
    const bool last = r == kStages - 1;
    // Five ops per micro-batch, the optimizer's once.
    EXPECT_EQ(of_kind(s, TaskKind::op).size(), 5u * kMicroBatches + 1);
    EXPECT_EQ(s.tasks.back().name, "adam");
    // The first stage receives no activation and sends no gradient; the last sends no activation
    // and receives no gradient.
    EXPECT_EQ(of_kind(s, TaskKind::recv, false).size(), first ? 0u : 8u);
    EXPECT_EQ(of_kind(s, TaskKind::send, false).size(), last ? 0u : 8u);
    EXPECT_EQ(of_kind(s, TaskKind::recv, true).size(), last ? 0u : 8u);
    EXPECT_EQ(of_kind(s, TaskKind::send, true).size(), first ? 0u : 8u);
    for (const TaskKind kind : {TaskKind::send, TaskKind::recv}) {
      for (const Task* t : of_kind(s, kind)) {
        EXPECT_EQ(t->stream, Stream::p2p);
        EXPECT_EQ(t->bytes, kBoundary);
        // A forward activation comes from the previous rank and goes to the next; a gradient the
        // other way. One chunk: chunk 0 at both ends.
        const bool with_next = (kind == TaskKind::send) != t->message->gradient;
        EXPECT_EQ(t->message->peer, with_next ? r + 1 : r - 1) << t->name;
        EXPECT_EQ(t->message->chunk, 0);
      }
    }
    // Each micro-batch's own buffers: a1, a2, t, y, dh, dx, and the received input and gradient
    // where the stage has them.
    for (int m = 0; m < kMicroBatches; ++m) {
      EXPECT_EQ(buffers_of_micro_batch(s, "micro-batch " + std::to_string(m)), 6u + (first ? 0u : 1u) + (last ? 0u : 1u)) << m;
    }
    // The gradient is made once, by the first backward, and accumulated into by the others.
    std::size_t gradient_creations = 0;
    for (const Task& t : s.tasks) {
      for (BufferId b : t.creates) gradient_creations += s.buffers[b].name == "g" ? 1 : 0;
    }
    EXPECT_EQ(gradient_creations, 1u);
  }

  // Rank 1 around micro-batch 5: the recv just before its first op, which waits for it and reads
  // what it received; the send just after its last forward op, which it waits for.
  const Schedule& s = ranks[1];
  const std::size_t f1 = position_of(s, "f1 [micro-batch 5]");
  const Task& recv = s.tasks[f1 - 1];
  ASSERT_EQ(recv.kind, TaskKind::recv);
  EXPECT_EQ(recv.message, (PipelineMessage{.peer = 0, .gradient = false, .micro_batch = 5, .chunk = 0}));
  EXPECT_THAT(s.tasks[f1].after, ::testing::Contains(f1 - 1));
  ASSERT_EQ(recv.creates.size(), 1u);
  EXPECT_EQ(s.buffers[recv.creates[0]].role, MemoryRole::activation);
  EXPECT_THAT(s.tasks[f1].uses, ::testing::Contains(recv.creates[0]));
  // The received input is the stage's saved input: b1 of the same micro-batch reads it.
  EXPECT_THAT(s.tasks[position_of(s, "b1 [micro-batch 5]")].uses, ::testing::Contains(recv.creates[0]));
  const std::size_t f3 = position_of(s, "f3 [micro-batch 5]");
  const Task& send = s.tasks[f3 + 1];
  ASSERT_EQ(send.kind, TaskKind::send);
  EXPECT_EQ(send.message, (PipelineMessage{.peer = 2, .gradient = false, .micro_batch = 5, .chunk = 0}));
  EXPECT_EQ(send.after, std::vector<TaskId>{f3});
  const std::size_t b2 = position_of(s, "b2 [micro-batch 5]");
  EXPECT_EQ(s.tasks[b2 - 1].message, (PipelineMessage{.peer = 2, .gradient = true, .micro_batch = 5, .chunk = 0}));
  const std::size_t b1 = position_of(s, "b1 [micro-batch 5]");
  EXPECT_EQ(s.tasks[b1 + 1].message, (PipelineMessage{.peer = 0, .gradient = true, .micro_batch = 5, .chunk = 0}));

  expect_ends_match(ranks);
}

// Rank r's peak: the one-micro-batch peak (resident buffers, the gradient, and b1's working set of
// its own micro-batch, plus its received input on a later stage) and, for each other micro-batch
// in flight, what it keeps from its forward to its backward (a1, a2, and the received input).
TEST(PipelineStage, PeakIsOneMicroBatchPlusTheOthersInFlight) {
  const traces::Trace trace = hand_trace();
  const Schedule chunk = hand_chunk();
  const std::int64_t one_micro_batch = kWeight + kOptState + kGrad + kA1 + kDh + kDx;
  ASSERT_EQ(sequential_peak_bytes(chunk), one_micro_batch);
  constexpr int kStages = 4;
  constexpr int kMicroBatches = 8;
  for (const PipelineSchedule schedule : {PipelineSchedule::one_f_one_b, PipelineSchedule::gpipe}) {
    const auto orders = pipeline_orders(schedule, kStages, kMicroBatches);
    for (int r = 0; r < kStages; ++r) {
      SCOPED_TRACE(std::string(to_string(schedule)) + ", rank " + std::to_string(r));
      const std::int64_t received = r > 0 ? kBoundary : 0;
      const int in_flight = max_in_flight(orders[static_cast<std::size_t>(r)]);
      // 1F1B: P - r on rank r; GPipe: every micro-batch.
      EXPECT_EQ(in_flight, schedule == PipelineSchedule::gpipe ? kMicroBatches : kStages - r);
      const Schedule s = stage(chunk, trace, schedule, kStages, kMicroBatches, r);
      EXPECT_EQ(sequential_peak_bytes(s), one_micro_batch + received + (in_flight - 1) * (kKept + received));
    }
  }
}

// ZB-H1: the whole backward runs at backward_input, nothing at backward_weight.
TEST(PipelineStage, ZeroBubbleRunsTheWholeBackwardAtBackwardInput) {
  const traces::Trace trace = hand_trace();
  const Schedule chunk = hand_chunk();
  const Schedule s = stage(chunk, trace, PipelineSchedule::zero_bubble, 4, 8, 0);
  ASSERT_NO_THROW(s.validate());
  EXPECT_EQ(of_kind(s, TaskKind::op).size(), 5u * 8 + 1);
  // Rank 0: F0 F1 F2 F3 I0 W0 F4 ...: micro-batch 0's backward between F3 and F4.
  const std::size_t b1 = position_of(s, "b1 [micro-batch 0]");
  EXPECT_GT(b1, position_of(s, "f3 [micro-batch 3]"));
  EXPECT_LT(b1, position_of(s, "f1 [micro-batch 4]"));
  EXPECT_EQ(of_kind(s, TaskKind::recv, true).size(), 8u);
}

// P 2, V 2: rank r's chunk k runs virtual stage 2k + r. Rank 1's chunk 0 (stage 1) sends its
// activation to rank 0's chunk 1 (stage 2); rank 1's chunk 1 is the last stage and sends none.
TEST(PipelineStage, InterleavedMapsChunksToVirtualStages) {
  const traces::Trace trace = hand_trace();
  const Schedule chunk = hand_chunk();
  constexpr int kStages = 2;
  constexpr int kChunks = 2;
  constexpr int kMicroBatches = 4;
  const auto orders = pipeline_orders(PipelineSchedule::interleaved, kStages, kMicroBatches, kChunks);
  std::vector<Schedule> ranks;
  for (int r = 0; r < kStages; ++r) {
    PipelineStageSpec spec;
    spec.rank = r;
    spec.stages = kStages;
    spec.virtual_stages = kChunks;
    spec.order = orders[static_cast<std::size_t>(r)];
    spec.boundary_bytes = kBoundary;
    ranks.push_back(apply_pipeline_stage({chunk, chunk}, {&trace, &trace}, spec));
    ASSERT_NO_THROW(ranks.back().validate());
    // Five ops per micro-batch and chunk; each chunk's optimizer once, at the end.
    EXPECT_EQ(of_kind(ranks.back(), TaskKind::op).size(), 5u * kMicroBatches * kChunks + kChunks);
    EXPECT_EQ(ranks.back().tasks[ranks.back().tasks.size() - 2].name, "adam [chunk 0]");
    EXPECT_EQ(ranks.back().tasks.back().name, "adam [chunk 1]");
  }
  const Schedule& rank1 = ranks[1];
  // Stage 1 -> stage 2: rank 1's chunk 0 sends to rank 0, naming its own chunk.
  EXPECT_EQ(rank1.tasks[position_of(rank1, "send activation to stage 2 [micro-batch 2, chunk 0]")].message,
            (PipelineMessage{.peer = 0, .gradient = false, .micro_batch = 2, .chunk = 0}));
  // Stage 3 is the last: no send after its forward, its backward receives nothing.
  for (const Task& t : rank1.tasks) {
    EXPECT_FALSE(t.name.starts_with("send activation to stage 4") || t.name.starts_with("recv gradient from stage 4")) << t.name;
  }
  // Stage 3 receives from stage 2, rank 0's chunk 1.
  EXPECT_EQ(rank1.tasks[position_of(rank1, "recv activation from stage 2 [micro-batch 2, chunk 1]")].message,
            (PipelineMessage{.peer = 0, .gradient = false, .micro_batch = 2, .chunk = 1}));
  // Stage 2 (rank 0, chunk 1) receives stage 1's activation (rank 1's chunk 0).
  const Schedule& rank0 = ranks[0];
  EXPECT_EQ(rank0.tasks[position_of(rank0, "recv activation from stage 1 [micro-batch 3, chunk 1]")].message,
            (PipelineMessage{.peer = 1, .gradient = false, .micro_batch = 3, .chunk = 0}));
  // Megatron's units: rank 1 warms up with 2 forwards (2(P-r-1) + (V-1)P), then runs forward
  // (0, 1) with backward (0, 1) as one unit; the batch after it sends the forward's output (none:
  // stage 3 is the last) and the backward's input gradient, and receives the next unit's inputs,
  // forward (2, 0)'s activation among them: all after b1 of (0, 1), none between its f3 and b2.
  const std::size_t b1 = position_of(rank1, "b1 [micro-batch 0, chunk 1]");
  EXPECT_LT(position_of(rank1, "f3 [micro-batch 0, chunk 1]"), position_of(rank1, "b2 [micro-batch 0, chunk 1]"));
  EXPECT_EQ(position_of(rank1, "f3 [micro-batch 0, chunk 1]") + 1, position_of(rank1, "b2 [micro-batch 0, chunk 1]"));
  EXPECT_EQ(position_of(rank1, "send gradient to stage 2 [micro-batch 0, chunk 1]"), b1 + 1);
  EXPECT_GT(position_of(rank1, "recv activation from stage 0 [micro-batch 2, chunk 0]"), b1);
  // Rank 0's steady-state forward (2, 0) sends its output only after backward (0, 1) has run.
  EXPECT_GT(position_of(rank0, "send activation to stage 1 [micro-batch 2, chunk 0]"), position_of(rank0, "b1 [micro-batch 0, chunk 1]"));
  // Counts: rank 0 sends 4 activations per chunk (stages 0 and 2 both have a next stage), rank 1
  // only from chunk 0; gradients mirror them.
  EXPECT_EQ(of_kind(rank0, TaskKind::send, false).size(), 8u);
  EXPECT_EQ(of_kind(rank0, TaskKind::recv, false).size(), 4u);
  EXPECT_EQ(of_kind(rank1, TaskKind::send, false).size(), 4u);
  EXPECT_EQ(of_kind(rank1, TaskKind::recv, false).size(), 8u);
  EXPECT_EQ(of_kind(rank0, TaskKind::recv, true).size(), 8u);
  EXPECT_EQ(of_kind(rank1, TaskKind::send, true).size(), 8u);
  expect_ends_match(ranks);
}

// A chunk with its own sends and receives: none added, each copy's message filled.
TEST(PipelineStage, AChunksOwnTransfersGetTheirMessagesFilled) {
  const traces::Trace trace = hand_trace();
  const Schedule chunk = hand_chunk(true);
  const Schedule s = stage(chunk, trace, PipelineSchedule::one_f_one_b, 4, 8, 1);
  ASSERT_NO_THROW(s.validate());
  // Four transfers per micro-batch, as in the chunk.
  EXPECT_EQ(of_kind(s, TaskKind::send).size() + of_kind(s, TaskKind::recv).size(), 4u * 8);
  EXPECT_EQ(s.tasks[position_of(s, "recv x [micro-batch 6]")].message,
            (PipelineMessage{.peer = 0, .gradient = false, .micro_batch = 6, .chunk = 0}));
  EXPECT_EQ(s.tasks[position_of(s, "send y [micro-batch 6]")].message,
            (PipelineMessage{.peer = 2, .gradient = false, .micro_batch = 6, .chunk = 0}));
  EXPECT_EQ(s.tasks[position_of(s, "recv dy [micro-batch 6]")].message,
            (PipelineMessage{.peer = 2, .gradient = true, .micro_batch = 6, .chunk = 0}));
  EXPECT_EQ(s.tasks[position_of(s, "send dx [micro-batch 6]")].message,
            (PipelineMessage{.peer = 0, .gradient = true, .micro_batch = 6, .chunk = 0}));
  // The received tensors are the micro-batch's own.
  EXPECT_EQ(buffers_of_micro_batch(s, "micro-batch 6"), 8u);
  // The same schedule as the one whose transfers the transform adds, but for the names.
  const Schedule added = stage(hand_chunk(), trace, PipelineSchedule::one_f_one_b, 4, 8, 1);
  EXPECT_EQ(sequential_peak_bytes(s), sequential_peak_bytes(added));

  // On the first stage the chunk's forward recv has no peer.
  EXPECT_THAT(error_of([&] { stage(chunk, trace, PipelineSchedule::one_f_one_b, 4, 8, 0); }), HasSubstr("no previous stage"));
}

TEST(PipelineStage, RefusesOrdersItCannotRun) {
  const traces::Trace trace = hand_trace();
  const Schedule chunk = hand_chunk();
  auto run = [&](std::vector<PipelineStep> order) {
    return error_of([&] {
      PipelineStageSpec spec;
      spec.stages = 2;
      spec.order = std::move(order);
      apply_pipeline_stage({chunk}, {&trace}, spec);
    });
  };
  EXPECT_THAT(run({{Kind::forward, 0, 1}, {Kind::backward, 0, 1}}), HasSubstr("names chunk 1; there are 1 chunks"));
  EXPECT_THAT(run({{Kind::forward, 0, 0}, {Kind::forward, 0, 0}, {Kind::backward, 0, 0}}), HasSubstr("both the forward of micro-batch 0"));
  EXPECT_THAT(run({{Kind::backward, 0, 0}, {Kind::forward, 0, 0}}), HasSubstr("comes before its forward"));
  EXPECT_THAT(run({{Kind::forward, 0, 0}}), HasSubstr("has a forward but no backward"));
  EXPECT_THAT(run({{Kind::forward, 0, 0}, {Kind::backward_weight, 0, 0}, {Kind::backward_input, 0, 0}}),
              HasSubstr("comes before its backward_input"));
  EXPECT_THAT(run({}), HasSubstr("chunk 0 runs no step"));

  PipelineStageSpec spec;
  spec.stages = 2;
  spec.rank = 2;
  spec.order = {{Kind::forward, 0, 0}, {Kind::backward, 0, 0}};
  EXPECT_THAT(error_of([&] { apply_pipeline_stage({chunk}, {&trace}, spec); }), HasSubstr("rank is 2"));
  spec.rank = 0;
  spec.virtual_stages = 2;
  EXPECT_THAT(error_of([&] { apply_pipeline_stage({chunk}, {&trace}, spec); }), HasSubstr("1 chunk schedules for 2 virtual stages"));
}

// A zoo GPT of two layers, as build_schedule gives it, as the one chunk of both ranks of P = 2.
TEST(PipelineStage, ZooGptAsOneChunk) {
  zoo::ModelRequest request;
  request.model = "gpt";
  request.batch_size = 1;
  request.layers = 2;
  request.hidden = 64;
  request.heads = 2;
  request.seq_len = 16;
  request.vocab = 128;
  const traces::Trace trace = zoo::build_model(request);
  const OpTimeModel time_model(builtin_platform("a100-80gb"));
  const Schedule chunk = test_support::must_apply(build_schedule(trace, time_model, StrategySpec{}));
  auto is_optimizer = [&](const Task& t) { return t.op && trace.op(*t.op).phase == traces::Phase::optimizer; };
  const auto optimizer_tasks = static_cast<std::size_t>(std::count_if(chunk.tasks.begin(), chunk.tasks.end(), is_optimizer));
  ASSERT_GT(optimizer_tasks, 0u);
  const std::size_t micro_tasks = chunk.tasks.size() - optimizer_tasks;
  std::vector<Schedule> ranks;
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    PipelineStageSpec spec;
    spec.rank = r;
    spec.stages = 2;
    spec.order = pipeline_orders(PipelineSchedule::one_f_one_b, 2, 4)[static_cast<std::size_t>(r)];
    spec.boundary_bytes = 16 * 64 * 4;  // [s, b, h] in fp32
    ranks.push_back(apply_pipeline_stage({chunk}, {&trace}, spec));
    const Schedule& s = ranks.back();
    ASSERT_NO_THROW(s.validate());
    // Four copies of the micro-step and one transfer each way per micro-batch (rank 0 sends
    // activations and receives gradients, rank 1 the other way round), the optimizer once.
    EXPECT_EQ(s.tasks.size(), 4 * micro_tasks + 4 * 2 + optimizer_tasks);
    const auto optimizer_in_stage = static_cast<std::size_t>(std::count_if(s.tasks.begin(), s.tasks.end(), is_optimizer));
    EXPECT_EQ(optimizer_in_stage, optimizer_tasks);
    for (std::size_t t = s.tasks.size() - optimizer_tasks; t < s.tasks.size(); ++t) EXPECT_TRUE(is_optimizer(s.tasks[t])) << s.tasks[t].name;
  }
  expect_ends_match(ranks);
}

// A 4-layer zoo GPT cut into P 2 x V 2 virtual stages of one layer: rank r's chunk k is virtual
// stage 2k + r, layer 2k + r, stage 0 with the embedding and stage 3 with the head.
traces::Trace gpt_virtual_stage(int stage) {
  zoo::ModelRequest request;
  request.model = "gpt";
  request.batch_size = 1;
  request.layers = 4;
  request.hidden = 64;
  request.heads = 2;
  request.seq_len = 16;
  request.vocab = 128;
  request.pipeline_stage = zoo::PipelineStageSpec{stage, 1, stage == 0, stage == 3};
  return zoo::build_model(request);
}

TEST(PipelineRank, JoinedChunkTracesKeepEachChunksOpsAndTensorsInOrder) {
  const std::vector<traces::Trace> chunks{gpt_virtual_stage(0), gpt_virtual_stage(2)};
  const RankTrace rank = join_chunk_traces(chunks);
  ASSERT_EQ(rank.first_op, (std::vector<traces::OpIndex>{0, chunks[0].ops().size()}));
  ASSERT_EQ(rank.first_tensor, (std::vector<traces::TensorIndex>{0, chunks[0].tensors().size()}));
  EXPECT_EQ(rank.trace.ops().size(), chunks[0].ops().size() + chunks[1].ops().size());
  EXPECT_EQ(rank.trace.tensors().size(), chunks[0].tensors().size() + chunks[1].tensors().size());
  // Every op of chunk k is at first_op[k] + its index, reading and writing the tensors it did.
  for (std::size_t k = 0; k < chunks.size(); ++k) {
    for (traces::OpIndex o = 0; o < chunks[k].ops().size(); ++o) {
      const traces::Op& before = chunks[k].op(o);
      const traces::Op& after = rank.trace.op(rank.first_op[k] + o);
      ASSERT_EQ(after.name, before.name);
      ASSERT_EQ(after.inputs.size(), before.inputs.size());
      for (std::size_t i = 0; i < before.inputs.size(); ++i) {
        EXPECT_EQ(after.inputs[i], rank.first_tensor[k] + before.inputs[i]);
        EXPECT_EQ(rank.trace.tensor(after.inputs[i]).name, chunks[k].tensor(before.inputs[i]).name);
      }
    }
  }
  // The chunks' differing metadata, chunk by chunk; what they share, once.
  EXPECT_EQ(rank.trace.metadata().at("pipeline_first_layer"), "0,2");
  EXPECT_EQ(rank.trace.metadata().at("pipeline_first"), "true,false");
  EXPECT_EQ(rank.trace.metadata().at("pipeline_layers"), "1");
  EXPECT_EQ(rank.trace.name(), chunks[0].name() + " + " + chunks[1].name());
  // One chunk: its trace as it is.
  EXPECT_EQ(join_chunk_traces({chunks[0]}).trace, chunks[0]);
  EXPECT_THAT(error_of([] { join_chunk_traces({}); }), HasSubstr("no chunk trace"));
  zoo::ModelRequest wider;
  wider.model = "gpt";
  wider.batch_size = 2;
  wider.layers = 4;
  wider.hidden = 64;
  wider.heads = 2;
  wider.seq_len = 16;
  wider.vocab = 128;
  wider.pipeline_stage = zoo::PipelineStageSpec{2, 1, false, false};
  EXPECT_THAT(error_of([&] { join_chunk_traces({chunks[0], zoo::build_model(wider)}); }), HasSubstr("chunk 1's trace is at batch 2, chunk 0's at 1"));
}

// P 2, V 2 of zoo chunks through apply_pipeline_rank: every op task of chunk k names an op of
// chunk k's range of the rank trace, the op it ran in its chunk's own schedule.
TEST(PipelineRank, ApplyPipelineRankPointsEveryTaskAtItsChunksOps) {
  const OpTimeModel time_model(builtin_platform("a100-80gb"));
  const auto orders = pipeline_orders(PipelineSchedule::interleaved, 2, 4, 2);
  std::vector<Schedule> ranks;
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const std::vector<traces::Trace> chunk_traces{gpt_virtual_stage(r), gpt_virtual_stage(2 + r)};
    std::vector<Schedule> chunks;
    for (const traces::Trace& t : chunk_traces) chunks.push_back(test_support::must_apply(build_schedule(t, time_model, StrategySpec{})));
    PipelineStageSpec spec;
    spec.rank = r;
    spec.stages = 2;
    spec.virtual_stages = 2;
    spec.order = orders[static_cast<std::size_t>(r)];
    const PipelineRank rank = apply_pipeline_rank(chunks, chunk_traces, spec);
    ASSERT_NO_THROW(rank.schedule.validate());
    const RankTrace joined = join_chunk_traces(chunk_traces);
    ASSERT_EQ(rank.trace, joined.trace);
    std::size_t op_tasks = 0;
    for (const Task& task : rank.schedule.tasks) {
      if (task.kind != TaskKind::op) continue;
      ++op_tasks;
      const bool second = *task.op >= joined.first_op[1];
      EXPECT_TRUE(task.name.starts_with(rank.trace.op(*task.op).name + " [")) << task.name;
      EXPECT_NE(task.name.find(second ? "chunk 1]" : "chunk 0]"), std::string::npos) << task.name;
    }
    // Each chunk's op tasks once per micro-batch but for the optimizer's, once.
    std::size_t expected = 0;
    for (std::size_t k = 0; k < chunks.size(); ++k) {
      for (const Task& task : chunks[k].tasks) {
        if (task.kind == TaskKind::op) expected += chunk_traces[k].op(*task.op).phase == traces::Phase::optimizer ? 1 : 4;
      }
    }
    EXPECT_EQ(op_tasks, expected);
    for (const Buffer& buffer : rank.schedule.buffers) {
      if (!buffer.tensor) continue;
      const bool second = buffer.name.find("chunk 1") != std::string::npos;
      EXPECT_EQ(*buffer.tensor >= joined.first_tensor[1], second) << buffer.name;
    }
    ranks.push_back(rank.schedule);
  }
  expect_ends_match(ranks);
  EXPECT_THAT(error_of([&] { apply_pipeline_rank({Schedule{}}, {}, PipelineStageSpec{}); }), HasSubstr("1 chunk schedules and 0 chunk traces"));
}

}  // namespace
}  // namespace comptrain::models

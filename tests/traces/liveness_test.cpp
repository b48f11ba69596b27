#include "comptrain/traces/liveness.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "comptrain/traces/summary.hpp"
#include "hand_traces.hpp"

namespace comptrain::traces {
namespace {

using ::testing::ElementsAre;
using testing::HandTrace;

std::vector<std::int64_t> totals(const Liveness& l) {
  std::vector<std::int64_t> out;
  for (const auto& step : l.live_by_step) out.push_back(total(step));
  return out;
}

TEST(Liveness, ChainFreesEachTensorAfterItsLastReader) {
  HandTrace h;
  auto x = h.tensor("x", 100, TensorRole::input);
  auto w = h.tensor("w", 10, TensorRole::weight);
  auto y = h.tensor("y", 40);
  auto z = h.tensor("z", 20);
  auto u = h.tensor("u", 5);
  h.op("A", {x, w}, {y});
  h.op("B", {y}, {z});
  h.op("C", {z}, {u});
  const Trace t = h.build();
  const Liveness l = compute_liveness(t, t.recorded_order());
  // step 0: x w y = 150; step 1: x w y z = 170; step 2: x w z u = 135 (y freed after B).
  EXPECT_THAT(totals(l), ElementsAre(150, 170, 135));
  EXPECT_EQ(l.peak_bytes, 170);
  EXPECT_EQ(l.peak_step, 1u);
  EXPECT_THAT(l.live_at_peak, ElementsAre(x, w, y, z));
}

TEST(Liveness, TheExecutionOrderChangesThePeak) {
  // Two independent branches: a big tensor read late and a small one read early.
  HandTrace h;
  auto big = h.tensor("big", 100);
  auto small = h.tensor("small", 10);
  auto c = h.tensor("c", 1);
  auto d = h.tensor("d", 1);
  h.op("A", {}, {big});
  h.op("B", {}, {small});
  h.op("C", {small}, {c});
  h.op("D", {big}, {d});
  const Trace t = h.build();
  // A B C D: 100, 110, 111 (big small c), 101 (big d).
  const Liveness recorded = compute_liveness(t, t.recorded_order());
  EXPECT_THAT(totals(recorded), ElementsAre(100, 110, 111, 101));
  // B C A D: 10, 11, 100, 101: the big tensor is made only when it is about to be used.
  const std::vector<OpIndex> late{1, 2, 0, 3};
  const Liveness better = compute_liveness(t, late);
  EXPECT_THAT(totals(better), ElementsAre(10, 11, 100, 101));
  EXPECT_EQ(better.peak_bytes, 101);
  EXPECT_EQ(better.peak_step, 3u);
}

TEST(Liveness, ViewsShareTheStorageAndExtendItsLifetime) {
  HandTrace h;
  auto x = h.tensor("x", 8, TensorRole::input);
  auto y = h.tensor("y", 40);
  auto r = h.view("relu_inplace", y);
  auto z = h.tensor("z", 4);
  h.op("bn", {x}, {y});
  h.op("relu_", {y}, {r});
  h.op("conv", {r}, {z});
  const Trace t = h.build();
  const Liveness l = compute_liveness(t, t.recorded_order());
  // y is counted once (the view adds no bytes) and lives until conv reads its view.
  EXPECT_THAT(totals(l), ElementsAre(48, 48, 52));
  ASSERT_EQ(l.lifetimes.size(), 3u);  // x, y, z: the view has no storage of its own
  EXPECT_EQ(l.lifetimes[1].storage, y);
  EXPECT_EQ(l.lifetimes[1].first, 0u);
  EXPECT_EQ(l.lifetimes[1].last, 2u);
}

TEST(Liveness, ForwardBackwardKeepsActivationsAndGradients) {
  HandTrace h;
  auto x = h.tensor("x", 8, TensorRole::input);
  auto w = h.tensor("w", 4, TensorRole::weight);
  auto m = h.tensor("momentum", 4, TensorRole::optimizer_state);
  auto a = h.tensor("a", 16, TensorRole::activation);
  auto out = h.tensor("out", 2);
  auto g_out = h.tensor("grad_out", 2);
  auto g_w = h.tensor("grad_w", 4, TensorRole::gradient);
  auto unused = h.tensor("scratch", 32);
  h.op("f1", {x, w}, {a});
  h.op("f2", {a}, {out, unused});
  h.op("loss_backward", {out}, {g_out}, Phase::backward);
  h.op("f1_backward", {g_out, a, x}, {g_w}, Phase::backward);
  h.op("sgd", {w, g_w, m}, {}, Phase::optimizer);
  const Trace t = h.build();
  const Liveness l = compute_liveness(t, t.recorded_order());
  // resident x w m = 16 at every step.
  // f1: +a16 = 32; f2: +out2 +scratch32 = 66; loss_backward: a out g_out = 36 (scratch freed after f2);
  // f1_backward: a g_out g_w = 38; sgd: g_w stays to the end = 20.
  EXPECT_THAT(totals(l), ElementsAre(32, 66, 36, 38, 20));
  EXPECT_EQ(l.peak_step, 1u);
  EXPECT_EQ(at(l.live_by_step[3], TensorRole::gradient), 4);
  EXPECT_EQ(at(l.live_by_step[4], TensorRole::activation), 0);

  const TraceSummary s = summarize(t);
  EXPECT_EQ(s.peak_bytes, 66);
  EXPECT_EQ(s.peak_op, 1u);
  EXPECT_EQ(s.parameters, 4);
  EXPECT_EQ(s.saved_activation_bytes, 16);
  EXPECT_EQ(s.saved_activation_tensors, 1u);
  EXPECT_EQ(at(s.allocated_by_role, TensorRole::temporary), 2 + 2 + 32);
  EXPECT_EQ(at(s.live_at_peak_by_role, TensorRole::temporary), 2 + 32);
  EXPECT_EQ(s.ops_by_phase[static_cast<std::size_t>(Phase::backward)], 2u);
  EXPECT_EQ(s.host_sync_ops, 0u);
}

TEST(Liveness, RejectsAnInvalidOrder) {
  HandTrace h;
  auto a = h.tensor("a", 1);
  auto b = h.tensor("b", 1);
  h.op("A", {}, {a});
  h.op("B", {a}, {b});
  const Trace t = h.build();
  const std::vector<OpIndex> reversed{1, 0};
  const std::vector<OpIndex> repeated{0, 0};
  const std::vector<OpIndex> short_order{0};
  EXPECT_THROW(compute_liveness(t, reversed), TraceError);
  EXPECT_THROW(compute_liveness(t, repeated), TraceError);
  EXPECT_THROW(compute_liveness(t, short_order), TraceError);
}

TEST(Liveness, AnEmptyTraceHasNoPeak) {
  HandTrace h;
  h.tensor("w", 4, TensorRole::weight);
  const Trace t = h.build();
  const Liveness l = compute_liveness(t, t.recorded_order());
  EXPECT_EQ(l.peak_bytes, 0);
  EXPECT_TRUE(l.live_by_step.empty());
}

}  // namespace
}  // namespace comptrain::traces

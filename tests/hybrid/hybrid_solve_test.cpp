// The decision model, the greedy and the MILP on hand-solvable graphs (issue 17): the exact
// program finds the optimum that exhaustive search over the model finds, the greedy is never
// better than it, and the schedule built from a plan stays within the model's peak.

#include <gtest/gtest.h>

#include <cmath>
#include <ctime>

#include "comptrain/hybrid/decision_model.hpp"
#include "comptrain/hybrid/solve.hpp"
#include "comptrain/models/op_time.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/models/strategy.hpp"
#include "common/test_platform.hpp"
#include "common/trace_builder.hpp"

namespace comptrain::hybrid {
namespace {

using traces::OpKind;
using traces::Phase;
using traces::TensorRole;

models::Platform platform(double link_bandwidth) { return test_support::roofline_platform(link_bandwidth); }

using test_support::Builder;

// n layers x_i = f_i(x_{i-1}), each output saved for f_i's backward; `flops` per layer op.
traces::Trace chain(int n, std::int64_t bytes, std::int64_t flops) {
  Builder b;
  std::vector<std::size_t> x{b.tensor("x0", bytes, TensorRole::input)};
  for (int i = 1; i <= n; ++i) x.push_back(b.tensor("x" + std::to_string(i), bytes, TensorRole::activation));
  const auto l = b.tensor("loss", 4, TensorRole::temporary);
  std::vector<std::size_t> g;
  for (int i = 0; i <= n; ++i) g.push_back(b.tensor("g" + std::to_string(i), bytes, TensorRole::temporary));
  const auto wg = b.tensor("wg", 4, TensorRole::gradient);
  for (int i = 1; i <= n; ++i) b.op("f" + std::to_string(i), Phase::forward, OpKind::relu, {x[static_cast<std::size_t>(i - 1)]}, {x[static_cast<std::size_t>(i)]}, flops);
  b.op("loss", Phase::forward, OpKind::loss, {x.back()}, {l}, 1);
  b.op("seed", Phase::backward, OpKind::other, {l}, {g.back()}, 1);
  for (int i = n; i >= 1; --i) {
    const auto ui = static_cast<std::size_t>(i);
    b.op("f" + std::to_string(i) + ".backward", Phase::backward, OpKind::relu, {g[ui], x[ui]},
         i == 1 ? std::vector<std::size_t>{wg} : std::vector<std::size_t>{g[ui - 1]}, flops);
  }
  return b.build("chain");
}

// One large activation y with a long gap: y = a(x); then `filler` ops of compute, one of which
// writes a temporary as large as y; the backward pass pads `filler` ops before reading y.
traces::Trace long_gap(std::int64_t bytes, int filler, std::int64_t flops) {
  Builder b;
  const auto x = b.tensor("x", 4096, TensorRole::input);
  const auto y = b.tensor("y", bytes, TensorRole::activation);
  std::vector<std::size_t> h{y};
  // The middle filler output is as large as y, so that the peak falls in y's gap.
  for (int i = 0; i < filler; ++i) h.push_back(b.tensor("h" + std::to_string(i), i == filler / 2 ? bytes : 4096, TensorRole::temporary));
  const auto l = b.tensor("l", 4, TensorRole::temporary);
  const auto gl = b.tensor("gl", 4, TensorRole::temporary);
  const auto wg = b.tensor("wg", 4, TensorRole::gradient);
  b.op("a", Phase::forward, OpKind::conv, {x}, {y}, flops);
  for (int i = 0; i < filler; ++i) b.op("m" + std::to_string(i), Phase::forward, OpKind::matmul, {h[static_cast<std::size_t>(i)]}, {h[static_cast<std::size_t>(i) + 1]}, flops);
  b.op("c", Phase::forward, OpKind::loss, {h.back()}, {l}, 1);
  b.op("seed", Phase::backward, OpKind::other, {l}, {gl}, 1);
  for (int i = 0; i < filler; ++i) b.op("pad" + std::to_string(i), Phase::backward, OpKind::other, {gl}, {}, flops);
  b.op("a.backward", Phase::backward, OpKind::conv, {gl, y}, {wg}, flops);
  return b.build("long-gap");
}

models::Schedule baseline_of(const traces::Trace& trace, const models::OpTimeModel& tm) {
  return std::get<models::Schedule>(models::build_schedule(trace, tm, models::StrategySpec{}));
}

// The optimum of the model by trying every assignment (small models only).
Solution exhaustive(const DecisionModel& model, std::int64_t budget) {
  Solution best;
  Assignment a(model.candidates.size(), 0);
  while (true) {
    const Evaluation ev = evaluate(model, a);
    if (ev.peak_bytes <= budget && (!best.feasible || ev.seconds < best.evaluation.seconds)) {
      best.feasible = true;
      best.assignment = a;
      best.evaluation = ev;
    }
    std::size_t i = 0;
    for (; i < a.size(); ++i) {
      if (++a[i] < model.candidates[i].options.size()) break;
      a[i] = 0;
    }
    if (i == a.size()) return best;
  }
}

models::CompressAction codec(double ratio, double bandwidth) {
  models::CompressAction c;
  c.ratio = ratio;
  c.compress_bandwidth = bandwidth;
  c.decompress_bandwidth = bandwidth;
  c.latency = 0;
  c.error_bound = 1e-3;
  return c;
}

// The schedule of an assignment, as plan --hybrid exports it (one rule per action naming its storages).
models::StrategySpec spec_of(const traces::Trace& trace, const DecisionModel& model, const Assignment& a) {
  models::StrategySpec spec;
  spec.name = "plan";
  for (std::size_t i = 0; i < a.size(); ++i) {
    const Candidate& c = model.candidates[i];
    const Option& o = c.options[a[i]];
    models::TensorSelector select;
    select.names = {trace.tensor(c.storage).name};
    switch (o.kind) {
      case ActionKind::keep: break;
      case ActionKind::compress: spec.rules.push_back({select, model.codecs[static_cast<std::size_t>(o.codec)].action}); break;
      case ActionKind::offload: {
        models::OffloadAction off;
        off.lookahead = model.offload_lookahead;
        off.free_by = o.release_step - c.last_forward_use;
        spec.rules.push_back({select, off});
        break;
      }
      case ActionKind::recompute: {
        models::RecomputeAction r;
        r.mode = models::RecomputeAction::Mode::all;
        spec.rules.push_back({select, r});
        break;
      }
    }
  }
  return spec;
}

TEST(HybridRecompute, OnAChainTheProgramFindsTheExhaustiveOptimumAndItsScheduleFits) {
  const models::OpTimeModel tm(platform(2.5e10));
  constexpr std::int64_t kLayer = 1 << 20;
  const int n = 12;
  const auto trace = chain(n, kLayer, 1 << 24);
  ModelOptions options;
  options.offload = false;  // recompute only: Checkmate's problem
  const DecisionModel model = build_decision_model(trace, tm, baseline_of(trace, tm), options);
  ASSERT_EQ(model.candidates.size(), static_cast<std::size_t>(n));
  const std::int64_t base_peak = model.baseline_peak();
  // The activations' share of the peak is n layers; allow about 2 sqrt(n) of them.
  for (int layers : {8, 7, 6}) {
    const std::int64_t budget = base_peak - static_cast<std::int64_t>(n - layers) * kLayer;
    const Solution opt = exhaustive(model, budget);
    ASSERT_TRUE(opt.feasible) << layers;
    const MilpSolution milp = solve_exact(model, budget, {30, 0}, nullptr);
    ASSERT_EQ(milp.status, MilpStatus::optimal) << layers;
    EXPECT_TRUE(milp.feasible);
    EXPECT_NEAR(milp.evaluation.seconds, opt.evaluation.seconds, 1e-9) << layers;
    const Solution greedy = solve_greedy(model, budget);
    if (greedy.feasible) {
      EXPECT_GE(greedy.evaluation.seconds, opt.evaluation.seconds - 1e-12) << layers;
    }
    // The schedule of the plan, replayed one task at a time, stays within the model's peak.
    const auto built = models::build_schedule(trace, tm, spec_of(trace, model, milp.assignment));
    ASSERT_TRUE(std::holds_alternative<models::Schedule>(built));
    EXPECT_LE(models::sequential_peak_bytes(std::get<models::Schedule>(built)), budget) << layers;
  }
}

TEST(HybridRecompute, BeatsOrMatchesSqrtNAtItsPeak) {
  const models::OpTimeModel tm(platform(2.5e10));
  constexpr std::int64_t kLayer = 1 << 20;
  const int n = 36;
  const auto trace = chain(n, kLayer, 1 << 24);
  ModelOptions options;
  options.offload = false;
  const DecisionModel model = build_decision_model(trace, tm, baseline_of(trace, tm), options);
  models::StrategySpec sqrt_n;
  sqrt_n.rules.push_back({{}, models::RecomputeAction{}});
  const auto s = std::get<models::Schedule>(models::build_schedule(trace, tm, sqrt_n));
  const std::int64_t budget = models::sequential_peak_bytes(s);
  std::size_t sqrt_recomputes = 0;
  for (const auto& t : s.tasks) sqrt_recomputes += t.kind == models::TaskKind::recompute;
  const MilpSolution milp = solve_exact(model, budget, {20, 1e-6}, nullptr);
  ASSERT_TRUE(milp.feasible);
  std::size_t dropped = 0;
  for (std::size_t i = 0; i < milp.assignment.size(); ++i) dropped += model.candidates[i].options[milp.assignment[i]].kind == ActionKind::recompute;
  // sqrt_n keeps every 6th of 36 and replays 30; the program needs no more.
  EXPECT_LE(dropped, sqrt_recomputes);
  const auto built = std::get<models::Schedule>(models::build_schedule(trace, tm, spec_of(trace, model, milp.assignment)));
  EXPECT_LE(models::sequential_peak_bytes(built), budget);
}

TEST(HybridChoice, CompressBeatsOffloadOnASlowLinkAndLosesOnAFastOne) {
  constexpr std::int64_t kBig = std::int64_t{64} << 20;
  const auto trace = long_gap(kBig, 4, std::int64_t{1} << 28);
  for (const bool slow_link : {true, false}) {
    // Each filler op takes 2^28 / 1e13 = 27 us; the 64 MiB copy takes 6.7 ms at 1e10 B/s (slow)
    // and 6.7 us at 1e13 (fast). The codec runs at 1e11 B/s both ways: 1.3 ms added.
    const models::OpTimeModel tm(platform(slow_link ? 1e10 : 1e13));
    ModelOptions options;
    options.recompute = false;
    options.codecs = {{"x4", codec(4, 1e11)}};
    const DecisionModel model = build_decision_model(trace, tm, baseline_of(trace, tm), options);
    ASSERT_EQ(model.candidates.size(), 1u);
    const std::int64_t budget = model.baseline_peak() - kBig / 2;
    const Solution opt = exhaustive(model, budget);
    const MilpSolution milp = solve_exact(model, budget, {10, 0}, nullptr);
    ASSERT_TRUE(opt.feasible && milp.feasible);
    const ActionKind chosen = model.candidates[0].options[milp.assignment[0]].kind;
    EXPECT_EQ(chosen, slow_link ? ActionKind::compress : ActionKind::offload);
    EXPECT_NEAR(milp.evaluation.seconds, opt.evaluation.seconds, 1e-12);
  }
}

TEST(HybridSolve, GreedyIsNeverBetterThanTheProgramAndTheTimeLimitHolds) {
  const models::OpTimeModel tm(platform(2.5e10));
  const auto trace = chain(160, 1 << 20, 1 << 24);
  ModelOptions options;
  options.codecs = {{"x4", codec(4, 2e11)}};
  const DecisionModel model = build_decision_model(trace, tm, baseline_of(trace, tm), options);
  const std::int64_t budget = model.baseline_peak() - 60 * (std::int64_t{1} << 20);
  const Solution greedy = solve_greedy(model, budget);
  ASSERT_TRUE(greedy.feasible);
  const double before = static_cast<double>(std::clock()) / CLOCKS_PER_SEC;
  const MilpSolution milp = solve_exact(model, budget, {0.5, 0}, &greedy);
  const double cpu = static_cast<double>(std::clock()) / CLOCKS_PER_SEC - before;
  ASSERT_TRUE(milp.feasible);
  EXPECT_LE(milp.evaluation.seconds, greedy.evaluation.seconds + 1e-12);
  EXPECT_LE(milp.evaluation.peak_bytes, budget);
  // A loose bound (building the program and the LP count too): no timing threshold, a hang check.
  EXPECT_LT(cpu, 0.5 * 10 + 20);
}

TEST(HybridModel, EvaluateMatchesTheProgramsObjective) {
  // Whatever CBC returns, its objective is the model's seconds of the rounded assignment.
  const models::OpTimeModel tm(platform(1.6e10));
  const auto trace = chain(20, 8 << 20, 1 << 26);
  ModelOptions options;
  options.codecs = {{"x8", codec(8, 3e11)}};
  const DecisionModel model = build_decision_model(trace, tm, baseline_of(trace, tm), options);
  for (double share : {0.8, 0.5, 0.3}) {
    const auto budget = static_cast<std::int64_t>(share * static_cast<double>(model.baseline_peak()));
    const MilpSolution milp = solve_exact(model, budget, {2, 0}, nullptr);
    if (!milp.feasible) continue;
    EXPECT_NEAR(milp.objective_seconds, milp.evaluation.seconds, 1e-9 * milp.evaluation.seconds) << share;
  }
}

}  // namespace
}  // namespace comptrain::hybrid

namespace comptrain::hybrid {
namespace {

TEST(HybridSolve, AProgramAboveTheSizeLimitIsNotSolved) {
  const models::OpTimeModel tm(platform(2.5e10));
  const auto trace = chain(8, 1 << 20, 1 << 24);
  const DecisionModel model = build_decision_model(trace, tm, baseline_of(trace, tm), ModelOptions{});
  MilpSolveOptions options;
  options.max_nonzeros = 10;
  const MilpSolution milp = solve_exact(model, model.baseline_peak() / 2, options, nullptr);
  EXPECT_TRUE(milp.too_large);
  EXPECT_FALSE(milp.feasible);
  EXPECT_GT(milp.nonzeros, 10u);
  options.max_nonzeros = milp.nonzeros;
  EXPECT_FALSE(solve_exact(model, model.baseline_peak() / 2, options, nullptr).too_large);
}

}  // namespace
}  // namespace comptrain::hybrid

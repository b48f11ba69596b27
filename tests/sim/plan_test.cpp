// The planner against brute force, on ResNet-18 with a GPU shrunk to ~1 GiB so that the largest
// batch is a few dozen: small enough to scan every batch.
#include <gtest/gtest.h>

#include <cmath>

#include "comptrain/models/op_time.hpp"
#include "comptrain/sim/plan.hpp"
#include "comptrain/sim/simulation.hpp"
#include "../support/must_apply.hpp"

namespace comptrain::sim {
namespace {

constexpr std::int64_t kMiB = 1024 * 1024;

Scenario small_scenario(std::int64_t capacity) {
  Scenario s = parse_scenario("model: {zoo: resnet18}\ntraining: {batch_size: 1}\nplatform: a100-40gb\n", "test.yaml", ".");
  // No CUDA context: the limit is the margin's share of `capacity` itself.
  s.platform->gpu.memory_bytes = capacity;
  s.platform->gpu.memory_visible_bytes = capacity;
  s.platform->gpu.cuda_context_bytes = 0;
  return s;
}

PlanOptions options(double margin, std::int64_t max_batch, int jobs) {
  PlanOptions o;
  o.margin = margin;
  o.max_batch = max_batch;
  o.jobs = jobs;
  o.progress = false;
  return o;
}

// Peak of one simulation at `batch` in `metric` (reserved + the new segment when it ran out of memory).
std::pair<bool, std::int64_t> simulate_at(const Scenario& scenario, const models::StrategySpec& spec, std::int64_t batch,
                                          MemoryMetric metric = MemoryMetric::reserved) {
  Scenario s = scenario;
  s.batch_size = batch;
  const traces::Trace trace = build_trace(s);
  const models::OpTimeModel time_model(*s.platform, {});
  const SimulationResult r = simulate(*s.platform, test_support::must_apply(models::build_schedule(trace, time_model, spec)));
  if (r.out_of_memory) return {false, r.out_of_memory->in_use + r.out_of_memory->requested};
  switch (metric) {
    case MemoryMetric::exact: return {true, r.peak_bytes};
    case MemoryMetric::allocated: return {true, r.device.peak_allocated};
    case MemoryMetric::device: return {true, r.device.device_peak()};
    case MemoryMetric::reserved: break;
  }
  return {true, r.device.peak_reserved};
}

// On the tensors' exact bytes, which grow with the batch, with room enough (a 1 GiB limit on a
// 4 GiB GPU) that the allocator never runs out of memory: the allocator's reserved bytes, and so
// its out-of-memory decisions, need not grow with the batch (fragmentation comes and goes:
// ResNet-18 with recomputation reserves less at batch 36 than at 35 on 1 GiB), so no search can
// promise a scan's answer on them.
TEST(Plan, SearchAgreesWithAnExhaustiveScan) {
  const Scenario scenario = small_scenario(4096 * kMiB);
  const auto strategies = strategies_to_plan(scenario);  // baseline, offload, recompute
  ASSERT_EQ(strategies.size(), 3U);
  PlanOptions o = options(0.75, 64, 2);
  o.memory_metric = MemoryMetric::exact;
  const BatchSizePlan plan = make_plan(scenario, {strategies[0], strategies[2]}, o);
  ASSERT_EQ(plan.strategies.size(), 2U);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& spec = i == 0 ? strategies[0] : strategies[2];
    std::int64_t expected = 0;
    for (std::int64_t b = 1; b <= o.max_batch; ++b) {
      const auto [ran, peak] = simulate_at(scenario, spec, b, MemoryMetric::exact);
      if (!ran || peak > plan.limit_bytes) break;
      expected = b;
    }
    ASSERT_GT(expected, 8) << "the test wants a maximum of a few dozen";
    ASSERT_LT(expected, o.max_batch);
    ASSERT_TRUE(plan.strategies[i].max_batch.has_value());
    EXPECT_EQ(*plan.strategies[i].max_batch, expected) << spec.name;
    EXPECT_TRUE(plan.strategies[i].warnings.empty()) << (plan.strategies[i].warnings.empty() ? "" : plan.strategies[i].warnings[0]);
    // A search, not a scan.
    EXPECT_LT(plan.strategies[i].points.size(), static_cast<std::size_t>(expected) / 2 + 4);
  }
  // Each other strategy is compared with the baseline at the smaller of the two largest batches.
  EXPECT_FALSE(plan.strategies[0].vs_baseline.has_value());
  for (std::size_t i = 1; i < plan.strategies.size(); ++i) {
    ASSERT_TRUE(plan.strategies[i].vs_baseline.has_value()) << plan.strategies[i].strategy;
    const auto& c = *plan.strategies[i].vs_baseline;
    EXPECT_EQ(c.batch, std::min(*plan.strategies[0].max_batch, *plan.strategies[i].max_batch));
    const auto [base_fits, base_peak] = simulate_at(scenario, strategies[0], c.batch, MemoryMetric::exact);
    const auto [fits, peak] = simulate_at(scenario, strategies[2], c.batch, MemoryMetric::exact);  // the plan's second strategy
    ASSERT_TRUE(base_fits && fits);
    EXPECT_DOUBLE_EQ(c.peak_saved_fraction, 1.0 - static_cast<double>(peak) / static_cast<double>(base_peak));
    EXPECT_GT(c.slowdown, 1.0);  // recomputation adds work
  }
}

// By default the planner keeps the allocator model's reserved bytes within the limit; with the
// exact metric it plans on the tensors' bytes and finds a larger batch, out-of-memory still
// being decided on the reserved segments.
TEST(Plan, TheMemoryMetricDecidesWhatFits) {
  const Scenario scenario = small_scenario(1024 * kMiB);
  const models::StrategySpec baseline;
  PlanOptions o = options(0.05, 64, 2);
  const BatchSizePlan reserved = make_plan(scenario, {baseline}, o);
  o.memory_metric = MemoryMetric::exact;
  const BatchSizePlan exact = make_plan(scenario, {baseline}, o);
  ASSERT_TRUE(reserved.strategies[0].max_batch && exact.strategies[0].max_batch);
  const std::int64_t r = *reserved.strategies[0].max_batch, e = *exact.strategies[0].max_batch;
  EXPECT_LT(r, e);
  EXPECT_LE(simulate_at(scenario, baseline, r).second, reserved.limit_bytes);
  EXPECT_GT(simulate_at(scenario, baseline, r + 1).second, reserved.limit_bytes);
  EXPECT_LE(simulate_at(scenario, baseline, e, MemoryMetric::exact).second, exact.limit_bytes);
  EXPECT_TRUE(reserved.strategies[0].warnings.empty());
  EXPECT_TRUE(simulate_at(scenario, baseline, e, MemoryMetric::reserved).first) << "a point that fits did not run out of memory";
  // Every point that ran carries the three metrics, in their order.
  for (const PlanPoint& p : exact.strategies[0].points) {
    if (p.out_of_memory) continue;
    EXPECT_EQ(p.peak_bytes, p.exact_peak_bytes);
    EXPECT_LE(p.exact_peak_bytes, p.allocated_peak_bytes);
    EXPECT_LE(p.allocated_peak_bytes, p.reserved_peak_bytes);
  }
}

TEST(Plan, MarginIsRespected) {
  const Scenario scenario = small_scenario(1024 * kMiB);
  const BatchSizePlan plan = make_plan(scenario, {models::StrategySpec{}}, options(0.2, 64, 2));
  const StrategyPlan& s = plan.strategies.front();
  ASSERT_TRUE(s.max_batch.has_value());
  EXPECT_EQ(plan.limit_bytes, static_cast<std::int64_t>(std::floor(0.8 * 1024 * kMiB)));
  const auto at = [&](std::int64_t b) { return std::find_if(s.points.begin(), s.points.end(), [&](const PlanPoint& p) { return p.batch == b; }); };
  ASSERT_NE(at(*s.max_batch), s.points.end());
  ASSERT_NE(at(*s.max_batch + 1), s.points.end()) << "bisection ends with the next batch simulated";
  EXPECT_TRUE(at(*s.max_batch)->fits);
  EXPECT_LE(at(*s.max_batch)->peak_bytes, plan.limit_bytes);
  EXPECT_FALSE(at(*s.max_batch + 1)->fits);
  EXPECT_GT(at(*s.max_batch + 1)->peak_bytes, plan.limit_bytes);
  // Every power of two up to the maximum was simulated, and the best is among the fitting points.
  for (std::int64_t b = 1; b <= *s.max_batch; b *= 2) EXPECT_NE(at(b), s.points.end()) << b;
  ASSERT_TRUE(s.best_batch.has_value());
  EXPECT_LE(*s.best_batch, *s.max_batch);
}

TEST(Plan, JobsDoNotChangeThePlan) {
  const Scenario scenario = small_scenario(1024 * kMiB);
  const auto strategies = strategies_to_plan(scenario);
  PlanOptions o = options(0.05, 48, 1);
  o.target_global_batch = 100;
  const std::string one = plan_json(make_plan(scenario, strategies, o));
  o.jobs = 2;
  const std::string two = plan_json(make_plan(scenario, strategies, o));
  EXPECT_EQ(one, two);
  EXPECT_EQ(plan_csv(make_plan(scenario, strategies, o)), plan_csv(make_plan(scenario, strategies, options(0.05, 48, 2)))) << "CSV ignores G";
}

TEST(Plan, AccumulationStepsReachTheTargetGlobalBatch) {
  const Scenario scenario = small_scenario(1024 * kMiB);
  PlanOptions o = options(0.05, 64, 2);
  o.target_global_batch = 100;
  const BatchSizePlan plan = make_plan(scenario, {models::StrategySpec{}}, o);
  const StrategyPlan& s = plan.strategies.front();
  ASSERT_TRUE(s.best_batch.has_value());
  EXPECT_EQ(s.accumulation_steps, (100 + *s.best_batch - 1) / *s.best_batch);
  const auto best = std::find_if(s.points.begin(), s.points.end(), [&](const PlanPoint& p) { return p.batch == *s.best_batch; });
  EXPECT_DOUBLE_EQ(s.best_samples_per_second, 100.0 / (static_cast<double>(s.accumulation_steps) * best->iteration_seconds));
  EXPECT_NE(plan_table_text(plan).find("accum steps"), std::string::npos);
}

TEST(Plan, AModelThatDoesNotFitAtBatchOneIsReported) {
  const Scenario scenario = small_scenario(64 * kMiB);  // below ResNet-18's weights and optimizer state
  const BatchSizePlan plan = make_plan(scenario, {models::StrategySpec{}}, options(0.05, 64, 1));
  const StrategyPlan& s = plan.strategies.front();
  EXPECT_FALSE(s.max_batch.has_value());
  EXPECT_FALSE(s.best_batch.has_value());
  ASSERT_EQ(s.points.size(), 3U);  // the first growth round: batches 1, 2, 4
  EXPECT_FALSE(s.points.front().fits);
  EXPECT_NE(plan_table_text(plan).find("does not fit at batch 1"), std::string::npos);
  EXPECT_NE(plan_json(plan).find("\"fits_at_batch_1\": false"), std::string::npos);
}

TEST(Plan, TheCeilingIsReported) {
  const BatchSizePlan plan = make_plan(small_scenario(1024 * kMiB), {models::StrategySpec{}}, options(0.05, 6, 2));
  const StrategyPlan& s = plan.strategies.front();
  ASSERT_TRUE(s.max_batch.has_value());
  EXPECT_EQ(*s.max_batch, 6);
  EXPECT_TRUE(s.max_is_ceiling);
  EXPECT_NE(plan_table_text(plan).find(">= 6"), std::string::npos);
}

TEST(Plan, ScenarioPlanSectionIsRead) {
  const Scenario s = parse_scenario(
      "model: {zoo: resnet18}\nplatform: a100-40gb\nplan:\n  margin: 0.1\n  max_batch: 128\n  target_global_batch: 256\n"
      "  strategies:\n    - baseline\n    - {name: r, rules: [{recompute: {mode: every_k, k: 3}}]}\n",
      "p.yaml", ".");
  const auto strategies = strategies_to_plan(s);
  ASSERT_EQ(strategies.size(), 2U);
  EXPECT_EQ(strategies[1].name, "r");
  const PlanOptions o = plan_options_for(s);
  EXPECT_DOUBLE_EQ(o.margin, 0.1);
  EXPECT_EQ(o.max_batch, 128);
  EXPECT_EQ(o.target_global_batch, 256);
  try {
    (void)parse_scenario("model: {zoo: resnet18}\nplan:\n  margin: 1.5\n", "p.yaml", ".");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("p.yaml:3:11:"), std::string::npos) << e.what();
  }
  try {
    (void)parse_scenario("model: {zoo: resnet18}\nplan:\n  strategy: [baseline]\n", "p.yaml", ".");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("valid keys: strategies, margin"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace comptrain::sim

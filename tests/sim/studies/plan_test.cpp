// The planner against brute force, on ResNet-18 with a GPU shrunk to ~1 GiB so that the largest
// batch is a few dozen: small enough to scan every batch.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <nlohmann/json.hpp>

#include "comptrain/models/op_time.hpp"
#include "comptrain/sim/report/plan_report.hpp"
#include "comptrain/sim/studies/plan.hpp"
#include "comptrain/sim/run/run.hpp"
#include "comptrain/sim/engine/replay.hpp"
#include "common/must_apply.hpp"
#include "studies/plan/probe.hpp"
#include "studies/plan/search.hpp"

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

// ---- Clusters (issue 15 item 6): a 2-layer GPT-2 (~53 M parameters) on A100-80GB nodes.

std::string gpt2_yaml(const std::string& platform, const std::string& rest) {
  return "model: {zoo: gpt2, layers: 2, seq_len: 256}\ntraining: {batch_size: 1, precision: mixed}\nplatform: " + platform + "\n" + rest;
}

// A GPU shrunk to `capacity` (no CUDA context), as small_scenario does, on every node.
Scenario gpt2_scenario(const std::string& platform, const std::string& rest, std::int64_t capacity = 0) {
  Scenario s = parse_scenario(gpt2_yaml(platform, rest), "c.yaml", ".");
  if (capacity > 0) {
    s.platform->gpu.memory_bytes = capacity;
    s.platform->gpu.memory_visible_bytes = capacity;
    s.platform->gpu.cuda_context_bytes = 0;
  }
  return s;
}

const PlanPoint& point_of(const StrategyPlan& s, std::int64_t batch) {
  const auto it = std::find_if(s.points.begin(), s.points.end(), [&](const PlanPoint& p) { return p.batch == batch; });
  EXPECT_NE(it, s.points.end()) << batch;
  return *it;
}

// A plan of a cluster scenario: batches per GPU, samples/s global (batch x GPUs / iteration), and
// the scaling efficiency against the same micro-batch on one GPU alone, which is what the run
// layer's own reference (simulate's) gives where that run fits.
TEST(PlanClusters, ThroughputIsGlobalAndScalingIsAgainstOneGpu) {
  for (const std::string& shape : {std::string("a100-80gb\nparallelism: {gpus_per_node: 4}\n"),
                                   std::string("dgx-a100-superpod\nparallelism: {nodes: 2, gpus_per_node: 8, zero: {stage: 2}}\n")}) {
    const Scenario scenario = parse_scenario(gpt2_yaml(shape.substr(0, shape.find('\n')), shape.substr(shape.find('\n') + 1)), "c.yaml", ".");
    const int gpus = scenario.parallelism->data.ranks;
    const BatchSizePlan plan = make_plan(scenario, {models::StrategySpec{}}, options(0.05, 4, 2));
    EXPECT_EQ(plan.cluster.ranks(), gpus);
    const StrategyPlan& s = plan.strategies.front();
    ASSERT_TRUE(s.best_batch.has_value());
    EXPECT_EQ(*s.max_batch, 4);
    for (const PlanPoint& p : s.points) {
      ASSERT_TRUE(p.fits);
      EXPECT_DOUBLE_EQ(p.samples_per_second, static_cast<double>(p.batch * gpus) / p.iteration_seconds) << p.batch;
      EXPECT_GT(p.collective_seconds, 0) << "gradients are reduced";
      EXPECT_LE(p.exposed_communication_seconds, p.collective_seconds * (1 + 1e-12));
    }
    const PlanPoint& best = point_of(s, *s.best_batch);
    EXPECT_DOUBLE_EQ(s.best_samples_per_second, best.samples_per_second);
    const PreparedScenario prepared(scenario);
    const auto alone = one_gpu_iteration_seconds(prepared, models::StrategySpec{}, *s.best_batch);
    ASSERT_TRUE(alone.has_value());
    ASSERT_TRUE(s.one_gpu_iteration_seconds.has_value());
    EXPECT_DOUBLE_EQ(*s.one_gpu_iteration_seconds, *alone);
    ASSERT_TRUE(s.scaling_efficiency.has_value());
    EXPECT_DOUBLE_EQ(*s.scaling_efficiency, *alone / best.iteration_seconds);
    EXPECT_NE(s.limit, PlanLimit::memory);
    const std::string text = plan_table_text(plan);
    EXPECT_NE(text.find("batches are per-GPU micro-batches; samples/s are global"), std::string::npos) << text;
    EXPECT_NE(text.find("global samples/s"), std::string::npos) << text;
    const auto j = nlohmann::json::parse(plan_json(plan));
    EXPECT_EQ(j["schema"]["version"], 6);
    EXPECT_EQ(j["cluster"]["gpus"], gpus);
    EXPECT_DOUBLE_EQ(j["strategies"][0]["scaling_efficiency"].get<double>(), *s.scaling_efficiency);
    EXPECT_EQ(j["strategies"][0]["limit"], std::string(to_string(s.limit)));
  }
}

// A plan names its data parallelism as the scenario has it: FSDP2 shards as ZeRO-3 does
// (zero_stage 3) but is not DeepSpeed, and the text and JSON say so.
TEST(PlanClusters, DataParallelismIsNamedAsTheScenarioHasIt) {
  const std::string head = "model: {zoo: llama, layers: 2, hidden: 64, heads: 4, vocab: 100, seq_len: 16}\ntraining: {batch_size: 1, precision: mixed}\n"
                           "platform: dgx-h100-superpod\n";
  const std::pair<std::string, std::pair<std::string, std::string>> cases[] = {
      {"parallelism: {gpus_per_node: 2, fsdp: {units: [\"model.layers.*\"]}}\n", {"FSDP2", "fsdp2"}},
      {"parallelism: {gpus_per_node: 2, zero: {stage: 3}}\n", {"ZeRO-3", "zero-3"}},
      {"parallelism: {gpus_per_node: 2}\n", {"DDP", "ddp"}}};
  for (const auto& [section, names] : cases) {
    const Scenario scenario = parse_scenario(head + section, "c.yaml", ".");
    const BatchSizePlan plan = make_plan(scenario, {models::StrategySpec{}}, options(0.05, 2, 1));
    EXPECT_NE(plan_table_text(plan).find("GPUs       2 GPUs (1 node x 2), " + names.first + ", optimizer on GPU"), std::string::npos)
        << plan_table_text(plan);
    EXPECT_EQ(nlohmann::json::parse(plan_json(plan))["cluster"]["data_parallel"], names.second) << section;
  }
}

// One GPU has no scaling efficiency and no network; its samples/s are what they were.
TEST(PlanClusters, OneGpuPlansAreUnchanged) {
  const BatchSizePlan plan = make_plan(small_scenario(1024 * kMiB), {models::StrategySpec{}}, options(0.05, 8, 2));
  const StrategyPlan& s = plan.strategies.front();
  EXPECT_EQ(plan.cluster.ranks(), 1);
  EXPECT_FALSE(s.scaling_efficiency.has_value());
  for (const PlanPoint& p : s.points) {
    if (p.fits) {
      EXPECT_DOUBLE_EQ(p.samples_per_second, static_cast<double>(p.batch) / p.iteration_seconds);
    }
    EXPECT_EQ(p.collective_seconds, 0);
  }
  EXPECT_NE(s.limit, PlanLimit::network);
  EXPECT_EQ(plan_table_text(plan).find("micro-batches"), std::string::npos);
  EXPECT_TRUE(nlohmann::json::parse(plan_json(plan))["cluster"].is_null());
}

TEST(PlanClusters, TargetGlobalBatchMustSplitOverTheGpus) {
  const Scenario scenario = gpt2_scenario("a100-80gb", "parallelism: {gpus_per_node: 4}\n");
  PlanOptions o = options(0.05, 4, 1);
  o.target_global_batch = 10;
  try {
    (void)make_plan(scenario, {models::StrategySpec{}}, o);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("target global batch 10 is not a multiple of the 4 GPUs"), std::string::npos) << e.what();
  }
  o.target_global_batch = 16;  // 4 per GPU, ceil(4 / b) steps of b
  const BatchSizePlan plan = make_plan(scenario, {models::StrategySpec{}}, o);
  const StrategyPlan& s = plan.strategies.front();
  ASSERT_TRUE(s.best_batch.has_value());
  EXPECT_EQ(s.accumulation_steps, (4 + *s.best_batch - 1) / *s.best_batch);
  EXPECT_DOUBLE_EQ(s.best_samples_per_second, 16.0 / (static_cast<double>(s.accumulation_steps) * point_of(s, *s.best_batch).iteration_seconds));
}

// A cluster search on one node of 8 A100s shrunk to 1 GiB: DDP holds the whole model state
// (~53 M parameters x 16 B, plus DDP's bucket copy of the gradients) and fits no micro-batch;
// ZeRO-3 shards it over the GPUs and fits on 8. Every candidate that fits trains the target
// global batch in each iteration: samples/s = target / iteration.
TEST(PlanClusters, SearchReportsTheFastestAndWhatLimitsEach) {
  const Scenario scenario = gpt2_scenario("a100-80gb", "plan: {gpus: [2, 3, 8], zero_stages: [0, 3], target_global_batch: 16}\n", 1024 * kMiB);
  const BatchSizePlan plan = make_plan(scenario, {models::StrategySpec{}}, plan_options_for(scenario, options(0.05, 64, 2)));
  EXPECT_TRUE(plan.strategies.empty());
  ASSERT_TRUE(plan.cluster_search.has_value());
  const ClusterSearch& search = *plan.cluster_search;
  ASSERT_EQ(search.shapes.size(), 2U) << "3 GPUs do not divide 16";
  ASSERT_EQ(search.notes.size(), 1U);
  EXPECT_NE(search.notes[0].find("3 GPUs (1 node x 3): left out"), std::string::npos) << search.notes[0];
  ASSERT_EQ(search.candidates.size(), 4U);  // {2, 8} GPUs x {DDP, ZeRO-3} x baseline
  const ClusterCandidate& ddp2 = search.candidates[0];
  EXPECT_EQ(ddp2.shape.ranks(), 2);
  EXPECT_EQ(ddp2.zero_stage, 0);
  EXPECT_FALSE(ddp2.fits());
  EXPECT_EQ(ddp2.plan.limit, PlanLimit::memory);
  EXPECT_FALSE(ddp2.plan.points.front().fits);
  EXPECT_EQ(ddp2.plan.points.front().batch, 1) << "the search went down to micro-batch 1";
  EXPECT_FALSE(search.candidates[2].fits()) << "DDP on 8 GPUs";
  const ClusterCandidate& zero8 = search.candidates[3];
  EXPECT_EQ(zero8.shape.ranks(), 8);
  EXPECT_EQ(zero8.zero_stage, 3);
  ASSERT_TRUE(zero8.fits());
  std::optional<std::size_t> fastest;
  for (std::size_t i = 0; i < search.candidates.size(); ++i) {
    const ClusterCandidate& c = search.candidates[i];
    if (!c.fits()) continue;
    const StrategyPlan& s = c.plan;
    const std::int64_t share = 16 / c.shape.ranks();
    EXPECT_EQ(*s.best_batch * s.accumulation_steps, share);
    const PlanPoint& p = point_of(s, *s.best_batch);
    EXPECT_DOUBLE_EQ(s.best_samples_per_second, 16.0 / p.iteration_seconds);
    if (s.accumulation_steps == 1) {
      EXPECT_EQ(*s.best_batch, share);
      EXPECT_EQ(s.points.size(), 1U) << "the share alone is simulated when it fits";
    }
    ASSERT_TRUE(s.scaling_efficiency.has_value());
    EXPECT_GT(*s.scaling_efficiency, 0);
    EXPECT_TRUE(s.limit == PlanLimit::network || s.limit == PlanLimit::host || s.limit == PlanLimit::compute);
    if (!fastest || s.best_samples_per_second > search.candidates[*fastest].plan.best_samples_per_second) fastest = i;
  }
  EXPECT_EQ(search.fastest, fastest);
  const std::string text = plan_table_text(plan);
  EXPECT_NE(text.find("Fastest: "), std::string::npos) << text;
  EXPECT_NE(text.find("memory"), std::string::npos) << text;
  const auto j = nlohmann::json::parse(plan_json(plan));
  EXPECT_EQ(j["cluster_search"]["candidates"].size(), 4U);
  EXPECT_EQ(j["cluster_search"]["candidates"][0]["limit"], "memory");
  EXPECT_EQ(j["cluster_search"]["candidates"][0]["fits"], false);
  EXPECT_EQ(j["cluster_search"]["fastest"], *fastest);
}

// Where the target's share does not fit in one step, the largest micro-batch dividing it that
// fits is simulated with as many accumulation steps as the share needs: the point is the run layer's
// own run of the scenario with those steps.
TEST(PlanClusters, AShareThatDoesNotFitIsReachedBySimulatedAccumulation) {
  const Scenario scenario = gpt2_scenario("a100-80gb", "plan: {gpus: [2], zero_stages: [3], target_global_batch: 512}\n", 2048 * kMiB);
  const BatchSizePlan plan = make_plan(scenario, {models::StrategySpec{}}, plan_options_for(scenario, options(0.05, 4096, 2)));
  ASSERT_EQ(plan.cluster_search->candidates.size(), 1U);
  const ClusterCandidate& c = plan.cluster_search->candidates.front();
  ASSERT_TRUE(c.fits());
  const StrategyPlan& s = c.plan;
  EXPECT_FALSE(point_of(s, 256).fits) << "256 per GPU does not fit in 2 GiB";
  const std::int64_t b = *s.best_batch;
  ASSERT_LT(b, 256);
  EXPECT_EQ(256 % b, 0);
  EXPECT_EQ(s.accumulation_steps, 256 / b);
  EXPECT_FALSE(c.accumulation_estimated());
  EXPECT_FALSE(point_of(s, 2 * b).fits) << "the next divisor up was simulated and does not fit";
  const PlanPoint& p = point_of(s, b);
  EXPECT_DOUBLE_EQ(p.samples_per_second, 512.0 / p.iteration_seconds);
  Scenario direct = scenario;
  direct.plan.reset();
  direct.accumulation_steps = static_cast<int>(256 / b);
  direct.parallelism = ParallelismSection{1, 2, {}};
  direct.parallelism->data.ranks = 2;
  direct.parallelism->data.zero_stage = 3;
  const RunOutcome outcome = run_scenario(PreparedScenario(direct), models::StrategySpec{}, b, Isolation::child_process);
  ASSERT_TRUE(std::holds_alternative<CompletedRun>(outcome));
  EXPECT_DOUBLE_EQ(p.iteration_seconds, std::get<CompletedRun>(outcome).result.iteration_seconds);
  EXPECT_NE(plan_table_text(plan).find(fmt::format("micro-batch {} x {} steps per GPU", b, 256 / b)), std::string::npos) << plan_table_text(plan);
}

// ZeRO's sharding lets larger micro-batches fit, on 8 GPUs of 2 GiB: ZeRO-1 shards the optimizer
// state that DDP holds whole (beside DDP's bucket copy of the gradients), ZeRO-3 the parameters
// and gradients too. ZeRO-2 is not compared: on a model this small DeepSpeed's reduction bucket,
// min(5e8, parameters) elements, holds as many bytes as the gradients it shards.
TEST(PlanClusters, ZeroStagesThatSaveMemoryFitLargerMicroBatches) {
  const Scenario scenario = gpt2_scenario(
      "a100-80gb", "plan: {gpus: [8], zero_stages: [0, 1, 2, 3]}\n", 2048 * kMiB);
  const BatchSizePlan plan = make_plan(scenario, {models::StrategySpec{}}, plan_options_for(scenario, options(0.05, 4096, 2)));
  const auto& candidates = plan.cluster_search->candidates;
  ASSERT_EQ(candidates.size(), 4U);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(candidates[i].zero_stage, static_cast<int>(i));
    ASSERT_TRUE(candidates[i].plan.max_batch.has_value()) << i;
    EXPECT_FALSE(candidates[i].plan.max_is_ceiling);
  }
  const auto max = [&](std::size_t stage) { return *candidates[stage].plan.max_batch; };
  EXPECT_GT(max(1), max(0));
  EXPECT_GT(max(3), max(0));
  // Without a target every candidate runs its fastest micro-batch, at batch x 8 / iteration.
  for (const auto& c : candidates) {
    const PlanPoint& p = point_of(c.plan, *c.plan.best_batch);
    EXPECT_DOUBLE_EQ(c.plan.best_samples_per_second, static_cast<double>(*c.plan.best_batch * 8) / p.iteration_seconds);
    EXPECT_EQ(c.plan.accumulation_steps, 1);
  }
}

// plan.comm_hooks: one candidate per DDP communication hook, with DDP only (a note says so for the
// ZeRO stages), each simulated with its hook: the fp16 hook's all-reduces move half the bytes, so
// its exposed communication is never more than plain DDP's at the same micro-batch; the report
// names each (DDP+fp16, DDP+PowerSGD) and the JSON gives the hook.
TEST(PlanClusters, DdpCommunicationHooksAreCandidates) {
  const Scenario scenario = gpt2_scenario("a100-80gb", "plan: {gpus: [8], zero_stages: [0, 3], comm_hooks: [none, fp16, powersgd]}\n", 2048 * kMiB);
  const BatchSizePlan plan = make_plan(scenario, {models::StrategySpec{}}, plan_options_for(scenario, options(0.05, 64, 2)));
  const auto& candidates = plan.cluster_search->candidates;
  ASSERT_EQ(candidates.size(), 4U);
  EXPECT_EQ(candidates[0].comm_hook, models::DdpCommHook::none);
  EXPECT_EQ(candidates[1].comm_hook, models::DdpCommHook::fp16);
  EXPECT_EQ(candidates[2].comm_hook, models::DdpCommHook::powersgd);
  EXPECT_EQ(candidates[3].zero_stage, 3);
  EXPECT_EQ(candidates[3].comm_hook, models::DdpCommHook::none);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(candidates[i].zero_stage, 0);
  EXPECT_THAT(plan.cluster_search->notes, ::testing::Contains(std::string("DDP's communication hooks are tried with PyTorch DDP (stage 0) only")));
  const PlanPoint& plain = point_of(candidates[0].plan, 1);
  const PlanPoint& fp16 = point_of(candidates[1].plan, 1);
  EXPECT_LE(fp16.exposed_communication_seconds, plain.exposed_communication_seconds + 1e-12);
  EXPECT_NE(fp16.iteration_seconds, plain.iteration_seconds) << "the hook was simulated";
  const std::string text = plan_table_text(plan);
  EXPECT_THAT(text, ::testing::HasSubstr("DDP+fp16"));
  EXPECT_THAT(text, ::testing::HasSubstr("DDP+PowerSGD"));
  const auto json = nlohmann::json::parse(plan_json(plan));
  EXPECT_EQ(json["cluster_search"]["comm_hooks"], nlohmann::json({"none", "fp16", "powersgd"}));
  EXPECT_EQ(json["cluster_search"]["candidates"][1]["comm_hook"], "fp16");
  // The CSV's last columns: comm_hook, compressed_collectives, zero_plus_plus (ZeRO-3 rows only), layout, compressed_all_reduce.
  const std::string csv = plan_csv(plan);
  EXPECT_THAT(csv, ::testing::HasSubstr(",comm_hook,compressed_collectives,zero_plus_plus,layout,compressed_all_reduce\n"));
  EXPECT_THAT(csv, ::testing::HasSubstr(",fp16,0,,,\n"));
  EXPECT_THAT(csv, ::testing::HasSubstr(",powersgd,0,,,\n"));
  EXPECT_THAT(csv, ::testing::HasSubstr(",none,0,none,,\n")) << "the ZeRO-3 candidate";
}

// plan.compressed_collectives: each configuration with and without the parallelism section's
// compression, the compressed one simulated with it (its collectives move a quarter of the bytes
// at ratio 4, so its collective time differs), named "+compressed" and flagged in the JSON; true
// without a compression section is an error at its line.
TEST(PlanClusters, CompressedCollectivesAreCandidates) {
  const Scenario scenario = gpt2_scenario("a100-80gb",
                                          "parallelism: {compression: {ratio: 4, compress_bandwidth: 200 GB/s, decompress_bandwidth: 300 GB/s, error_bound: 1e-3}}\n"
                                          "plan: {gpus: [8], zero_stages: [0], compressed_collectives: [false, true]}\n",
                                          2048 * kMiB);
  const BatchSizePlan plan = make_plan(scenario, {models::StrategySpec{}}, plan_options_for(scenario, options(0.05, 64, 2)));
  const auto& candidates = plan.cluster_search->candidates;
  ASSERT_EQ(candidates.size(), 2U);
  EXPECT_FALSE(candidates[0].compressed_collectives);
  EXPECT_TRUE(candidates[1].compressed_collectives);
  EXPECT_NE(point_of(candidates[1].plan, 1).iteration_seconds, point_of(candidates[0].plan, 1).iteration_seconds) << "the compression was simulated";
  EXPECT_THAT(plan_table_text(plan), ::testing::HasSubstr("DDP+compressed"));
  const auto json = nlohmann::json::parse(plan_json(plan));
  EXPECT_EQ(json["cluster_search"]["compressed_collectives"], nlohmann::json({false, true}));
  EXPECT_EQ(json["cluster_search"]["candidates"][1]["compressed_collectives"], true);
  EXPECT_THAT(plan_csv(plan), ::testing::HasSubstr(",none,1,,,ring\n"));
  try {
    (void)parse_scenario(gpt2_yaml("a100-80gb", "plan: {gpus: [8], compressed_collectives: [true]}\n"), "p.yaml", ".");
    ADD_FAILURE() << "accepted without parallelism.compression";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("p.yaml:4:44: 'plan.compressed_collectives[0]' is true but the scenario has no 'parallelism.compression'"));
  }
}

// Compressed all-reduces by recursive doubling: the shapes whose ranks are not a power of two and
// the ZeRO stages (which reduce-scatter) are left out with a note each; 16 GPUs with DDP remain.
TEST(PlanClusters, RecursiveDoublingLeavesOutWhatItCannotRun) {
  const Scenario scenario = gpt2_scenario("dgx-a100-superpod",
                                          "parallelism: {compression: {ratio: 4, compress_bandwidth: 200 GB/s, decompress_bandwidth: 300 GB/s, error_bound: 1e-3, "
                                          "algorithm: recursive_doubling}}\n"
                                          "plan: {gpus: [16, 24], zero_stages: [0, 1], compressed_collectives: [true]}\n",
                                          2048 * kMiB);
  const BatchSizePlan plan = make_plan(scenario, {models::StrategySpec{}}, plan_options_for(scenario, options(0.05, 64, 2)));
  const auto& candidates = plan.cluster_search->candidates;
  ASSERT_EQ(candidates.size(), 1U);
  EXPECT_EQ(candidates[0].shape.ranks(), 16);
  EXPECT_EQ(candidates[0].zero_stage, 0);
  EXPECT_TRUE(candidates[0].compressed_collectives);
  const auto& notes = plan.cluster_search->notes;
  const auto noted = [&](const std::string& text) {
    return std::any_of(notes.begin(), notes.end(), [&](const std::string& n) { return n.find(text) != std::string::npos; });
  };
  EXPECT_TRUE(noted("left out: compressed all-reduces by recursive doubling need a power-of-two number of ranks")) << ::testing::PrintToString(notes);
  EXPECT_TRUE(noted("compressed all-reduces by recursive doubling are tried with PyTorch DDP (stage 0) only")) << ::testing::PrintToString(notes);
}

// plan.compressed_all_reduce: the compressed candidates once per algorithm, recursive doubling
// with DDP only; named "+compressed-rd", its algorithm in the JSON and the CSV's last column; an
// error at its line without compression to choose for, with an unknown or repeated name, and
// when plan.compressed_collectives tries no compression.
TEST(PlanClusters, CompressedAllReduceAlgorithmsAreCandidates) {
  const std::string compression =
      "parallelism: {compression: {ratio: 4, compress_bandwidth: 200 GB/s, decompress_bandwidth: 300 GB/s, error_bound: 1e-3}}\n";
  const Scenario scenario = gpt2_scenario("dgx-a100-superpod",
                                          compression + "plan: {gpus: [16], zero_stages: [0, 1], compressed_collectives: [true], "
                                                        "compressed_all_reduce: [ring, recursive_doubling]}\n",
                                          2048 * kMiB);
  const BatchSizePlan plan = make_plan(scenario, {models::StrategySpec{}}, plan_options_for(scenario, options(0.05, 64, 2)));
  const auto& candidates = plan.cluster_search->candidates;
  ASSERT_EQ(candidates.size(), 3U);
  EXPECT_EQ(candidates[0].zero_stage, 0);
  EXPECT_EQ(candidates[0].compressed_all_reduce, models::CompressedAllReduce::ring);
  EXPECT_EQ(candidates[1].zero_stage, 0);
  EXPECT_EQ(candidates[1].compressed_all_reduce, models::CompressedAllReduce::recursive_doubling);
  EXPECT_EQ(candidates[2].zero_stage, 1);
  EXPECT_EQ(candidates[2].compressed_all_reduce, models::CompressedAllReduce::ring);
  EXPECT_NE(point_of(candidates[1].plan, 1).iteration_seconds, point_of(candidates[0].plan, 1).iteration_seconds) << "the algorithm was simulated";
  EXPECT_THAT(plan.cluster_search->notes, ::testing::Contains(std::string("compressed all-reduces by recursive doubling are tried with PyTorch DDP (stage 0) only")));
  const std::string text = plan_table_text(plan);
  EXPECT_THAT(text, ::testing::HasSubstr("DDP+compressed-rd"));
  EXPECT_THAT(text, ::testing::HasSubstr("their all-reduces: ring, recursive_doubling"));
  const auto json = nlohmann::json::parse(plan_json(plan));
  EXPECT_EQ(json["cluster_search"]["compressed_all_reduce"], nlohmann::json({"ring", "recursive_doubling"}));
  EXPECT_EQ(json["cluster_search"]["candidates"][1]["compressed_all_reduce"], "recursive_doubling");
  const std::string csv = plan_csv(plan);
  EXPECT_THAT(csv, ::testing::HasSubstr(",layout,compressed_all_reduce\n"));
  EXPECT_THAT(csv, ::testing::HasSubstr(",none,1,,,recursive_doubling\n"));
  const auto error = [&](const std::string& plan_line) {
    try {
      (void)parse_scenario(gpt2_yaml("dgx-a100-superpod", plan_line), "p.yaml", ".");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_THAT(error("plan: {gpus: [8], compressed_all_reduce: [ring]}\n"),
              ::testing::HasSubstr("'plan.compressed_all_reduce' chooses how compressed all-reduces run, but the scenario has no 'parallelism.compression'"));
  EXPECT_THAT(error(compression + "plan: {gpus: [8], compressed_all_reduce: [tree]}\n"),
              ::testing::HasSubstr("'plan.compressed_all_reduce[0]' is 'tree'; expected ring or recursive_doubling"));
  EXPECT_THAT(error(compression + "plan: {gpus: [8], compressed_all_reduce: [ring, ring]}\n"),
              ::testing::HasSubstr("'plan.compressed_all_reduce[1]' repeats ring"));
  EXPECT_THAT(error(compression + "plan: {gpus: [8], compressed_collectives: [false], compressed_all_reduce: [ring]}\n"),
              ::testing::HasSubstr("'plan.compressed_collectives' tries none; expected true among them"));
}

// plan.zero_plus_plus: one candidate per ZeRO++ setting with ZeRO-3, none only with the other
// stages (a note says so), each simulated with its options (hpZ over a node's 8 GPUs, int8
// gathers, int4 all-to-alls: across 2 nodes all three change the collectives, so the iteration
// differs from plain ZeRO-3's); the report names each (ZeRO-3+hpZ+qwZ+qgZ) and the search line
// lists them; the JSON gives each candidate's setting and hpZ partition and the list searched.
TEST(PlanClusters, ZeroPlusPlusSettingsAreCandidates) {
  const Scenario scenario = gpt2_scenario("dgx-a100-superpod",
                                          "parallelism: {nodes: 2, gpus_per_node: 8, zero: {stage: 3}}\n"
                                          "plan: {zero_stages: [1, 3], zero_plus_plus: [none, all]}\n",
                                          2048 * kMiB);
  const BatchSizePlan plan = make_plan(scenario, {models::StrategySpec{}}, plan_options_for(scenario, options(0.05, 64, 2)));
  const auto& candidates = plan.cluster_search->candidates;
  ASSERT_EQ(candidates.size(), 3U);
  EXPECT_EQ(candidates[0].zero_stage, 1);
  EXPECT_EQ(candidates[0].zero_plus_plus, ZeroPlusPlus{});
  EXPECT_EQ(candidates[1].zero_stage, 3);
  EXPECT_EQ(candidates[1].zero_plus_plus, ZeroPlusPlus{});
  EXPECT_EQ(candidates[1].hpz_partition_size, 1);
  EXPECT_EQ(candidates[2].zero_stage, 3);
  EXPECT_EQ(candidates[2].zero_plus_plus, (ZeroPlusPlus{true, true, true}));
  EXPECT_EQ(candidates[2].hpz_partition_size, 8) << "a node's GPUs";
  EXPECT_THAT(plan.cluster_search->notes, ::testing::Contains(std::string("ZeRO++'s settings other than none are tried with DeepSpeed ZeRO-3 only")));
  ASSERT_TRUE(candidates[1].fits() && candidates[2].fits());
  const PlanPoint& plain = point_of(candidates[1].plan, 1);
  const PlanPoint& all = point_of(candidates[2].plan, 1);
  EXPECT_NE(all.iteration_seconds, plain.iteration_seconds) << "ZeRO++ was simulated";
  const std::string text = plan_table_text(plan);
  EXPECT_THAT(text, ::testing::HasSubstr("ZeRO-3+hpZ+qwZ+qgZ"));
  EXPECT_THAT(text, ::testing::HasSubstr("(ZeRO++: none, all)"));
  const auto json = nlohmann::json::parse(plan_json(plan));
  EXPECT_EQ(json["cluster_search"]["zero_plus_plus"], nlohmann::json({"none", "all"}));
  EXPECT_EQ(json["cluster_search"]["candidates"][2]["zero_plus_plus"], "all");
  EXPECT_EQ(json["cluster_search"]["candidates"][2]["hpz_partition_size"], 8);
  EXPECT_EQ(json["cluster_search"]["candidates"][1]["zero_plus_plus"], "none");
  EXPECT_THAT(plan_csv(plan), ::testing::HasSubstr(",none,0,all,,\n"));
}

// hpZ's partition is a node's GPUs: on one node the search leaves it out (DeepSpeed leaves it
// unset there), with one note, and tries the quantized options.
TEST(PlanClusters, ZeroPlusPlusHpzNeedsMoreThanOneNode) {
  const Scenario scenario = gpt2_scenario("dgx-a100-superpod",
                                          "parallelism: {nodes: 1, gpus_per_node: 8, zero: {stage: 3}}\n"
                                          "plan: {zero_plus_plus: [hpz, qwz]}\n",
                                          2048 * kMiB);
  const BatchSizePlan plan = make_plan(scenario, {models::StrategySpec{}}, plan_options_for(scenario, options(0.05, 64, 2)));
  const auto& candidates = plan.cluster_search->candidates;
  ASSERT_EQ(candidates.size(), 1U);
  EXPECT_EQ(candidates[0].zero_plus_plus, (ZeroPlusPlus{false, true, false}));
  EXPECT_THAT(plan.cluster_search->notes, ::testing::Contains(::testing::HasSubstr("ZeRO++'s hpz is tried on more than one node")));
}

// Without plan.zero_plus_plus every configuration keeps the scenario's own ZeRO++ options: its qgZ
// runs on every cluster size (the search gives the check the nodes' GPUs, as the run does), and
// the candidates carry it.
TEST(PlanClusters, ScenariosOwnZeroPlusPlusIsKept) {
  const Scenario scenario = gpt2_scenario("dgx-a100-superpod",
                                          "parallelism: {nodes: 2, gpus_per_node: 8, zero: {stage: 3, zero_quantized_gradients: true}}\n"
                                          "plan: {nodes: [1, 2]}\n",
                                          2048 * kMiB);
  const BatchSizePlan plan = make_plan(scenario, {models::StrategySpec{}}, plan_options_for(scenario, options(0.05, 64, 2)));
  const auto& candidates = plan.cluster_search->candidates;
  ASSERT_EQ(candidates.size(), 2U) << (plan.cluster_search->notes.empty() ? "" : plan.cluster_search->notes.front());
  for (const ClusterCandidate& c : candidates) EXPECT_EQ(c.zero_plus_plus, (ZeroPlusPlus{false, false, true}));
  EXPECT_EQ(plan.cluster_search->zero_plus_plus, std::vector<ZeroPlusPlus>{(ZeroPlusPlus{false, false, true})});
}

// qgZ's all-to-alls and hpZ's node-wide partition are modelled over a data-parallel group that
// spans the job: a layout search tries them on its layouts without model parallelism only, with
// one note, and the others with every layout.
TEST(PlanClusters, ZeroPlusPlusQgzAndHpzSkipModelParallelLayouts) {
  const Scenario scenario = parse_scenario(
      "model: {zoo: gpt, layers: 2, hidden: 256, heads: 8, seq_len: 256, vocab: 1024, attention: flash}\n"
      "training: {batch_size: 1, precision: mixed, optimizer: adamw}\n"
      "platform: dgx-a100-superpod\n"
      "parallelism: {nodes: 2, gpus_per_node: 8, zero: {stage: 3}}\n"
      "plan: {target_global_batch: 16, tensor: [1, 2], micro_batches: [1], strategies: [baseline], zero_plus_plus: [qwz, qgz]}\n",
      "l.yaml", ".");
  const BatchSizePlan plan = make_plan(scenario, {models::StrategySpec{}}, plan_options_for(scenario, options(0.05, 64, 2)));
  const auto& candidates = plan.cluster_search->candidates;
  ASSERT_EQ(candidates.size(), 3U);
  EXPECT_EQ(candidates[0].zero_plus_plus, (ZeroPlusPlus{false, true, false}));
  EXPECT_EQ(candidates[0].layout->tensor, 1);
  EXPECT_EQ(candidates[1].zero_plus_plus, (ZeroPlusPlus{false, true, false}));
  EXPECT_EQ(candidates[1].layout->tensor, 2);
  EXPECT_EQ(candidates[2].zero_plus_plus, (ZeroPlusPlus{false, false, true}));
  EXPECT_EQ(candidates[2].layout->tensor, 1);
  EXPECT_THAT(plan.cluster_search->notes, ::testing::Contains(::testing::HasSubstr("ZeRO++'s hpz and qgz are tried on layouts without tensor")));
  // The CSV names each row's layout and ZeRO++ setting.
  EXPECT_THAT(plan_csv(plan), ::testing::HasSubstr(",none,0,qwz," + describe_layout(*candidates[1].layout, candidates[1].shape.ranks())));
}

// Two nodes of a DGX A100 SuperPOD: plan.nodes fills whole nodes; the search is the same for any -j.
TEST(PlanClusters, NodesOfACluster) {
  const Scenario scenario = gpt2_scenario("dgx-a100-superpod", "plan: {nodes: [1, 2], target_global_batch: 32}\n");
  PlanOptions o = plan_options_for(scenario, options(0.05, 64, 1));
  const std::string one = plan_json(make_plan(scenario, {models::StrategySpec{}}, o));
  o.jobs = 2;
  const BatchSizePlan plan = make_plan(scenario, {models::StrategySpec{}}, o);
  EXPECT_EQ(one, plan_json(plan));
  const auto& candidates = plan.cluster_search->candidates;
  ASSERT_EQ(candidates.size(), 2U);
  EXPECT_EQ(candidates[0].shape.nodes, 1);
  EXPECT_EQ(candidates[1].shape.nodes, 2);
  EXPECT_EQ(candidates[1].shape.gpus_per_node, 8);
  for (const auto& c : candidates) {
    ASSERT_TRUE(c.fits());
    EXPECT_EQ(*c.plan.best_batch, 32 / c.shape.ranks());
    const PlanPoint& p = point_of(c.plan, *c.plan.best_batch);
    EXPECT_DOUBLE_EQ(p.samples_per_second, 32.0 / p.iteration_seconds);
  }
  EXPECT_NE(plan_csv(plan).find(",16,2,8,0,"), std::string::npos) << "gpus, nodes, gpus_per_node, zero_stage columns";
}

// Where the optimizer steps is a dimension of the search: on the GPU, ZeRO-Offload (the CPU) and
// Deep Optimizer States with each gap k; each candidate is the run layer's own run of the scenario
// with that offload section, and the fastest is chosen among all of them, so the planner picks k.
// DDP has no offloaded optimizer: only its GPU candidate is planned, with one note.
TEST(PlanClusters, TheSearchChoosesWhereTheOptimizerStepsAndDeepOptimizerStatesGap) {
  const Scenario scenario = gpt2_scenario("a100-80gb",
                                          "parallelism: {gpus_per_node: 2, zero: {stage: 3, sub_group_size: 2000000}}\n"
                                          "plan: {zero_stages: [0, 3], offload_optimizer: [none, cpu, deep_optimizer_states], prefetch_optimizer_gaps: [2, 4]}\n");
  ASSERT_EQ(scenario.plan->offload_optimizer.size(), 4U);
  const BatchSizePlan plan = make_plan(scenario, {models::StrategySpec{}}, plan_options_for(scenario, options(0.05, 2, 2)));
  const ClusterSearch& search = *plan.cluster_search;
  ASSERT_EQ(search.candidates.size(), 5U) << "DDP on the GPU; ZeRO-3 on the GPU, the CPU, DOS k=2 and k=4";
  const std::vector<std::string> places = {"GPU", "GPU", "CPU", "DOS k=2", "DOS k=4"};
  std::optional<std::size_t> fastest;
  for (std::size_t i = 0; i < search.candidates.size(); ++i) {
    const ClusterCandidate& c = search.candidates[i];
    EXPECT_EQ(models::optimizer_place(c.offload_optimizer), places[i]) << i;
    EXPECT_EQ(c.zero_stage, i == 0 ? 0 : 3) << i;
    ASSERT_TRUE(c.fits()) << i;
    if (!fastest || c.plan.best_samples_per_second > search.candidates[*fastest].plan.best_samples_per_second) fastest = i;
    // The candidate is the scenario with that offload section, as `simulate` runs it.
    Scenario direct = scenario;
    direct.plan.reset();
    direct.parallelism->data.zero_stage = c.zero_stage;
    direct.parallelism->data.offload_optimizer = c.offload_optimizer;
    const RunOutcome outcome = run_scenario(PreparedScenario(direct), models::StrategySpec{}, *c.plan.best_batch, Isolation::child_process);
    ASSERT_TRUE(std::holds_alternative<CompletedRun>(outcome)) << i;
    EXPECT_DOUBLE_EQ(point_of(c.plan, *c.plan.best_batch).iteration_seconds, std::get<CompletedRun>(outcome).result.iteration_seconds) << i;
  }
  EXPECT_EQ(search.fastest, fastest);
  // The gaps make different schedules: k = 2 steps every second subgroup on the GPU, k = 4 every fourth.
  EXPECT_NE(point_of(search.candidates[3].plan, *search.candidates[3].plan.best_batch).iteration_seconds,
            point_of(search.candidates[4].plan, *search.candidates[4].plan.best_batch).iteration_seconds);
  ASSERT_EQ(search.notes.size(), 1U);
  EXPECT_NE(search.notes[0].find("DDP (stage 0) keeps its optimizer on the GPU"), std::string::npos) << search.notes[0];
  const std::string text = plan_table_text(plan);
  EXPECT_NE(text.find("x optimizer on GPU, CPU, DOS k=2, DOS k=4 x"), std::string::npos) << text;
  EXPECT_NE(text.find("Fastest: 2 GPUs (1 node x 2), " + std::string(search.candidates[*fastest].zero_stage == 0 ? "DDP" : "ZeRO-3") + ", optimizer on " + places[*fastest]),
            std::string::npos)
      << text;
  const auto j = nlohmann::json::parse(plan_json(plan));
  EXPECT_TRUE(j["cluster_search"]["candidates"][1]["offload_optimizer"].is_null());
  EXPECT_EQ(j["cluster_search"]["candidates"][3]["offload_optimizer"]["prefetch_optimizer_gap"], 2);
  EXPECT_TRUE(j["cluster_search"]["candidates"][2]["offload_optimizer"]["prefetch_optimizer_gap"].is_null());
  EXPECT_EQ(j["cluster_search"]["offload_optimizer"].size(), 4U);
  EXPECT_NE(plan_csv(plan).find(",DOS k=4,"), std::string::npos) << "the optimizer column, then the I/O and energy ones";
}

TEST(PlanClusters, BadPlanKeysNameTheirLine) {
  const auto error_of = [](const std::string& platform, const std::string& plan) {
    try {
      (void)parse_scenario(gpt2_yaml(platform, "plan:\n" + plan), "p.yaml", ".");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("a100-80gb", "  gpus: [8, 12]\n").find("p.yaml:5:13: 'plan.gpus' has 12 GPUs, which do not fill whole nodes of 8"), std::string::npos)
      << error_of("a100-80gb", "  gpus: [8, 12]\n");
  EXPECT_NE(error_of("a100-80gb", "  gpus: [16]\n").find("p.yaml:5:10: 'plan.gpus' asks for 2 nodes but platform 'a100-80gb' has 1 (no network)"),
            std::string::npos)
      << error_of("a100-80gb", "  gpus: [16]\n");
  EXPECT_NE(error_of("dgx-a100-superpod", "  nodes: [1, 2, 1]\n").find("p.yaml:5:17: 'plan.nodes[2]' repeats 1"), std::string::npos)
      << error_of("dgx-a100-superpod", "  nodes: [1, 2, 1]\n");
  EXPECT_NE(error_of("a100-80gb", "  zero_stages: [0, 4]\n").find("p.yaml:5:20: 'plan.zero_stages[1]' is '4'; expected an integer from 0 to 3"),
            std::string::npos)
      << error_of("a100-80gb", "  zero_stages: [0, 4]\n");
  EXPECT_NE(error_of("a100-80gb", "  gpus: [8]\n  nodes: [1]\n").find("p.yaml:6:10: 'plan' has both 'gpus' and 'nodes'"), std::string::npos)
      << error_of("a100-80gb", "  gpus: [8]\n  nodes: [1]\n");
  EXPECT_NE(error_of("a100-80gb", "  gpus: []\n").find("p.yaml:5:9: 'plan.gpus' must be a non-empty list"), std::string::npos)
      << error_of("a100-80gb", "  gpus: []\n");
  EXPECT_NE(error_of("a100-80gb", "  gpus: [0]\n").find("'plan.gpus[0]' is '0'; expected an integer from 1"), std::string::npos);
  EXPECT_NE(error_of("a100-80gb", "  offload_optimizer: [gpu]\n").find("p.yaml:5:23: 'plan.offload_optimizer[0]' is 'gpu'; expected none"), std::string::npos)
      << error_of("a100-80gb", "  offload_optimizer: [gpu]\n");
  EXPECT_NE(error_of("a100-80gb", "  offload_optimizer: [cpu, cpu]\n").find("'plan.offload_optimizer[1]' repeats cpu"), std::string::npos);
  EXPECT_NE(error_of("a100-80gb", "  offload_optimizer: [cpu]\n  prefetch_optimizer_gaps: [2]\n")
                .find("p.yaml:6:28: 'plan.prefetch_optimizer_gaps' without deep_optimizer_states"),
            std::string::npos)
      << error_of("a100-80gb", "  offload_optimizer: [cpu]\n  prefetch_optimizer_gaps: [2]\n");
  EXPECT_NE(error_of("a100-80gb", "  offload_optimizer: [deep_optimizer_states]\n  prefetch_optimizer_gaps: [0]\n")
                .find("'plan.prefetch_optimizer_gaps[0]' is '0'; expected an integer from 1"),
            std::string::npos);
  EXPECT_NE(error_of("a100-80gb", "  prefetch_optimizer_gaps: [2]\n").find("without 'plan.offload_optimizer'"), std::string::npos);
  EXPECT_NE(error_of("a100-80gb", "  comm_hooks: [none, int8]\n").find("p.yaml:5:22: 'plan.comm_hooks[1]' is 'int8'; expected none, fp16, bf16 or powersgd"),
            std::string::npos)
      << error_of("a100-80gb", "  comm_hooks: [none, int8]\n");
  EXPECT_NE(error_of("a100-80gb", "  comm_hooks: [fp16, fp16]\n").find("'plan.comm_hooks[1]' repeats fp16"), std::string::npos);
  EXPECT_NE(error_of("a100-80gb", "  comm_hooks: []\n").find("p.yaml:5:15: 'plan.comm_hooks' must be a non-empty list"), std::string::npos)
      << error_of("a100-80gb", "  comm_hooks: []\n");
  // plan.zero_plus_plus: ZeRO++ settings by name, distinct, with ZeRO-3 among the stages searched.
  const auto zero3_error_of = [](const std::string& plan) {
    try {
      (void)parse_scenario(gpt2_yaml("dgx-a100-superpod", "parallelism: {nodes: 2, gpus_per_node: 8, zero: {stage: 3}}\nplan:\n" + plan), "p.yaml", ".");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(zero3_error_of("  zero_plus_plus: hpz\n"), ::testing::HasSubstr("p.yaml:6:19: 'plan.zero_plus_plus' must be a non-empty list of ZeRO++ settings"));
  EXPECT_THAT(zero3_error_of("  zero_plus_plus: []\n"), ::testing::HasSubstr("p.yaml:6:19: 'plan.zero_plus_plus' must be a non-empty list"));
  EXPECT_THAT(zero3_error_of("  zero_plus_plus: [none, hpz+qwz+qgz]\n"),
              ::testing::HasSubstr("p.yaml:6:26: 'plan.zero_plus_plus[1]' is 'hpz+qwz+qgz'; expected none, hpz, qwz, qgz, hpz+qwz, hpz+qgz, qwz+qgz or all"));
  EXPECT_THAT(zero3_error_of("  zero_plus_plus: [[hpz]]\n"), ::testing::HasSubstr("p.yaml:6:20: 'plan.zero_plus_plus[0]' is 'a collection'"));
  EXPECT_THAT(zero3_error_of("  zero_plus_plus: [qwz, hpz, qwz]\n"), ::testing::HasSubstr("p.yaml:6:30: 'plan.zero_plus_plus[2]' repeats qwz; expected distinct settings"));
  EXPECT_THAT(zero3_error_of("  zero_stages: [1, 2]\n  zero_plus_plus: [none, all]\n"),
              ::testing::HasSubstr("p.yaml:7:19: 'plan.zero_plus_plus' tries ZeRO++, which DeepSpeed runs with ZeRO-3, but the search's stages are plan.zero_stages"));
  EXPECT_EQ(zero3_error_of("  zero_stages: [1, 3]\n  zero_plus_plus: [none, all]\n"), "no error");
  EXPECT_THAT(error_of("dgx-a100-superpod", "  zero_plus_plus: [qgz]\n"),
              ::testing::HasSubstr("p.yaml:5:19: 'plan.zero_plus_plus' tries ZeRO++, which DeepSpeed runs with ZeRO-3, but the search's stages are the scenario's own (0)"));
  try {
    (void)parse_scenario(gpt2_yaml("dgx-a100-superpod", "parallelism: {nodes: 2, gpus_per_node: 8, fsdp: {units: [\"h.*\"]}}\nplan:\n  zero_plus_plus: [none, all]\n"), "p.yaml", ".");
    ADD_FAILURE() << "accepted with fsdp";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("p.yaml:6:19: 'plan.zero_plus_plus' searches DeepSpeed configurations, but 'parallelism.fsdp' fixes PyTorch FSDP2"));
  }
  // GPU counts fill the parallelism section's nodes when it has one.
  const Scenario s = parse_scenario(gpt2_yaml("dgx-a100-superpod", "parallelism: {gpus_per_node: 4}\nplan: {gpus: [2, 4, 8]}\n"), "p.yaml", ".");
  ASSERT_EQ(s.plan->cluster_sizes.size(), 3U);
  EXPECT_EQ(s.plan->cluster_sizes[0].nodes, 1);
  EXPECT_EQ(s.plan->cluster_sizes[0].gpus_per_node, 2);
  EXPECT_EQ(s.plan->cluster_sizes[2].nodes, 2);
  EXPECT_EQ(s.plan->cluster_sizes[2].gpus_per_node, 4);
}

// The round-decision state machine on synthetic points: no simulation, no fork.
namespace search_rounds {

using planner::Search;

// Simulates a round as if every batch up to `largest_fit` fits and none above it does.
void answer(Search& s, std::int64_t largest_fit) {
  for (const std::int64_t b : s.round) {
    PlanPoint p;
    p.batch = b;
    p.fits = b <= largest_fit;
    s.points[b] = p;
  }
}

// Runs the search to its end; returns every batch probed, in order.
std::vector<std::int64_t> run(Search& s, const std::vector<std::int64_t>& divisors, int width, std::int64_t ceiling, std::int64_t largest_fit) {
  std::vector<std::int64_t> probed;
  while (s.phase != Search::Phase::done) {
    s.round = planner::next_round(s, divisors, width, ceiling);
    if (s.round.empty()) break;
    probed.insert(probed.end(), s.round.begin(), s.round.end());
    answer(s, largest_fit);
    planner::decide(s, divisors);
  }
  return probed;
}

TEST(PlanSearch, GrowsByPowersOfTwoThenBisectsToTheLargestFit) {
  Search s;
  const auto probed = run(s, {}, 3, 65536, 37);
  EXPECT_EQ(s.lo, 37);
  EXPECT_EQ(s.hi, 38);
  EXPECT_EQ(std::vector<std::int64_t>(probed.begin(), probed.begin() + 6), (std::vector<std::int64_t>{1, 2, 4, 8, 16, 32})) << "growth, three per round";
  for (const std::int64_t b : probed) EXPECT_TRUE(s.points.count(b));
}

TEST(PlanSearch, TheCeilingIsTheLastGrowthProbe) {
  Search s;
  const auto probed = run(s, {}, 3, 6, 1000);
  EXPECT_EQ(probed, (std::vector<std::int64_t>{1, 2, 4, 6}));
  EXPECT_EQ(s.lo, 6) << "the ceiling fits: the search ends there";
  EXPECT_EQ(s.hi, 0);
}

TEST(PlanSearch, NothingFitsEndsAfterTheFirstRound) {
  Search s;
  const auto probed = run(s, {}, 3, 65536, 0);
  EXPECT_EQ(probed, (std::vector<std::int64_t>{1, 2, 4}));
  EXPECT_EQ(s.lo, 0);
  EXPECT_EQ(s.hi, 1);
}

TEST(PlanSearch, AnOutOfMemoryInsideTheRoundBoundsItFromAbove) {
  // Batch 2 out of memory but 4 fitting (not monotone): the first failure bounds the interval.
  Search s;
  s.round = planner::next_round(s, {}, 3, 65536);
  ASSERT_EQ(s.round, (std::vector<std::int64_t>{1, 2, 4}));
  for (const std::int64_t b : s.round) {
    PlanPoint p;
    p.batch = b;
    p.out_of_memory = b == 2;
    p.fits = b != 2;
    s.points[b] = p;
  }
  planner::decide(s, {});
  EXPECT_EQ(s.lo, 1);
  EXPECT_EQ(s.hi, 2);
  EXPECT_EQ(s.phase, Search::Phase::done);
}

TEST(PlanSearch, DivisorsTryTheWholeShareFirstThenBisect) {
  const std::vector<std::int64_t> divisors{1, 2, 4, 8, 16, 32, 64};  // a share of 64
  Search whole;
  whole.phase = Search::Phase::first;
  EXPECT_EQ(run(whole, divisors, 3, 65536, 64), (std::vector<std::int64_t>{64})) << "the share fits in one step: one simulation";
  EXPECT_EQ(whole.lo, 64);

  Search split;
  split.phase = Search::Phase::first;
  const auto probed = run(split, divisors, 3, 65536, 8);
  EXPECT_EQ(probed.front(), 64);
  EXPECT_EQ(split.lo, 8);
  EXPECT_EQ(split.hi, 16);
  for (const std::int64_t b : probed) EXPECT_TRUE(std::binary_search(divisors.begin(), divisors.end(), b)) << b << " divides the share";
}

}  // namespace search_rounds

TEST(PlanWire, APointAndItsNoteCrossThePipeBitForBit) {
  planner::ProbedPoint sent;
  sent.point.batch = 48;
  sent.point.fits = true;
  sent.point.inapplicable = true;
  sent.point.peak_bytes = 123456789012;
  sent.point.device_peak_bytes = 987654321;
  sent.point.iteration_seconds = 0.1 + 0.2;
  sent.point.mean_iteration_seconds = 1.0 / 3.0;
  sent.point.io_modelled = true;
  sent.point.io_bound = IterationBound::storage;
  sent.point.checkpoint_interval_for_target = 17;
  sent.point.node_average_watts = 5432.125;
  sent.note = "does not apply: no tensor selected";
  const planner::ProbedPoint back = wire::decode<planner::ProbedPoint>(wire::encode(sent));
  EXPECT_EQ(back.point.batch, 48);
  EXPECT_TRUE(back.point.fits && back.point.inapplicable && !back.point.out_of_memory && back.point.io_modelled);
  EXPECT_EQ(back.point.peak_bytes, 123456789012);
  EXPECT_EQ(back.point.device_peak_bytes, 987654321);
  EXPECT_EQ(std::memcmp(&back.point.iteration_seconds, &sent.point.iteration_seconds, sizeof(double)), 0) << "doubles bit for bit";
  EXPECT_EQ(std::memcmp(&back.point.mean_iteration_seconds, &sent.point.mean_iteration_seconds, sizeof(double)), 0);
  EXPECT_EQ(back.point.io_bound, IterationBound::storage);
  EXPECT_EQ(back.point.checkpoint_interval_for_target, 17);
  EXPECT_EQ(back.point.node_average_watts, 5432.125);
  EXPECT_EQ(back.note, sent.note);
  EXPECT_EQ(wire::encode(back), wire::encode(sent)) << "every field read back as written";
  EXPECT_THROW(wire::decode<planner::ProbedPoint>(wire::encode(sent).substr(0, 40)), std::runtime_error) << "a truncated point is refused";
}

}  // namespace
}  // namespace comptrain::sim

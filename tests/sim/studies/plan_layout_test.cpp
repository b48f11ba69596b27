// The planner's layout search (studies/plan.hpp, "Layout search"): tensor x pipeline degrees over
// a cluster, each layout's micro-batches dividing its replica's share of a global batch, each
// simulated as simulate runs it, and the layouts that cannot hold their state left out by a bound.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include <nlohmann/json.hpp>

#include "comptrain/sim/report/plan_report.hpp"
#include "comptrain/sim/run/run.hpp"
#include "comptrain/sim/studies/plan.hpp"
#include "comptrain/support/input_error.hpp"
#include "studies/plan/search.hpp"

namespace comptrain::sim {
namespace {

using ::testing::HasSubstr;

// A small GPT (4 layers, 8 heads) on one node of 8 H100s under Megatron's distributed optimizer.
std::string gpt_yaml(const std::string& plan) {
  return "model: {zoo: gpt, layers: 4, hidden: 256, heads: 8, seq_len: 256, vocab: 1024, attention: flash}\n"
         "training: {batch_size: 1, precision: mixed, optimizer: adamw}\n"
         "platform: dgx-h100-superpod\n"
         "parallelism: {nodes: 1, gpus_per_node: 8, zero: {stage: 1}}\n"
         "plan:\n" +
         plan;
}

PlanOptions quiet(PlanOptions o) {
  o.jobs = 2;
  o.progress = false;
  return o;
}

const ClusterCandidate& candidate(const ClusterSearch& search, int tensor, int pipeline) {
  const auto it = std::find_if(search.candidates.begin(), search.candidates.end(),
                               [&](const ClusterCandidate& c) { return c.layout && c.layout->tensor == tensor && c.layout->pipeline == pipeline; });
  EXPECT_NE(it, search.candidates.end()) << "TP " << tensor << " x PP " << pipeline;
  return *it;
}

TEST(PlanLayouts, EachLayoutRunsItsReplicasShareAndThePipelineOnesAreReplayedStageByStage) {
  const Scenario scenario = parse_scenario(gpt_yaml("  target_global_batch: 16\n  tensor: [1, 2]\n  pipeline: [1, 2]\n  micro_batches: [1, 2]\n"
                                                    "  strategies: [baseline]\n"),
                                           "l.yaml", ".");
  const BatchSizePlan plan = make_plan(scenario, strategies_to_plan(scenario), quiet(plan_options_for(scenario)));
  ASSERT_TRUE(plan.cluster_search.has_value());
  const ClusterSearch& search = *plan.cluster_search;
  EXPECT_TRUE(search.layouts);
  ASSERT_EQ(search.candidates.size(), 4U) << "{1, 2} x {1, 2}";
  std::optional<std::size_t> fastest;
  for (std::size_t i = 0; i < search.candidates.size(); ++i) {
    const ClusterCandidate& c = search.candidates[i];
    ASSERT_TRUE(c.layout.has_value());
    EXPECT_EQ(c.layout->sequence_parallel, c.layout->tensor > 1) << "plan.sequence_parallel defaults to true";
    ASSERT_TRUE(c.fits()) << describe_layout(*c.layout, 8);
    const StrategyPlan& s = c.plan;
    const int replicas = 8 / (c.layout->tensor * c.layout->pipeline);
    EXPECT_EQ(*s.best_batch * s.accumulation_steps * replicas, 16) << "micro-batch x steps x DP is the global batch";
    EXPECT_EQ(s.points.size(), 2U) << "every micro-batch tried (1 and 2 divide every share) is simulated";
    const PlanPoint& best = *point_at(s, *s.best_batch);
    EXPECT_DOUBLE_EQ(s.best_samples_per_second, 16.0 / best.iteration_seconds);
    for (const PlanPoint& p : s.points) {
      if (c.layout->pipeline > 1) {
        EXPECT_GT(p.bubble_seconds, 0) << "a pipeline's stages wait for each other";
      } else {
        EXPECT_EQ(p.bubble_seconds, 0);
      }
    }
    EXPECT_EQ(s.scaling_efficiency.has_value(), c.layout->is_data_parallel_only() && !c.layout->sequence_parallel)
        << "no one-GPU reference for what a layout splits";
    if (!fastest || s.best_samples_per_second > search.candidates[*fastest].plan.best_samples_per_second) fastest = i;
  }
  EXPECT_EQ(search.fastest, fastest);

  // The pipeline candidate's point is simulate's run of that layout: the same iteration and the
  // highest stage's peak.
  const ClusterCandidate& pp = candidate(search, 2, 2);
  Scenario same = scenario;
  same.plan.reset();
  same.parallelism->layout = *pp.layout;
  same.accumulation_steps = static_cast<int>(pp.plan.accumulation_steps);
  const PreparedScenario prepared(same);
  const PipelineOutcome outcome = run_pipeline(prepared, models::StrategySpec{}, *pp.plan.best_batch, Isolation::child_process);
  const PipelineRun& run = std::get<PipelineRun>(outcome);
  const PlanPoint& p = *point_at(pp.plan, *pp.plan.best_batch);
  EXPECT_DOUBLE_EQ(p.iteration_seconds, run.result.iteration_seconds);
  std::int64_t reserved = 0;
  for (const SimulationResult& stage : run.result.stages) reserved = std::max(reserved, stage.device.peak_reserved);
  EXPECT_EQ(p.reserved_peak_bytes, reserved);

  const std::string text = plan_table_text(plan);
  EXPECT_THAT(text, HasSubstr("TP 2 (SP) x PP 2 x DP 2, ZeRO-1"));
  EXPECT_THAT(text, HasSubstr("x 4 layouts simulated"));
  const auto j = nlohmann::json::parse(plan_json(plan));
  const auto& first = j["cluster_search"]["candidates"][0];
  EXPECT_EQ(first["layout"]["tensor"], 1);
  EXPECT_EQ(first["layout"]["data"], 8);
  EXPECT_TRUE(first.contains("bubble_seconds"));
}

TEST(PlanLayouts, ALayoutThatCannotHoldItsStateIsLeftOutWithItsBound) {
  Scenario scenario = parse_scenario(gpt_yaml("  target_global_batch: 8\n  tensor: [1, 8]\n  pipeline: [1]\n  micro_batches: [1]\n  strategies: [baseline]\n"),
                                     "l.yaml", ".");
  // The whole model's weights, gradients and (sharded) optimizer state on one rank, and on one
  // of 8 tensor-parallel ranks: a GPU between the two keeps TP 8 only.
  Scenario whole = scenario;
  whole.plan.reset();
  const std::int64_t tp1 = resident_state_bytes(PreparedScenario(whole));
  whole.parallelism->layout.tensor = 8;
  whole.parallelism->layout.sequence_parallel = true;
  const std::int64_t tp8 = resident_state_bytes(PreparedScenario(whole));
  // ZeRO-1 shards the optimizer state over the data-parallel ranks: 8 of them under TP 1, one under
  // TP 8, which holds an eighth of the weights: 4 + 12 / 8 bytes a parameter against 16 / 8.
  ASSERT_LT(tp8, tp1 / 2);
  const std::int64_t capacity = (tp1 + tp8) / 2;
  scenario.platform->gpu.memory_bytes = capacity;
  scenario.platform->gpu.memory_visible_bytes = capacity;
  scenario.platform->gpu.cuda_context_bytes = 0;
  PlanOptions o = plan_options_for(scenario);
  o.margin = 0;
  const BatchSizePlan plan = make_plan(scenario, strategies_to_plan(scenario), quiet(o));
  const ClusterSearch& search = *plan.cluster_search;
  ASSERT_EQ(search.candidates.size(), 1U);
  EXPECT_EQ(search.candidates[0].layout->tensor, 8);
  ASSERT_EQ(search.notes.size(), 1U);
  EXPECT_THAT(search.notes[0], HasSubstr("TP 1 x PP 1 x DP 8: left out: memory: its weights, gradients and optimizer state alone take"));
}

TEST(PlanLayouts, LayoutsTheModelDoesNotAllowAreNotesAndBadKeysNameTheirLine) {
  const Scenario scenario = parse_scenario(gpt_yaml("  target_global_batch: 8\n  tensor: [3]\n  pipeline: [8]\n"), "l.yaml", ".");
  const BatchSizePlan plan = make_plan(scenario, {models::StrategySpec{}}, quiet(plan_options_for(scenario)));
  EXPECT_TRUE(plan.cluster_search->candidates.empty());
  ASSERT_EQ(plan.cluster_search->notes.size(), 1U);
  EXPECT_THAT(plan.cluster_search->notes[0], HasSubstr("left out: parallelism."));
  EXPECT_THAT(plan_table_text(plan), HasSubstr("Fastest: none"));

  const auto error_of = [](const std::string& plan_keys) {
    try {
      (void)parse_scenario(gpt_yaml(plan_keys), "l.yaml", ".");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error_of("  tensor: all\n"), HasSubstr("l.yaml:6:11: a layout search (plan.tensor, plan.pipeline) divides a global batch"));
  EXPECT_THAT(error_of("  target_global_batch: 8\n  tensor: [0]\n"), HasSubstr("l.yaml:7:12: 'plan.tensor[0]' is '0'"));
  EXPECT_THAT(error_of("  target_global_batch: 8\n  pipeline: [2, 2]\n"), HasSubstr("'plan.pipeline[1]' repeats 2"));
  EXPECT_THAT(error_of("  target_global_batch: 8\n  tensor: some\n"), HasSubstr("'plan.tensor' must be `all` or a non-empty list of degrees"));
  EXPECT_THAT(error_of("  target_global_batch: 8\n  micro_batches: [1]\n"), HasSubstr("'plan.micro_batches' without a layout search"));
  EXPECT_THAT(error_of("  target_global_batch: 8\n  tensor: all\n  micro_batches: []\n"), HasSubstr("'plan.micro_batches' must be a non-empty list"));
}

TEST(PlanLayouts, EveryDivisorIsProbedInOneRound) {
  planner::Search s;
  s.phase = planner::Search::Phase::first;
  s.every_divisor = true;
  const std::vector<std::int64_t> divisors{1, 2, 4};
  EXPECT_EQ(planner::next_round(s, divisors, 1, 65536), divisors);
  s.round = divisors;
  for (const std::int64_t b : divisors) {
    PlanPoint p;
    p.batch = b;
    p.fits = b < 4;
    s.points[b] = p;
  }
  planner::decide(s, divisors);
  EXPECT_EQ(s.phase, planner::Search::Phase::done);
  EXPECT_EQ(s.lo, 2);
  EXPECT_EQ(s.hi, 4);
}

}  // namespace
}  // namespace comptrain::sim

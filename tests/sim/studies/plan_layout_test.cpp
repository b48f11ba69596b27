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
#include "studies/plan/cluster_search.hpp"
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

// The layout search's expansion of `scenario` on one node of 8 GPUs with memory to spare: the
// units it would simulate (into `units`) and its notes.
ClusterSearch expand_on_one_node(const Scenario& scenario, std::vector<planner::ClusterUnit>& units) {
  const PlanRequest request{scenario, strategies_to_plan(scenario), plan_options_for(scenario), "", std::nullopt};
  BatchSizePlan header;
  header.limit_bytes = std::int64_t{1} << 40;
  header.cluster = {1, 8};
  return planner::expand_cluster_search(request, header, units);
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


// plan.virtual_stages and plan.context: every (V, C) the model allows, each a layout of its own
// (V > 1 under the interleaved schedule), with its degrees in the report and the JSON.
TEST(PlanLayouts, VirtualStagesAndContextDegreesAreSearched) {
  const Scenario scenario = parse_scenario(gpt_yaml("  target_global_batch: 16\n  tensor: [1]\n  pipeline: [2]\n  virtual_stages: [1, 2, 4]\n"
                                                    "  context: [1, 2]\n  micro_batches: [1, 2]\n  strategies: [baseline]\n"),
                                           "l.yaml", ".");
  const BatchSizePlan plan = make_plan(scenario, strategies_to_plan(scenario), quiet(plan_options_for(scenario)));
  const ClusterSearch& search = *plan.cluster_search;
  // V 4 x P 2 needs 8 layers (the model has 4): both of its context degrees are notes.
  ASSERT_EQ(search.candidates.size(), 4U) << "{V 1, V 2} x {C 1, C 2}";
  for (const ClusterCandidate& c : search.candidates) {
    ASSERT_TRUE(c.layout.has_value());
    EXPECT_EQ(c.layout->schedule, c.layout->virtual_stages > 1 ? models::PipelineSchedule::interleaved : models::PipelineSchedule::one_f_one_b);
    ASSERT_TRUE(c.fits()) << describe_layout(*c.layout, 8);
    const int replicas = 8 / (c.layout->pipeline * c.layout->context);
    EXPECT_EQ(*c.plan.best_batch * c.plan.accumulation_steps * replicas, 16);
  }
  EXPECT_EQ(search.notes.size(), 2U);
  for (const std::string& note : search.notes) EXPECT_THAT(note, HasSubstr("TP 1 x PP 2 x VP 4"));
  EXPECT_THAT(search.notes[1], HasSubstr("TP 1 x PP 2 x VP 4 x CP 2: left out: parallelism."));
  const std::string text = plan_table_text(plan);
  EXPECT_THAT(text, HasSubstr("TP 1 x PP 2 x VP 2 x CP 2 x DP 2, ZeRO-1"));
  EXPECT_THAT(text, HasSubstr("x 4 layouts simulated"));
  const auto j = nlohmann::json::parse(plan_json(plan));
  const auto& last = j["cluster_search"]["candidates"][3];
  EXPECT_EQ(last["layout"]["virtual_stages"], 2);
  EXPECT_EQ(last["layout"]["context"], 2);
  EXPECT_EQ(last["layout"]["pipeline_schedule"], "interleaved");
}

// plan.virtual_stages: all -- per pipeline degree, 1 and every V >= 2 with P x V dividing the 4
// layers: P 1 tries V 1 only (no interleaving without a pipeline), P 2 V 1 and 2, P 4 V 1 (4 x 2 > 4).
// No layout is left out for its V.
TEST(PlanLayouts, AllVirtualStagesAreTheCountsThatSplitEachPipelinesLayersEvenly) {
  const Scenario scenario = parse_scenario(gpt_yaml("  target_global_batch: 48\n  tensor: [1]\n  pipeline: [1, 2, 4]\n  virtual_stages: all\n"
                                                    "  micro_batches: [1]\n  strategies: [baseline]\n"),
                                           "l.yaml", ".");
  ASSERT_TRUE(scenario.plan->all_virtual_stages);
  std::vector<planner::ClusterUnit> units;
  const ClusterSearch search = expand_on_one_node(scenario, units);
  std::vector<std::pair<int, int>> layouts;
  for (const planner::ClusterUnit& u : units) layouts.emplace_back(u.scenario.parallelism->layout.pipeline, u.scenario.parallelism->layout.virtual_stages);
  EXPECT_EQ(layouts, (std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {2, 2}, {4, 1}}));
  EXPECT_TRUE(search.notes.empty());
  for (const planner::ClusterUnit& u : units) {
    EXPECT_EQ(u.scenario.parallelism->layout.schedule,
              u.scenario.parallelism->layout.virtual_stages > 1 ? models::PipelineSchedule::interleaved : models::PipelineSchedule::one_f_one_b);
  }
  // An 8-layer model on P 2: V 1, 2 and 4 (2 x 3 does not divide 8).
  std::string eight = gpt_yaml("  target_global_batch: 48\n  tensor: [1]\n  pipeline: [2]\n  virtual_stages: all\n  micro_batches: [1]\n  strategies: [baseline]\n");
  eight.replace(eight.find("layers: 4"), 9, "layers: 8");
  std::vector<planner::ClusterUnit> eight_units;
  (void)expand_on_one_node(parse_scenario(eight, "l.yaml", "."), eight_units);
  std::vector<int> counts;
  for (const planner::ClusterUnit& u : eight_units) counts.push_back(u.scenario.parallelism->layout.virtual_stages);
  EXPECT_EQ(counts, (std::vector<int>{1, 2, 4}));
}

// The interleaved schedule needs a multiple of P micro-batches: of a share of 2 on P 2, micro-batch
// 1 (2 micro-batches) is tried and 2 (one micro-batch) is not; 1F1B tries both.
TEST(PlanLayouts, InterleavedLayoutsTryTheMicroBatchesLeavingAMultipleOfTheStages) {
  const Scenario scenario = parse_scenario(gpt_yaml("  target_global_batch: 8\n  tensor: [1]\n  pipeline: [2]\n  virtual_stages: [1, 2]\n"
                                                    "  micro_batches: [1, 2]\n  strategies: [baseline]\n"),
                                           "l.yaml", ".");
  std::vector<planner::ClusterUnit> units;
  const ClusterSearch search = expand_on_one_node(scenario, units);
  ASSERT_EQ(units.size(), 2U);
  EXPECT_EQ(units[0].scenario.parallelism->layout.virtual_stages, 1);
  EXPECT_EQ(units[0].unit.divisors, (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(units[1].scenario.parallelism->layout.virtual_stages, 2);
  EXPECT_EQ(units[1].unit.divisors, (std::vector<std::int64_t>{1}));
  EXPECT_TRUE(search.notes.empty());
}

// plan.expert on an MoE model: each degree that divides the experts and D x C; on a dense model an
// error at the key's line.
TEST(PlanLayouts, ExpertDegreesNeedAnMoEModelAndDivideItsExperts) {
  const std::string mixtral =
      "model:\n"
      "  seq_len: 128\n"
      "  hf_config: {model_type: mixtral, hidden_size: 256, intermediate_size: 512, num_hidden_layers: 2, num_attention_heads: 4,\n"
      "              num_key_value_heads: 2, num_local_experts: 8, num_experts_per_tok: 2, vocab_size: 1024,\n"
      "              max_position_embeddings: 4096, rms_norm_eps: 1.0e-5, rope_theta: 1000000.0, hidden_act: silu,\n"
      "              tie_word_embeddings: false, output_router_logits: false}\n"
      "training: {batch_size: 1, precision: bf16, optimizer: adamw}\n"
      "platform: dgx-h100-superpod\n"
      "parallelism: {nodes: 1, gpus_per_node: 8, zero: {stage: 1}}\n"
      "plan:\n  target_global_batch: 8\n  tensor: [1]\n  pipeline: [1]\n  expert: all\n  strategies: [baseline]\n";
  const Scenario scenario = parse_scenario(mixtral, "m.yaml", ".");
  std::vector<planner::ClusterUnit> units;
  const ClusterSearch search = expand_on_one_node(scenario, units);
  std::vector<int> experts;
  for (const planner::ClusterUnit& u : units) experts.push_back(u.scenario.parallelism->layout.expert);
  EXPECT_EQ(experts, (std::vector<int>{1, 2, 4, 8})) << "every divisor of the 8 ranks, each dividing the 8 experts";

  // The same search on a dense GPT: an InputError at plan.expert's line.
  const Scenario dense = parse_scenario(gpt_yaml("  target_global_batch: 8\n  tensor: [1]\n  expert: [2]\n  strategies: [baseline]\n"), "l.yaml", ".");
  units.clear();
  try {
    (void)expand_on_one_node(dense, units);
    ADD_FAILURE() << "expected an InputError on a dense model";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("l.yaml:8:11: plan.expert: searches expert-parallel degrees, but the model is dense"));
  }
}

// Context parallelism shards no weight: the state bound of C 2 is C 1's, sharded (ZeRO-1) over the
// same D x C ranks, as the replay shards it; dividing by D alone would double the optimizer state.
TEST(PlanLayouts, TheStateBoundShardsOverTheDataAndContextRanks) {
  Scenario s = parse_scenario(gpt_yaml("  strategies: [baseline]\n"), "l.yaml", ".");
  s.plan.reset();
  const std::int64_t c1 = resident_state_bytes(PreparedScenario(s));
  s.parallelism->layout.context = 2;
  const std::int64_t c2 = resident_state_bytes(PreparedScenario(s));
  EXPECT_EQ(c2, c1);
}

// plan.strategies with first_stages K: planned on the layouts of at least K stages only, one note
// for the others; plan.recompute with plan.strategies: every strategy under every granularity.
TEST(PlanLayouts, FirstStagesStrategiesRunWhereThePipelineHasTheirStages) {
  const std::string strategies =
      "  strategies:\n    - baseline\n    - name: c2\n      first_stages: 2\n      rules: [{select: {min_bytes: 1 MiB}, compress: {ratio: 4, compress_bandwidth: 700 GB/s, "
      "decompress_bandwidth: 1100 GB/s, latency: 20 us, error_bound: 1e-2}}]\n";
  const Scenario scenario = parse_scenario(gpt_yaml("  target_global_batch: 8\n  tensor: [1]\n  pipeline: [1, 2]\n  micro_batches: [1]\n" + strategies),
                                           "l.yaml", ".");
  std::vector<planner::ClusterUnit> units;
  const ClusterSearch search = expand_on_one_node(scenario, units);
  ASSERT_EQ(units.size(), 2U);
  ASSERT_EQ(units[0].strategies.size(), 1U) << "PP 1: baseline only";
  EXPECT_EQ(units[0].strategies[0].name, "baseline");
  ASSERT_EQ(units[1].strategies.size(), 2U) << "PP 2: both";
  EXPECT_EQ(units[1].strategies[1].name, "c2");
  ASSERT_EQ(search.notes.size(), 1U);
  EXPECT_EQ(search.notes[0], "'c2' (first_stages 2) is planned on the layouts of at least 2 pipeline stages only");

  const Scenario combined = parse_scenario(gpt_yaml("  target_global_batch: 8\n  tensor: [1]\n  pipeline: [2]\n  recompute: [none, selective]\n" + strategies),
                                           "l.yaml", ".");
  std::vector<std::string> names;
  for (const models::StrategySpec& spec : combined.plan->strategies) names.push_back(spec.name + (spec.layer_recompute ? "/r" : "") + (spec.first_stages ? "/k" : ""));
  EXPECT_EQ(names, (std::vector<std::string>{"none", "c2/k", "selective/r", "c2+selective/r/k"}));

  const auto error_of = [](const std::string& plan_keys) {
    try {
      (void)parse_scenario(gpt_yaml(plan_keys), "l.yaml", ".");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error_of("  target_global_batch: 8\n  pipeline: [2]\n  recompute: [none]\n  strategies: [{name: s, recompute: {granularity: selective}}]\n"),
              HasSubstr("l.yaml:9:16: 'plan.strategies[0]' has its own recompute settings"));
  EXPECT_THAT(error_of("  target_global_batch: 8\n  virtual_stages: [2, 2]\n"), HasSubstr("l.yaml:7:23: 'plan.virtual_stages[1]' repeats 2"));
  EXPECT_THAT(error_of("  target_global_batch: 8\n  virtual_stages: every\n"),
              HasSubstr("l.yaml:7:19: 'plan.virtual_stages' must be `all` or a non-empty list"));
  EXPECT_THAT(error_of("  target_global_batch: 8\n  virtual_stages: []\n"), HasSubstr("l.yaml:7:19: 'plan.virtual_stages' must be `all` or a non-empty list"));
  EXPECT_THAT(error_of("  target_global_batch: 8\n  virtual_stages: {all: true}\n"), HasSubstr("l.yaml:7:19: 'plan.virtual_stages' must be `all`"));
  EXPECT_THAT(error_of("  virtual_stages: all\n"), HasSubstr("l.yaml:6:19: a layout search (plan.tensor, plan.pipeline) divides a global batch"));
  EXPECT_THAT(error_of("  context: [2]\n"), HasSubstr("l.yaml:6:12: a layout search (plan.tensor, plan.pipeline) divides a global batch"));
  EXPECT_THAT(error_of("  target_global_batch: 8\n  context: [0]\n"), HasSubstr("'plan.context[0]' is '0'"));
}

}  // namespace
}  // namespace comptrain::sim

// Megatron-LM's recomputation settings (strategy `recompute: {granularity, method, num_layers}`;
// models::strategy_for_stage): the rules each pipeline stage gets for its own layers, on the zoo's
// gpt and llama; their replay against no recomputation and against the hand-written rules they
// stand for; every bad value an InputError at its line.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/scenario_error.hpp"
#include "common/stage_trace.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/models/strategy_yaml.hpp"
#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/sim/run/run.hpp"
#include "comptrain/sim/studies/plan.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/zoo/zoo.hpp"

namespace comptrain::sim {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using test_support::scenario_error;

const char* const kGpt8 = "model: {zoo: gpt, layers: 8, hidden: 256, heads: 4, seq_len: 128, vocab: 1024, attention: fused-softmax}\n";
const char* const kLlama4 =
    "model: {hf_config: {model_type: llama, hidden_size: 256, intermediate_size: 688, num_hidden_layers: 4, num_attention_heads: 4, "
    "num_key_value_heads: 4, vocab_size: 1024, max_position_embeddings: 128}, seq_len: 128, attention: eager}\n";

Scenario scenario(const std::string& model, const std::string& strategy, int pipeline = 1, int micro_batches = 4) {
  std::string yaml = model + "training: {batch_size: 1, precision: mixed, optimizer: adam, gradient_accumulation_steps: " +
                     std::to_string(micro_batches) + "}\nplatform: dgx-a100-superpod\n";
  if (pipeline > 1) yaml += "parallelism: {gpus_per_node: " + std::to_string(pipeline) + ", pipeline: " + std::to_string(pipeline) + "}\n";
  if (!strategy.empty()) yaml += "strategy: " + strategy + "\n";
  return parse_scenario(yaml, "s.yaml", test_support::kShippedScenarios);
}

// The trace of stage `first_layer`..+`layers` of the scenario's model (the whole model when it
// holds them all), as run_pipeline builds it.
using test_support::stage_trace;

// The one rule the settings give stage `stage` (failing the test when there is not exactly one).
models::StrategyRule generated_rule(const Scenario& s, const traces::Trace& trace, std::optional<int> stage) {
  const models::StrategySpec spec = models::strategy_for_stage(s.strategy, trace, stage);
  EXPECT_FALSE(spec.layer_recompute);
  EXPECT_EQ(spec.rules.size(), 1u);
  return spec.rules.empty() ? models::StrategyRule{} : spec.rules.front();
}

std::vector<std::string> kept(const models::StrategyRule& rule) {
  std::vector<std::string> out = rule.recompute() ? rule.recompute()->keep : std::vector<std::string>{};
  std::sort(out.begin(), out.end());
  return out;
}

TEST(LayerRecompute, BlockRecomputesEachStagesOwnFirstLayers) {
  const Scenario s = scenario(kGpt8, "{name: block2, recompute: {granularity: full, method: block, num_layers: 2}}", 2);
  // Stage 1 holds layers 4-7: its first two are 4 and 5, each one checkpoint: its input kept (the
  // received hidden states, layer 4's output), and layer 5's output, which layer 6 saves.
  const models::StrategyRule rule = generated_rule(s, stage_trace(s, 4, 4), 1);
  EXPECT_THAT(rule.select.modules, ElementsAre("transformer.h.[4-5]"));
  ASSERT_TRUE(rule.recompute());
  EXPECT_EQ(rule.recompute()->mode, models::RecomputeAction::Mode::checkpoints);
  EXPECT_THAT(kept(rule), ElementsAre("recv_forward.out", "transformer.h.4.add_1.out", "transformer.h.5.add_1.out"));
  EXPECT_THAT(rule.location, HasSubstr("s.yaml:5:"));
  // Stage 0: layers 0 and 1, from the embedding's output.
  const models::StrategyRule first = generated_rule(s, stage_trace(s, 0, 4), 0);
  EXPECT_THAT(first.select.modules, ElementsAre("transformer.h.[0-1]"));
  EXPECT_THAT(kept(first), ElementsAre("transformer.drop.out", "transformer.h.0.add_1.out", "transformer.h.1.add_1.out"));
}

TEST(LayerRecompute, UniformCheckpointsGroupsOfNumLayers) {
  const Scenario s = scenario(kGpt8, "{recompute: {granularity: full, method: uniform, num_layers: 2}}", 2);
  // Stage 0's layers 0-3 in groups {0, 1} and {2, 3}: each group's input kept, nothing inside it.
  const models::StrategyRule rule = generated_rule(s, stage_trace(s, 0, 4), 0);
  EXPECT_THAT(rule.select.modules, ElementsAre("transformer.h.[0-3]"));
  const std::vector<std::string> keep = kept(rule);
  EXPECT_THAT(keep, Contains("transformer.drop.out"));
  EXPECT_THAT(keep, Contains("transformer.h.1.add_1.out"));
  EXPECT_THAT(keep, Not(Contains("transformer.h.0.add_1.out")));
  EXPECT_THAT(keep, Not(Contains("transformer.h.2.add_1.out")));
  // Stage 1's layers 4-7: groups {4, 5}, {6, 7}; the last group's output is the final norm's input.
  const std::vector<std::string> last = kept(generated_rule(s, stage_trace(s, 4, 4), 1));
  EXPECT_THAT(last, ElementsAre("recv_forward.out", "transformer.h.5.add_1.out", "transformer.h.7.add_1.out"));
}

TEST(LayerRecompute, LlamaLayersAreModelLayers) {
  const Scenario s = scenario(kLlama4, "{recompute: {granularity: full, method: block, num_layers: 1}}", 2);
  const models::StrategyRule rule = generated_rule(s, stage_trace(s, 2, 2), 1);
  EXPECT_THAT(rule.select.modules, ElementsAre("model.layers.[2-2]"));
  // Layer 2's checkpoint keeps its tensor arguments, as Megatron passes them to checkpoint: the
  // hidden states (received), the attention mask and the rotary embedding. Its output is not
  // kept: layer 3's RMSNorm saves its own fp32 copy of it, and nothing saves the output itself.
  EXPECT_THAT(kept(rule), ElementsAre("model.causal_mask.out", "model.rotary_emb.cos.out", "model.rotary_emb.sin.out", "recv_forward.out"));
  // Uniform 2 over the whole model (no pipeline): groups {0, 1} and {2, 3}, whose inputs are the
  // embedding's output and layer 1's.
  const Scenario whole = scenario(kLlama4, "{recompute: {granularity: full, method: uniform, num_layers: 2}}");
  EXPECT_THAT(kept(generated_rule(whole, build_trace(whole), std::nullopt)),
              ElementsAre("model.causal_mask.out", "model.embed_tokens.out", "model.layers.1.add_1.out", "model.rotary_emb.cos.out",
                          "model.rotary_emb.sin.out"));
}

TEST(LayerRecompute, APerStageListGivesEachStageItsEntry) {
  const Scenario s = scenario(kGpt8, "{recompute: {granularity: full, method: block, num_layers: [3, 0]}}", 2);
  EXPECT_THAT(generated_rule(s, stage_trace(s, 0, 4), 0).select.modules, ElementsAre("transformer.h.[0-2]"));
  // 0: the last stage, with one micro-batch in flight under 1F1B, recomputes nothing.
  const models::StrategySpec last = models::strategy_for_stage(s.strategy, stage_trace(s, 4, 4), 1);
  EXPECT_TRUE(last.rules.empty());
  EXPECT_FALSE(last.layer_recompute);
}

TEST(LayerRecompute, SelectiveDropsTheAttentionCoresSoftmaxAndDropout) {
  const Scenario gpt = scenario(kGpt8, "{recompute: {granularity: selective}}");
  const models::StrategyRule rule = generated_rule(gpt, build_trace(gpt), std::nullopt);
  ASSERT_TRUE(rule.recompute());
  EXPECT_EQ(rule.recompute()->mode, models::RecomputeAction::Mode::all);
  EXPECT_THAT(rule.select.names, Contains("transformer.h.0.attn.softmax.out"));
  EXPECT_THAT(rule.select.names, Contains("transformer.h.7.attn.attn_dropout.out"));
  for (const std::string& name : rule.select.names) EXPECT_THAT(name, HasSubstr(".attn.")) << "only the attention core";
  const Scenario llama = scenario(kLlama4, "{recompute: {granularity: selective}}");
  const models::StrategyRule l = generated_rule(llama, build_trace(llama), std::nullopt);
  EXPECT_THAT(l.select.names, Contains("model.layers.3.self_attn.softmax.out"));
  for (const std::string& name : l.select.names) EXPECT_THAT(name, HasSubstr(".self_attn.softmax")) << "only the attention core";
}

const CompletedRun& completed(const RunOutcome& outcome) { return std::get<CompletedRun>(outcome); }

double compute_seconds(const ScheduledRun& run, const SimulationResult& result) {
  double busy = 0;
  for (models::TaskId t = 0; t < run.schedule.tasks.size(); ++t) {
    if (run.schedule.tasks[t].stream == models::Stream::compute) busy += result.tasks[t].end - result.tasks[t].start;
  }
  return busy;
}

// Flash attention keeps no s x s tensor, but Megatron-core checkpoints the attention core all the
// same (attention.py, checkpoint_core_attention): the rule drops what only the kernel saved (its
// log-sum-exp) and the kernel runs again in the backward pass; its output, which the output
// projection reads and saves, stays. The step takes longer by the kernels run again, and the peak
// is no higher.
TEST(LayerRecompute, SelectiveUnderFlashRunsTheAttentionKernelAgain) {
  const char* const flash_gpt = "model: {zoo: gpt, layers: 2, hidden: 256, heads: 4, seq_len: 512, vocab: 1024, attention: flash}\n";
  const Scenario flash = scenario(flash_gpt, "{recompute: {granularity: selective}}");
  const models::StrategyRule rule = generated_rule(flash, build_trace(flash), std::nullopt);
  ASSERT_TRUE(rule.recompute());
  EXPECT_EQ(rule.recompute()->mode, models::RecomputeAction::Mode::all);
  ASSERT_EQ(rule.select.names.size(), 2u) << "one per layer";
  for (const std::string& name : rule.select.names) {
    EXPECT_THAT(name, HasSubstr(".attn."));
    EXPECT_THAT(name, HasSubstr(".logsumexp"));
  }
  const PreparedScenario none(scenario(flash_gpt, ""));
  const PreparedScenario selective(flash);
  const RunOutcome n_outcome = run_scenario(none, none.scenario().strategy, 2, Isolation::child_process);
  const CompletedRun& n = completed(n_outcome);
  const RunOutcome s_outcome = run_scenario(selective, selective.scenario().strategy, 2, Isolation::child_process);
  const CompletedRun& r = completed(s_outcome);
  ASSERT_TRUE(n.result.fits() && r.result.fits());
  EXPECT_GT(r.result.iteration_seconds, n.result.iteration_seconds);
  EXPECT_LE(r.result.peak_bytes, n.result.peak_bytes);
}

// The hand-written full recomputation of korthikanti-22b-tp8-full.yaml (and of the 405B example
// under a pipeline: the stage's received input kept too, a name only a pipeline's trace has):
// uniform 1 is the same checkpoints.
const char* const kHandFull =
    "{name: hand, rules: [{select: {modules: [transformer.h]}, recompute: {mode: checkpoints, keep: [transformer.drop.out, "
    "\"transformer.h.*.add_1.out\"]}}]}";
const char* const kHandFullPipeline =
    "{name: hand, rules: [{select: {modules: [transformer.h]}, recompute: {mode: checkpoints, keep: [transformer.drop.out, recv_forward.out, "
    "\"transformer.h.*.add_1.out\"]}}]}";

TEST(LayerRecompute, UniformOneIsTheHandWrittenFullRecomputation) {
  const Scenario settings = scenario(kGpt8, "{recompute: {granularity: full, method: uniform, num_layers: 1}}");
  const Scenario hand = scenario(kGpt8, kHandFull);
  const PreparedScenario a(settings), b(hand);
  const RunOutcome x_outcome = run_scenario(a, a.scenario().strategy, 2, Isolation::child_process);
  const CompletedRun& x = completed(x_outcome);
  const RunOutcome y_outcome = run_scenario(b, b.scenario().strategy, 2, Isolation::child_process);
  const CompletedRun& y = completed(y_outcome);
  ASSERT_TRUE(x.result.fits() && y.result.fits());
  EXPECT_EQ(x.result.peak_bytes, y.result.peak_bytes);
  EXPECT_EQ(x.result.iteration_seconds, y.result.iteration_seconds);
  // Under a pipeline, stage by stage.
  const PreparedScenario c(scenario(kGpt8, "{recompute: {granularity: full, method: uniform, num_layers: 1}}", 2));
  const PreparedScenario d(scenario(kGpt8, kHandFullPipeline, 2));
  const PipelineOutcome p_outcome = run_pipeline(c, c.scenario().strategy, 1, Isolation::child_process);
  const PipelineRun& p = std::get<PipelineRun>(p_outcome);
  const PipelineOutcome q_outcome = run_pipeline(d, d.scenario().strategy, 1, Isolation::child_process);
  const PipelineRun& q = std::get<PipelineRun>(q_outcome);
  ASSERT_TRUE(p.result.fits() && q.result.fits());
  EXPECT_EQ(p.result.iteration_seconds, q.result.iteration_seconds);
  for (std::size_t stage = 0; stage < 2; ++stage) EXPECT_EQ(p.result.stages[stage].peak_bytes, q.result.stages[stage].peak_bytes) << "stage " << stage;
}

TEST(LayerRecompute, SelectiveIsTheHandWrittenSelectiveRecomputation) {
  // korthikanti-22b-tp8-seqsel.yaml's rule.
  const Scenario hand = scenario(kGpt8,
                                 "{name: hand, rules: [{select: {modules: [\"h.*.attn.softmax\", \"h.*.attn.attn_dropout\"]}, "
                                 "recompute: {mode: checkpoints, keep: [\"*.attn.split_heads.q\", \"*.attn.split_heads.k\"]}}]}");
  const Scenario settings = scenario(kGpt8, "{recompute: {granularity: selective}}");
  const PreparedScenario a(settings), b(hand);
  const RunOutcome x_outcome = run_scenario(a, a.scenario().strategy, 2, Isolation::child_process);
  const CompletedRun& x = completed(x_outcome);
  const RunOutcome y_outcome = run_scenario(b, b.scenario().strategy, 2, Isolation::child_process);
  const CompletedRun& y = completed(y_outcome);
  EXPECT_EQ(x.result.peak_bytes, y.result.peak_bytes);
  EXPECT_EQ(x.result.iteration_seconds, y.result.iteration_seconds);
}

// Long enough sequences that the micro-batches in flight, not the optimizer step, make the peak.
const char* const kGpt8Long = "model: {zoo: gpt, layers: 8, hidden: 512, heads: 8, seq_len: 1024, vocab: 1024, attention: fused-softmax}\n";

TEST(LayerRecompute, BlockLowersTheFirstStagesPeakAndRaisesItsTime) {
  const PreparedScenario none(scenario(kGpt8Long, "", 2, 4));
  const PreparedScenario block(scenario(kGpt8Long, "{recompute: {granularity: full, method: block, num_layers: 2}}", 2, 4));
  const PipelineOutcome n_outcome = run_pipeline(none, none.scenario().strategy, 1, Isolation::child_process);
  const PipelineRun& n = std::get<PipelineRun>(n_outcome);
  const PipelineOutcome b_outcome = run_pipeline(block, block.scenario().strategy, 1, Isolation::child_process);
  const PipelineRun& b = std::get<PipelineRun>(b_outcome);
  ASSERT_TRUE(n.result.fits() && b.result.fits());
  EXPECT_LT(b.result.stages[0].peak_bytes, n.result.stages[0].peak_bytes);
  EXPECT_GT(compute_seconds(b.stages[0], b.result.stages[0]), compute_seconds(n.stages[0], n.result.stages[0]));
  EXPECT_GT(b.result.iteration_seconds, n.result.iteration_seconds);
  // Recording the figures for the report.
  RecordProperty("stage0_peak_none", std::to_string(n.result.stages[0].peak_bytes));
  RecordProperty("stage0_peak_block2", std::to_string(b.result.stages[0].peak_bytes));
  // [2, 0]: stage 1 as without recomputation.
  const PreparedScenario first_only(scenario(kGpt8Long, "{recompute: {granularity: full, method: block, num_layers: [2, 0]}}", 2, 4));
  const PipelineOutcome f_outcome = run_pipeline(first_only, first_only.scenario().strategy, 1, Isolation::child_process);
  const PipelineRun& f = std::get<PipelineRun>(f_outcome);
  EXPECT_EQ(f.result.stages[0].peak_bytes, b.result.stages[0].peak_bytes);
  EXPECT_EQ(f.result.stages[1].peak_bytes, n.result.stages[1].peak_bytes);
}

std::string prepared_error(const std::string& model, const std::string& strategy, int pipeline) {
  try {
    const PreparedScenario prepared(scenario(model, strategy, pipeline));
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError for " << strategy;
  return "";
}

TEST(LayerRecompute, EveryBadValueIsAnInputErrorAtItsLine) {
  const std::string head = std::string(kGpt8) + "platform: dgx-a100-superpod\nstrategy:\n  recompute:\n";
  EXPECT_THAT(scenario_error(head + "    granularity: most\n"), HasSubstr("s.yaml:5:18: 'strategy.recompute.granularity' is 'most'; expected full"));
  EXPECT_THAT(scenario_error(head + "    granularity: selective\n    method: block\n"),
              HasSubstr("s.yaml:6:13: 'strategy.recompute.method' applies to granularity full only"));
  EXPECT_THAT(scenario_error(head + "    granularity: selective\n    num_layers: 2\n"),
              HasSubstr("s.yaml:6:17: 'strategy.recompute.num_layers' applies to granularity full only"));
  EXPECT_THAT(scenario_error(head + "    granularity: full\n    num_layers: 2\n"), HasSubstr("s.yaml:5:5: 'strategy.recompute' with granularity full needs 'method'"));
  EXPECT_THAT(scenario_error(head + "    granularity: full\n    method: uniform\n"),
              HasSubstr("s.yaml:5:5: 'strategy.recompute' with granularity full needs 'num_layers'"));
  EXPECT_THAT(scenario_error(head + "    granularity: full\n    method: blocks\n    num_layers: 2\n"),
              HasSubstr("s.yaml:6:13: 'strategy.recompute.method' is 'blocks'; expected uniform or block"));
  EXPECT_THAT(scenario_error(head + "    granularity: full\n    method: block\n    num_layers: 0\n"), HasSubstr("s.yaml:7:17: 'strategy.recompute.num_layers'"));
  EXPECT_THAT(scenario_error(head + "    granularity: full\n    method: block\n    num_layers: [2, -1]\n"),
              HasSubstr("s.yaml:7:21: 'strategy.recompute.num_layers[1]'"));
  EXPECT_THAT(scenario_error(head + "    granularity: full\n    method: block\n    num_layers: []\n"), HasSubstr("s.yaml:7:17: 'strategy.recompute.num_layers' is an empty list"));
  EXPECT_THAT(scenario_error(head + "    granularity: full\n    method: block\n    num_layers: 2\n    modules: [core_attn]\n"), HasSubstr("s.yaml:8:5"));
  EXPECT_THAT(scenario_error(std::string(kGpt8) + "platform: dgx-a100-superpod\nstrategy: {recompute: full}\n"),
              HasSubstr("s.yaml:3:23: 'strategy.recompute' must be a mapping with granularity"));
  // Once the stages are known: a list of another length, a count above a stage's layers.
  EXPECT_THAT(prepared_error(kGpt8, "{recompute: {granularity: full, method: block, num_layers: [2, 2, 2]}}", 2),
              HasSubstr("s.yaml:5:70: strategy.recompute.num_layers: has 3 entries; expected one per pipeline stage (2)"));
  EXPECT_THAT(prepared_error(kGpt8, "{recompute: {granularity: full, method: block, num_layers: [2, 5]}}", 2),
              HasSubstr("s.yaml:5:74: strategy.recompute.num_layers[1]: num_layers is 5; pipeline stage 1 holds 4 layers; expected at most 4"));
  EXPECT_THAT(prepared_error(kGpt8, "{recompute: {granularity: full, method: uniform, num_layers: 5}}", 2),
              HasSubstr("s.yaml:5:72: strategy.recompute.num_layers: num_layers is 5; pipeline stage 0 holds 4 layers"));
  EXPECT_THAT(prepared_error(kGpt8, "{recompute: {granularity: full, method: uniform, num_layers: 9}}", 1),
              HasSubstr("num_layers is 9; the model has 8 layers; expected at most 8"));
  EXPECT_THAT(prepared_error(kGpt8, "{recompute: {granularity: full, method: block, num_layers: [2, 2]}}", 1),
              HasSubstr("has 2 entries; expected one per pipeline stage (1)"));
}

TEST(LayerRecompute, ATraceWithoutOneListOfLayersIsRefused) {
  // A ResNet's stages are four numbered lists (layer1.N ... layer4.N): which would be "the layers"?
  const Scenario resnet = parse_scenario("model: {zoo: resnet18}\nplatform: a100-40gb\nstrategy: {recompute: {granularity: full, method: block, num_layers: 1}}\n",
                                         "s.yaml", test_support::kShippedScenarios);
  try {
    models::strategy_for_stage(resnet.strategy, build_trace(resnet), std::nullopt);
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("s.yaml:3:23: strategy.recompute: trace 'resnet18' has several numbered module lists (layer1.N, layer2.N"));
  }
}

TEST(LayerRecompute, TheSettingsRoundTripThroughStrategyYaml) {
  const Scenario s = scenario(kGpt8, "{name: mine, recompute: {granularity: full, method: block, num_layers: [3, 1]}}", 2);
  const std::string text = models::strategy_to_yaml(s.strategy);
  EXPECT_THAT(text, HasSubstr("recompute: {granularity: full, method: block, num_layers: [3, 1]}"));
  const models::StrategySpec back = models::read_strategy(YAML::Load(text), "back.yaml", "strategy", ".", "");
  ASSERT_TRUE(back.layer_recompute);
  EXPECT_EQ(back.layer_recompute->num_layers, (std::vector<int>{3, 1}));
  EXPECT_EQ(back.layer_recompute->method, models::LayerRecompute::Method::block);
}

// plan.recompute: the granularities as the strategies to plan, each candidate layout under each.
TEST(LayerRecompute, PlanRecomputeNamesTheStrategiesToPlan) {
  const Scenario s = parse_scenario(std::string(kGpt8) + "platform: dgx-a100-superpod\nplan: {recompute: [none, selective, full]}\n", "s.yaml",
                                    test_support::kShippedScenarios);
  const std::vector<models::StrategySpec> specs = strategies_to_plan(s);
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[0].name, "none");
  EXPECT_TRUE(specs[0].rules.empty() && !specs[0].layer_recompute);
  EXPECT_EQ(specs[1].name, "selective");
  ASSERT_TRUE(specs[1].layer_recompute);
  EXPECT_EQ(specs[1].layer_recompute->granularity, models::LayerRecompute::Granularity::selective);
  EXPECT_EQ(specs[2].name, "full");
  ASSERT_TRUE(specs[2].layer_recompute);
  EXPECT_EQ(specs[2].layer_recompute->method, models::LayerRecompute::Method::uniform);
  EXPECT_EQ(specs[2].layer_recompute->num_layers, std::vector<int>{1});
  const std::string head = std::string(kGpt8) + "platform: dgx-a100-superpod\nplan:\n";
  EXPECT_THAT(scenario_error(head + "  recompute: [none, most]\n"), HasSubstr("s.yaml:4:21: 'plan.recompute[1]' is 'most'; expected none, selective"));
  EXPECT_THAT(scenario_error(head + "  recompute: [full, full]\n"), HasSubstr("s.yaml:4:21: 'plan.recompute[1]' repeats 'full'"));
  EXPECT_THAT(scenario_error(head + "  recompute: []\n"), HasSubstr("s.yaml:4:14: 'plan.recompute' must be a non-empty list"));
  // With plan.strategies: every strategy under every granularity (plan_layout_test.cpp has more);
  // a strategy with its own settings conflicts with them.
  const Scenario both = parse_scenario(head + "  strategies: [baseline, offload]\n  recompute: [full]\n", "s.yaml", test_support::kShippedScenarios);
  ASSERT_EQ(both.plan->strategies.size(), 2u);
  EXPECT_EQ(both.plan->strategies[0].name, "full");
  EXPECT_EQ(both.plan->strategies[1].name, "offload+full");
  EXPECT_TRUE(both.plan->strategies[1].layer_recompute && !both.plan->strategies[1].rules.empty());
  EXPECT_THAT(scenario_error(head + "  strategies: [{recompute: {granularity: selective}}]\n  recompute: [full]\n"),
              HasSubstr("s.yaml:4:16: 'plan.strategies[0]' has its own recompute settings"));
}

// A name or module pattern that names nothing in the model is a typo, an InputError at its line
// (models/pattern_coverage.hpp) rather than a rule, unit or compiled region silently empty.
std::string run_error(const Scenario& s, int pipeline) {
  try {
    const PreparedScenario prepared(s);
    if (pipeline > 1) {
      (void)run_pipeline(prepared, prepared.scenario().strategy, 1, Isolation::this_process);
    } else {
      (void)run_scenario(prepared, prepared.scenario().strategy, 1, Isolation::this_process);
    }
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(PatternTypos, ARuleWhosePatternNamesNothingIsAnErrorAtItsLine) {
  const Scenario s = scenario(kGpt8, "{name: typo, rules: [{select: {modules: [transformer.hh]}, recompute: {mode: all}}]}");
  EXPECT_THAT(run_error(s, 1), AllOf(HasSubstr("s.yaml:4:32: strategy.rules[0]: select.modules: module pattern 'transformer.hh' matches no op or tensor"),
                                     HasSubstr("the closest module in the model is 'transformer.h'")));
  const Scenario keep = scenario(kGpt8, "{name: typo, rules: [{select: {modules: [transformer.h]}, recompute: {mode: checkpoints, keep: [\"transformer.h.*.add_2.out\"]}}]}");
  EXPECT_THAT(run_error(keep, 1), HasSubstr("strategy.rules[0]: recompute.keep: name pattern 'transformer.h.*.add_2.out' matches no op or tensor"));
}

TEST(PatternTypos, ScenarioPatternListsAreCheckedAtEachEntry) {
  const std::string yaml = std::string(kGpt8) +
                           "training: {batch_size: 1, precision: mixed, optimizer: adam}\nplatform: dgx-a100-superpod\n"
                           "framework: {compile: {modules: [\"transformer.h.*\", \"transformer.hh.*\"]}}\n";
  EXPECT_THAT(run_error(parse_scenario(yaml, "s.yaml", test_support::kShippedScenarios), 1),
              HasSubstr("s.yaml:4:52: framework.compile.modules: module pattern 'transformer.hh.*' matches no op or tensor"));
  const std::string fsdp = std::string(kGpt8) +
                           "training: {batch_size: 1, precision: mixed, optimizer: adam}\nplatform: dgx-a100-superpod\n"
                           "parallelism: {gpus_per_node: 2, fsdp: {units: [\"h.*\", \"transformer.blocks.*\"]}}\n";
  EXPECT_THAT(run_error(parse_scenario(fsdp, "s.yaml", test_support::kShippedScenarios), 1),
              HasSubstr("s.yaml:4:55: parallelism.fsdp.units: module pattern 'transformer.blocks.*' matches no op or tensor"));
}

TEST(PatternTypos, UnderAPipelineAPatternNeedOnlyMatchOnSomeStage) {
  // Layer 7 lies on the second of two stages; layer 8 on none.
  EXPECT_EQ(run_error(scenario(kGpt8, "{name: last, rules: [{select: {modules: [transformer.h.7]}, recompute: {mode: all}}]}", 2), 2), "");
  EXPECT_THAT(run_error(scenario(kGpt8, "{name: none, rules: [{select: {modules: [transformer.h.8]}, recompute: {mode: all}}]}", 2), 2),
              HasSubstr("select.modules: module pattern 'transformer.h.8' matches no op or tensor"));
}

}  // namespace
}  // namespace comptrain::sim

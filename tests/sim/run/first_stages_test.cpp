// strategy.first_stages (models::StrategySpec::first_stages): a strategy's rules on the first K
// pipeline stages only, the later stages running the base strategy. Under 1F1B rank r holds
// min(P - r, M) micro-batches in flight, so the first stage's peak is the highest and the one
// compression helps most; the replay shows each stage's peak dropping only where it compresses.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/scenario_error.hpp"
#include "common/stage_trace.hpp"
#include "comptrain/models/pipeline_schedule.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/models/strategy_yaml.hpp"
#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/sim/run/run.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/zoo/zoo.hpp"

namespace comptrain::sim {
namespace {

using ::testing::HasSubstr;
using test_support::scenario_error;

// Long enough sequences that the micro-batches in flight, not the optimizer state, make the peak.
const char* const kGpt8Long = "model: {zoo: gpt, layers: 8, hidden: 512, heads: 8, seq_len: 1024, vocab: 1024, attention: fused-softmax}\n";
// gpt13b-h100-compress.yaml's rule: every saved activation of at least 1 MiB compressed 4x.
const char* const kCompressRules =
    "rules: [{select: {min_bytes: 1 MiB}, compress: {ratio: 4, compress_bandwidth: 700 GB/s, decompress_bandwidth: 1100 GB/s, latency: 20 us, "
    "error_bound: 1e-2}}]";

Scenario scenario(const std::string& strategy, int pipeline, int micro_batches) {
  std::string yaml = std::string(kGpt8Long) + "training: {batch_size: 1, precision: mixed, optimizer: adam, gradient_accumulation_steps: " +
                     std::to_string(micro_batches) + "}\nplatform: dgx-a100-superpod\n";
  if (pipeline > 1) yaml += "parallelism: {gpus_per_node: " + std::to_string(pipeline) + ", pipeline: " + std::to_string(pipeline) + "}\n";
  if (!strategy.empty()) yaml += "strategy: " + strategy + "\n";
  return parse_scenario(yaml, "s.yaml", test_support::kShippedScenarios);
}

// The trace of the stage holding layers `first_layer`..+`layers`, as run_pipeline builds it.
using test_support::stage_trace;

std::string compress_first(int k) { return "{name: compress-first-" + std::to_string(k) + ", first_stages: " + std::to_string(k) + ", " + kCompressRules + "}"; }

std::vector<std::int64_t> stage_peaks(const std::string& strategy, int pipeline, int micro_batches) {
  const PreparedScenario prepared(scenario(strategy, pipeline, micro_batches));
  const PipelineOutcome outcome = run_pipeline(prepared, prepared.scenario().strategy, 1, Isolation::child_process);
  const auto* run = std::get_if<PipelineRun>(&outcome);
  EXPECT_TRUE(run && run->result.fits());
  std::vector<std::int64_t> out;
  if (run) {
    for (const auto& stage : run->result.stages) out.push_back(stage.peak_bytes);
  }
  return out;
}

TEST(FirstStages, OneFOneBHoldsTheMostMicroBatchesOnTheFirstStage) {
  // Megatron-LM's warm-up (schedules.py:957): rank r runs min(P - r - 1, M) forwards before its
  // first backward, so it holds min(P - r, M) micro-batches' activations.
  for (const int micro_batches : {2, 8}) {
    const auto orders = models::pipeline_orders(models::PipelineSchedule::one_f_one_b, 4, micro_batches);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(models::max_in_flight(orders[static_cast<std::size_t>(r)]), std::min(4 - r, micro_batches)) << "rank " << r;
  }
  // In the replay the first stage's peak is the highest of the four.
  const std::vector<std::int64_t> none = stage_peaks("", 4, 8);
  ASSERT_EQ(none.size(), 4u);
  for (std::size_t r = 1; r < 4; ++r) EXPECT_GT(none[0], none[r]) << "stage " << r;
}

TEST(FirstStages, OnlyTheCompressedStagesPeaksDrop) {
  const std::vector<std::int64_t> none = stage_peaks("", 4, 8);
  const std::vector<std::int64_t> first2 = stage_peaks(compress_first(2), 4, 8);
  const std::vector<std::int64_t> all = stage_peaks(std::string("{name: compress, ") + kCompressRules + "}", 4, 8);
  ASSERT_EQ(none.size(), 4u);
  ASSERT_EQ(first2.size(), 4u);
  ASSERT_EQ(all.size(), 4u);
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_LT(first2[r], none[r]) << "stage " << r << " compresses";
    EXPECT_EQ(first2[r], all[r]) << "stage " << r << " runs the rules as the unrestricted strategy does";
  }
  for (std::size_t r = 2; r < 4; ++r) {
    EXPECT_EQ(first2[r], none[r]) << "stage " << r << " runs the base strategy";
    EXPECT_LT(all[r], none[r]) << "stage " << r << " would compress without first_stages";
  }
  // The saving is largest on stage 0, which holds the most micro-batches in flight.
  EXPECT_GT(none[0] - first2[0], none[1] - first2[1]);
  RecordProperty("stage0_peak_none", std::to_string(none[0]));
  RecordProperty("stage0_peak_first2", std::to_string(first2[0]));
  RecordProperty("stage3_peak_none", std::to_string(none[3]));
}

TEST(FirstStages, ALaterStageGetsTheBaseStrategyWithItsRecomputation) {
  const Scenario s = scenario("{name: c, recompute: {granularity: selective}, first_stages: 1, " + std::string(kCompressRules) + "}", 2, 4);
  ASSERT_TRUE(s.strategy.first_stages);
  EXPECT_EQ(*s.strategy.first_stages, 1);
  EXPECT_THAT(s.strategy.first_stages_location, HasSubstr("s.yaml:5:72: strategy.first_stages"));
  // Stage 0 (layers 0-3): the compress rule, then the selective recomputation's rule; stage 1
  // (layers 4-7): the recomputation's rule alone.
  const models::StrategySpec first = models::strategy_for_stage(s.strategy, stage_trace(s, 0, 4), 0);
  EXPECT_FALSE(first.first_stages);
  ASSERT_EQ(first.rules.size(), 2u);
  EXPECT_TRUE(first.rules[0].compress());
  EXPECT_TRUE(first.rules[1].recompute());
  const models::StrategySpec later = models::strategy_for_stage(s.strategy, stage_trace(s, 4, 4), 1);
  EXPECT_FALSE(later.first_stages);
  ASSERT_EQ(later.rules.size(), 1u);
  EXPECT_TRUE(later.rules[0].recompute());
  // Without a pipeline there is no stage to restrict the rules to.
  EXPECT_THROW(models::strategy_for_stage(s.strategy, stage_trace(s, 0, 8), std::nullopt), InputError);
  // The YAML writer writes it as the reader reads it.
  EXPECT_THAT(models::strategy_to_yaml(s.strategy), HasSubstr("first_stages: 1"));
}

TEST(FirstStages, EveryBadValueIsAnInputErrorAtItsLine) {
  const std::string head = std::string(kGpt8Long) + "training: {batch_size: 1, precision: mixed, optimizer: adam, gradient_accumulation_steps: 4}\n"
                                                    "platform: dgx-a100-superpod\n";
  const std::string pipeline2 = "parallelism: {gpus_per_node: 2, pipeline: 2}\n";
  const auto with = [&](const std::string& k, const std::string& parallelism) {
    return head + parallelism + "strategy:\n  name: c\n  first_stages: " + k + "\n  " + kCompressRules + "\n";
  };
  EXPECT_THAT(scenario_error(with("0", pipeline2)), HasSubstr("s.yaml:7:17: 'strategy.first_stages'"));
  EXPECT_THAT(scenario_error(with("two", pipeline2)), HasSubstr("s.yaml:7:17: 'strategy.first_stages'"));
  EXPECT_THAT(scenario_error(head + pipeline2 + "strategy: {name: c, first_stages: 1, recompute: {granularity: selective}}\n"),
              HasSubstr("s.yaml:5:35: 'strategy.first_stages' restricts the strategy's rules to the first pipeline stages, but it has no rules"));
  // Once the layout is known: more stages than the pipeline has, or no pipeline.
  const auto prepared_error = [&](const std::string& yaml) -> std::string {
    try {
      const PreparedScenario prepared(parse_scenario(yaml, "s.yaml", test_support::kShippedScenarios));
    } catch (const InputError& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected an InputError";
    return "";
  };
  EXPECT_THAT(prepared_error(with("3", pipeline2)), HasSubstr("s.yaml:7:17: strategy.first_stages: first_stages is 3; the pipeline has 2 stages; expected at most 2"));
  EXPECT_THAT(prepared_error(with("1", "")), HasSubstr("s.yaml:6:17: strategy.first_stages: first_stages is 1; the run has no pipeline"));
  EXPECT_NO_THROW(PreparedScenario(parse_scenario(with("2", pipeline2), "s.yaml", test_support::kShippedScenarios)));
}

}  // namespace
}  // namespace comptrain::sim

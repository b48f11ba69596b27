// Expert parallelism through the run layer: a tiny Mixtral-shaped scenario on one node of 4 H100s
// with parallelism.expert 2 and 4 -- the rank's all_to_alls over its expert group, the experts'
// gradients over the expert-data group, fewer expert parameters per rank -- simulated end to end;
// and the layout's errors at their keys' lines.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "common/scenario_error.hpp"
#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/sim/metrics/communication_time.hpp"
#include "comptrain/sim/report/simulate_report.hpp"
#include "comptrain/sim/run/run.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::sim {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using models::RankGroups;
using models::TaskKind;
using traces::ParallelGroup;

// 2 layers, hidden 256, 8 experts of width 512 (top-2), 128 tokens, bf16 with AdamW.
const std::string kTinyMixtral =
    "model:\n"
    "  seq_len: 128\n"
    "  hf_config: {model_type: mixtral, hidden_size: 256, intermediate_size: 512, num_hidden_layers: 2, num_attention_heads: 4,\n"
    "              num_key_value_heads: 2, num_local_experts: 8, num_experts_per_tok: 2, vocab_size: 1024,\n"
    "              max_position_embeddings: 4096, rms_norm_eps: 1.0e-5, rope_theta: 1000000.0, hidden_act: silu,\n"
    "              tie_word_embeddings: false, output_router_logits: false}\n"
    "training: {batch_size: 2, precision: bf16, optimizer: adamw}\n"
    "platform: dgx-h100-superpod\n"
    "parallelism:\n";

Scenario mixtral_on(const std::string& parallelism) {
  return parse_scenario(kTinyMixtral + parallelism, "s.yaml", test_support::kShippedScenarios);
}

std::string prepare(const std::string& parallelism) {
  try {
    const PreparedScenario prepared(mixtral_on(parallelism));
  } catch (const InputError& e) {
    return e.what();
  }
  return "prepared";
}

TEST(ExpertParallelRun, TheRankExchangesTokensOverItsExpertGroupAndSimulates) {
  const PreparedScenario ep2(mixtral_on("  gpus_per_node: 4\n  expert: 2\n"));
  const PreparedScenario ep4(mixtral_on("  gpus_per_node: 4\n  expert: 4\n"));
  const PreparedScenario dp(mixtral_on("  gpus_per_node: 4\n"));
  const RunOutcome a = run_scenario(ep2, ep2.scenario().strategy, 2, Isolation::child_process);
  const RunOutcome b = run_scenario(ep4, ep4.scenario().strategy, 2, Isolation::child_process);
  const RunOutcome c = run_scenario(dp, dp.scenario().strategy, 2, Isolation::child_process);
  const CompletedRun& two = std::get<CompletedRun>(a);
  const CompletedRun& four = std::get<CompletedRun>(b);
  const CompletedRun& none = std::get<CompletedRun>(c);
  ASSERT_TRUE(two.result.fits() && four.result.fits() && none.result.fits());
  ASSERT_GT(four.result.iteration_seconds, 0);
  // The experts (8 x 3 x 256 x 512 per layer, 2 layers: 6.3 M of the model's parameters, 16 B
  // each with bf16 AdamW's weights, gradients and two moments... here 2 + 2 + 4) split over more
  // ranks: each rank holds less.
  EXPECT_LT(two.result.peak_bytes, none.result.peak_bytes);
  EXPECT_LT(four.result.peak_bytes, two.result.peak_bytes);
  for (const CompletedRun* run : {&two, &four}) {
    const CommunicationTime t = communication_time(run->scheduled.schedule, run->result);
    const auto& expert = t.by_group[static_cast<std::size_t>(ParallelGroup::expert)];
    EXPECT_EQ(expert.collectives, 4 * 2);  // dispatch and combine, forward and backward, per layer
    EXPECT_GT(expert.collective_seconds, 0);
    // The experts' gradient reductions over their expert-data group: 2 ranks under EP 2; under
    // EP 4 on 4 ranks one, whose reductions are there but move nothing.
    const auto& expert_data = t.by_group[static_cast<std::size_t>(ParallelGroup::expert_data)];
    if (run == &two) {
      EXPECT_GT(expert_data.collectives, 0);
      EXPECT_GT(expert_data.collective_seconds, 0);
    } else {
      EXPECT_EQ(expert_data.collective_seconds, 0);
      const auto& tasks = run->scheduled.schedule.tasks;
      EXPECT_TRUE(std::any_of(tasks.begin(), tasks.end(), [](const models::Task& task) {
        return task.kind == TaskKind::collective && task.over == ParallelGroup::expert_data && task.groups == RankGroups{1, 4};
      })) << "the experts' reductions over groups of one rank, 4 apart";
    }
  }
  // The schedule's all_to_alls run over the expert groups {E, 1}; the experts' gradients over
  // {4 / E, E}.
  for (const models::Task& task : two.scheduled.schedule.tasks) {
    if (task.kind != TaskKind::collective) continue;
    if (task.over == ParallelGroup::expert) {
      EXPECT_EQ(*task.collective, models::CollectiveKind::all_to_all);
      EXPECT_EQ(task.groups, (RankGroups{2, 1}));
    }
    if (task.over == ParallelGroup::expert_data) {
      EXPECT_EQ(task.groups, (RankGroups{2, 2}));
    }
  }
}

// Compressed collectives under expert parallelism: the experts' gradients are all-reduced over
// the expert-data group (4 GPUs / EP 2 = 2 ranks), the rest over the 4, and the report bounds
// each over its own group; recursive doubling needs both groups to be powers of two.
TEST(ExpertParallelRun, CompressedAllReducesAreBoundedOverTheirOwnGroups) {
  const std::string codec = "  compression: {ratio: 4, compress_bandwidth: 200 GB/s, decompress_bandwidth: 300 GB/s, error_bound: 1e-3, algorithm: ";
  const PreparedScenario ep2(mixtral_on("  gpus_per_node: 4\n  expert: 2\n" + codec + "ring}\n"));
  const RunOutcome outcome = run_scenario(ep2, ep2.scenario().strategy, 2, Isolation::child_process);
  const std::string text = report(ep2, ep2.scenario().strategy, 2, outcome, false);
  EXPECT_THAT(text, HasSubstr("worst-case error after the gradient all-reduce over 4 ranks:"));
  EXPECT_THAT(text, HasSubstr("worst-case error after the expert gradient all-reduce over 2 ranks:"));
  const PreparedScenario doubling(mixtral_on("  gpus_per_node: 4\n  expert: 2\n" + codec + "recursive_doubling}\n"));
  EXPECT_THAT(report(doubling, doubling.scenario().strategy, 2, run_scenario(doubling, doubling.scenario().strategy, 2, Isolation::child_process), false),
              HasSubstr("worst-case error after the expert gradient all-reduce (recursive doubling) over 2 ranks: 0.001 x R (1 compression at eb 0.001)"));
  // 6 GPUs, EP 2: a data group of 6 and an expert-data group of 3.
  EXPECT_THAT(prepare("  gpus_per_node: 6\n  expert: 2\n" + codec + "recursive_doubling}\n"), HasSubstr("the data-parallel group holds 6 ranks"));
}

TEST(ExpertParallelRun, LayoutErrorsAreAtTheirKeys) {
  // Line 10 is the first parallelism key.
  EXPECT_THAT(prepare("  gpus_per_node: 8\n  expert: 3\n"), AllOf(HasSubstr("s.yaml:11:11: parallelism.expert: "), HasSubstr("3 does not divide the 8 experts")));
  // TP 4 leaves D = 2 ranks on 8 GPUs, which E = 4 cannot split.
  EXPECT_THAT(prepare("  gpus_per_node: 8\n  tensor: 4\n  sequence_parallel: true\n  expert: 4\n"),
              AllOf(HasSubstr("s.yaml:13:11: parallelism.expert: "), HasSubstr("4 does not divide the 2 data x context ranks")));
  EXPECT_THAT(prepare("  gpus_per_node: 8\n  tensor: 2\n  sequence_parallel: true\n  expert: 2\n  expert_tensor: 1\n"),
              AllOf(HasSubstr("s.yaml:14:18: parallelism.expert_tensor: "), HasSubstr("1 differs from tensor (2)")));
  EXPECT_THAT(prepare("  gpus_per_node: 8\n  expert: 2\n  zero: {stage: 3}\n"),
              AllOf(HasSubstr("s.yaml:11:11: parallelism.expert: "), HasSubstr("modelled with DDP or ZeRO-1")));
  EXPECT_THAT(prepare("  gpus_per_node: 8\n  tensor: 2\n  expert: 2\n"),
              AllOf(HasSubstr("parallelism.sequence_parallel: "), HasSubstr("requires sequence parallelism with MoE and tensor parallelism")));
  EXPECT_EQ(prepare("  gpus_per_node: 8\n  tensor: 2\n  sequence_parallel: true\n  expert: 4\n  zero: {stage: 1}\n"), "prepared");
  EXPECT_EQ(mixtral_on("  expert: 2\n  expert_tensor: 2\n").parallelism->layout.expert_tensor, 2);
}

}  // namespace
}  // namespace comptrain::sim

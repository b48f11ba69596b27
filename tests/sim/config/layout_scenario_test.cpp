// The parallelism section's model-parallel layout (tensor, pipeline, context, expert, ...): read,
// and checked against the model and the GPUs when the scenario is prepared, every inconsistent
// combination an InputError at the line of the key it is about.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "common/scenario_error.hpp"
#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/sim/run/run.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::sim {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A Llama-3-8B (32 heads, 8 KV heads, 32 layers) on `gpus_per_node` x `nodes` H100s with the
// given parallelism keys; the message of preparing it (or "prepared").
std::string prepare(const std::string& model, const std::string& parallelism, int accumulation = 1) {
  const std::string yaml = "model: {" + model + "}\n" + "training: {batch_size: 1, gradient_accumulation_steps: " +
                           std::to_string(accumulation) + "}\nplatform: dgx-h100-superpod\nparallelism:\n" + parallelism;
  try {
    const PreparedScenario prepared(parse_scenario(yaml, "s.yaml", test_support::kShippedScenarios));
  } catch (const InputError& e) {
    return e.what();
  }
  return "prepared";
}

const std::string kLlama3 = "hf_config: hf-configs/llama-3-8b.json, seq_len: 4096";
const std::string kMixtral = "hf_config: hf-configs/mixtral-8x7b-v0.1.json, seq_len: 4096";

TEST(LayoutScenario, ReadsTheKeys) {
  const Scenario s = parse_scenario(
      "model: {zoo: gpt}\ntraining: {batch_size: 1}\nplatform: dgx-h100-superpod\n"
      "parallelism: {nodes: 2, gpus_per_node: 8, tensor: 4, pipeline: 2, context: 2, virtual_stages: 2, sequence_parallel: true, "
      "pipeline_layers: [3, 3, 3, 3], zero: {stage: 1}}\n",
      "s.yaml", ".");
  ASSERT_TRUE(s.parallelism);
  const models::ParallelLayout& l = s.parallelism->layout;
  EXPECT_EQ(l.tensor, 4);
  EXPECT_EQ(l.pipeline, 2);
  EXPECT_EQ(l.context, 2);
  EXPECT_EQ(l.expert, 1);
  EXPECT_EQ(l.virtual_stages, 2);
  EXPECT_TRUE(l.sequence_parallel);
  EXPECT_EQ(l.schedule, models::PipelineSchedule::interleaved);  // virtual stages choose it, as Megatron's flag does
  EXPECT_EQ(l.pipeline_layers, (std::vector<int>{3, 3, 3, 3}));
  EXPECT_EQ(s.parallelism->data.zero_stage, 1);
}

TEST(LayoutScenario, BadValuesAreErrorsWhenRead) {
  EXPECT_THAT(test_support::scenario_error("model: {zoo: gpt}\nparallelism: {tensor: 0}\n"), HasSubstr("s.yaml:2:23: 'parallelism.tensor' is '0'"));
  EXPECT_THAT(test_support::scenario_error("model: {zoo: gpt}\nparallelism:\n  pipeline_schedule: 2f2b\n"),
              HasSubstr("s.yaml:3:22: 'parallelism.pipeline_schedule' is '2f2b'; expected gpipe, 1f1b"));
  EXPECT_THAT(test_support::scenario_error("model: {zoo: gpt}\nparallelism: {pipeline_layers: [2, x]}\n"), HasSubstr("'parallelism.pipeline_layers' holds 'x'"));
  EXPECT_THAT(test_support::scenario_error("model: {zoo: gpt}\nparallelism: {sequence_parallel: maybe}\n"), HasSubstr("parallelism.sequence_parallel"));
}

TEST(LayoutScenario, EachRuleIsAnErrorAtItsKey) {
  // 32 heads, 8 KV heads: tensor 16 divides the heads, not the KV heads.
  EXPECT_THAT(prepare(kLlama3, "  gpus_per_node: 8\n  nodes: 2\n  tensor: 16\n"), AllOf(HasSubstr("s.yaml:7:11: parallelism.tensor: "), HasSubstr("8 KV heads")));
  EXPECT_THAT(prepare(kLlama3, "  gpus_per_node: 6\n  tensor: 3\n"), AllOf(HasSubstr("s.yaml:6:11: parallelism.tensor: "), HasSubstr("32 heads")));
  // 8 GPUs, tensor 2 x pipeline 3: not a divisor.
  EXPECT_THAT(prepare(kLlama3, "  gpus_per_node: 8\n  tensor: 2\n  pipeline: 3\n"), AllOf(HasSubstr("s.yaml:7:13: parallelism.pipeline: "), HasSubstr("8")));
  EXPECT_THAT(prepare(kLlama3, "  gpus_per_node: 8\n  expert: 2\n"), HasSubstr("s.yaml:6:11: parallelism.expert: "));
  EXPECT_THAT(prepare(kMixtral, "  gpus_per_node: 8\n  nodes: 2\n  expert: 16\n"), AllOf(HasSubstr("parallelism.expert: "), HasSubstr("8 experts")));
  EXPECT_THAT(prepare(kLlama3, "  gpus_per_node: 8\n  pipeline: 2\n  pipeline_layers: [10, 10]\n"),
              AllOf(HasSubstr("s.yaml:7:20: parallelism.pipeline_layers: "), HasSubstr("32")));
  EXPECT_THAT(prepare(kLlama3, "  gpus_per_node: 8\n  sequence_parallel: true\n"), HasSubstr("s.yaml:6:22: parallelism.sequence_parallel: "));
  EXPECT_THAT(prepare(kLlama3, "  gpus_per_node: 8\n  pipeline: 2\n  virtual_stages: 2\n  pipeline_schedule: 1f1b\n"),
              HasSubstr("parallelism.virtual_stages: "));
  // The interleaved schedule runs the micro-batches in groups of P (Megatron's assertion).
  EXPECT_THAT(prepare(kLlama3, "  gpus_per_node: 8\n  pipeline: 2\n  virtual_stages: 2\n", 3),
              AllOf(HasSubstr("parallelism.pipeline_schedule: "), HasSubstr("gradient_accumulation_steps is 3; expected a multiple of 2")));
  // A trace file is one rank's whole model.
  EXPECT_THAT(prepare("trace: ../tests/data/traces/tiny.json", "  gpus_per_node: 2\n  tensor: 2\n"),
              AllOf(HasSubstr("parallelism.tensor: "), HasSubstr("a trace file is one rank's whole model")));
}

TEST(LayoutScenario, SeveralBrokenRulesAreAllReported) {
  const std::string message = prepare(kLlama3, "  gpus_per_node: 8\n  tensor: 3\n  sequence_parallel: true\n  pipeline: 5\n");
  EXPECT_THAT(message, AllOf(HasSubstr("parallelism.tensor: "), HasSubstr("parallelism.pipeline: ")));
}

// Context parallelism's rules, each at its key's line: 2C divides the sequence (load-balanced
// chunks); under sequence parallelism T divides a rank's seq_len / C tokens; the exchange's name.
TEST(LayoutScenario, ContextParallelRulesAreErrorsAtTheirKeys) {
  EXPECT_EQ(prepare(kLlama3, "  gpus_per_node: 8\n  context: 2\n"), "prepared");
  EXPECT_EQ(prepare(kLlama3, "  gpus_per_node: 8\n  tensor: 2\n  sequence_parallel: true\n  context: 4\n  context_parallel_comm: all_gather\n"),
            "prepared");
  // 4096 tokens: 2 x 3 = 6 does not divide them.
  EXPECT_THAT(prepare(kLlama3, "  gpus_per_node: 8\n  context: 3\n"),
              AllOf(HasSubstr("s.yaml:6:12: parallelism.context: "), HasSubstr("2 x 3 = 6 does not divide the sequence length 4096")));
  // 48 tokens over C 8: 2 x 8 divides them, but a rank's 6 do not split over T 4.
  EXPECT_THAT(prepare("hf_config: hf-configs/llama-3-8b.json, seq_len: 48", "  gpus_per_node: 8\n  nodes: 4\n  tensor: 4\n  sequence_parallel: true\n  context: 8\n"),
              AllOf(HasSubstr("s.yaml:9:12: parallelism.context: "), HasSubstr("the 6 tokens of a context-parallel rank (48 / 8) do not split over the 4 tensor-parallel ranks")));
  // Without sequence parallelism the same layout is fine.
  EXPECT_EQ(prepare("hf_config: hf-configs/llama-3-8b.json, seq_len: 48", "  gpus_per_node: 8\n  nodes: 4\n  tensor: 4\n  context: 8\n"), "prepared");
  EXPECT_THAT(test_support::scenario_error("model: {zoo: gpt}\nparallelism:\n  context: 2\n  context_parallel_comm: a2a\n"),
              HasSubstr("s.yaml:4:26: 'parallelism.context_parallel_comm' is 'a2a'; expected ring"));
  EXPECT_THAT(test_support::scenario_error("model: {zoo: gpt}\nparallelism:\n  context_parallel_comm: ring\n"),
              HasSubstr("s.yaml:3:26: 'parallelism.context_parallel_comm' chooses context parallelism's exchange, and 'parallelism.context' is 1"));
}

TEST(LayoutScenario, ContextParallelCommTakesMegatronsNames) {
  for (const auto& [name, all_gather] : {std::pair<std::string, bool>{"ring", false}, {"p2p", false}, {"all_gather", true}, {"allgather", true}}) {
    const Scenario s = parse_scenario("model: {zoo: gpt}\ntraining: {batch_size: 1}\nplatform: dgx-h100-superpod\n"
                                      "parallelism: {gpus_per_node: 8, context: 2, context_parallel_comm: " + name + "}\n",
                                      "s.yaml", ".");
    EXPECT_EQ(s.parallelism->layout.context_all_gather, all_gather) << name;
  }
  const Scenario plain = parse_scenario("model: {zoo: gpt}\ntraining: {batch_size: 1}\nplatform: dgx-h100-superpod\nparallelism: {gpus_per_node: 8, context: 2}\n",
                                        "s.yaml", ".");
  EXPECT_FALSE(plain.parallelism->layout.context_all_gather);  // the ring by default, as Megatron's p2p
}

// parallelism.moe_token_dispatcher takes Megatron-LM's two modelled names, and only where the zoo
// builds Megatron's MoE layer: a mixture of experts under model or expert parallelism.
TEST(LayoutScenario, MoeTokenDispatcherIsMegatronsLayersChoice) {
  EXPECT_EQ(prepare(kMixtral, "  gpus_per_node: 8\n  expert: 8\n  moe_token_dispatcher: allgather\n"), "prepared");
  EXPECT_EQ(prepare(kMixtral, "  gpus_per_node: 8\n  pipeline: 2\n  moe_token_dispatcher: alltoall\n"), "prepared");
  EXPECT_THAT(test_support::scenario_error("model: {zoo: gpt}\nparallelism:\n  moe_token_dispatcher: flex\n"),
              HasSubstr("s.yaml:3:25: 'parallelism.moe_token_dispatcher' is 'flex'; expected alltoall (the default) or allgather"));
  EXPECT_THAT(prepare(kMixtral, "  gpus_per_node: 8\n  moe_token_dispatcher: allgather\n"),
              AllOf(HasSubstr("s.yaml:6:25: parallelism.moe_token_dispatcher: "), HasSubstr("Hugging Face's expert loop")));
  EXPECT_THAT(prepare(kLlama3, "  gpus_per_node: 8\n  tensor: 2\n  moe_token_dispatcher: allgather\n"),
              AllOf(HasSubstr("s.yaml:7:25: parallelism.moe_token_dispatcher: "), HasSubstr("the model has none")));
}

// Every valid layout is prepared for its replay: the interleaved schedule's chunks included
// (run_pipeline replays them; tests/sim/run/model_parallel_run_test.cpp).
TEST(LayoutScenario, EveryValidLayoutIsPrepared) {
  EXPECT_EQ(prepare(kLlama3, "  gpus_per_node: 8\n  pipeline: 2\n  virtual_stages: 2\n  pipeline_schedule: interleaved\n", 2), "prepared");
  EXPECT_EQ(prepare(kLlama3, "  gpus_per_node: 8\n  pipeline: 4\n  virtual_stages: 4\n", 8), "prepared");
  EXPECT_EQ(prepare(kMixtral, "  gpus_per_node: 8\n  expert: 8\n"), "prepared");
  EXPECT_EQ(prepare(kLlama3, "  gpus_per_node: 8\n  tensor: 8\n"), "prepared");
  EXPECT_EQ(prepare(kLlama3, "  gpus_per_node: 8\n"), "prepared");
}

}  // namespace
}  // namespace comptrain::sim

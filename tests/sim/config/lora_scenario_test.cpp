// Scenarios with `model.lora` (issue 31, item 5): the keys reach the zoo, and each bad value is
// refused at its line with the field named.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/support/input_error.hpp"
#include "common/scenario_error.hpp"

namespace comptrain::sim {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const std::filesystem::path& kScenarios = test_support::kShippedScenarios;

std::string error_of(std::string_view yaml) { return test_support::scenario_error(yaml, test_support::kShippedScenarios, /*build_model=*/true); }

TEST(LoraScenario, ReadsTheKeys) {
  const Scenario s = parse_scenario(
      "model:\n"
      "  hf_config: hf-configs/llama-2-7b.json\n"
      "  seq_len: 64\n"
      "  layers: 2\n"
      "  lora: {rank: 16, alpha: 32, dropout: 0.05, targets: [q_proj, k_proj, v_proj, o_proj], base: nf4}\n"
      "training: {precision: bf16, optimizer: adamw}\n",
      "s.yaml", kScenarios);
  ASSERT_TRUE(s.zoo_model && s.zoo_model->lora);
  const zoo::LoraSpec& lora = *s.zoo_model->lora;
  EXPECT_EQ(lora.rank, 16);
  EXPECT_EQ(lora.alpha, 32);
  EXPECT_EQ(lora.dropout, 0.05);
  EXPECT_EQ(lora.targets, (std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj"}));
  EXPECT_FALSE(lora.all_linear);
  EXPECT_TRUE(lora.nf4);
  const traces::Trace trace = build_trace(s);
  EXPECT_EQ(trace.metadata().at("lora_targets"), "q_proj,k_proj,v_proj,o_proj");
  EXPECT_EQ(trace.metadata().at("lora_base"), "nf4");
  // 2 layers x 4 projections of 4096 x 4096, rank 16: 2·4·16·(4096 + 4096) = 1,048,576 adapter
  // parameters, fp32 (the model is bf16): their gradients 4 bytes each.
  std::int64_t gradient = 0;
  for (const auto& t : trace.tensors()) {
    if (!t.is_view() && t.role == traces::TensorRole::gradient) gradient += t.bytes();
  }
  EXPECT_EQ(gradient, 4 * 2 * 4 * 16 * (4096 + 4096));

  const Scenario all = parse_scenario("model: {zoo: llama, layers: 1, seq_len: 16, lora: {targets: all-linear}}\n", "s.yaml", kScenarios);
  EXPECT_TRUE(all.zoo_model->lora->all_linear);
  EXPECT_EQ(all.zoo_model->lora->rank, 8);  // PEFT's default r
}

TEST(PackingScenario, ReadsTheDocuments) {
  const Scenario s = parse_scenario("model: {zoo: llama, layers: 1, seq_len: 64, packing: {documents: 4}}\n", "s.yaml", kScenarios);
  ASSERT_TRUE(s.zoo_model);
  EXPECT_EQ(s.zoo_model->packed_documents, 4);
  EXPECT_EQ(build_trace(s).metadata().at("packed_documents"), "4");
  EXPECT_THAT(error_of("model: {zoo: llama, seq_len: 64, packing: {}}\n"), HasSubstr("'model.packing' needs 'documents'"));
  EXPECT_THAT(error_of("model: {zoo: llama, seq_len: 64, packing: {documents: 0}}\n"),
              HasSubstr("'model.packing.documents' is '0'; expected a positive integer"));
  EXPECT_THAT(error_of("model: {zoo: llama, layers: 1, seq_len: 64, packing: {documents: 65}}\n"),
              AllOf(HasSubstr("s.yaml:1:54"), HasSubstr("packing.documents: must be between 1 and seq_len (64), got 65")));
}

TEST(LoraScenario, ErrorsNameTheLine) {
  EXPECT_THAT(error_of("model: {zoo: llama, seq_len: 16, lora: {rank: 0}}\n"),
              AllOf(HasSubstr("s.yaml:1:47"), HasSubstr("'model.lora.rank' is '0'; expected an integer from 1")));
  EXPECT_THAT(error_of("model: {zoo: llama, seq_len: 16, lora: {dropout: 1}}\n"), HasSubstr("'model.lora.dropout' is '1'; expected a probability"));
  EXPECT_THAT(error_of("model: {zoo: llama, seq_len: 16, lora: {targets: all}}\n"), HasSubstr("expected all-linear or a list"));
  EXPECT_THAT(error_of("model: {zoo: llama, seq_len: 16, lora: {base: int4}}\n"), HasSubstr("'model.lora.base' is 'int4'; expected nf4"));
  EXPECT_THAT(error_of("model: {zoo: llama, seq_len: 16, lora: {ranks: 8}}\n"), HasSubstr("rank"));  // did-you-mean
  // The zoo's errors at the lora key's line.
  EXPECT_THAT(error_of("model: {zoo: llama, layers: 1, seq_len: 16, lora: {targets: [q_prj]}}\n"),
              AllOf(HasSubstr("s.yaml:1:51"), HasSubstr("lora.targets: 'q_prj' names no linear layer")));
  EXPECT_THAT(error_of("model: {zoo: gpt2, lora: {rank: 8}}\n"), AllOf(HasSubstr("s.yaml:1:26"), HasSubstr("LoRA is written for the decoders")));
  EXPECT_THAT(error_of("model: {zoo: llama, layers: 1, seq_len: 16, lora: {base: nf4}}\ntraining: {precision: amp-bf16}\n"),
              HasSubstr("lora.base: nf4 is modelled on a 16-bit model"));
  EXPECT_THAT(error_of("model: {zoo: llama, layers: 1, seq_len: 16, lora: {}}\nplatform: a100-80gb\n"
                       "parallelism: {gpus_per_node: 2, fsdp: {units: [\"model.layers.*\"]}}\n"),
              AllOf(HasSubstr("s.yaml:1:51"), HasSubstr("'model.lora' with 'parallelism.fsdp' is not modelled")));
}

}  // namespace
}  // namespace comptrain::sim

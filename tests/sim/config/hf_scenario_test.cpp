// Scenarios with `model: {hf_config: ...}` and strategy rules selecting by `modules` (issue 19).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/support/input_error.hpp"
#include "common/scenario_error.hpp"

namespace comptrain::sim {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const std::filesystem::path& kScenarios = test_support::kShippedScenarios;

std::string error_of(std::string_view yaml) { return test_support::scenario_error(yaml); }

TEST(HfScenario, ReadsTheConfigRelativeToTheScenario) {
  const Scenario s = parse_scenario(
      "model: {hf_config: hf-configs/llama-3-8b.json, seq_len: 128, layers: 2, attention: sdpa-flash}\n"
      "training: {batch_size: 2, precision: amp-bf16, optimizer: adamw}\n",
      "s.yaml", kScenarios);
  EXPECT_EQ(s.name, "llama-3-8b");
  ASSERT_TRUE(s.zoo_model);
  EXPECT_EQ(s.zoo_model->model, "llama");
  ASSERT_TRUE(s.zoo_model->decoder);
  EXPECT_EQ(s.zoo_model->decoder->kv_heads, 8);
  const traces::Trace trace = build_trace(s);
  EXPECT_EQ(trace.metadata().at("layers"), "2");  // the scenario's override over the config's 32
  EXPECT_EQ(trace.metadata().at("seq_len"), "128");
  EXPECT_EQ(trace.metadata().at("attention"), "flash");
  EXPECT_THAT(trace.metadata().at("hf_config"), HasSubstr("llama-3-8b.json"));

  // gpt2 and bert configs give the zoo's models with the config's shape.
  const Scenario gpt2 = parse_scenario("model: {hf_config: hf-configs/gpt2.json, seq_len: 64}\n", "s.yaml", kScenarios);
  EXPECT_EQ(gpt2.zoo_model->model, "gpt2");
  EXPECT_EQ(gpt2.zoo_model->layers, 12);
}

TEST(HfScenario, ErrorsNameTheScenarioOrTheConfig) {
  EXPECT_THAT(error_of("model: {hf_config: hf-configs/llama-2-7b.json}\n"),
              AllOf(HasSubstr("s.yaml:1:8"), HasSubstr("'model.seq_len' is required with 'hf_config'")));
  EXPECT_THAT(error_of("model: {hf_config: hf-configs/nope.json, seq_len: 8}\n"), HasSubstr("nope.json"));
  EXPECT_THAT(error_of("model: {zoo: llama, hf_config: hf-configs/gpt2.json, seq_len: 8}\n"),
              HasSubstr("exactly one of 'zoo' (a model name: comptrain trace list), 'hf_config'"));
  // A config the zoo does not model: the file and the field.
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "comptrain_hf_scenario_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "moe.json") << R"({"model_type": "deepseek_v2", "hidden_size": 8})";
  try {
    parse_scenario("model: {hf_config: moe.json, seq_len: 8}\n", "s.yaml", dir);
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(std::string(e.what()), AllOf(HasSubstr("moe.json: 'model_type' is \"deepseek_v2\""), HasSubstr("expected one of llama")));
  }
  std::filesystem::remove_all(dir);
}

// model.moe: the routed tokens of a mixture-of-experts config, checked at their line; the zoo
// checks them against the architecture when it builds the trace.
TEST(HfScenario, MoeRoutingKeys) {
  const Scenario s = parse_scenario(
      "model: {hf_config: hf-configs/mixtral-8x7b-v0.1.json, seq_len: 64, layers: 1, moe: {load_imbalance: 1.5, capacity_factor: 1.25}}\n"
      "training: {precision: bf16}\n",
      "s.yaml", kScenarios);
  ASSERT_TRUE(s.zoo_model && s.zoo_model->routing);
  EXPECT_EQ(s.zoo_model->routing->load_imbalance, 1.5);
  EXPECT_EQ(s.zoo_model->routing->capacity_factor, 1.25);
  const traces::Trace trace = build_trace(s);
  // 128 slots over 8 experts: expert 0 1.5 x 16 = 24, capped at ceil(128 * 1.25 / 8) = 20; the
  // others (8 - 1.5) / 7 x 16 = 14.86 each (15 x 6, 14 by the largest remainders).
  EXPECT_EQ(trace.metadata().at("moe_tokens_per_expert"), "20,15,15,15,15,15,15,14");
  EXPECT_EQ(trace.metadata().at("moe_routing"), "load_imbalance 1.5");
  const Scenario load = parse_scenario("model: {hf_config: hf-configs/mixtral-8x7b-v0.1.json, seq_len: 64, moe: {expert_load: [2, 1, 1, 1, 1, 1, 1, 1]}}\n",
                                       "s.yaml", kScenarios);
  EXPECT_EQ(load.zoo_model->routing->expert_load.size(), 8u);

  const std::string mixtral = "model: {hf_config: hf-configs/mixtral-8x7b-v0.1.json, seq_len: 64, moe: ";
  EXPECT_THAT(error_of(mixtral + "{expert_load: [1, 1], load_imbalance: 2}}\n"), AllOf(HasSubstr("s.yaml:1:"), HasSubstr("not both")));
  EXPECT_THAT(error_of(mixtral + "{expert_load: [1, -1]}}\n"), HasSubstr("'model.moe.expert_load' holds -1; expected positive numbers"));
  EXPECT_THAT(error_of(mixtral + "{expert_load: 3}}\n"), HasSubstr("non-empty list of positive numbers"));
  EXPECT_THAT(error_of(mixtral + "{load_imbalance: 0.5}}\n"), HasSubstr("'model.moe.load_imbalance' is 0.5; expected"));
  EXPECT_THAT(error_of(mixtral + "{capacity_factor: 0}}\n"), HasSubstr("'model.moe.capacity_factor' is 0; expected a positive number"));
  EXPECT_THAT(error_of(mixtral + "{capacity: 1}}\n"), HasSubstr("capacity"));
  EXPECT_THAT(error_of("model: {trace: t.json, moe: {capacity_factor: 1}}\n"), HasSubstr("'moe' applies to zoo models only"));
  // On a dense model the zoo refuses it when it builds the trace.
  const Scenario dense = parse_scenario("model: {hf_config: hf-configs/llama-2-7b.json, seq_len: 16, layers: 1, moe: {capacity_factor: 1}}\n",
                                        "s.yaml", kScenarios);
  EXPECT_THROW(build_trace(dense), InputError);
}

// Errors of the config, and those the zoo finds when it builds the model, carry the scenario's
// line: the key the scenario gives, else hf_config's (shared/defects-2/21).
TEST(HfScenario, ModelErrorsCarryTheScenarioLine) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "comptrain_hf_location_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "kv.json") << R"({"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 3, "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 512})";
  std::ofstream(dir / "ok.json") << R"({"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 512})";
  const auto build_error = [&](const std::string& yaml) {
    try {
      build_trace(parse_scenario(yaml, "s.yaml", dir));
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(build_error("model:\n  seq_len: 64\n  hf_config: kv.json\n"),
              AllOf(testing::StartsWith("s.yaml:3:14: model: num_key_value_heads: 3 does not divide the 4 attention heads ("),
                    HasSubstr("kv.json)")));
  // A key the scenario gives is its own line.
  EXPECT_THAT(build_error("model:\n  hf_config: ok.json\n  seq_len: 64\n  layers: 9000\n"),
              testing::StartsWith("s.yaml:4:11: model: layers: 9000 is above the zoo's limit of 8192"));
  EXPECT_THAT(build_error("model:\n  hf_config: ok.json\n  seq_len: 64\n  moe: {capacity_factor: 1}\n"),
              testing::StartsWith("s.yaml:4:8: model: moe: routing options"));
  // model.tie_embeddings: a boolean at its line; false on gpt2 (tied by definition) and the key
  // on a CNN are the zoo's errors, placed at the key's line.
  EXPECT_THAT(build_error("model:\n  zoo: gpt2\n  layers: 1\n  tie_embeddings: false\n"),
              testing::StartsWith("s.yaml:4:19: model: tie_embeddings: false is written for models 'gpt' and 'llama'"));
  EXPECT_THAT(build_error("model:\n  zoo: resnet18\n  tie_embeddings: true\n"),
              testing::StartsWith("s.yaml:3:19: model: tie_embeddings: a language model option"));
  EXPECT_THAT(error_of("model:\n  zoo: gpt\n  tie_embeddings: maybe\n"), AllOf(HasSubstr("s.yaml:3:19"), HasSubstr("model.tie_embeddings"),
                                                                                  HasSubstr("expected true or false")));
  EXPECT_THAT(error_of("model:\n  trace: t.json\n  tie_embeddings: false\n"),
              HasSubstr("s.yaml:3:19: 'tie_embeddings' applies to zoo models only"));
  // The key reaches the zoo: an hf_config's tie_word_embeddings overridden, gpt untied.
  const Scenario tied = parse_scenario("model:\n  hf_config: ok.json\n  seq_len: 64\n  tie_embeddings: true\n", "s.yaml", dir);
  EXPECT_EQ(tied.zoo_model->tie_embeddings, true);
  const traces::Trace tied_trace = build_trace(tied);
  const auto named = [](const traces::Trace& trace, const std::string& name) {
    return std::any_of(trace.tensors().begin(), trace.tensors().end(), [&](const traces::Tensor& t) { return t.name == name; });
  };
  EXPECT_FALSE(named(tied_trace, "lm_head.weight"));
  EXPECT_TRUE(named(build_trace(parse_scenario("model:\n  hf_config: ok.json\n  seq_len: 64\n", "s.yaml", dir)), "lm_head.weight"));
  const traces::Trace untied_gpt = build_trace(parse_scenario("model: {zoo: gpt, layers: 1, hidden: 64, heads: 4, seq_len: 16, vocab: 100, tie_embeddings: false}\n",
                                                              "s.yaml", dir));
  EXPECT_TRUE(named(untied_gpt, "lm_head.weight"));
  EXPECT_EQ(untied_gpt.metadata().at("tie_embeddings"), "false");
  // A config that cannot be read: the scenario's hf_config line, then the file.
  try {
    parse_scenario("model:\n  hf_config: missing.json\n  seq_len: 64\n", "s.yaml", dir);
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(std::string(e.what()), AllOf(testing::StartsWith("s.yaml:2:14: model.hf_config: "), HasSubstr("missing.json")));
  }
  // An inline config's error names its line once.
  try {
    parse_scenario("model:\n  hf_config: {model_type: llama, hidden_size: 64}\n  seq_len: 64\n", "s.yaml", dir);
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_THAT(message, AllOf(testing::StartsWith("s.yaml:2:14: model.hf_config: "), HasSubstr("'num_hidden_layers' is missing")));
    EXPECT_EQ(message.find("model.hf_config", 20), std::string::npos) << message;
  }
  std::filesystem::remove_all(dir);
}

TEST(HfScenario, ModulePatternsAreCheckedAtTheirLine) {
  const std::string head = "model: {zoo: llama, layers: 2, hidden: 64, heads: 4, vocab: 100, seq_len: 16}\nstrategy:\n  rules:\n";
  EXPECT_THAT(error_of(head + "    - select: {modules: [\"layers.[15-0]\"]}\n      recompute: {mode: sqrt_n}\n"),
              AllOf(HasSubstr("s.yaml:4:26"), HasSubstr("'strategy.rules[0].select.modules'"), HasSubstr("is empty (15 > 0)")));
  EXPECT_THAT(error_of(head + "    - select: {modules: []}\n      recompute: {mode: sqrt_n}\n"), HasSubstr("non-empty list"));
  const Scenario s = parse_scenario(head + "    - select: {modules: [\"layers.[0-1].mlp\"]}\n      recompute: {mode: sqrt_n}\n",
                                    "s.yaml", kScenarios);
  ASSERT_EQ(s.strategy.rules.size(), 1u);
  EXPECT_EQ(s.strategy.rules[0].select.modules, std::vector<std::string>{"layers.[0-1].mlp"});
}

// recompute mode selective: keep and blocks, each checked where it is written.
TEST(HfScenario, SelectiveCheckpointingRules) {
  const std::string head = "model: {zoo: llama, layers: 2, hidden: 64, heads: 4, vocab: 100, seq_len: 16}\nstrategy:\n  rules:\n"
                           "    - select: {modules: [\"model.layers\"]}\n";
  const Scenario s = parse_scenario(head + "      recompute: {mode: selective, blocks: [\"model.layers.*\"], keep: [\"model.layers.*.add_1.out\"]}\n",
                                    "s.yaml", kScenarios);
  const auto* r = s.strategy.rules.at(0).recompute();
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->mode, models::RecomputeAction::Mode::selective);
  EXPECT_EQ(r->blocks, std::vector<std::string>{"model.layers.*"});
  EXPECT_THAT(error_of(head + "      recompute: {mode: selective, keep: [\"a\"]}\n"), AllOf(HasSubstr("s.yaml:5:18"), HasSubstr("needs 'blocks'")));
  EXPECT_THAT(error_of(head + "      recompute: {mode: selective, blocks: [\"model.layers.*\"]}\n"), HasSubstr("mode selective needs 'keep'"));
  EXPECT_THAT(error_of(head + "      recompute: {mode: checkpoints, blocks: [\"x\"], keep: [\"a\"]}\n"), HasSubstr("'blocks' applies to mode selective only"));
  EXPECT_THAT(error_of(head + "      recompute: {mode: selective, blocks: [\"layers.[2-1]\"], keep: [\"a\"]}\n"),
              AllOf(HasSubstr("s.yaml:5:"), HasSubstr("'strategy.rules[0].recompute.blocks'"), HasSubstr("is empty")));
}

// parallelism.fsdp: PyTorch FSDP2 in place of ddp or zero (models/transforms/README.md, "FSDP2").
TEST(HfScenario, FsdpSection) {
  const std::string head = "model: {zoo: llama, layers: 2, hidden: 64, heads: 4, vocab: 100, seq_len: 16}\nplatform: dgx-h100-superpod\n";
  const Scenario s = parse_scenario(head + "parallelism: {gpus_per_node: 8, fsdp: {units: [\"model.layers.*\"], reshard_after_forward: all_but_last, "
                                           "reduce_dtype: fp32}}\n",
                                    "s.yaml", kScenarios);
  ASSERT_TRUE(s.parallelism);
  EXPECT_EQ(s.parallelism->data.zero_stage, 3);
  ASSERT_TRUE(s.parallelism->data.fsdp);
  EXPECT_EQ(s.parallelism->data.fsdp->units, std::vector<std::string>{"model.layers.*"});
  EXPECT_EQ(s.parallelism->data.fsdp->reshard_after_forward, models::FsdpSpec::Reshard::all_but_last);
  EXPECT_EQ(s.parallelism->data.fsdp->sharded_parameter_bytes, 4);
  EXPECT_EQ(s.parallelism->data.fsdp->reduce_bytes, 4);
  const Scenario defaults = parse_scenario(head + "parallelism: {fsdp: {units: [\"layers.*\"]}}\n", "s.yaml", kScenarios);
  EXPECT_EQ(defaults.parallelism->data.fsdp->reshard_after_forward, models::FsdpSpec::Reshard::all);
  EXPECT_EQ(defaults.parallelism->data.fsdp->reduce_bytes, 0);  // the gradients' dtype, PyTorch's default
  EXPECT_THAT(error_of(head + "parallelism: {fsdp: {units: [\"x\"], reshard_after_forward: sometimes}}\n"),
              AllOf(HasSubstr("s.yaml:3:"), HasSubstr("expected true, false or all_but_last")));
  EXPECT_THAT(error_of(head + "parallelism: {fsdp: {}}\n"), HasSubstr("'units'"));
  EXPECT_THAT(error_of(head + "parallelism: {fsdp: {units: [\"x\"], reduce_dtype: fp8}}\n"), HasSubstr("expected fp32, bf16 or fp16"));
  EXPECT_THAT(error_of(head + "parallelism: {fsdp: {units: [\"layers.[3-1]\"]}}\n"), HasSubstr("'parallelism.fsdp.units'"));
  EXPECT_THAT(error_of(head + "parallelism: {zero: {stage: 3}, fsdp: {units: [\"x\"]}}\n"), HasSubstr("more than one of 'ddp'"));
  // FSDP2 with gradient accumulation: reduce-scatters at every micro-step (models/transforms/README.md).
  const Scenario accumulated = parse_scenario(head + "training: {gradient_accumulation_steps: 2}\nparallelism: {fsdp: {units: [\"x\"]}}\n", "s.yaml", kScenarios);
  EXPECT_EQ(accumulated.accumulation_steps, 2);
  EXPECT_TRUE(accumulated.parallelism->data.fsdp.has_value());
  EXPECT_THAT(error_of(head + "parallelism: {fsdp: {units: [\"x\"]}}\nplan: {zero_stages: [2, 3]}\n"),
              AllOf(HasSubstr("s.yaml:4:"), HasSubstr("'plan.zero_stages' searches DeepSpeed configurations")));
}

}  // namespace
}  // namespace comptrain::sim

namespace comptrain::sim {
namespace {

// model.implementation and model.norm_type (issue 31; traces/zoo/README.md, "torchtitan's Llama"):
// read at their lines, refused where they do not apply, and the zoo's refusals carry the
// implementation key's line.
TEST(HfScenario, TorchtitanImplementation) {
  const std::string llama = "model: {hf_config: hf-configs/llama-3-8b.json, seq_len: 64, layers: 1, ";
  const Scenario s = parse_scenario(llama + "implementation: torchtitan, norm_type: fused_rmsnorm}\ntraining: {precision: bf16}\n", "s.yaml",
                                    kScenarios);
  ASSERT_TRUE(s.zoo_model && s.zoo_model->torchtitan);
  EXPECT_EQ(s.zoo_model->torchtitan->norm, zoo::TorchtitanOptions::Norm::fused_rmsnorm);
  const traces::Trace trace = build_trace(s);
  EXPECT_EQ(trace.metadata().at("implementation"), "torchtitan");
  EXPECT_EQ(trace.metadata().at("norm_type"), "fused_rmsnorm");
  // The default norm_type is ModelArgs' rmsnorm; hugging-face is the default implementation.
  EXPECT_EQ(parse_scenario(llama + "implementation: torchtitan}\n", "s.yaml", kScenarios).zoo_model->torchtitan->norm,
            zoo::TorchtitanOptions::Norm::rmsnorm);
  EXPECT_FALSE(parse_scenario(llama + "implementation: hugging-face}\n", "s.yaml", kScenarios).zoo_model->torchtitan);

  EXPECT_THAT(error_of(llama + "implementation: torchtitn}\n"),
              AllOf(HasSubstr("s.yaml:1:"), HasSubstr("model.implementation"), HasSubstr("torchtitan")));
  EXPECT_THAT(error_of(llama + "norm_type: fused_rmsnorm}\n"), AllOf(HasSubstr("s.yaml:1:"), HasSubstr("with 'implementation: torchtitan'")));
  EXPECT_THAT(error_of(llama + "implementation: torchtitan, norm_type: layernorm}\n"),
              AllOf(HasSubstr("s.yaml:1:"), HasSubstr("model.norm_type"), HasSubstr("fused_rmsnorm")));
  EXPECT_THAT(error_of("model: {trace: t.json, implementation: torchtitan}\n"), HasSubstr("'implementation' applies to zoo models only"));
  // Qwen2 (q/k/v biases) is not torchtitan's model: refused at the implementation key's line.
  try {
    build_trace(parse_scenario("model:\n  hf_config: hf-configs/qwen2-7b.json\n  seq_len: 64\n  implementation: torchtitan\n", "s.yaml",
                               kScenarios));
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(std::string(e.what()), AllOf(testing::StartsWith("s.yaml:4:19: model: implementation: "), HasSubstr("no 'qwen2' architecture")));
  }
}

// model.implementation: megatron and model.megatron (traces/zoo/README.md, "Megatron-LM's
// Transformer Engine layers"): Megatron's defaults, each key read at its line, refused without
// the implementation or out of range.
TEST(HfScenario, MegatronImplementation) {
  const std::string llama = "model: {hf_config: hf-configs/llama-3-8b.json, seq_len: 64, layers: 1, ";
  const Scenario defaults = parse_scenario(llama + "implementation: megatron}\n", "s.yaml", kScenarios);
  ASSERT_TRUE(defaults.zoo_model && defaults.zoo_model->megatron);
  EXPECT_EQ(defaults.zoo_model->megatron->hidden_dropout, 0.1);
  EXPECT_EQ(defaults.zoo_model->megatron->attention_dropout, 0.1);
  const Scenario s = parse_scenario(
      llama + "implementation: megatron, megatron: {hidden_dropout: 0, attention_dropout: 0.0, rope_fusion: false, bias_activation_fusion: false}}\n",
      "s.yaml", kScenarios);
  EXPECT_EQ(s.zoo_model->megatron->hidden_dropout, 0.0);
  EXPECT_FALSE(s.zoo_model->megatron->rope_fusion);
  EXPECT_FALSE(s.zoo_model->megatron->bias_activation_fusion);
  EXPECT_EQ(build_trace(s).metadata().at("implementation"), "megatron");
  EXPECT_THAT(error_of(llama + "megatron: {hidden_dropout: 0}}\n"), AllOf(HasSubstr("s.yaml:1:"), HasSubstr("with 'implementation: megatron'")));
  EXPECT_THAT(error_of(llama + "implementation: megatron, megatron: {hidden_dropout: 1}}\n"),
              AllOf(HasSubstr("s.yaml:1:"), HasSubstr("model.megatron.hidden_dropout"), HasSubstr("[0, 1)")));
  EXPECT_THAT(error_of(llama + "implementation: megatron, megatron: {dropout: 0}}\n"), AllOf(HasSubstr("s.yaml:1:"), HasSubstr("hidden_dropout")));
  // moe_grouped_gemm: a boolean, read; on a dense model an error at the model.megatron key.
  EXPECT_FALSE(defaults.zoo_model->megatron->moe_grouped_gemm);
  EXPECT_THAT(error_of(llama + "implementation: megatron, megatron: {moe_grouped_gemm: 2}}\n"),
              AllOf(HasSubstr("s.yaml:1:"), HasSubstr("model.megatron.moe_grouped_gemm")));
  const Scenario dense = parse_scenario(llama + "implementation: megatron, megatron: {moe_grouped_gemm: true}}\n", "s.yaml", kScenarios);
  EXPECT_TRUE(dense.zoo_model->megatron->moe_grouped_gemm);
  try {
    build_trace(dense);
    ADD_FAILURE() << "a dense model's grouped GEMM accepted";
  } catch (const InputError& e) {
    EXPECT_THAT(std::string(e.what()), AllOf(HasSubstr("s.yaml:1:"), HasSubstr("megatron.moe_grouped_gemm"), HasSubstr("the model has none")));
  }
}

}  // namespace
}  // namespace comptrain::sim

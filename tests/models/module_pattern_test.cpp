// Selection by module (issue 19): module path patterns with numeric ranges, and the per-layer
// checkpointing and Megatron selective-recompute rules they make one rule each on the zoo's
// LLaMA decoder.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "comptrain/models/module_pattern.hpp"
#include "comptrain/models/op_time.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "common/test_platform.hpp"

namespace comptrain::models {
namespace {

TEST(ModulePattern, MatchesModulesAnywhereAndTheirSubtrees) {
  const std::string t = "model.layers.12.mlp.down_proj.out";
  EXPECT_TRUE(module_pattern_matches("layers.*.mlp", t));
  EXPECT_TRUE(module_pattern_matches("mlp", t));
  EXPECT_TRUE(module_pattern_matches("model.layers.12", t));
  EXPECT_TRUE(module_pattern_matches(t, t));
  EXPECT_TRUE(module_pattern_matches("layers.[0-15].*", t));
  EXPECT_TRUE(module_pattern_matches("layers.[12-12]", t));
  EXPECT_TRUE(module_pattern_matches("model.**.down_proj", t));
  EXPECT_TRUE(module_pattern_matches("model.**.layers.12", t));  // ** may match nothing
  EXPECT_TRUE(module_pattern_matches("mlp.*_proj", t));
  EXPECT_FALSE(module_pattern_matches("layers.[0-11]", t));
  EXPECT_FALSE(module_pattern_matches("layers.[13-15]", t));
  EXPECT_FALSE(module_pattern_matches("self_attn", t));
  EXPECT_FALSE(module_pattern_matches("layers.1", t));       // components, not prefixes of them
  EXPECT_FALSE(module_pattern_matches("layers.*.mlp", "model.layers.12.self_attn.q_proj.out"));
  EXPECT_FALSE(module_pattern_matches("layers.*", "model.layers"));  // `*` is exactly one component
  EXPECT_FALSE(module_pattern_matches("model.layers.[0-15]", "model.layers.norm.out"));  // not a number
  // What fnmatch would read as the class {0, 1, -, 5}: as a range it takes 10 and 15.
  EXPECT_TRUE(module_pattern_matches("layers.[0-15]", "model.layers.10.add.out"));
}

// The module instance a name lies in: the name's components through the end of the match.
TEST(ModulePattern, InstanceIsTheMatchedPrefix) {
  EXPECT_EQ(module_pattern_instance("layers.*", "model.layers.3.mlp.down_proj.out"), "model.layers.3");
  EXPECT_EQ(module_pattern_instance("layers.*", "model.layers.3.mlp.down_proj.backward"), "model.layers.3");
  EXPECT_EQ(module_pattern_instance("model.layers.[10-31]", "model.layers.31.add_1.out.grad.sum1"), "model.layers.31");
  EXPECT_EQ(module_pattern_instance("mlp", "model.layers.3.mlp.down_proj.out"), "model.layers.3.mlp");
  EXPECT_EQ(module_pattern_instance("model.**.mlp", "model.layers.3.mlp.up_proj.out"), "model.layers.3.mlp");
  EXPECT_EQ(module_pattern_instance("layers.*", "model.layers.3"), "model.layers.3");
  EXPECT_EQ(module_pattern_instance("layers.*", "model.norm.out"), std::nullopt);
  EXPECT_EQ(module_pattern_instance("layers.*", "model.layers"), std::nullopt);
}

TEST(ModulePattern, MalformedPatternsAreInputErrorsNamingThePattern) {
  EXPECT_NO_THROW(validate_module_pattern("layers.[0-15].*"));
  EXPECT_NO_THROW(validate_module_pattern("**.mlp"));
  const auto message = [](const std::string& pattern) {
    try {
      validate_module_pattern(pattern);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message("layers.[15-0]"), testing::AllOf(testing::HasSubstr("pattern 'layers.[15-0]'"), testing::HasSubstr("empty")));
  EXPECT_THAT(message("layers.[a-b]"), testing::HasSubstr("decimal numbers"));
  EXPECT_THAT(message("layers.[3]"), testing::HasSubstr("no '-'"));
  EXPECT_THAT(message("layers.h[0-3]"), testing::HasSubstr("not a whole component"));
  EXPECT_THAT(message("layers.[-1-3]"), testing::HasSubstr("decimal numbers"));
  EXPECT_THAT(message("layers..mlp"), testing::HasSubstr("empty path component"));
  EXPECT_THAT(message("layers.mlp."), testing::HasSubstr("empty path component"));
  EXPECT_THAT(message(""), testing::HasSubstr("empty"));
  EXPECT_THAT(message("a**.b"), testing::HasSubstr("'**' inside"));
  // validate_strategy checks them once, naming the rule.
  StrategySpec spec;
  spec.name = "s";
  StrategyRule rule;
  rule.select.modules = {"layers.[9-2]"};
  rule.action = RecomputeAction{};
  spec.rules = {rule};
  EXPECT_THAT([&] { validate_strategy(spec); },
              testing::ThrowsMessage<InputError>(testing::HasSubstr("strategy 's' rule 0: modules: pattern 'layers.[9-2]'")));
}

Platform platform() { return test_support::roofline_platform(); }

traces::Trace llama(zoo::Attention attention) {
  zoo::ModelRequest request;
  request.model = "llama";
  request.layers = 3;
  request.hidden = 64;
  request.heads = 4;
  request.vocab = 100;
  // Long enough that the saved activations, not the weights and AdamW states, make the peak.
  request.seq_len = 256;
  request.batch_size = 8;
  request.precision = zoo::Precision::amp_bf16;
  request.attention = attention;
  return zoo::build_model(request);
}

StrategySpec one_rule(TensorSelector select, std::vector<std::string> keep) {
  RecomputeAction action;
  action.mode = RecomputeAction::Mode::checkpoints;
  action.keep = std::move(keep);
  StrategySpec spec;
  spec.name = "rule";
  spec.rules = {StrategyRule{std::move(select), action}};
  return spec;
}

// The ops a schedule replays, by forward op name.
std::set<std::string> replayed(const Schedule& s) {
  std::set<std::string> out;
  for (const auto& t : s.tasks) {
    if (t.kind == TaskKind::recompute) out.insert(t.name.substr(0, t.name.find(" (recompute)")));
  }
  return out;
}

Schedule build(const traces::Trace& trace, const StrategySpec& spec) {
  static const OpTimeModel time_model(platform());
  auto result = build_schedule(trace, time_model, spec);
  if (!std::holds_alternative<Schedule>(result)) throw std::runtime_error("not applicable");
  return std::get<Schedule>(std::move(result));
}

// gradient_checkpointing_enable(): every decoder layer's input kept (the embedding output and
// each layer's second residual sum), everything inside the layers replayed; nothing outside.
TEST(ModuleSelection, PerLayerCheckpointingIsOneRule) {
  const traces::Trace trace = llama(zoo::Attention::flash);
  TensorSelector select;
  select.modules = {"model.layers"};
  const Schedule s = build(trace, one_rule(select, {"model.embed_tokens.out", "model.layers.*.add_1.out"}));
  const std::set<std::string> ops = replayed(s);
  ASSERT_FALSE(ops.empty());
  for (const std::string& op : ops) {
    EXPECT_TRUE(op.starts_with("model.layers.")) << op;
    EXPECT_FALSE(op.ends_with(".add_1")) << op;  // the kept layer outputs are never rebuilt
  }
  for (const char* layer : {"0", "1", "2"}) {
    const std::string p = std::string("model.layers.") + layer + ".";
    // Each layer's inside is rebuilt from its input: its norms, projections, attention, MLP.
    for (const std::string op : {"input_layernorm", "self_attn.q_proj", "self_attn.scaled_dot_product_attention", "add",
                                 "post_attention_layernorm", "mlp.gate_proj", "mlp.act_fn", "mlp.mul"}) {
      EXPECT_TRUE(ops.contains(p + op)) << p + op;
    }
  }
  EXPECT_LT(sequential_peak_bytes(s), sequential_peak_bytes(build(trace, StrategySpec{})));
}

// Megatron-LM's selective recomputation: the attention core's softmax output and its 16-bit
// copy are dropped and rebuilt from the kept q and k copies (V's copy and the context, which
// o_proj saves, are kept); nothing else is replayed but the additive causal mask, freed after the
// forward pass and made again.
TEST(ModuleSelection, MegatronSelectiveRecomputeIsOneRule) {
  const traces::Trace trace = llama(zoo::Attention::eager);
  TensorSelector select;
  select.modules = {"layers.*.self_attn.softmax", "layers.*.self_attn.context"};
  const std::set<std::string> ops = replayed(build(trace, one_rule(select, {"*.context.value_copy.out", "*.self_attn.context.out"})));
  std::set<std::string> expected = {"model.causal_mask"};
  for (const char* layer : {"0", "1", "2"}) {
    const std::string p = std::string("model.layers.") + layer + ".self_attn.";
    for (const char* op : {"scores", "scores.mul", "scores.add_mask", "softmax", "context.cast"}) expected.insert(p + op);
  }
  EXPECT_EQ(ops, expected);
}

// A numeric range picks layers: [1-2] replays layers 1 and 2 only.
TEST(ModuleSelection, RangesPickLayers) {
  const traces::Trace trace = llama(zoo::Attention::flash);
  TensorSelector select;
  select.modules = {"layers.[1-2]"};
  const std::set<std::string> ops = replayed(build(trace, one_rule(select, {"model.layers.*.add_1.out"})));
  ASSERT_FALSE(ops.empty());
  EXPECT_TRUE(std::none_of(ops.begin(), ops.end(), [](const std::string& op) { return op.starts_with("model.layers.0."); }));
  EXPECT_TRUE(ops.contains("model.layers.1.mlp.mul"));
  EXPECT_TRUE(ops.contains("model.layers.2.mlp.mul"));
}

}  // namespace
}  // namespace comptrain::models

// Mixture-of-experts decoders (issue 19): the shipped Mixtral, Qwen2-MoE and Qwen3-MoE configs against the
// published parameter totals and activated parameters, the saved bytes of a sparse layer against
// a hand count of Hugging Face's expert loop, FLOPs that follow the routed token counts, the
// routed-token assumption (uniform, given shares, a capacity factor) and the configs' errors.
// tests/capture/capture_zoo_test.cpp (CaptureMoe) checks the same blocks against real autograd.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "comptrain/support/input_error.hpp"
#include "comptrain/traces/summary.hpp"
#include "comptrain/traces/trace_json.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "zoo_test_support.hpp"

namespace comptrain::zoo {
namespace {

using traces::OpKind;
using traces::Phase;
using traces::TensorRole;
using traces::Trace;

std::int64_t parameters(const Trace& trace, const std::string& containing = "") {
  std::int64_t count = 0;
  for (const auto& tensor : trace.tensors()) {
    if (tensor.role == TensorRole::weight && tensor.name.find(containing) != std::string::npos) count += tensor.elements();
  }
  return count;
}

ModelRequest from_config(const std::string& name, std::int64_t seq_len) {
  const std::string path = std::string(COMPTRAIN_HF_CONFIG_DIR) + "/" + name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::stringstream text;
  text << in.rdbuf();
  ModelRequest request;
  static_cast<ModelSpec&>(request) = spec_from_hf_config(text.str(), name);
  request.seq_len = seq_len;
  return request;
}

// Published totals: OLMoE-1B-7B-0924 6,919,161,856 (the Hub's safetensors metadata) and "uses
// only 1B per input token" (Muennighoff et al. 2024, arXiv 2409.02060, abstract: the name's 1B,
// 1.28B counted); Qwen3-30B-A3B "30.5B in total and 3.3B activated" (the model card; the exact
// figures are the hand count in traces/zoo/README.md, "Mixture of experts"), Mixtral-8x7B 46,702,792,704 (keras-team/keras-hub@d11ecb3af01b6cf6d1a057bf63dfa85993a4c8f3
// keras_hub/src/models/mixtral/mixtral_presets.py, "params"; the Hub's model.safetensors.index.json
// total_size 93,405,585,408 bytes of bf16) and Qwen1.5-MoE-A2.7B 14,315,784,192
// (keras-team/keras-hub@6214a1b4575e934546d3b8a72d54923fbd38cd18 keras_hub/src/models/qwen_moe/qwen_moe_presets.py).
// Activated per token (the router, top_k experts, any shared expert, everything else): Mistral
// AI's "46.7B total parameters but only uses 12.9B parameters per token" (announcement "Mixtral of
// experts", mistral.ai/news/mixtral-of-experts, 2023-12-11; Jiang et al. 2024, arXiv 2401.04088,
// abstract: 47B and 13B), Qwen's "14.3B parameters in total and 2.7B activated parameters" (the
// Qwen1.5-MoE-A2.7B model card); the exact sums are computed by hand in traces/zoo/README.md
// ("Mixture of experts").
TEST(MoeConfig, ShippedConfigsHaveThePublishedTotalAndActivatedParameters) {
  struct Case {
    const char* file;
    std::int64_t total;
    std::int64_t activated;
    double published_activated;  // billions, as rounded by the publisher
    double rounding;             // how far the publisher's rounding may be from the exact figure
    std::int64_t experts;
    std::int64_t top_k;
  };
  // Qwen3-30B-A3B's card gives 3.3B activated for 3.35B: cut, not rounded.
  for (const Case& c : {Case{"mixtral-8x7b-v0.1.json", 46'702'792'704, 12'879'925'248, 12.9, 0.05, 8, 2},
                        Case{"qwen1.5-moe-a2.7b.json", 14'315'784'192, 2'689'173'504, 2.7, 0.05, 60, 4},
                        Case{"qwen3-30b-a3b.json", 30'532'122'624, 3'353'032'704, 3.3, 0.1, 128, 8},
                        Case{"olmoe-1b-7b-0924.json", 6'919'161'856, 1'282'017'280, 1.0, 0.3, 64, 8}}) {
    ModelRequest request = from_config(c.file, 32);
    request.precision = Precision::bf16;
    const Trace trace = build_model(request);
    EXPECT_EQ(parameters(trace), c.total) << c.file;
    // The routed experts' weights are `.experts.N.`; one token uses top_k of each layer's experts.
    const std::int64_t routed = parameters(trace, ".experts.");
    EXPECT_EQ(routed % c.experts, 0) << c.file;
    const std::int64_t activated = parameters(trace) - routed / c.experts * (c.experts - c.top_k);
    EXPECT_EQ(activated, c.activated) << c.file;
    EXPECT_NEAR(static_cast<double>(activated) / 1e9, c.published_activated, c.rounding) << c.file;
    EXPECT_EQ(trace.metadata().at("moe_experts"), std::to_string(c.experts));
  }
}

// A sparse layer's saved bytes per sample (difference of a 2- and a 1-layer model) minus a dense
// layer's, counted by hand from Hugging Face's expert loop (what each op's autograd node keeps;
// tests/capture checks the same in fp32 against real autograd), s tokens, E experts, top-k,
// expert width I, uniform routing (sum of the tokens over the experts = s·k):
//   router, model.bfloat16(): fp32 softmax 4·sE, top-k int64 indices 8·sk; Mixtral's
//     renormalisation keeps the divisor 4·s and autograd's clone of the top-k weights 4·sk;
//   per routed token slot: torch.where's int64 (slot, token) pair 16, the routing weight picked
//     for it 2, the gathered row 2h, the SwiGLU's four I-wide tensors 8I, the expert output the
//     weight multiplies 2h: 18 + 4h + 8I;
//   the dense layer's SwiGLU keeps 8·sI_dense (the input, the norm's output, is kept by both).
// Under amp-bf16 the router's linear keeps its own bf16 copy of the input (2·sh) where the dense
// MLP's gate and up keep two (4·sh); per slot each expert's two projections keep bf16 copies of
// the gathered fp32 rows (4h, the fp32 rows themselves are not kept), the routing weight is fp32
// (4): 20 + 6h + 8I.
std::int64_t saved_per_layer(const DecoderArchitecture& base, Precision precision, std::int64_t s) {
  const auto build = [&](std::int64_t layers) {
    DecoderArchitecture arch = base;
    arch.layers = layers;
    ModelRequest request = test_support::Request("llama").batch_size(2).precision(precision).seq_len(s).attention(Attention::flash);
    request.decoder = arch;
    return test_support::saved_for_backward(build_model(request));
  };
  const auto one = build(1);
  const auto two = build(2);
  EXPECT_EQ(two.fixed, one.fixed);
  return two.per_sample - one.per_sample;
}

DecoderArchitecture small_decoder(const std::string& family) {
  DecoderArchitecture arch;
  arch.family = family;
  arch.hidden = 64;
  arch.heads = 4;
  arch.kv_heads = 2;
  arch.intermediate = 160;
  arch.vocab = 100;
  arch.max_positions = 4096;
  return arch;
}

TEST(MoeSaved, SparseLayerMatchesTheHandCountOfTheExpertLoop) {
  const std::int64_t s = 24, h = 64, E = 4, k = 2, I = 48, dense_I = 160;
  DecoderArchitecture dense = small_decoder("llama");
  DecoderArchitecture mixtral = small_decoder("mixtral");
  MoeArchitecture moe;
  moe.experts = E;
  moe.top_k = k;
  moe.intermediate = I;
  mixtral.moe = moe;
  const std::int64_t router = 4 * s * E + 12 * s * k + 4 * s;
  EXPECT_EQ(saved_per_layer(mixtral, Precision::bf16, s) - saved_per_layer(dense, Precision::bf16, s),
            router + s * k * (18 + 4 * h + 8 * I) - 8 * s * dense_I);
  EXPECT_EQ(saved_per_layer(mixtral, Precision::amp_bf16, s) - saved_per_layer(dense, Precision::amp_bf16, s),
            2 * s * h + router + s * k * (20 + 6 * h + 8 * I) - (4 * s * h + 8 * s * dense_I));

  // Qwen2-MoE: no renormalisation (norm_topk_prob false: no divisor, no clone), q/k/v biases
  // (no saved bytes), and a shared expert of width S on every token with its sigmoid gate:
  // 8·sS for its SwiGLU, its output 2·sh (the gate product's other operand), the gate 2·s.
  DecoderArchitecture qwen = small_decoder("qwen2_moe");
  qwen.qkv_bias = true;
  const std::int64_t S = 80;
  moe.normalize_top_k = false;
  moe.shared_expert_intermediate = S;
  qwen.moe = moe;
  EXPECT_EQ(saved_per_layer(qwen, Precision::bf16, s) - saved_per_layer(dense, Precision::bf16, s),
            4 * s * E + 8 * s * k + s * k * (18 + 4 * h + 8 * I) + 8 * s * S + 2 * s * h + 2 * s - 8 * s * dense_I);

  // Qwen3-MoE: Qwen3's attention (q_norm and k_norm, the same in the dense Qwen3 it is set
  // against) with Qwen2-MoE's block and no shared expert; with norm_topk_prob the router keeps
  // Mixtral's divisor and clone.
  DecoderArchitecture qwen3_dense = small_decoder("qwen3");
  qwen3_dense.qk_norm = DecoderArchitecture::QkNorm::per_head;
  DecoderArchitecture qwen3 = qwen3_dense;
  qwen3.family = "qwen3_moe";
  moe.normalize_top_k = true;
  moe.shared_expert_intermediate = 0;
  qwen3.moe = moe;
  EXPECT_EQ(saved_per_layer(qwen3, Precision::bf16, s) - saved_per_layer(qwen3_dense, Precision::bf16, s),
            router + s * k * (18 + 4 * h + 8 * I) - 8 * s * dense_I);
}

// The experts' GEMMs run at their routed token counts: forward, 2·3·h·I FLOPs per token slot,
// whatever the split over the experts; the layer's other ops do not depend on it.
TEST(MoeFlops, ExpertGemmsFollowTheRoutedTokens) {
  const std::int64_t s = 16, h = 64, I = 48, batch = 3;
  DecoderArchitecture arch = small_decoder("mixtral");
  arch.layers = 1;
  MoeArchitecture moe;
  moe.experts = 4;
  moe.top_k = 2;
  moe.intermediate = I;
  arch.moe = moe;
  const auto expert_flops = [&](const ExpertRouting& routing) {
    ModelRequest request = test_support::Request("llama").batch_size(batch).precision(Precision::bf16).seq_len(s);
    request.decoder = arch;
    request.routing = routing;
    const Trace trace = build_model(request);
    std::vector<std::int64_t> per_expert(4, 0);
    for (const auto& op : trace.ops()) {
      if (op.phase != Phase::forward || op.kind != OpKind::linear) continue;
      for (std::size_t e = 0; e < 4; ++e) {
        if (op.name.find(".experts." + std::to_string(e) + ".") != std::string::npos) per_expert[e] += op.flops.at(batch);
      }
    }
    return per_expert;
  };
  const std::int64_t per_token = 2 * 3 * h * I;
  EXPECT_EQ(expert_flops({}), std::vector<std::int64_t>(4, per_token * batch * 8));
  ExpertRouting skewed;
  skewed.expert_load = {4, 2, 1, 1};  // 16, 8, 4, 4 of the 32 slots per sequence
  EXPECT_EQ(expert_flops(skewed), (std::vector<std::int64_t>{per_token * batch * 16, per_token * batch * 8,
                                                              per_token * batch * 4, per_token * batch * 4}));
  skewed.capacity_factor = 1.0;  // capacity ceil(2 * 16 * 1.0 / 4) = 8: expert 0 drops 8 tokens
  EXPECT_EQ(expert_flops(skewed), (std::vector<std::int64_t>{per_token * batch * 8, per_token * batch * 8,
                                                              per_token * batch * 4, per_token * batch * 4}));
}

TEST(MoeRouting, UniformSharesAndCapacity) {
  MoeArchitecture moe;
  moe.experts = 4;
  moe.top_k = 2;
  // Uniform: 10 slots over 4 experts, the remainder to the first ones.
  EXPECT_EQ(routed_tokens(moe, {}, 5), (std::vector<std::int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(routed_tokens(moe, {}, 4096), std::vector<std::int64_t>(4, 2048));
  ExpertRouting routing;
  routing.expert_load = {4, 2, 1, 1};
  EXPECT_EQ(routed_tokens(moe, routing, 16), (std::vector<std::int64_t>{16, 8, 4, 4}));
  // Largest remainders: 3 slots... 10 slots in shares 1:1:1 of 3 experts.
  MoeArchitecture three = moe;
  three.experts = 3;
  routing.expert_load = {1, 1, 1};
  EXPECT_EQ(routed_tokens(three, routing, 5), (std::vector<std::int64_t>{4, 3, 3}));
  // GShard / Switch capacity: ceil(k * s * factor / E) per sequence.
  routing.expert_load = {4, 2, 1, 1};
  routing.capacity_factor = 1.25;  // ceil(32 * 1.25 / 4) = 10
  EXPECT_EQ(routed_tokens(moe, routing, 16), (std::vector<std::int64_t>{10, 8, 4, 4}));
  routing.capacity_factor = 0.1;  // ceil(0.8) = 1
  EXPECT_EQ(routed_tokens(moe, routing, 16), (std::vector<std::int64_t>{1, 1, 1, 1}));
  // A capacity above every load drops nothing: the dropless default.
  routing.capacity_factor = 2.0;
  EXPECT_EQ(routed_tokens(moe, routing, 16), (std::vector<std::int64_t>{16, 8, 4, 4}));
  // load_imbalance 1.5: expert 0 takes 1.5 times the mean (12 of 32 slots), the others
  // (4 - 1.5) / 3 of it each (6.67: 7, 7, 6 by the largest remainders).
  ExpertRouting imbalance;
  imbalance.load_imbalance = 1.5;
  EXPECT_EQ(routed_tokens(moe, imbalance, 16), (std::vector<std::int64_t>{12, 7, 7, 6}));
  imbalance.load_imbalance = 1.0;  // uniform
  EXPECT_EQ(routed_tokens(moe, imbalance, 16), (std::vector<std::int64_t>{8, 8, 8, 8}));
}

TEST(MoeRouting, ImpossibleRoutingIsAnInputErrorNamingTheField) {
  MoeArchitecture moe;
  moe.experts = 4;
  moe.top_k = 2;
  ExpertRouting routing;
  routing.expert_load = {5, 1, 1, 1};  // 20 of 32 slots: more than the 16 tokens
  EXPECT_THAT([&] { routed_tokens(moe, routing, 16); },
              testing::ThrowsMessage<InputError>(testing::AllOf(testing::HasSubstr("moe.expert_load"), testing::HasSubstr("1 / top_k"))));
  routing.expert_load = {1, 1, 1};
  EXPECT_THAT([&] { routed_tokens(moe, routing, 16); }, testing::ThrowsMessage<InputError>(testing::HasSubstr("one per expert")));
  routing.expert_load = {1, 1, -1, 1};
  EXPECT_THAT([&] { routed_tokens(moe, routing, 16); }, testing::ThrowsMessage<InputError>(testing::HasSubstr("positive")));
  ExpertRouting imbalance;
  imbalance.load_imbalance = 4.0;  // all to expert 0: the others would get nothing
  EXPECT_THAT([&] { routed_tokens(moe, imbalance, 16); }, testing::ThrowsMessage<InputError>(testing::HasSubstr("moe.load_imbalance")));
  imbalance.load_imbalance = 2.5;  // 20 of 32 slots: more than the 16 tokens
  EXPECT_THAT([&] { routed_tokens(moe, imbalance, 16); }, testing::ThrowsMessage<InputError>(testing::HasSubstr("at most once per token")));
  imbalance.load_imbalance = 1.5;
  imbalance.expert_load = {1, 1, 1, 1};
  EXPECT_THAT([&] { routed_tokens(moe, imbalance, 16); }, testing::ThrowsMessage<InputError>(testing::HasSubstr("not both")));
  routing.expert_load = {};
  routing.capacity_factor = 0;
  EXPECT_THAT([&] { routed_tokens(moe, routing, 16); }, testing::ThrowsMessage<InputError>(testing::HasSubstr("moe.capacity_factor")));
  // Too short a sequence for every expert to get a token: 1 * 2 slots over 4 experts.
  moe.top_k = 1;
  EXPECT_THAT([&] { routed_tokens(moe, {}, 2); }, testing::ThrowsMessage<InputError>(testing::HasSubstr("expert 2 receives no token")));
  // Routing options on a dense model.
  ModelRequest request = test_support::Request("llama").layers(1).seq_len(16);
  request.routing = ExpertRouting{};
  EXPECT_THAT([&] { build_model(request); }, testing::ThrowsMessage<InputError>(testing::HasSubstr("moe: routing options")));
}

TEST(MoeConfig, FieldsAndErrors) {
  const auto error = [](const std::string& json) {
    try {
      spec_from_hf_config(json, "cfg.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string mixtral = R"("model_type": "mixtral", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 64)";
  EXPECT_EQ(error("{" + mixtral + "}"), "no error");
  const ModelSpec spec = spec_from_hf_config("{" + mixtral + "}", "cfg.json");
  ASSERT_TRUE(spec.decoder && spec.decoder->moe);
  EXPECT_EQ(spec.decoder->moe->experts, 8);  // MixtralConfig's defaults
  EXPECT_EQ(spec.decoder->moe->top_k, 2);
  EXPECT_EQ(spec.decoder->moe->intermediate, 128);
  EXPECT_TRUE(spec.decoder->moe->normalize_top_k);
  EXPECT_THAT(error("{" + mixtral + R"(, "output_router_logits": true})"),
              testing::AllOf(testing::HasSubstr("'output_router_logits' is true; expected false"), testing::HasSubstr("load-balancing loss")));
  EXPECT_THAT(error("{" + mixtral + R"(, "router_jitter_noise": 0.01})"),
              testing::AllOf(testing::HasSubstr("cfg.json: 'router_jitter_noise'"), testing::HasSubstr("expected 0")));
  EXPECT_THAT(error("{" + mixtral + R"(, "num_experts_per_tok": 9})"), testing::HasSubstr("'num_experts_per_tok' is 9; expected at most"));
  EXPECT_THAT(error("{" + mixtral + R"(, "num_local_experts": 0})"), testing::HasSubstr("'num_local_experts'"));

  const std::string qwen = R"("model_type": "qwen2_moe", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
      "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 64)";
  const ModelSpec q = spec_from_hf_config("{" + qwen + R"(, "decoder_sparse_step": 2, "mlp_only_layers": [3]})", "cfg.json");
  ASSERT_TRUE(q.decoder->moe);
  EXPECT_EQ(q.decoder->moe->experts, 60);  // Qwen2MoeConfig's defaults
  EXPECT_EQ(q.decoder->moe->top_k, 4);
  EXPECT_EQ(q.decoder->moe->shared_expert_intermediate, 5632);
  EXPECT_FALSE(q.decoder->moe->normalize_top_k);
  EXPECT_TRUE(q.decoder->qkv_bias);
  // Layers 1 and 3 are sparse by the step, 3 is dense by mlp_only_layers: one sparse layer.
  ModelRequest request;
  static_cast<ModelSpec&>(request) = q;
  request.seq_len = 64;
  std::int64_t routers = 0;
  const Trace trace = build_model(request);
  for (const auto& tensor : trace.tensors()) routers += tensor.name.ends_with(".mlp.gate.weight") ? 1 : 0;
  EXPECT_EQ(routers, 1);
  EXPECT_FALSE(spec_from_hf_config("{" + qwen + R"(, "num_experts": 0})", "cfg.json").decoder->moe);  // dense
  EXPECT_THAT(error("{" + qwen + R"(, "mlp_only_layers": [4]})"), testing::HasSubstr("'mlp_only_layers' names layer 4"));
  EXPECT_THAT(error("{" + qwen + R"(, "mlp_only_layers": "all"})"), testing::HasSubstr("expected a list of layer indices"));
  EXPECT_THAT(error("{" + qwen + R"(, "decoder_sparse_step": 0})"), testing::HasSubstr("'decoder_sparse_step'"));
  // Qwen3-MoE: Qwen3MoeConfig's defaults, Qwen3's attention (q_norm, k_norm, no q/k/v biases),
  // the attention's head_dim from the hidden size when the config gives none (Qwen3MoeConfig has
  // no default of 128, unlike Qwen3Config), and no shared expert.
  const std::string qwen3 = R"("model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 256)";
  const ModelSpec q3 = spec_from_hf_config("{" + qwen3 + "}", "cfg.json");
  ASSERT_TRUE(q3.decoder->moe);
  EXPECT_EQ(q3.decoder->moe->experts, 128);
  EXPECT_EQ(q3.decoder->moe->top_k, 8);
  EXPECT_EQ(q3.decoder->moe->intermediate, 768);
  EXPECT_FALSE(q3.decoder->moe->normalize_top_k);
  EXPECT_EQ(q3.decoder->moe->shared_expert_intermediate, 0);
  EXPECT_EQ(q3.decoder->qk_norm, DecoderArchitecture::QkNorm::per_head);
  EXPECT_FALSE(q3.decoder->qkv_bias);
  EXPECT_EQ(q3.decoder->head_size(), 16);
  EXPECT_EQ(spec_from_hf_config("{" + qwen3 + R"(, "head_dim": 32})", "cfg.json").decoder->head_size(), 32);
  EXPECT_THAT(error("{" + qwen3 + R"(, "shared_expert_intermediate_size": 256})"),
              testing::AllOf(testing::HasSubstr("'shared_expert_intermediate_size' is 256"), testing::HasSubstr("no shared expert")));
  EXPECT_FALSE(spec_from_hf_config("{" + qwen3 + R"(, "num_experts": 0})", "cfg.json").decoder->moe);  // dense
  {
    ModelRequest r3;
    static_cast<ModelSpec&>(r3) = spec_from_hf_config("{" + qwen3 + R"(, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32})", "cfg.json");
    r3.seq_len = 16;
    const Trace trace3 = build_model(r3);
    std::vector<std::string> names;
    for (const auto& op : trace3.ops()) names.push_back(op.name);
    for (const char* expected : {"model.layers.0.mlp.gate", "model.layers.1.mlp.experts.3.down_proj", "model.layers.0.mlp.index_add__3"}) {
      EXPECT_THAT(names, testing::Contains(std::string(expected)));
    }
    EXPECT_THAT(names, testing::Contains(testing::HasSubstr("q_norm")));
    EXPECT_THAT(names, testing::Not(testing::Contains(testing::HasSubstr("shared_expert"))));
  }
  // OLMoE: OlmoeConfig's defaults, q_norm and k_norm over the whole projections, experts
  // intermediate_size wide, every layer sparse; clip_qkv and a head_dim of its own are refused.
  const std::string olmoe = R"("model_type": "olmoe", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 32, "vocab_size": 100, "max_position_embeddings": 256)";
  const ModelSpec o = spec_from_hf_config("{" + olmoe + R"(, "clip_qkv": null})", "cfg.json");
  ASSERT_TRUE(o.decoder->moe);
  EXPECT_EQ(o.decoder->moe->experts, 64);
  EXPECT_EQ(o.decoder->moe->top_k, 8);
  EXPECT_EQ(o.decoder->moe->intermediate, 32);
  EXPECT_FALSE(o.decoder->moe->normalize_top_k);
  EXPECT_EQ(o.decoder->moe->shared_expert_intermediate, 0);
  EXPECT_EQ(o.decoder->qk_norm, DecoderArchitecture::QkNorm::projection);
  EXPECT_EQ(o.decoder->kv_heads, 4);
  EXPECT_THAT(error("{" + olmoe + R"(, "clip_qkv": 8.0})"), testing::AllOf(testing::HasSubstr("'clip_qkv' is 8.0; expected null"), testing::HasSubstr("clamp")));
  EXPECT_THAT(error("{" + olmoe + R"(, "head_dim": 32})"), testing::HasSubstr("'head_dim' is 32; expected hidden_size / num_attention_heads = 16"));
  EXPECT_THAT(error("{" + olmoe + R"(, "num_experts": 0})"), testing::HasSubstr("'num_experts'"));
  {
    ModelRequest ro;
    static_cast<ModelSpec&>(ro) = spec_from_hf_config("{" + olmoe + R"(, "num_key_value_heads": 2, "num_experts": 4, "num_experts_per_tok": 2})", "cfg.json");
    ro.seq_len = 16;
    const Trace traced = build_model(ro);
    std::int64_t q_norm = 0, k_norm = 0;
    for (const auto& tensor : traced.tensors()) {
      if (tensor.name == "model.layers.0.self_attn.q_norm.weight") q_norm = tensor.elements();
      if (tensor.name == "model.layers.0.self_attn.k_norm.weight") k_norm = tensor.elements();
    }
    EXPECT_EQ(q_norm, 64);  // the whole query projection, heads x head_dim
    EXPECT_EQ(k_norm, 32);  // the key's, kv_heads x head_dim
    std::vector<std::string> names;
    for (const auto& op : traced.ops()) names.push_back(op.name);
    EXPECT_THAT(names, testing::Contains(std::string("model.layers.1.mlp.experts.3.down_proj")));
    // Tensor parallelism without Megatron-LM's MoE layer is refused for every MoE family, and the
    // message does not offer OLMoE with it; with the layer, it would cut the norms' rows: refused.
    ro.tensor_parallel = TensorParallelSpec{2, true};
    EXPECT_THAT([&] { build_model(ro); },
                testing::ThrowsMessage<std::invalid_argument>(testing::HasSubstr("(Megatron-LM's MoE layer), mixtral, qwen2_moe and qwen3_moe, not 'olmoe'")));
    ro.expert_parallel = ExpertParallelSpec{2, 0};
    EXPECT_THAT([&] { build_model(ro); },
                testing::ThrowsMessage<std::invalid_argument>(testing::HasSubstr("span the whole projection, which tensor parallelism splits")));
  }
  // Expert fields in a dense family's config are still refused.
  EXPECT_THAT(error(R"({"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 64, "num_experts": 8})"),
              testing::HasSubstr("'num_experts'"));
}

// What the trace says about its experts, and that it is written as format version 8 (its
// gathers and scatters are version 4's, the expert loop's host-synchronising where version 8's)
// and reads back the same.
TEST(MoeTrace, MetadataAndRoundTrip) {
  ModelRequest request = from_config("mixtral-8x7b-v0.1.json", 64);
  request.layers = 1;
  request.routing = ExpertRouting{};
  request.routing->capacity_factor = 1.25;
  const Trace trace = build_model(request);
  EXPECT_EQ(trace.metadata().at("moe_tokens_per_expert"), "16,16,16,16,16,16,16,16");
  EXPECT_EQ(trace.metadata().at("moe_capacity_factor"), "1.25");
  EXPECT_EQ(trace.metadata().at("family"), "mixtral");
  const std::string json = traces::trace_to_json(trace);
  EXPECT_NE(json.find("\"version\": 8,"), std::string::npos);
  EXPECT_EQ(traces::summarize(trace).host_sync_ops, 8u);  // one where per expert of the one layer
  EXPECT_EQ(traces::trace_from_json(json, "t.json"), trace);
  std::vector<std::string> names;
  for (const auto& op : trace.ops()) names.push_back(op.name);
  for (const char* expected :
       {"model.layers.0.block_sparse_moe.gate", "model.layers.0.block_sparse_moe.topk", "model.layers.0.block_sparse_moe.div_",
        "model.layers.0.block_sparse_moe.index", "model.layers.0.block_sparse_moe.experts.7.w2",
        "model.layers.0.block_sparse_moe.index_add__7"}) {
    EXPECT_THAT(names, testing::Contains(std::string(expected)));
  }
}

}  // namespace
}  // namespace comptrain::zoo

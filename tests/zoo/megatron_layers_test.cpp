// Megatron-LM's Transformer Engine layers (traces/zoo/README.md, "Megatron-LM's Transformer
// Engine layers"): the saved bytes per layer of a Llama-shaped decoder built as megatron-core's
// GPT layers, against Hugging Face's of the same shape, by hand; the fused kernels in place of
// the eager ones; the dropout masks; the refusals.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>

#include "comptrain/support/input_error.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "zoo_test_support.hpp"

namespace comptrain::zoo {
namespace {

using traces::Trace;

constexpr std::int64_t kS = 40, kH = 64, kA = 4, kI = 176;

ModelRequest request_for(std::int64_t layers, std::int64_t kv, std::optional<MegatronOptions> megatron) {
  DecoderArchitecture arch;
  arch.layers = layers;
  arch.hidden = kH;
  arch.heads = kA;
  arch.kv_heads = kv;
  arch.intermediate = kI;
  arch.vocab = 1000;
  arch.max_positions = 4096;
  ModelRequest request = test_support::Request("llama").batch_size(2).precision(Precision::bf16).seq_len(kS).attention(Attention::flash);
  request.decoder = arch;
  request.megatron = megatron;
  return request;
}

MegatronOptions no_dropout() {
  MegatronOptions options;
  options.hidden_dropout = 0;
  options.attention_dropout = 0;
  return options;
}

// Saved bytes of one layer (per sample): a 2-layer model minus a 1-layer one.
std::pair<std::int64_t, std::int64_t> per_layer(std::int64_t kv, std::optional<MegatronOptions> megatron) {
  const auto one = test_support::saved_for_backward(build_model(request_for(1, kv, megatron)));
  const auto two = test_support::saved_for_backward(build_model(request_for(2, kv, megatron)));
  return {two.per_sample - one.per_sample, two.fixed - one.fixed};
}

// bf16, flash attention, per layer and sample (tests/zoo/torchtitan_test.cpp has Hugging Face's
// by hand: 20·sh + 4·sh·kv/a + 8·sI + 8·s + 4·as).
// Megatron: each TE RMSNorm keeps its bf16 input (2·sh, the residual stream) and rsigma (4·s),
// its output saved by the GEMMs after it (2·sh): 2·(4·sh + 4·s); the flash kernel's q (2·sh),
// k and v (2·2·sh·kv/a), output (2·sh) and log-sum-exp (4·as), as Hugging Face's (the fused
// rotary keeps only its angles, one tensor for all layers); the fused SwiGLU keeps the gate and
// up halves (4·sI) and down_proj its output (2·sI):
//   12·sh + 4·sh·kv/a + 6·sI + 8·s + 4·as.
// With the hidden dropout on, the two bias-dropout-adds' bool masks add 2·sh.
TEST(MegatronLayersSaved, PerLayerAgainstHuggingFaceByHand) {
  constexpr std::int64_t s = kS, h = kH, a = kA, i = kI;
  for (const std::int64_t kv : {4, 2, 1}) {
    EXPECT_EQ(per_layer(kv, std::nullopt), std::pair(20 * s * h + 4 * s * h * kv / a + 8 * s * i + 8 * s + 4 * a * s, std::int64_t{0}))
        << "kv heads " << kv;
    EXPECT_EQ(per_layer(kv, no_dropout()), std::pair(12 * s * h + 4 * s * h * kv / a + 6 * s * i + 8 * s + 4 * a * s, std::int64_t{0}))
        << "kv heads " << kv;
    MegatronOptions dropout = no_dropout();
    dropout.hidden_dropout = 0.1;
    EXPECT_EQ(per_layer(kv, dropout), std::pair(14 * s * h + 4 * s * h * kv / a + 6 * s * i + 8 * s + 4 * a * s, std::int64_t{0}))
        << "kv heads " << kv;
  }
}

std::int64_t ops_named(const Trace& trace, const std::string& part) {
  return std::count_if(trace.ops().begin(), trace.ops().end(), [&](const auto& op) {
    return op.phase == traces::Phase::forward && op.name.find(part) != std::string::npos;
  });
}

// One forward op per fused piece and layer where Hugging Face's modules run several: the norms'
// (rsigma, no fp32 copy), the rotary's (no intermediates), SwiGLU's (no separate SiLU and product);
// each option turns its piece back into Hugging Face's kernels.
TEST(MegatronLayersKernels, FusedPiecesReplaceTheEagerOnes) {
  const Trace hf = build_model(request_for(2, 2, std::nullopt));
  const Trace mg = build_model(request_for(2, 2, MegatronOptions{}));
  EXPECT_EQ(mg.metadata().at("implementation"), "megatron");
  EXPECT_EQ(mg.metadata().at("megatron_hidden_dropout"), "0.1");
  EXPECT_EQ(ops_named(mg, "mlp.swiglu"), 2);
  EXPECT_EQ(ops_named(mg, "mlp.act_fn"), 0);
  EXPECT_EQ(ops_named(hf, "mlp.act_fn"), 2);
  EXPECT_EQ(ops_named(mg, "rotary_pos_emb"), 1);
  EXPECT_EQ(ops_named(mg, "rotary_emb.cos"), 0);
  EXPECT_LT(mg.ops().size(), hf.ops().size());
  // Every residual sum is a bias-dropout-add with a mask.
  std::int64_t masks = 0;
  for (const auto& tensor : mg.tensors()) masks += tensor.name.find(".add") != std::string::npos && tensor.name.ends_with(".mask");
  EXPECT_EQ(masks, 4);
  MegatronOptions unfused;
  unfused.rope_fusion = false;
  unfused.bias_activation_fusion = false;
  const Trace eager = build_model(request_for(2, 2, unfused));
  EXPECT_EQ(ops_named(eager, "mlp.swiglu"), 0);
  EXPECT_EQ(ops_named(eager, "mlp.act_fn"), 2);
  EXPECT_EQ(ops_named(eager, "rotary_emb.cos"), 1);
}

// Megatron-LM's loss at a tensor-parallel size of 1 is its vocabulary-parallel cross-entropy
// still (language_module.py, compute_language_model_loss): an fp32 copy of the logits made
// softmax in place and saved, no `logits.float()` and log-probabilities beside it as Hugging
// Face's loss keeps; over a group of one its all-reduces are left out.
TEST(MegatronLayersLoss, VocabParallelCrossEntropyAtTensorParallelSizeOne) {
  const Trace hf = build_model(request_for(1, 2, std::nullopt));
  const Trace mg = build_model(request_for(1, 2, no_dropout()));
  EXPECT_EQ(ops_named(hf, "logits.float"), 1);
  EXPECT_EQ(ops_named(mg, "logits.float"), 0);
  EXPECT_EQ(ops_named(mg, "loss.logits_max"), 1);
  EXPECT_EQ(ops_named(mg, "all_reduce"), 0);
  const auto softmax = std::find_if(mg.tensors().begin(), mg.tensors().end(), [](const auto& t) { return t.name == "loss.softmax"; });
  ASSERT_NE(softmax, mg.tensors().end());
  EXPECT_EQ(softmax->dtype, traces::DType::f32);
  EXPECT_EQ(softmax->elements(), 2 * kS * 1000);  // batch 2
  // Saved for backward beyond the layers: the softmax (4 bytes a logit) where Hugging Face's loss
  // saves the fp32 log-probabilities (4) too, and 16-bit logits neither keeps.
  const auto mg_saved = test_support::saved_for_backward(mg);
  const auto hf_saved = test_support::saved_for_backward(hf);
  EXPECT_GT(hf_saved.per_sample, 0);
  EXPECT_GT(mg_saved.per_sample, 4 * kS * 1000);
}

std::string error_of(const ModelRequest& request) {
  try {
    build_model(request);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(MegatronLayersErrors, RefusesWhatMegatronDoesNotBuild) {
  ModelRequest torchtitan = request_for(1, 4, MegatronOptions{});
  torchtitan.torchtitan = TorchtitanOptions{};
  EXPECT_NE(error_of(torchtitan), "");
  // TE's RMSNorm stands for the norms: a LayerNorm model is refused.
  ModelRequest layer_norm = request_for(1, 4, MegatronOptions{});
  layer_norm.decoder->norm = DecoderArchitecture::Norm::layer;
  EXPECT_NE(error_of(layer_norm).find("implementation: megatron builds Megatron-LM's GPT layers for Llama-shaped decoders"), std::string::npos)
      << error_of(layer_norm);
  // A mixture of experts needs Megatron's MoE layer, which comes with expert parallelism.
  ModelRequest moe = request_for(1, 4, MegatronOptions{});
  moe.decoder->family = "mixtral";
  MoeArchitecture experts;
  experts.experts = 4;
  experts.top_k = 2;
  experts.intermediate = 64;
  moe.decoder->moe = experts;
  EXPECT_NE(error_of(moe).find("needs expert parallelism"), std::string::npos) << error_of(moe);
  MegatronOptions bad;
  bad.hidden_dropout = 1.0;
  EXPECT_NE(error_of(request_for(1, 4, bad)).find("megatron.hidden_dropout"), std::string::npos);
}

}  // namespace
}  // namespace comptrain::zoo

// torchtitan's Llama (issue 31; traces/zoo/README.md, "torchtitan's Llama"): the saved bytes per
// layer of the decoder as torchtitan/models/llama/model.py builds it at
// pytorch/torchtitan@1ea476e9, against Hugging Face's LlamaForCausalLM of the same shape, by hand;
// its FLOPs and parameters against Hugging Face's; its refusals.

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <utility>

#include "comptrain/support/input_error.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "zoo_test_support.hpp"

namespace comptrain::zoo {
namespace {

using traces::Trace;

struct Shape {
  std::int64_t s = 40;
  std::int64_t h = 64;
  std::int64_t a = 4;
  std::int64_t kv = 4;
  std::int64_t i = 176;
};

ModelRequest request_for(const Shape& shape, std::int64_t layers, std::optional<TorchtitanOptions::Norm> torchtitan,
                         std::int64_t batch = 2) {
  DecoderArchitecture arch;
  arch.layers = layers;
  arch.hidden = shape.h;
  arch.heads = shape.a;
  arch.kv_heads = shape.kv;
  arch.intermediate = shape.i;
  arch.vocab = 1000;
  arch.max_positions = 4096;
  ModelRequest request =
      test_support::Request("llama").batch_size(batch).precision(Precision::bf16).seq_len(shape.s).attention(Attention::flash);
  request.decoder = arch;
  if (torchtitan) request.torchtitan = TorchtitanOptions{*torchtitan};
  return request;
}

// Saved bytes of one layer (per sample, batch-independent): a 2-layer model minus a 1-layer one.
std::pair<std::int64_t, std::int64_t> per_layer(const Shape& shape, std::optional<TorchtitanOptions::Norm> torchtitan) {
  const auto one = test_support::saved_for_backward(build_model(request_for(shape, 1, torchtitan)));
  const auto two = test_support::saved_for_backward(build_model(request_for(shape, 2, torchtitan)));
  return {two.per_sample - one.per_sample, two.fixed - one.fixed};
}

// model.bfloat16() (2-byte tensors), flash attention, per layer and sample:
// Hugging Face: each LlamaRMSNorm keeps an fp32 copy of its input (4·sh), the bf16 normalised
//   rows (2·sh) and an fp32 rsqrt per row (4·s); its output is saved by the projections after it
//   (2·sh): two norms 2·(8·sh + 4·s); the flash kernel's q (2·sh), k and v at kv heads
//   (2·2·sh·kv/a), output (2·sh, o_proj's input too) and fp32 log-sum-exp (4·as); the MLP's
//   gate output, SiLU output, up output and product (8·sI):
//   20·sh + 4·sh·kv/a + 8·sI + 8·s + 4·as.
// torchtitan, norm_type fused_rmsnorm: each norm keeps its bf16 input (2·sh: the residual
//   stream, which nothing else keeps) and the rstd (4·s), its output saved by the projections
//   (2·sh): 2·(4·sh + 4·s); q (2·sh); repeat_kv copies k and v to all a heads before the kernel,
//   which keeps the copies (2·2·sh, whatever kv is); output 2·sh, log-sum-exp 4·as; MLP 8·sI:
//   16·sh + 8·sI + 8·s + 4·as.
// torchtitan, norm_type rmsnorm: Hugging Face's norms (2·(8·sh + 4·s)) with torchtitan's attention:
//   24·sh + 8·sI + 8·s + 4·as.
// No layer adds batch-independent bytes: freqs_cis (torchtitan) and cos / sin (Hugging Face) are
// one tensor for all layers.
TEST(TorchtitanSaved, PerLayerAgainstHuggingFaceByHand) {
  for (const std::int64_t kv : {4, 2, 1}) {
    Shape shape;
    shape.kv = kv;
    const auto [s, h, a, i] = std::tuple{shape.s, shape.h, shape.a, shape.i};
    EXPECT_EQ(per_layer(shape, std::nullopt), std::pair(20 * s * h + 4 * s * h * kv / a + 8 * s * i + 8 * s + 4 * a * s, std::int64_t{0}))
        << "kv heads " << kv;
    EXPECT_EQ(per_layer(shape, TorchtitanOptions::Norm::fused_rmsnorm), std::pair(16 * s * h + 8 * s * i + 8 * s + 4 * a * s, std::int64_t{0}))
        << "kv heads " << kv;
    EXPECT_EQ(per_layer(shape, TorchtitanOptions::Norm::rmsnorm), std::pair(24 * s * h + 8 * s * i + 8 * s + 4 * a * s, std::int64_t{0}))
        << "kv heads " << kv;
  }
}

// The whole model's batch-independent saved bytes: torchtitan's freqs_cis buffer, complex64
// [2·s, D/2] = 8·s·D bytes (s = 40, D = 16: 5,120), where Hugging Face's rotary products keep
// cos and sin, [1, s, D] bf16 each (2·2·40·16 = 2,560); both also keep nll_loss's total_weight,
// a scalar of the logits' dtype (fp32 after .float(): 4).
TEST(TorchtitanSaved, FreqsCisReplacesCosAndSin) {
  const Shape shape;
  EXPECT_EQ(test_support::saved_for_backward(build_model(request_for(shape, 1, std::nullopt))).fixed, 2 * 2 * 40 * 16 + 4);
  EXPECT_EQ(test_support::saved_for_backward(build_model(request_for(shape, 1, TorchtitanOptions::Norm::rmsnorm))).fixed, 8 * 40 * 16 + 4);
}

std::int64_t forward_flops(const Trace& trace) {
  std::int64_t total = 0;
  for (const auto& op : trace.ops()) {
    if (op.phase == traces::Phase::forward) total += trace.flops(op.id);
  }
  return total;
}

std::int64_t parameters(const Trace& trace) {
  std::int64_t count = 0;
  for (const auto& tensor : trace.tensors()) count += tensor.role == traces::TensorRole::weight ? tensor.elements() : 0;
  return count;
}

// The same parameters and the same arithmetic but the rotation: Hugging Face's x·cos +
// rotate_half(x)·sin counts 4 FLOPs per rotated element, torchtitan's complex product 3 (4
// multiplies and 2 adds per complex pair). Per layer and sample the difference is one FLOP per
// element of q (s·h) and of k (s·h·kv/a); 3 layers, batch 1, s 40, h 64, kv 2 of 4 heads:
// 3·(2,560 + 1,280) = 11,520. Hugging Face also computes cos and sin in every forward pass (one
// FLOP per element of each [1, s, D] table: 2·40·16 = 1,280), which torchtitan precomputes at
// init (model.py:388-389): 12,800 in all. The fused norm's FLOPs are LlamaRMSNorm's.
TEST(TorchtitanFlops, OnlyTheRotationDiffers) {
  Shape shape;
  shape.kv = 2;
  const Trace hf = build_model(request_for(shape, 3, std::nullopt, 1));
  for (const auto norm : {TorchtitanOptions::Norm::rmsnorm, TorchtitanOptions::Norm::fused_rmsnorm}) {
    const Trace tt = build_model(request_for(shape, 3, norm, 1));
    EXPECT_EQ(forward_flops(hf) - forward_flops(tt), 12'800);
    EXPECT_EQ(parameters(tt), parameters(hf));
    EXPECT_EQ(tt.metadata().at("implementation"), "torchtitan");
  }
  EXPECT_EQ(build_model(request_for(shape, 1, TorchtitanOptions::Norm::fused_rmsnorm)).metadata().at("norm_type"), "fused_rmsnorm");
}

std::string error_of(ModelRequest request) {
  try {
    build_model(request);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(TorchtitanErrors, RefusesWhatItsModelCodeDoesNotBuild) {
  const Shape shape;
  ModelRequest eager = request_for(shape, 1, TorchtitanOptions::Norm::rmsnorm);
  eager.attention = Attention::eager;
  EXPECT_EQ(error_of(eager).rfind("implementation: ", 0), 0U) << error_of(eager);
  ModelRequest biased = request_for(shape, 1, TorchtitanOptions::Norm::rmsnorm);
  biased.decoder->qkv_bias = true;
  EXPECT_NE(error_of(biased).find("no biases"), std::string::npos) << error_of(biased);
  ModelRequest packed = request_for(shape, 1, TorchtitanOptions::Norm::rmsnorm);
  packed.packed_documents = 2;
  EXPECT_NE(error_of(packed).find("document masking"), std::string::npos) << error_of(packed);
  ModelRequest gpt2 = test_support::Request("gpt2").seq_len(16);
  gpt2.torchtitan = TorchtitanOptions{};
  EXPECT_EQ(error_of(gpt2).rfind("implementation: ", 0), 0U) << error_of(gpt2);
}

// Context parallelism (torchtitan@9dec370a train.py:268-279: PyTorch's context_parallel shards
// input_ids, labels and freqs_cis along the sequence; SDPA becomes its ring attention). A rank's
// forward and backward FLOPs are the whole sequence's / C, exactly (the load-balanced chunks give
// each rank 1/C of the causal pairs); the all-gather carries repeat_kv's copies, every query head:
// 2·s·b·a·D bytes of bf16 per layer (s 40, b 2, a 4, D 16: 20,480), whatever the KV heads; and
// freqs_cis keeps its whole-sequence storage (context_parallel resizes it in place and keeps a
// clone to restore it: 8·s·D bytes as without context parallelism).
TEST(TorchtitanContextParallel, TokensFlopsAndTheGatheredHeads) {
  Shape shape;
  shape.kv = 2;
  const Trace whole = build_model(request_for(shape, 2, TorchtitanOptions::Norm::rmsnorm));
  std::int64_t whole_flops = 0;
  for (const auto& op : whole.ops()) whole_flops += op.phase == traces::Phase::optimizer ? 0 : whole.flops(op.id);
  for (const std::int64_t c : {2, 4}) {
    SCOPED_TRACE("c " + std::to_string(c));
    ModelRequest request = request_for(shape, 2, TorchtitanOptions::Norm::rmsnorm);
    request.context_parallel = ContextParallelSpec{c, ContextParallelSpec::Variant::all_gather};
    const Trace rank = build_model(request);
    std::int64_t flops = 0;
    int gathers = 0;
    for (const auto& op : rank.ops()) {
      if (op.phase != traces::Phase::optimizer) flops += rank.flops(op.id);
      if (!op.communication || op.communication->group != traces::ParallelGroup::context ||
          op.communication->kind != traces::CommunicationKind::all_gather || op.phase != traces::Phase::forward) {
        continue;
      }
      ++gathers;
      EXPECT_EQ(rank.bytes_written(op.id), 2 * 40 * 2 * 4 * 16 * 2);
      EXPECT_EQ(rank.bytes_read(op.id), 2 * 40 * 2 * 4 * 16 * 2 / c);
    }
    EXPECT_EQ(flops * c, whole_flops);
    EXPECT_EQ(gathers, 2);  // one per layer
    EXPECT_EQ(rank.metadata().at("context_parallel"), std::to_string(c));
    int named = 0;
    for (const auto& tensor : rank.tensors()) {
      if (tensor.name == "model.freqs_cis") {
        EXPECT_EQ(tensor.bytes(), 8 * 40 * 16);
        ++named;
      }
      if (tensor.name == "input_ids") {
        EXPECT_EQ(tensor.elements(), 2 * 40 / c);  // batch 2
        ++named;
      }
    }
    EXPECT_EQ(named, 2);  // both tensors were found and checked
  }
}

}  // namespace
}  // namespace comptrain::zoo

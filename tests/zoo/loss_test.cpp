// The loss kinds of the language models (traces/zoo/src/loss.cpp): what each saves for the
// backward pass and allocates, worked out by hand for a small GPT under amp-bf16 at batch 2,
// sequence 16, hidden 64, vocabulary 1000 (B·S = 32 tokens, 32000 logits).

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "comptrain/support/input_error.hpp"
#include "comptrain/traces/liveness.hpp"
#include "comptrain/traces/summary.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "zoo_test_support.hpp"

namespace comptrain::zoo {
namespace {

using test_support::Request;
using traces::DType;
using traces::Phase;
using traces::TensorRole;
using traces::Trace;

Trace build(LossKind kind, std::int64_t chunks = 8) {
  // Plain SGD: no optimizer temporaries, so the loss decides the peak of what is not resident.
  ModelRequest request = Request("gpt").layers(1).hidden(64).heads(4).seq_len(16).vocab(1000).batch_size(2).precision(Precision::amp_bf16).optimizer(Optimizer::sgd);
  request.loss.kind = kind;
  request.loss.chunks = chunks;
  return build_model(request);
}

const traces::Tensor& named(const Trace& trace, const std::string& name) {
  for (const auto& tensor : trace.tensors()) {
    if (tensor.name == name) return tensor;
  }
  throw std::runtime_error("no tensor " + name);
}

const traces::Op& op_named(const Trace& trace, const std::string& name) {
  for (const auto& op : trace.ops()) {
    if (op.name == name) return op;
  }
  throw std::runtime_error("no op " + name);
}

// The peak of what the iteration allocates and frees (activations, temporaries, autocast's copies).
std::int64_t peak(const Trace& trace) {
  std::vector<traces::OpIndex> order(trace.ops().size());
  std::iota(order.begin(), order.end(), traces::OpIndex{0});
  std::int64_t best = 0;
  for (const auto& live : traces::compute_liveness(trace, order).live_by_step) {
    best = std::max(best, traces::at(live, TensorRole::activation) + traces::at(live, TensorRole::temporary) + traces::at(live, TensorRole::weight_copy));
  }
  return best;
}

// Autocast's cross_entropy: the bf16 logits upcast, log_softmax's fp32 result saved: 4 x 32000.
TEST(LossKinds, CrossEntropySavesFp32LogProbabilities) {
  const Trace trace = build(LossKind::cross_entropy);
  const auto& log_probs = named(trace, "loss.log_softmax.out");
  EXPECT_EQ(log_probs.dtype, DType::f32);
  EXPECT_EQ(log_probs.bytes(), 4 * 32 * 1000);
  EXPECT_EQ(log_probs.role, TensorRole::activation);
  EXPECT_FALSE(trace.metadata().contains("loss"));
}

// FlashAttention's kernel: the bf16 logits saved (2 x 32000) with the fp32 log-sum-exp of each
// row (4 x 32), no log-probabilities, and the gradient written over the logits.
TEST(LossKinds, FusedCrossEntropySavesTheLogits) {
  const Trace trace = build(LossKind::fused_cross_entropy);
  EXPECT_EQ(trace.metadata().at("loss"), "fused_cross_entropy");
  const auto& logits = named(trace, "lm_head.out");
  EXPECT_EQ(logits.dtype, DType::bf16);
  EXPECT_EQ(logits.bytes(), 2 * 32 * 1000);
  EXPECT_EQ(logits.role, TensorRole::activation);
  EXPECT_EQ(named(trace, "loss.cross_entropy.lse").bytes(), 4 * 32);
  for (const auto& tensor : trace.tensors()) {
    EXPECT_EQ(tensor.name.find("log_softmax"), std::string::npos) << tensor.name;
  }
  // The backward op writes no new bytes: its gradient is a view of the logits.
  const auto& backward = op_named(trace, "loss.cross_entropy.backward");
  ASSERT_EQ(backward.outputs.size(), 1u);
  EXPECT_EQ(trace.storage_of(backward.outputs[0]), logits.id);
  const auto& forward = op_named(trace, "loss.cross_entropy");
  EXPECT_EQ(forward.flops.per_sample * 2 + forward.flops.fixed, 5 * 32000 + 32);  // log-sum-exp per logit, the mean per row
  EXPECT_EQ(backward.flops.per_sample * 2 + backward.flops.fixed, 4 * 32000);
}

// torch.compile'd cross_entropy(logits.float(), labels) (LossSpec::compiled): the fused kernel's
// saved set (the bf16 logits, 2 x 32000, and the fp32 log-sum-exp, 4 x 32), no fp32 copy or
// log-probabilities, and a new bf16 gradient of the logits' size (2 x 32000): one logits' worth
// more at the loss's backward than the in-place kernel, less than autograd's fp32 pair.
TEST(LossKinds, CompiledCrossEntropySavesTheLogitsAndWritesANewGradient) {
  ModelRequest request = Request("gpt").layers(1).hidden(64).heads(4).seq_len(16).vocab(1000).batch_size(2).precision(Precision::amp_bf16).optimizer(Optimizer::sgd);
  request.loss.compiled = true;
  const Trace trace = build_model(request);
  EXPECT_EQ(trace.metadata().at("loss_compiled"), "true");
  const auto& logits = named(trace, "lm_head.out");
  EXPECT_EQ(logits.dtype, DType::bf16);
  EXPECT_EQ(logits.role, TensorRole::activation);
  EXPECT_EQ(named(trace, "loss.cross_entropy.lse").bytes(), 4 * 32);
  for (const auto& tensor : trace.tensors()) {
    EXPECT_EQ(tensor.name.find("log_softmax"), std::string::npos) << tensor.name;
    EXPECT_EQ(tensor.name.find("float"), std::string::npos) << tensor.name;
  }
  const auto& backward = op_named(trace, "loss.cross_entropy.backward");
  ASSERT_EQ(backward.outputs.size(), 1u);
  EXPECT_NE(trace.storage_of(backward.outputs[0]), logits.id);
  EXPECT_EQ(trace.tensor(backward.outputs[0]).bytes(), 2 * 32 * 1000);
  EXPECT_EQ(trace.tensor(backward.outputs[0]).dtype, DType::bf16);
  // One bf16 Llama-2-7B layer at sequence 16: its logits [16, 32000] (1 MB) decide the peak of
  // what is allocated and freed: above the in-place kernel's by at most one logits' worth (the
  // new gradient beside the saved logits).
  const auto peak_at = [](LossKind kind, bool compiled) {
    ModelRequest large = Request("llama").layers(1).seq_len(16).precision(Precision::bf16).optimizer(Optimizer::sgd);
    large.loss.kind = kind;
    large.loss.compiled = compiled;
    return peak(build_model(large));
  };
  const std::int64_t in_place = peak_at(LossKind::fused_cross_entropy, false);
  EXPECT_GT(peak_at(LossKind::cross_entropy, true), in_place);
  EXPECT_LE(peak_at(LossKind::cross_entropy, true), in_place + 2 * 16 * 32000);
  EXPECT_LT(peak_at(LossKind::cross_entropy, true), peak_at(LossKind::cross_entropy, false));
  // Refused: with upcast (the kernels upcast in registers), another kind, or a model whose
  // cross-entropy is not the language model's.
  ModelRequest upcast = request;
  upcast.loss.upcast = true;
  EXPECT_THROW(build_model(upcast), InputError);
  ModelRequest chunked = request;
  chunked.loss.kind = LossKind::chunked;
  EXPECT_THROW(build_model(chunked), InputError);
  ModelRequest bert = Request("bert-base").seq_len(16).batch_size(1);
  bert.loss.compiled = true;
  EXPECT_THROW(build_model(bert), InputError);
}

// Liger's fused linear cross-entropy: BT = 32, inc_factor = cdiv(1000, 64) = 16, chunk_size =
// next_power_of_2(cdiv(32, 16)) = 2, so one [2, 1000] bf16 logits buffer (4000 B). Saved:
// grad_input [32, 64] fp32 (the input's dtype, 8192 B) and grad_weight [1000, 64] fp32 (the
// weight's, 256000 B), which is wte's .grad: no other gradient storage for it.
TEST(LossKinds, FusedLinearCrossEntropyComputesGradientsInForward) {
  const Trace trace = build(LossKind::fused_linear_cross_entropy);
  const std::string op = "loss.fused_linear_cross_entropy";
  EXPECT_EQ(named(trace, op + ".logits_chunk").bytes(), 2 * 2 * 1000);
  EXPECT_EQ(named(trace, op + ".grad_input").bytes(), 4 * 32 * 64);
  EXPECT_EQ(named(trace, op + ".grad_input").role, TensorRole::activation);
  const auto& grad_weight = named(trace, op + ".grad_weight");
  EXPECT_EQ(grad_weight.bytes(), 4 * 1000 * 64);
  EXPECT_EQ(grad_weight.role, TensorRole::gradient);
  // Every gradient storage: 4 bytes per parameter (amp keeps fp32 gradients), wte's included once.
  const auto summary = traces::summarize(trace);
  EXPECT_EQ(traces::at(summary.allocated_by_role, TensorRole::gradient), 4 * summary.parameters);
  // The forward op: three GEMMs of 2·32·64·1000 and 9 FLOPs per logit; the backward nothing.
  const auto& forward = op_named(trace, op);
  EXPECT_EQ(forward.kind, traces::OpKind::linear);
  EXPECT_EQ(forward.flops.per_sample * 2 + forward.flops.fixed, 6 * 64 * 32000 + 9 * 32000);
  const auto& backward = op_named(trace, op + ".backward");
  EXPECT_EQ(backward.flops.per_sample + backward.flops.fixed, 0);
  for (const auto& tensor : trace.tensors()) {
    EXPECT_EQ(tensor.name.find("log_softmax"), std::string::npos) << tensor.name;
  }
  EXPECT_LT(peak(trace), peak(build(LossKind::cross_entropy)));
}

// torchtune's chunked output, 4 chunks of 4 tokens: 4 x [8, 1000] fp32 log-probabilities saved
// (4 x 32000 B, the whole loss's 128000), the bf16 chunks [2, 4, 1000] (16000 B each) held to the
// loss's end, the fp32 copy one chunk at a time.
TEST(LossKinds, ChunkedUpcastsOneChunkAtATime) {
  const Trace trace = build(LossKind::chunked, 4);
  EXPECT_EQ(trace.metadata().at("loss_chunks"), "4");
  std::int64_t saved = 0;
  int chunks = 0;
  for (const auto& tensor : trace.tensors()) {
    if (tensor.name.ends_with(".log_softmax.out")) {
      EXPECT_EQ(tensor.bytes(), 4 * 8 * 1000) << tensor.name;
      saved += tensor.bytes();
      ++chunks;
    }
  }
  EXPECT_EQ(chunks, 4);
  EXPECT_EQ(saved, 4 * 32 * 1000);
  const auto& division = op_named(trace, "loss.div");
  for (const std::string name : {"lm_head.out", "lm_head_1.out", "lm_head_2.out", "lm_head_3.out"}) {
    const auto& chunk = named(trace, name);
    EXPECT_EQ(chunk.bytes(), 2 * 8 * 1000) << name;
    EXPECT_EQ(chunk.consumers.back(), division.id) << name;
  }
  EXPECT_LT(peak(trace), peak(build(LossKind::cross_entropy)));
  // tensor_split of 16 tokens into 3: 6, 5, 5.
  const Trace uneven = build(LossKind::chunked, 3);
  EXPECT_EQ(named(uneven, "lm_head.out").bytes(), 2 * 2 * 6 * 1000);
  EXPECT_EQ(named(uneven, "lm_head_2.out").bytes(), 2 * 2 * 5 * 1000);
}

// The decoders' own head (`lm_head`, untied) under every kind: Llama-2-7B's shape cut to one
// layer, sequence 16, bf16. With Liger the head's gradient is grad_weight: 2 x 32000 x 4096 B.
TEST(LossKinds, DecoderHead) {
  for (const LossKind kind : {LossKind::cross_entropy, LossKind::fused_linear_cross_entropy, LossKind::chunked, LossKind::fused_cross_entropy}) {
    SCOPED_TRACE(std::string(to_string(kind)));
    ModelRequest request = Request("llama").layers(1).seq_len(16).precision(Precision::bf16);
    request.loss.kind = kind;
    request.loss.chunks = 4;
    const Trace trace = build_model(request);
    const auto summary = traces::summarize(trace);
    EXPECT_EQ(traces::at(summary.allocated_by_role, TensorRole::gradient), 2 * summary.parameters);
    if (kind == LossKind::fused_linear_cross_entropy) {
      const auto& grad_weight = named(trace, "loss.fused_linear_cross_entropy.grad_weight");
      EXPECT_EQ(grad_weight.bytes(), 2 * 32000 * 4096);
      EXPECT_EQ(grad_weight.role, TensorRole::gradient);
    }
  }
}

// A bf16 Llama's loss: Hugging Face's fp32 copy of the logits [16, 32000] and fp32 log-softmax
// (4 x 16 x 32000 B each) by default; with upcast false neither exists and log_softmax keeps
// bf16 log-probabilities, 2 x 16 x 32000 B.
TEST(LossKinds, CrossEntropyUpcastFollowsTheLoop) {
  for (const bool upcast : {true, false}) {
    SCOPED_TRACE(upcast ? "upcast" : "no upcast");
    ModelRequest request = Request("llama").layers(1).seq_len(16).precision(Precision::bf16);
    if (!upcast) request.loss.upcast = false;
    const Trace trace = build_model(request);
    const bool has_copy = std::any_of(trace.ops().begin(), trace.ops().end(), [](const traces::Op& op) { return op.name == "logits.float"; });
    EXPECT_EQ(has_copy, upcast);
    const auto& log_probs = named(trace, "loss.log_softmax.out");
    EXPECT_EQ(log_probs.dtype, upcast ? DType::f32 : DType::bf16);
    EXPECT_EQ(log_probs.bytes(), (upcast ? 4 : 2) * 16 * 32000);
    EXPECT_EQ(trace.metadata().contains("loss_upcast"), !upcast);
  }
}

TEST(LossKinds, Refusals) {
  EXPECT_THROW(build(LossKind::chunked, 17), InputError);  // more chunks than tokens
  ModelRequest bert = Request("bert-base").seq_len(16);
  bert.loss.kind = LossKind::fused_linear_cross_entropy;
  EXPECT_THROW(build_model(bert), InputError);
  EXPECT_EQ(parse_loss_kind("chunked"), LossKind::chunked);
  EXPECT_FALSE(parse_loss_kind("liger"));
}

}  // namespace
}  // namespace comptrain::zoo

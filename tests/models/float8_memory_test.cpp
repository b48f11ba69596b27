// Transformer Engine's FP8 memory (models/float8_memory.hpp) on Megatron-LM's Llama-shaped
// layers from the zoo: the bytes saved per layer against a hand count, the FP8 weight workspaces,
// the cast and GEMM traffic the op-time model gives unchanged, and the recipes it leaves alone.

#include "comptrain/models/float8_memory.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "comptrain/models/platform.hpp"
#include "comptrain/zoo/zoo.hpp"

namespace comptrain::models {
namespace {

using traces::Trace;
using traces::TensorRole;

constexpr std::int64_t kS = 40, kH = 64, kA = 4, kKv = 2, kI = 176, kV = 1000;

Trace megatron_llama(std::int64_t layers, std::int64_t tensor_parallel = 1) {
  zoo::DecoderArchitecture arch;
  arch.layers = layers;
  arch.hidden = kH;
  arch.heads = kA;
  arch.kv_heads = kKv;
  arch.intermediate = kI;
  arch.vocab = kV;
  arch.max_positions = 4096;
  zoo::ModelRequest request;
  request.model = "llama";
  request.batch_size = 1;
  request.precision = zoo::Precision::bf16;
  request.seq_len = kS;
  request.attention = zoo::Attention::flash;
  request.decoder = arch;
  zoo::MegatronOptions megatron;
  megatron.hidden_dropout = 0;
  megatron.attention_dropout = 0;
  request.megatron = megatron;
  if (tensor_parallel > 1) {
    zoo::TensorParallelSpec tp;
    tp.degree = tensor_parallel;
    tp.sequence_parallel = true;
    request.tensor_parallel = tp;
  }
  return zoo::build_model(request);
}

Float8Scope delayed(bool fp8_weights) {
  Float8Scope scope;
  scope.recipe = Float8Recipe::delayed;
  scope.skip = {"lm_head"};
  scope.fp8_weights = fp8_weights;
  return scope;
}

// Bytes of the storages some backward op reads (what autograd keeps), and of the buffers.
struct Held {
  std::int64_t saved = 0;
  std::int64_t buffers = 0;
};
Held held(const Trace& trace) {
  std::set<traces::TensorIndex> read;
  for (const auto& op : trace.ops()) {
    if (op.phase != traces::Phase::backward) continue;
    for (const auto t : op.inputs) {
      const auto s = trace.storage_of(t);
      if (trace.tensor(s).role == TensorRole::activation) read.insert(s);
    }
  }
  Held h;
  for (const auto s : read) h.saved += trace.tensor(s).bytes();
  for (const auto& t : trace.tensors()) {
    if (t.role == TensorRole::buffer) h.buffers += t.bytes();
  }
  return h;
}

// Per layer (a 2-layer model less a 1-layer one), bf16, flash attention, no dropout: Megatron's
// layer saves 12·sh + 4·sh·kv/a + 6·sI + 8·s + 4·as (tests/zoo/megatron_layers_test.cpp). Under
// FP8 the linears save one-byte copies of their inputs: the first norm's output (2·sh -> sh, q, k
// and v sharing it), the second's (2·sh -> sh), the SwiGLU output down_proj reads (2·sI -> sI),
// and a copy of the attention output (sh) that the flash kernel still saves in bf16:
//   11·sh + 4·sh·kv/a + 5·sI + 8·s + 4·as.
TEST(Float8Memory, EachLinearSavesAnFp8CopyOfItsInput) {
  constexpr std::int64_t s = kS, h = kH, a = kA, kv = kKv, i = kI;
  const Trace one = megatron_llama(1), two = megatron_llama(2);
  EXPECT_EQ(held(two).saved - held(one).saved, 12 * s * h + 4 * s * h * kv / a + 6 * s * i + 8 * s + 4 * a * s);
  const Trace one8 = with_float8_memory(one, delayed(true)), two8 = with_float8_memory(two, delayed(true));
  EXPECT_EQ(held(two8).saved - held(one8).saved, 11 * s * h + 4 * s * h * kv / a + 5 * s * i + 8 * s + 4 * a * s);
  // FP8 weights: no workspace.
  EXPECT_EQ(held(two8).buffers, held(two).buffers);
}

// Without FP8 weights, every in-scope weight (the layers' seven matrices, not lm_head's) has a
// persistent workspace of two bytes an element beside it.
TEST(Float8Memory, SixteenBitWeightsHaveAnFp8Workspace) {
  const Trace two = megatron_llama(2);
  const Trace two8 = with_float8_memory(two, delayed(false));
  const std::int64_t per_layer = 2 * kH * kA * (kH / kA) + 2 * kH * kKv * (kH / kA) + 3 * kH * kI;
  EXPECT_EQ(held(two8).buffers - held(two).buffers, 2 * 2 * per_layer);
  EXPECT_EQ(with_float8_memory(two, delayed(false), false).tensors().size(), with_float8_memory(two, delayed(true)).tensors().size());
  // The op-time model's FP8 linears take as long as before: the same casts, the copy read at one
  // byte an element as the 16-bit input was.
  Float8Scope scope = delayed(false);
  OpTimeOptions options;
  options.float8 = scope;
  const OpTimeModel model(builtin_platform("dgx-h100-superpod"), options);
  double before = 0, after = 0;
  for (traces::OpIndex o = 0; o < two.ops().size(); ++o) before += model.run(two, o).seconds;
  for (traces::OpIndex o = 0; o < two8.ops().size(); ++o) after += model.run(two8, o).seconds;
  EXPECT_NEAR(after, before, 1e-12 * before);
}

// Under sequence parallelism the norms write their output shards in FP8, gather them in FP8 and
// save them so (Transformer Engine's TELayerNormColumnParallelLinear): per layer, beside the
// copies above (SwiGLU's output, 2·s·I/t -> s·I/t; the attention output's copy, + s·h/t), the
// two shards of s/t·h go from two bytes to one (- 2·s·h/t): against the 16-bit run the saved
// bytes fall by s·h/t + s·I/t, and every tensor-parallel all-gather of a norm output moves one
// byte an element.
TEST(Float8Memory, SequenceParallelNormShardsAreGatheredAndSavedInFp8) {
  constexpr std::int64_t s = kS, h = kH, i = kI, t = 2;
  const Trace one = megatron_llama(1, t), two = megatron_llama(2, t);
  const Trace one8 = with_float8_memory(one, delayed(true)), two8 = with_float8_memory(two, delayed(true));
  EXPECT_EQ((held(two8).saved - held(one8).saved) - (held(two).saved - held(one).saved), -s * h / t - s * i / t);
  // The gathers of the norms' outputs (forward, and backward again), one byte an element; the
  // output layer's input (lm_head is out of scope) stays 16-bit.
  int fp8_gathers = 0, wide_gathers = 0;
  for (const auto& op : two8.ops()) {
    if (op.kind != traces::OpKind::communication || op.communication->kind != traces::CommunicationKind::all_gather) continue;
    const auto& in = two8.tensor(op.inputs.front());
    if (in.producer && two8.op(*in.producer).kind == traces::OpKind::layernorm) {
      (in.dtype == traces::DType::u8 ? fp8_gathers : wide_gathers) += 1;
      EXPECT_EQ(two8.tensor(op.outputs.front()).dtype, in.dtype) << op.name;
    }
  }
  EXPECT_EQ(fp8_gathers, 2 * 2 * 2);  // two norms a layer, two layers, each gathered forward and backward
  EXPECT_EQ(wide_gathers, 2);         // the final norm's output, gathered for lm_head forward and backward
  // The GEMMs and casts take as long as before; the norms write half the bytes.
  OpTimeOptions options;
  options.float8 = delayed(true);
  const OpTimeModel model(builtin_platform("dgx-h100-superpod"), options);
  double linears = 0, linears8 = 0, norms = 0, norms8 = 0;
  for (traces::OpIndex o = 0; o < two.ops().size(); ++o) {
    const auto kind = two.op(o).kind;
    if (kind == traces::OpKind::linear) linears += model.run(two, o).seconds;
    if (kind == traces::OpKind::layernorm) norms += model.run(two, o).seconds;
  }
  for (traces::OpIndex o = 0; o < two8.ops().size(); ++o) {
    const auto kind = two8.op(o).kind;
    if (kind == traces::OpKind::linear) linears8 += model.run(two8, o).seconds;
    if (kind == traces::OpKind::layernorm) norms8 += model.run(two8, o).seconds;
  }
  EXPECT_NEAR(linears8, linears, 1e-12 * linears);
  EXPECT_LT(norms8, norms);
}

// torchao's tensorwise recipe saves its 16-bit operands: the trace is unchanged.
TEST(Float8Memory, TheTensorwiseRecipeChangesNothing) {
  const Trace two = megatron_llama(2);
  Float8Scope tensorwise;
  EXPECT_EQ(with_float8_memory(two, tensorwise), two);
}

}  // namespace
}  // namespace comptrain::models

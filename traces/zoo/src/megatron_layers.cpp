// The fused elementwise kernels of Megatron-LM's Transformer Engine layers (traces/zoo/README.md,
// "Megatron-LM's Transformer Engine layers"), as megatron-core builds a GPT layer with
// --transformer-impl transformer_engine (NVIDIA/Megatron-LM core_v0.6.0,
// megatron/core/models/gpt/gpt_layer_specs.py): each is one kernel where Hugging Face's eager
// modules run several, and each keeps for backward what its autograd Function saves. The norms
// are TE's RMSNorm (NetworkBuilder::fused_rmsnorm: the input, the weight and an fp32 rsigma per
// row; the GEMM after it saves the normalised rows, as TE's LayerNormLinear keeps ln_out).

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "comptrain/support/checked.hpp"
#include "network_builder.hpp"

namespace comptrain::zoo::detail {
namespace {

using traces::BatchLinear;
using traces::DType;
using traces::OpKind;


// FLOPs per element, as the eager ops they fuse count them (network_builder.cpp): the rotation
// x * cos + rotate_half(x) * sin (2 products, a negation, a sum), its backward the same;
// SwiGLU silu(a) * b (silu's 4 and the product) and its backward (silu's derivative, 8, and
// the two products' 2: megatron/core/fusions/fused_bias_swiglu.py, swiglu_back); dropout's
// compare-and-scale (2) and the residual sum (1), the backward's masked scale (2).
constexpr std::int64_t kRotaryFlops = 4;
constexpr std::int64_t kSwigluForward = 5;
constexpr std::int64_t kSwigluBackward = 10;
constexpr std::int64_t kDropoutAddForward = 3;
constexpr std::int64_t kDropoutAddBackward = 2;

}  // namespace

Value NetworkBuilder::fused_rotary(const std::string& name, Value x, Value freqs) {
  expect_rank(x, 4, name);
  if (requires_grad(freqs.index) || dim(freqs, -1) != dim(x, 3)) throw std::logic_error(name + ": the frequencies do not fit the heads");
  const std::string op = unique_op_name(name);
  // Transformer Engine's fused_apply_rotary_pos_emb (megatron/core/models/common/embeddings/
  // rotary_pos_embedding.py, apply_rotary_pos_emb with config.apply_rope_fusion): one kernel
  // reads x and the fp32 frequencies [S, 1, 1, D] and writes the rotated copy in x's dtype; the
  // autograd Function keeps the frequencies only, and its backward is one kernel too.
  const std::size_t y = new_output(op + ".out", tensors_[x.index].dtype, sample_shape(x), tensors_[x.index].batch_dim, true);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::elementwise;
  f.inputs = {x.index, freqs.index};
  f.outputs = {y};
  f.flops = scaled(elements(x.index), kRotaryFlops);
  f.differentiable_outputs = {y};
  f.saved = {freqs.index};
  f.grads = {{x.index, {}}};
  f.backward_flops = scaled(elements(x.index), kRotaryFlops);
  f.backward_kind = OpKind::elementwise;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::fused_swiglu(const std::string& name, Value gate, Value up) {
  if (sample_shape(gate) != sample_shape(up)) throw std::logic_error(name + ": gate and up differ in shape");
  const std::string op = unique_op_name(name);
  // bias_swiglu_impl (megatron/core/fusions/fused_bias_swiglu.py): SwiGLUFunction's forward is
  // one fused kernel, silu(y1) * y2 over the two halves of linear_fc1's output (here Hugging
  // Face's gate and up projections, the same bytes), and it saves that input (both halves) for
  // swiglu_back, one kernel writing both halves' gradients.
  const std::size_t y = new_output(op + ".out", tensors_[gate.index].dtype, sample_shape(gate), tensors_[gate.index].batch_dim, true);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::elementwise;
  f.inputs = {gate.index, up.index};
  f.outputs = {y};
  f.flops = scaled(elements(y), kSwigluForward);
  f.differentiable_outputs = {y};
  f.saved = {gate.index, up.index};
  f.grads = {{gate.index, {}}, {up.index, {}}};
  f.backward_flops = scaled(elements(y), kSwigluBackward);
  f.backward_kind = OpKind::elementwise;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::dropout_add(const std::string& name, Value x, Value residual) {
  if (sample_shape(x) != sample_shape(residual)) throw std::logic_error(name + ": x and the residual differ in shape");
  const std::string op = unique_op_name(name);
  // bias_dropout_add_fused_train (megatron/core/fusions/fused_bias_dropout.py, jit-scripted):
  // residual + dropout(x + bias, p) as one fused kernel, the bias already in the GEMM's output
  // here. Autograd keeps dropout's mask, one byte per element; the backward scales the
  // gradient by it for x and passes it unchanged to the residual.
  const auto batch_dim = tensors_[x.index].batch_dim;
  const std::size_t y = new_output(op + ".out", tensors_[residual.index].dtype, sample_shape(x), batch_dim, true);
  const std::size_t mask = new_output(op + ".mask", DType::boolean, sample_shape(x), batch_dim, false);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::dropout;
  f.inputs = {x.index, residual.index};
  f.outputs = {y, mask};
  f.flops = scaled(elements(y), kDropoutAddForward);
  f.differentiable_outputs = {y};
  f.saved = {mask};
  f.grads = {{x.index, {}}, {residual.index, y}};
  f.backward_flops = scaled(elements(y), kDropoutAddBackward);
  f.backward_kind = OpKind::dropout;
  record(std::move(f));
  return {y};
}

}  // namespace comptrain::zoo::detail

// The language models' head and loss, per loss kind (ModelSpec::loss; traces/zoo/README.md,
// "Loss kinds"): the cross-entropy as autograd runs it, Liger-Kernel's fused linear
// cross-entropy, torchtune's chunked-output cross-entropy and a fused cross-entropy kernel.

#include <algorithm>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "comptrain/support/checked.hpp"
#include "comptrain/support/input_error.hpp"
#include "network_builder.hpp"

namespace comptrain::zoo::detail {
namespace {

using traces::BatchLinear;
using traces::DType;
using traces::OpKind;
using traces::TensorRole;

constexpr std::string_view kArithmetic = "a size or FLOP count of the loss";

// Per logit: log_softmax's forward (max, subtract, exp, sum, subtract the log-sum: 5) and its
// gradient (exp, times the sum, subtract, the one-hot: 4), the counts network_builder.cpp uses
// for log_softmax (traces/zoo/README.md, "FLOPs").
constexpr std::int64_t kCrossEntropyForward = 5;
constexpr std::int64_t kCrossEntropyBackward = 4;


std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// triton.next_power_of_2: the smallest power of two >= n (n >= 1).
std::int64_t next_power_of_2(std::int64_t n) {
  std::int64_t p = 1;
  while (p < n) p = multiply_or_throw(p, 2, kArithmetic);
  return p;
}

}  // namespace

Value NetworkBuilder::lm_loss(const std::string& head_name, Value x, Value head, Value labels, bool upcast) {
  expect_rank(x, 3, head_name);
  const std::int64_t s = dim(x, 1);
  const std::int64_t vocab = dim(head, 0);
  switch (loss_.kind) {
    case LossKind::cross_entropy: {
      // Under torch.compile (LossSpec::compiled): the fused kernels' saved set, the logits in
      // their own dtype and a log-sum-exp per row, and a new gradient of the logits' size.
      if (loss_.compiled) return fused_cross_entropy_loss(head_name, x, head, labels, false);
      // The trace the zoo has always made: the head's logits [1, S, V], Hugging Face's fp32 copy
      // (ForCausalLMLoss: logits = logits.float()), and log_softmax + nll_loss over [S, V].
      Value logits = linear(head_name, x, head, std::nullopt);
      if (loss_.upcast.value_or(upcast)) logits = to_dtype("logits.float", logits, DType::f32);
      logits = reshape("logits.view", logits, {s, vocab});
      return cross_entropy("loss", logits, reshape("labels.view", labels, {s}));
    }
    case LossKind::fused_cross_entropy: return fused_cross_entropy_loss(head_name, x, head, labels, true);
    case LossKind::chunked: return chunked_loss(head_name, x, head, labels);
    case LossKind::fused_linear_cross_entropy: break;
  }
  return fused_linear_cross_entropy_loss(x, head, labels);
}

Value NetworkBuilder::fused_cross_entropy_loss(const std::string& head_name, Value x, Value head, Value labels, bool inplace_backward) {
  const std::int64_t s = dim(x, 1);
  const std::int64_t vocab = dim(head, 0);
  // FlashAttention's Triton cross-entropy (Dao-AILab/flash-attention@058ad35a3914afd7408dd33c7d5f558a48f4bb05,
  // flash_attn/ops/triton/cross_entropy.py, CrossEntropyLossFunction): one kernel over the
  // logits in their own dtype (no fp32 copy, no log-probabilities) writes the fp32 loss and
  // log-sum-exp of every row; ctx.save_for_backward(logits, lse, labels); with
  // inplace_backward=True the backward kernel writes the gradient over the saved logits
  // (`dlogits = logits if ctx.inplace_backward`). The mean over the rows is folded in.
  // A compiled cross_entropy(logits.float(), labels) (LossSpec::compiled) saves the same set
  // and writes its gradient as a new tensor (inplace_backward false).
  Value logits = linear(head_name, x, head, std::nullopt);
  logits = reshape("logits.view", logits, {s, vocab});
  const Value targets = reshape("labels.view", labels, {s});
  const std::string op = unique_op_name("loss.cross_entropy");
  const std::size_t loss = new_output(op + ".out", DType::f32, {}, std::nullopt, true);
  const std::size_t lse = new_output(op + ".lse", DType::f32, {s}, 0, false);
  const std::size_t losses = new_output(op + ".losses", DType::f32, {s}, 0, false);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::loss;
  f.inputs = {logits.index, targets.index};
  f.outputs = {loss, lse, losses};
  f.flops = sum(scaled(elements(logits.index), kCrossEntropyForward), elements(targets.index));
  f.differentiable_outputs = {loss};
  f.saved = {logits.index, lse, targets.index};
  f.grads = {{logits.index, {}}};
  if (inplace_backward) f.computed_in[logits.index] = logits.index;  // over the logits
  f.backward_flops = scaled(elements(logits.index), kCrossEntropyBackward);
  f.backward_kind = OpKind::loss;
  record(std::move(f));
  return {loss};
}

Value NetworkBuilder::chunked_loss(const std::string& head_name, Value x, Value head, Value labels) {
  const std::int64_t s = dim(x, 1);
  const std::int64_t h = dim(x, 2);
  const std::int64_t vocab = dim(head, 0);
  // torchtune's CEWithChunkedOutputLoss (pytorch/torchtune@10ff7cd2e2415a9ebb462a10cf7ed149bf531054,
  // torchtune/modules/loss/ce_chunked_output_loss.py) with the decoder's chunked output
  // (TransformerDecoder.chunked_output: [self.output(chunk) for chunk in
  // h.tensor_split(num_output_chunks, dim=1)]). The model returns the list of 16-bit logit
  // chunks; the loss upcasts and cross-entropies one chunk at a time
  // (F.cross_entropy(logits.float(), labels, reduction="sum")), adds them and divides by
  // the tokens. Autograd keeps each chunk's fp32 log-probabilities, as the whole-vocabulary
  // loss does; what chunking saves is the fp32 copy of all the logits at once. The recipe
  // holds the list of 16-bit chunks until the loss returns (`del logits` after the loss).
  const std::int64_t chunks = loss_.chunks;
  if (chunks < 1 || chunks > s) {
    throw InputError("loss.chunks: " + std::to_string(chunks) + " chunks of a " + std::to_string(s) +
                     "-token sequence; expected 1 to seq_len");
  }
  // tensor_split: the first s % chunks chunks have one token more.
  std::vector<std::int64_t> sizes;
  for (std::int64_t i = 0; i < chunks; ++i) sizes.push_back(s / chunks + (i < s % chunks ? 1 : 0));
  std::vector<std::vector<std::int64_t>> shapes;
  for (const std::int64_t size : sizes) shapes.push_back({1, size, h});
  const std::vector<Value> parts = split_into_views(unique_op_name("output.tensor_split"), x, shapes);
  std::vector<Value> logits;
  for (std::int64_t i = 0; i < chunks; ++i) {
    Value part = parts[static_cast<std::size_t>(i)];
    // With a batch > 1 a chunk along the tokens is strided: matmul's reshape(-1, H) copies it,
    // and that copy is what the GEMM saves for the weight's gradient.
    if (batch_size_ > 1) part = contiguous("output.chunk" + std::to_string(i) + ".contiguous", part, false);
    logits.push_back(linear(head_name, part, head, std::nullopt));
  }
  Value total{};
  for (std::int64_t i = 0; i < chunks; ++i) {
    const std::int64_t n = sizes[static_cast<std::size_t>(i)];
    Value chunk = reshape("loss.logits_chunk.view", logits[static_cast<std::size_t>(i)], {n, vocab});
    chunk = to_dtype("loss.logits_chunk.float", chunk, DType::f32);
    // labels.tensor_split(...)[i].reshape(-1): views of the labels, no op.
    const std::size_t target = new_view("labels.chunk" + std::to_string(i), labels.index, {n}, tensors_[labels.index].batch_dim);
    const Value ce = cross_entropy("loss.chunk" + std::to_string(i), chunk, {target});
    total = i == 0 ? ce : add("loss.total", total, ce);
  }
  // total_loss / total_elements; the op also reads the 16-bit chunks so that they live to
  // here, as the recipe's list of logits does.
  const std::string op = unique_op_name("loss.div");
  const std::size_t loss = new_output(op + ".out", DType::f32, {}, std::nullopt, true);
  ForwardOp d;
  d.name = op;
  d.kind = OpKind::elementwise;
  d.inputs = {total.index};
  for (const Value chunk : logits) d.inputs.push_back(chunk.index);
  d.outputs = {loss};
  d.flops = {1, 0};
  d.differentiable_outputs = {loss};
  d.grads = {{total.index, {}}};
  d.backward_flops = {1, 0};
  d.backward_kind = OpKind::elementwise;
  record(std::move(d));
  return {loss};
}

Value NetworkBuilder::fused_linear_cross_entropy_loss(Value x, Value head, Value labels) {
  const std::int64_t s = dim(x, 1);
  const std::int64_t h = dim(x, 2);
  const std::int64_t vocab = dim(head, 0);
  // Liger-Kernel's LigerFusedLinearCrossEntropyFunction (linkedin/Liger-Kernel@00eba634c2e9b5f05badbfb67e9b0a4caba301a2,
  // src/liger_kernel/ops/fused_linear_cross_entropy.py, fused_linear_cross_entropy_forward) on
  // the hidden states viewed as [B*T, H]. The forward pass walks the tokens in chunks; per chunk
  // it computes the logits [chunk, V] in the input's dtype (one buffer reused), the
  // cross-entropy kernel writes the loss and the logits' gradient over them, and two GEMMs add
  // that chunk's share into grad_input = zeros_like(_input) and grad_weight = zeros_like(weight)
  // (accum_dtype None: the weight's dtype). ctx.save_for_backward(grad_input, grad_weight); the
  // backward only scales them when the loss's gradient is not 1 (it is 1 here: torch.equal
  // skips the kernel) and hands them on: the weight's .grad is grad_weight itself (autograd's
  // AccumulateGrad steals a tensor nothing else holds). Chunk size: inc_factor = cdiv(V, H),
  // chunk_size = min(next_power_of_2(cdiv(B*T, inc_factor)), B*T) (chunk_mem_const 1).
  const Value flat = reshape("hidden.view", x, {s, h});
  const std::string op = unique_op_name("loss.fused_linear_cross_entropy");
  // Under autocast the function's GEMMs cast their operands (torch.mm inside forward, no autograd
  // node: the gradients go to the fp32 tensors the function was given); a weight's copy is
  // autocast's cached one when an earlier op made it.
  const auto inner_cast = [&](std::size_t tensor, const std::string& suffix) {
    const DType lower = precision_ == Precision::amp_bf16 ? DType::bf16 : DType::f16;
    if (!autocast() || tensors_[tensor].dtype == lower) return tensor;
    if (const auto cached = weight_copies_.find(tensor); cached != weight_copies_.end()) return cached->second;
    TensorRecord copy;
    copy.name = op + "." + suffix;
    copy.dtype = lower;
    copy.sample_shape = tensors_[tensor].sample_shape;
    copy.batch_dim = tensors_[tensor].batch_dim;
    copy.role = tensors_[tensor].role == TensorRole::weight ? TensorRole::weight_copy : TensorRole::temporary;
    const std::size_t y = add_tensor(std::move(copy));
    emit({op + "." + suffix, traces::Phase::forward, OpKind::elementwise, {tensor}, {y}, {}, {}, {}});
    return y;
  };
  const std::size_t input = inner_cast(flat.index, "input_cast");
  const std::size_t weight = inner_cast(head.index, "weight_cast");
  const std::int64_t tokens = multiply_or_throw(batch_size_, s, kArithmetic);
  const std::int64_t chunk = std::min(next_power_of_2(ceil_div(tokens, ceil_div(vocab, h))), tokens);
  const std::size_t loss = new_output(op + ".out", DType::f32, {}, std::nullopt, true);
  const std::size_t grad_input = new_output(op + ".grad_input", tensors_[flat.index].dtype, {s, h}, 0, false);
  const std::size_t grad_weight = new_output(op + ".grad_weight", tensors_[head.index].dtype, {vocab, h}, std::nullopt, false);
  // The weight's first gradient (a tied embedding adds its own into it later in the backward pass).
  if (tensors_[head.index].role == TensorRole::weight && !tensors_[head.index].grad) tensors_[grad_weight].role = TensorRole::gradient;
  const std::size_t logits = new_output(op + ".logits_chunk", tensors_[input].dtype, {chunk, vocab}, std::nullopt, false);
  const std::size_t loss_1d = new_output(op + ".loss_1d", DType::f32, {s}, 0, false);
  const std::size_t mask = new_output(op + ".target_mask", DType::boolean, {s}, 0, false);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::linear;
  f.inputs = {input, weight, labels.index};
  f.outputs = {loss, grad_input, grad_weight, logits, loss_1d, mask};
  // The head's GEMM, grad_input's and grad_weight's (2·B·T·H·V each) and the cross-entropy's
  // forward and gradient per logit.
  const BatchLinear logit_count = scaled(elements(loss_1d), vocab);
  f.flops = sum(scaled(logit_count, multiply_or_throw(6, h, kArithmetic)), scaled(logit_count, kCrossEntropyForward + kCrossEntropyBackward));
  f.differentiable_outputs = {loss};
  f.saved = {grad_input, grad_weight};
  f.grads = {{flat.index, {}}, {head.index, {}}};
  f.computed_in = {{flat.index, grad_input}, {head.index, grad_weight}};
  f.backward_kind = OpKind::elementwise;  // nothing to compute: the gradients exist
  record(std::move(f));
  return {loss};
}

}  // namespace comptrain::zoo::detail

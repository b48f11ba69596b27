#include "network_builder.hpp"

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "comptrain/support/checked.hpp"

namespace comptrain::zoo::detail {
namespace {

using traces::BatchLinear;
using traces::DType;
using traces::OpKind;
using traces::Phase;
using traces::TensorRole;

// FLOPs per element of the non-GEMM ops (a transcendental function counts as one FLOP; the
// derivations are in traces/zoo/README.md, "FLOPs").
constexpr std::int64_t kReluForward = 1;       // max(x, 0)
constexpr std::int64_t kReluBackward = 1;      // select on y > 0
constexpr std::int64_t kSquareForward = 1;     // x * x
constexpr std::int64_t kSquareBackward = 2;    // 2 * x, then times the gradient (the copy computes nothing)
constexpr std::int64_t kBatchNormForward = 5;  // sum and sum of squares (3), scale-and-shift FMA (2)
constexpr std::int64_t kBatchNormBackward = 9;
constexpr std::int64_t kLayerNormForward = 7;  // statistics (3), (x - mean) * rstd * w + b (4)
constexpr std::int64_t kLayerNormBackward = 13;
constexpr std::int64_t kGeluForward = 5;       // x * 0.5 * (1 + erf(x / sqrt 2))
constexpr std::int64_t kGeluBackward = 11;     // recompute the CDF (4), the density (4), combine (3)
constexpr std::int64_t kTanhForward = 1;
constexpr std::int64_t kTanhBackward = 3;      // g * (1 - y^2)
constexpr std::int64_t kDropoutForward = 2;    // compare with p, scale by 1/(1-p)
constexpr std::int64_t kDropoutBackward = 2;   // g * mask * 1/(1-p)
constexpr std::int64_t kSoftmaxForward = 5;    // max, subtract, exp, sum, divide
constexpr std::int64_t kSoftmaxBackward = 4;   // y * (g - sum(g * y))
constexpr std::int64_t kLogSoftmaxForward = 5; // max, subtract, exp, sum, subtract log-sum
constexpr std::int64_t kLogSoftmaxBackward = 4;// g - exp(y) * sum(g)
constexpr std::int64_t kScaleFlops = 1;        // x / c, and g / c backward
constexpr std::int64_t kWhereFlops = 1;        // a select, forward and backward
// HF's LlamaRMSNorm: pow, mean, multiply by the rsqrt, multiply by the weight (4 per element)
// and add eps, rsqrt per row (2); backward: the weight product's two gradients (3), the
// rsqrt product's (3), pow's (2) and mean's broadcast (1) per element, rsqrt's and the sum
// behind it per row (3).
constexpr std::int64_t kRmsNormForward = 4;
constexpr std::int64_t kRmsNormForwardPerRow = 2;
constexpr std::int64_t kRmsNormBackward = 9;
constexpr std::int64_t kRmsNormBackwardPerRow = 3;
constexpr std::int64_t kSiluForward = 4;   // x * sigmoid(x): exp, add, divide, multiply
constexpr std::int64_t kSiluBackward = 8;  // sigmoid again (3), g * s * (1 + x * (1 - s)) (5)
constexpr std::int64_t kRotaryFlops = 4;   // x * cos + neg-and-swap(x) * sin: 2 products, neg, add
// FlashAttention-2 (Dao 2023, §4.1): the backward pass runs 5 GEMMs of the forward's size to
// the forward's 2 (it recomputes the scores), 2.5 times the forward's matmul FLOPs.
constexpr std::int64_t kFlashForwardGemms = 2;
constexpr std::int64_t kFlashBackwardGemms = 5;

// Optimizer FLOPs per parameter element, following torch.optim's update rules (adam.py,
// adamw.py and sgd.py at pytorch/pytorch dc80ccded5385cca3e777472d64cfe3d874fad89,
// c15fcf4eb79daaf10e12cecdf7fee15cde6cc530, 0316fdce3d7cd6b72508ea175f38e4ad19ed5072) with
// PyTorch's default hyper-parameters (weight_decay 0 for SGD and Adam, 0.01 for AdamW).
constexpr std::int64_t kSgdFlops = 2;       // w -= lr * g
constexpr std::int64_t kMomentumFlops = 4;  // buf = mu * buf + g; w -= lr * buf
// Adam: m = lerp(m, g, 1 - b1) (3); v = b2 * v + (1 - b2) * g * g (4) ...
constexpr std::int64_t kAdamMomentFlops = 7;
// ... d = sqrt(v) / sqrt(bc2) + eps (3) ...
constexpr std::int64_t kAdamDenomFlops = 3;
// ... w += -(lr / bc1) * m / d (addcdiv, 3).
constexpr std::int64_t kAdamUpdateFlops = 3;
// AdamW's decoupled decay first multiplies the weight by (1 - lr * wd) in place (adamw.py:
// param.mul_ / _foreach_mul_(device_params, 1 - lr * weight_decay)).
constexpr std::int64_t kAdamWDecayFlops = 1;

// PyTorch's type promotion of two floating dtypes (c10::promoteTypes): equal types stay, f16
// with bf16 and anything with f32 give f32, anything with f64 gives f64.
DType promote(DType a, DType b) {
  if (a == b || !traces::is_floating(b)) return a;
  if (!traces::is_floating(a)) return b;
  if (a == DType::f64 || b == DType::f64) return DType::f64;
  return DType::f32;
}

// Every element, byte and FLOP count of the builder is a product or a sum of these: checked, so
// that a count that does not fit in int64 is an InputError rather than a wrapped value (signed
// overflow is undefined behaviour; a wrapped FLOP count was a silent wrong result:
// shared/defects-2/13). zoo.cpp's check_model_size refuses the fields that would get here first,
// by name; this is the net under it.
constexpr std::string_view kSizeArithmetic = "a size or FLOP count of the model";
BatchLinear times(BatchLinear value, std::int64_t factor) {
  return {multiply_or_throw(value.fixed, factor, kSizeArithmetic), multiply_or_throw(value.per_sample, factor, kSizeArithmetic)};
}
BatchLinear operator+(BatchLinear a, const BatchLinear& b) {
  return {add_or_throw(a.fixed, b.fixed, kSizeArithmetic), add_or_throw(a.per_sample, b.per_sample, kSizeArithmetic)};
}
void add_into(BatchLinear& a, const BatchLinear& b) { a = a + b; }

// The multiply-adds of one S x S x D product per head of q [N, H, S, D]: every (query, key)
// pair, or with a causal mask the S(S + 1)/2 pairs on or below the diagonal. A causal fused
// kernel skips the blocks above the diagonal (FlashAttention-2, Dao 2023, §3.1.1: "approximately
// half of the blocks"; Dao-AILab/flash-attention@0469c727 benchmarks/benchmark_flash_attention.py
// counts a causal kernel's FLOPs as `4 * batch * seqlen**2 * nheads * headdim // 2`). The masked
// half of each diagonal block, which the kernel computes and discards (about B/(2S) of the work
// for blocks of B rows), is not counted. Exact: S(S + 1) is even.
BatchLinear attention_macs(BatchLinear q_elements, std::int64_t seq, bool causal) {
  if (!causal) return times(q_elements, seq);
  const BatchLinear doubled = times(q_elements, seq + 1);
  return {doubled.fixed / 2, doubled.per_sample / 2};
}

std::int64_t product(const std::vector<std::int64_t>& shape) {
  std::int64_t count = 1;
  for (const std::int64_t extent : shape) count = multiply_or_throw(count, extent, kSizeArithmetic);
  return count;
}

std::vector<std::size_t> concat(std::vector<std::size_t> a, const std::vector<std::size_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Output extent of a convolution or pooling window (PyTorch's formula, dilation 1, floor mode).
std::int64_t window_output(std::int64_t in, std::int64_t kernel, std::int64_t stride,
                           std::int64_t padding, const std::string& what) {
  if (kernel < 1 || stride < 1 || padding < 0 || in + 2 * padding < kernel) {
    throw std::logic_error(what + ": window does not fit its input");
  }
  return (in + 2 * padding - kernel) / stride + 1;
}

}  // namespace

BatchLinear scaled(BatchLinear value, std::int64_t factor, std::string_view what) {
  return {multiply_or_throw(value.fixed, factor, what), multiply_or_throw(value.per_sample, factor, what)};
}
BatchLinear sum(BatchLinear a, BatchLinear b, std::string_view what) {
  return {add_or_throw(a.fixed, b.fixed, what), add_or_throw(a.per_sample, b.per_sample, what)};
}

DType promote_types(DType a, DType b) { return promote(a, b); }

std::int64_t optimizer_flops_per_element(Optimizer optimizer) {
  switch (optimizer) {
    case Optimizer::sgd: return kSgdFlops;
    case Optimizer::momentum: return kMomentumFlops;
    case Optimizer::adam: return kAdamMomentFlops + kAdamDenomFlops + kAdamUpdateFlops;
    case Optimizer::adamw: return kAdamWDecayFlops + kAdamMomentFlops + kAdamDenomFlops + kAdamUpdateFlops;
    default: return library_optimizer_flops_per_element(optimizer);
  }
}

NetworkBuilder::NetworkBuilder(std::string model, std::int64_t batch_size, Precision precision,
                               Optimizer optimizer, OptimizerImpl optimizer_impl, bool softmax_saves_input,
                               bool accumulate_gradients_in_place)
    : model_(std::move(model)),
      batch_size_(batch_size),
      precision_(precision),
      optimizer_(optimizer),
      optimizer_impl_(optimizer_impl),
      softmax_saves_input_(softmax_saves_input),
      accumulate_gradients_in_place_(accumulate_gradients_in_place) {
  if (batch_size_ < 1) throw std::logic_error("NetworkBuilder: batch size must be >= 1");
}

DType NetworkBuilder::compute_dtype() const {
  switch (precision_) {
    case Precision::mixed:
    case Precision::fp16: return DType::f16;
    case Precision::bf16: return DType::bf16;
    case Precision::fp32:
    case Precision::amp_fp16:
    case Precision::amp_bf16: return DType::f32;
  }
  return DType::f32;
}

bool NetworkBuilder::autocast() const {
  return precision_ == Precision::amp_fp16 || precision_ == Precision::amp_bf16;
}

DType NetworkBuilder::state_dtype(std::size_t weight) const {
  // torch.optim creates its states with torch.zeros_like(p): the parameter's dtype, so a
  // .half() model keeps 16-bit moments (and PEFT's fp32 adapters on it fp32 ones). Megatron's
  // `mixed` keeps them fp32 next to the fp32 master weights; under autocast the parameters are
  // fp32 anyway.
  return precision_ == Precision::fp16 || precision_ == Precision::bf16 ? tensors_.at(weight).dtype : DType::f32;
}

const std::vector<std::int64_t>& NetworkBuilder::sample_shape(Value value) const {
  return tensors_.at(value.index).sample_shape;
}

std::int64_t NetworkBuilder::dim(Value value, std::ptrdiff_t axis) const {
  const auto& shape = sample_shape(value);
  const auto rank = static_cast<std::ptrdiff_t>(shape.size());
  const std::ptrdiff_t index = axis < 0 ? rank + axis : axis;
  if (index < 0 || index >= rank) {
    throw std::logic_error(tensors_.at(value.index).name + ": no dimension " + std::to_string(axis));
  }
  return shape[static_cast<std::size_t>(index)];
}

void NetworkBuilder::expect_rank(Value value, std::size_t rank, const std::string& what) const {
  if (sample_shape(value).size() != rank) {
    throw std::logic_error(what + ": expected a rank-" + std::to_string(rank) + " input, got " +
                           tensors_.at(value.index).name);
  }
}

std::size_t NetworkBuilder::storage(std::size_t tensor) const {
  return tensors_.at(tensor).view_of.value_or(tensor);
}

BatchLinear NetworkBuilder::elements(std::size_t tensor) const {
  const auto& record = tensors_.at(tensor);
  const std::int64_t count = product(record.sample_shape);
  return record.batch_dim ? BatchLinear{0, count} : BatchLinear{count, 0};
}

BatchLinear NetworkBuilder::bytes(std::size_t tensor) const {
  return times(elements(tensor), traces::element_size(tensors_.at(tensor).dtype));
}

std::string NetworkBuilder::unique_op_name(const std::string& name) {
  // Functional calls reused within one module (ResNet's `self.relu`) get torch.fx's suffixes:
  // relu, relu_1, relu_2.
  const int uses = op_name_uses_[name]++;
  return uses == 0 ? name : name + "_" + std::to_string(uses);
}

std::size_t NetworkBuilder::add_tensor(TensorRecord record) {
  if (finished_) throw std::logic_error("NetworkBuilder: already finished");
  tensors_.push_back(std::move(record));
  return tensors_.size() - 1;
}

std::size_t NetworkBuilder::new_output(const std::string& name, DType dtype,
                                       std::vector<std::int64_t> sample_shape,
                                       std::optional<std::size_t> batch_dim, bool requires_grad) {
  TensorRecord record;
  record.name = name;
  record.dtype = dtype;
  record.sample_shape = std::move(sample_shape);
  record.batch_dim = batch_dim;
  record.requires_grad = requires_grad;
  return add_tensor(std::move(record));
}

std::size_t NetworkBuilder::new_view(const std::string& name, std::size_t base,
                                     std::vector<std::int64_t> sample_shape,
                                     std::optional<std::size_t> batch_dim) {
  const std::size_t root = storage(base);
  TensorRecord record;
  record.name = name;
  record.dtype = tensors_.at(base).dtype;
  record.sample_shape = std::move(sample_shape);
  record.batch_dim = batch_dim;
  record.view_of = root;
  record.role = tensors_.at(root).role;
  record.requires_grad = tensors_.at(base).requires_grad;
  if (product(record.sample_shape) > product(tensors_.at(root).sample_shape) ||
      record.batch_dim.has_value() != tensors_.at(root).batch_dim.has_value()) {
    throw std::logic_error(name + ": a view larger than its storage");
  }
  return add_tensor(std::move(record));
}

Value NetworkBuilder::input(const std::string& name, DType dtype, std::vector<std::int64_t> sample_shape) {
  TensorRecord record;
  record.name = name;
  record.dtype = dtype;
  record.sample_shape = std::move(sample_shape);
  record.batch_dim = 0;
  record.role = TensorRole::input;
  return {add_tensor(std::move(record))};
}

Value NetworkBuilder::parameter(const std::string& name, std::vector<std::int64_t> shape) {
  // Under LoRA every parameter the model itself defines is frozen; lora.cpp adds the adapters.
  return new_parameter(name, std::move(shape), compute_dtype(), !lora_);
}

Value NetworkBuilder::new_parameter(const std::string& name, std::vector<std::int64_t> shape, DType dtype, bool trainable) {
  TensorRecord record;
  record.name = name;
  record.dtype = dtype;
  record.sample_shape = std::move(shape);
  record.role = TensorRole::weight;
  record.requires_grad = trainable;
  const std::size_t index = add_tensor(std::move(record));
  // A frozen parameter (requires_grad=False) gets no gradient and no optimizer step.
  if (trainable) weights_.push_back(index);
  return {index};
}

Value NetworkBuilder::buffer(const std::string& name, DType dtype, std::vector<std::int64_t> shape) {
  TensorRecord record;
  record.name = name;
  record.dtype = dtype;
  record.sample_shape = std::move(shape);
  record.role = TensorRole::buffer;
  return {add_tensor(std::move(record))};
}

std::size_t NetworkBuilder::emit(OpRecord op) {
  ops_.push_back(std::move(op));
  return ops_.size() - 1;
}

void NetworkBuilder::record(ForwardOp op) {
  if (lora_ && std::none_of(op.grads.begin(), op.grads.end(), [&](const GradSpec& g) { return requires_grad(g.target); })) {
    // Under LoRA the ops before the first adapter read only frozen weights and inputs: autograd
    // records no node for them, so they save nothing and their outputs need no gradient.
    for (const std::size_t output : op.outputs) tensors_.at(output).requires_grad = false;
    emit({op.name, Phase::forward, op.kind, op.inputs, op.outputs, op.updated, op.aliases, op.flops});
    return;
  }
  for (const std::size_t tensor : op.saved) tensors_.at(tensor).saved = true;
  BackwardRecipe recipe;
  recipe.forward_op = emit({op.name, Phase::forward, op.kind, op.inputs, op.outputs, op.updated,
                            op.aliases, op.flops});
  if (op.communication) communications_.emplace(recipe.forward_op, *op.communication);
  recipe.communication = op.backward_communication;
  recipe.regather = op.regather;
  recipe.split = op.split;
  recipe.context_exchange = std::move(op.context_exchange);
  recipe.reduced_in_place = std::move(op.reduced_in_place);
  recipe.differentiable_outputs = std::move(op.differentiable_outputs);
  for (const std::size_t tensor : op.kept) tensors_.at(tensor).saved = true;
  recipe.reads = concat(concat(std::move(op.saved), op.reads), op.kept);
  recipe.unread = std::move(op.kept);
  for (const GradSpec& grad : op.grads) {
    if (requires_grad(grad.target)) recipe.grads.push_back(grad);
  }
  if (recipe.grads.empty() && !op.gradient_leaves_stage) {
    // Nothing to differentiate would leave the op without a backward op and its saved
    // tensors unread: a mistake in a model definition.
    throw std::logic_error(op.name + ": no input or weight requires a gradient");
  }
  recipe.flops = op.backward_flops;
  recipe.kind = op.backward_kind;
  recipe.scratch = std::move(op.backward_scratch);
  recipe.computed_in = std::move(op.computed_in);
  recipes_.push_back(std::move(recipe));
}

std::size_t NetworkBuilder::cast(const std::string& op_name, std::size_t tensor, DType dtype, TensorRole role) {
  const std::string op = unique_op_name(op_name);
  TensorRecord copy;
  copy.name = op + ".out";
  copy.dtype = dtype;
  copy.sample_shape = tensors_.at(tensor).sample_shape;
  copy.batch_dim = tensors_.at(tensor).batch_dim;
  copy.role = role;
  copy.requires_grad = requires_grad(tensor);
  const std::size_t y = add_tensor(std::move(copy));
  if (!requires_grad(tensor)) {
    // Casting the images: a kernel, but no autograd node.
    emit({op, Phase::forward, OpKind::elementwise, {tensor}, {y}, {}, {}, {}});
    return y;
  }
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::elementwise;  // a conversion: bytes, no FLOPs
  f.inputs = {tensor};
  f.outputs = {y};
  f.differentiable_outputs = {y};
  // ToCopyBackward0 saves nothing; it converts the gradient back to the source dtype: for a
  // weight copy that is the fp32 weight.grad itself.
  f.grads = {{tensor, {}}};
  f.backward_kind = OpKind::elementwise;
  record(std::move(f));
  return y;
}

std::size_t NetworkBuilder::autocast_lower(const std::string& op, std::size_t tensor) {
  const DType dtype = tensors_.at(tensor).dtype;
  const DType lower = precision_ == Precision::amp_bf16 ? DType::bf16 : DType::f16;
  if (!autocast() || !traces::is_floating(dtype) || dtype == lower) return tensor;
  if (tensors_[tensor].role == TensorRole::weight && requires_grad(tensor)) {
    // autocast_mode.cpp (cached_cast): the lower-precision copy of a leaf that requires grad
    // is cached until the autocast region ends, so a weight is cast once per forward pass. A
    // frozen weight (LoRA's base) is not cached: cast at each use, a temporary.
    if (const auto cached = weight_copies_.find(tensor); cached != weight_copies_.end()) return cached->second;
    const std::size_t copy = cast(tensors_[tensor].name + ".cast", tensor, lower, TensorRole::weight_copy);
    weight_copies_.emplace(tensor, copy);
    return copy;
  }
  return cast(op + ".cast", tensor, lower, TensorRole::temporary);
}

std::size_t NetworkBuilder::autocast_fp32(const std::string& op, std::size_t tensor) {
  const DType dtype = tensors_.at(tensor).dtype;
  if (!autocast() || !traces::is_floating(dtype) || dtype == DType::f32) return tensor;
  return cast(op + ".cast", tensor, DType::f32, TensorRole::temporary);
}

// ---- Convolutional layers ----------------------------------------------------------------

Value NetworkBuilder::conv2d(const std::string& name, Value x, std::int64_t out_channels,
                             std::int64_t kernel, std::int64_t stride, std::int64_t padding, bool bias) {
  expect_rank(x, 4, name);
  const std::int64_t in_channels = dim(x, 1);
  const std::int64_t out_h = window_output(dim(x, 2), kernel, stride, padding, name);
  const std::int64_t out_w = window_output(dim(x, 3), kernel, stride, padding, name);
  const std::string op = unique_op_name(name);
  Value weight = parameter(name + ".weight", {out_channels, in_channels, kernel, kernel});
  std::vector<std::size_t> biases;  // zero or one
  if (bias) biases.push_back(parameter(name + ".bias", {out_channels}).index);
  // conv2d is on autocast's lower-precision list: input, weight and bias run in 16 bits.
  x = {autocast_lower(op, x.index)};
  weight = {autocast_lower(op, weight.index)};
  for (std::size_t& b : biases) b = autocast_lower(op, b);
  const std::size_t y = new_output(op + ".out", tensors_[x.index].dtype, {dim(x, 0), out_channels, out_h, out_w},
                                   tensors_[x.index].batch_dim, true);
  const BatchLinear macs = times(elements(y), in_channels * kernel * kernel);
  const BatchLinear bias_flops = bias ? elements(y) : BatchLinear{};

  ForwardOp f;
  f.name = op;
  f.kind = OpKind::conv;
  f.inputs = concat({x.index, weight.index}, biases);
  f.outputs = {y};
  f.flops = times(macs, 2) + bias_flops;
  f.differentiable_outputs = {y};
  // ConvolutionBackward0 saves input and weight: grad_weight needs the input, grad_input the weight.
  f.saved = {x.index, weight.index};
  f.grads = {{x.index, {}}, {weight.index, {}}};
  for (const std::size_t b : biases) f.grads.push_back({b, {}});
  // Transposed convolution for grad_input and a correlation for grad_weight: as many MACs as
  // the forward each; grad_bias sums the output gradient.
  f.backward_flops = times(macs, requires_grad(x.index) ? 4 : 2) + bias_flops;
  f.backward_kind = OpKind::conv;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::batchnorm2d(const std::string& name, Value x) {
  expect_rank(x, 4, name);
  const std::int64_t channels = dim(x, 1);
  const std::string op = unique_op_name(name);
  const Value weight = parameter(name + ".weight", {channels});
  const Value bias = parameter(name + ".bias", {channels});
  // Running statistics: fp32 under autocast (an fp32 model; batch norm is on neither autocast
  // list, so it runs on its 16-bit input with fp32 weights and statistics, as cuDNN allows) and
  // in `mixed` (Apex O2's keep_batchnorm_fp32); model.half()/.bfloat16() converts every
  // floating buffer, so 16-bit there. save_mean/save_invstd use the accumulate type, fp32, in
  // any case (aten/src/ATen/native/cuda/Normalization.cu: at::toAccumulateType).
  const DType stats = precision_ == Precision::fp16 || precision_ == Precision::bf16 ? compute_dtype() : DType::f32;
  const Value running_mean = buffer(name + ".running_mean", stats, {channels});
  const Value running_var = buffer(name + ".running_var", stats, {channels});
  const std::size_t y = new_output(op + ".out", tensors_[x.index].dtype, sample_shape(x),
                                   tensors_[x.index].batch_dim, true);
  const std::size_t save_mean = new_output(op + ".save_mean", DType::f32, {channels}, std::nullopt, false);
  const std::size_t save_invstd = new_output(op + ".save_invstd", DType::f32, {channels}, std::nullopt, false);

  ForwardOp f;
  f.name = op;
  f.kind = OpKind::batchnorm;
  f.inputs = {x.index, weight.index, bias.index, running_mean.index, running_var.index};
  f.outputs = {y, save_mean, save_invstd};
  f.updated = {running_mean.index, running_var.index};  // the running averages, in place
  f.flops = times(elements(x.index), kBatchNormForward);
  f.differentiable_outputs = {y};
  // NativeBatchNormBackward0 saves input, weight, running_mean, running_var and the batch
  // statistics (save_mean, save_invstd) of the forward pass.
  f.saved = {x.index, weight.index, save_mean, save_invstd};
  f.reads = {running_mean.index, running_var.index};
  f.grads = {{x.index, {}}, {weight.index, {}}, {bias.index, {}}};
  f.backward_flops = times(elements(x.index), kBatchNormBackward);
  f.backward_kind = OpKind::batchnorm;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::maxpool2d(const std::string& name, Value x, std::int64_t kernel,
                                std::int64_t stride, std::int64_t padding) {
  expect_rank(x, 4, name);
  const std::string op = unique_op_name(name);
  const std::vector<std::int64_t> shape = {dim(x, 0), dim(x, 1),
                                           window_output(dim(x, 2), kernel, stride, padding, name),
                                           window_output(dim(x, 3), kernel, stride, padding, name)};
  const auto batch_dim = tensors_[x.index].batch_dim;
  const std::size_t y = new_output(op + ".out", tensors_[x.index].dtype, shape, batch_dim, true);
  const std::size_t indices = new_output(op + ".indices", DType::i64, shape, batch_dim, false);

  ForwardOp f;
  f.name = op;
  f.kind = OpKind::pool;
  f.inputs = {x.index};
  f.outputs = {y, indices};
  f.flops = times(elements(y), kernel * kernel);  // one comparison per window element
  f.differentiable_outputs = {y};
  // MaxPool2DWithIndicesBackward0 saves the input and the argmax indices (int64, output-shaped).
  f.saved = {x.index, indices};
  f.grads = {{x.index, {}}};
  f.backward_flops = elements(y);  // scatter-add of each output gradient to its argmax
  f.backward_kind = OpKind::pool;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::adaptive_avgpool2d(const std::string& name, Value x, std::int64_t out_h,
                                         std::int64_t out_w) {
  expect_rank(x, 4, name);
  const std::string op = unique_op_name(name);
  const std::size_t y = new_output(op + ".out", tensors_[x.index].dtype, {dim(x, 0), dim(x, 1), out_h, out_w},
                                   tensors_[x.index].batch_dim, true);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::pool;
  f.inputs = {x.index};
  f.outputs = {y};
  f.flops = elements(x.index) + elements(y);  // the window sums, one division per output
  f.differentiable_outputs = {y};
  // A 1x1 output is computed as x.mean((-1, -2)) (at::adaptive_avg_pool2d), whose backward
  // saves only sizes; any other size runs _adaptive_avg_pool2d, which saves its input.
  if (out_h != 1 || out_w != 1) f.saved = {x.index};
  f.grads = {{x.index, {}}};
  f.backward_flops = elements(x.index);
  f.backward_kind = OpKind::pool;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::flatten(const std::string& name, Value x) {
  expect_rank(x, 4, name);
  return reshape(name, x, {dim(x, 0), dim(x, 1) * dim(x, 2) * dim(x, 3)});
}

// ---- Generic layers ------------------------------------------------------------------------

Value NetworkBuilder::linear(const std::string& name, Value x, std::int64_t out_features, bool bias) {
  if (lora_) return lora_linear(name, x, out_features, bias);  // lora.cpp
  const Value weight = parameter(name + ".weight", {out_features, dim(x, -1)});
  const std::optional<Value> b = bias ? std::optional(parameter(name + ".bias", {out_features})) : std::nullopt;
  return linear(name, x, weight, b);
}

Value NetworkBuilder::linear(const std::string& name, Value x, Value weight, std::optional<Value> bias) {
  return linear_saving(name, x, weight, bias, std::nullopt);
}

Value NetworkBuilder::linear_saving(const std::string& name, Value x, Value weight, std::optional<Value> bias,
                                    std::optional<std::size_t> saved_shard, std::optional<std::size_t> input_collective) {
  const std::int64_t in_features = dim(x, -1);
  if (sample_shape(weight).size() != 2 || dim(weight, 1) != in_features) {
    throw std::logic_error(name + ": weight does not match the input features");
  }
  const std::int64_t out_features = dim(weight, 0);
  const std::string op = unique_op_name(name);
  // linear/addmm are on autocast's lower-precision list.
  x = {autocast_lower(op, x.index)};
  weight = {autocast_lower(op, weight.index)};
  if (bias) bias = Value{autocast_lower(op, bias->index)};
  std::vector<std::int64_t> shape = sample_shape(x);
  shape.back() = out_features;
  const std::size_t y = new_output(op + ".out", tensors_[x.index].dtype, shape, tensors_[x.index].batch_dim, true);
  const BatchLinear macs = times(elements(y), in_features);
  const BatchLinear bias_flops = bias ? elements(y) : BatchLinear{};

  ForwardOp f;
  f.name = op;
  f.kind = OpKind::linear;
  f.inputs = {x.index, weight.index};
  if (bias) f.inputs.push_back(bias->index);
  f.outputs = {y};
  f.flops = times(macs, 2) + bias_flops;
  f.differentiable_outputs = {y};
  // AddmmBackward0 / MmBackward0 save the input (for grad_weight) and the weight (for grad_input).
  // The generated code saves each only when the gradient that needs it is wanted
  // (gen_variable_type.py's should_compute_output guards), so a frozen weight's linear (LoRA's
  // base) keeps the weight alone.
  const bool weight_grad = requires_grad(weight.index);
  // Under sequence parallelism Megatron's linear saves the S/t shard of its input and gathers
  // it again in backward (tensor_parallel.cpp).
  const std::size_t saved_input = saved_shard.value_or(x.index);
  f.saved = weight_grad ? std::vector<std::size_t>{saved_input, weight.index} : std::vector<std::size_t>{weight.index};
  if (saved_shard && weight_grad) f.regather = std::pair{*saved_shard, x.index};
  f.grads = {{x.index, {}}, {weight.index, {}}};
  if (bias) f.grads.push_back({bias->index, {}});
  // grad_input = g W and grad_weight = gᵀ x are one GEMM each, as large as the forward one.
  const bool bias_grad = bias && requires_grad(bias->index);
  f.backward_flops = times(macs, (requires_grad(x.index) ? 2 : 0) + (weight_grad ? 2 : 0)) + (bias_grad ? bias_flops : BatchLinear{});
  f.backward_kind = OpKind::linear;
  if (input_collective) f.split = SplitBackward{*input_collective, x.index, saved_input, weight.index, times(macs, 2)};
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::relu_(const std::string& name, Value x) {
  // In place: the output is the input's storage, written again. ReluBackward0
  // (threshold_backward) saves the result.
  return elementwise(name, x, OpKind::relu, kReluForward, kReluBackward, Saves::result, true);
}

Value NetworkBuilder::relu(const std::string& name, Value x) {
  return elementwise(name, x, OpKind::relu, kReluForward, kReluBackward, Saves::result, false);
}

Value NetworkBuilder::square(const std::string& name, Value x) {
  const std::string op = unique_op_name(name);
  // pow is on autocast's fp32 list: a 16-bit input is cast, and the result and what the
  // backward saves and writes are fp32. PowBackward0 saves self; its x.pow(1) (a copy) and
  // 2 * it are tensors of x's size that the last kernel, grad * it, reads.
  x = {autocast_fp32(op, x.index)};
  return elementwise_named(op, x, OpKind::elementwise, kSquareForward, kSquareBackward, Saves::input, false,
                           {".backward.pow", ".backward.scaled"});
}

Value NetworkBuilder::gelu(const std::string& name, Value x) {
  return elementwise(name, x, OpKind::gelu, kGeluForward, kGeluBackward, Saves::input, false);  // GeluBackward0 saves self
}

Value NetworkBuilder::tanh(const std::string& name, Value x) {
  return elementwise(name, x, OpKind::elementwise, kTanhForward, kTanhBackward, Saves::result, false);  // TanhBackward0
}

Value NetworkBuilder::dropout(const std::string& name, Value x) {
  const std::string op = unique_op_name(name);
  const auto batch_dim = tensors_[x.index].batch_dim;
  const std::size_t y = new_output(op + ".out", tensors_[x.index].dtype, sample_shape(x), batch_dim, true);
  // CUDA's native_dropout returns a bool mask (1 byte per element); the CPU path of PyTorch
  // 1.13 multiplies by a float mask instead (see README).
  const std::size_t mask = new_output(op + ".mask", DType::boolean, sample_shape(x), batch_dim, false);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::dropout;
  f.inputs = {x.index};
  f.outputs = {y, mask};
  f.flops = times(elements(y), kDropoutForward);
  f.differentiable_outputs = {y};
  f.saved = {mask};  // NativeDropoutBackward0 saves the mask (and the scale, a double)
  f.grads = {{x.index, {}}};
  f.backward_flops = times(elements(y), kDropoutBackward);
  f.backward_kind = OpKind::dropout;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::add(const std::string& name, Value a, Value b) {
  const std::string op = unique_op_name(name);
  // add is on no autocast list: ordinary type promotion (a 16-bit GEMM output plus an fp32
  // residual gives fp32).
  const DType dtype = promote(tensors_[a.index].dtype, tensors_[b.index].dtype);
  const std::size_t y = new_output(op + ".out", dtype, sample_shape(a),
                                   tensors_[a.index].batch_dim, requires_grad(a.index) || requires_grad(b.index));
  ForwardOp f;
  f.name = op;
  f.inputs = {a.index, b.index};
  f.outputs = {y};
  f.differentiable_outputs = {y};
  f.grads = {{a.index, y}, {b.index, y}};
  record_add(std::move(f));
  return {y};
}

Value NetworkBuilder::add_(const std::string& name, Value a, Value b) {
  const std::string op = unique_op_name(name);
  const std::size_t y = new_view(op + ".out", a.index, sample_shape(a), tensors_[a.index].batch_dim);
  tensors_[y].requires_grad = requires_grad(a.index) || requires_grad(b.index);
  ForwardOp f;
  f.name = op;
  f.inputs = {a.index, b.index};
  f.outputs = {y};
  f.differentiable_outputs = {y};
  f.grads = {{a.index, y}, {b.index, y}};
  record_add(std::move(f));
  return {y};
}

void NetworkBuilder::record_add(ForwardOp f) {
  // AddBackward0 saves nothing and hands the output gradient to both operands unchanged (an
  // alias, no data written) -- except to an operand broadcast over the batch (a position
  // embedding), whose gradient is the output gradient summed over the batch: a new tensor.
  const std::size_t y = f.outputs.front();
  f.kind = OpKind::elementwise;
  f.flops = elements(y);
  f.backward_kind = OpKind::view;
  for (GradSpec& grad : f.grads) {
    const TensorRecord& operand = tensors_[grad.target];
    // Only an operand needing no gradient may broadcast (BERT's additive attention mask).
    if (!requires_grad(grad.target)) continue;
    if (operand.sample_shape != tensors_[y].sample_shape) {
      throw std::logic_error(f.name + ": operands of different shapes");
    }
    if (operand.batch_dim != tensors_[y].batch_dim) {
      grad.alias_of.reset();
      if (requires_grad(grad.target)) {
        add_into(f.backward_flops, elements(y));
        f.backward_kind = OpKind::elementwise;
      }
    }
  }
  record(std::move(f));
}

Value NetworkBuilder::layernorm(const std::string& name, Value x) {
  const std::int64_t features = dim(x, -1);
  const std::string op = unique_op_name(name);
  const Value weight = parameter(name + ".weight", {features});
  const Value bias = parameter(name + ".bias", {features});
  // Megatron's norms carry `sequence_parallel` (their gradients reduced over the tensor group).
  mark_sequence_parallel_weight(weight);
  mark_sequence_parallel_weight(bias);
  x = {autocast_fp32(op, x.index)};  // layer_norm is on autocast's fp32 list
  const auto batch_dim = tensors_[x.index].batch_dim;
  const std::size_t y = new_output(op + ".out", tensors_[x.index].dtype, sample_shape(x), batch_dim, true);
  // One fp32 mean and reciprocal standard deviation per normalised row, whatever the precision
  // (layer_norm_cuda allocates them in the accumulate type).
  std::vector<std::int64_t> rows = sample_shape(x);
  rows.pop_back();
  const std::size_t mean = new_output(op + ".mean", DType::f32, rows, batch_dim, false);
  const std::size_t rstd = new_output(op + ".rstd", DType::f32, rows, batch_dim, false);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::layernorm;
  f.inputs = {x.index, weight.index, bias.index};
  f.outputs = {y, mean, rstd};
  f.flops = times(elements(x.index), kLayerNormForward);
  f.differentiable_outputs = {y};
  // NativeLayerNormBackward0 saves input, weight, bias, mean and rstd.
  f.saved = {x.index, mean, rstd, weight.index, bias.index};
  f.grads = {{x.index, {}}, {weight.index, {}}, {bias.index, {}}};
  f.backward_flops = times(elements(x.index), kLayerNormBackward);
  f.backward_kind = OpKind::layernorm;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::softmax(const std::string& name, Value x) {
  // On autocast's fp32 list: a 16-bit input is cast to fp32, and the saved output is fp32 (and
  // so is the saved input, when saved: the cast copy softmax ran on).
  const std::string op = unique_op_name(name);
  x = {autocast_fp32(op, x.index)};
  return elementwise_named(op, x, OpKind::softmax, kSoftmaxForward, kSoftmaxBackward, softmax_saves(), false);
}

Value NetworkBuilder::fused_softmax(const std::string& name, Value x) {
  // Saves what torch's softmax saves, the input included under softmax_saves_input, which
  // applies to every attention softmax (see traces/zoo/README.md for the caveat: Megatron's
  // own CUDA kernel is an autograd.Function that saves its result only).
  return elementwise(name, x, OpKind::softmax, kSoftmaxForward, kSoftmaxBackward, softmax_saves(), false);
}

NetworkBuilder::Saves NetworkBuilder::softmax_saves() const {
  // SoftmaxBackward0 saves the result. Up to PyTorch 1.10 derivatives.yaml called
  // _softmax_backward_data(grad, result, dim, self), so the input was saved too
  // (pytorch/pytorch issue 64000; pull request 65242 dropped `self`, from 1.11 on).
  return softmax_saves_input_ ? Saves::result_and_input : Saves::result;
}

Value NetworkBuilder::scale(const std::string& name, Value x) {
  // DivBackward0 by a constant needs only the constant.
  return elementwise(name, x, OpKind::elementwise, kScaleFlops, kScaleFlops, Saves::nothing, false);
}

Value NetworkBuilder::elementwise(const std::string& name, Value x, OpKind kind, std::int64_t forward_flops,
                                  std::int64_t backward_flops, Saves saves, bool in_place) {
  return elementwise_named(unique_op_name(name), x, kind, forward_flops, backward_flops, saves, in_place);
}

Value NetworkBuilder::elementwise_named(const std::string& op, Value x, OpKind kind, std::int64_t forward_flops,
                                        std::int64_t backward_flops, Saves saves, bool in_place,
                                        const std::vector<std::string>& backward_scratch) {
  const std::size_t y = in_place ? new_view(op + ".out", x.index, sample_shape(x), tensors_[x.index].batch_dim)
                                 : new_output(op + ".out", tensors_[x.index].dtype, sample_shape(x),
                                              tensors_[x.index].batch_dim, true);
  ForwardOp f;
  f.name = op;
  f.kind = kind;
  f.inputs = {x.index};
  f.outputs = {y};
  f.flops = times(elements(y), forward_flops);
  f.differentiable_outputs = {y};
  switch (saves) {
    case Saves::input: f.saved = {x.index}; break;
    case Saves::result: f.saved = {y}; break;
    case Saves::result_and_input: f.saved = {y, x.index}; break;  // in _softmax_backward_data's order
    case Saves::nothing: break;
  }
  f.grads = {{x.index, {}}};
  for (const std::string& suffix : backward_scratch) {
    f.backward_scratch.push_back(new_output(op + suffix, tensors_[x.index].dtype, sample_shape(x), tensors_[x.index].batch_dim, false));
  }
  f.backward_flops = times(elements(y), backward_flops);
  f.backward_kind = kind;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::matmul(const std::string& name, Value a, Value b, bool transpose_b) {
  // Copies: the casts below add tensors.
  const std::vector<std::int64_t> shape_a = sample_shape(a);
  const std::vector<std::int64_t> shape_b = sample_shape(b);
  if (shape_a.size() < 2 || shape_a.size() != shape_b.size() ||
      !std::equal(shape_a.begin(), shape_a.end() - 2, shape_b.begin())) {
    throw std::logic_error(name + ": operands are not batches of matrices of the same batch");
  }
  const std::int64_t inner = dim(a, -1);
  if ((transpose_b ? dim(b, -1) : dim(b, -2)) != inner) {
    throw std::logic_error(name + ": inner dimensions differ");
  }
  const std::string op = unique_op_name(name);
  // bmm/matmul are on autocast's lower-precision list.
  a = {autocast_lower(op, a.index)};
  b = {autocast_lower(op, b.index)};
  std::vector<std::int64_t> shape = shape_a;
  shape.back() = transpose_b ? dim(b, -2) : dim(b, -1);
  const std::size_t y = new_output(op + ".out", tensors_[a.index].dtype, shape, tensors_[a.index].batch_dim,
                                   requires_grad(a.index) || requires_grad(b.index));
  const BatchLinear macs = times(elements(y), inner);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::matmul;
  f.inputs = {a.index, b.index};
  f.outputs = {y};
  f.flops = times(macs, 2);
  f.differentiable_outputs = {y};
  f.saved = {a.index, b.index};  // BmmBackward0 saves both operands
  f.grads = {{a.index, {}}, {b.index, {}}};
  f.backward_flops = times(macs, 2 * ((requires_grad(a.index) ? 1 : 0) + (requires_grad(b.index) ? 1 : 0)));
  f.backward_kind = OpKind::matmul;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::embedding(const std::string& name, Value ids, std::int64_t num, std::int64_t dimension) {
  return embedding(name, ids, parameter(name + ".weight", {num, dimension}));
}

Value NetworkBuilder::embedding(const std::string& name, Value ids, Value weight) {
  if (sample_shape(weight).size() != 2) throw std::logic_error(name + ": weight is not a table");
  const std::string op = unique_op_name(name);
  std::vector<std::int64_t> shape = sample_shape(ids);
  shape.push_back(dim(weight, 1));
  // embedding is on no autocast list: it gathers rows of the table in the table's dtype.
  const std::size_t y = new_output(op + ".out", tensors_[weight.index].dtype, shape, tensors_[ids.index].batch_dim, true);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::embedding;
  f.inputs = {ids.index, weight.index};
  f.outputs = {y};
  f.differentiable_outputs = {y};
  f.saved = {ids.index};  // EmbeddingBackward0 saves the indices (int64)
  f.grads = {{weight.index, {}}};
  f.backward_flops = elements(y);  // embedding_dense_backward: a scatter-add per element
  f.backward_kind = OpKind::embedding;
  record(std::move(f));
  return {y};
}

// ---- Views -----------------------------------------------------------------------------------

Value NetworkBuilder::reshape(const std::string& name, Value x, std::vector<std::int64_t> shape) {
  if (product(shape) != product(sample_shape(x))) {
    throw std::logic_error(name + ": reshape changes the number of elements");
  }
  // Layouts keep the batch outermost, so a batch-scaling tensor keeps batch dimension 0.
  const std::string op = unique_op_name(name);
  const std::size_t y = new_view(op + ".out", x.index, std::move(shape), tensors_[x.index].batch_dim);
  // A view of a tensor that needs no gradient (labels.view(-1)) runs no kernel and leaves no
  // autograd node: it is just another name for the storage, not an op.
  if (!requires_grad(x.index)) return {y};
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::view;
  f.inputs = {x.index};
  f.outputs = {y};
  f.aliases = {y};
  f.differentiable_outputs = {y};
  f.grads = {{x.index, y}};  // the backward reshapes the gradient back: a view
  f.backward_kind = OpKind::view;
  record(std::move(f));
  return {y};
}

std::vector<Value> NetworkBuilder::split_heads(const std::string& name, Value x, std::int64_t parts,
                                               std::int64_t heads) {
  expect_rank(x, 3, name);
  const std::int64_t width = dim(x, 2);
  if (parts < 1 || heads < 1 || width % (parts * heads) != 0) {
    throw std::logic_error(name + ": the width does not split into parts and heads");
  }
  const std::string op = unique_op_name(name);
  const std::vector<std::int64_t> shape = {dim(x, 0), heads, dim(x, 1), width / parts / heads};
  static const char* const kPartNames[] = {"q", "k", "v"};
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::view;
  f.inputs = {x.index};
  std::vector<Value> result;
  for (std::int64_t part = 0; part < parts; ++part) {
    const std::string suffix = parts == 3 ? kPartNames[part] : parts == 1 ? "out" : std::to_string(part);
    const std::size_t y = new_view(op + "." + suffix, x.index, shape, tensors_[x.index].batch_dim);
    f.outputs.push_back(y);
    result.push_back({y});
  }
  f.aliases = f.outputs;
  f.differentiable_outputs = f.outputs;
  if (parts == 1) {
    f.grads = {{x.index, f.outputs.front()}};
    f.backward_kind = OpKind::view;
  } else {
    // SplitBackward0 concatenates the parts' gradients into a new tensor (a copy).
    f.grads = {{x.index, {}}};
    f.backward_kind = OpKind::other;
  }
  record(std::move(f));
  return result;
}

Value NetworkBuilder::merge_heads(const std::string& name, Value x) {
  expect_rank(x, 4, name);
  return reshape(name, x, {dim(x, 0), dim(x, 2), dim(x, 1) * dim(x, 3)});
}

std::vector<Value> NetworkBuilder::split_last(const std::string& name, Value x) {
  const std::vector<std::int64_t> in_shape = sample_shape(x);
  if (in_shape.size() < 2) throw std::logic_error(name + ": needs two dimensions");
  std::vector<std::int64_t> shape = in_shape;
  shape.pop_back();
  return split_into_views(unique_op_name(name), x, std::vector<std::vector<std::int64_t>>(static_cast<std::size_t>(in_shape.back()), shape));
}

std::vector<Value> NetworkBuilder::split_into_views(const std::string& op, Value x, const std::vector<std::vector<std::int64_t>>& shapes) {
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::view;
  f.inputs = {x.index};
  std::vector<Value> result;
  for (std::size_t part = 0; part < shapes.size(); ++part) {
    const std::size_t y = new_view(op + "." + std::to_string(part), x.index, shapes[part], tensors_[x.index].batch_dim);
    f.outputs.push_back(y);
    result.push_back({y});
  }
  f.aliases = f.outputs;
  f.differentiable_outputs = f.outputs;
  // SplitBackward0 concatenates the parts' gradients into a new tensor of x's shape, as
  // split_heads' does.
  f.grads = {{x.index, {}}};
  f.backward_kind = OpKind::other;
  record(std::move(f));
  return result;
}

Value NetworkBuilder::select_first(const std::string& name, Value x) {
  expect_rank(x, 3, name);
  // SelectBackward0 writes the gradient into a zero tensor of the input's shape (a copy).
  return part_view(name, x, {dim(x, 0), dim(x, 2)});
}

Value NetworkBuilder::part_view(const std::string& name, Value x, std::vector<std::int64_t> sample_shape) {
  const std::string op = unique_op_name(name);
  const std::size_t y = new_view(op + ".out", x.index, std::move(sample_shape), tensors_[x.index].batch_dim);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::view;
  f.inputs = {x.index};
  f.outputs = {y};
  f.aliases = {y};
  f.differentiable_outputs = {y};
  f.grads = {{x.index, {}}};
  f.backward_kind = OpKind::other;
  record(std::move(f));
  return {y};
}

// ---- Attention pieces ------------------------------------------------------------------------

Value NetworkBuilder::where(const std::string& name, Value condition, Value x) {
  if (requires_grad(condition.index) || tensors_[condition.index].dtype != DType::boolean) {
    throw std::logic_error(name + ": the condition must be a bool tensor without gradient");
  }
  const std::string op = unique_op_name(name);
  const std::size_t y = new_output(op + ".out", tensors_[x.index].dtype, sample_shape(x), tensors_[x.index].batch_dim, true);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::elementwise;
  f.inputs = {condition.index, x.index};
  f.outputs = {y};
  f.flops = times(elements(y), kWhereFlops);
  f.differentiable_outputs = {y};
  f.saved = {condition.index};  // WhereBackward0: grad where condition, 0 elsewhere
  f.grads = {{x.index, {}}};
  f.backward_flops = times(elements(y), kWhereFlops);
  f.backward_kind = OpKind::elementwise;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::to_dtype(const std::string& name, Value x, DType dtype) {
  // Tensor.to / Tensor.type return the tensor itself when it already has the dtype.
  if (tensors_.at(x.index).dtype == dtype) return x;
  return {cast(name, x.index, dtype, TensorRole::temporary)};
}

Value NetworkBuilder::contiguous(const std::string& name, Value x, bool transpose) {
  std::vector<std::int64_t> shape = sample_shape(x);
  if (shape.size() < 2) throw std::logic_error(name + ": needs two dimensions");
  if (transpose) std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  const std::string op = unique_op_name(name);
  const std::size_t y = new_output(op + ".out", tensors_[x.index].dtype, shape, tensors_[x.index].batch_dim,
                                   requires_grad(x.index));
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::elementwise;  // a copy: bytes, no FLOPs
  f.inputs = {x.index};
  f.outputs = {y};
  f.differentiable_outputs = {y};
  f.grads = {{x.index, y}};  // CloneBackward0 hands the gradient on; the view ops reshape it
  f.backward_kind = OpKind::view;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::flash_attention(const std::string& name, Value q, Value k, Value v, bool causal) {
  expect_rank(q, 4, name);
  if (sample_shape(k) != sample_shape(q) || sample_shape(v) != sample_shape(q)) {
    throw std::logic_error(name + ": q, k and v differ in shape");
  }
  const std::string op = unique_op_name(name);
  // scaled_dot_product_attention is on autocast's lower-precision list.
  q = {autocast_lower(op, q.index)};
  k = {autocast_lower(op, k.index)};
  v = {autocast_lower(op, v.index)};
  if (context_parallel_ > 1) {
    if (!causal) throw std::logic_error(name + ": context parallelism is written for causal attention");
    return context_parallel_attention(op, q, k, v, true);
  }
  const std::vector<std::int64_t> shape = sample_shape(q);
  const std::int64_t seq = shape[2];
  const std::int64_t head_dim = shape[3];
  const auto batch_dim = tensors_[q.index].batch_dim;
  const std::size_t y = new_output(op + ".out", tensors_[q.index].dtype, shape, batch_dim, true);
  // The log-sum-exp of every score row, fp32, that the backward kernel recomputes the
  // probabilities from (FlashAttention's L; _scaled_dot_product_flash_attention's logsumexp).
  const std::size_t lse = new_output(op + ".logsumexp", DType::f32, {shape[0], shape[1], seq}, batch_dim, false);
  const BatchLinear macs = attention_macs(elements(q.index), seq, causal);
  // Scores per sample: the products' MACs / D (exact: D divides both parts).
  const BatchLinear scores{macs.fixed / head_dim, macs.per_sample / head_dim};
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::attention;
  f.inputs = {q.index, k.index, v.index};
  f.outputs = {y, lse};
  // Q·Kᵀ and P·V, the softmax and the dropout on the scores, all in one kernel, over the pairs
  // the mask leaves (attention_macs).
  f.flops = times(macs, 2 * kFlashForwardGemms) + times(scores, kSoftmaxForward + kDropoutForward);
  f.differentiable_outputs = {y};
  // _scaled_dot_product_flash_attention_backward takes q, k, v, the output and logsumexp (and
  // the dropout RNG seed and offset, two scalars left out).
  f.saved = {q.index, k.index, v.index, y, lse};
  f.grads = {{q.index, {}}, {k.index, {}}, {v.index, {}}};
  f.backward_flops = times(macs, 2 * kFlashBackwardGemms) + times(scores, kSoftmaxBackward + kDropoutBackward);
  f.backward_kind = OpKind::attention;
  record(std::move(f));
  return {y};
}

void NetworkBuilder::set_context_parallel(std::int64_t degree, ContextParallelSpec::Variant variant) {
  if (degree < 1) throw std::logic_error("set_context_parallel: degree " + std::to_string(degree) + " < 1");
  context_parallel_ = degree;
  context_variant_ = variant;
}

Value NetworkBuilder::context_parallel_attention(const std::string& op, Value q, Value k, Value v, bool dropout) {
  using traces::CommunicationKind;
  using traces::ParallelGroup;
  const std::int64_t c = context_parallel_;
  const std::vector<std::int64_t> shape = sample_shape(q);
  const std::int64_t local = shape[2];  // S / C: this rank's two chunks
  const std::int64_t seq = multiply_or_throw(local, c, kSizeArithmetic);
  const std::int64_t head_dim = shape[3];
  const std::int64_t kv_heads = dim(k, 1);
  const auto batch_dim = tensors_[q.index].batch_dim;
  const DType kv_dtype = dtype(k);
  const std::size_t y = new_output(op + ".out", tensors_[q.index].dtype, shape, batch_dim, true);
  const std::size_t lse = new_output(op + ".logsumexp", DType::f32, {shape[0], shape[1], local}, batch_dim, false);
  // Load balancing (megatron/core/utils.py:2504-2560 at NVIDIA/Megatron-LM@d98e8a6): with chunks of
  // m = S / 2C rows, rank r's query rows of chunk j attend to j m + i + 1 keys (i < m), so chunks r
  // and 2C - 1 - r give m^2 (2C - 1) + m (m + 1) = m (S + 1) pairs per head -- exactly 1/C of the
  // S (S + 1) / 2 causal pairs, whatever r. Per query element that is (S + 1) / 2 keys: the causal
  // count of attention_macs with the whole sequence's length over this rank's S / C queries.
  const BatchLinear macs = attention_macs(elements(q.index), seq, true);
  const BatchLinear scores{macs.fixed / head_dim, macs.per_sample / head_dim};
  const std::int64_t dropout_forward = dropout ? kDropoutForward : 0;
  const std::int64_t dropout_backward = dropout ? kDropoutBackward : 0;
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::attention;
  f.outputs = {y, lse};
  f.flops = times(macs, 2 * kFlashForwardGemms) + times(scores, kSoftmaxForward + dropout_forward);
  f.differentiable_outputs = {y};
  // Only this rank's K,V share is saved, in both variants (Transformer Engine's
  // AttnFuncWithCPAndKVP2P and AttnFuncWithCPAndKVAllGather save the local k, v and gather or
  // pass the rest again in backward; shared/reference/parallelism.md §3).
  f.saved = {q.index, k.index, v.index, y, lse};
  f.backward_flops = times(macs, 2 * kFlashBackwardGemms) + times(scores, kSoftmaxBackward + dropout_backward);
  f.backward_kind = OpKind::attention;
  // One block: this rank's K and V, 2 (S/C) G D elements per sample.
  const std::vector<std::int64_t> block = {shape[0], 2 * kv_heads, local, head_dim};
  if (context_variant_ == ContextParallelSpec::Variant::ring) {
    // Transformer Engine's ring (context_parallel.py:1356, AttnFuncWithCPAndKVP2P): C steps, each
    // computing the local queries against the block in hand while the next block moves on, so
    // C - 1 blocks of 2 (S/C) b G D elements pass through every rank. The ring op writes the
    // receive buffer (the block in flight, a temporary the kernel reads) and overlaps the kernel
    // (traces::Communication::ring; models' Stream::context). Backward passes the K,V blocks and
    // the partial dK,dV blocks around again: two buffers, about twice the forward's traffic.
    // The ring op writes the receive buffer of the block in flight.
    // The receive buffer is the ring op's alone (a temporary while the ring runs): the kernel,
    // beside it on another stream, does not wait for it, so it is not the kernel's input.
    const std::string ring = unique_op_name(op + ".cp_ring");
    const std::size_t recv = new_output(ring + ".recv", kv_dtype, block, batch_dim, false);
    communications_.emplace(emit({ring, Phase::forward, OpKind::communication, {k.index, v.index}, {recv}, {}, {}, {}}),
                            traces::Communication{CommunicationKind::all_gather, ParallelGroup::context, c});
    f.inputs = {q.index, k.index, v.index};
    f.grads = {{q.index, {}}, {k.index, {}}, {v.index, {}}};
    f.context_exchange = BackwardRecipe::ContextExchange{
        unique_op_name(op + ".cp_ring_backward"),
        traces::Communication{CommunicationKind::all_gather, ParallelGroup::context, c},
        {k.index, v.index},
        {{".kv_recv", recv}, {".dkv_recv", recv}},
        {}};
  } else {
    // The all-gather variant (PyTorch context_parallel's default rotation; TE AttnFuncWithCPAndKVAllGather,
    // context_parallel.py:3014): K and V of the whole sequence, 2 S b G D elements, gathered
    // before the kernel (exposed) and held only while it runs; backward gathers them again and
    // reduce-scatters dK,dV back to the shares.
    const std::string gather = unique_op_name(op + ".cp_all_gather");
    const std::vector<std::int64_t> whole = {shape[0], 2 * kv_heads, seq, head_dim};
    const std::size_t kv = new_output(gather + ".out", kv_dtype, whole, batch_dim, requires_grad(k.index) || requires_grad(v.index));
    ForwardOp g;
    g.name = gather;
    g.kind = OpKind::communication;
    g.inputs = {k.index, v.index};
    g.outputs = {kv};
    g.communication = traces::Communication{CommunicationKind::all_gather, ParallelGroup::context};
    g.differentiable_outputs = {kv};
    g.grads = {{k.index, {}}, {v.index, {}}};
    g.backward_kind = OpKind::communication;
    g.backward_communication = traces::Communication{CommunicationKind::reduce_scatter, ParallelGroup::context};
    record(std::move(g));
    f.inputs = {q.index, kv};
    f.grads = {{q.index, {}}, {kv, {}}};
    f.context_exchange = BackwardRecipe::ContextExchange{
        unique_op_name(op + ".cp_all_gather_backward"),
        traces::Communication{CommunicationKind::all_gather, ParallelGroup::context},
        {k.index, v.index},
        {{".out", kv}},
        {k.index, v.index}};
  }
  record(std::move(f));
  return {y};
}

// ---- LLaMA-family pieces -----------------------------------------------------------------------

Value NetworkBuilder::rmsnorm(const std::string& name, Value x) {
  const std::int64_t features = dim(x, -1);
  const std::string op = unique_op_name(name);
  const Value weight = parameter(name + ".weight", {features});
  mark_sequence_parallel_weight(weight);  // as layernorm's
  const DType input_dtype = tensors_[x.index].dtype;
  const auto batch_dim = tensors_[x.index].batch_dim;
  const std::vector<std::int64_t> shape = sample_shape(x);
  std::vector<std::int64_t> rows = shape;
  rows.back() = 1;  // variance.mean(-1, keepdim=True)
  // self.weight * hidden_states.to(input_dtype): ordinary promotion (an fp32 weight under
  // autocast, the model's dtype otherwise).
  const std::size_t y = new_output(op + ".out", promote(tensors_[weight.index].dtype, input_dtype), shape, batch_dim, true);
  std::vector<std::size_t> outputs = {y};
  // hidden_states.to(torch.float32) is the input itself when it is already fp32, else a copy
  // that pow and the product save.
  std::size_t fp32_input = x.index;
  if (input_dtype != DType::f32) {
    fp32_input = new_output(op + ".input_fp32", DType::f32, shape, batch_dim, false);
    outputs.push_back(fp32_input);
  }
  const std::size_t rstd = new_output(op + ".rstd", DType::f32, rows, batch_dim, false);
  const std::size_t normalized = new_output(op + ".normalized", input_dtype, shape, batch_dim, false);
  outputs.push_back(rstd);
  outputs.push_back(normalized);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::layernorm;
  f.inputs = {x.index, weight.index};
  f.outputs = std::move(outputs);
  f.flops = times(elements(x.index), kRmsNormForward) + times(elements(rstd), kRmsNormForwardPerRow);
  f.differentiable_outputs = {y};
  // PowBackward0 and MulBackward0 save the fp32 input (one storage), RsqrtBackward0 and
  // MulBackward0 the rsqrt, the weight product the normalised rows and the weight; the
  // normalised rows only for the weight's gradient, so not for a frozen weight (LoRA).
  f.saved = {fp32_input, rstd, normalized, weight.index};
  if (!requires_grad(weight.index)) f.saved = {fp32_input, rstd, weight.index};
  f.grads = {{x.index, {}}, {weight.index, {}}};
  f.backward_flops = times(elements(x.index), kRmsNormBackward) + times(elements(rstd), kRmsNormBackwardPerRow);
  f.backward_kind = OpKind::layernorm;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::silu(const std::string& name, Value x) {
  return elementwise(name, x, OpKind::elementwise, kSiluForward, kSiluBackward, Saves::input, false);  // SiluBackward0 saves self
}

Value NetworkBuilder::mul(const std::string& name, Value a, Value b) {
  if (!requires_grad(a.index)) std::swap(a, b);  // the operand needing a gradient gives the shape
  if (requires_grad(b.index) && sample_shape(a) != sample_shape(b)) {
    throw std::logic_error(name + ": operands of different shapes");
  }
  const std::string op = unique_op_name(name);
  const DType dtype = promote(tensors_[a.index].dtype, tensors_[b.index].dtype);
  const std::size_t y = new_output(op + ".out", dtype, sample_shape(a), tensors_[a.index].batch_dim,
                                   requires_grad(a.index) || requires_grad(b.index));
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::elementwise;
  f.inputs = {a.index, b.index};
  f.outputs = {y};
  f.flops = elements(y);
  f.differentiable_outputs = {y};
  // MulBackward0: self's gradient is grad * other, other's is grad * self.
  if (requires_grad(a.index)) f.saved.push_back(b.index);
  if (requires_grad(b.index)) f.saved.push_back(a.index);
  f.grads = {{a.index, {}}, {b.index, {}}};
  f.backward_flops = times(elements(y), (requires_grad(a.index) ? 1 : 0) + (requires_grad(b.index) ? 1 : 0));
  f.backward_kind = OpKind::elementwise;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::rotary(const std::string& name, Value x, Value cos, Value sin) {
  expect_rank(x, 4, name);
  const std::int64_t rotated = dim(cos, -1);
  if (requires_grad(cos.index) || requires_grad(sin.index) || sample_shape(cos) != sample_shape(sin) ||
      rotated > dim(x, 3) || rotated % 2 != 0 || dim(cos, -2) != dim(x, 2)) {
    throw std::logic_error(name + ": cos and sin do not fit the heads");
  }
  const std::string op = unique_op_name(name);
  const DType dtype = promote(tensors_[x.index].dtype, tensors_[cos.index].dtype);
  const std::size_t y = new_output(op + ".out", dtype, sample_shape(x), tensors_[x.index].batch_dim, true);
  // Rotated elements per sample: the products' share of x.
  const BatchLinear rotated_elements{elements(x.index).fixed / dim(x, 3) * rotated,
                                     elements(x.index).per_sample / dim(x, 3) * rotated};
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::elementwise;
  f.inputs = {x.index, cos.index, sin.index};
  f.outputs = {y};
  // Eager PyTorch runs the expression as five kernels (x * cos; rotate_half's neg of the second
  // half and cat; that times sin; the sum), each writing its result to memory for the next to
  // read: the four intermediates are temporaries of the op (models/README.md, "Kernel traffic":
  // written once, read once, a launch each). Its backward runs about as many: MulBackward0's
  // grad * sin and grad * cos, NegBackward0, the two SliceBackward0 (each a zero-filled gradient
  // of x's rotated shape with its half copied in) and the sum of x's three gradients.
  std::vector<std::int64_t> rotated_shape = sample_shape(x);
  rotated_shape.back() = rotated;
  std::vector<std::int64_t> half_shape = rotated_shape;
  half_shape.back() = rotated / 2;
  const auto batch_dim = tensors_[x.index].batch_dim;
  const DType x_dtype = tensors_[x.index].dtype;
  f.outputs.push_back(new_output(op + ".x_cos", dtype, rotated_shape, batch_dim, false));
  f.outputs.push_back(new_output(op + ".neg", x_dtype, half_shape, batch_dim, false));
  f.outputs.push_back(new_output(op + ".rotate_half", x_dtype, rotated_shape, batch_dim, false));
  f.outputs.push_back(new_output(op + ".rotated_sin", dtype, rotated_shape, batch_dim, false));
  f.backward_scratch = {new_output(op + ".backward.grad_sin", dtype, rotated_shape, batch_dim, false),
                        new_output(op + ".backward.neg", dtype, half_shape, batch_dim, false),
                        new_output(op + ".backward.slice_first", dtype, rotated_shape, batch_dim, false),
                        new_output(op + ".backward.slice_second", dtype, rotated_shape, batch_dim, false),
                        new_output(op + ".backward.grad_cos", dtype, rotated_shape, batch_dim, false),
                        new_output(op + ".backward.partial_sum", dtype, rotated_shape, batch_dim, false)};
  f.flops = times(rotated_elements, kRotaryFlops);
  f.differentiable_outputs = {y};
  f.saved = {cos.index, sin.index};  // MulBackward0 of x * cos and of rotate_half(x) * sin
  f.grads = {{x.index, {}}};
  f.backward_flops = times(rotated_elements, kRotaryFlops);
  f.backward_kind = OpKind::elementwise;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::repeat_kv(const std::string& name, Value x, std::int64_t n_rep) {
  expect_rank(x, 4, name);
  if (n_rep < 1) throw std::logic_error(name + ": n_rep < 1");
  if (n_rep == 1) return x;  // repeat_kv returns its input unchanged
  const std::string op = unique_op_name(name);
  std::vector<std::int64_t> shape = sample_shape(x);
  shape[1] *= n_rep;
  const std::size_t y = new_output(op + ".out", tensors_[x.index].dtype, shape, tensors_[x.index].batch_dim,
                                   requires_grad(x.index));
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::elementwise;  // a copy: bytes, no FLOPs
  f.inputs = {x.index};
  f.outputs = {y};
  f.differentiable_outputs = {y};
  // ExpandBackward0 sums the gradient over the repeats into a new tensor of x's shape; the
  // reshape's copy (CloneBackward0 / _unsafe_view) saves nothing.
  f.grads = {{x.index, {}}};
  f.backward_flops = elements(y);
  f.backward_kind = OpKind::elementwise;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::softmax_fp32(const std::string& name, Value x) {
  const std::string op = unique_op_name(name);
  const std::size_t y = new_output(op + ".out", DType::f32, sample_shape(x), tensors_[x.index].batch_dim, true);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::softmax;
  f.inputs = {x.index};
  f.outputs = {y};
  f.flops = times(elements(y), kSoftmaxForward);
  f.differentiable_outputs = {y};
  f.saved = {y};
  if (softmax_saves_input_) f.saved.push_back(x.index);
  f.grads = {{x.index, {}}};
  f.backward_flops = times(elements(y), kSoftmaxBackward);
  f.backward_kind = OpKind::softmax;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::sdpa(const std::string& name, Value q, Value k, Value v, SdpaKernel kernel, bool dropout,
                          const SdpaPacking& packing) {
  return sdpa(name, q, k, v, kernel, dropout, packing, AttentionSinksAndWindow{});
}

Value NetworkBuilder::sdpa(const std::string& name, Value q, Value k, Value v, SdpaKernel kernel, bool dropout,
                          const SdpaPacking& packing, const AttentionSinksAndWindow& sinks_and_window) {
  expect_rank(q, 4, name);
  expect_rank(k, 4, name);
  if (sample_shape(k) != sample_shape(v) || dim(k, 0) != dim(q, 0) || dim(k, 2) != dim(q, 2) || dim(k, 3) != dim(q, 3) ||
      dim(q, 1) % dim(k, 1) != 0 || (kernel == SdpaKernel::mem_efficient && dim(k, 1) != dim(q, 1))) {
    throw std::logic_error(name + ": q, k and v do not fit the kernel");
  }
  const std::string op = unique_op_name(name);
  // scaled_dot_product_attention is on autocast's lower-precision list.
  q = {autocast_lower(op, q.index)};
  k = {autocast_lower(op, k.index)};
  v = {autocast_lower(op, v.index)};
  if ((sinks_and_window.window > 0 || sinks_and_window.sinks) && kernel != SdpaKernel::flash) {
    throw std::logic_error(name + ": sinks and a sliding window are written for the flash kernel");
  }
  if (context_parallel_ > 1) {
    if (sinks_and_window.window > 0 || sinks_and_window.sinks) throw std::logic_error(name + ": context parallelism with sinks or a window is not written");
    if (kernel != SdpaKernel::flash || packing.documents > 1) {
      throw std::logic_error(name + ": context parallelism is written for the flash kernel without packing");
    }
    return context_parallel_attention(op, q, k, v, dropout);
  }
  const std::vector<std::int64_t> shape = sample_shape(q);
  const std::int64_t seq = shape[2];
  const std::int64_t head_dim = shape[3];
  const auto batch_dim = tensors_[q.index].batch_dim;
  const std::size_t y = new_output(op + ".out", tensors_[q.index].dtype, shape, batch_dim, true);
  // The fp32 log-sum-exp of every score row. aten/src/ATen/native/transformers/cuda/attention.cu
  // allocates the flash kernel's as {B, heads, S} and _efficient_attention_forward's as
  // {B, heads, ceil_div(S, kAlignLSE) * kAlignLSE} with kAlignLSE = 32 (the backward kernel's
  // block of rows).
  constexpr std::int64_t kAlignLse = 32;
  const std::int64_t lse_rows = kernel == SdpaKernel::flash ? seq : (seq + kAlignLse - 1) / kAlignLse * kAlignLse;
  const std::size_t lse = new_output(op + ".logsumexp", DType::f32, {shape[0], shape[1], lse_rows}, batch_dim, false);
  // Packed documents (packing.cpp): the varlen flash kernel's causal pairs within each document,
  // or the memory-efficient kernel's whole S x S under an explicit mask, which it saves.
  const std::optional<std::size_t> mask = packed_attention_mask(op, packing, kernel, q.index);
  const BatchLinear macs = packed_attention_macs(elements(q.index), seq, sinks_and_window.window, packing, kernel);  // per query head
  const BatchLinear scores{macs.fixed / head_dim, macs.per_sample / head_dim};
  const std::int64_t dropout_forward = dropout ? kDropoutForward : 0;
  const std::int64_t dropout_backward = dropout ? kDropoutBackward : 0;
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::attention;
  f.inputs = {q.index, k.index, v.index};
  f.outputs = {y, lse};
  // The causal half of the S x S blocks (attention_macs).
  f.flops = times(macs, 2 * kFlashForwardGemms) + times(scores, kSoftmaxForward + dropout_forward);
  f.differentiable_outputs = {y};
  // derivatives.yaml: _scaled_dot_product_flash_attention's and _scaled_dot_product_efficient_
  // attention's backward take query, key, value, output and logsumexp (and, with dropout, the
  // philox seed and offset: 0-dim int64 tensors made without a device, so host memory, left out).
  f.saved = {q.index, k.index, v.index, y, lse};
  if (mask) {
    // flash_attn_varlen_func saves cu_seqlens; _scaled_dot_product_efficient_attention its attn_bias.
    f.inputs.push_back(*mask);
    f.saved.push_back(*mask);
  }
  f.grads = {{q.index, {}}, {k.index, {}}, {v.index, {}}};
  if (sinks_and_window.sinks) {
    // The sink logits join every row's softmax: the kernel reads them and returns their
    // gradient (one value per head, from the rows' probabilities it recomputes).
    const std::size_t sinks = sinks_and_window.sinks->index;
    f.inputs.push_back(sinks);
    f.saved.push_back(sinks);
    f.grads.push_back({sinks, {}});
  }
  f.backward_flops = times(macs, 2 * kFlashBackwardGemms) + times(scores, kSoftmaxBackward + dropout_backward);
  f.backward_kind = OpKind::attention;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::constant_op(const std::string& name, Value input, DType dtype, std::vector<std::int64_t> shape) {
  return constant_op(name, std::vector<Value>{input}, dtype, std::move(shape));
}

Value NetworkBuilder::constant_op(const std::string& name, const std::vector<Value>& inputs, DType dtype,
                                  std::vector<std::int64_t> shape) {
  if (inputs.empty()) throw std::logic_error(name + ": no input");
  std::vector<std::size_t> indices;
  for (const Value input : inputs) {
    if (requires_grad(input.index)) throw std::logic_error(name + ": an input requires a gradient");
    indices.push_back(input.index);
  }
  return {untracked_kernel(name, std::move(indices), dtype, std::move(shape), tensors_[inputs.front().index].batch_dim)};
}

std::size_t NetworkBuilder::untracked_kernel(const std::string& name, std::vector<std::size_t> inputs, DType dtype,
                                             std::vector<std::int64_t> sample_shape, std::optional<std::size_t> batch_dim) {
  const std::string op = unique_op_name(name);
  const std::size_t y = new_output(op + ".out", dtype, std::move(sample_shape), batch_dim, false);
  emit({op, Phase::forward, OpKind::elementwise, std::move(inputs), {y}, {}, {}, elements(y)});
  return y;
}

Value NetworkBuilder::data_sized_op(const std::string& name, const std::vector<Value>& inputs, DType dtype,
                                    std::vector<std::int64_t> sample_shape) {
  const Value output = constant_op(name, inputs, dtype, std::move(sample_shape));
  synchronize_host();
  return output;
}

void NetworkBuilder::synchronize_host() {
  if (ops_.empty()) throw std::logic_error("synchronize_host: no op emitted yet");
  ops_.back().host_sync = true;
}

Value NetworkBuilder::index_select(const std::string& name, Value x, Value index) { return rows_by_index(name, x, index, false); }

Value NetworkBuilder::gather_rows(const std::string& name, Value x, Value index) {
  expect_rank(x, 2, name);
  return rows_by_index(name, x, index, true);
}

Value NetworkBuilder::rows_by_index(const std::string& name, Value x, Value index, bool saves_input) {
  expect_rank(index, 1, name);
  if (requires_grad(index.index) || tensors_[index.index].dtype != DType::i64 || sample_shape(x).empty()) {
    throw std::logic_error(name + ": needs a tensor and an int64 index without gradient");
  }
  const std::string op = unique_op_name(name);
  std::vector<std::int64_t> shape = sample_shape(x);
  shape.front() = dim(index, 0);
  // Not on any autocast list: the rows keep x's dtype.
  const std::size_t y = new_output(op + ".out", tensors_[x.index].dtype, shape, tensors_[index.index].batch_dim,
                                   requires_grad(x.index));
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::gather;  // bytes, no FLOPs (like an embedding lookup)
  f.inputs = {x.index, index.index};
  f.outputs = {y};
  f.differentiable_outputs = {y};
  // derivatives.yaml, index_select: self: index_select_backward(grad, self.sizes(), dim, index),
  // so IndexSelectBackward0 saves the index and x's sizes, not x; GatherBackward0 saves x too.
  f.saved = {index.index};
  if (saves_input) f.kept = {x.index};
  f.grads = {{x.index, {}}};
  // index_select_backward: zeros(self.sizes()).index_add_(dim, index, grad), one add per
  // gathered element; its output is a new tensor of x's shape.
  f.backward_flops = elements(y);
  f.backward_kind = OpKind::scatter;
  record(std::move(f));
  return {y};
}

// ---- Loss ------------------------------------------------------------------------------------

Value NetworkBuilder::cross_entropy(const std::string& name, Value logits, Value labels) {
  expect_rank(logits, 2, name);
  expect_rank(labels, 1, name);
  if (dim(labels, 0) != dim(logits, 0) || tensors_[labels.index].dtype != DType::i64) {
    throw std::logic_error(name + ": labels do not match the logits");
  }
  const auto batch_dim = tensors_[logits.index].batch_dim;

  // cross_entropy is on autocast's fp32 list: 16-bit logits are cast to fp32 first. Megatron's
  // cross-entropy (`mixed`) upcasts too, so the saved log-probabilities are fp32 there; a
  // .half()/.bfloat16() model without autocast computes them in its own dtype.
  const std::string softmax_op = unique_op_name(name + ".log_softmax");
  logits = {autocast_fp32(softmax_op, logits.index)};
  const DType dtype = precision_ == Precision::mixed ? DType::f32 : tensors_[logits.index].dtype;
  const std::size_t log_probs = new_output(softmax_op + ".out", dtype, sample_shape(logits), batch_dim, true);
  ForwardOp s;
  s.name = softmax_op;
  s.kind = OpKind::loss;
  s.inputs = {logits.index};
  s.outputs = {log_probs};
  s.flops = times(elements(log_probs), kLogSoftmaxForward);
  s.differentiable_outputs = {log_probs};
  s.saved = {log_probs};  // LogSoftmaxBackward0 saves the result ...
  // ... and, up to PyTorch 1.10, the input as well (_log_softmax_backward_data(grad, result,
  // dim, self); pytorch/pytorch issue 64000, pull request 65242): the fp32 cast copy under
  // autocast, the logits themselves otherwise (in `mixed`, the 16-bit logits: the upcast that
  // Megatron's loss makes is not a tensor of the trace).
  if (softmax_saves_input_) s.saved.push_back(logits.index);
  s.grads = {{logits.index, {}}};
  s.backward_flops = times(elements(log_probs), kLogSoftmaxBackward);
  s.backward_kind = OpKind::loss;
  record(std::move(s));

  const std::string nll_op = unique_op_name(name + ".nll_loss");
  // nll_loss's output and total_weight take the input's dtype (self.options()).
  const std::size_t loss = new_output(nll_op + ".out", dtype, {}, std::nullopt, true);
  const std::size_t total_weight = new_output(nll_op + ".total_weight", dtype, {}, std::nullopt, false);
  ForwardOp n;
  n.name = nll_op;
  n.kind = OpKind::loss;
  n.inputs = {log_probs, labels.index};
  n.outputs = {loss, total_weight};
  n.flops = elements(labels.index);  // gather and sum one log-probability per row
  n.differentiable_outputs = {loss};
  n.saved = {labels.index, total_weight};  // NllLossBackward0 saves target and total_weight
  n.grads = {{log_probs, {}}};
  n.backward_flops = elements(labels.index);  // scatter -g/total_weight into a zero tensor
  n.backward_kind = OpKind::loss;
  record(std::move(n));
  return {loss};
}

// ---- finish ----------------------------------------------------------------------------------

traces::Trace NetworkBuilder::finish(Value root, std::map<std::string, std::string> metadata) {
  if (finished_) throw std::logic_error("NetworkBuilder: already finished");
  for (const BackwardRecipe& r : recipes_) {
    for (const GradSpec& spec : r.grads) {
      if (tensors_[spec.target].role == TensorRole::weight) ++pending_gradients_[spec.target];
    }
  }
  seed_backward(root.index);
  // A recipe whose output's gradient a deferred weight-gradient part will make (autocast's cast of
  // a column-parallel linear's weight: its backward casts the weight gradient to fp32) waits for
  // that part, and runs right after it, as autograd runs a node once its inputs' gradients are in.
  std::map<std::size_t, std::vector<const BackwardRecipe*>> waiting;  // collective op -> recipes
  const auto deferred_collective = [&](const BackwardRecipe& r) -> std::optional<std::size_t> {
    for (const auto& [collective, parts] : deferred_weight_grads_) {
      for (const BackwardRecipe& part : parts) {
        for (const GradSpec& g : part.grads) {
          if (std::find(r.differentiable_outputs.begin(), r.differentiable_outputs.end(), g.target) != r.differentiable_outputs.end()) return collective;
        }
      }
    }
    return std::nullopt;
  };
  for (auto recipe = recipes_.rbegin(); recipe != recipes_.rend(); ++recipe) {
    if (splits_backward(*recipe)) {
      auto [input_part, weight_part] = split_backward(*recipe);
      emit_backward(input_part);
      deferred_weight_grads_[recipe->split->collective_op].push_back(std::move(weight_part));
    } else if (const auto collective = deferred_collective(*recipe)) {
      waiting[*collective].push_back(&*recipe);
    } else {
      emit_backward(*recipe);
    }
    if (const auto deferred = deferred_weight_grads_.find(recipe->forward_op); deferred != deferred_weight_grads_.end()) {
      emit_overlapped_weight_grads(deferred->second);
      deferred_weight_grads_.erase(deferred);
      for (const BackwardRecipe* late : waiting[recipe->forward_op]) emit_backward(*late);
      waiting.erase(recipe->forward_op);
    }
  }
  if (!waiting.empty()) throw std::logic_error("NetworkBuilder: a backward op waits for a weight gradient that no collective's backward makes");
  keep_gradients_in_main_grad();  // before the exchanges below view the gradients
  if (!deferred_weight_grads_.empty()) {
    throw std::logic_error("NetworkBuilder: a column-parallel linear's input collective has no backward op");
  }
  emit_sequence_parallel_gradient_all_reduce();
  emit_embedding_gradient_exchange();
  emit_optimizer_steps();
  assign_storage_roles();
  finished_ = true;
  return build_trace(std::move(metadata));
}

void NetworkBuilder::seed_backward(std::size_t root) {
  if (!requires_grad(root)) throw std::logic_error("NetworkBuilder: the backward pass's root must require grad");
  const TensorRecord record = tensors_[root];  // a copy: new tensors below may move the records
  if (sent_output_ == root) {
    // A pipeline stage short of the last: the gradient of its output arrives from the next stage
    // (recv_backward) into a new tensor of the output's shape (p2p_communication.py:343-349,
    // create_tensor_recv_next), and autograd starts from it (backward_step,
    // torch.autograd.backward(output_tensor, grad_tensors=output_tensor_grad), schedules.py:581).
    const std::size_t grad = new_output(record.name + ".grad", record.dtype, record.sample_shape, record.batch_dim, false);
    const std::size_t op = emit({"recv_backward", Phase::backward, OpKind::communication, {}, {grad}, {}, {}, {}});
    communications_.emplace(op, traces::Communication{traces::CommunicationKind::recv, traces::ParallelGroup::pipeline});
    add_gradient(root, grad, op);
    return;
  }
  if (!record.sample_shape.empty()) throw std::logic_error("NetworkBuilder: the loss must be a scalar (or the stage's sent output)");
  // loss.backward() starts from a gradient of ones (torch.ones_like(loss)).
  const std::size_t seed = new_output(record.name + ".grad", record.dtype, {}, std::nullopt, false);
  add_gradient(root, seed, emit({"backward.seed", Phase::backward, OpKind::elementwise, {}, {seed}, {}, {}, {}}));
}

bool NetworkBuilder::splits_backward(const BackwardRecipe& recipe) const {
  // Both gradients wanted (the input's, which the collective reduces, and a weight's), and no
  // optimizer step in the backward pass, which would follow the weight gradient's op at once.
  if (!recipe.split || optimizer_in_backward_) return false;
  const auto is_input = [&](const GradSpec& g) { return g.target == recipe.split->input; };
  return std::any_of(recipe.grads.begin(), recipe.grads.end(), is_input) &&
         !std::all_of(recipe.grads.begin(), recipe.grads.end(), is_input);
}

std::pair<NetworkBuilder::BackwardRecipe, NetworkBuilder::BackwardRecipe> NetworkBuilder::split_backward(
    const BackwardRecipe& recipe) const {
  const SplitBackward& split = *recipe.split;
  // grad_input = g W reads the weight; grad_weight = gᵀ x (and the bias's row sum) reads the
  // input, under sequence parallelism gathered again from the saved shard before the first op
  // (the all_gather overlaps the input gradient's GEMM, layers.py:667-680).
  BackwardRecipe input_part = recipe;
  input_part.suffix = ".backward_input";
  std::erase_if(input_part.grads, [&](const GradSpec& g) { return g.target != split.input; });
  std::erase(input_part.reads, split.saved_input);
  input_part.flops = split.input_flops;
  BackwardRecipe weight_part = recipe;
  weight_part.suffix = ".backward_weight";
  std::erase_if(weight_part.grads, [&](const GradSpec& g) { return g.target == split.input; });
  std::erase(weight_part.reads, split.weight);
  weight_part.flops = {recipe.flops.fixed - split.input_flops.fixed, recipe.flops.per_sample - split.input_flops.per_sample};
  weight_part.split.reset();
  return {std::move(input_part), std::move(weight_part)};
}

std::int64_t NetworkBuilder::ops_beside(std::size_t collective, std::size_t end) const {
  // traces::Communication::overlap counts the ops that are not themselves overlapped collectives
  // or rings (those run on streams of their own).
  std::int64_t beside = 0;
  for (std::size_t o = collective + 1; o < end; ++o) {
    const auto c = communications_.find(o);
    if (c == communications_.end() || (c->second.overlap == 0 && c->second.ring == 0)) ++beside;
  }
  return beside;
}

void NetworkBuilder::emit_overlapped_weight_grads(const std::vector<BackwardRecipe>& weight_parts) {
  // The collective just emitted (the input gradient's all_reduce or reduce_scatter) runs beside
  // the weight-gradient GEMMs that follow (layers.py:694-711, queued before them under
  // CUDA_DEVICE_MAX_CONNECTIONS=1, :696); the op after them waits for it.
  const std::size_t collective = ops_.size() - 1;
  const auto emitted = communications_.find(collective);
  if (emitted == communications_.end()) throw std::logic_error(ops_[collective].name + ": expected the input gradient's collective");
  emitted->second.overlap = static_cast<std::int64_t>(weight_parts.size());
  // Sequence parallelism: the all_gather of the saved input runs beside the ops from it to the
  // collective (the input-gradient GEMMs, and the sums of their gradients when several linears
  // share the input); the first weight-gradient GEMM, which reads what it gathers, waits for it.
  if (const auto& regather = weight_parts.front().regather) {
    const std::size_t gather = regather_ops_.at(regather->first);
    if (const std::int64_t beside = ops_beside(gather, collective); beside > 0) communications_.at(gather).overlap = beside;
  }
  for (const BackwardRecipe& part : weight_parts) emit_backward(part);
}

void NetworkBuilder::emit_backward(const BackwardRecipe& recipe) {
  const std::string forward_name = ops_[recipe.forward_op].name;
  OpRecord op;
  op.name = forward_name + recipe.suffix;
  op.phase = Phase::backward;
  op.kind = recipe.kind;
  op.flops = recipe.flops;
  for (const std::size_t output : recipe.differentiable_outputs) {
    if (const auto grad = tensors_[output].grad) op.inputs.push_back(*grad);
  }
  if (op.inputs.empty()) {
    throw std::logic_error(forward_name + ": its output does not reach the loss");
  }
  op.inputs.insert(op.inputs.end(), recipe.reads.begin(), recipe.reads.end());
  op.unread = recipe.unread;
  if (recipe.regather) {
    // Sequence parallelism: the backward GEMM reads the gathered input again, all-gathered
    // from the saved shard first (once for the linears that share it).
    const std::size_t gathered = regathered_input(*recipe.regather);
    std::replace(op.inputs.begin(), op.inputs.end(), recipe.regather->first, gathered);
  }
  if (recipe.context_exchange) {
    // Context parallelism: the ring's K,V and dK,dV blocks, or the all-gather of K,V again
    // (context_parallel_attention), before the attention's backward kernel, which reads them.
    const BackwardRecipe::ContextExchange& exchange = *recipe.context_exchange;
    std::vector<std::size_t> written;
    for (const auto& [suffix, like] : exchange.like) {
      const TensorRecord model = tensors_[like];  // a copy: new_output may move the records
      written.push_back(new_output(exchange.name + suffix, model.dtype, model.sample_shape, model.batch_dim, false));
    }
    communications_.emplace(emit({exchange.name, Phase::backward, OpKind::communication, exchange.inputs, written, {}, {}, {}}),
                            exchange.communication);
    for (const std::size_t replaced : exchange.replaced) std::erase(op.inputs, replaced);
    // The gathered K,V is the kernel's input. The ring's receive buffers are not: the ring runs
    // beside the kernel (traces::Communication::ring) and holds them while it runs.
    if (exchange.communication.ring == 0) op.inputs.insert(op.inputs.end(), written.begin(), written.end());
  }

  std::vector<std::pair<std::size_t, std::size_t>> produced;  // (target, gradient)
  for (const GradSpec& spec : recipe.grads) {
    // A copy: adding tensors below may move the records.
    const TensorRecord target = tensors_[spec.target];
    const std::string name = target.name + ".grad" +
                             (target.partial_grads == 0 ? "" : "." + std::to_string(target.partial_grads));
    std::size_t grad = 0;
    if (const auto computed = recipe.computed_in.find(spec.target); computed != recipe.computed_in.end()) {
      grad = new_view(name, computed->second, target.sample_shape, target.batch_dim);
      op.aliases.push_back(grad);
    } else if (spec.alias_of) {
      const auto source = tensors_[*spec.alias_of].grad;
      if (!source) throw std::logic_error(forward_name + ": aliased output has no gradient");
      grad = new_view(name, *source, target.sample_shape, target.batch_dim);
      op.aliases.push_back(grad);
    } else if (const auto reduced = recipe.reduced_in_place.find(spec.target); reduced != recipe.reduced_in_place.end()) {
      const auto source = tensors_[reduced->second].grad;
      if (!source) throw std::logic_error(forward_name + ": the output reduced in place has no gradient");
      grad = new_view(name, *source, target.sample_shape, target.batch_dim);
    } else {
      TensorRecord record;
      record.name = name;
      record.dtype = target.dtype;
      record.sample_shape = target.sample_shape;
      record.batch_dim = target.batch_dim;
      // A weight's first gradient becomes its .grad (kept to the optimizer step); further
      // partial gradients (a tied weight) are temporaries added into it (add_gradient, which
      // hands the role on to a new sum when gradients are not accumulated in place).
      record.role = target.role == TensorRole::weight && !target.grad ? TensorRole::gradient
                                                                      : TensorRole::temporary;
      grad = add_tensor(std::move(record));
    }
    op.outputs.push_back(grad);
    produced.emplace_back(spec.target, grad);
  }
  // Workspace the backward kernel allocates and frees (QLoRA's dequantised weight).
  op.outputs.insert(op.outputs.end(), recipe.scratch.begin(), recipe.scratch.end());
  const std::size_t index = emit(std::move(op));
  if (recipe.communication) communications_.emplace(index, *recipe.communication);
  for (const auto& [target, grad] : produced) {
    add_gradient(target, grad, index);
    if (const auto pending = pending_gradients_.find(target); pending != pending_gradients_.end() && --pending->second == 0) {
      weight_gradient_complete(target);
    }
  }
}

void NetworkBuilder::weight_gradient_complete(std::size_t weight) {
  if (main_grad_weights_.contains(weight)) {
    // Megatron's DDP hook (add_into_main_grad): main_grad in its dtype. The add reads the 16-bit
    // gradient and main_grad's running sum and writes main_grad, in every micro-batch: the
    // buffer is Megatron's own, allocated at set-up and zeroed at the start of each iteration
    // (zero_grad_buffer), so even the first micro-batch's add_ reads it (`accumulated`).
    const std::size_t grad = *tensors_[weight].grad;
    TensorRecord record;
    record.name = tensors_[weight].name + ".main_grad";
    record.dtype = *main_grad_dtype_;
    record.sample_shape = tensors_[weight].sample_shape;
    record.role = TensorRole::gradient;
    // `param.grad = None`: the 16-bit gradient is freed after the add, its last reader.
    if (tensors_[storage(grad)].role == TensorRole::gradient) tensors_[storage(grad)].role = TensorRole::temporary;
    const std::size_t main = add_tensor(std::move(record));
    OpRecord add{tensors_[weight].name + ".main_grad.add_", Phase::backward, OpKind::elementwise, {grad}, {main}, {}, {}, elements(main)};
    add.accumulated = {main};
    emit(std::move(add));
    tensors_[weight].grad = main;
  }
  // torchtune's optimizer_in_bwd: the post-accumulate-grad hook runs once the weight's .grad is
  // complete. The step frees the gradient (optimizer.zero_grad() sets it to None), which the
  // trace says through its last reader being this op (metadata optimizer_in_backward: the
  // gradient is not held to the end of the iteration).
  if (optimizer_in_backward_) emit_step(weight);
}

void NetworkBuilder::keep_gradients_in_main_grad() {
  // Megatron-LM's DDP keeps every gradient in its main_grad buffer, fp32 for a bf16 model
  // (megatron/training/arguments.py at core_v0.6.0 forces --accumulate-allreduce-grads-in-fp32
  // with --bf16; an fp16 model keeps fp16 unless asked): Transformer Engine's linears and the
  // output layer write their weight gradients there from the GEMM (gradient accumulation fusion:
  // an fp32 output), the other weights' are added by the hook (add_into_main_grad, already fp32).
  // So a bf16 weight gradient is its fp32 share of the buffer: what the GEMMs write, what the
  // finalize collectives exchange and what the optimizer reads.
  if (!main_grad_dtype_) return;
  const auto narrower = [&](DType d) { return traces::is_floating(d) && traces::element_size(d) < traces::element_size(*main_grad_dtype_); };
  std::vector<bool> widen(tensors_.size(), false);
  for (const TensorRecord& t : tensors_) {
    if (t.role != TensorRole::weight || t.view_of || !t.grad) continue;
    const std::size_t root = storage(*t.grad);
    if (tensors_[root].role == TensorRole::gradient && narrower(tensors_[root].dtype)) widen[root] = true;
  }
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    if (widen[tensors_[i].view_of.value_or(i)]) tensors_[i].dtype = *main_grad_dtype_;
  }
}

void NetworkBuilder::add_into_main_grad(Value weight) {
  if (tensors_.at(weight.index).role != TensorRole::weight || tensors_[weight.index].view_of) {
    throw std::logic_error(tensors_[weight.index].name + ": main_grad belongs to a parameter");
  }
  if (optimizer_in_backward_ || !main_grad_dtype_) {
    throw std::logic_error(tensors_[weight.index].name + ": main_grad needs Megatron's layers (set_megatron_main_grad) and no step in the backward pass");
  }
  if (requires_grad(weight.index)) main_grad_weights_.insert(weight.index);
}

void NetworkBuilder::add_gradient(std::size_t target, std::size_t grad, std::size_t producer_op) {
  const int partial = tensors_[target].partial_grads++;
  const auto previous = tensors_[target].grad;
  if (!previous) {
    tensors_[target].grad = grad;
    return;
  }
  // Autograd's InputBuffer sums the gradients reaching one tensor as they arrive, in the
  // engine's order, which the reverse walk over the forward ops reproduces
  // (torch/csrc/autograd/input_buffer.cpp, accumulate(); ModelSpec::accumulate_gradients_in_place).
  const std::string base = tensors_[target].name + ".grad";
  const std::string sum_name = base + ".sum" + std::to_string(partial);
  std::size_t sum = 0;
  if (accumulate_gradients_in_place_) {
    // PyTorch >= 2.0: `buffer[pos] = old_var.add_(var)` -- the first gradient's storage
    // holds the sum (for a weight, that storage becomes its .grad).
    sum = new_view(sum_name, *previous, tensors_[target].sample_shape, tensors_[target].batch_dim);
  } else {
    // PyTorch <= 1.13: `buffer[pos] = old_var + var` -- a new tensor; the buffer drops both
    // parts, so each is freed after this op unless something else reads it later. A weight's
    // .grad is then the last sum, and the earlier partial sums are temporaries.
    TensorRecord record;
    record.name = sum_name;
    record.dtype = tensors_[*previous].dtype;
    record.sample_shape = tensors_[target].sample_shape;
    record.batch_dim = tensors_[target].batch_dim;
    record.role = TensorRole::temporary;
    if (tensors_[storage(*previous)].role == TensorRole::gradient) {
      record.role = TensorRole::gradient;
      tensors_[storage(*previous)].role = TensorRole::temporary;
    }
    sum = add_tensor(std::move(record));
  }
  emit({base + ".accumulate" + std::to_string(partial), ops_[producer_op].phase, OpKind::elementwise,
        {*previous, grad}, {sum}, {}, {}, elements(sum)});
  tensors_[target].grad = sum;
}

void NetworkBuilder::emit_optimizer_steps() {
  // Stepped in the backward pass already (optimizers.cpp), or optimizers with their own kernels:
  // one op per weight.
  if (optimizer_in_backward_ || !is_torch_optimizer(optimizer_)) {
    for (const std::size_t weight : weights_) {
      if (!optimizer_in_backward_ || !pending_gradients_.contains(weight)) emit_step(weight);
    }
    return;
  }
  // The state of one weight, created as torch.optim does on its first step (this is a later,
  // steady-state iteration: the momentum buffer exists, so SGD's first-step clone is not made).
  struct Step {
    std::size_t weight = 0;
    std::size_t grad = 0;
    std::optional<std::size_t> master;  // `mixed` only
    std::vector<std::size_t> states;    // momentum_buffer | exp_avg, exp_avg_sq
    std::size_t target() const { return master.value_or(weight); }  // what the update math runs on
  };
  const auto new_state = [&](std::size_t weight, const std::string& suffix, DType dtype, TensorRole role) {
    TensorRecord record;
    record.name = tensors_[weight].name + "." + suffix;
    record.dtype = dtype;
    record.sample_shape = tensors_[weight].sample_shape;
    record.role = role;
    return add_tensor(std::move(record));
  };
  std::vector<Step> steps;
  for (const std::size_t weight : weights_) {
    const auto grad = tensors_[weight].grad;
    if (!grad) throw std::logic_error(tensors_[weight].name + ": the weight gets no gradient");
    Step step;
    step.weight = weight;
    step.grad = *grad;
    // Mixed precision keeps an fp32 master copy that the update applies to, then copies back
    // to the 16-bit weight (Micikevicius et al. 2018; ZeRO's 2 + 2 + 12 bytes per parameter).
    if (precision_ == Precision::mixed) step.master = new_state(weight, "master", DType::f32, TensorRole::optimizer_state);
    switch (optimizer_) {
      case Optimizer::sgd: break;
      case Optimizer::momentum:
        step.states.push_back(new_state(weight, "momentum_buffer", state_dtype(weight), TensorRole::optimizer_state));
        break;
      case Optimizer::adam:
      case Optimizer::adamw:
        step.states.push_back(new_state(weight, "exp_avg", state_dtype(weight), TensorRole::optimizer_state));
        step.states.push_back(new_state(weight, "exp_avg_sq", state_dtype(weight), TensorRole::optimizer_state));
        break;
      default: throw std::logic_error("emit_optimizer_steps: not a torch.optim optimizer");
    }
    steps.push_back(std::move(step));
  }

  const bool adam_like = optimizer_ == Optimizer::adam || optimizer_ == Optimizer::adamw;
  const auto whole_update = [&](const Step& step) {
    OpRecord op;
    op.name = "optimizer." + tensors_[step.weight].name;
    op.phase = Phase::optimizer;
    op.kind = OpKind::optimizer_update;
    op.inputs = {step.weight, step.grad};
    if (step.master) op.inputs.push_back(*step.master);
    op.inputs.insert(op.inputs.end(), step.states.begin(), step.states.end());
    op.updated = op.inputs;
    op.updated.erase(op.updated.begin() + 1);  // all but the gradient, in place
    op.flops = times(elements(step.weight), optimizer_flops_per_element(optimizer_));
    return op;
  };

  if (!adam_like || optimizer_impl_ == OptimizerImpl::fused) {
    // SGD allocates nothing parameter-sized in any implementation with its defaults (no
    // weight decay, no Nesterov: sgd.py), and the fused kernels none at all: one update per
    // weight, in place.
    for (const Step& step : steps) emit(whole_update(step));
    return;
  }
  if (optimizer_impl_ == OptimizerImpl::for_loop) {
    // _single_tensor_adam(w): denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
    // makes sqrt(v), then the quotient while sqrt(v) is still alive; both are freed before
    // the next parameter's. (Python frees the previous denom only when the name is rebound,
    // which overlaps it with the next parameter's two for a moment: not modelled.)
    for (const Step& step : steps) {
      OpRecord op = whole_update(step);
      const std::size_t v = step.states.back();
      op.outputs.push_back(new_output(tensors_[step.weight].name + ".exp_avg_sq_sqrt", tensors_[v].dtype,
                                      tensors_[v].sample_shape, std::nullopt, false));
      op.outputs.push_back(new_output(tensors_[step.weight].name + ".denom", tensors_[v].dtype,
                                      tensors_[v].sample_shape, std::nullopt, false));
      emit(std::move(op));
    }
    return;
  }
  // _multi_tensor_adam(w): the moments are updated in place (_foreach_lerp_, _foreach_mul_,
  // _foreach_addcmul_; AdamW first decays the weights with _foreach_mul_), then
  // exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs) allocates one tensor per
  // parameter, divided and shifted in place, and all of them stay alive until
  // _foreach_addcdiv_ has updated every parameter.
  for (const Step& step : steps) {
    OpRecord op;
    op.name = "optimizer." + tensors_[step.weight].name;
    op.phase = Phase::optimizer;
    op.kind = OpKind::optimizer_update;
    op.inputs = {step.grad};
    op.inputs.insert(op.inputs.end(), step.states.begin(), step.states.end());
    op.updated = step.states;
    std::int64_t flops = kAdamMomentFlops;
    if (optimizer_ == Optimizer::adamw) {
      op.inputs.push_back(step.target());
      op.updated.push_back(step.target());
      flops += kAdamWDecayFlops;
    }
    op.flops = times(elements(step.weight), flops);
    emit(std::move(op));
  }
  OpRecord sqrt;
  sqrt.name = "optimizer._foreach_sqrt";
  sqrt.phase = Phase::optimizer;
  sqrt.kind = OpKind::elementwise;
  OpRecord update;
  update.name = "optimizer._foreach_addcdiv_";
  update.phase = Phase::optimizer;
  update.kind = OpKind::optimizer_update;
  for (const Step& step : steps) {
    const std::size_t v = step.states.back();
    const std::size_t root = new_output(tensors_[step.weight].name + ".exp_avg_sq_sqrt", tensors_[v].dtype,
                                        tensors_[v].sample_shape, std::nullopt, false);
    sqrt.inputs.push_back(v);
    sqrt.outputs.push_back(root);
    add_into(sqrt.flops, times(elements(v), kAdamDenomFlops));
    // Parameters (the master copies in `mixed`, whose 16-bit weights are written back too),
    // first moments and the denominators.
    update.inputs.push_back(step.target());
    update.updated.push_back(step.target());
    if (step.master) {
      update.inputs.push_back(step.weight);
      update.updated.push_back(step.weight);
    }
    update.inputs.push_back(step.states.front());
    update.inputs.push_back(root);
    add_into(update.flops, times(elements(step.weight), kAdamUpdateFlops));
  }
  emit(std::move(sqrt));
  emit(std::move(update));
}

void NetworkBuilder::assign_storage_roles() {
  // Roles are per storage. A storage not otherwise classified is an activation when a forward
  // op saves it or any view of it for backward, and a temporary otherwise.
  std::vector<bool> saved(tensors_.size(), false);
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i].saved) saved[storage(i)] = true;
  }
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    TensorRecord& record = tensors_[i];
    if (!record.view_of && record.role == TensorRole::temporary && saved[i]) {
      record.role = TensorRole::activation;
    }
  }
  for (TensorRecord& record : tensors_) {
    if (record.view_of) record.role = tensors_[*record.view_of].role;
  }
}

traces::Trace NetworkBuilder::build_trace(std::map<std::string, std::string> metadata) {
  // The records are not used after this: names, shapes and index lists are moved, not copied.
  // The ops come first, as their byte counts read the tensor records.
  std::vector<traces::Op> ops;
  ops.reserve(ops_.size());
  for (std::size_t i = 0; i < ops_.size(); ++i) {
    OpRecord& record = ops_[i];
    traces::Op op;
    op.id = i;
    op.phase = record.phase;
    op.kind = record.kind;
    op.flops = record.flops;
    // Bytes moved: the op's input and output tensors, except that views move no data and
    // in-place updates write the tensors they update.
    if (record.kind != OpKind::view) {
      for (const std::size_t input : record.inputs) {
        if (std::find(record.unread.begin(), record.unread.end(), input) == record.unread.end()) add_into(op.bytes_read, bytes(input));
      }
      for (const std::size_t output : record.outputs) {
        if (std::find(record.aliases.begin(), record.aliases.end(), output) == record.aliases.end()) {
          add_into(op.bytes_written, bytes(output));
        }
      }
      for (const std::size_t updated : record.updated) add_into(op.bytes_written, bytes(updated));
      for (const std::size_t sum : record.accumulated) add_into(op.bytes_read, bytes(sum));
    }
    if (const auto communication = communications_.find(i); communication != communications_.end()) {
      op.communication = communication->second;
    }
    op.host_sync = record.host_sync;
    op.name = std::move(record.name);
    op.inputs = std::move(record.inputs);
    op.outputs = std::move(record.outputs);
    ops.push_back(std::move(op));
  }

  std::vector<traces::Tensor> tensors;
  tensors.reserve(tensors_.size());
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    TensorRecord& record = tensors_[i];
    traces::Tensor tensor;
    tensor.id = i;
    tensor.name = std::move(record.name);
    tensor.dtype = record.dtype;
    tensor.shape = std::move(record.sample_shape);
    if (record.batch_dim) tensor.shape.at(*record.batch_dim) = multiply_or_throw(tensor.shape.at(*record.batch_dim), batch_size_, kSizeArithmetic);
    tensor.role = record.role;
    tensor.batch_dim = record.batch_dim;
    tensor.view_of = record.view_of;
    tensors.push_back(std::move(tensor));
  }

  metadata["source"] = "zoo";
  metadata["model"] = model_;
  metadata["precision"] = std::string(to_string(precision_));
  metadata["optimizer"] = std::string(to_string(optimizer_));
  if (is_torch_optimizer(optimizer_)) metadata["optimizer_impl"] = std::string(to_string(optimizer_impl_));
  if (optimizer_in_backward_) metadata["optimizer_in_backward"] = "true";
  return traces::Trace(model_, batch_size_, std::move(tensors), std::move(ops), std::move(metadata));
}

}  // namespace comptrain::zoo::detail

#include "network_builder.hpp"

#include <algorithm>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <utility>

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

// Optimizer FLOPs per parameter element (PyTorch's update rules, no weight decay).
std::int64_t optimizer_flops_per_element(Optimizer optimizer) {
  switch (optimizer) {
    case Optimizer::sgd: return 2;       // w -= lr * g
    case Optimizer::momentum: return 4;  // buf = mu * buf + g; w -= lr * buf
    case Optimizer::adam: return 13;     // m (3), v (4), sqrt(v) / bc2 + eps (3), w -= a * m / d (3)
  }
  return 0;
}

BatchLinear times(BatchLinear value, std::int64_t factor) {
  return {value.fixed * factor, value.per_sample * factor};
}
BatchLinear operator+(BatchLinear a, const BatchLinear& b) {
  a += b;
  return a;
}

std::int64_t product(const std::vector<std::int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
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

NetworkBuilder::NetworkBuilder(std::string model, std::int64_t batch_size, Precision precision,
                               Optimizer optimizer)
    : model_(std::move(model)), batch_size_(batch_size), precision_(precision), optimizer_(optimizer) {
  if (batch_size_ < 1) throw std::logic_error("NetworkBuilder: batch size must be >= 1");
}

DType NetworkBuilder::compute_dtype() const {
  return precision_ == Precision::mixed ? DType::f16 : DType::f32;
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
  TensorRecord record;
  record.name = name;
  record.dtype = compute_dtype();
  record.sample_shape = std::move(shape);
  record.role = TensorRole::weight;
  record.requires_grad = true;
  const std::size_t index = add_tensor(std::move(record));
  weights_.push_back(index);
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
  for (const std::size_t tensor : op.saved) tensors_.at(tensor).saved = true;
  BackwardRecipe recipe;
  recipe.forward_op = emit({op.name, Phase::forward, op.kind, op.inputs, op.outputs, op.updated,
                            op.aliases, op.flops});
  recipe.differentiable_outputs = std::move(op.differentiable_outputs);
  recipe.reads = concat(std::move(op.saved), op.reads);
  for (const GradSpec& grad : op.grads) {
    if (requires_grad(grad.target)) recipe.grads.push_back(grad);
  }
  if (recipe.grads.empty()) {
    // Nothing to differentiate would leave the op without a backward op and its saved
    // tensors unread: a mistake in a model definition.
    throw std::logic_error(op.name + ": no input or weight requires a gradient");
  }
  recipe.flops = op.backward_flops;
  recipe.kind = op.backward_kind;
  recipes_.push_back(std::move(recipe));
}

// ---- Convolutional layers ----------------------------------------------------------------

Value NetworkBuilder::conv2d(const std::string& name, Value x, std::int64_t out_channels,
                             std::int64_t kernel, std::int64_t stride, std::int64_t padding, bool bias) {
  expect_rank(x, 4, name);
  const std::int64_t in_channels = dim(x, 1);
  const std::int64_t out_h = window_output(dim(x, 2), kernel, stride, padding, name);
  const std::int64_t out_w = window_output(dim(x, 3), kernel, stride, padding, name);
  const std::string op = unique_op_name(name);
  const Value weight = parameter(name + ".weight", {out_channels, in_channels, kernel, kernel});
  std::vector<std::size_t> biases;  // zero or one
  if (bias) biases.push_back(parameter(name + ".bias", {out_channels}).index);
  const std::size_t y = new_output(op + ".out", compute_dtype(), {dim(x, 0), out_channels, out_h, out_w},
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
  // Running statistics stay fp32 in mixed precision (cuDNN requires it for 16-bit inputs).
  const Value running_mean = buffer(name + ".running_mean", DType::f32, {channels});
  const Value running_var = buffer(name + ".running_var", DType::f32, {channels});
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
  const Value weight = parameter(name + ".weight", {out_features, dim(x, -1)});
  const std::optional<Value> b = bias ? std::optional(parameter(name + ".bias", {out_features})) : std::nullopt;
  return linear(name, x, weight, b);
}

Value NetworkBuilder::linear(const std::string& name, Value x, Value weight, std::optional<Value> bias) {
  const std::int64_t in_features = dim(x, -1);
  if (sample_shape(weight).size() != 2 || dim(weight, 1) != in_features) {
    throw std::logic_error(name + ": weight does not match the input features");
  }
  const std::int64_t out_features = dim(weight, 0);
  const std::string op = unique_op_name(name);
  std::vector<std::int64_t> shape = sample_shape(x);
  shape.back() = out_features;
  const std::size_t y = new_output(op + ".out", compute_dtype(), shape, tensors_[x.index].batch_dim, true);
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
  f.saved = {x.index, weight.index};
  f.grads = {{x.index, {}}, {weight.index, {}}};
  if (bias) f.grads.push_back({bias->index, {}});
  // grad_input = g W and grad_weight = gᵀ x are one GEMM each, as large as the forward one.
  f.backward_flops = times(macs, requires_grad(x.index) ? 4 : 2) + bias_flops;
  f.backward_kind = OpKind::linear;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::relu_(const std::string& name, Value x) {
  // In place: the output is the input's storage, written again. ReluBackward0
  // (threshold_backward) saves the result.
  return elementwise(name, x, OpKind::relu, kReluForward, kReluBackward, Saves::result, true);
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
  const std::size_t y = new_output(op + ".out", tensors_[a.index].dtype, sample_shape(a),
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
    if (operand.sample_shape != tensors_[y].sample_shape) {
      throw std::logic_error(f.name + ": operands of different shapes");
    }
    if (operand.batch_dim != tensors_[y].batch_dim) {
      grad.alias_of.reset();
      if (requires_grad(grad.target)) {
        f.backward_flops += elements(y);
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
  const auto batch_dim = tensors_[x.index].batch_dim;
  const std::size_t y = new_output(op + ".out", tensors_[x.index].dtype, sample_shape(x), batch_dim, true);
  // One fp32 mean and reciprocal standard deviation per normalised row, whatever the precision.
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
  return elementwise(name, x, OpKind::softmax, kSoftmaxForward, kSoftmaxBackward, Saves::result, false);  // SoftmaxBackward0
}

Value NetworkBuilder::elementwise(const std::string& name, Value x, OpKind kind, std::int64_t forward_flops,
                                  std::int64_t backward_flops, Saves saves, bool in_place) {
  const std::string op = unique_op_name(name);
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
  f.saved = {saves == Saves::input ? x.index : y};
  f.grads = {{x.index, {}}};
  f.backward_flops = times(elements(y), backward_flops);
  f.backward_kind = kind;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::matmul(const std::string& name, Value a, Value b, bool transpose_b) {
  const auto& shape_a = sample_shape(a);
  const auto& shape_b = sample_shape(b);
  if (shape_a.size() < 2 || shape_a.size() != shape_b.size() ||
      !std::equal(shape_a.begin(), shape_a.end() - 2, shape_b.begin())) {
    throw std::logic_error(name + ": operands are not batches of matrices of the same batch");
  }
  const std::int64_t inner = dim(a, -1);
  if ((transpose_b ? dim(b, -1) : dim(b, -2)) != inner) {
    throw std::logic_error(name + ": inner dimensions differ");
  }
  const std::string op = unique_op_name(name);
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
  const std::size_t y = new_output(op + ".out", compute_dtype(), shape, tensors_[ids.index].batch_dim, true);
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

Value NetworkBuilder::select_first(const std::string& name, Value x) {
  expect_rank(x, 3, name);
  const std::string op = unique_op_name(name);
  const std::size_t y = new_view(op + ".out", x.index, {dim(x, 0), dim(x, 2)}, tensors_[x.index].batch_dim);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::view;
  f.inputs = {x.index};
  f.outputs = {y};
  f.aliases = {y};
  f.differentiable_outputs = {y};
  // SelectBackward0 writes the gradient into a zero tensor of the input's shape (a copy).
  f.grads = {{x.index, {}}};
  f.backward_kind = OpKind::other;
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

  // log_softmax runs in fp32 under mixed precision (autocast's fp32 list; Megatron's
  // cross-entropy also upcasts), so its saved output is fp32 either way.
  const std::string softmax_op = unique_op_name(name + ".log_softmax");
  const std::size_t log_probs = new_output(softmax_op + ".out", DType::f32, sample_shape(logits), batch_dim, true);
  ForwardOp s;
  s.name = softmax_op;
  s.kind = OpKind::loss;
  s.inputs = {logits.index};
  s.outputs = {log_probs};
  s.flops = times(elements(log_probs), kLogSoftmaxForward);
  s.differentiable_outputs = {log_probs};
  s.saved = {log_probs};  // LogSoftmaxBackward0 saves the result
  s.grads = {{logits.index, {}}};
  s.backward_flops = times(elements(log_probs), kLogSoftmaxBackward);
  s.backward_kind = OpKind::loss;
  record(std::move(s));

  const std::string nll_op = unique_op_name(name + ".nll_loss");
  const std::size_t loss = new_output(nll_op + ".out", DType::f32, {}, std::nullopt, true);
  const std::size_t total_weight = new_output(nll_op + ".total_weight", DType::f32, {}, std::nullopt, false);
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

traces::Trace NetworkBuilder::finish(Value loss, std::map<std::string, std::string> metadata) {
  if (finished_) throw std::logic_error("NetworkBuilder: already finished");
  if (!tensors_.at(loss.index).sample_shape.empty() || !requires_grad(loss.index)) {
    throw std::logic_error("NetworkBuilder: the loss must be a scalar that requires grad");
  }
  // loss.backward() starts from a gradient of ones (torch.ones_like(loss)).
  const std::size_t seed = new_output(tensors_[loss.index].name + ".grad", DType::f32, {}, std::nullopt, false);
  add_gradient(loss.index, seed, emit({"backward.seed", Phase::backward, OpKind::elementwise, {}, {seed}, {}, {}, {}}));

  for (auto recipe = recipes_.rbegin(); recipe != recipes_.rend(); ++recipe) emit_backward(*recipe);
  for (const std::size_t weight : weights_) emit_optimizer_step(weight);
  assign_storage_roles();
  finished_ = true;
  return build_trace(std::move(metadata));
}

void NetworkBuilder::emit_backward(const BackwardRecipe& recipe) {
  const std::string forward_name = ops_[recipe.forward_op].name;
  OpRecord op;
  op.name = forward_name + ".backward";
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

  std::vector<std::pair<std::size_t, std::size_t>> produced;  // (target, gradient)
  for (const GradSpec& spec : recipe.grads) {
    // A copy: adding tensors below may move the records.
    const TensorRecord target = tensors_[spec.target];
    const std::string name = target.name + ".grad" +
                             (target.partial_grads == 0 ? "" : "." + std::to_string(target.partial_grads));
    std::size_t grad = 0;
    if (spec.alias_of) {
      const auto source = tensors_[*spec.alias_of].grad;
      if (!source) throw std::logic_error(forward_name + ": aliased output has no gradient");
      grad = new_view(name, *source, target.sample_shape, target.batch_dim);
      op.aliases.push_back(grad);
    } else {
      TensorRecord record;
      record.name = name;
      record.dtype = target.dtype;
      record.sample_shape = target.sample_shape;
      record.batch_dim = target.batch_dim;
      // A weight's first gradient becomes its .grad (kept to the optimizer step); further
      // partial gradients (a tied weight) are temporaries added into it.
      record.role = target.role == TensorRole::weight && !target.grad ? TensorRole::gradient
                                                                      : TensorRole::temporary;
      grad = add_tensor(std::move(record));
    }
    op.outputs.push_back(grad);
    produced.emplace_back(spec.target, grad);
  }
  const std::size_t index = emit(std::move(op));
  for (const auto& [target, grad] : produced) add_gradient(target, grad, index);
}

void NetworkBuilder::add_gradient(std::size_t target, std::size_t grad, std::size_t producer_op) {
  const int partial = tensors_[target].partial_grads++;
  const auto previous = tensors_[target].grad;
  if (!previous) {
    tensors_[target].grad = grad;
    return;
  }
  // Autograd's InputBuffer adds a further gradient into the first one in place.
  const std::string base = tensors_[target].name + ".grad";
  const std::size_t sum = new_view(base + ".sum" + std::to_string(partial), *previous,
                                   tensors_[target].sample_shape, tensors_[target].batch_dim);
  emit({base + ".accumulate" + std::to_string(partial), ops_[producer_op].phase, OpKind::elementwise,
        {*previous, grad}, {sum}, {}, {}, elements(sum)});
  tensors_[target].grad = sum;
}

void NetworkBuilder::emit_optimizer_step(std::size_t weight) {
  const auto grad = tensors_[weight].grad;
  if (!grad) throw std::logic_error(tensors_[weight].name + ": the weight gets no gradient");
  const std::string name = tensors_[weight].name;
  const auto state = [&](const std::string& suffix) {
    TensorRecord record;
    record.name = name + "." + suffix;
    record.dtype = DType::f32;
    record.sample_shape = tensors_[weight].sample_shape;
    record.role = TensorRole::optimizer_state;
    return add_tensor(std::move(record));
  };
  std::vector<std::size_t> states;
  // Mixed precision keeps an fp32 master copy that the update applies to, then copies back
  // to the 16-bit weight (Micikevicius et al. 2018; ZeRO's 2 + 2 + 12 bytes per parameter).
  if (precision_ == Precision::mixed) states.push_back(state("master"));
  switch (optimizer_) {
    case Optimizer::sgd: break;
    case Optimizer::momentum: states.push_back(state("momentum_buffer")); break;
    case Optimizer::adam:
      states.push_back(state("exp_avg"));
      states.push_back(state("exp_avg_sq"));
      break;
  }
  OpRecord op;
  op.name = "optimizer." + name;
  op.phase = Phase::optimizer;
  op.kind = OpKind::optimizer_update;
  op.inputs = concat({weight, *grad}, states);
  op.updated = concat({weight}, states);  // in place: no outputs
  op.flops = times(elements(weight), optimizer_flops_per_element(optimizer_));
  emit(std::move(op));
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

traces::Trace NetworkBuilder::build_trace(std::map<std::string, std::string> metadata) const {
  std::vector<traces::Tensor> tensors;
  tensors.reserve(tensors_.size());
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    const TensorRecord& record = tensors_[i];
    traces::Tensor tensor;
    tensor.id = i;
    tensor.name = record.name;
    tensor.dtype = record.dtype;
    tensor.shape = record.sample_shape;
    if (record.batch_dim) tensor.shape.at(*record.batch_dim) *= batch_size_;
    tensor.role = record.role;
    tensor.batch_dim = record.batch_dim;
    tensor.view_of = record.view_of;
    tensors.push_back(std::move(tensor));
  }

  std::vector<traces::Op> ops;
  ops.reserve(ops_.size());
  for (std::size_t i = 0; i < ops_.size(); ++i) {
    const OpRecord& record = ops_[i];
    traces::Op op;
    op.id = i;
    op.name = record.name;
    op.phase = record.phase;
    op.kind = record.kind;
    op.inputs = record.inputs;
    op.outputs = record.outputs;
    op.flops = record.flops;
    // Bytes moved: the op's input and output tensors, except that views move no data and
    // in-place updates write the tensors they update.
    if (record.kind != OpKind::view) {
      for (const std::size_t input : record.inputs) op.bytes_read += bytes(input);
      for (const std::size_t output : record.outputs) {
        if (std::find(record.aliases.begin(), record.aliases.end(), output) == record.aliases.end()) {
          op.bytes_written += bytes(output);
        }
      }
      for (const std::size_t updated : record.updated) op.bytes_written += bytes(updated);
    }
    ops.push_back(std::move(op));
  }

  metadata["source"] = "zoo";
  metadata["model"] = model_;
  metadata["precision"] = std::string(to_string(precision_));
  metadata["optimizer"] = std::string(to_string(optimizer_));
  return traces::Trace(model_, batch_size_, std::move(tensors), std::move(ops), std::move(metadata));
}

}  // namespace comptrain::zoo::detail

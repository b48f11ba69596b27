// The mixture-of-experts pieces of the mini-autograd (network_builder.hpp, "Mixture-of-experts
// pieces"): the ops of Hugging Face's expert loop (modeling_mixtral.py MixtralSparseMoeBlock,
// modeling_qwen2_moe.py Qwen2MoeSparseMoeBlock) with what autograd saves for each, from
// PyTorch's derivatives.yaml and checked against a capture (tests/capture/tiny_moe.py).

#include <stdexcept>
#include <utility>
#include <string_view>

#include "comptrain/support/checked.hpp"
#include "network_builder.hpp"

namespace comptrain::zoo::detail {
namespace {

using traces::BatchLinear;
using traces::DType;
using traces::OpKind;
using traces::Phase;

// FLOPs per element (traces/zoo/README.md, "FLOPs").
constexpr std::int64_t kTopkComparisonsPerPick = 1;  // a pass over the row per value picked
constexpr std::int64_t kSigmoidForward = 3;          // exp, add, divide
constexpr std::int64_t kSigmoidBackward = 3;         // g * y * (1 - y)
constexpr std::int64_t kClampForward = 2;            // a comparison with each bound (min and max)
constexpr std::int64_t kClampBackward = 2;           // the input's mask, and g where it is within
constexpr std::int64_t kAddScalarFlops = 1;          // x + c; backward passes g through (counted as a copy)
constexpr std::int64_t kScaleFlops = 1;              // x * c; backward g * c
// Division of x by its row sum: the sum (1 add per element), the quotient (1); backward,
// x's gradient g / s (1) and the divisor's -sum(g * x) / s^2 (3: product, row sum, scale).
constexpr std::int64_t kRowSumFlops = 1;
constexpr std::int64_t kDivideForward = 1;
constexpr std::int64_t kDivideBackwardSelf = 1;
constexpr std::int64_t kDivideBackwardDivisor = 3;

}  // namespace

NetworkBuilder::TopK NetworkBuilder::topk(const std::string& name, Value x, std::int64_t k) {
  const std::vector<std::int64_t> in_shape = sample_shape(x);
  if (in_shape.empty() || k < 1 || k > in_shape.back() || !requires_grad(x.index)) {
    throw std::logic_error(name + ": topk needs rows of at least k values that require a gradient");
  }
  const std::string op = unique_op_name(name);
  std::vector<std::int64_t> shape = in_shape;
  shape.back() = k;
  const auto batch_dim = tensors_[x.index].batch_dim;
  const std::size_t values = new_output(op + ".values", tensors_[x.index].dtype, shape, batch_dim, true);
  const std::size_t indices = new_output(op + ".indices", DType::i64, shape, batch_dim, false);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::other;  // a selection over each row
  f.inputs = {x.index};
  f.outputs = {values, indices};
  f.flops = scaled(elements(x.index), k * kTopkComparisonsPerPick);
  f.differentiable_outputs = {values};
  // derivatives.yaml, topk: self: value_selecting_reduction_backward_symint(grad, dim, indices,
  // self.sym_sizes(), true) -- TopkBackward0 keeps the indices and the sizes.
  f.saved = {indices};
  f.grads = {{x.index, {}}};
  f.backward_kind = OpKind::scatter;  // zeros of x's shape, the gradient scattered at the indices
  record(std::move(f));
  return {{values}, {indices}};
}

Value NetworkBuilder::normalize_rows_(const std::string& name, Value x) {
  const std::vector<std::int64_t> shape = sample_shape(x);
  if (shape.empty() || !requires_grad(x.index)) throw std::logic_error(name + ": needs rows that require a gradient");
  const auto batch_dim = tensors_[x.index].batch_dim;
  const DType dtype = tensors_[x.index].dtype;
  std::vector<std::int64_t> rows = shape;
  rows.back() = 1;

  // routing_weights.sum(dim=-1, keepdim=True): SumBackward1 saves sizes only; its backward
  // expands the gradient over the row, a tensor of x's shape once added to x's other gradient.
  const std::size_t sum = reduction(name + ".sum", x, rows, batch_dim, 0).index;

  // x /= sum: derivatives.yaml, div.Tensor: other: div_tensor_other_backward(grad, self, other)
  // reads self, and an in-place op overwrites it, so the generated code saves a clone of the
  // original self (`original_self = self.clone()`) besides `other`. The clone is a kernel of
  // its own with no autograd node.
  const std::string op = unique_op_name(name);
  const std::size_t original = new_output(op + ".clone.out", dtype, shape, batch_dim, false);
  emit({op + ".clone", Phase::forward, OpKind::elementwise, {x.index}, {original}, {}, {}, {}});
  const std::size_t y = new_view(op + ".out", x.index, shape, batch_dim);
  tensors_[y].requires_grad = true;
  ForwardOp d;
  d.name = op;
  d.kind = OpKind::elementwise;
  d.inputs = {x.index, sum};
  d.outputs = {y};
  d.flops = scaled(elements(x.index), kDivideForward);
  d.differentiable_outputs = {y};
  d.saved = {original, sum};  // DivBackward0: self (the clone) and other
  d.grads = {{x.index, {}}, {sum, {}}};
  d.backward_flops = scaled(elements(x.index), kDivideBackwardSelf + kDivideBackwardDivisor);
  d.backward_kind = OpKind::elementwise;
  record(std::move(d));
  return {y};
}

Value NetworkBuilder::load_balancing_loss(const std::string& name, Value probs, Value indices, Value scores) {
  expect_rank(probs, 2, name);
  expect_rank(indices, 2, name);
  if (!requires_grad(probs.index) || requires_grad(indices.index) || !requires_grad(scores.index) || dim(indices, 0) != dim(probs, 0) ||
      tensors_[indices.index].dtype != DType::i64 || sample_shape(scores) != sample_shape(indices)) {
    throw std::logic_error(name + ": needs probabilities and scores that require a gradient and the int64 indices of the picks");
  }
  const std::int64_t n = dim(probs, 0);
  const std::int64_t experts = dim(probs, 1);
  const std::int64_t k = dim(indices, 1);
  const auto rows = tensors_[probs.index].batch_dim;  // the token rows scale with the batch; the per-expert means do not
  const std::string p = name + ".";
  // The kernels with no autograd node (no_grad work, integer masks, the logging copy) are
  // untracked_kernel's.

  // mask = one_hot(indices, num_classes=E).sum(dim=1): ATen's one_hot is zeros [n, k, E] and a
  // scatter_ of ones (on CUDA it skips its range checks, so the host does not wait), then the sum
  // over the k picks.
  const std::size_t one_hot = untracked_kernel(p + "one_hot.zeros", {}, DType::i64, {n, k, experts}, rows);
  emit({unique_op_name(p + "one_hot.scatter_"), Phase::forward, OpKind::scatter, {indices.index, one_hot}, {}, {one_hot}, {}, elements(indices.index)});
  const std::size_t mask = untracked_kernel(p + "mask.sum", {one_hot}, DType::i64, {n, experts}, rows);
  // switch_load_balancing_loss_func: top_k = mask[0].count_nonzero() (ne and a sum over one row's
  // view, a tensor: no host wait; the view is a row per sample here, as views keep their storage's
  // batch scaling); selection_mean = mask.float().mean(dim=0) / top_k.
  const std::size_t first_row = new_view(p + "mask.select", mask, {1, experts}, rows);
  const std::size_t nonzero = untracked_kernel(p + "count_nonzero.ne", {first_row}, DType::boolean, {1, experts}, rows);
  const std::size_t top_k = untracked_kernel(p + "count_nonzero.sum", {nonzero}, DType::i64, {}, std::nullopt);
  const std::size_t mask_float = untracked_kernel(p + "mask.float", {mask}, DType::f32, {n, experts}, rows);
  const std::size_t selection_sum = untracked_kernel(p + "selection_mean.mean", {mask_float}, DType::f32, {experts}, std::nullopt);
  const std::size_t selection_mean = untracked_kernel(p + "selection_mean.div", {selection_sum, top_k}, DType::f32, {experts}, std::nullopt);
  // aux_loss = sum(gates.mean(dim=0) * selection_mean) * E, then aux_loss *= coeff: the part that
  // needs a gradient, through probs back to the router's logits.
  // gates.mean(dim=0) and torch.sum: MeanBackward1 and SumBackward0, each backward a kernel that
  // writes the gradient expanded (the mean's divided by the rows).
  const Value gates_mean = reduction(p + "gates_mean", probs, {experts}, std::nullopt, 1);
  const Value product = mul(p + "mul", gates_mean, Value{selection_mean});
  const Value total = reduction(p + "sum", product, {}, std::nullopt, 1);
  Value loss = elementwise(p + "mul_experts", total, OpKind::elementwise, kScaleFlops, kScaleFlops, Saves::nothing, false);  // MulBackward1
  loss = elementwise(p + "mul_coeff_", loss, OpKind::elementwise, kScaleFlops, kScaleFlops, Saves::nothing, true);
  // save_to_aux_losses_tracker(name, aux_loss / coeff, ...): the quotient (an autograd node whose
  // gradient nothing asks for) added, detached, into the layer's slot of a logging tensor.
  const std::size_t logged = untracked_kernel(p + "tracker.div", {loss.index}, DType::f32, {}, std::nullopt);
  untracked_kernel(p + "tracker.add_", {logged}, DType::f32, {}, std::nullopt);

  // MoEAuxLossAutoScaler.apply(scores, aux_loss): forward hands the scores on (no kernel); its
  // backward returns their gradient as it is and ones_like(aux_loss) * main_loss_backward_scale
  // for the loss, which starts the loss's backward.
  const std::string op = unique_op_name(p + "auto_scaler");
  const std::size_t y = new_view(op + ".out", scores.index, sample_shape(scores), tensors_[scores.index].batch_dim);
  tensors_[y].requires_grad = true;
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::view;
  f.inputs = {scores.index, loss.index};
  f.outputs = {y};
  f.aliases = {y};
  f.differentiable_outputs = {y};
  f.grads = {{scores.index, y}, {loss.index, {}}};
  f.backward_flops = elements(loss.index);
  f.backward_kind = OpKind::elementwise;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::reduction(const std::string& name, Value x, std::vector<std::int64_t> sample_shape, std::optional<std::size_t> batch_dim,
                                std::int64_t backward_flops) {
  const std::string op = unique_op_name(name);
  const std::size_t y = new_output(op + ".out", tensors_[x.index].dtype, std::move(sample_shape), batch_dim, true);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::elementwise;
  f.inputs = {x.index};
  f.outputs = {y};
  f.flops = scaled(elements(x.index), kRowSumFlops);
  f.differentiable_outputs = {y};
  f.grads = {{x.index, {}}};
  f.backward_flops = scaled(elements(x.index), backward_flops);
  f.backward_kind = OpKind::elementwise;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::zeros(const std::string& name, DType dtype, std::vector<std::int64_t> shape, bool batch_scaling) {
  if (batch_scaling && shape.empty()) throw std::logic_error(name + ": a batch-scaling tensor needs a dimension");
  const std::string op = unique_op_name(name);
  const std::size_t y = new_output(op + ".out", dtype, std::move(shape),
                                   batch_scaling ? std::optional<std::size_t>(0) : std::nullopt, false);
  emit({op, Phase::forward, OpKind::elementwise, {}, {y}, {}, {}, {}});  // a fill: bytes, no FLOPs
  return {y};
}

std::vector<Value> NetworkBuilder::columns(const std::string& name, Value x) {
  expect_rank(x, 2, name);
  if (requires_grad(x.index)) throw std::logic_error(name + ": columns are taken of tensors without gradient only");
  const std::string op = unique_op_name(name);
  std::vector<Value> result;
  for (std::int64_t column = 0; column < dim(x, 1); ++column) {
    result.push_back({new_view(op + "." + std::to_string(column), x.index, {dim(x, 0)}, tensors_[x.index].batch_dim)});
  }
  return result;
}

Value NetworkBuilder::index(const std::string& name, Value x, const std::vector<Value>& indices,
                            std::vector<std::int64_t> shape) {
  if (indices.empty() || indices.size() > sample_shape(x).size()) throw std::logic_error(name + ": one index per leading dimension");
  for (const Value i : indices) {
    expect_rank(i, 1, name);
    if (requires_grad(i.index) || tensors_[i.index].dtype != DType::i64 || dim(i, 0) != dim(indices.front(), 0) ||
        tensors_[i.index].batch_dim != tensors_[indices.front().index].batch_dim) {
      throw std::logic_error(name + ": the indices must be int64 tensors of one length, without gradient");
    }
  }
  if (shape.empty() || shape.front() != dim(indices.front(), 0)) throw std::logic_error(name + ": one output row per index entry");
  const std::string op = unique_op_name(name);
  // aten::index is on no autocast list: the rows keep x's dtype.
  const std::size_t y = new_output(op + ".out", tensors_[x.index].dtype, std::move(shape),
                                   tensors_[indices.front().index].batch_dim, requires_grad(x.index));
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::gather;
  f.inputs = {x.index};
  for (const Value i : indices) f.inputs.push_back(i.index);
  f.outputs = {y};
  f.differentiable_outputs = {y};
  // derivatives.yaml, index.Tensor: self: index_backward(grad.new_zeros_symint(self.sym_sizes(),
  // self.options()), indices, grad) -- IndexBackward0 keeps the indices and x's sizes, not x.
  for (const Value i : indices) f.saved.push_back(i.index);
  f.grads = {{x.index, {}}};
  // index_put_(accumulate=True) adds each gradient element into the zero tensor.
  f.backward_flops = elements(y);
  f.backward_kind = OpKind::scatter;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::mul_rows(const std::string& name, Value x, Value w) {
  std::vector<std::int64_t> w_shape = sample_shape(x);
  if (w_shape.empty()) throw std::logic_error(name + ": needs rows");
  w_shape.back() = 1;
  if (sample_shape(w) != w_shape || tensors_[w.index].batch_dim != tensors_[x.index].batch_dim) {
    throw std::logic_error(name + ": the multiplier must have one value per row of x");
  }
  const std::string op = unique_op_name(name);
  const bool x_grad = requires_grad(x.index);
  const bool w_grad = requires_grad(w.index);
  const std::size_t y = new_output(op + ".out", promote_types(tensors_[x.index].dtype, tensors_[w.index].dtype),
                                   sample_shape(x), tensors_[x.index].batch_dim, x_grad || w_grad);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::elementwise;
  f.inputs = {x.index, w.index};
  f.outputs = {y};
  f.flops = elements(y);
  f.differentiable_outputs = {y};
  // MulBackward0: self's gradient is grad * other, other's is (grad * self) summed to other's
  // shape (sum_to_size over the broadcast dimension).
  if (x_grad) f.saved.push_back(w.index);
  if (w_grad) f.saved.push_back(x.index);
  f.grads = {{x.index, {}}, {w.index, {}}};
  f.backward_flops = scaled(elements(y), (x_grad ? 1 : 0) + (w_grad ? 2 : 0));
  f.backward_kind = OpKind::elementwise;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::index_add_(const std::string& name, Value self, Value index, Value source) {
  expect_rank(index, 1, name);
  std::vector<std::int64_t> rows = sample_shape(self);
  if (rows.empty() || requires_grad(index.index) || tensors_[index.index].dtype != DType::i64) {
    throw std::logic_error(name + ": needs a tensor with rows and an int64 index without gradient");
  }
  rows.front() = dim(index, 0);
  if (sample_shape(source) != rows || tensors_[source.index].dtype != tensors_[self.index].dtype) {
    throw std::logic_error(name + ": the source must hold one row of self's dtype per index entry");
  }
  const std::string op = unique_op_name(name);
  const std::size_t y = new_view(op + ".out", self.index, sample_shape(self), tensors_[self.index].batch_dim);
  tensors_[y].requires_grad = requires_grad(self.index) || requires_grad(source.index);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::scatter;
  f.inputs = {self.index, index.index, source.index};
  f.outputs = {y};
  f.flops = elements(source.index);  // one add per source element
  f.differentiable_outputs = {y};
  // derivatives.yaml, index_add: self: grad; source: maybe_multiply(grad.index_select(dim,
  // index).expand_as(source), alpha) -- IndexAddBackward0 keeps the index (and source's sizes).
  f.saved = {index.index};
  f.grads = {{self.index, y}, {source.index, {}}};
  f.backward_kind = OpKind::gather;  // index_select of the gradient's rows
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::clamp(const std::string& name, Value x) {
  return elementwise(name, x, OpKind::elementwise, kClampForward, kClampBackward, Saves::input, false);  // ClampBackward1 saves self
}

Value NetworkBuilder::add_scalar(const std::string& name, Value x) {
  return elementwise(name, x, OpKind::elementwise, kAddScalarFlops, kAddScalarFlops, Saves::nothing, false);  // AddBackward1 saves nothing
}

std::vector<Value> NetworkBuilder::chunk_last(const std::string& name, Value x, std::int64_t parts) {
  std::vector<std::int64_t> shape = sample_shape(x);
  if (shape.empty() || parts < 1 || shape.back() % parts != 0) throw std::logic_error(name + ": the last dimension does not split into the parts");
  shape.back() /= parts;
  return split_into_views(unique_op_name(name), x, std::vector<std::vector<std::int64_t>>(static_cast<std::size_t>(parts), shape));
}

Value NetworkBuilder::sigmoid(const std::string& name, Value x) {
  return elementwise(name, x, OpKind::elementwise, kSigmoidForward, kSigmoidBackward, Saves::result, false);  // SigmoidBackward0
}

}  // namespace comptrain::zoo::detail

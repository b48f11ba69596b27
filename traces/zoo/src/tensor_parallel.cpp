// Megatron-LM's tensor and sequence parallelism in the mini-autograd: the communication
// mappings, column- and row-parallel linears, the vocabulary-parallel embedding and
// cross-entropy, as one tensor-parallel rank runs them (traces/zoo/README.md, "Tensor and
// sequence parallelism"). Sources: NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553,
// megatron/core/tensor_parallel/{mappings,layers,cross_entropy}.py; the line numbers below are
// that commit's.

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "network_builder.hpp"

namespace comptrain::zoo::detail {
namespace {

using traces::BatchLinear;
using traces::CommunicationKind;
using traces::DType;
using traces::OpKind;
using traces::ParallelGroup;

// Every collective of this file runs over the tensor-parallel group.
traces::Communication over_tensor_group(CommunicationKind kind) { return {kind, ParallelGroup::tensor}; }


// FLOPs per logit of the vocabulary-parallel cross-entropy (cross_entropy.py:20-110): the row max
// (1); subtracting it and exp in place, and the row sum (3); dividing by the sum, the softmax (1).
// Backward: the one-hot subtraction folded into a multiply by the output gradient (2).
constexpr std::int64_t kLogitsMaxFlops = 1;
constexpr std::int64_t kShiftedExpSumFlops = 3;
constexpr std::int64_t kSoftmaxDivideFlops = 1;
constexpr std::int64_t kCrossEntropyBackwardFlops = 2;
// Per token: log(sum_exp) - predicted_logit (2) and the mean's add (1).
constexpr std::int64_t kLossPerTokenFlops = 3;
// Transformer Engine's pieces of a pipelined GEMM + reduce-scatter (TE pytorch/module/base.py,
// initialize_ub: num_splits 4 for the `pipeline` method, the default of proj_fprop and fc2_fprop).
constexpr std::int64_t kTeReduceScatterSplits = 4;

}  // namespace

void NetworkBuilder::set_tensor_parallel(std::int64_t degree, bool sequence_parallel, bool comm_overlap) {
  if (degree < 1) throw std::logic_error("set_tensor_parallel: degree " + std::to_string(degree) + " < 1");
  if (sequence_parallel && degree == 1) throw std::logic_error("set_tensor_parallel: sequence parallelism needs a degree > 1");
  if (comm_overlap && !sequence_parallel) throw std::logic_error("set_tensor_parallel: the communication overlap needs sequence parallelism");
  tensor_parallel_ = degree;
  sequence_parallel_ = sequence_parallel;
  tp_comm_overlap_ = comm_overlap;
}

void NetworkBuilder::overlap_gather_with_gemms(const ColumnParallelInput& x) {
  // TE's ring exchange (qkv_fprop, fc1_fprop: initialize_ub's methods["ring_exchange"]): the GEMM
  // runs on the blocks in hand while the next move, so the all_gather hides behind every op from
  // it to the GEMM just emitted (autocast's weight casts between them included; several linears
  // reading one input each extend it).
  if (!tp_comm_overlap_ || !x.gather) return;
  communications_.at(*x.gather).overlap = ops_beside(*x.gather, ops_.size());
}

void NetworkBuilder::check_sequence_divides(Value x, const std::string& what) const {
  if (sample_shape(x).size() < 2 || dim(x, 1) % tensor_parallel_ != 0) {
    throw std::logic_error(what + ": the sequence of " + tensors_.at(x.index).name + " does not split over " +
                           std::to_string(tensor_parallel_) + " ranks");
  }
}

std::size_t NetworkBuilder::record_communication(const std::string& op, CommunicationKind forward, std::size_t x,
                                                 std::vector<std::int64_t> out_shape, bool in_place,
                                                 std::optional<CommunicationKind> backward, ParallelGroup group) {
  const auto batch_dim = tensors_.at(x).batch_dim;
  const std::size_t y = in_place ? new_view(op + ".out", x, std::move(out_shape), batch_dim)
                                 : new_output(op + ".out", tensors_.at(x).dtype, std::move(out_shape), batch_dim, true);
  tensors_[y].requires_grad = requires_grad(x);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::communication;
  f.inputs = {x};
  f.outputs = {y};  // written, in place or not: the collective's result
  f.communication = traces::Communication{forward, group};
  if (!requires_grad(x)) {
    // No autograd node (nothing upstream needs a gradient): the collective alone.
    communications_.emplace(emit({op, traces::Phase::forward, f.kind, f.inputs, f.outputs, {}, {}, {}}), *f.communication);
    return y;
  }
  f.differentiable_outputs = {y};
  if (backward) {
    // The gradient's own collective: an all_reduce overwrites the output's gradient in place
    // (mappings.py:216-218, _reduce: torch.distributed.all_reduce(input_)); an all_gather or a
    // reduce_scatter writes a new tensor of the input's shape.
    f.grads = {{x, {}}};
    if (*backward == CommunicationKind::all_reduce) f.reduced_in_place = {{x, y}};
    f.backward_kind = OpKind::communication;
    f.backward_communication = traces::Communication{*backward, group};
  } else {
    f.grads = {{x, y}};  // the identity: the gradient passes through
    f.backward_kind = OpKind::view;
  }
  record(std::move(f));
  return y;
}

Value NetworkBuilder::copy_to_tensor_parallel(const std::string& name, Value x) {
  // _CopyToModelParallelRegion (mappings.py:201-218): forward returns its input; backward
  // all-reduces the gradient.
  const std::string op = unique_op_name(name);
  const std::size_t y = new_view(op + ".out", x.index, sample_shape(x), tensors_[x.index].batch_dim);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::view;
  f.inputs = {x.index};
  f.outputs = {y};
  f.aliases = {y};
  f.differentiable_outputs = {y};
  f.grads = {{x.index, {}}};
  f.reduced_in_place = {{x.index, y}};
  f.backward_kind = OpKind::communication;
  f.backward_communication = over_tensor_group(CommunicationKind::all_reduce);
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::reduce_from_tensor_parallel(const std::string& name, Value x) {
  // _ReduceFromModelParallelRegion (mappings.py:221-237): all_reduce forward, identity backward.
  return {record_communication(unique_op_name(name), CommunicationKind::all_reduce, x.index, sample_shape(x), true,
                               std::nullopt)};
}

Value NetworkBuilder::gather_from_sequence_parallel(const std::string& name, Value x) {
  // _GatherFromSequenceParallelRegion (mappings.py:300-352): all_gather along the sequence
  // forward, reduce_scatter of the gradient backward (tensor_parallel_output_grad, the default).
  std::vector<std::int64_t> shape = sample_shape(x);
  shape.at(1) *= tensor_parallel_;
  return {record_communication(unique_op_name(name), CommunicationKind::all_gather, x.index, std::move(shape), false,
                               CommunicationKind::reduce_scatter)};
}

Value NetworkBuilder::reduce_scatter_to_sequence_parallel(const std::string& name, Value x) {
  // _ReduceScatterToSequenceParallelRegion (mappings.py:355-378): reduce_scatter forward,
  // all_gather backward.
  check_sequence_divides(x, name);
  std::vector<std::int64_t> shape = sample_shape(x);
  shape.at(1) /= tensor_parallel_;
  return {record_communication(unique_op_name(name), CommunicationKind::reduce_scatter, x.index, std::move(shape), false,
                               CommunicationKind::all_gather)};
}

Value NetworkBuilder::scatter_to_sequence_parallel(const std::string& name, Value x) {
  // _ScatterToSequenceParallelRegion (mappings.py:280-297; _split_along_first_dim :60-81): this
  // rank's slice of the sequence, a view; the gradient is all-gathered.
  check_sequence_divides(x, name);
  const std::string op = unique_op_name(name);
  std::vector<std::int64_t> shape = sample_shape(x);
  shape.at(1) /= tensor_parallel_;
  const std::size_t y = new_view(op + ".out", x.index, std::move(shape), tensors_[x.index].batch_dim);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::view;
  f.inputs = {x.index};
  f.outputs = {y};
  f.aliases = {y};
  f.differentiable_outputs = {y};
  f.grads = {{x.index, {}}};
  f.backward_kind = OpKind::communication;
  f.backward_communication = over_tensor_group(CommunicationKind::all_gather);
  record(std::move(f));
  return {y};
}

NetworkBuilder::ColumnParallelInput NetworkBuilder::column_parallel_input(const std::string& name, Value x) {
  if (tensor_parallel_ == 1) return {x, std::nullopt, std::nullopt, std::nullopt};
  // The op just recorded, when it left a backward recipe (its backward is the input gradient's
  // collective).
  const auto collective = [&]() -> std::optional<std::size_t> {
    if (recipes_.empty() || recipes_.back().forward_op + 1 != ops_.size()) return std::nullopt;
    return recipes_.back().forward_op;
  };
  if (!sequence_parallel_) {
    const Value total = copy_to_tensor_parallel(name + ".copy_to_tensor_parallel", x);
    return {total, std::nullopt, collective(), std::nullopt};
  }
  // The shard is what the GEMMs' dtype needs (a no-op outside autocast): gathered and saved in
  // 16 bits, as Megatron's linear gathers the tensor it multiplies.
  check_sequence_divides(x, name);
  const Value shard{autocast_lower(name, x.index)};
  const Value total = gather_from_sequence_parallel(name + ".all_gather", shard);
  return {total, shard, collective(), ops_.size() - 1};
}

Value NetworkBuilder::column_parallel_linear(const std::string& name, const ColumnParallelInput& x,
                                             std::int64_t out_features, bool bias) {
  if (tensor_parallel_ == 1) return linear(name, x.total, out_features, bias);
  if (lora_) throw std::logic_error(name + ": LoRA is not written for tensor parallelism");
  const Value weight = parameter(name + ".weight", {out_features, dim(x.total, -1)});
  const std::optional<Value> b = bias ? std::optional(parameter(name + ".bias", {out_features})) : std::nullopt;
  const Value y = linear_saving(name, x.total, weight, b, x.shard ? std::optional(x.shard->index) : std::nullopt, x.collective);
  overlap_gather_with_gemms(x);
  return y;
}

Value NetworkBuilder::column_parallel_linear(const std::string& name, const ColumnParallelInput& x, Value weight) {
  if (tensor_parallel_ == 1) return linear(name, x.total, weight, std::nullopt);
  const Value y = linear_saving(name, x.total, weight, std::nullopt, x.shard ? std::optional(x.shard->index) : std::nullopt,
                                x.collective);
  overlap_gather_with_gemms(x);
  return y;
}

std::size_t NetworkBuilder::regathered_input(const std::pair<std::size_t, std::size_t>& regather) {
  const auto [shard, gathered] = regather;
  if (const auto done = regathered_.find(shard); done != regathered_.end()) return done->second;
  // LinearWithGradAccumulationAndAsyncCommunication.backward (layers.py:667-680): the saved
  // shard all-gathered into a buffer (Megatron's global memory buffer; here a temporary) for
  // the weight gradient, behind the input-gradient GEMM. Linears sharing one input share it.
  const std::string op = tensors_.at(gathered).name + ".regather";
  const std::size_t y =
      new_output(op + ".out", tensors_.at(shard).dtype, tensors_.at(gathered).sample_shape, tensors_.at(gathered).batch_dim, false);
  const std::size_t index = emit({op, traces::Phase::backward, OpKind::communication, {shard}, {y}, {}, {}, {}});
  communications_.emplace(index, over_tensor_group(CommunicationKind::all_gather));
  regathered_.emplace(shard, y);
  regather_ops_.emplace(shard, index);
  return y;
}

Value NetworkBuilder::row_parallel_linear(const std::string& name, Value x, std::int64_t out_features, bool bias) {
  if (tensor_parallel_ == 1) return linear(name, x, out_features, bias);
  if (lora_) throw std::logic_error(name + ": LoRA is not written for tensor parallelism");
  // RowParallelLinear.forward (layers.py:1560-1568): the partial product, its reduction, then
  // the bias (`output = output_ + self.bias`), added once to the reduced sum.
  Value y = linear(name, x, out_features, false);
  y = sequence_parallel_ ? reduce_scatter_to_sequence_parallel(name + ".reduce_scatter", y)
                         : reduce_from_tensor_parallel(name + ".all_reduce", y);
  if (tp_comm_overlap_) {
    // TE's Userbuffers (initialize_ub: proj_fprop and fc2_fprop `pipeline`, num_splits 4; proj_dgrad
    // and fc2_dgrad `ring_exchange`): the GEMM made in 4 pieces, each reduce-scattered beside the
    // next; in the backward pass the output gradient's all_gather beside the GEMMs reading it.
    const std::size_t reduce = ops_.size() - 1;
    communications_.at(reduce).splits = kTeReduceScatterSplits;
    if (!recipes_.empty() && recipes_.back().forward_op == reduce && recipes_.back().communication) recipes_.back().communication->overlap = 1;
  }
  if (!bias) return y;
  const Value b = parameter(name + ".bias", {out_features});
  // RowParallelLinear sets `sequence_parallel` on its bias (layers.py): added to S/t rows.
  mark_sequence_parallel_weight(b);
  return add_bias(name + ".bias_add", y, b);
}

void NetworkBuilder::mark_sequence_parallel_weight(Value weight) {
  if (tensor_parallel_ > 1 && sequence_parallel_) sequence_parallel_weights_.push_back(weight.index);
}

void NetworkBuilder::emit_sequence_parallel_gradient_all_reduce() {
  // _allreduce_layernorm_grads (finalize_model_grads.py:416-452 at NVIDIA/Megatron-LM@d98e8a64;
  // shared/reference/parallelism.md §1): after the backward pass of every micro-batch, the
  // gradients of the parameters marked `sequence_parallel` flattened into one buffer
  // (_flatten_dense_tensors), all-reduced over the tensor-parallel group and copied back. One
  // communication op of the optimizer phase, so once per iteration: its inputs the gradients, its
  // outputs views of them in place, which the optimizer reads. The flatten and copy-back kernels
  // are left out (a few bytes per parameter: norms and biases). A step in the backward pass
  // (torchtune's) has no such op: it is not Megatron's.
  if (sequence_parallel_weights_.empty() || optimizer_in_backward_) return;
  const std::string op = "finalize_model_grads.sequence_parallel_grads.all_reduce";
  std::vector<std::size_t> grads;
  std::vector<std::size_t> reduced;
  for (const std::size_t weight : sequence_parallel_weights_) {
    const auto grad = tensors_.at(weight).grad;
    if (!grad) continue;  // frozen
    grads.push_back(*grad);
    const std::size_t view = new_view(op + "." + tensors_.at(weight).name + ".grad", *grad, tensors_.at(*grad).sample_shape, tensors_.at(*grad).batch_dim);
    reduced.push_back(view);
    tensors_[weight].grad = view;
  }
  if (grads.empty()) return;
  communications_.emplace(emit({op, traces::Phase::optimizer, OpKind::communication, grads, reduced, {}, {}, {}}),
                          over_tensor_group(CommunicationKind::all_reduce));
}

Value NetworkBuilder::add_bias(const std::string& name, Value x, Value bias) {
  // x + bias over the last dimension: AddBackward0 passes x's gradient through and sums the
  // output gradient over the rows for the bias (a reduction, a new tensor).
  const std::string op = unique_op_name(name);
  const std::size_t y = new_output(op + ".out", promote_types(dtype(x), dtype(bias)), sample_shape(x),
                                   tensors_[x.index].batch_dim, true);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::elementwise;
  f.inputs = {x.index, bias.index};
  f.outputs = {y};
  f.flops = elements(y);
  f.differentiable_outputs = {y};
  f.grads = {{x.index, y}, {bias.index, {}}};
  if (requires_grad(bias.index)) f.backward_flops = elements(y);
  f.backward_kind = OpKind::elementwise;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::masked_fill_rows_(const std::string& name, Value x, Value mask) {
  // output_parallel[input_mask, :] = 0.0 (layers.py:365): index_put_ with a bool mask, in place.
  // IndexPutBackward0 saves the indices; its gradient is grad.index_put(indices, zeros), a new
  // tensor. Zeros are written, nothing computed: no FLOPs.
  const std::string op = unique_op_name(name);
  const std::size_t y = new_view(op + ".out", x.index, sample_shape(x), tensors_[x.index].batch_dim);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::elementwise;
  f.inputs = {x.index, mask.index};
  f.outputs = {y};
  f.differentiable_outputs = {y};
  f.saved = {mask.index};
  f.grads = {{x.index, {}}};
  f.backward_kind = OpKind::elementwise;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::vocab_parallel_embedding(const std::string& name, Value ids, Value weight, bool scatter) {
  if (tensor_parallel_ == 1) return embedding(name, ids, weight);
  // VocabParallelEmbedding.forward (layers.py:336-383): the ids outside this rank's rows are
  // masked (input_mask, then masked_input = input_ - start with the masked ones 0: kernels on
  // int64 ids, no autograd nodes), looked up, their rows zeroed, and the partial sums reduced.
  const Value mask = constant_op(name + ".input_mask", ids, DType::boolean, sample_shape(ids));
  const Value masked = constant_op(name + ".masked_input", std::vector<Value>{ids, mask}, DType::i64, sample_shape(ids));
  Value y = embedding(name, masked, weight);
  y = masked_fill_rows_(name + ".zero_masked", y, mask);
  return scatter ? reduce_scatter_to_sequence_parallel(name + ".reduce_scatter", y)
                 : reduce_from_tensor_parallel(name + ".all_reduce", y);
}

Value NetworkBuilder::vocab_parallel_cross_entropy(const std::string& name, Value logits, Value labels) {
  expect_rank(logits, 2, name);
  expect_rank(labels, 1, name);
  const std::vector<std::int64_t> rows = {dim(logits, 0)};
  const auto batch_dim = tensors_[logits.index].batch_dim;
  // Megatron-LM runs this loss at every tensor-parallel size (language_module.py,
  // compute_language_model_loss); over a group of one its all-reduces move nothing and are
  // left out.
  const auto all_reduce_in_place = [&](const std::string& op, std::size_t x) {
    if (tensor_parallel_ == 1) return x;
    const std::size_t y = new_view(op + ".out", x, tensors_[x].sample_shape, tensors_[x].batch_dim);
    communications_.emplace(emit({op, traces::Phase::forward, OpKind::communication, {x}, {y}, {}, {}, {}}),
                            over_tensor_group(CommunicationKind::all_reduce));
    return y;
  };
  // calculate_logits_max (cross_entropy.py:20-29): vocab_parallel_logits.float() -- a new fp32
  // tensor, which the later steps overwrite in place and finally save as the softmax -- and its
  // row max, all-reduced with MAX (:130). The autograd Function's inner ops leave no nodes.
  const std::string max_op = unique_op_name(name + ".logits_max");
  const std::size_t upcast = new_output(max_op + ".float", DType::f32, sample_shape(logits), batch_dim, false);
  std::size_t logits_max = new_output(max_op + ".out", DType::f32, rows, batch_dim, false);
  emit({max_op, traces::Phase::forward, OpKind::loss, {logits.index}, {upcast, logits_max}, {}, {}, scaled(elements(upcast), kLogitsMaxFlops)});
  logits_max = all_reduce_in_place(unique_op_name(name + ".logits_max.all_reduce"), logits_max);
  // calculate_predicted_logits (:32-66): logits -= max and exp in place, the target mask and
  // the masked targets of this rank's vocabulary range, the predicted logit and the sum of exp
  // per row; those two all-reduced with SUM (:146-152).
  const std::string predicted_op = unique_op_name(name + ".predicted_logits");
  const std::size_t exp_logits = new_view(predicted_op + ".exp_logits", upcast, sample_shape(logits), batch_dim);
  const std::size_t target_mask = new_output(predicted_op + ".target_mask", DType::boolean, rows, batch_dim, false);
  const std::size_t masked_target = new_output(predicted_op + ".masked_target", DType::i64, rows, batch_dim, false);
  std::size_t predicted = new_output(predicted_op + ".out", DType::f32, rows, batch_dim, false);
  std::size_t sum_exp = new_output(predicted_op + ".sum_exp_logits", DType::f32, rows, batch_dim, false);
  emit({predicted_op, traces::Phase::forward, OpKind::loss, {upcast, logits_max, labels.index},
        {exp_logits, target_mask, masked_target, predicted, sum_exp}, {}, {}, scaled(elements(upcast), kShiftedExpSumFlops)});
  predicted = all_reduce_in_place(unique_op_name(name + ".predicted_logits.all_reduce"), predicted);
  sum_exp = all_reduce_in_place(unique_op_name(name + ".sum_exp_logits.all_reduce"), sum_exp);
  // calculate_cross_entropy_loss (:68-80): exp_logits.div_(sum) -- the softmax, in place -- and
  // log(sum) - predicted per token; the mean over the tokens (the training loop's loss-mask
  // average) is folded in. ctx.save_for_backward(exp_logits, target_mask, masked_target_1d)
  // (:181). The backward (:186-211) writes the gradient over the saved softmax in fp32 and the
  // engine casts it to the logits' dtype: one op writing the logits' gradient here.
  const std::string loss_op = unique_op_name(name);
  const std::size_t softmax = new_view(loss_op + ".softmax", upcast, sample_shape(logits), batch_dim);
  const std::size_t loss = new_output(loss_op + ".out", DType::f32, {}, std::nullopt, true);
  ForwardOp f;
  f.name = loss_op;
  f.kind = OpKind::loss;
  f.inputs = {exp_logits, predicted, sum_exp};
  f.outputs = {loss, softmax};
  f.flops = scaled(elements(upcast), kSoftmaxDivideFlops);
  f.flops += scaled(elements(predicted), kLossPerTokenFlops);
  f.differentiable_outputs = {loss};
  f.saved = {softmax, target_mask, masked_target};
  f.grads = {{logits.index, {}}};
  f.backward_flops = scaled(elements(upcast), kCrossEntropyBackwardFlops);
  f.backward_kind = OpKind::loss;
  record(std::move(f));
  return {loss};
}

}  // namespace comptrain::zoo::detail

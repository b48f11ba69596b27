// Megatron-LM's pipeline-stage boundaries in the mini-autograd: the received input of a stage
// short of the first and the sent output of a stage short of the last (traces/zoo/README.md,
// "Pipeline stages"). Sources: NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553,
// megatron/core/pipeline_parallel/{p2p_communication,schedules}.py; the line numbers below are
// that commit's.

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "network_builder.hpp"

namespace comptrain::zoo::detail {
namespace {

// Both directions of a stage boundary run over the pipeline group, between neighbour stages.
traces::Communication over_pipeline_group(traces::CommunicationKind kind) { return {kind, traces::ParallelGroup::pipeline}; }

}  // namespace

Value NetworkBuilder::receive_from_previous_stage(const std::string& name, traces::DType dtype,
                                                  std::vector<std::int64_t> sample_shape) {
  // LoRA freezes everything before the first adapter (record() drops the nodes of such ops);
  // a received input that requires a gradient would contradict it.
  if (lora_) throw std::logic_error(name + ": LoRA is not written for pipeline stages");
  // recv_forward (p2p_communication.py:430-460) fills a tensor made by create_tensor_recv_prev
  // (:335-341): torch.empty(shape, requires_grad=True, dtype=config.pipeline_dtype). Being a
  // leaf that requires grad, autograd accumulates its gradient, which backward_step reads
  // (input_tensor.retain_grad(), schedules.py:555-560) and send_backward returns to the previous
  // stage (:516-534): this op's backward is that send, and nothing upstream of it is in the stage.
  const std::string op = unique_op_name(name);
  const std::vector<std::int64_t> whole = sample_shape;
  if (pipeline_scatter_gather_) {
    if (sample_shape.size() < 2 || sample_shape[1] % tensor_parallel_ != 0) {
      throw std::invalid_argument(name + ": the boundary tensor's sequence does not split over the " + std::to_string(tensor_parallel_) +
                                  " tensor-parallel ranks; expected the tensor-parallel degree to divide the sequence length");
    }
    sample_shape[1] /= tensor_parallel_;
  }
  const std::size_t y = new_output(op + ".out", dtype, std::move(sample_shape), 0, true);
  ForwardOp f;
  f.name = op;
  f.kind = traces::OpKind::communication;
  f.outputs = {y};
  f.communication = over_pipeline_group(traces::CommunicationKind::recv);
  f.differentiable_outputs = {y};
  f.gradient_leaves_stage = true;
  f.backward_kind = traces::OpKind::communication;
  f.backward_communication = over_pipeline_group(traces::CommunicationKind::send);
  record(std::move(f));
  if (!pipeline_scatter_gather_) return {y};
  // gather_split_1d_tensor: a new buffer of the whole tensor, all-gathered over the tensor group.
  // Autograd sees only the gathered tensor (the received one is its leaf); the gradient sent back
  // is this rank's slice of the whole gradient (split_tensor_into_1d_equal_chunks in
  // send_backward), counted as a copy of the slice's bytes.
  const std::string gather = unique_op_name(name + ".gather");
  const std::size_t z = new_output(gather + ".out", dtype, whole, 0, true);
  ForwardOp g;
  g.name = gather;
  g.kind = traces::OpKind::communication;
  g.inputs = {y};
  g.outputs = {z};
  g.communication = traces::Communication{traces::CommunicationKind::all_gather, traces::ParallelGroup::tensor};
  g.differentiable_outputs = {z};
  g.grads = {{y, {}}};
  g.backward_kind = traces::OpKind::other;
  record(std::move(g));
  return {z};
}

Value NetworkBuilder::send_to_next_stage(const std::string& name, Value x) {
  if (sent_output_) throw std::logic_error(name + ": a stage sends one output");
  if (!requires_grad(x.index)) throw std::logic_error(name + ": the stage's output needs no gradient");
  // Scatter-gather: this rank's 1/t (a view along the sequence, as scatter_to_sequence_parallel
  // takes it), whose gradient comes back as 1/t and is all-gathered over the tensor group.
  if (pipeline_scatter_gather_) x = scatter_to_sequence_parallel(name + ".split", x);
  // send_forward (p2p_communication.py:494-514) sends the output outside autograd: no node. The
  // schedule then pseudo-frees its data (deallocate_output_tensor, schedules.py:171-201; on by
  // default in training, megatron/training/argument_utils.py:305), keeping only its grad_fn for
  // backward_step: so the output is read by nothing after this op, as in the trace.
  const std::string op = unique_op_name(name);
  communications_.emplace(emit({op, traces::Phase::forward, traces::OpKind::communication, {x.index}, {}, {}, {}, {}}),
                          over_pipeline_group(traces::CommunicationKind::send));
  sent_output_ = x.index;
  return x;
}

void NetworkBuilder::emit_embedding_gradient_exchange() {
  // _allreduce_word_embedding_grads (finalize_model_grads.py:164-199 at NVIDIA/Megatron-LM@d98e8a64;
  // shared/reference/parallelism.md §2): with tied weights and two or more stages the first stage
  // (the embedding) and the last (its copy, the output layer's weight) all-reduce the word
  // embedding's gradient over the embedding group -- those two ranks -- after every micro-batch's
  // backward pass, before the step. An all-reduce of two ranks is written as what it moves: each
  // end sends its whole gradient to the other and receives the other's into its own, in place
  // (NCCL's ring sends half in the reduce-scatter and half in the all-gather: the same bytes each
  // way, in one step instead of two; the sum is made inside NCCL's kernel, as here inside the
  // receive). Two ops of the optimizer phase, once per iteration, over the pipeline group
  // (models::apply_pipeline_stage pairs them with the other end): a send of the gradient and a recv
  // writing a view of it, which the optimizer reads. A step in the backward pass (torchtune's) is
  // not Megatron's: none.
  if (!embedding_group_weight_ || optimizer_in_backward_) return;
  const std::size_t weight = *embedding_group_weight_;
  const auto grad = tensors_.at(weight).grad;
  if (!grad) return;  // frozen
  const std::string base = "finalize_model_grads.embedding_grads";
  communications_.emplace(emit({base + ".send", traces::Phase::optimizer, traces::OpKind::communication, {*grad}, {}, {}, {}, {}}),
                          over_pipeline_group(traces::CommunicationKind::send));
  const std::size_t reduced = new_view(base + ".recv.out", *grad, tensors_.at(*grad).sample_shape, tensors_.at(*grad).batch_dim);
  communications_.emplace(emit({base + ".recv", traces::Phase::optimizer, traces::OpKind::communication, {}, {reduced}, {}, {}, {}}),
                          over_pipeline_group(traces::CommunicationKind::recv));
  tensors_[weight].grad = reduced;
}

}  // namespace comptrain::zoo::detail

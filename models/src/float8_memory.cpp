// Transformer Engine's FP8 memory in a trace (float8_memory.hpp).

#include "comptrain/models/float8_memory.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

namespace comptrain::models {

using traces::Op;
using traces::OpIndex;
using traces::Phase;
using traces::Tensor;
using traces::TensorIndex;
using traces::TensorRole;

namespace {

// The first forward in-scope linear that reads `t`: the one whose quantized input Transformer
// Engine saves.
std::optional<OpIndex> first_forward_reader(const traces::Trace& trace, TensorIndex t, const Float8Scope& scope) {
  std::optional<OpIndex> first;
  for (const OpIndex c : trace.tensor(t).consumers) {
    const Op& op = trace.op(c);
    if (op.phase == Phase::forward && in_float8_scope(scope, op) && (!first || c < *first)) first = c;
  }
  return first;
}

// The bytes a tensor moves, as the op's affine byte counts hold them.
traces::BatchLinear bytes_as_batch_linear(const Tensor& t, std::int64_t batch) {
  if (t.batch_dim) return {0, t.bytes() / batch};
  return {t.bytes(), 0};
}

// Whether every reader of `t` is an in-scope linear (and there is one).
bool read_only_by_float8_linears(const traces::Trace& trace, TensorIndex t, const Float8Scope& scope) {
  const auto& readers = trace.tensor(t).consumers;
  return !readers.empty() &&
         std::all_of(readers.begin(), readers.end(), [&](OpIndex c) { return in_float8_scope(scope, trace.op(c)); });
}

// The norm outputs that sequence parallelism gathers for in-scope linears only: a forward
// layernorm's 16-bit output whose every reader is a tensor-parallel all-gather (the forward
// gather, the backward re-gather of the saved shard) whose outputs only in-scope linears read,
// one of them forward. With the gathers' outputs, they are what Transformer Engine holds and moves
// in FP8 (with_float8_memory, below).
std::vector<TensorIndex> fp8_gathered_norm_outputs(const traces::Trace& trace, const Float8Scope& scope) {
  std::vector<TensorIndex> found;
  for (TensorIndex s = 0; s < trace.tensors().size(); ++s) {
    const Tensor& shard = trace.tensor(s);
    if (shard.role != TensorRole::activation || !traces::is_floating(shard.dtype) || traces::element_size(shard.dtype) < 2 ||
        shard.shape.size() < 2 || !shard.producer || shard.consumers.empty()) {
      continue;
    }
    const Op& norm = trace.op(*shard.producer);
    if (norm.kind != traces::OpKind::layernorm || norm.phase != Phase::forward) continue;
    bool gathered_forward = false;
    const bool only_gathers = std::all_of(shard.consumers.begin(), shard.consumers.end(), [&](OpIndex c) {
      const Op& gather = trace.op(c);
      if (gather.kind != traces::OpKind::communication || !gather.communication ||
          gather.communication->kind != traces::CommunicationKind::all_gather ||
          gather.communication->group != traces::ParallelGroup::tensor || gather.communication->ring != 0 || gather.outputs.empty()) {
        return false;
      }
      gathered_forward = gathered_forward || gather.phase == Phase::forward;
      return std::all_of(gather.outputs.begin(), gather.outputs.end(),
                         [&](TensorIndex out) { return read_only_by_float8_linears(trace, out, scope); });
    });
    if (only_gathers && gathered_forward) found.push_back(s);
  }
  return found;
}

}  // namespace

traces::Trace with_float8_memory(const traces::Trace& trace, const Float8Scope& scope, bool weight_workspaces) {
  if (scope.recipe != Float8Recipe::delayed) return trace;
  std::vector<Tensor> tensors = trace.tensors();
  std::vector<Op> ops = trace.ops();
  // The trace's constructor derives these again.
  for (Tensor& t : tensors) {
    t.producer.reset();
    t.consumers.clear();
  }
  std::uint64_t next_id = 0;
  for (const Tensor& t : tensors) next_id = std::max(next_id, t.id + 1);
  const auto add_tensor = [&](Tensor t) {
    t.id = next_id++;
    tensors.push_back(std::move(t));
    return tensors.size() - 1;
  };

  // Sequence parallelism: Megatron-LM's TELayerNormColumnParallelLinear has its norm write the
  // output shard in FP8 (the quantized norm kernel, `with_quantized_norm`), all-gathers that FP8
  // shard, saves it for the backward pass, and there gathers it again in FP8 for the weight
  // gradient (NVIDIA/TransformerEngine@d0067d0d transformer_engine/pytorch/module/
  // layernorm_linear.py:241-252, 292-313, 430-435 and 775-795). So the shard and the gathers'
  // outputs are one byte an element: the saved shard and the gathered temporaries take half the
  // memory, the gathers move half the bytes (a collective's bytes are its tensors',
  // traces/FORMAT.md), the norm writes half; the linears read the gathered copies at one byte as
  // they did (float8_work counted 16-bit operands at one byte already).
  const auto retype_to_fp8 = [&](TensorIndex t) {
    const traces::BatchLinear before = bytes_as_batch_linear(tensors[t], trace.batch_size());
    tensors[t].dtype = traces::DType::u8;
    const traces::BatchLinear after = bytes_as_batch_linear(tensors[t], trace.batch_size());
    const auto less = [&](traces::BatchLinear& count, std::int64_t times) {
      count.fixed -= times * (before.fixed - after.fixed);
      count.per_sample -= times * (before.per_sample - after.per_sample);
    };
    if (const auto producer = trace.tensor(t).producer) less(ops[*producer].bytes_written, 1);
    for (const OpIndex c : std::set<OpIndex>(trace.tensor(t).consumers.begin(), trace.tensor(t).consumers.end())) {
      less(ops[c].bytes_read, std::count(ops[c].inputs.begin(), ops[c].inputs.end(), t));
    }
  };
  for (const TensorIndex shard : fp8_gathered_norm_outputs(trace, scope)) {
    retype_to_fp8(shard);
    for (const OpIndex gather : trace.tensor(shard).consumers) {
      for (const TensorIndex out : trace.op(gather).outputs) {
        if (tensors[out].dtype != traces::DType::u8) retype_to_fp8(out);
      }
    }
  }

  // The saved inputs: an activation an in-scope backward linear reads, as a GEMM operand (rank
  // >= 2, floating), that an in-scope forward linear read.
  std::map<TensorIndex, TensorIndex> fp8_copy;
  bool replaced = false;
  for (OpIndex o = 0; o < ops.size(); ++o) {
    Op& op = ops[o];
    if (op.phase != Phase::backward || !in_float8_scope(scope, op)) continue;
    for (TensorIndex& input : op.inputs) {
      const Tensor x = tensors[input];  // a copy: add_tensor below may move the vector
      if (x.role != TensorRole::activation || !traces::is_floating(x.dtype) || x.shape.size() < 2 || traces::element_size(x.dtype) < 2) continue;
      const std::optional<OpIndex> saver = first_forward_reader(trace, input, scope);
      if (!saver) continue;
      auto [it, added] = fp8_copy.try_emplace(input, 0);
      if (added) {
        Tensor copy;
        copy.name = x.name + ".fp8";
        copy.dtype = traces::DType::u8;
        copy.shape = x.shape;
        copy.role = TensorRole::activation;
        copy.batch_dim = x.batch_dim;
        it->second = add_tensor(std::move(copy));
        ops[*saver].outputs.push_back(it->second);
      }
      // The backward op reads one byte an element where it read the 16-bit input.
      const traces::BatchLinear before = bytes_as_batch_linear(x, trace.batch_size());
      const traces::BatchLinear after = bytes_as_batch_linear(tensors[it->second], trace.batch_size());
      op.bytes_read.fixed -= before.fixed - after.fixed;
      op.bytes_read.per_sample -= before.per_sample - after.per_sample;
      input = it->second;
      replaced = true;
    }
  }
  // A 16-bit input no backward op reads any more is no activation: a temporary, with its views.
  if (replaced) {
    std::vector<bool> read_backward(tensors.size(), false);
    for (const Op& op : ops) {
      if (op.phase != Phase::backward) continue;
      for (const TensorIndex t : op.inputs) {
        if (t < trace.tensors().size()) read_backward[trace.storage_of(t)] = true;
      }
    }
    std::vector<bool> demoted(trace.tensors().size(), false);
    for (const auto& [input, copy] : fp8_copy) {
      const TensorIndex storage = trace.storage_of(input);
      demoted[storage] = !read_backward[storage] && trace.tensor(storage).role == TensorRole::activation;
    }
    // One pass over the tensors, each view with its storage.
    for (TensorIndex t = 0; t < trace.tensors().size(); ++t) {
      if (demoted[trace.storage_of(t)]) tensors[t].role = TensorRole::temporary;
    }
  }

  if (weight_workspaces && !scope.fp8_weights) {
    std::map<TensorIndex, TensorIndex> workspace;
    for (const Op& op : trace.ops()) {
      if (op.phase != Phase::forward || !in_float8_scope(scope, op)) continue;
      for (const TensorIndex w : op.inputs) {
        const Tensor& weight = trace.tensor(w);
        if (weight.role != TensorRole::weight || weight.shape.size() < 2 || workspace.contains(w)) continue;
        Tensor buffer;
        buffer.name = weight.name + ".fp8_workspace";
        buffer.dtype = traces::DType::u8;
        buffer.shape = weight.shape;
        buffer.shape.insert(buffer.shape.begin(), 2);  // row- and column-wise
        buffer.role = TensorRole::buffer;
        workspace.emplace(w, add_tensor(std::move(buffer)));
      }
    }
    for (Op& op : ops) {
      if (op.phase == Phase::optimizer || !in_float8_scope(scope, op)) continue;
      std::vector<TensorIndex> extra;
      for (const TensorIndex w : op.inputs) {
        if (const auto it = workspace.find(w); it != workspace.end()) extra.push_back(it->second);
      }
      op.inputs.insert(op.inputs.end(), extra.begin(), extra.end());
    }
  }
  return traces::Trace(trace.name(), trace.batch_size(), std::move(tensors), std::move(ops), trace.metadata());
}

}  // namespace comptrain::models

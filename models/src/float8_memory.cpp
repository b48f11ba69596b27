// Transformer Engine's FP8 memory in a trace (float8_memory.hpp).

#include "comptrain/models/float8_memory.hpp"

#include <algorithm>
#include <map>

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

  // The saved inputs: an activation an in-scope backward linear reads, as a GEMM operand (rank
  // >= 2, floating), that an in-scope forward linear read.
  std::map<TensorIndex, TensorIndex> fp8_copy;
  bool replaced = false;
  for (OpIndex o = 0; o < ops.size(); ++o) {
    Op& op = ops[o];
    if (op.phase != Phase::backward || !in_float8_scope(scope, op)) continue;
    for (TensorIndex& input : op.inputs) {
      const Tensor& x = trace.tensor(input);
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

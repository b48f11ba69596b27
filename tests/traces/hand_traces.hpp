#pragma once
// Small hand-made traces whose sizes and peaks can be computed by hand in the tests.

#include <string>
#include <vector>

#include "comptrain/traces/trace.hpp"

namespace comptrain::traces::testing {

// Collects tensors and ops with dense ids; bytes are chosen through u8 shapes.
struct HandTrace {
  std::vector<Tensor> tensors;
  std::vector<Op> ops;

  TensorIndex tensor(const std::string& name, std::int64_t bytes, TensorRole role = TensorRole::temporary) {
    Tensor t;
    t.id = tensors.size();
    t.name = name;
    t.dtype = DType::u8;
    t.shape = {bytes};
    t.role = role;
    tensors.push_back(t);
    return tensors.size() - 1;
  }
  TensorIndex view(const std::string& name, TensorIndex base) {
    Tensor t = tensors.at(base);
    t.id = tensors.size();
    t.name = name;
    t.view_of = base;
    tensors.push_back(t);
    return tensors.size() - 1;
  }
  OpIndex op(const std::string& name, std::vector<TensorIndex> inputs, std::vector<TensorIndex> outputs,
             Phase phase = Phase::forward) {
    Op o;
    o.id = ops.size();
    o.name = name;
    o.phase = phase;
    o.kind = OpKind::other;
    o.inputs = std::move(inputs);
    o.outputs = std::move(outputs);
    ops.push_back(o);
    return ops.size() - 1;
  }
  Trace build(std::int64_t batch = 1) const { return Trace("hand", batch, tensors, ops); }
};

}  // namespace comptrain::traces::testing

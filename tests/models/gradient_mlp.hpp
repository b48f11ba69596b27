#pragma once
// A hand-built MLP with gradient statistics, shared by the error model's tests
// (tests/models/gradient_error_test.cpp) and the adaptive-bound scenario tests
// (tests/sim/adaptive_bound_test.cpp).

#include <optional>
#include <string>
#include <vector>

#include "comptrain/traces/trace.hpp"

namespace comptrain::test_support {

// Batch 4; every tensor [4, 250] f32 (1000 values, 4000 B), batch dimension 0.
//   forward:  l1 (linear): x -> y1; r1 (relu, in place): y1 -> a1; l2 (linear): a1 -> y2;
//             sm (softmax): y2 -> p; l3 (linear): p -> y3; loss: y3 -> l
//   backward: l3 reads p, sm reads p (softmax saves its output), l2 reads a1, r1 reads a1.
// a1 (storage y1) is a conv/linear input also read by a ReLU's backward: covered. p is read by
// softmax's backward: its error enters the data path, not covered.
struct Mlp {
  std::vector<traces::Tensor> tensors;
  std::vector<traces::Op> ops;
  std::size_t y1 = 0, a1 = 0, p = 0;

  std::size_t tensor(const std::string& name, traces::TensorRole role, std::optional<std::size_t> view_of = std::nullopt) {
    traces::Tensor t;
    t.id = tensors.size();
    t.name = name;
    t.dtype = traces::DType::f32;
    t.shape = {4, 250};
    t.batch_dim = 0;
    t.role = role;
    t.view_of = view_of;
    tensors.push_back(t);
    return tensors.size() - 1;
  }
  void op(const std::string& name, traces::Phase phase, traces::OpKind kind, std::vector<std::size_t> in, std::vector<std::size_t> out) {
    traces::Op o;
    o.id = ops.size();
    o.name = name;
    o.phase = phase;
    o.kind = kind;
    o.inputs = std::move(in);
    o.outputs = std::move(out);
    o.flops.per_sample = 1000;
    o.bytes_read.per_sample = 1000;
    o.bytes_written.per_sample = 1000;
    ops.push_back(o);
  }
  Mlp() {
    using traces::OpKind;
    using traces::Phase;
    using traces::TensorRole;
    const auto x = tensor("x", TensorRole::input);
    y1 = tensor("y1", TensorRole::activation);
    a1 = tensor("a1", TensorRole::activation, y1);
    const auto y2 = tensor("y2", TensorRole::temporary);
    p = tensor("p", TensorRole::activation);
    const auto y3 = tensor("y3", TensorRole::temporary);
    const auto l = tensor("l", TensorRole::temporary);
    const auto g3 = tensor("g3", TensorRole::temporary), gp = tensor("gp", TensorRole::temporary), g2 = tensor("g2", TensorRole::temporary);
    const auto ga = tensor("ga", TensorRole::temporary), g1 = tensor("g1", TensorRole::temporary);
    const auto w = tensor("w.grad", TensorRole::gradient);
    op("l1", Phase::forward, OpKind::linear, {x}, {y1});
    op("r1", Phase::forward, OpKind::relu, {y1}, {a1});
    op("l2", Phase::forward, OpKind::linear, {a1}, {y2});
    op("sm", Phase::forward, OpKind::softmax, {y2}, {p});
    op("l3", Phase::forward, OpKind::linear, {p}, {y3});
    op("loss", Phase::forward, OpKind::loss, {y3}, {l});
    op("loss.backward", Phase::backward, OpKind::loss, {l}, {g3});
    op("l3.backward", Phase::backward, OpKind::linear, {g3, p}, {gp});
    op("sm.backward", Phase::backward, OpKind::softmax, {gp, p}, {g2});
    op("l2.backward", Phase::backward, OpKind::linear, {g2, a1}, {ga});
    op("r1.backward", Phase::backward, OpKind::relu, {ga, a1}, {g1});
    op("l1.backward", Phase::backward, OpKind::linear, {g1, x}, {w});
    // a1's saved content: half zeros, range 4; p: range 1.
    tensors[a1].values.zero_fraction = 0.5;
    tensors[a1].values.range = 4.0;
    tensors[p].values.range = 1.0;
    // l2's statistics on the tensor it reads; terms = batch x 1 (one row per sample).
    tensors[a1].gradient = {1e-3, 2e-3, 4.0, std::nullopt};
    tensors[p].gradient = {5e-4, 1e-3, 4.0, std::nullopt};
  }
  traces::Trace build() const { return traces::Trace("mlp", 4, tensors, ops); }
};

}  // namespace comptrain::test_support

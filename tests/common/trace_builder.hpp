#pragma once
// A small trace builder for tests: f32 1-D tensors of a given byte size, ops in recorded order.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "comptrain/traces/trace.hpp"

namespace comptrain::test_support {

class Builder {
 public:
  std::size_t tensor(std::string name, std::int64_t bytes, traces::TensorRole role) {
    traces::Tensor t;
    t.id = tensors_.size();
    t.name = std::move(name);
    t.dtype = traces::DType::f32;
    t.shape = {bytes / 4};
    t.role = role;
    tensors_.push_back(std::move(t));
    return tensors_.size() - 1;
  }
  // A tensor sharing `base`'s storage (an in-place op's output), of the same size and role.
  std::size_t view(std::string name, std::size_t base) {
    traces::Tensor t = tensors_.at(base);
    t.id = tensors_.size();
    t.name = std::move(name);
    t.view_of = base;
    t.values = {};
    tensors_.push_back(std::move(t));
    return tensors_.size() - 1;
  }
  traces::Tensor& at(std::size_t index) { return tensors_.at(index); }
  std::size_t op(std::string name, traces::Phase phase, traces::OpKind kind, std::vector<std::size_t> in, std::vector<std::size_t> out,
                 std::int64_t flops = 0) {
    traces::Op o;
    o.id = ops_.size();
    o.name = std::move(name);
    o.phase = phase;
    o.kind = kind;
    o.inputs = std::move(in);
    o.outputs = std::move(out);
    o.flops.fixed = flops;
    for (auto t : o.inputs) o.bytes_read.fixed += tensors_[t].bytes();
    for (auto t : o.outputs) o.bytes_written.fixed += tensors_[t].bytes();
    ops_.push_back(std::move(o));
    return ops_.size() - 1;
  }
  traces::Trace build(std::string name) { return traces::Trace(std::move(name), 1, tensors_, ops_); }

 private:
  std::vector<traces::Tensor> tensors_;
  std::vector<traces::Op> ops_;
};

}  // namespace comptrain::test_support

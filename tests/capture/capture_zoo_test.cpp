// The capture (traces/capture/comptrain_capture.py) against the model zoo: a real CPU training
// step recorded through PyTorch's dispatcher must agree with the zoo's generated trace on the
// parameter count exactly and on the bytes autograd saves for backward within 1 %.
//
// The capture is the ground truth. The one known, modelled difference: on the CPU PyTorch 1.13
// saves dropout masks as float32, the zoo models CUDA's 1-byte masks (traces/zoo/README.md,
// "What autograd saves"), so the capture's mask bytes are converted before comparing.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include <unistd.h>

#include "comptrain/traces/trace.hpp"
#include "comptrain/traces/trace_json.hpp"
#include "comptrain/zoo/zoo.hpp"

namespace comptrain::traces {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPython = "/usr/bin/python3";

bool torch_available() {
  static const bool available =
      std::system((std::string(kPython) + " -c 'import torch, torchvision' >/dev/null 2>&1").c_str()) == 0;
  return available;
}

// Runs the capture and reads its trace (which validates it), leaving no file behind.
Trace capture(const std::string& model, std::int64_t batch) {
  const fs::path dir = fs::temp_directory_path() / ("comptrain-capture-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path out = dir / (model + "-b" + std::to_string(batch) + ".json");
  const std::string command = std::string(kPython) + " " + COMPTRAIN_CAPTURE_SCRIPT + " " + model +
                              " --batch " + std::to_string(batch) + " -o " + out.string();
  if (std::system(command.c_str()) != 0) throw std::runtime_error("capture failed: " + command);
  Trace trace = read_trace_file(out);
  std::error_code ignored;
  fs::remove(out, ignored);
  fs::remove(dir, ignored);  // only when empty: tests may run in parallel
  return trace;
}

std::int64_t parameter_count(const Trace& trace) {
  std::int64_t count = 0;
  for (const auto& tensor : trace.tensors()) {
    if (tensor.role == TensorRole::weight && !tensor.is_view()) count += tensor.elements();
  }
  return count;
}

// What autograd keeps for backward, counted the way a saved-tensor hook does (as the zoo tests
// do): storages of forward state -- activations, the mini-batch, buffers -- that a backward op
// reads. Also the float32 dropout masks among them: activation storages written by a dropout
// op and read in the forward pass only by dropout ops (the `input * mask` product).
struct Saved {
  std::int64_t bytes = 0;
  std::int64_t mask_elements = 0;
};

Saved saved_for_backward(const Trace& trace) {
  const std::size_t n = trace.tensors().size();
  std::vector<bool> read_backward(n, false), read_forward_by_other(n, false);
  for (const auto& op : trace.ops()) {
    for (const auto input : op.inputs) {
      const TensorIndex storage = trace.storage_of(input);
      if (op.phase == Phase::backward) read_backward[storage] = true;
      if (op.phase == Phase::forward && op.kind != OpKind::dropout) read_forward_by_other[storage] = true;
    }
  }
  Saved saved;
  for (TensorIndex i = 0; i < n; ++i) {
    const Tensor& t = trace.tensor(i);
    const bool forward_state = t.role == TensorRole::activation || t.role == TensorRole::input || t.role == TensorRole::buffer;
    if (t.is_view() || !read_backward[i] || !forward_state) continue;
    saved.bytes += t.bytes();
    if (t.role == TensorRole::activation && t.dtype == DType::f32 && t.producer &&
        trace.op(*t.producer).kind == OpKind::dropout && !read_forward_by_other[i]) {
      saved.mask_elements += t.elements();
    }
  }
  return saved;
}

struct Case {
  const char* model;
  std::int64_t batch;
};

class CaptureVsZoo : public testing::TestWithParam<Case> {};

TEST_P(CaptureVsZoo, ParametersExactSavedBytesWithinOnePercent) {
  if (!torch_available()) GTEST_SKIP() << "torch/torchvision not importable from " << kPython << ": capture not tested";
  const auto [model, batch] = GetParam();
  const Trace captured = capture(model, batch);
  zoo::ModelRequest request;
  request.model = model;
  request.batch_size = batch;
  const Trace generated = zoo::build_model(request);

  EXPECT_EQ(parameter_count(captured), parameter_count(generated));

  const Saved cpu = saved_for_backward(captured);
  const std::int64_t as_cuda = cpu.bytes - 3 * cpu.mask_elements;  // float32 -> 1-byte masks
  const std::int64_t zoo_bytes = saved_for_backward(generated).bytes;
  const double difference = static_cast<double>(as_cuda - zoo_bytes) / static_cast<double>(zoo_bytes);
  std::cout << "[ capture ] " << model << " b" << batch << ": params " << parameter_count(captured)
            << ", saved (CPU) " << cpu.bytes << ", dropout mask elements " << cpu.mask_elements
            << ", saved (1-byte masks) " << as_cuda << ", zoo " << zoo_bytes << ", difference " << difference * 100
            << " %\n";
  EXPECT_LT(std::abs(difference), 0.01);

  // The capture rescales exactly, like any trace.
  EXPECT_EQ(captured.rescaled(batch + 3).rescaled(batch), captured);
}

INSTANTIATE_TEST_SUITE_P(Torchvision, CaptureVsZoo,
                         testing::Values(Case{"alexnet", 1}, Case{"alexnet", 2}, Case{"vgg16", 1}, Case{"vgg16", 2},
                                         Case{"resnet18", 1}, Case{"resnet18", 2}, Case{"resnet50", 1},
                                         Case{"resnet50", 2}),
                         [](const auto& param_info) {
                           return std::string(param_info.param.model) + "_b" + std::to_string(param_info.param.batch);
                         });

// The batch model of a capture is right: captured at batch 1 and rescaled to 3, the trace is
// the one captured at batch 3, tensor for tensor and op for op (the timings aside).
TEST(Capture, RescaledEqualsCapturedAtThatBatch) {
  if (!torch_available()) GTEST_SKIP() << "torch/torchvision not importable from " << kPython << ": capture not tested";
  const Trace rescaled = capture("resnet18", 1).rescaled(3);
  const Trace captured = capture("resnet18", 3);
  EXPECT_EQ(rescaled.tensors(), captured.tensors());
  ASSERT_EQ(rescaled.ops().size(), captured.ops().size());
  for (std::size_t i = 0; i < captured.ops().size(); ++i) {
    Op a = rescaled.op(i), b = captured.op(i);
    a.measured.reset();
    b.measured.reset();
    EXPECT_EQ(a, b) << a.name;
  }
}

}  // namespace
}  // namespace comptrain::traces

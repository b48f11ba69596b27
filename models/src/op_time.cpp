#include "comptrain/models/op_time.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>

#include "comptrain/support/input_error.hpp"

namespace comptrain::models {
namespace {

// The kinds cuBLAS/cuDNN run on tensor cores (and, for fp32, on TF32 tensor cores when
// allowed: torch.backends.{cuda.matmul,cudnn}.allow_tf32). A fused attention kernel is a pair
// of matmuls around a softmax.
constexpr bool uses_tensor_cores(traces::OpKind kind) {
  return kind == traces::OpKind::conv || kind == traces::OpKind::matmul || kind == traces::OpKind::linear ||
         kind == traces::OpKind::attention;
}

// Whether an op's work grows with the batch, so that a duration measured at one batch size
// scales to another. Work means FLOPs or bytes: an embedding lookup does no arithmetic yet
// moves one row per sample.
bool work_scales_with_batch(const traces::Op& op) {
  return op.flops.per_sample > 0 || op.bytes_read.per_sample > 0 || op.bytes_written.per_sample > 0;
}

// %g: short whatever the value (1e-300, inf), for messages.
std::string g(double value) {
  char buffer[32];
  const int n = std::snprintf(buffer, sizeof buffer, "%g", value);
  return std::string(buffer, n > 0 ? static_cast<std::size_t>(n) : 0);
}

std::string op_label(const traces::Trace& trace, traces::OpIndex index) {
  return "op " + std::to_string(index) + " (" + trace.op(index).name + ")";
}

// The last line of defence: parse_platform and the trace readers bound every input so that
// this cannot trigger, but a hand-built platform or trace can still produce an infinite or
// negative duration, and the simulator must never receive one (SimGrid aborts or deadlocks).
double checked(double seconds, const traces::Trace& trace, traces::OpIndex index, const std::string& inputs) {
  if (std::isfinite(seconds) && seconds >= 0) return seconds;
  throw InputError(op_label(trace, index) + ": the modeled duration is " + g(seconds) + " s, from " + inputs +
                   "; expected a finite number of seconds >= 0 (check the platform's peaks, bandwidth and efficiencies, "
                   "and the trace's measured durations)");
}

}  // namespace

OpTimeModel::OpTimeModel(Platform platform, OpTimeOptions options) : platform_(std::move(platform)), options_(options) {
  // parse_platform guarantees these; a hand-built Platform might not, and a zero would turn
  // every time into infinity far from the cause.
  const GpuSpec& gpu = platform_.gpu;
  if (!(gpu.memory_bandwidth > 0) || !(gpu.peak_fp32 > 0) || !(gpu.peak_fp16 > 0) || !(gpu.peak_tf32 >= 0) || !(gpu.peak_bf16 >= 0) ||
      !(gpu.launch_overhead >= 0)) {
    throw std::invalid_argument("platform '" + platform_.name + "': the op-time model needs positive GPU peaks and memory bandwidth");
  }
  if (!std::isfinite(gpu.memory_bandwidth) || !std::isfinite(gpu.peak_fp32) || !std::isfinite(gpu.peak_fp16) ||
      !std::isfinite(gpu.peak_tf32) || !std::isfinite(gpu.peak_bf16) || !std::isfinite(gpu.launch_overhead)) {
    throw std::invalid_argument("platform '" + platform_.name + "': the op-time model needs finite GPU peaks, bandwidth and launch overhead");
  }
}

double OpTimeModel::seconds(const traces::Trace& trace, traces::OpIndex index) const {
  const traces::Op& op = trace.op(index);
  // A view only reinterprets storage: no kernel runs.
  if (op.kind == traces::OpKind::view) return 0.0;

  // Measured durations are wall times of the op's kernels, launch included. They apply only
  // on the very device they were measured on (exact name, as torch.cuda.get_device_name()
  // reports it): a duration from another GPU says little about this one.
  if (op.measured && op.measured->device == platform_.gpu.name) {
    const std::string inputs = "a duration of " + g(op.measured->seconds) + " s measured on " + op.measured->device + " at batch size " +
                               std::to_string(op.measured->batch_size);
    if (!work_scales_with_batch(op)) return checked(op.measured->seconds, trace, index, inputs);
    return checked(op.measured->seconds * static_cast<double>(trace.batch_size()) / static_cast<double>(op.measured->batch_size), trace,
                   index, inputs + ", scaled to batch size " + std::to_string(trace.batch_size()));
  }

  const double flops = static_cast<double>(trace.flops(index));
  const double bytes = static_cast<double>(trace.bytes_read(index)) + static_cast<double>(trace.bytes_written(index));
  // Nothing computed and nothing moved (a no-op, or an op whose cost the trace does not
  // know): no kernel to launch either.
  if (flops == 0 && bytes == 0) return 0.0;

  const traces::DType dtype = arithmetic_dtype(trace, index);
  // Tensor-core peaks (TF32, FP16, BF16 in the platform) apply to the kinds that use tensor
  // cores; everything else runs on the CUDA cores, whose rate we take as the fp32 peak for
  // every floating type (a lower bound for half precision, which some GPUs pack 2 per lane).
  const double peak = uses_tensor_cores(op.kind) ? platform_.peak_flops(dtype, options_.allow_tf32)
                      : dtype == traces::DType::f64 ? platform_.peak_flops(dtype, false)
                                                     : platform_.gpu.peak_fp32;
  const double compute_efficiency = platform_.efficiency.compute_for(op.kind);
  const double memory_efficiency = platform_.efficiency.memory_for(op.kind);
  const double compute = flops / (peak * compute_efficiency);
  const double memory = bytes / (platform_.gpu.memory_bandwidth * memory_efficiency);
  const double seconds = std::max(compute, memory) + platform_.gpu.launch_overhead;
  if (std::isfinite(seconds) && seconds >= 0) return seconds;
  return checked(seconds, trace, index,
                 g(flops) + " FLOP at " + g(peak) + " FLOP/s x compute efficiency " + g(compute_efficiency) + " and " + g(bytes) +
                     " bytes at " + g(platform_.gpu.memory_bandwidth) + " bytes/s x memory efficiency " + g(memory_efficiency) +
                     ", plus a launch overhead of " + g(platform_.gpu.launch_overhead) + " s (platform '" + platform_.name + "', " +
                     platform_.source + ")");
}

traces::DType arithmetic_dtype(const traces::Trace& trace, traces::OpIndex index) {
  const traces::Op& op = trace.op(index);
  for (const traces::TensorIndex t : op.outputs) {
    if (traces::is_floating(trace.tensor(t).dtype)) return trace.tensor(t).dtype;
  }
  for (const traces::TensorIndex t : op.inputs) {
    if (traces::is_floating(trace.tensor(t).dtype)) return trace.tensor(t).dtype;
  }
  return traces::DType::f32;
}

}  // namespace comptrain::models

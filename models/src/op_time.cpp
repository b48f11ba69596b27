#include "comptrain/models/op_time.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace comptrain::models {
namespace {

constexpr bool is_floating(traces::DType dtype) {
  return dtype == traces::DType::f64 || dtype == traces::DType::f32 || dtype == traces::DType::f16 || dtype == traces::DType::bf16;
}

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

}  // namespace

OpTimeModel::OpTimeModel(Platform platform, OpTimeOptions options) : platform_(std::move(platform)), options_(options) {
  // parse_platform guarantees these; a hand-built Platform might not, and a zero would turn
  // every time into infinity far from the cause.
  const GpuSpec& gpu = platform_.gpu;
  if (!(gpu.memory_bandwidth > 0) || !(gpu.peak_fp32 > 0) || !(gpu.peak_fp16 > 0) || gpu.peak_tf32 < 0 || gpu.peak_bf16 < 0 ||
      !(gpu.launch_overhead >= 0)) {
    throw std::invalid_argument("platform '" + platform_.name + "': the op-time model needs positive GPU peaks and memory bandwidth");
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
    if (!work_scales_with_batch(op)) return op.measured->seconds;
    return op.measured->seconds * static_cast<double>(trace.batch_size()) / static_cast<double>(op.measured->batch_size);
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
  const double compute = flops / (peak * platform_.efficiency.compute_for(op.kind));
  const double memory = bytes / (platform_.gpu.memory_bandwidth * platform_.efficiency.memory_for(op.kind));
  return std::max(compute, memory) + platform_.gpu.launch_overhead;
}

traces::DType arithmetic_dtype(const traces::Trace& trace, traces::OpIndex index) {
  const traces::Op& op = trace.op(index);
  for (const traces::TensorIndex t : op.outputs) {
    if (is_floating(trace.tensor(t).dtype)) return trace.tensor(t).dtype;
  }
  for (const traces::TensorIndex t : op.inputs) {
    if (is_floating(trace.tensor(t).dtype)) return trace.tensor(t).dtype;
  }
  return traces::DType::f32;
}

}  // namespace comptrain::models

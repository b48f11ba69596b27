#pragma once
// How long one op takes on the modeled GPU.

#include "comptrain/models/kernel_power.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::models {

struct OpTimeOptions {
  bool allow_tf32 = false;  // fp32 convolutions and matmuls on TF32 tensor cores
  // Activations stored channels-last (NHWC, torch.channels_last) rather than PyTorch's default
  // contiguous NCHW. cuDNN's tensor-core convolutions work in NHWC: on NCHW tensors each
  // convolution that runs on tensor cores is wrapped in transpose kernels (models/README.md,
  // "Memory format").
  bool channels_last = false;
};

// Roofline: max(FLOPs / (peak · compute efficiency), bytes / (bandwidth · memory efficiency))
// plus the kernel launch overhead; an op that carries a duration measured on this platform's
// GPU (same device name) uses it instead, scaled linearly from the batch it was measured at.
// The bytes are those PyTorch's CUDA kernels move for the op's kind and phase (a batch norm
// reads its input twice, a gather reads only the rows it picks), derived from the trace's
// logical bytes and tensors by a per-kind table in op_time.cpp (models/README.md, "Kernel
// traffic"). For GEMM-like kinds (linear, matmul, conv, attention) on a platform that gives
// gpu.sms, the compute efficiency is also multiplied by the share of SM-slots the op's output
// tiles fill in their waves, its GEMM shape read from the tensors it writes (models/README.md,
// "Wave quantization"); a small GEMM leaves most SMs idle. A convolution on tensor cores over
// NCHW tensors (OpTimeOptions::channels_last false) adds the transposes cuDNN runs around it:
// separate kernels that read and write every tensor the convolution reads and writes, at the
// memory roofline, each with its own launch.
// Under a power limit each of these kernels runs as kernel_power.hpp says: one that would draw more
// than the cap is slowed until it draws the cap, one that would not keeps its time. A measured
// duration is kept as it is (its power is not known: 0 W, the replay's busy power).
class OpTimeModel {
 public:
  OpTimeModel(Platform platform, OpTimeOptions options = {});
  double seconds(const traces::Trace& trace, traces::OpIndex op) const { return run(trace, op).seconds; }
  // The op's duration, the power its kernels draw (their time-weighted mean; 0 when unknown) and
  // the clock the compute kernel runs at.
  KernelRun run(const traces::Trace& trace, traces::OpIndex op) const;
  const Platform& platform() const { return platform_; }

 private:
  Platform platform_;
  OpTimeOptions options_;
};

// The dtype whose peak an op's arithmetic runs at: that of its first floating-point output,
// else of its first floating-point input, else fp32.
traces::DType arithmetic_dtype(const traces::Trace& trace, traces::OpIndex op);

}  // namespace comptrain::models

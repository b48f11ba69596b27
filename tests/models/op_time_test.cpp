#include "comptrain/models/op_time.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "comptrain/support/input_error.hpp"
#include "comptrain/zoo/zoo.hpp"

namespace comptrain::models {
namespace {

using ::testing::HasSubstr;
using traces::BatchLinear;
using traces::DType;
using traces::MeasuredDuration;
using traces::OpKind;

// Round numbers so that every expected time below is exact arithmetic:
// fp32 10, tf32 80, fp16 160 TFLOP/s, no bf16; 1 TB/s; 5 us per kernel;
// compute efficiency 0.5 (0.8 for linear), memory efficiency 0.5.
Platform test_platform(const std::string& launch_overhead = "5 us") {
  return parse_platform(
      "name: test\n"
      "gpu:\n"
      "  name: Test GPU\n"
      "  memory: 16 GiB\n"
      "  memory_bandwidth: 1 TB/s\n"
      "  peak: {fp32: 10 TFLOP/s, tf32: 80 TFLOP/s, fp16: 160 TFLOP/s, bf16: 0}\n"
      "  launch_overhead: " + launch_overhead + "\n"
      "host: {name: Test host, cores: 8, flops: 1 TFLOP/s, memory: 64 GiB, memory_bandwidth: 100 GB/s}\n"
      "host_link: {name: PCIe, bandwidth: 25 GB/s, latency: 1 us}\n"
      "efficiency:\n"
      "  compute: {default: 0.5, linear: 0.8}\n"
      "  memory: {default: 0.5}\n",
      "test.yaml");
}

struct OneOp {
  OpKind kind = OpKind::linear;
  DType input = DType::f32;
  DType output = DType::f32;
  BatchLinear flops;
  BatchLinear bytes_read;
  BatchLinear bytes_written;
  std::optional<MeasuredDuration> measured;
  std::int64_t batch = 4;
};

// x [batch, 8] -> op -> y [batch, 8]: one forward op and nothing else.
traces::Trace one_op_trace(const OneOp& spec) {
  std::vector<traces::Tensor> tensors(2);
  tensors[0].id = 1;
  tensors[0].name = "x";
  tensors[0].dtype = spec.input;
  tensors[0].shape = {spec.batch, 8};
  tensors[0].role = traces::TensorRole::input;
  tensors[0].batch_dim = 0;
  tensors[1].id = 2;
  tensors[1].name = "y";
  tensors[1].dtype = spec.output;
  tensors[1].shape = {spec.batch, 8};
  tensors[1].role = traces::TensorRole::temporary;
  tensors[1].batch_dim = 0;
  traces::Op op;
  op.id = 1;
  op.name = "op";
  op.kind = spec.kind;
  op.inputs = {0};
  op.outputs = {1};
  op.flops = spec.flops;
  op.bytes_read = spec.bytes_read;
  op.bytes_written = spec.bytes_written;
  op.measured = spec.measured;
  return traces::Trace("one-op", spec.batch, std::move(tensors), {std::move(op)});
}

double seconds(const OneOp& spec, bool allow_tf32 = false, const Platform& platform = test_platform()) {
  OpTimeOptions options;
  options.allow_tf32_matmul = allow_tf32;
  options.allow_tf32_cudnn = allow_tf32;
  return OpTimeModel(platform, options).seconds(one_op_trace(spec), 0);
}

// 4 TFLOP at batch 4 and 4 MB moved: compute-bound everywhere below.
OneOp compute_bound(OpKind kind, DType dtype) {
  OneOp spec;
  spec.kind = kind;
  spec.input = dtype;
  spec.output = dtype;
  spec.flops = {0, 1'000'000'000'000};
  spec.bytes_read = {0, 500'000};
  spec.bytes_written = {0, 500'000};
  return spec;
}

TEST(OpTime, ComputeBoundFp32) {
  // 4e12 FLOP / (10e12 FLOP/s x 0.8) = 0.5 s; memory 4e6 B / (1e12 B/s x 0.5) = 8 us.
  EXPECT_DOUBLE_EQ(seconds(compute_bound(OpKind::linear, DType::f32)), 0.5 + 5e-6);
}

TEST(OpTime, Tf32AppliesToTensorCoreKindsOnly) {
  // 4e12 / (80e12 x 0.8) = 62.5 ms with TF32 tensor cores.
  EXPECT_DOUBLE_EQ(seconds(compute_bound(OpKind::linear, DType::f32), true), 0.0625 + 5e-6);
  EXPECT_DOUBLE_EQ(seconds(compute_bound(OpKind::linear, DType::f32), false), 0.5 + 5e-6);
  // A relu never runs on tensor cores: 4e12 / (10e12 x 0.5) = 0.8 s either way.
  EXPECT_DOUBLE_EQ(seconds(compute_bound(OpKind::relu, DType::f32), true), 0.8 + 5e-6);
}

TEST(OpTime, Fp16UsesTheTensorCorePeak) {
  // 4e12 / (160e12 x 0.8) = 31.25 ms.
  EXPECT_DOUBLE_EQ(seconds(compute_bound(OpKind::linear, DType::f16)), 0.03125 + 5e-6);
  // Off the tensor cores half precision runs at the CUDA-core (fp32) rate.
  EXPECT_DOUBLE_EQ(seconds(compute_bound(OpKind::relu, DType::f16)), 0.8 + 5e-6);
}

// efficiency.tensor_core scales ops on tensor cores only: fp16 and TF32 GEMMs, not fp32 on the
// CUDA cores, not other kinds.
TEST(OpTime, TensorCoreShareAppliesOnTensorCoresOnly) {
  Platform p = test_platform();
  p.efficiency.tensor_core = 0.5;
  EXPECT_DOUBLE_EQ(seconds(compute_bound(OpKind::linear, DType::f16), false, p), 2 * 0.03125 + 5e-6);
  EXPECT_DOUBLE_EQ(seconds(compute_bound(OpKind::linear, DType::f32), true, p), 2 * 0.0625 + 5e-6);
  EXPECT_DOUBLE_EQ(seconds(compute_bound(OpKind::linear, DType::f32), false, p), 0.5 + 5e-6);
  EXPECT_DOUBLE_EQ(seconds(compute_bound(OpKind::relu, DType::f16), false, p), 0.8 + 5e-6);
}

// The tensor-core share follows the kernels that run (models/README.md, "Kernel ceilings"): on
// Hopper a toolkit before CUDA 12 (no wgmma) and the attention kernel move it; on other GPUs
// neither does.
TEST(OpTime, TensorCoreShareFollowsTheToolkitAndTheAttentionKernelOnHopper) {
  Platform hopper = test_platform();
  hopper.gpu.compute_capability_major = 9;
  hopper.efficiency.tensor_core = 0.9;
  OpTimeOptions current;  // CUDA not given: a current toolkit
  EXPECT_DOUBLE_EQ(tensor_core_share(hopper, current, OpKind::linear), 0.9);
  EXPECT_DOUBLE_EQ(tensor_core_share(hopper, current, OpKind::attention), 35.0 / 70.0);  // FlashAttention-2
  OpTimeOptions cudnn;
  cudnn.attention_kernel = AttentionKernel::cudnn;
  cudnn.cuda_major = 12;
  EXPECT_DOUBLE_EQ(tensor_core_share(hopper, cudnn, OpKind::attention), 75.0 / 70.0);
  EXPECT_DOUBLE_EQ(tensor_core_share(hopper, cudnn, OpKind::matmul), 0.9);
  OpTimeOptions fa3 = cudnn;
  fa3.attention_kernel = AttentionKernel::flash_attention_3;
  EXPECT_DOUBLE_EQ(tensor_core_share(hopper, fa3, OpKind::attention), 75.0 / 70.0);
  // CUDA 11: without wgmma, 2/3 of the share, or the platform's own value for that toolkit.
  OpTimeOptions cuda11;
  cuda11.cuda_major = 11;
  EXPECT_DOUBLE_EQ(tensor_core_share(hopper, cuda11, OpKind::linear), 0.9 * 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(tensor_core_share(hopper, cuda11, OpKind::attention), 0.9 * 2.0 / 3.0);
  hopper.efficiency.tensor_core_cuda11 = 0.5;
  EXPECT_DOUBLE_EQ(tensor_core_share(hopper, cuda11, OpKind::linear), 0.5);
  // An Ampere GPU: the platform's share whatever the toolkit and the kernel.
  Platform ampere = hopper;
  ampere.gpu.compute_capability_major = 8;
  for (const OpTimeOptions& o : {current, cudnn, cuda11}) {
    EXPECT_DOUBLE_EQ(tensor_core_share(ampere, o, OpKind::linear), 0.9);
    EXPECT_DOUBLE_EQ(tensor_core_share(ampere, o, OpKind::attention), 0.9);
  }
  // The op's time uses it: an fp16 linear on Hopper under CUDA 11 takes 1 / 0.5 of the time it
  // takes at a share of 1 (compute-bound: 0.03125 s at 160 TFLOP/s x 0.8).
  EXPECT_DOUBLE_EQ(OpTimeModel(hopper, cuda11).seconds(one_op_trace(compute_bound(OpKind::linear, DType::f16)), 0), 0.03125 / 0.5 + 5e-6);
}

TEST(OpTime, AttentionKernelNamesRoundTrip) {
  for (const AttentionKernel k : {AttentionKernel::flash_attention_2, AttentionKernel::flash_attention_3, AttentionKernel::cudnn}) {
    EXPECT_EQ(parse_attention_kernel(to_string(k)), k);
  }
  EXPECT_EQ(parse_attention_kernel("flash"), std::nullopt);
}

// PyTorch's two TF32 flags: cuDNN's moves a convolution to the TF32 peak, the matmul one a
// linear; neither moves the other's op.
TEST(OpTime, Tf32FlagsMoveTheirOwnKinds) {
  const auto on = [](OpKind kind, bool matmul, bool cudnn) {
    OpTimeOptions options;
    options.allow_tf32_matmul = matmul;
    options.allow_tf32_cudnn = cudnn;
    options.channels_last = true;
    return OpTimeModel(test_platform(), options).seconds(one_op_trace(compute_bound(kind, DType::f32)), 0);
  };
  EXPECT_LT(on(OpKind::conv, false, true), on(OpKind::conv, false, false));
  EXPECT_DOUBLE_EQ(on(OpKind::conv, true, false), on(OpKind::conv, false, false));
  EXPECT_LT(on(OpKind::linear, true, false), on(OpKind::linear, false, false));
  EXPECT_DOUBLE_EQ(on(OpKind::linear, false, true), on(OpKind::linear, false, false));
}

// cuDNN transposes NCHW tensors around a tensor-core convolution: one read and one write of the
// 4 MB the op moves, at 1e12 B/s x 0.5 (16 us), plus a launch per tensor (x and y: 2 x 5 us). The
// test platform gives no SMs, so no SM clock: the memory roofline alone, for 16 bits as for 32
// (LayoutTransposesRunAtTheSlowerOfMemoryAndTheSmsElementRate has the SMs' limit).
TEST(OpTime, TensorCoreConvolutionsOnNchwPayForTheTransposes) {
  const auto conv_seconds = [](DType dtype, bool tf32, bool channels_last) {
    OpTimeOptions options;
    options.allow_tf32_cudnn = tf32;
    options.channels_last = channels_last;
    return OpTimeModel(test_platform(), options).seconds(one_op_trace(compute_bound(OpKind::conv, dtype)), 0);
  };
  const double transposes = 2 * 4e6 / (1e12 * 0.5) + 2 * 5e-6;
  EXPECT_NEAR(conv_seconds(DType::f16, false, false) - conv_seconds(DType::f16, false, true), transposes, 1e-12);
  EXPECT_NEAR(conv_seconds(DType::f32, true, false) - conv_seconds(DType::f32, true, true), transposes, 1e-12);
  // fp32 on the CUDA cores and every other kind are untouched by the memory format.
  EXPECT_DOUBLE_EQ(conv_seconds(DType::f32, false, false), conv_seconds(DType::f32, false, true));
  OpTimeOptions nchw;
  EXPECT_DOUBLE_EQ(OpTimeModel(test_platform(), nchw).seconds(one_op_trace(compute_bound(OpKind::linear, DType::f16)), 0),
                   seconds(compute_bound(OpKind::linear, DType::f16)));
}

// The transposes' pace: the memory roofline, or the elements the SMs move per clock (2.6 per SM
// and clock), whichever is slower; the SM clock derived from the fp32 peak.
TEST(OpTime, LayoutTransposesRunAtTheSlowerOfMemoryAndTheSmsElementRate) {
  EXPECT_EQ(fp32_lanes_per_sm(7, 0), 64);  // V100
  EXPECT_EQ(fp32_lanes_per_sm(8, 0), 64);  // A100
  EXPECT_EQ(fp32_lanes_per_sm(8, 6), 128);
  EXPECT_EQ(fp32_lanes_per_sm(9, 0), 128);  // H100
  EXPECT_EQ(fp32_lanes_per_sm(5, 2), 128);  // Maxwell
  EXPECT_EQ(fp32_lanes_per_sm(6, 0), 64);
  EXPECT_EQ(fp32_lanes_per_sm(0, 0), 0);
  EXPECT_EQ(fp32_lanes_per_sm(3, 5), 0);

  GpuSpec a100;
  a100.peak_fp32 = 19.5e12;
  a100.sms = 108;
  a100.compute_capability_major = 8;
  a100.memory_bandwidth = 2.039e12;
  const double clock = 19.5e12 / (108 * 64 * 2.0);  // 1.41 GHz, the A100's boost clock
  EXPECT_DOUBLE_EQ(sm_clock_hz(a100), clock);
  // 1 GB of fp16 (5e8 elements): the memory roofline at 0.8 takes 1.23 ms, the SMs 2.53 ms.
  const double memory = 2e9 / (2.039e12 * 0.8);
  const double issue_f16 = 2 * 5e8 / (108 * clock * 2.6);
  EXPECT_DOUBLE_EQ(layout_transpose_seconds(a100, 0.8, 1e9, DType::f16), issue_f16);
  EXPECT_GT(issue_f16, 2 * memory);
  // 1 GB of fp32 (2.5e8 elements): about as long either way; the slower one.
  EXPECT_DOUBLE_EQ(layout_transpose_seconds(a100, 0.8, 1e9, DType::f32), std::max(memory, 2 * 2.5e8 / (108 * clock * 2.6)));
  // A GPU whose bandwidth is low for its SMs stays at the memory roofline.
  GpuSpec slow_memory = a100;
  slow_memory.memory_bandwidth = 0.2e12;
  EXPECT_DOUBLE_EQ(layout_transpose_seconds(slow_memory, 0.8, 1e9, DType::f16), 2e9 / (0.2e12 * 0.8));
  // Without the SMs or the compute capability no clock is known: the memory roofline alone.
  GpuSpec unknown = a100;
  unknown.sms = 0;
  EXPECT_EQ(sm_clock_hz(unknown), 0);
  EXPECT_DOUBLE_EQ(layout_transpose_seconds(unknown, 0.8, 1e9, DType::f16), memory);
  unknown = a100;
  unknown.compute_capability_major = 0;
  EXPECT_DOUBLE_EQ(layout_transpose_seconds(unknown, 0.8, 1e9, DType::f16), memory);
  EXPECT_DOUBLE_EQ(layout_transpose_seconds(a100, 0.8, 0, DType::f16), 0);
}

// A linear op of 16-bit tensors: x [4, 1024] (an activation) times W [1024, 1024] (a weight) in
// the forward pass, or the backward's g, x and W; compute-bound at 4 PFLOP (1 a sample, batch 4).
traces::Tensor f16_tensor(std::uint64_t id, const char* name, std::vector<std::int64_t> shape, traces::TensorRole role) {
  traces::Tensor t;
  t.id = id;
  t.name = name;
  t.dtype = DType::f16;
  t.shape = std::move(shape);
  t.role = role;
  return t;
}

traces::Trace linear_trace(traces::Phase phase, const std::string& name = "layers.0.mlp") {
  const auto tensor = f16_tensor;
  // The input is saved for the backward op only where there is one.
  const traces::TensorRole input = phase == traces::Phase::forward ? traces::TensorRole::input : traces::TensorRole::activation;
  std::vector<traces::Tensor> tensors = {tensor(1, "x", {4, 1024}, input),
                                         tensor(2, "w", {1024, 1024}, traces::TensorRole::weight),
                                         tensor(3, "b", {1024}, traces::TensorRole::weight),
                                         tensor(4, "y_or_g", {4, 1024}, traces::TensorRole::temporary),
                                         tensor(5, "grad_x", {4, 1024}, traces::TensorRole::temporary),
                                         tensor(6, "grad_w", {1024, 1024}, traces::TensorRole::gradient)};
  traces::Op op;
  op.id = 1;
  op.name = phase == traces::Phase::forward ? name : name + ".backward";
  op.phase = phase;
  op.kind = OpKind::linear;
  if (phase == traces::Phase::forward) {
    op.inputs = {0, 1, 2};
    op.outputs = {3};
  } else {
    op.inputs = {3, 0, 1};
    op.outputs = {4, 5};
  }
  op.flops = {0, 1'000'000'000'000'000};
  op.bytes_read = {0, 4'000'000};
  op.bytes_written = {0, 4'000'000};
  return traces::Trace("linear", 4, std::move(tensors), {std::move(op)});
}

Platform fp8_platform() {
  return parse_platform(
      "name: fp8\n"
      "gpu:\n"
      "  name: FP8 GPU\n"
      "  memory: 16 GiB\n"
      "  memory_bandwidth: 1 TB/s\n"
      "  peak: {fp32: 10 TFLOP/s, tf32: 80 TFLOP/s, fp16: 160 TFLOP/s, bf16: 160 TFLOP/s, fp8: 320 TFLOP/s}\n"
      "  launch_overhead: 5 us\n"
      "host: {name: Test host, cores: 8, flops: 1 TFLOP/s, memory: 64 GiB, memory_bandwidth: 100 GB/s}\n"
      "host_link: {name: PCIe, bandwidth: 25 GB/s, latency: 1 us}\n"
      "efficiency:\n"
      "  compute: {default: 0.5, linear: 0.8}\n"
      "  memory: {default: 0.5}\n",
      "fp8.yaml");
}

TEST(OpTime, Float8LinearsRunTheirGemmsAtTheFp8PeakAfterTheirCasts) {
  OpTimeOptions eager;
  OpTimeOptions float8;
  float8.float8 = Float8Scope{{"output"}};
  const auto time = [](const OpTimeOptions& options, const traces::Trace& trace) { return OpTimeModel(fp8_platform(), options).seconds(trace, 0); };
  const double x = 4 * 1024;
  const double w = 1024 * 1024;
  const double launch = 5e-6;
  const double bandwidth = 1e12 * 0.5;
  // Forward: the GEMM at twice the 16-bit rate; x and W each an amax (2 bytes an element read) and
  // a cast (2 read, 1 written), two kernels each. The rank-1 bias is no GEMM operand.
  const traces::Trace forward = linear_trace(traces::Phase::forward);
  EXPECT_DOUBLE_EQ(time(eager, forward), 4e15 / (160e12 * 0.8) + launch);
  EXPECT_NEAR(time(float8, forward), 4e15 / (320e12 * 0.8) + launch + 5 * (x + w) / bandwidth + 4 * launch, 1e-12);
  // Backward: the output gradient (role temporary) cast twice, row- and column-major, after one
  // amax; the saved input and the weight once each: 8 + 5 + 5 bytes an element, 3 + 2 + 2 kernels.
  const traces::Trace backward = linear_trace(traces::Phase::backward);
  EXPECT_NEAR(time(float8, backward), 4e15 / (320e12 * 0.8) + launch + (8 * x + 5 * x + 5 * w) / bandwidth + 7 * launch, 1e-12);
  // A skipped module's linears and every other kind keep their 16-bit time.
  EXPECT_DOUBLE_EQ(time(float8, linear_trace(traces::Phase::forward, "output")), time(eager, linear_trace(traces::Phase::forward, "output")));
  EXPECT_TRUE(in_float8_scope(*float8.float8, forward.op(0)));
  EXPECT_FALSE(in_float8_scope(*float8.float8, linear_trace(traces::Phase::backward, "output").op(0)));
  OneOp matmul = compute_bound(OpKind::matmul, DType::f16);
  EXPECT_DOUBLE_EQ(OpTimeModel(fp8_platform(), float8).seconds(one_op_trace(matmul), 0), OpTimeModel(fp8_platform(), eager).seconds(one_op_trace(matmul), 0));
}

// With FSDP's float8 all-gather (Float8Scope::fsdp_all_gather) the weight arrives in float8: the
// forward casts only the input (5 bytes an element, 2 kernels), the backward transposes the weight
// (1 byte read, 1 written, 1 kernel) instead of its amax and cast.
TEST(OpTime, Float8WeightsGatheredInFloat8AreNotCastAgain) {
  OpTimeOptions float8;
  float8.float8 = Float8Scope{{"output"}, true};
  const auto time = [&](const traces::Trace& trace) { return OpTimeModel(fp8_platform(), float8).seconds(trace, 0); };
  const double x = 4 * 1024;
  const double w = 1024 * 1024;
  const double launch = 5e-6;
  const double bandwidth = 1e12 * 0.5;
  EXPECT_NEAR(time(linear_trace(traces::Phase::forward)), 4e15 / (320e12 * 0.8) + launch + 5 * x / bandwidth + 2 * launch, 1e-12);
  EXPECT_NEAR(time(linear_trace(traces::Phase::backward)), 4e15 / (320e12 * 0.8) + launch + (8 * x + 5 * x + 2 * w) / bandwidth + 6 * launch, 1e-12);
}

// Transformer Engine's delayed scaling (Float8Recipe::delayed): each cast one kernel that reads the
// tensor and writes one byte an element (no amax pass); the weight with its transpose (two bytes)
// on the step's first micro-batch only, a share weight_casts_per_micro_step of it; backward, the
// output gradient with its transpose (two bytes) and the saved input's fp8 copy transposed (one
// byte read, one written); the weight's transpose came with its cast.
TEST(OpTime, Float8DelayedScalingCastsOnceWithoutAnAmaxPass) {
  OpTimeOptions delayed;
  delayed.float8 = Float8Scope{};
  delayed.float8->recipe = Float8Recipe::delayed;
  delayed.float8->weight_casts_per_micro_step = 0.25;
  const auto time = [&](const traces::Trace& trace) { return OpTimeModel(fp8_platform(), delayed).seconds(trace, 0); };
  const double x = 4 * 1024;
  const double w = 1024 * 1024;
  const double launch = 5e-6;
  const double bandwidth = 1e12 * 0.5;
  const double gemm = 4e15 / (320e12 * 0.8) + launch;
  EXPECT_NEAR(time(linear_trace(traces::Phase::forward)), gemm + (3 * x + 0.25 * 4 * w) / bandwidth + 1.25 * launch, 1e-12);
  EXPECT_NEAR(time(linear_trace(traces::Phase::backward)), gemm + (4 * x + 2 * x) / bandwidth + 2 * launch, 1e-12);
  EXPECT_EQ(to_string(Float8Recipe::delayed), "delayed");
  EXPECT_EQ(parse_float8_recipe("tensorwise"), Float8Recipe::tensorwise);
  EXPECT_FALSE(parse_float8_recipe("rowwise"));
}

// Under delayed scaling a linear that reads a norm's output (directly or through a communication
// op, the sequence-parallel all-gather) casts nothing: Transformer Engine's norm writes the fp8
// copy. Another input two linears read (q and k of one tensor) is cast once, by the first.
TEST(OpTime, Float8DelayedScalingTakesANormsFp8OutputAndCastsASharedInputOnce) {
  const auto tensor = f16_tensor;
  const auto op = [](std::uint64_t id, const char* name, OpKind kind, std::vector<traces::TensorIndex> in, std::vector<traces::TensorIndex> out,
                     std::int64_t flops) {
    traces::Op o;
    o.id = id;
    o.name = name;
    o.phase = traces::Phase::forward;
    o.kind = kind;
    o.inputs = std::move(in);
    o.outputs = std::move(out);
    o.flops = {0, flops};
    o.bytes_read = {0, 2048};
    o.bytes_written = {0, 2048};
    return o;
  };
  // a -> first (a norm, or an add) -> n -> q and k; with `gathered`, n is all-gathered first.
  const auto trace = [&](OpKind first, bool gathered) {
    std::vector<traces::Tensor> tensors = {tensor(1, "a", {4, 1024}, traces::TensorRole::input),
                                           tensor(2, "n", {4, 1024}, traces::TensorRole::temporary),
                                           tensor(3, "q.weight", {1024, 1024}, traces::TensorRole::weight),
                                           tensor(4, "k.weight", {1024, 1024}, traces::TensorRole::weight),
                                           tensor(5, "q.out", {4, 1024}, traces::TensorRole::temporary),
                                           tensor(6, "k.out", {4, 1024}, traces::TensorRole::temporary),
                                           tensor(7, "n.gathered", {4, 1024}, traces::TensorRole::temporary)};
    std::vector<traces::Op> ops = {op(1, "first", first, {0}, {1}, 0)};
    traces::TensorIndex read = 1;
    if (gathered) {
      traces::Op gather = op(2, "gather", OpKind::communication, {1}, {6}, 0);
      gather.communication = traces::Communication{traces::CommunicationKind::all_gather, traces::ParallelGroup::tensor};
      ops.push_back(std::move(gather));
      read = 6;
    }
    ops.push_back(op(3, "q", OpKind::linear, {read, 2}, {4}, 1'000'000'000'000'000));
    ops.push_back(op(4, "k", OpKind::linear, {read, 3}, {5}, 1'000'000'000'000'000));
    return traces::Trace("shared", 4, std::move(tensors), std::move(ops));
  };
  OpTimeOptions delayed;
  delayed.float8 = Float8Scope{};
  delayed.float8->recipe = Float8Recipe::delayed;
  delayed.float8->weight_casts_per_micro_step = 0;  // the weights' casts out of the way
  const OpTimeModel model(fp8_platform(), delayed);
  const double x = 4 * 1024;
  const double gemm = 4e15 / (320e12 * 0.8) + 5e-6;
  const double cast = 3 * x / (1e12 * 0.5) + 5e-6;
  for (const bool gathered : {false, true}) {
    const traces::Trace norm = trace(OpKind::layernorm, gathered);
    const traces::OpIndex q = gathered ? 2 : 1;
    EXPECT_NEAR(model.seconds(norm, q), gemm, 1e-12) << gathered;
    EXPECT_NEAR(model.seconds(norm, q + 1), gemm, 1e-12) << gathered;
    const traces::Trace add = trace(OpKind::elementwise, gathered);
    EXPECT_NEAR(model.seconds(add, q), gemm + cast, 1e-12) << gathered;
    EXPECT_NEAR(model.seconds(add, q + 1), gemm, 1e-12) << gathered;
  }
}

// A gradient a norm's backward made (a post-norm layer: the linear's output feeds the norm) is
// still the output gradient: cast with its transpose, not taken as a norm's fp8 output.
TEST(OpTime, Float8DelayedScalingCastsAGradientANormsBackwardMade) {
  std::vector<traces::Tensor> tensors = {f16_tensor(1, "y.grad.in", {4, 1024}, traces::TensorRole::temporary),
                                         f16_tensor(2, "y.grad", {4, 1024}, traces::TensorRole::temporary),
                                         f16_tensor(3, "x", {4, 1024}, traces::TensorRole::activation),
                                         f16_tensor(4, "w", {1024, 1024}, traces::TensorRole::weight),
                                         f16_tensor(5, "x.grad", {4, 1024}, traces::TensorRole::temporary)};
  traces::Op norm;
  norm.id = 1;
  norm.name = "norm.backward";
  norm.phase = traces::Phase::backward;
  norm.kind = OpKind::layernorm;
  norm.inputs = {0};
  norm.outputs = {1};
  norm.bytes_read = {0, 2048};
  norm.bytes_written = {0, 2048};
  traces::Op linear;
  linear.id = 2;
  linear.name = "dense.backward";
  linear.phase = traces::Phase::backward;
  linear.kind = OpKind::linear;
  linear.inputs = {1, 2, 3};
  linear.outputs = {4};
  linear.flops = {0, 1'000'000'000'000'000};
  linear.bytes_read = {0, 4'000'000};
  linear.bytes_written = {0, 4'000'000};
  const traces::Trace trace("post-norm", 4, std::move(tensors), {std::move(norm), std::move(linear)});
  OpTimeOptions delayed;
  delayed.float8 = Float8Scope{};
  delayed.float8->recipe = Float8Recipe::delayed;
  const double x = 4 * 1024;
  EXPECT_NEAR(OpTimeModel(fp8_platform(), delayed).seconds(trace, 1), 4e15 / (320e12 * 0.8) + 5e-6 + (4 * x + 2 * x) / (1e12 * 0.5) + 2 * 5e-6,
              1e-12);
}

TEST(OpTime, Float8NeedsAPlatformWithFp8) {
  OpTimeOptions float8;
  float8.float8 = Float8Scope{};
  try {
    OpTimeModel(test_platform(), float8);
    FAIL() << "a platform without gpu.peak.fp8 was accepted";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("gpu.peak.fp8"));
    EXPECT_THAT(e.what(), HasSubstr("training.float8"));
  }
  EXPECT_DOUBLE_EQ(fp8_platform().gpu.peak_fp8, 320e12);
  EXPECT_DOUBLE_EQ(test_platform().gpu.peak_fp8, 0);
}

TEST(OpTime, Bf16WithoutBf16UnitsRunsAtTheFp32Rate) {
  EXPECT_DOUBLE_EQ(seconds(compute_bound(OpKind::linear, DType::bf16)), 0.5 + 5e-6);
}

TEST(OpTime, MemoryBound) {
  OneOp spec;
  spec.kind = OpKind::relu;
  spec.flops = {0, 1'000'000};               // 4e6 FLOP: 0.8 us of compute
  spec.bytes_read = {0, 500'000'000};        // 2e9 B read
  spec.bytes_written = {1'000'000'000, 250'000'000};  // 2e9 B written, part fixed
  // 4e9 B / (1e12 B/s x 0.5) = 8 ms.
  EXPECT_DOUBLE_EQ(seconds(spec), 8e-3 + 5e-6);
}

TEST(OpTime, LaunchOverheadIsAddedToEveryKernel) {
  OneOp tiny;
  tiny.kind = OpKind::elementwise;
  tiny.bytes_read = {64, 0};
  const double with_overhead = seconds(tiny);
  const double without = seconds(tiny, false, test_platform("0"));
  EXPECT_DOUBLE_EQ(without, 64 / (1e12 * 0.5));
  EXPECT_DOUBLE_EQ(with_overhead - without, 5e-6);
}

TEST(OpTime, ViewsAndWorklessOpsCostNothing) {
  OneOp view = compute_bound(OpKind::view, DType::f32);
  EXPECT_EQ(seconds(view), 0.0);
  OneOp nothing;
  nothing.kind = OpKind::other;
  EXPECT_EQ(seconds(nothing), 0.0);
}

TEST(OpTime, MeasuredDurationOnThisDeviceIsUsedAndScaledWithTheBatch) {
  OneOp spec = compute_bound(OpKind::linear, DType::f32);
  spec.measured = MeasuredDuration{1e-3, "Test GPU", 2};
  // Measured at batch 2, the trace is at batch 4: twice as long; no launch overhead added.
  EXPECT_DOUBLE_EQ(seconds(spec), 2e-3);
  EXPECT_DOUBLE_EQ(seconds(spec, true), 2e-3) << "a measurement already reflects the math mode";

  const OpTimeModel model(test_platform());
  const traces::Trace trace = one_op_trace(spec);
  EXPECT_DOUBLE_EQ(model.seconds(trace.rescaled(8), 0), 4e-3);
  EXPECT_DOUBLE_EQ(model.seconds(trace.rescaled(1), 0), 0.5e-3);
}

TEST(OpTime, MeasuredDurationOfBatchIndependentWorkIsNotScaled) {
  OneOp spec;
  spec.kind = OpKind::optimizer_update;
  spec.flops = {1000, 0};
  spec.bytes_read = {4000, 0};
  spec.bytes_written = {4000, 0};
  spec.measured = MeasuredDuration{7e-6, "Test GPU", 2};
  EXPECT_DOUBLE_EQ(seconds(spec), 7e-6);
}

TEST(OpTime, MeasuredDurationScalesWhenOnlyTheBytesGrowWithTheBatch) {
  // An embedding lookup: no FLOPs, but one row per sample.
  OneOp spec;
  spec.kind = OpKind::embedding;
  spec.bytes_read = {0, 4096};
  spec.bytes_written = {0, 4096};
  spec.measured = MeasuredDuration{10e-6, "Test GPU", 1};
  EXPECT_DOUBLE_EQ(seconds(spec), 40e-6);
}

TEST(OpTime, MeasuredDurationFromAnotherDeviceIsIgnored) {
  OneOp spec = compute_bound(OpKind::linear, DType::f32);
  spec.measured = MeasuredDuration{1e-3, "NVIDIA A100-SXM4-40GB", 4};
  EXPECT_DOUBLE_EQ(seconds(spec), 0.5 + 5e-6);
  spec.measured->device = "test gpu";  // the match is exact, case included
  EXPECT_DOUBLE_EQ(seconds(spec), 0.5 + 5e-6);
}

// Elementwise and other CUDA-core kinds: the first floating output, else input, else fp32. The
// tensor-core kinds (a GEMM): its operands' dtype, whatever it writes (a bf16 GEMM accumulating into
// an fp32 main_grad runs on bf16 tensor cores).
TEST(OpTime, ArithmeticDtypeIsAGemmsOperandsElseTheFirstFloatingOutput) {
  struct Case {
    OpKind kind;
    DType input;
    DType output;
    DType arithmetic;
  };
  for (const Case& c : {Case{OpKind::elementwise, DType::f32, DType::f16, DType::f16}, Case{OpKind::elementwise, DType::bf16, DType::i64, DType::bf16},
                        Case{OpKind::elementwise, DType::i32, DType::boolean, DType::f32}, Case{OpKind::elementwise, DType::u8, DType::f64, DType::f64},
                        Case{OpKind::linear, DType::bf16, DType::f32, DType::bf16}, Case{OpKind::linear, DType::f32, DType::f16, DType::f32}}) {
    OneOp spec;
    spec.kind = c.kind;
    spec.input = c.input;
    spec.output = c.output;
    EXPECT_EQ(arithmetic_dtype(one_op_trace(spec), 0), c.arithmetic) << traces::to_string(c.kind) << " " << traces::to_string(c.input);
  }
}

TEST(OpTime, RejectsAPlatformWithoutPeaks) {
  EXPECT_THROW(OpTimeModel(Platform{}), std::invalid_argument);
}

TEST(OpTime, RejectsAPlatformWithInfinitePeaksOrBandwidth) {
  Platform platform = test_platform();
  platform.gpu.peak_fp16 = std::numeric_limits<double>::infinity();
  EXPECT_THROW(OpTimeModel{platform}, std::invalid_argument);
  platform = test_platform();
  platform.gpu.memory_bandwidth = std::numeric_limits<double>::infinity();
  EXPECT_THROW(OpTimeModel{platform}, std::invalid_argument);
}

// parse_platform bounds every value, so only a hand-built platform gets here; the simulator must
// still never receive an infinite duration (defects 06 and 07: "invalid duration", exit 1, or a
// SimGrid deadlock reported as a result). An InputError names the op and what made the time.
TEST(OpTime, ANonFiniteDurationIsAnInputErrorNamingTheOpAndItsInputs) {
  Platform platform = test_platform();
  platform.gpu.peak_fp32 = 1e-300;  // positive, so the constructor accepts it
  try {
    seconds(compute_bound(OpKind::linear, DType::f32), false, platform);
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("op 0 (op): the modeled duration is inf s, from 4e+12 FLOP at 1e-300 FLOP/s x compute efficiency 0.8"));
    EXPECT_THAT(e.what(), HasSubstr("platform 'test', test.yaml"));
  }

  platform = test_platform();
  platform.gpu.memory_bandwidth = 1e-306;
  try {
    seconds(compute_bound(OpKind::relu, DType::f32), false, platform);
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("op 0 (op): the modeled duration is inf s"));
    EXPECT_THAT(e.what(), HasSubstr("4e+06 bytes at 1e-306 bytes/s x memory efficiency 0.5"));
  }

  platform = test_platform();
  platform.efficiency.compute[OpKind::linear] = 0;  // an efficiency parse_platform refuses
  EXPECT_THROW(seconds(compute_bound(OpKind::linear, DType::f32), false, platform), InputError);
  OneOp no_flops = compute_bound(OpKind::linear, DType::f32);
  no_flops.flops = {0, 0};
  EXPECT_THROW(seconds(no_flops, false, platform), InputError) << "0 FLOP / 0 is NaN, not a duration";
}

// The platform bounds (platform_limits) with the largest FLOP and byte counts a trace may hold
// (2^63 - 1 each) give a long but finite duration: the bounds are enough on their own.
TEST(OpTime, TheSlowestPlatformTheBoundsAllowGivesFiniteDurations) {
  Platform platform = test_platform();
  platform.gpu.peak_fp32 = platform_limits::flop_rate.min;
  platform.gpu.memory_bandwidth = platform_limits::bandwidth.min;
  platform.gpu.launch_overhead = platform_limits::latency.max;
  platform.efficiency.compute_default = platform.efficiency.memory_default = platform_limits::min_efficiency;
  platform.efficiency.compute.clear();
  platform.efficiency.memory.clear();
  OneOp spec;
  spec.kind = OpKind::relu;
  const std::int64_t most = std::numeric_limits<std::int64_t>::max();
  spec.flops = {most, 0};
  spec.bytes_read = {most, 0};
  spec.bytes_written = {most, 0};
  const double s = seconds(spec, false, platform);
  EXPECT_TRUE(std::isfinite(s));
  EXPECT_GT(s, 1e16);
}

// ---- Kernel traffic (models/README.md, "Kernel traffic") -----------------------------------
//
// On test_platform memory moves at 1 TB/s x 0.5 = 5e11 bytes/s and every kernel costs 5 us to
// launch, so a memory-bound op takes bytes / 5e11 + 5e-6 s. Each test builds the op as the zoo
// records it, with the trace's logical bytes (one read of each input, one write of each
// output), and states by hand the bytes PyTorch's kernels move.

struct TensorSpec {
  TensorSpec(std::string name_, DType dtype_, std::vector<std::int64_t> shape_,
             traces::TensorRole role_ = traces::TensorRole::input, std::optional<traces::TensorIndex> view_of_ = std::nullopt)
      : name(std::move(name_)), dtype(dtype_), shape(std::move(shape_)), role(role_), view_of(view_of_) {}
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  traces::TensorRole role;
  std::optional<traces::TensorIndex> view_of;
};

struct OpSpec {
  OpKind kind = OpKind::elementwise;
  traces::Phase phase = traces::Phase::forward;
  std::vector<traces::TensorIndex> inputs;
  std::vector<traces::TensorIndex> outputs;
  std::int64_t flops = 0;
};

// Batch size 1, no tensor scales with the batch; each op's logical bytes are the sums over its
// inputs and outputs, as the zoo's build_trace computes them.
traces::Trace trace_of(const std::vector<TensorSpec>& specs, const std::vector<OpSpec>& op_specs) {
  std::vector<traces::Tensor> tensors;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    traces::Tensor t;
    t.id = i;
    t.name = specs[i].name;
    t.dtype = specs[i].dtype;
    t.shape = specs[i].shape;
    t.role = specs[i].role;
    t.view_of = specs[i].view_of;
    tensors.push_back(std::move(t));
  }
  std::vector<traces::Op> ops;
  for (std::size_t i = 0; i < op_specs.size(); ++i) {
    traces::Op op;
    op.id = i;
    op.name = "op" + std::to_string(i);
    op.kind = op_specs[i].kind;
    op.phase = op_specs[i].phase;
    op.inputs = op_specs[i].inputs;
    op.outputs = op_specs[i].outputs;
    op.flops.fixed = op_specs[i].flops;
    for (const auto t : op.inputs) op.bytes_read.fixed += tensors[t].bytes();
    for (const auto t : op.outputs) op.bytes_written.fixed += tensors[t].bytes();
    ops.push_back(std::move(op));
  }
  return traces::Trace("traffic", 1, std::move(tensors), std::move(ops));
}

double op_seconds(const traces::Trace& trace, traces::OpIndex op = 0) { return OpTimeModel(test_platform()).seconds(trace, op); }

double memory_time(double bytes) { return bytes / 5e11 + 5e-6; }

constexpr auto kForward = traces::Phase::forward;
constexpr auto kBackward = traces::Phase::backward;
constexpr auto kTemp = traces::TensorRole::temporary;

TEST(OpTimeTraffic, BatchNormForwardReadsItsInputTwice) {
  // x [4, 2, 8, 8] f32 = 2048 B; weight, bias, running mean and var 8 B each; y 2048 B and
  // save_mean, save_invstd 8 B each. Logical: 2080 read, 2064 written. The statistics kernel
  // reads x once more: 4128 read.
  const traces::Trace trace = trace_of({{"x", DType::f32, {4, 2, 8, 8}}, {"w", DType::f32, {2}}, {"b", DType::f32, {2}},
                                        {"rm", DType::f32, {2}}, {"rv", DType::f32, {2}}, {"y", DType::f32, {4, 2, 8, 8}, kTemp},
                                        {"mean", DType::f32, {2}, kTemp}, {"invstd", DType::f32, {2}, kTemp}},
                                       {{OpKind::batchnorm, kForward, {0, 1, 2, 3, 4}, {5, 6, 7}}});
  EXPECT_EQ(trace.bytes_read(0), 2080);
  EXPECT_DOUBLE_EQ(op_seconds(trace), memory_time(4128 + 2064));
}

// grad_out, x, weight, save_mean, save_invstd -> grad_input, grad_weight, grad_bias.
traces::Trace batchnorm_backward(std::vector<std::int64_t> shape) {
  const std::vector<std::int64_t> channels = {shape[1]};
  return trace_of({{"gy", DType::f32, shape}, {"x", DType::f32, shape}, {"w", DType::f32, channels}, {"mean", DType::f32, channels},
                   {"invstd", DType::f32, channels}, {"gx", DType::f32, shape, kTemp}, {"gw", DType::f32, channels, kTemp},
                   {"gb", DType::f32, channels, kTemp}},
                  {{OpKind::batchnorm, kBackward, {0, 1, 2, 3, 4}, {5, 6, 7}}});
}

TEST(OpTimeTraffic, BatchNormBackwardRereadsLargeChannelPlanes) {
  // Planes of 4 x 8 x 8 x 4 B = 1 KiB per tensor: the fused kernel's second pass stays on
  // chip. Logical 4120 read (2 x 2048 + 3 x 8), 2064 written.
  EXPECT_DOUBLE_EQ(op_seconds(batchnorm_backward({4, 2, 8, 8})), memory_time(4120 + 2064));
  // One channel of 2 x 128 x 128 x 4 B = 128 KiB per tensor: grad_out and x are read twice.
  // Logical 2 x 131072 + 12 = 262156 read, 131072 + 8 written; +262144 read.
  EXPECT_DOUBLE_EQ(op_seconds(batchnorm_backward({2, 1, 128, 128})), memory_time(262156 + 262144 + 131080));
}

traces::Trace softmax(OpKind kind, std::vector<std::int64_t> shape) {
  return trace_of({{"x", DType::f32, shape}, {"y", DType::f32, shape, kTemp}}, {{kind, kForward, {0}, {1}}});
}

TEST(OpTimeTraffic, SoftmaxForwardReadsARowOnceUnlessItIsLong) {
  // 8 fp32 per row: the persistent kernel, one read. 2 x 8 x 4 B in and out.
  EXPECT_DOUBLE_EQ(op_seconds(softmax(OpKind::softmax, {4, 8})), memory_time(128 + 128));
  // 2048 fp32 (8 KiB) per row: past the persistent kernel, but the row fits shared memory.
  EXPECT_DOUBLE_EQ(op_seconds(softmax(OpKind::softmax, {2, 2048})), memory_time(16384 + 16384));
  // 2047 fp32: not a multiple of the 4-element vector, so cunn_SoftMaxForward: three reads.
  EXPECT_DOUBLE_EQ(op_seconds(softmax(OpKind::softmax, {2, 2047})), memory_time(3 * 16376 + 16376));
  // 16384 fp32 (64 KiB) per row: beyond shared memory, three reads.
  EXPECT_DOUBLE_EQ(op_seconds(softmax(OpKind::softmax, {2, 16384})), memory_time(3 * 131072 + 131072));
  // log_softmax (kind loss, floating input only) follows the same kernels.
  EXPECT_DOUBLE_EQ(op_seconds(softmax(OpKind::loss, {2, 16384})), memory_time(3 * 131072 + 131072));
  EXPECT_DOUBLE_EQ(op_seconds(softmax(OpKind::loss, {4, 8})), memory_time(128 + 128));
}

traces::Trace softmax_backward(OpKind kind, std::vector<std::int64_t> shape) {
  return trace_of({{"gy", DType::f32, shape}, {"y", DType::f32, shape}, {"gx", DType::f32, shape, kTemp}},
                  {{kind, kBackward, {0, 1}, {2}}});
}

TEST(OpTimeTraffic, SoftmaxBackwardWritesAndRereadsTheProductFirst) {
  // tmp = grad * y (read 2, write 1), then the kernel reads tmp and y and writes grad_input:
  // 4 reads and 2 writes of 128 B for the short row, against the logical 2 and 1.
  EXPECT_DOUBLE_EQ(op_seconds(softmax_backward(OpKind::softmax, {4, 8})), memory_time(4 * 128 + 2 * 128));
  // 64 KiB rows: cunn_SoftMaxBackward reads tmp a second time: 5 reads, 2 writes.
  EXPECT_DOUBLE_EQ(op_seconds(softmax_backward(OpKind::softmax, {2, 16384})), memory_time(5 * 131072 + 2 * 131072));
  // log_softmax backward has no product: logical for short rows, grad read twice for long ones.
  EXPECT_DOUBLE_EQ(op_seconds(softmax_backward(OpKind::loss, {4, 8})), memory_time(2 * 128 + 128));
  EXPECT_DOUBLE_EQ(op_seconds(softmax_backward(OpKind::loss, {2, 16384})), memory_time(3 * 131072 + 131072));
}

TEST(OpTimeTraffic, LayerNorm) {
  // Forward, x [4, 8] f32 (128 B), weight and bias 32 B, y 128 B, mean and rstd 16 B: the
  // 32-byte rows are re-read on chip, so logical: 192 read, 160 written.
  const traces::Trace forward = trace_of({{"x", DType::f32, {4, 8}}, {"w", DType::f32, {8}}, {"b", DType::f32, {8}},
                                          {"y", DType::f32, {4, 8}, kTemp}, {"mean", DType::f32, {4}, kTemp},
                                          {"rstd", DType::f32, {4}, kTemp}},
                                         {{OpKind::layernorm, kForward, {0, 1, 2}, {3, 4, 5}}});
  EXPECT_DOUBLE_EQ(op_seconds(forward), memory_time(192 + 160));
  // 64 KiB rows: the normalising loop reads x again from memory.
  const traces::Trace wide = trace_of({{"x", DType::f32, {2, 16384}}, {"w", DType::f32, {16384}}, {"b", DType::f32, {16384}},
                                       {"y", DType::f32, {2, 16384}, kTemp}, {"mean", DType::f32, {2}, kTemp},
                                       {"rstd", DType::f32, {2}, kTemp}},
                                      {{OpKind::layernorm, kForward, {0, 1, 2}, {3, 4, 5}}});
  EXPECT_DOUBLE_EQ(op_seconds(wide), memory_time((131072 + 2 * 65536 + 131072) + (131072 + 16)));
  // The threshold (measured: Liger-Kernel's torch.nn.LayerNorm rows): 8 KiB rows (2048 fp32)
  // are re-read from the caches, 16 KiB rows (4096 fp32) from memory.
  const auto rows_of = [](std::int64_t n) {
    return trace_of({{"x", DType::f32, {2, n}}, {"w", DType::f32, {n}}, {"b", DType::f32, {n}}, {"y", DType::f32, {2, n}, kTemp},
                     {"mean", DType::f32, {2}, kTemp}, {"rstd", DType::f32, {2}, kTemp}},
                    {{OpKind::layernorm, kForward, {0, 1, 2}, {3, 4, 5}}});
  };
  EXPECT_DOUBLE_EQ(op_seconds(rows_of(2048)), memory_time((16384 + 2 * 8192) + (16384 + 16)));
  EXPECT_DOUBLE_EQ(op_seconds(rows_of(4096)), memory_time((2 * 32768 + 2 * 16384) + (32768 + 16)));
  // A norm writing one statistic per row (a fused RMSNorm: y and rstd) holds its row on chip
  // as one block: its 16 KiB rows are not re-read.
  const traces::Trace fused = trace_of({{"x", DType::f32, {2, 4096}}, {"w", DType::f32, {4096}}, {"y", DType::f32, {2, 4096}, kTemp},
                                        {"rstd", DType::f32, {2}, kTemp}},
                                       {{OpKind::layernorm, kForward, {0, 1}, {2, 3}}});
  EXPECT_DOUBLE_EQ(op_seconds(fused), memory_time((32768 + 16384) + (32768 + 8)));
  // Backward: grad_out, x, mean, rstd, weight, bias -> grad_input, grad_weight, grad_bias.
  // Logical 128 + 128 + 16 + 16 + 32 + 32 = 352 read, 128 + 32 + 32 = 192 written; the
  // gamma/beta kernel reads grad_out and x once more (+256).
  const traces::Trace backward = trace_of({{"gy", DType::f32, {4, 8}}, {"x", DType::f32, {4, 8}}, {"mean", DType::f32, {4}},
                                           {"rstd", DType::f32, {4}}, {"w", DType::f32, {8}}, {"b", DType::f32, {8}},
                                           {"gx", DType::f32, {4, 8}, kTemp}, {"gw", DType::f32, {8}, kTemp},
                                           {"gb", DType::f32, {8}, kTemp}},
                                          {{OpKind::layernorm, kBackward, {0, 1, 2, 3, 4, 5}, {6, 7, 8}}});
  EXPECT_DOUBLE_EQ(op_seconds(backward), memory_time(352 + 256 + 192));
  // Rows of 16 KiB (grad_out and x each): both kernels' second pass over them comes from
  // memory, +2 x 32 KiB more; at 8 KiB it does not.
  const auto backward_rows_of = [](std::int64_t n) {
    return trace_of({{"gy", DType::f32, {2, n}}, {"x", DType::f32, {2, n}}, {"mean", DType::f32, {2}}, {"rstd", DType::f32, {2}},
                     {"w", DType::f32, {n}}, {"b", DType::f32, {n}}, {"gx", DType::f32, {2, n}, kTemp}, {"gw", DType::f32, {n}, kTemp},
                     {"gb", DType::f32, {n}, kTemp}},
                    {{OpKind::layernorm, kBackward, {0, 1, 2, 3, 4, 5}, {6, 7, 8}}});
  };
  EXPECT_DOUBLE_EQ(op_seconds(backward_rows_of(2048)), memory_time((2 * 16384 + 16 + 2 * 8192) + 2 * 16384 + (16384 + 2 * 8192)));
  EXPECT_DOUBLE_EQ(op_seconds(backward_rows_of(4096)),
                   memory_time((2 * 32768 + 16 + 2 * 16384) + 2 * 2 * 32768 + (32768 + 2 * 16384)));
}

TEST(OpTimeTraffic, InPlaceAddReadsBothOperandsAndWritesOne) {
  // a = relu(x) (a temporary, so that it can be overwritten), then a += b: the add's output
  // is a view of a, recorded as written once; the trace's logical bytes are already the
  // kernel's (read a and b, write a), and the model leaves them.
  const traces::Trace trace = trace_of({{"x", DType::f32, {4, 8}}, {"b", DType::f32, {4, 8}}, {"a", DType::f32, {4, 8}, kTemp},
                                        {"sum", DType::f32, {4, 8}, kTemp, traces::TensorIndex{2}}},
                                       {{OpKind::relu, kForward, {0}, {2}}, {OpKind::elementwise, kForward, {2, 1}, {3}}});
  EXPECT_EQ(trace.bytes_read(1), 256);
  EXPECT_EQ(trace.bytes_written(1), 128);
  EXPECT_DOUBLE_EQ(op_seconds(trace, 1), memory_time(256 + 128));
}

TEST(OpTimeTraffic, ZooInPlaceAddRecordsTwoReadsAndOneWrite) {
  // What the zoo records for ResNet's `out += identity`: the add reads both operands and
  // writes the view of the first once, so the logical bytes need no factor.
  zoo::ModelRequest request;
  request.model = "resnet18";
  request.batch_size = 2;
  const traces::Trace trace = zoo::build_model(request);
  const OpTimeModel model(test_platform());
  int checked_ops = 0;
  for (traces::OpIndex i = 0; i < trace.ops().size(); ++i) {
    const traces::Op& op = trace.op(i);
    if (op.kind != OpKind::elementwise || op.phase != kForward || op.outputs.size() != 1 || op.inputs.size() != 2) continue;
    if (!trace.tensor(op.outputs[0]).view_of) continue;
    const std::int64_t y = trace.tensor(op.outputs[0]).bytes();
    const double y_bytes = static_cast<double>(y);
    EXPECT_EQ(trace.bytes_read(i), 2 * y) << op.name;
    EXPECT_EQ(trace.bytes_written(i), y) << op.name;
    EXPECT_DOUBLE_EQ(model.seconds(trace, i), std::max(static_cast<double>(trace.flops(i)) / 5e12, 3.0 * y_bytes / 5e11) + 5e-6) << op.name;
    ++checked_ops;
  }
  EXPECT_EQ(checked_ops, 8) << "ResNet-18 has eight residual adds";
}

TEST(OpTimeTraffic, NllLossGathersOneValuePerRow) {
  // log_probs [4, 1000] f32 (16000 B) and labels [4] i64 (32 B) -> loss and total_weight
  // (4 B each): the kernel reads the labels and one 32-byte sector per label, 160 B, not the
  // 16032 logical bytes.
  const traces::Trace trace = trace_of({{"logp", DType::f32, {4, 1000}}, {"labels", DType::i64, {4}},
                                        {"loss", DType::f32, {}, kTemp}, {"total_weight", DType::f32, {}, kTemp}},
                                       {{OpKind::loss, kForward, {0, 1}, {2, 3}}});
  EXPECT_EQ(trace.bytes_read(0), 16032);
  EXPECT_DOUBLE_EQ(op_seconds(trace), memory_time(32 + 4 * 32 + 8));
}

TEST(OpTimeTraffic, EmbeddingLookupReadsTheRowsItGathers) {
  // ids [4] i64 (32 B), table [1000, 8] f32 (32000 B) -> out [4, 8] f32 (128 B): reads the
  // ids and the four 32-byte rows.
  const traces::Trace trace = trace_of({{"ids", DType::i64, {4}}, {"table", DType::f32, {1000, 8}},
                                        {"out", DType::f32, {4, 8}, kTemp}},
                                       {{OpKind::embedding, kForward, {0, 1}, {2}}});
  EXPECT_DOUBLE_EQ(op_seconds(trace), memory_time(32 + 128 + 128));
}

// The test platform with a GPU whose SMs, generation, fp32 peak and memory bandwidth are known.
Platform gpu_with_sms(int sms, int compute_capability_major, double peak_fp32, double memory_bandwidth) {
  Platform platform = test_platform();
  platform.gpu.sms = sms;
  platform.gpu.compute_capability_major = compute_capability_major;
  platform.gpu.peak_fp32 = peak_fp32;
  platform.gpu.memory_bandwidth = memory_bandwidth;
  return platform;
}

// PyTorch's index_select copies an element per thread and trip: an embedding's gather (and an
// index_add_'s gradient) on a GPU whose SMs and clock are known takes the elements at the SMs'
// pace when that is slower than its bytes (index_select_seconds), and its bytes otherwise.
TEST(OpTimeTraffic, IndexSelectRunsAtTheSlowerOfItsBytesAndTheSmsElementPace) {
  const Platform a100 = gpu_with_sms(108, 8, 19.5e12, 2.039e12);
  const double clock = 19.5e12 / (108 * 64 * 2.0);
  EXPECT_DOUBLE_EQ(index_select_seconds(a100.gpu, 1e6), 1e6 / (108 * clock * 0.524));
  GpuSpec unknown = a100.gpu;
  unknown.sms = 0;
  EXPECT_EQ(index_select_seconds(unknown, 1e6), 0);
  EXPECT_EQ(index_select_seconds(a100.gpu, 0), 0);
  // ids [16384] i64, table [1024, 768] f32 -> out [16384, 768] f32, Liger's 'BERT' shape: 12.6 M
  // elements, 0.16 ms at the SMs' pace against 0.05 ms for its 53.6 MB (the ids, the 3 MB table
  // its rows come from, the rows written) at 2.039 TB/s x 0.5.
  const traces::Trace big = trace_of({{"ids", DType::i64, {16384}}, {"table", DType::f32, {1024, 768}},
                                      {"out", DType::f32, {16384, 768}, kTemp}},
                                     {{OpKind::embedding, kForward, {0, 1}, {2}}});
  const double elements = 16384.0 * 768;
  const double bytes = 16384.0 * 8 + 1024.0 * 768 * 4 + elements * 4;
  ASSERT_GT(index_select_seconds(a100.gpu, elements), 1.5 * bytes / (2.039e12 * 0.5));
  EXPECT_DOUBLE_EQ(OpTimeModel(a100).seconds(big, 0), index_select_seconds(a100.gpu, elements) + 5e-6);
  // Without the SMs, the bytes alone.
  Platform no_clock = a100;
  no_clock.gpu.sms = 0;
  EXPECT_DOUBLE_EQ(OpTimeModel(no_clock).seconds(big, 0), bytes / (2.039e12 * 0.5) + 5e-6);
  // A gather whose bytes are slower than its elements (a slow memory) stays at the roofline.
  Platform slow = a100;
  slow.gpu.memory_bandwidth = 1e10;
  EXPECT_DOUBLE_EQ(OpTimeModel(slow).seconds(big, 0), bytes / 5e9 + 5e-6);
  // The backward (a scatter into the table's gradient) is not an index_select: a table of 131,072
  // rows (100.7 M elements) would take 1.26 ms at the gather's pace, its 453 MB 0.44 ms.
  const traces::Trace backward = trace_of({{"ids", DType::i64, {16384}}, {"grad", DType::f32, {16384, 768}},
                                           {"table_grad", DType::f32, {131072, 768}, kTemp}},
                                          {{OpKind::embedding, kBackward, {0, 1}, {2}}});
  EXPECT_DOUBLE_EQ(OpTimeModel(a100).seconds(backward, 0), OpTimeModel(no_clock).seconds(backward, 0));
  // An index_add_'s gradient is grad.index_select (a gather in backward): the same pace. A gather
  // in forward may be aten::index, another kernel: its bytes.
  const auto gather = [](traces::Phase phase) {
    return trace_of({{"grad", DType::f32, {16384, 768}}, {"index", DType::i64, {16384}}, {"rows", DType::f32, {16384, 768}, kTemp}},
                    {{OpKind::gather, phase, {0, 1}, {2}}});
  };
  EXPECT_DOUBLE_EQ(OpTimeModel(a100).seconds(gather(kBackward), 0), index_select_seconds(a100.gpu, elements) + 5e-6);
  EXPECT_DOUBLE_EQ(OpTimeModel(a100).seconds(gather(kForward), 0), OpTimeModel(no_clock).seconds(gather(kForward), 0));
  EXPECT_LT(OpTimeModel(a100).seconds(gather(kForward), 0), OpTimeModel(a100).seconds(gather(kBackward), 0));
}

TEST(OpTimeTraffic, GatherReadsTheRowsItPicks) {
  // A mixture-of-experts dispatch, x[top_x]: hidden [64, 8] f32 (2048 B) and the index [16] i64
  // (128 B) -> rows [16, 8] f32 (512 B): reads the index and the 16 rows, writes them. The same
  // in backward (an index_add_'s gradient is grad.index_select of the rows).
  for (const auto phase : {kForward, kBackward}) {
    const traces::Trace trace = trace_of({{"hidden", DType::f32, {64, 8}}, {"index", DType::i64, {16}},
                                          {"rows", DType::f32, {16, 8}, kTemp}},
                                         {{OpKind::gather, phase, {0, 1}, {2}}});
    EXPECT_EQ(trace.bytes_read(0), 2048 + 128);
    EXPECT_DOUBLE_EQ(op_seconds(trace), memory_time(128 + 512 + 512));
  }
}

TEST(OpTimeTraffic, InPlaceScatterTouchesTheRowsItAddsInto) {
  // final.index_add_(0, top_x, rows): final [64, 8] f32 (a temporary: 2048 B), the index [16]
  // i64, the source [16, 8] f32 (512 B); the output is a view of final, so the logical bytes
  // read it whole and write it whole. The kernel reads the index, the source and the 16
  // destination rows, and writes those rows: 128 + 512 + 512 read, 512 written.
  const traces::Trace trace = trace_of({{"final", DType::f32, {64, 8}, kTemp}, {"index", DType::i64, {16}},
                                        {"rows", DType::f32, {16, 8}}, {"sum", DType::f32, {64, 8}, kTemp, traces::TensorIndex{0}}},
                                       {{OpKind::scatter, kForward, {0, 1, 2}, {3}}});
  EXPECT_EQ(trace.bytes_read(0), 2048 + 128 + 512);
  EXPECT_EQ(trace.bytes_written(0), 2048);
  EXPECT_DOUBLE_EQ(op_seconds(trace), memory_time(128 + 512 + 512 + 512));
  // A scatter into a new tensor (a gather's gradient: zeros of the source's shape, the
  // gradient rows accumulated into it) writes that tensor whole: the logical bytes.
  const traces::Trace fresh = trace_of({{"grad_rows", DType::f32, {16, 8}}, {"index", DType::i64, {16}},
                                        {"grad_hidden", DType::f32, {64, 8}, kTemp}},
                                       {{OpKind::scatter, kBackward, {0, 1}, {2}}});
  EXPECT_DOUBLE_EQ(op_seconds(fresh), memory_time(512 + 128 + 2048));
  // A scalar scatter_ in place (one_hot): one destination element per index entry.
  const traces::Trace one_hot = trace_of({{"mask", DType::i64, {32, 4}, kTemp}, {"index", DType::i64, {32, 1}},
                                          {"out", DType::i64, {32, 4}, kTemp, traces::TensorIndex{0}}},
                                         {{OpKind::scatter, kForward, {0, 1}, {2}}});
  EXPECT_DOUBLE_EQ(op_seconds(one_hot), memory_time(256 + 256 + 256));
}

// index_add_ and scatter_add_ add an element per thread and trip with an atomic add: a scatter
// that adds (one FLOP per element) into floating-point rows takes the elements at the SMs' pace
// when that is slower than its bytes (scatter_add_seconds); copies into rows and integer
// scatters keep their bytes.
TEST(OpTimeTraffic, ScatterAddRunsAtTheSlowerOfItsBytesAndTheSmsElementPace) {
  const Platform h100 = gpu_with_sms(132, 9, 66.9e12, 3.35e12);
  const double clock = 66.9e12 / (132 * 128 * 2.0);
  EXPECT_DOUBLE_EQ(scatter_add_seconds(h100.gpu, 1e6), 1e6 / (132 * clock * 0.415));
  // The measurement the pace comes from: 512 M bf16 elements in 4.719 ms on an H100.
  EXPECT_NEAR(scatter_add_seconds(h100.gpu, 4e6 * 128), 4.719e-3, 0.01e-3);
  GpuSpec unknown = h100.gpu;
  unknown.sms = 0;
  EXPECT_EQ(scatter_add_seconds(unknown, 1e6), 0);
  EXPECT_EQ(scatter_add_seconds(h100.gpu, 0), 0);
  Platform no_clock = h100;
  no_clock.gpu.sms = 0;
  // A Mixtral-style unpermute, out.index_add_(0, token, rows): 32,768 routed bf16 rows of 4,096
  // into 16,384 token rows, 134 M elements, 1.24 ms at the SMs' pace against 0.32 ms for the bytes
  // its kernel moves (the index, the rows and the rows of out it reads and writes) at 3.35 TB/s x 0.5.
  const std::int64_t elements = std::int64_t{32768} * 4096;
  const auto index_add = [](std::int64_t flops) {
    return trace_of({{"out", DType::bf16, {16384, 4096}, kTemp}, {"token", DType::i64, {32768}},
                     {"rows", DType::bf16, {32768, 4096}}, {"sum", DType::bf16, {16384, 4096}, kTemp, traces::TensorIndex{0}}},
                    {{OpKind::scatter, kForward, {0, 1, 2}, {3}, flops}});
  };
  const double paced = scatter_add_seconds(h100.gpu, static_cast<double>(elements));
  ASSERT_GT(paced, 3 * (OpTimeModel(no_clock).seconds(index_add(elements), 0) - 5e-6));
  EXPECT_DOUBLE_EQ(OpTimeModel(h100).seconds(index_add(elements), 0), paced + 5e-6);
  // A gather's gradient (zeros, the gradient rows added in: IndexSelectBackward0, GatherBackward0)
  // adds as many elements: the same pace.
  const traces::Trace gradient = trace_of({{"grad_rows", DType::bf16, {32768, 4096}}, {"token", DType::i64, {32768}},
                                           {"grad_hidden", DType::bf16, {16384, 4096}, kTemp}},
                                          {{OpKind::scatter, kBackward, {0, 1}, {2}, elements}});
  EXPECT_DOUBLE_EQ(OpTimeModel(h100).seconds(gradient, 0), paced + 5e-6);
  // No FLOPs (a copy into rows): its bytes.
  EXPECT_DOUBLE_EQ(OpTimeModel(h100).seconds(index_add(0), 0), OpTimeModel(no_clock).seconds(index_add(0), 0));
  // An integer scatter (one_hot's scatter_ of ones) adds nothing to floating-point rows: its bytes.
  const traces::Trace one_hot = trace_of({{"mask", DType::i64, {32768, 8}, kTemp}, {"index", DType::i64, {32768, 1}},
                                          {"out", DType::i64, {32768, 8}, kTemp, traces::TensorIndex{0}}},
                                         {{OpKind::scatter, kForward, {0, 1}, {2}, 32768}});
  EXPECT_DOUBLE_EQ(OpTimeModel(h100).seconds(one_hot, 0), OpTimeModel(no_clock).seconds(one_hot, 0));
  // A memory slower than the elements: the roofline.
  Platform slow = h100;
  slow.gpu.memory_bandwidth = 1e10;
  EXPECT_GT(OpTimeModel(slow).seconds(index_add(elements), 0), 10 * paced);
}

// The zoo's expert loop on a Mixtral-style layer: every gather and in-place scatter moves the
// routed rows, not the whole hidden state (8 experts, top-2: a quarter of the tokens each).
// One bf16 decoder layer of hidden 64 (4 heads, MLP 128, vocabulary 100), 2 sequences of 64
// tokens; `moe` makes its MLP a mixture of experts.
traces::Trace tiny_decoder(std::optional<zoo::MoeArchitecture> moe = std::nullopt,
                           zoo::DecoderArchitecture::Activation activation = zoo::DecoderArchitecture::Activation::silu) {
  zoo::DecoderArchitecture arch;
  if (moe) arch.family = "mixtral";
  arch.activation = activation;
  arch.layers = 1;
  arch.hidden = 64;
  arch.heads = 4;
  arch.kv_heads = 4;
  arch.intermediate = 128;
  arch.vocab = 100;
  arch.max_positions = 64;
  arch.moe = moe;
  zoo::ModelRequest request;
  request.model = "llama";
  request.decoder = arch;
  request.seq_len = 64;
  request.batch_size = 2;
  request.precision = zoo::Precision::bf16;
  return zoo::build_model(request);
}

TEST(OpTimeTraffic, ZooExpertDispatchMovesTheRoutedRows) {
  zoo::MoeArchitecture moe;
  moe.experts = 8;
  moe.top_k = 2;
  moe.intermediate = 32;
  const traces::Trace trace = tiny_decoder(moe);
  const OpTimeModel model(test_platform());
  int gathers = 0, scatters = 0;
  for (traces::OpIndex i = 0; i < trace.ops().size(); ++i) {
    const traces::Op& op = trace.op(i);
    if (op.phase != kForward || (op.kind != OpKind::gather && op.kind != OpKind::scatter)) continue;
    const std::int64_t rows = 2 * 64 * 2 / 8;  // batch x tokens x top-k / experts
    const std::int64_t index = rows * 8;
    const double expected = op.kind == OpKind::gather
                                ? (op.name.find("routing_weights") != std::string::npos ? 2 * rows * 2 + 2 * index   // [n, 1] bf16, two index views of one [n, 2] storage
                                                                                         : 2 * rows * 64 * 2 + index)
                                : 3 * rows * 64 * 2 + index;  // read source and rows, write rows
    EXPECT_DOUBLE_EQ(model.seconds(trace, i), memory_time(expected)) << op.name;
    (op.kind == OpKind::gather ? gathers : scatters) += 1;
  }
  EXPECT_EQ(gathers, 16);
  EXPECT_EQ(scatters, 8);
}

// Hugging Face's LlamaRMSNorm in bf16 is a chain of eager kernels: forward 20 bytes read and 16
// written per element in 9 kernels, backward 54 and 38 in 16 (op_time.cpp, "Eager RMSNorm"), plus
// the weight and the rows' statistics; a fused LayerNorm (BERT) keeps its one-kernel rule.
TEST(OpTimeTraffic, EagerRmsNormRunsItsChainOfKernels) {
  const traces::Trace trace = tiny_decoder();
  const double elements = 2 * 64 * 64;
  const double rows = 2 * 64;
  const double weight = 64 * 2;
  int checked = 0;
  for (traces::OpIndex i = 0; i < trace.ops().size(); ++i) {
    const traces::Op& op = trace.op(i);
    if (op.name == "model.layers.0.input_layernorm") {
      // Reads x's chain and the weight; writes the chain and the fp32 rsqrt per row.
      EXPECT_DOUBLE_EQ(op_seconds(trace, i), (elements * 36 + weight + rows * 4) / 5e11 + 9 * 5e-6);
      ++checked;
    } else if (op.name == "model.layers.0.input_layernorm.backward") {
      // Reads the chain, the rsqrt and the weight; writes the chain and the weight's gradient.
      EXPECT_DOUBLE_EQ(op_seconds(trace, i), (elements * (54 + 38) + rows * 4 + weight + weight) / 5e11 + 16 * 5e-6);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2);
}

// transformers' squared ReLU (hidden_act relu2) in bf16: F.relu and torch.square forward, 4 bytes
// an element each; PowBackward0's three kernels (x.pow(1), 2 * it, grad * that: 8 bytes read and
// 6 written) and threshold_backward (4 and 2) backward.
TEST(OpTimeTraffic, SquaredReluRunsPowBackwardsThreeKernels) {
  const traces::Trace trace = tiny_decoder(std::nullopt, zoo::DecoderArchitecture::Activation::relu2);
  const double elements = 2 * 64 * 128;
  const std::map<std::string, double> expected = {
      {"model.layers.0.mlp.act_fn.relu", elements * 4 / 5e11 + 5e-6},
      {"model.layers.0.mlp.act_fn.square", elements * 4 / 5e11 + 5e-6},
      {"model.layers.0.mlp.act_fn.square.backward", elements * 14 / 5e11 + 3 * 5e-6},
      {"model.layers.0.mlp.act_fn.relu.backward", elements * 6 / 5e11 + 5e-6}};
  int checked = 0;
  for (traces::OpIndex i = 0; i < trace.ops().size(); ++i) {
    const auto it = expected.find(trace.op(i).name);
    if (it == expected.end()) continue;
    EXPECT_DOUBLE_EQ(op_seconds(trace, i), it->second) << it->first;
    ++checked;
  }
  EXPECT_EQ(checked, 4);
}

TEST(OpTimeTraffic, GemmKindsAndElementwiseKindsKeepTheirLogicalBytes) {
  for (const OpKind kind : {OpKind::conv, OpKind::linear, OpKind::matmul, OpKind::attention, OpKind::relu, OpKind::gelu,
                            OpKind::dropout, OpKind::elementwise, OpKind::pool, OpKind::optimizer_update, OpKind::other}) {
    OneOp spec;
    spec.kind = kind;
    spec.bytes_read = {0, 500'000'000};
    spec.bytes_written = {0, 250'000'000};
    EXPECT_DOUBLE_EQ(seconds(spec), 3e9 / 5e11 + 5e-6) << traces::to_string(kind);
  }
  // Compute-bound: as before the traffic model (the ComputeBound tests above).
  EXPECT_DOUBLE_EQ(seconds(compute_bound(OpKind::conv, DType::f32)), 4e12 / (10e12 * 0.5) + 5e-6);
  EXPECT_DOUBLE_EQ(seconds(compute_bound(OpKind::matmul, DType::f32)), 4e12 / (10e12 * 0.5) + 5e-6);
}

// End to end on a zoo model: the sum of op times is a roofline lower bound on a real
// iteration, so it must land in a plausible band, not at a precise figure.
// ---- Wave quantization -------------------------------------------------------------------
//
// The test platform with gpu.sms: compute efficiency 0.5 (0.8 for linear) at the fp16 peak,
// 160 TFLOP/s, so a GEMM-like op in fp16 runs at 80 (linear 128) TFLOP/s before quantization.
Platform platform_with_sms(int sms) { return test_platform("5 us\n  sms: " + std::to_string(sms)); }

struct GemmTensor {
  std::vector<std::int64_t> shape;
  std::optional<std::size_t> batch_dim = 0;  // nullopt: a weight gradient
};

// One op of `kind` and `phase` (fp16 unless `dtype` says) that reads x [1, 8] and writes `outputs`, doing `flops`
// and moving nothing: its time is its compute term plus the 5 us launch.
traces::Trace gemm_trace(OpKind kind, traces::Phase phase, const std::vector<GemmTensor>& outputs, std::int64_t flops,
                         DType dtype = DType::f16) {
  std::vector<traces::Tensor> tensors(1);
  tensors[0].id = 1;
  tensors[0].name = "x";
  tensors[0].dtype = dtype;
  tensors[0].shape = {1, 8};
  tensors[0].role = traces::TensorRole::input;
  tensors[0].batch_dim = 0;
  traces::Op op;
  op.id = 1;
  op.name = "gemm";
  op.kind = kind;
  op.phase = phase;
  op.inputs = {0};
  op.flops = {flops, 0};
  for (const GemmTensor& out : outputs) {
    traces::Tensor t;
    t.id = tensors.size() + 1;
    t.name = "out" + std::to_string(tensors.size());
    t.dtype = dtype;
    t.shape = out.shape;
    t.role = traces::TensorRole::temporary;
    t.batch_dim = out.batch_dim;
    op.outputs.push_back(tensors.size());
    tensors.push_back(std::move(t));
  }
  return traces::Trace("gemm", 1, std::move(tensors), {std::move(op)});
}

// Channels-last, so that a convolution's time is its GEMM's alone (the NCHW transposes are
// TensorCoreConvolutionsOnNchwPayForTheTransposes's).
double gemm_seconds(const traces::Trace& trace, const Platform& platform) {
  OpTimeOptions options;
  options.channels_last = true;
  return OpTimeModel(platform, options).seconds(trace, 0);
}

// The wave arithmetic is exact; the model's multiplications may round in the last bits.
void expect_seconds(double actual, double expected) { EXPECT_NEAR(actual, expected, expected * 1e-12); }

TEST(OpTimeWaves, WholeWavesOfTilesKeepTheFlatEfficiency) {
  // y [128, 4 x 128]: 1 x 4 tiles of 128 x 128, one wave on 4 SMs: factor 1.
  // 128e9 FLOP / (160e12 x 0.8) = 1 ms.
  const traces::Trace four = gemm_trace(OpKind::linear, traces::Phase::forward, {{{128, 512}}}, 128'000'000'000);
  expect_seconds(gemm_seconds(four, platform_with_sms(4)), 1e-3 + 5e-6);
  expect_seconds(gemm_seconds(four, test_platform()), 1e-3 + 5e-6);
  // Eight tiles on 4 SMs (two full waves) or on 8 SMs (one): still factor 1.
  const traces::Trace eight = gemm_trace(OpKind::linear, traces::Phase::forward, {{{256, 512}}}, 256'000'000'000);
  expect_seconds(gemm_seconds(eight, platform_with_sms(4)), 2e-3 + 5e-6);
  expect_seconds(gemm_seconds(eight, platform_with_sms(8)), 2e-3 + 5e-6);
}

TEST(OpTimeWaves, OneTileMoreThanAWaveTakesTwoWaves) {
  // y [128, 5 x 128] with the same K: 1.25x the FLOPs, 5 tiles on 4 SMs. The fifth tile runs
  // alone in a second wave as long as the first: 2 x 1 ms, where the flat roofline said 1.25 ms.
  // Factor 5 / (2 x 4) = 0.625.
  const traces::Trace five = gemm_trace(OpKind::linear, traces::Phase::forward, {{{128, 640}}}, 160'000'000'000);
  expect_seconds(gemm_seconds(five, platform_with_sms(4)), 2e-3 + 5e-6);
  // Without gpu.sms the flat efficiency: 160e9 / 128e12 = 1.25 ms.
  expect_seconds(gemm_seconds(five, test_platform()), 1.25e-3 + 5e-6);
  // A column of 129 is a second tile too: [128, 4 x 128 + 1] is 5 tiles (the FLOPs stay the trace's).
  const traces::Trace ragged = gemm_trace(OpKind::linear, traces::Phase::forward, {{{128, 513}}}, 128'000'000'000);
  expect_seconds(gemm_seconds(ragged, platform_with_sms(4)), 1e-3 / 0.625 + 5e-6);
}

TEST(OpTimeWaves, LinearFlattensTheLeadingDimensions) {
  // y [2, 64, 256] (batch, sequence, features) is the GEMM [128, 256]: 2 tiles on 4 SMs. K = 64
  // (FLOPs 2 x 128 x 256 x 64 = 4,194,304) is too short to split, so half the SMs idle:
  // 4194304 / (128e12 x 0.5) = 65.536 ns.
  const traces::Trace t = gemm_trace(OpKind::linear, traces::Phase::forward, {{{2, 64, 256}}}, 4'194'304);
  expect_seconds(gemm_seconds(t, platform_with_sms(4)), 65.536e-9 + 5e-6);
}

TEST(OpTimeWaves, ASmallGemmWithALongReductionSplitsIt) {
  // y [128, 128]: 1 tile on 4 SMs. K = 1024 (FLOPs 2 x 128 x 128 x 1024 = 33,554,432) gives
  // 4 slices of 256: 4 blocks, one full wave, factor 1: 33554432 / 128e12 = 262.144 ns.
  const traces::Trace long_k = gemm_trace(OpKind::linear, traces::Phase::forward, {{{128, 128}}}, 33'554'432);
  expect_seconds(gemm_seconds(long_k, platform_with_sms(4)), 262.144e-9 + 5e-6);
  // K = 512: 2 slices, 2 of 4 SMs busy: factor 0.5, 2 x 131.072 ns.
  const traces::Trace mid_k = gemm_trace(OpKind::linear, traces::Phase::forward, {{{128, 128}}}, 16'777'216);
  expect_seconds(gemm_seconds(mid_k, platform_with_sms(4)), 262.144e-9 + 5e-6);
  // K = 128: no split, 1 of 4 SMs: factor 0.25, 4 x 32.768 ns.
  const traces::Trace short_k = gemm_trace(OpKind::linear, traces::Phase::forward, {{{128, 128}}}, 4'194'304);
  expect_seconds(gemm_seconds(short_k, platform_with_sms(4)), 131.072e-9 + 5e-6);
}

TEST(OpTimeWaves, ConvolutionIsTiledAsItsImplicitGemm) {
  // Forward: y [N=2, K=64, P=16, Q=16] is the GEMM M = N·P·Q = 512, N = K = 64: 4 x 1 tiles.
  // C·R·S = 64 x 3 x 3 = 576: FLOPs 2 x 512 x 64 x 576 = 37,748,736, at 80 TFLOP/s 471.8592 ns.
  const traces::Trace fprop = gemm_trace(OpKind::conv, traces::Phase::forward, {{{2, 64, 16, 16}}}, 37'748'736);
  expect_seconds(gemm_seconds(fprop, platform_with_sms(4)), 471.8592e-9 + 5e-6);
  // On 3 SMs the 4 tiles take 2 waves: factor 4 / 6.
  expect_seconds(gemm_seconds(fprop, platform_with_sms(3)), 471.8592e-9 * 1.5 + 5e-6);

  // Backward: grad_input [2, 64, 16, 16] (dgrad, M = N·H·W = 512, N = C = 64: 4 tiles),
  // grad_weight [64, 64, 3, 3] (wgrad, M = K = 64, N = C·R·S = 576: 1 x 5 tiles), grad_bias
  // [64] (a reduction, not a GEMM). On 4 SMs dgrad fills its wave (1) and wgrad takes two
  // (5 / 8); the two GEMMs have equal FLOPs, so the op's factor is 2 / (1 + 8/5) = 10/13.
  // FLOPs 2 x 37,748,736 = 75,497,472: 943.7184 ns at 80 TFLOP/s, x 13/10.
  const traces::Trace backward = gemm_trace(OpKind::conv, traces::Phase::backward,
                                            {{{2, 64, 16, 16}}, {{64, 64, 3, 3}, std::nullopt}, {{64}, std::nullopt}}, 75'497'472);
  expect_seconds(gemm_seconds(backward, platform_with_sms(4)), 943.7184e-9 * 1.3 + 5e-6);
  expect_seconds(gemm_seconds(backward, test_platform()), 943.7184e-9 + 5e-6);
}

// efficiency.conv_wave_loss: a convolution's factor is fill^conv_wave_loss, so 1 keeps the
// one-tile-per-SM loss, 0 removes it and 0.5 takes its square root; other kinds keep theirs.
TEST(OpTimeWaves, ConvolutionsSeeTheirShareOfTheWaveLoss) {
  const traces::Trace fprop = gemm_trace(OpKind::conv, traces::Phase::forward, {{{2, 64, 16, 16}}}, 37'748'736);
  Platform three = platform_with_sms(3);  // 4 tiles in 2 waves of 3: fill 2/3
  three.efficiency.conv_wave_loss = 0.5;
  expect_seconds(gemm_seconds(fprop, three), 471.8592e-9 / std::sqrt(2.0 / 3.0) + 5e-6);
  three.efficiency.conv_wave_loss = 0.001;  // the smallest a platform file takes: almost no loss
  expect_seconds(gemm_seconds(fprop, three), 471.8592e-9 / std::pow(2.0 / 3.0, 0.001) + 5e-6);
  // A linear of five tiles on four SMs keeps its two waves whatever conv_wave_loss says.
  Platform four = platform_with_sms(4);
  four.efficiency.conv_wave_loss = 0.5;
  const traces::Trace five = gemm_trace(OpKind::linear, traces::Phase::forward, {{{128, 5 * 128}}}, 160'000'000'000);
  expect_seconds(gemm_seconds(five, four), 2e-3 + 5e-6);
}

TEST(OpTimeWaves, AWeightGradientSplitsItsLongReduction) {
  // The first layer's backward computes only grad_weight [64, 3, 7, 7]: M = 64, N = 147, 1 x 2
  // tiles, and K = N·P·Q = 2 x 112 x 112 = 25,088 (FLOPs 2 x 64 x 147 x 25088 = 472,055,808).
  // On 8 SMs split-K makes 4 slices per tile: 8 blocks, one full wave, factor 1.
  const traces::Trace wgrad = gemm_trace(OpKind::conv, traces::Phase::backward, {{{64, 3, 7, 7}, std::nullopt}}, 472'055'808);
  expect_seconds(gemm_seconds(wgrad, platform_with_sms(8)), 472'055'808 / 80e12 + 5e-6);
  // On 5 SMs 2 slices per tile fill 4 of them: factor 0.8.
  expect_seconds(gemm_seconds(wgrad, platform_with_sms(5)), 472'055'808 / 80e12 / 0.8 + 5e-6);
}

// ---- Short reductions (efficiency.gemm_k_overhead) ------------------------------------------

// A block that reduces K elements runs at K / (K + k0) of an endless one: y [128, 512] with
// K = 768 (FLOPs 2 x 128 x 512 x 768 = 100,663,296) fills its wave of 4 SMs, so with k0 = 256
// its 786.432 ns at 128 TFLOP/s take 1024 / 768 as long.
TEST(OpTimeShortReductions, AShortReductionLosesItsBlocksFixedTime) {
  const traces::Trace y = gemm_trace(OpKind::linear, traces::Phase::forward, {{{128, 512}}}, 100'663'296);
  Platform four = platform_with_sms(4);
  expect_seconds(gemm_seconds(y, four), 786.432e-9 + 5e-6);
  four.efficiency.gemm_k_overhead = 256;
  expect_seconds(gemm_seconds(y, four), 786.432e-9 * 1024.0 / 768.0 + 5e-6);
  // Without gpu.sms the factor still applies (no waves, the whole K per block).
  Platform flat = test_platform();
  flat.efficiency.gemm_k_overhead = 256;
  expect_seconds(gemm_seconds(y, flat), 786.432e-9 * 1024.0 / 768.0 + 5e-6);
}

// Split-K gives each block a slice: y [128, 128] with K = 1024 runs 4 slices of 256 on 4 SMs,
// each at 256 / (256 + 256) = 1/2 with k0 = 256 (ASmallGemmWithALongReductionSplitsIt's 262.144 ns).
TEST(OpTimeShortReductions, SplitKBlocksPayForTheirSlice) {
  const traces::Trace long_k = gemm_trace(OpKind::linear, traces::Phase::forward, {{{128, 128}}}, 33'554'432);
  Platform four = platform_with_sms(4);
  four.efficiency.gemm_k_overhead = 256;
  expect_seconds(gemm_seconds(long_k, four), 262.144e-9 * 2 + 5e-6);
}

// A backward linear's two GEMMs reduce over different lengths: grad_input [512, 128] (M = 512,
// N = 128) and grad_weight [128, 128] share 2 x 2 x 512 x 128 x 128 FLOPs, so grad_input's
// K = 128 (the forward's columns; 4 tiles, one wave) and grad_weight's K = 512 (the forward's
// rows; 1 tile split into 2 slices of 256: 2 of 4 SMs). Each takes half the FLOPs, 16,777,216
// at 128 TFLOP/s = 131.072 ns, over its fill x K factor (k0 = 128): grad_input 1 x 128/256,
// grad_weight 1/2 x 256/384.
TEST(OpTimeShortReductions, EachGemmOfABackwardOpUsesItsOwnReduction) {
  const traces::Trace backward = gemm_trace(OpKind::linear, traces::Phase::backward,
                                            {{{512, 128}}, {{128, 128}, std::nullopt}}, 33'554'432);
  Platform four = platform_with_sms(4);
  four.efficiency.gemm_k_overhead = 128;
  expect_seconds(gemm_seconds(backward, four), 131.072e-9 / 0.5 + 131.072e-9 / (0.5 * 256.0 / 384.0) + 5e-6);
}

// Only the GEMMs efficiency.gemm_k_overhead was measured on pay it: linear and matmul on tensor
// cores, not convolutions (cuDNN, fitted apart), fused attention, fp32 on the CUDA cores, or
// Hopper's mma.sync kernels under CUDA 11.
TEST(OpTimeShortReductions, OnlyCurrentTensorCoreGemmsPayIt) {
  Platform hopper = test_platform();
  hopper.gpu.compute_capability_major = 9;
  hopper.efficiency.gemm_k_overhead = 160;
  OpTimeOptions current;
  OpTimeOptions cuda11;
  cuda11.cuda_major = 11;
  EXPECT_DOUBLE_EQ(gemm_k_overhead(hopper, current, OpKind::linear), 160);
  EXPECT_DOUBLE_EQ(gemm_k_overhead(hopper, current, OpKind::matmul), 160);
  EXPECT_DOUBLE_EQ(gemm_k_overhead(hopper, current, OpKind::conv), 0);
  EXPECT_DOUBLE_EQ(gemm_k_overhead(hopper, current, OpKind::attention), 0);
  EXPECT_DOUBLE_EQ(gemm_k_overhead(hopper, cuda11, OpKind::linear), 0);
  Platform ampere = hopper;
  ampere.gpu.compute_capability_major = 8;
  EXPECT_DOUBLE_EQ(gemm_k_overhead(ampere, cuda11, OpKind::linear), 160);
  // fp32 without TF32 runs on the CUDA cores: y [128, 512], K = 768, at 10 TFLOP/s x 0.8.
  const traces::Trace fp32 = gemm_trace(OpKind::linear, traces::Phase::forward, {{{128, 512}}}, 100'663'296, DType::f32);
  OpTimeOptions no_tf32;
  no_tf32.allow_tf32_matmul = false;
  Platform with = test_platform();
  with.efficiency.gemm_k_overhead = 256;
  EXPECT_DOUBLE_EQ(OpTimeModel(with, no_tf32).seconds(fp32, 0), OpTimeModel(test_platform(), no_tf32).seconds(fp32, 0));
  // A convolution keeps its time.
  const traces::Trace fprop = gemm_trace(OpKind::conv, traces::Phase::forward, {{{2, 64, 16, 16}}}, 37'748'736);
  Platform conv_platform = platform_with_sms(4);
  conv_platform.efficiency.gemm_k_overhead = 256;
  expect_seconds(gemm_seconds(fprop, conv_platform), 471.8592e-9 + 5e-6);
}

TEST(OpTimeWaves, BatchedMatmulAndAttention) {
  // bmm: y [2, 3, 128, 256] is 6 matrices of 1 x 2 tiles, 12 tiles on 8 SMs: factor 12 / 16.
  // K = 128 (FLOPs 2 x 6 x 128 x 256 x 128 = 50,331,648), not split as 12 tiles exceed 8.
  const traces::Trace bmm = gemm_trace(OpKind::matmul, traces::Phase::forward, {{{2, 3, 128, 256}}}, 50'331'648);
  expect_seconds(gemm_seconds(bmm, platform_with_sms(8)), 50'331'648 / 80e12 / 0.75 + 5e-6);
  // Its backward writes grad_a [2, 3, 128, 128] (6 tiles: a wave of 8 with K = 256 split in 1,
  // as 8 / 6 = 1 slice) and grad_b [2, 3, 128, 256] (12 tiles: 12 / 16): factor
  // 2 / (8/6 + 16/12) = 0.75.
  const traces::Trace bmm_backward = gemm_trace(OpKind::matmul, traces::Phase::backward,
                                                {{{2, 3, 128, 128}}, {{2, 3, 128, 256}}}, 100'663'296);
  expect_seconds(gemm_seconds(bmm_backward, platform_with_sms(8)), 100'663'296 / 80e12 / 0.75 + 5e-6);
  // Attention: out [B=2, H=3, S=256, D=64] and its log-sum-exp [2, 3, 256]: one block per 128
  // query rows of each head, 2 x 3 x 2 = 12 blocks on 8 SMs: factor 0.75.
  const traces::Trace attention = gemm_trace(OpKind::attention, traces::Phase::forward,
                                             {{{2, 3, 256, 64}}, {{2, 3, 256}}}, 1'000'000'000);
  expect_seconds(gemm_seconds(attention, platform_with_sms(8)), 1e9 / 80e12 / 0.75 + 5e-6);
  // FlashAttention does not split its reduction: at S = 128, 6 blocks fill 6 of 8 SMs however
  // long the sequence of keys.
  const traces::Trace short_rows = gemm_trace(OpKind::attention, traces::Phase::backward,
                                              {{{2, 3, 128, 64}}, {{2, 3, 128, 64}}, {{2, 3, 128, 64}}}, 1'000'000'000);
  expect_seconds(gemm_seconds(short_rows, platform_with_sms(8)), 1e9 / 80e12 / 0.75 + 5e-6);
}

TEST(OpTimeWaves, OpsWithoutAGemmShapeKeepTheirTime) {
  const Platform waves = platform_with_sms(4);
  // A linear with a scalar output, a matmul writing a vector, a convolution writing a matrix,
  // an attention writing [S, D], a backward linear that writes only a bias gradient: no GEMM
  // shape, factor 1, 128e9 FLOP at the flat efficiency.
  const std::vector<std::pair<OpKind, traces::Phase>> kinds{{OpKind::linear, traces::Phase::forward},
                                                            {OpKind::matmul, traces::Phase::forward},
                                                            {OpKind::conv, traces::Phase::forward},
                                                            {OpKind::attention, traces::Phase::forward},
                                                            {OpKind::linear, traces::Phase::backward}};
  const std::vector<std::vector<std::int64_t>> shapes{{}, {640}, {1, 640}, {128, 64}, {640}};
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    SCOPED_TRACE(traces::to_string(kinds[i].first));
    const traces::Trace t = gemm_trace(kinds[i].first, kinds[i].second,
                                       {{shapes[i], shapes[i].empty() ? std::nullopt : std::optional<std::size_t>(0)}}, 160'000'000'000);
    EXPECT_DOUBLE_EQ(gemm_seconds(t, waves), gemm_seconds(t, test_platform()));
  }
  // Other kinds are not tiled GEMMs: a relu over [128, 640] keeps its time.
  const traces::Trace relu = gemm_trace(OpKind::relu, traces::Phase::forward, {{{128, 640}}}, 160'000'000'000);
  EXPECT_DOUBLE_EQ(gemm_seconds(relu, waves), 160e9 / 5e12 + 5e-6);
  // The one-op traces above (y [4, 8], K in the billions) split into a full wave: unchanged.
  EXPECT_DOUBLE_EQ(seconds(compute_bound(OpKind::linear, DType::f16), false, waves), 0.03125 + 5e-6);
}

TEST(OpTimeWaves, ShippedPlatformsSlowTheSmallLayersOfAZooModel) {
  // BERT-base's GEMMs on an A100 (108 SMs) against the same platform without gpu.sms: every
  // GEMM-like op is at least as slow, none more than 1 / 0.2 slower (a layer that fills a fifth
  // of the SMs would be a modelling error at batch 32), the embeddings' gathers at least as slow,
  // and every other op is unchanged.
  zoo::ModelRequest request;
  request.model = "bert-base";
  request.batch_size = 32;
  const traces::Trace trace = zoo::build_model(request);
  Platform a100 = builtin_platform("a100-40gb");
  ASSERT_EQ(a100.gpu.sms, 108);
  const OpTimeModel waves(a100);
  a100.gpu.sms = 0;
  const OpTimeModel flat(a100);
  double waves_total = 0;
  double flat_total = 0;
  for (traces::OpIndex op = 0; op < trace.ops().size(); ++op) {
    const double w = waves.seconds(trace, op);
    const double f = flat.seconds(trace, op);
    waves_total += w;
    flat_total += f;
    SCOPED_TRACE(trace.op(op).name);
    if (trace.op(op).kind == OpKind::linear || trace.op(op).kind == OpKind::matmul || trace.op(op).kind == OpKind::attention) {
      EXPECT_GE(w, f);
      EXPECT_LE(w, f * 5);
    } else if (trace.op(op).kind == OpKind::embedding && trace.op(op).phase == traces::Phase::forward) {
      // The gather's pace needs the SMs' clock too (index_select_seconds): never below its bytes.
      EXPECT_GE(w, f);
    } else {
      EXPECT_EQ(w, f);
    }
  }
  EXPECT_GT(waves_total, flat_total);
}

TEST(OpTime, ResNet50IterationOnA100IsPlausible) {
  zoo::ModelRequest request;
  request.model = "resnet50";
  request.batch_size = 32;
  const traces::Trace trace = zoo::build_model(request);
  const OpTimeModel fp32(builtin_platform("a100-40gb"));
  OpTimeOptions tf32_options;
  tf32_options.allow_tf32_matmul = true;
  tf32_options.allow_tf32_cudnn = true;
  const OpTimeModel tf32(builtin_platform("a100-40gb"), tf32_options);
  tf32_options.channels_last = true;
  const OpTimeModel tf32_nhwc(builtin_platform("a100-40gb"), tf32_options);
  double fp32_total = 0;
  double tf32_total = 0;
  double tf32_nhwc_total = 0;
  for (traces::OpIndex op = 0; op < trace.ops().size(); ++op) {
    const double t = fp32.seconds(trace, op);
    EXPECT_GE(t, 0.0);
    fp32_total += t;
    tf32_total += tf32.seconds(trace, op);
    tf32_nhwc_total += tf32_nhwc.seconds(trace, op);
  }
  // ~25 GFLOP per image for a training step (3x the forward's 8.2 GFLOP): 0.8 TFLOP at batch
  // 32, ~60 ms at 70% of 19.5 TFLOP/s, plus the memory-bound layers.
  EXPECT_GT(fp32_total, 0.05);
  EXPECT_LT(fp32_total, 0.3);
  // TF32 tensor cores more than double the rate; on NCHW tensors cuDNN's transposes take part
  // of that back (today 84 ms fp32, 44 ms TF32 NCHW, 30 ms TF32 channels-last).
  EXPECT_LT(tf32_nhwc_total, fp32_total / 2);
  EXPECT_GT(tf32_total, tf32_nhwc_total * 1.1);
  EXPECT_LT(tf32_total, fp32_total);
}

}  // namespace
}  // namespace comptrain::models

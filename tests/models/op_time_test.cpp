#include "comptrain/models/op_time.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
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
  options.allow_tf32 = allow_tf32;
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

TEST(OpTime, ArithmeticDtypeIsTheFirstFloatingOutputElseInput) {
  OneOp spec;
  spec.input = DType::f32;
  spec.output = DType::f16;
  EXPECT_EQ(arithmetic_dtype(one_op_trace(spec), 0), DType::f16);
  spec.input = DType::bf16;
  spec.output = DType::i64;
  EXPECT_EQ(arithmetic_dtype(one_op_trace(spec), 0), DType::bf16);
  spec.input = DType::i32;
  spec.output = DType::boolean;
  EXPECT_EQ(arithmetic_dtype(one_op_trace(spec), 0), DType::f32);
  spec.input = DType::u8;
  spec.output = DType::f64;
  EXPECT_EQ(arithmetic_dtype(one_op_trace(spec), 0), DType::f64);
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
  // Backward: grad_out, x, mean, rstd, weight, bias -> grad_input, grad_weight, grad_bias.
  // Logical 128 + 128 + 16 + 16 + 32 + 32 = 352 read, 128 + 32 + 32 = 192 written; the
  // gamma/beta kernel reads grad_out and x once more (+256).
  const traces::Trace backward = trace_of({{"gy", DType::f32, {4, 8}}, {"x", DType::f32, {4, 8}}, {"mean", DType::f32, {4}},
                                           {"rstd", DType::f32, {4}}, {"w", DType::f32, {8}}, {"b", DType::f32, {8}},
                                           {"gx", DType::f32, {4, 8}, kTemp}, {"gw", DType::f32, {8}, kTemp},
                                           {"gb", DType::f32, {8}, kTemp}},
                                          {{OpKind::layernorm, kBackward, {0, 1, 2, 3, 4, 5}, {6, 7, 8}}});
  EXPECT_DOUBLE_EQ(op_seconds(backward), memory_time(352 + 256 + 192));
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
TEST(OpTime, ResNet50IterationOnA100IsPlausible) {
  zoo::ModelRequest request;
  request.model = "resnet50";
  request.batch_size = 32;
  const traces::Trace trace = zoo::build_model(request);
  const OpTimeModel fp32(builtin_platform("a100-40gb"));
  OpTimeOptions tf32_options;
  tf32_options.allow_tf32 = true;
  const OpTimeModel tf32(builtin_platform("a100-40gb"), tf32_options);
  double fp32_total = 0;
  double tf32_total = 0;
  for (traces::OpIndex op = 0; op < trace.ops().size(); ++op) {
    const double t = fp32.seconds(trace, op);
    EXPECT_GE(t, 0.0);
    fp32_total += t;
    tf32_total += tf32.seconds(trace, op);
  }
  // ~25 GFLOP per image for a training step (3x the forward's 8.2 GFLOP): 0.8 TFLOP at batch
  // 32, ~60 ms at 70% of 19.5 TFLOP/s, plus the memory-bound layers.
  EXPECT_GT(fp32_total, 0.05);
  EXPECT_LT(fp32_total, 0.3);
  EXPECT_LT(tf32_total, fp32_total / 2);
}

}  // namespace
}  // namespace comptrain::models

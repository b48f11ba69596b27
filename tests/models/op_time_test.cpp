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

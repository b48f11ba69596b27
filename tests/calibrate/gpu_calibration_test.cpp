// `calibrate --device cuda` without a GPU: the planning, fitting, profile and platform writing
// run against a fake probe whose device follows known laws, and must recover them. (The CUDA
// probe itself, src/cuda_probe.cu, needs a GPU; calibrate/README.md says how to run it.)

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <regex>
#include <sstream>

#include "comptrain/calibrate/gpu_calibration.hpp"
#include "comptrain/models/profile_yaml.hpp"
#include "comptrain/kernels/codec.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::calibrate {
namespace {

// The fake GPU's GEMMs: fp32 at 19 TFLOP/s; on tensor cores the launch (4 us) plus FLOPs at the
// precision's rate (TF32 150, FP16 and BF16 280 TFLOP/s) x K / (K + 200), the op-time model's
// short-reduction law with gemm_k_overhead 200. Its 128 SMs divide every calibration shape's
// 128x128 tiles into whole waves, so the model's wave fill is 1 throughout.
constexpr double kFakeKOverhead = 200;
constexpr double kFakeLaunch = 4e-6;
double fake_gemm_seconds(GemmPrecision precision, const GemmShape& shape) {
  const double flops = 2.0 * static_cast<double>(shape.m * shape.n * shape.k);
  const double k = static_cast<double>(shape.k);
  switch (precision) {
    case GemmPrecision::fp32: return flops / 19e12;
    case GemmPrecision::tf32: return kFakeLaunch + flops / (150e12 * k / (k + kFakeKOverhead));
    case GemmPrecision::fp16:
    case GemmPrecision::bf16: return kFakeLaunch + flops / (280e12 * k / (k + kFakeKOverhead));
  }
  return 0;
}

// A GPU whose every cost is latency + bytes / bandwidth (or FLOPs / rate) exactly. Its streams
// are the CPU driver's, which the CUDA driver's equal byte for byte (kernels tests).
class FakeProbe final : public GpuProbe {
 public:
  std::string name = "NVIDIA A100-SXM4-40GB";
  bool has_tf32 = true;
  int codec_calls = 0;

  GpuInfo info() const override {
    GpuInfo i;
    i.name = name;
    i.memory_bytes = std::int64_t{40} << 30;
    i.multiprocessors = 128;  // not an A100's 108: whole waves for every shape (fake_gemm_seconds)
    i.compute_major = has_tf32 ? 8 : 7;
    i.device_count = 4;
    i.runtime = "fake";
    return i;
  }
  std::vector<kernels::CodecId> codecs() const override { return {kernels::CodecId::szp, kernels::CodecId::zeros}; }
  CodecTimes time_codec(kernels::CodecId codec, std::span<const float> values, double, int) override {
    ++codec_calls;
    const double bytes = static_cast<double>(values.size_bytes());
    const double rate = codec == kernels::CodecId::szp ? 300e9 : 500e9;
    return {12e-6 + bytes / rate, 9e-6 + bytes / (2 * rate)};
  }
  std::size_t compressed_size(kernels::CodecId codec, std::span<const float> values, double eb) override {
    kernels::CompressOptions o;
    o.codec = codec;
    o.eb = eb;
    return kernels::compress(values, kernels::Shape::flat(values.size()), o).size();
  }
  double time_copy(CopyKind kind, std::uint64_t bytes, int) override {
    const double b = static_cast<double>(bytes);
    switch (kind) {
      case CopyKind::h2d_pinned: return 8e-6 + b / 25e9;
      case CopyKind::d2h_pinned: return 9e-6 + b / 24e9;
      case CopyKind::h2d_pageable: return 20e-6 + b / 10e9;
      case CopyKind::d2h_pageable: return 22e-6 + b / 9e9;
      case CopyKind::d2d: return 5e-6 + b / 700e9;
    }
    return 0;
  }
  std::optional<double> time_gemm(GemmPrecision precision, const GemmShape& shape, int) override {
    if (!has_tf32 && (precision == GemmPrecision::tf32 || precision == GemmPrecision::bf16)) return std::nullopt;
    return fake_gemm_seconds(precision, shape);
  }
  double launch_overhead(int) override { return 4e-6; }
};

// Every value of an emitted platform file says where it comes from, in a comment on its line:
// measured here, copied from the base platform, this host, or an assumption. Returns how many
// value lines there were.
int expect_every_value_commented(const std::string& yaml) {
  static const std::regex value_line(R"(^ *[a-z0-9_]+: +[^ #].*$)");
  static const std::regex origin(R"(  # .*(measured|copied from platform|assumption|this host|cudaGetDeviceCount|--emit-platform))");
  std::istringstream in(yaml);
  std::string line;
  int values = 0;
  while (std::getline(in, line)) {
    if (!std::regex_match(line, value_line)) continue;
    ++values;
    EXPECT_TRUE(std::regex_search(line, origin)) << "no origin comment: " << line;
  }
  return values;
}

CalibrationOptions quick_options() {
  CalibrationOptions o;
  o.quick = true;
  o.name = "fake-a100";
  o.comptrain_version = "test";
  return o;
}

TEST(GpuCalibration, RecoversTheDevicesLaws) {
  FakeProbe probe;
  const GpuCalibrationResult r = calibrate_gpu(probe, quick_options());
  const auto& p = r.codecs.profile;
  EXPECT_EQ(p.device, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(p.device_kind, "cuda");
  EXPECT_EQ(p.platforms, std::vector<std::string>{"a100-40gb"});  // found by name: profile: auto picks it
  ASSERT_EQ(p.codecs.size(), 2u);
  const models::CodecProfile& szp = *p.find("szp");
  EXPECT_NEAR(szp.compress.latency, 12e-6, 1e-10);
  EXPECT_NEAR(szp.compress.bandwidth, 300e9, 300e9 * 1e-6);
  EXPECT_NEAR(szp.decompress.bandwidth, 600e9, 600e9 * 1e-6);
  EXPECT_EQ(szp.compress.provenance, models::Provenance::measured);
  EXPECT_NE(szp.compress.source.find("--device cuda"), std::string::npos) << szp.compress.source;
  EXPECT_NEAR(p.find("zeros")->compress.bandwidth, 500e9, 500e9 * 1e-6);
  for (models::TensorClass c : models::kTensorClasses) {
    ASSERT_TRUE(szp.ratio.count(c)) << models::to_string(c);
    EXPECT_GT(szp.ratio.at(c).heldout_samples, 0u);
    EXPECT_GT(szp.ratio.at(c).ratio(1e-3), 1.0);
  }

  const GpuMeasurements& g = r.gpu;
  EXPECT_NEAR(g.copy_models.at(CopyKind::h2d_pinned).bandwidth, 25e9, 25e9 * 1e-6);
  EXPECT_NEAR(g.copy_models.at(CopyKind::d2h_pinned).latency, 9e-6, 1e-10);
  EXPECT_NEAR(g.copy_models.at(CopyKind::d2h_pageable).bandwidth, 9e9, 9e9 * 1e-6);
  EXPECT_NEAR(g.memory_bandwidth(), 1400e9, 1400e9 * 1e-6);  // 2 x the copy rate: read + write
  // The best FP16 GEMM is the longest reduction, the square 4096 (K / (K + 200) = 0.953).
  const GemmShape square{4096, 4096, 4096, false, "square 4096"};
  const double square_rate = 2.0 * 4096.0 * 4096.0 * 4096.0 / fake_gemm_seconds(GemmPrecision::fp16, square);
  EXPECT_NEAR(g.best_gemm_rate(GemmPrecision::fp16), square_rate, square_rate * 1e-9);
  EXPECT_NEAR(g.best_gemm_rate(GemmPrecision::fp32), 19e12, 19e12 * 1e-9);
  // The GPT-2 MLP's K = 768 and 3072 run below the square's rate.
  EXPECT_GT(g.layer_gemm_efficiency(), 0.85);
  EXPECT_LT(g.layer_gemm_efficiency(), 0.95);
  EXPECT_DOUBLE_EQ(g.launch_overhead, 4e-6);
  // The op-time model's GEMM curve, fitted on the tensor-core GEMMs, finds the device's law:
  // k0 200 and each precision's rate at endless K, to rounding.
  const std::optional<GemmCurve> curve = fit_gemm_curve(g, 0.9);
  ASSERT_TRUE(curve.has_value());
  EXPECT_DOUBLE_EQ(curve->k_overhead, kFakeKOverhead);
  EXPECT_NEAR(curve->rate.at(GemmPrecision::fp16), 280e12, 280e12 * 1e-6);
  EXPECT_NEAR(curve->rate.at(GemmPrecision::bf16), 280e12, 280e12 * 1e-6);
  EXPECT_NEAR(curve->rate.at(GemmPrecision::tf32), 150e12, 150e12 * 1e-6);
  EXPECT_EQ(curve->rate.count(GemmPrecision::fp32), 0u);  // CUDA cores: no curve
  EXPECT_LT(curve->rms_log_error, 1e-6);
  EXPECT_GT(curve->rms_log_error_flat, 0.05);  // without k0 the sweep's short K cannot be matched
  EXPECT_EQ(curve->gemms, 3 * g.gemm.size() / 4);
}

// Without two values of K among the tensor-core GEMMs (or without the SMs) there is no curve.
TEST(GpuCalibration, NoGemmCurveWithoutASpreadOfK) {
  GpuMeasurements g;
  g.info.multiprocessors = 128;
  g.copy_models[CopyKind::d2d] = {};
  g.copy_models[CopyKind::d2d].bandwidth = 700e9;
  const GemmShape a{4096, 4096, 4096, false, "square"};
  g.gemm.push_back({GemmPrecision::fp16, a, fake_gemm_seconds(GemmPrecision::fp16, a)});
  g.gemm.push_back({GemmPrecision::fp32, {4096, 4096, 1024, false, "fp32"}, 1e-3});
  EXPECT_FALSE(fit_gemm_curve(g, 0.9).has_value());
  const GemmShape b{4096, 4096, 512, false, "short"};
  g.gemm.push_back({GemmPrecision::fp16, b, fake_gemm_seconds(GemmPrecision::fp16, b)});
  EXPECT_TRUE(fit_gemm_curve(g, 0.9).has_value());
  g.info.multiprocessors = 0;
  EXPECT_FALSE(fit_gemm_curve(g, 0.9).has_value());
}

TEST(GpuCalibration, ProfileWithGpuMeasurementsReadsBack) {
  FakeProbe probe;
  const GpuCalibrationResult r = calibrate_gpu(probe, quick_options());
  const std::string yaml = models::profile_to_yaml(r.codecs.profile, r.codecs.measurements) + gpu_measurements_yaml(r.gpu);
  EXPECT_NE(yaml.find("gpu_measurements:"), std::string::npos);
  EXPECT_NE(yaml.find("h2d_pageable:"), std::string::npos);
  const models::CalibrationProfile back = models::parse_profile(yaml, "gpu.yaml");
  EXPECT_EQ(back.device_kind, "cuda");
  EXPECT_EQ(models::profile_to_yaml(back), models::profile_to_yaml(r.codecs.profile));
}

TEST(GpuCalibration, CodecsWithoutADeviceDriverAreRefused) {
  FakeProbe probe;
  CalibrationOptions o = quick_options();
  o.codecs = {"szp", "zfp"};
  try {
    calibrate_gpu(probe, o);
    FAIL() << "zfp has no CUDA driver";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'zfp' has no CUDA driver"), std::string::npos) << e.what();
  }
  o.codecs = {"zeros"};
  const auto r = calibrate_gpu(probe, o);
  ASSERT_EQ(r.codecs.profile.codecs.size(), 1u);
  EXPECT_EQ(r.codecs.profile.codecs[0].codec, "zeros");
}

TEST(GpuPlatform, EmittedPlatformParsesWithTheMeasuredValues) {
  FakeProbe probe;
  probe.name = "Some Future GPU";
  const GpuCalibrationResult r = calibrate_gpu(probe, quick_options());
  EXPECT_TRUE(r.codecs.profile.platforms.empty());
  PlatformEmitOptions o;
  o.name = "future";
  o.date = "2026-11-22";
  o.host_name = "Test CPU";
  o.host_cores = 16;
  o.host_memory_bytes = std::int64_t{64} << 30;
  const std::string yaml = platform_yaml(r.gpu, o);
  const models::Platform pl = models::parse_platform(yaml, "future.yaml");
  EXPECT_EQ(pl.name, "future");
  EXPECT_EQ(pl.gpu.name, "Some Future GPU");
  EXPECT_EQ(pl.gpu.memory_bytes, std::int64_t{40} << 30);
  EXPECT_NEAR(pl.gpu.memory_bandwidth, 1400e9, 1400e9 * 1e-5);
  EXPECT_NEAR(pl.gpu.peak_fp32, 19e12, 19e12 * 1e-5);
  EXPECT_NEAR(pl.gpu.peak_tf32, 150e12, 150e12 * 1e-5);
  EXPECT_NEAR(pl.gpu.launch_overhead, 4e-6, 1e-9);
  EXPECT_NEAR(pl.host_link.bandwidth, 24e9, 24e9 * 1e-5);  // the slower direction
  EXPECT_NEAR(pl.host_link.latency, 8.5e-6, 1e-9);
  EXPECT_NEAR(pl.host_link.pageable_bandwidth, 9e9, 9e9 * 1e-5);  // the slower pageable direction
  EXPECT_EQ(pl.host.cores, 16);
  EXPECT_EQ(pl.host.memory_bytes, std::int64_t{64} << 30);
  EXPECT_EQ(pl.gpus_per_node, 4);
  EXPECT_EQ(pl.gpu.compute_capability_major, 8);  // cudaDeviceProp, read back from the file
  EXPECT_EQ(pl.gpu_link.bandwidth, 0.0);  // not measured, no base: absent
  // The GEMM curve: the tensor-core peaks are its rates, linear and matmul at 1 of them, and the
  // short-reduction overhead the device's; the SMs come from the device.
  EXPECT_NEAR(pl.gpu.peak_fp16, 280e12, 280e12 * 1e-5);
  EXPECT_EQ(pl.gpu.sms, 128);
  EXPECT_DOUBLE_EQ(pl.efficiency.gemm_k_overhead, kFakeKOverhead);
  EXPECT_DOUBLE_EQ(pl.efficiency.compute_for(traces::OpKind::linear), 1.0);
  EXPECT_DOUBLE_EQ(pl.efficiency.compute_for(traces::OpKind::matmul), 1.0);
  EXPECT_NE(yaml.find("gemm_k_overhead: 200  # measured by comptrain calibrate on 2026-11-22: fitted with the peaks above on"), std::string::npos)
      << yaml;
  EXPECT_NE(yaml.find("assumption"), std::string::npos);  // unmeasured values say so
  // name 1, gpu 6 (name, memory, memory_visible, compute capability, bandwidth, sms) + 4 peaks + launch 1, host 5, host_link 4
  // (with the pageable rate), gpus_per_node 1, efficiency: compute default, linear, matmul, conv, attention, memory
  // default and gemm_k_overhead 7.
  EXPECT_EQ(expect_every_value_commented(yaml), 29) << yaml;
  EXPECT_NE(yaml.find("    fp32: 19 TFLOP/s  # measured by comptrain calibrate on 2026-11-22: best cuBLAS GEMM rate over"), std::string::npos) << yaml;
}

// Names that YAML would misread unquoted (a colon and a space, a leading quote, a '#') are quoted
// by the emitter and read back unchanged.
TEST(GpuPlatform, OddNamesSurviveTheRoundTrip) {
  FakeProbe probe;
  probe.name = "GPU: \"X\" #2";
  const GpuCalibrationResult r = calibrate_gpu(probe, quick_options());
  PlatformEmitOptions o;
  o.name = "odd";
  o.date = "2026-11-22";
  o.host_name = "'CPU' # 1: fast";
  const models::Platform pl = models::parse_platform(platform_yaml(r.gpu, o), "odd.yaml");
  EXPECT_EQ(pl.gpu.name, probe.name);
  EXPECT_EQ(pl.host.name, o.host_name);
}

TEST(GpuPlatform, PreAmpereHasNoTf32AndBaseFillsTheRest) {
  FakeProbe probe;
  probe.name = "Tesla V100-SXM2-16GB";
  probe.has_tf32 = false;
  const GpuCalibrationResult r = calibrate_gpu(probe, quick_options());
  const models::Platform base = models::builtin_platform("v100-16gb");
  PlatformEmitOptions o;
  o.name = "v100-here";
  o.date = "2026-11-22";
  o.base = &base;
  const models::Platform pl = models::parse_platform(platform_yaml(r.gpu, o), "v100-here.yaml");
  EXPECT_EQ(pl.gpu.peak_tf32, 0.0);
  EXPECT_EQ(pl.gpu.peak_bf16, 0.0);
  EXPECT_EQ(pl.host.name, base.host.name);
  EXPECT_EQ(pl.host.cores, base.host.cores);
  EXPECT_EQ(pl.gpus_per_node, base.gpus_per_node);
  EXPECT_NEAR(pl.gpu_link.bandwidth, base.gpu_link.bandwidth, base.gpu_link.bandwidth * 1e-5);
  EXPECT_NEAR(pl.efficiency.compute_for(traces::OpKind::conv), base.efficiency.compute_for(traces::OpKind::conv), 1e-9);
  EXPECT_NEAR(pl.gpu.peak_fp16, 280e12, 280e12 * 1e-5);  // measured, not the base's datasheet figure
  EXPECT_NEAR(pl.gpu.max_power, base.gpu.max_power, 1e-9);
  const std::string yaml = platform_yaml(r.gpu, o);
  EXPECT_GT(expect_every_value_commented(yaml), 20) << yaml;
  EXPECT_NE(yaml.find("copied from platform v100-16gb"), std::string::npos) << yaml;
}

TEST(GpuProbeLoading, ExplainsWhyThereIsNoProbe) {
  if (built_with_cuda()) {
    // With the module but no GPU (or a bad path), opening must fail with an input error, not crash.
    setenv("COMPTRAIN_CUDA_PROBE", "/nonexistent/libcomptrain_cuda_probe.so", 1);
    EXPECT_THROW(open_cuda_probe(), InputError);
    unsetenv("COMPTRAIN_CUDA_PROBE");
  } else {
    EXPECT_THROW(open_cuda_probe(), InputError);
  }
}

}  // namespace
}  // namespace comptrain::calibrate

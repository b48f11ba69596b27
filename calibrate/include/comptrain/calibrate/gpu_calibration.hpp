#pragma once
// `comptrain calibrate --device cuda`: the codecs' kernels, the host <-> device and device
// copies, kernel launches and cuBLAS GEMMs of one GPU, measured through a `GpuProbe` and fitted
// into a profile; and the platform file derived from them (`--emit-platform`).
//
// The probe (gpu_probe.hpp) is the only CUDA code; everything that plans, fits and writes is
// plain C++, so tests drive it with a fake probe on machines without a GPU.

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/calibrate/calibrate.hpp"
#include "comptrain/calibrate/fit.hpp"
#include "comptrain/calibrate/gpu_probe.hpp"
#include "comptrain/models/platform.hpp"

namespace comptrain::calibrate {

// What a GPU calibration measured besides the codecs.
struct GpuMeasurements {
  GpuInfo info;
  std::map<CopyKind, std::vector<TimeSample>> copies;  // bytes copied, seconds
  std::map<CopyKind, models::TimeModel> copy_models;   // fits of the above: latency + bytes / bandwidth
  std::vector<GemmMeasurement> gemm;
  double launch_overhead = 0;  // seconds

  // Highest rate measured for `precision` over all shapes (0: none).
  double best_gemm_rate(GemmPrecision precision) const;
  // Geometric mean over the layer-shaped GEMMs of rate / best rate, per precision measured,
  // then averaged: how far below its best a transformer layer's GEMMs run (0: none measured).
  double layer_gemm_efficiency() const;
  // Device memory bandwidth from device-to-device copies: 2 x bytes / s (each byte is read and
  // written), from the copy model's bandwidth.
  double memory_bandwidth() const;
};

// The GEMM curve of the op-time model (models/README.md, "Wave quantization" and "Short
// reductions") fitted on the tensor-core GEMMs measured (TF32, FP16, BF16): one k0
// (efficiency.gemm_k_overhead, elements of K) shared by the precisions and, per precision, the
// rate its GEMMs approach at endless K in whole waves, such that the model's time of each GEMM,
//   launch + max(FLOPs / (rate x models::gemm_factor(m, n, k, SMs, k0)), bytes / (bandwidth x memory efficiency)),
// best matches the measured one (least squares on the logs of the times; k0 searched over 0 to
// 4,096, each rate for a given k0 by Brent's method).
struct GemmCurve {
  double k_overhead = 0;
  std::map<GemmPrecision, double> rate;  // FLOP/s at endless K in whole waves
  double rms_log_error = 0;              // over the GEMMs fitted
  double rms_log_error_flat = 0;         // the same fit with k0 = 0 (each rate refitted)
  std::size_t gemms = 0;
};

// nullopt when the tensor-core GEMMs measured span fewer than two values of K (nothing to fit
// k0 on) or the GPU's SMs or memory bandwidth are unknown.
std::optional<GemmCurve> fit_gemm_curve(const GpuMeasurements& gpu, double memory_efficiency);

// The memory efficiency an emitted platform carries (efficiency.memory.default, an assumption:
// elementwise kernels stream at ~90 % of a device-to-device copy), and so the one its GEMM curve
// is fitted with (platform_yaml, and the calibrate command's summary).
inline constexpr double kEmittedMemoryEfficiency = 0.9;

struct GpuCalibrationResult {
  CalibrationResult codecs;  // profile (device_kind cuda) and raw codec measurements
  GpuMeasurements gpu;
};

// Runs the whole GPU calibration through `probe`: codec times (64 KiB .. 1 GiB, --quick: up to
// 16 MiB) and ratios (the same synthetic samples as on the CPU), copies, GEMMs (fewer shapes
// with --quick), launch overhead. `options.codecs` must be a subset of probe.codecs()
// (InputError naming the ones the device driver lacks). The profile's `platforms` lists the
// built-in platforms whose gpu.name is this GPU's name, so `profile: auto` finds it.
GpuCalibrationResult calibrate_gpu(GpuProbe& probe, const CalibrationOptions& options);

// The raw link / GEMM measurements as a top-level `gpu_measurements:` YAML section, appended to
// the profile (readers ignore it, like each codec's `measurements`).
std::string gpu_measurements_yaml(const GpuMeasurements& gpu);

struct PlatformEmitOptions {
  std::string name;                       // platform name (the file's stem by default)
  std::string date;                       // of the calibration
  const models::Platform* base = nullptr;  // values not measured are copied from it (nullptr: assumptions)
  std::string host_name;                  // this host: CPU model, cores and memory (from /proc)
  int host_cores = 1;
  std::int64_t host_memory_bytes = 0;
};

// A platform file (scenarios/platforms format, every value commented with where it comes
// from: measured here, copied from the base platform, or an assumption) that parse_platform
// accepts.
std::string platform_yaml(const GpuMeasurements& gpu, const PlatformEmitOptions& options);

// This host's total memory (/proc/meminfo MemTotal; 0 when unknown).
std::int64_t host_memory_bytes();

}  // namespace comptrain::calibrate

#pragma once
// `comptrain calibrate`: times the compressor kernels and measures their compression ratios on
// activation-like samples, then fits the cost model (calibrate/README.md).

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/models/compression_model.hpp"
#include "comptrain/models/profile_yaml.hpp"

namespace comptrain::calibrate {

// Written into profiles by models::profile_to_yaml; calibrate fills them.
using models::CodecMeasurements;

// Where a calibration stands, at the start of each stage and at the end.
struct ProgressUpdate {
  double fraction = 0;        // of the estimated work, in [0, 1]
  std::string stage;          // "szp: timing 4096 KiB", "done"
  double elapsed = 0;         // seconds since the start
  std::optional<double> left; // estimated seconds left (none before any work is done)
  bool done = false;
};
// "calibrate: [ 45%] szp: timing 4096 KiB (elapsed 3.2 s, ~5 s left)"
std::string progress_line(const ProgressUpdate& update);

struct CalibrationOptions {
  bool quick = false;               // 64 KiB .. 16 MiB, fewer repetitions and samples (< 60 s on 2 cores)
  std::vector<std::string> codecs;  // kernels' codec names; empty: all
  unsigned threads = 0;             // CPU driver threads; 0 = hardware concurrency
  std::string name;                 // profile name
  std::string comptrain_version;
  // Called at the start of each stage and at the end (the CLI draws a bar or prints lines).
  std::function<void(const ProgressUpdate&)> progress;
};

struct CalibrationResult {
  models::CalibrationProfile profile;
  std::vector<CodecMeasurements> measurements;
};

// With the CPU driver. Throws InputError for an unknown codec name.
CalibrationResult calibrate_cpu(const CalibrationOptions& options);

// Poor fits, which `comptrain calibrate` warns about (calibrate/README.md, "Poor fits"): a time
// model whose R² is below kMinTimeR2 (latency + bytes / bandwidth does not follow the measured
// times, e.g. cache effects on the CPU), or a ratio model whose largest relative error on the
// held-back samples exceeds kMaxRatioHeldoutError. The profile is written either way: a poor
// model is still the best this form gives, but its predictions deserve the stated doubt.
inline constexpr double kMinTimeR2 = 0.9;
inline constexpr double kMaxRatioHeldoutError = 0.25;

// One line per poor fit, each starting "warning: " and naming the codec, the time model
// (compress / decompress) or the ratio model's class, and the figure against its threshold.
std::vector<std::string> fit_warnings(const models::CalibrationProfile& profile);

// The fitted models, a few lines per codec: time models with R² and max relative error, ratio
// models per class with their held-back errors, and the ratio at eb 1e-3 with the class's default
// features only for codecs that have an error bound (quant, fp16, bf16 have none: one ratio).
std::string profile_summary(const models::CalibrationProfile& profile);

// Whether a CUDA GPU is visible to this process (a /dev/nvidia[0-9]* device node).
bool gpu_visible();

// The CPU's model name (/proc/cpuinfo) and thread count, e.g. "AMD EPYC (2 threads)".
std::string cpu_description(unsigned threads);

}  // namespace comptrain::calibrate

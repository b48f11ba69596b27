#pragma once
// `comptrain calibrate`: times the compressor kernels and measures their compression ratios on
// activation-like samples, then fits the cost model (calibrate/README.md).

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/calibrate/profile.hpp"
#include "comptrain/models/compression_model.hpp"

namespace comptrain::calibrate {

struct CalibrationOptions {
  bool quick = false;               // 64 KiB .. 16 MiB, fewer repetitions and samples (< 60 s on 2 cores)
  std::vector<std::string> codecs;  // kernels' codec names; empty: all
  unsigned threads = 0;             // CPU driver threads; 0 = hardware concurrency
  std::string name;                 // profile name
  std::string comptrain_version;
  // One line per stage (what it does, elapsed, estimated time left).
  std::function<void(std::string_view)> progress;
};

struct CalibrationResult {
  models::CalibrationProfile profile;
  std::vector<CodecMeasurements> measurements;
};

// With the CPU driver. Throws InputError for an unknown codec name.
CalibrationResult calibrate_cpu(const CalibrationOptions& options);

// Whether a CUDA GPU is visible to this process (a /dev/nvidia[0-9]* device node).
bool gpu_visible();

// The CPU's model name (/proc/cpuinfo) and thread count, e.g. "AMD EPYC (2 threads)".
std::string cpu_description(unsigned threads);

}  // namespace comptrain::calibrate

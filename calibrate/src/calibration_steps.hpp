#pragma once
// The steps `calibrate_cpu` and `calibrate_gpu` share: the measurement plan, the progress
// lines, the timing data and the ratio measurements on synthetic activations (internal).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/calibrate/calibrate.hpp"
#include "comptrain/models/compression_model.hpp"

namespace comptrain::calibrate::detail {

// Relative error bounds of the ratio samples: log-spaced over the range DNN activation
// compression uses (COMET and the cuSZ-family papers evaluate REL 1e-4 .. 1e-2).
inline constexpr double kErrorBounds[] = {1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2};
// The error bound of the timing runs; time depends little on it for szp (fixed-length coding).
inline constexpr double kTimingErrorBound = 1e-3;
// The classes sampled for the ratio models (generic pools them).
inline constexpr models::TensorClass kSampledClasses[] = {models::TensorClass::post_relu, models::TensorClass::batchnorm,
                                                          models::TensorClass::gelu, models::TensorClass::linear};

struct MeasurementPlan {
  std::vector<std::uint64_t> sizes;  // bytes of float32 input
  double min_seconds = 0;            // CPU: per size, repeat until this much time was spent...
  int min_reps = 0;                  // ...and at least this many times (GPU: exactly this many)
  std::size_t sample_values = 0;     // per ratio sample
  int draws = 0;                     // ratio samples per class (every 4th held back)
};
MeasurementPlan plan_for(bool quick);

// Today's date, ISO 8601 (UTC).
std::string today();

// One progress line per stage: percentage of the work units done, elapsed time, and the time
// left extrapolated from the rate so far. `fixed` seconds are work that takes its time whatever
// its size (the CPU's minimum time per timed size).
class Progress {
 public:
  Progress(std::function<void(const ProgressUpdate&)> sink, double total_units, double total_fixed_seconds);
  void stage(std::string_view what);
  void done(double units, double fixed_seconds = 0);

 private:
  using Clock = std::chrono::steady_clock;
  std::function<void(const ProgressUpdate&)> sink_;
  double total_units_, total_fixed_;
  double units_done_ = 0, fixed_done_ = 0;
  Clock::time_point start_ = Clock::now();
};

// Post-ReLU values (half zeros) for the timing runs: one synthetic sample tiled up to `count`
// values; tiling keeps data generation out of the run time, and the chunked codecs have no
// cross-chunk state.
std::vector<float> timing_data(std::size_t count);

// Fits profile.compress / decompress to raw's timings, marked measured with `source`.
void fit_codec_time_models(const CodecMeasurements& raw, const std::string& source, models::CodecProfile& profile);

// Bytes of the stream a codec writes for `values` at relative error bound `eb`.
using CompressedSize = std::function<std::size_t(std::span<const float> values, double eb)>;

// Bytes through the codec in measure_ratio_models, for one codec (the CPU's progress units).
double ratio_work(const MeasurementPlan& plan);

// Fits the ratio models of one codec (every sampled class, and generic) on plan.draws
// synthetic samples per class at every error bound, 1 in 4 held back; fills profile.ratio and
// raw.ratio. `how` names the driver in each model's source ("comptrain calibrate --device cpu").
// The step counts as `units` of the caller's progress.
void measure_ratio_models(const MeasurementPlan& plan, const CompressedSize& compressed_size, std::string_view how,
                          models::CodecProfile& profile, CodecMeasurements& raw, Progress& progress, double units);

}  // namespace comptrain::calibrate::detail

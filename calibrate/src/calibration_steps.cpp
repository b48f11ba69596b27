#include "calibration_steps.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <iterator>
#include <map>

#include "comptrain/calibrate/fit.hpp"
#include "comptrain/calibrate/samples.hpp"

namespace comptrain::calibrate::detail {

MeasurementPlan plan_for(bool quick) {
  MeasurementPlan p;
  const std::uint64_t top = quick ? (std::uint64_t{16} << 20) : (std::uint64_t{1} << 30);
  for (std::uint64_t s = 64 << 10; s <= top; s *= 4) p.sizes.push_back(s);
  p.min_seconds = quick ? 0.1 : 0.5;
  p.min_reps = quick ? 3 : 5;
  p.sample_values = quick ? (std::size_t{1} << 16) : (std::size_t{1} << 20);
  p.draws = quick ? 8 : 24;
  return p;
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[16];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%d", &tm);
  return buffer;
}

Progress::Progress(std::function<void(const ProgressUpdate&)> sink, double total_units, double total_fixed_seconds)
    : sink_(std::move(sink)), total_units_(std::max(total_units, 1.0)), total_fixed_(total_fixed_seconds) {}

void Progress::stage(std::string_view what) {
  if (!sink_) return;
  ProgressUpdate u;
  u.elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  u.stage = std::string(what);
  u.done = what == "done";
  u.fraction = u.done ? 1.0 : std::min(1.0, units_done_ / total_units_);
  const double unit_seconds = std::max(0.0, u.elapsed - fixed_done_);
  if (u.done) {
    u.left = 0.0;
  } else if (units_done_ > 0) {
    u.left = std::max(0.0, total_fixed_ - fixed_done_) + unit_seconds / units_done_ * std::max(0.0, total_units_ - units_done_);
  }
  sink_(u);
}

void Progress::done(double units, double fixed_seconds) {
  units_done_ += units;
  fixed_done_ += fixed_seconds;
}

std::vector<float> timing_data(std::size_t count) {
  const std::vector<float> tile = synthetic_activation(models::TensorClass::post_relu, std::size_t{1} << 20, 12345);
  std::vector<float> data(count);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = tile[i % tile.size()];
  return data;
}

double ratio_work(const MeasurementPlan& plan) {
  return static_cast<double>(std::size(kSampledClasses)) * plan.draws * static_cast<double>(std::size(kErrorBounds)) * 4.0 *
         static_cast<double>(plan.sample_values);
}

void fit_codec_time_models(const CodecMeasurements& raw, const std::string& source, models::CodecProfile& profile) {
  profile.compress = fit_time_model(raw.compress);
  profile.decompress = fit_time_model(raw.decompress);
  profile.compress.provenance = profile.decompress.provenance = models::Provenance::measured;
  profile.compress.source = profile.decompress.source = source;
}

void measure_ratio_models(const MeasurementPlan& plan, const CompressedSize& compressed_size, std::string_view how,
                          models::CodecProfile& profile, CodecMeasurements& raw, Progress& progress, double units) {
  progress.stage(fmt::format("{}: compression ratios on synthetic activations", profile.codec));
  std::map<models::TensorClass, std::vector<RatioSample>> by_class;
  std::uint32_t seed = 1;
  for (models::TensorClass cls : kSampledClasses) {
    for (int draw = 0; draw < plan.draws; ++draw) {
      const auto values = synthetic_activation(cls, plan.sample_values, seed++);
      const models::DataFeatures features = features_of(values);
      for (double eb : kErrorBounds) {
        RatioSample s;
        s.eb = eb;
        s.features = features;
        s.ratio = static_cast<double>(values.size() * sizeof(float)) / static_cast<double>(compressed_size(values, eb));
        s.heldout = draw % 4 == 3;  // whole tensors held back: the error is on unseen data
        by_class[cls].push_back(s);
        by_class[models::TensorClass::generic].push_back(s);
        raw.ratio.emplace_back(cls, s);
      }
    }
    progress.done(units / static_cast<double>(std::size(kSampledClasses)));
  }
  for (auto& [cls, samples] : by_class) {
    models::RatioModel m = fit_ratio_model(samples);
    m.provenance = models::Provenance::measured;
    m.source = fmt::format("{}: {} synthetic {} samples of {} values, eb {}..{} (REL); 1 in 4 held back", how, samples.size(),
                           models::to_string(cls), plan.sample_values, kErrorBounds[0], kErrorBounds[std::size(kErrorBounds) - 1]);
    profile.ratio[cls] = m;
  }
}

}  // namespace comptrain::calibrate::detail

#include "comptrain/calibrate/calibrate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "comptrain/calibrate/samples.hpp"
#include "comptrain/kernels/codec.hpp"

namespace comptrain::calibrate {
namespace {

using Clock = std::chrono::steady_clock;

// Relative error bounds of the ratio samples: log-spaced over the range DNN activation
// compression uses (COMET and the cuSZ-family papers evaluate REL 1e-4 .. 1e-2).
constexpr double kErrorBounds[] = {1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2};
// The error bound of the timing runs; time depends little on it for szp (fixed-length coding).
constexpr double kTimingErrorBound = 1e-3;

std::string today() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[16];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%d", &tm);
  return buffer;
}

// Progress: the time left is a fixed part (each timed size runs for at least min_seconds per
// direction, however small) plus bytes through the codecs at the rate seen so far.
class Progress {
 public:
  Progress(std::function<void(std::string_view)> sink, double total_bytes, double total_fixed_seconds)
      : sink_(std::move(sink)), total_bytes_(total_bytes), total_fixed_(total_fixed_seconds) {}
  void stage(std::string_view what) {
    if (!sink_) return;
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    const double byte_seconds = std::max(0.0, elapsed - fixed_done_);
    std::string left = "estimating";
    if (bytes_done_ > 0) {
      const double estimate = std::max(0.0, total_fixed_ - fixed_done_) + byte_seconds / bytes_done_ * std::max(0.0, total_bytes_ - bytes_done_);
      left = fmt::format("~{:.0f} s left", estimate);
    }
    sink_(fmt::format("calibrate: [{:>3.0f}%] {} (elapsed {:.1f} s, {})", 100.0 * bytes_done_ / total_bytes_, what, elapsed, left));
  }
  void done(double bytes, double fixed_seconds = 0) {
    bytes_done_ += bytes;
    fixed_done_ += fixed_seconds;
  }

 private:
  std::function<void(std::string_view)> sink_;
  double total_bytes_, total_fixed_;
  double bytes_done_ = 0, fixed_done_ = 0;
  Clock::time_point start_ = Clock::now();
};

struct Plan {
  std::vector<std::uint64_t> sizes;  // bytes of float32 input
  double min_seconds = 0;            // per size: repeat until this much time was spent...
  int min_reps = 0;                  // ...and at least this many times
  std::size_t sample_values = 0;     // per ratio sample
  int draws = 0;                     // ratio samples per class (every 4th held back)
};

Plan plan_for(bool quick) {
  Plan p;
  const std::uint64_t top = quick ? (std::uint64_t{16} << 20) : (std::uint64_t{1} << 30);
  for (std::uint64_t s = 64 << 10; s <= top; s *= 4) p.sizes.push_back(s);
  p.min_seconds = quick ? 0.1 : 0.5;
  p.min_reps = quick ? 3 : 5;
  p.sample_values = quick ? (std::size_t{1} << 16) : (std::size_t{1} << 20);
  p.draws = quick ? 8 : 24;
  return p;
}

// Fastest of the repetitions of `f`, after one untimed warm-up call (first touch of the
// output pages, thread start-up). The minimum rather than the median: the VM's cores are
// shared, and other processes only ever add time, so the minimum is the best estimate of
// what the kernel itself costs.
template <class F>
double time_best(F&& f, const Plan& plan) {
  f();
  std::vector<double> times;
  const auto start = Clock::now();
  while (static_cast<int>(times.size()) < plan.min_reps ||
         (std::chrono::duration<double>(Clock::now() - start).count() < plan.min_seconds && times.size() < 1000)) {
    const auto t0 = Clock::now();
    f();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return *std::min_element(times.begin(), times.end());
}

}  // namespace

bool gpu_visible() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 6 && name.starts_with("nvidia") && std::isdigit(static_cast<unsigned char>(name[6]))) return true;
  }
  return false;
}

std::string cpu_description(unsigned threads) {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(in, line)) {
    if (line.starts_with("model name")) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  }
  return fmt::format("{} ({} threads)", model, threads);
}

CalibrationResult calibrate_cpu(const CalibrationOptions& options) {
  std::vector<kernels::CodecId> codecs;
  if (options.codecs.empty()) {
    for (const auto& info : kernels::codecs()) codecs.push_back(info.id);
  } else {
    for (const auto& name : options.codecs) codecs.push_back(kernels::codec_from_name(name));
  }
  const unsigned threads = options.threads == 0 ? std::max(1u, std::thread::hardware_concurrency()) : options.threads;
  const Plan plan = plan_for(options.quick);

  // Work estimate: bytes through the codecs (timing: about min_reps passes per size, both
  // directions; ratio: one compression per class, draw and bound).
  double timing_work = 0;
  for (auto s : plan.sizes) timing_work += 2.0 * (plan.min_reps + 1) * static_cast<double>(s);
  const double ratio_work = 4.0 * plan.draws * std::size(kErrorBounds) * 4.0 * static_cast<double>(plan.sample_values);
  const double fixed = 2.0 * plan.min_seconds * static_cast<double>(plan.sizes.size());
  Progress progress(options.progress, static_cast<double>(codecs.size()) * (timing_work + ratio_work),
                    static_cast<double>(codecs.size()) * fixed);

  CalibrationResult result;
  auto& profile = result.profile;
  profile.name = options.name;
  profile.device = cpu_description(threads);
  profile.device_kind = "cpu";
  profile.date = today();
  profile.comptrain_version = options.comptrain_version;

  // Timing data: a post-ReLU sample (half zeros), tiled up to the largest size; tiling keeps
  // data generation out of the run time, and the chunked codecs have no cross-chunk state.
  const std::vector<float> tile = synthetic_activation(models::TensorClass::post_relu, std::size_t{1} << 20, 12345);
  std::vector<float> data(plan.sizes.back() / sizeof(float));
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = tile[i % tile.size()];
  std::vector<float> restored(data.size());

  const std::string source = fmt::format("comptrain calibrate --device cpu{}: CPU driver, {} threads, fastest of >= {} runs after a warm-up",
                                         options.quick ? " --quick" : "", threads, plan.min_reps);
  for (kernels::CodecId id : codecs) {
    const auto& info = kernels::codec_info(id);
    const std::string codec_name(info.name);
    CodecMeasurements raw;
    raw.codec = codec_name;
    models::CodecProfile cp;
    cp.codec = codec_name;

    for (std::uint64_t bytes : plan.sizes) {
      progress.stage(fmt::format("{}: timing {} KiB", codec_name, bytes >> 10));
      const std::span<const float> input(data.data(), bytes / sizeof(float));
      kernels::CompressOptions o;
      o.codec = id;
      o.eb = kTimingErrorBound;
      o.threads = threads;
      std::vector<std::byte> stream;
      const double c = time_best([&] { stream = kernels::compress(input, kernels::Shape::flat(input.size()), o); }, plan);
      const std::span<float> output(restored.data(), input.size());
      const double d = time_best([&] { kernels::decompress_into(stream, output, threads); }, plan);
      raw.compress.push_back({static_cast<double>(bytes), c});
      raw.decompress.push_back({static_cast<double>(bytes), d});
      progress.done(2.0 * (plan.min_reps + 1) * static_cast<double>(bytes), 2.0 * plan.min_seconds);
    }
    cp.compress = fit_time_model(raw.compress);
    cp.decompress = fit_time_model(raw.decompress);
    cp.compress.provenance = cp.decompress.provenance = models::Provenance::measured;
    cp.compress.source = cp.decompress.source = source;

    progress.stage(fmt::format("{}: compression ratios on synthetic activations", codec_name));
    std::map<models::TensorClass, std::vector<RatioSample>> by_class;
    std::uint32_t seed = 1;
    for (models::TensorClass cls : {models::TensorClass::post_relu, models::TensorClass::batchnorm, models::TensorClass::gelu,
                                    models::TensorClass::linear}) {
      for (int draw = 0; draw < plan.draws; ++draw) {
        const auto values = synthetic_activation(cls, plan.sample_values, seed++);
        const models::DataFeatures features = features_of(values);
        for (double eb : kErrorBounds) {
          kernels::CompressOptions o;
          o.codec = id;
          o.eb = eb;
          o.threads = threads;
          const auto stream = kernels::compress(values, kernels::Shape::flat(values.size()), o);
          RatioSample s;
          s.eb = eb;
          s.features = features;
          s.ratio = static_cast<double>(values.size() * sizeof(float)) / static_cast<double>(stream.size());
          s.heldout = draw % 4 == 3;  // whole tensors held back: the error is on unseen data
          by_class[cls].push_back(s);
          by_class[models::TensorClass::generic].push_back(s);
          raw.ratio.emplace_back(cls, s);
        }
      }
      progress.done(plan.draws * std::size(kErrorBounds) * 4.0 * static_cast<double>(plan.sample_values));
    }
    for (auto& [cls, samples] : by_class) {
      models::RatioModel m = fit_ratio_model(samples);
      m.provenance = models::Provenance::measured;
      m.source = fmt::format("comptrain calibrate{}: {} synthetic {} samples of {} values, eb {}..{} (REL); 1 in 4 held back",
                             options.quick ? " --quick" : "", samples.size(), models::to_string(cls), plan.sample_values,
                             kErrorBounds[0], kErrorBounds[std::size(kErrorBounds) - 1]);
      cp.ratio[cls] = m;
    }
    profile.codecs.push_back(std::move(cp));
    result.measurements.push_back(std::move(raw));
  }
  progress.stage("done");
  return result;
}

}  // namespace comptrain::calibrate

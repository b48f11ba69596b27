#include "comptrain/calibrate/calibrate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>

#include "calibration_steps.hpp"
#include "comptrain/kernels/codec.hpp"

namespace comptrain::calibrate {
namespace {

using Clock = std::chrono::steady_clock;
using detail::MeasurementPlan;

// Fastest of the repetitions of `f`, after one untimed warm-up call (first touch of the
// output pages, thread start-up). The minimum rather than the median: the VM's cores are
// shared, and other processes only ever add time, so the minimum is the best estimate of
// what the kernel itself costs.
template <class F>
double time_best(F&& f, const MeasurementPlan& plan) {
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

std::string progress_line(const ProgressUpdate& u) {
  return fmt::format("calibrate: [{:>3.0f}%] {} (elapsed {:.1f} s, {})", 100 * u.fraction, u.stage, u.elapsed,
                     u.left ? fmt::format("~{:.0f} s left", *u.left) : std::string("estimating"));
}

std::vector<std::string> fit_warnings(const models::CalibrationProfile& profile) {
  std::vector<std::string> lines;
  for (const auto& c : profile.codecs) {
    for (const auto& [what, m] : {std::pair{"compress", &c.compress}, std::pair{"decompress", &c.decompress}}) {
      if (m->r2 < kMinTimeR2) {
        lines.push_back(fmt::format("warning: {} {} time model: R² {:.3f} is below {} (max relative error {:.0f} %); "
                                    "latency + bytes / bandwidth does not follow the measured times well",
                                    c.codec, what, m->r2, kMinTimeR2, 100 * m->max_relative_error));
      }
    }
    for (const auto& [cls, m] : c.ratio) {
      if (m.heldout_max_relative_error > kMaxRatioHeldoutError) {
        lines.push_back(fmt::format("warning: {} ratio model, class {}: held-back max relative error {:.0f} % exceeds {:.0f} %", c.codec,
                                    models::to_string(cls), 100 * m.heldout_max_relative_error, 100 * kMaxRatioHeldoutError));
      }
    }
  }
  return lines;
}

std::string profile_summary(const models::CalibrationProfile& p) {
  std::string out;
  for (const auto& c : p.codecs) {
    out += fmt::format("  {:<6} compress   {:9.3g} s + B / {:7.3f} GB/s  (R² {:.4f}, max rel. error {:.1f} %)\n", c.codec, c.compress.latency,
                       c.compress.bandwidth / 1e9, c.compress.r2, 100 * c.compress.max_relative_error);
    out += fmt::format("  {:<6} decompress {:9.3g} s + B / {:7.3f} GB/s  (R² {:.4f}, max rel. error {:.1f} %)\n", "", c.decompress.latency,
                       c.decompress.bandwidth / 1e9, c.decompress.r2, 100 * c.decompress.max_relative_error);
    // quant, fp16 and bf16 ignore the error bound: "at eb 1e-3" would suggest it matters.
    const bool bounded = kernels::codec_info(kernels::codec_from_name(c.codec)).error_bounded;
    for (const auto& [cls, m] : c.ratio) {
      out += fmt::format("  {:<6} ratio {:<10}{}: {:6.2f}  (held-back rms log error {:.3f}, max rel. error {:.1f} %)\n", "", models::to_string(cls),
                         bounded ? " at eb 1e-3" : "", m.ratio(1e-3), m.heldout_rms_log_error, 100 * m.heldout_max_relative_error);
    }
  }
  return out;
}

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
  const MeasurementPlan plan = detail::plan_for(options.quick);

  // Work units: bytes through the codecs (timing: about min_reps passes per size, both
  // directions; ratio: one compression per class, draw and bound).
  double timing_work = 0;
  for (auto s : plan.sizes) timing_work += 2.0 * (plan.min_reps + 1) * static_cast<double>(s);
  const double fixed = 2.0 * plan.min_seconds * static_cast<double>(plan.sizes.size());
  detail::Progress progress(options.progress, static_cast<double>(codecs.size()) * (timing_work + detail::ratio_work(plan)),
                            static_cast<double>(codecs.size()) * fixed);

  CalibrationResult result;
  auto& profile = result.profile;
  profile.name = options.name;
  profile.device = cpu_description(threads);
  profile.device_kind = "cpu";
  profile.date = detail::today();
  profile.comptrain_version = options.comptrain_version;

  const std::vector<float> data = detail::timing_data(plan.sizes.back() / sizeof(float));
  std::vector<float> restored(data.size());

  const std::string how = fmt::format("comptrain calibrate{}", options.quick ? " --quick" : "");
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
      o.eb = detail::kTimingErrorBound;
      o.threads = threads;
      std::vector<std::byte> stream;
      const double c = time_best([&] { stream = kernels::compress(input, kernels::Shape::flat(input.size()), o); }, plan);
      const std::span<float> output(restored.data(), input.size());
      const double d = time_best([&] { kernels::decompress_into(stream, output, threads); }, plan);
      raw.compress.push_back({static_cast<double>(bytes), c});
      raw.decompress.push_back({static_cast<double>(bytes), d});
      progress.done(2.0 * (plan.min_reps + 1) * static_cast<double>(bytes), 2.0 * plan.min_seconds);
    }
    detail::fit_codec_time_models(raw, source, cp);

    const auto compressed_size = [&](std::span<const float> values, double eb) {
      kernels::CompressOptions o;
      o.codec = id;
      o.eb = eb;
      o.threads = threads;
      return kernels::compress(values, kernels::Shape::flat(values.size()), o).size();
    };
    detail::measure_ratio_models(plan, compressed_size, how, cp, raw, progress, detail::ratio_work(plan));
    profile.codecs.push_back(std::move(cp));
    result.measurements.push_back(std::move(raw));
  }
  progress.stage("done");
  return result;
}

}  // namespace comptrain::calibrate

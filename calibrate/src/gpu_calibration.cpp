#include "comptrain/calibrate/gpu_calibration.hpp"

#include <boost/math/tools/minima.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

#include "calibration_steps.hpp"
#include "comptrain/models/op_time.hpp"
#include "comptrain/models/platform_yaml.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/traces/vocabulary.hpp"

namespace comptrain::calibrate {
namespace {

using detail::MeasurementPlan;

// Square GEMMs find the best rate; layer-shaped ones (C[tokens x out] = A[tokens x in] B) say
// how far below it a transformer layer runs (tokens = batch x sequence = 8192 in both models),
// and a sweep of K at a fixed output how much a short reduction loses.
std::vector<GemmShape> gemm_shapes(bool quick) {
  std::vector<GemmShape> shapes;
  for (std::int64_t s : quick ? std::vector<std::int64_t>{2048, 4096} : std::vector<std::int64_t>{1024, 2048, 4096, 8192}) {
    shapes.push_back({s, s, s, false, fmt::format("square {}", s)});
  }
  // GPT-2 small (hidden 768, MLP 3072), batch 8, sequence 1024.
  shapes.push_back({8192, 3072, 768, true, "GPT-2 MLP up (b8 s1024)"});
  shapes.push_back({8192, 768, 3072, true, "GPT-2 MLP down (b8 s1024)"});
  // The same output with K from 256 up: what a short reduction costs (fit_gemm_curve).
  for (std::int64_t k : quick ? std::vector<std::int64_t>{256, 1024} : std::vector<std::int64_t>{256, 512, 1024, 2048}) {
    shapes.push_back({8192, 4096, k, false, fmt::format("K sweep {}", k)});
  }
  if (!quick) {
    shapes.push_back({8192, 2304, 768, true, "GPT-2 QKV (b8 s1024)"});
    shapes.push_back({8192, 768, 768, true, "GPT-2 attention out (b8 s1024)"});
    // BERT-large (hidden 1024, MLP 4096), batch 16, sequence 512.
    shapes.push_back({8192, 4096, 1024, true, "BERT-large MLP up (b16 s512)"});
    shapes.push_back({8192, 1024, 4096, true, "BERT-large MLP down (b16 s512)"});
  }
  return shapes;
}

// Rough seconds of each step at rates a data-centre GPU reaches; they only weigh the steps
// against each other in the progress estimate (the rate actually seen sets the time left).
constexpr double kCodecRateGuess = 100e9, kCopyRateGuess = 10e9, kGemmRateGuess = 50e12, kRatioSampleGuess = 2e-3;

std::string number(double v) { return fmt::format("{:.6g}", v); }

}  // namespace

std::string_view to_string(CopyKind kind) {
  switch (kind) {
    case CopyKind::h2d_pinned: return "h2d_pinned";
    case CopyKind::d2h_pinned: return "d2h_pinned";
    case CopyKind::h2d_pageable: return "h2d_pageable";
    case CopyKind::d2h_pageable: return "d2h_pageable";
    case CopyKind::d2d: return "d2d";
  }
  return "?";
}

std::string_view to_string(GemmPrecision precision) {
  switch (precision) {
    case GemmPrecision::fp32: return "fp32";
    case GemmPrecision::tf32: return "tf32";
    case GemmPrecision::fp16: return "fp16";
    case GemmPrecision::bf16: return "bf16";
  }
  return "?";
}

double GpuMeasurements::best_gemm_rate(GemmPrecision precision) const {
  double best = 0;
  for (const auto& g : gemm) {
    if (g.precision == precision) best = std::max(best, g.flop_rate());
  }
  return best;
}

double GpuMeasurements::layer_gemm_efficiency() const {
  double sum = 0;
  int precisions = 0;
  for (GemmPrecision p : kGemmPrecisions) {
    const double best = best_gemm_rate(p);
    double log_sum = 0;
    int count = 0;
    for (const auto& g : gemm) {
      if (g.precision != p || !g.shape.layer_shaped || !(best > 0)) continue;
      log_sum += std::log(g.flop_rate() / best);
      ++count;
    }
    if (count == 0) continue;
    sum += std::exp(log_sum / count);
    ++precisions;
  }
  return precisions == 0 ? 0.0 : sum / precisions;
}

namespace {

bool on_tensor_cores(GemmPrecision precision) { return precision != GemmPrecision::fp32; }

double element_bytes(GemmPrecision precision) { return precision == GemmPrecision::fp16 || precision == GemmPrecision::bf16 ? 2.0 : 4.0; }

}  // namespace

std::optional<GemmCurve> fit_gemm_curve(const GpuMeasurements& gpu, double memory_efficiency) {
  const int sms = gpu.info.multiprocessors;
  const double bandwidth = gpu.memory_bandwidth() * memory_efficiency;
  if (sms < 1 || !(bandwidth > 0)) return std::nullopt;
  std::map<GemmPrecision, std::vector<const GemmMeasurement*>> by_precision;
  std::set<std::int64_t> ks;
  for (const GemmMeasurement& g : gpu.gemm) {
    if (!on_tensor_cores(g.precision) || !(g.seconds > 0) || !std::isfinite(g.seconds)) continue;
    by_precision[g.precision].push_back(&g);
    ks.insert(g.shape.k);
  }
  if (ks.size() < 2) return std::nullopt;
  // The model's time of one measured GEMM at `rate` with `k0`.
  const auto modelled = [&](const GemmMeasurement& g, double rate, double k0) {
    const double m = static_cast<double>(g.shape.m), n = static_cast<double>(g.shape.n), k = static_cast<double>(g.shape.k);
    const double compute = 2.0 * m * n * k / (rate * models::gemm_factor(1, g.shape.m, g.shape.n, k, sms, k0));
    const double memory = element_bytes(g.precision) * (m * k + k * n + m * n) / bandwidth;
    return gpu.launch_overhead + std::max(compute, memory);
  };
  // For one k0: each precision's best rate (Brent's minimisation over its log, from a quarter to
  // four times the best measured: Boost.Math's brent_find_minima) and the sum of squared log
  // errors they leave.
  const auto fit_rates = [&](double k0, std::map<GemmPrecision, double>& rates) {
    double sum = 0;
    for (const auto& [precision, measured] : by_precision) {
      double best = 0;
      for (const GemmMeasurement* g : measured) best = std::max(best, g->flop_rate());
      const auto error = [&](double log_rate) {
        double e = 0;
        for (const GemmMeasurement* g : measured) e += std::pow(std::log(modelled(*g, std::exp(log_rate), k0) / g->seconds), 2);
        return e;
      };
      // 40 bits: the log rate to about 1e-12, far finer than any timing.
      const auto [log_rate, least] = boost::math::tools::brent_find_minima(error, std::log(best / 4), std::log(best * 4), 40);
      rates[precision] = std::exp(log_rate);
      sum += least;
    }
    return sum;
  };
  std::size_t count = 0;
  for (const auto& entry : by_precision) count += entry.second.size();
  GemmCurve curve;
  curve.gemms = count;
  const double flat_sum = fit_rates(0.0, curve.rate);
  double best_sum = flat_sum;
  // k0 on a grid of 16 over 0 .. 4096, then to the element around the best; curve keeps the
  // best k0 and its rates.
  const auto try_k0 = [&](double k0) {
    std::map<GemmPrecision, double> rates;
    const double sum = fit_rates(k0, rates);
    if (sum < best_sum) best_sum = sum, curve.k_overhead = k0, curve.rate = std::move(rates);
  };
  for (double k0 = 16; k0 <= 4096; k0 += 16) try_k0(k0);
  const double grid_best = curve.k_overhead;
  for (double k0 = std::max(0.0, grid_best - 15); k0 <= grid_best + 15; k0 += 1) try_k0(k0);
  curve.rms_log_error_flat = std::sqrt(flat_sum / static_cast<double>(count));
  curve.rms_log_error = std::sqrt(best_sum / static_cast<double>(count));
  return curve;
}

double GpuMeasurements::memory_bandwidth() const {
  const auto it = copy_models.find(CopyKind::d2d);
  return it == copy_models.end() ? 0.0 : 2.0 * it->second.bandwidth;
}

GpuCalibrationResult calibrate_gpu(GpuProbe& probe, const CalibrationOptions& options) {
  const GpuInfo info = probe.info();
  const std::vector<kernels::CodecId> available = probe.codecs();
  std::vector<kernels::CodecId> codecs;
  if (options.codecs.empty()) {
    codecs = available;
  } else {
    for (const auto& name : options.codecs) {
      const kernels::CodecId id = kernels::codec_from_name(name);
      if (std::find(available.begin(), available.end(), id) == available.end()) {
        std::string names;
        for (kernels::CodecId a : available) names += (names.empty() ? "" : ", ") + std::string(kernels::codec_info(a).name);
        throw InputError(fmt::format("--codecs: '{}' has no CUDA driver; on a GPU the codecs are {} (the others run on the CPU: --device cpu)",
                                     name, names));
      }
      codecs.push_back(id);
    }
  }
  const MeasurementPlan plan = detail::plan_for(options.quick);
  const int reps = options.quick ? 5 : 10;
  const std::vector<GemmShape> shapes = gemm_shapes(options.quick);

  double codec_units = 0, copy_units = 0, gemm_units = 0;
  for (auto s : plan.sizes) codec_units += 2.0 * (reps + 1) * static_cast<double>(s) / kCodecRateGuess;
  for (auto s : plan.sizes) copy_units += static_cast<double>(std::size(kCopyKinds)) * (reps + 1) * static_cast<double>(s) / kCopyRateGuess;
  for (const auto& g : shapes) gemm_units += 4.0 * (reps + 1) * 2.0 * static_cast<double>(g.m * g.n * g.k) / kGemmRateGuess;
  const double ratio_units = static_cast<double>(std::size(detail::kSampledClasses)) * plan.draws *
                             static_cast<double>(std::size(detail::kErrorBounds)) * kRatioSampleGuess;
  detail::Progress progress(options.progress, static_cast<double>(codecs.size()) * (codec_units + ratio_units) + copy_units + gemm_units, 0);

  GpuCalibrationResult result;
  result.gpu.info = info;
  auto& profile = result.codecs.profile;
  profile.name = options.name;
  profile.device = info.name;
  profile.device_kind = "cuda";
  profile.date = detail::today();
  profile.comptrain_version = options.comptrain_version;
  profile.platforms = models::builtin_platforms_with_gpu(info.name);

  const std::vector<float> data = detail::timing_data(plan.sizes.back() / sizeof(float));
  const std::string how = fmt::format("comptrain calibrate --device cuda{}", options.quick ? " --quick" : "");
  const std::string source = fmt::format("{} on {}: device-resident data, CUDA events, fastest of {} runs after a warm-up", how,
                                         info.name, reps);
  for (kernels::CodecId id : codecs) {
    CodecMeasurements raw;
    raw.codec = std::string(kernels::codec_info(id).name);
    models::CodecProfile cp;
    cp.codec = raw.codec;
    for (std::uint64_t bytes : plan.sizes) {
      progress.stage(fmt::format("{}: timing {} KiB", cp.codec, bytes >> 10));
      const auto times = probe.time_codec(id, std::span<const float>(data.data(), bytes / sizeof(float)), detail::kTimingErrorBound, reps);
      raw.compress.push_back({static_cast<double>(bytes), times.compress});
      raw.decompress.push_back({static_cast<double>(bytes), times.decompress});
      progress.done(2.0 * (reps + 1) * static_cast<double>(bytes) / kCodecRateGuess);
    }
    detail::fit_codec_time_models(raw, source, cp);
    const auto compressed_size = [&](std::span<const float> values, double eb) { return probe.compressed_size(id, values, eb); };
    detail::measure_ratio_models(plan, compressed_size, how, cp, raw, progress, ratio_units);
    profile.codecs.push_back(std::move(cp));
    result.codecs.measurements.push_back(std::move(raw));
  }

  for (CopyKind kind : kCopyKinds) {
    for (std::uint64_t bytes : plan.sizes) {
      progress.stage(fmt::format("copy {}: {} KiB", to_string(kind), bytes >> 10));
      result.gpu.copies[kind].push_back({static_cast<double>(bytes), probe.time_copy(kind, bytes, reps)});
      progress.done((reps + 1) * static_cast<double>(bytes) / kCopyRateGuess);
    }
    models::TimeModel m = fit_time_model(result.gpu.copies[kind]);
    m.provenance = models::Provenance::measured;
    m.source = fmt::format("{}: cudaMemcpyAsync{}, CUDA events, fastest of {} runs", how,
                           kind == CopyKind::d2d ? "" : (kind == CopyKind::h2d_pinned || kind == CopyKind::d2h_pinned ? " from/to cudaMallocHost memory" : " from/to malloc memory"),
                           reps);
    result.gpu.copy_models[kind] = m;
  }

  for (GemmPrecision precision : kGemmPrecisions) {
    for (const GemmShape& shape : shapes) {
      progress.stage(fmt::format("GEMM {} {}x{}x{}", to_string(precision), shape.m, shape.n, shape.k));
      if (const auto seconds = probe.time_gemm(precision, shape, reps)) {
        result.gpu.gemm.push_back({precision, shape, *seconds});
      }
      progress.done((reps + 1) * 2.0 * static_cast<double>(shape.m * shape.n * shape.k) / kGemmRateGuess);
    }
  }
  progress.stage("kernel launch overhead");
  result.gpu.launch_overhead = probe.launch_overhead(1000);
  progress.stage("done");
  return result;
}

std::string gpu_measurements_yaml(const GpuMeasurements& gpu) {
  std::string out = "gpu_measurements:  # raw data of `comptrain calibrate --device cuda` (ignored when read)\n";
  out += fmt::format("  device: {{name: \"{}\", memory_bytes: {}, multiprocessors: {}, compute_capability: \"{}.{}\", runtime: \"{}\"}}\n",
                     gpu.info.name, gpu.info.memory_bytes, gpu.info.multiprocessors, gpu.info.compute_major, gpu.info.compute_minor,
                     gpu.info.runtime);
  out += fmt::format("  launch_overhead_s: {}\n", number(gpu.launch_overhead));
  out += "  copies:\n";
  for (const auto& [kind, samples] : gpu.copies) {
    const models::TimeModel& m = gpu.copy_models.at(kind);
    out += fmt::format("    {}:\n      fit: {{latency_s: {}, bandwidth_bytes_per_s: {}, r2: {}, max_relative_error: {}}}\n", to_string(kind),
                       number(m.latency), number(m.bandwidth), number(m.r2), number(m.max_relative_error));
    out += "      samples:  # [bytes, seconds (fastest run)]\n";
    for (const auto& s : samples) out += fmt::format("        - [{}, {}]\n", number(s.bytes), number(s.seconds));
  }
  out += "  gemm:  # [precision, m, n, k, seconds (fastest run), FLOP/s, what]\n";
  for (const auto& g : gpu.gemm) {
    out += fmt::format("    - [{}, {}, {}, {}, {}, {}, \"{}\"]\n", to_string(g.precision), g.shape.m, g.shape.n, g.shape.k, number(g.seconds),
                       number(g.flop_rate()), g.shape.what);
  }
  return out;
}

namespace {

// The emitted platform's values, by path: (the text written, the comment saying where it came from).
using WrittenValues = std::map<std::vector<std::string>, std::pair<std::string, std::string>>;

// The host section: the base platform's, or this host's with assumptions marked as such.
void set_host(models::Platform& p, WrittenValues& written, const models::Platform* base, const PlatformEmitOptions& options,
              const std::string& from_base) {
  const auto set = [&written](std::vector<std::string> path, std::string text, std::string why) {
    written[std::move(path)] = {std::move(text), std::move(why)};
  };
  if (base) {
    p.host.name = base->host.name;
    p.host.cores = base->host.cores;
    p.host.flops = base->host.flops;
    p.host.memory_bytes = base->host.memory_bytes;
    p.host.memory_bandwidth = base->host.memory_bandwidth;
    set({"host", "name"}, base->host.name, from_base);
    set({"host", "cores"}, std::to_string(base->host.cores), from_base);
    set({"host", "flops"}, fmt::format("{:.6g} TFLOP/s", base->host.flops / 1e12), from_base);
    set({"host", "memory"}, fmt::format("{} B", base->host.memory_bytes), from_base);
    set({"host", "memory_bandwidth"}, fmt::format("{:.6g} GB/s", base->host.memory_bandwidth / 1e9), from_base);
  } else {
    p.host.name = options.host_name;
    p.host.cores = std::max(1, options.host_cores);
    set({"host", "name"}, options.host_name, "this host (/proc/cpuinfo)");
    set({"host", "cores"}, std::to_string(p.host.cores), "this host (hardware threads)");
    // 2.5 GHz x 32 fp32 FLOP/cycle (two 256-bit FMA pipes) per core: a typical server core.
    p.host.flops = p.host.cores * 2.5e9 * 32;
    set({"host", "flops"}, fmt::format("{:.6g} TFLOP/s", p.host.flops / 1e12), "assumption: cores x 2.5 GHz x 32 FLOP/cycle; not measured");
    if (options.host_memory_bytes >= (std::int64_t{1} << 20)) {
      p.host.memory_bytes = options.host_memory_bytes;
      set({"host", "memory"}, fmt::format("{} B", options.host_memory_bytes), "this host (/proc/meminfo MemTotal)");
    } else {
      // Unknown (no /proc/meminfo): a value the platform reader accepts, marked as a guess.
      p.host.memory_bytes = std::int64_t{64} << 30;
      set({"host", "memory"}, "64 GiB", "assumption: this host's memory could not be read (/proc/meminfo)");
    }
    p.host.memory_bandwidth = 100e9;
    set({"host", "memory_bandwidth"}, "100 GB/s", "assumption: not measured (the order of one DDR4/DDR5 socket)");
  }
}

}  // namespace

std::string platform_yaml(const GpuMeasurements& gpu, const PlatformEmitOptions& options) {
  const models::Platform* base = options.base;
  const std::string from_base = base ? fmt::format("not measured: copied from platform {} ({})", base->name, base->source) : "";
  const std::string measured = fmt::format("measured by comptrain calibrate on {}", options.date);
  const double memory_bandwidth = gpu.memory_bandwidth();
  if (!(memory_bandwidth > 0)) throw std::invalid_argument("platform_yaml: no device-to-device copy was measured");

  // The platform as measured, the rest copied from the base or assumed; each value's text (at
  // the digits it was measured to) and its origin, by path, for models::platform_to_yaml.
  models::Platform p;
  WrittenValues written;  // path -> (text, comment)
  const auto set = [&written](std::vector<std::string> path, std::string text, std::string why) {
    written[std::move(path)] = {std::move(text), std::move(why)};
  };
  p.name = options.name;
  set({"name"}, options.name, "the platform file's name (--emit-platform)");

  p.gpu.name = gpu.info.name;
  set({"gpu", "name"}, gpu.info.name, measured + ": cudaDeviceProp::name");
  p.gpu.memory_bytes = p.gpu.memory_visible_bytes = gpu.info.memory_bytes;
  set({"gpu", "memory"}, fmt::format("{} B", gpu.info.memory_bytes), measured + ": cudaDeviceProp::totalGlobalMem");
  set({"gpu", "memory_visible"}, fmt::format("{} B", gpu.info.memory_bytes),
      measured + ": cudaDeviceProp::totalGlobalMem, what the device reports (the driver's share is already out of it)");
  p.gpu.compute_capability_major = gpu.info.compute_major;
  p.gpu.compute_capability_minor = gpu.info.compute_minor;
  set({"gpu", "compute_capability"}, fmt::format("{}.{}", gpu.info.compute_major, gpu.info.compute_minor),
      measured + ": cudaDeviceProp::major.minor (sets PyTorch's default cuBLAS workspace)");
  p.gpu.memory_bandwidth = memory_bandwidth;
  set({"gpu", "memory_bandwidth"}, fmt::format("{:.6g} GB/s", memory_bandwidth / 1e9),
      measured + ": device-to-device cudaMemcpy, 2 x bytes / s (read + write), fitted over the sizes");
  const std::optional<GemmCurve> curve = fit_gemm_curve(gpu, kEmittedMemoryEfficiency);
  for (GemmPrecision precision : kGemmPrecisions) {
    const double best = gpu.best_gemm_rate(precision);
    const bool fitted = curve && curve->rate.count(precision) != 0;
    const double rate = fitted ? curve->rate.at(precision) : best;
    const std::vector<std::string> path{"gpu", "peak", std::string(to_string(precision))};
    if (rate > 0) {
      std::size_t shapes = 0;
      for (const auto& g : gpu.gemm) shapes += g.precision == precision ? 1 : 0;
      set(path, fmt::format("{:.6g} TFLOP/s", rate / 1e12),
          fitted ? fmt::format("{}: the rate cuBLAS's GEMMs approach at endless K in whole waves, fitted over {} shapes with "
                               "efficiency.gemm_k_overhead (best measured {:.6g} TFLOP/s)",
                               measured, shapes, best / 1e12)
                 : fmt::format("{}: best cuBLAS GEMM rate over {} shapes", measured, shapes));
    } else if (precision == GemmPrecision::fp32 || precision == GemmPrecision::fp16) {
      throw std::invalid_argument(fmt::format("platform_yaml: no {} GEMM was measured", to_string(precision)));
    } else {
      set(path, "0 TFLOP/s",
          fmt::format("{}: cuBLAS has no {} GEMM on compute capability {}.{}", measured, to_string(precision), gpu.info.compute_major,
                      gpu.info.compute_minor));
    }
    (precision == GemmPrecision::fp32   ? p.gpu.peak_fp32
     : precision == GemmPrecision::tf32 ? p.gpu.peak_tf32
     : precision == GemmPrecision::fp16 ? p.gpu.peak_fp16
                                        : p.gpu.peak_bf16) = rate;
  }
  if (gpu.info.multiprocessors > 0) {
    p.gpu.sms = gpu.info.multiprocessors;
    set({"gpu", "sms"}, std::to_string(gpu.info.multiprocessors), measured + ": cudaDeviceProp::multiProcessorCount");
  }
  p.gpu.launch_overhead = gpu.launch_overhead;
  set({"gpu", "launch_overhead"}, fmt::format("{:.4g} us", gpu.launch_overhead * 1e6), measured + ": empty kernels launched back to back, per launch");
  if (base && base->gpu.max_power > 0) {
    p.gpu.idle_power = p.gpu.in_job_power = base->gpu.idle_power;
    p.gpu.max_power = base->gpu.max_power;
    set({"gpu", "power", "idle"}, fmt::format("{} W", number(base->gpu.idle_power)), from_base);
    set({"gpu", "power", "max"}, fmt::format("{} W", number(base->gpu.max_power)), from_base);
  }

  set_host(p, written, base, options, from_base);

  const auto& h2d = gpu.copy_models.at(CopyKind::h2d_pinned);
  const auto& d2h = gpu.copy_models.at(CopyKind::d2h_pinned);
  set({"host_link"}, "", "per direction");
  p.host_link.name = "PCIe (measured)";
  set({"host_link", "name"}, p.host_link.name, measured + ": pinned host <-> device copies");
  p.host_link.bandwidth = std::min(h2d.bandwidth, d2h.bandwidth);
  set({"host_link", "bandwidth"}, fmt::format("{:.6g} GB/s", p.host_link.bandwidth / 1e9),
      fmt::format("{}: the slower direction of pinned copies (H2D {:.4g}, D2H {:.4g} GB/s)", measured, h2d.bandwidth / 1e9, d2h.bandwidth / 1e9));
  p.host_link.latency = 0.5 * (h2d.latency + d2h.latency);
  set({"host_link", "latency"}, fmt::format("{:.4g} us", p.host_link.latency * 1e6), measured + ": mean fitted latency of pinned copies, driver cost included");
  // Pageable copies (offload host_memory: pageable) cross the driver's staging buffers; the
  // slower direction, capped at the pinned rate that the platform reader requires it not exceed.
  const auto pageable = gpu.copy_models.find(CopyKind::h2d_pageable);
  const auto pageable_back = gpu.copy_models.find(CopyKind::d2h_pageable);
  if (pageable != gpu.copy_models.end() && pageable_back != gpu.copy_models.end()) {
    p.host_link.pageable_bandwidth = std::min({pageable->second.bandwidth, pageable_back->second.bandwidth, p.host_link.bandwidth});
    set({"host_link", "pageable_bandwidth"}, fmt::format("{:.6g} GB/s", p.host_link.pageable_bandwidth / 1e9),
        fmt::format("{}: the slower direction of pageable copies (H2D {:.4g}, D2H {:.4g} GB/s), at most the pinned rate", measured,
                    pageable->second.bandwidth / 1e9, pageable_back->second.bandwidth / 1e9));
  }
  if (base && base->gpu_link.bandwidth > 0) {
    p.gpu_link.name = base->gpu_link.name;
    p.gpu_link.bandwidth = base->gpu_link.bandwidth;
    p.gpu_link.latency = base->gpu_link.latency;
    set({"gpu_link", "name"}, base->gpu_link.name, from_base);
    set({"gpu_link", "bandwidth"}, fmt::format("{:.6g} GB/s", base->gpu_link.bandwidth / 1e9), from_base);
    set({"gpu_link", "latency"}, fmt::format("{:.4g} us", base->gpu_link.latency * 1e6), from_base);
  }
  if (base) {
    p.gpus_per_node = base->gpus_per_node;
    set({"gpus_per_node"}, std::to_string(base->gpus_per_node), from_base);
  } else {
    p.gpus_per_node = std::max(1, gpu.info.device_count);
    set({"gpus_per_node"}, std::to_string(p.gpus_per_node), "GPUs visible to the calibration (cudaGetDeviceCount)");
  }

  const double layer = gpu.layer_gemm_efficiency();
  const std::string base_or_assumed = base ? from_base + " (a fraction of its datasheet peaks)" : "assumption: the built-in platforms' value";
  p.efficiency.compute_default = base ? base->efficiency.compute_default : 0.6;
  set({"efficiency", "compute", "default"}, number(p.efficiency.compute_default), base_or_assumed);
  const std::map<traces::OpKind, double> defaults = {{traces::OpKind::conv, 0.7}, {traces::OpKind::attention, 0.5}};
  for (const auto& [kind, fraction] : base ? base->efficiency.compute : defaults) {
    p.efficiency.compute[kind] = fraction;
    set({"efficiency", "compute", std::string(traces::to_string(kind))}, number(fraction), base_or_assumed);
  }
  if (curve) {
    // The tensor-core peaks above are the curve's own rates, so the GEMMs' efficiency is 1: the
    // waves and the short reductions (gemm_k_overhead) say how far below them a GEMM runs.
    for (traces::OpKind kind : {traces::OpKind::linear, traces::OpKind::matmul}) {
      p.efficiency.compute[kind] = 1.0;
      set({"efficiency", "compute", std::string(traces::to_string(kind))}, "1",
          measured + ": the GEMM curve's rates are the peaks above; its waves and gemm_k_overhead give each shape's share");
    }
    p.efficiency.gemm_k_overhead = curve->k_overhead;
    set({"efficiency", "gemm_k_overhead"}, fmt::format("{:g}", curve->k_overhead),
        fmt::format("{}: fitted with the peaks above on {} tensor-core GEMMs, rms log error {:.4f} ({:.4f} without it; "
                    "models/README.md, \"Short reductions\")",
                    measured, curve->gemms, curve->rms_log_error, curve->rms_log_error_flat));
  } else if (layer > 0) {
    for (traces::OpKind kind : {traces::OpKind::linear, traces::OpKind::matmul}) {
      const std::string text = fmt::format("{:.3f}", std::min(1.0, layer));
      p.efficiency.compute[kind] = std::stod(text);
      set({"efficiency", "compute", std::string(traces::to_string(kind))}, text,
          measured + ": transformer-layer GEMMs' rate / best rate (geometric mean)");
    }
  }
  p.efficiency.memory_default = kEmittedMemoryEfficiency;
  set({"efficiency", "memory", "default"}, number(kEmittedMemoryEfficiency),
      "assumption: elementwise kernels stream at ~90 % of a device-to-device copy (memory_bandwidth above)");

  models::PlatformYamlComments comments;
  comments.header = fmt::format("{} as `comptrain calibrate --device cuda --emit-platform` measured it on {}.\n"
                                "Each value says where it comes from: measured here, copied from a base platform, or an assumption.\n"
                                "Peaks are the best cuBLAS rates measured, not datasheet figures, so the efficiencies below are\n"
                                "fractions of what this GPU reached, not of its datasheet.",
                                gpu.info.name, options.date);
  comments.comment_for = [&written](const std::vector<std::string>& path) -> std::optional<std::string> {
    const auto it = written.find(path);
    return it == written.end() ? std::nullopt : std::optional<std::string>(it->second.second);
  };
  comments.text_for = [&written](const std::vector<std::string>& path) -> std::optional<std::string> {
    const auto it = written.find(path);
    return it == written.end() || it->second.first.empty() ? std::nullopt : std::optional<std::string>(it->second.first);
  };
  return models::platform_to_yaml(p, comments);
}

std::int64_t host_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemTotal:") return kib * 1024;
  }
  return 0;
}

}  // namespace comptrain::calibrate

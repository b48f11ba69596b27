#include "calibrate_command.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comptrain/calibrate/calibrate.hpp"
#include "comptrain/calibrate/gpu_calibration.hpp"
#include "comptrain/kernels/codec.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/models/profile_yaml.hpp"
#include "comptrain/models/shipped_or_file.hpp"
#include "comptrain/support/atomic_file.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/support/progress_bar.hpp"
#include "comptrain_version.hpp"
#include "fit_measurements.hpp"
#include "options.hpp"

namespace comptrain::cli {
namespace {

struct CalibrateArgs {
  std::string device;
  bool quick = false;
  std::vector<std::string> codecs;
  unsigned threads = 0;
  std::string name;
  std::string out;
  std::string emit_platform;
  std::string base_platform;
  CLI::Option* base_platform_option = nullptr;  // given at all: `--base-platform ""` is an error, not "no base"
  FitMeasurementsArgs fit;                      // --from-measurements: fit a platform instead (fit_measurements.hpp)
};

// Fail on an unwritable output before minutes of measurements, not after.
void check_writable(const std::string& option, const std::string& file) {
  if (is_standard_output(file)) return;
  const auto dir = std::filesystem::absolute(file).parent_path();
  if (!std::filesystem::is_directory(dir)) throw InputError(option + " " + file + ": directory " + dir.string() + " does not exist");
  if (::access(dir.c_str(), W_OK) != 0) throw InputError(option + " " + file + ": directory " + dir.string() + " is not writable");
}

// A default name taken from an output file: its stem, or `fallback` for standard output.
std::string output_stem(const std::string& file, const std::string& fallback) {
  return is_standard_output(file) ? fallback : std::filesystem::path(file).stem().string();
}

// What the "wrote ..." lines call an output.
std::string output_name(const std::string& file) { return is_standard_output(file) ? "standard output" : file; }

void print_gpu_summary(std::FILE* to, const calibrate::GpuMeasurements& gpu) {
  for (const auto& [kind, m] : gpu.copy_models) {
    fmt::print(to, "  copy {:<12} {:9.3g} s + B / {:8.2f} GB/s  (R² {:.4f})\n", calibrate::to_string(kind), m.latency, m.bandwidth / 1e9, m.r2);
  }
  for (calibrate::GemmPrecision p : calibrate::kGemmPrecisions) {
    const double rate = gpu.best_gemm_rate(p);
    if (rate > 0) fmt::print(to, "  GEMM {:<4} best {:8.1f} TFLOP/s\n", calibrate::to_string(p), rate / 1e12);
  }
  fmt::print(to, "  transformer-layer GEMMs at {:.0f} % of the best rate; kernel launch {:.2f} us\n", 100 * gpu.layer_gemm_efficiency(),
             gpu.launch_overhead * 1e6);
  if (const std::optional<calibrate::GemmCurve> curve = calibrate::fit_gemm_curve(gpu, calibrate::kEmittedMemoryEfficiency)) {
    fmt::print(to, "  GEMM curve: gemm_k_overhead {:g} (K / (K + {:g}) of an endless reduction), rms log error {:.4f} over {} tensor-core GEMMs ({:.4f} without it)\n",
               curve->k_overhead, curve->k_overhead, curve->rms_log_error, curve->gemms, curve->rms_log_error_flat);
  }
}

// The summary is the command's result: standard output, so that it can be kept apart from the
// progress lines (stderr), unless a YAML document went there (-o - or --emit-platform -), which
// it would corrupt: then stderr. The warnings are diagnostics: stderr, after it.
void print_summary(std::FILE* to, const models::CalibrationProfile& p) {
  fmt::print(to, "{}", calibrate::profile_summary(p));
  for (const std::string& line : calibrate::fit_warnings(p)) fmt::print(stderr, "{}\n", line);
}

}  // namespace

std::function<int()> add_calibrate_command(CLI::App& app) {
  auto args = std::make_shared<CalibrateArgs>();
  auto* command = app.add_subcommand(
      "calibrate",
      "Measure the compressor kernels and fit the compression cost model\n"
      "The kernels are measured on this machine; the fitted model is written as a profile.");
  add_choice(*command, "--device", args->device,
             "cuda (default when a GPU is visible and comptrain was built with CUDA: CUDA driver, events, copies, cuBLAS) or cpu (the CPU driver)",
             {"cpu", "cuda"});
  command->add_flag("--quick", args->quick, "64 KiB .. 16 MiB, fewer repetitions and samples (under a minute)");
  command->add_option("--codecs", args->codecs, "Codecs to measure, comma-separated (default: all)")->delimiter(',');
  add_int(*command, "--threads", args->threads,
          fmt::format("CPU threads of the CPU driver, 0 to {0} (0: all cores, up to {0})", kernels::kMaxThreads), 0u,
          kernels::kMaxThreads)
      ->default_val(0);
  command->add_option("--name", args->name, "Profile name (default: the output file's stem, or 'profile' for standard output)");
  command->add_option("-o,--output", args->out, "Profile to write (YAML, written once at the end); - for standard output")->required();
  command->add_option("--emit-platform", args->emit_platform,
                      "With --device cuda: also write a platform file (scenarios/platforms format) from the measured GPU, copies and "
                      "GEMMs; - for standard output");
  args->base_platform_option = command->add_option("--base-platform", args->base_platform,
                      "Platform (built-in name or .yaml) whose host, NVLink, power and non-GEMM efficiencies --emit-platform copies "
                      "(default: the built-in platform with this GPU's name, if any)");
  add_fit_measurements_options(*command, args->fit);
  return [command, args]() -> int {
    if (!command->parsed()) return -1;
    const CalibrateArgs& a = *args;
    if (fit_measurements_requested(a.fit)) return run_fit_measurements(a.fit, *command, a.name, a.out);
    if (fit_collectives_requested(a.fit)) return run_fit_collectives(a.fit, *command, a.name, a.out);
    check_fit_options_unused(a.fit);
    const bool gpu = calibrate::gpu_visible();
    const std::string device = !a.device.empty() ? a.device : (gpu && calibrate::built_with_cuda() ? "cuda" : "cpu");
    if (a.device.empty() && gpu && !calibrate::built_with_cuda()) {
      fmt::print(stderr, "comptrain calibrate: a GPU is visible but this comptrain was built without CUDA; calibrating the CPU driver\n");
    }
    if (!a.emit_platform.empty() && device != "cuda") throw InputError("--emit-platform needs --device cuda (a platform describes a GPU)");
    const bool base_given = a.base_platform_option->count() > 0;
    if (base_given && a.emit_platform.empty()) throw InputError("--base-platform is only used with --emit-platform");
    calibrate::CalibrationOptions options;
    options.quick = a.quick;
    options.codecs = a.codecs;
    options.threads = a.threads;
    options.name = a.name.empty() ? output_stem(a.out, "profile") : a.name;
    options.comptrain_version = COMPTRAIN_VERSION;
    // A bar redrawn in place on a terminal; one line per stage in a log.
    // An error in the middle ends the bar's line first, so that the message starts on its own.
    struct Bar {
      bool terminal = stderr_is_terminal();
      bool open = false;
      ~Bar() {
        if (open) end_terminal_line(false);
      }
    } bar;
    options.progress = [&bar](const calibrate::ProgressUpdate& u) {
      if (!bar.terminal) {
        fmt::print(stderr, "{}\n", calibrate::progress_line(u));
        return;
      }
      redraw_terminal_line(fmt::format("calibrate {} {:3.0f}%  {}  {:.0f} s{}", progress_bar(u.fraction), 100 * u.fraction, u.stage,
                                       u.elapsed, u.left ? fmt::format(", ~{:.0f} s left", *u.left) : std::string()));
      bar.open = !u.done;
      if (u.done) end_terminal_line(false);
    };
    if (is_standard_output(a.out) && is_standard_output(a.emit_platform)) {
      throw InputError("-o - and --emit-platform -: both documents to standard output; expected at most one of them there");
    }
    std::FILE* const summary_to = is_standard_output(a.out) || is_standard_output(a.emit_platform) ? stderr : stdout;
    check_writable("-o", a.out);
    if (!a.emit_platform.empty()) check_writable("--emit-platform", a.emit_platform);
    std::optional<models::Platform> base;
    if (base_given) base = models::resolve_platform(a.base_platform, std::filesystem::current_path());

    if (device == "cuda") {
      if (a.threads != 0) throw InputError("--threads sets the CPU driver's threads; it has no meaning with --device cuda");
      if (calibrate::built_with_cuda() && !gpu) {
        throw InputError("--device cuda: no GPU is visible (no /dev/nvidia* device); use --device cpu");
      }
      const auto probe = calibrate::open_cuda_probe();
      const auto result = calibrate::calibrate_gpu(*probe, options);
      write_output(a.out, models::profile_to_yaml(result.codecs.profile, result.codecs.measurements) +
                              calibrate::gpu_measurements_yaml(result.gpu));
      fmt::print(stderr, "comptrain calibrate: wrote {} ({})\n", output_name(a.out), result.codecs.profile.device);
      if (!a.emit_platform.empty()) {
        if (!base) {
          const auto same_gpu = models::builtin_platforms_with_gpu(result.gpu.info.name);
          if (!same_gpu.empty()) base = models::builtin_platform(same_gpu.front());
        }
        calibrate::PlatformEmitOptions emit;
        emit.name = output_stem(a.emit_platform, "calibrated");
        emit.date = result.codecs.profile.date;
        emit.base = base ? &*base : nullptr;
        emit.host_name = calibrate::cpu_description(std::max(1u, std::thread::hardware_concurrency()));
        emit.host_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
        emit.host_memory_bytes = calibrate::host_memory_bytes();
        const std::string yaml = calibrate::platform_yaml(result.gpu, emit);
        models::parse_platform(yaml, a.emit_platform);  // what we write must read back
        write_output(a.emit_platform, yaml);
        fmt::print(stderr, "comptrain calibrate: wrote {} (platform {}{})\n", output_name(a.emit_platform), emit.name,
                   base ? ", unmeasured values from " + base->name : "");
      }
      print_summary(summary_to, result.codecs.profile);
      print_gpu_summary(summary_to, result.gpu);
      return 0;
    }

    const auto result = calibrate::calibrate_cpu(options);
    write_output(a.out, models::profile_to_yaml(result.profile, result.measurements));
    fmt::print(stderr, "comptrain calibrate: wrote {} ({})\n", output_name(a.out), result.profile.device);
    print_summary(summary_to, result.profile);
    return 0;
  };
}

}  // namespace comptrain::cli

#include "calibrate_command.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "comptrain/calibrate/calibrate.hpp"
#include "comptrain/calibrate/profile.hpp"
#include "comptrain/support/atomic_file.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain_version.hpp"

namespace comptrain::cli {
namespace {

constexpr int kExitInternal = 1;

struct CalibrateArgs {
  std::string device;
  bool quick = false;
  std::vector<std::string> codecs;
  unsigned threads = 0;
  std::string name;
  std::string out;
};

void print_summary(const models::CalibrationProfile& p) {
  for (const auto& c : p.codecs) {
    fmt::print(stderr, "  {:<6} compress   {:9.3g} s + B / {:7.3f} GB/s  (R² {:.4f}, max rel. error {:.1f} %)\n", c.codec,
               c.compress.latency, c.compress.bandwidth / 1e9, c.compress.r2, 100 * c.compress.max_relative_error);
    fmt::print(stderr, "  {:<6} decompress {:9.3g} s + B / {:7.3f} GB/s  (R² {:.4f}, max rel. error {:.1f} %)\n", "",
               c.decompress.latency, c.decompress.bandwidth / 1e9, c.decompress.r2, 100 * c.decompress.max_relative_error);
    for (const auto& [cls, m] : c.ratio) {
      fmt::print(stderr, "  {:<6} ratio {:<10} at eb 1e-3: {:6.2f}  (held-back rms log error {:.3f}, max rel. error {:.1f} %)\n", "",
                 models::to_string(cls), m.ratio(1e-3), m.heldout_rms_log_error, 100 * m.heldout_max_relative_error);
    }
  }
}

}  // namespace

std::function<int()> add_calibrate_command(CLI::App& app) {
  auto args = std::make_shared<CalibrateArgs>();
  auto* command = app.add_subcommand(
      "calibrate", "Measure the compressor kernels on this machine and fit the compression cost model into a profile");
  command->add_option("--device", args->device, "cpu (the CPU driver; default without a GPU) or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  command->add_flag("--quick", args->quick, "64 KiB .. 16 MiB, fewer repetitions and samples (under a minute)");
  command->add_option("--codecs", args->codecs, "Codecs to measure, comma-separated (default: all)")->delimiter(',');
  command->add_option("--threads", args->threads, "CPU threads of the CPU driver (0: all cores)")->default_val(0);
  command->add_option("--name", args->name, "Profile name (default: the output file's stem)");
  command->add_option("-o,--output", args->out, "Profile to write (YAML, written once at the end)")->required();
  return [command, args]() -> int {
    if (!command->parsed()) return -1;
    const CalibrateArgs& a = *args;
    const bool gpu = calibrate::gpu_visible();
    const std::string device = a.device.empty() ? "cpu" : a.device;
    if (device == "cuda") {
      if (!gpu) throw InputError("--device cuda: no GPU is visible (no /dev/nvidia* device); use --device cpu");
      fmt::print(stderr, "comptrain calibrate: --device cuda is not implemented yet (calibrate/README.md says what it will measure)\n");
      return kExitInternal;
    }
    if (a.device.empty() && gpu) {
      fmt::print(stderr, "comptrain calibrate: a GPU is visible, but only the CPU driver is calibrated so far (--device cpu)\n");
    }
    calibrate::CalibrationOptions options;
    options.quick = a.quick;
    options.codecs = a.codecs;
    options.threads = a.threads;
    options.name = a.name.empty() ? std::filesystem::path(a.out).stem().string() : a.name;
    options.comptrain_version = COMPTRAIN_VERSION;
    options.progress = [](std::string_view line) { fmt::print(stderr, "{}\n", line); };
    // Fail on an unwritable output before minutes of measurements, not after.
    const auto dir = std::filesystem::absolute(a.out).parent_path();
    if (!std::filesystem::is_directory(dir)) throw InputError("-o " + a.out + ": directory " + dir.string() + " does not exist");
    if (::access(dir.c_str(), W_OK) != 0) throw InputError("-o " + a.out + ": directory " + dir.string() + " is not writable");

    const auto result = calibrate::calibrate_cpu(options);
    write_file_atomically(a.out, calibrate::profile_to_yaml(result.profile, result.measurements));
    fmt::print(stderr, "comptrain calibrate: wrote {} ({})\n", a.out, result.profile.device);
    print_summary(result.profile);
    return 0;
  };
}

}  // namespace comptrain::cli

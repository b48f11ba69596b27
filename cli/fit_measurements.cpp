#include "fit_measurements.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <system_error>

#include "comptrain/sim/studies/network_fit.hpp"
#include "comptrain/sim/studies/platform_fit.hpp"
#include "comptrain/support/atomic_file.hpp"
#include "comptrain/support/input_error.hpp"
#include "options.hpp"

namespace comptrain::cli {

void add_fit_measurements_options(CLI::App& command, FitMeasurementsArgs& args) {
  args.file_option = command.add_option(
      "--from-measurements", args.file,
      "Fit a platform to measured training throughputs instead of measuring kernels, and write it to -o. FILE (YAML): "
      "`platform:` a shipped name or a .yaml file, `measurements:` a list of {scenario: FILE, samples_per_second: X} (paths relative "
      "to FILE; each scenario runs at its own batch size on that platform). Fits the efficiencies of --fit-parameters to minimize "
      "the sum of log(predicted/measured)^2, writes the platform with every fitted value marked `fitted` and its error, and prints "
      "per measurement the measured, predicted before and after. --name names the platform (default: the output file's stem)");
  args.collectives_option =
      command
          .add_option("--from-collectives", args.collectives_file,
                      "Fit a cluster platform's network to measured nccl-tests bus bandwidths instead of measuring kernels, and write "
                      "it to -o. FILE (YAML): `platform:` a shipped name or a .yaml file, `measurements:` a list of {collective: "
                      "all_reduce | reduce_scatter | all_gather | all_to_all, nodes: N, gpus_per_node: G, bytes: B (as nccl-tests counts the size), "
                      "bus_bandwidth: busbw in GB/s}. Fits the NICs' rate (nic.bandwidth, the network links scaled with it) and NCCL's "
                      "step across the network (collectives.inter_node_step), each collective simulated as a ring, to minimize the sum "
                      "of log(predicted/measured)^2; writes the platform with both marked `fitted` and prints each measurement before "
                      "and after")
          ->excludes(args.file_option);
  args.holdout_option = add_nonnegative_int(command, "--holdout", args.holdout,
                                            "With --from-measurements or --from-collectives: leave the last K measurements out of the "
                                            "fit and report their error apart (default 0)");
  args.parameters_option =
      command
          .add_option("--fit-parameters", args.parameters,
                       "With --from-measurements: what to fit, comma-separated: gemm (compute efficiency of conv, linear, matmul and "
                       "attention, scaled together), or in its place conv (convolutions alone) and matmul (linear, matmul and attention "
                       "together), memory_default, compute_default, tensor_core (the extra share of ops on tensor cores), "
                       "tensor_core_cuda11 (the same for scenarios with framework.cuda below 12 on Hopper), conv_wave_loss (the share of the "
                       "modelled wave-quantization loss convolutions see), gemm_k_overhead (the short-reduction curve's k0, elements of K; "
                       "calibrate --device cuda fits it from measured GEMMs) (default: gemm,memory_default)")
          ->delimiter(',');
}

bool fit_measurements_requested(const FitMeasurementsArgs& args) { return args.file_option->count() > 0; }

bool fit_collectives_requested(const FitMeasurementsArgs& args) { return args.collectives_option->count() > 0; }

void check_fit_options_unused(const FitMeasurementsArgs& args) {
  if (args.holdout_option->count() > 0) throw InputError("--holdout is only used with --from-measurements or --from-collectives");
  if (args.parameters_option->count() > 0) throw InputError("--fit-parameters is only used with --from-measurements");
}

namespace {

// -o names the fitted platform and receives it: checked before any simulation (a directory gives
// neither; an unwritable place would cost the whole fit). The platform's name: --name, else the
// output file's stem ("fitted" on standard output).
std::string fitted_platform_name(const std::string& name, const std::string& output) {
  if (!is_standard_output(output)) {
    if (!std::filesystem::path(output).has_filename()) throw InputError("-o " + output + ": expected a file name (the platform is named after it)");
    std::error_code error;
    if (std::filesystem::is_directory(output, error)) throw InputError("-o " + output + ": it is a directory; expected a file name (the platform is named after it)");
    const auto dir = std::filesystem::absolute(output).parent_path();
    if (!std::filesystem::is_directory(dir) || ::access(dir.c_str(), W_OK) != 0) {
      throw InputError("-o " + output + ": directory " + dir.string() + " does not exist or is not writable");
    }
  }
  return !name.empty() ? name : is_standard_output(output) ? "fitted" : std::filesystem::path(output).stem().string();
}

// The kernel-measurement options mean nothing to a fit; silently ignoring one would let a user
// believe it changed something.
void check_no_kernel_options(const CLI::App& command, const char* fit) {
  for (const char* other : {"--device", "--quick", "--codecs", "--threads", "--emit-platform", "--base-platform"}) {
    if (command.get_option(other)->count() > 0) {
      throw InputError(std::string(other) + " measures kernels; it has no meaning with " + fit + " (which fits a platform)");
    }
  }
}

// Writes the fitted platform to -o and prints the fit's table: the table is the result, on
// standard output unless the platform went there.
void write_fitted(const std::string& output, const std::string& platform_yaml, const std::string& table, const std::string& platform_name) {
  write_output(output, platform_yaml);
  std::FILE* const table_to = is_standard_output(output) ? stderr : stdout;
  fmt::print(table_to, "{}", table);
  fmt::print(stderr, "comptrain calibrate: wrote {} (platform {})\n", is_standard_output(output) ? "standard output" : output, platform_name);
}

}  // namespace

int run_fit_collectives(const FitMeasurementsArgs& args, const CLI::App& command, const std::string& name, const std::string& output) {
  check_no_kernel_options(command, "--from-collectives");
  if (args.parameters_option->count() > 0) throw InputError("--fit-parameters is only used with --from-measurements; --from-collectives fits the network");
  if (args.collectives_file.empty()) throw InputError("--from-collectives is empty; expected a measurements file (YAML)");
  sim::NetworkFitOptions options;
  options.holdout = args.holdout;
  options.output_name = fitted_platform_name(name, output);
  const sim::CollectiveMeasurementSet set = sim::load_collective_measurements(args.collectives_file);
  fmt::print(stderr, "comptrain calibrate: fitting the network of {} to {} nccl-tests measurement{} of {}\n", set.platform.name,
             set.measurements.size(), set.measurements.size() == 1 ? "" : "s", args.collectives_file);
  const sim::NetworkFitResult result = sim::fit_network(set, options);
  write_fitted(output, result.platform_yaml, sim::network_fit_table(result), options.output_name);
  return 0;
}

int run_fit_measurements(const FitMeasurementsArgs& args, const CLI::App& command, const std::string& name, const std::string& output) {
  check_no_kernel_options(command, "--from-measurements");
  if (args.file.empty()) throw InputError("--from-measurements is empty; expected a measurements file (YAML)");
  sim::FitOptions options;
  if (args.parameters_option->count() > 0) {
    options.parameters.clear();
    for (const std::string& text : args.parameters) {
      const auto parameter = sim::parse_fit_parameter(text);
      if (!parameter) throw InputError("--fit-parameters: found '" + text + "'; expected " + sim::fit_parameter_choices());
      options.parameters.push_back(*parameter);
    }
  }
  options.holdout = args.holdout;
  // The platform is named after the output file, and written to it: a directory ("outdir/", "/",
  // an existing "outdir") gives neither, and found after the fit it cost the whole fit and read
  // as an internal document's "'name' must be a non-empty string".
  options.output_name = fitted_platform_name(name, output);

  const sim::MeasurementSet set = sim::load_measurements(args.file);
  fmt::print(stderr, "comptrain calibrate: fitting {} to {} measurement{} of {}\n", set.platform.name, set.measurements.size(),
             set.measurements.size() == 1 ? "" : "s", args.file);
  const sim::FitResult result = sim::fit_measurements(set, options);
  write_fitted(output, result.platform_yaml, sim::fit_table(result), options.output_name);
  return 0;
}

}  // namespace comptrain::cli

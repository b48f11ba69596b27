#pragma once
// `comptrain calibrate --from-measurements FILE -o PLATFORM.yaml`: fits a platform's op-time
// efficiencies to the user's own measured training throughputs (sim/fit.hpp). The calibrate
// command adds these options and hands over to run_fit_measurements when FILE is given.

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace comptrain::cli {

struct FitMeasurementsArgs {
  std::string file;
  std::string collectives_file;  // --from-collectives: fit the network to nccl-tests figures (sim/studies/network_fit.hpp)
  int holdout = 0;
  std::vector<std::string> parameters;
  CLI::Option* file_option = nullptr;
  CLI::Option* collectives_option = nullptr;
  CLI::Option* holdout_option = nullptr;
  CLI::Option* parameters_option = nullptr;
};

void add_fit_measurements_options(CLI::App& command, FitMeasurementsArgs& args);

// Whether --from-measurements was given (then the calibrate command runs only the fit).
bool fit_measurements_requested(const FitMeasurementsArgs& args);
// Whether --from-collectives was given (then the calibrate command runs only the network fit).
bool fit_collectives_requested(const FitMeasurementsArgs& args);

// The fit. `command` is the calibrate subcommand: its measurement options must be absent
// (InputError naming them), --name names the platform, `output` is -o. Returns the exit code.
int run_fit_measurements(const FitMeasurementsArgs& args, const CLI::App& command, const std::string& name, const std::string& output);
// The network fit, likewise (--fit-parameters has no meaning there).
int run_fit_collectives(const FitMeasurementsArgs& args, const CLI::App& command, const std::string& name, const std::string& output);

// InputError when --holdout or --fit-parameters is given without --from-measurements (--holdout
// is also --from-collectives').
void check_fit_options_unused(const FitMeasurementsArgs& args);

}  // namespace comptrain::cli

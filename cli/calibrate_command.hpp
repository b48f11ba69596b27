#pragma once
// `comptrain calibrate`: measures the compressor kernels on this machine and writes a
// calibration profile (calibrate/README.md).

#include <CLI/CLI.hpp>
#include <functional>

namespace comptrain::cli {

// Adds the subcommand to `app` and returns its action: the exit code when it was chosen, -1
// otherwise.
std::function<int()> add_calibrate_command(CLI::App& app);

}  // namespace comptrain::cli

#pragma once
// `comptrain simulate`: replay a scenario on its modeled platform and report.

#include <CLI/CLI.hpp>
#include <functional>

namespace comptrain::cli {

std::function<int()> add_simulate_command(CLI::App& app);

}  // namespace comptrain::cli

#pragma once
// `comptrain trace ...`: list the zoo, show a trace's accounting, export a trace file.

#include <CLI/CLI.hpp>
#include <functional>

namespace comptrain::cli {

// Adds the `trace` subcommand to `app`; returns the action to run when it was chosen.
std::function<int()> add_trace_command(CLI::App& app);

}  // namespace comptrain::cli

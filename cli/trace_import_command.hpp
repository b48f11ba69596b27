#pragma once
// `comptrain trace import FILE -o trace.json [--format ...]`: other tools' recordings as traces.

#include <CLI/CLI.hpp>
#include <functional>

namespace comptrain::cli {

// Adds `import` under the `trace` subcommand; returns the action to run when it was chosen.
std::function<int()> add_trace_import_command(CLI::App& trace);

}  // namespace comptrain::cli

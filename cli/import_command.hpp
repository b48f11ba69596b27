#pragma once
// `comptrain import FILE --from megatron|torchtitan --platform P -o scenario.yaml`: another tool's
// training job (a Megatron-LM argument list, a torchtitan TOML job file) as a scenario.

#include <CLI/CLI.hpp>
#include <functional>

namespace comptrain::cli {

// Adds the `import` command; returns the action to run when it was chosen.
std::function<int()> add_import_command(CLI::App& app);

}  // namespace comptrain::cli

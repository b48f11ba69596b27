#pragma once
// `comptrain validate`: comptrain's predictions beside published measurements, with the error
// of each and a summary per metric (sim/validate.hpp).

#include <CLI/CLI.hpp>
#include <functional>

namespace comptrain::cli {

std::function<int()> add_validate_command(CLI::App& app);

}  // namespace comptrain::cli

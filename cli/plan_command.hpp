#pragma once
// `comptrain plan`: the largest and the fastest batch per strategy (sim/plan.hpp), for a
// scenario or every variant of its sweep; `comptrain merge`: joins the JSON of sweep shards.

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "comptrain/sim/config/scenario.hpp"

namespace comptrain::cli {

std::function<int()> add_plan_command(CLI::App& app);
std::function<int()> add_merge_command(CLI::App& app);

// A result document to -o FILE (atomically) or to stdout (no -o, or -o -); shared with the sweep
// path of `comptrain simulate`.
void emit(const std::string& output, const std::string& text);

}  // namespace comptrain::cli

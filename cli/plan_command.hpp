#pragma once
// `comptrain plan`: the largest and the fastest batch per strategy (sim/plan.hpp), for a
// scenario or every variant of its sweep; `comptrain merge`: joins the JSON of sweep shards.
// Also the sweep path of `comptrain simulate`.

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "comptrain/sim/config/scenario.hpp"

namespace comptrain::cli {

std::function<int()> add_plan_command(CLI::App& app);
std::function<int()> add_merge_command(CLI::App& app);

// How `comptrain simulate` runs a scenario with a sweep.
struct SweepRunOptions {
  int jobs = 0;             // 0: the core count
  std::string shard;        // "I/N" or empty
  std::string output;       // JSON document to this file (atomically) instead of stdout
  bool json = false;
  bool quiet = false;
  std::string settings;     // the result-changing overrides, canonically written (sweep hash)
};
// Simulates every variant (of the shard), each adjusted by `adjust` (the command's overrides).
int simulate_sweep(const sim::Scenario& scenario, const std::function<void(sim::Scenario&)>& adjust, const SweepRunOptions& options);

}  // namespace comptrain::cli

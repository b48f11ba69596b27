#include "simulate_command.hpp"

#include <fmt/format.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "comptrain/models/op_time.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/sim/report/pipeline_report.hpp"
#include "comptrain/sim/report/simulate_report.hpp"
#include "comptrain/sim/report/simulation_timeline.hpp"
#include "comptrain/sim/report/plots.hpp"
#include "comptrain/sim/report/sweep_document.hpp"
#include "comptrain/sim/studies/sweep.hpp"
#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/sim/run/run.hpp"
#include "comptrain/sim/engine/replay.hpp"
#include "comptrain/models/shipped_or_file.hpp"
#include "comptrain/support/atomic_file.hpp"
#include "comptrain/support/input_error.hpp"
#include "options.hpp"
#include "plan_command.hpp"

namespace comptrain::cli {
namespace {

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
int simulate_sweep(const sim::Scenario& scenario, const std::function<void(sim::Scenario&)>& adjust, const SweepRunOptions& options) {
  sim::Sweep sweep = sim::expand_sweep(scenario);
  sweep.adjust = adjust;
  const std::optional<sim::Shard> shard = options.shard.empty() ? std::nullopt : std::optional(sim::parse_shard(options.shard));
  const std::vector<std::size_t> indices = sim::shard_variants(sweep.variant_count, shard);
  std::vector<sim::VariantResult> results = sim::simulate_variants(sweep, indices, options.jobs, !options.quiet, sim::variant_report_json);
  if (options.json || shard || !options.output.empty()) {
    emit(options.output, sim::sweep_document(sweep, "simulate", sim::sweep_run_hash(sweep, "simulate", options.settings), shard, std::move(results)));
  } else {
    write_output("-", sim::simulation_table_text(sweep, results));
  }
  return 0;
}

struct SimulateOptions {
  std::string scenario;
  std::optional<std::int64_t> batch;
  std::optional<std::string> platform;  // set even when empty: --platform "" is an error, not "no override"
  bool json = false;
  std::string memory_csv;
  std::string timeline;
  std::string plot;
  // For a scenario with a sweep (plan_command.hpp).
  int jobs = 0;
  std::string shard;
  std::string output;
  bool quiet = false;
};

void apply_overrides(const SimulateOptions& o, sim::Scenario& scenario) {
  if (o.batch) scenario.batch_size = o.batch;
  if (o.platform) sim::set_platform(scenario, models::resolve_platform(*o.platform, std::filesystem::current_path()));
}

sim::Scenario load(const SimulateOptions& o) {
  sim::Scenario scenario = o.scenario.empty() ? sim::default_scenario() : sim::load_scenario_file(o.scenario);
  apply_overrides(o, scenario);
  return scenario;
}

int run(const SimulateOptions& o) {
  const sim::Scenario scenario = load(o);
  if (scenario.has_sweep) {
    if (!o.memory_csv.empty() || !o.timeline.empty() || !o.plot.empty()) {
      throw InputError("--memory-csv, --timeline and --plot take one simulation; " + scenario.source + " has a sweep");
    }
    SweepRunOptions sweep_options;
    sweep_options.jobs = o.jobs;
    sweep_options.shard = o.shard;
    sweep_options.output = o.output;
    sweep_options.json = o.json;
    sweep_options.quiet = o.quiet;
    sweep_options.settings = "batch=" + (o.batch ? std::to_string(*o.batch) : std::string("-")) + " platform=" + o.platform.value_or("-");
    return simulate_sweep(scenario, [&o](sim::Scenario& variant) { apply_overrides(o, variant); }, sweep_options);
  }
  if (!o.shard.empty()) throw InputError("--shard: " + scenario.source + " has no 'sweep' section to split");
  const sim::PreparedScenario prepared(scenario);
  const std::int64_t batch = prepared.batch_size();
  if (sim::is_pipeline(scenario)) {
    // Every pipeline stage replayed together: a report of its own (sim/report/pipeline_report.hpp).
    if (!o.memory_csv.empty() || !o.plot.empty()) {
      throw InputError("--memory-csv and --plot take one rank's replay; " + scenario.source +
                       " has pipeline stages (--timeline writes every stage's, one process each)");
    }
    const sim::PipelineOutcome outcome = sim::run_pipeline(prepared, scenario.strategy, batch, sim::Isolation::child_process);
    if (const auto* run = std::get_if<sim::PipelineRun>(&outcome); run != nullptr && !o.timeline.empty()) {
      write_output(o.timeline, sim::pipeline_perfetto_trace_json(prepared, *run));
    }
    write_output("-", sim::pipeline_report(prepared, scenario.strategy, batch, outcome, o.json));
    return 0;
  }
  sim::RunOutcome outcome = sim::run_scenario(prepared, scenario.strategy, batch, sim::Isolation::child_process);
  // On a cluster, the same per-GPU run on one GPU alone gives the scaling efficiency.
  if (auto* completed = std::get_if<sim::CompletedRun>(&outcome); completed != nullptr && completed->result.fits()) {
    completed->one_gpu_seconds = sim::one_gpu_iteration_seconds(prepared, scenario.strategy, batch);
  }
  if (const auto* completed = std::get_if<sim::CompletedRun>(&outcome)) {
    const sim::SimulationRun run = sim::simulation_run(prepared, *completed);
    if (!o.memory_csv.empty()) write_output(o.memory_csv, sim::memory_timeline_csv(run));
    if (!o.timeline.empty()) write_output(o.timeline, sim::perfetto_trace_json(run));
    if (!o.plot.empty()) sim::write_memory_timeline_plot(run, o.plot);
    // A trace in which no op does arithmetic or carries a measured duration (a memory
    // snapshot's import: its ops are allocation events; a hand-made stub) is no training step:
    // "fits" and the times would describe nothing real.
    const auto& ops = run.trace.ops();
    if (std::none_of(ops.begin(), ops.end(), [](const traces::Op& op) { return op.flops.fixed != 0 || op.flops.per_sample != 0 || op.measured; })) {
      fmt::print(stderr,
                 "comptrain: warning: {}: the trace has no GPU work (no op with FLOPs or a measured duration); the times below are "
                 "kernel launches and memory traffic only\n",
                 scenario.source);
    }
    if (const auto& oom = completed->result.out_of_memory; oom && std::any_of(scenario.strategy.rules.begin(), scenario.strategy.rules.end(), [](const models::StrategyRule& r) {
          return r.offload() && !r.offload()->synchronous;
        })) {
      fmt::print(stderr,
                 "comptrain: hint: with asynchronous offload the forward pass may run ahead of its copies and hold their sources; "
                 "'offload: {{synchronous: true}}' (vDNN) waits for each copy\n");
    }
  }
  write_output("-", sim::report(prepared, scenario.strategy, batch, outcome, o.json));
  return 0;
}

}  // namespace

std::function<int()> add_simulate_command(CLI::App& app) {
  auto options = std::make_shared<SimulateOptions>();
  auto* command = app.add_subcommand(
      "simulate",
      "Replay one training iteration of a scenario: peak memory and time\n"
      "The iteration is replayed on the scenario's modeled GPU system (SimGrid); the report gives peak memory, iteration "
      "time, throughput, time in compute, copies, compression, recomputation and stalls. A model that does not fit is "
      "reported as such (exit 0, 'fits': false in JSON).");
  command->add_option("scenario", options->scenario, "Scenario file (.yaml); default: the embedded default scenario");
  add_positive_int(*command, "-b,--batch", options->batch, "Override the scenario's batch size");
  command->add_option("--platform", options->platform, "Override the scenario's platform: a shipped name or a .yaml file");
  command->add_flag("--json", options->json, "Print the report as JSON");
  command->add_option("--memory-csv", options->memory_csv, "Write the memory timeline (bytes per role over time) as CSV");
  command->add_option("--timeline", options->timeline,
                      "Write a Chrome/Perfetto trace (one track per stream, memory counters; with pipeline stages one process per stage); open it in "
                      "ui.perfetto.dev");
  command->add_option("--plot", options->plot,
                      "Draw the memory over the iteration, stacked by role, as an SVG file (needs gnuplot: Debian's gnuplot-nox)");
  add_positive_int(*command, "-j,--jobs", options->jobs, "With a sweep: worker processes (default: the core count)");
  command->add_option("--shard", options->shard,
                      "With a sweep: only variants I, I+N, ... (0-based I of N); writes JSON, joined by 'comptrain merge'");
  command->add_option("-o,--output", options->output, "With a sweep: write the JSON document to this file instead of stdout");
  command->add_flag("-q,--quiet", options->quiet, "With a sweep: no progress on stderr");
  return [command, options]() -> int {
    if (!command->parsed()) return -1;
    return run(*options);
  };
}

}  // namespace comptrain::cli

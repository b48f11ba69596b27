#include "plan_command.hpp"

#include <fmt/format.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comptrain/models/strategy_yaml.hpp"
#include "comptrain/sim/report/hybrid_report.hpp"
#include "comptrain/sim/studies/hybrid_plan.hpp"
#include "comptrain/sim/report/plan_report.hpp"
#include "comptrain/sim/studies/plan.hpp"
#include "comptrain/sim/report/plots.hpp"
#include "comptrain/sim/config/sweep.hpp"
#include "comptrain/sim/report/plan_shards.hpp"
#include "comptrain/sim/report/sweep_document.hpp"
#include "comptrain/support/atomic_file.hpp"
#include "comptrain/support/format.hpp"
#include "comptrain/support/input_error.hpp"
#include "options.hpp"

namespace comptrain::cli {
namespace {

struct PlanCliOptions {
  std::string scenario;
  std::optional<double> margin;
  std::optional<std::int64_t> max_batch;
  std::optional<std::int64_t> target_global_batch;
  std::optional<int> probes;
  std::string memory_metric;  // empty: the scenario's plan.memory_metric, else reserved
  int jobs = 0;
  bool json = false;
  bool quiet = false;
  std::string csv;
  std::string plots;
  std::string shard;
  std::string output;
  bool hybrid = false;
  std::optional<double> time_limit;
  std::string export_strategy;
};

std::string settings_of(const PlanCliOptions& o) {
  // Only what changes results: two shards run with different overrides must not merge.
  return fmt::format("margin={} max_batch={} target_global_batch={} probes={} memory_metric={}", o.margin ? fmt::format("{}", *o.margin) : "-",
                     o.max_batch ? std::to_string(*o.max_batch) : "-", o.target_global_batch ? std::to_string(*o.target_global_batch) : "-",
                     o.probes ? std::to_string(*o.probes) : "-", o.memory_metric.empty() ? "-" : o.memory_metric);
}

sim::PlanRequest request_for(const sim::Scenario& scenario, const PlanCliOptions& o, std::string variant) {
  sim::PlanRequest r;
  r.scenario = scenario;
  r.strategies = sim::strategies_to_plan(scenario);
  r.options = sim::plan_options_for(scenario);
  if (o.margin) r.options.margin = *o.margin;
  if (o.max_batch) r.options.max_batch = *o.max_batch;
  if (o.target_global_batch) r.options.target_global_batch = *o.target_global_batch;
  if (o.probes) r.options.probes_per_round = *o.probes;
  if (!o.memory_metric.empty()) r.options.memory_metric = *sim::parse_memory_metric(o.memory_metric);  // add_choice checked it
  r.variant = std::move(variant);
  return r;
}

void write_plots(const sim::BatchSizePlan& plan, const std::filesystem::path& directory) {
  const auto files = sim::write_plan_plots(plan, directory);
  for (const auto& f : files) fmt::print(stderr, "wrote {}\n", f.string());
}

int run_hybrid(const sim::Scenario& scenario, const PlanCliOptions& o) {
  if (!o.shard.empty()) throw InputError("--shard: plan --hybrid plans one scenario; expected --shard without --hybrid");
  if (!o.plots.empty()) throw InputError("--plots: plan --hybrid has no plots yet; expected --plots without --hybrid");
  if (!o.csv.empty()) throw InputError("--csv: plan --hybrid writes JSON (--json) and text; expected --csv without --hybrid");
  sim::HybridOptions options;
  if (o.time_limit) options.time_limit_seconds = *o.time_limit;
  const sim::HybridPlan plan = sim::make_hybrid_plan(request_for(scenario, o, ""), options, o.jobs, !o.quiet);
  if (!o.export_strategy.empty()) {
    if (!plan.best) throw InputError("--export-strategy: no batch fits with any plan, so there is no strategy to export");
    const sim::HybridPoint& best = plan.points[*plan.best];
    const std::string comment = fmt::format(
        "comptrain plan --hybrid: {} at batch {} on {}: {:.1f} samples/s, peak {} ({}), chosen by {}.\n"
        "Paste under 'strategy:' (or into plan.strategies) of a scenario and re-run; the names select storages exactly.",
        scenario.name, best.batch, plan.rules.platform_name, best.samples_per_second, format_bytes(best.peak_bytes),
        sim::to_string(plan.rules.options.memory_metric), best.chosen);
    write_output(o.export_strategy, models::strategy_to_yaml(best.strategy, comment));
    if (o.export_strategy != "-") fmt::print(stderr, "wrote {}\n", o.export_strategy);
  }
  if (o.json || !o.output.empty()) {
    emit(o.output, sim::hybrid_plan_json(plan));
  } else if (o.export_strategy != "-") {
    write_output("-", sim::hybrid_plan_text(plan));
  }
  return 0;
}

int run_plan(const PlanCliOptions& o) {
  const sim::Scenario scenario = o.scenario.empty() ? sim::default_scenario() : sim::load_scenario_file(o.scenario);
  if (o.hybrid) return run_hybrid(scenario, o);
  if (o.time_limit || !o.export_strategy.empty()) throw InputError("--time-limit and --export-strategy apply to --hybrid; expected --hybrid with them");
  if (!o.plots.empty() && scenario.plan && scenario.plan->searches_clusters()) {
    throw InputError("--plots: " + scenario.source + " plans a cluster search (plan.gpus, plan.nodes, plan.zero_stages or plan.offload_optimizer), which has no plots yet; expected --plots without it");
  }
  if (!scenario.has_sweep) {
    // Without a sweep --shard splits a cluster search's configurations (sim::PlanRequest::shard).
    std::vector<sim::PlanRequest> requests{request_for(scenario, o, "")};
    if (!o.shard.empty()) {
      if (!scenario.plan || !scenario.plan->searches_clusters()) {
        throw InputError("--shard: " + scenario.source + " has no 'sweep' section and no cluster search (plan.gpus, plan.nodes, plan.zero_stages, "
                         "plan.offload_optimizer, plan.comm_hooks, plan.compressed_collectives, plan.zero_plus_plus, plan.tensor, plan.pipeline, plan.virtual_stages, plan.context or plan.expert) to split; "
                         "expected one of them");
      }
      requests.front().shard = sim::parse_shard(o.shard);
    }
    const sim::BatchSizePlan plan = sim::make_plans(requests, o.jobs, !o.quiet).front();
    if (!o.csv.empty()) write_output(o.csv, sim::plan_csv(plan));
    if (requests.front().shard) {
      emit(o.output, sim::plan_shard_document(plan, sim::scenario_run_hash(scenario, "plan", settings_of(o)), *requests.front().shard));
    } else if (o.json || !o.output.empty()) {
      emit(o.output, sim::plan_json(plan));
    } else {
      write_output("-", sim::plan_table_text(plan));
    }
    if (!o.plots.empty()) write_plots(plan, o.plots);
    return 0;
  }

  const sim::Sweep sweep = sim::expand_sweep(scenario);
  const std::optional<sim::Shard> shard = o.shard.empty() ? std::nullopt : std::optional(sim::parse_shard(o.shard));
  const std::vector<std::size_t> indices = sim::shard_variants(sweep.variant_count, shard);
  std::vector<sim::PlanRequest> requests;
  for (std::size_t i : indices) {
    const sim::SweepVariant variant = sweep.variant(i);
    requests.push_back(request_for(variant.scenario, o, variant.label));
  }
  const std::vector<sim::BatchSizePlan> plans = sim::make_plans(requests, o.jobs, !o.quiet);
  if (!o.csv.empty()) write_output(o.csv, sim::plan_csv(plans));
  if (o.json || shard || !o.output.empty()) {
    std::vector<sim::VariantResult> results;
    for (std::size_t k = 0; k < indices.size(); ++k) results.push_back({indices[k], plans[k].variant, sim::plan_json(plans[k])});
    emit(o.output, sim::sweep_document(sweep, "plan", sim::sweep_run_hash(sweep, "plan", settings_of(o)), shard, std::move(results)));
  } else {
    for (std::size_t k = 0; k < indices.size(); ++k) {
      write_output("-", (k ? "\n" : "") + fmt::format("=== variant {} of {}: {}\n", indices[k], sweep.variant_count, plans[k].variant) +
                            sim::plan_table_text(plans[k]));
    }
  }
  if (!o.plots.empty()) {
    for (std::size_t k = 0; k < indices.size(); ++k) write_plots(plans[k], std::filesystem::path(o.plots) / fmt::format("variant-{:03}", indices[k]));
  }
  return 0;
}

}  // namespace

// The document goes to -o FILE (atomically) or to stdout (no -o, or -o -).
void emit(const std::string& output, const std::string& text) {
  if (output.empty() || output == "-") {
    write_output("-", text);
  } else {
    write_file_atomically(output, text);
    fmt::print(stderr, "wrote {}\n", output);
  }
}

std::function<int()> add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanCliOptions>();
  auto* command = app.add_subcommand(
      "plan",
      "Find each strategy's largest batch that fits, and its fastest batch\n"
      "For each strategy, the largest batch that fits in GPU memory with a margin (exponential growth then bisection over the "
      "simulator, assuming peak memory grows with the batch) and the batch with the highest samples/s among those that fit. "
      "Strategies come from the scenario's 'plan.strategies' (default: baseline, offload, recompute and the scenario's own). "
      "A scenario with a 'sweep' section is planned for every variant. With a 'parallelism' section the batches are per-GPU "
      "micro-batches, samples/s are global and each strategy's scaling efficiency is against its best micro-batch on one GPU alone; "
      "'plan.gpus' (or 'plan.nodes'), 'plan.zero_stages', 'plan.offload_optimizer', 'plan.comm_hooks', 'plan.compressed_collectives' and 'plan.zero_plus_plus' "
      "search cluster sizes x ZeRO stages x optimizer places (GPU, ZeRO-Offload, Deep Optimizer States with each gap of 'plan.prefetch_optimizer_gaps') "
      "x DDP's communication hooks (none, fp16, bf16, powersgd) x the collectives with or without 'parallelism.compression' x ZeRO-3's ZeRO++ "
      "settings (none, hpz, qwz, qgz, hpz+qwz, hpz+qgz, qwz+qgz, all) x strategies for the fastest "
      "configuration (for 'plan.target_global_batch' or --target-global-batch) and say what limits each: memory, network, host or compute. "
      "A scenario's 'data' and 'checkpoint' sections are simulated at every batch that fits (samples/s over the mean iteration; limits "
      "loader, storage, checkpoint), and 'plan.energy_budget' keeps the best batch within an energy budget (limit energy_budget where none is).");
  command->add_option("scenario", o->scenario, "Scenario file (.yaml); default: the embedded default scenario");
  add_real(*command, "--margin", o->margin, "Fraction of GPU memory kept free: peak <= (1 - margin) * capacity (default 0.05 or plan.margin)",
           0.0, 0.999999);
  add_positive_int(*command, "--max-batch", o->max_batch, "Search ceiling (default 65536 or plan.max_batch)");
  add_positive_int(*command, "--target-global-batch", o->target_global_batch,
                   "Rank batches for this global batch reached by gradient accumulation: ceil(G/b) micro-batches of b (on N GPUs: ceil(G/N/b) "
                   "micro-batches of b per GPU; G must be a multiple of N)");
  add_positive_int(*command, "--probes", o->probes, "Simulations per search round (default 3); results do not depend on -j");
  add_choice(*command, "--memory-metric", o->memory_metric,
             "The peak kept within the limit: reserved (default or plan.memory_metric: the PyTorch caching-allocator model's "
             "max_memory_reserved, where PyTorch runs out of memory), allocated (its max_memory_allocated), exact (the live tensors' bytes) "
             "or device (reserved + the CUDA context, what nvidia-smi shows, against the GPU's visible memory); out-of-memory is always "
             "decided on reserved",
             {"reserved", "allocated", "exact", "device"});
  add_positive_int(*command, "-j,--jobs", o->jobs, "Worker processes (default: the core count)");
  command->add_flag("--json", o->json, "Print the plan (every simulated point included) as JSON");
  command->add_option("--csv", o->csv, "Write every simulated point as CSV");
  command->add_option("--plots", o->plots, "Write SVG plots (throughput and peak memory against the batch) into this directory");
  command->add_option("--shard", o->shard,
                      "Plan only variants I, I+N, I+2N, ... of the sweep (0-based I of N; e.g. --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT), "
                      "or, without a sweep, only configurations I, I+N, ... of the cluster or layout search (plan.gpus, plan.tensor, ...: each "
                      "configuration with every strategy; scripts/plan-array.sbatch runs it as a Slurm job array); writes JSON, joined by "
                      "'comptrain merge'");
  command->add_option("-o,--output", o->output, "Write the JSON document to this file instead of stdout");
  command->add_flag("-q,--quiet", o->quiet, "No progress on stderr");
  command->add_flag("--hybrid", o->hybrid,
                    "After the rule-based plan, find per batch the fastest per-tensor mix of keep, compress (each compress action of the "
                    "scenario's strategies), offload and recompute that fits (a MILP over the decision model, solved by COIN-OR CBC with a "
                    "greedy warm start), each plan verified by replay and re-solved when it does not fit; one GPU");
  add_real(*command, "--time-limit", o->time_limit, "With --hybrid: CPU seconds CBC may spend per solve (default 0.5)", 0.0, 3600.0);
  command->add_option("--export-strategy", o->export_strategy,
                      "With --hybrid: write the plan at the best batch as a scenario strategy (YAML) to this file ('-': stdout)");
  return [command, o]() -> int {
    if (!command->parsed()) return -1;
    return run_plan(*o);
  };
}

std::function<int()> add_merge_command(CLI::App& app) {
  auto files = std::make_shared<std::vector<std::string>>();
  auto output = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto* command = app.add_subcommand("merge",
                                     "Join the JSON documents of shards into the unsharded run's answer\n"
                                     "The shards are those of plan or simulate --shard I/N. A sweep's shards (comptrain.sweep) join into the "
                                     "sweep's JSON document, checked to come from the same sweep and to cover every variant exactly once. A "
                                     "cluster or layout search's shards (plan --shard without a sweep: comptrain.plan_shard) join into the plan "
                                     "the unsharded 'plan' gives, checked to come from the same run (hash), to be every shard 0 to N-1 once and "
                                     "to repeat no candidate; it prints the plan's table, or its JSON with --json or -o.");
  command->add_option("shards", *files, "Shard documents (.json)")->required();
  command->add_flag("--json", *json, "Print the merged plan of a cluster search's shards as JSON (a sweep's merge is always JSON)");
  command->add_option("-o,--output", *output, "Write the merged JSON document to this file instead of stdout");
  return [command, files, output, json]() -> int {
    if (!command->parsed()) return -1;
    std::vector<std::pair<std::string, std::string>> documents;
    for (const auto& f : *files) documents.emplace_back(f, read_file(f));
    // The first document says which kind of shards these are; each merge refuses another kind.
    if (sim::is_plan_shard_document(documents.front().first, documents.front().second)) {
      const sim::MergedPlan merged = sim::merge_plan_shards(documents);
      if (*json || !output->empty()) {
        emit(*output, merged.json);
      } else {
        write_output("-", sim::plan_table_text(merged.plan));
      }
      return 0;
    }
    emit(*output, sim::merge_sweep_documents(documents));
    return 0;
  };
}

}  // namespace comptrain::cli

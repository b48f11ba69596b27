#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <tuple>
#include <utility>

#include "comptrain/sim/core/strategy_json.hpp"
#include "comptrain/sim/studies/plan.hpp"
#include "comptrain/support/input_error.hpp"
#include "studies/plan/cluster_search.hpp"
#include "studies/plan/driver.hpp"

// The planner's entry points (studies/plan.hpp): requests checked and made into units (a
// cluster search's through cluster_search.hpp), every search run by the Driver, each plan
// compared with its baseline and a cluster search's candidates gathered.
namespace comptrain::sim {
namespace planner {
namespace {

void check_options(const PlanOptions& o) {
  if (!(o.margin >= 0 && o.margin < 1)) throw InputError(fmt::format("plan: margin {:g} is out of range; expected a fraction in [0, 1)", o.margin));
  if (o.max_batch < 1) throw InputError("plan: max batch must be >= 1");
  if (o.target_global_batch && *o.target_global_batch < 1) throw InputError("plan: target global batch must be >= 1");
  if (o.probes_per_round < 1) throw InputError("plan: probes per round must be >= 1");
}

// Two strategies with the same rules plan the same: one is kept, the other named in a note.
std::vector<models::StrategySpec> without_duplicates(const std::vector<models::StrategySpec>& specs, std::vector<std::string>& notes) {
  std::vector<models::StrategySpec> out;
  std::vector<std::string> rules;
  for (const models::StrategySpec& spec : specs) {
    const std::string mine = detail::strategy_rules_key(spec);
    const auto same = std::find(rules.begin(), rules.end(), mine);
    if (same != rules.end()) {
      const std::string& kept = out[static_cast<std::size_t>(same - rules.begin())].name;
      if (kept != spec.name) notes.push_back(fmt::format("'{}' has the same rules as '{}': planned once, as '{}'", spec.name, kept, kept));
      continue;
    }
    rules.push_back(mine);
    out.push_back(spec);
  }
  return out;
}

void compare_with_baseline(BatchSizePlan& plan, const std::vector<models::StrategySpec>& specs) {
  const auto base = std::find_if(specs.begin(), specs.end(), is_baseline);
  if (base == specs.end()) return;
  const StrategyPlan& baseline = plan.strategies[static_cast<std::size_t>(base - specs.begin())];
  if (!baseline.max_batch) return;
  for (StrategyPlan& s : plan.strategies) {
    if (&s == &baseline || !s.max_batch) continue;
    const std::int64_t batch = std::min(*baseline.max_batch, *s.max_batch);
    const PlanPoint* mine = point_at(s, batch);
    const PlanPoint* theirs = point_at(baseline, batch);
    if (!mine || !theirs || !mine->fits || !theirs->fits || theirs->mean_iteration_seconds <= 0 || theirs->peak_bytes <= 0) continue;
    StrategyPlan::Comparison c;
    c.batch = batch;
    c.peak_saved_fraction = 1.0 - static_cast<double>(mine->peak_bytes) / static_cast<double>(theirs->peak_bytes);
    const auto saved = [](std::int64_t mine_bytes, std::int64_t their_bytes) {
      return their_bytes > 0 ? 1.0 - static_cast<double>(mine_bytes) / static_cast<double>(their_bytes) : 0.0;
    };
    c.allocated_saved_fraction = saved(mine->allocated_peak_bytes, theirs->allocated_peak_bytes);
    c.reserved_saved_fraction = saved(mine->reserved_peak_bytes, theirs->reserved_peak_bytes);
    c.slowdown = mine->mean_iteration_seconds / theirs->mean_iteration_seconds;
    c.best_throughput_ratio = baseline.best_samples_per_second > 0 ? s.best_samples_per_second / baseline.best_samples_per_second : 0;
    s.vs_baseline = c;
  }
}

// A plan's header: the scenario, its platform, its GPUs and what the peak is held against.
BatchSizePlan plan_header(const PlanRequest& r, const PreparedScenario& prepared, int jobs, bool progress) {
  BatchSizePlan plan;
  const models::Platform& platform = prepared.platform();
  plan.scenario_name = r.scenario.name;
  plan.scenario_source = r.scenario.source;
  plan.platform_source = platform.source;
  plan.gpu_name = platform.gpu.name;
  plan.variant = r.variant;
  plan.platform_name = platform.name;
  // The device metric counts the CUDA context, so it is held against the visible memory; the
  // others count what the allocator holds, against what it may reserve.
  const FrameworkOnGpu& framework = prepared.framework();
  plan.capacity_bytes = r.options.memory_metric == MemoryMetric::device ? framework.visible_bytes : framework.usable_bytes();
  plan.cuda_context_bytes = framework.cuda_context_bytes;
  plan.limit_bytes = static_cast<std::int64_t>(std::floor((1 - r.options.margin) * static_cast<double>(plan.capacity_bytes)));
  plan.options = r.options;
  plan.options.jobs = jobs;
  plan.options.progress = progress;
  plan.cluster = prepared.cluster_shape();
  plan.io_modelled = r.scenario.data.has_value() || r.scenario.checkpoint.has_value();
  if (r.scenario.checkpoint && r.scenario.plan) plan.checkpoint_overhead = r.scenario.plan->checkpoint_overhead;
  if (r.scenario.parallelism) {
    plan.zero_stage = r.scenario.parallelism->data.zero_stage;
    plan.fsdp = r.scenario.parallelism->data.fsdp.has_value();
    plan.offload_optimizer = r.scenario.parallelism->data.offload_optimizer;
    plan.comm_hook = r.scenario.parallelism->data.comm_hook;
    plan.compressed_collectives = r.scenario.parallelism->data.compression.has_value();
    if (const auto& z = r.scenario.parallelism->data.compression) plan.compressed_all_reduce = z->all_reduce;
    plan.zero_plus_plus = zero_plus_plus_of(r.scenario.parallelism->data);
    plan.hpz_partition_size = r.scenario.parallelism->data.hpz_partition_size;
    // FSDP2's CPU offload steps every shard on the host: reported as the optimizer on the CPU.
    if (const auto& fsdp = r.scenario.parallelism->data.fsdp; fsdp && fsdp->cpu_offload) plan.offload_optimizer = models::OptimizerOffloadSpec{};
    if (const models::ParallelLayout& layout = r.scenario.parallelism->layout; !layout.is_data_parallel_only() || layout.sequence_parallel) plan.layout = layout;
  }
  return plan;
}

bool has_cluster_search(const Scenario& s) { return s.plan && s.plan->searches_clusters(); }

// Each unit prepared once, its plan's header, its strategies (duplicates noted) and one search
// per strategy.
void prepare_searches(Driver& d, int jobs, bool progress) {
  d.extra_done.assign(d.units.size(), false);
  d.references_submitted.assign(d.units.size(), false);
  for (std::size_t u = 0; u < d.units.size(); ++u) {
    const PlanRequest& r = d.requests[u];
    // Prepared once here, before any worker is forked: a trace file is parsed once, and a
    // scenario or strategy that cannot run exits 2 once instead of failing every probe.
    d.prepared.push_back(std::make_unique<PreparedScenario>(r.scenario));
    BatchSizePlan plan = plan_header(r, *d.prepared.back(), jobs, progress);
    d.strategies.push_back(without_duplicates(r.strategies, plan.notes));
    for (const models::StrategySpec& spec : d.strategies.back()) models::validate_strategy(spec, r.scenario.source);
    d.plans.push_back(std::move(plan));
    for (std::size_t s = 0; s < d.strategies.back().size(); ++s) {
      Search search;
      search.plan = u;
      search.strategy = s;
      search.phase = d.units[u].divisors.empty() ? Search::Phase::grow : Search::Phase::first;
      search.every_divisor = d.units[u].every_divisor;
      d.searches.push_back(std::move(search));
    }
  }
}

// Every search to its end through the pool; a worker's input error, the first by (plan,
// strategy, batch), once every job has ended.
void run_searches(Driver& d) {
  for (std::size_t i = 0; i < d.searches.size(); ++i) d.submit_round(i);
  std::size_t done = 0;
  d.progress.update(0, d.estimate_total(), true);
  while (auto finished = d.pool.next()) {
    d.record(finished->id, std::move(finished->outcome));
    d.progress.update(++done, d.estimate_total(), true);
  }
  d.progress.finish(done);
  if (d.input_error) throw InputError(std::get<3>(*d.input_error));
}

}  // namespace
}  // namespace planner

using namespace planner;

std::vector<BatchSizePlan> make_plans(const std::vector<PlanRequest>& requests, int jobs, bool progress) {
  Driver d(requests, jobs, progress);
  d.one_gpu.resize(requests.size());
  std::vector<BatchSizePlan> out(requests.size());
  std::vector<std::vector<std::size_t>> units_of(requests.size());
  std::vector<std::vector<std::size_t>> configurations_of(requests.size());  // a cluster search's: each unit's configuration
  // Each request is one unit, or one unit per cluster size and ZeRO stage of its cluster search.
  for (std::size_t p = 0; p < requests.size(); ++p) {
    const PlanRequest& r = requests[p];
    check_options(r.options);
    if (r.strategies.empty()) throw InputError(r.scenario.source + ": no strategy to plan");
    const auto add_unit = [&](Scenario scenario, Unit unit, std::vector<models::StrategySpec> strategies) {
      unit.request = p;
      units_of[p].push_back(d.units.size());
      d.units.push_back(unit);
      if (strategies.empty()) strategies = r.strategies;
      d.requests.push_back({std::move(scenario), std::move(strategies), r.options, r.variant, std::nullopt});
    };
    // A strategy's first_stages against a fixed layout: an error at its line, as in the scenario's
    // strategy (a layout search plans each on the layouts that have its stages instead).
    if (!(r.scenario.plan && r.scenario.plan->searches_layouts())) {
      for (const models::StrategySpec& spec : r.strategies) {
        models::check_first_stages(spec, r.scenario.parallelism ? r.scenario.parallelism->layout.pipeline : 1);
      }
    }
    const auto target = r.options.target_global_batch;
    if (target && r.scenario.accumulation_steps > 1) {
      throw InputError(fmt::format("{}: plan: a target global batch ({}) with training.gradient_accumulation_steps ({}): the planner chooses the "
                                   "accumulation for a target; expected one of them",
                                   r.scenario.source, *target, r.scenario.accumulation_steps));
    }
    if (!has_cluster_search(r.scenario)) {
      if (target && r.scenario.parallelism && *target % r.scenario.parallelism->data.ranks != 0) {
        const int gpus = r.scenario.parallelism->data.ranks;
        throw InputError(fmt::format("{}: plan: target global batch {} is not a multiple of the {} GPUs of the parallelism section; expected a multiple of {}",
                                     r.scenario.source, *target, gpus, gpus));
      }
      Unit unit{p, r.options.max_batch, true, 0, {}};
      if (r.scenario.parallelism) {
        const models::ParallelLayout& layout = r.scenario.parallelism->layout;
        unit.model_parallel = !layout.is_data_parallel_only() || layout.sequence_parallel;
      }
      add_unit(r.scenario, unit, {});
      continue;
    }
    // The header (and any error of the scenario itself, once) from the scenario as written.
    out[p] = plan_header(r, PreparedScenario(r.scenario), jobs, progress);
    std::vector<ClusterUnit> candidates;
    out[p].cluster_search = expand_cluster_search(r, out[p], candidates);
    out[p].cluster_search->configuration_count = candidates.size();
    for (const std::size_t c : shard_variants(candidates.size(), r.shard)) {
      configurations_of[p].push_back(c);
      add_unit(std::move(candidates[c].scenario), std::move(candidates[c].unit), std::move(candidates[c].strategies));
    }
  }

  prepare_searches(d, jobs, progress);
  run_searches(d);

  for (const Search& s : d.searches) d.plans[s.plan].strategies.push_back(d.finish(s));
  for (std::size_t u = 0; u < d.plans.size(); ++u) {
    if (d.units[u].compare) compare_with_baseline(d.plans[u], d.strategies[u]);
  }
  for (std::size_t p = 0; p < requests.size(); ++p) {
    if (!out[p].cluster_search) {
      out[p] = std::move(d.plans[units_of[p].front()]);
      continue;
    }
    gather_candidates(out[p], d.plans, units_of[p], configurations_of[p], requests[p].options.objective);
  }
  return out;
}

BatchSizePlan make_plan(const Scenario& scenario, const std::vector<models::StrategySpec>& strategies, const PlanOptions& options) {
  std::vector<PlanRequest> requests(1);
  requests[0].scenario = scenario;
  requests[0].strategies = strategies;
  requests[0].options = options;
  return make_plans(requests, options.jobs, options.progress).front();
}

}  // namespace comptrain::sim

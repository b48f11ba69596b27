#include "studies/plan/driver.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "comptrain/models/parallel_layout.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/sim/core/bottleneck.hpp"
#include "comptrain/support/format.hpp"
#include "comptrain/sim/core/strategy_json.hpp"
#include "comptrain/sim/metrics/memory_peak.hpp"
#include "comptrain/sim/metrics/throughput.hpp"
#include "comptrain/sim/runtime/wire.hpp"

namespace comptrain::sim::planner {

// plan.energy_budget at a point that fits and trains `samples` per iteration: every bound given
// holds (a point without energy meets none; scenarios with a budget need power values).
bool within(const std::optional<EnergyBudget>& budget, const PlanPoint& point, double samples) {
  if (!budget || !point.fits) return true;
  if (!(point.joules > 0)) return false;
  if (budget->joules_per_sample && point.joules / samples > *budget->joules_per_sample) return false;
  if (budget->gpu_average_watts && point.gpu_average_watts > *budget->gpu_average_watts) return false;
  if (budget->node_average_watts && point.node_average_watts > *budget->node_average_watts) return false;
  return true;
}

void Driver::submit_round(std::size_t index) {
  Search& s = searches[index];
  while (s.phase != Search::Phase::done) {
    if (s.phase != Search::Phase::extra) s.round = next_round(s, units[s.plan].divisors, options(s).probes_per_round, options(s).max_batch);
    s.outstanding = 0;
    for (std::int64_t b : s.round) {
      if (s.points.count(b)) continue;  // already simulated
      const PreparedScenario& scenario = *prepared[s.plan];
      const models::StrategySpec& strategy = spec(s);
      const int k = simulated_steps(s, b);
      const ProbeIo io = probe_io(s);
      const std::size_t job = pool.submit([&scenario, &strategy, b, k, io]() { return probe(scenario, strategy, b, io, k); });
      job_owner[job] = {index, b};
      ++s.outstanding;
    }
    if (s.outstanding > 0) return;
    if (s.round.empty()) {
      s.phase = Search::Phase::done;
    } else {
      decide(s, units[s.plan].divisors);
    }
  }
  on_search_done(s);
}

// When every search of a plan is done: the points the comparison with the baseline needs,
// each strategy and the baseline at the smaller of their largest batches, where the search
// did not simulate them.
void Driver::on_search_done(const Search& done) {
  const std::size_t p = done.plan;
  if (!every_search_done(p)) return;
  if (!extra_done[p]) {
    extra_done[p] = true;
    if (units[p].compare) submit_comparison_points(p);
  }
  if (every_search_done(p)) submit_references(p);
}

bool Driver::every_search_done(std::size_t p) const {
  return std::all_of(searches.begin(), searches.end(), [&](const Search& s) { return s.plan != p || s.phase == Search::Phase::done; });
}

void Driver::submit_comparison_points(std::size_t p) {
  std::optional<std::size_t> baseline;
  for (std::size_t i = 0; i < searches.size(); ++i) {
    if (searches[i].plan == p && !baseline && is_baseline(spec(searches[i]))) baseline = i;
  }
  if (!baseline || searches[*baseline].lo == 0) return;
  std::map<std::size_t, std::set<std::int64_t>> extra;  // search -> batches
  const std::int64_t base_max = searches[*baseline].lo;
  for (std::size_t i = 0; i < searches.size(); ++i) {
    const Search& s = searches[i];
    if (s.plan != p || i == *baseline || s.lo == 0) continue;
    const std::int64_t common = std::min(base_max, s.lo);
    if (!s.points.count(common)) extra[i].insert(common);
    if (!searches[*baseline].points.count(common)) extra[*baseline].insert(common);
  }
  for (auto& [i, batches] : extra) {
    searches[i].phase = Search::Phase::extra;
    searches[i].round.assign(batches.begin(), batches.end());
  }
  for (auto& [i, batches] : extra) submit_round(i);
}

// Once a cluster unit's points are all in (its best batches final): each strategy's best
// micro-batch on one GPU alone, once per request, strategy and batch.
void Driver::submit_references(std::size_t p) {
  if (references_submitted[p]) return;
  references_submitted[p] = true;
  if (plans[p].cluster.ranks() == 1) return;  // one GPU: its own reference
  if (units[p].model_parallel) return;        // one GPU cannot run what the layout splits
  const std::size_t request = units[p].request;
  for (const Search& s : searches) {
    if (s.plan != p) continue;
    const auto best = best_of(s);
    if (!best) continue;
    const int k = simulated_steps(s, *best);
    ReferenceKey key{request, detail::strategy_rules_key(spec(s)), *best, k};
    if (references.count(key)) continue;
    references[key] = {};
    if (!one_gpu[request]) {
      // The same iteration on one GPU, its memory unbounded: the replay's time does not depend
      // on the memory unless it runs out (platform_limits::max_memory_bytes, 1 PiB, keeps the
      // platform valid).
      Scenario alone = callers[request].scenario;
      alone.parallelism.reset();
      alone.platform->gpu.memory_bytes = models::platform_limits::max_memory_bytes;
      alone.platform->gpu.memory_visible_bytes = models::platform_limits::max_memory_bytes;
      one_gpu[request] = std::make_unique<PreparedScenario>(std::move(alone));
    }
    const PreparedScenario& scenario = *one_gpu[request];
    const models::StrategySpec& strategy = spec(s);
    const std::int64_t batch = *best;
    // The scaling efficiency compares replays: no I/O for the reference.
    reference_jobs[pool.submit([&scenario, &strategy, batch, k]() { return probe(scenario, strategy, batch, ProbeIo{}, k); })] = key;
  }
}

void Driver::record_reference(std::size_t job, const JobOutcome& outcome) {
  Reference& r = references.at(reference_jobs.at(job));
  if (outcome.status == JobOutcome::Status::result) {
    const PlanPoint point = wire::decode<ProbedPoint>(outcome.text).point;
    if (point.iteration_seconds > 0 && !point.out_of_memory && !point.inapplicable) {
      r.seconds = point.iteration_seconds;
    } else {
      r.note = point.inapplicable ? "the strategy does not apply there" : "it did not run";
    }
  } else {
    r.note = outcome.text;
  }
}

int Driver::replicas(const Search& s) const {
  const auto& parallelism = requests[s.plan].scenario.parallelism;
  if (!parallelism || parallelism->layout.is_data_parallel_only()) return ranks(s);
  return models::data_parallel_degree(parallelism->layout, ranks(s));
}

// Accumulation steps simulated at `batch`: a cluster candidate's share / batch; 0 (the
// scenario's own) otherwise.
int Driver::simulated_steps(const Search& s, std::int64_t batch) const {
  return units[s.plan].divisors.empty() ? 0 : static_cast<int>(units[s.plan].share / batch);
}

// Micro-steps of `batch` per GPU and optimizer step: simulated (a cluster candidate's, or the
// scenario's own), or estimated to reach a target global batch (each GPU's share of it).
std::int64_t Driver::steps(const Search& s, std::int64_t batch) const {
  if (!units[s.plan].divisors.empty()) return simulated_steps(s, batch);
  const auto g = options(s).target_global_batch;
  if (!g) return requests[s.plan].scenario.accumulation_steps;
  const std::int64_t share = *g / replicas(s);  // a whole number: checked when the units were made
  return (share + batch - 1) / batch;
}

double Driver::rate(const Search& s, const PlanPoint& point) const {
  if (!point.fits || point.iteration_seconds <= 0) return 0;
  if (const auto g = options(s).target_global_batch; g && units[s.plan].divisors.empty()) {
    return samples_per_second(*g, static_cast<double>(steps(s, point.batch)) * point.mean_iteration_seconds);
  }
  return point.samples_per_second;
}

std::optional<std::int64_t> Driver::best_of(const Search& s) const {
  std::optional<std::int64_t> best;
  double best_rate = 0;
  for (const auto& [b, point] : s.points) {  // ascending: ties keep the smaller batch
    // plan.objective: samples per joule (energy per sample is the same with any accumulation) or samples/s.
    const double r = objective_score(options(s).objective, rate(s, point), point.fits ? point.samples_per_joule : 0);
    if (point.fits && point.within_energy_budget && (!best || r > best_rate)) {
      best = b;
      best_rate = r;
    }
  }
  return best;
}

void Driver::record(std::size_t job, JobOutcome outcome) {
  if (reference_jobs.count(job)) {
    record_reference(job, outcome);
    return;
  }
  const auto [index, batch] = job_owner.at(job);
  Search& s = searches[index];
  PlanPoint point;
  point.batch = batch;
  if (outcome.status == JobOutcome::Status::input_error) {
    auto error = std::make_tuple(s.plan, s.strategy, batch, outcome.text);
    if (!input_error || error < *input_error) input_error = std::move(error);
    outcome.status = JobOutcome::Status::failed;  // the point fails; the plan exits 2 at the end
  }
  if (outcome.status == JobOutcome::Status::result) {
    ProbedPoint probed = wire::decode<ProbedPoint>(outcome.text);
    point = probed.point;
    if (point.inapplicable) s.notes[batch] = fmt::format("batch {}: the strategy does not apply: {}", batch, probed.note);
  } else {
    // A worker that threw or died (a signal: a crash inside SimGrid) fails this point only.
    point.simulation_failed = true;
    s.notes[batch] = fmt::format("batch {}: {}; counted as not fitting", batch, outcome.text);
  }
  if (!outcome.diagnostics.empty()) {
    std::string& note = s.notes[batch];
    note += (note.empty() ? fmt::format("batch {}: ", batch) : std::string("; ")) + "the worker wrote: " + outcome.diagnostics;
    while (!note.empty() && note.back() == '\n') note.pop_back();
  }
  if (!point.out_of_memory && !point.inapplicable && !point.simulation_failed) point.peak_bytes = peak_in(options(s).memory_metric, peaks_of(point));
  point.fits = !point.out_of_memory && !point.inapplicable && !point.simulation_failed && point.peak_bytes <= limit(s);
  // Every GPU trains on `batch` samples in each of its micro-steps: the throughput is global.
  const int micro_steps = simulated_steps(s, batch) > 0 ? simulated_steps(s, batch) : requests[s.plan].scenario.accumulation_steps;
  const std::int64_t samples = global_batch(batch, replicas(s), micro_steps);
  point.samples_per_second = point.fits && point.mean_iteration_seconds > 0 ? samples_per_second(samples, point.mean_iteration_seconds) : 0;
  point.samples_per_joule = point.fits && point.joules > 0 ? static_cast<double>(samples) / point.joules : 0;
  point.within_energy_budget = within(options(s).energy_budget, point, static_cast<double>(samples));
  s.points[batch] = point;
  if (--s.outstanding == 0) {
    decide(s, units[s.plan].divisors);
    submit_round(index);
  }
}

std::size_t Driver::estimate_total() const {
  std::size_t total = 0;
  for (const Search& s : searches) {
    total += s.points.size() + s.outstanding;
    const auto width = static_cast<double>(std::max(1, options(s).probes_per_round));
    auto rounds = [&](double span) { return span <= 1 ? 0.0 : std::ceil(std::log(span) / std::log(width + 1)); };
    const auto divisors = static_cast<double>(units[s.plan].divisors.size());
    if (s.phase == Search::Phase::first) total += static_cast<std::size_t>(1 + width * rounds(divisors));
    if (s.phase == Search::Phase::divisors) total += static_cast<std::size_t>(width * rounds(static_cast<double>(s.hi_index - s.lo_index)));
    if (s.phase == Search::Phase::grow) total += static_cast<std::size_t>(width + width * rounds(static_cast<double>(std::max<std::int64_t>(s.lo, 2))));
    if (s.phase == Search::Phase::bisect) total += static_cast<std::size_t>(width * rounds(static_cast<double>(s.hi - s.lo)));
  }
  for (const auto& [key, reference] : references) total += reference.seconds || !reference.note.empty() ? 0 : 1;
  return total;
}

// A finished search made into its strategy's plan (Driver::finish) and what limits it (limit_of).

// See PlanLimit. A strategy that fits nowhere is named by its first point (batch 1).
PlanLimit limit_of(const StrategyPlan& s, double share) {
  if (!s.best_batch) {
    if (s.points.empty()) return PlanLimit::failed;
    if (std::any_of(s.points.begin(), s.points.end(), [](const PlanPoint& p) { return p.fits; })) return PlanLimit::energy_budget;
    const PlanPoint& one = s.points.front();
    if (one.inapplicable) return PlanLimit::not_applicable;
    if (one.simulation_failed) return PlanLimit::failed;
    return PlanLimit::memory;
  }
  const PlanPoint* best = point_at(s, *s.best_batch);
  if (best->io_modelled && best->io_bound == IterationBound::loader) return PlanLimit::loader;
  if (best->io_modelled && best->io_bound == IterationBound::storage) return PlanLimit::storage;
  const double network = best->exposed_communication_seconds / best->iteration_seconds;
  const double host = best->host_wait_seconds / best->iteration_seconds;
  const double checkpoint = best->checkpoint_seconds_per_iteration / best->mean_iteration_seconds;
  const double bubble = best->bubble_seconds / best->iteration_seconds;
  if (bubble >= share && bubble >= network && bubble >= host && bubble >= checkpoint) return PlanLimit::bubble;
  switch (dominant_wait(network, host, checkpoint, share)) {
    case Bottleneck::none: return PlanLimit::compute;
    case Bottleneck::checkpoint: return PlanLimit::checkpoint;
    case Bottleneck::network: return PlanLimit::network;
    case Bottleneck::host: return PlanLimit::host;
  }
  return PlanLimit::compute;
}

StrategyPlan Driver::finish(const Search& s) const {
  StrategyPlan out;
  out.strategy = spec(s).name;
  out.spec = spec(s);
  for (const auto& [b, point] : s.points) out.points.push_back(point);
  for (const auto& [batch, note] : s.notes) out.warnings.push_back(note);
  if (s.lo > 0) {
    out.max_batch = s.lo;
    out.max_is_ceiling = s.lo == units[s.plan].ceiling || (!units[s.plan].divisors.empty() && s.lo == units[s.plan].divisors.back());
  }
  // The search assumed that peak memory grows with the batch; check it on what was simulated.
  const PlanPoint* previous = nullptr;
  std::optional<std::int64_t> failed_at;
  for (const PlanPoint& point : out.points) {
    if (!point.fits && !failed_at) failed_at = point.batch;
    if (point.fits && failed_at) {
      out.warnings.push_back(fmt::format("not monotone: batch {} fits but batch {} does not; the maximum reported is below the first failure", point.batch,
                                         *failed_at));
    }
    if (point.out_of_memory || point.inapplicable || point.simulation_failed) continue;
    // The allocator's figures move by whole segments and cached blocks, so they may dip a
    // little as the batch grows without the search being wrong: only what fits (above) is
    // checked for them; the tensors' exact bytes must not fall.
    if (previous && options(s).memory_metric == MemoryMetric::exact && point.peak_bytes < previous->peak_bytes) {
      out.warnings.push_back(fmt::format("not monotone: peak {} at batch {} is below {} at batch {}", format_bytes(point.peak_bytes), point.batch,
                                         format_bytes(previous->peak_bytes), previous->batch));
    }
    previous = &point;
  }
  if (auto best = best_of(s)) {
    const PlanPoint& point = s.points.at(*best);
    out.best_batch = *best;
    out.best_samples_per_second = rate(s, point);
    out.best_samples_per_joule = point.samples_per_joule;
    out.best_peak_bytes = point.peak_bytes;
    out.accumulation_steps = steps(s, *best);
    out.accumulation_simulated = !units[s.plan].divisors.empty() || !options(s).target_global_batch;
    if (ranks(s) == 1 && requests[s.plan].scenario.parallelism) {
      // A parallelism section of one GPU (a cluster search's size 1) is its own reference.
      out.one_gpu_iteration_seconds = point.iteration_seconds;
      out.scaling_efficiency = 1.0;
    } else if (ranks(s) > 1 && !units[s.plan].model_parallel) {
      const Reference& r = references.at({units[s.plan].request, detail::strategy_rules_key(spec(s)), *best, simulated_steps(s, *best)});
      if (r.seconds) {
        out.one_gpu_iteration_seconds = r.seconds;
        out.scaling_efficiency = *r.seconds / point.iteration_seconds;
      } else {
        out.warnings.push_back(fmt::format("no scaling efficiency: the reference run of batch {} on one GPU alone failed: {}", *best, r.note));
      }
    }
  }
  out.limit = limit_of(out, options(s).bottleneck_share);
  return out;
}

}  // namespace comptrain::sim::planner

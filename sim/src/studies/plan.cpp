#include "comptrain/sim/studies/plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <tuple>
#include <type_traits>

#include "comptrain/models/data_parallel.hpp"
#include "comptrain/sim/core/bottleneck.hpp"
#include "comptrain/sim/core/data_parallel_name.hpp"
#include "comptrain/sim/core/strategy_json.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/sim/metrics/communication_time.hpp"
#include "comptrain/sim/metrics/iteration_energy.hpp"
#include "comptrain/sim/run/run.hpp"
#include "comptrain/sim/engine/replay.hpp"
#include "comptrain/sim/runtime/workers.hpp"
#include "comptrain/support/format.hpp"
#include "comptrain/support/input_error.hpp"
#include "report/documents.hpp"
#include "report/energy_report.hpp"

namespace comptrain::sim {
namespace {

using nlohmann::ordered_json;

static_assert(std::is_trivially_copyable_v<PlanPoint>, "PlanPoint travels over a pipe as bytes");

bool is_baseline(const models::StrategySpec& spec) { return spec.rules.empty(); }

// The peak a point is held against: the plan's memory metric of a simulation that ran.
std::int64_t peak_in(MemoryMetric metric, const PlanPoint& point) {
  switch (metric) {
    case MemoryMetric::exact: return point.exact_peak_bytes;
    case MemoryMetric::allocated: return point.allocated_peak_bytes;
    case MemoryMetric::reserved: return point.reserved_peak_bytes;
    case MemoryMetric::device: return point.device_peak_bytes;
  }
  return point.reserved_peak_bytes;
}

// Whether a probe runs the scenario's I/O simulation after its replay (plan.hpp, "I/O"): only for
// a point within the memory limit, so that points that do not fit cost no fork.
struct ProbeIo {
  bool run = false;
  MemoryMetric metric = MemoryMetric::reserved;
  std::int64_t limit_bytes = 0;
};

// Runs in a worker process: one simulation, reduced to what the planner needs, replayed in
// this process (the worker is a fresh child already), or, where the I/O is simulated too, replayed
// in a child and the I/O simulated here. A strategy that does not apply at this batch is a point of its own;
// its reason follows the point's bytes. `steps` > 0 replaces the scenario's gradient accumulation
// steps (the scenario is prepared again, in the worker).
std::string probe(const PreparedScenario& given, const models::StrategySpec& spec, std::int64_t batch, const ProbeIo& io, int steps = 0) {
  std::optional<PreparedScenario> accumulating;
  if (steps > 0 && steps != given.scenario().accumulation_steps) {
    Scenario scenario = given.scenario();
    scenario.accumulation_steps = steps;
    accumulating.emplace(std::move(scenario));
  }
  const PreparedScenario& prepared = accumulating ? *accumulating : given;
  PlanPoint point;
  point.batch = batch;
  std::string note;
  auto scheduled = schedule_run(prepared, spec, batch);
  if (const auto* not_applicable = std::get_if<models::NotApplicable>(&scheduled)) {
    point.inapplicable = true;
    note = not_applicable->reason;
  } else {
    const ScheduledRun& run = std::get<ScheduledRun>(scheduled);
    // SimGrid's engine runs once per process and a child forked after it ran inherits its state:
    // with I/O to simulate, the replay runs in a child and the I/O here, in the worker.
    const SimulationResult r = replay(prepared, run, io.run ? Isolation::child_process : Isolation::this_process);
    if (r.out_of_memory) {
      point.out_of_memory = true;
      point.peak_bytes = r.out_of_memory->in_use + r.out_of_memory->requested;
    } else {
      point.exact_peak_bytes = r.peak_bytes;
      point.allocated_peak_bytes = r.device.peak_allocated;
      point.reserved_peak_bytes = r.device.peak_reserved;
      point.device_peak_bytes = r.device.device_peak();
      point.iteration_seconds = r.iteration_seconds;
      point.mean_iteration_seconds = r.iteration_seconds;
      point.stall_seconds = r.compute_stall_seconds;
      point.host_wait_seconds = r.host_wait_seconds;
      const CommunicationTime communication = communication_time(run.schedule, r);
      point.collective_seconds = communication.collective_seconds;
      point.exposed_communication_seconds = communication.exposed_seconds;
      std::optional<IoResult> io_result;
      if (io.run && peak_in(io.metric, point) <= io.limit_bytes) io_result = simulate_run_io(prepared, run, r, Isolation::this_process);
      if (io_result) {
        point.io_modelled = true;
        point.io_bound = io_result->bound;
        point.mean_iteration_seconds = io_result->mean_iteration_seconds;
        point.data_wait_seconds = io_result->data_wait_seconds;
        if (const auto& c = io_result->checkpoint) {
          point.checkpoint_seconds_per_iteration = c->seconds_per_iteration;
          point.checkpoint_stall_seconds = c->stall_seconds;
          point.checkpoint_interval_for_target = c->interval_for_target.value_or(0);
        }
      }
      if (r.energy) {
        const IterationEnergy energy = iteration_energy(*r.energy, io_result ? &*io_result : nullptr, prepared.platform());
        point.joules = energy.total_joules;
        point.gpu_average_watts = energy.gpu_average_watts();
        point.node_average_watts = energy.node_average_watts();
      }
    }
  }
  std::string bytes(sizeof point, '\0');
  std::memcpy(bytes.data(), &point, sizeof point);
  return bytes + note;
}

const PlanPoint* point_at(const StrategyPlan& s, std::int64_t batch) {
  const auto it = std::find_if(s.points.begin(), s.points.end(), [&](const PlanPoint& q) { return q.batch == batch; });
  return it == s.points.end() ? nullptr : &*it;
}

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
  switch (dominant_wait(network, host, checkpoint, share)) {
    case Bottleneck::none: return PlanLimit::compute;
    case Bottleneck::checkpoint: return PlanLimit::checkpoint;
    case Bottleneck::network: return PlanLimit::network;
    case Bottleneck::host: return PlanLimit::host;
  }
  return PlanLimit::compute;
}

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

// The search for one strategy of one plan; see plan.hpp. A round's probes are decided from the
// results of the previous round only, never from the order in which they arrive.
struct Search {
  std::size_t plan = 0;
  std::size_t strategy = 0;
  // A cluster candidate with a target global batch searches its divisors instead (Unit::divisors):
  // first the whole share in one step, then bisection over the divisors below it.
  enum class Phase { grow, bisect, first, divisors, extra, done } phase = Phase::grow;
  std::ptrdiff_t lo_index = -1;  // divisors: the largest index known to fit (-1: none)
  std::ptrdiff_t hi_index = 0;   // divisors: the smallest index known not to fit
  std::int64_t lo = 0;          // largest batch known to fit (0: none)
  std::int64_t hi = 0;          // smallest batch known not to fit (0: none yet)
  std::int64_t next_power = 1;  // growth: the next power of two to probe
  std::vector<std::int64_t> round;
  std::size_t outstanding = 0;
  std::map<std::int64_t, PlanPoint> points;
  std::map<std::int64_t, std::string> notes;  // by batch: the same whatever the completion order
};

// What the driver plans: a request as it is, or one candidate cluster size and ZeRO stage of a
// request's cluster search. `requests` below are these units.
struct Unit {
  std::size_t request = 0;          // the caller's request it belongs to
  std::int64_t ceiling = 0;         // the search's ceiling: max_batch
  bool compare = true;              // compare each strategy with the baseline (not for cluster candidates)
  // A cluster candidate with a target global batch G on N GPUs: the micro-batches that divide
  // the share G / N (ascending, up to max_batch and at most kMaxAccumulationSteps steps), each
  // simulated with share / micro-batch accumulation steps.
  std::int64_t share = 0;
  std::vector<std::int64_t> divisors;
};

// The most micro-steps a probe simulates, as training.gradient_accumulation_steps allows
// (sim/scenario.cpp): each is a whole forward and backward pass in the replay.
constexpr std::int64_t kMaxAccumulationSteps = 4096;

// The reference of the scaling efficiency: a strategy's micro-batch on one GPU alone, per request.
using ReferenceKey = std::tuple<std::size_t, std::string, std::int64_t, int>;  // request, strategy rules, batch, accumulation steps
struct Reference {
  std::optional<double> seconds;
  std::string note;  // why there is none
};

struct Driver {
  std::vector<PlanRequest> requests;   // the units' scenarios and options
  std::vector<Unit> units;
  const std::vector<PlanRequest>& callers;  // the caller's requests
  std::vector<std::unique_ptr<PreparedScenario>> prepared;  // per unit, prepared once
  std::vector<std::vector<models::StrategySpec>> strategies;  // per unit, identical ones removed
  std::vector<BatchSizePlan> plans;  // per unit
  std::vector<Search> searches;
  WorkerPool pool;
  Progress progress;
  std::map<std::size_t, std::pair<std::size_t, std::int64_t>> job_owner;  // job -> search, batch
  std::vector<bool> extra_done;
  std::vector<bool> references_submitted;  // per unit
  // Per caller's request: its scenario on one GPU with memory unbounded (made when needed).
  std::vector<std::unique_ptr<PreparedScenario>> one_gpu;
  std::map<ReferenceKey, Reference> references;
  std::map<std::size_t, ReferenceKey> reference_jobs;  // job -> key
  // An input error a worker met (a zoo model that cannot be built at some batch): reported once
  // every job has ended, the first by (plan, strategy, batch), so that it does not depend on
  // which worker finished first.
  std::optional<std::tuple<std::size_t, std::size_t, std::int64_t, std::string>> input_error;

  Driver(const std::vector<PlanRequest>& r, int jobs, bool show) : callers(r), pool(jobs), progress("plan", show) {}

  const PlanOptions& options(const Search& s) const { return requests[s.plan].options; }
  ProbeIo probe_io(const Search& s) const {
    const Scenario& scenario = requests[s.plan].scenario;
    return {scenario.data.has_value() || scenario.checkpoint.has_value(), options(s).memory_metric, limit(s)};
  }
  std::int64_t limit(const Search& s) const { return plans[s.plan].limit_bytes; }
  const models::StrategySpec& spec(const Search& s) const { return strategies[s.plan][s.strategy]; }
  int ranks(const Search& s) const { return plans[s.plan].cluster.ranks(); }

  // The next round's probes, or none when the search is finished.
  std::vector<std::int64_t> next_round(Search& s) const {
    const auto width = static_cast<std::int64_t>(std::max(1, options(s).probes_per_round));
    const std::int64_t ceiling = options(s).max_batch;
    const std::vector<std::int64_t>& divisors = units[s.plan].divisors;
    std::vector<std::int64_t> out;
    if (s.phase == Search::Phase::first) {
      out.push_back(divisors.back());
    } else if (s.phase == Search::Phase::divisors) {
      for (std::ptrdiff_t i = 1; i <= width; ++i) {
        const std::ptrdiff_t k = s.lo_index + (s.hi_index - s.lo_index) * i / (width + 1);
        if (k > s.lo_index && k < s.hi_index && (out.empty() || out.back() != divisors[static_cast<std::size_t>(k)])) out.push_back(divisors[static_cast<std::size_t>(k)]);
      }
    } else if (s.phase == Search::Phase::grow) {
      while (static_cast<std::int64_t>(out.size()) < width && s.next_power > 0) {
        if (s.next_power >= ceiling) {
          out.push_back(ceiling);
          s.next_power = 0;  // the ceiling is the last growth probe
        } else {
          out.push_back(s.next_power);
          s.next_power *= 2;
        }
      }
    } else if (s.phase == Search::Phase::bisect) {
      for (std::int64_t i = 1; i <= width; ++i) {
        const std::int64_t b = s.lo + (s.hi - s.lo) * i / (width + 1);
        if (b > s.lo && b < s.hi && (out.empty() || out.back() != b)) out.push_back(b);
      }
    }
    return out;
  }

  // Decides from a completed round: the first failing probe bounds the interval from above.
  void decide(Search& s) {
    if (s.phase == Search::Phase::extra) {
      s.phase = Search::Phase::done;  // comparison points only: the search itself was over
      return;
    }
    if (s.phase == Search::Phase::first || s.phase == Search::Phase::divisors) {
      const std::vector<std::int64_t>& divisors = units[s.plan].divisors;
      if (s.phase == Search::Phase::first) s.hi_index = static_cast<std::ptrdiff_t>(divisors.size());
      std::sort(s.round.begin(), s.round.end());
      for (std::int64_t b : s.round) {
        const auto k = std::lower_bound(divisors.begin(), divisors.end(), b) - divisors.begin();
        if (!s.points.at(b).fits) {
          s.hi_index = k;
          s.hi = b;
          break;
        }
        s.lo_index = k;
        s.lo = b;
      }
      s.phase = s.hi_index - s.lo_index <= 1 ? Search::Phase::done : Search::Phase::divisors;
      return;
    }
    std::sort(s.round.begin(), s.round.end());
    std::optional<std::int64_t> first_fail;
    for (std::int64_t b : s.round) {
      if (!s.points.at(b).fits) {
        first_fail = b;
        break;
      }
      s.lo = b;
    }
    if (first_fail) {
      s.hi = *first_fail;
      s.phase = (s.lo == 0 || s.hi - s.lo <= 1) ? Search::Phase::done : Search::Phase::bisect;
    } else if (s.phase == Search::Phase::grow && s.next_power == 0) {
      s.phase = Search::Phase::done;  // the ceiling fits
    } else if (s.phase == Search::Phase::bisect && s.hi - s.lo <= 1) {
      s.phase = Search::Phase::done;
    }
  }

  void submit_round(std::size_t index) {
    Search& s = searches[index];
    while (s.phase != Search::Phase::done) {
      if (s.phase != Search::Phase::extra) s.round = next_round(s);
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
        decide(s);
      }
    }
    on_search_done(s);
  }

  // When every search of a plan is done: the points the comparison with the baseline needs,
  // each strategy and the baseline at the smaller of their largest batches, where the search
  // did not simulate them.
  void on_search_done(const Search& done) {
    const std::size_t p = done.plan;
    if (!every_search_done(p)) return;
    if (!extra_done[p]) {
      extra_done[p] = true;
      if (units[p].compare) submit_comparison_points(p);
    }
    if (every_search_done(p)) submit_references(p);
  }

  bool every_search_done(std::size_t p) const {
    return std::all_of(searches.begin(), searches.end(), [&](const Search& s) { return s.plan != p || s.phase == Search::Phase::done; });
  }

  void submit_comparison_points(std::size_t p) {
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
  void submit_references(std::size_t p) {
    if (references_submitted[p]) return;
    references_submitted[p] = true;
    if (plans[p].cluster.ranks() == 1) return;  // one GPU: its own reference
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

  void record_reference(std::size_t job, const JobOutcome& outcome) {
    Reference& r = references.at(reference_jobs.at(job));
    PlanPoint point;
    if (outcome.status == JobOutcome::Status::result && outcome.text.size() >= sizeof point) {
      std::memcpy(&point, outcome.text.data(), sizeof point);
      if (point.iteration_seconds > 0 && !point.out_of_memory && !point.inapplicable) {
        r.seconds = point.iteration_seconds;
      } else {
        r.note = point.inapplicable ? "the strategy does not apply there" : "it did not run";
      }
    } else {
      r.note = outcome.text;
    }
  }

  // Accumulation steps simulated at `batch`: a cluster candidate's share / batch; 0 (the
  // scenario's own) otherwise.
  int simulated_steps(const Search& s, std::int64_t batch) const {
    return units[s.plan].divisors.empty() ? 0 : static_cast<int>(units[s.plan].share / batch);
  }

  // Micro-steps of `batch` per GPU and optimizer step: simulated (a cluster candidate's, or the
  // scenario's own), or estimated to reach a target global batch (each GPU's share of it).
  std::int64_t steps(const Search& s, std::int64_t batch) const {
    if (!units[s.plan].divisors.empty()) return simulated_steps(s, batch);
    const auto g = options(s).target_global_batch;
    if (!g) return requests[s.plan].scenario.accumulation_steps;
    const std::int64_t share = *g / ranks(s);  // a whole number: checked when the units were made
    return (share + batch - 1) / batch;
  }

  double rate(const Search& s, const PlanPoint& point) const {
    if (!point.fits || point.iteration_seconds <= 0) return 0;
    if (const auto g = options(s).target_global_batch; g && units[s.plan].divisors.empty()) {
      return static_cast<double>(*g) / (static_cast<double>(steps(s, point.batch)) * point.mean_iteration_seconds);
    }
    return point.samples_per_second;
  }

  std::optional<std::int64_t> best_of(const Search& s) const {
    std::optional<std::int64_t> best;
    double best_rate = 0;
    for (const auto& [b, point] : s.points) {  // ascending: ties keep the smaller batch
      // plan.objective: samples per joule (energy per sample is the same with any accumulation) or samples/s.
      const double r = options(s).objective == PlanObjective::samples_per_joule ? (point.fits ? point.samples_per_joule : 0) : rate(s, point);
      if (point.fits && point.within_energy_budget && (!best || r > best_rate)) {
        best = b;
        best_rate = r;
      }
    }
    return best;
  }

  void record(std::size_t job, JobOutcome outcome) {
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
    if (outcome.status == JobOutcome::Status::result && outcome.text.size() >= sizeof point) {
      std::memcpy(&point, outcome.text.data(), sizeof point);
      if (point.inapplicable) s.notes[batch] = fmt::format("batch {}: the strategy does not apply: {}", batch, outcome.text.substr(sizeof point));
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
    if (!point.out_of_memory && !point.inapplicable && !point.simulation_failed) point.peak_bytes = peak_in(options(s).memory_metric, point);
    point.fits = !point.out_of_memory && !point.inapplicable && !point.simulation_failed && point.peak_bytes <= limit(s);
    // Every GPU trains on `batch` samples in each of its micro-steps: the throughput is global.
    const int micro_steps = simulated_steps(s, batch) > 0 ? simulated_steps(s, batch) : requests[s.plan].scenario.accumulation_steps;
    const double samples = static_cast<double>(batch) * static_cast<double>(ranks(s)) * micro_steps;
    point.samples_per_second = point.fits && point.mean_iteration_seconds > 0 ? samples / point.mean_iteration_seconds : 0;
    point.samples_per_joule = point.fits && point.joules > 0 ? samples / point.joules : 0;
    point.within_energy_budget = within(options(s).energy_budget, point, samples);
    s.points[batch] = point;
    if (--s.outstanding == 0) {
      decide(s);
      submit_round(index);
    }
  }

  std::size_t estimate_total() const {
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

  StrategyPlan finish(const Search& s) const {
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
      } else if (ranks(s) > 1) {
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
};

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

std::string strategy_description(const StrategyPlan& s, const BatchSizePlan& plan) {
  if (!s.max_batch) {
    if (s.points.empty()) return "not simulated";
    const PlanPoint& one = s.points.front();
    if (one.inapplicable) return "the strategy does not apply at batch 1";
    if (one.simulation_failed) return "the simulation failed at batch 1 (see the warnings)";
    return fmt::format("does not fit at batch 1: needs {}{} of {} allowed", one.out_of_memory ? "more than " : "", format_bytes(one.peak_bytes),
                       format_bytes(plan.limit_bytes));
  }
  return {};
}

// One line under the table: which strategy trains the largest batch, which is fastest, and
// what the largest one costs against the baseline.
std::string verdict(const BatchSizePlan& plan) {
  const StrategyPlan* largest = nullptr;
  const StrategyPlan* fastest = nullptr;
  for (const StrategyPlan& s : plan.strategies) {
    if (!s.max_batch) continue;
    if (!largest || *s.max_batch > *largest->max_batch) largest = &s;
    if (s.best_batch && (!fastest || s.best_samples_per_second > fastest->best_samples_per_second)) fastest = &s;
  }
  if (!largest) return plan.cluster.ranks() > 1 ? "Verdict: no strategy fits at micro-batch 1 per GPU." : "Verdict: no strategy fits at batch 1 on this GPU.";
  if (!fastest) return "Verdict: batches fit, but no strategy runs one within the energy budget (plan.energy_budget): infeasible.";
  const char* rate = plan.cluster.ranks() > 1 ? "global samples/s" : "samples/s";
  std::string out = fmt::format("Verdict: {} runs the largest batch ({}{})", largest->strategy, largest->max_is_ceiling ? ">= " : "", *largest->max_batch);
  if (largest->vs_baseline) {
    const auto& c = *largest->vs_baseline;
    out += fmt::format(", saving {:.0f}% of peak memory at batch {} ({:.0f}% of max_memory_allocated, {:.0f}% of max_memory_reserved) for a {:.2f}x slowdown",
                       100 * c.peak_saved_fraction, c.batch, 100 * c.allocated_saved_fraction, 100 * c.reserved_saved_fraction, c.slowdown);
  }
  if (fastest == largest) return out + fmt::format("; it is also the fastest ({:.1f} {}).", fastest->best_samples_per_second, rate);
  return out + fmt::format("; {} is the fastest ({:.1f} {} at batch {}).", fastest->strategy, fastest->best_samples_per_second, rate, *fastest->best_batch);
}

}  // namespace

std::vector<models::StrategySpec> strategies_to_plan(const Scenario& scenario) {
  if (scenario.plan && !scenario.plan->strategies.empty()) return scenario.plan->strategies;
  std::vector<models::StrategySpec> out(3);
  out[0].name = "baseline";
  out[1].name = "offload";
  out[1].rules.push_back({{}, models::OffloadAction{}});
  out[2].name = "recompute";
  out[2].rules.push_back({{}, models::RecomputeAction{}});
  // The scenario's own strategy, unless it is one of these under another name.
  const std::string own = detail::strategy_rules_key(scenario.strategy);
  if (std::none_of(out.begin(), out.end(), [&](const auto& s) { return detail::strategy_rules_key(s) == own; })) out.push_back(scenario.strategy);
  return out;
}

PlanOptions plan_options_for(const Scenario& scenario, PlanOptions base) {
  if (!scenario.plan) return base;
  if (scenario.plan->margin) base.margin = *scenario.plan->margin;
  if (scenario.plan->max_batch) base.max_batch = *scenario.plan->max_batch;
  if (scenario.plan->target_global_batch) base.target_global_batch = scenario.plan->target_global_batch;
  if (scenario.plan->memory_metric) base.memory_metric = *scenario.plan->memory_metric;
  if (scenario.plan->objective) base.objective = *scenario.plan->objective;
  if (scenario.plan->energy_budget) base.energy_budget = scenario.plan->energy_budget;
  return base;
}

std::string_view to_string(PlanLimit limit) {
  switch (limit) {
    case PlanLimit::memory: return "memory";
    case PlanLimit::network: return "network";
    case PlanLimit::host: return "host";
    case PlanLimit::compute: return "compute";
    case PlanLimit::not_applicable: return "not_applicable";
    case PlanLimit::failed: return "failed";
    case PlanLimit::loader: return "loader";
    case PlanLimit::storage: return "storage";
    case PlanLimit::checkpoint: return "checkpoint";
    case PlanLimit::energy_budget: return "energy_budget";
  }
  return "?";
}

namespace {

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
  }
  return plan;
}

bool has_cluster_search(const Scenario& s) { return s.plan && s.plan->searches_clusters(); }

std::string data_parallel_name(int zero_stage, bool fsdp) { return sim::data_parallel_name(zero_stage, fsdp, NameStyle::short_form); }

std::string describe_shape(ClusterShape shape) {
  return fmt::format("{} GPU{} ({} node{} x {})", shape.ranks(), shape.ranks() == 1 ? "" : "s", shape.nodes, shape.nodes == 1 ? "" : "s", shape.gpus_per_node);
}

}  // namespace

std::vector<BatchSizePlan> make_plans(const std::vector<PlanRequest>& requests, int jobs, bool progress) {
  Driver d(requests, jobs, progress);
  d.one_gpu.resize(requests.size());
  std::vector<BatchSizePlan> out(requests.size());
  std::vector<std::vector<std::size_t>> units_of(requests.size());
  // Each request is one unit, or one unit per cluster size and ZeRO stage of its cluster search.
  for (std::size_t p = 0; p < requests.size(); ++p) {
    const PlanRequest& r = requests[p];
    check_options(r.options);
    if (r.strategies.empty()) throw InputError(r.scenario.source + ": no strategy to plan");
    const auto add_unit = [&](Scenario scenario, Unit unit) {
      unit.request = p;
      units_of[p].push_back(d.units.size());
      d.units.push_back(unit);
      d.requests.push_back({std::move(scenario), r.strategies, r.options, r.variant});
    };
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
      add_unit(r.scenario, {p, r.options.max_batch, true, 0, {}});
      continue;
    }
    // The header (and any error of the scenario itself, once) from the scenario as written.
    out[p] = plan_header(r, PreparedScenario(r.scenario), jobs, progress);
    ClusterSearch search;
    const bool fsdp = out[p].fsdp;
    std::vector<ClusterShape> shapes;
    for (const auto& size : r.scenario.plan->cluster_sizes) shapes.push_back({size.nodes, size.gpus_per_node});
    if (shapes.empty()) shapes.push_back(r.scenario.parallelism ? out[p].cluster : ClusterShape{1, require_platform(r.scenario).gpus_per_node});
    search.zero_stages = r.scenario.plan->zero_stages;
    if (search.zero_stages.empty()) search.zero_stages.push_back(r.scenario.parallelism ? r.scenario.parallelism->data.zero_stage : 0);
    search.offload_optimizer = r.scenario.plan->offload_optimizer;
    if (search.offload_optimizer.empty()) search.offload_optimizer.push_back(r.scenario.parallelism ? r.scenario.parallelism->data.offload_optimizer : std::nullopt);
    bool skipped_pairs = false;
    for (const ClusterShape shape : shapes) {
      if (target && *target % shape.ranks() != 0) {
        search.notes.push_back(fmt::format("{}: left out: the target global batch {} is not a multiple of {}", describe_shape(shape), *target, shape.ranks()));
        continue;
      }
      search.shapes.push_back(shape);
      // Only the pairs DeepSpeed has: an offloaded optimizer needs ZeRO, Deep Optimizer States
      // stage 3 (one note for the search, not one per pair).
      std::vector<std::pair<int, std::optional<models::OptimizerOffloadSpec>>> stages_and_offloads;
      for (const int stage : search.zero_stages) {
        for (const auto& offload : search.offload_optimizer) {
          if (offload && (stage == 0 || (stage != 3 && (offload->prefetch_optimizer || offload->ratio < 1)))) {
            skipped_pairs = true;
            continue;
          }
          stages_and_offloads.emplace_back(stage, offload);
        }
      }
      for (const auto& [stage, offload] : stages_and_offloads) {
        Scenario scenario = r.scenario;
        ParallelismSection parallelism = scenario.parallelism.value_or(ParallelismSection{});
        parallelism.nodes = shape.nodes;
        parallelism.gpus_per_node = shape.gpus_per_node;
        parallelism.data.ranks = shape.ranks();
        parallelism.data.zero_stage = stage;
        parallelism.data.offload_optimizer = offload;
        try {
          models::check_data_parallel(parallelism.data);  // the section's other settings may not suit this stage
        } catch (const std::invalid_argument& e) {
          search.notes.push_back(fmt::format("{}, {}, optimizer {}: left out: {}", describe_shape(shape), data_parallel_name(stage, fsdp), models::optimizer_place(offload), e.what()));
          continue;
        }
        scenario.parallelism = parallelism;
        Unit unit;
        unit.ceiling = r.options.max_batch;
        unit.compare = false;  // the candidates compare with each other instead
        if (target) {
          unit.share = *target / shape.ranks();
          for (std::int64_t b = 1; b * b <= unit.share; ++b) {
            if (unit.share % b != 0) continue;
            for (const std::int64_t divisor : {b, unit.share / b}) {
              if (divisor <= r.options.max_batch && unit.share / divisor <= kMaxAccumulationSteps) unit.divisors.push_back(divisor);
            }
          }
          std::sort(unit.divisors.begin(), unit.divisors.end());
          unit.divisors.erase(std::unique(unit.divisors.begin(), unit.divisors.end()), unit.divisors.end());
        }
        if (target && unit.divisors.empty()) {
          search.notes.push_back(fmt::format("{}, {}, optimizer {}: left out: no micro-batch up to {} divides its share {} in at most {} steps",
                                             describe_shape(shape), data_parallel_name(stage, fsdp), models::optimizer_place(offload), r.options.max_batch, unit.share,
                                             kMaxAccumulationSteps));
          continue;
        }
        add_unit(std::move(scenario), unit);
      }
    }
    if (skipped_pairs) {
      search.notes.push_back("optimizer offload is tried with the ZeRO stages that have it: cpu with stages 1-3, deep_optimizer_states with stage 3; "
                             "DDP (stage 0) keeps its optimizer on the GPU");
    }
    out[p].cluster_search = std::move(search);
  }

  d.extra_done.assign(d.units.size(), false);
  d.references_submitted.assign(d.units.size(), false);
  for (std::size_t u = 0; u < d.units.size(); ++u) {
    const PlanRequest& r = d.requests[u];
    // Prepared once here, before any worker is forked: a trace file is parsed once, and a
    // scenario or strategy that cannot run exits 2 once instead of failing every probe.
    d.prepared.push_back(std::make_unique<PreparedScenario>(r.scenario));
    BatchSizePlan plan = plan_header(r, *d.prepared.back(), jobs, progress);
    d.strategies.push_back(without_duplicates(r.strategies, plan.notes));
    for (const models::StrategySpec& spec : d.strategies.back()) {
      try {
        models::validate_strategy(spec);
      } catch (const InputError& e) {
        throw InputError(r.scenario.source + ": " + e.what());
      }
    }
    d.plans.push_back(std::move(plan));
    for (std::size_t s = 0; s < d.strategies.back().size(); ++s) {
      Search search;
      search.plan = u;
      search.strategy = s;
      search.phase = d.units[u].divisors.empty() ? Search::Phase::grow : Search::Phase::first;
      d.searches.push_back(std::move(search));
    }
  }
  for (std::size_t i = 0; i < d.searches.size(); ++i) d.submit_round(i);
  std::size_t done = 0;
  d.progress.update(0, d.estimate_total(), true);
  while (auto finished = d.pool.next()) {
    d.record(finished->id, std::move(finished->outcome));
    d.progress.update(++done, d.estimate_total(), true);
  }
  d.progress.finish(done);
  if (d.input_error) throw InputError(std::get<3>(*d.input_error));

  for (const Search& s : d.searches) d.plans[s.plan].strategies.push_back(d.finish(s));
  for (std::size_t u = 0; u < d.plans.size(); ++u) {
    if (d.units[u].compare) compare_with_baseline(d.plans[u], d.strategies[u]);
  }
  for (std::size_t p = 0; p < requests.size(); ++p) {
    if (!out[p].cluster_search) {
      out[p] = std::move(d.plans[units_of[p].front()]);
      continue;
    }
    ClusterSearch& search = *out[p].cluster_search;
    for (const std::size_t u : units_of[p]) {
      if (out[p].notes.empty()) out[p].notes = d.plans[u].notes;  // the same strategies in every unit
      for (StrategyPlan& plan : d.plans[u].strategies) {
        ClusterCandidate candidate;
        candidate.shape = d.plans[u].cluster;
        candidate.zero_stage = d.plans[u].zero_stage;
        candidate.offload_optimizer = d.plans[u].offload_optimizer;
        candidate.plan = std::move(plan);
        search.candidates.push_back(std::move(candidate));
      }
    }
    for (std::size_t i = 0; i < search.candidates.size(); ++i) {
      const StrategyPlan& c = search.candidates[i].plan;
      // plan.objective: the most samples per joule, else the fastest.
      const auto score = [&](const StrategyPlan& c_plan) {
        return requests[p].options.objective == PlanObjective::samples_per_joule ? c_plan.best_samples_per_joule : c_plan.best_samples_per_second;
      };
      if (c.best_batch && (!search.fastest || score(c) > score(search.candidates[*search.fastest].plan))) search.fastest = i;
    }
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

namespace {

std::string percent_or_dash(const std::optional<double>& fraction) { return fraction ? fmt::format("{:.1f}%", 100 * *fraction) : "-"; }

// The lines under the header for a plan with I/O (plan.hpp, "I/O").
std::string io_lines(const BatchSizePlan& plan) {
  if (!plan.io_modelled) return {};
  std::string out =
      "I/O        the data loader and checkpoints simulated at every fitting batch (sim/io.hpp): samples/s over the mean iteration (the\n"
      "           replay's + the wait for the batch + the checkpoint's cost per iteration); wait and ckpt as shares of it; bound: what sets the\n"
      "           pace (gpu, network, host, loader, storage)\n";
  if (plan.checkpoint_overhead) {
    out += fmt::format("Checkpoint every: the smallest interval whose cost is within plan.checkpoint_overhead ({:.2f}% of the iteration) at the best batch\n",
                       100 * *plan.checkpoint_overhead);
  }
  return out;
}

bool shows_energy(const PlanOptions& o) { return o.energy_budget.has_value() || o.objective == PlanObjective::samples_per_joule; }

std::string describe_budget(const EnergyBudget& b) {
  std::string out;
  const auto add = [&](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
  if (b.joules_per_sample) add(fmt::format("<= {} per sample", detail::format_joules(*b.joules_per_sample)));
  if (b.gpu_average_watts) add(fmt::format("<= {} average per GPU", detail::format_watts(*b.gpu_average_watts)));
  if (b.node_average_watts) add(fmt::format("<= {} average per node", detail::format_watts(*b.node_average_watts)));
  return out;
}

// The lines under the header for plan.objective and plan.energy_budget.
std::string energy_lines(const PlanOptions& o) {
  std::string out;
  if (o.objective == PlanObjective::samples_per_joule) out += "Objective  samples per joule: the best batch trains the most samples per joule of the whole job\n";
  if (o.energy_budget) {
    out += fmt::format("Energy     budget {} (plan.energy_budget, over the mean iteration): the best batch is chosen among those within it;\n"
                       "           none within it is a result (limit energy_budget), not an error\n",
                       describe_budget(*o.energy_budget));
  }
  return out;
}

// The I/O columns: the mean iteration (unless the table has it already: `with_mean` false), the
// wait for the batch and the checkpoint's cost as shares of it, the bound, and the interval for
// plan.checkpoint_overhead.
std::string io_header_cells(const BatchSizePlan& plan, bool with_mean) {
  std::string out = with_mean ? fmt::format("{:>10}  ", "mean iter.") : std::string();
  out += fmt::format("{:>6}  {:>6}  {:<7}  ", "wait", "ckpt", "bound");
  if (plan.checkpoint_overhead) out += fmt::format("{:>5}  ", "every");
  return out;
}

std::string io_cells(const PlanPoint& p, const BatchSizePlan& plan, bool with_mean) {
  const auto share = [&](double seconds) { return fmt::format("{:.1f}%", p.mean_iteration_seconds > 0 ? 100 * seconds / p.mean_iteration_seconds : 0.0); };
  std::string out = with_mean ? fmt::format("{:>10}  ", format_seconds(p.mean_iteration_seconds)) : std::string();
  out += fmt::format("{:>6}  {:>6}  {:<7}  ", share(p.data_wait_seconds), share(p.checkpoint_seconds_per_iteration),
                     p.io_modelled ? std::string(to_string(p.io_bound)) : "-");
  if (plan.checkpoint_overhead) out += fmt::format("{:>5}  ", p.checkpoint_interval_for_target > 0 ? std::to_string(p.checkpoint_interval_for_target) : "-");
  return out;
}

std::string energy_header_cells() { return fmt::format("{:>10}  {:>10}  {:>10}  ", "J/sample", "GPU avg", "node avg"); }

std::string energy_cells(const PlanPoint& p) {
  return fmt::format("{:>10}  {:>10}  {:>10}  ", p.samples_per_joule > 0 ? detail::format_joules(1 / p.samples_per_joule) : "-",
                     detail::format_watts(p.gpu_average_watts), detail::format_watts(p.node_average_watts));
}

// For a strategy whose fitting batches are all over the energy budget: the least each bounded
// quantity reaches among them, against its bound.
std::string closest_to_budget(const StrategyPlan& s, const PlanOptions& o) {
  if (!o.energy_budget) return "-";
  double joules = 0, gpu = 0, node = 0;
  bool any = false;
  for (const PlanPoint& p : s.points) {
    if (!p.fits || !(p.samples_per_joule > 0)) continue;
    const double j = 1 / p.samples_per_joule;
    joules = any ? std::min(joules, j) : j;
    gpu = any ? std::min(gpu, p.gpu_average_watts) : p.gpu_average_watts;
    node = any ? std::min(node, p.node_average_watts) : p.node_average_watts;
    any = true;
  }
  if (!any) return "no fitting batch has an energy";
  const EnergyBudget& b = *o.energy_budget;
  std::string out = "the fitting batches reach at best";
  if (b.joules_per_sample) out += fmt::format(" {} per sample (budget {})", detail::format_joules(joules), detail::format_joules(*b.joules_per_sample));
  if (b.gpu_average_watts) out += fmt::format(" {} per GPU (budget {})", detail::format_watts(gpu), detail::format_watts(*b.gpu_average_watts));
  if (b.node_average_watts) out += fmt::format(" {} per node (budget {})", detail::format_watts(node), detail::format_watts(*b.node_average_watts));
  return out;
}

// Which simulated batches the loader or the storage bounds, per strategy (or configuration), so
// that a reader sees where adding workers or bandwidth would pay.
std::string io_bound_lines(const std::vector<std::pair<std::string, const StrategyPlan*>>& plans) {
  std::string out;
  for (const auto& [name, s] : plans) {
    for (const IterationBound bound : {IterationBound::loader, IterationBound::storage}) {
      std::string batches;
      double most_wait = 0;
      for (const PlanPoint& p : s->points) {
        if (!p.io_modelled || p.io_bound != bound) continue;
        batches += (batches.empty() ? "" : ", ") + std::to_string(p.batch);
        most_wait = std::max(most_wait, p.data_wait_seconds);
      }
      if (!batches.empty()) {
        out += fmt::format("{}-bound: {} at batch{} {} (waiting up to {} per iteration for the batch)\n", to_string(bound), name,
                           batches.find(',') == std::string::npos ? "" : "es", batches, format_seconds(most_wait));
      }
    }
  }
  return out.empty() ? out : "\n" + out;
}

// The lines under the header that say what the batches and samples/s of a cluster plan mean.
std::string cluster_lines(const BatchSizePlan& plan) {
  const int gpus = plan.cluster.ranks();
  std::string out = fmt::format("GPUs       {}, {}, optimizer on {}: batches are per-GPU micro-batches; samples/s are global (micro-batch x {} / {}iteration time)\n",
                                describe_shape(plan.cluster), data_parallel_name(plan.zero_stage, plan.fsdp), models::optimizer_place(plan.offload_optimizer), gpus,
                                plan.io_modelled ? "mean " : "");
  out += "Scaling    efficiency: the same strategy and micro-batch on one GPU alone (its memory unbounded) over the iteration time here\n";
  return out;
}

std::string limit_lines(const PlanOptions& o, bool io) {
  std::string out = fmt::format(
      "Limits     at the best batch: network where the exposed collectives (compute stream idle) take >= {0:g}% of the iteration, host where\n"
      "           the compute stream's wait for launches does (the larger of the two), else compute; memory where no micro-batch fits\n",
      100 * o.bottleneck_share);
  if (io) {
    out += fmt::format("           with I/O, first loader or storage where the iteration waits for its batch, and checkpoint where the checkpoint's\n"
                       "           cost per iteration takes >= {:g}% of the mean iteration (and more than the collectives or the host)\n",
                       100 * o.bottleneck_share);
  }
  if (o.energy_budget) out += "           energy_budget where micro-batches fit but none is within plan.energy_budget\n";
  return out;
}

std::string cluster_search_text(const BatchSizePlan& plan) {
  const ClusterSearch& search = *plan.cluster_search;
  const auto& o = plan.options;
  std::string sizes, stages;
  for (const ClusterShape shape : search.shapes) sizes += (sizes.empty() ? "" : ", ") + std::to_string(shape.ranks());
  for (const int stage : search.zero_stages) stages += (stages.empty() ? "" : ", ") + data_parallel_name(stage, plan.fsdp);
  std::string places;
  for (const auto& offload : search.offload_optimizer) places += (places.empty() ? "" : ", ") + models::optimizer_place(offload);
  const std::size_t strategies = search.candidates.empty() ? 0 : static_cast<std::size_t>(std::count_if(search.candidates.begin(), search.candidates.end(), [&](const ClusterCandidate& c) {
    const ClusterCandidate& first = search.candidates.front();
    return c.shape.ranks() == first.shape.ranks() && c.zero_stage == first.zero_stage && c.offload_optimizer == first.offload_optimizer;
  }));
  std::string out = fmt::format("Cluster    search over {} GPUs x {} x optimizer on {} x {} strateg{}: {} configuration{}; batches are per-GPU micro-batches, samples/s global\n",
                                sizes.empty() ? "no" : sizes, stages, places, strategies, strategies == 1 ? "y" : "ies", search.candidates.size(),
                                search.candidates.size() == 1 ? "" : "s");
  if (o.target_global_batch) {
    out += fmt::format(
        "Target     global batch {0} = micro-batch x steps x GPUs exactly: each configuration runs {0} / GPUs per GPU in one step where that\n"
        "           fits, else the largest micro-batch dividing it that fits, with gradient accumulation simulated (DDP's no_sync micro-steps)\n",
        *o.target_global_batch);
  } else {
    out += "Target     none: each configuration runs its fastest micro-batch, so global batches differ (plan.target_global_batch fixes one)\n";
  }
  out += "Scaling    efficiency: the same strategy and micro-batch on one GPU alone (its memory unbounded) over the iteration time here\n";
  out += limit_lines(o, plan.io_modelled);
  std::size_t width = 8;
  for (const auto& c : search.candidates) width = std::max(width, c.plan.strategy.size());
  // With I/O the iteration column is the mean iteration (the replay's + the waits), and the wait,
  // checkpoint and bound columns follow; with an energy budget or objective, the energy columns.
  const std::string io_head = plan.io_modelled ? "  " + io_header_cells(plan, false) : "";
  const std::string energy_head = shows_energy(o) ? (plan.io_modelled ? "" : "  ") + energy_header_cells() : "";
  std::string head = fmt::format("{:>5}  {:>7}  {:<6}  {:<9}  {:<{}}  {:>11}  {:>5}  {:>10}  {:>16}  {:>10}  {:>7}  {:>8}  {:>9}  {:>11}  {:<7}", "GPUs", "nodes",
                                 "DP", "optimizer", "strategy", width, "micro-batch", "steps", plan.io_modelled ? "mean iter." : "iteration",
                                 "global samples/s", "per sample", "scaling", "exposed", "host wait", "peak/GPU", "limit");
  head += io_head + energy_head;
  while (!head.empty() && head.back() == ' ') head.pop_back();
  out += "\n" + head + "\n";
  for (const auto& c : search.candidates) {
    const StrategyPlan& s = c.plan;
    std::string row = fmt::format("{:>5}  {:>7}  {:<6}  {:<9}  {:<{}}  ", c.shape.ranks(), fmt::format("{}x{}", c.shape.nodes, c.shape.gpus_per_node),
                                  data_parallel_name(c.zero_stage, plan.fsdp), models::optimizer_place(c.offload_optimizer), s.strategy, width);
    if (!s.best_batch) {
      row += fmt::format("{:>11}  {:>5}  {:>10}  {:>16}  {:>10}  {:>7}  {:>8}  {:>9}  {:>11}  {}", "-", "-", "-", "-", "-", "-", "-", "-",
                         s.points.empty() ? "-" : format_bytes(s.points.front().peak_bytes), to_string(s.limit));
      if (s.limit == PlanLimit::energy_budget) row += ": " + closest_to_budget(s, o);
      out += row + "\n";
      continue;
    }
    const PlanPoint& p = *point_at(s, *s.best_batch);
    row += fmt::format("{:>11}  {:>5}  {:>10}  {:>16.1f}  {:>10}  {:>7}  {:>8}  {:>9}  {:>11}  {:<7}", *s.best_batch,
                       (c.accumulation_estimated() ? "~" : "") + std::to_string(s.accumulation_steps), format_seconds(p.mean_iteration_seconds),
                       s.best_samples_per_second, format_seconds(1 / s.best_samples_per_second), percent_or_dash(s.scaling_efficiency),
                       fmt::format("{:.1f}%", 100 * p.exposed_communication_seconds / p.iteration_seconds),
                       fmt::format("{:.1f}%", 100 * p.host_wait_seconds / p.iteration_seconds), format_bytes(p.peak_bytes), to_string(s.limit));
    if (plan.io_modelled) row += "  " + io_cells(p, plan, false);
    if (shows_energy(o)) row += (plan.io_modelled ? "" : "  ") + energy_cells(p);
    while (!row.empty() && row.back() == ' ') row.pop_back();
    out += row + "\n";
  }
  if (plan.io_modelled) {
    std::vector<std::pair<std::string, const StrategyPlan*>> named;
    for (const auto& c : search.candidates) {
      named.emplace_back(fmt::format("{}, {}, optimizer on {}, {}", describe_shape(c.shape), data_parallel_name(c.zero_stage, plan.fsdp),
                                     models::optimizer_place(c.offload_optimizer), c.plan.strategy),
                         &c.plan);
    }
    out += io_bound_lines(named);
  }
  out += "\n";
  if (search.fastest) {
    const ClusterCandidate& c = search.candidates[*search.fastest];
    const StrategyPlan& s = c.plan;
    out += fmt::format("Fastest: {}, {}, optimizer on {}, {}: micro-batch {} x {} step{}{} per GPU, {} per sample ({:.1f} samples/s), scaling efficiency {}, limited by {}.\n",
                       describe_shape(c.shape), data_parallel_name(c.zero_stage, plan.fsdp), models::optimizer_place(c.offload_optimizer), s.strategy, *s.best_batch, s.accumulation_steps,
                       s.accumulation_steps == 1 ? "" : "s", c.accumulation_estimated() ? " (estimated)" : "", format_seconds(1 / s.best_samples_per_second),
                       s.best_samples_per_second, percent_or_dash(s.scaling_efficiency), to_string(s.limit));
  } else if (std::any_of(search.candidates.begin(), search.candidates.end(), [](const ClusterCandidate& c) { return c.plan.limit == PlanLimit::energy_budget; })) {
    out += "Fastest: none: configurations fit, but none within the energy budget (plan.energy_budget): infeasible.\n";
  } else {
    out += "Fastest: none: no configuration fits.\n";
  }
  for (const auto& note : search.notes) out += "note: " + note + "\n";
  for (const auto& note : plan.notes) out += "note: " + note + "\n";
  for (const auto& c : search.candidates) {
    for (const auto& w : c.plan.warnings) {
      out += fmt::format("warning: {}, {}, optimizer on {}, {}: {}\n", describe_shape(c.shape), data_parallel_name(c.zero_stage, plan.fsdp),
                         models::optimizer_place(c.offload_optimizer), c.plan.strategy, w);
    }
  }
  return out;
}

}  // namespace

std::string plan_table_text(const BatchSizePlan& plan) {
  const auto& o = plan.options;
  std::string out = fmt::format("Plan       {}{}\n", plan.scenario_name, plan.variant.empty() ? "" : "   (variant: " + plan.variant + ")");
  out += fmt::format("Platform   {}: {} {}; limit {} (margin {:g}%)\n", plan.platform_name, format_bytes(plan.capacity_bytes),
                     o.memory_metric == MemoryMetric::device
                         ? "of visible GPU memory"
                         : fmt::format("PyTorch can use (visible memory less a {} CUDA context)", format_bytes(plan.cuda_context_bytes)),
                     format_bytes(plan.limit_bytes), o.margin * 100);
  const char* metric = "";
  switch (o.memory_metric) {
    case MemoryMetric::reserved:
      metric = "reserved: PyTorch's caching allocator (model) must hold the peak's segments within the limit (max_memory_reserved)";
      break;
    case MemoryMetric::allocated: metric = "allocated: the allocator model's rounded blocks (max_memory_allocated) within the limit"; break;
    case MemoryMetric::exact: metric = "exact: the live tensors' bytes within the limit (no allocator rounding or caching)"; break;
    case MemoryMetric::device: metric = "device: reserved + CUDA context (what nvidia-smi shows) within the limit"; break;
  }
  out += fmt::format("Memory     {}; out-of-memory as PyTorch decides it, on reserved segments\n", metric);
  if (plan.cluster_search && o.target_global_batch) {
    out += fmt::format("Search     micro-batches up to {} dividing each configuration's share: the share first, then bisection ({} simulations per\n"
                       "           round); peak memory assumed monotone in the micro-batch\n",
                       o.max_batch, o.probes_per_round);
  } else {
    out += fmt::format("Search     batch 1 to {}, exponential growth then bisection ({} simulations per round); peak memory assumed monotone in the batch\n",
                       o.max_batch, o.probes_per_round);
  }
  out += io_lines(plan) + energy_lines(o);
  if (plan.cluster_search) return out + cluster_search_text(plan);
  const bool cluster = plan.cluster.ranks() > 1;
  if (cluster) out += cluster_lines(plan) + limit_lines(o, plan.io_modelled);
  if (o.target_global_batch && cluster) {
    out += fmt::format("Target     global batch {0} by gradient accumulation: {0} / {1} GPUs = {2} samples per GPU in ceil({2} / micro-batch) steps;\n"
                       "           samples/s = {0} / (steps x iteration time), an estimate: accumulation is not simulated (the optimizer step and the\n"
                       "           gradient reduction are counted on every micro-batch, so the figures are pessimistic)\n",
                       *o.target_global_batch, plan.cluster.ranks(), *o.target_global_batch / plan.cluster.ranks());
  } else if (o.target_global_batch) {
    out += fmt::format("Target     global batch {} by gradient accumulation: samples/s = {} / (steps x iteration time); the optimizer step is counted\n"
                       "           on every micro-batch (our trace holds one), so the figures are slightly pessimistic\n",
                       *o.target_global_batch, *o.target_global_batch);
  }
  std::size_t width = 8;
  for (const auto& s : plan.strategies) width = std::max(width, s.strategy.size());
  const bool g = o.target_global_batch.has_value();
  if (cluster) {
    out += "\n" + fmt::format("{:<{}}  {:>13}  {:>14}  {:>16}  {:>12}  ", "strategy", width, "max batch/GPU", "best batch/GPU", "global samples/s", "peak at best");
  } else {
    out += "\n" + fmt::format("{:<{}}  {:>10}  {:>10}  {:>11}  {:>12}  ", "strategy", width, "max batch", "best batch", "samples/s", "peak at best");
  }
  if (g) out += fmt::format("{:>11}  ", "accum steps");
  if (cluster) out += fmt::format("{:>7}  {:>8}  {:>9}  {:<7}  ", "scaling", "exposed", "host wait", "limit");
  if (plan.io_modelled) out += io_header_cells(plan, true);
  if (shows_energy(o)) out += energy_header_cells();
  out += fmt::format("{:>24}  {:>9}  {:>4}\n", "vs baseline: batch, peak", "slowdown", "sims");
  bool compared = false;
  for (const auto& s : plan.strategies) {
    if (!s.max_batch) {
      out += fmt::format("{:<{}}  {}  ({} simulations)\n", s.strategy, width, strategy_description(s, plan), s.points.size());
      continue;
    }
    const std::string max = s.max_is_ceiling ? fmt::format(">= {}", *s.max_batch) : std::to_string(*s.max_batch);
    if (!s.best_batch) {
      // Batches fit, but none within plan.energy_budget: a result, with what the fitting points draw.
      out += fmt::format("{:<{}}  {:>{}}  none within the energy budget: {}  ({} simulations)\n", s.strategy, width, max, cluster ? 13 : 10,
                         closest_to_budget(s, o), s.points.size());
      continue;
    }
    if (cluster) {
      out += fmt::format("{:<{}}  {:>13}  {:>14}  {:>16.1f}  {:>12}  ", s.strategy, width, max, *s.best_batch, s.best_samples_per_second,
                         format_bytes(s.best_peak_bytes));
    } else {
      out += fmt::format("{:<{}}  {:>10}  {:>10}  {:>11.1f}  {:>12}  ", s.strategy, width, max, *s.best_batch, s.best_samples_per_second,
                         format_bytes(s.best_peak_bytes));
    }
    if (g) out += fmt::format("{:>11}  ", s.accumulation_steps);
    const PlanPoint& p = *point_at(s, *s.best_batch);
    if (cluster) {
      out += fmt::format("{:>7}  {:>8}  {:>9}  {:<7}  ", percent_or_dash(s.scaling_efficiency),
                         fmt::format("{:.1f}%", 100 * p.exposed_communication_seconds / p.iteration_seconds),
                         fmt::format("{:.1f}%", 100 * p.host_wait_seconds / p.iteration_seconds), to_string(s.limit));
    }
    if (plan.io_modelled) out += io_cells(p, plan, true);
    if (shows_energy(o)) out += energy_cells(p);
    std::string at = "-", slowdown = "-";
    if (s.vs_baseline) {
      compared = true;
      at = fmt::format("{}, {:+.0f}%", s.vs_baseline->batch, -100 * s.vs_baseline->peak_saved_fraction);
      slowdown = fmt::format("{:.2f}x", s.vs_baseline->slowdown);
    }
    out += fmt::format("{:>24}  {:>9}  {:>4}\n", at, slowdown, s.points.size());
  }
  if (compared) {
    out += "\nvs baseline: at the largest batch both run, the change in peak memory and the iteration time over the baseline's.\n";
    for (const auto& s : plan.strategies) {
      if (s.vs_baseline && s.vs_baseline->best_throughput_ratio > 0) {
        out += fmt::format("best vs best: {} {:.2f}x the baseline's samples/s\n", s.strategy, s.vs_baseline->best_throughput_ratio);
      }
    }
  }
  if (plan.io_modelled) {
    std::vector<std::pair<std::string, const StrategyPlan*>> named;
    for (const StrategyPlan& s : plan.strategies) named.emplace_back(s.strategy, &s);
    out += io_bound_lines(named);
  }
  out += "\n" + verdict(plan) + "\n";
  for (const auto& note : plan.notes) out += "note: " + note + "\n";
  for (const auto& s : plan.strategies) {
    if (s.max_is_ceiling) out += fmt::format("{}: fits up to the search ceiling {} (--max-batch to search further).\n", s.strategy, *s.max_batch);
    for (const auto& w : s.warnings) out += fmt::format("warning: {}: {}\n", s.strategy, w);
  }
  return out;
}

namespace {

ordered_json opt(const std::optional<double>& v) { return v ? ordered_json(*v) : ordered_json(nullptr); }
ordered_json opt(const std::optional<std::int64_t>& v) { return v ? ordered_json(*v) : ordered_json(nullptr); }

ordered_json points_json(const std::vector<PlanPoint>& points) {
  ordered_json out = ordered_json::array();
  for (const auto& p : points) {
    out.push_back({{"batch", p.batch},
                   {"fits", p.fits},
                   {"out_of_memory", p.out_of_memory},
                   {"inapplicable", p.inapplicable},
                   {"simulation_failed", p.simulation_failed},
                   {"peak_bytes", p.peak_bytes},
                   {"iteration_seconds", p.iteration_seconds},
                   {"samples_per_second", p.samples_per_second},
                   {"stall_seconds", p.stall_seconds},
                   {"collective_seconds", p.collective_seconds},
                   {"exposed_communication_seconds", p.exposed_communication_seconds},
                   {"host_wait_seconds", p.host_wait_seconds},
                   {"exact_peak_bytes", p.exact_peak_bytes},
                   {"allocated_peak_bytes", p.allocated_peak_bytes},
                   {"reserved_peak_bytes", p.reserved_peak_bytes},
                   {"device_peak_bytes", p.device_peak_bytes},
                   {"mean_iteration_seconds", p.mean_iteration_seconds},
                   {"io", p.io_modelled ? ordered_json{{"bound", to_string(p.io_bound)},
                                                       {"data_wait_seconds", p.data_wait_seconds},
                                                       {"checkpoint_seconds_per_iteration", p.checkpoint_seconds_per_iteration},
                                                       {"checkpoint_stall_seconds", p.checkpoint_stall_seconds},
                                                       {"checkpoint_interval_for_target", p.checkpoint_interval_for_target > 0
                                                                                              ? ordered_json(p.checkpoint_interval_for_target)
                                                                                              : ordered_json(nullptr)}}
                                        : ordered_json(nullptr)},
                   {"joules", p.joules > 0 ? ordered_json(p.joules) : ordered_json(nullptr)},
                   {"samples_per_joule", p.samples_per_joule > 0 ? ordered_json(p.samples_per_joule) : ordered_json(nullptr)},
                   {"gpu_average_watts", p.joules > 0 ? ordered_json(p.gpu_average_watts) : ordered_json(nullptr)},
                   {"node_average_watts", p.joules > 0 ? ordered_json(p.node_average_watts) : ordered_json(nullptr)},
                   {"within_energy_budget", p.within_energy_budget}});
  }
  return out;
}

// plan.energy_budget: null, or its bounds (null where not given).
ordered_json budget_json(const std::optional<EnergyBudget>& budget) {
  if (!budget) return nullptr;
  const auto bound = [](const std::optional<double>& v) { return v ? ordered_json(*v) : ordered_json(nullptr); };
  return {{"joules_per_sample", bound(budget->joules_per_sample)},
          {"gpu_average_watts", bound(budget->gpu_average_watts)},
          {"node_average_watts", bound(budget->node_average_watts)}};
}

// null (the GPU) or {"device": "cpu", "ratio", "prefetch_optimizer_gap" (null without Deep
// Optimizer States), "part_grads_async"}
ordered_json offload_json(const std::optional<models::OptimizerOffloadSpec>& offload) {
  if (!offload) return nullptr;
  return {{"device", "cpu"},
          {"ratio", offload->ratio},
          {"prefetch_optimizer_gap", offload->prefetch_optimizer ? ordered_json(offload->prefetch_optimizer_gap) : ordered_json(nullptr)},
          {"part_grads_async", offload->part_grads_async}};
}

ordered_json shape_json(ClusterShape shape, int zero_stage, bool fsdp, const std::optional<models::OptimizerOffloadSpec>& offload) {
  return {{"gpus", shape.ranks()},
          {"nodes", shape.nodes},
          {"gpus_per_node", shape.gpus_per_node},
          {"zero_stage", zero_stage},
          {"data_parallel", zero_stage == 0 ? "ddp" : fsdp ? "fsdp2" : fmt::format("zero-{}", zero_stage)},
          {"offload_optimizer", offload_json(offload)}};
}

ordered_json plan_to_json(const BatchSizePlan& plan) {
  ordered_json j = detail::document_header("plan");
  j["scenario"] = detail::scenario_json(plan.scenario_name, plan.scenario_source);
  j["variant"] = plan.variant.empty() ? ordered_json(nullptr) : ordered_json(plan.variant);
  j["platform"] = {{"name", plan.platform_name}, {"source", plan.platform_source}, {"gpu", plan.gpu_name}, {"memory_capacity_bytes", plan.capacity_bytes},
                   {"cuda_context_bytes", plan.cuda_context_bytes}};
  j["limit_bytes"] = plan.limit_bytes;
  // jobs and progress are left out: they do not change the plan, and documents must not differ by them.
  j["options"] = {{"margin", plan.options.margin},
                  {"memory_metric", to_string(plan.options.memory_metric)},
                  {"max_batch", plan.options.max_batch},
                  {"target_global_batch", opt(plan.options.target_global_batch)},
                  {"probes_per_round", plan.options.probes_per_round},
                  {"bottleneck_share", plan.options.bottleneck_share},
                  {"objective", plan.options.objective == PlanObjective::samples_per_joule ? "samples_per_joule" : "samples_per_second"},
                  {"energy_budget", budget_json(plan.options.energy_budget)},
                  {"checkpoint_overhead", opt(plan.checkpoint_overhead)}};
  j["io_modelled"] = plan.io_modelled;
  // The GPUs the batches are per (batches are per-GPU micro-batches and samples/s global); null
  // on one GPU and for a cluster search, whose candidates carry their own.
  j["cluster"] = (plan.cluster.ranks() > 1 || plan.offload_optimizer) && !plan.cluster_search ? shape_json(plan.cluster, plan.zero_stage, plan.fsdp, plan.offload_optimizer)
                                                                                               : ordered_json(nullptr);
  ordered_json strategies = ordered_json::array();
  for (const auto& s : plan.strategies) {
    ordered_json js;
    js["strategy"] = detail::strategy_json(s.spec);
    js["fits_at_batch_1"] = s.max_batch.has_value();
    js["max_batch"] = opt(s.max_batch);
    js["max_is_ceiling"] = s.max_is_ceiling;
    js["best_batch"] = opt(s.best_batch);
    js["best_samples_per_second"] = s.best_samples_per_second;
    js["best_samples_per_joule"] = s.best_samples_per_joule > 0 ? ordered_json(s.best_samples_per_joule) : ordered_json(nullptr);
    js["best_peak_bytes"] = s.best_peak_bytes;
    js["accumulation_steps"] = s.accumulation_steps;
    js["one_gpu_iteration_seconds"] = opt(s.one_gpu_iteration_seconds);
    js["scaling_efficiency"] = opt(s.scaling_efficiency);
    js["limit"] = to_string(s.limit);
    if (s.vs_baseline) {
      js["vs_baseline"] = {{"batch", s.vs_baseline->batch},
                           {"peak_saved_fraction", s.vs_baseline->peak_saved_fraction},
                           {"allocated_saved_fraction", s.vs_baseline->allocated_saved_fraction},
                           {"reserved_saved_fraction", s.vs_baseline->reserved_saved_fraction},
                           {"slowdown", s.vs_baseline->slowdown},
                           {"best_throughput_ratio", s.vs_baseline->best_throughput_ratio}};
    } else {
      js["vs_baseline"] = nullptr;
    }
    js["warnings"] = s.warnings;
    js["points"] = points_json(s.points);
    strategies.push_back(std::move(js));
  }
  j["strategies"] = std::move(strategies);
  if (plan.cluster_search) {
    const ClusterSearch& search = *plan.cluster_search;
    ordered_json shapes = ordered_json::array();
    for (const ClusterShape shape : search.shapes) shapes.push_back({{"gpus", shape.ranks()}, {"nodes", shape.nodes}, {"gpus_per_node", shape.gpus_per_node}});
    ordered_json candidates = ordered_json::array();
    for (const ClusterCandidate& c : search.candidates) {
      const StrategyPlan& s = c.plan;
      ordered_json jc = shape_json(c.shape, c.zero_stage, plan.fsdp, c.offload_optimizer);
      jc["strategy"] = detail::strategy_json(s.spec);
      jc["fits"] = c.fits();
      jc["max_micro_batch"] = opt(s.max_batch);
      jc["max_is_ceiling"] = s.max_is_ceiling;
      jc["micro_batch"] = opt(s.best_batch);
      jc["accumulation_steps"] = s.accumulation_steps;
      jc["accumulation_estimated"] = c.accumulation_estimated();
      const PlanPoint* best = s.best_batch ? point_at(s, *s.best_batch) : nullptr;
      jc["iteration_seconds"] = best ? ordered_json(best->iteration_seconds) : ordered_json(nullptr);
      jc["mean_iteration_seconds"] = best ? ordered_json(best->mean_iteration_seconds) : ordered_json(nullptr);
      jc["samples_per_joule"] = s.best_samples_per_joule > 0 ? ordered_json(s.best_samples_per_joule) : ordered_json(nullptr);
      jc["samples_per_second"] = s.best_samples_per_second;
      jc["seconds_per_sample"] = s.best_samples_per_second > 0 ? ordered_json(1 / s.best_samples_per_second) : ordered_json(nullptr);
      jc["one_gpu_iteration_seconds"] = opt(s.one_gpu_iteration_seconds);
      jc["scaling_efficiency"] = opt(s.scaling_efficiency);
      jc["exposed_communication_seconds"] = best ? ordered_json(best->exposed_communication_seconds) : ordered_json(nullptr);
      jc["host_wait_seconds"] = best ? ordered_json(best->host_wait_seconds) : ordered_json(nullptr);
      jc["peak_bytes"] = best ? ordered_json(best->peak_bytes) : ordered_json(nullptr);
      jc["limit"] = to_string(s.limit);
      jc["warnings"] = s.warnings;
      jc["points"] = points_json(s.points);
      candidates.push_back(std::move(jc));
    }
    ordered_json offloads = ordered_json::array();
    for (const auto& offload : search.offload_optimizer) offloads.push_back(offload_json(offload));
    j["cluster_search"] = {{"shapes", std::move(shapes)},
                           {"zero_stages", search.zero_stages},
                           {"offload_optimizer", std::move(offloads)},
                           {"candidates", std::move(candidates)},
                           {"fastest", search.fastest ? ordered_json(*search.fastest) : ordered_json(nullptr)},
                           {"notes", search.notes}};
  } else {
    j["cluster_search"] = nullptr;
  }
  j["notes"] = plan.notes;
  return j;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

}  // namespace

std::string plan_json(const BatchSizePlan& plan) { return plan_to_json(plan).dump(2) + "\n"; }

std::string plan_csv(const std::vector<BatchSizePlan>& plans) {
  // samples_per_second is global (batch x gpus / iteration); the cluster columns come last so
  // that readers of the one-GPU columns keep their positions.
  std::string out =
      "variant,scenario,platform,strategy,batch,fits,out_of_memory,inapplicable,simulation_failed,peak_bytes,iteration_seconds,samples_per_second,stall_seconds,"
      "gpus,nodes,gpus_per_node,zero_stage,collective_seconds,exposed_communication_seconds,host_wait_seconds,optimizer,"
      "mean_iteration_seconds,io_bound,data_wait_seconds,checkpoint_seconds_per_iteration,checkpoint_interval_for_target,joules,samples_per_joule,"
      "within_energy_budget\n";
  const auto rows = [&](const BatchSizePlan& plan, const StrategyPlan& s, ClusterShape shape, int zero_stage, const std::optional<models::OptimizerOffloadSpec>& offload) {
    for (const auto& p : s.points) {
      // The I/O and energy columns are empty where the point has none.
      const std::string bound = p.io_modelled ? std::string(to_string(p.io_bound)) : "";
      const std::string interval = p.checkpoint_interval_for_target > 0 ? std::to_string(p.checkpoint_interval_for_target) : "";
      const std::string joules = p.joules > 0 ? fmt::format("{}", p.joules) : "";
      const std::string per_joule = p.samples_per_joule > 0 ? fmt::format("{}", p.samples_per_joule) : "";
      out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", csv_field(plan.variant),
                         csv_field(plan.scenario_name), csv_field(plan.platform_name), csv_field(s.strategy), p.batch, p.fits ? 1 : 0, p.out_of_memory ? 1 : 0,
                         p.inapplicable ? 1 : 0, p.simulation_failed ? 1 : 0, p.peak_bytes, p.iteration_seconds, p.samples_per_second, p.stall_seconds,
                         shape.ranks(), shape.nodes, shape.gpus_per_node, zero_stage, p.collective_seconds, p.exposed_communication_seconds,
                         p.host_wait_seconds, csv_field(models::optimizer_place(offload)), p.mean_iteration_seconds, bound, p.data_wait_seconds,
                         p.checkpoint_seconds_per_iteration, interval, joules, per_joule, p.within_energy_budget ? 1 : 0);
    }
  };
  for (const BatchSizePlan& plan : plans) {
    for (const auto& s : plan.strategies) rows(plan, s, plan.cluster, plan.zero_stage, plan.offload_optimizer);
    if (plan.cluster_search) {
      for (const auto& c : plan.cluster_search->candidates) rows(plan, c.plan, c.shape, c.zero_stage, c.offload_optimizer);
    }
  }
  return out;
}

std::string plan_csv(const BatchSizePlan& plan) { return plan_csv(std::vector<BatchSizePlan>{plan}); }

}  // namespace comptrain::sim

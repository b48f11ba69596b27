#pragma once
// The planner's driver: every search of every unit (a request, or one candidate of a cluster
// search) through one pool of worker processes, with the comparison points and the one-GPU
// references of the scaling efficiency. Its bookkeeping and the recording of results are in
// driver.cpp, with a finished search made into a StrategyPlan (finish).

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "comptrain/sim/run/run.hpp"
#include "comptrain/sim/runtime/workers.hpp"
#include "comptrain/sim/studies/plan.hpp"
#include "studies/plan/probe.hpp"
#include "studies/plan/search.hpp"

namespace comptrain::sim::planner {

inline bool is_baseline(const models::StrategySpec& spec) { return spec.rules.empty() && !spec.layer_recompute; }

// plan.objective, written once: what a strategy's best batch maximises and what a cluster
// search's fastest candidate is chosen by.
inline double objective_score(PlanObjective objective, double samples_per_second, double samples_per_joule) {
  return objective == PlanObjective::samples_per_joule ? samples_per_joule : samples_per_second;
}

// plan.energy_budget at a point that fits and trains `samples` per iteration: every bound given
// holds (a point without energy meets none; scenarios with a budget need power values).
bool within(const std::optional<EnergyBudget>& budget, const PlanPoint& point, double samples);

// See PlanLimit. A strategy that fits nowhere is named by its first point (batch 1).
PlanLimit limit_of(const StrategyPlan& s, double share);

// The reference of the scaling efficiency: a strategy's micro-batch on one GPU alone, per request.
using ReferenceKey = std::tuple<std::size_t, std::string, std::int64_t, int>;  // request, strategy rules, batch, accumulation steps
struct Reference {
  std::optional<double> seconds;
  std::string note;  // why there is none
};

struct Driver {
  std::vector<PlanRequest> requests;   // the units' scenarios and options
  std::vector<Unit> units;  // per unit: what its searches run over
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
  // The data-parallel replicas, each training `batch` samples per micro-step: every GPU, or under
  // a model-parallel layout the GPUs over tensor x pipeline x context (models::data_parallel_degree).
  int replicas(const Search& s) const;

  // Submits the search's next rounds until one has a batch to simulate, or the search is done.
  void submit_round(std::size_t index);
  // When every search of a plan is done: the points the comparison with the baseline needs,
  // each strategy and the baseline at the smaller of their largest batches, where the search
  // did not simulate them.
  void on_search_done(const Search& done);
  bool every_search_done(std::size_t p) const;
  void submit_comparison_points(std::size_t p);
  // Once a cluster unit's points are all in (its best batches final): each strategy's best
  // micro-batch on one GPU alone, once per request, strategy and batch.
  void submit_references(std::size_t p);
  void record_reference(std::size_t job, const JobOutcome& outcome);
  // Accumulation steps simulated at `batch`: a cluster candidate's share / batch; 0 (the
  // scenario's own) otherwise.
  int simulated_steps(const Search& s, std::int64_t batch) const;
  // Micro-steps of `batch` per GPU and optimizer step: simulated (a cluster candidate's, or the
  // scenario's own), or estimated to reach a target global batch (each GPU's share of it).
  std::int64_t steps(const Search& s, std::int64_t batch) const;
  // Global samples/s of a fitting point: with an estimated accumulation (a target global batch
  // outside a cluster search) G / (steps x mean iteration), else the point's own.
  double rate(const Search& s, const PlanPoint& point) const;
  // The fitting point within the energy budget that scores highest by plan.objective (ties: the
  // smaller batch).
  std::optional<std::int64_t> best_of(const Search& s) const;
  // A finished job: a search's point (then its next round when the round is complete) or a reference.
  void record(std::size_t job, JobOutcome outcome);
  // The jobs done and still expected, for the progress bar.
  std::size_t estimate_total() const;
  // The search's points made into the strategy's plan: its largest and best batch, warnings, limit.
  StrategyPlan finish(const Search& s) const;
};

}  // namespace comptrain::sim::planner

#pragma once
// The batch search of one strategy (studies/plan.hpp, "Search"): which batches a round probes
// and what a finished round decides. Pure: it reads only the points a round simulated and never
// forks, so that it is tested on synthetic points (tests/sim/studies/plan_test.cpp).

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "comptrain/sim/studies/plan.hpp"

namespace comptrain::sim::planner {

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
  bool every_divisor = false;   // first: every divisor in one round (Unit::model_parallel)
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
  // A layout with tensor, pipeline or sequence parallelism: there is no one-GPU reference (one GPU
  // cannot run the model the layout splits). In a layout search every micro-batch of `divisors` is
  // simulated in one round (every_divisor): with pipelines the fastest is rarely the largest that
  // fits (fewer micro-batches, a larger bubble).
  bool model_parallel = false;
  bool every_divisor = false;  // every micro-batch of `divisors` in one round (a layout search)
};

// The most micro-steps a probe simulates, as training.gradient_accumulation_steps allows
// (sim/scenario.cpp): each is a whole forward and backward pass in the replay.
constexpr std::int64_t kMaxAccumulationSteps = 4096;

// The next round's probes, or none when the search is finished. `divisors`: the unit's
// (Unit::divisors; empty outside a cluster candidate with a target global batch); `ceiling`:
// PlanOptions::max_batch.
std::vector<std::int64_t> next_round(Search& s, const std::vector<std::int64_t>& divisors, int probes_per_round, std::int64_t ceiling);

// Decides from a completed round (every batch of s.round is in s.points): the first failing
// probe bounds the interval from above.
void decide(Search& s, const std::vector<std::int64_t>& divisors);

}  // namespace comptrain::sim::planner

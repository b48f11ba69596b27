#pragma once
// A cluster search (studies/plan.hpp, "Cluster search"): a request expanded into one unit per
// cluster size, ZeRO stage and optimizer place, and the units' plans gathered back into its
// candidates and the fastest of them.

#include <cstddef>
#include <vector>

#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/sim/studies/plan.hpp"
#include "studies/plan/search.hpp"

namespace comptrain::sim::planner {

// One candidate configuration to plan: the request's scenario with its parallelism section set.
struct ClusterUnit {
  Scenario scenario;
  Unit unit;  // its `request` is set by the caller
  // The strategies to plan it under: the request's, less those it cannot run (a layout search's
  // first_stages above its pipeline); empty: the request's.
  std::vector<models::StrategySpec> strategies = {};
};

// The request's candidates (appended to `units`, by size, then stage, then optimizer place) and
// the search's record of what it tried; `header`: the plan's header from the scenario as written.
ClusterSearch expand_cluster_search(const PlanRequest& r, const BatchSizePlan& header, std::vector<ClusterUnit>& units);

// The strategies of the request's units (`units`, indices into `unit_plans`, which are moved
// from; `configurations`: each one's configuration index in the search) as the candidates of
// `out`'s cluster search, and the fastest by plan.objective among those that fit
// (fastest_candidate, studies/plan.hpp).
void gather_candidates(BatchSizePlan& out, std::vector<BatchSizePlan>& unit_plans, const std::vector<std::size_t>& units,
                       const std::vector<std::size_t>& configurations, PlanObjective objective);

}  // namespace comptrain::sim::planner

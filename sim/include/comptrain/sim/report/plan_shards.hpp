#pragma once
// A cluster search split over a job array (`plan --shard I/N` on a scenario whose plan section
// searches clusters or layouts and that has no sweep; studies/plan.hpp, PlanRequest::shard): each
// shard's document, and the merge of a search's shards into the plan the unsharded run gives.
//
// The shard document (schema comptrain.plan_shard):
//   "plan_shard": {"hash": the run's (config/sweep.hpp, scenario_run_hash: the scenario's text,
//                  the command and its result-changing options), "command": "plan", "source",
//                  "configuration_count": the configurations the whole search expanded,
//                  "layouts", "fsdp": what the plan document does not say of the search}
//   "shard": {"index", "count"}
//   "candidate_configurations": each candidate's configuration (0-based, in the search's expand
//                  order), in the order of the plan's candidates
//   "plan": the shard's comptrain.plan document (plan_json): the candidates of its configurations
//                  I, I+N, ... (each with every strategy), the fastest among them, and the whole
//                  search's notes: every shard expands the whole search, so every shard carries
//                  every configuration left out before simulating, and the merge keeps them once.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "comptrain/sim/config/sweep.hpp"
#include "comptrain/sim/studies/plan.hpp"

namespace comptrain::sim {

// `plan`: make_plans' answer to a request with `shard` (a cluster search).
std::string plan_shard_document(const BatchSizePlan& plan, std::string_view run_hash, const Shard& shard);

// Whether `text` (from `source`) is a plan shard document; InputError when it is not JSON.
bool is_plan_shard_document(const std::string& source, const std::string& text);

struct MergedPlan {
  BatchSizePlan plan;  // as far as plan_table_text reads it (a candidate's strategy by its name)
  std::string json;    // the comptrain.plan document the unsharded `plan --json` writes
};

// Joins shard documents ({source name, text}) into the unsharded plan: the candidates in the
// search's order and the fastest by plan.objective among them all. InputError naming the file
// when one is not a plan shard, comes from another run (hash, shard count, configuration count),
// repeats a shard or a candidate, or holds a configuration of another shard; and when shards are
// missing (naming them).
MergedPlan merge_plan_shards(const std::vector<std::pair<std::string, std::string>>& documents);

}  // namespace comptrain::sim

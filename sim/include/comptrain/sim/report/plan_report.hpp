#pragma once
// The planner's answer (studies/plan.hpp) as a user reads it: the table with the comparison
// against the baseline and a one-line verdict under it, the JSON document, and the CSV of every
// simulated point.

#include <string>
#include <vector>

#include "comptrain/sim/studies/plan.hpp"

namespace comptrain::sim {

std::string plan_table_text(const BatchSizePlan& plan);
std::string plan_json(const BatchSizePlan& plan);
std::string plan_csv(const BatchSizePlan& plan);  // one row per simulated point
std::string plan_csv(const std::vector<BatchSizePlan>& plans);  // the same with a variant column

}  // namespace comptrain::sim

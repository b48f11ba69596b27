#pragma once
// The hybrid plan (studies/hybrid_plan.hpp) as a user reads it: the ordinary plan's table, then
// per batch the hybrid's answer beside the best rule-based strategy, and the JSON document.

#include <string>

#include "comptrain/sim/studies/hybrid_plan.hpp"

namespace comptrain::sim {

std::string hybrid_plan_text(const HybridPlan& plan);
std::string hybrid_plan_json(const HybridPlan& plan);

}  // namespace comptrain::sim

#pragma once
// A strategy as JSON, written once: the documents print it (report/documents.hpp), and the
// studies compare strategies by their rules' JSON, so that two strategies that would print the
// same rules plan once.

#include <nlohmann/json.hpp>
#include <string>

#include "comptrain/models/strategy.hpp"

namespace comptrain::sim::detail {

// {"name", "rules": [{"select": {...}, "action": "offload" | "recompute" | "compress", <action>: {...}}]}
nlohmann::ordered_json strategy_json(const models::StrategySpec& strategy);

// The rules' JSON as one string: equal for two strategies that differ only in their names.
std::string strategy_rules_key(const models::StrategySpec& strategy);

}  // namespace comptrain::sim::detail

#pragma once
// The parts every JSON document comptrain writes shares (simulate reports, plans, sweep
// results), written once so that they have one shape everywhere: the header naming the
// document's schema and the comptrain that wrote it, the scenario, the platform and the
// strategy. Private to the sim library.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/models/platform.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/sim/core/strategy_json.hpp"

namespace comptrain::sim::detail {

using nlohmann::ordered_json;

// Bumped when a field of the document changes meaning or shape; docs/outputs.md keeps the
// history of every version (add the new one there).
inline constexpr int kSchemaVersion = 6;

// {"comptrain_version": "0.1.0", "schema": {"name": "comptrain.<kind>", "version": 2}}
ordered_json document_header(std::string_view kind);

// {"name", "source"}
ordered_json scenario_json(const std::string& name, const std::string& source);
// {"name", "source", "gpu", "memory_capacity_bytes"}
ordered_json platform_json(const models::Platform& platform);
// strategy_json: comptrain/sim/core/strategy_json.hpp

// Ascending indices as "0-99, 105, 107-110": at most `shown` runs, then "and N more in M further
// runs" (the merges' messages for what is missing).
std::string index_ranges(const std::vector<std::size_t>& sorted, std::size_t shown = 20);

}  // namespace comptrain::sim::detail

#pragma once
// A sweep's result documents (JSON), their merge across shards, and the table of a simulated
// sweep (config/sweep.hpp expands the sweep, studies/sweep.hpp simulates its variants).

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "comptrain/sim/config/sweep.hpp"
#include "comptrain/sim/run/run.hpp"

namespace comptrain::sim {

// The result document: {"sweep": {hash, command, source, keys, variant_count}, ["shard": {index,
// count},] "variants": [{index, label, result}]}, variants ascending. Without a shard it is what
// merging all shards gives, byte for byte.
std::string sweep_document(const Sweep& sweep, std::string_view command, std::string_view run_hash,
                           const std::optional<Shard>& shard, std::vector<VariantResult> results);

// Joins shard documents ({source name, text}) into the unsharded document. InputError when they
// come from different sweeps or commands (hash), or do not cover every variant exactly once
// (naming the missing or duplicated variants, as ranges, at most a few dozen of them).
std::string merge_sweep_documents(const std::vector<std::pair<std::string, std::string>>& documents);

// One line per variant: fits, peak, iteration time, samples/s.
std::string simulation_table_text(const Sweep& sweep, const std::vector<VariantResult>& results);

// A simulated variant's result: its report_json document (what simulate_variants' workers send).
std::string variant_report_json(const Scenario& scenario, const PreparedScenario& prepared, const RunOutcome& outcome);

}  // namespace comptrain::sim

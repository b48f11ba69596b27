#pragma once
// Simulating a sweep's variants (config/sweep.hpp), each in a worker process (runtime/workers.hpp).

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "comptrain/sim/config/sweep.hpp"
#include "comptrain/sim/run/run.hpp"

namespace comptrain::sim {

// What a worker sends back for one simulated variant (report/sweep_document.hpp's
// variant_report_json: its report_json document). Called in the worker process.
using VariantEncoder = std::function<std::string(const Scenario& scenario, const PreparedScenario& prepared, const RunOutcome& outcome)>;

// Simulates each listed variant (one process each, `jobs` at a time); results in `indices`'
// order, each what `encode` makes of the variant's run.
std::vector<VariantResult> simulate_variants(const Sweep& sweep, const std::vector<std::size_t>& indices, int jobs, bool progress,
                                             const VariantEncoder& encode);

}  // namespace comptrain::sim

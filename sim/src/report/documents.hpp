#pragma once
// The parts every JSON document comptrain writes shares (simulate reports, plans, sweep
// results), written once so that they have one shape everywhere: the header naming the
// document's schema and the comptrain that wrote it, the scenario, the platform and the
// strategy. Private to the sim library.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "comptrain/models/platform.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/sim/core/strategy_json.hpp"

namespace comptrain::sim::detail {

using nlohmann::ordered_json;

// Bumped when a field of the document changes meaning or shape. Version 2: the run layer's
// documents (comptrain_version, schema, structured strategy, one scenario/platform shape).
// Version 3: device memory (framework section; allocated, reserved, device peaks; out-of-memory
// decided by the caching-allocator model, with its iteration).
// Version 4: plans of clusters (batches per GPU and global samples/s under a parallelism section;
// cluster, scaling efficiency, limit, communication and host-wait times; cluster_search).
// Version 5: adaptive error bounds (issue 16): a compress rule's error_bound may be "adaptive",
// with gradient_error_tolerance and fallback_error_bound (null otherwise); each compression entry
// lists its storages (tensors: bound, ratio, predicted gradient error) and the tolerance. Plans:
// `offload_optimizer` (null: the GPU) in `cluster` and in each cluster-search candidate, and the
// list searched in `cluster_search.offload_optimizer`; `cluster` is also given for one GPU with
// an offloaded optimizer.
// Version 6: I/O and energy (issue 18). Simulate: `results.energy` (null without power values;
// `waiting_watts`, and `with_io`: the mean iteration's energy with the data loader and checkpoints)
// and `results.io` (with a data or checkpoint section). Plans: each point's mean_iteration_seconds
// (what samples_per_second is over), `io` (null without I/O: bound, waits, checkpoint cost and
// interval), joules, samples_per_joule, GPU and node average watts and within_energy_budget;
// `options.objective`, `options.energy_budget`, `options.checkpoint_overhead` and `io_modelled`; the
// limits loader, storage, checkpoint and energy_budget; a cluster candidate's
// mean_iteration_seconds and samples_per_joule.
inline constexpr int kSchemaVersion = 6;

// {"comptrain_version": "0.1.0", "schema": {"name": "comptrain.<kind>", "version": 2}}
ordered_json document_header(std::string_view kind);

// {"name", "source"}
ordered_json scenario_json(const std::string& name, const std::string& source);
// {"name", "source", "gpu", "memory_capacity_bytes"}
ordered_json platform_json(const models::Platform& platform);
// strategy_json: comptrain/sim/core/strategy_json.hpp

}  // namespace comptrain::sim::detail

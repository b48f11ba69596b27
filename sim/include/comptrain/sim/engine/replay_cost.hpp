#pragma once
// What a replay will make SimGrid do, estimated from the platform, the schedule and the cluster
// shape before anything is built, and bounded (shared/defects-2/09): a shape whose replay would
// run for many minutes or exhaust memory is refused with the estimate, not started. The run layer
// (run/run.hpp) and the validation table check every shape they simulate here; the engine's own
// functions (simulate, simulate_collective) stay unbounded for benchmarks and tests.
//
// Two costs grow faster than the GPUs:
//  - the platform: SimGrid 3.32 checks each new host's name against every zone and lists every
//    host of the engine whenever a zone is sealed (NetZoneImpl::get_host_by_name_or_null,
//    NetZoneImpl::seal), and the replay builds a zone per node with a host per GPU (the links'
//    own check is cheap since the nodes' links live in the root zone: ClusterNetwork::build_node);
//  - the collectives: each runs one SimGrid communication per aggregated send (ClusterNetwork's ring
//    and tree sends, about 2 per GPU), as mailbox messages between the GPUs' collective agents;
//    what they cost still grows faster than their number (the max-min sharing of more flows at
//    once), close to its square over the sizes measured (docs/performance.md, "Clusters").

#include <cstdint>

#include "comptrain/models/platform.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/sim/core/cluster_shape.hpp"

namespace comptrain::sim {

// The bounds, from measurements on the 2-core development VM (sim/README.md, "Limits"), each
// keeping a replay within about half a minute there, and well within 8 GiB:
//  - 16,384 simulated GPUs: a one-layer GPT under DDP took 3.0 s of CPU on 3,072 DGX H100 GPUs,
//    6.7 s on 6,144, 12.1 s on 12,288 and 18.7 s on 16,384 (dgx-h100-superpod's 2,048 nodes x 8);
//  - 6 x 10^10 communication pairs (collectives x communications^2): a 1.3 B GPT under ZeRO-3 (296
//    collectives) took 3-11 s of CPU on 1,024 DGX A100 GPUs (1.1 x 10^10 pairs; the VM is noisy) and
//    39 s on 3,072 DGX H100 GPUs (10^11 pairs).
inline constexpr std::int64_t kMaxSimulatedGpus = 16'384;
inline constexpr double kMaxCommunicationPairs = 6e10;

struct ReplayCost {
  std::int64_t gpus = 0;            // GPU hosts built: the shape's ranks
  std::int64_t collectives = 0;     // collective tasks in the replayed iteration
  std::int64_t communications = 0;  // the most SimGrid communications one collective runs at once (ring or tree)
  double communication_pairs = 0;   // collectives x communications^2
};

ReplayCost estimate_replay_cost(const models::Platform& platform, const models::Schedule& schedule, ClusterShape shape);

// InputError "N node(s) x G GPUs: ..." with the GPUs, the bound and what to change, when the shape
// has more than kMaxSimulatedGpus; the caller adds the scenario's place and field.
void check_simulated_gpus(ClusterShape shape);

// check_simulated_gpus, then InputError "N node(s) x G GPUs: ..." with the estimate, the bound and
// the most nodes within it, when the collectives' pairs exceed kMaxCommunicationPairs.
void check_replay_cost(const models::Platform& platform, const models::Schedule& schedule, ClusterShape shape);

}  // namespace comptrain::sim

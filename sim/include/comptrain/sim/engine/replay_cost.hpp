#pragma once
// What a replay will make SimGrid do, estimated from the platform, the schedule and the cluster
// shape before anything is built, and bounded (shared/defects-2/09): a shape whose replay would
// run for many minutes or exhaust memory is refused with the estimate, not started. The run layer
// (run/run.hpp) and the validation table check every shape they simulate here; the engine's own
// functions (simulate, simulate_collective) stay unbounded for benchmarks and tests.
//
// Two costs grow with a square:
//  - the platform: SimGrid 3.32 checks each new link's name against every zone's links and lists
//    every host of the engine whenever a zone is sealed (NetZoneImpl::get_link_by_name_or_null,
//    NetZoneImpl::seal), and the replay builds a zone per node with a host and links per GPU: the
//    build grows with the square of the GPUs;
//  - the collectives: each runs one SimGrid communication per aggregated send (ClusterNetwork's ring
//    and tree sends, about 2 per GPU), and SimGrid 3.32 searches one list of every detached
//    communication as each ends (docs/performance.md, "Clusters"): a collective costs about the
//    square of its communications, and an iteration that much for every collective it runs.

#include <cstdint>

#include "comptrain/models/platform.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/sim/core/cluster_shape.hpp"

namespace comptrain::sim {

// The bounds, from measurements on the 2-core development VM (sim/README.md, "Limits"), each
// keeping a replay within about half a minute there, and well within 8 GiB:
//  - 3,072 simulated GPUs: a 2-layer GPT (one all-reduce) took 5.3 s on 1,024 DGX H100 GPUs,
//    11.8 s on 2,048 and 76 s on 4,096 with other builds running; alone, 56 s on 6,144
//    (perlmutter-gpu's 1,536 nodes x 4) and 7 min 10 s on 16,384 (dgx-h100-superpod's 2,048 x 8);
//  - 2 x 10^10 communication pairs: a 1.3 B GPT under ZeRO-3 (296 collectives) took 13 s of CPU on
//    1,024 GPUs (about 10^10 pairs), 237 s on 4,096 (docs/performance.md, "Clusters").
inline constexpr std::int64_t kMaxSimulatedGpus = 3'072;
inline constexpr double kMaxCommunicationPairs = 2e10;

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

#pragma once
// What a replay will make SimGrid do, estimated from the platform, the schedule and the cluster
// shape before anything is built, and bounded (shared/defects-2/09): a shape whose replay would
// run for many minutes or exhaust memory is refused with the estimate, not started. The run layer
// (run/run.hpp) and the validation table check every shape they simulate here; the engine's own
// functions (simulate, simulate_collective) stay unbounded for benchmarks and tests.
//
// What grows with the cluster (sim/README.md, "Ranks in classes", "Limits"):
//  - the platform: SimGrid 3.32 checks each new host's name against every zone and walks every
//    zone whenever one is sealed (NetZoneImpl::get_host_by_name_or_null, NetZoneImpl::seal), so a
//    build of a zone per node with a host per GPU grows faster than the GPUs. The symmetric replay
//    folds the cluster where its collectives allow (node 0 whole, one endpoint host per other
//    node: cluster_folds); otherwise it builds every GPU;
//  - the collectives: each one simulated runs one SimGrid communication per aggregated send
//    (ClusterNetwork's ring and tree sends), as mailbox messages between collective agents; those
//    that repeat reuse the first one's time (collective_times_reused).

#include <cstdint>
#include <utility>
#include <vector>

#include "comptrain/models/platform.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/sim/core/cluster_shape.hpp"

namespace comptrain::sim {

// The bounds, from measurements on the 2-core development VM (sim/README.md, "Limits"; CPU time
// of `comptrain simulate`), each keeping a replay within about a minute there and well within
// 2 GiB:
//  - 131,072 GPUs in the cluster (checked before anything else): the 1.3 B GPT under ZeRO-3 of
//    scenarios/gpt-zero3-4x8.yaml took 26 s of CPU and 387 MB on 100,000 H100 (h100-100k's
//    12,500 nodes, folded);
//  - 16,384 GPUs built whole, where the cluster does not fold: a one-layer GPT under DDP took
//    18.7 s of CPU on 16,384 (dgx-h100-superpod's 2,048 nodes x 8, every GPU built);
//  - 10^7 communications simulated (the simulated collectives x each one's communications): the
//    ZeRO-3 GPT's 12 distinct collectives took 26 s at 100,000 GPUs folded (4.8 x 10^6) and 11 s
//    at 16,384 with every GPU built (1.2 x 10^6).
inline constexpr std::int64_t kMaxClusterGpus = 131'072;
inline constexpr std::int64_t kMaxWholeGpus = 16'384;
inline constexpr double kMaxSimulatedCommunications = 1e7;

// Whether the symmetric replay reuses the times of collectives that repeat (sim/README.md,
// "Collectives that repeat"): the shape has more than one GPU, every collective task is on one
// stream (which runs them one at a time), and their links are no copy's (NVLink between the
// node's GPUs, or one GPU per node).
bool collective_times_reused(const models::Platform& platform, const models::Schedule& schedule, ClusterShape shape);

// The distinct collectives of `schedule`, by kind and groups, in the order they first come.
std::vector<std::pair<models::CollectiveKind, models::RankGroups>> schedule_collectives(const models::Schedule& schedule);

// Whether the symmetric replay builds the cluster folded (sim/README.md, "Ranks in classes"):
// node 0 whole, every other node one endpoint host, because every collective of the schedule folds.
bool cluster_folds(const models::Platform& platform, const models::Schedule& schedule, ClusterShape shape);

struct ReplayCost {
  std::int64_t gpus = 0;            // the shape's ranks
  bool folded = false;              // cluster_folds: node 0 whole, one endpoint per other node
  std::int64_t whole_gpus = 0;      // GPU hosts built: the ranks, or node 0's when folded
  std::int64_t collectives = 0;     // collective tasks in the replayed iteration
  std::int64_t simulated_collectives = 0;  // those whose flows SimGrid runs: the distinct ones when their times are reused
  std::int64_t communications = 0;  // the most SimGrid communications one collective runs at once (ring, tree or all-to-all)
  double simulated_communications = 0;  // summed over the simulated collectives (collectives x communications without all-to-alls)
};

ReplayCost estimate_replay_cost(const models::Platform& platform, const models::Schedule& schedule, ClusterShape shape);

// InputError "N node(s) x G GPUs: ..." with the GPUs, the bound and what to change, when the shape
// has more than kMaxClusterGpus; the caller adds the scenario's place and field.
void check_cluster_gpus(ClusterShape shape);

// InputError "N node(s) x G GPUs: ..." when the shape has more than kMaxWholeGpus: for what builds
// every GPU (a replay whose cluster does not fold, simulate_collective).
void check_whole_gpus(ClusterShape shape);

// check_cluster_gpus; then, once the schedule is known, check_whole_gpus where the cluster does not
// fold, and InputError "N node(s) x G GPUs: ..." with the estimate, the bound and the most nodes
// within it when the simulated communications exceed kMaxSimulatedCommunications.
void check_replay_cost(const models::Platform& platform, const models::Schedule& schedule, ClusterShape shape);

}  // namespace comptrain::sim

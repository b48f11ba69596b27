#pragma once
// Collectives on a cluster (a platform with a `network`, or one multi-GPU node): how long one
// NCCL ring all-reduce, reduce-scatter or all-gather takes over every GPU of a shape of the
// cluster, simulated with SimGrid on the cluster's links (sim/README.md, "Clusters and
// collectives"). The network itself is built by sim/src/cluster_network.hpp, which the replay
// uses too.

#include <cstdint>

#include "comptrain/models/platform.hpp"
#include "comptrain/models/schedule.hpp"

namespace comptrain::sim {

// The part of a cluster a run uses: `nodes` nodes (the first ones of the network) with the first
// `gpus_per_node` GPUs of each. Ranks are numbered node by node: rank = node * gpus_per_node + local.
struct ClusterShape {
  int nodes = 1;
  int gpus_per_node = 1;
  int ranks() const { return nodes * gpus_per_node; }
};

// InputError naming the platform unless 1 <= nodes <= platform.max_nodes() and
// 1 <= gpus_per_node <= platform.gpus_per_node.
void check_cluster_shape(const models::Platform& platform, ClusterShape shape);

// nccl-tests' bus-bandwidth factor (doc/PERFORMANCE.md): 2(p-1)/p for an all-reduce, (p-1)/p for a
// reduce-scatter or an all-gather; 0 for one rank (nothing moves).
double bus_bandwidth_factor(models::CollectiveKind kind, int ranks);

// NCCL's latency term of one ring collective over `shape` (platform.collectives; tuning.cc's ring
// model, scenarios/platforms/README.md "Clusters"): base + (steps - network steps) x intra +
// network steps x inter. 0 for one rank.
double collective_latency(const models::Platform& platform, ClusterShape shape, models::CollectiveKind kind);

struct CollectiveTiming {
  double seconds = 0;
  double algorithm_bandwidth = 0;  // bytes / seconds: nccl-tests' algbw
  double bus_bandwidth = 0;        // algbw x bus_bandwidth_factor: nccl-tests' busbw
};

// One collective of `bytes` (counted as nccl-tests counts the size: the buffer of an all-reduce,
// the input of a reduce-scatter, the output of an all-gather) over every rank of `shape`, alone on
// the cluster. SimGrid runs in a forked child (its engine cannot be reset within a process).
// InputError for a bad shape or bytes < 1; the timing of one rank is all zeros.
CollectiveTiming simulate_collective(const models::Platform& platform, ClusterShape shape, models::CollectiveKind kind,
                                     std::int64_t bytes);

}  // namespace comptrain::sim

#pragma once
// The part of a cluster a run uses: a vocabulary type of every room (config reads it from a
// scenario's parallelism section, the engine replays over it, studies search over it).

#include "comptrain/models/platform.hpp"

namespace comptrain::sim {

// `nodes` nodes (the first ones of the network) with the first `gpus_per_node` GPUs of each.
// Ranks are numbered node by node: rank = node * gpus_per_node + local.
struct ClusterShape {
  int nodes = 1;
  int gpus_per_node = 1;
  int ranks() const { return nodes * gpus_per_node; }
};

// InputError naming the platform unless 1 <= nodes <= platform.max_nodes() and
// 1 <= gpus_per_node <= platform.gpus_per_node.
void check_cluster_shape(const models::Platform& platform, ClusterShape shape);

}  // namespace comptrain::sim

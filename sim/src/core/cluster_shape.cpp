#include "comptrain/sim/core/cluster_shape.hpp"

#include <fmt/format.h>

#include <string>

#include "comptrain/support/input_error.hpp"

namespace comptrain::sim {

void check_cluster_shape(const models::Platform& platform, ClusterShape shape) {
  const std::string which = fmt::format("platform '{}' ({})", platform.name, platform.source);
  if (shape.nodes < 1 || shape.gpus_per_node < 1) {
    throw InputError(fmt::format("a cluster of {} node(s) with {} GPU(s) each on {}; expected at least 1 node and 1 GPU per node", shape.nodes,
                                 shape.gpus_per_node, which));
  }
  if (shape.nodes > platform.max_nodes()) {
    throw InputError(platform.network ? fmt::format("{} node(s) on {}, which has {} (network.nodes); expected at most {}", shape.nodes, which,
                                                    platform.network->nodes, platform.network->nodes)
                                      : fmt::format("{} nodes on {}, which is one node (it has no network); expected 1 node, or a "
                                                    "platform with a network (scenarios/platforms/README.md, \"Clusters\")",
                                                    shape.nodes, which));
  }
  if (shape.gpus_per_node > platform.gpus_per_node) {
    throw InputError(fmt::format("{} GPUs per node on {}, whose nodes have {} (gpus_per_node); expected at most {}", shape.gpus_per_node, which,
                                 platform.gpus_per_node, platform.gpus_per_node));
  }
}

}  // namespace comptrain::sim

#include "comptrain/sim/engine/replay_cost.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "comptrain/support/input_error.hpp"

namespace comptrain::sim {
namespace {

// At most the sends ClusterNetwork plans (plan_rings, plan_trees), without building it. One node:
// the ring's g sends, the tree's chains joining each GPU to its two neighbours both ways (2g).
// Across nodes: per node the NVLink hops (at most g) and one send per ring (per NIC used) for the
// ring; for the tree the chains' NVLink pairs both ways (2g) and, per chain, each node's edges to
// its parents in the two trees, both ways (4).
std::int64_t communications_per_collective(const models::Platform& platform, ClusterShape shape) {
  const std::int64_t g = shape.gpus_per_node;
  const std::int64_t n = shape.nodes;
  if (n * g < 2) return 0;
  if (n == 1) return 2 * g;
  const std::int64_t gpus_per_nic = platform.nic ? std::max(platform.gpus_per_node / std::max(platform.nic->per_node, 1), 1) : 1;
  const std::int64_t rings = (g + gpus_per_nic - 1) / gpus_per_nic;
  return n * std::max(g + rings, 2 * g + 4 * rings);
}

}  // namespace

ReplayCost estimate_replay_cost(const models::Platform& platform, const models::Schedule& schedule, ClusterShape shape) {
  ReplayCost cost;
  cost.gpus = static_cast<std::int64_t>(shape.nodes) * shape.gpus_per_node;
  for (const models::Task& task : schedule.tasks) cost.collectives += task.kind == models::TaskKind::collective ? 1 : 0;
  cost.communications = communications_per_collective(platform, shape);
  const double each = static_cast<double>(cost.communications);
  cost.communication_pairs = static_cast<double>(cost.collectives) * each * each;
  return cost;
}

void check_simulated_gpus(ClusterShape shape) {
  const std::int64_t gpus = static_cast<std::int64_t>(shape.nodes) * shape.gpus_per_node;
  if (gpus <= kMaxSimulatedGpus) return;
  throw InputError(fmt::format("{} node(s) x {} GPUs: {} GPUs to simulate, each a SimGrid host with its links, whose build grows faster "
                               "than the GPUs (16,384 took 19 s); expected at most {} (sim/README.md, \"Limits\"): at most {} node(s) "
                               "of {} GPUs",
                               shape.nodes, shape.gpus_per_node, gpus, kMaxSimulatedGpus, kMaxSimulatedGpus / shape.gpus_per_node,
                               shape.gpus_per_node));
}

void check_replay_cost(const models::Platform& platform, const models::Schedule& schedule, ClusterShape shape) {
  check_simulated_gpus(shape);
  const ReplayCost cost = estimate_replay_cost(platform, schedule, shape);
  if (cost.communication_pairs <= kMaxCommunicationPairs) return;
  // Communications grow linearly with the nodes: the most nodes whose estimate stays within the bound.
  const double scale = std::sqrt(kMaxCommunicationPairs / cost.communication_pairs);
  const int most_nodes = std::max(1, static_cast<int>(std::floor(shape.nodes * scale)));
  throw InputError(fmt::format("{} node(s) x {} GPUs: the iteration's {} collective(s) would each run up to {} SimGrid communications "
                               "at once, about {:.2g} pairs of communications (what a collective costs SimGrid grows about as its "
                               "communications squared: sim/README.md, \"Limits\"); expected at most {:.2g}, about half a minute of simulation: at most {} "
                               "node(s) of {} GPUs for this model",
                               shape.nodes, shape.gpus_per_node, cost.collectives, cost.communications, cost.communication_pairs,
                               kMaxCommunicationPairs, most_nodes, shape.gpus_per_node));
}

}  // namespace comptrain::sim

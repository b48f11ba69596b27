#include "comptrain/sim/engine/replay_cost.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include "comptrain/support/input_error.hpp"
#include "engine/cluster_network.hpp"

namespace comptrain::sim {
namespace {

// At most the sends ClusterNetwork plans (plan_rings, plan_trees), without building it. One node:
// the ring's g sends, the tree's chains joining each GPU to its two neighbours both ways (2g).
// Across nodes: per node the NVLink hops (at most g) and one send per ring (per NIC used) for the
// ring; for the tree the chains' NVLink pairs both ways (2g) and, per chain, each node's edges to
// its parents in the two trees, both ways (4).
// Folded (ClusterNetwork::NodeDetail::folded), the other nodes' NVLink hops and chains are left
// out: node 0's sends, then per other node its network sends only.
std::int64_t communications_per_collective(const models::Platform& platform, ClusterShape shape, bool folded) {
  const std::int64_t g = shape.gpus_per_node;
  const std::int64_t n = shape.nodes;
  if (n * g < 2) return 0;
  if (n == 1) return 2 * g;
  const std::int64_t gpus_per_nic = platform.nic ? std::max(platform.gpus_per_node / std::max(platform.nic->per_node, 1), 1) : 1;
  const std::int64_t rings = (g + gpus_per_nic - 1) / gpus_per_nic;
  const std::int64_t node = std::max(g + rings, 2 * g + 4 * rings);
  return folded ? node + (n - 1) * 4 * rings : n * node;
}

std::string shape_text(ClusterShape shape) { return fmt::format("{} node(s) x {} GPUs", shape.nodes, shape.gpus_per_node); }

}  // namespace

std::vector<std::pair<models::CollectiveKind, models::RankGroups>> schedule_collectives(const models::Schedule& schedule) {
  std::vector<std::pair<models::CollectiveKind, models::RankGroups>> found;
  for (const models::Task& task : schedule.tasks) {
    if (task.kind != models::TaskKind::collective || !task.collective) continue;
    const std::pair<models::CollectiveKind, models::RankGroups> c{*task.collective, task.groups};
    if (std::find(found.begin(), found.end(), c) == found.end()) found.push_back(c);
  }
  return found;
}

bool cluster_folds(const models::Platform& platform, const models::Schedule& schedule, ClusterShape shape) {
  return detail::ClusterNetwork::folds(platform, shape, schedule_collectives(schedule));
}

bool collective_times_reused(const models::Platform& platform, const models::Schedule& schedule, ClusterShape shape) {
  if (shape.ranks() < 2) return false;
  std::optional<models::Stream> stream;
  for (const models::Task& task : schedule.tasks) {
    if (task.kind != models::TaskKind::collective) continue;
    if (stream && *stream != task.stream) return false;
    stream = task.stream;
  }
  return detail::ClusterNetwork::collective_links_are_their_own(platform, shape);
}

ReplayCost estimate_replay_cost(const models::Platform& platform, const models::Schedule& schedule, ClusterShape shape) {
  ReplayCost cost;
  cost.gpus = static_cast<std::int64_t>(shape.nodes) * shape.gpus_per_node;
  cost.folded = shape.nodes > 1 && cluster_folds(platform, schedule, shape);
  cost.whole_gpus = cost.folded ? shape.gpus_per_node : cost.gpus;
  // A collective repeats when its kind, bytes and groups do (the algorithm follows from them).
  std::set<std::tuple<models::CollectiveKind, std::int64_t, int, int>> distinct;
  for (const models::Task& task : schedule.tasks) {
    if (task.kind != models::TaskKind::collective || !task.collective) continue;
    ++cost.collectives;
    distinct.emplace(*task.collective, task.bytes, task.groups.size, task.groups.stride);
  }
  const bool reused = collective_times_reused(platform, schedule, shape);
  cost.simulated_collectives = reused ? static_cast<std::int64_t>(distinct.size()) : cost.collectives;
  cost.communications = communications_per_collective(platform, shape, cost.folded);
  // An all-to-all runs one communication per ordered pair of a group's ranks, every group at
  // once: ranks x (size - 1) (ClusterNetwork, plan_all_to_all), more than a ring's for large groups.
  double simulated = 0;
  std::int64_t most = cost.communications;
  const auto a2a_communications = [&](const std::tuple<models::CollectiveKind, std::int64_t, int, int>& c) {
    const int size = std::get<2>(c) == 0 ? shape.ranks() : std::get<2>(c);
    return static_cast<std::int64_t>(shape.ranks()) * std::max(size - 1, 0);
  };
  if (reused) {
    for (const auto& c : distinct) {
      const std::int64_t each = std::get<0>(c) == models::CollectiveKind::all_to_all ? a2a_communications(c) : cost.communications;
      most = std::max(most, each);
      simulated += static_cast<double>(each);
    }
  } else {
    for (const models::Task& task : schedule.tasks) {
      if (task.kind != models::TaskKind::collective || !task.collective) continue;
      const std::int64_t each = *task.collective == models::CollectiveKind::all_to_all
                                    ? a2a_communications({*task.collective, task.bytes, task.groups.size, task.groups.stride})
                                    : cost.communications;
      most = std::max(most, each);
      simulated += static_cast<double>(each);
    }
  }
  cost.communications = most;
  cost.simulated_communications = simulated;
  return cost;
}

void check_cluster_gpus(ClusterShape shape) {
  const std::int64_t gpus = static_cast<std::int64_t>(shape.nodes) * shape.gpus_per_node;
  if (gpus <= kMaxClusterGpus) return;
  throw InputError(fmt::format("{}: {} GPUs in the cluster; expected at most {} (sim/README.md, \"Limits\"): at most {} node(s) of {} GPUs",
                               shape_text(shape), gpus, kMaxClusterGpus, kMaxClusterGpus / shape.gpus_per_node, shape.gpus_per_node));
}

void check_whole_gpus(ClusterShape shape) {
  const std::int64_t gpus = static_cast<std::int64_t>(shape.nodes) * shape.gpus_per_node;
  if (gpus <= kMaxWholeGpus) return;
  throw InputError(fmt::format("{}: {} GPUs to build, each a SimGrid host with its links, whose build grows faster than the GPUs (16,384 "
                               "took 19 s); expected at most {} where the cluster does not fold (sim/README.md, \"Limits\"): at most {} "
                               "node(s) of {} GPUs",
                               shape_text(shape), gpus, kMaxWholeGpus, kMaxWholeGpus / shape.gpus_per_node, shape.gpus_per_node));
}

void check_replay_cost(const models::Platform& platform, const models::Schedule& schedule, ClusterShape shape) {
  check_cluster_gpus(shape);
  const ReplayCost cost = estimate_replay_cost(platform, schedule, shape);
  if (!cost.folded) check_whole_gpus(shape);
  if (cost.simulated_communications <= kMaxSimulatedCommunications) return;
  // Communications grow about linearly with the nodes: the most nodes whose estimate stays within the bound.
  const double scale = kMaxSimulatedCommunications / cost.simulated_communications;
  const int most_nodes = std::max(1, static_cast<int>(std::floor(shape.nodes * scale)));
  throw InputError(fmt::format("{}: the iteration's {} collective(s) to simulate would each run up to {} SimGrid communications, {:.2g} in "
                               "all (sim/README.md, \"Limits\"); expected at most {:.2g}, about a minute of simulation: at most {} node(s) of "
                               "{} GPUs for this model",
                               shape_text(shape), cost.simulated_collectives, cost.communications, cost.simulated_communications,
                               kMaxSimulatedCommunications, most_nodes, shape.gpus_per_node));
}

}  // namespace comptrain::sim

#include "comptrain/sim/collectives.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "cluster_network.hpp"
#include "comptrain/sim/workers.hpp"
#include "comptrain/support/input_error.hpp"
#include "simgrid_engine.hpp"

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

double bus_bandwidth_factor(models::CollectiveKind kind, int ranks) {
  if (ranks < 2) return 0;
  const double p = ranks;
  switch (kind) {
    case models::CollectiveKind::all_reduce: return 2 * (p - 1) / p;
    case models::CollectiveKind::reduce_scatter:
    case models::CollectiveKind::all_gather: return (p - 1) / p;
  }
  return 0;
}

double collective_latency(const models::Platform& platform, ClusterShape shape, models::CollectiveKind kind) {
  const int p = shape.ranks();
  if (p < 2) return 0;
  const int n = shape.nodes;
  const bool all_reduce = kind == models::CollectiveKind::all_reduce;
  // NCCL src/graph/tuning.cc, ring algorithm: nsteps = 2(p-1) or p-1, nInterSteps = 2(N-1) or N-1,
  // and a multi-node ring's intra-node steps cost at least its CPU proxy's overhead x 3 (Simple).
  const int steps = all_reduce ? 2 * (p - 1) : p - 1;
  const int network_steps = all_reduce ? 2 * (n - 1) : n - 1;
  const models::CollectiveLatency& c = platform.collectives;
  const double intra = n > 1 ? std::max(c.intra_node_step, 3 * c.network_overhead) : c.intra_node_step;
  return c.base + (steps - network_steps) * intra + network_steps * c.inter_node_step;
}

CollectiveTiming simulate_collective(const models::Platform& platform, ClusterShape shape, models::CollectiveKind kind, std::int64_t bytes) {
  check_cluster_shape(platform, shape);
  if (bytes < 1) throw InputError(fmt::format("a collective of {} bytes; expected at least 1 byte", bytes));
  if (shape.ranks() < 2) return {};
  ChildProcess child([&] {
    int argc = 1;
    char program[] = "comptrain";
    char* argv[] = {program, nullptr};
    detail::silence_simgrid();
    simgrid::s4u::Engine engine(&argc, argv);
    detail::configure_flow_model();
    const detail::ClusterNetwork network(platform, shape);
    double end = -1;
    simgrid::s4u::Actor::create("collective", network.gpu(0), [&] {
      network.run_collective(kind, bytes);
      end = simgrid::s4u::Engine::get_clock();
    });
    engine.run();
    if (!(end >= 0)) throw std::runtime_error("the collective did not end");
    return fmt::format("{:.17g}", end);
  });
  JobOutcome outcome = child.wait();
  if (outcome.status != JobOutcome::Status::result) outcome.text = "collective simulation failed: " + outcome.text;
  if (!outcome.diagnostics.empty() && outcome.status == JobOutcome::Status::result) std::fputs(outcome.diagnostics.c_str(), stderr);
  CollectiveTiming timing;
  timing.seconds = std::stod(std::move(outcome).result_or_throw());
  if (timing.seconds <= 0) return timing;  // nothing to move and no latency term: no bandwidth to speak of
  timing.algorithm_bandwidth = static_cast<double>(bytes) / timing.seconds;
  timing.bus_bandwidth = timing.algorithm_bandwidth * bus_bandwidth_factor(kind, shape.ranks());
  return timing;
}

}  // namespace comptrain::sim

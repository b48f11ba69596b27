#include "comptrain/sim/engine/collectives.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "engine/cluster_network.hpp"
#include "comptrain/sim/runtime/workers.hpp"
#include "comptrain/support/input_error.hpp"
#include "engine/simgrid_engine.hpp"

namespace comptrain::sim {

double bus_bandwidth_factor(models::CollectiveKind kind, int ranks) {
  if (ranks < 2) return 0;
  const double p = ranks;
  switch (kind) {
    case models::CollectiveKind::all_reduce: return 2 * (p - 1) / p;
    case models::CollectiveKind::reduce_scatter:
    case models::CollectiveKind::all_gather: return (p - 1) / p;
    // Each rank keeps 1/p of its buffer and sends the rest, 1/p to each other rank.
    case models::CollectiveKind::all_to_all: return (p - 1) / p;
  }
  return 0;
}

std::string_view to_string(CollectiveAlgorithm algorithm) {
  switch (algorithm) {
    case CollectiveAlgorithm::ring: return "ring";
    case CollectiveAlgorithm::tree: return "tree";
  }
  return "unknown";
}

namespace {

int floor_log2(std::int64_t value) {  // NCCL's log2i: -1 for 0
  int log = -1;
  for (; value > 0; value >>= 1) ++log;
  return log;
}

// NCCL's model constants, NVIDIA/nccl@5067397c (v2.30.7), src/graph/tuning.cc.
namespace nccl {
// ncclTopoTuneModel: "if (a == NCCL_ALGO_TREE && coll == ncclFuncAllReduce) busBw = std::min(busBw
// * .92, graphs[a]->nChannels * perChMaxTreeBw)"; the same since v2.7.3 (commit 5949d96f).
constexpr double kTreeBusBandwidthFactor = 0.92;
// ncclTunerConstantsDefaults.perChMaxTreeBws, GB/s per channel: Volta, Ampere, Hopper, Blackwell
// (compute capability below 8.0, 8.x, 9.x, 10 and up) by 1 node, 2 nodes, more.
constexpr double kPerChannelMaxTreeGBs[4][3] = {{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}};
// ncclTopoGetAlgoTime: treeCorrectionFactor[NCCL_PROTO_SIMPLE][floor(log2(bytes / 64))] for the
// 23 sizes 64 B .. 512 MB - 1 ("Trees are not perfectly sticking to the model for medium sizes").
constexpr double kTreeCorrectionSimple[23] = {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9};
// ncclTopoGetAlgoTime: "lat *= comm->minCompCap < 80 ? 1.9 : 1.4; // Plateau effect of ring", for a
// multi-node Simple all-reduce of at least 64 bytes per channel and rank.
constexpr double kRingPlateauBeforeAmpere = 1.9;
constexpr double kRingPlateau = 1.4;
}  // namespace nccl

}  // namespace

double collective_latency(const models::Platform& platform, ClusterShape shape, models::CollectiveKind kind, CollectiveAlgorithm algorithm) {
  const bool all_reduce = kind == models::CollectiveKind::all_reduce;
  if (algorithm == CollectiveAlgorithm::tree && !all_reduce) {
    throw std::invalid_argument(fmt::format("the tree latency of a {}: NCCL runs trees for all-reduces only", models::to_string(kind)));
  }
  const int p = shape.ranks();
  if (p < 2) return 0;
  const int n = shape.nodes;
  const models::CollectiveLatency& c = platform.collectives;
  if (kind == models::CollectiveKind::all_to_all) {
    // NCCL's all-to-all is one group of point-to-point sends and receives, all in flight at once
    // (src/collectives.cc, ncclAllToAll): one step, the network's when the group spans nodes.
    // Our model: the ring's base plus one step (the ring's per-step latencies, src/graph/tuning.cc).
    return c.base + (n > 1 ? c.inter_node_step : c.intra_node_step);
  }
  if (algorithm == CollectiveAlgorithm::tree) {
    // NCCL src/graph/tuning.cc, tree algorithm (all-reduce): up and down the chain of the node's
    // ppn GPUs and the floor(log2 N) levels of the tree across nodes.
    return c.tree_base + 2 * ((shape.gpus_per_node - 1) * c.tree_intra_node_step + floor_log2(n) * c.tree_inter_node_step);
  }
  // NCCL src/graph/tuning.cc, ring algorithm: nsteps = 2(p-1) or p-1, nInterSteps = 2(N-1) or N-1,
  // and a multi-node ring's intra-node steps cost at least its CPU proxy's overhead x 3 (Simple).
  const int steps = all_reduce ? 2 * (p - 1) : p - 1;
  const int network_steps = all_reduce ? 2 * (n - 1) : n - 1;
  const double intra = n > 1 ? std::max(c.intra_node_step, 3 * c.network_overhead) : c.intra_node_step;
  return c.base + (steps - network_steps) * intra + network_steps * c.inter_node_step;
}

NcclPrediction nccl_prediction(const models::Platform& platform, ClusterShape shape, models::CollectiveKind kind, std::int64_t bytes,
                               const NcclGraphBandwidths& graphs) {
  constexpr double kInfinity = std::numeric_limits<double>::infinity();
  NcclPrediction out;
  out.tree_seconds = kInfinity;
  const int p = shape.ranks();
  if (p < 2) return out;
  const int n = shape.nodes;
  const bool all_reduce = kind == models::CollectiveKind::all_reduce;
  const double size = static_cast<double>(bytes);
  const int channels = std::max(graphs.channels, 1);
  const int compute_capability = 10 * platform.gpu.compute_capability_major + platform.gpu.compute_capability_minor;

  // Ring: algbw = busBw x nRanks / nsteps.
  const double ring_algbw = graphs.ring * p / (all_reduce ? 2.0 * (p - 1) : p - 1.0);
  double ring_latency = collective_latency(platform, shape, kind, CollectiveAlgorithm::ring);
  if (all_reduce && n > 1 && size / (static_cast<double>(channels) * p) >= 64) {
    ring_latency *= compute_capability < 80 ? nccl::kRingPlateauBeforeAmpere : nccl::kRingPlateau;
  }
  out.ring_seconds = ring_latency + (ring_algbw > 0 ? size / ring_algbw : kInfinity);

  if (all_reduce) {
    // Tree: busBw = min(0.92 x graph, channels x per-channel cap), algbw = busBw / 2. The cap is
    // applied across nodes only: on one node NCCL's channels come from its NVLink search, not
    // modelled here (12 on an A100 or H100 node, whose caps, 12 x 24 and 12 x 38.7 GB/s, lie
    // above 0.92 x NVLink; the ring wins there in any case: more bandwidth and a shorter latency).
    double tree_bus = nccl::kTreeBusBandwidthFactor * graphs.tree;
    if (n > 1) {
      const int generation = compute_capability >= 100 ? 3 : compute_capability >= 90 ? 2 : compute_capability >= 80 ? 1 : 0;
      tree_bus = std::min(tree_bus, channels * nccl::kPerChannelMaxTreeGBs[generation][std::min(n, 3) - 1] * 1e9);
    }
    double tree_algbw = tree_bus / 2;
    const int log_size = floor_log2(bytes >> 6);
    if (log_size >= 0 && log_size < 23) tree_algbw *= nccl::kTreeCorrectionSimple[log_size];
    out.tree_seconds = collective_latency(platform, shape, kind, CollectiveAlgorithm::tree) + (tree_algbw > 0 ? size / tree_algbw : kInfinity);
  }

  // NCCL tries the tree first and takes a later algorithm only when strictly faster
  // (src/enqueue.cc, topoGetAlgoInfo).
  switch (platform.collectives.algorithm) {
    case models::NcclAlgorithm::ring: out.algorithm = CollectiveAlgorithm::ring; break;
    case models::NcclAlgorithm::tree: out.algorithm = all_reduce ? CollectiveAlgorithm::tree : CollectiveAlgorithm::ring; break;
    case models::NcclAlgorithm::automatic:
      out.algorithm = all_reduce && out.tree_seconds <= out.ring_seconds ? CollectiveAlgorithm::tree : CollectiveAlgorithm::ring;
      break;
  }
  return out;
}

CollectiveTiming simulate_collective(const models::Platform& platform, ClusterShape shape, models::CollectiveKind kind, std::int64_t bytes) {
  check_cluster_shape(platform, shape);
  if (bytes < 1) throw InputError(fmt::format("a collective of {} bytes; expected at least 1 byte", bytes));
  if (shape.ranks() < 2) return {};
  ChildProcess child([&] {
    detail::ConfiguredEngine engine;
    const detail::ClusterNetwork network(platform, shape);
    CollectiveTiming ran;
    double end = -1;
    ran.algorithm = network.algorithm_for(kind, bytes);
    ran.prediction = network.prediction(kind, bytes);
    simgrid::s4u::Actor::create("collective", network.gpu(0), [&] {
      network.run_collective(kind, bytes, ran.algorithm);
      end = simgrid::s4u::Engine::get_clock();
    });
    engine.run();
    if (!(end >= 0)) throw std::runtime_error("the collective did not end");
    ran.seconds = end;
    return wire::encode(ran);
  });
  JobOutcome outcome = child.wait();
  if (outcome.status != JobOutcome::Status::result) outcome.text = "collective simulation failed: " + outcome.text;
  if (!outcome.diagnostics.empty() && outcome.status == JobOutcome::Status::result) std::fputs(outcome.diagnostics.c_str(), stderr);
  CollectiveTiming timing = wire::decode<CollectiveTiming>(std::move(outcome).result_or_throw());
  if (timing.seconds <= 0) return timing;  // nothing to move and no latency term: no bandwidth to speak of
  timing.algorithm_bandwidth = static_cast<double>(bytes) / timing.seconds;
  timing.bus_bandwidth = timing.algorithm_bandwidth * bus_bandwidth_factor(kind, shape.ranks());
  return timing;
}

double ring_bus_bandwidth(const models::Platform& platform, ClusterShape shape, models::CollectiveKind kind, std::int64_t bytes) {
  models::Platform ring = platform;
  ring.collectives.algorithm = models::NcclAlgorithm::ring;
  return simulate_collective(ring, shape, kind, bytes).bus_bandwidth;
}

static_assert(std::is_trivially_copyable_v<CollectiveTiming>, "CollectiveTiming crosses the pipe as its bytes");
void wire::Codec<CollectiveTiming>::write(wire::Writer& w, const CollectiveTiming& timing) { w.put(timing); }
CollectiveTiming wire::Codec<CollectiveTiming>::read(wire::Reader& in) { return in.get<CollectiveTiming>(); }

}  // namespace comptrain::sim

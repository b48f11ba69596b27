#pragma once
// Collectives on a cluster (a platform with a `network`, or one multi-GPU node): how long one
// NCCL all-reduce (ring or tree, as NCCL picks or as collectives.algorithm forces), reduce-scatter
// or all-gather (rings) takes over every GPU of a shape of the cluster, simulated with SimGrid on
// the cluster's links (sim/README.md, "Clusters and collectives"). The network itself is built by
// sim/src/cluster_network.hpp, which the replay uses too.

#include <cstdint>
#include <string_view>

#include "comptrain/models/platform.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/sim/core/cluster_shape.hpp"
#include "comptrain/sim/runtime/wire.hpp"

namespace comptrain::sim {

// nccl-tests' bus-bandwidth factor (doc/PERFORMANCE.md): 2(p-1)/p for an all-reduce, (p-1)/p for a
// reduce-scatter or an all-gather; 0 for one rank (nothing moves).
double bus_bandwidth_factor(models::CollectiveKind kind, int ranks);

// NCCL's two algorithms for collectives on GPUs across nodes: the pipelined rail-aligned ring, and
// (all-reduce only) the double binary tree across nodes with a chain through each node's GPUs.
enum class CollectiveAlgorithm : std::uint8_t { ring, tree };
std::string_view to_string(CollectiveAlgorithm algorithm);  // "ring", "tree"

// NCCL's latency term of one collective over `shape` (platform.collectives; src/graph/tuning.cc,
// Simple protocol, scenarios/platforms/README.md "Clusters"). Ring: base + (steps - network
// steps) x intra + network steps x inter. Tree (all-reduce only; std::invalid_argument for another
// kind): tree_base + 2 x ((ppn - 1) x tree_intra + floor(log2 nodes) x tree_inter). 0 for one rank.
double collective_latency(const models::Platform& platform, ClusterShape shape, models::CollectiveKind kind,
                          CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring);

// What NCCL's model (tuning.cc, ncclTopoTuneModel) takes from its topology search: each
// algorithm's graph bus bandwidth (nChannels x bw, bytes/s) and the graph's channels.
struct NcclGraphBandwidths {
  double ring = 0;   // the ring graph's bus bandwidth
  double tree = 0;   // the tree graph's (bwIntra on up to 2 nodes, bwInter beyond)
  int channels = 1;  // graph channels: the per-channel tree cap and the ring's plateau threshold use it
};

// NCCL's own prediction of one collective (ncclTopoGetAlgoTime: latency + bytes / algbw, Simple
// protocol) and the algorithm NCCL runs. Ring: algbw = ring x p / nsteps (nsteps 2(p-1) for an
// all-reduce, p-1 otherwise), and a multi-node all-reduce's latency x 1.4 (x 1.9 below compute
// capability 8.0) when bytes / (channels x p) >= 64 (the ring's "plateau"). Tree (all-reduce only):
// bus bandwidth 0.92 x tree, on more than one node at most channels x perChMaxTreeBw (per
// compute capability and node count), algbw = half of it x treeCorrectionFactor at 64 B .. 512 MB.
// `algorithm`: the model's faster one (tree on a tie: NCCL tries it first), or the one
// platform.collectives.algorithm forces; always ring for a reduce-scatter or an all-gather. One
// rank: all zeros, ring. Sources beside the constants (sim/src/collectives.cpp).
struct NcclPrediction {
  double ring_seconds = 0;
  double tree_seconds = 0;  // +infinity where there is no tree: not an all-reduce, or one rank
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring;
};
NcclPrediction nccl_prediction(const models::Platform& platform, ClusterShape shape, models::CollectiveKind kind, std::int64_t bytes,
                               const NcclGraphBandwidths& graphs);

struct CollectiveTiming {
  double seconds = 0;
  double algorithm_bandwidth = 0;  // bytes / seconds: nccl-tests' algbw
  double bus_bandwidth = 0;        // algbw x bus_bandwidth_factor: nccl-tests' busbw
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring;  // the one that ran
  NcclPrediction prediction;       // NCCL's model on this cluster (nccl_prediction)
};

// How a timing crosses from the collective's child process (runtime/wire.hpp).
template <>
struct wire::Codec<CollectiveTiming> {
  static constexpr std::string_view tag = "CollectiveTiming";
  static constexpr std::uint32_t version = 1;
  static void write(wire::Writer& w, const CollectiveTiming& timing);
  static CollectiveTiming read(wire::Reader& in);
};

// One collective of `bytes` (counted as nccl-tests counts the size: the buffer of an all-reduce,
// the input of a reduce-scatter, the output of an all-gather) over every rank of `shape`, alone on
// the cluster, with the algorithm NCCL picks or platform.collectives.algorithm forces. SimGrid runs
// in a forked child (its engine cannot be reset within a process). InputError for a bad shape or
// bytes < 1; the timing of one rank is all zeros.
CollectiveTiming simulate_collective(const models::Platform& platform, ClusterShape shape, models::CollectiveKind kind,
                                     std::int64_t bytes);

// nccl-tests' busbw (bytes/s) of that collective with NCCL's ring forced: how a measured bus
// bandwidth is predicted, by comptrain validate's bus_bandwidth points and by calibrate
// --from-collectives alike (an all-to-all has no algorithm to force).
double ring_bus_bandwidth(const models::Platform& platform, ClusterShape shape, models::CollectiveKind kind, std::int64_t bytes);

}  // namespace comptrain::sim

#pragma once
// The SimGrid platform of a cluster, and NCCL's ring collectives on it (sim/README.md, "Clusters
// and collectives"). Internal to comptrain::sim: the replay (simulation.cpp) builds its platform
// here, and collectives.cpp runs one collective alone.
//
// What is built, inside a created sg4::Engine (before engine.run()):
//  - per node, a full zone with one host per GPU (kGpuSpeed), the node's host memory end ("host"),
//    the pageable staging host when host_link has a pageable_bandwidth, and a NIC router as the
//    zone's gateway when there is a network;
//  - per GPU, split-duplex links: PCIe (host_link), NVLink (gpu_link: the GPU's port into the
//    NVSwitch), and per NIC one (nic). Routes: GPU<->host = {pcie}, plus the node's shared memory
//    link when the node has more than one GPU; GPU<->GPU = {nvlink UP, nvlink DOWN} (through PCIe
//    when there is no gpu_link); GPU<->router = {its NIC};
//  - between nodes, SimGrid's fat-tree, dragonfly or torus zone with the nodes as leaves (places
//    beyond the shape's nodes hold a bare router).
// With shape {1, 1} this is exactly the single-GPU replay's platform as it was: one zone "node",
// hosts "gpu" and "host", the split-duplex "host_link" and the pageable staging host and link.

#include <simgrid/s4u.hpp>

#include <cstdint>
#include <utility>
#include <vector>

#include "comptrain/models/platform.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/sim/collectives.hpp"

namespace comptrain::sim::detail {

namespace sg4 = simgrid::s4u;

// A GPU host's speed in SimGrid work units per second. A task of `s` seconds is an exec of
// s * kGpuSpeed units, so concurrent kernels share the GPU (SimGrid's fair sharing) and a kernel
// alone takes exactly its modeled time.
inline constexpr double kGpuSpeed = 1e9;

using sim::ClusterShape;

class ClusterNetwork {
 public:
  // Builds the SimGrid platform of `shape` on `platform`; called inside a created sg4::Engine
  // before engine.run(). InputError when the shape exceeds the platform (check_cluster_shape).
  ClusterNetwork(const models::Platform& platform, ClusterShape shape);

  ClusterShape shape() const { return shape_; }
  sg4::Host* gpu(int rank) const;               // rank = node * gpus_per_node + local
  sg4::Host* host(int node) const;              // the node's host memory end of each GPU's PCIe link
  sg4::Host* pageable_staging(int node) const;  // nullptr when host_link has no pageable_bandwidth

  // One collective over all ranks, run from the calling actor (blocks it until every rank's part
  // has ended): `bytes` as nccl-tests counts the size (all_reduce: the buffer; reduce_scatter: the
  // input; all_gather: the output). NCCL's latency term first, then one SimGrid communication per
  // GPU per ring carrying its whole share (the rings' NVLink sends from one GPU to its neighbour
  // as one); contention with other traffic is SimGrid's.
  void run_collective(models::CollectiveKind kind, std::int64_t bytes) const;

  // Its time on an idle network, computed without running SimGrid: the latency term, the longest
  // route's link latency (0 but over PCIe) and, over every link the rings cross, the largest
  // bytes / bandwidth (for reports and tests; the rings load their links evenly, so SimGrid's
  // max-min sharing gives the same).
  double idle_collective_seconds(models::CollectiveKind kind, std::int64_t bytes) const;

  // What one GPU sends in one ring: factor x bytes / rings with nccl-tests' factor
  // (bus_bandwidth_factor), rounded to a whole byte (SimGrid's payloads are integers).
  std::uint64_t bytes_per_send(models::CollectiveKind kind, std::int64_t bytes) const;
  int rings() const { return rings_; }
  // The communications of one collective: `rings` rings' sends from one GPU to the next, which
  // share a route (plan_rings), as one communication of rings x bytes_per_send.
  struct Send {
    sg4::Host* from = nullptr;
    sg4::Host* to = nullptr;
    int rings = 1;
  };
  const std::vector<Send>& ring_sends() const { return sends_; }

 private:
  struct Node {
    sg4::NetZone* zone = nullptr;
    sg4::Host* host = nullptr;
    sg4::Host* staging = nullptr;
    std::vector<sg4::Host*> gpus;
  };

  // Builds node `index`'s zone under `parent` (nullptr: it is the root); returns its NIC router
  // (nullptr without a network).
  simgrid::kernel::routing::NetPoint* build_node(int index, sg4::NetZone* parent);
  void build_network();
  void plan_rings();

  models::Platform platform_;  // a copy, so that the caller's platform need not outlive the network
  ClusterShape shape_;
  std::vector<Node> nodes_;
  int rings_ = 0;
  std::vector<Send> sends_;
};

}  // namespace comptrain::sim::detail

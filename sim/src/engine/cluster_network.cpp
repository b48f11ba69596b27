#include "engine/cluster_network.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace comptrain::sim::detail {
namespace {

using simgrid::kernel::routing::NetPoint;
using Direction = sg4::LinkInRoute::Direction;

}  // namespace

ClusterNetwork::ClusterNetwork(const models::Platform& platform, ClusterShape shape) : platform_(platform), shape_(shape) {
  check_cluster_shape(platform_, shape_);
  nodes_.resize(static_cast<std::size_t>(shape_.nodes));
  if (shape_.nodes == 1) {
    build_node(0, nullptr);  // the root zone: one node, as the single-GPU replay always built
  } else {
    build_network();
    collect_network_links();
  }
  plan_rings();
  plan_trees();
}

sg4::Host* ClusterNetwork::gpu(int rank) const {
  if (rank < 0 || rank >= shape_.ranks()) throw std::out_of_range(fmt::format("GPU rank {} of {}", rank, shape_.ranks()));
  return nodes_[static_cast<std::size_t>(rank / shape_.gpus_per_node)].gpus[static_cast<std::size_t>(rank % shape_.gpus_per_node)];
}

sg4::Host* ClusterNetwork::gpu_power(int rank) const {
  if (rank < 0 || rank >= shape_.ranks()) throw std::out_of_range(fmt::format("GPU rank {} of {}", rank, shape_.ranks()));
  const Node& node = nodes_[static_cast<std::size_t>(rank / shape_.gpus_per_node)];
  return node.gpu_power.empty() ? nullptr : node.gpu_power[static_cast<std::size_t>(rank % shape_.gpus_per_node)];
}

sg4::Host* ClusterNetwork::host(int node) const { return nodes_.at(static_cast<std::size_t>(node)).host; }

sg4::Host* ClusterNetwork::pageable_staging(int node) const { return nodes_.at(static_cast<std::size_t>(node)).staging; }

void ClusterNetwork::add_power(sg4::Link* link, double idle, double busy, double bandwidth, std::vector<PoweredLink>& into) {
  if (link == nullptr || !(busy > 0)) return;
  const std::string range = fmt::format("{:.17g}:{:.17g}", idle, busy);
  // A property on a SplitDuplexLink is ignored (0 J, measured: shared/reference/distributed.md
  // §6): each direction gets its own and counts its own idle power.
  std::vector<sg4::Link*> directions{link};
  if (auto* duplex = dynamic_cast<sg4::SplitDuplexLink*>(link)) directions = {duplex->get_link_up(), duplex->get_link_down()};
  for (sg4::Link* direction : directions) {
    direction->set_property("wattage_range", range);
    into.push_back({direction, idle, busy, bandwidth});
  }
}

// The network's links are SimGrid's own (its fat-tree, dragonfly or torus zone creates them):
// every link of the engine that is no node's.
void ClusterNetwork::collect_network_links() {
  const models::LinkSpec& spec = platform_.network->link;
  if (!(spec.busy_power > 0)) return;
  std::unordered_map<const sg4::Link*, bool> node_link;
  for (const Node& node : nodes_) {
    for (const PoweredLink& l : node.links) node_link[l.link] = true;
  }
  std::vector<PoweredLink> found;
  for (sg4::Link* link : sg4::Engine::get_instance()->get_all_links()) {
    if (node_link.count(link) != 0 || link->get_name().rfind("node", 0) == 0) continue;  // a node's (every node link's name starts with it)
    add_power(link, spec.idle_power, spec.busy_power, spec.bandwidth, found);
  }
  // A split-duplex link and its directions may both be listed: each direction once.
  std::unordered_map<const sg4::Link*, bool> seen;
  for (const PoweredLink& l : found) {
    if (seen.emplace(l.link, true).second) network_links_.push_back(l);
  }
}

namespace {

// The routes between a GPU and a host-memory end, one per direction: the GPU's PCIe link first,
// then the shared links (host memory, staging). Written out rather than declared symmetrical: in
// SimGrid 3.32 (Debian 3.32-2) a route whose shared link comes before a split-duplex link's DOWN
// direction (what a symmetrical route's reversal gives) loses the DOWN link's bound when two
// such flows share the shared link: two host-to-GPU copies of 400 MB over 25 GB/s PCIe links
// and a 409.6 GB/s memory link took 16 ms and 1.04 ms instead of 16 ms each (reproduced with
// bare s4u; with the split-duplex link first both take 16 ms). The order changes nothing else:
// a route's links are a set to the flow model.
void add_host_routes(sg4::NetZone* zone, sg4::Host* gpu, sg4::Host* host_end, sg4::Link* pcie, std::initializer_list<sg4::Link*> shared) {
  std::vector<sg4::LinkInRoute> up{sg4::LinkInRoute(pcie, Direction::UP)};
  std::vector<sg4::LinkInRoute> down{sg4::LinkInRoute(pcie, Direction::DOWN)};
  for (sg4::Link* link : shared) {
    if (link == nullptr) continue;
    up.emplace_back(link);
    down.emplace_back(link);
  }
  zone->add_route(gpu->get_netpoint(), host_end->get_netpoint(), nullptr, nullptr, up, false);
  zone->add_route(host_end->get_netpoint(), gpu->get_netpoint(), nullptr, nullptr, down, false);
}

}  // namespace

NetPoint* ClusterNetwork::build_node(int index, sg4::NetZone* parent) {
  Node& node = nodes_[static_cast<std::size_t>(index)];
  const int gpus = shape_.gpus_per_node;
  // One node with one GPU keeps the names the single-GPU replay always used; otherwise every name
  // says its node (SimGrid's host and link names are global).
  const bool single = shape_.nodes == 1 && gpus == 1;
  const std::string prefix = shape_.nodes == 1 ? "" : fmt::format("node{}.", index);
  const auto name = [&](const std::string& what) { return prefix + what; };
  const auto gpu_name = [&](int local) { return single ? name("gpu") : name(fmt::format("gpu{}", local)); };

  node.zone = sg4::create_full_zone(shape_.nodes == 1 ? "node" : fmt::format("node{}", index));
  if (parent != nullptr) node.zone->set_parent(parent);
  // The energy plugin's power per state, Idle:Epsilon:AllCores (sim/energy.hpp). A GPU with power
  // values draws on its power host, beside it: in_job with nothing running (whether SimGrid calls
  // it Idle or Epsilon), in_job + load x (max - in_job) while the replay runs a bounded exec there
  // whose load is the running kernels' power (GpuPowerDraw). The GPU host itself, which times the
  // kernels, draws nothing.
  const models::GpuSpec& g_spec = platform_.gpu;
  const std::string power_watts = fmt::format("{0:.17g}:{0:.17g}:{1:.17g}", g_spec.in_job_power, g_spec.max_power);
  const std::string host_watts = fmt::format("{0:.17g}:{0:.17g}:{1:.17g}", platform_.host.idle_power, platform_.host.max_power);
  for (int g = 0; g < gpus; ++g) {
    node.gpus.push_back(node.zone->create_host(gpu_name(g), kGpuSpeed)->set_property("wattage_per_state", "0:0:0")->seal());
    if (g_spec.max_power > 0) {
      node.gpu_power.push_back(
          node.zone->create_host(gpu_name(g) + ".power", kGpuPowerSpeed)->set_property("wattage_per_state", power_watts)->seal());
    }
  }
  const double host_speed = platform_.host.flops > 0 ? platform_.host.flops : 1e9;
  node.host = node.zone->create_host(name("host"), host_speed)->set_property("wattage_per_state", host_watts)->seal();

  // The host's memory bandwidth, shared by every copy of the node's GPUs to and from host memory
  // (one link for both directions: DRAM reads and writes share it). Only where GPUs share it: a
  // single GPU's routes stay the single-GPU replay's (its PCIe link binds long before memory).
  sg4::Link* memory = nullptr;
  if (gpus > 1) memory = node.zone->create_link(name("host_memory"), platform_.host.memory_bandwidth)->seal();

  // PCIe is full duplex: a split-duplex link per GPU gives each direction its own bandwidth.
  std::vector<sg4::Link*> pcie;
  for (int g = 0; g < gpus; ++g) {
    pcie.push_back(node.zone->create_split_duplex_link(single ? name("host_link") : name(fmt::format("host_link{}", g)),
                                                       platform_.host_link.bandwidth)
                       ->set_latency(platform_.host_link.latency)
                       ->seal());
    add_power(pcie.back(), platform_.host_link.idle_power, platform_.host_link.busy_power, platform_.host_link.bandwidth, node.links);
    add_host_routes(node.zone, node.gpus[static_cast<std::size_t>(g)], node.host, pcie.back(), {memory});
  }

  // Pageable host memory: the driver copies between it and its pinned staging buffers on the
  // CPU while the DMA engine moves the staged data over PCIe, so a pageable copy crosses the PCIe
  // link and a staging link of host_link.pageable_bandwidth, one link shared by both directions
  // and by the node's GPUs (the host's memcpy). SimGrid's flow model then gives each copy the
  // smaller share, and pinned copies still contend with it on PCIe.
  if (platform_.host_link.pageable_bandwidth > 0) {
    // Its memcpy work is the host's; the staging host stands for memory and draws nothing itself.
    node.staging = node.zone->create_host(name("pageable_host_memory"), host_speed)->set_property("wattage_per_state", "0:0:0")->seal();
    sg4::Link* staging = node.zone->create_link(name("pageable_staging"), platform_.host_link.pageable_bandwidth)->seal();
    for (int g = 0; g < gpus; ++g) {
      add_host_routes(node.zone, node.gpus[static_cast<std::size_t>(g)], node.staging, pcie[static_cast<std::size_t>(g)], {memory, staging});
    }
  }

  // GPU to GPU: each GPU's port into the NVSwitch, up on the sender, down on the receiver. The
  // links carry no latency (NCCL's latency term is added once per collective, and equal-latency
  // routes keep SimGrid's sharing fair: shared/reference/simgrid.md, pitfall 7). Without NVLink,
  // peer traffic crosses both GPUs' PCIe links.
  if (gpus > 1) {
    std::vector<sg4::Link*> ports;
    if (platform_.gpu_link.bandwidth > 0) {
      for (int g = 0; g < gpus; ++g) {
        ports.push_back(node.zone->create_split_duplex_link(name(fmt::format("gpu_link{}", g)), platform_.gpu_link.bandwidth)->seal());
        add_power(ports.back(), platform_.gpu_link.idle_power, platform_.gpu_link.busy_power, platform_.gpu_link.bandwidth, node.links);
      }
    } else {
      ports = pcie;
    }
    for (int a = 0; a < gpus; ++a) {
      for (int b = a + 1; b < gpus; ++b) {
        node.zone->add_route(node.gpus[static_cast<std::size_t>(a)]->get_netpoint(), node.gpus[static_cast<std::size_t>(b)]->get_netpoint(), nullptr,
                             nullptr,
                             {sg4::LinkInRoute(ports[static_cast<std::size_t>(a)], Direction::UP),
                              sg4::LinkInRoute(ports[static_cast<std::size_t>(b)], Direction::DOWN)},
                             true);
      }
    }
  }

  // The node's NICs, each shared by gpus_per_node / per_node neighbouring GPUs, and the router
  // through which the node reaches the network (the zone's gateway).
  NetPoint* router = nullptr;
  if (parent != nullptr) {
    router = node.zone->create_router(name("nic_router"));
    const int gpus_per_nic = platform_.gpus_per_node / platform_.nic->per_node;
    std::vector<sg4::Link*> nics;
    for (int g = 0; g < gpus; ++g) {
      const int nic = g / gpus_per_nic;
      if (static_cast<std::size_t>(nic) == nics.size()) {
        nics.push_back(node.zone->create_split_duplex_link(name(fmt::format("nic{}", nic)), platform_.nic->bandwidth)->seal());
        add_power(nics.back(), platform_.nic->idle_power, platform_.nic->busy_power, platform_.nic->bandwidth, node.links);
      }
      node.zone->add_route(node.gpus[static_cast<std::size_t>(g)]->get_netpoint(), router, nullptr, nullptr,
                           {sg4::LinkInRoute(nics[static_cast<std::size_t>(nic)], Direction::UP)}, true);
    }
  }
  node.zone->seal();
  return router;
}

std::vector<unsigned long> torus_dimensions_built(const std::vector<int>& torus) {
  // A dimension of extent 1 has no neighbour but the node itself: SimGrid 3.32's torus zone still
  // gives every node a link in it, named after its two ends ("network_link_from_0_to_0"), so two
  // such dimensions declare the same link twice and SimGrid aborts (shared/defects-2/04), and one
  // adds a self-link per node that no route takes but the link energy plugin counts as idle.
  // Left out, the torus routes the same: a leaf's id is its coordinates' mixed-radix number, to
  // which a dimension of 1 adds nothing, and dimension-order routing never steps along one.
  std::vector<unsigned long> built;
  for (const int extent : torus) {
    if (extent > 1) built.push_back(static_cast<unsigned long>(extent));
  }
  if (built.empty()) built.push_back(1);  // one place: SimGrid needs a dimension (never built: one node has no network)
  return built;
}

void ClusterNetwork::build_network() {
  const models::NetworkSpec& network = *platform_.network;
  // A leaf of the topology: the next node's zone and its NIC router, or a bare router where the
  // topology has more places than the shape has nodes (SimGrid routes nothing to it).
  const auto leaf = [this](sg4::NetZone* cluster, const std::vector<unsigned long>& /*coordinates*/,
                           unsigned long id) -> std::pair<NetPoint*, NetPoint*> {
    if (id >= static_cast<unsigned long>(shape_.nodes)) return {cluster->create_router(fmt::format("empty{}", id)), nullptr};
    NetPoint* router = build_node(static_cast<int>(id), cluster);
    return {nodes_[id].zone->get_netpoint(), router};
  };
  const sg4::ClusterCallbacks callbacks(leaf);
  // No latency on the network's links either (see build_node); split duplex: full-duplex cables.
  constexpr auto kSplitDuplex = sg4::Link::SharingPolicy::SPLITDUPLEX;
  const double bandwidth = network.link.bandwidth;
  const auto unsigned_list = [](const std::vector<int>& values) { return std::vector<unsigned>(values.begin(), values.end()); };
  sg4::NetZone* cluster = nullptr;
  switch (network.topology) {
    case models::NetworkTopology::fat_tree: {
      const sg4::FatTreeParams params(static_cast<unsigned>(network.fat_tree.levels), unsigned_list(network.fat_tree.down),
                                      unsigned_list(network.fat_tree.up), unsigned_list(network.fat_tree.links));
      cluster = sg4::create_fatTree_zone("network", nullptr, params, callbacks, bandwidth, 0, kSplitDuplex);
      break;
    }
    case models::NetworkTopology::dragonfly: {
      const models::DragonflyShape& d = network.dragonfly;
      const auto pair = [](int count, int links) { return std::pair<unsigned, unsigned>(static_cast<unsigned>(count), static_cast<unsigned>(links)); };
      const sg4::DragonflyParams params(pair(d.groups, d.group_links), pair(d.chassis, d.chassis_links), pair(d.routers, d.router_links),
                                        static_cast<unsigned>(d.nodes));
      cluster = sg4::create_dragonfly_zone("network", nullptr, params, callbacks, bandwidth, 0, kSplitDuplex);
      break;
    }
    case models::NetworkTopology::torus: {
      const std::vector<unsigned long> dimensions = torus_dimensions_built(network.torus);
      cluster = sg4::create_torus_zone("network", nullptr, dimensions, callbacks, bandwidth, 0, kSplitDuplex);
      break;
    }
  }
  cluster->seal();
}

// NCCL's rings (shared/reference/distributed.md §1, §7): within one node, a ring through the
// node's GPUs over the NVSwitch (one ring already loads every GPU's port in both directions, so
// more rings would only split the same bytes). Across nodes, one rail-aligned ring per NIC the
// shape's GPUs use: ring k enters every node at the GPU of NIC k, runs through the node's GPUs over
// NVLink and leaves for the next node through NIC k again (NCCL sends the last GPU's data through
// that NIC over NVLink, PXN; its NVLink hop is left out here). All rings run at once, pipelined
// inside and between nodes, never one phase after another.
//
// Every ring's NVLink hops go from GPU l to GPU l+1 of the node, so the sends a GPU makes to its
// neighbour, one per ring, share one route: they are one communication carrying all of them
// (fewer communications for SimGrid, the same bytes on the same links).
void ClusterNetwork::plan_rings() {
  const int g = shape_.gpus_per_node;
  const int n = shape_.nodes;
  if (shape_.ranks() < 2) return;
  const auto local = [&](int node, int index) { return nodes_[static_cast<std::size_t>(node)].gpus[static_cast<std::size_t>(index % g)]; };
  if (n == 1) {
    rings_ = 1;
    for (int i = 0; i < g; ++i) sends_.push_back({local(0, i), local(0, i + 1), 1});
    return;
  }
  const int gpus_per_nic = platform_.gpus_per_node / platform_.nic->per_node;
  rings_ = (g + gpus_per_nic - 1) / gpus_per_nic;
  // Ring k enters a node at GPU k x gpus_per_nic and leaves it from the GPU before, which sends
  // nothing over NVLink in that ring: GPU l sends to l+1 in every ring but those entering at l+1.
  std::vector<int> nvlink_rings(static_cast<std::size_t>(g), rings_);
  for (int k = 0; k < rings_; ++k) --nvlink_rings[static_cast<std::size_t>((k * gpus_per_nic + g - 1) % g)];
  for (int node = 0; node < n; ++node) {
    for (int l = 0; g > 1 && l < g; ++l) {
      if (nvlink_rings[static_cast<std::size_t>(l)] > 0) sends_.push_back({local(node, l), local(node, l + 1), nvlink_rings[static_cast<std::size_t>(l)]});
    }
    for (int k = 0; k < rings_; ++k) sends_.push_back({local(node, k * gpus_per_nic), local((node + 1) % n, k * gpus_per_nic), 1});
  }
}

std::array<int, 2> double_binary_tree_parents(int nodes, int node) {
  if (nodes < 1 || node < 0 || node >= nodes) throw std::out_of_range(fmt::format("node {} of a tree of {}", node, nodes));
  // Tree 0: node 0 is the root; any other node r hangs under r with its lowest set bit cleared and
  // the bit above it set, or with that bit only cleared where the first would be past the last node.
  const auto parent = [nodes](int r) {
    if (r == 0) return -1;
    const int low = r & -r;
    const int up = (r ^ low) | (low << 1);
    return up < nodes ? up : r ^ low;
  };
  std::array<int, 2> parents{parent(node), -1};
  if (nodes % 2 == 0) {
    // Mirrored: node r plays node nodes-1-r of tree 0.
    const int up = parent(nodes - 1 - node);
    parents[1] = up < 0 ? -1 : nodes - 1 - up;
  } else {
    // Shifted by one: node r plays node r-1 of tree 0 (a mirror of an odd count would keep the
    // middle node interior in both).
    const int up = parent((node - 1 + nodes) % nodes);
    parents[1] = up < 0 ? -1 : (up + 1) % nodes;
  }
  return parents;
}

// NCCL's tree all-reduce (NCCL >= 2.4; shared/reference/distributed.md §1): within each node a
// chain through the node's GPUs over NVLink, across nodes the double binary tree
// (double_binary_tree_parents), each of the two trees carrying half of the buffer: the reduction
// goes up the chains and the trees to the roots, the broadcast comes back down, pipelined, so
// every edge carries its tree's half once each way and all edges run at once.
//
// Across nodes there is one chain per rail, as there is one ring (ring k's rail; NCCL gives each
// channel of its tree graph a NIC, and runs both trees over a channel's chain): chain k starts at
// the GPU of NIC k, which also talks to the parent's and the children's chain heads through NIC k,
// and runs through the node's GPUs in order (the rings' order, so that its NVLink sends share the
// rings' routes). On one node there is no network: one chain per GPU, headed by it, so that the
// chains' ends are spread over the GPUs as NCCL's channels spread them (a single chain would load
// its middle GPUs' ports with 2 x bytes and its ends with half of that).
//
// Every (tree, chain) carries bytes / (2 x chains): one share per edge and direction. The sends
// between the same two GPUs, over every tree, chain and direction, are one communication.
void ClusterNetwork::plan_trees() {
  const int g = shape_.gpus_per_node;
  const int n = shape_.nodes;
  if (shape_.ranks() < 2) return;
  std::vector<int> heads;
  if (n == 1) {
    for (int l = 0; l < g; ++l) heads.push_back(l);
  } else {
    const int gpus_per_nic = platform_.gpus_per_node / platform_.nic->per_node;
    for (int k = 0; k < rings_; ++k) heads.push_back(k * gpus_per_nic);
  }
  chains_ = static_cast<int>(heads.size());
  const auto rank = [g](int node, int local) { return node * g + local % g; };
  std::map<std::pair<int, int>, int> shares;  // (from rank, to rank): ordered, so that the plan is deterministic
  for (const int head : heads) {
    for (int node = 0; node < n; ++node) {
      for (int i = 0; i + 1 < g; ++i) {
        const int a = rank(node, head + i);
        const int b = rank(node, head + i + 1);
        shares[{a, b}] += 2;  // the broadcast down the chain, in each of the two trees
        shares[{b, a}] += 2;  // the reduction up the chain
      }
    }
    for (int node = 0; n > 1 && node < n; ++node) {
      for (const int parent : double_binary_tree_parents(n, node)) {
        if (parent < 0) continue;
        ++shares[{rank(node, head), rank(parent, head)}];  // the reduction to the parent
        ++shares[{rank(parent, head), rank(node, head)}];  // the broadcast from it
      }
    }
  }
  for (const auto& [pair, count] : shares) tree_sends_.push_back({gpu(pair.first), gpu(pair.second), count});
}

std::uint64_t ClusterNetwork::bytes_per_send(models::CollectiveKind kind, std::int64_t bytes) const {
  if (rings_ == 0) return 0;
  // A ring over p ranks sends 2(p-1) chunks of bytes/p from every rank for an all-reduce, p-1 for
  // the others; each of the r rings moves 1/r of the buffer.
  const double share = bus_bandwidth_factor(kind, shape_.ranks()) * static_cast<double>(bytes) / rings_;
  return static_cast<std::uint64_t>(std::llround(share));
}

std::uint64_t ClusterNetwork::bytes_per_tree_share(std::int64_t bytes) const {
  if (chains_ == 0) return 0;
  return static_cast<std::uint64_t>(std::llround(static_cast<double>(bytes) / (2.0 * chains_)));
}

CollectiveAlgorithm ClusterNetwork::algorithm_for(models::CollectiveKind kind, std::int64_t bytes) const {
  if (kind != models::CollectiveKind::all_reduce || shape_.ranks() < 2) return CollectiveAlgorithm::ring;
  switch (platform_.collectives.algorithm) {
    case models::NcclAlgorithm::ring: return CollectiveAlgorithm::ring;
    case models::NcclAlgorithm::tree: return CollectiveAlgorithm::tree;
    case models::NcclAlgorithm::automatic: break;
  }
  return prediction(kind, bytes).algorithm;
}

NcclPrediction ClusterNetwork::prediction(models::CollectiveKind kind, std::int64_t bytes) const {
  return nccl_prediction(platform_, shape_, kind, bytes, graph_bandwidths());
}

NcclGraphBandwidths ClusterNetwork::graph_bandwidths() const {
  if (graphs_) return *graphs_;
  NcclGraphBandwidths graphs;
  graphs.channels = std::max(rings_, 1);
  if (shape_.ranks() >= 2) {
    // Loads are linear in the bytes: any size gives the same bandwidths (1 GB, without rounding).
    constexpr double kBytes = 1e9;
    const double factor = bus_bandwidth_factor(models::CollectiveKind::all_reduce, shape_.ranks());
    const double ring_seconds = idle_route_latency_and_data(sends_, factor * kBytes / rings_).second;
    graphs.ring = ring_seconds > 0 ? factor * kBytes / ring_seconds : 0;
    graphs.tree = graphs.ring;
    if (shape_.nodes == 2) {
      const double tree_seconds = idle_route_latency_and_data(tree_sends_, kBytes / (2.0 * chains_)).second;
      graphs.tree = tree_seconds > 0 ? 2 * kBytes / tree_seconds : 0;
    }
  }
  graphs_ = graphs;
  return graphs;
}

void ClusterNetwork::run_collective(models::CollectiveKind kind, std::int64_t bytes) const {
  if (sends_.empty() || bytes <= 0) return;
  run_collective(kind, bytes, algorithm_for(kind, bytes));
}

void ClusterNetwork::run_collective(models::CollectiveKind kind, std::int64_t bytes, CollectiveAlgorithm algorithm) const {
  const bool tree = algorithm == CollectiveAlgorithm::tree;
  if (tree && kind != models::CollectiveKind::all_reduce) {
    throw std::invalid_argument(fmt::format("a tree {}: NCCL runs trees for all-reduces only", models::to_string(kind)));
  }
  if (sends_.empty() || bytes <= 0) return;
  const double latency = collective_latency(platform_, shape_, kind, algorithm);
  if (latency > 0) sg4::this_actor::sleep_for(latency);
  const std::uint64_t each = tree ? bytes_per_tree_share(bytes) : bytes_per_send(kind, bytes);
  if (each == 0) return;
  const std::vector<Send>& sends = tree ? tree_sends_ : sends_;
  const auto send_all = [each](const Send* first, const Send* last) {
    std::vector<sg4::CommPtr> comms;
    comms.reserve(static_cast<std::size_t>(last - first));
    for (const Send* send = first; send != last; ++send) {
      comms.push_back(sg4::Comm::sendto_async(send->from, send->to, each * static_cast<std::uint64_t>(send->shares)));
    }
    sg4::Comm::wait_all(comms);
  };
  if (shape_.nodes == 1) {
    send_all(sends.data(), sends.data() + sends.size());
    return;
  }
  // Across nodes, one actor per node issues the node's sends: SimGrid 3.32 keeps an actor's
  // activities in a std::list that it searches whenever one ends (ActorImpl::activities_; a
  // std::set from 3.34), so one actor issuing all of them costs their number squared (a tree over
  // 512 DGX H100 nodes, 22,496 communications: 8-10 s of CPU from one actor, 2.3-2.7 s split by
  // node; what remains is mostly SimGrid's one list of every detached communication, which
  // sendto_async makes). The communications, their start and so every time are the same.
  std::vector<sg4::ActorPtr> senders;
  for (std::size_t begin = 0; begin < sends.size();) {
    const sg4::NetZone* zone = sends[begin].from->get_englobing_zone();  // the sender's node
    std::size_t end = begin;
    while (end < sends.size() && sends[end].from->get_englobing_zone() == zone) ++end;
    const Send* first = sends.data() + begin;
    const Send* last = sends.data() + end;
    senders.push_back(sg4::Actor::create("collective sends", sends[begin].from, [send_all, first, last] { send_all(first, last); }));
    begin = end;
  }
  for (const sg4::ActorPtr& sender : senders) sender->join();
}

std::pair<double, double> ClusterNetwork::idle_route_latency_and_data(const std::vector<Send>& sends, double bytes_per_share) const {
  std::unordered_map<const sg4::Link*, double> load;
  std::vector<sg4::Link*> route;
  double route_latency = 0;  // the longest route's: the NVLink, NIC and network links carry none
  for (const Send& send : sends) {
    route.clear();
    double this_route = 0;
    send.from->route_to(send.to, route, &this_route);
    route_latency = std::max(route_latency, this_route);
    for (const sg4::Link* link : route) load[link] += bytes_per_share * send.shares;
  }
  double slowest = 0;
  for (const auto& [link, bytes_over] : load) slowest = std::max(slowest, bytes_over / link->get_bandwidth());
  return {route_latency, slowest};
}

double ClusterNetwork::idle_collective_seconds(models::CollectiveKind kind, std::int64_t bytes) const {
  if (sends_.empty() || bytes <= 0) return 0;
  return idle_collective_seconds(kind, bytes, algorithm_for(kind, bytes));
}

double ClusterNetwork::idle_collective_seconds(models::CollectiveKind kind, std::int64_t bytes, CollectiveAlgorithm algorithm) const {
  if (sends_.empty() || bytes <= 0) return 0;
  const bool tree = algorithm == CollectiveAlgorithm::tree;
  const double latency = collective_latency(platform_, shape_, kind, algorithm);
  const double each = static_cast<double>(tree ? bytes_per_tree_share(bytes) : bytes_per_send(kind, bytes));
  const auto [route_latency, data] = idle_route_latency_and_data(tree ? tree_sends_ : sends_, each);
  return latency + route_latency + data;
}

}  // namespace comptrain::sim::detail

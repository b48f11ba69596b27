#include "engine/cluster_network.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace comptrain::sim::detail {
namespace {

using simgrid::kernel::routing::NetPoint;
using Direction = sg4::LinkInRoute::Direction;

}  // namespace

ClusterNetwork::ClusterNetwork(const models::Platform& platform, ClusterShape shape, NodeDetail detail, const std::vector<int>& host_side_nodes)
    : platform_(platform), shape_(shape), detail_(shape.nodes > 1 ? detail : NodeDetail::every_node) {
  check_cluster_shape(platform_, shape_);
  nodes_.resize(static_cast<std::size_t>(shape_.nodes));
  host_side_.assign(static_cast<std::size_t>(shape_.nodes), false);
  if (detail_ == NodeDetail::stage_nodes) {
    for (const int node : host_side_nodes) {
      if (node < 0 || node >= shape_.nodes) throw std::out_of_range(fmt::format("node {} of {}", node, shape_.nodes));
      host_side_[static_cast<std::size_t>(node)] = true;
    }
  } else {
    host_side_[0] = true;
    if (detail_ == NodeDetail::every_node) host_side_.assign(host_side_.size(), true);
  }
  if (shape_.nodes == 1) {
    build_node(0, nullptr);  // the root zone: one node, as the single-GPU replay always built
  } else {
    build_network();
    collect_network_links();
    // Every GPU's collective agent, made here, before the simulation runs: made by a collective,
    // an agent's mailbox or actor would be created in a simcall, during which a collective of
    // another actor could find it half made.
    for (int rank = 0; rank < shape_.ranks(); ++rank) {
      if (sg4::Host* h = end_of(rank); h != nullptr) make_agent(h);  // a folded node's endpoint once
    }
  }
}

sg4::Host* ClusterNetwork::gpu(int rank) const {
  if (rank < 0 || rank >= shape_.ranks()) throw std::out_of_range(fmt::format("GPU rank {} of {}", rank, shape_.ranks()));
  const Node& node = nodes_[static_cast<std::size_t>(rank / shape_.gpus_per_node)];
  return node.gpus.empty() ? nullptr : node.gpus[static_cast<std::size_t>(rank % shape_.gpus_per_node)];
}

sg4::Host* ClusterNetwork::end_of(int rank) const {
  const Node& node = nodes_.at(static_cast<std::size_t>(rank / shape_.gpus_per_node));
  return node.endpoint != nullptr ? node.endpoint : gpu(rank);
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
  // Where the node's links are created: the cluster's root zone when there is one (build_network),
  // else the node's own zone. Routes may use links of any zone; what this changes is the cost of
  // SimGrid 3.32's check that a new link's name is unused, which searches every zone's links
  // (NetZoneImpl::get_link_by_name_or_null, recursive): with the links in one zone created before
  // the node zones multiply, building 12,288 GPUs took 58% of its CPU in that search otherwise.
  sg4::NetZone* links = link_owner_ != nullptr ? link_owner_ : node.zone;
  // The energy plugin's power per state, Idle:Epsilon:AllCores (sim/energy.hpp). A GPU with power
  // values draws on its power host, beside it: in_job with nothing running (whether SimGrid calls
  // it Idle or Epsilon), in_job + load x (max - in_job) while the replay runs a bounded exec there
  // whose load is the running kernels' power (GpuPowerDraw). The GPU host itself, which times the
  // kernels, draws nothing.
  const models::GpuSpec& g_spec = platform_.gpu;
  const std::string power_watts = fmt::format("{0:.17g}:{0:.17g}:{1:.17g}", g_spec.in_job_power, g_spec.max_power);
  const std::string host_watts = fmt::format("{0:.17g}:{0:.17g}:{1:.17g}", platform_.host.idle_power, platform_.host.max_power);
  // A node without its host side (NodeDetail::node_zero) has what collectives take, nothing more:
  // no host, no power hosts, no copies' links. Those the replay never uses; SimGrid's cost of
  // building hosts and zones grows with the hosts already built (replay_cost.hpp).
  const bool host_side = host_side_[static_cast<std::size_t>(index)];
  const bool power_hosts = host_side && detail_ != NodeDetail::stage_nodes;
  for (int g = 0; g < gpus; ++g) {
    node.gpus.push_back(node.zone->create_host(gpu_name(g), kGpuSpeed)->set_property("wattage_per_state", "0:0:0")->seal());
    if (power_hosts && g_spec.max_power > 0) {
      node.gpu_power.push_back(
          node.zone->create_host(gpu_name(g) + ".power", kGpuPowerSpeed)->set_property("wattage_per_state", power_watts)->seal());
    }
  }
  const double host_speed = platform_.host.flops > 0 ? platform_.host.flops : 1e9;
  const bool peer_over_pcie = gpus > 1 && !(platform_.gpu_link.bandwidth > 0);
  if (!host_side) {
    // The PCIe links only where they carry the GPUs' peer traffic (no NVLink), without the routes to host memory.
    std::vector<sg4::Link*> pcie;
    for (int g = 0; peer_over_pcie && g < gpus; ++g) {
      pcie.push_back(links->create_split_duplex_link(name(fmt::format("host_link{}", g)), platform_.host_link.bandwidth)
                         ->set_latency(platform_.host_link.latency)
                         ->seal());
      add_power(pcie.back(), platform_.host_link.idle_power, platform_.host_link.busy_power, platform_.host_link.bandwidth, node.links);
    }
    return build_node_network(index, parent, pcie);
  }
  node.host = node.zone->create_host(name("host"), host_speed)->set_property("wattage_per_state", host_watts)->seal();

  // The host's memory bandwidth, shared by every copy of the node's GPUs to and from host memory
  // (one link for both directions: DRAM reads and writes share it). Only where GPUs share it: a
  // single GPU's routes stay the single-GPU replay's (its PCIe link binds long before memory).
  sg4::Link* memory = nullptr;
  if (gpus > 1) memory = links->create_link(name("host_memory"), platform_.host.memory_bandwidth)->seal();

  // PCIe is full duplex: a split-duplex link per GPU gives each direction its own bandwidth.
  std::vector<sg4::Link*> pcie;
  for (int g = 0; g < gpus; ++g) {
    pcie.push_back(links->create_split_duplex_link(single ? name("host_link") : name(fmt::format("host_link{}", g)),
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
    sg4::Link* staging = links->create_link(name("pageable_staging"), platform_.host_link.pageable_bandwidth)->seal();
    for (int g = 0; g < gpus; ++g) {
      add_host_routes(node.zone, node.gpus[static_cast<std::size_t>(g)], node.staging, pcie[static_cast<std::size_t>(g)], {memory, staging});
    }
  }

  return build_node_network(index, parent, pcie);
}

// A node's GPU-to-GPU routes and its NICs, then its zone sealed; `pcie`: the GPUs' PCIe links
// (the peer route where there is no NVLink).
NetPoint* ClusterNetwork::build_node_network(int index, sg4::NetZone* parent, const std::vector<sg4::Link*>& pcie) {
  Node& node = nodes_[static_cast<std::size_t>(index)];
  const int gpus = shape_.gpus_per_node;
  const std::string prefix = shape_.nodes == 1 ? "" : fmt::format("node{}.", index);
  const auto name = [&](const std::string& what) { return prefix + what; };
  sg4::NetZone* links = link_owner_ != nullptr ? link_owner_ : node.zone;
  // GPU to GPU: each GPU's port into the NVSwitch, up on the sender, down on the receiver. The
  // links carry no latency (NCCL's latency term is added once per collective, and equal-latency
  // routes keep SimGrid's sharing fair: shared/reference/simgrid.md, pitfall 7). Without NVLink,
  // peer traffic crosses both GPUs' PCIe links.
  if (gpus > 1) {
    std::vector<sg4::Link*> ports;
    if (platform_.gpu_link.bandwidth > 0) {
      for (int g = 0; g < gpus; ++g) {
        ports.push_back(links->create_split_duplex_link(name(fmt::format("gpu_link{}", g)), platform_.gpu_link.bandwidth)->seal());
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
        nics.push_back(links->create_split_duplex_link(name(fmt::format("nic{}", nic)), platform_.nic->bandwidth)->seal());
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
    if (id > 0 && detail_ == NodeDetail::folded) {
      // A folded node: a zone of one endpoint host, its own gateway (so no route inside it). A
      // zone, not a bare host, because SimGrid 3.32 routes between a host and a zone's host of
      // the same topology only when both are one zone down (find_common_ancestors).
      Node& node = nodes_[id];
      node.zone = sg4::create_full_zone(fmt::format("node{}", id));
      node.zone->set_parent(cluster);
      node.endpoint = node.zone->create_host(fmt::format("node{}.endpoint", id), kGpuSpeed)->set_property("wattage_per_state", "0:0:0")->seal();
      node.zone->seal();
      return {node.zone->get_netpoint(), node.endpoint->get_netpoint()};
    }
    NetPoint* router = build_node(static_cast<int>(id), cluster);
    return {nodes_[id].zone->get_netpoint(), router};
  };
  const sg4::ClusterCallbacks callbacks(leaf);
  // No latency on the network's links either (see build_node); split duplex: full-duplex cables.
  constexpr auto kSplitDuplex = sg4::Link::SharingPolicy::SPLITDUPLEX;
  const double bandwidth = network.link.bandwidth;
  const auto unsigned_list = [](const std::vector<int>& values) { return std::vector<unsigned>(values.begin(), values.end()); };
  // The root: it holds the nodes' links (build_node) and the topology's zone, nothing else;
  // every route lies within a node or within the topology's zone, as before it existed.
  link_owner_ = sg4::create_full_zone("cluster");
  sg4::NetZone* cluster = nullptr;
  switch (network.topology) {
    case models::NetworkTopology::fat_tree: {
      if (network.routing == models::NetworkRouting::adaptive) {
        // Adaptive routing on a non-blocking tree (the reader refuses it elsewhere): a packet
        // leaves each switch by its least loaded up port, so no uplink is busier than the node
        // links below it and only those bind, as under one switch over every node, where
        // SimGrid's fixed paths would pile flows whose destinations share an index onto one
        // uplink (models::NetworkRouting). A star zone, not a one-level fat tree: SimGrid's fat
        // tree walks a switch's every child to route down, 12,500 of them per route at 100,000
        // GPUs; the star routes by the two ends' own links.
        cluster = sg4::create_star_zone("network");
        cluster->set_parent(link_owner_);
        for (int id = 0; id < shape_.nodes; ++id) {
          const auto [node_point, gateway] = leaf(cluster, {}, static_cast<unsigned long>(id));
          sg4::Link* link = link_owner_->create_split_duplex_link(fmt::format("network.link{}", id), bandwidth)->seal();
          cluster->add_route(node_point, nullptr, gateway, nullptr, {sg4::LinkInRoute(link, Direction::UP)}, false);
          cluster->add_route(nullptr, node_point, nullptr, gateway, {sg4::LinkInRoute(link, Direction::DOWN)}, false);
        }
        break;
      }
      const sg4::FatTreeParams params(static_cast<unsigned>(network.fat_tree.levels), unsigned_list(network.fat_tree.down),
                                      unsigned_list(network.fat_tree.up), unsigned_list(network.fat_tree.links));
      cluster = sg4::create_fatTree_zone("network", link_owner_, params, callbacks, bandwidth, 0, kSplitDuplex);
      break;
    }
    case models::NetworkTopology::dragonfly: {
      const models::DragonflyShape& d = network.dragonfly;
      const auto pair = [](int count, int links) { return std::pair<unsigned, unsigned>(static_cast<unsigned>(count), static_cast<unsigned>(links)); };
      const sg4::DragonflyParams params(pair(d.groups, d.group_links), pair(d.chassis, d.chassis_links), pair(d.routers, d.router_links),
                                        static_cast<unsigned>(d.nodes));
      cluster = sg4::create_dragonfly_zone("network", link_owner_, params, callbacks, bandwidth, 0, kSplitDuplex);
      break;
    }
    case models::NetworkTopology::torus: {
      const std::vector<unsigned long> dimensions = torus_dimensions_built(network.torus);
      cluster = sg4::create_torus_zone("network", link_owner_, dimensions, callbacks, bandwidth, 0, kSplitDuplex);
      break;
    }
  }
  cluster->seal();
  link_owner_->seal();
}

}  // namespace comptrain::sim::detail

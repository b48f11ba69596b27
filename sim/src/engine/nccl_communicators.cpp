// NCCL's communicators on a ClusterNetwork (cluster_network.hpp): the rings and trees of each
// group of ranks a collective runs over (models::RankGroups), and the collectives run on them.
// With the default groups (one group of every rank) the plan is the one NCCL makes for the whole
// run; a partition into smaller groups (HSDP's shard and replicate groups) plans each group the
// same way over its own members, and all groups run at once.

#include <fmt/format.h>
#include <simgrid/plugins/energy.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/cluster_network.hpp"

namespace comptrain::sim::detail {

namespace {

// What a mailbox message carries: nothing (its size is simulated); never read or written.
int message_payload = 0;

// Each group's members, node by node (a group's ranks on one node, in rank order).
using GroupMembers = std::vector<std::vector<int>>;
using RankSend = ClusterNetwork::RankSend;
using RankPlan = ClusterNetwork::RankPlan;

// What the planning needs of the network: the platform's NICs and the shape.
struct Layout {
  const models::Platform& platform;
  ClusterShape shape;
  int nic_of(int rank) const {
    const int gpus_per_nic = platform.nic ? platform.gpus_per_node / platform.nic->per_node : 1;
    return (rank % shape.gpus_per_node) / gpus_per_nic;
  }
};

std::vector<int> rail_entries(const Layout& layout, const std::vector<int>& node_members);
void plan_rings(const Layout& layout, const GroupMembers& members, RankPlan& into);
void plan_trees(const Layout& layout, const GroupMembers& members, RankPlan& into);

// NCCL's all-to-all (src/collectives.cc ncclAllToAll: a group of ncclSend and ncclRecv, one pair
// per peer, all in flight at once; Megatron-LM's alltoall token dispatcher calls it through
// torch.distributed.all_to_all_single): every member sends one share to every other member, over
// the route between their GPUs (NVLink within a node, its NICs and the network across nodes).
void plan_all_to_all(const GroupMembers& members, RankPlan& into) {
  std::vector<int> ranks;
  for (const std::vector<int>& on_node : members) ranks.insert(ranks.end(), on_node.begin(), on_node.end());
  for (const int from : ranks) {
    for (const int to : ranks) {
      if (from != to) into.all_to_all_sends.push_back({from, to, 1});
    }
  }
}

}  // namespace

ClusterNetwork::RankPlan ClusterNetwork::plan(const models::Platform& platform, ClusterShape shape, models::RankGroups groups, RankRange range,
                                               bool all_to_all) {
  const int first = range.every_rank() ? 0 : range.first;
  const int ranks = range.every_rank() ? shape.ranks() : range.count;
  if (first < 0 || ranks < 1 || static_cast<std::int64_t>(first) + ranks > shape.ranks()) {
    throw std::invalid_argument(fmt::format("collective over ranks [{}, {}): not within the {} ranks of {} node(s) x {} GPUs", first,
                                            static_cast<std::int64_t>(first) + ranks, shape.ranks(), shape.nodes, shape.gpus_per_node));
  }
  const int size = groups.every_rank() ? ranks : groups.size;
  const int stride = groups.every_rank() ? 1 : groups.stride;
  // The range starts a block of the pattern (RankRange): otherwise its groups would not be the
  // pattern's groups over the whole shape.
  if (size < 1 || stride < 1 || static_cast<std::int64_t>(size) * stride > ranks || ranks % (size * stride) != 0 || first % (size * stride) != 0) {
    throw std::invalid_argument(
        range.every_rank()
            ? fmt::format("collective groups of {} ranks {} apart: the {} ranks of {} node(s) x {} GPUs do not divide into them", size, stride,
                          ranks, shape.nodes, shape.gpus_per_node)
            : fmt::format("collective groups of {} ranks {} apart: the ranks [{}, {}) do not divide into them", size, stride, first, first + ranks));
  }
  const int g = shape.gpus_per_node;
  // Each group's members by node: groups in the order of their first rank.
  std::vector<GroupMembers> all;
  for (int block = first; block < first + ranks; block += size * stride) {
    for (int offset = 0; offset < stride; ++offset) {
      GroupMembers members;
      int node = -1;
      for (int k = 0; k < size; ++k) {
        const int rank = block + offset + k * stride;
        if (rank / g != node) {
          node = rank / g;
          members.emplace_back();
        }
        members.back().push_back(rank);
      }
      all.push_back(std::move(members));
    }
  }
  // Every node a group spans holds as many of its members (a dimension of the device mesh over
  // whole nodes, or within one).
  const std::size_t per_node = all.front().front().size();
  for (const GroupMembers& members : all) {
    for (const std::vector<int>& on_node : members) {
      if (on_node.size() != per_node) {
        throw std::invalid_argument(fmt::format("collective groups of {} ranks {} apart on {} GPUs per node: a group holds {} rank(s) on one node and {} on another",
                                                size, stride, g, per_node, on_node.size()));
      }
    }
  }
  RankPlan c;
  c.group = ClusterShape{static_cast<int>(all.front().size()), static_cast<int>(per_node)};
  if (size >= 2) {
    const Layout layout{platform, shape};
    for (const GroupMembers& members : all) plan_rings(layout, members, c);
    for (const GroupMembers& members : all) plan_trees(layout, members, c);
    if (all_to_all) {
      for (const GroupMembers& members : all) plan_all_to_all(members, c);
    }
  }
  return c;
}

const ClusterNetwork::Communicators& ClusterNetwork::communicators(models::RankGroups groups, RankRange range) const {
  const int first = range.every_rank() ? 0 : range.first;
  const int count = range.every_rank() ? shape_.ranks() : range.count;
  const int size = groups.every_rank() ? count : groups.size;
  const int stride = groups.every_rank() ? 1 : groups.stride;
  const auto key = std::tuple{size, stride, first, count};
  if (auto it = communicators_.find(key); it != communicators_.end()) return it->second;
  const RankPlan p = plan(platform_, shape_, groups, range);
  Communicators c;
  c.group = p.group;
  c.rings = p.rings;
  c.chains = p.chains;
  if (detail_ == NodeDetail::folded) {
    // The replay built the cluster folded because its collectives fold (folds): by ring always;
    // by tree where NCCL may run one, so a tree that does not fold is never run.
    const Fold ring = fold_of(platform_, shape_, p.sends);
    if (ring == Fold::none) throw std::logic_error("a collective whose rings do not fold, on a folded cluster");
    c.sends = realise(p.sends, ring);
    const Fold tree = fold_of(platform_, shape_, p.tree_sends);
    c.tree_folds = tree != Fold::none;
    if (c.tree_folds) c.tree_sends = realise(p.tree_sends, tree);
  } else {
    c.sends = realise(p.sends, Fold::none);
    c.tree_sends = realise(p.tree_sends, Fold::none);
  }
  c.groups = groups;
  c.range = range;
  return communicators_.emplace(key, std::move(c)).first->second;
}

const std::vector<ClusterNetwork::Send>& ClusterNetwork::sends_of(const Communicators& c, models::CollectiveKind kind, bool tree) const {
  if (kind != models::CollectiveKind::all_to_all) return sends_of(c, tree);
  if (detail_ == NodeDetail::folded) throw std::logic_error("an all-to-all on a folded cluster");
  if (!c.all_to_all_sends) c.all_to_all_sends = realise(plan(platform_, shape_, c.groups, c.range, true).all_to_all_sends, Fold::none);
  return *c.all_to_all_sends;
}

const std::vector<ClusterNetwork::Send>& ClusterNetwork::sends_of(const Communicators& c, bool tree) const {
  if (tree && !c.tree_folds) throw std::logic_error("a tree that does not fold, on a folded cluster");
  return tree ? c.tree_sends : c.sends;
}

std::vector<ClusterNetwork::Send> ClusterNetwork::realise(const std::vector<RankSend>& sends, Fold fold) const {
  std::vector<Send> out;
  out.reserve(sends.size());
  const int g = shape_.gpus_per_node;
  for (const RankSend& send : sends) {
    const int from_node = send.from / g;
    const int to_node = send.to / g;
    if (fold != Fold::none && from_node == to_node && from_node != 0) continue;  // node 0's stand for them
    Send s{end_of(send.from), end_of(send.to), send.shares, 0};
    if (fold == Fold::private_nics && from_node != to_node && (from_node != 0 || to_node != 0)) s.rate_bound = platform_.nic->bandwidth;
    out.push_back(s);
  }
  return out;
}

ClusterNetwork::Fold ClusterNetwork::fold_of(const models::Platform& platform, ClusterShape shape, const std::vector<RankSend>& sends) {
  const int g = shape.gpus_per_node;
  const int n = shape.nodes;
  if (n < 2 || !platform.nic) return Fold::none;
  // Every node's NVLink sends are node 0's, shifted to its ranks.
  std::vector<std::vector<RankSend>> intra(static_cast<std::size_t>(n));
  // Per node and NIC, its network sends each way: (peer node, shares), out then in.
  const Layout layout{platform, shape};
  const int nics = platform.nic->per_node;
  std::vector<std::vector<std::pair<int, int>>> out(static_cast<std::size_t>(n) * nics);
  std::vector<std::vector<std::pair<int, int>>> in(static_cast<std::size_t>(n) * nics);
  for (const RankSend& send : sends) {
    const int a = send.from / g;
    const int b = send.to / g;
    if (a == b) {
      intra[static_cast<std::size_t>(a)].push_back({send.from - a * g, send.to - a * g, send.shares});
      continue;
    }
    out[static_cast<std::size_t>(a) * nics + layout.nic_of(send.from)].emplace_back(b, send.shares);
    in[static_cast<std::size_t>(b) * nics + layout.nic_of(send.to)].emplace_back(a, send.shares);
  }
  const auto by_value = [](const RankSend& x, const RankSend& y) { return std::tie(x.from, x.to, x.shares) < std::tie(y.from, y.to, y.shares); };
  for (auto& node : intra) std::sort(node.begin(), node.end(), by_value);
  for (const auto& node : intra) {
    if (node != intra.front()) return Fold::none;
  }
  bool alone = true;
  for (std::size_t i = 0; i < out.size(); ++i) alone = alone && out[i].size() <= 1 && in[i].size() <= 1;
  if (alone) return Fold::private_nics;
  // Shared NICs: the node's link into a one-link-per-node fat tree stands for the NICs it uses when
  // its bandwidth is theirs and each carries the same sends.
  const models::NetworkSpec& network = *platform.network;
  if (network.topology != models::NetworkTopology::fat_tree || network.fat_tree.up.front() != 1 || network.fat_tree.links.front() != 1) {
    return Fold::none;
  }
  for (int node = 0; node < n; ++node) {
    int used = 0;
    std::vector<std::pair<int, int>> first_out;
    std::vector<std::pair<int, int>> first_in;
    for (int k = 0; k < nics; ++k) {
      auto o = out[static_cast<std::size_t>(node) * nics + k];
      auto i = in[static_cast<std::size_t>(node) * nics + k];
      if (o.empty() && i.empty()) continue;
      std::sort(o.begin(), o.end());
      std::sort(i.begin(), i.end());
      if (used++ == 0) {
        first_out = std::move(o);
        first_in = std::move(i);
      } else if (o != first_out || i != first_in) {
        return Fold::none;
      }
    }
    if (used > 0 && network.link.bandwidth != used * platform.nic->bandwidth) return Fold::none;
  }
  return Fold::shared_links;
}

bool ClusterNetwork::folds(const models::Platform& platform, ClusterShape shape,
                           const std::vector<std::pair<models::CollectiveKind, models::RankGroups>>& collectives) {
  if (shape.nodes < 2 || !platform.network) return false;
  for (const auto& [kind, groups] : collectives) {
    // An all-to-all is never folded: its GPUs each talk to many nodes through one NIC, and the
    // folding rules (fold_of) were derived and checked for NCCL's rail-aligned rings and trees
    // only; its cluster is built node by node, so its times stay exact (sim/README.md).
    if (kind == models::CollectiveKind::all_to_all) return false;
    const RankPlan p = plan(platform, shape, groups);
    if (fold_of(platform, shape, p.sends) == Fold::none) return false;
    const bool tree = kind == models::CollectiveKind::all_reduce && platform.collectives.algorithm != models::NcclAlgorithm::ring;
    if (tree && fold_of(platform, shape, p.tree_sends) == Fold::none) return false;
  }
  return true;
}

namespace {

// Where a group's rings enter a node and its chains start: the first of the node's members on
// each NIC they use (a member's NIC follows from its GPU's place in the node), in member order.
std::vector<int> rail_entries(const Layout& layout, const std::vector<int>& node_members) {
  std::vector<int> entries;
  int last_nic = -1;
  for (std::size_t i = 0; i < node_members.size(); ++i) {
    const int nic = layout.nic_of(node_members[i]);
    if (nic != last_nic) entries.push_back(static_cast<int>(i));
    last_nic = nic;
  }
  return entries;
}

// NCCL's rings (shared/reference/distributed.md §1, §7) over one group: within one node, a ring
// through the group's GPUs over the NVSwitch (one ring already loads every GPU's port in both
// directions, so more rings would only split the same bytes). Across nodes, one rail-aligned ring
// per NIC the group's GPUs use: ring k enters every node at the group's first GPU of NIC k, runs
// through the node's members over NVLink and leaves for the next node through NIC k again (NCCL
// sends the last GPU's data through that NIC over NVLink, PXN; its NVLink hop is left out here).
// All rings run at once, pipelined inside and between nodes, never one phase after another.
//
// Every ring's NVLink hops go from member l to member l+1 of the node, so the sends a GPU makes to
// its neighbour, one per ring, share one route: they are one communication carrying all of them
// (fewer communications for SimGrid, the same bytes on the same links).
void plan_rings(const Layout& layout, const GroupMembers& members, RankPlan& into) {
  const int g = static_cast<int>(members.front().size());
  const int n = static_cast<int>(members.size());
  const auto member = [&](int node, int index) { return members[static_cast<std::size_t>(node)][static_cast<std::size_t>(index % g)]; };
  if (n == 1) {
    into.rings = 1;
    for (int i = 0; i < g; ++i) into.sends.push_back({member(0, i), member(0, i + 1), 1});
    return;
  }
  const std::vector<int> entries = rail_entries(layout, members.front());
  into.rings = static_cast<int>(entries.size());
  // Ring k leaves a node from the member before its entry, which sends nothing over NVLink in
  // that ring: member l sends to l+1 in every ring but those entering at l+1.
  std::vector<int> nvlink_rings(static_cast<std::size_t>(g), into.rings);
  for (const int entry : entries) --nvlink_rings[static_cast<std::size_t>((entry + g - 1) % g)];
  for (int node = 0; node < n; ++node) {
    for (int l = 0; g > 1 && l < g; ++l) {
      if (nvlink_rings[static_cast<std::size_t>(l)] > 0) into.sends.push_back({member(node, l), member(node, l + 1), nvlink_rings[static_cast<std::size_t>(l)]});
    }
    for (const int entry : entries) into.sends.push_back({member(node, entry), member((node + 1) % n, entry), 1});
  }
}

}  // namespace

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

// NCCL's tree all-reduce (NCCL >= 2.4; shared/reference/distributed.md §1) over one group: within
// each node a chain through the group's GPUs over NVLink, across nodes the double binary tree
// (double_binary_tree_parents), each of the two trees carrying half of the buffer: the reduction
// goes up the chains and the trees to the roots, the broadcast comes back down, pipelined, so
// every edge carries its tree's half once each way and all edges run at once.
//
// Across nodes there is one chain per rail, as there is one ring (ring k's rail; NCCL gives each
// channel of its tree graph a NIC, and runs both trees over a channel's chain): chain k starts at
// ring k's entry member, which also talks to the parent's and the children's chain heads through
// NIC k, and runs through the node's members in order (the rings' order, so that its NVLink sends
// share the rings' routes). On one node there is no network: one chain per member, headed by it,
// so that the chains' ends are spread over the GPUs as NCCL's channels spread them (a single
// chain would load its middle GPUs' ports with 2 x bytes and its ends with half of that).
//
// Every (tree, chain) carries bytes / (2 x chains): one share per edge and direction. The sends
// between the same two GPUs, over every tree, chain and direction, are one communication.
namespace {

void plan_trees(const Layout& layout, const GroupMembers& members, RankPlan& into) {
  const int g = static_cast<int>(members.front().size());
  const int n = static_cast<int>(members.size());
  std::vector<int> heads;
  if (n == 1) {
    for (int l = 0; l < g; ++l) heads.push_back(l);
  } else {
    heads = rail_entries(layout, members.front());
  }
  into.chains = static_cast<int>(heads.size());
  const auto rank = [&](int node, int index) { return members[static_cast<std::size_t>(node)][static_cast<std::size_t>(index % g)]; };
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
  for (const auto& [pair, count] : shares) into.tree_sends.push_back({pair.first, pair.second, count});
}

}  // namespace

std::uint64_t ClusterNetwork::bytes_per_send(models::CollectiveKind kind, std::int64_t bytes, models::RankGroups groups, RankRange range) const {
  const Communicators& c = communicators(groups, range);
  if (c.rings == 0) return 0;
  // An all-to-all sends 1/p of each rank's buffer to each of the p - 1 other members.
  if (kind == models::CollectiveKind::all_to_all) {
    return static_cast<std::uint64_t>(std::llround(static_cast<double>(bytes) / c.group.ranks()));
  }
  // A ring over p ranks sends 2(p-1) chunks of bytes/p from every rank for an all-reduce, p-1 for
  // the others; each of the r rings moves 1/r of the buffer.
  const double share = bus_bandwidth_factor(kind, c.group.ranks()) * static_cast<double>(bytes) / c.rings;
  return static_cast<std::uint64_t>(std::llround(share));
}

std::uint64_t ClusterNetwork::bytes_per_tree_share(std::int64_t bytes, models::RankGroups groups, RankRange range) const {
  const Communicators& c = communicators(groups, range);
  if (c.chains == 0) return 0;
  return static_cast<std::uint64_t>(std::llround(static_cast<double>(bytes) / (2.0 * c.chains)));
}

CollectiveAlgorithm ClusterNetwork::algorithm_for(models::CollectiveKind kind, std::int64_t bytes, models::RankGroups groups, RankRange range) const {
  if (kind != models::CollectiveKind::all_reduce || communicators(groups, range).group.ranks() < 2) return CollectiveAlgorithm::ring;
  switch (platform_.collectives.algorithm) {
    case models::NcclAlgorithm::ring: return CollectiveAlgorithm::ring;
    case models::NcclAlgorithm::tree: return CollectiveAlgorithm::tree;
    case models::NcclAlgorithm::automatic: break;
  }
  return prediction(kind, bytes, groups, range).algorithm;
}

NcclPrediction ClusterNetwork::prediction(models::CollectiveKind kind, std::int64_t bytes, models::RankGroups groups, RankRange range) const {
  if (kind == models::CollectiveKind::all_to_all) {
    // No ring or tree: the pairwise exchange on idle links (idle_collective_seconds).
    NcclPrediction out;
    out.algorithm = CollectiveAlgorithm::ring;
    out.tree_seconds = std::numeric_limits<double>::infinity();
    out.ring_seconds = idle_collective_seconds(kind, bytes, CollectiveAlgorithm::ring, groups, range);
    return out;
  }
  return nccl_prediction(platform_, communicators(groups, range).group, kind, bytes, graph_bandwidths(groups, range));
}

NcclGraphBandwidths ClusterNetwork::graph_bandwidths(models::RankGroups groups, RankRange range) const {
  const Communicators& c = communicators(groups, range);
  if (c.graphs) return *c.graphs;
  NcclGraphBandwidths graphs;
  graphs.channels = std::max(c.rings, 1);
  if (c.group.ranks() >= 2) {
    // Loads are linear in the bytes: any size gives the same bandwidths (1 GB, without rounding).
    constexpr double kBytes = 1e9;
    const double factor = bus_bandwidth_factor(models::CollectiveKind::all_reduce, c.group.ranks());
    const double ring_seconds = idle_route_latency_and_data(c.sends, factor * kBytes / c.rings).second;
    graphs.ring = ring_seconds > 0 ? factor * kBytes / ring_seconds : 0;
    graphs.tree = graphs.ring;
    if (c.group.nodes == 2) {
      const double tree_seconds = idle_route_latency_and_data(sends_of(c, true), kBytes / (2.0 * c.chains)).second;
      graphs.tree = tree_seconds > 0 ? 2 * kBytes / tree_seconds : 0;
    }
  }
  c.graphs = graphs;
  return graphs;
}

void ClusterNetwork::run_collective(models::CollectiveKind kind, std::int64_t bytes, models::RankGroups groups, RankRange range) const {
  if (communicators(groups, range).sends.empty() || bytes <= 0) return;
  run_collective(kind, bytes, algorithm_for(kind, bytes, groups, range), groups, range);
}

void ClusterNetwork::run_collective(models::CollectiveKind kind, std::int64_t bytes, CollectiveAlgorithm algorithm, models::RankGroups groups,
                                    RankRange range) const {
  if (algorithm == CollectiveAlgorithm::tree && kind != models::CollectiveKind::all_reduce) {
    throw std::invalid_argument(fmt::format("a tree {}: NCCL runs trees for all-reduces only", models::to_string(kind)));
  }
  const Communicators& c = communicators(groups, range);
  if (c.sends.empty() || bytes <= 0) return;
  if (!reuse_) {
    simulate_collective_flows(kind, bytes, algorithm, groups, range);
    return;
  }
  if (!range.every_rank()) throw std::logic_error("a collective over a range of ranks, with collective times reused (reuse_collective_times)");
  if (collective_now_.run != nullptr) {
    throw std::logic_error("a collective started while another ran: collective times are reused only when collectives run one at a time");
  }
  const int size = groups.every_rank() ? shape_.ranks() : groups.size;
  const int stride = groups.every_rank() ? 1 : groups.stride;
  auto [it, first] = runs_.try_emplace(CollectiveKey{kind, bytes, algorithm, size, stride});
  CollectiveRun& run = it->second;
  const double start = sg4::Engine::get_clock();
  collective_now_ = CollectiveNow{start, &run, first};
  if (first) {
    // Its first run is simulated, and what it drew above idle on each powered link measured as
    // the plugin counts it: the links carry nothing else meanwhile.
    const std::vector<const PoweredLink*> links = link_energy_ ? powered_links() : std::vector<const PoweredLink*>{};
    std::vector<double> before;
    before.reserve(links.size());
    for (const PoweredLink* l : links) before.push_back(sg_link_get_consumed_energy(l->link));
    simulate_collective_flows(kind, bytes, algorithm, groups, range);
    run.seconds = sg4::Engine::get_clock() - start;
    for (std::size_t i = 0; i < links.size(); ++i) {
      const double busy = sg_link_get_consumed_energy(links[i]->link) - before[i] - links[i]->idle * run.seconds;
      if (busy != 0) run.busy_joules.emplace_back(links[i]->link, busy);
    }
  } else {
    // The same flows on the same idle links: the first run's time. The links stay idle in SimGrid
    // meanwhile; what their flows would have drawn above idle is added afterwards (reused_joules).
    if (run.seconds > 0) sg4::this_actor::sleep_for(run.seconds);
    for (const auto& [link, joules] : run.busy_joules) reused_joules_[link] += joules;
    ++reused_count_;
  }
  collective_now_ = CollectiveNow{};
}

bool ClusterNetwork::collective_links_are_their_own(const models::Platform& platform, ClusterShape shape) {
  return shape.gpus_per_node == 1 || platform.gpu_link.bandwidth > 0;
}

void ClusterNetwork::reuse_collective_times(bool link_energy) {
  if (!collective_links_are_their_own(platform_, shape_)) {
    throw std::logic_error("collective times reused on a node without NVLink, whose collectives share the PCIe links with copies");
  }
  reuse_ = true;
  link_energy_ = link_energy;
}

double ClusterNetwork::reused_joules(const sg4::Link* link) const {
  const auto it = reused_joules_.find(link);
  return it == reused_joules_.end() ? 0.0 : it->second;
}

// Every powered link direction whose energy is read (EnergyMeter): every node's and the
// network's, or node 0's and the network's when node 0 stands for every node (NodeDetail).
std::vector<const PoweredLink*> ClusterNetwork::powered_links() const {
  std::vector<const PoweredLink*> links;
  for (const Node& node : nodes_) {
    for (const PoweredLink& l : node.links) links.push_back(&l);
    if (detail_ != NodeDetail::every_node) break;
  }
  for (const PoweredLink& l : network_links_) links.push_back(&l);
  return links;
}

// One collective's latency term and flows on the network (run_collective).
void ClusterNetwork::simulate_collective_flows(models::CollectiveKind kind, std::int64_t bytes, CollectiveAlgorithm algorithm,
                                               models::RankGroups groups, RankRange range) const {
  const bool tree = algorithm == CollectiveAlgorithm::tree;
  const Communicators& c = communicators(groups, range);
  const double latency = collective_latency(platform_, c.group, kind, algorithm);
  if (latency > 0) sg4::this_actor::sleep_for(latency);
  const std::uint64_t each = tree ? bytes_per_tree_share(bytes, groups, range) : bytes_per_send(kind, bytes, groups, range);
  if (each == 0) return;
  const std::vector<Send>& sends = sends_of(c, kind, tree);
  const auto send_all = [this, each](const Send* first, const Send* last) {
    std::vector<sg4::CommPtr> comms;
    comms.reserve(static_cast<std::size_t>(last - first));
    for (const Send* send = first; send != last; ++send) {
      const std::uint64_t payload_bytes = each * static_cast<std::uint64_t>(send->shares);
      if (send->rate_bound > 0) {
        // SimGrid 3.32's host-to-host communications carry no rate (Comm::start builds their
        // CommImpl from the hosts and the size alone, and set_rate after set_payload_size aborts):
        // a rate-bounded send (a folded node's NIC) goes through a mailbox of the destination
        // whose permanent receiver takes each message.
        comms.push_back(one_sided_mailbox(send->to)->put_init(&message_payload, payload_bytes)->set_rate(send->rate_bound)->start());
      } else {
        comms.push_back(sg4::Comm::sendto_init(send->from, send->to)->set_payload_size(payload_bytes)->start());
      }
    }
    sg4::Comm::wait_all(comms);
    // The rate-bounded sends' messages, one per send, taken from their mailboxes (whichever
    // message each take gets: every one there ends, and each sender takes as many as it put).
    for (const Send* send = first; send != last; ++send) {
      if (send->rate_bound > 0) one_sided_mailbox(send->to)->get<int>();
    }
  };
  if (shape_.nodes == 1) {
    send_all(sends.data(), sends.data() + sends.size());
    return;
  }
  // Whether a GPU of this collective is in another collective still in flight: never in the
  // symmetric replay, whose collectives follow one another on the comm stream; never in the
  // pipeline replay, whose stages' collectives run at once over disjoint ranks (each stage's
  // own); two collectives over the same ranks at once in the tests.
  const bool agents_busy = std::any_of(sends.begin(), sends.end(), [this](const Send& send) {
    return agent(send.from).run != nullptr || agent(send.to).run != nullptr;
  });
  if (agents_busy) {
    ++one_sided_count_;
    // The agents are taken: one actor per run of sends from one node issues them as one-sided
    // communications, which SimGrid 3.32 detaches and keeps in the maestro's list, searched as
    // each ends (sim/README.md, "Clusters and collectives"). Each such actor costs its stack's
    // allocation and guard page (two mprotect calls): the pipeline replay of 16,384 GPUs made
    // tens of thousands of them when every collective that overlapped another came here.
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
    return;
  }
  // Across nodes, each sending GPU's agent puts its sends into the mailboxes of their
  // destinations, and the caller waits for the last agent to be done. Mailbox communications are
  // not detached: SimGrid 3.32 keeps every detached one (a one-sided `sendto_async`) in one list
  // that it searches as each ends, so that a collective of N sends cost N^2 (74% of the CPU of a
  // DDP iteration on 3,072 GPUs; docs/performance.md). The same transfers, started at the same
  // time on the same routes: every time is the same.
  // Every agent of the collective, sender or receiver, is its own until it ends (a receiver's
  // mailbox holds this collective's messages only: each sender takes one per send there).
  Run run;
  run.done = sg4::Semaphore::create(0);
  std::vector<Agent*> taking_part;
  std::vector<Agent*> sending;
  for (const Send& send : sends) {
    Agent& from = agent(send.from);
    Agent& to = agent(send.to);
    for (Agent* a : {&from, &to}) {
      if (a->run == nullptr) {
        a->run = &run;
        taking_part.push_back(a);
      }
    }
    if (from.puts.empty()) sending.push_back(&from);
    from.puts.push_back({to.mailbox, each * static_cast<std::uint64_t>(send.shares), send.rate_bound});
  }
  if (!sending.empty()) {
    run.sending = static_cast<int>(sending.size());
    for (Agent* a : sending) a->work->release();
    run.done->acquire();
  }
  for (Agent* a : taking_part) a->run = nullptr;
}

sg4::Mailbox* ClusterNetwork::one_sided_mailbox(const sg4::Host* gpu) const {
  Agent& a = agent(gpu);
  if (a.one_sided == nullptr) {
    // Its permanent receiver makes each message start at once (CommImpl::isend: READY), as the
    // agent's mailbox does; the senders take the messages (send_all). The receiver only waits, on
    // a semaphore, as the agents do: a daemon blocked in a `get` when the engine kills it at the
    // end makes SimGrid 3.32 post its receive with no sender (a crash in get_traversed_links).
    sg4::Mailbox* mailbox = sg4::Mailbox::by_name("one-sided receptions " + gpu->get_name());
    sg4::ActorPtr actor = sg4::Actor::create("one-sided receiver", const_cast<sg4::Host*>(gpu), [] {
      sg4::Semaphore::create(0)->acquire();
    });
    actor->daemonize();
    mailbox->set_receiver(actor);
    a.one_sided = mailbox;
  }
  return a.one_sided;
}

void ClusterNetwork::make_agent(sg4::Host* gpu) {
  auto [it, fresh] = agents_.try_emplace(gpu);
  if (fresh) {
    it->second = std::make_unique<Agent>();
    Agent* a = it->second.get();
    a->mailbox = sg4::Mailbox::by_name("collective agent " + gpu->get_name());
    a->work = sg4::Semaphore::create(0);
    // A daemon: the engine ends when the replay's actors do, and kills the agents, blocked on
    // their semaphores. As the permanent receiver of the GPU's mailbox it makes every message
    // put there start at once (CommImpl::isend: a permanent mailbox's messages are READY);
    // blocked is not suspended, which would suspend them.
    sg4::ActorPtr actor = sg4::Actor::create("collective agent", gpu, [this, a] {
      std::vector<sg4::CommPtr> comms;
      for (;;) {
        a->work->acquire();
        comms.clear();
        for (const Agent::Put& put : a->puts) {
          sg4::CommPtr comm = put.to->put_init(&message_payload, put.bytes);
          if (put.rate_bound > 0) comm->set_rate(put.rate_bound);  // a folded node's NIC (Fold::private_nics)
          comms.push_back(comm->start());
        }
        sg4::Comm::wait_all(comms);
        // A permanent receiver's mailbox keeps each message until someone takes it: one per
        // send, taken here (whichever of the mailbox's messages it is: all are this collective's,
        // and all end before the collective does, whose end the caller waits for).
        for (const Agent::Put& put : a->puts) put.to->get<int>();
        a->puts.clear();
        Run* run = a->run;  // the caller's, which it leaves once `done` is released
        if (--run->sending == 0) run->done->release();
      }
    });
    actor->daemonize();
    a->mailbox->set_receiver(actor);
  }
}

std::pair<double, double> ClusterNetwork::idle_route_latency_and_data(const std::vector<Send>& sends, double bytes_per_share) const {
  std::unordered_map<const sg4::Link*, double> load;
  std::vector<sg4::Link*> route;
  double route_latency = 0;  // the longest route's: the NVLink, NIC and network links carry none
  double slowest_bound = 0;
  for (const Send& send : sends) {
    route.clear();
    double this_route = 0;
    send.from->route_to(send.to, route, &this_route);
    route_latency = std::max(route_latency, this_route);
    for (const sg4::Link* link : route) load[link] += bytes_per_share * send.shares;
    // A folded node's NIC, which carries this send alone.
    if (send.rate_bound > 0) slowest_bound = std::max(slowest_bound, bytes_per_share * send.shares / send.rate_bound);
  }
  double slowest = slowest_bound;
  for (const auto& [link, bytes_over] : load) slowest = std::max(slowest, bytes_over / link->get_bandwidth());
  return {route_latency, slowest};
}

double ClusterNetwork::idle_collective_seconds(models::CollectiveKind kind, std::int64_t bytes, models::RankGroups groups, RankRange range) const {
  if (communicators(groups, range).sends.empty() || bytes <= 0) return 0;
  return idle_collective_seconds(kind, bytes, algorithm_for(kind, bytes, groups, range), groups, range);
}

double ClusterNetwork::idle_collective_seconds(models::CollectiveKind kind, std::int64_t bytes, CollectiveAlgorithm algorithm, models::RankGroups groups,
                                               RankRange range) const {
  const Communicators& c = communicators(groups, range);
  if (c.sends.empty() || bytes <= 0) return 0;
  const bool tree = algorithm == CollectiveAlgorithm::tree;
  const double latency = collective_latency(platform_, c.group, kind, algorithm);
  const double each = static_cast<double>(tree ? bytes_per_tree_share(bytes, groups, range) : bytes_per_send(kind, bytes, groups, range));
  const auto [route_latency, data] = idle_route_latency_and_data(sends_of(c, kind, tree), each);
  return latency + route_latency + data;
}

}  // namespace comptrain::sim::detail

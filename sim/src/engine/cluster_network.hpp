#pragma once
// The SimGrid platform of a cluster, and NCCL's ring and tree collectives on it (sim/README.md,
// "Clusters and collectives"). Internal to comptrain::sim: the replay (simulation.cpp) builds its platform
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
// NodeDetail (below) builds less of the nodes other than node 0 for the symmetric replay: their
// collective links only, or one endpoint host each when the collectives fold (sim/README.md,
// "Ranks in classes"). Collective times may be reused (reuse_collective_times: "Collectives
// that repeat").

#include <simgrid/s4u.hpp>

#include <array>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "comptrain/models/platform.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/sim/engine/collectives.hpp"

namespace comptrain::sim::detail {

namespace sg4 = simgrid::s4u;

// A GPU host's speed in SimGrid work units per second. A task of `s` seconds is an exec of
// s * kGpuSpeed units, so concurrent kernels share the GPU (SimGrid's fair sharing) and a kernel
// alone takes exactly its modeled time.
inline constexpr double kGpuSpeed = 1e9;
// A GPU's power host's speed: an exec bounded at load x kGpuPowerSpeed makes it draw
// in_job + load x (max - in_job) (GpuPowerDraw, simulation.cpp).
inline constexpr double kGpuPowerSpeed = 1e9;

using sim::ClusterShape;

// A link direction that draws power (the platform gives its section a `power`), as the link
// energy plugin sees it: `wattage_range` idle:busy is set on it (never on a SplitDuplexLink, whose
// property SimGrid ignores: shared/reference/distributed.md §6), and its power is
// idle + (busy - idle) x usage / bandwidth.
struct PoweredLink {
  sg4::Link* link = nullptr;
  double idle = 0;
  double busy = 0;
  double bandwidth = 0;
};

// The ranks [first, first + count) a collective's groups lie within: by default (count 0) every
// rank of the shape. A pipeline stage's ranks are such a range (models/parallel_layout.hpp: stage
// p holds [p x T x C x D, (p + 1) x T x C x D)); its collectives run its own groups only, each
// stage's comm stream running its own (the pipeline replay). The groups (models::RankGroups)
// then partition the range as they would partition a shape of `count` ranks starting at `first`:
// one group of the range's ranks for the default groups, else groups of `size` ranks `stride`
// apart from `first` on, which are the groups of the pattern over the whole shape that lie within
// the range when size x stride divides both `first` and `count` (required).
struct RankRange {
  int first = 0;
  int count = 0;  // 0: every rank of the shape
  bool every_rank() const { return count == 0; }
};

class ClusterNetwork {
 public:
  // How much of each node is built (sim/README.md, "Ranks in classes").
  //  - every_node: each node whole: its GPUs, host side (host memory, PCIe links, pageable
  //    staging, GPU power hosts), NVLink ports, NICs and router.
  //  - node_zero: node 0 whole, the others with what collectives take (GPU hosts, NVLink ports,
  //    NICs; PCIe links only where they carry the GPUs' peer traffic): the symmetric replay runs
  //    nothing else on them.
  //  - folded: node 0 whole, each other node one endpoint host in the topology: the replay's
  //    collectives must fold (fold_of: every node's NVLink sends are node 0's, and its network
  //    sends cross its NICs as a rate bound or its link into the network stands for them). The
  //    network between nodes is built whole either way.
  //  - stage_nodes: the pipeline replay's (pipeline_replay.hpp): the nodes of `host_side_nodes`
  //    (those of the stages' representatives, which make the host-link copies) with their host
  //    side but no GPU power hosts (the pipeline replay draws no energy), every other node as
  //    node_zero builds it. Every GPU host is built: each stage's collectives run on its ranks.
  //    What is left out carries nothing in that replay, so its results are those of every_node's;
  //    what it saves is SimGrid 3.32's per-host cost, which grows with the hosts and zones already
  //    built (replay_cost.hpp): at 2,048 DGX H100 nodes 16,400 hosts instead of 34,816.
  enum class NodeDetail { every_node, node_zero, folded, stage_nodes };

  using RankRange = detail::RankRange;

  // `host_side_nodes`: NodeDetail::stage_nodes's nodes with their host side (ignored otherwise).
  ClusterNetwork(const models::Platform& platform, ClusterShape shape, NodeDetail detail = NodeDetail::every_node,
                 const std::vector<int>& host_side_nodes = {});
  NodeDetail detail() const { return detail_; }

  ClusterShape shape() const { return shape_; }
  sg4::Host* gpu(int rank) const;               // rank = node * gpus_per_node + local; nullptr on a folded node
  sg4::Host* host(int node) const;              // the node's host memory end of each GPU's PCIe link (nullptr: not built, NodeDetail)
  sg4::Host* pageable_staging(int node) const;  // nullptr when host_link has no pageable_bandwidth (or not built)
  // The host whose energy is GPU `rank`'s (sim/energy.hpp): nullptr when the GPU gives no power.
  sg4::Host* gpu_power(int rank) const;

  // Energy (sim/energy.hpp). Every host carries SimGrid's `wattage_per_state` (a GPU's power host:
  // in-job idle for Idle and Epsilon, max for AllCores; the node's host: its idle and max power;
  // "0:0:0" elsewhere, the GPU hosts included), set before the host is sealed; the host energy plugin, when
  // initialised before this network is built, integrates them. The links whose section gives a
  // power carry `wattage_range` on each direction: the node's (PCIe, NVLink ports, NICs) and the
  // network's between nodes.
  const std::vector<PoweredLink>& node_links(int node) const { return nodes_.at(static_cast<std::size_t>(node)).links; }
  const std::vector<PoweredLink>& network_links() const { return network_links_; }

  // One collective over `groups` (models::RankGroups; by default one group of every rank), run
  // from the calling actor (blocks it until every group's part has ended): every group runs it at
  // once over its own communicator, `bytes` being one group's size as nccl-tests counts it
  // (all_reduce: the buffer; reduce_scatter: the input; all_gather: the output), with the
  // algorithm NCCL runs (algorithm_for). NCCL's latency term first, then the data as aggregated
  // SimGrid communications: the ring's, one per GPU per ring carrying its whole share (the rings'
  // NVLink sends from one GPU to its neighbour as one), or the tree's, one per pair of GPUs that a
  // tree edge joins (tree_sends). Contention with other traffic is SimGrid's. std::invalid_argument
  // when the ranks do not divide into `groups`.
  // `range`: the ranks the groups lie within (RankRange; every rank by default).
  void run_collective(models::CollectiveKind kind, std::int64_t bytes, models::RankGroups groups = {}, RankRange range = {}) const;
  // The same with `algorithm` (tree: all-reduce only; std::invalid_argument otherwise).
  void run_collective(models::CollectiveKind kind, std::int64_t bytes, CollectiveAlgorithm algorithm, models::RankGroups groups = {},
                      RankRange range = {}) const;

  // What NCCL runs for this collective: platform.collectives.algorithm when it forces one (tree
  // for all-reduces only), else the faster in NCCL's model (nccl_prediction over graph_bandwidths
  // and one group's shape); always ring for a reduce-scatter or an all-gather.
  CollectiveAlgorithm algorithm_for(models::CollectiveKind kind, std::int64_t bytes, models::RankGroups groups = {}, RankRange range = {}) const;
  NcclPrediction prediction(models::CollectiveKind kind, std::int64_t bytes, models::RankGroups groups = {}, RankRange range = {}) const;
  // NCCL's graph bandwidths of one group's communicator, taken from this network (computed once,
  // on first use), all groups running at once: the ring's bus bandwidth on an idle network
  // (nccl-tests' factor x bytes / the most loaded link's time); the tree's the same on all but 2
  // nodes, and on 2 nodes the simulated tree's own, 2 x bytes / its most loaded link's time
  // (NCCL's search raises a 2-node tree's intra-node bandwidth up to twice the network's:
  // src/graph/search.cc, "increase bwIntra for trees"); channels = rings.
  NcclGraphBandwidths graph_bandwidths(models::RankGroups groups = {}, RankRange range = {}) const;

  // Its time on an idle network, computed without running SimGrid: the latency term, the longest
  // route's link latency (0 but over PCIe) and, over every link the algorithm's sends cross, the
  // largest bytes / bandwidth (for reports and tests; SimGrid's max-min sharing gives the same
  // where every link's flows end together, as the tests check for the ring and the tree).
  double idle_collective_seconds(models::CollectiveKind kind, std::int64_t bytes, models::RankGroups groups = {}, RankRange range = {}) const;
  double idle_collective_seconds(models::CollectiveKind kind, std::int64_t bytes, CollectiveAlgorithm algorithm, models::RankGroups groups = {},
                                 RankRange range = {}) const;

  // What one GPU sends in one ring: factor x bytes / rings with nccl-tests' factor
  // (bus_bandwidth_factor over one group's ranks), rounded to a whole byte (SimGrid's payloads
  // are integers).
  std::uint64_t bytes_per_send(models::CollectiveKind kind, std::int64_t bytes, models::RankGroups groups = {}, RankRange range = {}) const;
  // One tree share: what one tree edge carries in one direction for one of the two trees and one
  // chain, bytes / (2 x chains), rounded to a whole byte.
  std::uint64_t bytes_per_tree_share(std::int64_t bytes, models::RankGroups groups = {}, RankRange range = {}) const;
  // Aggregated communications: `shares` sends from one GPU to another that share a route, as one
  // communication of shares x bytes_per_send (ring) or shares x bytes_per_tree_share (tree).
  struct Send {
    sg4::Host* from = nullptr;
    sg4::Host* to = nullptr;
    int shares = 1;
    double rate_bound = 0;  // bytes/s; 0: none (a folded node's NIC that carries this send alone: Fold::private_nics)
  };
  // The NCCL communicators of one partition of the ranks into groups: one group's shape (the nodes
  // it spans, its members on each), the rings each group runs (a ring per NIC its members use
  // across nodes, one on a single node), the chains each of the two trees runs (one per rail
  // across nodes, as the rings; one headed by each member on a single node: NCCL's channels
  // spread the chains' ends over the GPUs), and every group's sends together.
  struct Communicators {
    ClusterShape group;
    int rings = 0;
    std::vector<Send> sends;
    int chains = 0;
    std::vector<Send> tree_sends;
    // An all_to_all's pairwise exchange: every member sends one share to every other member of
    // its group (plan_all_to_all), planned on first use only (p^2 sends: never for the rings'
    // and trees' collectives over every rank of a large run); never on a folded cluster (folds).
    models::RankGroups groups;
    RankRange range;
    mutable std::optional<std::vector<Send>> all_to_all_sends;
    bool tree_folds = true;  // false: a folded cluster, whose collectives never run this tree (ClusterNetwork::folds)
    mutable std::optional<NcclGraphBandwidths> graphs;
  };

  // Folding (NodeDetail::folded) a collective's sends, planned rank to rank (RankPlan):
  //  - private_nics: every NIC of every node carries at most one send each way, so a folded
  //    node's NIC is a rate bound on its send (max-min gives a flow alone on a link of bandwidth
  //    B at most B, and nothing else); any topology;
  //  - shared_links: the node's sends share its NICs, each NIC used carrying the same sends (the
  //    rails alike), and the node's one link into a fat tree has the bandwidth of the NICs used:
  //    the link then binds the node's sends as its NICs did (max-min's unique allocation is the
  //    same on alike rails);
  //  - none: it does not fold.
  // Either way every node's NVLink sends must be node 0's, on its own ranks: they share no link
  // with anything else, so they end when node 0's do, which are simulated.
  enum class Fold { none, private_nics, shared_links };
  struct RankSend {
    int from = 0;
    int to = 0;
    int shares = 1;
    friend bool operator==(const RankSend&, const RankSend&) = default;
  };
  struct RankPlan {
    ClusterShape group;
    int rings = 0;
    std::vector<RankSend> sends;
    int chains = 0;
    std::vector<RankSend> tree_sends;
    std::vector<RankSend> all_to_all_sends;  // every ordered pair of a group's members, one share each (plan's all_to_all only)
  };
  // NCCL's rings and trees of `groups` on `shape`, rank to rank (no SimGrid): what
  // communicators() realises on the hosts built. std::invalid_argument when the ranks (of `range`)
  // do not divide into the groups, or the range is not within the shape.
  // `all_to_all`: the all-to-all's pairwise sends too (RankPlan::all_to_all_sends), which only an
  // all-to-all needs.
  static RankPlan plan(const models::Platform& platform, ClusterShape shape, models::RankGroups groups, RankRange range = {},
                       bool all_to_all = false);
  static Fold fold_of(const models::Platform& platform, ClusterShape shape, const std::vector<RankSend>& sends);
  // Whether every collective of `collectives` (kind, groups) folds, by ring and, for an
  // all-reduce that NCCL may run as a tree (collectives.algorithm not forcing the ring), by tree:
  // the replay then builds the cluster folded.
  static bool folds(const models::Platform& platform, ClusterShape shape,
                    const std::vector<std::pair<models::CollectiveKind, models::RankGroups>>& collectives);
  // Planned on first use and kept (the network's lifetime).
  const Communicators& communicators(models::RankGroups groups, RankRange range = {}) const;

  // Collective times reused (sim/README.md, "Collectives that repeat"). Whether a collective's
  // links carry nothing but collectives: the NVLink ports, the NICs and the network, never the
  // PCIe links and host memory that copies take (a node without NVLink sends its GPUs' peer
  // traffic over PCIe; a node of one GPU sends none).
  static bool collective_links_are_their_own(const models::Platform& platform, ClusterShape shape);
  // From now on, a collective that repeats one this network has already run (the same kind,
  // bytes, algorithm and groups) takes the first one's time without its flows being simulated
  // again: the caller (the replay) guarantees that collectives run one at a time and that
  // collective_links_are_their_own(), so each one finds its links idle and ends as the first did.
  // `link_energy`: SimGrid's link energy plugin is on; the first run of each collective then
  // records what its powered links drew above idle (added to later runs' energy: reused_joules)
  // and node 0's link power over its course (the energy meter's peak: CollectiveRun::node_link_watts).
  // Collectives over a part of the ranks (RankRange) are never reused: std::logic_error (the
  // pipeline replay's stages run theirs at once, so none would find its links idle).
  void reuse_collective_times(bool link_energy);
  // One collective as first run: its time, the energy its flows drew above idle per powered link
  // direction, and node 0's link power while it ran, as (time since its start, watts up to then).
  struct CollectiveRun {
    double seconds = 0;
    std::vector<std::pair<const sg4::Link*, double>> busy_joules;
    std::vector<std::pair<double, double>> node_link_watts;
  };
  // The collective running now, if any, with its start: `recording` while its first run is being
  // simulated (the energy meter appends node 0's link power), else a reuse of `run`.
  struct CollectiveNow {
    double start = 0;
    CollectiveRun* run = nullptr;
    bool recording = false;
  };
  const CollectiveNow& collective_now() const { return collective_now_; }
  // The energy reused collectives' flows would have drawn above idle on `link` (a direction).
  double reused_joules(const sg4::Link* link) const;
  // How many collectives ran from a first run's record (for tests and benchmarks).
  int reused_collectives() const { return reused_count_; }
  // How many collectives across nodes found their GPUs' agents taken and were sent the one-sided
  // way, an actor per node's sends (for tests and benchmarks).
  int one_sided_collectives() const { return one_sided_count_; }
  int rings() const { return communicators({}).rings; }
  int tree_chains() const { return communicators({}).chains; }
  const std::vector<Send>& ring_sends() const { return communicators({}).sends; }
  const std::vector<Send>& tree_sends() const { return communicators({}).tree_sends; }

 private:
  struct Node {
    sg4::NetZone* zone = nullptr;
    sg4::Host* host = nullptr;
    sg4::Host* staging = nullptr;
    std::vector<sg4::Host*> gpus;
    std::vector<sg4::Host*> gpu_power;  // one per GPU when the GPU gives power values (gpu_power())
    std::vector<PoweredLink> links;  // the node's link directions that draw power
    sg4::Host* endpoint = nullptr;   // a folded node's one host (NodeDetail::folded)
  };
  // Sets the link's wattage on each direction (both of a split-duplex link) when `spec` gives a
  // power, and records the directions in `into`.
  static void add_power(sg4::Link* link, double idle, double busy, double bandwidth, std::vector<PoweredLink>& into);
  void collect_network_links();

  // Builds node `index`'s zone under `parent` (nullptr: it is the root); returns its NIC router
  // (nullptr without a network).
  simgrid::kernel::routing::NetPoint* build_node(int index, sg4::NetZone* parent);
  simgrid::kernel::routing::NetPoint* build_node_network(int index, sg4::NetZone* parent, const std::vector<sg4::Link*>& pcie);
  void build_network();
  // The host that sends or receives for `rank`: its GPU, or its node's endpoint when folded.
  sg4::Host* end_of(int rank) const;
  // `sends` on the hosts built: on a folded network, the other nodes' NVLink sends left out and
  // their NICs a rate bound where `fold` is private_nics.
  std::vector<Send> realise(const std::vector<RankSend>& sends, Fold fold) const;
  // The sends of `c`'s algorithm; std::logic_error for a tree that did not fold.
  const std::vector<Send>& sends_of(const Communicators& c, bool tree) const;
  // The sends a collective of `kind` runs: the all-to-all's pairwise exchange, else sends_of's.
  const std::vector<Send>& sends_of(const Communicators& c, models::CollectiveKind kind, bool tree) const;
  // The latency of the longest route of `sends` and the time the most loaded link takes for its
  // bytes, each send carrying shares x `bytes_per_share`.
  std::pair<double, double> idle_route_latency_and_data(const std::vector<Send>& sends, double bytes_per_share) const;

  models::Platform platform_;  // a copy, so that the caller's platform need not outlive the network
  ClusterShape shape_;
  NodeDetail detail_ = NodeDetail::every_node;
  std::vector<bool> host_side_;  // per node: built with its host side (NodeDetail::stage_nodes)
  std::vector<Node> nodes_;
  std::vector<PoweredLink> network_links_;
  sg4::NetZone* link_owner_ = nullptr;  // across nodes: the root zone, which holds the nodes' links
  // By (group size, stride, first rank of the range, ranks of the range), the range made explicit;
  // std::map keeps references to its values valid.
  mutable std::map<std::tuple<int, int, int, int>, Communicators> communicators_;

  // One collective's agents in flight: those still sending, and the semaphore the last of them
  // releases. Each collective has its own, so that collectives over disjoint GPUs (the pipeline
  // replay's stages, each over its own ranks) run on their agents at once.
  struct Run {
    int sending = 0;
    sg4::SemaphorePtr done;
  };
  // A GPU's collective agent (nccl_communicators.cpp, "Sends across nodes"): a daemon actor on
  // the GPU that issues the GPU's sends of each collective as mailbox communications, and is the
  // permanent receiver of the GPU's mailbox, so that every send to the GPU starts at once.
  struct Agent {
    sg4::Mailbox* mailbox = nullptr;        // the GPU's receptions
    sg4::SemaphorePtr work;                 // released once per collective the GPU sends in
    struct Put {
      sg4::Mailbox* to = nullptr;
      std::uint64_t bytes = 0;
      double rate_bound = 0;
    };
    std::vector<Put> puts;  // this collective's sends
    Run* run = nullptr;  // the collective in flight that this GPU sends or receives in (nullptr: none)
    // The one-sided way's rate-bounded receptions (one_sided_mailbox), made on first use.
    sg4::Mailbox* one_sided = nullptr;
  };
  void make_agent(sg4::Host* gpu);
  Agent& agent(const sg4::Host* gpu) const { return *agents_.at(gpu); }
  sg4::Mailbox* one_sided_mailbox(const sg4::Host* gpu) const;
  std::unordered_map<const sg4::Host*, std::unique_ptr<Agent>> agents_;
  mutable int one_sided_count_ = 0;

  // Collective times reused (reuse_collective_times): the first run of each distinct collective,
  // by (kind, bytes, algorithm, group size, stride).
  void simulate_collective_flows(models::CollectiveKind kind, std::int64_t bytes, CollectiveAlgorithm algorithm, models::RankGroups groups,
                                 RankRange range) const;
  std::vector<const PoweredLink*> powered_links() const;
  using CollectiveKey = std::tuple<models::CollectiveKind, std::int64_t, CollectiveAlgorithm, int, int>;
  bool reuse_ = false;
  bool link_energy_ = false;
  mutable std::map<CollectiveKey, CollectiveRun> runs_;
  mutable CollectiveNow collective_now_;
  mutable std::unordered_map<const sg4::Link*, double> reused_joules_;
  mutable int reused_count_ = 0;
};

// NCCL's double binary tree over `nodes` nodes (NCCL >= 2.4, src/graph/trees.cc): the parent of
// `node` in tree 0 and in tree 1, -1 at a root. Tree 0 is the binary tree rooted at node 0 in
// which node r hangs under r with its lowest set bit cleared and the bit above it set (only
// cleared where that is past the last node); tree 1
// mirrors it (r -> nodes-1-r) on an even count and shifts it by one node on an odd count, so that
// every node is interior in at most one of the two.
std::array<int, 2> double_binary_tree_parents(int nodes, int node);

// The dimensions of the torus zone built for `torus` (network.torus): those of extent 1 left
// out, which changes no route (cluster_network.cpp); [1] when every one is 1.
std::vector<unsigned long> torus_dimensions_built(const std::vector<int>& torus);

}  // namespace comptrain::sim::detail

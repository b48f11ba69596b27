// Collectives on a cluster: the SimGrid platform of a cluster (sim/src/cluster_network.hpp) and
// NCCL's rings on it (sim/collectives.hpp), against times computed by hand on a platform of round
// numbers. Every SimGrid run happens in a forked child (its engine cannot be reset in a process).

#include "comptrain/sim/collectives.hpp"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <simgrid/s4u.hpp>

#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "cluster_network.hpp"
#include "comptrain/sim/validate.hpp"
#include "comptrain/sim/workers.hpp"
#include "comptrain/support/input_error.hpp"
#include "simgrid_engine.hpp"

namespace comptrain::sim {
namespace {

namespace sg4 = simgrid::s4u;
using ::testing::HasSubstr;
using models::CollectiveKind;

// Round numbers, so that the arithmetic in the comments is exact: nodes of 8 GPUs, each GPU with a
// 100 GB/s NVLink port, a 25 GB/s PCIe link and a 10 GB/s NIC; the host's memory 100 GB/s; 4 nodes
// on one switch (a one-level fat tree) whose links carry a node's 8 rails, 80 GB/s. NCCL's latency
// terms: base 10 us, 1 us per NVLink step, 5 us per network step, a 2 us proxy overhead (so 6 us
// per intra-node step once a ring crosses the network).
const std::string kHand =
    "name: hand\n"
    "gpu:\n"
    "  name: Test GPU\n"
    "  memory: 40 GiB\n"
    "  memory_bandwidth: 1555 GB/s\n"
    "  peak: {fp32: 19.5 TFLOP/s, tf32: 156 TFLOP/s, fp16: 312 TFLOP/s, bf16: 312 TFLOP/s}\n"
    "  launch_overhead: 5 us\n"
    "host: {name: Test host, cores: 8, flops: 1 TFLOP/s, memory: 64 GiB, memory_bandwidth: 100 GB/s}\n"
    "host_link: {name: PCIe, bandwidth: 25 GB/s, latency: 1 us}\n"
    "gpu_link: {name: NVLink, bandwidth: 100 GB/s, latency: 2 us}\n"
    "gpus_per_node: 8\n"
    "nic: {name: NIC, bandwidth: 10 GB/s, latency: 1 us}\n"
    "network:\n"
    "  topology: fat_tree\n"
    "  nodes: 4\n"
    "  fat_tree: {levels: 1, down: [4], up: [1], links: [1]}\n"
    "  link: {name: 8 rails, bandwidth: 80 GB/s, latency: 0}\n"
    "collectives: {base_latency: 10 us, intra_node_step: 1 us, inter_node_step: 5 us, network_overhead: 2 us}\n";

models::Platform hand(const std::string& from = "", const std::string& to = "") {
  std::string yaml = kHand;
  if (!from.empty()) {
    const auto at = yaml.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) yaml.replace(at, from.size(), to);
  }
  return models::parse_platform(yaml, "hand.yaml");
}

constexpr std::int64_t kGB = 1'000'000'000;

// Runs `body` inside a fresh SimGrid engine in a forked child and returns what it returns.
std::string in_simgrid(const std::function<std::string()>& body) {
  ChildProcess child([&] {
    int argc = 1;
    char program[] = "collectives_test";
    char* argv[] = {program, nullptr};
    detail::silence_simgrid();
    sg4::Engine engine(&argc, argv);
    detail::configure_flow_model();
    return body();
  });
  return std::move(child.wait()).result_or_throw();
}

std::vector<double> numbers(const std::string& text) {
  std::istringstream in(text);
  std::vector<double> values;
  for (double v = 0; in >> v;) values.push_back(v);
  return values;
}

// The simulated end of one collective alone, and the same computed without running SimGrid.
struct Alone {
  double simulated = 0;
  double idle = 0;
};

Alone alone(const models::Platform& platform, ClusterShape shape, CollectiveKind kind, std::int64_t bytes) {
  const auto v = numbers(in_simgrid([&] {
    const detail::ClusterNetwork network(platform, shape);
    double end = -1;
    sg4::Actor::create("collective", network.gpu(0), [&] {
      network.run_collective(kind, bytes);
      end = sg4::Engine::get_clock();
    });
    const double idle = network.idle_collective_seconds(kind, bytes);
    sg4::Engine::get_instance()->run();
    return fmt::format("{:.17g} {:.17g}", end, idle);
  }));
  return {v.at(0), v.at(1)};
}

void expect_time(const models::Platform& platform, ClusterShape shape, CollectiveKind kind, std::int64_t bytes, double expected) {
  SCOPED_TRACE(fmt::format("{} on {} x {}", models::to_string(kind), shape.nodes, shape.gpus_per_node));
  const Alone t = alone(platform, shape, kind, bytes);
  EXPECT_NEAR(t.simulated, expected, expected * 1e-9);
  EXPECT_NEAR(t.idle, expected, expected * 1e-9) << "the idle estimate is the same arithmetic";
}

// ---- One node ------------------------------------------------------------------------------

TEST(Collectives, AllReduceOnOneNode) {
  const models::Platform p = hand();
  // A ring all-reduce sends 2(p-1)/p of the buffer from every GPU over its NVLink port; the
  // latency is base + 2(p-1) steps x 1 us.
  // 2 GPUs, 1 GB: 2*1/2 * 1 GB = 1 GB at 100 GB/s = 10 ms; latency 10 + 2*1 = 12 us.
  expect_time(p, {1, 2}, CollectiveKind::all_reduce, kGB, 0.010012);
  // 4 GPUs: 2*3/4 * 1 GB = 1.5 GB -> 15 ms; latency 10 + 6*1 = 16 us.
  expect_time(p, {1, 4}, CollectiveKind::all_reduce, kGB, 0.015016);
  // 8 GPUs: 2*7/8 * 1 GB = 1.75 GB -> 17.5 ms; latency 10 + 14*1 = 24 us.
  expect_time(p, {1, 8}, CollectiveKind::all_reduce, kGB, 0.017524);
}

TEST(Collectives, ReduceScatterAndAllGatherOnOneNode) {
  const models::Platform p = hand();
  // Half the all-reduce's traffic and steps: (p-1)/p of the input (reduce-scatter) or of the
  // output (all-gather) leaves every GPU; latency base + (p-1) x 1 us.
  // 2 GPUs: 1/2 GB -> 5 ms; 10 + 1 = 11 us.
  expect_time(p, {1, 2}, CollectiveKind::reduce_scatter, kGB, 0.005011);
  // 4 GPUs: 3/4 GB -> 7.5 ms; 10 + 3 = 13 us.
  expect_time(p, {1, 4}, CollectiveKind::all_gather, kGB, 0.007513);
  // 8 GPUs: 7/8 GB -> 8.75 ms; 10 + 7 = 17 us.
  expect_time(p, {1, 8}, CollectiveKind::reduce_scatter, kGB, 0.008767);
  expect_time(p, {1, 8}, CollectiveKind::all_gather, kGB, 0.008767);
}

TEST(Collectives, WithoutNvlinkPeersTalkOverPcie) {
  // No gpu_link: each GPU's traffic goes up its PCIe link and down its peer's (25 GB/s), and the
  // two PCIe links' latencies (1 us each, which the copies need) come on top of NCCL's term.
  // 4 GPUs all-reduce of 1 GB: 1.5 GB at 25 GB/s = 60 ms; latency 10 + 6 x 1 us = 16 us; + 2 us.
  const models::Platform p = hand("gpu_link: {name: NVLink, bandwidth: 100 GB/s, latency: 2 us}\n", "");
  expect_time(p, {1, 4}, CollectiveKind::all_reduce, kGB, 0.060018);
}

TEST(Collectives, OneRankMovesNothing) {
  const models::Platform p = hand();
  EXPECT_EQ(collective_latency(p, {1, 1}, CollectiveKind::all_reduce), 0);
  EXPECT_EQ(bus_bandwidth_factor(CollectiveKind::all_reduce, 1), 0);
  const CollectiveTiming t = simulate_collective(p, {1, 1}, CollectiveKind::all_reduce, kGB);
  EXPECT_EQ(t.seconds, 0);
  EXPECT_EQ(t.bus_bandwidth, 0);
}

// ---- Across nodes --------------------------------------------------------------------------

TEST(Collectives, AllReduceOnTwoNodes) {
  const models::Platform p = hand();
  // 2 nodes x 8 GPUs, p = 16, one rail-aligned ring per NIC: r = 8. Each GPU sends 2*15/16 of 1 GB
  // = 1.875 GB over the 8 rings, 0.234375 GB per ring. A ring leaves each node through one NIC:
  // 0.234375 GB at 10 GB/s = 23.4375 ms (the switch links carry 8 such flows at 80 GB/s: the same).
  // Its other sends share the GPUs' NVLink ports, 7 flows each, 100/7 GB/s > 10: not the bottleneck.
  // Latency: 30 steps, 2 across the network; intra-node steps cost max(1, 3 x 2) = 6 us:
  // 10 + 28 x 6 + 2 x 5 = 188 us.
  expect_time(p, {2, 8}, CollectiveKind::all_reduce, kGB, 0.0234375 + 188e-6);
  // Reduce-scatter: 15/16 GB / 8 rings = 0.1171875 GB per NIC at 10 GB/s = 11.71875 ms;
  // latency 10 + 14 x 6 + 1 x 5 = 99 us.
  expect_time(p, {2, 8}, CollectiveKind::reduce_scatter, kGB, 0.01171875 + 99e-6);
  // One GPU per node: p = 2, one ring through NIC 0: 1 GB at 10 GB/s = 100 ms; 2 steps, both
  // across the network: 10 + 2 x 5 = 20 us.
  expect_time(p, {2, 1}, CollectiveKind::all_reduce, kGB, 0.1 + 20e-6);
}

TEST(Collectives, FourNodesAndNicsSharedByTwoGpus) {
  // 4 NICs for 8 GPUs (as Polaris has 2 for 4): 4 rings. 4 nodes x 8 GPUs, p = 32: each GPU sends
  // 2*31/32 GB = 1.9375 GB, 0.484375 GB per ring and NIC at 10 GB/s = 48.4375 ms.
  // Latency: 62 steps, 6 across the network: 10 + 56 x 6 + 6 x 5 = 376 us.
  const models::Platform p = hand("latency: 1 us}\nnetwork", "latency: 1 us, per_node: 4}\nnetwork");
  expect_time(p, {4, 8}, CollectiveKind::all_reduce, kGB, 0.0484375 + 376e-6);
}

TEST(Collectives, EveryTopologyCarriesTheRings) {
  // On a dragonfly and a torus whose links carry a node's 80 GB/s the NICs stay the bottleneck:
  // the two-node all-reduce takes the fat tree's time.
  const std::string tree = "  fat_tree: {levels: 1, down: [4], up: [1], links: [1]}\n";
  const models::Platform fly =
      hand("  topology: fat_tree\n" + std::string("  nodes: 4\n") + tree,
           "  topology: dragonfly\n  nodes: 4\n  dragonfly: {groups: [2, 1], chassis: [1, 1], routers: [2, 1], nodes: 1}\n");
  expect_time(fly, {2, 8}, CollectiveKind::all_reduce, kGB, 0.0234375 + 188e-6);
  // A ring of 4 nodes on a 1-D torus of 4: each hop one link, carrying a node pair's 8 rails.
  // Reduce-scatter, p = 32: 31/32 GB / 8 rings at 10 GB/s = 12.109375 ms; latency 31 steps, 3
  // across the network: 10 + 28 x 6 + 3 x 5 = 193 us.
  const models::Platform torus = hand("  topology: fat_tree\n" + std::string("  nodes: 4\n") + tree, "  topology: torus\n  nodes: 4\n  torus: [4]\n");
  expect_time(torus, {4, 8}, CollectiveKind::reduce_scatter, kGB, 0.012109375 + 193e-6);
}

TEST(Collectives, SimulatedBusBandwidthFollowsNcclTests) {
  const models::Platform p = hand();
  const CollectiveTiming t = simulate_collective(p, {1, 8}, CollectiveKind::all_reduce, kGB);
  EXPECT_NEAR(t.seconds, 0.017524, 1e-12);
  EXPECT_NEAR(t.algorithm_bandwidth, 1e9 / 0.017524, 1);
  EXPECT_NEAR(t.bus_bandwidth, 1e9 / 0.017524 * 2 * 7 / 8, 1);
  EXPECT_LT(t.bus_bandwidth, 100e9) << "never above the NVLink port";
}

// ---- Contention ----------------------------------------------------------------------------

// Two all-reduces at once on the same 8 GPUs share every NVLink port: each moves its 1.75 GB at
// 50 GB/s, 35 ms after its 24 us latency, where one alone takes 17.524 ms.
TEST(Collectives, TwoCollectivesAtOnceShareTheLinks) {
  const models::Platform p = hand();
  const auto v = numbers(in_simgrid([&] {
    const detail::ClusterNetwork network(p, {1, 8});
    std::vector<double> ends(2, -1);
    for (std::size_t i = 0; i < 2; ++i) {
      sg4::Actor::create(fmt::format("collective{}", i), network.gpu(0), [&, i] {
        network.run_collective(CollectiveKind::all_reduce, kGB);
        ends[i] = sg4::Engine::get_clock();
      });
    }
    sg4::Engine::get_instance()->run();
    return fmt::format("{:.17g} {:.17g}", ends[0], ends[1]);
  }));
  EXPECT_NEAR(v.at(0), 0.035024, 1e-9);
  EXPECT_NEAR(v.at(1), 0.035024, 1e-9);
}

// A collective and a PCIe copy use different links: neither slows the other. The collective ends
// at its time alone (17.524 ms); the 1 GB device-to-host copy at 1 us + 1 GB / 25 GB/s = 40.001 ms.
TEST(Collectives, ACollectiveAndAPcieCopyDoNotSlowEachOther) {
  const models::Platform p = hand();
  for (const ClusterShape shape : {ClusterShape{1, 8}, ClusterShape{2, 8}}) {
    SCOPED_TRACE(shape.nodes);
    const auto v = numbers(in_simgrid([&] {
      const detail::ClusterNetwork network(p, shape);
      double collective = -1;
      double copy = -1;
      sg4::Actor::create("collective", network.gpu(0), [&] {
        network.run_collective(CollectiveKind::all_reduce, kGB);
        collective = sg4::Engine::get_clock();
      });
      sg4::Actor::create("copy", network.gpu(3), [&] {
        sg4::Comm::sendto(network.gpu(3), network.host(0), kGB);
        copy = sg4::Engine::get_clock();
      });
      const double alone = network.idle_collective_seconds(CollectiveKind::all_reduce, kGB);
      sg4::Engine::get_instance()->run();
      return fmt::format("{:.17g} {:.17g} {:.17g}", collective, copy, alone);
    }));
    EXPECT_NEAR(v.at(0), v.at(2), 1e-12);
    EXPECT_NEAR(v.at(1), 0.040001, 1e-12);
  }
}

// The node's host memory is one link shared by its GPUs' copies: 8 GPUs copying 1 GB each to the
// host at once ask 8 x 25 GB/s of a 100 GB/s memory, 12.5 GB/s each: 1 us + 80 ms. One GPU alone
// gets its PCIe link's 25 GB/s.
TEST(Collectives, GpusOfANodeShareTheHostMemory) {
  const models::Platform p = hand();
  const auto v = numbers(in_simgrid([&] {
    const detail::ClusterNetwork network(p, {1, 8});
    std::vector<double> ends(8, -1);
    for (int g = 0; g < 8; ++g) {
      sg4::Actor::create(fmt::format("copy{}", g), network.gpu(g), [&, g] {
        sg4::Comm::sendto(network.gpu(g), network.host(0), kGB);
        ends[static_cast<std::size_t>(g)] = sg4::Engine::get_clock();
      });
    }
    sg4::Engine::get_instance()->run();
    std::string out;
    for (double e : ends) out += fmt::format("{:.17g} ", e);
    return out;
  }));
  ASSERT_EQ(v.size(), 8u);
  for (double end : v) EXPECT_NEAR(end, 0.080001, 1e-12);
}

// Each end's limits hold whichever direction a route crosses a link (SimGrid 3.32 lost a
// split-duplex link's DOWN bound behind a shared link in a reversed symmetrical route: commit
// 231e46d). Two 1 GB flows out of GPU 0's NVLink port (to GPUs 1 and 2) and one more into GPU 1's
// (from GPU 3): every port carries two flows, 50 GB/s each, 20 ms. Two 1 GB flows from two NICs of
// node 0 into NIC 0 of node 1 (rank 8) share its 10 GB/s receive side: 5 GB/s each, 200 ms.
TEST(Collectives, EveryLinkBoundsItsFlowsInBothDirections) {
  const models::Platform p = hand();
  const auto v = numbers(in_simgrid([&] {
    const detail::ClusterNetwork network(p, {2, 8});
    std::vector<double> ends(5, -1);
    const std::vector<std::pair<int, int>> flows{{0, 1}, {0, 2}, {3, 1}, {0, 8}, {1, 8}};
    for (std::size_t i = 0; i < flows.size(); ++i) {
      sg4::Actor::create(fmt::format("flow{}", i), network.gpu(flows[i].first), [&, i] {
        // The NVLink flows first, the NIC flows after them, so that the two groups never overlap.
        if (i >= 3) sg4::this_actor::sleep_for(1);
        sg4::Comm::sendto(network.gpu(flows[i].first), network.gpu(flows[i].second), kGB);
        ends[i] = sg4::Engine::get_clock();
      });
    }
    sg4::Engine::get_instance()->run();
    std::string out;
    for (double e : ends) out += fmt::format("{:.17g} ", e);
    return out;
  }));
  ASSERT_EQ(v.size(), 5u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_NEAR(v[i], 0.020, 1e-12) << i;
  for (std::size_t i = 3; i < 5; ++i) EXPECT_NEAR(v[i], 1.200, 1e-12) << i;
}

// ---- The single-GPU platform ---------------------------------------------------------------

// Shape {1, 1} is the replay's platform as it always was: hosts "gpu" and "host" in zone "node",
// one split-duplex PCIe link, the pageable staging host behind its own link when the platform
// gives a pageable rate, and no NVLink, NIC or host-memory link.
TEST(Collectives, OneGpuIsTheSingleGpuPlatform) {
  const models::Platform p = hand("latency: 1 us}\ngpu_link", "latency: 1 us, pageable_bandwidth: 5 GB/s}\ngpu_link");
  const std::string out = in_simgrid([&] {
    const detail::ClusterNetwork network(p, {1, 1});
    std::string names;
    for (const sg4::Host* h : sg4::Engine::get_instance()->get_all_hosts()) names += h->get_name() + " ";
    for (const sg4::Link* l : sg4::Engine::get_instance()->get_all_links()) names += l->get_name() + " ";
    double pinned = -1;
    double pageable = -1;
    sg4::Actor::create("copies", network.gpu(0), [&] {
      sg4::Comm::sendto(network.gpu(0), network.host(0), kGB);
      pinned = sg4::Engine::get_clock();
      sg4::Comm::sendto(network.pageable_staging(0), network.gpu(0), kGB);
      pageable = sg4::Engine::get_clock() - pinned;
    });
    sg4::Engine::get_instance()->run();
    return fmt::format("{}|{}|{:.17g} {:.17g}", sg4::Engine::get_instance()->get_netzone_root()->get_name(), names, pinned, pageable);
  });
  EXPECT_THAT(out, HasSubstr("node|"));
  for (const char* name : {"gpu ", "host ", "pageable_host_memory ", "host_link_UP ", "host_link_DOWN ", "pageable_staging "}) {
    EXPECT_THAT(out, HasSubstr(name));
  }
  EXPECT_THAT(out, ::testing::Not(HasSubstr("gpu_link")));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("nic")));
  EXPECT_THAT(out, ::testing::Not(HasSubstr(" host_memory ")));
  // 1 us + 1 GB / 25 GB/s pinned; a pageable copy at the staging link's 5 GB/s: 1 us + 200 ms.
  const auto times = numbers(out.substr(out.rfind('|') + 1));
  ASSERT_EQ(times.size(), 2u) << out;
  EXPECT_NEAR(times[0], 0.040001, 1e-12);
  EXPECT_NEAR(times[1], 0.200001, 1e-12);
}

// ---- Shapes --------------------------------------------------------------------------------

std::string shape_error(const models::Platform& platform, ClusterShape shape) {
  try {
    check_cluster_shape(platform, shape);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError for " << shape.nodes << " x " << shape.gpus_per_node;
  return "";
}

TEST(Collectives, BadShapesAreRejected) {
  const models::Platform p = hand();
  EXPECT_NO_THROW(check_cluster_shape(p, {4, 8}));
  EXPECT_THAT(shape_error(p, {0, 8}), HasSubstr("expected at least 1 node and 1 GPU per node"));
  EXPECT_THAT(shape_error(p, {1, 0}), HasSubstr("expected at least 1 node and 1 GPU per node"));
  EXPECT_THAT(shape_error(p, {5, 8}), HasSubstr("5 node(s) on platform 'hand' (hand.yaml), which has 4 (network.nodes); expected at most 4"));
  EXPECT_THAT(shape_error(p, {2, 9}), HasSubstr("9 GPUs per node on platform 'hand' (hand.yaml), whose nodes have 8 (gpus_per_node)"));
  const models::Platform single = models::builtin_platform("a100-80gb");
  EXPECT_THAT(shape_error(single, {2, 8}), HasSubstr("which is one node (it has no network); expected 1 node"));
  EXPECT_THROW(simulate_collective(p, {5, 8}, CollectiveKind::all_reduce, kGB), InputError);
  EXPECT_THROW(simulate_collective(p, {2, 8}, CollectiveKind::all_reduce, 0), InputError);
  // Built inside an engine, a bad shape is the same InputError, before any SimGrid call.
  EXPECT_THROW(in_simgrid([&] {
                 const detail::ClusterNetwork network(p, {2, 16});
                 return std::string();
               }),
               InputError);
}

// ---- Shipped clusters ----------------------------------------------------------------------

// NCCL's rings across DGX A100 nodes are NIC-bound, 8 x 24 = 192 GB/s of bus bandwidth (the
// figure NVIDIA/nccl#812 gives), less the latency term's share; one node alone is NVLink-bound.
TEST(Collectives, ShippedSuperpodsAreNicBoundAcrossNodes) {
  const models::Platform a = models::builtin_platform("dgx-a100-superpod");
  const std::int64_t size = std::int64_t{8} << 30;
  const CollectiveTiming nodes4 = simulate_collective(a, {4, 8}, CollectiveKind::all_reduce, size);
  EXPECT_LT(nodes4.bus_bandwidth, 192e9);
  EXPECT_GT(nodes4.bus_bandwidth, 0.99 * 192e9);
  const CollectiveTiming node1 = simulate_collective(a, {1, 8}, CollectiveKind::all_reduce, size);
  EXPECT_LT(node1.bus_bandwidth, 240e9);
  EXPECT_GT(node1.bus_bandwidth, 0.99 * 240e9);
}

// ---- The validation table's bus_bandwidth points --------------------------------------------

const std::string kBusPoint =
    R"({"id": "b", "source": "s", "gpu": "g", "metric": "bus_bandwidth", "platform": "dgx-a100-superpod", "nodes": 2, )"
    R"("gpus_per_node": 8, "collective": "reduce_scatter", "bytes": 1073741824, "published": 190, "unit": "GB/s", "notes": "n"})";

std::string table_error(const std::string& line) {
  try {
    parse_validation_table(line, "t.jsonl", ".");
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError for " << line;
  return "";
}

std::string with_field(std::string line, const std::string& from, const std::string& to) {
  const auto at = line.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) line.replace(at, from.size(), to);
  return line;
}

TEST(CollectivesValidation, ABusBandwidthPointNamesItsSetupInsteadOfAScenario) {
  const ValidationTable table = parse_validation_table(kBusPoint, "t.jsonl", ".");
  const ValidationPoint& p = table.points.at(0);
  EXPECT_EQ(p.metric, ValidationMetric::bus_bandwidth);
  EXPECT_EQ(metric_name(p.metric), "bus_bandwidth");
  EXPECT_TRUE(p.covered());
  ASSERT_TRUE(p.collective);
  EXPECT_EQ(p.collective->platform.name, "dgx-a100-superpod");
  EXPECT_EQ(p.collective->nodes, 2);
  EXPECT_EQ(p.collective->gpus_per_node, 8);
  EXPECT_EQ(p.collective->kind, CollectiveKind::reduce_scatter);
  EXPECT_EQ(p.collective->bytes, std::int64_t{1} << 30);
  EXPECT_TRUE(p.model.empty()) << "no model, precision or batch for a collective";
}

TEST(CollectivesValidation, BadBusBandwidthPointsAreNamedAtTheirLine) {
  EXPECT_THAT(table_error(with_field(kBusPoint, "reduce_scatter", "broadcast")),
              HasSubstr("t.jsonl:1: field 'collective': found \"broadcast\"; expected all_reduce, reduce_scatter or all_gather"));
  EXPECT_THAT(table_error(with_field(kBusPoint, "\"nodes\": 2", "\"nodes\": 141")),
              HasSubstr("t.jsonl:1: field 'nodes': found 141; expected an integer from 1 to 140"));
  EXPECT_THAT(table_error(with_field(kBusPoint, "\"gpus_per_node\": 8", "\"gpus_per_node\": 0")),
              HasSubstr("field 'gpus_per_node': found 0; expected an integer from 1 to 8"));
  EXPECT_THAT(table_error(with_field(kBusPoint, "dgx-a100-superpod", "dgx-z100")), HasSubstr("t.jsonl:1: field 'platform': unknown platform 'dgx-z100'"));
  EXPECT_THAT(table_error(with_field(kBusPoint, "\"bytes\": 1073741824, ", "")), HasSubstr("field 'bytes': found nothing; expected an integer"));
  EXPECT_THAT(table_error(with_field(kBusPoint, "\"notes\": \"n\"", "\"notes\": \"n\", \"scenario\": \"x.yaml\"")),
              HasSubstr("field 'scenario' given for bus_bandwidth; expected the collective's fields instead"));
  const std::string throughput =
      R"({"id": "x", "source": "s", "model": "resnet50", "gpu": "g", "precision": "fp32", "batch": 8, "metric": "throughput_samples_per_s", )"
      R"("published": 900, "unit": "images/s", "notes": "n", "nodes": 2, "not_covered": "no"})";
  EXPECT_THAT(table_error(throughput), HasSubstr("field 'nodes' given for throughput_samples_per_s; expected it only on bus_bandwidth points"));
}

}  // namespace
}  // namespace comptrain::sim

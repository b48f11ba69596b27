// How much CPU one simulated collective costs as the cluster grows (issue 15's targets are 1,024
// GPUs in under 30 s and 4,096 in under 2 minutes for a whole iteration of many collectives, so
// one collective must stay well under a second).
//
// BM_SimulateCollective: sim::simulate_collective as callers use it, an all-reduce of 1 GiB over
// every GPU of N DGX H100 nodes (dgx-h100-superpod, 8 rails), timed as the forked child's CPU
// seconds (getrusage of the reaped child). BM_ClusterPhases splits the same work in a child of its
// own into building the SimGrid platform and running the collective (counters, CPU seconds), with
// the child's peak RSS. Both up to dgx-h100-superpod's full size, 2,048 nodes (16,384 GPUs), every
// node built whole. BM_FoldedClusterPhases: the same on the folded cluster the symmetric replay
// builds (sim/README.md, "Ranks in classes": node 0 whole, one endpoint host per other node), up to
// h100-100k's 12,500 nodes (100,000 GPUs). BM_PipelineClusterPhases: the platform the pipeline
// replay builds (NodeDetail::stage_nodes: every GPU, the host side of the 16 stages'
// representatives' nodes only, no power hosts) and 16 all-reduces at once, one per stage over
// its own ranks, as the stages' data-parallel collectives run (each on its GPUs' collective
// agents), up to 2,048 nodes (the 405B layouts of scenarios/llama3-405b-layout-plan-16384xh100.yaml).

#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <simgrid/s4u.hpp>

#include <algorithm>
#include <array>
#include <vector>

#include "engine/cluster_network.hpp"
#include "comptrain/sim/engine/collectives.hpp"
#include "engine/simgrid_engine.hpp"

namespace {

using namespace comptrain;

double cpu_seconds(const rusage& usage) {
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
}

double children_cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_CHILDREN, &usage);
  return cpu_seconds(usage);
}

double self_cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return cpu_seconds(usage);
}

constexpr std::int64_t kBytes = std::int64_t{1} << 30;

void BM_SimulateCollective(benchmark::State& state) {
  static const models::Platform platform = models::builtin_platform("dgx-h100-superpod");
  const sim::ClusterShape shape{static_cast<int>(state.range(0)), 8};
  sim::CollectiveTiming timing;
  for (auto _ : state) {
    const double before = children_cpu_seconds();
    timing = sim::simulate_collective(platform, shape, models::CollectiveKind::all_reduce, kBytes);
    state.SetIterationTime(children_cpu_seconds() - before);
  }
  state.counters["GPUs"] = shape.ranks();
  state.counters["busbw GB/s"] = timing.bus_bandwidth / 1e9;
}

// The child's CPU seconds after building the platform and after the collective.
struct Phases {
  double build = 0;
  double run = 0;
  double max_rss_mib = 0;
};

// `stages` > 0: the pipeline replay's platform for that many stages and one all-reduce per stage
// over its ranks, all at once; else one all-reduce over every GPU.
Phases phases_in_child(int nodes, sim::detail::ClusterNetwork::NodeDetail detail = sim::detail::ClusterNetwork::NodeDetail::every_node,
                       int stages = 0) {
  std::array<int, 2> pipe_fds{};
  Phases phases;
  if (::pipe(pipe_fds.data()) != 0) return phases;
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(pipe_fds[0]);
    const double start = self_cpu_seconds();
    sim::detail::ConfiguredEngine engine;
    std::vector<int> representative_nodes;
    for (int p = 0; p < stages; ++p) representative_nodes.push_back(p * (nodes / stages));
    const sim::detail::ClusterNetwork network(models::builtin_platform(nodes > 2048 ? "h100-100k" : "dgx-h100-superpod"), {nodes, 8}, detail,
                                              representative_nodes);
    Phases measured;
    measured.build = self_cpu_seconds() - start;
    if (stages == 0) {
      simgrid::s4u::Actor::create("collective", network.gpu(0), [&] { network.run_collective(models::CollectiveKind::all_reduce, kBytes); });
    }
    const int stage_ranks = stages > 0 ? nodes * 8 / stages : 0;
    for (int p = 0; p < stages; ++p) {
      const sim::detail::RankRange range{p * stage_ranks, stage_ranks};
      simgrid::s4u::Actor::create("stage", network.gpu(range.first), [&network, range] {
        network.run_collective(models::CollectiveKind::all_reduce, kBytes, {}, range);
      });
    }
    engine.run();
    measured.run = self_cpu_seconds() - start - measured.build;
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    measured.max_rss_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux
    const bool written = ::write(pipe_fds[1], &measured, sizeof measured) == static_cast<ssize_t>(sizeof measured);
    ::_exit(written ? 0 : 1);
  }
  ::close(pipe_fds[1]);
  const bool read_all = ::read(pipe_fds[0], &phases, sizeof phases) == static_cast<ssize_t>(sizeof phases);
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!read_all || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return {-1, -1, -1};
  return phases;
}

void cluster_phases(benchmark::State& state, sim::detail::ClusterNetwork::NodeDetail detail, int stages = 0) {
  Phases total;
  for (auto _ : state) {
    const Phases p = phases_in_child(static_cast<int>(state.range(0)), detail, stages);
    if (p.build < 0) {
      state.SkipWithError("child failed");
      break;
    }
    state.SetIterationTime(p.build + p.run);
    total.build += p.build;
    total.run += p.run;
    total.max_rss_mib = std::max(total.max_rss_mib, p.max_rss_mib);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["GPUs"] = static_cast<double>(state.range(0) * 8);
  state.counters["build CPU s"] = total.build / n;
  state.counters["collective CPU s"] = total.run / n;
  state.counters["max RSS MiB"] = total.max_rss_mib;
}

void BM_ClusterPhases(benchmark::State& state) { cluster_phases(state, sim::detail::ClusterNetwork::NodeDetail::every_node); }
void BM_FoldedClusterPhases(benchmark::State& state) { cluster_phases(state, sim::detail::ClusterNetwork::NodeDetail::folded); }
void BM_PipelineClusterPhases(benchmark::State& state) { cluster_phases(state, sim::detail::ClusterNetwork::NodeDetail::stage_nodes, 16); }

}  // namespace

// 16, 128 and 512 DGX H100 nodes: 128, 1,024 and 4,096 GPUs; once at 2,048 nodes (16,384 GPUs).
BENCHMARK(BM_SimulateCollective)->Arg(16)->Arg(128)->Arg(512)->Unit(benchmark::kMillisecond)->UseManualTime();
BENCHMARK(BM_SimulateCollective)->Arg(2048)->Iterations(1)->Unit(benchmark::kMillisecond)->UseManualTime();
BENCHMARK(BM_ClusterPhases)->Arg(16)->Arg(128)->Arg(512)->Unit(benchmark::kMillisecond)->UseManualTime();
BENCHMARK(BM_ClusterPhases)->Arg(2048)->Iterations(1)->Unit(benchmark::kMillisecond)->UseManualTime();
// Folded: 4 nodes (32 GPUs) to 12,500 (100,000 GPUs, h100-100k).
BENCHMARK(BM_FoldedClusterPhases)->Arg(4)->Arg(128)->Arg(512)->Unit(benchmark::kMillisecond)->UseManualTime();
BENCHMARK(BM_FoldedClusterPhases)->Arg(2048)->Arg(12500)->Iterations(1)->Unit(benchmark::kMillisecond)->UseManualTime();
// 16 pipeline stages on 128, 512 and 2,048 nodes (1,024 to 16,384 GPUs).
BENCHMARK(BM_PipelineClusterPhases)->Arg(128)->Arg(512)->Unit(benchmark::kMillisecond)->UseManualTime();
BENCHMARK(BM_PipelineClusterPhases)->Arg(2048)->Iterations(1)->Unit(benchmark::kMillisecond)->UseManualTime();
BENCHMARK_MAIN();

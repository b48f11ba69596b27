// How fast comptrain replays an iteration, next to the same number of SimGrid activities with
// no comptrain logic around them, so that comptrain's overhead is a ratio.
//
// Both sides pay for a fresh process per simulation (SimGrid's engine cannot be reset, so
// comptrain forks one per simulation): the raw side forks too, for a like-for-like ratio.
// Timed in wall-clock time (the work happens in the child). Counters: items_per_second =
// schedule tasks (ops, copies) replayed per second; `simulations/s`.

#include <benchmark/benchmark.h>
#include <sys/wait.h>
#include <unistd.h>

#include <simgrid/s4u.hpp>

#include <memory>
#include <optional>

#include "comptrain/sim/run.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "simgrid_engine.hpp"

namespace {

namespace sg4 = simgrid::s4u;
using namespace comptrain;

// One scenario, prepared and scheduled through the run layer (sim/run.hpp) as `comptrain
// simulate` does; the benchmark times the replay of its schedule.
struct Workload {
  std::unique_ptr<sim::PreparedScenario> prepared;
  std::optional<sim::ScheduledRun> run;
  std::size_t execs = 0;
  std::size_t copies = 0;
};

Workload make_workload(const std::string& model, std::int64_t batch) {
  sim::Scenario scenario;
  scenario.source = "<simulate_bench>";
  scenario.name = model;
  scenario.zoo_model = zoo::ModelSpec{};
  scenario.zoo_model->model = model;
  scenario.batch_size = batch;
  scenario.platform = models::builtin_platform("a100-80gb");
  scenario.strategy.name = "offload";
  scenario.strategy.rules.push_back({{}, models::OffloadAction{}});
  Workload w;
  w.prepared = std::make_unique<sim::PreparedScenario>(scenario);
  w.run = std::get<sim::ScheduledRun>(sim::schedule_run(*w.prepared, scenario.strategy, batch));
  for (const auto& task : w.run->schedule.tasks) {
    const bool copy = task.kind == models::TaskKind::offload || task.kind == models::TaskKind::prefetch;
    (copy ? w.copies : w.execs) += 1;
  }
  return w;
}

const Workload& workload(int which) {
  static const Workload resnet = make_workload("resnet50", 32);
  static const Workload gpt = make_workload("gpt2", 4);
  return which == 0 ? resnet : gpt;
}

const char* which_label(std::int64_t which) { return which == 0 ? "resnet50 b32 offload-all" : "gpt2 b4 offload-all"; }

void set_counters(benchmark::State& state, const Workload& w) {
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * (w.execs + w.copies)));
  state.counters["simulations/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["tasks"] = static_cast<double>(w.execs + w.copies);
  state.SetLabel(which_label(state.range(0)));
}

void BM_ComptrainReplay(benchmark::State& state) {
  const Workload& w = workload(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    const auto result = sim::replay(*w.prepared, *w.run, sim::Isolation::child_process);
    benchmark::DoNotOptimize(result.iteration_seconds);
  }
  set_counters(state, w);
}

// The same numbers of execs (on a GPU host) and transfers (over one split-duplex link), issued
// by two actors without dependencies, memory tracking or recording.
void raw_simgrid(std::size_t execs, std::size_t copies) {
  int argc = 1;
  char program[] = "raw";
  char* argv[] = {program, nullptr};
  sim::detail::silence_simgrid();
  sg4::Engine engine(&argc, argv);
  sim::detail::configure_flow_model();
  auto* zone = sg4::create_full_zone("node");
  sg4::Host* gpu = zone->create_host("gpu", 1e9)->seal();
  sg4::Host* host = zone->create_host("host", 1e9)->seal();
  auto* link = zone->create_split_duplex_link("pcie", 25e9)->set_latency(1e-6)->seal();
  zone->add_route(gpu->get_netpoint(), host->get_netpoint(), nullptr, nullptr,
                  {sg4::LinkInRoute(link, sg4::LinkInRoute::Direction::UP)}, true);
  zone->seal();
  sg4::Actor::create("compute", gpu, [execs] {
    for (std::size_t i = 0; i < execs; ++i) sg4::this_actor::execute(1e6);
  });
  sg4::Actor::create("copies", gpu, [copies, gpu, host] {
    for (std::size_t i = 0; i < copies; ++i) sg4::Comm::sendto(gpu, host, 1 << 20);
  });
  engine.run();
}

void BM_RawSimGrid(benchmark::State& state) {
  const Workload& w = workload(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    const pid_t child = ::fork();
    if (child == 0) {
      raw_simgrid(w.execs, w.copies);
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) state.SkipWithError("raw SimGrid child failed");
  }
  set_counters(state, w);
}

}  // namespace

BENCHMARK(BM_ComptrainReplay)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_RawSimGrid)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();

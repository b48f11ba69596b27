// The replay of an offloaded optimizer: host tasks run on the node's host, which the node's ranks
// share (hand computed); ZeRO-Offload on zoo models keeps the fp32 state off the GPU's peak and
// takes the CPU Adam model's time; the symmetric replay equals the replay of every rank; the
// scenario keys and their errors.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "comptrain/models/data_parallel.hpp"
#include "comptrain/models/op_time.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/sim/engine/collectives.hpp"
#include "comptrain/sim/report/simulate_report.hpp"
#include "comptrain/sim/run/run.hpp"
#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/sim/engine/replay.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/traces/summary.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "common/must_apply.hpp"
#include "common/schedule_builder.hpp"

namespace comptrain::sim {
namespace {

using models::MemoryRole;
using models::Stream;
using models::TaskKind;
using testing::ScheduleBuilder;

models::Platform node_platform(int gpus) {
  models::Platform p = testing::test_platform();
  p.gpus_per_node = gpus;
  p.gpu_link.name = "test NVLink";
  p.gpu_link.bandwidth = 100e9;
  p.host.memory_bandwidth = 1e15;
  return p;
}

// A 1 ms host task beside a 1 ms kernel: different resources, both end at 1 ms. The node's 4
// GPUs' host tasks share the host: 4 ms each, replaying one rank (which runs the node's work) or
// every rank (4 actors on one host); one GPU of the node alone takes 1 ms.
TEST(OptimizerOffloadReplay, HostTasksShareTheNodesHost) {
  ScheduleBuilder b;
  const auto kernel = b.task("kernel", TaskKind::op, Stream::compute, 1e-3, {}, {});
  const auto cpu = b.task("CPU Adam", TaskKind::host_compute, Stream::host, 1e-3, {}, {});
  const auto after = b.task("after both", TaskKind::op, Stream::compute, 1e-3, {}, {}, {cpu});
  ASSERT_NO_THROW(b.s.validate());
  const models::Platform p = node_platform(4);
  const SimulationResult alone = simulate(p, b.s, testing::bare_framework(), ClusterShape{1, 1});
  EXPECT_NEAR(alone.tasks[kernel].end, 1e-3, 1e-12);
  EXPECT_NEAR(alone.tasks[cpu].end, 1e-3, 1e-12);
  EXPECT_NEAR(alone.iteration_seconds, 2e-3, 1e-12);
  EXPECT_NEAR(alone.seconds_by_task_kind[static_cast<std::size_t>(TaskKind::host_compute)], 1e-3, 1e-12);
  const SimulationResult one = simulate(p, b.s, testing::bare_framework(), ClusterShape{1, 4});
  const SimulationResult every = simulate(p, b.s, testing::bare_framework(), ClusterShape{1, 4}, ReplayRanks::every_rank);
  for (const SimulationResult* r : {&one, &every}) {
    EXPECT_NEAR(r->tasks[kernel].end, 1e-3, 1e-12);
    EXPECT_NEAR(r->tasks[cpu].end, 4e-3, 1e-12);
    EXPECT_NEAR(r->tasks[after].end, 5e-3, 1e-12);
  }
  // Two nodes of two: each node's host is shared by its two GPUs only.
  const SimulationResult nodes = simulate(node_platform(2), b.s, testing::bare_framework(), ClusterShape{1, 2});
  EXPECT_NEAR(nodes.tasks[cpu].end, 2e-3, 1e-12);
}

TEST(OptimizerOffloadReplay, AHostTaskOffTheHostStreamIsInvalid) {
  ScheduleBuilder b;
  b.task("CPU Adam on the GPU's stream", TaskKind::host_compute, Stream::compute, 1e-3, {}, {});
  EXPECT_THROW(b.s.validate(), std::logic_error);
  ScheduleBuilder c;
  c.task("a kernel on the host", TaskKind::op, Stream::host, 1e-3, {}, {});
  EXPECT_THROW(c.s.validate(), std::logic_error);
}

traces::Trace gpt_mixed(std::int64_t layers = 2) {
  zoo::ModelRequest request;
  request.model = "gpt2";
  request.layers = layers;
  request.precision = zoo::Precision::mixed;
  request.optimizer = zoo::Optimizer::adam;
  request.batch_size = 2;
  return zoo::build_model(request);
}

models::Schedule schedule_for(const traces::Trace& trace, const models::Platform& platform, const models::DataParallelSpec& spec) {
  const models::OpTimeModel time_model(platform);
  models::Schedule s = test_support::must_apply(models::build_schedule(trace, time_model, models::StrategySpec{}));
  models::apply_data_parallel(s, trace, spec, platform);
  return s;
}

// Two A100s of a DGX node with ZeRO-2: without offload the fp32 state (12Ψ/2 bytes) is at the
// peak; offloaded, none of it is, and the CPU step of each rank's half takes the model's time for
// it twice over, the node's two ranks sharing the host: 2 x Ψ/2 x 34 B / 409.6 GB/s (a100-80gb's
// host, memory bound).
TEST(OptimizerOffloadReplay, OffloadTakesTheStateOffThePeakAndTheStepTakesTheModelsTime) {
  const models::Platform platform = models::builtin_platform("a100-80gb");
  const auto trace = gpt_mixed();
  const std::int64_t psi = traces::summarize(trace).parameters;
  models::DataParallelSpec spec;
  spec.zero_stage = 2;
  spec.ranks = 2;
  const ClusterShape shape{1, 2};
  const auto framework = testing::bare_framework(std::int64_t{80} << 30);
  const SimulationResult on_gpu = simulate(platform, schedule_for(trace, platform, spec), framework, shape);
  spec.offload_optimizer = models::OptimizerOffloadSpec{};
  const models::Schedule s = schedule_for(trace, platform, spec);
  const SimulationResult off = simulate(platform, s, framework, shape);
  ASSERT_TRUE(on_gpu.fits());
  ASSERT_TRUE(off.fits());
  EXPECT_EQ(on_gpu.peak_by_role[static_cast<std::size_t>(MemoryRole::optimizer_state)], (12 * psi + 1) / 2);
  EXPECT_EQ(off.peak_by_role[static_cast<std::size_t>(MemoryRole::optimizer_state)], 0);
  EXPECT_LT(off.peak_bytes, on_gpu.peak_bytes);
  // The step: one host task for this rank's half, and the node's two ranks share the host.
  double cpu = 0;
  std::int64_t elements = 0;
  for (std::size_t t = 0; t < s.tasks.size(); ++t) {
    if (s.tasks[t].kind != TaskKind::host_compute) continue;
    cpu += off.tasks[t].end - off.tasks[t].start;
  }
  for (const models::Task& t : s.tasks) {
    if (t.name.rfind("updated parameters", 0) == 0) elements += t.bytes / 2;
  }
  ASSERT_GT(elements, 0);
  EXPECT_NEAR(cpu, 2 * static_cast<double>(elements) * 34 / platform.host.memory_bandwidth, 1e-9);
  EXPECT_NEAR(off.seconds_by_task_kind[static_cast<std::size_t>(TaskKind::host_compute)], cpu, 1e-12);
}

// The symmetric replay against every rank's (as cluster_replay_test's
// TheSymmetricReplayEqualsTheReplayOfEveryRank) with the optimizer offloaded: ZeRO-2, ZeRO-3 with
// Twin-Flow's ratio 0.5 and with Deep Optimizer States (k = 2), on two nodes of two GPUs of the
// DGX A100 cluster, whose hosts each serve two GPUs.
TEST(OptimizerOffloadReplay, TheSymmetricReplayEqualsTheReplayOfEveryRank) {
  const models::Platform platform = models::builtin_platform("dgx-a100-superpod");
  const auto trace = gpt_mixed();
  const ClusterShape shape{2, 2};
  std::vector<std::pair<std::string, models::DataParallelSpec>> cases;
  models::DataParallelSpec two;
  two.ranks = shape.ranks();
  two.zero_stage = 2;
  two.offload_optimizer = models::OptimizerOffloadSpec{};
  cases.emplace_back("ZeRO-2 offload", two);
  models::DataParallelSpec twin = two;
  twin.zero_stage = 3;
  twin.sub_group_elements = 5'000'000;
  twin.offload_optimizer->ratio = 0.5;
  cases.emplace_back("ZeRO-3 Twin-Flow 0.5", twin);
  models::DataParallelSpec dos = twin;
  dos.offload_optimizer = models::OptimizerOffloadSpec{};
  dos.offload_optimizer->prefetch_optimizer = true;
  dos.offload_optimizer->prefetch_optimizer_gap = 2;
  dos.offload_optimizer->part_grads_async = true;
  cases.emplace_back("ZeRO-3 Deep Optimizer States k=2", dos);
  for (const auto& [label, spec] : cases) {
    SCOPED_TRACE(label);
    const models::Schedule s = schedule_for(trace, platform, spec);
    const SimulationResult one = simulate(platform, s, testing::bare_framework(std::int64_t{80} << 30), shape);
    const SimulationResult every = simulate(platform, s, testing::bare_framework(std::int64_t{80} << 30), shape, ReplayRanks::every_rank);
    ASSERT_TRUE(one.fits());
    EXPECT_GT(one.seconds_by_task_kind[static_cast<std::size_t>(TaskKind::host_compute)], 0.0);
    EXPECT_NEAR(one.iteration_seconds, every.iteration_seconds, 1e-9 * every.iteration_seconds);
    EXPECT_EQ(one.peak_bytes, every.peak_bytes);
    for (std::size_t t = 0; t < s.tasks.size(); ++t) {
      ASSERT_NEAR(one.tasks[t].end, every.tasks[t].end, 1e-9 * every.iteration_seconds) << s.tasks[t].name;
    }
  }
}

Scenario offload_scenario(const std::string& offload, int stage = 3) {
  return parse_scenario("model: {zoo: gpt2, layers: 2}\ntraining: {batch_size: 2, precision: mixed}\nplatform: a100-80gb\n"
                        "parallelism: {gpus_per_node: 1, zero: {stage: " +
                            std::to_string(stage) + ", sub_group_size: 10000000, offload_optimizer: " + offload + "}}\n",
                        "o.yaml", ".");
}

// The keys as DeepSpeed and the Deep Optimizer States fork name them, and a run on one GPU.
TEST(OptimizerOffloadReplay, TheScenarioKeys) {
  const Scenario dos = offload_scenario("{device: cpu, ratio: 1.0, pin_memory: true, prefetch_optimizer: true, prefetch_optimizer_gap: 2, "
                                        "part_grads_async: true}");
  ASSERT_TRUE(dos.parallelism);
  const auto& data = dos.parallelism->data;
  EXPECT_EQ(data.sub_group_elements, 10'000'000);
  ASSERT_TRUE(data.offload_optimizer);
  EXPECT_TRUE(data.offload_optimizer->prefetch_optimizer);
  EXPECT_EQ(data.offload_optimizer->prefetch_optimizer_gap, 2);
  EXPECT_TRUE(data.offload_optimizer->part_grads_async);
  EXPECT_FALSE(offload_scenario("{device: none}").parallelism->data.offload_optimizer);

  const PreparedScenario prepared(dos);
  const RunOutcome outcome = run_scenario(prepared, dos.strategy, 2, Isolation::child_process);
  const auto& completed = std::get<CompletedRun>(outcome);
  ASSERT_TRUE(completed.result.fits());
  EXPECT_GT(completed.result.seconds_by_task_kind[static_cast<std::size_t>(TaskKind::host_compute)], 0.0);
  EXPECT_THAT(report(prepared, dos.strategy, 2, outcome, false), ::testing::HasSubstr("host CPU (optimizer)"));
}

TEST(OptimizerOffloadReplay, BadKeysAreInputErrors) {
  const auto rejects = [](const std::string& offload, const std::string& message, int stage = 3) {
    try {
      offload_scenario(offload, stage);
      ADD_FAILURE() << offload << " was accepted";
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(message)) << offload;
    }
  };
  rejects("{device: nvme}", "expected cpu or none");
  rejects("{ratio: 1}", "device");
  rejects("{device: cpu, ratio: 1.5}", "expected 0 to 1");
  rejects("{device: cpu, ratio: 0.5}", "stage 3 only", 2);
  rejects("{device: cpu, pin_memory: false}", "pageable host buffers are not modelled");
  rejects("{device: cpu, prefetch_optimizer: true}", "no prefetch_optimizer_gap");
  rejects("{device: cpu, prefetch_optimizer: true, prefetch_optimizer_gap: 2}", "expected stage 3", 2);
  rejects("{device: cpu, prefetch_optimizer: true, prefetch_optimizer_gap: 0}", "positive integer");
  rejects("{device: cpu, ratio: 0.5, prefetch_optimizer: true, prefetch_optimizer_gap: 2}", "with prefetch_optimizer; expected 1");
  rejects("{device: cpu, nvme_path: /tmp}", "nvme_path");
}

}  // namespace
}  // namespace comptrain::sim

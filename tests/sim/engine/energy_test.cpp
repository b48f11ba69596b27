// Energy (sim/energy.hpp): SimGrid's host and link energy plugins on the replay, against
// hand-computed integrals of the power model, and the power limit's DVFS model
// (models::with_power_limit).

#include "comptrain/sim/engine/energy.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "comptrain/models/op_time.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/sim/studies/plan.hpp"
#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/sim/engine/replay.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "common/schedule_builder.hpp"

namespace comptrain::sim {
namespace {

using models::Stream;
using models::TaskKind;
using testing::ScheduleBuilder;

constexpr double kTol = 1e-9;

// The test GPU with power values: nvidia-smi idle 30 W, 110 W inside a job (the A40 figures of
// shared/reference/distributed.md §6), 400 W busy; a host of 20 W idle, 130 W busy; a PCIe link of
// 1 W idle, 11 W at full bandwidth per direction, without latency (so that a copy's link is busy
// exactly bytes / bandwidth).
models::Platform powered_platform() {
  models::Platform p = testing::test_platform();
  p.gpu.idle_power = 30;
  p.gpu.in_job_power = 110;
  p.gpu.max_power = 400;
  p.host.idle_power = 20;
  p.host.max_power = 130;
  p.host_link.latency = 0;
  p.host_link.idle_power = 1;
  p.host_link.busy_power = 11;
  return p;
}

// f (0.5 s) on the GPU; then, at once, g (0.25 s) and an offload of 5 GB over the 10 GB/s link
// (0.5 s); after the offload, 0.2 s of host work (CPU Adam's kind). The iteration ends at 1.2 s.
//   GPU   busy 0-0.75 (400 W), waiting 0.75-1.2 (110 W): 300 + 49.5 = 349.5 J
//   host  idle 0-1.0 (20 W), busy 1.0-1.2 (130 W): 20 + 26 = 46 J
//   link  up (GPU to host) busy 0.5-1.0 (11 W), idle 0.7 s (1 W): 6.2 J; down idle 1.2 s: 1.2 J
TEST(Energy, AHandComputedIterationIsTheIntegralOfThePowerModel) {
  ScheduleBuilder b;
  const auto f = b.task("f", TaskKind::op, Stream::compute, 0.5, {}, {});
  b.task("g", TaskKind::op, Stream::compute, 0.25, {}, {}, {f});
  const auto copy = b.task("offload", TaskKind::offload, Stream::d2h, 0, {}, {}, {f}, 5'000'000'000);
  b.task("adam", TaskKind::host_compute, Stream::host, 0.2, {}, {}, {copy});
  const SimulationResult r = simulate(powered_platform(), b.s, testing::bare_framework());
  ASSERT_TRUE(r.fits());
  ASSERT_NEAR(r.iteration_seconds, 1.2, kTol);
  ASSERT_TRUE(r.energy.has_value());
  const EnergyResult& e = *r.energy;
  EXPECT_NEAR(e.seconds, 1.2, kTol);
  EXPECT_NEAR(e.gpu_joules, 0.75 * 400 + 0.45 * 110, kTol);
  EXPECT_NEAR(e.gpu_busy_seconds, 0.75, kTol);
  EXPECT_NEAR(e.node_host_joules, 1.0 * 20 + 0.2 * 130, kTol);
  EXPECT_NEAR(e.node_link_joules, (0.5 * 11 + 0.7 * 1) + 1.2 * 1, kTol);
  EXPECT_NEAR(e.total_joules, 349.5 + 46 + 7.4, kTol);
  EXPECT_NEAR(e.gpu_average_watts(), 349.5 / 1.2, kTol);
  // Peaks: the GPU at its busy power; the node while g runs and the link carries the copy:
  // 400 + 20 (host idle) + 11 + 1 (the link's two directions).
  EXPECT_NEAR(e.gpu_peak_watts, 400, kTol);
  EXPECT_NEAR(e.node_peak_watts, 432, kTol);
  EXPECT_NEAR(e.joules_per_sample(4), e.total_joules / 4, kTol);
}

// Each kernel draws its own power (Task::watts, from the kernel power model); one whose power is
// unknown (0) draws the busy power, the TDP here. f (0.5 s at 250 W), then g (0.25 s, unknown), then
// a 0.2 s copy during which no kernel runs:
//   GPU  0.5 x 250 + 0.25 x 400 + 0.2 x 110 = 247 J; busy 0.75 s at (125 + 100) / 0.75 = 300 W on average
TEST(Energy, EachKernelDrawsItsOwnPower) {
  ScheduleBuilder b;
  const auto f = b.task("f", TaskKind::op, Stream::compute, 0.5, {}, {});
  b.s.tasks[f].watts = 250;
  const auto g = b.task("g", TaskKind::op, Stream::compute, 0.25, {}, {}, {f});
  b.task("prefetch", TaskKind::prefetch, Stream::h2d, 0, {}, {}, {g}, 2'000'000'000);  // 0.2 s
  const SimulationResult r = simulate(powered_platform(), b.s, testing::bare_framework());
  ASSERT_TRUE(r.energy.has_value());
  const EnergyResult& e = *r.energy;
  EXPECT_NEAR(r.iteration_seconds, 0.95, kTol);
  EXPECT_NEAR(e.gpu_joules, 0.5 * 250 + 0.25 * 400 + 0.2 * 110, kTol);
  EXPECT_NEAR(e.gpu_busy_seconds, 0.75, kTol);
  EXPECT_NEAR(e.gpu_busy_average_watts(), 300, kTol);
  EXPECT_NEAR(e.gpu_peak_watts, 400, kTol);
}

// Kernels on two streams at once share the GPU (each at half speed), so the GPU draws the mean of
// their powers. f (1 s at 300 W) on the compute stream and c (0.5 s at 200 W) on the codec stream
// start together: until 1.0 s both run at half speed and the GPU draws 250 W; c has then ended and
// f, half done, runs alone at 300 W until 1.5 s. 1.0 x 250 + 0.5 x 300 = 400 J.
TEST(Energy, ConcurrentKernelsDrawTheMeanOfTheirPowers) {
  ScheduleBuilder b;
  const auto f = b.task("f", TaskKind::op, Stream::compute, 1.0, {}, {});
  b.s.tasks[f].watts = 300;
  const auto c = b.task("c", TaskKind::compress, Stream::codec, 0.5, {}, {});
  b.s.tasks[c].watts = 200;
  const SimulationResult r = simulate(powered_platform(), b.s, testing::bare_framework());
  ASSERT_TRUE(r.energy.has_value());
  EXPECT_NEAR(r.iteration_seconds, 1.5, kTol);
  EXPECT_NEAR(r.energy->gpu_joules, 1.0 * 250 + 0.5 * 300, kTol);
  EXPECT_NEAR(r.energy->gpu_peak_watts, 300, kTol);
  EXPECT_NEAR(r.energy->gpu_busy_seconds, 1.5, kTol);
}

// A GPU that only waits (a copy runs, no kernel) draws its in-job power, not nvidia-smi's idle.
TEST(Energy, StallsAreChargedAtTheInJobPower) {
  ScheduleBuilder b;
  b.task("prefetch", TaskKind::prefetch, Stream::h2d, 0, {}, {}, {}, 2'000'000'000);  // 0.2 s
  const SimulationResult r = simulate(powered_platform(), b.s, testing::bare_framework());
  ASSERT_TRUE(r.energy.has_value());
  EXPECT_NEAR(r.iteration_seconds, 0.2, kTol);
  EXPECT_NEAR(r.energy->gpu_joules, 0.2 * 110, kTol);
  EXPECT_NEAR(r.energy->gpu_peak_watts, 110, kTol);
  EXPECT_NEAR(r.energy->gpu_busy_seconds, 0, kTol);

  // Without gpu.power.in_job the stall power is nvidia-smi's idle (the platform's default).
  models::Platform platform = powered_platform();
  platform.gpu.in_job_power = platform.gpu.idle_power;
  const SimulationResult idle = simulate(platform, b.s, testing::bare_framework());
  EXPECT_NEAR(idle.energy->gpu_joules, 0.2 * 30, kTol);
}

// PCIe is a split-duplex link: each direction counts its own energy (a property on the
// SplitDuplexLink itself would give 0 J: shared/reference/distributed.md §6).
TEST(Energy, BothDirectionsOfASplitDuplexLinkCount) {
  ScheduleBuilder b;
  b.task("offload", TaskKind::offload, Stream::d2h, 0, {}, {}, {}, 1'000'000'000);    // 0.1 s up
  b.task("prefetch", TaskKind::prefetch, Stream::h2d, 0, {}, {}, {}, 1'000'000'000);  // 0.1 s down, at once
  const SimulationResult both = simulate(powered_platform(), b.s, testing::bare_framework());
  ASSERT_TRUE(both.energy.has_value());
  EXPECT_NEAR(both.iteration_seconds, 0.1, kTol);  // the directions do not share bandwidth
  EXPECT_NEAR(both.energy->node_link_joules, 2 * 0.1 * 11, kTol);
  EXPECT_NEAR(both.energy->node_peak_watts, 110 + 20 + 2 * 11, kTol);

  // One after the other: each direction busy 0.1 s and idle 0.1 s.
  ScheduleBuilder s;
  const auto up = s.task("offload", TaskKind::offload, Stream::d2h, 0, {}, {}, {}, 1'000'000'000);
  s.task("prefetch", TaskKind::prefetch, Stream::h2d, 0, {}, {}, {up}, 1'000'000'000);
  const SimulationResult serial = simulate(powered_platform(), s.s, testing::bare_framework());
  EXPECT_NEAR(serial.iteration_seconds, 0.2, kTol);
  EXPECT_NEAR(serial.energy->node_link_joules, 2 * (0.1 * 11 + 0.1 * 1), kTol);
}

// A platform without any power value measures nothing.
TEST(Energy, NoPowerValuesNoEnergy) {
  ScheduleBuilder b;
  b.task("f", TaskKind::op, Stream::compute, 0.5, {}, {});
  const SimulationResult r = simulate(testing::test_platform(), b.s, testing::bare_framework());
  EXPECT_FALSE(r.energy.has_value());
}

// Under the symmetric replay, rank 0's GPU stands for every GPU and node 0 for every node.
TEST(Energy, TheSymmetricReplayCountsEveryGpuOfTheCluster) {
  models::Platform p = powered_platform();
  p.gpus_per_node = 4;
  p.host.memory_bandwidth = 1e12;
  ScheduleBuilder b;
  b.task("f", TaskKind::op, Stream::compute, 0.5, {}, {});
  const SimulationResult r = simulate(p, b.s, testing::bare_framework(), ClusterShape{1, 4});
  ASSERT_TRUE(r.energy.has_value());
  const EnergyResult& e = *r.energy;
  EXPECT_NEAR(e.gpu_joules, 0.5 * 400, kTol);
  EXPECT_NEAR(e.node_gpu_joules, 4 * 0.5 * 400, kTol);
  // Four PCIe links, both directions idle; the host idle.
  EXPECT_NEAR(e.node_link_joules, 4 * 2 * 0.5 * 1, kTol);
  EXPECT_NEAR(e.total_joules, 800 + 0.5 * 20 + 4.0, kTol);
  EXPECT_NEAR(e.node_peak_watts, 4 * 400 + 20 + 8 * 1, kTol);
}

// The power limit on a GPU without a voltage curve (gpu.power.dvfs): the voltage follows the clock,
// so a kernel that keeps the SMs saturated draws in_job + (max - in_job) f^3 and the reported clock
// solves it for the limit. The peaks stay nominal: the op-time model slows each kernel itself.
TEST(PowerLimit, TheClockFollowsTheCubicModelAndTheBusyPowerIsTheLimit) {
  const models::Platform nominal = powered_platform();
  const models::Platform limited = models::with_power_limit(nominal, 150, "test");
  const double f = std::cbrt((150.0 - 110.0) / (400.0 - 110.0));
  EXPECT_NEAR(limited.gpu.clock_fraction, f, 1e-12);
  EXPECT_NEAR(110 + (400 - 110) * std::pow(limited.gpu.clock_fraction, 3), 150, 1e-9);
  EXPECT_DOUBLE_EQ(limited.gpu.busy_power(), 150);
  EXPECT_DOUBLE_EQ(limited.gpu.peak_fp32, nominal.gpu.peak_fp32);
  EXPECT_DOUBLE_EQ(limited.gpu.memory_bandwidth, nominal.gpu.memory_bandwidth);
  // Limits do not compound: 150 W on a platform capped at 200 W is 150 W.
  const models::Platform twice = models::with_power_limit(models::with_power_limit(nominal, 200, "test"), 150, "test");
  EXPECT_DOUBLE_EQ(twice.gpu.clock_fraction, limited.gpu.clock_fraction);
  EXPECT_DOUBLE_EQ(twice.gpu.power_limit, 150);
  // At or above the TDP nothing changes.
  const models::Platform high = models::with_power_limit(nominal, 500, "test");
  EXPECT_DOUBLE_EQ(high.gpu.clock_fraction, 1);
  EXPECT_DOUBLE_EQ(high.gpu.busy_power(), 400);
  EXPECT_DOUBLE_EQ(high.gpu.peak_fp32, nominal.gpu.peak_fp32);
  // A cap at or below the in-job power, or on a GPU without power values, is an input error.
  EXPECT_THROW(models::with_power_limit(nominal, 110, "test"), InputError);
  EXPECT_THROW(models::with_power_limit(testing::test_platform(), 150, "test"), InputError);
}

// Compute-bound ops lengthen by 1/f; memory-bound ones that draw less than the cap not at all.
// Without a launch gap a compute-bound op keeps the SMs saturated: exactly the reported clock.
TEST(PowerLimit, ComputeBoundOpsLengthenByTheClockAndMemoryBoundOnesDoNot) {
  zoo::ModelRequest request;
  request.model = "resnet18";
  request.batch_size = 2;
  const traces::Trace trace = zoo::build_model(request);
  const auto check = [&](models::Platform nominal, bool compute_bound) {
    const models::Platform limited = models::with_power_limit(nominal, 150, "test");
    const double f = limited.gpu.clock_fraction;
    const models::OpTimeModel before(nominal);
    const models::OpTimeModel after(limited);
    const double launch = nominal.gpu.launch_overhead;
    int checked = 0;
    for (traces::OpIndex i = 0; i < trace.ops().size(); ++i) {
      if (trace.flops(i) == 0) continue;
      const double t0 = before.seconds(trace, i) - launch;
      const double t1 = after.seconds(trace, i) - launch;
      EXPECT_NEAR(t1, compute_bound ? t0 / f : t0, 1e-9 * t0) << trace.op(i).name;
      ++checked;
    }
    EXPECT_GT(checked, 20);
  };
  models::Platform compute = powered_platform();
  compute.gpu.peak_fp32 = compute.gpu.peak_fp16 = 1e8;  // every op with FLOPs compute-bound
  compute.gpu.memory_bandwidth = 1e15;
  compute.gpu.launch_overhead = 0;
  check(compute, true);
  models::Platform memory = powered_platform();
  memory.gpu.peak_fp32 = memory.gpu.peak_fp16 = 1e18;  // every op memory-bound
  memory.gpu.memory_bandwidth = 1e9;
  memory.gpu.memory_bound_power = 140;  // below the 150 W cap
  check(memory, false);
}

// A memory-bound op that would draw more than the cap is clocked down, and slowed only once even the
// floor voltage draws too much (kernel_power.hpp; tests/models/kernel_power_test.cpp has the cases).
TEST(PowerLimit, MemoryBoundOpsOverTheCapAreSlowed) {
  zoo::ModelRequest request;
  request.model = "resnet18";
  request.batch_size = 2;
  const traces::Trace trace = zoo::build_model(request);
  models::Platform memory = powered_platform();
  memory.gpu.peak_fp32 = memory.gpu.peak_fp16 = 1e18;
  memory.gpu.memory_bandwidth = 1e9;
  memory.gpu.launch_overhead = 0;
  memory.gpu.memory_bound_power = 300;  // 190 W above in_job, 30 W of it the DRAM's
  memory.gpu.dram_power = 30;
  memory.gpu.floor_clock = 0.5;  // at the floor voltage 0.8 the memory still draws 0.64 x 160 + 30 W,
  memory.gpu.floor_voltage = 0.8;  // more than the 40 W the cap leaves above in_job
  const models::OpTimeModel before(memory);
  const models::OpTimeModel after(models::with_power_limit(memory, 150, "test"));
  int slowed = 0;
  for (traces::OpIndex i = 0; i < trace.ops().size(); ++i) {
    if (trace.flops(i) == 0) continue;
    const models::KernelRun run = after.run(trace, i);
    EXPECT_GT(run.seconds, before.seconds(trace, i)) << trace.op(i).name;
    EXPECT_NEAR(run.watts, 150, 1e-6) << trace.op(i).name;
    ++slowed;
  }
  EXPECT_GT(slowed, 20);
}

// The replay of a limited GPU: busy at the limit, the kernel longer by 1/f (its time comes from the
// op-time model; here the schedule's own seconds are scaled as the model would).
TEST(PowerLimit, ALimitedGpuDrawsTheLimitWhileBusy) {
  const models::Platform limited = models::with_power_limit(powered_platform(), 150, "test");
  ScheduleBuilder b;
  b.task("f", TaskKind::op, Stream::compute, 0.5 / limited.gpu.clock_fraction, {}, {});
  const SimulationResult r = simulate(limited, b.s, testing::bare_framework());
  ASSERT_TRUE(r.energy.has_value());
  EXPECT_NEAR(r.energy->gpu_joules, 150 * 0.5 / limited.gpu.clock_fraction, kTol);
  EXPECT_NEAR(r.energy->gpu_peak_watts, 150, kTol);
  EXPECT_DOUBLE_EQ(r.energy->gpu_power_limit_watts, 150);
}

TEST(PowerLimit, PlatformFilesGiveInJobPowerAndLimit) {
  const std::string yaml = R"(name: p
gpu:
  name: G
  memory: 16 GiB
  memory_bandwidth: 900 GB/s
  peak: {fp32: 14 TFLOP/s, tf32: 0, fp16: 112 TFLOP/s, bf16: 0}
  launch_overhead: 5 us
  power: {idle: 40 W, max: 250 W, in_job: 60 W, limit: 150 W}
host: {name: h, cores: 8, flops: 1 TFLOP/s, memory: 64 GiB, memory_bandwidth: 100 GB/s, power: {idle: 50 W, max: 150 W}}
host_link: {name: l, bandwidth: 12 GB/s, latency: 1 us, power: {idle: 1 W, busy: 5 W}}
)";
  const models::Platform p = models::parse_platform(yaml, "test.yaml");
  EXPECT_DOUBLE_EQ(p.gpu.in_job_power, 60);
  EXPECT_DOUBLE_EQ(p.gpu.power_limit, 150);
  EXPECT_NEAR(p.gpu.clock_fraction, std::cbrt(90.0 / 190.0), 1e-12);
  EXPECT_DOUBLE_EQ(p.gpu.peak_fp32, 14e12);
  EXPECT_DOUBLE_EQ(p.host.max_power, 150);
  EXPECT_DOUBLE_EQ(p.host_link.busy_power, 5);
  std::string bad = yaml;
  bad.replace(bad.find("limit: 150 W"), 12, "limit: 50 W");
  try {
    models::parse_platform(bad, "test.yaml");
    FAIL() << "a limit below the in-job power was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("test.yaml:8"), std::string::npos) << e.what();
  }
}

// gpu.power.memory_bound, .dram and .dvfs (models/kernel_power.hpp), and their errors at the line.
TEST(PowerLimit, PlatformFilesGiveTheKernelPowerModel) {
  const std::string yaml = R"(name: p
gpu:
  name: G
  memory: 16 GiB
  memory_bandwidth: 900 GB/s
  peak: {fp32: 14 TFLOP/s, tf32: 0, fp16: 112 TFLOP/s, bf16: 0}
  launch_overhead: 5 us
  power:
    idle: 25 W
    max: 250 W
    in_job: 50 W
    memory_bound: 161 W
    dram: 28.6 W
    dvfs: {floor_clock: 0.8, floor_voltage: 0.685, min_clock: 0.098}
host: {name: h, cores: 8, flops: 1 TFLOP/s, memory: 64 GiB, memory_bandwidth: 100 GB/s}
host_link: {name: l, bandwidth: 12 GB/s, latency: 1 us}
)";
  const models::Platform p = models::parse_platform(yaml, "test.yaml");
  EXPECT_DOUBLE_EQ(p.gpu.memory_bound_power, 161);
  EXPECT_DOUBLE_EQ(p.gpu.dram_power, 28.6);
  EXPECT_DOUBLE_EQ(p.gpu.floor_clock, 0.8);
  EXPECT_DOUBLE_EQ(p.gpu.floor_voltage, 0.685);
  EXPECT_DOUBLE_EQ(p.gpu.min_clock, 0.098);
  const auto error_at = [&](const std::string& from, const std::string& to, const std::string& where) {
    std::string bad = yaml;
    bad.replace(bad.find(from), from.size(), to);
    try {
      models::parse_platform(bad, "test.yaml");
      ADD_FAILURE() << "accepted: " << to;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
    }
  };
  error_at("memory_bound: 161 W", "memory_bound: 300 W", "test.yaml:12");  // above the TDP
  error_at("memory_bound: 161 W", "memory_bound: 40 W", "test.yaml:12");   // below in_job
  error_at("dram: 28.6 W", "dram: 120 W", "test.yaml:13");                 // more than the memory draws
  error_at("floor_clock: 0.8", "floor_clock: 1.5", "test.yaml:14");
  error_at("floor_voltage: 0.685", "floor_voltage: 0", "test.yaml:14");
  error_at("min_clock: 0.098", "min_clock: 0.9", "test.yaml:14");           // above floor_clock
  error_at("min_clock: 0.098", "slope: 2", "test.yaml:14");                 // unknown key
}

// plan.objective: samples_per_joule makes the best batch the one with the most samples per joule of
// the whole job's energy, not the fastest.
TEST(PlanObjective, SamplesPerJoulePicksTheMostEfficientBatch) {
  const Scenario scenario = parse_scenario(R"(model: {zoo: resnet18}
training: {batch_size: 1}
platform: v100-32gb
plan: {objective: samples_per_joule, max_batch: 64, strategies: [baseline]}
)",
                                           "t.yaml", ".");
  PlanOptions options = plan_options_for(scenario, PlanOptions{});
  ASSERT_EQ(options.objective, PlanObjective::samples_per_joule);
  options.jobs = 2;
  options.progress = false;
  const BatchSizePlan plan = make_plan(scenario, strategies_to_plan(scenario), options);
  const StrategyPlan& s = plan.strategies.front();
  ASSERT_TRUE(s.best_batch.has_value());
  double best = 0;
  std::int64_t best_batch = 0;
  for (const PlanPoint& p : s.points) {
    if (!p.fits) continue;
    EXPECT_GT(p.joules, 0) << p.batch;
    EXPECT_NEAR(p.samples_per_joule, static_cast<double>(p.batch) / p.joules, 1e-12 * p.samples_per_joule);
    if (p.samples_per_joule > best) {
      best = p.samples_per_joule;
      best_batch = p.batch;
    }
  }
  EXPECT_EQ(*s.best_batch, best_batch);
  EXPECT_DOUBLE_EQ(s.best_samples_per_joule, best);
  EXPECT_THROW(parse_scenario("model: {zoo: resnet18}\nplatform: v100-32gb\nplan: {objective: joules}\n", "t.yaml", "."), InputError);
}

}  // namespace
}  // namespace comptrain::sim

#include "comptrain/sim/engine/replay.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/schedule_builder.hpp"

namespace comptrain::sim {
namespace {

using models::Buffer;
using models::MemoryRole;
using models::Schedule;
using models::Stream;
using models::Task;
using models::TaskKind;


using testing::ScheduleBuilder;
using testing::test_platform;

constexpr double kTol = 1e-9;

TEST(Simulation, ComputeTasksRunInOrderAndFreeAfterTheLastUse) {
  ScheduleBuilder b;
  auto w = b.buffer("w", 100, MemoryRole::weight, true);
  auto x = b.buffer("x", 1000, MemoryRole::activation);
  auto y = b.buffer("y", 500);
  b.task("f", TaskKind::op, Stream::compute, 0.25, {x}, {w});
  b.task("g", TaskKind::op, Stream::compute, 0.5, {y}, {x});
  b.task("h", TaskKind::op, Stream::compute, 0.25, {}, {y});
  const SimulationResult r = simulate(test_platform(), b.s);
  ASSERT_TRUE(r.fits());
  EXPECT_NEAR(r.iteration_seconds, 1.0, kTol);
  EXPECT_NEAR(r.tasks[1].start, 0.25, kTol);
  EXPECT_NEAR(r.tasks[2].end, 1.0, kTol);
  EXPECT_EQ(r.peak_bytes, 100 + 1000 + 500);  // while g runs
  EXPECT_NEAR(r.peak_time, 0.25, kTol);
  EXPECT_THAT(r.live_at_peak, ::testing::ElementsAre(w, x, y));
  EXPECT_EQ(r.peak_by_role[static_cast<std::size_t>(MemoryRole::activation)], 1000);
  EXPECT_NEAR(r.seconds_by_task_kind[static_cast<std::size_t>(TaskKind::op)], 1.0, kTol);
  EXPECT_NEAR(r.compute_stall_seconds, 0.0, kTol);
  // w (resident, at 0), x, y allocated; x freed when g ends, y when h ends; w stays.
  ASSERT_EQ(r.memory_events.size(), 5u);
  EXPECT_EQ(r.memory_events[0].buffer, w);
  EXPECT_EQ(r.memory_events[3].buffer, x);
  EXPECT_EQ(r.memory_events[3].delta, -1000);
  EXPECT_NEAR(r.memory_events[3].time, 0.75, kTol);
  EXPECT_EQ(r.memory_events[4].delta, -500);
  EXPECT_NEAR(r.memory_events[4].time, 1.0, kTol);
}

// The replay's stream goes through the model of PyTorch's caching allocator.
constexpr std::int64_t kMiB = 1 << 20;

TEST(Simulation, TheAllocatorModelSeesTheSameStream) {
  ScheduleBuilder b;
  auto w = b.buffer("w", 100, MemoryRole::weight, true);  // small pool: a 512 B block in a 2 MiB segment
  auto x = b.buffer("x", 3 * kMiB, MemoryRole::activation);  // large pool: a 20 MiB segment, split
  auto y = b.buffer("y", 3 * kMiB);                          // the segment's 17 MiB remainder, split
  b.task("f", TaskKind::op, Stream::compute, 0.25, {x}, {w});
  b.task("g", TaskKind::op, Stream::compute, 0.5, {y}, {x});
  b.task("h", TaskKind::op, Stream::compute, 0.25, {}, {y});
  const SimulationResult r = simulate(test_platform(), b.s, testing::bare_framework());
  ASSERT_TRUE(r.fits());
  EXPECT_EQ(r.peak_bytes, 100 + 6 * kMiB);
  EXPECT_EQ(r.device.peak_allocated, 512 + 6 * kMiB);  // while g runs
  EXPECT_EQ(r.device.peak_reserved, 2 * kMiB + 20 * kMiB);
  EXPECT_EQ(r.device.steady_peak_reserved, 2 * kMiB + 20 * kMiB);
  EXPECT_EQ(r.device.device_peak(), r.device.peak_reserved);  // no context
}

// The default framework allocates the cuBLAS workspace (8 MiB + 128 KiB before Hopper) at the
// first allocation of the first iteration, and counts the CUDA context in the device figure.
TEST(Simulation, TheDefaultFrameworkHoldsTheCublasWorkspaceAndTheContext) {
  ScheduleBuilder b;
  auto x = b.buffer("x", 12 * kMiB, MemoryRole::activation);
  b.task("f", TaskKind::op, Stream::compute, 0.25, {x}, {});
  models::Platform platform = test_platform();
  platform.gpu.cuda_context_bytes = 300 * kMiB;
  const SimulationResult r = simulate(platform, b.s);
  ASSERT_TRUE(r.fits());
  constexpr std::int64_t workspace = 8 * kMiB + 128 * 1024;
  EXPECT_EQ(r.device.framework.cublas_workspace_bytes, workspace);
  EXPECT_EQ(r.device.peak_allocated, workspace + 12 * kMiB);
  // The workspace is below kMinLargeAlloc (10 MiB): a 20 MiB segment; x gets its own 12 MiB one.
  EXPECT_EQ(r.device.peak_reserved, 20 * kMiB + 12 * kMiB);
  EXPECT_EQ(r.device.device_peak(), 32 * kMiB + 300 * kMiB);
  EXPECT_EQ(r.device.framework.usable_bytes(), 1'000'000'000 - 300 * kMiB);
}

TEST(Simulation, ACopyTakesLatencyPlusBytesOverBandwidth) {
  ScheduleBuilder b;
  auto a = b.buffer("a", 1'000'000'000 / 2, MemoryRole::activation);
  auto f = b.task("produce", TaskKind::op, Stream::compute, 0.1, {a}, {});
  b.task("offload", TaskKind::offload, Stream::d2h, 0, {}, {a}, {f}, 200'000'000);
  const SimulationResult r = simulate(test_platform(), b.s);
  ASSERT_TRUE(r.fits());
  // 200 MB over 10 GB/s = 20 ms, plus 1 us latency, starting when `produce` ends.
  EXPECT_NEAR(r.tasks[1].start, 0.1, kTol);
  EXPECT_NEAR(r.tasks[1].end, 0.1 + 0.02 + 1e-6, 1e-8);
  // The activation is freed when the copy ends, not when the producer ends.
  EXPECT_NEAR(r.memory_events.back().time, r.tasks[1].end, kTol);
  EXPECT_NEAR(r.seconds_by_task_kind[static_cast<std::size_t>(TaskKind::offload)], 0.02 + 1e-6, 1e-8);
}

TEST(Simulation, PcieIsFullDuplex) {
  ScheduleBuilder b;
  b.task("down", TaskKind::offload, Stream::d2h, 0, {}, {}, {}, 100'000'000);
  b.task("up", TaskKind::prefetch, Stream::h2d, 0, {}, {}, {}, 100'000'000);
  const SimulationResult r = simulate(test_platform(), b.s);
  // Both directions at full speed at once: 10 ms + 1 us each, not 20 ms.
  EXPECT_NEAR(r.tasks[0].end, 0.01 + 1e-6, 1e-8);
  EXPECT_NEAR(r.tasks[1].end, 0.01 + 1e-6, 1e-8);
}

TEST(Simulation, ConcurrentKernelsShareTheGpu) {
  ScheduleBuilder b;
  b.task("gemm", TaskKind::op, Stream::compute, 1.0, {}, {});
  b.task("compress", TaskKind::compress, Stream::codec, 1.0, {}, {});
  const SimulationResult r = simulate(test_platform(), b.s);
  // Fair sharing: both progress at half speed and end together.
  EXPECT_NEAR(r.tasks[0].end, 2.0, kTol);
  EXPECT_NEAR(r.tasks[1].end, 2.0, kTol);
}

TEST(Simulation, TheComputeStreamStallsForALatePrefetch) {
  ScheduleBuilder b;
  auto p = b.buffer("prefetched", 1000, MemoryRole::prefetch);
  auto t0 = b.task("backward0", TaskKind::op, Stream::compute, 0.001, {}, {});
  auto pre = b.task("prefetch", TaskKind::prefetch, Stream::h2d, 0, {p}, {}, {t0}, 100'000'000);
  b.task("backward1", TaskKind::op, Stream::compute, 0.001, {}, {p}, {pre});
  const SimulationResult r = simulate(test_platform(), b.s);
  // The copy (10 ms + 1 us) starts at 1 ms; backward1 waits for it.
  EXPECT_NEAR(r.tasks[2].ready, 0.001, kTol);
  EXPECT_NEAR(r.tasks[2].start, 0.011001, 1e-8);
  EXPECT_NEAR(r.compute_stall_seconds, 0.010001, 1e-8);
  EXPECT_NEAR(r.iteration_seconds, 0.012001, 1e-8);
}

// Out-of-memory is PyTorch's: a new segment that cannot be reserved within the usable memory.
TEST(Simulation, OutOfMemoryNamesTheTaskAndTheBytes) {
  ScheduleBuilder b;
  auto w = b.buffer("w", 10 * kMiB, MemoryRole::weight, true);  // a 10 MiB segment (>= kMinLargeAlloc: exact)
  auto a = b.buffer("a", 12 * kMiB);                            // 12 MiB
  auto c = b.buffer("c", 20 * kMiB);                            // 20 MiB more: 42 > 40
  b.task("first", TaskKind::op, Stream::compute, 0.5, {a}, {w});
  b.task("second", TaskKind::op, Stream::compute, 0.5, {c}, {a});
  const SimulationResult r = simulate(test_platform(), b.s, testing::bare_framework(40 * kMiB));
  ASSERT_FALSE(r.fits());
  EXPECT_EQ(r.out_of_memory->iteration, 1);  // the first iteration already fails
  EXPECT_EQ(r.out_of_memory->task, models::TaskId{1});
  EXPECT_EQ(r.out_of_memory->buffer, c);
  EXPECT_EQ(r.out_of_memory->requested, 20 * kMiB);
  EXPECT_EQ(r.out_of_memory->in_use, 22 * kMiB);
  EXPECT_EQ(r.out_of_memory->capacity, 40 * kMiB);
  EXPECT_NEAR(r.out_of_memory->time, 0.5, kTol);
  // The iteration is cut there: the failing task did not end, the exact stream stops before c.
  EXPECT_EQ(r.tasks[1].end, 0.0);
  EXPECT_NEAR(r.tasks[0].end, 0.5, kTol);
  ASSERT_EQ(r.memory_events.size(), 2u);  // w, a
}

TEST(Simulation, OutOfMemoryCutsTheOtherStreamsToo) {
  ScheduleBuilder b;
  auto a = b.buffer("a", 12 * kMiB);
  auto big = b.buffer("big", 30 * kMiB);
  auto c = b.buffer("c", 100);
  auto t0 = b.task("first", TaskKind::op, Stream::compute, 0.5, {a}, {});
  auto t1 = b.task("second", TaskKind::op, Stream::compute, 0.5, {big}, {a});
  b.task("compress", TaskKind::compress, Stream::codec, 0.1, {c}, {a}, {t0, t1});
  b.task("copy", TaskKind::offload, Stream::d2h, 0, {}, {a}, {t1}, 1000);
  const SimulationResult r = simulate(test_platform(), b.s, testing::bare_framework(40 * kMiB));
  ASSERT_FALSE(r.fits());
  EXPECT_EQ(r.out_of_memory->task, models::TaskId{1});
  EXPECT_EQ(r.out_of_memory->requested, 30 * kMiB);
  EXPECT_EQ(r.tasks[2].start, 0.0);  // after the failure: never ran
  EXPECT_EQ(r.tasks[2].end, 0.0);
}

TEST(Simulation, ResidentStateThatDoesNotFitIsReportedBeforeTheIteration) {
  ScheduleBuilder b;
  b.buffer("weights", 50 * kMiB, MemoryRole::weight, true);
  b.task("f", TaskKind::op, Stream::compute, 1, {}, {});
  const SimulationResult r = simulate(test_platform(), b.s, testing::bare_framework(40 * kMiB));
  ASSERT_FALSE(r.fits());
  EXPECT_EQ(r.out_of_memory->iteration, 0);
  EXPECT_FALSE(r.out_of_memory->task.has_value());
  EXPECT_EQ(r.out_of_memory->requested, 50 * kMiB);
}

// The launching thread: eager PyTorch issues every kernel from one CPU thread. Short kernels
// wait for it (CPU-bound); long ones hide it behind the GPU's queue.
TEST(Simulation, ShortKernelsWaitForTheLaunchingThread) {
  ScheduleBuilder b;
  for (int i = 0; i < 3; ++i) b.task("k" + std::to_string(i), TaskKind::op, Stream::compute, 1e-6, {}, {});
  for (auto& t : b.s.tasks) t.host_seconds = 10e-6;
  const SimulationResult r = simulate(test_platform(), b.s, testing::bare_framework());
  // Launched at 10, 20, 30 us; each runs 1 us once launched.
  EXPECT_NEAR(r.tasks[0].start, 10e-6, 1e-12);
  EXPECT_NEAR(r.tasks[2].start, 30e-6, 1e-12);
  EXPECT_NEAR(r.iteration_seconds, 31e-6, 1e-12);
  EXPECT_NEAR(r.host_wait_seconds, 10e-6 + 9e-6 + 9e-6, 1e-12);
  EXPECT_NEAR(r.host_seconds, 30e-6, 1e-12);

  ScheduleBuilder g;
  for (int i = 0; i < 3; ++i) g.task("k" + std::to_string(i), TaskKind::op, Stream::compute, 0.5, {}, {});
  for (auto& t : g.s.tasks) t.host_seconds = 10e-6;
  const SimulationResult gpu = simulate(test_platform(), g.s, testing::bare_framework());
  EXPECT_NEAR(gpu.iteration_seconds, 10e-6 + 1.5, 1e-9);  // only the first launch shows
  EXPECT_NEAR(gpu.host_wait_seconds, 10e-6, 1e-12);
}

TEST(Simulation, EachCallIsAFreshEngine) {
  ScheduleBuilder b;
  b.task("f", TaskKind::op, Stream::compute, 0.5, {}, {});
  const SimulationResult first = simulate(test_platform(), b.s);
  const SimulationResult second = simulate(test_platform(), b.s);
  EXPECT_EQ(first.iteration_seconds, second.iteration_seconds);
  EXPECT_NEAR(second.tasks[0].start, 0.0, kTol);
}

}  // namespace
}  // namespace comptrain::sim

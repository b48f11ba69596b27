// The device-memory model (sim/device_memory.hpp): set-up, first and steady iteration through
// the caching-allocator model, and the framework's gradient lifetime (sim/framework.hpp).
// Every figure below is computed by hand from the allocator's rules (caching_allocator.hpp).

#include "comptrain/sim/memory/device_memory.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "comptrain/models/op_time.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/sim/engine/replay.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "common/schedule_builder.hpp"

namespace comptrain::sim {
namespace {

using models::MemoryRole;
using models::Stream;
using models::TaskKind;
using testing::bare_framework;
using testing::ScheduleBuilder;
using testing::test_platform;

constexpr std::int64_t kMiB = 1 << 20;

// torch.optim creates its state in the first step(), into the cache the forward and backward
// left: an 8 MiB state takes the front of a cached 12 MiB activation block (the 4 MiB rest is
// over kSmallSize, so the block splits). The steady iteration then finds no 12 MiB block for
// the activation and reserves a new segment: 2 + 12 + 12 MiB reserved for 20 MiB of tensors.
TEST(DeviceMemory, TheFirstStepFragmentsTheCacheTheSteadyIterationInherits) {
  ScheduleBuilder b;
  auto w = b.buffer("w", 100, MemoryRole::weight, true);
  auto state = b.buffer("w.exp_avg", 8 * kMiB, MemoryRole::optimizer_state, true);
  auto x = b.buffer("x", 12 * kMiB, MemoryRole::activation);
  b.task("forward", TaskKind::op, Stream::compute, 0.25, {x}, {w});
  b.task("backward", TaskKind::op, Stream::compute, 0.25, {}, {x});
  b.task("step", TaskKind::op, Stream::compute, 0.25, {}, {w, state});
  const SimulationResult r = simulate(test_platform(), b.s, bare_framework());
  ASSERT_TRUE(r.fits());
  EXPECT_EQ(r.peak_bytes, 100 + 8 * kMiB + 12 * kMiB);
  EXPECT_EQ(r.device.peak_allocated, 512 + 20 * kMiB);
  EXPECT_EQ(r.device.steady_peak_reserved, 2 * kMiB + 12 * kMiB + 12 * kMiB);
  EXPECT_EQ(r.device.peak_reserved, 26 * kMiB);
}

// The compute stream cannot reuse the 30 MiB block a buffer on another stream (FSDP2's
// all-gather stream) freed: the reserved peak is both segments, 60 MiB; on one stream, 30.
TEST(DeviceMemory, BuffersOnAnotherStreamDoNotReuseTheComputeStreamsBlocks) {
  for (const bool other_stream : {false, true}) {
    ScheduleBuilder b;
    auto gathered = b.buffer("gathered", 30 * kMiB, MemoryRole::weight);
    auto activation = b.buffer("activation", 30 * kMiB, MemoryRole::activation);
    if (other_stream) b.s.buffers[gathered].allocation_stream = models::AllocationStream::fsdp_all_gather;
    b.task("gather", TaskKind::op, Stream::compute, 0.25, {gathered}, {});
    b.task("use", TaskKind::op, Stream::compute, 0.25, {}, {gathered});
    b.task("forward", TaskKind::op, Stream::compute, 0.25, {activation}, {}, {1});
    const SimulationResult r = simulate(test_platform(), b.s, bare_framework());
    ASSERT_TRUE(r.fits());
    EXPECT_EQ(r.peak_bytes, 30 * kMiB);
    EXPECT_EQ(r.device.steady_peak_reserved, (other_stream ? 60 : 30) * kMiB) << other_stream;
  }
}

// Without the first iteration the state would have had its own segment and the activation
// would reuse its block: this is the same schedule with the state created before the forward.
TEST(DeviceMemory, StateCreatedBeforeTheForwardDoesNotFragment) {
  ScheduleBuilder b;
  auto w = b.buffer("w", 100, MemoryRole::weight, true);
  auto state = b.buffer("w.momentum", 8 * kMiB, MemoryRole::optimizer_state, true);
  auto x = b.buffer("x", 12 * kMiB, MemoryRole::activation);
  b.task("step0", TaskKind::op, Stream::compute, 0.25, {}, {state});  // uses the state first
  b.task("forward", TaskKind::op, Stream::compute, 0.25, {x}, {w});
  b.task("backward", TaskKind::op, Stream::compute, 0.25, {}, {x});
  const SimulationResult r = simulate(test_platform(), b.s, bare_framework());
  ASSERT_TRUE(r.fits());
  // 8 MiB < kMinLargeAlloc: a 20 MiB segment, split; x (12 MiB) fits its 12 MiB remainder.
  EXPECT_EQ(r.device.peak_reserved, 2 * kMiB + 20 * kMiB);
}

// One weight w (4 MiB), one activation a (10 MiB) freed by the backward pass before the weight's
// gradient (4 MiB, held to the end) is created, then the step.
models::Schedule forward_backward_step() {
  ScheduleBuilder b;
  auto w = b.buffer("w", 4 * kMiB, MemoryRole::weight, true);
  auto a = b.buffer("a", 10 * kMiB, MemoryRole::activation);
  auto g = b.buffer("w.grad", 4 * kMiB, MemoryRole::gradient, false, true);
  b.task("forward", TaskKind::op, Stream::compute, 0.25, {a}, {w});
  b.task("backward.input", TaskKind::op, Stream::compute, 0.25, {}, {a});
  b.task("backward.weight", TaskKind::op, Stream::compute, 0.25, {g}, {w});
  b.task("step", TaskKind::op, Stream::compute, 0.25, {}, {w, g});
  return b.s;
}

// zero_grad(set_to_none=False) keeps the gradients: the steady iteration starts with them.
// Here the set_to_none peak is the activation alone (the gradient is created after it is
// freed), so keeping the gradient adds exactly its bytes to the peak.
TEST(DeviceMemory, KeptGradientsAddTheirBytesToThePeak) {
  const models::Schedule none = forward_backward_step();
  models::Schedule zeros = forward_backward_step();
  apply_gradient_lifetime(zeros, ZeroGrad::zeros);
  EXPECT_TRUE(zeros.buffers[2].resident);
  EXPECT_TRUE(zeros.tasks[2].creates.empty());
  const SimulationResult r_none = simulate(test_platform(), none, bare_framework());
  const SimulationResult r_zeros = simulate(test_platform(), zeros, bare_framework(1'000'000'000, ZeroGrad::zeros));
  EXPECT_EQ(r_none.peak_bytes, 14 * kMiB);
  EXPECT_EQ(r_zeros.peak_bytes, r_none.peak_bytes + 4 * kMiB);
  // Step by step through the allocator (every request below kMinLargeAlloc takes a 20 MiB
  // segment; the large pool splits when the rest exceeds kSmallSize):
  //   set-up: w 4 MiB -> a new 20 MiB segment [w 4 | free 16];
  //   iter 1: a 10 MiB -> the 16 MiB block, split [w 4 | a 10 | free 6]; a freed and merged
  //           [w 4 | free 16]; g 4 MiB, created lazily -> [w 4 | g 4 | free 12];
  //   iter 2: a 10 MiB -> the 12 MiB block, split [w 4 | g 4 | a 10 | free 2].
  // One 20 MiB segment throughout.
  EXPECT_EQ(r_zeros.device.peak_reserved, 20 * kMiB);
  EXPECT_EQ(r_zeros.device.peak_allocated, 18 * kMiB);
}

// set_to_none frees the gradients after the first iteration: the steady iteration re-creates
// them, and max_memory_allocated is the set_to_none peak.
TEST(DeviceMemory, SetToNoneRecreatesGradientsEveryIteration) {
  const SimulationResult r = simulate(test_platform(), forward_backward_step(), bare_framework());
  ASSERT_TRUE(r.fits());
  EXPECT_EQ(r.device.peak_allocated, 14 * kMiB);
  EXPECT_EQ(r.device.steady_peak_allocated, 14 * kMiB);
  EXPECT_EQ(r.device.peak_reserved, 20 * kMiB);
}

// Expandable segments map 20 MiB pages of one growing segment: 12 MiB + 12 MiB of large
// blocks map two pages (40 MiB), where plain segments would reserve 12 + 12 MiB.
TEST(DeviceMemory, ExpandableSegmentsReserveWholePages) {
  ScheduleBuilder b;
  auto x = b.buffer("x", 12 * kMiB, MemoryRole::activation);
  auto y = b.buffer("y", 12 * kMiB, MemoryRole::activation);
  b.task("f", TaskKind::op, Stream::compute, 0.25, {x}, {});
  b.task("g", TaskKind::op, Stream::compute, 0.25, {y}, {x});
  FrameworkOnGpu expandable = bare_framework();
  expandable.expandable_segments = true;
  const SimulationResult plain = simulate(test_platform(), b.s, bare_framework());
  const SimulationResult pages = simulate(test_platform(), b.s, expandable);
  EXPECT_EQ(plain.device.peak_reserved, 24 * kMiB);
  EXPECT_EQ(pages.device.peak_reserved, 40 * kMiB);
}

// A 0-byte buffer (torch.empty(0), captured traces have them) is allocated and freed like any
// other, in both iterations: its free must not read as an allocation (its delta is 0 either way).
TEST(DeviceMemory, EmptyBuffersComeAndGo) {
  ScheduleBuilder b;
  auto empty = b.buffer("bn1.empty.out", 0);
  auto x = b.buffer("x", 3 * kMiB, MemoryRole::activation);
  b.task("empty", TaskKind::op, Stream::compute, 0.25, {empty}, {empty});
  b.task("f", TaskKind::op, Stream::compute, 0.25, {x}, {});
  const SimulationResult r = simulate(test_platform(), b.s, bare_framework());
  ASSERT_TRUE(r.fits());
  ASSERT_EQ(r.memory_events.size(), 4u);  // + empty, - empty, + x, - x
  EXPECT_TRUE(r.memory_events[0].allocation);
  EXPECT_FALSE(r.memory_events[1].allocation);
  EXPECT_EQ(r.device.peak_allocated, 3 * kMiB);
}

// framework.cudnn_workspace: every task that runs a convolution (forward, backward, replayed)
// gets a workspace of its own that lives while the task runs.
TEST(DeviceMemory, EveryConvolutionTaskHoldsItsCudnnWorkspace) {
  zoo::ModelRequest request;
  request.model = "resnet18";
  request.batch_size = 2;
  const traces::Trace trace = zoo::build_model(request);
  models::Platform platform = models::builtin_platform("v100-16gb");
  const models::OpTimeModel time_model(platform);
  models::Schedule schedule = std::get<models::Schedule>(models::build_schedule(trace, time_model, models::StrategySpec{}));
  const std::size_t buffers_before = schedule.buffers.size();
  std::size_t conv_tasks = 0;
  for (const models::Task& t : schedule.tasks) conv_tasks += t.op && trace.op(*t.op).kind == traces::OpKind::conv ? 1 : 0;
  ASSERT_GT(conv_tasks, 0u);
  add_cudnn_workspaces(schedule, trace, 64 * kMiB);
  ASSERT_EQ(schedule.buffers.size(), buffers_before + conv_tasks);
  for (models::BufferId b = buffers_before; b < schedule.buffers.size(); ++b) {
    std::size_t holders = 0;
    for (const models::Task& t : schedule.tasks) {
      holders += std::count(t.creates.begin(), t.creates.end(), b) + std::count(t.uses.begin(), t.uses.end(), b);
    }
    EXPECT_EQ(holders, 1u) << schedule.buffers[b].name;  // created by its task alone: freed when it ends
    EXPECT_EQ(schedule.buffers[b].bytes, 64 * kMiB);
  }
  EXPECT_NO_THROW(schedule.validate());
  add_cudnn_workspaces(schedule, trace, 0);  // 0: nothing
  EXPECT_EQ(schedule.buffers.size(), buffers_before + conv_tasks);
  // One workspace at a time (one stream): the exact peak grows by at most one of them.
  models::Schedule plain = std::get<models::Schedule>(models::build_schedule(trace, time_model, models::StrategySpec{}));
  const SimulationResult with = simulate(platform, schedule, bare_framework(std::int64_t{16} << 30));
  const SimulationResult without = simulate(platform, plain, bare_framework(std::int64_t{16} << 30));
  EXPECT_GT(with.peak_bytes, without.peak_bytes);
  EXPECT_LE(with.peak_bytes, without.peak_bytes + 64 * kMiB);
}

// host.dispatch: each task's launch cost by the phase of the op it runs.
TEST(DeviceMemory, DispatchCostsFollowThePhase) {
  zoo::ModelRequest request;
  request.model = "resnet18";
  const traces::Trace trace = zoo::build_model(request);
  const models::Platform platform = models::builtin_platform("v100-16gb");
  models::Schedule schedule =
      std::get<models::Schedule>(models::build_schedule(trace, models::OpTimeModel(platform), models::StrategySpec{}));
  assign_dispatch_costs(schedule, trace, models::OpDispatch{11e-6, 5e-6, 3e-6});
  std::size_t seen[3] = {0, 0, 0};
  for (const models::Task& t : schedule.tasks) {
    ASSERT_TRUE(t.op.has_value());  // the baseline has op tasks only
    const traces::Phase phase = trace.op(*t.op).phase;
    const double expected = phase == traces::Phase::forward ? 11e-6 : phase == traces::Phase::backward ? 5e-6 : 3e-6;
    EXPECT_EQ(t.host_seconds, expected) << t.name;
    ++seen[static_cast<std::size_t>(phase)];
  }
  EXPECT_GT(seen[0] * seen[1] * seen[2], 0u);
}

TEST(DeviceMemory, FrameworkResolvesAgainstTheGpu) {
  models::GpuSpec gpu;
  gpu.memory_bytes = 16 * 1024 * kMiB;
  gpu.memory_visible_bytes = 16160 * kMiB;
  gpu.cuda_context_bytes = 300 * kMiB;
  gpu.compute_capability_major = 9;
  FrameworkOnGpu f = resolve_framework(FrameworkSpec{}, gpu, "test");
  EXPECT_EQ(f.visible_bytes, 16160 * kMiB);
  EXPECT_EQ(f.usable_bytes(), (16160 - 300) * kMiB);
  EXPECT_EQ(f.cublas_workspace_bytes, 32 * kMiB);  // Hopper
  FrameworkSpec spec;
  spec.cuda_context_bytes = 1343 * kMiB;
  spec.cublas_workspace_bytes = 0;
  f = resolve_framework(spec, gpu, "test");
  EXPECT_EQ(f.cuda_context_bytes, 1343 * kMiB);
  EXPECT_EQ(f.cublas_workspace_bytes, 0);
  spec.cuda_context_bytes = 17 * 1024 * kMiB;
  EXPECT_THROW(resolve_framework(spec, gpu, "test"), InputError);
  EXPECT_EQ(default_cublas_workspace_bytes(7, 0), 8 * kMiB + 128 * 1024);
  EXPECT_EQ(default_cublas_workspace_bytes(8, 0), 8 * kMiB + 128 * 1024);
}

}  // namespace
}  // namespace comptrain::sim

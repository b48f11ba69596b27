// The formulas written once (metrics/ and core/): each pinned to hand-computed values, so that a
// change to one is a change everywhere and is seen here first.

#include <gtest/gtest.h>

#include <cmath>

#include "comptrain/sim/core/bottleneck.hpp"
#include "comptrain/sim/core/data_parallel_name.hpp"
#include "comptrain/sim/core/time_difference.hpp"
#include "comptrain/sim/metrics/communication_time.hpp"
#include "comptrain/sim/metrics/memory_peak.hpp"
#include "comptrain/sim/metrics/throughput.hpp"

namespace comptrain::sim {
namespace {

TEST(Throughput, GlobalSamplesPerSecondCountEveryGpuAndMicroStep) {
  // 8 GPUs x micro-batch 4 x 2 micro-steps = 64 samples per iteration, in 0.5 s.
  EXPECT_EQ(global_batch(4, 8, 2), 64);
  EXPECT_DOUBLE_EQ(samples_per_second(global_batch(4, 8, 2), 0.5), 128.0);
  // One GPU, no accumulation: the batch over the iteration.
  EXPECT_DOUBLE_EQ(samples_per_second(global_batch(32, 1, 1), 0.25), 128.0);
}

TEST(TimeDifference, IsNeverNegativeAndZeroWithinRounding) {
  EXPECT_DOUBLE_EQ(time_difference(3.0, 1.0), 2.0);
  EXPECT_EQ(time_difference(1.0, 3.0), 0.0);
  // Sums of the same durations in another order: 1e-16 apart, not a time.
  EXPECT_EQ(time_difference(0.1 + 0.2, 0.3), 0.0);
  EXPECT_EQ(time_difference(0.3, 0.1 + 0.2), 0.0);
  EXPECT_EQ(time_difference(1.0 + 1e-10, 1.0), 0.0);
  EXPECT_GT(time_difference(1.0 + 1e-8, 1.0), 0.0);
  EXPECT_EQ(time_difference(0.0, 0.0), 0.0);
}

// A collective after the last compute task: all of it exposed, none hidden. The exposed part is
// |comm u compute| - |compute|, which rounds 1.1e-16 s above the collective's own length with
// these times (shared/defects-2/18 reported -0.0 ns hidden and -5.4e-20 s in JSON).
TEST(CommunicationTime, HiddenTimeIsNeverNegative) {
  const double compute_end = 0.9999359449390904;
  const double comm_start = 1.172342356658807;
  const double comm_end = 1.1731451785450908;
  ASSERT_GT((compute_end + (comm_end - comm_start)) - compute_end, comm_end - comm_start) << "the rounding this test is about";
  models::Schedule schedule;
  models::Task compute;
  compute.name = "op";
  models::Task collective;
  collective.name = "all_reduce";
  collective.kind = models::TaskKind::collective;
  collective.stream = models::Stream::comm;
  collective.collective = models::CollectiveKind::all_reduce;
  schedule.tasks = {compute, collective};
  SimulationResult result;
  result.tasks = {TaskTiming{0, 0, compute_end}, TaskTiming{comm_start, comm_start, comm_end}};
  const CommunicationTime c = communication_time(schedule, result);
  EXPECT_EQ(c.collective_seconds, comm_end - comm_start);
  EXPECT_EQ(c.exposed_seconds, c.collective_seconds);
  EXPECT_EQ(c.hidden_seconds(), 0.0);
  EXPECT_FALSE(std::signbit(c.hidden_seconds()));
}

TEST(MemoryPeak, EachMetricReadsItsOwnPeak) {
  const MemoryPeaks peaks{100, 200, 300, 400};
  EXPECT_EQ(peak_in(MemoryMetric::exact, peaks), 100);
  EXPECT_EQ(peak_in(MemoryMetric::allocated, peaks), 200);
  EXPECT_EQ(peak_in(MemoryMetric::reserved, peaks), 300);
  EXPECT_EQ(peak_in(MemoryMetric::device, peaks), 400);
}

TEST(MemoryPeak, PeaksOfAResultAreTheTrackerAndTheAllocatorModel) {
  SimulationResult r;
  r.peak_bytes = 10;
  r.device.peak_allocated = 20;
  r.device.peak_reserved = 30;
  r.device.framework.cuda_context_bytes = 5;
  const MemoryPeaks peaks = memory_peaks(r);
  EXPECT_EQ(peaks.exact, 10);
  EXPECT_EQ(peaks.allocated, 20);
  EXPECT_EQ(peaks.reserved, 30);
  EXPECT_EQ(peaks.device, 35);  // reserved + the CUDA context
}

TEST(MemoryPeak, AnOutOfMemoryNeedsWhatWasReservedPlusTheSegment) {
  OutOfMemory oom;
  oom.in_use = std::int64_t{3} << 30;
  oom.requested = std::int64_t{1} << 29;
  oom.capacity = std::int64_t{3} << 30;
  EXPECT_EQ(out_of_memory_peak(oom), (std::int64_t{7} << 29));
  EXPECT_EQ(describe_out_of_memory(oom), "needs 3.50 GiB reserved of 3.00 GiB usable");
}

TEST(Bottleneck, BelowTheShareNothingBounds) {
  EXPECT_EQ(dominant_wait(0.09, 0.09), Bottleneck::none);
  EXPECT_EQ(dominant_wait(0.0, 0.0, 0.0999), Bottleneck::none);
  EXPECT_DOUBLE_EQ(kBottleneckShare, 0.10);
}

TEST(Bottleneck, TheLargerWaitBoundsNetworkOnATie) {
  EXPECT_EQ(dominant_wait(0.2, 0.1), Bottleneck::network);
  EXPECT_EQ(dominant_wait(0.1, 0.2), Bottleneck::host);
  EXPECT_EQ(dominant_wait(0.15, 0.15), Bottleneck::network);
  EXPECT_EQ(dominant_wait(0.1, 0.0), Bottleneck::network);  // at the share: bound
}

TEST(Bottleneck, ACheckpointBoundsOnlyWhenItIsTheLargest) {
  EXPECT_EQ(dominant_wait(0.1, 0.2, 0.3), Bottleneck::checkpoint);
  EXPECT_EQ(dominant_wait(0.1, 0.3, 0.3), Bottleneck::host);
  EXPECT_EQ(dominant_wait(0.0, 0.0, 0.5, 0.6), Bottleneck::none);  // the planner's share option
}

TEST(DataParallelName, ShortAndLongForms) {
  EXPECT_EQ(data_parallel_name(0, false, NameStyle::short_form), "DDP");
  EXPECT_EQ(data_parallel_name(2, false, NameStyle::short_form), "ZeRO-2");
  EXPECT_EQ(data_parallel_name(3, true, NameStyle::short_form), "FSDP2");
  EXPECT_EQ(data_parallel_name(0, false, NameStyle::long_form), "PyTorch DDP");
  EXPECT_EQ(data_parallel_name(3, false, NameStyle::long_form), "DeepSpeed ZeRO stage 3");
  EXPECT_EQ(data_parallel_name(3, true, NameStyle::long_form), "PyTorch FSDP2");
}

}  // namespace
}  // namespace comptrain::sim

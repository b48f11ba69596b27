// Trace -> strategy -> SimGrid replay, on traces small enough to compute every figure by hand,
// and on the zoo.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "comptrain/models/op_time.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/sim/engine/replay.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/traces/summary.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "common/must_apply.hpp"

namespace comptrain::sim {
namespace {

using traces::OpIndex;
using traces::Phase;
using traces::TensorIndex;
using traces::TensorRole;

constexpr char kDevice[] = "HandGPU";

// Ops carry durations measured on the test GPU, so their times are exact by construction.
struct HandTrace {
  std::vector<traces::Tensor> tensors;
  std::vector<traces::Op> ops;
  TensorIndex tensor(const std::string& name, std::int64_t bytes, TensorRole role) {
    traces::Tensor t;
    t.id = tensors.size();
    t.name = name;
    t.dtype = traces::DType::u8;
    t.shape = {bytes};
    t.role = role;
    tensors.push_back(t);
    return tensors.size() - 1;
  }
  void op(const std::string& name, Phase phase, double seconds, std::vector<TensorIndex> in, std::vector<TensorIndex> out) {
    traces::Op o;
    o.id = ops.size();
    o.name = name;
    o.phase = phase;
    o.kind = traces::OpKind::other;
    o.inputs = std::move(in);
    o.outputs = std::move(out);
    o.measured = traces::MeasuredDuration{seconds, kDevice, 1};
    ops.push_back(o);
  }
};

// f1 makes a big activation `a` that only b2 needs again; f3 is long enough for a copy.
//   forward  f1 0.1 s, f2 0.1, f3 0.2, f4 0.1 (e: 1000 B temporary)
//   backward l 0.1, b4 0.1, b3 0.1, b2 0.1 (reads a)
traces::Trace chain() {
  HandTrace h;
  auto x = h.tensor("x", 1, TensorRole::input);
  auto a = h.tensor("a", 1000, TensorRole::activation);
  auto b = h.tensor("b", 10, TensorRole::activation);
  auto c = h.tensor("c", 10, TensorRole::activation);
  auto e = h.tensor("e", 1000, TensorRole::temporary);
  auto g = h.tensor("g", 10, TensorRole::temporary);
  auto gc = h.tensor("gc", 10, TensorRole::temporary);
  auto gb = h.tensor("gb", 10, TensorRole::temporary);
  auto ga = h.tensor("ga", 10, TensorRole::temporary);
  h.op("f1", Phase::forward, 0.1, {x}, {a});
  h.op("f2", Phase::forward, 0.1, {a}, {b});
  h.op("f3", Phase::forward, 0.2, {b}, {c});
  h.op("f4", Phase::forward, 0.1, {c}, {e});
  h.op("l", Phase::backward, 0.1, {e}, {g});
  h.op("b4", Phase::backward, 0.1, {g, c}, {gc});
  h.op("b3", Phase::backward, 0.1, {gc, b}, {gb});
  h.op("b2", Phase::backward, 0.1, {gb, a}, {ga});
  return traces::Trace("chain", 1, h.tensors, h.ops);
}

// Link speeds in bytes/s, no latency: copying `a` takes 1000 / bandwidth seconds.
models::Platform hand_platform(double link_bandwidth, std::int64_t memory = std::int64_t{1} << 30) {
  models::Platform p;
  p.name = "hand";
  p.gpu.name = kDevice;
  p.gpu.memory_bytes = memory;
  p.gpu.memory_bandwidth = 1e12;
  p.gpu.peak_fp32 = p.gpu.peak_fp16 = p.gpu.peak_bf16 = 1e12;
  p.host.flops = 1e9;
  p.host_link.bandwidth = link_bandwidth;
  p.host_link.latency = 0;
  return p;
}

models::StrategySpec only_big(models::StrategyRule rule) {
  rule.select.min_bytes = 100;  // selects `a` alone
  models::StrategySpec spec;
  spec.name = "test";
  spec.rules.push_back(rule);
  return spec;
}

SimulationResult run(const traces::Trace& trace, const models::Platform& platform, const models::StrategySpec& spec) {
  const models::OpTimeModel model(platform);
  return simulate(platform, test_support::must_apply(models::build_schedule(trace, model, spec)));
}

constexpr double kTol = 1e-9;

TEST(StrategyReplay, BaselineTimesAndPeakByHand) {
  const SimulationResult r = run(chain(), hand_platform(1e4), models::StrategySpec{});
  ASSERT_TRUE(r.fits());
  EXPECT_NEAR(r.iteration_seconds, 0.9, kTol);
  // While l runs: x a b c e g = 1 + 1000 + 10 + 10 + 1000 + 10.
  EXPECT_EQ(r.peak_bytes, 2031);
  EXPECT_NEAR(r.peak_time, 0.5, kTol);
}

TEST(StrategyReplay, OffloadLowersThePeakOnAFastLink) {
  models::StrategyRule rule;
  rule.action = models::OffloadAction{2};
  const SimulationResult r = run(chain(), hand_platform(1e4), only_big(rule));
  ASSERT_TRUE(r.fits());
  // a copies out 0.2-0.3 (freed then) and back 0.6-0.7 (lookahead 2: once l ends, as b4
  // starts); b2 starts at 0.8 with no stall.
  EXPECT_NEAR(r.iteration_seconds, 0.9, kTol);
  EXPECT_NEAR(r.compute_stall_seconds, 0.0, kTol);
  EXPECT_NEAR(r.seconds_by_task_kind[static_cast<std::size_t>(models::TaskKind::offload)], 0.1, kTol);
  EXPECT_NEAR(r.seconds_by_task_kind[static_cast<std::size_t>(models::TaskKind::prefetch)], 0.1, kTol);
  // Peak while b4 runs: x b c g gc + the prefetched a = 1 + 10 + 10 + 10 + 10 + 1000.
  EXPECT_EQ(r.peak_bytes, 1041);
  EXPECT_EQ(r.peak_by_role[static_cast<std::size_t>(models::MemoryRole::prefetch)], 1000);
}

TEST(StrategyReplay, OffloadOnASlowLinkStallsByTheCopyTime) {
  models::StrategyRule rule;
  rule.action = models::OffloadAction{2};
  const SimulationResult r = run(chain(), hand_platform(2e3), only_big(rule));
  ASSERT_TRUE(r.fits());
  // Each copy takes 0.5 s: out 0.2-0.7, back 0.7-1.2; b2 is ready at 0.8 and waits 0.4 s.
  EXPECT_NEAR(r.compute_stall_seconds, 0.4, kTol);
  EXPECT_NEAR(r.iteration_seconds, 0.9 + 0.4, kTol);
  // a is still on the GPU while l runs, so the peak is the baseline's.
  EXPECT_EQ(r.peak_bytes, 2031);
}

TEST(StrategyReplay, SynchronousOffloadBoundsMemoryOnASlowLink) {
  models::StrategyRule rule;
  rule.action = models::OffloadAction{2, true};
  const SimulationResult r = run(chain(), hand_platform(2e3), only_big(rule));
  ASSERT_TRUE(r.fits());
  // vDNN: the copy of a (0.5 s) starts when f1 ends (0.1) and overlaps f2; f3 waits for it
  // until 0.6 (stall 0.4). Back: after l ends (1.0) until 1.5; b2 is ready at 1.2 (stall 0.3).
  EXPECT_NEAR(r.compute_stall_seconds, 0.7, kTol);
  EXPECT_NEAR(r.iteration_seconds, 1.6, kTol);
  // a leaves at 0.6, before e exists: the peak is while b4 runs with the prefetched a
  // (x b c g gc + 1000), not the asynchronous run's 2031.
  EXPECT_EQ(r.peak_bytes, 1041);
}

TEST(StrategyReplay, OffloadOnTheComputeStreamAddsBothCopiesToTheIteration) {
  models::StrategyRule rule;
  models::OffloadAction o;
  o.stream = models::OffloadAction::Stream::compute;
  rule.action = o;
  const SimulationResult r = run(chain(), hand_platform(1e4), only_big(rule));
  ASSERT_TRUE(r.fits());
  // save_on_cpu: a goes out on the compute stream right after f1 (0.1-0.2), so f2 runs
  // 0.2-0.3, and comes back right before b2 (after b3: 0.9-1.0); b2 ends at 1.1, the
  // baseline's 0.9 plus both copies, with nothing left to overlap.
  EXPECT_NEAR(r.iteration_seconds, 0.9 + 0.2, kTol);
  EXPECT_NEAR(r.seconds_by_task_kind[static_cast<std::size_t>(models::TaskKind::offload)], 0.1, kTol);
  // a leaves after f2 (its last forward use); the peak is while l runs: x b c e g.
  EXPECT_EQ(r.peak_bytes, 1031);
  // The same copies on the copy streams hide behind f3 and l (OffloadLowersThePeakOnAFastLink).
  models::StrategyRule on_copy_streams;
  on_copy_streams.action = models::OffloadAction{2};
  EXPECT_NEAR(run(chain(), hand_platform(1e4), only_big(on_copy_streams)).iteration_seconds, 0.9, kTol);
}

TEST(StrategyReplay, PageableCopiesRunAtThePageableRateAndHoldTheLaunchingThread) {
  models::StrategyRule rule;
  models::OffloadAction o;
  o.host_memory = models::OffloadAction::HostMemory::pageable;
  rule.action = o;
  models::Platform platform = hand_platform(1e4);
  platform.host_link.pageable_bandwidth = 5e3;  // 1000 B in 0.2 s
  const SimulationResult r = run(chain(), platform, only_big(rule));
  ASSERT_TRUE(r.fits());
  // The copy out is issued after f2 and runs 0.2-0.4 at the pageable rate; the launching
  // thread is blocked in it, so f3 is launched only at 0.4 (ends 0.6), f4 0.7, l 0.8. The copy
  // back (lookahead 2: after l) runs 0.8-1.0 and blocks the thread again: b4 1.1, b3 1.2, b2 1.3.
  EXPECT_NEAR(r.seconds_by_task_kind[static_cast<std::size_t>(models::TaskKind::offload)], 0.2, kTol);
  EXPECT_NEAR(r.seconds_by_task_kind[static_cast<std::size_t>(models::TaskKind::prefetch)], 0.2, kTol);
  EXPECT_NEAR(r.iteration_seconds, 1.3, kTol);
  EXPECT_NEAR(r.host_wait_seconds, 0.4, kTol);
  // Pinned memory at the link's rate: the copies overlap compute, as in the baseline's 0.9.
  rule.action = models::OffloadAction{2};
  EXPECT_NEAR(run(chain(), platform, only_big(rule)).iteration_seconds, 0.9, kTol);
}

TEST(StrategyReplay, PageableCopiesNeedThePlatformsPageableRate) {
  models::StrategyRule rule;
  models::OffloadAction o;
  o.host_memory = models::OffloadAction::HostMemory::pageable;
  rule.action = o;
  const models::Platform platform = hand_platform(1e4);  // no pageable_bandwidth
  const models::OpTimeModel model(platform);
  try {
    (void)models::build_schedule(chain(), model, only_big(rule));
    FAIL() << "a pageable offload ran without a pageable rate";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("host_link.pageable_bandwidth"));
    EXPECT_THAT(e.what(), testing::HasSubstr("platform 'hand'"));
  }
}

TEST(StrategyReplay, CompressionKeepsBytesOverRatioBetweenCompressAndDecompress) {
  models::StrategyRule rule;
  models::CompressAction c;
  c.ratio = 8;
  c.compress_bandwidth = 1e4;    // 1000 B in 0.1 s
  c.decompress_bandwidth = 2e4;  // 1000 B in 0.05 s
  c.latency = 0.01;
  rule.action = c;
  // The hand trace's tensors are u8 (one byte per element): a compress rule leaves integer
  // storages alone unless it names them.
  rule.select.names = {"a"};
  const traces::Trace trace = chain();
  const models::Platform platform = hand_platform(1e4);
  const models::OpTimeModel model(platform);
  const models::Schedule schedule = test_support::must_apply(models::build_schedule(trace, model, only_big(rule)));
  const SimulationResult r = simulate(platform, schedule);
  ASSERT_TRUE(r.fits());
  // Find the codec tasks and the compressed buffer.
  models::TaskId comp = 0, decomp = 0;
  for (models::TaskId t = 0; t < schedule.tasks.size(); ++t) {
    if (schedule.tasks[t].kind == models::TaskKind::compress) comp = t;
    if (schedule.tasks[t].kind == models::TaskKind::decompress) decomp = t;
  }
  const models::BufferId compressed = schedule.tasks[comp].creates.at(0);
  EXPECT_EQ(schedule.buffers[compressed].bytes, 125);  // 1000 / 8
  // Compression (0.01 + 0.1 s of work) starts at 0.2 alongside f3 (0.2 s of work) and they
  // share the GPU: both run at half speed, so the codec ends at 0.2 + 2 * 0.11 = 0.42 and f3
  // finishes its last 0.09 s alone, at 0.51.
  EXPECT_NEAR(r.tasks[comp].start, 0.2, kTol);
  EXPECT_NEAR(r.tasks[comp].end, 0.42, kTol);
  // The compressed bytes are live from compress start to decompress end, the original is
  // freed when compression ends.
  double allocated = -1, freed = -1, original_freed = -1;
  const models::BufferId original = schedule.tasks[comp].uses.at(0);
  for (const MemoryEvent& e : r.memory_events) {
    if (e.buffer == compressed) (e.delta > 0 ? allocated : freed) = e.time;
    if (e.buffer == original && e.delta < 0) original_freed = e.time;
  }
  EXPECT_NEAR(allocated, r.tasks[comp].start, kTol);
  EXPECT_NEAR(freed, r.tasks[decomp].end, kTol);
  EXPECT_NEAR(original_freed, r.tasks[comp].end, kTol);
  EXPECT_NEAR(r.tasks[comp + 1].end, 0.51, kTol);  // f3, slowed by the codec
  // Decompression starts once b3 (the op before the consumer) ends and runs alone, so b2
  // stalls for all of it: 0.01 + 1000 / 2e4 = 0.06 s.
  EXPECT_NEAR(r.tasks[decomp].end - r.tasks[decomp].start, 0.06, kTol);
  EXPECT_NEAR(r.compute_stall_seconds, 0.06, kTol);
}

TEST(StrategyReplay, BaselinePeakEqualsStaticAccountingForEveryZooModel) {
  const models::Platform platform = models::builtin_platform("h200");
  for (const auto& info : zoo::list_models()) {
    zoo::ModelRequest request;
    request.model = info.name;
    request.batch_size = 2;
    if (info.name == "gpt" || info.name == "llama") {  // small shapes: llama's default, Llama-2-7B, does not fit in fp32
      request.layers = 2;
      request.hidden = 256;
      request.heads = 4;
      request.seq_len = 128;
    }
    const traces::Trace trace = zoo::build_model(request);
    const SimulationResult r = run(trace, platform, models::StrategySpec{});
    ASSERT_TRUE(r.fits()) << info.name;
    EXPECT_EQ(r.peak_bytes, traces::summarize(trace).peak_bytes) << info.name;
  }
}

TEST(StrategyReplay, ResNet50AtABatchThatDoesNotFitIsOutOfMemory) {
  zoo::ModelRequest request;
  request.model = "resnet50";
  request.batch_size = 512;  // ~41 GiB of saved activations alone (81.4 MiB per image)
  const traces::Trace trace = zoo::build_model(request);
  const models::Platform platform = models::builtin_platform("a100-40gb");
  const SimulationResult r = run(trace, platform, models::StrategySpec{});
  ASSERT_FALSE(r.fits());
  EXPECT_TRUE(r.out_of_memory->task.has_value());
  EXPECT_GT(r.out_of_memory->requested + r.out_of_memory->in_use, r.out_of_memory->capacity);
  EXPECT_EQ(r.out_of_memory->capacity, platform.gpu.memory_visible_bytes - platform.gpu.cuda_context_bytes);
}

}  // namespace
}  // namespace comptrain::sim

// FSDP2's CPU offload (models/data_parallel.hpp, FsdpSpec::cpu_offload; models/transforms/README.md,
// "FSDP2's CPU offload"): the two-layer LLaMA of fsdp_test.cpp in `mixed` precision on 4 ranks,
// each decoder layer a fully_shard unit, torchtitan's settings. What the GPU no longer holds, the
// copies each unit gains and the step on the CPU, against numbers computed by hand.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "comptrain/models/data_parallel.hpp"
#include "comptrain/models/fsdp_offload.hpp"
#include "comptrain/models/op_time.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/models/transform_schedule.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "common/must_apply.hpp"
#include "common/two_layer_llama.hpp"

namespace comptrain::models {
namespace {

constexpr int kRanks = 4;

// The hand count (fsdp_test.cpp, ParameterGroupsAreTheLayersAndTheRoot): per layer q, k, v, o
// (64 x 64), gate, up, down (64 x 256) and two norms (64): 4*4096 + 3*16384 + 2*64 = 65664; the
// root: embeddings and lm_head (100 x 64) and the final norm: 6400 + 6400 + 64 = 12864. Every
// dim 0 is a multiple of 4: no padding.
constexpr std::int64_t kLayer = 4 * 64 * 64 + 3 * 64 * 256 + 2 * 64;
constexpr std::int64_t kRoot = 100 * 64 + 100 * 64 + 64;
constexpr std::int64_t kParameters = kRoot + 2 * kLayer;  // 144192

traces::Trace llama(zoo::OptimizerImpl impl = zoo::OptimizerImpl::foreach) { return test_support::two_layer_llama(impl); }

DataParallelSpec fsdp_spec(std::optional<FsdpSpec::CpuOffload> offload = FsdpSpec::CpuOffload{}) {
  DataParallelSpec spec = test_support::fsdp_over_layers(kRanks);
  spec.fsdp->cpu_offload = offload;
  return spec;
}

const Platform& a100() {
  static const Platform platform = builtin_platform("a100-80gb");
  return platform;
}

Schedule fsdp(const traces::Trace& trace, const DataParallelSpec& spec, const Platform& platform = a100()) {
  const OpTimeModel time_model(platform);
  Schedule s = test_support::must_apply(build_schedule(trace, time_model, StrategySpec{}));
  apply_data_parallel(s, trace, spec, platform);
  s.validate();
  return s;
}

using test_support::buffer;
using test_support::find_buffer;

std::vector<TaskId> tasks_named(const Schedule& s, const std::string& part) {
  std::vector<TaskId> out;
  for (TaskId t = 0; t < s.tasks.size(); ++t) {
    if (s.tasks[t].name.find(part) != std::string::npos) out.push_back(t);
  }
  return out;
}

// Bytes of the resident buffers of a role: what the GPU holds from set-up to the end.
std::int64_t resident_bytes(const Schedule& s, MemoryRole role) {
  std::int64_t total = 0;
  for (const Buffer& b : s.buffers) {
    if (b.resident && b.role == role) total += b.bytes;
  }
  return total;
}

// Per GPU without offload: the fp32 shards, 4 * 144192 / 4 = 144192 bytes, and AdamW's moments,
// 8 * 144192 / 4 = 288384 bytes, resident; each unit's fp32 gradient shard (4 n / 4) held to
// zero_grad. With offload: none of them (FSDPParam puts the padded shard on the CPU; the
// optimizer state follows its parameters), and the gradient shards live only until their copy.
TEST(FsdpOffload, TheGpuHoldsNoShardsGradientsOrOptimizerState) {
  const auto trace = llama();
  const Schedule on_gpu = fsdp(trace, fsdp_spec(std::nullopt));
  EXPECT_EQ(resident_bytes(on_gpu, MemoryRole::weight), 4 * kParameters / kRanks);
  EXPECT_EQ(resident_bytes(on_gpu, MemoryRole::optimizer_state), 8 * kParameters / kRanks);
  EXPECT_EQ(resident_bytes(on_gpu, MemoryRole::weight), 144192);
  EXPECT_EQ(resident_bytes(on_gpu, MemoryRole::optimizer_state), 288384);

  const Schedule off = fsdp(trace, fsdp_spec());
  EXPECT_EQ(resident_bytes(off, MemoryRole::weight), 0);
  EXPECT_EQ(resident_bytes(off, MemoryRole::optimizer_state), 0);
  EXPECT_EQ(resident_bytes(off, MemoryRole::gradient), 0);
  EXPECT_EQ(off.buffers[buffer(off, "sharded parameters (on the host)")].bytes, 0);
  for (const std::string what : {"root", "model.layers.0", "model.layers.1"}) {
    const Buffer& shard = off.buffers[buffer(off, what + " sharded gradients (1/4)")];
    EXPECT_FALSE(shard.held_to_end) << what;
    EXPECT_FALSE(shard.resident) << what;
    EXPECT_TRUE(on_gpu.buffers[buffer(on_gpu, what + " sharded gradients (1/4)")].held_to_end) << what;
  }
}

// Before each all-gather (forward: root, layer 0, layer 1; backward: layer 0) its unit's fp32
// shards cross to the GPU: root 4 * 12864 / 4 = 12864 bytes, a layer 4 * 65664 / 4 = 65664 bytes,
// on the h2d stream, pinned and not blocking; the all-gather waits for the copy. Each parameter's
// GPU copy is freed once cast to bf16: the buffer is the largest parameter's fp32 shard (root:
// an embedding, 100 x 64 / 4 x 4 bytes = 6400; a layer: gate/up/down, 64 x 256 / 4 x 4 = 16384),
// on FSDP2's all-gather stream.
TEST(FsdpOffload, ShardsAreCopiedToTheGpuBeforeEachAllGather) {
  const auto trace = llama();
  const Schedule s = fsdp(trace, fsdp_spec());
  const std::vector<TaskId> copies = tasks_named(s, "FSDP shards to the GPU");
  ASSERT_EQ(copies.size(), 4u);
  std::vector<std::int64_t> bytes;
  for (TaskId c : copies) {
    const Task& copy = s.tasks[c];
    EXPECT_EQ(copy.kind, TaskKind::prefetch);
    EXPECT_EQ(copy.stream, Stream::h2d);
    EXPECT_FALSE(copy.blocks_host);
    EXPECT_FALSE(copy.pageable);
    bytes.push_back(copy.bytes);
    // The next task is the all-gather it feeds, which waits for it and holds its GPU copy.
    ASSERT_LT(c + 1, s.tasks.size());
    const Task& gather = s.tasks[c + 1];
    EXPECT_EQ(gather.collective, CollectiveKind::all_gather);
    EXPECT_THAT(gather.after, testing::Contains(c));
    ASSERT_EQ(copy.creates.size(), 1u);
    EXPECT_THAT(gather.uses, testing::Contains(copy.creates.front()));
  }
  EXPECT_THAT(bytes, testing::ElementsAre(4 * kRoot / kRanks, 4 * kLayer / kRanks, 4 * kLayer / kRanks, 4 * kLayer / kRanks));
  EXPECT_EQ(bytes.front(), 12864);
  const Buffer& root = s.buffers[buffer(s, "root shards copied to the GPU (forward)")];
  EXPECT_EQ(root.bytes, 100 * 64 / kRanks * 4);
  EXPECT_EQ(root.allocation_stream, AllocationStream::fsdp_all_gather);
  EXPECT_EQ(s.buffers[buffer(s, "model.layers.0 shards copied to the GPU (backward)")].bytes, 64 * 256 / kRanks * 4);
}

// After each unit's reduce-scatter its fp32 gradient shard (4 n / 4 bytes) crosses to the host
// on the d2h stream; with reduce_dtype bf16 the shard (2 n / 4) is first cast to the fp32 of the
// parameters, a 4 n / 4-byte buffer on the reduce-scatter stream.
TEST(FsdpOffload, GradientShardsAreCopiedToTheHost) {
  const auto trace = llama();
  const Schedule s = fsdp(trace, fsdp_spec());
  const std::vector<TaskId> copies = tasks_named(s, "FSDP gradient shard to the host");
  ASSERT_EQ(copies.size(), 3u);
  std::vector<std::int64_t> bytes;
  for (TaskId c : copies) {
    const Task& copy = s.tasks[c];
    EXPECT_EQ(copy.kind, TaskKind::offload);
    EXPECT_EQ(copy.stream, Stream::d2h);
    EXPECT_FALSE(copy.blocks_host);
    EXPECT_TRUE(copy.creates.empty());  // fp32 reduction: no cast
    ASSERT_EQ(copy.after.size(), 1u);
    EXPECT_EQ(s.tasks[copy.after.front()].collective, CollectiveKind::reduce_scatter);
    bytes.push_back(copy.bytes);
  }
  // Layer 1 is reduced first, the root last (the final callback).
  EXPECT_THAT(bytes, testing::ElementsAre(4 * kLayer / kRanks, 4 * kLayer / kRanks, 4 * kRoot / kRanks));

  DataParallelSpec bf16 = fsdp_spec();
  bf16.fsdp->reduce_bytes = 2;
  const Schedule r = fsdp(trace, bf16);
  EXPECT_EQ(r.buffers[buffer(r, "root sharded gradients (1/4)")].bytes, 2 * kRoot / kRanks);
  const Buffer& cast = r.buffers[buffer(r, "root sharded gradients cast for the host")];
  EXPECT_EQ(cast.bytes, 4 * kRoot / kRanks);
  EXPECT_EQ(cast.allocation_stream, AllocationStream::fsdp_reduce_scatter);
  for (TaskId c : tasks_named(r, "FSDP gradient shard to the host")) {
    EXPECT_EQ(r.tasks[c].creates.size(), 1u);
  }
}

// The step: no optimizer kernel on the GPU; one task on the host over this rank's 144192 / 4 =
// 36048 parameters, blocking the launching thread after every gradient copy. Its time: 36048 x
// max(15 / flops, 80 / memory_bandwidth) for the for-loop (foreach falls back to it on the CPU),
// 28 bytes per parameter for fused.
TEST(FsdpOffload, TheStepRunsOnTheCpu) {
  const HostSpec& host = a100().host;
  for (const bool fused : {false, true}) {
    const auto trace = llama(fused ? zoo::OptimizerImpl::fused : zoo::OptimizerImpl::foreach);
    DataParallelSpec spec = fsdp_spec();
    spec.fsdp->cpu_offload->fused_step = fused;
    const Schedule s = fsdp(trace, spec);
    for (const Task& t : s.tasks) {
      if (t.op) {
        EXPECT_NE(trace.op(*t.op).phase, traces::Phase::optimizer) << t.name;
      }
    }
    const std::vector<TaskId> steps = tasks_named(s, "torch.optim AdamW on the CPU");
    ASSERT_EQ(steps.size(), 1u);
    const Task& step = s.tasks[steps.front()];
    EXPECT_EQ(step.kind, TaskKind::host_compute);
    EXPECT_EQ(step.stream, Stream::host);
    EXPECT_TRUE(step.blocks_host);
    const double n = 144192.0 / 4;
    const double bytes = fused ? 28 : 80;
    EXPECT_DOUBLE_EQ(step.seconds, std::max(n * 15 / host.flops, n * bytes / host.memory_bandwidth));
    for (TaskId c : tasks_named(s, "FSDP gradient shard to the host")) {
      EXPECT_THAT(step.after, testing::Contains(c));
    }
    EXPECT_EQ(steps.front(), s.tasks.size() - 1);  // the iteration's last task
  }
}

// pin_memory=False: every copy is staged through pageable memory and blocks the launching thread;
// a platform without host_link.pageable_bandwidth cannot copy so and is refused.
TEST(FsdpOffload, PageableShardsBlockTheLaunchingThread) {
  const auto trace = llama();
  const DataParallelSpec spec = fsdp_spec(FsdpSpec::CpuOffload{.pin_memory = false});
  Platform platform = a100();
  ASSERT_FALSE(platform.host_link.pageable_bandwidth > 0);
  {
    const OpTimeModel time_model(platform);
    Schedule s = test_support::must_apply(build_schedule(trace, time_model, StrategySpec{}));
    EXPECT_THROW(apply_data_parallel(s, trace, spec, platform), InputError);
  }
  platform.host_link.pageable_bandwidth = platform.host_link.bandwidth / 2;
  const Schedule s = fsdp(trace, spec, platform);
  std::size_t copies = 0;
  for (const Task& t : s.tasks) {
    if (t.name.starts_with("FSDP shards to the GPU") || t.name.starts_with("FSDP gradient shard to the host")) {
      ++copies;
      EXPECT_TRUE(t.pageable) << t.name;
      EXPECT_TRUE(t.blocks_host) << t.name;
    }
  }
  EXPECT_EQ(copies, 4u + 3u);
}

// Under gradient accumulation (FSDP2 reduce-scatters at every micro-step) each of 3 micro-steps
// copies its units' shards in before its 4 all-gathers and its 3 gradient shards out, each into
// a transient GPU shard of its own (not held: 4 n / 4 bytes freed after its copy); the step on
// the CPU runs once, after the last micro-step's copies, and nothing is resident on the GPU.
TEST(FsdpOffload, EveryMicroStepCopiesAndTheCpuStepsOnce) {
  const auto trace = llama();
  static const OpTimeModel time_model(a100());
  TransformSteps steps;
  steps.accumulation_steps = 3;
  steps.data_parallel = fsdp_spec();
  steps.platform = &a100();
  Schedule s = transform_schedule(test_support::must_apply(build_schedule(trace, time_model, StrategySpec{})), trace, steps);
  s.validate();
  EXPECT_EQ(tasks_named(s, "FSDP shards to the GPU").size(), 3u * 4u);
  const std::vector<TaskId> out = tasks_named(s, "FSDP gradient shard to the host");
  ASSERT_EQ(out.size(), 3u * 3u);
  const std::vector<TaskId> step = tasks_named(s, "torch.optim AdamW on the CPU");
  ASSERT_EQ(step.size(), 1u);
  for (std::size_t i = 0; i < out.size(); ++i) {
    EXPECT_LT(out[i], step.front());
    if (i >= 6) {  // the last micro-step's
      EXPECT_THAT(s.tasks[step.front()].after, testing::Contains(out[i]));
    }
  }
  EXPECT_EQ(resident_bytes(s, MemoryRole::weight) + resident_bytes(s, MemoryRole::optimizer_state) + resident_bytes(s, MemoryRole::gradient), 0);
  for (const Buffer& b : s.buffers) {
    if (b.name.find("sharded gradients") != std::string::npos) {
      EXPECT_FALSE(b.held_to_end) << b.name;
    }
  }
}

// The host memory a rank pins: its fp32 shards (4 x 144192 / 4 = 144192 bytes), their fp32
// gradients (as many) and AdamW's two fp32 moments (8 x 144192 / 4 = 288384): 576768 bytes,
// 16 bytes per parameter of its shard; none without the offload. A weight of 6 rows on 4 ranks is
// padded to 8 rows: 2 rows of the shard per rank.
TEST(FsdpOffload, HostBytesPerRank) {
  const auto trace = llama();
  EXPECT_EQ(fsdp_offload_host_bytes(trace, fsdp_spec()), 4 * kParameters / kRanks + 4 * kParameters / kRanks + 8 * kParameters / kRanks);
  EXPECT_EQ(fsdp_offload_host_bytes(trace, fsdp_spec()), 576768);
  EXPECT_EQ(fsdp_offload_host_bytes(trace, fsdp_spec(std::nullopt)), 0);
  DataParallelSpec three = fsdp_spec();
  three.ranks = 3;  // 64 rows -> 66 (22 per rank), 100 -> 102 (34), 256 -> 258 (86); the norms' 64 -> 66
  // Per layer: 4 x (22 x 64) for q, k, v, o ([64, 64]); gate and up [256, 64]: 2 x (86 x 64); down
  // [64, 256]: 22 x 256; two norms [64]: 2 x 22. Root: embeddings and lm_head [100, 64]: 2 x (34 x 64),
  // the final norm 22.
  const std::int64_t layer = 4 * 22 * 64 + 2 * 86 * 64 + 22 * 256 + 2 * 22;
  const std::int64_t root = 2 * 34 * 64 + 22;
  const std::int64_t shard = 2 * layer + root;
  // The moments' share: 8 x 144192 / 3 = 384512 bytes.
  EXPECT_EQ(fsdp_offload_host_bytes(trace, three), 2 * 4 * shard + 8 * kParameters / 3);
}

TEST(FsdpOffload, NeedsThePlatform) {
  const auto trace = llama();
  const OpTimeModel time_model(a100());
  Schedule s = test_support::must_apply(build_schedule(trace, time_model, StrategySpec{}));
  EXPECT_THROW(apply_data_parallel(s, trace, fsdp_spec()), std::invalid_argument);
  HostSpec no_rates = a100().host;
  no_rates.flops = 0;
  EXPECT_THROW(torch_cpu_adamw_seconds(1, false, no_rates), std::invalid_argument);
}

}  // namespace
}  // namespace comptrain::models

// Gradient accumulation under sharded data parallelism (models/transform_schedule.hpp,
// models/transforms/README.md, "Gradient accumulation"): with ZeRO-2/3 and FSDP2 every micro-step
// gathers, releases and reduce-scatters on its own and the gradient shard accumulates across
// micro-steps, so the model state between micro-steps, and each micro-step's peak, do not grow
// with the number of micro-steps. DDP and ZeRO-1 still reduce after the last micro-step only.
// A two-layer LLaMA on 4 ranks, its parameters counted by hand.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comptrain/models/data_parallel.hpp"
#include "comptrain/models/op_time.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/models/transform_schedule.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "common/must_apply.hpp"
#include "common/two_layer_llama.hpp"

namespace comptrain::models {
namespace {

constexpr std::int64_t kRanks = 4;

// The two-layer LLaMA (common/two_layer_llama.hpp): `mixed` precision (16-bit weights and
// gradients, fp32 masters), AdamW.
traces::Trace llama() { return test_support::two_layer_llama(); }

// Ψ by hand: per layer q, k, v, o (64 x 64), gate, up, down (64 x 256) and two norms (64):
// 16384 + 49152 + 128 = 65664; the root: embeddings and lm_head (100 x 64 each) and the final
// norm (64): 12864. Ψ = 2 x 65664 + 12864 = 144192. Every dim 0 is a multiple of 4: no padding.
constexpr std::int64_t kLayer = 4 * 64 * 64 + 3 * 64 * 256 + 2 * 64;
constexpr std::int64_t kRoot = 2 * 100 * 64 + 64;
constexpr std::int64_t kPsi = 2 * kLayer + kRoot;
static_assert(kLayer == 65664 && kPsi == 144192);

Schedule transformed(const traces::Trace& trace, const DataParallelSpec& spec, int micro_steps) {
  static const Platform platform = builtin_platform("a100-80gb");
  static const OpTimeModel time_model(platform);
  TransformSteps steps;
  steps.accumulation_steps = micro_steps;
  steps.data_parallel = spec;
  steps.platform = &platform;  // the host an offloaded optimizer steps on
  Schedule s = transform_schedule(test_support::must_apply(build_schedule(trace, time_model, StrategySpec{})), trace, steps);
  s.validate();
  return s;
}

DataParallelSpec zero(int stage) {
  DataParallelSpec spec;
  spec.ranks = static_cast<int>(kRanks);
  spec.zero_stage = stage;
  spec.max_reuse_distance_elements = 0;  // every parameter released after each pass's use: gathered anew for backward
  return spec;
}

DataParallelSpec fsdp() { return test_support::fsdp_over_layers(static_cast<int>(kRanks)); }

bool model_state(MemoryRole role) {
  return role == MemoryRole::weight || role == MemoryRole::gradient || role == MemoryRole::optimizer_state;
}

// A sequential replay of the model state (weights, gradients, optimizer state): the bytes live
// once task t has ended, for every t. A buffer is live from the first task that touches it
// (resident: from the start) to the last (held to the end: to the end).
std::vector<std::int64_t> live_after(const Schedule& s) {
  const std::size_t n = s.tasks.size();
  std::vector<std::optional<std::pair<TaskId, TaskId>>> span(s.buffers.size());
  for (TaskId t = 0; t < n; ++t) {
    for (const auto* list : {&s.tasks[t].creates, &s.tasks[t].uses}) {
      for (BufferId b : *list) span[b] = std::make_pair(span[b] ? span[b]->first : t, t);
    }
  }
  std::vector<std::int64_t> live(n, 0);
  for (BufferId b = 0; b < s.buffers.size(); ++b) {
    const Buffer& buffer = s.buffers[b];
    if (!model_state(buffer.role)) continue;
    if (buffer.resident) {
      for (auto& v : live) v += buffer.bytes;
    } else if (span[b]) {
      const TaskId last = buffer.held_to_end ? n - 1 : span[b]->second;
      for (TaskId t = span[b]->first; t < last; ++t) live[t] += buffer.bytes;
      if (buffer.held_to_end) live[n - 1] += buffer.bytes;
    }
  }
  return live;
}

// The tasks of micro-step m (1-based): [first, end). Later micro-steps' tasks carry
// "[micro-step m]"; the step's tasks (the optimizer's) come after the last micro-step.
struct Range {
  TaskId first = 0, end = 0;
};
std::vector<Range> micro_steps(const traces::Trace& trace, const Schedule& s, int k) {
  const auto starts_step = [&](const Task& task) { return task.op && trace.op(*task.op).phase == traces::Phase::optimizer; };
  std::vector<Range> out;
  TaskId begin = 0;
  for (int m = 1; m <= k; ++m) {
    const std::string next = "[micro-step " + std::to_string(m + 1) + "]";
    TaskId end = begin;
    while (end < s.tasks.size() && !starts_step(s.tasks[end]) && s.tasks[end].name.find(next) == std::string::npos) ++end;
    out.push_back({begin, end});
    begin = end;
  }
  return out;
}

std::int64_t collective_bytes(const Schedule& s, Range r, CollectiveKind kind) {
  std::int64_t total = 0;
  for (TaskId t = r.first; t < r.end; ++t) {
    if (s.tasks[t].kind == TaskKind::collective && s.tasks[t].collective == kind) total += s.tasks[t].bytes;
  }
  return total;
}

std::int64_t peak_in(const std::vector<std::int64_t>& live, Range r) {
  return *std::max_element(live.begin() + static_cast<std::ptrdiff_t>(r.first), live.begin() + static_cast<std::ptrdiff_t>(r.end));
}

// ZeRO-3 (DeepSpeed, mixed precision): between micro-steps only the partitions and the
// reduction bucket: the 16-bit parameters 2Ψ/4 = 72096, the 16-bit gradient partition 72096,
// the fp32 masters and moments 12Ψ/4 = 432576, the reduction bucket min(Ψ, 5e8) x 2 = 288384:
// 865152 bytes, after every micro-step of 1 to 4. Each micro-step reduce-scatters its 2Ψ bytes of
// gradients and gathers its parameters anew; its peak is the first's.
TEST(ShardedAccumulation, Zero3StateAtEveryMicroStepIsThePartitions) {
  const auto trace = llama();
  constexpr std::int64_t kBoundary = 2 * kPsi / kRanks + 2 * kPsi / kRanks + 12 * kPsi / kRanks + 2 * kPsi;
  static_assert(kBoundary == 72096 + 72096 + 432576 + 288384);
  std::optional<std::int64_t> one_step_peak;
  std::optional<std::int64_t> one_step_gathered;
  for (int k = 1; k <= 4; ++k) {
    SCOPED_TRACE("micro-steps " + std::to_string(k));
    const Schedule s = transformed(trace, zero(3), k);
    const std::vector<std::int64_t> live = live_after(s);
    const auto ranges = micro_steps(trace, s, k);
    for (int m = 0; m < k; ++m) {
      SCOPED_TRACE("micro-step " + std::to_string(m + 1));
      const Range r = ranges[static_cast<std::size_t>(m)];
      ASSERT_LT(r.first, r.end);
      EXPECT_EQ(live[r.end - 1], kBoundary);
      EXPECT_EQ(collective_bytes(s, r, CollectiveKind::reduce_scatter), 2 * kPsi);
      const std::int64_t gathered = collective_bytes(s, r, CollectiveKind::all_gather);
      EXPECT_GT(gathered, 2 * kPsi);  // every parameter for forward, and again for backward
      if (!one_step_gathered) one_step_gathered = gathered;
      EXPECT_EQ(gathered, *one_step_gathered);
      if (!one_step_peak) one_step_peak = peak_in(live, r);
      EXPECT_EQ(peak_in(live, r), *one_step_peak);
    }
    // The step: no all-gather after it (ZeRO-3 gathers at the next use), one optimizer step.
    EXPECT_EQ(collective_bytes(s, Range{ranges.back().end, s.tasks.size()}, CollectiveKind::all_gather), 0);
  }
}

// ZeRO-3 with the optimizer on the host (ZeRO-Offload): between micro-steps only the 16-bit
// parameter partition 2Ψ/4 = 72096 and the reduction bucket 2Ψ = 288384 are on the GPU (the fp32
// state and the gradient partition are the host's): 360480 bytes. Each micro-step copies its
// reduced gradients to the host (the same bytes each time); the CPU steps once, after the last.
TEST(ShardedAccumulation, Zero3OffloadCopiesEveryMicroStepAndStepsOnce) {
  const auto trace = llama();
  DataParallelSpec spec = zero(3);
  spec.offload_optimizer = OptimizerOffloadSpec{};
  constexpr std::int64_t kBoundary = 2 * kPsi / kRanks + 2 * kPsi;
  static_assert(kBoundary == 72096 + 288384);
  std::optional<std::int64_t> copied_once;
  for (int k = 1; k <= 3; ++k) {
    SCOPED_TRACE("micro-steps " + std::to_string(k));
    const Schedule s = transformed(trace, spec, k);
    const std::vector<std::int64_t> live = live_after(s);
    // The micro-steps end where the step on the host, CPU Adam, begins (the optimizer's kernels
    // are gone; the other host tasks are each micro-step's fp32 conversions of its gradients).
    const auto cpu_adam = [](const Task& task) { return task.kind == TaskKind::host_compute && task.name.starts_with("CPU Adam"); };
    TaskId step = 0;
    while (step < s.tasks.size() && !cpu_adam(s.tasks[step])) ++step;
    ASSERT_LT(step, s.tasks.size());
    int host_steps = 0;
    for (TaskId t = 0; t < s.tasks.size(); ++t) {
      if (!cpu_adam(s.tasks[t])) continue;
      ++host_steps;
      EXPECT_EQ(s.tasks[t].name.find("[micro-step"), std::string::npos) << s.tasks[t].name;
    }
    for (TaskId t = step; t < s.tasks.size(); ++t) EXPECT_EQ(s.tasks[t].name.find("[micro-step"), std::string::npos) << s.tasks[t].name;
    EXPECT_EQ(host_steps, 1);  // Ψ/4 parameters: one subgroup of sub_group_size 1e9
    std::vector<Range> ranges;
    TaskId begin = 0;
    for (int m = 1; m <= k; ++m) {
      const std::string next = "[micro-step " + std::to_string(m + 1) + "]";
      TaskId end = begin;
      while (end < step && s.tasks[end].name.find(next) == std::string::npos) ++end;
      ranges.push_back({begin, end});
      begin = end;
    }
    for (const Range& r : ranges) {
      ASSERT_LT(r.first, r.end);
      EXPECT_EQ(live[r.end - 1], kBoundary);
      EXPECT_EQ(collective_bytes(s, r, CollectiveKind::reduce_scatter), 2 * kPsi);
      std::int64_t copied = 0;
      for (TaskId t = r.first; t < r.end; ++t) {
        if (s.tasks[t].kind == TaskKind::offload) copied += s.tasks[t].bytes;
      }
      EXPECT_GT(copied, 0);
      if (!copied_once) copied_once = copied;
      EXPECT_EQ(copied, *copied_once);
    }
  }
}

// ZeRO-2 likewise reduce-scatters at every micro-step (DeepSpeed's partition_gradients), then
// all-gathers the updated 16-bit parameters (2Ψ bytes) once, after the step.
TEST(ShardedAccumulation, Zero2ReducesEveryMicroStepAndGathersOnce) {
  const auto trace = llama();
  const int k = 3;
  const Schedule s = transformed(trace, zero(2), k);
  const auto ranges = micro_steps(trace, s, k);
  const std::vector<std::int64_t> live = live_after(s);
  // Full 16-bit weights 2Ψ = 288384, gradient partition 72096, optimizer partition 432576,
  // reduction bucket 288384.
  constexpr std::int64_t kBoundary = 2 * kPsi + 2 * kPsi / kRanks + 12 * kPsi / kRanks + 2 * kPsi;
  for (const Range& r : ranges) {
    EXPECT_EQ(collective_bytes(s, r, CollectiveKind::reduce_scatter), 2 * kPsi);
    EXPECT_EQ(collective_bytes(s, r, CollectiveKind::all_gather), 0);
    EXPECT_EQ(live[r.end - 1], kBoundary);
  }
  EXPECT_EQ(collective_bytes(s, Range{ranges.back().end, s.tasks.size()}, CollectiveKind::all_gather), 2 * kPsi);
}

// DDP and ZeRO-1 keep the no_sync behaviour: nothing is reduced before the last micro-step.
TEST(ShardedAccumulation, DdpAndZero1ReduceAfterTheLastMicroStepOnly) {
  const auto trace = llama();
  const int k = 3;
  for (int stage : {0, 1}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const Schedule s = transformed(trace, zero(stage), k);
    const auto ranges = micro_steps(trace, s, k);
    const CollectiveKind kind = stage == 0 ? CollectiveKind::all_reduce : CollectiveKind::reduce_scatter;
    EXPECT_EQ(collective_bytes(s, ranges[0], kind), 0);
    EXPECT_EQ(collective_bytes(s, ranges[1], kind), 0);
    EXPECT_EQ(collective_bytes(s, ranges[2], kind), 2 * kPsi);  // the 16-bit gradients, once
  }
}

// FSDP2 (torchtitan's settings: fp32 shards and reduce-scatter, the last layer kept after
// forward): between micro-steps the fp32 sharded parameters 4Ψ/4 = 144192, AdamW's moments
// 8Ψ/4 = 288384 and the fp32 sharded gradients 4Ψ/4 = 144192 (made by the first micro-step's
// reduce-scatters, accumulated into by the others): 576768 bytes. Each micro-step
// reduce-scatters 4Ψ bytes (fp32) and all-gathers 2Ψ for forward (16-bit) and layer 0's 2 x 65664
// again for backward (the root and the last layer are not resharded after forward).
TEST(ShardedAccumulation, FsdpStateAtEveryMicroStepIsTheShards) {
  const auto trace = llama();
  constexpr std::int64_t kBoundary = 4 * kPsi / kRanks + 8 * kPsi / kRanks + 4 * kPsi / kRanks;
  static_assert(kBoundary == 144192 + 288384 + 144192);
  std::optional<std::int64_t> one_step_peak;
  for (int k = 1; k <= 4; ++k) {
    SCOPED_TRACE("micro-steps " + std::to_string(k));
    const Schedule s = transformed(trace, fsdp(), k);
    const std::vector<std::int64_t> live = live_after(s);
    const auto ranges = micro_steps(trace, s, k);
    for (int m = 0; m < k; ++m) {
      SCOPED_TRACE("micro-step " + std::to_string(m + 1));
      const Range r = ranges[static_cast<std::size_t>(m)];
      ASSERT_LT(r.first, r.end);
      EXPECT_EQ(live[r.end - 1], kBoundary);
      EXPECT_EQ(collective_bytes(s, r, CollectiveKind::reduce_scatter), 4 * kPsi);
      EXPECT_EQ(collective_bytes(s, r, CollectiveKind::all_gather), 2 * kPsi + 2 * kLayer);
      if (!one_step_peak) one_step_peak = peak_in(live, r);
      // The first micro-step allocates the sharded gradients as it goes; the later ones hold them
      // all from the start, and each reduce-scatter's new output (a group's shard, at most a
      // layer's 4 x 65664 / 4 bytes) until it is added in: their peak is at most those above the first's.
      EXPECT_GE(peak_in(live, r), *one_step_peak);
      EXPECT_LE(peak_in(live, r), *one_step_peak + 4 * kPsi / kRanks + 4 * kLayer / kRanks);
      if (m > 0) {
        EXPECT_EQ(peak_in(live, r), peak_in(live, ranges[1]));
      }
    }
    // One sharded-gradient buffer per group, created once, by the first micro-step.
    int sharded_gradients = 0;
    for (BufferId b = 0; b < s.buffers.size(); ++b) {
      const std::string& name = s.buffers[b].name;
      if (name.find("sharded gradients") == std::string::npos || name.find("'s output") != std::string::npos) continue;
      ++sharded_gradients;
      EXPECT_TRUE(s.buffers[b].held_to_end) << s.buffers[b].name;
      int creators = 0;
      for (TaskId t = 0; t < s.tasks.size(); ++t) {
        const auto& c = s.tasks[t].creates;
        if (std::find(c.begin(), c.end(), b) != c.end()) {
          ++creators;
          EXPECT_LT(t, ranges[0].end) << s.buffers[b].name;
        }
      }
      EXPECT_EQ(creators, 1) << s.buffers[b].name;
    }
    EXPECT_EQ(sharded_gradients, 3);  // the two layers and the root
    // Each later micro-step's reduce-scatters write a new output, a group's fp32 shard (a layer's
    // 4 x 65664 / 4 = 65664 bytes, the root's 4 x 12864 / 4 = 12864), freed by the same task once
    // added into the sharded gradient.
    int outputs = 0;
    std::int64_t output_bytes = 0;
    for (BufferId b = 0; b < s.buffers.size(); ++b) {
      if (s.buffers[b].name.find("'s output, added into it") == std::string::npos) continue;
      ++outputs;
      output_bytes += s.buffers[b].bytes;
      EXPECT_FALSE(s.buffers[b].held_to_end) << s.buffers[b].name;
      int touching = 0;
      for (const Task& task : s.tasks) {
        touching += static_cast<int>(std::count(task.creates.begin(), task.creates.end(), b) + std::count(task.uses.begin(), task.uses.end(), b));
      }
      EXPECT_EQ(touching, 1) << s.buffers[b].name;
    }
    EXPECT_EQ(outputs, 3 * (k - 1));
    EXPECT_EQ(output_bytes, (k - 1) * (2 * 65664 + 12864));
  }
}

}  // namespace
}  // namespace comptrain::models

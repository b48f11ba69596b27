// PyTorch FSDP2 as a schedule transform (models/data_parallel.hpp, FsdpSpec;
// models/transforms/README.md, "FSDP2"): a two-layer LLaMA in `mixed` precision on 4 ranks, each
// decoder layer a fully_shard unit, torchtitan's settings (the last layer not resharded after
// forward, fp32 sharded parameters and reduce-scatter). The state per GPU, the buffers of each
// unit, where each is allocated and how long it lives, against numbers computed by hand.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>

#include "comptrain/models/data_parallel.hpp"
#include "comptrain/models/kernel_power.hpp"
#include "comptrain/models/op_time.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "common/must_apply.hpp"
#include "common/two_layer_llama.hpp"

namespace comptrain::models {
namespace {

constexpr int kRanks = 4;

traces::Trace llama() { return test_support::two_layer_llama(); }

DataParallelSpec fsdp_spec(FsdpSpec::Reshard reshard = FsdpSpec::Reshard::all_but_last) { return test_support::fsdp_over_layers(kRanks, reshard); }

Schedule fsdp(const traces::Trace& trace, const DataParallelSpec& spec) {
  static const OpTimeModel time_model(builtin_platform("a100-80gb"));
  Schedule s = test_support::must_apply(build_schedule(trace, time_model, StrategySpec{}));
  apply_data_parallel(s, trace, spec);
  s.validate();
  return s;
}

using test_support::buffer;
using test_support::find_buffer;

struct Span {
  TaskId first = 0, last = 0;
};
Span span(const Schedule& s, BufferId b) {
  std::optional<Span> out;
  for (TaskId t = 0; t < s.tasks.size(); ++t) {
    const Task& task = s.tasks[t];
    const bool touches = std::find(task.uses.begin(), task.uses.end(), b) != task.uses.end() ||
                         std::find(task.creates.begin(), task.creates.end(), b) != task.creates.end();
    if (!touches) continue;
    if (!out) out = Span{t, t};
    out->last = t;
  }
  if (!out) ADD_FAILURE() << "no task touches " << s.buffers[b].name;
  return out.value_or(Span{});
}

TaskId creator(const Schedule& s, BufferId b) {
  for (TaskId t = 0; t < s.tasks.size(); ++t) {
    if (std::find(s.tasks[t].creates.begin(), s.tasks[t].creates.end(), b) != s.tasks[t].creates.end()) return t;
  }
  ADD_FAILURE() << "no task creates " << s.buffers[b].name;
  return 0;
}

// The first and last op task of a pass whose op name starts with `prefix` (and that reads a weight,
// for the forward and backward bounds of a unit).
struct OpSpan {
  std::optional<TaskId> first, last;
};
OpSpan ops_of(const traces::Trace& trace, const Schedule& s, traces::Phase phase, const std::string& prefix) {
  OpSpan out;
  for (TaskId t = 0; t < s.tasks.size(); ++t) {
    const Task& task = s.tasks[t];
    if (task.kind != TaskKind::op || trace.op(*task.op).phase != phase || !trace.op(*task.op).name.starts_with(prefix)) continue;
    const bool reads_weight = std::any_of(task.uses.begin(), task.uses.end(), [&](BufferId b) { return s.buffers[b].role == MemoryRole::weight; }) ||
                              std::any_of(task.creates.begin(), task.creates.end(), [&](BufferId b) { return s.buffers[b].role == MemoryRole::weight; });
    if (!reads_weight) continue;
    if (!out.first) out.first = t;
    out.last = t;
  }
  return out;
}

// Parameters of the trace by unit (the layer instance, "" for the root), elements.
std::map<std::string, std::int64_t> parameters_by_unit(const traces::Trace& trace) {
  std::map<std::string, std::int64_t> out;
  for (const auto& t : trace.tensors()) {
    if (t.role != traces::TensorRole::weight || t.is_view()) continue;
    std::string unit;
    for (int l = 0; l < 2; ++l) {
      const std::string prefix = "model.layers." + std::to_string(l) + ".";
      if (t.name.starts_with(prefix)) unit = "model.layers." + std::to_string(l);
    }
    out[unit] += t.elements();
  }
  return out;
}

// The hand count of the model: per layer q, k, v, o (64 x 64 each), gate, up, down (64 x 256: the
// zoo's intermediate size for hidden 64, 8/3 x 64 rounded up to a multiple of 256) and two norms
// (64); the root: embeddings and lm_head (100 x 64 each) and the final norm (64). Every dim 0 is a
// multiple of 4 ranks: no padding.
TEST(Fsdp, ParameterGroupsAreTheLayersAndTheRoot) {
  const auto trace = llama();
  const auto units = parameters_by_unit(trace);
  ASSERT_EQ(units.size(), 3u);
  EXPECT_EQ(units.at(""), 100 * 64 + 100 * 64 + 64);
  EXPECT_EQ(units.at("model.layers.0"), 4 * 64 * 64 + 3 * 64 * 256 + 2 * 64);
  EXPECT_EQ(units.at("model.layers.1"), units.at("model.layers.0"));
  for (const auto& t : trace.tensors()) {
    if (t.role == traces::TensorRole::weight && !t.is_view()) {
      EXPECT_EQ(t.shape.front() % kRanks, 0) << t.name;
    }
  }
}

// FSDP2's model state per GPU under mixed precision: the fp32 sharded parameters (4 bytes per
// parameter / ranks, allocated with the model) and AdamW's two moments (8 / ranks); the trace's
// fp32 masters are the sharded parameters, its 16-bit weights are gathered copies only.
TEST(Fsdp, ModelStateIsTheFp32ShardsAndTheMoments) {
  const auto trace = llama();
  const Schedule s = fsdp(trace, fsdp_spec());
  std::int64_t parameters = 0;
  for (const auto& [unit, n] : parameters_by_unit(trace)) parameters += n;
  const BufferId shards = buffer(s, "sharded parameters (1/4)");
  EXPECT_TRUE(s.buffers[shards].resident);
  EXPECT_EQ(s.buffers[shards].role, MemoryRole::weight);
  EXPECT_EQ(s.buffers[shards].bytes, parameters * 4 / kRanks);
  const BufferId state = buffer(s, "optimizer state partition (1/4)");
  EXPECT_EQ(s.buffers[state].bytes, parameters * 8 / kRanks);
  // Nothing else is resident but the inputs and the trace's buffers (none is a weight or state).
  for (const Buffer& b : s.buffers) {
    if (!b.resident) continue;
    if (b.role == MemoryRole::weight || b.role == MemoryRole::optimizer_state || b.role == MemoryRole::gradient) {
      EXPECT_TRUE(&b == &s.buffers[shards] || &b == &s.buffers[state]) << b.name;
    }
  }
}

// The root group is never resharded after forward: its 16-bit parameters are gathered once,
// before the embedding, and held through the whole backward pass; the last layer (torchtitan's
// reshard_after_forward=False) likewise; layer 0 is gathered again for its backward.
TEST(Fsdp, UnshardedParametersLiveAsFsdp2HoldsThem) {
  const auto trace = llama();
  const Schedule s = fsdp(trace, fsdp_spec());
  const auto units = parameters_by_unit(trace);
  using traces::Phase;

  const BufferId root = buffer(s, "root parameters (unsharded for forward)");
  EXPECT_EQ(s.buffers[root].bytes, units.at("") * 2);
  EXPECT_EQ(s.buffers[root].allocation_stream, AllocationStream::current);
  EXPECT_FALSE(find_buffer(s, "root parameters (unsharded for backward)"));
  // Resharded by the final callback, after the backward pass's last task.
  TaskId last_backward = 0;
  for (TaskId t = 0; t < s.tasks.size(); ++t) {
    if (s.tasks[t].kind == TaskKind::op && trace.op(*s.tasks[t].op).phase == Phase::backward) last_backward = t;
  }
  EXPECT_EQ(span(s, root).last, last_backward);

  const BufferId last = buffer(s, "model.layers.1 parameters (unsharded for forward)");
  EXPECT_FALSE(find_buffer(s, "model.layers.1 parameters (unsharded for backward)"));
  EXPECT_EQ(creator(s, last), *ops_of(trace, s, Phase::forward, "model.layers.1.").first);
  EXPECT_EQ(span(s, last).last, *ops_of(trace, s, Phase::backward, "model.layers.1.").last);  // its post-backward

  const BufferId first_fwd = buffer(s, "model.layers.0 parameters (unsharded for forward)");
  EXPECT_EQ(s.buffers[first_fwd].bytes, units.at("model.layers.0") * 2);
  EXPECT_EQ(creator(s, first_fwd), *ops_of(trace, s, Phase::forward, "model.layers.0.").first);
  EXPECT_EQ(span(s, first_fwd).last, *ops_of(trace, s, Phase::forward, "model.layers.0.").last);
  const BufferId first_bwd = buffer(s, "model.layers.0 parameters (unsharded for backward)");
  EXPECT_EQ(creator(s, first_bwd), *ops_of(trace, s, Phase::backward, "model.layers.0.").first);
  EXPECT_EQ(span(s, first_bwd).last, *ops_of(trace, s, Phase::backward, "model.layers.0.").last);

  // With reshard_after_forward true the last layer is gathered again too.
  const Schedule all = fsdp(trace, fsdp_spec(FsdpSpec::Reshard::all));
  EXPECT_TRUE(find_buffer(all, "model.layers.1 parameters (unsharded for backward)"));
  EXPECT_FALSE(find_buffer(all, "root parameters (unsharded for backward)"));
}

// torchao's float8 all-gather (FsdpSpec::float8_all_gather, training.float8.fsdp_all_gather):
// the weights of the linears the scope converts are gathered in one byte an element. A layer's
// seven projections (4 x 64 x 64 + 3 x 64 x 256 = 65,536 elements) at 1 byte and its two norms
// (128) at 2: 65,792 bytes in the all-gather, its buffer and the unsharded parameters, where
// 16 bits take 131,328; the root's embedding, norm and lm_head (skipped) stay 16-bit.
TEST(Fsdp, Float8AllGatherGathersTheConvertedLinearsWeightsInOneByte) {
  const auto trace = llama();
  DataParallelSpec spec = fsdp_spec();
  spec.fsdp->float8_all_gather = Float8Scope{{"lm_head"}, true};
  const Schedule s = fsdp(trace, spec);
  const Schedule bf16 = fsdp(trace, fsdp_spec());
  const auto units = parameters_by_unit(trace);
  EXPECT_EQ(bf16.buffers[buffer(bf16, "model.layers.0 all-gather buffer (forward)")].bytes, 131'328);
  for (const char* name : {"model.layers.0 all-gather buffer (forward)", "model.layers.0 parameters (unsharded for forward)",
                           "model.layers.0 all-gather buffer (backward)", "model.layers.1 parameters (unsharded for forward)"}) {
    EXPECT_EQ(s.buffers[buffer(s, name)].bytes, 65'792) << name;
  }
  EXPECT_EQ(s.buffers[buffer(s, "root parameters (unsharded for forward)")].bytes, units.at("") * 2);
  int gathers = 0;
  for (const Task& task : s.tasks) {
    if (task.collective != CollectiveKind::all_gather || !task.name.starts_with("FSDP all-gather for forward of model.layers.0")) continue;
    EXPECT_EQ(task.bytes, 65'792);
    ++gathers;
  }
  EXPECT_EQ(gathers, 1);
  // The shards stay fp32 and the gradients reduce as before.
  EXPECT_EQ(s.buffers[buffer(s, "sharded parameters (1/4)")].bytes, bf16.buffers[buffer(bf16, "sharded parameters (1/4)")].bytes);
}

// With the platform (the run layer's overload), FSDP2's own copies are kernels on the compute
// stream: after each all-gather, its copy-out (the unit's unsharded 16-bit bytes read from the
// all-gather buffer and written into the parameters it creates), just before the unit's first
// task of the pass; before each reduce-scatter, its copy-in (the 16-bit gradients read, the fp32
// input written), which frees the gradients and which the reduce-scatter waits for. Each lasts
// what a memory-bound kernel of its bytes takes on the A100 (its bandwidth at the platform's
// default memory efficiency, and one launch).
TEST(Fsdp, CopiesOutAfterEachAllGatherAndInBeforeEachReduceScatter) {
  const auto trace = llama();
  const Platform a100 = builtin_platform("a100-80gb");
  const auto kernel_seconds = [&](double bytes) {
    return run_kernel(a100.gpu, KernelWork{0.0, bytes / (a100.gpu.memory_bandwidth * a100.efficiency.memory_default), a100.gpu.launch_overhead}).seconds;
  };
  const OpTimeModel time_model(a100);
  Schedule s = test_support::must_apply(build_schedule(trace, time_model, StrategySpec{}));
  apply_data_parallel(s, trace, fsdp_spec(), a100);
  s.validate();
  const auto units = parameters_by_unit(trace);
  using traces::Phase;
  const auto task_named = [&](const std::string& name) {
    for (TaskId t = 0; t < s.tasks.size(); ++t) {
      if (s.tasks[t].name.starts_with(name)) return t;
    }
    ADD_FAILURE() << "no task " << name;
    return TaskId{0};
  };
  // Layer 0's forward copy-out: after its all-gather, creating its unsharded parameters, the task
  // just before its first forward op on the compute stream.
  const TaskId out = task_named("FSDP copy-out for forward of model.layers.0");
  const Task& copy_out = s.tasks[out];
  EXPECT_EQ(copy_out.kind, TaskKind::framework);
  EXPECT_EQ(copy_out.stream, Stream::compute);
  const std::int64_t unsharded = units.at("model.layers.0") * 2;
  EXPECT_EQ(copy_out.creates, std::vector<BufferId>{buffer(s, "model.layers.0 parameters (unsharded for forward)")});
  EXPECT_EQ(copy_out.uses, std::vector<BufferId>{buffer(s, "model.layers.0 all-gather buffer (forward)")});
  EXPECT_EQ(s.tasks[copy_out.after.at(0)].collective, CollectiveKind::all_gather);
  EXPECT_DOUBLE_EQ(copy_out.seconds, kernel_seconds(2.0 * static_cast<double>(unsharded)));
  EXPECT_GT(copy_out.seconds, 2.0 * static_cast<double>(unsharded) / a100.gpu.memory_bandwidth);
  EXPECT_EQ(out + 1, *ops_of(trace, s, Phase::forward, "model.layers.0.").first);
  // Its backward copy-out is the all-gather buffer's last user.
  const TaskId back = task_named("FSDP copy-out for backward of model.layers.0");
  EXPECT_EQ(span(s, buffer(s, "model.layers.0 all-gather buffer (backward)")).last, back);
  // Layer 1's copy-in: the reduce-scatter input created on the compute stream, the gradients'
  // last user; the reduce-scatter waits for it and reads only the input.
  const TaskId in = task_named("FSDP copy-in of model.layers.1 gradients");
  const Task& copy_in = s.tasks[in];
  EXPECT_EQ(copy_in.kind, TaskKind::framework);
  EXPECT_EQ(copy_in.stream, Stream::compute);
  const BufferId input = buffer(s, "model.layers.1 reduce-scatter input");
  EXPECT_EQ(creator(s, input), in);
  std::int64_t gradient_bytes = 0;
  for (BufferId b = 0; b < s.buffers.size(); ++b) {
    if (s.buffers[b].role != MemoryRole::gradient || !s.buffers[b].name.starts_with("model.layers.1.")) continue;
    gradient_bytes += s.buffers[b].bytes;
    EXPECT_EQ(span(s, b).last, in) << s.buffers[b].name;
  }
  EXPECT_EQ(gradient_bytes, units.at("model.layers.1") * 2);
  EXPECT_DOUBLE_EQ(copy_in.seconds, kernel_seconds(static_cast<double>(gradient_bytes + units.at("model.layers.1") * 4)));
  const TaskId reduction = task_named("FSDP reduce-scatter of model.layers.1 gradients");
  EXPECT_EQ(s.tasks[reduction].after, std::vector<TaskId>{in});
  EXPECT_EQ(s.tasks[reduction].uses, std::vector<BufferId>{input});
}

// All-gathers: forward root, layer 0, layer 1; backward layer 0 only. Each all-gather buffer is
// the unit's 16-bit bytes on FSDP2's all-gather stream, with the shards' cast to 16 bits
// (bytes / ranks); a forward buffer lives until the next unit's all-gather ends, a backward one
// until its copy-out, the unit's first backward task.
TEST(Fsdp, AllGatherBuffersAreOnTheirOwnStream) {
  const auto trace = llama();
  const Schedule s = fsdp(trace, fsdp_spec());
  const auto units = parameters_by_unit(trace);
  int forward = 0, backward = 0;
  for (const Task& t : s.tasks) {
    if (t.collective != CollectiveKind::all_gather) continue;
    (t.name.find("for forward") != std::string::npos ? forward : backward)++;
  }
  EXPECT_EQ(forward, 3);
  EXPECT_EQ(backward, 1);

  const BufferId root_ag = buffer(s, "root all-gather buffer (forward)");
  EXPECT_EQ(s.buffers[root_ag].allocation_stream, AllocationStream::fsdp_all_gather);
  EXPECT_EQ(s.buffers[root_ag].bytes, units.at("") * 2);
  const BufferId cast = buffer(s, "root shards cast for the all-gather (forward)");
  EXPECT_EQ(s.buffers[cast].bytes, units.at("") * 2 / kRanks);
  EXPECT_EQ(s.buffers[cast].allocation_stream, AllocationStream::fsdp_all_gather);
  const BufferId layer0_ag = buffer(s, "model.layers.0 all-gather buffer (forward)");
  EXPECT_EQ(span(s, root_ag).last, creator(s, layer0_ag));  // freed when layer 0's all-gather ends

  const BufferId back_ag = buffer(s, "model.layers.0 all-gather buffer (backward)");
  EXPECT_EQ(span(s, back_ag).last, *ops_of(trace, s, traces::Phase::backward, "model.layers.0.").first);
}

// Reduce-scatters: one per unit, the root's last (the final callback); the input is the unit's
// gradients in fp32 (4 bytes per parameter) on the compute stream, held until the next unit's
// post-backward; the output, this rank's fp32 shard, on FSDP2's reduce-scatter stream until
// zero_grad. The 16-bit gradients are freed by the copy-in.
TEST(Fsdp, ReduceScattersInFp32PerUnit) {
  const auto trace = llama();
  const Schedule s = fsdp(trace, fsdp_spec());
  const auto units = parameters_by_unit(trace);
  std::vector<TaskId> reductions;
  for (TaskId t = 0; t < s.tasks.size(); ++t) {
    if (s.tasks[t].collective == CollectiveKind::reduce_scatter) reductions.push_back(t);
  }
  ASSERT_EQ(reductions.size(), 3u);
  EXPECT_THAT(s.tasks[reductions.back()].name, testing::HasSubstr("root"));
  EXPECT_EQ(s.tasks[reductions.back()].bytes, units.at("") * 4);
  for (const auto& [unit, n] : units) {
    const std::string what = unit.empty() ? "root" : unit;
    const BufferId input = buffer(s, what + " reduce-scatter input");
    const BufferId output = buffer(s, what + " sharded gradients (1/4)");
    EXPECT_EQ(s.buffers[input].bytes, n * 4);
    EXPECT_EQ(s.buffers[input].allocation_stream, AllocationStream::current);
    EXPECT_EQ(s.buffers[output].bytes, n * 4 / kRanks);
    EXPECT_EQ(s.buffers[output].allocation_stream, AllocationStream::fsdp_reduce_scatter);
    EXPECT_TRUE(s.buffers[output].held_to_end);
  }
  // Layer 1 is reduced first; its input is held to layer 0's post-backward (layer 0's last
  // backward task), which waits for layer 1's reduce-scatter.
  const BufferId input1 = buffer(s, "model.layers.1 reduce-scatter input");
  const TaskId layer0_ready = *ops_of(trace, s, traces::Phase::backward, "model.layers.0.").last;
  EXPECT_EQ(span(s, input1).last, layer0_ready);
  EXPECT_THAT(s.tasks[layer0_ready].after, testing::Contains(creator(s, input1)));
  // A layer's 16-bit gradients end with its reduce-scatter.
  for (BufferId b = 0; b < s.buffers.size(); ++b) {
    if (s.buffers[b].role != MemoryRole::gradient || !s.buffers[b].name.starts_with("model.layers.1.")) continue;
    EXPECT_EQ(span(s, b).last, creator(s, input1)) << s.buffers[b].name;
  }
  // The optimizer reads the shards and waits for the last reduce-scatter.
  bool optimizer_waits = false;
  for (const Task& t : s.tasks) {
    if (t.op && trace.op(*t.op).phase == traces::Phase::optimizer) {
      optimizer_waits = optimizer_waits || std::find(t.after.begin(), t.after.end(), reductions.back()) != t.after.end();
    }
  }
  EXPECT_TRUE(optimizer_waits);
}

// HSDP, 8 ranks as 2 replicas of 4 shards: every buffer is the 4-rank FSDP's, byte for byte (the
// shard group sets the padding and the shares); the all-gathers and reduce-scatters run over the
// shard groups (4 consecutive ranks), and each reduce-scatter is followed on the comm stream by an
// all-reduce of its output over the replicas (2 ranks, 4 apart): n parameters x 4 bytes (fp32
// reduce_dtype) / 4 shards. The optimizer waits for the last all-reduce.
TEST(Fsdp, HsdpShardsWithinAGroupAndAllReducesTheShardsAcrossReplicas) {
  const auto trace = llama();
  const Schedule flat = fsdp(trace, fsdp_spec());
  DataParallelSpec spec = fsdp_spec();
  spec.ranks = 2 * kRanks;
  spec.fsdp->replicate = 2;
  const Schedule hybrid = fsdp(trace, spec);
  ASSERT_EQ(flat.buffers.size(), hybrid.buffers.size());
  for (BufferId b = 0; b < flat.buffers.size(); ++b) {
    EXPECT_EQ(flat.buffers[b].name, hybrid.buffers[b].name);
    EXPECT_EQ(flat.buffers[b].bytes, hybrid.buffers[b].bytes) << flat.buffers[b].name;
    EXPECT_EQ(flat.buffers[b].resident, hybrid.buffers[b].resident) << flat.buffers[b].name;
  }
  const auto units = parameters_by_unit(trace);
  std::size_t flat_collectives = 0;
  for (const Task& t : flat.tasks) {
    if (!t.collective) continue;
    ++flat_collectives;
    EXPECT_TRUE(t.groups.every_rank()) << t.name;
  }
  std::vector<TaskId> all_reduces;
  std::size_t shard_collectives = 0;
  for (TaskId t = 0; t < hybrid.tasks.size(); ++t) {
    const Task& task = hybrid.tasks[t];
    if (!task.collective) continue;
    if (*task.collective == CollectiveKind::all_reduce) {
      all_reduces.push_back(t);
      EXPECT_EQ(task.groups, (RankGroups{2, 4})) << task.name;
      continue;
    }
    ++shard_collectives;
    EXPECT_EQ(task.groups, (RankGroups{4, 1})) << task.name;
    if (*task.collective != CollectiveKind::reduce_scatter) continue;
    // The next comm task all-reduces this one's output: a quarter of its input.
    TaskId next = t + 1;
    while (next < hybrid.tasks.size() && hybrid.tasks[next].stream != Stream::comm) ++next;
    ASSERT_LT(next, hybrid.tasks.size());
    EXPECT_EQ(hybrid.tasks[next].collective, CollectiveKind::all_reduce) << task.name;
    EXPECT_EQ(hybrid.tasks[next].bytes, task.bytes / 4) << task.name;
  }
  EXPECT_EQ(shard_collectives, flat_collectives);
  ASSERT_EQ(all_reduces.size(), units.size());
  std::int64_t reduced = 0;
  for (TaskId t : all_reduces) reduced += hybrid.tasks[t].bytes;
  std::int64_t expected = 0;
  for (const auto& [unit, n] : units) expected += n * 4 / kRanks;
  EXPECT_EQ(reduced, expected);
  bool optimizer_waits = false;
  for (const Task& t : hybrid.tasks) {
    if (t.op && trace.op(*t.op).phase == traces::Phase::optimizer) {
      optimizer_waits = optimizer_waits || std::find(t.after.begin(), t.after.end(), all_reduces.back()) != t.after.end();
    }
  }
  EXPECT_TRUE(optimizer_waits);
}

TEST(Fsdp, RejectsWhatItDoesNotModel) {
  DataParallelSpec spec = fsdp_spec();
  spec.zero_stage = 2;
  EXPECT_THROW(check_data_parallel(spec), std::invalid_argument);
  spec = fsdp_spec();
  spec.offload_optimizer = OptimizerOffloadSpec{};
  EXPECT_THROW(check_data_parallel(spec), std::invalid_argument);
  spec = fsdp_spec();
  spec.fsdp->units = {"layers.[2-1]"};
  EXPECT_THROW(check_data_parallel(spec), std::invalid_argument);
  spec = fsdp_spec();
  spec.fsdp->reduce_bytes = 9;
  EXPECT_THROW(check_data_parallel(spec), std::invalid_argument);
  spec = fsdp_spec();
  spec.fsdp->replicate = 3;  // 4 ranks do not form 3 replicas
  EXPECT_THROW(check_data_parallel(spec), std::invalid_argument);
  spec.fsdp->replicate = 0;
  EXPECT_THROW(check_data_parallel(spec), std::invalid_argument);
}

}  // namespace
}  // namespace comptrain::models

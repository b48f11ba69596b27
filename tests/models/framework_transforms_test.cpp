// A training loop's host synchronisations and a Python optimizer loop as schedule transforms
// (models/framework_transforms.hpp: add_host_syncs, apply_host_sync_ops, apply_optimizer_loop).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "comptrain/models/data_parallel.hpp"
#include "comptrain/models/framework_transforms.hpp"
#include "comptrain/models/kernel_fusion.hpp"
#include "comptrain/models/op_time.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/models/transform_schedule.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "common/must_apply.hpp"

namespace comptrain::models {
namespace {

traces::Trace gpt2(zoo::OptimizerImpl impl) {
  zoo::ModelRequest request;
  request.model = "gpt2";
  request.batch_size = 2;
  request.layers = 2;
  request.optimizer_impl = impl;
  return zoo::build_model(request);
}

const Platform& a100() {
  static const Platform platform = builtin_platform("a100-80gb");
  return platform;
}

Schedule baseline(const traces::Trace& trace) {
  static const OpTimeModel time_model(a100());
  return test_support::must_apply(build_schedule(trace, time_model, StrategySpec{}));
}

bool is_optimizer_op(const Task& task, const traces::Trace& trace) {
  return task.op && trace.op(*task.op).phase == traces::Phase::optimizer;
}

std::optional<TaskId> first_optimizer_task(const Schedule& schedule, const traces::Trace& trace) {
  for (TaskId t = 0; t < schedule.tasks.size(); ++t) {
    if (is_optimizer_op(schedule.tasks[t], trace)) return t;
  }
  return std::nullopt;
}

// DDP over 4 ranks: the backward pass's all-reduces run on the comm stream beside the compute
// stream, so the sync must wait for both.
TEST(HostSyncs, TheSyncBeforeTheStepWaitsForEveryStreamAndBlocksTheHost) {
  const traces::Trace trace = gpt2(zoo::OptimizerImpl::foreach);
  Schedule schedule = baseline(trace);
  DataParallelSpec ddp;
  ddp.ranks = 4;
  apply_data_parallel(schedule, trace, ddp, a100());
  const Schedule before = schedule;
  const std::optional<TaskId> step = first_optimizer_task(before, trace);
  ASSERT_TRUE(step);
  std::optional<TaskId> last_compute, last_comm;
  for (TaskId t = 0; t < *step; ++t) {
    if (before.tasks[t].stream == Stream::compute) last_compute = t;
    if (before.tasks[t].stream == Stream::comm) last_comm = t;
  }
  ASSERT_TRUE(last_compute && last_comm);

  add_host_syncs(schedule, trace, {HostSync::backward_end}, 12e-6);
  schedule.validate();
  ASSERT_EQ(schedule.tasks.size(), before.tasks.size() + 1);
  const Task& sync = schedule.tasks[*step];
  EXPECT_EQ(sync.kind, TaskKind::host_compute);
  EXPECT_EQ(sync.stream, Stream::host);
  EXPECT_EQ(sync.seconds, 0);
  EXPECT_EQ(sync.host_seconds, 12e-6);
  EXPECT_TRUE(sync.blocks_host);
  EXPECT_THAT(sync.after, ::testing::UnorderedElementsAre(*last_compute, *last_comm));
  // Everything else is the old schedule, its waits renumbered past the inserted task.
  for (TaskId t = 0; t < before.tasks.size(); ++t) {
    const Task& moved = schedule.tasks[t < *step ? t : t + 1];
    EXPECT_EQ(moved.name, before.tasks[t].name);
    ASSERT_EQ(moved.after.size(), before.tasks[t].after.size()) << moved.name;
    for (std::size_t i = 0; i < moved.after.size(); ++i) {
      const TaskId old = before.tasks[t].after[i];
      EXPECT_EQ(moved.after[i], old < *step ? old : old + 1) << moved.name;
    }
  }
}

TEST(HostSyncs, NoSyncOrNoStepLeavesTheSchedule) {
  const traces::Trace trace = gpt2(zoo::OptimizerImpl::foreach);
  Schedule schedule = baseline(trace);
  const std::size_t tasks = schedule.tasks.size();
  add_host_syncs(schedule, trace, {}, 12e-6);
  EXPECT_EQ(schedule.tasks.size(), tasks);
  // A schedule without an optimizer step (its tasks left out) has no place for backward_end.
  Schedule forward_backward = schedule;
  const std::optional<TaskId> step = first_optimizer_task(forward_backward, trace);
  ASSERT_TRUE(step);
  forward_backward.tasks.resize(*step);
  add_host_syncs(forward_backward, trace, {HostSync::backward_end}, 12e-6);
  EXPECT_EQ(forward_backward.tasks.size(), *step);
}

// transform_schedule runs the sync last, so that its dispatch cost is the Python call's.
TEST(HostSyncs, TransformScheduleAddsTheSyncAtTheForwardOpsDispatchCost) {
  const traces::Trace trace = gpt2(zoo::OptimizerImpl::foreach);
  const Schedule built = baseline(trace);
  TransformSteps steps;
  steps.dispatch = OpDispatch{11e-6, 5e-6, 3e-6};
  steps.host_syncs = {HostSync::backward_end};
  const Schedule piped = transform_schedule(built, trace, steps);
  const std::optional<TaskId> step = first_optimizer_task(built, trace);
  ASSERT_TRUE(step);
  ASSERT_EQ(piped.tasks.size(), built.tasks.size() + 1);
  EXPECT_TRUE(piped.tasks[*step].blocks_host);
  EXPECT_EQ(piped.tasks[*step].host_seconds, 11e-6);
}

// Hugging Face's expert loop: the zoo marks each expert's torch.where (a nonzero) host_sync, and
// apply_host_sync_ops makes the tasks that run it, as the op or replayed by recomputation, block
// the launching thread; no other task changes.
TEST(HostSyncs, TheExpertLoopsWhereBlocksTheHostAsOpAndAsRecomputation) {
  zoo::ModelRequest request;
  request.model = "llama";
  request.batch_size = 1;
  request.seq_len = 16;
  zoo::DecoderArchitecture arch;
  arch.family = "mixtral";
  arch.layers = 2;
  arch.hidden = 64;
  arch.heads = 4;
  arch.kv_heads = 2;
  arch.intermediate = 96;
  arch.vocab = 100;
  arch.max_positions = 64;
  zoo::MoeArchitecture moe;
  moe.experts = 4;
  moe.top_k = 2;
  moe.intermediate = 32;
  arch.moe = moe;
  request.decoder = arch;
  const traces::Trace trace = zoo::build_model(request);
  std::size_t marked = 0;
  for (const traces::Op& op : trace.ops()) {
    marked += op.host_sync ? 1 : 0;
    EXPECT_EQ(op.host_sync, op.name.find(".block_sparse_moe.where") != std::string::npos) << op.name;
  }
  EXPECT_EQ(marked, 2u * 4u);  // one per expert and sparse layer
  Schedule schedule = baseline(trace);
  // Recomputation replays the forward op: its task runs the same op.
  std::optional<TaskId> where;
  for (TaskId t = 0; t < schedule.tasks.size() && !where; ++t) {
    if (schedule.tasks[t].op && trace.op(*schedule.tasks[t].op).host_sync) where = t;
  }
  ASSERT_TRUE(where);
  Task replayed = schedule.tasks[*where];
  replayed.kind = TaskKind::recompute;
  schedule.tasks.push_back(replayed);
  const Schedule before = schedule;
  apply_host_sync_ops(schedule, trace);
  std::size_t blocking = 0;
  for (TaskId t = 0; t < schedule.tasks.size(); ++t) {
    const Task& task = schedule.tasks[t];
    const bool syncs = task.op && trace.op(*task.op).host_sync;
    EXPECT_EQ(task.blocks_host, syncs || before.tasks[t].blocks_host) << task.name;
    blocking += syncs ? 1 : 0;
  }
  EXPECT_EQ(blocking, marked + 1);
  EXPECT_TRUE(schedule.tasks.back().blocks_host);
}

// BertAdam's loop: each parameter's op is 18 eager ops, each launched from Python and each its
// own kernel.
TEST(OptimizerLoop, EachParametersOpCostsItsOpsLaunchesOnTheHostAndTheGpu) {
  const traces::Trace trace = gpt2(zoo::OptimizerImpl::for_loop);
  const OpDispatch dispatch{11e-6, 5e-6, 3e-6};
  Schedule schedule = baseline(trace);
  assign_dispatch_costs(schedule, trace, dispatch);
  const Schedule before = schedule;
  const double launch = a100().gpu.launch_overhead;
  ASSERT_GT(launch, 0);
  apply_optimizer_loop(schedule, trace, 18, dispatch, launch);
  ASSERT_EQ(schedule.tasks.size(), before.tasks.size());
  std::size_t changed = 0;
  for (TaskId t = 0; t < schedule.tasks.size(); ++t) {
    const Task& task = schedule.tasks[t];
    const Task& old = before.tasks[t];
    if (is_optimizer_op(task, trace)) {
      ++changed;
      EXPECT_DOUBLE_EQ(task.host_seconds, 18 * 11e-6) << task.name;
      EXPECT_DOUBLE_EQ(task.seconds, old.seconds + 17 * launch) << task.name;
    } else {
      EXPECT_EQ(task.host_seconds, old.host_seconds) << task.name;
      EXPECT_EQ(task.seconds, old.seconds) << task.name;
    }
  }
  // One op per parameter: gpt2's weights, every one of them stepped.
  std::size_t weights = 0;
  for (const traces::Tensor& tensor : trace.tensors()) weights += tensor.role == traces::TensorRole::weight ? 1 : 0;
  EXPECT_EQ(changed, weights);

  Schedule untouched = before;
  apply_optimizer_loop(untouched, trace, 0, dispatch, launch);
  for (TaskId t = 0; t < untouched.tasks.size(); ++t) EXPECT_EQ(untouched.tasks[t].host_seconds, before.tasks[t].host_seconds);
}

// Under torch.compile an op that runs inside an earlier op's kernel costs the launching thread
// nothing; every other task keeps its phase's dispatch cost.
TEST(FrameworkTransforms, CompiledGroupsDispatchOnce) {
  const traces::Trace trace = gpt2(zoo::OptimizerImpl::foreach);
  const OpDispatch dispatch{11e-6, 5e-6, 3e-6};
  Schedule eager = baseline(trace);
  assign_dispatch_costs(eager, trace, dispatch);
  Schedule compiled = baseline(trace);
  assign_dispatch_costs(compiled, trace, dispatch, CompileScope{});
  const KernelFusion fusion = fuse_like_inductor(trace, CompileScope{});
  ASSERT_GT(fusion.groups, 0u);
  std::size_t free = 0;
  for (TaskId t = 0; t < compiled.tasks.size(); ++t) {
    const Task& task = compiled.tasks[t];
    if (task.op && !fusion.ops[*task.op].launches) {
      ++free;
      EXPECT_EQ(task.host_seconds, 0) << task.name;
    } else {
      EXPECT_EQ(task.host_seconds, eager.tasks[t].host_seconds) << task.name;
    }
  }
  EXPECT_GT(free, fusion.groups);  // at least one free member per group, views besides
}

}  // namespace
}  // namespace comptrain::models

// Megatron-LM's distributed-optimizer overlaps as ZeRO-1 over the data group
// (models/transforms/README.md, "Gradient accumulation" and "Overlapped parameter all-gather"):
// overlap_comm (--overlap-grad-reduce) reduce-scatters each bucket as soon as the last
// micro-step's backward pass has made its gradients, and only the optimizer waits;
// overlap_param_gather (--overlap-param-gather) all-gathers the updated parameters per bucket at
// the iteration's start instead of after the step, and the first forward op reading a bucket
// waits for its gather.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <stdexcept>
#include <vector>

#include "comptrain/models/data_parallel.hpp"
#include "comptrain/models/op_time.hpp"
#include "comptrain/models/pipeline_parallel.hpp"
#include "comptrain/models/pipeline_schedule.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/models/transform_schedule.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "common/must_apply.hpp"

namespace comptrain::models {
namespace {

traces::Trace gpt(std::int64_t layers) {
  zoo::ModelRequest request;
  request.model = "gpt2";
  request.layers = layers;
  request.precision = zoo::Precision::mixed;
  request.optimizer = zoo::Optimizer::adam;
  request.batch_size = 2;
  return zoo::build_model(request);
}

// One rank of ZeRO-1 over 4 ranks, in buckets of 5M elements (gpt2's blocks hold 7.1M each, its
// token embedding 38.6M: several buckets), after `micro_steps` of gradient accumulation, as
// transform_schedule orders them.
Schedule zero_one(const traces::Trace& trace, int micro_steps, bool overlap_comm, bool overlap_param_gather,
                  std::optional<Float8Scope> float8_parameter_gather = std::nullopt) {
  const OpTimeModel time_model(builtin_platform("a100-80gb"));
  Schedule schedule = test_support::must_apply(build_schedule(trace, time_model, StrategySpec{}));
  TransformSteps steps;
  steps.accumulation_steps = micro_steps;
  DataParallelSpec dp;
  dp.ranks = 4;
  dp.zero_stage = 1;
  dp.reduce_bucket_elements = 5'000'000;
  dp.overlap_comm = overlap_comm;
  dp.overlap_param_gather = overlap_param_gather;
  dp.float8_parameter_gather = std::move(float8_parameter_gather);
  steps.data_parallel = dp;
  return transform_schedule(std::move(schedule), trace, steps);
}

std::optional<traces::Phase> phase_of(const traces::Trace& trace, const Task& task) {
  if (!task.op) return std::nullopt;
  return trace.op(*task.op).phase;
}

std::vector<TaskId> collectives(const Schedule& s, CollectiveKind kind) {
  std::vector<TaskId> out;
  for (TaskId t = 0; t < s.tasks.size(); ++t) {
    if (s.tasks[t].kind == TaskKind::collective && s.tasks[t].collective == kind) out.push_back(t);
  }
  return out;
}

TaskId first_of_phase(const traces::Trace& trace, const Schedule& s, traces::Phase phase) {
  for (TaskId t = 0; t < s.tasks.size(); ++t) {
    if (phase_of(trace, s.tasks[t]) == phase) return t;
  }
  return s.tasks.size();
}

TaskId last_backward_compute(const traces::Trace& trace, const Schedule& s) {
  TaskId last = 0;
  for (TaskId t = 0; t < s.tasks.size(); ++t) {
    if (phase_of(trace, s.tasks[t]) == traces::Phase::backward && s.tasks[t].stream == Stream::compute) last = t;
  }
  return last;
}

// --overlap-grad-reduce: with 3 micro-steps, every bucket's reduce-scatter waits for a backward op
// of the last micro-step only, all but the last bucket's before the backward pass ends; no
// forward or backward task waits for one; the optimizer waits for the last. Without
// overlap_comm they all wait for the end of the backward pass.
TEST(DistributedOptimizerOverlap, OverlapCommReducesEachBucketAsTheLastMicroStepMakesIt) {
  const auto trace = gpt(4);
  const Schedule s = zero_one(trace, 3, true, false);
  ASSERT_NO_THROW(s.validate());
  const auto scatters = collectives(s, CollectiveKind::reduce_scatter);
  ASSERT_GE(scatters.size(), 4u);
  const TaskId last_backward = last_backward_compute(trace, s);
  std::size_t before_the_end = 0;
  std::set<TaskId> scatter_set(scatters.begin(), scatters.end());
  for (TaskId c : scatters) {
    const Task& task = s.tasks[c];
    EXPECT_EQ(task.stream, Stream::comm);
    ASSERT_EQ(task.after.size(), 1u);
    const Task& ready = s.tasks[task.after[0]];
    EXPECT_EQ(phase_of(trace, ready), traces::Phase::backward) << task.name;
    EXPECT_NE(ready.name.find("[micro-step 3]"), std::string::npos) << task.name << " waits for " << ready.name;
    if (task.after[0] < last_backward) ++before_the_end;
  }
  EXPECT_GE(before_the_end, scatters.size() - 1);
  for (const Task& task : s.tasks) {
    const bool waits = std::any_of(task.after.begin(), task.after.end(), [&](TaskId a) { return scatter_set.count(a) != 0; });
    if (!waits) continue;
    EXPECT_EQ(phase_of(trace, task), traces::Phase::optimizer) << task.name << " waits for a reduce-scatter";
  }
  const Task& first_optimizer = s.tasks[first_of_phase(trace, s, traces::Phase::optimizer)];
  EXPECT_NE(std::find(first_optimizer.after.begin(), first_optimizer.after.end(), scatters.back()), first_optimizer.after.end());

  const Schedule exposed = zero_one(trace, 3, false, false);
  const TaskId exposed_last = last_backward_compute(trace, exposed);
  for (TaskId c : collectives(exposed, CollectiveKind::reduce_scatter)) {
    ASSERT_EQ(exposed.tasks[c].after.size(), 1u);
    EXPECT_EQ(exposed.tasks[c].after[0], exposed_last) << exposed.tasks[c].name;
  }
}

// --overlap-param-gather: the same bytes all-gathered, in several gathers, all before the first
// forward op and none after the optimizer; each gather's parameters are first read by a forward
// op that waits for it, and no forward op reads one of them before; the peak is unchanged (the
// gathers write into the 16-bit parameters every rank keeps whole under ZeRO-1).
TEST(DistributedOptimizerOverlap, OverlapParamGatherGathersEachBucketBeforeItsFirstForwardOp) {
  const auto trace = gpt(4);
  const Schedule after_step = zero_one(trace, 2, true, false);
  const Schedule s = zero_one(trace, 2, true, true);
  ASSERT_NO_THROW(s.validate());
  const auto gathers = collectives(s, CollectiveKind::all_gather);
  const auto plain = collectives(after_step, CollectiveKind::all_gather);
  ASSERT_EQ(plain.size(), 1u);
  ASSERT_GE(gathers.size(), 4u);
  std::int64_t bytes = 0;
  const TaskId first_forward = first_of_phase(trace, s, traces::Phase::forward);
  const TaskId first_optimizer = first_of_phase(trace, s, traces::Phase::optimizer);
  EXPECT_GT(plain.front(), first_of_phase(trace, after_step, traces::Phase::optimizer));
  std::set<BufferId> gathered;
  std::vector<TaskId> readers;
  for (TaskId g : gathers) {
    const Task& gather = s.tasks[g];
    bytes += gather.bytes;
    EXPECT_EQ(gather.stream, Stream::comm);
    EXPECT_TRUE(gather.after.empty()) << gather.name;
    EXPECT_LT(g, first_forward) << gather.name;
    EXPECT_LT(g, first_optimizer) << gather.name;
    for (BufferId w : gather.uses) {
      EXPECT_EQ(s.buffers[w].role, MemoryRole::weight);
      EXPECT_TRUE(gathered.insert(w).second) << s.buffers[w].name << " gathered twice";
    }
    // The first forward op reading any of its parameters waits for it.
    std::optional<TaskId> reader;
    for (TaskId t = 0; t < s.tasks.size() && !reader; ++t) {
      const Task& task = s.tasks[t];
      if (phase_of(trace, task) != traces::Phase::forward) continue;
      if (std::any_of(gather.uses.begin(), gather.uses.end(), [&](BufferId w) { return std::count(task.uses.begin(), task.uses.end(), w) != 0; })) reader = t;
    }
    ASSERT_TRUE(reader) << gather.name;
    readers.push_back(*reader);
    const auto& waits = s.tasks[*reader].after;
    EXPECT_NE(std::find(waits.begin(), waits.end(), g), waits.end()) << s.tasks[*reader].name << " does not wait for " << gather.name;
  }
  EXPECT_EQ(bytes, after_step.tasks[plain.front()].bytes);
  // Gathers in forward order: each one's first reader comes after the previous one's.
  EXPECT_TRUE(std::is_sorted(readers.begin(), readers.end()));
  EXPECT_EQ(sequential_peak_bytes(s), sequential_peak_bytes(after_step));
}

// Under a pipeline (a 4-layer zoo GPT on P 2 under 1F1B with 4 micro-batches, ZeRO-1 over 4
// ranks, as the run layer does it: the pipeline rank's whole schedule through transform_schedule)
// each reduce-scatter waits for a backward op of the last micro-batch, all but the last before
// the rank's backward work ends; the parameter gathers come before the first forward op.
TEST(DistributedOptimizerOverlap, UnderAPipelineTheLastMicroBatchsBackwardLaunchesTheReduceScatters) {
  const OpTimeModel time_model(builtin_platform("a100-80gb"));
  const auto orders = pipeline_orders(PipelineSchedule::one_f_one_b, 2, 4);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    zoo::ModelRequest request;
    request.model = "gpt";
    request.batch_size = 1;
    request.layers = 4;
    request.hidden = 64;
    request.heads = 2;
    request.seq_len = 16;
    request.vocab = 128;
    request.precision = zoo::Precision::mixed;
    request.pipeline_stage = zoo::PipelineStageSpec{2 * r, 2, r == 0, r == 1};
    const std::vector<traces::Trace> chunk_traces{zoo::build_model(request)};
    std::vector<Schedule> chunks{test_support::must_apply(build_schedule(chunk_traces[0], time_model, StrategySpec{}))};
    PipelineStageSpec spec;
    spec.rank = r;
    spec.stages = 2;
    spec.order = orders[static_cast<std::size_t>(r)];
    PipelineRank rank = apply_pipeline_rank(std::move(chunks), chunk_traces, spec);
    TransformSteps steps;
    DataParallelSpec dp;
    dp.ranks = 4;
    dp.zero_stage = 1;
    dp.reduce_bucket_elements = 20'000;  // a layer holds 49,984 parameters: several buckets
    dp.overlap_comm = true;
    dp.overlap_param_gather = true;
    steps.data_parallel = dp;
    const Schedule s = transform_schedule(std::move(rank.schedule), rank.trace, steps);
    ASSERT_NO_THROW(s.validate());
    const TaskId last_backward = last_backward_compute(rank.trace, s);
    const std::string& last_name = s.tasks[last_backward].name;
    const auto tag_at = last_name.find("[micro-batch ");
    ASSERT_NE(tag_at, std::string::npos) << last_name;
    const std::string last_micro_batch = last_name.substr(tag_at, last_name.find(']', tag_at) - tag_at);
    const auto scatters = collectives(s, CollectiveKind::reduce_scatter);
    ASSERT_GE(scatters.size(), 3u);
    std::size_t before_the_end = 0;
    for (TaskId c : scatters) {
      ASSERT_EQ(s.tasks[c].after.size(), 1u);
      const Task& ready = s.tasks[s.tasks[c].after[0]];
      EXPECT_EQ(phase_of(rank.trace, ready), traces::Phase::backward);
      EXPECT_NE(ready.name.find(last_micro_batch), std::string::npos) << s.tasks[c].name << " waits for " << ready.name;
      if (s.tasks[c].after[0] < last_backward) ++before_the_end;
    }
    EXPECT_GE(before_the_end, scatters.size() - 1);
    const TaskId first_forward = first_of_phase(rank.trace, s, traces::Phase::forward);
    const auto gathers = collectives(s, CollectiveKind::all_gather);
    ASSERT_GE(gathers.size(), 2u);
    for (TaskId g : gathers) EXPECT_LT(g, first_forward) << s.tasks[g].name;
  }
}

// --fp8-param-gather: the weights the FP8 linears read (every matrix but the tied embedding's,
// which lm_head reads and the scope skips) are gathered at one byte an element, apart from the
// 16-bit rest, after the step or in buckets of their own before the forward pass; the 16-bit
// bytes gathered shrink by the FP8 weights' elements.
TEST(DistributedOptimizerOverlap, Fp8ParametersAreGatheredAtOneByteInBucketsOfTheirOwn) {
  const auto trace = gpt(4);
  Float8Scope scope;
  scope.recipe = Float8Recipe::delayed;
  scope.fp8_weights = true;
  scope.skip = {"lm_head"};
  std::set<traces::TensorIndex> fp8_weights;
  for (const auto& op : trace.ops()) {
    if (op.phase != traces::Phase::forward || !in_float8_scope(scope, op)) continue;
    for (const auto i : op.inputs) {
      if (trace.tensor(i).role == traces::TensorRole::weight && trace.tensor(i).shape.size() >= 2) fp8_weights.insert(i);
    }
  }
  ASSERT_EQ(fp8_weights.size(), 4u * 4u);  // c_attn, c_proj, c_fc and mlp.c_proj of each block
  std::int64_t fp8_elements = 0;
  for (const auto i : fp8_weights) fp8_elements += trace.tensor(i).elements();

  const Schedule plain = zero_one(trace, 1, true, false);
  const Schedule fp8 = zero_one(trace, 1, true, false, scope);
  ASSERT_NO_THROW(fp8.validate());
  const auto plain_gathers = collectives(plain, CollectiveKind::all_gather);
  const auto fp8_gathers = collectives(fp8, CollectiveKind::all_gather);
  ASSERT_EQ(plain_gathers.size(), 1u);
  ASSERT_EQ(fp8_gathers.size(), 2u);
  const Task& fp8_gather = fp8.tasks[fp8_gathers[0]];
  const Task& wide_gather = fp8.tasks[fp8_gathers[1]];
  EXPECT_NE(fp8_gather.name.find("FP8"), std::string::npos) << fp8_gather.name;
  EXPECT_EQ(fp8_gather.bytes, fp8_elements);
  EXPECT_EQ(wide_gather.bytes, plain.tasks[plain_gathers[0]].bytes - 2 * fp8_elements);

  // Overlapped: every bucket holds FP8 weights only or 16-bit ones only, at their sizes.
  const Schedule overlapped = zero_one(trace, 1, true, true, scope);
  ASSERT_NO_THROW(overlapped.validate());
  std::int64_t bytes = 0;
  for (const TaskId g : collectives(overlapped, CollectiveKind::all_gather)) {
    const Task& gather = overlapped.tasks[g];
    bytes += gather.bytes;
    const auto fp8_count = std::count_if(gather.uses.begin(), gather.uses.end(),
                                         [&](BufferId w) { return fp8_weights.contains(*overlapped.buffers[w].tensor); });
    EXPECT_TRUE(fp8_count == 0 || fp8_count == static_cast<std::ptrdiff_t>(gather.uses.size())) << gather.name;
  }
  EXPECT_EQ(bytes, fp8_gather.bytes + wide_gather.bytes);

  // Not with DDP, ZeRO-3 or FSDP, which gather no FP8 buffer.
  DataParallelSpec spec;
  spec.ranks = 4;
  spec.float8_parameter_gather = scope;
  EXPECT_THROW(check_data_parallel(spec), std::invalid_argument);
  spec.zero_stage = 1;
  EXPECT_NO_THROW(check_data_parallel(spec));
  spec.zero_stage = 3;
  EXPECT_THROW(check_data_parallel(spec), std::invalid_argument);
  EXPECT_FALSE(float8_parameter_gather_for(spec, scope));
  spec.zero_stage = 2;
  EXPECT_TRUE(float8_parameter_gather_for(spec, scope));
  scope.fp8_weights = false;
  EXPECT_FALSE(float8_parameter_gather_for(spec, scope));
}

// What overlap_param_gather needs: ZeRO stage 1 or 2 with the optimizer on the GPU; and ZeRO-2's
// per-micro-step accumulation would repeat the gathers, which is refused.
TEST(DistributedOptimizerOverlap, OverlapParamGatherNeedsStageOneOrTwoOnTheGpu) {
  DataParallelSpec spec;
  spec.ranks = 4;
  spec.overlap_param_gather = true;
  EXPECT_THROW(check_data_parallel(spec), std::invalid_argument);  // DDP
  spec.zero_stage = 3;
  EXPECT_THROW(check_data_parallel(spec), std::invalid_argument);
  spec.zero_stage = 1;
  spec.offload_optimizer = OptimizerOffloadSpec{};
  EXPECT_THROW(check_data_parallel(spec), std::invalid_argument);
  spec.offload_optimizer.reset();
  EXPECT_NO_THROW(check_data_parallel(spec));
  spec.zero_stage = 2;
  EXPECT_NO_THROW(check_data_parallel(spec));

  const auto trace = gpt(2);
  const OpTimeModel time_model(builtin_platform("a100-80gb"));
  TransformSteps steps;
  steps.accumulation_steps = 2;
  steps.data_parallel = spec;
  EXPECT_THROW(transform_schedule(test_support::must_apply(build_schedule(trace, time_model, StrategySpec{})), trace, steps), std::invalid_argument);
}

}  // namespace
}  // namespace comptrain::models

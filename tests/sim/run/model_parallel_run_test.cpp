// Model parallelism through the run layer: a tensor-parallel scenario's rank (the zoo's shard and
// its collectives as tasks over the tensor groups, data parallelism over its DP x CP groups), the
// global batch over the data-parallel ranks only, and place_collectives' mapping of groups.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "common/scenario_error.hpp"
#include "comptrain/models/transform_schedule.hpp"
#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/sim/metrics/communication_time.hpp"
#include "comptrain/sim/run/run.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::sim {
namespace {

using models::RankGroups;
using models::TaskKind;
using traces::ParallelGroup;

Scenario gpt_on(const std::string& parallelism) {
  return parse_scenario("model: {zoo: gpt, layers: 2, hidden: 512, heads: 8, seq_len: 256, vocab: 1024}\n"
                        "training: {batch_size: 2, precision: mixed, optimizer: adam}\nplatform: dgx-a100-superpod\nparallelism: " +
                            parallelism + "\n",
                        "s.yaml", test_support::kShippedScenarios);
}

TEST(ModelParallelRun, ATensorParallelRankRunsItsCollectivesOverItsTensorGroup) {
  const PreparedScenario prepared(gpt_on("{nodes: 2, gpus_per_node: 8, tensor: 4}"));
  EXPECT_EQ(prepared.data_parallel_ranks(), 4);  // 16 GPUs / TP 4
  const auto scheduled = schedule_run(prepared, prepared.scenario().strategy, 2);
  const models::Schedule& schedule = std::get<ScheduledRun>(scheduled).schedule;
  int tensor = 0, data = 0;
  for (const models::Task& task : schedule.tasks) {
    if (task.kind != TaskKind::collective) continue;
    if (task.over == ParallelGroup::tensor) {
      ++tensor;
      EXPECT_EQ(task.groups, (RankGroups{4, 1}));  // 4 consecutive ranks: within a node
      EXPECT_EQ(task.stream, models::Stream::compute);
    } else {
      ++data;
      EXPECT_EQ(task.over, ParallelGroup::data);
      EXPECT_EQ(task.groups, (RankGroups{4, 4}));  // the 4 ranks with the same tensor index, 4 apart
    }
  }
  // Per layer 2 forward and 2 backward all-reduces; the embedding's; the LM head's input gradient
  // (Megatron's parallel_lm_logits copies its input to the tensor-parallel region: an all-reduce in
  // backward); the vocabulary-parallel loss's 3 (tests/zoo/tensor_parallel_test.cpp).
  EXPECT_EQ(tensor, 2 * 4 + 1 + 1 + 3);
  EXPECT_GT(data, 0);  // DDP's buckets
}

TEST(ModelParallelRun, TheSimulatedRankIsTheShardAndItsCollectivesAreExposed) {
  const PreparedScenario tp(gpt_on("{gpus_per_node: 4, tensor: 4}"));
  const PreparedScenario one(gpt_on("{gpus_per_node: 1}"));
  const RunOutcome a = run_scenario(tp, tp.scenario().strategy, 2, Isolation::child_process);
  const RunOutcome b = run_scenario(one, one.scenario().strategy, 2, Isolation::child_process);
  const CompletedRun& sharded = std::get<CompletedRun>(a);
  const CompletedRun& whole = std::get<CompletedRun>(b);
  ASSERT_TRUE(sharded.result.fits() && whole.result.fits());
  EXPECT_LT(sharded.result.peak_bytes, whole.result.peak_bytes);
  const CommunicationTime c = communication_time(sharded.scheduled.schedule, sharded.result);
  const auto& group = c.by_group[static_cast<std::size_t>(ParallelGroup::tensor)];
  EXPECT_EQ(group.collectives, 2 * 4 + 1 + 1 + 3);
  EXPECT_GT(group.collective_seconds, 0);
  // On the compute stream: nothing hides them.
  EXPECT_DOUBLE_EQ(group.exposed_seconds, group.collective_seconds);
}

TEST(ModelParallelRun, PlaceCollectivesMapsGroupsWithinTheirLayoutGroup) {
  models::ParallelLayout layout;
  layout.tensor = 2;
  layout.context = 2;
  models::Schedule s;
  const auto add = [&](ParallelGroup over, RankGroups groups) {
    models::Task task;
    task.name = "c" + std::to_string(s.tasks.size());
    task.kind = TaskKind::collective;
    task.stream = models::Stream::comm;
    task.collective = models::CollectiveKind::all_reduce;
    task.over = over;
    task.groups = groups;
    s.tasks.push_back(task);
  };
  add(ParallelGroup::tensor, {});
  add(ParallelGroup::data, {});
  add(ParallelGroup::data, {2, 1});  // HSDP's shard groups within the data group
  add(ParallelGroup::data, {2, 2});  // and its replicate groups
  models::place_collectives(s, layout, 16);  // T 2 x C 2 x D 4
  EXPECT_EQ(s.tasks[0].groups, (RankGroups{2, 1}));
  EXPECT_EQ(s.tasks[1].groups, (RankGroups{8, 2}));  // D x C = 8 ranks, T apart
  EXPECT_EQ(s.tasks[2].groups, (RankGroups{2, 2}));
  EXPECT_EQ(s.tasks[3].groups, (RankGroups{2, 4}));
  models::Schedule too_wide = s;
  too_wide.tasks[0].groups = {4, 1};
  too_wide.tasks[0].over = ParallelGroup::tensor;
  EXPECT_THROW(models::place_collectives(too_wide, layout, 16), std::invalid_argument);
}

TEST(ModelParallelRun, TheGlobalBatchCountsTheDataParallelRanksOnly) {
  const PreparedScenario prepared(gpt_on("{nodes: 2, gpus_per_node: 8, tensor: 8}"));
  EXPECT_EQ(prepared.data_parallel_ranks(), 2);
  const PreparedScenario plain(gpt_on("{nodes: 2, gpus_per_node: 8}"));
  EXPECT_EQ(plain.data_parallel_ranks(), 16);
}

}  // namespace
}  // namespace comptrain::sim

namespace comptrain::sim {
namespace {

// A 4-layer gpt on 2 pipeline stages of 2 GPUs' tensor parallelism each, 4 micro-batches of 1.
Scenario pipelined(const std::string& schedule, int micro_batches) {
  return parse_scenario("model: {zoo: gpt, layers: 4, hidden: 512, heads: 8, seq_len: 256, vocab: 1024}\n"
                        "training: {batch_size: 1, precision: mixed, optimizer: adam, gradient_accumulation_steps: " +
                            std::to_string(micro_batches) +
                            "}\nplatform: dgx-a100-superpod\n"
                            "parallelism: {gpus_per_node: 4, tensor: 2, pipeline: 2, pipeline_schedule: " +
                            schedule + "}\n",
                        "s.yaml", test_support::kShippedScenarios);
}

TEST(PipelineRun, EachStageRunsItsLayersAndTheIterationHoldsTheBubble) {
  const PreparedScenario prepared(pipelined("1f1b", 4));
  const PipelineOutcome outcome = run_pipeline(prepared, prepared.scenario().strategy, 1, Isolation::child_process);
  const PipelineRun& run = std::get<PipelineRun>(outcome);
  ASSERT_EQ(run.stages.size(), 2u);
  ASSERT_TRUE(run.result.fits());
  EXPECT_EQ(run.stages[0].trace.metadata().at("pipeline_layers"), "2");
  EXPECT_EQ(run.stages[1].trace.metadata().at("pipeline_first_layer"), "2");
  // Every micro-batch crosses the boundary once each way: 4 sends on each stage.
  for (const ScheduledRun& stage : run.stages) {
    int sends = 0, recvs = 0;
    for (const models::Task& task : stage.schedule.tasks) {
      sends += task.kind == TaskKind::send;
      recvs += task.kind == TaskKind::recv;
    }
    EXPECT_EQ(sends, 4);
    EXPECT_EQ(recvs, 4);
  }
  // The iteration is at least the busiest stage's compute and at most every stage's one after the other.
  double busiest = 0, all = 0;
  for (std::size_t p = 0; p < run.stages.size(); ++p) {
    double busy = 0;
    for (models::TaskId t = 0; t < run.stages[p].schedule.tasks.size(); ++t) {
      if (run.stages[p].schedule.tasks[t].stream == models::Stream::compute) busy += run.result.stages[p].tasks[t].end - run.result.stages[p].tasks[t].start;
    }
    busiest = std::max(busiest, busy);
    all += busy;
  }
  EXPECT_GT(run.result.iteration_seconds, busiest);
  EXPECT_LT(run.result.iteration_seconds, all + 0.05);
  // 1F1B holds at most 2 micro-batches on stage 0, GPipe all 4: its first stage peaks higher.
  const PreparedScenario gpipe(pipelined("gpipe", 4));
  const PipelineRun g = std::get<PipelineRun>(run_pipeline(gpipe, gpipe.scenario().strategy, 1, Isolation::child_process));
  EXPECT_GT(g.result.stages[0].peak_bytes, run.result.stages[0].peak_bytes);
}

TEST(PipelineRun, OtherCommandsRefusePipelineLayouts) {
  const PreparedScenario prepared(pipelined("1f1b", 2));
  try {
    schedule_run(prepared, prepared.scenario().strategy, 1);
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("parallelism.pipeline: pipeline stages are replayed for one scenario by `simulate`, `plan` and `validate`; sweeps do not take them"));
  }
}

}  // namespace
}  // namespace comptrain::sim

namespace comptrain::sim {
namespace {

// Context parallelism through the run layer: a 2-layer gpt with flash attention over 8192 tokens,
// one rank of C context-parallel ranks (D = GPUs / (T x C)).
Scenario context_parallel_gpt(const std::string& parallelism) {
  return parse_scenario("model: {zoo: gpt, layers: 2, hidden: 512, heads: 8, seq_len: 8192, vocab: 1024, attention: flash}\n"
                        "training: {batch_size: 1, precision: mixed, optimizer: adam}\nplatform: dgx-a100-superpod\nparallelism: " +
                            parallelism + "\n",
                        "s.yaml", test_support::kShippedScenarios);
}

// The ring's collectives run over the context groups ({C, T}: C ranks T apart) on the context
// stream, the all-gather's on the compute stream; the gradients reduce over D x C ranks
// (Megatron's DP x CP group: distributed_data_parallel.py:148-149, shared/reference/parallelism.md §3).
TEST(ContextParallelRun, CollectivesRunOverTheContextAndDataContextGroups) {
  for (const bool all_gather : {false, true}) {
    SCOPED_TRACE(all_gather ? "all_gather" : "ring");
    const PreparedScenario prepared(context_parallel_gpt(std::string("{gpus_per_node: 8, tensor: 2, context: 2") +
                                                         (all_gather ? ", context_parallel_comm: all_gather}" : "}")));
    EXPECT_EQ(prepared.data_parallel_ranks(), 2);  // 8 / (T 2 x C 2): the batch's ranks
    const auto scheduled = schedule_run(prepared, prepared.scenario().strategy, 1);
    const models::Schedule& schedule = std::get<ScheduledRun>(scheduled).schedule;
    int context = 0, data = 0;
    for (const models::Task& task : schedule.tasks) {
      if (task.kind != TaskKind::collective) continue;
      if (task.over == ParallelGroup::context) {
        ++context;
        EXPECT_EQ(task.groups, (RankGroups{2, 2}));
        EXPECT_EQ(task.stream, all_gather ? models::Stream::compute : models::Stream::context);
      } else if (task.over == ParallelGroup::data) {
        ++data;
        EXPECT_EQ(task.groups, (RankGroups{4, 2}));  // D x C = 4 ranks with the same tensor index, T apart
      }
    }
    // Per layer: ring forward and backward (2), or gather, gather again and reduce-scatter (3).
    EXPECT_EQ(context, all_gather ? 2 * 3 : 2 * 2);
    EXPECT_GT(data, 0);
  }
}

// One rank of C = 4 against the whole sequence on one GPU. Its FLOPs are exactly 1/4 of the
// whole's (tests/zoo/context_parallel_test.cpp) and the op-time model gives a smaller kernel no
// better rate, so its iteration takes at least a quarter of the whole's. On top come the K,V
// exchange (per layer forward 3 blocks of 2 x 2048 x 512 x 2 B = 4 MiB over NVLink, backward
// twice that, plus the all-gather variant's reduce-scatter) and the gradients' all-reduce over the
// 4 ranks (13 MiB): tenths of a millisecond against the whole's ~7 ms, so under 0.6 of it. Its
// activations are a quarter: the peak is lower. The ring runs beside the attention, so part of it
// is hidden and the ring rank is faster than the all-gather rank, whose exchange is all exposed.
TEST(ContextParallelRun, ARankOfFourTakesAQuarterToSixTenthsOfTheWholeAndHidesPartOfItsRing) {
  const PreparedScenario whole(context_parallel_gpt("{gpus_per_node: 1}"));
  const PreparedScenario ring(context_parallel_gpt("{gpus_per_node: 4, context: 4}"));
  const PreparedScenario gather(context_parallel_gpt("{gpus_per_node: 4, context: 4, context_parallel_comm: all_gather}"));
  const RunOutcome w = run_scenario(whole, whole.scenario().strategy, 1, Isolation::child_process);
  const RunOutcome r = run_scenario(ring, ring.scenario().strategy, 1, Isolation::child_process);
  const RunOutcome g = run_scenario(gather, gather.scenario().strategy, 1, Isolation::child_process);
  const CompletedRun& one = std::get<CompletedRun>(w);
  const CompletedRun& rank = std::get<CompletedRun>(r);
  const CompletedRun& gathered = std::get<CompletedRun>(g);
  ASSERT_TRUE(one.result.fits() && rank.result.fits() && gathered.result.fits());
  const double t1 = one.result.iteration_seconds;
  for (const CompletedRun* run : {&rank, &gathered}) {
    EXPECT_GE(run->result.iteration_seconds, 0.25 * t1);
    EXPECT_LT(run->result.iteration_seconds, 0.6 * t1);
    EXPECT_LT(run->result.peak_bytes, one.result.peak_bytes);
  }
  const auto context = [](const CompletedRun& run) {
    return communication_time(run.scheduled.schedule, run.result).by_group[static_cast<std::size_t>(ParallelGroup::context)];
  };
  const auto ring_time = context(rank);
  EXPECT_EQ(ring_time.collectives, 2 * 2);
  EXPECT_GT(ring_time.collective_seconds, 0);
  EXPECT_LT(ring_time.exposed_seconds, ring_time.collective_seconds);
  const auto gather_time = context(gathered);
  EXPECT_EQ(gather_time.collectives, 2 * 3);
  EXPECT_DOUBLE_EQ(gather_time.exposed_seconds, gather_time.collective_seconds);
  EXPECT_LT(rank.result.iteration_seconds, gathered.result.iteration_seconds);
}

}  // namespace
}  // namespace comptrain::sim

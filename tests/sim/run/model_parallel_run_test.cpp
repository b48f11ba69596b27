// Model parallelism through the run layer: a tensor-parallel scenario's rank (the zoo's shard and
// its collectives as tasks over the tensor groups, data parallelism over its DP x CP groups), the
// global batch over the data-parallel ranks only, and place_collectives' mapping of groups.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/scenario_error.hpp"
#include "comptrain/models/pipeline_schedule.hpp"
#include "comptrain/models/transform_schedule.hpp"
#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/sim/metrics/communication_time.hpp"
#include "comptrain/sim/report/pipeline_report.hpp"
#include "comptrain/sim/report/simulate_report.hpp"
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
  int tensor = 0, data = 0, overlapped = 0;
  for (const models::Task& task : schedule.tasks) {
    if (task.kind != TaskKind::collective) continue;
    if (task.over == ParallelGroup::tensor) {
      ++tensor;
      EXPECT_EQ(task.groups, (RankGroups{4, 1}));  // 4 consecutive ranks: within a node
      // The input gradients' all-reduces beside the weight-gradient GEMMs on the tensor stream
      // (traces/zoo/README.md); the forward ones on the compute stream.
      if (task.stream == models::Stream::tensor) {
        ++overlapped;
      } else {
        EXPECT_EQ(task.stream, models::Stream::compute);
      }
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
  EXPECT_EQ(overlapped, 2 * 2 + 1);  // per layer QKV's and FC1's; the LM head's
  EXPECT_GT(data, 0);  // DDP's buckets
}

TEST(ModelParallelRun, TheSimulatedRankIsTheShardAndItsForwardCollectivesAreExposed) {
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
  // The forward ones on the compute stream: nothing hides them. The backward input gradients'
  // all-reduces run beside the weight-gradient GEMMs: some of their time is hidden.
  EXPECT_LT(group.exposed_seconds, group.collective_seconds);
  double forward_seconds = 0;
  for (models::TaskId t = 0; t < sharded.scheduled.schedule.tasks.size(); ++t) {
    const models::Task& task = sharded.scheduled.schedule.tasks[t];
    if (task.kind == TaskKind::collective && task.over == ParallelGroup::tensor && task.stream == models::Stream::compute) {
      forward_seconds += sharded.result.tasks[t].end - sharded.result.tasks[t].start;
    }
  }
  EXPECT_GT(forward_seconds, 0);
  EXPECT_GE(group.exposed_seconds, forward_seconds * (1 - 1e-9));
}

// parallelism.tp_comm_overlap (Megatron-LM's --tp-comm-overlap, Transformer Engine's Userbuffers):
// the forward all-gathers beside their GEMMs, the forward reduce-scatters pipelined with theirs, the
// backward all-gathers beside the row-parallel linears' backward. The same collectives (the split
// ones in two parts, the second with a latency of its own), less of them exposed, a shorter
// iteration. Without sequence parallelism, or with the tensor-parallel group across
// nodes, it is an input error at its key.
TEST(ModelParallelRun, UserbuffersOverlapHidesForwardTensorParallelCollectives) {
  // GEMMs long enough to hide a collective behind (hidden 4096, 2048 tokens): at gpt_on's sizes
  // every collective is its latency, and the split reduce-scatters' second latency costs more
  // than the overlap saves.
  const auto large = [](const std::string& parallelism) {
    return parse_scenario("model: {zoo: gpt, layers: 2, hidden: 4096, heads: 32, seq_len: 2048, vocab: 1024}\n"
                          "training: {batch_size: 1, precision: mixed, optimizer: adam}\nplatform: dgx-a100-superpod\nparallelism: " +
                              parallelism + "\n",
                          "s.yaml", test_support::kShippedScenarios);
  };
  const PreparedScenario plain(large("{gpus_per_node: 4, tensor: 4, sequence_parallel: true}"));
  const PreparedScenario overlapped(large("{gpus_per_node: 4, tensor: 4, sequence_parallel: true, tp_comm_overlap: true}"));
  const RunOutcome a = run_scenario(plain, plain.scenario().strategy, 2, Isolation::child_process);
  const RunOutcome b = run_scenario(overlapped, overlapped.scenario().strategy, 2, Isolation::child_process);
  const CompletedRun& without = std::get<CompletedRun>(a);
  const CompletedRun& with = std::get<CompletedRun>(b);
  ASSERT_TRUE(without.result.fits() && with.result.fits());
  const auto tensor_group = [](const CompletedRun& run) {
    return communication_time(run.scheduled.schedule, run.result).by_group[static_cast<std::size_t>(ParallelGroup::tensor)];
  };
  const auto x = tensor_group(without);
  const auto y = tensor_group(with);
  // 2 layers x 2 row-parallel reduce-scatters, each now two tasks, the second with a latency of its own.
  EXPECT_EQ(y.collectives, x.collectives + 2 * 2);
  EXPECT_GE(y.collective_seconds, x.collective_seconds);
  EXPECT_LT(y.collective_seconds, 1.05 * x.collective_seconds);
  EXPECT_LT(y.exposed_seconds, x.exposed_seconds);
  EXPECT_LT(with.result.iteration_seconds, without.result.iteration_seconds);

  try {
    const PreparedScenario no_sp(gpt_on("{gpus_per_node: 4, tensor: 4, tp_comm_overlap: true}"));
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("parallelism.tp_comm_overlap: tp_comm_overlap needs sequence parallelism"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("s.yaml:4:"));
  }
  try {
    const PreparedScenario across(gpt_on("{nodes: 2, gpus_per_node: 2, tensor: 4, sequence_parallel: true, tp_comm_overlap: true}"));
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("parallelism.tp_comm_overlap: Transformer Engine's Userbuffers overlap needs the 4 tensor-parallel ranks within one node of 2 GPUs"));
  }
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

// Compressed all-reduces by recursive doubling under tensor parallelism: the rounds pair the data
// group's ranks (4 of them, 4 apart) 4 and 8 ranks apart on the run's ranks, and the report's
// error bound counts the data group's 4 ranks, not the 16 GPUs.
TEST(ModelParallelRun, RecursiveDoublingPairsTheDataGroupsRanks) {
  const PreparedScenario prepared(gpt_on("{nodes: 2, gpus_per_node: 8, tensor: 4, compression: {ratio: 4, compress_bandwidth: 200 GB/s, "
                                         "decompress_bandwidth: 300 GB/s, error_bound: 1e-3, algorithm: recursive_doubling}}"));
  const auto scheduled = schedule_run(prepared, prepared.scenario().strategy, 2);
  std::set<int> strides;
  for (const models::Task& task : std::get<ScheduledRun>(scheduled).schedule.tasks) {
    if (task.kind != TaskKind::collective || task.over != ParallelGroup::data) continue;
    EXPECT_EQ(task.collective, models::CollectiveKind::all_gather) << task.name;
    EXPECT_EQ(task.groups.size, 2) << task.name;
    strides.insert(task.groups.stride);
  }
  EXPECT_EQ(strides, (std::set<int>{4, 8}));
  const RunOutcome outcome = run_scenario(prepared, prepared.scenario().strategy, 2, Isolation::child_process);
  EXPECT_THAT(report(prepared, prepared.scenario().strategy, 2, outcome, false),
              ::testing::HasSubstr("worst-case error after the gradient all-reduce (recursive doubling) over 4 ranks: 0.004002 x R (3 compressions"));
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
  // Every micro-batch crosses the boundary once each way: 4 sends on each stage. Then, once, the
  // tied word embedding's gradient all-reduce between the first and the last stage (Megatron's
  // _allreduce_word_embedding_grads) as an exchange of micro-batch 4 (one past the last): each
  // end sends its V'/t x h 16-bit gradient (1024 / 2 rows of 512) and receives the other's,
  // after its last backward task and before its optimizer step.
  for (std::size_t p = 0; p < run.stages.size(); ++p) {
    SCOPED_TRACE("stage " + std::to_string(p));
    const ScheduledRun& stage = run.stages[p];
    int sends = 0, recvs = 0;
    std::vector<models::TaskId> step_transfers;
    for (models::TaskId t = 0; t < stage.schedule.tasks.size(); ++t) {
      const models::Task& task = stage.schedule.tasks[t];
      if (task.kind != TaskKind::send && task.kind != TaskKind::recv) continue;
      if (task.message->micro_batch == 4) {
        step_transfers.push_back(t);
        EXPECT_EQ(task.message->peer, 1 - static_cast<int>(p));
        EXPECT_TRUE(task.message->gradient);
        EXPECT_EQ(task.bytes, 512 * 512 * 2);
        EXPECT_EQ(task.message->chunk, 0);
        continue;
      }
      sends += task.kind == TaskKind::send;
      recvs += task.kind == TaskKind::recv;
    }
    EXPECT_EQ(sends, 4);
    EXPECT_EQ(recvs, 4);
    ASSERT_EQ(step_transfers.size(), 2U);
    EXPECT_EQ(stage.schedule.tasks[step_transfers[0]].kind, TaskKind::send);
    EXPECT_EQ(stage.schedule.tasks[step_transfers[1]].kind, TaskKind::recv);
    EXPECT_EQ(step_transfers[1], step_transfers[0] + 1);  // one batch_isend_irecv: no deadlock
    for (models::TaskId t = 0; t < stage.schedule.tasks.size(); ++t) {
      const models::Task& task = stage.schedule.tasks[t];
      if (!task.op) continue;
      const traces::Phase phase = stage.trace.op(*task.op).phase;
      if (phase == traces::Phase::backward) {
        EXPECT_LT(t, step_transfers[0]) << task.name;
      }
      if (phase == traces::Phase::optimizer && task.kind == TaskKind::op) {
        EXPECT_GT(t, step_transfers[1]) << task.name;
      }
    }
  }
  // Untied (--untie-embeddings-and-output-weights), nothing is exchanged.
  Scenario untied = pipelined("1f1b", 4);
  untied.zoo_model->tie_embeddings = false;
  const PreparedScenario untied_prepared(untied);
  const PipelineRun u = std::get<PipelineRun>(run_pipeline(untied_prepared, untied_prepared.scenario().strategy, 1, Isolation::child_process));
  for (const ScheduledRun& stage : u.stages) {
    EXPECT_TRUE(std::none_of(stage.schedule.tasks.begin(), stage.schedule.tasks.end(),
                             [](const models::Task& task) { return task.message && task.message->micro_batch == 4; }));
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

// Chen et al.'s recomputation (the `recompute` shorthand: sqrt(n) checkpoints chosen among every
// saved activation) on a pipeline: a stage's received input came from the previous stage, so it
// is kept rather than recomputed (replaying its recv would receive it again), and the stages run.
TEST(PipelineRun, RecomputationKeepsTheReceivedInput) {
  Scenario scenario = pipelined("1f1b", 4);
  scenario.strategy = models::StrategySpec{};
  scenario.strategy.name = "recompute";
  models::StrategyRule rule;
  rule.action = models::RecomputeAction{};
  scenario.strategy.rules.push_back(rule);
  const PreparedScenario prepared(scenario);
  const PipelineOutcome outcome = run_pipeline(prepared, prepared.scenario().strategy, 1, Isolation::child_process);
  ASSERT_TRUE(std::holds_alternative<PipelineRun>(outcome));
  const PipelineRun& run = std::get<PipelineRun>(outcome);
  ASSERT_TRUE(run.result.fits());
  int recomputed = 0;
  for (const models::Task& task : run.stages[1].schedule.tasks) {
    if (task.kind != TaskKind::recompute) continue;
    ++recomputed;
    ASSERT_TRUE(task.op.has_value());
    const traces::Op& op = run.stages[1].trace.ops()[*task.op];
    EXPECT_FALSE(op.communication && op.communication->kind == traces::CommunicationKind::recv) << op.name;
  }
  EXPECT_GT(recomputed, 0);  // the rest of the stage is recomputed as the strategy says
}

// An 8-layer gpt on P 2 stages of T 2, M 4 micro-batches of 1: 1f1b (V 1), or the interleaved
// schedule over V 2 chunks of 2 layers per rank. `gpus` 8 gives D 2 data-parallel ranks.
Scenario interleaved_gpt(int virtual_stages, int gpus = 4) {
  return parse_scenario("model: {zoo: gpt, layers: 8, hidden: 1024, heads: 16, seq_len: 1024, vocab: 1024}\n"
                        "training: {batch_size: 1, precision: mixed, optimizer: adam, gradient_accumulation_steps: 4}\n"
                        "platform: dgx-a100-superpod\n"
                        "parallelism: {gpus_per_node: " + std::to_string(gpus) + ", tensor: 2, pipeline: 2, virtual_stages: " +
                            std::to_string(virtual_stages) + "}\n",
                        "s.yaml", test_support::kShippedScenarios);
}

PipelineRun run_interleaved(int virtual_stages, int gpus = 4) {
  const PreparedScenario prepared(interleaved_gpt(virtual_stages, gpus));
  EXPECT_EQ(prepared.scenario().parallelism->layout.schedule,
            virtual_stages > 1 ? models::PipelineSchedule::interleaved : models::PipelineSchedule::one_f_one_b);
  return std::get<PipelineRun>(run_pipeline(prepared, prepared.scenario().strategy, 1, Isolation::child_process));
}

// The stage's idle share of the iteration, as the pipeline report counts it: the iteration less
// the time its compute stream ran anything.
double idle_share(const PipelineRun& run, std::size_t p) {
  double busy = 0;
  for (models::TaskId t = 0; t < run.stages[p].schedule.tasks.size(); ++t) {
    if (run.stages[p].schedule.tasks[t].stream == models::Stream::compute) busy += run.result.stages[p].tasks[t].end - run.result.stages[p].tasks[t].start;
  }
  return 1 - busy / run.result.iteration_seconds;
}

// Megatron's interleaved schedule: rank r's chunk k runs virtual stage k x P + r, the first
// virtual stage with the embedding, the last with the head; its bubble is smaller than 1F1B's on
// the same layers (ideal (P-1)/(V M + P-1) = 1/9 against (P-1)/(M + P-1) = 1/5).
TEST(PipelineRun, InterleavedChunksReplayWithASmallerBubble) {
  const PipelineRun plain = run_interleaved(1);
  const PipelineRun interleaved = run_interleaved(2);
  ASSERT_TRUE(plain.result.fits() && interleaved.result.fits());
  EXPECT_EQ(plain.chunk_layers, (std::vector<std::vector<LayerRange>>{{{0, 4}}, {{4, 4}}}));
  EXPECT_EQ(interleaved.chunk_layers, (std::vector<std::vector<LayerRange>>{{{0, 2}, {4, 2}}, {{2, 2}, {6, 2}}}));
  const traces::Trace& rank0 = interleaved.stages[0].trace;
  EXPECT_EQ(rank0.metadata().at("pipeline_first_layer"), "0,4");
  EXPECT_EQ(rank0.metadata().at("pipeline_first"), "true,false");  // the embedding on chunk 0 of rank 0 only
  EXPECT_EQ(interleaved.stages[1].trace.metadata().at("pipeline_last"), "false,true");  // the head on chunk 1 of rank 1
  const auto has_op = [](const traces::Trace& t, const std::string& part) {
    return std::any_of(t.ops().begin(), t.ops().end(), [&](const traces::Op& op) { return op.name.find(part) != std::string::npos; });
  };
  EXPECT_TRUE(has_op(rank0, "transformer.h.5."));
  EXPECT_TRUE(has_op(rank0, "transformer.h.0."));
  EXPECT_FALSE(has_op(rank0, "transformer.h.2."));
  for (std::size_t p = 0; p < 2; ++p) {
    SCOPED_TRACE("stage " + std::to_string(p));
    EXPECT_GT(idle_share(plain, p), 0.05);
    EXPECT_LT(idle_share(interleaved, p), idle_share(plain, p));
  }
  // The same work in less time: both run 8 layers x 4 micro-batches over 2 ranks.
  EXPECT_LT(interleaved.result.iteration_seconds, plain.result.iteration_seconds);
}

// The pipeline report's layers column and JSON give each stage's chunks: rank r holds layers
// 2r-2r+1 (virtual stage r) and 2r+4-2r+5 (virtual stage r + 2).
TEST(PipelineRun, TheReportGivesEachStagesChunkLayers) {
  const PreparedScenario prepared(interleaved_gpt(2));
  const PipelineOutcome outcome = run_pipeline(prepared, prepared.scenario().strategy, 1, Isolation::child_process);
  const std::string text = pipeline_report(prepared, prepared.scenario().strategy, 1, outcome, false);
  EXPECT_THAT(text, testing::HasSubstr("PP 2 (interleaved, 2 chunks per stage, 4 micro-batches, ideal bubble 11.1%)"));
  EXPECT_THAT(text, testing::HasSubstr("      0      0-1,4-5  "));
  EXPECT_THAT(text, testing::HasSubstr("      1      2-3,6-7  "));
  const std::string json = pipeline_report(prepared, prepared.scenario().strategy, 1, outcome, true);
  EXPECT_THAT(json, testing::HasSubstr("\"virtual_stages\": 2"));
  EXPECT_THAT(json, testing::HasSubstr("\"first_layer\": 2,\n      \"layers\": 4,\n      \"chunks\": [\n        {\n          \"first_layer\": 2,\n          \"layers\": 2\n        },\n        {\n          \"first_layer\": 6,\n          \"layers\": 2\n        }\n      ]"));
  // Without chunks, one range per stage, as before.
  const PreparedScenario plain(interleaved_gpt(1));
  const std::string plain_text = pipeline_report(plain, plain.scenario().strategy, 1, run_pipeline(plain, plain.scenario().strategy, 1, Isolation::child_process), false);
  EXPECT_THAT(plain_text, testing::HasSubstr("      1          4-7  "));
}

// The layout search's memory bound counts every chunk of the first rank: with V 2 it holds layers
// 0-1 and 4-5 and the embedding, the same parameters as layers 0-3 and the embedding with V 1.
TEST(PipelineRun, TheResidentStateBoundCountsEveryChunkOfTheFirstRank) {
  const PreparedScenario interleaved(interleaved_gpt(2));
  const PreparedScenario plain(interleaved_gpt(1));
  EXPECT_EQ(resident_state_bytes(interleaved), resident_state_bytes(plain));
  EXPECT_GT(resident_state_bytes(plain), 0);
}

// Each send is one (micro-batch, chunk)'s boundary: per rank 2 x M x V of them, less M where a
// chunk is an end of the pipeline (no activation after the last virtual stage, no gradient before
// the first). P 2: rank 0's chunk 0 is virtual stage 0, rank 1's chunk 1 virtual stage 3.
TEST(PipelineRun, EachRankSendsOnceForEveryChunkBoundaryOfEveryMicroBatch) {
  constexpr int kMicroBatches = 4;
  constexpr int kChunks = 2;
  const PipelineRun run = run_interleaved(kChunks);
  for (std::size_t p = 0; p < run.stages.size(); ++p) {
    int sends = 0, recvs = 0, gradient_sends = 0;
    for (const models::Task& task : run.stages[p].schedule.tasks) {
      sends += task.kind == TaskKind::send;
      recvs += task.kind == TaskKind::recv;
      gradient_sends += task.kind == TaskKind::send && task.message->gradient;
    }
    // + 1 each way: the tied embedding's gradient exchange between rank 0's chunk 0 and rank 1's
    // chunk 1, once per iteration.
    EXPECT_EQ(sends, 2 * kMicroBatches * kChunks - kMicroBatches + 1) << "stage " << p;
    EXPECT_EQ(recvs, 2 * kMicroBatches * kChunks - kMicroBatches + 1) << "stage " << p;
    // Rank 0 sends gradients from chunk 1 only (stage 2), rank 1 from both (stages 1 and 3).
    EXPECT_EQ(gradient_sends, (p == 0 ? kMicroBatches : 2 * kMicroBatches) + 1) << "stage " << p;
    for (const models::Task& task : run.stages[p].schedule.tasks) {
      if (task.message && task.message->micro_batch == kMicroBatches) {
        EXPECT_EQ(task.message->peer, 1 - static_cast<int>(p));
        // A send names its own chunk, a recv its peer's: rank 0's chunk 0, rank 1's chunk 1.
        EXPECT_EQ(task.message->chunk, (task.kind == TaskKind::send) == (p == 0) ? 0 : 1) << task.name;
      }
    }
  }
}

// The interleaved warm-up holds more micro-batch-chunks at once than 1F1B holds micro-batches:
// rank r runs 2(P-r-1) + (V-1)P forwards before its first backward (schedules.py, get_pp_rank_microbatches).
// At each rank's peak the live activations are those of max_in_flight (micro-batch, chunk) pairs.
TEST(PipelineRun, TheInterleavedPeakHoldsTheWarmUpsMicroBatchChunks) {
  const PipelineRun plain = run_interleaved(1);
  const PipelineRun interleaved = run_interleaved(2);
  ASSERT_TRUE(plain.result.fits() && interleaved.result.fits());
  const auto orders = models::pipeline_orders(models::PipelineSchedule::interleaved, 2, 4, 2);
  const auto plain_orders = models::pipeline_orders(models::PipelineSchedule::one_f_one_b, 2, 4, 1);
  // The (micro-batch[, chunk]) copies whose saved activations are live at the stage's peak.
  const auto live_copies = [](const PipelineRun& run, std::size_t p) {
    std::set<std::string> copies;
    for (const models::BufferId b : run.result.stages[p].live_at_peak) {
      const models::Buffer& buffer = run.stages[p].schedule.buffers[b];
      const auto open = buffer.name.rfind("(micro-batch ");
      if (buffer.role == models::MemoryRole::activation && open != std::string::npos) copies.insert(buffer.name.substr(open));
    }
    return copies.size();
  };
  for (std::size_t p = 0; p < 2; ++p) {
    SCOPED_TRACE("stage " + std::to_string(p));
    const int in_flight = models::max_in_flight(orders[p]);
    EXPECT_EQ(in_flight, 2 * (2 - static_cast<int>(p) - 1) + 2 + 1);  // the warm-up's forwards and the steady state's one more
    EXPECT_EQ(live_copies(interleaved, p), static_cast<std::size_t>(in_flight));
    EXPECT_EQ(live_copies(plain, p), static_cast<std::size_t>(models::max_in_flight(plain_orders[p])));
  }
  // Rank 0 holds 5 half-stage chunks against 1F1B's 2 whole stages: its peak is higher, on the same weights.
  EXPECT_GT(interleaved.result.stages[0].peak_bytes, plain.result.stages[0].peak_bytes);
}

// Data parallelism over the rank's chunks (D 2): every chunk's gradients are all-reduced once,
// after the last backward op that writes them (its chunk's last backward).
TEST(PipelineRun, EachChunksGradientsAreReducedOnceAfterItsLastBackward) {
  const PipelineRun run = run_interleaved(2, 8);
  ASSERT_TRUE(run.result.fits());
  for (std::size_t p = 0; p < run.stages.size(); ++p) {
    SCOPED_TRACE("stage " + std::to_string(p));
    const models::Schedule& s = run.stages[p].schedule;
    const traces::Trace& trace = run.stages[p].trace;
    std::set<std::string> chunks_reduced;
    int gradients = 0;
    for (models::BufferId g = 0; g < s.buffers.size(); ++g) {
      if (s.buffers[g].role != models::MemoryRole::gradient || !s.buffers[g].tensor) continue;
      ++gradients;
      std::optional<models::TaskId> last_backward;
      std::vector<models::TaskId> reductions;
      for (models::TaskId t = 0; t < s.tasks.size(); ++t) {
        const models::Task& task = s.tasks[t];
        const bool touches = std::count(task.uses.begin(), task.uses.end(), g) + std::count(task.creates.begin(), task.creates.end(), g) > 0;
        if (!touches) continue;
        if (task.kind == TaskKind::op && trace.op(*task.op).phase == traces::Phase::backward) last_backward = t;
        if (task.kind == TaskKind::collective && task.over == ParallelGroup::data) reductions.push_back(t);
      }
      ASSERT_TRUE(last_backward) << s.buffers[g].name;
      ASSERT_EQ(reductions.size(), 1u) << s.buffers[g].name;
      ASSERT_FALSE(s.tasks[reductions[0]].after.empty());
      EXPECT_GE(s.tasks[reductions[0]].after.front(), *last_backward) << s.buffers[g].name;
      const auto chunk = s.buffers[g].name.rfind("(chunk ");
      ASSERT_NE(chunk, std::string::npos) << s.buffers[g].name;
      chunks_reduced.insert(s.buffers[g].name.substr(chunk));
    }
    EXPECT_GT(gradients, 0);
    EXPECT_EQ(chunks_reduced, (std::set<std::string>{"(chunk 0)", "(chunk 1)"}));
  }
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

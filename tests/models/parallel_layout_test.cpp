// The parallel layout: its names, every rule of check_layout (one test per rule, on the field it
// is reported at and the numbers of its message), published layouts that are valid, the rank
// groups against the rank mesh they describe, and the uniform stage partition.

#include "comptrain/models/parallel_layout.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace comptrain::models {
namespace {

using ::testing::HasSubstr;

// Llama-2-70B: 80 layers, 64 heads, 8 KV heads (meta-llama/Llama-2-70b-hf config.json), 4096 tokens.
LayoutModel llama2_70b() {
  LayoutModel model;
  model.layers = 80;
  model.heads = 64;
  model.kv_heads = 8;
  model.vocab = 32000;
  model.seq_len = 4096;
  return model;
}

// Mixtral 8x22B: 56 layers, 48 heads, 8 KV heads, 8 routed experts per MoE layer
// (mistralai/Mixtral-8x22B-v0.1 config.json).
LayoutModel mixtral_8x22b() {
  LayoutModel model;
  model.layers = 56;
  model.heads = 48;
  model.kv_heads = 8;
  model.experts = 8;
  model.vocab = 32768;
  model.seq_len = 4096;
  return model;
}

ParallelLayout layout_of(int tensor, int pipeline, int context = 1, int expert = 1) {
  ParallelLayout layout;
  layout.tensor = tensor;
  layout.pipeline = pipeline;
  layout.context = context;
  layout.expert = expert;
  return layout;
}

// The single problem of a layout that breaks one rule.
LayoutProblem only_problem(const ParallelLayout& layout, const LayoutModel& model, int gpus) {
  const std::vector<LayoutProblem> problems = check_layout(layout, model, gpus);
  EXPECT_EQ(problems.size(), 1u) << "problems: " << problems.size();
  return problems.empty() ? LayoutProblem{} : problems.front();
}

TEST(ParallelLayoutNames, ScheduleNamesRoundTrip) {
  EXPECT_EQ(to_string(PipelineSchedule::gpipe), "gpipe");
  EXPECT_EQ(to_string(PipelineSchedule::one_f_one_b), "1f1b");
  EXPECT_EQ(to_string(PipelineSchedule::interleaved), "interleaved");
  EXPECT_EQ(to_string(PipelineSchedule::zero_bubble), "zero_bubble");
  for (const PipelineSchedule schedule : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b,
                                          PipelineSchedule::interleaved, PipelineSchedule::zero_bubble}) {
    EXPECT_EQ(pipeline_schedule_from_string(to_string(schedule)), schedule);
  }
  EXPECT_EQ(pipeline_schedule_from_string("1F1B"), std::nullopt);
  EXPECT_EQ(pipeline_schedule_from_string("zero-bubble"), std::nullopt);
  EXPECT_EQ(pipeline_schedule_from_string(""), std::nullopt);
}

TEST(ParallelLayoutNames, GroupNames) {
  EXPECT_EQ(to_string(ParallelGroup::tensor), "tensor");
  EXPECT_EQ(to_string(ParallelGroup::context), "context");
  EXPECT_EQ(to_string(ParallelGroup::data), "data");
  EXPECT_EQ(to_string(ParallelGroup::expert), "expert");
  EXPECT_EQ(to_string(ParallelGroup::expert_data), "expert_data");
  EXPECT_EQ(to_string(ParallelGroup::pipeline), "pipeline");
}

TEST(CheckLayout, Llama2_70bOnThirtyTwoGpusIsValid) {
  const ParallelLayout layout = layout_of(8, 4);
  EXPECT_TRUE(check_layout(layout, llama2_70b(), 32).empty());
  EXPECT_EQ(data_parallel_degree(layout, 32), 1);
}

TEST(CheckLayout, Llama3_405bOnSixteenThousandGpusIsValid) {
  // A Llama-3.1-405B shape: 126 layers, 128 heads, 8 KV heads; T8 P16 C16 (the layout of
  // scenarios/llama3-405b-tp8-pp16-cp16-16384xh100.yaml) on 16,384 GPUs leaves D = 16384 / 2048 = 8.
  LayoutModel model;
  model.layers = 126;
  model.heads = 128;
  model.kv_heads = 8;
  model.seq_len = 131072;
  const ParallelLayout layout = layout_of(8, 16, 16);
  EXPECT_TRUE(check_layout(layout, model, 16384).empty());
  EXPECT_EQ(data_parallel_degree(layout, 16384), 8);
}

TEST(CheckLayout, MixtralWithEightWayExpertParallelismIsValid) {
  const ParallelLayout layout = layout_of(1, 1, 1, 8);
  EXPECT_TRUE(check_layout(layout, mixtral_8x22b(), 64).empty());
  EXPECT_EQ(data_parallel_degree(layout, 64), 64);
}

TEST(CheckLayout, DegreesBelowOneAreReportedAlone) {
  ParallelLayout layout = layout_of(0, 4);
  layout.virtual_stages = -1;
  const std::vector<LayoutProblem> problems = check_layout(layout, llama2_70b(), 32);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0].field, "tensor");
  EXPECT_THAT(problems[0].message, HasSubstr("tensor is 0; expected a degree >= 1"));
  EXPECT_EQ(problems[1].field, "virtual_stages");
  EXPECT_THAT(problems[1].message, HasSubstr("virtual_stages is -1"));
  for (const char* field : {"pipeline", "context", "expert"}) {
    ParallelLayout bad = layout_of(8, 4);
    if (std::string(field) == "pipeline") bad.pipeline = 0;
    if (std::string(field) == "context") bad.context = 0;
    if (std::string(field) == "expert") bad.expert = 0;
    EXPECT_EQ(only_problem(bad, llama2_70b(), 32).field, field);
  }
}

TEST(CheckLayout, ProductNotDividingTheGpusIsReportedAtTheOutermostDegree) {
  // 8 x 1 x 3 = 24 does not divide 32: reported at pipeline, the outermost degree above 1.
  LayoutProblem problem = only_problem(layout_of(8, 3), llama2_70b(), 32);
  EXPECT_EQ(problem.field, "pipeline");
  EXPECT_THAT(problem.message, HasSubstr("8 x 1 x 3 = 24 does not divide the 32 GPUs"));
  // Without a pipeline, at context (8 x 2 x 1 = 16 on 40 GPUs), else at tensor.
  problem = only_problem(layout_of(8, 1, 2), llama2_70b(), 40);
  EXPECT_EQ(problem.field, "context");
  EXPECT_THAT(problem.message, HasSubstr("= 16 does not divide the 40 GPUs"));
  problem = only_problem(layout_of(8, 1), llama2_70b(), 12);
  EXPECT_EQ(problem.field, "tensor");
  EXPECT_THAT(problem.message, HasSubstr("= 8 does not divide the 12 GPUs"));
}

TEST(CheckLayout, TensorMustDivideTheHeads) {
  LayoutModel model = llama2_70b();
  model.kv_heads = 0;  // as many as heads
  const LayoutProblem problem = only_problem(layout_of(3, 1), model, 3);
  EXPECT_EQ(problem.field, "tensor");
  EXPECT_THAT(problem.message, HasSubstr("3 does not divide the 64 heads"));
  EXPECT_THAT(problem.message, HasSubstr("expected a tensor degree that divides both the 64 heads and the 64 KV heads"));
}

TEST(CheckLayout, TensorMustDivideTheKvHeads) {
  LayoutModel model = llama2_70b();
  model.kv_heads = 6;
  const LayoutProblem problem = only_problem(layout_of(8, 1), model, 8);
  EXPECT_EQ(problem.field, "tensor");
  EXPECT_EQ(problem.message,
            "8 does not divide the 6 KV heads; expected a tensor degree that divides both the 64 heads and the 6 KV heads");
}

TEST(CheckLayout, ExpertParallelismNeedsAnMoeModel) {
  const LayoutProblem problem = only_problem(layout_of(1, 1, 1, 2), llama2_70b(), 8);
  EXPECT_EQ(problem.field, "expert");
  EXPECT_THAT(problem.message, HasSubstr("expert is 2 but the model is dense"));
}

TEST(CheckLayout, ExpertMustDivideTheExperts) {
  const LayoutProblem problem = only_problem(layout_of(1, 1, 1, 3), mixtral_8x22b(), 6);
  EXPECT_EQ(problem.field, "expert");
  EXPECT_THAT(problem.message, HasSubstr("3 does not divide the 8 experts"));
}

TEST(CheckLayout, ExpertMustDivideDataTimesContext) {
  // T8 on 16 GPUs leaves D x C = 2 ranks to split 4 ways.
  const LayoutProblem problem = only_problem(layout_of(8, 1, 1, 4), mixtral_8x22b(), 16);
  EXPECT_EQ(problem.field, "expert");
  EXPECT_THAT(problem.message, HasSubstr("4 does not divide the 2 data x context ranks (2 x 1)"));
  // The context ranks count: D 2 x C 2 = 4 ranks take E 4.
  EXPECT_TRUE(check_layout(layout_of(4, 1, 2, 4), mixtral_8x22b(), 16).empty());
}

// The experts' tensor parallelism: 0 (unset) or the tensor degree, Megatron-LM's default; another
// value is MoE parallel folding, not modelled.
TEST(CheckLayout, ExpertTensorMustBeTheTensorDegree) {
  ParallelLayout layout = layout_of(2, 1, 1, 8);
  layout.expert_tensor = 2;
  EXPECT_TRUE(check_layout(layout, mixtral_8x22b(), 16).empty());
  layout.expert_tensor = 1;
  const LayoutProblem problem = only_problem(layout, mixtral_8x22b(), 16);
  EXPECT_EQ(problem.field, "expert_tensor");
  EXPECT_THAT(problem.message, HasSubstr("1 differs from tensor (2)"));
  EXPECT_THAT(problem.message, HasSubstr("expected 2 or no expert_tensor"));
}

TEST(CheckLayout, TwiceTheContextMustDivideTheSequence) {
  LayoutModel model = llama2_70b();
  model.seq_len = 4100;  // divisible by 4 (C = 2), not by 2 x 4 = 8
  EXPECT_TRUE(check_layout(layout_of(8, 1, 2), model, 16).empty());
  const LayoutProblem problem = only_problem(layout_of(8, 1, 4), model, 32);
  EXPECT_EQ(problem.field, "context");
  EXPECT_THAT(problem.message, HasSubstr("2 x 4 = 8 does not divide the sequence length 4100"));
}

TEST(CheckLayout, StagesMustNotOutnumberTheLayers) {
  LayoutModel model = llama2_70b();
  model.layers = 6;
  LayoutProblem problem = only_problem(layout_of(1, 8), model, 8);
  EXPECT_EQ(problem.field, "pipeline");
  EXPECT_THAT(problem.message, HasSubstr("8 pipeline stages exceed the 6 layers"));
  ParallelLayout interleaved = layout_of(1, 4);
  interleaved.schedule = PipelineSchedule::interleaved;
  interleaved.virtual_stages = 2;
  problem = only_problem(interleaved, model, 4);
  EXPECT_EQ(problem.field, "virtual_stages");
  EXPECT_THAT(problem.message, HasSubstr("4 x 2 = 8 stages exceed the 6 layers"));
}

TEST(CheckLayout, VirtualStagesOnlyWithTheInterleavedSchedule) {
  ParallelLayout layout = layout_of(8, 4);
  layout.virtual_stages = 2;
  const LayoutProblem problem = only_problem(layout, llama2_70b(), 32);
  EXPECT_EQ(problem.field, "virtual_stages");
  EXPECT_THAT(problem.message, HasSubstr("virtual_stages is 2 with the 1f1b schedule"));
  layout.schedule = PipelineSchedule::interleaved;
  EXPECT_TRUE(check_layout(layout, llama2_70b(), 32).empty());
}

TEST(CheckLayout, InterleavedNeedsTwoChunksPerRank) {
  ParallelLayout layout = layout_of(8, 4);
  layout.schedule = PipelineSchedule::interleaved;
  const LayoutProblem problem = only_problem(layout, llama2_70b(), 32);
  EXPECT_EQ(problem.field, "virtual_stages");
  EXPECT_THAT(problem.message, HasSubstr("expected virtual_stages >= 2 for the interleaved schedule; use 1f1b"));
}

TEST(CheckLayout, InterleavedNeedsAPipeline) {
  ParallelLayout layout = layout_of(8, 1);
  layout.schedule = PipelineSchedule::interleaved;
  layout.virtual_stages = 2;
  const LayoutProblem problem = only_problem(layout, llama2_70b(), 8);
  EXPECT_EQ(problem.field, "pipeline_schedule");
  EXPECT_THAT(problem.message, HasSubstr("needs pipeline > 1"));
}

TEST(CheckLayout, OtherSchedulesWithoutAPipelineAreAllowed) {
  for (const PipelineSchedule schedule : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b, PipelineSchedule::zero_bubble}) {
    ParallelLayout layout = layout_of(8, 1);
    layout.schedule = schedule;
    EXPECT_TRUE(check_layout(layout, llama2_70b(), 8).empty()) << to_string(schedule);
  }
}

TEST(CheckLayout, SequenceParallelNeedsTensorParallelism) {
  ParallelLayout layout = layout_of(1, 4);
  layout.sequence_parallel = true;
  const LayoutProblem problem = only_problem(layout, llama2_70b(), 4);
  EXPECT_EQ(problem.field, "sequence_parallel");
  EXPECT_THAT(problem.message, HasSubstr("expected tensor > 1 with sequence_parallel"));
  layout.tensor = 2;
  EXPECT_TRUE(check_layout(layout, llama2_70b(), 8).empty());
}

// Megatron-LM's 2022 scatter-gather p2p splits a boundary tensor over the tensor-parallel ranks:
// it needs a pipeline, a tensor degree and no sequence parallelism (which splits it already).
TEST(CheckLayout, PipelineScatterGatherNeedsAPipelineAndTensorParallelismWithoutSequenceParallelism) {
  ParallelLayout layout = layout_of(2, 4);  // tensor 2 x pipeline 4
  layout.pipeline_scatter_gather = true;
  EXPECT_TRUE(check_layout(layout, llama2_70b(), 8).empty());
  layout.sequence_parallel = true;
  EXPECT_EQ(only_problem(layout, llama2_70b(), 8).field, "pipeline_scatter_gather");
  EXPECT_THAT(only_problem(layout, llama2_70b(), 8).message, HasSubstr("expected sequence_parallel false with it"));
  layout.sequence_parallel = false;
  layout.tensor = 1;
  EXPECT_THAT(only_problem(layout, llama2_70b(), 4).message, HasSubstr("expected tensor > 1"));
  layout = layout_of(2, 1);
  layout.pipeline_scatter_gather = true;
  EXPECT_THAT(only_problem(layout, llama2_70b(), 2).message, HasSubstr("expected pipeline > 1"));
}

TEST(CheckLayout, PipelineLayersNeedOneEntryPerStage) {
  ParallelLayout layout = layout_of(8, 4);
  layout.pipeline_layers = {40, 40};
  const LayoutProblem problem = only_problem(layout, llama2_70b(), 32);
  EXPECT_EQ(problem.field, "pipeline_layers");
  EXPECT_THAT(problem.message, HasSubstr("2 entries; expected pipeline x virtual_stages = 4 x 1 = 4"));
}

TEST(CheckLayout, PipelineLayersNeedALayerPerStage) {
  ParallelLayout layout = layout_of(8, 4);
  layout.pipeline_layers = {40, 0, 20, 20};
  const LayoutProblem problem = only_problem(layout, llama2_70b(), 32);
  EXPECT_EQ(problem.field, "pipeline_layers");
  EXPECT_THAT(problem.message, HasSubstr("entry 1 is 0; expected every stage to have at least 1 layer"));
}

TEST(CheckLayout, PipelineLayersMustSumToTheLayers) {
  ParallelLayout layout = layout_of(8, 4);
  layout.pipeline_layers = {19, 20, 20, 20};
  const LayoutProblem problem = only_problem(layout, llama2_70b(), 32);
  EXPECT_EQ(problem.field, "pipeline_layers");
  EXPECT_THAT(problem.message, HasSubstr("the entries sum to 79 layers; expected the model's 80"));
  layout.pipeline_layers = {19, 21, 21, 19};
  EXPECT_TRUE(check_layout(layout, llama2_70b(), 32).empty());
}

TEST(CheckLayout, ProblemsComeInTheOrderOfTheKeys) {
  LayoutModel model = llama2_70b();
  model.kv_heads = 6;
  ParallelLayout layout = layout_of(8, 3);
  layout.pipeline_layers = {1};
  const std::vector<LayoutProblem> problems = check_layout(layout, model, 32);
  std::vector<std::string> fields;
  for (const LayoutProblem& problem : problems) fields.push_back(problem.field);
  EXPECT_EQ(fields, (std::vector<std::string>{"pipeline", "tensor", "pipeline_layers", "pipeline_layers"}));
}

TEST(DataParallelDegree, ThrowsWhenTheLayoutDoesNotDivideTheGpus) {
  EXPECT_EQ(data_parallel_degree(layout_of(2, 2, 2), 16), 2);
  EXPECT_THROW(data_parallel_degree(layout_of(8, 3), 32), std::invalid_argument);
  EXPECT_THROW(data_parallel_degree(layout_of(0, 1), 32), std::invalid_argument);
  EXPECT_THROW(data_parallel_degree(layout_of(1, 1), 0), std::invalid_argument);
}

// The members of rank r's group under RankGroups' rule (models/schedule.hpp): base + k x stride.
std::set<int> group_of(RankGroups groups, int rank) {
  const int span = groups.size * groups.stride;
  const int base = rank - rank % span + rank % groups.stride;
  std::set<int> members;
  for (int k = 0; k < groups.size; ++k) members.insert(base + k * groups.stride);
  return members;
}

TEST(RankGroups, TwoOfEachOnSixteenGpus) {
  ParallelLayout layout = layout_of(2, 2, 2, 2);
  constexpr int kGpus = 16;
  ASSERT_EQ(data_parallel_degree(layout, kGpus), 2);
  EXPECT_EQ(rank_groups(layout, kGpus, ParallelGroup::tensor), (RankGroups{2, 1}));
  EXPECT_EQ(rank_groups(layout, kGpus, ParallelGroup::context), (RankGroups{2, 2}));
  EXPECT_EQ(rank_groups(layout, kGpus, ParallelGroup::data), (RankGroups{4, 2}));
  EXPECT_EQ(rank_groups(layout, kGpus, ParallelGroup::expert), (RankGroups{2, 2}));
  EXPECT_EQ(rank_groups(layout, kGpus, ParallelGroup::expert_data), (RankGroups{2, 4}));
  EXPECT_EQ(rank_groups(layout, kGpus, ParallelGroup::pipeline), (RankGroups{2, 8}));

  // The same groups from the mesh rank = t + 2(c + 2(d + 2p)), the expert index e = (c + 2d) mod 2
  // and the expert-data index (c + 2d) / 2: a group is the ranks that agree on every other index.
  struct Coordinates {
    int t, c, d, p;
  };
  std::vector<Coordinates> mesh(kGpus);
  for (int p = 0; p < 2; ++p)
    for (int d = 0; d < 2; ++d)
      for (int c = 0; c < 2; ++c)
        for (int t = 0; t < 2; ++t) mesh[static_cast<std::size_t>(t + 2 * (c + 2 * (d + 2 * p)))] = {t, c, d, p};
  auto members = [&](int rank, auto same) {
    std::set<int> group;
    for (int other = 0; other < kGpus; ++other) {
      if (same(mesh[static_cast<std::size_t>(rank)], mesh[static_cast<std::size_t>(other)])) group.insert(other);
    }
    return group;
  };
  for (int rank = 0; rank < kGpus; ++rank) {
    EXPECT_EQ(group_of(rank_groups(layout, kGpus, ParallelGroup::tensor), rank),
              members(rank, [](Coordinates a, Coordinates b) { return a.c == b.c && a.d == b.d && a.p == b.p; }));
    EXPECT_EQ(group_of(rank_groups(layout, kGpus, ParallelGroup::context), rank),
              members(rank, [](Coordinates a, Coordinates b) { return a.t == b.t && a.d == b.d && a.p == b.p; }));
    EXPECT_EQ(group_of(rank_groups(layout, kGpus, ParallelGroup::data), rank),
              members(rank, [](Coordinates a, Coordinates b) { return a.t == b.t && a.p == b.p; }));
    EXPECT_EQ(group_of(rank_groups(layout, kGpus, ParallelGroup::expert), rank),
              members(rank, [](Coordinates a, Coordinates b) {
                return a.t == b.t && a.p == b.p && (a.c + 2 * a.d) / 2 == (b.c + 2 * b.d) / 2;
              }));
    EXPECT_EQ(group_of(rank_groups(layout, kGpus, ParallelGroup::expert_data), rank),
              members(rank, [](Coordinates a, Coordinates b) {
                return a.t == b.t && a.p == b.p && (a.c + 2 * a.d) % 2 == (b.c + 2 * b.d) % 2;
              }));
    EXPECT_EQ(group_of(rank_groups(layout, kGpus, ParallelGroup::pipeline), rank),
              members(rank, [](Coordinates a, Coordinates b) { return a.t == b.t && a.c == b.c && a.d == b.d; }));
  }
}

TEST(RankGroups, ExpertGroupsNeedTheExpertDegreeToDivideDataTimesContext) {
  const ParallelLayout layout = layout_of(8, 1, 1, 4);
  EXPECT_EQ(rank_groups(layout, 16, ParallelGroup::data), (RankGroups{2, 8}));
  EXPECT_THROW(rank_groups(layout, 16, ParallelGroup::expert), std::invalid_argument);
  EXPECT_THROW(rank_groups(layout, 16, ParallelGroup::expert_data), std::invalid_argument);
  EXPECT_THROW(rank_groups(layout, 12, ParallelGroup::tensor), std::invalid_argument);
}

TEST(StageLayers, EvenSplit) {
  EXPECT_EQ(stage_layers(layout_of(8, 4), 80), (std::vector<int>{20, 20, 20, 20}));
}

TEST(StageLayers, FirstStagesTakeTheRemainder) {
  // DeepSpeed's partition_uniform: 126 = 16 x 7 + 14, so the first 14 stages take 8 layers.
  std::vector<int> expected(16, 7);
  for (int stage = 0; stage < 14; ++stage) expected[static_cast<std::size_t>(stage)] = 8;
  EXPECT_EQ(stage_layers(layout_of(8, 16), 126), expected);
}

TEST(StageLayers, VirtualStagesInModelOrder) {
  // 30 layers over 4 x 2 = 8 virtual stages: 30 = 8 x 3 + 6, the first six take 4. Virtual
  // stage j is rank j mod 4's chunk j / 4: rank 0 runs stages 0 (4 layers) and 4 (4 layers),
  // rank 3 stages 3 (4) and 7 (3).
  ParallelLayout layout = layout_of(1, 4);
  layout.schedule = PipelineSchedule::interleaved;
  layout.virtual_stages = 2;
  EXPECT_EQ(stage_layers(layout, 30), (std::vector<int>{4, 4, 4, 4, 4, 4, 3, 3}));
}

TEST(StageLayers, GivenLayersAreReturnedAsTheyAre) {
  ParallelLayout layout = layout_of(8, 4);
  layout.pipeline_layers = {19, 21, 21, 19};
  EXPECT_EQ(stage_layers(layout, 80), (std::vector<int>{19, 21, 21, 19}));
}

TEST(StageLayers, FewerLayersThanStagesThrows) {
  EXPECT_THROW(stage_layers(layout_of(1, 8), 6), std::invalid_argument);
  EXPECT_THROW(stage_layers(layout_of(1, 0), 6), std::invalid_argument);
}

}  // namespace
}  // namespace comptrain::models

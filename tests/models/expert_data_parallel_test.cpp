// Expert parameters under data parallelism (DataParallelSpec::expert_ranks, models/transforms/
// README.md "Expert parameters"): one expert-parallel rank of a tiny Mixtral (zoo), EP 2 on 4
// ranks of data parallelism (D = 4, so the expert-data group has 2 ranks). The experts' gradients
// are reduced in buckets of their own over the expert-data group, the others over the data group;
// ZeRO-1 shards each kind's optimizer state over its own group.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "comptrain/models/data_parallel.hpp"
#include "comptrain/models/op_time.hpp"
#include "comptrain/models/parallel_layout.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/models/transform_schedule.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "common/must_apply.hpp"

namespace comptrain::models {
namespace {

constexpr std::int64_t kHidden = 64;
constexpr std::int64_t kWidth = 128;
constexpr std::int64_t kLayers = 2;
// Rank 0 of EP 2 holds 2 of the 4 experts: 2 layers x 2 experts x 3 x 64 x 128 parameters.
constexpr std::int64_t kExpertParameters = kLayers * 2 * 3 * kHidden * kWidth;

traces::Trace tiny_mixtral_rank() {
  zoo::DecoderArchitecture arch;
  arch.family = "mixtral";
  arch.layers = kLayers;
  arch.hidden = kHidden;
  arch.heads = 4;
  arch.kv_heads = 2;
  arch.intermediate = kWidth;
  arch.vocab = 256;
  zoo::MoeArchitecture moe;
  moe.experts = 4;
  moe.top_k = 2;
  moe.intermediate = kWidth;
  arch.moe = moe;
  zoo::ModelRequest request;
  request.model = "llama";
  request.decoder = arch;
  request.seq_len = 32;
  request.batch_size = 2;
  request.precision = zoo::Precision::bf16;
  request.optimizer = zoo::Optimizer::adamw;
  request.expert_parallel = zoo::ExpertParallelSpec{2, 0};
  return zoo::build_model(request);
}

Schedule transformed(const traces::Trace& trace, int zero_stage) {
  const OpTimeModel time_model(builtin_platform("a100-80gb"));
  Schedule schedule = test_support::must_apply(build_schedule(trace, time_model, StrategySpec{}));
  TransformSteps steps;
  DataParallelSpec dp;
  dp.ranks = 4;
  dp.zero_stage = zero_stage;
  ParallelLayout layout;
  layout.expert = 2;
  dp.expert_ranks = rank_groups(layout, 4, traces::ParallelGroup::expert_data).size;
  steps.data_parallel = dp;
  steps.layout = layout;
  steps.gpus = 4;
  return transform_schedule(std::move(schedule), trace, steps);
}

std::int64_t role_bytes(const traces::Trace& trace, traces::TensorRole role, bool experts) {
  std::int64_t bytes = 0;
  for (const auto& t : trace.tensors()) {
    if (t.role == role && !t.is_view() && is_expert_parameter(t.name) == experts) bytes += t.bytes();
  }
  return bytes;
}

TEST(ExpertDataParallel, ExpertGradientsAreReducedOverTheExpertDataGroup) {
  const traces::Trace trace = tiny_mixtral_rank();
  EXPECT_EQ(role_bytes(trace, traces::TensorRole::gradient, true), kExpertParameters * 2);  // bf16 gradients
  const Schedule s = transformed(trace, 0);
  std::int64_t expert_bytes = 0;
  std::int64_t dense_bytes = 0;
  for (const Task& task : s.tasks) {
    if (task.kind != TaskKind::collective || task.stream != Stream::comm) continue;
    ASSERT_EQ(*task.collective, CollectiveKind::all_reduce) << task.name;
    if (task.over == traces::ParallelGroup::expert_data) {
      expert_bytes += task.bytes;
      // D x C / E = 2 ranks, T x E = 2 apart: {0, 2} and {1, 3}.
      EXPECT_EQ(task.groups, (RankGroups{2, 2})) << task.name;
    } else {
      EXPECT_EQ(task.over, traces::ParallelGroup::data) << task.name;
      EXPECT_TRUE(task.groups.every_rank()) << task.name;  // the data group is every rank here
      dense_bytes += task.bytes;
    }
  }
  EXPECT_EQ(expert_bytes, kExpertParameters * 2);
  EXPECT_EQ(dense_bytes, role_bytes(trace, traces::TensorRole::gradient, false));
  EXPECT_GT(dense_bytes, 0);
}

// ZeRO-1: AdamW's two bf16 moments (4 B per parameter) of the experts over 2 ranks, the rest's
// over 4; the updated parameters all-gathered over each group.
TEST(ExpertDataParallel, ZeroOneShardsEachKindOverItsGroup) {
  const traces::Trace trace = tiny_mixtral_rank();
  EXPECT_EQ(role_bytes(trace, traces::TensorRole::optimizer_state, true), kExpertParameters * 4);
  const Schedule s = transformed(trace, 1);
  std::int64_t expert_partition = -1;
  std::int64_t dense_partition = -1;
  for (const Buffer& b : s.buffers) {
    if (b.name == "expert optimizer state partition (1/2)") expert_partition = b.bytes;
    if (b.name == "optimizer state partition (1/4)") dense_partition = b.bytes;
  }
  EXPECT_EQ(expert_partition, kExpertParameters * 4 / 2);
  const std::int64_t dense_state = role_bytes(trace, traces::TensorRole::optimizer_state, false);
  EXPECT_EQ(dense_partition, (dense_state + 3) / 4);
  int expert_gathers = 0;
  for (const Task& task : s.tasks) {
    if (task.kind == TaskKind::collective && task.collective == CollectiveKind::all_gather && task.over == traces::ParallelGroup::expert_data) {
      ++expert_gathers;
      EXPECT_EQ(task.bytes, kExpertParameters * 2);
    }
  }
  EXPECT_EQ(expert_gathers, 1);
}

TEST(ExpertDataParallel, OnlyDdpAndZeroOneAreModelled) {
  DataParallelSpec dp;
  dp.ranks = 4;
  dp.expert_ranks = 2;
  dp.zero_stage = 2;
  EXPECT_THROW(check_data_parallel(dp), std::invalid_argument);
  dp.zero_stage = 1;
  EXPECT_NO_THROW(check_data_parallel(dp));
  dp.expert_ranks = 3;  // does not divide the 4 ranks
  EXPECT_THROW(check_data_parallel(dp), std::invalid_argument);
  EXPECT_TRUE(is_expert_parameter("model.layers.0.block_sparse_moe.experts.3.w1.weight.exp_avg"));
  EXPECT_FALSE(is_expert_parameter("model.layers.0.block_sparse_moe.gate.weight"));
  EXPECT_FALSE(is_expert_parameter("model.layers.0.mlp.shared_expert.gate_proj.weight"));
}

}  // namespace
}  // namespace comptrain::models

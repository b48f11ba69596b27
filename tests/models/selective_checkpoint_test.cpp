// Selective activation checkpointing (recompute mode selective, models/strategies/README.md,
// "Selective activation checkpointing"): torchtitan's selective op policy on the zoo's LLaMA
// decoder in `mixed` precision, against the same split as a checkpoints rule. What the policy's
// cache and the checkpoint frame hold is checked task by task and in bytes computed by hand.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "comptrain/models/op_time.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "common/must_apply.hpp"
#include "common/test_platform.hpp"

namespace comptrain::models {
namespace {

constexpr std::int64_t kLayers = 3, kHidden = 64, kSeq = 256, kBatch = 8;

traces::Trace llama() {
  zoo::ModelRequest request;
  request.model = "llama";
  request.layers = kLayers;
  request.hidden = kHidden;
  request.heads = 4;
  request.vocab = 100;
  request.seq_len = kSeq;
  request.batch_size = kBatch;
  request.precision = zoo::Precision::mixed;
  request.optimizer = zoo::Optimizer::adamw;
  request.attention = zoo::Attention::flash;
  return zoo::build_model(request);
}

// torchtitan's selective op policy (scenarios/validation/torchtitan-llama3-8b-h100-fsdp-8gpu-b2-sac.yaml):
// the outputs of the 1st, 3rd, 5th and 7th mm of a block and of the flash kernel, and the block
// inputs.
const std::vector<std::string> kKeep = {"model.embed_tokens.out",
                                        "model.layers.*.add_1.out",
                                        "model.layers.*.self_attn.q_proj.out",
                                        "model.layers.*.self_attn.v_proj.out",
                                        "model.layers.*.self_attn.scaled_dot_product_attention.out",
                                        "model.layers.*.self_attn.scaled_dot_product_attention.logsumexp",
                                        "model.layers.*.mlp.gate_proj.out",
                                        "model.layers.*.mlp.down_proj.out"};

StrategySpec rule(RecomputeAction::Mode mode) {
  RecomputeAction action;
  action.mode = mode;
  action.keep = kKeep;
  if (mode == RecomputeAction::Mode::selective) action.blocks = {"model.layers.*"};
  TensorSelector select;
  select.modules = {"model.layers"};
  StrategySpec spec;
  spec.name = "sac";
  spec.rules = {StrategyRule{select, action}};
  return spec;
}

Schedule build(const traces::Trace& trace, const StrategySpec& spec) {
  static const OpTimeModel time_model(test_support::roofline_platform());
  return test_support::must_apply(build_schedule(trace, time_model, spec));
}

// The original buffer of a storage (the one named exactly so).
BufferId buffer(const Schedule& s, const std::string& name) {
  for (BufferId b = 0; b < s.buffers.size(); ++b) {
    if (s.buffers[b].name == name) return b;
  }
  ADD_FAILURE() << "no buffer " << name;
  return 0;
}

// The last task that creates or uses a buffer (it is freed when that task ends).
TaskId last_user(const Schedule& s, BufferId b) {
  std::optional<TaskId> last;
  for (TaskId t = 0; t < s.tasks.size(); ++t) {
    const Task& task = s.tasks[t];
    if (std::find(task.uses.begin(), task.uses.end(), b) != task.uses.end() ||
        std::find(task.creates.begin(), task.creates.end(), b) != task.creates.end()) {
      last = t;
    }
  }
  return last.value_or(0);
}

TaskId op_task(const Schedule& s, const std::string& op) {
  for (TaskId t = 0; t < s.tasks.size(); ++t) {
    if (s.tasks[t].kind == TaskKind::op && s.tasks[t].name == op) return t;
  }
  ADD_FAILURE() << "no op task " << op;
  return 0;
}

// The first and last backward op of layer `l`, found from the trace's names.
struct Span {
  std::string first, last;
};
Span backward_of_layer(const traces::Trace& trace, std::int64_t l) {
  const std::string prefix = "model.layers." + std::to_string(l) + ".";
  Span span;
  for (const auto& op : trace.ops()) {
    if (op.phase != traces::Phase::backward || !op.name.starts_with(prefix)) continue;
    if (span.first.empty()) span.first = op.name;
    span.last = op.name;
  }
  return span;
}

// Bytes of the buffers live while task `t` runs (allocated by a task at or before it, last used at
// or after it; resident ones always).
std::int64_t live_at(const Schedule& s, TaskId t) {
  std::map<BufferId, std::pair<TaskId, TaskId>> span;
  for (TaskId u = 0; u < s.tasks.size(); ++u) {
    for (const auto* list : {&s.tasks[u].creates, &s.tasks[u].uses}) {
      for (BufferId b : *list) {
        auto [it, added] = span.emplace(b, std::make_pair(u, u));
        if (!added) it->second.second = u;
      }
    }
  }
  std::int64_t total = 0;
  for (BufferId b = 0; b < s.buffers.size(); ++b) {
    const auto it = span.find(b);
    const bool live = s.buffers[b].resident || (it != span.end() && it->second.first <= t && t <= it->second.second);
    if (live) total += s.buffers[b].bytes;
  }
  return total;
}

// torch.utils.checkpoint's early stop: the recomputation stops before down_proj (the block's last
// op that saves a tensor saves only its inputs), so down_proj's cached output stays until the
// frame dies with the block's last backward op; a checkpoints rule frees it after the forward
// (no backward op nor replay reads it).
TEST(SelectiveCheckpoint, UnconsumedCachedOutputsLiveToTheBlocksLastBackwardOp) {
  const traces::Trace trace = llama();
  const Schedule sac = build(trace, rule(RecomputeAction::Mode::selective));
  const Schedule plain = build(trace, rule(RecomputeAction::Mode::checkpoints));
  for (std::int64_t l = 0; l < kLayers; ++l) {
    const std::string layer = "model.layers." + std::to_string(l);
    const std::string down = layer + ".mlp.down_proj.out";
    EXPECT_EQ(last_user(sac, buffer(sac, down)), op_task(sac, backward_of_layer(trace, l).last)) << down;
    EXPECT_EQ(sac.buffers[buffer(sac, down)].role, MemoryRole::activation);
    EXPECT_EQ(last_user(plain, buffer(plain, down)), op_task(plain, layer + ".add_1")) << down;
  }
}

// The checkpoint's inputs (the previous block's output, the embedding output for block 0) are
// held by the frame to the block's last backward op: block l's, not block l - 1's, whose output
// it is (the residual stream `keep` names is not an output the policy caches).
TEST(SelectiveCheckpoint, BlockInputsLiveToTheBlocksLastBackwardOp) {
  const traces::Trace trace = llama();
  const Schedule sac = build(trace, rule(RecomputeAction::Mode::selective));
  for (std::int64_t l = 0; l < kLayers; ++l) {
    const std::string input = l == 0 ? "model.embed_tokens.out" : "model.layers." + std::to_string(l - 1) + ".add_1.out";
    EXPECT_EQ(last_user(sac, buffer(sac, input)), op_task(sac, backward_of_layer(trace, l).last)) << input;
  }
}

// A cached output the recomputation consumes lives at least to the block's first backward op (and
// as long as a backward op reads it): q_proj's output, which no backward op reads, is read by the
// replays and held to the block's first backward op at least.
TEST(SelectiveCheckpoint, ConsumedCachedOutputsLiveToTheBlocksRecomputation) {
  const traces::Trace trace = llama();
  const Schedule sac = build(trace, rule(RecomputeAction::Mode::selective));
  for (std::int64_t l = 0; l < kLayers; ++l) {
    const std::string q = "model.layers." + std::to_string(l) + ".self_attn.q_proj.out";
    EXPECT_GE(last_user(sac, buffer(sac, q)), op_task(sac, backward_of_layer(trace, l).first)) << q;
    EXPECT_LT(last_user(sac, buffer(sac, q)), op_task(sac, backward_of_layer(trace, l).last)) << q;
  }
}

// At the start of the backward pass the selective rule holds exactly one down_proj output per
// layer more than the checkpoints rule: batch x sequence x hidden 16-bit elements each.
TEST(SelectiveCheckpoint, HoldsTheDownProjectionsMoreAtTheBackwardStart) {
  const traces::Trace trace = llama();
  const Schedule sac = build(trace, rule(RecomputeAction::Mode::selective));
  const Schedule plain = build(trace, rule(RecomputeAction::Mode::checkpoints));
  const std::string first_backward = [&] {
    for (const auto& op : trace.ops()) {
      if (op.phase == traces::Phase::backward) return op.name;
    }
    return std::string();
  }();
  const std::int64_t down_proj_bytes = kBatch * kSeq * kHidden * 2;  // 262,144 B
  EXPECT_EQ(live_at(sac, op_task(sac, first_backward)) - live_at(plain, op_task(plain, first_backward)), kLayers * down_proj_bytes);
  EXPECT_EQ(kLayers * down_proj_bytes, 786432);
}

TEST(SelectiveCheckpoint, RulesNeedKeepAndBlocks) {
  StrategySpec spec = rule(RecomputeAction::Mode::selective);
  EXPECT_NO_THROW(validate_strategy(spec));
  std::get<RecomputeAction>(spec.rules[0].action).blocks.clear();
  EXPECT_THAT([&] { validate_strategy(spec); }, testing::ThrowsMessage<InputError>(testing::HasSubstr("needs 'blocks'")));
  spec = rule(RecomputeAction::Mode::selective);
  std::get<RecomputeAction>(spec.rules[0].action).keep.clear();
  EXPECT_THAT([&] { validate_strategy(spec); }, testing::ThrowsMessage<InputError>(testing::HasSubstr("recompute mode selective needs 'keep'")));
  spec = rule(RecomputeAction::Mode::checkpoints);
  std::get<RecomputeAction>(spec.rules[0].action).blocks = {"model.layers.*"};
  EXPECT_THAT([&] { validate_strategy(spec); }, testing::ThrowsMessage<InputError>(testing::HasSubstr("'blocks' applies to mode selective only")));
  spec = rule(RecomputeAction::Mode::selective);
  std::get<RecomputeAction>(spec.rules[0].action).blocks = {"layers.[3-1]"};
  EXPECT_THAT([&] { validate_strategy(spec); }, testing::ThrowsMessage<InputError>(testing::HasSubstr("blocks: pattern 'layers.[3-1]'")));
}

}  // namespace
}  // namespace comptrain::models

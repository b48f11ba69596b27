// Megatron-LM's recomputation settings turned into strategy rules for one pipeline stage's trace
// (strategy.hpp, LayerRecompute; models/strategies/README.md, "Megatron-LM's recomputation
// settings").

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/models/module_pattern.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::models {
namespace {

using traces::OpKind;
using traces::TensorIndex;
using traces::TensorRole;

std::string place(const LayerRecompute& recompute, std::size_t entry) {
  if (entry < recompute.num_layers_locations.size() && !recompute.num_layers_locations[entry].empty()) {
    return recompute.num_layers_locations[entry] + ": ";
  }
  return recompute.location.empty() ? std::string("strategy.recompute: ") : recompute.location + ": ";
}

std::optional<int> decimal(std::string_view text) {
  if (text.empty() || text.size() > 9 || !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  int value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

// The layers of a trace: the one module list `prefix.N` (`transformer.h`, `model.layers`) whose
// indices name weights, among the outermost numbered lists (no number before the index: an MoE
// layer's `mlp.experts.N` lies inside a layer). Weights only: a chunked loss's pieces or a
// tensor-parallel split's parts are numbered too, but hold no parameters. A trace with several
// such lists (a ResNet's layer1.N ... layer4.N) is refused rather than guessed at.
struct Layers {
  std::string prefix;           // "transformer.h"
  std::vector<int> indices;     // ascending
  std::optional<int> of(std::string_view name) const {
    if (name.size() <= prefix.size() + 1 || name.compare(0, prefix.size(), prefix) != 0 || name[prefix.size()] != '.') return std::nullopt;
    const std::string_view rest = name.substr(prefix.size() + 1);
    return decimal(rest.substr(0, rest.find('.')));
  }
};

// Every outermost numbered list holding weights (prefix -> indices).
std::map<std::string, std::set<int>> numbered_lists(const traces::Trace& trace) {
  std::map<std::string, std::set<int>> lists;
  for (const traces::Tensor& t : trace.tensors()) {
    if (t.role != TensorRole::weight) continue;
    const std::vector<std::string_view> parts = path_components(t.name);
    for (std::size_t i = 1; i < parts.size(); ++i) {
      if (const auto index = decimal(parts[i])) {
        std::string prefix;
        for (std::size_t j = 0; j < i; ++j) prefix += (j == 0 ? "" : ".") + std::string(parts[j]);
        lists[prefix].insert(*index);
        break;  // the outermost number only
      }
    }
  }
  return lists;
}

// `[a-b]` module patterns (module_pattern.hpp) covering `layers` (ascending), one per run of
// consecutive indices.
std::vector<std::string> range_patterns(const std::string& prefix, const std::vector<int>& layers) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < layers.size();) {
    std::size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    out.push_back(fmt::format("{}.[{}-{}]", prefix, layers[i], layers[j]));
    i = j + 1;
  }
  return out;
}

// full: each recomputed layer's checkpoint group (its position in the stage / num_layers for
// uniform, its position for block); the others are not recomputed.
std::map<int, int> checkpoint_groups(const LayerRecompute& recompute, const std::vector<int>& layers, int num_layers) {
  std::map<int, int> group;
  for (std::size_t position = 0; position < layers.size(); ++position) {
    const int p = static_cast<int>(position);
    if (recompute.method == LayerRecompute::Method::uniform) {
      group[layers[position]] = p / num_layers;
    } else if (p < num_layers) {
      group[layers[position]] = p;
    }
  }
  return group;
}

// The rule of full recomputation: the recomputed layers' saved activations selected; kept, what
// torch.utils.checkpoint (Megatron's tensor_parallel.checkpoint) keeps around each group: the
// group's inputs (its tensor arguments: the hidden states, the rotary embedding), and its outputs
// that a later op saves (the next group's input, the final norm's). Found from the data flow: a
// storage a forward op reads across a group's boundary.
std::optional<StrategyRule> full_rule(const traces::Trace& trace, const Layers& layers, const std::map<int, int>& group) {
  if (group.empty()) return std::nullopt;
  constexpr int kOutside = -1;  // not in a recomputed layer
  auto group_of = [&](std::string_view name) {
    const auto layer = layers.of(name);
    if (!layer) return kOutside;
    const auto it = group.find(*layer);
    return it == group.end() ? kOutside : it->second;
  };
  std::set<TensorIndex> kept;
  for (const traces::Op& op : trace.ops()) {
    if (op.phase != traces::Phase::forward) continue;
    const int reader = group_of(op.name);
    for (const TensorIndex input : op.inputs) {
      const TensorIndex storage = trace.storage_of(input);
      const traces::Tensor& t = trace.tensor(storage);
      if (t.role != TensorRole::activation && t.role != TensorRole::temporary) continue;  // weights, the mini-batch: resident anyway
      const int writer = group_of(t.name);
      if (writer == reader) continue;
      // A group's input always (checkpoint saves it); a group's output when autograd saves it.
      if (reader != kOutside || t.role == TensorRole::activation) kept.insert(storage);
    }
  }
  std::vector<int> recomputed;
  for (const auto& entry : group) recomputed.push_back(entry.first);
  StrategyRule rule;
  rule.select.modules = range_patterns(layers.prefix, recomputed);
  RecomputeAction action;
  action.mode = RecomputeAction::Mode::checkpoints;
  for (const TensorIndex s : kept) action.keep.push_back(trace.tensor(s).name);
  if (action.keep.empty()) action.mode = RecomputeAction::Mode::all;
  rule.action = action;
  return rule;
}

// The rule of selective recomputation: in every layer, the storages a softmax writes and those
// the casts and dropout after it write, up to the product with the values (Korthikanti et al.
// 2022, §4.2: the attention's s x s tensors). A fused attention kernel (flash, memory-efficient)
// keeps no s x s tensor, but Megatron-core checkpoints the attention core all the same
// (megatron/core/transformer/attention.py: checkpoint_core_attention = recompute_granularity ==
// 'selective', and _checkpointed_attention_forward runs core_attention, Transformer Engine's
// kernel, under tensor_parallel.checkpoint): the kernel runs again in the backward pass. What
// it saved for itself alone (the log-sum-exp) is dropped; its output stays, saved by the output
// projection that reads it.
// Whether `op` (a softmax) normalises attention scores: its input comes from a product without
// weights (Q Kᵀ), through scales, masks and views only. An MoE router's softmax reads a linear.
bool softmax_of_scores(const traces::Trace& trace, const traces::Op& op) {
  std::vector<TensorIndex> frontier(op.inputs.begin(), op.inputs.end());
  std::set<traces::OpIndex> seen;
  while (!frontier.empty()) {
    const std::optional<traces::OpIndex> producer = trace.tensor(frontier.back()).producer;
    frontier.pop_back();
    if (!producer || !seen.insert(*producer).second) continue;
    const traces::Op& p = trace.op(*producer);
    if (p.kind == OpKind::matmul) return true;
    // Through a scale, a mask (`where` on the scores and a constant mask), a cast or a view.
    if (p.kind == OpKind::elementwise || p.kind == OpKind::view) frontier.insert(frontier.end(), p.inputs.begin(), p.inputs.end());
  }
  return false;
}

std::optional<StrategyRule> selective_rule(const traces::Trace& trace, const Layers& layers) {
  std::set<TensorIndex> dropped;
  std::vector<TensorIndex> frontier;
  for (const traces::Op& op : trace.ops()) {
    if (op.phase != traces::Phase::forward || op.kind != OpKind::softmax || !layers.of(op.name) || !softmax_of_scores(trace, op)) continue;
    for (const TensorIndex out : op.outputs) {
      if (dropped.insert(trace.storage_of(out)).second) frontier.push_back(out);
    }
  }
  while (!frontier.empty()) {
    const TensorIndex t = frontier.back();
    frontier.pop_back();
    for (const traces::OpIndex c : trace.tensor(t).consumers) {
      const traces::Op& op = trace.op(c);
      if (op.phase != traces::Phase::forward) continue;
      if (op.kind != OpKind::dropout && op.kind != OpKind::elementwise && op.kind != OpKind::view) continue;
      for (const TensorIndex out : op.outputs) {
        if (dropped.insert(trace.storage_of(out)).second) frontier.push_back(out);
      }
    }
  }
  for (const traces::Op& op : trace.ops()) {
    if (op.phase != traces::Phase::forward || op.kind != OpKind::attention || !layers.of(op.name)) continue;
    for (const TensorIndex out : op.outputs) {
      const auto& consumers = trace.tensor(out).consumers;
      const bool read_forward = std::any_of(consumers.begin(), consumers.end(),
                                            [&](traces::OpIndex c) { return trace.op(c).phase == traces::Phase::forward; });
      if (!read_forward) dropped.insert(trace.storage_of(out));
    }
  }
  if (dropped.empty()) return std::nullopt;
  StrategyRule rule;
  for (const TensorIndex s : dropped) rule.select.names.push_back(trace.tensor(s).name);
  RecomputeAction action;
  action.mode = RecomputeAction::Mode::all;
  rule.action = action;
  return rule;
}

}  // namespace

void check_layer_recompute(const LayerRecompute& recompute, const std::vector<int>& stage_layers) {
  if (recompute.granularity != LayerRecompute::Granularity::full) return;
  const std::size_t stages = stage_layers.size();
  if (recompute.num_layers.size() > 1 && recompute.num_layers.size() != stages) {
    throw InputError((recompute.num_layers_location.empty() ? std::string("strategy.recompute.num_layers") : recompute.num_layers_location) +
                     fmt::format(": has {} entries; expected one per pipeline stage ({}), or one number for every stage",
                                 recompute.num_layers.size(), stages));
  }
  for (std::size_t p = 0; p < stages; ++p) {
    const std::size_t entry = recompute.num_layers.size() == 1 ? 0 : p;
    if (entry >= recompute.num_layers.size()) continue;
    const int n = recompute.num_layers[entry];
    if (n > stage_layers[p]) {
      throw InputError(place(recompute, entry) +
                       (stages == 1 ? fmt::format("num_layers is {}; the model has {} layers; expected at most {}", n, stage_layers[p], stage_layers[p])
                                    : fmt::format("num_layers is {}; pipeline stage {} holds {} layers; expected at most {}{}", n, p, stage_layers[p],
                                                  stage_layers[p], recompute.num_layers.size() == 1 ? " (or a list, one per stage)" : "")));
    }
  }
}

void check_first_stages(const StrategySpec& strategy, int pipeline) {
  if (!strategy.first_stages) return;
  const int k = *strategy.first_stages;
  const std::string at = (strategy.first_stages_location.empty() ? std::string("strategy.first_stages") : strategy.first_stages_location) + ": ";
  if (pipeline <= 1) {
    throw InputError(at + fmt::format("first_stages is {}; the run has no pipeline (parallelism.pipeline 1); expected a pipeline of at least {} stages, "
                                      "or no first_stages",
                                      k, k));
  }
  if (k > pipeline) throw InputError(at + fmt::format("first_stages is {}; the pipeline has {} stages; expected at most {}", k, pipeline, pipeline));
}

StrategySpec strategy_for_stage(const StrategySpec& strategy, const traces::Trace& trace, std::optional<int> stage) {
  StrategySpec out = strategy;
  if (strategy.first_stages) {
    if (!stage) {
      check_first_stages(strategy, 1);  // throws: the rules are per stage, and there is none
    } else if (*stage >= *strategy.first_stages) {
      out.rules.clear();  // a later stage: the base strategy
    }
    out.first_stages.reset();
  }
  if (!strategy.layer_recompute) return out;
  const LayerRecompute& recompute = *strategy.layer_recompute;
  out.layer_recompute.reset();
  const std::string where = recompute.location.empty() ? std::string("strategy.recompute: ") : recompute.location + ": ";
  const std::map<std::string, std::set<int>> lists = numbered_lists(trace);
  if (lists.size() != 1) {
    std::string names;
    for (const auto& entry : lists) names += (names.empty() ? "" : ", ") + entry.first + ".N";
    throw InputError(where + "trace '" + trace.name() + "' has " +
                     (lists.empty() ? std::string("no numbered layers") : "several numbered module lists (" + names + ")") +
                     "; Megatron-LM's recomputation settings apply to a transformer's one list of layers (weights named PREFIX.N..., as "
                     "transformer.h.N or model.layers.N); expected such a trace, or strategy rules");
  }
  const std::optional<Layers> layers = Layers{lists.begin()->first, std::vector<int>(lists.begin()->second.begin(), lists.begin()->second.end())};
  std::optional<StrategyRule> rule;
  if (recompute.granularity == LayerRecompute::Granularity::selective) {
    rule = selective_rule(trace, *layers);
  } else {
    std::size_t entry = 0;
    if (recompute.num_layers.size() > 1) {
      if (!stage) {
        throw InputError(where + fmt::format("num_layers has {} entries, one per pipeline stage, but the run has no pipeline; expected one number",
                                             recompute.num_layers.size()));
      }
      entry = static_cast<std::size_t>(*stage);
      if (entry >= recompute.num_layers.size()) {
        throw InputError(where + fmt::format("num_layers has {} entries; expected one for pipeline stage {} too", recompute.num_layers.size(), *stage));
      }
    }
    const int n = recompute.num_layers.at(entry);
    const int held = static_cast<int>(layers->indices.size());
    if (n > held) {
      throw InputError(place(recompute, entry) + fmt::format("num_layers is {}; {} holds {} layers ({}.{}-{}); expected at most {}", n,
                                                             stage ? fmt::format("pipeline stage {}", *stage) : std::string("the model"), held,
                                                             layers->prefix, layers->indices.front(), layers->indices.back(), held));
    }
    if (n > 0) rule = full_rule(trace, *layers, checkpoint_groups(recompute, layers->indices, n));
  }
  if (rule) {
    rule->location = recompute.location;
    out.rules.push_back(std::move(*rule));
  }
  return out;
}

}  // namespace comptrain::models

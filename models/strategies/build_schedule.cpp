// Strategies -> Schedule. The semantics are documented in models/strategies/README.md; the
// comments here say why the code is shaped the way it is.

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "comptrain/models/gradient_error.hpp"
#include "comptrain/models/module_pattern.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/support/input_error.hpp"
#include "build_internal.hpp"
#include "recompute_evaluator.hpp"

namespace comptrain::models {

namespace {

using traces::OpIndex;
using traces::Phase;
using traces::TensorIndex;
using traces::TensorRole;
using traces::Trace;

using namespace strategy_detail;

// Chen et al. 2016: keep every k-th candidate in forward production order (the k-th, 2k-th,
// ...), drop the rest.
void drop_all_but_every_kth(StorageActions& plan, const std::vector<TensorIndex>& candidates, std::size_t k) {
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    plan.action[candidates[i]] = (i + 1) % k == 0 ? Action::keep : Action::drop;
  }
}

std::string describe(const StrategySpec& spec, const StorageActions& plan, const Analysis& a, const Built& built) {
  std::size_t counts[4] = {0, 0, 0, 0};
  std::int64_t bytes[4] = {0, 0, 0, 0};
  for (TensorIndex s : a.storages) {
    if (!a.info[s].saved) continue;
    const auto i = static_cast<std::size_t>(plan.action[s]);
    ++counts[i];
    bytes[i] += a.trace->tensor(s).bytes();
  }
  std::ostringstream out;
  out << spec.name;
  if (spec.rules.empty()) return out.str();
  out << ": saved activations kept " << counts[0] << " (" << bytes[0] << " B), offloaded " << counts[1] << " ("
      << bytes[1] << " B), compressed " << counts[2] << " (" << bytes[2] << " B), dropped " << counts[3] << " ("
      << bytes[3] << " B); recomputed ops " << built.recompute_tasks << " (" << built.recompute_seconds << " s)";
  // Pinned checkpoint inputs copied out (offload_pinned_inputs): not saved activations, so
  // counted apart, from the copies the schedule holds (an input no replay reads is not copied),
  // and only when there are any.
  std::size_t inputs = 0;
  std::int64_t input_bytes = 0;
  for (const Task& t : built.schedule.tasks) {
    if (t.kind != TaskKind::offload || !t.tensor || a.info[*t.tensor].saved || !plan.pinned[*t.tensor]) continue;
    ++inputs;
    input_bytes += t.bytes;
  }
  if (inputs > 0) out << "; checkpoint inputs offloaded " << inputs << " (" << input_bytes << " B)";
  return out.str();
}

// What PyTorch's selective activation checkpointing holds beyond checkpoints' split
// (torch/utils/checkpoint.py, pytorch/pytorch@0008d771; the same behaviour in the December 2024
// release torchtitan's published runs used). Per checkpointed block (a module instance of
// `rc.blocks`):
//  - _CachingTorchDispatchMode stores the output of every op the policy answers MUST_SAVE in the
//    frame's storage during the forward; _CachedTorchDispatchMode hands it back (and lets go of
//    it) when the recomputation reruns that op. The recomputation runs at the block's first
//    backward use (_checkpoint_hook's unpack_hook) and, with early stop (the default), stops
//    as soon as every tensor the block saved has been packed again (_recomputation_hook's
//    pack_hook raises _StopRecomputationError). An op whose saved tensors are all inputs packs
//    them before it runs (autograd saves inputs before dispatching the op), so the block's last
//    op that saves anything, unless it saves an output, and every op after it never rerun: their
//    cached outputs stay in the storage until the frame dies, with the last autograd node of the
//    block that holds its saved-tensor hooks: the block's last backward op.
//  - non-reentrant checkpoint keeps its tensor arguments (save_inputs) in a node no gradient
//    reaches, also alive as long as the frame: the block's inputs stay to its last backward op.
//    A kept output read by a forward op of another block is such an input (the residual stream
//    `keep` names), not a cached op output.
// A storage's hold is the latest backward op it is held to; held storages count as activations.
void hold_selective_caches(const Analysis& a, const RecomputeAction& rc, StorageActions& plan) {
  const Trace& trace = *a.trace;
  if (plan.held_until.empty()) plan.held_until.assign(trace.tensors().size(), std::nullopt);
  struct Block {
    std::vector<OpIndex> forward;
    std::optional<OpIndex> first_backward;
    std::optional<OpIndex> last_backward;
  };
  std::map<std::string, Block> blocks;
  std::vector<const Block*> block_of_op(trace.ops().size(), nullptr);
  for (OpIndex o = 0; o < trace.ops().size(); ++o) {
    const auto& op = trace.op(o);
    if (op.phase == Phase::optimizer) continue;
    for (const std::string& pattern : rc.blocks) {
      if (const auto instance = module_pattern_instance(pattern, op.name)) {
        Block& block = blocks[std::string(*instance)];
        block_of_op[o] = &block;
        if (op.phase == Phase::forward) {
          block.forward.push_back(o);
        } else {
          if (!block.first_backward) block.first_backward = o;
          block.last_backward = o;
        }
        break;
      }
    }
  }
  const auto read_in_backward = [&](TensorIndex s) {
    const auto& readers = a.info[s].readers;
    return std::any_of(readers.begin(), readers.end(), [&](OpIndex r) { return trace.op(r).phase == Phase::backward; });
  };
  const auto hold = [&](TensorIndex s, OpIndex until) {
    auto& h = plan.held_until[s];
    if (!h || *h < until) h = until;
  };
  for (auto& [name, block] : blocks) {
    if (!block.last_backward || block.forward.empty()) continue;
    // Where the recomputation stops: the last forward op of the block that saves a tensor (one a
    // backward op reads); it reruns only when it saves an output.
    std::optional<std::size_t> reruns_until;  // forward ops [0, reruns_until) rerun
    for (std::size_t i = block.forward.size(); i-- > 0;) {
      const auto& op = trace.op(block.forward[i]);
      const auto saves = [&](const std::vector<TensorIndex>& list) {
        return std::any_of(list.begin(), list.end(), [&](TensorIndex t) { return read_in_backward(trace.storage_of(t)); });
      };
      if (saves(op.outputs)) {
        reruns_until = i + 1;
        break;
      }
      if (saves(op.inputs)) {
        reruns_until = i;
        break;
      }
    }
    const std::size_t rerun = reruns_until.value_or(0);
    std::set<TensorIndex> written_here;
    for (OpIndex o : block.forward) {
      for (TensorIndex t : trace.op(o).outputs) written_here.insert(trace.storage_of(t));
    }
    // A kept output that a forward op outside the block reads is the block's output, which `keep`
    // names as the next block's input (the residual stream), not an op output the policy caches.
    const auto leaves_block = [&](TensorIndex s) {
      for (OpIndex r : a.info[s].readers) {
        if (trace.op(r).phase == Phase::forward && block_of_op[r] != &block) return true;
      }
      return false;
    };
    for (std::size_t i = 0; i < block.forward.size(); ++i) {
      for (TensorIndex t : trace.op(block.forward[i]).outputs) {
        const TensorIndex s = trace.storage_of(t);
        if (plan.action[s] != Action::keep || !matches_any(rc.keep, trace.tensor(s).name) || leaves_block(s)) continue;
        hold(s, i < rerun ? *block.first_backward : *block.last_backward);
      }
    }
    // The checkpoint's tensor arguments: activations the block reads and does not write.
    for (OpIndex o : block.forward) {
      for (TensorIndex t : trace.op(o).inputs) {
        const TensorIndex s = trace.storage_of(t);
        if (!a.info[s].written || written_here.contains(s) || plan.action[s] != Action::keep) continue;
        hold(s, *block.last_backward);
      }
    }
  }
}

struct FixedPlan {
  StorageActions plan;
  std::vector<std::vector<TensorIndex>> recompute_candidates;  // per rule
};

// Every decision but the budget rules': the first matching rule per storage, offload and
// compress actions, the fixed recompute modes; each recompute rule's candidates in forward
// production order (a budget rule's still kept).
bool received_from_another_stage(const Trace& trace, const StorageInfo& info) {
  return std::any_of(info.writers.begin(), info.writers.end(), [&](traces::OpIndex w) {
    const auto& communication = trace.ops()[w].communication;
    return communication && communication->kind == traces::CommunicationKind::recv && communication->group == traces::ParallelGroup::pipeline;
  });
}

// A pinned checkpoint input (below) whose first selecting rule is an offload rule is offloaded:
// torch.utils.checkpoint (non-reentrant) keeps a block's positional tensor arguments through
// _NoopSaveInputs.save_for_backward (torch/utils/checkpoint.py, _checkpoint_without_reentrant_generator),
// before it enters the block's own hooks, so an enclosing saved_tensors_hooks such as save_on_cpu
// (FSDP's offload_wrapper) copies them to the host when the block is entered and back when its
// recomputation unpacks them. (Keyword arguments stay on the frame, get_args, unsaved: a
// block called with its input as a keyword is not offloaded so; Hugging Face's decoder loops
// pass it positionally.) The first rule that selects the storage decides, as for saved
// activations; offload only (no codec is timed or bounded on these inputs).
void offload_pinned_inputs(const Analysis& a, const StrategySpec& strategy, StorageActions& plan) {
  for (TensorIndex s : a.storages) {
    if (!plan.pinned[s] || a.info[s].saved || !used_up_before_backward(a, a.info[s])) continue;
    for (std::size_t r = 0; r < strategy.rules.size(); ++r) {
      if (!selects(a, strategy.rules[r].select, s)) continue;
      if (strategy.rules[r].offload()) {
        plan.action[s] = Action::offload;
        plan.rule[s] = r;
      }
      break;
    }
  }
}

FixedPlan fixed_decisions(const Analysis& a, const StrategySpec& strategy) {
  const Trace& trace = *a.trace;
  FixedPlan fixed;
  StorageActions& plan = fixed.plan;
  plan.action.assign(trace.tensors().size(), Action::keep);
  plan.rule.assign(trace.tensors().size(), kNoRule);
  plan.pinned.assign(trace.tensors().size(), false);
  // First matching rule decides; a storage without a gap stays kept whatever its rule.
  auto& recompute_candidates = fixed.recompute_candidates;
  recompute_candidates.resize(strategy.rules.size());
  for (TensorIndex s : a.storages) {
    if (!a.info[s].saved) continue;
    for (std::size_t r = 0; r < strategy.rules.size(); ++r) {
      const auto& rule = strategy.rules[r];
      if (!selects(a, rule.select, s)) continue;
      // Integer and boolean storages (max-pool indices, dropout masks) hold no values a lossy
      // codec may touch: a compress rule takes them only when it names them.
      if (rule.compress() && !traces::is_floating(trace.tensor(s).dtype) && !names_storage(rule.select, trace.tensor(s).name)) continue;
      plan.rule[s] = r;
      if (a.info[s].gap) {
        if (rule.offload()) plan.action[s] = Action::offload;
        if (rule.compress()) plan.action[s] = Action::compress;
        // A pipeline stage's received input came from another rank: replaying its recv would
        // receive it again, so no recompute mode drops it (Megatron's checkpoints keep a stage's
        // input as they keep any layer's); offload and compress may still take it.
        if (rule.recompute() && !received_from_another_stage(trace, a.info[s])) recompute_candidates[r].push_back(s);
      }
      break;
    }
  }
  // Recompute candidates in forward production order (first writer, then storage).
  for (auto& candidates : recompute_candidates) {
    std::stable_sort(candidates.begin(), candidates.end(), [&](TensorIndex x, TensorIndex y) {
      return a.info[x].writers.front() < a.info[y].writers.front();
    });
  }
  // every_k, sqrt_n and checkpoints first: budget rules then search with those decisions in place.
  for (std::size_t r = 0; r < strategy.rules.size(); ++r) {
    const RecomputeAction* rc = strategy.rules[r].recompute();
    if (!rc || rc->mode == RecomputeAction::Mode::budget) continue;
    const auto& candidates = recompute_candidates[r];
    if (rc->mode == RecomputeAction::Mode::all) {
      for (TensorIndex s : candidates) plan.action[s] = Action::drop;
      continue;
    }
    if (rc->mode == RecomputeAction::Mode::checkpoints || rc->mode == RecomputeAction::Mode::selective) {
      for (TensorIndex s : candidates) plan.action[s] = matches_any(rc->keep, trace.tensor(s).name) ? Action::keep : Action::drop;
      // Block inputs autograd does not save are kept all the same, as checkpoint saves them.
      for (TensorIndex s : a.storages) {
        if (a.info[s].written && !a.info[s].saved && matches_any(rc->keep, trace.tensor(s).name)) plan.pinned[s] = true;
      }
      if (rc->mode == RecomputeAction::Mode::selective) hold_selective_caches(a, *rc, plan);
      continue;
    }
    const std::size_t k = rc->mode == RecomputeAction::Mode::every_k ? static_cast<std::size_t>(rc->k)
                                                                      : ceil_sqrt(candidates.size());
    drop_all_but_every_kth(plan, candidates, k);
  }
  offload_pinned_inputs(a, strategy, plan);
  return fixed;
}

}  // namespace

std::variant<Schedule, NotApplicable> build_schedule(const Trace& trace, const OpTimeModel& time_model, const StrategySpec& strategy) {
  // Megatron-LM's settings become rules for the layers this trace holds (a pipeline's stages
  // resolve them with their stage first: run_pipeline).
  if (strategy.layer_recompute || strategy.first_stages) return build_schedule(trace, time_model, strategy_for_stage(strategy, trace, std::nullopt));
  validate_strategy(strategy);
  const Analysis a = analyse(trace, time_model);
  FixedPlan fixed = fixed_decisions(a, strategy);
  StorageActions& plan = fixed.plan;
  const auto& recompute_candidates = fixed.recompute_candidates;
  for (std::size_t r = 0; r < strategy.rules.size(); ++r) {
    const RecomputeAction* rc = strategy.rules[r].recompute();
    if (!rc || rc->mode != RecomputeAction::Mode::budget) continue;
    if (auto not_applicable = plan_budget(a, strategy, plan, recompute_candidates[r], rc->budget_bytes, r)) return *not_applicable;
  }

  Built built = assemble(a, strategy, plan, true);
  built.schedule.strategy = describe(strategy, plan, a, built);
  // Compressed storages whose decompressed copy a recompute replay reads: their error enters the
  // recomputed activations too, which the gradient-error prediction leaves out (reported).
  std::set<TensorIndex> read_by_recomputation;
  {
    std::map<BufferId, TensorIndex> decompressed;
    for (const Task& task : built.schedule.tasks) {
      if (task.kind == TaskKind::decompress && task.tensor) {
        for (BufferId b : task.creates) decompressed[b] = *task.tensor;
      }
    }
    for (const Task& task : built.schedule.tasks) {
      if (task.kind != TaskKind::recompute) continue;
      for (BufferId b : task.uses) {
        if (auto it = decompressed.find(b); it != decompressed.end()) read_by_recomputation.insert(it->second);
      }
    }
  }
  for (std::size_t r = 0; r < strategy.rules.size(); ++r) {
    const CompressAction* c = strategy.rules[r].compress();
    if (!c || !c->profile) continue;  // explicit numbers are in the scenario already
    CompressionModelUse use;
    use.rule = r;
    use.profile = c->profile->name;
    use.profile_source = c->profile->source;
    use.codec = c->codec;
    use.error_bound = c->error_bound;
    use.error_bound_mode = c->error_bound_mode;
    use.compress = codec_time(*c, true);
    use.decompress = codec_time(*c, false);
    use.ratio_overridden = c->ratio.has_value();
    if (c->adaptive) {
      use.gradient_error_tolerance = c->adaptive->tolerance;
      use.fallback_error_bound = c->adaptive->fallback_error_bound;
    }
    // Per class: the bytes, the compressed bytes (unrounded) and whether a tensor's own
    // features moved its ratio off the class's; then the class's one ratio, or the
    // byte-weighted mean when they did.
    struct ClassTotals {
      double bytes = 0;
      double compressed = 0;
      bool from_values = false;
    };
    std::map<TensorClass, ClassTotals> classes;
    CompressionFeatureUse features;
    features.rule = r;
    for (TensorIndex s : a.storages) {
      if (plan.rule[s] != r || plan.action[s] != Action::compress) continue;
      const TensorClass cls = storage_class(trace, a.info[s]);
      const traces::ValueFeatures& values = storage_values(trace, s, a.info[s]);
      const auto bytes = static_cast<double>(trace.tensor(s).bytes());
      const StorageBound bound = storage_bound(trace, a.info[s], strategy, r, s, values);
      const double ratio = compress_ratio(*c, cls, trace.tensor(s).dtype, bound.relative, values, bound.positive_mask);
      ClassTotals& totals = classes[cls];
      totals.bytes += bytes;
      totals.compressed += bytes / ratio;
      TensorBoundUse& tensor = use.tensors.emplace_back();
      tensor.tensor = trace.tensor(s).name;
      // The consumers, the one the prediction is at first.
      for (std::size_t k = 0; k < bound.model.consumers.size(); ++k) {
        const auto& consumer = bound.model.consumers[(k + bound.worst_consumer) % bound.model.consumers.size()];
        for (traces::OpIndex o : consumer.ops) tensor.consumers.push_back(trace.op(o).name);
      }
      tensor.from = bound.from;
      tensor.why_fallback = bound.why_fallback;
      tensor.relative_error_bound = bound.relative;
      tensor.absolute_error_bound = bound.absolute;
      tensor.ratio = ratio;
      tensor.predicted_gradient_error = bound.predicted;
      if (bound.predicted) tensor.statistics_batch = bound.model.consumers[bound.worst_consumer].measured_batch;
      tensor.relu_mask = bound.model.relu_reader && bound.model.coverage == StorageGradientModel::Coverage::covered;
      tensor.positive_mask = bound.positive_mask;
      tensor.read_by_recomputation = read_by_recomputation.count(s) > 0;
      if (!use.ratio_overridden && traces::element_size(trace.tensor(s).dtype) != 4) use.ratio_converted_to_element_size = true;
      ++features.storages;
      if (uses_values(*c, values)) {
        totals.from_values = true;
        ++features.with_features;
      }
    }
    for (const auto& [cls, totals] : classes) {
      // Tensors of one class can differ in their own features, their relative bound (abs mode)
      // and their element type: the class's figure is what its bytes compressed to.
      use.ratios.emplace_back(cls, totals.compressed > 0 ? totals.bytes / totals.compressed : 1.0);
    }
    built.schedule.compression.push_back(std::move(use));
    built.schedule.compression_features.push_back(features);
  }
  return std::move(built.schedule);
}

std::vector<SavedActivation> saved_activations(const Trace& trace, const OpTimeModel& time_model) {
  const Analysis a = analyse(trace, time_model);
  std::vector<SavedActivation> saved;
  for (TensorIndex s : a.storages) {
    const StorageInfo& info = a.info[s];
    if (!info.gap) continue;
    saved.push_back({s, trace.tensor(s).bytes(), *info.last_forward_use, *info.first_backward_read, info.writers});
  }
  return saved;
}

bool name_matches(const std::string& pattern, const std::string& name) {
  return pattern == name || fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

namespace strategy_detail {

std::size_t recompute_candidate_count(const Trace& trace, const OpTimeModel& time_model, const StrategySpec& strategy, std::size_t rule) {
  validate_strategy(strategy);
  const Analysis a = analyse(trace, time_model);
  return fixed_decisions(a, strategy).recompute_candidates.at(rule).size();
}

std::vector<EvaluatorCheck> check_recompute_evaluator(const Trace& trace, const OpTimeModel& time_model, const StrategySpec& strategy,
                                                      std::size_t rule, const std::vector<std::vector<bool>>& plans) {
  validate_strategy(strategy);
  const Analysis a = analyse(trace, time_model);
  FixedPlan fixed = fixed_decisions(a, strategy);
  const auto& candidates = fixed.recompute_candidates.at(rule);
  RecomputeEvaluator evaluator(a, fixed.plan, candidates);
  std::vector<EvaluatorCheck> checks;
  for (const auto& drop : plans) {
    if (drop.size() != candidates.size()) throw std::invalid_argument("check_recompute_evaluator: a plan of the wrong size");
    for (std::size_t i = 0; i < drop.size(); ++i) {
      evaluator.set(i, drop[i]);
      fixed.plan.action[candidates[i]] = drop[i] ? Action::drop : Action::keep;
    }
    Evaluation incremental = evaluator.evaluate();
    incremental.ordered = evaluator.ordered_seconds();
    checks.push_back({incremental, evaluate(a, strategy, fixed.plan)});
  }
  return checks;
}

}  // namespace strategy_detail

}  // namespace comptrain::models

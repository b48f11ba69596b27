#include "studies/plan/cluster_search.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <stdexcept>
#include <utility>

#include "comptrain/models/collective_compression.hpp"
#include "comptrain/models/data_parallel.hpp"
#include "comptrain/models/parallel_layout.hpp"
#include "comptrain/support/format.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "studies/plan/driver.hpp"

namespace comptrain::sim::planner {

namespace {

// The micro-batches that divide `share` (ascending), up to `ceiling` and in at most
// kMaxAccumulationSteps steps.
std::vector<std::int64_t> share_divisors(std::int64_t share, std::int64_t ceiling) {
  std::vector<std::int64_t> out;
  for (std::int64_t b = 1; b * b <= share; ++b) {
    if (share % b != 0) continue;
    for (const std::int64_t divisor : {b, share / b}) {
      if (divisor <= ceiling && share / divisor <= kMaxAccumulationSteps) out.push_back(divisor);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The degrees of one dimension of the layout search: those listed, or with `all` every divisor
// of `limit` up to `most`.
std::vector<int> degrees_to_try(const std::vector<int>& listed, bool all, int limit, int most, int own) {
  if (!all && listed.empty()) return {own};
  if (!all) return listed;
  std::vector<int> out;
  for (int d = 1; d <= limit && d <= most; ++d) {
    if (limit % d == 0) out.push_back(d);
  }
  return out;
}

// A layout's degrees as a note names one the model does not allow: "TP 2 x PP 4", with VP, CP and
// EP where above 1 (its data-parallel degree may not exist).
std::string layout_degrees(const models::ParallelLayout& layout) {
  std::string text = fmt::format("TP {} x PP {}", layout.tensor, layout.pipeline);
  if (layout.virtual_stages > 1) text += fmt::format(" x VP {}", layout.virtual_stages);
  if (layout.context > 1) text += fmt::format(" x CP {}", layout.context);
  if (layout.expert > 1) text += fmt::format(" x EP {}", layout.expert);
  return text;
}

// ", ZeRO++ hpz+qwz" where a data-parallel spec runs ZeRO++, else nothing: the notes' names of a
// configuration.
std::string zero_plus_plus_suffix(const models::DataParallelSpec& spec) {
  const ZeroPlusPlus setting = zero_plus_plus_of(spec);
  return setting == ZeroPlusPlus{} ? std::string() : fmt::format(", ZeRO++ {}", to_string(setting));
}

// Whether the planner chose hpZ or qgZ (plan.zero_plus_plus) for a layout with model parallelism,
// which the search leaves out: qgZ's two all-to-alls and hpZ's partition of a node's GPUs are
// modelled over a data-parallel group that spans the job (the run refuses qgZ there).
bool zero_plus_plus_needs_data_parallel_only(const PlanSection& plan, const models::DataParallelSpec& spec, const models::ParallelLayout& layout) {
  return !plan.zero_plus_plus.empty() && (spec.hpz_partition_size > 1 || spec.quantized_gradients) && !layout.is_data_parallel_only();
}

// The layout search of one cluster size, ZeRO stage and optimizer place (studies/plan.hpp,
// "Layout search"): each tensor x pipeline x virtual-stage x context x expert degree the model and
// the GPUs allow (models::check_layout, its first broken rule a note) becomes a unit whose
// micro-batches are plan.micro_batches that divide its replica's share of the global batch (and,
// under the interleaved schedule, leave a multiple of P micro-batches); a layout that cannot hold
// its weights, gradients and optimizer state is left out with that bound. A strategy with
// first_stages K is planned on the layouts of at least K stages only (`skipped_first_stages`).
void expand_layouts(const PlanRequest& r, const BatchSizePlan& header, ClusterShape shape, Scenario base, ClusterSearch& search, std::vector<ClusterUnit>& units,
                    std::vector<std::string>& skipped_first_stages, bool& skipped_zero_plus_plus_layouts) {
  const PlanSection& plan = *r.scenario.plan;
  const ParallelismSection& parallelism = *base.parallelism;
  const int gpus = shape.ranks();
  const std::int64_t target = *r.options.target_global_batch;
  if (!base.zoo_model) throw InputError(r.scenario.source + ": plan: a layout search splits a zoo model or a Hugging Face config; expected 'model.zoo' or 'model.hf_config'");
  const zoo::ModelDimensions d = zoo::model_dimensions(*base.zoo_model);
  const models::LayoutModel model{static_cast<int>(d.layers), static_cast<int>(d.heads), static_cast<int>(d.kv_heads), static_cast<int>(d.experts), d.vocab, d.seq_len};
  if ((plan.all_expert_degrees || !plan.expert_degrees.empty()) && d.experts == 0) {
    throw InputError(plan.expert_location + ": searches expert-parallel degrees, but the model is dense (no routed experts); expected an MoE model "
                     "(model.zoo mixtral or qwen2-moe, or an MoE hf_config), or no plan.expert");
  }
  const std::vector<std::int64_t> micro_batches = plan.micro_batches.empty() ? std::vector<std::int64_t>{1, 2, 4} : plan.micro_batches;
  const std::vector<int> listed_virtual_stages = plan.virtual_stages.empty() ? std::vector<int>{parallelism.layout.virtual_stages} : plan.virtual_stages;
  // plan.virtual_stages: all -- for P stages, 1 (P's non-interleaved schedule) and every V >= 2
  // whose P x V chunks split the layers evenly (Megatron-LM asserts num_layers divisible by
  // P x V for the interleaved schedule without a custom layout, megatron/training/arguments.py).
  const auto virtual_stages_of = [&](int p) {
    if (!plan.all_virtual_stages) return listed_virtual_stages;
    std::vector<int> counts{1};
    for (int v = 2; p > 1 && static_cast<std::int64_t>(p) * v <= d.layers; ++v) {
      if (d.layers % (static_cast<std::int64_t>(p) * v) == 0) counts.push_back(v);
    }
    return counts;
  };
  const std::string prefix = fmt::format("{}, {}, optimizer {}{}", describe_shape(shape), data_parallel_name(parallelism.data.zero_stage, header.fsdp),
                                         models::optimizer_place(parallelism.data.offload_optimizer), zero_plus_plus_suffix(parallelism.data));
  for (const int t : degrees_to_try(plan.tensor_degrees, plan.all_tensor_degrees, shape.gpus_per_node, shape.gpus_per_node, parallelism.layout.tensor)) {
    for (const int p : degrees_to_try(plan.pipeline_degrees, plan.all_pipeline_degrees, gpus / std::max(1, t), static_cast<int>(d.layers), parallelism.layout.pipeline)) {
      for (const int v : virtual_stages_of(p)) {
        const int left = gpus / std::max(1, t * p);  // D x C, which the context and expert degrees split
        for (const int c : degrees_to_try(plan.context_degrees, plan.all_context_degrees, left, left, parallelism.layout.context)) {
          for (const int e : degrees_to_try(plan.expert_degrees, plan.all_expert_degrees, left, left, parallelism.layout.expert)) {
            models::ParallelLayout layout = parallelism.layout;
            layout.tensor = t;
            layout.pipeline = p;
            layout.virtual_stages = v;
            layout.context = c;
            layout.expert = e;
            // Virtual stages are the interleaved schedule's; one chunk runs the scenario's own
            // schedule, or 1F1B where that is the interleaved one (which needs two chunks).
            if (v > 1) {
              layout.schedule = models::PipelineSchedule::interleaved;
            } else if (layout.schedule == models::PipelineSchedule::interleaved) {
              layout.schedule = models::PipelineSchedule::one_f_one_b;
            }
            layout.sequence_parallel = t > 1 && plan.sequence_parallel;
            // The scenario's Userbuffers overlap where the layout can have it (sequence
            // parallelism, the tensor-parallel group within a node).
            layout.tp_comm_overlap = parallelism.layout.tp_comm_overlap && layout.sequence_parallel && t <= shape.gpus_per_node;
            layout.pipeline_layers.clear();
            if (zero_plus_plus_needs_data_parallel_only(plan, parallelism.data, layout)) {
              skipped_zero_plus_plus_layouts = true;
              continue;
            }
            const std::vector<models::LayoutProblem> problems = models::check_layout(layout, model, gpus);
            if (!problems.empty()) {
              search.notes.push_back(fmt::format("{}, {}: left out: parallelism.{}: {}", prefix, layout_degrees(layout), problems.front().field, problems.front().message));
              continue;
            }
            const std::string name = fmt::format("{}, {}", prefix, describe_layout(layout, gpus));
            const int replicas = models::data_parallel_degree(layout, gpus);
            if (target % replicas != 0) {
              search.notes.push_back(fmt::format("{}: left out: the target global batch {} is not a multiple of its {} data-parallel replicas", name, target, replicas));
              continue;
            }
            Unit unit;
            unit.ceiling = r.options.max_batch;
            unit.compare = false;
            unit.share = target / replicas;
            unit.model_parallel = !layout.is_data_parallel_only() || layout.sequence_parallel;
            unit.every_divisor = true;  // the layouts compare at the same micro-batches
            for (const std::int64_t b : share_divisors(unit.share, r.options.max_batch)) {
              // Megatron's interleaved schedule needs a multiple of P micro-batches (its assert).
              if (v > 1 && (unit.share / b) % p != 0) continue;
              if (std::find(micro_batches.begin(), micro_batches.end(), b) != micro_batches.end()) unit.divisors.push_back(b);
            }
            if (unit.divisors.empty()) {
              search.notes.push_back(fmt::format("{}: left out: none of the micro-batches tried divides its replica's share {} of the global batch{}", name,
                                                 unit.share, v > 1 ? fmt::format(" into a multiple of {} (the interleaved schedule's)", p) : std::string()));
              continue;
            }
            Scenario scenario = base;
            scenario.parallelism->layout = layout;
            scenario.accumulation_steps = static_cast<int>(unit.share / unit.divisors.front());
            // What the scenario's checks refuse for this layout (ZeRO-2/3 under a pipeline, ...) is a
            // note of the search, and the memory its persistent state needs a bound to prune by.
            try {
              const PreparedScenario prepared(scenario);
              const std::int64_t resident = resident_state_bytes(prepared);
              if (resident > header.limit_bytes) {
                search.notes.push_back(fmt::format("{}: left out: memory: its weights, gradients and optimizer state alone take {} per GPU (first stage), over the "
                                                   "limit {}",
                                                   name, format_bytes(resident), format_bytes(header.limit_bytes)));
                continue;
              }
            } catch (const InputError& error) {
              search.notes.push_back(fmt::format("{}: left out: {}", name, error.what()));
              continue;
            }
            // Each probe sets its own count (share / micro-batch); the interleaved schedule's check,
            // run when the unit is prepared, needs a multiple of P, which the first one is.
            if (v == 1) scenario.accumulation_steps = 1;
            // The strategies whose first_stages this layout's pipeline has.
            std::vector<models::StrategySpec> strategies;
            for (const models::StrategySpec& spec : r.strategies) {
              if (!spec.first_stages || (p > 1 && *spec.first_stages <= p)) {
                strategies.push_back(spec);
              } else if (std::find(skipped_first_stages.begin(), skipped_first_stages.end(), spec.name) == skipped_first_stages.end()) {
                skipped_first_stages.push_back(spec.name);
              }
            }
            if (strategies.empty()) continue;  // the note on skipped_first_stages says why
            units.push_back({std::move(scenario), std::move(unit), std::move(strategies)});
          }
        }
      }
    }
  }
}

}  // namespace

ClusterSearch expand_cluster_search(const PlanRequest& r, const BatchSizePlan& header, std::vector<ClusterUnit>& units) {
  const auto target = r.options.target_global_batch;
  ClusterSearch search;
  search.layouts = r.scenario.plan->searches_layouts();
  const bool fsdp = header.fsdp;
  std::vector<ClusterShape> shapes;
  for (const auto& size : r.scenario.plan->cluster_sizes) shapes.push_back({size.nodes, size.gpus_per_node});
  if (shapes.empty()) shapes.push_back(r.scenario.parallelism ? header.cluster : ClusterShape{1, require_platform(r.scenario).gpus_per_node});
  search.zero_stages = r.scenario.plan->zero_stages;
  if (search.zero_stages.empty()) search.zero_stages.push_back(r.scenario.parallelism ? r.scenario.parallelism->data.zero_stage : 0);
  search.offload_optimizer = r.scenario.plan->offload_optimizer;
  if (search.offload_optimizer.empty()) search.offload_optimizer.push_back(r.scenario.parallelism ? r.scenario.parallelism->data.offload_optimizer : std::nullopt);
  search.comm_hooks = r.scenario.plan->comm_hooks;
  if (search.comm_hooks.empty()) search.comm_hooks.push_back(r.scenario.parallelism ? r.scenario.parallelism->data.comm_hook : models::DdpCommHook::none);
  search.compressed_collectives = r.scenario.plan->compressed_collectives;
  if (search.compressed_collectives.empty()) search.compressed_collectives.push_back(r.scenario.parallelism && r.scenario.parallelism->data.compression);
  // plan.compressed_all_reduce sets the compressed candidates' all-reduce algorithm; without it
  // they keep the scenario's own.
  search.compressed_all_reduce = r.scenario.plan->compressed_all_reduce;
  if (search.compressed_all_reduce.empty()) {
    const auto& compression = r.scenario.parallelism ? r.scenario.parallelism->data.compression : std::nullopt;
    search.compressed_all_reduce.push_back(compression ? compression->all_reduce : models::CompressedAllReduce::ring);
  }
  // plan.zero_plus_plus sets ZeRO++'s options of every configuration; without it each keeps the
  // scenario's own.
  const bool choose_zero_plus_plus = !r.scenario.plan->zero_plus_plus.empty();
  search.zero_plus_plus = r.scenario.plan->zero_plus_plus;
  if (!choose_zero_plus_plus) search.zero_plus_plus.push_back(r.scenario.parallelism ? zero_plus_plus_of(r.scenario.parallelism->data) : ZeroPlusPlus{});
  bool skipped_hooks = false;
  bool skipped_doubling_stages = false;
  bool skipped_zero_plus_plus_stages = false;
  bool skipped_zero_plus_plus_layouts = false;
  bool skipped_hpz_shapes = false;
  bool skipped_pairs = false;
  std::vector<std::string> skipped_first_stages;  // strategies some layout has too few stages for
  for (const ClusterShape shape : shapes) {
    if (target && !search.layouts && *target % shape.ranks() != 0) {
      search.notes.push_back(fmt::format("{}: left out: the target global batch {} is not a multiple of {}", describe_shape(shape), *target, shape.ranks()));
      continue;
    }
    search.shapes.push_back(shape);
    // Only the pairs DeepSpeed has: an offloaded optimizer needs ZeRO, Deep Optimizer States
    // stage 3 (one note for the search, not one per pair).
    // DDP's communication hooks with DDP only, ZeRO++ with ZeRO-3 only (one note each for the search).
    std::vector<std::tuple<int, std::optional<models::OptimizerOffloadSpec>, models::DdpCommHook, bool, models::CompressedAllReduce, ZeroPlusPlus>> stages_and_offloads;
    for (const int stage : search.zero_stages) {
      for (const auto& offload : search.offload_optimizer) {
        if (offload && (stage == 0 || (stage != 3 && (offload->prefetch_optimizer || offload->ratio < 1)))) {
          skipped_pairs = true;
          continue;
        }
        for (const models::DdpCommHook hook : search.comm_hooks) {
          if (hook != models::DdpCommHook::none && stage != 0) {
            skipped_hooks = true;
            continue;
          }
          for (const bool compressed : search.compressed_collectives) {
            // Recursive doubling replaces all-reduces: DDP's (ZeRO reduce-scatters on the ring).
            for (const models::CompressedAllReduce algorithm : compressed ? search.compressed_all_reduce : std::vector{models::CompressedAllReduce::ring}) {
              if (algorithm == models::CompressedAllReduce::recursive_doubling && stage != 0) {
                skipped_doubling_stages = true;
                continue;
              }
              for (const ZeroPlusPlus setting : search.zero_plus_plus) {
                if (choose_zero_plus_plus && setting != ZeroPlusPlus{} && (stage != 3 || fsdp)) {
                  skipped_zero_plus_plus_stages = true;
                  continue;
                }
                // hpZ's partition is a node's GPUs, across more than one node (DeepSpeed's Mixed
                // Precision ZeRO++ tutorial, deepspeed.ai/tutorials/mixed-precision-zeropp: the GPUs
                // per node for multi-node training, unset on one node).
                if (choose_zero_plus_plus && setting.hpz && (shape.nodes < 2 || shape.gpus_per_node < 2)) {
                  skipped_hpz_shapes = true;
                  continue;
                }
                stages_and_offloads.emplace_back(stage, offload, hook, compressed, algorithm, setting);
              }
            }
          }
        }
      }
    }
    for (const auto& [stage, offload, hook, compressed, algorithm, setting] : stages_and_offloads) {
      Scenario scenario = r.scenario;
      ParallelismSection parallelism = scenario.parallelism.value_or(ParallelismSection{});
      parallelism.nodes = shape.nodes;
      parallelism.gpus_per_node = shape.gpus_per_node;
      // The plan's sizes, not the section's lines (the plan section's reader checked them).
      parallelism.nodes_position.clear();
      parallelism.gpus_per_node_position.clear();
      parallelism.data.ranks = shape.ranks();
      parallelism.data.ranks_per_node = shape.gpus_per_node;  // as the run sets it (qgZ's check needs it)
      parallelism.data.zero_stage = stage;
      parallelism.data.offload_optimizer = offload;
      parallelism.data.comm_hook = hook;
      if (!compressed) parallelism.data.compression.reset();
      if (compressed) {
        parallelism.data.compression->all_reduce = algorithm;
        parallelism.compression_algorithm_position.clear();  // the plan's choice, not the section's line
      }
      // FP8 weights are gathered in FP8 by this stage's distributed optimizer, or not.
      parallelism.data.float8_parameter_gather = models::float8_parameter_gather_for(parallelism.data, scenario.float8);
      if (choose_zero_plus_plus) {
        // hpZ's partition: the GPUs of a node, DeepSpeed's recommended value (its ZeRO++ tutorial,
        // deepspeed.ai/tutorials/zeropp: zero_hpz_partition_size ideally the ranks per node).
        parallelism.data.hpz_partition_size = setting.hpz ? shape.gpus_per_node : 1;
        parallelism.data.quantized_weights = setting.qwz;
        parallelism.data.quantized_gradients = setting.qgz;
        // The plan's choice, not the section's lines.
        parallelism.hpz_position.clear();
        parallelism.qgz_position.clear();
      }
      try {
        models::check_data_parallel(parallelism.data);  // the section's other settings may not suit this stage
      } catch (const std::invalid_argument& e) {
        search.notes.push_back(fmt::format("{}, {}, optimizer {}{}: left out: {}", describe_shape(shape), data_parallel_name(stage, fsdp), models::optimizer_place(offload),
                                           zero_plus_plus_suffix(parallelism.data), e.what()));
        continue;
      }
      // gZCCL's recursive doubling needs a power-of-two group (the layouts' groups are checked
      // when each is prepared).
      if (!search.layouts && parallelism.data.compression && parallelism.data.compression->all_reduce == models::CompressedAllReduce::recursive_doubling &&
          !models::recursive_doubling_ranks(shape.ranks())) {
        search.notes.push_back(fmt::format("{}, {}: left out: compressed all-reduces by recursive doubling need a power-of-two number of ranks", describe_shape(shape),
                                           data_parallel_name(stage, fsdp)));
        continue;
      }
      scenario.parallelism = parallelism;
      if (search.layouts) {
        expand_layouts(r, header, shape, std::move(scenario), search, units, skipped_first_stages, skipped_zero_plus_plus_layouts);
        continue;
      }
      if (zero_plus_plus_needs_data_parallel_only(*r.scenario.plan, parallelism.data, parallelism.layout)) {
        skipped_zero_plus_plus_layouts = true;
        continue;
      }
      Unit unit;
      unit.ceiling = r.options.max_batch;
      unit.compare = false;  // the candidates compare with each other instead
      if (target) {
        unit.share = *target / shape.ranks();
        unit.divisors = share_divisors(unit.share, r.options.max_batch);
      }
      if (target && unit.divisors.empty()) {
        search.notes.push_back(fmt::format("{}, {}, optimizer {}: left out: no micro-batch up to {} divides its share {} in at most {} steps",
                                           describe_shape(shape), data_parallel_name(stage, fsdp), models::optimizer_place(offload), r.options.max_batch, unit.share,
                                           kMaxAccumulationSteps));
        continue;
      }
      units.push_back({std::move(scenario), std::move(unit), {}});
    }
  }
  for (const std::string& name : skipped_first_stages) {
    const auto spec = std::find_if(r.strategies.begin(), r.strategies.end(), [&](const models::StrategySpec& s) { return s.name == name; });
    // K = 1 needs a pipeline all the same: without one there are no stages to tell apart.
    search.notes.push_back(fmt::format("'{}' (first_stages {}) is planned on the layouts of at least {} pipeline stages only", name, *spec->first_stages,
                                       std::max(2, *spec->first_stages)));
  }
  if (skipped_hooks) search.notes.push_back("DDP's communication hooks are tried with PyTorch DDP (stage 0) only");
  if (skipped_doubling_stages) search.notes.push_back("compressed all-reduces by recursive doubling are tried with PyTorch DDP (stage 0) only");
  if (skipped_zero_plus_plus_stages) search.notes.push_back("ZeRO++'s settings other than none are tried with DeepSpeed ZeRO-3 only");
  if (skipped_hpz_shapes) {
    search.notes.push_back("ZeRO++'s hpz is tried on more than one node of more than one GPU only (its partition is a node's GPUs; DeepSpeed leaves it "
                           "unset on one node)");
  }
  if (skipped_zero_plus_plus_layouts) {
    search.notes.push_back("ZeRO++'s hpz and qgz are tried on layouts without tensor, pipeline, context or expert parallelism only (modelled over a "
                           "data-parallel group that spans the job)");
  }
  if (skipped_pairs) {
    search.notes.push_back("optimizer offload is tried with the ZeRO stages that have it: cpu with stages 1-3, deep_optimizer_states with stage 3; "
                           "DDP (stage 0) keeps its optimizer on the GPU");
  }
  return search;
}

void gather_candidates(BatchSizePlan& out, std::vector<BatchSizePlan>& unit_plans, const std::vector<std::size_t>& units,
                       const std::vector<std::size_t>& configurations, PlanObjective objective) {
  ClusterSearch& search = *out.cluster_search;
  for (std::size_t k = 0; k < units.size(); ++k) {
    const std::size_t u = units[k];
    if (out.notes.empty()) out.notes = unit_plans[u].notes;  // the same strategies in every unit
    for (StrategyPlan& plan : unit_plans[u].strategies) {
      ClusterCandidate candidate;
      candidate.shape = unit_plans[u].cluster;
      candidate.zero_stage = unit_plans[u].zero_stage;
      candidate.offload_optimizer = unit_plans[u].offload_optimizer;
      candidate.comm_hook = unit_plans[u].comm_hook;
      candidate.compressed_collectives = unit_plans[u].compressed_collectives;
      candidate.compressed_all_reduce = unit_plans[u].compressed_all_reduce;
      candidate.zero_plus_plus = unit_plans[u].zero_plus_plus;
      candidate.hpz_partition_size = unit_plans[u].hpz_partition_size;
      if (search.layouts) candidate.layout = unit_plans[u].layout.value_or(models::ParallelLayout{});
      candidate.configuration = configurations[k];
      candidate.plan = std::move(plan);
      search.candidates.push_back(std::move(candidate));
    }
  }
  search.fastest = fastest_candidate(search.candidates, objective);
}

}  // namespace comptrain::sim::planner

namespace comptrain::sim {

std::optional<std::size_t> fastest_candidate(const std::vector<ClusterCandidate>& candidates, PlanObjective objective) {
  // plan.objective: the most samples per joule, else the fastest.
  const auto score = [&](const StrategyPlan& plan) { return planner::objective_score(objective, plan.best_samples_per_second, plan.best_samples_per_joule); };
  std::optional<std::size_t> fastest;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const StrategyPlan& c = candidates[i].plan;
    if (c.best_batch && (!fastest || score(c) > score(candidates[*fastest].plan))) fastest = i;
  }
  return fastest;
}

}  // namespace comptrain::sim

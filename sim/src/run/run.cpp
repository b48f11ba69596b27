#include "comptrain/sim/run/run.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>
#include <variant>
#include <vector>

#include "comptrain/sim/metrics/iteration_profile.hpp"
#include "comptrain/sim/engine/io_cost.hpp"
#include "comptrain/sim/engine/replay_cost.hpp"

#include "comptrain/models/collective_compression.hpp"
#include "comptrain/models/float8_memory.hpp"
#include "comptrain/models/parallel_layout.hpp"
#include "comptrain/models/pattern_coverage.hpp"
#include "comptrain/models/pipeline_parallel.hpp"
#include "comptrain/models/pipeline_schedule.hpp"
#include "comptrain/models/transform_schedule.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/traces/trace_json.hpp"
#include "comptrain/zoo/zoo.hpp"

namespace comptrain::sim {
namespace {

models::OpTimeModel time_model_for(const Scenario& scenario) {
  models::OpTimeOptions options;
  options.allow_tf32_matmul = scenario.allow_tf32_matmul;
  options.allow_tf32_cudnn = scenario.allow_tf32_cudnn;
  options.channels_last = scenario.channels_last;
  options.cuda_major = scenario.framework.cuda ? scenario.framework.cuda->major : 0;
  options.attention_kernel = scenario.framework.attention_kernel;
  options.compile = scenario.framework.compile;
  options.float8 = scenario.float8;
  // Transformer Engine recasts a weight on the step's first micro-batch only (Float8Scope).
  if (options.float8 && options.float8->recipe == models::Float8Recipe::delayed) {
    options.float8->weight_casts_per_micro_step = 1.0 / static_cast<double>(scenario.accumulation_steps);
  }
  return models::OpTimeModel(require_platform(scenario), options);
}

// The name and module patterns a run's traces must match (models/pattern_coverage.hpp): those of
// the strategy's rules, framework.compile.modules, training.float8.skip and
// parallelism.fsdp.units, each at its own line.
models::PatternCoverage expected_patterns(const Scenario& scenario, const models::StrategySpec& strategy) {
  models::PatternCoverage coverage;
  coverage.expect_rules(strategy, scenario.source);
  const auto expect_list = [&](const std::vector<std::string>& patterns, const std::string& field) {
    for (std::size_t i = 0; i < patterns.size(); ++i) {
      coverage.expect(location_of(scenario, field + "." + std::to_string(i)) + field, patterns[i], models::PatternCoverage::Syntax::module);
    }
  };
  if (scenario.framework.compile) expect_list(scenario.framework.compile->modules, "framework.compile.modules");
  if (scenario.float8) expect_list(scenario.float8->skip, "training.float8.skip");
  if (scenario.parallelism && scenario.parallelism->data.fsdp) expect_list(scenario.parallelism->data.fsdp->units, "parallelism.fsdp.units");
  return coverage;
}

// Where in the scenario an error of the zoo lies: the zoo's messages start with the field they
// are about ("layers: ...", "moe.expert_load: ...", "num_key_value_heads: ..."). A key the model
// section gives is its line; any other field (a Hugging Face config's, a default of the zoo's)
// is the model's hf_config or zoo line. A scenario made in code has only its source.
std::string model_error_location(const Scenario& scenario, std::string_view message) {
  const std::string_view field = message.substr(0, std::min(message.find(':'), message.find('.')));
  if (const auto it = scenario.model_locations.find(std::string(field)); it != scenario.model_locations.end()) return it->second;
  if (const auto it = scenario.model_locations.find(""); it != scenario.model_locations.end()) return it->second;
  return scenario.source + ": ";
}

// "FILE:LINE:COL: parallelism.FIELD: " of a layout key (or the scenario's source).
std::string layout_place(const Scenario& scenario, const std::string& field) {
  if (scenario.parallelism) {
    if (const auto it = scenario.parallelism->layout_positions.find(field); it != scenario.parallelism->layout_positions.end() && !it->second.empty()) {
      return it->second + "parallelism." + field + ": ";
    }
  }
  return scenario.source + ": parallelism." + field + ": ";
}

// The zoo model as one rank of the layout builds it: under tensor parallelism one
// tensor-parallel rank's shard with its collectives (zoo::TensorParallelSpec).
traces::Trace build_zoo_trace(const Scenario& scenario, std::int64_t batch, std::optional<zoo::PipelineStageSpec> stage = std::nullopt) {
  zoo::ModelRequest request;
  static_cast<zoo::ModelSpec&>(request) = *scenario.zoo_model;
  request.batch_size = batch;
  request.pipeline_stage = stage;
  if (scenario.parallelism && scenario.parallelism->layout.tensor > 1) {
    request.tensor_parallel = zoo::TensorParallelSpec{scenario.parallelism->layout.tensor, scenario.parallelism->layout.sequence_parallel,
                                                      scenario.parallelism->layout.tp_comm_overlap};
  }
  if (scenario.parallelism && scenario.parallelism->layout.context > 1) {
    // One context-parallel rank: seq_len / C tokens, its K,V exchange over the context group.
    request.context_parallel = zoo::ContextParallelSpec{
        scenario.parallelism->layout.context,
        scenario.parallelism->layout.context_all_gather ? zoo::ContextParallelSpec::Variant::all_gather : zoo::ContextParallelSpec::Variant::ring};
  }
  // A mixture-of-experts decoder under model parallelism is Megatron-LM's MoE layer on one
  // expert-parallel rank (zoo::ExpertParallelSpec), even at expert degree 1: the layout's
  // tensor and pipeline splits are Megatron's.
  if (scenario.parallelism && !scenario.parallelism->layout.is_data_parallel_only() && zoo::model_dimensions(request).experts > 0) {
    const models::ParallelLayout& layout = scenario.parallelism->layout;
    request.expert_parallel = zoo::ExpertParallelSpec{layout.expert, layout.expert_tensor};
    if (layout.moe_allgather_dispatcher) request.expert_parallel->dispatcher = zoo::ExpertParallelSpec::TokenDispatcher::allgather;
  }
  try {
    traces::Trace trace = zoo::build_model(request);
    // Transformer Engine's FP8 copies and workspaces (models/float8_memory.hpp); not under FSDP,
    // whose sharded weights Transformer Engine does not cache.
    if (scenario.float8 && scenario.float8->recipe == models::Float8Recipe::delayed) {
      const bool fsdp = scenario.parallelism && scenario.parallelism->data.fsdp;
      return models::with_float8_memory(trace, *scenario.float8, !fsdp);
    }
    return trace;
  } catch (const InputError& e) {
    throw InputError(model_error_location(scenario, e.what()) + "model: " + e.what());
  } catch (const std::invalid_argument& e) {
    // The zoo's tensor-parallel rules (a family it does not shard, an MLP width the degree does
    // not divide) are the layout's error; its context- and expert-parallel ones those keys'.
    if (!request.tensor_parallel && !request.pipeline_stage && !request.context_parallel && !request.expert_parallel) throw;
    const std::string_view message = e.what();
    const char* field = message.starts_with("context_parallel")                ? "context"
                        : message.starts_with("expert_parallel.token_dispatcher") ? "moe_token_dispatcher"
                        : message.starts_with("expert_parallel.expert_tensor") ? "expert_tensor"
                        : message.starts_with("expert_parallel")               ? "expert"
                        : message.starts_with("tensor_parallel.sequence_parallel") ? "sequence_parallel"
                        : request.tensor_parallel                              ? "tensor"
                        : request.context_parallel                             ? "context"
                        : request.pipeline_stage                               ? "pipeline"
                                                                               : "expert";
    throw InputError(layout_place(scenario, field) + e.what());
  }
}

// The scenario's trace file (model.trace): an error reading it (unreadable, not a trace) names
// the scenario's line as well as the file's own place.
traces::Trace read_scenario_trace(const Scenario& scenario) {
  try {
    return traces::read_trace_file(*scenario.trace_file);
  } catch (const InputError& e) {
    const auto it = scenario.model_locations.find("");
    throw InputError((it != scenario.model_locations.end() ? it->second : scenario.source + ": ") + "model.trace: " + e.what());
  }
}

// "FILE:LINE:COL: parallelism: " (or "plan: " for a shape the plan section chose): where an error
// of the run's cluster shape is the scenario's.
std::string shape_place(const Scenario& s) {
  bool planned = false;  // one of plan.nodes / plan.gpus (the planner's runs carry it as their parallelism)
  if (s.plan && s.parallelism) {
    for (const PlanSection::ClusterSize& size : s.plan->cluster_sizes) {
      planned = planned || (size.nodes == s.parallelism->nodes && size.gpus_per_node == s.parallelism->gpus_per_node);
    }
  }
  const char* field = planned ? "plan" : "parallelism";
  return location_of(s, field) + field + ": ";
}

}  // namespace

PreparedScenario::PreparedScenario(Scenario scenario)
    : scenario_(std::move(scenario)),
      time_model_(time_model_for(scenario_)),
      framework_(resolve_framework(scenario_.framework, require_platform(scenario_).gpu, scenario_.source)) {
  if (scenario_.trace_file) {
    file_trace_ = read_scenario_trace(scenario_);
    batch_size_ = scenario_.batch_size.value_or(file_trace_->batch_size());
  } else {
    batch_size_ = scenario_.batch_size.value_or(1);
  }
  models::validate_strategy(scenario_.strategy, scenario_.source);
  if (scenario_.data || scenario_.checkpoint) {
    IoInputs io;
    io.platform = require_platform(scenario_);
    io.data = scenario_.data;
    io.checkpoint = scenario_.checkpoint;
    check_io_inputs(io, scenario_.source);
  }
  // A cluster shape the platform does not have is the scenario's error, found before any run, at
  // the line of the count that is too large (the platform may have come from --platform since).
  try {
    check_cluster_shape(require_platform(scenario_), cluster_shape());
  } catch (const InputError& e) {
    if (!scenario_.parallelism) throw InputError(scenario_.source + ": parallelism: " + e.what());
    const ParallelismSection& p = *scenario_.parallelism;
    const bool nodes = p.nodes > require_platform(scenario_).max_nodes();
    const std::string& position = nodes ? p.nodes_position : p.gpus_per_node_position;
    throw InputError((position.empty() ? scenario_.source : position) + (nodes ? ": parallelism.nodes: " : ": parallelism.gpus_per_node: ") + e.what());
  }
  // Sequence bins replay whole iterations of one length each (run_shorter_sequence_bins): a
  // pipeline's stages and the I/O simulation's loader and checkpoints are not run per bin.
  if (const auto& bins = scenario_.sequence_bins) {
    if (is_pipeline(scenario_)) {
      throw InputError(bins->position + "'model.sequence_bins' is not modelled with pipeline stages (parallelism.pipeline > 1); expected one of the two");
    }
    if (scenario_.data || scenario_.checkpoint) {
      throw InputError(bins->position + "'model.sequence_bins' is not modelled with a data or checkpoint section (their simulation runs one length); expected one of the two");
    }
  }
  // ZeRO++'s hpZ groups: consecutive ranks that divide the job and lie within a node or over
  // whole nodes (a collective's groups hold as many ranks on every node they span).
  if (scenario_.parallelism && scenario_.parallelism->data.hpz_partition_size > 1) {
    const ParallelismSection& p = *scenario_.parallelism;
    const int hpz = p.data.hpz_partition_size;
    const ClusterShape shape = cluster_shape();
    if (shape.ranks() % hpz != 0 || (shape.gpus_per_node % hpz != 0 && hpz % shape.gpus_per_node != 0)) {
      throw InputError((p.hpz_position.empty() ? scenario_.source + ": " : p.hpz_position) +
                       fmt::format("'parallelism.zero.zero_hpz_partition_size' is {} on {} node(s) x {} GPUs; expected a divisor of the {} "
                                   "ranks that divides a node's GPUs or is a multiple of them",
                                   hpz, shape.nodes, shape.gpus_per_node, shape.ranks()));
    }
  }
  // ZeRO++'s qgZ: its two all-to-alls run within a node and across the nodes of the whole job,
  // which is the data-parallel group only without tensor, context or expert parallelism.
  if (scenario_.parallelism && scenario_.parallelism->data.quantized_gradients && !scenario_.parallelism->layout.is_data_parallel_only()) {
    const ParallelismSection& p = *scenario_.parallelism;
    throw InputError((p.qgz_position.empty() ? scenario_.source + ": " : p.qgz_position) +
                     "'parallelism.zero.zero_quantized_gradients' (qgZ) is modelled over a data-parallel group that spans the whole job; "
                     "expected tensor, context and expert 1, or zero_quantized_gradients false");
  }
  // gZCCL's recursive doubling pairs the ranks 2^s apart in each all-reduce's group: the data
  // group, and an MoE's expert-data group, must hold a power of two ranks.
  if (scenario_.parallelism && scenario_.parallelism->data.compression &&
      scenario_.parallelism->data.compression->all_reduce == models::CompressedAllReduce::recursive_doubling) {
    const ParallelismSection& p = *scenario_.parallelism;
    const int gpus = cluster_shape().ranks();
    std::vector<std::pair<const char*, int>> groups{{"data-parallel", models::rank_groups(p.layout, gpus, traces::ParallelGroup::data).size}};
    if (p.layout.expert > 1) groups.emplace_back("expert-data", models::rank_groups(p.layout, gpus, traces::ParallelGroup::expert_data).size);
    for (const auto& [what, ranks] : groups) {
      if (models::recursive_doubling_ranks(ranks)) continue;
      throw InputError((p.compression_algorithm_position.empty() ? scenario_.source + ": " : p.compression_algorithm_position) +
                       fmt::format("'parallelism.compression.algorithm' recursive_doubling pairs ranks 2^s apart, and the {} group holds {} ranks; "
                                   "expected a power of two (2, 4, 8, ...), or algorithm ring",
                                   what, ranks));
    }
  }
  // ZeRO-2 reduces at every micro-step, so accumulation repeats what comes before its step, which
  // would repeat the parameters' all-gathers at the iteration's start with every micro-step.
  if (scenario_.parallelism && scenario_.parallelism->data.overlap_param_gather && scenario_.parallelism->data.zero_stage == 2 &&
      scenario_.accumulation_steps > 1) {
    const ParallelismSection& p = *scenario_.parallelism;
    throw InputError((p.overlap_param_gather_position.empty() ? scenario_.source + ": " : p.overlap_param_gather_position) +
                     fmt::format("'parallelism.zero.overlap_param_gather' with stage 2 and gradient_accumulation_steps {} is not modelled; "
                                 "expected stage 1 or gradient_accumulation_steps 1",
                                 scenario_.accumulation_steps));
  }
  if (scenario_.parallelism) check_model_layout();
  check_layer_recompute();
  // strategy.first_stages against the pipeline, at its line (a plan's strategies: the planner).
  models::check_first_stages(scenario_.strategy, scenario_.parallelism ? scenario_.parallelism->layout.pipeline : 1);
  try {
    check_cluster_gpus(cluster_shape());  // the rest of the replay's cost once the schedule is known (replay)
  } catch (const InputError& e) {
    throw InputError(shape_place(scenario_) + e.what());
  }
  // The loader's cost now; the checkpoint's chunks once its size is known (simulate_run_io).
  if (scenario_.data || scenario_.checkpoint) {
    IoInputs io;
    io.platform = require_platform(scenario_);
    io.shape = cluster_shape();
    io.data = scenario_.data;
    io.checkpoint = scenario_.checkpoint;
    check_io_cost(io, location_of(scenario_, "data.workers_per_gpu"), location_of(scenario_, "checkpoint.chunk") + "checkpoint.chunk: ");
  }
}

// Megatron-LM's recomputation settings against the layers of each pipeline stage (the whole
// model without a pipeline), before any run, at the strategy's lines. A trace file's layers are
// known once it is read: strategy_for_stage checks them then.
void PreparedScenario::check_layer_recompute() const {
  const auto& recompute = scenario_.strategy.layer_recompute;
  if (!recompute || !scenario_.zoo_model) return;  // a trace file has no pipeline (check_model_layout)
  zoo::ModelDimensions d;
  try {
    d = zoo::model_dimensions(*scenario_.zoo_model);
  } catch (const InputError& e) {
    throw InputError(model_error_location(scenario_, e.what()) + "model: " + e.what());
  }
  const int pipeline = scenario_.parallelism ? scenario_.parallelism->layout.pipeline : 1;
  if (pipeline == 1) {
    models::check_layer_recompute(*recompute, {static_cast<int>(d.layers)});
    return;
  }
  // Per pipeline rank, the layers of its smallest model chunk: Megatron counts num_layers per
  // chunk (virtual stage k x P + p is rank p's chunk k), so it must fit every chunk of the rank.
  const std::vector<int> virtual_stages = models::stage_layers(scenario_.parallelism->layout, static_cast<int>(d.layers));
  std::vector<int> per_rank(static_cast<std::size_t>(pipeline), std::numeric_limits<int>::max());
  for (std::size_t j = 0; j < virtual_stages.size(); ++j) {
    int& smallest = per_rank[j % static_cast<std::size_t>(pipeline)];
    smallest = std::min(smallest, virtual_stages[j]);
  }
  models::check_layer_recompute(*recompute, per_rank);
}

// The model-parallel layout against the model and the GPUs (models::check_layout), each broken
// rule at the line of the key it is about.
void PreparedScenario::check_model_layout() const {
  const ParallelismSection& p = *scenario_.parallelism;
  const models::ParallelLayout& layout = p.layout;
  const auto at = [&](const std::string& field) {
    const auto it = p.layout_positions.find(field);
    return (it == p.layout_positions.end() || it->second.empty() ? scenario_.source + ": " : it->second) + "parallelism." + field + ": ";
  };
  const bool model_parallel = !layout.is_data_parallel_only() || layout.virtual_stages > 1 || layout.sequence_parallel ||
                              !layout.pipeline_layers.empty() || layout.expert_tensor != 0;
  if (p.moe_token_dispatcher_given && layout.is_data_parallel_only()) {
    // Without model or expert parallelism a mixture of experts is Hugging Face's block (and a
    // trace file is what it is): there is no Megatron dispatcher to choose. The same condition
    // as build_zoo_trace's for Megatron's layer.
    throw InputError(at("moe_token_dispatcher") +
                     "chooses the dispatcher of Megatron-LM's MoE layer, which the zoo builds under tensor, pipeline, context or expert parallelism; "
                     "with data parallelism only a mixture of experts is Hugging Face's expert loop; expected one of those degrees above 1, or no "
                     "moe_token_dispatcher");
  }
  if (!model_parallel) return;
  if (!scenario_.zoo_model) {
    throw InputError(at(layout.tensor > 1 ? "tensor" : layout.pipeline > 1 ? "pipeline" : layout.context > 1 ? "context" : "expert") +
                     "model parallelism splits a zoo model or a Hugging Face config; a trace file is one rank's whole model; expected 'model.zoo' or "
                     "'model.hf_config'");
  }
  zoo::ModelDimensions d;
  try {
    d = zoo::model_dimensions(*scenario_.zoo_model);
  } catch (const InputError& e) {
    throw InputError(model_error_location(scenario_, e.what()) + "model: " + e.what());
  }
  if (p.moe_token_dispatcher_given && d.experts == 0) {
    throw InputError(at("moe_token_dispatcher") + "chooses how a mixture of experts' tokens reach the experts, and the model has none; expected no "
                                                  "moe_token_dispatcher");
  }
  const models::LayoutModel model{static_cast<int>(d.layers), static_cast<int>(d.heads), static_cast<int>(d.kv_heads),
                                  static_cast<int>(d.experts), d.vocab, d.seq_len};
  const std::vector<models::LayoutProblem> problems = models::check_layout(layout, model, cluster_shape().ranks());
  if (!problems.empty()) {
    std::string message;
    for (const models::LayoutProblem& problem : problems) message += (message.empty() ? "" : "\n") + at(problem.field) + problem.message;
    throw InputError(message);
  }
  // Megatron-LM's interleaved schedule runs micro-batches in groups of P (schedules.py asserts
  // num_microbatches % pipeline_model_parallel_size == 0); the micro-batches are the
  // accumulation steps.
  if (layout.schedule == models::PipelineSchedule::interleaved && scenario_.accumulation_steps % layout.pipeline != 0) {
    throw InputError(at("pipeline_schedule") + fmt::format("the interleaved schedule runs the micro-batches in groups of the {} pipeline stages; "
                                                           "training.gradient_accumulation_steps is {}; expected a multiple of {}",
                                                           layout.pipeline, scenario_.accumulation_steps, layout.pipeline));
  }
  // Transformer Engine's Userbuffers map the tensor-parallel ranks' buffers into each other over
  // NVLink, within one node (TE examples/pytorch/comm_gemm_overlap/README.md; its initialize_ub
  // refuses a tensor-parallel group across nodes).
  if (layout.tp_comm_overlap && layout.tensor > cluster_shape().gpus_per_node) {
    throw InputError(at("tp_comm_overlap") + fmt::format("Transformer Engine's Userbuffers overlap needs the {} tensor-parallel ranks within one node of "
                                                         "{} GPUs; expected tensor <= gpus_per_node, or tp_comm_overlap false",
                                                         layout.tensor, cluster_shape().gpus_per_node));
  }
  if (layout.pipeline > 1 && p.data.zero_stage >= 2) {
    throw InputError(at("pipeline") + fmt::format("with ZeRO-{} or FSDP (gradients reduced in every micro-batch) is not modelled; expected "
                                                  "ZeRO-1 (Megatron-LM's distributed optimizer) or DDP, which reduce once per iteration",
                                                  p.data.zero_stage));
  }
  // Context parallelism: each rank holds seq_len / C tokens, which sequence parallelism splits
  // again over the T tensor-parallel ranks (check_layout has checked that 2C divides seq_len).
  if (layout.context > 1 && layout.sequence_parallel && d.seq_len > 0 && (d.seq_len / layout.context) % layout.tensor != 0) {
    throw InputError(at("context") + fmt::format("the {} tokens of a context-parallel rank ({} / {}) do not split over the {} tensor-parallel ranks "
                                                 "of sequence parallelism; expected tensor x 2 x context to divide the sequence length",
                                                 d.seq_len / layout.context, d.seq_len, layout.context, layout.tensor));
  }
  // Expert parallelism's gradients and optimizer state over the expert-data group are modelled
  // for DDP and ZeRO-1 (Megatron-LM's distributed optimizer) only (models::DataParallelSpec::expert_ranks).
  if (layout.expert > 1 && (p.data.zero_stage >= 2 || p.data.offload_optimizer || p.data.fsdp)) {
    throw InputError(at("expert") + fmt::format("is {} with {}; the experts' gradients and optimizer state over their expert-data group are "
                                                "modelled with DDP or ZeRO-1 (Megatron-LM's distributed optimizer) only; expected zero stage 0 "
                                                "or 1 without offload or FSDP, or expert 1",
                                                layout.expert, p.data.fsdp ? "FSDP" : p.data.offload_optimizer ? "an offloaded optimizer"
                                                                                    : fmt::format("ZeRO-{}", p.data.zero_stage)));
  }
  // megatron/training/arguments.py, validate_args ("MoE Spec check"): "When using MoE and tensor
  // parallelism, sequence parallelism must be used."
  if (d.experts > 0 && layout.tensor > 1 && !layout.sequence_parallel) {
    throw InputError(at("sequence_parallel") + fmt::format("is false with tensor {} on a mixture-of-experts model; Megatron-LM requires "
                                                           "sequence parallelism with MoE and tensor parallelism; expected true",
                                                           layout.tensor));
  }
}

traces::Trace PreparedScenario::trace_at(std::int64_t batch) const {
  if (file_trace_) return batch == file_trace_->batch_size() ? *file_trace_ : file_trace_->rescaled(batch);
  return build_zoo_trace(scenario_, batch);
}

namespace {

// What the schedule transforms take from a prepared scenario: plain values of the scenario, its
// platform and its framework resolved on the GPU.
models::TransformSteps transform_steps(const PreparedScenario& prepared) {
  models::TransformSteps steps;
  steps.accumulation_steps = prepared.scenario().accumulation_steps;
  if (const auto& parallelism = prepared.scenario().parallelism) {
    steps.data_parallel = parallelism->data;
    steps.data_parallel->ranks_per_node = prepared.cluster_shape().gpus_per_node;
    const models::ParallelLayout& layout = parallelism->layout;
    if (!layout.is_data_parallel_only()) {
      // Data parallelism runs over the ranks that hold the same dense parameters (Megatron's DP x
      // CP group); place_collectives puts every collective on the run's ranks.
      const int gpus = prepared.cluster_shape().ranks();
      steps.data_parallel->ranks = models::rank_groups(layout, gpus, traces::ParallelGroup::data).size;
      // The experts' gradients and optimizer state over the ranks that hold the same experts.
      if (layout.expert > 1) steps.data_parallel->expert_ranks = models::rank_groups(layout, gpus, traces::ParallelGroup::expert_data).size;
      // One data-parallel rank under model parallelism has nothing to reduce, and Megatron-LM's
      // DDP keeps the gradients in its contiguous buffer (no bucket copies): no data parallelism
      // there, where PyTorch's DDP over a one-GPU job still runs its reducer
      // (models::apply_data_parallel).
      const models::DataParallelSpec& data = *steps.data_parallel;
      if (data.ranks == 1 && data.zero_stage == 0 && !data.fsdp && !data.offload_optimizer) steps.data_parallel.reset();
      steps.layout = layout;
      steps.gpus = gpus;
    }
  }
  steps.platform = &prepared.platform();
  steps.zero_grad = prepared.framework().zero_grad;
  steps.cudnn_workspace_bytes = prepared.framework().cudnn_workspace_bytes;
  steps.dispatch = prepared.platform().host.dispatch;
  steps.compile = prepared.scenario().framework.compile;
  steps.launch_overhead = prepared.platform().gpu.launch_overhead;
  steps.optimizer_ops_per_parameter = prepared.framework().optimizer_ops_per_parameter;
  steps.host_syncs = host_syncs(prepared.framework());
  return steps;
}

}  // namespace

std::variant<ScheduledRun, models::NotApplicable> schedule_run(const PreparedScenario& prepared, const models::StrategySpec& strategy,
                                                               std::int64_t batch) {
  // One schedule is one rank's whole model: a pipeline's stages are run_pipeline's.
  if (is_pipeline(prepared.scenario())) {
    throw InputError(layout_place(prepared.scenario(), "pipeline") +
                     "pipeline stages are replayed for one scenario by `simulate`, `plan` and `validate`; sweeps do not take them yet; "
                     "expected pipeline: 1");
  }
  traces::Trace trace = prepared.trace_at(batch);
  models::PatternCoverage patterns = expected_patterns(prepared.scenario(), strategy);
  patterns.add(trace);
  patterns.check();
  auto schedule = models::build_schedule(trace, prepared.time_model(), strategy);
  if (auto* not_applicable = std::get_if<models::NotApplicable>(&schedule)) return std::move(*not_applicable);
  // Every transform, in the one order models/transform_schedule.hpp gives and explains.
  models::Schedule transformed = models::transform_schedule(std::move(std::get<models::Schedule>(schedule)), trace, transform_steps(prepared));
  return ScheduledRun{strategy, std::move(trace), std::move(transformed)};
}

SimulationResult replay(const PreparedScenario& prepared, const ScheduledRun& run, Isolation isolation) {
  const ClusterShape shape = prepared.cluster_shape();
  // The replay's cost, with the scenario's place (parallelism, or the plan that chose the shape).
  try {
    check_replay_cost(prepared.platform(), run.schedule, shape);
  } catch (const InputError& e) {
    throw InputError(shape_place(prepared.scenario()) + e.what());
  }
  return isolation == Isolation::child_process ? simulate(prepared.platform(), run.schedule, prepared.framework(), shape)
                                               : simulate_in_this_process(prepared.platform(), run.schedule, prepared.framework(), shape);
}

bool is_pipeline(const Scenario& scenario) { return scenario.parallelism && scenario.parallelism->layout.pipeline > 1; }

std::vector<traces::Trace> virtual_stage_traces(const Scenario& scenario, std::int64_t batch) {
  const models::ParallelLayout& layout = scenario.parallelism->layout;
  const zoo::ModelDimensions d = zoo::model_dimensions(*scenario.zoo_model);
  const std::vector<int> layers = models::stage_layers(layout, static_cast<int>(d.layers));
  std::vector<traces::Trace> traces;
  std::int64_t first = 0;
  for (std::size_t j = 0; j < layers.size(); ++j) {
    traces.push_back(build_zoo_trace(scenario, batch, zoo::PipelineStageSpec{first, layers[j], j == 0, j + 1 == layers.size(), layout.pipeline_scatter_gather}));
    first += layers[j];
  }
  return traces;
}

PipelineOutcome run_pipeline(const PreparedScenario& prepared, const models::StrategySpec& strategy, std::int64_t batch, Isolation isolation) {
  const Scenario& scenario = prepared.scenario();
  const models::ParallelLayout& layout = scenario.parallelism->layout;
  const int stages = layout.pipeline;
  const int chunks = layout.virtual_stages;
  const int micro_batches = scenario.accumulation_steps;
  const auto orders = models::pipeline_orders(layout.schedule, stages, micro_batches, chunks);
  const zoo::ModelDimensions d = zoo::model_dimensions(*scenario.zoo_model);
  // Per virtual stage j (P x V of them, in model order): its layers and its first layer.
  const std::vector<int> layers = models::stage_layers(layout, static_cast<int>(d.layers));
  std::vector<std::int64_t> first_layer(layers.size(), 0);
  for (std::size_t j = 1; j < layers.size(); ++j) first_layer[j] = first_layer[j - 1] + layers[j - 1];
  // Every stage's transforms as one rank's (transform_steps), the micro-batches being the
  // pipeline's (accumulation is the schedule's order, not a repetition).
  models::TransformSteps steps = transform_steps(prepared);
  steps.accumulation_steps = 1;
  // Every virtual stage's trace first: a pattern need only match on some stage (a layer's name
  // on its own).
  std::vector<traces::Trace> stage_traces = virtual_stage_traces(scenario, batch);
  models::PatternCoverage patterns = expected_patterns(scenario, strategy);
  for (const traces::Trace& trace : stage_traces) patterns.add(trace);
  patterns.check();
  PipelineRun run;
  for (int p = 0; p < stages; ++p) {
    std::vector<traces::Trace> chunk_traces;
    std::vector<models::Schedule> chunk_schedules;
    std::vector<LayerRange> ranges;
    for (int k = 0; k < chunks; ++k) {
      // Chunk k of rank p runs virtual stage k x P + p (Megatron's interleaved assignment).
      const auto at = static_cast<std::size_t>(k * stages + p);
      chunk_traces.push_back(std::move(stage_traces[at]));
      const traces::Trace& trace = chunk_traces.back();
      // Megatron-LM's recomputation settings apply to each chunk's own layers (its first
      // num_layers under method block, as Megatron counts them per model chunk; the rank's entry
      // of a per-stage list).
      auto schedule = models::build_schedule(trace, prepared.time_model(), models::strategy_for_stage(strategy, trace, p));
      if (auto* not_applicable = std::get_if<models::NotApplicable>(&schedule)) return std::move(*not_applicable);
      chunk_schedules.push_back(std::move(std::get<models::Schedule>(schedule)));
      ranges.push_back(LayerRange{first_layer[at], static_cast<std::int64_t>(layers[at])});
    }
    models::PipelineStageSpec spec;
    spec.rank = p;
    spec.stages = stages;
    spec.virtual_stages = chunks;
    spec.order = orders[static_cast<std::size_t>(p)];
    models::PipelineRank rank = models::apply_pipeline_rank(std::move(chunk_schedules), chunk_traces, spec);
    models::Schedule stage_schedule = models::transform_schedule(std::move(rank.schedule), rank.trace, steps);
    run.stages.push_back(ScheduledRun{strategy, std::move(rank.trace), std::move(stage_schedule)});
    run.chunk_layers.push_back(std::move(ranges));
  }
  const ClusterShape shape = prepared.cluster_shape();
  // The replay takes the stages' schedules as one vector: lent to it and given back rather than
  // copied (a 1T model's 64 stage schedules are gigabytes).
  std::vector<models::Schedule> schedules;
  schedules.reserve(run.stages.size());
  for (ScheduledRun& stage : run.stages) schedules.push_back(std::move(stage.schedule));
  const int stage_ranks = shape.ranks() / stages;
  run.result = isolation == Isolation::child_process
                   ? simulate_pipeline(prepared.platform(), schedules, prepared.framework(), shape, stage_ranks)
                   : simulate_pipeline_in_this_process(prepared.platform(), schedules, prepared.framework(), shape, stage_ranks);
  for (std::size_t p = 0; p < schedules.size(); ++p) run.stages[p].schedule = std::move(schedules[p]);
  return run;
}

std::int64_t resident_state_bytes(const PreparedScenario& prepared) {
  const Scenario& scenario = prepared.scenario();
  // The first pipeline rank's traces: one per model chunk (chunk k is virtual stage k x P).
  std::vector<traces::Trace> rank_traces;
  if (is_pipeline(scenario)) {
    const models::ParallelLayout& layout = scenario.parallelism->layout;
    const zoo::ModelDimensions d = zoo::model_dimensions(*scenario.zoo_model);
    const std::vector<int> layers = models::stage_layers(layout, static_cast<int>(d.layers));
    std::int64_t first = 0;
    for (std::size_t j = 0; j < layers.size(); ++j) {
      if (static_cast<int>(j) % layout.pipeline == 0) {
        rank_traces.push_back(build_zoo_trace(scenario, 1, zoo::PipelineStageSpec{first, layers[j], j == 0, j + 1 == layers.size(), layout.pipeline_scatter_gather}));
      }
      first += layers[j];
    }
  } else {
    rank_traces.push_back(scenario.zoo_model ? build_zoo_trace(scenario, 1) : prepared.trace_at(1));
  }
  std::int64_t weights = 0;
  std::int64_t gradients = 0;
  std::int64_t states = 0;
  for (const traces::Trace& trace : rank_traces) {
    for (const traces::Tensor& t : trace.tensors()) {
      if (t.view_of) continue;  // a view's storage is its base's
      if (t.role == traces::TensorRole::weight) weights += t.bytes();
      if (t.role == traces::TensorRole::gradient) gradients += t.bytes();
      if (t.role == traces::TensorRole::optimizer_state) states += t.bytes();
    }
  }
  if (!scenario.parallelism) return weights + gradients + states;
  const models::DataParallelSpec& data = scenario.parallelism->data;
  // The ranks the replay shards over (transform_steps): Megatron's DP x CP group under a layout
  // (D alone would overstate the state of a layout with context parallelism and prune it
  // wrongly); the experts' state, sharded over fewer ranks (expert_data), is understated by it,
  // which keeps this a lower bound.
  const int gpus = prepared.cluster_shape().ranks();
  const models::ParallelLayout& layout = scenario.parallelism->layout;
  const std::int64_t ranks = std::max(1, layout.is_data_parallel_only() ? prepared.data_parallel_ranks()
                                                                        : models::rank_groups(layout, gpus, traces::ParallelGroup::data).size);
  // ZeRO-1 shards the optimizer state, ZeRO-2 also the gradients, ZeRO-3 / FSDP the weights too.
  if (data.zero_stage >= 1) states /= ranks;
  if (data.zero_stage >= 2) gradients /= ranks;
  if (data.zero_stage >= 3) weights /= ranks;
  if (data.offload_optimizer) states = 0;
  if (data.fsdp && data.fsdp->cpu_offload) return 0;  // every state on the host: no bound
  return weights + gradients + states;
}

int PreparedScenario::data_parallel_ranks() const {
  const int gpus = cluster_shape().ranks();
  if (!scenario_.parallelism) return gpus;
  return models::data_parallel_degree(scenario_.parallelism->layout, gpus);
}

ClusterShape PreparedScenario::cluster_shape() const {
  if (!scenario_.parallelism) return {};
  return ClusterShape{scenario_.parallelism->nodes, scenario_.parallelism->gpus_per_node};
}

std::optional<double> SequenceBinsResult::mean_iteration_seconds() const {
  double mean = 0;
  for (const SequenceBinRun& bin : bins) {
    if (!bin.fits) return std::nullopt;
    mean += bin.weight * bin.iteration_seconds;
  }
  return mean;
}

namespace {

// An input error found while preparing or scheduling a shorter bin, at the bins' key.
InputError bin_error(const SequenceBins& bins, std::int64_t length, const InputError& e) {
  return InputError(bins.position + fmt::format("model.sequence_bins: the bin of {} tokens: {}", length, e.what()));
}

// One shorter bin's iteration. Over many micro-steps (gradient accumulation) the iteration is the
// first micro-step, n - 2 middle ones that repeat exactly (the same tasks on the same streams, from
// the same state: the replay is deterministic) and the last with its reductions and the optimizer
// step: t(n) = t(2) + (n - 2) (t(3) - t(2)). So a bin replays 2 and 3 micro-steps rather than n
// (DeepLearningExamples' 512 micro-steps of 8 bins would take minutes); the tests check it against
// the whole replay. The peak is the 3-step run's: a middle micro-step holds what every later one does.
// The schedule of all n micro-steps is built only where the fold cannot be used (n <= 3, or a
// count of 2 or 3 that does not prepare or schedule): unrolling DeepLearningExamples' 512 copies
// of a bin's micro-step, only to find the strategy applies, took most of such a point's time. Whether
// the strategy applies does not depend on the count (build_schedule runs before the accumulation
// transform), so a strategy that does not apply falls through to the whole schedule and says so.
std::variant<SequenceBinRun, models::NotApplicable> replay_bin(const PreparedScenario& at_bin, const models::StrategySpec& strategy, std::int64_t batch,
                                                               std::int64_t length, double weight, const SequenceBins& bins) {
  const int steps = at_bin.scenario().accumulation_steps;
  const auto whole = [&]() -> std::variant<SequenceBinRun, models::NotApplicable> {
    std::variant<ScheduledRun, models::NotApplicable> scheduled = models::NotApplicable{};
    try {
      scheduled = schedule_run(at_bin, strategy, batch);
    } catch (const InputError& e) {
      throw bin_error(bins, length, e);
    }
    if (auto* not_applicable = std::get_if<models::NotApplicable>(&scheduled)) {
      not_applicable->reason = fmt::format("at the sequence bin of {} tokens: {}", length, not_applicable->reason);
      return std::move(*not_applicable);
    }
    const SimulationResult r = replay(at_bin, std::get<ScheduledRun>(scheduled), Isolation::child_process);
    return SequenceBinRun{length, weight, r.fits() ? r.iteration_seconds : 0.0, r.device.peak_reserved, r.fits()};
  };
  if (steps <= 3) return whole();
  // nullopt where the scenario does not prepare or schedule at n steps (a rule tied to the count):
  // then the whole replay.
  const auto replay_steps = [&](int n) -> std::optional<SimulationResult> {
    Scenario fewer = at_bin.scenario();
    fewer.accumulation_steps = n;
    try {
      const PreparedScenario prepared(std::move(fewer));
      auto run = schedule_run(prepared, strategy, batch);
      if (!std::holds_alternative<ScheduledRun>(run)) return std::nullopt;
      return replay(prepared, std::get<ScheduledRun>(run), Isolation::child_process);
    } catch (const InputError&) {
      return std::nullopt;
    }
  };
  const std::optional<SimulationResult> two = replay_steps(2);
  const std::optional<SimulationResult> three = two ? replay_steps(3) : std::nullopt;
  if (!two || !three) return whole();
  if (!two->fits() || !three->fits()) return SequenceBinRun{length, weight, 0.0, (two->fits() ? *three : *two).device.peak_reserved, false};
  const double seconds = two->iteration_seconds + (steps - 2) * (three->iteration_seconds - two->iteration_seconds);
  return SequenceBinRun{length, weight, seconds, three->device.peak_reserved, true};
}

}  // namespace

std::variant<std::vector<SequenceBinRun>, models::NotApplicable> run_shorter_sequence_bins(const PreparedScenario& prepared,
                                                                                           const models::StrategySpec& strategy, std::int64_t batch) {
  std::vector<SequenceBinRun> shorter;
  const Scenario& scenario = prepared.scenario();
  if (!scenario.sequence_bins || !scenario.zoo_model || !scenario.zoo_model->seq_len) return shorter;
  const SequenceBins& bins = *scenario.sequence_bins;
  const std::int64_t seq_len = *scenario.zoo_model->seq_len;
  // BERT's masked positions: the scenario's (or DeepLearningExamples' default) at seq_len, scaled
  // to the bin (BERT masks 15% of a sequence's tokens; DLE's 80 of 512 is 15.6%).
  // 0: no masked-LM head, or no count to scale (the zoo then says what it needs at the bin's length).
  std::int64_t predictions = 0;
  if (scenario.zoo_model->mlm == zoo::MlmPositions::masked) {
    predictions = scenario.zoo_model->mlm_predictions.value_or(zoo::default_mlm_predictions(seq_len).value_or(0));
  }
  for (std::size_t i = 0; i + 1 < bins.weights.size(); ++i) {
    if (!(bins.weights[i] > 0)) continue;
    Scenario at_bin = scenario;
    at_bin.sequence_bins.reset();
    const std::int64_t length = bins.seq_len_of(i);
    at_bin.zoo_model->seq_len = length;
    if (predictions > 0) at_bin.zoo_model->mlm_predictions = std::max<std::int64_t>(1, (predictions * length + seq_len - 1) / seq_len);
    std::optional<PreparedScenario> bin_prepared;
    try {
      bin_prepared.emplace(std::move(at_bin));
    } catch (const InputError& e) {
      throw bin_error(bins, length, e);
    }
    auto bin = replay_bin(*bin_prepared, strategy, batch, length, bins.weights[i], bins);
    if (auto* not_applicable = std::get_if<models::NotApplicable>(&bin)) return std::move(*not_applicable);
    shorter.push_back(std::get<SequenceBinRun>(bin));
  }
  return shorter;
}

std::optional<double> CompletedRun::sustained_iteration_seconds() const {
  if (io) return io->mean_iteration_seconds;
  if (sequence_bins) return sequence_bins->mean_iteration_seconds();
  return result.iteration_seconds;
}

SequenceBinsResult sequence_bins_result(const Scenario& scenario, std::vector<SequenceBinRun> shorter, const SimulationResult& longest) {
  SequenceBinsResult result;
  const SequenceBins& bins = scenario.sequence_bins.value();
  result.bin_size = bins.bin_size;
  result.bins = std::move(shorter);
  result.bins.push_back(SequenceBinRun{bins.seq_len_of(bins.weights.size() - 1), bins.weights.back(), longest.fits() ? longest.iteration_seconds : 0.0,
                                       longest.device.peak_reserved, longest.fits()});
  return result;
}

RunOutcome run_scenario(const PreparedScenario& prepared, const models::StrategySpec& strategy, std::int64_t batch, Isolation isolation) {
  auto scheduled = schedule_run(prepared, strategy, batch);
  if (auto* not_applicable = std::get_if<models::NotApplicable>(&scheduled)) return std::move(*not_applicable);
  // The shorter sequence bins first: each replays in a child, which must be forked before any
  // replay in this process.
  auto shorter = run_shorter_sequence_bins(prepared, strategy, batch);
  if (auto* not_applicable = std::get_if<models::NotApplicable>(&shorter)) return std::move(*not_applicable);
  // SimGrid's engine runs once per process, and a child forked after it ran inherits it: with an
  // I/O simulation to follow, the replay takes a child and the I/O this process, if offered.
  const bool io_follows = prepared.scenario().data || prepared.scenario().checkpoint;
  SimulationResult result = replay(prepared, std::get<ScheduledRun>(scheduled), io_follows ? Isolation::child_process : isolation);
  std::optional<IoResult> io = simulate_run_io(prepared, std::get<ScheduledRun>(scheduled), result, isolation);
  std::optional<SequenceBinsResult> bins;
  if (prepared.scenario().sequence_bins) bins = sequence_bins_result(prepared.scenario(), std::move(std::get<std::vector<SequenceBinRun>>(shorter)), result);
  return CompletedRun{std::move(std::get<ScheduledRun>(scheduled)), std::move(result), {}, std::move(io), std::move(bins)};
}

std::optional<IoResult> simulate_run_io(const PreparedScenario& prepared, const ScheduledRun& run, const SimulationResult& result,
                                        Isolation isolation) {
  const Scenario& s = prepared.scenario();
  if ((!s.data && !s.checkpoint) || !result.fits() || !(result.iteration_seconds > 0)) return std::nullopt;
  IoInputs io;
  io.platform = prepared.platform();
  io.shape = prepared.cluster_shape();
  io.profile = iteration_profile(run.trace, run.schedule, result, s.accumulation_steps);
  io.data = s.data;
  io.checkpoint = s.checkpoint;
  const models::DataParallelSpec* data_parallel = s.parallelism && io.shape.ranks() > 1 ? &s.parallelism->data : nullptr;
  if (s.checkpoint) io.sizes = checkpoint_sizes(run.trace, data_parallel);
  if (s.plan) io.target_overhead = s.plan->checkpoint_overhead;
  check_io_cost(io, location_of(s, "data.workers_per_gpu"), location_of(s, "checkpoint.chunk") + "checkpoint.chunk: ");
  return isolation == Isolation::child_process ? simulate_io(io) : simulate_io_in_this_process(io);
}

std::optional<double> one_gpu_iteration_seconds(const PreparedScenario& prepared, const models::StrategySpec& strategy, std::int64_t batch) {
  if (!prepared.scenario().parallelism || prepared.cluster_shape().ranks() == 1) return std::nullopt;
  // A model-parallel rank holds a shard: the whole model on one GPU is no baseline for it.
  if (!prepared.scenario().parallelism->layout.is_data_parallel_only()) return std::nullopt;
  Scenario alone = prepared.scenario();
  alone.parallelism.reset();
  const PreparedScenario one_gpu(std::move(alone));
  const RunOutcome outcome = run_scenario(one_gpu, strategy, batch, Isolation::child_process);
  const auto* completed = std::get_if<CompletedRun>(&outcome);
  if (completed == nullptr || !completed->result.fits() || !(completed->result.iteration_seconds > 0)) return std::nullopt;
  return completed->result.iteration_seconds;
}

traces::Trace build_trace(const Scenario& scenario) {
  if (scenario.zoo_model) return build_zoo_trace(scenario, scenario.batch_size.value_or(1));
  traces::Trace trace = read_scenario_trace(scenario);
  if (scenario.batch_size && *scenario.batch_size != trace.batch_size()) return trace.rescaled(*scenario.batch_size);
  return trace;
}

}  // namespace comptrain::sim

// The plan section: strategies to compare, the energy budget, the cluster and optimizer-offload searches.

#include "config/scenario_reader.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace comptrain::sim {

PlanSection ScenarioReader::read_plan(const YAML::Node& node, const std::optional<models::Platform>& platform, const std::optional<ParallelismSection>& parallelism) const {
  require_map(node, "plan");
  check_keys(node, "plan", {"strategies", "margin", "max_batch", "target_global_batch", "memory_metric", "objective", "gpus", "nodes", "zero_stages",
                              "offload_optimizer", "prefetch_optimizer_gaps", "checkpoint_overhead", "energy_budget", "comm_hooks", "compressed_collectives", "compressed_all_reduce", "zero_plus_plus", "tensor", "pipeline", "micro_batches", "sequence_parallel", "recompute",
                              "virtual_stages", "context", "expert"});
  PlanSection plan;
  if (const YAML::Node budget = node["energy_budget"]) plan.energy_budget = read_energy_budget(budget, platform);
  if (const YAML::Node overhead = node["checkpoint_overhead"]) {
    const double value = number(overhead, "plan.checkpoint_overhead");
    if (!(value > 0 && value < 1)) {
      throw InputError(where(overhead.Mark()) + "'plan.checkpoint_overhead' is " + overhead.Scalar() +
                       "; expected a fraction of the iteration in (0, 1), e.g. 0.01");
    }
    plan.checkpoint_overhead = value;
  }
  if (const YAML::Node list = node["strategies"]) {
    if (!list.IsSequence() || list.size() == 0) {
      throw InputError(where(list.Mark()) + "'plan.strategies' must be a non-empty list of strategies (each like 'strategy': a name or a mapping with name and rules)");
    }
    for (std::size_t i = 0; i < list.size(); ++i) plan.strategies.push_back(read_strategy(list[i], "plan.strategies[" + std::to_string(i) + "]"));
  }
  if (const YAML::Node list = node["recompute"]) read_plan_recompute(list, node, plan);
  if (const YAML::Node margin = node["margin"]) {
    const double value = number(margin, "plan.margin");
    if (!(value >= 0 && value < 1)) throw InputError(where(margin.Mark()) + "'plan.margin' is " + margin.Scalar() + "; expected a fraction in [0, 1), e.g. 0.05");
    plan.margin = value;
  }
  if (const YAML::Node metric = node["memory_metric"]) {
    const std::string text = scalar(metric, "plan.memory_metric");
    plan.memory_metric = parse_memory_metric(text);
    if (!plan.memory_metric) {
      throw InputError(where(metric.Mark()) + "'plan.memory_metric' is '" + text + "'; expected reserved (the default), allocated, exact or device");
    }
  }
  if (const YAML::Node objective = node["objective"]) {
    const std::string text = scalar(objective, "plan.objective");
    if (text == "samples_per_second") {
      plan.objective = PlanObjective::samples_per_second;
    } else if (text == "samples_per_joule") {
      plan.objective = PlanObjective::samples_per_joule;
    } else {
      throw InputError(where(objective.Mark()) + "'plan.objective' is '" + text + "'; expected samples_per_second (the default) or samples_per_joule");
    }
  }
  plan.max_batch = optional_positive(node, "max_batch", "plan");
  plan.target_global_batch = optional_positive(node, "target_global_batch", "plan");
  read_cluster_search(node, platform, parallelism, plan);
  read_layout_search(node, plan);
  return plan;
}

// plan.recompute: Megatron-LM's recomputation granularities to plan each candidate under, as the
// strategies to plan (named none, selective, full): none is no recomputation, selective the
// attention core of every layer, full every layer recomputed from its input (method uniform,
// num_layers 1; models::LayerRecompute). With plan.strategies (read before), every strategy under
// every granularity: a strategy without rules is named by the granularity alone (as without
// plan.strategies), another "NAME" under none and "NAME+GRANULARITY" under the others; a
// strategy with its own recompute settings is refused there (the two would conflict).
void ScenarioReader::read_plan_recompute(const YAML::Node& list, const YAML::Node& plan_node, PlanSection& plan) const {
  if (!list.IsSequence() || list.size() == 0) {
    throw InputError(where(list.Mark()) + "'plan.recompute' must be a non-empty list of none, selective, full");
  }
  std::vector<std::string> seen;
  std::vector<models::StrategySpec> granularities;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string field = "plan.recompute[" + std::to_string(i) + "]";
    const std::string word = scalar(list[i], field);
    if (std::find(seen.begin(), seen.end(), word) != seen.end()) throw InputError(where(list[i].Mark()) + "'" + field + "' repeats '" + word + "'");
    seen.push_back(word);
    models::StrategySpec spec;
    spec.name = word;
    if (word == "selective" || word == "full") {
      models::LayerRecompute recompute;
      recompute.location = where(list[i].Mark()) + field;
      if (word == "selective") {
        recompute.granularity = models::LayerRecompute::Granularity::selective;
      } else {
        recompute.granularity = models::LayerRecompute::Granularity::full;
        recompute.method = models::LayerRecompute::Method::uniform;
        recompute.num_layers = {1};
      }
      spec.layer_recompute = recompute;
    } else if (word != "none") {
      throw InputError(where(list[i].Mark()) + "'" + field + "' is '" + word +
                       "'; expected none, selective (the attention core) or full (every layer from its input)");
    }
    granularities.push_back(std::move(spec));
  }
  if (!plan_node["strategies"]) {
    plan.strategies = std::move(granularities);
    return;
  }
  const YAML::Node strategies = plan_node["strategies"];
  std::vector<models::StrategySpec> combined;
  for (const models::StrategySpec& granularity : granularities) {
    for (std::size_t i = 0; i < plan.strategies.size(); ++i) {
      const models::StrategySpec& strategy = plan.strategies[i];
      if (strategy.layer_recompute) {
        throw InputError(where(strategies[i].Mark()) + "'plan.strategies[" + std::to_string(i) + "]' has its own recompute settings, and plan.recompute "
                         "plans every strategy under each of its granularities; expected no recompute in plan.strategies with plan.recompute");
      }
      models::StrategySpec spec = strategy;
      spec.layer_recompute = granularity.layer_recompute;
      if (strategy.rules.empty()) {
        spec.name = granularity.name;
      } else if (granularity.layer_recompute) {
        spec.name = strategy.name + "+" + granularity.name;
      }
      combined.push_back(std::move(spec));
    }
  }
  plan.strategies = std::move(combined);
}

// plan.tensor and plan.pipeline: `all`, or lists of distinct degrees; plan.micro_batches: distinct
// micro-batches; plan.sequence_parallel: a boolean. The layouts need a global batch to divide.
void ScenarioReader::read_layout_search(const YAML::Node& node, PlanSection& plan) const {
  const auto degrees = [&](const char* key, std::vector<int>& out, bool& all) {
    const YAML::Node n = node[key];
    if (!n) return;
    const std::string field = std::string("plan.") + key;
    if (n.IsScalar() && n.Scalar() == "all") {
      all = true;
      return;
    }
    if (!n.IsSequence() || n.size() == 0) throw InputError(where(n.Mark()) + "'" + field + "' must be `all` or a non-empty list of degrees, e.g. [1, 2, 4, 8]");
    for (std::size_t i = 0; i < n.size(); ++i) {
      const std::string item = field + "[" + std::to_string(i) + "]";
      const int value = static_cast<int>(bounded_integer(n[i], item, 1, 1'000'000));
      if (std::find(out.begin(), out.end(), value) != out.end()) throw InputError(where(n[i].Mark()) + "'" + item + "' repeats " + std::to_string(value) + "; expected distinct values");
      out.push_back(value);
    }
  };
  degrees("tensor", plan.tensor_degrees, plan.all_tensor_degrees);
  degrees("pipeline", plan.pipeline_degrees, plan.all_pipeline_degrees);
  degrees("context", plan.context_degrees, plan.all_context_degrees);
  degrees("expert", plan.expert_degrees, plan.all_expert_degrees);
  if (const YAML::Node n = node["expert"]) plan.expert_location = where(n.Mark()) + "plan.expert";
  // plan.virtual_stages: `all` (each pipeline degree's counts that divide its stages' layers,
  // cluster_search.cpp) or a list.
  if (const YAML::Node n = node["virtual_stages"]) {
    if (n.IsScalar() && n.Scalar() == "all") {
      plan.all_virtual_stages = true;
    } else if (!n.IsSequence() || n.size() == 0) {
      throw InputError(where(n.Mark()) + "'plan.virtual_stages' must be `all` or a non-empty list of model chunks per pipeline rank, e.g. [1, 2] (above 1: "
                                         "the interleaved schedule)");
    }
    for (std::size_t i = 0; i < n.size(); ++i) {
      const std::string item = "plan.virtual_stages[" + std::to_string(i) + "]";
      const int value = static_cast<int>(bounded_integer(n[i], item, 1, 1'000'000));
      if (std::find(plan.virtual_stages.begin(), plan.virtual_stages.end(), value) != plan.virtual_stages.end()) {
        throw InputError(where(n[i].Mark()) + "'" + item + "' repeats " + std::to_string(value) + "; expected distinct values");
      }
      plan.virtual_stages.push_back(value);
    }
  }
  if (const YAML::Node n = node["micro_batches"]) {
    if (!plan.searches_layouts()) throw InputError(where(n.Mark()) + "'plan.micro_batches' without a layout search; expected plan.tensor or plan.pipeline beside it");
    if (!n.IsSequence() || n.size() == 0) throw InputError(where(n.Mark()) + "'plan.micro_batches' must be a non-empty list of micro-batch sizes, e.g. [1, 2, 4]");
    for (std::size_t i = 0; i < n.size(); ++i) {
      const std::string item = "plan.micro_batches[" + std::to_string(i) + "]";
      const std::int64_t value = bounded_integer(n[i], item, 1, 1'000'000);
      if (std::find(plan.micro_batches.begin(), plan.micro_batches.end(), value) != plan.micro_batches.end()) {
        throw InputError(where(n[i].Mark()) + "'" + item + "' repeats " + std::to_string(value) + "; expected distinct values");
      }
      plan.micro_batches.push_back(value);
    }
    std::sort(plan.micro_batches.begin(), plan.micro_batches.end());
  }
  if (const YAML::Node n = node["sequence_parallel"]) {
    if (!plan.searches_layouts()) throw InputError(where(n.Mark()) + "'plan.sequence_parallel' without a layout search; expected plan.tensor or plan.pipeline beside it");
    plan.sequence_parallel = boolean(n, "plan.sequence_parallel");
  }
  if (plan.searches_layouts() && !plan.target_global_batch) {
    YAML::Node n;
    for (const char* key : {"tensor", "pipeline", "virtual_stages", "context", "expert"}) {
      if (node[key]) {
        n = node[key];
        break;
      }
    }
    throw InputError(where(n.Mark()) + "a layout search (plan.tensor, plan.pipeline) divides a global batch among the data-parallel replicas; expected "
                     "plan.target_global_batch");
  }
}

// plan.energy_budget: at least one bound, each a positive quantity; the platform must give its
// GPUs' power (gpu.power), without which no point has an energy to hold against the budget.
EnergyBudget ScenarioReader::read_energy_budget(const YAML::Node& node, const std::optional<models::Platform>& platform) const {
  require_map(node, "plan.energy_budget");
  check_keys(node, "plan.energy_budget", {"joules_per_sample", "gpu_average_power", "node_average_power"});
  if (node.size() == 0) {
    throw InputError(where(node.Mark()) + "'plan.energy_budget' is empty; expected at least one of joules_per_sample (e.g. 2.5 J), "
                     "gpu_average_power (e.g. 300 W) or node_average_power (e.g. 4 kW)");
  }
  using models::units::Dimension;
  EnergyBudget budget;
  if (const YAML::Node j = node["joules_per_sample"]) budget.joules_per_sample = bounded_quantity(j, Dimension::energy, "plan.energy_budget.joules_per_sample", {1e-9, 1e12});
  if (const YAML::Node w = node["gpu_average_power"]) budget.gpu_average_watts = bounded_quantity(w, Dimension::power, "plan.energy_budget.gpu_average_power", {1e-3, 1e6});
  if (const YAML::Node w = node["node_average_power"]) budget.node_average_watts = bounded_quantity(w, Dimension::power, "plan.energy_budget.node_average_power", {1e-3, 1e8});
  if (platform && !(platform->gpu.max_power > 0)) {
    throw InputError(where(node.Mark()) + "'plan.energy_budget' needs the GPU's power, but platform '" + platform->name +
                     "' gives no gpu.power; expected a platform with gpu.power {idle, max} (scenarios/platforms/README.md)");
  }
  return budget;
}

// plan.gpus or plan.nodes, and plan.zero_stages: lists of distinct integers. A GPU count up to
// a node's GPUs is one node of that many; a larger one fills whole nodes.
void ScenarioReader::read_cluster_search(const YAML::Node& node, const std::optional<models::Platform>& platform, const std::optional<ParallelismSection>& parallelism,
                                         PlanSection& plan) const {
  const auto list = [&](const char* key, std::int64_t max) {
    std::vector<std::pair<int, YAML::Mark>> out;
    const YAML::Node n = node[key];
    if (!n) return out;
    const std::string field = std::string("plan.") + key;
    if (!n.IsSequence() || n.size() == 0) throw InputError(where(n.Mark()) + "'" + field + "' must be a non-empty list of integers, e.g. [8, 16, 32]");
    for (std::size_t i = 0; i < n.size(); ++i) {
      const std::string item = field + "[" + std::to_string(i) + "]";
      const int value = static_cast<int>(bounded_integer(n[i], item, key == std::string("zero_stages") ? 0 : 1, max));
      for (const auto& [seen, mark] : out) {
        if (seen == value) throw InputError(where(n[i].Mark()) + "'" + item + "' repeats " + std::to_string(value) + "; expected distinct values");
      }
      out.emplace_back(value, n[i].Mark());
    }
    return out;
  };
  constexpr std::int64_t kMaxGpus = 1'000'000;  // as in the parallelism section
  const auto gpus = list("gpus", kMaxGpus);
  const auto nodes = list("nodes", kMaxGpus);
  if (!gpus.empty() && !nodes.empty()) {
    throw InputError(where(node["nodes"].Mark()) + "'plan' has both 'gpus' and 'nodes'; expected one of them (GPU counts, or node counts of full nodes)");
  }
  const int per_node = parallelism ? parallelism->gpus_per_node : platform ? platform->gpus_per_node : 1;
  const std::string per_node_source = parallelism ? "parallelism.gpus_per_node" : platform ? "platform '" + platform->name + "'" : "one GPU per node";
  for (const auto& [count, mark] : gpus) {
    if (count > per_node && count % per_node != 0) {
      throw InputError(where(mark) + "'plan.gpus' has " + std::to_string(count) + " GPUs, which do not fill whole nodes of " + std::to_string(per_node) +
                       " (" + per_node_source + "); expected at most " + std::to_string(per_node) + " or a multiple of " + std::to_string(per_node));
    }
    plan.cluster_sizes.push_back(count <= per_node ? PlanSection::ClusterSize{1, count} : PlanSection::ClusterSize{count / per_node, per_node});
  }
  for (const auto& [count, mark] : nodes) {
    if (static_cast<std::int64_t>(count) * per_node > kMaxGpus) {
      throw InputError(where(mark) + "'plan.nodes' has " + std::to_string(count) + " nodes of " + std::to_string(per_node) + " GPUs; expected at most 1000000 GPUs");
    }
    plan.cluster_sizes.push_back({count, per_node});
  }
  if (platform) {
    const auto& marks = gpus.empty() ? nodes : gpus;
    for (std::size_t i = 0; i < marks.size(); ++i) {
      if (plan.cluster_sizes[i].nodes > platform->max_nodes()) {
        throw InputError(where(marks[i].second) + "'plan." + (gpus.empty() ? "nodes" : "gpus") + "' asks for " + std::to_string(plan.cluster_sizes[i].nodes) +
                         " nodes but platform '" + platform->name + "' has " + std::to_string(platform->max_nodes()) +
                         (platform->network ? " (network.nodes)" : " (no network)") + "; expected at most that");
      }
    }
  }
  if (parallelism && parallelism->data.fsdp) {
    for (const char* key : {"zero_stages", "offload_optimizer", "zero_plus_plus"}) {
      if (node[key]) {
        throw InputError(where(node[key].Mark()) + "'plan." + key + "' searches DeepSpeed configurations, but 'parallelism.fsdp' fixes PyTorch FSDP2; "
                                                    "expected no plan." + key + " with fsdp");
      }
    }
  }
  for (const auto& [stage, mark] : list("zero_stages", 3)) plan.zero_stages.push_back(stage);
  read_offload_search(node, parallelism, plan);
  // plan.comm_hooks: distinct DDP communication hooks.
  if (const YAML::Node hooks = node["comm_hooks"]) {
    if (!hooks.IsSequence() || hooks.size() == 0) throw InputError(where(hooks.Mark()) + "'plan.comm_hooks' must be a non-empty list of none, fp16, bf16 and powersgd");
    for (std::size_t i = 0; i < hooks.size(); ++i) {
      const std::string name = hooks[i].IsScalar() ? hooks[i].Scalar() : std::string("a collection");
      models::DdpCommHook hook = models::DdpCommHook::none;
      if (name == "fp16") {
        hook = models::DdpCommHook::fp16;
      } else if (name == "bf16") {
        hook = models::DdpCommHook::bf16;
      } else if (name == "powersgd") {
        hook = models::DdpCommHook::powersgd;
      } else if (name != "none") {
        throw InputError(where(hooks[i].Mark()) + "'plan.comm_hooks[" + std::to_string(i) + "]' is '" + name + "'; expected none, fp16, bf16 or powersgd");
      }
      if (std::find(plan.comm_hooks.begin(), plan.comm_hooks.end(), hook) != plan.comm_hooks.end()) {
        throw InputError(where(hooks[i].Mark()) + "'plan.comm_hooks[" + std::to_string(i) + "]' repeats " + name + "; expected distinct hooks");
      }
      plan.comm_hooks.push_back(hook);
    }
  }
  // plan.compressed_collectives: distinct booleans; true tries the parallelism section's compression.
  if (const YAML::Node flags = node["compressed_collectives"]) {
    if (!flags.IsSequence() || flags.size() == 0) {
      throw InputError(where(flags.Mark()) + "'plan.compressed_collectives' must be a non-empty list of false and true");
    }
    for (std::size_t i = 0; i < flags.size(); ++i) {
      const std::string field = "plan.compressed_collectives[" + std::to_string(i) + "]";
      const bool on = boolean(flags[i], field);
      if (std::find(plan.compressed_collectives.begin(), plan.compressed_collectives.end(), on) != plan.compressed_collectives.end()) {
        throw InputError(where(flags[i].Mark()) + "'" + field + "' repeats " + (on ? "true" : "false") + "; expected distinct values");
      }
      if (on && !(parallelism && parallelism->data.compression)) {
        throw InputError(where(flags[i].Mark()) + "'" + field + "' is true but the scenario has no 'parallelism.compression'; expected one (the codec and "
                                                 "bound to try) or false only");
      }
      plan.compressed_collectives.push_back(on);
    }
  }
  // plan.compressed_all_reduce: distinct algorithms of the compressed all-reduces.
  if (const YAML::Node algorithms = node["compressed_all_reduce"]) {
    if (!algorithms.IsSequence() || algorithms.size() == 0) {
      throw InputError(where(algorithms.Mark()) + "'plan.compressed_all_reduce' must be a non-empty list of " + std::string(models::kCompressedAllReduceChoices));
    }
    if (!(parallelism && parallelism->data.compression)) {
      throw InputError(where(algorithms.Mark()) + "'plan.compressed_all_reduce' chooses how compressed all-reduces run, but the scenario has no "
                                                  "'parallelism.compression'; expected one (the codec and bound to try)");
    }
    if (!plan.compressed_collectives.empty() && std::find(plan.compressed_collectives.begin(), plan.compressed_collectives.end(), true) == plan.compressed_collectives.end()) {
      throw InputError(where(algorithms.Mark()) + "'plan.compressed_all_reduce' applies to compressed collectives, and 'plan.compressed_collectives' "
                                                  "tries none; expected true among them");
    }
    for (std::size_t i = 0; i < algorithms.size(); ++i) {
      const std::string field = "plan.compressed_all_reduce[" + std::to_string(i) + "]";
      const std::string name = scalar(algorithms[i], field);
      const auto algorithm = models::parse_compressed_all_reduce(name);
      if (!algorithm) {
        throw InputError(where(algorithms[i].Mark()) + "'" + field + "' is '" + name + "'; expected " + std::string(models::kCompressedAllReduceChoices));
      }
      if (std::find(plan.compressed_all_reduce.begin(), plan.compressed_all_reduce.end(), *algorithm) != plan.compressed_all_reduce.end()) {
        throw InputError(where(algorithms[i].Mark()) + "'" + field + "' repeats " + name + "; expected distinct algorithms");
      }
      plan.compressed_all_reduce.push_back(*algorithm);
    }
  }
  // plan.zero_plus_plus: distinct ZeRO++ settings, for a search with ZeRO-3 among its stages.
  if (const YAML::Node settings = node["zero_plus_plus"]) {
    constexpr const char* kNames = "none, hpz, qwz, qgz, hpz+qwz, hpz+qgz, qwz+qgz or all";
    if (!settings.IsSequence() || settings.size() == 0) {
      throw InputError(where(settings.Mark()) + "'plan.zero_plus_plus' must be a non-empty list of ZeRO++ settings: " + kNames);
    }
    const std::vector<int> stages = plan.zero_stages.empty() ? std::vector<int>{parallelism ? parallelism->data.zero_stage : 0} : plan.zero_stages;
    if (std::find(stages.begin(), stages.end(), 3) == stages.end()) {
      throw InputError(where(settings.Mark()) + "'plan.zero_plus_plus' tries ZeRO++, which DeepSpeed runs with ZeRO-3, but the search's stages are " +
                       (plan.zero_stages.empty() ? "the scenario's own (" + std::to_string(stages.front()) + ")" : std::string("plan.zero_stages")) +
                       "; expected 3 in plan.zero_stages or 'parallelism.zero: {stage: 3}'");
    }
    for (std::size_t i = 0; i < settings.size(); ++i) {
      const std::string field = "plan.zero_plus_plus[" + std::to_string(i) + "]";
      const std::string name = settings[i].IsScalar() ? settings[i].Scalar() : std::string("a collection");
      const std::optional<ZeroPlusPlus> setting = parse_zero_plus_plus(name);
      if (!setting) throw InputError(where(settings[i].Mark()) + "'" + field + "' is '" + name + "'; expected " + kNames);
      if (std::find(plan.zero_plus_plus.begin(), plan.zero_plus_plus.end(), *setting) != plan.zero_plus_plus.end()) {
        throw InputError(where(settings[i].Mark()) + "'" + field + "' repeats " + name + "; expected distinct settings");
      }
      plan.zero_plus_plus.push_back(*setting);
    }
  }
}

// plan.offload_optimizer: a list of none, cpu and deep_optimizer_states; the last one is tried
// with every gap of plan.prefetch_optimizer_gaps (default kDefaultGaps), so the planner chooses k.
void ScenarioReader::read_offload_search(const YAML::Node& node, const std::optional<ParallelismSection>& parallelism, PlanSection& plan) const {
  const YAML::Node list = node["offload_optimizer"];
  const YAML::Node gaps = node["prefetch_optimizer_gaps"];
  if (!list) {
    if (gaps) throw InputError(where(gaps.Mark()) + "'plan.prefetch_optimizer_gaps' without 'plan.offload_optimizer'; expected deep_optimizer_states in plan.offload_optimizer");
    return;
  }
  if (!list.IsSequence() || list.size() == 0) {
    throw InputError(where(list.Mark()) + "'plan.offload_optimizer' must be a non-empty list of none, cpu and deep_optimizer_states");
  }
  // Deep Optimizer States' gap k: subgroup x steps on the GPU when (x + 1) % k == 0. The paper
  // (Maurya et al., Middleware 2024) tunes k per model; these cover its range up to 1 in 8.
  static constexpr int kDefaultGaps[] = {2, 3, 4, 6, 8};
  std::vector<int> gap_values;
  if (gaps) {
    if (!gaps.IsSequence() || gaps.size() == 0) throw InputError(where(gaps.Mark()) + "'plan.prefetch_optimizer_gaps' must be a non-empty list of integers >= 1, e.g. [2, 4, 8]");
    for (std::size_t i = 0; i < gaps.size(); ++i) {
      const std::string item = "plan.prefetch_optimizer_gaps[" + std::to_string(i) + "]";
      const int value = static_cast<int>(bounded_integer(gaps[i], item, 1, 1'000'000));
      if (std::find(gap_values.begin(), gap_values.end(), value) != gap_values.end()) {
        throw InputError(where(gaps[i].Mark()) + "'" + item + "' repeats " + std::to_string(value) + "; expected distinct values");
      }
      gap_values.push_back(value);
    }
  } else {
    gap_values.assign(std::begin(kDefaultGaps), std::end(kDefaultGaps));
  }
  // The scenario's own offload keys that are not searched (part_grads_async) stay.
  models::OptimizerOffloadSpec base;
  if (parallelism && parallelism->data.offload_optimizer) base.part_grads_async = parallelism->data.offload_optimizer->part_grads_async;
  std::vector<std::string> seen;
  bool dos = false;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string item = "plan.offload_optimizer[" + std::to_string(i) + "]";
    const std::string name = scalar(list[i], item);
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) throw InputError(where(list[i].Mark()) + "'" + item + "' repeats " + name + "; expected distinct values");
    seen.push_back(name);
    if (name == "none") {
      plan.offload_optimizer.emplace_back(std::nullopt);
    } else if (name == "cpu") {
      models::OptimizerOffloadSpec o = base;
      o.part_grads_async = false;  // a key of the Deep Optimizer States fork, not of DeepSpeed
      plan.offload_optimizer.emplace_back(o);
    } else if (name == "deep_optimizer_states") {
      dos = true;
      for (const int k : gap_values) {
        models::OptimizerOffloadSpec o = base;
        o.prefetch_optimizer = true;
        o.prefetch_optimizer_gap = k;
        plan.offload_optimizer.emplace_back(o);
      }
    } else {
      throw InputError(where(list[i].Mark()) + "'" + item + "' is '" + name + "'; expected none (the optimizer on the GPU), cpu (ZeRO-Offload) or "
                       "deep_optimizer_states (tried with each of plan.prefetch_optimizer_gaps)");
    }
  }
  if (gaps && !dos) throw InputError(where(gaps.Mark()) + "'plan.prefetch_optimizer_gaps' without deep_optimizer_states in 'plan.offload_optimizer'; expected it there");
}

}  // namespace comptrain::sim

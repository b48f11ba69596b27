#include "comptrain/sim/studies/plan.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "comptrain/sim/core/data_parallel_name.hpp"
#include "comptrain/sim/core/strategy_json.hpp"

// The planner's public helpers; the planner itself is in studies/plan/ (make_plans.cpp first).
namespace comptrain::sim {

std::vector<models::StrategySpec> strategies_to_plan(const Scenario& scenario) {
  if (scenario.plan && !scenario.plan->strategies.empty()) return scenario.plan->strategies;
  std::vector<models::StrategySpec> out(3);
  out[0].name = "baseline";
  out[1].name = "offload";
  out[1].rules.push_back({{}, models::OffloadAction{}});
  out[2].name = "recompute";
  out[2].rules.push_back({{}, models::RecomputeAction{}});
  // The scenario's own strategy, unless it is one of these under another name.
  const std::string own = detail::strategy_rules_key(scenario.strategy);
  if (std::none_of(out.begin(), out.end(), [&](const auto& s) { return detail::strategy_rules_key(s) == own; })) out.push_back(scenario.strategy);
  return out;
}

PlanOptions plan_options_for(const Scenario& scenario, PlanOptions base) {
  if (!scenario.plan) return base;
  if (scenario.plan->margin) base.margin = *scenario.plan->margin;
  if (scenario.plan->max_batch) base.max_batch = *scenario.plan->max_batch;
  if (scenario.plan->target_global_batch) base.target_global_batch = scenario.plan->target_global_batch;
  if (scenario.plan->memory_metric) base.memory_metric = *scenario.plan->memory_metric;
  if (scenario.plan->objective) base.objective = *scenario.plan->objective;
  if (scenario.plan->energy_budget) base.energy_budget = scenario.plan->energy_budget;
  return base;
}

std::string_view to_string(PlanLimit limit) {
  switch (limit) {
    case PlanLimit::memory: return "memory";
    case PlanLimit::network: return "network";
    case PlanLimit::host: return "host";
    case PlanLimit::compute: return "compute";
    case PlanLimit::not_applicable: return "not_applicable";
    case PlanLimit::failed: return "failed";
    case PlanLimit::loader: return "loader";
    case PlanLimit::storage: return "storage";
    case PlanLimit::checkpoint: return "checkpoint";
    case PlanLimit::energy_budget: return "energy_budget";
    case PlanLimit::bubble: return "bubble";
  }
  return "?";
}

const PlanPoint* point_at(const StrategyPlan& s, std::int64_t batch) {
  const auto it = std::find_if(s.points.begin(), s.points.end(), [&](const PlanPoint& q) { return q.batch == batch; });
  return it == s.points.end() ? nullptr : &*it;
}

std::string data_parallel_name(int zero_stage, bool fsdp) { return sim::data_parallel_name(zero_stage, fsdp, NameStyle::short_form); }

std::string describe_layout(const models::ParallelLayout& layout, int gpus) {
  // "comm overlap": parallelism.tp_comm_overlap, Transformer Engine's Userbuffers.
  std::string text = fmt::format("TP {}{} x PP {}", layout.tensor,
                                 layout.tp_comm_overlap ? " (SP, comm overlap)" : layout.sequence_parallel ? " (SP)" : "", layout.pipeline);
  // Megatron's virtual pipeline (--virtual-pipeline-model-parallel-size): chunks per rank.
  if (layout.virtual_stages > 1) text += fmt::format(" x VP {}", layout.virtual_stages);
  if (layout.context > 1) text += fmt::format(" x CP {}", layout.context);
  if (layout.expert > 1) text += fmt::format(" x EP {}", layout.expert);
  return text + fmt::format(" x DP {}", models::data_parallel_degree(layout, gpus));
}

std::string describe_shape(ClusterShape shape) {
  return fmt::format("{} GPU{} ({} node{} x {})", shape.ranks(), shape.ranks() == 1 ? "" : "s", shape.nodes, shape.nodes == 1 ? "" : "s", shape.gpus_per_node);
}

}  // namespace comptrain::sim

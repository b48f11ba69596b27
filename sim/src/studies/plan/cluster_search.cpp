#include "studies/plan/cluster_search.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <tuple>
#include <stdexcept>
#include <utility>

#include "comptrain/models/data_parallel.hpp"
#include "studies/plan/driver.hpp"

namespace comptrain::sim::planner {

ClusterSearch expand_cluster_search(const PlanRequest& r, const BatchSizePlan& header, std::vector<ClusterUnit>& units) {
  const auto target = r.options.target_global_batch;
  ClusterSearch search;
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
  bool skipped_hooks = false;
  bool skipped_pairs = false;
  for (const ClusterShape shape : shapes) {
    if (target && *target % shape.ranks() != 0) {
      search.notes.push_back(fmt::format("{}: left out: the target global batch {} is not a multiple of {}", describe_shape(shape), *target, shape.ranks()));
      continue;
    }
    search.shapes.push_back(shape);
    // Only the pairs DeepSpeed has: an offloaded optimizer needs ZeRO, Deep Optimizer States
    // stage 3 (one note for the search, not one per pair).
    // DDP's communication hooks with DDP only (one note for the search).
    std::vector<std::tuple<int, std::optional<models::OptimizerOffloadSpec>, models::DdpCommHook>> stages_and_offloads;
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
          stages_and_offloads.emplace_back(stage, offload, hook);
        }
      }
    }
    for (const auto& [stage, offload, hook] : stages_and_offloads) {
      Scenario scenario = r.scenario;
      ParallelismSection parallelism = scenario.parallelism.value_or(ParallelismSection{});
      parallelism.nodes = shape.nodes;
      parallelism.gpus_per_node = shape.gpus_per_node;
      // The plan's sizes, not the section's lines (the plan section's reader checked them).
      parallelism.nodes_position.clear();
      parallelism.gpus_per_node_position.clear();
      parallelism.data.ranks = shape.ranks();
      parallelism.data.zero_stage = stage;
      parallelism.data.offload_optimizer = offload;
      parallelism.data.comm_hook = hook;
      try {
        models::check_data_parallel(parallelism.data);  // the section's other settings may not suit this stage
      } catch (const std::invalid_argument& e) {
        search.notes.push_back(fmt::format("{}, {}, optimizer {}: left out: {}", describe_shape(shape), data_parallel_name(stage, fsdp), models::optimizer_place(offload), e.what()));
        continue;
      }
      scenario.parallelism = parallelism;
      Unit unit;
      unit.ceiling = r.options.max_batch;
      unit.compare = false;  // the candidates compare with each other instead
      if (target) {
        unit.share = *target / shape.ranks();
        for (std::int64_t b = 1; b * b <= unit.share; ++b) {
          if (unit.share % b != 0) continue;
          for (const std::int64_t divisor : {b, unit.share / b}) {
            if (divisor <= r.options.max_batch && unit.share / divisor <= kMaxAccumulationSteps) unit.divisors.push_back(divisor);
          }
        }
        std::sort(unit.divisors.begin(), unit.divisors.end());
        unit.divisors.erase(std::unique(unit.divisors.begin(), unit.divisors.end()), unit.divisors.end());
      }
      if (target && unit.divisors.empty()) {
        search.notes.push_back(fmt::format("{}, {}, optimizer {}: left out: no micro-batch up to {} divides its share {} in at most {} steps",
                                           describe_shape(shape), data_parallel_name(stage, fsdp), models::optimizer_place(offload), r.options.max_batch, unit.share,
                                           kMaxAccumulationSteps));
        continue;
      }
      units.push_back({std::move(scenario), std::move(unit)});
    }
  }
  if (skipped_hooks) search.notes.push_back("DDP's communication hooks are tried with PyTorch DDP (stage 0) only");
  if (skipped_pairs) {
    search.notes.push_back("optimizer offload is tried with the ZeRO stages that have it: cpu with stages 1-3, deep_optimizer_states with stage 3; "
                           "DDP (stage 0) keeps its optimizer on the GPU");
  }
  return search;
}

void gather_candidates(BatchSizePlan& out, std::vector<BatchSizePlan>& unit_plans, const std::vector<std::size_t>& units, PlanObjective objective) {
  ClusterSearch& search = *out.cluster_search;
  for (const std::size_t u : units) {
    if (out.notes.empty()) out.notes = unit_plans[u].notes;  // the same strategies in every unit
    for (StrategyPlan& plan : unit_plans[u].strategies) {
      ClusterCandidate candidate;
      candidate.shape = unit_plans[u].cluster;
      candidate.zero_stage = unit_plans[u].zero_stage;
      candidate.offload_optimizer = unit_plans[u].offload_optimizer;
      candidate.comm_hook = unit_plans[u].comm_hook;
      candidate.plan = std::move(plan);
      search.candidates.push_back(std::move(candidate));
    }
  }
  for (std::size_t i = 0; i < search.candidates.size(); ++i) {
    const StrategyPlan& c = search.candidates[i].plan;
    // plan.objective: the most samples per joule, else the fastest.
    const auto score = [&](const StrategyPlan& c_plan) { return objective_score(objective, c_plan.best_samples_per_second, c_plan.best_samples_per_joule); };
    if (c.best_batch && (!search.fastest || score(c) > score(search.candidates[*search.fastest].plan))) search.fastest = i;
  }
}

}  // namespace comptrain::sim::planner

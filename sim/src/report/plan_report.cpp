#include "comptrain/sim/report/plan_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string_view>
#include <nlohmann/json.hpp>

#include "comptrain/models/data_parallel.hpp"
#include "comptrain/support/format.hpp"
#include "comptrain/support/input_error.hpp"
#include "report/documents.hpp"
#include "report/energy_report.hpp"
#include "report/plan_from_json.hpp"

namespace comptrain::sim {

using nlohmann::ordered_json;

namespace {

std::string strategy_description(const StrategyPlan& s, const BatchSizePlan& plan) {
  if (!s.max_batch) {
    if (s.points.empty()) return "not simulated";
    const PlanPoint& one = s.points.front();
    if (one.inapplicable) return "the strategy does not apply at batch 1";
    if (one.simulation_failed) return "the simulation failed at batch 1 (see the warnings)";
    return fmt::format("does not fit at batch 1: needs {}{} of {} allowed", one.out_of_memory ? "more than " : "", format_bytes(one.peak_bytes),
                       format_bytes(plan.limit_bytes));
  }
  return {};
}

// One line under the table: which strategy trains the largest batch, which is fastest, and
// what the largest one costs against the baseline.
std::string verdict(const BatchSizePlan& plan) {
  const StrategyPlan* largest = nullptr;
  const StrategyPlan* fastest = nullptr;
  for (const StrategyPlan& s : plan.strategies) {
    if (!s.max_batch) continue;
    if (!largest || *s.max_batch > *largest->max_batch) largest = &s;
    if (s.best_batch && (!fastest || s.best_samples_per_second > fastest->best_samples_per_second)) fastest = &s;
  }
  if (!largest) return plan.cluster.ranks() > 1 ? "Verdict: no strategy fits at micro-batch 1 per GPU." : "Verdict: no strategy fits at batch 1 on this GPU.";
  if (!fastest) return "Verdict: batches fit, but no strategy runs one within the energy budget (plan.energy_budget): infeasible.";
  const char* rate = plan.cluster.ranks() > 1 ? "global samples/s" : "samples/s";
  std::string out = fmt::format("Verdict: {} runs the largest batch ({}{})", largest->strategy, largest->max_is_ceiling ? ">= " : "", *largest->max_batch);
  if (largest->vs_baseline) {
    const auto& c = *largest->vs_baseline;
    out += fmt::format(", saving {:.0f}% of peak memory at batch {} ({:.0f}% of max_memory_allocated, {:.0f}% of max_memory_reserved) for a {:.2f}x slowdown",
                       100 * c.peak_saved_fraction, c.batch, 100 * c.allocated_saved_fraction, 100 * c.reserved_saved_fraction, c.slowdown);
  }
  if (fastest == largest) return out + fmt::format("; it is also the fastest ({:.1f} {}).", fastest->best_samples_per_second, rate);
  return out + fmt::format("; {} is the fastest ({:.1f} {} at batch {}).", fastest->strategy, fastest->best_samples_per_second, rate, *fastest->best_batch);
}

std::string percent_or_dash(const std::optional<double>& fraction) { return fraction ? fmt::format("{:.1f}%", 100 * *fraction) : "-"; }

// The lines under the header for a plan with I/O (plan.hpp, "I/O").
std::string io_lines(const BatchSizePlan& plan) {
  if (!plan.io_modelled) return {};
  std::string out =
      "I/O        the data loader and checkpoints simulated at every fitting batch (sim/io.hpp): samples/s over the mean iteration (the\n"
      "           replay's + the wait for the batch + the checkpoint's cost per iteration); wait and ckpt as shares of it; bound: what sets the\n"
      "           pace (gpu, network, host, loader, storage)\n";
  if (plan.checkpoint_overhead) {
    out += fmt::format("Checkpoint every: the smallest interval whose cost is within plan.checkpoint_overhead ({:.2f}% of the iteration) at the best batch\n",
                       100 * *plan.checkpoint_overhead);
  }
  return out;
}

bool shows_energy(const PlanOptions& o) { return o.energy_budget.has_value() || o.objective == PlanObjective::samples_per_joule; }

std::string describe_budget(const EnergyBudget& b) {
  std::string out;
  const auto add = [&](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
  if (b.joules_per_sample) add(fmt::format("<= {} per sample", detail::format_joules(*b.joules_per_sample)));
  if (b.gpu_average_watts) add(fmt::format("<= {} average per GPU", detail::format_watts(*b.gpu_average_watts)));
  if (b.node_average_watts) add(fmt::format("<= {} average per node", detail::format_watts(*b.node_average_watts)));
  return out;
}

// The lines under the header for plan.objective and plan.energy_budget.
std::string energy_lines(const PlanOptions& o) {
  std::string out;
  if (o.objective == PlanObjective::samples_per_joule) out += "Objective  samples per joule: the best batch trains the most samples per joule of the whole job\n";
  if (o.energy_budget) {
    out += fmt::format("Energy     budget {} (plan.energy_budget, over the mean iteration): the best batch is chosen among those within it;\n"
                       "           none within it is a result (limit energy_budget), not an error\n",
                       describe_budget(*o.energy_budget));
  }
  return out;
}

// The I/O columns: the mean iteration (unless the table has it already: `with_mean` false), the
// wait for the batch and the checkpoint's cost as shares of it, the bound, and the interval for
// plan.checkpoint_overhead.
std::string io_header_cells(const BatchSizePlan& plan, bool with_mean) {
  std::string out = with_mean ? fmt::format("{:>10}  ", "mean iter.") : std::string();
  out += fmt::format("{:>6}  {:>6}  {:<7}  ", "wait", "ckpt", "bound");
  if (plan.checkpoint_overhead) out += fmt::format("{:>5}  ", "every");
  return out;
}

std::string io_cells(const PlanPoint& p, const BatchSizePlan& plan, bool with_mean) {
  const auto share = [&](double seconds) { return fmt::format("{:.1f}%", p.mean_iteration_seconds > 0 ? 100 * seconds / p.mean_iteration_seconds : 0.0); };
  std::string out = with_mean ? fmt::format("{:>10}  ", format_seconds(p.mean_iteration_seconds)) : std::string();
  out += fmt::format("{:>6}  {:>6}  {:<7}  ", share(p.data_wait_seconds), share(p.checkpoint_seconds_per_iteration),
                     p.io_modelled ? std::string(to_string(p.io_bound)) : "-");
  if (plan.checkpoint_overhead) out += fmt::format("{:>5}  ", p.checkpoint_interval_for_target > 0 ? std::to_string(p.checkpoint_interval_for_target) : "-");
  return out;
}

std::string energy_header_cells() { return fmt::format("{:>10}  {:>10}  {:>10}  ", "J/sample", "GPU avg", "node avg"); }

std::string energy_cells(const PlanPoint& p) {
  return fmt::format("{:>10}  {:>10}  {:>10}  ", p.samples_per_joule > 0 ? detail::format_joules(1 / p.samples_per_joule) : "-",
                     detail::format_watts(p.gpu_average_watts), detail::format_watts(p.node_average_watts));
}

// For a strategy whose fitting batches are all over the energy budget: the least each bounded
// quantity reaches among them, against its bound.
std::string closest_to_budget(const StrategyPlan& s, const PlanOptions& o) {
  if (!o.energy_budget) return "-";
  double joules = 0, gpu = 0, node = 0;
  bool any = false;
  for (const PlanPoint& p : s.points) {
    if (!p.fits || !(p.samples_per_joule > 0)) continue;
    const double j = 1 / p.samples_per_joule;
    joules = any ? std::min(joules, j) : j;
    gpu = any ? std::min(gpu, p.gpu_average_watts) : p.gpu_average_watts;
    node = any ? std::min(node, p.node_average_watts) : p.node_average_watts;
    any = true;
  }
  if (!any) return "no fitting batch has an energy";
  const EnergyBudget& b = *o.energy_budget;
  std::string out = "the fitting batches reach at best";
  if (b.joules_per_sample) out += fmt::format(" {} per sample (budget {})", detail::format_joules(joules), detail::format_joules(*b.joules_per_sample));
  if (b.gpu_average_watts) out += fmt::format(" {} per GPU (budget {})", detail::format_watts(gpu), detail::format_watts(*b.gpu_average_watts));
  if (b.node_average_watts) out += fmt::format(" {} per node (budget {})", detail::format_watts(node), detail::format_watts(*b.node_average_watts));
  return out;
}

// Which simulated batches the loader or the storage bounds, per strategy (or configuration), so
// that a reader sees where adding workers or bandwidth would pay.
std::string io_bound_lines(const std::vector<std::pair<std::string, const StrategyPlan*>>& plans) {
  std::string out;
  for (const auto& [name, s] : plans) {
    for (const IterationBound bound : {IterationBound::loader, IterationBound::storage}) {
      std::string batches;
      double most_wait = 0;
      for (const PlanPoint& p : s->points) {
        if (!p.io_modelled || p.io_bound != bound) continue;
        batches += (batches.empty() ? "" : ", ") + std::to_string(p.batch);
        most_wait = std::max(most_wait, p.data_wait_seconds);
      }
      if (!batches.empty()) {
        out += fmt::format("{}-bound: {} at batch{} {} (waiting up to {} per iteration for the batch)\n", to_string(bound), name,
                           batches.find(',') == std::string::npos ? "" : "es", batches, format_seconds(most_wait));
      }
    }
  }
  return out.empty() ? out : "\n" + out;
}

// The lines under the header that say what the batches and samples/s of a cluster plan mean.
std::string cluster_lines(const BatchSizePlan& plan) {
  const int gpus = plan.cluster.ranks();
  std::string out = fmt::format("GPUs       {}, {}, optimizer on {}: batches are per-GPU micro-batches; samples/s are global (micro-batch x {} / {}iteration time)\n",
                                describe_shape(plan.cluster), data_parallel_name(plan.zero_stage, plan.fsdp), models::optimizer_place(plan.offload_optimizer), gpus,
                                plan.io_modelled ? "mean " : "");
  out += "Scaling    efficiency: the same strategy and micro-batch on one GPU alone (its memory unbounded) over the iteration time here\n";
  return out;
}

std::string limit_lines(const PlanOptions& o, bool io) {
  std::string out = fmt::format(
      "Limits     at the best batch: network where the exposed collectives (compute stream idle) take >= {0:g}% of the iteration, host where\n"
      "           the compute stream's wait for launches does (the larger of the two), else compute; memory where no micro-batch fits\n",
      100 * o.bottleneck_share);
  if (io) {
    out += fmt::format("           with I/O, first loader or storage where the iteration waits for its batch, and checkpoint where the checkpoint's\n"
                       "           cost per iteration takes >= {:g}% of the mean iteration (and more than the collectives or the host)\n",
                       100 * o.bottleneck_share);
  }
  if (o.energy_budget) out += "           energy_budget where micro-batches fit but none is within plan.energy_budget\n";
  return out;
}

// The layout search's lines: what its columns mean and where the bubble limit comes from.
std::string layout_lines(const PlanOptions& o) {
  return fmt::format(
      "Layouts    tensor x pipeline (x virtual stages, context, expert) degrees searched (plan.tensor, plan.pipeline, plan.virtual_stages, plan.context,\n"
      "           plan.expert), data parallelism over the rest; each layout runs its replica's share of the global batch as micro-batch x steps (the\n"
      "           pipeline's micro-batches); bubble where a stage waits for its neighbours >= {:g}% of the iteration (and longer than the exposed\n"
      "           collectives); layouts left out are in the notes, with why\n",
      100 * o.bottleneck_share);
}

// A candidate's data parallelism, with DDP's communication hook where it has one ("DDP+fp16") and
// ZeRO++'s options ("ZeRO-3+hpZ+qwZ").
std::string candidate_dp_name(const ClusterCandidate& c, bool fsdp) {
  std::string name = data_parallel_name(c.zero_stage, fsdp);
  switch (c.comm_hook) {
    case models::DdpCommHook::none: break;
    case models::DdpCommHook::fp16: name += "+fp16"; break;
    case models::DdpCommHook::bf16: name += "+bf16"; break;
    case models::DdpCommHook::powersgd: name += "+PowerSGD"; break;
  }
  if (c.compressed_collectives) name += c.compressed_all_reduce == models::CompressedAllReduce::recursive_doubling ? "+compressed-rd" : "+compressed";
  if (c.zero_plus_plus.hpz) name += "+hpZ";
  if (c.zero_plus_plus.qwz) name += "+qwZ";
  if (c.zero_plus_plus.qgz) name += "+qgZ";
  return name;
}

// "DP name" or, in a layout search, "TP 8 (SP) x PP 4 x DP 2, ZeRO-1".
std::string candidate_name(const ClusterCandidate& c, bool fsdp) {
  if (!c.layout) return candidate_dp_name(c, fsdp);
  return describe_layout(*c.layout, c.shape.ranks()) + ", " + candidate_dp_name(c, fsdp);
}

std::string cluster_search_text(const BatchSizePlan& plan) {
  const ClusterSearch& search = *plan.cluster_search;
  const auto& o = plan.options;
  std::string sizes, stages;
  for (const ClusterShape shape : search.shapes) sizes += (sizes.empty() ? "" : ", ") + std::to_string(shape.ranks());
  for (const int stage : search.zero_stages) stages += (stages.empty() ? "" : ", ") + data_parallel_name(stage, plan.fsdp);
  if (search.comm_hooks.size() > 1 || (search.comm_hooks.size() == 1 && search.comm_hooks.front() != models::DdpCommHook::none)) {
    std::string hooks;
    for (const models::DdpCommHook hook : search.comm_hooks) hooks += (hooks.empty() ? "" : ", ") + std::string(models::to_string(hook));
    stages += " (DDP's hooks: " + hooks + ")";
  }
  if (search.compressed_collectives.size() > 1 || (search.compressed_collectives.size() == 1 && search.compressed_collectives.front())) {
    stages += search.compressed_collectives.size() > 1 ? " (collectives with and without compression" : " (compressed collectives";
    if (search.compressed_all_reduce.size() > 1 || search.compressed_all_reduce.front() != models::CompressedAllReduce::ring) {
      std::string algorithms;
      for (const auto algorithm : search.compressed_all_reduce) algorithms += (algorithms.empty() ? "" : ", ") + std::string(models::to_string(algorithm));
      stages += "; their all-reduces: " + algorithms + ", -rd: recursive doubling";
    }
    stages += ")";
  }
  if (search.zero_plus_plus.size() > 1 || (search.zero_plus_plus.size() == 1 && search.zero_plus_plus.front() != ZeroPlusPlus{})) {
    std::string settings;
    for (const ZeroPlusPlus setting : search.zero_plus_plus) settings += (settings.empty() ? "" : ", ") + std::string(to_string(setting));
    stages += " (ZeRO++: " + settings + ")";
  }
  std::string places;
  for (const auto& offload : search.offload_optimizer) places += (places.empty() ? "" : ", ") + models::optimizer_place(offload);
  // The strategies planned, by name: a layout search plans a first_stages strategy on some layouts
  // only, so the first configuration's count may be short of them.
  std::set<std::string> strategy_names;
  for (const auto& c : search.candidates) strategy_names.insert(c.plan.strategy);
  const std::size_t strategies = strategy_names.size();
  if (search.layouts) {
    std::set<std::string> layouts;
    for (const auto& c : search.candidates) layouts.insert(c.layout ? describe_layout(*c.layout, c.shape.ranks()) : "");
    places += fmt::format(" x {} layout{} simulated", layouts.size(), layouts.size() == 1 ? "" : "s");
  }
  std::string out = fmt::format("Cluster    search over {} GPUs x {} x optimizer on {} x {} strateg{}: {} configuration{}; batches are per-GPU micro-batches, samples/s global\n",
                                sizes.empty() ? "no" : sizes, stages, places, strategies, strategies == 1 ? "y" : "ies", search.candidates.size(),
                                search.candidates.size() == 1 ? "" : "s");
  if (o.target_global_batch && search.layouts) {
    out += fmt::format("Target     global batch {0} = micro-batch x steps x data-parallel replicas exactly: each replica (TP x PP GPUs) runs {0} / DP\n"
                       "           samples as micro-batch x steps (a pipeline's micro-batches)\n",
                       *o.target_global_batch);
  } else if (o.target_global_batch) {
    out += fmt::format(
        "Target     global batch {0} = micro-batch x steps x GPUs exactly: each configuration runs {0} / GPUs per GPU in one step where that\n"
        "           fits, else the largest micro-batch dividing it that fits, with gradient accumulation simulated (ZeRO-2/3 reduce at every micro-step)\n",
        *o.target_global_batch);
  } else {
    out += "Target     none: each configuration runs its fastest micro-batch, so global batches differ (plan.target_global_batch fixes one)\n";
  }
  out += search.layouts ? "Scaling    efficiency: - for tensor, pipeline and sequence parallel layouts (one GPU cannot run what they split)\n"
                        : "Scaling    efficiency: the same strategy and micro-batch on one GPU alone (its memory unbounded) over the iteration time here\n";
  out += limit_lines(o, plan.io_modelled);
  if (search.layouts) out += layout_lines(o);
  std::size_t width = 8;
  for (const auto& c : search.candidates) width = std::max(width, c.plan.strategy.size());
  std::size_t dp_width = 6;
  for (const auto& c : search.candidates) dp_width = std::max(dp_width, candidate_name(c, plan.fsdp).size());
  // With I/O the iteration column is the mean iteration (the replay's + the waits), and the wait,
  // checkpoint and bound columns follow; with an energy budget or objective, the energy columns.
  const std::string io_head = plan.io_modelled ? "  " + io_header_cells(plan, false) : "";
  const std::string energy_head = shows_energy(o) ? (plan.io_modelled ? "" : "  ") + energy_header_cells() : "";
  std::string head = fmt::format("{:>5}  {:>7}  {:<{}}  {:<9}  {:<{}}  {:>11}  {:>5}  {:>10}  {:>16}  {:>10}  {:>7}  {:>8}  {:>9}  {:>11}  {:<7}", "GPUs", "nodes",
                                 search.layouts ? "layout, DP" : "DP", dp_width, "optimizer", "strategy", width, "micro-batch", "steps", plan.io_modelled ? "mean iter." : "iteration",
                                 "global samples/s", "per sample", "scaling", "exposed", "host wait", "peak/GPU", "limit");
  head += io_head + energy_head;
  while (!head.empty() && head.back() == ' ') head.pop_back();
  out += "\n" + head + "\n";
  for (const auto& c : search.candidates) {
    const StrategyPlan& s = c.plan;
    std::string row = fmt::format("{:>5}  {:>7}  {:<{}}  {:<9}  {:<{}}  ", c.shape.ranks(), fmt::format("{}x{}", c.shape.nodes, c.shape.gpus_per_node),
                                  candidate_name(c, plan.fsdp), dp_width, models::optimizer_place(c.offload_optimizer), s.strategy, width);
    if (!s.best_batch) {
      row += fmt::format("{:>11}  {:>5}  {:>10}  {:>16}  {:>10}  {:>7}  {:>8}  {:>9}  {:>11}  {}", "-", "-", "-", "-", "-", "-", "-", "-",
                         s.points.empty() ? "-" : format_bytes(s.points.front().peak_bytes), to_string(s.limit));
      if (s.limit == PlanLimit::energy_budget) row += ": " + closest_to_budget(s, o);
      out += row + "\n";
      continue;
    }
    const PlanPoint& p = *point_at(s, *s.best_batch);
    row += fmt::format("{:>11}  {:>5}  {:>10}  {:>16.1f}  {:>10}  {:>7}  {:>8}  {:>9}  {:>11}  {:<7}", *s.best_batch,
                       (c.accumulation_estimated() ? "~" : "") + std::to_string(s.accumulation_steps), format_seconds(p.mean_iteration_seconds),
                       s.best_samples_per_second, format_seconds(1 / s.best_samples_per_second), percent_or_dash(s.scaling_efficiency),
                       fmt::format("{:.1f}%", 100 * p.exposed_communication_seconds / p.iteration_seconds),
                       fmt::format("{:.1f}%", 100 * p.host_wait_seconds / p.iteration_seconds), format_bytes(p.peak_bytes), to_string(s.limit));
    if (plan.io_modelled) row += "  " + io_cells(p, plan, false);
    if (shows_energy(o)) row += (plan.io_modelled ? "" : "  ") + energy_cells(p);
    while (!row.empty() && row.back() == ' ') row.pop_back();
    out += row + "\n";
  }
  if (plan.io_modelled) {
    std::vector<std::pair<std::string, const StrategyPlan*>> named;
    for (const auto& c : search.candidates) {
      named.emplace_back(fmt::format("{}, {}, optimizer on {}, {}", describe_shape(c.shape), candidate_name(c, plan.fsdp),
                                     models::optimizer_place(c.offload_optimizer), c.plan.strategy),
                         &c.plan);
    }
    out += io_bound_lines(named);
  }
  out += "\n";
  if (search.fastest) {
    const ClusterCandidate& c = search.candidates[*search.fastest];
    const StrategyPlan& s = c.plan;
    out += fmt::format("Fastest: {}, {}, optimizer on {}, {}: micro-batch {} x {} step{}{} per GPU, {} per sample ({:.1f} samples/s), scaling efficiency {}, limited by {}.\n",
                       describe_shape(c.shape), candidate_name(c, plan.fsdp), models::optimizer_place(c.offload_optimizer), s.strategy, *s.best_batch, s.accumulation_steps,
                       s.accumulation_steps == 1 ? "" : "s", c.accumulation_estimated() ? " (estimated)" : "", format_seconds(1 / s.best_samples_per_second),
                       s.best_samples_per_second, percent_or_dash(s.scaling_efficiency), to_string(s.limit));
  } else if (std::any_of(search.candidates.begin(), search.candidates.end(), [](const ClusterCandidate& c) { return c.plan.limit == PlanLimit::energy_budget; })) {
    out += "Fastest: none: configurations fit, but none within the energy budget (plan.energy_budget): infeasible.\n";
  } else {
    out += "Fastest: none: no configuration fits.\n";
  }
  for (const auto& note : search.notes) out += "note: " + note + "\n";
  for (const auto& note : plan.notes) out += "note: " + note + "\n";
  for (const auto& c : search.candidates) {
    for (const auto& w : c.plan.warnings) {
      out += fmt::format("warning: {}, {}, optimizer on {}, {}: {}\n", describe_shape(c.shape), candidate_name(c, plan.fsdp),
                         models::optimizer_place(c.offload_optimizer), c.plan.strategy, w);
    }
  }
  return out;
}

}  // namespace

std::string plan_table_text(const BatchSizePlan& plan) {
  const auto& o = plan.options;
  std::string out = fmt::format("Plan       {}{}\n", plan.scenario_name, plan.variant.empty() ? "" : "   (variant: " + plan.variant + ")");
  out += fmt::format("Platform   {}: {} {}; limit {} (margin {:g}%)\n", plan.platform_name, format_bytes(plan.capacity_bytes),
                     o.memory_metric == MemoryMetric::device
                         ? "of visible GPU memory"
                         : fmt::format("PyTorch can use (visible memory less a {} CUDA context)", format_bytes(plan.cuda_context_bytes)),
                     format_bytes(plan.limit_bytes), o.margin * 100);
  const char* metric = "";
  switch (o.memory_metric) {
    case MemoryMetric::reserved:
      metric = "reserved: PyTorch's caching allocator (model) must hold the peak's segments within the limit (max_memory_reserved)";
      break;
    case MemoryMetric::allocated: metric = "allocated: the allocator model's rounded blocks (max_memory_allocated) within the limit"; break;
    case MemoryMetric::exact: metric = "exact: the live tensors' bytes within the limit (no allocator rounding or caching)"; break;
    case MemoryMetric::device: metric = "device: reserved + CUDA context (what nvidia-smi shows) within the limit"; break;
  }
  out += fmt::format("Memory     {}; out-of-memory as PyTorch decides it, on reserved segments\n", metric);
  if (plan.cluster_search && plan.cluster_search->layouts) {
    out += "Search     every micro-batch of plan.micro_batches (default 1, 2, 4) that divides a layout's replica's share, each simulated\n";
  } else if (plan.cluster_search && o.target_global_batch) {
    out += fmt::format("Search     micro-batches up to {} dividing each configuration's share: the share first, then bisection ({} simulations per\n"
                       "           round); peak memory assumed monotone in the micro-batch\n",
                       o.max_batch, o.probes_per_round);
  } else {
    out += fmt::format("Search     batch 1 to {}, exponential growth then bisection ({} simulations per round); peak memory assumed monotone in the batch\n",
                       o.max_batch, o.probes_per_round);
  }
  out += io_lines(plan) + energy_lines(o);
  if (plan.cluster_search) return out + cluster_search_text(plan);
  const bool cluster = plan.cluster.ranks() > 1;
  if (cluster) out += cluster_lines(plan) + limit_lines(o, plan.io_modelled);
  if (o.target_global_batch && cluster) {
    out += fmt::format("Target     global batch {0} by gradient accumulation: {0} / {1} GPUs = {2} samples per GPU in ceil({2} / micro-batch) steps;\n"
                       "           samples/s = {0} / (steps x iteration time), an estimate: accumulation is not simulated (the optimizer step and the\n"
                       "           gradient reduction are counted on every micro-batch, so the figures are pessimistic)\n",
                       *o.target_global_batch, plan.cluster.ranks(), *o.target_global_batch / plan.cluster.ranks());
  } else if (o.target_global_batch) {
    out += fmt::format("Target     global batch {} by gradient accumulation: samples/s = {} / (steps x iteration time); the optimizer step is counted\n"
                       "           on every micro-batch (our trace holds one), so the figures are slightly pessimistic\n",
                       *o.target_global_batch, *o.target_global_batch);
  }
  std::size_t width = 8;
  for (const auto& s : plan.strategies) width = std::max(width, s.strategy.size());
  const bool g = o.target_global_batch.has_value();
  if (cluster) {
    out += "\n" + fmt::format("{:<{}}  {:>13}  {:>14}  {:>16}  {:>12}  ", "strategy", width, "max batch/GPU", "best batch/GPU", "global samples/s", "peak at best");
  } else {
    out += "\n" + fmt::format("{:<{}}  {:>10}  {:>10}  {:>11}  {:>12}  ", "strategy", width, "max batch", "best batch", "samples/s", "peak at best");
  }
  if (g) out += fmt::format("{:>11}  ", "accum steps");
  if (cluster) out += fmt::format("{:>7}  {:>8}  {:>9}  {:<7}  ", "scaling", "exposed", "host wait", "limit");
  if (plan.io_modelled) out += io_header_cells(plan, true);
  if (shows_energy(o)) out += energy_header_cells();
  out += fmt::format("{:>24}  {:>9}  {:>4}\n", "vs baseline: batch, peak", "slowdown", "sims");
  bool compared = false;
  for (const auto& s : plan.strategies) {
    if (!s.max_batch) {
      out += fmt::format("{:<{}}  {}  ({} simulations)\n", s.strategy, width, strategy_description(s, plan), s.points.size());
      continue;
    }
    const std::string max = s.max_is_ceiling ? fmt::format(">= {}", *s.max_batch) : std::to_string(*s.max_batch);
    if (!s.best_batch) {
      // Batches fit, but none within plan.energy_budget: a result, with what the fitting points draw.
      out += fmt::format("{:<{}}  {:>{}}  none within the energy budget: {}  ({} simulations)\n", s.strategy, width, max, cluster ? 13 : 10,
                         closest_to_budget(s, o), s.points.size());
      continue;
    }
    if (cluster) {
      out += fmt::format("{:<{}}  {:>13}  {:>14}  {:>16.1f}  {:>12}  ", s.strategy, width, max, *s.best_batch, s.best_samples_per_second,
                         format_bytes(s.best_peak_bytes));
    } else {
      out += fmt::format("{:<{}}  {:>10}  {:>10}  {:>11.1f}  {:>12}  ", s.strategy, width, max, *s.best_batch, s.best_samples_per_second,
                         format_bytes(s.best_peak_bytes));
    }
    if (g) out += fmt::format("{:>11}  ", s.accumulation_steps);
    const PlanPoint& p = *point_at(s, *s.best_batch);
    if (cluster) {
      out += fmt::format("{:>7}  {:>8}  {:>9}  {:<7}  ", percent_or_dash(s.scaling_efficiency),
                         fmt::format("{:.1f}%", 100 * p.exposed_communication_seconds / p.iteration_seconds),
                         fmt::format("{:.1f}%", 100 * p.host_wait_seconds / p.iteration_seconds), to_string(s.limit));
    }
    if (plan.io_modelled) out += io_cells(p, plan, true);
    if (shows_energy(o)) out += energy_cells(p);
    std::string at = "-", slowdown = "-";
    if (s.vs_baseline) {
      compared = true;
      at = fmt::format("{}, {:+.0f}%", s.vs_baseline->batch, -100 * s.vs_baseline->peak_saved_fraction);
      slowdown = fmt::format("{:.2f}x", s.vs_baseline->slowdown);
    }
    out += fmt::format("{:>24}  {:>9}  {:>4}\n", at, slowdown, s.points.size());
  }
  if (compared) {
    out += "\nvs baseline: at the largest batch both run, the change in peak memory and the iteration time over the baseline's.\n";
    for (const auto& s : plan.strategies) {
      if (s.vs_baseline && s.vs_baseline->best_throughput_ratio > 0) {
        out += fmt::format("best vs best: {} {:.2f}x the baseline's samples/s\n", s.strategy, s.vs_baseline->best_throughput_ratio);
      }
    }
  }
  if (plan.io_modelled) {
    std::vector<std::pair<std::string, const StrategyPlan*>> named;
    for (const StrategyPlan& s : plan.strategies) named.emplace_back(s.strategy, &s);
    out += io_bound_lines(named);
  }
  out += "\n" + verdict(plan) + "\n";
  for (const auto& note : plan.notes) out += "note: " + note + "\n";
  for (const auto& s : plan.strategies) {
    if (s.max_is_ceiling) out += fmt::format("{}: fits up to the search ceiling {} (--max-batch to search further).\n", s.strategy, *s.max_batch);
    for (const auto& w : s.warnings) out += fmt::format("warning: {}: {}\n", s.strategy, w);
  }
  return out;
}

namespace {

ordered_json opt(const std::optional<double>& v) { return v ? ordered_json(*v) : ordered_json(nullptr); }
ordered_json opt(const std::optional<std::int64_t>& v) { return v ? ordered_json(*v) : ordered_json(nullptr); }

ordered_json points_json(const std::vector<PlanPoint>& points) {
  ordered_json out = ordered_json::array();
  for (const auto& p : points) {
    out.push_back({{"batch", p.batch},
                   {"fits", p.fits},
                   {"out_of_memory", p.out_of_memory},
                   {"inapplicable", p.inapplicable},
                   {"simulation_failed", p.simulation_failed},
                   {"peak_bytes", p.peak_bytes},
                   {"iteration_seconds", p.iteration_seconds},
                   {"samples_per_second", p.samples_per_second},
                   {"stall_seconds", p.stall_seconds},
                   {"collective_seconds", p.collective_seconds},
                   {"exposed_communication_seconds", p.exposed_communication_seconds},
                   {"host_wait_seconds", p.host_wait_seconds},
                   {"exact_peak_bytes", p.exact_peak_bytes},
                   {"allocated_peak_bytes", p.allocated_peak_bytes},
                   {"reserved_peak_bytes", p.reserved_peak_bytes},
                   {"device_peak_bytes", p.device_peak_bytes},
                   {"mean_iteration_seconds", p.mean_iteration_seconds},
                   {"io", p.io_modelled ? ordered_json{{"bound", to_string(p.io_bound)},
                                                       {"data_wait_seconds", p.data_wait_seconds},
                                                       {"checkpoint_seconds_per_iteration", p.checkpoint_seconds_per_iteration},
                                                       {"checkpoint_stall_seconds", p.checkpoint_stall_seconds},
                                                       {"checkpoint_interval_for_target", p.checkpoint_interval_for_target > 0
                                                                                              ? ordered_json(p.checkpoint_interval_for_target)
                                                                                              : ordered_json(nullptr)}}
                                        : ordered_json(nullptr)},
                   {"joules", p.joules > 0 ? ordered_json(p.joules) : ordered_json(nullptr)},
                   {"samples_per_joule", p.samples_per_joule > 0 ? ordered_json(p.samples_per_joule) : ordered_json(nullptr)},
                   {"gpu_average_watts", p.joules > 0 ? ordered_json(p.gpu_average_watts) : ordered_json(nullptr)},
                   {"node_average_watts", p.joules > 0 ? ordered_json(p.node_average_watts) : ordered_json(nullptr)},
                   {"within_energy_budget", p.within_energy_budget}});
  }
  return out;
}

// plan.energy_budget: null, or its bounds (null where not given).
ordered_json budget_json(const std::optional<EnergyBudget>& budget) {
  if (!budget) return nullptr;
  const auto bound = [](const std::optional<double>& v) { return v ? ordered_json(*v) : ordered_json(nullptr); };
  return {{"joules_per_sample", bound(budget->joules_per_sample)},
          {"gpu_average_watts", bound(budget->gpu_average_watts)},
          {"node_average_watts", bound(budget->node_average_watts)}};
}

// null (the GPU) or {"device": "cpu", "ratio", "prefetch_optimizer_gap" (null without Deep
// Optimizer States), "part_grads_async"}
ordered_json offload_json(const std::optional<models::OptimizerOffloadSpec>& offload) {
  if (!offload) return nullptr;
  return {{"device", "cpu"},
          {"ratio", offload->ratio},
          {"prefetch_optimizer_gap", offload->prefetch_optimizer ? ordered_json(offload->prefetch_optimizer_gap) : ordered_json(nullptr)},
          {"part_grads_async", offload->part_grads_async}};
}

ordered_json shape_json(ClusterShape shape, int zero_stage, bool fsdp, const std::optional<models::OptimizerOffloadSpec>& offload) {
  return {{"gpus", shape.ranks()},
          {"nodes", shape.nodes},
          {"gpus_per_node", shape.gpus_per_node},
          {"zero_stage", zero_stage},
          {"data_parallel", zero_stage == 0 ? "ddp" : fsdp ? "fsdp2" : fmt::format("zero-{}", zero_stage)},
          {"offload_optimizer", offload_json(offload)}};
}

ordered_json plan_to_json(const BatchSizePlan& plan) {
  ordered_json j = detail::document_header("plan");
  j["scenario"] = detail::scenario_json(plan.scenario_name, plan.scenario_source);
  j["variant"] = plan.variant.empty() ? ordered_json(nullptr) : ordered_json(plan.variant);
  j["platform"] = {{"name", plan.platform_name}, {"source", plan.platform_source}, {"gpu", plan.gpu_name}, {"memory_capacity_bytes", plan.capacity_bytes},
                   {"cuda_context_bytes", plan.cuda_context_bytes}};
  j["limit_bytes"] = plan.limit_bytes;
  // jobs and progress are left out: they do not change the plan, and documents must not differ by them.
  j["options"] = {{"margin", plan.options.margin},
                  {"memory_metric", to_string(plan.options.memory_metric)},
                  {"max_batch", plan.options.max_batch},
                  {"target_global_batch", opt(plan.options.target_global_batch)},
                  {"probes_per_round", plan.options.probes_per_round},
                  {"bottleneck_share", plan.options.bottleneck_share},
                  {"objective", plan.options.objective == PlanObjective::samples_per_joule ? "samples_per_joule" : "samples_per_second"},
                  {"energy_budget", budget_json(plan.options.energy_budget)},
                  {"checkpoint_overhead", opt(plan.checkpoint_overhead)}};
  j["io_modelled"] = plan.io_modelled;
  // The GPUs the batches are per (batches are per-GPU micro-batches and samples/s global); null
  // on one GPU and for a cluster search, whose candidates carry their own.
  j["cluster"] = (plan.cluster.ranks() > 1 || plan.offload_optimizer) && !plan.cluster_search ? shape_json(plan.cluster, plan.zero_stage, plan.fsdp, plan.offload_optimizer)
                                                                                               : ordered_json(nullptr);
  ordered_json strategies = ordered_json::array();
  for (const auto& s : plan.strategies) {
    ordered_json js;
    js["strategy"] = detail::strategy_json(s.spec);
    js["fits_at_batch_1"] = s.max_batch.has_value();
    js["max_batch"] = opt(s.max_batch);
    js["max_is_ceiling"] = s.max_is_ceiling;
    js["best_batch"] = opt(s.best_batch);
    js["best_samples_per_second"] = s.best_samples_per_second;
    js["best_samples_per_joule"] = s.best_samples_per_joule > 0 ? ordered_json(s.best_samples_per_joule) : ordered_json(nullptr);
    js["best_peak_bytes"] = s.best_peak_bytes;
    js["accumulation_steps"] = s.accumulation_steps;
    js["one_gpu_iteration_seconds"] = opt(s.one_gpu_iteration_seconds);
    js["scaling_efficiency"] = opt(s.scaling_efficiency);
    js["limit"] = to_string(s.limit);
    if (s.vs_baseline) {
      js["vs_baseline"] = {{"batch", s.vs_baseline->batch},
                           {"peak_saved_fraction", s.vs_baseline->peak_saved_fraction},
                           {"allocated_saved_fraction", s.vs_baseline->allocated_saved_fraction},
                           {"reserved_saved_fraction", s.vs_baseline->reserved_saved_fraction},
                           {"slowdown", s.vs_baseline->slowdown},
                           {"best_throughput_ratio", s.vs_baseline->best_throughput_ratio}};
    } else {
      js["vs_baseline"] = nullptr;
    }
    js["warnings"] = s.warnings;
    js["points"] = points_json(s.points);
    strategies.push_back(std::move(js));
  }
  j["strategies"] = std::move(strategies);
  if (plan.cluster_search) {
    const ClusterSearch& search = *plan.cluster_search;
    ordered_json shapes = ordered_json::array();
    for (const ClusterShape shape : search.shapes) shapes.push_back({{"gpus", shape.ranks()}, {"nodes", shape.nodes}, {"gpus_per_node", shape.gpus_per_node}});
    ordered_json candidates = ordered_json::array();
    for (const ClusterCandidate& c : search.candidates) {
      const StrategyPlan& s = c.plan;
      ordered_json jc = shape_json(c.shape, c.zero_stage, plan.fsdp, c.offload_optimizer);
      jc["comm_hook"] = std::string(models::to_string(c.comm_hook));
      jc["compressed_collectives"] = c.compressed_collectives;
      jc["compressed_all_reduce"] = c.compressed_collectives ? ordered_json(models::to_string(c.compressed_all_reduce)) : ordered_json(nullptr);
      jc["zero_plus_plus"] = std::string(to_string(c.zero_plus_plus));
      jc["hpz_partition_size"] = c.hpz_partition_size;
      if (c.layout) {
        jc["layout"] = {{"tensor", c.layout->tensor},
                        {"pipeline", c.layout->pipeline},
                        {"virtual_stages", c.layout->virtual_stages},
                        {"context", c.layout->context},
                        {"expert", c.layout->expert},
                        {"data", models::data_parallel_degree(*c.layout, c.shape.ranks())},
                        {"sequence_parallel", c.layout->sequence_parallel},
                        {"tp_comm_overlap", c.layout->tp_comm_overlap},
                        {"pipeline_schedule", std::string(models::to_string(c.layout->schedule))}};
      }
      jc["strategy"] = detail::strategy_json(s.spec);
      jc["fits"] = c.fits();
      jc["max_micro_batch"] = opt(s.max_batch);
      jc["max_is_ceiling"] = s.max_is_ceiling;
      jc["micro_batch"] = opt(s.best_batch);
      jc["accumulation_steps"] = s.accumulation_steps;
      jc["accumulation_estimated"] = c.accumulation_estimated();
      const PlanPoint* best = s.best_batch ? point_at(s, *s.best_batch) : nullptr;
      jc["iteration_seconds"] = best ? ordered_json(best->iteration_seconds) : ordered_json(nullptr);
      jc["mean_iteration_seconds"] = best ? ordered_json(best->mean_iteration_seconds) : ordered_json(nullptr);
      jc["samples_per_joule"] = s.best_samples_per_joule > 0 ? ordered_json(s.best_samples_per_joule) : ordered_json(nullptr);
      jc["samples_per_second"] = s.best_samples_per_second;
      jc["seconds_per_sample"] = s.best_samples_per_second > 0 ? ordered_json(1 / s.best_samples_per_second) : ordered_json(nullptr);
      jc["one_gpu_iteration_seconds"] = opt(s.one_gpu_iteration_seconds);
      jc["scaling_efficiency"] = opt(s.scaling_efficiency);
      jc["exposed_communication_seconds"] = best ? ordered_json(best->exposed_communication_seconds) : ordered_json(nullptr);
      jc["host_wait_seconds"] = best ? ordered_json(best->host_wait_seconds) : ordered_json(nullptr);
      if (c.layout) jc["bubble_seconds"] = best ? ordered_json(best->bubble_seconds) : ordered_json(nullptr);
      jc["peak_bytes"] = best ? ordered_json(best->peak_bytes) : ordered_json(nullptr);
      jc["limit"] = to_string(s.limit);
      jc["warnings"] = s.warnings;
      jc["points"] = points_json(s.points);
      candidates.push_back(std::move(jc));
    }
    ordered_json offloads = ordered_json::array();
    for (const auto& offload : search.offload_optimizer) offloads.push_back(offload_json(offload));
    ordered_json hooks = ordered_json::array();
    for (const models::DdpCommHook hook : search.comm_hooks) hooks.push_back(std::string(models::to_string(hook)));
    ordered_json zero_plus_plus = ordered_json::array();
    for (const ZeroPlusPlus setting : search.zero_plus_plus) zero_plus_plus.push_back(std::string(to_string(setting)));
    std::vector<std::string> all_reduce_algorithms;
    for (const auto algorithm : search.compressed_all_reduce) all_reduce_algorithms.emplace_back(models::to_string(algorithm));
    j["cluster_search"] = {{"shapes", std::move(shapes)},
                           {"zero_stages", search.zero_stages},
                           {"offload_optimizer", std::move(offloads)},
                           {"comm_hooks", hooks},
                           {"compressed_collectives", search.compressed_collectives},
                           {"compressed_all_reduce", all_reduce_algorithms},
                           {"zero_plus_plus", std::move(zero_plus_plus)},
                           {"candidates", std::move(candidates)},
                           {"fastest", search.fastest ? ordered_json(*search.fastest) : ordered_json(nullptr)},
                           {"notes", search.notes}};
  } else {
    j["cluster_search"] = nullptr;
  }
  j["notes"] = plan.notes;
  return j;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

}  // namespace

std::string plan_json(const BatchSizePlan& plan) { return plan_to_json(plan).dump(2) + "\n"; }

std::string plan_csv(const std::vector<BatchSizePlan>& plans) {
  // samples_per_second is global (batch x gpus / iteration); the cluster columns come last so
  // that readers of the one-GPU columns keep their positions.
  std::string out =
      "variant,scenario,platform,strategy,batch,fits,out_of_memory,inapplicable,simulation_failed,peak_bytes,iteration_seconds,samples_per_second,stall_seconds,"
      "gpus,nodes,gpus_per_node,zero_stage,collective_seconds,exposed_communication_seconds,host_wait_seconds,optimizer,"
      "mean_iteration_seconds,io_bound,data_wait_seconds,checkpoint_seconds_per_iteration,checkpoint_interval_for_target,joules,samples_per_joule,"
      "within_energy_budget,comm_hook,compressed_collectives,zero_plus_plus,layout,compressed_all_reduce\n";
  // What a configuration runs besides its shape and stage: DDP's hook, compressed collectives,
  // ZeRO++'s options (ZeRO-3 only; empty otherwise) and the model-parallel layout (empty: data
  // parallelism only), as the text report names them.
  struct Configuration {
    models::DdpCommHook comm_hook = models::DdpCommHook::none;
    bool compressed_collectives = false;
    ZeroPlusPlus zero_plus_plus;
    const std::optional<models::ParallelLayout>* layout = nullptr;
    models::CompressedAllReduce compressed_all_reduce = models::CompressedAllReduce::ring;
  };
  const auto rows = [&](const BatchSizePlan& plan, const StrategyPlan& s, ClusterShape shape, int zero_stage, const std::optional<models::OptimizerOffloadSpec>& offload,
                        const Configuration& c) {
    const std::string zero_plus_plus = zero_stage == 3 ? std::string(to_string(c.zero_plus_plus)) : "";
    const std::string layout = c.layout != nullptr && *c.layout ? describe_layout(**c.layout, shape.ranks()) : "";
    for (const auto& p : s.points) {
      // The I/O and energy columns are empty where the point has none.
      const std::string bound = p.io_modelled ? std::string(to_string(p.io_bound)) : "";
      const std::string interval = p.checkpoint_interval_for_target > 0 ? std::to_string(p.checkpoint_interval_for_target) : "";
      const std::string joules = p.joules > 0 ? fmt::format("{}", p.joules) : "";
      const std::string per_joule = p.samples_per_joule > 0 ? fmt::format("{}", p.samples_per_joule) : "";
      out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", csv_field(plan.variant),
                         csv_field(plan.scenario_name), csv_field(plan.platform_name), csv_field(s.strategy), p.batch, p.fits ? 1 : 0, p.out_of_memory ? 1 : 0,
                         p.inapplicable ? 1 : 0, p.simulation_failed ? 1 : 0, p.peak_bytes, p.iteration_seconds, p.samples_per_second, p.stall_seconds,
                         shape.ranks(), shape.nodes, shape.gpus_per_node, zero_stage, p.collective_seconds, p.exposed_communication_seconds,
                         p.host_wait_seconds, csv_field(models::optimizer_place(offload)), p.mean_iteration_seconds, bound, p.data_wait_seconds,
                         p.checkpoint_seconds_per_iteration, interval, joules, per_joule, p.within_energy_budget ? 1 : 0,
                         models::to_string(c.comm_hook), c.compressed_collectives ? 1 : 0, zero_plus_plus, csv_field(layout),
                         c.compressed_collectives ? models::to_string(c.compressed_all_reduce) : std::string_view{});
    }
  };
  for (const BatchSizePlan& plan : plans) {
    const Configuration own{plan.comm_hook, plan.compressed_collectives, plan.zero_plus_plus, &plan.layout, plan.compressed_all_reduce};
    for (const auto& s : plan.strategies) rows(plan, s, plan.cluster, plan.zero_stage, plan.offload_optimizer, own);
    if (plan.cluster_search) {
      for (const auto& c : plan.cluster_search->candidates) {
        rows(plan, c.plan, c.shape, c.zero_stage, c.offload_optimizer,
             Configuration{c.comm_hook, c.compressed_collectives, c.zero_plus_plus, &c.layout, c.compressed_all_reduce});
      }
    }
  }
  return out;
}

std::string plan_csv(const BatchSizePlan& plan) { return plan_csv(std::vector<BatchSizePlan>{plan}); }

}  // namespace comptrain::sim

namespace comptrain::sim::detail {

namespace {

// The compressed all-reduce's algorithms, for enum_named.
constexpr models::CompressedAllReduce kCompressedAllReduces[] = {models::CompressedAllReduce::ring, models::CompressedAllReduce::recursive_doubling};

// The enumerations the documents write by name, read back: the value whose name is `text`.
template <typename Enum, std::size_t N>
Enum enum_named(const ordered_json& text, const Enum (&values)[N], const char* field) {
  const std::string name = text.get<std::string>();
  for (const Enum value : values) {
    if (to_string(value) == name) return value;
  }
  throw InputError(fmt::format("{}: '{}' is not one of its names", field, name));
}

std::optional<double> optional_double(const ordered_json& j) { return j.is_null() ? std::nullopt : std::optional(j.get<double>()); }
std::optional<std::int64_t> optional_int(const ordered_json& j) { return j.is_null() ? std::nullopt : std::optional(j.get<std::int64_t>()); }

std::optional<models::OptimizerOffloadSpec> offload_from_json(const ordered_json& j) {
  if (j.is_null()) return std::nullopt;
  models::OptimizerOffloadSpec offload;
  offload.ratio = j.at("ratio").get<double>();
  offload.prefetch_optimizer = !j.at("prefetch_optimizer_gap").is_null();
  if (offload.prefetch_optimizer) offload.prefetch_optimizer_gap = j.at("prefetch_optimizer_gap").get<int>();
  offload.part_grads_async = j.at("part_grads_async").get<bool>();
  return offload;
}

std::vector<PlanPoint> points_from_json(const ordered_json& points) {
  std::vector<PlanPoint> out;
  for (const ordered_json& j : points) {
    PlanPoint p;
    p.batch = j.at("batch").get<std::int64_t>();
    p.fits = j.at("fits").get<bool>();
    p.out_of_memory = j.at("out_of_memory").get<bool>();
    p.inapplicable = j.at("inapplicable").get<bool>();
    p.simulation_failed = j.at("simulation_failed").get<bool>();
    p.peak_bytes = j.at("peak_bytes").get<std::int64_t>();
    p.iteration_seconds = j.at("iteration_seconds").get<double>();
    p.samples_per_second = j.at("samples_per_second").get<double>();
    p.stall_seconds = j.at("stall_seconds").get<double>();
    p.collective_seconds = j.at("collective_seconds").get<double>();
    p.exposed_communication_seconds = j.at("exposed_communication_seconds").get<double>();
    p.host_wait_seconds = j.at("host_wait_seconds").get<double>();
    p.exact_peak_bytes = j.at("exact_peak_bytes").get<std::int64_t>();
    p.allocated_peak_bytes = j.at("allocated_peak_bytes").get<std::int64_t>();
    p.reserved_peak_bytes = j.at("reserved_peak_bytes").get<std::int64_t>();
    p.device_peak_bytes = j.at("device_peak_bytes").get<std::int64_t>();
    p.mean_iteration_seconds = j.at("mean_iteration_seconds").get<double>();
    if (const ordered_json& io = j.at("io"); !io.is_null()) {
      static constexpr IterationBound kBounds[] = {IterationBound::gpu, IterationBound::network, IterationBound::host, IterationBound::loader, IterationBound::storage};
      p.io_modelled = true;
      p.io_bound = enum_named(io.at("bound"), kBounds, "io.bound");
      p.data_wait_seconds = io.at("data_wait_seconds").get<double>();
      p.checkpoint_seconds_per_iteration = io.at("checkpoint_seconds_per_iteration").get<double>();
      p.checkpoint_stall_seconds = io.at("checkpoint_stall_seconds").get<double>();
      p.checkpoint_interval_for_target = io.at("checkpoint_interval_for_target").is_null() ? 0 : io.at("checkpoint_interval_for_target").get<int>();
    }
    p.joules = optional_double(j.at("joules")).value_or(0);
    p.samples_per_joule = optional_double(j.at("samples_per_joule")).value_or(0);
    p.gpu_average_watts = optional_double(j.at("gpu_average_watts")).value_or(0);
    p.node_average_watts = optional_double(j.at("node_average_watts")).value_or(0);
    p.within_energy_budget = j.at("within_energy_budget").get<bool>();
    out.push_back(p);
  }
  return out;
}

// A ZeRO++ setting by its name (to_string(ZeroPlusPlus)).
ZeroPlusPlus zero_plus_plus_named(const ordered_json& j, std::string_view field) {
  const std::optional<ZeroPlusPlus> setting = j.is_string() ? parse_zero_plus_plus(j.get<std::string>()) : std::nullopt;
  if (!setting) throw InputError(fmt::format("{}: {} is not a ZeRO++ setting (none, hpz, qwz, qgz, hpz+qwz, hpz+qgz, qwz+qgz, all)", field, j.dump()));
  return *setting;
}

ClusterCandidate candidate_from_json(const ordered_json& j) {
  static constexpr PlanLimit kLimits[] = {PlanLimit::memory,  PlanLimit::network, PlanLimit::host,       PlanLimit::compute,       PlanLimit::not_applicable, PlanLimit::failed,
                                          PlanLimit::loader,  PlanLimit::storage, PlanLimit::checkpoint, PlanLimit::energy_budget, PlanLimit::bubble};
  static constexpr models::DdpCommHook kHooks[] = {models::DdpCommHook::none, models::DdpCommHook::fp16, models::DdpCommHook::bf16, models::DdpCommHook::powersgd};
  ClusterCandidate c;
  c.shape = {j.at("nodes").get<int>(), j.at("gpus_per_node").get<int>()};
  c.zero_stage = j.at("zero_stage").get<int>();
  c.offload_optimizer = offload_from_json(j.at("offload_optimizer"));
  c.comm_hook = enum_named(j.at("comm_hook"), kHooks, "comm_hook");
  c.compressed_collectives = j.at("compressed_collectives").get<bool>();
  // Added after version 6 without a version change: absent (or null) reads as the ring.
  if (j.contains("compressed_all_reduce") && !j.at("compressed_all_reduce").is_null()) {
    c.compressed_all_reduce = enum_named(j.at("compressed_all_reduce"), kCompressedAllReduces, "compressed_all_reduce");
  }
  c.zero_plus_plus = zero_plus_plus_named(j.at("zero_plus_plus"), "zero_plus_plus");
  c.hpz_partition_size = j.at("hpz_partition_size").get<int>();
  if (c.hpz_partition_size < 1 || c.zero_plus_plus.hpz != (c.hpz_partition_size > 1)) {
    throw InputError(fmt::format("hpz_partition_size: {} does not match zero_plus_plus {}", c.hpz_partition_size, j.at("zero_plus_plus").dump()));
  }
  if (j.contains("layout")) {
    const ordered_json& l = j.at("layout");
    models::ParallelLayout layout;
    layout.tensor = l.at("tensor").get<int>();
    layout.pipeline = l.at("pipeline").get<int>();
    layout.virtual_stages = l.at("virtual_stages").get<int>();
    layout.context = l.at("context").get<int>();
    layout.expert = l.at("expert").get<int>();
    layout.sequence_parallel = l.at("sequence_parallel").get<bool>();
    layout.tp_comm_overlap = l.value("tp_comm_overlap", false);  // added after version 6
    const auto schedule = models::pipeline_schedule_from_string(l.at("pipeline_schedule").get<std::string>());
    if (!schedule) throw InputError("layout.pipeline_schedule: " + l.at("pipeline_schedule").dump() + " is not a schedule");
    layout.schedule = *schedule;
    c.layout = layout;
  }
  StrategyPlan& s = c.plan;
  s.strategy = j.at("strategy").at("name").get<std::string>();
  s.spec.name = s.strategy;
  s.max_batch = optional_int(j.at("max_micro_batch"));
  s.max_is_ceiling = j.at("max_is_ceiling").get<bool>();
  s.best_batch = optional_int(j.at("micro_batch"));
  s.accumulation_steps = j.at("accumulation_steps").get<std::int64_t>();
  s.accumulation_simulated = !j.at("accumulation_estimated").get<bool>();
  s.best_samples_per_second = j.at("samples_per_second").get<double>();
  s.best_samples_per_joule = optional_double(j.at("samples_per_joule")).value_or(0);
  s.one_gpu_iteration_seconds = optional_double(j.at("one_gpu_iteration_seconds"));
  s.scaling_efficiency = optional_double(j.at("scaling_efficiency"));
  s.limit = enum_named(j.at("limit"), kLimits, "limit");
  s.warnings = j.at("warnings").get<std::vector<std::string>>();
  s.points = points_from_json(j.at("points"));
  if (s.best_batch) {
    PlanPoint* best = nullptr;
    for (PlanPoint& p : s.points) {
      if (p.batch == *s.best_batch) best = &p;
    }
    if (!best) throw InputError(fmt::format("micro_batch: {} is none of the candidate's points", *s.best_batch));
    s.best_peak_bytes = best->peak_bytes;
    if (j.contains("bubble_seconds") && !j.at("bubble_seconds").is_null()) best->bubble_seconds = j.at("bubble_seconds").get<double>();
  }
  return c;
}

}  // namespace

BatchSizePlan cluster_plan_from_json(const ordered_json& document, const std::string& source, bool layouts, bool fsdp) {
  static constexpr MemoryMetric kMetrics[] = {MemoryMetric::reserved, MemoryMetric::allocated, MemoryMetric::exact, MemoryMetric::device};
  BatchSizePlan plan;
  std::string at = "/";
  try {
    plan.scenario_name = document.at("scenario").at("name").get<std::string>();
    plan.scenario_source = document.at("scenario").at("source").get<std::string>();
    plan.variant = document.at("variant").is_null() ? "" : document.at("variant").get<std::string>();
    const ordered_json& platform = document.at("platform");
    plan.platform_name = platform.at("name").get<std::string>();
    plan.platform_source = platform.at("source").get<std::string>();
    plan.gpu_name = platform.at("gpu").get<std::string>();
    plan.capacity_bytes = platform.at("memory_capacity_bytes").get<std::int64_t>();
    plan.cuda_context_bytes = platform.at("cuda_context_bytes").get<std::int64_t>();
    plan.limit_bytes = document.at("limit_bytes").get<std::int64_t>();
    const ordered_json& o = document.at("options");
    plan.options.margin = o.at("margin").get<double>();
    plan.options.memory_metric = enum_named(o.at("memory_metric"), kMetrics, "options.memory_metric");
    plan.options.max_batch = o.at("max_batch").get<std::int64_t>();
    plan.options.target_global_batch = optional_int(o.at("target_global_batch"));
    plan.options.probes_per_round = o.at("probes_per_round").get<int>();
    plan.options.bottleneck_share = o.at("bottleneck_share").get<double>();
    plan.options.objective = o.at("objective").get<std::string>() == "samples_per_joule" ? PlanObjective::samples_per_joule : PlanObjective::samples_per_second;
    if (const ordered_json& b = o.at("energy_budget"); !b.is_null()) {
      plan.options.energy_budget = EnergyBudget{optional_double(b.at("joules_per_sample")), optional_double(b.at("gpu_average_watts")), optional_double(b.at("node_average_watts"))};
    }
    plan.checkpoint_overhead = optional_double(o.at("checkpoint_overhead"));
    plan.io_modelled = document.at("io_modelled").get<bool>();
    plan.fsdp = fsdp;
    plan.notes = document.at("notes").get<std::vector<std::string>>();
    const ordered_json& cs = document.at("cluster_search");
    ClusterSearch search;
    search.layouts = layouts;
    for (const ordered_json& shape : cs.at("shapes")) search.shapes.push_back({shape.at("nodes").get<int>(), shape.at("gpus_per_node").get<int>()});
    search.zero_stages = cs.at("zero_stages").get<std::vector<int>>();
    for (const ordered_json& offload : cs.at("offload_optimizer")) search.offload_optimizer.push_back(offload_from_json(offload));
    static constexpr models::DdpCommHook kHooks[] = {models::DdpCommHook::none, models::DdpCommHook::fp16, models::DdpCommHook::bf16, models::DdpCommHook::powersgd};
    for (const ordered_json& hook : cs.at("comm_hooks")) search.comm_hooks.push_back(enum_named(hook, kHooks, "cluster_search.comm_hooks"));
    search.compressed_collectives = cs.at("compressed_collectives").get<std::vector<bool>>();
    if (cs.contains("compressed_all_reduce")) {
      for (const ordered_json& algorithm : cs.at("compressed_all_reduce")) {
        search.compressed_all_reduce.push_back(enum_named(algorithm, kCompressedAllReduces, "cluster_search.compressed_all_reduce"));
      }
    }
    if (search.compressed_all_reduce.empty()) search.compressed_all_reduce.push_back(models::CompressedAllReduce::ring);
    for (const ordered_json& setting : cs.at("zero_plus_plus")) search.zero_plus_plus.push_back(zero_plus_plus_named(setting, "cluster_search.zero_plus_plus"));
    const ordered_json& candidates = cs.at("candidates");
    for (std::size_t k = 0; k < candidates.size(); ++k) {
      at = fmt::format("/cluster_search/candidates/{}", k);
      search.candidates.push_back(candidate_from_json(candidates.at(k)));
    }
    at = "/cluster_search";
    search.fastest = cs.at("fastest").is_null() ? std::nullopt : std::optional(cs.at("fastest").get<std::size_t>());
    search.notes = cs.at("notes").get<std::vector<std::string>>();
    plan.cluster_search = std::move(search);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: {}: {}; expected a cluster search's plan as comptrain plan --json writes it", source, at, e.what()));
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}: {}; expected a cluster search's plan as comptrain plan --json writes it", source, at, e.what()));
  }
  return plan;
}

}  // namespace comptrain::sim::detail

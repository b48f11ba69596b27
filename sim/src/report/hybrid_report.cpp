#include "comptrain/sim/report/hybrid_report.hpp"

#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "comptrain/sim/report/plan_report.hpp"
#include "comptrain/support/format.hpp"
#include "report/documents.hpp"

namespace comptrain::sim {

using nlohmann::ordered_json;

namespace {

ordered_json decision_json(const HybridDecision& d) {
  return {{"tensor", d.tensor}, {"class", d.tensor_class}, {"kind", hybrid::to_string(d.kind)}, {"codec", d.codec}, {"free_by", d.free_by}, {"action", d.action},
          {"bytes", d.bytes}, {"saved_bytes", d.saved_bytes}, {"added_seconds", d.added_seconds}};
}

ordered_json point_json(const HybridPoint& p) {
  ordered_json tried = ordered_json::array();
  for (const HybridCandidatePlan& c : p.tried) {
    tried.push_back({{"method", c.method}, {"model_feasible", c.model_feasible}, {"model_seconds", c.model_seconds},
                     {"model_peak_bytes", c.model_peak_bytes}, {"replayed", c.replayed}, {"fits", c.fits}, {"replay_seconds", c.replay_seconds},
                     {"replay_peak_bytes", c.replay_peak_bytes}});
  }
  ordered_json decisions = ordered_json::array();
  for (const HybridDecision& d : p.decisions) decisions.push_back(decision_json(d));
  return {{"batch", p.batch},
          {"fits", p.fits},
          {"chosen", p.chosen},
          {"iteration_seconds", p.iteration_seconds},
          {"samples_per_second", p.samples_per_second},
          {"peak_bytes", p.peak_bytes},
          {"budget_bytes", p.budget_bytes},
          {"solves", p.solves},
          {"milp_status", p.milp_status},
          {"milp_gap", p.milp_gap},
          {"milp_cpu_seconds", p.milp_cpu_seconds},
          {"greedy_cpu_seconds", p.greedy_cpu_seconds},
          {"milp_columns", p.milp_columns},
          {"milp_rows", p.milp_rows},
          {"candidates", p.candidates},
          {"tried", tried},
          {"best_rule", p.best_rule ? ordered_json(*p.best_rule) : ordered_json(nullptr)},
          {"best_rule_seconds", p.best_rule_seconds},
          {"decisions", decisions},
          {"notes", p.notes}};
}

std::string ms(double seconds) { return fmt::format("{:.2f}", seconds * 1e3); }

std::string decisions_text(const HybridPoint& p) {
  struct Group {
    int tensors = 0;
    std::int64_t bytes = 0, saved = 0;
    double added = 0;
  };
  std::map<std::pair<std::string, std::string>, Group> groups;
  for (const HybridDecision& d : p.decisions) {
    Group& g = groups[{d.action, d.tensor_class}];
    ++g.tensors;
    g.bytes += d.bytes;
    g.saved += d.saved_bytes;
    g.added += d.added_seconds;
  }
  std::string out = fmt::format("  {:<28} {:<10} {:>7} {:>12} {:>12} {:>10}\n", "action", "class", "tensors", "bytes", "saved", "added ms");
  for (const auto& [key, g] : groups) {
    out += fmt::format("  {:<28} {:<10} {:>7} {:>12} {:>12} {:>10}\n", key.first, key.second, g.tensors, format_bytes(g.bytes), format_bytes(g.saved),
                       ms(g.added));
  }
  return out;
}

}  // namespace

std::string hybrid_plan_text(const HybridPlan& plan) {
  std::string out = plan_table_text(plan.rules);
  out += "\nHybrid plan: per saved activation keep, compress, offload or recompute (decision model and MILP: hybrid/README.md)\n";
  out += fmt::format("  MILP by COIN-OR CBC, {:g} s of CPU per solve, the greedy as its warm start; every plan replayed, rejected above the limit {} and solved again\n",
                     plan.options.time_limit_seconds, format_bytes(plan.rules.limit_bytes));
  out += "  codecs offered:";
  if (plan.codecs.empty()) out += " none (the scenario's strategies have no compress rule)";
  for (const auto& c : plan.codecs) out += " " + c.label;
  out += fmt::format("; offload {}; recompute {}\n\n", plan.options.offload ? "yes" : "no", plan.options.recompute ? "yes" : "no");
  out += fmt::format("{:>7} {:>11} {:>12} {:<26} {:>8} {:<22} {:>11} {}\n", "batch", "samples/s", "peak", "plan", "iter ms", "solver (gap, cpu s)",
                     "rule ms", "best rule-based");
  for (const HybridPoint& p : plan.points) {
    const std::string solver = fmt::format("{} ({:.1f}%, {:.2f})", p.milp_status, 100 * p.milp_gap, p.milp_cpu_seconds);
    out += fmt::format("{:>7} {:>11} {:>12} {:<26} {:>8} {:<22} {:>11} {}\n", p.batch, p.fits ? fmt::format("{:.1f}", p.samples_per_second) : "-",
                       p.fits ? format_bytes(p.peak_bytes) : "-", p.fits ? p.chosen : "does not fit", p.fits ? ms(p.iteration_seconds) : "-", solver,
                       p.best_rule ? ms(p.best_rule_seconds) : "-", p.best_rule.value_or("-"));
  }
  if (!plan.best) {
    out += "\nNo batch fits with any plan.\n";
    return out;
  }
  const HybridPoint& best = plan.points[*plan.best];
  double best_rule = 0;
  std::string best_rule_name;
  for (const StrategyPlan& s : plan.rules.strategies) {
    if (s.best_samples_per_second > best_rule) {
      best_rule = s.best_samples_per_second;
      best_rule_name = s.strategy;
    }
  }
  out += fmt::format("\nBest: batch {} at {:.1f} samples/s ({}); largest batch that fits: {}", best.batch, best.samples_per_second, best.chosen,
                     plan.points[*plan.largest].batch);
  if (best_rule > 0) out += fmt::format("; best rule-based: {} at {:.1f} samples/s ({:+.1f}%)", best_rule_name, best_rule, 100 * (best.samples_per_second / best_rule - 1));
  out += "\n";
  std::vector<std::size_t> detailed{*plan.best};
  if (*plan.largest != *plan.best) detailed.push_back(*plan.largest);
  for (std::size_t i : detailed) {
    const HybridPoint& p = plan.points[i];
    if (p.decisions.empty()) {
      out += fmt::format("At batch {} the answer is {}.\n", p.batch, p.chosen);
      continue;
    }
    out += fmt::format("Decisions at batch {} ({}; per action and tensor class; every tensor in the JSON and the exported strategy):\n", p.batch,
                       i == *plan.best ? "the best" : "the largest");
    out += decisions_text(p);
  }
  // The notes of the best and the largest batch, and of batches where no solver plan was the
  // answer; every point's are in the JSON.
  for (std::size_t i = 0; i < plan.points.size(); ++i) {
    const HybridPoint& p = plan.points[i];
    const bool shown = i == *plan.best || i == plan.largest || !p.fits || p.chosen.rfind("rule:", 0) == 0;
    if (!shown) continue;
    for (const std::string& n : p.notes) out += fmt::format("note: batch {}: {}\n", p.batch, n);
  }
  return out;
}

std::string hybrid_plan_json(const HybridPlan& plan) {
  ordered_json j = detail::document_header("hybrid_plan");
  j["rules"] = nlohmann::ordered_json::parse(plan_json(plan.rules));
  j["options"] = {{"time_limit_seconds", plan.options.time_limit_seconds}, {"relative_gap", plan.options.relative_gap}, {"max_solves", plan.options.max_solves},
                  {"offload", plan.options.offload}, {"recompute", plan.options.recompute}, {"offload_lookahead", plan.options.offload_lookahead}};
  ordered_json codecs = ordered_json::array();
  for (const auto& c : plan.codecs) codecs.push_back(c.label);
  j["codecs"] = codecs;
  ordered_json points = ordered_json::array();
  for (const HybridPoint& p : plan.points) {
    ordered_json q = point_json(p);
    q["strategy"] = detail::strategy_json(p.strategy);
    points.push_back(std::move(q));
  }
  j["points"] = points;
  j["best_batch"] = plan.best ? ordered_json(plan.points[*plan.best].batch) : ordered_json(nullptr);
  j["largest_batch"] = plan.largest ? ordered_json(plan.points[*plan.largest].batch) : ordered_json(nullptr);
  return j.dump(2) + "\n";
}

}  // namespace comptrain::sim

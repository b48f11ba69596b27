#include "comptrain/sim/studies/hybrid_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "comptrain/hybrid/solve.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/sim/run/run.hpp"
#include "comptrain/sim/runtime/workers.hpp"
#include "comptrain/support/format.hpp"
#include "comptrain/support/input_error.hpp"
#include "report/documents.hpp"

namespace comptrain::sim {

using nlohmann::ordered_json;

namespace {

std::int64_t metric_peak(const SimulationResult& r, MemoryMetric metric) {
  if (r.out_of_memory) return r.out_of_memory->in_use + r.out_of_memory->requested;
  switch (metric) {
    case MemoryMetric::exact: return r.peak_bytes;
    case MemoryMetric::allocated: return r.device.peak_allocated;
    case MemoryMetric::reserved: return r.device.peak_reserved;
    case MemoryMetric::device: return r.device.device_peak();
  }
  return r.device.peak_reserved;
}

std::string action_label(hybrid::ActionKind kind, int codec, const std::vector<hybrid::CodecOption>& codecs) {
  if (kind == hybrid::ActionKind::compress) return codecs.at(static_cast<std::size_t>(codec)).label;
  return std::string(hybrid::to_string(kind));
}

std::vector<HybridDecision> decisions_of(const traces::Trace& trace, const hybrid::DecisionModel& model, const hybrid::Assignment& assignment) {
  std::vector<HybridDecision> out;
  for (std::size_t i = 0; i < model.candidates.size(); ++i) {
    const hybrid::Candidate& c = model.candidates[i];
    const hybrid::Option& o = c.options[assignment[i]];
    HybridDecision d;
    d.tensor = c.name;
    // The class a codec's ratio model uses: that of the storage's last forward writer.
    traces::OpKind kind = traces::OpKind::other;
    for (std::size_t w = 0; w < trace.ops().size(); ++w) {
      const auto& op = trace.op(w);
      if (op.phase != traces::Phase::forward) continue;
      for (traces::TensorIndex t : op.outputs) {
        if (trace.storage_of(t) == c.storage) kind = op.kind;
      }
    }
    d.tensor_class = std::string(models::to_string(models::tensor_class_of_op(kind)));
    d.kind = o.kind;
    d.codec = o.codec;
    if (o.kind == hybrid::ActionKind::offload) d.free_by = o.release_step - c.last_forward_use;
    d.action = action_label(o.kind, o.codec, model.codecs);
    d.bytes = c.bytes;
    switch (o.kind) {
      case hybrid::ActionKind::keep: d.saved_bytes = 0; break;
      case hybrid::ActionKind::compress: d.saved_bytes = c.bytes - o.compressed_bytes; break;
      case hybrid::ActionKind::offload:
      case hybrid::ActionKind::recompute: d.saved_bytes = c.bytes; break;
    }
    for (const hybrid::AddedWork& w : o.work) d.added_seconds += w.seconds;
    out.push_back(std::move(d));
  }
  return out;
}

// One rule per action, each naming its storages.
models::StrategySpec spec_of(const std::vector<HybridDecision>& decisions, const std::vector<hybrid::CodecOption>& codecs, int lookahead,
                             std::string name) {
  models::StrategySpec spec;
  spec.name = std::move(name);
  std::vector<std::string> recompute;
  std::map<int, std::vector<std::string>> compress, offload;
  for (const HybridDecision& d : decisions) {
    switch (d.kind) {
      case hybrid::ActionKind::keep: break;
      case hybrid::ActionKind::compress: compress[d.codec].push_back(d.tensor); break;
      case hybrid::ActionKind::offload: offload[d.free_by].push_back(d.tensor); break;
      case hybrid::ActionKind::recompute: recompute.push_back(d.tensor); break;
    }
  }
  for (auto& [codec, names] : compress) {
    models::TensorSelector select;
    select.names = std::move(names);
    spec.rules.push_back({std::move(select), codecs.at(static_cast<std::size_t>(codec)).action});
  }
  for (auto& [free_by, names] : offload) {
    models::TensorSelector select;
    select.names = std::move(names);
    models::OffloadAction action;
    action.lookahead = lookahead;
    action.free_by = free_by;
    spec.rules.push_back({std::move(select), action});
  }
  if (!recompute.empty()) {
    models::TensorSelector select;
    select.names = std::move(recompute);
    models::RecomputeAction action;
    action.mode = models::RecomputeAction::Mode::all;
    spec.rules.push_back({std::move(select), action});
  }
  return spec;
}

ordered_json decision_json(const HybridDecision& d) {
  return {{"tensor", d.tensor}, {"class", d.tensor_class}, {"kind", hybrid::to_string(d.kind)}, {"codec", d.codec}, {"free_by", d.free_by}, {"action", d.action},
          {"bytes", d.bytes}, {"saved_bytes", d.saved_bytes}, {"added_seconds", d.added_seconds}};
}

hybrid::ActionKind parse_kind(const std::string& text) {
  for (auto k : {hybrid::ActionKind::keep, hybrid::ActionKind::compress, hybrid::ActionKind::offload, hybrid::ActionKind::recompute}) {
    if (hybrid::to_string(k) == text) return k;
  }
  throw std::runtime_error("hybrid plan: unknown action kind '" + text + "' from a worker");
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

HybridPoint point_from_json(const nlohmann::json& j) {
  HybridPoint p;
  p.batch = j.at("batch");
  p.fits = j.at("fits");
  p.chosen = j.at("chosen");
  p.iteration_seconds = j.at("iteration_seconds");
  p.samples_per_second = j.at("samples_per_second");
  p.peak_bytes = j.at("peak_bytes");
  p.budget_bytes = j.at("budget_bytes");
  p.solves = j.at("solves");
  p.milp_status = j.at("milp_status");
  p.milp_gap = j.at("milp_gap");
  p.milp_cpu_seconds = j.at("milp_cpu_seconds");
  p.greedy_cpu_seconds = j.at("greedy_cpu_seconds");
  p.milp_columns = j.at("milp_columns");
  p.milp_rows = j.at("milp_rows");
  p.candidates = j.at("candidates");
  for (const auto& c : j.at("tried")) {
    p.tried.push_back({c.at("method"), c.at("model_feasible"), c.at("model_seconds"), c.at("model_peak_bytes"), c.at("replayed"), c.at("fits"),
                       c.at("replay_seconds"), c.at("replay_peak_bytes")});
  }
  for (const auto& d : j.at("decisions")) {
    HybridDecision x;
    x.tensor = d.at("tensor");
    x.tensor_class = d.at("class");
    x.kind = parse_kind(d.at("kind"));
    x.codec = d.at("codec");
    x.free_by = d.at("free_by");
    x.action = d.at("action");
    x.bytes = d.at("bytes");
    x.saved_bytes = d.at("saved_bytes");
    x.added_seconds = d.at("added_seconds");
    p.decisions.push_back(std::move(x));
  }
  for (const auto& n : j.at("notes")) p.notes.push_back(n);
  return p;
}

std::string milp_status_text(const hybrid::MilpSolution& m) {
  return m.too_large ? "too_large" : std::string(hybrid::to_string(m.status));
}

}  // namespace

std::vector<hybrid::CodecOption> hybrid_codecs(const Scenario& scenario, const std::vector<models::StrategySpec>& strategies) {
  std::vector<hybrid::CodecOption> codecs;
  std::set<std::string> seen;
  auto add = [&](const models::StrategySpec& s) {
    std::size_t index = 0;
    for (const models::StrategyRule& rule : s.rules) {
      const models::CompressAction* c = rule.compress();
      if (!c) continue;
      models::StrategySpec one;
      one.rules.push_back({{}, *c});
      const std::string key = detail::strategy_json(one)["rules"].dump();
      if (!seen.insert(key).second) continue;
      codecs.push_back({index++ == 0 ? s.name : fmt::format("{}#{}", s.name, index), *c});
    }
  };
  for (const auto& s : strategies) add(s);
  add(scenario.strategy);
  return codecs;
}

HybridPoint hybrid_point(const Scenario& scenario, const std::vector<hybrid::CodecOption>& codecs, std::int64_t batch, std::int64_t limit_bytes,
                         MemoryMetric metric, const HybridOptions& options) {
  HybridPoint point;
  point.batch = batch;
  const PreparedScenario prepared(scenario);
  if (prepared.cluster_shape().ranks() > 1) {
    throw InputError(scenario.source + ": plan --hybrid plans one GPU; expected a scenario without a parallelism section over several GPUs");
  }
  models::StrategySpec baseline;
  baseline.name = "baseline";
  const auto scheduled = schedule_run(prepared, baseline, batch);
  const ScheduledRun& base = std::get<ScheduledRun>(scheduled);  // the baseline always applies

  hybrid::ModelOptions model_options;
  model_options.codecs = codecs;
  model_options.offload = options.offload;
  model_options.recompute = options.recompute;
  model_options.offload_lookahead = options.offload_lookahead;
  const hybrid::DecisionModel model = hybrid::build_decision_model(base.trace, prepared.time_model(), base.schedule, model_options);
  point.candidates = model.candidates.size();

  // What the plan's metric holds beyond the model's live bytes (the allocator's rounding and
  // caching, the workspace; streams overlapping): the baseline replayed with its memory unbounded.
  Scenario unbounded = scenario;
  unbounded.platform->gpu.memory_bytes = models::platform_limits::max_memory_bytes;
  unbounded.platform->gpu.memory_visible_bytes = models::platform_limits::max_memory_bytes;
  const PreparedScenario prepared_unbounded(std::move(unbounded));
  const SimulationResult reference = replay(prepared_unbounded, base, Isolation::child_process);
  // The first budget assumes that share scales with the peak (the caching allocator's
  // fragmentation grows with the blocks it holds); replays correct it.
  const std::int64_t reference_peak = metric_peak(reference, metric);
  const double share = reference_peak > 0 ? std::min(1.0, static_cast<double>(model.baseline_peak()) / static_cast<double>(reference_peak)) : 1.0;
  point.budget_bytes = static_cast<std::int64_t>(std::floor(share * static_cast<double>(limit_bytes)));
  point.notes.push_back(fmt::format("the baseline's {} peak {} is {:.3f}x the model's live bytes ({}; the replay's exact peak {}): the model's first budget is "
                                    "the limit over that, {}",
                                    to_string(metric), format_bytes(reference_peak), 1 / share, format_bytes(model.baseline_peak()),
                                    format_bytes(reference.peak_bytes), format_bytes(point.budget_bytes)));

  for (int solve = 0; solve < std::max(1, options.max_solves); ++solve) {
    ++point.solves;
    const hybrid::Solution greedy = hybrid::solve_greedy(model, point.budget_bytes);
    // Keeping everything adds nothing: where it is within the budget it is the optimum, and the
    // program need not be solved.
    const bool keep_all = greedy.feasible && std::all_of(greedy.assignment.begin(), greedy.assignment.end(), [](std::size_t o) { return o == 0; });
    hybrid::MilpSolution milp;
    if (keep_all) {
      static_cast<hybrid::Solution&>(milp) = greedy;
      milp.status = hybrid::MilpStatus::optimal;
      milp.objective_seconds = milp.best_bound_seconds = greedy.evaluation.seconds;
    } else {
      hybrid::MilpSolveOptions milp_options;
      milp_options.time_limit_seconds = options.time_limit_seconds;
      milp_options.relative_gap = options.relative_gap;
      milp = hybrid::solve_exact(model, point.budget_bytes, milp_options, &greedy);
      if (milp.too_large && solve == 0) {
        point.notes.push_back(fmt::format("the program has {} non-zeros, more than CBC solves within its time limit ({}): the greedy's plans only",
                                          milp.nonzeros, milp_options.max_nonzeros));
      }
    }
    point.milp_status = milp_status_text(milp);
    point.milp_gap = milp.relative_gap;
    point.milp_cpu_seconds += milp.cpu_seconds;
    point.greedy_cpu_seconds += greedy.cpu_seconds;
    point.milp_columns = milp.columns;
    point.milp_rows = milp.rows;
    point.tried.clear();

    struct Tried {
      HybridCandidatePlan summary;
      std::vector<HybridDecision> decisions;
      models::StrategySpec spec;
    };
    std::vector<Tried> tried;
    auto consider = [&](const std::string& method, const hybrid::Solution& s) {
      Tried t;
      t.summary.method = method;
      t.summary.model_feasible = s.feasible;
      t.summary.model_seconds = s.evaluation.seconds;
      t.summary.model_peak_bytes = s.evaluation.peak_bytes;
      if (s.feasible) {
        for (const Tried& other : tried) {
          if (other.summary.replayed && other.decisions.size() == s.assignment.size()) {
            bool same = true;
            for (std::size_t i = 0; i < s.assignment.size() && same; ++i) same = other.decisions[i].kind == model.candidates[i].options[s.assignment[i]].kind && other.decisions[i].codec == model.candidates[i].options[s.assignment[i]].codec;
            if (same) {
              t.summary = other.summary;
              t.summary.method = method;
              tried.push_back(std::move(t));
              return;
            }
          }
        }
        t.decisions = decisions_of(base.trace, model, s.assignment);
        t.spec = spec_of(t.decisions, codecs, options.offload_lookahead, fmt::format("hybrid-b{}", batch));
        const RunOutcome outcome = run_scenario(prepared, t.spec, batch, Isolation::child_process);
        if (const auto* run = std::get_if<CompletedRun>(&outcome)) {
          t.summary.replayed = true;
          t.summary.replay_seconds = run->result.iteration_seconds;
          t.summary.replay_peak_bytes = metric_peak(run->result, metric);
          t.summary.fits = run->result.fits() && t.summary.replay_peak_bytes <= limit_bytes;
        } else {
          point.notes.push_back(fmt::format("{}: the exported plan does not apply: {}", method, std::get<models::NotApplicable>(outcome).reason));
        }
      }
      tried.push_back(std::move(t));
    };
    consider("milp", milp);
    consider("greedy", greedy);
    for (const Tried& t : tried) point.tried.push_back(t.summary);

    const Tried* best = nullptr;
    for (const Tried& t : tried) {
      if (t.summary.fits && !t.decisions.empty() && (!best || t.summary.replay_seconds < best->summary.replay_seconds)) best = &t;
    }
    if (best) {
      point.fits = true;
      point.chosen = best->summary.method;
      point.iteration_seconds = best->summary.replay_seconds;
      point.peak_bytes = best->summary.replay_peak_bytes;
      point.samples_per_second = static_cast<double>(batch) / point.iteration_seconds;
      point.decisions = best->decisions;
      point.strategy = best->spec;
      return point;
    }
    // Rejected: lower the budget below the closest plan's model peak by its excess (so that the
    // model cannot return that plan again) and solve again.
    std::optional<std::int64_t> excess;
    std::int64_t closest_model_peak = point.budget_bytes;
    for (const Tried& t : tried) {
      if (!t.summary.replayed) continue;
      const std::int64_t e = t.summary.replay_peak_bytes - limit_bytes;
      if (!excess || e < *excess) {
        excess = e;
        closest_model_peak = std::min(point.budget_bytes, t.summary.model_peak_bytes);
      }
    }
    if (!excess) {
      point.notes.push_back(fmt::format("the model finds no plan within {} of live bytes (the greedy's peak {}, the MILP {})",
                                        format_bytes(point.budget_bytes), format_bytes(greedy.evaluation.peak_bytes), milp_status_text(milp)));
      return point;
    }
    point.notes.push_back(fmt::format("solve {}: the replay exceeds the limit by {}; the model's budget is lowered by that", point.solves,
                                      format_bytes(*excess)));
    point.budget_bytes = closest_model_peak - std::max<std::int64_t>(*excess, 1) - (1 << 20);
  }
  return point;
}

}  // namespace comptrain::sim

namespace comptrain::sim {

namespace {

// The rule-based strategies' best fitting run at `batch`, from the ordinary plan.
void attach_rules(HybridPoint& p, const BatchSizePlan& rules) {
  for (const StrategyPlan& s : rules.strategies) {
    for (const PlanPoint& q : s.points) {
      if (q.batch != p.batch || !q.fits) continue;
      if (!p.best_rule || q.iteration_seconds < p.best_rule_seconds) {
        p.best_rule = s.strategy;
        p.best_rule_seconds = q.iteration_seconds;
      }
    }
  }
}

// Where a rule-based strategy replays faster than every solver plan (or fits where none does), it
// is the answer at that batch: it is one per-tensor plan among all the hybrid's.
void prefer_faster_rule(HybridPoint& p, const BatchSizePlan& rules) {
  if (!p.best_rule || (p.fits && p.iteration_seconds <= p.best_rule_seconds)) return;
  for (const StrategyPlan& s : rules.strategies) {
    if (s.strategy != *p.best_rule) continue;
    for (const PlanPoint& q : s.points) {
      if (q.batch != p.batch) continue;
      p.notes.push_back(p.fits ? fmt::format("the rule-based strategy '{}' replays faster ({:.4f} s) than the solvers' plan ({:.4f} s): it is the answer here",
                                             s.strategy, q.iteration_seconds, p.iteration_seconds)
                               : fmt::format("no solver plan fits; the rule-based strategy '{}' does: it is the answer here", s.strategy));
      p.fits = true;
      p.chosen = "rule:" + s.strategy;
      p.iteration_seconds = q.iteration_seconds;
      p.samples_per_second = q.samples_per_second;
      p.peak_bytes = q.peak_bytes;
      p.strategy = s.spec;
      p.decisions.clear();
      return;
    }
  }
}

}  // namespace

HybridPlan make_hybrid_plan(const PlanRequest& request, const HybridOptions& options, int jobs, bool progress) {
  if (request.scenario.parallelism && request.scenario.parallelism->nodes * request.scenario.parallelism->gpus_per_node > 1) {
    throw InputError(request.scenario.source + ": plan --hybrid plans one GPU; expected a scenario without a parallelism section over several GPUs");
  }
  if (request.scenario.has_sweep) throw InputError(request.scenario.source + ": plan --hybrid does not take a sweep; expected a scenario without a 'sweep' section");
  HybridPlan plan;
  plan.options = options;
  plan.rules = make_plans({request}, jobs, progress).front();
  plan.codecs = hybrid_codecs(request.scenario, request.strategies);

  // The batches compared: powers of two up to the first at which no rule-based strategy fits,
  // and each strategy's largest and fastest batch.
  std::set<std::int64_t> batches;
  std::int64_t rule_max = 0;
  for (const StrategyPlan& s : plan.rules.strategies) {
    if (s.max_batch) batches.insert(*s.max_batch), rule_max = std::max(rule_max, *s.max_batch);
    if (s.best_batch) batches.insert(*s.best_batch);
  }
  for (std::int64_t b = 1; b <= plan.rules.options.max_batch; b *= 2) {
    batches.insert(b);
    if (b > rule_max) break;
  }
  const std::int64_t limit = plan.rules.limit_bytes;
  const MemoryMetric metric = plan.rules.options.memory_metric;
  std::map<std::int64_t, HybridPoint> done;
  WorkerPool pool(jobs);
  Progress bar("plan --hybrid", progress);
  std::size_t submitted = 0, finished_jobs = 0;
  auto run_round = [&](const std::vector<std::int64_t>& round) {
    std::map<std::size_t, std::int64_t> owner;
    for (std::int64_t b : round) {
      if (done.count(b)) continue;
      owner[pool.submit([&request, &plan, b, limit, metric, &options]() {
        return point_json(hybrid_point(request.scenario, plan.codecs, b, limit, metric, options)).dump();
      })] = b;
    }
    submitted += owner.size();
    bar.update(finished_jobs, submitted, true);
    while (auto finished = pool.next()) {
      const std::int64_t b = owner.at(finished->id);
      std::string text = std::move(finished->outcome).result_or_throw();
      HybridPoint point = point_from_json(nlohmann::json::parse(text));
      if (point.fits) point.strategy = spec_of(point.decisions, plan.codecs, options.offload_lookahead, fmt::format("hybrid-b{}", b));
      done[b] = std::move(point);
      bar.update(++finished_jobs, submitted, true);
    }
  };
  run_round({batches.begin(), batches.end()});
  // Beyond the rule-based strategies' batches: double while the hybrid fits, then bisect.
  std::int64_t fitting = 0, failing = 0;
  for (const auto& [b, p] : done) {
    if (p.fits) fitting = std::max(fitting, b);
  }
  for (const auto& [b, p] : done) {
    if (!p.fits && b > fitting && (failing == 0 || b < failing)) failing = b;
  }
  const std::int64_t ceiling = plan.rules.options.max_batch;
  while (fitting > 0 && failing == 0 && fitting < ceiling) {
    const std::int64_t next = std::min(ceiling, fitting * 2);
    run_round({next});
    if (done[next].fits) fitting = next; else failing = next;
  }
  // Bisection to within 1% of the largest fitting batch (each point costs solves and replays).
  while (fitting > 0 && failing > fitting + 1 && failing - fitting > fitting / 100) {
    const std::int64_t mid = fitting + (failing - fitting) / 2;
    run_round({mid});
    if (done[mid].fits) fitting = mid; else failing = mid;
  }
  bar.finish(finished_jobs);
  for (auto& [b, p] : done) {
    attach_rules(p, plan.rules);
    prefer_faster_rule(p, plan.rules);
    plan.points.push_back(std::move(p));
  }
  for (std::size_t i = 0; i < plan.points.size(); ++i) {
    const HybridPoint& p = plan.points[i];
    if (!p.fits) continue;
    if (!plan.best || p.samples_per_second > plan.points[*plan.best].samples_per_second) plan.best = i;
    plan.largest = i;
  }
  return plan;
}

namespace {

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

#include "comptrain/sim/studies/hybrid_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "comptrain/hybrid/solve.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/sim/core/strategy_json.hpp"
#include "comptrain/sim/metrics/memory_peak.hpp"
#include "comptrain/sim/metrics/throughput.hpp"
#include "comptrain/sim/run/run.hpp"
#include "comptrain/sim/runtime/workers.hpp"
#include "comptrain/support/format.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::sim {
namespace {

// A replay's peak in the plan's metric; for one that ran out of memory, what it would have needed
// at least (metrics/memory_peak.hpp).
std::int64_t metric_peak(const SimulationResult& r, MemoryMetric metric) {
  return r.out_of_memory ? out_of_memory_peak(*r.out_of_memory) : peak_in(metric, memory_peaks(r));
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
      const std::string key = detail::strategy_rules_key(one);
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
      // Every micro-step of the iteration trains `batch` samples, as the planner counts them.
      point.samples_per_second = samples_per_second(global_batch(batch, 1, prepared.scenario().accumulation_steps), point.iteration_seconds);
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

// The hybrid's search beyond the rule-based strategies' batches (`done`: the points so far):
// double while the hybrid fits, then bisect to within 1% of the largest fitting batch, one batch
// per round (`fits_at` simulates one and says whether it fits). It is not the planner's Search
// (studies/plan/search.hpp), which probes several batches per round and bisects to the exact
// largest batch: a hybrid point costs MILP solves and several replays, and starts from the
// rule-based plan's batches rather than from 1.
void search_beyond_the_rules(const std::map<std::int64_t, HybridPoint>& done, std::int64_t ceiling, const std::function<bool(std::int64_t)>& fits_at) {
  std::int64_t fitting = 0, failing = 0;
  for (const auto& [b, p] : done) {
    if (p.fits) fitting = std::max(fitting, b);
  }
  for (const auto& [b, p] : done) {
    if (!p.fits && b > fitting && (failing == 0 || b < failing)) failing = b;
  }
  while (fitting > 0 && failing == 0 && fitting < ceiling) {
    const std::int64_t next = std::min(ceiling, fitting * 2);
    if (fits_at(next)) fitting = next; else failing = next;
  }
  while (fitting > 0 && failing > fitting + 1 && failing - fitting > fitting / 100) {
    const std::int64_t mid = fitting + (failing - fitting) / 2;
    if (fits_at(mid)) fitting = mid; else failing = mid;
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
  Progress bar("plan --hybrid", progress);
  std::size_t submitted = 0, finished_jobs = 0;
  // One round of batches, each in its own worker; the lowest-numbered failure is the one
  // reported, whatever the worker count.
  auto run_round = [&](const std::vector<std::int64_t>& round) {
    std::vector<std::int64_t> batches_run;
    std::vector<ChildProcess::Work> works;
    for (std::int64_t b : round) {
      if (done.count(b)) continue;
      batches_run.push_back(b);
      works.push_back([&request, &plan, b, limit, metric, &options]() {
        return wire::encode(hybrid_point(request.scenario, plan.codecs, b, limit, metric, options));
      });
    }
    submitted += works.size();
    bar.update(finished_jobs, submitted, true);
    std::vector<JobOutcome> outcomes = run_jobs(std::move(works), jobs, [&](std::size_t, const JobOutcome&) { bar.update(++finished_jobs, submitted, true); });
    if (const JobOutcome* failure = first_failure(outcomes)) JobOutcome(*failure).result_or_throw();
    for (std::size_t k = 0; k < batches_run.size(); ++k) {
      const std::int64_t b = batches_run[k];
      HybridPoint point = wire::decode<HybridPoint>(outcomes[k].text);
      if (point.fits) point.strategy = spec_of(point.decisions, plan.codecs, options.offload_lookahead, fmt::format("hybrid-b{}", b));
      done[b] = std::move(point);
    }
  };
  run_round({batches.begin(), batches.end()});
  search_beyond_the_rules(done, plan.rules.options.max_batch, [&](std::int64_t batch) {
    run_round({batch});
    return done.at(batch).fits;
  });
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

}  // namespace comptrain::sim

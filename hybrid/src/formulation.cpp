// The exact program of the decision model (hybrid/README.md, "Formulation").

#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <numeric>

#include "comptrain/hybrid/solve.hpp"

namespace comptrain::hybrid {

namespace {

// Memory rows in MiB: exact in binary floating point, and coefficients of 1e0..1e4 instead of
// 1e6..1e10 keep CBC's tolerances meaningful.
constexpr double kBytesPerUnit = 1024.0 * 1024.0;
// Seconds charged per non-keep choice, so that among equally fast plans the one that acts on fewer
// tensors wins (a copy the model finds free still uses the link).
constexpr double kActionSeconds = 1e-7;
// Times in microseconds: an iteration's steps take 1e-6..1 s, and CBC's absolute tolerances
// (1e-7 primal, 1e-6 integrality) would be a noticeable share of them in seconds.
constexpr double kUnitsPerSecond = 1e6;
double units(double seconds) { return seconds * kUnitsPerSecond; }

struct Builder {
  MilpProblem problem;
  std::vector<double> start;  // warm start values, filled alongside

  int column(std::string name, double lower, double upper, double objective, bool integer, double value) {
    problem.columns.push_back({std::move(name), lower, upper, objective, integer});
    start.push_back(value);
    return static_cast<int>(problem.columns.size()) - 1;
  }
  void row(std::string name, std::vector<std::pair<int, double>> terms, double lower, double upper) {
    problem.rows.push_back({std::move(name), std::move(terms), lower, upper});
  }
};

}  // namespace

MilpSolution solve_exact(const DecisionModel& model, std::int64_t budget_bytes, const MilpSolveOptions& options, const Solution* warm_start) {
  const double started = static_cast<double>(std::clock()) / CLOCKS_PER_SEC;
  const int n = model.steps();
  const std::size_t count = model.candidates.size();
  const int lookahead = model.offload_lookahead;
  const bool warm = warm_start != nullptr && warm_start->feasible;
  const Evaluation* wev = warm ? &warm_start->evaluation : nullptr;
  auto chosen = [&](std::size_t i, std::size_t o) { return warm && warm_start->assignment[i] == o ? 1.0 : 0.0; };

  // An upper bound of the iteration's seconds under any assignment, for the switched rows.
  double big_m = 0;
  for (double t : model.step_seconds) big_m += t;
  for (const Candidate& c : model.candidates) {
    double most = 0;
    for (const Option& o : c.options) {
      double t = 0;
      for (const AddedWork& w : o.work) t += w.seconds;
      most = std::max(most, t);
    }
    big_m += most + 2 * c.copy_seconds;
  }
  big_m = units(big_m * 1.01 + 1e-6);

  Builder b;
  // x[i][o]: candidate i takes option o.
  std::vector<std::vector<int>> x(count);
  for (std::size_t i = 0; i < count; ++i) {
    const Candidate& c = model.candidates[i];
    std::vector<std::pair<int, double>> one;
    for (std::size_t o = 0; o < c.options.size(); ++o) {
      x[i].push_back(b.column("x" + std::to_string(i) + "_" + std::to_string(o), 0, 1, o == 0 ? 0.0 : units(kActionSeconds), true, chosen(i, o)));
      one.push_back({x[i].back(), 1.0});
    }
    b.row("one_option_" + std::to_string(i), std::move(one), 1, 1);
  }
  // T[k]: when step k starts (T[n]: the iteration's end, the objective).
  std::vector<int> T(static_cast<std::size_t>(n) + 1);
  for (int k = 0; k <= n; ++k) {
    T[static_cast<std::size_t>(k)] = b.column("T" + std::to_string(k), 0, milp_infinity, k == n ? 1.0 : 0.0, false,
                                              wev ? units(wev->step_start[static_cast<std::size_t>(k)]) : 0.0);
  }
  {
    std::vector<std::vector<std::pair<int, double>>> work(static_cast<std::size_t>(n) + 1);
    for (std::size_t i = 0; i < count; ++i) {
      const Candidate& c = model.candidates[i];
      for (std::size_t o = 0; o < c.options.size(); ++o) {
        for (const AddedWork& w : c.options[o].work) {
          if (w.seconds != 0) work[static_cast<std::size_t>(std::clamp(w.step, 0, n))].push_back({x[i][o], -units(w.seconds)});
        }
      }
    }
    for (int k = 0; k <= n; ++k) {
      auto terms = std::move(work[static_cast<std::size_t>(k)]);
      terms.push_back({T[static_cast<std::size_t>(k)], 1.0});
      double rhs = 0;
      if (k > 0) {
        terms.push_back({T[static_cast<std::size_t>(k - 1)], -1.0});
        rhs = units(model.step_seconds[static_cast<std::size_t>(k - 1)]);
      }
      b.row("step_" + std::to_string(k), std::move(terms), rhs, milp_infinity);
    }
  }

  // Copy queues: out in (a + 1, index) order, back in (b - L, index) order, as evaluate() runs them.
  std::vector<std::size_t> offloadable;
  for (std::size_t i = 0; i < count; ++i) {
    for (const Option& o : model.candidates[i].options) {
      if (o.kind == ActionKind::offload) {
        offloadable.push_back(i);
        break;
      }
    }
  }
  auto offloaded_terms = [&](std::size_t i, double coefficient) {
    std::vector<std::pair<int, double>> terms;
    for (std::size_t o = 0; o < model.candidates[i].options.size(); ++o) {
      if (model.candidates[i].options[o].kind == ActionKind::offload) terms.push_back({x[i][o], coefficient});
    }
    return terms;
  };
  auto is_offloaded = [&](std::size_t i) {
    return warm && model.candidates[i].options[warm_start->assignment[i]].kind == ActionKind::offload;
  };
  std::vector<std::size_t> out_order = offloadable, back_order = offloadable;
  std::stable_sort(out_order.begin(), out_order.end(), [&](std::size_t p, std::size_t q) {
    return model.candidates[p].last_forward_use < model.candidates[q].last_forward_use;
  });
  std::stable_sort(back_order.begin(), back_order.end(), [&](std::size_t p, std::size_t q) {
    return model.candidates[p].first_backward_read < model.candidates[q].first_backward_read;
  });
  std::map<std::size_t, int> G, F;
  std::map<std::size_t, double> g_value, f_value;
  {
    int previous = -1;
    double previous_value = 0;
    for (std::size_t i : out_order) {
      const Candidate& c = model.candidates[i];
      const double p = units(c.copy_seconds);
      double value = 0;
      const std::size_t a = static_cast<std::size_t>(c.last_forward_use);
      if (warm) {
        const double issue = units(wev->step_start[a] + model.step_seconds[a]);
        value = is_offloaded(i) ? std::max(previous_value, issue) + p : std::max(previous_value, issue);
      }
      const int g = b.column("G" + std::to_string(i), 0, milp_infinity, 0, false, value);
      G[i] = g;
      g_value[i] = value;
      auto terms = offloaded_terms(i, -p);
      terms.push_back({g, 1.0});
      if (previous >= 0) {
        auto chain = terms;
        chain.push_back({previous, -1.0});
        b.row("out_queue_" + std::to_string(i), std::move(chain), 0, milp_infinity);
      }
      // Issued when step a ends: G - T[a] - pX >= seconds of step a.
      terms.push_back({T[a], -1.0});
      b.row("out_issue_" + std::to_string(i), std::move(terms), units(model.step_seconds[a]), milp_infinity);
      // The release step waits for it: G <= T[e] where option (i, e) is taken.
      for (std::size_t o = 0; o < c.options.size(); ++o) {
        if (c.options[o].kind != ActionKind::offload) continue;
        b.row("release_" + std::to_string(i) + "_" + std::to_string(o),
              {{g, 1.0}, {T[static_cast<std::size_t>(c.options[o].release_step)], -1.0}, {x[i][o], big_m}}, -milp_infinity, big_m);
      }
      previous = g;
      previous_value = value;
    }
  }
  {
    int previous = -1;
    double previous_value = 0;
    for (std::size_t i : back_order) {
      const Candidate& c = model.candidates[i];
      const double p = units(c.copy_seconds);
      const std::size_t issue_step = static_cast<std::size_t>(c.first_backward_read - lookahead);
      double value = 0;
      if (warm) {
        const double issue = units(wev->step_start[issue_step]);
        value = is_offloaded(i) ? std::max({previous_value, issue, g_value[i]}) + p : std::max(previous_value, issue);
      }
      const int f = b.column("F" + std::to_string(i), 0, milp_infinity, 0, false, value);
      F[i] = f;
      f_value[i] = value;
      auto terms = offloaded_terms(i, -p);
      terms.push_back({f, 1.0});
      if (previous >= 0) {
        auto chain = terms;
        chain.push_back({previous, -1.0});
        b.row("back_queue_" + std::to_string(i), std::move(chain), 0, milp_infinity);
      }
      auto issue = terms;
      issue.push_back({T[issue_step], -1.0});
      b.row("back_issue_" + std::to_string(i), std::move(issue), 0, milp_infinity);
      // After its own copy out, where offloaded: F - G - pX - MX >= -M.
      auto after_out = offloaded_terms(i, -p - big_m);
      after_out.push_back({f, 1.0});
      after_out.push_back({G[i], -1.0});
      b.row("back_after_out_" + std::to_string(i), std::move(after_out), -big_m, milp_infinity);
      // The reader waits for it, where offloaded: T[b] - F - MX >= -M.
      auto wait = offloaded_terms(i, -big_m);
      wait.push_back({T[static_cast<std::size_t>(c.first_backward_read)], 1.0});
      wait.push_back({f, -1.0});
      b.row("reader_waits_" + std::to_string(i), std::move(wait), -big_m, milp_infinity);
      previous = f;
      previous_value = value;
    }
  }

  // Replays: N[j][e] = 1 when candidate j must be present at event e (the b of some dropped
  // candidate) for a replay, E[j][e] its bytes counted again where it is not kept.
  std::vector<int> events;
  std::vector<int> recompute_option(count, -1);
  for (std::size_t i = 0; i < count; ++i) {
    const auto& options_i = model.candidates[i].options;
    for (std::size_t o = 0; o < options_i.size(); ++o) {
      if (options_i[o].kind == ActionKind::recompute) recompute_option[i] = static_cast<int>(o);
    }
    if (recompute_option[i] >= 0) events.push_back(model.candidates[i].first_backward_read);
  }
  std::sort(events.begin(), events.end());
  events.erase(std::unique(events.begin(), events.end()), events.end());
  std::vector<bool> is_read(count, false);
  for (std::size_t s = 0; s < count; ++s) {
    if (recompute_option[s] < 0) continue;
    for (std::size_t j : model.candidates[s].replay_reads) is_read[j] = true;
  }
  // Events before b_j, for each candidate j a replay reads.
  std::vector<std::map<int, int>> N(count), E(count);
  for (std::size_t j = 0; j < count; ++j) {
    if (!is_read[j]) continue;
    const Candidate& c = model.candidates[j];
    const bool kept = warm && warm_start->assignment[j] == 0;
    for (int e : events) {
      if (e >= c.first_backward_read) break;
      const double need = warm && wev->needed_from[j] <= e ? 1.0 : 0.0;
      N[j][e] = b.column("N" + std::to_string(j) + "_" + std::to_string(e), 0, 1, 0, false, need);
      E[j][e] = b.column("E" + std::to_string(j) + "_" + std::to_string(e), 0, 1, 0, false, kept ? 0.0 : need);
      b.row("extra_" + std::to_string(j) + "_" + std::to_string(e), {{E[j][e], 1.0}, {N[j][e], -1.0}, {x[j][0], 1.0}}, 0, milp_infinity);
    }
  }
  for (std::size_t s = 0; s < count; ++s) {
    if (recompute_option[s] < 0) continue;
    const int r = x[s][static_cast<std::size_t>(recompute_option[s])];
    const int bs = model.candidates[s].first_backward_read;
    for (std::size_t j : model.candidates[s].replay_reads) {
      for (const auto& [e, n_je] : N[j]) {
        const std::string name = std::to_string(s) + "_" + std::to_string(j) + "_" + std::to_string(e);
        if (e >= bs) {
          b.row("read_" + name, {{n_je, 1.0}, {r, -1.0}}, 0, milp_infinity);
        } else if (auto it = N[s].find(e); it != N[s].end()) {
          b.row("read_early_" + name, {{n_je, 1.0}, {it->second, -1.0}, {r, -1.0}}, -1, milp_infinity);
        }
      }
    }
  }

  // Memory at every step where it could exceed the budget.
  std::size_t nonzeros = 0;
  {
    std::vector<std::vector<std::pair<int, double>>> at(static_cast<std::size_t>(n));
    std::vector<double> most(static_cast<std::size_t>(n), 0.0);
    for (std::size_t i = 0; i < count; ++i) {
      const Candidate& c = model.candidates[i];
      for (std::size_t o = 0; o < c.options.size(); ++o) {
        // Sum the option's changes per step (a replay's scratch can fall inside its own range).
        std::map<int, std::int64_t> diff;
        for (const MemoryChange& m : c.options[o].memory) {
          diff[std::clamp(m.first, 0, n)] += m.bytes;
          diff[std::clamp(m.last, 0, n)] -= m.bytes;
        }
        std::int64_t running = 0;
        for (auto it = diff.begin(); it != diff.end(); ++it) {
          running += it->second;
          auto next = std::next(it);
          const int to = next == diff.end() ? n : next->first;
          if (running == 0) continue;
          for (int k = it->first; k < to; ++k) {
            at[static_cast<std::size_t>(k)].push_back({x[i][o], static_cast<double>(running) / kBytesPerUnit});
            if (running > 0) most[static_cast<std::size_t>(k)] += static_cast<double>(running) / kBytesPerUnit;
          }
        }
      }
    }
    for (std::size_t j = 0; j < count; ++j) {
      if (E[j].empty()) continue;
      const Candidate& c = model.candidates[j];
      for (int k = 0; k < c.first_backward_read; ++k) {
        auto ev = std::upper_bound(events.begin(), events.end(), k);
        if (ev == events.begin()) continue;
        const int e = *std::prev(ev);
        auto it = E[j].find(e);
        if (it == E[j].end()) continue;
        at[static_cast<std::size_t>(k)].push_back({it->second, static_cast<double>(c.bytes) / kBytesPerUnit});
        most[static_cast<std::size_t>(k)] += static_cast<double>(c.bytes) / kBytesPerUnit;
      }
    }
    const double budget = static_cast<double>(budget_bytes) / kBytesPerUnit;
    for (int k = 0; k < n; ++k) {
      const double base = static_cast<double>(model.live_bytes[static_cast<std::size_t>(k)]) / kBytesPerUnit;
      if (base + most[static_cast<std::size_t>(k)] <= budget) continue;  // cannot bind
      nonzeros += at[static_cast<std::size_t>(k)].size();
      b.row("memory_" + std::to_string(k), std::move(at[static_cast<std::size_t>(k)]), -milp_infinity, budget - base);
    }
  }
  for (const MilpRow& row : b.problem.rows) nonzeros += row.terms.size();

  if (nonzeros > options.max_nonzeros) {
    MilpSolution s;
    s.too_large = true;
    s.columns = b.problem.columns.size();
    s.rows = b.problem.rows.size();
    s.nonzeros = nonzeros;
    s.cpu_seconds = static_cast<double>(std::clock()) / CLOCKS_PER_SEC - started;
    return s;
  }
  MilpOptions milp;
  milp.time_limit_seconds = options.time_limit_seconds;
  milp.relative_gap = options.relative_gap;
  if (warm) milp.warm_start = b.start;
  const MilpResult result = solve_milp(b.problem, milp);

  MilpSolution s;
  s.status = result.status;
  s.columns = b.problem.columns.size();
  s.rows = b.problem.rows.size();
  s.nonzeros = nonzeros;
  if (result.status == MilpStatus::optimal || result.status == MilpStatus::feasible) {
    s.objective_seconds = result.objective / kUnitsPerSecond;
    s.best_bound_seconds = result.best_bound / kUnitsPerSecond;
    s.relative_gap = result.relative_gap;
    s.assignment.assign(count, 0);
    for (std::size_t i = 0; i < count; ++i) {
      std::size_t best = 0;
      for (std::size_t o = 1; o < x[i].size(); ++o) {
        if (result.values[static_cast<std::size_t>(x[i][o])] > result.values[static_cast<std::size_t>(x[i][best])]) best = o;
      }
      s.assignment[i] = best;
    }
    // The objective charges kActionSeconds per non-keep choice; the iteration's seconds are without it.
    std::size_t actions = 0;
    for (std::size_t o : s.assignment) actions += o != 0;
    s.objective_seconds -= kActionSeconds * static_cast<double>(actions);
    s.evaluation = evaluate(model, s.assignment);
    s.feasible = s.evaluation.peak_bytes <= budget_bytes;
  }
  s.cpu_seconds = static_cast<double>(std::clock()) / CLOCKS_PER_SEC - started;
  return s;
}

}  // namespace comptrain::hybrid

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

// The program, built in the order its columns and rows are numbered (CBC's search depends on the
// order, so it is part of the formulation): the choices, the step times, the copy queues, the
// replays' presence, then the memory rows. One member function per family of rows.
class Formulation {
 public:
  Formulation(const DecisionModel& model, const Solution* warm_start)
      : model_(model),
        n_(model.steps()),
        count_(model.candidates.size()),
        warm_(warm_start != nullptr && warm_start->feasible),
        warm_start_(warm_start),
        wev_(warm_ ? &warm_start->evaluation : nullptr),
        big_m_(big_m(model)) {}

  void build(std::int64_t budget_bytes) {
    add_choices();
    add_step_times();
    add_copy_out_queue();
    add_copy_back_queue();
    add_replay_presence();
    add_memory_rows(budget_bytes);
  }
  const Builder& builder() const { return b_; }
  // The rows' nonzeros, with those of memory rows counted as they were added.
  std::size_t nonzeros() const {
    std::size_t total = memory_nonzeros_;
    for (const MilpRow& row : b_.problem.rows) total += row.terms.size();
    return total;
  }
  // The option taken by each candidate in CBC's values: the largest x.
  std::vector<std::size_t> assignment(const std::vector<double>& values) const {
    std::vector<std::size_t> chosen(count_, 0);
    for (std::size_t i = 0; i < count_; ++i) {
      std::size_t best = 0;
      for (std::size_t o = 1; o < x_[i].size(); ++o) {
        if (values[static_cast<std::size_t>(x_[i][o])] > values[static_cast<std::size_t>(x_[i][best])]) best = o;
      }
      chosen[i] = best;
    }
    return chosen;
  }

 private:
  // An upper bound of the iteration's seconds under any assignment, for the switched rows.
  static double big_m(const DecisionModel& model) {
    double total = 0;
    for (double t : model.step_seconds) total += t;
    for (const Candidate& c : model.candidates) {
      double most = 0;
      for (const Option& o : c.options) {
        double t = 0;
        for (const AddedWork& w : o.work) t += w.seconds;
        most = std::max(most, t);
      }
      total += most + 2 * c.copy_seconds;
    }
    return units(total * 1.01 + 1e-6);
  }
  double chosen(std::size_t i, std::size_t o) const { return warm_ && warm_start_->assignment[i] == o ? 1.0 : 0.0; }
  bool is_offloaded(std::size_t i) const {
    return warm_ && model_.candidates[i].options[warm_start_->assignment[i]].kind == ActionKind::offload;
  }
  std::vector<std::pair<int, double>> offloaded_terms(std::size_t i, double coefficient) const {
    std::vector<std::pair<int, double>> terms;
    for (std::size_t o = 0; o < model_.candidates[i].options.size(); ++o) {
      if (model_.candidates[i].options[o].kind == ActionKind::offload) terms.push_back({x_[i][o], coefficient});
    }
    return terms;
  }

  // x[i][o]: candidate i takes option o.
  void add_choices() {
    x_.resize(count_);
    for (std::size_t i = 0; i < count_; ++i) {
      const Candidate& c = model_.candidates[i];
      std::vector<std::pair<int, double>> one;
      for (std::size_t o = 0; o < c.options.size(); ++o) {
        x_[i].push_back(b_.column("x" + std::to_string(i) + "_" + std::to_string(o), 0, 1, o == 0 ? 0.0 : units(kActionSeconds), true, chosen(i, o)));
        one.push_back({x_[i].back(), 1.0});
      }
      b_.row("one_option_" + std::to_string(i), std::move(one), 1, 1);
    }
  }

  // T[k]: when step k starts (T[n]: the iteration's end, the objective).
  void add_step_times() {
    T_.resize(static_cast<std::size_t>(n_) + 1);
    for (int k = 0; k <= n_; ++k) {
      T_[static_cast<std::size_t>(k)] = b_.column("T" + std::to_string(k), 0, milp_infinity, k == n_ ? 1.0 : 0.0, false,
                                                  wev_ ? units(wev_->step_start[static_cast<std::size_t>(k)]) : 0.0);
    }
    std::vector<std::vector<std::pair<int, double>>> work(static_cast<std::size_t>(n_) + 1);
    for (std::size_t i = 0; i < count_; ++i) {
      const Candidate& c = model_.candidates[i];
      for (std::size_t o = 0; o < c.options.size(); ++o) {
        for (const AddedWork& w : c.options[o].work) {
          if (w.seconds != 0) work[static_cast<std::size_t>(std::clamp(w.step, 0, n_))].push_back({x_[i][o], -units(w.seconds)});
        }
      }
    }
    for (int k = 0; k <= n_; ++k) {
      auto terms = std::move(work[static_cast<std::size_t>(k)]);
      terms.push_back({T_[static_cast<std::size_t>(k)], 1.0});
      double rhs = 0;
      if (k > 0) {
        terms.push_back({T_[static_cast<std::size_t>(k - 1)], -1.0});
        rhs = units(model_.step_seconds[static_cast<std::size_t>(k - 1)]);
      }
      b_.row("step_" + std::to_string(k), std::move(terms), rhs, milp_infinity);
    }
  }

  // The candidates that may be offloaded, in the order a queue runs them.
  std::vector<std::size_t> offloadable_by(int Candidate::*key) const {
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < count_; ++i) {
      for (const Option& o : model_.candidates[i].options) {
        if (o.kind == ActionKind::offload) {
          order.push_back(i);
          break;
        }
      }
    }
    std::stable_sort(order.begin(), order.end(), [&](std::size_t p, std::size_t q) { return model_.candidates[p].*key < model_.candidates[q].*key; });
    return order;
  }

  // Copies out in (a + 1, index) order, as evaluate() runs them; G[i]: when i's copy out ends.
  void add_copy_out_queue() {
    int previous = -1;
    double previous_value = 0;
    for (std::size_t i : offloadable_by(&Candidate::last_forward_use)) {
      const Candidate& c = model_.candidates[i];
      const double p = units(c.copy_seconds);
      double value = 0;
      const std::size_t a = static_cast<std::size_t>(c.last_forward_use);
      if (warm_) {
        const double issue = units(wev_->step_start[a] + model_.step_seconds[a]);
        value = is_offloaded(i) ? std::max(previous_value, issue) + p : std::max(previous_value, issue);
      }
      const int g = b_.column("G" + std::to_string(i), 0, milp_infinity, 0, false, value);
      G_[i] = g;
      g_value_[i] = value;
      auto terms = offloaded_terms(i, -p);
      terms.push_back({g, 1.0});
      if (previous >= 0) {
        auto chain = terms;
        chain.push_back({previous, -1.0});
        b_.row("out_queue_" + std::to_string(i), std::move(chain), 0, milp_infinity);
      }
      // Issued when step a ends: G - T[a] - pX >= seconds of step a.
      terms.push_back({T_[a], -1.0});
      b_.row("out_issue_" + std::to_string(i), std::move(terms), units(model_.step_seconds[a]), milp_infinity);
      // The release step waits for it: G <= T[e] where option (i, e) is taken.
      for (std::size_t o = 0; o < c.options.size(); ++o) {
        if (c.options[o].kind != ActionKind::offload) continue;
        b_.row("release_" + std::to_string(i) + "_" + std::to_string(o),
               {{g, 1.0}, {T_[static_cast<std::size_t>(c.options[o].release_step)], -1.0}, {x_[i][o], big_m_}}, -milp_infinity, big_m_);
      }
      previous = g;
      previous_value = value;
    }
  }

  // Copies back in (b - L, index) order; F[i]: when i's copy back ends.
  void add_copy_back_queue() {
    const int lookahead = model_.offload_lookahead;
    int previous = -1;
    double previous_value = 0;
    for (std::size_t i : offloadable_by(&Candidate::first_backward_read)) {
      const Candidate& c = model_.candidates[i];
      const double p = units(c.copy_seconds);
      const std::size_t issue_step = static_cast<std::size_t>(c.first_backward_read - lookahead);
      double value = 0;
      if (warm_) {
        const double issue = units(wev_->step_start[issue_step]);
        value = is_offloaded(i) ? std::max({previous_value, issue, g_value_[i]}) + p : std::max(previous_value, issue);
      }
      const int f = b_.column("F" + std::to_string(i), 0, milp_infinity, 0, false, value);
      auto terms = offloaded_terms(i, -p);
      terms.push_back({f, 1.0});
      if (previous >= 0) {
        auto chain = terms;
        chain.push_back({previous, -1.0});
        b_.row("back_queue_" + std::to_string(i), std::move(chain), 0, milp_infinity);
      }
      auto issue = terms;
      issue.push_back({T_[issue_step], -1.0});
      b_.row("back_issue_" + std::to_string(i), std::move(issue), 0, milp_infinity);
      // After its own copy out, where offloaded: F - G - pX - MX >= -M.
      auto after_out = offloaded_terms(i, -p - big_m_);
      after_out.push_back({f, 1.0});
      after_out.push_back({G_[i], -1.0});
      b_.row("back_after_out_" + std::to_string(i), std::move(after_out), -big_m_, milp_infinity);
      // The reader waits for it, where offloaded: T[b] - F - MX >= -M.
      auto wait = offloaded_terms(i, -big_m_);
      wait.push_back({T_[static_cast<std::size_t>(c.first_backward_read)], 1.0});
      wait.push_back({f, -1.0});
      b_.row("reader_waits_" + std::to_string(i), std::move(wait), -big_m_, milp_infinity);
      previous = f;
      previous_value = value;
    }
  }

  // Replays: N[j][e] = 1 when candidate j must be present at event e (the b of some dropped
  // candidate) for a replay, E[j][e] its bytes counted again where it is not kept.
  void add_replay_presence() {
    std::vector<int> recompute_option(count_, -1);
    for (std::size_t i = 0; i < count_; ++i) {
      const auto& options_i = model_.candidates[i].options;
      for (std::size_t o = 0; o < options_i.size(); ++o) {
        if (options_i[o].kind == ActionKind::recompute) recompute_option[i] = static_cast<int>(o);
      }
      if (recompute_option[i] >= 0) events_.push_back(model_.candidates[i].first_backward_read);
    }
    std::sort(events_.begin(), events_.end());
    events_.erase(std::unique(events_.begin(), events_.end()), events_.end());
    std::vector<bool> is_read(count_, false);
    for (std::size_t s = 0; s < count_; ++s) {
      if (recompute_option[s] < 0) continue;
      for (std::size_t j : model_.candidates[s].replay_reads) is_read[j] = true;
    }
    // Events before b_j, for each candidate j a replay reads.
    std::vector<std::map<int, int>> N(count_);
    E_.assign(count_, {});
    for (std::size_t j = 0; j < count_; ++j) {
      if (!is_read[j]) continue;
      const Candidate& c = model_.candidates[j];
      const bool kept = warm_ && warm_start_->assignment[j] == 0;
      for (int e : events_) {
        if (e >= c.first_backward_read) break;
        const double need = warm_ && wev_->needed_from[j] <= e ? 1.0 : 0.0;
        N[j][e] = b_.column("N" + std::to_string(j) + "_" + std::to_string(e), 0, 1, 0, false, need);
        E_[j][e] = b_.column("E" + std::to_string(j) + "_" + std::to_string(e), 0, 1, 0, false, kept ? 0.0 : need);
        b_.row("extra_" + std::to_string(j) + "_" + std::to_string(e), {{E_[j][e], 1.0}, {N[j][e], -1.0}, {x_[j][0], 1.0}}, 0, milp_infinity);
      }
    }
    for (std::size_t s = 0; s < count_; ++s) {
      if (recompute_option[s] < 0) continue;
      const int r = x_[s][static_cast<std::size_t>(recompute_option[s])];
      const int bs = model_.candidates[s].first_backward_read;
      for (std::size_t j : model_.candidates[s].replay_reads) {
        for (const auto& [e, n_je] : N[j]) {
          const std::string name = std::to_string(s) + "_" + std::to_string(j) + "_" + std::to_string(e);
          if (e >= bs) {
            b_.row("read_" + name, {{n_je, 1.0}, {r, -1.0}}, 0, milp_infinity);
          } else if (auto it = N[s].find(e); it != N[s].end()) {
            b_.row("read_early_" + name, {{n_je, 1.0}, {it->second, -1.0}, {r, -1.0}}, -1, milp_infinity);
          }
        }
      }
    }
  }

  // Memory at every step where it could exceed the budget.
  void add_memory_rows(std::int64_t budget_bytes) {
    std::vector<std::vector<std::pair<int, double>>> at(static_cast<std::size_t>(n_));
    std::vector<double> most(static_cast<std::size_t>(n_), 0.0);
    for (std::size_t i = 0; i < count_; ++i) {
      const Candidate& c = model_.candidates[i];
      for (std::size_t o = 0; o < c.options.size(); ++o) {
        // Sum the option's changes per step (a replay's scratch can fall inside its own range).
        std::map<int, std::int64_t> diff;
        for (const MemoryChange& m : c.options[o].memory) {
          diff[std::clamp(m.first, 0, n_)] += m.bytes;
          diff[std::clamp(m.last, 0, n_)] -= m.bytes;
        }
        std::int64_t running = 0;
        for (auto it = diff.begin(); it != diff.end(); ++it) {
          running += it->second;
          auto next = std::next(it);
          const int to = next == diff.end() ? n_ : next->first;
          if (running == 0) continue;
          for (int k = it->first; k < to; ++k) {
            at[static_cast<std::size_t>(k)].push_back({x_[i][o], static_cast<double>(running) / kBytesPerUnit});
            if (running > 0) most[static_cast<std::size_t>(k)] += static_cast<double>(running) / kBytesPerUnit;
          }
        }
      }
    }
    for (std::size_t j = 0; j < count_; ++j) {
      if (E_[j].empty()) continue;
      const Candidate& c = model_.candidates[j];
      for (int k = 0; k < c.first_backward_read; ++k) {
        auto ev = std::upper_bound(events_.begin(), events_.end(), k);
        if (ev == events_.begin()) continue;
        const int e = *std::prev(ev);
        auto it = E_[j].find(e);
        if (it == E_[j].end()) continue;
        at[static_cast<std::size_t>(k)].push_back({it->second, static_cast<double>(c.bytes) / kBytesPerUnit});
        most[static_cast<std::size_t>(k)] += static_cast<double>(c.bytes) / kBytesPerUnit;
      }
    }
    const double budget = static_cast<double>(budget_bytes) / kBytesPerUnit;
    for (int k = 0; k < n_; ++k) {
      const double base = static_cast<double>(model_.live_bytes[static_cast<std::size_t>(k)]) / kBytesPerUnit;
      if (base + most[static_cast<std::size_t>(k)] <= budget) continue;  // cannot bind
      memory_nonzeros_ += at[static_cast<std::size_t>(k)].size();
      b_.row("memory_" + std::to_string(k), std::move(at[static_cast<std::size_t>(k)]), -milp_infinity, budget - base);
    }
  }

  const DecisionModel& model_;
  const int n_;
  const std::size_t count_;
  const bool warm_;
  const Solution* warm_start_;
  const Evaluation* wev_;
  const double big_m_;
  Builder b_;
  std::vector<std::vector<int>> x_;
  std::vector<int> T_;
  std::map<std::size_t, int> G_;
  std::map<std::size_t, double> g_value_;
  std::vector<int> events_;
  std::vector<std::map<int, int>> E_;
  // The memory rows' nonzeros are counted twice, as the program's size has always been reported
  // (once when added, once with every row): kept so that max_nonzeros means what it meant.
  std::size_t memory_nonzeros_ = 0;
};

}  // namespace

MilpSolution solve_exact(const DecisionModel& model, std::int64_t budget_bytes, const MilpSolveOptions& options, const Solution* warm_start) {
  const double started = static_cast<double>(std::clock()) / CLOCKS_PER_SEC;
  Formulation formulation(model, warm_start);
  formulation.build(budget_bytes);
  const MilpProblem& problem = formulation.builder().problem;
  const std::size_t nonzeros = formulation.nonzeros();

  MilpSolution s;
  s.columns = problem.columns.size();
  s.rows = problem.rows.size();
  s.nonzeros = nonzeros;
  if (nonzeros > options.max_nonzeros) {
    s.too_large = true;
    s.cpu_seconds = static_cast<double>(std::clock()) / CLOCKS_PER_SEC - started;
    return s;
  }
  MilpOptions milp;
  milp.time_limit_seconds = options.time_limit_seconds;
  milp.relative_gap = options.relative_gap;
  const bool warm = warm_start != nullptr && warm_start->feasible;
  if (warm) milp.warm_start = formulation.builder().start;
  const MilpResult result = solve_milp(problem, milp);

  s.status = result.status;
  if (result.status == MilpStatus::optimal || result.status == MilpStatus::feasible) {
    s.objective_seconds = result.objective / kUnitsPerSecond;
    s.best_bound_seconds = result.best_bound / kUnitsPerSecond;
    s.relative_gap = result.relative_gap;
    s.assignment = formulation.assignment(result.values);
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

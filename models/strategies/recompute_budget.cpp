// Recompute mode budget: the search for the plan that fits a budget of saved-activation bytes
// with the least recompute seconds (plan_budget). README.md ("Recompute: budget") gives the
// algorithm and its guarantees. Split out of build_schedule.cpp.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "build_internal.hpp"
#include "comptrain/models/strategy.hpp"
#include "recompute_evaluator.hpp"

namespace comptrain::models::strategy_detail {

using traces::OpIndex;
using traces::Phase;
using traces::TensorIndex;
using traces::TensorRole;
using traces::Trace;

namespace {

// Scores the plans of one budget rule: each candidate kept or dropped, every other storage as
// `plan` has it (which it keeps up to date). With the incremental evaluator where the plan is
// within its model (no offloaded or compressed storage), else by building and measuring the
// whole schedule for every score; both give the same figures.
class PlanScorer {
 public:
  PlanScorer(const Analysis& a, const StrategySpec& spec, StorageActions& plan, const std::vector<TensorIndex>& candidates)
      : a_(a), spec_(spec), plan_(plan), candidates_(candidates), drop_(candidates.size(), false) {
    for (std::size_t i = 0; i < candidates.size(); ++i) drop_[i] = plan.action[candidates[i]] == Action::drop;
    if (RecomputeEvaluator::supports(plan)) evaluator_.emplace(a, plan, candidates);
  }

  bool incremental() const { return evaluator_.has_value(); }
  const std::vector<bool>& drops() const { return drop_; }
  void set(std::size_t i, bool drop) {
    if (drop_[i] == drop) return;
    drop_[i] = drop;
    plan_.action[candidates_[i]] = drop ? Action::drop : Action::keep;
    if (evaluator_) evaluator_->set(i, drop);
  }
  void set_all(const std::vector<bool>& drop) {
    for (std::size_t i = 0; i < drop.size(); ++i) set(i, drop[i]);
  }
  Evaluation evaluate() { return evaluator_ ? evaluator_->evaluate() : strategy_detail::evaluate(a_, spec_, plan_); }
  Evaluation evaluate(const std::vector<bool>& drop) {
    set_all(drop);
    return evaluate();
  }
  // Fills e.ordered; e must be the score of the plan the scorer holds.
  double ordered(Evaluation& e) const {
    if (!e.ordered) e.ordered = evaluator_->ordered_seconds();
    return *e.ordered;
  }

 private:
  const Analysis& a_;
  const StrategySpec& spec_;
  StorageActions& plan_;
  const std::vector<TensorIndex>& candidates_;
  std::vector<bool> drop_;
  std::optional<RecomputeEvaluator> evaluator_;
};

// A lower bound of the recompute seconds of a budget rule's plans, exact (ExactSum), for
// skipping structured plans that cannot be chosen. Every forward writer of a dropped storage is
// replayed at least once (a storage is rebuilt only by replaying all of them), and so,
// recursively, is every forward writer of an input of a replayed op that no plan keeps
// available (an unsaved intermediate, a storage read in the forward pass only, another rule's
// drop), unless that input was rebuilt, which replayed its writers too. So a plan replays at
// least the union over its dropped candidates i (and the other rules' drops) of L_i: the
// forward writers reached from i walking back through such storages only. Per plan the bound
// costs the L_i of the dropped candidates, or, when most are dropped, the total less the ops
// that only kept candidates reach. L_i are computed once; if they add up to more than a few
// times the trace (storages no plan keeps shared by many candidates), the bound is 0: every
// plan is scored.
class ReplayLowerBound {
 public:
  ReplayLowerBound(const Analysis& a, const StorageActions& plan, const std::vector<TensorIndex>& candidates) : a_(a), n_(candidates.size()) {
    const Trace& trace = *a.trace;
    const std::size_t n_ops = trace.ops().size();
    constexpr std::size_t kNotCandidate = std::numeric_limits<std::size_t>::max();
    std::vector<std::size_t> candidate_index(trace.tensors().size(), kNotCandidate);
    for (std::size_t i = 0; i < n_; ++i) candidate_index[candidates[i]] = i;
    // Storages the walks go through: unavailable in every plan and not a candidate.
    auto other_drop = [&](TensorIndex s) { return plan.action[s] == Action::drop && candidate_index[s] == kNotCandidate; };
    auto never_available = [&](TensorIndex s) {
      const StorageInfo& info = a.info[s];
      if (candidate_index[s] != kNotCandidate || !info.written || plan.pinned[s]) return false;
      if (plan.action[s] == Action::drop) return true;
      return plan.action[s] == Action::keep && !info.first_backward_read;
    };
    std::vector<std::uint32_t> seen_storage(trace.tensors().size(), 0), seen_op(n_ops, 0);
    std::uint32_t stamp = 0;
    std::vector<TensorIndex> stack;
    // The ops reached from `starts` through never-available storages, each once per walk.
    auto walk = [&](auto&& starts, auto&& visit) {
      ++stamp;
      stack.clear();
      starts();
      while (!stack.empty()) {
        const TensorIndex s = stack.back();
        stack.pop_back();
        if (seen_storage[s] == stamp) continue;
        seen_storage[s] = stamp;
        for (OpIndex w : a.info[s].writers) {
          if (!is_forward(trace, w) || seen_op[w] == stamp) continue;
          seen_op[w] = stamp;
          if (!visit(w)) return false;
          for (TensorIndex t : trace.op(w).inputs) {
            const TensorIndex in = trace.storage_of(t);
            if (in != s && seen_storage[in] != stamp && never_available(in)) stack.push_back(in);
          }
        }
      }
      return true;
    };
    // Replayed in every plan: from the other rules' drops.
    always_.assign(n_ops, 0);
    walk([&] {
      for (TensorIndex s : a.storages) {
        if (other_drop(s)) stack.push_back(s);
      }
    }, [&](OpIndex w) {
      always_[w] = 1;
      always_sum_.add(a.op_seconds[w]);
      return true;
    });
    // L_i, less the ops replayed in every plan, within a budget.
    const std::size_t limit = 8 * (n_ops + n_) + 1024;
    reach_begin_.reserve(n_ + 1);
    for (std::size_t i = 0; i < n_; ++i) {
      reach_begin_.push_back(reach_.size());
      const bool within = walk([&] { stack.push_back(candidates[i]); }, [&](OpIndex w) {
        if (!always_[w]) reach_.push_back(w);
        return reach_.size() <= limit;
      });
      if (!within) {
        usable_ = false;
        reach_.clear();
        reach_begin_.clear();
        return;
      }
    }
    reach_begin_.push_back(reach_.size());
    // Per op, the candidates whose L_i holds it; the total over every op some plan replays.
    std::vector<std::size_t> count(n_ops + 1, 0);
    for (OpIndex w : reach_) ++count[w + 1];
    for (std::size_t o = 0; o < n_ops; ++o) count[o + 1] += count[o];
    cover_begin_ = count;
    cover_.resize(reach_.size());
    for (std::size_t i = 0; i < n_; ++i) {
      for (std::size_t k = reach_begin_[i]; k < reach_begin_[i + 1]; ++k) cover_[count[reach_[k]]++] = i;
    }
    all_sum_ = always_sum_;
    for (std::size_t o = 0; o < n_ops; ++o) {
      if (cover_begin_[o + 1] > cover_begin_[o]) all_sum_.add(a.op_seconds[o]);
    }
    op_mark_.assign(n_ops, 0);
    kept_mark_.assign(n_, 0);
  }

  // The bound of the plan that drops every candidate but those in `kept` (ascending).
  double operator()(const std::vector<std::size_t>& kept) {
    if (!usable_) return 0;
    if (++stamp_ == 0) {
      std::fill(op_mark_.begin(), op_mark_.end(), 0);
      std::fill(kept_mark_.begin(), kept_mark_.end(), 0);
      stamp_ = 1;
    }
    for (std::size_t i : kept) kept_mark_[i] = stamp_;
    if (2 * kept.size() >= n_) {
      // Mostly kept: the union over the dropped ones.
      ExactSum sum = always_sum_;
      for (std::size_t i = 0; i < n_; ++i) {
        if (kept_mark_[i] == stamp_) continue;
        for (std::size_t k = reach_begin_[i]; k < reach_begin_[i + 1]; ++k) {
          const OpIndex w = reach_[k];
          if (op_mark_[w] == stamp_) continue;
          op_mark_[w] = stamp_;
          sum.add(a_.op_seconds[w]);
        }
      }
      return sum.value();
    }
    // Mostly dropped: everything less the ops only kept candidates reach.
    ExactSum sum = all_sum_;
    for (std::size_t i : kept) {
      for (std::size_t k = reach_begin_[i]; k < reach_begin_[i + 1]; ++k) {
        const OpIndex w = reach_[k];
        if (op_mark_[w] == stamp_) continue;
        op_mark_[w] = stamp_;
        const bool kept_only = std::all_of(cover_.begin() + static_cast<std::ptrdiff_t>(cover_begin_[w]),
                                           cover_.begin() + static_cast<std::ptrdiff_t>(cover_begin_[w + 1]),
                                           [&](std::size_t c) { return kept_mark_[c] == stamp_; });
        if (kept_only) sum.subtract(a_.op_seconds[w]);
      }
    }
    return sum.value();
  }

 private:
  const Analysis& a_;
  std::size_t n_ = 0;
  bool usable_ = true;
  std::vector<char> always_;                 // per op: replayed in every plan
  ExactSum always_sum_, all_sum_;            // their seconds; those of every op some plan replays
  std::vector<OpIndex> reach_;               // L_i of candidate i at [reach_begin_[i], reach_begin_[i + 1])
  std::vector<std::size_t> reach_begin_;
  std::vector<std::size_t> cover_;           // per op w, the candidates whose L_i holds it
  std::vector<std::size_t> cover_begin_;
  std::vector<std::uint32_t> op_mark_, kept_mark_;
  std::uint32_t stamp_ = 0;
};

}  // namespace

std::size_t ceil_sqrt(std::size_t n) {
  auto k = static_cast<std::size_t>(std::sqrt(static_cast<double>(n)));
  while (k * k < n) ++k;
  while (k > 1 && (k - 1) * (k - 1) >= n) --k;
  return std::max<std::size_t>(k, 1);
}

namespace {

// The search of one budget rule (plan_budget), its steps as README.md ("Recompute: budget")
// numbers them. Its members are what the steps share: the scorer (which holds the plan being
// scored, and keeps `plan` up to date) and the best plan found so far.
class BudgetSearch {
 public:
  BudgetSearch(const Analysis& a, const StrategySpec& spec, StorageActions& plan, const std::vector<TensorIndex>& candidates, std::int64_t budget)
      : a_(a), spec_(spec), plan_(plan), candidates_(candidates), budget_(budget), n_(candidates.size()), scorer_(a, spec, plan, candidates), bytes_(n_) {
    for (std::size_t i = 0; i < n_; ++i) bytes_[i] = a.trace->tensor(candidates[i]).bytes();
  }

  std::optional<NotApplicable> run(std::size_t rule_index) {
    std::vector<bool> none(n_, false);
    if (scorer_.evaluate(none).peak <= budget_) return std::nullopt;  // 0. keep everything if it fits
    greedy();
    score_structured(structured_plans());
    if (!best_.found) return not_applicable(rule_index);
    improve();
    check_measured(rule_index);
    return std::nullopt;
  }

 private:
  // The best plan is the one that fits with the least recompute seconds, then the lowest peak,
  // then the first in the README's order (structured plans in the order listed, then the
  // greedy's): a total order, so that the plans may be scored in any order (the greedy's first,
  // to skip structured plans that cannot win) with the same result.
  using Order = std::pair<int, std::size_t>;  // (0 structured | 1 greedy, place in that list)
  struct Best {
    std::vector<bool> drop;
    Evaluation e;
    Order order;
    bool found = false;
  };
  // Each structured plan drops every candidate but a kept set (ascending indices).
  struct Structured {
    std::vector<std::size_t> kept;
    double bound = 0;
  };

  // Plans compare by the recompute seconds their built schedule reports (Evaluation::ordered),
  // which this search has always compared. Exact sums farther apart than an ordered sum's
  // rounding can reach order the ordered sums alike (a sum of m non-negative terms in any order
  // is within (m - 1) u of the exact one, u = 2^-53, give or take its own rounding; twice that
  // is allowed); nearer, the ordered sum of the plan the scorer holds is computed.
  static double reach(const Evaluation& e) { return (static_cast<double>(e.tasks) + 2) * std::ldexp(e.exact, -52); }
  // -1, 0, 1 as the held plan's `e` recomputes less than, as much as or more than `than`
  // (whose ordered sum is known).
  int compare_seconds(Evaluation& e, const Evaluation& than) {
    if (std::abs(e.exact - than.exact) > reach(e) + reach(than)) return e.exact < than.exact ? -1 : 1;
    const double x = scorer_.ordered(e);
    return x < *than.ordered ? -1 : (x == *than.ordered ? 0 : 1);
  }
  // The plan the scorer holds, scored: the best so far if it fits and wins.
  Evaluation offer(Evaluation e, Order order) {
    if (e.peak > budget_) return e;
    if (best_.found) {
      const int seconds = compare_seconds(e, best_.e);
      if (seconds > 0 || (seconds == 0 && std::tie(e.peak, order) >= std::tie(best_.e.peak, best_.order))) return e;
    }
    scorer_.ordered(e);
    best_ = {scorer_.drops(), e, order, true};
    return e;
  }

  // 2. Cost-ordered greedy: drop in ascending recompute-seconds per byte, keeping a drop only
  // when it does not raise the peak, until the budget is met. One storage changes per score.
  void greedy() {
    std::vector<bool> none(n_, false);
    std::vector<std::size_t> by_ratio(n_);
    std::iota(by_ratio.begin(), by_ratio.end(), std::size_t{0});
    auto ratio = [&](std::size_t i) {
      return bytes_[i] > 0 ? a_.info[candidates_[i]].forward_seconds / static_cast<double>(bytes_[i]) : std::numeric_limits<double>::infinity();
    };
    std::stable_sort(by_ratio.begin(), by_ratio.end(), [&](std::size_t x, std::size_t y) { return ratio(x) < ratio(y); });
    std::int64_t peak = scorer_.evaluate(none).peak;
    std::size_t step = 0;
    for (std::size_t i : by_ratio) {
      scorer_.set(i, true);
      const Evaluation e = offer(scorer_.evaluate(), {1, step++});
      if (e.peak <= peak) {
        peak = e.peak;
        if (peak <= budget_) break;
      } else {
        scorer_.set(i, false);
      }
    }
  }

  // 1. Structured plans, generated first and scored in ascending order of a lower bound of
  // their recompute seconds (ReplayLowerBound), while the bound does not exceed the best plan's
  // seconds: a plan whose bound does cannot be chosen. Generated after the greedy, with the
  // plan as the greedy left it (as the search always has).
  std::vector<Structured> structured_plans() {
    ReplayLowerBound lower_bound(a_, plan_, candidates_);
    std::vector<Structured> structured;
    auto consider = [&](std::vector<std::size_t> kept) {
      const double bound = lower_bound(kept);
      structured.push_back({std::move(kept), bound});
    };
    // Every k-th kept for every useful k (sqrt_n among them) ...
    std::set<std::size_t> ks;
    for (std::size_t k = 2; k <= std::min<std::size_t>(n_, 2 * ceil_sqrt(n_) + 2); ++k) ks.insert(k);
    for (std::size_t k = 2; k <= n_; k *= 2) ks.insert(k);
    ks.insert(n_ + 1);  // drop everything
    for (std::size_t k : ks) {
      std::vector<std::size_t> kept;
      for (std::size_t i = k - 1; i < n_; i += k) kept.push_back(i);
      consider(std::move(kept));
    }
    // ... and Chen's byte-threshold segmentation (their Algorithm for a budget): walking in
    // production order, keep a candidate as a checkpoint once the dropped bytes since the
    // last one exceed a threshold; thresholds swept geometrically.
    std::int64_t total = 0;
    for (std::int64_t b : bytes_) total += b;
    for (double threshold = static_cast<double>(total); threshold >= 1; threshold /= 1.5) {
      std::vector<std::size_t> kept;
      double run = 0;
      for (std::size_t i = 0; i < n_; ++i) {
        run += static_cast<double>(bytes_[i]);
        if (run <= threshold) continue;
        kept.push_back(i);
        run = 0;
      }
      consider(std::move(kept));
    }
    // ... and Chen's segments on a DAG: every k-th separator kept, every other candidate dropped.
    const std::vector<std::size_t> separators = this->separators();
    for (std::size_t k = 1; k <= separators.size(); ++k) {
      std::vector<std::size_t> kept;
      for (std::size_t j = k - 1; j < separators.size(); j += k) kept.push_back(separators[j]);
      consider(std::move(kept));
    }
    return structured;
  }

  // Chen's segments on a DAG: checkpoints only at separators (a candidate that is, when its
  // last forward writer ends, the only storage needing recomputation that a later forward op
  // still reads — ResNet block outputs, transformer layer outputs). Dropping a non-separator
  // between two kept separators cannot make a rebuild cascade past the segment.
  std::vector<std::size_t> separators() const {
    const Trace& trace = *a_.trace;
    std::vector<char> is_candidate(trace.tensors().size(), 0);
    for (TensorIndex s : candidates_) is_candidate[s] = 1;
    std::vector<int> crossing(trace.ops().size() + 1, 0);  // difference array over forward ops
    for (TensorIndex s : a_.storages) {
      const StorageInfo& info = a_.info[s];
      if (!info.written || !info.written_in_forward_only) continue;
      // Anything not rebuilt here: resident, or restored/kept by another rule.
      if (info.saved && !is_candidate[s] && info.first_backward_read) continue;
      std::optional<OpIndex> last_read;
      for (OpIndex r : info.readers) {
        if (is_forward(trace, r)) last_read = r;
      }
      if (!last_read || *last_read <= info.writers.back()) continue;
      ++crossing[info.writers.front()];
      --crossing[*last_read];
    }
    for (std::size_t o = 1; o < crossing.size(); ++o) crossing[o] += crossing[o - 1];
    std::vector<std::size_t> separators;
    for (std::size_t i = 0; i < n_; ++i) {
      const StorageInfo& info = a_.info[candidates_[i]];
      const OpIndex w = info.writers.back();
      const bool read_later = std::any_of(info.readers.begin(), info.readers.end(),
                                          [&](OpIndex r) { return r > w && is_forward(trace, r); });
      if (read_later && crossing[w] == 1) separators.push_back(i);
    }
    return separators;
  }

  // Scores the structured plans in ascending order of their bound, while one can still win.
  void score_structured(const std::vector<Structured>& structured) {
    const Trace& trace = *a_.trace;
    std::vector<std::size_t> by_bound(structured.size());
    std::iota(by_bound.begin(), by_bound.end(), std::size_t{0});
    std::stable_sort(by_bound.begin(), by_bound.end(), [&](std::size_t x, std::size_t y) { return structured[x].bound < structured[y].bound; });
    // A plan of m recompute tasks reports at least bound * (1 - (m + 2) u); m is at most every
    // forward op replayed before every other op.
    const double most_tasks = static_cast<double>(trace.ops().size()) * static_cast<double>(trace.ops().size());
    const double shortfall = 1 - (most_tasks + 2) * std::ldexp(1.0, -52);
    for (std::size_t p : by_bound) {
      if (best_.found && structured[p].bound * shortfall > *best_.e.ordered) break;  // so are all after it
      std::vector<bool> drop(n_, true);
      for (std::size_t i : structured[p].kept) drop[i] = false;
      offer(scorer_.evaluate(drop), {0, p});
    }
  }

  NotApplicable not_applicable(std::size_t rule_index) {
    std::ostringstream message;
    message << "strategy rule " << rule_index << ": recompute budget of " << budget_
            << " bytes of saved activations cannot be met: dropping every selected activation still peaks at "
            << scorer_.evaluate(std::vector<bool>(n_, true)).peak << " bytes";
    return NotApplicable{message.str()};
  }

  // 3. Local improvement of the cheapest feasible plan: keep dropped storages again (most
  // expensive first) while the budget holds, then move checkpoints onto a more expensive
  // neighbour (keep it, drop the cheaper one) when that stays within budget and saves time.
  void improve() {
    scorer_.set_all(best_.drop);
    current_ = best_.e;
    std::vector<std::size_t> by_cost(n_);
    std::iota(by_cost.begin(), by_cost.end(), std::size_t{0});
    std::stable_sort(by_cost.begin(), by_cost.end(), [&](std::size_t x, std::size_t y) {
      return a_.info[candidates_[x]].forward_seconds > a_.info[candidates_[y]].forward_seconds;
    });
    for (std::size_t i : by_cost) {
      if (!scorer_.drops()[i]) continue;
      scorer_.set(i, false);
      if (!improves()) scorer_.set(i, true);
    }
    for (std::size_t i : by_cost) {
      if (!scorer_.drops()[i]) continue;
      for (const std::size_t j : {i - 1, i + 1}) {  // i - 1 wraps to a huge value at 0
        if (j >= n_ || scorer_.drops()[j] || a_.info[candidates_[j]].forward_seconds >= a_.info[candidates_[i]].forward_seconds) continue;
        scorer_.set(i, false);
        scorer_.set(j, true);
        if (improves()) break;
        scorer_.set(i, true);
        scorer_.set(j, false);
      }
    }
  }

  // Scores the plan with the changes made; keeps it if it fits and recomputes less.
  bool improves() {
    Evaluation e = scorer_.evaluate();
    if (e.peak <= budget_ && compare_seconds(e, current_) < 0) {
      scorer_.ordered(e);
      current_ = e;
      return true;
    }
    return false;
  }

  // The plan is in `plan` now. Scored incrementally, it is measured once in full: the result
  // must meet the budget by the built schedule's own replay, with the figures the search used.
  void check_measured(std::size_t rule_index) const {
    if (!scorer_.incremental()) return;
    const Evaluation measured = evaluate(a_, spec_, plan_);
    if (measured.peak > budget_ || measured.peak != current_.peak || measured.exact != current_.exact || measured.ordered != current_.ordered) {
      throw std::logic_error("strategy rule " + std::to_string(rule_index) + ": the budget plan's incremental score (peak " +
                             std::to_string(current_.peak) + " B, " + short_number(current_.exact) + " s) differs from its built schedule's (" +
                             std::to_string(measured.peak) + " B, " + short_number(measured.exact) + " s)");
    }
  }

  const Analysis& a_;
  const StrategySpec& spec_;
  StorageActions& plan_;
  const std::vector<TensorIndex>& candidates_;
  const std::int64_t budget_;
  const std::size_t n_;
  PlanScorer scorer_;
  std::vector<std::int64_t> bytes_;  // per candidate
  Best best_;
  Evaluation current_;  // step 3's plan
};

}  // namespace

// Budget mode; see README.md ("Recompute: budget") for the algorithm and its guarantees.
std::optional<NotApplicable> plan_budget(const Analysis& a, const StrategySpec& spec, StorageActions& plan, const std::vector<TensorIndex>& candidates,
                 std::int64_t budget, std::size_t rule_index) {
  return BudgetSearch(a, spec, plan, candidates, budget).run(rule_index);
}

}  // namespace comptrain::models::strategy_detail

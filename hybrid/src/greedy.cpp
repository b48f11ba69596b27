#include <algorithm>
#include <ctime>
#include <limits>

#include "comptrain/hybrid/solve.hpp"

namespace comptrain::hybrid {

namespace {

double cpu_now() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

// The bytes an option changes at `step` (negative: saved).
std::int64_t change_at(const Option& o, int step) {
  std::int64_t bytes = 0;
  for (const MemoryChange& m : o.memory) {
    if (m.first <= step && step < m.last) bytes += m.bytes;
  }
  return bytes;
}

double added_seconds(const Option& o) {
  double t = 0;
  for (const AddedWork& w : o.work) t += w.seconds;
  return t;
}

}  // namespace

Solution solve_greedy(const DecisionModel& model, std::int64_t budget_bytes) {
  const double started = cpu_now();
  Solution s;
  const std::size_t count = model.candidates.size();
  s.assignment.assign(count, 0);
  s.evaluation = evaluate(model, s.assignment);
  // Each step takes one more candidate off keep, so the loop ends after at most `count` moves.
  while (s.evaluation.peak_bytes > budget_bytes) {
    const int step = s.evaluation.peak_step;
    const std::int64_t here = s.evaluation.live_bytes[static_cast<std::size_t>(step)];
    struct Move {
      std::size_t candidate = 0, option = 0;
      double added = 0;
      std::int64_t saved = 0;
      Evaluation evaluation;
    };
    std::optional<Move> best;
    for (std::size_t i = 0; i < count; ++i) {
      if (s.assignment[i] != 0) continue;
      const Candidate& c = model.candidates[i];
      for (std::size_t o = 1; o < c.options.size(); ++o) {
        if (change_at(c.options[o], step) >= 0) continue;
        Assignment trial = s.assignment;
        trial[i] = o;
        Evaluation ev = evaluate(model, trial);
        const std::int64_t saved = here - ev.live_bytes[static_cast<std::size_t>(step)];
        if (saved <= 0) continue;
        const double added = std::max(0.0, ev.seconds - s.evaluation.seconds);
        // Bytes per second added; free moves first, the largest of them.
        const bool better = [&] {
          if (!best) return true;
          const bool free_new = added <= 0, free_best = best->added <= 0;
          if (free_new != free_best) return free_new;
          if (free_new) return saved > best->saved;
          return static_cast<double>(saved) / added > static_cast<double>(best->saved) / best->added;
        }();
        if (better) best = Move{i, o, added, saved, std::move(ev)};
      }
    }
    if (!best) break;  // nothing left to act on at the peak step
    s.assignment[best->candidate] = best->option;
    s.evaluation = std::move(best->evaluation);
  }
  s.feasible = s.evaluation.peak_bytes <= budget_bytes;
  if (s.feasible) {
    // Give back: the costliest choices first, try keep, then each cheaper option.
    std::vector<std::size_t> changed;
    for (std::size_t i = 0; i < count; ++i) {
      if (s.assignment[i] != 0) changed.push_back(i);
    }
    std::sort(changed.begin(), changed.end(), [&](std::size_t x, std::size_t y) {
      return added_seconds(model.candidates[x].options[s.assignment[x]]) > added_seconds(model.candidates[y].options[s.assignment[y]]);
    });
    for (std::size_t i : changed) {
      const Candidate& c = model.candidates[i];
      for (std::size_t o = 0; o < c.options.size(); ++o) {
        if (o == s.assignment[i]) continue;
        Assignment trial = s.assignment;
        trial[i] = o;
        Evaluation ev = evaluate(model, trial);
        // Keep wins ties: a copy the model finds free still uses the link.
        const bool faster = ev.seconds < s.evaluation.seconds || (o == 0 && ev.seconds <= s.evaluation.seconds);
        if (ev.peak_bytes <= budget_bytes && faster) {
          s.assignment = std::move(trial);
          s.evaluation = std::move(ev);
        }
      }
    }
  }
  s.cpu_seconds = cpu_now() - started;
  return s;
}

}  // namespace comptrain::hybrid

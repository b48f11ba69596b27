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
  // Baseline start time of each step, for the copies' estimated stalls.
  std::vector<double> start(model.step_seconds.size() + 1, 0.0);
  for (std::size_t k = 0; k < model.step_seconds.size(); ++k) start[k + 1] = start[k] + model.step_seconds[k];
  auto span = [&](int from, int to) { return start[static_cast<std::size_t>(std::max(to, from))] - start[static_cast<std::size_t>(from)]; };
  // A move's score uses its own saving at the peak step and its own added seconds (an offload:
  // the copies' stalls against the baseline's clock, queues aside); interactions (queues, replays
  // that need other candidates early) show in the full evaluation after the move, which a move
  // must pass: it has to lower the live bytes at that step.
  auto estimated_seconds = [&](const Candidate& c, const Option& o) {
    if (o.kind != ActionKind::offload) return added_seconds(o);
    const double out_stall = std::max(0.0, c.copy_seconds - span(c.last_forward_use + 1, o.release_step));
    const double back_stall = std::max(0.0, c.copy_seconds - span(c.first_backward_read - model.offload_lookahead, c.first_backward_read));
    return out_stall + back_stall;
  };
  std::vector<std::vector<bool>> rejected(count);
  for (std::size_t i = 0; i < count; ++i) rejected[i].assign(model.candidates[i].options.size(), false);
  // Each accepted move takes one more candidate off keep; each rejected one is never tried again.
  while (s.evaluation.peak_bytes > budget_bytes) {
    const int step = s.evaluation.peak_step;
    const std::int64_t here = s.evaluation.live_bytes[static_cast<std::size_t>(step)];
    std::optional<std::pair<std::size_t, std::size_t>> best;
    double best_added = 0;
    std::int64_t best_saved = 0;
    for (std::size_t i = 0; i < count; ++i) {
      if (s.assignment[i] != 0) continue;
      const Candidate& c = model.candidates[i];
      for (std::size_t o = 1; o < c.options.size(); ++o) {
        if (rejected[i][o]) continue;
        const std::int64_t saved = -change_at(c.options[o], step);
        if (saved <= 0) continue;
        const double added = estimated_seconds(c, c.options[o]);
        // Bytes per second added; free moves first, the largest of them.
        const bool better = [&] {
          if (!best) return true;
          const bool free_new = added <= 0, free_best = best_added <= 0;
          if (free_new != free_best) return free_new;
          if (free_new) return saved > best_saved;
          return static_cast<double>(saved) / added > static_cast<double>(best_saved) / best_added;
        }();
        if (better) {
          best = {i, o};
          best_added = added;
          best_saved = saved;
        }
      }
    }
    if (!best) break;  // nothing left to act on at the peak step
    Assignment trial = s.assignment;
    trial[best->first] = best->second;
    Evaluation ev = evaluate(model, trial);
    if (ev.live_bytes[static_cast<std::size_t>(step)] >= here) {
      rejected[best->first][best->second] = true;
      continue;
    }
    s.assignment = std::move(trial);
    s.evaluation = std::move(ev);
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

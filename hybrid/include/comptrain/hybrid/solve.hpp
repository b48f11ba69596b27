#pragma once
// Solving the decision model (decision_model.hpp) for the fastest assignment whose live bytes stay
// within a budget at every step: a greedy heuristic, and the exact mixed-integer program
// (hybrid/README.md, "Formulation") solved by CBC with the greedy's answer as its warm start.

#include <cstdint>
#include <optional>
#include <string>

#include "comptrain/hybrid/decision_model.hpp"
#include "comptrain/hybrid/milp.hpp"

namespace comptrain::hybrid {

struct Solution {
  bool feasible = false;       // the model's peak is within the budget
  Assignment assignment;       // one option per candidate (all keep when nothing fits)
  Evaluation evaluation;       // the model's figures for it
  double cpu_seconds = 0;      // what finding it took
};

// Greedy: from keeping everything, while the model's peak exceeds the budget, take at the peak
// step the option with the most bytes saved there per second added (an option that adds no time
// first, the largest saving among them), then give back what is no longer needed: each changed
// candidate, costliest first, returns to keep, or to a cheaper option, where the budget still
// holds. Every move is scored by evaluate(), so queues and replays count as the model says.
Solution solve_greedy(const DecisionModel& model, std::int64_t budget_bytes);

struct MilpSolution : Solution {
  MilpStatus status = MilpStatus::no_solution;
  double objective_seconds = 0;  // the program's optimum (or incumbent): the iteration's seconds (the tie-break charge removed)
  double best_bound_seconds = 0; // CBC's bound on the objective (0.1 us per non-keep choice included): no assignment is faster
  double relative_gap = 0;
  std::size_t columns = 0, rows = 0, nonzeros = 0;
  // The program was built but not handed to CBC: above MilpSolveOptions::max_nonzeros, CBC's
  // first LP (which its time limit does not bound) takes minutes.
  bool too_large = false;
};

struct MilpSolveOptions {
  double time_limit_seconds = 5;
  double relative_gap = 1e-3;
  // Programs with more non-zeros are not solved (too_large). Measured: ResNet-50 at batch 1536
  // (0.5 M) solves its root within the 1 s limit; BERT-large at sequence 512 (millions) spent
  // 5 CPU minutes in CLP checking the warm start before branch and bound began.
  std::size_t max_nonzeros = 1'500'000;
};

// The exact program. `warm_start`, when feasible, is handed to CBC; the result is never worse
// than it (CBC keeps the start as its incumbent).
MilpSolution solve_exact(const DecisionModel& model, std::int64_t budget_bytes, const MilpSolveOptions& options,
                         const Solution* warm_start = nullptr);

}  // namespace comptrain::hybrid

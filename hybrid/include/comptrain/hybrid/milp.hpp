#pragma once
// A small mixed-integer linear programming layer over COIN-OR CBC (issue 17): the hybrid
// planner states its compress/offload/recompute decisions as a MILP and solves it here. The
// interface hides CBC entirely (no CBC header leaks out of hybrid/src/milp.cpp), so the planner
// and its tests depend only on these types.
//
// What solve_milp guarantees (hybrid/README.md, "MILP layer"):
// - the problem is validated once, before CBC sees it; a malformed problem or options object
//   is a programming error of the caller and throws std::invalid_argument naming the column,
//   row or option;
// - nothing is printed: CBC's log level is 0;
// - one thread, so the same problem and options give the same answer, unless the time limit
//   stops the search (CPU time is load-dependent, so where it stops is not reproducible);
// - the time limit bounds branch and bound (CBC's maximum seconds, CBC's process CPU time);
//   a problem without integer columns is an LP solved by CLP's simplex without a limit;
// - a warm start is handed to CBC as its MIP start, so a time-limited solve returns it (or
//   something better) when CBC accepts it as feasible;
// - infeasible and unbounded are told apart: when CBC cannot say which, the problem is solved
//   again with a zero objective (within what is left of the time limit).

#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace comptrain::hybrid {

inline constexpr double milp_infinity = std::numeric_limits<double>::infinity();

// One variable. Bounds may be -inf (lower) or +inf (upper); the objective coefficient must be
// finite. The name is used only in error messages; it need not be unique.
struct MilpColumn {
  std::string name;
  double lower = 0;
  double upper = 1;
  double objective = 0;
  bool integer = true;
};

// lower <= sum(coefficient * column) <= upper. Equality rows have lower == upper; a free side is
// -inf / +inf. A column index repeated in `terms` has its coefficients summed.
struct MilpRow {
  std::string name;
  std::vector<std::pair<int, double>> terms;  // (column index, coefficient)
  double lower = -milp_infinity;
  double upper = milp_infinity;
};

// Minimise sum(columns[j].objective * x[j]) subject to the rows and the column bounds.
struct MilpProblem {
  std::vector<MilpColumn> columns;
  std::vector<MilpRow> rows;
};

struct MilpOptions {
  // CPU seconds of branch and bound; 0 stops after the root's presolve and MIP start check,
  // +inf means no limit.
  double time_limit_seconds = 10;
  // Stop as optimal when |incumbent - bound| <= relative_gap * |incumbent| (CBC's allowable
  // fraction gap).
  double relative_gap = 1e-4;
  // Empty: none. Otherwise one value per column, within the column's bounds, integral on
  // integer columns. CBC drops a warm start that violates a row.
  std::vector<double> warm_start;
};

enum class MilpStatus {
  optimal,      // proven optimal within options.relative_gap
  feasible,     // stopped by the time limit with an incumbent
  infeasible,   // proven infeasible
  no_solution,  // stopped by the time limit without any incumbent
  unbounded,    // feasible with an objective unbounded below
};

struct MilpResult {
  MilpStatus status = MilpStatus::no_solution;
  // optimal and feasible: one value per column, integer columns rounded to the nearest integer;
  // otherwise empty.
  std::vector<double> values;
  // sum(objective * values) of the returned values; +inf when infeasible or without a solution,
  // -inf when unbounded.
  double objective = milp_infinity;
  // The best proven lower bound on the optimum: the objective of an LP; CBC's bound of a MILP;
  // +inf when infeasible, -inf when unbounded or when CBC proved no bound.
  double best_bound = -milp_infinity;
  // |objective - best_bound| / max(1e-9, |objective|); +inf without an incumbent. For optimal,
  // 0 or at most options.relative_gap (up to CBC's tolerances).
  double relative_gap = milp_infinity;
  double seconds = 0;  // CPU seconds the solve took (this thread's, getrusage)
  long nodes = 0;      // branch-and-bound nodes (0 for an LP)
};

// Throws std::invalid_argument on a malformed problem or options (see above), and
// std::runtime_error if CBC abandons the solve on numerical difficulties.
MilpResult solve_milp(const MilpProblem& problem, const MilpOptions& options = {});

std::string_view to_string(MilpStatus status);

}  // namespace comptrain::hybrid

#include "comptrain/hybrid/milp.hpp"

#include <Cbc_C_Interface.h>
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <memory>
#include <stdexcept>

namespace comptrain::hybrid {
namespace {

// Integrality of a warm-start value: the caller's own 0/1 decisions, so exact up to rounding.
constexpr double warm_start_integrality_tolerance = 1e-9;
// CBC reports "no incumbent" as an objective of 1e50 and "no bound" as -1e50 or -DBL_MAX; values
// beyond this magnitude are read as infinite.
constexpr double cbc_infinite_objective = 1e49;

// A warm start is taken as a solution when every row holds within this relative tolerance (CBC's
// own primal tolerance is 1e-7 absolute on its scaled rows).
constexpr double warm_start_row_tolerance = 1e-7;

// Whether `values` satisfies every row of `problem` (bounds and integrality are validated already).
bool satisfies_rows(const MilpProblem& problem, const std::vector<double>& values) {
  for (const MilpRow& row : problem.rows) {
    double activity = 0;
    for (const auto& [column, coefficient] : row.terms) activity += coefficient * values[static_cast<std::size_t>(column)];
    const double slack_lower = warm_start_row_tolerance * std::max(1.0, std::abs(row.lower));
    const double slack_upper = warm_start_row_tolerance * std::max(1.0, std::abs(row.upper));
    if (activity < row.lower - slack_lower || activity > row.upper + slack_upper) return false;
  }
  return true;
}

double thread_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

std::string column_label(const MilpProblem& problem, std::size_t j) {
  return fmt::format("column {} ('{}')", j, problem.columns[j].name);
}

std::string row_label(const MilpProblem& problem, std::size_t i) {
  return fmt::format("row {} ('{}')", i, problem.rows[i].name);
}

[[noreturn]] void invalid(const std::string& what) {
  throw std::invalid_argument("solve_milp: " + what);
}

// Bounds of a column or a row: no NaN, a lower bound that is not +inf, an upper bound that is not
// -inf, lower <= upper.
void check_bounds(double lower, double upper, const std::string& label) {
  if (std::isnan(lower) || std::isnan(upper) || lower == milp_infinity || upper == -milp_infinity || lower > upper)
    invalid(fmt::format("{}: bounds [{}, {}] must satisfy -inf <= lower <= upper <= +inf, lower < +inf, upper > -inf",
                        label, lower, upper));
}

void validate(const MilpProblem& problem, const MilpOptions& options) {
  const std::size_t n = problem.columns.size();
  if (n > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    invalid(fmt::format("{} columns exceed CBC's int indices", n));
  for (std::size_t j = 0; j < n; ++j) {
    const MilpColumn& column = problem.columns[j];
    check_bounds(column.lower, column.upper, column_label(problem, j));
    if (!std::isfinite(column.objective))
      invalid(fmt::format("{}: objective coefficient {} is not finite", column_label(problem, j), column.objective));
  }
  for (std::size_t i = 0; i < problem.rows.size(); ++i) {
    const MilpRow& row = problem.rows[i];
    check_bounds(row.lower, row.upper, row_label(problem, i));
    for (const auto& [column, coefficient] : row.terms) {
      if (column < 0 || static_cast<std::size_t>(column) >= n)
        invalid(fmt::format("{}: column index {} is outside [0, {})", row_label(problem, i), column, n));
      if (!std::isfinite(coefficient))
        invalid(fmt::format("{}: coefficient {} of column {} is not finite", row_label(problem, i), coefficient, column));
    }
  }
  if (std::isnan(options.time_limit_seconds) || options.time_limit_seconds < 0)
    invalid(fmt::format("time_limit_seconds {} must be >= 0", options.time_limit_seconds));
  if (!std::isfinite(options.relative_gap) || options.relative_gap < 0)
    invalid(fmt::format("relative_gap {} must be finite and >= 0", options.relative_gap));
  if (options.warm_start.empty()) return;
  if (options.warm_start.size() != n)
    invalid(fmt::format("warm_start has {} values for {} columns", options.warm_start.size(), n));
  for (std::size_t j = 0; j < n; ++j) {
    const MilpColumn& column = problem.columns[j];
    const double value = options.warm_start[j];
    if (!std::isfinite(value) || value < column.lower || value > column.upper)
      invalid(fmt::format("warm_start value {} of {} is outside its bounds [{}, {}]", value, column_label(problem, j),
                          column.lower, column.upper));
    if (column.integer && std::abs(value - std::round(value)) > warm_start_integrality_tolerance)
      invalid(fmt::format("warm_start value {} of integer {} is not integral", value, column_label(problem, j)));
  }
}

// CBC (CLP) spells infinity as DBL_MAX.
double to_cbc(double bound) {
  if (bound == milp_infinity) return DBL_MAX;
  if (bound == -milp_infinity) return -DBL_MAX;
  return bound;
}

double gap(double objective, double bound) {
  if (!std::isfinite(objective) || !std::isfinite(bound)) return milp_infinity;
  return std::abs(objective - bound) / std::max(1e-9, std::abs(objective));
}

struct CbcModelDeleter {
  void operator()(Cbc_Model* model) const { Cbc_deleteModel(model); }
};
using CbcModelPtr = std::unique_ptr<Cbc_Model, CbcModelDeleter>;

// The problem in CBC's column-major form, repeated (row, column) terms summed, zero terms dropped.
CbcModelPtr load(const MilpProblem& problem) {
  const std::size_t n = problem.columns.size();
  const std::size_t m = problem.rows.size();
  std::vector<std::vector<std::pair<int, double>>> by_column(n);
  for (std::size_t i = 0; i < m; ++i) {
    std::vector<std::pair<int, double>> terms = problem.rows[i].terms;
    std::sort(terms.begin(), terms.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (std::size_t k = 0; k < terms.size();) {
      double sum = 0;
      const int column = terms[k].first;
      for (; k < terms.size() && terms[k].first == column; ++k) sum += terms[k].second;
      if (sum != 0) by_column[static_cast<std::size_t>(column)].emplace_back(static_cast<int>(i), sum);
    }
  }
  std::vector<CoinBigIndex> start{0};
  std::vector<int> index;
  std::vector<double> value;
  std::vector<double> column_lower, column_upper, objective, row_lower, row_upper;
  for (std::size_t j = 0; j < n; ++j) {
    for (const auto& [row, coefficient] : by_column[j]) {
      index.push_back(row);
      value.push_back(coefficient);
    }
    start.push_back(static_cast<CoinBigIndex>(index.size()));
    column_lower.push_back(to_cbc(problem.columns[j].lower));
    column_upper.push_back(to_cbc(problem.columns[j].upper));
    objective.push_back(problem.columns[j].objective);
  }
  for (const MilpRow& row : problem.rows) {
    row_lower.push_back(to_cbc(row.lower));
    row_upper.push_back(to_cbc(row.upper));
  }
  CbcModelPtr model(Cbc_newModel());
  Cbc_loadProblem(model.get(), static_cast<int>(n), static_cast<int>(m), start.data(), index.data(), value.data(),
                  column_lower.data(), column_upper.data(), objective.data(), row_lower.data(), row_upper.data());
  for (std::size_t j = 0; j < n; ++j) {
    // CBC matches a MIP start to columns by name (Cbc_setMIPStartI looks the names up), so the
    // names must be unique: ours are the indices, the caller's names need not be unique.
    Cbc_setColName(model.get(), static_cast<int>(j), fmt::format("c{}", j).c_str());
    if (problem.columns[j].integer) Cbc_setInteger(model.get(), static_cast<int>(j));
  }
  // Named columns with unnamed rows crash CLP's presolve after CBC's preprocessing
  // (ClpPresolve::gutsOfPresolvedModel reads the empty row-name vector; coin-or/Cbc issue 515,
  // whose workaround is to name every row). Seen here on a 3-column problem with CBC 2.10.8.
  for (std::size_t i = 0; i < m; ++i) Cbc_setRowName(model.get(), static_cast<int>(i), fmt::format("r{}", i).c_str());
  return model;
}

MilpResult solve_validated(const MilpProblem& problem, const MilpOptions& options);

// CBC said "infeasible or unbounded" without saying which (CLP's primal/dual infeasibility for an
// LP; an unbounded relaxation for a MILP, whose integer points may not exist): the same problem
// with a zero objective, which cannot be unbounded, decides it.
MilpResult infeasible_or_unbounded(const MilpProblem& problem, const MilpOptions& options, double seconds_spent) {
  MilpProblem feasibility = problem;
  for (MilpColumn& column : feasibility.columns) column.objective = 0;
  MilpOptions feasibility_options;
  feasibility_options.time_limit_seconds = std::max(0.0, options.time_limit_seconds - seconds_spent);
  feasibility_options.relative_gap = options.relative_gap;
  const MilpResult check = solve_validated(feasibility, feasibility_options);
  MilpResult result;
  result.nodes = check.nodes;
  if (check.status == MilpStatus::optimal || check.status == MilpStatus::feasible) {
    // A feasible point and an unbounded relaxation: with rational data the MILP is unbounded too
    // (Meyer, "On the existence of optimal solutions to integer and mixed-integer programming
    // problems", Math. Programming 7, 1974).
    result.status = MilpStatus::unbounded;
    result.objective = -milp_infinity;
    result.best_bound = -milp_infinity;
  } else if (check.status == MilpStatus::infeasible) {
    result.status = MilpStatus::infeasible;
    result.best_bound = milp_infinity;
  } else {
    result.status = MilpStatus::no_solution;
  }
  return result;
}

MilpResult solve_validated(const MilpProblem& problem, const MilpOptions& options) {
  const double start_seconds = thread_cpu_seconds();
  MilpResult result;
  const std::size_t n = problem.columns.size();
  if (n == 0) {
    // Nothing for CBC to do (and CLP does not take an empty model): every row reads 0.
    const bool feasible =
        std::all_of(problem.rows.begin(), problem.rows.end(), [](const MilpRow& row) { return row.lower <= 0 && 0 <= row.upper; });
    result.status = feasible ? MilpStatus::optimal : MilpStatus::infeasible;
    result.objective = feasible ? 0 : milp_infinity;
    result.best_bound = feasible ? 0 : milp_infinity;
    result.relative_gap = feasible ? 0 : milp_infinity;
    result.seconds = thread_cpu_seconds() - start_seconds;
    return result;
  }

  CbcModelPtr model = load(problem);
  Cbc_Model* cbc = model.get();
  Cbc_setLogLevel(cbc, 0);
  Cbc_setParameter(cbc, "threads", "0");   // no parallel branch and bound: deterministic
  Cbc_setParameter(cbc, "timeMode", "cpu");  // CBC's default, stated: the limit is CPU time
  Cbc_setMaximumSeconds(cbc, std::min(options.time_limit_seconds, 1e100));
  Cbc_setAllowableFractionGap(cbc, options.relative_gap);
  if (!options.warm_start.empty()) {
    std::vector<int> columns(n);
    for (std::size_t j = 0; j < n; ++j) columns[j] = static_cast<int>(j);
    Cbc_setMIPStartI(cbc, static_cast<int>(n), columns.data(), options.warm_start.data());
  }
  Cbc_solve(cbc);

  const bool is_lp = std::none_of(problem.columns.begin(), problem.columns.end(), [](const MilpColumn& c) { return c.integer; });
  const double* solution = nullptr;
  bool infeasible_or_unbounded_relaxation = false;
  if (is_lp) {
    // Cbc_solve hands a model without integers to CLP directly: only optimal or
    // "primal or dual infeasible" come back.
    if (Cbc_isProvenOptimal(cbc)) {
      result.status = MilpStatus::optimal;
      solution = Cbc_getColSolution(cbc);
    } else if (Cbc_isProvenInfeasible(cbc)) {
      infeasible_or_unbounded_relaxation = true;
    } else {
      throw std::runtime_error("solve_milp: CLP abandoned the LP (numerical difficulties)");
    }
  } else {
    // Cbc_status: 0 finished, 1 stopped on a limit, 2 abandoned (Cbc_C_Interface.h).
    const int status = Cbc_status(cbc);
    solution = Cbc_bestSolution(cbc);
    if (Cbc_isContinuousUnbounded(cbc)) {
      infeasible_or_unbounded_relaxation = true;
    } else if (Cbc_isProvenInfeasible(cbc) && status == 0) {
      result.status = MilpStatus::infeasible;
    } else if (status == 2 || Cbc_isAbandoned(cbc)) {
      throw std::runtime_error("solve_milp: CBC abandoned the solve (numerical difficulties)");
    } else if (solution == nullptr) {
      // Stopped by the limit (1), or by it inside CBC's preprocessing, which then reports the
      // problem as infeasible with status 1: no proof either way.
      result.status = status == 0 && !Cbc_isProvenInfeasible(cbc) ? MilpStatus::infeasible : MilpStatus::no_solution;
    } else {
      // Finished with an incumbent: optimal, or within the allowable gap, which CBC also reports
      // as finished.
      result.status = status == 0 ? MilpStatus::optimal : MilpStatus::feasible;
    }
    result.nodes = Cbc_getNodeCount(cbc);
  }

  const bool zero_objective =
      std::all_of(problem.columns.begin(), problem.columns.end(), [](const MilpColumn& c) { return c.objective == 0; });
  if (infeasible_or_unbounded_relaxation && zero_objective) {
    // A constant objective cannot be unbounded (and this ends the feasibility check's recursion).
    infeasible_or_unbounded_relaxation = false;
    result.status = MilpStatus::infeasible;
  }
  if (infeasible_or_unbounded_relaxation) {
    const long nodes = result.nodes;
    const double seconds_spent = thread_cpu_seconds() - start_seconds;
    model.reset();
    result = infeasible_or_unbounded(problem, options, seconds_spent);
    result.nodes += nodes;
    result.seconds = thread_cpu_seconds() - start_seconds;
    return result;
  }

  // CBC drops a warm start it cannot use before the limit, and may stop without any incumbent (or
  // claim infeasibility under the limit, seen with CBC 2.10.8 at a 0.5 s limit): a warm start that
  // satisfies every row is a solution the caller already has, so it is returned, as stopped by the
  // limit.
  const bool warm_start_holds = !options.warm_start.empty() && satisfies_rows(problem, options.warm_start);
  if (warm_start_holds && (result.status == MilpStatus::no_solution || result.status == MilpStatus::infeasible)) {
    result.status = MilpStatus::feasible;
    solution = options.warm_start.data();
  }

  if (result.status == MilpStatus::optimal || result.status == MilpStatus::feasible) {
    result.values.assign(solution, solution + n);
    result.objective = 0;
    for (std::size_t j = 0; j < n; ++j) {
      // Within CBC's integer tolerance (1e-7 by default) an integer column is an integer; the
      // planner reads 0/1 decisions from these values.
      if (problem.columns[j].integer) result.values[j] = std::round(result.values[j]);
      result.objective += problem.columns[j].objective * result.values[j];
    }
    if (is_lp) {
      result.best_bound = result.objective;
    } else {
      const double bound = Cbc_getBestPossibleObjValue(cbc);
      // No bound, or none from a search that ended on a warm start it could not use (+1e50).
      result.best_bound = std::abs(bound) >= cbc_infinite_objective ? -milp_infinity : bound;
    }
    result.relative_gap = gap(result.objective, result.best_bound);
  } else if (result.status == MilpStatus::infeasible) {
    result.best_bound = milp_infinity;
  } else {  // no_solution
    const double bound = Cbc_getBestPossibleObjValue(cbc);
    result.best_bound = std::abs(bound) >= cbc_infinite_objective ? -milp_infinity : bound;
  }
  result.seconds = thread_cpu_seconds() - start_seconds;
  return result;
}

}  // namespace

MilpResult solve_milp(const MilpProblem& problem, const MilpOptions& options) {
  validate(problem, options);
  return solve_validated(problem, options);
}

std::string_view to_string(MilpStatus status) {
  switch (status) {
    case MilpStatus::optimal: return "optimal";
    case MilpStatus::feasible: return "feasible";
    case MilpStatus::infeasible: return "infeasible";
    case MilpStatus::no_solution: return "no_solution";
    case MilpStatus::unbounded: return "unbounded";
  }
  return "unknown";
}

}  // namespace comptrain::hybrid

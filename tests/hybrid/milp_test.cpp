// The MILP layer over CBC (hybrid/include/comptrain/hybrid/milp.hpp): optima against brute force
// over every integer point, known LP vertices, infeasible and unbounded problems told apart, the
// time limit on hard instances, the warm start kept at a zero time limit, validation, silence.
#include "comptrain/hybrid/milp.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <ostream>
#include <random>
#include <stdexcept>

namespace comptrain::hybrid {

// GoogleTest prints statuses by name.
void PrintTo(MilpStatus status, std::ostream* out) { *out << to_string(status); }

namespace {

using ::testing::HasSubstr;

constexpr double inf = milp_infinity;

double process_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

MilpColumn integer_column(double lower, double upper, double objective) {
  return MilpColumn{"", lower, upper, objective, true};
}

MilpColumn continuous_column(double lower, double upper, double objective) {
  return MilpColumn{"", lower, upper, objective, false};
}

double row_activity(const MilpRow& row, const std::vector<double>& x) {
  double sum = 0;
  for (const auto& [column, coefficient] : row.terms) sum += coefficient * x[static_cast<std::size_t>(column)];
  return sum;
}

// Every row and bound holds (up to a tolerance for CBC's floating point).
bool satisfies(const MilpProblem& problem, const std::vector<double>& x, double tolerance = 1e-6) {
  if (x.size() != problem.columns.size()) return false;
  for (std::size_t j = 0; j < x.size(); ++j) {
    const MilpColumn& column = problem.columns[j];
    if (x[j] < column.lower - tolerance || x[j] > column.upper + tolerance) return false;
    if (column.integer && x[j] != std::round(x[j])) return false;
  }
  for (const MilpRow& row : problem.rows) {
    const double activity = row_activity(row, x);
    if (activity < row.lower - tolerance || activity > row.upper + tolerance) return false;
  }
  return true;
}

double objective_of(const MilpProblem& problem, const std::vector<double>& x) {
  double sum = 0;
  for (std::size_t j = 0; j < x.size(); ++j) sum += problem.columns[j].objective * x[j];
  return sum;
}

// The optimum over every integer point of the box (all columns integer, finite bounds): the
// reference the solver must match. +inf when no point is feasible.
double brute_force_optimum(const MilpProblem& problem) {
  std::vector<double> x;
  for (const MilpColumn& column : problem.columns) x.push_back(std::ceil(column.lower));
  double best = inf;
  while (true) {
    if (satisfies(problem, x, 1e-9)) best = std::min(best, objective_of(problem, x));
    std::size_t j = 0;
    for (; j < x.size(); ++j) {  // next point, odometer-wise
      if (x[j] + 1 <= problem.columns[j].upper) {
        x[j] += 1;
        break;
      }
      x[j] = std::ceil(problem.columns[j].lower);
    }
    if (j == x.size()) return best;
  }
}

// 0-1 knapsack (maximise value within capacity, as minimising -value): `items` items, integer
// weights and values, capacity 40 % of the total weight.
MilpProblem knapsack(unsigned seed, int items) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> weight(1, 30), value(1, 60);
  MilpProblem problem;
  MilpRow capacity{"capacity", {}, -inf, 0};
  double total_weight = 0;
  for (int j = 0; j < items; ++j) {
    problem.columns.push_back(MilpColumn{"item", 0, 1, -static_cast<double>(value(rng)), true});
    const double w = weight(rng);
    capacity.terms.emplace_back(j, w);
    total_weight += w;
  }
  capacity.upper = std::floor(0.4 * total_weight);
  problem.rows.push_back(capacity);
  return problem;
}

// Market split (Cornuéjols and Dawande, "A class of hard small 0-1 programs", INFORMS J. Computing
// 11(2), 1999): `rows` equality rows with coefficients uniform in [0, 99] over 10·(rows-1) binary
// columns, notoriously hard for branch and bound. The right-hand sides are those of a planted
// 0-1 point, so the problem is feasible and the planted point is a valid warm start.
struct MarketSplit {
  MilpProblem problem;
  std::vector<double> planted;
};

MarketSplit market_split(unsigned seed, int rows) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> coefficient(0, 99), bit(0, 1);
  const int columns = 10 * (rows - 1);
  MarketSplit split;
  for (int j = 0; j < columns; ++j) {
    split.planted.push_back(bit(rng));
    split.problem.columns.push_back(integer_column(0, 1, static_cast<double>(j % 3) - 1.0));
  }
  for (int i = 0; i < rows; ++i) {
    MilpRow row{"split", {}, 0, 0};
    double rhs = 0;
    for (int j = 0; j < columns; ++j) {
      const double a = coefficient(rng);
      row.terms.emplace_back(j, a);
      rhs += a * split.planted[static_cast<std::size_t>(j)];
    }
    row.lower = row.upper = rhs;
    split.problem.rows.push_back(row);
  }
  return split;
}

// Multidimensional 0-1 knapsack, 300 items and 10 capacity rows: CBC finds good incumbents at the
// root but does not close the gap within a second.
MilpProblem multidimensional_knapsack(unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> number(1, 1000);
  const int items = 300;
  MilpProblem problem;
  for (int j = 0; j < items; ++j) problem.columns.push_back(integer_column(0, 1, -number(rng)));
  for (int i = 0; i < 10; ++i) {
    MilpRow row{"capacity", {}, -inf, 0};
    double total = 0;
    for (int j = 0; j < items; ++j) {
      const double w = number(rng);
      row.terms.emplace_back(j, w);
      total += w;
    }
    row.upper = total / 4;
    problem.rows.push_back(row);
  }
  return problem;
}

MilpOptions exact() {
  MilpOptions options;
  options.relative_gap = 0;  // the brute-force comparisons want the optimum, not within 1e-4
  return options;
}

void expect_optimum(const MilpProblem& problem, const MilpResult& result, double expected) {
  ASSERT_EQ(result.status, MilpStatus::optimal) << to_string(result.status);
  EXPECT_NEAR(result.objective, expected, 1e-6);
  EXPECT_TRUE(satisfies(problem, result.values));
  EXPECT_NEAR(objective_of(problem, result.values), result.objective, 1e-9);
  EXPECT_LE(result.relative_gap, 1e-6);
}

TEST(Milp, KnapsackMatchesBruteForceOverEverySubset) {
  for (unsigned seed = 1; seed <= 8; ++seed) {
    SCOPED_TRACE(seed);
    const MilpProblem problem = knapsack(seed, 12);
    const double optimum = brute_force_optimum(problem);  // 4096 subsets
    ASSERT_LT(optimum, 0);
    ASSERT_NO_FATAL_FAILURE(expect_optimum(problem, solve_milp(problem, exact()), optimum));
  }
}

TEST(Milp, SetCoverMatchesBruteForce) {
  // 8 elements, 8 random subsets with random costs, plus singletons so that a cover exists.
  for (unsigned seed = 1; seed <= 4; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> cost(1, 20), member(0, 2);
    const int elements = 8, subsets = 8;
    MilpProblem problem;
    std::vector<MilpRow> covered(elements, MilpRow{"element", {}, 1, inf});
    for (int s = 0; s < subsets; ++s) {
      problem.columns.push_back(integer_column(0, 1, cost(rng)));
      for (int e = 0; e < elements; ++e)
        if (member(rng) == 0) covered[static_cast<std::size_t>(e)].terms.emplace_back(s, 1.0);
    }
    for (int e = 0; e < elements; ++e) {
      problem.columns.push_back(integer_column(0, 1, 25));  // the singleton {e}
      covered[static_cast<std::size_t>(e)].terms.emplace_back(subsets + e, 1.0);
    }
    problem.rows = covered;
    const double optimum = brute_force_optimum(problem);  // 2^16 points
    ASSERT_NO_FATAL_FAILURE(expect_optimum(problem, solve_milp(problem, exact()), optimum));
  }
}

TEST(Milp, EqualityAndRangedRowsOnGeneralIntegersMatchBruteForce) {
  // Integer columns in [-2, 3] (not binary), one equality row through a planted point (so it is
  // feasible), one ranged row, one row with a repeated column (coefficients summed).
  for (unsigned seed = 1; seed <= 10; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> coefficient(-5, 5), point(-2, 3);
    MilpProblem problem;
    std::vector<double> planted;
    for (int j = 0; j < 5; ++j) {
      problem.columns.push_back(integer_column(-2, 3, coefficient(rng)));
      planted.push_back(point(rng));
    }
    MilpRow equality{"equality", {}, 0, 0}, ranged{"ranged", {}, -3, 4}, repeated{"repeated", {}, -inf, 2};
    for (int j = 0; j < 5; ++j) {
      equality.terms.emplace_back(j, coefficient(rng));
      ranged.terms.emplace_back(j, coefficient(rng));
    }
    equality.lower = equality.upper = row_activity(equality, planted);
    repeated.terms = {{0, 1.0}, {1, 1.0}, {0, 1.0}};  // 2·x0 + x1 <= 2
    problem.rows = {equality, ranged, repeated};
    const double optimum = brute_force_optimum(problem);
    if (std::isinf(optimum)) {
      EXPECT_EQ(solve_milp(problem, exact()).status, MilpStatus::infeasible);
    } else {
      ASSERT_NO_FATAL_FAILURE(expect_optimum(problem, solve_milp(problem, exact()), optimum));
    }
  }
}

TEST(Milp, IntegerColumnBeyondBinary) {
  // max 5x + 4y, 6x + 4y <= 24, x + 2y <= 6, x, y integer in [0, 10]: the LP vertex is
  // (3, 1.5) with 21; the integer optimum is (4, 0) with 20 (also (2, 2) gives 18, (3, 1) 19).
  MilpProblem problem;
  problem.columns = {integer_column(0, 10, -5), integer_column(0, 10, -4)};
  problem.rows = {MilpRow{"a", {{0, 6}, {1, 4}}, -inf, 24}, MilpRow{"b", {{0, 1}, {1, 2}}, -inf, 6}};
  const MilpResult result = solve_milp(problem, exact());
  ASSERT_NO_FATAL_FAILURE(expect_optimum(problem, result, -20));
  EXPECT_EQ(result.values, (std::vector<double>{4, 0}));
  EXPECT_EQ(brute_force_optimum(problem), -20);

  // The same columns continuous: the LP vertex.
  for (MilpColumn& column : problem.columns) column.integer = false;
  const MilpResult lp = solve_milp(problem, exact());
  ASSERT_NO_FATAL_FAILURE(expect_optimum(problem, lp, -21));
  EXPECT_NEAR(lp.values[0], 3, 1e-9);
  EXPECT_NEAR(lp.values[1], 1.5, 1e-9);
  EXPECT_EQ(lp.best_bound, lp.objective);
  EXPECT_EQ(lp.nodes, 0);
}

TEST(Milp, LinearProgramAtItsKnownVertex) {
  // max 3x + 2y, x + y <= 4, x + 3y <= 6, x <= 3, x, y >= 0 (unbounded above): vertex (3, 1), 11.
  MilpProblem problem;
  problem.columns = {continuous_column(0, inf, -3), continuous_column(0, inf, -2)};
  problem.rows = {MilpRow{"sum", {{0, 1}, {1, 1}}, -inf, 4}, MilpRow{"mix", {{0, 1}, {1, 3}}, -inf, 6},
                  MilpRow{"cap", {{0, 1}}, -inf, 3}};
  const MilpResult result = solve_milp(problem);
  ASSERT_NO_FATAL_FAILURE(expect_optimum(problem, result, -11));
  EXPECT_NEAR(result.values[0], 3, 1e-9);
  EXPECT_NEAR(result.values[1], 1, 1e-9);
  EXPECT_EQ(result.relative_gap, 0);
}

TEST(Milp, MixedIntegerWithContinuousColumns) {
  // Open a facility (binary y, cost 5) to ship x <= 10y (cost 1 per unit) of a demand x >= 3.5,
  // or buy it outside (z, cost 3 per unit): 5 + 3.5 = 8.5 beats 3 · 3.5 = 10.5.
  MilpProblem problem;
  problem.columns = {integer_column(0, 1, 5), continuous_column(0, inf, 1), continuous_column(0, inf, 3)};
  problem.rows = {MilpRow{"capacity", {{1, 1}, {0, -10}}, -inf, 0}, MilpRow{"demand", {{1, 1}, {2, 1}}, 3.5, inf}};
  const MilpResult result = solve_milp(problem, exact());
  ASSERT_NO_FATAL_FAILURE(expect_optimum(problem, result, 8.5));
  EXPECT_EQ(result.values[0], 1);
  EXPECT_NEAR(result.values[1], 3.5, 1e-9);
}

TEST(Milp, InfeasibleProblems) {
  // 2x + 2y = 3 has no integer solution, though its relaxation has.
  MilpProblem parity;
  parity.columns = {integer_column(0, 5, 1), integer_column(0, 5, 1)};
  parity.rows = {MilpRow{"odd", {{0, 2}, {1, 2}}, 3, 3}};
  MilpResult result = solve_milp(parity);
  EXPECT_EQ(result.status, MilpStatus::infeasible);
  EXPECT_TRUE(result.values.empty());
  EXPECT_EQ(result.objective, inf);
  EXPECT_EQ(result.relative_gap, inf);

  // An LP: x + y >= 3 with x, y <= 1.
  MilpProblem lp;
  lp.columns = {continuous_column(0, 1, 1), continuous_column(0, 1, 1)};
  lp.rows = {MilpRow{"too_much", {{0, 1}, {1, 1}}, 3, inf}};
  EXPECT_EQ(solve_milp(lp).status, MilpStatus::infeasible);

  // An unbounded relaxation (x unbounded above, cost -1) but no integer point (2y - 2z = 1):
  // infeasible, not unbounded. (y and z are bounded: with unbounded y and z CBC branches for ever
  // and the answer is no_solution at the time limit.)
  MilpProblem mixed;
  mixed.columns = {continuous_column(0, inf, -1), integer_column(0, 10, 0), integer_column(0, 10, 0)};
  mixed.rows = {MilpRow{"odd", {{1, 2}, {2, -2}}, 1, 1}};
  EXPECT_EQ(solve_milp(mixed).status, MilpStatus::infeasible);
}

TEST(Milp, UnboundedProblems) {
  // min -x - y with x - y <= 1, x, y >= 0: the ray (1, 1).
  MilpProblem problem;
  problem.columns = {continuous_column(0, inf, -1), continuous_column(0, inf, -1)};
  problem.rows = {MilpRow{"ray", {{0, 1}, {1, -1}}, -inf, 1}};
  MilpResult result = solve_milp(problem);
  EXPECT_EQ(result.status, MilpStatus::unbounded) << to_string(result.status);
  EXPECT_EQ(result.objective, -inf);
  EXPECT_TRUE(result.values.empty());

  for (MilpColumn& column : problem.columns) column.integer = true;
  result = solve_milp(problem);
  EXPECT_EQ(result.status, MilpStatus::unbounded) << to_string(result.status);
}

TEST(Milp, ZeroRowsAndZeroColumns) {
  // No rows: every column sits at the bound its objective prefers.
  MilpProblem bounds_only;
  bounds_only.columns = {integer_column(-3, 4, 1), integer_column(-3, 4, -2), continuous_column(0.5, 2.5, 1)};
  MilpResult result = solve_milp(bounds_only);
  ASSERT_NO_FATAL_FAILURE(expect_optimum(bounds_only, result, -3 - 8 + 0.5));
  EXPECT_EQ(result.values, (std::vector<double>{-3, 4, 0.5}));
  bounds_only.columns.pop_back();
  bounds_only.columns.back().integer = false;
  ASSERT_NO_FATAL_FAILURE(expect_optimum(bounds_only, solve_milp(bounds_only), -3 - 8));

  // No columns: optimal at 0 when every row admits 0, else infeasible.
  MilpProblem empty;
  result = solve_milp(empty);
  EXPECT_EQ(result.status, MilpStatus::optimal);
  EXPECT_EQ(result.objective, 0);
  EXPECT_TRUE(result.values.empty());
  empty.rows = {MilpRow{"zero", {}, -1, 0}};
  EXPECT_EQ(solve_milp(empty).status, MilpStatus::optimal);
  empty.rows.push_back(MilpRow{"one", {}, 1, inf});
  EXPECT_EQ(solve_milp(empty).status, MilpStatus::infeasible);

  // A row without terms among real columns.
  MilpProblem empty_row = knapsack(3, 6);
  empty_row.rows.push_back(MilpRow{"nothing", {}, -inf, inf});
  ASSERT_NO_FATAL_FAILURE(expect_optimum(empty_row, solve_milp(empty_row, exact()), brute_force_optimum(empty_row)));
}

TEST(Milp, TimeLimitStopsAHardInstance) {
  // No CPU-time threshold finer than 5x the limit + 1 s: the machine is shared and noisy; the
  // point is that the search stops, where an unlimited one runs for minutes.
  const MarketSplit split = market_split(7, 5);
  MilpOptions options;
  options.time_limit_seconds = 0.5;
  double before = process_cpu_seconds();
  MilpResult result = solve_milp(split.problem, options);
  double spent = process_cpu_seconds() - before;
  EXPECT_LE(spent, 5 * options.time_limit_seconds + 1);
  EXPECT_LE(result.seconds, spent + 0.01);
  EXPECT_GT(result.seconds, 0);
  EXPECT_TRUE(result.status == MilpStatus::no_solution || result.status == MilpStatus::feasible) << to_string(result.status);
  if (result.status == MilpStatus::no_solution) {
    EXPECT_TRUE(result.values.empty());
    EXPECT_EQ(result.relative_gap, inf);
  }

  // Stopped with an incumbent: feasible, a real gap to the bound.
  const MilpProblem knapsacks = multidimensional_knapsack(42);
  before = process_cpu_seconds();
  result = solve_milp(knapsacks, options);
  spent = process_cpu_seconds() - before;
  EXPECT_LE(spent, 5 * options.time_limit_seconds + 1);
  ASSERT_EQ(result.status, MilpStatus::feasible) << to_string(result.status);
  EXPECT_TRUE(satisfies(knapsacks, result.values));
  EXPECT_LE(result.best_bound, result.objective);
  EXPECT_GT(result.relative_gap, options.relative_gap);
  EXPECT_NEAR(result.relative_gap, (result.objective - result.best_bound) / std::abs(result.objective), 1e-12);
}

TEST(Milp, WarmStartIsKeptWhenTheTimeLimitIsZero) {
  const MarketSplit split = market_split(11, 5);
  const double warm_objective = objective_of(split.problem, split.planted);
  MilpOptions options;
  options.time_limit_seconds = 0;

  // Without it CBC finds nothing in no time: the control that makes the next check mean something.
  EXPECT_EQ(solve_milp(split.problem, options).status, MilpStatus::no_solution);

  options.warm_start = split.planted;
  const MilpResult result = solve_milp(split.problem, options);
  ASSERT_EQ(result.status, MilpStatus::feasible) << to_string(result.status);
  EXPECT_LE(result.objective, warm_objective + 1e-9);
  EXPECT_TRUE(satisfies(split.problem, result.values));
}

TEST(Milp, WarmStartDoesNotChangeTheOptimum) {
  const MilpProblem problem = knapsack(5, 12);
  MilpOptions options = exact();
  options.warm_start.assign(problem.columns.size(), 0);  // the empty knapsack
  ASSERT_NO_FATAL_FAILURE(expect_optimum(problem, solve_milp(problem, options), brute_force_optimum(problem)));
}

TEST(Milp, SameAnswerTwice) {
  const MilpProblem problem = knapsack(9, 40);
  const MilpResult first = solve_milp(problem, exact());
  const MilpResult second = solve_milp(problem, exact());
  ASSERT_EQ(first.status, MilpStatus::optimal);
  EXPECT_EQ(first.values, second.values);
  EXPECT_EQ(first.objective, second.objective);
  EXPECT_EQ(first.nodes, second.nodes);
}

TEST(Milp, NothingIsPrinted) {
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  solve_milp(knapsack(2, 12));
  MilpProblem lp;
  lp.columns = {continuous_column(0, 1, 1), continuous_column(0, 1, 1)};
  lp.rows = {MilpRow{"too_much", {{0, 1}, {1, 1}}, 3, inf}};
  solve_milp(lp);
  MilpOptions limited;
  limited.time_limit_seconds = 0.05;
  solve_milp(market_split(7, 5).problem, limited);
  const std::string out = testing::internal::GetCapturedStdout();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out, "");
  EXPECT_EQ(err, "");
}

TEST(Milp, StatusNames) {
  EXPECT_EQ(to_string(MilpStatus::optimal), "optimal");
  EXPECT_EQ(to_string(MilpStatus::feasible), "feasible");
  EXPECT_EQ(to_string(MilpStatus::infeasible), "infeasible");
  EXPECT_EQ(to_string(MilpStatus::no_solution), "no_solution");
  EXPECT_EQ(to_string(MilpStatus::unbounded), "unbounded");
}

// The message names what is wrong and where.
void expect_invalid(const MilpProblem& problem, const MilpOptions& options, const std::string& fragment) {
  try {
    solve_milp(problem, options);
    ADD_FAILURE() << "no exception; expected one mentioning '" << fragment << "'";
  } catch (const std::invalid_argument& error) {
    EXPECT_THAT(error.what(), HasSubstr(fragment));
  }
}

TEST(Milp, MalformedProblemsAreProgrammingErrors) {
  MilpProblem base;
  base.columns = {MilpColumn{"a", 0, 1, 1, true}, MilpColumn{"b", 0, 5, 2, false}};
  base.rows = {MilpRow{"r", {{0, 1}, {1, 1}}, 1, 3}};
  ASSERT_EQ(solve_milp(base).status, MilpStatus::optimal);
  const MilpOptions none;

  auto with_column = [&](auto change) { MilpProblem p = base; change(p.columns[1]); return p; };
  auto with_row = [&](auto change) { MilpProblem p = base; change(p.rows[0]); return p; };
  const double nan = std::nan("");
  expect_invalid(with_column([](MilpColumn& c) { c.lower = 6; }), none, "column 1 ('b')");
  expect_invalid(with_column([&](MilpColumn& c) { c.upper = nan; }), none, "column 1 ('b')");
  expect_invalid(with_column([](MilpColumn& c) { c.lower = inf; c.upper = inf; }), none, "column 1");
  expect_invalid(with_column([](MilpColumn& c) { c.lower = -inf; c.upper = -inf; }), none, "column 1");
  expect_invalid(with_column([](MilpColumn& c) { c.objective = inf; }), none, "objective coefficient inf");
  expect_invalid(with_column([&](MilpColumn& c) { c.objective = nan; }), none, "objective coefficient");
  expect_invalid(with_row([](MilpRow& r) { r.lower = 4; }), none, "row 0 ('r')");
  expect_invalid(with_row([](MilpRow& r) { r.upper = -inf; r.lower = -inf; }), none, "row 0 ('r')");
  expect_invalid(with_row([](MilpRow& r) { r.lower = inf; }), none, "row 0 ('r')");
  expect_invalid(with_row([&](MilpRow& r) { r.lower = nan; }), none, "row 0 ('r')");
  expect_invalid(with_row([](MilpRow& r) { r.terms.emplace_back(2, 1.0); }), none, "column index 2 is outside [0, 2)");
  expect_invalid(with_row([](MilpRow& r) { r.terms.emplace_back(-1, 1.0); }), none, "column index -1");
  expect_invalid(with_row([](MilpRow& r) { r.terms.emplace_back(0, inf); }), none, "coefficient inf of column 0");
  expect_invalid(with_row([&](MilpRow& r) { r.terms.emplace_back(1, nan); }), none, "of column 1 is not finite");

  MilpOptions options;
  options.time_limit_seconds = -1;
  expect_invalid(base, options, "time_limit_seconds");
  options.time_limit_seconds = std::nan("");
  expect_invalid(base, options, "time_limit_seconds");
  options = {};
  options.relative_gap = -1e-3;
  expect_invalid(base, options, "relative_gap");
  options.relative_gap = inf;
  expect_invalid(base, options, "relative_gap");
  options = {};
  options.warm_start = {1};
  expect_invalid(base, options, "warm_start has 1 values for 2 columns");
  options.warm_start = {1, 6};
  expect_invalid(base, options, "outside its bounds");
  options.warm_start = {0.5, 1};
  expect_invalid(base, options, "of integer column 0 ('a') is not integral");
  options.warm_start = {1, nan};
  expect_invalid(base, options, "warm_start value");
  options.warm_start = {1, 0.5};  // continuous columns take fractions
  EXPECT_EQ(solve_milp(base, options).status, MilpStatus::optimal);
  options.time_limit_seconds = inf;  // no limit
  EXPECT_EQ(solve_milp(base, options).status, MilpStatus::optimal);
}

}  // namespace
}  // namespace comptrain::hybrid

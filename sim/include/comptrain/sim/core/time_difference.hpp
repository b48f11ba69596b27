#pragma once
// The one rule for subtracting simulated times in a report (shared/defects-2/18): two times the
// simulation computed as sums of the same durations in different orders differ by rounding alone
// (a collective's union minus the compute-hidden part gave -5.4e-20 s, reported as "-0.0 ns"
// hidden), so a difference is 0 within a relative 1e-9 of the larger (the I/O simulation's
// tolerance, engine/io_simulation.cpp) and never negative.

#include <algorithm>
#include <cmath>

namespace comptrain::sim {

inline constexpr double kTimeRelativeTolerance = 1e-9;

// later - earlier, clamped at 0, and 0 when the two agree within the tolerance.
inline double time_difference(double later, double earlier) {
  const double difference = later - earlier;
  if (!(difference > kTimeRelativeTolerance * std::max(std::abs(later), std::abs(earlier)))) return 0.0;
  return difference;
}

}  // namespace comptrain::sim

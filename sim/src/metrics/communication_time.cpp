#include "comptrain/sim/metrics/communication_time.hpp"

#include <algorithm>
#include <utility>
#include <vector>

namespace comptrain::sim {
namespace {

using models::Stream;
using models::TaskId;
using models::TaskKind;

// The total length of a union of intervals (sorted in place).
double union_length(std::vector<std::pair<double, double>>& intervals) {
  std::sort(intervals.begin(), intervals.end());
  double total = 0;
  double start = 0;
  double end = -1;
  for (const auto& [a, b] : intervals) {
    if (a > end) {
      if (end > start) total += end - start;
      start = a;
      end = b;
    } else {
      end = std::max(end, b);
    }
  }
  if (end > start) total += end - start;
  return total;
}

}  // namespace

CommunicationTime communication_time(const models::Schedule& schedule, const SimulationResult& result) {
  std::vector<std::pair<double, double>> comm;
  std::vector<std::pair<double, double>> compute;
  for (TaskId t = 0; t < schedule.tasks.size() && t < result.tasks.size(); ++t) {
    const TaskTiming& timing = result.tasks[t];
    if (!(timing.end > timing.start)) continue;
    if (schedule.tasks[t].kind == TaskKind::collective) comm.emplace_back(timing.start, timing.end);
    if (schedule.tasks[t].stream == Stream::compute) compute.emplace_back(timing.start, timing.end);
  }
  std::vector<std::pair<double, double>> both = comm;
  both.insert(both.end(), compute.begin(), compute.end());
  CommunicationTime c;
  c.collective_seconds = union_length(comm);
  // |comm \ compute| = |comm ∪ compute| - |compute|
  // Two unions of the same intervals summed in different orders: within rounding of the whole
  // collective time, it is all exposed (core/time_difference.hpp); never more than all of it.
  const double exposed = time_difference(union_length(both), union_length(compute));
  c.exposed_seconds = time_difference(c.collective_seconds, exposed) == 0 ? c.collective_seconds : exposed;
  return c;
}

}  // namespace comptrain::sim

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

// |comm \ compute| = |comm ∪ compute| - |compute|. Two unions of the same intervals summed in
// different orders: within rounding of the whole collective time, it is all exposed
// (core/time_difference.hpp); never more than all of it.
double exposed_part(std::vector<std::pair<double, double>> comm, const std::vector<std::pair<double, double>>& compute, double compute_union,
                    double collective_seconds) {
  comm.insert(comm.end(), compute.begin(), compute.end());
  const double exposed = time_difference(union_length(comm), compute_union);
  return time_difference(collective_seconds, exposed) == 0 ? collective_seconds : exposed;
}

}  // namespace

CommunicationTime communication_time(const models::Schedule& schedule, const SimulationResult& result) {
  std::vector<std::pair<double, double>> comm;
  std::array<std::vector<std::pair<double, double>>, traces::kParallelGroupCount> by_group;
  std::vector<std::pair<double, double>> compute;
  CommunicationTime c;
  for (TaskId t = 0; t < schedule.tasks.size() && t < result.tasks.size(); ++t) {
    const TaskTiming& timing = result.tasks[t];
    if (!(timing.end > timing.start)) continue;
    const models::Task& task = schedule.tasks[t];
    if (task.kind == TaskKind::collective) {
      comm.emplace_back(timing.start, timing.end);
      by_group[static_cast<std::size_t>(task.over)].emplace_back(timing.start, timing.end);
      ++c.by_group[static_cast<std::size_t>(task.over)].collectives;
    } else if (task.stream == Stream::compute) {
      compute.emplace_back(timing.start, timing.end);
    }
  }
  std::vector<std::pair<double, double>> compute_sorted = compute;
  const double compute_union = union_length(compute_sorted);
  c.collective_seconds = union_length(comm);
  c.exposed_seconds = exposed_part(comm, compute, compute_union, c.collective_seconds);
  for (std::size_t g = 0; g < by_group.size(); ++g) {
    if (by_group[g].empty()) continue;
    c.by_group[g].collective_seconds = union_length(by_group[g]);
    c.by_group[g].exposed_seconds = exposed_part(by_group[g], compute, compute_union, c.by_group[g].collective_seconds);
  }
  return c;
}

}  // namespace comptrain::sim

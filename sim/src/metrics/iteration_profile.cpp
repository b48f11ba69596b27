#include "comptrain/sim/metrics/iteration_profile.hpp"

#include <algorithm>

#include "comptrain/sim/metrics/communication_time.hpp"

namespace comptrain::sim {

IterationProfile iteration_profile(const traces::Trace& trace, const models::Schedule& schedule, const SimulationResult& result,
                                   int accumulation_steps) {
  IterationProfile profile;
  profile.seconds = result.iteration_seconds;
  profile.samples = trace.batch_size() * std::max(accumulation_steps, 1);
  profile.optimizer_start = result.iteration_seconds;
  for (std::size_t t = 0; t < schedule.tasks.size() && t < result.tasks.size(); ++t) {
    const models::Task& task = schedule.tasks[t];
    const bool optimizer = task.kind == models::TaskKind::host_compute ||
                           (task.op && trace.ops()[*task.op].phase == traces::Phase::optimizer);
    if (optimizer) profile.optimizer_start = std::min(profile.optimizer_start, result.tasks[t].start);
  }
  profile.host_wait_seconds = result.host_wait_seconds;
  profile.exposed_communication_seconds = communication_time(schedule, result).exposed_seconds;
  for (const models::Task& task : schedule.tasks) profile.launch_seconds += task.host_seconds;
  return profile;
}

}  // namespace comptrain::sim

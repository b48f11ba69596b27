#include "comptrain/models/gradient_accumulation.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "micro_step.hpp"

namespace comptrain::models {

void apply_gradient_accumulation(Schedule& schedule, const traces::Trace& trace, int steps, std::optional<TaskId> step_begin) {
  if (steps < 1) throw std::invalid_argument("gradient accumulation: steps must be at least 1");
  if (steps == 1) return;
  const std::size_t n = schedule.tasks.size();
  const std::size_t buffer_count = schedule.buffers.size();

  if (step_begin && *step_begin > n) throw std::logic_error("gradient accumulation: the step begins after the last task");
  const std::vector<bool> is_step = transform_detail::optimizer_step_tasks(schedule, trace, step_begin);
  std::vector<TaskId> micro;      // the tasks of a micro-step (forward, backward, per-micro-step collectives), in order
  std::vector<TaskId> optimizer;  // the step's tasks, in order
  for (TaskId t = 0; t < n; ++t) (is_step[t] ? optimizer : micro).push_back(t);
  // A buffer a micro-step needs for itself: not resident, not held to the end (the gradients),
  // and not touched by the optimizer's tasks (what they read must be the one the last micro-step
  // left, so it stays shared).
  const std::vector<bool> shared = transform_detail::shared_across_micro_steps(schedule, is_step);

  // New ids: micro-step s's copy of old task t; the optimizer's tasks at the end.
  std::vector<std::vector<TaskId>> id(static_cast<std::size_t>(steps), std::vector<TaskId>(n, 0));
  std::vector<Task> tasks;
  tasks.reserve(micro.size() * static_cast<std::size_t>(steps) + optimizer.size());
  for (int s = 0; s < steps; ++s) {
    for (std::size_t i = 0; i < micro.size(); ++i) id[static_cast<std::size_t>(s)][micro[i]] = tasks.size() + i;
    // Buffers of this micro-step: the first keeps the originals, the others get copies.
    std::vector<BufferId> buffer_of(buffer_count);
    for (BufferId b = 0; b < buffer_count; ++b) {
      if (s == 0 || shared[b]) {
        buffer_of[b] = b;
        continue;
      }
      Buffer copy = schedule.buffers[b];
      copy.name += " (micro-step " + std::to_string(s + 1) + ")";
      schedule.buffers.push_back(std::move(copy));
      buffer_of[b] = schedule.buffers.size() - 1;
    }
    for (TaskId t : micro) {
      Task task = schedule.tasks[t];
      if (s > 0) {
        task.name += " [micro-step " + std::to_string(s + 1) + "]";
        // Later micro-steps write into the gradients (and any other shared buffer) the first one
        // created: a reduced gradient shard, Deep Optimizer States' kept gradients. A collective
        // that made a held buffer (FSDP2's reduce-scatter output, the sharded gradient) makes a
        // new output in each later micro-step and adds it into the first one's, which frees it
        // (_fsdp_collectives.py foreach_reduce_scatter: reduce_scatter_output is allocated at
        // every call, then `sharded_param.grad += ...`).
        std::vector<BufferId> creates;
        std::vector<BufferId> transient;
        for (BufferId b : task.creates) {
          if (shared[b]) {
            task.uses.push_back(b);
            if (task.kind == TaskKind::collective && schedule.buffers[b].held_to_end) {
              Buffer output = schedule.buffers[b];
              output.name += " (micro-step " + std::to_string(s + 1) + "'s output, added into it)";
              output.held_to_end = false;
              schedule.buffers.push_back(std::move(output));
              transient.push_back(schedule.buffers.size() - 1);
            }
          } else {
            creates.push_back(buffer_of[b]);
          }
        }
        task.creates = std::move(creates);
        task.creates.insert(task.creates.end(), transient.begin(), transient.end());
        for (BufferId& b : task.uses) b = buffer_of[b];
        std::sort(task.uses.begin(), task.uses.end());
        task.uses.erase(std::unique(task.uses.begin(), task.uses.end()), task.uses.end());
      }
      for (TaskId& a : task.after) a = id[static_cast<std::size_t>(s)][a];
      tasks.push_back(std::move(task));
    }
  }
  // The optimizer's waits point at the last micro-step's tasks.
  std::vector<TaskId> optimizer_id(n, 0);
  for (std::size_t i = 0; i < optimizer.size(); ++i) optimizer_id[optimizer[i]] = tasks.size() + i;
  for (TaskId t : optimizer) {
    Task task = schedule.tasks[t];
    for (TaskId& a : task.after) {
      a = is_step[a] ? optimizer_id[a] : id[static_cast<std::size_t>(steps - 1)][a];
    }
    tasks.push_back(std::move(task));
  }
  schedule.tasks = std::move(tasks);
  schedule.strategy += ", " + std::to_string(steps) + " micro-steps";
}

}  // namespace comptrain::models

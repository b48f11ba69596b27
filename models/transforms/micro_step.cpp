#include "micro_step.hpp"

#include <algorithm>
#include <stdexcept>

namespace comptrain::models::transform_detail {
namespace {

// An optimizer-phase op of the trace: a kernel, or a communication op's collective or transfer
// (Megatron's finalize_model_grads before the step, once per iteration: the sequence-parallel
// gradients' all-reduce, the tied embedding's exchange between the first and last stage).
bool is_optimizer_task(const Task& task, const traces::Trace& trace) {
  const bool of_an_op = task.kind == TaskKind::op || task.kind == TaskKind::collective || task.kind == TaskKind::send || task.kind == TaskKind::recv;
  return task.op && of_an_op && trace.op(*task.op).phase == traces::Phase::optimizer;
}

}  // namespace

std::vector<bool> optimizer_step_tasks(const Schedule& schedule, const traces::Trace& trace, std::optional<TaskId> step_begin) {
  const std::size_t n = schedule.tasks.size();
  std::vector<bool> step(n, false);
  for (TaskId t = 0; t < n; ++t) step[t] = step_begin ? t >= *step_begin : is_optimizer_task(schedule.tasks[t], trace);
  for (bool changed = !step_begin; changed;) {
    changed = false;
    for (TaskId t = 0; t < n; ++t) {
      if (step[t]) continue;
      const auto& after = schedule.tasks[t].after;
      if (std::any_of(after.begin(), after.end(), [&](TaskId a) { return step[a]; })) step[t] = changed = true;
    }
  }
  for (TaskId t = 0; t < n; ++t) {
    const Task& task = schedule.tasks[t];
    if (step[t] && task.op && trace.op(*task.op).phase != traces::Phase::optimizer) {
      throw std::logic_error("a forward or backward task waits for the optimizer, or comes after its step");
    }
    if (!step[t] && std::any_of(task.after.begin(), task.after.end(), [&](TaskId a) { return step[a]; })) {
      throw std::logic_error("a task of a micro-step waits for the optimizer step");
    }
  }
  return step;
}

std::vector<bool> shared_across_micro_steps(const Schedule& schedule, const std::vector<bool>& is_step) {
  const std::size_t buffer_count = schedule.buffers.size();
  std::vector<bool> shared(buffer_count, false);
  for (BufferId b = 0; b < buffer_count; ++b) shared[b] = schedule.buffers[b].resident || schedule.buffers[b].held_to_end;
  for (TaskId t = 0; t < schedule.tasks.size(); ++t) {
    if (!is_step[t]) continue;
    for (BufferId b : schedule.tasks[t].creates) shared[b] = true;
    for (BufferId b : schedule.tasks[t].uses) shared[b] = true;
  }
  return shared;
}

}  // namespace comptrain::models::transform_detail

// The ordered pipeline of schedule transforms (transform_schedule.hpp), as the run layer called
// them one by one before (sim/src/run.cpp, schedule_run).

#include "comptrain/models/transform_schedule.hpp"

#include "comptrain/models/gradient_accumulation.hpp"

#include <stdexcept>
#include <string>

namespace comptrain::models {

Schedule transform_schedule(Schedule schedule, const traces::Trace& trace, const TransformSteps& steps) {
  // Accumulation wraps data parallelism when every micro-step gathers and reduces on its own
  // (ZeRO-2/3, FSDP2), and comes first when the gradients are reduced once per step (DDP, ZeRO-1).
  const bool per_micro_step = steps.data_parallel && reduces_every_micro_step(*steps.data_parallel);
  // Accumulation after data parallelism repeats everything before the step, the parameters'
  // all-gathers at the iteration's start included: not what Megatron-LM does.
  if (per_micro_step && steps.accumulation_steps > 1 && steps.data_parallel->overlap_param_gather) {
    throw std::invalid_argument("overlap_param_gather with ZeRO stage 2 and gradient accumulation is not modelled");
  }
  if (!per_micro_step) apply_gradient_accumulation(schedule, trace, steps.accumulation_steps);
  // Tensor and pipeline parallelism go here (transform_schedule.hpp).
  std::optional<TaskId> step_begin;  // where data parallelism's optimizer step begins
  if (steps.data_parallel) {
    step_begin = steps.platform ? apply_data_parallel(schedule, trace, *steps.data_parallel, *steps.platform)
                                : apply_data_parallel(schedule, trace, *steps.data_parallel);
  }
  if (per_micro_step) apply_gradient_accumulation(schedule, trace, steps.accumulation_steps, step_begin);
  apply_gradient_lifetime(schedule, steps.zero_grad);
  add_cudnn_workspaces(schedule, trace, steps.cudnn_workspace_bytes);
  assign_dispatch_costs(schedule, trace, steps.dispatch, steps.compile);
  apply_host_sync_ops(schedule, trace);
  apply_optimizer_loop(schedule, trace, steps.optimizer_ops_per_parameter, steps.dispatch, steps.launch_overhead);
  // A .item() is a Python call: the forward op's dispatch cost.
  add_host_syncs(schedule, trace, steps.host_syncs, steps.dispatch.forward);
  if (steps.layout) place_collectives(schedule, *steps.layout, steps.gpus);
  return schedule;
}

void place_collectives(Schedule& schedule, const ParallelLayout& layout, int gpus) {
  for (Task& task : schedule.tasks) {
    if (task.kind != TaskKind::collective) continue;
    const RankGroups group = rank_groups(layout, gpus, task.over);
    if (group.size == gpus) continue;  // the group is every rank: its sub-groups are the run's already
    if (task.groups.every_rank()) {
      task.groups = group;
      continue;
    }
    if (task.groups.size * task.groups.stride > group.size) {
      throw std::invalid_argument("place_collectives: task " + task.name + "'s groups of " + std::to_string(task.groups.size) + " ranks " +
                                  std::to_string(task.groups.stride) + " apart do not fit in its " + std::string(traces::to_string(task.over)) +
                                  " group of " + std::to_string(group.size));
    }
    task.groups = RankGroups{task.groups.size, task.groups.stride * group.stride};
  }
}

}  // namespace comptrain::models

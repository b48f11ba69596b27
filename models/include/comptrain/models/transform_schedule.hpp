#pragma once
// The ordered pipeline of schedule transforms: what happens to the schedule build_schedule gives
// (one GPU's iteration under a strategy) before the simulator replays it. This is the one place
// that order is written; the run layer (sim/run.hpp, schedule_run) calls only transform_schedule.
//
//   1. gradient accumulation (gradient_accumulation.hpp) and data parallelism
//      (data_parallel.hpp: one rank's schedule with its collectives), in the order the
//      framework reduces the gradients (reduces_every_micro_step): accumulation first when
//      they are reduced once per optimizer step (DDP's no_sync(), ZeRO-1), so the
//      reductions come in the last micro-step only; data parallelism first when every
//      micro-step gathers, reshards and reduce-scatters on its own (ZeRO-2 and 3, FSDP2), so
//      accumulation repeats those with the micro-step and the gradient shard is accumulated;
//      apply_data_parallel says where its optimizer step begins (the step on the host included).
//      Tensor parallelism needs no transform: its collectives are the trace's own communication
//      ops (the zoo builds one tensor-parallel rank's trace), scheduled by build_schedule. Data
//      parallelism reshapes the gradients' lifetime (ZeRO frees them after their reduction), so
//      it must come before step 2;
//   2. the framework's transforms (framework_transforms.hpp): the gradients' lifetime across
//      iterations (zero_grad), cuDNN's workspaces, then each task's dispatch cost on the host,
//      so that every task the earlier steps added has one, then a Python optimizer loop's
//      costs per parameter and the loop's host synchronisations, which set their own;
//   3. the collectives placed on the run's ranks (place_collectives): each collective's groups,
//      written within its layout group (Task::over), as groups of the whole run.
//
// models/transforms/ holds them all (models/transforms/README.md).

#include <cstdint>
#include <optional>
#include <vector>

#include "comptrain/models/data_parallel.hpp"
#include "comptrain/models/framework_transforms.hpp"
#include "comptrain/models/parallel_layout.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::models {

// What each step of transform_schedule is given: plain values a scenario and the framework
// resolved against its platform hold (sim's Scenario and FrameworkOnGpu).
struct TransformSteps {
  int accumulation_steps = 1;                    // micro-steps per optimizer step; 1: unchanged
  std::optional<DataParallelSpec> data_parallel;  // a scenario's parallelism: section; none: one GPU
  // The platform data parallelism steps an offloaded optimizer on (its host); null: the
  // overload without one, which refuses an offloaded optimizer.
  const Platform* platform = nullptr;
  ZeroGrad zero_grad = ZeroGrad::set_to_none;
  std::int64_t cudnn_workspace_bytes = 0;  // per convolution while it runs; 0: none
  OpDispatch dispatch;                     // the host's per-task launch costs
  std::optional<CompileScope> compile;     // torch.compile's regions (framework.compile); unset: eager
  double launch_overhead = 0;              // the GPU's gap per kernel launch (gpu.launch_overhead)
  // The optimizer step as a Python loop of this many eager ops per parameter (framework.
  // optimizer_ops_per_parameter; apply_optimizer_loop); 0: the trace's ops as they are.
  double optimizer_ops_per_parameter = 0;
  std::vector<HostSync> host_syncs;        // framework.host_syncs (add_host_syncs)
  // The model-parallel layout and the run's GPUs, for place_collectives; unset: data parallelism
  // over every rank (the groups are left as the transforms wrote them).
  std::optional<ParallelLayout> layout;
  int gpus = 1;
};

// Maps each collective task's groups from its layout group (Task::over) onto the run's `gpus`
// ranks: a collective over the whole group runs over rank_groups(layout, gpus, over); one over
// sub-groups {size, stride} of it (HSDP's shard and replicate groups, ZeRO++'s hpZ groups) over
// {size, stride x the group's stride}. std::invalid_argument when a sub-group does not fit in
// its group.
void place_collectives(Schedule& schedule, const ParallelLayout& layout, int gpus);

// `schedule` (build_schedule's, for `trace`) through every transform, in the order above.
Schedule transform_schedule(Schedule schedule, const traces::Trace& trace, const TransformSteps& steps);

}  // namespace comptrain::models

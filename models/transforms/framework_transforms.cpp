// The framework's schedule transforms (framework_transforms.hpp). Moved from sim/src/framework.cpp
// unchanged.

#include "comptrain/models/framework_transforms.hpp"

#include "schedule_edit.hpp"

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace comptrain::models {

void apply_gradient_lifetime(Schedule& schedule, ZeroGrad zero_grad) {
  if (zero_grad == ZeroGrad::set_to_none) return;
  std::vector<bool> persistent(schedule.buffers.size(), false);
  for (BufferId b = 0; b < schedule.buffers.size(); ++b) {
    Buffer& buffer = schedule.buffers[b];
    if (buffer.role != MemoryRole::gradient || !buffer.held_to_end) continue;
    buffer.resident = true;
    buffer.held_to_end = false;
    persistent[b] = true;
  }
  // A resident buffer is never created: its creators become users (they write into the
  // gradient that already exists, as autograd accumulates into a .grad that is not None).
  for (Task& task : schedule.tasks) {
    for (auto it = task.creates.begin(); it != task.creates.end();) {
      if (!persistent[*it]) {
        ++it;
        continue;
      }
      if (std::find(task.uses.begin(), task.uses.end(), *it) == task.uses.end()) task.uses.push_back(*it);
      it = task.creates.erase(it);
    }
  }
}

void assign_dispatch_costs(Schedule& schedule, const traces::Trace& trace, const OpDispatch& dispatch,
                           const std::optional<CompileScope>& compile) {
  const std::optional<KernelFusion> fusion = compile ? std::optional<KernelFusion>(fuse_like_inductor(trace, *compile)) : std::nullopt;
  for (Task& task : schedule.tasks) {
    if (!task.op) {
      task.host_seconds = dispatch.backward;
      continue;
    }
    if (fusion && (task.kind == TaskKind::op || task.kind == TaskKind::recompute) && !fusion->ops[*task.op].launches) {
      task.host_seconds = 0;
      continue;
    }
    switch (trace.op(*task.op).phase) {
      case traces::Phase::forward: task.host_seconds = dispatch.forward; break;
      case traces::Phase::backward: task.host_seconds = dispatch.backward; break;
      case traces::Phase::optimizer: task.host_seconds = dispatch.optimizer; break;
    }
  }
}

namespace {

bool is_optimizer_op(const Task& task, const traces::Trace& trace) {
  return (task.kind == TaskKind::op || task.kind == TaskKind::recompute) && task.op &&
         trace.op(*task.op).phase == traces::Phase::optimizer;
}

}  // namespace

void add_host_syncs(Schedule& schedule, const traces::Trace& trace, const std::vector<HostSync>& syncs, double host_seconds) {
  if (syncs.empty()) return;
  std::optional<TaskId> step_begin;
  for (TaskId t = 0; t < schedule.tasks.size() && !step_begin; ++t) {
    const Task& task = schedule.tasks[t];
    if (task.kind == TaskKind::host_compute || is_optimizer_op(task, trace)) step_begin = t;
  }
  if (!step_begin) return;
  // The GPU has run everything issued before the sync: the last task issued on each stream
  // (a stream runs its tasks in order). The host stream's own tasks are not the GPU's.
  std::array<std::optional<TaskId>, kStreamCount> last_on_stream{};
  for (TaskId t = 0; t < *step_begin; ++t) last_on_stream[static_cast<std::size_t>(schedule.tasks[t].stream)] = t;
  transform_detail::ScheduleEdit edit(schedule);
  for (const HostSync sync : syncs) {
    switch (sync) {
      case HostSync::backward_end: {
        Task task;
        task.name = "host sync (backward end)";
        task.kind = TaskKind::host_compute;
        task.stream = Stream::host;
        task.host_seconds = host_seconds;
        task.blocks_host = true;
        for (std::size_t s = 0; s < kStreamCount; ++s) {
          if (static_cast<Stream>(s) != Stream::host && last_on_stream[s]) task.after.push_back(*last_on_stream[s]);
        }
        edit.add_task(std::move(task), *step_begin);
        break;
      }
    }
  }
  edit.assemble();
}

void apply_host_sync_ops(Schedule& schedule, const traces::Trace& trace) {
  for (Task& task : schedule.tasks) {
    if ((task.kind == TaskKind::op || task.kind == TaskKind::recompute) && task.op && trace.op(*task.op).host_sync) task.blocks_host = true;
  }
}

void apply_optimizer_loop(Schedule& schedule, const traces::Trace& trace, double ops_per_parameter, const OpDispatch& dispatch,
                          double launch_overhead) {
  if (ops_per_parameter <= 0) return;
  for (Task& task : schedule.tasks) {
    if (!is_optimizer_op(task, trace)) continue;
    task.host_seconds = ops_per_parameter * dispatch.forward;
    task.seconds += std::max(ops_per_parameter - 1, 0.0) * launch_overhead;
  }
}

void add_cudnn_workspaces(Schedule& schedule, const traces::Trace& trace, std::int64_t bytes) {
  if (bytes <= 0) return;
  for (Task& task : schedule.tasks) {
    if (!task.op || trace.op(*task.op).kind != traces::OpKind::conv) continue;
    Buffer workspace;
    workspace.name = task.name + " (cuDNN workspace)";
    workspace.bytes = bytes;
    workspace.role = MemoryRole::temporary;
    schedule.buffers.push_back(std::move(workspace));
    task.creates.push_back(schedule.buffers.size() - 1);
  }
}

}  // namespace comptrain::models

// The framework's schedule transforms (framework_transforms.hpp). Moved from sim/src/framework.cpp
// unchanged.

#include "comptrain/models/framework_transforms.hpp"

#include <algorithm>
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

void assign_dispatch_costs(Schedule& schedule, const traces::Trace& trace, const OpDispatch& dispatch) {
  for (Task& task : schedule.tasks) {
    if (!task.op) {
      task.host_seconds = dispatch.backward;
      continue;
    }
    switch (trace.op(*task.op).phase) {
      case traces::Phase::forward: task.host_seconds = dispatch.forward; break;
      case traces::Phase::backward: task.host_seconds = dispatch.backward; break;
      case traces::Phase::optimizer: task.host_seconds = dispatch.optimizer; break;
    }
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

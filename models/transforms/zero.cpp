// ZeRO's partitions (README.md, "ZeRO"): the optimizer state, the parameters and their
// all-gathers of stage 3, and the optimizer's kernels over one rank's partition. Part of data
// parallelism as a schedule transform (data_parallel_transform.hpp).

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "data_parallel_transform.hpp"

namespace comptrain::models::transform_detail {

using traces::Phase;

// The optimizer state becomes one resident partition of 1/ranks of its bytes.
void Transform::partition_optimizer_state() {
  std::vector<BufferId> members;
  for (BufferId b = 0; b < old_buffers_; ++b) {
    if (s_.buffers[b].role == MemoryRole::optimizer_state && s_.buffers[b].resident) members.push_back(b);
  }
  if (members.empty()) return;
  if (spec_.offload_optimizer) {
    // The fp32 state is the host's, but for Twin-Flow's GPU subgroups (DeepSpeed's fp32
    // master, exp_avg and exp_avg_sq of those subgroups stay on the GPU). The optimizer's tasks,
    // the only readers, are replaced by the step on the host (step_on_the_host).
    for (BufferId b : members) s_.buffers[b].resident = false;
    if (resident_elements_ > 0) {
      add_buffer(partition_name("fp32 optimizer state of the subgroups stepped on the GPU"), kFp32AdamStateBytesPerParameter * resident_elements_,
                 MemoryRole::optimizer_state);
    }
    return;
  }
  const BufferId part = add_buffer(partition_name("optimizer state partition"), ceil_div(sum_bytes(members), spec_.ranks), MemoryRole::optimizer_state);
  for (BufferId b : members) {
    substitute_[b] = part;
    s_.buffers[b].resident = false;  // no longer referenced: never allocated
  }
}

// ZeRO-3: the parameters become one resident partition; the passes read gathered copies
// (gather_parameters), the optimizer the partition.
void Transform::partition_parameters() {
  if (weights_.empty()) return;
  parameter_partition_ = add_buffer(partition_name("parameter partition"), ceil_div(sum_bytes(weights_), spec_.ranks), MemoryRole::weight);
  for (BufferId w : weights_) {
    substitute_[w] = *parameter_partition_;
    optimizer_substitute_[w] = *parameter_partition_;
    s_.buffers[w].resident = false;
  }
}

// The step's kernels run over this rank's partition: 1/ranks of the elements, so of the time
// and of the temporaries they make.
void Transform::shard_optimizer_tasks() {
  for (TaskId t = 0; t < n_; ++t) {
    Task& task = s_.tasks[t];
    if (!task.op || pass_of(task, trace_) != Phase::optimizer) continue;
    task.seconds /= shard_ranks();
    for (BufferId b : task.creates) {
      Buffer& buffer = s_.buffers[b];
      if (!buffer.resident && buffer.role == MemoryRole::temporary) buffer.bytes = ceil_div(buffer.bytes, shard_ranks());
    }
  }
}

// ZeRO-3: each pass all-gathers an op's parameters before the op, into buffers that live
// until the pass's last use of them. The gather of the k-th group waits for the end of the
// first op of group k-2, so one group is fetched while the previous one computes (DeepSpeed
// prefetches the modules about to run; one op of look-ahead is this model's simplification).
void Transform::gather_parameters() {
  if (!parameter_partition_) return;
  std::vector<bool> is_weight(old_buffers_, false);
  for (BufferId w : weights_) is_weight[w] = true;
  struct Group {
    TaskId first_user = 0;
    std::vector<BufferId> buffers;
    std::int64_t bytes = 0;
    Phase pass = Phase::forward;
  };
  std::vector<Group> groups;
  for (TaskId t = 0; t < n_; ++t) {
    const Task& task = s_.tasks[t];
    const Phase pass = pass_of(task, trace_);
    if (!task.op || pass == Phase::optimizer) continue;
    Group group;
    group.first_user = t;
    group.pass = pass;
    for (BufferId b : task.uses) {
      if (b >= old_buffers_ || !is_weight[b]) continue;
      const auto key = std::make_pair(static_cast<int>(pass), b);
      if (gathered_.count(key) != 0) continue;
      Buffer full = s_.buffers[b];
      full.name += pass == Phase::forward ? " (gathered for forward)" : " (gathered for backward)";
      full.resident = false;
      full.held_to_end = false;
      group.bytes += full.bytes;
      s_.buffers.push_back(std::move(full));
      gathered_[key] = s_.buffers.size() - 1;
      group.buffers.push_back(s_.buffers.size() - 1);
    }
    if (!group.buffers.empty()) groups.push_back(std::move(group));
  }
  for (std::size_t k = 0; k < groups.size(); ++k) {
    const Group& group = groups[k];
    Task c;
    c.kind = TaskKind::collective;
    c.stream = Stream::comm;
    c.collective = CollectiveKind::all_gather;
    c.bytes = group.bytes;
    c.creates = group.buffers;
    c.uses = {*parameter_partition_};
    TaskId before = 0;
    if (k >= 2) {
      c.after = {groups[k - 2].first_user};
      before = groups[k - 2].first_user + 1;
    }
    c.name = task_name(group.pass == Phase::forward ? "all-gather of parameters for forward" : "all-gather of parameters for backward", k,
                       group.bytes);
    extra_after_[group.first_user].push_back(add_task(std::move(c), before));
  }
}

}  // namespace comptrain::models::transform_detail

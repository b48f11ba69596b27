#pragma once
// Internal to models/transforms: the editing core of a schedule transform. A transform reads the
// old schedule's tasks by index, adds buffers and tasks (each inserted just before an old task),
// leaves old tasks out, adds waits to old tasks, and then `assemble` writes the new task list
// with every wait renumbered. Data parallelism (data_parallel_transform.hpp) is built on it; so
// will the tensor- and pipeline-parallel transforms be (models/transforms/README.md).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comptrain/models/schedule.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::models::transform_detail {

// Which pass a task belongs to, for the parameters it needs: a replayed forward op runs in the
// backward pass; copies and codec kernels touch no parameter (their phase does not matter).
traces::Phase pass_of(const Task& task, const traces::Trace& trace);

// Replaces every reference to a buffer by `resolve(b)`, keeping each buffer once per list. A
// resident replacement is never created: a creation becomes a use.
template <typename Resolve>
void redirect(Task& task, Resolve resolve, const std::vector<Buffer>& buffers) {
  std::vector<BufferId> creates;
  std::vector<BufferId> uses;
  for (BufferId b : task.creates) {
    const BufferId r = resolve(b);
    (buffers[r].resident ? uses : creates).push_back(r);
  }
  for (BufferId b : task.uses) uses.push_back(resolve(b));
  auto unique = [](std::vector<BufferId>& v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  };
  unique(creates);
  unique(uses);
  uses.erase(std::remove_if(uses.begin(), uses.end(), [&](BufferId b) { return std::binary_search(creates.begin(), creates.end(), b); }),
             uses.end());
  task.creates = std::move(creates);
  task.uses = std::move(uses);
}

// A task to insert, referring to old tasks by index (< n) and to other added tasks by n + index.
struct Added {
  Task task;
  TaskId before = 0;  // inserted just before old task `before` (n: at the end)
};

class ScheduleEdit {
 public:
  explicit ScheduleEdit(Schedule& schedule);

  // A buffer appended to the schedule (resident: from set-up to the end, else by its users).
  BufferId add_buffer(std::string name, std::int64_t bytes, MemoryRole role, bool resident = true);
  // A task inserted just before old task `before` (n_: at the end); its id is n_ + its index
  // among the added tasks, which other added tasks' and old tasks' waits may name.
  TaskId add_task(Task task, TaskId before);
  // Writes the new task list: added tasks just before the old task they precede, removed tasks
  // left out, every wait renumbered (extra_after_ added to old tasks' waits). Once, at the end.
  void assemble();
  // After assemble: the position in the new task list of old task `id` (< n_) or of added task
  // n_ + index; none for a removed old task.
  std::optional<TaskId> new_position(TaskId id) const;

 protected:
  // Per removed old task, the kept tasks it waited for, through other removed tasks.
  std::vector<std::vector<TaskId>> waits_through_removed() const;

  static constexpr TaskId kNone = static_cast<TaskId>(-1);

  Schedule& s_;
  const std::size_t n_;            // old tasks
  const std::size_t old_buffers_;  // old buffers
  std::vector<bool> removed_;      // old tasks left out (the optimizer's, under offload)
  std::vector<Added> added_;
  std::map<TaskId, std::vector<TaskId>> extra_after_;  // old task -> waits to add (old ids or n + added index)
  std::vector<TaskId> new_id_;  // after assemble: old id or n + added index -> position (kNone: removed)
};

}  // namespace comptrain::models::transform_detail

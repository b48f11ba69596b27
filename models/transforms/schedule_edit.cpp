// The editing core of a schedule transform (schedule_edit.hpp). Moved out of data_parallel.cpp
// unchanged.

#include "schedule_edit.hpp"

#include <algorithm>
#include <array>
#include <optional>

namespace comptrain::models::transform_detail {

using traces::Phase;

Phase pass_of(const Task& task, const traces::Trace& trace) {
  if (task.kind == TaskKind::recompute) return Phase::backward;
  if (task.op) return trace.op(*task.op).phase;
  return Phase::backward;
}

ScheduleEdit::ScheduleEdit(Schedule& schedule)
    : s_(schedule), n_(schedule.tasks.size()), old_buffers_(schedule.buffers.size()), removed_(schedule.tasks.size(), false) {}

BufferId ScheduleEdit::add_buffer(std::string name, std::int64_t bytes, MemoryRole role, bool resident) {
  Buffer b;
  b.name = std::move(name);
  b.bytes = bytes;
  b.role = role;
  b.resident = resident;
  s_.buffers.push_back(std::move(b));
  return s_.buffers.size() - 1;
}

TaskId ScheduleEdit::add_task(Task task, TaskId before) {
  added_.push_back({std::move(task), before});
  return n_ + added_.size() - 1;
}

// The new task list: added tasks just before the old task they precede, removed tasks left
// out, every wait renumbered. A wait for a removed task becomes a wait for what it waited for.
void ScheduleEdit::assemble() {
  std::vector<std::vector<std::size_t>> before(n_ + 1);
  for (std::size_t i = 0; i < added_.size(); ++i) before[added_[i].before].push_back(i);
  std::vector<TaskId> order;  // old ids and n + added index, in the new order
  order.reserve(n_ + added_.size());
  for (TaskId t = 0; t <= n_; ++t) {
    for (std::size_t i : before[t]) order.push_back(n_ + i);
    if (t < n_ && !removed_[t]) order.push_back(t);
  }
  std::vector<TaskId>& new_id = new_id_;
  new_id.assign(n_ + added_.size(), kNone);
  for (TaskId pos = 0; pos < order.size(); ++pos) new_id[order[pos]] = pos;
  const std::vector<std::vector<TaskId>> through = waits_through_removed();
  std::vector<Task> tasks;
  tasks.reserve(order.size());
  for (TaskId id : order) {
    Task task = id < n_ ? std::move(s_.tasks[id]) : std::move(added_[id - n_].task);
    if (auto it = extra_after_.find(id); id < n_ && it != extra_after_.end()) {
      task.after.insert(task.after.end(), it->second.begin(), it->second.end());
    }
    std::vector<TaskId> after;
    for (TaskId a : task.after) {
      if (a < n_ && removed_[a]) {
        after.insert(after.end(), through[a].begin(), through[a].end());
      } else {
        after.push_back(a);
      }
    }
    for (TaskId& a : after) a = new_id[a];
    std::sort(after.begin(), after.end());
    after.erase(std::unique(after.begin(), after.end()), after.end());
    task.after = std::move(after);
    tasks.push_back(std::move(task));
  }
  s_.tasks = std::move(tasks);
}

std::optional<TaskId> ScheduleEdit::new_position(TaskId id) const {
  if (id >= new_id_.size() || new_id_[id] == kNone) return std::nullopt;
  return new_id_[id];
}

// Per removed old task, the kept tasks (old ids or n + added index) it waited for: its `after`
// waits, the extra ones and its stream predecessor, through other removed tasks.
std::vector<std::vector<TaskId>> ScheduleEdit::waits_through_removed() const {
  std::vector<std::vector<TaskId>> direct(n_);
  std::array<std::optional<TaskId>, kStreamCount> previous{};
  for (TaskId t = 0; t < n_; ++t) {
    const auto stream = static_cast<std::size_t>(s_.tasks[t].stream);
    const std::optional<TaskId> predecessor = previous[stream];
    previous[stream] = t;
    if (!removed_[t]) continue;
    direct[t] = s_.tasks[t].after;
    if (auto it = extra_after_.find(t); it != extra_after_.end()) direct[t].insert(direct[t].end(), it->second.begin(), it->second.end());
    if (predecessor) direct[t].push_back(*predecessor);
  }
  // The waits form a DAG (Schedule::validate), so the recursion ends.
  std::vector<std::vector<TaskId>> through(n_);
  std::vector<bool> done(n_, false);
  const auto resolve = [&](const auto& self, TaskId t) -> const std::vector<TaskId>& {
    if (done[t]) return through[t];
    std::vector<TaskId> out;
    for (TaskId w : direct[t]) {
      if (w < n_ && removed_[w]) {
        const auto& more = self(self, w);
        out.insert(out.end(), more.begin(), more.end());
      } else {
        out.push_back(w);
      }
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    through[t] = std::move(out);
    done[t] = true;
    return through[t];
  };
  for (TaskId t = 0; t < n_; ++t) {
    if (removed_[t]) resolve(resolve, t);
  }
  return through;
}

}  // namespace comptrain::models::transform_detail

#pragma once
// GPU memory bookkeeping over simulated time. SimGrid hosts have no memory, so the replay
// tells this tracker about every allocation and free, at its simulated time. It counts the
// tensors' exact bytes; what PyTorch's allocator makes of the same stream, and whether it runs
// out of memory, is device_memory.hpp's business.

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "comptrain/models/schedule.hpp"

namespace comptrain::sim {

using BytesByMemoryRole = std::array<std::int64_t, models::kMemoryRoleCount>;

struct MemoryEvent {
  double time = 0;
  models::BufferId buffer = 0;
  std::int64_t delta = 0;  // + allocation, - free (0 for an empty buffer: see `allocation`)
  // The task whose start allocated the buffer, or whose end freed it; none for the resident
  // buffers allocated before the iteration.
  std::optional<models::TaskId> task;
  bool allocation = true;  // false: a free
};

class MemoryTracker {
 public:
  explicit MemoryTracker(const models::Schedule& schedule);

  // Resident buffers are allocated with `task` unset, before the iteration.
  void allocate(models::BufferId buffer, double time, std::optional<models::TaskId> task);
  void release(models::BufferId buffer, double time, models::TaskId task);

  std::int64_t in_use() const { return in_use_; }
  std::int64_t peak() const { return peak_; }
  double peak_time() const { return peak_time_; }
  const BytesByMemoryRole& peak_by_role() const { return peak_by_role_; }
  std::vector<models::BufferId> live_at_peak() const;  // sorted
  const std::vector<MemoryEvent>& events() const { return events_; }
  bool is_live(models::BufferId buffer) const { return live_[buffer]; }

 private:
  const models::Schedule& schedule_;
  std::int64_t in_use_ = 0;
  std::int64_t peak_ = 0;
  double peak_time_ = 0;
  BytesByMemoryRole by_role_{};
  BytesByMemoryRole peak_by_role_{};
  std::vector<bool> live_;
  std::size_t peak_event_ = 0;  // events_[0, peak_event_] make the peak's live set
  std::vector<MemoryEvent> events_;
};

}  // namespace comptrain::sim

#pragma once
// GPU memory bookkeeping over simulated time. SimGrid hosts have no memory, so the replay
// tells this tracker about every allocation and free, at its simulated time.

#include <array>
#include <cstdint>
#include <vector>

#include "comptrain/models/schedule.hpp"

namespace comptrain::sim {

using BytesByMemoryRole = std::array<std::int64_t, models::kMemoryRoleCount>;

struct MemoryEvent {
  double time = 0;
  models::BufferId buffer = 0;
  std::int64_t delta = 0;  // + allocation, - free
};

class MemoryTracker {
 public:
  MemoryTracker(const models::Schedule& schedule, std::int64_t capacity_bytes);

  // Allocates `buffer` at `time`. Returns false, changing nothing, when the GPU's capacity
  // would be exceeded.
  bool allocate(models::BufferId buffer, double time);
  void release(models::BufferId buffer, double time);

  std::int64_t capacity() const { return capacity_; }
  std::int64_t in_use() const { return in_use_; }
  std::int64_t peak() const { return peak_; }
  double peak_time() const { return peak_time_; }
  const BytesByMemoryRole& peak_by_role() const { return peak_by_role_; }
  std::vector<models::BufferId> live_at_peak() const;  // sorted
  const std::vector<MemoryEvent>& events() const { return events_; }
  bool is_live(models::BufferId buffer) const { return live_[buffer]; }

 private:
  const models::Schedule& schedule_;
  std::int64_t capacity_;
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

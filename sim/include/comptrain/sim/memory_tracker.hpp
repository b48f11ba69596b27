#pragma once
// GPU memory bookkeeping over simulated time. SimGrid hosts have no memory, so the replay
// tells this tracker about every allocation and free, at its simulated time.

#include <array>
#include <cstdint>
#include <vector>

#include "comptrain/models/schedule.hpp"
#include "comptrain/sim/caching_allocator.hpp"

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

  // The same allocation stream through the model of PyTorch's caching allocator
  // (caching_allocator.hpp): its peaks are what torch.cuda.max_memory_allocated (rounded blocks)
  // and max_memory_reserved (segments, cached blocks and fragmentation included) would report.
  // It observes only: out-of-memory is still decided on the exact bytes above (the
  // memory-fidelity work will decide it on the reserved figure), so it is given room beyond the
  // GPU's capacity and the report compares its reserved peak with the capacity.
  std::int64_t allocator_peak_allocated() const { return allocator_.peak_allocated(); }
  std::int64_t allocator_peak_reserved() const { return allocator_.peak_reserved(); }

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
  CachingAllocator allocator_;
};

}  // namespace comptrain::sim

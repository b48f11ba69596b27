#include "comptrain/sim/memory_tracker.hpp"

#include <stdexcept>
#include <string>

namespace comptrain::sim {

namespace {

// Room for the observing allocator model: far beyond any GPU, so that it never refuses (it
// observes; MemoryTracker decides out-of-memory), yet far from overflowing int64 arithmetic.
constexpr std::int64_t kObserverCapacity = std::int64_t{1} << 60;

}  // namespace

MemoryTracker::MemoryTracker(const models::Schedule& schedule, std::int64_t capacity_bytes)
    : schedule_(schedule),
      capacity_(capacity_bytes),
      live_(schedule.buffers.size(), false),
      allocator_(CachingAllocatorOptions{.capacity_bytes = kObserverCapacity, .expandable_segments = false}) {}

bool MemoryTracker::allocate(models::BufferId buffer, double time) {
  const models::Buffer& b = schedule_.buffers.at(buffer);
  if (live_[buffer]) throw std::logic_error("buffer '" + b.name + "' allocated twice");
  if (in_use_ + b.bytes > capacity_) return false;
  live_[buffer] = true;
  allocator_.allocate(buffer, b.bytes);
  in_use_ += b.bytes;
  by_role_[static_cast<std::size_t>(b.role)] += b.bytes;
  events_.push_back({time, buffer, b.bytes});
  if (in_use_ > peak_) {
    peak_ = in_use_;
    peak_time_ = time;
    peak_by_role_ = by_role_;
    peak_event_ = events_.size() - 1;  // the live set is rebuilt from the events on demand
  }
  return true;
}

std::vector<models::BufferId> MemoryTracker::live_at_peak() const {
  std::vector<bool> live(live_.size(), false);
  if (peak_ > 0) {
    for (std::size_t i = 0; i <= peak_event_; ++i) live[events_[i].buffer] = events_[i].delta > 0;
  }
  std::vector<models::BufferId> out;
  for (models::BufferId b = 0; b < live.size(); ++b) {
    if (live[b]) out.push_back(b);
  }
  return out;
}

void MemoryTracker::release(models::BufferId buffer, double time) {
  const models::Buffer& b = schedule_.buffers.at(buffer);
  if (!live_[buffer]) throw std::logic_error("buffer '" + b.name + "' freed while not allocated");
  live_[buffer] = false;
  allocator_.free(buffer);
  in_use_ -= b.bytes;
  by_role_[static_cast<std::size_t>(b.role)] -= b.bytes;
  events_.push_back({time, buffer, -b.bytes});
}

}  // namespace comptrain::sim

#include "comptrain/sim/memory_tracker.hpp"

#include <stdexcept>
#include <string>

namespace comptrain::sim {

MemoryTracker::MemoryTracker(const models::Schedule& schedule, std::int64_t capacity_bytes)
    : schedule_(schedule), capacity_(capacity_bytes), live_(schedule.buffers.size(), false) {}

bool MemoryTracker::allocate(models::BufferId buffer, double time) {
  const models::Buffer& b = schedule_.buffers.at(buffer);
  if (live_[buffer]) throw std::logic_error("buffer '" + b.name + "' allocated twice");
  if (in_use_ + b.bytes > capacity_) return false;
  live_[buffer] = true;
  in_use_ += b.bytes;
  by_role_[static_cast<std::size_t>(b.role)] += b.bytes;
  events_.push_back({time, buffer, b.bytes});
  if (in_use_ > peak_) {
    peak_ = in_use_;
    peak_time_ = time;
    peak_by_role_ = by_role_;
    live_at_peak_.clear();
    for (models::BufferId i = 0; i < live_.size(); ++i) {
      if (live_[i]) live_at_peak_.push_back(i);
    }
  }
  return true;
}

void MemoryTracker::release(models::BufferId buffer, double time) {
  const models::Buffer& b = schedule_.buffers.at(buffer);
  if (!live_[buffer]) throw std::logic_error("buffer '" + b.name + "' freed while not allocated");
  live_[buffer] = false;
  in_use_ -= b.bytes;
  by_role_[static_cast<std::size_t>(b.role)] -= b.bytes;
  events_.push_back({time, buffer, -b.bytes});
}

}  // namespace comptrain::sim

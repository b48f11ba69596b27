#include "comptrain/sim/memory/memory_tracker.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace comptrain::sim {

MemoryTracker::MemoryTracker(const models::Schedule& schedule) : schedule_(schedule), live_(schedule.buffers.size(), false) {}

void MemoryTracker::allocate(models::BufferId buffer, double time, std::optional<models::TaskId> task) {
  const models::Buffer& b = schedule_.buffers.at(buffer);
  if (live_[buffer]) throw std::logic_error("buffer '" + b.name + "' allocated twice");
  live_[buffer] = true;
  in_use_ += b.bytes;
  by_role_[static_cast<std::size_t>(b.role)] += b.bytes;
  events_.push_back({time, buffer, b.bytes, task, true});
  if (in_use_ > peak_) {
    peak_ = in_use_;
    peak_time_ = time;
    peak_by_role_ = by_role_;
    peak_event_ = events_.size() - 1;  // the live set is rebuilt from the events on demand
  }
}

std::vector<models::BufferId> MemoryTracker::live_at_peak() const {
  std::vector<bool> live(live_.size(), false);
  if (peak_ > 0) {
    for (std::size_t i = 0; i <= peak_event_; ++i) live[events_[i].buffer] = events_[i].allocation;
  }
  std::vector<models::BufferId> out;
  for (models::BufferId b = 0; b < live.size(); ++b) {
    if (live[b]) out.push_back(b);
  }
  return out;
}

void MemoryTracker::release(models::BufferId buffer, double time, models::TaskId task) {
  const models::Buffer& b = schedule_.buffers.at(buffer);
  if (!live_[buffer]) throw std::logic_error("buffer '" + b.name + "' freed while not allocated");
  live_[buffer] = false;
  in_use_ -= b.bytes;
  by_role_[static_cast<std::size_t>(b.role)] -= b.bytes;
  events_.push_back({time, buffer, -b.bytes, task, false});
}

}  // namespace comptrain::sim

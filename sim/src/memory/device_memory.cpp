#include "comptrain/sim/memory/device_memory.hpp"

#include <algorithm>
#include <limits>

#include "comptrain/sim/memory/caching_allocator.hpp"

namespace comptrain::sim {
namespace {

using models::BufferId;
using models::MemoryRole;

// Buffers that a real process creates during its first iteration rather than before it.
bool created_lazily(const models::Buffer& buffer) {
  return buffer.resident && (buffer.role == MemoryRole::optimizer_state || buffer.role == MemoryRole::gradient);
}

class Feed {
 public:
  Feed(const models::Schedule& schedule, const FrameworkOnGpu& framework)
      : workspace_id_(schedule.buffers.size()),
        allocator_(CachingAllocatorOptions{.capacity_bytes = framework.usable_bytes(), .expandable_segments = framework.expandable_segments}) {
    out_.framework = framework;
  }

  // False (and out_.out_of_memory set) when PyTorch would run out of memory here.
  bool allocate(CachingAllocator::RequestId id, std::int64_t bytes, int iteration, std::optional<std::size_t> event, double time,
                models::AllocationStream stream = models::AllocationStream::current) {
    if (allocator_.allocate(id, bytes, static_cast<CachingAllocator::StreamId>(stream))) return true;
    const std::int64_t rounded = CachingAllocator::round_size(bytes);
    DeviceOutOfMemory oom;
    oom.iteration = iteration;
    if (id != workspace_id_) oom.buffer = id;
    oom.event = event;
    oom.time = time;
    oom.requested = out_.framework.expandable_segments ? rounded : CachingAllocator::allocation_size(rounded);
    oom.reserved = allocator_.reserved();
    oom.usable = allocator_.capacity();
    out_.out_of_memory = oom;
    return false;
  }

  void free(CachingAllocator::RequestId id) { allocator_.free(id); }
  bool is_live(CachingAllocator::RequestId id) const { return allocator_.is_live(id); }
  CachingAllocator::RequestId workspace_id() const { return workspace_id_; }

  void start_steady_iteration() {
    out_.peak_allocated = allocator_.peak_allocated();
    out_.peak_reserved = allocator_.peak_reserved();
    allocator_.reset_peaks();
  }

  DeviceMemory finish() {
    out_.steady_peak_allocated = allocator_.peak_allocated();
    out_.steady_peak_reserved = allocator_.peak_reserved();
    out_.peak_allocated = std::max(out_.peak_allocated, out_.steady_peak_allocated);
    out_.peak_reserved = std::max(out_.peak_reserved, out_.steady_peak_reserved);
    out_.alloc_retries = allocator_.num_alloc_retries();
    return std::move(out_);
  }

 private:
  CachingAllocator::RequestId workspace_id_;
  CachingAllocator allocator_;
  DeviceMemory out_;
};

}  // namespace

DeviceMemory model_device_memory(const models::Schedule& schedule, const std::vector<MemoryEvent>& events, const std::vector<TaskTiming>& tasks,
                                 const FrameworkOnGpu& framework) {
  Feed feed(schedule, framework);
  const auto& buffers = schedule.buffers;

  // 1. Set-up: weights, buffers, inputs.
  for (BufferId b = 0; b < buffers.size(); ++b) {
    if (!buffers[b].resident || created_lazily(buffers[b])) continue;
    if (!feed.allocate(b, buffers[b].bytes, 0, std::nullopt, 0.0, buffers[b].allocation_stream)) return feed.finish();
  }

  // When each lazily created buffer is first needed: the start of the first task using it.
  struct Lazy {
    double time = 0;
    BufferId buffer = 0;
  };
  std::vector<Lazy> lazy;
  {
    constexpr double kNever = std::numeric_limits<double>::infinity();
    std::vector<double> first(buffers.size(), kNever);
    for (models::TaskId t = 0; t < schedule.tasks.size() && t < tasks.size(); ++t) {
      const models::Task& task = schedule.tasks[t];
      for (const auto* list : {&task.creates, &task.uses}) {
        for (BufferId b : *list) first[b] = std::min(first[b], tasks[t].start);
      }
    }
    for (BufferId b = 0; b < buffers.size(); ++b) {
      if (created_lazily(buffers[b])) lazy.push_back({first[b], b});
    }
    std::stable_sort(lazy.begin(), lazy.end(), [](const Lazy& a, const Lazy& b) { return a.time < b.time; });
  }

  // 2. The first iteration. A lazy buffer is allocated before the first allocation at or after
  // its time: after the frees of tasks that ended by then, before the creations of the task
  // that needs it.
  std::size_t next_lazy = 0;
  bool workspace = false;
  const auto allocate_lazy_until = [&](double time) {
    for (; next_lazy < lazy.size() && lazy[next_lazy].time <= time; ++next_lazy) {
      const BufferId b = lazy[next_lazy].buffer;
      if (!feed.allocate(b, buffers[b].bytes, 1, std::nullopt, lazy[next_lazy].time, buffers[b].allocation_stream)) return false;
    }
    return true;
  };
  for (std::size_t i = 0; i < events.size(); ++i) {
    const MemoryEvent& e = events[i];
    if (!e.task) continue;  // a resident buffer: allocated at set-up or lazily
    if (!e.allocation) {
      feed.free(e.buffer);
      continue;
    }
    if (!workspace) {
      workspace = true;
      if (framework.cublas_workspace_bytes > 0 &&
          !feed.allocate(feed.workspace_id(), framework.cublas_workspace_bytes, 1, std::nullopt, e.time)) {
        return feed.finish();
      }
    }
    if (!allocate_lazy_until(e.time)) return feed.finish();
    if (!feed.allocate(e.buffer, buffers[e.buffer].bytes, 1, i, e.time, buffers[e.buffer].allocation_stream)) return feed.finish();
  }
  if (!allocate_lazy_until(std::numeric_limits<double>::infinity())) return feed.finish();

  // 3. zero_grad: what is not resident does not outlive the iteration.
  for (BufferId b = 0; b < buffers.size(); ++b) {
    if (!buffers[b].resident && feed.is_live(b)) feed.free(b);
  }

  // 4. The steady iteration.
  feed.start_steady_iteration();
  for (std::size_t i = 0; i < events.size(); ++i) {
    const MemoryEvent& e = events[i];
    if (!e.task) continue;  // resident: still allocated
    if (!e.allocation) {
      feed.free(e.buffer);
    } else if (!feed.allocate(e.buffer, buffers[e.buffer].bytes, 2, i, e.time, buffers[e.buffer].allocation_stream)) {
      return feed.finish();
    }
  }
  return feed.finish();
}

}  // namespace comptrain::sim

#pragma once
// Replays a schedule on a modeled GPU node with SimGrid (s4u): the GPU and the host are
// SimGrid hosts, the PCIe link a split-duplex SimGrid link, and each stream an actor.

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "comptrain/models/platform.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/sim/memory_tracker.hpp"

namespace comptrain::sim {

struct TaskTiming {
  double ready = 0;  // its stream was free and it started waiting for other streams
  double start = 0;  // its dependencies were met and it began
  double end = 0;
};

// The iteration did not fit: allocating `requested` bytes for `task` (or, with no task, the
// resident weights, buffers and optimizer state before the iteration) exceeded the capacity.
struct OutOfMemory {
  std::optional<models::TaskId> task;
  models::BufferId buffer = 0;
  std::int64_t requested = 0;
  std::int64_t in_use = 0;
  std::int64_t capacity = 0;
  double time = 0;
};

struct SimulationResult {
  std::optional<OutOfMemory> out_of_memory;
  double iteration_seconds = 0;   // when the last task ended
  std::int64_t peak_bytes = 0;
  // The model of PyTorch's caching allocator fed the same stream (MemoryTracker): its peaks of
  // max_memory_allocated and max_memory_reserved. No CUDA context or library workspaces yet.
  std::int64_t allocator_peak_allocated = 0;
  std::int64_t allocator_peak_reserved = 0;
  double peak_time = 0;
  BytesByMemoryRole peak_by_role{};
  std::vector<models::BufferId> live_at_peak;
  std::array<double, 6> seconds_by_task_kind{};  // summed task durations, indexed by TaskKind
  double compute_stall_seconds = 0;  // the compute stream waiting for other streams
  std::vector<TaskTiming> tasks;     // indexed by TaskId (zeros for tasks that never ran)
  std::vector<MemoryEvent> memory_events;

  bool fits() const { return !out_of_memory.has_value(); }
};

// Runs one simulation in a child process (SimGrid's engine cannot be reset within a process,
// so every call gets a fresh one; sim/workers.hpp) and returns its result. Throws
// std::runtime_error if the child fails: the replay stopped with tasks not run (a deadlock) or
// at a non-finite time, or the child died (its signal and the end of its stderr are in the
// message). What the child wrote to stderr otherwise is passed on to ours. The schedule must be
// valid (Schedule::validate).
SimulationResult simulate(const models::Platform& platform, const models::Schedule& schedule);

// The same in this process: usable once per process (a benchmark child, a worker).
SimulationResult simulate_in_this_process(const models::Platform& platform, const models::Schedule& schedule);

}  // namespace comptrain::sim

#pragma once
// Replays a schedule with SimGrid (s4u) on a modeled GPU, node or cluster: the GPUs and hosts
// are SimGrid hosts, PCIe, NVLink and the network SimGrid links (sim/src/cluster_network.hpp),
// and each stream an actor. On more than one GPU the schedule is one data-parallel rank's and its
// collectives run over every GPU of the cluster shape.

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "comptrain/models/platform.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/sim/core/task_timing.hpp"
#include "comptrain/sim/engine/collectives.hpp"
#include "comptrain/sim/memory/device_memory.hpp"
#include "comptrain/sim/engine/energy.hpp"
#include "comptrain/sim/config/framework.hpp"
#include "comptrain/sim/memory/memory_tracker.hpp"
#include "comptrain/sim/runtime/wire.hpp"

namespace comptrain::sim {

// The iteration did not fit: PyTorch's caching allocator (model) could not reserve the
// `requested` bytes of a new segment for `task`'s buffer with `in_use` bytes reserved of the
// `capacity` it may use (the GPU's visible memory less the CUDA context). With no task, it was
// the set-up (weights, buffers, inputs) before the first iteration.
struct OutOfMemory {
  int iteration = 2;  // 0 set-up, 1 the first iteration, 2 the steady one (device_memory.hpp)
  std::optional<models::TaskId> task;
  std::optional<models::BufferId> buffer;  // none: the cuBLAS workspace
  std::int64_t requested = 0;
  std::int64_t in_use = 0;
  std::int64_t capacity = 0;
  double time = 0;
};

struct SimulationResult {
  std::optional<OutOfMemory> out_of_memory;
  double iteration_seconds = 0;   // when the last task ended
  std::int64_t peak_bytes = 0;      // the tensors' exact bytes, steady iteration (MemoryTracker)
  // What PyTorch would hold: the stream through the caching-allocator model, with set-up and
  // first iteration, the cuBLAS workspace and the CUDA context (device_memory.hpp).
  DeviceMemory device;
  double peak_time = 0;
  BytesByMemoryRole peak_by_role{};
  std::vector<models::BufferId> live_at_peak;
  std::array<double, models::kTaskKindCount> seconds_by_task_kind{};  // summed task durations, indexed by TaskKind
  double compute_stall_seconds = 0;  // the compute stream waiting for other streams
  // The compute stream idle because its next task was not launched yet: the iteration is
  // CPU-bound there (models::Task::host_seconds).
  double host_wait_seconds = 0;
  double host_seconds = 0;           // when the launching thread issued the last task
  std::vector<TaskTiming> tasks;     // indexed by TaskId (zeros for tasks that never ran)
  // The exact-byte stream; after an out-of-memory, up to the failing allocation.
  std::vector<MemoryEvent> memory_events;
  // The iteration's energy (sim/energy.hpp): none when the platform gives no power values or the
  // iteration does not fit.
  std::optional<EnergyResult> energy;

  bool fits() const { return !out_of_memory.has_value(); }
};

// How a result crosses from the replay's child process (runtime/wire.hpp).
template <>
struct wire::Codec<SimulationResult> {
  static constexpr std::string_view tag = "SimulationResult";
  static constexpr std::uint32_t version = 1;
  static void write(wire::Writer& w, const SimulationResult& result);
  static SimulationResult read(wire::Reader& in);
};

// Which ranks of a cluster shape the replay runs (every rank runs the same schedule):
//   symmetric   one rank's actors; the network carries every rank's share of the collectives and
//               every GPU of the node makes each host-link copy at once (the default: exact when
//               the ranks are symmetric, as data parallelism makes them, and as cheap as one GPU
//               plus the network's activities)
//   every_rank  one set of stream actors per rank, collectives synchronised across them (for
//               checking the symmetric replay; rank 0's timings and memory are reported)
enum class ReplayRanks { symmetric, every_rank };

// Runs one simulation in a child process (SimGrid's engine cannot be reset within a process,
// so every call gets a fresh one; sim/workers.hpp) and returns its result. Throws
// std::runtime_error if the child fails: the replay stopped with tasks not run (a deadlock) or
// at a non-finite time, or the child died (its signal and the end of its stderr are in the
// message). What the child wrote to stderr otherwise is passed on to ours. The schedule must be
// valid (Schedule::validate).
// The replay runs the whole iteration; the device-memory model then decides out-of-memory on the
// caching allocator's reserved bytes, and an iteration that does not fit is cut at the failing
// allocation (tasks that had not ended by then count as not run, as if PyTorch had raised).
// `framework` must have the gradient lifetime applied to `schedule` already
// (models::apply_gradient_lifetime; schedule_run in sim/run/run.hpp does it, through
// models::transform_schedule).
// `shape` is the part of the platform's cluster the run uses (one GPU by default); InputError when
// the platform does not have it (check_cluster_shape).
SimulationResult simulate(const models::Platform& platform, const models::Schedule& schedule, const FrameworkOnGpu& framework,
                          ClusterShape shape = {}, ReplayRanks ranks = ReplayRanks::symmetric);

// With the default framework (FrameworkSpec{}: PyTorch 2's defaults) on the platform's GPU.
SimulationResult simulate(const models::Platform& platform, const models::Schedule& schedule);

// The same in this process: usable once per process (a benchmark child, a worker).
SimulationResult simulate_in_this_process(const models::Platform& platform, const models::Schedule& schedule, const FrameworkOnGpu& framework,
                                          ClusterShape shape = {}, ReplayRanks ranks = ReplayRanks::symmetric);

}  // namespace comptrain::sim

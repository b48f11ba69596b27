#pragma once
// What PyTorch would hold on the GPU over a training run, and whether it runs out of memory:
// the replay's allocation stream fed, in PyTorch's order, through the caching-allocator model
// (caching_allocator.hpp).
//
// The replay simulates one steady-state iteration. A real process gets there through a set-up
// and a first iteration that leave the allocator's cache in a state the steady iteration
// inherits, so the stream is fed as a process would make it:
//   1. set-up: the weights, buffers and inputs (model.to("cuda")), in trace order;
//   2. the first iteration: the replay's allocations and frees, with the optimizer state (and,
//      under zero_grad: zeros, the gradients) allocated lazily just before the first task that
//      uses it, as torch.optim creates its state in the first step() and autograd the .grad
//      of a weight in the first backward; the cuBLAS workspace just before the first
//      allocation of the iteration;
//   3. zero_grad: what the iteration left allocated and the next one does not inherit (the
//      gradients, under set_to_none) is freed, in buffer order;
//   4. the steady iteration: the replay's stream again, with every resident buffer allocated.
// Peaks cover all of it, as torch.cuda.max_memory_allocated/reserved read after a few steps do.
// Out-of-memory is decided the way PyTorch decides it: a request that no cached block serves and
// whose new segment cannot be reserved within the usable memory (the GPU's visible memory less
// the CUDA context), even after the cache is released and the request retried. Each buffer is
// requested on its allocation stream (models::Buffer::allocation_stream), whose cached blocks
// alone can serve it.

#include <cstdint>
#include <optional>
#include <vector>

#include "comptrain/models/schedule.hpp"
#include "comptrain/sim/config/framework.hpp"
#include "comptrain/sim/core/task_timing.hpp"
#include "comptrain/sim/memory/memory_tracker.hpp"

namespace comptrain::sim {

// Where PyTorch would raise torch.OutOfMemoryError.
struct DeviceOutOfMemory {
  int iteration = 0;          // 0 set-up, 1 the first iteration, 2 the steady one
  // The failing allocation: a schedule buffer, or none for the cuBLAS workspace.
  std::optional<models::BufferId> buffer;
  // Its position in the replay's event list (the same in both iterations); unset for a
  // set-up or lazily created allocation.
  std::optional<std::size_t> event;
  double time = 0;            // in the replay's iteration
  std::int64_t requested = 0;  // the bytes the request needed reserved (a new segment's size)
  std::int64_t reserved = 0;   // reserved by the allocator after releasing its cache
  std::int64_t usable = 0;     // what it may reserve in all
};

struct DeviceMemory {
  FrameworkOnGpu framework;
  std::int64_t peak_allocated = 0;  // max_memory_allocated over set-up and both iterations
  std::int64_t peak_reserved = 0;   // max_memory_reserved over the same
  // The same two after reset_peak_memory_stats() at the start of the steady iteration.
  std::int64_t steady_peak_allocated = 0;
  std::int64_t steady_peak_reserved = 0;
  std::int64_t alloc_retries = 0;  // memory_stats()["num_alloc_retries"]: cache flushes to fit
  std::optional<DeviceOutOfMemory> out_of_memory;

  // What nvidia-smi would show as used at the end of the run: the context plus the reserved
  // segments (the allocator keeps what it reserved at its peak unless emptied).
  std::int64_t device_peak() const { return peak_reserved + framework.cuda_context_bytes; }
};

// Feeds the stream as above. `events` and `tasks` are the replay's (SimulationResult), for a
// schedule with the framework's gradient lifetime applied (models::apply_gradient_lifetime).
DeviceMemory model_device_memory(const models::Schedule& schedule, const std::vector<MemoryEvent>& events,
                                 const std::vector<TaskTiming>& tasks, const FrameworkOnGpu& framework);

}  // namespace comptrain::sim

#pragma once
// The peak of a run in the terms a limit or a measurement uses (config/scenario.hpp,
// MemoryMetric), written once for the planner, the hybrid plan and the validation table.

#include <cstdint>
#include <string>

#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/sim/engine/replay.hpp"

namespace comptrain::sim {

// A run's peaks, each as one MemoryMetric counts it.
struct MemoryPeaks {
  std::int64_t exact = 0;      // the tensors' bytes (MemoryTracker)
  std::int64_t allocated = 0;  // max_memory_allocated
  std::int64_t reserved = 0;   // max_memory_reserved
  std::int64_t device = 0;     // reserved + the CUDA context (nvidia-smi)
};
MemoryPeaks memory_peaks(const SimulationResult& result);

std::int64_t peak_in(MemoryMetric metric, const MemoryPeaks& peaks);

// What a run that ran out of memory would have needed at least: the bytes reserved when it
// failed plus the segment it could not reserve.
std::int64_t out_of_memory_peak(const OutOfMemory& out_of_memory);

// "needs 41.20 GiB reserved of 39.38 GiB usable": the out-of-memory peak against the capacity.
std::string describe_out_of_memory(const OutOfMemory& out_of_memory);

}  // namespace comptrain::sim

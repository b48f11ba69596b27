#include "comptrain/sim/metrics/memory_peak.hpp"

#include <fmt/format.h>

namespace comptrain::sim {

MemoryPeaks memory_peaks(const SimulationResult& result) {
  return {result.peak_bytes, result.device.peak_allocated, result.device.peak_reserved, result.device.device_peak()};
}

std::int64_t peak_in(MemoryMetric metric, const MemoryPeaks& peaks) {
  switch (metric) {
    case MemoryMetric::exact: return peaks.exact;
    case MemoryMetric::allocated: return peaks.allocated;
    case MemoryMetric::reserved: return peaks.reserved;
    case MemoryMetric::device: return peaks.device;
  }
  return peaks.reserved;
}

std::int64_t out_of_memory_peak(const OutOfMemory& out_of_memory) { return out_of_memory.in_use + out_of_memory.requested; }

std::string describe_out_of_memory(const OutOfMemory& out_of_memory) {
  return fmt::format("needs {:.2f} GiB reserved of {:.2f} GiB usable", static_cast<double>(out_of_memory_peak(out_of_memory)) / (1 << 30),
                     static_cast<double>(out_of_memory.capacity) / (1 << 30));
}

}  // namespace comptrain::sim

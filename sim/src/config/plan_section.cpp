#include "comptrain/sim/config/plan_section.hpp"

namespace comptrain::sim {

std::string_view to_string(MemoryMetric metric) {
  switch (metric) {
    case MemoryMetric::exact: return "exact";
    case MemoryMetric::allocated: return "allocated";
    case MemoryMetric::reserved: return "reserved";
    case MemoryMetric::device: return "device";
  }
  return "?";
}

std::optional<MemoryMetric> parse_memory_metric(std::string_view text) {
  for (MemoryMetric m : {MemoryMetric::exact, MemoryMetric::allocated, MemoryMetric::reserved, MemoryMetric::device}) {
    if (text == to_string(m)) return m;
  }
  return std::nullopt;
}

}  // namespace comptrain::sim

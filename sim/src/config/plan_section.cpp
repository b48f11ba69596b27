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

namespace {
constexpr ZeroPlusPlus kZeroPlusPlusSettings[] = {{false, false, false}, {true, false, false}, {false, true, false}, {false, false, true},
                                                  {true, true, false},   {true, false, true},  {false, true, true},  {true, true, true}};
}  // namespace

std::string_view to_string(ZeroPlusPlus setting) {
  if (setting.hpz && setting.qwz && setting.qgz) return "all";
  if (setting.hpz && setting.qwz) return "hpz+qwz";
  if (setting.hpz && setting.qgz) return "hpz+qgz";
  if (setting.qwz && setting.qgz) return "qwz+qgz";
  if (setting.hpz) return "hpz";
  if (setting.qwz) return "qwz";
  if (setting.qgz) return "qgz";
  return "none";
}

std::optional<ZeroPlusPlus> parse_zero_plus_plus(std::string_view name) {
  for (const ZeroPlusPlus setting : kZeroPlusPlusSettings) {
    if (name == to_string(setting)) return setting;
  }
  return std::nullopt;
}

ZeroPlusPlus zero_plus_plus_of(const models::DataParallelSpec& spec) {
  return {spec.hpz_partition_size > 1, spec.quantized_weights, spec.quantized_gradients};
}

}  // namespace comptrain::sim

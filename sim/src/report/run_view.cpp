#include "report/run_view.hpp"

namespace comptrain::sim::detail {

using nlohmann::ordered_json;

std::string role_name(MemoryRole role) { return std::string(models::to_string(role)); }

std::int64_t sum(const BytesByMemoryRole& bytes) {
  std::int64_t total = 0;
  for (std::int64_t b : bytes) total += b;
  return total;
}

ordered_json bytes_by_role_json(const BytesByMemoryRole& bytes) {
  ordered_json j = ordered_json::object();
  for (MemoryRole role : kMemoryRoles) j[role_name(role)] = bytes[index_of(role)];
  return j;
}

std::vector<BytesByMemoryRole> live_after_each_event(const SimulationRun& run) {
  std::vector<BytesByMemoryRole> rows;
  rows.reserve(run.result.memory_events.size());
  BytesByMemoryRole live{};
  for (const MemoryEvent& e : run.result.memory_events) {
    live[index_of(run.schedule.buffers.at(e.buffer).role)] += e.delta;
    rows.push_back(live);
  }
  return rows;
}

}  // namespace comptrain::sim::detail

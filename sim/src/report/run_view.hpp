#pragma once
// What the simulate report (simulate_report.cpp) and the timelines (simulation_timeline.cpp) both
// read off a run: roles and streams in report order, bytes per role, the live bytes after each
// memory event. Private to the report room.

#include <nlohmann/json.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "comptrain/sim/report/simulate_report.hpp"

namespace comptrain::sim::detail {

using models::MemoryRole;
using models::Stream;

inline constexpr std::array<MemoryRole, models::kMemoryRoleCount> kMemoryRoles{
    MemoryRole::input,      MemoryRole::weight,     MemoryRole::weight_copy, MemoryRole::buffer, MemoryRole::gradient, MemoryRole::optimizer_state,
    MemoryRole::activation, MemoryRole::compressed, MemoryRole::prefetch, MemoryRole::temporary,
};
inline constexpr std::array<Stream, models::kStreamCount> kStreams{Stream::compute, Stream::d2h, Stream::h2d, Stream::codec, Stream::comm, Stream::host, Stream::p2p, Stream::context, Stream::tensor};

constexpr std::size_t index_of(models::MemoryRole role) { return static_cast<std::size_t>(role); }
constexpr std::size_t index_of(models::TaskKind kind) { return static_cast<std::size_t>(kind); }
constexpr std::size_t index_of(models::Stream stream) { return static_cast<std::size_t>(stream); }

std::string role_name(models::MemoryRole role);
std::int64_t sum(const BytesByMemoryRole& bytes);
nlohmann::ordered_json bytes_by_role_json(const BytesByMemoryRole& bytes);
// Bytes live per role after each memory event, replayed from the events (the tracker keeps
// only the peak's breakdown).
std::vector<BytesByMemoryRole> live_after_each_event(const SimulationRun& run);

}  // namespace comptrain::sim::detail

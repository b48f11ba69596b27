#pragma once
// Hand-built schedules for the simulator's tests, on the test platform.

#include <cstdint>
#include <string>
#include <vector>

#include "comptrain/models/platform.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/sim/config/framework.hpp"
#include "common/test_platform.hpp"

namespace comptrain::sim::testing {

// The test platform (common/test_platform.hpp) with `memory` bytes: a 10 GB/s (per direction),
// 1 us PCIe link.
inline models::Platform test_platform(std::int64_t memory = 1'000'000'000) { return test_support::test_platform({.memory = memory}); }

// PyTorch's allocator on `visible` bytes with no CUDA context and no cuBLAS workspace, so that
// hand-computed cases see only their own buffers.
inline FrameworkOnGpu bare_framework(std::int64_t visible = 1'000'000'000, ZeroGrad zero_grad = ZeroGrad::set_to_none) {
  FrameworkOnGpu f;
  f.zero_grad = zero_grad;
  f.visible_bytes = visible;
  return f;
}

struct ScheduleBuilder {
  models::Schedule s;

  models::BufferId buffer(const std::string& name, std::int64_t bytes, models::MemoryRole role = models::MemoryRole::temporary,
                          bool resident = false, bool held_to_end = false) {
    models::Buffer b;
    b.name = name;
    b.bytes = bytes;
    b.role = role;
    b.resident = resident;
    b.held_to_end = held_to_end;
    s.buffers.push_back(b);
    return s.buffers.size() - 1;
  }

  // Op and recompute tasks get a stand-in trace op (their own index) unless a test sets one.
  models::TaskId task(const std::string& name, models::TaskKind kind, models::Stream stream, double seconds,
                      std::vector<models::BufferId> creates, std::vector<models::BufferId> uses,
                      std::vector<models::TaskId> after = {}, std::int64_t bytes = 0) {
    models::Task t;
    t.name = name;
    t.kind = kind;
    t.stream = stream;
    t.seconds = seconds;
    t.bytes = bytes;
    t.creates = std::move(creates);
    t.uses = std::move(uses);
    t.after = std::move(after);
    if (kind == models::TaskKind::op || kind == models::TaskKind::recompute) t.op = s.tasks.size();
    s.tasks.push_back(t);
    return s.tasks.size() - 1;
  }
};

}  // namespace comptrain::sim::testing

#include "comptrain/models/schedule.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "schedule_replay.hpp"

namespace comptrain::models {

std::string_view to_string(Stream stream) {
  switch (stream) {
    case Stream::compute: return "compute";
    case Stream::d2h: return "d2h";
    case Stream::h2d: return "h2d";
    case Stream::codec: return "codec";
    case Stream::comm: return "comm";
    case Stream::host: return "host";
    case Stream::p2p: return "p2p";
    case Stream::context: return "context";
    case Stream::tensor: return "tensor";
  }
  return "unknown";
}

std::string_view to_string(MemoryRole role) {
  switch (role) {
    case MemoryRole::input: return "input";
    case MemoryRole::weight: return "weight";
    case MemoryRole::weight_copy: return "weight_copy";
    case MemoryRole::buffer: return "buffer";
    case MemoryRole::gradient: return "gradient";
    case MemoryRole::optimizer_state: return "optimizer_state";
    case MemoryRole::activation: return "activation";
    case MemoryRole::compressed: return "compressed";
    case MemoryRole::prefetch: return "prefetch";
    case MemoryRole::temporary: return "temporary";
  }
  return "unknown";
}

MemoryRole memory_role_of(traces::TensorRole role) {
  using traces::TensorRole;
  switch (role) {
    case TensorRole::input: return MemoryRole::input;
    case TensorRole::weight: return MemoryRole::weight;
    case TensorRole::weight_copy: return MemoryRole::weight_copy;
    case TensorRole::buffer: return MemoryRole::buffer;
    case TensorRole::gradient: return MemoryRole::gradient;
    case TensorRole::optimizer_state: return MemoryRole::optimizer_state;
    case TensorRole::activation: return MemoryRole::activation;
    case TensorRole::temporary: return MemoryRole::temporary;
  }
  return MemoryRole::temporary;
}

std::string_view to_string(TaskKind kind) {
  switch (kind) {
    case TaskKind::op: return "op";
    case TaskKind::recompute: return "recompute";
    case TaskKind::offload: return "offload";
    case TaskKind::prefetch: return "prefetch";
    case TaskKind::compress: return "compress";
    case TaskKind::decompress: return "decompress";
    case TaskKind::collective: return "collective";
    case TaskKind::host_compute: return "host_compute";
    case TaskKind::send: return "send";
    case TaskKind::recv: return "recv";
    case TaskKind::framework: return "framework";
  }
  return "unknown";
}

std::string_view to_string(AllocationStream stream) {
  switch (stream) {
    case AllocationStream::current: return "current";
    case AllocationStream::fsdp_all_gather: return "fsdp_all_gather";
    case AllocationStream::fsdp_reduce_scatter: return "fsdp_reduce_scatter";
    case AllocationStream::zero_reduce: return "zero_reduce";
  }
  return "unknown";
}

std::string_view to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce: return "all_reduce";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::all_gather: return "all_gather";
    case CollectiveKind::all_to_all: return "all_to_all";
  }
  return "unknown";
}

std::optional<CollectiveKind> parse_collective_kind(std::string_view text) {
  for (const auto kind : {CollectiveKind::all_reduce, CollectiveKind::reduce_scatter, CollectiveKind::all_gather, CollectiveKind::all_to_all}) {
    if (to_string(kind) == text) return kind;
  }
  return std::nullopt;
}

namespace {

[[noreturn]] void invalid(const Schedule& schedule, const std::string& message) {
  throw std::logic_error("schedule '" + schedule.strategy + "': " + message);
}

std::string task_label(const Schedule& schedule, TaskId t) {
  return "task " + std::to_string(t) + " (" + schedule.tasks[t].name + ")";
}

}  // namespace

// Checks, in this order: references in range; per-task sanity (durations and payloads finite
// and non-negative, op/recompute tasks name their op, collectives their kind, host work on the
// host stream, sends and recvs on the p2p stream with their message, no self-wait); the wait graph (stream
// order plus `after` edges) is acyclic; every buffer a task touches exists by then: it is
// resident, or the task creates it, or the task is ordered after (stream order or `after`,
// transitively) a task that creates it. A resident buffer may not be created: it exists
// before the iteration.
void Schedule::validate() const {
  const std::size_t n = tasks.size();
  for (BufferId b = 0; b < buffers.size(); ++b) {
    if (buffers[b].bytes < 0) invalid(*this, "buffer " + std::to_string(b) + " (" + buffers[b].name + ") has negative size");
  }
  for (TaskId t = 0; t < n; ++t) {
    const Task& task = tasks[t];
    for (BufferId b : task.creates) {
      if (b >= buffers.size()) invalid(*this, task_label(*this, t) + " creates buffer " + std::to_string(b) + ", out of range");
      if (buffers[b].resident) invalid(*this, task_label(*this, t) + " creates resident buffer " + buffers[b].name);
    }
    for (BufferId b : task.uses) {
      if (b >= buffers.size()) invalid(*this, task_label(*this, t) + " uses buffer " + std::to_string(b) + ", out of range");
    }
    for (TaskId a : task.after) {
      if (a >= n) invalid(*this, task_label(*this, t) + " waits for task " + std::to_string(a) + ", out of range");
      if (a == t) invalid(*this, task_label(*this, t) + " waits for itself");
    }
    if (!std::isfinite(task.seconds) || task.seconds < 0) invalid(*this, task_label(*this, t) + " has an invalid duration");
    if (task.bytes < 0) invalid(*this, task_label(*this, t) + " has a negative payload");
    if ((task.kind == TaskKind::op || task.kind == TaskKind::recompute) && !task.op) {
      invalid(*this, task_label(*this, t) + " runs no op");
    }
    if ((task.kind == TaskKind::collective) != task.collective.has_value()) {
      invalid(*this, task_label(*this, t) + (task.collective ? " names a collective but is not one" : " is a collective that names none"));
    }
    // The replay runs host_compute on the host and every other kind on the GPU or its links.
    if ((task.kind == TaskKind::host_compute) != (task.stream == Stream::host)) {
      invalid(*this, task_label(*this, t) + (task.kind == TaskKind::host_compute ? " runs on the host but is not on the host stream"
                                                                                    : " is on the host stream but is not host work"));
    }
    // The replay pairs a send with its recv by their messages, and runs them on the p2p stream only.
    const bool p2p = task.kind == TaskKind::send || task.kind == TaskKind::recv;
    if (p2p != (task.stream == Stream::p2p)) {
      invalid(*this, task_label(*this, t) + (p2p ? " is a send or recv off the p2p stream" : " is on the p2p stream but is not a send or recv"));
    }
    if (p2p != task.message.has_value()) {
      invalid(*this, task_label(*this, t) + (p2p ? " is a send or recv that names no message" : " names a pipeline message but is not a send or recv"));
    }
    if (task.message && (task.message->peer < 0 || task.message->micro_batch < 0 || task.message->chunk < 0)) {
      invalid(*this, task_label(*this, t) + "'s message has a negative peer, micro-batch or chunk");
    }
  }

  // Wait graph: each task waits for its stream predecessor and for its `after` tasks.
  std::vector<std::vector<TaskId>> waits(n);
  std::array<std::optional<TaskId>, kStreamCount> last_on_stream{};
  std::vector<std::size_t> stream_position(n);
  std::array<std::size_t, kStreamCount> stream_length{};
  for (TaskId t = 0; t < n; ++t) {
    const auto s = static_cast<std::size_t>(tasks[t].stream);
    if (s >= kStreamCount) invalid(*this, task_label(*this, t) + " is on an unknown stream");
    if (last_on_stream[s]) waits[t].push_back(*last_on_stream[s]);
    last_on_stream[s] = t;
    stream_position[t] = ++stream_length[s];  // 1-based, so 0 means "nothing of that stream"
    waits[t].insert(waits[t].end(), tasks[t].after.begin(), tasks[t].after.end());
  }
  // Kahn's algorithm gives a topological order or finds the cycle.
  std::vector<std::vector<TaskId>> waited_by(n);
  std::vector<std::size_t> pending(n);
  for (TaskId t = 0; t < n; ++t) {
    pending[t] = waits[t].size();
    for (TaskId a : waits[t]) waited_by[a].push_back(t);
  }
  std::vector<TaskId> order;
  order.reserve(n);
  for (TaskId t = 0; t < n; ++t) {
    if (pending[t] == 0) order.push_back(t);
  }
  for (std::size_t i = 0; i < order.size(); ++i) {
    for (TaskId w : waited_by[order[i]]) {
      if (--pending[w] == 0) order.push_back(w);
    }
  }
  if (order.size() != n) {
    for (TaskId t = 0; t < n; ++t) {
      if (pending[t] != 0) invalid(*this, "the waits form a cycle (or contradict a stream's order) through " + task_label(*this, t));
    }
  }

  // Happens-before as vector clocks: clock[t][s] is the position (1-based) of the latest task
  // of stream s that ends before t starts or is t itself. With a handful of streams this is exact
  // and linear in the number of edges.
  std::vector<std::array<std::size_t, kStreamCount>> clock(n);
  for (TaskId t : order) {
    auto& c = clock[t];
    c.fill(0);
    for (TaskId a : waits[t]) {
      for (std::size_t s = 0; s < kStreamCount; ++s) c[s] = std::max(c[s], clock[a][s]);
    }
    c[static_cast<std::size_t>(tasks[t].stream)] = stream_position[t];
  }
  auto ordered_before = [&](TaskId a, TaskId b) {
    return clock[b][static_cast<std::size_t>(tasks[a].stream)] >= stream_position[a];
  };

  std::vector<std::vector<TaskId>> creators(buffers.size());
  for (TaskId t = 0; t < n; ++t) {
    for (BufferId b : tasks[t].creates) creators[b].push_back(t);
  }
  for (TaskId t = 0; t < n; ++t) {
    for (BufferId b : tasks[t].uses) {
      if (buffers[b].resident) continue;
      const auto& c = creators[b];
      if (c.empty()) invalid(*this, task_label(*this, t) + " uses buffer " + buffers[b].name + ", which no task creates");
      const bool created = std::any_of(c.begin(), c.end(), [&](TaskId k) { return ordered_before(k, t); });
      if (!created) invalid(*this, task_label(*this, t) + " may use buffer " + buffers[b].name + " before any task creates it");
    }
  }
}

namespace detail {

RoleMask saved_activation_roles() {
  RoleMask mask{};
  mask[static_cast<std::size_t>(MemoryRole::activation)] = true;
  mask[static_cast<std::size_t>(MemoryRole::compressed)] = true;
  mask[static_cast<std::size_t>(MemoryRole::prefetch)] = true;
  return mask;
}

// Difference array over task positions: a buffer is counted from its first creator to its
// last creator or user (to the end when held); resident buffers for the whole replay.
std::int64_t sequential_peak_bytes(const Schedule& schedule, const RoleMask& counted) {
  const std::size_t n = schedule.tasks.size();
  constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
  std::vector<std::size_t> first(schedule.buffers.size(), kNone);
  std::vector<std::size_t> last(schedule.buffers.size(), 0);
  for (std::size_t t = 0; t < n; ++t) {
    for (BufferId b : schedule.tasks[t].creates) {
      first[b] = std::min(first[b], t);
      last[b] = std::max(last[b], t);
    }
    for (BufferId b : schedule.tasks[t].uses) last[b] = std::max(last[b], t);
  }
  std::int64_t resident = 0;
  std::vector<std::int64_t> delta(n + 1, 0);
  for (BufferId b = 0; b < schedule.buffers.size(); ++b) {
    const Buffer& buffer = schedule.buffers[b];
    if (!counted[static_cast<std::size_t>(buffer.role)]) continue;
    if (buffer.resident) {
      resident += buffer.bytes;
      continue;
    }
    if (first[b] == kNone) continue;  // never allocated
    delta[first[b]] += buffer.bytes;
    if (!buffer.held_to_end) delta[std::max(last[b], first[b]) + 1] -= buffer.bytes;
  }
  std::int64_t live = resident;
  std::int64_t peak = resident;
  for (std::size_t t = 0; t < n; ++t) {
    live += delta[t];
    peak = std::max(peak, live);
  }
  return peak;
}

}  // namespace detail

std::int64_t sequential_peak_bytes(const Schedule& schedule) {
  detail::RoleMask all{};
  all.fill(true);
  return detail::sequential_peak_bytes(schedule, all);
}

}  // namespace comptrain::models

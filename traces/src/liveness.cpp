#include "comptrain/traces/liveness.hpp"

#include <algorithm>
#include <numeric>

namespace comptrain::traces {

std::int64_t total(const BytesByRole& bytes) { return std::accumulate(bytes.begin(), bytes.end(), std::int64_t{0}); }

bool gradients_held_to_end(const Trace& trace) {
  const auto flag = trace.metadata().find("optimizer_in_backward");
  return flag == trace.metadata().end() || flag->second != "true";
}

Liveness compute_liveness(const Trace& trace, std::span<const OpIndex> order) {
  check_execution_order(trace, order);
  const std::size_t steps = order.size();
  const auto& tensors = trace.tensors();
  std::vector<std::size_t> position(steps);
  for (std::size_t k = 0; k < steps; ++k) position[order[k]] = k;

  // Gather each storage's extent over the order from all the tensors that use it.
  constexpr std::size_t kUnset = static_cast<std::size_t>(-1);
  std::vector<std::size_t> first(tensors.size(), kUnset);
  std::vector<std::size_t> last(tensors.size(), 0);
  std::vector<bool> written(tensors.size(), false);
  for (TensorIndex t = 0; t < tensors.size(); ++t) {
    const TensorIndex s = trace.storage_of(t);
    if (const auto p = tensors[t].producer) {
      written[s] = true;
      first[s] = std::min(first[s], position[*p]);
      last[s] = std::max(last[s], position[*p]);
    }
    for (OpIndex c : tensors[t].consumers) last[s] = std::max(last[s], position[c]);
  }

  Liveness result;
  const std::size_t end = steps == 0 ? 0 : steps - 1;
  const bool held_to_end = gradients_held_to_end(trace);
  for (TensorIndex t = 0; t < tensors.size(); ++t) {
    if (trace.storage_of(t) != t) continue;
    StorageLifetime life;
    life.storage = t;
    life.bytes = tensors[t].bytes();
    life.role = tensors[t].role;
    if (!written[t]) {
      life.first = 0;  // held by its owner across iterations
      life.last = end;
    } else {
      life.first = first[t];
      life.last = life.role == TensorRole::gradient && held_to_end ? end : last[t];
    }
    result.lifetimes.push_back(life);
  }

  // Sweep with difference arrays: +bytes at `first`, -bytes after `last`, per role.
  std::vector<BytesByRole> delta(steps + 1, BytesByRole{});
  for (const StorageLifetime& life : result.lifetimes) {
    if (steps == 0) break;
    at(delta[life.first], life.role) += life.bytes;
    at(delta[life.last + 1], life.role) -= life.bytes;
  }
  result.live_by_step.resize(steps);
  BytesByRole running{};
  for (std::size_t k = 0; k < steps; ++k) {
    for (std::size_t r = 0; r < kRoleCount; ++r) running[r] += delta[k][r];
    result.live_by_step[k] = running;
    const std::int64_t live = total(running);
    if (live > result.peak_bytes) {
      result.peak_bytes = live;
      result.peak_step = k;
    }
  }
  for (const StorageLifetime& life : result.lifetimes) {
    if (steps > 0 && life.first <= result.peak_step && result.peak_step <= life.last) result.live_at_peak.push_back(life.storage);
  }
  return result;
}

}  // namespace comptrain::traces

#pragma once
// When each tensor's storage is allocated and freed for a given execution order, and the
// peak of live bytes. This is the static memory model: no allocator fragmentation, no
// caching-allocator reserve, no cuDNN workspace beyond what the trace lists.

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "comptrain/traces/trace.hpp"

namespace comptrain::traces {

constexpr std::size_t kRoleCount = 8;
using BytesByRole = std::array<std::int64_t, kRoleCount>;  // indexed by TensorRole
inline std::int64_t& at(BytesByRole& bytes, TensorRole role) {
  return bytes[static_cast<std::size_t>(role)];
}
inline std::int64_t at(const BytesByRole& bytes, TensorRole role) {
  return bytes[static_cast<std::size_t>(role)];
}
std::int64_t total(const BytesByRole& bytes);

// The live range of one storage, in positions of the execution order ("steps"): it is
// allocated just before step `first` runs and freed just after step `last` completes.
struct StorageLifetime {
  TensorIndex storage = 0;  // a tensor that is not a view
  std::size_t first = 0;
  std::size_t last = 0;
  std::int64_t bytes = 0;
  TensorRole role = TensorRole::temporary;
};

struct Liveness {
  std::vector<StorageLifetime> lifetimes;        // one per storage, in tensor order
  std::vector<BytesByRole> live_by_step;         // live bytes per role while each step runs
  std::size_t peak_step = 0;                     // the first step at which the peak is reached
  std::int64_t peak_bytes = 0;
  std::vector<TensorIndex> live_at_peak;         // storages live at the peak, in tensor order
};

// Rules (docs: traces/FORMAT.md, "Liveness"):
//  - a storage with no producer (inputs, weights, buffers, optimizer state) is live for the whole
//    iteration, as its owner holds it across iterations;
//  - otherwise it is allocated at the first step that writes it (its own or a view's producer)
//    and freed after the last step that reads it or any of its views; with no reader at all,
//    right after its producer;
//  - weight gradients stay live until the end of the iteration (they are its result).
// Throws TraceError when `order` is not a valid execution order.
Liveness compute_liveness(const Trace& trace, std::span<const OpIndex> order);

// Whether the weight gradients live to the end of the iteration (the optimizer step reads them
// after the backward pass), as compute_liveness and the schedules hold them. Not in a trace whose
// metadata has optimizer_in_backward: "true" (the zoo's ModelSpec::optimizer_in_backward,
// torchtune's optimizer_in_bwd): each weight's step runs in the backward pass and frees its
// gradient, which then lives to its last reader, that step.
bool gradients_held_to_end(const Trace& trace);

}  // namespace comptrain::traces

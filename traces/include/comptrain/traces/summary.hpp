#pragma once
// The static accounting of a trace: counts, parameters, FLOPs per phase and the memory
// breakdown per role, from liveness in the recorded order.

#include <cstdint>
#include <string>
#include <vector>

#include "comptrain/traces/liveness.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::traces {

struct TraceSummary {
  std::string name;
  std::int64_t batch_size = 0;
  std::size_t ops = 0;
  std::array<std::size_t, 3> ops_by_phase{};      // indexed by Phase
  std::size_t host_sync_ops = 0;                  // ops whose call waits for the GPU (Op::host_sync)
  std::size_t tensors = 0;
  std::int64_t parameters = 0;                    // elements of weight tensors
  std::array<std::int64_t, 3> flops_by_phase{};   // indexed by Phase
  BytesByRole allocated_by_role{};                // every storage once, whatever its lifetime
  BytesByRole live_at_peak_by_role{};
  std::int64_t peak_bytes = 0;
  OpIndex peak_op = 0;                            // the op running when the peak is reached
  std::vector<TensorIndex> live_at_peak;          // storages live at the peak, in tensor order
  std::int64_t saved_activation_bytes = 0;        // all storages saved for backward
  std::size_t saved_activation_tensors = 0;
  std::int64_t saved_activation_bytes_per_sample = 0;  // the part that grows with the batch, per sample

  std::int64_t flops() const { return flops_by_phase[0] + flops_by_phase[1] + flops_by_phase[2]; }
};

TraceSummary summarize(const Trace& trace);

}  // namespace comptrain::traces

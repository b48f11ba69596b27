#pragma once
// The I/O simulation's cost (sim/engine/io_simulation.hpp), estimated from its inputs before it
// starts and bounded (shared/defects-2/07, 08): a loader or a checkpoint whose simulation would
// run for minutes is refused with the estimate, not started.

#include <cstdint>
#include <string_view>

#include "comptrain/sim/engine/io_simulation.hpp"

namespace comptrain::sim {

// What the I/O simulation will run, estimated before it starts (shared/defects-2/07, 08):
//   warmup_iterations      the loader's minimum before a steady state is looked for:
//                          2 x prefetch_factor x workers + 2 x workers + 2 (0 without data)
//   loader_wakeups         its actors' wake-ups over that warm-up: every GPU's batch made ready
//                          and taken wakes the GPU's workers and training loop
//   chunks_per_checkpoint  the node's device-to-host copies and writes of one checkpoint, one per
//                          chunk of each GPU's share (0 before the checkpoint sizes are known)
struct IoCost {
  std::int64_t warmup_iterations = 0;
  std::int64_t loader_wakeups = 0;
  std::int64_t chunks_per_checkpoint = 0;
};
IoCost estimate_io_cost(const IoInputs& inputs);

// The bounds (measured on the 2-core development VM, docs/io-and-energy.md "Limits"):
//  - the warm-up: 20,000 iterations, the I/O simulation's own limit for reaching a steady state;
//  - 10^7 loader wake-ups: about half a minute (2 GPUs with 256 workers each, 1.6 x 10^6 of them,
//    took 4.9 s; with 512, 6.3 x 10^6, 15.6 s; 8 GPUs with 128, 1.6 x 10^6, 5.4 s);
//  - 10^5 chunks per checkpoint and node: 1 KiB chunks of ResNet-18's 90 MB checkpoint on 2 GPUs
//    (88,000 each) took 6.8 s.
inline constexpr std::int64_t kMaxLoaderWakeups = 10'000'000;
inline constexpr std::int64_t kMaxChunksPerCheckpoint = 100'000;

// InputError after `data_where` (naming data.prefetch_factor and data.workers_per_gpu) or
// `checkpoint_where` (which names the chunk's field: "s.yaml:5:3: checkpoint.chunk: "), with the
// estimate, the bound and what to change.
void check_io_cost(const IoInputs& inputs, std::string_view data_where, std::string_view checkpoint_where);

}  // namespace comptrain::sim

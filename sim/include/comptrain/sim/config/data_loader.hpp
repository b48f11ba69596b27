#pragma once
// Data loading: a scenario's `data:` section. PyTorch's DataLoader as sim/io.hpp simulates it:
// each GPU's process has `workers_per_gpu` worker processes on the node's CPU; batch i goes to
// worker i mod workers (round robin), which reads the batch's bytes from storage and decodes it
// on one CPU core (decode_seconds_per_sample per sample); a worker holds at most
// `prefetch_factor` batches ahead (batch i is handed out once batch i - prefetch_factor x workers
// has been taken, DataLoader's _try_put_index), and training takes the batches in order, waiting
// when the next one is not ready. The training process itself runs on the same CPU: its launching
// thread's CPU time per iteration (the replay's dispatch costs) is an execution on one of the
// node's cores, started when the iteration takes its batch, and the iteration ends no earlier
// than it (PyTorch's Python thread issues the iteration's work; the workers compete for its core
// when there are more runnable workers and threads than cores). The node's workers start spread
// evenly over one batch's uncontended read and decode time rather than all at once: a real
// DataLoader's workers start together but fall out of step within a few samples (JPEG sizes, and
// so decode times, vary), while identical simulated workers would keep an exact lockstep (all
// reading, then all decoding), an unstable equilibrium that would halve the throughput of a
// worker that alternates between the disk and a core (a modelling choice; tests/sim/data_loader_test.cpp).

#include <cstdint>
#include <string>

#include "comptrain/sim/config/checkpoint.hpp"

namespace comptrain::sim {

struct DataSpec {
  std::int64_t bytes_per_sample = 0;     // read from storage per sample (the encoded file: a JPEG, a token shard's share)
  double decode_seconds_per_sample = 0;  // one CPU core's time to decode and augment one sample
  int workers_per_gpu = 1;               // DataLoader(num_workers=...), per GPU's process
  int prefetch_factor = 2;               // DataLoader(prefetch_factor=...): batches per worker ahead (PyTorch's default 2)
  StorageTier from = StorageTier::shared;
  // "FILE:LINE:COLUMN" of `from` (of the section when it is not given; empty when built in
  // code), for check_io_inputs, which meets the platform later.
  std::string from_position = {};
};

}  // namespace comptrain::sim

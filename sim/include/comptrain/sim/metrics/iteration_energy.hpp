#pragma once
// The energy of the mean iteration with its I/O (sim/io.hpp): what the replay measured
// (sim/energy.hpp) plus what the job draws while it waits and what its loader workers burn.
//
//   extra seconds  the mean iteration less the replay's: the wait for the next batch and the
//                  checkpoint's cost averaged over its interval (IoResult)
//   waiting        extra seconds x EnergyResult::waiting_watts: every GPU at its in-job power, the
//                  hosts idle, every powered link idle (training stands still: no kernel, no CPU
//                  work of the replay, no collective)
//   decoding       per node and iteration, one batch per GPU decoded (IoResult::batch_decode_seconds
//                  of one core) at (host.power.max - host.power.idle) / host.cores per busy core:
//                  the host power model made linear in the cores in use, as SimGrid's host plugin
//                  is (an assumption for a server CPU; the decode overlaps the GPU's work, so it
//                  adds power whether or not the iteration waits)
// Not counted: the storage's own power (disks, file-system servers) and the links' share above
// idle while reads and checkpoint copies move bytes.
// Without I/O (no IoResult) the figures are the replay's, unchanged.

#include <cstdint>

#include "comptrain/models/platform.hpp"
#include "comptrain/sim/engine/energy.hpp"
#include "comptrain/sim/engine/io_simulation.hpp"

namespace comptrain::sim {

struct IterationEnergy {
  double seconds = 0;         // the mean iteration (the replay's without I/O)
  double total_joules = 0;    // the whole job, per mean iteration
  double gpu_joules = 0;      // one GPU
  double node_joules = 0;     // one node (its GPUs, host and links)
  double waiting_joules = 0;  // the whole job's, while it waits (part of total_joules)
  double decode_joules = 0;   // the whole job's loader decoding (part of total_joules)

  double gpu_average_watts() const { return seconds > 0 ? gpu_joules / seconds : 0; }
  double node_average_watts() const { return seconds > 0 ? node_joules / seconds : 0; }
  // `samples`: what one iteration trains over every GPU (the global batch x accumulation steps).
  double joules_per_sample(std::int64_t samples) const { return samples > 0 ? total_joules / static_cast<double>(samples) : 0; }
};

// `io` may be null (no data or checkpoint section): the replay's energy as it is.
IterationEnergy iteration_energy(const EnergyResult& replay, const IoResult* io, const models::Platform& platform);

}  // namespace comptrain::sim

#include "comptrain/sim/metrics/iteration_energy.hpp"

#include <algorithm>

namespace comptrain::sim {

IterationEnergy iteration_energy(const EnergyResult& replay, const IoResult* io, const models::Platform& platform) {
  IterationEnergy e;
  e.seconds = replay.seconds;
  e.total_joules = replay.total_joules;
  e.gpu_joules = replay.gpu_joules;
  e.node_joules = replay.node_joules();
  if (io == nullptr) return e;

  // The replay's iteration is the I/O simulation's GPU iteration; the mean one adds the waits.
  const double extra = std::max(0.0, io->mean_iteration_seconds - io->gpu_iteration_seconds);
  e.seconds += extra;
  const double node_wait = extra * replay.node_waiting_watts;
  e.waiting_joules = extra * replay.waiting_watts();
  e.gpu_joules += extra * replay.gpu_in_job_watts;

  const models::HostSpec& host = platform.host;
  const double watts_per_core = replay.host_modelled && host.cores > 0 ? (host.max_power - host.idle_power) / host.cores : 0.0;
  const double node_decode = io->data_loader ? replay.gpus_per_node * io->batch_decode_seconds * watts_per_core : 0.0;
  e.decode_joules = replay.nodes * node_decode;

  e.node_joules += node_wait + node_decode;
  e.total_joules += e.waiting_joules + e.decode_joules;
  return e;
}

}  // namespace comptrain::sim

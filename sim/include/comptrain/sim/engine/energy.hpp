#pragma once
// The energy of one simulated iteration (sim/README.md, "Energy"): SimGrid's host energy plugin on
// the GPU hosts and the nodes' CPU hosts, its link energy plugin on the links whose platform
// section gives a power, integrated over the replay.
//
// The power model, per resource:
//   GPU   in_job_power while no kernel runs on it (a stall inside the job: memory held, clocks up;
//         not nvidia-smi's idle); while kernels run, the mean of their powers (each task's
//         Task::watts, from models/kernel_power.hpp: what the SMs' and the memory's activity draw
//         at the clock the power limit leaves it; 0, unknown: the busy power, the TDP or the limit
//         below it). SimGrid's host energy plugin integrates it on the GPU's power host
//         (Epsilon + load x (AllCores - Epsilon), Epsilon = in_job, AllCores = max, the load set by
//         a bounded exec: GpuPowerDraw).
//   host  host.power.idle while nothing runs on the node's CPUs, max while the host stream's
//         work (CPU Adam) runs: the same rule with the host as one SimGrid core.
//   link  per direction, idle + (busy - idle) x used bandwidth / bandwidth.
// Under the symmetric replay (sim/simulation.hpp) one rank's GPU runs the schedule and stands for
// every GPU; node 0 stands for every node (its host runs the node's CPU work, its links carry its
// copies; every node's links carry the collectives).

#include <cstdint>

namespace comptrain::sim {

struct EnergyResult {
  double seconds = 0;  // the span integrated: the iteration (0 to the last task's end)
  int nodes = 1;
  int gpus_per_node = 1;

  // What the platform gives (false: not modelled, and the joules below are 0).
  bool host_modelled = false;   // host.power
  bool links_modelled = false;  // a power on host_link, gpu_link or nic
  bool network_modelled = false;  // network.link.power

  // The GPU's power model (models::GpuSpec).
  double gpu_in_job_watts = 0;
  double gpu_busy_watts = 0;         // the most a kernel draws: the TDP, or the power limit below it
  double gpu_power_limit_watts = 0;  // 0: none
  double gpu_clock_fraction = 1;     // under the limit, of a kernel that keeps the SMs saturated

  // One GPU (rank 0), per iteration.
  double gpu_joules = 0;
  double gpu_peak_watts = 0;
  double gpu_busy_seconds = 0;  // when at least one kernel ran on it

  // One node (node 0), per iteration: its GPUs, its CPU host, its links (PCIe, NVLink, NICs).
  double node_gpu_joules = 0;
  double node_host_joules = 0;
  double node_link_joules = 0;
  double node_peak_watts = 0;  // the most the node drew at once (GPUs + host + links)

  double network_joules = 0;  // the links between nodes, whole cluster
  double total_joules = 0;    // every node and the network, per iteration

  // What the job draws while it waits with nothing running (for a batch, a checkpoint: sim/io.hpp,
  // io_energy.hpp): every GPU at its in-job power, the hosts at host.power.idle, every powered
  // link at its idle power.
  double node_waiting_watts = 0;     // one node: its GPUs, host and links
  double network_waiting_watts = 0;  // the links between nodes, whole cluster
  double waiting_watts() const { return nodes * node_waiting_watts + network_waiting_watts; }

  double gpu_average_watts() const { return seconds > 0 ? gpu_joules / seconds : 0; }
  // The GPU's mean power while kernels run on it (it draws in_job the rest of the time).
  double gpu_busy_average_watts() const {
    return gpu_busy_seconds > 0 ? (gpu_joules - gpu_in_job_watts * (seconds - gpu_busy_seconds)) / gpu_busy_seconds : 0;
  }
  double node_joules() const { return node_gpu_joules + node_host_joules + node_link_joules; }
  double node_average_watts() const { return seconds > 0 ? node_joules() / seconds : 0; }
  // `samples`: the samples one iteration trains over every GPU (the global batch).
  double joules_per_sample(std::int64_t samples) const { return samples > 0 ? total_joules / static_cast<double>(samples) : 0; }
};

}  // namespace comptrain::sim

#pragma once
// What one GPU draws while the replay runs kernels on it, made visible to SimGrid's host energy
// plugin (sim/README.md, "Energy"). Internal to comptrain::sim: the replay (simulation.cpp) uses it.
//
// The GPU's kernels are timed on its GPU host, where they share its speed; its power is drawn on
// its power host (ClusterNetwork::gpu_power), whose wattage is in_job:in_job:max. While kernels
// run, one exec bounded at load x kGpuPowerSpeed runs there, load = (P - in_job) / (max - in_job)
// with P the mean of the running kernels' powers (concurrent kernels share the GPU equally, so each
// draws its power for its share of it), started and cancelled by the GPU's power actor whenever
// the running kernels change; the plugin then integrates in_job + load x (max - in_job) exactly
// (measured on SimGrid 3.32: a bounded exec cancelled at a change gives the integral of the
// piecewise-constant power; tests/sim/energy_test.cpp). With no kernel the host idles at in_job.

#include <simgrid/s4u.hpp>

#include <string>

#include "comptrain/models/platform.hpp"

namespace comptrain::sim::detail {

class GpuPowerDraw {
 public:
  // `power_host` nullptr (a GPU without power values): nothing is drawn and the calls do nothing.
  GpuPowerDraw(simgrid::s4u::Host* power_host, const models::GpuSpec& gpu);

  // Creates the GPU's power actor, `name`, on its power host (inside the engine, before it runs).
  void start(const std::string& name);

  // A kernel drawing `watts` (0: unknown, the GPU's busy power: its TDP or its power limit below
  // it) starts or ends on this GPU. Called by the GPU's stream actors; the power actor follows at
  // the same simulated time.
  void begin(double watts);
  void end(double watts);

 private:
  double load(double watts) const;
  void draw();

  simgrid::s4u::Host* host_ = nullptr;
  double in_job_ = 0;
  double max_ = 0;
  double busy_ = 0;
  int running_ = 0;       // kernels running on the GPU
  double load_sum_ = 0;   // the sum of their loads
  simgrid::s4u::MutexPtr mutex_;
  simgrid::s4u::ConditionVariablePtr changed_;
};

}  // namespace comptrain::sim::detail

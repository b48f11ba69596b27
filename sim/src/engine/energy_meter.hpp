#pragma once
// Measures a replay's energy with SimGrid's host and link energy plugins (sim/energy.hpp).
// Internal to comptrain::sim: the replay (simulation.cpp) uses it.
//
// Order, inside a created sg4::Engine: init_energy_plugins() before the ClusterNetwork is built
// (the plugins attach to hosts and links as they are created; before the engine exists, SimGrid
// 3.32 aborts creating a second one), then an EnergyMeter on the built network before
// engine.run(), then finish() after it.

#include <simgrid/s4u.hpp>

#include "engine/cluster_network.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/sim/engine/energy.hpp"

namespace comptrain::sim::detail {

// Whether the platform gives any power value: without one there is nothing to measure and the
// plugins stay off.
bool has_power_values(const models::Platform& platform);

// Whether any link section gives a power (host_link, gpu_link, nic, network.link).
bool has_link_power(const models::Platform& platform);

// sg_host_energy_plugin_init, and sg_link_energy_plugin_init where a link has a power: the link
// plugin updates every link of a communication's route at each of its state changes, which cost
// 10-35% more CPU on a 512-GPU ZeRO-3 replay for links that draw nothing.
void init_energy_plugins(bool links);

class EnergyMeter {
 public:
  // `symmetric`: the symmetric replay, where rank 0's GPU stands for every GPU and node 0 for
  // every node (the others' GPUs and hosts run nothing in SimGrid); else every rank is replayed. Connects a sampler to the engine's time advances (Engine::on_time_advance, which
  // fires at the end of each interval with the resources' state of that interval: measured on
  // SimGrid 3.32) for the peak powers.
  EnergyMeter(const ClusterNetwork& network, const models::Platform& platform, bool symmetric);

  // After engine.run(): the plugins' energies, and the peaks and busy time the sampler saw.
  EnergyResult finish() const;

  // The power of node 0 and of rank 0's GPU now (the state of the interval the clock is in).
  double node_watts() const;
  double gpu_watts() const;
  double node_device_watts() const;  // its GPUs and host
  double node_link_watts() const;    // its links

 private:
  void sample(double interval);

  const ClusterNetwork& network_;
  models::Platform platform_;
  bool symmetric_ = true;
  double gpu_peak_ = 0;
  double node_peak_ = 0;
  double gpu_busy_seconds_ = 0;
};

}  // namespace comptrain::sim::detail

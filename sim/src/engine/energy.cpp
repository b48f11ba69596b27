#include <simgrid/plugins/energy.h>

#include <algorithm>

#include "engine/energy_meter.hpp"

namespace comptrain::sim::detail {

bool has_link_power(const models::Platform& platform) {
  return platform.host_link.busy_power > 0 || platform.gpu_link.busy_power > 0 || (platform.nic && platform.nic->busy_power > 0) ||
         (platform.network && platform.network->link.busy_power > 0);
}

bool has_power_values(const models::Platform& platform) {
  return platform.gpu.max_power > 0 || platform.host.max_power > 0 || has_link_power(platform);
}

void init_energy_plugins(bool links) {
  sg_host_energy_plugin_init();
  if (links) sg_link_energy_plugin_init();
}

namespace {

// What the link energy plugin integrates (SimGrid 3.32, src/plugins/link_energy.cpp): idle +
// (busy - idle) x usage / bandwidth, the usage being the bandwidth the link's flows take now.
double link_watts(const PoweredLink& l) {
  const double share = l.bandwidth > 0 ? std::min(1.0, l.link->get_usage() / l.bandwidth) : 0.0;
  return l.idle + (l.busy - l.idle) * share;
}

double consumed(const sg4::Host* host) { return host != nullptr ? sg_host_get_consumed_energy(host) : 0.0; }

double current(const sg4::Host* host) { return host != nullptr ? sg_host_get_current_consumption(host) : 0.0; }

// With what the reused collectives' flows would have drawn above idle (ClusterNetwork::reused_joules).
double consumed(const ClusterNetwork& network, const std::vector<PoweredLink>& links) {
  double joules = 0;
  for (const PoweredLink& l : links) joules += sg_link_get_consumed_energy(l.link) + network.reused_joules(l.link);
  return joules;
}

// The most node 0's links drew over (from, to] of a collective's first run (its recorded power,
// each value holding up to its time).
double recorded_watts(const ClusterNetwork::CollectiveRun& run, double from, double to) {
  double watts = 0;
  double begin = 0;
  for (const auto& [end, w] : run.node_link_watts) {
    if (end > from && begin < to) watts = std::max(watts, w);
    begin = end;
  }
  return watts;
}

}  // namespace

EnergyMeter::EnergyMeter(const ClusterNetwork& network, const models::Platform& platform, bool symmetric)
    : network_(network), platform_(platform), symmetric_(symmetric) {
  sg4::Engine::on_time_advance_cb([this](double interval) { sample(interval); });
}

// A GPU's power is on its power host (ClusterNetwork::gpu_power; none: 0 W).
double EnergyMeter::gpu_watts() const { return current(network_.gpu_power(0)); }

double EnergyMeter::node_watts() const { return node_device_watts() + node_link_watts(); }

double EnergyMeter::node_device_watts() const {
  double watts = 0;
  if (symmetric_) {
    watts = network_.shape().gpus_per_node * gpu_watts();
  } else {
    for (int local = 0; local < network_.shape().gpus_per_node; ++local) watts += current(network_.gpu_power(local));
  }
  return watts + sg_host_get_current_consumption(network_.host(0));
}

double EnergyMeter::node_link_watts() const {
  double watts = 0;
  for (const PoweredLink& l : network_.node_links(0)) watts += link_watts(l);
  return watts;
}

// The clock has just advanced by `interval`; every resource is still in the state it held over
// that interval (the actions ending now have not released their share yet). During a collective
// whose time is reused (ClusterNetwork::reuse_collective_times) node 0's links are idle in
// SimGrid: they drew what they drew over the same part of the collective's first run, recorded
// here as it ran.
void EnergyMeter::sample(double interval) {
  if (!(interval > 0)) return;
  gpu_peak_ = std::max(gpu_peak_, gpu_watts());
  double links = node_link_watts();
  if (const ClusterNetwork::CollectiveNow& now = network_.collective_now(); now.run != nullptr) {
    const double end = sg4::Engine::get_clock() - now.start;
    if (now.recording) {
      now.run->node_link_watts.emplace_back(end, links);
    } else {
      links = recorded_watts(*now.run, end - interval, end);
    }
  }
  node_peak_ = std::max(node_peak_, node_device_watts() + links);
  if (network_.gpu(0)->get_load() > 0) gpu_busy_seconds_ += interval;
}

EnergyResult EnergyMeter::finish() const {
  const ClusterShape shape = network_.shape();
  const models::GpuSpec& gpu = platform_.gpu;
  EnergyResult e;
  e.seconds = sg4::Engine::get_clock();
  e.nodes = shape.nodes;
  e.gpus_per_node = shape.gpus_per_node;
  e.host_modelled = platform_.host.max_power > 0;
  e.links_modelled = !network_.node_links(0).empty();
  e.network_modelled = !network_.network_links().empty();
  e.gpu_in_job_watts = gpu.in_job_power;
  e.gpu_busy_watts = gpu.max_power > 0 ? gpu.busy_power() : 0;
  e.gpu_power_limit_watts = gpu.power_limit;
  e.gpu_clock_fraction = gpu.clock_fraction;
  e.gpu_joules = consumed(network_.gpu_power(0));
  e.gpu_peak_watts = gpu_peak_;
  e.gpu_busy_seconds = gpu_busy_seconds_;
  e.node_peak_watts = node_peak_;

  // A node's GPUs, host and links; rank 0's GPU for all of them when it stands for them.
  const auto node_gpus = [&](int node) {
    if (symmetric_) return shape.gpus_per_node * e.gpu_joules;
    double joules = 0;
    for (int local = 0; local < shape.gpus_per_node; ++local) joules += consumed(network_.gpu_power(node * shape.gpus_per_node + local));
    return joules;
  };
  e.node_gpu_joules = node_gpus(0);
  e.node_host_joules = consumed(network_.host(0));
  e.node_link_joules = consumed(network_, network_.node_links(0));
  e.network_joules = consumed(network_, network_.network_links());
  const auto idle = [](const std::vector<PoweredLink>& links) {
    double watts = 0;
    for (const PoweredLink& l : links) watts += l.idle;
    return watts;
  };
  e.node_waiting_watts = shape.gpus_per_node * gpu.in_job_power + (e.host_modelled ? platform_.host.idle_power : 0.0) + idle(network_.node_links(0));
  e.network_waiting_watts = idle(network_.network_links());
  if (symmetric_) {
    // The symmetric replay: node 0 stands for every node (the others' GPUs and hosts ran nothing).
    e.total_joules = shape.nodes * e.node_joules() + e.network_joules;
  } else {
    e.total_joules = e.network_joules;
    for (int node = 0; node < shape.nodes; ++node) {
      e.total_joules += node_gpus(node) + consumed(network_.host(node)) + consumed(network_, network_.node_links(node));
    }
  }
  return e;
}

}  // namespace comptrain::sim::detail

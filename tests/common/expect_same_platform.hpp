#pragma once
// Every field of a Platform that parse_platform sets, compared: the platform writer's round trip
// (models_test) and a fitted platform against its base (sim_studies_test) use the one list, so
// that a field added to Platform and forgotten by the writer fails both.

#include <gtest/gtest.h>

#include <string>

#include "comptrain/models/platform.hpp"

namespace comptrain::test_support {

// Quantities are written in a readable unit (GB/s, us) and read back as value x unit, which may
// differ from the read value in the last bit: DOUBLE_EQ's 4 ulps, never more.
inline void expect_same_link(const models::LinkSpec& a, const models::LinkSpec& b, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(a.name, b.name);
  EXPECT_DOUBLE_EQ(a.bandwidth, b.bandwidth);
  EXPECT_DOUBLE_EQ(a.latency, b.latency);
  EXPECT_DOUBLE_EQ(a.pageable_bandwidth, b.pageable_bandwidth);
  EXPECT_DOUBLE_EQ(a.checkpoint_copy_bandwidth, b.checkpoint_copy_bandwidth);
  EXPECT_DOUBLE_EQ(a.idle_power, b.idle_power);
  EXPECT_DOUBLE_EQ(a.busy_power, b.busy_power);
}

// Every field of Platform that parse_platform sets.
inline void expect_same_platform(const models::Platform& a, const models::Platform& b) {
  EXPECT_EQ(a.name, b.name);
  const models::GpuSpec& g = a.gpu;
  const models::GpuSpec& h = b.gpu;
  EXPECT_EQ(g.name, h.name);
  EXPECT_EQ(g.memory_bytes, h.memory_bytes);
  EXPECT_EQ(g.memory_visible_bytes, h.memory_visible_bytes);
  EXPECT_EQ(g.cuda_context_bytes, h.cuda_context_bytes);
  EXPECT_EQ(g.compute_capability_major, h.compute_capability_major);
  EXPECT_EQ(g.compute_capability_minor, h.compute_capability_minor);
  EXPECT_DOUBLE_EQ(g.memory_bandwidth, h.memory_bandwidth);
  EXPECT_DOUBLE_EQ(g.peak_fp32, h.peak_fp32);
  EXPECT_DOUBLE_EQ(g.peak_tf32, h.peak_tf32);
  EXPECT_DOUBLE_EQ(g.peak_fp16, h.peak_fp16);
  EXPECT_DOUBLE_EQ(g.peak_bf16, h.peak_bf16);
  EXPECT_DOUBLE_EQ(g.peak_fp8, h.peak_fp8);
  EXPECT_DOUBLE_EQ(g.launch_overhead, h.launch_overhead);
  EXPECT_EQ(g.sms, h.sms);
  EXPECT_EQ(g.collective_sms, h.collective_sms);
  EXPECT_DOUBLE_EQ(g.idle_power, h.idle_power);
  EXPECT_DOUBLE_EQ(g.max_power, h.max_power);
  EXPECT_DOUBLE_EQ(g.memory_bound_power, h.memory_bound_power);
  EXPECT_DOUBLE_EQ(g.dram_power, h.dram_power);
  EXPECT_DOUBLE_EQ(g.floor_clock, h.floor_clock);
  EXPECT_DOUBLE_EQ(g.floor_voltage, h.floor_voltage);
  EXPECT_DOUBLE_EQ(g.min_clock, h.min_clock);
  EXPECT_DOUBLE_EQ(g.in_job_power, h.in_job_power);
  EXPECT_DOUBLE_EQ(g.power_limit, h.power_limit);
  EXPECT_DOUBLE_EQ(g.clock_fraction, h.clock_fraction);

  EXPECT_EQ(a.host.name, b.host.name);
  EXPECT_EQ(a.host.cores, b.host.cores);
  EXPECT_DOUBLE_EQ(a.host.flops, b.host.flops);
  EXPECT_EQ(a.host.memory_bytes, b.host.memory_bytes);
  EXPECT_DOUBLE_EQ(a.host.memory_bandwidth, b.host.memory_bandwidth);
  EXPECT_DOUBLE_EQ(a.host.dispatch.forward, b.host.dispatch.forward);
  EXPECT_DOUBLE_EQ(a.host.dispatch.backward, b.host.dispatch.backward);
  EXPECT_DOUBLE_EQ(a.host.dispatch.optimizer, b.host.dispatch.optimizer);
  EXPECT_DOUBLE_EQ(a.host.torch_save_bandwidth, b.host.torch_save_bandwidth);
  EXPECT_DOUBLE_EQ(a.host.idle_power, b.host.idle_power);
  EXPECT_DOUBLE_EQ(a.host.max_power, b.host.max_power);

  expect_same_link(a.host_link, b.host_link, "host_link");
  EXPECT_EQ(a.gpus_per_node, b.gpus_per_node);
  expect_same_link(a.gpu_link, b.gpu_link, "gpu_link");

  EXPECT_DOUBLE_EQ(a.efficiency.compute_default, b.efficiency.compute_default);
  EXPECT_DOUBLE_EQ(a.efficiency.memory_default, b.efficiency.memory_default);
  EXPECT_DOUBLE_EQ(a.efficiency.tensor_core, b.efficiency.tensor_core);
  EXPECT_EQ(a.efficiency.tensor_core_cuda11, b.efficiency.tensor_core_cuda11);
  EXPECT_EQ(a.efficiency.conv_wave_loss, b.efficiency.conv_wave_loss);
  EXPECT_EQ(a.efficiency.gemm_k_overhead, b.efficiency.gemm_k_overhead);
  EXPECT_EQ(a.efficiency.compute, b.efficiency.compute);
  EXPECT_EQ(a.efficiency.memory, b.efficiency.memory);

  ASSERT_EQ(a.nic.has_value(), b.nic.has_value());
  if (a.nic) {
    EXPECT_EQ(a.nic->name, b.nic->name);
    EXPECT_DOUBLE_EQ(a.nic->bandwidth, b.nic->bandwidth);
    EXPECT_DOUBLE_EQ(a.nic->latency, b.nic->latency);
    EXPECT_EQ(a.nic->per_node, b.nic->per_node);
    EXPECT_DOUBLE_EQ(a.nic->idle_power, b.nic->idle_power);
    EXPECT_DOUBLE_EQ(a.nic->busy_power, b.nic->busy_power);
  }
  ASSERT_EQ(a.network.has_value(), b.network.has_value());
  if (a.network) {
    const models::NetworkSpec& n = *a.network;
    const models::NetworkSpec& m = *b.network;
    EXPECT_EQ(n.topology, m.topology);
    EXPECT_EQ(n.nodes, m.nodes);
    EXPECT_EQ(n.fat_tree.levels, m.fat_tree.levels);
    EXPECT_EQ(n.fat_tree.down, m.fat_tree.down);
    EXPECT_EQ(n.fat_tree.up, m.fat_tree.up);
    EXPECT_EQ(n.fat_tree.links, m.fat_tree.links);
    EXPECT_EQ(n.dragonfly.groups, m.dragonfly.groups);
    EXPECT_EQ(n.dragonfly.group_links, m.dragonfly.group_links);
    EXPECT_EQ(n.dragonfly.chassis, m.dragonfly.chassis);
    EXPECT_EQ(n.dragonfly.chassis_links, m.dragonfly.chassis_links);
    EXPECT_EQ(n.dragonfly.routers, m.dragonfly.routers);
    EXPECT_EQ(n.dragonfly.router_links, m.dragonfly.router_links);
    EXPECT_EQ(n.dragonfly.nodes, m.dragonfly.nodes);
    EXPECT_EQ(n.torus, m.torus);
    expect_same_link(n.link, m.link, "network.link");
  }
  const models::CollectiveLatency& c = a.collectives;
  const models::CollectiveLatency& d = b.collectives;
  EXPECT_DOUBLE_EQ(c.base, d.base);
  EXPECT_DOUBLE_EQ(c.intra_node_step, d.intra_node_step);
  EXPECT_DOUBLE_EQ(c.inter_node_step, d.inter_node_step);
  EXPECT_DOUBLE_EQ(c.network_overhead, d.network_overhead);
  EXPECT_DOUBLE_EQ(c.tree_base, d.tree_base);
  EXPECT_DOUBLE_EQ(c.tree_intra_node_step, d.tree_intra_node_step);
  EXPECT_DOUBLE_EQ(c.tree_inter_node_step, d.tree_inter_node_step);
  EXPECT_EQ(c.algorithm, d.algorithm);

  ASSERT_EQ(a.storage.has_value(), b.storage.has_value());
  if (a.storage) {
    ASSERT_EQ(a.storage->local.has_value(), b.storage->local.has_value());
    if (a.storage->local) {
      EXPECT_EQ(a.storage->local->name, b.storage->local->name);
      EXPECT_DOUBLE_EQ(a.storage->local->read_bandwidth, b.storage->local->read_bandwidth);
      EXPECT_DOUBLE_EQ(a.storage->local->write_bandwidth, b.storage->local->write_bandwidth);
    }
    ASSERT_EQ(a.storage->shared.has_value(), b.storage->shared.has_value());
    if (a.storage->shared) {
      EXPECT_EQ(a.storage->shared->name, b.storage->shared->name);
      EXPECT_DOUBLE_EQ(a.storage->shared->read_bandwidth, b.storage->shared->read_bandwidth);
      EXPECT_DOUBLE_EQ(a.storage->shared->write_bandwidth, b.storage->shared->write_bandwidth);
      EXPECT_DOUBLE_EQ(a.storage->shared->per_node_bandwidth, b.storage->shared->per_node_bandwidth);
      EXPECT_DOUBLE_EQ(a.storage->shared->latency, b.storage->shared->latency);
      EXPECT_DOUBLE_EQ(a.storage->shared->checkpoint_overhead, b.storage->shared->checkpoint_overhead);
    }
  }
}

}  // namespace comptrain::test_support

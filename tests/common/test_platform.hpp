#pragma once
// The test platform: a hand-made GPU whose figures are round numbers, so that tests compute their
// expected values by hand. Every test built on a platform of its own (rather than a shipped one)
// builds it here; TestPlatform names what the tests vary.

#include <cstdint>
#include <string>

#include "comptrain/models/platform.hpp"

namespace comptrain::test_support {

struct TestPlatform {
  std::string gpu_name = "TestGPU";
  std::int64_t memory = 1'000'000'000;  // bytes
  double tensor_core_flops = 0;         // tf32, fp16 and bf16 peaks; 0: fp32's 10 TFLOP/s only
  double host_flops = 1e11;
  double host_link_bandwidth = 10e9;    // bytes/s per direction
  double host_link_latency = 1e-6;      // seconds
};

// 1 TB/s of memory bandwidth and 10 TFLOP/s fp32, with what `spec` gives.
inline models::Platform test_platform(const TestPlatform& spec) {
  models::Platform p;
  p.name = "test";
  p.source = "embedded:test";
  p.gpu.name = spec.gpu_name;
  p.gpu.memory_bytes = spec.memory;
  p.gpu.memory_bandwidth = 1e12;
  p.gpu.peak_fp32 = 1e13;
  p.gpu.peak_tf32 = spec.tensor_core_flops;
  p.gpu.peak_fp16 = spec.tensor_core_flops;
  p.gpu.peak_bf16 = spec.tensor_core_flops;
  p.host.flops = spec.host_flops;
  p.host_link.bandwidth = spec.host_link_bandwidth;
  p.host_link.latency = spec.host_link_latency;
  return p;
}

// The roofline GPU of the strategy and schedule tests: 80 GiB, 100 TFLOP/s on tensor cores, no
// launch overhead, no host FLOP/s, a latency-free host link of `host_link_bandwidth` bytes/s.
inline models::Platform roofline_platform(double host_link_bandwidth = 2.5e10) {
  return test_platform({.gpu_name = "Test GPU",
                        .memory = std::int64_t{80} << 30,
                        .tensor_core_flops = 1e14,
                        .host_flops = 0,
                        .host_link_bandwidth = host_link_bandwidth,
                        .host_link_latency = 0});
}

}  // namespace comptrain::test_support

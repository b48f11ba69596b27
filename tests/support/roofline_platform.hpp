#pragma once
// A hand-made roofline GPU for tests whose expected figures are computed from round numbers:
// 80 GiB, 1 TB/s, 10 TFLOP/s fp32 and 100 TFLOP/s on tensor cores, no launch overhead, a host
// link of `host_link_bandwidth` bytes/s.

#include <cstdint>

#include "comptrain/models/platform.hpp"

namespace comptrain::test_support {

inline models::Platform roofline_platform(double host_link_bandwidth = 2.5e10) {
  models::Platform p;
  p.name = "test";
  p.source = "embedded:test";
  p.gpu.name = "Test GPU";
  p.gpu.memory_bytes = std::int64_t{80} << 30;
  p.gpu.memory_bandwidth = 1e12;
  p.gpu.peak_fp32 = 1e13;
  p.gpu.peak_tf32 = 1e14;
  p.gpu.peak_fp16 = 1e14;
  p.gpu.peak_bf16 = 1e14;
  p.host_link.bandwidth = host_link_bandwidth;
  return p;
}

}  // namespace comptrain::test_support

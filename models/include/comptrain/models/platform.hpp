#pragma once
// A modeled machine: one GPU, its host, and the links between them. Described as data
// (scenarios/platforms/*.yaml, each value with its datasheet source), never as code.

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/traces/vocabulary.hpp"

namespace comptrain::models {

struct GpuSpec {
  std::string name;                 // "NVIDIA A100-SXM4-40GB"
  std::int64_t memory_bytes = 0;    // usable device memory
  double memory_bandwidth = 0;      // HBM/GDDR bytes/s
  double peak_fp32 = 0;             // dense FLOP/s
  double peak_tf32 = 0;             // dense tensor-core FLOP/s (0: no TF32)
  double peak_fp16 = 0;             // dense tensor-core FLOP/s
  double peak_bf16 = 0;             // dense tensor-core FLOP/s (0: no bf16)
  double launch_overhead = 0;       // seconds added to every kernel
  double idle_power = 0;            // W
  double max_power = 0;             // W (TDP)
};

struct HostSpec {
  std::string name;
  int cores = 1;
  double flops = 0;                 // FLOP/s of the whole host
  std::int64_t memory_bytes = 0;
  double memory_bandwidth = 0;      // bytes/s
};

// A full-duplex link: `bandwidth` is per direction.
struct LinkSpec {
  std::string name;                 // "PCIe 4.0 x16"
  double bandwidth = 0;             // bytes/s per direction
  double latency = 0;               // seconds
};

// Fraction of peak reached by each op kind, for the roofline's compute and memory terms.
struct Efficiency {
  double compute_default = 1.0;
  double memory_default = 1.0;
  std::map<traces::OpKind, double> compute;
  std::map<traces::OpKind, double> memory;
  double compute_for(traces::OpKind kind) const;
  double memory_for(traces::OpKind kind) const;
};

struct Platform {
  std::string name;                 // "a100-40gb"
  std::string source;               // file or "embedded:NAME", for messages and reports
  GpuSpec gpu;
  HostSpec host;
  LinkSpec host_link;               // GPU <-> host (PCIe)
  int gpus_per_node = 1;
  LinkSpec gpu_link;                // GPU <-> GPU (NVLink); bandwidth 0 when absent
  Efficiency efficiency;

  // Peak FLOP/s for arithmetic in `dtype` (fp32 uses TF32 tensor cores when `allow_tf32`).
  double peak_flops(traces::DType dtype, bool allow_tf32) const;
};

// Parses a platform description (YAML). `source` names it in errors; every error is an
// InputError "SOURCE:LINE:COLUMN: problem; expected ...": unknown keys (listing the valid
// ones), missing keys, wrong types, values out of range. Quantities accept units:
// "40 GiB", "1555 GB/s", "19.5 TFLOP/s", "5 us", "400 W" (see scenarios/platforms/README.md).
Platform parse_platform(std::string_view yaml, std::string_view source);
Platform load_platform_file(const std::filesystem::path& path);

// The platforms shipped in scenarios/platforms/ (embedded in the binary at build time).
std::vector<std::string> builtin_platform_names();
Platform builtin_platform(std::string_view name);  // InputError listing the names if unknown
// The shipped platforms whose gpu.name is `gpu_name` exactly (a device's name, as CUDA reports it).
std::vector<std::string> builtin_platforms_with_gpu(std::string_view gpu_name);

}  // namespace comptrain::models

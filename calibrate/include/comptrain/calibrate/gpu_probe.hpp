#pragma once
// The measurement primitives of `comptrain calibrate --device cuda` on one GPU, behind one
// interface: implemented with CUDA in src/cuda_probe.cu, a plug-in module
// (libcomptrain_cuda_probe.so) that only `calibrate --device cuda` loads, so no other command
// pays for loading the CUDA runtime and cuBLAS; and by fakes in the tests.

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/kernels/codec.hpp"

namespace comptrain::calibrate {

// The copies the offload strategy and the memory model stand on.
enum class CopyKind { h2d_pinned, d2h_pinned, h2d_pageable, d2h_pageable, d2d };
inline constexpr std::array<CopyKind, 5> kCopyKinds = {CopyKind::h2d_pinned, CopyKind::d2h_pinned, CopyKind::h2d_pageable,
                                                       CopyKind::d2h_pageable, CopyKind::d2d};
std::string_view to_string(CopyKind kind);

// GEMM input types and accumulation as training uses them: fp32 (no tensor cores), tf32
// (fp32 data, TF32 tensor cores), fp16 and bf16 (16-bit data, fp32 accumulation).
enum class GemmPrecision { fp32, tf32, fp16, bf16 };
inline constexpr std::array<GemmPrecision, 4> kGemmPrecisions = {GemmPrecision::fp32, GemmPrecision::tf32, GemmPrecision::fp16,
                                                                GemmPrecision::bf16};
std::string_view to_string(GemmPrecision precision);

// C[m x n] = A[m x k] B[k x n], column-major, no transposes.
struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0;
  bool layer_shaped = false;  // the shape of a transformer layer's GEMM (not a square peak probe)
  std::string what;           // "square 4096", "GPT-2 MLP up (b8 s1024)"
};

struct GemmMeasurement {
  GemmPrecision precision = GemmPrecision::fp32;
  GemmShape shape;
  double seconds = 0;  // fastest run
  double flop_rate() const { return 2.0 * static_cast<double>(shape.m) * static_cast<double>(shape.n) * static_cast<double>(shape.k) / seconds; }
};

struct GpuInfo {
  std::string name;               // cudaDeviceProp::name, as traces' measured.device spell it
  std::int64_t memory_bytes = 0;  // cudaDeviceProp::totalGlobalMem
  int multiprocessors = 0;
  int compute_major = 0, compute_minor = 0;
  int device_count = 1;           // GPUs visible to the process
  std::string runtime;            // "CUDA runtime 13.0, driver 13.0"
};

// The measurement primitives on one GPU. Every time is the fastest of `reps` runs after one
// untimed warm-up, timed with device events (cudaEventElapsedTime) unless the implementation
// says otherwise.
class GpuProbe {
 public:
  virtual ~GpuProbe() = default;
  virtual GpuInfo info() const = 0;
  // Codecs the device driver implements (kernels::cuda: szp, zeros).
  virtual std::vector<kernels::CodecId> codecs() const = 0;

  struct CodecTimes {
    double compress = 0;    // seconds: range pass (REL) + encode + chunk-size round trip + gather
    double decompress = 0;  // seconds: decode kernel
  };
  // `values` are copied to the device first (not timed); input and output stay on the device.
  virtual CodecTimes time_codec(kernels::CodecId codec, std::span<const float> values, double eb, int reps) = 0;
  // Bytes of the stream the device writes for `values` (byte-identical to the CPU driver's).
  virtual std::size_t compressed_size(kernels::CodecId codec, std::span<const float> values, double eb) = 0;
  // Seconds of one copy of `bytes`.
  virtual double time_copy(CopyKind kind, std::uint64_t bytes, int reps) = 0;
  // Seconds of one GEMM; nullopt when the GPU has no such precision (TF32 / bf16 before sm_80).
  virtual std::optional<double> time_gemm(GemmPrecision precision, const GemmShape& shape, int reps) = 0;
  // Seconds per launch of an empty kernel, launched `launches` times back to back.
  virtual double launch_overhead(int launches) = 0;
};

// Whether this build has the CUDA probe (nvcc was found at configure time).
bool built_with_cuda();
// The CUDA probe on device 0, from the plug-in module: $COMPTRAIN_CUDA_PROBE if set, else
// libcomptrain_cuda_probe.so next to the executable, else where the build wrote it. InputError
// (exit 2) when built without CUDA, when the module cannot be loaded, or when the CUDA runtime
// finds no usable device (its error string is quoted).
std::unique_ptr<GpuProbe> open_cuda_probe();

}  // namespace comptrain::calibrate

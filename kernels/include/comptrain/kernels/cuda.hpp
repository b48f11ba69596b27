#pragma once
// CUDA driver of the chunked codecs (szp, zeros): the same stage code as the CPU driver, so the
// streams are byte-identical. Declared only; defined in src/cuda_driver.cu, which is built
// (library comptrain::kernels_cuda) only when nvcc is found (COMPTRAIN_HAVE_CUDA).

#include <cstddef>
#include <span>
#include <vector>

#include "comptrain/kernels/codec.hpp"

namespace comptrain::kernels::cuda {

// Device-side timings of the last call, from CUDA events (milliseconds).
struct Timings {
  float range_ms = 0;   // min/max pass (rel mode only)
  float encode_ms = 0;  // encode kernel + chunk gather (compress) or decode kernel (decompress)
};

// `device_data` points to `shape.count()` floats in device memory. Codec must be szp or zeros.
std::vector<std::byte> compress(const float* device_data, const Shape& shape, const CompressOptions& options,
                                Timings* timings = nullptr);
// Decodes into `device_out` (room for the stream's element count, device memory).
void decompress(std::span<const std::byte> stream, float* device_out, Timings* timings = nullptr);

}  // namespace comptrain::kernels::cuda

#pragma once
// ZFP fixed-accuracy mode (libzfp 1.0) behind the codec interface. Private to the library.

#include <cstdint>
#include <span>
#include <vector>

#include "comptrain/kernels/codec.hpp"

namespace comptrain::kernels::detail {

// Worst-case zfp payload for this shape (zfp_stream_maximum_size).
std::uint64_t zfp_max_payload(const Shape& shape, double tolerance);
// Writes the zfp bit stream (no zfp header: shape and tolerance live in ours) at `out`; returns
// its size. Throws InputError when it does not fit.
std::uint64_t zfp_compress(std::span<const float> data, const Shape& shape, double tolerance, std::span<std::byte> out);
void zfp_decompress(std::span<const std::byte> payload, const Shape& shape, double tolerance, std::span<float> out);

}  // namespace comptrain::kernels::detail

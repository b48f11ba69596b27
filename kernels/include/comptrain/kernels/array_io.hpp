#pragma once
// Reading and writing float32 arrays: raw little-endian files and NumPy .npy (format 1.0-3.0,
// dtype '<f4', C order). The .npy header is parsed strictly: anything else is an InputError.

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/kernels/codec.hpp"

namespace comptrain::kernels {

struct FloatArray {
  Shape shape;
  std::vector<float> values;
};

// `bytes` is the whole file; `name` is used in error messages.
FloatArray parse_npy(std::string_view bytes, const std::string& name);
FloatArray parse_raw_f32(std::string_view bytes, const std::string& name);
std::string format_npy(std::span<const float> values, const Shape& shape);

}  // namespace comptrain::kernels

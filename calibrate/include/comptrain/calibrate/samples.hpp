#pragma once
// Activation-like synthetic data per tensor class (calibrate/README.md, "Samples").

#include <cstdint>
#include <span>
#include <vector>

#include "comptrain/models/compression_model.hpp"

namespace comptrain::calibrate {

// `n` values of class `c` drawn with parameters from `seed` (different seeds: different
// zero fractions, correlations, scales). `generic` draws one of the other four at random.
std::vector<float> synthetic_activation(models::TensorClass c, std::size_t n, std::uint32_t seed);

// Zero fraction and spread (std / range over the finite values; 0 when the range is 0).
models::DataFeatures features_of(std::span<const float> values);

}  // namespace comptrain::calibrate

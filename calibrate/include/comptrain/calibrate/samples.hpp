#pragma once
// Activation-like synthetic data per tensor class (calibrate/README.md, "Samples").

#include <cstdint>
#include <span>
#include <vector>

#include "comptrain/models/compression_model.hpp"

namespace comptrain::calibrate {

// `n` values of class `c` drawn with parameters from `seed` (different seeds: different
// layouts, zero fractions, correlations, scales). post_relu and batchnorm are NCHW conv
// activations with per-channel offsets and scales; gelu and linear are (tokens, features)
// transformer activations with per-feature biases, scales and outlier features (samples.cpp
// says why). `generic` draws one of the other four at random.
std::vector<float> synthetic_activation(models::TensorClass c, std::size_t n, std::uint32_t seed);

// The features the ratio model uses (models::DataFeatures): zero fraction, spread (std / range
// over the finite values), fraction of all-zero 32-value blocks and block scale (0 when the
// range is 0).
models::DataFeatures features_of(std::span<const float> values);

}  // namespace comptrain::calibrate

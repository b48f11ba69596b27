// Fitting recovers known parameters; synthetic samples have the features they promise.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "comptrain/calibrate/fit.hpp"
#include "comptrain/calibrate/samples.hpp"

namespace comptrain::calibrate {
namespace {

TEST(FitTime, RecoversLatencyAndBandwidthExactly) {
  std::vector<TimeSample> samples;
  for (double bytes = 65536; bytes <= 1 << 30; bytes *= 4) samples.push_back({bytes, 12e-6 + bytes / 3.5e9});
  const models::TimeModel m = fit_time_model(samples);
  EXPECT_NEAR(m.latency, 12e-6, 1e-9);
  EXPECT_NEAR(m.bandwidth, 3.5e9, 3.5e9 * 1e-6);
  EXPECT_NEAR(m.r2, 1.0, 1e-12);
  EXPECT_LT(m.max_relative_error, 1e-6);
}

TEST(FitTime, RecoversParametersUnderNoise) {
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(0.0, 0.02);  // 2 % timing noise
  std::vector<TimeSample> samples;
  for (int rep = 0; rep < 5; ++rep) {
    for (double bytes = 65536; bytes <= 1 << 30; bytes *= 4) samples.push_back({bytes, (50e-6 + bytes / 2e9) * (1 + noise(rng))});
  }
  const models::TimeModel m = fit_time_model(samples);
  EXPECT_NEAR(m.latency, 50e-6, 5e-6);
  EXPECT_NEAR(m.bandwidth, 2e9, 2e9 * 0.03);
  EXPECT_GT(m.r2, 0.99);
}

TEST(FitTime, NegativeLatencyIsRefittedThroughTheOrigin) {
  // Pure bandwidth with a slight superlinearity: an unconstrained fit gives latency < 0.
  std::vector<TimeSample> samples;
  for (double bytes = 65536; bytes <= 1 << 24; bytes *= 4) samples.push_back({bytes, bytes / 1e9 * (1 + 0.01 * std::log2(bytes / 65536))});
  const models::TimeModel m = fit_time_model(samples);
  EXPECT_EQ(m.latency, 0.0);
  EXPECT_GT(m.bandwidth, 0.0);
}

// Noisy timings where the small sizes ran slowest (a busy machine: calibrate --quick's fp16 on a
// loaded CI VM): the affine fit's time falls with the size; refitted through the origin, the
// model still grows with it instead of failing.
TEST(FitTime, TimesFallingWithTheSizeAreRefittedThroughTheOrigin) {
  const std::vector<TimeSample> samples = {{65536, 4e-3}, {262144, 3e-3}, {1048576, 2.5e-3}, {4194304, 2.6e-3}, {16777216, 2.4e-3}};
  const models::TimeModel m = fit_time_model(samples);
  EXPECT_EQ(m.latency, 0.0);
  EXPECT_GT(m.bandwidth, 0.0);
  EXPECT_TRUE(std::isfinite(m.bandwidth));
  EXPECT_LT(m.seconds(65536), m.seconds(16777216));
}

// Bits per value of RatioModel's form with the coefficients below.
double known_bits(double eb, const models::DataFeatures& f) {
  return 2.0 + 1.5 * f.zero_fraction + 0.3 * f.zero_block_fraction +
         (1.0 - f.zero_block_fraction) * (-1.4 * std::log(eb) + 1.2 * std::log(f.block_scale) + 0.4 * std::log(f.spread));
}

TEST(FitRatio, RecoversCoefficientsAndReportsHeldOutError) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<RatioSample> samples;
  for (int i = 0; i < 200; ++i) {
    RatioSample s;
    s.eb = std::pow(10.0, -4.0 + 2.0 * u(rng));
    s.features.zero_fraction = u(rng);
    s.features.zero_block_fraction = 0.5 * s.features.zero_fraction * u(rng);
    s.features.block_scale = 0.05 + 0.5 * u(rng);
    s.features.spread = 0.05 + 0.2 * u(rng);
    s.ratio = 32.0 / known_bits(s.eb, s.features);
    s.heldout = i % 4 == 3;
    samples.push_back(s);
  }
  const models::RatioModel m = fit_ratio_model(samples);
  EXPECT_NEAR(m.c0, 2.0, 1e-6);
  EXPECT_NEAR(m.c_zero, 1.5, 1e-6);
  EXPECT_NEAR(m.c_zero_block, 0.3, 1e-6);
  EXPECT_NEAR(m.c_log_eb, -1.4, 1e-6);
  EXPECT_NEAR(m.c_log_scale, 1.2, 1e-6);
  EXPECT_NEAR(m.c_log_spread, 0.4, 1e-6);
  EXPECT_EQ(m.train_samples, 150u);
  EXPECT_EQ(m.heldout_samples, 50u);
  EXPECT_LT(m.heldout_max_relative_error, 1e-6);
  // The model reproduces the ratios it was fitted to (none reach max_ratio here).
  for (const auto& s : samples) EXPECT_NEAR(m.ratio(s.eb, s.features), s.ratio, 1e-6 * s.ratio);
  // Defaults: mean fractions, geometric-mean scale and spread.
  double log_scale = 0;
  for (const auto& s : samples) log_scale += std::log(s.features.block_scale);
  EXPECT_NEAR(m.default_features.block_scale, std::exp(log_scale / 200), 1e-12);
}

TEST(FitRatio, ConstantFeatureGetsZeroCoefficient) {
  // Batch-norm outputs have no zeros: the zero-fraction columns are all 0 and must not break the fit.
  std::vector<RatioSample> samples;
  for (int i = 0; i < 12; ++i) {
    RatioSample s;
    s.eb = std::pow(10.0, -4.0 + 0.2 * i);
    s.features.spread = 0.1 + 0.01 * (i % 3);
    s.features.block_scale = 0.2 + 0.03 * (i % 4);
    s.ratio = 32.0 / (1.0 - 1.3 * std::log(s.eb) + 1.1 * std::log(s.features.block_scale));
    samples.push_back(s);
  }
  const models::RatioModel m = fit_ratio_model(samples);
  EXPECT_NEAR(m.c_log_eb, -1.3, 1e-6);
  EXPECT_NEAR(m.c_log_scale, 1.1, 1e-6);
  EXPECT_NEAR(m.c_log_spread, 0.0, 1e-6);
  EXPECT_EQ(m.c_zero, 0.0);
  EXPECT_EQ(m.c_zero_block, 0.0);
}

TEST(FitRatio, FractionThatBarelyVariesIsLeftOut) {
  // A handful of exact zeros per million values (GELU's underflowing tail): the zero-fraction
  // column varies by 1e-4 and would otherwise get a huge coefficient fitted to noise.
  std::vector<RatioSample> samples;
  for (int i = 0; i < 24; ++i) {
    RatioSample s;
    s.eb = std::pow(10.0, -4.0 + 0.1 * i);
    s.features.zero_fraction = 1e-4 * (i % 5);
    s.features.spread = 0.1;
    s.features.block_scale = 0.3;
    s.ratio = 32.0 / (2.0 - 1.4 * std::log(s.eb)) * (1.0 + 0.01 * ((i * 7) % 3 - 1));
    samples.push_back(s);
  }
  const models::RatioModel m = fit_ratio_model(samples);
  EXPECT_EQ(m.c_zero, 0.0);
  EXPECT_NEAR(m.c_log_eb, -1.4, 0.05);
}

TEST(RatioModel, BitsPerValueClampedToTheFittedRange) {
  models::RatioModel m;
  m.c0 = 2;
  m.c_log_eb = -1;
  m.max_ratio = 12;
  const models::DataFeatures f{.zero_fraction = 0, .spread = 0.1, .zero_block_fraction = 0, .block_scale = 0.2};
  EXPECT_DOUBLE_EQ(m.ratio(1e-2, f), 32.0 / (2 - std::log(1e-2)));
  EXPECT_DOUBLE_EQ(m.ratio(1e-40, f), 1.0);                  // more than 32 bits per value: no expansion
  EXPECT_DOUBLE_EQ(m.ratio(1e3, f), 12.0);                   // bits <= 0: the largest ratio seen
  m.c_zero_block = -5;                                        // all blocks zero: c0 + c_zero_block only
  const models::DataFeatures zeros{.zero_fraction = 1, .spread = 0, .zero_block_fraction = 1, .block_scale = 0};
  EXPECT_DOUBLE_EQ(m.ratio(1e-3, zeros), 12.0);
}

TEST(Features, BlocksAsSzpCutsThem) {
  // Block 0: all zeros. Block 1: a ramp 1, 2, ..., 32 (Lorenzo steps of 1 from 0: magnitude 1,
  // no negative step). Block 2 (short, 8 values): -4 and 4 alternating (no prediction: 4,
  // negative values: doubled to 8; Lorenzo: steps of 8, also negative: 16). Range 36.
  std::vector<float> v(72, 0.0f);
  for (int i = 0; i < 32; ++i) v[static_cast<std::size_t>(32 + i)] = static_cast<float>(i + 1);
  for (int i = 0; i < 8; ++i) v[static_cast<std::size_t>(64 + i)] = i % 2 ? 4.0f : -4.0f;
  const auto f = features_of(v);
  EXPECT_DOUBLE_EQ(f.zero_fraction, 32.0 / 72.0);
  EXPECT_DOUBLE_EQ(f.zero_block_fraction, 1.0 / 3.0);
  EXPECT_NEAR(f.block_scale, std::sqrt((1.0 / 36.0) * (8.0 / 36.0)), 1e-12);
  EXPECT_GT(f.spread, 0.0);
  const auto constant = features_of(std::vector<float>(100, 3.0f));
  EXPECT_EQ(constant.spread, 0.0);
  EXPECT_EQ(constant.block_scale, 0.0);
  EXPECT_EQ(constant.zero_block_fraction, 0.0);
}

TEST(Samples, PostReluHasItsZerosAndOthersHaveNone) {
  for (std::uint32_t seed = 1; seed < 5; ++seed) {
    const auto relu = synthetic_activation(models::TensorClass::post_relu, 1 << 14, seed);
    const auto f = features_of(relu);
    EXPECT_GE(f.zero_fraction, 0.1);
    EXPECT_LE(f.zero_fraction, 0.95);
    EXPECT_LE(f.zero_block_fraction, f.zero_fraction);
    EXPECT_GT(f.spread, 0.0);
    EXPECT_GT(f.block_scale, 0.0);
    for (auto c : {models::TensorClass::batchnorm, models::TensorClass::gelu, models::TensorClass::linear}) {
      const auto g = features_of(synthetic_activation(c, 1 << 14, seed));
      EXPECT_LT(g.zero_fraction, 0.01);
      EXPECT_EQ(g.zero_block_fraction, 0.0);
      EXPECT_GT(g.block_scale, 0.0);
    }
  }
}

TEST(Samples, SomeConvActivationsHaveDeadChannels) {
  // Channel offsets (tau up to 1.5 within-channel deviations) switch whole channels off after a
  // ReLU: all-zero 32-value blocks, which a single offset for the whole tensor rarely gives.
  double most = 0;
  for (std::uint32_t seed = 1; seed < 9; ++seed) {
    most = std::max(most, features_of(synthetic_activation(models::TensorClass::post_relu, 1 << 16, seed)).zero_block_fraction);
  }
  EXPECT_GT(most, 0.05);
}

}  // namespace
}  // namespace comptrain::calibrate

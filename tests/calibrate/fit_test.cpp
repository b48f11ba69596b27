// Fitting recovers known parameters; synthetic samples have the features they promise.

#include <gtest/gtest.h>

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

TEST(FitRatio, RecoversCoefficientsAndReportsHeldOutError) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<RatioSample> samples;
  for (int i = 0; i < 200; ++i) {
    RatioSample s;
    s.eb = std::pow(10.0, -4.0 + 2.0 * u(rng));
    s.features.zero_fraction = u(rng);
    s.features.spread = 0.05 + 0.2 * u(rng);
    s.ratio = std::exp(0.4 - 0.3 * std::log(s.eb) + 1.5 * s.features.zero_fraction - 0.2 * std::log(s.features.spread));
    s.heldout = i % 4 == 3;
    samples.push_back(s);
  }
  const models::RatioModel m = fit_ratio_model(samples);
  EXPECT_NEAR(m.c0, 0.4, 1e-6);
  EXPECT_NEAR(m.c_log_eb, -0.3, 1e-6);
  EXPECT_NEAR(m.c_zero, 1.5, 1e-6);
  EXPECT_NEAR(m.c_log_spread, -0.2, 1e-6);
  EXPECT_EQ(m.train_samples, 150u);
  EXPECT_EQ(m.heldout_samples, 50u);
  EXPECT_LT(m.heldout_max_relative_error, 1e-6);
}

TEST(FitRatio, ConstantFeatureGetsZeroCoefficient) {
  // Batch-norm outputs have no zeros: the zero-fraction column is all 0 and must not break the fit.
  std::vector<RatioSample> samples;
  for (int i = 0; i < 12; ++i) {
    RatioSample s;
    s.eb = std::pow(10.0, -4.0 + 0.2 * i);
    s.features.spread = 0.1 + 0.01 * (i % 3);
    s.ratio = std::exp(1.0 - 0.25 * std::log(s.eb));
    samples.push_back(s);
  }
  const models::RatioModel m = fit_ratio_model(samples);
  EXPECT_NEAR(m.c_log_eb, -0.25, 1e-6);
  EXPECT_NEAR(m.c_zero, 0.0, 1e-9);
}

TEST(Samples, PostReluHasItsZerosAndOthersHaveNone) {
  for (std::uint32_t seed = 1; seed < 5; ++seed) {
    const auto relu = synthetic_activation(models::TensorClass::post_relu, 1 << 14, seed);
    const auto f = features_of(relu);
    EXPECT_GE(f.zero_fraction, 0.15);
    EXPECT_LE(f.zero_fraction, 0.95);
    EXPECT_GT(f.spread, 0.0);
    for (auto c : {models::TensorClass::batchnorm, models::TensorClass::gelu, models::TensorClass::linear}) {
      EXPECT_LT(features_of(synthetic_activation(c, 1 << 14, seed)).zero_fraction, 0.01);
    }
  }
}

}  // namespace
}  // namespace comptrain::calibrate

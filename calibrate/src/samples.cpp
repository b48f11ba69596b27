#include "comptrain/calibrate/samples.hpp"

#include <cmath>
#include <random>

namespace comptrain::calibrate {
namespace {

// x with P(N(0,1) < x) = p, by bisection on erfc (only used to set a ReLU's zero fraction).
double normal_quantile(double p) {
  double lo = -10, hi = 10;
  for (int i = 0; i < 100; ++i) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

// Unit-variance AR(1) series: neighbouring values of conv / norm outputs (same channel, adjacent
// pixels) are correlated, which is what the codec's Lorenzo predictor exploits.
std::vector<double> ar1_normal(std::size_t n, double rho, std::mt19937& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> v(n);
  const double innovation = std::sqrt(1.0 - rho * rho);
  double x = normal(rng);
  for (auto& e : v) {
    x = rho * x + innovation * normal(rng);
    e = x;
  }
  return v;
}

}  // namespace

std::vector<float> synthetic_activation(models::TensorClass c, std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  if (c == models::TensorClass::generic) {
    constexpr models::TensorClass kOthers[] = {models::TensorClass::post_relu, models::TensorClass::batchnorm,
                                               models::TensorClass::gelu, models::TensorClass::linear};
    return synthetic_activation(kOthers[rng() % 4], n, static_cast<std::uint32_t>(rng()));
  }
  std::vector<float> out(n);
  switch (c) {
    case models::TensorClass::post_relu: {
      // ReLU(conv output): pre-activations ~ correlated normal, shifted so that a fraction
      // zf in [0.2, 0.9] is negative (then exactly 0), scaled by s in [0.1, 10].
      const double zf = 0.2 + 0.7 * u(rng), rho = 0.9 * u(rng), scale = std::pow(10.0, -1.0 + 2.0 * u(rng));
      const double shift = -normal_quantile(zf);
      const auto z = ar1_normal(n, rho, rng);
      for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(scale * std::max(0.0, z[i] + shift));
      break;
    }
    case models::TensorClass::batchnorm: {
      // gamma z + beta: normal with the learnt affine parameters, correlated like its input.
      const double gamma = 0.5 + 1.5 * u(rng), beta = u(rng) - 0.5, rho = 0.9 * u(rng);
      const auto z = ar1_normal(n, rho, rng);
      for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(gamma * z[i] + beta);
      break;
    }
    case models::TensorClass::gelu: {
      // GELU(x) = x Phi(x) of a normal pre-activation N(mu, sigma): no exact zeros, a dense
      // cluster of small negative values (min -0.17), a positive tail.
      const double mu = -1.0 + 1.5 * u(rng), sigma = 0.5 + 1.5 * u(rng), rho = 0.5 * u(rng);
      const auto z = ar1_normal(n, rho, rng);
      for (std::size_t i = 0; i < n; ++i) {
        const double x = mu + sigma * z[i];
        out[i] = static_cast<float>(x * 0.5 * std::erfc(-x / std::sqrt(2.0)));
      }
      break;
    }
    case models::TensorClass::linear: {
      // Linear / attention projections: little spatial correlation, heavy tails (outlier
      // features): Student t with nu in [3, 30] degrees of freedom.
      const double nu = 3.0 + 27.0 * u(rng), scale = std::pow(10.0, -1.0 + 2.0 * u(rng));
      std::student_t_distribution<double> t(nu);
      for (auto& x : out) x = static_cast<float>(scale * t(rng));
      break;
    }
    case models::TensorClass::generic: break;
  }
  return out;
}

models::DataFeatures features_of(std::span<const float> values) {
  models::DataFeatures f;
  std::size_t zeros = 0, finite = 0;
  double lo = INFINITY, hi = -INFINITY, sum = 0, sum_sq = 0;
  for (float x : values) {
    if (x == 0.0f) ++zeros;
    if (!std::isfinite(x)) continue;
    ++finite;
    lo = std::min(lo, double{x});
    hi = std::max(hi, double{x});
    sum += x;
    sum_sq += double{x} * double{x};
  }
  if (!values.empty()) f.zero_fraction = static_cast<double>(zeros) / static_cast<double>(values.size());
  if (finite > 0 && hi > lo) {
    const double mean = sum / static_cast<double>(finite);
    const double variance = std::max(0.0, sum_sq / static_cast<double>(finite) - mean * mean);
    f.spread = std::sqrt(variance) / (hi - lo);
  }
  return f;
}

}  // namespace comptrain::calibrate

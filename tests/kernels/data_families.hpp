#pragma once
// Synthetic data families for the property tests: the shapes of data that break compressors.

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace comptrain::kernels::testing {

struct Family {
  std::string name;
  std::vector<float> values;
};

// Post-ReLU-like: a fraction `zeros` of exact zeros, the rest half-normal with scale 1.
inline std::vector<float> relu_like(std::size_t n, double zeros, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng) < zeros ? 0.0f : std::fabs(normal(rng));
  return v;
}

inline std::vector<Family> families(std::size_t n = 20011) {  // not a multiple of 32, crosses chunks
  std::vector<Family> f;
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::cauchy_distribution<float> cauchy(0.0f, 1.0f);

  std::vector<float> smooth(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(i) / 200.0;
    smooth[i] = static_cast<float>(std::sin(t) + 0.3 * std::cos(3.7 * t) + 0.01 * t);
  }
  f.push_back({"smooth", smooth});
  std::vector<float> noise(n);
  for (auto& x : noise) x = uniform(rng);
  f.push_back({"noise", noise});
  f.push_back({"relu0", relu_like(n, 0.0, 1)});
  f.push_back({"relu50", relu_like(n, 0.5, 2)});
  f.push_back({"relu95", relu_like(n, 0.95, 3)});
  std::vector<float> heavy(n);
  for (auto& x : heavy) x = cauchy(rng);
  f.push_back({"heavy_tailed", heavy});
  std::vector<float> huge(n);  // |x| >> eb * 2^24 next to O(1e-3) values
  for (std::size_t i = 0; i < n; ++i) huge[i] = (i % 7 == 0) ? normal(rng) * 1e30f : normal(rng) * 1e-3f;
  f.push_back({"huge_range", huge});
  std::vector<float> special = relu_like(n, 0.3, 4);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), -0.0f, std::numeric_limits<float>::denorm_min(),
                            -1e-40f, std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest(),
                            std::bit_cast<float>(0x7fa00001u) /* signalling NaN with payload */,
                            std::bit_cast<float>(0xffc12345u) /* negative NaN with payload */};
  for (std::size_t i = 0; i < n; i += 13) special[i] = specials[(i / 13) % std::size(specials)];
  f.push_back({"nan_inf_mixed", special});
  std::vector<float> denormal(n);
  for (auto& x : denormal) x = uniform(rng) * 1e-39f;
  f.push_back({"denormals", denormal});
  f.push_back({"constant", std::vector<float>(n, 3.25f)});
  f.push_back({"zeros_only", std::vector<float>(n, 0.0f)});
  f.push_back({"empty", {}});
  f.push_back({"one_value", {0.7f}});
  std::vector<float> short33(33);
  for (auto& x : short33) x = normal(rng);
  f.push_back({"len33", short33});
  return f;
}

}  // namespace comptrain::kernels::testing

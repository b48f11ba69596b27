#include "comptrain/calibrate/samples.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

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

// One channel's H x W plane: a unit-variance field with correlation rho between horizontal and
// between vertical neighbours (a separable AR(1): each row an AR(1) series, then an AR(1) filter
// down each column). Neighbouring pixels of conv / norm outputs are correlated, which is what
// the codecs' Lorenzo predictors exploit; the plane is contiguous in memory (NCHW).
void correlated_plane(std::size_t side, double rho, std::mt19937& rng, std::vector<double>& plane) {
  std::normal_distribution<double> normal(0.0, 1.0);
  const double innovation = std::sqrt(1.0 - rho * rho);
  plane.resize(side * side);
  for (std::size_t i = 0; i < side; ++i) {
    double x = normal(rng);
    for (std::size_t j = 0; j < side; ++j) {
      if (j > 0) x = rho * x + innovation * normal(rng);
      double& v = plane[i * side + j];
      v = i == 0 ? x : rho * plane[(i - 1) * side + j] + innovation * x;
    }
  }
}

// NCHW activations of a conv net before the activation function, flattened: channels of
// side x side pixels (side 4..64: the spatial sizes from a ResNet's last stage to its first),
// each a correlated plane with its own mean and scale. Real tensors are like this: batch norm's
// per-channel gamma and beta, and each channel's response to the previous layer, give every
// channel its own offset (resnet18's layer1.0.bn2 output: the channel means vary as much as the
// values inside a channel) and, after a ReLU, its own zero fraction, down to dead channels.
// Values: mean + channel_offset + channel_scale * plane; channel offsets ~ N(0, tau^2) with tau in
// [0, 1.5] (in units of the within-channel deviation), channel scales exp(N(0, kappa^2)) with kappa
// in [0, 0.5], correlation rho in [0, 0.9]. `mean` < 0 sets a ReLU's zero fraction.
struct ChannelLayout {
  std::size_t side = 0;
  double rho = 0, tau = 0, kappa = 0;
};
ChannelLayout draw_channel_layout(std::mt19937& rng) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  ChannelLayout l;
  l.side = std::size_t{4} << (rng() % 5);
  l.rho = 0.9 * u(rng);
  l.tau = 1.5 * u(rng);
  l.kappa = 0.5 * u(rng);
  return l;
}
std::vector<double> nchw_preactivation(std::size_t n, const ChannelLayout& l, double mean, std::mt19937& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> out(n), plane;
  const std::size_t plane_values = l.side * l.side;
  for (std::size_t start = 0; start < n; start += plane_values) {
    const double offset = mean + l.tau * normal(rng), scale = std::exp(l.kappa * normal(rng));
    correlated_plane(l.side, l.rho, rng, plane);
    for (std::size_t i = 0; i < plane_values && start + i < n; ++i) out[start + i] = offset + scale * plane[i];
  }
  return out;
}

// Transformer activations (tokens, features), features contiguous: next to no correlation
// between neighbouring features (resnet-style Lorenzo gains do not apply), but every feature has
// its own bias and scale, a few "outlier features" are far larger than the rest (Dettmers et al.,
// LLM.int8(), 2022), and values may be heavy-tailed. Unit-scale values: bias_f + scale_f * t,
// with features 64..4096; t normal in half of the draws (a layer with random weights gives
// normal outputs) and Student's t with nu in [3, 30] in the other half (normalised to unit
// variance); biases ~ N(0, beta^2) with beta in [0, 0.5], scales exp(N(0, kappa^2)) with kappa in
// [0, 0.5], and in half of the draws a fraction up to 1 % of the features scaled by 5..20.
std::vector<double> token_features(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::normal_distribution<double> normal(0.0, 1.0);
  const std::size_t features = std::size_t{64} << (rng() % 7);
  const double nu = u(rng) < 0.5 ? 0.0 : 3.0 + 27.0 * u(rng), beta = 0.5 * u(rng), kappa = 0.5 * u(rng);
  const double outliers = u(rng) < 0.5 ? 0.0 : 0.01 * u(rng);
  std::vector<double> bias(features), scale(features);
  for (std::size_t f = 0; f < features; ++f) {
    bias[f] = beta * normal(rng);
    scale[f] = std::exp(kappa * normal(rng)) * (u(rng) < outliers ? 5.0 + 15.0 * u(rng) : 1.0);
  }
  std::vector<double> out(n);
  if (nu == 0) {  // normal
    for (std::size_t i = 0; i < n; ++i) out[i] = bias[i % features] + scale[i % features] * normal(rng);
  } else {
    const double unit = std::sqrt((nu - 2.0) / nu);
    std::student_t_distribution<double> t(nu);
    for (std::size_t i = 0; i < n; ++i) out[i] = bias[i % features] + scale[i % features] * unit * t(rng);
  }
  return out;
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
      // ReLU of NCHW pre-activations, scaled by s in [0.1, 10]. The mean is set so that a
      // fraction zf in [0.2, 0.9] of the values is negative (then exactly 0) over the tensor
      // (exactly so without channel scales: the pre-activation is N(mean, 1 + tau^2)); channels
      // differ around it.
      const ChannelLayout layout = draw_channel_layout(rng);
      const double zf = 0.2 + 0.7 * u(rng), scale = std::pow(10.0, -1.0 + 2.0 * u(rng));
      const double mean = -normal_quantile(zf) * std::sqrt(1.0 + layout.tau * layout.tau);
      const auto z = nchw_preactivation(n, layout, mean, rng);
      for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(scale * std::max(0.0, z[i]));
      break;
    }
    case models::TensorClass::batchnorm: {
      // Batch-norm outputs: NCHW values with an overall mean beta in [-0.5, 0.5] and scale gamma
      // in [0.1, 10] (each channel then has its own, drawn around them).
      const ChannelLayout layout = draw_channel_layout(rng);
      const double beta = u(rng) - 0.5, gamma = std::pow(10.0, -1.0 + 2.0 * u(rng));
      const auto z = nchw_preactivation(n, layout, beta, rng);
      for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(gamma * z[i]);
      break;
    }
    case models::TensorClass::gelu: {
      // GELU(x) = x Phi(x) of a transformer pre-activation mu + sigma * v (v: token_features),
      // mu in [-1, 0.5], sigma in [0.5, 2]: no exact zeros, a dense cluster of small negative
      // values (min -0.17), a positive tail.
      const double mu = -1.0 + 1.5 * u(rng), sigma = 0.5 + 1.5 * u(rng);
      const auto v = token_features(n, rng);
      for (std::size_t i = 0; i < n; ++i) {
        const double x = mu + sigma * v[i];
        out[i] = static_cast<float>(x * 0.5 * std::erfc(-x / std::sqrt(2.0)));
      }
      break;
    }
    case models::TensorClass::linear: {
      // Linear / attention projections: token_features scaled by s in [0.1, 10].
      const double scale = std::pow(10.0, -1.0 + 2.0 * u(rng));
      const auto v = token_features(n, rng);
      for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(scale * v[i]);
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
  if (values.empty()) return f;
  f.zero_fraction = static_cast<double>(zeros) / static_cast<double>(values.size());
  const double range = finite > 0 ? hi - lo : 0.0;
  if (range > 0) {
    const double mean = sum / static_cast<double>(finite);
    const double variance = std::max(0.0, sum_sq / static_cast<double>(finite) - mean * mean);
    f.spread = std::sqrt(variance) / range;
  }
  // Blocks of 32 values from the start, as szp and zeros cut them (the last one may be short).
  // A block's magnitude is what szp's fixed-length coding must represent: the largest value
  // without prediction, or with 1-D Lorenzo the largest step (the first value's step being from
  // 0); szp takes Lorenzo when that needs fewer bit-planes, approximated here by a smaller
  // magnitude. A block whose coded values include negative ones also carries a sign word, one
  // bit per value like one more bit-plane: its magnitude counts double. (Post-ReLU blocks need
  // no sign word without prediction, but do with Lorenzo; without the doubling, szp's post_relu
  // fit had a held-back error of 6.3 % instead of 5.0 %.) Non-finite values are skipped (the
  // codecs store them raw).
  constexpr std::size_t kBlock = 32;
  std::size_t blocks = 0, zero_blocks = 0;
  double log_scale_sum = 0;
  for (std::size_t start = 0; start < values.size(); start += kBlock) {
    const std::size_t end = std::min(values.size(), start + kBlock);
    ++blocks;
    bool all_zero = true, plain_negative = false, lorenzo_negative = false;
    double plain = 0, lorenzo = 0, previous = 0;
    bool previous_finite = true;  // the value before the block counts as 0
    for (std::size_t i = start; i < end; ++i) {
      const float x = values[i];
      all_zero = all_zero && x == 0.0f;
      const bool finite_x = std::isfinite(x);
      if (finite_x) {
        plain = std::max(plain, std::fabs(double{x}));
        plain_negative = plain_negative || x < 0;
        if (previous_finite) {
          const double step = double{x} - previous;
          lorenzo = std::max(lorenzo, std::fabs(step));
          lorenzo_negative = lorenzo_negative || step < 0;
        }
        previous = x;
      }
      previous_finite = finite_x;
    }
    if (all_zero) {
      ++zero_blocks;
    } else if (range > 0) {
      const double magnitude = lorenzo < plain ? lorenzo * (lorenzo_negative ? 2 : 1) : plain * (plain_negative ? 2 : 1);
      log_scale_sum += std::log(std::max(magnitude / range, 1e-6));
    }
  }
  f.zero_block_fraction = static_cast<double>(zero_blocks) / static_cast<double>(blocks);
  if (range > 0 && blocks > zero_blocks) f.block_scale = std::exp(log_scale_sum / static_cast<double>(blocks - zero_blocks));
  return f;
}

}  // namespace comptrain::calibrate

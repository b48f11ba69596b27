#include "comptrain/calibrate/fit.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace comptrain::calibrate {

std::vector<double> least_squares(const std::vector<std::vector<double>>& rows, std::span<const double> y,
                                  std::span<const double> weights) {
  if (rows.empty() || rows.size() != y.size() || rows.size() != weights.size()) {
    throw std::invalid_argument("least_squares: rows, y and weights must be non-empty and of equal length");
  }
  const std::size_t k = rows.front().size();
  // Columns after the first (the intercept) that do not vary are left out (coefficient 0): the
  // zero fraction of batch-norm outputs is always 0, and a constant column would make the
  // normal equations singular (collinear with the intercept).
  std::vector<std::size_t> used{0};
  for (std::size_t p = 1; p < k; ++p) {
    double lo = rows[0][p], hi = rows[0][p];
    for (const auto& r : rows) {
      lo = std::min(lo, r[p]);
      hi = std::max(hi, r[p]);
    }
    if (hi - lo > 1e-12 * std::max(1.0, std::fabs(hi))) used.push_back(p);
  }
  const std::size_t m = used.size();
  // Normal equations A c = b with A = X^T W X, b = X^T W y (only a handful of columns).
  std::vector<std::vector<double>> a(m, std::vector<double>(m + 1, 0.0));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    for (std::size_t p = 0; p < m; ++p) {
      for (std::size_t q = 0; q < m; ++q) a[p][q] += weights[i] * rows[i][used[p]] * rows[i][used[q]];
      a[p][m] += weights[i] * rows[i][used[p]] * y[i];
    }
  }
  for (std::size_t col = 0; col < m; ++col) {
    std::size_t pivot = col;
    for (std::size_t r = col + 1; r < m; ++r) {
      if (std::fabs(a[r][col]) > std::fabs(a[pivot][col])) pivot = r;
    }
    if (a[pivot][col] == 0.0) throw std::runtime_error("least_squares: singular system (too few distinct samples)");
    std::swap(a[col], a[pivot]);
    for (std::size_t r = 0; r < m; ++r) {
      if (r == col) continue;
      const double f = a[r][col] / a[col][col];
      for (std::size_t c = col; c <= m; ++c) a[r][c] -= f * a[col][c];
    }
  }
  std::vector<double> coefficients(k, 0.0);
  for (std::size_t p = 0; p < m; ++p) coefficients[used[p]] = a[p][m] / a[p][p];
  return coefficients;
}

models::TimeModel fit_time_model(std::span<const TimeSample> samples) {
  std::vector<std::vector<double>> rows;
  std::vector<double> y, w;
  for (const auto& s : samples) {
    if (!(s.seconds > 0) || !(s.bytes > 0)) throw std::invalid_argument("fit_time_model: samples need bytes > 0 and seconds > 0");
    // Bytes in GB keep the normal equations well scaled (seconds ~ 1e-5 .. 10).
    rows.push_back({1.0, s.bytes * 1e-9});
    y.push_back(s.seconds);
    w.push_back(1.0 / (s.seconds * s.seconds));
  }
  models::TimeModel m;
  std::vector<double> c = least_squares(rows, y, w);
  // Through the origin, slope = sum(w x t) / sum(w x^2) (positive for positive samples): where the
  // latency comes out negative, and where timing noise on a busy machine makes the times fall
  // with the size (a slope of 0 or below, which no kernel has).
  if (c[0] < 0 || !(c[1] > 0)) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      num += w[i] * rows[i][1] * y[i];
      den += w[i] * rows[i][1] * rows[i][1];
    }
    c = {0.0, num / den};
  }
  if (!(c[1] > 0)) throw std::runtime_error("fit_time_model: the fitted time does not grow with the size");
  m.latency = c[0];
  m.bandwidth = 1e9 / c[1];
  double mean = 0;
  for (double t : y) mean += t;
  mean /= static_cast<double>(y.size());
  double ss_res = 0, ss_tot = 0;
  for (const auto& s : samples) {
    const double predicted = m.seconds(s.bytes);
    ss_res += (s.seconds - predicted) * (s.seconds - predicted);
    ss_tot += (s.seconds - mean) * (s.seconds - mean);
    m.max_relative_error = std::max(m.max_relative_error, std::fabs(predicted - s.seconds) / s.seconds);
  }
  m.r2 = ss_tot > 0 ? 1.0 - ss_res / ss_tot : 1.0;
  return m;
}

namespace {
// The columns of RatioModel::bits_per_value, in the order of the coefficients below.
std::vector<double> ratio_row(const RatioSample& s) {
  const models::DataFeatures& f = s.features;
  const double nonzero_blocks = 1.0 - f.zero_block_fraction;
  return {1.0,
          f.zero_fraction,
          f.zero_block_fraction,
          nonzero_blocks * std::log(s.eb),
          nonzero_blocks * std::log(std::max(f.block_scale, 1e-6)),
          nonzero_blocks * std::log(std::max(f.spread, 1e-6))};
}
}  // namespace

models::RatioModel fit_ratio_model(std::span<const RatioSample> samples) {
  std::vector<std::vector<double>> rows;
  std::vector<double> y, w;
  models::RatioModel m;
  double log_scale = 0, log_spread = 0;
  for (const auto& s : samples) {
    if (!(s.eb > 0) || !(s.ratio > 0)) throw std::invalid_argument("fit_ratio_model: samples need eb > 0 and ratio > 0");
    m.max_ratio = std::max(m.max_ratio, s.ratio);
    m.default_features.zero_fraction += s.features.zero_fraction;
    m.default_features.zero_block_fraction += s.features.zero_block_fraction;
    log_scale += std::log(std::max(s.features.block_scale, 1e-6));
    log_spread += std::log(std::max(s.features.spread, 1e-6));
    if (s.heldout) continue;
    rows.push_back(ratio_row(s));
    const double bits = 32.0 / s.ratio;
    y.push_back(bits);
    // Weights 1 / bits^2: the squared residual becomes the squared *relative* error of the
    // size (= of the ratio, to first order), so ratios of 2 and of 20 count alike.
    w.push_back(1.0 / (bits * bits));
  }
  if (rows.size() < 2) throw std::invalid_argument("fit_ratio_model: needs at least 2 samples that are not held back");
  // A fraction that varies by less than 0.01 over the samples says nothing about its coefficient
  // (GELU's underflowing tail leaves a few exact zeros per million values): its column is left
  // out (coefficient 0) rather than fitted to that noise.
  for (std::size_t column : {std::size_t{1}, std::size_t{2}}) {
    double lo = 1, hi = 0;
    for (const auto& r : rows) {
      lo = std::min(lo, r[column]);
      hi = std::max(hi, r[column]);
    }
    if (hi - lo < 0.01) {
      for (auto& r : rows) r[column] = 0;
    }
  }
  const auto count = static_cast<double>(samples.size());
  m.default_features.zero_fraction /= count;
  m.default_features.zero_block_fraction /= count;
  // The log features by their geometric means: the model is linear in their logs.
  m.default_features.block_scale = std::exp(log_scale / count);
  m.default_features.spread = std::exp(log_spread / count);
  const std::vector<double> c = least_squares(rows, y, w);
  m.c0 = c[0];
  m.c_zero = c[1];
  m.c_zero_block = c[2];
  m.c_log_eb = c[3];
  m.c_log_scale = c[4];
  m.c_log_spread = c[5];
  m.train_samples = rows.size();
  double sum_sq = 0;
  for (const auto& s : samples) {
    if (!s.heldout) continue;
    ++m.heldout_samples;
    const double predicted = m.ratio(s.eb, s.features);
    const double log_error = std::log(predicted) - std::log(s.ratio);
    sum_sq += log_error * log_error;
    m.heldout_max_relative_error = std::max(m.heldout_max_relative_error, std::fabs(predicted - s.ratio) / s.ratio);
  }
  if (m.heldout_samples > 0) m.heldout_rms_log_error = std::sqrt(sum_sq / static_cast<double>(m.heldout_samples));
  return m;
}

}  // namespace comptrain::calibrate

#pragma once
// Least-squares fits of the compression cost model (calibrate/README.md, "Models").

#include <span>
#include <vector>

#include "comptrain/models/compression_model.hpp"

namespace comptrain::calibrate {

// The samples are plain data in models (profiles carry them as raw measurements).
using models::RatioSample;
using models::TimeSample;

// Solves min sum_i w_i (x_i . c - y_i)^2 through the normal equations (Gaussian elimination
// with partial pivoting). Columns after the first (the intercept) that are constant over the
// rows get coefficient 0 instead of making the system singular.
std::vector<double> least_squares(const std::vector<std::vector<double>>& rows, std::span<const double> y,
                                  std::span<const double> weights);

// seconds = latency + bytes / bandwidth, fitted with weights 1 / seconds^2, i.e. minimising the
// relative error: sizes span 64 KiB .. 1 GiB, and an unweighted fit would let the largest size
// alone decide (and the latency come out negative). A negative latency, or a time that falls
// with the size (noisy timings), is refitted through the origin (latency 0).
// Fills r2 (on the seconds, unweighted) and max_relative_error. Needs >= 2 distinct sizes.
models::TimeModel fit_time_model(std::span<const TimeSample> samples);

// The ratio model (models::RatioModel: compressed bits per value = 32 / ratio, linear in its
// columns), by least squares on the samples not held back, weighted by 1 / bits^2 so that the
// relative error is minimised; the held-back ones give heldout_rms_log_error and
// heldout_max_relative_error (on the ratio). default_features: mean zero fractions and
// geometric-mean spread and block scale over all samples; max_ratio = largest ratio seen.
models::RatioModel fit_ratio_model(std::span<const RatioSample> samples);

}  // namespace comptrain::calibrate

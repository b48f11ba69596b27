#pragma once
// The weight-gradient error that an error-bounded lossy copy of a saved activation causes, and
// its inverse, the largest error bound that keeps it under a tolerance (COMET's adaptive bound).
// models/README.md, "Gradient error of a compressed activation", derives it; in short:
//
// A conv or linear layer Y = conv(X, W) / X·Wᵀ computes its weight gradient G = Σ_n δ_n ⊗ x_n
// from its saved input X and the gradient δ = ∂L/∂Y of its output, over N terms (batch x output
// positions, batch x tokens); its input gradient uses W, not X. An error e on the saved copy of X
// therefore changes G alone, by ΔG = Σ_n δ_n ⊗ e_n. With e uniform in [-eb, eb] on the non-zero
// entries of X (a fraction 1 - z; zeros are reproduced exactly) and independent of each other and
// of δ, each entry of ΔG is a sum of (1 - z)·N zero-mean terms of variance δ²·eb²/3: for N large,
// approximately normal with
//
//     σ = eb · RMS(δ) · √((1 − z) · N / 3),
//
// σ being the RMS of ΔG over G's entries. Compared with RMS(G) it gives the relative gradient
// error σ / RMS(G); its inverse gives eb_max(α) = α · RMS(G) / (RMS(δ) · √((1 − z) · N / 3)).
//
// The numbers come from a captured training step (traces::GradientStatistics on the tensor the
// conv/linear op reads; traces/FORMAT.md, "Gradient statistics"); the functions here are pure
// arithmetic, the trace walk that finds them is gradient_model_of below.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/traces/trace.hpp"

namespace comptrain::models {

// Whether `codec` is one whose errors the model describes: a strict bound by prequantisation
// q = rint(x / 2eb), so the error is uniform in [-eb, eb] when the values spread over many steps,
// and exact zeros stay exact (kernels/README.md, "The guarantee"): szp and szh. Not zfp (a
// tolerance with errors of another shape), nor the casts and quantisers without a bound.
bool codec_has_uniform_errors(std::string_view codec);

// The statistics of one conv/linear consumer of a saved activation, as the model takes them.
struct ConsumerGradientStatistics {
  double delta_rms = 0;        // RMS of δ = ∂L/∂Y over all its entries, at the batch size modelled (>= 0)
  double weight_grad_rms = 0;  // RMS of the consumer's weight gradient G (>= 0)
  double terms = 1;            // N: products each entry of G sums (>= 1)
  double zero_fraction = 0;    // z: fraction of the saved activation's values that are exactly zero, in [0, 1]
};

// σ per unit of absolute error bound: RMS(δ) · √((1 − z) · N / 3), >= 0. Throws
// std::invalid_argument on a statistic outside its range (NaN, negative, z outside [0, 1]).
double gradient_error_sensitivity(const ConsumerGradientStatistics& stats);

// σ, the RMS error of the weight gradient's entries, for an absolute error bound eb_abs >= 0.
double gradient_error_sigma(double eb_abs, const ConsumerGradientStatistics& stats);

// σ / RMS(G): the predicted relative error of the weight gradient. 0 when σ is 0 (whatever
// RMS(G)); +infinity when σ > 0 and RMS(G) is 0.
double relative_gradient_error(double eb_abs, const ConsumerGradientStatistics& stats);

// The largest absolute bound whose relative_gradient_error is at most `tolerance` (> 0, finite):
// tolerance · RMS(G) / sensitivity. +infinity when the sensitivity is 0 (δ = 0, every value
// zero: no bound perturbs G); 0 when RMS(G) is 0 and the sensitivity is not (no bound > 0 meets a
// relative tolerance of a zero gradient). Non-decreasing in the tolerance.
double largest_error_bound(double tolerance, const ConsumerGradientStatistics& stats);

// Whether the model covers one saved storage of a trace, and the statistics it then uses.
//
// Covered: a forward conv or linear op reads the storage (the consumers), and every backward op
// that reads it is a conv or linear op (the consumers' backward: G) or a ReLU's backward, which
// reads the sign of its saved output only. The ReLU's mask is not in σ: a positive value below
// eb decodes to 0 and masks its gradient (README, "When the model does not apply"). A backward
// matmul counts as a linear layer's weight-gradient GEMM when no forward matmul or attention reads
// the storage (captures name a Linear's backward mm `matmul` when they cannot attribute it).
// Not covered: another backward reader (batch norm, layer norm, softmax, GELU, matmul, attention,
// pooling, ...): there the error enters the data path, i.e. the input gradients of every layer
// below, which this model does not follow.
struct StorageGradientModel {
  enum class Coverage {
    covered,
    no_conv_or_linear_consumer,  // no forward conv/linear op reads it
    other_backward_reader,       // a backward op of another kind reads it (`reader`)
    missing_statistics,          // a tensor a consumer reads lacks delta_rms, weight_grad_rms or terms (`tensor`)
  };
  struct Consumer {
    traces::TensorIndex tensor = 0;     // the tensor the consumers read (the storage or a view of it)
    std::vector<traces::OpIndex> ops;   // the forward conv/linear ops reading it
    ConsumerGradientStatistics stats;   // complete only when covered
    // The batch the RMSs were measured at, where the trace was rescaled from it
    // (GradientStatistics::batch_size): delta_rms is then scaled to the trace's batch and
    // weight_grad_rms kept as measured (traces/FORMAT.md, "Gradient statistics and the batch size").
    std::optional<std::int64_t> measured_batch;
  };
  Coverage coverage = Coverage::no_conv_or_linear_consumer;
  std::vector<Consumer> consumers;      // one per distinct tensor read by a forward conv/linear op
  std::optional<traces::OpIndex> reader;       // other_backward_reader: the first such op
  std::optional<traces::TensorIndex> tensor;   // missing_statistics: the first tensor lacking them
  bool relu_reader = false;             // a ReLU's backward reads it too (its mask is not modelled)

  // The largest absolute bound meeting `tolerance` for every consumer (the smallest of theirs).
  // Covered models only.
  double largest_error_bound(double tolerance) const;
  // The largest relative gradient error over the consumers at eb_abs, and the consumer it is
  // at (index into consumers). Covered models only.
  std::pair<double, std::size_t> worst_relative_error(double eb_abs) const;
};

// The model of saved storage `storage` whose readers (every op reading it or a view of it,
// ascending) are `readers`; `zero_fraction` is that of its saved content (values.zero_fraction
// of the tensor its last forward writer produced; missing: 0, which gives the larger σ). δ's
// RMS is taken at the trace's batch size (GradientStatistics::delta_rms_at).
StorageGradientModel gradient_model_of(const traces::Trace& trace, traces::TensorIndex storage, std::span<const traces::OpIndex> readers,
                                       double zero_fraction);

// Per compressed storage, as a compress rule applied it, for reports: the rule's bound or its
// adaptive one, the ratio it gave, and the predicted gradient error where the trace's
// statistics allow one.
struct TensorBoundUse {
  enum class From {
    fixed,       // the rule's error_bound
    adaptive,    // the model's largest bound for the tolerance (capped at the value range)
    fallback,    // an adaptive rule's fallback_error_bound: the model does not cover the storage
  };
  std::string tensor;                    // the storage's name
  std::vector<std::string> consumers;    // the conv/linear ops whose weight gradients it enters (the worst first)
  From from = From::fixed;
  std::string why_fallback;              // From::fallback: the reason, for reports
  double relative_error_bound = 0;       // eb / value range: what the ratio model took (<= 1)
  std::optional<double> absolute_error_bound;  // in the tensor's units (when its range is known)
  double ratio = 1;                      // the ratio the storage got (element-size converted)
  std::optional<double> predicted_gradient_error;  // σ / RMS(G), worst consumer; empty when not covered
  bool relu_mask = false;                // a ReLU's backward reads it too (mask flips not in the prediction unless positive_mask)
  bool positive_mask = false;            // its stream keeps the positive mask: a ReLU reads its exact sign (CompressAction::positive_mask)
  // The batch the worst consumer's statistics were measured at, when it is not the trace's: the
  // prediction then extrapolates them (README, "With the batch").
  std::optional<std::int64_t> statistics_batch;
  bool read_by_recomputation = false;    // a recompute replay reads the decompressed copy (error in the data path)
};

std::string_view to_string(TensorBoundUse::From from);

}  // namespace comptrain::models

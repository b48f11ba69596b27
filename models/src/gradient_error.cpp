#include "comptrain/models/gradient_error.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace comptrain::models {

namespace {

using traces::OpIndex;
using traces::OpKind;
using traces::Phase;
using traces::TensorIndex;

constexpr double kInfinity = std::numeric_limits<double>::infinity();

void check(const ConsumerGradientStatistics& s) {
  // The trace checks what it reads (traces/FORMAT.md); this guards the arithmetic against a
  // caller's NaN, which every comparison below would otherwise let through silently.
  if (!(s.delta_rms >= 0 && std::isfinite(s.delta_rms)) || !(s.weight_grad_rms >= 0 && std::isfinite(s.weight_grad_rms)) ||
      !(s.terms >= 1 && std::isfinite(s.terms)) || !(s.zero_fraction >= 0 && s.zero_fraction <= 1)) {
    throw std::invalid_argument("gradient error model: statistics out of range (delta_rms and weight_grad_rms finite >= 0, terms >= 1, zero_fraction in [0, 1])");
  }
}

bool is_conv_or_linear(OpKind kind) { return kind == OpKind::conv || kind == OpKind::linear; }

}  // namespace

bool codec_has_uniform_errors(std::string_view codec) { return codec == "szp" || codec == "szh"; }

double gradient_error_sensitivity(const ConsumerGradientStatistics& s) {
  check(s);
  // Var(ΔG_ij) = Σ_n δ_ni² Var(e_nj) = (eb²/3) Σ_{n: x_nj != 0} δ_ni² ≈ (eb²/3) (1 − z) N RMS(δ)².
  return s.delta_rms * std::sqrt((1.0 - s.zero_fraction) * s.terms / 3.0);
}

double gradient_error_sigma(double eb_abs, const ConsumerGradientStatistics& s) {
  if (!(eb_abs >= 0)) throw std::invalid_argument("gradient error model: an error bound must be >= 0");
  const double sensitivity = gradient_error_sensitivity(s);
  return sensitivity == 0 ? 0.0 : eb_abs * sensitivity;  // 0, not NaN, for an infinite bound on a dead layer
}

double relative_gradient_error(double eb_abs, const ConsumerGradientStatistics& s) {
  const double sigma = gradient_error_sigma(eb_abs, s);
  if (sigma == 0) return 0.0;
  return s.weight_grad_rms > 0 ? sigma / s.weight_grad_rms : kInfinity;
}

double largest_error_bound(double tolerance, const ConsumerGradientStatistics& s) {
  if (!(tolerance > 0) || !std::isfinite(tolerance)) throw std::invalid_argument("gradient error model: a tolerance must be finite and > 0");
  const double sensitivity = gradient_error_sensitivity(s);
  if (sensitivity == 0) return kInfinity;
  // tolerance · RMS(G) / sensitivity: the product first, so that it is exactly the bound whose
  // σ / RMS(G) rounds back to the tolerance (up to one rounding each way).
  return tolerance * s.weight_grad_rms / sensitivity;
}

double StorageGradientModel::largest_error_bound(double tolerance) const {
  if (coverage != Coverage::covered) throw std::logic_error("gradient error model: a bound for a storage the model does not cover");
  double bound = kInfinity;
  for (const Consumer& c : consumers) bound = std::min(bound, models::largest_error_bound(tolerance, c.stats));
  return bound;
}

std::pair<double, std::size_t> StorageGradientModel::worst_relative_error(double eb_abs) const {
  if (coverage != Coverage::covered) throw std::logic_error("gradient error model: an error for a storage the model does not cover");
  std::pair<double, std::size_t> worst{0.0, 0};
  for (std::size_t i = 0; i < consumers.size(); ++i) {
    const double e = relative_gradient_error(eb_abs, consumers[i].stats);
    if (e > worst.first) worst = {e, i};
  }
  return worst;
}

StorageGradientModel gradient_model_of(const traces::Trace& trace, TensorIndex storage, std::span<const OpIndex> readers,
                                       double zero_fraction) {
  StorageGradientModel model;
  // A backward matmul that reads the storage is a linear layer's weight-gradient GEMM (δᵀ·X) when
  // no forward matmul or attention reads it: a backward op reads a saved tensor for the forward op
  // that saved it, and among the storage's forward GEMM readers only conv/linear ones are left.
  // (The capture names a Linear's backward mm `matmul` when it cannot attribute it to the module.)
  std::optional<OpIndex> backward_matmul;
  bool forward_matmul = false;
  for (OpIndex r : readers) {
    const traces::Op& op = trace.op(r);
    if (op.phase == Phase::forward) {
      if (op.kind == OpKind::matmul || op.kind == OpKind::attention) forward_matmul = true;
      if (!is_conv_or_linear(op.kind)) continue;
      for (TensorIndex t : op.inputs) {
        if (trace.storage_of(t) != storage) continue;
        auto it = std::find_if(model.consumers.begin(), model.consumers.end(), [&](const auto& c) { return c.tensor == t; });
        if (it == model.consumers.end()) {
          model.consumers.push_back({t, {}, {}, std::nullopt});
          it = model.consumers.end() - 1;
        }
        if (it->ops.empty() || it->ops.back() != r) it->ops.push_back(r);
      }
    } else if (op.kind == OpKind::relu) {
      model.relu_reader = true;
    } else if (op.kind == OpKind::matmul) {
      if (!backward_matmul) backward_matmul = r;
    } else if (!is_conv_or_linear(op.kind) && !model.reader) {
      model.reader = r;
    }
  }
  if (backward_matmul && forward_matmul && !model.reader) model.reader = backward_matmul;
  if (model.consumers.empty()) {
    model.coverage = StorageGradientModel::Coverage::no_conv_or_linear_consumer;
    return model;
  }
  if (model.reader) {
    model.coverage = StorageGradientModel::Coverage::other_backward_reader;
    return model;
  }
  for (auto& c : model.consumers) {
    const traces::GradientStatistics& g = trace.tensor(c.tensor).gradient;
    const std::optional<double> delta = g.delta_rms_at(trace.batch_size());
    if (!delta || !g.weight_grad_rms || !g.terms) {
      model.coverage = StorageGradientModel::Coverage::missing_statistics;
      model.tensor = c.tensor;
      return model;
    }
    c.stats = {*delta, *g.weight_grad_rms, *g.terms, zero_fraction};
    c.measured_batch = g.batch_size;
  }
  model.coverage = StorageGradientModel::Coverage::covered;
  return model;
}

std::string_view to_string(TensorBoundUse::From from) {
  switch (from) {
    case TensorBoundUse::From::fixed: return "fixed";
    case TensorBoundUse::From::adaptive: return "adaptive";
    case TensorBoundUse::From::fallback: return "fallback";
  }
  return "?";
}

}  // namespace comptrain::models

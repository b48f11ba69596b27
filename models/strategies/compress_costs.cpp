// What a compress action costs one storage: its error bound (fixed or adaptive, with the
// gradient-error model's verdict), its ratio and compressed bytes, and its codec's seconds, each
// checked so that the simulator never receives an absurd figure. Split out of build_schedule.cpp.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "build_internal.hpp"
#include "comptrain/models/gradient_error.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::models::strategy_detail {

using traces::OpIndex;
using traces::Phase;
using traces::TensorIndex;
using traces::TensorRole;
using traces::Trace;

namespace {

// Why the model does not cover a storage, for messages and reports.
std::string uncovered_reason(const Trace& trace, const StorageGradientModel& m) {
  using Coverage = StorageGradientModel::Coverage;
  switch (m.coverage) {
    case Coverage::covered: return "";
    case Coverage::no_conv_or_linear_consumer: return "no conv or linear op reads it in the forward pass";
    case Coverage::other_backward_reader:
      return "the backward op '" + trace.op(*m.reader).name + "' (" + std::string(traces::to_string(trace.op(*m.reader).kind)) +
             ") reads it, so its error enters the data path, which the model does not follow";
    case Coverage::missing_statistics: {
      const traces::TensorIndex t = *m.tensor;
      std::string op;
      for (const auto& c : m.consumers) {
        if (c.tensor == t) op = trace.op(c.ops.front()).name;
      }
      return "tensor '" + trace.tensor(t).name + "', which '" + op + "' reads, has no gradient statistics (delta_rms, weight_grad_rms and terms)";
    }
  }
  return "";
}

}  // namespace

// The bound of storage `s` under compress rule `rule`: the rule's fixed bound (relative, or
// absolute through the range, capped at the whole range as before), or the adaptive one: the
// largest bound the model allows for the tolerance over every conv/linear consumer, capped at the
// range (eb_rel <= 1: a wider bound codes every value as one step). Storages the model does not
// cover take the fallback bound or are an InputError naming the tensor and the reason.
StorageBound storage_bound(const Trace& trace, const StorageInfo& info, const StrategySpec& spec, std::size_t rule, TensorIndex s,
                           const traces::ValueFeatures& values) {
  const CompressAction& c = *spec.rules[rule].compress();
  const std::string where = rule_context(spec, rule);
  StorageBound b;
  if (c.ratio || !c.profile) {  // explicit numbers: no bound picks anything
    b.relative = c.error_bound;
    return b;
  }
  b.model = gradient_model_of(trace, s, info.readers, values.zero_fraction.value_or(0.0));
  const bool covered = b.model.coverage == StorageGradientModel::Coverage::covered;
  // A bound in `mode`'s units as relative and absolute bounds (check_ranges has made sure an
  // absolute one has its range).
  auto set_fixed = [&](double eb, ErrorBoundMode mode) {
    if (mode == ErrorBoundMode::abs) {
      b.absolute = eb;
      b.relative = *values.range > 0 ? std::min(1.0, eb / *values.range) : 1.0;
    } else {
      b.relative = eb;
      if (values.range) b.absolute = eb * *values.range;
    }
  };
  if (!c.adaptive) {
    set_fixed(c.error_bound, c.error_bound_mode);
  } else if (covered) {
    if (!values.range) {
      throw InputError(where + "error_bound adaptive needs the value range of every tensor it compresses (the model's bound is absolute, the ratio model's relative), and '" +
                       trace.tensor(s).name + "' has none in the trace (values.range, traces/FORMAT.md; comptrain_capture.py writes it)");
    }
    const double range = *values.range;
    b.from = TensorBoundUse::From::adaptive;
    b.absolute = std::min(b.model.largest_error_bound(c.adaptive->tolerance), range);
    b.relative = range > 0 ? *b.absolute / range : 1.0;
  } else if (c.adaptive->fallback_error_bound) {
    b.from = TensorBoundUse::From::fallback;
    b.why_fallback = uncovered_reason(trace, b.model);
    set_fixed(*c.adaptive->fallback_error_bound, c.error_bound_mode);
  } else {
    const bool missing = b.model.coverage == StorageGradientModel::Coverage::missing_statistics;
    throw InputError(where + "error_bound adaptive cannot bound '" + trace.tensor(s).name + "': " + uncovered_reason(trace, b.model) + "; " +
                     (missing ? "capture the trace with traces/capture/comptrain_capture.py, which measures them (traces/FORMAT.md, \"Gradient statistics\"), or give "
                                "fallback_error_bound for such tensors"
                              : "select the inputs of conv and linear layers only (select: {inputs_of: [conv, linear]}) or give fallback_error_bound for such tensors"));
  }
  if (covered && b.absolute) std::tie(b.predicted, b.worst_consumer) = b.model.worst_relative_error(*b.absolute);
  b.positive_mask = c.positive_mask == CompressAction::PositiveMask::all ||
                    (c.positive_mask == CompressAction::PositiveMask::relu && b.model.relu_reader);
  return b;
}

// The costs a compress action applies: the explicit numbers, or the profile's models where the
// scenario did not give one (check_rule has made sure the codec exists). The ratio model takes
// the class's default features, overridden field by field by those the trace gives, at the
// storage's relative bound (storage_bound: an absolute bound becomes eb_abs / range there).
// A relative bound of 0 (an adaptive bound for a layer whose weight gradient is 0) is lossless:
// ratio 1, as szp's eb = 0 stores float data.
//
// Profiles are fitted on float32 data: their models give compressed bits per value. A tensor of
// another element type holds element_size * 8 bits per value, so its ratio is converted:
// ratio = element bits / model bits, i.e. the float32 ratio * element_size / 4 (a 16-bit
// activation compresses to the same bits per value, so half the float32 ratio), floored at 1.
// An explicit ratio is the user's figure for the bytes as they are and is applied unchanged.
//
// The positive mask (kernels' PositiveMask) adds one bit per value to the stream: 1 / (8 x
// element size) of the original bytes, so the ratio r becomes 1 / (1/r + 1 / (8 x element
// size)), floored at 1 like the ratio itself (for float32 at r = 10: 7.62).
double compress_ratio(const CompressAction& c, TensorClass cls, traces::DType dtype, double relative_bound, const traces::ValueFeatures& values,
                      bool positive_mask) {
  const double ratio = compress_ratio(c, cls, dtype, relative_bound, values);
  if (!positive_mask) return ratio;
  const double mask_share = 1.0 / (8.0 * static_cast<double>(traces::element_size(dtype)));
  return std::max(1.0, 1.0 / (1.0 / ratio + mask_share));
}

double compress_ratio(const CompressAction& c, TensorClass cls, traces::DType dtype, double relative_bound, const traces::ValueFeatures& values) {
  if (c.ratio) return *c.ratio;
  if (!(relative_bound > 0)) return 1.0;
  const RatioModel& model = c.profile->find(c.codec)->ratio_model(cls);
  const double element_scale = static_cast<double>(traces::element_size(dtype)) / 4.0;
  DataFeatures features = model.default_features;
  if (values.zero_fraction) features.zero_fraction = *values.zero_fraction;
  if (values.spread) features.spread = *values.spread;
  if (values.zero_block_fraction) features.zero_block_fraction = *values.zero_block_fraction;
  if (values.block_scale) features.block_scale = *values.block_scale;
  return std::max(1.0, model.ratio(relative_bound, features) * element_scale);
}

// Whether a storage's compressed size depends on the features the trace gives for it.
bool uses_values(const CompressAction& c, const traces::ValueFeatures& values) {
  return c.profile && !c.ratio && !values.empty();
}

// An absolute-bound rule needs the range of every storage it compresses: checked before any
// ratio is taken, so the error names the tensor rather than failing deep in the assembly. (An
// adaptive rule's fallback bound in abs mode needs it too; its adaptive bounds are checked in
// storage_bound.)
void check_ranges(const Trace& trace, const StrategySpec& spec, std::size_t rule, TensorIndex s, const traces::ValueFeatures& values) {
  const CompressAction& c = *spec.rules[rule].compress();
  if (c.error_bound_mode != ErrorBoundMode::abs || !c.profile || c.ratio || values.range) return;
  throw InputError(rule_context(spec, rule) + "error_bound_mode abs needs the value range of every tensor it compresses, and '" +
                   trace.tensor(s).name + "' has none in the trace (values.range, traces/FORMAT.md; comptrain_capture.py writes it); use a relative bound (error_bound_mode rel) for traces without values");
}

TimeModel codec_time(const CompressAction& c, bool compress) {
  TimeModel t;
  if (c.profile) t = compress ? c.profile->find(c.codec)->compress : c.profile->find(c.codec)->decompress;
  if (c.latency || !c.profile) t.latency = c.latency.value_or(0.0);
  if (const auto& bandwidth = compress ? c.compress_bandwidth : c.decompress_bandwidth) t.bandwidth = *bandwidth;
  return t;
}

// %g: short whatever the value (1e+300, inf), for messages.
std::string short_number(double value) {
  char text[32];
  const int n = std::snprintf(text, sizeof text, "%g", value);
  return std::string(text, n > 0 ? static_cast<std::size_t>(n) : 0);
}

// The seconds of one codec call on a storage: a latency in [0, 1 s] and a bandwidth of at least
// 1 kB/s (the platform bounds, models/platform.hpp) and a finite result, or an InputError naming
// the rule, the tensor and the numbers that made it. The simulator must never receive an
// infinite or absurd time (defect 07: a codec latency of 1e300 s deadlocked SimGrid and the
// report said FITS).
double codec_seconds(const StrategySpec& spec, std::size_t rule, const CompressAction& c, bool compress, const std::string& tensor,
                     std::int64_t bytes) {
  const TimeModel t = codec_time(c, compress);
  const double seconds = t.seconds(static_cast<double>(bytes));
  if (t.latency >= platform_limits::latency.min && t.latency <= platform_limits::latency.max &&
      t.bandwidth >= platform_limits::bandwidth.min && std::isfinite(seconds) && seconds >= 0) {
    return seconds;
  }
  throw InputError(rule_context(spec, rule) + (compress ? "compressing '" : "decompressing '") +
                   tensor + "' (" + std::to_string(bytes) + " B) takes " + short_number(seconds) + " s from a latency of " +
                   short_number(t.latency) + " s and a bandwidth of " + short_number(t.bandwidth) + " bytes/s" +
                   (c.profile ? " (profile '" + c.profile->name + "', codec '" + c.codec + "', unless given in the rule)" : "") +
                   "; expected a latency " + units::describe_bounds(platform_limits::latency, units::Dimension::time) +
                   ", a bandwidth of at least " + units::format_quantity(platform_limits::bandwidth.min, units::Dimension::bandwidth) +
                   " and a finite time");
}

// A compressed size in whole bytes: finite, >= 0 and within int64, whatever the ratio model gave.
std::int64_t compressed_bytes(const StrategySpec& spec, std::size_t rule, const std::string& tensor, std::int64_t bytes, double ratio) {
  const double compressed = std::ceil(static_cast<double>(bytes) / ratio);
  if (compressed >= 0 && compressed < 9223372036854775808.0) return static_cast<std::int64_t>(compressed);
  throw InputError(rule_context(spec, rule) + "compressing '" + tensor + "' (" + std::to_string(bytes) +
                   " B) at a ratio of " + short_number(ratio) + " gives " + short_number(compressed) +
                   " B; expected a finite compression ratio > 0");
}

}  // namespace comptrain::models::strategy_detail

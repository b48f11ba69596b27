// Strategies -> Schedule. The semantics are documented in models/strategies/README.md; the
// comments here say why the code is shaped the way it is.

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "comptrain/models/gradient_error.hpp"
#include "comptrain/models/module_pattern.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/support/input_error.hpp"
#include "recompute_evaluator.hpp"
#include "schedule_replay.hpp"
#include "strategy_internal.hpp"

namespace comptrain::models {

namespace {

using traces::OpIndex;
using traces::Phase;
using traces::TensorIndex;
using traces::TensorRole;
using traces::Trace;

using namespace strategy_detail;

void sorted_unique(std::vector<std::size_t>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

Analysis analyse(const Trace& trace, const OpTimeModel& time_model) {
  Analysis a;
  a.trace = &trace;
  a.time_model = &time_model;
  const auto& tensors = trace.tensors();
  a.info.resize(tensors.size());
  for (TensorIndex t = 0; t < tensors.size(); ++t) {
    if (trace.storage_of(t) == t) a.storages.push_back(t);
  }
  a.op_seconds.resize(trace.ops().size());
  a.op_watts.resize(trace.ops().size());
  for (OpIndex o = 0; o < trace.ops().size(); ++o) {
    const KernelRun run = time_model.run(trace, o);
    a.op_seconds[o] = run.seconds;
    a.op_watts[o] = run.watts;
    const auto& op = trace.op(o);
    if (op.phase != Phase::forward && !a.first_backward_op) a.first_backward_op = o;
    for (TensorIndex t : op.inputs) a.info[trace.storage_of(t)].readers.push_back(o);
    for (TensorIndex t : op.outputs) a.info[trace.storage_of(t)].writers.push_back(o);
  }
  for (TensorIndex s : a.storages) {
    StorageInfo& info = a.info[s];
    sorted_unique(info.readers);
    sorted_unique(info.writers);
    info.written = !info.writers.empty();
    for (OpIndex w : info.writers) {
      if (is_forward(trace, w)) {
        info.last_forward_use = std::max(info.last_forward_use.value_or(0), w);
        info.forward_seconds += a.op_seconds[w];
      } else {
        info.written_in_forward_only = false;
      }
    }
    for (OpIndex r : info.readers) {
      if (is_forward(trace, r)) {
        info.last_forward_use = std::max(info.last_forward_use.value_or(0), r);
      } else if (!info.first_backward_read) {
        info.first_backward_read = r;
      }
    }
    info.saved = info.written && trace.tensor(s).role == TensorRole::activation;
    // A gap: every forward use ends before the backward pass starts and before the first
    // backward read, and only forward ops write it (so a restored or rebuilt copy is the
    // final forward content).
    info.gap = info.saved && info.written_in_forward_only && info.last_forward_use && info.first_backward_read &&
               *info.last_forward_use < *info.first_backward_read && a.first_backward_op &&
               *info.last_forward_use < *a.first_backward_op;
  }
  return a;
}

bool contains(const std::vector<traces::OpKind>& kinds, traces::OpKind kind) {
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

bool matches_any(const std::vector<std::string>& patterns, const std::string& name) {
  return std::any_of(patterns.begin(), patterns.end(), [&](const std::string& p) { return name_matches(p, name); });
}

bool names_storage(const TensorSelector& selector, const std::string& name) { return matches_any(selector.names, name); }

bool selects(const Analysis& a, const TensorSelector& selector, TensorIndex s) {
  const Trace& trace = *a.trace;
  const StorageInfo& info = a.info[s];
  if (trace.tensor(s).bytes() < selector.min_bytes) return false;
  if (!selector.names.empty() && !names_storage(selector, trace.tensor(s).name)) return false;
  if (!selector.modules.empty() &&
      std::none_of(selector.modules.begin(), selector.modules.end(),
                   [&](const std::string& pattern) { return module_pattern_matches(pattern, trace.tensor(s).name); })) {
    return false;
  }
  if (selector.inputs_of.empty() && selector.outputs_of.empty()) return true;
  for (OpIndex r : info.readers) {
    if (is_forward(trace, r) && contains(selector.inputs_of, trace.op(r).kind)) return true;
  }
  for (OpIndex w : info.writers) {
    if (is_forward(trace, w) && contains(selector.outputs_of, trace.op(w).kind)) return true;
  }
  return false;
}

void check_rule(const StrategySpec& spec, std::size_t index) {
  const StrategyRule& rule = spec.rules[index];
  const std::string where = "strategy '" + spec.name + "' rule " + std::to_string(index) + ": ";
  if (rule.select.min_bytes < 0) throw InputError(where + "min_bytes must be >= 0");
  for (const std::string& pattern : rule.select.modules) {
    try {
      validate_module_pattern(pattern);
    } catch (const InputError& e) {
      throw InputError(where + "modules: " + e.what());
    }
  }
  if (const OffloadAction* o = rule.offload(); o && o->lookahead < 1) throw InputError(where + "offload lookahead must be >= 1");
  if (const OffloadAction* o = rule.offload(); o && o->free_by) {
    if (*o->free_by < 1) throw InputError(where + "offload free_by must be >= 1");
    if (o->synchronous || o->stream != OffloadAction::Stream::copy) throw InputError(where + "offload free_by applies to asynchronous copies on the copy stream; expected no synchronous and stream: copy");
  }
  if (const RecomputeAction* r = rule.recompute()) {
    if (r->mode == RecomputeAction::Mode::every_k && r->k < 1) throw InputError(where + "recompute k must be >= 1");
    if (r->mode == RecomputeAction::Mode::budget && r->budget_bytes < 0) throw InputError(where + "recompute budget_bytes must be >= 0");
    const bool keeps = r->mode == RecomputeAction::Mode::checkpoints || r->mode == RecomputeAction::Mode::selective;
    if (keeps != !r->keep.empty()) {
      throw InputError(where + (r->keep.empty() ? std::string("recompute mode ") + (r->mode == RecomputeAction::Mode::selective ? "selective" : "checkpoints") +
                                                      " needs 'keep' (name patterns of the activations kept)"
                                                : "recompute 'keep' applies to modes checkpoints and selective only"));
    }
    if ((r->mode == RecomputeAction::Mode::selective) != !r->blocks.empty()) {
      throw InputError(where + (r->blocks.empty() ? "recompute mode selective needs 'blocks' (module patterns of the checkpointed regions, e.g. model.layers.*)"
                                                  : "recompute 'blocks' applies to mode selective only"));
    }
    for (const std::string& pattern : r->blocks) {
      try {
        validate_module_pattern(pattern);
      } catch (const InputError& e) {
        throw InputError(where + "blocks: " + e.what());
      }
    }
  }
  const CompressAction* c = rule.compress();
  if (c == nullptr) return;
  const bool profiled = c->profile != nullptr;
  if (c->adaptive && !profiled) throw InputError(where + "error_bound adaptive needs a profile, whose ratio model turns each tensor's bound into its ratio");
  // Without a profile every number is needed; with one, any number given overrides its model.
  auto check = [&](const std::optional<double>& value, const char* what, const char* expected, auto ok) {
    if (!value) {
      if (!profiled) throw InputError(where + "compress needs '" + what + "' (" + expected + ") or a profile");
      return;
    }
    if (!std::isfinite(*value) || !ok(*value)) throw InputError(where + "compress " + what + " must be " + expected);
  };
  check(c->ratio, "ratio", ">= 1", [](double v) { return v >= 1; });
  check(c->compress_bandwidth, "compress_bandwidth", "> 0", [](double v) { return v > 0; });
  check(c->decompress_bandwidth, "decompress_bandwidth", "> 0", [](double v) { return v > 0; });
  if (c->latency && (!std::isfinite(*c->latency) || *c->latency < 0)) throw InputError(where + "compress latency must be >= 0");
  if (c->error_bound_mode == ErrorBoundMode::none) throw InputError(where + "error_bound_mode must be rel or abs");
  if (!profiled) return;
  const CodecProfile* codec = c->profile->find(c->codec);
  if (codec == nullptr) {
    std::string names;
    for (const auto& p : c->profile->codecs) names += (names.empty() ? "" : ", ") + p.codec;
    throw InputError(where + "profile '" + c->profile->name + "' has no codec '" + c->codec + "'; it has: " + names);
  }
  if (codec->ratio.count(TensorClass::generic) == 0) {
    throw InputError(where + "profile '" + c->profile->name + "' codec '" + c->codec + "' has no generic ratio model");
  }
  if (c->adaptive) {
    // The bound comes from the model per storage, and picks the storage's ratio: an explicit
    // ratio would ignore it, and a codec whose errors are not uniform quantisation errors (zfp's
    // tolerance, the casts) is outside the model.
    if (!(c->adaptive->tolerance > 0) || !std::isfinite(c->adaptive->tolerance)) {
      throw InputError(where + "error_bound adaptive needs gradient_error_tolerance finite and > 0 (a fraction of the weight gradient's RMS, e.g. 0.01)");
    }
    if (const auto& fallback = c->adaptive->fallback_error_bound; fallback && (!(*fallback > 0) || !std::isfinite(*fallback))) {
      throw InputError(where + "fallback_error_bound must be finite and > 0");
    }
    if (c->ratio) throw InputError(where + "error_bound adaptive picks each tensor's ratio from the profile; expected no explicit ratio");
    if (!codec_has_uniform_errors(c->codec)) {
      throw InputError(where + "error_bound adaptive needs a codec whose errors the gradient-error model describes (szp or szh: uniform quantisation errors, zeros exact); codec '" +
                       c->codec + "' is not one");
    }
    return;
  }
  if (!c->ratio && (!(c->error_bound > 0) || !std::isfinite(c->error_bound))) {
    throw InputError(where + "a profile-driven compress rule needs error_bound > 0");
  }
}

// The class of a storage's values: the op kind of its last forward writer, which decides the
// content that is saved (an in-place ReLU overwrites the batch-norm output it shares storage with).
TensorClass storage_class(const Trace& trace, const StorageInfo& info) {
  for (auto it = info.writers.rbegin(); it != info.writers.rend(); ++it) {
    if (is_forward(trace, *it)) return tensor_class_of_op(trace.op(*it).kind);
  }
  return TensorClass::generic;
}

// The value features the trace gives for a storage's saved content: those of the tensor its
// last forward writer wrote into it (the same op that decides the class; an in-place ReLU's
// output, not the batch-norm output it overwrote). Empty when that tensor has none.
const traces::ValueFeatures& storage_values(const Trace& trace, TensorIndex s, const StorageInfo& info) {
  static const traces::ValueFeatures kNone;
  for (auto it = info.writers.rbegin(); it != info.writers.rend(); ++it) {
    if (!is_forward(trace, *it)) continue;
    const auto& outputs = trace.op(*it).outputs;
    for (auto t = outputs.rbegin(); t != outputs.rend(); ++t) {
      if (trace.storage_of(*t) == s) return trace.tensor(*t).values;
    }
    break;
  }
  return kNone;
}

// The error bound a compress rule gives one storage, and what the gradient-error model
// (gradient_error.hpp) says of it. `relative` is what the ratio models take.
struct StorageBound {
  double relative = 0;             // eb / value range, <= 1 (a range of 0: 1, the whole range)
  std::optional<double> absolute;  // eb in the tensor's units, when its range is known
  TensorBoundUse::From from = TensorBoundUse::From::fixed;
  std::string why_fallback;
  StorageGradientModel model;
  std::optional<double> predicted;  // the worst consumer's relative gradient error, when covered
  std::size_t worst_consumer = 0;
};

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

// The bound of storage `s` under compress rule `rule`: the rule's fixed bound (relative, or
// absolute through the range, capped at the whole range as before), or the adaptive one: the
// largest bound the model allows for the tolerance over every conv/linear consumer, capped at the
// range (eb_rel <= 1: a wider bound codes every value as one step). Storages the model does not
// cover take the fallback bound or are an InputError naming the tensor and the reason.
StorageBound storage_bound(const Trace& trace, const StorageInfo& info, const StrategySpec& spec, std::size_t rule, TensorIndex s,
                           const traces::ValueFeatures& values) {
  const CompressAction& c = *spec.rules[rule].compress();
  const std::string where = "strategy '" + spec.name + "' rule " + std::to_string(rule) + ": ";
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
double compress_ratio(const CompressAction& c, TensorClass cls, traces::DType dtype, double relative_bound, const traces::ValueFeatures& values = {}) {
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
  throw InputError("strategy '" + spec.name + "' rule " + std::to_string(rule) + ": error_bound_mode abs needs the value range of every tensor it compresses, and '" +
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
  throw InputError("strategy '" + spec.name + "' rule " + std::to_string(rule) + ": " + (compress ? "compressing '" : "decompressing '") +
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
  throw InputError("strategy '" + spec.name + "' rule " + std::to_string(rule) + ": compressing '" + tensor + "' (" + std::to_string(bytes) +
                   " B) at a ratio of " + short_number(ratio) + " gives " + short_number(compressed) +
                   " B; expected a finite compression ratio > 0");
}

struct Built {
  Schedule schedule;
  double recompute_seconds = 0;  // the recompute tasks' seconds added in schedule order (the reported figure)
  double recompute_exact = 0;    // their exact sum, rounded once
  std::size_t recompute_tasks = 0;
};

// Builds the schedule for a fixed plan. Compute tasks first (trace ops in recorded order with
// recomputations inserted before the backward ops that need them), then the copy and codec
// tasks, which are timed relative to compute positions, are slotted in after the compute
// task they wait for, so that `tasks` order is itself a valid one-at-a-time execution.
class Assembler {
 public:
  Assembler(const Analysis& a, const StrategySpec& spec, const StorageActions& plan) : a_(a), spec_(spec), plan_(plan) {}

  Built run(bool names) {
    names_ = names;
    const Trace& trace = *a_.trace;
    const std::size_t tensor_count = trace.tensors().size();
    original_.assign(tensor_count, kNone);
    restored_.assign(tensor_count, kNone);
    compressed_.assign(tensor_count, kNone);
    remat_.assign(tensor_count, kNone);
    consumers_.assign(tensor_count, {});
    op_task_.assign(trace.ops().size(), kNone);

    for (TensorIndex s : a_.storages) {
      const auto& tensor = trace.tensor(s);
      Buffer b;
      if (names_) b.name = tensor.name;
      b.bytes = tensor.bytes();
      b.role = memory_role_of(tensor.role);
      b.resident = !a_.info[s].written;  // held by its owner across iterations
      b.held_to_end = tensor.role == TensorRole::gradient;
      if (held(s)) b.role = MemoryRole::activation;  // held for the backward pass by a selective checkpoint
      b.tensor = s;
      original_[s] = add_buffer(std::move(b));
      if (plan_.action[s] == Action::offload) {
        restored_[s] = add_buffer(copy_buffer(s, MemoryRole::prefetch, tensor.bytes(), " (prefetched)"));
      } else if (plan_.action[s] == Action::compress) {
        const auto& c = *spec_.rules[plan_.rule[s]].compress();
        const traces::ValueFeatures& values = storage_values(trace, s, a_.info[s]);
        check_ranges(trace, spec_, plan_.rule[s], s, values);
        const StorageBound bound = storage_bound(trace, a_.info[s], spec_, plan_.rule[s], s, values);
        const double ratio = compress_ratio(c, storage_class(trace, a_.info[s]), tensor.dtype, bound.relative, values);
        const std::int64_t bytes = compressed_bytes(spec_, plan_.rule[s], tensor.name, tensor.bytes(), ratio);
        compressed_[s] = add_buffer(copy_buffer(s, MemoryRole::compressed, bytes, " (compressed)"));
        restored_[s] = add_buffer(copy_buffer(s, MemoryRole::activation, tensor.bytes(), " (decompressed)"));
      }
    }

    std::vector<bool> allocated(tensor_count, false);
    std::optional<std::size_t> clamp;  // compute position of the op just before the backward pass
    for (OpIndex o = 0; o < trace.ops().size(); ++o) {
      const auto& op = trace.op(o);
      const bool forward = op.phase == Phase::forward;
      if (!forward) {
        if (!clamp && !compute_.empty()) clamp = compute_.size() - 1;
        std::vector<TensorIndex> needed;
        for (TensorIndex t : op.inputs) {
          const TensorIndex s = trace.storage_of(t);
          if (plan_.action[s] == Action::drop && remat_[s] == kNone) needed.push_back(s);
        }
        if (!needed.empty()) rematerialise(needed);
      }
      Task task;
      if (names_) task.name = op.name;
      task.kind = TaskKind::op;
      task.op = o;
      task.seconds = a_.op_seconds[o];
      task.watts = a_.op_watts[o];
      for (TensorIndex t : op.inputs) task.uses.push_back(read_buffer(trace.storage_of(t), forward));
      for (TensorIndex t : op.outputs) {
        const TensorIndex s = trace.storage_of(t);
        task.uses.push_back(original_[s]);
        if (!allocated[s]) {
          allocated[s] = true;
          task.creates.push_back(original_[s]);
        }
      }
      sorted_unique(task.uses);
      op_task_[o] = compute_.size();
      compute_.push_back(std::move(task));
      compute_waits_.emplace_back();
    }

    // Selective checkpoints' holds: the backward op a storage is held to uses it.
    for (TensorIndex s : a_.storages) {
      if (!held(s)) continue;
      Task& task = compute_[op_task_[*plan_.held_until[s]]];
      task.uses.push_back(original_[s]);
      sorted_unique(task.uses);
    }

    add_side_tasks(clamp.value_or(0));
    return emit();
  }

 private:
  static constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();

  struct SideTask {
    Task task;
    std::size_t slot = 0;   // emitted right after this compute task
    int group = 0;          // order within a slot: offload, compress, prefetch, decompress
    std::size_t key = 0;    // order within a group
    TensorIndex storage = 0;
    std::vector<std::size_t> after_compute;
    std::vector<std::size_t> after_side;
  };

  BufferId add_buffer(Buffer b) {
    schedule_.buffers.push_back(std::move(b));
    return schedule_.buffers.size() - 1;
  }

  // Held by a selective checkpoint (and still kept: a budget rule may not have dropped it).
  bool held(TensorIndex s) const {
    return !plan_.held_until.empty() && plan_.held_until[s].has_value() && plan_.action[s] == Action::keep;
  }

  Buffer copy_buffer(TensorIndex s, MemoryRole role, std::int64_t bytes, const char* suffix) const {
    Buffer b;
    if (names_) b.name = a_.trace->tensor(s).name + suffix;
    b.bytes = bytes;
    b.role = role;
    b.tensor = s;
    return b;
  }

  // The buffer a compute task about to be appended reads for storage `s`.
  BufferId read_buffer(TensorIndex s, bool forward) {
    if (forward) return original_[s];
    switch (plan_.action[s]) {
      case Action::drop:
        if (remat_[s] == kNone) throw std::logic_error("strategy: dropped storage read before it was rebuilt");
        return remat_[s];
      case Action::offload:
      case Action::compress:
        consumers_[s].push_back(compute_.size());
        return restored_[s];
      case Action::keep:
        break;
    }
    return original_[s];
  }

  // Whether storage `s` can be read in the backward pass without replaying its producers.
  bool available(TensorIndex s) const {
    const StorageInfo& info = a_.info[s];
    if (!info.written) return true;  // resident
    if (plan_.pinned[s]) return true;  // kept by a checkpoints rule: recomputation starts from it
    if (held(s)) return true;          // a selective checkpoint's cached output or input
    if (remat_[s] != kNone) return true;
    switch (plan_.action[s]) {
      case Action::offload:
      case Action::compress: return true;
      case Action::drop: return false;
      case Action::keep: break;
    }
    // A kept storage that the backward pass reads lives on; reading it later extends it.
    // Anything read only in the forward pass (unsaved outputs) has been freed.
    return info.first_backward_read.has_value();
  }

  void collect(TensorIndex s, std::set<OpIndex>& replay) {
    if (available(s) || visiting_[s] == visit_) return;
    visiting_[s] = visit_;
    const Trace& trace = *a_.trace;
    for (OpIndex w : a_.info[s].writers) {
      if (!is_forward(trace, w) || !replay.insert(w).second) continue;
      for (TensorIndex t : trace.op(w).inputs) {
        const TensorIndex in = trace.storage_of(t);
        if (in != s) collect(in, replay);
      }
    }
  }

  // Replays, in forward order, the forward ops that rebuild `needed` from available storages.
  void rematerialise(const std::vector<TensorIndex>& needed) {
    const Trace& trace = *a_.trace;
    std::set<OpIndex> replay;
    // A new visit mark per replay (one array for all: clearing one per replay would cost the
    // number of tensors each time).
    if (visiting_.empty()) visiting_.assign(trace.tensors().size(), 0);
    ++visit_;
    for (TensorIndex s : needed) collect(s, replay);

    std::map<TensorIndex, BufferId> fresh;  // storages written in this replay -> new buffer
    for (OpIndex w : replay) {
      const auto& op = trace.op(w);
      Task task;
      if (names_) task.name = op.name + " (recompute)";
      task.kind = TaskKind::recompute;
      task.op = w;
      task.seconds = a_.op_seconds[w];
      task.watts = a_.op_watts[w];
      recompute_seconds_ += task.seconds;
      recompute_exact_.add(task.seconds);
      ++recompute_tasks_;
      for (TensorIndex t : op.inputs) {
        const TensorIndex s = trace.storage_of(t);
        if (const auto it = fresh.find(s); it != fresh.end()) {
          task.uses.push_back(it->second);
        } else if (remat_[s] != kNone) {
          task.uses.push_back(remat_[s]);
        } else if (available(s)) {
          task.uses.push_back(read_buffer(s, false));  // the restored copy for offload/compress
        } else {
          throw std::logic_error("strategy: recomputation reads a storage that is neither available nor rebuilt");
        }
      }
      for (TensorIndex t : op.outputs) {
        const TensorIndex s = trace.storage_of(t);
        auto it = fresh.find(s);
        if (it == fresh.end()) {
          // Kept beyond this replay only when it is a saved activation that was lost and
          // every op writing it is replayed here (so the copy holds the final content).
          const StorageInfo& info = a_.info[s];
          const bool complete = std::all_of(info.writers.begin(), info.writers.end(),
                                            [&](OpIndex x) { return replay.count(x) > 0; });
          const bool keep = complete && info.saved && !available(s);
          Buffer b;
          if (names_) b.name = trace.tensor(s).name + (keep ? " (recomputed)" : " (recompute scratch)");
          b.bytes = trace.tensor(s).bytes();
          b.role = keep ? MemoryRole::activation : MemoryRole::temporary;
          b.tensor = s;
          it = fresh.emplace(s, add_buffer(std::move(b))).first;
          task.creates.push_back(it->second);
          if (keep) remat_[s] = it->second;
        }
        task.uses.push_back(it->second);
      }
      sorted_unique(task.uses);
      compute_.push_back(std::move(task));
      compute_waits_.emplace_back();
    }
    for (TensorIndex s : needed) {
      if (remat_[s] == kNone) throw std::logic_error("strategy: recomputation did not rebuild a dropped storage");
    }
  }

  void add_side_tasks(std::size_t clamp) {
    const Trace& trace = *a_.trace;
    for (TensorIndex s : a_.storages) {
      const Action action = plan_.action[s];
      if (action != Action::offload && action != Action::compress) continue;
      auto& consumers = consumers_[s];
      if (consumers.empty()) continue;  // cannot happen for a storage with a gap
      sorted_unique(consumers);
      const StorageInfo& info = a_.info[s];
      const std::size_t last_forward = op_task_[*info.last_forward_use];
      const std::size_t first_consumer = consumers.front();
      const std::int64_t bytes = trace.tensor(s).bytes();
      const std::string& name = trace.tensor(s).name;
      const auto& rule = spec_.rules[plan_.rule[s]];

      SideTask out;
      out.storage = s;
      out.slot = last_forward;
      out.key = last_forward;
      out.after_compute = {last_forward};
      out.task.tensor = s;
      SideTask in;
      in.storage = s;
      in.key = first_consumer;
      in.task.tensor = s;
      in.task.creates = {restored_[s]};
      in.after_side = {side_.size()};  // waits for `out`, pushed just below
      if (action == Action::offload) {
        out.group = 0;
        out.task.kind = TaskKind::offload;
        out.task.stream = Stream::d2h;
        out.task.bytes = bytes;
        out.task.uses = {original_[s]};
        if (names_) out.task.name = "offload " + name;
        // Start the copy back when the compute stream starts the op `lookahead` positions
        // before the first consumer (= once the task before that one ends), but not before the
        // backward pass (nor before the copy out was issued). Lookahead 1 overlaps the copy
        // with the op just before the consumer, as vDNN prefetches during the previous layer.
        const auto lookahead = static_cast<std::size_t>(rule.offload()->lookahead);
        std::size_t trigger = first_consumer > lookahead ? first_consumer - lookahead - 1 : 0;
        trigger = std::max({trigger, clamp, last_forward});
        in.group = 2;
        in.slot = trigger;
        in.after_compute = {trigger};
        in.task.kind = TaskKind::prefetch;
        in.task.stream = Stream::h2d;
        in.task.bytes = bytes;
        if (names_) in.task.name = "prefetch " + name;
        const OffloadAction& o = *rule.offload();
        if (o.stream == OffloadAction::Stream::compute) {
          // save_on_cpu: the copy out is issued when the tensor is saved, on the compute
          // stream, so it runs right after its last writer and holds compute up; the copy back
          // runs on the compute stream just before the first backward use.
          const std::size_t last_writer = op_task_[info.writers.back()];
          out.slot = last_writer;
          out.key = last_writer;
          out.after_compute = {last_writer};
          out.task.stream = Stream::compute;
          in.slot = std::max(first_consumer - 1, last_forward);
          in.after_compute = {in.slot};
          in.task.stream = Stream::compute;
        }
        if (o.host_memory == OffloadAction::HostMemory::pageable) {
          const double rate = a_.time_model->platform().host_link.pageable_bandwidth;
          if (!(rate > 0)) {
            throw InputError("strategy '" + spec_.name + "' rule " + std::to_string(plan_.rule[s]) + ": offload host_memory pageable needs the platform's "
                             "host_link.pageable_bandwidth, which platform '" + a_.time_model->platform().name +
                             "' does not give; expected a platform that gives it (comptrain calibrate on the GPU measures it) or host_memory: pinned");
          }
          out.task.pageable = true;
          in.task.pageable = true;
          out.task.blocks_host = true;
          in.task.blocks_host = true;
        }
      } else {
        const auto& c = *rule.compress();
        out.group = 1;
        out.task.kind = TaskKind::compress;
        out.task.stream = Stream::codec;
        out.task.seconds = codec_seconds(spec_, plan_.rule[s], c, true, name, bytes);
        out.task.creates = {compressed_[s]};
        out.task.uses = {original_[s]};
        if (names_) out.task.name = "compress " + name;
        // Decompress just in time: once the compute task before the first consumer ends.
        in.group = 3;
        in.slot = first_consumer - 1;
        in.after_compute = {first_consumer - 1};
        in.task.kind = TaskKind::decompress;
        in.task.stream = Stream::codec;
        in.task.seconds = codec_seconds(spec_, plan_.rule[s], c, false, name, bytes);
        in.task.uses = {compressed_[s]};
        if (names_) in.task.name = "decompress " + name;
      }
      const std::size_t out_index = side_.size();
      if (action == Action::offload && rule.offload()->synchronous && rule.offload()->stream == OffloadAction::Stream::copy) {
        // vDNN: copy as soon as the last writer is done (overlapping the readers), and hold the
        // compute stream before the op after the last forward use until the copy has ended.
        const std::size_t last_writer = op_task_[a_.info[s].writers.back()];
        out.slot = last_writer;
        out.key = last_writer;
        out.after_compute = {last_writer};
        if (last_forward + 1 < compute_.size()) compute_waits_[last_forward + 1].push_back(out_index);
      }
      if (action == Action::offload && rule.offload()->free_by) {
        const std::size_t waiting = last_forward + static_cast<std::size_t>(*rule.offload()->free_by);
        if (waiting < compute_.size()) compute_waits_[waiting].push_back(out_index);
      }
      side_.push_back(std::move(out));
      const std::size_t in_index = side_.size();
      side_.push_back(std::move(in));
      for (std::size_t c : consumers) compute_waits_[c].push_back(in_index);
    }
  }

  Built emit() {
    std::vector<std::size_t> side_order(side_.size());
    std::iota(side_order.begin(), side_order.end(), std::size_t{0});
    std::sort(side_order.begin(), side_order.end(), [&](std::size_t x, std::size_t y) {
      const SideTask& p = side_[x];
      const SideTask& q = side_[y];
      return std::tie(p.slot, p.group, p.key, p.storage) < std::tie(q.slot, q.group, q.key, q.storage);
    });
    std::vector<TaskId> compute_id(compute_.size());
    std::vector<TaskId> side_id(side_.size());
    std::vector<std::pair<bool, std::size_t>> sequence;  // (is side task, index)
    sequence.reserve(compute_.size() + side_.size());
    std::size_t next_side = 0;
    for (std::size_t c = 0; c < compute_.size(); ++c) {
      compute_id[c] = sequence.size();
      sequence.emplace_back(false, c);
      while (next_side < side_order.size() && side_[side_order[next_side]].slot == c) {
        side_id[side_order[next_side]] = sequence.size();
        sequence.emplace_back(true, side_order[next_side]);
        ++next_side;
      }
    }
    schedule_.tasks.reserve(sequence.size());
    for (const auto& [is_side, index] : sequence) {
      if (is_side) {
        SideTask& side = side_[index];
        for (std::size_t c : side.after_compute) side.task.after.push_back(compute_id[c]);
        for (std::size_t s : side.after_side) side.task.after.push_back(side_id[s]);
        schedule_.tasks.push_back(std::move(side.task));
      } else {
        Task& task = compute_[index];
        for (std::size_t s : compute_waits_[index]) task.after.push_back(side_id[s]);
        sorted_unique(task.after);
        schedule_.tasks.push_back(std::move(task));
      }
    }
    // The last line of defence (the op-time model and codec_seconds check at the source): the
    // simulator gets finite, non-negative durations and payloads only, or an InputError.
    for (TaskId t = 0; t < schedule_.tasks.size(); ++t) {
      const Task& task = schedule_.tasks[t];
      if (std::isfinite(task.seconds) && task.seconds >= 0 && task.bytes >= 0) continue;
      const std::string what = task.op ? "op " + std::to_string(*task.op) + " (" + a_.trace->op(*task.op).name + ")"
                                       : "task " + std::to_string(t) + (task.name.empty() ? "" : " (" + task.name + ")");
      throw InputError("strategy '" + spec_.name + "': " + what + " would take " + short_number(task.seconds) + " s and move " +
                       std::to_string(task.bytes) + " B; expected a finite time >= 0 and a payload >= 0");
    }
    Built built;
    built.schedule = std::move(schedule_);
    built.recompute_seconds = recompute_seconds_;
    built.recompute_exact = recompute_exact_.value();
    built.recompute_tasks = recompute_tasks_;
    return built;
  }

  const Analysis& a_;
  const StrategySpec& spec_;
  const StorageActions& plan_;
  bool names_ = true;
  Schedule schedule_;
  std::vector<BufferId> original_, restored_, compressed_, remat_;
  std::vector<std::vector<std::size_t>> consumers_;  // compute positions reading the restored copy
  std::vector<std::size_t> op_task_;
  std::vector<Task> compute_;
  std::vector<std::vector<std::size_t>> compute_waits_;  // side tasks each compute task waits for
  std::vector<SideTask> side_;
  std::vector<std::size_t> visiting_;  // == visit_: visited by the current replay's walk
  std::size_t visit_ = 0;
  double recompute_seconds_ = 0;
  ExactSum recompute_exact_;
  std::size_t recompute_tasks_ = 0;
};

Built assemble(const Analysis& a, const StrategySpec& spec, const StorageActions& plan, bool names) {
  return Assembler(a, spec, plan).run(names);
}

// The full measure of a plan: build the schedule and replay it sequentially.
Evaluation evaluate(const Analysis& a, const StrategySpec& spec, const StorageActions& plan) {
  const Built built = assemble(a, spec, plan, false);
  return {detail::sequential_peak_bytes(built.schedule, detail::saved_activation_roles()), built.recompute_exact, built.recompute_tasks,
          built.recompute_seconds};
}

// Chen et al. 2016: keep every k-th candidate in forward production order (the k-th, 2k-th,
// ...), drop the rest.
void drop_all_but_every_kth(StorageActions& plan, const std::vector<TensorIndex>& candidates, std::size_t k) {
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    plan.action[candidates[i]] = (i + 1) % k == 0 ? Action::keep : Action::drop;
  }
}

std::size_t ceil_sqrt(std::size_t n) {
  auto k = static_cast<std::size_t>(std::sqrt(static_cast<double>(n)));
  while (k * k < n) ++k;
  while (k > 1 && (k - 1) * (k - 1) >= n) --k;
  return std::max<std::size_t>(k, 1);
}

// Scores the plans of one budget rule: each candidate kept or dropped, every other storage as
// `plan` has it (which it keeps up to date). With the incremental evaluator where the plan is
// within its model (no offloaded or compressed storage), else by building and measuring the
// whole schedule for every score; both give the same figures.
class PlanScorer {
 public:
  PlanScorer(const Analysis& a, const StrategySpec& spec, StorageActions& plan, const std::vector<TensorIndex>& candidates)
      : a_(a), spec_(spec), plan_(plan), candidates_(candidates), drop_(candidates.size(), false) {
    for (std::size_t i = 0; i < candidates.size(); ++i) drop_[i] = plan.action[candidates[i]] == Action::drop;
    if (RecomputeEvaluator::supports(plan)) evaluator_.emplace(a, plan, candidates);
  }

  bool incremental() const { return evaluator_.has_value(); }
  const std::vector<bool>& drops() const { return drop_; }
  void set(std::size_t i, bool drop) {
    if (drop_[i] == drop) return;
    drop_[i] = drop;
    plan_.action[candidates_[i]] = drop ? Action::drop : Action::keep;
    if (evaluator_) evaluator_->set(i, drop);
  }
  void set_all(const std::vector<bool>& drop) {
    for (std::size_t i = 0; i < drop.size(); ++i) set(i, drop[i]);
  }
  Evaluation evaluate() { return evaluator_ ? evaluator_->evaluate() : models::evaluate(a_, spec_, plan_); }
  Evaluation evaluate(const std::vector<bool>& drop) {
    set_all(drop);
    return evaluate();
  }
  // Fills e.ordered; e must be the score of the plan the scorer holds.
  double ordered(Evaluation& e) const {
    if (!e.ordered) e.ordered = evaluator_->ordered_seconds();
    return *e.ordered;
  }

 private:
  const Analysis& a_;
  const StrategySpec& spec_;
  StorageActions& plan_;
  const std::vector<TensorIndex>& candidates_;
  std::vector<bool> drop_;
  std::optional<RecomputeEvaluator> evaluator_;
};

// A lower bound of the recompute seconds of a budget rule's plans, exact (ExactSum), for
// skipping structured plans that cannot be chosen. Every forward writer of a dropped storage is
// replayed at least once (a storage is rebuilt only by replaying all of them), and so,
// recursively, is every forward writer of an input of a replayed op that no plan keeps
// available (an unsaved intermediate, a storage read in the forward pass only, another rule's
// drop), unless that input was rebuilt, which replayed its writers too. So a plan replays at
// least the union over its dropped candidates i (and the other rules' drops) of L_i: the
// forward writers reached from i walking back through such storages only. Per plan the bound
// costs the L_i of the dropped candidates, or, when most are dropped, the total less the ops
// that only kept candidates reach. L_i are computed once; if they add up to more than a few
// times the trace (storages no plan keeps shared by many candidates), the bound is 0: every
// plan is scored.
class ReplayLowerBound {
 public:
  ReplayLowerBound(const Analysis& a, const StorageActions& plan, const std::vector<TensorIndex>& candidates) : a_(a), n_(candidates.size()) {
    const Trace& trace = *a.trace;
    const std::size_t n_ops = trace.ops().size();
    constexpr std::size_t kNotCandidate = std::numeric_limits<std::size_t>::max();
    std::vector<std::size_t> candidate_index(trace.tensors().size(), kNotCandidate);
    for (std::size_t i = 0; i < n_; ++i) candidate_index[candidates[i]] = i;
    // Storages the walks go through: unavailable in every plan and not a candidate.
    auto other_drop = [&](TensorIndex s) { return plan.action[s] == Action::drop && candidate_index[s] == kNotCandidate; };
    auto never_available = [&](TensorIndex s) {
      const StorageInfo& info = a.info[s];
      if (candidate_index[s] != kNotCandidate || !info.written || plan.pinned[s]) return false;
      if (plan.action[s] == Action::drop) return true;
      return plan.action[s] == Action::keep && !info.first_backward_read;
    };
    std::vector<std::uint32_t> seen_storage(trace.tensors().size(), 0), seen_op(n_ops, 0);
    std::uint32_t stamp = 0;
    std::vector<TensorIndex> stack;
    // The ops reached from `starts` through never-available storages, each once per walk.
    auto walk = [&](auto&& starts, auto&& visit) {
      ++stamp;
      stack.clear();
      starts();
      while (!stack.empty()) {
        const TensorIndex s = stack.back();
        stack.pop_back();
        if (seen_storage[s] == stamp) continue;
        seen_storage[s] = stamp;
        for (OpIndex w : a.info[s].writers) {
          if (!is_forward(trace, w) || seen_op[w] == stamp) continue;
          seen_op[w] = stamp;
          if (!visit(w)) return false;
          for (TensorIndex t : trace.op(w).inputs) {
            const TensorIndex in = trace.storage_of(t);
            if (in != s && seen_storage[in] != stamp && never_available(in)) stack.push_back(in);
          }
        }
      }
      return true;
    };
    // Replayed in every plan: from the other rules' drops.
    always_.assign(n_ops, 0);
    walk([&] {
      for (TensorIndex s : a.storages) {
        if (other_drop(s)) stack.push_back(s);
      }
    }, [&](OpIndex w) {
      always_[w] = 1;
      always_sum_.add(a.op_seconds[w]);
      return true;
    });
    // L_i, less the ops replayed in every plan, within a budget.
    const std::size_t limit = 8 * (n_ops + n_) + 1024;
    reach_begin_.reserve(n_ + 1);
    for (std::size_t i = 0; i < n_; ++i) {
      reach_begin_.push_back(reach_.size());
      const bool within = walk([&] { stack.push_back(candidates[i]); }, [&](OpIndex w) {
        if (!always_[w]) reach_.push_back(w);
        return reach_.size() <= limit;
      });
      if (!within) {
        usable_ = false;
        reach_.clear();
        reach_begin_.clear();
        return;
      }
    }
    reach_begin_.push_back(reach_.size());
    // Per op, the candidates whose L_i holds it; the total over every op some plan replays.
    std::vector<std::size_t> count(n_ops + 1, 0);
    for (OpIndex w : reach_) ++count[w + 1];
    for (std::size_t o = 0; o < n_ops; ++o) count[o + 1] += count[o];
    cover_begin_ = count;
    cover_.resize(reach_.size());
    for (std::size_t i = 0; i < n_; ++i) {
      for (std::size_t k = reach_begin_[i]; k < reach_begin_[i + 1]; ++k) cover_[count[reach_[k]]++] = i;
    }
    all_sum_ = always_sum_;
    for (std::size_t o = 0; o < n_ops; ++o) {
      if (cover_begin_[o + 1] > cover_begin_[o]) all_sum_.add(a.op_seconds[o]);
    }
    op_mark_.assign(n_ops, 0);
    kept_mark_.assign(n_, 0);
  }

  // The bound of the plan that drops every candidate but those in `kept` (ascending).
  double operator()(const std::vector<std::size_t>& kept) {
    if (!usable_) return 0;
    if (++stamp_ == 0) {
      std::fill(op_mark_.begin(), op_mark_.end(), 0);
      std::fill(kept_mark_.begin(), kept_mark_.end(), 0);
      stamp_ = 1;
    }
    for (std::size_t i : kept) kept_mark_[i] = stamp_;
    if (2 * kept.size() >= n_) {
      // Mostly kept: the union over the dropped ones.
      ExactSum sum = always_sum_;
      for (std::size_t i = 0; i < n_; ++i) {
        if (kept_mark_[i] == stamp_) continue;
        for (std::size_t k = reach_begin_[i]; k < reach_begin_[i + 1]; ++k) {
          const OpIndex w = reach_[k];
          if (op_mark_[w] == stamp_) continue;
          op_mark_[w] = stamp_;
          sum.add(a_.op_seconds[w]);
        }
      }
      return sum.value();
    }
    // Mostly dropped: everything less the ops only kept candidates reach.
    ExactSum sum = all_sum_;
    for (std::size_t i : kept) {
      for (std::size_t k = reach_begin_[i]; k < reach_begin_[i + 1]; ++k) {
        const OpIndex w = reach_[k];
        if (op_mark_[w] == stamp_) continue;
        op_mark_[w] = stamp_;
        const bool kept_only = std::all_of(cover_.begin() + static_cast<std::ptrdiff_t>(cover_begin_[w]),
                                           cover_.begin() + static_cast<std::ptrdiff_t>(cover_begin_[w + 1]),
                                           [&](std::size_t c) { return kept_mark_[c] == stamp_; });
        if (kept_only) sum.subtract(a_.op_seconds[w]);
      }
    }
    return sum.value();
  }

 private:
  const Analysis& a_;
  std::size_t n_ = 0;
  bool usable_ = true;
  std::vector<char> always_;                 // per op: replayed in every plan
  ExactSum always_sum_, all_sum_;            // their seconds; those of every op some plan replays
  std::vector<OpIndex> reach_;               // L_i of candidate i at [reach_begin_[i], reach_begin_[i + 1])
  std::vector<std::size_t> reach_begin_;
  std::vector<std::size_t> cover_;           // per op w, the candidates whose L_i holds it
  std::vector<std::size_t> cover_begin_;
  std::vector<std::uint32_t> op_mark_, kept_mark_;
  std::uint32_t stamp_ = 0;
};

// Budget mode; see README.md ("Recompute: budget") for the algorithm and its guarantees.
std::optional<NotApplicable> plan_budget(const Analysis& a, const StrategySpec& spec, StorageActions& plan, const std::vector<TensorIndex>& candidates,
                 std::int64_t budget, std::size_t rule_index) {
  const std::size_t n = candidates.size();
  PlanScorer scorer(a, spec, plan, candidates);
  std::vector<std::int64_t> bytes(n);
  for (std::size_t i = 0; i < n; ++i) bytes[i] = a.trace->tensor(candidates[i]).bytes();
  // Plans compare by the recompute seconds their built schedule reports (Evaluation::ordered),
  // which this search has always compared. Exact sums farther apart than an ordered sum's
  // rounding can reach order the ordered sums alike (a sum of m non-negative terms in any order
  // is within (m - 1) u of the exact one, u = 2^-53, give or take its own rounding; twice that
  // is allowed); nearer, the ordered sum of the plan the scorer holds is computed.
  auto reach = [](const Evaluation& e) { return (static_cast<double>(e.tasks) + 2) * std::ldexp(e.exact, -52); };
  // -1, 0, 1 as the held plan's `e` recomputes less than, as much as or more than `than`
  // (whose ordered sum is known).
  auto compare_seconds = [&](Evaluation& e, const Evaluation& than) {
    if (std::abs(e.exact - than.exact) > reach(e) + reach(than)) return e.exact < than.exact ? -1 : 1;
    const double x = scorer.ordered(e);
    return x < *than.ordered ? -1 : (x == *than.ordered ? 0 : 1);
  };
  // The best plan is the one that fits with the least recompute seconds, then the lowest peak,
  // then the first in the README's order (structured plans in the order listed, then the
  // greedy's): a total order, so that the plans may be scored in any order (the greedy's first,
  // to skip structured plans that cannot win) with the same result.
  using Order = std::pair<int, std::size_t>;  // (0 structured | 1 greedy, place in that list)
  struct Best {
    std::vector<bool> drop;
    Evaluation e;
    Order order;
    bool found = false;
  } best;
  auto offer = [&](Evaluation e, Order order) {  // the plan the scorer holds, scored
    if (e.peak > budget) return e;
    if (best.found) {
      const int seconds = compare_seconds(e, best.e);
      if (seconds > 0 || (seconds == 0 && std::tie(e.peak, order) >= std::tie(best.e.peak, best.order))) return e;
    }
    scorer.ordered(e);
    best = {scorer.drops(), e, order, true};
    return e;
  };

  std::vector<bool> none(n, false);
  if (scorer.evaluate(none).peak <= budget) return std::nullopt;  // 0. keep everything if it fits

  // 2. Cost-ordered greedy: drop in ascending recompute-seconds per byte, keeping a drop only
  // when it does not raise the peak, until the budget is met. One storage changes per score.
  std::vector<std::size_t> by_ratio(n);
  std::iota(by_ratio.begin(), by_ratio.end(), std::size_t{0});
  auto ratio = [&](std::size_t i) {
    return bytes[i] > 0 ? a.info[candidates[i]].forward_seconds / static_cast<double>(bytes[i]) : std::numeric_limits<double>::infinity();
  };
  std::stable_sort(by_ratio.begin(), by_ratio.end(), [&](std::size_t x, std::size_t y) { return ratio(x) < ratio(y); });
  {
    std::int64_t peak = scorer.evaluate(none).peak;
    std::size_t step = 0;
    for (std::size_t i : by_ratio) {
      scorer.set(i, true);
      const Evaluation e = offer(scorer.evaluate(), {1, step++});
      if (e.peak <= peak) {
        peak = e.peak;
        if (peak <= budget) break;
      } else {
        scorer.set(i, false);
      }
    }
  }

  // 1. Structured plans, generated first and scored in ascending order of a lower bound of
  // their recompute seconds (ReplayLowerBound), while the bound does not exceed the best plan's
  // seconds: a plan whose bound does cannot be chosen.
  const Trace& trace = *a.trace;
  std::vector<char> is_candidate(trace.tensors().size(), 0);
  for (TensorIndex s : candidates) is_candidate[s] = 1;
  ReplayLowerBound lower_bound(a, plan, candidates);
  // Each structured plan drops every candidate but a kept set (ascending indices).
  struct Structured {
    std::vector<std::size_t> kept;
    double bound = 0;
  };
  std::vector<Structured> structured;
  auto consider = [&](std::vector<std::size_t> kept) {
    const double bound = lower_bound(kept);
    structured.push_back({std::move(kept), bound});
  };
  // Every k-th kept for every useful k (sqrt_n among them) ...
  std::set<std::size_t> ks;
  for (std::size_t k = 2; k <= std::min<std::size_t>(n, 2 * ceil_sqrt(n) + 2); ++k) ks.insert(k);
  for (std::size_t k = 2; k <= n; k *= 2) ks.insert(k);
  ks.insert(n + 1);  // drop everything
  for (std::size_t k : ks) {
    std::vector<std::size_t> kept;
    for (std::size_t i = k - 1; i < n; i += k) kept.push_back(i);
    consider(std::move(kept));
  }
  // ... and Chen's byte-threshold segmentation (their Algorithm for a budget): walking in
  // production order, keep a candidate as a checkpoint once the dropped bytes since the
  // last one exceed a threshold; thresholds swept geometrically.
  std::int64_t total = 0;
  for (std::int64_t b : bytes) total += b;
  for (double threshold = static_cast<double>(total); threshold >= 1; threshold /= 1.5) {
    std::vector<std::size_t> kept;
    double run = 0;
    for (std::size_t i = 0; i < n; ++i) {
      run += static_cast<double>(bytes[i]);
      if (run <= threshold) continue;
      kept.push_back(i);
      run = 0;
    }
    consider(std::move(kept));
  }
  // ... and Chen's segments on a DAG: checkpoints only at separators (a candidate that is, when
  // its last forward writer ends, the only storage needing recomputation that a later forward
  // op still reads — ResNet block outputs, transformer layer outputs), every k-th separator
  // kept, every other candidate dropped. Dropping a non-separator between two kept separators
  // cannot make a rebuild cascade past the segment.
  {
    std::vector<int> crossing(trace.ops().size() + 1, 0);  // difference array over forward ops
    for (TensorIndex s : a.storages) {
      const StorageInfo& info = a.info[s];
      if (!info.written || !info.written_in_forward_only) continue;
      // Anything not rebuilt here: resident, or restored/kept by another rule.
      if (info.saved && !is_candidate[s] && info.first_backward_read) continue;
      std::optional<OpIndex> last_read;
      for (OpIndex r : info.readers) {
        if (is_forward(trace, r)) last_read = r;
      }
      if (!last_read || *last_read <= info.writers.back()) continue;
      ++crossing[info.writers.front()];
      --crossing[*last_read];
    }
    for (std::size_t o = 1; o < crossing.size(); ++o) crossing[o] += crossing[o - 1];
    std::vector<std::size_t> separators;
    for (std::size_t i = 0; i < n; ++i) {
      const StorageInfo& info = a.info[candidates[i]];
      const OpIndex w = info.writers.back();
      const bool read_later = std::any_of(info.readers.begin(), info.readers.end(),
                                          [&](OpIndex r) { return r > w && is_forward(trace, r); });
      if (read_later && crossing[w] == 1) separators.push_back(i);
    }
    for (std::size_t k = 1; k <= separators.size(); ++k) {
      std::vector<std::size_t> kept;
      for (std::size_t j = k - 1; j < separators.size(); j += k) kept.push_back(separators[j]);
      consider(std::move(kept));
    }
  }
  std::vector<std::size_t> by_bound(structured.size());
  std::iota(by_bound.begin(), by_bound.end(), std::size_t{0});
  std::stable_sort(by_bound.begin(), by_bound.end(), [&](std::size_t x, std::size_t y) { return structured[x].bound < structured[y].bound; });
  // A plan of m recompute tasks reports at least bound * (1 - (m + 2) u); m is at most every
  // forward op replayed before every other op.
  const double most_tasks = static_cast<double>(trace.ops().size()) * static_cast<double>(trace.ops().size());
  const double shortfall = 1 - (most_tasks + 2) * std::ldexp(1.0, -52);
  for (std::size_t p : by_bound) {
    if (best.found && structured[p].bound * shortfall > *best.e.ordered) break;  // so are all after it
    std::vector<bool> drop(n, true);
    for (std::size_t i : structured[p].kept) drop[i] = false;
    offer(scorer.evaluate(drop), {0, p});
  }
  if (!best.found) {
    std::ostringstream message;
    message << "strategy rule " << rule_index << ": recompute budget of " << budget
            << " bytes of saved activations cannot be met: dropping every selected activation still peaks at "
            << scorer.evaluate(std::vector<bool>(n, true)).peak << " bytes";
    return NotApplicable{message.str()};
  }
  // 3. Local improvement of the cheapest feasible plan: keep dropped storages again (most
  // expensive first) while the budget holds, then move checkpoints onto a more expensive
  // neighbour (keep it, drop the cheaper one) when that stays within budget and saves time.
  scorer.set_all(best.drop);
  Evaluation current = best.e;
  std::vector<std::size_t> by_cost(n);
  std::iota(by_cost.begin(), by_cost.end(), std::size_t{0});
  std::stable_sort(by_cost.begin(), by_cost.end(), [&](std::size_t x, std::size_t y) {
    return a.info[candidates[x]].forward_seconds > a.info[candidates[y]].forward_seconds;
  });
  // Scores the plan with the changes made; keeps it if it fits and recomputes less.
  auto improves = [&]() {
    Evaluation e = scorer.evaluate();
    if (e.peak <= budget && compare_seconds(e, current) < 0) {
      scorer.ordered(e);
      current = e;
      return true;
    }
    return false;
  };
  for (std::size_t i : by_cost) {
    if (!scorer.drops()[i]) continue;
    scorer.set(i, false);
    if (!improves()) scorer.set(i, true);
  }
  for (std::size_t i : by_cost) {
    if (!scorer.drops()[i]) continue;
    for (const std::size_t j : {i - 1, i + 1}) {  // i - 1 wraps to a huge value at 0
      if (j >= n || scorer.drops()[j] || a.info[candidates[j]].forward_seconds >= a.info[candidates[i]].forward_seconds) continue;
      scorer.set(i, false);
      scorer.set(j, true);
      if (improves()) break;
      scorer.set(i, true);
      scorer.set(j, false);
    }
  }
  // The plan is in `plan` now. Scored incrementally, it is measured once in full: the result
  // must meet the budget by the built schedule's own replay, with the figures the search used.
  if (scorer.incremental()) {
    const Evaluation measured = evaluate(a, spec, plan);
    if (measured.peak > budget || measured.peak != current.peak || measured.exact != current.exact || measured.ordered != current.ordered) {
      throw std::logic_error("strategy rule " + std::to_string(rule_index) + ": the budget plan's incremental score (peak " +
                             std::to_string(current.peak) + " B, " + short_number(current.exact) + " s) differs from its built schedule's (" +
                             std::to_string(measured.peak) + " B, " + short_number(measured.exact) + " s)");
    }
  }
  return std::nullopt;
}

std::string describe(const StrategySpec& spec, const StorageActions& plan, const Analysis& a, const Built& built) {
  std::size_t counts[4] = {0, 0, 0, 0};
  std::int64_t bytes[4] = {0, 0, 0, 0};
  for (TensorIndex s : a.storages) {
    if (!a.info[s].saved) continue;
    const auto i = static_cast<std::size_t>(plan.action[s]);
    ++counts[i];
    bytes[i] += a.trace->tensor(s).bytes();
  }
  std::ostringstream out;
  out << spec.name;
  if (spec.rules.empty()) return out.str();
  out << ": saved activations kept " << counts[0] << " (" << bytes[0] << " B), offloaded " << counts[1] << " ("
      << bytes[1] << " B), compressed " << counts[2] << " (" << bytes[2] << " B), dropped " << counts[3] << " ("
      << bytes[3] << " B); recomputed ops " << built.recompute_tasks << " (" << built.recompute_seconds << " s)";
  return out.str();
}

// What PyTorch's selective activation checkpointing holds beyond checkpoints' split
// (torch/utils/checkpoint.py, pytorch/pytorch@0008d771; the same behaviour in the December 2024
// release torchtitan's published runs used). Per checkpointed block (a module instance of
// `rc.blocks`):
//  - _CachingTorchDispatchMode stores the output of every op the policy answers MUST_SAVE in the
//    frame's storage during the forward; _CachedTorchDispatchMode hands it back (and lets go of
//    it) when the recomputation reruns that op. The recomputation runs at the block's first
//    backward use (_checkpoint_hook's unpack_hook) and, with early stop (the default), stops
//    as soon as every tensor the block saved has been packed again (_recomputation_hook's
//    pack_hook raises _StopRecomputationError). An op whose saved tensors are all inputs packs
//    them before it runs (autograd saves inputs before dispatching the op), so the block's last
//    op that saves anything, unless it saves an output, and every op after it never rerun: their
//    cached outputs stay in the storage until the frame dies, with the last autograd node of the
//    block that holds its saved-tensor hooks: the block's last backward op.
//  - non-reentrant checkpoint keeps its tensor arguments (save_inputs) in a node no gradient
//    reaches, also alive as long as the frame: the block's inputs stay to its last backward op.
//    A kept output read by a forward op of another block is such an input (the residual stream
//    `keep` names), not a cached op output.
// A storage's hold is the latest backward op it is held to; held storages count as activations.
void hold_selective_caches(const Analysis& a, const RecomputeAction& rc, StorageActions& plan) {
  const Trace& trace = *a.trace;
  if (plan.held_until.empty()) plan.held_until.assign(trace.tensors().size(), std::nullopt);
  struct Block {
    std::vector<OpIndex> forward;
    std::optional<OpIndex> first_backward;
    std::optional<OpIndex> last_backward;
  };
  std::map<std::string, Block> blocks;
  std::vector<const Block*> block_of_op(trace.ops().size(), nullptr);
  for (OpIndex o = 0; o < trace.ops().size(); ++o) {
    const auto& op = trace.op(o);
    if (op.phase == Phase::optimizer) continue;
    for (const std::string& pattern : rc.blocks) {
      if (const auto instance = module_pattern_instance(pattern, op.name)) {
        Block& block = blocks[std::string(*instance)];
        block_of_op[o] = &block;
        if (op.phase == Phase::forward) {
          block.forward.push_back(o);
        } else {
          if (!block.first_backward) block.first_backward = o;
          block.last_backward = o;
        }
        break;
      }
    }
  }
  const auto read_in_backward = [&](TensorIndex s) {
    const auto& readers = a.info[s].readers;
    return std::any_of(readers.begin(), readers.end(), [&](OpIndex r) { return trace.op(r).phase == Phase::backward; });
  };
  const auto hold = [&](TensorIndex s, OpIndex until) {
    auto& h = plan.held_until[s];
    if (!h || *h < until) h = until;
  };
  for (auto& [name, block] : blocks) {
    if (!block.last_backward || block.forward.empty()) continue;
    // Where the recomputation stops: the last forward op of the block that saves a tensor (one a
    // backward op reads); it reruns only when it saves an output.
    std::optional<std::size_t> reruns_until;  // forward ops [0, reruns_until) rerun
    for (std::size_t i = block.forward.size(); i-- > 0;) {
      const auto& op = trace.op(block.forward[i]);
      const auto saves = [&](const std::vector<TensorIndex>& list) {
        return std::any_of(list.begin(), list.end(), [&](TensorIndex t) { return read_in_backward(trace.storage_of(t)); });
      };
      if (saves(op.outputs)) {
        reruns_until = i + 1;
        break;
      }
      if (saves(op.inputs)) {
        reruns_until = i;
        break;
      }
    }
    const std::size_t rerun = reruns_until.value_or(0);
    std::set<TensorIndex> written_here;
    for (OpIndex o : block.forward) {
      for (TensorIndex t : trace.op(o).outputs) written_here.insert(trace.storage_of(t));
    }
    // A kept output that a forward op outside the block reads is the block's output, which `keep`
    // names as the next block's input (the residual stream), not an op output the policy caches.
    const auto leaves_block = [&](TensorIndex s) {
      for (OpIndex r : a.info[s].readers) {
        if (trace.op(r).phase == Phase::forward && block_of_op[r] != &block) return true;
      }
      return false;
    };
    for (std::size_t i = 0; i < block.forward.size(); ++i) {
      for (TensorIndex t : trace.op(block.forward[i]).outputs) {
        const TensorIndex s = trace.storage_of(t);
        if (plan.action[s] != Action::keep || !matches_any(rc.keep, trace.tensor(s).name) || leaves_block(s)) continue;
        hold(s, i < rerun ? *block.first_backward : *block.last_backward);
      }
    }
    // The checkpoint's tensor arguments: activations the block reads and does not write.
    for (OpIndex o : block.forward) {
      for (TensorIndex t : trace.op(o).inputs) {
        const TensorIndex s = trace.storage_of(t);
        if (!a.info[s].written || written_here.contains(s) || plan.action[s] != Action::keep) continue;
        hold(s, *block.last_backward);
      }
    }
  }
}

struct FixedPlan {
  StorageActions plan;
  std::vector<std::vector<TensorIndex>> recompute_candidates;  // per rule
};

// Every decision but the budget rules': the first matching rule per storage, offload and
// compress actions, the fixed recompute modes; each recompute rule's candidates in forward
// production order (a budget rule's still kept).
FixedPlan fixed_decisions(const Analysis& a, const StrategySpec& strategy) {
  const Trace& trace = *a.trace;
  FixedPlan fixed;
  StorageActions& plan = fixed.plan;
  plan.action.assign(trace.tensors().size(), Action::keep);
  plan.rule.assign(trace.tensors().size(), kNoRule);
  plan.pinned.assign(trace.tensors().size(), false);
  // First matching rule decides; a storage without a gap stays kept whatever its rule.
  auto& recompute_candidates = fixed.recompute_candidates;
  recompute_candidates.resize(strategy.rules.size());
  for (TensorIndex s : a.storages) {
    if (!a.info[s].saved) continue;
    for (std::size_t r = 0; r < strategy.rules.size(); ++r) {
      const auto& rule = strategy.rules[r];
      if (!selects(a, rule.select, s)) continue;
      // Integer and boolean storages (max-pool indices, dropout masks) hold no values a lossy
      // codec may touch: a compress rule takes them only when it names them.
      if (rule.compress() && !traces::is_floating(trace.tensor(s).dtype) && !names_storage(rule.select, trace.tensor(s).name)) continue;
      plan.rule[s] = r;
      if (a.info[s].gap) {
        if (rule.offload()) plan.action[s] = Action::offload;
        if (rule.compress()) plan.action[s] = Action::compress;
        if (rule.recompute()) recompute_candidates[r].push_back(s);
      }
      break;
    }
  }
  // Recompute candidates in forward production order (first writer, then storage).
  for (auto& candidates : recompute_candidates) {
    std::stable_sort(candidates.begin(), candidates.end(), [&](TensorIndex x, TensorIndex y) {
      return a.info[x].writers.front() < a.info[y].writers.front();
    });
  }
  // every_k, sqrt_n and checkpoints first: budget rules then search with those decisions in place.
  for (std::size_t r = 0; r < strategy.rules.size(); ++r) {
    const RecomputeAction* rc = strategy.rules[r].recompute();
    if (!rc || rc->mode == RecomputeAction::Mode::budget) continue;
    const auto& candidates = recompute_candidates[r];
    if (rc->mode == RecomputeAction::Mode::all) {
      for (TensorIndex s : candidates) plan.action[s] = Action::drop;
      continue;
    }
    if (rc->mode == RecomputeAction::Mode::checkpoints || rc->mode == RecomputeAction::Mode::selective) {
      for (TensorIndex s : candidates) plan.action[s] = matches_any(rc->keep, trace.tensor(s).name) ? Action::keep : Action::drop;
      // Block inputs autograd does not save are kept all the same, as checkpoint saves them.
      for (TensorIndex s : a.storages) {
        if (a.info[s].written && !a.info[s].saved && matches_any(rc->keep, trace.tensor(s).name)) plan.pinned[s] = true;
      }
      if (rc->mode == RecomputeAction::Mode::selective) hold_selective_caches(a, *rc, plan);
      continue;
    }
    const std::size_t k = rc->mode == RecomputeAction::Mode::every_k ? static_cast<std::size_t>(rc->k)
                                                                      : ceil_sqrt(candidates.size());
    drop_all_but_every_kth(plan, candidates, k);
  }
  return fixed;
}

}  // namespace

void validate_strategy(const StrategySpec& strategy) {
  for (std::size_t r = 0; r < strategy.rules.size(); ++r) check_rule(strategy, r);
}

std::variant<Schedule, NotApplicable> build_schedule(const Trace& trace, const OpTimeModel& time_model, const StrategySpec& strategy) {
  validate_strategy(strategy);
  const Analysis a = analyse(trace, time_model);
  FixedPlan fixed = fixed_decisions(a, strategy);
  StorageActions& plan = fixed.plan;
  const auto& recompute_candidates = fixed.recompute_candidates;
  for (std::size_t r = 0; r < strategy.rules.size(); ++r) {
    const RecomputeAction* rc = strategy.rules[r].recompute();
    if (!rc || rc->mode != RecomputeAction::Mode::budget) continue;
    if (auto not_applicable = plan_budget(a, strategy, plan, recompute_candidates[r], rc->budget_bytes, r)) return *not_applicable;
  }

  Built built = assemble(a, strategy, plan, true);
  built.schedule.strategy = describe(strategy, plan, a, built);
  // Compressed storages whose decompressed copy a recompute replay reads: their error enters the
  // recomputed activations too, which the gradient-error prediction leaves out (reported).
  std::set<TensorIndex> read_by_recomputation;
  {
    std::map<BufferId, TensorIndex> decompressed;
    for (const Task& task : built.schedule.tasks) {
      if (task.kind == TaskKind::decompress && task.tensor) {
        for (BufferId b : task.creates) decompressed[b] = *task.tensor;
      }
    }
    for (const Task& task : built.schedule.tasks) {
      if (task.kind != TaskKind::recompute) continue;
      for (BufferId b : task.uses) {
        if (auto it = decompressed.find(b); it != decompressed.end()) read_by_recomputation.insert(it->second);
      }
    }
  }
  for (std::size_t r = 0; r < strategy.rules.size(); ++r) {
    const CompressAction* c = strategy.rules[r].compress();
    if (!c || !c->profile) continue;  // explicit numbers are in the scenario already
    CompressionModelUse use;
    use.rule = r;
    use.profile = c->profile->name;
    use.profile_source = c->profile->source;
    use.codec = c->codec;
    use.error_bound = c->error_bound;
    use.error_bound_mode = c->error_bound_mode;
    use.compress = codec_time(*c, true);
    use.decompress = codec_time(*c, false);
    use.ratio_overridden = c->ratio.has_value();
    if (c->adaptive) {
      use.gradient_error_tolerance = c->adaptive->tolerance;
      use.fallback_error_bound = c->adaptive->fallback_error_bound;
    }
    // Per class: the bytes, the compressed bytes (unrounded) and whether a tensor's own
    // features moved its ratio off the class's; then the class's one ratio, or the
    // byte-weighted mean when they did.
    struct ClassTotals {
      double bytes = 0;
      double compressed = 0;
      bool from_values = false;
    };
    std::map<TensorClass, ClassTotals> classes;
    CompressionFeatureUse features;
    features.rule = r;
    for (TensorIndex s : a.storages) {
      if (plan.rule[s] != r || plan.action[s] != Action::compress) continue;
      const TensorClass cls = storage_class(trace, a.info[s]);
      const traces::ValueFeatures& values = storage_values(trace, s, a.info[s]);
      const auto bytes = static_cast<double>(trace.tensor(s).bytes());
      const StorageBound bound = storage_bound(trace, a.info[s], strategy, r, s, values);
      const double ratio = compress_ratio(*c, cls, trace.tensor(s).dtype, bound.relative, values);
      ClassTotals& totals = classes[cls];
      totals.bytes += bytes;
      totals.compressed += bytes / ratio;
      TensorBoundUse& tensor = use.tensors.emplace_back();
      tensor.tensor = trace.tensor(s).name;
      // The consumers, the one the prediction is at first.
      for (std::size_t k = 0; k < bound.model.consumers.size(); ++k) {
        const auto& consumer = bound.model.consumers[(k + bound.worst_consumer) % bound.model.consumers.size()];
        for (traces::OpIndex o : consumer.ops) tensor.consumers.push_back(trace.op(o).name);
      }
      tensor.from = bound.from;
      tensor.why_fallback = bound.why_fallback;
      tensor.relative_error_bound = bound.relative;
      tensor.absolute_error_bound = bound.absolute;
      tensor.ratio = ratio;
      tensor.predicted_gradient_error = bound.predicted;
      if (bound.predicted) tensor.statistics_batch = bound.model.consumers[bound.worst_consumer].measured_batch;
      tensor.relu_mask = bound.model.relu_reader && bound.model.coverage == StorageGradientModel::Coverage::covered;
      tensor.read_by_recomputation = read_by_recomputation.count(s) > 0;
      if (!use.ratio_overridden && traces::element_size(trace.tensor(s).dtype) != 4) use.ratio_converted_to_element_size = true;
      ++features.storages;
      if (uses_values(*c, values)) {
        totals.from_values = true;
        ++features.with_features;
      }
    }
    for (const auto& [cls, totals] : classes) {
      // Tensors of one class can differ in their own features, their relative bound (abs mode)
      // and their element type: the class's figure is what its bytes compressed to.
      use.ratios.emplace_back(cls, totals.compressed > 0 ? totals.bytes / totals.compressed : 1.0);
    }
    built.schedule.compression.push_back(std::move(use));
    built.schedule.compression_features.push_back(features);
  }
  return std::move(built.schedule);
}

std::vector<SavedActivation> saved_activations(const Trace& trace, const OpTimeModel& time_model) {
  const Analysis a = analyse(trace, time_model);
  std::vector<SavedActivation> saved;
  for (TensorIndex s : a.storages) {
    const StorageInfo& info = a.info[s];
    if (!info.gap) continue;
    saved.push_back({s, trace.tensor(s).bytes(), *info.last_forward_use, *info.first_backward_read, info.writers});
  }
  return saved;
}

bool name_matches(const std::string& pattern, const std::string& name) {
  return pattern == name || fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

namespace strategy_detail {

std::size_t recompute_candidate_count(const Trace& trace, const OpTimeModel& time_model, const StrategySpec& strategy, std::size_t rule) {
  validate_strategy(strategy);
  const Analysis a = analyse(trace, time_model);
  return fixed_decisions(a, strategy).recompute_candidates.at(rule).size();
}

std::vector<EvaluatorCheck> check_recompute_evaluator(const Trace& trace, const OpTimeModel& time_model, const StrategySpec& strategy,
                                                      std::size_t rule, const std::vector<std::vector<bool>>& plans) {
  validate_strategy(strategy);
  const Analysis a = analyse(trace, time_model);
  FixedPlan fixed = fixed_decisions(a, strategy);
  const auto& candidates = fixed.recompute_candidates.at(rule);
  RecomputeEvaluator evaluator(a, fixed.plan, candidates);
  std::vector<EvaluatorCheck> checks;
  for (const auto& drop : plans) {
    if (drop.size() != candidates.size()) throw std::invalid_argument("check_recompute_evaluator: a plan of the wrong size");
    for (std::size_t i = 0; i < drop.size(); ++i) {
      evaluator.set(i, drop[i]);
      fixed.plan.action[candidates[i]] = drop[i] ? Action::drop : Action::keep;
    }
    Evaluation incremental = evaluator.evaluate();
    incremental.ordered = evaluator.ordered_seconds();
    checks.push_back({incremental, evaluate(a, strategy, fixed.plan)});
  }
  return checks;
}

}  // namespace strategy_detail

}  // namespace comptrain::models

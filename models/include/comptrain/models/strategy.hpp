#pragma once
// Memory-saving strategies: plans over the trace's saved activations, turned into a
// Schedule that the simulator executes. Strategies combine per tensor: an ordered list of
// rules, each selecting activations and giving them an action; the first rule that selects a
// tensor decides, unselected tensors are kept.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comptrain/models/compression_model.hpp"
#include "comptrain/models/op_time.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::models {

// Which saved activations a rule applies to. A storage is selected when it is saved for
// backward and (if given) it is read by a forward op of one of `inputs_of`, or written by a
// forward op of one of `outputs_of`, and it is at least `min_bytes` large. Both lists empty:
// every saved activation.
struct TensorSelector {
  std::vector<traces::OpKind> inputs_of;
  std::vector<traces::OpKind> outputs_of;
  std::int64_t min_bytes = 0;
};

struct OffloadAction {
  int lookahead = 2;  // the prefetch starts when the compute stream starts the op this many
                      // ops before the consumer (>= 1)
  // vDNN's synchronous mode (Rhu et al., MICRO'16): the copy starts as soon as the tensor is
  // complete and the compute stream does not run the op after the tensor's last forward use
  // until the copy has ended, so the forward pass never runs ahead of its offloads. Otherwise
  // the copy starts after the last forward use and nothing waits for it.
  bool synchronous = false;
};

struct RecomputeAction {
  enum class Mode { every_k, sqrt_n, budget };
  Mode mode = Mode::sqrt_n;
  int k = 2;                             // every_k: keep every k-th selected activation
  std::int64_t budget_bytes = 0;         // budget: peak bytes of saved activations allowed
};

// Compression, costed by explicit numbers, by a calibration profile, or by a profile with some
// numbers overridden (what-if studies).
struct CompressAction {
  double ratio = 1;                  // original bytes / compressed bytes (>= 1)
  double compress_bandwidth = 0;     // bytes of input per second
  double decompress_bandwidth = 0;   // bytes of output per second
  double latency = 0;                // seconds per call (compress and decompress alike)
  double error_bound = 0;            // relative to the value range; picks the profile's ratio

  // With a profile, each number above whose explicit_* flag is false comes from the profile's
  // models for `codec`: the ratio from the ratio model of the tensor's class (derived from the op
  // that produces it) at `error_bound`, with the class's default features overridden field by
  // field by the value features the trace gives for the saved content (traces/FORMAT.md,
  // "values"), the seconds from the compress / decompress time models.
  std::shared_ptr<const CalibrationProfile> profile;
  bool profile_auto = false;  // `profile: auto`: picked for the platform, re-picked when it changes (sim::set_platform)
  std::string codec = "szp";
  // error_bound_mode abs: error_bound is in the tensor's own units, and the ratio model (which
  // takes bounds relative to the value range) gets error_bound / range, with the range from the
  // trace's value features; a storage without one is an error.
  bool absolute_bound = false;
  bool explicit_ratio = true;
  bool explicit_compress_bandwidth = true;
  bool explicit_decompress_bandwidth = true;
  bool explicit_latency = true;
};

// The class of an activation whose content an op of this kind wrote last (the strategy uses the
// storage's last forward writer): relu -> post_relu, batchnorm,
// gelu, linear and matmul -> linear, anything else -> generic.
TensorClass tensor_class_of_op(traces::OpKind kind);

struct StrategyRule {
  TensorSelector select;
  std::optional<OffloadAction> offload;
  std::optional<RecomputeAction> recompute;
  std::optional<CompressAction> compress;  // exactly one of the three is set
};

struct StrategySpec {
  std::string name = "baseline";
  std::vector<StrategyRule> rules;  // empty: baseline
};

// Builds the schedule: the trace's ops on the compute stream in recorded order, plus the
// copies, codec tasks and recomputations the rules call for. Throws InputError when a rule
// cannot apply (e.g. a memory budget below what the checkpoints alone need).
Schedule build_schedule(const traces::Trace& trace, const OpTimeModel& time_model, const StrategySpec& strategy);

}  // namespace comptrain::models

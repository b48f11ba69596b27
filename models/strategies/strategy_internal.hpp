#pragma once
// Internal to models/strategies: what the schedule builder (build_internal.hpp) and the budget
// mode's plan evaluator (recompute_evaluator.hpp) share -- the per-storage analysis of a trace, a
// plan's decision per storage, and the exact sum both use for recompute seconds.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "comptrain/models/op_time.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::models::strategy_detail {

inline constexpr std::size_t kNoRule = std::numeric_limits<std::size_t>::max();

// What happens to one storage's bytes between its forward and backward uses.
enum class Action : std::uint8_t { keep, offload, compress, drop };

// Per storage (indexed by the base tensor's index; views' entries stay empty).
struct StorageInfo {
  bool written = false;             // some op writes it or one of its views
  bool written_in_forward_only = true;
  std::vector<traces::OpIndex> writers;     // ascending
  std::vector<traces::OpIndex> readers;     // ascending
  std::optional<traces::OpIndex> last_forward_use;
  std::optional<traces::OpIndex> first_backward_read;
  bool saved = false;               // role activation and written: a candidate for the rules
  bool gap = false;                 // can be offloaded / compressed / dropped
  double forward_seconds = 0;       // its forward writers, once: the cost of recomputing it alone
};

struct Analysis {
  const traces::Trace* trace = nullptr;
  const OpTimeModel* time_model = nullptr;
  std::vector<traces::TensorIndex> storages;  // base tensors, ascending
  std::vector<StorageInfo> info;              // indexed by tensor
  std::vector<double> op_seconds;             // time_model.seconds per op, computed once
  std::vector<double> op_watts;               // the power of each op's kernels (OpTimeModel::run; 0: unknown)
  std::optional<traces::OpIndex> first_backward_op;
};

inline bool is_forward(const traces::Trace& trace, traces::OpIndex op) { return trace.op(op).phase == traces::Phase::forward; }

// Only forward ops write the storage and its forward uses all end before the backward pass
// starts: a copy taken after its last forward use (an offload, a codec's stream) or a replay of
// its writers holds its final forward content. Part of a gap (StorageInfo::gap), and all a pinned
// checkpoint input needs to be offloaded (its reader is the replay, not a backward op).
inline bool used_up_before_backward(const Analysis& a, const StorageInfo& info) {
  return info.written_in_forward_only && info.last_forward_use && a.first_backward_op && *info.last_forward_use < *a.first_backward_op;
}

// The decision for every storage: an action and the rule that gave it.
struct StorageActions {
  std::vector<Action> action;     // indexed by tensor
  std::vector<std::size_t> rule;  // indexed by tensor; kNoRule when no rule applies
  // Indexed by tensor: a block input that a checkpoints rule keeps although autograd does not
  // save it (under autocast a linear saves its 16-bit cast copy, not the fp32 layer input that
  // torch.utils.checkpoint keeps): held until the last replay that reads it.
  std::vector<bool> pinned;
  // Indexed by tensor: a selective rule's cached output or checkpoint input, held until this
  // backward op has run (models/strategies/README.md, "Selective activation checkpointing");
  // empty vector or nothing: no such hold.
  std::vector<std::optional<traces::OpIndex>> held_until;
};

// A plan's score in the budget search.
struct Evaluation {
  std::int64_t peak = 0;  // sequential peak of saved-activation bytes (activation, compressed, prefetch)
  double exact = 0;       // recompute seconds: the exact sum of the recompute tasks' seconds, rounded once
  std::size_t tasks = 0;  // recompute tasks
  // The recompute seconds the built schedule reports: the sum of its recompute tasks' seconds
  // in schedule order, as Assembler adds them (floating-point, so it depends on the order).
  // Filled on demand where the incremental evaluator scored the plan.
  std::optional<double> ordered;
};

// The exact sum of doubles, rounded once (Shewchuk 1997, "Adaptive precision floating-point
// arithmetic and fast robust geometric predicates": non-overlapping partials that sum exactly to
// the total; the final rounding is the one of Python's math.fsum). Its value does not depend on
// the order of the terms, so the budget evaluator can add and remove the seconds of the
// replays it changes, in any order, and hold exactly the figure of the plan it holds. Finite
// terms only (op times are checked finite before they get here).
class ExactSum {
 public:
  void add(double x) {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < partials_.size(); ++i) {
      double y = partials_[i];
      if (std::abs(x) < std::abs(y)) std::swap(x, y);
      const double hi = x + y;
      const double lo = y - (hi - x);
      if (lo != 0) partials_[kept++] = lo;
      x = hi;
    }
    partials_.resize(kept);
    partials_.push_back(x);
  }
  void subtract(double x) { add(-x); }

  // The exact sum rounded to the nearest double (ties to even).
  double value() const {
    if (partials_.empty()) return 0;
    std::size_t n = partials_.size();
    double hi = partials_[--n];
    double lo = 0;
    while (n > 0) {
      const double x = hi;
      const double y = partials_[--n];
      hi = x + y;
      lo = y - (hi - x);
      if (lo != 0) break;
    }
    // Half-way between two doubles: the remaining partials decide the direction.
    if (n > 0 && ((lo < 0 && partials_[n - 1] < 0) || (lo > 0 && partials_[n - 1] > 0))) {
      const double y = lo * 2;
      const double x = hi + y;
      if (y == x - hi) hi = x;
    }
    return hi;
  }

 private:
  std::vector<double> partials_;  // increasing magnitude, non-overlapping
};

}  // namespace comptrain::models::strategy_detail

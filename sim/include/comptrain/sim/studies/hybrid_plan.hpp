#pragma once
// `comptrain plan --hybrid`: per batch size, the fastest per-tensor mix of keep, compress,
// offload and recompute that fits, found on the decision model (hybrid/) and verified by replay.
//
// At each batch: the baseline's schedule gives the decision model; the greedy heuristic and the
// MILP (warm-started with the greedy) solve it for the model's budget; each answer is exported
// as a strategy (one rule per action, naming its tensors) and replayed as `simulate` would; an
// answer whose replay exceeds the plan's limit is rejected, the budget lowered by the excess,
// and the model solved again. The hybrid's answer at the batch is the fastest plan that replays
// within the limit; the scenario's rule-based strategies at the same batch (the ordinary plan,
// run first) are listed beside it, and where one of them replays faster it is the answer, said so.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comptrain/hybrid/decision_model.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/sim/runtime/wire.hpp"
#include "comptrain/sim/studies/plan.hpp"
#include "comptrain/sim/config/scenario.hpp"

namespace comptrain::sim {

struct HybridOptions {
  double time_limit_seconds = 0.5; // CBC's CPU seconds per solve
  double relative_gap = 1e-3;
  int max_solves = 5;              // per batch: the first solve and up to 4 after rejected replays
  bool offload = true;
  bool recompute = true;
  int offload_lookahead = 2;
};

// One tensor's decision in a plan.
struct HybridDecision {
  std::string tensor;
  std::string tensor_class;        // post_relu, batchnorm, linear, generic (the codecs' classes)
  hybrid::ActionKind kind = hybrid::ActionKind::keep;
  int codec = -1;                  // compress: index into HybridPlan::codecs
  int free_by = 0;                 // offload: OffloadAction::free_by
  std::string action;              // keep, offload, recompute, or the codec's label
  std::int64_t bytes = 0;
  std::int64_t saved_bytes = 0;    // bytes the action frees between the passes (compressed: bytes - compressed)
  double added_seconds = 0;        // GPU work it adds (codec, replay); copies add only the stalls of their queue
};

// A plan found by one method and its replay.
struct HybridCandidatePlan {
  std::string method;              // "milp" or "greedy"
  bool model_feasible = false;
  double model_seconds = 0;
  std::int64_t model_peak_bytes = 0;
  bool replayed = false;
  bool fits = false;               // the replay fits within the limit
  double replay_seconds = 0;
  std::int64_t replay_peak_bytes = 0;  // in the plan's memory metric (out of memory: reserved + the failing segment)
};

struct HybridPoint {
  std::int64_t batch = 0;
  bool fits = false;               // some plan replays within the limit
  std::string chosen;              // "milp", "greedy", "rule:NAME" (a rule-based strategy replayed faster), or "" (none fits)
  double iteration_seconds = 0;
  double samples_per_second = 0;
  std::int64_t peak_bytes = 0;     // the plan's metric
  std::int64_t budget_bytes = 0;   // the model's last budget (exact bytes of the sequential replay)
  int solves = 0;
  std::string milp_status;
  double milp_gap = 0;
  double milp_cpu_seconds = 0;
  double greedy_cpu_seconds = 0;
  std::size_t milp_columns = 0, milp_rows = 0, candidates = 0;
  std::vector<HybridCandidatePlan> tried;  // the last solve's plans
  std::optional<std::string> best_rule;    // the fastest rule-based strategy that fits at this batch
  double best_rule_seconds = 0;
  std::vector<HybridDecision> decisions;   // the chosen solver plan's (empty for a rule-based answer)
  models::StrategySpec strategy;           // the answer as a strategy
  std::vector<std::string> notes;
};

// A point crosses from its worker field by field. Its strategy does not: the parent makes it
// again from the decisions and the plan's codecs (spec_of in hybrid_plan.cpp), which the worker
// made it from, so that a compress rule's profile is not sent as bytes.
template <>
struct wire::Codec<HybridPoint> {
  static constexpr std::string_view tag = "HybridPoint";
  static constexpr std::uint32_t version = 1;
  static void write(wire::Writer& w, const HybridPoint& p) {
    w.put(p.batch);
    w.put(p.fits);
    w.put_string(p.chosen);
    w.put(p.iteration_seconds);
    w.put(p.samples_per_second);
    w.put(p.peak_bytes);
    w.put(p.budget_bytes);
    w.put(p.solves);
    w.put_string(p.milp_status);
    w.put(p.milp_gap);
    w.put(p.milp_cpu_seconds);
    w.put(p.greedy_cpu_seconds);
    w.put(p.milp_columns);
    w.put(p.milp_rows);
    w.put(p.candidates);
    w.put<std::uint64_t>(p.tried.size());
    for (const HybridCandidatePlan& c : p.tried) {
      w.put_string(c.method);
      w.put(c.model_feasible);
      w.put(c.model_seconds);
      w.put(c.model_peak_bytes);
      w.put(c.replayed);
      w.put(c.fits);
      w.put(c.replay_seconds);
      w.put(c.replay_peak_bytes);
    }
    w.put(p.best_rule.has_value());
    w.put_string(p.best_rule.value_or(""));
    w.put(p.best_rule_seconds);
    w.put<std::uint64_t>(p.decisions.size());
    for (const HybridDecision& d : p.decisions) {
      w.put_string(d.tensor);
      w.put_string(d.tensor_class);
      w.put(d.kind);
      w.put(d.codec);
      w.put(d.free_by);
      w.put_string(d.action);
      w.put(d.bytes);
      w.put(d.saved_bytes);
      w.put(d.added_seconds);
    }
    w.put<std::uint64_t>(p.notes.size());
    for (const std::string& n : p.notes) w.put_string(n);
  }
  static HybridPoint read(wire::Reader& in) {
    HybridPoint p;
    p.batch = in.get<std::int64_t>();
    p.fits = in.get<bool>();
    p.chosen = in.get_string();
    p.iteration_seconds = in.get<double>();
    p.samples_per_second = in.get<double>();
    p.peak_bytes = in.get<std::int64_t>();
    p.budget_bytes = in.get<std::int64_t>();
    p.solves = in.get<int>();
    p.milp_status = in.get_string();
    p.milp_gap = in.get<double>();
    p.milp_cpu_seconds = in.get<double>();
    p.greedy_cpu_seconds = in.get<double>();
    p.milp_columns = in.get<std::size_t>();
    p.milp_rows = in.get<std::size_t>();
    p.candidates = in.get<std::size_t>();
    p.tried.resize(in.get<std::uint64_t>());
    for (HybridCandidatePlan& c : p.tried) {
      c.method = in.get_string();
      c.model_feasible = in.get<bool>();
      c.model_seconds = in.get<double>();
      c.model_peak_bytes = in.get<std::int64_t>();
      c.replayed = in.get<bool>();
      c.fits = in.get<bool>();
      c.replay_seconds = in.get<double>();
      c.replay_peak_bytes = in.get<std::int64_t>();
    }
    const bool has_rule = in.get<bool>();
    std::string rule = in.get_string();
    if (has_rule) p.best_rule = std::move(rule);
    p.best_rule_seconds = in.get<double>();
    p.decisions.resize(in.get<std::uint64_t>());
    for (HybridDecision& d : p.decisions) {
      d.tensor = in.get_string();
      d.tensor_class = in.get_string();
      d.kind = in.get<hybrid::ActionKind>();
      d.codec = in.get<int>();
      d.free_by = in.get<int>();
      d.action = in.get_string();
      d.bytes = in.get<std::int64_t>();
      d.saved_bytes = in.get<std::int64_t>();
      d.added_seconds = in.get<double>();
    }
    p.notes.resize(in.get<std::uint64_t>());
    for (std::string& n : p.notes) n = in.get_string();
    return p;
  }
};

struct HybridPlan {
  BatchSizePlan rules;             // the ordinary plan of the scenario's strategies
  HybridOptions options;
  std::vector<hybrid::CodecOption> codecs;
  std::vector<HybridPoint> points;  // ascending batch
  std::optional<std::size_t> best;  // index of the highest samples/s among the fitting points
  std::optional<std::size_t> largest;  // index of the largest fitting batch
};

// The codec options of a scenario: each distinct compress action of its plan strategies (and of
// its own strategy), labelled by the strategy's name.
std::vector<hybrid::CodecOption> hybrid_codecs(const Scenario& scenario, const std::vector<models::StrategySpec>& strategies);

// Runs the ordinary plan, then the hybrid search over its batches and beyond. One GPU only
// (InputError naming the scenario otherwise).
HybridPlan make_hybrid_plan(const PlanRequest& request, const HybridOptions& options, int jobs, bool progress);

// The plan at one batch (the worker's job; exposed for tests). `limit_bytes` in `metric`.
HybridPoint hybrid_point(const Scenario& scenario, const std::vector<hybrid::CodecOption>& codecs, std::int64_t batch, std::int64_t limit_bytes,
                         MemoryMetric metric, const HybridOptions& options);

}  // namespace comptrain::sim

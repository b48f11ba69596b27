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

std::string hybrid_plan_text(const HybridPlan& plan);
std::string hybrid_plan_json(const HybridPlan& plan);

}  // namespace comptrain::sim

#pragma once
// Internal to models/strategies: the budget mode's plan evaluator. It gives, for a plan of
// recompute decisions, exactly what building the schedule and replaying it sequentially gives
// (the peak of saved-activation bytes and the recompute seconds), and after a change of a few
// decisions it redoes only what the change can reach. README.md ("Recompute", `budget`) says
// how it is used and what it guarantees.
//
// The model. The schedule's compute tasks fall into chunks, one per trace op: the recompute
// tasks inserted before it (a replay; only before non-forward ops), then the op's own task.
// A chunk's replay depends only on the action of, and whether an earlier chunk has rebuilt,
// the storages it looked at (the op's inputs, every storage the walk back visited, the inputs
// and outputs of the replayed ops): those are recorded per chunk, so a change of one storage's
// action re-simulates the chunks that looked at it, and a chunk whose rebuilt set changes
// re-simulates the later chunks that looked at what moved -- in chunk order, each at most once
// per evaluation. Memory: a counted buffer (a saved activation's original, a rebuilt copy)
// lives from its first to its last use, positions being (chunk, step within the chunk); the
// chunks it spans whole get its bytes by a range add on a segment tree over chunks, the chunks
// where it starts or ends by their own profile (the maximum over the chunk's steps of the bytes
// of buffers starting or ending there). The tree's maximum plus the resident bytes is the peak.
// Recompute seconds are kept as an exact sum (ExactSum), so that adding and removing replays in
// any order gives exactly the plan's figure; the order-dependent sum the built schedule reports
// is computed on demand.
//
// Offloaded and compressed storages are not modelled (their copies are slotted by compute
// positions that a replay shifts): `supports` says so, and the budget mode then builds the
// schedule for every plan it scores.

#include <cstdint>
#include <queue>
#include <utility>
#include <vector>

#include "comptrain/models/strategy.hpp"
#include "strategy_internal.hpp"

namespace comptrain::models::strategy_detail {

class RecomputeEvaluator {
 public:
  // Whether the evaluator models a plan with these actions: none offloaded or compressed, and no
  // selective rule's holds (such plans are scored by building their schedule).
  static bool supports(const StorageActions& plan);

  // `plan` fixes every storage's action; `candidates` are the storages whose action set() may
  // switch between keep and drop (their actions in `plan` are the starting point).
  RecomputeEvaluator(const Analysis& a, const StorageActions& plan, std::vector<traces::TensorIndex> candidates);

  std::size_t size() const { return candidates_.size(); }
  bool dropped(std::size_t i) const { return action_[candidates_[i]] == Action::drop; }
  // Drops or keeps candidate i; takes effect at the next evaluate().
  void set(std::size_t i, bool drop);
  // The plan as set: its sequential peak of saved-activation bytes and its recompute seconds
  // (exact) and tasks; `ordered` is left empty.
  Evaluation evaluate();
  // The plan's recompute seconds added in schedule order, as the built schedule reports them:
  // one pass over the replays. After evaluate().
  double ordered_seconds() const;

 private:
  using Pos = std::uint64_t;  // (chunk << 32) | step; step kOpStep is the chunk's op task

  struct Record {  // one chunk's replay, as last simulated
    std::vector<traces::OpIndex> replay;                                  // ascending
    std::vector<std::pair<traces::TensorIndex, std::uint32_t>> remats;   // storage, step that rebuilt it
    std::vector<std::pair<std::uint32_t, std::uint32_t>> reads;          // counted buffer, step
    std::uint32_t version = 0;  // bumped at each re-simulation: older inspector entries are stale
  };

  struct BufferState {
    bool exists = false;
    Pos start = 0;
    Pos end = 0;
    std::uint32_t slot[2] = {0, 0};  // its entries in touching_ of its start and end chunks
  };

  bool available(traces::TensorIndex s, std::uint32_t chunk) const;
  void queue_chunk(std::uint32_t chunk);
  void queue_inspectors(traces::TensorIndex s, std::uint32_t from, std::uint32_t to);
  void add_inspector(traces::TensorIndex s, std::uint32_t chunk);
  void mark_buffer(std::uint32_t b);
  void mark_chunk(std::uint32_t chunk);
  void resimulate(std::uint32_t chunk);
  void collect(traces::TensorIndex s, std::uint32_t chunk);
  void inspect(traces::TensorIndex s, std::uint32_t chunk);
  void record_read(std::uint32_t b, std::uint32_t chunk, std::uint32_t step);
  void refresh_buffer(std::uint32_t b);
  void place(std::uint32_t b, bool add);
  std::int64_t chunk_profile(std::uint32_t chunk);
  void next_stamp();

  const Analysis& a_;
  const traces::Trace& trace_;
  std::size_t tensors_ = 0;
  std::vector<traces::TensorIndex> candidates_;
  std::vector<Action> action_;  // per tensor
  std::vector<char> pinned_;

  // Per op: input and output storages in the op's order (duplicates kept), forward or not.
  std::vector<std::uint32_t> in_begin_, out_begin_;
  std::vector<traces::TensorIndex> in_, out_;
  std::vector<char> forward_;

  // Per storage, fixed.
  std::vector<std::int64_t> bytes_;
  std::vector<char> original_counted_;  // its original buffer holds a saved activation (role activation, not resident)
  std::vector<std::uint32_t> first_writer_, last_use_, last_forward_use_, last_backward_read_;
  std::vector<char> tracked_;  // its action or its rebuilt state can change: inspections are recorded
  std::int64_t resident_ = 0;

  // Per storage, as simulated: the chunk that rebuilt it (or none) and the step.
  std::vector<std::uint32_t> owner_, owner_step_;
  std::vector<std::vector<std::pair<std::uint32_t, std::uint32_t>>> inspectors_;  // (chunk, version)
  std::vector<std::uint32_t> inspectors_compact_at_;

  // Per chunk.
  std::vector<Record> records_;
  std::vector<char> queued_;
  std::priority_queue<std::uint32_t, std::vector<std::uint32_t>, std::greater<>> heap_;
  std::vector<std::vector<std::pair<std::uint32_t, std::uint8_t>>> touching_;  // (buffer, 0 start / 1 end)

  // Counted buffers: b < tensors_ is storage b's original, b >= tensors_ its rebuilt copy.
  std::vector<BufferState> buffers_;
  std::vector<std::vector<Pos>> reads_;  // sorted: the recompute steps that use the buffer
  std::vector<std::uint32_t> dirty_buffers_, dirty_chunks_;
  std::vector<char> buffer_dirty_, chunk_dirty_;

  // Segment tree over chunks: max over a node's chunks of (own profile + range adds).
  std::size_t leaves_ = 1;
  std::vector<std::int64_t> tree_max_, tree_add_;
  void tree_add(std::size_t l, std::size_t r, std::int64_t v);
  void tree_set(std::size_t chunk, std::int64_t v);
  void tree_pull(std::size_t node);  // recomputes the maxima of the node's ancestors

  ExactSum seconds_;
  std::size_t tasks_ = 0;

  // Scratch for one simulation.
  std::uint32_t stamp_ = 0;
  std::vector<std::uint32_t> visit_, op_mark_, fresh_, seen_, prev_mark_;
  std::vector<char> fresh_remat_;
  std::vector<std::uint32_t> prev_owner_;
  std::vector<traces::TensorIndex> needed_, moved_;
  std::vector<std::int64_t> diff_;
};

// For tests (defined in build_schedule.cpp). The number of candidates of recompute rule `rule`
// of `strategy` on `trace`; and, moving one evaluator for that rule through `plans` in turn (a
// drop flag per candidate, in forward production order; every other storage as the strategy's
// other rules decide), the evaluator's figures for each plan beside the built schedule's.
struct EvaluatorCheck {
  Evaluation incremental;
  Evaluation built;
};
std::size_t recompute_candidate_count(const traces::Trace& trace, const OpTimeModel& time_model, const StrategySpec& strategy, std::size_t rule);
std::vector<EvaluatorCheck> check_recompute_evaluator(const traces::Trace& trace, const OpTimeModel& time_model, const StrategySpec& strategy,
                                                      std::size_t rule, const std::vector<std::vector<bool>>& plans);

}  // namespace comptrain::models::strategy_detail

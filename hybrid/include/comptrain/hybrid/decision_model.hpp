#pragma once
// The per-tensor decision model of `comptrain plan --hybrid` (hybrid/README.md): for each saved
// activation of one iteration, what keeping, compressing (each codec offered), offloading or
// recomputing it does to the live bytes at every step of the op schedule and to the iteration's
// time. Steps are the baseline schedule's compute tasks, one per trace op in recorded order.
//
// Costs come from the same models the simulator replays: the codecs' ratios and seconds from
// schedules built with each compress action over every saved activation (so a profile's ratio
// per tensor class and value features, or a scenario's explicit figures, are what build_schedule
// would use), copies from the platform's host link, replays from the op-time model.

#include <cstdint>
#include <string>
#include <vector>

#include "comptrain/models/op_time.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::hybrid {

enum class ActionKind : std::uint8_t { keep, compress, offload, recompute };
std::string_view to_string(ActionKind kind);

// A compress action offered to every saved activation (a scenario's compress rule, or a profile's
// codec at one error bound). `label` names it in reports ("szp 1e-3", "compress-conv-x8").
struct CodecOption {
  std::string label;
  models::CompressAction action;
};

struct ModelOptions {
  std::vector<CodecOption> codecs;
  bool offload = true;
  bool recompute = true;
  int offload_lookahead = 2;  // as OffloadAction::lookahead: the prefetch starts this many ops before the reader
};

// Live bytes change by `bytes` (negative: saved) over the steps [first, last).
struct MemoryChange {
  int first = 0;
  int last = 0;
  std::int64_t bytes = 0;
};

// GPU work an option adds to the compute stream's timeline, before step `step` starts.
struct AddedWork {
  int step = 0;
  double seconds = 0;
};

struct Option {
  ActionKind kind = ActionKind::keep;
  int codec = -1;                        // compress: index into DecisionModel::codecs
  std::int64_t compressed_bytes = 0;     // compress
  // offload: the step by whose start the copy out has ended, the compute stream waiting for it
  // there if it has not (OffloadAction::free_by = release_step - last_forward_use), so that the
  // original's bytes are free from that step on. One option per release step offered.
  int release_step = -1;
  std::vector<AddedWork> work;           // compress: compress + decompress; recompute: the replay
  std::vector<MemoryChange> memory;      // the saving, and a replay's scratch at its step
};

struct Candidate {
  traces::TensorIndex storage = 0;
  std::string name;
  std::int64_t bytes = 0;
  int last_forward_use = 0;              // step a: its last forward reader or writer
  int first_backward_read = 0;           // step b
  double copy_seconds = 0;               // one way over the host link
  double replay_seconds = 0;             // replaying its forward writers and the unsaved storages behind them
  // Candidates a replay of this one reads (found walking back through unsaved storages): each must
  // be present when this one is rebuilt, so a non-kept one is restored or rebuilt early.
  std::vector<std::size_t> replay_reads;
  std::vector<Option> options;           // options[0] is keep
};

struct DecisionModel {
  std::vector<double> step_seconds;       // per compute step, the op-time model's seconds
  std::vector<std::int64_t> live_bytes;   // the baseline's live bytes at each step (sequential replay)
  std::vector<Candidate> candidates;
  std::vector<CodecOption> codecs;
  int offload_lookahead = 2;
  int steps() const { return static_cast<int>(step_seconds.size()); }
  double baseline_seconds() const;         // the sum of step_seconds
  std::int64_t baseline_peak() const;      // the maximum of live_bytes
};

// Builds the model of `trace` (the trace `baseline` was built from, with the run layer's gradient
// lifetime applied). Throws InputError where a codec cannot apply to this trace (an absolute bound
// on a tensor without a value range), std::logic_error when `baseline` is not one compute task per
// op in recorded order.
DecisionModel build_decision_model(const traces::Trace& trace, const models::OpTimeModel& time_model, const models::Schedule& baseline,
                                   const ModelOptions& options);

// One option per candidate (an index into its options).
using Assignment = std::vector<std::size_t>;

// The model's figures for an assignment: the iteration's seconds (compute steps, added work, and
// the copy queues' stalls: every copy out in forward order once its tensor's last forward use
// ends, the release step waiting for it; every copy back in backward order from `lookahead` ops
// before its reader and after its copy out, the reader waiting for it) and the live bytes per step.
struct Evaluation {
  double seconds = 0;
  std::int64_t peak_bytes = 0;
  int peak_step = 0;
  std::vector<std::int64_t> live_bytes;
  std::vector<double> step_start;          // T_k, k = 0..steps (the last is the end)
  std::vector<double> copy_out_end;        // per candidate: G (the queue's state where it is not offloaded)
  std::vector<double> copy_back_end;       // per candidate: F (likewise)
  std::vector<int> needed_from;            // per candidate: the step from which a replay needs it (its b if none)
};
Evaluation evaluate(const DecisionModel& model, const Assignment& assignment);

}  // namespace comptrain::hybrid

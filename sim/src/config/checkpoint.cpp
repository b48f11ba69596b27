#include "comptrain/sim/config/checkpoint.hpp"

#include <cmath>

#include "comptrain/models/zero_memory.hpp"
#include "comptrain/traces/summary.hpp"

namespace comptrain::sim {

std::string_view to_string(CheckpointMode mode) { return mode == CheckpointMode::sync ? "sync" : "async"; }

std::optional<CheckpointMode> parse_checkpoint_mode(std::string_view text) {
  if (text == "sync") return CheckpointMode::sync;
  if (text == "async") return CheckpointMode::async;
  return std::nullopt;
}

std::string_view to_string(CheckpointWait wait) { return wait == CheckpointWait::step ? "step" : "save"; }

std::optional<CheckpointWait> parse_checkpoint_wait(std::string_view text) {
  if (text == "step") return CheckpointWait::step;
  if (text == "save") return CheckpointWait::save;
  return std::nullopt;
}

std::string_view to_string(StorageTier tier) { return tier == StorageTier::shared ? "shared" : "local"; }

std::optional<StorageTier> parse_storage_tier(std::string_view text) {
  if (text == "shared") return StorageTier::shared;
  if (text == "local") return StorageTier::local;
  return std::nullopt;
}

CheckpointSizes checkpoint_sizes(const traces::Trace& trace, const models::DataParallelSpec* data_parallel) {
  const traces::TraceSummary summary = traces::summarize(trace);
  CheckpointSizes sizes;
  sizes.parameter_count = summary.parameters;
  const std::int64_t weight_bytes = traces::at(summary.allocated_by_role, traces::TensorRole::weight);
  const std::int64_t buffer_bytes = traces::at(summary.allocated_by_role, traces::TensorRole::buffer);
  const std::int64_t optimizer_bytes = traces::at(summary.allocated_by_role, traces::TensorRole::optimizer_state);
  const int ranks = data_parallel != nullptr ? data_parallel->ranks : 1;
  const int stage = data_parallel != nullptr ? data_parallel->zero_stage : 0;
  if (summary.parameters <= 0) return sizes;
  if (stage == 0 || ranks == 1) {
    // Rank 0 saves every state exactly as the trace holds it.
    sizes.rank0 = {weight_bytes + buffer_bytes, optimizer_bytes};
    return sizes;
  }
  const auto per_parameter = [&](std::int64_t bytes) {
    return static_cast<std::int64_t>(std::llround(static_cast<double>(bytes) / static_cast<double>(summary.parameters)));
  };
  models::zero::BytesPerParameter bytes{per_parameter(weight_bytes), 0, 0};
  // DeepSpeed's ZeRO optimizers clone an fp32 master copy whatever the precision; a trace with
  // 4-byte weights has none among its optimizer states (a 2-byte `mixed` trace has it already).
  const std::int64_t optimizer_total = optimizer_bytes + (bytes.parameter == 4 ? 4 * summary.parameters : 0);
  // The optimizer's own bytes, whatever it keeps per parameter: a whole number K (Adam's 8 or 12)
  // is sharded as K states of ⌈Ψ/N⌉ elements, as ZeRO pads each flat buffer; anything else
  // (8-bit states with their per-block absmax, Adafactor's factored moments) as ⌈bytes/N⌉.
  const bool whole = optimizer_total % summary.parameters == 0;
  if (whole) bytes.optimizer = optimizer_total / summary.parameters;
  models::zero::ModelStateBytes shard =
      models::zero::model_states_per_gpu(summary.parameters, ranks, static_cast<models::zero::ZeroStage>(stage), bytes);
  if (!whole) shard.optimizer_states = optimizer_total / ranks + (optimizer_total % ranks != 0 ? 1 : 0);
  if (stage == 3) {
    sizes.rank0 = {shard.parameters + buffer_bytes, shard.optimizer_states};
    sizes.other = {shard.parameters, shard.optimizer_states};
  } else {
    sizes.rank0 = {weight_bytes + buffer_bytes, shard.optimizer_states};
    sizes.other = {0, shard.optimizer_states};
  }
  return sizes;
}

}  // namespace comptrain::sim

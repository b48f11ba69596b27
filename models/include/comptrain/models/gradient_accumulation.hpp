#pragma once
// Gradient accumulation as a schedule transform: one optimizer step after `steps` micro-steps,
// each a forward and backward pass over its own micro-batch, the gradients summed in place
// (autograd accumulates into the .grad that the first micro-step made). Under data parallelism
// transform_schedule (transform_schedule.hpp) applies it before data parallelism when the
// gradients are reduced once, after the last micro-step (DDP's no_sync(), ZeRO-1), and after it
// when they are reduced at every micro-step (ZeRO-2 and 3, FSDP2): the micro-step then repeats
// the gathers and reductions too (models/transforms/README.md).

#include <optional>

#include "comptrain/models/schedule.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::models {

// The schedule of `steps` micro-steps and one optimizer step: every task of a micro-step
// (forward and backward ops, replays, copies, codec kernels and, under data parallelism applied
// first, the collectives) repeated `steps` times in order, each repetition with its own copies
// of the buffers that do not outlive it (activations, temporaries, prefetched and compressed
// copies, gathered parameters, unreduced gradients); resident buffers and those held to the end
// of the iteration (the gradients, a reduced gradient shard) are shared, the later micro-steps
// writing into those the first made. The step's tasks (the optimizer's ops and every task that
// waits for one of them; with `step_begin`, every task from that position on: what
// apply_data_parallel returns) run once, after the last micro-step. steps = 1 leaves the schedule
// as it is; std::invalid_argument when steps < 1.
void apply_gradient_accumulation(Schedule& schedule, const traces::Trace& trace, int steps, std::optional<TaskId> step_begin = std::nullopt);

}  // namespace comptrain::models

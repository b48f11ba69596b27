#pragma once
// Gradient accumulation as a schedule transform: one optimizer step after `steps` micro-steps,
// each a forward and backward pass over its own micro-batch, the gradients summed in place
// (autograd accumulates into the .grad that the first micro-step made). Under data parallelism
// the earlier micro-steps run inside DDP's no_sync(), so apply this before apply_data_parallel:
// the gradients are then ready, and reduced, in the last micro-step only
// (models/transforms/README.md).

#include "comptrain/models/schedule.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::models {

// The schedule of `steps` micro-steps and one optimizer step: every task of the forward and
// backward passes (ops, replays, copies, codec kernels) repeated `steps` times in order, each
// repetition with its own copies of the buffers that do not outlive it (activations,
// temporaries, prefetched and compressed copies); resident buffers and the gradients (held to the
// end of the iteration) are shared, the later micro-steps writing into the gradients the first
// made. The optimizer's tasks run once, after the last micro-step. steps = 1 leaves the schedule
// as it is; std::invalid_argument when steps < 1.
void apply_gradient_accumulation(Schedule& schedule, const traces::Trace& trace, int steps);

}  // namespace comptrain::models

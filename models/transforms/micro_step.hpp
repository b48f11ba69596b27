#pragma once
// Internal to models/transforms: cutting one micro-step out of a schedule, for the transforms that
// repeat it (gradient accumulation, the pipeline stage). A schedule of one iteration is a micro-step
// (the forward and backward passes over one micro-batch) followed by the optimizer step; repeating
// the micro-step needs to know which tasks are the step's and which buffers every repetition may
// share.

#include <optional>
#include <vector>

#include "comptrain/models/schedule.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::models::transform_detail {

// Per task, whether it belongs to the optimizer step: the optimizer's ops (kernels, and the
// collectives and transfers of optimizer-phase communication ops) and every task that
// waits, directly or through others, for one of them (under data parallelism applied first:
// ZeRO-2's all-gather of the updated parameters). With `step_begin` (data parallelism applied
// first says where its step starts) the step is every task from there on. Throws
// std::logic_error when a forward or backward op is among them, or a task of the micro-step waits
// for one of them: no micro-step can be cut from such a schedule.
std::vector<bool> optimizer_step_tasks(const Schedule& schedule, const traces::Trace& trace, std::optional<TaskId> step_begin);

// Per buffer, whether the repetitions of the micro-step share it rather than each having its own
// copy: resident buffers, those held to the end of the iteration (the gradients, accumulated in
// place by every micro-step), and every buffer a task of the optimizer step (`is_step`, as
// optimizer_step_tasks gives it) creates or uses: what the step reads must be the one the last
// micro-step left.
std::vector<bool> shared_across_micro_steps(const Schedule& schedule, const std::vector<bool>& is_step);

}  // namespace comptrain::models::transform_detail

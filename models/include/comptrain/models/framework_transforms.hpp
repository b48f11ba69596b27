#pragma once
// The framework's schedule transforms: what PyTorch does around the trace's ops that a schedule
// must show -- the weight gradients' lifetime across iterations, cuDNN's per-call workspaces,
// the host's dispatch cost per task. They take plain values (sim's FrameworkOnGpu and the
// platform hold them; sim/framework.hpp says where each comes from), and run last in
// transform_schedule (transform_schedule.hpp). Moved here from sim/ so that a schedule's
// transforms live in one place, models/transforms/.

#include <cstdint>

#include "comptrain/models/platform.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::models {

// When weight gradients are freed: `set_to_none` (optimizer.zero_grad()'s default since PyTorch
// 2.0) or `zeros` (set_to_none=False: they stay allocated through the next forward pass).
// sim/framework.hpp gives the sources and the scenario key.
enum class ZeroGrad { set_to_none, zeros };

// Applies the gradient lifetime to a schedule. With `zeros`, weight gradients (role gradient,
// held to the end of the iteration) become resident: allocated before the iteration, as they
// are at the start of every iteration but the first, and never freed. With `set_to_none` the
// schedule is unchanged: gradients are created by the backward pass and freed after the step.
void apply_gradient_lifetime(Schedule& schedule, ZeroGrad zero_grad);

// Sets each task's host_seconds from the platform's per-op dispatch costs: an op or replayed
// op by its phase in `trace` (a replayed op is a forward op), any other task (copy, codec) the
// backward cost, as a launch from C++.
void assign_dispatch_costs(Schedule& schedule, const traces::Trace& trace, const OpDispatch& dispatch);

// Gives every task that runs a convolution of `trace` (op, recompute) a workspace buffer of
// `bytes` that lives while the task runs (role temporary). Nothing when bytes is 0.
void add_cudnn_workspaces(Schedule& schedule, const traces::Trace& trace, std::int64_t bytes);

}  // namespace comptrain::models

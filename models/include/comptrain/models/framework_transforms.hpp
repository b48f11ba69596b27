#pragma once
// The framework's schedule transforms: what PyTorch does around the trace's ops that a schedule
// must show -- the weight gradients' lifetime across iterations, cuDNN's per-call workspaces,
// the host's dispatch cost per task. They take plain values (sim's FrameworkOnGpu and the
// platform hold them; sim/framework.hpp says where each comes from), and run last in
// transform_schedule (transform_schedule.hpp). Moved here from sim/ so that a schedule's
// transforms live in one place, models/transforms/.

#include <cstdint>
#include <optional>
#include <vector>

#include "comptrain/models/kernel_fusion.hpp"
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
// backward cost, as a launch from C++. Under torch.compile (`compile` given) an op that runs
// inside the kernel of an earlier op of its fusion group costs the thread nothing
// (fuse_like_inductor: one launch per group).
void assign_dispatch_costs(Schedule& schedule, const traces::Trace& trace, const OpDispatch& dispatch,
                           const std::optional<CompileScope>& compile = std::nullopt);

// Where a training loop makes the launching thread wait for the GPU within an iteration (a
// `.item()`, a `.cpu()`, a `torch.cuda.synchronize()`): the thread cannot issue the next kernels
// before the GPU has run everything issued so far, so their launch latency is exposed. The end
// of the step needs none: the replay starts every iteration with the thread and the GPU idle,
// as after a loop's `loss.item()` (models/transforms/README.md, "Host synchronisations").
enum class HostSync {
  // After the backward pass and the gradients' reductions, before the optimizer step's first
  // launch: gradient clipping's `total_norm.item()`, a loss scaler's overflow check. Once per
  // optimizer step.
  backward_end,
};

// Inserts, for each entry of `syncs`, a synchronisation: a host_compute task of no duration
// that waits for the last task issued before it on every other stream and blocks the launching
// thread (Task::blocks_host) until then; the thread spends `host_seconds` issuing it (the
// Python call). backward_end goes just before the first optimizer task (an op or replayed op
// of the optimizer phase, or a host_compute task); nothing when the schedule has none.
void add_host_syncs(Schedule& schedule, const traces::Trace& trace, const std::vector<HostSync>& syncs, double host_seconds);

// Every task that runs an op the trace marks host_sync (traces::Op::host_sync: torch.nonzero,
// torch.where(mask), .item() inside the model), whether as the op or replayed by recomputation,
// blocks the launching thread (Task::blocks_host) until it ends: nothing after it is issued
// before the GPU has run it and everything queued before it on its stream.
void apply_host_sync_ops(Schedule& schedule, const traces::Trace& trace);

// A Python loop over the parameters as the optimizer step (DeepLearningExamples' BertAdam):
// each optimizer op of the trace (one per parameter: optimizer_impl for-loop) is
// `ops_per_parameter` eager ops, each its own kernel. The launching thread spends
// ops_per_parameter x dispatch.forward on it (a Python-level op, as a forward op; set after
// assign_dispatch_costs), and the GPU ops_per_parameter - 1 more launch gaps
// (`launch_overhead`, gpu.launch_overhead; the op's time has one). The op's bytes stay the
// trace's: the unfused passes' extra traffic is not added. Nothing when ops_per_parameter is 0.
void apply_optimizer_loop(Schedule& schedule, const traces::Trace& trace, double ops_per_parameter, const OpDispatch& dispatch,
                          double launch_overhead);

// Gives every task that runs a convolution of `trace` (op, recompute) a workspace buffer of
// `bytes` that lives while the task runs (role temporary). Nothing when bytes is 0.
void add_cudnn_workspaces(Schedule& schedule, const traces::Trace& trace, std::int64_t bytes);

}  // namespace comptrain::models

// The optimizer offloaded to the host: ZeRO-Offload, Twin-Flow, Deep Optimizer States
// (README.md, "Optimizer offload"). Part of data parallelism as a schedule transform
// (data_parallel_transform.hpp).

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "data_parallel_transform.hpp"

namespace comptrain::models::transform_detail {

using traces::Phase;

// Subgroups of whole parameters in the model's order, which is the reverse of the order in
// which the backward pass makes their gradients ready (autograd runs the layers backwards):
// ZeRO-3 closes a subgroup once it holds sub_group_size elements of this rank's partition
// (stage3.py@38327e07 _create_fp16_sub_groups, lines 946-966); stages 1 and 2 step each rank's
// partition at once (stage_1_and_2.py: one fp32 partition per parameter group). Then where each
// is stepped: Twin-Flow's first int(ratio x subgroups) on the CPU and the rest on the GPU
// (stage3.py@38327e07 lines 851-858); Deep Optimizer States' rule (the fork's
// get_opt_update_device): x % k == 0 on the CPU (it starts the transfers), else (x + 1) % k ==
// 0 on the GPU, else on the CPU.
void Transform::make_subgroups() {
  std::vector<std::pair<TaskId, BufferId>> ready = ready_gradients();
  std::reverse(ready.begin(), ready.end());
  const std::int64_t cap = spec_.zero_stage == 3 ? spec_.sub_group_elements : std::numeric_limits<std::int64_t>::max();
  Subgroup open;
  for (std::size_t i = 0; i < ready.size(); ++i) {
    const BufferId g = ready[i].second;
    const auto& tensor = trace_.tensor(*s_.buffers[g].tensor);
    Share share;
    share.element_size = static_cast<std::int64_t>(traces::element_size(tensor.dtype));
    share.elements = ceil_div(s_.buffers[g].bytes / share.element_size, spec_.ranks);
    share.subgroup = subgroups_.size();
    share_[g] = share;
    open.gradients.push_back(g);
    open.elements += share.elements;
    open.gradient_bytes += share.elements * share.element_size;
    if (open.elements >= cap || i + 1 == ready.size()) {
      subgroups_.push_back(std::move(open));
      open = Subgroup{};
    }
  }
  const OptimizerOffloadSpec& offload = *spec_.offload_optimizer;
  // Python's int(ratio * n): truncation of the same double product.
  const auto on_cpu = static_cast<std::size_t>(offload.ratio * static_cast<double>(subgroups_.size()));
  const auto k = static_cast<std::size_t>(std::max(offload.prefetch_optimizer_gap, 1));
  for (std::size_t x = 0; x < subgroups_.size(); ++x) {
    Subgroup& sg = subgroups_[x];
    if (offload.prefetch_optimizer) {
      sg.where = (x % k != 0 && (x + 1) % k == 0) ? Where::gpu_prefetched : Where::cpu;
    } else {
      sg.where = x < on_cpu ? Where::cpu : Where::gpu_resident;
    }
    total_elements_ += sg.elements;
    if (sg.where == Where::gpu_resident) resident_elements_ += sg.elements;
  }
}

// The copies of one bucket's reduced gradients to the host, each after the bucket's reduction;
// returns them. Stages 1 and 2 (stage_1_and_2.py@v0.13.3
// async_inplace_copy_grad_to_fp32_buffer_from_gpu, lines 1255-1270): the gradient is upcast
// to fp32 on the GPU (a temporary) and copied without blocking, 4 bytes per element. Stage 3
// (stage3.py@v0.13.3 __partition_grads, lines 1431-1467): the reduced partition is copied into
// the host's gradient buffer and back to the GPU (grad_buffer.copy_(..., non_blocking=True);
// grad_buffer.to(device, non_blocking=True)), then a subgroup stepped on the CPU copies it into
// its host fp32 gradient: `fp32_grad_tensor.copy_(grad_buffer)`, which blocks the launching
// thread and converts on the host (a host task after the copy), so the 16-bit gradient crosses
// PCIe; with part_grads_async
// (the fork) it does not block, and PyTorch converts on the GPU first (a fp32 temporary, 4
// bytes per element cross). A subgroup stepped on the GPU keeps the gradient there: Twin-Flow's
// in its fp32 gradient (resident), Deep Optimizer States' in a buffer kept until the step.
std::vector<TaskId> Transform::offload_gradients(const Bucket& bucket, TaskId reduction, TaskId ready) {
  std::vector<TaskId> copies;
  const bool async = spec_.offload_optimizer->part_grads_async;
  const auto copy = [&](TaskKind kind, std::string name, std::int64_t bytes, TaskId after) {
    Task c;
    c.kind = kind;
    c.stream = kind == TaskKind::offload ? Stream::d2h : Stream::h2d;
    c.name = std::move(name);
    c.bytes = bytes;
    c.after = {after};
    return c;
  };
  for (BufferId g : bucket.gradients) {
    const auto it = share_.find(g);
    if (it == share_.end()) continue;
    const Share& share = it->second;
    Subgroup& sg = subgroups_[share.subgroup];
    const std::string what = s_.buffers[g].name;
    const std::int64_t half_bytes = share.elements * share.element_size;
    if (spec_.zero_stage < 3) {
      Task c = copy(TaskKind::offload, "fp32 gradient to the host: " + what, kFp32GradientBytes * share.elements, reduction);
      c.creates = {add_buffer(what + " (fp32 upcast for the host)", kFp32GradientBytes * share.elements, MemoryRole::temporary, false)};
      copies.push_back(add_task(std::move(c), ready + 1));
      last_gradient_copy_[0] = copies.back();
      continue;
    }
    // Stage 3's partition_grads runs inside `with stream(reduce_and_partition_stream)`
    // (stage3.py@v0.13.3 lines 1265-1275), so what it allocates here (the partition back on the
    // GPU, the fp32 upcast, the fork's kept gradients) is that stream's block in PyTorch; these
    // stay on the current stream (README.md, "Simplifications").
    const TaskId out = add_task(copy(TaskKind::offload, "gradient partition to the host buffer: " + what, half_bytes, reduction), ready + 1);
    Task back = copy(TaskKind::prefetch, "gradient partition back on the GPU: " + what, half_bytes, out);
    const BufferId on_gpu = add_buffer(what + " (partition back on the GPU)", half_bytes, MemoryRole::temporary, false);
    back.creates = {on_gpu};
    // At the accumulation boundary partition_grads takes the partition's norm for the clipping
    // of the host step before anything else (DataStates/DeepSpeed@4570a955 stage3.py line 1524,
    // the same in v0.13.3: norm_for_param_grads[...] = _constant_buffered_norm2(grad_buffer)),
    // which upcasts it to fp64 a part of at most 250e6 elements at a time
    // (`part.data.double().norm(2)`, lines 1435-1442): an 8-byte-per-element temporary on the GPU
    // beside the partition, freed after each part's norm. It lives here with the copy back that
    // the norm kernel follows at once (the kernel's few milliseconds are not modelled). Under
    // gradient accumulation every micro-step repeats this bucket's tasks, the norm included,
    // which DeepSpeed takes at the boundary only: a transient the earlier micro-steps count too.
    back.creates.push_back(add_buffer(what + " (fp64 upcast for the gradient norm)", kFp64Bytes * std::min(share.elements, kNormPartElements),
                                      MemoryRole::temporary, false));
    if (sg.where == Where::gpu_prefetched) {
      // The fork's prefetch_optimizer_gpu_fp32_grads[i] (gradient_accumulation_dtype).
      if (!sg.kept) {
        sg.kept = add_buffer("gradients of optimizer subgroup " + std::to_string(share.subgroup) + " kept on the GPU", sg.gradient_bytes,
                             MemoryRole::gradient, false);
        back.creates.push_back(*sg.kept);
      } else {
        back.uses.push_back(*sg.kept);
      }
    }
    copies.push_back(out);
    copies.push_back(add_task(std::move(back), ready + 1));
    last_gradient_copy_[0] = out;
    last_gradient_copy_[1] = copies.back();
    if (sg.where != Where::cpu) continue;
    Task fp32 = copy(TaskKind::offload, "fp32 gradient to the host: " + what, (async ? kFp32GradientBytes : share.element_size) * share.elements,
                     copies.back());
    fp32.uses = {on_gpu};
    if (async) {
      fp32.creates = {add_buffer(what + " (fp32 upcast for the host)", kFp32GradientBytes * share.elements, MemoryRole::temporary, false)};
    } else {
      fp32.blocks_host = true;
    }
    copies.push_back(add_task(std::move(fp32), ready + 1));
    last_gradient_copy_[0] = copies.back();
    if (!async) {
      // The blocking copy's conversion on the host (PyTorch copies into a 16-bit temporary,
      // then converts it into the fp32 gradient): the 16-bit element read and 4 bytes written,
      // at the host's memory bandwidth, on the launching thread.
      Task convert;
      convert.kind = TaskKind::host_compute;
      convert.stream = Stream::host;
      convert.name = "fp32 conversion on the host: " + what;
      convert.seconds = static_cast<double>((share.element_size + kFp32GradientBytes) * share.elements) / platform_->host.memory_bandwidth;
      convert.blocks_host = true;
      convert.after = {copies.back()};
      add_task(std::move(convert), ready + 1);
    }
  }
  return copies;
}

// The fork's step copies a GPU subgroup's fp32 state back to the host only from opt_transfers,
// which runs at each subgroup x with x % k == 0 and sends back the GPU subgroup before x
// (get_prev_next_subgroup_on_gpu(x, prev=True); DataStates/DeepSpeed@4570a955, the commit
// the sample logs ran, branch deep-optimizer-states, deepspeed/runtime/zero/stage3.py lines
// 2100-2136 and 2169-2175; the file is the same at the branch's tip d18d6f81). When
// no such x follows the last GPU subgroup, nothing sends it back: its fp32 parameters, momentum
// and variance (prefetch_optimizer_gpu_fp32_params, _momentum, _variance) and the fp32 gradient
// set as the parameters' .grad (line 2148: `.to(dtype)`, dtype fp32), which only the copy back
// clears (line 2108), stay on the GPU across the iteration boundary; the next step's
// opt_transfers(0) finds no previous GPU subgroup (the walk from 0 down ends at -1). That
// subgroup, if any.
std::optional<std::size_t> Transform::carried_subgroup() const {
  if (!spec_.offload_optimizer || !spec_.offload_optimizer->prefetch_optimizer) return std::nullopt;
  const auto k = static_cast<std::size_t>(std::max(spec_.offload_optimizer->prefetch_optimizer_gap, 1));
  std::optional<std::size_t> on_gpu;
  for (std::size_t x = 0; x < subgroups_.size(); ++x) {
    if (subgroups_[x].where == Where::gpu_prefetched) {
      on_gpu = x;
    } else if (x % k == 0) {
      on_gpu.reset();  // opt_transfers(x) sends the previous GPU subgroup back
    }
  }
  return on_gpu;
}

// Deep Optimizer States: the carried subgroup's state and gradients as the previous step left
// them, allocated when the iteration's first task starts (step_on_the_host frees them once the
// first GPU subgroup's state has come in).
std::optional<Transform::Carried> Transform::previous_steps_state() {
  const std::optional<std::size_t> x = carried_subgroup();
  if (!x) return std::nullopt;
  const std::int64_t e = subgroups_[*x].elements;
  const std::string which = "optimizer subgroup " + std::to_string(*x);
  Carried c;
  c.subgroup = *x;
  c.state = add_buffer("previous step's fp32 parameters, momentum and variance of " + which + ", left on the GPU",
                       kFp32AdamStateBytesPerParameter * e, MemoryRole::optimizer_state, false);
  c.gradient = add_buffer("previous step's fp32 gradients of " + which + ", left on the GPU", kFp32GradientBytes * e, MemoryRole::gradient, false);
  for (TaskId t = 0; t < n_; ++t) {
    if (removed_[t]) continue;
    s_.tasks[t].creates.push_back(c.state);
    s_.tasks[t].creates.push_back(c.gradient);
    break;
  }
  return c;
}

// The optimizer's tasks give way to the step on the host, inserted where they were. Once the
// backward pass and the gradient copies have ended, subgroup by subgroup (stage3.py@v0.13.3
// step, lines 2114-2126; stage_1_and_2.py step): a subgroup on the CPU is stepped by
// DeepSpeedCPUAdam on the launching thread (cpu_adam_seconds), then its updated 16-bit
// parameters are copied to the GPU with a blocking copy_; one on the GPU (Twin-Flow) runs the
// optimizer's kernels for its share of the parameters. Deep Optimizer States' schedule instead
// (the fork's step and opt_transfers): at each subgroup x with x % k == 0, the fp32 state of
// the last GPU subgroup is copied back to the host and then (same copy streams) the next GPU
// subgroup's state is copied in, while the CPU steps the subgroups in between; the launching
// thread waits for that copy before the GPU subgroup's kernels, and for the parameter copies of
// the CPU subgroups (issued without blocking before each GPU subgroup) at each x % k == 0. The
// fork leaves the carried subgroup's state and gradients on the GPU (carried_subgroup): they
// are allocated from the iteration's start (the previous step's) until the first GPU
// subgroup's state has come in (its step deletes the previous tensors from backup_optimizer,
// lines 2241-2255; a subgroup of the same size reuses the three fp32 tensors, lines 2143-2146),
// and this step's are kept to its end. The CPU subgroups after the last GPU subgroup are never
// downsampled to the GPU's 16-bit parameters: the fork submits downsample_fp32_fp16 only when
// the next subgroup is a GPU one (lines 2268-2273).
// Returns the last copy of parameters to the GPU (what stages 1 and 2 all-gather after).
std::optional<TaskId> Transform::step_on_the_host(std::optional<TaskId> last_reduction) {
  if (!first_optimizer_) return std::nullopt;
  // The GPU kernels' time of this rank's step (already 1/ranks) and an op to name them by.
  double gpu_seconds = 0;
  for (TaskId t = *first_optimizer_; t <= *last_optimizer_; ++t) {
    const Task& task = s_.tasks[t];
    if (!task.op || pass_of(task, trace_) != Phase::optimizer) continue;
    gpu_seconds += task.seconds;
    removed_[t] = true;
  }
  const traces::OpIndex optimizer_op = *s_.tasks[*first_optimizer_].op;
  const TaskId at = *first_optimizer_;
  const std::size_t first_added = added_.size();  // the step's tasks: those added from here to the return
  // The step starts once the backward pass, the reductions and the copies have ended
  // (DeepSpeed's step reads every gradient: the norm, the overflow check).
  std::vector<TaskId> start = {last_backward_};
  if (last_reduction) start.push_back(*last_reduction);
  for (const auto& c : last_gradient_copy_) {
    if (c) start.push_back(*c);
  }
  const OptimizerOffloadSpec& offload = *spec_.offload_optimizer;
  const bool dos = offload.prefetch_optimizer;
  const auto k = static_cast<std::size_t>(std::max(offload.prefetch_optimizer_gap, 1));
  const std::optional<BufferId> parameters = spec_.zero_stage == 3 ? parameter_partition_ : std::nullopt;

  std::optional<TaskId> last_host;         // the last CPU step issued
  std::optional<TaskId> last_parameters;   // the last copy of updated parameters to the GPU
  std::vector<TaskId> host_waits = start;  // what the launching thread waits for before its next CPU step
  std::vector<std::size_t> later;          // Deep Optimizer States: CPU subgroups whose parameters are not copied yet
  // Deep Optimizer States: the GPU subgroup whose state is on the GPU (a sentinel rather than an
  // optional: g++ 12 warns that an optional<size_t> here may be used uninitialized).
  constexpr std::size_t kNoSubgroup = static_cast<std::size_t>(-1);
  std::size_t state_on_gpu = kNoSubgroup;
  std::map<std::size_t, TaskId> fetched;   // Deep Optimizer States: GPU subgroup -> the copy of its state in
  // Deep Optimizer States: the previous step's carried state and gradients.
  const std::optional<Carried> carried = previous_steps_state();
  bool any_state_in = false;  // a GPU subgroup's state has been copied in

  const auto elements_text = [](std::int64_t e) { return std::to_string(e) + " parameters"; };
  const auto copy_parameters = [&](std::size_t x, TaskId after, bool blocking) {
    const Subgroup& sg = subgroups_[x];
    Task p;
    p.kind = TaskKind::prefetch;
    p.stream = Stream::h2d;
    p.name = "updated parameters of optimizer subgroup " + std::to_string(x) + " to the GPU";
    p.bytes = sg.gradient_bytes;  // the 16-bit parameters: the gradients' dtype
    p.after = {after};
    p.blocks_host = blocking;
    if (parameters) p.uses = {*parameters};
    last_parameters = add_task(std::move(p), at);
  };
  const auto gpu_step = [&](std::size_t x, std::vector<TaskId> after, std::vector<BufferId> uses) {
    const Subgroup& sg = subgroups_[x];
    Task g;
    g.kind = TaskKind::op;
    g.op = optimizer_op;
    g.stream = Stream::compute;
    g.name = "optimizer step on the GPU of subgroup " + std::to_string(x) + " (" + elements_text(sg.elements) + ")";
    g.seconds = total_elements_ > 0 ? gpu_seconds * static_cast<double>(sg.elements) / static_cast<double>(total_elements_) : 0;
    g.after = std::move(after);
    g.uses = std::move(uses);
    return add_task(std::move(g), at);
  };
  const auto state_copy = [&](std::size_t x, bool in, std::vector<TaskId> after) {
    Subgroup& sg = subgroups_[x];
    Task c;
    c.kind = in ? TaskKind::prefetch : TaskKind::offload;
    c.stream = in ? Stream::h2d : Stream::d2h;
    c.name = std::string("fp32 optimizer state of subgroup ") + std::to_string(x) + (in ? " to the GPU" : " back to the host");
    c.bytes = kFp32AdamStateBytesPerParameter * sg.elements;
    c.after = std::move(after);
    if (in) {
      // The first GPU subgroup's state comes in while the previous step's is still there; the
      // fork reuses those three tensors when the sizes agree.
      const bool first_in = carried && !any_state_in;
      any_state_in = true;
      if (first_in && sg.elements == subgroups_[carried->subgroup].elements) {
        sg.state = carried->state;
        c.uses = {carried->state};
      } else {
        sg.state = add_buffer("fp32 parameters, momentum and variance of optimizer subgroup " + std::to_string(x) + " on the GPU", c.bytes,
                              MemoryRole::optimizer_state, false);
        c.creates = {*sg.state};
        if (first_in) c.uses = {carried->state};
      }
      sg.fp32_gradient = add_buffer("fp32 gradients of optimizer subgroup " + std::to_string(x) + " on the GPU",
                                    kFp32GradientBytes * sg.elements, MemoryRole::gradient, false);
      c.creates.push_back(*sg.fp32_gradient);
      if (first_in) c.uses.push_back(carried->gradient);
      if (sg.kept) c.uses.push_back(*sg.kept);
    } else {
      c.uses = {*sg.state};
    }
    return add_task(std::move(c), at);
  };
  const auto flush_later = [&] {
    for (std::size_t y : later) copy_parameters(y, *subgroups_[y].host_step, false);
    later.clear();
  };

  for (std::size_t x = 0; x < subgroups_.size(); ++x) {
    Subgroup& sg = subgroups_[x];
    if (dos && x % k == 0) {
      std::optional<TaskId> out;
      if (state_on_gpu != kNoSubgroup) {
        out = state_copy(state_on_gpu, false, {*subgroups_[state_on_gpu].gpu_step});
        state_on_gpu = kNoSubgroup;
      }
      if (const std::size_t next = x + k - 1; next < subgroups_.size() && subgroups_[next].where == Where::gpu_prefetched) {
        std::vector<TaskId> after = start;
        if (out) after.push_back(*out);
        fetched[next] = state_copy(next, true, std::move(after));
      }
      if (last_parameters) host_waits.push_back(*last_parameters);
    }
    switch (sg.where) {
      case Where::cpu: {
        Task a;
        a.kind = TaskKind::host_compute;
        a.stream = Stream::host;
        a.name = "CPU Adam of optimizer subgroup " + std::to_string(x) + " (" + elements_text(sg.elements) + ")";
        a.seconds = cpu_adam_seconds(sg.elements, platform_->host);
        a.blocks_host = true;
        a.after = std::move(host_waits);
        host_waits.clear();
        if (last_host) a.after.push_back(*last_host);
        last_host = sg.host_step = add_task(std::move(a), at);
        if (!dos) {
          copy_parameters(x, *last_host, true);
        } else {
          later.push_back(x);
          if (x + 1 < subgroups_.size() && subgroups_[x + 1].where == Where::gpu_prefetched) flush_later();
        }
        break;
      }
      case Where::gpu_resident:
        sg.gpu_step = gpu_step(x, start, {});
        break;
      case Where::gpu_prefetched: {
        const TaskId in = fetched.at(x);
        sg.gpu_step = gpu_step(x, {in}, {*sg.state, *sg.fp32_gradient});
        host_waits.push_back(in);
        state_on_gpu = x;
        break;
      }
    }
  }
  // The carried subgroup's state and gradients stay for the next step; the CPU subgroups in
  // `later` are not copied (see above).
  if (state_on_gpu != kNoSubgroup) {
    s_.buffers[*subgroups_[state_on_gpu].state].held_to_end = true;
    s_.buffers[*subgroups_[state_on_gpu].fp32_gradient].held_to_end = true;
  }
  step_added_ = {first_added, added_.size()};
  return last_parameters;
}

}  // namespace comptrain::models::transform_detail

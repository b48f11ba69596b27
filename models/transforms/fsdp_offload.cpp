// FSDP2's CPU offload (README.md, "FSDP2's CPU offload"): fully_shard(...,
// offload_policy=CPUOffloadPolicy(pin_memory)), torchtitan's training.enable_cpu_offload. Sources:
// pytorch/pytorch@010ae4a8, torch/distributed/fsdp/_fully_shard/ (_fsdp_api.py CPUOffloadPolicy;
// _fsdp_param.py FSDPParam._init_sharded_param, all_gather_inputs; _fsdp_collectives.py
// foreach_all_gather, _get_param_all_gather_inputs, foreach_reduce; _fsdp_param_group.py
// finalize_backward). The steps fsdp.cpp calls when the spec's cpu_offload is set; part of data
// parallelism as a schedule transform (data_parallel_transform.hpp).

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "comptrain/models/fsdp_offload.hpp"
#include "comptrain/support/input_error.hpp"
#include "data_parallel_transform.hpp"

namespace comptrain::models {

// The step's passes over memory (data_parallel.hpp). Which implementation runs on CPU shards:
// torch/utils/_foreach_utils.py (pytorch/pytorch, 2025) lists the devices with foreach kernels,
// _get_foreach_kernels_supported_devices: cuda, xpu, mtia and the private-use backend, not the
// CPU, so _default_to_fused_or_foreach picks the for-loop there; an explicit foreach=True runs the
// _foreach ops' per-tensor slow path, the same eight passes; _get_fused_kernels_supported_devices
// lists the CPU, so fused=True runs ATen's CPU kernel.
double torch_cpu_adamw_seconds(std::int64_t parameters, bool fused, const HostSpec& host) {
  if (!(host.flops > 0) || !(host.memory_bandwidth > 0)) {
    throw std::invalid_argument("torch_cpu_adamw_seconds: the host '" + host.name + "' needs positive flops and memory_bandwidth");
  }
  const auto n = static_cast<double>(parameters);
  const double bytes = fused ? kTorchCpuAdamWFusedBytesPerParameter : kTorchCpuAdamWForLoopBytesPerParameter;
  return std::max(n * kCpuAdamFlopsPerParameter / host.flops, n * bytes / host.memory_bandwidth);
}

std::int64_t fsdp_offload_host_bytes(const traces::Trace& trace, const DataParallelSpec& spec) {
  if (!spec.fsdp || !spec.fsdp->cpu_offload || spec.ranks < 1) return 0;
  const std::int64_t ranks = spec.ranks / spec.fsdp->replicate;  // the shard group's (HSDP: ranks / replicate)
  const std::int64_t sharded_bytes = spec.fsdp->sharded_parameter_bytes;
  std::int64_t shard_elements = 0;  // this rank's, padded (_get_dim0_padded_size)
  std::int64_t weight_elements = 0;
  std::int64_t weight_element_size = 0;
  std::int64_t state = 0;
  for (const traces::Tensor& t : trace.tensors()) {
    if (t.is_view()) continue;
    if (t.role == traces::TensorRole::weight) {
      const std::int64_t dim0 = t.shape.empty() ? std::max<std::int64_t>(t.elements(), 1) : t.shape.front();
      const std::int64_t rest = t.shape.empty() ? 1 : (dim0 > 0 ? t.elements() / dim0 : 0);
      shard_elements += transform_detail::ceil_div(dim0, ranks) * rest;
      weight_elements += t.elements();
      weight_element_size = std::max<std::int64_t>(weight_element_size, traces::element_size(t.dtype));
    } else if (t.role == traces::TensorRole::optimizer_state) {
      state += t.bytes();
    }
  }
  const std::int64_t masters = weight_element_size < sharded_bytes && state > 0 ? std::min(state, weight_elements * sharded_bytes) : 0;
  return 2 * shard_elements * sharded_bytes + transform_detail::ceil_div(state - masters, ranks);
}

}  // namespace comptrain::models

namespace comptrain::models::transform_detail {

using traces::Phase;

namespace {

// A copy between the host's shards and the GPU: pinned memory at the link's rate without
// blocking the launching thread; pageable memory (pin_memory=False) staged by the driver, and
// synchronous for the launching thread (CUDA's cudaMemcpyAsync from or to pageable memory; FSDP2
// also asks for a blocking device-to-host copy then: foreach_reduce's non_blocking is
// `fsdp_param.pin_memory and ...`).
Task host_copy(bool to_gpu, bool pinned, std::string name, std::int64_t bytes) {
  Task c;
  c.kind = to_gpu ? TaskKind::prefetch : TaskKind::offload;
  c.stream = to_gpu ? Stream::h2d : Stream::d2h;
  c.name = std::move(name);
  c.bytes = bytes;
  c.pageable = !pinned;
  c.blocks_host = !pinned;
  return c;
}

}  // namespace

// The sharded parameters (FSDPParam._init_sharded_param: padded_sharded_param.cpu(), then
// pin_memory()) and, as the optimizer steps them where they are, the optimizer state are the
// host's: shard_fsdp_state's two GPU buffers hold nothing.
void Transform::keep_fsdp_state_on_the_host(BufferId sharded_parameters) {
  Buffer& shards = s_.buffers[sharded_parameters];
  shards.bytes = 0;
  shards.name = "sharded parameters (on the host)";
  for (BufferId b = 0; b < old_buffers_; ++b) {
    if (s_.buffers[b].role != MemoryRole::optimizer_state || substitute_[b] == kKeep) continue;
    Buffer& part = s_.buffers[substitute_[b]];
    part.bytes = 0;
    part.name = "optimizer state (on the host)";
  }
  if (const auto& offload = *spec_.fsdp->cpu_offload; !offload.pin_memory && !(platform_->host_link.pageable_bandwidth > 0)) {
    throw InputError("parallelism.fsdp.offload_policy: pin_memory false copies through pageable host memory, which needs the platform's "
                     "host_link.pageable_bandwidth; platform '" + platform_->name + "' does not give it; expected pin_memory: true or a platform that gives it");
  }
}

// Before a group's all-gather, its shards are copied to the GPU on the all-gather copy-in stream
// (FSDPParam.all_gather_inputs: `sharded_param_data.to(self.device, non_blocking=True)`, then
// cast to param_dtype; _get_param_all_gather_inputs skips its foreach-copy fast path under
// offload, so each parameter is copied and cast on its own). The copy is issued with the
// all-gather, which waits for it. The GPU copy of a parameter's shard is freed once cast (the
// next parameter's copy reuses its block: one at a time, the group's largest); without a cast
// (param_dtype None) the copies are the all-gather inputs, all held until the copy-in.
void Transform::copy_shards_in(const Unit& unit, const char* pass, std::size_t index, TaskId before, Task& all_gather) {
  const FsdpSpec& f = *spec_.fsdp;
  std::int64_t largest = 0;
  for (BufferId w : unit.weights) largest = std::max(largest, padded_elements(trace_.tensor(*s_.buffers[w].tensor)) / shard_ranks());
  const std::int64_t element = unit.padded_elements > 0 ? unit.unsharded_bytes / unit.padded_elements : 0;
  const bool cast = element != f.sharded_parameter_bytes;
  const std::string what = unit.name.empty() ? std::string("root") : unit.name;
  const std::int64_t bytes = unit.sharded_elements * f.sharded_parameter_bytes;
  Task c = host_copy(true, f.cpu_offload->pin_memory,
                     task_name(("FSDP shards to the GPU for the " + std::string(pass) + " all-gather of " + what).c_str(), index, bytes), bytes);
  const BufferId on_gpu = add_buffer(what + " shards copied to the GPU (" + pass + ")", (cast ? largest : unit.sharded_elements) * f.sharded_parameter_bytes,
                                     MemoryRole::temporary, false);
  s_.buffers[on_gpu].allocation_stream = AllocationStream::fsdp_all_gather;
  c.creates = {on_gpu};
  c.after = all_gather.after;
  all_gather.after.push_back(add_task(std::move(c), before));
  all_gather.uses.push_back(on_gpu);
}

// After a group's reduce-scatter, foreach_reduce casts the shard to the parameters' dtype if
// reduce_dtype differs (_to_dtype_if_needed(reduce_output, orig_dtype)) and copies it to the host
// on the reduce-scatter stream (`new_sharded_grad.to(torch.device("cpu"), non_blocking=...)`),
// non-blocking when pinned (grad_offload_event records it); the GPU shard is dropped at once
// (nothing keeps a reference), so it is not held to zero_grad.
void Transform::copy_gradient_shard_out(const Unit& unit, BufferId output, TaskId reduction, TaskId ready, std::int64_t reduce_bytes) {
  const FsdpSpec& f = *spec_.fsdp;
  const std::string what = unit.name.empty() ? std::string("root") : unit.name;
  const std::int64_t bytes = unit.sharded_elements * f.sharded_parameter_bytes;
  s_.buffers[output].held_to_end = false;
  Task c = host_copy(false, f.cpu_offload->pin_memory, task_name(("FSDP gradient shard to the host of " + what).c_str(), fsdp_gradient_copies_.size(), bytes), bytes);
  c.uses = {output};
  if (reduce_bytes != f.sharded_parameter_bytes) {
    const BufferId cast = add_buffer(what + " sharded gradients cast for the host", bytes, MemoryRole::gradient, false);
    s_.buffers[cast].allocation_stream = AllocationStream::fsdp_reduce_scatter;
    c.creates = {cast};
  }
  c.after = {reduction};
  fsdp_gradient_copies_.push_back(add_task(std::move(c), ready + 1));
}

// The step on the CPU: torch.optim steps this rank's shards where they live
// (torch_cpu_adamw_seconds over the group's shards), once finalize_backward has waited for every
// gradient copy (`fsdp_param.grad_offload_event.synchronize()`: the launching thread blocks), in
// place of the optimizer's GPU kernels. No parameter goes back: the next iteration's all-gathers
// copy the updated shards in.
void Transform::step_fsdp_on_the_host(const FsdpGroups& groups) {
  if (!first_optimizer_) return;
  for (TaskId t = *first_optimizer_; t <= *last_optimizer_; ++t) {
    if (s_.tasks[t].op && pass_of(s_.tasks[t], trace_) == Phase::optimizer) removed_[t] = true;
  }
  std::int64_t elements = 0;
  for (const Unit& unit : groups.units) {
    if (!unit.gradients.empty()) elements += unit.sharded_elements;
  }
  const bool fused = spec_.fsdp->cpu_offload->fused_step;
  Task a;
  a.kind = TaskKind::host_compute;
  a.stream = Stream::host;
  a.name = std::string("torch.optim AdamW on the CPU (") + (fused ? "fused" : "for-loop") + ", " + std::to_string(elements) + " parameters)";
  a.seconds = torch_cpu_adamw_seconds(elements, fused, platform_->host);
  a.blocks_host = true;
  a.after = fsdp_gradient_copies_;
  a.after.push_back(last_backward_);
  const std::size_t first = added_.size();
  add_task(std::move(a), *first_optimizer_);
  step_added_ = {first, added_.size()};
}

}  // namespace comptrain::models::transform_detail

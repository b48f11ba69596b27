#include "comptrain/models/data_parallel.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "data_parallel_transform.hpp"
#include "comptrain/models/kernel_power.hpp"
#include "comptrain/models/module_pattern.hpp"
#include "comptrain/support/input_error.hpp"

// Data parallelism as a schedule transform: the order of its steps (Transform::run) and the
// public functions. The steps live in ddp.cpp, zero.cpp, optimizer_offload.cpp and fsdp.cpp.

namespace comptrain::models::transform_detail {

using traces::Phase;

Transform::Transform(Schedule& schedule, const traces::Trace& trace, const DataParallelSpec& spec, const Platform* platform)
    : ScheduleEdit(schedule), trace_(trace), spec_(spec), platform_(platform) {}

KernelRun memory_bound_kernels(const Platform& platform, double bytes, int launches) {
  const double memory = bytes / (platform.gpu.memory_bandwidth * platform.efficiency.memory_default);
  return run_kernel(platform.gpu, KernelWork{0.0, memory, launches * platform.gpu.launch_overhead});
}

// A framework's own memory-bound kernels on the compute stream (TaskKind::framework): `bytes`
// read and written in `launches` kernels. Only with the platform, which times them.
Task Transform::framework_kernel(std::string name, double bytes, int launches) const {
  if (platform_ == nullptr) throw std::logic_error("framework_kernel: a framework kernel is timed on the platform, and there is none");
  const KernelRun k = memory_bound_kernels(*platform_, bytes, launches);
  Task t;
  t.kind = TaskKind::framework;
  t.stream = Stream::compute;
  t.seconds = k.seconds;
  t.watts = k.watts;
  t.name = std::move(name);
  return t;
}

// PyTorch's fp16/bf16 compress hooks (DdpCommHook): the cast and the division on the compute
// stream once the bucket is ready (the reducer calls the hook from the autograd thread), the
// all-reduce of the 16-bit tensor, then the copy back into the bucket after it (on the comm
// stream: the future's callback runs on streams that wait for the all-reduce).
std::optional<Task> Transform::compress_bucket(const Bucket& bucket, Task& all_reduce, TaskId ready, std::size_t index) {
  if (platform_ == nullptr) throw std::invalid_argument("a DDP compression hook needs the platform (its GPU's memory bandwidth)");
  const traces::DType gradient = trace_.tensor(*s_.buffers[bucket.gradients.front()].tensor).dtype;
  const traces::DType to = spec_.comm_hook == DdpCommHook::fp16 ? traces::DType::f16 : traces::DType::bf16;
  const auto from_size = static_cast<std::int64_t>(traces::element_size(gradient));
  const std::int64_t elements = bucket.bytes / from_size;
  const std::int64_t compressed_bytes = elements * 2;
  const bool cast = gradient != to;
  const std::string hook = std::string(to_string(spec_.comm_hook));
  Task compress;
  compress.kind = TaskKind::compress;
  compress.stream = Stream::compute;
  compress.after = {ready};
  compress.uses = all_reduce.uses;
  // buffer.to(dtype) reads the bucket and writes the 16-bit copy; div_(world_size) reads and
  // writes that copy. Without a cast only the division runs, in the bucket itself.
  const double e = static_cast<double>(elements);
  const KernelRun work = cast ? memory_bound_kernels(*platform_, e * static_cast<double>(from_size + 2) + e * 4.0, 2)
                              : memory_bound_kernels(*platform_, e * 4.0, 1);
  compress.seconds = work.seconds;
  compress.watts = work.watts;
  compress.name = task_name((hook + " compress hook: cast and division of gradient bucket").c_str(), index, bucket.bytes);
  std::optional<Task> copy_back;
  if (cast) {
    const BufferId compressed = add_buffer(hook + " copy of gradient bucket " + std::to_string(index), compressed_bytes, MemoryRole::temporary, false);
    compress.creates.push_back(compressed);
    all_reduce.uses.push_back(compressed);
    Task decompress;
    decompress.kind = TaskKind::decompress;
    decompress.stream = Stream::comm;
    decompress.uses = all_reduce.uses;
    // copy_ reads the 16-bit result and writes the bucket.
    const KernelRun back = memory_bound_kernels(*platform_, e * static_cast<double>(2 + from_size), 1);
    decompress.seconds = back.seconds;
    decompress.watts = back.watts;
    decompress.name = task_name((hook + " compress hook: copy back into gradient bucket").c_str(), index, bucket.bytes);
    copy_back = std::move(decompress);
  }
  all_reduce.bytes = compressed_bytes;
  all_reduce.after = {add_task(std::move(compress), ready + 1)};
  return copy_back;
}

// PowerSGD (DdpCommHook::powersgd) on one bucket, in PyTorch's order (powerSGD_hook.py, steady
// state: error feedback and warm start on). On the compute stream once the bucket is ready: the
// error added into the bucket, its clone kept for the next error, the uncompressed tensors
// concatenated, the Qs orthogonalized and P = M Q. Then on the comm stream, where the futures'
// callbacks run after each all-reduce: the all-reduce of the uncompressed tensors, their division
// and copy back, the all-reduce of the Ps, their orthogonalization and Q = M^T P, the all-reduce
// of the Qs, and M = P Q^T with the new error. Returns the last task, which the optimizer waits
// for. Kernel times from the GPU's fp32 (or the gradients' type's) peak x the matmul efficiency
// and its memory bandwidth x the default memory efficiency.
TaskId Transform::power_sgd_bucket(const Bucket& bucket, const Task& plain, TaskId ready, std::size_t index) {
  if (platform_ == nullptr) throw std::invalid_argument("the PowerSGD hook needs the platform (its GPU's peak and memory bandwidth)");
  const traces::DType dtype = trace_.tensor(*s_.buffers[bucket.gradients.front()].tensor).dtype;
  const double size = static_cast<double>(traces::element_size(dtype));
  double flops = 0;         // one pass of matmuls over the compressed matrices: sum of 2 n m r
  double p_elements = 0;    // sum of n r
  double q_elements = 0;    // sum of m r
  double compressed = 0;    // sum of n m
  double uncompressed = 0;  // elements all-reduced as they are
  double rank_sum = 0;      // sum of r: each orthogonalization's columns
  int matrices = 0;
  int vectors = 0;
  for (BufferId g : bucket.gradients) {
    const traces::Tensor& t = trace_.tensor(*s_.buffers[g].tensor);
    const std::int64_t numel = t.elements();
    const std::int64_t n = t.shape.empty() ? 1 : std::max<std::int64_t>(t.shape.front(), 1);
    const std::int64_t m = numel / n;
    const std::int64_t r = std::min({n, m, static_cast<std::int64_t>(spec_.powersgd.rank)});
    // _should_compress: worth it when min_compression_rate < n m / ((n + m) r).
    if (r >= 1 && static_cast<double>((n + m) * r) * spec_.powersgd.min_compression_rate < static_cast<double>(n * m)) {
      flops += 2.0 * static_cast<double>(n * m * r);
      p_elements += static_cast<double>(n * r);
      q_elements += static_cast<double>(m * r);
      compressed += static_cast<double>(n * m);
      rank_sum += static_cast<double>(r);
      ++matrices;
    } else {
      uncompressed += static_cast<double>(numel);
      ++vectors;
    }
  }
  const double bucket_bytes = static_cast<double>(bucket.bytes);
  const double peak = dtype == traces::DType::f32 ? platform_->gpu.peak_fp32 : platform_->peak_flops(dtype, false);
  const double compute = peak * platform_->efficiency.compute_for(traces::OpKind::matmul);
  const double bandwidth = platform_->gpu.memory_bandwidth * platform_->efficiency.memory_default;
  const auto kernels = [&](double kernel_flops, double bytes, double launches) {
    return run_kernel(platform_->gpu, KernelWork{kernel_flops / compute, bytes / bandwidth, launches * platform_->gpu.launch_overhead});
  };
  // Gram-Schmidt over an x r matrix: per column a norm and a division (two launches), and a
  // projection of the rest: about 2r + 1 reads and writes of it. Launches per stage: its
  // orthogonalizations' 2r per matrix, one matmul per matrix, and its elementwise kernels.
  const auto orthogonalize_bytes = [&](double elements) { return elements * size * (2.0 * spec_.powersgd.rank + 1.0); };
  const std::string at = " of gradient bucket " + std::to_string(index);
  const BufferId error = add_buffer("PowerSGD error feedback" + at, bucket.bytes, MemoryRole::gradient);
  const BufferId low_rank = add_buffer("PowerSGD P and Q" + at, static_cast<std::int64_t>((p_elements + q_elements) * size), MemoryRole::gradient);
  const BufferId clone = add_buffer("PowerSGD copy of the input" + at, bucket.bytes, MemoryRole::temporary, false);
  std::optional<BufferId> contiguous;
  if (uncompressed > 0) {
    contiguous = add_buffer("PowerSGD uncompressed tensors" + at, static_cast<std::int64_t>(uncompressed * size), MemoryRole::temporary, false);
  }
  const auto task = [&](TaskKind kind, Stream stream, const char* what, const KernelRun& run) {
    Task t;
    t.kind = kind;
    t.stream = stream;
    t.seconds = run.seconds;
    t.watts = run.watts;
    t.uses = plain.uses;
    t.name = task_name(what, index, bucket.bytes);
    return t;
  };
  const auto collective = [&](const char* what, double elements, BufferId payload) {
    Task c;
    c.kind = TaskKind::collective;
    c.stream = Stream::comm;
    c.collective = CollectiveKind::all_reduce;
    c.bytes = static_cast<std::int64_t>(elements * size);
    c.uses = {payload};
    c.name = task_name(what, index, c.bytes);
    return c;
  };
  Task first = task(TaskKind::compress, Stream::compute, "PowerSGD: error feedback, Q orthogonalization and P = MQ",
                    kernels(flops, 3 * bucket_bytes + 2 * bucket_bytes + 2 * uncompressed * size + orthogonalize_bytes(q_elements) +
                                       (compressed + q_elements + p_elements) * size,
                            3.0 + 2.0 * rank_sum + matrices));
  first.after = {ready};
  first.uses.insert(first.uses.end(), {error, low_rank});
  first.creates = {clone};
  if (contiguous) first.creates.push_back(*contiguous);
  const TaskId compress = add_task(std::move(first), ready + 1);
  if (contiguous) {
    Task c = collective("PowerSGD: all-reduce of the uncompressed tensors", uncompressed, *contiguous);
    c.after = {compress};
    add_task(std::move(c), ready + 1);
    Task unpack = task(TaskKind::decompress, Stream::comm, "PowerSGD: division and copy back of the uncompressed tensors",
                       kernels(0, 4 * uncompressed * size, 1.0 + vectors));
    unpack.uses.push_back(*contiguous);
    add_task(std::move(unpack), ready + 1);
  }
  Task all_reduce_p = collective("PowerSGD: all-reduce of the Ps", p_elements, low_rank);
  all_reduce_p.after = {compress};
  add_task(std::move(all_reduce_p), ready + 1);
  Task second = task(TaskKind::compress, Stream::comm, "PowerSGD: P orthogonalization and Q = M^T P",
                     kernels(flops, orthogonalize_bytes(p_elements) + (compressed + p_elements + q_elements) * size, 2.0 * rank_sum + matrices));
  second.uses.push_back(low_rank);
  add_task(std::move(second), ready + 1);
  add_task(collective("PowerSGD: all-reduce of the Qs", q_elements, low_rank), ready + 1);
  Task last = task(TaskKind::decompress, Stream::comm, "PowerSGD: M = P Q^T and the new error",
                   kernels(flops, 2 * q_elements * size + (p_elements + q_elements + compressed) * size + 3 * bucket_bytes, 2.0 + matrices));
  last.uses.insert(last.uses.end(), {error, low_rank, clone});
  return add_task(std::move(last), ready + 1);
}

std::optional<TaskId> Transform::run() {
  find_pass_bounds();
  // Megatron's fp32 gradient buffer: every 16-bit gradient held as fp32 (before the buckets,
  // which sum the gradients' bytes).
  if (spec_.grad_reduce_in_fp32) {
    for (BufferId g : gradients_) {
      const traces::Tensor& t = trace_.tensor(*s_.buffers[g].tensor);
      if (traces::element_size(t.dtype) < 4) s_.buffers[g].bytes = t.elements() * 4;
    }
  }
  if (spec_.fsdp) {
    run_fsdp();
    return step_begin();
  }
  const std::vector<Bucket> buckets = make_buckets();
  const std::int64_t gradient_bytes = sum_bytes(gradients_);
  substitute_.assign(old_buffers_, kKeep);
  if (spec_.offload_optimizer) make_subgroups();

  // Memory first: the buffers the collectives use must exist when they are made.
  std::optional<BufferId> bucket_copy;
  if (spec_.zero_stage == 0 && !spec_.gradient_as_bucket_view && gradient_bytes > 0) {
    bucket_copy = add_buffer("DDP gradient buckets (a copy of the gradients)", gradient_bytes, MemoryRole::gradient);
  }
  if (spec_.zero_stage >= 1) partition_optimizer_state();
  std::optional<BufferId> reduction_bucket;
  if (spec_.zero_stage >= 2 && !gradients_.empty()) {
    // DeepSpeed copies each gradient into a contiguous reduction bucket of reduce_bucket_size
    // elements (stage_1_and_2.py and stage3.py, contiguous_gradients: true by default), reduces
    // it and keeps this rank's share in a partition of 1/ranks of the gradients; the full
    // gradient is freed once its bucket has been reduced.
    std::int64_t elements = 0;
    std::int64_t element_size = 1;
    for (BufferId g : gradients_) {
      const auto& t = trace_.tensor(*s_.buffers[g].tensor);
      elements += t.elements();
      element_size = std::max<std::int64_t>(element_size, traces::element_size(t.dtype));
    }
    reduction_bucket = add_buffer("ZeRO reduction bucket", std::min(elements, spec_.reduce_bucket_elements) * element_size, MemoryRole::gradient);
    // With an offloaded optimizer the partition is the host's (stage3.py@v0.13.3 line 225:
    // self.device is the CPU, where grad_partitions_flat_buffer lives; stage_1_and_2.py keeps
    // the fp32 gradients with the host's fp32 partition); Twin-Flow's GPU subgroups keep an
    // fp32 gradient on the GPU (their fp32_partitioned_groups_flat[i].grad).
    const std::int64_t part_bytes =
        spec_.offload_optimizer ? kFp32GradientBytes * resident_elements_ : ceil_div(gradient_bytes, spec_.ranks);
    std::optional<BufferId> part;
    if (part_bytes > 0) {
      part = add_buffer(partition_name(spec_.offload_optimizer ? "fp32 gradients of the subgroups stepped on the GPU" : "gradient partition"),
                        part_bytes, MemoryRole::gradient);
    }
    for (BufferId g : gradients_) {
      s_.buffers[g].held_to_end = false;
      s_.buffers[g].resident = false;
      if (part) optimizer_substitute_[g] = *part;
    }
  }
  if (spec_.zero_stage == 3) partition_parameters();

  // The reductions.
  std::optional<TaskId> last_reduction;  // as n + index into added_
  std::vector<TaskId> previous_copies;    // ZeRO-3 with an offloaded optimizer: the previous bucket's copies
  std::size_t index = 0;
  for (const Bucket& bucket : buckets) {
    Task c;
    c.kind = TaskKind::collective;
    c.stream = Stream::comm;
    c.collective = spec_.zero_stage == 0 ? CollectiveKind::all_reduce : CollectiveKind::reduce_scatter;
    c.bytes = bucket.bytes;
    // With DeepSpeed's contiguous reduction bucket (stages 2 and 3) each gradient is copied into
    // the bucket by its hook and its own storage freed at once (stage3.py@v0.13.3
    // __add_grad_to_ipg_bucket: `new_grad_tensor.copy_(param.grad)`, `param.grad.data =
    // new_grad_tensor`; stage_1_and_2.py's reduce_independent_p_g_buckets_and_remove_grads
    // likewise): the reduction reads the bucket, not the gradients.
    if (!reduction_bucket) c.uses = bucket.gradients;
    if (bucket_copy) c.uses.push_back(*bucket_copy);
    if (reduction_bucket) c.uses.push_back(*reduction_bucket);
    // (qgZ reduces each vector alone and quantizes the matrices: no concatenation.)
    const std::optional<BufferId> flat = quantizes_gradients() ? std::nullopt : coalesced_reduce_scatter_input(bucket, index);
    if (flat) c.creates.push_back(*flat);
    // Stage 1 reduces after the whole backward pass (DeepSpeed's reduce_gradients at the end of
    // backward when gradients are not partitioned); the others as soon as the bucket is ready.
    // Stage 1 with overlap_comm reduces each bucket once its gradients are final too: DeepSpeed
    // installs its backward hooks when overlap_comm is set (stage_1_and_2.py, "if
    // self.partition_gradients or self.overlap_comm"), and Megatron-LM's --overlap-grad-reduce
    // launches a bucket's reduce-scatter from the backward post-hook of its last gradient in the
    // last micro-batch (NVIDIA/Megatron-LM@d98e8a64 megatron/core/distributed/
    // param_and_grad_buffer.py:863-883, register_grad_ready: only when is_last_microbatch;
    // distributed_data_parallel.py:553-583, the post-hook). Schedules come here with the
    // micro-steps already repeated (transform_schedule, ZeRO-1 reduces once per step), so the
    // last backward op writing a gradient is the last micro-step's.
    const TaskId ready = spec_.zero_stage == 1 && !spec_.overlap_comm ? last_backward_ : bucket.ready;
    c.after = {ready};
    if (bucket_copy) {
      if (const auto copy_in = ddp_copy_in(bucket, *bucket_copy, ready, index)) c.after = {*copy_in};
    }
    c.name = task_name(spec_.zero_stage == 0 ? "all-reduce of gradient bucket" : "reduce-scatter of gradient bucket", index, bucket.bytes);
    // The experts' gradients are reduced over the ranks that hold the same experts.
    if (bucket.expert && expert_split()) {
      c.over = traces::ParallelGroup::expert_data;
      c.name = "expert " + c.name;
    }
    if (spec_.zero_stage == 0 && spec_.comm_hook == DdpCommHook::powersgd) {
      last_reduction = power_sgd_bucket(bucket, c, ready, index++);
      continue;
    }
    if (quantizes_gradients()) {
      last_reduction = quantized_gradient_reduction(bucket, std::move(c), ready, index++);
      continue;
    }
    std::optional<Task> copy_back;
    if (spec_.zero_stage == 0 && spec_.comm_hook != DdpCommHook::none) copy_back = compress_bucket(bucket, c, ready, index);
    ++index;
    if (spec_.compression) {
      const auto element_size = static_cast<int>(traces::element_size(trace_.tensor(*s_.buffers[bucket.gradients.front()].tensor).dtype));
      last_reduction = compressed_collective(std::move(c), element_size, ready + 1);
    } else {
      last_reduction = add_task(std::move(c), ready + 1);
    }
    if (copy_back) {
      copy_back->after = {*last_reduction};
      last_reduction = add_task(std::move(*copy_back), ready + 1);
    }
    std::vector<TaskId> copies;
    if (spec_.offload_optimizer) copies = offload_gradients(bucket, *last_reduction, ready);
    if (spec_.zero_stage == 3 && spec_.offload_optimizer) order_on_reduce_stream(*last_reduction, copies, flat, previous_copies);
    // Without overlap_comm DeepSpeed reduces (and copies the reduced gradients to the host) on
    // the compute stream's side: the next kernel waits.
    if (spec_.zero_stage >= 1 && !spec_.overlap_comm) {
      if (const auto next = next_compute_after(ready)) {
        extra_after_[*next].push_back(*last_reduction);
        extra_after_[*next].insert(extra_after_[*next].end(), copies.begin(), copies.end());
      }
    }
  }
  if (last_reduction && first_optimizer_) extra_after_[*first_optimizer_].push_back(*last_reduction);
  if (bucket_copy && last_reduction && first_optimizer_) ddp_copy_out(*bucket_copy, *last_reduction, *first_optimizer_);

  if (spec_.zero_stage >= 1) shard_optimizer_tasks();
  // What the parameters' all-gather of stages 1 and 2 waits for: the optimizer's last task, or
  // the last copy of updated parameters from the host.
  std::optional<TaskId> step_end = last_optimizer_;
  if (spec_.offload_optimizer) step_end = step_on_the_host(last_reduction);
  if (spec_.zero_stage == 3) {
    // One rank gathers nothing: DeepSpeed points each parameter at its partition
    // (partition_parameters.py@v0.13.3 line 1163, all_gather_coalesced: num_partitions == 1).
    if (spec_.ranks > 1) gather_parameters();
  } else if (spec_.zero_stage >= 1 && last_optimizer_ && step_end && spec_.overlap_param_gather) {
    gather_parameters_before_forward();
  } else if (spec_.zero_stage >= 1 && last_optimizer_ && step_end) {
    // Stages 1 and 2 all-gather the updated parameters at the end of the step.
    // The experts' over their expert-data group, the others' over the data group.
    // FP8 weights (float8_parameter_gather) in a gather of their own, one byte an element.
    std::int64_t expert_bytes = 0, dense_bytes = 0, fp8_expert_bytes = 0, fp8_dense_bytes = 0;
    for (BufferId w : weights_) {
      const bool expert = expert_split() && is_expert_buffer(w);
      const bool fp8 = gathered_in_fp8(w);
      (expert ? (fp8 ? fp8_expert_bytes : expert_bytes) : (fp8 ? fp8_dense_bytes : dense_bytes)) += gathered_bytes(w);
    }
    for (const auto& [expert, fp8] : {std::pair{false, true}, std::pair{false, false}, std::pair{true, true}, std::pair{true, false}}) {
      const std::int64_t weight_bytes = expert ? (fp8 ? fp8_expert_bytes : expert_bytes) : (fp8 ? fp8_dense_bytes : dense_bytes);
      if (weight_bytes <= 0) continue;
      Task c;
      c.kind = TaskKind::collective;
      c.stream = Stream::comm;
      c.collective = CollectiveKind::all_gather;
      c.bytes = weight_bytes;
      c.after = {*step_end};
      c.name = task_name(expert ? (fp8 ? "all-gather of the updated FP8 expert parameters" : "all-gather of the updated expert parameters")
                                : (fp8 ? "all-gather of the updated FP8 parameters" : "all-gather of the updated parameters"),
                         0, weight_bytes);
      if (expert) c.over = traces::ParallelGroup::expert_data;
      if (spec_.compression) {
        compressed_collective(std::move(c), weight_element_size(), *last_optimizer_ + 1);
      } else {
        add_task(std::move(c), *last_optimizer_ + 1);
      }
    }
  }

  redirect_all();
  assemble();
  return step_begin();
}

// The position of the optimizer step's first task after assemble: the first optimizer task
// kept, or the first task added for the step on the host (step_on_the_host adds them all just
// before where the optimizer was, after the backward pass's reductions and copies).
std::optional<TaskId> Transform::step_begin() const {
  std::optional<TaskId> begin;
  const auto consider = [&](TaskId id) {
    if (const auto p = new_position(id)) begin = std::min(begin.value_or(*p), *p);
  };
  // The old tasks have moved: the first optimizer task by its old id (none if removed: the step
  // on the host replaced it).
  if (first_optimizer_) consider(*first_optimizer_);
  if (step_added_) {
    for (std::size_t i = step_added_->first; i < step_added_->second; ++i) consider(n_ + i);
  }
  return begin;
}

// Every old task reads and writes the buffers that replace the old ones: partitions, gathered
// copies (per pass), what the optimizer reads.
void Transform::redirect_all() {
  for (TaskId t = 0; t < n_; ++t) {
    Task& task = s_.tasks[t];
    const Phase pass = pass_of(task, trace_);
    const bool optimizer = task.op && pass == Phase::optimizer;
    redirect(
        task,
        [&](BufferId b) {
          if (b >= old_buffers_) return b;
          if (optimizer) {
            if (auto it = optimizer_substitute_.find(b); it != optimizer_substitute_.end()) return it->second;
          } else if (auto it = gathered_.find({static_cast<int>(pass), b}); it != gathered_.end()) {
            return it->second;
          }
          return substitute_[b] == kKeep ? b : substitute_[b];
        },
        s_.buffers);
  }
}

std::set<traces::TensorIndex> Transform::float8_weights(const Float8Scope& scope) const {
  std::set<traces::TensorIndex> weights;
  for (const traces::Op& op : trace_.ops()) {
    if (op.phase != Phase::forward || !in_float8_scope(scope, op)) continue;
    for (const traces::TensorIndex i : op.inputs) {
      if (trace_.tensor(i).role == traces::TensorRole::weight && trace_.tensor(i).shape.size() >= 2) weights.insert(i);
    }
  }
  return weights;
}

bool Transform::gathered_in_fp8(BufferId w) const {
  return s_.buffers[w].tensor && fp8_gathered_weights_.contains(*s_.buffers[w].tensor);
}

std::int64_t Transform::gathered_bytes(BufferId w) const {
  return gathered_in_fp8(w) ? trace_.tensor(*s_.buffers[w].tensor).elements() : s_.buffers[w].bytes;
}

// The weight gradients (held to the end of the iteration: what the optimizer reads), the
// parameters, the optimizer's tasks and the last backward task.
void Transform::find_pass_bounds() {
  for (BufferId b = 0; b < old_buffers_; ++b) {
    const Buffer& buffer = s_.buffers[b];
    if (!buffer.tensor) continue;
    if (buffer.role == MemoryRole::gradient && (buffer.held_to_end || buffer.resident)) gradients_.push_back(b);
    if (buffer.role == MemoryRole::weight && buffer.resident) weights_.push_back(b);
  }
  if (spec_.float8_parameter_gather) fp8_gathered_weights_ = float8_weights(*spec_.float8_parameter_gather);
  for (TaskId t = 0; t < n_; ++t) {
    const Task& task = s_.tasks[t];
    const Phase pass = pass_of(task, trace_);
    if (task.op && pass == Phase::optimizer) {
      if (!first_optimizer_) first_optimizer_ = t;
      last_optimizer_ = t;
    } else if (task.op && pass == Phase::backward && task.stream == Stream::compute) {
      last_backward_ = t;
    }
  }
}

// The gradients in the order they become ready, each with the last backward op that writes it
// (gradients no backward op writes are left out: nothing reduces them).
std::vector<std::pair<TaskId, BufferId>> Transform::ready_gradients() const {
  std::vector<std::optional<TaskId>> last(old_buffers_);
  for (TaskId t = 0; t < n_; ++t) {
    const Task& task = s_.tasks[t];
    if (task.kind != TaskKind::op || pass_of(task, trace_) != Phase::backward) continue;
    for (BufferId b : task.creates) last[b] = t;
    for (BufferId b : task.uses) last[b] = t;
  }
  std::vector<std::pair<TaskId, BufferId>> ready;
  for (BufferId g : gradients_) {
    if (last[g]) ready.emplace_back(*last[g], g);
  }
  std::stable_sort(ready.begin(), ready.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return ready;
}

}  // namespace comptrain::models::transform_detail

namespace comptrain::models {

std::optional<Float8Scope> float8_parameter_gather_for(const DataParallelSpec& spec, const std::optional<Float8Scope>& float8) {
  if (!float8 || !float8->fp8_weights || spec.zero_stage < 1 || spec.zero_stage > 2 || spec.fsdp || spec.compression) return std::nullopt;
  return float8;
}

using transform_detail::Transform;

std::string optimizer_place(const std::optional<OptimizerOffloadSpec>& offload) {
  if (!offload) return "GPU";
  if (offload->prefetch_optimizer) return "DOS k=" + std::to_string(offload->prefetch_optimizer_gap);
  if (offload->ratio < 1) return "CPU " + std::to_string(static_cast<int>(std::lround(100 * offload->ratio))) + "%";
  return "CPU";
}

bool is_expert_parameter(std::string_view tensor_name) { return tensor_name.find(".experts.") != std::string_view::npos; }

void check_data_parallel(const DataParallelSpec& spec) {
  if (spec.ranks < 1) throw std::invalid_argument("data parallel: ranks must be at least 1");
  if (spec.expert_ranks < 0 || (spec.expert_ranks > 0 && spec.ranks % spec.expert_ranks != 0)) {
    throw std::invalid_argument("data parallel: expert_ranks must be 0 or divide the ranks (" + std::to_string(spec.ranks) + ")");
  }
  if (spec.expert_ranks > 0 && spec.expert_ranks != spec.ranks && (spec.zero_stage > 1 || spec.offload_optimizer || spec.fsdp)) {
    throw std::invalid_argument("data parallel: expert parameters over an expert-data group smaller than the data group are modelled with "
                                "zero_stage 0 or 1 only, without an offloaded optimizer or FSDP");
  }
  if (spec.zero_stage < 0 || spec.zero_stage > 3) throw std::invalid_argument("data parallel: zero_stage must be 0, 1, 2 or 3");
  if (spec.bucket_cap_bytes < 1 || spec.first_bucket_bytes < 1) throw std::invalid_argument("data parallel: bucket sizes must be positive");
  if (spec.reduce_bucket_elements < 1) throw std::invalid_argument("data parallel: reduce_bucket_elements must be positive");
  if (spec.sub_group_elements < 1) throw std::invalid_argument("data parallel: sub_group_elements must be positive");
  if (spec.hpz_partition_size < 1 || spec.ranks % spec.hpz_partition_size != 0) {
    throw std::invalid_argument("data parallel: hpz_partition_size must be at least 1 and divide the ranks (" + std::to_string(spec.ranks) + ")");
  }
  if ((spec.hpz_partition_size > 1 || spec.quantized_weights) && (spec.zero_stage != 3 || spec.fsdp)) {
    throw std::invalid_argument("data parallel: ZeRO++'s hpz_partition_size and quantized_weights need DeepSpeed's zero_stage 3");
  }
  if (spec.grad_reduce_in_fp32 && (spec.zero_stage > 1 || spec.fsdp || spec.comm_hook != DdpCommHook::none || spec.compression)) {
    throw std::invalid_argument("data parallel: grad_reduce_in_fp32 (Megatron-LM's fp32 gradient buffer) needs DDP or ZeRO-1 without FSDP, a comm_hook "
                                "or compressed collectives");
  }
  if (spec.quantized_gradients) {
    if (spec.zero_stage != 3 || spec.fsdp) throw std::invalid_argument("data parallel: ZeRO++'s quantized_gradients need DeepSpeed's zero_stage 3");
    if (spec.ranks_per_node < 1 || spec.ranks % spec.ranks_per_node != 0) {
      throw std::invalid_argument("data parallel: quantized_gradients need ranks_per_node at least 1 and dividing the ranks (" + std::to_string(spec.ranks) + ")");
    }
  }
  if (spec.overlap_param_gather && (spec.zero_stage < 1 || spec.zero_stage > 2 || spec.offload_optimizer || spec.fsdp)) {
    throw std::invalid_argument("data parallel: overlap_param_gather needs ZeRO stage 1 or 2 with the optimizer on the GPU");
  }
  if (spec.float8_parameter_gather && (spec.zero_stage < 1 || spec.zero_stage > 2 || spec.fsdp || spec.compression)) {
    throw std::invalid_argument("data parallel: float8_parameter_gather needs ZeRO stage 1 or 2 without compressed collectives");
  }
  if (spec.compression) {
    check_collective_compression(*spec.compression);
    if (spec.compression->all_reduce == CompressedAllReduce::recursive_doubling && spec.zero_stage != 0) {
      throw std::invalid_argument("data parallel: compressed all-reduces by recursive doubling need zero_stage 0 (PyTorch DDP all-reduces; ZeRO "
                                  "reduce-scatters and gathers on a ring)");
    }
    if (spec.comm_hook != DdpCommHook::none || spec.quantized_weights || spec.quantized_gradients || spec.fsdp) {
      throw std::invalid_argument("data parallel: compressed collectives are modelled without a DDP comm_hook, ZeRO++'s quantized_weights and "
                                  "quantized_gradients and FSDP");
    }
  }
  if (spec.comm_hook != DdpCommHook::none && spec.zero_stage != 0) {
    throw std::invalid_argument("data parallel: a DDP comm_hook needs zero_stage 0 (PyTorch DDP)");
  }
  if (spec.powersgd.rank < 1 || !(spec.powersgd.min_compression_rate >= 0) || !std::isfinite(spec.powersgd.min_compression_rate)) {
    throw std::invalid_argument("data parallel: PowerSGD's rank must be at least 1 and its min_compression_rate finite and not negative");
  }
  if (const auto& fsdp = spec.fsdp) {
    if (spec.zero_stage != 3) throw std::invalid_argument("data parallel: fsdp needs zero_stage 3 (FSDP2 shards parameters, gradients and optimizer state)");
    if (spec.offload_optimizer) throw std::invalid_argument("data parallel: fsdp with offload_optimizer is not modelled");
    if (fsdp->replicate < 1 || spec.ranks % fsdp->replicate != 0) {
      throw std::invalid_argument("data parallel: fsdp replicate must be at least 1 and divide the ranks (" + std::to_string(spec.ranks) + ")");
    }
    if (fsdp->sharded_parameter_bytes < 1 || fsdp->sharded_parameter_bytes > 8 || fsdp->reduce_bytes < 0 || fsdp->reduce_bytes > 8) {
      throw std::invalid_argument("data parallel: fsdp element sizes must be 1 to 8 bytes (reduce_bytes 0: the gradients' own)");
    }
    for (const std::string& pattern : fsdp->units) {
      try {
        validate_module_pattern(pattern);
      } catch (const InputError& e) {
        throw std::invalid_argument(std::string("data parallel: fsdp units: ") + e.what());
      }
    }
  }
  if (const auto& offload = spec.offload_optimizer) {
    if (spec.zero_stage < 1) throw std::invalid_argument("data parallel: offload_optimizer needs ZeRO (stage 1, 2 or 3)");
    if (!(offload->ratio >= 0 && offload->ratio <= 1)) throw std::invalid_argument("data parallel: offload_optimizer.ratio must be in [0, 1]");
    if (offload->ratio < 1 && spec.zero_stage != 3) throw std::invalid_argument("data parallel: offload_optimizer.ratio below 1 needs ZeRO stage 3");
    if (offload->prefetch_optimizer) {
      if (spec.zero_stage != 3) throw std::invalid_argument("data parallel: prefetch_optimizer needs ZeRO stage 3");
      if (offload->ratio != 1) throw std::invalid_argument("data parallel: prefetch_optimizer needs offload_optimizer.ratio 1");
      if (offload->prefetch_optimizer_gap < 1) throw std::invalid_argument("data parallel: prefetch_optimizer_gap must be at least 1");
    }
    if (offload->part_grads_async && spec.zero_stage != 3) throw std::invalid_argument("data parallel: part_grads_async needs ZeRO stage 3");
  }
}

bool reduces_every_micro_step(const DataParallelSpec& spec) { return spec.fsdp || spec.zero_stage >= 2; }

double cpu_adam_seconds(std::int64_t parameters, const HostSpec& host) {
  if (!(host.flops > 0) || !(host.memory_bandwidth > 0)) {
    throw std::invalid_argument("cpu_adam_seconds: the host '" + host.name + "' needs positive flops and memory_bandwidth");
  }
  const auto n = static_cast<double>(parameters);
  return std::max(n * kCpuAdamFlopsPerParameter / host.flops, n * kCpuAdamBytesPerParameter / host.memory_bandwidth);
}

std::optional<TaskId> apply_data_parallel(Schedule& schedule, const traces::Trace& trace, const DataParallelSpec& spec) {
  check_data_parallel(spec);
  if (spec.offload_optimizer) throw std::invalid_argument("data parallel: an offloaded optimizer needs the platform (its host steps it)");
  if (spec.fsdp && spec.fsdp->cpu_offload) throw std::invalid_argument("data parallel: fsdp's cpu_offload needs the platform (its host steps the optimizer)");
  if (spec.ranks == 1) return std::nullopt;
  return Transform(schedule, trace, spec, nullptr).run();
}

std::optional<TaskId> apply_data_parallel(Schedule& schedule, const traces::Trace& trace, const DataParallelSpec& spec, const Platform& platform) {
  check_data_parallel(spec);
  // One GPU without an offloaded optimizer trains under ZeRO or FSDP2 as without data
  // parallelism (nothing to partition); with one, ZeRO's offload changes the schedule on one GPU
  // too, and FSDP2's CPU offload (the shards live on the host whatever the ranks). PyTorch's DDP
  // over a world of one still runs its reducer: each gradient copied into its bucket and back
  // around NCCL's one-rank all-reduce, which moves nothing (pytorch/pytorch's DDP benchmark
  // measures it: benchmarks/distributed/ddp/README.md, '1 GPUs -- 1M/1G' against 'no ddp').
  const bool fsdp_offload = spec.fsdp && spec.fsdp->cpu_offload;
  const bool ddp = spec.zero_stage == 0 && !spec.fsdp;
  if (spec.ranks == 1 && !spec.offload_optimizer && !fsdp_offload && !ddp) return std::nullopt;
  if (spec.offload_optimizer || fsdp_offload) cpu_adam_seconds(0, platform.host);  // the host must have rates
  return Transform(schedule, trace, spec, &platform).run();
}

}  // namespace comptrain::models

namespace comptrain::models {

std::string_view to_string(DdpCommHook hook) {
  switch (hook) {
    case DdpCommHook::none: return "none";
    case DdpCommHook::fp16: return "fp16";
    case DdpCommHook::bf16: return "bf16";
    case DdpCommHook::powersgd: return "powersgd";
  }
  return "none";
}

}  // namespace comptrain::models

#include "comptrain/models/data_parallel.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "comptrain/models/module_pattern.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::models {
namespace {

using traces::Phase;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Which pass a task belongs to, for the parameters it needs: a replayed forward op runs in the
// backward pass; copies and codec kernels touch no parameter (their phase does not matter).
Phase pass_of(const Task& task, const traces::Trace& trace) {
  if (task.kind == TaskKind::recompute) return Phase::backward;
  if (task.op) return trace.op(*task.op).phase;
  return Phase::backward;
}

// Replaces every reference to a buffer by `resolve(b)`, keeping each buffer once per list. A
// resident replacement is never created: a creation becomes a use.
template <typename Resolve>
void redirect(Task& task, Resolve resolve, const std::vector<Buffer>& buffers) {
  std::vector<BufferId> creates;
  std::vector<BufferId> uses;
  for (BufferId b : task.creates) {
    const BufferId r = resolve(b);
    (buffers[r].resident ? uses : creates).push_back(r);
  }
  for (BufferId b : task.uses) uses.push_back(resolve(b));
  auto unique = [](std::vector<BufferId>& v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  };
  unique(creates);
  unique(uses);
  uses.erase(std::remove_if(uses.begin(), uses.end(), [&](BufferId b) { return std::binary_search(creates.begin(), creates.end(), b); }),
             uses.end());
  task.creates = std::move(creates);
  task.uses = std::move(uses);
}

// A task to insert, referring to old tasks by index (< n) and to other added tasks by n + index.
struct Added {
  Task task;
  TaskId before = 0;  // inserted just before old task `before` (n: at the end)
};

class Transform {
 public:
  Transform(Schedule& schedule, const traces::Trace& trace, const DataParallelSpec& spec, const Platform* platform)
      : s_(schedule),
        trace_(trace),
        spec_(spec),
        platform_(platform),
        n_(schedule.tasks.size()),
        old_buffers_(schedule.buffers.size()),
        removed_(schedule.tasks.size(), false) {}

  void run() {
    find_pass_bounds();
    if (spec_.fsdp) {
      run_fsdp();
      return;
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
      // Stage 1 reduces after the whole backward pass (DeepSpeed's reduce_gradients at the end of
      // backward when gradients are not partitioned); the others as soon as the bucket is ready.
      const TaskId ready = spec_.zero_stage == 1 ? last_backward_ : bucket.ready;
      c.after = {ready};
      c.name = task_name(spec_.zero_stage == 0 ? "all-reduce of gradient bucket" : "reduce-scatter of gradient bucket", index++, bucket.bytes);
      last_reduction = add_task(std::move(c), ready + 1);
      std::vector<TaskId> copies;
      if (spec_.offload_optimizer) copies = offload_gradients(bucket, *last_reduction, ready);
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

    if (spec_.zero_stage >= 1) shard_optimizer_tasks();
    // What the parameters' all-gather of stages 1 and 2 waits for: the optimizer's last task, or
    // the last copy of updated parameters from the host.
    std::optional<TaskId> step_end = last_optimizer_;
    if (spec_.offload_optimizer) step_end = step_on_the_host(last_reduction);
    if (spec_.zero_stage == 3) {
      // One rank gathers nothing: DeepSpeed points each parameter at its partition
      // (partition_parameters.py@v0.13.3 line 1163, all_gather_coalesced: num_partitions == 1).
      if (spec_.ranks > 1) gather_parameters();
    } else if (spec_.zero_stage >= 1 && last_optimizer_ && step_end) {
      // Stages 1 and 2 all-gather the updated parameters at the end of the step.
      if (const std::int64_t weight_bytes = sum_bytes(weights_); weight_bytes > 0) {
        Task c;
        c.kind = TaskKind::collective;
        c.stream = Stream::comm;
        c.collective = CollectiveKind::all_gather;
        c.bytes = weight_bytes;
        c.after = {*step_end};
        c.name = task_name("all-gather of the updated parameters", 0, weight_bytes);
        add_task(std::move(c), *last_optimizer_ + 1);
      }
    }

    redirect_all();
    assemble();
  }

 private:
  static constexpr BufferId kKeep = static_cast<BufferId>(-1);

  struct Bucket {
    std::vector<BufferId> gradients;
    std::int64_t bytes = 0;
    TaskId ready = 0;
  };

  static std::string task_name(const char* what, std::size_t index, std::int64_t bytes) {
    return std::string(what) + " " + std::to_string(index) + " (" + std::to_string(bytes) + " B)";
  }
  std::string partition_name(const char* what) const { return std::string(what) + " (1/" + std::to_string(spec_.ranks) + ")"; }

  // Every old task reads and writes the buffers that replace the old ones: partitions, gathered
  // copies (per pass), what the optimizer reads.
  void redirect_all() {
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

  std::int64_t sum_bytes(const std::vector<BufferId>& buffers) const {
    std::int64_t total = 0;
    for (BufferId b : buffers) total += s_.buffers[b].bytes;
    return total;
  }

  BufferId add_buffer(std::string name, std::int64_t bytes, MemoryRole role, bool resident = true) {
    Buffer b;
    b.name = std::move(name);
    b.bytes = bytes;
    b.role = role;
    b.resident = resident;
    s_.buffers.push_back(std::move(b));
    return s_.buffers.size() - 1;
  }

  TaskId add_task(Task task, TaskId before) {
    added_.push_back({std::move(task), before});
    return n_ + added_.size() - 1;
  }

  // The weight gradients (held to the end of the iteration: what the optimizer reads), the
  // parameters, the optimizer's tasks and the last backward task.
  void find_pass_bounds() {
    for (BufferId b = 0; b < old_buffers_; ++b) {
      const Buffer& buffer = s_.buffers[b];
      if (!buffer.tensor) continue;
      if (buffer.role == MemoryRole::gradient && (buffer.held_to_end || buffer.resident)) gradients_.push_back(b);
      if (buffer.role == MemoryRole::weight && buffer.resident) weights_.push_back(b);
    }
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
  std::vector<std::pair<TaskId, BufferId>> ready_gradients() const {
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

  // Buckets in the order the gradients become ready: the last backward op that writes each.
  std::vector<Bucket> make_buckets() const {
    const std::vector<std::pair<TaskId, BufferId>> ready = ready_gradients();
    // One open bucket per dtype (DDP's compute_bucket_assignment_by_size keeps dtypes apart);
    // each closes once it holds at least its cap.
    std::map<traces::DType, Bucket> open;
    std::map<traces::DType, int> closed_count;
    std::vector<Bucket> buckets;
    for (const auto& [t, g] : ready) {
      const auto& tensor = trace_.tensor(*s_.buffers[g].tensor);
      Bucket& bucket = open[tensor.dtype];
      bucket.gradients.push_back(g);
      bucket.bytes += s_.buffers[g].bytes;
      bucket.ready = std::max(bucket.ready, t);
      const std::int64_t cap = spec_.zero_stage == 0
                                   ? (closed_count[tensor.dtype] == 0 ? spec_.first_bucket_bytes : spec_.bucket_cap_bytes)
                                   : spec_.reduce_bucket_elements * static_cast<std::int64_t>(traces::element_size(tensor.dtype));
      if (bucket.bytes >= cap) {
        buckets.push_back(std::move(bucket));
        open.erase(tensor.dtype);
        ++closed_count[tensor.dtype];
      }
    }
    for (auto& [dtype, bucket] : open) buckets.push_back(std::move(bucket));
    std::stable_sort(buckets.begin(), buckets.end(), [](const Bucket& a, const Bucket& b) { return a.ready < b.ready; });
    return buckets;
  }

  std::optional<TaskId> next_compute_after(TaskId t) const {
    for (TaskId u = t + 1; u < n_; ++u) {
      if (s_.tasks[u].stream == Stream::compute) return u;
    }
    return std::nullopt;
  }

  // The optimizer state becomes one resident partition of 1/ranks of its bytes.
  void partition_optimizer_state() {
    std::vector<BufferId> members;
    for (BufferId b = 0; b < old_buffers_; ++b) {
      if (s_.buffers[b].role == MemoryRole::optimizer_state && s_.buffers[b].resident) members.push_back(b);
    }
    if (members.empty()) return;
    if (spec_.offload_optimizer) {
      // The fp32 state is the host's, but for Twin-Flow's GPU subgroups (DeepSpeed's fp32
      // master, exp_avg and exp_avg_sq of those subgroups stay on the GPU). The optimizer's tasks,
      // the only readers, are replaced by the step on the host (step_on_the_host).
      for (BufferId b : members) s_.buffers[b].resident = false;
      if (resident_elements_ > 0) {
        add_buffer(partition_name("fp32 optimizer state of the subgroups stepped on the GPU"), kFp32AdamStateBytesPerParameter * resident_elements_,
                   MemoryRole::optimizer_state);
      }
      return;
    }
    const BufferId part = add_buffer(partition_name("optimizer state partition"), ceil_div(sum_bytes(members), spec_.ranks), MemoryRole::optimizer_state);
    for (BufferId b : members) {
      substitute_[b] = part;
      s_.buffers[b].resident = false;  // no longer referenced: never allocated
    }
  }

  // ZeRO-3: the parameters become one resident partition; the passes read gathered copies
  // (gather_parameters), the optimizer the partition.
  void partition_parameters() {
    if (weights_.empty()) return;
    parameter_partition_ = add_buffer(partition_name("parameter partition"), ceil_div(sum_bytes(weights_), spec_.ranks), MemoryRole::weight);
    for (BufferId w : weights_) {
      substitute_[w] = *parameter_partition_;
      optimizer_substitute_[w] = *parameter_partition_;
      s_.buffers[w].resident = false;
    }
  }

  // ---- Optimizer offload (models/parallel/README.md, "Optimizer offload") ----------------------

  // Subgroups of whole parameters in the model's order, which is the reverse of the order in
  // which the backward pass makes their gradients ready (autograd runs the layers backwards):
  // ZeRO-3 closes a subgroup once it holds sub_group_size elements of this rank's partition
  // (stage3.py@38327e07 _create_fp16_sub_groups, lines 946-966); stages 1 and 2 step each rank's
  // partition at once (stage_1_and_2.py: one fp32 partition per parameter group). Then where each
  // is stepped: Twin-Flow's first int(ratio x subgroups) on the CPU and the rest on the GPU
  // (stage3.py@38327e07 lines 851-858); Deep Optimizer States' rule (the fork's
  // get_opt_update_device): x % k == 0 on the CPU (it starts the transfers), else (x + 1) % k ==
  // 0 on the GPU, else on the CPU.
  void make_subgroups() {
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
  std::vector<TaskId> offload_gradients(const Bucket& bucket, TaskId reduction, TaskId ready) {
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
      const TaskId out = add_task(copy(TaskKind::offload, "gradient partition to the host buffer: " + what, half_bytes, reduction), ready + 1);
      Task back = copy(TaskKind::prefetch, "gradient partition back on the GPU: " + what, half_bytes, out);
      const BufferId on_gpu = add_buffer(what + " (partition back on the GPU)", half_bytes, MemoryRole::temporary, false);
      back.creates = {on_gpu};
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
  // the CPU subgroups (issued without blocking before each GPU subgroup) at each x % k == 0.
  // Returns the last copy of parameters to the GPU (what stages 1 and 2 all-gather after).
  std::optional<TaskId> step_on_the_host(std::optional<TaskId> last_reduction) {
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
        sg.state = add_buffer("fp32 parameters, momentum and variance of optimizer subgroup " + std::to_string(x) + " on the GPU", c.bytes,
                              MemoryRole::optimizer_state, false);
        sg.fp32_gradient = add_buffer("fp32 gradients of optimizer subgroup " + std::to_string(x) + " on the GPU",
                                      kFp32GradientBytes * sg.elements, MemoryRole::gradient, false);
        c.creates = {*sg.state, *sg.fp32_gradient};
        if (sg.kept) c.uses = {*sg.kept};
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
    // The fork leaves the last GPU subgroup's state and the parameters of the CPU subgroups after
    // it for a later step; here they complete this one.
    if (state_on_gpu != kNoSubgroup) state_copy(state_on_gpu, false, {*subgroups_[state_on_gpu].gpu_step});
    flush_later();
    return last_parameters;
  }

  // The step's kernels run over this rank's partition: 1/ranks of the elements, so of the time
  // and of the temporaries they make.
  void shard_optimizer_tasks() {
    for (TaskId t = 0; t < n_; ++t) {
      Task& task = s_.tasks[t];
      if (!task.op || pass_of(task, trace_) != Phase::optimizer) continue;
      task.seconds /= spec_.ranks;
      for (BufferId b : task.creates) {
        Buffer& buffer = s_.buffers[b];
        if (!buffer.resident && buffer.role == MemoryRole::temporary) buffer.bytes = ceil_div(buffer.bytes, spec_.ranks);
      }
    }
  }

  // ZeRO-3: each pass all-gathers an op's parameters before the op, into buffers that live
  // until the pass's last use of them. The gather of the k-th group waits for the end of the
  // first op of group k-2, so one group is fetched while the previous one computes (DeepSpeed
  // prefetches the modules about to run; one op of look-ahead is this model's simplification).
  void gather_parameters() {
    if (!parameter_partition_) return;
    std::vector<bool> is_weight(old_buffers_, false);
    for (BufferId w : weights_) is_weight[w] = true;
    struct Group {
      TaskId first_user = 0;
      std::vector<BufferId> buffers;
      std::int64_t bytes = 0;
      Phase pass = Phase::forward;
    };
    std::vector<Group> groups;
    for (TaskId t = 0; t < n_; ++t) {
      const Task& task = s_.tasks[t];
      const Phase pass = pass_of(task, trace_);
      if (!task.op || pass == Phase::optimizer) continue;
      Group group;
      group.first_user = t;
      group.pass = pass;
      for (BufferId b : task.uses) {
        if (b >= old_buffers_ || !is_weight[b]) continue;
        const auto key = std::make_pair(static_cast<int>(pass), b);
        if (gathered_.count(key) != 0) continue;
        Buffer full = s_.buffers[b];
        full.name += pass == Phase::forward ? " (gathered for forward)" : " (gathered for backward)";
        full.resident = false;
        full.held_to_end = false;
        group.bytes += full.bytes;
        s_.buffers.push_back(std::move(full));
        gathered_[key] = s_.buffers.size() - 1;
        group.buffers.push_back(s_.buffers.size() - 1);
      }
      if (!group.buffers.empty()) groups.push_back(std::move(group));
    }
    for (std::size_t k = 0; k < groups.size(); ++k) {
      const Group& group = groups[k];
      Task c;
      c.kind = TaskKind::collective;
      c.stream = Stream::comm;
      c.collective = CollectiveKind::all_gather;
      c.bytes = group.bytes;
      c.creates = group.buffers;
      c.uses = {*parameter_partition_};
      TaskId before = 0;
      if (k >= 2) {
        c.after = {groups[k - 2].first_user};
        before = groups[k - 2].first_user + 1;
      }
      c.name = task_name(group.pass == Phase::forward ? "all-gather of parameters for forward" : "all-gather of parameters for backward", k,
                         group.bytes);
      extra_after_[group.first_user].push_back(add_task(std::move(c), before));
    }
  }

  // ---- FSDP2 (models/parallel/README.md, "FSDP2") -----------------------------------------
  // Sources: pytorch/pytorch's torch/distributed/_composable/fsdp (the December 2024 code,
  // PyTorch 2.6: _fsdp_state.py, _fsdp_param_group.py, _fsdp_collectives.py, _fsdp_param.py).

  // One fully_shard parameter group.
  struct Unit {
    std::string name;  // the module instance; empty for the root
    std::vector<BufferId> weights;
    std::vector<BufferId> gradients;
    std::int64_t padded_elements = 0;  // its parameters, each padded in dim 0 to a multiple of ranks
    std::int64_t sharded_elements = 0;  // this rank's share: padded_elements / ranks
    std::int64_t unsharded_bytes = 0;   // padded_elements in the weights' dtype
    bool reshard_after_forward = true;
    // The old tasks of each pass that read its parameters, and its last backward task (its
    // post-backward: the last that reads its parameters or writes its gradients).
    std::optional<TaskId> first_forward, last_forward, first_backward, last_backward;
  };

  // The task after which a group's post-backward runs: its last backward task, the root's at the
  // end of the backward pass (the root's post-backward runs in _root_post_backward_final_callback).
  TaskId post_backward(const Unit& unit) const {
    return unit.name.empty() ? std::max(last_backward_, unit.last_backward.value_or(last_backward_)) : unit.last_backward.value_or(last_backward_);
  }

  // FSDPParam pads a parameter's dim 0 to a multiple of the world size (_get_dim0_padded_size).
  std::int64_t padded_elements(const traces::Tensor& t) const {
    if (t.shape.empty()) return ceil_div(std::max<std::int64_t>(t.elements(), 1), spec_.ranks) * spec_.ranks;
    const std::int64_t dim0 = t.shape.front();
    const std::int64_t rest = dim0 > 0 ? t.elements() / dim0 : 0;
    return ceil_div(dim0, spec_.ranks) * spec_.ranks * rest;
  }

  void run_fsdp() {
    const FsdpSpec& f = *spec_.fsdp;
    substitute_.assign(old_buffers_, kKeep);
    // The groups: one per module instance of `units`, the root's for every other parameter.
    std::vector<Unit> units;
    std::map<std::string, std::size_t> unit_index;
    const auto unit_of = [&](const std::string& name) {
      std::string instance;
      for (const std::string& pattern : f.units) {
        if (const auto i = module_pattern_instance(pattern, name)) {
          instance = std::string(*i);
          break;
        }
      }
      auto [it, added] = unit_index.emplace(instance, units.size());
      if (added) {
        Unit unit;
        unit.name = instance;
        units.push_back(std::move(unit));
      }
      return it->second;
    };
    std::map<BufferId, std::size_t> weight_unit;
    std::int64_t weight_elements = 0;
    std::int64_t weight_element_size = 0;
    for (BufferId w : weights_) {
      const auto& t = trace_.tensor(*s_.buffers[w].tensor);
      Unit& u = units[unit_of(t.name)];
      u.weights.push_back(w);
      const std::int64_t padded = padded_elements(t);
      u.padded_elements += padded;
      u.sharded_elements += padded / spec_.ranks;
      u.unsharded_bytes += padded * static_cast<std::int64_t>(traces::element_size(t.dtype));
      weight_unit[w] = unit_index.at(u.name);
      weight_elements += t.elements();
      weight_element_size = std::max<std::int64_t>(weight_element_size, traces::element_size(t.dtype));
    }
    std::map<BufferId, std::size_t> gradient_unit;
    for (BufferId g : gradients_) {
      const std::size_t u = unit_of(trace_.tensor(*s_.buffers[g].tensor).name);
      units[u].gradients.push_back(g);
      gradient_unit[g] = u;
    }
    // Which old tasks read each group's parameters, per pass; the post-backward also waits for
    // the group's gradients.
    for (TaskId t = 0; t < n_; ++t) {
      const Task& task = s_.tasks[t];
      const Phase pass = pass_of(task, trace_);
      if (!task.op || pass == Phase::optimizer) continue;
      const auto touch = [&](std::size_t u) {
        Unit& unit = units[u];
        if (pass == Phase::forward) {
          if (!unit.first_forward) unit.first_forward = t;
          unit.last_forward = t;
        } else {
          if (!unit.first_backward) unit.first_backward = t;
          unit.last_backward = t;
        }
      };
      for (const auto* list : {&task.uses, &task.creates}) {
        for (BufferId b : *list) {
          if (auto it = weight_unit.find(b); it != weight_unit.end()) touch(it->second);
          if (auto it = gradient_unit.find(b); it != gradient_unit.end() && pass == Phase::backward) {
            units[it->second].last_backward = std::max(units[it->second].last_backward.value_or(t), t);
          }
        }
      }
    }
    // reshard_after_forward: the root never (_lazy_init), the units as the spec says.
    std::optional<std::size_t> last_unit;  // the last non-root group in forward order
    for (std::size_t u = 0; u < units.size(); ++u) {
      if (units[u].name.empty() || !units[u].first_forward) continue;
      if (!last_unit || *units[*last_unit].first_forward < *units[u].first_forward) last_unit = u;
    }
    for (std::size_t u = 0; u < units.size(); ++u) {
      Unit& unit = units[u];
      unit.reshard_after_forward = !unit.name.empty() && (f.reshard_after_forward == FsdpSpec::Reshard::all ||
                                                          (f.reshard_after_forward == FsdpSpec::Reshard::all_but_last && u != last_unit));
    }

    // Model state: the sharded parameters in their original dtype (FSDPParam's _sharded_param_data,
    // allocated with the model, before the first iteration) and the optimizer state of this rank's
    // shards; under `mixed` precision the trace's optimizer state holds the fp32 masters of its
    // 16-bit weights, which are FSDP2's sharded parameters and so are not counted twice.
    std::int64_t sharded = 0;
    for (const Unit& unit : units) sharded += unit.sharded_elements;
    const BufferId sharded_parameters =
        add_buffer(partition_name("sharded parameters"), sharded * f.sharded_parameter_bytes, MemoryRole::weight);
    {
      std::vector<BufferId> members;
      for (BufferId b = 0; b < old_buffers_; ++b) {
        if (s_.buffers[b].role == MemoryRole::optimizer_state && s_.buffers[b].resident) members.push_back(b);
      }
      const std::int64_t state = sum_bytes(members);
      const std::int64_t masters = weight_element_size < f.sharded_parameter_bytes && state > 0 ? weight_elements * f.sharded_parameter_bytes : 0;
      if (masters > state) {
        throw std::invalid_argument("data parallel: fsdp keeps " + std::to_string(f.sharded_parameter_bytes) +
                                    "-byte sharded parameters of the trace's " + std::to_string(weight_element_size) +
                                    "-byte weights, whose masters the trace's optimizer state does not hold (" + std::to_string(state) + " B)");
      }
      if (!members.empty()) {
        const BufferId part = add_buffer(partition_name("optimizer state partition"), ceil_div(state - masters, spec_.ranks), MemoryRole::optimizer_state);
        for (BufferId b : members) {
          substitute_[b] = part;
          s_.buffers[b].resident = false;
        }
      }
    }
    for (BufferId w : weights_) {
      s_.buffers[w].resident = false;
      optimizer_substitute_[w] = sharded_parameters;
    }

    // The parameters each pass reads: per group, the unsharded parameters (allocated on the
    // compute stream by the copy-out, FSDPParam.alloc_all_gather_outputs) and the all-gather
    // buffer they are copied out of (foreach_all_gather allocates it on the all-gather copy-in
    // stream), with the copy-in's cast of the shards to param_dtype (FSDPParam.all_gather_inputs).
    struct Gathered {
      BufferId unsharded = 0;
      BufferId all_gather = 0;
      std::optional<BufferId> cast;
      TaskId collective = 0;  // as n + index into added_
    };
    const auto gathered_buffers = [&](const Unit& unit, const char* pass) {
      const std::string what = (unit.name.empty() ? std::string("root") : unit.name);
      Gathered g;
      g.unsharded = add_buffer(what + " parameters (unsharded for " + pass + ")", unit.unsharded_bytes, MemoryRole::weight, false);
      g.all_gather = add_buffer(what + " all-gather buffer (" + pass + ")", unit.unsharded_bytes, MemoryRole::weight, false);
      s_.buffers[g.all_gather].allocation_stream = AllocationStream::fsdp_all_gather;
      const std::int64_t element = unit.padded_elements > 0 ? unit.unsharded_bytes / unit.padded_elements : 0;
      if (element != f.sharded_parameter_bytes && unit.sharded_elements > 0) {
        g.cast = add_buffer(what + " shards cast for the all-gather (" + pass + ")", unit.sharded_elements * element, MemoryRole::temporary, false);
        s_.buffers[*g.cast].allocation_stream = AllocationStream::fsdp_all_gather;
      }
      for (BufferId w : unit.weights) {
        if (std::string_view(pass) == "forward") {
          gathered_[{static_cast<int>(Phase::forward), w}] = g.unsharded;
          if (!unit.reshard_after_forward) gathered_[{static_cast<int>(Phase::backward), w}] = g.unsharded;
        } else {
          gathered_[{static_cast<int>(Phase::backward), w}] = g.unsharded;
        }
      }
      return g;
    };
    const auto all_gather = [&](const Unit& unit, const Gathered& g, const char* pass, std::size_t index, TaskId before, std::vector<TaskId> after,
                                std::vector<BufferId> also_uses) {
      Task c;
      c.kind = TaskKind::collective;
      c.stream = Stream::comm;
      c.collective = CollectiveKind::all_gather;
      c.bytes = unit.unsharded_bytes;
      c.creates = {g.all_gather};
      if (g.cast) c.creates.push_back(*g.cast);
      c.uses = {sharded_parameters};
      c.uses.insert(c.uses.end(), also_uses.begin(), also_uses.end());
      c.after = std::move(after);
      c.name = task_name((std::string("FSDP all-gather for ") + pass + " of " + (unit.name.empty() ? "root" : unit.name)).c_str(), index, c.bytes);
      return add_task(std::move(c), before);
    };

    // Forward: each group gathered before its first forward task (pre_forward), the copy-out on
    // the compute stream; the previous group's all-gather buffer is freed after this one's
    // all-gather (wait_for_unshard keeps it in all_gather_state until the next copy-out) and the
    // copy-in stream waits for the previous copy-out.
    std::vector<std::size_t> forward_order;
    for (std::size_t u = 0; u < units.size(); ++u) {
      if (units[u].first_forward) forward_order.push_back(u);
    }
    std::sort(forward_order.begin(), forward_order.end(), [&](std::size_t a, std::size_t b) { return *units[a].first_forward < *units[b].first_forward; });
    std::size_t index = 0;
    std::optional<std::size_t> previous;
    std::optional<BufferId> previous_buffer;
    for (std::size_t u : forward_order) {
      const Unit& unit = units[u];
      Gathered g = gathered_buffers(unit, "forward");
      // Not resharded after forward: freed by the group's post-backward reshard.
      if (!unit.reshard_after_forward && unit.last_backward) extra_uses_[post_backward(unit)].push_back(g.unsharded);
      std::vector<TaskId> after;
      if (previous) after.push_back(*units[*previous].first_forward);
      std::vector<BufferId> also;
      if (previous_buffer) also.push_back(*previous_buffer);
      g.collective = all_gather(unit, g, "forward", index++, *unit.first_forward, after, also);
      extra_after_[*unit.first_forward].push_back(g.collective);
      create_at_[*unit.first_forward].push_back(g.unsharded);
      previous = u;
      previous_buffer = g.all_gather;
    }
    // The last forward all-gather buffer is freed by the root's post-forward (_post_forward:
    // all_gather_state = None): the last forward task that reads parameters holds it.
    if (previous_buffer) {
      std::optional<TaskId> last;
      for (const Unit& unit : units) {
        if (unit.last_forward) last = std::max(last.value_or(*unit.last_forward), *unit.last_forward);
      }
      if (last) extra_uses_[*last].push_back(*previous_buffer);
    }

    // Backward: a group resharded after forward is gathered again, prefetched when the group
    // before it in backward order starts its backward (_backward_prefetch in pre_backward); its
    // copy-out at its own pre_backward frees the all-gather buffer at once.
    std::vector<std::size_t> backward_order;
    for (std::size_t u = 0; u < units.size(); ++u) {
      if (units[u].first_backward) backward_order.push_back(u);
    }
    std::sort(backward_order.begin(), backward_order.end(), [&](std::size_t a, std::size_t b) { return *units[a].first_backward < *units[b].first_backward; });
    for (std::size_t k = 0; k < backward_order.size(); ++k) {
      const Unit& unit = units[backward_order[k]];
      if (!unit.reshard_after_forward) continue;
      Gathered g = gathered_buffers(unit, "backward");
      extra_uses_[post_backward(unit)].push_back(g.unsharded);
      const TaskId issue = k > 0 ? *units[backward_order[k - 1]].first_backward : *unit.first_backward;
      g.collective = all_gather(unit, g, "backward", index++, issue, {}, {});
      extra_after_[*unit.first_backward].push_back(g.collective);
      create_at_[*unit.first_backward].push_back(g.unsharded);
      extra_uses_[*unit.first_backward].push_back(g.all_gather);
    }

    // Gradients: each group's post-backward (after its last backward task; the root's in the
    // final callback, after the whole backward pass) copies its gradients into a reduce-scatter
    // input of reduce_dtype allocated on the compute stream, frees them, and reduce-scatters on
    // its stream into an output allocated there, which stays as the group's sharded gradient
    // until zero_grad. The input is held (ReduceScatterState) until the next post-backward, whose
    // compute stream first waits for this reduce-scatter.
    std::vector<std::size_t> reduce_order;
    for (std::size_t u = 0; u < units.size(); ++u) {
      if (units[u].last_backward && !units[u].gradients.empty()) reduce_order.push_back(u);
    }
    std::sort(reduce_order.begin(), reduce_order.end(), [&](std::size_t a, std::size_t b) {
      // The root's post-backward runs last, in the final callback.
      if (units[a].name.empty() != units[b].name.empty()) return units[b].name.empty();
      return *units[a].last_backward < *units[b].last_backward;
    });
    std::optional<TaskId> previous_reduction;
    std::optional<BufferId> previous_input;
    TaskId previous_ready = 0;
    std::size_t r = 0;
    for (std::size_t u : reduce_order) {
      const Unit& unit = units[u];
      const std::string what = unit.name.empty() ? std::string("root") : unit.name;
      const TaskId ready = post_backward(unit);
      // Two groups made ready by the same task reduce back to back (the wait would be a cycle).
      if (previous_reduction && previous_ready < ready) {
        extra_after_[ready].push_back(*previous_reduction);
        extra_uses_[ready].push_back(*previous_input);
      }
      previous_ready = ready;
      // reduce_bytes 0: MixedPrecisionPolicy's reduce_dtype None, the gradients' own dtype.
      const std::int64_t reduce_bytes =
          f.reduce_bytes > 0 ? f.reduce_bytes : static_cast<std::int64_t>(traces::element_size(trace_.tensor(*s_.buffers[unit.gradients.front()].tensor).dtype));
      const BufferId input = add_buffer(what + " reduce-scatter input", unit.padded_elements * reduce_bytes, MemoryRole::gradient, false);
      const BufferId output = add_buffer(partition_name((what + " sharded gradients").c_str()), unit.sharded_elements * reduce_bytes, MemoryRole::gradient, false);
      s_.buffers[output].held_to_end = true;
      s_.buffers[output].allocation_stream = AllocationStream::fsdp_reduce_scatter;
      Task c;
      c.kind = TaskKind::collective;
      c.stream = Stream::comm;
      c.collective = CollectiveKind::reduce_scatter;
      c.bytes = unit.padded_elements * reduce_bytes;
      c.creates = {input, output};
      c.uses = unit.gradients;
      c.after = {ready};
      c.name = task_name(("FSDP reduce-scatter of " + what + " gradients").c_str(), r++, c.bytes);
      const TaskId reduction = add_task(std::move(c), ready + 1);
      for (BufferId g : unit.gradients) {
        s_.buffers[g].held_to_end = false;
        s_.buffers[g].resident = false;
        optimizer_substitute_[g] = output;
      }
      previous_reduction = reduction;
      previous_input = input;
    }
    if (previous_reduction && first_optimizer_) extra_after_[*first_optimizer_].push_back(*previous_reduction);

    shard_optimizer_tasks();
    redirect_all();
    // The unsharded parameters are created by their group's first task of the pass (the copy-out
    // there); the buffers a task holds for FSDP2 beyond its own reads.
    for (auto& [t, buffers] : create_at_) {
      Task& task = s_.tasks[t];
      for (BufferId b : buffers) {
        task.uses.erase(std::remove(task.uses.begin(), task.uses.end(), b), task.uses.end());
        if (std::find(task.creates.begin(), task.creates.end(), b) == task.creates.end()) task.creates.push_back(b);
      }
    }
    for (auto& [t, buffers] : extra_uses_) {
      Task& task = s_.tasks[t];
      for (BufferId b : buffers) {
        if (std::find(task.creates.begin(), task.creates.end(), b) == task.creates.end() &&
            std::find(task.uses.begin(), task.uses.end(), b) == task.uses.end()) {
          task.uses.push_back(b);
        }
      }
    }
    assemble();
  }

  // The new task list: added tasks just before the old task they precede, removed tasks left
  // out, every wait renumbered. A wait for a removed task becomes a wait for what it waited for.
  void assemble() {
    std::vector<std::vector<std::size_t>> before(n_ + 1);
    for (std::size_t i = 0; i < added_.size(); ++i) before[added_[i].before].push_back(i);
    std::vector<TaskId> order;  // old ids and n + added index, in the new order
    order.reserve(n_ + added_.size());
    for (TaskId t = 0; t <= n_; ++t) {
      for (std::size_t i : before[t]) order.push_back(n_ + i);
      if (t < n_ && !removed_[t]) order.push_back(t);
    }
    constexpr TaskId kNone = static_cast<TaskId>(-1);
    std::vector<TaskId> new_id(n_ + added_.size(), kNone);
    for (TaskId pos = 0; pos < order.size(); ++pos) new_id[order[pos]] = pos;
    const std::vector<std::vector<TaskId>> through = waits_through_removed();
    std::vector<Task> tasks;
    tasks.reserve(order.size());
    for (TaskId id : order) {
      Task task = id < n_ ? std::move(s_.tasks[id]) : std::move(added_[id - n_].task);
      if (auto it = extra_after_.find(id); id < n_ && it != extra_after_.end()) {
        task.after.insert(task.after.end(), it->second.begin(), it->second.end());
      }
      std::vector<TaskId> after;
      for (TaskId a : task.after) {
        if (a < n_ && removed_[a]) {
          after.insert(after.end(), through[a].begin(), through[a].end());
        } else {
          after.push_back(a);
        }
      }
      for (TaskId& a : after) a = new_id[a];
      std::sort(after.begin(), after.end());
      after.erase(std::unique(after.begin(), after.end()), after.end());
      task.after = std::move(after);
      tasks.push_back(std::move(task));
    }
    s_.tasks = std::move(tasks);
  }

  // Per removed old task, the kept tasks (old ids or n + added index) it waited for: its `after`
  // waits, the extra ones and its stream predecessor, through other removed tasks.
  std::vector<std::vector<TaskId>> waits_through_removed() const {
    std::vector<std::vector<TaskId>> direct(n_);
    std::array<std::optional<TaskId>, kStreamCount> previous{};
    for (TaskId t = 0; t < n_; ++t) {
      const auto stream = static_cast<std::size_t>(s_.tasks[t].stream);
      const std::optional<TaskId> predecessor = previous[stream];
      previous[stream] = t;
      if (!removed_[t]) continue;
      direct[t] = s_.tasks[t].after;
      if (auto it = extra_after_.find(t); it != extra_after_.end()) direct[t].insert(direct[t].end(), it->second.begin(), it->second.end());
      if (predecessor) direct[t].push_back(*predecessor);
    }
    // The waits form a DAG (Schedule::validate), so the recursion ends.
    std::vector<std::vector<TaskId>> through(n_);
    std::vector<bool> done(n_, false);
    const auto resolve = [&](const auto& self, TaskId t) -> const std::vector<TaskId>& {
      if (done[t]) return through[t];
      std::vector<TaskId> out;
      for (TaskId w : direct[t]) {
        if (w < n_ && removed_[w]) {
          const auto& more = self(self, w);
          out.insert(out.end(), more.begin(), more.end());
        } else {
          out.push_back(w);
        }
      }
      std::sort(out.begin(), out.end());
      out.erase(std::unique(out.begin(), out.end()), out.end());
      through[t] = std::move(out);
      done[t] = true;
      return through[t];
    };
    for (TaskId t = 0; t < n_; ++t) {
      if (removed_[t]) resolve(resolve, t);
    }
    return through;
  }

  // Where an optimizer subgroup is stepped under an offloaded optimizer.
  enum class Where : std::uint8_t {
    cpu,             // DeepSpeedCPUAdam on the host
    gpu_resident,    // Twin-Flow (ratio < 1): fp32 state kept on the GPU
    gpu_prefetched,  // Deep Optimizer States: fp32 state copied in for the step and back
  };
  struct Subgroup {
    std::vector<BufferId> gradients;
    std::int64_t elements = 0;        // of this rank's partition
    std::int64_t gradient_bytes = 0;  // the same in the gradients' (16-bit) dtype
    Where where = Where::cpu;
    std::optional<BufferId> kept;           // Deep Optimizer States: its gradients kept on the GPU
    std::optional<BufferId> state;          // Deep Optimizer States: its fp32 state on the GPU
    std::optional<BufferId> fp32_gradient;  // Deep Optimizer States: its fp32 gradients on the GPU
    std::optional<TaskId> host_step;
    std::optional<TaskId> gpu_step;
  };
  // One gradient's share of this rank's partition.
  struct Share {
    std::int64_t elements = 0;
    std::int64_t element_size = 0;
    std::size_t subgroup = 0;
  };
  // An fp32 gradient element: DeepSpeed's host gradients are fp32 (the fp32 partition's .grad).
  static constexpr std::int64_t kFp32GradientBytes = 4;

  Schedule& s_;
  const traces::Trace& trace_;
  const DataParallelSpec& spec_;
  const Platform* platform_ = nullptr;
  const std::size_t n_;
  const std::size_t old_buffers_;
  std::vector<bool> removed_;  // old tasks left out (the optimizer's, under offload)
  std::vector<Subgroup> subgroups_;
  std::map<BufferId, Share> share_;
  std::int64_t total_elements_ = 0;     // of the subgroups
  std::int64_t resident_elements_ = 0;  // of Twin-Flow's GPU subgroups
  std::array<std::optional<TaskId>, 2> last_gradient_copy_;  // the last gradient copy to the host, and back
  std::vector<BufferId> gradients_;
  std::vector<BufferId> weights_;
  std::optional<TaskId> first_optimizer_;
  std::optional<TaskId> last_optimizer_;
  TaskId last_backward_ = 0;
  std::optional<BufferId> parameter_partition_;
  std::vector<Added> added_;
  std::vector<BufferId> substitute_;                        // per old buffer: its partition, or kKeep
  std::map<BufferId, BufferId> optimizer_substitute_;       // what the optimizer's tasks read instead
  std::map<std::pair<int, BufferId>, BufferId> gathered_;   // ZeRO-3: (pass, parameter) -> its gathered copy
  std::map<TaskId, std::vector<TaskId>> extra_after_;       // old task -> waits to add (old ids or n + added index)
  std::map<TaskId, std::vector<BufferId>> create_at_;       // FSDP2: old task -> buffers it creates (its group's unsharded parameters)
  std::map<TaskId, std::vector<BufferId>> extra_uses_;      // FSDP2: old task -> buffers it holds besides its reads
};

}  // namespace

std::string optimizer_place(const std::optional<OptimizerOffloadSpec>& offload) {
  if (!offload) return "GPU";
  if (offload->prefetch_optimizer) return "DOS k=" + std::to_string(offload->prefetch_optimizer_gap);
  if (offload->ratio < 1) return "CPU " + std::to_string(static_cast<int>(std::lround(100 * offload->ratio))) + "%";
  return "CPU";
}

void check_data_parallel(const DataParallelSpec& spec) {
  if (spec.ranks < 1) throw std::invalid_argument("data parallel: ranks must be at least 1");
  if (spec.zero_stage < 0 || spec.zero_stage > 3) throw std::invalid_argument("data parallel: zero_stage must be 0, 1, 2 or 3");
  if (spec.bucket_cap_bytes < 1 || spec.first_bucket_bytes < 1) throw std::invalid_argument("data parallel: bucket sizes must be positive");
  if (spec.reduce_bucket_elements < 1) throw std::invalid_argument("data parallel: reduce_bucket_elements must be positive");
  if (spec.sub_group_elements < 1) throw std::invalid_argument("data parallel: sub_group_elements must be positive");
  if (const auto& fsdp = spec.fsdp) {
    if (spec.zero_stage != 3) throw std::invalid_argument("data parallel: fsdp needs zero_stage 3 (FSDP2 shards parameters, gradients and optimizer state)");
    if (spec.offload_optimizer) throw std::invalid_argument("data parallel: fsdp with offload_optimizer is not modelled");
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

double cpu_adam_seconds(std::int64_t parameters, const HostSpec& host) {
  if (!(host.flops > 0) || !(host.memory_bandwidth > 0)) {
    throw std::invalid_argument("cpu_adam_seconds: the host '" + host.name + "' needs positive flops and memory_bandwidth");
  }
  const auto n = static_cast<double>(parameters);
  return std::max(n * kCpuAdamFlopsPerParameter / host.flops, n * kCpuAdamBytesPerParameter / host.memory_bandwidth);
}

void apply_data_parallel(Schedule& schedule, const traces::Trace& trace, const DataParallelSpec& spec) {
  check_data_parallel(spec);
  if (spec.offload_optimizer) throw std::invalid_argument("data parallel: an offloaded optimizer needs the platform (its host steps it)");
  if (spec.ranks == 1) return;
  Transform(schedule, trace, spec, nullptr).run();
}

void apply_data_parallel(Schedule& schedule, const traces::Trace& trace, const DataParallelSpec& spec, const Platform& platform) {
  check_data_parallel(spec);
  // One GPU without an offloaded optimizer trains as without data parallelism; with one, ZeRO's
  // offload changes the schedule on one GPU too.
  if (spec.ranks == 1 && !spec.offload_optimizer) return;
  if (spec.offload_optimizer) cpu_adam_seconds(0, platform.host);  // the host must have rates
  Transform(schedule, trace, spec, &platform).run();
}

}  // namespace comptrain::models

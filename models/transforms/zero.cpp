// ZeRO's partitions (README.md, "ZeRO"): the optimizer state, the parameters and their
// all-gathers of stage 3, and the optimizer's kernels over one rank's partition. Part of data
// parallelism as a schedule transform (data_parallel_transform.hpp).

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "comptrain/models/kernel_power.hpp"
#include "data_parallel_transform.hpp"

namespace comptrain::models::transform_detail {

using traces::Phase;

// The optimizer state becomes one resident partition of 1/ranks of its bytes.
void Transform::partition_optimizer_state() {
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
  // Expert parallelism: the experts' state sharded over their expert-data group, the rest over
  // the data group (Megatron-LM's distributed optimizer, one per group:
  // shared/reference/parallelism.md §4, "d = world/(ETP·EP·PP) for experts").
  std::vector<BufferId> experts;
  if (expert_split()) {
    std::vector<BufferId> dense;
    for (BufferId b : members) (is_expert_buffer(b) ? experts : dense).push_back(b);
    members = std::move(dense);
  }
  const auto partition = [&](const std::vector<BufferId>& group, int ranks, const std::string& name) {
    if (group.empty()) return;
    const BufferId part = add_buffer(name + " (1/" + std::to_string(ranks) + ")", ceil_div(sum_bytes(group), ranks), MemoryRole::optimizer_state);
    for (BufferId b : group) {
      substitute_[b] = part;
      s_.buffers[b].resident = false;  // no longer referenced: never allocated
    }
  };
  partition(members, spec_.ranks, "optimizer state partition");
  partition(experts, expert_ranks(), "expert optimizer state partition");
}

// ZeRO-3: the parameters become one resident partition; the passes read gathered copies
// (gather_parameters), the optimizer the partition.
void Transform::partition_parameters() {
  if (weights_.empty()) return;
  parameter_partition_ = add_buffer(partition_name("parameter partition"), ceil_div(sum_bytes(weights_), spec_.ranks), MemoryRole::weight);
  for (BufferId w : weights_) {
    substitute_[w] = *parameter_partition_;
    optimizer_substitute_[w] = *parameter_partition_;
    s_.buffers[w].resident = false;
  }
}

// The step's kernels run over this rank's partition: 1/ranks of the elements, so of the time
// and of the temporaries they make.
void Transform::shard_optimizer_tasks() {
  for (TaskId t = 0; t < n_; ++t) {
    Task& task = s_.tasks[t];
    if (!task.op || pass_of(task, trace_) != Phase::optimizer) continue;
    // Expert parallelism: an op over expert parameters runs over 1/expert_ranks of them; an op
    // over both kinds (a foreach step over a list) by the share of its tensors' bytes of each.
    if (!expert_split()) {
      task.seconds /= shard_ranks();
      for (BufferId b : task.creates) {
        Buffer& buffer = s_.buffers[b];
        if (!buffer.resident && buffer.role == MemoryRole::temporary) buffer.bytes = ceil_div(buffer.bytes, shard_ranks());
      }
      continue;
    }
    double share = 1.0 / shard_ranks();
    {
      double expert = 0;
      double all = 0;
      for (const traces::TensorIndex i : trace_.op(*task.op).inputs) {
        const traces::Tensor& tensor = trace_.tensor(i);
        all += static_cast<double>(tensor.bytes());
        if (is_expert_parameter(tensor.name)) expert += static_cast<double>(tensor.bytes());
      }
      if (all > 0) share = (all - expert) / all / shard_ranks() + expert / all / expert_ranks();
    }
    task.seconds *= share;
    for (BufferId b : task.creates) {
      Buffer& buffer = s_.buffers[b];
      if (!buffer.resident && buffer.role == MemoryRole::temporary) {
        buffer.bytes = static_cast<std::int64_t>(std::ceil(static_cast<double>(buffer.bytes) * share));
      }
    }
  }
}

// ZeRO-3 reduces a bucket with reduce_scatter_coalesced (stage3.py@v0.13.3
// __reduce_and_partition_ipg_grads, line 1269: the contiguous all-reduce path is taken only with
// reduce_scatter: false, and the default is true, zero/config.py line 100; __avg_scatter_grads,
// line 1343). That function (runtime/comm/coalesced_collectives.py@v0.13.3, lines 93-142) splits
// each of the bucket's gradients into `ranks` chunks of ceil(numel / ranks) elements and, unless
// the bucket is one gradient that the ranks divide, concatenates every rank's chunks, each padded
// to that size, into a new flat tensor (`torch.cat`, line 123) of
// ranks x sum over the gradients of ceil(numel / ranks) elements, in the communication dtype,
// the gradients' own (engine.py@v0.13.3 communication_data_type, lines 826-837: bf16 or fp16
// as the model). It divides it in place, reduce-scatters it into its own chunk, and returns
// views of that chunk, which partition_grads copies into the gradient partition (to the host
// with an offloaded optimizer); the last reference goes when __reduce_and_partition_ipg_grads
// returns. One rank runs the same code (a world of 1), so a bucket of several gradients is
// copied there too. The allocation is made inside `with stream(reduce_and_partition_stream)`:
// its block is that stream's (AllocationStream::zero_reduce). The padding chunks
// (`torch.empty`, at most ranks - 1 elements per gradient) are left out.
std::optional<BufferId> Transform::coalesced_reduce_scatter_input(const Bucket& bucket, std::size_t index) {
  if (spec_.zero_stage != 3 || bucket.gradients.empty()) return std::nullopt;
  std::int64_t bytes = 0;
  bool divides = true;
  for (BufferId g : bucket.gradients) {
    const auto element_size = static_cast<std::int64_t>(traces::element_size(trace_.tensor(*s_.buffers[g].tensor).dtype));
    const std::int64_t elements = s_.buffers[g].bytes / element_size;
    divides = divides && elements % spec_.ranks == 0;
    bytes += spec_.ranks * ceil_div(elements, spec_.ranks) * element_size;
  }
  if (bucket.gradients.size() == 1 && divides) return std::nullopt;  // reduced in place: tensors[0].view(-1)
  const BufferId flat = add_buffer("flat input of coalesced reduce-scatter " + std::to_string(index) + " (torch.cat of the bucket's gradients)",
                                   bytes, MemoryRole::temporary, false);
  s_.buffers[flat].allocation_stream = AllocationStream::zero_reduce;
  return flat;
}

// ZeRO-3 with an offloaded optimizer: partition_grads issues the bucket's copies to the host and
// back on the reduce_and_partition_stream too (it runs inside __reduce_and_partition_ipg_grads'
// `with stream(...)`, stage3.py@v0.13.3 lines 1265-1275), so the next bucket's reduce-scatter
// starts after them, and the flat input, which that stream's next bucket reuses, lives until
// they are done; the launching thread drops it once it has issued them (or, vanilla DeepSpeed,
// waited for its blocking `fp32_grad_tensor.copy_`). The copies run on the copy streams here;
// these waits and uses keep DeepSpeed's order. `previous` becomes this bucket's copies.
void Transform::order_on_reduce_stream(TaskId reduction, const std::vector<TaskId>& copies, std::optional<BufferId> flat,
                                       std::vector<TaskId>& previous) {
  Task& r = added_[reduction - n_].task;
  r.after.insert(r.after.end(), previous.begin(), previous.end());
  if (flat) {
    for (TaskId copy : copies) added_[copy - n_].task.uses.push_back(*flat);
  }
  previous = copies;
}

// ZeRO-3: each pass all-gathers an op's parameters before the op, into buffers that live
// until the pass's last use of them. The gather of the k-th group waits for the end of the
// first op of group k-2, so one group is fetched while the previous one computes (DeepSpeed
// prefetches the modules about to run; one op of look-ahead is this model's simplification).
void Transform::gather_parameters() {
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
  const std::vector<bool> kept = kept_for_backward(is_weight);
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
      // Still gathered from the forward pass (stage3_max_reuse_distance): the backward ops read that copy.
      if (pass == Phase::backward && kept[b]) {
        if (const auto forward = gathered_.find({static_cast<int>(Phase::forward), b}); forward != gathered_.end()) {
          gathered_[key] = forward->second;
          s_.buffers[forward->second].name += " (kept for backward)";
          continue;
        }
      }
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
  // ZeRO++'s hpZ: a secondary partition per group of hpz ranks, from which the backward pass
  // gathers within the group (DataParallelSpec::hpz_partition_size).
  const int hpz = spec_.hpz_partition_size;
  std::optional<BufferId> secondary;
  if (hpz > 1 && hpz < spec_.ranks) {
    secondary = add_buffer(partition_name("ZeRO++ hpZ secondary parameter partition"), ceil_div(sum_bytes(weights_), hpz), MemoryRole::weight);
  }
  for (std::size_t k = 0; k < groups.size(); ++k) {
    const Group& group = groups[k];
    const bool within_hpz = secondary && group.pass == Phase::backward;
    Task c;
    c.kind = TaskKind::collective;
    c.stream = Stream::comm;
    c.collective = CollectiveKind::all_gather;
    c.bytes = group.bytes;
    c.creates = group.buffers;
    c.uses = {within_hpz ? *secondary : *parameter_partition_};
    if (within_hpz) c.groups = RankGroups{hpz, 1};
    TaskId before = 0;
    if (k >= 2) {
      c.after = {groups[k - 2].first_user};
      before = groups[k - 2].first_user + 1;
    }
    c.name = task_name(group.pass == Phase::forward ? "all-gather of parameters for forward"
                       : within_hpz                  ? "all-gather of parameters for backward (hpZ, within the group)"
                                                     : "all-gather of parameters for backward",
                       k, group.bytes);
    // ZeRO++'s qwZ: the gather moves int8 values, quantized before and dequantized after it
    // (not the hpZ gathers, which stay within the node in 16 bits).
    std::optional<Task> dequantize;
    if (spec_.quantized_weights && !within_hpz) dequantize = quantize_gather(c, group.bytes, group.buffers, k, before);
    TaskId last = 0;
    if (spec_.compression) {
      last = compressed_collective(std::move(c), static_cast<int>(traces::element_size(trace_.tensor(*s_.buffers[group.buffers.front()].tensor).dtype)), before);
    } else {
      last = add_task(std::move(c), before);
    }
    if (dequantize) {
      dequantize->after = {last};
      last = add_task(std::move(*dequantize), before);
    }
    extra_after_[group.first_user].push_back(last);
  }
}

// DeepSpeed's reuse distance (DataParallelSpec::max_reuse_distance_elements): per weight,
// whether its forward copy is kept into the backward pass -- the elements of the weights that
// the ops after its last forward use and before its first backward use read (each read counted,
// as DeepSpeed counts each module's parameters in its trace) are fewer than the distance.
std::vector<bool> Transform::kept_for_backward(const std::vector<bool>& is_weight) const {
  std::vector<bool> kept(old_buffers_, false);
  if (spec_.max_reuse_distance_elements <= 0) return kept;
  constexpr TaskId kNoTask = std::numeric_limits<TaskId>::max();
  std::vector<TaskId> last_forward(old_buffers_, kNoTask);
  std::vector<TaskId> first_backward(old_buffers_, kNoTask);
  // read_before[t]: the weight elements read by the ops before task t.
  std::vector<std::int64_t> read_before(n_ + 1, 0);
  for (TaskId t = 0; t < n_; ++t) {
    const Task& task = s_.tasks[t];
    read_before[t + 1] = read_before[t];
    if (!task.op) continue;
    const Phase pass = pass_of(task, trace_);
    for (BufferId b : task.uses) {
      if (b >= old_buffers_ || !is_weight[b]) continue;
      read_before[t + 1] += trace_.tensor(*s_.buffers[b].tensor).elements();
      if (pass == Phase::forward) last_forward[b] = t;
      if (pass == Phase::backward && first_backward[b] == kNoTask) first_backward[b] = t;
    }
  }
  for (BufferId w = 0; w < old_buffers_; ++w) {
    if (last_forward[w] == kNoTask || first_backward[w] == kNoTask || first_backward[w] < last_forward[w]) continue;
    kept[w] = read_before[first_backward[w]] - read_before[last_forward[w] + 1] < spec_.max_reuse_distance_elements;
  }
  return kept;
}

// Megatron-LM's --overlap-param-gather (DataParallelSpec::overlap_param_gather): the optimizer
// step no longer all-gathers the updated parameters; the next iteration's forward pass does, one
// bucket at a time (NVIDIA/Megatron-LM@d98e8a64 megatron/core/distributed/
// distributed_data_parallel.py:517-540, the forward pre-hook waits for the bucket of each
// parameter its module reads; param_and_grad_buffer.py:538-563, finish_param_sync: dispatches
// its bucket's gather if not yet dispatched, waits for it, then dispatches the next bucket's;
// distributed_data_parallel.py:369-380, the gathers run in reverse bucket order, the forward
// order). The wait is a stream wait, so the host runs ahead and dispatches every bucket's gather
// long before the GPU reaches the modules: in this one-iteration steady-state replay all of them
// are issued on the comm stream at the iteration's start, in forward order, and the first
// forward op that reads a parameter of bucket k waits for gather k. ZeRO-1 and 2 keep the 16-bit
// parameters whole on every rank, so the gathers write into them: no memory is added.
//
// Buckets as Megatron forms them (param_and_grad_buffer.py:980-995): from the last parameter
// back to the first, a bucket closes as soon as it holds at least bucket_size elements, so the
// partial bucket is the first layers'. Parameters in the order the forward pass first reads
// them, those it never reads last; one bucket series per dtype and, with expert parallelism,
// for the expert parameters apart (Megatron's buffers per dtype and per expert-data group).
void Transform::gather_parameters_before_forward() {
  constexpr TaskId kUnread = std::numeric_limits<TaskId>::max();
  std::vector<TaskId> first_reader(old_buffers_, kUnread);
  for (TaskId t = 0; t < n_; ++t) {
    const Task& task = s_.tasks[t];
    if (!task.op || pass_of(task, trace_) != Phase::forward) continue;
    for (BufferId b : task.uses) {
      if (b < old_buffers_ && first_reader[b] == kUnread) first_reader[b] = t;
    }
  }
  std::vector<BufferId> order = weights_;
  std::stable_sort(order.begin(), order.end(), [&](BufferId a, BufferId b) { return first_reader[a] < first_reader[b]; });
  struct ParameterBucket {
    std::vector<BufferId> weights;
    std::int64_t elements = 0;
    std::int64_t bytes = 0;
    TaskId first_reader = kUnread;
    bool expert = false;
  };
  using Key = std::pair<traces::DType, bool>;
  std::map<Key, ParameterBucket> open;
  std::vector<ParameterBucket> buckets;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const traces::Tensor& tensor = trace_.tensor(*s_.buffers[*it].tensor);
    // FP8 weights (float8_parameter_gather) in a buffer of their own, as Megatron's u8 one.
    const Key key{gathered_in_fp8(*it) ? traces::DType::u8 : tensor.dtype, expert_split() && is_expert_parameter(tensor.name)};
    ParameterBucket& bucket = open[key];
    bucket.expert = key.second;
    bucket.weights.push_back(*it);
    bucket.elements += tensor.elements();
    bucket.bytes += gathered_bytes(*it);
    bucket.first_reader = std::min(bucket.first_reader, first_reader[*it]);
    if (bucket.elements >= spec_.reduce_bucket_elements) {
      buckets.push_back(std::move(bucket));
      open.erase(key);
    }
  }
  for (auto& [key, bucket] : open) buckets.push_back(std::move(bucket));
  std::stable_sort(buckets.begin(), buckets.end(), [](const ParameterBucket& a, const ParameterBucket& b) { return a.first_reader < b.first_reader; });
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    const ParameterBucket& bucket = buckets[k];
    if (bucket.bytes <= 0) continue;
    Task c;
    c.kind = TaskKind::collective;
    c.stream = Stream::comm;
    c.collective = CollectiveKind::all_gather;
    c.bytes = bucket.bytes;
    c.uses = bucket.weights;
    std::sort(c.uses.begin(), c.uses.end());
    c.name = task_name(bucket.expert ? "all-gather of the updated expert parameters for the forward pass, bucket"
                                     : "all-gather of the updated parameters for the forward pass, bucket",
                       k, bucket.bytes);
    if (bucket.expert) c.over = traces::ParallelGroup::expert_data;
    const TaskId gather = spec_.compression ? compressed_collective(std::move(c), weight_element_size(), 0) : add_task(std::move(c), 0);
    if (bucket.first_reader != kUnread) extra_after_[bucket.first_reader].push_back(gather);
  }
}

// qwZ (DataParallelSpec::quantized_weights): the rank's share of the group's parameters quantized
// to int8 before the all-gather (a memory-bound kernel on the comm stream: its 16-bit share read,
// its int8 share written), the all-gather of the int8 values into a temporary of one byte per
// element, and their dequantization into the gathered parameters after it (int8 read, 16-bit
// written). Block scales are left out (a few bytes per block of elements).
std::optional<Task> Transform::quantize_gather(Task& gather, std::int64_t bytes, const std::vector<BufferId>& gathered, std::size_t index,
                                               TaskId before) {
  if (platform_ == nullptr) throw std::invalid_argument("ZeRO++'s quantized weights need the platform (its GPU's memory bandwidth)");
  std::int64_t elements = 0;
  for (BufferId b : gathered) {
    const auto& t = trace_.tensor(*s_.buffers[b].tensor);
    elements += t.elements();
  }
  const double e = static_cast<double>(elements);
  const double share = e / spec_.ranks;
  const double element_size = elements > 0 ? static_cast<double>(bytes) / e : 2.0;
  Task quantize;
  quantize.kind = TaskKind::compress;
  quantize.stream = Stream::comm;
  quantize.after = gather.after;
  quantize.uses = gather.uses;
  const KernelRun q = memory_bound_kernels(*platform_, share * (element_size + 1), 1);
  quantize.seconds = q.seconds;
  quantize.watts = q.watts;
  quantize.name = task_name("qwZ quantization of parameters", index, bytes);
  const BufferId int8 = add_buffer("qwZ int8 parameters gathered " + std::to_string(index), elements, MemoryRole::temporary, false);
  gather.after = {add_task(std::move(quantize), before)};
  gather.bytes = elements;
  Task dequantize;
  dequantize.kind = TaskKind::decompress;
  dequantize.stream = Stream::comm;
  dequantize.creates = gathered;
  dequantize.uses = {int8};
  const KernelRun d = memory_bound_kernels(*platform_, e * (1 + element_size), 1);
  dequantize.seconds = d.seconds;
  dequantize.watts = d.watts;
  dequantize.name = task_name("qwZ dequantization of parameters", index, bytes);
  gather.creates = {int8};
  return dequantize;
}

}  // namespace comptrain::models::transform_detail

namespace comptrain::models::transform_detail {

// ZeRO++'s qgZ (DataParallelSpec::quantized_gradients), as DeepSpeed runs it
// (microsoft/DeepSpeed@38327e07 deepspeed/runtime/zero/stage3.py lines 1382-1389,
// __avg_scatter_grads: all_to_all_quant_reduce when the run spans more than one node;
// runtime/comm/coalesced_collectives.py lines 30-72, all_to_all_quant_reduce). Per gradient:
// a vector (dim 1), or a tensor that 2 x ranks does not divide, is reduce-scattered alone; the
// others are quantized to int4 (swizzle_quant: their 16-bit values read, half a byte each
// written, reordered so that each rank ends with its own slice), all-to-all'd within the node
// (g = ranks_per_node ranks), dequantized, summed over the node's g slices and requantized
// (quantized_reduction: E/2 bytes read, E/(2g) written), all-to-all'd among the n = ranks / g
// ranks of the same local index on every node, and dequantized (E/(2g) bytes read, E/g 16-bit
// values written), the n chunks summed and divided by n into the rank's partition (n - 1 adds
// of two chunks into one, and the division). So each rank sends (g - 1)/g of E/2 bytes over
// NVLink and (n - 1)/n of E/(2g) over the network, where the reduce-scatter sent (N - 1)/N of
// 2E: the blog's "M/Z" (blogs/zeropp, qgZ). The tensors of the bucket are taken together: one
// task per step (the kernels' launches counted per tensor; the per-tensor collectives' own
// latency and the scales, one fp32 per quantization group, left out). The int4 tensors, the
// received ones and the dequantized E/g values are temporaries of the comm stream.
TaskId Transform::quantized_gradient_reduction(const Bucket& bucket, Task reduce_scatter, TaskId ready, std::size_t index) {
  if (platform_ == nullptr) throw std::invalid_argument("ZeRO++'s quantized gradients need the platform (its GPU's memory bandwidth)");
  const int g = spec_.ranks_per_node;
  const int n = spec_.ranks / g;
  double elements = 0;  // the quantized tensors' values
  int tensors = 0;
  std::int64_t vector_bytes = 0;
  double element_size = 2;
  for (BufferId b : bucket.gradients) {
    const traces::Tensor& t = trace_.tensor(*s_.buffers[b].tensor);
    if (t.shape.size() >= 2 && t.elements() % (2 * static_cast<std::int64_t>(spec_.ranks)) == 0) {
      elements += static_cast<double>(t.elements());
      element_size = static_cast<double>(traces::element_size(t.dtype));
      ++tensors;
    } else {
      vector_bytes += s_.buffers[b].bytes;
    }
  }
  std::optional<TaskId> last;
  if (vector_bytes > 0) {
    Task rs = reduce_scatter;
    rs.bytes = vector_bytes;
    rs.name = task_name("reduce-scatter of the vectors (qgZ quantizes only matrices) of gradient bucket", index, vector_bytes);
    last = add_task(std::move(rs), ready + 1);
  }
  if (tensors == 0) return last ? *last : add_task(std::move(reduce_scatter), ready + 1);
  const double e = elements;
  const auto int4 = [](double values) { return static_cast<std::int64_t>(std::ceil(values / 2)); };
  const std::int64_t bucket_bytes = static_cast<std::int64_t>(e * element_size);
  const auto kernel_task = [&](TaskKind kind, const char* what, double bytes, int launches) {
    Task t;
    t.kind = kind;
    t.stream = Stream::comm;
    const KernelRun k = memory_bound_kernels(*platform_, bytes, launches);
    t.seconds = k.seconds;
    t.watts = k.watts;
    t.name = task_name(what, index, bucket_bytes);
    return t;
  };
  const auto all_to_all = [&](const char* what, std::int64_t bytes, RankGroups groups, BufferId in, BufferId out) {
    Task c = reduce_scatter;
    c.collective = CollectiveKind::all_to_all;
    c.bytes = bytes;
    c.groups = groups;
    c.uses = {in};
    c.creates = {out};
    c.after.clear();
    c.name = task_name(what, index, bytes);
    return c;
  };
  const BufferId quantized = add_buffer("qgZ int4 gradients of bucket " + std::to_string(index), int4(e), MemoryRole::temporary, false);
  const BufferId received = add_buffer("qgZ int4 gradients received within the node, bucket " + std::to_string(index), int4(e), MemoryRole::temporary, false);
  const BufferId reduced = add_buffer("qgZ int4 node sums of bucket " + std::to_string(index), int4(e / g), MemoryRole::temporary, false);
  const BufferId gathered = add_buffer("qgZ int4 node sums received across the nodes, bucket " + std::to_string(index), int4(e / g), MemoryRole::temporary, false);
  const BufferId dequantized = add_buffer("qgZ dequantized node sums of bucket " + std::to_string(index),
                                          static_cast<std::int64_t>(std::ceil(e / g * element_size)), MemoryRole::temporary, false);
  Task quantize = kernel_task(TaskKind::compress, "qgZ quantization (int4) of gradient bucket", e * element_size + e / 2, tensors);
  quantize.after = std::move(reduce_scatter.after);
  quantize.uses = reduce_scatter.uses;
  quantize.creates = {quantized};
  add_task(std::move(quantize), ready + 1);
  add_task(all_to_all("qgZ all-to-all within the node of gradient bucket", int4(e), RankGroups{g, 1}, quantized, received), ready + 1);
  Task reduce = kernel_task(TaskKind::compress, "qgZ reduction within the node and requantization of gradient bucket", e / 2 + e / (2.0 * g), tensors);
  reduce.uses = {received};
  reduce.creates = {reduced};
  add_task(std::move(reduce), ready + 1);
  add_task(all_to_all("qgZ all-to-all across the nodes of gradient bucket", int4(e / g), RankGroups{n, g}, reduced, gathered), ready + 1);
  const double chunk = e / g / n * element_size;
  Task dequantize = kernel_task(TaskKind::decompress, "qgZ dequantization and reduction across the nodes of gradient bucket",
                                e / (2.0 * g) + e / g * element_size + (n - 1) * 3.0 * chunk + 2.0 * chunk, tensors * (n + 1));
  dequantize.uses = {gathered};
  dequantize.creates = {dequantized};
  return add_task(std::move(dequantize), ready + 1);
}

}  // namespace comptrain::models::transform_detail

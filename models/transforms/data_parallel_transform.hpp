#pragma once
// Internal to models/transforms: data parallelism as a schedule transform (DDP, ZeRO 1-3, the
// optimizer offloaded to the host, FSDP2), one class whose steps live in one file per scheme:
// data_parallel.cpp (the order of the steps, the public functions), ddp.cpp (buckets), zero.cpp
// (partitions, sharded optimizer, ZeRO-3's gathers), optimizer_offload.cpp, fsdp.cpp and
// fsdp_offload.cpp.
// README.md tells what each changes and the sources.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "comptrain/models/data_parallel.hpp"
#include "comptrain/models/kernel_power.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/traces/trace.hpp"
#include "schedule_edit.hpp"

namespace comptrain::models::transform_detail {

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Memory-bound kernels' time and power on the platform's GPU: `bytes` read and written at the
// GPU's memory bandwidth x its default memory efficiency, plus `launches` launch gaps (the
// transforms' own kernels: DDP's hooks, ZeRO++'s quantization).
KernelRun memory_bound_kernels(const Platform& platform, double bytes, int launches);

class Transform : public ScheduleEdit {
 public:
  Transform(Schedule& schedule, const traces::Trace& trace, const DataParallelSpec& spec, const Platform* platform);

  // Transforms the schedule; returns the position of the optimizer step's first task in the new
  // schedule (none without an optimizer): what gradient accumulation repeats is before it.
  std::optional<TaskId> run();

 private:
  static constexpr BufferId kKeep = static_cast<BufferId>(-1);

  struct Bucket {
    std::vector<BufferId> gradients;
    std::int64_t bytes = 0;
    TaskId ready = 0;
    bool expert = false;  // expert parameters' gradients (reduced over the expert-data group when expert_split)
  };
  // Expert parallelism: the expert parameters' group is smaller than the data group.
  bool expert_split() const { return spec_.expert_ranks > 0 && spec_.expert_ranks != spec_.ranks; }
  int expert_ranks() const { return expert_split() ? spec_.expert_ranks : shard_ranks(); }
  // Whether a buffer holds (a copy of) an expert parameter's tensor (is_expert_parameter).
  bool is_expert_buffer(BufferId b) const {
    return s_.buffers[b].tensor.has_value() && is_expert_parameter(trace_.tensor(*s_.buffers[b].tensor).name);
  }
  // A DDP fp16/bf16 hook: adds its compress task before `all_reduce` (which it then waits for,
  // with the 16-bit bytes and the 16-bit copy) and returns the copy back to add after it (none
  // where the gradients already have the hook's type).
  std::optional<Task> compress_bucket(const Bucket& bucket, Task& all_reduce, TaskId ready, std::size_t index);
  // PowerSGD's tasks for one bucket (`plain`: the all-reduce it replaces, for the buffers it
  // reads); returns the last, after which the bucket holds the reduced gradients.
  TaskId power_sgd_bucket(const Bucket& bucket, const Task& plain, TaskId ready, std::size_t index);
  // ZeRO++'s qwZ around one parameter all-gather of `bytes` into `gathered`: adds the quantization
  // before it (which `gather` then waits for), makes it move int8 values into a temporary, and
  // returns the dequantization to add after it.
  std::optional<Task> quantize_gather(Task& gather, std::int64_t bytes, const std::vector<BufferId>& gathered, std::size_t index, TaskId before);

  // ZeRO++'s qgZ (DataParallelSpec::quantized_gradients) across more than one node.
  bool quantizes_gradients() const { return spec_.quantized_gradients && spec_.ranks_per_node > 0 && spec_.ranks_per_node < spec_.ranks; }
  // qgZ on one bucket (`reduce_scatter`: the reduce-scatter it replaces, filled as without qgZ):
  // the vectors' reduce-scatter, then the matrices' quantization, intra-node all-to-all,
  // reduction, inter-node all-to-all and dequantization. Returns the last task added.
  TaskId quantized_gradient_reduction(const Bucket& bucket, Task reduce_scatter, TaskId ready, std::size_t index);

  // Compressed collectives (DataParallelSpec::compression; compressed_collectives.cpp): adds the
  // collective `c` (filled as without compression, its bytes those of the values as they are, of
  // `element_size` bytes each; its name names what the new tasks are about) as its compressed ring: the codec tasks around it on the comm
  // stream, the compressed bytes moved, a temporary for them. An all-reduce becomes a compressed
  // reduce-scatter and all-gather. Returns the last task added, after which the result is there.
  TaskId compressed_collective(Task c, int element_size, TaskId before);
  // An all-reduce under `algorithm: recursive_doubling` (CollectiveCompressionSpec): log2 N
  // rounds, each compressing the whole partial sum and exchanging it with the rank 2^s away.
  // compressed_collective's figures passed on: the group's ranks, the compressed bytes of the
  // whole collective and the codec's time models.
  TaskId recursive_doubling_all_reduce(Task c, int element_size, int ranks, std::int64_t compressed, const TimeModel& compress_time,
                                       const TimeModel& decompress_time, TaskId before);
  // A gradient's bytes per element as the buckets hold it: its dtype's, or fp32 in Megatron's
  // fp32 gradient buffer (DataParallelSpec::grad_reduce_in_fp32).
  std::int64_t gradient_element_size(const traces::Tensor& gradient) const {
    const auto size = static_cast<std::int64_t>(traces::element_size(gradient.dtype));
    return spec_.grad_reduce_in_fp32 ? std::max<std::int64_t>(size, 4) : size;
  }
  // The parameters' bytes per element (their first's: the 16-bit copies the gathers move).
  int weight_element_size() const {
    return weights_.empty() ? 2 : static_cast<int>(traces::element_size(trace_.tensor(*s_.buffers[weights_.front()].tensor).dtype));
  }
  // The ranks a collective of this transform runs over (its RankGroups, its expert-data group, or
  // the shard group).
  int group_ranks(const Task& c) const {
    if (!c.groups.every_rank()) return c.groups.size;
    if (c.over == traces::ParallelGroup::expert_data) return expert_ranks();
    return shard_ranks();
  }

  static std::string task_name(const char* what, std::size_t index, std::int64_t bytes) {
    return std::string(what) + " " + std::to_string(index) + " (" + std::to_string(bytes) + " B)";
  }
  // The ranks that share one copy of the model state: every rank, or HSDP's shard group.
  int shard_ranks() const { return spec_.fsdp ? spec_.ranks / spec_.fsdp->replicate : spec_.ranks; }
  // The collectives that shard and unshard (RankGroups{} over every rank; HSDP: its shard groups).
  RankGroups shard_groups() const { return shard_ranks() == spec_.ranks ? RankGroups{} : RankGroups{shard_ranks(), 1}; }
  std::string partition_name(const char* what) const { return std::string(what) + " (1/" + std::to_string(shard_ranks()) + ")"; }

  void redirect_all();

  // A framework's own memory-bound kernels on the compute stream (TaskKind::framework), timed
  // on the platform: `bytes` read and written in `launches` kernels. Needs platform_.
  Task framework_kernel(std::string name, double bytes, int launches) const;

  std::int64_t sum_bytes(const std::vector<BufferId>& buffers) const {
    std::int64_t total = 0;
    for (BufferId b : buffers) total += s_.buffers[b].bytes;
    return total;
  }
  // Whether stages 1 and 2 all-gather weight buffer `w` as FP8, one byte an element
  // (DataParallelSpec::float8_parameter_gather), and the bytes its all-gather moves.
  bool gathered_in_fp8(BufferId w) const;
  std::int64_t gathered_bytes(BufferId w) const;

  // ---- data_parallel.cpp

  void find_pass_bounds();
  // The weights (matrices) the forward ops that `scope` converts to float8 read: what FSDP2's
  // float8 all-gather and Megatron's FP8 parameter gather move at one byte an element.
  std::set<traces::TensorIndex> float8_weights(const Float8Scope& scope) const;

  std::vector<std::pair<TaskId, BufferId>> ready_gradients() const;

  // ---- ddp.cpp

  // DDP's copies into and out of its buckets (gradient_as_bucket_view false), on the compute
  // stream.
  std::optional<TaskId> ddp_copy_in(const Bucket& bucket, BufferId bucket_copy, TaskId ready, std::size_t index);
  void ddp_copy_out(BufferId bucket_copy, TaskId last_reduction, TaskId first_optimizer);

  std::vector<Bucket> make_buckets() const;

  std::optional<TaskId> next_compute_after(TaskId t) const {
    for (TaskId u = t + 1; u < n_; ++u) {
      if (s_.tasks[u].stream == Stream::compute) return u;
    }
    return std::nullopt;
  }

  // ---- zero.cpp

  void partition_optimizer_state();

  void partition_parameters();

  void shard_optimizer_tasks();

  void gather_parameters();

  // ZeRO-3's reuse distance: per old buffer, whether a weight's forward copy stays gathered into
  // the backward pass (DataParallelSpec::max_reuse_distance_elements).
  std::vector<bool> kept_for_backward(const std::vector<bool>& is_weight) const;

  // Stages 1 and 2 with overlap_param_gather: the updated parameters' all-gathers per bucket at
  // the iteration's start, each waited for by the first forward op reading one of its parameters.
  void gather_parameters_before_forward();

  // ZeRO-3: the flat input reduce_scatter_coalesced concatenates a bucket's gradients into, if
  // it makes one (none for a lone gradient the ranks divide).
  std::optional<BufferId> coalesced_reduce_scatter_input(const Bucket& bucket, std::size_t index);

  // ZeRO-3 with an offloaded optimizer: a bucket's copies to the host are issued on the
  // reduction's stream; the next reduction waits for them, and the flat input lives through them.
  void order_on_reduce_stream(TaskId reduction, const std::vector<TaskId>& copies, std::optional<BufferId> flat, std::vector<TaskId>& previous);

  // ---- optimizer_offload.cpp

  void make_subgroups();

  std::vector<TaskId> offload_gradients(const Bucket& bucket, TaskId reduction, TaskId ready);

  std::optional<TaskId> step_on_the_host(std::optional<TaskId> last_reduction);

  // Deep Optimizer States: the GPU subgroup whose fp32 state and gradients the fork's step leaves
  // on the GPU for the next iteration (none when a subgroup after it starts a transfer).
  std::optional<std::size_t> carried_subgroup() const;
  struct Carried {
    std::size_t subgroup = 0;
    BufferId state = 0;     // fp32 parameters, momentum and variance
    BufferId gradient = 0;  // the fp32 gradient
  };
  std::optional<Carried> previous_steps_state();

  // ---- fsdp.cpp

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

  // The groups, and the parameters' sizes the sharded state is checked against.
  struct FsdpGroups {
    std::vector<Unit> units;
    std::int64_t weight_elements = 0;
    std::int64_t weight_element_size = 0;
  };
  // One group's buffers for one pass's all-gather.
  struct Gathered {
    BufferId unsharded = 0;
    BufferId all_gather = 0;
    std::optional<BufferId> cast;
    TaskId collective = 0;  // as n + index into added_
  };

  std::int64_t padded_elements(const traces::Tensor& t) const;
  void run_fsdp();
  // After assemble: the first position of the step (the optimizer's kept tasks and the tasks
  // added for the step on the host).
  std::optional<TaskId> step_begin() const;
  FsdpGroups fsdp_groups() const;
  BufferId shard_fsdp_state(const FsdpGroups& groups);
  Gathered gathered_buffers(const Unit& unit, const char* pass);
  TaskId fsdp_all_gather(const Unit& unit, const Gathered& g, const char* pass, std::size_t index, TaskId before, std::vector<TaskId> after,
                         std::vector<BufferId> also_uses, BufferId sharded_parameters);
  std::optional<TaskId> fsdp_copy_out(const Unit& unit, const Gathered& g, const char* pass, std::size_t index, TaskId before);
  std::size_t gather_for_forward(const std::vector<Unit>& units, BufferId sharded_parameters);
  void gather_for_backward(const std::vector<Unit>& units, BufferId sharded_parameters, std::size_t index);
  void reduce_scatter_gradients(const std::vector<Unit>& units);
  void hold_fsdp_buffers();

  // ---- fsdp_offload.cpp (FsdpSpec::cpu_offload)

  void keep_fsdp_state_on_the_host(BufferId sharded_parameters);
  // Adds the host-to-GPU copy of the group's shards before `all_gather` (not yet added), which
  // waits for it and holds its GPU copy.
  void copy_shards_in(const Unit& unit, const char* pass, std::size_t index, TaskId before, Task& all_gather);
  void copy_gradient_shard_out(const Unit& unit, BufferId output, TaskId reduction, TaskId ready, std::int64_t reduce_bytes);
  void step_fsdp_on_the_host(const FsdpGroups& groups);

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
  // ZeRO-3's gradient norm for the offloaded step upcasts the partition to fp64 in parts of at
  // most this many elements (stage3.py@v0.13.3 _constant_buffered_norm2, buffer_size=250000000).
  static constexpr std::int64_t kNormPartElements = 250'000'000;
  static constexpr std::int64_t kFp64Bytes = 8;

  const traces::Trace& trace_;
  const DataParallelSpec& spec_;
  const Platform* platform_ = nullptr;
  std::vector<Subgroup> subgroups_;
  std::map<BufferId, Share> share_;
  std::int64_t total_elements_ = 0;     // of the subgroups
  std::int64_t resident_elements_ = 0;  // of Twin-Flow's GPU subgroups
  std::array<std::optional<TaskId>, 2> last_gradient_copy_;  // the last gradient copy to the host, and back
  std::vector<BufferId> gradients_;
  std::vector<BufferId> weights_;
  std::set<traces::TensorIndex> fp8_gathered_weights_;  // DataParallelSpec::float8_parameter_gather's weights
  std::optional<TaskId> first_optimizer_;
  std::optional<std::pair<std::size_t, std::size_t>> step_added_;  // [first, end) in added_: the step on the host's tasks
  std::optional<TaskId> last_optimizer_;
  TaskId last_backward_ = 0;
  std::optional<BufferId> parameter_partition_;
  std::vector<BufferId> substitute_;                        // per old buffer: its partition, or kKeep
  std::map<BufferId, BufferId> optimizer_substitute_;       // what the optimizer's tasks read instead
  std::map<std::pair<int, BufferId>, BufferId> gathered_;   // ZeRO-3: (pass, parameter) -> its gathered copy
  std::map<TaskId, std::vector<BufferId>> create_at_;       // FSDP2: old task -> buffers it creates (its group's unsharded parameters)
  std::map<TaskId, std::vector<BufferId>> extra_uses_;      // FSDP2: old task -> buffers it holds besides its reads
  std::vector<TaskId> fsdp_gradient_copies_;                // FSDP2's CPU offload: the gradient shards' copies to the host
};

}  // namespace comptrain::models::transform_detail

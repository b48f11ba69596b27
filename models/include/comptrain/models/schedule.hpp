#pragma once
// A schedule: what the simulator replays. A strategy turns a trace into a schedule; the
// simulator executes schedules without knowing which strategy made them.
//
// Tasks run on streams (CUDA stream semantics): each stream runs its tasks one at a time in
// the order they appear in `tasks`; a task also waits for the tasks named in `after` (like
// waiting on a CUDA event recorded when that task ended). Memory lives in buffers: a buffer
// is allocated when the first task that creates it starts and freed when every task that
// uses it has ended, unless it is resident (allocated before the iteration, never freed) or
// held to the end of the iteration (weight gradients).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/models/compression_model.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::models {

// comm: NCCL's communication stream (the data-parallel collectives: DDP's gradient all-reduces,
// ZeRO's reduce-scatters and all-gathers). host: work the host CPU runs for this rank
// (TaskKind::host_compute: ZeRO-Offload's optimizer step), one task at a time like a stream.
// p2p: NCCL's point-to-point stream, the pipeline's sends and receives (TaskKind::send, recv).
// Megatron issues them over the pipeline group (Megatron-LM@d98e8a6
// megatron/core/pipeline_parallel/p2p_communication.py:22-56, torch.distributed.batch_isend_irecv),
// whose NCCL communicator is not the data-parallel group's, and PyTorch's ProcessGroupNCCL runs
// each communicator's work on a stream of its own: a pipeline transfer does not queue behind a
// data-parallel all-reduce, nor one behind it.
// context: context parallelism's ring exchange of K and V (traces::Communication::ring), which
// Transformer Engine issues on streams of its own beside the attention kernels that consume the
// blocks (TE pytorch/attention/dot_product_attention/context_parallel.py:1356, AttnFuncWithCPAndKVP2P;
// shared/reference/parallelism.md §3): it runs beside the attention op and holds up only the op
// after it.
// tensor: tensor parallelism's collectives that Megatron-LM overlaps with the GEMMs after them
// (traces::Communication::overlap; the backward all-reduce or reduce-scatter of an input gradient
// behind the weight-gradient GEMM, layers.py:694-711, and sequence parallelism's all-gather of
// the saved input behind the input-gradient GEMM, :667-680): NCCL's stream beside the compute
// stream, holding up only the op after those it hides behind.
enum class Stream : std::uint8_t { compute, d2h, h2d, codec, comm, host, p2p, context, tensor };
inline constexpr std::size_t kStreamCount = 9;
std::string_view to_string(Stream stream);

// What a buffer holds, for the memory breakdown.
enum class MemoryRole : std::uint8_t {
  input,
  weight,
  weight_copy,  // autocast's lower-precision copies of weights (traces::TensorRole::weight_copy)
  buffer,
  gradient,
  optimizer_state,
  activation,   // saved for backward (original, recomputed or decompressed copy)
  compressed,   // compressed saved activations
  prefetch,     // offloaded activations brought back for the backward pass
  temporary,    // unsaved forward outputs, activation gradients, workspace
};
inline constexpr std::size_t kMemoryRoleCount = 10;
std::string_view to_string(MemoryRole role);
MemoryRole memory_role_of(traces::TensorRole role);

using BufferId = std::size_t;
using TaskId = std::size_t;

// The CUDA stream a buffer is allocated on, as PyTorch's caching allocator sees it: a block
// freed by one stream is cached for that stream's requests only (sim/caching_allocator.hpp).
// `current`: the stream the training code runs on, which every buffer of a strategy's schedule
// is allocated on (a side stream's copy or kernel writes into memory the code allocated before
// launching it). FSDP2 allocates on two streams of its own (models/transforms/README.md, "FSDP2"):
// its all-gather buffers on the all-gather copy-in stream, its reduce-scatter outputs (the
// sharded gradients) on the reduce-scatter stream. DeepSpeed ZeRO-3 allocates the flat input of
// its coalesced reduce-scatter on its reduce_and_partition_stream (zero_reduce).
enum class AllocationStream : std::uint8_t { current, fsdp_all_gather, fsdp_reduce_scatter, zero_reduce };
std::string_view to_string(AllocationStream stream);

struct Buffer {
  std::string name;
  std::int64_t bytes = 0;
  MemoryRole role = MemoryRole::temporary;
  bool resident = false;     // allocated before the iteration starts, never freed
  bool held_to_end = false;  // once allocated, kept until the iteration ends
  std::optional<traces::TensorIndex> tensor;  // the trace storage it holds (a copy of), if any
  AllocationStream allocation_stream = AllocationStream::current;
};

enum class TaskKind : std::uint8_t {
  op,          // a trace op as recorded
  recompute,   // a forward op replayed in the backward pass to rebuild dropped activations
  offload,     // device -> host copy of an activation
  prefetch,    // host -> device copy of an offloaded activation
  compress,    // compress an activation in GPU memory
  decompress,  // decompress it before its backward use
  collective,  // a collective over the data-parallel group (Task::collective says which)
  // Work on the host CPU (Stream::host only): `seconds` is its duration with the whole host of
  // the node to itself; the replay runs it on the node's host, shared with the node's other
  // ranks' host tasks (ZeRO-Offload's CPU Adam: models/transforms/README.md).
  host_compute,
  // One end of a pipeline-parallel transfer (Stream::p2p only; Task::message names it, Task::bytes
  // is its payload): a send of a boundary tensor to the peer stage, or the matching receive, which
  // allocates the received tensor (its `creates`).
  send,
  recv,
  // A framework's own memory-bound kernel beside the trace's ops, on a GPU stream, its `seconds`
  // set by the transform that adds it (FSDP2's copy-out after an all-gather and copy-in before
  // a reduce-scatter: models/transforms/README.md, "FSDP2").
  framework,
};
inline constexpr std::size_t kTaskKindCount = 11;
std::string_view to_string(TaskKind kind);

// A collective as NCCL runs it over every rank of the data-parallel group. Its size is counted as
// nccl-tests counts it (doc/PERFORMANCE.md): all_reduce, the buffer each rank holds; reduce_scatter,
// the whole input (each rank keeps 1/p of it); all_gather, the whole output (each rank gives 1/p);
// all_to_all, the buffer each rank sends (or receives, the larger of the two), of which it sends
// 1/p to each of the p ranks, itself included (nccl-tests' alltoall_perf: sendcount = count / p to
// every peer). Expert parallelism's token dispatch and combine (Megatron-LM's alltoall dispatcher).
enum class CollectiveKind : std::uint8_t { all_reduce, reduce_scatter, all_gather, all_to_all };
std::string_view to_string(CollectiveKind kind);
// The kind to_string names ("all_gather"); nullopt for any other text. kCollectiveKindChoices lists
// them for messages.
std::optional<CollectiveKind> parse_collective_kind(std::string_view text);
inline constexpr std::string_view kCollectiveKindChoices = "all_reduce, reduce_scatter, all_gather or all_to_all";

// The ranks a collective runs over, as one dimension of a row-major device mesh: the run's ranks
// fall into groups of `size` ranks `stride` apart (rank r's group: base + k x stride for k < size,
// base = r - r mod (size x stride) + r mod stride), and every group runs the collective at once,
// each over its own NCCL communicator. size 0: one group of every rank (data parallelism over the
// whole run). HSDP's shard groups are {S, 1} (S consecutive ranks, within a node when S divides its
// GPUs) and its replicate groups {R, S} (the ranks holding the same shard); Megatron's tensor,
// data and pipeline groups are dimensions of the same kind.
struct RankGroups {
  int size = 0;
  int stride = 1;
  bool every_rank() const { return size == 0; }
  friend bool operator==(const RankGroups&, const RankGroups&) = default;
};

// What a send or recv task carries between two pipeline stages (shared/reference/parallelism.md §2:
// one [s, b, h] tensor per micro-batch and stage boundary each way). The two ends of a transfer
// carry equal messages but for `peer`, which names the other end, so the replay pairs a send of
// rank r to peer q with the recv of rank q from peer r whose other fields are equal.
struct PipelineMessage {
  int peer = 0;           // the pipeline rank at the other end (an index into the pipeline group)
  bool gradient = false;  // the backward pass's message (the gradient of a boundary activation), else the forward's activation
  int micro_batch = 0;
  int chunk = 0;          // the sending stage's model chunk on its rank (models/pipeline_parallel.hpp)
  friend bool operator==(const PipelineMessage&, const PipelineMessage&) = default;
};

struct Task {
  std::string name;
  TaskKind kind = TaskKind::op;
  Stream stream = Stream::compute;
  std::optional<traces::OpIndex> op;          // op and recompute tasks
  std::optional<traces::TensorIndex> tensor;  // the activation storage a copy or codec task moves
  double seconds = 0;                         // duration of exec tasks (op, recompute, codec, host_compute)
  // GPU tasks: the power the GPU draws while the task runs (models/kernel_power.hpp, through
  // OpTimeModel::run for op and recompute tasks); 0 = unknown: the GPU's busy power (its TDP, or its
  // power limit below it).
  double watts = 0;
  // CPU time the launching thread spends issuing the task (eager PyTorch's per-op dispatch and
  // kernel launch); 0: issued at once. The replay's launching thread issues tasks in `tasks` order.
  double host_seconds = 0;
  std::int64_t bytes = 0;                     // payload of copy tasks (offload, prefetch), collectives (CollectiveKind's size), send and recv
  std::optional<CollectiveKind> collective;   // collective tasks: which one
  std::optional<PipelineMessage> message;     // send and recv tasks: which transfer
  RankGroups groups;                          // collective tasks: over which ranks (default: all of them)
  // Collective tasks: the model-parallel layout's group whose ranks `groups` divides (`groups` {}:
  // the whole group). The transforms write groups within their own group (data parallelism, the
  // trace's tensor-parallel collectives); place_collectives (transform_schedule.hpp) maps them
  // onto the run's ranks once the layout is known.
  traces::ParallelGroup over = traces::ParallelGroup::data;
  // Copy tasks: the host side is pageable memory, so the driver stages the copy through its
  // pinned buffers and the host's memcpy (the platform's host_link.pageable_bandwidth) is in
  // the path as well as the link.
  bool pageable = false;
  // The launching thread waits until this task has ended before it issues the next (a
  // synchronous call: a copy to or from pageable host memory).
  bool blocks_host = false;
  std::vector<BufferId> creates;              // allocated when the task starts
  std::vector<BufferId> uses;                 // held until the task ends (creates need not be repeated)
  std::vector<TaskId> after;                  // tasks of other streams that must end first
};

// Per profile-driven compress rule: how many storages it compressed, and how many of those had
// their ratio from the value features the trace gives (traces/FORMAT.md, "values") over their
// class's defaults. When a class had any, its entry in CompressionModelUse::ratios is the
// byte-weighted mean (its bytes / its compressed bytes), not a ratio every tensor got.
struct CompressionFeatureUse {
  std::size_t rule = 0;
  std::size_t storages = 0;
  std::size_t with_features = 0;
};

struct Schedule {
  std::string strategy;  // a short description, for reports
  std::vector<CompressionModelUse> compression;  // per profile-driven compress rule: the costs it applied, for reports
  std::vector<CompressionFeatureUse> compression_features;  // the same rules, in the same order
  std::vector<Buffer> buffers;
  std::vector<Task> tasks;

  // Throws std::logic_error if a reference is out of range, a task's fields do not fit its kind
  // (an op task without its op, a collective without its kind, host work off the host stream, a
  // send or recv off the p2p stream or without its message), a stream's order contradicts an
  // `after` edge, or the waits form a cycle (the replay would deadlock).
  void validate() const;
};

// Static replay: runs the tasks one at a time in `tasks` order (no overlap) and returns the
// peak of allocated bytes. A lower bound check for strategies; the simulator gives the real
// time-dependent peak.
std::int64_t sequential_peak_bytes(const Schedule& schedule);

}  // namespace comptrain::models

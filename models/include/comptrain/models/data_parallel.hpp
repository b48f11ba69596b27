#pragma once
// Data parallelism as a schedule transform: one rank's iteration when `ranks` GPUs each train a
// replica on their own micro-batch and reduce the gradients, as PyTorch's DDP does (stage 0) or
// as DeepSpeed's ZeRO does with the model state sharded over the ranks (stages 1 to 3). Every
// rank runs the same schedule, so one rank's schedule describes them all; the collectives it
// gains (models::TaskKind::collective on Stream::comm) are run over the whole group by the
// replay's network (sim/). models/transforms/README.md tells what each stage changes and the
// sources.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/models/collective_compression.hpp"
#include "comptrain/models/op_time.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::models {

// ZeRO-Offload: the optimizer state and its step on the host CPU (DeepSpeed's
// zero_optimization.offload_optimizer with device: cpu, deepspeed/runtime/zero/offload_config.py),
// optionally with Deep Optimizer States' interleaved GPU updates (the DataStates/DeepSpeed fork,
// branch deep-optimizer-states, the same section's keys). models/transforms/README.md tells the
// schedule and its sources.
struct OptimizerOffloadSpec {
  // offload_optimizer.ratio (Twin-Flow, ZeRO-3 only): the first int(ratio x subgroups) subgroups
  // are stepped on the CPU, the others keep their fp32 state on the GPU and step there
  // (stage3.py@38327e07 lines 851-858). Default 1: all on the CPU.
  double ratio = 1.0;
  // prefetch_optimizer (Deep Optimizer States, ZeRO-3 only): subgroup x is stepped on the GPU when
  // x % k != 0 and (x + 1) % k == 0, k = prefetch_optimizer_gap (the fork's
  // get_opt_update_device): its fp32 parameters, momentum and variance are copied to the GPU while
  // the CPU steps the subgroups before it, and back after.
  bool prefetch_optimizer = false;
  int prefetch_optimizer_gap = 0;
  // part_grads_async (the fork): the fp32 gradient copies to the host do not block the launching
  // thread (PyTorch then converts to fp32 on the GPU and copies 4 bytes per element).
  bool part_grads_async = false;
  friend bool operator==(const OptimizerOffloadSpec&, const OptimizerOffloadSpec&) = default;
};

// Where the optimizer steps, for reports: "GPU" (nullopt), "CPU" (ZeRO-Offload), "CPU 75%"
// (Twin-Flow: that share of the subgroups on the CPU), "DOS k=3" (Deep Optimizer States, gap 3).
std::string optimizer_place(const std::optional<OptimizerOffloadSpec>& offload);

// The optimizer step DeepSpeedCPUAdam runs per parameter (microsoft/DeepSpeed@38327e07,
// csrc/includes/cpu_adam.h, Adam_Optimizer::Step_AVX lines 159-191):
//  - FLOPs: AdamW's decay (an FMA: 2), the first moment (a multiply and an FMA: 3), the second
//    (two multiplies and an FMA: 4), sqrt, the FMA with the bias correction and epsilon, the
//    division (4) and the update's FMA (2): 15, a multiply-add counting 2 as everywhere;
//  - host memory: it loads the fp32 gradient, exp_avg, exp_avg_sq and parameter (16 bytes) and
//    stores the parameter, exp_avg and exp_avg_sq (12 bytes); then the updated fp32 parameter is
//    converted to the GPU's 16-bit copy on the CPU (4 bytes read, 2 written): a blocking
//    CPU-to-GPU copy_ with a dtype change converts on the CPU (PyTorch,
//    aten/src/ATen/native/cuda/Copy.cu, copy_kernel_cuda), as stage3.py's
//    _reassign_or_swap_out_partitioned_parameters and stage_1_and_2.py's step do, and the fork's
//    downsample_fp32_fp16 (`.half()` on the host). 34 bytes per parameter.
inline constexpr double kCpuAdamFlopsPerParameter = 15;
inline constexpr double kCpuAdamBytesPerParameter = 34;
// Bytes per parameter of DeepSpeed's fp32 optimizer state: the fp32 master copy, exp_avg and
// exp_avg_sq (the three fp32 arrays Step_AVX updates), what Deep Optimizer States moves between
// host and GPU for a subgroup stepped on the GPU (the fork's opt_transfers: p, m and v copiers).
inline constexpr std::int64_t kFp32AdamStateBytesPerParameter = 12;

// Seconds DeepSpeedCPUAdam takes to step `parameters` parameters with the whole host to itself:
// a roofline over the host's FLOP/s and memory bandwidth, parameters x max(15 / flops, 34 /
// memory_bandwidth). The node's GPUs share the host: the replay runs the step of each of the
// node's ranks at once on it (sim/README.md), so each takes this times the ranks on the node.
// Throws std::invalid_argument when the host has no FLOP/s or memory bandwidth.
double cpu_adam_seconds(std::int64_t parameters, const HostSpec& host);

// PyTorch FSDP2 (torch.distributed.fsdp.fully_shard, the per-parameter sharding torchtitan
// uses) in place of DeepSpeed's ZeRO-3: the same model state per GPU, held and communicated the
// way FSDP2 does it (models/transforms/README.md, "FSDP2"): parameters gathered and gradients
// reduce-scattered per parameter group (a fully_shard unit), each unit's all-gather buffers and
// sharded gradients allocated on FSDP2's own streams, the root group never resharded after
// forward. Needs zero_stage 3 (the sharding).
struct FsdpSpec {
  // fully_shard is applied to each module instance these module patterns name
  // (models/module_pattern.hpp; torchtitan: each transformer block, `model.layers.*`), then to
  // the root module: each instance's parameters are one group, every other parameter is the
  // root's. Weights and gradients belong to the instance their trace name lies in.
  std::vector<std::string> units;
  // reshard_after_forward of the units (the root is never resharded after forward: FSDPState's
  // _lazy_init sets its post_forward_mesh_info to None). all_but_last: torchtitan's choice
  // (parallelize_llama.py apply_fsdp: the last transformer block keeps its parameters, which the
  // backward pass needs first).
  enum class Reshard { all, none, all_but_last };
  Reshard reshard_after_forward = Reshard::all;
  // Bytes per element of the sharded parameters (the model's original dtype, which FSDP2 keeps
  // sharded: fp32, 4) and of the reduce-scatter (MixedPrecisionPolicy.reduce_dtype, fp32 in
  // torchtitan: 4; the reduced gradient shards are kept in it; 0: unset, PyTorch's default, the
  // gradients' own dtype). The unsharded parameters and the gradients autograd computes are in
  // the trace's weights' dtype (MixedPrecisionPolicy.param_dtype).
  int sharded_parameter_bytes = 4;
  int reduce_bytes = 0;
  // HSDP (FSDP2 on a 2-D device mesh (replicate, shard); FSDP1's HYBRID_SHARD; torchtitan's
  // data_parallel_replicate_degree): the ranks form `replicate` groups of ranks / replicate
  // consecutive ranks; parameters, gradients and optimizer state are sharded within a group
  // (all-gathers and reduce-scatters over the shard groups, RankGroups{S, 1}) and replicated
  // across groups: after each reduce-scatter the gradient shard is all-reduced, in place, over the
  // ranks that hold the same shard (RankGroups{R, S}), at every micro-step (FSDP2's default,
  // set_requires_all_reduce(True): torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py,
  // foreach_reduce, PyTorch 2.6). 1: plain FSDP, one shard group of every rank.
  int replicate = 1;
  // offload_policy=CPUOffloadPolicy(pin_memory) (torchtitan: training.enable_cpu_offload), as
  // pytorch/pytorch@010ae4a8 torch/distributed/fsdp/_fully_shard/ does it
  // (models/transforms/README.md, "FSDP2's CPU offload"): the sharded parameters, their gradients
  // and so the optimizer state live on the host; each all-gather first copies its group's
  // shards to the GPU, each reduce-scatter's shard is copied back, the step runs on the CPU.
  struct CpuOffload {
    // CPUOffloadPolicy.pin_memory (default True): pinned host shards; false: pageable, so each
    // copy is staged by the driver and blocks the launching thread.
    bool pin_memory = true;
    // How torch.optim steps the CPU shards: fused=True runs ATen's CPU fused AdamW kernel;
    // otherwise the for-loop (no foreach kernels on the CPU). torch_cpu_adamw_seconds.
    bool fused_step = false;
    friend bool operator==(const CpuOffload&, const CpuOffload&) = default;
  };
  std::optional<CpuOffload> cpu_offload;
  // torchao's float8 all-gather (training.float8.fsdp_all_gather; Float8Scope::fsdp_all_gather):
  // the weights of the linears this scope converts are gathered in float8, one byte an element in
  // the all-gather, its buffer and the unsharded parameters; unset: every weight in param_dtype.
  std::optional<Float8Scope> float8_all_gather;
  friend bool operator==(const FsdpSpec&, const FsdpSpec&) = default;
};

// torch.optim's AdamW stepping fp32 parameters on the CPU, per parameter (FSDP2's CPU offload):
//  - fused=True: ATen's CPU kernel (pytorch/pytorch@aa26438a
//    aten/src/ATen/native/cpu/FusedAdamKernel.cpp, adam_math for float): one pass that loads the
//    parameter, gradient, exp_avg and exp_avg_sq (16 bytes) and stores the parameter, exp_avg and
//    exp_avg_sq (12 bytes): 28 bytes;
//  - otherwise _single_tensor_adamw, one ATen op per line (foreach is not chosen on the CPU:
//    torch/optim/optimizer.py _default_to_fused_or_foreach takes foreach only on
//    _get_foreach_kernels_supported_devices(), CUDA-like devices): param.mul_(1 - lr * wd) (8
//    bytes), exp_avg.lerp_(grad) (12), exp_avg_sq.mul_(beta2) (8), .addcmul_(grad, grad) (12),
//    exp_avg_sq.sqrt() (8), / bias_correction2_sqrt (8), .add_(eps) (8), param.addcdiv_(exp_avg,
//    denom) (16): 80 bytes (pytorch/pytorch@dc80ccde torch/optim/adam.py _single_tensor_adam, the
//    same lines, with AdamW's decoupled decay first).
//  - FLOPs: the same arithmetic as DeepSpeed's kernel, kCpuAdamFlopsPerParameter.
inline constexpr double kTorchCpuAdamWFusedBytesPerParameter = 28;
inline constexpr double kTorchCpuAdamWForLoopBytesPerParameter = 80;
// Seconds for `parameters` with the whole host to itself: parameters x max(15 / flops, bytes /
// memory_bandwidth), as cpu_adam_seconds. Throws std::invalid_argument when the host has no
// FLOP/s or memory bandwidth.
double torch_cpu_adamw_seconds(std::int64_t parameters, bool fused, const HostSpec& host);

// A DDP communication hook (DistributedDataParallel.register_comm_hook) that compresses each
// gradient bucket before its all-reduce. fp16 and bf16: PyTorch's fp16_compress_hook and
// bf16_compress_hook (torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py,
// _compress_hook): the bucket cast to the 16-bit type and divided by the world size (two kernels
// on the current stream, into a half-size tensor), all-reduced, then copied back into the bucket
// in place (`decompress`, the future's callback). Where the gradients already have that type the
// cast returns the bucket itself (no copy, no temporary) and the copy back copies it onto itself
// (a no-op).
//
// powersgd: PowerSGD (Vogels et al., NeurIPS 2019; PyTorch's powerSGD_hook.py, steady state after
// start_powerSGD_iter, error feedback and warm start on, their defaults). Each bucket's matrices
// M (a gradient viewed as shape[0] x the rest) worth compressing ((n + m) r x min_compression_rate
// < n m) are sent as P = M Q (n x r) and Q = M^T P (m x r), the rest all-reduced as one
// contiguous tensor; see models/transforms/README.md, "DDP's compression hooks".
enum class DdpCommHook { none, fp16, bf16, powersgd };
std::string_view to_string(DdpCommHook hook);  // "none", "fp16", "bf16", "powersgd"

// PowerSGDState's two size parameters (torch/distributed/algorithms/ddp_comm_hooks/
// powerSGD_hook.py: matrix_approximation_rank 1, min_compression_rate 2).
struct PowerSgdSpec {
  int rank = 1;
  double min_compression_rate = 2;
};

struct DataParallelSpec {
  int ranks = 1;       // GPUs in the data-parallel group; 1: the schedule is left as it is
  int zero_stage = 0;  // 0: PyTorch DDP (full replicas); 1, 2, 3: DeepSpeed ZeRO

  // DDP (torch.nn.parallel.DistributedDataParallel). bucket_cap_mb=25 is 25 MiB and the first
  // bucket holds 1 MiB (torch/nn/parallel/distributed.py: bucket_cap_mb default 25,
  // dist._DEFAULT_FIRST_BUCKET_BYTES = 1024 * 1024).
  std::int64_t bucket_cap_bytes = std::int64_t{25} << 20;
  std::int64_t first_bucket_bytes = std::int64_t{1} << 20;
  // false (DDP's default): the buckets are a second copy of the gradients, allocated when DDP
  // wraps the model and kept; true: the gradients are views into the buckets.
  bool gradient_as_bucket_view = false;
  DdpCommHook comm_hook = DdpCommHook::none;
  // Megatron-LM's DistributedDataParallelConfig.grad_reduce_in_fp32 (--accumulate-allreduce-grads-in-fp32,
  // which megatron/training/arguments.py turns on for every --bf16 run): the gradients are
  // accumulated in an fp32 buffer (main_grad, the weight-gradient GEMMs writing into it) and its
  // buckets reduced in fp32, so 16-bit gradients take 4 bytes per element in memory, in the
  // buckets and on the wire. DDP and ZeRO-1 (Megatron's DDP and distributed optimizer), without
  // a comm_hook or compression.
  bool grad_reduce_in_fp32 = false;
  PowerSgdSpec powersgd;  // with comm_hook powersgd

  // ZeRO (DeepSpeed's zero_optimization section, deepspeed/runtime/zero/config.py defaults):
  // reduce_bucket_size 5e8 elements; overlap_comm false (the reductions hold the compute stream:
  // the next kernel waits for each one). With overlap_comm stage 1 too reduces each bucket as soon
  // as its gradients are final (in the last micro-step), on the comm stream, and only the
  // optimizer step waits: DeepSpeed's backward hooks (stage_1_and_2.py, "if
  // self.partition_gradients or self.overlap_comm: self.create_reduce_and_remove_grad_hooks()")
  // and Megatron-LM's --overlap-grad-reduce with its distributed optimizer (README.md, "Gradient
  // accumulation").
  std::int64_t reduce_bucket_elements = 500'000'000;
  bool overlap_comm = false;
  // Megatron-LM's --overlap-param-gather (stages 1 and 2, the optimizer on the GPU): the updated
  // parameters are not all-gathered after the optimizer step but at the next iteration's start,
  // one all-gather per bucket of reduce_bucket_elements (the parameters in forward order), and
  // the first forward op that reads a parameter of a bucket waits for that bucket's gather
  // (models/transforms/README.md, "Overlapped parameter all-gather").
  bool overlap_param_gather = false;
  // Megatron-LM's --fp8-param-gather (training.float8.fp8_weights, stages 1 and 2): the weights
  // of the linears this scope converts are FP8 tensors, which the distributed optimizer keeps in a
  // buffer of their own, one byte an element (megatron/core/distributed/param_and_grad_buffer.py
  // at NVIDIA/Megatron-LM@d98e8a64, group_params_for_buffers: "torch.uint8 for FP8/NVFP4
  // parameters"), so their all-gathers move one byte an element, in buckets apart from the
  // 16-bit parameters'. Unset: every parameter at its dtype.
  std::optional<Float8Scope> float8_parameter_gather;
  // sub_group_size (deepspeed/runtime/zero/config.py@38327e07 line 168: 1e9 elements): ZeRO-3
  // steps the optimizer one subgroup of whole parameters at a time (stage3.py
  // _create_fp16_sub_groups: parameters are added until a subgroup holds at least this many
  // elements of this rank's partition). Only ZeRO-3 with an offloaded optimizer is affected here.
  std::int64_t sub_group_elements = 1'000'000'000;
  // stage3_max_reuse_distance (deepspeed/runtime/zero/config.py@38327e07 line 237: 1e9
  // elements): ZeRO-3 keeps a gathered parameter instead of releasing it when the modules that
  // run before its next use hold fewer parameter elements than this
  // (partitioned_param_coordinator.py __params_to_release, lines 543-552). Here: a parameter
  // gathered for the forward pass stays gathered into the backward pass (not gathered again)
  // when the weights the ops between its last forward and first backward use read hold fewer
  // elements -- with activation checkpointing, the last layers and the output layer. 0: never.
  std::int64_t max_reuse_distance_elements = 1'000'000'000;
  // offload_optimizer with device cpu (stages 1 to 3); unset: the optimizer stays on the GPU.
  std::optional<OptimizerOffloadSpec> offload_optimizer;
  // ZeRO++ (Wang et al., arXiv 2306.10209; DeepSpeed's zero_optimization keys, stage 3 only).
  // zero_hpz_partition_size (hpZ): each group of this many consecutive ranks keeps a secondary
  // partition of the parameters (their 16-bit bytes / the size, on every rank: kept for the
  // iteration here), from which the backward pass all-gathers within the group; 1: off.
  // zero_quantized_weights (qwZ): every other parameter all-gather moves int8 values (a
  // quantization kernel before it, a dequantization after it), half of 16-bit weights' bytes.
  // zero_quantized_gradients (qgZ): the gradients of more than one dimension that 2 x ranks
  // divides are reduced by two all-to-alls of int4 values instead of the reduce-scatter: within
  // each node of ranks_per_node consecutive ranks, then among the ranks of one local index
  // across the nodes, each followed by a reduction kernel (DeepSpeed's all_to_all_quant_reduce;
  // models/transforms/README.md, "ZeRO++"). The vectors keep their reduce-scatter, and one node
  // (ranks_per_node >= ranks) falls back to it as DeepSpeed does.
  int hpz_partition_size = 1;
  bool quantized_weights = false;
  bool quantized_gradients = false;
  // The GPUs of a node in this data-parallel group (DeepSpeed's local_world_size, the node's
  // device count): qgZ's first all-to-all runs over them. 0: unknown (qgZ needs it).
  int ranks_per_node = 0;
  // Error-bounded compressed collectives (collective_compression.hpp; the scenario's
  // parallelism.compression): the gradient all-reduces (DDP) or reduce-scatters (ZeRO) and the
  // parameter all-gathers move codec-compressed chunks around the ring, each reduction step
  // decompressing, adding and recompressing. Not with a DDP comm_hook, qwZ, qgZ or FSDP.
  std::optional<CollectiveCompressionSpec> compression;
  // PyTorch FSDP2 instead of DeepSpeed (zero_stage 3, no offloaded optimizer); the DeepSpeed
  // fields above (buckets, overlap_comm, sub_group_size) do not apply.
  std::optional<FsdpSpec> fsdp;
  // Expert parallelism (models/transforms/README.md, "Expert parameters"): the ranks that hold the
  // same experts, Megatron-LM's expert-data-parallel group (D x C / E; ParallelGroup::expert_data).
  // The expert parameters' gradients (is_expert_parameter) go into buckets of their own, reduced
  // over that group (their collectives' `over`), and ZeRO-1 shards their optimizer state and
  // all-gathers their updated values over it; the other parameters' over the `ranks` of the data
  // group. 0: the same as ranks (no expert parallelism). Below `ranks` only with zero_stage 0 or 1,
  // without an offloaded optimizer or FSDP.
  int expert_ranks = 0;
};

// The float8_parameter_gather `spec` takes under a run's float8 scope: the scope when its weights
// are FP8 (Float8Scope::fp8_weights) and `spec` is ZeRO stage 1 or 2 without FSDP or compressed
// collectives; unset otherwise (those gather the weights' 16 bits).
std::optional<Float8Scope> float8_parameter_gather_for(const DataParallelSpec& spec, const std::optional<Float8Scope>& float8);

// Whether a trace tensor belongs to an expert of a mixture-of-experts layer -- its weight,
// gradient or optimizer state -- by its module name: the zoo names every routed expert's
// parameters `<layer>.<moe module>.experts.<e>.<linear>.weight` (Hugging Face's and
// Megatron-LM's `experts` module), and what derives from a parameter keeps its name as prefix.
// The router (`gate`), the shared expert (`shared_expert.`) and the norms are not experts.
bool is_expert_parameter(std::string_view tensor_name);

// InputError-free check of a spec built in code (compression: check_collective_compression, and
// not with a comm_hook, quantized_weights, quantized_gradients or fsdp; quantized_gradients: stage 3
// without fsdp, ranks_per_node >= 1 dividing ranks; grad_reduce_in_fp32: stage 0 or 1 without
// fsdp, a comm_hook or compression): ranks >= 1, zero_stage 0..3, positive sizes; an
// offloaded optimizer needs ZeRO (stage >= 1), a ratio in [0, 1] and below 1 only with stage 3,
// and prefetch_optimizer needs stage 3, ratio 1 and a gap >= 1; fsdp needs stage 3, no offloaded
// optimizer, valid unit patterns and element sizes of 1 to 8 bytes; overlap_param_gather needs
// stage 1 or 2 without an offloaded optimizer; fsdp's cpu_offload needs the
// platform (apply_data_parallel's overload with one). Throws std::invalid_argument naming the field.
void check_data_parallel(const DataParallelSpec& spec);

// Whether the gradients are reduced at every micro-step of gradient accumulation, so that
// transform_schedule applies data parallelism before accumulation (transform_schedule.hpp):
//  - ZeRO-2 and 3: DeepSpeed communicates at every micro-step (microsoft/DeepSpeed@38327e07,
//    deepspeed/runtime/engine.py lines 2051-2053, allreduce_gradients: "ZeRO stage >= 2
//    communicates during non gradient accumulation boundaries as well";
//    zero/stage_1_and_2.py line 1425, reduce_ready_partitions_and_remove_grads reduces when
//    partition_gradients) and accumulates into its gradient partition (zero/stage3.py lines
//    1481-1487, partition_grads: copy at micro-step 0, add_ after); stage 3 releases each
//    gathered parameter after its use in every micro-step;
//  - FSDP2: every backward's post_backward reshards and reduce-scatters (pytorch/pytorch@012c62d6,
//    torch/distributed/_composable/fsdp/_fsdp_param_group.py, FSDPParamGroup: reduce_scatter_grads
//    defaults to True, set_requires_gradient_sync(False) being the no-sync variant) and adds the
//    new shard into the sharded gradient (@01d66d21 _fsdp_collectives.py, foreach_reduce_scatter:
//    `fsdp_param.sharded_param.grad += new_sharded_dtensor_grad`);
//    With an offloaded optimizer stages 2 and 3 copy each micro-step's reduced gradients to the
//    host too (stage_1_and_2.py copy_grads_in_partition: async_accumulate_grad_in_cpu_via_gpu
//    when gradient_accumulation_steps > 1; stage3.py partition_grads, the host buffer);
//  - not DDP (no_sync() in the earlier micro-steps) nor ZeRO-1 (engine.py lines 2055-2059: only
//    at gradient accumulation boundaries).
bool reduces_every_micro_step(const DataParallelSpec& spec);

// One rank's schedule under `spec` (models/transforms/README.md):
//  - gradients are grouped into buckets in the order the backward pass makes them ready (DDP
//    rebuilds its buckets in that order after the first iteration; DeepSpeed fills its bucket in
//    that order) and each bucket is all-reduced (stage 0) or reduce-scattered (stages 1 to 3) on
//    the comm stream once its last gradient is ready (stage 1 without overlap_comm: after the
//    whole backward pass);
//  - the optimizer waits for every reduction; under ZeRO it updates 1/ranks of the parameters
//    (its tasks take 1/ranks of their time) and stages 1 and 2 all-gather the updated parameters
//    (with overlap_param_gather: per bucket at the iteration's start, before the forward ops that
//    read them);
//  - memory: DDP's bucket copy unless gradient_as_bucket_view; the optimizer state (stage >= 1),
//    the gradients (>= 2, with DeepSpeed's reduction bucket) and the parameters (3) are held as
//    1/ranks partitions; stage 3 all-gathers each op's parameters before its forward and its
//    backward use (one op ahead) into buffers freed after their last use.
//  - with offload_optimizer (also on one rank), the optimizer's tasks are replaced by the step on
//    the host (models/transforms/README.md, "Optimizer offload"): each reduced gradient is copied
//    to the host during the backward pass, DeepSpeedCPUAdam steps each subgroup on the host
//    (TaskKind::host_compute on Stream::host, cpu_adam_seconds on `platform.host`) and its
//    updated 16-bit parameters are copied back; the fp32 state is not in GPU memory. Twin-Flow's
//    and Deep Optimizer States' GPU subgroups step on the GPU for the optimizer's kernel time
//    scaled to their share of the parameters.
//  - with fsdp, FSDP2's schedule instead of ZeRO-3's (models/transforms/README.md, "FSDP2").
// Apply it after build_schedule and before the framework's gradient lifetime. The overload
// without a platform refuses an offloaded optimizer (std::invalid_argument): its step needs the host.
// Returns the position of the optimizer step's first task in the new schedule (the tasks from it
// on are the step's: the optimizer's kernels or the step on the host, then stages 1 and 2's
// all-gather), which gradient accumulation applied after it leaves out of the micro-steps; none
// when the schedule is left as it is or has no optimizer.
std::optional<TaskId> apply_data_parallel(Schedule& schedule, const traces::Trace& trace, const DataParallelSpec& spec);
std::optional<TaskId> apply_data_parallel(Schedule& schedule, const traces::Trace& trace, const DataParallelSpec& spec, const Platform& platform);

}  // namespace comptrain::models

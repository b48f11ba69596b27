#pragma once
// Model-state memory under ZeRO data parallelism, two ways:
//
// 1. The ZeRO paper's per-GPU bytes (Rajbhandari, Rasley, Ruwase, He, "ZeRO: Memory Optimizations
//    Toward Training Trillion Parameter Models", SC20, arXiv 1910.02054, §5 and Figure 1), with
//    Ψ parameters, N data-parallel ranks and K bytes of optimizer state per parameter:
//      stage 0 (plain DDP)          (2 + 2 + K)·Ψ
//      stage 1 (P_os)               2Ψ + 2Ψ + K·Ψ/N
//      stage 2 (P_os+g)             2Ψ + (2 + K)·Ψ/N
//      stage 3 (P_os+g+p)           (2 + 2 + K)·Ψ/N
//    The paper's 2 and 2 are fp16 parameters and gradients; here they are the precision's
//    parameter and gradient bytes (bytes_per_parameter), so the same formulas hold for the
//    precisions comptrain's zoo trains in.
//
// 2. DeepSpeed's own estimator, `estimate_zero2_model_states_mem_needs` and
//    `estimate_zero3_model_states_mem_needs` (deepspeed/runtime/zero/stage_1_and_2.py and
//    stage3.py, microsoft/DeepSpeed@38327e07f6cd39b63418f60cedd1651b0be3e7c3), computed the way
//    that Python code computes it (same operations, same double rounding, same truncation by
//    int()), with its cpu-offload variants, additional_buffer_factor and ZeRO-3's largest-layer
//    term. It is what DeepSpeed users compare against (docs/code-docs/source/memory.rst).
//
// Both count model states only: no activations, temporaries, communication buckets or allocator
// overhead.

#include <cstdint>

namespace comptrain::models::zero {

// Bytes one parameter costs in each model state on one replica, before any sharding.
struct BytesPerParameter {
  std::int64_t parameter = 0;  // the copy forward and backward read
  std::int64_t gradient = 0;
  std::int64_t optimizer = 0;  // the paper's K: optimizer states plus an fp32 master copy if any
};

// How model states are stored, grouping comptrain's zoo precisions (traces/zoo/README.md,
// "Precision"): what matters here is only the bytes of parameters, gradients and optimizer state.
enum class StatePrecision {
  fp32,   // zoo `fp32` (and `tf32`): 4-byte parameters, gradients and optimizer states
  amp,    // zoo `amp-fp16`/`amp-bf16`: the same fp32 states as fp32 (autocast's 16-bit weight
          // copies live within one forward/backward and are not model state)
  half,   // zoo `fp16`/`bf16` (model.half()/bfloat16()): everything 2 bytes, optimizer states too
  mixed,  // zoo `mixed`, the ZeRO paper's mixed precision (Megatron-LM, Apex O2, DeepSpeed's fp16
          // and bf16 modes): 2-byte parameters and gradients, an fp32 master copy and fp32 states
};

// The optimizer, by how many parameter-sized states it keeps.
enum class OptimizerKind {
  sgd,       // no state
  momentum,  // one momentum buffer
  adam,      // two (m and v); AdamW and LAMB alike
};

// Bytes per parameter for a precision and optimizer. The sources:
// - mixed + adam is the ZeRO paper's 2 + 2 + 12 (§3.1: fp16 parameters and gradients, fp32
//   parameters, momentum and variance: K = 12); mixed + momentum is 2 + 2 + 8, mixed + sgd
//   2 + 2 + 4 (the master copy alone), as the zoo's "Bytes per parameter" table counts them.
// - fp32 and amp: 4 + 4 + (4 per state): K = 8 for Adam, no master copy (the weights are already
//   fp32, and PyTorch's ZeroRedundancyOptimizer and FSDP step the fp32 shards in place).
// - half: 2 + 2 + (2 per state): K = 4 for Adam (the zoo's fp16/bf16 rows).
// fp32_master_copy adds a separate 4-byte fp32 copy of every parameter to K for fp32 and amp:
// DeepSpeed's ZeRO optimizers always clone one, whatever the precision
// (stage_1_and_2.py@38327e07 line 401 and stage3.py@38327e07 lines 902-906:
// `...clone().float().detach()`), so fp32 Adam under DeepSpeed is 4 + 4 + 12. It changes nothing
// for mixed, which has the copy already, and is an error for half (DeepSpeed's 16-bit modes are
// `mixed`). Throws std::invalid_argument on an enumerator out of range.
BytesPerParameter bytes_per_parameter(StatePrecision precision, OptimizerKind optimizer,
                                      bool fp32_master_copy = false);

enum class ZeroStage {
  stage0 = 0,  // plain data parallelism (DDP): every rank holds every state
  stage1 = 1,  // optimizer states sharded (P_os)
  stage2 = 2,  // and gradients (P_os+g)
  stage3 = 3,  // and parameters (P_os+g+p)
};

// Model-state bytes on one GPU.
struct ModelStateBytes {
  std::int64_t parameters = 0;
  std::int64_t gradients = 0;
  std::int64_t optimizer_states = 0;  // master copy included
  std::int64_t total() const { return parameters + gradients + optimizer_states; }
  friend bool operator==(const ModelStateBytes&, const ModelStateBytes&) = default;
};

// The elements of a Ψ-element state each of `ranks` ranks holds once it is sharded: ⌈Ψ/N⌉.
// DeepSpeed and FSDP pad a flat buffer to a multiple of N so that every rank holds an equal
// shard; the paper's Ψ/N is this when N divides Ψ.
std::int64_t shard_elements(std::int64_t parameters, std::int64_t ranks);

// The ZeRO paper's per-GPU model-state bytes (formulas above), each sharded state counted as
// shard_elements(parameters, ranks) times its bytes. Paper example (§5, Figure 1): 7.5e9
// parameters, N = 64, mixed-precision Adam: 120 / 31.4 / 16.6 / 1.9 GB for stages 0-3.
// Throws std::invalid_argument when parameters is outside [0, kMaxParameters], ranks < 1, or a
// bytes-per-parameter field is outside [0, 64].
ModelStateBytes model_states_per_gpu(std::int64_t parameters, std::int64_t ranks, ZeroStage stage,
                                     BytesPerParameter bytes);

// The largest parameter count accepted: 2^53 / 32. Every product the formulas and DeepSpeed's
// estimator form (at most 18·Ψ, and Ψ times a multiplier) then stays exact in a double, so the
// estimator's results equal what DeepSpeed's Python computes, and no byte count overflows.
inline constexpr std::int64_t kMaxParameters = (std::int64_t{1} << 53) / 32;

// ---- DeepSpeed's estimator -------------------------------------------------------------------

// The hardware the estimator takes: num_gpus_per_node, num_nodes and additional_buffer_factor
// (1.5 by default, DeepSpeed's "to be conservative" factor on the CPU side).
struct DeepSpeedCluster {
  std::int64_t gpus_per_node = 1;
  std::int64_t nodes = 1;
  double additional_buffer_factor = 1.5;
};

// What one estimate gives, in bytes: the function's (cpu_mem, gpu_mem) pair. DeepSpeed's table
// prints them as "per CPU" and "per GPU", divided by 2^30 with two decimals and labelled "GB"
// (so GiB); the CPU figure is host memory per node.
struct DeepSpeedEstimate {
  std::int64_t host_bytes_per_node = 0;
  std::int64_t gpu_bytes = 0;
  friend bool operator==(const DeepSpeedEstimate&, const DeepSpeedEstimate&) = default;
};

// ZeRO-2 without offload changed formula in DeepSpeed v0.14.3 (commit
// f4cb866c2eba60a72d79c3741d12d098fe4e45b8, PR #5099, 2024-06-04: "was considering 4 bytes per
// model param, and 4 bytes per gradient. fixed it to 2 bytes").
enum class DeepSpeedZero2Formula {
  // v0.4.2 to v0.14.2 (added by 0c1802cc8b877a510eea61dd562b82c433876802, PR #965): GPU
  // 4Ψ + int(16Ψ/N). The examples in docs/code-docs/source/memory.rst (T5-3B on 8 GPUs:
  // 15.93 GB) were printed by it and were not updated.
  v0_4_2_to_v0_14_2,
  // v0.14.3 on (DeepSpeed@38327e07): GPU 2Ψ + int(18Ψ/N), "2 = params_16bit, 18 = 2_grads_16bit
  // + 4_grads_32bit + 4_params_32bit + 8_optimizer_states_32bit".
  since_v0_14_3,
};

// estimate_zero2_model_states_mem_needs(total_params, num_gpus_per_node, num_nodes, cpu_offload,
// additional_buffer_factor), with N = gpus_per_node·nodes:
//   offload_optimizer: GPU 2Ψ; CPU Ψ·max(4N, 16)·factor (N over all nodes, as the code has it;
//                      memory.rst writes the GPUs of one node)
//   otherwise:         GPU as `formula`; CPU Ψ·4·gpus_per_node·factor (the fp32 model each
//                      process builds on the host before moving it to its GPU)
// Throws std::invalid_argument on parameters outside [0, kMaxParameters], a GPU or node count
// below 1, a factor that is not finite or below 0, or a result beyond 2^63 - 1 bytes.
DeepSpeedEstimate deepspeed_zero2_estimate(std::int64_t total_parameters, const DeepSpeedCluster& cluster,
                                           bool offload_optimizer,
                                           DeepSpeedZero2Formula formula = DeepSpeedZero2Formula::since_v0_14_3);

struct DeepSpeedZero3Options {
  bool offload_optimizer = false;  // the function's cpu_offload
  bool offload_params = false;     // cpu_offload_params; needs offload_optimizer (below)
  bool zero_init = true;           // the model is built under deepspeed.zero.Init
};

struct DeepSpeedZero3Estimate {
  std::int64_t host_bytes_per_node = 0;
  std::int64_t gpu_bytes = 0;
  // 4 · largest_layer_params: the largest layer's 16-bit parameters gathered plus its 16-bit
  // gradients, the GPU term every ZeRO-3 case has.
  std::int64_t largest_layer_bytes = 0;
  friend bool operator==(const DeepSpeedZero3Estimate&, const DeepSpeedZero3Estimate&) = default;
};

// estimate_zero3_model_states_mem_needs(total_params, largest_layer_params, num_gpus_per_node,
// num_nodes, cpu_offload, cpu_offload_params, zero_init, additional_buffer_factor), with
// N = gpus_per_node·nodes, L = largest_layer_params, g = 1/nodes (DeepSpeed's gpus_factor):
//   offload optimizer and params: GPU 4L;              CPU Ψ·18g·factor, or without zero_init
//                                                      Ψ·max(4·gpus_per_node, 18g)·factor
//   offload optimizer only:       GPU 4L + int(2Ψ/N);  CPU Ψ·16g·factor, or without zero_init
//                                                      Ψ·max(4·gpus_per_node, 16g)·factor
//   no offload:                   GPU 4L + int(18Ψ/N); CPU L·4·gpus_per_node·factor, or without
//                                                      zero_init Ψ·4·gpus_per_node·factor
// largest_layer_params is the most parameters one module holds itself (model_to_params in
// stage3.py: sum of p.numel() over m.parameters(recurse=False), maximised over modules).
// DeepSpeed's function ignores cpu_offload_params when cpu_offload is false (its table never
// prints that case); here offload_params without offload_optimizer throws std::invalid_argument
// rather than silently giving the no-offload figure. Also throws as deepspeed_zero2_estimate
// does, and when largest_layer_parameters is outside [0, total_parameters].
DeepSpeedZero3Estimate deepspeed_zero3_estimate(std::int64_t total_parameters, std::int64_t largest_layer_parameters,
                                                const DeepSpeedCluster& cluster, const DeepSpeedZero3Options& options);

}  // namespace comptrain::models::zero

#pragma once
// How long one op takes on the modeled GPU.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/models/kernel_fusion.hpp"
#include "comptrain/models/kernel_power.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::models {

// The kernel that runs an op of kind attention (a fused attention: no S x S tensor in memory).
// On Hopper the kernels differ in what share of the tensor cores' peak they reach
// (models/README.md, "Kernel ceilings"); elsewhere they are timed alike.
enum class AttentionKernel : std::uint8_t {
  flash_attention_2,  // Dao's FlashAttention-2, and PyTorch's SDPA flash backend (FA2's kernels)
  flash_attention_3,  // FlashAttention-3 (Hopper only)
  cudnn,              // cuDNN's fused attention (Transformer Engine's FusedAttention, SDPA's cuDNN backend)
};
std::string_view to_string(AttentionKernel kernel);
std::optional<AttentionKernel> parse_attention_kernel(std::string_view text);

// How a float8 linear's operands get their scales (models/README.md, "Float8 linears").
enum class Float8Recipe : std::uint8_t {
  // torchao's default (convert_to_float8_training): dynamic scaling, one scale per tensor from its
  // amax each time it is cast; an amax kernel and a cast kernel per operand, as torch.compile
  // generates them.
  tensorwise,
  // Transformer Engine's DelayedScaling (Megatron-LM's --fp8-format): each scale from an amax
  // history the cast kernels themselves update, so a cast is one kernel; the weights are cast
  // once per optimizer step when the framework marks the first micro-batch (Megatron-LM does),
  // and a linear that follows Transformer Engine's own norm takes the norm's fp8 output.
  delayed,
};
std::string_view to_string(Float8Recipe recipe);
std::optional<Float8Recipe> parse_float8_recipe(std::string_view text);

// Float8 training of linear layers: every linear op outside `skip` runs its GEMMs on the GPU's
// FP8 tensor cores (gpu.peak.fp8) over 1-byte operands, after the kernels that cast them, which
// `recipe` decides (models/README.md, "Float8 linears").
struct Float8Scope {
  std::vector<std::string> skip;  // module patterns whose linears stay in 16 bits (torchtitan skips "output")
  // torchao's enable_fsdp_float8_all_gather (torchtitan's float8.enable_fsdp_float8_all_gather;
  // torchao float8/fsdp_utils.py, WeightWithDynamicFloat8CastTensor): FSDP2 casts each float8
  // linear's weight shard before the all-gather and gathers it in float8, one byte an element
  // (FsdpSpec::float8_all_gather), so the linear's forward takes its weight already cast, and its
  // backward only transposes it for the input gradient's GEMM (one byte read and one written an
  // element) instead of an amax and a cast. Tensorwise only.
  bool fsdp_all_gather = false;
  Float8Recipe recipe = Float8Recipe::tensorwise;
  // Delayed only: the share of a micro-step's forward ops that cast their weight, 1 / the optimizer
  // step's micro-steps (Transformer Engine recasts its fp8 weight copies only when told the
  // micro-batch is the first of the step: Megatron-LM's set_is_first_microbatch).
  double weight_casts_per_micro_step = 1.0;
  // Delayed only: the model's weights are FP8 tensors themselves (Transformer Engine's
  // fp8_model_init; Megatron-LM's --fp8-param-gather), row- and column-wise, two bytes an element
  // as the 16-bit weights they replace: no FP8 workspace beside them (float8_memory.hpp).
  bool fp8_weights = false;
  friend bool operator==(const Float8Scope&, const Float8Scope&) = default;
};

// Whether `op` runs as a float8 linear under `scope`: a linear op (forward or backward) whose
// name no skip pattern matches.
bool in_float8_scope(const Float8Scope& scope, const traces::Op& op);

struct OpTimeOptions {
  // fp32 on TF32 tensor cores, as PyTorch's two flags allow it: cuBLAS matmuls and linears
  // (torch.backends.cuda.matmul.allow_tf32) and cuDNN convolutions (torch.backends.cudnn.allow_tf32).
  bool allow_tf32_matmul = false;
  bool allow_tf32_cudnn = false;
  // Activations stored channels-last (NHWC, torch.channels_last) rather than PyTorch's default
  // contiguous NCHW. cuDNN's tensor-core convolutions work in NHWC: on NCHW tensors each
  // convolution that runs on tensor cores is wrapped in transpose kernels (models/README.md,
  // "Memory format").
  bool channels_last = false;
  // The major version of the CUDA toolkit the framework and its libraries were built with; 0:
  // not given, a current one (12 or later). Before 12.0 no kernel can use Hopper's warpgroup
  // MMA (wgmma, PTX ISA 8.0 came with CUDA 12.0), which its tensor-core peak needs
  // (models/README.md, "Kernel ceilings").
  int cuda_major = 0;
  AttentionKernel attention_kernel = AttentionKernel::flash_attention_2;
  // torch.compile (Inductor) over this scope: run_all fuses the memory-bound ops of each
  // compiled region (kernel_fusion.hpp); unset: eager PyTorch, one kernel per op.
  std::optional<CompileScope> compile;
  // Float8 linears (training.float8); unset: every GEMM at its own dtype's peak.
  std::optional<Float8Scope> float8;
};

// Roofline: max(FLOPs / (peak · compute efficiency), bytes / (bandwidth · memory efficiency))
// plus the kernel launch overhead; an op that carries a duration measured on this platform's
// GPU (same device name) uses it instead, scaled linearly from the batch it was measured at.
// The bytes are those PyTorch's CUDA kernels move for the op's kind and phase (a batch norm
// reads its input twice, a gather reads only the rows it picks), derived from the trace's
// logical bytes and tensors by a per-kind table in op_time.cpp (models/README.md, "Kernel
// traffic"). For GEMM-like kinds (linear, matmul, conv, attention) on a platform that gives
// gpu.sms, the compute efficiency is also multiplied by the share of SM-slots the op's output
// tiles fill in their waves, its GEMM shape read from the tensors it writes (models/README.md,
// "Wave quantization"); a small GEMM leaves most SMs idle. A GEMM whose thread blocks each
// reduce a short K loses more to the blocks' fixed prologue and epilogue (gemm_k_overhead;
// models/README.md, "Short reductions"). On tensor cores the platform's
// share (efficiency.tensor_core) applies on top, chosen by the kernels that run
// (tensor_core_share: the CUDA toolkit, the attention kernel, the GPU generation;
// models/README.md, "Kernel ceilings"). A convolution on tensor cores over
// NCHW tensors (OpTimeOptions::channels_last false) adds the transposes cuDNN runs around it:
// separate kernels that read and write every tensor the convolution reads and writes, at the
// memory roofline or at the elements the SMs move per clock, whichever is slower
// (layout_transpose_seconds), each with its own launch.
// Under a power limit each of these kernels runs as kernel_power.hpp says: one that would draw more
// than the cap is slowed until it draws the cap, one that would not keeps its time. A measured
// duration is kept as it is (its power is not known: 0 W, the replay's busy power).
class OpTimeModel {
 public:
  OpTimeModel(Platform platform, OpTimeOptions options = {});
  double seconds(const traces::Trace& trace, traces::OpIndex op) const { return run(trace, op).seconds; }
  // The op's duration, the power its kernels draw (their time-weighted mean; 0 when unknown) and
  // the clock the compute kernel runs at: the op alone, its own kernels, as eager PyTorch runs it.
  KernelRun run(const traces::Trace& trace, traces::OpIndex op) const;
  // Every op of the trace, in order. Under OpTimeOptions::compile, the ops Inductor fuses share
  // one kernel: each keeps its FLOPs, loses the traffic that stays in registers and, but for
  // the first, its launch (fuse_like_inductor); otherwise run() of each op.
  std::vector<KernelRun> run_all(const traces::Trace& trace) const;
  const Platform& platform() const { return platform_; }

 private:
  KernelRun run_op(const traces::Trace& trace, traces::OpIndex op, const FusedOp* fused) const;
  Platform platform_;
  OpTimeOptions options_;
};

// 32-bit floating-point results per clock per SM on compute capability major.minor (the CUDA C++
// Programming Guide's throughput table; 0 where it gives none).
int fp32_lanes_per_sm(int major, int minor);

// The SM clock the GPU's peaks are given at, from its fp32 peak, SMs and compute capability; 0
// where the platform gives too little to derive it.
double sm_clock_hz(const GpuSpec& gpu);

// cuDNN's layout transposes of a convolution over NCHW tensors that moves `bytes` of `dtype`
// elements: every byte read and written at the memory roofline (`memory_efficiency` of the
// bandwidth), or every element at the rate the SMs move elements, whichever is slower
// (models/README.md, "Memory format"); the memory roofline alone where the SM clock is unknown.
double layout_transpose_seconds(const GpuSpec& gpu, double memory_efficiency, double bytes, traces::DType dtype);

// PyTorch's index_select (an embedding's forward, an index_add_'s gradient) copying `elements`
// elements, at the elements the SMs copy per clock (models/README.md, "Kernel traffic"); 0 where
// the SM clock is unknown. The op takes this or its bytes at the memory roofline, whichever is
// slower.
double index_select_seconds(const GpuSpec& gpu, double elements);

// PyTorch's index_add_ / scatter_add_ (and a gather's gradient, which is one) adding `elements`
// elements atomically into the rows their index names, at the elements the SMs add per clock
// (models/README.md, "Kernel traffic"); 0 where the SM clock is unknown. The op takes this or
// its bytes at the memory roofline, whichever is slower.
double scatter_add_seconds(const GpuSpec& gpu, double elements);

// The dtype whose peak an op's arithmetic runs at: for the tensor-core kinds (linear, matmul,
// conv, attention) that of its first floating-point input (a GEMM's operands), for the others
// that of its first floating-point output, else of its first floating-point input; else fp32.
traces::DType arithmetic_dtype(const traces::Trace& trace, traces::OpIndex op);

// The share of the compute efficiency left to an op of `kind` on tensor cores, on `platform`
// with `options` (models/README.md, "Kernel ceilings"):
//  - a toolkit before CUDA 12 on Hopper (compute capability 9.x): efficiency.tensor_core_cuda11
//    where the platform gives it, else efficiency.tensor_core x 2/3, the most Hopper's tensor
//    cores reach without wgmma;
//  - attention on Hopper: the attention kernel's own share, from the kernels' published
//    figures (FlashAttention-2 half the share of peak it reaches on the A100, FlashAttention-3
//    and cuDNN 75/70 of it);
//  - otherwise efficiency.tensor_core.
double tensor_core_share(const Platform& platform, const OpTimeOptions& options, traces::OpKind kind);

// The fixed time of a GEMM kernel's thread block, in elements of K, for an op of `kind` on
// tensor cores (models/README.md, "Short reductions"): efficiency.gemm_k_overhead for linear and
// matmul ops, the GEMMs cuBLAS runs; 0 for other kinds (cuDNN's convolutions are fitted apart,
// fused attention has its own share) and on Hopper under a toolkit before CUDA 12, whose
// mma.sync kernels the value was not measured on.
double gemm_k_overhead(const Platform& platform, const OpTimeOptions& options, traces::OpKind kind);

// The factor that multiplies the compute efficiency of one GEMM of `batch` matrices of
// rows x cols outputs, each reducing k elements, on `sms` SMs (0: no wave model) with
// `k_overhead` (0: none): the wave fill of its 128x128 tiles, split-K included, times
// k_slice / (k_slice + k_overhead) (models/README.md, "Wave quantization" and "Short
// reductions"). What a linear op's forward GEMM gets; calibrate fits k_overhead with it. 1 for an
// empty shape.
double gemm_factor(std::int64_t batch, std::int64_t rows, std::int64_t cols, double k, int sms, double k_overhead);

}  // namespace comptrain::models

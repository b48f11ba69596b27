#pragma once
// The framework model: what a PyTorch training process holds on the GPU besides the tensors of
// the trace, and when. A scenario's `framework:` section (scenarios/README.md, "framework")
// sets it; every field has a default that matches a stock PyTorch 2.x training loop.
//
//   zero_grad            when weight gradients are freed: `set_to_none` (optimizer.zero_grad()'s
//                        default since PyTorch 2.0, torch/optim/optimizer.py: `set_to_none: bool =
//                        True`; gradients are freed between iterations and re-created by the next
//                        backward) or `zeros` (set_to_none=False, the default before 2.0 and what
//                        trainers calling model.zero_grad() on 1.x did: gradients stay allocated
//                        through the next forward pass).
//   expandable_segments  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (caching_allocator.hpp).
//   cuda_context         bytes the CUDA context and the loaded kernels take outside the caching
//                        allocator (nvidia-smi shows them, torch.cuda.memory_reserved does not);
//                        unset: the platform's gpu.cuda_context.
//   cudnn_workspace      bytes of cuDNN workspace each convolution (forward, backward, replayed)
//                        takes through the caching allocator while it runs (PyTorch's cuDNN
//                        convolutions allocate the chosen algorithm's workspace per call:
//                        aten/src/ATen/native/cudnn/Conv_v7.cpp, Workspace). Unset: 0, not
//                        modelled: the size depends on the algorithm cuDNN picks (and on
//                        torch.backends.cudnn.benchmark), which no shipped figure gives.
//   cublas_workspace     the cuBLAS workspace PyTorch allocates through the caching allocator on
//                        the first GEMM and keeps (aten/src/ATen/cuda/CublasHandlePool.cpp);
//                        unset: the default for the platform's compute capability
//                        (default_cublas_workspace_bytes).
//   host_syncs           where the training loop makes the host wait for the GPU within an
//                        iteration (a list; `backward_end`: gradient clipping's
//                        total_norm.item(), a loss scaler's overflow check, before the
//                        optimizer step); unset: none (models::HostSync, add_host_syncs).
//   optimizer_ops_per_parameter  the optimizer step as a Python loop of this many eager ops
//                        (kernels) per parameter, on average (DeepLearningExamples' BertAdam:
//                        scenarios/validation/dle-bertlarge-squad-*.yaml); needs the trace's
//                        one optimizer op per parameter (training.optimizer_impl: for-loop);
//                        unset: the trace's ops as they are (models::apply_optimizer_loop).
//   pytorch              the PyTorch release ("1.10", "2.1"), for the defaults that changed
//                        between releases; unset: a current 2.x. Earlier releases differ in:
//                        - < 2.0: zero_grad's default is zeros (set_to_none became the default
//                          in 2.0: torch/optim/optimizer.py, PyTorch 2.0 release notes);
//                        - < 1.13: no cuBLAS workspace through the caching allocator (PyTorch
//                          set one explicitly from pytorch/pytorch#83461, Aug 2022; before,
//                          cuBLAS allocated its own outside it), so cublas_workspace defaults
//                          to 0;
//                        - <= 1.10: softmax and log_softmax also save their input for backward
//                          (pytorch/pytorch#64000, removed by #65242 for 1.11): a property of
//                          the trace, which the scenario reader passes to the zoo
//                          (zoo::ModelSpec::softmax_saves_input).
//                        Fields given explicitly win over these defaults.
//   cuda                 the CUDA toolkit the framework and its libraries were built with
//                        ("11.8", "12.4"; torch.version.cuda); unset: a current one (12 or
//                        later). Before 12.0 no kernel uses Hopper's wgmma, and an H100 reaches
//                        less of its tensor-core peak (models/op_time.hpp, tensor_core_share).
//   attention_kernel     the fused attention kernel that runs the model's `attention: flash`
//                        ops: flash-attention-2 (default: Dao's package and PyTorch's SDPA flash
//                        backend), flash-attention-3 (Hopper only) or cudnn (Transformer
//                        Engine's FusedAttention, which it prefers on Hopper; SDPA's cuDNN
//                        backend). The kernels differ on Hopper only (models/README.md,
//                        "Kernel ceilings").
//   compile              torch.compile with its default backend, Inductor: true (the whole
//                        model, torch.compile(model)) or {modules: [PATTERN, ...]} (each module
//                        instance a pattern names compiled on its own, as torchtitan compiles
//                        each TransformerBlock); the memory-bound ops of a compiled region run
//                        fused (models/kernel_fusion.hpp). Time only: memory stays eager's.

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/models/framework_transforms.hpp"
#include "comptrain/models/op_time.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/models/schedule.hpp"

namespace comptrain::sim {

// zero_grad's two behaviours; the enum is models' (framework_transforms.hpp), beside the
// transform that applies it (apply_gradient_lifetime).
using models::ZeroGrad;
std::string_view to_string(models::HostSync sync);
std::optional<models::HostSync> parse_host_sync(std::string_view text);

// A PyTorch release, major.minor.
struct PytorchVersion {
  int major = 0;
  int minor = 0;
  friend auto operator<=>(const PytorchVersion&, const PytorchVersion&) = default;
};
// "1.10" -> {1, 10}; nullopt unless digits.digits with major 0 to 9 and minor 0 to 99.
std::optional<PytorchVersion> parse_pytorch_version(std::string_view text);
// A CUDA toolkit release, major.minor ("11.8", "12.4").
struct CudaVersion {
  int major = 0;
  int minor = 0;
  friend auto operator<=>(const CudaVersion&, const CudaVersion&) = default;
};
// "12.4" -> {12, 4}; nullopt unless digits.digits with major 1 to 99 and minor 0 to 99.
std::optional<CudaVersion> parse_cuda_version(std::string_view text);
std::string_view to_string(ZeroGrad zero_grad);
std::optional<ZeroGrad> parse_zero_grad(std::string_view text);

struct FrameworkSpec {
  std::optional<PytorchVersion> pytorch;
  std::optional<ZeroGrad> zero_grad;        // unset: set_to_none, or zeros before PyTorch 2.0
  bool expandable_segments = false;
  std::optional<std::int64_t> cuda_context_bytes;
  std::optional<std::int64_t> cublas_workspace_bytes;
  std::int64_t cudnn_workspace_bytes = 0;
  std::optional<CudaVersion> cuda;
  models::AttentionKernel attention_kernel = models::AttentionKernel::flash_attention_2;
  std::string attention_kernel_place;  // "FILE:LINE:COL: " of the key, for resolve_framework's error
  std::vector<models::HostSync> host_syncs;
  double optimizer_ops_per_parameter = 0;  // 0: unset
  // torch.compile with Inductor: `true` the whole model, {modules: [...]} each module instance
  // the patterns name (models/kernel_fusion.hpp); unset: eager.
  std::optional<models::CompileScope> compile;
};

// The framework resolved against a platform: every figure the device-memory model and the
// framework's schedule transforms need.
struct FrameworkOnGpu {
  std::optional<PytorchVersion> pytorch;  // as given; unset: a current 2.x
  ZeroGrad zero_grad = ZeroGrad::set_to_none;
  bool expandable_segments = false;
  std::int64_t visible_bytes = 0;           // what cudaMemGetInfo / nvidia-smi report as total
  std::int64_t cuda_context_bytes = 0;      // outside the allocator
  std::int64_t cublas_workspace_bytes = 0;  // inside the allocator, held from the first GEMM on
  std::int64_t cudnn_workspace_bytes = 0;   // inside the allocator, per convolution while it runs
  std::optional<CudaVersion> cuda;          // as given; unset: a current toolkit (12 or later)
  models::AttentionKernel attention_kernel = models::AttentionKernel::flash_attention_2;
  // As given. Flags, not a list: the replay's workers receive this struct as bytes (wire.hpp).
  bool sync_at_backward_end = false;       // host_syncs holds backward_end
  double optimizer_ops_per_parameter = 0;  // as given; 0: the trace's optimizer ops as they are
  // What the caching allocator can reserve: visible_bytes - cuda_context_bytes.
  std::int64_t usable_bytes() const { return visible_bytes - cuda_context_bytes; }
};

// InputError naming `source` when the context leaves nothing for the allocator, or naming the
// key when the attention kernel does not run on the GPU (flash-attention-3 off Hopper).
FrameworkOnGpu resolve_framework(const FrameworkSpec& framework, const models::GpuSpec& gpu, std::string_view source);

// PyTorch's default cuBLAS workspace for a GPU of compute capability major.minor
// (CublasHandlePool.cpp, see framework.cpp for the commit and the formula).
std::int64_t default_cublas_workspace_bytes(int major, int minor);

// The host synchronisations a resolved framework holds, as transform_schedule takes them.
std::vector<models::HostSync> host_syncs(const FrameworkOnGpu& framework);

// The framework's schedule transforms -- apply_gradient_lifetime, assign_dispatch_costs,
// add_cudnn_workspaces -- are models' (models/framework_transforms.hpp), run in their order by
// models::transform_schedule from what FrameworkOnGpu holds (sim/run.hpp, schedule_run).

}  // namespace comptrain::sim

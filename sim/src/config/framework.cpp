#include "comptrain/sim/config/framework.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "comptrain/support/input_error.hpp"

namespace comptrain::sim {

std::string_view to_string(ZeroGrad zero_grad) {
  switch (zero_grad) {
    case ZeroGrad::set_to_none: return "set_to_none";
    case ZeroGrad::zeros: return "zeros";
  }
  return "?";
}

std::optional<ZeroGrad> parse_zero_grad(std::string_view text) {
  for (const ZeroGrad z : {ZeroGrad::set_to_none, ZeroGrad::zeros}) {
    if (text == to_string(z)) return z;
  }
  return std::nullopt;
}

std::int64_t default_cublas_workspace_bytes(int major, int /*minor*/) {
  // pytorch/pytorch aten/src/ATen/cuda/CublasHandlePool.cpp, parseChosenWorkspaceSize() (main,
  // 2025): ":4096:2:16:8 default, 32MiB for Hopper and Blackwell": compute capability major 9, 10
  // or 12 gets 4096 * 8 * 1024 bytes, any other 4096 * 1024 * 2 + 16 * 1024 * 8. (Releases up to
  // 2.3 gave 32 MiB to sm_90 alone; the other GPUs' figure is the same.) getNewWorkspace()
  // allocates it through the caching allocator, once per (device, stream)
  // (cublas_stream_to_workspace), and keeps it; cuBLASLt shares it (unified workspaces, the
  // default there).
  if (major == 9 || major == 10 || major == 12) return std::int64_t{4096} * 8 * 1024;
  return std::int64_t{4096} * 1024 * 2 + std::int64_t{16} * 1024 * 8;
}

namespace {

// "MAJOR.MINOR" with 1 to max_major_digits digits before the dot and 1 or 2 after it.
std::optional<std::pair<int, int>> parse_major_minor(std::string_view text, std::size_t max_major_digits) {
  const auto dot = text.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot > max_major_digits) return std::nullopt;
  const std::string_view major = text.substr(0, dot), minor = text.substr(dot + 1);
  if (minor.empty() || minor.size() > 2) return std::nullopt;
  const auto digits = [](std::string_view part) { return std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }); };
  if (!digits(major) || !digits(minor)) return std::nullopt;
  return std::pair{std::stoi(std::string(major)), std::stoi(std::string(minor))};
}

}  // namespace

std::optional<PytorchVersion> parse_pytorch_version(std::string_view text) {
  const auto version = parse_major_minor(text, 1);
  if (!version) return std::nullopt;
  return PytorchVersion{version->first, version->second};
}

std::optional<CudaVersion> parse_cuda_version(std::string_view text) {
  const auto version = parse_major_minor(text, 2);
  if (!version || version->first < 1) return std::nullopt;
  return CudaVersion{version->first, version->second};
}

std::string_view to_string(models::HostSync sync) {
  switch (sync) {
    case models::HostSync::backward_end: return "backward_end";
  }
  return "?";
}

std::vector<models::HostSync> host_syncs(const FrameworkOnGpu& framework) {
  std::vector<models::HostSync> syncs;
  if (framework.sync_at_backward_end) syncs.push_back(models::HostSync::backward_end);
  return syncs;
}

std::optional<models::HostSync> parse_host_sync(std::string_view text) {
  if (text == "backward_end") return models::HostSync::backward_end;
  return std::nullopt;
}

FrameworkOnGpu resolve_framework(const FrameworkSpec& framework, const models::GpuSpec& gpu, std::string_view source) {
  FrameworkOnGpu out;
  out.pytorch = framework.pytorch;
  const bool before_2_0 = framework.pytorch && *framework.pytorch < PytorchVersion{2, 0};
  const bool before_1_13 = framework.pytorch && *framework.pytorch < PytorchVersion{1, 13};
  out.zero_grad = framework.zero_grad.value_or(before_2_0 ? ZeroGrad::zeros : ZeroGrad::set_to_none);
  out.expandable_segments = framework.expandable_segments;
  // A platform whose memory was changed after it was read (a test, a what-if) keeps within it.
  out.visible_bytes = gpu.memory_visible_bytes > 0 ? std::min(gpu.memory_visible_bytes, gpu.memory_bytes) : gpu.memory_bytes;
  out.cuda_context_bytes = framework.cuda_context_bytes.value_or(gpu.cuda_context_bytes);
  out.cublas_workspace_bytes = framework.cublas_workspace_bytes.value_or(
      before_1_13 ? 0 : default_cublas_workspace_bytes(gpu.compute_capability_major, gpu.compute_capability_minor));
  out.cudnn_workspace_bytes = framework.cudnn_workspace_bytes;
  out.cuda = framework.cuda;
  out.attention_kernel = framework.attention_kernel;
  // FlashAttention-3's kernels are built for sm_90 only (Dao-AILab/flash-attention hopper/,
  // "FlashAttention-3 ... for Hopper GPUs (e.g. H100, H800)").
  if (framework.attention_kernel == models::AttentionKernel::flash_attention_3 && gpu.compute_capability_major != 9) {
    throw InputError((framework.attention_kernel_place.empty() ? std::string(source) + ": " : framework.attention_kernel_place) +
                     "framework.attention_kernel: flash-attention-3 runs on Hopper GPUs (compute capability 9.0) only; the platform's " +
                     gpu.name + " is " + std::to_string(gpu.compute_capability_major) + "." + std::to_string(gpu.compute_capability_minor) +
                     "; expected flash-attention-2 or cudnn");
  }
  out.sync_at_backward_end =
      std::find(framework.host_syncs.begin(), framework.host_syncs.end(), models::HostSync::backward_end) != framework.host_syncs.end();
  out.optimizer_ops_per_parameter = framework.optimizer_ops_per_parameter;
  if (out.cuda_context_bytes >= out.visible_bytes) {
    throw InputError(std::string(source) + ": framework.cuda_context (" + std::to_string(out.cuda_context_bytes) +
                     " B) leaves nothing of the GPU's " + std::to_string(out.visible_bytes) +
                     " B visible memory to PyTorch; expected a context of hundreds of MiB");
  }
  return out;
}

}  // namespace comptrain::sim

#include "comptrain/models/op_time.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "comptrain/models/module_pattern.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::models {
namespace {

// The kinds cuBLAS/cuDNN run on tensor cores (and, for fp32, on TF32 tensor cores when
// allowed: torch.backends.cudnn.allow_tf32 for convolutions, torch.backends.cuda.matmul.allow_tf32
// for the others). A fused attention kernel is a pair
// of matmuls around a softmax.
constexpr bool uses_tensor_cores(traces::OpKind kind) {
  return kind == traces::OpKind::conv || kind == traces::OpKind::matmul || kind == traces::OpKind::linear ||
         kind == traces::OpKind::attention;
}

// Whether an op's work grows with the batch, so that a duration measured at one batch size
// scales to another. Work means FLOPs or bytes: an embedding lookup does no arithmetic yet
// moves one row per sample.
bool work_scales_with_batch(const traces::Op& op) {
  return op.flops.per_sample > 0 || op.bytes_read.per_sample > 0 || op.bytes_written.per_sample > 0;
}

// %g: short whatever the value (1e-300, inf), for messages.
std::string g(double value) {
  char buffer[32];
  const int n = std::snprintf(buffer, sizeof buffer, "%g", value);
  return std::string(buffer, n > 0 ? static_cast<std::size_t>(n) : 0);
}

std::string op_label(const traces::Trace& trace, traces::OpIndex index) {
  return "op " + std::to_string(index) + " (" + trace.op(index).name + ")";
}

// The last line of defence: parse_platform and the trace readers bound every input so that
// this cannot trigger, but a hand-built platform or trace can still produce an infinite or
// negative duration, and the simulator must never receive one (SimGrid aborts or deadlocks).
double checked(double seconds, const traces::Trace& trace, traces::OpIndex index, const std::string& inputs) {
  if (std::isfinite(seconds) && seconds >= 0) return seconds;
  throw InputError(op_label(trace, index) + ": the modeled duration is " + g(seconds) + " s, from " + inputs +
                   "; expected a finite number of seconds >= 0 (check the platform's peaks, bandwidth and efficiencies, "
                   "and the trace's measured durations)");
}

// ---- Kernel traffic ----------------------------------------------------------------------
//
// A trace records an op's logical bytes: one read of each input and one write of each output.
// PyTorch's CUDA kernels for some kinds move more than that (a statistics pass before the
// normalisation, a temporary product, a second kernel over the same tensors) and for others
// less (a gather reads the rows it picks, not the whole table). kernel_traffic turns the
// logical bytes into the bytes the kernels issue to device memory, by kind and phase, from the
// table below. Each rule adds whole passes over the op's main tensors (inputs[0], and inputs[1]
// where the kernel re-reads both); ops that do not have the inputs a rule expects keep their
// logical bytes.
//
// One judgement applies to the rules of kernels that hold data on chip: a pass that re-reads
// data the same thread block read moments before (a row of a softmax, a channel plane of batch
// norm's fused backward kernel) is counted only when that data exceeds the 48 KiB a block can
// keep in shared memory; smaller rows are served on chip (L1 / shared memory), as PyTorch's own
// softmax chooses for rows that fit (cunn_SoftMaxForwardSmem). Layer norm's kernels hold no row
// and re-read it from the caches or memory: measured, above 8 KiB a row
// (kLayerNormCachedRowBytes). Re-reads by a separate kernel always count: the tensors are far
// larger than the L2 cache in training.

// cudaDevAttrMaxSharedMemoryPerBlock without opt-in, 48 KiB on every CUDA GPU since compute
// capability 2.0 (CUDA C++ Programming Guide, "Technical Specifications per Compute
// Capability"); SoftMax.cu (pytorch/pytorch@000cace5a401cabff792f70ee9768708415ec98d,
// host_softmax) sizes its shared-memory row cache from this sharedMemPerBlock.
constexpr std::int64_t kOnChipBytesPerBlock = 48 * 1024;
// PyTorch's layer-norm kernels keep no row on chip: vectorized_layer_norm_kernel walks the row
// in global memory twice (the statistics, then the normalisation), and the backward kernel
// twice over (dY, X), so a second pass is served by the caches only while the rows in flight
// fit them. Measured, it is not for rows of 16 KiB: Liger-Kernel's benchmark of
// torch.nn.LayerNorm on fp32 [4096, N] (linkedin/Liger-Kernel@ead96b61
// benchmark/data/all_benchmark_data.csv; the kernel_seconds points of
// scenarios/validation/published.jsonl) runs at one rate for N = 4096, 8192 and 16384 on an
// A100 (1.06-1.10 TB/s counting one read and one write, 1.6 TB/s with the re-read) and the
// backward on an H100 SXM5 at one rate for the same N, where a 48 KiB on-chip row would have
// made the two smaller sizes a third faster; at 8 KiB (N = 2048) the time lies between the two
// counts. So the re-read counts for rows above 8 KiB.
constexpr std::int64_t kLayerNormCachedRowBytes = 8 * 1024;
// host_softmax's persistent (one warp per row, row held in registers) path:
// dim_size <= 1024 && dim_size * sizeof(scalar_t) <= 4096 (SoftMax.cu@000cace5, above).
constexpr std::int64_t kPersistentSoftmaxElements = 1024;
constexpr std::int64_t kPersistentSoftmaxBytes = 4096;
// host_softmax's shared-memory path loads 16-byte vectors (ILP = sizeof(float4) /
// sizeof(scalar_t)), needs dim_size % ILP == 0, and keeps one fp32 partial per warp of a block
// of up to 1024 threads next to the row (SoftMaxForward_getBlockSize; SoftMax.cu@000cace5).
constexpr std::int64_t kSoftmaxVectorBytes = 16;
constexpr std::int64_t kSoftmaxReductionBytes = (1024 / 32) * 4;
// DRAM is accessed in 32-byte sectors, so a gather of one 4-byte value per row still moves a
// sector (CUDA C++ Best Practices Guide, "Coalesced Access to Global Memory").
constexpr std::int64_t kSectorBytes = 32;
// cuDNN's layout transposes (NCHW <-> NHWC around a tensor-core convolution) move at most this
// many elements per SM per clock (layout_transpose_seconds). Fitted: the value that best matches
// Lambda's three 1-GPU NCHW ResNet-50 AMP rows that the GPUs' other fits use (A100 SXM4, H100 SXM5,
// H100 PCIe; lambdal/deeplearning-benchmark@aa5addb6), rms of their errors 4.1% at 2.6 against 5.0%
// at 2.4 and 5.4% at 2.8; the same runs' other hosts and multi-GPU rows are held out
// (models/README.md, "Memory format").
constexpr double kTransposeElementsPerSmCycle = 2.6;
// PyTorch's index_select, which an embedding's forward runs (F.embedding: weight.index_select(0,
// ids)) and autograd an index_add_'s gradient (grad.index_select), copies one element per thread
// and loop trip, each address computed with divisions
// (indexSelectLargeIndex, a grid of at most 8 blocks of 128 threads per SM:
// pytorch/pytorch@d4c71812 aten/src/ATen/native/cuda/Indexing.cu, index_select_out_cuda_impl):
// its pace is the elements the SMs copy per clock, not the bytes. Fitted: the value that best
// matches Liger-Kernel's eight A100 nn.Embedding forwards of the 'BERT' shape (fp32, ids [32, 512],
// D 768, V 1,024 to 131,072; linkedin/Liger-Kernel@ead96b61 benchmark/data/all_benchmark_data.csv),
// rms log error 0.055, from -62% to -77% at the memory roofline; the eight of the 'Llama' shape
// (ids [8, 2048], D 4096) are held out (models/README.md, "Kernel traffic"). The same pace per
// SM and clock is assumed on other generations.
constexpr double kIndexSelectElementsPerSmCycle = 0.524;
// PyTorch's index_add_ (indexFuncLargeIndex) and scatter_add_ accumulate one element per thread
// and loop trip with an atomic add into the row the index names, each address computed with
// divisions (Indexing.cu@d4c71812, index_add_cuda_impl; ScatterGatherKernel.cu's ReduceAdd, the
// same fastAtomicAdd, in _scatter_gather_elementwise_kernel): like index_select, their pace is the
// elements the SMs add per clock, not the bytes. From a measurement independent of the validation table: the
// original indexFuncLargeIndex kernel took 4,719 us for a bf16 index_add_ of [4,000,000, 128]
// rows along dim 0 into as many rows, by a uniform random index, on an H100 (pytorch/pytorch#175760,
// 2026-02-25, "bf16 [4M, 128] dim=0: 4719 -> 2230 us (2.1x), H100", the rows and index from
// caffe2/benchmarks/operator_benchmark/pt/bench_index_add_large.py): 512 M elements / (4.719 ms x
// 132 SMs x 1.98 GHz, the H100 SXM5's clock from its fp32 peak) = 0.415 elements per SM per clock
// (fp32: 4,400 us, 0.445). The GPU's variant is not stated (an H100 SXM5 assumed); the same pace
// per SM and clock is assumed on other generations (before sm_90 CUDA's bf16 atomic add is a
// compare-and-swap loop, which may be slower) and for scatter_add_'s TensorIterator kernel, which
// no measurement here times (models/README.md, "Kernel traffic").
constexpr double kScatterAddElementsPerSmCycle = 0.415;

enum class TrafficRule : std::uint8_t {
  logical,             // the trace's bytes are what the kernels move
  batchnorm_forward,   // +1 read of x
  batchnorm_backward,  // +1 read of grad_out and x when a channel plane exceeds a block's on-chip memory
  layernorm_forward,   // +1 read of x when a row exceeds what the caches keep between passes (kLayerNormCachedRowBytes)
  layernorm_backward,  // +1 read of grad_out and x (gamma/beta kernel), +1 more when their rows exceed it
  softmax_forward,     // +2 reads of x for rows that neither the persistent nor the shared-memory kernel takes
  softmax_backward,    // tmp = grad * output first (+1 write); the kernel reads tmp and output (+2 reads); +1 read of tmp on long rows
  loss_forward,        // log_softmax as softmax_forward; nll_loss gathers one value per row
  loss_backward,       // log_softmax backward: +1 read of grad on long rows; nll_loss backward: logical
  embedding_forward,   // index_select: reads the gathered rows, not the table
  gather,              // x[index], index_select (an index_add_'s gradient): reads the rows gathered
  scatter,             // index_add_ in place: reads and writes the rows the index names; into a new tensor: logical
};

struct TrafficRow {
  traces::OpKind kind;
  traces::Phase phase;
  TrafficRule rule;
  const char* source;  // the kernels the rule follows (models/README.md, "Kernel traffic")
};

// One row per kind and phase that departs from the logical bytes; every other kind and phase
// (conv, linear, matmul, attention: tiled GEMMs whose traffic this model does not try to
// derive; relu, gelu, elementwise, dropout, pool, optimizer_update, other) keeps them.
constexpr TrafficRow kTrafficTable[] = {
    {traces::OpKind::batchnorm, traces::Phase::forward, TrafficRule::batchnorm_forward,
     "aten/src/ATen/native/cuda/Normalization.cu@000e0689816596fada756234dbc4cf0a73790876 batch_norm_cuda_out: "
     "batch_norm_mean_var (statistics kernel) then batch_norm_elementwise"},
    {traces::OpKind::batchnorm, traces::Phase::backward, TrafficRule::batchnorm_backward,
     "aten/src/ATen/native/cuda/Normalization.cuh@045df435368073014bca09cfa8bbb16c516a0255 batch_norm_backward_kernel: "
     "a block per channel reduces over (grad_out, input), then writes grad_input from both again"},
    {traces::OpKind::layernorm, traces::Phase::forward, TrafficRule::layernorm_forward,
     "aten/src/ATen/native/cuda/layer_norm_kernel.cu@0005c538e468a9597b4372816aecacb33733deb6 "
     "vectorized_layer_norm_kernel_impl: compute_stats over the row, then a second loop reading it"},
    {traces::OpKind::layernorm, traces::Phase::backward, TrafficRule::layernorm_backward,
     "layer_norm_kernel.cu@0005c538 layer_norm_grad_input_kernel(_vectorized): two loops over (dY, X) per row; "
     "GammaBetaBackward*Kernel: a second kernel over dY and X"},
    {traces::OpKind::softmax, traces::Phase::forward, TrafficRule::softmax_forward,
     "aten/src/ATen/native/cuda/SoftMax.cu@000cace5a401cabff792f70ee9768708415ec98d host_softmax: "
     "dispatch_softmax_forward / cunn_SoftMaxForwardSmem read a row once; cunn_SoftMaxForward three times"},
    {traces::OpKind::softmax, traces::Phase::backward, TrafficRule::softmax_backward,
     "SoftMax.cu@000cace5 softmax_backward_cuda_out: tmp = grad * output, then host_softmax_backward(tmp, output); "
     "cunn_SoftMaxBackward reads tmp twice"},
    {traces::OpKind::loss, traces::Phase::forward, TrafficRule::loss_forward,
     "SoftMax.cu@000cace5 log_softmax_cuda_out (host_softmax); aten/src/ATen/native/cuda/Loss.cu@"
     "bef73c91efe3de3d7b8cfe5bbd44092aa366a200 nll_loss_forward_reduce_cuda_kernel_2d: input[i][target[i]]"},
    {traces::OpKind::loss, traces::Phase::backward, TrafficRule::loss_backward,
     "SoftMax.cu@000cace5 log_softmax_backward_cuda_out: cunn_SoftMaxBackward reduces grad, then reads it again; "
     "Loss.cu@bef73c91 nll_loss backward: zero-filled grad_input, one value scattered per row"},
    {traces::OpKind::embedding, traces::Phase::forward, TrafficRule::embedding_forward,
     "aten/src/ATen/native/Embedding.cpp: embedding is weight.index_select(0, indices)"},
    {traces::OpKind::gather, traces::Phase::forward, TrafficRule::gather,
     "aten/src/ATen/native/cuda/IndexKernel.cu index_kernel (gpu_index_kernel: one source element read per output "
     "element); aten/src/ATen/native/cuda/Indexing.cu@d4c718120da900f5121cb784e91cf52fa0b02359 "
     "index_select_out_cuda_impl (indexSelectSmallIndex / indexSelectLargeIndex: the selected slices)"},
    {traces::OpKind::gather, traces::Phase::backward, TrafficRule::gather,
     "an index_add_'s gradient is grad.index_select(dim, index) (derivatives.yaml, index_add): as gather forward"},
    {traces::OpKind::scatter, traces::Phase::forward, TrafficRule::scatter,
     "aten/src/ATen/native/cuda/Indexing.cu@d4c718120da900f5121cb784e91cf52fa0b02359 index_add_cuda_impl "
     "(indexFuncSmallIndex / indexFuncLargeIndex: each source slice atomically added into the row its index names)"},
    {traces::OpKind::scatter, traces::Phase::backward, TrafficRule::scatter,
     "a gather's gradient (IndexBackward0, index_select_backward): a zero tensor of the source's shape written "
     "whole, then index_put_ with accumulate / index_add_ of the gradient rows: logical"},
};

struct Traffic {
  double read = 0;
  double written = 0;
  int kernels = 1;  // launches
};

// ---- Eager RMSNorm ---------------------------------------------------------------------------
//
// Hugging Face's LlamaRMSNorm and torchtitan's norm_type rmsnorm are not one kernel but a chain
// of eager ops (x.to(float32); pow(2).mean(-1); x * rsqrt(var + eps); .to(input dtype);
// weight * ...), and autograd runs each op's backward in turn. The zoo writes the chain as one
// op with the tensors it saves (traces/zoo/README.md, "What each piece saves"); its kernels move
// every full-size value again and again. The kernels and their operands, as torch.profiler lists
// them for the chain on torch 1.13 (aten ops with their input shapes, CPU; the CUDA dispatch runs
// the same ops), per element of x, with n the input's element size, g the gradient's, 4 fp32:
//   forward: to fp32 (r n, w 4; none for fp32 input), pow (r 4, w 4), sum over the row (r 4),
//     div_ / add / rsqrt on the rows, mul by the row's rsqrt (r 4, w 4), to the input's dtype
//     (r 4, w n; none for fp32), weight * normalised (r n, w g);
//   backward: MulBackward0 grad * weight (r g, w n) and grad * normalised (r g + n, w g) summed
//     over the rows (r g); ToCopyBackward0 (r n, w 4); MulBackward0 grad * x (r 8, w 4) summed
//     per row (r 4) and grad * rsqrt (r 4, w 4); RsqrtBackward0 (three kernels on the rows);
//     MeanBackward1's expand / N (w 4); PowBackward0 x.pow(1) (r 4, w 4), * 2 (r 4, w 4),
//     * grad (r 8, w 4); the two gradients of the fp32 copy added (r 8, w 4); ToCopyBackward0
//     (r 4, w n).
// The chain is recognised by its tensors: a forward layernorm op with two or more outputs of
// its input's size (the output, the normalised rows, the fp32 copy), where a fused norm (PyTorch's
// layer_norm, torchtitan's fused_rmsnorm) writes one; its backward op reads three or more tensors
// of the gradient's size (the gradient, the fp32 copy, the normalised rows) where a fused one
// reads two. (A frozen norm weight saves no normalised rows: that backward keeps the fused rule.)
std::optional<Traffic> eager_rmsnorm_traffic(const traces::Trace& trace, traces::OpIndex index) {
  const traces::Op& op = trace.op(index);
  if (op.kind != traces::OpKind::layernorm || op.inputs.empty()) return std::nullopt;
  const traces::Tensor& first = trace.tensor(op.inputs.front());  // x forward, the gradient backward
  const std::int64_t elements = first.elements();
  const auto full_size = [&](const std::vector<traces::TensorIndex>& tensors) {
    return std::count_if(tensors.begin(), tensors.end(), [&](traces::TensorIndex t) { return trace.tensor(t).elements() == elements; });
  };
  const double e = static_cast<double>(elements);
  Traffic t;
  if (op.phase == traces::Phase::forward) {
    if (op.outputs.empty() || full_size(op.outputs) < 2) return std::nullopt;
    const double n = static_cast<double>(traces::element_size(first.dtype));
    const double g = static_cast<double>(traces::element_size(trace.tensor(op.outputs.front()).dtype));
    const bool copy = first.dtype != traces::DType::f32;
    double r = 4 + 4 + 4 + n;  // pow, the row sum, mul by rsqrt, the weight product
    double w = 4 + 4 + g;
    if (copy) {
      r += n + 4;  // to fp32, back to the input's dtype
      w += 4 + n;
    }
    t.kernels = copy ? 9 : 7;
    t.read = e * r;
    t.written = e * w;
  } else if (op.phase == traces::Phase::backward) {
    if (full_size(op.inputs) < 3) return std::nullopt;
    const double g = static_cast<double>(traces::element_size(first.dtype));
    // The normalised rows are in the input's dtype: the full-size 16-bit input that is not the
    // gradient, else fp32.
    double n = 4;
    for (std::size_t k = 1; k < op.inputs.size(); ++k) {
      const traces::Tensor& x = trace.tensor(op.inputs[k]);
      if (x.elements() == elements && x.dtype != traces::DType::f32) n = static_cast<double>(traces::element_size(x.dtype));
    }
    const bool copy = n < 4;
    double r = g + (g + n) + g + 8 + 4 + 4 + 4 + 4 + 8 + 8;
    double w = n + g + 4 + 4 + 4 + 4 + 4 + 4 + 4;
    if (copy) {
      r += n + 4;
      w += 4 + n;
    }
    t.kernels = copy ? 16 : 14;
    t.read = e * r;
    t.written = e * w;
  } else {
    return std::nullopt;
  }
  // The small operands (the weight, the rows' statistics, the weight's gradient) as the trace has them.
  for (const traces::TensorIndex i : op.inputs) {
    if (trace.tensor(i).elements() != elements) t.read += static_cast<double>(trace.tensor(i).bytes());
  }
  for (const traces::TensorIndex o : op.outputs) {
    if (trace.tensor(o).elements() != elements) t.written += static_cast<double>(trace.tensor(o).bytes());
  }
  return t;
}

// An elementwise op the zoo writes for a chain of eager ops lists the chain's intermediate
// tensors among its outputs as temporaries that no op reads (torchtitan's complex rotary: the
// fp32 copy of q or k and the complex product, and their gradients; traces/zoo/README.md). Each
// exists only because the chain's next kernel reads it: one more read of it, and one more
// launch. An op with one output (a sum to a scalar, a loss) has no such intermediates.
void add_eager_temporaries(const traces::Trace& trace, traces::OpIndex index, Traffic& traffic) {
  const traces::Op& op = trace.op(index);
  if (op.kind != traces::OpKind::elementwise || op.outputs.size() < 2) return;
  for (const traces::TensorIndex t : op.outputs) {
    const traces::Tensor& tensor = trace.tensor(t);
    if (tensor.role == traces::TensorRole::temporary && tensor.consumers.empty() && !tensor.is_view()) {
      traffic.read += static_cast<double>(tensor.bytes());
      ++traffic.kernels;
    }
  }
}

// The row a layer norm's second pass finds in the caches. PyTorch's native layer norm (and
// apex's, Megatron's) writes one tensor of its input's size and a mean and a reciprocal deviation
// per row, and its backward reads two tensors of that size (dY, X) besides both statistics: its
// kernels walk rows in global memory (kLayerNormCachedRowBytes). A norm that writes one statistic
// (a fused RMSNorm such as torchtitan's Triton kernel, which holds its row in registers as one
// block) and an eager RMSNorm's chain (more tensors of the input's size; compiled, Inductor's
// one kernel) keep the on-chip judgement.
std::int64_t layernorm_cached_row_bytes(const traces::Trace& trace, const traces::Op& op) {
  if (op.inputs.empty()) return kOnChipBytesPerBlock;
  const std::int64_t input_elements = trace.tensor(op.inputs[0]).elements();
  const auto full_size = [&](const std::vector<traces::TensorIndex>& tensors) {
    return std::count_if(tensors.begin(), tensors.end(), [&](traces::TensorIndex t) { return trace.tensor(t).elements() == input_elements; });
  };
  const bool native = op.phase == traces::Phase::forward ? op.outputs.size() >= 3 && full_size(op.outputs) == 1
                                                         : op.inputs.size() >= 5 && full_size(op.inputs) == 2;
  return native ? kLayerNormCachedRowBytes : kOnChipBytesPerBlock;
}

TrafficRule traffic_rule(traces::OpKind kind, traces::Phase phase) {
  for (const TrafficRow& row : kTrafficTable) {
    if (row.kind == kind && row.phase == phase) return row.rule;
  }
  return TrafficRule::logical;
}

double bytes_of(const traces::Trace& trace, traces::TensorIndex t) { return static_cast<double>(trace.tensor(t).bytes()); }

// Bytes of one row along the last dimension (the softmax and layer-norm dimension in the zoo
// and in captured transformer traces).
std::int64_t row_bytes(const traces::Tensor& t) {
  return t.shape.empty() ? traces::element_size(t.dtype) : t.shape.back() * traces::element_size(t.dtype);
}

// Bytes of one channel plane of an (N, C, ...) tensor: what one block of batch norm's
// backward kernel walks.
std::int64_t plane_bytes(const traces::Tensor& t) {
  if (t.shape.size() < 2 || t.shape[1] == 0) return t.bytes();
  return t.bytes() / t.shape[1];
}

// Extra full reads of a softmax / log_softmax input beyond the first, from host_softmax's
// kernel choice for a contiguous row.
int softmax_forward_extra_reads(const traces::Tensor& x) {
  const std::int64_t element = traces::element_size(x.dtype);
  const std::int64_t dim = x.shape.empty() ? 1 : x.shape.back();
  if (dim <= kPersistentSoftmaxElements && dim * element <= kPersistentSoftmaxBytes) return 0;
  const std::int64_t vector = std::max<std::int64_t>(1, kSoftmaxVectorBytes / element);
  const bool fits_shared_memory = dim * element < kOnChipBytesPerBlock - kSoftmaxReductionBytes && dim % vector == 0;
  return fits_shared_memory ? 0 : 2;  // cunn_SoftMaxForward: max pass, sum-of-exp pass, write pass
}

bool has_integer_input(const traces::Trace& trace, const traces::Op& op) {
  return std::any_of(op.inputs.begin(), op.inputs.end(),
                     [&](traces::TensorIndex t) { return !traces::is_floating(trace.tensor(t).dtype); });
}

// The bytes the op's kernels issue to device memory (see the table above).
Traffic kernel_traffic(const traces::Trace& trace, traces::OpIndex index) {
  const traces::Op& op = trace.op(index);
  Traffic t{static_cast<double>(trace.bytes_read(index)), static_cast<double>(trace.bytes_written(index))};
  const auto& in = op.inputs;
  switch (traffic_rule(op.kind, op.phase)) {
    case TrafficRule::logical: break;
    case TrafficRule::batchnorm_forward:
      if (!in.empty()) t.read += bytes_of(trace, in[0]);
      break;
    case TrafficRule::batchnorm_backward:
      if (in.size() >= 2 && plane_bytes(trace.tensor(in[0])) + plane_bytes(trace.tensor(in[1])) > kOnChipBytesPerBlock) {
        t.read += bytes_of(trace, in[0]) + bytes_of(trace, in[1]);
      }
      break;
    case TrafficRule::layernorm_forward:
      if (!in.empty() && row_bytes(trace.tensor(in[0])) > layernorm_cached_row_bytes(trace, op)) t.read += bytes_of(trace, in[0]);
      break;
    case TrafficRule::layernorm_backward:
      if (in.size() >= 2) {
        const double pair = bytes_of(trace, in[0]) + bytes_of(trace, in[1]);
        t.read += pair;  // the gamma/beta kernel
        if (row_bytes(trace.tensor(in[0])) + row_bytes(trace.tensor(in[1])) > 2 * layernorm_cached_row_bytes(trace, op)) t.read += pair;
      }
      break;
    case TrafficRule::softmax_forward:
      if (!in.empty()) t.read += softmax_forward_extra_reads(trace.tensor(in[0])) * bytes_of(trace, in[0]);
      break;
    case TrafficRule::softmax_backward:
      if (in.size() >= 2) {
        const double grad = bytes_of(trace, in[0]);
        // tmp = grad * output reads both and writes tmp; the softmax kernel then reads tmp
        // (grad-sized) and output again.
        t.read += grad + bytes_of(trace, in[1]);
        t.written += grad;
        // cunn_SoftMaxBackward (rows past the persistent kernel) reduces tmp, then reads it
        // again with output: a second read from memory once the row no longer stays on chip.
        if (row_bytes(trace.tensor(in[0])) > kOnChipBytesPerBlock) t.read += grad;
      }
      break;
    case TrafficRule::loss_forward:
      if (in.empty()) break;
      if (has_integer_input(trace, op)) {
        // nll_loss: of the floating inputs it reads one value (a sector) per target.
        double gathered = 0;
        double floating = 0;
        for (const traces::TensorIndex i : in) {
          if (traces::is_floating(trace.tensor(i).dtype)) {
            floating += bytes_of(trace, i);
          } else {
            gathered += static_cast<double>(trace.tensor(i).elements()) * kSectorBytes;
          }
        }
        t.read -= floating - std::min(floating, gathered);
      } else {
        t.read += softmax_forward_extra_reads(trace.tensor(in[0])) * bytes_of(trace, in[0]);
      }
      break;
    case TrafficRule::loss_backward:
      if (!has_integer_input(trace, op) && !in.empty() && row_bytes(trace.tensor(in[0])) > kOnChipBytesPerBlock) {
        t.read += bytes_of(trace, in[0]);
      }
      break;
    case TrafficRule::gather: {
      // The floating source is read only where the index points: the output's bytes (one row,
      // or one element, per index entry), as the embedding's table.
      double source = 0;
      for (const traces::TensorIndex i : in) {
        if (traces::is_floating(trace.tensor(i).dtype)) source += bytes_of(trace, i);
      }
      double gathered = 0;
      for (const traces::TensorIndex o : op.outputs) gathered += bytes_of(trace, o);
      t.read -= source - std::min(source, gathered);
      break;
    }
    case TrafficRule::scatter: {
      // In place (the output is the destination, inputs[0], or a view of it): only the rows the
      // index names are read and written, as many bytes as the source holds -- or, for a scalar
      // source (one_hot's scatter_), one destination element per index entry. Into a new
      // tensor, the zero fill writes it whole: logical.
      if (in.empty() || op.outputs.empty() || trace.storage_of(op.outputs.front()) != trace.storage_of(in.front())) break;
      const traces::Tensor& destination = trace.tensor(in.front());
      double touched = 0;
      double index_entries = 0;
      for (std::size_t k = 1; k < in.size(); ++k) {
        const traces::Tensor& operand = trace.tensor(in[k]);
        if (traces::is_floating(operand.dtype)) {
          touched += static_cast<double>(operand.bytes());
        } else {
          index_entries += static_cast<double>(operand.elements());
        }
      }
      touched = std::max(touched, index_entries * static_cast<double>(traces::element_size(destination.dtype)));
      const double whole = static_cast<double>(destination.bytes());
      t.read -= whole - std::min(whole, touched);
      t.written -= whole - std::min(whole, touched);
      break;
    }
    case TrafficRule::embedding_forward: {
      // Replace the table (the floating input) by the rows gathered: the output's bytes.
      double table = 0;
      for (const traces::TensorIndex i : in) {
        if (traces::is_floating(trace.tensor(i).dtype)) table += bytes_of(trace, i);
      }
      double gathered = 0;
      for (const traces::TensorIndex o : op.outputs) gathered += bytes_of(trace, o);
      t.read -= table - std::min(table, gathered);
      break;
    }
  }
  return t;
}

// ---- Wave quantization ---------------------------------------------------------------------
//
// cuBLAS, cuDNN and CUTLASS compute a GEMM's output matrix in tiles, one thread block per tile,
// and the GPU runs as many blocks at once as it has SMs: the tiles go in waves. A GEMM with
// fewer tiles than SMs leaves SMs idle for its whole duration, and one with a tile more than a
// whole number of waves runs a last wave that is almost empty (NVIDIA, "Matrix Multiplication
// Background User's Guide", DU-09799-001, 2023: 3.1 "Tile Quantization", 3.2 "Wave
// Quantization"). That is why small GEMMs and convolutions reach far less than the flat
// per-kind efficiency: the efficiency is multiplied by the fraction of SM-slots the tiles fill,
//   tiles / (ceil(tiles / sms) * sms).
// Only the compute term is scaled; the memory term, a kernel's bytes, is unchanged.

// Assumption: a 128 x 128 output tile. cuBLAS picks among 256x128, 128x256, 128x128, 64x128 ...
// per shape (same guide, 2.3 "Typical Tile Dimensions In cuBLAS And Performance"); 128x128 is
// the middle of that list. A library that picks a smaller tile for a small problem fills more
// SMs than this model says: the factor is the wave loss of a 128x128 kernel, a bound on the
// real one. Tile quantization inside a tile (an output of 129 rows computes 256) is not
// counted: the FLOPs stay the trace's.
constexpr std::int64_t kGemmTile = 128;
// Assumption: FlashAttention runs one thread block per (batch, head, block of 128 query rows)
// in the forward pass and per (batch, head, block of 128 key rows) in the backward one, each
// block covering the whole head dimension (Dao, "FlashAttention-2", 2023, section 3.2,
// "Parallelism": thread blocks over batch, heads and sequence blocks).
constexpr std::int64_t kAttentionBlockRows = 128;
// Assumption: a GEMM too small to fill one wave splits its reduction (K) dimension over more
// thread blocks, each summing a slice, and adds the partial sums afterwards (split-K: CUTLASS,
// media/docs/efficient_gemm.md, "Parallelized Reductions"; its convolution wgrad kernels take a
// split_k_slices argument for this). Without it a weight gradient (K = N·P·Q, tens of
// thousands, over a few tiles of output) would be modeled 10-20x too slow. A slice keeps at
// least 256 of K, 8 steps of a 32-deep main loop, so that the split's prologue and reduction
// stay small against its arithmetic (assumption; the reduction's time is not modelled).
constexpr std::int64_t kMinSplitKSlice = 256;

constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// One GEMM's output: `batch` matrices of rows x cols, tiled kGemmTile x kGemmTile (attention:
// cols = 1, so a tile is a block of kGemmTile = kAttentionBlockRows rows).
struct GemmOutput {
  std::int64_t batch = 1;
  std::int64_t rows = 1;
  std::int64_t cols = 1;
  bool split_k = true;  // whether the kernel may split its reduction dimension
  std::int64_t tiles() const { return batch * ceil_div(rows, kGemmTile) * ceil_div(cols, kGemmTile); }
};
static_assert(kAttentionBlockRows == kGemmTile, "GemmOutput tiles attention's rows with kGemmTile");

// The GEMM that writes tensor `t` of an op of kind `kind`, from its shape:
//  - linear: (..., n): the leading dimensions flattened are the GEMM's rows (M), the last its
//    columns (N): y = x·Wᵀ, grad_input = g·W, and grad_weight (out x in) = gᵀ·x alike.
//  - matmul: (batch..., m, n): a batched GEMM, one grid of tiles per matrix.
//  - conv: the implicit-GEMM view (CUTLASS, media/docs/implicit_gemm_convolution.md, "Implicit
//    GEMM Algorithm"). An activation (N, C, spatial...), the forward output or grad_input:
//    M = N·P·Q (every axis but the channels), N = its channels (fprop: the K output channels;
//    dgrad: the C input channels, M = N·H·W). A weight gradient (K, C, R, S), which has no
//    batch dimension: M = K, N = C·R·S (wgrad).
//  - attention: (batch..., S, D): batch x heads x ceil(S / 128) blocks (kAttentionBlockRows).
// nullopt when the shape does not fit the kind (too few dimensions, an empty one).
std::optional<GemmOutput> gemm_output(traces::OpKind kind, const traces::Tensor& t) {
  const std::vector<std::int64_t>& s = t.shape;
  if (std::any_of(s.begin(), s.end(), [](std::int64_t d) { return d < 1; })) return std::nullopt;
  const std::int64_t elements = t.elements();
  switch (kind) {
    case traces::OpKind::linear:
      if (s.empty()) return std::nullopt;
      return GemmOutput{1, elements / s.back(), s.back()};
    case traces::OpKind::matmul:
      if (s.size() < 2) return std::nullopt;
      return GemmOutput{elements / (s[s.size() - 2] * s.back()), s[s.size() - 2], s.back()};
    case traces::OpKind::conv:
      if (s.size() < 3) return std::nullopt;
      if (t.batch_dim == 0) return GemmOutput{1, elements / s[1], s[1]};
      if (!t.batch_dim) return GemmOutput{1, s[0], elements / s[0]};
      return std::nullopt;  // a batch dimension elsewhere: not an (N, C, ...) layout we know
    case traces::OpKind::attention:
      if (s.size() < 3) return std::nullopt;
      return GemmOutput{elements / (s[s.size() - 2] * s.back()), s[s.size() - 2], 1, false};
    default:
      return std::nullopt;
  }
}

// How a GEMM's thread blocks run: the fraction of the SM-slots of its waves they fill, one tile
// per SM per wave (assumption: a 128x128 tensor-core tile takes most of an SM's registers and
// shared memory; the guide's 3.2 counts one 256x128 block per A100 SM; kernels that fit two
// blocks per SM would halve the loss), and the length of the reduction each block runs (K, or
// a slice of it under split-K). `macs` are the GEMM's multiply-adds, which give its
// K = macs / (M·N).
struct BlockWork {
  double fill = 1.0;
  double k = 0;  // 0 when the GEMM's K is not known
};

BlockWork block_work(const GemmOutput& gemm, double macs, int sms) {
  const double k = macs / (static_cast<double>(gemm.batch) * static_cast<double>(gemm.rows) * static_cast<double>(gemm.cols));
  if (sms < 1) return {1.0, k};
  std::int64_t blocks = gemm.tiles();
  std::int64_t slices = 1;
  if (gemm.split_k && blocks < sms) {
    const std::int64_t by_k = k >= 1 ? static_cast<std::int64_t>(std::min(k / kMinSplitKSlice, 1e9)) : 0;
    slices = std::max<std::int64_t>(1, std::min<std::int64_t>(sms / blocks, by_k));
    blocks *= slices;
  }
  const std::int64_t slots = ceil_div(blocks, sms) * sms;
  return {static_cast<double>(blocks) / static_cast<double>(slots), k / static_cast<double>(slices)};
}

// A thread block that reduces k elements spends most of its time in the main loop, k / depth
// steps of its tile's MMAs, and a fixed time around it: the prologue that fills the pipeline's
// stages and the epilogue that converts and stores the output tile. Counted in elements of K,
// that fixed time is efficiency.gemm_k_overhead (k0), so the block reaches k / (k + k0) of the
// efficiency an endless reduction would (models/README.md, "Short reductions": k0 fitted on
// XLA's measured H100 GEMM table). 1 without k0 or without a known K.
double gemm_k_factor(double k, double k_overhead) { return k_overhead > 0 && k > 0 ? k / (k + k_overhead) : 1.0; }

// The factor that multiplies a GEMM-like op's compute efficiency for its shape: the share of
// the SM-slots its tiles fill (1 without gpu.sms) times, where `k_overhead` > 0, the share of a
// block's time spent in the main loop (gemm_k_factor); 1 for other kinds and when no GEMM shape
// can be derived from the trace.
// The GEMMs an op runs are read from what it writes: a forward op's first output (attention's
// second output is its log-sum-exp); a backward op's floating outputs of the GEMM's rank
// (linear and matmul: >= 2, so that a bias gradient, a reduction, is left out; conv: >= 3;
// attention: the first, as one kernel writes dq, dk and dv). A backward op that runs several
// GEMMs (grad_input and grad_weight) takes their harmonic mean, weighting each by its FLOPs:
// time = sum(flops_i / factor_i). Those FLOPs are equal (grad_input, grad_weight and the forward
// GEMM all take M·N·K multiply-adds; so do bmm's two gradients), so the op's FLOPs are shared
// equally, a bias's few included; their K differ (grad_input reduces over the forward's N,
// grad_weight over its M).
double gemm_shape_factor(const traces::Trace& trace, traces::OpIndex index, int sms, double conv_wave_loss, double k_overhead) {
  const traces::Op& op = trace.op(index);
  if ((sms < 1 && !(k_overhead > 0)) || !uses_tensor_cores(op.kind)) return 1.0;
  const std::size_t min_rank = op.kind == traces::OpKind::linear ? (op.phase == traces::Phase::forward ? 1 : 2)
                               : op.kind == traces::OpKind::matmul ? 2
                                                                   : 3;
  std::vector<GemmOutput> gemms;
  const bool first_only = op.phase == traces::Phase::forward || op.kind == traces::OpKind::attention;
  for (const traces::TensorIndex o : op.outputs) {
    const traces::Tensor& t = trace.tensor(o);
    if (traces::is_floating(t.dtype) && t.shape.size() >= min_rank) {
      if (const std::optional<GemmOutput> gemm = gemm_output(op.kind, t)) gemms.push_back(*gemm);
    }
    if (first_only) break;
  }
  if (gemms.empty()) return 1.0;
  const double macs_each = static_cast<double>(trace.flops(index)) / 2 / static_cast<double>(gemms.size());
  double inverse_fills = 0;
  double inverse_factors = 0;
  for (const GemmOutput& gemm : gemms) {
    const BlockWork work = block_work(gemm, macs_each, sms);
    inverse_fills += 1.0 / work.fill;
    inverse_factors += 1.0 / (work.fill * gemm_k_factor(work.k, k_overhead));
  }
  // Convolutions see the share efficiency.conv_wave_loss of the wave loss (Efficiency::conv_wave_loss):
  // cuDNN's algorithm search (torch.backends.cudnn.benchmark) picks per layer among implicit-GEMM
  // kernels of several tiles, split-K and other algorithms, so a small grid loses less than one
  // 128x128 tile per SM would; how much less is fitted per GPU, not derived. The caller gives
  // convolutions no k_overhead.
  if (op.kind == traces::OpKind::conv) return std::pow(static_cast<double>(gemms.size()) / inverse_fills, conv_wave_loss);
  return static_cast<double>(gemms.size()) / inverse_factors;
}

// ---- Kernel ceilings -----------------------------------------------------------------------
//
// The share of a tensor-core peak a kernel reaches depends on the instructions it is built
// with, and on Hopper that is a matter of software. Sources:
// - pytorch/pytorch.github.io@125600c3 _posts/2024-07-11-flashattention-3.md (Shah, Bikshandi,
//   Zhang, Thakkar, Ramani, Dao, "FlashAttention-3", PyTorch blog, 2024-07-11): "FlashAttention-2
//   can achieve up to 70% theoretical max FLOPS on Ampere (A100) GPUs" but "only 35% utilization
//   of theoretical max FLOPs on the H100"; FlashAttention-3 "up to 740 TFLOPS, i.e., 75%
//   utilization of H100 theoretical max FLOPS"; Triton and cuDNN "already use new hardware
//   features of Hopper GPUs"; note 1: "Without the wgmma instruction, the older mma.sync
//   instruction can only reach about 2/3 the peak throughput of Hopper Tensor Cores" (citing
//   Luo et al., arXiv 2402.13499).
// - wgmma came with PTX ISA 8.0, i.e. CUDA 12.0 (NVIDIA, "Parallel Thread Execution ISA",
//   "Release Notes": PTX ISA 8.0, CUDA 12.0, adds wgmma.mma_async): a library built with an
//   earlier toolkit has no wgmma kernel.
// The platform's efficiency.tensor_core says how a GPU's GEMMs reach its peak with current
// libraries (the shipped Hopper platforms derive it from measured cuBLAS ceilings:
// scenarios/platforms/README.md, "Efficiencies"); these ratios move attention and old toolkits
// off it.
constexpr double kWithoutWgmmaShare = 2.0 / 3.0;
// Attention on Hopper, as a share of the A100's own FlashAttention-2 utilisation (which the
// generic efficiency.compute.attention stands for): 35 / 70 and 75 / 70 (blog above).
constexpr double kFlashAttention2HopperShare = 35.0 / 70.0;
constexpr double kHopperAttentionShare = 75.0 / 70.0;

bool is_hopper(const GpuSpec& gpu) { return gpu.compute_capability_major == 9; }

// A kernel of its own that runs beside an op's main one (cuDNN's transposes, float8's casts):
// its time adds, and the op's power is the time-weighted mean of the two.
void append(KernelRun& op, const KernelRun& kernel) {
  const double total = op.seconds + kernel.seconds;
  if (total > 0) op.watts = (op.watts * op.seconds + kernel.watts * kernel.seconds) / total;
  op.seconds = total;
}

// Float8 linears (OpTimeOptions::float8; models/README.md, "Float8 linears"). The GEMM reads one
// byte per element of its operands: the op's floating inputs of rank 2 or more (a bias stays in
// its dtype). Before it, the casts its recipe runs:
//
// Tensorwise, after torchao (torchao/float8/float8_linear.py, matmul_with_hp_or_float8_args, and
// float8_scaling_utils.py, hp_tensor_to_float8_dynamic): every operand is cast from its
// high-precision copy each time, after a reduction over it for its amax (the scale). The forward
// casts the input and the weight; the backward casts the output gradient twice (row- and
// column-major, for grad_input and grad_weight; torch.compile computes its amax once), the weight
// and the saved input once each. Each amax reads the tensor, each cast reads it and writes one
// byte per element; two kernels for a tensor cast once, three for the gradient: the kernels
// torch.compile generates (the eager casts are several kernels each, which comptrain does not
// time: the scenario reader requires framework.compile).
//
// Delayed, after Transformer Engine 1.5 (transformer_engine/pytorch/module/linear.py and
// layernorm_linear.py, _Linear and _LayerNormLinear; base.py, grad_output_preprocess): a scale comes
// from the amax history, which the cast kernel updates as it casts, so a cast is one kernel that
// reads the tensor and writes one byte per element. Forward: the input once (cast_to_fp8), none
// when a norm made it (the norm writes the fp8 copy itself: _LayerNormLinear, also through the
// sequence-parallel all-gather of that copy); the weight with its transpose (fp8_cast_transpose_fused:
// two bytes written) on the first micro-batch of the step only (update_fp8_weights), so a share
// weight_casts_per_micro_step of it per micro-step. Backward: the output gradient cast with its
// transpose (fp8_cast_transpose_fused or cast then transpose: two bytes written), once for the
// input- and weight-gradient GEMMs; the saved fp8 input transposed for the weight gradient
// (fp8_transpose: one byte read, one written); the weight's transpose was made with its cast. A
// tensor two in-scope linears read (q, k and v of one input) is cast once, by the first of them.
struct Float8Work {
  double operand_bytes_saved = 0;  // bytes the GEMM no longer reads (its 16-bit operands read as 8-bit)
  double cast_bytes = 0;           // the amax and cast kernels' traffic
  double cast_kernels = 0;         // launches (a weight cast once per step counts its share)
};

// Whether a norm's forward made `t` (a layernorm op, or a communication op, a sequence-parallel
// all-gather or its backward re-gather, applied to a norm's output). A norm's backward makes a
// gradient, which is cast as gradients are.
bool made_by_norm(const traces::Trace& trace, traces::TensorIndex t) {
  for (int hops = 0; hops < 2; ++hops) {
    const std::optional<traces::OpIndex> producer = trace.tensor(t).producer;
    if (!producer) return false;
    const traces::Op& op = trace.op(*producer);
    if (op.kind == traces::OpKind::layernorm) return op.phase == traces::Phase::forward;
    if (op.kind != traces::OpKind::communication || op.inputs.empty()) return false;
    t = op.inputs.front();
  }
  return false;
}

// Whether `index` is the first in-scope linear of its phase that reads `t` (the one that casts it).
bool first_float8_reader(const traces::Trace& trace, traces::TensorIndex t, traces::OpIndex index, const Float8Scope& scope) {
  const traces::Phase phase = trace.op(index).phase;
  for (const traces::OpIndex c : trace.tensor(t).consumers) {
    const traces::Op& reader = trace.op(c);
    if (reader.phase == phase && in_float8_scope(scope, reader)) return c == index;
  }
  return true;
}

Float8Work float8_work(const traces::Trace& trace, traces::OpIndex index, const Float8Scope& scope) {
  const traces::Op& op = trace.op(index);
  const bool backward = op.phase == traces::Phase::backward;
  Float8Work work;
  for (const traces::TensorIndex t : op.inputs) {
    const traces::Tensor& tensor = trace.tensor(t);
    // Transformer Engine's FP8 copies (float8_memory.hpp): a saved input already one byte an
    // element (u8), read as the 16-bit one was, or a sequence-parallel gather of an FP8 norm
    // output (a temporary); a weight's workspace, whose casts are the weight's.
    const bool fp8_copy = tensor.dtype == traces::DType::u8 &&
                          (tensor.role == traces::TensorRole::activation || tensor.role == traces::TensorRole::temporary);
    if (tensor.role == traces::TensorRole::buffer) continue;
    if ((!traces::is_floating(tensor.dtype) && !fp8_copy) || tensor.shape.size() < 2) continue;
    const double size = static_cast<double>(traces::element_size(tensor.dtype));
    const double elements = bytes_of(trace, t) / size;
    work.operand_bytes_saved += elements * (size - 1.0);
    const bool weight = tensor.role == traces::TensorRole::weight;
    // The output gradient is the backward's activation-sized input that is neither the weight nor
    // the saved input: role temporary (traces/FORMAT.md, tensor roles).
    const bool output_gradient = backward && tensor.role == traces::TensorRole::temporary;
    if (scope.recipe == Float8Recipe::delayed) {
      // A norm's output read backward is the saved input, gathered again under sequence
      // parallelism (a temporary then, as gradients are).
      const bool from_norm = made_by_norm(trace, t);
      if (weight) {
        if (!backward) {
          work.cast_bytes += scope.weight_casts_per_micro_step * elements * (size + 2.0);
          work.cast_kernels += scope.weight_casts_per_micro_step;
        }
      } else if (output_gradient && !from_norm) {
        if (first_float8_reader(trace, t, index, scope)) {
          work.cast_bytes += elements * (size + 2.0);
          work.cast_kernels += 1;
        }
      } else if (backward) {
        if (first_float8_reader(trace, t, index, scope)) {
          work.cast_bytes += elements * 2.0;
          work.cast_kernels += 1;
        }
      } else if (!from_norm && first_float8_reader(trace, t, index, scope)) {
        work.cast_bytes += elements * (size + 1.0);
        work.cast_kernels += 1;
      }
      continue;
    }
    if (scope.fsdp_all_gather && weight) {
      // FSDP gathered it in float8 (Float8Scope::fsdp_all_gather): nothing to cast forward; the
      // input gradient's GEMM takes it column-major, one transposing copy backward.
      if (backward) {
        work.cast_bytes += 2.0 * elements;
        work.cast_kernels += 1;
      }
      continue;
    }
    const double casts = output_gradient ? 2.0 : 1.0;
    work.cast_bytes += elements * (size + casts * (size + 1.0));
    work.cast_kernels += 1 + casts;
  }
  return work;
}

}  // namespace

std::string_view to_string(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::flash_attention_2: return "flash-attention-2";
    case AttentionKernel::flash_attention_3: return "flash-attention-3";
    case AttentionKernel::cudnn: return "cudnn";
  }
  return "flash-attention-2";
}

std::string_view to_string(Float8Recipe recipe) { return recipe == Float8Recipe::delayed ? "delayed" : "tensorwise"; }

std::optional<Float8Recipe> parse_float8_recipe(std::string_view text) {
  for (const Float8Recipe r : {Float8Recipe::tensorwise, Float8Recipe::delayed}) {
    if (text == to_string(r)) return r;
  }
  return std::nullopt;
}

std::optional<AttentionKernel> parse_attention_kernel(std::string_view text) {
  for (const AttentionKernel k : {AttentionKernel::flash_attention_2, AttentionKernel::flash_attention_3, AttentionKernel::cudnn}) {
    if (text == to_string(k)) return k;
  }
  return std::nullopt;
}

double gemm_factor(std::int64_t batch, std::int64_t rows, std::int64_t cols, double k, int sms, double k_overhead) {
  if (batch < 1 || rows < 1 || cols < 1 || !(k > 0)) return 1.0;
  const GemmOutput gemm{batch, rows, cols};
  const BlockWork work = block_work(gemm, k * static_cast<double>(batch) * static_cast<double>(rows) * static_cast<double>(cols), sms);
  return work.fill * gemm_k_factor(work.k, k_overhead);
}

double gemm_k_overhead(const Platform& platform, const OpTimeOptions& options, traces::OpKind kind) {
  if (kind != traces::OpKind::linear && kind != traces::OpKind::matmul) return 0.0;
  // Hopper under an old toolkit runs mma.sync kernels, not the ones efficiency.tensor_core (and
  // the measurements gemm_k_overhead comes from) describe.
  if (is_hopper(platform.gpu) && options.cuda_major > 0 && options.cuda_major < 12) return 0.0;
  return platform.efficiency.gemm_k_overhead;
}

double tensor_core_share(const Platform& platform, const OpTimeOptions& options, traces::OpKind kind) {
  const Efficiency& e = platform.efficiency;
  if (!is_hopper(platform.gpu)) return e.tensor_core;
  if (options.cuda_major > 0 && options.cuda_major < 12) return e.tensor_core_cuda11.value_or(e.tensor_core * kWithoutWgmmaShare);
  if (kind != traces::OpKind::attention) return e.tensor_core;
  return options.attention_kernel == AttentionKernel::flash_attention_2 ? kFlashAttention2HopperShare : kHopperAttentionShare;
}

OpTimeModel::OpTimeModel(Platform platform, OpTimeOptions options) : platform_(std::move(platform)), options_(options) {
  // parse_platform guarantees these; a hand-built Platform might not, and a zero would turn
  // every time into infinity far from the cause.
  const GpuSpec& gpu = platform_.gpu;
  if (!(gpu.memory_bandwidth > 0) || !(gpu.peak_fp32 > 0) || !(gpu.peak_fp16 > 0) || !(gpu.peak_tf32 >= 0) || !(gpu.peak_bf16 >= 0) ||
      !(gpu.launch_overhead >= 0)) {
    throw std::invalid_argument("platform '" + platform_.name + "': the op-time model needs positive GPU peaks and memory bandwidth");
  }
  if (!std::isfinite(gpu.memory_bandwidth) || !std::isfinite(gpu.peak_fp32) || !std::isfinite(gpu.peak_fp16) ||
      !std::isfinite(gpu.peak_tf32) || !std::isfinite(gpu.peak_bf16) || !std::isfinite(gpu.launch_overhead)) {
    throw std::invalid_argument("platform '" + platform_.name + "': the op-time model needs finite GPU peaks, bandwidth and launch overhead");
  }
  // The scenario reader says this at the key; a caller that builds the options itself learns it here.
  if (options_.float8 && !(gpu.peak_fp8 > 0 && std::isfinite(gpu.peak_fp8))) {
    throw InputError("training.float8 runs the linear layers' GEMMs on FP8 tensor cores, which platform '" + platform_.name +
                     "' does not give (gpu.peak.fp8); expected a GPU with FP8 (compute capability 8.9 or later) or no training.float8");
  }
}

int fp32_lanes_per_sm(int major, int minor) {
  // 32-bit floating-point add, multiply and multiply-add results per clock per SM (NVIDIA, CUDA C++
  // Programming Guide, "Arithmetic Instructions", throughput table): 64 on compute capability 6.0,
  // 7.x and 8.0 (P100, V100, A100), 128 on 5.x, 6.1, 6.2 and from 8.6 on (Maxwell, consumer Pascal
  // and Ampere, Ada, Hopper, Blackwell); 0 where the table does not say (before 5.0).
  if (major < 5) return 0;
  if ((major == 6 && minor == 0) || major == 7 || (major == 8 && minor == 0)) return 64;
  return 128;
}

double sm_clock_hz(const GpuSpec& gpu) {
  // The clock the peaks are given at, from the fp32 peak: SMs x lanes x 2 FLOP (an FMA) x clock.
  const int lanes = fp32_lanes_per_sm(gpu.compute_capability_major, gpu.compute_capability_minor);
  if (gpu.sms <= 0 || lanes == 0 || !(gpu.peak_fp32 > 0)) return 0;
  return gpu.peak_fp32 / (static_cast<double>(gpu.sms) * lanes * 2.0);
}

double layout_transpose_seconds(const GpuSpec& gpu, double memory_efficiency, double bytes, traces::DType dtype) {
  // A transpose reads a tile of elements along one dimension and writes it along another through
  // shared memory: its loads and stores go element by element, so below some element size the
  // SMs' load/store issue, not DRAM, sets its pace. 16-bit tensors then take about as long as
  // 4-byte ones of as many elements on the A100 and the H100, whose bandwidth per SM and clock is
  // high; on the V100 (900 GB/s for 80 SMs at 1.53 GHz) the two are about equal.
  const double size = static_cast<double>(traces::element_size(dtype));
  // Read and write of every byte at the memory roofline.
  const double memory = 2.0 * bytes / (gpu.memory_bandwidth * memory_efficiency);
  const double clock = sm_clock_hz(gpu);
  if (clock <= 0 || size <= 0) return memory;
  // Each element read and written once, at the elements the SMs move per clock.
  const double issue = 2.0 * (bytes / size) / (static_cast<double>(gpu.sms) * clock * kTransposeElementsPerSmCycle);
  return std::max(memory, issue);
}

namespace {

// `elements` handled at `per_sm_cycle` elements per SM per clock; 0 where the clock is unknown.
double seconds_at_sm_pace(const GpuSpec& gpu, double elements, double per_sm_cycle) {
  const double clock = sm_clock_hz(gpu);
  if (clock <= 0 || !(elements > 0)) return 0;
  return elements / (static_cast<double>(gpu.sms) * clock * per_sm_cycle);
}

}  // namespace

double index_select_seconds(const GpuSpec& gpu, double elements) {
  return seconds_at_sm_pace(gpu, elements, kIndexSelectElementsPerSmCycle);
}

double scatter_add_seconds(const GpuSpec& gpu, double elements) {
  return seconds_at_sm_pace(gpu, elements, kScatterAddElementsPerSmCycle);
}

KernelRun OpTimeModel::run(const traces::Trace& trace, traces::OpIndex index) const { return run_op(trace, index, nullptr); }

bool in_float8_scope(const Float8Scope& scope, const traces::Op& op) {
  if (op.kind != traces::OpKind::linear || op.phase == traces::Phase::optimizer) return false;
  return std::none_of(scope.skip.begin(), scope.skip.end(), [&](const std::string& pattern) { return module_pattern_matches(pattern, op.name); });
}

std::vector<KernelRun> OpTimeModel::run_all(const traces::Trace& trace) const {
  std::vector<KernelRun> runs(trace.ops().size());
  if (!options_.compile) {
    for (traces::OpIndex o = 0; o < runs.size(); ++o) runs[o] = run_op(trace, o, nullptr);
    return runs;
  }
  const KernelFusion fusion = fuse_like_inductor(trace, *options_.compile);
  for (traces::OpIndex o = 0; o < runs.size(); ++o) runs[o] = run_op(trace, o, fusion.ops[o].compiled ? &fusion.ops[o] : nullptr);
  return runs;
}

KernelRun OpTimeModel::run_op(const traces::Trace& trace, traces::OpIndex index, const FusedOp* fused) const {
  const traces::Op& op = trace.op(index);
  // A view only reinterprets storage: no kernel runs. A communication op's time is the
  // network's (the collective or transfer it names), not a compute kernel's: nothing here.
  if (op.kind == traces::OpKind::view || op.kind == traces::OpKind::communication) return {};

  // Measured durations are wall times of the op's kernels, launch included. They apply only
  // on the very device they were measured on (exact name, as torch.cuda.get_device_name()
  // reports it): a duration from another GPU says little about this one.
  if (op.measured && op.measured->device == platform_.gpu.name) {
    const std::string inputs = "a duration of " + g(op.measured->seconds) + " s measured on " + op.measured->device + " at batch size " +
                               std::to_string(op.measured->batch_size);
    if (!work_scales_with_batch(op)) return {checked(op.measured->seconds, trace, index, inputs), 0.0, 1.0};
    return {checked(op.measured->seconds * static_cast<double>(trace.batch_size()) / static_cast<double>(op.measured->batch_size), trace,
                    index, inputs + ", scaled to batch size " + std::to_string(trace.batch_size())),
            0.0, 1.0};
  }

  const double flops = static_cast<double>(trace.flops(index));
  // The bytes the kernels move, not the logical ones (kernel_traffic, above).
  Traffic traffic = kernel_traffic(trace, index);
  // Eager PyTorch runs an RMSNorm as a chain of kernels; Inductor generates one (fused).
  // Inside a fused kernel (torch.compile), what the group keeps in registers is not moved.
  if (!fused) {
    if (const std::optional<Traffic> chain = eager_rmsnorm_traffic(trace, index)) traffic = *chain;
    add_eager_temporaries(trace, index, traffic);
  } else {
    traffic.read = std::max(0.0, traffic.read - fused->read_saved);
    traffic.written = std::max(0.0, traffic.written - fused->written_saved);
  }
  // A float8 linear's GEMM reads its operands at one byte an element (float8_work, above).
  const bool float8 = options_.float8 && in_float8_scope(*options_.float8, op);
  const Float8Work float8_casts = float8 ? float8_work(trace, index, *options_.float8) : Float8Work{};
  traffic.read = std::max(0.0, traffic.read - float8_casts.operand_bytes_saved);
  const double bytes = traffic.read + traffic.written;
  // Nothing computed and nothing moved (a no-op, or an op whose cost the trace does not
  // know): no kernel to launch either.
  if (flops == 0 && bytes == 0) return {};

  const traces::DType dtype = arithmetic_dtype(trace, index);
  // Tensor-core peaks (TF32, FP16, BF16 in the platform) apply to the kinds that use tensor
  // cores; everything else runs on the CUDA cores, whose rate we take as the fp32 peak for
  // every floating type (a lower bound for half precision, which some GPUs pack 2 per lane).
  const bool allow_tf32 = op.kind == traces::OpKind::conv ? options_.allow_tf32_cudnn : options_.allow_tf32_matmul;
  const double peak = float8                       ? platform_.gpu.peak_fp8
                      : uses_tensor_cores(op.kind) ? platform_.peak_flops(dtype, allow_tf32)
                      : dtype == traces::DType::f64 ? platform_.peak_flops(dtype, false)
                                                     : platform_.gpu.peak_fp32;
  // The flat per-kind efficiency, times the share of the SMs the op's GEMM tiles keep busy
  // and, on tensor cores, of each block's time in its main loop (gemm_shape_factor, above; 1
  // when the platform gives neither gpu.sms nor efficiency.gemm_k_overhead, or the shape is
  // unknown). On tensor cores (a peak other than the CUDA cores' fp32 one) the tensor-core
  // share of the kernels that run applies on top (tensor_core_share: the platform's, moved by
  // the toolkit and the attention kernel).
  const bool tensor_cores = uses_tensor_cores(op.kind) && dtype != traces::DType::f64 && peak != platform_.gpu.peak_fp32;
  const double k_overhead = tensor_cores ? gemm_k_overhead(platform_, options_, op.kind) : 0.0;
  const double compute_efficiency = platform_.efficiency.compute_for(op.kind) *
                                    gemm_shape_factor(trace, index, platform_.gpu.sms, platform_.efficiency.conv_wave_loss, k_overhead) *
                                    (tensor_cores ? tensor_core_share(platform_, options_, op.kind) : 1.0);
  const double memory_efficiency = platform_.efficiency.memory_for(op.kind);
  const double compute = flops / (peak * compute_efficiency);
  double memory = bytes / (platform_.gpu.memory_bandwidth * memory_efficiency);
  // index_select copies element by element at the SMs' pace when that is slower than its bytes
  // (index_select_seconds): an embedding's forward, and a gather's backward, which is an
  // index_add_'s gradient (grad.index_select of the rows its source came from). A forward gather
  // may be aten::index instead (TensorIterator's index_kernel, four elements a thread): its bytes.
  if ((op.kind == traces::OpKind::embedding && op.phase == traces::Phase::forward) ||
      (op.kind == traces::OpKind::gather && op.phase == traces::Phase::backward)) {
    double gathered = 0;
    for (const traces::TensorIndex o : op.outputs) {
      if (traces::is_floating(trace.tensor(o).dtype)) gathered += static_cast<double>(trace.tensor(o).elements());
    }
    memory = std::max(memory, index_select_seconds(platform_.gpu, gathered));
  }
  // A scatter that adds (one FLOP per element added: an index_add_ or scatter_add_ in forward, a
  // gather's gradient in backward) into floating-point rows does so element by element at the SMs'
  // pace (scatter_add_seconds); copies into rows (no FLOPs) and integer scatters (one_hot) keep
  // their bytes.
  if (op.kind == traces::OpKind::scatter && flops > 0 &&
      std::any_of(op.outputs.begin(), op.outputs.end(), [&](traces::TensorIndex o) { return traces::is_floating(trace.tensor(o).dtype); })) {
    memory = std::max(memory, scatter_add_seconds(platform_.gpu, flops));
  }
  const KernelWork kernel{compute, memory, fused && !fused->launches ? 0.0 : traffic.kernels * platform_.gpu.launch_overhead};
  KernelRun result = run_kernel(platform_.gpu, kernel);
  // cuDNN's tensor-core convolution kernels take NHWC tensors; given NCHW ones (PyTorch's
  // default memory format) it transposes each tensor the convolution reads into NHWC and the
  // result back (NVIDIA, "Convolutional Layers User's Guide", section "Tensor Layouts In Memory:
  // NCHW vs NHWC", docs.nvidia.com/deeplearning/performance/dl-performance-convolutional;
  // PyTorch's channels_last tutorial: "cuDNN ... converts NCHW to NHWC internally"). Each
  // transpose is a memory-bound kernel of its own, so it adds to the convolution's time rather
  // than overlapping it: one read and one write of every element the convolution moves, and one
  // launch per tensor. Filters are transposed too; they are in the bytes. Their power is their
  // own (memory-bound); the op's is the time-weighted mean. Their pace: layout_transpose_seconds.
  if (op.kind == traces::OpKind::conv && tensor_cores && !options_.channels_last) {
    const KernelWork transposes{0.0, layout_transpose_seconds(platform_.gpu, memory_efficiency, bytes, dtype),
                                static_cast<double>(op.inputs.size() + op.outputs.size()) * platform_.gpu.launch_overhead};
    append(result, run_kernel(platform_.gpu, transposes));
  }
  // A float8 linear's amax and cast kernels: memory-bound kernels of their own before its GEMM
  // (the default memory efficiency: elementwise kernels and reductions), added as the
  // transposes above are.
  if (float8_casts.cast_kernels > 0) {
    const KernelWork casts{0.0, float8_casts.cast_bytes / (platform_.gpu.memory_bandwidth * platform_.efficiency.memory_default),
                           float8_casts.cast_kernels * platform_.gpu.launch_overhead};
    append(result, run_kernel(platform_.gpu, casts));
  }
  if (std::isfinite(result.seconds) && result.seconds >= 0) return result;
  return {checked(result.seconds, trace, index,
                  g(flops) + " FLOP at " + g(peak) + " FLOP/s x compute efficiency " + g(compute_efficiency) + " and " + g(bytes) +
                      " bytes at " + g(platform_.gpu.memory_bandwidth) + " bytes/s x memory efficiency " + g(memory_efficiency) +
                      ", plus a launch overhead of " + g(platform_.gpu.launch_overhead) + " s (platform '" + platform_.name + "', " +
                      platform_.source + ")"),
          result.watts, result.clock_fraction};
}

traces::DType arithmetic_dtype(const traces::Trace& trace, traces::OpIndex index) {
  const traces::Op& op = trace.op(index);
  const auto first_floating = [&](const std::vector<traces::TensorIndex>& tensors) -> std::optional<traces::DType> {
    for (const traces::TensorIndex t : tensors) {
      if (traces::is_floating(trace.tensor(t).dtype)) return trace.tensor(t).dtype;
    }
    return std::nullopt;
  };
  // A GEMM computes in its operands' precision whatever it writes: bf16 operands run on bf16
  // tensor cores with fp32 accumulation, and an fp32 output (a weight gradient written into
  // Megatron's fp32 main_grad by gradient accumulation fusion: traces/zoo/README.md, "main_grad")
  // is the accumulator's precision, not the math's.
  if (uses_tensor_cores(op.kind)) {
    if (const auto operands = first_floating(op.inputs)) return *operands;
  }
  return first_floating(op.outputs).value_or(first_floating(op.inputs).value_or(traces::DType::f32));
}

}  // namespace comptrain::models

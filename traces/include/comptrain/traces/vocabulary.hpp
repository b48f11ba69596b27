#pragma once
// The closed vocabularies of the trace model: element types, phases, op kinds and tensor
// roles, with their file names ("f32", "backward", "conv", "activation", ...).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace comptrain::traces {

enum class DType : std::uint8_t { f64, f32, f16, bf16, i64, i32, i8, u8, boolean };

enum class Phase : std::uint8_t { forward, backward, optimizer };

enum class OpKind : std::uint8_t {
  conv,
  matmul,  // batched matrix products without weights (attention scores, context)
  linear,  // x·Wᵀ (+ b)
  relu,
  gelu,
  batchnorm,
  layernorm,
  pool,
  softmax,
  attention,  // a fused attention kernel (flash/SDPA); the zoo writes its parts separately
  dropout,
  elementwise,  // add, mul, scale, accumulate-gradient, casts
  embedding,
  // Row gathers and scatters by an int64 index (x[index], index_select, index_add_,
  // index_put_, scatter): memory-bound kernels that touch the rows the index names
  // (models/README.md, "Kernel traffic"). A mixture-of-experts layer's token dispatch.
  gather,
  scatter,
  loss,
  optimizer_update,
  view,  // reshape/flatten/transpose: no data movement
  // A collective or point-to-point transfer between the ranks of a parallel group (Op's
  // `communication` says which); its time is the network's, not the GPU's compute.
  communication,
  other,
};

// What a communication op does (NCCL's collectives and point-to-point calls). Its bytes are its
// tensors' (traces/FORMAT.md, "Communication"): all_reduce reduces its input in place (output =
// input, the same size); all_gather's output is the whole, its input one rank's share;
// reduce_scatter's input is the whole, its output one rank's share; all_to_all exchanges
// equal-sized input and output; send reads its input, recv writes its output.
enum class CommunicationKind : std::uint8_t { all_reduce, reduce_scatter, all_gather, all_to_all, send, recv };

// A communication group of a parallel layout (models/parallel_layout.hpp places its ranks):
enum class ParallelGroup : std::uint8_t {
  tensor,       // T consecutive ranks (one NVLink domain when T divides a node's GPUs)
  context,      // C ranks T apart
  data,         // the D x C ranks that hold the same dense parameters (Megatron: DP x CP)
  expert,       // E ranks of the expert-parallel group (within the D x C ranks)
  expert_data,  // the D x C / E ranks that hold the same experts
  pipeline,     // P ranks T x C x D apart (the stages of one model replica)
};
inline constexpr std::size_t kParallelGroupCount = 6;

enum class TensorRole : std::uint8_t {
  input,            // the mini-batch (samples, labels, token ids)
  weight,           // trainable parameters as used by forward and backward
  weight_copy,      // a lower-precision copy of a weight made in the forward pass (autocast's
                    // cached fp16/bf16 cast), kept while a backward op still needs it
  buffer,           // non-trainable persistent state (batch-norm running statistics)
  gradient,         // gradients of the weights
  optimizer_state,  // momentum, Adam moments, fp32 master weights
  activation,       // a forward tensor autograd saves for the backward pass
  temporary,        // everything else: unsaved forward outputs, activation gradients, workspace
};

std::string_view to_string(DType dtype);
std::string_view to_string(Phase phase);
std::string_view to_string(OpKind kind);
std::string_view to_string(TensorRole role);
std::string_view to_string(CommunicationKind kind);
std::string_view to_string(ParallelGroup group);

std::optional<DType> parse_dtype(std::string_view text);
std::optional<Phase> parse_phase(std::string_view text);
std::optional<OpKind> parse_op_kind(std::string_view text);
std::optional<TensorRole> parse_tensor_role(std::string_view text);
std::optional<CommunicationKind> parse_communication_kind(std::string_view text);
std::optional<ParallelGroup> parse_parallel_group(std::string_view text);

// Every value of each vocabulary, in declaration order (for help texts and error messages).
std::span<const DType> all_dtypes();
std::span<const Phase> all_phases();
std::span<const OpKind> all_op_kinds();
std::span<const TensorRole> all_tensor_roles();
std::span<const CommunicationKind> all_communication_kinds();
std::span<const ParallelGroup> all_parallel_groups();

// Bytes per element. Booleans take one byte, as in PyTorch.
std::int64_t element_size(DType dtype);

// Floating-point element types (f64, f32, f16, bf16): the values a lossy codec may approximate.
constexpr bool is_floating(DType dtype) {
  return dtype == DType::f64 || dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16;
}

// Weights, buffers and optimizer state exist before and after the iteration.
constexpr bool is_resident(TensorRole role) {
  return role == TensorRole::weight || role == TensorRole::buffer ||
         role == TensorRole::optimizer_state;
}

}  // namespace comptrain::traces

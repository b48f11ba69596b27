#pragma once
// A small "mini-autograd" for the model zoo (private to the zoo).
//
// Model definitions call forward layers (conv2d, batchnorm2d, linear, layernorm, ...) in the
// order PyTorch runs them. Each call records one forward op: its inputs, outputs, parameters
// and FLOPs, and -- the point of the exercise -- which tensors autograd saves for backward,
// following PyTorch's derivatives.yaml in training mode with CUDA semantics (see
// traces/zoo/README.md for the table and the reasons). finish() then derives the rest of the
// iteration the way autograd's engine would: one backward op per forward op in reverse order,
// gradient accumulation where a tensor or a weight feeds several ops, one optimizer update per
// weight, and the storage roles; and it builds the traces::Trace.
//
// Shapes are kept per sample: a batch-scaling tensor's extent along its batch dimension is the
// per-sample extent (1 for a [b, ...] tensor, s for [b*s, V] logits), multiplied by the batch
// size only when the trace is built. That makes every FLOP and byte count an exact
// BatchLinear{fixed, per_sample} without evaluating anything at two batch sizes.

#include <cstdint>
#include <map>
#include <set>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "comptrain/traces/trace.hpp"
#include "comptrain/zoo/zoo.hpp"

namespace comptrain::zoo::detail {

// A tensor of the network being built (an index into the builder's tensor list).
struct Value {
  std::size_t index = 0;
};

// PyTorch's type promotion of two dtypes (c10::promoteTypes, for the floating types the zoo uses).
traces::DType promote_types(traces::DType a, traces::DType b);

// Checked arithmetic on per-batch counts (network_builder.cpp): a product or sum that does not
// fit in int64 is an InputError naming `what` (shared/defects-2/13), never a wrapped value.
traces::BatchLinear scaled(traces::BatchLinear value, std::int64_t factor, std::string_view what = "a size or FLOP count of the model");
traces::BatchLinear sum(traces::BatchLinear a, traces::BatchLinear b, std::string_view what = "a size or FLOP count of the model");

// FLOPs per parameter element of an optimizer's step: torch.optim's (network_builder.cpp) and
// the others' (optimizers.cpp).
std::int64_t optimizer_flops_per_element(Optimizer optimizer);
std::int64_t library_optimizer_flops_per_element(Optimizer optimizer);

class NetworkBuilder {
 public:
  // `softmax_saves_input`: softmax and log_softmax save their input too (PyTorch <= 1.10;
  // ModelSpec::softmax_saves_input). `accumulate_gradients_in_place`: a tensor's further
  // gradients are added into its first one (PyTorch >= 2.0), else summed into a new tensor
  // each (ModelSpec::accumulate_gradients_in_place).
  NetworkBuilder(std::string model, std::int64_t batch_size, Precision precision,
                 Optimizer optimizer, OptimizerImpl optimizer_impl, bool softmax_saves_input,
                 bool accumulate_gradients_in_place = true);

  // torchtune's optimizer_in_bwd (ModelSpec::optimizer_in_backward): each weight's step runs
  // as soon as its gradient is complete, inside the backward pass (optimizers.cpp).
  void set_optimizer_in_backward(bool on) { optimizer_in_backward_ = on; }
  // Megatron-LM's layers (ModelRequest::megatron): every weight gradient lives in its DDP's
  // main_grad buffer, of this dtype (keep_gradients_in_main_grad, add_into_main_grad); nullopt:
  // not Megatron's.
  void set_megatron_main_grad(std::optional<traces::DType> dtype) { main_grad_dtype_ = dtype; }

  // The model's dtype: that of its parameters and floating buffers, of the images it is fed
  // and of every activation outside autocast (fp16 in `mixed` and `fp16`, bf16 in `bf16`,
  // fp32 in `fp32` and under autocast).
  traces::DType compute_dtype() const;
  // Under torch.autocast (amp-fp16, amp-bf16).
  bool autocast() const;

  // The shape of `value` for one sample (see the header comment) and its batch dimension.
  const std::vector<std::int64_t>& sample_shape(Value value) const;
  std::int64_t dim(Value value, std::ptrdiff_t axis) const;  // negative axes count from the end
  traces::DType dtype(Value value) const { return tensors_.at(value.index).dtype; }

  // ---- Leaves -------------------------------------------------------------------------------
  // Part of the mini-batch, batch dimension 0 (sample_shape[0] is the per-sample extent).
  Value input(const std::string& name, traces::DType dtype, std::vector<std::int64_t> sample_shape);
  // A trainable parameter in compute_dtype().
  Value parameter(const std::string& name, std::vector<std::int64_t> shape);
  // Non-trainable persistent state, not batch-scaling (running statistics, position ids).
  Value buffer(const std::string& name, traces::DType dtype, std::vector<std::int64_t> shape);

  // ---- Convolutional layers (NCHW) ----------------------------------------------------------
  Value conv2d(const std::string& name, Value x, std::int64_t out_channels, std::int64_t kernel,
               std::int64_t stride, std::int64_t padding, bool bias);
  Value batchnorm2d(const std::string& name, Value x);
  Value maxpool2d(const std::string& name, Value x, std::int64_t kernel, std::int64_t stride,
                  std::int64_t padding);
  Value adaptive_avgpool2d(const std::string& name, Value x, std::int64_t out_h, std::int64_t out_w);
  Value flatten(const std::string& name, Value x);  // [N, C, H, W] -> [N, C*H*W], a view

  // ---- Generic layers -----------------------------------------------------------------------
  // y = x W^T (+ b) over the last dimension; creates `name.weight` [out, in] and `name.bias`.
  Value linear(const std::string& name, Value x, std::int64_t out_features, bool bias);
  // The same with given (possibly shared) parameters, e.g. a decoder tied to an embedding.
  Value linear(const std::string& name, Value x, Value weight, std::optional<Value> bias);
  Value relu_(const std::string& name, Value x);  // in place
  Value relu(const std::string& name, Value x);   // out of place (F.relu): ReluBackward0 saves the result
  // torch.square(x), which is pow(x, 2): PowBackward0 saves x, and its backward runs three
  // kernels, grad * (2 * x.pow(1)) (FunctionsManual.cpp pow_backward; pow with exponent 1 is a
  // copy), whose two intermediates are the backward op's scratch. On autocast's fp32 list.
  Value square(const std::string& name, Value x);
  Value gelu(const std::string& name, Value x);
  Value tanh(const std::string& name, Value x);
  Value dropout(const std::string& name, Value x);
  // a + b, b broadcast over the batch when it does not scale with it.
  Value add(const std::string& name, Value a, Value b);
  Value add_(const std::string& name, Value a, Value b);  // a += b, in place
  Value layernorm(const std::string& name, Value x);      // over the last dimension
  // Softmax over the last dimension, torch's (on autocast's fp32 list: fp32 under autocast).
  // Saves its output, and also the (fp32) tensor it ran on when softmax_saves_input.
  Value softmax(const std::string& name, Value x);
  // Megatron-LM's fused scale-(mask-)softmax kernel: not an autocast op, so it keeps its
  // input's 16-bit dtype; saves what torch's softmax saves.
  Value fused_softmax(const std::string& name, Value x);
  // Batched a·b (a·bᵀ when transpose_b) over the last two dimensions, no weights.
  Value matmul(const std::string& name, Value a, Value b, bool transpose_b);
  // x / c for a Python or 0-dim constant c, a new tensor (DivBackward0 saves nothing of x).
  Value scale(const std::string& name, Value x);
  // torch.where(condition, x, fill) with a constant fill; `condition` needs no gradient and
  // broadcasts over x (WhereBackward0 saves it).
  Value where(const std::string& name, Value condition, Value x);
  // x.to(dtype) as a real op (nothing happens when x already has it); ToCopyBackward0 saves
  // nothing and converts the gradient back.
  Value to_dtype(const std::string& name, Value x, traces::DType dtype);
  // A contiguous copy, transposing the last two dimensions when `transpose`: what torch.matmul's
  // reshape does to permuted attention heads. CloneBackward0 passes the gradient through.
  Value contiguous(const std::string& name, Value x, bool transpose);
  // A fused scaled-dot-product attention kernel (FlashAttention / SDPA) with its dropout:
  // q, k, v [N, heads, S, D] -> [N, heads, S, D]; saves q, k, v, the output and an fp32
  // logsumexp [N, heads, S]. `causal` (is_causal): the kernel computes only the pairs on or
  // below the diagonal, about half the FLOPs.
  Value flash_attention(const std::string& name, Value q, Value k, Value v, bool causal);
  // ---- LLaMA-family pieces (Hugging Face transformers' modeling_llama.py) ------------------
  // LlamaRMSNorm.forward, as its Python runs it:
  //   hidden_states = hidden_states.to(torch.float32)
  //   variance = hidden_states.pow(2).mean(-1, keepdim=True)
  //   hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
  //   return self.weight * hidden_states.to(input_dtype)
  // as one op. Autograd keeps the fp32 input (PowBackward0 and MulBackward0 save it: one
  // storage; a 16-bit input's fp32 copy `<op>.input_fp32`, an output of the op), the fp32
  // rsqrt per row (`<op>.rstd`, RsqrtBackward0's result, MulBackward0's other operand), the
  // normalised rows in the input's dtype (`<op>.normalized`, saved by the weight product) and
  // the weight.
  Value rmsnorm(const std::string& name, Value x);
  // SiLU (x * sigmoid(x)), torch.nn.functional.silu: SiluBackward0 saves its input.
  Value silu(const std::string& name, Value x);
  // a * b, elementwise, with ordinary type promotion. MulBackward0 saves b for a's gradient and
  // a for b's, so both when both need one; an operand needing no gradient may broadcast.
  Value mul(const std::string& name, Value a, Value b);
  // apply_rotary_pos_emb for one of q or k [N, heads, S, D]: x * cos + rotate_half(x) * sin
  // over the first `cos`'s last-dimension channels (all of them, or GPT-NeoX's rotary_pct
  // share, the rest passed through and concatenated back). cos and sin need no gradient and
  // broadcast over batch and heads; MulBackward0 saves them, nothing else is saved (the slices,
  // neg and cat save sizes only). The output is promoted to cos's dtype (fp32 under autocast).
  Value rotary(const std::string& name, Value x, Value cos, Value sin);
  // ---- torchtitan's Llama pieces (torchtitan_decoder.cpp) -----------------------------------
  // torchtitan's FusedRMSNorm (norm_type fused_rmsnorm): TritonFusedRMSNorm.apply, one kernel
  // writing y (x's dtype) and the fp32 rstd per row; ctx.save_for_backward(x, weight, rstd).
  Value fused_rmsnorm(const std::string& name, Value x);
  // torchtitan's apply_rotary_emb for one of q or k: view_as_complex(x.float()) * freqs_cis,
  // view_as_real, type_as(x). `freqs_cis` is the complex64 buffer (as fp32 pairs, the same
  // bytes), needing no gradient; MulBackward0 saves it only. The fp32 copy and the fp32 product
  // are temporaries of the op (and two fp32 gradients of its backward) for a 16-bit x.
  Value rotary_complex(const std::string& name, Value x, Value freqs_cis);
  // ---- Megatron-LM's Transformer Engine layers (megatron_layers.cpp) ------------------------
  // Transformer Engine's fused rotary embedding for one of q or k [N, heads, S, D]: one kernel,
  // `freqs` the fp32 angles [1, S, D] (no gradient), which is all it saves.
  Value fused_rotary(const std::string& name, Value x, Value freqs);
  // Megatron's fused SwiGLU, silu(gate) * up as one kernel that saves both inputs.
  Value fused_swiglu(const std::string& name, Value gate, Value up);
  // Megatron's fused bias-dropout-add in training, residual + dropout(x) as one kernel that
  // saves the bool mask; the output takes the residual's dtype.
  Value dropout_add(const std::string& name, Value x, Value residual);
  // Hugging Face's repeat_kv: x [N, kv_heads, S, D] expanded to [N, kv_heads * n_rep, S, D]
  // and reshaped, which copies (the expanded tensor is not viewable). Saves nothing; its
  // backward sums the groups' gradients into a new tensor.
  Value repeat_kv(const std::string& name, Value x, std::int64_t n_rep);
  // softmax(x, dim=-1, dtype=torch.float32): an fp32 result whatever x's dtype (the kernel's
  // half_to_float; under autocast an fp32 x anyway). Saves the result (and x with
  // softmax_saves_input).
  Value softmax_fp32(const std::string& name, Value x);
  // torch.nn.functional.scaled_dot_product_attention on one fused kernel, causal (the FLOPs of
  // the pairs on or below the diagonal), dropout
  // `dropout` inside: q [N, H, S, D], k and v [N, H_kv, S, D] with H_kv dividing H (only the
  // flash kernel takes H_kv < H). Saves q, k, v, the output and the fp32 logsumexp: [N, H, S]
  // for `flash` (_scaled_dot_product_flash_attention), [N, H, ceil(S / 32) * 32] for
  // `mem_efficient` (_efficient_attention_forward pads it to kAlignLSE = 32 rows).
  enum class SdpaKernel { flash, mem_efficient };
  // Packed documents (ModelSpec::packed_documents): `documents` per sample; `tensor` the flash
  // kernel's int32 cu_seqlens, or the bool block mask [N, S, S] the memory-efficient kernel takes
  // as attn_mask (converted to an additive bias in q's dtype, which it saves).
  struct SdpaPacking {
    std::int64_t documents = 1;
    std::optional<Value> tensor;
  };
  // GPT-OSS's attention (modeling_gpt_oss.py) on the flash kernel: a sliding `window` (each
  // query attends to the `window` keys ending at its own position; 0: the whole causal prefix),
  // counted as the pairs inside the window, and the per-head sink logits `sinks` [heads], a
  // parameter the kernel reads (a term of every row's softmax denominator) and differentiates.
  struct AttentionSinksAndWindow {
    std::int64_t window = 0;
    std::optional<Value> sinks;
  };
  Value sdpa(const std::string& name, Value q, Value k, Value v, SdpaKernel kernel, bool dropout);
  Value sdpa(const std::string& name, Value q, Value k, Value v, SdpaKernel kernel, bool dropout, const SdpaPacking& packing);
  Value sdpa(const std::string& name, Value q, Value k, Value v, SdpaKernel kernel, bool dropout, const SdpaPacking& packing,
             const AttentionSinksAndWindow& sinks_and_window);

  // A forward op that needs no gradient (the attention-mask preprocessing, a bool cast of a
  // buffer): no autograd node, no backward op. The output has the given dtype and shape and
  // follows `like`'s batch dimension.
  Value constant_op(const std::string& name, Value input, traces::DType dtype,
                    std::vector<std::int64_t> sample_shape);
  // The same reading several tensors (none requiring a gradient); the output follows the first
  // one's batch dimension.
  Value constant_op(const std::string& name, const std::vector<Value>& inputs, traces::DType dtype,
                    std::vector<std::int64_t> sample_shape);
  // An op whose output's size the data decides: torch.nonzero and torch.where(mask) (the int64
  // indices of the nonzero elements), boolean-mask indexing (the elements the mask picks). The
  // caller gives the size; the op is a constant_op whose host call waits for the GPU, which must
  // count the elements before the output can be allocated (traces::Op::host_sync).
  Value data_sized_op(const std::string& name, const std::vector<Value>& inputs, traces::DType dtype,
                      std::vector<std::int64_t> sample_shape);
  // The host waits for the GPU after the op just emitted (torch.cuda.current_stream().synchronize()
  // or a .cpu() read of its result): that op becomes host_sync.
  void synchronize_host();
  // torch.index_select(x, 0, index): the rows of x [R, ...] that the int64 `index` [K] (no
  // gradient) names, a new tensor [K, ...]. IndexSelectBackward0 saves the index (and x's sizes):
  // its backward writes a zero tensor of x's shape and index_add_s the gradient into it.
  Value index_select(const std::string& name, Value x, Value index);
  // torch.gather(x, 0, index.view(-1, 1).expand(-1, h)) on rows [R, h]: the same rows, kernel and
  // backward as index_select, but GatherBackward0 saves x itself (derivatives.yaml, gather: `self:
  // gather_backward(grad, self, dim, index, sparse_grad)` passes the tensor, not its sizes), so x
  // stays alive until the backward pass.
  Value gather_rows(const std::string& name, Value x, Value index);
  // Looks `ids` up in a new table `name.weight` [num, dim], or in a given (shared) one.
  Value embedding(const std::string& name, Value ids, std::int64_t num, std::int64_t dim);
  Value embedding(const std::string& name, Value ids, Value weight);

  // ---- Mixture-of-experts pieces (network_builder_moe.cpp) -----------------------------------
  // Hugging Face's expert loop (MixtralSparseMoeBlock.forward, Qwen2MoeSparseMoeBlock.forward):
  // the routing, the gather of each expert's tokens and their sum back into the output.
  //
  // torch.topk(x, k, dim=-1): the k largest of each row, and their int64 indices (no gradient).
  // TopkBackward0 saves the indices (and x's sizes); its backward scatters the gradient into a
  // zero tensor of x's shape.
  struct TopK {
    Value values;
    Value indices;
  };
  TopK topk(const std::string& name, Value x, std::int64_t k);
  // x /= x.sum(dim=-1, keepdim=True), in place (Mixtral's renormalised top-k weights): `sum`
  // (SumBackward1 saves sizes), then DivBackward0 of the in-place division, which needs the
  // divisor and x as it was before -- autograd clones it first (`<name>.clone`) -- and saves
  // both.
  Value normalize_rows_(const std::string& name, Value x);
  // Megatron-core's switch load-balancing loss on the router (TopKRouter.apply_load_balancing_loss
  // and moe_utils.py's switch_load_balancing_loss_func at NVIDIA/Megatron-LM@core_v0.6.0), which
  // MoEAuxLossAutoScaler attaches to the routing scores: `probs` [n, E] the fp32 softmax over
  // every expert's logit (needing a gradient), `indices` [n, k] the experts picked (int64),
  // `scores` [n, k] their weights. Returns the scores as the router hands them on: the same
  // storage, whose backward passes the scores' gradient through and starts the loss's.
  Value load_balancing_loss(const std::string& name, Value probs, Value indices, Value scores);
  // torch.zeros of a shape: a tensor without gradient, written by one op; `batch_scaling` gives
  // it batch dimension 0.
  Value zeros(const std::string& name, traces::DType dtype, std::vector<std::int64_t> sample_shape, bool batch_scaling);
  // The columns of a 2-D tensor without gradient [n, c] as c views [n] (torch.where(mask)'s
  // index tensors are views of one nonzero() result); no op.
  std::vector<Value> columns(const std::string& name, Value x);
  // x[i0, i1, ...]: advanced indexing of x's leading dimensions by int64 index tensors without
  // gradient (all of one length), a new tensor of `sample_shape` in x's dtype. IndexBackward0
  // saves the indices (and x's sizes); its backward writes a zero tensor of x's shape and
  // accumulates the gradient rows into it (index_put_ with accumulate=True).
  Value index(const std::string& name, Value x, const std::vector<Value>& indices, std::vector<std::int64_t> sample_shape);
  // x * w with w [..., 1] broadcast along x's last dimension, both needing a gradient or not:
  // MulBackward0 saves w for x's gradient and x for w's (a product summed over the row).
  Value mul_rows(const std::string& name, Value x, Value w);
  // self.index_add_(0, index, source), in place: source's rows added into self's rows that the
  // int64 index names (self may be a zero tensor without gradient). IndexAddBackward0 saves the
  // index (and source's sizes): self's gradient passes through, source's is
  // grad.index_select(0, index).
  Value index_add_(const std::string& name, Value self, Value index, Value source);
  // torch.sigmoid: SigmoidBackward0 saves the result.
  Value sigmoid(const std::string& name, Value x);
  // x.clamp(min, max) (GPT-OSS's clamped SwiGLU): ClampBackward1 saves the input.
  Value clamp(const std::string& name, Value x);
  // x + c for a number c: AddBackward1 saves nothing.
  Value add_scalar(const std::string& name, Value x);
  // x [..., parts * w] as `parts` views [..., w] of its last dimension (torch.chunk, or
  // GPT-OSS's interleaved gate_up[..., ::2] and [..., 1::2]: the same elements and storage).
  std::vector<Value> chunk_last(const std::string& name, Value x, std::int64_t parts);

  // ---- Views (no data movement) -------------------------------------------------------------
  // The same elements with another per-sample shape (reshape, flatten, transpose for layout).
  Value reshape(const std::string& name, Value x, std::vector<std::int64_t> sample_shape);
  // [N, S, parts*H] -> `parts` views [N, heads, S, H/heads]: splitting a fused QKV projection
  // (parts = 3) or one projection (parts = 1) into attention heads.
  std::vector<Value> split_heads(const std::string& name, Value x, std::int64_t parts,
                                 std::int64_t heads);
  // [N, heads, S, D] -> [N, S, heads*D].
  Value merge_heads(const std::string& name, Value x);
  // x.split(1, dim=-1) with each part .squeeze(-1): [..., parts] -> `parts` views [...]
  // (the start and end logits of a question-answering head).
  std::vector<Value> split_last(const std::string& name, Value x);
  // An op (already named `op`) that splits x into views of `shapes` (torch.split,
  // tensor_split, chunk), named op.0, op.1, ...; its backward concatenates their gradients.
  std::vector<Value> split_into_views(const std::string& op, Value x, const std::vector<std::vector<std::int64_t>>& shapes);
  // x[:, 0]: [N, S, H] -> [N, H] (BERT's pooler reads the first token).
  Value select_first(const std::string& name, Value x);

  // ---- Loss ---------------------------------------------------------------------------------
  // log_softmax (fp32) + nll_loss (mean): logits [N, C], labels [N] int64 -> a scalar.
  // log_softmax saves its input too when softmax_saves_input.
  Value cross_entropy(const std::string& name, Value logits, Value labels);

  // ---- LoRA and QLoRA (lora.cpp) --------------------------------------------------------------
  // From here on every parameter the model defines is frozen, and linear(name, x, out, bias)
  // builds PEFT's LoRA layer where `name` ends in one of `targets` (all linears but
  // `output_layer` with spec.all_linear), and a bitsandbytes NF4 base with spec.nf4.
  void enable_lora(const LoraSpec& spec, std::vector<std::string> targets, std::string output_layer);
  // InputError ("lora.targets: ...") for a target that matched no linear.
  void check_lora_targets() const;
  // ---- Language-model head and loss (loss.cpp) -----------------------------------------------
  // The loss kind of ModelSpec::loss (default: cross_entropy).
  void set_loss(const LossSpec& loss) { loss_ = loss; }
  // The LM head `head_name` (its weight `head` [vocab, H]: its own, or the tied input embedding)
  // over the last hidden states x [1, S, H] per sample and the loss against labels [1, S], as the
  // loss kind computes them. cross_entropy: the head's linear, then (`upcast`, Hugging Face's
  // `logits.float()`) an fp32 copy, then cross_entropy over [S, V] -- the trace the zoo always
  // made; the other kinds as loss.cpp describes.
  Value lm_loss(const std::string& head_name, Value x, Value head, Value labels, bool upcast);

  // ---- Megatron-LM tensor and sequence parallelism (tensor_parallel.cpp) ----------------------
  // The trace becomes one tensor-parallel rank's program (ModelSpec::tensor_parallel). The
  // mappings are megatron/core/tensor_parallel/mappings.py's autograd Functions (NVIDIA/Megatron-LM
  // @d98e8a64ddf34856e74b24714e3bedb2f5a39553, classes at :201-378); each collective is an op of
  // kind communication over the `tensor` group, zero FLOPs, its tensors' bytes. Per-sample shapes
  // are [1, S, H]: the sequence is dimension 1 (Megatron's [S, B, H] dimension 0). Degree 1 (the
  // default) leaves every mapping out, as Megatron's own `world_size == 1` shortcuts do.
  // comm_overlap (TensorParallelSpec::comm_overlap, with sequence_parallel): Transformer Engine's
  // Userbuffers overlaps, marked on the collectives (traces::Communication overlap and splits).
  void set_tensor_parallel(std::int64_t degree, bool sequence_parallel, bool comm_overlap = false);
  std::int64_t tensor_parallel_degree() const { return tensor_parallel_; }
  bool sequence_parallel() const { return sequence_parallel_; }
  // f (_CopyToModelParallelRegion): forward the identity (a view, no data moved), backward an
  // all_reduce of the gradient, in place.
  Value copy_to_tensor_parallel(const std::string& name, Value x);
  // g (_ReduceFromModelParallelRegion): forward an all_reduce, in place; backward the identity.
  Value reduce_from_tensor_parallel(const std::string& name, Value x);
  // _GatherFromSequenceParallelRegion: forward an all_gather along the sequence [1, S/t, ...] ->
  // [1, S, ...] (a new tensor); backward a reduce_scatter of the gradient.
  Value gather_from_sequence_parallel(const std::string& name, Value x);
  // _ReduceScatterToSequenceParallelRegion: forward a reduce_scatter [1, S, ...] -> [1, S/t, ...];
  // backward an all_gather.
  Value reduce_scatter_to_sequence_parallel(const std::string& name, Value x);
  // _ScatterToSequenceParallelRegion: forward this rank's S/t rows (a view: a slice of the
  // leading dimension); backward an all_gather of the gradient.
  Value scatter_to_sequence_parallel(const std::string& name, Value x);
  // The input of column-parallel linears (one or several reading the same tensor: Megatron's
  // fused linear_qkv / linear_fc1, Hugging Face's q/k/v or gate/up projections): without
  // sequence parallelism f(x); with it x's 16-bit S/t shard (autocast's cast first, if any)
  // all-gathered, the gathered tensor a temporary and the shard what the linears save.
  struct ColumnParallelInput {
    Value total;                 // what the GEMMs read
    std::optional<Value> shard;  // sequence parallelism: what they save and re-gather
    // The forward op (copy_to_tensor_parallel, or the sequence-parallel all_gather) whose
    // backward collective reduces the GEMMs' input gradient; unset when it has no backward.
    std::optional<std::size_t> collective;
    // Sequence parallelism: the forward all_gather's op, which TE's ring exchange overlaps with
    // the GEMMs reading its output (comm_overlap).
    std::optional<std::size_t> gather;
  };
  ColumnParallelInput column_parallel_input(const std::string& name, Value x);
  void overlap_gather_with_gemms(const ColumnParallelInput& x);
  // ColumnParallelLinear (layers.py:932) without gather_output: `out_features` are this rank's
  // (the whole width / t), weight [out, in] (or the given, possibly shared one), its own bias
  // shard. Under sequence parallelism it saves the shard and its backward starts with an
  // all_gather of it for the weight gradient (LinearWithGradAccumulationAndAsyncCommunication,
  // layers.py:604 saves `input`, :667-680 gathers it again), a temporary. Degree 1: linear().
  Value column_parallel_linear(const std::string& name, const ColumnParallelInput& x, std::int64_t out_features, bool bias);
  Value column_parallel_linear(const std::string& name, const ColumnParallelInput& x, Value weight);
  // RowParallelLinear (layers.py:1328, forward :1560-1568): x [.., in/t] times this rank's weight
  // [out, in/t], no bias, then reduce_from_tensor_parallel (or reduce_scatter_to_sequence_parallel),
  // then `output_ + self.bias` (`<name>.bias_add`). Degree 1: linear().
  Value row_parallel_linear(const std::string& name, Value x, std::int64_t out_features, bool bias);
  // Under sequence parallelism: `weight` is applied to this rank's S/t rows only, its gradient
  // partial and all-reduced over the tensor group before the optimizer step
  // (sequence_parallel_weights_). Without sequence parallelism, nothing.
  void mark_sequence_parallel_weight(Value weight);
  // Megatron-LM's DDP keeps each parameter's gradient in its main_grad buffer (set_megatron_main_grad:
  // fp32 in a bf16 run). Transformer Engine's linears and Megatron's ColumnParallelLinear write their
  // weight gradients there themselves (gradient accumulation fusion); for a weight whose layer
  // does not, the hook DDP registers on its gradient accumulator adds the 16-bit .grad into
  // main_grad and drops it (distributed_data_parallel.py, _make_param_hook:
  // `param.main_grad.add_(param.grad.data)`, then `param.grad = None`), once per micro-batch,
  // as soon as the gradient is complete: an op `<weight>.main_grad.add_` (elementwise, backward)
  // whose output is the weight's gradient from then on, the 16-bit one a temporary.
  void add_into_main_grad(Value weight);
  // VocabParallelEmbedding.forward (layers.py:336-383) over this rank's rows `weight` [V/t, H]:
  // ids outside the rank's range masked to 0 (two kernels without autograd nodes), the lookup,
  // the masked rows zeroed in place (`output_parallel[input_mask, :] = 0.0`, an index_put_ whose
  // backward saves the mask) and the reduction: all_reduce, or reduce_scatter when `scatter`
  // (sequence parallelism without position embeddings). Degree 1: embedding().
  Value vocab_parallel_embedding(const std::string& name, Value ids, Value weight, bool scatter);
  // _VocabParallelCrossEntropy (cross_entropy.py:121-211) over this rank's logits [S, V/t]: the
  // fp32 copy, the row max and its all_reduce (MAX), the shifted exp, the predicted logit and
  // the sum of exp and their all_reduces (SUM), then the loss and softmax in place. Saves the
  // fp32 softmax [S, V/t], the target mask and the masked targets; the mean over the tokens is
  // folded into the last op. Returns the scalar loss. Degree 1: the same ops, no all_reduces.
  Value vocab_parallel_cross_entropy(const std::string& name, Value logits, Value labels);

  // ---- Megatron-LM expert parallelism (expert_parallel.cpp) ----------------------------------
  // A communication op over `group` (kind communication, zero FLOPs, its tensors' bytes): x ->
  // a new tensor of `sample_shape` (rows of [rows, H]); its backward op runs `backward` over the
  // same group on the output's gradient, giving x's. The token dispatcher's all_to_all (backward
  // all_to_all), and its all_gather / reduce_scatter over the expert-tensor group.
  Value communicate(const std::string& name, Value x, traces::CommunicationKind forward, traces::CommunicationKind backward,
                    traces::ParallelGroup group, std::vector<std::int64_t> sample_shape);
  // torch.cat of row blocks [r_i, H] -> [sum r_i, H], a new tensor (one copy kernel); its
  // backward's narrow views of the gradient are counted as new tensors of each part's shape (a
  // copy each: an upper bound of one output's bytes).
  Value cat_rows(const std::string& name, const std::vector<Value>& parts);
  // grouped_gemm's gmm(x, w, batch_sizes) (Megatron-LM's GroupedMLP): x [R, in] whose rows are
  // grouped by expert, each group times its own [in, out] block of `weight` (2-D, the groups'
  // blocks side by side): y [R, out], 2·R·in·out FLOPs in one call. GroupedGemm's backward saves
  // x and the weight and runs two such GEMMs: x's gradient and the weight's.
  Value grouped_linear(const std::string& name, Value x, Value weight, std::int64_t out_features);
  // x[start:start + rows] of x [R, H]: a view of `rows` rows, no kernel. SliceBackward0 (ATen's
  // slice_backward) writes a zero tensor of x's shape and copies the gradient into those rows:
  // each slice of one tensor gives it a whole gradient of its own, which autograd adds up.
  Value slice_rows(const std::string& name, Value x, std::int64_t rows);
  // self[start:start + rows] = source, in place into self [R, H] (a zero tensor without gradient,
  // or the result of an earlier copy into it): copy_'s kernel over source's rows. Its backward is
  // CopySlices': the whole gradient copied (self's gradient, a new tensor), the rows' gradient
  // cloned (source's), and zeros copied into those rows of the copy.
  Value copy_into_rows_(const std::string& name, Value self, Value source);

  // ---- Megatron-LM pipeline stages (pipeline_stage.cpp) ---------------------------------------
  // The trace becomes one micro-batch of one pipeline stage (ModelSpec::pipeline_stage). Its
  // boundary transfers are ops of kind communication over the `pipeline` group, zero FLOPs, the
  // boundary tensor's bytes (Megatron's p2p_communication.py at NVIDIA/Megatron-LM@d98e8a64).
  //
  // recv_forward: the stage's input from the previous stage, a new tensor of `sample_shape` in
  // `dtype` requiring a gradient (p2p_communication.py:335-341, torch.empty(..., requires_grad=True,
  // dtype=config.pipeline_dtype)). Its backward op sends the tensor's gradient back to the
  // previous stage (send_backward) and produces no gradient of its own.
  // With set_pipeline_scatter_gather(true) the op receives this rank's 1/t of the tensor (split
  // along the sequence, `sample_shape` being the whole) and `<name>.gather` all-gathers it over the
  // tensor group into a new tensor (gather_split_1d_tensor), whose backward takes this rank's slice
  // of the gradient (a copy) for the send back.
  Value receive_from_previous_stage(const std::string& name, traces::DType dtype, std::vector<std::int64_t> sample_shape);
  // send_forward: x to the next stage, outside autograd. x becomes the autograd root: finish(x)
  // starts the backward pass from x's gradient received from the next stage (recv_backward).
  // With set_pipeline_scatter_gather(true) it sends this rank's 1/t of x along the sequence
  // (`<name>.split`, a view: split_tensor_into_1d_equal_chunks), whose gradient, received as 1/t,
  // is all-gathered over the tensor group. Returns what was sent, the root to give finish().
  Value send_to_next_stage(const std::string& name, Value x);
  // PipelineStageSpec::scatter_gather: set after set_tensor_parallel (zoo.cpp checks the degree).
  void set_pipeline_scatter_gather(bool on) { pipeline_scatter_gather_ = on; }
  // A tied word embedding under a pipeline of two or more stages: `weight` is the first stage's
  // embedding or the last stage's copy of it (the head's weight), whose gradient the two stages
  // all-reduce after the backward pass (Megatron-LM's _allreduce_word_embedding_grads, the
  // embedding group). finish() emits it as an exchange with the other end (pipeline_stage.cpp).
  void set_embedding_group_weight(Value weight) { embedding_group_weight_ = weight.index; }

  // ---- Context parallelism (ModelSpec::context_parallel) -------------------------------------
  // The trace becomes one context-parallel rank's program: the model code builds seq_len /
  // degree tokens (context_parallel_degree() divides it out) and the flash kernels attend with
  // context_parallel_attention. Degree 1 (the default) changes nothing.
  void set_context_parallel(std::int64_t degree, ContextParallelSpec::Variant variant);
  std::int64_t context_parallel_degree() const { return context_parallel_; }

 private:
  // tensor_parallel.cpp: the x + bias of a row-parallel linear; an in-place masked zeroing of
  // rows; a communication op with its backward's communication.
  Value add_bias(const std::string& name, Value x, Value bias);
  Value masked_fill_rows_(const std::string& name, Value x, Value mask);
  std::size_t record_communication(const std::string& op, traces::CommunicationKind forward, std::size_t x,
                                   std::vector<std::int64_t> out_shape, bool in_place,
                                   std::optional<traces::CommunicationKind> backward,
                                   traces::ParallelGroup group = traces::ParallelGroup::tensor);
  // linear() whose saved input is the sequence-parallel shard `saved_shard` of x (re-gathered in backward).
  // With `input_collective` (a column-parallel linear's ColumnParallelInput::collective) its
  // backward is two ops, the input gradient's and the weight gradient's, the second emitted after
  // that collective's backward, which overlaps it (BackwardRecipe::split).
  Value linear_saving(const std::string& name, Value x, Value weight, std::optional<Value> bias,
                      std::optional<std::size_t> saved_shard, std::optional<std::size_t> input_collective = std::nullopt);
  void check_sequence_divides(Value x, const std::string& what) const;
  // The flash kernel of one context-parallel rank (network_builder.cpp): q [1, H, S/C, D] of this
  // rank's two load-balanced chunks against the whole sequence's keys and values, k and v
  // [1, G, S/C, D] this rank's share, already in the kernel's dtype; `op` already unique. The
  // ring's or the all-gather's collectives over the `context` group around it (traces/zoo/README.md,
  // "Context parallelism").
  Value context_parallel_attention(const std::string& op, Value q, Value k, Value v, bool dropout);
  // emit_backward's all_gather of a saved shard (regather = shard, gathered), made once.
  std::size_t regathered_input(const std::pair<std::size_t, std::size_t>& regather);

 private:
  // lm_loss's kinds other than cross_entropy (loss.cpp).
  Value fused_cross_entropy_loss(const std::string& head_name, Value x, Value head, Value labels, bool inplace_backward);
  Value chunked_loss(const std::string& head_name, Value x, Value head, Value labels);
  Value fused_linear_cross_entropy_loss(Value x, Value head, Value labels);

 public:

  // Derives backward, gradient accumulation and the optimizer step, and builds the trace.
  // `root` is where autograd's backward starts: the scalar loss, whose gradient is ones
  // (loss.backward()), or a pipeline stage's output given to send_to_next_stage, whose gradient
  // is received from the next stage (Megatron's backward_step: torch.autograd.backward(
  // output_tensor, grad_tensors=output_tensor_grad), schedules.py:539-581).
  // `metadata` is added to source/model/precision/optimizer.
  traces::Trace finish(Value root, std::map<std::string, std::string> metadata = {});

 private:
  struct TensorRecord {
    std::string name;
    traces::DType dtype = traces::DType::f32;
    std::vector<std::int64_t> sample_shape;
    std::optional<std::size_t> batch_dim;
    std::optional<std::size_t> view_of;  // the root storage, never a view itself
    traces::TensorRole role = traces::TensorRole::temporary;  // fixed roles; others derived
    bool requires_grad = false;
    bool saved = false;                  // saved for backward by a forward op
    std::optional<std::size_t> grad;     // the gradient accumulated so far (during finish)
    int partial_grads = 0;
  };

  struct OpRecord {
    std::string name;
    traces::Phase phase = traces::Phase::forward;
    traces::OpKind kind = traces::OpKind::other;
    std::vector<std::size_t> inputs;
    std::vector<std::size_t> outputs;
    std::vector<std::size_t> updated;  // inputs overwritten in place (running stats, optimizer)
    std::vector<std::size_t> aliases;  // outputs that only alias an input: no bytes written
    traces::BatchLinear flops;
    bool host_sync = false;  // traces::Op::host_sync
    // Inputs the op keeps alive but does not read (a saved tensor whose backward needs only its
    // sizes): dependencies and lifetimes as any input, no bytes read.
    std::vector<std::size_t> unread{};
    // Outputs the op adds into rather than makes: a buffer the framework holds before the op
    // (Megatron's main_grad, zeroed once per iteration) that the op reads as well as writes.
    std::vector<std::size_t> accumulated{};
  };

  // How backward produces the gradient of one forward input or parameter.
  struct GradSpec {
    std::size_t target = 0;
    // Set: the gradient is the gradient of this forward output, seen with the target's shape
    // (add's backward passes it through; a reshape's backward reshapes it back). No data moves.
    std::optional<std::size_t> alias_of;
  };

  // A tensor-parallel column-parallel linear's backward as Megatron-LM runs it
  // (LinearWithGradAccumulationAndAsyncCommunication.backward, layers.py:667-711): the input
  // gradient's GEMM (`.backward_input`), the input gradient's all-reduce or reduce-scatter
  // launched asynchronously, then the weight gradient's GEMM (`.backward_weight`) while it runs.
  // The zoo's collective is the backward op of `collective_op` (copy_to_tensor_parallel or the
  // sequence-parallel all_gather), so the weight-gradient op waits until that op's backward is
  // emitted (finish()).
  struct SplitBackward {
    std::size_t collective_op = 0;  // forward op index
    std::size_t input = 0;          // the GEMM's input: its gradient is the first op's
    std::size_t saved_input = 0;    // what the weight gradient reads (the input, or its saved shard)
    std::size_t weight = 0;         // what the input gradient reads (the GEMM's weight)
    traces::BatchLinear input_flops;
  };

  // What a forward op leaves for its backward op.
  struct BackwardRecipe {
    std::string suffix = ".backward";  // the backward op's name: the forward op's + suffix
    std::size_t forward_op = 0;
    std::vector<std::size_t> differentiable_outputs;  // forward outputs gradients flow into
    std::vector<std::size_t> reads;                    // saved tensors and weights it reads
    std::vector<std::size_t> unread;                   // of `reads`, those it only keeps (ForwardOp::kept)
    std::vector<GradSpec> grads;                       // only targets that require grad
    traces::BatchLinear flops;
    traces::OpKind kind = traces::OpKind::other;
    std::vector<std::size_t> scratch;  // workspace the backward op writes and frees
    // Targets whose gradient is a forward tensor: computed in the forward pass and saved
    // (Liger's fused linear cross-entropy), or written over it in place (a fused cross-entropy
    // kernel's inplace_backward). The gradient is a view of it, no new bytes (loss.cpp).
    std::map<std::size_t, std::size_t> computed_in;  // target -> tensor
    std::optional<traces::Communication> communication;  // the backward op's, when a collective
    // Targets whose gradient is a forward output's gradient overwritten in place (an all_reduce
    // of it): a view of its storage, whose bytes the backward op writes. target -> output.
    std::map<std::size_t, std::size_t> reduced_in_place;
    // Sequence parallelism: the saved shard that an all_gather before the backward op gathers
    // again, and the gathered tensor it stands for (tensor_parallel.cpp).
    std::optional<std::pair<std::size_t, std::size_t>> regather;  // shard, gathered
    // Context parallelism: a collective over the context group emitted just before the
    // backward op (context_parallel_attention): it reads `inputs` and writes one new tensor
    // shaped like each of `like` (named `name` + suffix), which the backward op reads instead of
    // `replaced` (the saved shares the gathered tensor stands for).
    struct ContextExchange {
      std::string name;
      traces::Communication communication;
      std::vector<std::size_t> inputs;
      std::vector<std::pair<std::string, std::size_t>> like;  // suffix, template tensor
      std::vector<std::size_t> replaced;
    };
    std::optional<ContextExchange> context_exchange;
    std::optional<SplitBackward> split;
  };

  // A forward op under construction; record() files it and its backward recipe.
  struct ForwardOp {
    std::string name;  // already unique
    traces::OpKind kind = traces::OpKind::other;
    std::vector<std::size_t> inputs;
    std::vector<std::size_t> outputs;
    std::vector<std::size_t> updated;
    std::vector<std::size_t> aliases;
    traces::BatchLinear flops;
    std::vector<std::size_t> differentiable_outputs;
    std::vector<std::size_t> saved;   // tensors autograd saves (marked as saved)
    std::vector<std::size_t> reads;   // further tensors backward reads (weights, buffers)
    // Tensors autograd saves whose data the backward kernel does not read (GatherBackward0's
    // self, of which gather_backward uses the sizes): saved and alive until the backward op,
    // no bytes read.
    std::vector<std::size_t> kept;
    std::vector<GradSpec> grads;      // candidate targets; those not requiring grad are dropped
    traces::BatchLinear backward_flops;
    traces::OpKind backward_kind = traces::OpKind::other;
    std::vector<std::size_t> backward_scratch;  // workspace of the backward op (not saved)
    std::map<std::size_t, std::size_t> computed_in;  // BackwardRecipe::computed_in
    std::optional<traces::Communication> communication;           // kind communication only
    std::optional<traces::Communication> backward_communication;  // BackwardRecipe::communication
    std::map<std::size_t, std::size_t> reduced_in_place;          // BackwardRecipe::reduced_in_place
    std::optional<std::pair<std::size_t, std::size_t>> regather;  // BackwardRecipe::regather
    std::optional<BackwardRecipe::ContextExchange> context_exchange;  // BackwardRecipe::context_exchange
    std::optional<SplitBackward> split;                                // BackwardRecipe::split
    // The backward op consumes the outputs' gradient and produces none: a pipeline stage's
    // received input, whose gradient leaves the stage (send_backward). Without it an op with no
    // gradient target is a mistake in a model definition.
    bool gradient_leaves_stage = false;
  };

  std::string unique_op_name(const std::string& name);
  Value new_parameter(const std::string& name, std::vector<std::int64_t> shape, traces::DType dtype, bool trainable);
  // lora.cpp: a frozen linear, with PEFT's adapters when targeted; the NF4 base of QLoRA.
  Value lora_linear(const std::string& name, Value x, std::int64_t out_features, bool bias);
  Value lora_adapters(const std::string& name, Value x, Value base_out);
  Value nf4_linear(const std::string& name, Value x, std::int64_t out_features, bool bias);
  // packing.cpp: the tensor a packed sdpa call reads and saves (cu_seqlens, or the bias it
  // converts the bool mask to), and its multiply-adds per query head.
  std::optional<std::size_t> packed_attention_mask(const std::string& op, const SdpaPacking& packing, SdpaKernel kernel,
                                                   std::size_t q);
  traces::BatchLinear packed_attention_macs(traces::BatchLinear q_elements, std::int64_t seq, std::int64_t window, const SdpaPacking& packing,
                                            SdpaKernel kernel) const;
  std::size_t add_tensor(TensorRecord record);
  // A fresh tensor written by an op (its role is derived in finish()).
  std::size_t new_output(const std::string& name, traces::DType dtype,
                         std::vector<std::int64_t> sample_shape, std::optional<std::size_t> batch_dim,
                         bool requires_grad);
  // A view of `base` with another shape (same storage, same role).
  // A view of part of x (select_first, slice_rows) as an op: no kernel forward; its backward
  // writes x's gradient as a new tensor, the part's gradient copied into zeros of x's shape.
  Value part_view(const std::string& name, Value x, std::vector<std::int64_t> sample_shape);
  std::size_t new_view(const std::string& name, std::size_t base, std::vector<std::int64_t> sample_shape,
                       std::optional<std::size_t> batch_dim);
  std::size_t emit(OpRecord op);
  void record(ForwardOp op);
  // Autocast's argument casts for an op `op` (CUDA rules, traces/zoo/README.md): to the 16-bit
  // autocast dtype for the ops on its lower-precision list, to fp32 for those on its fp32 list.
  // Nothing outside autocast, for non-floating tensors or tensors already of that dtype. A
  // weight's 16-bit copy is made once per forward pass and reused (autocast's cast cache).
  std::size_t autocast_lower(const std::string& op, std::size_t tensor);
  std::size_t autocast_fp32(const std::string& op, std::size_t tensor);
  std::size_t cast(const std::string& op_name, std::size_t tensor, traces::DType dtype, traces::TensorRole role);
  // An op mapping x to a tensor of the same shape (elementwise, or row-wise like softmax) that
  // saves either its input or its result for backward; in place when `in_place`. Its backward
  // writes one scratch tensor like x per suffix of `backward_scratch` (`<op><suffix>`): the
  // intermediates of a chain of backward kernels.
  enum class Saves { input, result, result_and_input, nothing };
  Saves softmax_saves() const;  // what softmax and the fused softmax save
  Value elementwise_named(const std::string& op, Value x, traces::OpKind kind, std::int64_t forward_flops,
                          std::int64_t backward_flops, Saves saves, bool in_place,
                          const std::vector<std::string>& backward_scratch = {});  // `op` already unique
  Value elementwise(const std::string& name, Value x, traces::OpKind kind, std::int64_t forward_flops,
                    std::int64_t backward_flops, Saves saves, bool in_place);
  void record_add(ForwardOp op);  // add and add_: fills in kind, FLOPs and the gradient routes
  // One kernel with no autograd node (constant_op's, or work whose gradient nothing asks for):
  // reads `inputs`, writes a new tensor of `sample_shape` (one FLOP per element) with `batch_dim`.
  std::size_t untracked_kernel(const std::string& name, std::vector<std::size_t> inputs, traces::DType dtype,
                               std::vector<std::int64_t> sample_shape, std::optional<std::size_t> batch_dim);
  // A sum or mean of x's elements into a smaller tensor of `sample_shape` (a row sum kept as a
  // column, a mean over the rows, a sum to a scalar), which needs a gradient: SumBackward and
  // MeanBackward keep only x's sizes; the backward expands the gradient to x's shape, with
  // `backward_flops` per element of x (0 when the expansion is a view others read).
  Value reduction(const std::string& name, Value x, std::vector<std::int64_t> sample_shape, std::optional<std::size_t> batch_dim,
                  std::int64_t backward_flops);

  bool requires_grad(std::size_t tensor) const { return tensors_.at(tensor).requires_grad; }
  std::size_t storage(std::size_t tensor) const;
  traces::BatchLinear elements(std::size_t tensor) const;
  traces::BatchLinear bytes(std::size_t tensor) const;
  // Checks that `value` has `rank` dimensions; `what` names the layer in the message.
  void expect_rank(Value value, std::size_t rank, const std::string& what) const;

  // finish() steps.
  void emit_backward(const BackwardRecipe& recipe);
  // BackwardRecipe::split: whether `recipe` is emitted as two ops, and the two recipes.
  bool splits_backward(const BackwardRecipe& recipe) const;
  std::pair<BackwardRecipe, BackwardRecipe> split_backward(const BackwardRecipe& recipe) const;
  // The weight-gradient ops deferred until the collective just emitted, marked as overlapping
  // them (and the sequence-parallel all_gather as overlapping the ops before them).
  void emit_overlapped_weight_grads(const std::vector<BackwardRecipe>& weight_parts);
  // The ops after the communication op `collective` and before `end` that an `overlap` counts.
  std::int64_t ops_beside(std::size_t collective, std::size_t end) const;
  void add_gradient(std::size_t target, std::size_t grad, std::size_t producer_op);
  // Megatron-LM's _allreduce_layernorm_grads (finalize_model_grads.py): under sequence
  // parallelism the gradients of sequence_parallel_weights_ all-reduced over the tensor group,
  // one coalesced all_reduce op at the start of the optimizer step (tensor_parallel.cpp).
  void emit_sequence_parallel_gradient_all_reduce();
  // The tied embedding's gradient all-reduced with the other end of the pipeline
  // (set_embedding_group_weight), before the optimizer step (pipeline_stage.cpp).
  void emit_embedding_gradient_exchange();
  void emit_optimizer_steps();
  traces::DType state_dtype(std::size_t weight) const;
  // optimizers.cpp: one weight's step as one op (the optimizers outside torch.optim, and every
  // optimizer in the backward pass) and a state of a weight.
  void emit_step(std::size_t weight);
  std::size_t optimizer_state(std::size_t weight, const std::string& suffix, traces::DType dtype,
                              std::vector<std::int64_t> shape);
  // A weight's gradient is complete, the last backward op adding into it emitted (counted in
  // pending_gradients_): what runs then, Megatron's main_grad add (add_into_main_grad) or
  // torchtune's step in the backward pass.
  void weight_gradient_complete(std::size_t weight);
  void assign_storage_roles();
  traces::Trace build_trace(std::map<std::string, std::string> metadata);  // last: moves the records

  std::string model_;
  std::int64_t batch_size_;
  Precision precision_;
  Optimizer optimizer_;
  OptimizerImpl optimizer_impl_;
  bool softmax_saves_input_;
  bool accumulate_gradients_in_place_;
  bool optimizer_in_backward_ = false;
  LossSpec loss_;
  // weight -> backward ops still to add into its gradient (counted when finish() starts).
  std::map<std::size_t, int> pending_gradients_;
  std::set<std::size_t> main_grad_weights_;  // add_into_main_grad's
  std::optional<traces::DType> main_grad_dtype_;
  // After the backward pass, under set_megatron_main_grad: each 16-bit weight gradient becomes its
  // share of main_grad, in main_grad's dtype (the storage and its views).
  void keep_gradients_in_main_grad();
  // index_select and gather_rows: whether autograd saves x (gather) or only its sizes.
  Value rows_by_index(const std::string& name, Value x, Value index, bool saves_input);
  std::optional<std::pair<std::size_t, std::size_t>> qmaps_;  // bitsandbytes' shared quantisation maps
  std::map<std::size_t, std::size_t> weight_copies_;  // autocast's cache: weight -> 16-bit copy
  std::vector<TensorRecord> tensors_;
  std::vector<OpRecord> ops_;
  std::vector<BackwardRecipe> recipes_;  // one per forward op, in forward order
  std::vector<std::size_t> weights_;     // parameters in creation order
  std::unordered_map<std::string, int> op_name_uses_;
  bool finished_ = false;
  // LoRA (lora.cpp): unset, every parameter trains.
  std::optional<LoraSpec> lora_;
  std::vector<std::string> lora_targets_;
  std::vector<bool> lora_target_used_;
  std::string lora_output_layer_;
  // Tensor parallelism (tensor_parallel.cpp).
  std::int64_t tensor_parallel_ = 1;
  bool sequence_parallel_ = false;
  bool tp_comm_overlap_ = false;
  // Replicated weights that each tensor-parallel rank applies to its own S/t rows under sequence
  // parallelism, so that each holds a partial gradient (Megatron-LM marks them
  // `sequence_parallel`: the norms, the row-parallel linears' biases, the MoE router).
  std::vector<std::size_t> sequence_parallel_weights_;
  std::int64_t context_parallel_ = 1;
  ContextParallelSpec::Variant context_variant_ = ContextParallelSpec::Variant::ring;
  std::map<std::size_t, std::size_t> regathered_;  // saved shard -> its backward all_gather's output
  std::map<std::size_t, std::size_t> regather_ops_;  // saved shard -> its backward all_gather (op index)
  // finish(): collective forward op -> the weight-gradient recipes emitted after its backward.
  std::map<std::size_t, std::vector<BackwardRecipe>> deferred_weight_grads_;
  std::map<std::size_t, traces::Communication> communications_;  // op index -> what the op communicates
  std::optional<std::size_t> nf4_dynamic_map_;  // bitsandbytes' shared 8-bit dynamic map
  // Pipeline stages (pipeline_stage.cpp): the output sent to the next stage, the autograd root.
  std::optional<std::size_t> sent_output_;
  bool pipeline_scatter_gather_ = false;  // set_pipeline_scatter_gather
  std::optional<std::size_t> embedding_group_weight_;  // set_embedding_group_weight
  // finish()'s first step: the root's gradient, ones for a loss or received for a stage output.
  void seed_backward(std::size_t root);
};

}  // namespace comptrain::zoo::detail

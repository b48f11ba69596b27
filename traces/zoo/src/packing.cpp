// Packed sequences: several documents per sample, each attending only to itself
// (traces/zoo/README.md, "Packed sequences").
//
// How the frameworks run it, per attention kind:
// - flash: FlashAttention's varlen kernel (flash_attn_varlen_func), which Hugging Face's
//   flash_attention_2 calls when the position ids restart (DataCollatorWithFlattening) and
//   torchtitan / torchtune call with cu_seqlens: no mask tensor, the causal pairs within each
//   document only; the autograd Function saves cu_seqlens (int32) besides q, k, v, out and the
//   log-sum-exp.
// - sdpa-mem-efficient: scaled_dot_product_attention with the block-causal bool mask as
//   attn_mask (torchtune's packed datasets collate a [b, s, s] bool mask). ATen converts it
//   (convert_boolean_attn_mask: at::where(mask.logical_not(), -inf, 0) in the query's dtype, a
//   new tensor), pads its last dimension to a multiple of 16 for the memory-efficient kernel
//   (preprocess_mask / pad_bias) and runs _scaled_dot_product_efficient_attention with
//   is_causal=False, which computes every (query, key) block and saves the bias for backward
//   (derivatives.yaml). Each call converts anew, so every layer keeps its own bias.
// - eager: the additive 4-D mask [N, 1, S, S] in the model's dtype is per sample (the documents
//   differ between samples) instead of one causal mask broadcast over the batch; the scores
//   are S x S as before.

#include <algorithm>
#include <optional>
#include <string>

#include "comptrain/support/checked.hpp"
#include "network_builder.hpp"

namespace comptrain::zoo::detail {
namespace {

constexpr std::string_view kArithmetic = "a size or FLOP count of the packed model";
// _scaled_dot_product_efficient_attention's alignment of the bias's last dimension
// (aten/src/ATen/native/transformers/sdp_utils: mem_eff_alignment = 16).
constexpr std::int64_t kBiasAlignment = 16;

}  // namespace

Value NetworkBuilder::sdpa(const std::string& name, Value q, Value k, Value v, SdpaKernel kernel, bool dropout) {
  return sdpa(name, q, k, v, kernel, dropout, SdpaPacking{});
}

std::optional<std::size_t> NetworkBuilder::packed_attention_mask(const std::string& op, const SdpaPacking& packing, SdpaKernel kernel,
                                                                 std::size_t q) {
  if (!packing.tensor) return std::nullopt;
  if (kernel == SdpaKernel::flash) return packing.tensor->index;  // cu_seqlens, as it is
  const std::int64_t seq = dim(Value{q}, 2);
  const std::int64_t padded = (seq + kBiasAlignment - 1) / kBiasAlignment * kBiasAlignment;
  return constant_op(op + ".attn_bias", *packing.tensor, tensors_.at(q).dtype, {1, 1, seq, padded}).index;
}

traces::BatchLinear NetworkBuilder::packed_attention_macs(traces::BatchLinear q_elements, std::int64_t seq, std::int64_t window, const SdpaPacking& packing,
                                                          SdpaKernel kernel) const {
  const auto per_row = [&](std::int64_t pairs) {
    // q_elements / seq rows of head_dim each per query position: exact, seq divides both parts.
    return traces::BatchLinear{multiply_or_throw(q_elements.fixed / seq, pairs, kArithmetic),
                               multiply_or_throw(q_elements.per_sample / seq, pairs, kArithmetic)};
  };
  // An explicit mask: is_causal=False, every pair computed (the masked ones are discarded).
  if (packing.tensor && kernel == SdpaKernel::mem_efficient) return per_row(multiply_or_throw(seq, seq, kArithmetic));
  // A sliding window of w keys (one document): position i attends to min(i + 1, w) of them,
  // w(w + 1)/2 pairs over the first w positions and w each after. (The kernel's tiles compute
  // more -- a 128-row query tile straddles two key tiles of a 128-key window -- not counted.)
  if (window > 0) {
    if (packing.documents > 1) throw std::logic_error("sdpa: a sliding window with packed documents is not written");
    const std::int64_t w = std::min(window, seq);
    return per_row(add_or_throw(w * (w + 1) / 2, multiply_or_throw(seq - w, w, kArithmetic), kArithmetic));
  }
  // Causal within each document: D documents of seq / D tokens, the remainder one each to the
  // first; a document of l tokens has l(l + 1)/2 pairs on or below its diagonal (one document:
  // the whole causal triangle, as attention_macs counts it).
  const std::int64_t d = packing.documents;
  const std::int64_t base = seq / d;
  const std::int64_t longer = seq % d;
  const auto pairs = [](std::int64_t l) { return l * (l + 1) / 2; };
  return per_row(add_or_throw(multiply_or_throw(longer, pairs(base + 1), kArithmetic),
                              multiply_or_throw(d - longer, pairs(base), kArithmetic), kArithmetic));
}

}  // namespace comptrain::zoo::detail

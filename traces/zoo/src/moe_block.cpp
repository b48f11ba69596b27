// The sparse mixture-of-experts MLP of the `llama` decoders (traces/zoo/README.md, "Mixture of
// experts"), as Hugging Face transformers writes it:
//   modeling_mixtral.py   MixtralSparseMoeBlock (module `block_sparse_moe`, experts w1, w2, w3)
//   modeling_qwen2_moe.py Qwen2MoeSparseMoeBlock (module `mlp`, experts gate_proj, up_proj,
//                         down_proj, plus `shared_expert` and `shared_expert_gate`)
//   modeling_qwen3_moe.py Qwen3MoeSparseMoeBlock (v4.51: Qwen2-MoE's without the shared expert)
//   modeling_olmoe.py     OlmoeSparseMoeBlock (Mixtral's loop, `mlp`, experts gate_proj, up_proj,
//                         down_proj, the top-k renormalised with norm_topk_prob)
// and the token counts each expert is built with (routed_tokens).
//
// The forward pass, for T = batch * sequence tokens:
//   hidden_states = hidden_states.view(-1, hidden_dim)
//   router_logits = self.gate(hidden_states)
//   routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
//   routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
//   routing_weights /= routing_weights.sum(dim=-1, keepdim=True)     (Mixtral; Qwen2-MoE if norm_topk_prob)
//   routing_weights = routing_weights.to(hidden_states.dtype)
//   final_hidden_states = torch.zeros((T, hidden_dim), dtype=hidden_states.dtype)
//   expert_mask = F.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
//   for each expert e:
//       idx, top_x = torch.where(expert_mask[e])
//       current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
//       current_hidden_states = expert_layer(current_state) * routing_weights[top_x, idx, None]
//       final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
//   Qwen2-MoE: shared_expert_output = F.sigmoid(self.shared_expert_gate(hidden_states)) * self.shared_expert(hidden_states)
//              final_hidden_states = final_hidden_states + shared_expert_output
//   final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)
// (transformers v4.46; later versions loop over the experts that received a token only, the same
// ops when every expert receives one, which routed_tokens requires.)

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "comptrain/support/checked.hpp"
#include "comptrain/support/input_error.hpp"
#include "models.hpp"

namespace comptrain::zoo {

std::vector<std::int64_t> routed_tokens(const MoeArchitecture& moe, const ExpertRouting& routing, std::int64_t seq_len) {
  const std::int64_t experts = moe.experts;
  if (experts < 1 || moe.top_k < 1 || moe.top_k > experts) {
    throw InputError("num_experts_per_tok: " + std::to_string(moe.top_k) + " experts per token of " + std::to_string(experts) +
                     "; expected 1 to the number of experts");
  }
  // Each token picks top_k distinct experts: seq_len * top_k routed slots per sequence.
  const std::int64_t slots = multiply_or_throw(seq_len, moe.top_k, "moe: the routed slots per sequence, seq_len * num_experts_per_tok");
  // Every expert must receive a token (below), so there can be no more experts than slots: said
  // before one counter per expert is allocated (10^12 experts asked for 8 TB here).
  if (experts > slots) {
    throw InputError("moe: " + std::to_string(experts) + " experts but a sequence of " + std::to_string(seq_len) + " tokens routes only " +
                     std::to_string(slots) + " token slots (seq_len * num_experts_per_tok), so expert " + std::to_string(slots) +
                     " receives no token; expected every expert to receive one: at most " + std::to_string(slots) +
                     " experts or a longer seq_len");
  }
  std::vector<std::int64_t> load(static_cast<std::size_t>(experts), slots / experts);
  std::vector<double> shares = routing.expert_load;
  if (routing.load_imbalance) {
    const double f = *routing.load_imbalance;
    if (!shares.empty()) throw InputError("moe: give expert_load or load_imbalance, not both");
    if (!std::isfinite(f) || f < 1 || (experts > 1 && f >= static_cast<double>(experts)) || (experts == 1 && f != 1)) {
      throw InputError("moe.load_imbalance: is " + std::to_string(f) + "; expected the busiest expert's load over the mean, from 1 to below the " +
                       std::to_string(experts) + " experts");
    }
    // Expert 0 takes f times the mean share, the others the rest equally.
    shares.assign(static_cast<std::size_t>(experts), experts > 1 ? (static_cast<double>(experts) - f) / static_cast<double>(experts - 1) : 1.0);
    shares.front() = f;
  }
  if (shares.empty()) {
    // Uniform: the remainder of slots / experts goes one each to the first experts.
    for (std::int64_t e = 0; e < slots % experts; ++e) ++load[static_cast<std::size_t>(e)];
  } else {
    if (static_cast<std::int64_t>(shares.size()) != experts) {
      throw InputError("moe.expert_load: " + std::to_string(shares.size()) + " shares for " + std::to_string(experts) +
                       " experts; expected one per expert");
    }
    double total = 0;
    for (const double share : shares) {
      if (!std::isfinite(share) || share <= 0) {
        throw InputError("moe.expert_load: a share is " + std::to_string(share) + "; expected positive numbers (relative loads)");
      }
      total += share;
    }
    // Largest remainders: the floors of each expert's exact share of the slots, the slots left
    // over one each to the largest fractions (the lower index first on a tie), so that the
    // counts add up to the slots exactly.
    std::vector<double> fraction(load.size());
    std::int64_t assigned = 0;
    for (std::size_t e = 0; e < load.size(); ++e) {
      const double exact = static_cast<double>(slots) * shares[e] / total;
      load[e] = static_cast<std::int64_t>(std::floor(exact));
      fraction[e] = exact - static_cast<double>(load[e]);
      assigned += load[e];
    }
    std::vector<std::size_t> order(load.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return fraction[a] > fraction[b]; });
    for (std::int64_t k = 0; k < slots - assigned; ++k) ++load[order[static_cast<std::size_t>(k) % order.size()]];
  }
  for (std::size_t e = 0; e < load.size(); ++e) {
    if (load[e] > seq_len) {
      throw InputError("moe.expert_load (or load_imbalance): expert " + std::to_string(e) + " would receive " + std::to_string(load[e]) + " of the " +
                       std::to_string(slots) + " routed token slots of a sequence of " + std::to_string(seq_len) +
                       " tokens, but top-k picks an expert at most once per token; expected shares of at most 1 / top_k = " +
                       std::to_string(1.0 / static_cast<double>(moe.top_k)) + " of the total");
    }
  }
  if (routing.capacity_factor) {
    const double factor = *routing.capacity_factor;
    if (!std::isfinite(factor) || factor <= 0) {
      throw InputError("moe.capacity_factor: is " + std::to_string(factor) + "; expected a positive number (1.0: the mean load)");
    }
    // GShard / Switch: capacity = ceil(top_k * tokens * factor / experts), the tokens of one
    // sequence here (so that the trace scales exactly with the batch).
    const auto capacity = static_cast<std::int64_t>(std::ceil(static_cast<double>(slots) * factor / static_cast<double>(experts)));
    for (std::int64_t& tokens : load) tokens = std::min(tokens, capacity);
  }
  for (std::size_t e = 0; e < load.size(); ++e) {
    if (load[e] < 1) {
      throw InputError("moe: expert " + std::to_string(e) + " receives no token of a sequence of " + std::to_string(seq_len) +
                       " (" + std::to_string(slots) + " routed slots); expected every expert to receive one: a longer seq_len, "
                       "a larger share or capacity_factor");
    }
  }
  return load;
}

namespace detail {

bool is_sparse_layer(const MoeArchitecture& moe, std::int64_t layer) {
  // Qwen2MoeDecoderLayer: (layer_idx not in config.mlp_only_layers) and (config.num_experts > 0
  // and (layer_idx + 1) % config.decoder_sparse_step == 0); Mixtral's layers are all sparse.
  return std::find(moe.dense_layers.begin(), moe.dense_layers.end(), layer) == moe.dense_layers.end() &&
         (layer + 1) % moe.sparse_step == 0;
}

std::string sparse_moe_module(const DecoderArchitecture& arch) {
  return arch.family == "mixtral" ? "block_sparse_moe" : "mlp";
}

// GptOssExperts (modeling_gpt_oss.py), expert e on its tokens x [n, h]:
//   gate_up = x @ gate_up_proj[e] + gate_up_proj_bias[e]          one GEMM, 2 x width columns
//   gate, up = gate_up[..., ::2], gate_up[..., 1::2]               views
//   gate = gate.clamp(max=limit); up = up.clamp(-limit, limit)     each saves its input
//   glu = gate * torch.sigmoid(gate * alpha)                       sigmoid saves its result, the product both factors
//   out = ((up + 1) * glu) @ down_proj[e] + down_proj_bias[e]
// The experts' weights are written as one linear each; Hugging Face keeps them as slices of one
// [E, h, 2 x width] parameter indexed per expert, whose backward (IndexBackward0) writes a zero
// gradient of every expert's size for each expert -- not modelled, nor the MegaBlocks kernel
// that `kernels` swaps in for the whole block.
Value gpt_oss_expert(NetworkBuilder& nb, const DecoderArchitecture& arch, const std::string& p, Value x, std::int64_t width) {
  const Value gate_up = nb.linear(p + "gate_up_proj", x, 2 * width, true);
  const std::vector<Value> halves = nb.chunk_last(p + "gate_up.split", gate_up, 2);
  const Value gate = nb.clamp(p + "gate.clamp", halves[0]);
  const Value up = nb.clamp(p + "up.clamp", halves[1]);
  const Value glu = nb.mul(p + "glu", gate, nb.sigmoid(p + "sigmoid", nb.scale(p + "gate.mul_alpha", gate)));
  const Value product = nb.mul(p + "mul", nb.add_scalar(p + "up.add_one", up), glu);
  return nb.linear(p + "down_proj", product, arch.hidden, true);
}

Value swiglu_expert(NetworkBuilder& nb, const DecoderArchitecture& arch, const std::string& p, Value x, std::int64_t width, bool fused) {
  if (arch.moe && arch.moe->gpt_oss_experts) return gpt_oss_expert(nb, arch, p, x, width);
  const bool mixtral = arch.family == "mixtral";
  Value gate = nb.linear(p + (mixtral ? "w1" : "gate_proj"), x, width, false);
  if (fused && arch.activation == DecoderArchitecture::Activation::silu) {
    // Megatron's expert MLP: linear_fc1 (gate and up as one GEMM) and its fused SwiGLU.
    const Value up = nb.linear(p + (mixtral ? "w3" : "up_proj"), x, width, false);
    return nb.linear(p + (mixtral ? "w2" : "down_proj"), nb.fused_swiglu(p + "swiglu", gate, up), arch.hidden, false);
  }
  gate = mlp_activation(nb, arch.activation, p + "act_fn", gate);
  const Value up = nb.linear(p + (mixtral ? "w3" : "up_proj"), x, width, false);
  return nb.linear(p + (mixtral ? "w2" : "down_proj"), nb.mul(p + "mul", gate, up), arch.hidden, false);
}

Value sparse_moe_block(NetworkBuilder& nb, const DecoderArchitecture& arch, const std::vector<std::int64_t>& tokens,
                       const std::string& p, Value x) {
  const MoeArchitecture& moe = *arch.moe;
  const std::int64_t s = nb.dim(x, 1);
  const std::int64_t h = arch.hidden;
  if (static_cast<std::int64_t>(tokens.size()) != moe.experts) throw std::logic_error(p + ": one token count per expert");
  const Value flat = nb.reshape(p + "view", x, {s, h});
  Value weights;
  Value selected;
  if (moe.gpt_oss_experts) {
    // GptOssTopKRouter: F.linear(x, weight, bias), topk of the logits, softmax of the k values
    // in their own dtype, scattered into [T, E] scores that each expert indexes (written here as
    // the [T, k] weights indexed by slot, as Mixtral's: the same values; the [T, E] zeros and the
    // scatter, a few megabytes, left out).
    const Value logits = nb.linear(p + "router", flat, moe.experts, true);
    auto [top, indices] = nb.topk(p + "router.topk", logits, moe.top_k);
    weights = nb.to_dtype(p + "router.softmax.to", nb.softmax(p + "router.softmax", top), nb.dtype(flat));
    selected = indices;
  } else {
    const Value logits = nb.linear(p + "gate", flat, moe.experts, false);
    const Value probs = nb.softmax_fp32(p + "softmax", logits);
    auto [top, indices] = nb.topk(p + "topk", probs, moe.top_k);
    weights = top;
    selected = indices;
    if (moe.normalize_top_k) weights = nb.normalize_rows_(p + "div_", weights);
    weights = nb.to_dtype(p + "routing_weights.to", weights, nb.dtype(flat));
  }
  Value output = nb.zeros(p + "zeros", nb.dtype(flat), {s, h}, true);
  // one_hot(selected_experts).permute(2, 1, 0): int64 [T, k, E] and a view; no autograd.
  const Value mask = nb.constant_op(p + "one_hot", selected, traces::DType::i64, {s, moe.top_k, moe.experts});
  for (std::int64_t e = 0; e < moe.experts; ++e) {
    const std::int64_t n = tokens[static_cast<std::size_t>(e)];
    // torch.where(expert_mask[e]): one nonzero() result [n, 2], the (k slot, token) pairs;
    // idx and top_x are its columns. The launching thread waits for it (nonzero syncs), so the
    // loop cannot run ahead of the GPU from one expert to the next.
    const Value where = nb.data_sized_op(p + "where", {mask}, traces::DType::i64, {n, 2});
    const std::vector<Value> pair = nb.columns(p + "where.unbind", where);
    const Value slot = pair[0];
    const Value token = pair[1];
    const Value current = nb.index(p + "index", flat, {token}, {n, h});
    const Value expert_out = swiglu_expert(nb, arch, p + "experts." + std::to_string(e) + ".", current, moe.intermediate);
    const Value weight = nb.index(p + "routing_weights.index", weights, {token, slot}, {n, 1});
    const Value weighted = nb.to_dtype(p + "to", nb.mul_rows(p + "mul", expert_out, weight), nb.dtype(output));
    output = nb.index_add_(p + "index_add_", output, token, weighted);
  }
  if (moe.shared_expert_intermediate > 0) {
    const Value shared = swiglu_expert(nb, arch, p + "shared_expert.", flat, moe.shared_expert_intermediate);
    const Value gate = nb.sigmoid(p + "sigmoid", nb.linear(p + "shared_expert_gate", flat, 1, false));
    output = nb.add(p + "add", output, nb.mul_rows(p + "shared_expert.mul_gate", shared, gate));
  }
  return nb.reshape(p + "reshape", output, {1, s, h});
}

}  // namespace detail
}  // namespace comptrain::zoo

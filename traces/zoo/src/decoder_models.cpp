// LLaMA-family decoders (LLaMA, Mistral, Qwen2) and GPT-NeoX, as Hugging Face transformers
// writes them (modeling_llama.py, modeling_gpt_neox.py; module and parameter names are
// theirs), for training: LlamaForCausalLM / GPTNeoXForCausalLM with the loss. What each op
// saves is PyTorch autograd's (traces/zoo/README.md, "Decoders and Hugging Face configs").
//
// The code followed is transformers' as of v4.46 and later, where the rotary cos/sin are made
// once per forward pass by the model (LlamaModel.rotary_emb) and handed to every layer, and the
// causal-LM loss upcasts the logits (ForCausalLMLoss: `logits = logits.float()`) and shifts the
// labels rather than the logits. The labels arrive already shifted here, as for GPT-2.

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "models.hpp"

namespace comptrain::zoo::detail {
namespace {

using traces::DType;

// Module names of the two code bases.
struct Names {
  std::string base;        // the decoder module
  std::string embed;       // token embedding, under `base`
  std::string layers;      // "layers", under `base`
  std::string attention;   // the attention module in a layer
  std::string output;      // the attention's output projection
  std::string up;          // the MLP's first (ungated: only) projection
  std::string down;        // the MLP's last projection
  std::string act;         // the MLP's activation module
  std::string final_norm;  // under `base`
  std::string head;        // the LM head, a top-level module
};

Names names_of(const std::string& family) {
  if (family == "gpt_neox") {
    return {"gpt_neox.", "embed_in", "layers", "attention", "dense", "dense_h_to_4h", "dense_4h_to_h", "act",
            "final_layer_norm", "embed_out"};
  }
  return {"model.", "embed_tokens", "layers", "self_attn", "o_proj", "up_proj", "down_proj", "act_fn", "norm", "lm_head"};
}

// Megatron's Transformer Engine layers (megatron_layers.cpp) normalise with TE's fused RMSNorm.
Value norm(NetworkBuilder& nb, const DecoderArchitecture& arch, const std::string& name, Value x, const MegatronOptions* megatron) {
  if (megatron) return nb.fused_rmsnorm(name, x);
  return arch.norm == DecoderArchitecture::Norm::rms ? nb.rmsnorm(name, x) : nb.layernorm(name, x);
}

Value activation(NetworkBuilder& nb, const DecoderArchitecture& arch, const std::string& name, Value x) {
  return mlp_activation(nb, arch.activation, name, x);
}

// An RMSNorm over the head_dim channels of each of `heads` heads of a projection's output
// [N, S, heads x head_dim]: viewed as [N, S, heads, head_dim], normalised (a new tensor), and
// viewed back so that the heads split as the projection's own output would.
Value per_head_rmsnorm(NetworkBuilder& nb, const std::string& name, Value x, std::int64_t heads, std::int64_t head_dim) {
  const std::int64_t batch = nb.dim(x, 0);  // the per-sample shape's leading 1 (the batch scales it)
  const std::int64_t seq = nb.dim(x, 1);
  const Value by_head = nb.reshape(name + ".view", x, {batch, seq, heads, head_dim});
  return nb.reshape(name + ".merge", nb.rmsnorm(name, by_head), {batch, seq, heads * head_dim});
}

struct Rotary {
  Value cos;
  Value sin;
  std::optional<Value> freqs;  // Megatron's fp32 angles for Transformer Engine's fused kernel
  std::optional<Value> causal_mask;  // eager attention's additive mask
  NetworkBuilder::SdpaPacking packing;  // packed documents (packing.cpp)
};

// LlamaAttention.forward with eager_attention_forward (v4.46+):
//   query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)   (k, v alike)
//   query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
//   key_states = repeat_kv(key, module.num_key_value_groups)                       (v alike)
//   attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
//   attn_weights = attn_weights + causal_mask
//   attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
//   attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
//   attn_output = torch.matmul(attn_weights, value_states)
//   attn_output = attn_output.transpose(1, 2).contiguous()
//   attn_output = self.o_proj(attn_output.reshape(*input_shape, -1))
// or sdpa_attention_forward, which calls torch.nn.functional.scaled_dot_product_attention
// (is_causal, no mask). A dropout of p = 0 returns its input (at::dropout), so none is
// recorded unless the config's attention_dropout is nonzero.
//
// GptOssAttention (modeling_gpt_oss.py) is LlamaAttention with biases on its four projections,
// `sinks` (one learned logit per head joined to every softmax row) and, on its
// "sliding_attention" layers, a window of `window` keys (0: none).
Value attention(NetworkBuilder& nb, const DecoderArchitecture& arch, const std::string& p, Value x, const Rotary& rotary,
                Attention implementation, std::int64_t window, const MegatronOptions* megatron) {
  const std::int64_t h = arch.hidden;
  const std::int64_t head_dim = arch.head_size();
  // Tensor parallelism: this rank's a/t query heads and g/t KV heads (zoo.cpp checks that t
  // divides both); q, k and v column-parallel over one shared input, o_proj row-parallel.
  const std::int64_t t = nb.tensor_parallel_degree();
  const std::int64_t heads = arch.heads / t;
  const std::int64_t kv_heads = arch.kv_heads / t;
  Value q;
  Value k;
  Value v;
  if (arch.family == "gpt_neox") {
    // GPTNeoXAttention: one fused projection, viewed as [N, S, heads, 3 * head_dim] and sliced
    // into q, k, v: views of one storage.
    const Value qkv = nb.linear(p + "query_key_value", x, 3 * h, arch.qkv_bias);
    const auto parts = nb.split_heads(p + "split_heads", qkv, 3, arch.heads);
    q = parts[0];
    k = parts[1];
    v = parts[2];
  } else {
    const std::int64_t kv_width = kv_heads * head_dim;
    // Megatron fuses the three into linear_qkv; Hugging Face's separate projections share one
    // f / all_gather here, and under sequence parallelism one saved shard and one re-gather.
    const NetworkBuilder::ColumnParallelInput input = nb.column_parallel_input(p + "qkv", x);
    Value q_out = nb.column_parallel_linear(p + "q_proj", input, heads * head_dim, arch.qkv_bias);
    Value k_out = nb.column_parallel_linear(p + "k_proj", input, kv_width, arch.qkv_bias);
    if (arch.qk_norm == DecoderArchitecture::QkNorm::per_head) {
      // Qwen3Attention: self.q_norm(self.q_proj(x).view(hidden_shape)), an RMSNorm of
      // head_dim channels per head (its statistics one per token and head), then transposed.
      q_out = per_head_rmsnorm(nb, p + "q_norm", q_out, heads, head_dim);
      k_out = per_head_rmsnorm(nb, p + "k_norm", k_out, kv_heads, head_dim);
    } else if (arch.qk_norm == DecoderArchitecture::QkNorm::projection) {
      // OlmoeAttention: self.q_norm(self.q_proj(x)), an RMSNorm over the whole projection
      // (hidden_size channels; k_norm over kv_heads x head_dim), before the view into heads.
      q_out = nb.rmsnorm(p + "q_norm", q_out);
      k_out = nb.rmsnorm(p + "k_norm", k_out);
    }
    q = nb.split_heads(p + "q_proj.view", q_out, 1, heads).front();
    k = nb.split_heads(p + "k_proj.view", k_out, 1, kv_heads).front();
    v = nb.split_heads(p + "v_proj.view", nb.column_parallel_linear(p + "v_proj", input, kv_width, arch.qkv_bias), 1, kv_heads)
            .front();
  }
  if (megatron && megatron->rope_fusion) {
    q = nb.fused_rotary(p + "q_rotary", q, *rotary.freqs);
    k = nb.fused_rotary(p + "k_rotary", k, *rotary.freqs);
  } else {
    q = nb.rotary(p + "q_rotary", q, rotary.cos, rotary.sin);
    k = nb.rotary(p + "k_rotary", k, rotary.cos, rotary.sin);
  }
  const std::int64_t groups = arch.heads / arch.kv_heads;

  Value context;
  switch (implementation) {
    case Attention::eager: {
      k = nb.repeat_kv(p + "k_repeat", k, groups);
      v = nb.repeat_kv(p + "v_repeat", v, groups);
      // The rotated q and k are contiguous [N, H, S, D] and k's transpose folds into bmm's
      // batch as a view, so bmm saves them (their autocast copies) without copying; v is a
      // transposed view of its projection, which matmul's reshape copies (when repeat_kv has
      // not already made a contiguous copy).
      Value scores = nb.matmul(p + "scores", q, k, true);
      scores = nb.scale(p + "scores.mul", scores);
      scores = nb.add(p + "scores.add_mask", scores, *rotary.causal_mask);
      Value probs = nb.softmax_fp32(p + "softmax", scores);
      probs = nb.to_dtype(p + "softmax.to", probs, nb.dtype(q));
      if (arch.attention_dropout) probs = nb.dropout(p + "dropout", probs);
      if (groups == 1) v = nb.contiguous(p + "context.value_copy", v, false);
      context = nb.matmul(p + "context", probs, v, false);
      break;
    }
    case Attention::flash: {
      // The flash kernel takes fewer K/V heads than query heads as they are: FlashAttention-2
      // (flash_attn_func, Hugging Face's flash_attention_2) and scaled_dot_product_attention
      // with enable_gqa (PyTorch 2.5 and later) skip repeat_kv.
      NetworkBuilder::AttentionSinksAndWindow extras;
      extras.window = window;
      // GptOssAttention.sinks: nn.Parameter(torch.empty(config.num_attention_heads)), this
      // rank's heads of it under tensor parallelism.
      if (arch.attention_sinks) extras.sinks = nb.parameter(p + "sinks", {heads});
      context = nb.sdpa(p + "scaled_dot_product_attention", q, k, v, NetworkBuilder::SdpaKernel::flash,
                        arch.attention_dropout, rotary.packing, extras);
      break;
    }
    case Attention::sdpa_mem_efficient:
      k = nb.repeat_kv(p + "k_repeat", k, groups);
      v = nb.repeat_kv(p + "v_repeat", v, groups);
      context = nb.sdpa(p + "scaled_dot_product_attention", q, k, v, NetworkBuilder::SdpaKernel::mem_efficient,
                        arch.attention_dropout, rotary.packing);
      break;
    case Attention::fused_softmax:
      throw std::logic_error("decoder: fused-softmax attention is refused before building");
  }
  // transpose(1, 2).contiguous() copies the eager context (o_proj then saves the copy) and is
  // a no-op on the kernels' output, already laid out [N, S, H, D]; written as a view (the bytes
  // o_proj saves are the same).
  const Value merged = nb.merge_heads(p + "merge_heads", context);
  return nb.row_parallel_linear(p + names_of(arch.family).output, merged, h, arch.output_bias);
}

// LlamaMLP: down_proj(act_fn(gate_proj(x)) * up_proj(x)); GPTNeoXMLP: dense_4h_to_h(act(dense_h_to_4h(x))).
Value mlp(NetworkBuilder& nb, const DecoderArchitecture& arch, const std::string& p, Value x, const MegatronOptions* megatron) {
  // Tensor parallelism: gate and up (Megatron's fused linear_fc1) column-parallel, I/t each,
  // over one shared input; down row-parallel.
  const Names names = names_of(arch.family);
  const std::int64_t width = arch.intermediate / nb.tensor_parallel_degree();
  const NetworkBuilder::ColumnParallelInput input = nb.column_parallel_input(p + "fc1", x);
  if (!arch.gated_mlp) {
    Value m = nb.column_parallel_linear(p + names.up, input, width, arch.mlp_bias);
    m = activation(nb, arch, p + names.act, m);
    return nb.row_parallel_linear(p + names.down, m, arch.hidden, arch.mlp_bias);
  }
  Value gate = nb.column_parallel_linear(p + "gate_proj", input, width, arch.mlp_bias);
  if (megatron && megatron->bias_activation_fusion && arch.activation == DecoderArchitecture::Activation::silu) {
    // Megatron's linear_fc1 is the gate and up projections as one GEMM; its fused SwiGLU.
    const Value up = nb.column_parallel_linear(p + "up_proj", input, width, arch.mlp_bias);
    return nb.row_parallel_linear(p + names.down, nb.fused_swiglu(p + "swiglu", gate, up), arch.hidden, arch.mlp_bias);
  }
  gate = activation(nb, arch, p + names.act, gate);
  const Value up = nb.column_parallel_linear(p + "up_proj", input, width, arch.mlp_bias);
  const Value product = nb.mul(p + "mul", gate, up);
  return nb.row_parallel_linear(p + names.down, product, arch.hidden, arch.mlp_bias);
}

// The layer's MLP: dense, or the mixture of experts of a sparse layer (MixtralDecoderLayer's
// block_sparse_moe, Qwen2MoeDecoderLayer's sparse mlp) whose experts process `expert_tokens`
// tokens per sequence each (moe_block.cpp).
Value layer_mlp(NetworkBuilder& nb, const DecoderArchitecture& arch, const std::string& p, std::int64_t layer, Value x,
                const std::vector<std::int64_t>& expert_tokens, const ExpertParallelPlan* expert_parallel, const MegatronOptions* megatron) {
  if (arch.moe && is_sparse_layer(*arch.moe, layer)) {
    if (expert_parallel) return megatron_moe_layer(nb, arch, *expert_parallel, p + sparse_moe_module(arch) + ".", x, megatron);
    return sparse_moe_block(nb, arch, expert_tokens, p + sparse_moe_module(arch) + ".", x);
  }
  return mlp(nb, arch, p + "mlp.", x, megatron);
}

// LlamaDecoderLayer (pre-norm, sequential residuals) or GPTNeoXLayer (use_parallel_residual:
// hidden_states = mlp_output + attn_output + hidden_states).
Value decoder_layer(NetworkBuilder& nb, const DecoderArchitecture& arch, const std::string& p, std::int64_t layer, Value x,
                    const Rotary& rotary, Attention implementation, const std::vector<std::int64_t>& expert_tokens,
                    const ExpertParallelPlan* expert_parallel, const MegatronOptions* megatron) {
  const Names names = names_of(arch.family);
  // The residual sums: Megatron's fused bias-dropout-add when its hidden dropout is on (one
  // kernel and a mask); a plain sum otherwise (Megatron's kernel without dropout is one too).
  const auto residual = [&](Value stream, Value branch) {
    if (megatron && megatron->hidden_dropout > 0) return nb.dropout_add(p + "add", branch, stream);
    return nb.add(p + "add", stream, branch);
  };
  Value a = norm(nb, arch, p + "input_layernorm", x, megatron);
  const bool sliding = !arch.sliding_layers.empty() && arch.sliding_layers[static_cast<std::size_t>(layer)];
  a = attention(nb, arch, p + names.attention + ".", a, rotary, implementation, sliding ? arch.window : 0, megatron);
  if (arch.parallel_residual) {
    Value m = norm(nb, arch, p + "post_attention_layernorm", x, megatron);
    m = layer_mlp(nb, arch, p, layer, m, expert_tokens, expert_parallel, megatron);
    return nb.add(p + "add", nb.add(p + "add", m, a), x);
  }
  x = residual(x, a);  // hidden_states = residual + hidden_states
  Value m = norm(nb, arch, p + "post_attention_layernorm", x, megatron);
  m = layer_mlp(nb, arch, p, layer, m, expert_tokens, expert_parallel, megatron);
  return residual(x, m);
}

}  // namespace

Value mlp_activation(NetworkBuilder& nb, DecoderArchitecture::Activation activation, const std::string& name, Value x) {
  switch (activation) {
    case DecoderArchitecture::Activation::silu: return nb.silu(name, x);
    // F.gelu with approximate="tanh" saves its input as the exact one does (GeluBackward0).
    case DecoderArchitecture::Activation::gelu:
    case DecoderArchitecture::Activation::gelu_tanh: return nb.gelu(name, x);
    // transformers' activations.py ReLUSquaredActivation.forward: relu_applied =
    // nn.functional.relu(input); squared = torch.square(relu_applied).
    case DecoderArchitecture::Activation::relu2: return nb.square(name + ".square", nb.relu(name + ".relu", x));
  }
  throw std::logic_error("mlp_activation: unknown activation");
}

Value decoder_lm(NetworkBuilder& nb, const DecoderArchitecture& arch, std::int64_t seq_len, Attention implementation,
                 const PipelineStageSpec& stage, const std::vector<std::int64_t>& expert_tokens, std::int64_t documents,
                 const ExpertParallelPlan* expert_parallel, const MegatronOptions* megatron) {
  // Context parallelism: this rank's seq_len / C tokens (its two load-balanced chunks) run
  // through every op; the attention kernels see the whole sequence's keys and values
  // (NetworkBuilder::context_parallel_attention).
  const std::int64_t s = seq_len / nb.context_parallel_degree();
  const std::int64_t head_dim = arch.head_size();
  const std::int64_t rotary_dims = arch.rotary_dims == 0 ? head_dim : arch.rotary_dims;
  const Names names = names_of(arch.family);
  // A pipeline stage reads the mini-batch's tensors its ops use: the token ids where the
  // embedding runs, the labels where the loss does (as gpt2_lm_head). Packed documents, which need
  // the ids on every stage for the eager mask, are refused with pipeline stages (zoo.cpp).
  const std::optional<Value> ids = stage.first ? std::optional(nb.input("input_ids", DType::i64, {1, s})) : std::nullopt;
  const std::optional<Value> labels = stage.last ? std::optional(nb.input("labels", DType::i64, {1, s})) : std::nullopt;
  // cache_position.unsqueeze(0): one [1, S] row for the whole batch; packed documents bring
  // their own position_ids [N, S], restarting at each document (DataCollatorWithFlattening).
  const bool packed = documents > 1;
  const Value positions = packed ? nb.input(names.base + "position_ids", DType::i64, {1, s})
                                 : nb.buffer(names.base + "position_ids", DType::i64, {1, s});
  // Tensor parallelism: this rank's rows of the padded vocabulary (tensor_parallel_vocab), the
  // partial lookups all-reduced, or reduce-scattered to S/t rows under sequence parallelism
  // (no position embeddings: Megatron's reduce_scatter_embeddings).
  const std::int64_t t = nb.tensor_parallel_degree();
  const std::int64_t vocab_rows = tensor_parallel_vocab(arch.vocab, t) / t;
  std::optional<Value> embed;
  Value x;
  if (stage.first) {
    embed = nb.parameter(names.base + names.embed + ".weight", {vocab_rows, arch.hidden});
    // VocabParallelEmbedding writes a plain gradient: Megatron's DDP hook adds it into main_grad.
    if (megatron) nb.add_into_main_grad(*embed);
    x = nb.vocab_parallel_embedding(names.base + names.embed, *ids, *embed, nb.sequence_parallel());
  } else {
    // The previous stage's output, S/t rows of it under sequence parallelism (Megatron's
    // get_tensor_shapes, schedules.py:2137-2143), in the dtype the layers pass on. Every stage
    // still makes the rotary tables below (GPTModel.forward computes rotary_pos_emb on the
    // stages without an embedding too, megatron/core/models/gpt/gpt_model.py:370-420).
    x = nb.receive_from_previous_stage("recv_forward", nb.compute_dtype(),
                                       {1, nb.sequence_parallel() ? s / t : s, arch.hidden});
  }

  // LlamaRotaryEmbedding.forward: inv_freq [D/2] (a buffer) times the positions, cos and sin
  // computed in fp32 and cast to the hidden states' dtype (the model's: fp32 under autocast),
  // [1, S, D]; no gradient. Kept for backward by every layer's products (one storage each).
  const std::string r = names.base + "rotary_emb";
  const Value inv_freq = nb.buffer(r + ".inv_freq", DType::f32, {rotary_dims / 2});
  // Per-sample positions make per-sample tables [N, S, D].
  const std::vector<Value> table_inputs = packed ? std::vector<Value>{positions, inv_freq} : std::vector<Value>{inv_freq, positions};
  const auto make_rotary = [&]() -> Rotary {
    if (megatron && megatron->rope_fusion) {
      // RotaryEmbedding.forward (megatron/core/models/common/embeddings/rotary_pos_embedding.py):
      // the fp32 angles of every position, [S, 1, 1, D], made once per forward pass for every
      // layer's fused kernel; no cos and sin tables.
      const Value freqs = nb.constant_op(r + ".rotary_pos_emb", table_inputs, DType::f32, {1, s, rotary_dims});
      return Rotary{freqs, freqs, freqs, std::nullopt, {}};
    }
    return Rotary{nb.constant_op(r + ".cos", table_inputs, nb.compute_dtype(), {1, s, rotary_dims}),
                  nb.constant_op(r + ".sin", table_inputs, nb.compute_dtype(), {1, s, rotary_dims}), std::nullopt, std::nullopt, {}};
  };
  Rotary rotary = make_rotary();
  if (implementation == Attention::eager) {
    // The 4-D causal mask of eager attention (LlamaModel._update_causal_mask: torch.full of the
    // dtype's minimum, triu, expanded over the batch as a view): [1, 1, S, S] in the model's dtype;
    // block-diagonal and so one per sample with packed documents.
    rotary.causal_mask =
        nb.constant_op(names.base + "causal_mask", packed ? *ids : positions, nb.compute_dtype(), {1, 1, s, s});
  } else if (packed) {
    // flash: cu_seqlens, the documents' int32 offsets (one per document and sample; the final
    // total, 4 bytes per batch, is left out). sdpa-mem-efficient: the block-causal bool mask.
    rotary.packing.documents = documents;
    rotary.packing.tensor = implementation == Attention::flash ? nb.input("cu_seqlens", DType::i32, {documents})
                                                               : nb.input("attention_mask", DType::boolean, {s, s});
  }
  // Layers keep their global index: names, and which layers are sparse (is_sparse_layer).
  for (std::int64_t layer = stage.first_layer; layer < stage.first_layer + stage.layers; ++layer) {
    x = decoder_layer(nb, arch, names.base + names.layers + "." + std::to_string(layer) + ".", layer, x, rotary, implementation,
                      expert_tokens, expert_parallel, megatron);
  }
  // A tied embedding split over two or more stages: its gradient all-reduced between them.
  if (arch.tie_embeddings && stage.first && !stage.last) nb.set_embedding_group_weight(*embed);
  if (!stage.last) return nb.send_to_next_stage("send_forward", x);  // the autograd root: what was sent
  x = norm(nb, arch, names.base + names.final_norm, x, megatron);
  // The head and the loss kind's cross-entropy (loss.cpp); by default ForCausalLMLoss's
  // `logits = logits.float()` first. A tied head on a last stage without the embedding reads the
  // stage's own copy of the word embedding (Megatron's, language_module.py:278-290; the
  // first+last all-reduce of the copies' gradients, finalize_model_grads.py:164-199, an exchange
  // with the first stage before the step: pipeline_stage.cpp), a parameter with its gradient and
  // optimizer state like an untied head.
  const Value head = arch.tie_embeddings && embed ? *embed : nb.parameter(names.head + ".weight", {vocab_rows, arch.hidden});
  if (arch.tie_embeddings && !embed) nb.set_embedding_group_weight(head);
  if (t == 1 && !megatron) return nb.lm_loss(names.head, x, head, *labels, true);
  // Megatron's output layer and vocabulary-parallel cross-entropy (at every tensor-parallel size,
  // one included), which makes its own fp32 copy of the logits (no `logits.float()` before it)
  // and overwrites it in place into the softmax it saves: 4 bytes a logit where Hugging Face's
  // loss holds the 16-bit logits, their fp32 copy and the fp32 log-probabilities (10).
  Value logits = nb.column_parallel_linear(names.head, nb.column_parallel_input(names.head, x), head);
  logits = nb.reshape("logits.view", logits, {s, vocab_rows});
  return nb.vocab_parallel_cross_entropy("loss", logits, nb.reshape("labels.view", *labels, {s}));
}

}  // namespace comptrain::zoo::detail

// torchtitan's Llama (traces/zoo/README.md, "torchtitan's Llama"): the decoder as
// torchtitan/models/llama/model.py builds it at pytorch/torchtitan@1ea476e9f24be439eda358aa864f45c1c37a8a88
// (the commit of the April 2024 docs/performance.md figures), with train.py's loss. Its
// parameters and GEMMs are Hugging Face's LlamaForCausalLM's (decoder_models.cpp); what
// autograd saves differs in three places, each cited below as model.py:LINE or norms.py:LINE
// at that commit:
// - the norms: norm_type fused_rmsnorm (the train configs of Llama 2 7B and 13B and Llama 3 8B)
//   runs a Triton kernel whose autograd Function saves its 16-bit input, the weight and an fp32
//   rstd per row (norms.py:216-257), where LlamaRMSNorm saves an fp32 copy of the input, the
//   rstd and the 16-bit normalised rows. norm_type rmsnorm (norms.py:71-95) is LlamaRMSNorm's
//   arithmetic op for op, so the zoo's rmsnorm;
// - rotary: apply_rotary_emb (model.py:84-110) multiplies complex64 views of fp32 copies of q
//   and k by the complex64 freqs_cis buffer (model.py:40-60, 363: [2 * max_seq_len, head_dim / 2],
//   train.py:175 sets max_seq_len to the training seq_len) and casts back; MulBackward0 keeps
//   the buffer only. No position ids, no cos / sin tables;
// - grouped-query attention: repeat_kv (model.py:113-122, 196-197) copies k and v to every
//   query head before F.scaled_dot_product_attention (model.py:204), which saves the copies.
// Module and op names stay Hugging Face's (model.layers.N.self_attn.q_proj for torchtitan's
// layers.N.attention.wq, and so on: the README's table), so a scenario's selectors fit both.

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/support/checked.hpp"
#include "comptrain/support/input_error.hpp"
#include "models.hpp"

namespace comptrain::zoo::detail {
namespace {

using traces::BatchLinear;
using traces::DType;
using traces::OpKind;

constexpr std::string_view kArithmetic = "a size or FLOP count of the torchtitan model";

// The fused kernel's arithmetic is LlamaRMSNorm's (network_builder.cpp's kRmsNorm* counts):
// forward x*x, the row sum, x*rstd, *w per element and 1/sqrt(var + eps) per row
// (_rms_norm_fwd_kernel, norms.py:137-150); backward x_hat, w*dy, dw += dy*x_hat, the row sum
// of x_hat*wdy and dx = (wdy - x_hat*c1)*rstd per element, c1 per row (_rms_norm_bwd_kernel_sm,
// norms.py:198-207).
constexpr std::int64_t kFusedRmsNormForward = 4;
constexpr std::int64_t kFusedRmsNormForwardPerRow = 2;
constexpr std::int64_t kFusedRmsNormBackward = 9;
constexpr std::int64_t kFusedRmsNormBackwardPerRow = 3;
// A complex product (a + bi)(c + di): 4 multiplies and 2 adds per complex element, 3 FLOPs per
// real channel; its backward, grad * conj(freqs_cis), the same.
constexpr std::int64_t kComplexRotaryFlops = 3;

}  // namespace

Value NetworkBuilder::fused_rmsnorm(const std::string& name, Value x) {
  const std::int64_t features = dim(x, -1);
  const std::string op = unique_op_name(name);
  const Value weight = parameter(name + ".weight", {features});
  const auto batch_dim = tensors_[x.index].batch_dim;
  std::vector<std::int64_t> rows = sample_shape(x);
  rows.back() = 1;
  // y = torch.empty_like(x); rstd = torch.empty((M,), dtype=torch.float32) (norms.py:229-230).
  const std::size_t y = new_output(op + ".out", tensors_[x.index].dtype, sample_shape(x), batch_dim, true);
  const std::size_t rstd = new_output(op + ".rstd", DType::f32, rows, batch_dim, false);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::layernorm;
  f.inputs = {x.index, weight.index};
  f.outputs = {y, rstd};
  f.flops = sum(scaled(elements(x.index), kFusedRmsNormForward), scaled(elements(rstd), kFusedRmsNormForwardPerRow));
  f.differentiable_outputs = {y};
  // ctx.save_for_backward(x, weight, rstd) (norms.py:253): x is x.view(-1, N), a view of the
  // input itself (contiguous), so the input's storage stays until the backward.
  f.saved = {x.index, weight.index, rstd};
  f.grads = {{x.index, {}}, {weight.index, {}}};
  // Not modelled: the backward's fp32 partial weight gradients _dw [sm_count, N]
  // (norms.py:275), a device-dependent 108 x N x 4 bytes on an A100.
  f.backward_flops = sum(scaled(elements(x.index), kFusedRmsNormBackward), scaled(elements(rstd), kFusedRmsNormBackwardPerRow));
  f.backward_kind = OpKind::layernorm;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::rotary_complex(const std::string& name, Value x, Value freqs_cis) {
  expect_rank(x, 4, name);
  if (requires_grad(freqs_cis.index) || dim(freqs_cis, -1) != dim(x, 3)) {
    throw std::logic_error(name + ": freqs_cis does not fit the heads");
  }
  const std::string op = unique_op_name(name);
  const DType input_dtype = tensors_[x.index].dtype;
  const auto batch_dim = tensors_[x.index].batch_dim;
  // xq_out.type_as(xq): x's dtype (model.py:110).
  const std::size_t y = new_output(op + ".out", input_dtype, sample_shape(x), batch_dim, true);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::elementwise;
  f.inputs = {x.index, freqs_cis.index};
  f.outputs = {y};
  if (input_dtype != DType::f32) {
    // xq.float() (model.py:105) and the complex product (model.py:108), fp32, freed once
    // type_as has copied the product back.
    f.outputs.push_back(new_output(op + ".float", DType::f32, sample_shape(x), batch_dim, false));
    f.outputs.push_back(new_output(op + ".product", DType::f32, sample_shape(x), batch_dim, false));
    // Backward: ToCopyBackward0 of type_as makes the fp32 gradient, MulBackward0 its product
    // with conj(freqs_cis), ToCopyBackward0 of float() the 16-bit gradient of x.
    f.backward_scratch = {new_output(op + ".backward.grad_fp32", DType::f32, sample_shape(x), batch_dim, false),
                          new_output(op + ".backward.product_grad", DType::f32, sample_shape(x), batch_dim, false)};
  }
  f.flops = scaled(elements(x.index), kComplexRotaryFlops);
  f.differentiable_outputs = {y};
  // xq_ * freqs_cis: MulBackward0 saves `other` for self's gradient; self would be saved only
  // for other's, which needs none. The views (reshape, view_as_complex, view_as_real, flatten)
  // and both casts save no tensor.
  f.saved = {freqs_cis.index};
  f.grads = {{x.index, {}}};
  f.backward_flops = scaled(elements(x.index), kComplexRotaryFlops);
  f.backward_kind = OpKind::elementwise;
  record(std::move(f));
  return {y};
}

namespace {

// torchtitan's Attention.forward (model.py:170-209).
Value attention(NetworkBuilder& nb, const DecoderArchitecture& arch, const std::string& p, Value x, Value freqs_cis,
                Attention implementation) {
  const std::int64_t h = arch.hidden;
  const std::int64_t head_dim = h / arch.heads;
  const std::int64_t kv_width = arch.kv_heads * head_dim;
  // wq, wk, wv and their .view(bsz, seqlen, heads, head_dim) (model.py:187-191): views.
  Value q = nb.split_heads(p + "q_proj.view", nb.linear(p + "q_proj", x, h, false), 1, arch.heads).front();
  Value k = nb.split_heads(p + "k_proj.view", nb.linear(p + "k_proj", x, kv_width, false), 1, arch.kv_heads).front();
  Value v = nb.split_heads(p + "v_proj.view", nb.linear(p + "v_proj", x, kv_width, false), 1, arch.kv_heads).front();
  q = nb.rotary_complex(p + "q_rotary", q, freqs_cis);
  k = nb.rotary_complex(p + "k_rotary", k, freqs_cis);
  // repeat_kv: expand + reshape, a copy of k and of v for n_rep > 1 (model.py:113-122), which
  // the SDPA kernel then saves; whatever kernel PyTorch picks gets H heads of each.
  const std::int64_t groups = arch.heads / arch.kv_heads;
  k = nb.repeat_kv(p + "k_repeat", k, groups);
  v = nb.repeat_kv(p + "v_repeat", v, groups);
  // The transposes (model.py:199-201) are views; F.scaled_dot_product_attention(..., is_causal=True)
  // (model.py:204), no dropout.
  const auto kernel = implementation == Attention::flash ? NetworkBuilder::SdpaKernel::flash : NetworkBuilder::SdpaKernel::mem_efficient;
  const Value context = nb.sdpa(p + "scaled_dot_product_attention", q, k, v, kernel, false);
  // output.transpose(1, 2).contiguous() is already laid out so (model.py:205-208): a view.
  const Value merged = nb.merge_heads(p + "merge_heads", context);
  return nb.linear(p + "o_proj", merged, h, false);
}

Value norm(NetworkBuilder& nb, TorchtitanOptions::Norm kind, const std::string& name, Value x) {
  return kind == TorchtitanOptions::Norm::fused_rmsnorm ? nb.fused_rmsnorm(name, x) : nb.rmsnorm(name, x);
}

// TransformerBlock.forward (model.py:318-319): h = x + attention(attention_norm(x));
// out = h + feed_forward(ffn_norm(h)), FeedForward being w2(F.silu(w1(x)) * w3(x)) (model.py:248).
Value block(NetworkBuilder& nb, const DecoderArchitecture& arch, const std::string& p, Value x, Value freqs_cis,
            Attention implementation, TorchtitanOptions::Norm norm_type) {
  Value a = norm(nb, norm_type, p + "input_layernorm", x);
  a = attention(nb, arch, p + "self_attn.", a, freqs_cis, implementation);
  x = nb.add(p + "add", x, a);
  Value m = norm(nb, norm_type, p + "post_attention_layernorm", x);
  Value gate = nb.linear(p + "mlp.gate_proj", m, arch.intermediate, false);
  gate = nb.silu(p + "mlp.act_fn", gate);
  const Value up = nb.linear(p + "mlp.up_proj", m, arch.intermediate, false);
  m = nb.linear(p + "mlp.down_proj", nb.mul(p + "mlp.mul", gate, up), arch.hidden, false);
  return nb.add(p + "add", x, m);
}

}  // namespace

void check_torchtitan_request(const DecoderArchitecture& arch, const ModelRequest& request, Attention implementation) {
  const std::string from = arch.source.empty() ? "" : " (" + arch.source + ")";
  const auto refuse = [&](const std::string& what) {
    throw InputError("implementation: torchtitan's Llama (torchtitan/models/llama/model.py) has " + what + from +
                     "; expected a Llama-shaped model or implementation hugging-face");
  };
  if (arch.family != "llama" && arch.family != "mistral") refuse("no '" + arch.family + "' architecture");
  if (arch.moe) refuse("no mixture-of-experts layers");
  if (arch.head_size() * arch.heads != arch.hidden) refuse("heads of dim / n_heads channels (model.py: head_dim = dim // n_heads), not a head_dim of its own");
  if (arch.norm != DecoderArchitecture::Norm::rms || arch.activation != DecoderArchitecture::Activation::silu || !arch.gated_mlp) {
    refuse("RMSNorm and a SwiGLU MLP only");
  }
  if (arch.qkv_bias || arch.output_bias || arch.mlp_bias) refuse("no biases");
  if (arch.tie_embeddings) refuse("an output layer of its own (tie_word_embeddings must be false)");
  if (arch.rotary_dims != 0) refuse("rotary embeddings on every channel (no partial rotary)");
  if (arch.parallel_residual || arch.attention_dropout) refuse("sequential residuals and no attention dropout");
  if (arch.sliding_window) refuse("no sliding-window attention");
  if (implementation != Attention::flash && implementation != Attention::sdpa_mem_efficient) {
    throw InputError("implementation: torchtitan's Llama calls F.scaled_dot_product_attention (model.py:204); expected attention "
                     "flash or sdpa-mem-efficient with it, got " + std::string(to_string(implementation)));
  }
  if (request.lora) throw InputError("implementation: torchtitan's Llama (pytorch/torchtitan@1ea476e9) has no LoRA; expected implementation hugging-face with lora");
  if (request.packed_documents) {
    throw InputError("implementation: torchtitan's Llama (pytorch/torchtitan@1ea476e9) has no document masking; expected implementation hugging-face with packing");
  }
}

Value torchtitan_decoder_lm(NetworkBuilder& nb, const DecoderArchitecture& arch, std::int64_t seq_len, Attention implementation,
                            TorchtitanOptions::Norm norm_type) {
  // Context parallelism (torchtitan@9dec370a train.py:268-279, create_context_parallel_ctx):
  // PyTorch's context_parallel shards input_ids, labels and freqs_cis along the sequence, so a
  // rank's program runs seq_len / C tokens, and SDPA dispatches to its context-parallel kernels
  // (NetworkBuilder::sdpa), whose K,V exchange carries repeat_kv's copies, every query head.
  const std::int64_t s = seq_len / nb.context_parallel_degree();
  const std::int64_t head_dim = arch.hidden / arch.heads;
  const Value ids = nb.input("input_ids", DType::i64, {1, s});
  const Value labels = nb.input("labels", DType::i64, {1, s});
  const Value embed = nb.parameter("model.embed_tokens.weight", {arch.vocab, arch.hidden});
  Value x = nb.embedding("model.embed_tokens", ids, embed);  // tok_embeddings (model.py:425)
  // register_buffer("freqs_cis", ...) (model.py:363): complex64 [2 * max_seq_len, head_dim / 2],
  // max_seq_len = seq_len (train.py:175); written as fp32 [2 * seq_len, head_dim], the same bytes.
  // Every layer's products read the first s rows (model.py:427), a view: no activation bytes.
  // Under context parallelism the buffer keeps its whole-sequence storage: context_parallel
  // shards it in place (resize_ to a rank's rows and copy_, _context_parallel_buffers in
  // torch/distributed/tensor/experimental/_attention.py) and restores it after the step.
  const Value freqs_cis = nb.buffer("model.freqs_cis", DType::f32, {multiply_or_throw(2, seq_len, kArithmetic), head_dim});
  for (std::int64_t layer = 0; layer < arch.layers; ++layer) {
    x = block(nb, arch, "model.layers." + std::to_string(layer) + ".", x, freqs_cis, implementation, norm_type);
  }
  x = norm(nb, norm_type, "model.norm", x);
  // output = self.output(h).float() (model.py:432); train.py's loss_fn (train.py:163-164):
  // F.cross_entropy(pred.flatten(0, 1), labels.flatten(0, 1)).
  // That is lm_loss's cross_entropy with the fp32 copy; another training.loss kind replaces it
  // as it replaces Hugging Face's (loss.cpp).
  const Value head = nb.parameter("lm_head.weight", {arch.vocab, arch.hidden});
  return nb.lm_loss("lm_head", x, head, labels, true);
}

}  // namespace comptrain::zoo::detail

namespace comptrain::zoo {

std::optional<TorchtitanOptions::Norm> parse_torchtitan_norm(std::string_view text) {
  if (text == "rmsnorm") return TorchtitanOptions::Norm::rmsnorm;
  if (text == "fused_rmsnorm") return TorchtitanOptions::Norm::fused_rmsnorm;
  return std::nullopt;
}
std::vector<std::string_view> torchtitan_norm_names() { return {"rmsnorm", "fused_rmsnorm"}; }

}  // namespace comptrain::zoo

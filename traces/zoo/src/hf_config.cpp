// Hugging Face config.json -> ModelSpec (zoo.hpp: spec_from_hf_config). The fields each family
// reads are those of its configuration class in transformers (configuration_llama.py,
// configuration_mistral.py, configuration_qwen2.py, configuration_mixtral.py,
// configuration_qwen2_moe.py, configuration_qwen3_moe.py, configuration_olmoe.py,
// configuration_gpt_neox.py,
// configuration_gpt2.py, configuration_bert.py); their defaults are the classes' defaults.
// Anything that would change the trace and is not modelled is refused by name.

#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "comptrain/support/checked.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/support/json_depth.hpp"
#include "comptrain/support/json_excerpt.hpp"
#include "comptrain/zoo/zoo.hpp"

namespace comptrain::zoo {
namespace {

using nlohmann::json;

class ConfigReader {
 public:
  ConfigReader(const json& config, std::string source, std::string model_type)
      : config_(config), source_(std::move(source)), model_type_(std::move(model_type)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& message) const {
    throw InputError(source_ + ": '" + field + "' " + message);
  }

  bool present(const std::string& field) const { return config_.contains(field) && !config_.at(field).is_null(); }

  std::int64_t positive(const std::string& field) const {
    if (!present(field)) fail(field, "is missing; a " + model_type_ + " config needs it (a positive integer)");
    return positive_value(field);
  }
  std::int64_t positive(const std::string& field, std::int64_t fallback) const {
    return present(field) ? positive_value(field) : fallback;
  }
  bool boolean(const std::string& field, bool fallback) const {
    if (!present(field)) return fallback;
    const json& value = config_.at(field);
    if (!value.is_boolean()) fail(field, "is " + json_excerpt(value) + "; expected true or false");
    return value.get<bool>();
  }
  double number(const std::string& field, double fallback) const {
    if (!present(field)) return fallback;
    const json& value = config_.at(field);
    if (!value.is_number() || !std::isfinite(value.get<double>())) fail(field, "is " + json_excerpt(value) + "; expected a number");
    return value.get<double>();
  }
  std::string string(const std::string& field, const std::string& fallback) const {
    if (!present(field)) return fallback;
    const json& value = config_.at(field);
    if (!value.is_string()) fail(field, "is " + json_excerpt(value) + "; expected a string");
    return value.get<std::string>();
  }
  // A field the zoo models only at one value (or absent).
  void only(const std::string& field, const json& expected, const std::string& why) const {
    if (present(field) && config_.at(field) != expected) {
      fail(field, "is " + json_excerpt(config_.at(field)) + "; expected " + json_excerpt(expected) + " (" + why + ")");
    }
  }
  // A dropout probability: 0 or absent unless `allowed`.
  double probability(const std::string& field, double fallback) const {
    const double p = number(field, fallback);
    if (p < 0 || p >= 1) fail(field, "is " + std::to_string(p) + "; expected a probability in [0, 1)");
    return p;
  }
  void no_experts() const {
    // Mixture-of-experts fields of the families' MoE variants (Mixtral's num_local_experts,
    // Qwen2-MoE's num_experts, ...): the zoo has no expert layers.
    for (const char* field : {"num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
                              "shared_expert_intermediate_size"}) {
      if (present(field) && config_.at(field) != json(0)) {
        fail(field, "is " + json_excerpt(config_.at(field)) + ": mixture-of-experts layers are not modelled; expected a dense model");
      }
    }
  }
  // A list of non-negative integers (Qwen2-MoE's mlp_only_layers); absent or null: empty.
  std::vector<std::int64_t> indices(const std::string& field) const {
    std::vector<std::int64_t> result;
    if (!present(field)) return result;
    const json& value = config_.at(field);
    if (!value.is_array()) fail(field, "is " + json_excerpt(value) + "; expected a list of layer indices");
    for (const json& item : value) {
      if (!item.is_number_integer() || item.get<std::int64_t>() < 0) {
        fail(field, "holds " + json_excerpt(item) + "; expected non-negative integers (layer indices)");
      }
      result.push_back(item.get<std::int64_t>());
    }
    return result;
  }
  // A list of strings (GPT-OSS's layer_types); absent or null: empty.
  std::vector<std::string> strings(const std::string& field) const {
    std::vector<std::string> result;
    if (!present(field)) return result;
    const json& value = config_.at(field);
    if (!value.is_array()) fail(field, "is " + json_excerpt(value) + "; expected a list of strings");
    for (const json& item : value) {
      if (!item.is_string()) fail(field, "holds " + json_excerpt(item) + "; expected strings");
      result.push_back(item.get<std::string>());
    }
    return result;
  }
  // A count that may be 0 (Qwen2-MoE's num_experts: 0 makes every layer dense).
  std::int64_t count(const std::string& field, std::int64_t fallback) const {
    if (!present(field)) return fallback;
    const json& value = config_.at(field);
    if (!value.is_number_integer() || value.get<std::int64_t>() < 0) fail(field, "is " + json_excerpt(value) + "; expected an integer >= 0");
    return value.get<std::int64_t>();
  }
  const std::string& source() const { return source_; }
  // The zoo's MLP width of GPT-2 and BERT, 4 * the hidden size `field`: a hidden size whose
  // quadruple overflows int64 is refused here, by name, rather than compared as a wrapped value.
  std::int64_t mlp_width(const std::string& field, std::int64_t hidden) const {
    const auto width = checked_mul(4, hidden);
    if (!width) fail(field, "is " + std::to_string(hidden) + ": the MLP width 4 * " + field + " overflows 64 bits; expected a hidden size below 2^61");
    return *width;
  }

 private:
  std::int64_t positive_value(const std::string& field) const {
    const json& value = config_.at(field);
    if (!value.is_number_integer() || value.get<std::int64_t>() < 1) {
      fail(field, "is " + json_excerpt(value) + "; expected a positive integer");
    }
    return value.get<std::int64_t>();
  }

  const json& config_;
  std::string source_;
  std::string model_type_;
};

DecoderArchitecture::Activation activation(const ConfigReader& r, const std::string& field, const std::string& fallback) {
  const std::string act = r.string(field, fallback);
  if (act == "silu" || act == "swish") return DecoderArchitecture::Activation::silu;
  if (act == "gelu") return DecoderArchitecture::Activation::gelu;
  if (act == "gelu_pytorch_tanh") return DecoderArchitecture::Activation::gelu_tanh;
  if (act == "relu2") return DecoderArchitecture::Activation::relu2;
  r.fail(field, "is \"" + act + "\"; expected silu, gelu, gelu_pytorch_tanh or relu2 (the activations the zoo models)");
}

// The head size. A config may state head_dim (newer LLaMA, Mistral and Qwen configs carry it;
// Qwen3's and Mistral NeMo's differ from hidden_size / num_attention_heads), and the LLaMA
// family's attention follows it (transformers v4.51 LlamaAttention: self.head_dim =
// getattr(config, "head_dim", config.hidden_size // config.num_attention_heads); Mistral's,
// Qwen2's, Qwen3's and Mixtral's the same); `fallback` is the class's default when the config has
// none (Qwen3Config: 128; 0: hidden_size / num_attention_heads, which must then divide). GPT-NeoX
// has no such field (`explicit_allowed` false): one given must be hidden_size / heads.
void read_head_dim(const ConfigReader& r, DecoderArchitecture& arch, bool explicit_allowed, std::int64_t fallback = 0) {
  if (explicit_allowed && (r.present("head_dim") || fallback > 0)) {
    arch.head_dim = r.positive("head_dim", fallback);
    return;
  }
  if (arch.hidden % arch.heads != 0) {
    r.fail("num_attention_heads", "is " + std::to_string(arch.heads) + ", which does not divide hidden_size " +
                                      std::to_string(arch.hidden));
  }
  if (r.present("head_dim") && r.positive("head_dim") != arch.hidden / arch.heads) {
    r.fail("head_dim", "is " + std::to_string(r.positive("head_dim")) + "; expected hidden_size / num_attention_heads = " +
                           std::to_string(arch.hidden / arch.heads) + " (a " + arch.family + " config's heads are that wide)");
  }
}

// MixtralConfig (configuration_mixtral.py), Qwen2MoeConfig (configuration_qwen2_moe.py),
// Qwen3MoeConfig (configuration_qwen3_moe.py) and OlmoeConfig (configuration_olmoe.py): the
// sparse MLP of their decoder layers (moe_block.cpp). Qwen2-MoE and Qwen3-MoE with num_experts 0
// are dense.
std::optional<MoeArchitecture> moe_architecture(const ConfigReader& r, const std::string& type, std::int64_t layers) {
  MoeArchitecture moe;
  if (type == "olmoe") {
    // OlmoeSparseMoeBlock: Mixtral's loop over num_experts experts of intermediate_size
    // (OlmoeMLP), the top-k renormalised only with norm_topk_prob; every layer sparse.
    moe.experts = r.positive("num_experts", 64);
    moe.top_k = r.positive("num_experts_per_tok", 8);
    moe.intermediate = r.positive("intermediate_size");
    moe.normalize_top_k = r.boolean("norm_topk_prob", false);
  } else if (type == "mixtral") {
    moe.experts = r.positive("num_local_experts", 8);
    moe.top_k = r.positive("num_experts_per_tok", 2);
    moe.intermediate = r.positive("intermediate_size");  // MixtralBlockSparseTop2MLP: ffn_dim = intermediate_size
    moe.normalize_top_k = true;  // MixtralSparseMoeBlock always divides by the top-k sum
    // MixtralSparseMoeBlock in training: hidden_states *= uniform noise when jitter_noise > 0.
    if (r.number("router_jitter_noise", 0.0) != 0) {
      r.fail("router_jitter_noise", "is nonzero; the router's input jitter (an in-place product with uniform noise) is not modelled; expected 0");
    }
  } else {
    // Qwen3MoeConfig's defaults (128 experts, top 8, width 768) where Qwen2MoeConfig's are 60, 4,
    // 1408; Qwen3MoeSparseMoeBlock is Qwen2-MoE's block without the shared expert and its gate.
    const bool qwen3 = type == "qwen3_moe";
    moe.experts = r.count("num_experts", qwen3 ? 128 : 60);
    if (moe.experts == 0) return std::nullopt;  // Qwen2MoeDecoderLayer, Qwen3MoeDecoderLayer: config.num_experts > 0 for a sparse layer
    moe.top_k = r.positive("num_experts_per_tok", qwen3 ? 8 : 4);
    moe.intermediate = r.positive("moe_intermediate_size", qwen3 ? 768 : 1408);
    moe.normalize_top_k = r.boolean("norm_topk_prob", false);
    if (qwen3) {
      r.only("shared_expert_intermediate_size", 0, "Qwen3-MoE's sparse block has no shared expert");
    } else {
      moe.shared_expert_intermediate = r.positive("shared_expert_intermediate_size", 5632);
    }
    moe.sparse_step = r.positive("decoder_sparse_step", 1);
    moe.dense_layers = r.indices("mlp_only_layers");
    for (const std::int64_t layer : moe.dense_layers) {
      if (layer >= layers) {
        r.fail("mlp_only_layers", "names layer " + std::to_string(layer) + "; expected indices below num_hidden_layers = " +
                                      std::to_string(layers));
      }
    }
  }
  if (moe.top_k > moe.experts) {
    r.fail("num_experts_per_tok", "is " + std::to_string(moe.top_k) + "; expected at most the " + std::to_string(moe.experts) + " experts");
  }
  // With output_router_logits the causal-LM loss adds router_aux_loss_coef times Switch
  // Transformer's load-balancing loss over every layer's router logits (load_balancing_loss_func):
  // not modelled. (router_aux_loss_coef alone changes nothing.)
  r.only("output_router_logits", false, "the router's load-balancing loss is not modelled");
  return moe;
}

// LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config: the modules of modeling_llama.py
// (Mistral's and Qwen2's are the same blocks; Qwen2 puts biases on q, k and v; Qwen3 normalises
// each head's query and key, modeling_qwen3.py Qwen3Attention: q_norm and k_norm, Qwen3RMSNorm
// over head_dim).
ModelSpec llama_family(const ConfigReader& r, const std::string& type) {
  DecoderArchitecture arch;
  arch.family = type;
  arch.source = r.source();
  arch.hidden = r.positive("hidden_size");
  arch.layers = r.positive("num_hidden_layers");
  arch.heads = r.positive("num_attention_heads");
  // The classes' default: num_key_value_heads = num_attention_heads (multi-head).
  arch.kv_heads = r.positive("num_key_value_heads", arch.heads);
  arch.intermediate = r.positive("intermediate_size");
  arch.vocab = r.positive("vocab_size");
  arch.max_positions = r.positive("max_position_embeddings");
  arch.tie_embeddings = r.boolean("tie_word_embeddings", false);
  arch.activation = activation(r, "hidden_act", "silu");
  if (r.number("rms_norm_eps", 1e-6) <= 0) r.fail("rms_norm_eps", "must be > 0");
  if (type == "qwen2" || type == "qwen2_moe") {
    // Qwen2Attention: q_proj, k_proj, v_proj with bias=True, o_proj without; Qwen2MoeAttention
    // likewise (bias=config.qkv_bias in the transformers versions whose config has it, default true).
    arch.qkv_bias = type == "qwen2" || r.boolean("qkv_bias", true);
    // Qwen2's sliding window applies only with use_sliding_window (false in the released models).
    if (r.boolean("use_sliding_window", false)) arch.sliding_window = r.positive("sliding_window");
  } else if (type == "qwen3" || type == "qwen3_moe") {
    // Qwen3Attention: q, k, v, o projections with bias=config.attention_bias (false in the
    // released models), q_norm and k_norm; Qwen3MLP without biases; the sliding window as Qwen2's.
    // Qwen3MoeAttention is the same module.
    arch.qkv_bias = r.boolean("attention_bias", false);
    arch.output_bias = arch.qkv_bias;
    arch.qk_norm = DecoderArchitecture::QkNorm::per_head;
    if (r.boolean("use_sliding_window", false)) arch.sliding_window = r.positive("sliding_window");
  } else if (type == "olmoe") {
    // OlmoeAttention (modeling_olmoe.py): q, k, v, o projections with bias=config.attention_bias
    // (false in the released model), q_norm an RMSNorm over the whole query projection and k_norm
    // over the key's, before the view into heads; no sliding window.
    arch.qkv_bias = r.boolean("attention_bias", false);
    arch.output_bias = arch.qkv_bias;
    arch.qk_norm = DecoderArchitecture::QkNorm::projection;
    r.only("clip_qkv", nullptr, "the in-place clamp of q, k and v to +-clip_qkv is not modelled");
  } else if (type == "mixtral") {
    // MixtralAttention: q, k, v, o projections without bias (no attention_bias field); the
    // sliding window as Mistral's.
    if (r.present("sliding_window")) arch.sliding_window = r.positive("sliding_window");
  } else {
    arch.qkv_bias = r.boolean("attention_bias", false);  // LlamaAttention: bias=config.attention_bias on all four
    arch.output_bias = arch.qkv_bias;
    arch.mlp_bias = r.boolean("mlp_bias", false);
    if (type == "mistral" && r.present("sliding_window")) arch.sliding_window = r.positive("sliding_window");
  }
  arch.attention_dropout = r.probability("attention_dropout", 0.0) > 0;
  r.only("pretraining_tp", 1, "Meta's tensor-parallel split of the projections is not modelled");
  // rope_scaling and rope_theta change the rotary frequencies' values only, not a tensor's
  // shape or a FLOP count: accepted.
  if (type == "mixtral" || type == "qwen2_moe" || type == "qwen3_moe" || type == "olmoe") {
    arch.moe = moe_architecture(r, type, arch.layers);
  } else {
    r.no_experts();
  }
  // Qwen3Config(head_dim=128); Qwen3MoeConfig has no default of its own (the attention's getattr
  // falls back to hidden_size / num_attention_heads), though the released configs state 128.
  // OlmoeAttention: head_dim = hidden_size // num_heads, whatever the config says.
  read_head_dim(r, arch, /*explicit_allowed=*/type != "olmoe", type == "qwen3" ? 128 : 0);
  ModelSpec spec;
  spec.model = "llama";
  spec.decoder = std::move(arch);
  return spec;
}

// GptOssConfig (configuration_gpt_oss.py, transformers v4.55+; gpt-oss-20b and -120b):
// LLaMA's blocks with biases on the four attention projections (attention_bias, default true),
// an explicit head_dim (64: q_proj is 64 heads x 64 = 4096 wide on a 2880-wide model), attention
// sinks, layers alternating sliding-window (even indices) and full attention, and every layer a
// mixture of experts with GPT-OSS's router and clamped-SwiGLU experts (moe_block.cpp).
ModelSpec gpt_oss(const ConfigReader& r) {
  DecoderArchitecture arch;
  arch.family = "gpt_oss";
  arch.source = r.source();
  // The class's defaults are gpt-oss-120b's.
  arch.hidden = r.positive("hidden_size", 2880);
  arch.layers = r.positive("num_hidden_layers", 36);
  arch.heads = r.positive("num_attention_heads", 64);
  arch.kv_heads = r.positive("num_key_value_heads", 8);
  arch.intermediate = r.positive("intermediate_size", 2880);
  arch.vocab = r.positive("vocab_size", 201088);
  arch.max_positions = r.positive("max_position_embeddings", 131072);
  arch.tie_embeddings = r.boolean("tie_word_embeddings", false);
  if (r.number("rms_norm_eps", 1e-5) <= 0) r.fail("rms_norm_eps", "must be > 0");
  arch.qkv_bias = r.boolean("attention_bias", true);  // GptOssAttention: bias=config.attention_bias on q, k, v and o
  arch.output_bias = arch.qkv_bias;
  arch.attention_sinks = true;
  arch.attention_dropout = r.probability("attention_dropout", 0.0) > 0;
  arch.head_dim = r.positive("head_dim", 64);
  // layer_types: "sliding_attention" or "full_attention" per layer; absent, GptOssConfig's
  // __post_init__ makes the even-indexed layers sliding ((i + 1) % 2).
  if (r.present("layer_types")) {
    const std::vector<std::string> types = r.strings("layer_types");
    if (static_cast<std::int64_t>(types.size()) != arch.layers) {
      r.fail("layer_types", "has " + std::to_string(types.size()) + " entries; expected one per layer, num_hidden_layers = " +
                                std::to_string(arch.layers));
    }
    for (const std::string& type : types) {
      if (type != "sliding_attention" && type != "full_attention") {
        r.fail("layer_types", "holds \"" + type + "\"; expected sliding_attention or full_attention");
      }
      arch.sliding_layers.push_back(type == "sliding_attention");
    }
  } else {
    for (std::int64_t i = 0; i < arch.layers; ++i) arch.sliding_layers.push_back((i + 1) % 2 != 0);
  }
  arch.window = r.positive("sliding_window", 128);
  // hidden_act is read by nothing in modeling_gpt_oss.py: the experts' activation is their own.
  MoeArchitecture moe;
  moe.experts = r.positive("num_local_experts", 128);
  moe.top_k = r.positive("num_experts_per_tok", 4);
  moe.intermediate = arch.intermediate;  // GptOssExperts: expert_dim = intermediate_size
  moe.normalize_top_k = false;           // the softmax of the top-k logits sums to 1 already
  moe.gpt_oss_experts = true;
  if (moe.top_k > moe.experts) {
    r.fail("num_experts_per_tok", "is " + std::to_string(moe.top_k) + "; expected at most the " + std::to_string(moe.experts) + " experts");
  }
  // swiglu_alpha and swiglu_limit change values, not shapes or FLOPs: accepted.
  r.only("output_router_logits", false, "the router's load-balancing loss is not modelled");
  arch.moe = moe;
  ModelSpec spec;
  spec.model = "llama";
  spec.decoder = std::move(arch);
  return spec;
}

// GPTNeoXConfig: modeling_gpt_neox.py (Pythia, GPT-NeoX-20B).
ModelSpec gpt_neox(const ConfigReader& r) {
  DecoderArchitecture arch;
  arch.family = "gpt_neox";
  arch.source = r.source();
  arch.hidden = r.positive("hidden_size");
  arch.layers = r.positive("num_hidden_layers");
  arch.heads = r.positive("num_attention_heads");
  arch.kv_heads = arch.heads;
  arch.intermediate = r.positive("intermediate_size");
  arch.vocab = r.positive("vocab_size");
  arch.max_positions = r.positive("max_position_embeddings");
  arch.tie_embeddings = r.boolean("tie_word_embeddings", false);
  arch.norm = DecoderArchitecture::Norm::layer;
  arch.gated_mlp = false;
  arch.activation = activation(r, "hidden_act", "gelu");
  arch.qkv_bias = r.boolean("attention_bias", true);
  arch.output_bias = arch.qkv_bias;
  arch.mlp_bias = true;  // GPTNeoXMLP: nn.Linear with its default bias
  arch.parallel_residual = r.boolean("use_parallel_residual", true);
  read_head_dim(r, arch, /*explicit_allowed=*/false);
  // GPTNeoXAttention: rotary_ndims = int(head_size * rotary_pct).
  const double pct = r.number("rotary_pct", 0.25);
  if (pct <= 0 || pct > 1) r.fail("rotary_pct", "is " + std::to_string(pct) + "; expected a fraction in (0, 1]");
  arch.rotary_dims = static_cast<std::int64_t>(static_cast<double>(arch.hidden / arch.heads) * pct);
  arch.attention_dropout = r.probability("attention_dropout", 0.0) > 0;
  if (r.probability("hidden_dropout", 0.0) > 0) {
    r.fail("hidden_dropout", "is nonzero; the dropouts after GPT-NeoX's attention and MLP are not modelled (expected 0)");
  }
  r.no_experts();
  ModelSpec spec;
  spec.model = "llama";
  spec.decoder = std::move(arch);
  return spec;
}

// GPT2Config: the zoo's gpt2 (GPT2LMHeadModel, 1024 learned positions, tied LM head).
ModelSpec gpt2(const ConfigReader& r) {
  ModelSpec spec;
  spec.model = "gpt2";
  spec.hidden = r.positive("n_embd");
  spec.layers = r.positive("n_layer");
  spec.heads = r.positive("n_head");
  spec.vocab = r.positive("vocab_size");
  r.only("n_positions", 1024, "the zoo's gpt2 learns 1024 positions");
  const std::int64_t mlp_width = r.mlp_width("n_embd", *spec.hidden);
  if (r.present("n_inner") && r.positive("n_inner") != mlp_width) {
    r.fail("n_inner", "is " + std::to_string(r.positive("n_inner")) + "; expected null or 4 * n_embd = " +
                          std::to_string(mlp_width) + " (the zoo's MLP is 4 * hidden wide)");
  }
  const std::string act = r.string("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu") {
    r.fail("activation_function", "is \"" + act + "\"; expected gelu_new or gelu (written as the fused GELU that saves its input)");
  }
  r.only("tie_word_embeddings", true, "GPT2LMHeadModel's head is tied to wte");
  r.only("add_cross_attention", false, "cross-attention is not modelled");
  r.only("reorder_and_upcast_attn", false, "the upcast attention variant is not modelled");
  r.only("scale_attn_by_inverse_layer_idx", false, "the per-layer attention scale is not modelled");
  return spec;
}

// BertConfig: the zoo's bert-base entry with the config's shape (BertForPreTraining by default).
ModelSpec bert(const ConfigReader& r) {
  ModelSpec spec;
  spec.model = "bert-base";
  spec.hidden = r.positive("hidden_size");
  spec.layers = r.positive("num_hidden_layers");
  spec.heads = r.positive("num_attention_heads");
  spec.vocab = r.positive("vocab_size");
  const std::int64_t mlp_width = r.mlp_width("hidden_size", *spec.hidden);
  if (r.positive("intermediate_size", mlp_width) != mlp_width) {
    r.fail("intermediate_size", "is " + std::to_string(r.positive("intermediate_size")) + "; expected 4 * hidden_size = " +
                                    std::to_string(mlp_width) + " (the zoo's MLP is 4 * hidden wide)");
  }
  r.only("max_position_embeddings", 512, "the zoo's BERT learns 512 positions");
  r.only("type_vocab_size", 2, "the zoo's BERT has two token types");
  r.only("hidden_act", "gelu", "the zoo's BERT uses GELU");
  r.only("position_embedding_type", "absolute", "relative position embeddings are not modelled");
  return spec;
}

}  // namespace

// The model_type values spec_from_hf_config reads, as its messages list them.
constexpr std::string_view kModelTypes = "llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe, olmoe, gpt_oss, gpt_neox, gpt2, bert";

ModelSpec spec_from_hf_config(std::string_view json_text, const std::string& source) {
  json config;
  try {
    config = json::parse(json_text);
  } catch (const json::parse_error& e) {
    throw InputError(source + ": not a JSON document (" + e.what() + "); expected a Hugging Face config.json");
  }
  if (!config.is_object()) throw InputError(source + ": expected a JSON object (a Hugging Face config.json)");
  // Before anything reads a field: comparing or showing a value nested 100,000 deep recursed
  // through the stack (shared/defects-2/02).
  if (const auto deep = json_nested_deeper_than(config)) {
    const std::size_t end = deep->find('/', 1);
    const std::string field = deep->substr(1, end == std::string::npos ? std::string::npos : end - 1);
    throw InputError(source + ": '" + field + "' is nested deeper than " + std::to_string(kMaxJsonDepth) +
                     " levels; expected a Hugging Face config.json (its values nest a few levels at most)");
  }
  if (!config.contains("model_type") || !config.at("model_type").is_string()) {
    throw InputError(source + ": 'model_type' is missing or not a string; expected one of " + std::string(kModelTypes));
  }
  const std::string type = config.at("model_type").get<std::string>();
  const ConfigReader reader(config, source, type);
  if (type == "llama" || type == "mistral" || type == "qwen2" || type == "qwen3" || type == "mixtral" || type == "qwen2_moe" ||
      type == "qwen3_moe" || type == "olmoe") {
    return llama_family(reader, type);
  }
  if (type == "gpt_oss") return gpt_oss(reader);
  if (type == "gpt_neox") return gpt_neox(reader);
  if (type == "gpt2") return gpt2(reader);
  if (type == "bert") return bert(reader);
  reader.fail("model_type", "is \"" + type + "\", which the zoo does not model; expected one of " + std::string(kModelTypes));
}

}  // namespace comptrain::zoo

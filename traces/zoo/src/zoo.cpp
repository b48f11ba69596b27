// The zoo's catalogue, request validation and defaults.

#include "comptrain/zoo/zoo.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>
#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "comptrain/support/checked.hpp"
#include "models.hpp"
#include "network_builder.hpp"

namespace comptrain::zoo {

// The masked-LM positions per sample when `mlm: masked` leaves them out: NVIDIA
// DeepLearningExamples pre-trains BERT in two phases, sequence 128 with max_predictions_per_seq
// 20 and sequence 512 with 80 (PyTorch/LanguageModeling/BERT/scripts/run_pretraining.sh and its
// README, "20 masked predictions per sequence" / "80", at NVIDIA/DeepLearningExamples@
// 729963dd47e7c8bd462ad10bfac7a7b0b604e6dd). It is a cap: create_pretraining_data.py masks
// min(max_predictions_per_seq, max(1, round(0.15 * tokens))) positions -- 19 and 77 for full
// sequences; run_pretraining.py now reads LDDL's loader, which masks on the fly and is not
// handed the cap -- so the default errs on the side of more memory. Other lengths have no
// published figure: they must say.
std::optional<std::int64_t> default_mlm_predictions(std::int64_t seq_len) {
  constexpr std::int64_t kPhase1SeqLen = 128;
  constexpr std::int64_t kPhase1Predictions = 20;
  constexpr std::int64_t kPhase2SeqLen = 512;
  constexpr std::int64_t kPhase2Predictions = 80;
  if (seq_len == kPhase1SeqLen) return kPhase1Predictions;
  if (seq_len == kPhase2SeqLen) return kPhase2Predictions;
  return std::nullopt;
}

namespace {

using detail::NetworkBuilder;
using detail::TransformerShape;
using detail::Value;

enum class Family { cnn, bert, gpt, decoder };

// Refused before building rather than after exhausting memory: a GPT iteration has 48 ops and
// 109 tensors per layer, and the trace, its schedule and replay take memory linear in the ops
// (traces/bench/trace_bench.cpp; docs/performance.md): `simulate` on an 8192-layer GPT,
// about 393,000 ops, peaked at 993 MiB on the 2-core development VM. 8192 layers is 85 times
// GPT-3's 96.
constexpr std::int64_t kMaxLayers = 8192;

struct Entry {
  std::string_view name;
  std::string_view description;
  Family family = Family::cnn;
  Value (*cnn)(NetworkBuilder&) = nullptr;
  TransformerShape defaults{};  // transformers only
  // The position table has seq_len rows (the configurable `gpt`) rather than a fixed size.
  bool positions_follow_seq_len = false;
};

const std::array<Entry, 11>& catalogue() {
  static const std::array<Entry, 11> entries = {{
      {"alexnet", "AlexNet (torchvision variant), 61.1M parameters, 224x224 ImageNet", Family::cnn,
       &detail::alexnet, {}, false},
      {"vgg16", "VGG-16 (configuration D), 138.4M parameters, 224x224 ImageNet", Family::cnn,
       &detail::vgg16, {}, false},
      {"resnet18", "ResNet-18, 11.7M parameters, 224x224 ImageNet", Family::cnn, &detail::resnet18, {}, false},
      {"resnet50", "ResNet-50 v1.5, 25.6M parameters, 224x224 ImageNet", Family::cnn, &detail::resnet50, {}, false},
      {"resnet101", "ResNet-101 v1.5, 44.5M parameters, 224x224 ImageNet", Family::cnn,
       &detail::resnet101, {}, false},
      {"resnet152", "ResNet-152 v1.5, 60.2M parameters, 224x224 ImageNet", Family::cnn,
       &detail::resnet152, {}, false},
      {"bert-base", "BERT-base pre-training (MLM + NSP heads), 110.1M parameters, sequence 512",
       Family::bert, nullptr, {12, 768, 12, 512, 30522, 512}, false},
      {"bert-large", "BERT-large pre-training (MLM + NSP heads), 336.2M parameters, sequence 512",
       Family::bert, nullptr, {24, 1024, 16, 512, 30522, 512}, false},
      {"gpt2", "GPT-2 small language model, 124.4M parameters, sequence 1024", Family::gpt, nullptr,
       {12, 768, 12, 1024, 50257, 1024}, false},
      {"gpt", "GPT-2-style decoder of any shape (layers, hidden, heads, seq_len, vocab)", Family::gpt,
       nullptr, {24, 2048, 16, 2048, 50257, 2048}, true},
      // Llama-2-7B's shape (Touvron et al. 2023, Table 1 and the Hugging Face config of
      // meta-llama/Llama-2-7b-hf: 32 layers, 4096 hidden, 32 heads, 11008 MLP, 32000 tokens,
      // 4096 positions, the pre-training context).
      {"llama", "LLaMA-family decoder (Llama-2-7B by default; any Hugging Face LLaMA/Mistral/Qwen2/GPT-NeoX config)",
       Family::decoder, nullptr, {32, 4096, 32, 4096, 32000, 4096}, false},
  }};
  return entries;
}

std::string valid_names() {
  std::string names;
  for (const Entry& entry : catalogue()) {
    if (!names.empty()) names += ", ";
    names += entry.name;
  }
  return names;
}

const Entry& find_entry(const std::string& name) {
  for (const Entry& entry : catalogue()) {
    if (entry.name == name) return entry;
  }
  throw InputError("model: unknown model '" + name + "'; valid models: " + valid_names());
}

// Applies the request's shape fields over the model's defaults, checking each.
TransformerShape resolve_shape(const Entry& entry, const ModelRequest& request) {
  TransformerShape shape = entry.defaults;
  const auto take = [&](const std::optional<std::int64_t>& field, std::int64_t& target, const char* name) {
    if (!field) return;
    if (*field < 1) {
      throw InputError(std::string(name) + ": must be >= 1 for model '" + request.model + "', got " +
                       std::to_string(*field));
    }
    target = *field;
  };
  take(request.layers, shape.layers, "layers");
  take(request.hidden, shape.hidden, "hidden");
  take(request.heads, shape.heads, "heads");
  take(request.seq_len, shape.seq_len, "seq_len");
  take(request.vocab, shape.vocab, "vocab");
  if (shape.layers > kMaxLayers) {
    throw InputError("layers: " + std::to_string(shape.layers) + " is above the zoo's limit of " + std::to_string(kMaxLayers) +
                     " (about " + std::to_string(48 * std::min<std::int64_t>(shape.layers, std::int64_t{1} << 40)) +
                     " ops; a simulation takes about 2.5 KiB of memory per op)");
  }
  if (shape.hidden % shape.heads != 0) {
    throw InputError("heads: " + std::to_string(shape.heads) + " heads do not divide hidden size " +
                     std::to_string(shape.hidden));
  }
  if (entry.positions_follow_seq_len) {
    shape.max_positions = shape.seq_len;
  } else if (shape.seq_len > shape.max_positions) {
    throw InputError("seq_len: must be <= " + std::to_string(shape.max_positions) + " (the learned positions of '" +
                     request.model + "'), got " + std::to_string(shape.seq_len));
  }
  return shape;
}

void reject_transformer_fields(const ModelRequest& request) {
  const std::array<std::pair<const char*, const std::optional<std::int64_t>*>, 5> fields = {{
      {"layers", &request.layers},
      {"hidden", &request.hidden},
      {"heads", &request.heads},
      {"seq_len", &request.seq_len},
      {"vocab", &request.vocab},
  }};
  for (const auto& [name, field] : fields) {
    if (field->has_value()) {
      throw InputError(std::string(name) + ": a transformer option; model '" + request.model +
                       "' is a CNN with a fixed shape");
    }
  }
  if (request.attention) {
    throw InputError("attention: a transformer option; model '" + request.model +
                     "' is a CNN and has no attention");
  }
  if (request.tie_embeddings) {
    throw InputError("tie_embeddings: a language model option; model '" + request.model + "' is a CNN and has no embedding");
  }
}

void reject_bert_fields(const ModelRequest& request) {
  if (request.head) {
    throw InputError("head: a BERT option (" + std::string(to_string(*request.head)) + "); model '" +
                     request.model + "' is not a BERT model");
  }
  if (request.mlm) {
    throw InputError("mlm: a BERT pre-training option (" + std::string(to_string(*request.mlm)) + "); model '" +
                     request.model + "' is not a BERT model");
  }
  if (request.mlm_predictions) {
    throw InputError("mlm_predictions: a BERT pre-training option; model '" + request.model +
                     "' is not a BERT model");
  }
}

detail::BertOptions resolve_bert_options(const ModelRequest& request, const TransformerShape& shape) {
  detail::BertOptions options;
  options.head = request.head.value_or(BertHead::pretraining);
  if (request.mlm && options.head != BertHead::pretraining) {
    throw InputError("mlm: only the pretraining head has a masked-LM head; head is '" +
                     std::string(to_string(options.head)) + "'");
  }
  options.mlm = request.mlm.value_or(MlmPositions::all);
  if (options.mlm != MlmPositions::masked) {
    if (request.mlm_predictions) {
      throw InputError("mlm_predictions: only with mlm: masked (mlm is '" + std::string(to_string(options.mlm)) +
                       "': the head runs on every position)");
    }
    return options;
  }
  const auto predictions = request.mlm_predictions ? request.mlm_predictions : default_mlm_predictions(shape.seq_len);
  if (!predictions) {
    throw InputError("mlm_predictions: required with mlm: masked at seq_len " + std::to_string(shape.seq_len) +
                     " (the defaults are NVIDIA DeepLearningExamples' 20 at seq_len 128 and 80 at 512)");
  }
  if (*predictions < 1 || *predictions > shape.seq_len) {
    throw InputError("mlm_predictions: must be between 1 and seq_len (" + std::to_string(shape.seq_len) + "), got " +
                     std::to_string(*predictions));
  }
  options.mlm_predictions = *predictions;
  return options;
}

// Meta's LLaMA FeedForward width for a model dimension (facebookresearch/llama, model.py:
// hidden_dim = int(2 * 4 * dim / 3), rounded up to multiple_of = 256): 11008 at 4096.
std::int64_t llama_intermediate(std::int64_t hidden) {
  constexpr std::int64_t kMultipleOf = 256;
  const std::int64_t width = multiply_or_throw(2 * 4, hidden, "hidden: Meta's MLP width 8 * hidden / 3") / 3;
  return (width + kMultipleOf - 1) / kMultipleOf * kMultipleOf;
}

// The shortest decimal that reads back as `value` (1.25, 0.001).
std::string fmt_number(double value) {
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

// A sparse MLP's shape (the config reader checks its fields; a hand-made DecoderArchitecture
// is checked here).
void check_moe(const MoeArchitecture& moe, std::int64_t layers, const std::string& from) {
  if (moe.experts < 1 || moe.top_k < 1 || moe.top_k > moe.experts) {
    throw InputError("num_experts_per_tok: " + std::to_string(moe.top_k) + " of " + std::to_string(moe.experts) +
                     " experts; expected 1 to the number of experts" + from);
  }
  if (moe.intermediate < 1 || moe.shared_expert_intermediate < 0 || moe.sparse_step < 1) {
    throw InputError("moe: expert width " + std::to_string(moe.intermediate) + ", shared expert width " +
                     std::to_string(moe.shared_expert_intermediate) + ", sparse step " + std::to_string(moe.sparse_step) +
                     "; expected a positive expert width and step and a shared width >= 0" + from);
  }
  for (const std::int64_t layer : moe.dense_layers) {
    if (layer < 0 || layer >= layers) {
      throw InputError("mlp_only_layers: layer " + std::to_string(layer) + " is not one of the " + std::to_string(layers) +
                       " layers" + from);
    }
  }
}

// What the trace says about its experts: the architecture and the routed token counts (an
// assumption: traces/zoo/README.md, "Routed tokens").
void add_moe_metadata(const MoeArchitecture& moe, const ExpertRouting& routing, const std::vector<std::int64_t>& tokens,
                      std::map<std::string, std::string>& metadata) {
  metadata["moe_experts"] = std::to_string(moe.experts);
  metadata["moe_top_k"] = std::to_string(moe.top_k);
  metadata["moe_intermediate"] = std::to_string(moe.intermediate);
  if (moe.shared_expert_intermediate > 0) metadata["moe_shared_expert_intermediate"] = std::to_string(moe.shared_expert_intermediate);
  std::string counts;
  for (const std::int64_t n : tokens) counts += (counts.empty() ? "" : ",") + std::to_string(n);
  metadata["moe_tokens_per_expert"] = counts;  // per sequence
  metadata["moe_routing"] = routing.load_imbalance        ? "load_imbalance " + fmt_number(*routing.load_imbalance)
                            : routing.expert_load.empty() ? "uniform"
                                                          : "expert_load";
  if (routing.capacity_factor) metadata["moe_capacity_factor"] = fmt_number(*routing.capacity_factor);
}

// ---- The model's size, checked before anything is built -----------------------------------------
//
// A product of a model's sizes, factor by factor in int64. When it overflows, the field named is
// the one with the largest factor so far: the one that made the model too large (vocab_size for
// the LM head of a 2^50-token vocabulary, batch_size for 2^52 sequences), whatever the order.
// The builder's own arithmetic is checked too (network_builder.cpp, times); these name the field.
class SizeProduct {
 public:
  SizeProduct(std::string what, std::int64_t constant, std::string from)
      : what_(std::move(what)), from_(std::move(from)), value_(constant), formula_(std::to_string(constant)) {}

  SizeProduct& by(std::int64_t factor, const std::string& field) {
    formula_ += " * " + field + " " + std::to_string(factor);
    if (factor > largest_) {
      largest_ = factor;
      largest_field_ = field;
    }
    const auto product = checked_mul(value_, factor);
    if (!product) {
      throw InputError(largest_field_ + ": " + std::to_string(largest_) + " makes " + what_ + " overflow 64 bits (" + formula_ + ")" +
                       from_ + "; expected a model whose sizes and FLOPs fit in 64 bits");
    }
    value_ = *product;
    return *this;
  }
  std::int64_t value() const { return value_; }

 private:
  std::string what_;
  std::string from_;
  std::int64_t value_;
  std::string formula_;
  std::int64_t largest_ = 0;
  std::string largest_field_;
};

// The names under which a model's sizes reach the user: a Hugging Face config's fields, or the
// scenario's keys where the request overrides them (or gives them, for a zoo model).
struct SizeNames {
  std::string layers = "layers", hidden = "hidden", heads = "heads", vocab = "vocab", intermediate = "hidden";
  std::string positions = "seq_len", experts = "num_experts", expert_width = "moe_intermediate_size",
              shared_width = "shared_expert_intermediate_size", top_k = "num_experts_per_tok";
};

// The largest element, byte and FLOP counts of a transformer at `batch` sequences of `seq_len`
// tokens, each one op's or one tensor's (the builder computes them all, checked; the sums over the
// trace are checked after the build, check_trace_totals). Upper bounds of every variant: 4 bytes
// per element (fp32, the widest float the zoo writes), a linear's backward (4 FLOPs per
// multiply-add, both gradients), 10 FLOPs per multiply-add of attention (FlashAttention-2's five
// backward GEMMs; an eager or fused-softmax core does less).
void check_transformer_sizes(std::int64_t batch, std::int64_t seq_len, std::int64_t hidden, std::int64_t mlp_width,
                             std::int64_t vocab, std::int64_t positions, const SizeNames& n, const std::string& from) {
  SizeProduct("the token embedding's bytes", 4, from).by(hidden, n.hidden).by(vocab, n.vocab);
  SizeProduct("the position embedding's bytes", 4, from).by(hidden, n.hidden).by(positions, n.positions);
  SizeProduct("the attention projections' bytes", 4, from).by(hidden, n.hidden).by(hidden, n.hidden);
  SizeProduct("the MLP's bytes", 4, from).by(hidden, n.hidden).by(mlp_width, n.intermediate);
  SizeProduct("the attention's FLOPs", 10, from).by(batch, "batch_size").by(seq_len, "seq_len").by(hidden, n.hidden).by(add_or_throw(seq_len, 1, "seq_len"), "seq_len");
  SizeProduct("the MLP's FLOPs", 4, from).by(batch, "batch_size").by(seq_len, "seq_len").by(hidden, n.hidden).by(mlp_width, n.intermediate);
  SizeProduct("the LM head's FLOPs", 4, from).by(batch, "batch_size").by(seq_len, "seq_len").by(hidden, n.hidden).by(vocab, n.vocab);
}

// What a sparse MLP adds (moe_block.cpp): the router's [T, E] logits and int64 one-hot mask
// [T, k, E], the experts' weights (3 * h * I each), an expert's FLOPs on at most every token.
void check_moe_sizes(const MoeArchitecture& moe, std::int64_t batch, std::int64_t seq_len, std::int64_t hidden, const SizeNames& n,
                     const std::string& from) {
  SizeProduct("the router's FLOPs", 4, from).by(batch, "batch_size").by(seq_len, "seq_len").by(hidden, n.hidden).by(moe.experts, n.experts);
  SizeProduct("the router's expert mask (int64)", 8, from).by(batch, "batch_size").by(seq_len, "seq_len").by(moe.top_k, n.top_k).by(moe.experts, n.experts);
  SizeProduct("the experts' weight bytes", 4 * 3, from).by(hidden, n.hidden).by(moe.intermediate, n.expert_width).by(moe.experts, n.experts);
  SizeProduct("an expert's FLOPs", 4, from).by(batch, "batch_size").by(seq_len, "seq_len").by(hidden, n.hidden).by(moe.intermediate, n.expert_width);
  SizeProduct("the shared expert's FLOPs", 4, from).by(batch, "batch_size").by(seq_len, "seq_len").by(hidden, n.hidden).by(moe.shared_expert_intermediate, n.shared_width);
}

// The ops and tensors of one expert in one sparse layer at the most (the gather, the SwiGLU, the
// weighting and the index_add_, their backward ops, gradient sums and the optimizer's steps of
// its three weights), and the ops of a dense decoder layer, rounded up from what the zoo writes
// in its largest variant (amp-fp16, the for-loop optimizer, gradients summed into new tensors):
// 35 ops and 55 tensors per expert, 82 ops per layer (zoo_test, ZooSize.OpsPerExpertAndLayer...,
// holds them as upper bounds).
constexpr std::int64_t kOpsPerExpert = 40;
constexpr std::int64_t kTensorsPerExpert = 60;
constexpr std::int64_t kOpsPerDecoderLayer = 96;
// The zoo's limit on a decoder's size in ops: what the layer cap lets a dense decoder have (8192
// layers of at most kOpsPerDecoderLayer ops, about 786,000; an 8192-layer GPT's 393,000 ops took
// 993 MiB in `simulate`, about 2.5 KiB per op), so that no count of experts builds a larger trace
// than the largest dense one. Mixtral-8x7B has 32 * 8 experts (about 10,000 ops of them),
// Qwen1.5-MoE-A2.7B 24 * 60 (about 58,000), DeepSeek-V3 58 * 256 (about 594,000).
constexpr std::int64_t kMaxDecoderOps = kMaxLayers * kOpsPerDecoderLayer;

// Refuses, before anything is allocated per expert, a mixture of experts whose trace would be
// larger than kMaxDecoderOps, with an estimate: the expert count alone when one layer's experts
// exceed it, else the layers that multiply them.
void check_moe_count(const MoeArchitecture& moe, std::int64_t layers, const SizeNames& n, const std::string& from) {
  std::int64_t sparse_layers = 0;
  for (std::int64_t layer = 0; layer < layers; ++layer) sparse_layers += detail::is_sparse_layer(moe, layer) ? 1 : 0;
  const auto fmt_estimate = [](std::int64_t experts, std::int64_t sparse) {
    // In doubles: an estimate for the message, whatever the counts.
    const double blocks = static_cast<double>(experts) * static_cast<double>(sparse);
    char text[160];
    std::snprintf(text, sizeof text, "about %.3g ops and %.3g tensors", blocks * kOpsPerExpert, blocks * kTensorsPerExpert);
    return std::string(text);
  };
  const std::string limit = "; expected a model of at most " + std::to_string(kMaxDecoderOps) +
                            " ops (the zoo's limit: the largest dense decoder its " + std::to_string(kMaxLayers) +
                            "-layer cap allows; a simulation takes about 2.5 KiB of memory per op)";
  const std::int64_t budget = kMaxDecoderOps / kOpsPerExpert;  // expert blocks in all
  if (moe.experts > budget) {
    throw InputError(n.experts + ": " + std::to_string(moe.experts) + " experts in one layer make " + fmt_estimate(moe.experts, 1) + from +
                     limit);
  }
  if (sparse_layers > 0 && moe.experts * sparse_layers > budget) {
    throw InputError(n.layers + ": " + std::to_string(layers) + " layers, " + std::to_string(sparse_layers) + " of them with " +
                     std::to_string(moe.experts) + " experts, make " + fmt_estimate(moe.experts, sparse_layers) + " in the experts alone" +
                     from + limit);
  }
}

// After the build: the trace's FLOPs and bytes summed over its ops, and its tensors' bytes,
// must fit in int64 too (reports and the simulator add them up). Each op's and tensor's own
// count is checked by the builder and the Trace; a sum is refused naming the largest term.
void check_trace_totals(const traces::Trace& trace) {
  std::int64_t flops = 0, read = 0, written = 0, bytes = 0;
  traces::OpIndex largest = 0;
  for (traces::OpIndex o = 0; o < trace.ops().size(); ++o) {
    const traces::Op& op = trace.op(o);
    if (trace.flops(o) > trace.flops(largest)) largest = o;
    const auto f = checked_add(flops, trace.flops(o));
    const auto r = checked_add(read, op.bytes_read.at(trace.batch_size()));
    const auto w = checked_add(written, op.bytes_written.at(trace.batch_size()));
    if (!f || !r || !w) {
      throw InputError("the model's FLOPs or bytes moved per iteration add up to more than " + std::to_string(std::numeric_limits<std::int64_t>::max()) +
                       " (the largest op: '" + trace.op(largest).name + "', " + std::to_string(trace.flops(largest)) +
                       " FLOPs); expected a model whose totals fit in 64 bits: a smaller batch_size, seq_len, layers or width");
    }
    flops = *f;
    read = *r;
    written = *w;
  }
  for (const traces::Tensor& tensor : trace.tensors()) {
    if (tensor.view_of) continue;
    const auto b = checked_add(bytes, tensor.bytes());
    if (!b) {
      throw InputError("the model's tensors add up to more than " + std::to_string(std::numeric_limits<std::int64_t>::max()) + " bytes (at '" + tensor.name +
                       "'); expected a model whose memory fits in 64 bits: a smaller batch_size, seq_len, layers or width");
    }
    bytes = *b;
  }
}

// A decoder's sizes by the names the user gave them: the config's fields, or the scenario's keys
// where the request sets them.
SizeNames decoder_size_names(const ModelRequest& request, const DecoderArchitecture& arch) {
  SizeNames n;
  const bool config = !arch.source.empty();
  if (config) {
    n.layers = request.layers ? "layers" : "num_hidden_layers";
    n.hidden = request.hidden ? "hidden" : "hidden_size";
    n.heads = request.heads ? "heads" : "num_attention_heads";
    n.vocab = request.vocab ? "vocab" : "vocab_size";
    n.intermediate = "intermediate_size";
  } else if (!request.hidden) {
    n.intermediate = "intermediate";  // Llama-2-7B's 11008
  }
  if (arch.family == "mixtral") {
    n.experts = "num_local_experts";
    n.expert_width = "intermediate_size";
  }
  return n;
}

// The decoder's architecture: the request's (a Hugging Face config) or Llama-2-7B's, with the
// shape fields over it, checked.
DecoderArchitecture resolve_decoder(const Entry& entry, const ModelRequest& request, std::int64_t& seq_len) {
  DecoderArchitecture arch;
  if (request.decoder) {
    arch = *request.decoder;
  } else {
    arch.layers = entry.defaults.layers;
    arch.hidden = entry.defaults.hidden;
    arch.heads = entry.defaults.heads;
    arch.kv_heads = entry.defaults.heads;
    arch.vocab = entry.defaults.vocab;
    arch.max_positions = entry.defaults.max_positions;
    if (request.hidden) arch.intermediate = llama_intermediate(*request.hidden);
  }
  const std::string from = arch.source.empty() ? "" : " (" + arch.source + ")";
  const auto take = [&](const std::optional<std::int64_t>& field, std::int64_t& target, const char* name) {
    if (!field) return;
    if (*field < 1) {
      throw InputError(std::string(name) + ": must be >= 1 for model '" + request.model + "', got " + std::to_string(*field));
    }
    target = *field;
  };
  const std::int64_t config_heads = arch.heads;
  take(request.layers, arch.layers, "layers");
  take(request.hidden, arch.hidden, "hidden");
  take(request.heads, arch.heads, "heads");
  take(request.vocab, arch.vocab, "vocab");
  if (request.tie_embeddings) arch.tie_embeddings = *request.tie_embeddings;
  // Overriding the heads of a multi-head model keeps it multi-head.
  if (request.heads && arch.kv_heads == config_heads) arch.kv_heads = arch.heads;
  seq_len = request.seq_len.value_or(entry.defaults.seq_len);
  if (request.decoder && !request.seq_len) {
    throw InputError("seq_len: required with a Hugging Face config" + from + " (max_position_embeddings " +
                     std::to_string(arch.max_positions) + " is the longest it allows, not a training length)");
  }
  if (seq_len < 1) throw InputError("seq_len: must be >= 1, got " + std::to_string(seq_len));
  if (arch.layers > kMaxLayers) {  // as resolve_shape: the memory a build takes
    throw InputError("layers: " + std::to_string(arch.layers) + " is above the zoo's limit of " + std::to_string(kMaxLayers) + from);
  }
  // An explicit head_dim (Qwen3, GPT-OSS) sizes the heads whatever the hidden size.
  if (arch.head_dim == 0 && arch.hidden % arch.heads != 0) {
    throw InputError("heads: " + std::to_string(arch.heads) + " heads do not divide hidden size " + std::to_string(arch.hidden) + from);
  }
  if (arch.kv_heads < 1 || arch.heads % arch.kv_heads != 0) {
    throw InputError("num_key_value_heads: " + std::to_string(arch.kv_heads) + " does not divide the " +
                     std::to_string(arch.heads) + " attention heads" + from);
  }
  const std::int64_t head_dim = arch.head_size();
  if (arch.rotary_dims < 0 || arch.rotary_dims > head_dim || arch.rotary_dims % 2 != 0) {
    throw InputError("rotary_pct: gives " + std::to_string(arch.rotary_dims) + " rotary channels of a head of " +
                     std::to_string(head_dim) + "; expected an even number up to it" + from);
  }
  if (arch.rotary_dims == 0 && head_dim % 2 != 0) {
    throw InputError("heads: the head size " + std::to_string(head_dim) + " is odd; rotary embeddings need an even one" + from);
  }
  if (seq_len > arch.max_positions) {
    throw InputError("seq_len: must be <= " + std::to_string(arch.max_positions) + " (max_position_embeddings of '" +
                     request.model + "'" + from + "), got " + std::to_string(seq_len));
  }
  if (arch.moe) {
    check_moe(*arch.moe, arch.layers, from);
    check_moe_count(*arch.moe, arch.layers, decoder_size_names(request, arch), from);
  }
  if (arch.sliding_window && seq_len > *arch.sliding_window) {
    throw InputError("seq_len: " + std::to_string(seq_len) + " is longer than the sliding window of " +
                     std::to_string(*arch.sliding_window) + from + ", which the zoo does not model; expected at most that");
  }
  return arch;
}

}  // namespace

namespace {

// Each vocabulary is one table: the value and its name in scenarios and on the command line.
template <typename Enum, std::size_t N>
using NameTable = std::array<std::pair<Enum, std::string_view>, N>;

constexpr NameTable<Precision, 6> kPrecisions = {{
    {Precision::fp32, "fp32"}, {Precision::amp_fp16, "amp-fp16"}, {Precision::amp_bf16, "amp-bf16"},
    {Precision::fp16, "fp16"}, {Precision::bf16, "bf16"},         {Precision::mixed, "mixed"},
}};
constexpr NameTable<Optimizer, 9> kOptimizers = {{
    {Optimizer::sgd, "sgd"},
    {Optimizer::momentum, "momentum"},
    {Optimizer::adam, "adam"},
    {Optimizer::adamw, "adamw"},
    {Optimizer::adam8bit, "adam8bit"},
    {Optimizer::adamw8bit, "adamw8bit"},
    {Optimizer::paged_adamw, "paged_adamw"},
    {Optimizer::paged_adamw8bit, "paged_adamw8bit"},
    {Optimizer::adafactor, "adafactor"},
}};
// Hugging Face TrainingArguments.optim's names for the same optimizers (transformers'
// OptimizerNames: "adamw_bnb_8bit", "paged_adamw_32bit", "paged_adamw_8bit").
constexpr NameTable<Optimizer, 3> kOptimizerAliases = {{
    {Optimizer::adamw8bit, "adamw_bnb_8bit"},
    {Optimizer::paged_adamw, "paged_adamw_32bit"},
    {Optimizer::paged_adamw8bit, "paged_adamw_8bit"},
}};
constexpr NameTable<LossKind, 4> kLossKinds = {{
    {LossKind::cross_entropy, "cross_entropy"},
    {LossKind::fused_linear_cross_entropy, "fused_linear_cross_entropy"},
    {LossKind::chunked, "chunked"},
    {LossKind::fused_cross_entropy, "fused_cross_entropy"},
}};
constexpr NameTable<OptimizerImpl, 3> kOptimizerImpls = {{
    {OptimizerImpl::foreach, "foreach"}, {OptimizerImpl::fused, "fused"}, {OptimizerImpl::for_loop, "for-loop"},
}};
constexpr NameTable<Attention, 4> kAttentions = {{
    {Attention::fused_softmax, "fused-softmax"},
    {Attention::eager, "eager"},
    {Attention::flash, "flash"},
    {Attention::sdpa_mem_efficient, "sdpa-mem-efficient"},
}};
constexpr NameTable<BertHead, 3> kHeads = {{
    {BertHead::pretraining, "pretraining"},
    {BertHead::sequence_classification, "sequence-classification"},
    {BertHead::question_answering, "question-answering"},
}};
constexpr NameTable<MlmPositions, 2> kMlmPositions = {{
    {MlmPositions::all, "all"}, {MlmPositions::masked, "masked"},
}};

template <typename Enum, std::size_t N>
std::string_view name_in(const NameTable<Enum, N>& table, Enum value) {
  for (const auto& [v, name] : table) {
    if (v == value) return name;
  }
  return "?";
}

template <typename Enum, std::size_t N>
std::optional<Enum> value_in(const NameTable<Enum, N>& table, std::string_view text) {
  for (const auto& [v, name] : table) {
    if (name == text) return v;
  }
  return std::nullopt;
}

template <typename Enum, std::size_t N>
std::vector<std::string_view> names_in(const NameTable<Enum, N>& table) {
  std::vector<std::string_view> names;
  for (const auto& entry : table) names.push_back(entry.second);
  return names;
}

}  // namespace

std::string_view to_string(Precision precision) { return name_in(kPrecisions, precision); }
std::string_view to_string(Optimizer optimizer) { return name_in(kOptimizers, optimizer); }
std::string_view to_string(OptimizerImpl impl) { return name_in(kOptimizerImpls, impl); }
std::string_view to_string(Attention attention) { return name_in(kAttentions, attention); }
std::string_view to_string(BertHead head) { return name_in(kHeads, head); }
std::string_view to_string(MlmPositions mlm) { return name_in(kMlmPositions, mlm); }
std::string_view to_string(LossKind kind) { return name_in(kLossKinds, kind); }

std::string_view to_string(ContextParallelSpec::Variant variant) {
  return variant == ContextParallelSpec::Variant::ring ? "ring" : "all_gather";
}

std::optional<ContextParallelSpec::Variant> parse_context_parallel_variant(std::string_view text) {
  // Megatron-LM's --cp-comm-type names (megatron/training/arguments.py:3221-3226 at
  // NVIDIA/Megatron-LM@d98e8a6): p2p is the ring, allgather the all-gather.
  if (text == "ring" || text == "p2p") return ContextParallelSpec::Variant::ring;
  if (text == "all_gather" || text == "allgather") return ContextParallelSpec::Variant::all_gather;
  return std::nullopt;
}
bool is_torch_optimizer(Optimizer optimizer) {
  return optimizer == Optimizer::sgd || optimizer == Optimizer::momentum || optimizer == Optimizer::adam || optimizer == Optimizer::adamw;
}

std::optional<Precision> parse_precision(std::string_view text) { return value_in(kPrecisions, text); }
std::optional<Optimizer> parse_optimizer(std::string_view text) {
  if (const auto alias = value_in(kOptimizerAliases, text)) return alias;
  return value_in(kOptimizers, text);
}
std::optional<OptimizerImpl> parse_optimizer_impl(std::string_view text) { return value_in(kOptimizerImpls, text); }
std::optional<Attention> parse_attention(std::string_view text) {
  // PyTorch's name for the backend (torch.nn.attention.SDPBackend.FLASH_ATTENTION) of the same kernel.
  if (text == "sdpa-flash") return Attention::flash;
  return value_in(kAttentions, text);
}
std::optional<BertHead> parse_head(std::string_view text) { return value_in(kHeads, text); }
std::optional<MlmPositions> parse_mlm_positions(std::string_view text) { return value_in(kMlmPositions, text); }
std::optional<LossKind> parse_loss_kind(std::string_view text) { return value_in(kLossKinds, text); }

std::vector<std::string_view> precision_names() { return names_in(kPrecisions); }
std::vector<std::string_view> optimizer_names() { return names_in(kOptimizers); }
std::vector<std::string_view> optimizer_impl_names() { return names_in(kOptimizerImpls); }
std::vector<std::string_view> attention_names() { return names_in(kAttentions); }
std::vector<std::string_view> head_names() { return names_in(kHeads); }
std::vector<std::string_view> mlm_positions_names() { return names_in(kMlmPositions); }
std::vector<std::string_view> loss_kind_names() { return names_in(kLossKinds); }

std::vector<ModelInfo> list_models() {
  std::vector<ModelInfo> models;
  for (const Entry& entry : catalogue()) {
    models.push_back({std::string(entry.name), std::string(entry.description), entry.family != Family::cnn});
  }
  return models;
}

ModelDimensions model_dimensions(const ModelSpec& spec) {
  ModelRequest request;
  static_cast<ModelSpec&>(request) = spec;
  const Entry& entry = find_entry(request.model);
  ModelDimensions d;
  if (entry.family == Family::cnn) return d;
  if (entry.family == Family::decoder) {
    std::int64_t seq_len = 0;
    const DecoderArchitecture arch = resolve_decoder(entry, request, seq_len);
    d = {arch.layers, arch.hidden, arch.heads, arch.kv_heads, arch.intermediate, arch.moe ? arch.moe->experts : 0, arch.vocab, seq_len};
    return d;
  }
  const TransformerShape shape = resolve_shape(entry, request);
  d = {shape.layers, shape.hidden, shape.heads, shape.heads, 4 * shape.hidden, 0, shape.vocab, shape.seq_len};
  return d;
}

std::int64_t tensor_parallel_vocab(std::int64_t vocab, std::int64_t degree) {
  if (degree <= 1) return vocab;
  // vocab_size_with_padding: multiple = make_vocab_size_divisible_by (128) x TP size,
  // ceil(vocab / multiple) x multiple (build_tokenizer.py:133-145; zoo.hpp).
  constexpr std::int64_t kMakeVocabSizeDivisibleBy = 128;  // megatron/training/arguments.py:2441
  const std::int64_t multiple = multiply_or_throw(kMakeVocabSizeDivisibleBy, degree, "the padded vocabulary");
  return multiply_or_throw((vocab + multiple - 1) / multiple, multiple, "the padded vocabulary");
}

namespace {

// ModelSpec::tensor_parallel's rules, before anything is built. `heads`, `kv_heads` and `width`
// (the MLP's intermediate size) are what the degree splits; under sequence parallelism the
// sequence too. Returns the degree (1 when unset).
std::int64_t check_tensor_parallel(const ModelRequest& request, std::int64_t heads, std::int64_t kv_heads, std::int64_t width,
                                   std::int64_t seq_len) {
  if (!request.tensor_parallel) return 1;
  const TensorParallelSpec& tp = *request.tensor_parallel;
  const std::string t = std::to_string(tp.degree);
  if (tp.degree < 1) throw std::invalid_argument("tensor_parallel.degree: " + t + "; expected an integer >= 1");
  if (tp.sequence_parallel && tp.degree == 1) {
    throw std::invalid_argument("tensor_parallel.sequence_parallel: needs tensor_parallel.degree > 1 (Megatron-LM's "
                                "--sequence-parallel splits the sequence over the tensor-parallel ranks), got degree 1");
  }
  const auto divides = [&](std::int64_t value, const std::string& what) {
    if (value % tp.degree != 0) {
      throw std::invalid_argument("tensor_parallel.degree: " + t + " does not divide the " + what + " (" + std::to_string(value) +
                                  ") of '" + request.model + "'; expected a degree that divides it");
    }
  };
  divides(heads, "attention heads");
  divides(kv_heads, "key/value heads");
  divides(width, "MLP width");
  if (tp.sequence_parallel) divides(seq_len, "sequence length under sequence parallelism");
  if (tp.comm_overlap && !tp.sequence_parallel) {
    throw std::invalid_argument("tensor_parallel.comm_overlap: needs sequence_parallel (Megatron-LM asserts it for --tp-comm-overlap)");
  }
  if (tp.degree == 1) return 1;
  if (request.loss.kind != LossKind::cross_entropy) {
    throw std::invalid_argument("tensor_parallel: the loss is Megatron-LM's vocabulary-parallel cross-entropy; loss kind '" +
                                std::string(to_string(request.loss.kind)) + "' is not written for tensor parallelism");
  }
  if (request.lora || request.torchtitan || request.packed_documents) {
    throw std::invalid_argument(std::string("tensor_parallel: not written together with ") +
                                (request.lora ? "lora" : request.torchtitan ? "the torchtitan implementation" : "packed documents"));
  }
  return tp.degree;
}

// ModelSpec::pipeline_stage's rules, before anything is built; the stage to build (the whole
// model of `layers` layers when unset).
PipelineStageSpec check_pipeline_stage(const ModelRequest& request, std::int64_t layers) {
  if (!request.pipeline_stage) return {0, layers, true, true};
  const PipelineStageSpec& stage = *request.pipeline_stage;
  const std::string range = "first_layer " + std::to_string(stage.first_layer) + ", layers " + std::to_string(stage.layers);
  if (stage.first_layer < 0 || stage.layers < 1 || stage.layers > layers - stage.first_layer) {
    throw std::invalid_argument("pipeline_stage: " + range + " is not a range of the " + std::to_string(layers) + " layers of '" +
                                request.model + "'; expected first_layer >= 0, layers >= 1 and first_layer + layers <= " +
                                std::to_string(layers));
  }
  // The embedding feeds layer 0 and the head reads the last layer: a stage holding either holds
  // that end of the layers (Megatron's pre_process / post_process stages, gpt_model.py:173, 255).
  if (stage.first && stage.first_layer != 0) {
    throw std::invalid_argument("pipeline_stage: " + range + " is marked first (the embedding) but does not start at layer 0");
  }
  if (stage.last && stage.first_layer + stage.layers != layers) {
    throw std::invalid_argument("pipeline_stage: " + range + " is marked last (the head and loss) but does not end at layer " +
                                std::to_string(layers) + " of '" + request.model + "'");
  }
  if (stage.scatter_gather && (!request.tensor_parallel || request.tensor_parallel->degree < 2 || request.tensor_parallel->sequence_parallel)) {
    throw std::invalid_argument(std::string("pipeline_stage.scatter_gather: splits the boundary tensor over the tensor-parallel ranks; ") +
                                (request.tensor_parallel && request.tensor_parallel->sequence_parallel
                                     ? "under sequence parallelism it is split already; expected it without sequence parallelism"
                                     : "expected a tensor-parallel degree > 1"));
  }
  if (request.lora || request.torchtitan || request.packed_documents) {
    throw std::invalid_argument(std::string("pipeline_stage: not written together with ") +
                                (request.lora ? "lora" : request.torchtitan ? "the torchtitan implementation" : "packed documents"));
  }
  return stage;
}

// ModelSpec::context_parallel's rules, before anything is built. `t` is the tensor-parallel
// degree already checked. Returns the degree (1 when unset).
std::int64_t check_context_parallel(const ModelRequest& request, std::int64_t seq_len, std::int64_t t, Attention attention,
                                    bool sliding_window, bool moe) {
  if (!request.context_parallel) return 1;
  const ContextParallelSpec& cp = *request.context_parallel;
  const std::string c = std::to_string(cp.degree);
  if (cp.degree < 1) throw std::invalid_argument("context_parallel.degree: " + c + "; expected an integer >= 1");
  if (cp.degree == 1) return 1;
  if (seq_len % (2 * cp.degree) != 0) {
    throw std::invalid_argument("context_parallel.degree: 2 x " + c + " = " + std::to_string(2 * cp.degree) +
                                " does not divide the sequence length " + std::to_string(seq_len) +
                                "; expected 2 x degree to divide it (load-balanced chunks: 2 per context-parallel rank)");
  }
  const std::int64_t local = seq_len / cp.degree;
  if (request.tensor_parallel && request.tensor_parallel->sequence_parallel && local % t != 0) {
    throw std::invalid_argument("context_parallel.degree: the " + std::to_string(local) + " tokens of a context-parallel rank (" +
                                std::to_string(seq_len) + " / " + c + ") do not split over the " + std::to_string(t) +
                                " tensor-parallel ranks of sequence parallelism; expected tensor degree x 2 x context degree to "
                                "divide the sequence");
  }
  if (attention != Attention::flash) {
    throw std::invalid_argument("context_parallel: written for flash attention (Transformer Engine's context-parallel kernels); attention '" +
                                std::string(to_string(attention)) + "' is not modelled");
  }
  if (request.lora || request.packed_documents || sliding_window || moe) {
    throw std::invalid_argument(std::string("context_parallel: not written together with ") +
                                (request.lora               ? "lora"
                                 : request.packed_documents ? "packed documents"
                                 : sliding_window           ? "a sliding window"
                                                            : "mixture-of-experts layers"));
  }
  return cp.degree;
}

void add_context_parallel_metadata(const ContextParallelSpec& cp, std::map<std::string, std::string>& metadata) {
  metadata["context_parallel"] = std::to_string(cp.degree);
  metadata["context_parallel_comm"] = std::string(to_string(cp.variant));
}

void add_pipeline_stage_metadata(const PipelineStageSpec& stage, std::map<std::string, std::string>& metadata) {
  metadata["pipeline_first_layer"] = std::to_string(stage.first_layer);
  metadata["pipeline_layers"] = std::to_string(stage.layers);
  metadata["pipeline_first"] = stage.first ? "true" : "false";
  metadata["pipeline_last"] = stage.last ? "true" : "false";
  if (stage.scatter_gather) metadata["pipeline_scatter_gather"] = "true";
}

void add_tensor_parallel_metadata(const TensorParallelSpec& tp, std::int64_t vocab, std::map<std::string, std::string>& metadata) {
  metadata["tensor_parallel"] = std::to_string(tp.degree);
  if (tp.sequence_parallel) metadata["sequence_parallel"] = "true";
  if (tp.comm_overlap) metadata["tp_comm_overlap"] = "true";
  metadata["padded_vocab"] = std::to_string(tensor_parallel_vocab(vocab, tp.degree));
}

// The model_type values with mixture-of-experts layers, as messages list them; those that
// Megatron-LM's MoE layer (expert_parallel) splits into pipeline stages, and those it also splits
// by tensor parallelism (not OLMoE, whose q/k norms span the whole projection).
constexpr std::string_view kMoeModelTypes = "mixtral, qwen2_moe, qwen3_moe, olmoe or gpt_oss";
constexpr std::string_view kMegatronMoeStageTypes = "mixtral, qwen2_moe, qwen3_moe and olmoe";
constexpr std::string_view kMegatronMoeTensorTypes = "mixtral, qwen2_moe and qwen3_moe";

}  // namespace

traces::Trace build_model(const ModelRequest& request) {
  const Entry& entry = find_entry(request.model);
  if (request.batch_size < 1) {
    throw InputError("batch_size: must be >= 1, got " + std::to_string(request.batch_size));
  }
  if (request.torchtitan && entry.family != Family::decoder) {
    throw InputError("implementation: torchtitan builds the Llama decoders (model 'llama', a Hugging Face Llama config), not '" + request.model + "'");
  }
  const bool transformer = entry.family != Family::cnn;
  // Convolutional nets train with SGD and momentum, transformers with Adam (the papers' setups).
  const Optimizer optimizer = request.optimizer.value_or(transformer ? Optimizer::adam : Optimizer::momentum);
  // Only a flag that differs from its default is recorded, so that the metadata of the default
  // (PyTorch >= 2.0) traces stays as it was.
  std::map<std::string, std::string> metadata;
  if (request.softmax_saves_input) metadata["softmax_saves_input"] = "true";
  if (!request.accumulate_gradients_in_place) metadata["accumulate_gradients_in_place"] = "false";
  NetworkBuilder nb(request.model, request.batch_size, request.precision, optimizer, request.optimizer_impl,
                    request.softmax_saves_input, request.accumulate_gradients_in_place);
  nb.set_optimizer_in_backward(request.optimizer_in_backward);
  // Megatron's main_grad: fp32 with --accumulate-allreduce-grads-in-fp32, which --bf16 forces
  // (MegatronOptions::main_grad_fp32), else the weights' dtype.
  if (request.megatron) {
    nb.set_megatron_main_grad(request.megatron->main_grad_fp32 || request.precision == Precision::bf16 ? traces::DType::f32 : nb.compute_dtype());
  }
  nb.set_loss(request.loss);
  // The loss kinds are a language model's (the head over the vocabulary): the CNNs and BERT keep
  // their cross-entropy.
  if (request.loss.kind != LossKind::cross_entropy && (entry.family == Family::cnn || entry.family == Family::bert)) {
    throw InputError("loss: kind " + std::string(to_string(request.loss.kind)) + " applies to the language models (gpt2, gpt, llama); model '" +
                     request.model + "' keeps its cross_entropy");
  }
  if (request.loss.kind != LossKind::cross_entropy) metadata["loss"] = std::string(to_string(request.loss.kind));
  if (request.loss.kind == LossKind::chunked) metadata["loss_chunks"] = std::to_string(request.loss.chunks);
  if (request.loss.upcast) metadata["loss_upcast"] = *request.loss.upcast ? "true" : "false";
  if (request.loss.compiled) {
    // The compiled loss is lm_loss's: BERT's and the CNNs' heads, and Megatron's vocabulary-parallel
    // cross-entropy under tensor parallelism, keep their own.
    if (request.loss.kind != LossKind::cross_entropy || request.loss.upcast) {
      throw InputError("loss: compiled applies to kind cross_entropy without upcast (the compiled kernels upcast in registers)");
    }
    if (entry.family == Family::cnn || entry.family == Family::bert || request.tensor_parallel) {
      throw InputError("loss: compiled is written for a language model's (gpt2, gpt, llama) cross-entropy over the whole vocabulary, not " +
                       std::string(request.tensor_parallel ? "Megatron's vocabulary-parallel one (tensor parallelism)" : "model '" + request.model + "'"));
    }
    metadata["loss_compiled"] = "true";
  }
  if (request.expert_parallel && entry.family != Family::decoder) {
    throw std::invalid_argument("expert_parallel: written for the mixture-of-experts decoders (model 'llama' with a " + std::string(kMoeModelTypes) +
                                " config), not '" + request.model + "'");
  }
  if (request.tensor_parallel && request.model != "gpt" && entry.family != Family::decoder) {
    throw std::invalid_argument("tensor_parallel: written for models 'gpt' and 'llama' (Megatron-LM's sharding), not '" +
                                request.model + "'");
  }
  if (request.context_parallel && request.model != "gpt" && entry.family != Family::decoder) {
    throw std::invalid_argument("context_parallel: written for models 'gpt' and 'llama' (Megatron-LM's GPTModel), not '" + request.model +
                                "'");
  }
  if (request.pipeline_stage && request.model != "gpt" && entry.family != Family::decoder) {
    throw std::invalid_argument("pipeline_stage: written for models 'gpt' and 'llama' (Megatron-LM's GPTModel stages), not '" +
                                request.model + "'");
  }
  if (!transformer) {
    reject_transformer_fields(request);
    reject_bert_fields(request);
    if (request.routing) throw InputError("moe: routing options apply to mixture-of-experts decoders; model '" + request.model + "' is a CNN");
    if (request.lora) throw InputError("lora: LoRA is written for the decoders (model 'llama' and Hugging Face configs), not the CNN '" + request.model + "'");
    if (request.packed_documents) throw InputError("packing: packed documents apply to the decoders, not the CNN '" + request.model + "'");
    // A CNN's shape is fixed: only the batch can make a count overflow (the builder checks each).
    try {
      traces::Trace trace = nb.finish(entry.cnn(nb), std::move(metadata));
      check_trace_totals(trace);
      return trace;
    } catch (const InputError& e) {
      throw InputError("batch_size: " + std::to_string(request.batch_size) + " is too large for '" + request.model + "' (" + e.what() +
                       "); expected a batch whose sizes and FLOPs fit in 64 bits");
    }
  }
  if (entry.family == Family::decoder) {
    reject_bert_fields(request);
    std::int64_t seq_len = 0;
    const DecoderArchitecture arch = resolve_decoder(entry, request, seq_len);
    // Hugging Face's default attention implementation is "sdpa", which picks the flash kernel
    // for 16-bit inputs on a GPU that has it.
    const Attention attention = request.attention.value_or(Attention::flash);
    if (attention == Attention::fused_softmax) {
      throw InputError("attention: fused-softmax (Megatron-LM's core) is not written for '" + request.model +
                       "'; expected eager, flash (sdpa-flash) or sdpa-mem-efficient");
    }
    const SizeNames names = decoder_size_names(request, arch);
    const std::string from = arch.source.empty() ? "" : " (" + arch.source + ")";
    if ((arch.attention_sinks || !arch.sliding_layers.empty()) && attention != Attention::flash) {
      throw InputError("attention: " + std::string(to_string(attention)) + " is not written for '" + arch.family + "'" + from +
                       ", whose attention sinks and sliding-window layers are modelled on the flash kernel (FlashAttention with "
                       "sinks, Transformer Engine's fused attention); expected flash");
    }
    if (arch.family == "gpt_oss" && (request.lora || request.packed_documents || request.torchtitan)) {
      throw InputError(std::string(request.lora ? "lora" : request.packed_documents ? "packing" : "implementation") +
                       ": not written for 'gpt_oss'" + from + "; expected full fine-tuning or pre-training of unpacked sequences");
    }
    // No learned position table: the rotary tables have seq_len rows.
    check_transformer_sizes(request.batch_size, seq_len, arch.hidden, arch.intermediate, arch.vocab, seq_len, names, from);
    if (arch.moe) check_moe_sizes(*arch.moe, request.batch_size, seq_len, arch.hidden, names, from);
    std::vector<std::int64_t> expert_tokens;
    if (arch.moe) {
      expert_tokens = routed_tokens(*arch.moe, request.routing.value_or(ExpertRouting{}), seq_len);
      add_moe_metadata(*arch.moe, request.routing.value_or(ExpertRouting{}), expert_tokens, metadata);
    } else if (request.routing) {
      throw InputError("moe: routing options apply to decoders with mixture-of-experts layers (model_type " + std::string(kMoeModelTypes) + "); '" +
                       request.model + "' here is dense");
    }
    if (request.lora) detail::configure_lora(nb, *request.lora, arch, request.precision, metadata);
    const std::int64_t documents = request.packed_documents.value_or(1);
    if (documents < 1 || documents > seq_len) {
      throw InputError("packing.documents: must be between 1 and seq_len (" + std::to_string(seq_len) + "), got " + std::to_string(documents));
    }
    if (request.packed_documents) metadata["packed_documents"] = std::to_string(documents);
    // Megatron-LM's MoE layer (ExpertParallelSpec) makes the mixture-of-experts families
    // shardable: tensor parallelism and pipeline stages compose with it.
    const bool dense_family = arch.family == "llama" || arch.family == "mistral" || arch.family == "qwen2" || arch.family == "qwen3";
    const bool megatron_moe = arch.moe.has_value() && request.expert_parallel.has_value();
    if (request.expert_parallel && !arch.moe) {
      throw std::invalid_argument("expert_parallel: splits the experts of a mixture-of-experts decoder (model_type " + std::string(kMoeModelTypes) + "); '" +
                                  arch.family + "'" + from + " has none");
    }
    if (request.tensor_parallel && request.tensor_parallel->degree != 1 && !dense_family && !megatron_moe) {
      throw std::invalid_argument("tensor_parallel: written for the llama, mistral, qwen2 and qwen3 families" +
                                  (arch.moe ? " and, with expert_parallel (Megatron-LM's MoE layer), " + std::string(kMegatronMoeTensorTypes) : std::string()) +
                                  ", not '" + arch.family + "'" + from + (arch.moe ? "" : " (GPT-NeoX sharding is not modelled)"));
    }
    const std::int64_t t = check_tensor_parallel(request, arch.heads, arch.kv_heads, arch.intermediate, seq_len);
    if (t > 1 && arch.qk_norm == DecoderArchitecture::QkNorm::projection) {
      // OLMoE's q_norm and k_norm take their statistics over the whole projection, which a
      // column-parallel split would cut (transformers' own plan gathers the projections first).
      throw std::invalid_argument("tensor_parallel: the query and key norms of '" + arch.family + "'" + from +
                                  " span the whole projection, which tensor parallelism splits; not modelled (expected degree 1)");
    }
    if (t > 1) {
      if (arch.moe) {
        // megatron/training/arguments.py, validate_args ("MoE Spec check"): "When using MoE and
        // tensor parallelism, sequence parallelism must be used."
        if (!request.tensor_parallel->sequence_parallel) {
          throw std::invalid_argument("tensor_parallel.sequence_parallel: Megatron-LM requires sequence parallelism with MoE and tensor "
                                      "parallelism (arguments.py asserts it); expected sequence_parallel: true");
        }
        const auto divides = [&](std::int64_t width, const char* what) {
          if (width % t != 0) {
            throw std::invalid_argument("tensor_parallel.degree: " + std::to_string(t) + " does not divide the " + what + " (" +
                                        std::to_string(width) + ")" + from + "; expected a degree that divides it");
          }
        };
        divides(arch.moe->intermediate, "experts' MLP width");
        divides(arch.moe->shared_expert_intermediate, "shared expert's MLP width");
      }
      nb.set_tensor_parallel(t, request.tensor_parallel->sequence_parallel, request.tensor_parallel->comm_overlap);
      add_tensor_parallel_metadata(*request.tensor_parallel, arch.vocab, metadata);
    }
    if (request.pipeline_stage && !dense_family && !megatron_moe) {
      // The families whose layers tensor parallelism shards (above): the stages compose with it.
      throw std::invalid_argument("pipeline_stage: written for the llama, mistral, qwen2 and qwen3 families" +
                                  (arch.moe ? " and, with expert_parallel (Megatron-LM's MoE layer), " + std::string(kMegatronMoeStageTypes) : std::string()) +
                                  ", not '" + arch.family + "'" + from + (arch.moe ? "" : " (GPT-NeoX stages are not modelled)"));
    }
    std::optional<detail::ExpertParallelPlan> expert_plan;
    if (megatron_moe) {
      const ExpertParallelSpec& ep = *request.expert_parallel;
      const std::int64_t etp = ep.expert_tensor == 0 ? t : ep.expert_tensor;
      if (etp != t) {
        throw std::invalid_argument("expert_parallel.expert_tensor: " + std::to_string(etp) + " with tensor parallelism " + std::to_string(t) +
                                    "; only the experts' tensor-parallel degree equal to the layers' (Megatron-LM's default) is "
                                    "modelled, not MoE parallel folding; expected " + std::to_string(t));
      }
      if (request.torchtitan || request.lora || request.packed_documents) {
        throw std::invalid_argument(std::string("expert_parallel: not written together with ") +
                                    (request.lora ? "lora" : request.torchtitan ? "the torchtitan implementation" : "packed documents"));
      }
      const bool allgather = ep.dispatcher == ExpertParallelSpec::TokenDispatcher::allgather;
      expert_plan = detail::plan_expert_parallel(*arch.moe, request.routing.value_or(ExpertRouting{}), seq_len, ep.degree, etp, allgather);
      metadata["expert_parallel"] = std::to_string(ep.degree);
      metadata["expert_tensor_parallel"] = std::to_string(etp);
      metadata["moe_dispatcher"] = allgather ? "allgather" : "alltoall";
      metadata["moe_simulated_expert_rank"] = std::to_string(expert_plan->rank);
      std::string rows;
      for (std::size_t i = 0; i < expert_plan->local_experts.size(); ++i) {
        rows += (rows.empty() ? "" : ",") + std::to_string(expert_plan->local_experts[i]) + ":" + std::to_string(expert_plan->expert_rows[i]);
      }
      metadata["moe_local_expert_rows"] = rows;  // expert:rows per sample
    }
    if (request.context_parallel && request.context_parallel->degree != 1) {
      const std::string& family = arch.family;
      if (family != "llama" && family != "mistral" && family != "qwen2" && family != "qwen3") {
        throw std::invalid_argument("context_parallel: written for the llama, mistral, qwen2 and qwen3 families, not '" + family + "'" +
                                    from);
      }
    }
    const std::int64_t c = check_context_parallel(request, seq_len, t, attention, arch.sliding_window.has_value(), arch.moe.has_value());
    if (c > 1) {
      nb.set_context_parallel(c, request.context_parallel->variant);
      add_context_parallel_metadata(*request.context_parallel, metadata);
    }
    const PipelineStageSpec stage = check_pipeline_stage(request, arch.layers);
    if (request.pipeline_stage) add_pipeline_stage_metadata(stage, metadata);
    nb.set_pipeline_scatter_gather(stage.scatter_gather);
    Value root;  // the loss, or a pipeline stage's sent output (NetworkBuilder::finish)
    if (request.torchtitan && request.megatron) throw InputError("implementation: one of torchtitan and megatron, not both");
    if (request.torchtitan) {
      detail::check_torchtitan_request(arch, request, attention);
      root = detail::torchtitan_decoder_lm(nb, arch, seq_len, attention, request.torchtitan->norm);
      metadata["implementation"] = "torchtitan";
      metadata["norm_type"] = request.torchtitan->norm == TorchtitanOptions::Norm::fused_rmsnorm ? "fused_rmsnorm" : "rmsnorm";
    } else if (request.megatron) {
      const MegatronOptions& options = *request.megatron;
      const std::string& family = arch.family;
      const bool llama_shaped = family == "llama" || family == "mistral" || family == "qwen2" || family == "qwen3" || family == "mixtral" ||
                                family == "qwen2_moe" || family == "qwen3_moe";
      if (!llama_shaped || arch.norm != DecoderArchitecture::Norm::rms || arch.parallel_residual) {
        throw InputError("implementation: megatron builds Megatron-LM's GPT layers for Llama-shaped decoders (model_type llama, mistral, qwen2, "
                         "qwen3, mixtral, qwen2_moe, qwen3_moe), not '" + family + "'" + from);
      }
      if (request.lora || request.packed_documents) {
        throw InputError(std::string("implementation: megatron is not written together with ") + (request.lora ? "lora" : "packed documents"));
      }
      // Megatron-LM steps its optimizer once the backward pass is over, on its DDP's main_grad
      // buffer, into which the layers' plain gradients are added (NetworkBuilder::add_into_main_grad).
      if (request.optimizer_in_backward) {
        throw InputError("implementation: megatron steps the optimizer after the backward pass, on Megatron's main_grad buffer; expected no "
                         "optimizer_in_backward");
      }
      if (arch.moe && !expert_plan) {
        throw InputError("implementation: megatron builds Megatron-LM's MoE layer, which needs expert parallelism (parallelism.expert, 1 or more); "
                         "Hugging Face's expert loop is not Megatron's" + from);
      }
      const auto probability = [&](double p, const char* key) {
        if (!(p >= 0 && p < 1)) throw InputError(std::string("megatron.") + key + ": expected a probability in [0, 1)");
      };
      probability(options.hidden_dropout, "hidden_dropout");
      probability(options.attention_dropout, "attention_dropout");
      if (options.moe_grouped_gemm && !arch.moe) {
        throw InputError("megatron.moe_grouped_gemm: groups the GEMMs of a mixture of experts' local experts, and the model has none; expected false");
      }
      if (options.moe_grouped_gemm && arch.activation != DecoderArchitecture::Activation::silu) {
        // GroupedMLP.__init__ (experts.py at core_v0.6.0): "Activation function must be silu
        // when using GroupedMLP" for gated units. (GPT-OSS's experts never get here: its layers
        // are refused above.)
        throw InputError("megatron.moe_grouped_gemm: Megatron-LM's GroupedMLP runs SwiGLU experts (silu) only; expected false");
      }
      // Megatron's attention dropout, not the Hugging Face config's.
      DecoderArchitecture layers = arch;
      layers.attention_dropout = options.attention_dropout > 0;
      root = detail::decoder_lm(nb, layers, seq_len, attention, stage, expert_tokens, documents, expert_plan ? &*expert_plan : nullptr, &options);
      metadata["implementation"] = "megatron";
      const auto shortest = [](double value) {
        char text[32];
        std::snprintf(text, sizeof text, "%g", value);
        return std::string(text);
      };
      metadata["megatron_hidden_dropout"] = shortest(options.hidden_dropout);
      metadata["megatron_attention_dropout"] = shortest(options.attention_dropout);
      metadata["megatron_rope_fusion"] = options.rope_fusion ? "true" : "false";
      metadata["megatron_bias_activation_fusion"] = options.bias_activation_fusion ? "true" : "false";
      if (arch.moe) metadata["megatron_moe_grouped_gemm"] = options.moe_grouped_gemm ? "true" : "false";
    } else {
      root = detail::decoder_lm(nb, arch, seq_len, attention, stage, expert_tokens, documents, expert_plan ? &*expert_plan : nullptr);
    }
    if (request.lora) nb.check_lora_targets();
    metadata["attention"] = std::string(to_string(attention));
    metadata["family"] = arch.family;
    metadata["layers"] = std::to_string(arch.layers);
    metadata["hidden"] = std::to_string(arch.hidden);
    metadata["heads"] = std::to_string(arch.heads);
    metadata["kv_heads"] = std::to_string(arch.kv_heads);
    metadata["intermediate"] = std::to_string(arch.intermediate);
    metadata["seq_len"] = std::to_string(seq_len);
    metadata["vocab"] = std::to_string(arch.vocab);
    if (!arch.source.empty()) metadata["hf_config"] = arch.source;
    traces::Trace trace = nb.finish(root, std::move(metadata));
    check_trace_totals(trace);
    return trace;
  }
  if (request.decoder) {
    throw InputError("decoder: a Hugging Face decoder architecture applies to model 'llama' only, not '" + request.model + "'");
  }
  if (request.lora) {
    throw InputError("lora: LoRA is written for the decoders (model 'llama' and Hugging Face configs), not '" + request.model + "'");
  }
  if (request.packed_documents) {
    throw InputError("packing: packed documents are written for the decoders (model 'llama' and Hugging Face configs), not '" + request.model + "'");
  }
  if (request.routing) {
    throw InputError("moe: routing options apply to model 'llama' with mixture-of-experts layers only, not '" + request.model + "'");
  }
  const TransformerShape shape = resolve_shape(entry, request);
  const std::int64_t mlp_width = SizeProduct("the MLP width", 4, "").by(shape.hidden, "hidden").value();
  check_transformer_sizes(request.batch_size, shape.seq_len, shape.hidden, mlp_width, shape.vocab, shape.max_positions, SizeNames{}, "");
  const Attention attention = request.attention.value_or(Attention::fused_softmax);
  if (attention == Attention::sdpa_mem_efficient) {
    throw InputError("attention: sdpa-mem-efficient is written for model 'llama' only; '" + request.model +
                     "' takes fused-softmax, eager or flash");
  }
  Value root;  // the loss, or a pipeline stage's sent output (NetworkBuilder::finish)
  // GPT2LMHeadModel's and BertForPreTraining's heads are tied (their modules have no weight of
  // their own to untie); Megatron's GPT takes either.
  if (request.tie_embeddings == false && request.model != "gpt") {
    throw InputError("tie_embeddings: false is written for models 'gpt' and 'llama' (an output layer of its own); '" + request.model +
                     "' ties its head to the word embeddings; expected true or no key");
  }
  const bool tied = request.tie_embeddings.value_or(true);
  if (!tied) metadata["tie_embeddings"] = "false";
  if (entry.family == Family::bert) {
    const detail::BertOptions options = resolve_bert_options(request, shape);
    root = detail::bert(nb, shape, attention, options);
    metadata["head"] = std::string(to_string(options.head));
    // Recorded only when masked, so that the metadata of the default traces stays as it was.
    if (options.mlm == MlmPositions::masked) {
      metadata["mlm"] = std::string(to_string(options.mlm));
      metadata["mlm_predictions"] = std::to_string(options.mlm_predictions);
    }
  } else {
    reject_bert_fields(request);
    const std::int64_t t = check_tensor_parallel(request, shape.heads, shape.heads, mlp_width, shape.seq_len);
    if (t > 1) {
      nb.set_tensor_parallel(t, request.tensor_parallel->sequence_parallel, request.tensor_parallel->comm_overlap);
      add_tensor_parallel_metadata(*request.tensor_parallel, shape.vocab, metadata);
    }
    const std::int64_t c = check_context_parallel(request, shape.seq_len, t, attention, false, false);
    if (c > 1) {
      nb.set_context_parallel(c, request.context_parallel->variant);
      add_context_parallel_metadata(*request.context_parallel, metadata);
    }
    const PipelineStageSpec stage = check_pipeline_stage(request, shape.layers);
    if (request.pipeline_stage) add_pipeline_stage_metadata(stage, metadata);
    nb.set_pipeline_scatter_gather(stage.scatter_gather);
    root = detail::gpt2_lm_head(nb, shape, attention, stage, tied);
  }
  metadata["attention"] = std::string(to_string(attention));
  metadata["layers"] = std::to_string(shape.layers);
  metadata["hidden"] = std::to_string(shape.hidden);
  metadata["heads"] = std::to_string(shape.heads);
  metadata["seq_len"] = std::to_string(shape.seq_len);
  metadata["vocab"] = std::to_string(shape.vocab);
  traces::Trace trace = nb.finish(root, std::move(metadata));
  check_trace_totals(trace);
  return trace;
}

}  // namespace comptrain::zoo

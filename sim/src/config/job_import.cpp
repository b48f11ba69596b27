// Megatron-LM argument lists and torchtitan TOML job files as scenarios (job_import.hpp). Both
// fill one JobDescription, which one function writes as the scenario: the two importers differ in
// how they read, not in what a scenario is.

#include "comptrain/sim/config/job_import.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <toml++/toml.h>

#include "comptrain/support/input_error.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "launch_script.hpp"

namespace comptrain::sim {
namespace {

// What a job says, in comptrain's terms, before it is written.
struct JobDescription {
  std::string name;
  std::string importer;  // "Megatron-LM arguments", "torchtitan job"
  // The model: an inline Hugging Face config (ordered keys), or the zoo's `gpt`.
  std::vector<std::pair<std::string, YAML::Node>> hf_config;
  std::optional<std::string> zoo_model;
  std::map<std::string, long long> zoo_shape;  // layers, hidden, heads, vocab for the zoo model
  bool zoo_untied = false;  // the zoo model's output layer has its own weight (model.tie_embeddings: false)
  long long seq_len = 0;
  std::string attention = "flash";
  bool torchtitan = false;
  // training
  long long micro_batch = 1;
  long long accumulation_steps = 1;
  std::string precision = "mixed";
  std::string optimizer = "adamw";
  std::string optimizer_impl = "fused";
  bool float8_delayed = false;  // Megatron-LM's --fp8-format: Transformer Engine's DelayedScaling on every linear but the output layer
  bool fp8_weights = false;     // and --fp8-param-gather: the weights themselves FP8 (training.float8.fp8_weights)
  // torchtitan's torchao float8 converter (tensorwise); unset: no converter.
  struct TensorwiseFloat8 {
    std::vector<std::string> skip;  // module patterns whose linears stay 16-bit
    bool fsdp_all_gather = false;   // FSDP2 gathers the converted weights in float8
  };
  std::optional<TensorwiseFloat8> float8_tensorwise;
  bool compile_blocks = false;  // torchtitan's torch.compile of each transformer block (framework.compile)
  bool compile_loss = false;    // and of the loss function (training.loss compiled)
  // parallelism
  int nodes = 1;
  int gpus_per_node = 1;
  int tensor = 1, pipeline = 1, context = 1, expert = 1, virtual_stages = 1;
  bool sequence_parallel = false;
  bool tp_comm_overlap = false;  // Megatron's --tp-comm-overlap (Transformer Engine's Userbuffers)
  // A Llama-shaped model's layers as Megatron-LM builds them (model.implementation: megatron),
  // zoo::MegatronOptions' defaults being Megatron's.
  std::optional<zoo::MegatronOptions> megatron;
  std::string context_comm;  // parallelism.context_parallel_comm under context > 1: ring | all_gather
  std::string moe_token_dispatcher;  // parallelism.moe_token_dispatcher of an MoE job under model parallelism; empty: not written
  std::string pipeline_schedule = "1f1b";
  std::optional<int> zero_stage;      // Megatron's distributed optimizer: 1
  // Under zero: --overlap-grad-reduce's overlap_comm and bucket size (elements), and
  // --overlap-param-gather.
  bool zero_overlap_comm = false;
  std::optional<long long> zero_bucket_elements;
  bool zero_overlap_param_gather = false;
  bool grad_reduce_in_fp32 = false;   // Megatron's fp32 gradient buffer (bf16 runs, --accumulate-allreduce-grads-in-fp32)
  std::optional<std::string> fsdp;    // torchtitan: FSDP2's reshard_after_forward
  std::optional<int> fsdp_replicate;  // HSDP's replicate degree
  std::string fsdp_reduce_dtype = "fp32";  // FSDP's gradient reduction dtype
  std::string recompute = "none";     // none | full | selective
  // Megatron-LM's own settings, written as the strategy's `recompute:` mapping (strategy.hpp,
  // LayerRecompute) rather than as rules; recompute_method and recompute_num_layers with full only.
  bool megatron_recompute = false;
  std::string recompute_method;
  long long recompute_num_layers = 0;
  std::vector<std::string> notes;
};

// ---- the scenario, written once

YAML::Node scalar_node(const std::string& text) { return YAML::Node(text); }

std::string write_scenario(const JobDescription& job, const std::string& source, const std::string& platform) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << job.name;
  out << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
  if (job.zoo_model) {
    out << YAML::Key << "zoo" << YAML::Value << *job.zoo_model;
    for (const auto& [key, value] : job.zoo_shape) out << YAML::Key << key << YAML::Value << value;
    if (job.zoo_untied) out << YAML::Key << "tie_embeddings" << YAML::Value << false;
  } else {
    out << YAML::Key << "hf_config" << YAML::Value << YAML::BeginMap;
    for (const auto& [key, value] : job.hf_config) out << YAML::Key << key << YAML::Value << value;
    out << YAML::EndMap;
  }
  out << YAML::Key << "seq_len" << YAML::Value << job.seq_len;
  out << YAML::Key << "attention" << YAML::Value << job.attention;
  if (job.torchtitan) out << YAML::Key << "implementation" << YAML::Value << "torchtitan";
  if (const auto& m = job.megatron) {
    out << YAML::Key << "implementation" << YAML::Value << "megatron";
    // The probabilities as their shortest decimal ("0.1", not yaml-cpp's 17 digits).
    out << YAML::Key << "megatron" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "hidden_dropout" << YAML::Value
        << fmt::format("{}", m->hidden_dropout) << YAML::Key << "attention_dropout" << YAML::Value << fmt::format("{}", m->attention_dropout)
        << YAML::Key << "rope_fusion" << YAML::Value << m->rope_fusion
        << YAML::Key << "bias_activation_fusion" << YAML::Value << m->bias_activation_fusion;
    if (m->moe_grouped_gemm) out << YAML::Key << "moe_grouped_gemm" << YAML::Value << true;
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  out << YAML::Key << "training" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "batch_size" << YAML::Value << job.micro_batch;
  out << YAML::Key << "precision" << YAML::Value << job.precision;
  out << YAML::Key << "optimizer" << YAML::Value << job.optimizer;
  out << YAML::Key << "optimizer_impl" << YAML::Value << job.optimizer_impl;
  if (job.accumulation_steps > 1) out << YAML::Key << "gradient_accumulation_steps" << YAML::Value << job.accumulation_steps;
  if (job.float8_delayed) {
    out << YAML::Key << "float8" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "recipe" << YAML::Value << "delayed" << YAML::Key
        << "skip" << YAML::Value << YAML::Flow << std::vector<std::string>{"lm_head"};
    if (job.fp8_weights) out << YAML::Key << "fp8_weights" << YAML::Value << true;
    out << YAML::EndMap;
  }
  if (const auto& f8 = job.float8_tensorwise) {
    out << YAML::Key << "float8" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "skip" << YAML::Value << YAML::Flow << f8->skip;
    if (f8->fsdp_all_gather) out << YAML::Key << "fsdp_all_gather" << YAML::Value << true;
    out << YAML::EndMap;
  }
  if (job.compile_loss) {
    out << YAML::Key << "loss" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "kind" << YAML::Value << "cross_entropy" << YAML::Key
        << "compiled" << YAML::Value << true << YAML::EndMap;
  }
  out << YAML::EndMap;
  if (job.compile_blocks) {
    out << YAML::Key << "framework" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "compile" << YAML::Value << YAML::Flow
        << YAML::BeginMap << YAML::Key << "modules" << YAML::Value << YAML::Flow << std::vector<std::string>{"model.layers.*"} << YAML::EndMap
        << YAML::EndMap;
  }
  out << YAML::Key << "platform" << YAML::Value << platform;
  if (job.recompute == "none") {
    out << YAML::Key << "strategy" << YAML::Value << "baseline";
  } else if (job.megatron_recompute) {
    // Megatron-LM's flags as they are: each pipeline stage's rules follow from its own layers.
    out << YAML::Key << "strategy" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "name" << YAML::Value << "megatron-" + job.recompute;
    out << YAML::Key << "recompute" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "granularity" << YAML::Value << job.recompute;
    if (job.recompute == "full") {
      out << YAML::Key << "method" << YAML::Value << job.recompute_method << YAML::Key << "num_layers" << YAML::Value << job.recompute_num_layers;
    }
    out << YAML::EndMap << YAML::EndMap;
  } else {
    // A torchtitan job (which imports only full recomputation, one checkpoint per layer): the rule
    // models/strategies/README.md gives for a Hugging Face decoder, each layer's input kept.
    out << YAML::Key << "strategy" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "name" << YAML::Value << "full-recompute";
    out << YAML::Key << "rules" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
    out << YAML::Key << "select" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "modules" << YAML::Value << YAML::Flow
        << std::vector<std::string>{"model.layers"} << YAML::EndMap;
    out << YAML::Key << "recompute" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "mode" << YAML::Value << "checkpoints"
        << YAML::Key << "keep" << YAML::Value << YAML::Flow << std::vector<std::string>{"model.embed_tokens.out", "model.layers.*.add_1.out"}
        << YAML::EndMap;
    out << YAML::EndMap << YAML::EndSeq << YAML::EndMap;
  }
  out << YAML::Key << "parallelism" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "nodes" << YAML::Value << job.nodes;
  out << YAML::Key << "gpus_per_node" << YAML::Value << job.gpus_per_node;
  for (const auto& [key, value] : {std::pair<const char*, int>{"tensor", job.tensor}, {"pipeline", job.pipeline}, {"context", job.context},
                                   {"expert", job.expert}, {"virtual_stages", job.virtual_stages}}) {
    if (value > 1) out << YAML::Key << key << YAML::Value << value;
  }
  if (job.context > 1 && !job.context_comm.empty()) out << YAML::Key << "context_parallel_comm" << YAML::Value << job.context_comm;
  if (!job.moe_token_dispatcher.empty()) out << YAML::Key << "moe_token_dispatcher" << YAML::Value << job.moe_token_dispatcher;
  if (job.sequence_parallel) out << YAML::Key << "sequence_parallel" << YAML::Value << true;
  if (job.tp_comm_overlap) out << YAML::Key << "tp_comm_overlap" << YAML::Value << true;
  if (job.pipeline > 1) out << YAML::Key << "pipeline_schedule" << YAML::Value << job.pipeline_schedule;
  if (job.grad_reduce_in_fp32) out << YAML::Key << "grad_reduce_in_fp32" << YAML::Value << true;
  if (job.zero_stage) {
    out << YAML::Key << "zero" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "stage" << YAML::Value << *job.zero_stage;
    if (job.zero_overlap_comm) out << YAML::Key << "overlap_comm" << YAML::Value << true;
    if (job.zero_bucket_elements) out << YAML::Key << "reduce_bucket_size" << YAML::Value << *job.zero_bucket_elements;
    if (job.zero_overlap_param_gather) out << YAML::Key << "overlap_param_gather" << YAML::Value << true;
    out << YAML::EndMap;
  }
  if (job.fsdp) {
    out << YAML::Key << "fsdp" << YAML::Value << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "units" << YAML::Value << YAML::Flow << std::vector<std::string>{"model.layers.*"};
    out << YAML::Key << "reshard_after_forward" << YAML::Value << *job.fsdp;
    out << YAML::Key << "sharded_dtype" << YAML::Value << "fp32" << YAML::Key << "reduce_dtype" << YAML::Value << job.fsdp_reduce_dtype;
    if (job.fsdp_replicate && *job.fsdp_replicate > 1) out << YAML::Key << "replicate" << YAML::Value << *job.fsdp_replicate;
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  out << YAML::EndMap;
  std::string text = fmt::format("# Imported from {} by `comptrain import` ({}).\n", source, job.importer);
  for (const std::string& note : job.notes) text += "# note: " + note + "\n";
  return text + out.c_str() + "\n";
}

// The GPUs: the options over the job's own statement over one node of the platform's.
void place_job(JobDescription& job, const JobImportOptions& options, std::optional<int> job_nodes, std::optional<int> job_gpus_per_node) {
  job.nodes = options.nodes.value_or(job_nodes.value_or(1));
  if (options.gpus_per_node) {
    job.gpus_per_node = *options.gpus_per_node;
  } else if (job_gpus_per_node) {
    job.gpus_per_node = *job_gpus_per_node;
  } else {
    job.gpus_per_node = 8;
    job.notes.push_back("the job does not say its GPUs per node (torchrun's --nproc-per-node); 8 assumed, give --gpus-per-node otherwise");
  }
}

// ---- Megatron-LM arguments

struct Argument {
  std::string value;  // empty for a flag; as written, nothing expanded
  int line = 0;
  std::size_t word = 0;  // the script word the value is read in (launch_script.hpp)
  bool flag = false;
  std::size_t values = 1;  // words of value from `word` on (argparse's nargs='+' flags take several)
};

class MegatronArguments {
 public:
  MegatronArguments(std::string_view text, std::string source) : source_(std::move(source)), script_(text) {
    const auto& words = script_.words();
    for (std::size_t i = 0; i < words.size(); ++i) {
      const detail::ScriptWord& word = words[i];
      // The program, a script name, torchrun's positional, the shell's own words: not arguments.
      if (word.syntax || word.text.rfind("--", 0) != 0) continue;
      std::string key = word.text.substr(2);
      Argument argument{"", word.line, i, true};
      if (const auto eq = key.find('='); eq != std::string::npos) {
        argument = {key.substr(eq + 1), word.line, i, false};
        key = key.substr(0, eq);
      } else if (i + 1 < words.size() && !words[i + 1].syntax && words[i + 1].text.rfind("--", 0) != 0) {
        argument = {words[i + 1].text, word.line, i + 1, false};
        ++i;
        // The words after the value up to the next flag or the shell's syntax: further values of
        // a list flag (--recompute-modules core_attn mlp), or the program's positionals.
        while (i + 1 < words.size() && !words[i + 1].syntax && words[i + 1].text.rfind("--", 0) != 0 && words[i + 1].line == word.line) {
          ++argument.values;
          ++i;
        }
      }
      std::replace(key.begin(), key.end(), '_', '-');  // torchrun takes --nproc_per_node too
      arguments_[key] = argument;
    }
  }

  bool flag(const std::string& key) {
    const auto it = find(key);
    if (it == arguments_.end()) return false;
    if (!it->second.flag) fail(it, "is a flag; expected no value");
    return true;
  }
  std::optional<long long> integer(const std::string& key, long long low = 1, long long high = 1LL << 40) {
    const auto it = find(key);
    if (it == arguments_.end()) return std::nullopt;
    const std::string expected = fmt::format("expected an integer from {} to {}", low, high);
    const std::string text = expanded(it, expected);
    std::size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (it->second.flag || used != text.size() || value < low || value > high) {
      fail(it, fmt::format("is '{}'; {}", shown(it, text), expected));
    }
    return value;
  }
  // A probability in [0, 1), as Megatron's dropout arguments take.
  std::optional<double> probability(const std::string& key) {
    const auto it = find(key);
    if (it == arguments_.end()) return std::nullopt;
    const std::string text = expanded(it, "expected a probability in [0, 1)");
    std::size_t used = 0;
    double value = -1;
    try {
      value = std::stod(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (it->second.flag || used != text.size() || !(value >= 0 && value < 1)) fail(it, fmt::format("is '{}'; expected a probability in [0, 1)", shown(it, text)));
    return value;
  }
  // A list flag's values (argparse nargs='+'), each expanded.
  std::optional<std::vector<std::string>> list(const std::string& key) {
    const auto it = find(key);
    if (it == arguments_.end()) return std::nullopt;
    if (it->second.flag) fail(it, "needs a value");
    std::vector<std::string> values;
    const auto& words = script_.words();
    for (std::size_t k = 0; k < it->second.values; ++k) {
      // The first value as read (`--key=value` keeps it in the flag's word), the others as written.
      const std::size_t w = it->second.word + k;
      const std::string& raw = k == 0 ? it->second.value : words[w].text;
      const detail::ExpandedText e = script_.expand(raw, w);
      if (!e.unexpanded.empty()) fail(it, fmt::format("is '{}' ({}); expected values the script sets", raw, e.unexpanded));
      values.push_back(e.text);
    }
    return values;
  }
  std::optional<std::string> text(const std::string& key) {
    const auto it = find(key);
    if (it == arguments_.end()) return std::nullopt;
    if (it->second.flag) fail(it, "needs a value");
    return expanded(it, "expected a value the script sets");
  }
  [[noreturn]] void fail_on(const std::string& key, const std::string& message) {
    const auto it = arguments_.find(key);
    if (it == arguments_.end()) throw InputError(fmt::format("{}: --{}: {}", source_, key, message));
    fail(it, message);
  }
  void mark_read(const std::string& key) { read_.insert(key); }
  void mark_unread(const std::string& key) { read_.erase(key); }
  // What expanding the script's variables took on trust (launch_script.hpp), once each.
  const std::vector<std::string>& assumptions() const { return assumptions_; }
  // The arguments no reader asked for.
  std::vector<std::string> unread() const {
    std::vector<std::string> keys;
    for (const auto& [key, argument] : arguments_) {
      if (read_.count(key) == 0) keys.push_back("--" + key);
    }
    return keys;
  }

 private:
  using Map = std::map<std::string, Argument>;
  Map::const_iterator find(const std::string& key) {
    read_.insert(key);
    return arguments_.find(key);
  }
  [[noreturn]] void fail(Map::const_iterator it, const std::string& message) const {
    throw InputError(fmt::format("{}:{}: --{} {}", source_, it->second.line, it->first, message));
  }
  // The argument's value with the script's variables expanded; one they leave unexpanded is an
  // error naming the variable ("--num-layers is '$NUM_LAYERS' (NUM_LAYERS is not set in the
  // script before it); expected ...").
  std::string expanded(Map::const_iterator it, const std::string& expected) {
    const detail::ExpandedText e = script_.expand(it->second.value, it->second.word);
    if (!e.unexpanded.empty()) fail(it, fmt::format("is '{}' ({}); {}", it->second.value, e.unexpanded, expected));
    for (const std::string& a : e.assumptions) {
      if (std::find(assumptions_.begin(), assumptions_.end(), a) == assumptions_.end()) assumptions_.push_back(a);
    }
    return e.text;
  }
  // A value as the message shows it: as written, and what it expanded to where that differs.
  static std::string shown(Map::const_iterator it, const std::string& text) {
    return it->second.value == text ? text : fmt::format("{}', which is '{}", it->second.value, text);
  }

  std::string source_;
  detail::LaunchScript script_;
  Map arguments_;
  std::set<std::string> read_;
  std::vector<std::string> assumptions_;
};

}  // namespace

ImportedScenario import_megatron_arguments(std::string_view text, const std::string& source, const JobImportOptions& options) {
  MegatronArguments args(text, source);
  JobDescription job;
  job.importer = "Megatron-LM arguments";
  const auto required = [&](const char* key) {
    const auto value = args.integer(key);
    if (!value) throw InputError(fmt::format("{}: --{} is missing; Megatron-LM requires it (megatron/training/arguments.py)", source, key));
    return *value;
  };
  const long long layers = required("num-layers");
  const long long hidden = required("hidden-size");
  const long long heads = required("num-attention-heads");
  job.seq_len = required("seq-length");
  const long long max_positions = args.integer("max-position-embeddings").value_or(job.seq_len);
  const bool swiglu = args.flag("swiglu");
  // arguments.py@d98e8a6 lines 1320-1329: 4h, or with SwiGLU int(4h x 2/3 / 64) x 64.
  const long long ffn = args.integer("ffn-hidden-size").value_or(swiglu ? (4 * hidden * 2 / 3) / 64 * 64 : 4 * hidden);
  const bool gqa = args.flag("group-query-attention");
  const long long kv_heads = gqa ? args.integer("num-query-groups").value_or(1) : heads;
  if (!gqa && args.integer("num-query-groups")) {
    args.fail_on("num-query-groups", "is given without --group-query-attention, which Megatron-LM then ignores; expected both or neither");
  }
  const std::string normalization = args.text("normalization").value_or("LayerNorm");
  if (normalization != "LayerNorm" && normalization != "RMSNorm") args.fail_on("normalization", "is '" + normalization + "'; expected LayerNorm or RMSNorm");
  const std::string positions = args.text("position-embedding-type").value_or("learned_absolute");
  if (positions != "learned_absolute" && positions != "rope") args.fail_on("position-embedding-type", "is '" + positions + "'; expected learned_absolute or rope");
  const bool untied = args.flag("untie-embeddings-and-output-weights");
  const bool no_bias = args.flag("disable-bias-linear");
  const auto experts = args.integer("num-experts");
  const auto kv_channels = args.integer("kv-channels");
  long long vocab = 0;
  if (const auto v = args.integer("vocab-size")) {
    vocab = *v;
  } else if (options.vocab) {
    vocab = *options.vocab;
  } else {
    throw InputError(fmt::format("{}: the vocabulary is the tokenizer's, which the arguments do not give (--vocab-size); expected --vocab-size in the "
                                 "arguments or `comptrain import --vocab N`",
                                 source));
  }
  // Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by x TP
  // (megatron/training/tokenizer/tokenizer.py, _vocab_size_with_padding; default 128).
  const long long divisible_by = args.integer("make-vocab-size-divisible-by").value_or(128);
  const int tensor = static_cast<int>(args.integer("tensor-model-parallel-size", 1, 1'000'000).value_or(1));
  const long long multiple = divisible_by * tensor;
  const long long padded_vocab = (vocab + multiple - 1) / multiple * multiple;
  if (padded_vocab != vocab) job.notes.push_back(fmt::format("vocabulary {} padded to {} (a multiple of {} x TP {}), as Megatron-LM pads it", vocab, padded_vocab, divisible_by, tensor));

  const bool llama_like = normalization == "RMSNorm" && swiglu && positions == "rope";
  const bool gpt_like = normalization == "LayerNorm" && !swiglu && positions == "learned_absolute";
  if (llama_like) {
    const std::string type = experts ? "mixtral" : "llama";
    auto& c = job.hf_config;
    c.emplace_back("model_type", scalar_node(type));
    c.emplace_back("hidden_size", YAML::Node(hidden));
    // Mixtral's intermediate_size is each expert's width (Megatron: --moe-ffn-hidden-size, default the FFN's).
    c.emplace_back("intermediate_size", YAML::Node(experts ? args.integer("moe-ffn-hidden-size").value_or(ffn) : ffn));
    c.emplace_back("num_hidden_layers", YAML::Node(layers));
    c.emplace_back("num_attention_heads", YAML::Node(heads));
    c.emplace_back("num_key_value_heads", YAML::Node(kv_heads));
    if (kv_channels && *kv_channels != hidden / heads) c.emplace_back("head_dim", YAML::Node(*kv_channels));
    c.emplace_back("vocab_size", YAML::Node(padded_vocab));
    c.emplace_back("max_position_embeddings", YAML::Node(std::max(max_positions, job.seq_len)));
    c.emplace_back("tie_word_embeddings", YAML::Node(!untied));
    c.emplace_back("hidden_act", scalar_node("silu"));
    if (type == "llama") {
      c.emplace_back("attention_bias", YAML::Node(!no_bias));
      c.emplace_back("mlp_bias", YAML::Node(!no_bias));
    } else {
      c.emplace_back("num_local_experts", YAML::Node(*experts));
      c.emplace_back("num_experts_per_tok", YAML::Node(args.integer("moe-router-topk").value_or(2)));
      if (!no_bias) job.notes.push_back("Megatron-LM's linear biases (no --disable-bias-linear) are not in Mixtral's modules: left out");
    }
    // Megatron's GPT layers (megatron-core's layer specs): Transformer Engine's fused norms and
    // Megatron's fused rotary, SwiGLU and bias-dropout-add kernels, with its dropout defaults
    // (megatron/training/arguments.py: --hidden-dropout and --attention-dropout 0.1,
    // --no-rope-fusion, --no-bias-swiglu-fusion).
    zoo::MegatronOptions& m = job.megatron.emplace();
    m.hidden_dropout = args.probability("hidden-dropout").value_or(m.hidden_dropout);
    m.attention_dropout = args.probability("attention-dropout").value_or(m.attention_dropout);
    m.rope_fusion = !args.flag("no-rope-fusion");
    m.bias_activation_fusion = !args.flag("no-bias-swiglu-fusion");
    // --moe-grouped-gemm: the experts as GroupedMLP (megatron/core/transformer/moe/experts.py).
    m.moe_grouped_gemm = experts && args.flag("moe-grouped-gemm");
  } else if (gpt_like && !experts && kv_heads == heads && ffn == 4 * hidden) {
    job.zoo_model = "gpt";
    job.zoo_shape = {{"layers", layers}, {"hidden", hidden}, {"heads", heads}, {"vocab", padded_vocab}};
    // --untie-embeddings-and-output-weights: the output layer's own weight (gpt_model.py,
    // share_embeddings_and_output_weights = not untie_embeddings_and_output_weights).
    job.zoo_untied = untied;
    job.attention = args.flag("use-flash-attn") ? "flash" : "fused-softmax";
  } else {
    throw InputError(fmt::format("{}: the model (--normalization {}, --swiglu {}, --position-embedding-type {}{}) is neither a Llama-shaped decoder (RMSNorm, "
                                 "SwiGLU, rope) nor Megatron's GPT (LayerNorm, GeLU, learned positions, FFN 4h); expected one of them",
                                 source, normalization, swiglu ? "on" : "off", positions, experts ? ", --num-experts" : ""));
  }
  job.name = fmt::format("megatron-{}L-h{}", layers, hidden);

  // Training: the micro-batch per GPU, the global batch over micro-batches x data-parallel ranks.
  job.micro_batch = args.integer("micro-batch-size").value_or(1);
  job.pipeline = static_cast<int>(args.integer("pipeline-model-parallel-size", 1, 1'000'000).value_or(1));
  job.context = static_cast<int>(args.integer("context-parallel-size", 1, 1'000'000).value_or(1));
  // --cp-comm-type (megatron/training/arguments.py:3221-3226 at NVIDIA/Megatron-LM@d98e8a6): p2p,
  // the default, is Transformer Engine's ring; allgather the all-gather. a2a and a2a+p2p (Ulysses)
  // are not modelled.
  const std::string cp_comm = args.text("cp-comm-type").value_or("p2p");
  if (cp_comm != "p2p" && cp_comm != "allgather") {
    args.fail_on("cp-comm-type", "is '" + cp_comm + "'; expected p2p (the ring) or allgather; a2a and a2a+p2p (Ulysses) are not modelled");
  }
  job.context_comm = cp_comm == "p2p" ? "ring" : "all_gather";
  job.expert = static_cast<int>(args.integer("expert-model-parallel-size", 1, 1'000'000).value_or(1));
  job.tensor = tensor;
  // --moe-token-dispatcher-type, allgather by default (megatron/training/arguments.py:1592-1594
  // at NVIDIA/Megatron-LM@ba773259; megatron/core/transformer/transformer_config.py:891 at d98e8a64). The scenario's key matters where the zoo builds
  // Megatron's MoE layer: a mixture of experts under tensor, pipeline, context or expert
  // parallelism.
  const std::string dispatcher = args.text("moe-token-dispatcher-type").value_or("allgather");
  if (dispatcher != "allgather" && dispatcher != "alltoall") {
    args.fail_on("moe-token-dispatcher-type", "is '" + dispatcher + "'; expected allgather (the default) or alltoall; flex (DeepEP) and alltoall_seq are not modelled");
  }
  // --moe-router-load-balancing-type, aux_loss by default (megatron/core/transformer/
  // transformer_config.py at NVIDIA/Megatron-LM@core_v0.6.0): the router the zoo's Megatron MoE
  // layer builds, its loss's kernels whatever --moe-aux-loss-coeff is (the loss is computed and
  // scaled by it). sinkhorn iterates until its error is small, reading it back each time.
  if (experts) {
    const std::string balancing = args.text("moe-router-load-balancing-type").value_or("aux_loss");
    if (balancing != "aux_loss") {
      args.fail_on("moe-router-load-balancing-type", "is '" + balancing + "'; expected aux_loss (the default): the routers of sinkhorn and none are not modelled");
    }
    args.mark_read("moe-aux-loss-coeff");
  }
  if (experts && (tensor > 1 || job.pipeline > 1 || job.context > 1 || job.expert > 1)) {
    job.moe_token_dispatcher = dispatcher;
    if (dispatcher == "allgather" && tensor > 1 && job.expert > 1) {
      job.moe_token_dispatcher = "alltoall";
      job.notes.push_back("the allgather token dispatcher gathers over the tensor-and-expert group, which is not modelled under tensor " +
                          std::to_string(tensor) + " and expert " + std::to_string(job.expert) +
                          " parallelism; the scenario has the alltoall dispatcher (the same experts' work, other collectives)");
    }
  }
  // Megatron-LM turns --sequence-parallel off under a tensor-parallel size of 1 ("Disabling
  // sequence parallelism because tensor model parallelism is disabled": megatron/training/
  // arguments.py, validate_args), and a scenario refuses sequence_parallel without tensor > 1.
  job.sequence_parallel = args.flag("sequence-parallel") && tensor > 1;
  if (args.flag("sequence-parallel") && tensor == 1) {
    job.notes.push_back("--sequence-parallel is off under a tensor-parallel size of 1, as Megatron-LM turns it off");
  }
  if (const auto per_stage = args.integer("num-layers-per-virtual-pipeline-stage")) {
    if (layers % (*per_stage * job.pipeline) != 0) {
      args.fail_on("num-layers-per-virtual-pipeline-stage", fmt::format("is {}; expected a divisor of the {} layers / {} stages", *per_stage, layers, job.pipeline));
    }
    job.virtual_stages = static_cast<int>(layers / (*per_stage * job.pipeline));
  } else if (const auto v = args.integer("virtual-pipeline-model-parallel-size")) {
    job.virtual_stages = static_cast<int>(*v);
  }
  if (job.virtual_stages > 1) job.pipeline_schedule = "interleaved";
  const auto torchrun_nodes = args.integer("nnodes", 1, 1'000'000);
  const auto torchrun_gpus = args.integer("nproc-per-node", 1, 1024);
  place_job(job, options, torchrun_nodes ? std::optional<int>(static_cast<int>(*torchrun_nodes)) : std::nullopt,
            torchrun_gpus ? std::optional<int>(static_cast<int>(*torchrun_gpus)) : std::nullopt);
  const long long gpus = static_cast<long long>(job.nodes) * job.gpus_per_node;
  const long long model_parallel = static_cast<long long>(job.tensor) * job.pipeline * job.context;
  if (gpus % model_parallel != 0) {
    throw InputError(fmt::format("{}: {} GPUs ({} node(s) x {}) are not a multiple of TP {} x PP {} x CP {}; expected a GPU count the layout divides", source,
                                 gpus, job.nodes, job.gpus_per_node, job.tensor, job.pipeline, job.context));
  }
  const long long data_parallel = gpus / model_parallel;
  // The experts' grid folds data and context parallelism (parallel_state.py's expert layout,
  // with the expert tensor-parallel size TP's, its default): EP divides DP x CP, or Megatron-LM
  // refuses the layout, as the scenario reader would. Another expert TP size is not modelled
  // (the flag is among the notes' unread ones) and not checked here.
  const bool expert_tp_is_tp = args.integer("expert-tensor-parallel-size", 1, 1'000'000).value_or(job.tensor) == job.tensor;
  if (!expert_tp_is_tp) args.mark_unread("expert-tensor-parallel-size");
  if (job.expert > 1 && expert_tp_is_tp && (data_parallel * job.context) % job.expert != 0) {
    args.fail_on("expert-model-parallel-size",
                 fmt::format("is {}; the {} GPUs ({} node(s) x {}) leave {} data x {} context ranks, which it does not divide; expected an expert "
                             "degree that divides data x context (give --nodes for the job's size)",
                             job.expert, gpus, job.nodes, job.gpus_per_node, data_parallel, job.context));
  }
  if (const auto global = args.integer("global-batch-size")) {
    const long long per_step = job.micro_batch * data_parallel;
    if (*global % per_step != 0) {
      args.fail_on("global-batch-size", fmt::format("is {}; expected a multiple of micro-batch {} x data-parallel {} = {} (Megatron-LM's own check)", *global,
                                                    job.micro_batch, data_parallel, per_step));
    }
    job.accumulation_steps = *global / per_step;
  }
  // Precision: Megatron keeps 16-bit parameters and an fp32 main copy in the optimizer.
  const bool bf16 = args.flag("bf16");
  const bool fp16 = args.flag("fp16");
  if (bf16 && fp16) args.fail_on("fp16", "is given with --bf16; expected one of them");
  if (!bf16 && !fp16) {
    job.precision = "fp32";
  }
  // Megatron accumulates and reduces bf16 runs' gradients in fp32 unless --grad-reduce-in-bf16
  // (NVIDIA/Megatron-LM@d98e8a64 megatron/training/arguments.py:1204-1217; training.py:2635 passes
  // it on as the DDP config's grad_reduce_in_fp32); other precisions only with the flag.
  const bool fp32_reduce_flag = args.flag("accumulate-allreduce-grads-in-fp32");
  const bool bf16_reduce_flag = args.flag("grad-reduce-in-bf16");
  job.grad_reduce_in_fp32 = bf16 ? !bf16_reduce_flag : fp32_reduce_flag;
  if (job.grad_reduce_in_fp32) {
    job.notes.push_back("gradients accumulated and reduced in fp32 (Megatron-LM's accumulate_allreduce_grads_in_fp32" +
                        std::string(bf16 && !fp32_reduce_flag ? ", on for --bf16" : "") + "): parallelism.grad_reduce_in_fp32");
  }
  // --fp8-format (megatron/training/arguments.py, _add_transformer_engine_args; core_v0.6.0
  // transformer_block.py wraps the layers in fp8_autocast with TE's DelayedScaling): Transformer
  // Engine's linears run their GEMMs in FP8; the output layer, a ColumnParallelLinear of Megatron's
  // own, stays 16-bit. E4M3 and hybrid (E5M2 gradients) run alike here. The amax history's length,
  // its algorithm, the margin and the interval change scales, not kernels.
  if (const auto format = args.text("fp8-format")) {
    if (*format != "hybrid" && *format != "e4m3") args.fail_on("fp8-format", "is '" + *format + "'; expected hybrid or e4m3 (Megatron-LM's choices)");
    if (!bf16 && !fp16) args.fail_on("fp8-format", "is given without --bf16 or --fp16; expected one of them (the layers around the FP8 GEMMs)");
    const std::string impl = args.text("transformer-impl").value_or("transformer_engine");
    if (impl != "transformer_engine") {
      args.fail_on("fp8-format", "is given with --transformer-impl " + impl + "; expected transformer_engine (FP8 runs through Transformer Engine)");
    }
    if (args.flag("no-fp8-wgrad")) args.fail_on("no-fp8-wgrad", "keeps the weight-gradient GEMMs in 16 bits, which is not modelled; expected FP8 wgrad (no flag)");
    for (const char* known : {"fp8-margin", "fp8-interval", "fp8-amax-history-len", "fp8-amax-compute-algo"}) args.mark_read(known);
    job.float8_delayed = true;
    job.notes.push_back("--fp8-format " + *format + ": Transformer Engine's delayed scaling on every linear but the output layer (training.float8, recipe delayed)");
    // --fp8-param-gather keeps the weights as FP8 tensors (Transformer Engine's fp8_model_init):
    // no FP8 workspace beside 16-bit weights, and the distributed optimizer all-gathers them at one
    // byte an element (DataParallelSpec::float8_parameter_gather). Megatron-FSDP's gathers of them
    // are not modelled in FP8.
    if (args.flag("fp8-param-gather")) {
      job.fp8_weights = true;
      job.notes.push_back(std::string("--fp8-param-gather: the weights are FP8 tensors, no FP8 workspace beside them (training.float8.fp8_weights)") +
                          (args.flag("use-megatron-fsdp") ? "; Megatron-FSDP's all-gathers of them are modelled at two bytes an element, not one"
                                                          : "; the distributed optimizer all-gathers them at one byte an element"));
    }
  } else if (args.flag("fp8-param-gather")) {
    args.fail_on("fp8-param-gather", "is given without --fp8-format; expected both (Megatron-LM's FP8 parameters need FP8 training)");
  }
  const std::string optimizer = args.text("optimizer").value_or("adam");
  if (optimizer == "sgd") {
    job.optimizer = "momentum";
  } else if (optimizer != "adam") {
    args.fail_on("optimizer", "is '" + optimizer + "'; expected adam (Megatron's AdamW, apex/TE FusedAdam) or sgd");
  }
  if (args.flag("use-distributed-optimizer")) job.zero_stage = 1;  // ZeRO-1 over the data-parallel group (dist_optimizer.md)
  // Megatron-FSDP (--use-megatron-fsdp; NVIDIA/Megatron-LM@d98e8a64
  // megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py): each transformer layer an
  // FSDP unit, its parameters all-gathered before its forward and backward use, its gradients
  // reduce-scattered, the optimizer stepping fp32 main-weight shards. Under optim_grads_params,
  // arguments.py's default --data-parallel-sharding-strategy, a unit's parameters are released
  // after its forward (_post_forward, release_module_parameters); under optim_grads they stay
  // until its backward. Written as FSDP2's model (parallelism.fsdp: per-unit gathers, fp32
  // shards); optim is the distributed optimizer's ZeRO-1, no_shard plain data parallelism.
  if (args.flag("use-megatron-fsdp")) {
    const std::string sharding = args.text("data-parallel-sharding-strategy").value_or("optim_grads_params");
    if ((sharding == "optim_grads_params" || sharding == "optim_grads") && data_parallel * job.context == 1) {
      job.zero_stage.reset();
      job.notes.push_back("--use-megatron-fsdp with one data-parallel rank shards nothing: plain training");
    } else if (sharding == "optim_grads_params" || sharding == "optim_grads") {
      job.fsdp = sharding == "optim_grads_params" ? "true" : "false";
      job.fsdp_reduce_dtype = job.grad_reduce_in_fp32 ? "fp32" : (fp16 ? "fp16" : "bf16");
      if (job.grad_reduce_in_fp32) {  // FSDP2's reduce_dtype says it, not Megatron's gradient buffer
        job.grad_reduce_in_fp32 = false;
        job.notes.erase(std::remove_if(job.notes.begin(), job.notes.end(),
                                       [](const std::string& n) { return n.rfind("gradients accumulated and reduced in fp32", 0) == 0; }),
                        job.notes.end());
      }
      job.zero_stage.reset();
      // Megatron-FSDP prefetches and overlaps its gathers and reductions itself.
      for (const char* known : {"use-distributed-optimizer", "overlap-grad-reduce", "overlap-param-gather"}) args.mark_read(known);
      job.notes.push_back(fmt::format("--use-megatron-fsdp, --data-parallel-sharding-strategy {}: every layer an FSDP unit (parallelism.fsdp, "
                                      "reshard_after_forward {}, gradients reduced in {}); Megatron-FSDP's bucketing and double buffers are FSDP2's "
                                      "model here",
                                      sharding, *job.fsdp, job.fsdp_reduce_dtype));
    } else if (sharding == "optim") {
      job.zero_stage = 1;
      job.notes.push_back("--use-megatron-fsdp, --data-parallel-sharding-strategy optim: the optimizer states sharded, as the distributed optimizer's");
    } else if (sharding == "no_shard") {
      job.zero_stage.reset();
      job.notes.push_back("--use-megatron-fsdp, --data-parallel-sharding-strategy no_shard: plain data parallelism");
    } else {
      args.fail_on("data-parallel-sharding-strategy", "is '" + sharding + "'; expected no_shard, optim, optim_grads or optim_grads_params (Megatron-LM's choices)");
    }
  } else if (args.text("data-parallel-sharding-strategy")) {
    args.mark_unread("data-parallel-sharding-strategy");  // Megatron-LM reads it only with Megatron-FSDP
  }
  // Recomputation.
  const bool recompute_activations = args.flag("recompute-activations");
  if (const auto granularity = args.text("recompute-granularity")) {
    if (*granularity != "full" && *granularity != "selective") args.fail_on("recompute-granularity", "is '" + *granularity + "'; expected full or selective");
    job.recompute = *granularity;
  } else if (recompute_activations) {
    job.recompute = "selective";  // arguments.py: --recompute-activations sets selective
  }
  // Megatron-LM's rules for the three flags (megatron/core/transformer/transformer_config.py,
  // __post_init__): full needs --recompute-method uniform|block and --recompute-num-layers from 1
  // to the layers of a pipeline stage (of a model chunk under the interleaved schedule);
  // selective refuses --recompute-num-layers and ignores --recompute-method. Without a
  // granularity neither is read (they stay in the "not imported" note).
  job.megatron_recompute = true;
  if (job.recompute == "full") {
    const auto method = args.text("recompute-method");
    if (!method) {
      args.fail_on("recompute-granularity", "is full without --recompute-method; expected --recompute-method uniform or block (Megatron-LM refuses full "
                                            "recomputation without one)");
    }
    if (*method != "uniform" && *method != "block") args.fail_on("recompute-method", "is '" + *method + "'; expected uniform or block");
    job.recompute_method = *method;
    const long long chunk_layers = std::max<long long>(1, layers / (static_cast<long long>(job.pipeline) * job.virtual_stages));
    const auto per_chunk = args.integer("recompute-num-layers", 1, chunk_layers);
    if (!per_chunk) {
      args.fail_on("recompute-granularity", fmt::format("is full without --recompute-num-layers; expected --recompute-num-layers from 1 to the {} layers "
                                                        "of a pipeline stage (Megatron-LM refuses full recomputation without it)",
                                                        chunk_layers));
    }
    job.recompute_num_layers = *per_chunk;
    if (job.virtual_stages > 1) {
      job.notes.push_back("--recompute-num-layers counts the layers of each model chunk of the interleaved schedule; comptrain applies it to each "
                          "model chunk's layers, as Megatron-LM does");
    }
  } else if (job.recompute == "selective") {
    if (args.integer("recompute-num-layers", 0)) args.fail_on("recompute-num-layers", "is given with selective recomputation; expected none (Megatron-LM refuses it)");
    // --recompute-modules (megatron/core/transformer/transformer_config.py, recompute_modules;
    // default [core_attn]): which submodules selective recomputation covers. Only the core
    // attention's is modelled (LayerRecompute's selective granularity).
    if (const auto modules = args.list("recompute-modules")) {
      if (*modules != std::vector<std::string>{"core_attn"}) {
        std::string list;
        for (const std::string& m : *modules) list += (list.empty() ? "" : " ") + m;
        args.fail_on("recompute-modules", "is '" + list + "'; only core_attn (Megatron-LM's default) is modelled: the selective recomputation of the "
                                          "core attention; expected core_attn, or no --recompute-modules");
      }
    }
    if (const auto method = args.text("recompute-method")) job.notes.push_back("--recompute-method " + *method + " is ignored with selective recomputation, as Megatron-LM ignores it");
  }
  // The overlaps Megatron-LM makes on request (shared/reference/parallelism.md §1 and §5), each
  // written as the scenario key that models it. Megatron's default backward overlap of the
  // tensor-parallel collectives is always modelled (traces/zoo/README.md).
  if (args.flag("tp-comm-overlap")) {
    // Megatron-LM asserts sequence parallelism for it (arguments.py, validate_args), which it has
    // turned off under a tensor-parallel size of 1 just before.
    if (!job.sequence_parallel || job.tensor == 1) {
      args.fail_on("tp-comm-overlap", job.tensor == 1 ? "is given with a tensor-parallel size of 1; expected --tensor-model-parallel-size > 1 and "
                                                        "--sequence-parallel (Megatron-LM refuses it without)"
                                                      : "is given without --sequence-parallel; expected both (Megatron-LM refuses it without)");
    }
    job.tp_comm_overlap = true;
  }
  // --overlap-grad-reduce with the distributed optimizer: each bucket's reduce-scatter as soon as
  // its gradients are final in the last micro-batch's backward pass (ZeRO-1 with overlap_comm),
  // in buckets of --ddp-bucket-size elements or else max(40M, 1M x the data-parallel-with-context
  // group's size) (NVIDIA/Megatron-LM@d98e8a64 megatron/training/training.py:2179-2195,
  // resolve_ddp_bucket_size; without the flag there is one bucket per buffer, reduced after the
  // backward pass).
  const bool overlap_grad_reduce = args.flag("overlap-grad-reduce") && !job.fsdp;
  if (overlap_grad_reduce && job.zero_stage) {
    job.zero_overlap_comm = true;
    const long long dp_cp = data_parallel * job.context;
    job.zero_bucket_elements = args.integer("ddp-bucket-size").value_or(std::max(40'000'000LL, 1'000'000LL * dp_cp));
    job.notes.push_back(fmt::format("--overlap-grad-reduce: the distributed optimizer's reduce-scatters run per bucket of {} elements as the last "
                                    "micro-batch's backward pass makes its gradients ready (zero.overlap_comm)",
                                    *job.zero_bucket_elements));
  } else if (overlap_grad_reduce) {
    job.notes.push_back("--overlap-grad-reduce is read: DDP's bucket all-reduces overlap the backward pass as PyTorch DDP's do");
  }
  // --overlap-param-gather: Megatron asserts the distributed optimizer and --overlap-grad-reduce
  // (megatron/training/arguments.py:1024-1029 at the same commit).
  if (args.flag("overlap-param-gather") && !job.fsdp) {
    if (!job.zero_stage) {
      args.fail_on("overlap-param-gather", "is given without --use-distributed-optimizer; expected both (Megatron-LM refuses it without the distributed "
                                           "optimizer)");
    }
    if (!overlap_grad_reduce) {
      args.fail_on("overlap-param-gather", "is given without --overlap-grad-reduce; expected both (Megatron-LM refuses it without that flag)");
    }
    job.zero_overlap_param_gather = true;
    job.notes.push_back("--overlap-param-gather: the updated parameters are all-gathered per bucket at the iteration's start, each waited for by "
                        "the first forward op that reads it (zero.overlap_param_gather)");
  }
  // Read, with no effect on the scenario beyond what is above: the attention kernel (flash is
  // the scenario's default), Megatron's model classes.
  for (const char* known : {"attention-backend", "use-flash-attn", "use-mcore-models", "moe-router-topk", "max-position-embeddings"}) args.mark_read(known);
  for (const std::string& a : args.assumptions()) job.notes.push_back("launch script: " + a);
  const std::vector<std::string> unread = args.unread();
  if (!unread.empty()) {
    std::string list;
    for (const std::string& key : unread) list += (list.empty() ? "" : " ") + key;
    job.notes.push_back("not imported (no effect on memory or time here, or not modelled): " + list);
  }
  ImportedScenario imported{write_scenario(job, source, options.platform), job.notes};
  return imported;
}

// ---- torchtitan TOML

namespace {

// torchtitan's Llama 3 flavours (pytorch/torchtitan@4a950eaa torchtitan/models/llama3/__init__.py,
// llama3_args), the FFN width as its FeedForward computes it (model/model.py: hidden = int(2 x 4d / 3),
// x ffn_dim_multiplier, rounded up to multiple_of) and TransformerModelArgs' vocab_size 128256
// (model/args.py line 33).
struct Llama3Flavor {
  const char* name;
  long long dim, layers, heads, kv_heads;
  double ffn_multiplier;
  long long multiple_of;
  long long vocab;
};
constexpr Llama3Flavor kLlama3Flavors[] = {
    {"debugmodel", 256, 6, 16, 16, 0, 256, 2048},
    {"8B", 4096, 32, 32, 8, 1.3, 1024, 128256},
    {"70B", 8192, 80, 64, 8, 1.3, 4096, 128256},
    {"405B", 16384, 126, 128, 8, 1.2, 4096, 128256},
};

long long llama3_ffn(const Llama3Flavor& f) {
  long long hidden = 2 * 4 * f.dim / 3;
  if (f.ffn_multiplier > 0) hidden = static_cast<long long>(f.ffn_multiplier * static_cast<double>(hidden));
  return (hidden + f.multiple_of - 1) / f.multiple_of * f.multiple_of;
}

class TomlJob {
 public:
  TomlJob(std::string_view text, std::string source) : source_(std::move(source)) {
    try {
      table_ = toml::parse(text, source_);
    } catch (const toml::parse_error& e) {
      throw InputError(fmt::format("{}:{}:{}: malformed TOML: {}", source_, e.source().begin.line, e.source().begin.column, e.description()));
    }
  }
  template <typename T>
  std::optional<T> get(const char* section, const char* key) {
    const toml::node* node = table_.at_path(std::string(section) + "." + key).node();
    if (node == nullptr) return std::nullopt;
    if (const auto value = node->value<T>()) return *value;
    fail(section, key, "has the wrong type");
  }
  // A list of strings (a TOML array, or one string, as torchtitan's command line takes one).
  std::optional<std::vector<std::string>> strings(const char* section, const char* key) {
    const toml::node* node = table_.at_path(std::string(section) + "." + key).node();
    if (node == nullptr) return std::nullopt;
    if (const auto text = node->value<std::string>()) return std::vector<std::string>{*text};
    const toml::array* array = node->as_array();
    if (array == nullptr) fail(section, key, "has the wrong type; expected a list of strings");
    std::vector<std::string> values;
    for (const toml::node& item : *array) {
      const auto text = item.value<std::string>();
      if (!text) fail(section, key, "has the wrong type; expected a list of strings");
      values.push_back(*text);
    }
    return values;
  }
  bool has(const char* section) const { return table_.at_path(section).node() != nullptr; }
  long long integer(const char* section, const char* key, long long fallback, long long low, long long high) {
    const long long value = get<long long>(section, key).value_or(fallback);
    if (value < low || value > high) fail(section, key, fmt::format("is {}; expected {} to {}", value, low, high));
    return value;
  }
  [[noreturn]] void fail(const char* section, const char* key, const std::string& message) const {
    const toml::node* node = table_.at_path(std::string(section) + "." + key).node();
    const int line = node != nullptr ? static_cast<int>(node->source().begin.line) : 0;
    throw InputError(fmt::format("{}:{}: [{}] {} {}", source_, line, section, key, message));
  }

 private:
  std::string source_;
  toml::table table_;
};

}  // namespace

namespace {

// torchtitan's module names of a Llama 3 (torchtitan/models/llama3/model/model.py) as the zoo's
// module patterns, for float8's filter_fqns (torchtitan's module_filter_fn skips a linear whose
// name contains an entry).
std::optional<std::string> zoo_module_of(const std::string& fqn) {
  static const std::map<std::string, std::string> modules = {
      {"output", "lm_head"},
      {"attention.wq", "model.layers.*.self_attn.q_proj"},
      {"attention.wk", "model.layers.*.self_attn.k_proj"},
      {"attention.wv", "model.layers.*.self_attn.v_proj"},
      {"attention.wo", "model.layers.*.self_attn.o_proj"},
      {"feed_forward.w1", "model.layers.*.mlp.gate_proj"},
      {"feed_forward.w2", "model.layers.*.mlp.down_proj"},
      {"feed_forward.w3", "model.layers.*.mlp.up_proj"},
  };
  const auto it = modules.find(fqn);
  if (it == modules.end()) return std::nullopt;
  return it->second;
}

// torch.compile: [compile] enable with its components (torchtitan@4a950eaa config/job_config.py,
// Compile: "model" compiles each transformer block, apply_compile; "loss" the loss function,
// components/loss.py), or [training] compile of earlier releases (both). torchao's float8: the
// converter "float8" (earlier) or "quantize.linear.float8" (4a950eaa: components/quantization/
// float8.py, register_model_converter) in [model] converters, configured by [float8] or
// [quantize.linear.float8]: the tensorwise recipe only, its filter_fqns as module patterns,
// enable_fsdp_float8_all_gather as fsdp_all_gather.
void import_torchtitan_compile_and_float8(TomlJob& toml, JobDescription& job) {
  const bool compile_section = toml.get<bool>("compile", "enable").value_or(false);
  const bool compile_training = toml.get<bool>("training", "compile").value_or(false);
  if (compile_section || compile_training) {
    const std::vector<std::string> components =
        compile_section ? toml.strings("compile", "components").value_or(std::vector<std::string>{"model", "loss"}) : std::vector<std::string>{"model", "loss"};
    for (const std::string& c : components) {
      if (c != "model" && c != "loss") toml.fail("compile", "components", "names '" + c + "'; expected model and loss");
    }
    job.compile_blocks = std::find(components.begin(), components.end(), "model") != components.end();
    job.compile_loss = std::find(components.begin(), components.end(), "loss") != components.end();
    if (job.compile_loss && job.tensor > 1) {
      job.compile_loss = false;
      job.notes.push_back("the compiled loss is not modelled under tensor parallelism (its vocabulary-parallel loss): the loss is timed eager");
    }
  }
  const std::vector<std::string> converters = toml.strings("model", "converters").value_or(std::vector<std::string>{});
  bool float8 = false;
  for (const std::string& c : converters) {
    if (c == "float8" || c == "quantize.linear.float8") {
      float8 = true;
    } else {
      toml.fail("model", "converters", "names '" + c + "'; expected float8 or quantize.linear.float8 (torchao's float8 linears; the MX and grouped-GEMM converters are not modelled)");
    }
  }
  if (!float8) return;
  const char* section = toml.has("quantize.linear.float8") ? "quantize.linear.float8" : "float8";
  if (const auto recipe = toml.get<std::string>(section, "recipe_name"); recipe && *recipe != "tensorwise") {
    toml.fail(section, "recipe_name", "is '" + *recipe + "'; expected tensorwise (the rowwise recipes are not modelled)");
  }
  if (!job.compile_blocks) {
    toml.fail("model", "converters", "names float8 without torch.compile of the model; expected [compile] enable with the model (comptrain times torchao's casts as "
                                     "torch.compile generates them)");
  }
  std::vector<std::string> skip;
  for (const std::string& fqn : toml.strings(section, "filter_fqns").value_or(std::vector<std::string>{})) {
    const std::optional<std::string> module = zoo_module_of(fqn);
    if (!module) {
      toml.fail(section, "filter_fqns", "names '" + fqn + "'; expected output, attention.wq, .wk, .wv, .wo or feed_forward.w1, .w2, .w3 (the modules comptrain maps)");
    }
    skip.push_back(*module);
  }
  bool gather = toml.get<bool>(section, "enable_fsdp_float8_all_gather").value_or(false);
  if (gather && !job.fsdp) {
    gather = false;
    job.notes.push_back(std::string(section) + ".enable_fsdp_float8_all_gather has no FSDP to act on (one data-parallel rank): not imported");
  }
  job.float8_tensorwise = JobDescription::TensorwiseFloat8{std::move(skip), gather};
  if (toml.get<bool>(section, "precompute_float8_dynamic_scale_for_fsdp").value_or(false)) {
    job.notes.push_back("precompute_float8_dynamic_scale_for_fsdp (one amax all-reduce per step) is not modelled");
  }
}

}  // namespace

ImportedScenario import_torchtitan_toml(std::string_view text, const std::string& source, const JobImportOptions& options) {
  TomlJob toml(text, source);
  JobDescription job;
  job.importer = "torchtitan job";
  job.torchtitan = true;
  const std::string model = toml.get<std::string>("model", "name").value_or("llama3");
  if (model != "llama3") toml.fail("model", "name", "is '" + model + "'; expected llama3 (the Llama 3 flavours are imported)");
  const std::string flavor = toml.get<std::string>("model", "flavor").value_or("debugmodel");
  const Llama3Flavor* f = nullptr;
  for (const Llama3Flavor& candidate : kLlama3Flavors) {
    if (flavor == candidate.name) f = &candidate;
  }
  if (f == nullptr) toml.fail("model", "flavor", "is '" + flavor + "'; expected debugmodel, 8B, 70B or 405B");
  job.seq_len = toml.integer("training", "seq_len", 2048, 1, 1LL << 24);
  const long long vocab = options.vocab.value_or(f->vocab);
  auto& c = job.hf_config;
  c.emplace_back("model_type", scalar_node("llama"));
  c.emplace_back("hidden_size", YAML::Node(f->dim));
  c.emplace_back("intermediate_size", YAML::Node(llama3_ffn(*f)));
  c.emplace_back("num_hidden_layers", YAML::Node(f->layers));
  c.emplace_back("num_attention_heads", YAML::Node(f->heads));
  c.emplace_back("num_key_value_heads", YAML::Node(f->kv_heads));
  c.emplace_back("vocab_size", YAML::Node(vocab));
  c.emplace_back("max_position_embeddings", YAML::Node(job.seq_len));
  c.emplace_back("tie_word_embeddings", YAML::Node(false));
  c.emplace_back("rope_theta", YAML::Node(500000.0));
  job.name = "torchtitan-llama3-" + flavor;
  // Training (job_config.py Training): local_batch_size per data-parallel rank, split into
  // pipeline micro-batches of pipeline_parallel_microbatch_size under PP.
  const long long local_batch = toml.integer("training", "local_batch_size", toml.integer("training", "batch_size", 8, 1, 1 << 20), 1, 1 << 20);
  job.tensor = static_cast<int>(toml.integer("parallelism", "tensor_parallel_degree", 1, 1, 1'000'000));
  job.pipeline = static_cast<int>(toml.integer("parallelism", "pipeline_parallel_degree", 1, 1, 1'000'000));
  job.context = static_cast<int>(toml.integer("parallelism", "context_parallel_degree", 1, 1, 1'000'000));
  // PyTorch's context_parallel rotates K,V by all-gather unless told otherwise (torch/distributed/
  // tensor/experimental/_attention.py; shared/reference/parallelism.md §3), torchtitan's
  // context_parallel_rotate_method "allgather"; "alltoall" passes the blocks around, imported as the ring.
  const std::string rotate = toml.get<std::string>("parallelism", "context_parallel_rotate_method").value_or("allgather");
  if (rotate != "allgather" && rotate != "alltoall") {
    toml.fail("parallelism", "context_parallel_rotate_method", "is '" + rotate + "'; expected allgather or alltoall");
  }
  job.context_comm = rotate == "allgather" ? "all_gather" : "ring";
  job.expert = static_cast<int>(toml.integer("parallelism", "expert_parallel_degree", 1, 1, 1'000'000));
  job.sequence_parallel = job.tensor > 1;  // torchtitan's TP plan shards the norms' sequence (parallelize.py)
  if (job.pipeline > 1) {
    const long long micro = toml.integer("parallelism", "pipeline_parallel_microbatch_size", 1, 1, 1 << 20);
    if (local_batch % micro != 0) toml.fail("parallelism", "pipeline_parallel_microbatch_size", fmt::format("is {}; expected a divisor of local_batch_size {}", micro, local_batch));
    job.micro_batch = micro;
    job.accumulation_steps = local_batch / micro;
    const std::string schedule = toml.get<std::string>("parallelism", "pipeline_parallel_schedule").value_or("1F1B");
    const std::map<std::string, std::pair<std::string, int>> schedules = {
        {"1F1B", {"1f1b", 1}}, {"GPipe", {"gpipe", 1}}, {"Interleaved1F1B", {"interleaved", 2}}, {"InterleavedZeroBubble", {"zero_bubble", 1}}};
    const auto it = schedules.find(schedule);
    if (it == schedules.end()) toml.fail("parallelism", "pipeline_parallel_schedule", "is '" + schedule + "'; expected 1F1B, GPipe, Interleaved1F1B or InterleavedZeroBubble");
    job.pipeline_schedule = it->second.first;
    job.virtual_stages = it->second.second;  // looped schedules: 2 stages per rank (pipeline_parallel.py)
    if (it->first == "InterleavedZeroBubble") job.notes.push_back("InterleavedZeroBubble imported as ZB-H1 on one stage per rank");
  } else {
    job.micro_batch = local_batch;
  }
  place_job(job, options, std::nullopt, std::nullopt);
  const long long gpus = static_cast<long long>(job.nodes) * job.gpus_per_node;
  const long long replicate = toml.integer("parallelism", "data_parallel_replicate_degree", 1, 1, 1'000'000);
  const long long model_parallel = static_cast<long long>(job.tensor) * job.pipeline * job.context;
  if (gpus % (model_parallel * replicate) != 0) {
    throw InputError(fmt::format("{}: {} GPUs are not a multiple of TP {} x PP {} x CP {} x data_parallel_replicate_degree {}; expected a GPU count the layout "
                                 "divides (give --nodes and --gpus-per-node)",
                                 source, gpus, job.tensor, job.pipeline, job.context, replicate));
  }
  const long long shard = toml.integer("parallelism", "data_parallel_shard_degree", -1, -1, 1'000'000);
  const long long data_parallel = gpus / model_parallel;
  if (shard != -1 && shard * replicate != data_parallel) {
    toml.fail("parallelism", "data_parallel_shard_degree", fmt::format("is {}; with replicate {} the {} GPUs leave {} data-parallel ranks; expected -1 or {}", shard,
                                                                       replicate, gpus, data_parallel, data_parallel / replicate));
  }
  if (const auto global = toml.get<long long>("training", "global_batch_size"); global && *global > 0) {
    if (*global % (local_batch * data_parallel) != 0) {
      toml.fail("training", "global_batch_size", fmt::format("is {}; expected a multiple of local_batch_size {} x data-parallel {}", *global, local_batch, data_parallel));
    }
    job.accumulation_steps *= *global / (local_batch * data_parallel);
  }
  if (data_parallel > 1) {
    // FSDP2 on the data-parallel ranks (torchtitan: reshard after forward except under PP, where
    // parallelism.md §2 notes it skips it).
    job.fsdp = job.pipeline > 1 ? "false" : "all_but_last";
    job.fsdp_replicate = static_cast<int>(replicate);
  }
  // Precision: FSDP2's MixedPrecisionPolicy(param_dtype bf16, reduce fp32) with fp32 sharded
  // parameters: 16-bit weights in compute, an fp32 master copy and fp32 Adam state.
  const std::string param_dtype = toml.get<std::string>("training", "mixed_precision_param").value_or("bfloat16");
  job.precision = param_dtype == "float32" ? "fp32" : "mixed";
  const std::string optimizer = toml.get<std::string>("optimizer", "name").value_or("AdamW");
  if (optimizer != "AdamW" && optimizer != "Adam") toml.fail("optimizer", "name", "is '" + optimizer + "'; expected AdamW or Adam");
  job.optimizer = optimizer == "AdamW" ? "adamw" : "adam";
  job.optimizer_impl = toml.get<std::string>("optimizer", "implementation").value_or("fused");
  if (job.optimizer_impl != "fused" && job.optimizer_impl != "foreach" && job.optimizer_impl != "for-loop") {
    toml.fail("optimizer", "implementation", "is '" + job.optimizer_impl + "'; expected fused, foreach or for-loop");
  }
  const std::string mode = toml.get<std::string>("activation_checkpoint", "mode").value_or("selective");
  if (mode == "full") {
    job.recompute = "full";
  } else if (mode == "selective") {
    const std::string option = toml.get<std::string>("activation_checkpoint", "selective_ac_option").value_or("2");
    job.recompute = "full";
    job.notes.push_back("activation_checkpoint selective (option " + option +
                        "): torchtitan checkpoints every N-th layer or per op; imported as full per-layer recomputation, an upper bound on its time");
  } else if (mode != "none") {
    toml.fail("activation_checkpoint", "mode", "is '" + mode + "'; expected full, selective or none");
  }
  import_torchtitan_compile_and_float8(toml, job);
  if (toml.get<bool>("training", "enable_cpu_offload").value_or(false)) job.notes.push_back("training.enable_cpu_offload is not imported (FSDP2's CPU offload: set parallelism.fsdp.enable_cpu_offload)");
  if (toml.get<bool>("parallelism", "enable_async_tensor_parallel").value_or(false)) job.notes.push_back("enable_async_tensor_parallel is not modelled");
  ImportedScenario imported{write_scenario(job, source, options.platform), job.notes};
  return imported;
}

}  // namespace comptrain::sim

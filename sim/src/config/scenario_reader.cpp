#include "config/scenario_reader.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "comptrain/models/module_pattern.hpp"
#include "comptrain/models/platform_yaml.hpp"
#include "comptrain/models/shipped_or_file.hpp"
#include "comptrain/models/strategy_yaml.hpp"
#include "comptrain/support/atomic_file.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace comptrain::sim {

ScenarioReader::ScenarioReader(std::string_view source, std::filesystem::path base_dir) : yaml::Reader(source), base_dir_(std::move(base_dir)) {}

YAML::Node ScenarioReader::load(std::string_view text) const {
  return yaml::load_document(text, source());
}

Scenario ScenarioReader::read(const YAML::Node& root) {
  if (!root.IsMap()) {
    throw InputError(where(root.Mark()) + "expected a mapping with the keys model, training (and optionally name)");
  }
  check_keys(root, "the scenario", {"name", "model", "training", "framework", "platform", "power_limit", "strategy", "parallelism", "plan", "sweep",
                                    "data", "checkpoint"});

  Scenario scenario;
  scenario.source = source();
  const YAML::Node model = required(root, "model", "the scenario");
  if (!model.IsMap()) throw InputError(where(model.Mark()) + "'model' must be a mapping with the key zoo, hf_config or trace");
  check_keys(model, "model", {"zoo", "hf_config", "trace", "layers", "hidden", "heads", "seq_len", "vocab", "tie_embeddings", "attention", "head", "mlm", "mlm_predictions", "moe", "lora", "packing", "implementation", "norm_type", "megatron", "sequence_bins"});
  const YAML::Node training = root["training"];
  if (training && !training.IsMap()) {
    throw InputError(where(training.Mark()) + "'training' must be a mapping with the keys batch_size, precision, optimizer, optimizer_impl, optimizer_in_backward, loss, tf32, float8, memory_format, gradient_accumulation_steps");
  }
  if (training) check_keys(training, "training", {"batch_size", "precision", "optimizer", "optimizer_impl", "optimizer_in_backward", "loss", "tf32", "float8", "memory_format", "gradient_accumulation_steps"});
  read_training_options(training, scenario);
  if (const YAML::Node platform = root["platform"]) {
    scenario.platform = read_platform(platform);
    platform_name_ = scenario.platform->name;  // for compress rules' `profile: auto`
  }
  // power_limit: the GPU's power cap (nvidia-smi -pl), on whatever platform the scenario runs
  // (models::with_power_limit lowers its clock; sim/README.md, "Energy").
  if (const YAML::Node limit = root["power_limit"]) {
    scenario.power_limit = bounded_quantity(limit, models::units::Dimension::power, "power_limit", models::platform_limits::max_power);
    if (scenario.platform) {
      scenario.platform = models::with_power_limit(std::move(*scenario.platform), *scenario.power_limit, where(limit.Mark()) + "'power_limit'");
    }
  }
  if (const YAML::Node framework = root["framework"]) scenario.framework = read_framework(framework);
  if (const YAML::Node strategy = root["strategy"]) scenario.strategy = read_strategy(strategy, "strategy");
  if (const YAML::Node parallelism = root["parallelism"]) {
    scenario.parallelism = read_parallelism(parallelism, scenario.platform);
    scenario.locations["parallelism"] = where(parallelism.Mark());
  }
  // After parallelism: plan.gpus fills nodes of the parallelism section's GPUs per node.
  if (const YAML::Node plan = root["plan"]) {
    scenario.plan = read_plan(plan, scenario.platform, scenario.parallelism);
    scenario.locations["plan"] = where(plan.Mark());
  }
  // A field's place, or its section's when it is left out.
  const auto locate = [&](const YAML::Node& section, const std::string& name, const char* key) {
    scenario.locations[name + "." + key] = where(section[key] ? section[key].Mark() : section.Mark());
  };
  if (const YAML::Node data = root["data"]) {
    scenario.data = read_data(data);
    locate(data, "data", "workers_per_gpu");
    locate(data, "data", "prefetch_factor");
  }
  if (const YAML::Node checkpoint = root["checkpoint"]) {
    scenario.checkpoint = read_checkpoint(checkpoint);
    locate(checkpoint, "checkpoint", "chunk");
  }
  // Each entry of the module-pattern lists, checked against the model once it is built
  // (run/run.cpp): "framework.compile.modules.0", "training.float8.skip.1", ...
  const auto locate_entries = [&](const YAML::Node& section, const char* key, const std::string& name) {
    if (!section || !section.IsMap()) return;
    const YAML::Node list = section[key];
    if (!list || !list.IsSequence()) return;
    for (std::size_t i = 0; i < list.size(); ++i) scenario.locations[name + "." + std::to_string(i)] = where(list[i].Mark());
  };
  if (const YAML::Node framework = root["framework"]; framework && framework.IsMap()) {
    locate_entries(framework["compile"], "modules", "framework.compile.modules");
  }
  if (training && training.IsMap()) locate_entries(training["float8"], "skip", "training.float8.skip");
  if (const YAML::Node parallelism = root["parallelism"]; parallelism && parallelism.IsMap()) {
    locate_entries(parallelism["fsdp"], "units", "parallelism.fsdp.units");
  }
  if (const YAML::Node sweep = root["sweep"]) {
    // Its entries are checked when the sweep is expanded (sim/sweep.cpp), which needs the
    // rest of the document; here only its shape.
    if (!sweep.IsMap() || sweep.size() == 0) {
      throw InputError(where(sweep.Mark()) + "'sweep' must be a non-empty mapping of scenario keys to lists or ranges, e.g. training.batch_size: [8, 16]");
    }
    scenario.has_sweep = true;
  }

  read_model(model, training, scenario);
  read_tf32(training, scenario);
  read_float8(training, scenario);
  if (const YAML::Node framework = root["framework"]) {
    // A loop's ops per parameter stand for one trace op per parameter: torch.optim's for-loop
    // (a trace file's optimizer ops are taken as they are).
    const YAML::Node ops = framework["optimizer_ops_per_parameter"];
    if (ops && scenario.zoo_model &&
        ((scenario.zoo_model->optimizer && !zoo::is_torch_optimizer(*scenario.zoo_model->optimizer)) || scenario.zoo_model->optimizer_impl != zoo::OptimizerImpl::for_loop)) {
      throw InputError(where(ops.Mark()) +
                       "'framework.optimizer_ops_per_parameter' needs one optimizer op per parameter; expected training.optimizer: sgd, "
                       "momentum, adam or adamw with training.optimizer_impl: for-loop");
    }
  }
  // FSDP's transform sizes each unit's reduce-scatter from all its parameters; LoRA's frozen
  // ones have no gradient (traces/zoo/README.md, "LoRA and QLoRA").
  if (scenario.zoo_model && scenario.zoo_model->lora && scenario.parallelism && scenario.parallelism->data.fsdp) {
    throw InputError(where(model["lora"].Mark()) + "'model.lora' with 'parallelism.fsdp' is not modelled (FSDP would reduce-scatter "
                     "gradients of the frozen weights); expected ddp or zero with LoRA");
  }
  check_fsdp_offload(root, scenario);
  if (const YAML::Node name = root["name"]) {
    scenario.name = scalar(name, "name");
  } else {
    scenario.name = !hf_config_.empty() ? hf_config_.stem().string() : scenario.zoo_model ? scenario.zoo_model->model : scenario.trace_file->stem().string();
  }
  return scenario;
}

// training.tf32: true or false sets both of PyTorch's flags, {matmul, cudnn} each; a flag not
// given keeps its default in the scenario's PyTorch (framework.pytorch): TF32 exists from 1.7,
// torch.backends.cudnn.allow_tf32 defaults to true and torch.backends.cuda.matmul.allow_tf32 to
// true in 1.7 to 1.11 and false from 1.12 (PyTorch docs/source/notes/cuda.rst, "TensorFloat-32
// (TF32) on Ampere (and later) devices"); an unstated version is taken as 1.12 or later. On a GPU
// without TF32 (no gpu.peak.tf32) the flags change nothing. precision: tf32 sets both.
void ScenarioReader::read_tf32(const YAML::Node& training, Scenario& scenario) const {
  const std::optional<PytorchVersion> pytorch = scenario.framework.pytorch;
  const bool exists = !pytorch || *pytorch >= PytorchVersion{1, 7};
  scenario.allow_tf32_cudnn = exists;
  scenario.allow_tf32_matmul = exists && pytorch && *pytorch < PytorchVersion{1, 12};
  if (!training) return;
  const YAML::Node precision = training["precision"];
  const bool tf32_precision = precision && precision.IsScalar() && precision.Scalar() == "tf32";
  if (tf32_precision) scenario.allow_tf32_matmul = scenario.allow_tf32_cudnn = true;
  const YAML::Node node = training["tf32"];
  if (!node) return;
  if (node.IsMap()) {
    check_keys(node, "training.tf32", {"matmul", "cudnn"});
    if (const YAML::Node m = node["matmul"]) scenario.allow_tf32_matmul = boolean(m, "training.tf32.matmul");
    if (const YAML::Node c = node["cudnn"]) scenario.allow_tf32_cudnn = boolean(c, "training.tf32.cudnn");
  } else {
    scenario.allow_tf32_matmul = scenario.allow_tf32_cudnn = boolean(node, "training.tf32");
  }
  if (tf32_precision && !(scenario.allow_tf32_matmul && scenario.allow_tf32_cudnn)) {
    throw InputError(where(node.Mark()) + "'training.tf32' turns TF32 off, which contradicts 'precision: tf32'; expected one of the two");
  }
}

// training.float8: true (every linear layer), false, or {recipe: RECIPE, skip: [PATTERN, ...],
// fsdp_all_gather: BOOL} (module patterns, models/module_pattern.hpp, whose linear layers stay in
// 16 bits: torchtitan's converter skips `output`, Megatron-LM's output layer is not a Transformer
// Engine module). The GEMMs need FP8 tensor cores (the platform's gpu.peak.fp8). The recipe
// (models::Float8Recipe) decides the casts: tensorwise (the default) is torchao's, timed as
// torch.compile generates its casts, so framework.compile must be set (torchao's float8 README asks
// for torch.compile, its eager casts being many kernels each); delayed is Transformer Engine's
// DelayedScaling, whose casts are its own kernels. models/README.md, "Float8 linears".
void ScenarioReader::read_float8(const YAML::Node& training, Scenario& scenario) const {
  if (!training) return;
  const YAML::Node node = training["float8"];
  if (!node) return;
  const std::string expected =
      "expected true (every linear layer), false or {recipe: tensorwise or delayed, skip: [PATTERN, ...]} (module patterns whose linear layers "
      "stay in 16 bits, as torchtitan skips output)";
  models::Float8Scope scope;
  if (node.IsMap()) {
    check_keys(node, "training.float8", {"recipe", "skip", "fsdp_all_gather", "fp8_weights"});
    if (const YAML::Node recipe = node["recipe"]) {
      const std::string text = recipe.IsScalar() ? recipe.Scalar() : std::string();
      const std::optional<models::Float8Recipe> parsed = models::parse_float8_recipe(text);
      if (!recipe.IsScalar() || !parsed) {
        throw InputError(where(recipe.Mark()) + "'training.float8.recipe' is '" + text +
                         "'; expected tensorwise (torchao's dynamic scaling) or delayed (Transformer Engine's DelayedScaling)");
      }
      scope.recipe = *parsed;
    }
    if (const YAML::Node skip = node["skip"]) {
      if (!skip.IsSequence()) throw InputError(where(skip.Mark()) + "'training.float8.skip' must be a list of module patterns; " + expected);
      scope.skip = module_patterns(skip, "training.float8.skip");
    }
    // torchtitan's float8.enable_fsdp_float8_all_gather: FSDP2 gathers the converted linears'
    // weights in float8 (models::FsdpSpec::float8_all_gather), so it needs parallelism.fsdp.
    if (const YAML::Node gather = node["fsdp_all_gather"]) {
      scope.fsdp_all_gather = boolean(gather, "training.float8.fsdp_all_gather");
      if (scope.fsdp_all_gather && scope.recipe != models::Float8Recipe::tensorwise) {
        throw InputError(where(gather.Mark()) + "'training.float8.fsdp_all_gather' is torchao's float8 all-gather, which needs its tensorwise "
                         "recipe; expected recipe tensorwise, or fsdp_all_gather false");
      }
      if (scope.fsdp_all_gather && !(scenario.parallelism && scenario.parallelism->data.fsdp)) {
        throw InputError(where(gather.Mark()) + "'training.float8.fsdp_all_gather' gathers FSDP2's weights in float8; expected parallelism.fsdp "
                         "as well, or fsdp_all_gather false");
      }
    }
    // Transformer Engine's FP8 weights (fp8_model_init, Megatron-LM's --fp8-param-gather): no FP8
    // workspace beside 16-bit weights (models/float8_memory.hpp).
    if (const YAML::Node weights = node["fp8_weights"]) {
      scope.fp8_weights = boolean(weights, "training.float8.fp8_weights");
      if (scope.fp8_weights && scope.recipe != models::Float8Recipe::delayed) {
        throw InputError(where(weights.Mark()) + "'training.float8.fp8_weights' is Transformer Engine's FP8 weights, under its delayed "
                         "recipe; expected recipe delayed, or fp8_weights false");
      }
    }
  } else if (!node.IsScalar()) {
    throw InputError(where(node.Mark()) + "'training.float8' is not a value or a map; " + expected);
  } else if (!boolean(node, "training.float8")) {
    return;
  }
  if (scope.recipe == models::Float8Recipe::tensorwise && !scenario.framework.compile) {
    throw InputError(where(node.Mark()) + "'training.float8' is timed with its casts as torch.compile generates them; expected framework.compile "
                     "set as well (torchao's float8 training asks for torch.compile), recipe delayed (Transformer Engine's own cast kernels) "
                     "or no training.float8");
  }
  if (scenario.platform && !(scenario.platform->gpu.peak_fp8 > 0)) {
    throw InputError(where(node.Mark()) + "'training.float8' runs the linear layers' GEMMs on FP8 tensor cores, and platform '" +
                     scenario.platform->name + "' gives no gpu.peak.fp8; expected a GPU with FP8 (compute capability 8.9 or later) or no training.float8");
  }
  if (scope.fsdp_all_gather) scenario.parallelism->data.fsdp->float8_all_gather = scope;
  // FP8 weights under Megatron's distributed optimizer (ZeRO-1 or 2): its all-gathers move them at
  // one byte an element (DataParallelSpec::float8_parameter_gather). FSDP's and ZeRO-3's gathers
  // keep the weights' 16 bits (not modelled in FP8).
  if (scope.fp8_weights && scenario.parallelism) {
    models::DataParallelSpec& data = scenario.parallelism->data;
    if (data.zero_stage >= 1 && data.zero_stage <= 2 && !data.fsdp && data.compression) {
      throw InputError(where(node.Mark()) + "'training.float8.fp8_weights' has the distributed optimizer all-gather FP8 weights, which "
                       "parallelism.compression would compress instead; expected one of the two");
    }
    data.float8_parameter_gather = models::float8_parameter_gather_for(data, scope);
  }
  scenario.float8 = std::move(scope);
}

// training: the options that apply to a trace file too (batch size, precision and optimizer are
// read with the model, which decides whether they apply).
void ScenarioReader::read_training_options(const YAML::Node& training, Scenario& scenario) const {
  if (!training) return;
  // At most 4096 micro-steps: each is a whole forward and backward pass in the replay, and
  // no recipe accumulates more (DLE BERT pre-training: 8192 / 64 = 128 on one V100).
  if (const auto steps = optional_positive(training, "gradient_accumulation_steps", "training")) {
    if (*steps > 4096) {
      throw InputError(where(training["gradient_accumulation_steps"].Mark()) + "'training.gradient_accumulation_steps' is " +
                       training["gradient_accumulation_steps"].Scalar() + "; expected at most 4096");
    }
    scenario.accumulation_steps = static_cast<int>(*steps);
  }
  if (training["memory_format"]) {
    // PyTorch's names: model.to(memory_format=torch.channels_last), and the default
    // torch.contiguous_format (NCHW for 4-D activations).
    const YAML::Node f = training["memory_format"];
    const std::string format = scalar(f, "training.memory_format");
    if (format != "channels_last" && format != "contiguous_format") {
      throw InputError(where(f.Mark()) + "unknown training.memory_format '" + format + "'; expected channels_last or contiguous_format");
    }
    scenario.channels_last = format == "channels_last";
  }
}

namespace {

nlohmann::json json_of(const YAML::Node& node) {
  if (node.IsMap()) {
    nlohmann::json object = nlohmann::json::object();
    for (const auto& item : node) object[item.first.Scalar()] = json_of(item.second);
    return object;
  }
  if (node.IsSequence()) {
    nlohmann::json array = nlohmann::json::array();
    for (const auto& item : node) array.push_back(json_of(item));
    return array;
  }
  if (node.IsNull()) return nullptr;
  // A scalar as JSON reads it: an integer, a number, true/false, null, else a string.
  const std::string& text = node.Scalar();
  if (node.Tag() != "!") {  // unquoted
    std::int64_t integer = 0;
    double number = 0;
    bool flag = false;
    if (YAML::convert<std::int64_t>::decode(node, integer)) return integer;
    if (YAML::convert<double>::decode(node, number)) return number;
    if (YAML::convert<bool>::decode(node, flag) && (text == "true" || text == "false")) return flag;
  }
  return text;
}

}  // namespace

// An inline mapping as the JSON text a config.json would hold.
std::string ScenarioReader::json_text_of(const YAML::Node& node, const std::string& field) const {
  if (!node.IsMap()) throw InputError(where(node.Mark()) + "'" + field + "' must be a file name or a mapping");
  return json_of(node).dump();
}

// model: a zoo model, a Hugging Face config or a trace file, with the training keys that apply to it.
void ScenarioReader::read_model(const YAML::Node& model, const YAML::Node& training, Scenario& scenario) {
  const bool has_zoo = static_cast<bool>(model["zoo"]);
  const bool has_hf = static_cast<bool>(model["hf_config"]);
  const bool has_trace = static_cast<bool>(model["trace"]);
  if ((has_zoo ? 1 : 0) + (has_hf ? 1 : 0) + (has_trace ? 1 : 0) != 1) {
    throw InputError(where(model.Mark()) + "'model' needs exactly one of 'zoo' (a model name: comptrain trace list), 'hf_config' "
                                           "(a Hugging Face config.json) or 'trace' (a trace file)");
  }
  if (has_zoo || has_hf) {
    zoo::ModelSpec request;
    if (has_hf) {
      // The zoo reads the config (zoo::spec_from_hf_config); the sequence length is the
      // scenario's: a config gives only the longest one its positions allow.
      // A path to a config.json, or the config itself as a mapping (what `comptrain import`
      // writes from a Megatron-LM or torchtitan job, so that one file holds the scenario).
      const YAML::Node config = model["hf_config"];
      const bool inline_config = config.IsMap();
      std::filesystem::path path = inline_config ? std::filesystem::path(source()) : std::filesystem::path(scalar(config, "model.hf_config"));
      if (!inline_config && !path.is_absolute()) path = base_dir_ / path;
      // The config's errors (cannot read it, a field it lacks or the zoo does not model) are the
      // scenario's at its hf_config line; the message names the config's field after it.
      try {
        request = inline_config ? zoo::spec_from_hf_config(json_text_of(config, "model.hf_config"), where(config.Mark()) + "model.hf_config")
                                : zoo::spec_from_hf_config(read_file(path), path.string());
      } catch (const InputError& e) {
        // An inline config's messages already start at its line; a file's name the file.
        if (inline_config) throw;
        throw InputError(where(config.Mark()) + "model.hf_config: " + e.what());
      }
      if (!model["seq_len"]) {
        throw InputError(where(model.Mark()) + "'model.seq_len' is required with 'hf_config' (the training sequence length in tokens; "
                                               "max_position_embeddings is only the longest the model allows)");
      }
      hf_config_ = path;
    } else {
      request.model = scalar(model["zoo"], "model.zoo");
    }
    const auto models = zoo::list_models();
    if (std::none_of(models.begin(), models.end(), [&](const auto& m) { return m.name == request.model; })) {
      std::string names;
      for (const auto& m : models) names += (names.empty() ? "" : ", ") + m.name;
      throw InputError(where(model["zoo"].Mark()) + "unknown zoo model '" + request.model + "'; expected one of: " + names);
    }
    // Given, they override the zoo's defaults and the config's values.
    for (const auto& [key, field] : {std::pair{"layers", &request.layers}, std::pair{"hidden", &request.hidden},
                                     std::pair{"heads", &request.heads}, std::pair{"seq_len", &request.seq_len},
                                     std::pair{"vocab", &request.vocab}}) {
      if (const auto value = optional_positive(model, key, "model")) *field = value;
    }
    // An output layer of its own or the word embedding (zoo::ModelSpec::tie_embeddings).
    if (const YAML::Node tie = model["tie_embeddings"]) request.tie_embeddings = boolean(tie, "model.tie_embeddings");
    if (const YAML::Node a = model["attention"]) {
      request.attention = named(a, "model.attention", zoo::parse_attention, zoo::attention_names());
    }
    if (const YAML::Node h = model["head"]) request.head = named(h, "model.head", zoo::parse_head, zoo::head_names());
    if (const YAML::Node m = model["mlm"]) request.mlm = named(m, "model.mlm", zoo::parse_mlm_positions, zoo::mlm_positions_names());
    request.mlm_predictions = optional_positive(model, "mlm_predictions", "model");
    if (const YAML::Node moe = model["moe"]) request.routing = read_expert_routing(moe);
    if (const YAML::Node lora = model["lora"]) request.lora = read_lora(lora);
    if (const YAML::Node packing = model["packing"]) {
      // Several documents per sample, each attending only to itself (traces/zoo/README.md, "Packed sequences").
      require_map(packing, "model.packing");
      check_keys(packing, "model.packing", {"documents"});
      if (!packing["documents"]) throw InputError(where(packing.Mark()) + "'model.packing' needs 'documents' (how many documents each sample packs)");
      request.packed_documents = optional_positive(packing, "documents", "model.packing");
    }
    // Whose code builds a decoder: Hugging Face's (the default), torchtitan's
    // (traces/zoo/README.md, "torchtitan's Llama"; norm_type is its train config's) or
    // Megatron-LM's Transformer Engine layers ("Megatron-LM's Transformer Engine layers"; the
    // `megatron` mapping holds its arguments).
    enum class Implementation { hugging_face, torchtitan, megatron };
    if (const YAML::Node impl = model["implementation"]) {
      const auto parse = [](std::string_view text) -> std::optional<Implementation> {
        if (text == "torchtitan") return Implementation::torchtitan;
        if (text == "megatron") return Implementation::megatron;
        if (text == "hugging-face") return Implementation::hugging_face;
        return std::nullopt;
      };
      const Implementation chosen = named(impl, "model.implementation", parse, {"hugging-face", "torchtitan", "megatron"});
      if (chosen == Implementation::torchtitan) request.torchtitan = zoo::TorchtitanOptions{};
      if (chosen == Implementation::megatron) request.megatron = zoo::MegatronOptions{};
    }
    if (const YAML::Node m = model["megatron"]) {
      if (!request.megatron) {
        throw InputError(where(m.Mark()) + "'model.megatron' holds Megatron-LM's layer arguments; expected it with 'implementation: megatron'");
      }
      require_map(m, "model.megatron");
      check_keys(m, "model.megatron", {"hidden_dropout", "attention_dropout", "rope_fusion", "bias_activation_fusion", "moe_grouped_gemm"});
      const auto probability = [&](const char* key, double& field) {
        if (const YAML::Node v = m[key]) {
          field = number(v, std::string("model.megatron.") + key, [](double p) { return p >= 0 && p < 1; }, "a probability in [0, 1)");
        }
      };
      probability("hidden_dropout", request.megatron->hidden_dropout);
      probability("attention_dropout", request.megatron->attention_dropout);
      if (const YAML::Node v = m["rope_fusion"]) request.megatron->rope_fusion = boolean(v, "model.megatron.rope_fusion");
      if (const YAML::Node v = m["bias_activation_fusion"]) {
        request.megatron->bias_activation_fusion = boolean(v, "model.megatron.bias_activation_fusion");
      }
      if (const YAML::Node v = m["moe_grouped_gemm"]) request.megatron->moe_grouped_gemm = boolean(v, "model.megatron.moe_grouped_gemm");
    }
    // Megatron's main_grad dtype follows the same flag as its gradient reduction (parallelism is
    // read before the model).
    if (request.megatron && scenario.parallelism) request.megatron->main_grad_fp32 = scenario.parallelism->data.grad_reduce_in_fp32;
    if (const YAML::Node n = model["norm_type"]) {
      if (!request.torchtitan) {
        throw InputError(where(n.Mark()) + "'model.norm_type' is torchtitan's train-config option; expected it with 'implementation: torchtitan'");
      }
      request.torchtitan->norm = named(n, "model.norm_type", zoo::parse_torchtitan_norm, zoo::torchtitan_norm_names());
    }
    // Up to PyTorch 1.10 softmax and log_softmax saved their input too (sim/framework.hpp).
    request.softmax_saves_input = scenario.framework.pytorch && *scenario.framework.pytorch <= PytorchVersion{1, 10};
    // Up to PyTorch 1.13 autograd summed a tensor's gradients into a new tensor, from 2.0 in
    // place into the first (zoo::ModelSpec::accumulate_gradients_in_place).
    request.accumulate_gradients_in_place = !(scenario.framework.pytorch && *scenario.framework.pytorch < PytorchVersion{2, 0});
    if (training) {
      scenario.batch_size = optional_positive(training, "batch_size", "training");
      if (const YAML::Node p = training["precision"]) {
        // tf32 is fp32 whose convolutions and matmuls run on TF32 tensor cores (read_tf32): the
        // same tensors.
        if (scalar(p, "training.precision") != "tf32") {
          std::vector<std::string_view> names = zoo::precision_names();
          names.insert(names.begin() + 1, "tf32");
          request.precision = named(p, "training.precision", zoo::parse_precision, names);
        }
      }
      if (const YAML::Node o = training["optimizer"]) {
        request.optimizer = named(o, "training.optimizer", zoo::parse_optimizer, zoo::optimizer_names());
      }
      if (const YAML::Node o = training["optimizer_impl"]) {
        request.optimizer_impl = named(o, "training.optimizer_impl", zoo::parse_optimizer_impl, zoo::optimizer_impl_names());
      }
      read_loss_and_step(training, scenario, request);  // training_step_yaml.cpp
    }
    if (const YAML::Node bins = model["sequence_bins"]) {
      if (!model["seq_len"]) {
        throw InputError(where(bins.Mark()) + "'model.sequence_bins' needs 'model.seq_len' (the longest bin's padded length)");
      }
      if (request.packed_documents) {
        throw InputError(where(bins.Mark()) + "'model.sequence_bins' and 'model.packing' are two answers to padding; expected one of them");
      }
      scenario.sequence_bins = read_sequence_bins(bins, *request.seq_len);
    }
    scenario.zoo_model = std::move(request);
    scenario.model_locations[""] = where((has_hf ? model["hf_config"] : model["zoo"]).Mark());
    for (const char* key : {"layers", "hidden", "heads", "seq_len", "vocab", "tie_embeddings", "attention", "head", "mlm", "mlm_predictions", "moe", "lora", "packing", "implementation", "norm_type", "megatron", "sequence_bins"}) {
      if (const YAML::Node node = model[key]) scenario.model_locations[key] = where(node.Mark());
    }
  } else {
    for (const char* key : {"layers", "hidden", "heads", "seq_len", "vocab", "tie_embeddings", "attention", "head", "mlm", "mlm_predictions", "moe", "lora", "packing", "implementation", "norm_type", "megatron", "sequence_bins"}) {
      if (model[key]) throw InputError(where(model[key].Mark()) + "'" + key + "' applies to zoo models only; a trace file fixes the model's shape");
    }
    std::filesystem::path path = scalar(model["trace"], "model.trace");
    scenario.trace_file = path.is_absolute() ? path : base_dir_ / path;
    scenario.model_locations[""] = where(model["trace"].Mark());
    if (training) {
      for (const char* key : {"precision", "optimizer", "optimizer_impl", "optimizer_in_backward", "loss"}) {
        if (training[key]) throw InputError(where(training[key].Mark()) + "'" + key + "' applies to zoo models only; a trace file fixes it");
      }
      scenario.batch_size = optional_positive(training, "batch_size", "training");
    }
  }
}

models::Platform ScenarioReader::read_platform(const YAML::Node& node) const {
  if (node.IsMap()) return models::platform_from_yaml(node, source() + " (inline platform)");
  const std::string text = scalar(node, "platform");
  try {
    return models::resolve_platform(text, base_dir_);
  } catch (const InputError& e) {
    throw InputError(where(node.Mark()) + "platform: " + e.what());
  }
}

// One of a closed set of names, parsed by `parse`; the message lists `names`.
template <typename Parse>
typename std::invoke_result_t<Parse, std::string_view>::value_type ScenarioReader::named(const YAML::Node& node, const std::string& field, Parse parse, const std::vector<std::string_view>& names) const {
  const std::string text = scalar(node, field);
  const auto value = parse(text);
  if (!value) {
    std::string list;
    for (std::string_view n : names) list += (list.empty() ? "" : ", ") + std::string(n);
    throw InputError(where(node.Mark()) + "unknown " + field.substr(field.find('.') + 1) + " '" + text + "' in '" + field + "'; expected one of: " + list);
  }
  return *value;
}

// framework.compile: true / false, or {modules: [PATTERN, ...]} (a non-empty list of module
// patterns, module_pattern.hpp).
std::optional<models::CompileScope> ScenarioReader::read_compile(const YAML::Node& node) const {
  const std::string expected =
      "expected true (torch.compile(model)), false (eager) or {modules: [PATTERN, ...]} (each module instance a pattern names "
      "compiled on its own, e.g. [\"layers.*\"])";
  if (node.IsScalar()) {
    // A YAML boolean as boolean() reads one (true, True, false, ...).
    bool on = false;
    if (!YAML::convert<bool>::decode(node, on)) throw InputError(where(node.Mark()) + "'framework.compile' is '" + node.Scalar() + "'; " + expected);
    return on ? std::optional<models::CompileScope>(models::CompileScope{}) : std::nullopt;
  }
  if (!node.IsMap()) throw InputError(where(node.Mark()) + "'framework.compile' is not a value or a map; " + expected);
  check_keys(node, "framework.compile", {"modules"});
  const YAML::Node modules = node["modules"];
  if (!modules || !modules.IsSequence() || modules.size() == 0) {
    throw InputError(where(node.Mark()) + "'framework.compile.modules' must be a non-empty list of module patterns; " + expected);
  }
  return models::CompileScope{module_patterns(modules, "framework.compile.modules")};
}

// A list of module patterns (models/module_pattern.hpp), each checked at its own line.
std::vector<std::string> ScenarioReader::module_patterns(const YAML::Node& list, const std::string& key) const {
  std::vector<std::string> patterns;
  for (const auto& item : list) {
    const std::string pattern = scalar(item, key);
    try {
      models::validate_module_pattern(pattern);
    } catch (const InputError& e) {
      throw InputError(where(item.Mark()) + "'" + key + "': " + e.what());
    }
    patterns.push_back(pattern);
  }
  return patterns;
}

FrameworkSpec ScenarioReader::read_framework(const YAML::Node& node) const {
  require_map(node, "framework");
  check_keys(node, "framework", {"pytorch", "zero_grad", "expandable_segments", "cuda_context", "cublas_workspace", "cudnn_workspace", "cuda",
                                 "attention_kernel", "host_syncs", "optimizer_ops_per_parameter", "compile"});
  FrameworkSpec framework;
  if (const YAML::Node v = node["compile"]) framework.compile = read_compile(v);
  if (const YAML::Node syncs = node["host_syncs"]) {
    if (!syncs.IsSequence()) throw InputError(where(syncs.Mark()) + "'framework.host_syncs' must be a list; expected e.g. [backward_end]");
    for (const auto& item : syncs) {
      const std::string text = scalar(item, "framework.host_syncs");
      const auto sync = parse_host_sync(text);
      if (!sync) {
        throw InputError(where(item.Mark()) + "'framework.host_syncs' holds '" + text +
                         "'; expected backward_end (the host waits for the GPU after the backward pass, before the optimizer step)");
      }
      if (std::find(framework.host_syncs.begin(), framework.host_syncs.end(), *sync) != framework.host_syncs.end()) {
        throw InputError(where(item.Mark()) + "'framework.host_syncs' holds '" + text + "' twice; expected each place once");
      }
      framework.host_syncs.push_back(*sync);
    }
  }
  if (const YAML::Node ops = node["optimizer_ops_per_parameter"]) {
    // At most 1000: no optimizer loop runs that many kernels per parameter; more is a misplaced
    // unit or a total.
    constexpr double kMaxOpsPerParameter = 1000;
    const double value = number(ops, "framework.optimizer_ops_per_parameter");
    if (!(value >= 1 && value <= kMaxOpsPerParameter)) {
      throw InputError(where(ops.Mark()) + "'framework.optimizer_ops_per_parameter' is " + ops.Scalar() +
                       "; expected the mean number of eager ops (kernels) per parameter of the optimizer's loop, from 1 to 1000");
    }
    framework.optimizer_ops_per_parameter = value;
  }
  if (const YAML::Node v = node["pytorch"]) {
    // The text as written: YAML would read 1.10 as the number 1.1.
    const std::string text = scalar(v, "framework.pytorch");
    framework.pytorch = parse_pytorch_version(text);
    if (!framework.pytorch) {
      throw InputError(where(v.Mark()) + "'framework.pytorch' is '" + text + "'; expected a release as major.minor, e.g. \"1.10\" or \"2.1\"");
    }
  }
  if (const YAML::Node v = node["cuda"]) {
    const std::string text = scalar(v, "framework.cuda");
    framework.cuda = parse_cuda_version(text);
    if (!framework.cuda) {
      throw InputError(where(v.Mark()) + "'framework.cuda' is '" + text + "'; expected a CUDA toolkit release as major.minor, e.g. \"11.8\" or \"12.4\" (torch.version.cuda)");
    }
  }
  if (const YAML::Node v = node["attention_kernel"]) {
    const std::string text = scalar(v, "framework.attention_kernel");
    const auto kernel = models::parse_attention_kernel(text);
    if (!kernel) {
      throw InputError(where(v.Mark()) + "'framework.attention_kernel' is '" + text + "'; expected flash-attention-2, flash-attention-3 or cudnn");
    }
    framework.attention_kernel = *kernel;
    framework.attention_kernel_place = where(v.Mark());
  }
  if (const YAML::Node z = node["zero_grad"]) {
    const std::string text = scalar(z, "framework.zero_grad");
    const auto value = parse_zero_grad(text);
    if (!value) {
      throw InputError(where(z.Mark()) + "'framework.zero_grad' is '" + text +
                       "'; expected set_to_none (gradients freed between iterations, PyTorch 2's default) or zeros (kept)");
    }
    framework.zero_grad = *value;
  }
  if (node["expandable_segments"]) framework.expandable_segments = boolean(node["expandable_segments"], "framework.expandable_segments");
  // At most 64 GiB: no CUDA context or cuBLAS workspace comes near; anything larger is a
  // misplaced unit.
  constexpr std::int64_t kMaxFrameworkBytes = std::int64_t{64} << 30;
  for (const char* key : {"cuda_context", "cublas_workspace", "cudnn_workspace"}) {
    const YAML::Node n = node[key];
    if (!n) continue;
    const std::string field = std::string("framework.") + key;
    const std::int64_t bytes = byte_count(n, field);
    if (bytes > kMaxFrameworkBytes) {
      throw InputError(where(n.Mark()) + "'" + field + "' is " + scalar(n, field) + "; expected at most 64 GiB (a CUDA context takes hundreds of MiB)");
    }
    if (std::string_view(key) == "cuda_context") {
      framework.cuda_context_bytes = bytes;
    } else if (std::string_view(key) == "cublas_workspace") {
      framework.cublas_workspace_bytes = bytes;
    } else {
      framework.cudnn_workspace_bytes = bytes;
    }
  }
  return framework;
}

// parallelism: {nodes, gpus_per_node, ddp: {bucket_cap, first_bucket, gradient_as_bucket_view},

// architecture (expert count, top-k, seq_len) when it builds the trace.
// model.sequence_bins (SequenceBins in sim/config/scenario.hpp): the bin size divides seq_len, one
// weight per bin, each a finite share >= 0, together 1 (within 1e-3: shares read off a histogram
// are rounded), and the longest bin's positive, since seq_len is what the scenario's own run pads to.
SequenceBins ScenarioReader::read_sequence_bins(const YAML::Node& node, std::int64_t seq_len) const {
  require_map(node, "model.sequence_bins");
  check_keys(node, "model.sequence_bins", {"bin_size", "weights"});
  SequenceBins bins;
  bins.position = where(node.Mark());
  for (const char* key : {"bin_size", "weights"}) {
    if (!node[key]) throw InputError(where(node.Mark()) + "'model.sequence_bins' needs '" + key + "' (bin_size: tokens per bin; weights: each bin's share of the iterations)");
  }
  bins.bin_size = bounded_integer(node["bin_size"], "model.sequence_bins.bin_size", 1, seq_len);
  if (seq_len % bins.bin_size != 0) {
    throw InputError(where(node["bin_size"].Mark()) + fmt::format("'model.sequence_bins.bin_size' is {}; expected a divisor of model.seq_len ({})", bins.bin_size, seq_len));
  }
  const YAML::Node weights = node["weights"];
  const std::int64_t count = seq_len / bins.bin_size;
  if (!weights.IsSequence() || static_cast<std::int64_t>(weights.size()) != count) {
    throw InputError(where(weights.Mark()) + fmt::format("'model.sequence_bins.weights' must be a list of {} shares (seq_len {} / bin_size {}), one per bin, shortest first",
                                                         count, seq_len, bins.bin_size));
  }
  double sum = 0;
  for (const auto& item : weights) {
    const double w = number(item, "model.sequence_bins.weights", [](double v) { return v >= 0; }, "a share >= 0");
    bins.weights.push_back(w);
    sum += w;
  }
  if (std::abs(sum - 1) > 1e-3) {
    throw InputError(where(weights.Mark()) + fmt::format("'model.sequence_bins.weights' sum to {:.6g}; expected shares that sum to 1", sum));
  }
  if (!(bins.weights.back() > 0)) {
    throw InputError(where(weights.Mark()) + fmt::format("'model.sequence_bins.weights': the longest bin ({} tokens, model.seq_len) has weight 0; expected it positive "
                                                         "(lower seq_len to the longest bin the data fills)", seq_len));
  }
  return bins;
}

zoo::ExpertRouting ScenarioReader::read_expert_routing(const YAML::Node& node) const {
  require_map(node, "model.moe");
  check_keys(node, "model.moe", {"expert_load", "load_imbalance", "capacity_factor"});
  if (node["expert_load"] && node["load_imbalance"]) {
    throw InputError(where(node.Mark()) + "'model.moe' takes 'expert_load' (one share per expert) or 'load_imbalance' (max / mean), not both");
  }
  zoo::ExpertRouting routing;
  if (const YAML::Node load = node["expert_load"]) {
    if (!load.IsSequence() || load.size() == 0) {
      throw InputError(where(load.Mark()) + "'model.moe.expert_load' must be a non-empty list of positive numbers, one relative load per expert");
    }
    for (const auto& item : load) {
      const double share = number(item, "model.moe.expert_load");
      if (share <= 0) throw InputError(where(item.Mark()) + "'model.moe.expert_load' holds " + item.Scalar() + "; expected positive numbers");
      routing.expert_load.push_back(share);
    }
  }
  if (const YAML::Node f = node["load_imbalance"]) {
    routing.load_imbalance = number(f, "model.moe.load_imbalance");
    if (*routing.load_imbalance < 1) {
      throw InputError(where(f.Mark()) + "'model.moe.load_imbalance' is " + f.Scalar() + "; expected the busiest expert's load over the mean, >= 1");
    }
  }
  if (const YAML::Node c = node["capacity_factor"]) {
    routing.capacity_factor = number(c, "model.moe.capacity_factor");
    if (*routing.capacity_factor <= 0) {
      throw InputError(where(c.Mark()) + "'model.moe.capacity_factor' is " + c.Scalar() + "; expected a positive number (1.0: the mean load)");
    }
  }
  return routing;
}

// A non-empty list of tensor names or shell-style patterns (models::name_matches).
std::vector<std::string> ScenarioReader::string_list(const YAML::Node& node, const std::string& field) const {
  if (!node.IsSequence() || node.size() == 0) {
    throw InputError(where(node.Mark()) + "'" + field +
                     "' must be a non-empty list of tensor names or patterns such as \"layer.*.out\" (`comptrain trace names SCENARIO` lists them)");
  }
  std::vector<std::string> out;
  for (const auto& item : node) out.push_back(scalar(item, field));
  return out;
}

// model.moe: how many tokens each expert of a mixture-of-experts decoder receives
// (zoo::ExpertRouting; traces/zoo/README.md, "Routed tokens"). The zoo checks them against the

models::StrategySpec ScenarioReader::read_strategy(const YAML::Node& node, const std::string& field) const {
  return models::read_strategy(node, source(), field, base_dir_, platform_name_);
}

// A quantity with a unit ("300 GB/s", "10 us"), within `bounds` (base units).
double ScenarioReader::bounded_quantity(const YAML::Node& node, models::units::Dimension dimension, const std::string& field,
                                        models::units::Bounds bounds) const {
  return parsed<models::units::OutOfRange>(node, field, [&](const std::string& text) { return models::units::parse_quantity(text, dimension, bounds); });
}

// Bytes held in an int64 ("4 GiB", "0"): at least 0, at most 2^63 - 1.
std::int64_t ScenarioReader::byte_count(const YAML::Node& node, const std::string& field) const {
  return parsed<models::units::OutOfRange>(node, field, [](const std::string& text) { return models::units::parse_byte_count(text); });
}

std::optional<std::int64_t> ScenarioReader::optional_positive(const YAML::Node& map, const char* key, const std::string& section) const {
  const YAML::Node node = map[key];
  if (!node) return std::nullopt;
  std::int64_t value = 0;
  if (!node.IsScalar() || !YAML::convert<std::int64_t>::decode(node, value) || value < 1) {
    throw InputError(where(node.Mark()) + "'" + section + "." + key + "' is '" + (node.IsScalar() ? node.Scalar() : std::string("a collection")) +
                     "'; expected a positive integer");
  }
  return value;
}

}  // namespace comptrain::sim

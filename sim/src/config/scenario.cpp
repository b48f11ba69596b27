#include "comptrain/sim/config/scenario.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <type_traits>
#include <string>
#include <vector>

#include "comptrain/models/gradient_error.hpp"
#include "comptrain/models/module_pattern.hpp"
#include "comptrain/models/platform_yaml.hpp"
#include "comptrain/models/profile_yaml.hpp"
#include "comptrain/models/shipped_or_file.hpp"
#include "comptrain/models/units.hpp"
#include "comptrain/support/atomic_file.hpp"
#include "comptrain/traces/trace_json.hpp"
#include "comptrain/support/yaml_errors.hpp"
#include "config/scenario_yaml.hpp"

namespace comptrain::sim {
namespace {

// Counts of ops (a lookahead, every k-th activation): no trace has more than a million ops per
// iteration, and the value must fit the int the strategy keeps.
constexpr std::int64_t kMaxCount = 1'000'000;

// Reads one YAML document and reports every problem as "SOURCE:LINE:COLUMN: message".
class ScenarioReader {
 public:
  ScenarioReader(std::string_view source, std::filesystem::path base_dir)
      : source_(source), base_dir_(std::move(base_dir)) {}

  YAML::Node load(std::string_view text) const {
    try {
      return YAML::Load(std::string(text));
    } catch (const YAML::Exception& e) {
      throw InputError(where(e.mark) + "malformed YAML: " + e.msg);
    }
  }

  Scenario read(const YAML::Node& root) {
    if (!root.IsMap()) {
      throw InputError(where(root.Mark()) + "expected a mapping with the keys model, training (and optionally name)");
    }
    check_keys(root, "the scenario", {"name", "model", "training", "framework", "platform", "power_limit", "strategy", "parallelism", "plan", "sweep",
                                      "data", "checkpoint"});

    Scenario scenario;
    scenario.source = source_;
    const YAML::Node model = required(root, "model", "the scenario");
    if (!model.IsMap()) throw InputError(where(model.Mark()) + "'model' must be a mapping with the key zoo, hf_config or trace");
    check_keys(model, "model", {"zoo", "hf_config", "trace", "layers", "hidden", "heads", "seq_len", "vocab", "attention", "head", "mlm", "mlm_predictions", "moe"});
    const YAML::Node training = root["training"];
    if (training && !training.IsMap()) {
      throw InputError(where(training.Mark()) + "'training' must be a mapping with the keys batch_size, precision, optimizer, optimizer_impl, tf32, memory_format, gradient_accumulation_steps");
    }
    if (training) check_keys(training, "training", {"batch_size", "precision", "optimizer", "optimizer_impl", "tf32", "memory_format", "gradient_accumulation_steps"});
    if (training) {
      // At most 4096 micro-steps: each is a whole forward and backward pass in the replay, and
      // no recipe accumulates more (DLE BERT pre-training: 8192 / 64 = 128 on one V100).
      if (const auto steps = optional_positive(training, "gradient_accumulation_steps", "training")) {
        if (*steps > 4096) {
          throw InputError(where(training["gradient_accumulation_steps"].Mark()) + "'training.gradient_accumulation_steps' is " +
                           training["gradient_accumulation_steps"].Scalar() + "; expected at most 4096");
        }
        scenario.accumulation_steps = static_cast<int>(*steps);
      }
    }
    if (training && training["tf32"]) scenario.allow_tf32 = boolean(training["tf32"], "training.tf32");
    if (training && training["memory_format"]) {
      // PyTorch's names: model.to(memory_format=torch.channels_last), and the default
      // torch.contiguous_format (NCHW for 4-D activations).
      const YAML::Node f = training["memory_format"];
      const std::string format = scalar(f, "training.memory_format");
      if (format != "channels_last" && format != "contiguous_format") {
        throw InputError(where(f.Mark()) + "unknown training.memory_format '" + format + "'; expected channels_last or contiguous_format");
      }
      scenario.channels_last = format == "channels_last";
    }
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
      // FSDP2 under gradient accumulation (no resharding between micro-steps, reduce-scatters per
      // micro-step or deferred) is not modelled.
      if (scenario.parallelism->data.fsdp && scenario.accumulation_steps > 1) {
        throw InputError(where(parallelism["fsdp"].Mark()) + "'parallelism.fsdp' with training.gradient_accumulation_steps " +
                         std::to_string(scenario.accumulation_steps) + " is not modelled; expected gradient_accumulation_steps 1 with fsdp");
      }
    }
    // After parallelism: plan.gpus fills nodes of the parallelism section's GPUs per node.
    if (const YAML::Node plan = root["plan"]) scenario.plan = read_plan(plan, scenario.platform, scenario.parallelism);
    if (const YAML::Node data = root["data"]) scenario.data = read_data(data);
    if (const YAML::Node checkpoint = root["checkpoint"]) scenario.checkpoint = read_checkpoint(checkpoint);
    if (const YAML::Node sweep = root["sweep"]) {
      // Its entries are checked when the sweep is expanded (sim/sweep.cpp), which needs the
      // rest of the document; here only its shape.
      if (!sweep.IsMap() || sweep.size() == 0) {
        throw InputError(where(sweep.Mark()) + "'sweep' must be a non-empty mapping of scenario keys to lists or ranges, e.g. training.batch_size: [8, 16]");
      }
      scenario.has_sweep = true;
    }

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
        std::filesystem::path path = scalar(model["hf_config"], "model.hf_config");
        if (!path.is_absolute()) path = base_dir_ / path;
        request = zoo::spec_from_hf_config(read_file(path), path.string());
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
      if (const YAML::Node a = model["attention"]) {
        request.attention = named(a, "model.attention", zoo::parse_attention, zoo::attention_names());
      }
      if (const YAML::Node h = model["head"]) request.head = named(h, "model.head", zoo::parse_head, zoo::head_names());
      if (const YAML::Node m = model["mlm"]) request.mlm = named(m, "model.mlm", zoo::parse_mlm_positions, zoo::mlm_positions_names());
      request.mlm_predictions = optional_positive(model, "mlm_predictions", "model");
      if (const YAML::Node moe = model["moe"]) request.routing = read_expert_routing(moe);
      // Up to PyTorch 1.10 softmax and log_softmax saved their input too (sim/framework.hpp).
      request.softmax_saves_input = scenario.framework.pytorch && *scenario.framework.pytorch <= PytorchVersion{1, 10};
      // Up to PyTorch 1.13 autograd summed a tensor's gradients into a new tensor, from 2.0 in
      // place into the first (zoo::ModelSpec::accumulate_gradients_in_place).
      request.accumulate_gradients_in_place = !(scenario.framework.pytorch && *scenario.framework.pytorch < PytorchVersion{2, 0});
      if (training) {
        scenario.batch_size = optional_positive(training, "batch_size", "training");
        if (const YAML::Node p = training["precision"]) {
          // tf32 is fp32 whose convolutions and matmuls run on TF32 tensor cores
          // (torch.backends.cuda.matmul.allow_tf32 / cudnn.allow_tf32): the same tensors.
          if (scalar(p, "training.precision") == "tf32") {
            if (training["tf32"] && !scenario.allow_tf32) {
              throw InputError(where(training["tf32"].Mark()) + "'training.tf32: false' contradicts 'precision: tf32'; expected one of the two");
            }
            scenario.allow_tf32 = true;
          } else {
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
      }
      scenario.zoo_model = std::move(request);
    } else {
      for (const char* key : {"layers", "hidden", "heads", "seq_len", "vocab", "attention", "head", "mlm", "mlm_predictions", "moe"}) {
        if (model[key]) throw InputError(where(model[key].Mark()) + "'" + key + "' applies to zoo models only; a trace file fixes the model's shape");
      }
      std::filesystem::path path = scalar(model["trace"], "model.trace");
      scenario.trace_file = path.is_absolute() ? path : base_dir_ / path;
      if (training) {
        for (const char* key : {"precision", "optimizer", "optimizer_impl"}) {
          if (training[key]) throw InputError(where(training[key].Mark()) + "'" + key + "' applies to zoo models only; a trace file fixes it");
        }
        scenario.batch_size = optional_positive(training, "batch_size", "training");
      }
    }
    if (const YAML::Node name = root["name"]) {
      scenario.name = scalar(name, "name");
    } else {
      scenario.name = has_zoo ? scenario.zoo_model->model : has_hf ? hf_config_.stem().string() : scenario.trace_file->stem().string();
    }
    return scenario;
  }

 private:
  models::Platform read_platform(const YAML::Node& node) const {
    if (node.IsMap()) return models::platform_from_yaml(node, source_ + " (inline platform)");
    const std::string text = scalar(node, "platform");
    try {
      return models::resolve_platform(text, base_dir_);
    } catch (const InputError& e) {
      throw InputError(where(node.Mark()) + "platform: " + e.what());
    }
  }

  // One of a closed set of names, parsed by `parse`; the message lists `names`.
  template <typename Parse>
  typename std::invoke_result_t<Parse, std::string_view>::value_type named(const YAML::Node& node, const std::string& field, Parse parse, const std::vector<std::string_view>& names) const {
    const std::string text = scalar(node, field);
    const auto value = parse(text);
    if (!value) {
      std::string list;
      for (std::string_view n : names) list += (list.empty() ? "" : ", ") + std::string(n);
      throw InputError(where(node.Mark()) + "unknown " + field.substr(field.find('.') + 1) + " '" + text + "' in '" + field + "'; expected one of: " + list);
    }
    return *value;
  }

  FrameworkSpec read_framework(const YAML::Node& node) const {
    require_map(node, "framework");
    check_keys(node, "framework", {"pytorch", "zero_grad", "expandable_segments", "cuda_context", "cublas_workspace", "cudnn_workspace"});
    FrameworkSpec framework;
    if (const YAML::Node v = node["pytorch"]) {
      // The text as written: YAML would read 1.10 as the number 1.1.
      const std::string text = scalar(v, "framework.pytorch");
      framework.pytorch = parse_pytorch_version(text);
      if (!framework.pytorch) {
        throw InputError(where(v.Mark()) + "'framework.pytorch' is '" + text + "'; expected a release as major.minor, e.g. \"1.10\" or \"2.1\"");
      }
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
  //               zero: {stage, reduce_bucket_size, overlap_comm}, fsdp: {units, reshard_after_forward, ...}}
  ParallelismSection read_parallelism(const YAML::Node& node, const std::optional<models::Platform>& platform) const {
    require_map(node, "parallelism");
    check_keys(node, "parallelism", {"nodes", "gpus_per_node", "ddp", "zero", "fsdp"});
    ParallelismSection p;
    // At most 1,000,000 GPUs: far beyond any machine, and nodes x GPUs stays an int.
    constexpr std::int64_t kMaxGpus = 1'000'000;
    const auto count = [&](const char* key, std::int64_t fallback) {
      const std::int64_t value = optional_positive(node, key, "parallelism").value_or(fallback);
      if (value > kMaxGpus) {
        throw InputError(where(node[key].Mark()) + "'parallelism." + key + "' is " + node[key].Scalar() + "; expected at most 1000000");
      }
      return static_cast<int>(value);
    };
    p.nodes = count("nodes", 1);
    // Default: every GPU of a node (the platform's gpus_per_node).
    p.gpus_per_node = count("gpus_per_node", platform ? platform->gpus_per_node : 1);
    if (static_cast<std::int64_t>(p.nodes) * p.gpus_per_node > kMaxGpus) {
      throw InputError(where(node.Mark()) + "'parallelism' asks for " + std::to_string(static_cast<std::int64_t>(p.nodes) * p.gpus_per_node) +
                       " GPUs; expected at most 1000000");
    }
    if (platform && p.gpus_per_node > platform->gpus_per_node) {
      throw InputError(where(node["gpus_per_node"] ? node["gpus_per_node"].Mark() : node.Mark()) + "'parallelism.gpus_per_node' is " +
                       std::to_string(p.gpus_per_node) + " but platform '" + platform->name + "' has " + std::to_string(platform->gpus_per_node) +
                       " GPUs per node; expected at most that");
    }
    p.data.ranks = p.nodes * p.gpus_per_node;
    const YAML::Node ddp = node["ddp"];
    const YAML::Node zero = node["zero"];
    const YAML::Node fsdp = node["fsdp"];
    if ((ddp ? 1 : 0) + (zero ? 1 : 0) + (fsdp ? 1 : 0) > 1) {
      throw InputError(where((fsdp ? fsdp : zero).Mark()) +
                       "'parallelism' has more than one of 'ddp' (PyTorch DDP), 'zero' (DeepSpeed ZeRO) and 'fsdp' (PyTorch FSDP2); expected one of them");
    }
    if (fsdp) {
      p.data.zero_stage = 3;
      p.data.fsdp = read_fsdp(fsdp);
    }
    // The largest bucket or reduction bucket accepted: 1 TiB, beyond any GPU's memory.
    constexpr std::int64_t kMaxBucketBytes = std::int64_t{1} << 40;
    if (ddp) {
      require_map(ddp, "parallelism.ddp");
      check_keys(ddp, "parallelism.ddp", {"bucket_cap", "first_bucket", "gradient_as_bucket_view"});
      for (const char* key : {"bucket_cap", "first_bucket"}) {
        const YAML::Node n = ddp[key];
        if (!n) continue;
        const std::string field = std::string("parallelism.ddp.") + key;
        const std::int64_t bytes = byte_count(n, field);
        if (bytes < 1 || bytes > kMaxBucketBytes) {
          throw InputError(where(n.Mark()) + "'" + field + "' is " + scalar(n, field) + "; expected 1 B to 1 TiB (PyTorch's default: 25 MiB, the first 1 MiB)");
        }
        (std::string_view(key) == "bucket_cap" ? p.data.bucket_cap_bytes : p.data.first_bucket_bytes) = bytes;
      }
      if (ddp["gradient_as_bucket_view"]) p.data.gradient_as_bucket_view = boolean(ddp["gradient_as_bucket_view"], "parallelism.ddp.gradient_as_bucket_view");
    }
    if (zero) {
      require_map(zero, "parallelism.zero");
      check_keys(zero, "parallelism.zero", {"stage", "reduce_bucket_size", "overlap_comm", "sub_group_size", "offload_optimizer"});
      const YAML::Node stage = required(zero, "stage", "parallelism.zero");
      std::int64_t value = 0;
      if (!stage.IsScalar() || !YAML::convert<std::int64_t>::decode(stage, value) || value < 1 || value > 3) {
        throw InputError(where(stage.Mark()) + "'parallelism.zero.stage' is '" + (stage.IsScalar() ? stage.Scalar() : std::string("a collection")) +
                         "'; expected 1, 2 or 3 (leave 'zero' out for PyTorch DDP)");
      }
      p.data.zero_stage = static_cast<int>(value);
      if (const auto elements = optional_positive(zero, "reduce_bucket_size", "parallelism.zero")) {
        if (*elements > kMaxBucketBytes) {
          throw InputError(where(zero["reduce_bucket_size"].Mark()) + "'parallelism.zero.reduce_bucket_size' is " + zero["reduce_bucket_size"].Scalar() +
                           "; expected at most 2^40 elements (DeepSpeed's default: 500000000)");
        }
        p.data.reduce_bucket_elements = *elements;
      }
      if (zero["overlap_comm"]) p.data.overlap_comm = boolean(zero["overlap_comm"], "parallelism.zero.overlap_comm");
      if (const auto elements = optional_positive(zero, "sub_group_size", "parallelism.zero")) {
        if (*elements > kMaxBucketBytes) {
          throw InputError(where(zero["sub_group_size"].Mark()) + "'parallelism.zero.sub_group_size' is " + zero["sub_group_size"].Scalar() +
                           "; expected at most 2^40 elements (DeepSpeed's default: 1000000000)");
        }
        p.data.sub_group_elements = *elements;
      }
      if (const YAML::Node offload = zero["offload_optimizer"]) p.data.offload_optimizer = read_offload_optimizer(offload, p.data.zero_stage);
    }
    return p;
  }

  // parallelism.fsdp (models/transforms/README.md, "FSDP2"): {units: [module patterns],
  // reshard_after_forward: true | false | all_but_last, sharded_dtype, reduce_dtype}.
  models::FsdpSpec read_fsdp(const YAML::Node& node) const {
    const std::string section = "parallelism.fsdp";
    require_map(node, section);
    check_keys(node, section, {"units", "reshard_after_forward", "sharded_dtype", "reduce_dtype"});
    models::FsdpSpec f;
    const YAML::Node units = required(node, "units", section);
    f.units = string_list(units, section + ".units");
    if (f.units.empty()) throw InputError(where(units.Mark()) + "'" + section + ".units' is empty; expected the module patterns fully_shard is applied to, e.g. [\"model.layers.*\"]");
    for (std::size_t i = 0; i < f.units.size(); ++i) {
      try {
        models::validate_module_pattern(f.units[i]);
      } catch (const InputError& e) {
        throw InputError(where(units[i].Mark()) + "'" + section + ".units': " + e.what());
      }
    }
    if (const YAML::Node r = node["reshard_after_forward"]) {
      const std::string value = scalar(r, section + ".reshard_after_forward");
      if (value == "true") {
        f.reshard_after_forward = models::FsdpSpec::Reshard::all;
      } else if (value == "false") {
        f.reshard_after_forward = models::FsdpSpec::Reshard::none;
      } else if (value == "all_but_last") {
        f.reshard_after_forward = models::FsdpSpec::Reshard::all_but_last;
      } else {
        throw InputError(where(r.Mark()) + "'" + section + ".reshard_after_forward' is '" + value +
                         "'; expected true, false or all_but_last (every unit but the last in forward order, as torchtitan does)");
      }
    }
    const auto dtype_bytes = [&](const char* key, int fallback) {
      const YAML::Node n = node[key];
      if (!n) return fallback;
      const std::string value = scalar(n, section + "." + key);
      if (value == "fp32") return 4;
      if (value == "bf16" || value == "fp16") return 2;
      throw InputError(where(n.Mark()) + "'" + section + "." + key + "' is '" + value + "'; expected fp32, bf16 or fp16");
    };
    f.sharded_parameter_bytes = dtype_bytes("sharded_dtype", 4);
    // Unset: MixedPrecisionPolicy's default (None): the gradients are reduced in their own dtype.
    f.reduce_bytes = dtype_bytes("reduce_dtype", 0);
    return f;
  }

  // parallelism.zero.offload_optimizer: DeepSpeed's keys (deepspeed/runtime/zero/offload_config.py)
  // and Deep Optimizer States' (the DataStates/DeepSpeed fork's offload_config.py). device: none
  // leaves the optimizer on the GPU, as in DeepSpeed.
  std::optional<models::OptimizerOffloadSpec> read_offload_optimizer(const YAML::Node& node, int stage) const {
    const std::string section = "parallelism.zero.offload_optimizer";
    require_map(node, section);
    check_keys(node, section, {"device", "ratio", "pin_memory", "prefetch_optimizer", "prefetch_optimizer_gap", "part_grads_async"});
    const YAML::Node device = required(node, "device", section);
    const std::string name = scalar(device, section + ".device");
    if (name == "none") return std::nullopt;
    if (name != "cpu") {
      throw InputError(where(device.Mark()) + "'" + section + ".device' is '" + name + "'; expected cpu or none (nvme is not modelled)");
    }
    models::OptimizerOffloadSpec o;
    if (const YAML::Node ratio = node["ratio"]) {
      o.ratio = number(ratio, section + ".ratio");
      if (!(o.ratio >= 0 && o.ratio <= 1)) throw InputError(where(ratio.Mark()) + "'" + section + ".ratio' is " + ratio.Scalar() + "; expected 0 to 1");
      if (o.ratio < 1 && stage != 3) {
        throw InputError(where(ratio.Mark()) + "'" + section + ".ratio' is " + ratio.Scalar() + " with ZeRO stage " + std::to_string(stage) +
                         "; expected 1 (DeepSpeed's Twin-Flow ratio is for stage 3 only)");
      }
    }
    // Host buffers are modelled as pinned (copies at the PCIe link's rate).
    if (const YAML::Node pin = node["pin_memory"]; pin && !boolean(pin, section + ".pin_memory")) {
      throw InputError(where(pin.Mark()) + "'" + section + ".pin_memory' is false; expected true (pageable host buffers are not modelled)");
    }
    if (node["part_grads_async"]) o.part_grads_async = boolean(node["part_grads_async"], section + ".part_grads_async");
    if (node["prefetch_optimizer"]) o.prefetch_optimizer = boolean(node["prefetch_optimizer"], section + ".prefetch_optimizer");
    if (const auto gap = optional_positive(node, "prefetch_optimizer_gap", section)) {
      if (*gap > 1'000'000) throw InputError(where(node["prefetch_optimizer_gap"].Mark()) + "'" + section + ".prefetch_optimizer_gap' is too large; expected at most 1000000");
      o.prefetch_optimizer_gap = static_cast<int>(*gap);
    }
    const bool fork_keys = o.prefetch_optimizer || o.part_grads_async;
    if (fork_keys && stage != 3) {
      throw InputError(where(node.Mark()) + "'" + section + "' uses Deep Optimizer States' keys with ZeRO stage " + std::to_string(stage) + "; expected stage 3");
    }
    if (o.prefetch_optimizer && o.ratio != 1) {
      throw InputError(where(node["ratio"].Mark()) + "'" + section + ".ratio' is " + node["ratio"].Scalar() + " with prefetch_optimizer; expected 1");
    }
    if (o.prefetch_optimizer && o.prefetch_optimizer_gap == 0) {
      throw InputError(where(node.Mark()) + "'" + section + "' has prefetch_optimizer but no prefetch_optimizer_gap; expected a gap k >= 1 (subgroup x is "
                       "stepped on the GPU when (x + 1) % k == 0)");
    }
    return o;
  }

  // data: {bytes_per_sample, decode_per_sample, workers_per_gpu, prefetch_factor, from} (sim/data_loader.hpp)
  DataSpec read_data(const YAML::Node& node) const {
    require_map(node, "data");
    check_keys(node, "data", {"bytes_per_sample", "decode_per_sample", "workers_per_gpu", "prefetch_factor", "from"});
    DataSpec data;
    data.bytes_per_sample = byte_count(required(node, "bytes_per_sample", "data"), "data.bytes_per_sample");
    // 0 to 1 s per sample: decoding an ImageNet JPEG takes milliseconds; a second per sample is
    // no training input pipeline.
    data.decode_seconds_per_sample =
        bounded_quantity(required(node, "decode_per_sample", "data"), models::units::Dimension::time, "data.decode_per_sample", {0, 1});
    // At most 1024 workers per GPU and a prefetch factor of 1024: a node has ~100 cores.
    const auto small_count = [&](const char* key, int fallback) {
      const std::int64_t value = optional_positive(node, key, "data").value_or(fallback);
      if (value > 1024) throw InputError(where(node[key].Mark()) + "'data." + key + "' is " + node[key].Scalar() + "; expected at most 1024");
      return static_cast<int>(value);
    };
    data.workers_per_gpu = small_count("workers_per_gpu", 1);
    data.prefetch_factor = small_count("prefetch_factor", 2);
    if (const YAML::Node from = node["from"]) data.from = storage_tier(from, "data.from");
    return data;
  }

  // checkpoint: {every, mode, host_cache, chunk, to, wait} (sim/checkpoint.hpp)
  CheckpointSpec read_checkpoint(const YAML::Node& node) const {
    require_map(node, "checkpoint");
    check_keys(node, "checkpoint", {"every", "mode", "host_cache", "chunk", "to", "wait"});
    CheckpointSpec spec;
    const std::int64_t every = optional_positive(node, "every", "checkpoint").value_or(0);
    if (every < 1 || every > 10'000'000) {
      throw InputError(where(node["every"] ? node["every"].Mark() : node.Mark()) +
                       "'checkpoint.every' must be given: iterations between checkpoints, from 1 to 10000000");
    }
    spec.every = static_cast<int>(every);
    if (const YAML::Node mode = node["mode"]) {
      const std::string text = scalar(mode, "checkpoint.mode");
      const auto parsed = parse_checkpoint_mode(text);
      if (!parsed) throw InputError(where(mode.Mark()) + "'checkpoint.mode' is '" + text + "'; expected sync or async");
      spec.mode = *parsed;
    }
    if (const YAML::Node cache = node["host_cache"]) spec.host_cache_bytes = byte_count(cache, "checkpoint.host_cache");
    if (const YAML::Node chunk = node["chunk"]) {
      spec.chunk_bytes = byte_count(chunk, "checkpoint.chunk");
      if (spec.chunk_bytes < 1) throw InputError(where(chunk.Mark()) + "'checkpoint.chunk' is 0; expected at least 1 byte");
    }
    if (spec.host_cache_bytes > 0 && spec.host_cache_bytes < spec.chunk_bytes) {
      throw InputError(where(node["host_cache"].Mark()) + "'checkpoint.host_cache' is smaller than checkpoint.chunk (" +
                       std::to_string(spec.chunk_bytes) + " bytes); expected a cache that holds at least one chunk");
    }
    if (spec.host_cache_bytes > 0 && spec.mode == CheckpointMode::sync) {
      throw InputError(where(node["host_cache"].Mark()) + "'checkpoint.host_cache' is for mode: async; a sync checkpoint has no host cache");
    }
    if (const YAML::Node to = node["to"]) spec.to = storage_tier(to, "checkpoint.to");
    if (const YAML::Node wait = node["wait"]) {
      const std::string text = scalar(wait, "checkpoint.wait");
      const auto parsed = parse_checkpoint_wait(text);
      if (!parsed) {
        throw InputError(where(wait.Mark()) + "'checkpoint.wait' is '" + text +
                         "'; expected step (the copies wait before the next optimizer step) or save (at the end of the save)");
      }
      if (spec.mode == CheckpointMode::sync) {
        throw InputError(where(wait.Mark()) + "'checkpoint.wait' is for mode: async; a sync checkpoint waits for all of its writes");
      }
      spec.wait = *parsed;
    }
    return spec;
  }

  StorageTier storage_tier(const YAML::Node& node, const std::string& field) const {
    const std::string text = scalar(node, field);
    const auto tier = parse_storage_tier(text);
    if (!tier) throw InputError(where(node.Mark()) + "'" + field + "' is '" + text + "'; expected shared (the parallel file system) or local (the node's disk)");
    return *tier;
  }

  PlanSection read_plan(const YAML::Node& node, const std::optional<models::Platform>& platform, const std::optional<ParallelismSection>& parallelism) const {
    require_map(node, "plan");
    check_keys(node, "plan", {"strategies", "margin", "max_batch", "target_global_batch", "memory_metric", "objective", "gpus", "nodes", "zero_stages",
                                "offload_optimizer", "prefetch_optimizer_gaps", "checkpoint_overhead", "energy_budget"});
    PlanSection plan;
    if (const YAML::Node budget = node["energy_budget"]) plan.energy_budget = read_energy_budget(budget, platform);
    if (const YAML::Node overhead = node["checkpoint_overhead"]) {
      const double value = number(overhead, "plan.checkpoint_overhead");
      if (!(value > 0 && value < 1)) {
        throw InputError(where(overhead.Mark()) + "'plan.checkpoint_overhead' is " + overhead.Scalar() +
                         "; expected a fraction of the iteration in (0, 1), e.g. 0.01");
      }
      plan.checkpoint_overhead = value;
    }
    if (const YAML::Node list = node["strategies"]) {
      if (!list.IsSequence() || list.size() == 0) {
        throw InputError(where(list.Mark()) + "'plan.strategies' must be a non-empty list of strategies (each like 'strategy': a name or a mapping with name and rules)");
      }
      for (std::size_t i = 0; i < list.size(); ++i) plan.strategies.push_back(read_strategy(list[i], "plan.strategies[" + std::to_string(i) + "]"));
    }
    if (const YAML::Node margin = node["margin"]) {
      const double value = number(margin, "plan.margin");
      if (!(value >= 0 && value < 1)) throw InputError(where(margin.Mark()) + "'plan.margin' is " + margin.Scalar() + "; expected a fraction in [0, 1), e.g. 0.05");
      plan.margin = value;
    }
    if (const YAML::Node metric = node["memory_metric"]) {
      const std::string text = scalar(metric, "plan.memory_metric");
      plan.memory_metric = parse_memory_metric(text);
      if (!plan.memory_metric) {
        throw InputError(where(metric.Mark()) + "'plan.memory_metric' is '" + text + "'; expected reserved (the default), allocated, exact or device");
      }
    }
    if (const YAML::Node objective = node["objective"]) {
      const std::string text = scalar(objective, "plan.objective");
      if (text == "samples_per_second") {
        plan.objective = PlanObjective::samples_per_second;
      } else if (text == "samples_per_joule") {
        plan.objective = PlanObjective::samples_per_joule;
      } else {
        throw InputError(where(objective.Mark()) + "'plan.objective' is '" + text + "'; expected samples_per_second (the default) or samples_per_joule");
      }
    }
    plan.max_batch = optional_positive(node, "max_batch", "plan");
    plan.target_global_batch = optional_positive(node, "target_global_batch", "plan");
    read_cluster_search(node, platform, parallelism, plan);
    return plan;
  }

  // plan.energy_budget: at least one bound, each a positive quantity; the platform must give its
  // GPUs' power (gpu.power), without which no point has an energy to hold against the budget.
  EnergyBudget read_energy_budget(const YAML::Node& node, const std::optional<models::Platform>& platform) const {
    require_map(node, "plan.energy_budget");
    check_keys(node, "plan.energy_budget", {"joules_per_sample", "gpu_average_power", "node_average_power"});
    if (node.size() == 0) {
      throw InputError(where(node.Mark()) + "'plan.energy_budget' is empty; expected at least one of joules_per_sample (e.g. 2.5 J), "
                       "gpu_average_power (e.g. 300 W) or node_average_power (e.g. 4 kW)");
    }
    using models::units::Dimension;
    EnergyBudget budget;
    if (const YAML::Node j = node["joules_per_sample"]) budget.joules_per_sample = bounded_quantity(j, Dimension::energy, "plan.energy_budget.joules_per_sample", {1e-9, 1e12});
    if (const YAML::Node w = node["gpu_average_power"]) budget.gpu_average_watts = bounded_quantity(w, Dimension::power, "plan.energy_budget.gpu_average_power", {1e-3, 1e6});
    if (const YAML::Node w = node["node_average_power"]) budget.node_average_watts = bounded_quantity(w, Dimension::power, "plan.energy_budget.node_average_power", {1e-3, 1e8});
    if (platform && !(platform->gpu.max_power > 0)) {
      throw InputError(where(node.Mark()) + "'plan.energy_budget' needs the GPU's power, but platform '" + platform->name +
                       "' gives no gpu.power; expected a platform with gpu.power {idle, max} (scenarios/platforms/README.md)");
    }
    return budget;
  }

  // plan.gpus or plan.nodes, and plan.zero_stages: lists of distinct integers. A GPU count up to
  // a node's GPUs is one node of that many; a larger one fills whole nodes.
  void read_cluster_search(const YAML::Node& node, const std::optional<models::Platform>& platform, const std::optional<ParallelismSection>& parallelism,
                           PlanSection& plan) const {
    const auto list = [&](const char* key, std::int64_t max) {
      std::vector<std::pair<int, YAML::Mark>> out;
      const YAML::Node n = node[key];
      if (!n) return out;
      const std::string field = std::string("plan.") + key;
      if (!n.IsSequence() || n.size() == 0) throw InputError(where(n.Mark()) + "'" + field + "' must be a non-empty list of integers, e.g. [8, 16, 32]");
      for (std::size_t i = 0; i < n.size(); ++i) {
        const std::string item = field + "[" + std::to_string(i) + "]";
        const int value = static_cast<int>(bounded_integer(n[i], item, key == std::string("zero_stages") ? 0 : 1, max));
        for (const auto& [seen, mark] : out) {
          if (seen == value) throw InputError(where(n[i].Mark()) + "'" + item + "' repeats " + std::to_string(value) + "; expected distinct values");
        }
        out.emplace_back(value, n[i].Mark());
      }
      return out;
    };
    constexpr std::int64_t kMaxGpus = 1'000'000;  // as in the parallelism section
    const auto gpus = list("gpus", kMaxGpus);
    const auto nodes = list("nodes", kMaxGpus);
    if (!gpus.empty() && !nodes.empty()) {
      throw InputError(where(node["nodes"].Mark()) + "'plan' has both 'gpus' and 'nodes'; expected one of them (GPU counts, or node counts of full nodes)");
    }
    const int per_node = parallelism ? parallelism->gpus_per_node : platform ? platform->gpus_per_node : 1;
    const std::string per_node_source = parallelism ? "parallelism.gpus_per_node" : platform ? "platform '" + platform->name + "'" : "one GPU per node";
    for (const auto& [count, mark] : gpus) {
      if (count > per_node && count % per_node != 0) {
        throw InputError(where(mark) + "'plan.gpus' has " + std::to_string(count) + " GPUs, which do not fill whole nodes of " + std::to_string(per_node) +
                         " (" + per_node_source + "); expected at most " + std::to_string(per_node) + " or a multiple of " + std::to_string(per_node));
      }
      plan.cluster_sizes.push_back(count <= per_node ? PlanSection::ClusterSize{1, count} : PlanSection::ClusterSize{count / per_node, per_node});
    }
    for (const auto& [count, mark] : nodes) {
      if (static_cast<std::int64_t>(count) * per_node > kMaxGpus) {
        throw InputError(where(mark) + "'plan.nodes' has " + std::to_string(count) + " nodes of " + std::to_string(per_node) + " GPUs; expected at most 1000000 GPUs");
      }
      plan.cluster_sizes.push_back({count, per_node});
    }
    if (platform) {
      const auto& marks = gpus.empty() ? nodes : gpus;
      for (std::size_t i = 0; i < marks.size(); ++i) {
        if (plan.cluster_sizes[i].nodes > platform->max_nodes()) {
          throw InputError(where(marks[i].second) + "'plan." + (gpus.empty() ? "nodes" : "gpus") + "' asks for " + std::to_string(plan.cluster_sizes[i].nodes) +
                           " nodes but platform '" + platform->name + "' has " + std::to_string(platform->max_nodes()) +
                           (platform->network ? " (network.nodes)" : " (no network)") + "; expected at most that");
        }
      }
    }
    if (parallelism && parallelism->data.fsdp) {
      for (const char* key : {"zero_stages", "offload_optimizer"}) {
        if (node[key]) {
          throw InputError(where(node[key].Mark()) + "'plan." + key + "' searches DeepSpeed configurations, but 'parallelism.fsdp' fixes PyTorch FSDP2; "
                                                      "expected no plan." + key + " with fsdp");
        }
      }
    }
    for (const auto& [stage, mark] : list("zero_stages", 3)) plan.zero_stages.push_back(stage);
    read_offload_search(node, parallelism, plan);
  }

  // plan.offload_optimizer: a list of none, cpu and deep_optimizer_states; the last one is tried
  // with every gap of plan.prefetch_optimizer_gaps (default kDefaultGaps), so the planner chooses k.
  void read_offload_search(const YAML::Node& node, const std::optional<ParallelismSection>& parallelism, PlanSection& plan) const {
    const YAML::Node list = node["offload_optimizer"];
    const YAML::Node gaps = node["prefetch_optimizer_gaps"];
    if (!list) {
      if (gaps) throw InputError(where(gaps.Mark()) + "'plan.prefetch_optimizer_gaps' without 'plan.offload_optimizer'; expected deep_optimizer_states in plan.offload_optimizer");
      return;
    }
    if (!list.IsSequence() || list.size() == 0) {
      throw InputError(where(list.Mark()) + "'plan.offload_optimizer' must be a non-empty list of none, cpu and deep_optimizer_states");
    }
    // Deep Optimizer States' gap k: subgroup x steps on the GPU when (x + 1) % k == 0. The paper
    // (Maurya et al., Middleware 2024) tunes k per model; these cover its range up to 1 in 8.
    static constexpr int kDefaultGaps[] = {2, 3, 4, 6, 8};
    std::vector<int> gap_values;
    if (gaps) {
      if (!gaps.IsSequence() || gaps.size() == 0) throw InputError(where(gaps.Mark()) + "'plan.prefetch_optimizer_gaps' must be a non-empty list of integers >= 1, e.g. [2, 4, 8]");
      for (std::size_t i = 0; i < gaps.size(); ++i) {
        const std::string item = "plan.prefetch_optimizer_gaps[" + std::to_string(i) + "]";
        const int value = static_cast<int>(bounded_integer(gaps[i], item, 1, 1'000'000));
        if (std::find(gap_values.begin(), gap_values.end(), value) != gap_values.end()) {
          throw InputError(where(gaps[i].Mark()) + "'" + item + "' repeats " + std::to_string(value) + "; expected distinct values");
        }
        gap_values.push_back(value);
      }
    } else {
      gap_values.assign(std::begin(kDefaultGaps), std::end(kDefaultGaps));
    }
    // The scenario's own offload keys that are not searched (part_grads_async) stay.
    models::OptimizerOffloadSpec base;
    if (parallelism && parallelism->data.offload_optimizer) base.part_grads_async = parallelism->data.offload_optimizer->part_grads_async;
    std::vector<std::string> seen;
    bool dos = false;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string item = "plan.offload_optimizer[" + std::to_string(i) + "]";
      const std::string name = scalar(list[i], item);
      if (std::find(seen.begin(), seen.end(), name) != seen.end()) throw InputError(where(list[i].Mark()) + "'" + item + "' repeats " + name + "; expected distinct values");
      seen.push_back(name);
      if (name == "none") {
        plan.offload_optimizer.emplace_back(std::nullopt);
      } else if (name == "cpu") {
        models::OptimizerOffloadSpec o = base;
        o.part_grads_async = false;  // a key of the Deep Optimizer States fork, not of DeepSpeed
        plan.offload_optimizer.emplace_back(o);
      } else if (name == "deep_optimizer_states") {
        dos = true;
        for (const int k : gap_values) {
          models::OptimizerOffloadSpec o = base;
          o.prefetch_optimizer = true;
          o.prefetch_optimizer_gap = k;
          plan.offload_optimizer.emplace_back(o);
        }
      } else {
        throw InputError(where(list[i].Mark()) + "'" + item + "' is '" + name + "'; expected none (the optimizer on the GPU), cpu (ZeRO-Offload) or "
                         "deep_optimizer_states (tried with each of plan.prefetch_optimizer_gaps)");
      }
    }
    if (gaps && !dos) throw InputError(where(gaps.Mark()) + "'plan.prefetch_optimizer_gaps' without deep_optimizer_states in 'plan.offload_optimizer'; expected it there");
  }

  models::StrategySpec read_strategy(const YAML::Node& node, const std::string& field) const {
    models::StrategySpec spec;
    if (node.IsScalar()) {
      // Shorthands for the plain strategies; anything with parameters is written as rules.
      spec.name = node.Scalar();
      if (spec.name == "baseline") return spec;
      models::StrategyRule rule;
      if (spec.name == "offload") {
        rule.action = models::OffloadAction{};
      } else if (spec.name == "recompute") {
        rule.action = models::RecomputeAction{};
      } else {
        throw InputError(where(node.Mark()) + "unknown strategy '" + spec.name +
                         "'; expected baseline, offload, recompute, or a mapping with name and rules");
      }
      spec.rules.push_back(rule);
      return spec;
    }
    if (!node.IsMap()) throw InputError(where(node.Mark()) + "'" + field + "' must be a name or a mapping with the keys name, rules");
    check_keys(node, field, {"name", "rules"});
    spec.name = node["name"] ? scalar(node["name"], field + ".name") : "custom";
    const YAML::Node rules = node["rules"];
    if (!rules || !rules.IsSequence()) {
      throw InputError(where(rules ? rules.Mark() : node.Mark()) + "'" + field + ".rules' must be a list of rules (each: select plus one of offload, recompute, compress)");
    }
    for (std::size_t i = 0; i < rules.size(); ++i) spec.rules.push_back(read_rule(rules[i], field + ".rules[" + std::to_string(i) + "]"));
    return spec;
  }

  models::StrategyRule read_rule(const YAML::Node& node, const std::string& field) const {
    if (!node.IsMap()) throw InputError(where(node.Mark()) + "'" + field + "' must be a mapping with select and one of offload, recompute, compress");
    check_keys(node, field, {"select", "offload", "recompute", "compress"});
    models::StrategyRule rule;
    const int actions = (node["offload"] ? 1 : 0) + (node["recompute"] ? 1 : 0) + (node["compress"] ? 1 : 0);
    if (actions != 1) throw InputError(where(node.Mark()) + "'" + field + "' needs exactly one of offload, recompute, compress");
    if (const YAML::Node select = node["select"]) rule.select = read_selector(select, field + ".select");
    if (const YAML::Node n = node["offload"]) {
      rule.action = read_offload(n, node, rule.select, field + ".offload");
    } else if (const YAML::Node r = node["recompute"]) {
      rule.action = read_recompute(r, field + ".recompute");
    } else {
      rule.action = read_compress(node["compress"], field + ".compress");
    }
    return rule;
  }

  models::OffloadAction read_offload(const YAML::Node& n, const YAML::Node& rule, models::TensorSelector& select, const std::string& f) const {
    models::OffloadAction action;
    if (n.IsNull()) return action;
    require_map(n, f);
    check_keys(n, f, {"policy", "lookahead", "synchronous", "stream", "host_memory", "free_by"});
    if (const YAML::Node policy = n["policy"]) {
      const std::string value = scalar(policy, f + ".policy");
      if (value != "all" && value != "conv") throw InputError(where(policy.Mark()) + "unknown offload policy '" + value + "'; expected all or conv");
      if (rule["select"]) throw InputError(where(policy.Mark()) + "give either 'policy' or 'select', not both");
      if (value == "conv") select.inputs_of = {traces::OpKind::conv};  // vDNN's conv policy
    }
    // A lookahead counts ops; more than a trace holds is a typo, and an int must hold it.
    if (n["lookahead"]) action.lookahead = static_cast<int>(bounded_integer(n["lookahead"], f + ".lookahead", 1, kMaxCount));
    if (n["synchronous"]) action.synchronous = boolean(n["synchronous"], f + ".synchronous");
    if (n["free_by"]) {
      action.free_by = static_cast<int>(bounded_integer(n["free_by"], f + ".free_by", 1, kMaxCount));
      if (action.synchronous) throw InputError(where(n["free_by"].Mark()) + "'" + f + ".free_by' does not combine with synchronous: true; expected one of them");
    }
    if (const YAML::Node s = n["stream"]) {
      const std::string value = scalar(s, f + ".stream");
      if (value != "copy" && value != "compute") throw InputError(where(s.Mark()) + "unknown offload stream '" + value + "'; expected copy or compute");
      action.stream = value == "copy" ? models::OffloadAction::Stream::copy : models::OffloadAction::Stream::compute;
      // On the compute stream the copies are where save_on_cpu puts them: a lookahead or the
      // synchronous mode would be silently ignored, so they are refused.
      if (action.stream == models::OffloadAction::Stream::compute) {
        for (const char* key : {"lookahead", "synchronous", "free_by"}) {
          if (n[key]) throw InputError(where(n[key].Mark()) + "'" + f + "." + key + "' applies to stream: copy only; expected no " + key + " with stream: compute");
        }
      }
    }
    if (const YAML::Node m = n["host_memory"]) {
      const std::string value = scalar(m, f + ".host_memory");
      if (value != "pinned" && value != "pageable") throw InputError(where(m.Mark()) + "unknown offload host_memory '" + value + "'; expected pinned or pageable");
      action.host_memory = value == "pinned" ? models::OffloadAction::HostMemory::pinned : models::OffloadAction::HostMemory::pageable;
    }
    return action;
  }

  models::RecomputeAction read_recompute(const YAML::Node& r, const std::string& f) const {
    models::RecomputeAction action;
    if (r.IsNull()) return action;
    require_map(r, f);
    check_keys(r, f, {"mode", "k", "budget", "keep", "blocks"});
    const std::string mode = r["mode"] ? scalar(r["mode"], f + ".mode") : "sqrt_n";
    if (mode == "sqrt_n") {
      action.mode = models::RecomputeAction::Mode::sqrt_n;
    } else if (mode == "every_k") {
      action.mode = models::RecomputeAction::Mode::every_k;
    } else if (mode == "budget") {
      action.mode = models::RecomputeAction::Mode::budget;
    } else if (mode == "checkpoints") {
      action.mode = models::RecomputeAction::Mode::checkpoints;
    } else if (mode == "all") {
      action.mode = models::RecomputeAction::Mode::all;
    } else if (mode == "selective") {
      action.mode = models::RecomputeAction::Mode::selective;
    } else {
      throw InputError(where(r["mode"].Mark()) + "unknown recompute mode '" + mode + "'; expected sqrt_n, every_k, budget, checkpoints, all or selective");
    }
    const bool keeps = action.mode == models::RecomputeAction::Mode::checkpoints || action.mode == models::RecomputeAction::Mode::selective;
    if (const YAML::Node keep = r["keep"]) {
      if (!keeps) throw InputError(where(keep.Mark()) + "'keep' applies to modes checkpoints and selective only");
      action.keep = string_list(keep, f + ".keep");
    } else if (action.mode == models::RecomputeAction::Mode::checkpoints) {
      throw InputError(where(r.Mark()) + "mode checkpoints needs 'keep': name patterns of the activations kept (block inputs), e.g. "
                                         "[\"bert.encoder.layer.*.output.LayerNorm.out\"]");
    } else if (action.mode == models::RecomputeAction::Mode::selective) {
      throw InputError(where(r.Mark()) + "mode selective needs 'keep': name patterns of the outputs the policy saves (MUST_SAVE) and of the block "
                                         "inputs, e.g. [\"model.layers.*.add_1.out\", \"model.layers.*.mlp.gate_proj.out\"]");
    }
    if (const YAML::Node blocks = r["blocks"]) {
      if (action.mode != models::RecomputeAction::Mode::selective) throw InputError(where(blocks.Mark()) + "'blocks' applies to mode selective only");
      action.blocks = string_list(blocks, f + ".blocks");
      for (std::size_t i = 0; i < action.blocks.size(); ++i) {
        try {
          models::validate_module_pattern(action.blocks[i]);
        } catch (const InputError& e) {
          throw InputError(where(blocks[i].Mark()) + "'" + f + ".blocks': " + e.what());
        }
      }
    } else if (action.mode == models::RecomputeAction::Mode::selective) {
      throw InputError(where(r.Mark()) + "mode selective needs 'blocks': module patterns of the checkpointed regions (one torch.utils.checkpoint "
                                         "call per module instance), e.g. [\"model.layers.*\"]");
    }
    if (const YAML::Node k = r["k"]) {
      if (action.mode != models::RecomputeAction::Mode::every_k) throw InputError(where(k.Mark()) + "'k' applies to mode every_k only");
      action.k = static_cast<int>(bounded_integer(k, f + ".k", 1, kMaxCount));
    }
    if (const YAML::Node budget = r["budget"]) {
      if (action.mode != models::RecomputeAction::Mode::budget) throw InputError(where(budget.Mark()) + "'budget' applies to mode budget only");
      action.budget_bytes = byte_count(budget, f + ".budget");
    } else if (action.mode == models::RecomputeAction::Mode::budget) {
      throw InputError(where(r.Mark()) + "mode budget needs 'budget' (bytes of saved activations allowed, e.g. 4 GiB)");
    }
    return action;
  }

  models::CompressAction read_compress(const YAML::Node& c, const std::string& f) const {
    require_map(c, f);
    check_keys(c, f, {"profile", "codec", "ratio", "compress_bandwidth", "decompress_bandwidth", "latency", "error_bound", "error_bound_mode",
                      "gradient_error_tolerance", "fallback_error_bound"});
    models::CompressAction action;
    const bool profiled = static_cast<bool>(c["profile"]);
    if (profiled) {
      // Costs from a calibration profile; any number given explicitly overrides its model.
      const YAML::Node p = c["profile"];
      try {
        const std::string spec = scalar(p, f + ".profile");
        action.profile = models::resolve_profile(spec, base_dir_, platform_name_);
        action.profile_auto = spec == "auto";
      } catch (const InputError& e) {
        throw InputError(where(p.Mark()) + "'" + f + ".profile': " + e.what());
      }
      if (c["codec"]) action.codec = scalar(c["codec"], f + ".codec");
      if (!action.profile->find(action.codec)) {
        std::string names;
        for (const auto& cp : action.profile->codecs) names += (names.empty() ? "" : ", ") + cp.codec;
        throw InputError(where(c["codec"] ? c["codec"].Mark() : p.Mark()) + "profile '" + action.profile->name + "' has no codec '" +
                         action.codec + "'; it has: " + names);
      }
      if (!c["error_bound"] && !c["ratio"]) {
        throw InputError(where(c.Mark()) + "'" + f + "' with a profile needs 'error_bound' (relative to the value range, e.g. 1e-3, or adaptive with gradient_error_tolerance), which picks the ratio");
      }
    } else if (c["codec"]) {
      throw InputError(where(c["codec"].Mark()) + "'" + f + ".codec' applies with 'profile' only (it picks the profile's models)");
    }
    // Without a profile the ratio and both bandwidths are required; with one each overrides.
    if (!profiled || c["ratio"]) {
      const YAML::Node ratio = required(c, "ratio", f);
      action.ratio = number(ratio, f + ".ratio");
      if (!(*action.ratio >= 1)) throw InputError(where(ratio.Mark()) + "'" + f + ".ratio' is " + ratio.Scalar() + "; expected a compression ratio >= 1");
    }
    // Codec throughputs from 1 kB/s to 1 PB/s, latencies up to 1 s: anything outside is a typo
    // that would otherwise become an absurd or infinite duration in the replay.
    const models::units::Bounds bandwidth{1e3, 1e15};
    if (!profiled || c["compress_bandwidth"]) {
      action.compress_bandwidth = bounded_quantity(required(c, "compress_bandwidth", f), models::units::Dimension::bandwidth, f + ".compress_bandwidth", bandwidth);
    }
    if (!profiled || c["decompress_bandwidth"]) {
      action.decompress_bandwidth =
          bounded_quantity(required(c, "decompress_bandwidth", f), models::units::Dimension::bandwidth, f + ".decompress_bandwidth", bandwidth);
    }
    if (c["latency"]) action.latency = bounded_quantity(c["latency"], models::units::Dimension::time, f + ".latency", {0, 1});
    if (const YAML::Node eb = c["error_bound"]; eb && eb.IsScalar() && eb.Scalar() == "adaptive") {
      action.adaptive = read_adaptive_bound(c, f, profiled);
    } else if (eb) {
      action.error_bound = number(eb, f + ".error_bound");
      if (!(action.error_bound > 0)) throw InputError(where(eb.Mark()) + "'" + f + ".error_bound' must be > 0 (or adaptive)");
    }
    for (const char* key : {"gradient_error_tolerance", "fallback_error_bound"}) {
      if (c[key] && !action.adaptive) throw InputError(where(c[key].Mark()) + "'" + f + "." + key + "' applies with 'error_bound: adaptive' only");
    }
    if (const YAML::Node mode = c["error_bound_mode"]) {
      const std::string m = scalar(mode, f + ".error_bound_mode");
      const auto parsed = parse_error_bound_mode(m);
      if (!parsed) {
        throw InputError(where(mode.Mark()) + "'" + f + ".error_bound_mode' is '" + m +
                         "'; expected rel (relative to each tensor's value range, the default) or abs (in the tensor's units)");
      }
      if (!profiled || !c["error_bound"]) {
        throw InputError(where(mode.Mark()) + "'" + f + ".error_bound_mode' applies with 'profile' and 'error_bound' only");
      }
      action.error_bound_mode = *parsed;
    }
    return action;
  }

  // `error_bound: adaptive` (models/README.md, "Gradient error of a compressed activation"): a
  // per-tensor bound from the trace's gradient statistics, within gradient_error_tolerance of each
  // conv/linear layer's weight gradient; fallback_error_bound for the tensors the model does not
  // cover. Checked here, at their lines, for what the rule alone decides; a trace without the
  // statistics is found when the strategy is built (models::build_schedule names the tensor).
  models::CompressAction::Adaptive read_adaptive_bound(const YAML::Node& c, const std::string& f, bool profiled) const {
    const YAML::Node eb = c["error_bound"];
    if (!profiled) {
      throw InputError(where(eb.Mark()) + "'" + f + ".error_bound: adaptive' needs 'profile': its ratio model turns each tensor's bound into a ratio");
    }
    if (c["ratio"]) {
      throw InputError(where(c["ratio"].Mark()) + "'" + f + ".ratio' with 'error_bound: adaptive'; expected no ratio (each tensor's bound picks its ratio from the profile)");
    }
    const std::string codec = c["codec"] ? c["codec"].Scalar() : std::string("szp");
    if (!models::codec_has_uniform_errors(codec)) {
      throw InputError(where(c["codec"] ? c["codec"].Mark() : eb.Mark()) + "'" + f + ".codec' is '" + codec +
                       "', but 'error_bound: adaptive' needs szp or szh (the codecs whose errors the gradient-error model describes: uniform quantisation, zeros exact)");
    }
    const YAML::Node tolerance = c["gradient_error_tolerance"];
    if (!tolerance) {
      throw InputError(where(eb.Mark()) + "'" + f + ".error_bound: adaptive' needs 'gradient_error_tolerance': the predicted weight-gradient error allowed, "
                                         "relative to each layer's weight-gradient RMS (e.g. 0.01)");
    }
    models::CompressAction::Adaptive adaptive;
    adaptive.tolerance = number(tolerance, f + ".gradient_error_tolerance");
    if (!(adaptive.tolerance > 0)) {
      throw InputError(where(tolerance.Mark()) + "'" + f + ".gradient_error_tolerance' is " + tolerance.Scalar() + "; expected a finite number > 0 (e.g. 0.01)");
    }
    if (const YAML::Node fallback = c["fallback_error_bound"]) {
      adaptive.fallback_error_bound = number(fallback, f + ".fallback_error_bound");
      if (!(*adaptive.fallback_error_bound > 0)) {
        throw InputError(where(fallback.Mark()) + "'" + f + ".fallback_error_bound' is " + fallback.Scalar() + "; expected a finite number > 0");
      }
    }
    return adaptive;
  }

  models::TensorSelector read_selector(const YAML::Node& node, const std::string& field) const {
    require_map(node, field);
    check_keys(node, field, {"inputs_of", "outputs_of", "min_bytes", "names", "modules"});
    models::TensorSelector selector;
    auto kinds = [&](const YAML::Node& list, const std::string& name) {
      std::vector<traces::OpKind> out;
      if (!list.IsSequence()) throw InputError(where(list.Mark()) + "'" + name + "' must be a list of op kinds, e.g. [conv, linear]");
      for (const auto& item : list) {
        const std::string text = scalar(item, name);
        auto kind = traces::parse_op_kind(text);
        if (!kind) {
          std::string valid;
          for (auto k : traces::all_op_kinds()) valid += (valid.empty() ? "" : ", ") + std::string(traces::to_string(k));
          throw InputError(where(item.Mark()) + "unknown op kind '" + text + "'; expected one of: " + valid);
        }
        out.push_back(*kind);
      }
      return out;
    };
    if (node["inputs_of"]) selector.inputs_of = kinds(node["inputs_of"], field + ".inputs_of");
    if (node["outputs_of"]) selector.outputs_of = kinds(node["outputs_of"], field + ".outputs_of");
    if (node["min_bytes"]) selector.min_bytes = byte_count(node["min_bytes"], field + ".min_bytes");
    if (const YAML::Node names = node["names"]) selector.names = string_list(names, field + ".names");
    if (const YAML::Node modules = node["modules"]) {
      // Module path patterns with numeric ranges (models/module_pattern.hpp), checked here once.
      selector.modules = string_list(modules, field + ".modules");
      for (std::size_t i = 0; i < selector.modules.size(); ++i) {
        try {
          models::validate_module_pattern(selector.modules[i]);
        } catch (const InputError& e) {
          throw InputError(where(modules[i].Mark()) + "'" + field + ".modules': " + e.what());
        }
      }
    }
    return selector;
  }

  // A non-empty list of tensor names or shell-style patterns (models::name_matches).
  std::vector<std::string> string_list(const YAML::Node& node, const std::string& field) const {
    if (!node.IsSequence() || node.size() == 0) {
      throw InputError(where(node.Mark()) + "'" + field +
                       "' must be a non-empty list of tensor names or patterns such as \"layer.*.out\" (comptrain trace show --json lists the names)");
    }
    std::vector<std::string> out;
    for (const auto& item : node) out.push_back(scalar(item, field));
    return out;
  }

  // model.moe: how many tokens each expert of a mixture-of-experts decoder receives
  // (zoo::ExpertRouting; traces/zoo/README.md, "Routed tokens"). The zoo checks them against the
  // architecture (expert count, top-k, seq_len) when it builds the trace.
  zoo::ExpertRouting read_expert_routing(const YAML::Node& node) const {
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

  void require_map(const YAML::Node& node, const std::string& field) const {
    if (!node.IsMap()) throw InputError(where(node.Mark()) + "'" + field + "' must be a mapping");
  }

  double number(const YAML::Node& node, const std::string& field) const {
    double value = 0;
    if (!node.IsScalar() || !YAML::convert<double>::decode(node, value) || !std::isfinite(value)) {
      throw InputError(where(node.Mark()) + "'" + field + "' is '" + (node.IsScalar() ? node.Scalar() : std::string("a collection")) + "'; expected a number");
    }
    return value;
  }

  // A quantity with a unit ("300 GB/s", "10 us"), within `bounds` (base units).
  double bounded_quantity(const YAML::Node& node, models::units::Dimension dimension, const std::string& field, models::units::Bounds bounds) const {
    const std::string text = scalar(node, field);
    try {
      return models::units::parse_quantity(text, dimension, bounds);
    } catch (const models::units::OutOfRange& e) {
      throw InputError(where(node.Mark()) + "'" + field + "' is " + e.written() + "; expected " + e.expected());
    } catch (const std::invalid_argument& e) {
      throw InputError(where(node.Mark()) + "'" + field + "': " + e.what());
    }
  }

  // Bytes held in an int64 ("4 GiB", "0"): at least 0, at most 2^63 - 1.
  std::int64_t byte_count(const YAML::Node& node, const std::string& field) const {
    const std::string text = scalar(node, field);
    try {
      return models::units::parse_byte_count(text);
    } catch (const models::units::OutOfRange& e) {
      throw InputError(where(node.Mark()) + "'" + field + "' is " + e.written() + "; expected " + e.expected());
    } catch (const std::invalid_argument& e) {
      throw InputError(where(node.Mark()) + "'" + field + "': " + e.what());
    }
  }

  // An integer in [min, max], checked before any narrowing: "k: 4294967299" must not run as 3.
  std::int64_t bounded_integer(const YAML::Node& node, const std::string& field, std::int64_t min, std::int64_t max) const {
    std::int64_t value = 0;
    if (!node.IsScalar() || !YAML::convert<std::int64_t>::decode(node, value) || value < min || value > max) {
      throw InputError(where(node.Mark()) + "'" + field + "' is '" + (node.IsScalar() ? node.Scalar() : std::string("a collection")) +
                       "'; expected an integer from " + std::to_string(min) + " to " + std::to_string(max));
    }
    return value;
  }

  bool boolean(const YAML::Node& node, const std::string& field) const {
    bool value = false;
    if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) {
      throw InputError(where(node.Mark()) + "'" + field + "' is '" + (node.IsScalar() ? node.Scalar() : std::string("a collection")) + "'; expected true or false");
    }
    return value;
  }

  std::string where(const YAML::Mark& mark) const { return yaml::location(source_, mark); }

  void check_keys(const YAML::Node& map, const std::string& section, std::initializer_list<const char*> valid) const {
    yaml::check_keys(source_, map, section, valid);
  }

  YAML::Node required(const YAML::Node& map, const char* key, const std::string& section) const {
    YAML::Node node = map[key];
    if (!node) throw InputError(where(map.Mark()) + "missing key '" + key + "' in " + section);
    return node;
  }

  std::string scalar(const YAML::Node& node, const std::string& field) const {
    if (!node.IsScalar() || node.Scalar().empty()) throw InputError(where(node.Mark()) + "'" + field + "' must be a non-empty string");
    return node.Scalar();
  }

  std::optional<std::int64_t> optional_positive(const YAML::Node& map, const char* key, const std::string& section) const {
    const YAML::Node node = map[key];
    if (!node) return std::nullopt;
    std::int64_t value = 0;
    if (!node.IsScalar() || !YAML::convert<std::int64_t>::decode(node, value) || value < 1) {
      throw InputError(where(node.Mark()) + "'" + section + "." + key + "' is '" + (node.IsScalar() ? node.Scalar() : std::string("a collection")) +
                       "'; expected a positive integer");
    }
    return value;
  }

  std::string source_;
  std::filesystem::path base_dir_;
  std::string platform_name_;  // the scenario's platform, once read (compress rules: profile auto)
  std::filesystem::path hf_config_;  // model.hf_config, once read (the scenario's default name)
};

}  // namespace

std::string_view to_string(MemoryMetric metric) {
  switch (metric) {
    case MemoryMetric::exact: return "exact";
    case MemoryMetric::allocated: return "allocated";
    case MemoryMetric::reserved: return "reserved";
    case MemoryMetric::device: return "device";
  }
  return "?";
}

std::optional<MemoryMetric> parse_memory_metric(std::string_view text) {
  for (MemoryMetric m : {MemoryMetric::exact, MemoryMetric::allocated, MemoryMetric::reserved, MemoryMetric::device}) {
    if (text == to_string(m)) return m;
  }
  return std::nullopt;
}

Scenario parse_scenario(std::string_view yaml, std::string_view source, const std::filesystem::path& base_dir) {
  ScenarioReader reader(source, base_dir);
  Scenario scenario = reader.read(reader.load(yaml));
  scenario.yaml = std::string(yaml);
  scenario.base_dir = base_dir;
  return scenario;
}

YAML::Node load_scenario_yaml(std::string_view yaml, std::string_view source) {
  return ScenarioReader(source, {}).load(yaml);
}

Scenario parse_scenario_node(const YAML::Node& root, std::string_view source, const std::filesystem::path& base_dir) {
  return ScenarioReader(source, base_dir).read(root);
}

Scenario load_scenario_file(const std::filesystem::path& path) {
  const std::string text = read_file(path);
  return parse_scenario(text, path.string(), path.parent_path());
}

Scenario default_scenario() {
  return parse_scenario(default_scenario_yaml(), "<embedded scenarios/default.yaml>", std::filesystem::current_path());
}

void set_platform(Scenario& scenario, models::Platform platform) {
  for (std::size_t i = 0; i < scenario.strategy.rules.size(); ++i) {
    models::CompressAction* compress = scenario.strategy.rules[i].compress();
    if (!compress || !compress->profile_auto) continue;
    const std::string where = scenario.source + ": strategy.rules[" + std::to_string(i) + "].compress.profile auto, platform " + platform.name;
    try {
      compress->profile = models::resolve_profile("auto", scenario.base_dir, platform.name);
    } catch (const InputError& e) {
      throw InputError(where + ": " + e.what());
    }
    if (!compress->profile->find(compress->codec)) {
      throw InputError(where + ": profile '" + compress->profile->name + "' has no codec '" + compress->codec + "'");
    }
  }
  if (scenario.power_limit) platform = models::with_power_limit(std::move(platform), *scenario.power_limit, scenario.source + ": power_limit");
  scenario.platform = std::move(platform);
}

const models::Platform& require_platform(const Scenario& scenario) {
  if (!scenario.platform) {
    std::string names;
    for (const auto& n : models::builtin_platform_names()) names += (names.empty() ? "" : ", ") + n;
    throw InputError(scenario.source + ": the scenario has no 'platform'; expected a shipped platform (" + names +
                     "), a platform file (.yaml) or an inline description");
  }
  return *scenario.platform;
}

}  // namespace comptrain::sim

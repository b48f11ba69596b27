#include "comptrain/models/strategy_yaml.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "comptrain/models/gradient_error.hpp"
#include "comptrain/models/module_pattern.hpp"
#include "comptrain/models/profile_yaml.hpp"
#include "comptrain/models/units.hpp"
#include "comptrain/support/error_bound.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/support/yaml_reader.hpp"

namespace comptrain::models {
namespace {

// Counts of ops (a lookahead, every k-th activation): no trace has more than a million ops per
// iteration, and the value must fit the int the strategy keeps.
constexpr std::int64_t kMaxCount = 1'000'000;

class StrategyReader : public yaml::Reader {
 public:
  StrategyReader(std::string_view source, std::filesystem::path base_dir, std::string_view platform_name)
      : yaml::Reader(source), base_dir_(std::move(base_dir)), platform_name_(platform_name) {}

  StrategySpec read_strategy(const YAML::Node& node, const std::string& field) const {
    StrategySpec spec;
    if (node.IsScalar()) {
      // Shorthands for the plain strategies; anything with parameters is written as rules.
      spec.name = node.Scalar();
      if (spec.name == "baseline") return spec;
      StrategyRule rule;
      if (spec.name == "offload") {
        rule.action = OffloadAction{};
      } else if (spec.name == "recompute") {
        rule.action = RecomputeAction{};
      } else {
        throw InputError(where(node.Mark()) + "unknown strategy '" + spec.name +
                         "'; expected baseline, offload, recompute, or a mapping with name and rules");
      }
      rule.location = where(node.Mark()) + field;
      spec.rules.push_back(rule);
      return spec;
    }
    if (!node.IsMap()) throw InputError(where(node.Mark()) + "'" + field + "' must be a name or a mapping with the keys name, rules");
    check_keys(node, field, {"name", "rules", "recompute", "first_stages"});
    spec.name = node["name"] ? scalar(node["name"], field + ".name") : "custom";
    if (const YAML::Node recompute = node["recompute"]) spec.layer_recompute = read_layer_recompute(recompute, field + ".recompute");
    const YAML::Node rules = node["rules"];
    // first_stages K: the rules on the first K pipeline stages only (StrategySpec::first_stages);
    // whether the run has K stages is checked once its layout is known (check_first_stages).
    if (const YAML::Node k = node["first_stages"]) {
      if (!rules) {
        throw InputError(where(k.Mark()) + "'" + field + ".first_stages' restricts the strategy's rules to the first pipeline stages, but it has no "
                                           "rules; expected rules beside it (compress, offload or recompute)");
      }
      spec.first_stages = static_cast<int>(bounded_integer(k, field + ".first_stages", 1, kMaxCount));
      spec.first_stages_location = where(k.Mark()) + field + ".first_stages";
    }
    if (!rules && spec.layer_recompute) return spec;
    if (!rules || !rules.IsSequence()) {
      throw InputError(where(rules ? rules.Mark() : node.Mark()) + "'" + field +
                       ".rules' must be a list of rules (each: select plus one of offload, recompute, compress), unless 'recompute' gives Megatron-LM's settings");
    }
    for (std::size_t i = 0; i < rules.size(); ++i) spec.rules.push_back(read_rule(rules[i], field + ".rules[" + std::to_string(i) + "]"));
    return spec;
  }

 private:
  // Megatron-LM's settings (strategy.hpp, LayerRecompute): granularity full|selective, with full
  // method uniform|block and num_layers, a number or one per pipeline stage. Megatron's own rules
  // (transformer_config.py, __post_init__): full needs a method and num_layers >= 1; selective
  // takes neither. Whether num_layers fits the stages is checked once the layers are known
  // (check_layer_recompute), at the lines recorded here.
  LayerRecompute read_layer_recompute(const YAML::Node& r, const std::string& f) const {
    if (!r.IsMap()) {
      throw InputError(where(r.Mark()) + "'" + f + "' must be a mapping with granularity (full or selective) and, with full, method and num_layers "
                                         "(Megatron-LM's --recompute-granularity, --recompute-method, --recompute-num-layers)");
    }
    check_keys(r, f, {"granularity", "method", "num_layers"});
    LayerRecompute out;
    out.location = where(r.Mark()) + f;
    const std::string granularity = scalar(required(r, "granularity", f), f + ".granularity");
    if (granularity == "full") {
      out.granularity = LayerRecompute::Granularity::full;
    } else if (granularity == "selective") {
      out.granularity = LayerRecompute::Granularity::selective;
    } else {
      throw InputError(where(r["granularity"].Mark()) + "'" + f + ".granularity' is '" + granularity +
                       "'; expected full (whole layers recomputed) or selective (the attention core)");
    }
    if (out.granularity == LayerRecompute::Granularity::selective) {
      for (const char* key : {"method", "num_layers"}) {
        if (r[key]) {
          throw InputError(where(r[key].Mark()) + "'" + f + "." + key + "' applies to granularity full only (Megatron-LM: selective recomputes the "
                                                   "attention core of every layer); expected no " + key + " with selective");
        }
      }
      return out;
    }
    if (!r["method"]) {
      throw InputError(where(r.Mark()) + "'" + f + "' with granularity full needs 'method': uniform (the layers in groups of num_layers, each "
                                         "group recomputed) or block (the first num_layers layers of each stage recomputed)");
    }
    const std::string method = scalar(r["method"], f + ".method");
    if (method == "uniform") {
      out.method = LayerRecompute::Method::uniform;
    } else if (method == "block") {
      out.method = LayerRecompute::Method::block;
    } else {
      throw InputError(where(r["method"].Mark()) + "'" + f + ".method' is '" + method + "'; expected uniform or block");
    }
    const YAML::Node n = r["num_layers"];
    if (!n) {
      throw InputError(where(r.Mark()) + "'" + f + "' with granularity full needs 'num_layers': layers per checkpoint (uniform) or layers recomputed "
                                         "per stage (block), one number or a list with one per pipeline stage");
    }
    out.num_layers_location = where(n.Mark()) + f + ".num_layers";
    // A layer count; no model has a million layers, and an int must hold it.
    if (n.IsSequence()) {
      if (n.size() == 0) throw InputError(where(n.Mark()) + "'" + f + ".num_layers' is an empty list; expected one number per pipeline stage");
      for (std::size_t i = 0; i < n.size(); ++i) {
        const std::string entry = f + ".num_layers[" + std::to_string(i) + "]";
        // 0 in a list: that stage recomputes nothing (the later stages, whose in-flight
        // micro-batches are fewer).
        out.num_layers.push_back(static_cast<int>(bounded_integer(n[i], entry, 0, kMaxCount)));
        out.num_layers_locations.push_back(where(n[i].Mark()) + entry);
      }
    } else {
      out.num_layers.push_back(static_cast<int>(bounded_integer(n, f + ".num_layers", 1, kMaxCount)));
      out.num_layers_locations.push_back(out.num_layers_location);
    }
    return out;
  }

  StrategyRule read_rule(const YAML::Node& node, const std::string& field) const {
    if (!node.IsMap()) throw InputError(where(node.Mark()) + "'" + field + "' must be a mapping with select and one of offload, recompute, compress");
    check_keys(node, field, {"select", "offload", "recompute", "compress"});
    StrategyRule rule;
    // "SOURCE:LINE:COLUMN: FIELD", for the errors found once a trace meets the rule (rule_context).
    rule.location = where(node.Mark()) + field;
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

  OffloadAction read_offload(const YAML::Node& n, const YAML::Node& rule, TensorSelector& select, const std::string& f) const {
    OffloadAction action;
    if (n.IsNull()) return action;
    require_map(n, f);
    check_keys(n, f, {"policy", "lookahead", "synchronous", "stream", "host_memory", "free_by", "stash"});
    if (const YAML::Node policy = n["policy"]) {
      const std::string value = scalar(policy, f + ".policy");
      if (value != "all" && value != "conv") throw InputError(where(policy.Mark()) + "unknown offload policy '" + value + "'; expected all or conv");
      if (rule["select"]) throw InputError(where(policy.Mark()) + "give either 'policy' or 'select', not both");
      if (value == "conv") select.inputs_of = {traces::OpKind::conv};  // vDNN's conv policy
    }
    // A lookahead counts ops; more than a trace holds is a typo, and an int must hold it.
    if (n["lookahead"]) action.lookahead = static_cast<int>(bounded_integer(n["lookahead"], f + ".lookahead", 0, kMaxCount));
    if (n["synchronous"]) action.synchronous = boolean(n["synchronous"], f + ".synchronous");
    if (n["free_by"]) {
      action.free_by = static_cast<int>(bounded_integer(n["free_by"], f + ".free_by", 1, kMaxCount));
      if (action.synchronous) throw InputError(where(n["free_by"].Mark()) + "'" + f + ".free_by' does not combine with synchronous: true; expected one of them");
    }
    if (n["stash"]) {
      action.stash = static_cast<int>(bounded_integer(n["stash"], f + ".stash", 1, kMaxCount));
      for (const char* key : {"synchronous", "free_by"}) {
        if (n[key]) throw InputError(where(n["stash"].Mark()) + "'" + f + ".stash' does not combine with " + key + "; expected one of them");
      }
    }
    if (const YAML::Node s = n["stream"]) {
      const std::string value = scalar(s, f + ".stream");
      if (value != "copy" && value != "compute") throw InputError(where(s.Mark()) + "unknown offload stream '" + value + "'; expected copy or compute");
      action.stream = value == "copy" ? OffloadAction::Stream::copy : OffloadAction::Stream::compute;
      // On the compute stream the copies are where save_on_cpu puts them: a lookahead or the
      // synchronous mode would be silently ignored, so they are refused.
      if (action.stream == OffloadAction::Stream::compute) {
        for (const char* key : {"lookahead", "synchronous", "free_by", "stash"}) {
          if (n[key]) throw InputError(where(n[key].Mark()) + "'" + f + "." + key + "' applies to stream: copy only; expected no " + key + " with stream: compute");
        }
      }
    }
    if (const YAML::Node m = n["host_memory"]) {
      const std::string value = scalar(m, f + ".host_memory");
      if (value != "pinned" && value != "pageable") throw InputError(where(m.Mark()) + "unknown offload host_memory '" + value + "'; expected pinned or pageable");
      action.host_memory = value == "pinned" ? OffloadAction::HostMemory::pinned : OffloadAction::HostMemory::pageable;
    }
    return action;
  }

  RecomputeAction read_recompute(const YAML::Node& r, const std::string& f) const {
    RecomputeAction action;
    if (r.IsNull()) return action;
    require_map(r, f);
    check_keys(r, f, {"mode", "k", "budget", "keep", "blocks"});
    const std::string mode = r["mode"] ? scalar(r["mode"], f + ".mode") : "sqrt_n";
    if (mode == "sqrt_n") {
      action.mode = RecomputeAction::Mode::sqrt_n;
    } else if (mode == "every_k") {
      action.mode = RecomputeAction::Mode::every_k;
    } else if (mode == "budget") {
      action.mode = RecomputeAction::Mode::budget;
    } else if (mode == "checkpoints") {
      action.mode = RecomputeAction::Mode::checkpoints;
    } else if (mode == "all") {
      action.mode = RecomputeAction::Mode::all;
    } else if (mode == "selective") {
      action.mode = RecomputeAction::Mode::selective;
    } else {
      throw InputError(where(r["mode"].Mark()) + "unknown recompute mode '" + mode + "'; expected sqrt_n, every_k, budget, checkpoints, all or selective");
    }
    const bool keeps = action.mode == RecomputeAction::Mode::checkpoints || action.mode == RecomputeAction::Mode::selective;
    if (const YAML::Node keep = r["keep"]) {
      if (!keeps) throw InputError(where(keep.Mark()) + "'keep' applies to modes checkpoints and selective only");
      action.keep = string_list(keep, f + ".keep");
    } else if (action.mode == RecomputeAction::Mode::checkpoints) {
      throw InputError(where(r.Mark()) + "mode checkpoints needs 'keep': name patterns of the activations kept (block inputs), e.g. "
                                         "[\"bert.encoder.layer.*.output.LayerNorm.out\"]");
    } else if (action.mode == RecomputeAction::Mode::selective) {
      throw InputError(where(r.Mark()) + "mode selective needs 'keep': name patterns of the outputs the policy saves (MUST_SAVE) and of the block "
                                         "inputs, e.g. [\"model.layers.*.add_1.out\", \"model.layers.*.mlp.gate_proj.out\"]");
    }
    if (const YAML::Node blocks = r["blocks"]) {
      if (action.mode != RecomputeAction::Mode::selective) throw InputError(where(blocks.Mark()) + "'blocks' applies to mode selective only");
      action.blocks = string_list(blocks, f + ".blocks");
      for (std::size_t i = 0; i < action.blocks.size(); ++i) {
        try {
          validate_module_pattern(action.blocks[i]);
        } catch (const InputError& e) {
          throw InputError(where(blocks[i].Mark()) + "'" + f + ".blocks': " + e.what());
        }
      }
    } else if (action.mode == RecomputeAction::Mode::selective) {
      throw InputError(where(r.Mark()) + "mode selective needs 'blocks': module patterns of the checkpointed regions (one torch.utils.checkpoint "
                                         "call per module instance), e.g. [\"model.layers.*\"]");
    }
    if (const YAML::Node k = r["k"]) {
      if (action.mode != RecomputeAction::Mode::every_k) throw InputError(where(k.Mark()) + "'k' applies to mode every_k only");
      action.k = static_cast<int>(bounded_integer(k, f + ".k", 1, kMaxCount));
    }
    if (const YAML::Node budget = r["budget"]) {
      if (action.mode != RecomputeAction::Mode::budget) throw InputError(where(budget.Mark()) + "'budget' applies to mode budget only");
      action.budget_bytes = byte_count(budget, f + ".budget");
    } else if (action.mode == RecomputeAction::Mode::budget) {
      throw InputError(where(r.Mark()) + "mode budget needs 'budget' (bytes of saved activations allowed, e.g. 4 GiB)");
    }
    return action;
  }

  CompressAction read_compress(const YAML::Node& c, const std::string& f) const {
    require_map(c, f);
    check_keys(c, f, {"profile", "codec", "ratio", "compress_bandwidth", "decompress_bandwidth", "latency", "error_bound", "error_bound_mode",
                      "gradient_error_tolerance", "fallback_error_bound", "positive_mask"});
    CompressAction action;
    const bool profiled = static_cast<bool>(c["profile"]);
    if (profiled) {
      // Costs from a calibration profile; any number given explicitly overrides its model.
      const YAML::Node p = c["profile"];
      try {
        const std::string spec = scalar(p, f + ".profile");
        action.profile = resolve_profile(spec, base_dir_, platform_name_);
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
    const units::Bounds bandwidth{1e3, 1e15};
    if (!profiled || c["compress_bandwidth"]) {
      action.compress_bandwidth = bounded_quantity(required(c, "compress_bandwidth", f), units::Dimension::bandwidth, f + ".compress_bandwidth", bandwidth);
    }
    if (!profiled || c["decompress_bandwidth"]) {
      action.decompress_bandwidth =
          bounded_quantity(required(c, "decompress_bandwidth", f), units::Dimension::bandwidth, f + ".decompress_bandwidth", bandwidth);
    }
    if (c["latency"]) action.latency = bounded_quantity(c["latency"], units::Dimension::time, f + ".latency", {0, 1});
    if (const YAML::Node eb = c["error_bound"]; eb && eb.IsScalar() && eb.Scalar() == "adaptive") {
      action.adaptive = read_adaptive_bound(c, f, profiled);
    } else if (eb) {
      action.error_bound = number(eb, f + ".error_bound");
      if (!(action.error_bound > 0)) throw InputError(where(eb.Mark()) + "'" + f + ".error_bound' must be > 0 (or adaptive)");
    }
    for (const char* key : {"gradient_error_tolerance", "fallback_error_bound"}) {
      if (c[key] && !action.adaptive) throw InputError(where(c[key].Mark()) + "'" + f + "." + key + "' applies with 'error_bound: adaptive' only");
    }
    action.positive_mask = action.adaptive ? CompressAction::PositiveMask::relu : CompressAction::PositiveMask::none;
    if (const YAML::Node mask = c["positive_mask"]) {
      const std::string m = scalar(mask, f + ".positive_mask");
      if (m == "relu") {
        action.positive_mask = CompressAction::PositiveMask::relu;
      } else if (m == "true") {
        action.positive_mask = CompressAction::PositiveMask::all;
      } else if (m == "false") {
        action.positive_mask = CompressAction::PositiveMask::none;
      } else {
        throw InputError(where(mask.Mark()) + "'" + f + ".positive_mask' is '" + m +
                         "'; expected relu (keep the sign of the tensors a ReLU's backward reads), true (of every tensor) or false");
      }
      if (action.positive_mask != CompressAction::PositiveMask::none && (!profiled || !codec_has_uniform_errors(action.codec))) {
        throw InputError(where(mask.Mark()) + "'" + f + ".positive_mask' needs 'profile' and codec szp or szh (got " +
                         (profiled ? "codec '" + action.codec + "'" : std::string("no profile")) + "): the kernels keep the mask beside those streams only");
      }
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
  // statistics is found when the strategy is built (build_schedule names the tensor).
  CompressAction::Adaptive read_adaptive_bound(const YAML::Node& c, const std::string& f, bool profiled) const {
    const YAML::Node eb = c["error_bound"];
    if (!profiled) {
      throw InputError(where(eb.Mark()) + "'" + f + ".error_bound: adaptive' needs 'profile': its ratio model turns each tensor's bound into a ratio");
    }
    if (c["ratio"]) {
      throw InputError(where(c["ratio"].Mark()) + "'" + f + ".ratio' with 'error_bound: adaptive'; expected no ratio (each tensor's bound picks its ratio from the profile)");
    }
    const std::string codec = c["codec"] ? c["codec"].Scalar() : std::string("szp");
    if (!codec_has_uniform_errors(codec)) {
      throw InputError(where(c["codec"] ? c["codec"].Mark() : eb.Mark()) + "'" + f + ".codec' is '" + codec +
                       "', but 'error_bound: adaptive' needs szp or szh (the codecs whose errors the gradient-error model describes: uniform quantisation, zeros exact)");
    }
    const YAML::Node tolerance = c["gradient_error_tolerance"];
    if (!tolerance) {
      throw InputError(where(eb.Mark()) + "'" + f + ".error_bound: adaptive' needs 'gradient_error_tolerance': the predicted weight-gradient error allowed, "
                                         "relative to each layer's weight-gradient RMS (e.g. 0.01)");
    }
    CompressAction::Adaptive adaptive;
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

  TensorSelector read_selector(const YAML::Node& node, const std::string& field) const {
    require_map(node, field);
    check_keys(node, field, {"inputs_of", "outputs_of", "min_bytes", "names", "modules"});
    TensorSelector selector;
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
          validate_module_pattern(selector.modules[i]);
        } catch (const InputError& e) {
          throw InputError(where(modules[i].Mark()) + "'" + field + ".modules': " + e.what());
        }
      }
    }
    return selector;
  }

  // A non-empty list of tensor names or shell-style patterns (name_matches).
  std::vector<std::string> string_list(const YAML::Node& node, const std::string& field) const {
    if (!node.IsSequence() || node.size() == 0) {
      throw InputError(where(node.Mark()) + "'" + field +
                       "' must be a non-empty list of tensor names or patterns such as \"layer.*.out\" (`comptrain trace names SCENARIO` lists them)");
    }
    std::vector<std::string> out;
    for (const auto& item : node) out.push_back(scalar(item, field));
    return out;
  }

  // A quantity with a unit ("300 GB/s", "10 us"), within `bounds` (base units).
  double bounded_quantity(const YAML::Node& node, units::Dimension dimension, const std::string& field, units::Bounds bounds) const {
    return parsed<units::OutOfRange>(node, field, [&](const std::string& text) { return units::parse_quantity(text, dimension, bounds); });
  }

  // Bytes held in an int64 ("4 GiB", "0"): at least 0, at most 2^63 - 1.
  std::int64_t byte_count(const YAML::Node& node, const std::string& field) const {
    return parsed<units::OutOfRange>(node, field, [](const std::string& text) { return units::parse_byte_count(text); });
  }

  std::filesystem::path base_dir_;
  std::string platform_name_;  // the scenario's platform (compress rules: profile auto)
};

}  // namespace

std::string_view to_string(CompressAction::PositiveMask mask) {
  switch (mask) {
    case CompressAction::PositiveMask::none: return "false";
    case CompressAction::PositiveMask::relu: return "relu";
    case CompressAction::PositiveMask::all: return "true";
  }
  return "false";
}

StrategySpec read_strategy(const YAML::Node& node, std::string_view source, const std::string& field, const std::filesystem::path& base_dir,
                           std::string_view platform_name) {
  return StrategyReader(source, base_dir, platform_name).read_strategy(node, field);
}

namespace {

std::string_view mode_name(RecomputeAction::Mode mode) {
  switch (mode) {
    case RecomputeAction::Mode::every_k: return "every_k";
    case RecomputeAction::Mode::sqrt_n: return "sqrt_n";
    case RecomputeAction::Mode::budget: return "budget";
    case RecomputeAction::Mode::checkpoints: return "checkpoints";
    case RecomputeAction::Mode::all: return "all";
    case RecomputeAction::Mode::selective: return "selective";
  }
  throw std::logic_error("strategy_to_yaml: unknown recompute mode");
}

void write_selector(YAML::Emitter& out, const TensorSelector& select) {
  out << YAML::BeginMap;
  for (const auto& [key, kinds] : {std::pair{"inputs_of", &select.inputs_of}, std::pair{"outputs_of", &select.outputs_of}}) {
    if (kinds->empty()) continue;
    std::vector<std::string> names;
    for (const traces::OpKind kind : *kinds) names.emplace_back(traces::to_string(kind));
    out << YAML::Key << key << YAML::Value << YAML::Flow << names;
  }
  // Byte counts carry their unit: the reader takes a bare number for 0 only.
  if (select.min_bytes != 0) out << YAML::Key << "min_bytes" << YAML::Value << fmt::format("{} B", select.min_bytes);
  if (!select.names.empty()) out << YAML::Key << "names" << YAML::Value << YAML::Flow << select.names;
  if (!select.modules.empty()) out << YAML::Key << "modules" << YAML::Value << YAML::Flow << select.modules;
  out << YAML::EndMap;
}

void write_offload(YAML::Emitter& out, const OffloadAction& o) {
  out << YAML::Key << "offload" << YAML::Value << YAML::Flow << YAML::BeginMap;
  // On the compute stream the reader refuses the copy stream's keys, so they are left out.
  if (o.stream == OffloadAction::Stream::compute) {
    out << YAML::Key << "stream" << YAML::Value << "compute";
  } else {
    out << YAML::Key << "lookahead" << YAML::Value << o.lookahead;
    if (o.synchronous) out << YAML::Key << "synchronous" << YAML::Value << true;
    if (o.free_by) out << YAML::Key << "free_by" << YAML::Value << *o.free_by;
    if (o.stash) out << YAML::Key << "stash" << YAML::Value << *o.stash;
  }
  if (o.host_memory == OffloadAction::HostMemory::pageable) out << YAML::Key << "host_memory" << YAML::Value << "pageable";
  out << YAML::EndMap;
}

void write_recompute(YAML::Emitter& out, const RecomputeAction& r) {
  out << YAML::Key << "recompute" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "mode" << YAML::Value << std::string(mode_name(r.mode));
  if (r.mode == RecomputeAction::Mode::every_k) out << YAML::Key << "k" << YAML::Value << r.k;
  if (r.mode == RecomputeAction::Mode::budget) out << YAML::Key << "budget" << YAML::Value << fmt::format("{} B", r.budget_bytes);
  if (!r.keep.empty()) out << YAML::Key << "keep" << YAML::Value << r.keep;
  if (!r.blocks.empty()) out << YAML::Key << "blocks" << YAML::Value << r.blocks;
  out << YAML::EndMap;
}

void write_compress(YAML::Emitter& out, const CompressAction& c) {
  out << YAML::Key << "compress" << YAML::Value << YAML::Flow << YAML::BeginMap;
  if (c.profile) {
    const std::string& source = c.profile->source;
    const std::string embedded = "embedded:";
    out << YAML::Key << "profile" << YAML::Value << (c.profile_auto ? std::string("auto") : source.rfind(embedded, 0) == 0 ? source.substr(embedded.size()) : source);
    out << YAML::Key << "codec" << YAML::Value << c.codec;
  }
  // Shortest round-trip decimal forms, in the units the reader takes.
  auto number = [&](const char* key, const std::optional<double>& v, const char* unit) {
    if (v) out << YAML::Key << key << YAML::Value << fmt::format("{}{}", *v, unit);
  };
  number("ratio", c.ratio, "");
  number("compress_bandwidth", c.compress_bandwidth, " B/s");
  number("decompress_bandwidth", c.decompress_bandwidth, " B/s");
  number("latency", c.latency, " s");
  if (c.adaptive) {
    out << YAML::Key << "error_bound" << YAML::Value << "adaptive" << YAML::Key << "gradient_error_tolerance" << YAML::Value << fmt::format("{}", c.adaptive->tolerance);
    if (c.adaptive->fallback_error_bound) out << YAML::Key << "fallback_error_bound" << YAML::Value << fmt::format("{}", *c.adaptive->fallback_error_bound);
  } else if (c.error_bound > 0) {
    // 0 is "not given" (a rule costed by its explicit ratio), which the reader refuses as a bound.
    out << YAML::Key << "error_bound" << YAML::Value << fmt::format("{}", c.error_bound);
  }
  if (c.profile && (c.adaptive || c.error_bound > 0)) out << YAML::Key << "error_bound_mode" << YAML::Value << (c.error_bound_mode == ErrorBoundMode::abs ? "abs" : "rel");
  // Written where it differs from the reader's default (relu when adaptive, false otherwise).
  if (c.positive_mask != (c.adaptive ? CompressAction::PositiveMask::relu : CompressAction::PositiveMask::none)) {
    out << YAML::Key << "positive_mask" << YAML::Value << std::string(to_string(c.positive_mask));
  }
  out << YAML::EndMap;
}

}  // namespace

std::string strategy_to_yaml(const StrategySpec& strategy, const std::string& comment) {
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << strategy.name;
  if (const auto& r = strategy.layer_recompute) {
    const bool full = r->granularity == LayerRecompute::Granularity::full;
    out << YAML::Key << "recompute" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "granularity" << YAML::Value
        << (full ? "full" : "selective");
    if (full) {
      out << YAML::Key << "method" << YAML::Value << (r->method == LayerRecompute::Method::uniform ? "uniform" : "block");
      out << YAML::Key << "num_layers" << YAML::Value;
      if (r->num_layers.size() == 1) {
        out << r->num_layers.front();
      } else {
        out << YAML::Flow << r->num_layers;
      }
    }
    out << YAML::EndMap;
  }
  if (strategy.first_stages) out << YAML::Key << "first_stages" << YAML::Value << *strategy.first_stages;
  out << YAML::Key << "rules" << YAML::Value << YAML::BeginSeq;
  for (const StrategyRule& rule : strategy.rules) {
    out << YAML::BeginMap << YAML::Key << "select" << YAML::Value;
    write_selector(out, rule.select);
    if (const auto* o = rule.offload()) {
      write_offload(out, *o);
    } else if (const auto* r = rule.recompute()) {
      write_recompute(out, *r);
    } else if (const auto* c = rule.compress()) {
      write_compress(out, *c);
    }
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
  std::string text;
  for (std::size_t start = 0; start < comment.size();) {
    const std::size_t end = comment.find('\n', start);
    text += "# " + comment.substr(start, end == std::string::npos ? std::string::npos : end - start) + "\n";
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return text + out.c_str() + "\n";
}

}  // namespace comptrain::models

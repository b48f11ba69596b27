#include "comptrain/sim/scenario.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "comptrain/support/atomic_file.hpp"
#include "comptrain/traces/trace_json.hpp"

namespace comptrain::sim {
namespace {

// Reads one YAML document and reports every problem as "SOURCE:LINE:COLUMN: message".
class ScenarioReader {
 public:
  ScenarioReader(std::string_view source, std::filesystem::path base_dir)
      : source_(source), base_dir_(std::move(base_dir)) {}

  Scenario read(std::string_view text) {
    YAML::Node root;
    try {
      root = YAML::Load(std::string(text));
    } catch (const YAML::Exception& e) {
      throw InputError(where(e.mark) + "malformed YAML: " + e.msg);
    }
    if (!root.IsMap()) {
      throw InputError(where(root.Mark()) + "expected a mapping with the keys model, training (and optionally name)");
    }
    check_keys(root, "the scenario", {"name", "model", "training"});

    Scenario scenario;
    scenario.source = source_;
    const YAML::Node model = required(root, "model", "the scenario");
    if (!model.IsMap()) throw InputError(where(model.Mark()) + "'model' must be a mapping with the key zoo or trace");
    check_keys(model, "model", {"zoo", "trace", "layers", "hidden", "heads", "seq_len", "vocab"});
    const YAML::Node training = root["training"];
    if (training && !training.IsMap()) {
      throw InputError(where(training.Mark()) + "'training' must be a mapping with the keys batch_size, precision, optimizer");
    }
    if (training) check_keys(training, "training", {"batch_size", "precision", "optimizer"});

    const bool has_zoo = static_cast<bool>(model["zoo"]);
    const bool has_trace = static_cast<bool>(model["trace"]);
    if (has_zoo == has_trace) {
      throw InputError(where(model.Mark()) + "'model' needs exactly one of 'zoo' (a model name: comptrain trace list) or 'trace' (a trace file)");
    }
    if (has_zoo) {
      zoo::ModelRequest request;
      request.model = scalar(model["zoo"], "model.zoo");
      const auto models = zoo::list_models();
      if (std::none_of(models.begin(), models.end(), [&](const auto& m) { return m.name == request.model; })) {
        std::string names;
        for (const auto& m : models) names += (names.empty() ? "" : ", ") + m.name;
        throw InputError(where(model["zoo"].Mark()) + "unknown zoo model '" + request.model + "'; expected one of: " + names);
      }
      request.layers = optional_positive(model, "layers", "model");
      request.hidden = optional_positive(model, "hidden", "model");
      request.heads = optional_positive(model, "heads", "model");
      request.seq_len = optional_positive(model, "seq_len", "model");
      request.vocab = optional_positive(model, "vocab", "model");
      if (training) {
        if (auto batch = optional_positive(training, "batch_size", "training")) request.batch_size = *batch;
        if (const YAML::Node p = training["precision"]) {
          auto value = zoo::parse_precision(scalar(p, "training.precision"));
          if (!value) throw InputError(where(p.Mark()) + "unknown precision '" + p.Scalar() + "'; expected fp32 or mixed");
          request.precision = *value;
        }
        if (const YAML::Node o = training["optimizer"]) {
          auto value = zoo::parse_optimizer(scalar(o, "training.optimizer"));
          if (!value) throw InputError(where(o.Mark()) + "unknown optimizer '" + o.Scalar() + "'; expected sgd, momentum or adam");
          request.optimizer = *value;
        }
      }
      scenario.batch_size = request.batch_size;
      scenario.zoo_model = std::move(request);
    } else {
      for (const char* key : {"layers", "hidden", "heads", "seq_len", "vocab"}) {
        if (model[key]) throw InputError(where(model[key].Mark()) + "'" + key + "' applies to zoo models only; a trace file fixes the model's shape");
      }
      std::filesystem::path path = scalar(model["trace"], "model.trace");
      scenario.trace_file = path.is_absolute() ? path : base_dir_ / path;
      if (training) {
        for (const char* key : {"precision", "optimizer"}) {
          if (training[key]) throw InputError(where(training[key].Mark()) + "'" + key + "' applies to zoo models only; a trace file fixes it");
        }
        scenario.batch_size = optional_positive(training, "batch_size", "training");
      }
    }
    if (const YAML::Node name = root["name"]) {
      scenario.name = scalar(name, "name");
    } else {
      scenario.name = has_zoo ? scenario.zoo_model->model : scenario.trace_file->stem().string();
    }
    return scenario;
  }

 private:
  std::string where(const YAML::Mark& mark) const {
    if (mark.is_null()) return source_ + ": ";
    return source_ + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1) + ": ";
  }

  void check_keys(const YAML::Node& map, const std::string& section, std::initializer_list<const char*> valid) const {
    std::set<std::string> seen;
    for (const auto& entry : map) {
      const std::string key = entry.first.as<std::string>("");
      const bool known = std::any_of(valid.begin(), valid.end(), [&](const char* v) { return key == v; });
      if (!known) {
        std::string list;
        for (const char* v : valid) list += (list.empty() ? "" : ", ") + std::string(v);
        throw InputError(where(entry.first.Mark()) + "unknown key '" + key + "' in " + section + "; valid keys: " + list);
      }
      if (!seen.insert(key).second) throw InputError(where(entry.first.Mark()) + "key '" + key + "' appears twice in " + section);
    }
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
};

}  // namespace

Scenario parse_scenario(std::string_view yaml, std::string_view source, const std::filesystem::path& base_dir) {
  return ScenarioReader(source, base_dir).read(yaml);
}

Scenario load_scenario_file(const std::filesystem::path& path) {
  const std::string text = read_file(path);
  return parse_scenario(text, path.string(), path.parent_path());
}

Scenario default_scenario() {
  return parse_scenario(default_scenario_yaml(), "<embedded scenarios/default.yaml>", std::filesystem::current_path());
}

traces::Trace build_trace(const Scenario& scenario) {
  if (scenario.zoo_model) {
    try {
      return zoo::build_model(*scenario.zoo_model);
    } catch (const InputError& e) {
      throw InputError(scenario.source + ": model: " + e.what());
    }
  }
  traces::Trace trace = traces::read_trace_file(*scenario.trace_file);
  if (scenario.batch_size && *scenario.batch_size != trace.batch_size()) return trace.rescaled(*scenario.batch_size);
  return trace;
}

}  // namespace comptrain::sim

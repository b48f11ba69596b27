#include "comptrain/sim/config/sweep.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>

#include "comptrain/support/did_you_mean.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/support/yaml_errors.hpp"
#include "config/scenario_yaml.hpp"

namespace comptrain::sim {
namespace {

// One step of a key path: a mapping key, or an index into a sequence.
struct PathStep {
  std::string key;
  std::optional<std::size_t> index;
};

// "strategy.rules[0].compress.ratio" -> strategy, rules, [0], compress, ratio.
std::vector<PathStep> parse_key_path(const std::string& text, const std::string& at) {
  auto bad = [&](const std::string& why) {
    return InputError(at + "bad sweep key '" + text + "': " + why +
                      "; expected a scenario key path such as training.batch_size or strategy.rules[0].compress.ratio");
  };
  std::vector<PathStep> steps;
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t start = i;
    while (i < text.size() && (std::isalnum(static_cast<unsigned char>(text[i])) || text[i] == '_' || text[i] == '-')) ++i;
    if (i == start) throw bad("empty or invalid name at position " + std::to_string(start + 1));
    steps.push_back({text.substr(start, i - start), std::nullopt});
    while (i < text.size() && text[i] == '[') {
      const std::size_t close = text.find(']', i);
      if (close == std::string::npos || close == i + 1) throw bad("unclosed or empty [index]");
      const std::string digits = text.substr(i + 1, close - i - 1);
      std::size_t index = 0;
      const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
      if (error == std::errc::result_out_of_range) throw bad("index " + digits.substr(0, 24) + (digits.size() > 24 ? "..." : "") + " is too large");
      if (error != std::errc() || end != digits.data() + digits.size()) throw bad("index '" + digits + "' is not a non-negative integer");
      steps.push_back({"", index});
      i = close + 1;
    }
    if (i < text.size()) {
      if (text[i] != '.') throw bad(std::string("unexpected '") + text[i] + "'");
      ++i;
      if (i == text.size()) throw bad("ends with '.'");
    }
  }
  if (steps.empty()) throw bad("empty");
  if (steps.front().key == "sweep") throw bad("a sweep cannot change itself");
  return steps;
}

std::string path_prefix(const std::vector<PathStep>& path, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    if (path[i].index) {
      out += "[" + std::to_string(*path[i].index) + "]";
    } else {
      out += (out.empty() ? "" : ".") + path[i].key;
    }
  }
  return out;
}

// Replaces the node at `path` by `value`. Missing mapping keys are created (so that a sweep can
// set training.batch_size in a scenario that leaves it to the default); going through a scalar
// or past the end of a list is an error. Handles are rebound with reset(): assigning one YAML
// node handle to another would overwrite the node itself.
void set_path(YAML::Node root, const std::vector<PathStep>& path, const YAML::Node& value, const std::string& text, const std::string& at) {
  YAML::Node current;
  current.reset(root);
  for (std::size_t i = 0; i < path.size(); ++i) {
    const bool last = i + 1 == path.size();
    const PathStep& step = path[i];
    const std::string so_far = path_prefix(path, i);
    if (step.index) {
      if (!current.IsSequence()) throw InputError(at + "bad sweep key '" + text + "': '" + so_far + "' is not a list");
      if (*step.index >= current.size()) {
        throw InputError(at + "bad sweep key '" + text + "': '" + so_far + "' has " + std::to_string(current.size()) + " entries, so no [" +
                         std::to_string(*step.index) + "]");
      }
      if (last) {
        current[*step.index] = YAML::Clone(value);  // a copy: sharing would merge the documents' memory
        return;
      }
      YAML::Node next = current[*step.index];
      current.reset(next);
      continue;
    }
    if (!current.IsMap()) {
      throw InputError(at + "bad sweep key '" + text + "': '" + (so_far.empty() ? std::string("the scenario") : so_far) +
                       "' is not a mapping, so it has no key '" + step.key + "'");
    }
    if (last) {
      current[step.key] = YAML::Clone(value);
      return;
    }
    if (!current[step.key]) current[step.key] = YAML::Node(YAML::NodeType::Map);
    YAML::Node next = current[step.key];
    current.reset(next);
  }
}

std::string value_label(const YAML::Node& node) {
  if (node.IsScalar()) return node.Scalar();
  YAML::Emitter out;
  out.SetMapFormat(YAML::Flow);
  out.SetSeqFormat(YAML::Flow);
  out << node;
  return out.c_str();
}

struct Axis {
  std::string key;
  YAML::Mark mark;
  std::vector<PathStep> path;
  std::vector<YAML::Node> values;
};

std::vector<YAML::Node> range_values(const YAML::Node& range, const std::string& source, const std::string& key) {
  const std::string at = yaml::location(source, range.Mark());
  for (const auto& entry : range) {
    const std::string k = entry.first.as<std::string>("");
    if (k != "from" && k != "to" && k != "step") {
      throw InputError(yaml::location(source, entry.first.Mark()) + "unknown key '" + k + "' in the range of sweep key '" + key + "'; " +
                       did_you_mean_text(did_you_mean(k, {"from", "to", "step"})) + "valid keys: from, to, step");
    }
  }
  if (!range["from"] || !range["to"]) throw InputError(at + "the range of sweep key '" + key + "' needs 'from' and 'to' (and optionally 'step')");
  std::vector<YAML::Node> out;
  std::int64_t from = 0, to = 0, step = 1;
  const bool integers = YAML::convert<std::int64_t>::decode(range["from"], from) && YAML::convert<std::int64_t>::decode(range["to"], to) &&
                        (!range["step"] || YAML::convert<std::int64_t>::decode(range["step"], step));
  if (integers) {
    if (step <= 0 || from > to) throw InputError(at + "the range of sweep key '" + key + "' needs from <= to and step > 0");
    // In unsigned arithmetic: to - from may not fit an int64, and from + k * step is only ever
    // formed for k up to the count, where it stays <= to.
    const std::uint64_t span = static_cast<std::uint64_t>(to) - static_cast<std::uint64_t>(from);
    const std::uint64_t last = span / static_cast<std::uint64_t>(step);
    if (last >= kMaxSweepVariants) throw InputError(at + "the range of sweep key '" + key + "' has more than " + std::to_string(kMaxSweepVariants) + " values");
    for (std::uint64_t k = 0; k <= last; ++k) {
      out.emplace_back(std::to_string(static_cast<std::int64_t>(static_cast<std::uint64_t>(from) + k * static_cast<std::uint64_t>(step))));
    }
    return out;
  }
  double f = 0, t = 0, s = 1;
  if (!YAML::convert<double>::decode(range["from"], f) || !YAML::convert<double>::decode(range["to"], t) ||
      (range["step"] && !YAML::convert<double>::decode(range["step"], s)) || !std::isfinite(f) || !std::isfinite(t) || !std::isfinite(s)) {
    throw InputError(at + "the range of sweep key '" + key + "' needs numbers for from, to and step");
  }
  if (!(s > 0) || f > t) throw InputError(at + "the range of sweep key '" + key + "' needs from <= to and step > 0");
  // Index-based so that rounding does not accumulate; the end is included up to a rounding slack.
  const double count = std::floor((t - f) / s + 1e-9);
  if (!(count < static_cast<double>(kMaxSweepVariants))) {
    throw InputError(at + "the range of sweep key '" + key + "' has more than " + std::to_string(kMaxSweepVariants) + " values");
  }
  for (std::int64_t i = 0; i <= static_cast<std::int64_t>(count); ++i) out.emplace_back(fmt::format("{}", f + static_cast<double>(i) * s));
  return out;
}

std::uint64_t fnv1a(std::string_view text, std::uint64_t h = 1469598103934665603ULL) {
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace

struct Sweep::Axes {
  std::string yaml;  // the scenario's text, re-read for each variant (yaml-cpp nodes share memory)
  std::filesystem::path base_dir;
  std::vector<Axis> axes;
};

namespace {

// Mixed-radix digits of `index`, the last key fastest.
std::vector<std::size_t> choice_of(const std::vector<Axis>& axes, std::size_t index) {
  std::vector<std::size_t> choice(axes.size());
  for (std::size_t a = axes.size(); a-- > 0;) {
    choice[a] = index % axes[a].values.size();
    index /= axes[a].values.size();
  }
  return choice;
}

}  // namespace

std::string Sweep::label(std::size_t index) const {
  const auto choice = choice_of(axes->axes, index);
  std::string out;
  for (std::size_t a = 0; a < choice.size(); ++a) {
    out += (out.empty() ? "" : ", ") + axes->axes[a].key + "=" + value_label(axes->axes[a].values[choice[a]]);
  }
  return out;
}

SweepVariant Sweep::variant(std::size_t index) const {
  if (index >= variant_count) throw std::out_of_range("sweep variant " + std::to_string(index) + " of " + std::to_string(variant_count));
  const auto choice = choice_of(axes->axes, index);
  YAML::Node doc = load_scenario_yaml(axes->yaml, source);
  for (std::size_t a = 0; a < choice.size(); ++a) {
    const Axis& axis = axes->axes[a];
    set_path(doc, axis.path, axis.values[choice[a]], axis.key, yaml::location(source, axis.mark));
  }
  SweepVariant v;
  v.index = index;
  v.label = label(index);
  try {
    v.scenario = parse_scenario_node(doc, source, axes->base_dir);
  } catch (const InputError& e) {
    throw InputError(yaml::location(source, axes->axes.front().mark) + "sweep variant " + std::to_string(index) + " (" + v.label + "): " + e.what());
  }
  v.scenario.has_sweep = false;
  v.scenario.base_dir = axes->base_dir;
  if (adjust) adjust(v.scenario);
  return v;
}

Sweep expand_sweep(const Scenario& scenario) {
  if (!scenario.has_sweep) throw InputError(scenario.source + ": the scenario has no 'sweep' section");
  const std::string& source = scenario.source;
  const YAML::Node doc = load_scenario_yaml(scenario.yaml, source);
  const YAML::Node section = doc["sweep"];

  auto axes = std::make_shared<Sweep::Axes>();
  axes->yaml = scenario.yaml;
  axes->base_dir = scenario.base_dir;
  for (const auto& entry : section) {
    Axis axis;
    axis.mark = entry.first.Mark();
    const std::string at = yaml::location(source, axis.mark);
    if (!entry.first.IsScalar() || entry.first.Scalar().empty()) throw InputError(at + "a sweep key must be a scenario key path such as training.batch_size");
    axis.key = entry.first.Scalar();
    axis.path = parse_key_path(axis.key, at);
    const YAML::Node& values = entry.second;
    if (values.IsSequence()) {
      if (values.size() == 0) throw InputError(at + "sweep key '" + axis.key + "' has an empty list of values");
      if (values.size() > kMaxSweepVariants) throw InputError(at + "sweep key '" + axis.key + "' has more than " + std::to_string(kMaxSweepVariants) + " values");
      for (const auto& v : values) axis.values.push_back(YAML::Clone(v));
    } else if (values.IsMap()) {
      axis.values = range_values(values, source, axis.key);
    } else {
      throw InputError(at + "sweep key '" + axis.key + "' must map to a list of values or a range {from, to, step}");
    }
    for (const Axis& other : axes->axes) {
      if (other.key == axis.key) throw InputError(at + "sweep key '" + axis.key + "' appears twice");
    }
    axes->axes.push_back(std::move(axis));
  }

  std::size_t count = 1;
  for (const Axis& axis : axes->axes) {
    count *= axis.values.size();
    if (count > kMaxSweepVariants) throw InputError(yaml::location(source, section.Mark()) + "the sweep has more than " + std::to_string(kMaxSweepVariants) + " variants");
  }

  // Each value alone, so that a bad path or value is blamed on its own key's line; the
  // combinations are read when a variant is asked for (Sweep::variant).
  for (const Axis& axis : axes->axes) {
    const std::string at = yaml::location(source, axis.mark);
    for (const YAML::Node& value : axis.values) {
      YAML::Node variant = load_scenario_yaml(scenario.yaml, source);
      set_path(variant, axis.path, value, axis.key, at);
      try {
        (void)parse_scenario_node(variant, source, scenario.base_dir);
      } catch (const InputError& e) {
        throw InputError(at + "sweep key '" + axis.key + "' = " + value_label(value) + ": " + e.what());
      }
    }
  }

  Sweep sweep;
  sweep.source = source;
  for (const Axis& axis : axes->axes) sweep.keys.push_back(axis.key);
  sweep.variant_count = count;
  sweep.hash = fmt::format("{:016x}", fnv1a(scenario.yaml));
  sweep.axes = std::move(axes);
  return sweep;
}

Shard parse_shard(std::string_view text) {
  const std::string s(text);
  const std::size_t slash = s.find('/');
  auto digits = [](const std::string& d) { return !d.empty() && d.size() < 10 && std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; }); };
  if (slash == std::string::npos || !digits(s.substr(0, slash)) || !digits(s.substr(slash + 1))) {
    throw InputError("--shard '" + s + "': expected I/N (0-based shard I of N, e.g. 0/4)");
  }
  Shard shard;
  shard.index = std::stoul(s.substr(0, slash));
  shard.count = std::stoul(s.substr(slash + 1));
  if (shard.count == 0 || shard.index >= shard.count) throw InputError("--shard '" + s + "': expected 0 <= I < N");
  return shard;
}

std::vector<std::size_t> shard_variants(std::size_t variant_count, const std::optional<Shard>& shard) {
  std::vector<std::size_t> out;
  const std::size_t first = shard ? shard->index : 0;
  const std::size_t step = shard ? shard->count : 1;
  for (std::size_t i = first; i < variant_count; i += step) out.push_back(i);
  return out;
}

namespace {

// `text_hash`: the scenario text's hash as Sweep::hash writes it.
std::string run_hash(std::string_view text_hash, std::string_view command, std::string_view settings) {
  std::uint64_t h = fnv1a(text_hash);
  h = fnv1a("\n", h);
  h = fnv1a(command, h);
  h = fnv1a("\n", h);
  h = fnv1a(settings, h);
  return fmt::format("{:016x}", h);
}

}  // namespace

std::string sweep_run_hash(const Sweep& sweep, std::string_view command, std::string_view settings) { return run_hash(sweep.hash, command, settings); }

std::string scenario_run_hash(const Scenario& scenario, std::string_view command, std::string_view settings) {
  return run_hash(fmt::format("{:016x}", fnv1a(scenario.yaml)), command, settings);
}

}  // namespace comptrain::sim

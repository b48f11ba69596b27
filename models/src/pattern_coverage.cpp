#include "comptrain/models/pattern_coverage.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "comptrain/models/module_pattern.hpp"
#include "comptrain/support/did_you_mean.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::models {
namespace {

bool is_wildcard(std::string_view component) { return component.find_first_of("*?[") != std::string_view::npos; }

// How far `name` is from what `pattern` was probably meant to be: component by component from
// the start, the typo distance of each literal component (a wildcard one costs nothing), the
// name's extra components free for a module pattern (it names a subtree) and not for a name
// pattern. So 'model.layerz.*' is 1 from every 'model.layers.N...' and 'transformer.hh' 1 from
// 'transformer.h...'. Nothing when the name has fewer components than the pattern.
std::optional<std::size_t> hint_distance(const std::vector<std::string_view>& pattern, std::string_view name, PatternCoverage::Syntax syntax) {
  const std::vector<std::string_view> parts = path_components(name);
  if (parts.size() < pattern.size()) return std::nullopt;
  std::size_t distance = syntax == PatternCoverage::Syntax::name ? parts.size() - pattern.size() : 0;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (!is_wildcard(pattern[i])) distance += typo_distance(pattern[i], parts[i]);
  }
  return distance;
}

}  // namespace

void PatternCoverage::expect(std::string place, std::string pattern, Syntax syntax) {
  expected_.push_back(Expected{std::move(place), std::move(pattern), syntax});
}

void PatternCoverage::expect_rules(const StrategySpec& strategy, std::string_view source) {
  for (std::size_t r = 0; r < strategy.rules.size(); ++r) {
    const StrategyRule& rule = strategy.rules[r];
    const std::string context = rule_context(strategy, r, source);
    for (const std::string& p : rule.select.modules) expect(context + "select.modules", p, Syntax::module);
    for (const std::string& p : rule.select.names) expect(context + "select.names", p, Syntax::name);
    if (const RecomputeAction* recompute = rule.recompute()) {
      for (const std::string& p : recompute->keep) expect(context + "recompute.keep", p, Syntax::name);
      for (const std::string& p : recompute->blocks) expect(context + "recompute.blocks", p, Syntax::module);
    }
  }
}

void PatternCoverage::add(const traces::Trace& trace) {
  for (Expected& e : expected_) {
    if (e.matched) continue;
    const auto matches = [&](const std::string& name) {
      return e.syntax == Syntax::module ? module_pattern_matches(e.pattern, name) : name_matches(e.pattern, name);
    };
    e.matched = std::any_of(trace.ops().begin(), trace.ops().end(), [&](const traces::Op& op) { return matches(op.name); }) ||
                std::any_of(trace.tensors().begin(), trace.tensors().end(), [&](const traces::Tensor& t) { return matches(t.name); });
    if (e.matched) continue;
    // Nothing here matches: the closest name of this trace, for the message (only now, so that
    // patterns that do match cost one scan).
    const std::vector<std::string_view> pattern = path_components(e.pattern);
    const auto consider = [&](const std::string& name) {
      const std::optional<std::size_t> distance = hint_distance(pattern, name, e.syntax);
      if (distance && (e.closest.empty() || *distance < e.closest_distance)) {
        e.closest_distance = *distance;
        e.closest = name;
      }
    };
    for (const traces::Op& op : trace.ops()) consider(op.name);
    for (const traces::Tensor& t : trace.tensors()) consider(t.name);
  }
}

void PatternCoverage::check() const {
  for (const Expected& e : expected_) {
    if (e.matched) continue;
    const char* kind = e.syntax == Syntax::module ? "module pattern" : "name pattern";
    std::string message = e.place + ": " + kind + " '" + e.pattern + "' matches no op or tensor of the model; expected ";
    message += e.syntax == Syntax::module ? "a module path such as 'layers.*.mlp' or 'model.layers.[0-3]'" : "a tensor name or a shell-style pattern such as 'layers.*.out'";
    if (!e.closest.empty()) {
      // A module pattern names a module: the closest name's path to the pattern's depth.
      std::string closest = e.closest;
      if (e.syntax == Syntax::module) {
        const std::vector<std::string_view> parts = path_components(closest);
        std::size_t length = 0;
        for (std::size_t i = 0; i < path_components(e.pattern).size(); ++i) length += parts[i].size() + (i > 0 ? 1 : 0);
        closest.resize(length);
      }
      message += std::string(" (the closest ") + (e.syntax == Syntax::module ? "module" : "name") + " in the model is '" + closest + "')";
    }
    message += std::string("; `comptrain trace names SCENARIO ") + (e.syntax == Syntax::module ? "--module" : "--name") + " PATTERN` lists what a pattern matches";
    throw InputError(message);
  }
}

}  // namespace comptrain::models

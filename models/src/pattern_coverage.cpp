#include "comptrain/models/pattern_coverage.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "comptrain/models/module_pattern.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::models {

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
    const auto try_name = [&](const std::string& name) {
      if (e.syntax == Syntax::module ? module_pattern_matches(e.pattern, name) : name_matches(e.pattern, name)) return true;
      // The name sharing the longest prefix with the pattern is the likeliest one meant.
      const auto mismatch = std::mismatch(e.pattern.begin(), e.pattern.end(), name.begin(), name.end());
      const auto prefix = static_cast<std::size_t>(mismatch.first - e.pattern.begin());
      if (prefix > e.closest_prefix || e.closest.empty()) {
        e.closest_prefix = prefix;
        e.closest = name;
      }
      return false;
    };
    e.matched = std::any_of(trace.ops().begin(), trace.ops().end(), [&](const traces::Op& op) { return try_name(op.name); }) ||
                std::any_of(trace.tensors().begin(), trace.tensors().end(), [&](const traces::Tensor& t) { return try_name(t.name); });
  }
}

void PatternCoverage::check() const {
  for (const Expected& e : expected_) {
    if (e.matched) continue;
    const char* kind = e.syntax == Syntax::module ? "module pattern" : "name pattern";
    std::string message = e.place + ": " + kind + " '" + e.pattern + "' matches no op or tensor of the model; expected ";
    message += e.syntax == Syntax::module ? "a module path such as 'layers.*.mlp' or 'model.layers.[0-3]'" : "a tensor name or a shell-style pattern such as 'layers.*.out'";
    if (!e.closest.empty()) message += " (the closest name in the model is '" + e.closest + "')";
    message += std::string("; `comptrain trace names SCENARIO ") + (e.syntax == Syntax::module ? "--module" : "--name") + " PATTERN` lists what a pattern matches";
    throw InputError(message);
  }
}

}  // namespace comptrain::models

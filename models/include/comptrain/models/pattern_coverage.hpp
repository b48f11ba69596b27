#pragma once
// Whether a scenario's name and module patterns name anything in the model. A pattern that
// matches no op or tensor of the traces a run builds (the model's, or every pipeline stage's) is
// a typo: the rule, compiled region, FSDP unit or float8 exception it belongs to would select
// nothing, and the run would answer a question nobody asked without saying so.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/models/strategy.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::models {

class PatternCoverage {
 public:
  // module: a module path pattern (module_pattern_matches); name: a tensor name or shell-style
  // pattern (name_matches).
  enum class Syntax { module, name };

  // `place` begins the error message: "s.yaml:9:22: 'framework.compile.modules'", or a rule's
  // context and its field.
  void expect(std::string place, std::string pattern, Syntax syntax);
  // Every pattern of the strategy's rules (select.modules, select.names, recompute's keep and
  // blocks), placed by rule_context with `source`.
  void expect_rules(const StrategySpec& strategy, std::string_view source);
  // Marks the patterns that some op or tensor name of `trace` matches.
  void add(const traces::Trace& trace);
  // Throws InputError for the first expected pattern nothing added matched, naming the closest
  // name seen (the least typo distance, component by component) as what was probably meant.
  void check() const;

 private:
  struct Expected {
    std::string place;
    std::string pattern;
    Syntax syntax;
    bool matched = false;
    std::string closest = {};
    std::size_t closest_distance = 0;
  };
  std::vector<Expected> expected_;
};

}  // namespace comptrain::models

// A scenario's name and module patterns against the model's names (models/pattern_coverage.hpp):
// a pattern that matches nothing is an InputError at its place, with the closest name as a hint;
// one that matches in any of the traces given (a pipeline's stages) passes.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "comptrain/models/pattern_coverage.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/zoo/zoo.hpp"

namespace comptrain::models {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using Syntax = PatternCoverage::Syntax;

traces::Trace llama(std::int64_t layers, std::optional<zoo::PipelineStageSpec> stage = std::nullopt) {
  zoo::ModelRequest request;
  request.pipeline_stage = stage;
  request.model = "llama";
  request.layers = layers;
  request.hidden = 64;
  request.heads = 4;
  request.vocab = 100;
  request.seq_len = 16;
  return zoo::build_model(request);
}

std::string error_of(const PatternCoverage& coverage) {
  try {
    coverage.check();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(PatternCoverage, PatternsThatNameSomethingPass) {
  PatternCoverage coverage;
  coverage.expect("s.yaml:3:5: parallelism.fsdp.units", "model.layers.*", Syntax::module);
  coverage.expect("s.yaml:4:5: framework.compile.modules", "layers.[0-1].mlp", Syntax::module);
  coverage.expect("s.yaml:5:5: strategy.rules[0]: recompute.keep", "model.layers.*.add_1.out", Syntax::name);
  coverage.expect("s.yaml:6:5: strategy.rules[0]: select.names", "model.embed_tokens.out", Syntax::name);
  coverage.add(llama(2));
  EXPECT_NO_THROW(coverage.check());
}

TEST(PatternCoverage, APatternThatMatchesNothingIsAnErrorAtItsPlace) {
  for (const auto& [pattern, syntax] : {std::pair<const char*, Syntax>{"model.layerz.*", Syntax::module}, {"model.layerz.*.add_1.out", Syntax::name}}) {
    PatternCoverage coverage;
    coverage.expect("s.yaml:3:5: parallelism.fsdp.units", "model.layers.*", Syntax::module);
    coverage.expect("s.yaml:7:9: strategy.rules[0]: recompute.keep", pattern, syntax);
    coverage.add(llama(2));
    EXPECT_THAT(error_of(coverage), AllOf(HasSubstr(std::string("s.yaml:7:9: strategy.rules[0]: recompute.keep: ")), HasSubstr(std::string("'") + pattern + "'"),
                                          HasSubstr("matches no op or tensor of the model")))
        << pattern;
  }
}

TEST(PatternCoverage, TheHintIsTheClosestNameComponentByComponent) {
  PatternCoverage keep;
  keep.expect("k", "model.layerz.*.mlp.down_proj.out", Syntax::name);
  keep.add(llama(2));
  EXPECT_THAT(error_of(keep), HasSubstr("(the closest name in the model is 'model.layers.0.mlp.down_proj.out')"));
  PatternCoverage module;
  module.expect("m", "model.layer", Syntax::module);
  module.add(llama(2));
  EXPECT_THAT(error_of(module), HasSubstr("(the closest module in the model is 'model.layers')"));
}

TEST(PatternCoverage, ModuleAndNameSyntaxDiffer) {
  // `layers.1` is a module path (any component on); as a name pattern it must be the whole name.
  PatternCoverage module;
  module.expect("m", "layers.1", Syntax::module);
  module.add(llama(2));
  EXPECT_NO_THROW(module.check());
  PatternCoverage name;
  name.expect("n", "layers.1", Syntax::name);
  name.add(llama(2));
  EXPECT_THAT(error_of(name), HasSubstr("n: name pattern 'layers.1' matches no op or tensor"));
}

TEST(PatternCoverage, AMatchOnAnyTraceCounts) {
  // A pipeline's stages: layer 3 lies on the second stage's trace only.
  const traces::Trace first = llama(4, zoo::PipelineStageSpec{0, 2, true, false});
  const traces::Trace second = llama(4, zoo::PipelineStageSpec{2, 2, false, true});
  PatternCoverage coverage;
  coverage.expect("s.yaml:2:3: strategy.rules[0]: select.modules", "model.layers.3", Syntax::module);
  coverage.add(first);
  EXPECT_THAT(error_of(coverage), HasSubstr("'model.layers.3' matches no op or tensor"));
  coverage.add(second);
  EXPECT_NO_THROW(coverage.check());
}

TEST(PatternCoverage, ExpectsEveryPatternOfTheRules) {
  StrategySpec strategy;
  strategy.name = "typo";
  StrategyRule recompute;
  recompute.select.modules = {"model.layers"};
  RecomputeAction action;
  action.mode = RecomputeAction::Mode::selective;
  action.keep = {"model.layers.*.add_1.out"};
  action.blocks = {"model.layerz.*"};
  recompute.action = action;
  strategy.rules.push_back(recompute);
  PatternCoverage coverage;
  coverage.expect_rules(strategy, "s.yaml");
  coverage.add(llama(2));
  // A rule built in code is placed by its strategy's name and index (rule_context).
  EXPECT_THAT(error_of(coverage), HasSubstr("s.yaml: strategy 'typo' rule 0: recompute.blocks: module pattern 'model.layerz.*'"));
}

}  // namespace
}  // namespace comptrain::models

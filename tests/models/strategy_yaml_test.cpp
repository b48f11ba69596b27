// The strategy schema read and written by models/strategy_yaml.hpp: every strategy a shipped
// scenario holds (its `strategy:` and each of `plan.strategies`), and the shapes the hybrid
// planner exports, survive read -> write -> read field for field.

#include "comptrain/models/strategy_yaml.hpp"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "comptrain/models/platform_yaml.hpp"
#include "comptrain/models/profile_yaml.hpp"
#include "comptrain/models/shipped_or_file.hpp"

namespace comptrain::models {
namespace {

namespace fs = std::filesystem;

void expect_same_selector(const TensorSelector& a, const TensorSelector& b, const std::string& where) {
  EXPECT_EQ(a.inputs_of, b.inputs_of) << where;
  EXPECT_EQ(a.outputs_of, b.outputs_of) << where;
  EXPECT_EQ(a.min_bytes, b.min_bytes) << where;
  EXPECT_EQ(a.names, b.names) << where;
  EXPECT_EQ(a.modules, b.modules) << where;
}

void expect_same_action(const StrategyRule& a, const StrategyRule& b, const std::string& where) {
  ASSERT_EQ(a.action.index(), b.action.index()) << where;
  if (const auto* o = a.offload()) {
    const auto* p = b.offload();
    EXPECT_EQ(o->lookahead, p->lookahead) << where;
    EXPECT_EQ(o->synchronous, p->synchronous) << where;
    EXPECT_EQ(o->free_by, p->free_by) << where;
    EXPECT_EQ(o->stash, p->stash) << where;
    EXPECT_EQ(o->stream, p->stream) << where;
    EXPECT_EQ(o->host_memory, p->host_memory) << where;
  } else if (const auto* r = a.recompute()) {
    const auto* s = b.recompute();
    EXPECT_EQ(r->mode, s->mode) << where;
    EXPECT_EQ(r->k, s->k) << where;
    EXPECT_EQ(r->budget_bytes, s->budget_bytes) << where;
    EXPECT_EQ(r->keep, s->keep) << where;
    EXPECT_EQ(r->blocks, s->blocks) << where;
  } else {
    const auto* x = a.compress();
    const auto* y = b.compress();
    EXPECT_EQ(x->ratio, y->ratio) << where;
    EXPECT_EQ(x->compress_bandwidth, y->compress_bandwidth) << where;
    EXPECT_EQ(x->decompress_bandwidth, y->decompress_bandwidth) << where;
    EXPECT_EQ(x->latency, y->latency) << where;
    ASSERT_EQ(x->profile == nullptr, y->profile == nullptr) << where;
    if (x->profile) {
      EXPECT_EQ(x->profile->name, y->profile->name) << where;
      EXPECT_EQ(x->profile->source, y->profile->source) << where;
    }
    EXPECT_EQ(x->profile_auto, y->profile_auto) << where;
    EXPECT_EQ(x->codec, y->codec) << where;
    EXPECT_EQ(x->error_bound, y->error_bound) << where;
    EXPECT_EQ(x->error_bound_mode, y->error_bound_mode) << where;
    ASSERT_EQ(x->adaptive.has_value(), y->adaptive.has_value()) << where;
    if (x->adaptive) {
      EXPECT_EQ(x->adaptive->tolerance, y->adaptive->tolerance) << where;
      EXPECT_EQ(x->adaptive->fallback_error_bound, y->adaptive->fallback_error_bound) << where;
    }
  }
}

// Writes `spec`, reads the text back as read_strategy would from a scenario, and expects the
// same spec.
void expect_round_trip(const StrategySpec& spec, const fs::path& base_dir, const std::string& platform_name, const std::string& where) {
  const std::string yaml = strategy_to_yaml(spec);
  StrategySpec reread;
  try {
    reread = read_strategy(YAML::Load(yaml), "written", "strategy", base_dir, platform_name);
  } catch (const std::exception& e) {
    FAIL() << where << ": the written strategy does not read back: " << e.what() << "\n" << yaml;
  }
  const std::string context = where + "\n" + yaml;
  EXPECT_EQ(reread.name, spec.name) << context;
  ASSERT_EQ(reread.rules.size(), spec.rules.size()) << context;
  for (std::size_t i = 0; i < spec.rules.size(); ++i) {
    const std::string rule = context + "rule " + std::to_string(i);
    expect_same_selector(spec.rules[i].select, reread.rules[i].select, rule);
    expect_same_action(spec.rules[i], reread.rules[i], rule);
  }
}

// The platform's name, which `profile: auto` picks the profile by.
std::string platform_name(const YAML::Node& root, const fs::path& base_dir, const std::string& source) {
  const YAML::Node platform = root["platform"];
  if (!platform) return "";
  if (platform.IsMap()) return platform_from_yaml(platform, source).name;
  return resolve_platform(platform.Scalar(), base_dir).name;
}

TEST(StrategyYaml, EveryShippedScenarioStrategyRoundTrips) {
  const fs::path scenarios = fs::path(COMPTRAIN_SCENARIO_DIR);
  int strategies = 0;
  for (const auto& entry : fs::recursive_directory_iterator(scenarios)) {
    if (entry.path().extension() != ".yaml") continue;
    const std::string source = entry.path().string();
    const YAML::Node root = YAML::LoadFile(source);
    if (!root.IsMap() || !root["model"]) continue;  // platforms, profiles, configs: not scenarios
    const fs::path base_dir = entry.path().parent_path();
    const std::string platform = platform_name(root, base_dir, source);
    std::vector<std::pair<std::string, YAML::Node>> nodes;
    if (root["strategy"]) nodes.emplace_back("strategy", root["strategy"]);
    if (root["plan"] && root["plan"]["strategies"]) {
      const YAML::Node list = root["plan"]["strategies"];
      for (std::size_t i = 0; i < list.size(); ++i) nodes.emplace_back("plan.strategies[" + std::to_string(i) + "]", list[i]);
    }
    for (const auto& [field, node] : nodes) {
      const StrategySpec spec = read_strategy(node, source, field, base_dir, platform);
      expect_round_trip(spec, base_dir, platform, source + ": " + field);
      ++strategies;
    }
  }
  // The shipped scenarios hold dozens of strategies; none found means the walk looked elsewhere.
  EXPECT_GT(strategies, 20);
}

// The shapes `comptrain plan --hybrid --export-strategy` writes: names selected, offload with a
// lookahead and a free_by, recompute of everything, compression by a profile with a fixed or an
// adaptive bound.
TEST(StrategyYaml, HybridExportShapesRoundTrip) {
  StrategySpec spec;
  spec.name = "hybrid";
  StrategyRule offload;
  offload.select.names = {"features.0.out", "features.2.out"};
  offload.action = OffloadAction{.lookahead = 3, .free_by = 5};
  StrategyRule recompute;
  recompute.select.names = {"features.4.out"};
  RecomputeAction all;
  all.mode = RecomputeAction::Mode::all;
  recompute.action = all;
  StrategyRule compress;
  compress.select.names = {"features.7.out"};
  CompressAction c;
  c.profile = resolve_profile("a100-literature", fs::path(COMPTRAIN_SCENARIO_DIR), "");
  c.codec = "szp";
  c.error_bound = 1e-3;
  compress.action = c;
  StrategyRule adaptive = compress;
  CompressAction a = c;
  a.error_bound = 0;  // unused with an adaptive bound, and left 0 by the reader
  a.adaptive = CompressAction::Adaptive{.tolerance = 0.01, .fallback_error_bound = 2e-4};
  adaptive.action = a;
  spec.rules = {offload, recompute, compress, adaptive};
  expect_round_trip(spec, fs::path(COMPTRAIN_SCENARIO_DIR), "", "hybrid export");
}

// torchtune's OffloadActivations as a rule: a copy back at the consumer and a stash of 5.
TEST(StrategyYaml, TorchtuneStashRoundTrips) {
  StrategySpec spec;
  spec.name = "torchtune";
  StrategyRule offload;
  offload.select.min_bytes = 1024;
  offload.action = OffloadAction{.lookahead = 0, .stash = 5};
  spec.rules = {offload};
  expect_round_trip(spec, fs::path(COMPTRAIN_SCENARIO_DIR), "", "torchtune");
}

// Each rule keeps where it was written, for the errors found once a trace meets it
// (rule_context); the shorthand's one rule is the name's position.
TEST(StrategyYaml, EveryRuleKeepsItsPosition) {
  const std::string yaml =
      "strategy:\n"
      "  name: s\n"
      "  rules:\n"
      "    - {offload: {host_memory: pageable}}\n"
      "    - recompute: {mode: sqrt_n}\n";
  const StrategySpec spec = read_strategy(YAML::Load(yaml)["strategy"], "s.yaml", "strategy", ".", "");
  ASSERT_EQ(spec.rules.size(), 2u);
  EXPECT_EQ(spec.rules[0].location, "s.yaml:4:7: strategy.rules[0]");
  EXPECT_EQ(spec.rules[1].location, "s.yaml:5:7: strategy.rules[1]");
  EXPECT_EQ(rule_context(spec, 1), "s.yaml:5:7: strategy.rules[1]: ");
  const StrategySpec shorthand = read_strategy(YAML::Load("strategies: [baseline, offload]")["strategies"][1], "p.yaml", "plan.strategies[1]", ".", "");
  ASSERT_EQ(shorthand.rules.size(), 1u);
  EXPECT_EQ(shorthand.rules[0].location, "p.yaml:1:24: plan.strategies[1]");
}

}  // namespace
}  // namespace comptrain::models

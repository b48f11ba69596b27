#include "comptrain/sim/core/strategy_json.hpp"

#include <variant>

namespace comptrain::sim::detail {
namespace {

using nlohmann::ordered_json;

ordered_json optional_number(const std::optional<double>& value) { return value ? ordered_json(*value) : ordered_json(nullptr); }

ordered_json kinds_json(const std::vector<traces::OpKind>& kinds) {
  ordered_json list = ordered_json::array();
  for (traces::OpKind k : kinds) list.push_back(traces::to_string(k));
  return list;
}

std::string_view mode_name(models::RecomputeAction::Mode mode) {
  switch (mode) {
    case models::RecomputeAction::Mode::every_k: return "every_k";
    case models::RecomputeAction::Mode::sqrt_n: return "sqrt_n";
    case models::RecomputeAction::Mode::budget: return "budget";
    case models::RecomputeAction::Mode::checkpoints: return "checkpoints";
    case models::RecomputeAction::Mode::all: return "all";
    case models::RecomputeAction::Mode::selective: return "selective";
  }
  return "?";
}

struct ActionJson {
  ordered_json& rule;
  void operator()(const models::OffloadAction& o) const {
    rule["action"] = "offload";
    rule["offload"] = {{"lookahead", o.lookahead}, {"synchronous", o.synchronous}};
    if (o.free_by) rule["offload"]["free_by"] = *o.free_by;
  }
  void operator()(const models::RecomputeAction& r) const {
    rule["action"] = "recompute";
    ordered_json j{{"mode", mode_name(r.mode)}};
    if (r.mode == models::RecomputeAction::Mode::every_k) j["k"] = r.k;
    if (r.mode == models::RecomputeAction::Mode::budget) j["budget_bytes"] = r.budget_bytes;
    if (r.mode == models::RecomputeAction::Mode::checkpoints || r.mode == models::RecomputeAction::Mode::selective) j["keep"] = r.keep;
    if (r.mode == models::RecomputeAction::Mode::selective) j["blocks"] = r.blocks;
    rule["recompute"] = std::move(j);
  }
  void operator()(const models::CompressAction& c) const {
    rule["action"] = "compress";
    rule["compress"] = {{"profile", c.profile ? ordered_json(c.profile->name) : ordered_json(nullptr)},
                        {"codec", c.profile ? ordered_json(c.codec) : ordered_json(nullptr)},
                        {"error_bound", !c.profile ? ordered_json(nullptr) : c.adaptive ? ordered_json("adaptive") : ordered_json(c.error_bound)},
                        {"error_bound_mode", c.profile ? ordered_json(to_string(c.error_bound_mode)) : ordered_json(nullptr)},
                        {"gradient_error_tolerance", c.adaptive ? ordered_json(c.adaptive->tolerance) : ordered_json(nullptr)},
                        {"fallback_error_bound", c.adaptive ? optional_number(c.adaptive->fallback_error_bound) : ordered_json(nullptr)},
                        {"ratio", optional_number(c.ratio)},
                        {"compress_bandwidth_bytes_per_second", optional_number(c.compress_bandwidth)},
                        {"decompress_bandwidth_bytes_per_second", optional_number(c.decompress_bandwidth)},
                        {"latency_seconds", optional_number(c.latency)}};
  }
};

}  // namespace

nlohmann::ordered_json strategy_json(const models::StrategySpec& strategy) {
  ordered_json rules = ordered_json::array();
  for (const models::StrategyRule& r : strategy.rules) {
    ordered_json rule;
    ordered_json select = ordered_json::object();
    if (!r.select.inputs_of.empty()) select["inputs_of"] = kinds_json(r.select.inputs_of);
    if (!r.select.outputs_of.empty()) select["outputs_of"] = kinds_json(r.select.outputs_of);
    if (r.select.min_bytes > 0) select["min_bytes"] = r.select.min_bytes;
    if (!r.select.names.empty()) select["names"] = r.select.names;
    if (!r.select.modules.empty()) select["modules"] = r.select.modules;
    rule["select"] = std::move(select);
    std::visit(ActionJson{rule}, r.action);
    rules.push_back(std::move(rule));
  }
  ordered_json out = {{"name", strategy.name}, {"rules", std::move(rules)}};
  // Megatron-LM's settings, as the scenario gives them (each stage's rules follow from its trace);
  // absent when not given, so that the documents of rule-only strategies stay as they were.
  if (const auto& r = strategy.layer_recompute) {
    const bool full = r->granularity == models::LayerRecompute::Granularity::full;
    ordered_json recompute = {{"granularity", full ? "full" : "selective"}};
    if (full) {
      recompute["method"] = r->method == models::LayerRecompute::Method::uniform ? "uniform" : "block";
      recompute["num_layers"] = r->num_layers;
    }
    out["recompute"] = std::move(recompute);
  }
  // strategy.first_stages: absent when the rules apply on every stage.
  if (strategy.first_stages) out["first_stages"] = *strategy.first_stages;
  return out;
}

std::string strategy_rules_key(const models::StrategySpec& strategy) {
  const ordered_json j = strategy_json(strategy);
  return j["rules"].dump() + (j.contains("recompute") ? j["recompute"].dump() : std::string()) +
         (j.contains("first_stages") ? "first_stages:" + j["first_stages"].dump() : std::string());
}

}  // namespace comptrain::sim::detail

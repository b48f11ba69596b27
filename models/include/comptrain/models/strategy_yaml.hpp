#pragma once
// The strategy schema (a scenario's `strategy:` and each of `plan.strategies`; scenarios/README.md)
// read and written by one module, so that what `comptrain plan --export-strategy` writes is
// what a scenario reads back, field for field.

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <string>
#include <string_view>

#include "comptrain/models/strategy.hpp"

namespace comptrain::models {

// Reads a strategy: a shorthand name (baseline, offload, recompute) or a mapping with name and
// rules. `field` names the node in messages ("strategy", "plan.strategies[1]"); `source` is the
// document's name for "SOURCE:LINE:COLUMN: ..." locations. Compress rules resolve their profile
// against `base_dir`, and `profile: auto` against `platform_name` (empty: the scenario has no
// platform). Throws InputError for anything malformed, unknown or out of range.
StrategySpec read_strategy(const YAML::Node& node, std::string_view source, const std::string& field, const std::filesystem::path& base_dir,
                           std::string_view platform_name);

// The strategy as the mapping read_strategy reads (name and rules; only what differs from each
// action's defaults, numbers in their shortest round-trip decimal form), preceded by `comment`
// as "# " lines when it is not empty.
std::string strategy_to_yaml(const StrategySpec& strategy, const std::string& comment = "");

}  // namespace comptrain::models

#pragma once
// The scenario reader's YAML entry points, private to the sim library: the sweep expander
// (sweep.cpp) edits a scenario's YAML tree and reads each variant with the normal reader, so
// that every variant is validated and errors keep the file's line numbers.

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <string_view>

#include "comptrain/sim/config/scenario.hpp"

namespace comptrain::sim {

// YAML::Load with malformed YAML reported as "SOURCE:LINE:COLUMN: malformed YAML: ...".
YAML::Node load_scenario_yaml(std::string_view yaml, std::string_view source);
// Reads a scenario from an already loaded document (`yaml` and `base_dir` are left empty).
Scenario parse_scenario_node(const YAML::Node& root, std::string_view source, const std::filesystem::path& base_dir);

}  // namespace comptrain::sim

#pragma once
// Reading a platform from a YAML node that is part of a larger document (a scenario's inline
// platform), so that errors point at lines of that document.

#include <yaml-cpp/yaml.h>

#include <string_view>

#include "comptrain/models/platform.hpp"

namespace comptrain::models {

// As parse_platform, on an already-loaded mapping; `source` names the document in errors.
Platform platform_from_yaml(const YAML::Node& node, std::string_view source);

}  // namespace comptrain::models

#pragma once
// The profiles shipped in calibrate/profiles/, embedded at build time (models/CMakeLists.txt
// generates the definition from builtin_profiles.cpp.in).

#include <string_view>
#include <utility>
#include <vector>

namespace comptrain::models::detail {

// (file stem, YAML text) for every calibrate/profiles/*.yaml.
const std::vector<std::pair<std::string_view, std::string_view>>& builtin_profile_sources();

}  // namespace comptrain::models::detail

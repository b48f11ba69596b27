#pragma once
// The platform descriptions shipped in scenarios/platforms/, embedded at build time
// (models/CMakeLists.txt generates the definition from builtin_platforms.cpp.in).

#include <string_view>
#include <utility>
#include <vector>

namespace comptrain::models::detail {

// (file stem, YAML text) for every scenarios/platforms/*.yaml, in the order CMake globbed them.
const std::vector<std::pair<std::string_view, std::string_view>>& builtin_platform_sources();

}  // namespace comptrain::models::detail

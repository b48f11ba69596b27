#pragma once
// comptrain's version (the project's VERSION in the top-level CMakeLists.txt), for outputs that
// record which comptrain wrote them (JSON documents, profiles).

#include <string_view>

namespace comptrain {

std::string_view comptrain_version();

}  // namespace comptrain

#pragma once
// Files shipped inside the binary (models/CMakeLists.txt, comptrain_embed_files, generates each
// table from embedded_files.cpp.in): the platforms of scenarios/platforms/ and the calibration
// profiles of calibrate/profiles/, so that `comptrain` finds them from any directory.

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace comptrain::models::detail {

// (file stem, text) per embedded file.
using EmbeddedFiles = std::vector<std::pair<std::string_view, std::string_view>>;

const EmbeddedFiles& builtin_platform_sources();  // scenarios/platforms/*.yaml
const EmbeddedFiles& builtin_profile_sources();   // calibrate/profiles/*.yaml

// The stems, sorted.
std::vector<std::string> embedded_names(const EmbeddedFiles& files);
// The text of the file whose stem is `name`; nullopt when none is.
std::optional<std::string_view> embedded_text(const EmbeddedFiles& files, std::string_view name);
// "a, b, c": the sorted stems, for messages.
std::string embedded_name_list(const EmbeddedFiles& files);

}  // namespace comptrain::models::detail

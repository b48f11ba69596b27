#pragma once
// "A shipped name or a .yaml file": how a scenario, `simulate --platform`, `calibrate
// --base-platform` and a compress rule's `profile:` name a platform or a calibration profile.
// One rule for all of them, so that they accept and refuse the same spellings.

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/models/platform.hpp"

namespace comptrain::models {

// Which of the two `spec` is: a file (a path ending in .yaml or .yml, relative to base_dir
// unless absolute) or the name of a shipped description.
struct ShippedOrFile {
  std::optional<std::filesystem::path> file;  // set for a file: the path to read
  std::string name;                           // otherwise: one of the shipped names
};

// `what` names the kind in messages ("platform", "calibration profile"); `shipped` are the
// shipped names; `other` lists further spellings the caller accepts itself (e.g. "auto"), for the
// messages only. InputError when spec is empty ("expected a shipped <what> name or a .yaml
// file") or names nothing shipped, listing the shipped names either way. The file's existence is
// not checked here: reading it reports that with its path.
ShippedOrFile shipped_or_file(std::string_view spec, const std::filesystem::path& base_dir, std::string_view what,
                              const std::vector<std::string>& shipped, std::string_view other = {});

// A shipped platform's name, or a platform file (.yaml / .yml, relative to `base_dir` unless
// absolute): scenarios' `platform:`, `simulate --platform`, `calibrate --base-platform`.
// InputError for an empty spec or an unknown name, listing the shipped names. (Profiles:
// resolve_profile in profile_yaml.hpp, which adds `auto`.)
Platform resolve_platform(std::string_view spec, const std::filesystem::path& base_dir);

}  // namespace comptrain::models

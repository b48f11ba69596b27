#pragma once
// Error locations and key checks shared by every YAML reader (scenarios, platforms,
// calibration profiles), so they all report problems the same way. Header-only: its users
// link yaml-cpp themselves.

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <initializer_list>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/support/did_you_mean.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::yaml {

// "SOURCE:LINE:COLUMN: " (1-based), or "SOURCE: " when the node has no position.
inline std::string location(std::string_view source, const YAML::Mark& mark) {
  std::string out(source);
  // Appended piece by piece: `":" + std::to_string(...)` makes GCC 12 -O3 warn (-Wrestrict, a
  // false positive in its inlined std::string code).
  if (!mark.is_null()) {
    out += ':';
    out += std::to_string(mark.line + 1);
    out += ':';
    out += std::to_string(mark.column + 1);
  }
  out += ": ";
  return out;
}

// YAML::Load, with malformed YAML reported as InputError "SOURCE:LINE:COLUMN: malformed YAML: ...":
// the one entry point of every reader, so that a syntax error reads the same whichever file it is in.
inline YAML::Node load_document(std::string_view text, std::string_view source) {
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    throw InputError(location(source, e.mark) + "malformed YAML: " + e.msg);
  }
}

// "SOURCE:LINE:COLUMN" (1-based), or "SOURCE" when the node has no position: where a value was
// written, kept beside what was read from it for the checks that come later (a scenario's
// data.from against a platform chosen on the command line).
inline std::string position(std::string_view source, const YAML::Mark& mark) {
  std::string out = location(source, mark);
  out.resize(out.size() - 2);  // location's ": "
  return out;
}

// Throws InputError at the first key of `map` that is not in `valid` (guessing the intended one
// and listing the valid ones, so a typo never passes silently) or that appears twice.
inline void check_keys(std::string_view source, const YAML::Node& map, const std::string& section,
                       std::initializer_list<const char*> valid) {
  std::set<std::string> seen;
  for (const auto& entry : map) {
    const std::string key = entry.first.as<std::string>("");
    if (std::none_of(valid.begin(), valid.end(), [&](const char* v) { return key == v; })) {
      std::string list;
      for (const char* v : valid) list += (list.empty() ? "" : ", ") + std::string(v);
      const std::vector<std::string_view> names(valid.begin(), valid.end());
      throw InputError(location(source, entry.first.Mark()) + "unknown key '" + key + "' in " + section + "; " +
                       did_you_mean_text(did_you_mean(key, names)) + "valid keys: " + list);
    }
    if (!seen.insert(key).second) {
      throw InputError(location(source, entry.first.Mark()) + "key '" + key + "' appears twice in " + section);
    }
  }
}

}  // namespace comptrain::yaml

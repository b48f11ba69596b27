#include "comptrain/models/shipped_or_file.hpp"

#include <algorithm>

#include "comptrain/support/input_error.hpp"

namespace comptrain::models {

ShippedOrFile shipped_or_file(std::string_view spec, const std::filesystem::path& base_dir, std::string_view what,
                              const std::vector<std::string>& shipped, std::string_view other) {
  std::string names;
  for (const std::string& name : shipped) names += (names.empty() ? "" : ", ") + name;
  const std::string expected = "expected " + (other.empty() ? std::string() : std::string(other) + ", ") + "a shipped " +
                               std::string(what) + " name or a .yaml file; shipped: " + names;
  // An empty value (`--platform ""`, `profile: ''`) is a mistake, never "keep the default".
  if (spec.empty()) throw InputError("empty " + std::string(what) + "; " + expected);
  const std::filesystem::path path{std::string(spec)};
  const std::string ext = path.extension().string();
  if (ext == ".yaml" || ext == ".yml") return {path.is_absolute() ? path : base_dir / path, {}};
  if (std::find(shipped.begin(), shipped.end(), spec) == shipped.end()) {
    throw InputError("unknown " + std::string(what) + " '" + std::string(spec) + "'; " + expected);
  }
  return {std::nullopt, std::string(spec)};
}

Platform resolve_platform(std::string_view spec, const std::filesystem::path& base_dir) {
  const ShippedOrFile which = shipped_or_file(spec, base_dir, "platform", builtin_platform_names());
  return which.file ? load_platform_file(*which.file) : builtin_platform(which.name);
}

}  // namespace comptrain::models

#include "embedded_files.hpp"

#include <algorithm>

namespace comptrain::models::detail {

std::vector<std::string> embedded_names(const EmbeddedFiles& files) {
  std::vector<std::string> names;
  for (const auto& [name, text] : files) names.emplace_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

std::optional<std::string_view> embedded_text(const EmbeddedFiles& files, std::string_view name) {
  for (const auto& [stem, text] : files) {
    if (stem == name) return text;
  }
  return std::nullopt;
}

std::string embedded_name_list(const EmbeddedFiles& files) {
  std::string list;
  for (const std::string& name : embedded_names(files)) list += (list.empty() ? "" : ", ") + name;
  return list;
}

}  // namespace comptrain::models::detail

#include "report/documents.hpp"

#include <fmt/format.h>

#include "comptrain/support/version.hpp"

namespace comptrain::sim::detail {

ordered_json document_header(std::string_view kind) {
  ordered_json j;
  j["comptrain_version"] = comptrain_version();
  j["schema"] = {{"name", "comptrain." + std::string(kind)}, {"version", kSchemaVersion}};
  return j;
}

ordered_json scenario_json(const std::string& name, const std::string& source) { return {{"name", name}, {"source", source}}; }

ordered_json platform_json(const models::Platform& platform) {
  return {{"name", platform.name}, {"source", platform.source}, {"gpu", platform.gpu.name}, {"memory_capacity_bytes", platform.gpu.memory_bytes}};
}

std::string index_ranges(const std::vector<std::size_t>& sorted, std::size_t shown) {
  std::string out;
  std::size_t runs = 0, hidden_runs = 0, hidden = 0;
  for (std::size_t i = 0; i < sorted.size();) {
    std::size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (runs < shown) {
      out += (out.empty() ? "" : ", ") + (i == j ? std::to_string(sorted[i]) : fmt::format("{}-{}", sorted[i], sorted[j]));
    } else {
      ++hidden_runs;
      hidden += j - i + 1;
    }
    ++runs;
    i = j + 1;
  }
  if (hidden_runs > 0) out += fmt::format(", and {} more in {} further runs", hidden, hidden_runs);
  return out;
}

}  // namespace comptrain::sim::detail

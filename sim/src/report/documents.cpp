#include "report/documents.hpp"

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

}  // namespace comptrain::sim::detail

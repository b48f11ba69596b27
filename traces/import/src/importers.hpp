#pragma once
// The per-format importers behind import_text (import.cpp).

#include <string_view>

#include "comptrain/trace_import/import.hpp"
#include "json_input.hpp"

namespace comptrain::trace_import::detail {

ImportResult import_profiler(const json& document, const JsonInput& in, const ImportOptions& options);
ImportResult import_snapshot(const json& document, const JsonInput& in, const ImportOptions& options);
ImportResult import_chakra(const json& document, const JsonInput& in, const ImportOptions& options);

// Adds the memory timelines' peaks to the trace metadata ("memory.<device>.peak_bytes", ...).
void add_memory_metadata(const std::vector<MemoryTimeline>& memory, std::map<std::string, std::string>& metadata);

}  // namespace comptrain::trace_import::detail

#pragma once
// The per-format importers behind import_text (import.cpp).

#include <string_view>

#include "comptrain/trace_import/import.hpp"
#include "json_input.hpp"

namespace comptrain::trace_import::detail {

ImportResult import_profiler(const json& document, const JsonInput& in, const ImportOptions& options);
ImportResult import_snapshot(const json& document, const JsonInput& in, const ImportOptions& options);
// Both Chakra forms (the .et file is read into its JSON form first, chakra_et.hpp). `options.name`
// may be empty: a trace written by trace_to_chakra_et then keeps its recorded name, any other
// takes `default_name`.
ImportResult import_chakra(const json& document, const JsonInput& in, const ImportOptions& options, const std::string& default_name,
                           Format format);

// Adds the memory timelines' peaks to the trace metadata ("memory.<device>.peak_bytes", ...).
void add_memory_metadata(const std::vector<MemoryTimeline>& memory, std::map<std::string, std::string>& metadata);

}  // namespace comptrain::trace_import::detail

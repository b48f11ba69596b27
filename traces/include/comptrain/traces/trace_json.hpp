#pragma once
// The trace file format (JSON, versioned): see traces/FORMAT.md for every field.

#include <filesystem>
#include <string>
#include <string_view>

#include "comptrain/traces/trace.hpp"

namespace comptrain::traces {

inline constexpr std::string_view kTraceFormatName = "comptrain-trace";
// The versions this build reads, 1 to kTraceFormatVersion. Version 2 added per-tensor `values`,
// version 3 per-tensor `gradient` statistics, version 4 the op kinds `gather` and `scatter`,
// version 5 the op kind `communication` and the op field `communication`, version 6 the
// communication's `overlap`, version 7 its `splits`, version 8 the op field `host_sync`. The writer
// writes the oldest version that can hold the trace: 8 if an op synchronises the host, else 7 if a
// communication is split, else 6 if a communication overlaps ops after it,
// else 5 if an op is a communication, else 4 if one is a
// gather or a scatter, else 3 if a tensor has gradient statistics, else 2 if one has values,
// else 1.
inline constexpr int kTraceFormatVersion = 8;

// Serialises a trace. `indent` < 0 writes one line.
std::string trace_to_json(const Trace& trace, int indent = 1);

// Parses a trace. `source` names the input in error messages (a file name). Throws
// InputError "SOURCE: LOCATION: what was wrong and what was expected", where LOCATION is
// "line L, column C" for JSON syntax errors and a JSON path ("/ops/3/inputs/1") otherwise.
Trace trace_from_json(std::string_view text, std::string_view source);

// The trace's metadata as a one-line JSON object for reports: values that are whole decimal
// integers ("layers": "12") are written as numbers, the rest as strings. (The trace format keeps
// every metadata value a string; reports give numbers as numbers.)
std::string metadata_to_json(const Trace& trace);

Trace read_trace_file(const std::filesystem::path& path);
void write_trace_file(const Trace& trace, const std::filesystem::path& path);  // atomic

}  // namespace comptrain::traces

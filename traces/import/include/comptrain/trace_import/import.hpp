#pragma once
// Importers: recordings made by other tools, turned into comptrain traces (traces/FORMAT.md).
//
// Each format carries only part of what the simulator uses (tensors and their data flow,
// FLOPs, bytes, durations, batch scaling). An import keeps what the input has and lists what it
// lacks in `ImportResult::missing`, so the caller can say so; it never invents data flow.
// Corrupt inputs throw InputError "SOURCE: /json/pointer: what is wrong; expected what".

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/traces/trace.hpp"

namespace comptrain::trace_import {

enum class Format : std::uint8_t {
  pytorch_profiler,  // torch.profiler export_chrome_trace (Kineto Chrome-trace JSON)
  memory_snapshot,   // torch.cuda.memory._snapshot() written as JSON (MemoryViz's JSON variant)
  chakra_json,       // a Chakra execution trace in JSON form (chakra_jsonizer / protobuf JSON)
  chakra_et,         // a Chakra execution trace in its binary protobuf form (.et)
};

std::string_view to_string(Format format);
std::optional<Format> parse_format(std::string_view text);  // "pytorch-profiler", ...

// Allocated bytes over time, from allocator events. Times in seconds from the first event.
struct MemoryTimeline {
  std::string device;           // e.g. "cuda:0", "cpu"
  std::int64_t baseline = 0;    // bytes already allocated before the first recorded event
  std::int64_t peak = 0;        // the most bytes allocated at once (baseline included)
  double peak_time = 0.0;
  std::int64_t events = 0;
  std::vector<std::pair<double, std::int64_t>> samples;  // (time, allocated bytes) after each event
};

struct ImportOptions {
  std::optional<Format> format;  // detected from the content when empty
  std::int64_t batch_size = 1;   // the recording's batch size, which no format records
  std::string device;            // the device durations were measured on, when the input does not say
  std::string name;              // trace name (default: the file's stem)
};

struct ImportResult {
  Format format = Format::pytorch_profiler;
  traces::Trace trace;
  std::vector<MemoryTimeline> memory;  // per device, when the input has allocator events
  std::vector<std::string> missing;    // what the simulator needs and the input lacks
};

// Which format `text` is, from its top-level keys (or, for a binary .et, its first bytes);
// nullopt when none matches.
std::optional<Format> detect_format(std::string_view text);

// `text` may be binary (.et). import_file also takes a .et by its extension when no format is
// named, so that a corrupt .et is reported as one.
ImportResult import_text(std::string_view text, std::string_view source, const ImportOptions& options);
ImportResult import_file(const std::filesystem::path& path, ImportOptions options);

// A .et file as the JSON document chakra_jsonizer prints for it ({"global_metadata": ...,
// "nodes": [...]}, Chakra's snake_case field names); what the chakra-et import reads. Throws
// InputError naming `source` and the byte offset for a corrupt file.
std::string chakra_et_to_json(std::string_view bytes, std::string_view source);

// Writes `trace` as a Chakra execution trace (.et bytes): one COMP_NODE per op with Chakra's
// fields filled (dependencies, num_ops, tensor_size, duration_micros, operand shapes and types),
// plus comptrain's own attributes ("comptrain.*") that make the import give back the same trace.
// traces/README.md, "Chakra's binary trace (.et)", lists them.
std::string trace_to_chakra_et(const traces::Trace& trace);

}  // namespace comptrain::trace_import

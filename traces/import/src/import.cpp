#include "comptrain/trace_import/import.hpp"

#include <array>
#include <memory>

#include "comptrain/support/atomic_file.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/support/json_depth.hpp"
#include "chakra_et.hpp"
#include "importers.hpp"
#include "pickle.hpp"

namespace comptrain::trace_import {

namespace {

constexpr std::array<std::pair<Format, std::string_view>, 4> kNames{{
    {Format::pytorch_profiler, "pytorch-profiler"},
    {Format::memory_snapshot, "memory-snapshot"},
    {Format::chakra_json, "chakra-json"},
    {Format::chakra_et, "chakra-et"},
}};

// A JSON document starts with '{' or '[' after optional whitespace. A .et file starts with a
// varint length, which can be one of those bytes too (a 123-byte GlobalMetadata starts with '{'),
// so such a file is taken as JSON first and as a .et when it does not parse.
bool starts_as_json(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && (text[first] == '{' || text[first] == '[');
}

std::optional<Format> detect(const nlohmann::json& document) {
  if (document.is_object()) {
    if (document.contains("traceEvents")) return Format::pytorch_profiler;
    if (document.contains("device_traces") || document.contains("segments")) return Format::memory_snapshot;
    if (document.contains("nodes")) return Format::chakra_json;
    return std::nullopt;
  }
  if (document.is_array() && !document.empty() && document[0].is_object()) {
    if (document[0].contains("ph")) return Format::pytorch_profiler;  // Chrome's bare-array container
    if (document[0].contains("id") && document[0].contains("name")) return Format::chakra_json;
  }
  return std::nullopt;
}

}  // namespace

std::string_view to_string(Format format) {
  for (const auto& [f, name] : kNames) {
    if (f == format) return name;
  }
  return "unknown";
}

std::optional<Format> parse_format(std::string_view text) {
  for (const auto& [f, name] : kNames) {
    if (name == text) return f;
  }
  return std::nullopt;
}

std::optional<Format> detect_format(std::string_view text) {
  try {
    if (detail::looks_like_pickle(text)) return detect(detail::unpickle(text, "input"));
    if (detail::looks_like_chakra_et(text) && (!starts_as_json(text) || !nlohmann::json::accept(text))) return Format::chakra_et;
    return detect(nlohmann::json::parse(text));
  } catch (const InputError&) {
    return std::nullopt;
  } catch (const nlohmann::json::parse_error&) {
    return std::nullopt;
  }
}

namespace {

ImportResult import_impl(std::string_view text, std::string_view source, const ImportOptions& options, const std::string& default_name) {
  if (options.batch_size < 1) throw InputError("batch size " + std::to_string(options.batch_size) + ": expected >= 1");
  detail::JsonInput in(source);
  ImportOptions named = options;
  if (named.name.empty()) named.name = default_name;
  std::optional<Format> format = options.format;
  const bool pickled = detail::looks_like_pickle(text);
  // A .et: named, or binary content that starts as one does. Content that starts as JSON and as a
  // .et at once (pretty-printed JSON's "{\n" is also a 123-byte GlobalMetadata's start) is JSON
  // unless it fails to parse as JSON and parses whole as a .et; a corrupt JSON file keeps its
  // JSON error.
  std::shared_ptr<detail::ChakraEtDocument> et;
  nlohmann::json document;
  if (format == Format::chakra_et || (!format && !pickled && !starts_as_json(text) && detail::looks_like_chakra_et(text))) {
    et = std::make_shared<detail::ChakraEtDocument>(detail::parse_chakra_et(text, std::string(source)));
  } else if (pickled) {
    // _dump_snapshot writes a pickle; read it as the JSON it stands for (JSON Pointers in errors
    // then point into that JSON).
    document = detail::unpickle(text, std::string(source));
  } else if (!format && detail::looks_like_chakra_et(text)) {
    try {
      document = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error&) {
      try {
        et = std::make_shared<detail::ChakraEtDocument>(detail::parse_chakra_et(text, std::string(source)));
      } catch (const InputError&) {
        document = in.parse(text);  // throws the JSON error
      }
    }
  } else {
    document = in.parse(text);
  }
  // Before anything walks the document: the importers and the trace reader behind them copy,
  // compare and print values, which recurses; a value nested 100,000 deep overflowed the stack
  // (shared/defects-2/02). The limit is the trace reader's own.
  if (const auto deep = json_nested_deeper_than(et ? et->document : document)) {
    if (et) in.set_locator([et](const std::string& path) { return et->locate(path); });
    in.fail(*deep, "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels",
            "a document that nests at most " + std::to_string(kMaxJsonDepth) + " levels (the trace format's limit)");
  }
  if (et) {
    // The binary form is read into the document its JSON form would be, and imported by the
    // same code (chakra_import.cpp); errors found there give the byte offset too.
    in.set_locator([et](const std::string& path) { return et->locate(path); });
    try {
      return detail::import_chakra(et->document, in, options, default_name, Format::chakra_et);
    } catch (const traces::TraceError& e) {
      throw InputError(std::string(source) + ": imported as chakra-et, the trace is invalid: " + e.what());
    }
  }
  if (!format) format = detect(document);
  if (!format) {
    throw InputError(std::string(source) +
                     ": /: not a recognised format; expected a PyTorch profiler trace (traceEvents), a memory "
                     "snapshot (segments, device_traces), a Chakra trace in JSON (nodes) or a binary Chakra trace (.et); "
                     "name it with --format");
  }
  ImportResult imported = [&]() -> ImportResult {
    try {
      switch (*format) {
        case Format::pytorch_profiler: return detail::import_profiler(document, in, named);
        case Format::memory_snapshot: return detail::import_snapshot(document, in, named);
        case Format::chakra_json: return detail::import_chakra(document, in, options, default_name, Format::chakra_json);
        case Format::chakra_et: break;  // handled above
      }
    } catch (const traces::TraceError& e) {
      // The imported trace broke a structural rule: the input is inconsistent.
      throw InputError(std::string(source) + ": imported as " + std::string(to_string(*format)) + ", the trace is invalid: " + e.what());
    }
    throw InputError("unknown format");
  }();
  // The trace reader refuses a trace of no op (nothing to simulate); so does the import, rather
  // than write a file nothing reads back. (Chakra traces say so at /nodes already.)
  if (imported.trace.ops().empty()) {
    throw InputError(std::string(source) + ": imported as " + std::string(to_string(*format)) +
                     ", the trace has no op; expected at least one (" +
                     (*format == Format::memory_snapshot ? "an alloc or free event in a device's trace" : "a cpu_op event") + ")");
  }
  return imported;
}

}  // namespace

ImportResult import_text(std::string_view text, std::string_view source, const ImportOptions& options) {
  return import_impl(text, source, options, std::string(source));
}

ImportResult import_file(const std::filesystem::path& path, ImportOptions options) {
  const std::string text = read_file(path);
  if (!options.format && path.extension() == ".et") options.format = Format::chakra_et;
  return import_impl(text, path.string(), options, path.stem().string());
}

std::string chakra_et_to_json(std::string_view bytes, std::string_view source) {
  return detail::parse_chakra_et(bytes, std::string(source)).document.dump(1);
}

namespace detail {

void add_memory_metadata(const std::vector<MemoryTimeline>& memory, std::map<std::string, std::string>& metadata) {
  for (const auto& timeline : memory) {
    const std::string prefix = "memory." + timeline.device + ".";
    metadata[prefix + "peak_bytes"] = std::to_string(timeline.peak);
    metadata[prefix + "baseline_bytes"] = std::to_string(timeline.baseline);
    metadata[prefix + "events"] = std::to_string(timeline.events);
    metadata[prefix + "final_bytes"] = std::to_string(timeline.samples.empty() ? timeline.baseline : timeline.samples.back().second);
  }
}

}  // namespace detail

}  // namespace comptrain::trace_import

#include "comptrain/trace_import/import.hpp"

#include <array>
#include <fstream>
#include <sstream>

#include "comptrain/support/input_error.hpp"
#include "importers.hpp"
#include "pickle.hpp"

namespace comptrain::trace_import {

namespace {

constexpr std::array<std::pair<Format, std::string_view>, 3> kNames{{
    {Format::pytorch_profiler, "pytorch-profiler"},
    {Format::memory_snapshot, "memory-snapshot"},
    {Format::chakra_json, "chakra-json"},
}};

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
    return detect(nlohmann::json::parse(text));
  } catch (const InputError&) {
    return std::nullopt;
  } catch (const nlohmann::json::parse_error&) {
    return std::nullopt;
  }
}

ImportResult import_text(std::string_view text, std::string_view source, const ImportOptions& options) {
  if (options.batch_size < 1) throw InputError("batch size " + std::to_string(options.batch_size) + ": expected >= 1");
  const detail::JsonInput in(source);
  // _dump_snapshot writes a pickle; read it as the JSON it stands for (JSON Pointers in errors
  // then point into that JSON).
  const bool pickled = detail::looks_like_pickle(text);
  const nlohmann::json document = pickled ? detail::unpickle(text, std::string(source)) : in.parse(text);
  std::optional<Format> format = options.format;
  if (!format) format = detect(document);
  if (!format) {
    throw InputError(std::string(source) +
                     ": /: not a recognised format; expected a PyTorch profiler trace (traceEvents), a memory "
                     "snapshot (segments, device_traces) or a Chakra trace in JSON (nodes); name it with --format");
  }
  ImportOptions named = options;
  if (named.name.empty()) named.name = std::string(source);
  try {
    switch (*format) {
      case Format::pytorch_profiler: return detail::import_profiler(document, in, named);
      case Format::memory_snapshot: return detail::import_snapshot(document, in, named);
      case Format::chakra_json: return detail::import_chakra(document, in, named);
    }
  } catch (const traces::TraceError& e) {
    // The imported trace broke a structural rule: the input is inconsistent.
    throw InputError(std::string(source) + ": imported as " + std::string(to_string(*format)) + ", the trace is invalid: " + e.what());
  }
  throw InputError("unknown format");
}

ImportResult import_file(const std::filesystem::path& path, ImportOptions options) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw InputError(path.string() + ": cannot open the file");
  std::ostringstream text;
  text << file.rdbuf();
  if (options.name.empty()) options.name = path.stem().string();
  return import_text(text.str(), path.string(), options);
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

#pragma once
// Chakra's binary execution trace (.et): the byte-level reader. It turns the file into the JSON
// document that chakra_jsonizer would print for it (protobuf's JSON mapping with Chakra's field
// names), which import_chakra (chakra_import.cpp) reads as it reads a Chakra trace in JSON: one
// importer, two parsers. Errors name the file and the byte offset of what is wrong.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "json_input.hpp"

namespace comptrain::trace_import::detail {

struct ChakraEtDocument {
  json document;                          // {"global_metadata": {...}, "nodes": [...]}
  std::size_t metadata_offset = 0;        // where the GlobalMetadata message's length prefix starts
  std::vector<std::size_t> node_offsets;  // where each Node message's length prefix starts
  std::size_t end_offset = 0;             // the file's size: where a further message would start

  // "byte N (node K)" for a JSON Pointer into `document`, so that errors found by the JSON
  // importer point into the binary file.
  std::string locate(const std::string& path) const;
};

// Whether `bytes` starts as a .et file does: a varint length, then the first field of a
// GlobalMetadata message (version, field 1, or attr, field 2; both length-delimited).
bool looks_like_chakra_et(std::string_view bytes);

// Reads a whole .et file. Throws InputError "SOURCE: byte N: what; expected what" for a file that
// is empty, gzip-compressed, cut short (inside a length prefix or a message), or has a message
// that does not parse as the Chakra message expected there.
ChakraEtDocument parse_chakra_et(std::string_view bytes, const std::string& source);

}  // namespace comptrain::trace_import::detail

namespace comptrain::trace_import::detail::chakra_attr {

// comptrain's own attributes in a .et it writes (trace_to_chakra_et), which make the import give
// back the trace it was written from. Chakra's tools ignore attributes they do not know.
// On the GlobalMetadata:
inline constexpr const char* kFormat = "comptrain.format";                  // string "comptrain-trace"
inline constexpr const char* kName = "comptrain.name";                      // string: the trace's name
inline constexpr const char* kBatchSize = "comptrain.batch_size";           // int64: the trace's batch size
inline constexpr std::string_view kMetadataPrefix = "comptrain.metadata.";  // string: one per metadata entry
inline constexpr const char* kTensors = "comptrain.tensors";                // string: the trace format's tensors array (JSON)
// On each Node:
inline constexpr const char* kPhase = "comptrain.phase";                              // string
inline constexpr const char* kKind = "comptrain.kind";                                // string
inline constexpr const char* kFlops = "comptrain.flops";                              // int64 list [fixed, per_sample]
inline constexpr const char* kBytesRead = "comptrain.bytes_read";                     // int64 list [fixed, per_sample]
inline constexpr const char* kBytesWritten = "comptrain.bytes_written";               // int64 list [fixed, per_sample]
inline constexpr const char* kMeasuredSeconds = "comptrain.measured_seconds";         // double
inline constexpr const char* kMeasuredDevice = "comptrain.measured_device";           // string
inline constexpr const char* kMeasuredBatchSize = "comptrain.measured_batch_size";    // int64
inline constexpr const char* kHostSync = "comptrain.host_sync";                       // int64 1, only on ops that have it

}  // namespace comptrain::trace_import::detail::chakra_attr

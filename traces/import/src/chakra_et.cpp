#include "chakra_et.hpp"

#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/util/json_util.h>

#include <charconv>
#include <cstdint>

#include "proto/chakra_et.pb.h"
#include "comptrain/support/input_error.hpp"

namespace comptrain::trace_import::detail {

namespace {

// protobuf reports some parse failures (invalid UTF-8 in a string field) through its log as well
// as through the failed parse; the failure is reported as an InputError with the byte offset, so
// the log line would only repeat it without the location.
void quiet_protobuf_log() {
  static const bool installed = [] {
    google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int, const std::string&) {});
    return true;
  }();
  (void)installed;
}

// A base-128 varint as protolib.py's _DecodeVarint32 and CodedInputStream::ReadVarint32 read the
// length prefix: at most 5 bytes, the value below 2^32.
struct Varint {
  std::uint64_t value = 0;
  std::size_t length = 0;  // bytes used; 0 when the input ended inside the varint
  bool too_long = false;
};

Varint read_varint(std::string_view bytes, std::size_t offset) {
  Varint out;
  for (std::size_t k = 0; k < 5; ++k) {
    if (offset + k >= bytes.size()) return out;
    const auto byte = static_cast<unsigned char>(bytes[offset + k]);
    out.value |= static_cast<std::uint64_t>(byte & 0x7fu) << (7 * k);
    if ((byte & 0x80u) == 0) {
      out.length = k + 1;
      out.too_long = out.value > 0xffffffffu;
      return out;
    }
  }
  out.too_long = true;
  out.length = 5;
  return out;
}

[[noreturn]] void fail_at(const std::string& source, std::size_t offset, const std::string& what, const std::string& expected) {
  throw InputError(source + ": byte " + std::to_string(offset) + ": " + what + "; expected " + expected);
}

json to_json(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;  // data_deps, not dataDeps: as chakra_jsonizer's snake_case output
  // proto3 does not tell a zero from an absent field: node id 0 and an empty name must still be
  // there for the importer, which requires both.
  options.always_print_primitive_fields = true;
  std::string text;
  const auto status = google::protobuf::util::MessageToJsonString(message, &text, options);
  // Only NaN-free, UTF-8-valid messages reach here (the parse validated the strings); a failure
  // would be an internal error, not the input's.
  if (!status.ok()) throw std::runtime_error("protobuf JSON mapping failed: " + std::string(status.message()));
  return json::parse(text);
}

}  // namespace

std::string ChakraEtDocument::locate(const std::string& path) const {
  static constexpr std::string_view kNodes = "/nodes/";
  if (path.rfind(kNodes, 0) == 0) {
    std::size_t index = 0;
    const char* begin = path.data() + kNodes.size();
    const auto [end, ec] = std::from_chars(begin, path.data() + path.size(), index);
    if (ec == std::errc() && end != begin && index < node_offsets.size()) {
      return "byte " + std::to_string(node_offsets[index]) + " (node message " + std::to_string(index + 1) + ")";
    }
  }
  // The node list itself (an empty one): where the first Node message would start.
  if (path == "/nodes") return "byte " + std::to_string(end_offset) + (node_offsets.empty() ? " (no Node message after the global metadata)" : "");
  if (path.rfind("/global_metadata", 0) == 0) return "byte " + std::to_string(metadata_offset) + " (the global metadata message)";
  return "";
}

bool looks_like_chakra_et(std::string_view bytes) {
  const Varint length = read_varint(bytes, 0);
  if (length.length == 0 || length.too_long) return false;
  if (length.value == 0) return bytes.size() > 1;  // an empty GlobalMetadata then a node
  if (length.length >= bytes.size()) return false;
  const auto tag = static_cast<unsigned char>(bytes[length.length]);
  return tag == 0x0a || tag == 0x12;  // field 1 or 2, wire type 2 (length-delimited)
}

ChakraEtDocument parse_chakra_et(std::string_view bytes, const std::string& source) {
  quiet_protobuf_log();
  if (bytes.empty()) fail_at(source, 0, "the file is empty", "a Chakra execution trace (a GlobalMetadata message, then Node messages)");
  if (bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f && static_cast<unsigned char>(bytes[1]) == 0x8b) {
    fail_at(source, 0, "the file is gzip-compressed", "an uncompressed .et file (gunzip it first)");
  }
  ChakraEtDocument out;
  out.document = json::object();
  json nodes = json::array();
  std::size_t offset = 0;
  std::size_t index = 0;  // 0: the global metadata, then the nodes from 1
  while (offset < bytes.size()) {
    const std::string which = index == 0 ? "the GlobalMetadata message" : "Node message " + std::to_string(index);
    const Varint length = read_varint(bytes, offset);
    if (length.length == 0) {
      fail_at(source, offset, "the file ends inside the length prefix of " + which + " (a truncated file)",
              "a base-128 varint length before each message");
    }
    if (length.too_long) {
      fail_at(source, offset, "the length prefix of " + which + " is longer than 32 bits",
              "a message length below 2^32 (Chakra writes it as a varint32)");
    }
    const std::size_t start = offset + length.length;
    if (length.value > bytes.size() - start) {
      fail_at(source, offset,
              which + " is declared " + std::to_string(length.value) + " bytes long but only " + std::to_string(bytes.size() - start) +
                  " bytes follow its length prefix (a truncated file or a corrupt length)",
              "the whole message in the file");
    }
    const auto size = static_cast<int>(length.value);
    if (index == 0) {
      chakra::GlobalMetadata metadata;
      if (!metadata.ParseFromArray(bytes.data() + start, size)) {
        fail_at(source, offset, which + " (" + std::to_string(size) + " bytes) does not parse", "a Chakra GlobalMetadata message");
      }
      out.metadata_offset = offset;
      out.document["global_metadata"] = to_json(metadata);
    } else {
      chakra::Node node;
      if (!node.ParseFromArray(bytes.data() + start, size)) {
        fail_at(source, offset, which + " (" + std::to_string(size) + " bytes) does not parse", "a Chakra Node message");
      }
      out.node_offsets.push_back(offset);
      nodes.push_back(to_json(node));
    }
    offset = start + static_cast<std::size_t>(size);
    ++index;
  }
  out.document["nodes"] = std::move(nodes);
  out.end_offset = bytes.size();
  return out;
}

}  // namespace comptrain::trace_import::detail

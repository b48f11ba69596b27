#include "comptrain/traces/trace_json.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "comptrain/support/atomic_file.hpp"
#include "comptrain/support/did_you_mean.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::traces {
namespace {

using nlohmann::json;

constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

// A file can only be deeper than the format (4 levels: /ops/0/flops/fixed) through fields we
// reject anyway; the limit turns a pathological nesting ("[[[[...") into a clean error early,
// and bounds the path strings and any recursion over the document.
constexpr std::size_t kMaxDepth = 64;

// ------------------------------------------------------------------------------------------
// JSON paths (RFC 6901). The root is "" internally and shown as "/".

std::string escape_token(std::string_view token) {
  std::string escaped;
  escaped.reserve(token.size());
  for (char c : token) {
    if (c == '~') {
      escaped += "~0";
    } else if (c == '/') {
      escaped += "~1";
    } else {
      escaped += c;
    }
  }
  return escaped;
}

std::string child(const std::string& path, std::string_view key) { return path + "/" + escape_token(key); }
std::string child(const std::string& path, std::size_t index) { return path + "/" + std::to_string(index); }
std::string shown(const std::string& path) { return path.empty() ? "/" : path; }

// A string quoted as JSON would write it, cut to `limit` code points so that a huge value
// cannot flood an error message.
std::string json_quoted(std::string_view text, std::size_t limit = 60) {
  std::size_t end = 0;
  std::size_t code_points = 0;
  while (end < text.size() && code_points < limit) {
    ++end;
    while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0U) == 0x80U) ++end;
    ++code_points;
  }
  // The text came out of the JSON parser or our own constants, so it is valid UTF-8; replace
  // rather than throw should that ever not hold, as this only builds a message.
  std::string shown_text =
      json(std::string(text.substr(0, end))).dump(-1, ' ', false, json::error_handler_t::replace);
  if (end < text.size()) shown_text += "...";
  return shown_text;
}

// What a value is, for "found X; expected Y" messages. Scalars show their value; containers
// only their kind, since dumping them could be arbitrarily long.
std::string describe(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return std::string("the boolean ") + (value.get<bool>() ? "true" : "false");
    case json::value_t::number_integer:
      return "the integer " + std::to_string(value.get<std::int64_t>());
    case json::value_t::number_unsigned:
      return "the integer " + std::to_string(value.get<std::uint64_t>());
    case json::value_t::number_float:
      return "the number " + value.dump();
    case json::value_t::string:
      return "the string " + json_quoted(value.get_ref<const std::string&>());
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    default:
      return std::string("a ") + value.type_name();
  }
}

// " (did you mean "x"?)" when a candidate is close to the misspelt `wrong`, else "": the guess is
// the one of every unknown-key message (comptrain/support/did_you_mean.hpp).
template <class Names>
std::string suggestion(std::string_view wrong, const Names& candidates) {
  const std::optional<std::string> guess = did_you_mean(wrong, candidates);
  return guess ? " (did you mean " + json_quoted(*guess) + "?)" : "";
}

template <class Names>
std::string joined(const Names& names) {
  std::string text;
  for (std::string_view name : names) {
    if (!text.empty()) text += ", ";
    text += name;
  }
  return text;
}

// ------------------------------------------------------------------------------------------
// Parsing. nlohmann's own DOM parser keeps the last of duplicate keys silently, so a key
// written twice (one of them presumably wrong) would pass unnoticed; this SAX handler builds
// the same DOM but rejects duplicates, and tracks the JSON path to say where.

struct SyntaxError {
  std::size_t byte = 0;  // nlohmann's position: 1-based index of the offending byte
  std::string message;
};

struct SchemaError {
  std::string path;
  std::string message;
};

class DomBuilder {
 public:
  bool null() { return add(json(nullptr)); }
  bool boolean(bool value) { return add(json(value)); }
  bool number_integer(json::number_integer_t value) { return add(json(value)); }
  bool number_unsigned(json::number_unsigned_t value) { return add(json(value)); }
  bool number_float(json::number_float_t value, const json::string_t& /*text*/) { return add(json(value)); }
  bool string(json::string_t& value) { return add(json(std::move(value))); }
  bool binary(json::binary_t& value) { return add(json(std::move(value))); }

  bool start_object(std::size_t /*elements*/) { return open(json::object()); }
  bool key(json::string_t& key) {
    const Frame& top = stack_.back();
    if (top.value->contains(key)) {
      schema_error_ = SchemaError{
          child(top.path, key), "duplicate key " + json_quoted(key) + "; expected each key once per object"};
      return false;
    }
    key_ = std::move(key);
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(std::size_t /*elements*/) { return open(json::array()); }
  bool end_array() { return close(); }

  bool parse_error(std::size_t position, const std::string& /*last_token*/, const json::exception& error) {
    syntax_error_ = SyntaxError{position, error.what()};
    return false;
  }

  json& root() { return root_; }
  const std::optional<SyntaxError>& syntax_error() const { return syntax_error_; }
  const std::optional<SchemaError>& schema_error() const { return schema_error_; }

 private:
  struct Frame {
    json* value;  // stable: a container's parent does not change while the container is open
    std::string path;
  };

  // The path of the next value; only containers need one (for errors inside them), so
  // scalars do not pay for building it.
  std::string next_path() const {
    if (stack_.empty()) return "";
    const Frame& top = stack_.back();
    return top.value->is_array() ? child(top.path, top.value->size()) : child(top.path, key_);
  }

  // Where the next value goes.
  json* place() {
    if (stack_.empty()) return &root_;
    json& top = *stack_.back().value;
    if (top.is_array()) {
      top.push_back(nullptr);
      return &top.back();
    }
    return &top[key_];
  }

  bool add(json value) {
    *place() = std::move(value);
    return true;
  }

  bool open(json container) {
    std::string path = next_path();
    if (stack_.size() >= kMaxDepth) {
      schema_error_ = SchemaError{std::move(path), "nested deeper than " + std::to_string(kMaxDepth) +
                                                       " levels; expected a comptrain trace"};
      return false;
    }
    json* value = place();
    *value = std::move(container);
    stack_.push_back(Frame{value, std::move(path)});
    return true;
  }

  bool close() {
    stack_.pop_back();
    return true;
  }

  json root_;
  std::vector<Frame> stack_;
  std::string key_;
  std::optional<SyntaxError> syntax_error_;
  std::optional<SchemaError> schema_error_;
};

// "line L, column C" of nlohmann's byte position. Columns count code points, not bytes, so
// they match what an editor shows for non-ASCII names.
std::string line_column(std::string_view text, std::size_t byte) {
  const std::size_t offset = std::min(byte == 0 ? 0 : byte - 1, text.size());
  std::size_t line = 1;
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  std::size_t column = 1;
  for (std::size_t i = line_start; i < offset; ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0U) != 0x80U) ++column;
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

// The length of the well-formed UTF-8 sequence starting at text[i], or 0 if there is none.
std::size_t utf8_sequence_length(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  unsigned char low = 0x80;  // bounds of the second byte (RFC 3629: no overlongs, no surrogates)
  unsigned char high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (i + length > text.size() || byte(i + 1) < low || byte(i + 1) > high) return 0;
  for (std::size_t k = 2; k < length; ++k) {
    if ((byte(i + k) & 0xC0U) != 0x80U) return 0;
  }
  return length;
}

// nlohmann quotes the offending input ("last read: '...'"), which for an encoding error is
// itself ill-formed UTF-8; messages must be safe to print and to embed, so such bytes are
// shown as \xNN.
std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    if (const std::size_t length = utf8_sequence_length(text, i)) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      constexpr std::string_view kHex = "0123456789ABCDEF";
      const auto value = static_cast<unsigned char>(text[i++]);
      out += "\\x";
      out += kHex[value >> 4U];
      out += kHex[value & 0xFU];
    }
  }
  return out;
}

// nlohmann's message without its "[json.exception.parse_error.101] parse error at line 1,
// column 2: " prefix (we compute the location ourselves). An error at the very end of the input
// ("unexpected end of input", an unclosed string) almost always means a truncated file: say so.
std::string syntax_message(std::string message, bool at_end) {
  if (message.starts_with("[json.exception.")) {
    if (std::size_t end = message.find("] "); end != std::string::npos) message.erase(0, end + 2);
  }
  if (message.starts_with("parse error")) {
    if (std::size_t colon = message.find(": "); colon != std::string::npos) message.erase(0, colon + 2);
  }
  message = printable(message);
  std::size_t expected = message.rfind("; expected");
  if (expected == std::string::npos) {
    expected = message.size();
    message += message.starts_with("number overflow") ? "; expected a number within the range of a double"
                                                      : "; expected valid JSON";
  }
  if (at_end) message.insert(expected, " (is the file truncated?)");
  return message;
}

// ------------------------------------------------------------------------------------------
// Schema: from the DOM to a Trace, with a JSON path for every complaint.

class TraceReader {
 public:
  explicit TraceReader(std::string_view source) : source_(source) {}

  Trace read(const json& root) {
    if (!root.is_object()) {
      fail("", "found " + describe(root) +
                   "; expected an object with \"format\": " + json_quoted(kTraceFormatName));
    }
    // The format and version come before the field check: a file of another format or a
    // newer version has other fields, and "unsupported version" is the useful message then.
    const json* format = optional(root, "format");
    if (format == nullptr) {
      fail("/format", "missing field \"format\"; expected " + json_quoted(kTraceFormatName) +
                          " (is this a comptrain trace?)");
    }
    if (!format->is_string() || format->get_ref<const std::string&>() != kTraceFormatName) {
      fail("/format", "found " + describe(*format) + "; expected " + json_quoted(kTraceFormatName) +
                          " (is this a comptrain trace?)");
    }
    std::string known;
    for (int v = 1; v <= kTraceFormatVersion; ++v) {
      known += (v == 1 ? "" : v == kTraceFormatVersion ? " or " : ", ") + std::to_string(v);
    }
    const std::uint64_t version =
        as_uint64(required(root, "", "version", "the format version, " + known), "/version");
    if (version < 1 || version > static_cast<std::uint64_t>(kTraceFormatVersion)) {
      fail("/version", "unsupported version " + std::to_string(version) + "; expected version " + known +
                           ", the versions this build reads" +
                           (version > static_cast<std::uint64_t>(kTraceFormatVersion)
                                ? " (the file is from a newer comptrain)"
                                : ""));
    }
    version_ = version;
    check_fields(root, "", {"format", "version", "name", "batch_size", "metadata", "tensors", "ops"});

    std::string name = as_string(required(root, "", "name", "a string"), "/name");
    batch_size_ = as_int64(required(root, "", "batch_size", "an integer >= 1"), "/batch_size", 1);

    std::map<std::string, std::string> metadata;
    if (const json* object = optional(root, "metadata")) {
      expect_object(*object, "/metadata", "an object of strings");
      for (auto it = object->begin(); it != object->end(); ++it) {
        metadata.emplace(it.key(), as_string(it.value(), child("/metadata", it.key())));
      }
    }

    const json& tensors_json = required(root, "", "tensors", "an array of tensors");
    expect_array(tensors_json, "/tensors", "an array of tensors");
    std::vector<Tensor> tensors;
    tensors.reserve(tensors_json.size());
    std::vector<std::optional<std::uint64_t>> view_ids;
    view_ids.reserve(tensors_json.size());
    std::int64_t total_bytes = 0;
    for (std::size_t i = 0; i < tensors_json.size(); ++i) {
      const std::string path = child("/tensors", i);
      tensors.push_back(read_tensor(tensors_json[i], path, view_ids));
      if (__builtin_add_overflow(total_bytes, tensors.back().bytes(), &total_bytes)) {
        fail(child(path, "shape"), "the tensors up to this one total more than " + std::to_string(kInt64Max) +
                                       " bytes; expected a trace whose sizes fit in 64 bits");
      }
    }
    resolve_views(tensors, view_ids);

    const json& ops_json = required(root, "", "ops", "an array of ops");
    expect_array(ops_json, "/ops", "an array of ops");
    // A trace of no op is an iteration of no work: a simulation of it "fits" in 0 s at any batch
    // (shared/defects-2/16), which is no prediction.
    if (ops_json.empty()) fail("/ops", "an empty array; expected at least one op (a trace of no op has nothing to simulate)");
    std::vector<Op> ops;
    ops.reserve(ops_json.size());
    std::vector<std::vector<std::uint64_t>> after_ids;
    after_ids.reserve(ops_json.size());
    for (std::size_t i = 0; i < ops_json.size(); ++i) {
      ops.push_back(read_op(ops_json[i], child("/ops", i), after_ids));
    }
    for (std::size_t i = 0; i < ops.size(); ++i) {
      for (std::size_t k = 0; k < after_ids[i].size(); ++k) {
        auto found = op_index_.find(after_ids[i][k]);
        if (found == op_index_.end()) {
          fail(child(child(child("/ops", i), "after"), k), "no op has id " + std::to_string(after_ids[i][k]) +
                                                               "; expected the id of an op listed in /ops");
        }
        ops[i].after.push_back(found->second);
      }
    }

    // The Trace constructor checks the structure (producers, views, order, cycles) and names
    // the offending element by the same JSON path; only the file name is missing.
    try {
      return Trace(std::move(name), batch_size_, std::move(tensors), std::move(ops), std::move(metadata));
    } catch (const InputError& error) {
      throw InputError(std::string(source_) + ": " + error.what());
    }
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw InputError(std::string(source_) + ": " + shown(path) + ": " + what);
  }

  // --- fields

  const json* optional(const json& object, const std::string& key) const {
    auto found = object.find(key);
    return found == object.end() ? nullptr : &*found;
  }

  const json& required(const json& object, const std::string& path, const std::string& key,
                       const std::string& expected) const {
    const json* value = optional(object, key);
    if (value == nullptr) {
      fail(child(path, key), "missing field " + json_quoted(key) + "; expected " + expected);
    }
    return *value;
  }

  // Unknown fields are errors: a misspelt optional field ("veiw_of") would otherwise vanish
  // without a trace and change the meaning of the file.
  void check_fields(const json& object, const std::string& path,
                    std::initializer_list<std::string_view> allowed) const {
    for (auto it = object.begin(); it != object.end(); ++it) {
      const std::string& key = it.key();
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        fail(child(path, key), "unknown field " + json_quoted(key) + suggestion(key, allowed) +
                                   "; expected one of: " + joined(allowed));
      }
    }
  }

  // --- values

  void expect_object(const json& value, const std::string& path, const std::string& expected) const {
    if (!value.is_object()) fail(path, "found " + describe(value) + "; expected " + expected);
  }

  void expect_array(const json& value, const std::string& path, const std::string& expected) const {
    if (!value.is_array()) fail(path, "found " + describe(value) + "; expected " + expected);
  }

  std::string as_string(const json& value, const std::string& path) const {
    if (!value.is_string()) fail(path, "found " + describe(value) + "; expected a string");
    return value.get<std::string>();
  }

  // nlohmann stores every integer written without a minus sign as number_unsigned, so a
  // number_integer is negative (or -0) and a number_float has a fraction or an exponent.
  std::uint64_t as_uint64(const json& value, const std::string& path) const {
    if (value.is_number_unsigned()) return value.get<std::uint64_t>();
    if (value.is_number_integer() && value.get<std::int64_t>() == 0) return 0;  // "-0"
    const std::string why = value.is_number_integer() ? " (negative)" : why_not_integer(value);
    fail(path, "found " + describe(value) + why + "; expected an unsigned integer");
  }

  // Why a number that nlohmann read as floating point is not an acceptable integer.
  static std::string why_not_integer(const json& value) {
    if (!value.is_number_float()) return "";
    const double number = value.get<double>();
    if (std::trunc(number) != number) return " (not an integer)";
    // 2^64 and beyond: the only integers nlohmann cannot hold as integers.
    if (std::fabs(number) >= 18446744073709551616.0) return " (out of the 64-bit range)";
    return " (written with a fraction or an exponent)";
  }

  std::int64_t as_int64(const json& value, const std::string& path, std::int64_t minimum) const {
    const std::string expected = "an integer >= " + std::to_string(minimum);
    if (value.is_number_unsigned()) {
      const std::uint64_t number = value.get<std::uint64_t>();
      if (number > static_cast<std::uint64_t>(kInt64Max)) {
        fail(path, "found " + describe(value) + ", too large; expected " + expected +
                       " and <= " + std::to_string(kInt64Max));
      }
      if (static_cast<std::int64_t>(number) < minimum) {
        fail(path, "found " + describe(value) + "; expected " + expected);
      }
      return static_cast<std::int64_t>(number);
    }
    if (value.is_number_integer()) {
      const std::int64_t number = value.get<std::int64_t>();
      if (number < minimum) fail(path, "found " + describe(value) + "; expected " + expected);
      return number;
    }
    fail(path, "found " + describe(value) + why_not_integer(value) + "; expected " + expected);
  }

  double as_seconds(const json& value, const std::string& path) const {
    // nlohmann already rejects non-finite literals (1e999) while parsing.
    if (!value.is_number()) fail(path, "found " + describe(value) + "; expected a number of seconds");
    const double seconds = value.get<double>();
    if (!(seconds >= 0.0)) fail(path, "found " + describe(value) + "; expected a duration >= 0");
    if (seconds > kMaxMeasuredSeconds) {
      fail(path, "found " + describe(value) + "; expected a duration of at most 3600 seconds (1 hour): one GPU op running longer is not a training trace");
    }
    return seconds;
  }

  template <class E>
  E as_vocabulary(const json& value, const std::string& path, const std::string& what,
                  std::optional<E> (*parse)(std::string_view), std::span<const E> all) const {
    std::vector<std::string_view> names;
    names.reserve(all.size());
    for (E each : all) names.push_back(to_string(each));
    if (value.is_string()) {
      const std::string& text = value.get_ref<const std::string&>();
      if (std::optional<E> parsed = parse(text)) return *parsed;
      fail(path, "unknown " + what + " " + json_quoted(text) + suggestion(text, names) +
                     "; expected one of: " + joined(names));
    }
    fail(path, "found " + describe(value) + "; expected a " + what + ", one of: " + joined(names));
  }

  BatchLinear read_batch_linear(const json& value, const std::string& path) const {
    expect_object(value, path, "an object {\"fixed\": integer, \"per_sample\": integer}");
    check_fields(value, path, {"fixed", "per_sample"});
    BatchLinear linear;
    linear.fixed = as_int64(required(value, path, "fixed", "an integer >= 0"), child(path, "fixed"), 0);
    linear.per_sample =
        as_int64(required(value, path, "per_sample", "an integer >= 0"), child(path, "per_sample"), 0);
    // Trace::flops() and friends evaluate this at the trace's batch size in int64.
    std::int64_t scaled = 0;
    if (__builtin_mul_overflow(linear.per_sample, batch_size_, &scaled) ||
        __builtin_add_overflow(scaled, linear.fixed, &scaled)) {
      fail(path, "fixed + per_sample * " + std::to_string(batch_size_) + " exceeds " +
                     std::to_string(kInt64Max) + "; expected a value that fits in 64 bits");
    }
    return linear;
  }

  // --- tensors

  Tensor read_tensor(const json& value, const std::string& path,
                     std::vector<std::optional<std::uint64_t>>& view_ids) {
    expect_object(value, path, "a tensor object");
    if (version_ < 2 && value.is_object() && value.contains("values")) {
      fail(child(path, "values"), "per-tensor \"values\" are a version-2 field but /version is " +
                                      std::to_string(version_) + "; expected \"version\": 2 in a file that has them");
    }
    if (version_ < 3 && value.is_object() && value.contains("gradient")) {
      fail(child(path, "gradient"), "per-tensor \"gradient\" statistics are a version-3 field but /version is " +
                                        std::to_string(version_) + "; expected \"version\": 3 in a file that has them");
    }
    check_fields(value, path, {"id", "name", "dtype", "shape", "role", "batch_dim", "view_of", "values", "gradient"});
    Tensor tensor;
    tensor.id = as_uint64(required(value, path, "id", "an unsigned integer"), child(path, "id"));
    if (auto [it, inserted] = tensor_index_.try_emplace(tensor.id, tensor_index_.size()); !inserted) {
      fail(child(path, "id"), "duplicate tensor id " + std::to_string(tensor.id) + " (also at " +
                                  child("/tensors", it->second) + "); expected ids unique among tensors");
    }
    tensor.name = as_string(required(value, path, "name", "a string"), child(path, "name"));
    tensor.dtype = as_vocabulary<DType>(required(value, path, "dtype", "a dtype"), child(path, "dtype"),
                                        "dtype", parse_dtype, all_dtypes());

    const std::string shape_path = child(path, "shape");
    const json& shape = required(value, path, "shape", "an array of integers >= 0");
    expect_array(shape, shape_path, "an array of integers >= 0");
    // Tensor::bytes() multiplies in int64 without checking; do it here, where we can say where.
    std::int64_t bytes = element_size(tensor.dtype);
    tensor.shape.reserve(shape.size());
    for (std::size_t d = 0; d < shape.size(); ++d) {
      const std::int64_t extent = as_int64(shape[d], child(shape_path, d), 0);
      tensor.shape.push_back(extent);
      if (__builtin_mul_overflow(bytes, extent, &bytes)) {
        fail(shape_path, "the tensor's size in bytes exceeds " + std::to_string(kInt64Max) +
                             "; expected a shape whose byte size fits in 64 bits");
      }
    }

    tensor.role = as_vocabulary<TensorRole>(required(value, path, "role", "a role"), child(path, "role"),
                                            "role", parse_tensor_role, all_tensor_roles());
    if (const json* batch_dim = optional(value, "batch_dim")) {
      const std::string dim_path = child(path, "batch_dim");
      const std::uint64_t dim = as_uint64(*batch_dim, dim_path);
      if (dim >= tensor.shape.size()) {
        fail(dim_path, "found " + std::to_string(dim) + " but the shape has " +
                           std::to_string(tensor.shape.size()) + " dimensions; expected " +
                           (tensor.shape.empty() ? std::string("no batch_dim on a scalar")
                                                 : "an index below " + std::to_string(tensor.shape.size())));
      }
      tensor.batch_dim = static_cast<std::size_t>(dim);
    }
    std::optional<std::uint64_t> view_id;
    if (const json* view_of = optional(value, "view_of")) {
      view_id = as_uint64(*view_of, child(path, "view_of"));
    }
    view_ids.push_back(view_id);
    if (const json* values = optional(value, "values")) tensor.values = read_values(*values, child(path, "values"));
    if (const json* gradient = optional(value, "gradient")) {
      tensor.gradient = read_gradient(*gradient, child(path, "gradient"));
    }
    return tensor;
  }

  // An object of optional number fields (`values`, `gradient`): an object with no key but `keys`,
  // each of `fields` that is present a JSON number (ranges are the Trace constructor's to check;
  // it names the same path).
  template <class Out, class Fields>
  Out read_number_fields(const json& value, const std::string& path, const Fields& fields, const std::vector<std::string_view>& keys) const {
    std::string expected = "an object with any of";
    for (std::size_t k = 0; k < keys.size(); ++k) expected += (k == 0 ? " \"" : ", \"") + std::string(keys[k]) + "\"";
    expect_object(value, path, expected);
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (std::find(keys.begin(), keys.end(), it.key()) == keys.end()) {
        fail(child(path, it.key()), "unknown field " + json_quoted(it.key()) + suggestion(it.key(), keys) +
                                        "; expected one of: " + joined(keys));
      }
    }
    Out out;
    for (const auto& field : fields) {
      const json* number = optional(value, std::string(field.key));
      if (number == nullptr) continue;
      if (!number->is_number()) {
        fail(child(path, field.key), "found " + describe(*number) + "; expected " + std::string(field.expected));
      }
      out.*field.member = number->get<double>();
    }
    return out;
  }

  // Gradient statistics: the number fields of kGradientStatisticsFields, then the integer
  // batch_size.
  GradientStatistics read_gradient(const json& value, const std::string& path) const {
    std::vector<std::string_view> keys;
    for (const GradientStatisticsField& field : kGradientStatisticsFields) keys.push_back(field.key);
    keys.emplace_back("batch_size");
    GradientStatistics statistics = read_number_fields<GradientStatistics>(value, path, kGradientStatisticsFields, keys);
    if (const json* batch = optional(value, "batch_size")) {
      statistics.batch_size = as_int64(*batch, child(path, "batch_size"), 1);
    }
    return statistics;
  }

  ValueFeatures read_values(const json& value, const std::string& path) const {
    std::vector<std::string_view> keys;
    for (const ValueFeatureField& field : kValueFeatureFields) keys.push_back(field.key);
    return read_number_fields<ValueFeatures>(value, path, kValueFeatureFields, keys);
  }

  // view_of names a tensor id that may come later in the file, so it is resolved once every
  // tensor is known. Self-views and cycles of views are the Trace constructor's to report.
  void resolve_views(std::vector<Tensor>& tensors,
                     const std::vector<std::optional<std::uint64_t>>& view_ids) const {
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (!view_ids[i]) continue;
      auto found = tensor_index_.find(*view_ids[i]);
      if (found == tensor_index_.end()) {
        fail(child(child("/tensors", i), "view_of"), "no tensor has id " + std::to_string(*view_ids[i]) +
                                                         "; expected the id of a tensor listed in /tensors");
      }
      tensors[i].view_of = found->second;
    }
  }

  // --- ops

  std::vector<TensorIndex> read_tensor_ids(const json& value, const std::string& path) const {
    expect_array(value, path, "an array of tensor ids");
    std::vector<TensorIndex> indices;
    indices.reserve(value.size());
    for (std::size_t k = 0; k < value.size(); ++k) {
      const std::string element = child(path, k);
      const std::uint64_t id = as_uint64(value[k], element);
      auto found = tensor_index_.find(id);
      if (found == tensor_index_.end()) {
        fail(element,
             "no tensor has id " + std::to_string(id) + "; expected the id of a tensor listed in /tensors");
      }
      indices.push_back(found->second);
    }
    return indices;
  }

  MeasuredDuration read_measured(const json& value, const std::string& path) const {
    expect_object(value, path, "an object {\"seconds\", \"device\", \"batch_size\"}");
    check_fields(value, path, {"seconds", "device", "batch_size"});
    MeasuredDuration measured;
    measured.seconds =
        as_seconds(required(value, path, "seconds", "a number of seconds"), child(path, "seconds"));
    measured.device = as_string(required(value, path, "device", "a string"), child(path, "device"));
    measured.batch_size =
        as_int64(required(value, path, "batch_size", "an integer >= 1"), child(path, "batch_size"), 1);
    return measured;
  }

  Communication read_communication(const json& value, const std::string& path) const {
    expect_object(value, path, "an object {\"kind\", \"group\"[, \"ring\"][, \"overlap\"][, \"splits\"]}");
    check_fields(value, path, {"kind", "group", "ring", "overlap", "splits"});
    Communication communication;
    communication.kind =
        as_vocabulary<CommunicationKind>(required(value, path, "kind", "a communication kind"), child(path, "kind"),
                                         "communication kind", parse_communication_kind, all_communication_kinds());
    communication.group =
        as_vocabulary<ParallelGroup>(required(value, path, "group", "a parallel group"), child(path, "group"),
                                     "parallel group", parse_parallel_group, all_parallel_groups());
    if (const json* ring = optional(value, "ring")) communication.ring = as_int64(*ring, child(path, "ring"), 2);
    if (const json* overlap = optional(value, "overlap")) {
      if (version_ < 6) {
        fail(child(path, "overlap"), "the communication's \"overlap\" is a version-6 field but /version is " +
                                         std::to_string(version_) + "; expected \"version\": 6 in a file that has it");
      }
      communication.overlap = as_int64(*overlap, child(path, "overlap"), 1);
    }
    if (const json* splits = optional(value, "splits")) {
      if (version_ < 7) {
        fail(child(path, "splits"), "the communication's \"splits\" is a version-7 field but /version is " +
                                        std::to_string(version_) + "; expected \"version\": 7 in a file that has it");
      }
      communication.splits = as_int64(*splits, child(path, "splits"), 2);
    }
    return communication;
  }

  Op read_op(const json& value, const std::string& path, std::vector<std::vector<std::uint64_t>>& after_ids) {
    expect_object(value, path, "an op object");
    check_fields(value, path,
                 {"id", "name", "phase", "kind", "inputs", "outputs", "after", "flops", "bytes_read",
                  "bytes_written", "measured", "communication", "host_sync"});
    Op op;
    op.id = as_uint64(required(value, path, "id", "an unsigned integer"), child(path, "id"));
    if (auto [it, inserted] = op_index_.try_emplace(op.id, op_index_.size()); !inserted) {
      fail(child(path, "id"), "duplicate op id " + std::to_string(op.id) + " (also at " +
                                  child("/ops", it->second) + "); expected ids unique among ops");
    }
    op.name = as_string(required(value, path, "name", "a string"), child(path, "name"));
    op.phase = as_vocabulary<Phase>(required(value, path, "phase", "a phase"), child(path, "phase"), "phase",
                                    parse_phase, all_phases());
    op.kind = as_vocabulary<OpKind>(required(value, path, "kind", "an op kind"), child(path, "kind"),
                                    "op kind", parse_op_kind, all_op_kinds());
    if (version_ < 4 && (op.kind == OpKind::gather || op.kind == OpKind::scatter)) {
      fail(child(path, "kind"), "op kind \"" + std::string(to_string(op.kind)) + "\" is a version-4 value but /version is " +
                                    std::to_string(version_) + "; expected \"version\": 4 in a file that has it");
    }
    if (version_ < 5 && op.kind == OpKind::communication) {
      fail(child(path, "kind"), "op kind \"communication\" is a version-5 value but /version is " +
                                    std::to_string(version_) + "; expected \"version\": 5 in a file that has it");
    }
    op.inputs =
        read_tensor_ids(required(value, path, "inputs", "an array of tensor ids"), child(path, "inputs"));
    op.outputs =
        read_tensor_ids(required(value, path, "outputs", "an array of tensor ids"), child(path, "outputs"));
    std::vector<std::uint64_t> after;
    if (const json* list = optional(value, "after")) {
      const std::string after_path = child(path, "after");
      expect_array(*list, after_path, "an array of op ids");
      after.reserve(list->size());
      for (std::size_t k = 0; k < list->size(); ++k) {
        after.push_back(as_uint64((*list)[k], child(after_path, k)));
      }
    }
    after_ids.push_back(std::move(after));
    op.flops = read_batch_linear(required(value, path, "flops", "{\"fixed\", \"per_sample\"}"),
                                 child(path, "flops"));
    op.bytes_read = read_batch_linear(required(value, path, "bytes_read", "{\"fixed\", \"per_sample\"}"),
                                      child(path, "bytes_read"));
    op.bytes_written = read_batch_linear(
        required(value, path, "bytes_written", "{\"fixed\", \"per_sample\"}"), child(path, "bytes_written"));
    if (const json* measured = optional(value, "measured")) {
      op.measured = read_measured(*measured, child(path, "measured"));
    }
    // Present exactly on communication ops (checked here, where the path is the field's, and
    // again by the Trace constructor for traces built in code).
    const json* communication = optional(value, "communication");
    if (communication) {
      if (op.kind != OpKind::communication) {
        fail(child(path, "communication"), "op " + json_quoted(op.name) + " is of kind " + std::string(to_string(op.kind)) +
                                               "; only ops of kind communication have a communication");
      }
      op.communication = read_communication(*communication, child(path, "communication"));
    } else if (op.kind == OpKind::communication) {
      fail(child(path, "communication"), "op " + json_quoted(op.name) +
                                             " is of kind communication but has no \"communication\"; expected "
                                             "{\"kind\": \"all_reduce\", \"group\": \"tensor\"} or the like");
    }
    if (const json* host_sync = optional(value, "host_sync")) {
      const std::string sync_path = child(path, "host_sync");
      if (version_ < 8) {
        fail(sync_path, "\"host_sync\" is a version-8 field but /version is " + std::to_string(version_) +
                            "; expected \"version\": 8 in a file that has it");
      }
      if (!host_sync->is_boolean()) fail(sync_path, "found " + describe(*host_sync) + "; expected true or false");
      op.host_sync = host_sync->get<bool>();
    }
    return op;
  }

  std::string_view source_;
  std::uint64_t version_ = 1;
  std::int64_t batch_size_ = 1;
  std::unordered_map<std::uint64_t, TensorIndex> tensor_index_;
  std::unordered_map<std::uint64_t, OpIndex> op_index_;
};

// ------------------------------------------------------------------------------------------
// Writing. By hand rather than through a json DOM: the key order is the documented one (not
// alphabetical), each tensor and op takes one line (readable, diffable), and the output is a
// pure function of the trace.

class TraceWriter {
 public:
  TraceWriter(const Trace& trace, int indent)
      : trace_(trace), pretty_(indent >= 0), indent_(static_cast<std::size_t>(std::max(indent, 0))) {}

  std::string write() {
    out_ += '{';
    newline(1);
    key("format");
    string(kTraceFormatName, "/format");
    next_field(1);
    key("version");
    // The oldest version that can hold the trace (2 added `values`, 3 `gradient`, 4 the op kinds
    // gather and scatter, 5 communication, 6 its overlap, 7 its splits, 8 host_sync), so that a trace without them stays readable by older builds and its
    // files keep their bytes.
    const auto any = [this](auto has) { return std::any_of(trace_.tensors().begin(), trace_.tensors().end(), has); };
    const bool gathers = std::any_of(trace_.ops().begin(), trace_.ops().end(), [](const Op& op) {
      return op.kind == OpKind::gather || op.kind == OpKind::scatter;
    });
    const bool communicates = std::any_of(trace_.ops().begin(), trace_.ops().end(),
                                          [](const Op& op) { return op.kind == OpKind::communication; });
    const bool overlaps = std::any_of(trace_.ops().begin(), trace_.ops().end(),
                                      [](const Op& op) { return op.communication && op.communication->overlap > 0; });
    const bool splits = std::any_of(trace_.ops().begin(), trace_.ops().end(),
                                    [](const Op& op) { return op.communication && op.communication->splits > 0; });
    const bool host_syncs = std::any_of(trace_.ops().begin(), trace_.ops().end(), [](const Op& op) { return op.host_sync; });
    out_ += host_syncs                                                ? "8"
            : splits                                                  ? "7"
            : overlaps                                                ? "6"
            : communicates                                            ? "5"
            : gathers                                                 ? "4"
            : any([](const Tensor& t) { return !t.gradient.empty(); }) ? "3"
            : any([](const Tensor& t) { return !t.values.empty(); })   ? "2"
                                                                       : "1";
    next_field(1);
    key("name");
    string(trace_.name(), "/name");
    next_field(1);
    key("batch_size");
    out_ += std::to_string(trace_.batch_size());
    if (!trace_.metadata().empty()) {
      next_field(1);
      key("metadata");
      out_ += '{';
      bool first = true;
      for (const auto& [name, value] : trace_.metadata()) {
        if (!first) separator();
        first = false;
        key(name);
        string(value, child("/metadata", name));
      }
      out_ += '}';
    }
    next_field(1);
    key("tensors");
    list(trace_.tensors().size(), [this](std::size_t i) { tensor(i); });
    next_field(1);
    key("ops");
    list(trace_.ops().size(), [this](std::size_t i) { op(i); });
    newline(0);
    out_ += '}';
    return std::move(out_);
  }

 private:
  void newline(std::size_t level) {
    if (!pretty_) return;
    out_ += '\n';
    out_.append(level * indent_, ' ');
  }
  void next_field(std::size_t level) {
    out_ += ',';
    newline(level);
  }
  void separator() { out_ += pretty_ ? ", " : ","; }
  void key(std::string_view name) {
    string(name, "");
    out_ += pretty_ ? ": " : ":";
  }

  void string(std::string_view text, const std::string& path) {
    try {
      out_ += json(std::string(text)).dump();
    } catch (const json::type_error&) {
      // Only programmatic traces can get here: the reader accepts UTF-8 only.
      throw InputError("trace " + json_quoted(trace_.name()) + ": " + shown(path) +
                       ": not valid UTF-8; expected UTF-8 text");
    }
  }

  template <class Element>
  void list(std::size_t count, Element element) {
    out_ += '[';
    for (std::size_t i = 0; i < count; ++i) {
      if (i > 0) out_ += ',';
      newline(2);
      element(i);
    }
    if (count > 0) newline(1);
    out_ += ']';
  }

  void integers(std::span<const std::int64_t> values) {
    out_ += '[';
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (i > 0) separator();
      out_ += std::to_string(values[i]);
    }
    out_ += ']';
  }

  // Indices become the stored ids, so the file keeps the ids it was read with.
  void tensor_ids(std::span<const TensorIndex> indices) {
    out_ += '[';
    for (std::size_t i = 0; i < indices.size(); ++i) {
      if (i > 0) separator();
      out_ += std::to_string(trace_.tensor(indices[i]).id);
    }
    out_ += ']';
  }

  void batch_linear(std::string_view name, const BatchLinear& linear) {
    separator();
    key(name);
    out_ += '{';
    key("fixed");
    out_ += std::to_string(linear.fixed);
    separator();
    key("per_sample");
    out_ += std::to_string(linear.per_sample);
    out_ += '}';
  }

  void tensor(TensorIndex index) {
    const Tensor& tensor = trace_.tensor(index);
    const std::string path = child("/tensors", index);
    out_ += '{';
    key("id");
    out_ += std::to_string(tensor.id);
    separator();
    key("name");
    string(tensor.name, child(path, "name"));
    separator();
    key("dtype");
    string(to_string(tensor.dtype), "");
    separator();
    key("shape");
    integers(tensor.shape);
    separator();
    key("role");
    string(to_string(tensor.role), "");
    if (tensor.batch_dim) {
      separator();
      key("batch_dim");
      out_ += std::to_string(*tensor.batch_dim);
    }
    if (tensor.view_of) {
      separator();
      key("view_of");
      out_ += std::to_string(trace_.tensor(*tensor.view_of).id);
    }
    if (!tensor.values.empty()) {
      separator();
      key("values");
      out_ += '{';
      bool first = true;
      for (const ValueFeatureField& field : kValueFeatureFields) {
        const std::optional<double>& number = tensor.values.*field.member;
        if (!number) continue;
        if (!first) separator();
        first = false;
        key(field.key);
        // Finite (the Trace constructor checked); the shortest text that reads back the same.
        out_ += json(*number).dump();
      }
      out_ += '}';
    }
    if (!tensor.gradient.empty()) {
      separator();
      key("gradient");
      out_ += '{';
      bool first = true;
      for (const GradientStatisticsField& field : kGradientStatisticsFields) {
        const std::optional<double>& number = tensor.gradient.*field.member;
        if (!number) continue;
        if (!first) separator();
        first = false;
        key(field.key);
        // Finite (the Trace constructor checked); the shortest text that reads back the same
        // (terms, a whole number, as 1024.0).
        out_ += json(*number).dump();
      }
      if (tensor.gradient.batch_size) {
        if (!first) separator();
        key("batch_size");
        out_ += std::to_string(*tensor.gradient.batch_size);
      }
      out_ += '}';
    }
    out_ += '}';
  }

  void op(OpIndex index) {
    const Op& op = trace_.op(index);
    const std::string path = child("/ops", index);
    out_ += '{';
    key("id");
    out_ += std::to_string(op.id);
    separator();
    key("name");
    string(op.name, child(path, "name"));
    separator();
    key("phase");
    string(to_string(op.phase), "");
    separator();
    key("kind");
    string(to_string(op.kind), "");
    separator();
    key("inputs");
    tensor_ids(op.inputs);
    separator();
    key("outputs");
    tensor_ids(op.outputs);
    if (!op.after.empty()) {
      separator();
      key("after");
      out_ += '[';
      for (std::size_t i = 0; i < op.after.size(); ++i) {
        if (i > 0) separator();
        out_ += std::to_string(trace_.op(op.after[i]).id);
      }
      out_ += ']';
    }
    batch_linear("flops", op.flops);
    batch_linear("bytes_read", op.bytes_read);
    batch_linear("bytes_written", op.bytes_written);
    if (op.measured) {
      const std::string seconds_path = child(child(path, "measured"), "seconds");
      if (!std::isfinite(op.measured->seconds)) {
        // JSON has no NaN or infinity; nlohmann would write null, which no reader accepts.
        throw InputError("trace " + json_quoted(trace_.name()) + ": " + seconds_path +
                         ": not a finite number; expected a duration >= 0");
      }
      separator();
      key("measured");
      out_ += '{';
      key("seconds");
      // nlohmann prints the shortest text that reads back as the same double (Grisu2), so
      // durations survive a round trip bit for bit.
      out_ += json(op.measured->seconds).dump();
      separator();
      key("device");
      string(op.measured->device, child(child(path, "measured"), "device"));
      separator();
      key("batch_size");
      out_ += std::to_string(op.measured->batch_size);
      out_ += '}';
    }
    if (op.communication) {
      separator();
      key("communication");
      out_ += '{';
      key("kind");
      string(to_string(op.communication->kind), "");
      separator();
      key("group");
      string(to_string(op.communication->group), "");
      if (op.communication->ring > 0) {
        separator();
        key("ring");
        out_ += std::to_string(op.communication->ring);
      }
      if (op.communication->overlap > 0) {
        separator();
        key("overlap");
        out_ += std::to_string(op.communication->overlap);
      }
      if (op.communication->splits > 0) {
        separator();
        key("splits");
        out_ += std::to_string(op.communication->splits);
      }
      out_ += '}';
    }
    if (op.host_sync) {
      separator();
      key("host_sync");
      out_ += "true";
    }
    out_ += '}';
  }

  const Trace& trace_;
  bool pretty_;
  std::size_t indent_;
  std::string out_;
};

}  // namespace

std::string trace_to_json(const Trace& trace, int indent) { return TraceWriter(trace, indent).write(); }

std::string metadata_to_json(const Trace& trace) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& [key, value] : trace.metadata()) {
    std::int64_t number = 0;
    const char* end = value.data() + value.size();
    const auto [stop, error] = std::from_chars(value.data(), end, number);
    if (!value.empty() && error == std::errc() && stop == end && (value == "0" || value[0] != '0')) {
      j[key] = number;
    } else {
      j[key] = value;
    }
  }
  return j.dump();
}

Trace trace_from_json(std::string_view text, std::string_view source) {
  DomBuilder builder;
  const bool parsed = json::sax_parse(text.begin(), text.end(), &builder);
  if (!parsed) {
    if (const auto& error = builder.syntax_error()) {
      throw InputError(std::string(source) + ": " + line_column(text, error->byte) + ": " +
                       syntax_message(error->message, error->byte > text.size()));
    }
    const SchemaError error = builder.schema_error().value_or(SchemaError{"", "invalid JSON"});
    throw InputError(std::string(source) + ": " + shown(error.path) + ": " + error.message);
  }
  return TraceReader(source).read(builder.root());
}

Trace read_trace_file(const std::filesystem::path& path) {
  const std::string text = read_file(path);
  return trace_from_json(text, path.string());
}

void write_trace_file(const Trace& trace, const std::filesystem::path& path) {
  // Files end with a newline, as text files should; trace_to_json leaves that to its caller.
  write_file_atomically(path, trace_to_json(trace) + "\n");
}

}  // namespace comptrain::traces

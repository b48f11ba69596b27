#pragma once
// Reading other tools' JSON with errors that point into the file (JSON Pointers), shared by the
// importers. Numbers may be JSON numbers or, as protobuf's JSON mapping writes 64-bit integers,
// decimal strings.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include "comptrain/traces/vocabulary.hpp"

namespace comptrain::trace_import::detail {

using nlohmann::json;

class JsonInput {
 public:
  explicit JsonInput(std::string_view source) : source_(source) {}

  // Parses the document; syntax errors are InputErrors with the byte offset.
  json parse(std::string_view text) const;

  [[noreturn]] void fail(const std::string& path, const std::string& what, const std::string& expected) const;

  const json& object(const json& value, const std::string& path) const;
  const json& array(const json& value, const std::string& path) const;
  const json& member(const json& object, const std::string& path, const char* key) const;  // required
  const json* find(const json& object, const char* key) const;  // nullptr when absent

  std::int64_t integer(const json& value, const std::string& path) const;
  std::int64_t non_negative(const json& value, const std::string& path) const;
  std::uint64_t id(const json& value, const std::string& path) const;
  double number(const json& value, const std::string& path) const;
  std::string string(const json& value, const std::string& path) const;

  // a + b and a - b for running byte and FLOP totals; when the exact result does not fit in an
  // int64 it is an InputError at `path` (the value that made it overflow) saying which total.
  std::int64_t add(std::int64_t a, std::int64_t b, const std::string& path, const std::string& total) const;
  std::int64_t subtract(std::int64_t a, std::int64_t b, const std::string& path, const std::string& total) const;
  // A sum or difference of finite times or durations, checked to be finite as well (two finite
  // doubles near 1e308 add up to infinity).
  double finite(double value, const std::string& path, const std::string& what) const;

  const std::string& source() const { return source_; }

  // Where a JSON Pointer lies in the original input when the document was made from another
  // encoding (a Chakra .et file: "byte 1234 (node message 5)"); errors then give both.
  void set_locator(std::function<std::string(const std::string&)> locator) { locator_ = std::move(locator); }
  std::string locate(const std::string& path) const { return locator_ ? locator_(path) : std::string(); }

 private:
  std::string source_;
  std::function<std::string(const std::string&)> locator_;
};

// JSON Pointer child: "/traceEvents" + 3 -> "/traceEvents/3", escaping '~' and '/'.
std::string child(const std::string& path, std::string_view key);
std::string child(const std::string& path, std::size_t index);

// The op kind of a framework op or kernel name ("aten::convolution", "ConvolutionBackward0",
// "autograd::engine::evaluate_function: AddmmBackward0"); `other` when nothing matches.
traces::OpKind kind_from_name(std::string_view name);

// Backward when the name says so (autograd nodes, *_backward kernels), optimizer for optimizer
// steps, forward otherwise.
traces::Phase phase_from_name(std::string_view name);

}  // namespace comptrain::trace_import::detail

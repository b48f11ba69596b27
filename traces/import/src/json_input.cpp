#include "json_input.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "comptrain/support/input_error.hpp"
#include "comptrain/support/json_excerpt.hpp"

namespace comptrain::trace_import::detail {

namespace {

std::string type_name(const json& value) {
  switch (value.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_float: return "a fractional number";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    default: return "an unexpected value";
  }
}

// Why a JSON number that parsed as a double is not read as an integer: integers beyond uint64
// parse as doubles too, and must not be truncated or rounded into range.
std::string float_as_integer(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  if (!std::isfinite(value)) return std::string("the non-finite number ") + text;
  if (value != std::trunc(value)) return std::string("the non-integer number ") + text;
  if (std::fabs(value) >= 0x1p63) return std::string("the number ") + text + " is outside the int64 range";
  return std::string("the number ") + text + " is written with a fraction or an exponent";
}

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

json JsonInput::parse(std::string_view text) const {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw InputError(source_ + ": byte " + std::to_string(e.byte) + ": not valid JSON (" + e.what() +
                     "); expected a JSON document");
  }
}

void JsonInput::fail(const std::string& path, const std::string& what, const std::string& expected) const {
  const std::string where = locate(path);
  throw InputError(source_ + ": " + (where.empty() ? std::string() : where + ": ") + (path.empty() ? std::string("/") : path) + ": " + what +
                   "; expected " + expected);
}

const json& JsonInput::object(const json& value, const std::string& path) const {
  if (!value.is_object()) fail(path, type_name(value), "an object");
  return value;
}

const json& JsonInput::array(const json& value, const std::string& path) const {
  if (!value.is_array()) fail(path, type_name(value), "an array");
  return value;
}

const json& JsonInput::member(const json& obj, const std::string& path, const char* key) const {
  object(obj, path);
  const auto it = obj.find(key);
  if (it == obj.end()) fail(child(path, key), "missing", std::string("the field \"") + key + "\"");
  return *it;
}

const json* JsonInput::find(const json& obj, const char* key) const {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

std::int64_t JsonInput::integer(const json& value, const std::string& path) const {
  if (value.is_number_integer() && !value.is_number_unsigned()) return value.get<std::int64_t>();
  if (value.is_number_unsigned()) {
    const auto u = value.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) fail(path, "integer too large", "an int64");
    return static_cast<std::int64_t>(u);
  }
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    std::int64_t out = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    if (ec == std::errc() && end == text.data() + text.size() && !text.empty()) return out;
    if (ec == std::errc::result_out_of_range) fail(path, json_excerpt(value) + " is outside the int64 range", "an int64");
    fail(path, json_excerpt(value) + " is not an integer", "an integer (or a decimal string, as protobuf JSON writes int64)");
  }
  if (value.is_number_float()) fail(path, float_as_integer(value.get<double>()), "an integer");
  fail(path, type_name(value), "an integer");
}

std::int64_t JsonInput::non_negative(const json& value, const std::string& path) const {
  const std::int64_t out = integer(value, path);
  if (out < 0) fail(path, "negative value " + std::to_string(out), "an integer >= 0");
  return out;
}

std::uint64_t JsonInput::id(const json& value, const std::string& path) const {
  if (value.is_number_unsigned()) return value.get<std::uint64_t>();
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    std::uint64_t out = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    if (ec == std::errc() && end == text.data() + text.size() && !text.empty()) return out;
    fail(path, json_excerpt(value) + (ec == std::errc::result_out_of_range ? " is outside the uint64 range" : " is not an id"), "a uint64 id");
  }
  if (value.is_number_integer() && value.get<std::int64_t>() >= 0) return value.get<std::uint64_t>();
  if (value.is_number_integer()) fail(path, "negative id " + std::to_string(value.get<std::int64_t>()), "a uint64 id");
  if (value.is_number_float()) fail(path, float_as_integer(value.get<double>()), "a uint64 id");
  fail(path, type_name(value), "a uint64 id");
}

double JsonInput::number(const json& value, const std::string& path) const {
  if (value.is_number()) {
    const double out = value.get<double>();
    if (std::isfinite(out)) return out;
  }
  if (value.is_string()) {
    // from_chars, not stod: no leading blanks, no hexadecimal, no locale; "inf", "nan" and
    // values beyond the double range are refused below.
    const auto& text = value.get_ref<const std::string&>();
    double out = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    if (ec == std::errc() && end == text.data() + text.size() && !text.empty() && std::isfinite(out)) return out;
    fail(path, json_excerpt(value) + " is not a finite decimal number", "a finite number");
  }
  if (value.is_number_float()) fail(path, "the non-finite number " + std::to_string(value.get<double>()), "a finite number");
  fail(path, type_name(value), "a finite number");
}

std::string JsonInput::string(const json& value, const std::string& path) const {
  if (!value.is_string()) fail(path, type_name(value), "a string");
  return value.get<std::string>();
}

std::int64_t JsonInput::add(std::int64_t a, std::int64_t b, const std::string& path, const std::string& total) const {
  std::int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) {
    fail(path, total + " overflows int64 (" + std::to_string(a) + " + " + std::to_string(b) + ")",
         "sizes whose running total fits in 64 bits");
  }
  return out;
}

std::int64_t JsonInput::subtract(std::int64_t a, std::int64_t b, const std::string& path, const std::string& total) const {
  std::int64_t out = 0;
  if (__builtin_sub_overflow(a, b, &out)) {
    fail(path, total + " overflows int64 (" + std::to_string(a) + " - " + std::to_string(b) + ")",
         "sizes whose running total fits in 64 bits");
  }
  return out;
}

double JsonInput::finite(double value, const std::string& path, const std::string& what) const {
  if (!std::isfinite(value)) fail(path, what + " is not finite", "times and durations whose sums and differences are finite");
  return value;
}

std::string child(const std::string& path, std::string_view key) {
  std::string out = path + "/";
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::string child(const std::string& path, std::size_t index) { return path + "/" + std::to_string(index); }

traces::OpKind kind_from_name(std::string_view name) {
  using traces::OpKind;
  const std::string n = lower(name);
  // Most specific first: "conv" before "linear" so ConvolutionBackward is a conv, "softmax"
  // before "log_softmax"'s loss, and so on.
  static const std::array<std::pair<const char*, OpKind>, 33> table{{
      {"optimizer", OpKind::optimizer_update}, {"_foreach_", OpKind::optimizer_update},
      {"conv", OpKind::conv}, {"cudnn_convolution", OpKind::conv},
      {"attention", OpKind::attention}, {"flash", OpKind::attention},
      {"log_softmax", OpKind::loss}, {"nll_loss", OpKind::loss}, {"cross_entropy", OpKind::loss},
      {"mse_loss", OpKind::loss}, {"softmax", OpKind::softmax},
      {"batch_norm", OpKind::batchnorm}, {"batchnorm", OpKind::batchnorm},
      {"layer_norm", OpKind::layernorm}, {"layernorm", OpKind::layernorm},
      {"addmm", OpKind::linear}, {"linear", OpKind::linear}, {"gemm", OpKind::linear},
      {"bmm", OpKind::matmul}, {"matmul", OpKind::matmul}, {"aten::mm", OpKind::matmul}, {"mmbackward", OpKind::matmul},
      {"relu", OpKind::relu}, {"threshold", OpKind::relu}, {"gelu", OpKind::gelu},
      {"pool", OpKind::pool}, {"dropout", OpKind::dropout}, {"embedding", OpKind::embedding},
      {"aten::view", OpKind::view}, {"aten::reshape", OpKind::view}, {"aten::flatten", OpKind::view},
      {"aten::t", OpKind::view}, {"transpose", OpKind::view},
  }};
  for (const auto& [needle, kind] : table) {
    if (n.find(needle) != std::string::npos) {
      // "aten::t" would match "aten::tanh": a view only when it is the whole name.
      if (std::string_view(needle) == "aten::t" && n != "aten::t") continue;
      return kind;
    }
  }
  static const std::array<const char*, 14> elementwise{"add", "mul", "div", "sub", "copy", "fill", "zero", "clone",
                                                       "sum", "mean", "tanh", "sigmoid", "neg", "sqrt"};
  for (const char* needle : elementwise) {
    if (n.find(needle) != std::string::npos) return OpKind::elementwise;
  }
  return OpKind::other;
}

traces::Phase phase_from_name(std::string_view name) {
  const std::string n = lower(name);
  if (n.find("optimizer") != std::string::npos || n.find("_foreach_") != std::string::npos) return traces::Phase::optimizer;
  if (n.find("backward") != std::string::npos || n.find("autograd::engine") != std::string::npos) return traces::Phase::backward;
  return traces::Phase::forward;
}

}  // namespace comptrain::trace_import::detail

#include "comptrain/kernels/array_io.hpp"

#include <cstring>
#include <limits>
#include <string>

#include "comptrain/support/did_you_mean.hpp"

namespace comptrain::kernels {
namespace {

// "<file>: not a supported .npy file: at byte <offset>: <what>": the offset lets the header be
// inspected with a hex dump (what was found and what was expected are in `what`).
[[noreturn]] void bad(const std::string& name, std::size_t offset, const std::string& what) {
  throw InputError(name + ": not a supported .npy file: at byte " + std::to_string(offset) + ": " + what);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

}  // namespace

FloatArray parse_npy(std::string_view bytes, const std::string& name) {
  // Offset of a view into `bytes`, for the messages.
  const auto off = [&](std::string_view v) { return static_cast<std::size_t>(v.data() - bytes.data()); };
  // Magic "\x93NUMPY", major, minor, header length (u16 for 1.x, u32 for 2.x/3.x).
  if (bytes.size() < 10 || bytes.substr(0, 6) != std::string_view("\x93NUMPY", 6)) {
    bad(name, 0, bytes.size() < 10 ? "file of " + std::to_string(bytes.size()) + " bytes is shorter than the 10-byte .npy preamble"
                                    : "bad magic (expected \"\\x93NUMPY\")");
  }
  const auto major = static_cast<unsigned char>(bytes[6]);
  if (major < 1 || major > 3) bad(name, 6, "format version " + std::to_string(major) + " (expected 1, 2 or 3)");
  std::size_t header_len = 0, prefix = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<std::size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    prefix = 10;
  } else {
    if (bytes.size() < 12) bad(name, 8, "file ends inside the 4-byte header length of format version " + std::to_string(major));
    for (int i = 3; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(bytes[8 + static_cast<std::size_t>(i)]);
    prefix = 12;
  }
  if (bytes.size() - prefix < header_len) {
    bad(name, 8, "header length " + std::to_string(header_len) + " runs past the end of the file (" +
                     std::to_string(bytes.size() - prefix) + " bytes after the preamble)");
  }
  std::string_view dict = trim(bytes.substr(prefix, header_len));
  if (dict.size() < 2 || dict.front() != '{' || dict.back() != '}') bad(name, prefix, "header is not a dict (expected '{...}')");
  dict = trim(dict.substr(1, dict.size() - 2));
  if (!dict.empty() && dict.back() == ',') dict.remove_suffix(1);
  std::string descr, fortran;
  std::string shape_text;
  std::size_t descr_at = prefix, fortran_at = prefix, shape_at = prefix;
  bool have_shape = false;
  // Exactly three keys, in any order: 'descr': '<f4', 'fortran_order': False, 'shape': (...)
  while (!dict.empty()) {
    dict = trim(dict);
    if (dict.empty() || dict.front() != '\'') bad(name, off(dict), "expected a quoted key ('descr', 'fortran_order' or 'shape')");
    const auto key_end = dict.find('\'', 1);
    if (key_end == std::string_view::npos) bad(name, off(dict), "unterminated key");
    const std::size_t key_at = off(dict);
    const std::string key(dict.substr(1, key_end - 1));
    dict = trim(dict.substr(key_end + 1));
    if (dict.empty() || dict.front() != ':') bad(name, off(dict), "expected ':' after '" + key + "'");
    dict = trim(dict.substr(1));
    std::string_view value;
    if (!dict.empty() && dict.front() == '(') {
      const auto close = dict.find(')');
      if (close == std::string_view::npos) bad(name, off(dict), "unterminated shape tuple (expected ')')");
      value = dict.substr(0, close + 1);
      dict = dict.substr(close + 1);
    } else {
      const auto comma = dict.find(',');
      value = trim(dict.substr(0, comma));
      dict = comma == std::string_view::npos ? std::string_view{} : dict.substr(comma);
    }
    dict = trim(dict);
    if (!dict.empty()) {
      if (dict.front() != ',') bad(name, off(dict), "expected ',' between keys");
      dict.remove_prefix(1);
    }
    if (key == "descr") {
      if (!descr.empty()) bad(name, key_at, "duplicate key 'descr'");
      descr = std::string(value);
      descr_at = off(value);
    } else if (key == "fortran_order") {
      if (!fortran.empty()) bad(name, key_at, "duplicate key 'fortran_order'");
      fortran = std::string(value);
      fortran_at = off(value);
    } else if (key == "shape") {
      if (have_shape) bad(name, key_at, "duplicate key 'shape'");
      shape_text = std::string(value);
      shape_at = off(value);
      have_shape = true;
    } else {
      bad(name, key_at, "unknown key '" + key + "' (" + did_you_mean_text(did_you_mean(key, {"descr", "fortran_order", "shape"})) +
                            "expected 'descr', 'fortran_order' and 'shape')");
    }
  }
  if (descr != "'<f4'") {
    bad(name, descr_at, "dtype " + (descr.empty() ? std::string("missing") : descr) + " (expected '<f4', little-endian float32)");
  }
  if (fortran != "False") {
    bad(name, fortran_at, "fortran_order " + (fortran.empty() ? std::string("missing") : fortran) + " (expected False, C order)");
  }
  if (!have_shape || shape_text.size() < 2 || shape_text.front() != '(' || shape_text.back() != ')') {
    bad(name, shape_at, "missing shape (expected 'shape': (d0, d1, ...))");
  }
  FloatArray a;
  std::vector<std::uint64_t> dims;
  std::string_view rest(shape_text);
  rest = rest.substr(1, rest.size() - 2);
  const auto rest_at = [&] { return shape_at + static_cast<std::size_t>(rest.data() - shape_text.data()); };
  while (!trim(rest).empty()) {
    rest = trim(rest);
    std::uint64_t v = 0;
    std::size_t i = 0;
    while (i < rest.size() && rest[i] >= '0' && rest[i] <= '9') {
      if (v > (std::numeric_limits<std::uint64_t>::max() - 9) / 10) bad(name, rest_at(), "dimension too large");
      v = v * 10 + static_cast<std::uint64_t>(rest[i] - '0');
      ++i;
    }
    if (i == 0) bad(name, rest_at(), "bad shape " + shape_text + " (expected non-negative integers)");
    dims.push_back(v);
    rest = trim(rest.substr(i));
    if (!rest.empty()) {
      if (rest.front() != ',') bad(name, rest_at(), "bad shape " + shape_text + " (expected ',' between dimensions)");
      rest.remove_prefix(1);
    }
  }
  if (dims.size() > kMaxRank) bad(name, shape_at, "shape " + shape_text + " has rank " + std::to_string(dims.size()) + " (expected at most 4)");
  if (dims.empty()) dims.push_back(1);  // a 0-d array holds one value
  a.shape.rank = static_cast<std::uint8_t>(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) a.shape.dims[i] = dims[i];
  // The stream header's rule (element_count): a 0 anywhere empties the array, so (2^41, 0)
  // written by decompress reads back.
  const std::optional<std::uint64_t> count = element_count(dims);
  if (!count) bad(name, shape_at, "shape " + shape_text + " has more than " + std::to_string(kMaxElements) + " elements (the supported maximum)");
  const std::uint64_t n = *count;
  for (std::size_t i = dims.size(); i < kMaxRank; ++i) a.shape.dims[i] = 1;
  const std::size_t data_at = prefix + header_len;
  if (bytes.size() - data_at != 4 * n) {
    bad(name, data_at, "the data is " + std::to_string(bytes.size() - data_at) + " bytes, the shape " + shape_text + " at byte " +
                           std::to_string(shape_at) + " needs " + std::to_string(4 * n) + " (4 per float32)");
  }
  a.values.resize(n);
  if (n != 0) std::memcpy(a.values.data(), bytes.data() + data_at, 4 * n);
  return a;
}

FloatArray parse_raw_f32(std::string_view bytes, const std::string& name) {
  if (bytes.size() % 4 != 0) {
    throw InputError(name + ": raw float32 file size " + std::to_string(bytes.size()) + " is not a multiple of 4 (expected whole " +
                     "4-byte values; the last " + std::to_string(bytes.size() % 4) + " bytes from byte " +
                     std::to_string(bytes.size() - bytes.size() % 4) + " are left over)");
  }
  FloatArray a;
  a.shape = Shape::flat(bytes.size() / 4);
  a.values.resize(bytes.size() / 4);
  if (!bytes.empty()) std::memcpy(a.values.data(), bytes.data(), bytes.size());
  return a;
}

std::string format_npy(std::span<const float> values, const Shape& shape) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < shape.rank; ++i) {
    dict += std::to_string(shape.dims[i]);
    dict += (shape.rank == 1 || i + 1 < shape.rank) ? "," : "";
    if (i + 1 < shape.rank) dict += " ";
  }
  dict += "), }";
  // Pad with spaces so the data starts at a multiple of 64 bytes (NumPy's format 1.0 rule).
  const std::size_t total = ((10 + dict.size() + 1 + 63) / 64) * 64;
  dict.append(total - 10 - dict.size() - 1, ' ');
  dict += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>((dict.size() >> 8) & 0xff);
  out += dict;
  const std::size_t at = out.size();
  out.resize(at + 4 * values.size());
  if (!values.empty()) std::memcpy(out.data() + at, values.data(), 4 * values.size());
  return out;
}

}  // namespace comptrain::kernels

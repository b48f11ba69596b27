#include "comptrain/models/units.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>
#include <span>
#include <stdexcept>
#include <system_error>
#include <utility>

namespace comptrain::models::units {
namespace {

struct Unit {
  std::string_view symbol;
  double factor;  // base units per unit
};

// Decimal prefixes are powers of 1000 and binary ones powers of 1024, as in IEC 80000-13.
// "KB" is accepted beside the SI "kB" because datasheets write both and mean 1000 B.
constexpr double kKiB = 1024.0;
constexpr double kMiB = kKiB * 1024.0;
constexpr double kGiB = kMiB * 1024.0;
constexpr double kTiB = kGiB * 1024.0;
constexpr double kPiB = kTiB * 1024.0;

constexpr std::array kByteUnits{
    Unit{"B", 1.0},     Unit{"kB", 1e3},    Unit{"KB", 1e3},    Unit{"MB", 1e6},    Unit{"GB", 1e9},    Unit{"TB", 1e12},
    Unit{"PB", 1e15},   Unit{"KiB", kKiB},  Unit{"MiB", kMiB},  Unit{"GiB", kGiB},  Unit{"TiB", kTiB},  Unit{"PiB", kPiB},
};
constexpr std::array kBandwidthUnits{
    Unit{"B/s", 1.0},    Unit{"kB/s", 1e3},   Unit{"KB/s", 1e3},   Unit{"MB/s", 1e6},   Unit{"GB/s", 1e9},   Unit{"TB/s", 1e12},
    Unit{"PB/s", 1e15},  Unit{"KiB/s", kKiB}, Unit{"MiB/s", kMiB}, Unit{"GiB/s", kGiB}, Unit{"TiB/s", kTiB}, Unit{"PiB/s", kPiB},
};
// "TFLOPS" is accepted beside "TFLOP/s": datasheets use it for the same rate.
constexpr std::array kFlopRateUnits{
    Unit{"FLOP/s", 1.0},   Unit{"kFLOP/s", 1e3}, Unit{"MFLOP/s", 1e6}, Unit{"GFLOP/s", 1e9},
    Unit{"TFLOP/s", 1e12}, Unit{"PFLOP/s", 1e15}, Unit{"FLOPS", 1.0},  Unit{"kFLOPS", 1e3},
    Unit{"MFLOPS", 1e6},   Unit{"GFLOPS", 1e9},  Unit{"TFLOPS", 1e12}, Unit{"PFLOPS", 1e15},
};
constexpr std::array kTimeUnits{
    Unit{"s", 1.0}, Unit{"ms", 1e-3}, Unit{"us", 1e-6}, Unit{"\u00b5s", 1e-6}, Unit{"ns", 1e-9},
};
constexpr std::array kPowerUnits{Unit{"W", 1.0}, Unit{"kW", 1e3}};
// Energy: joules, and watt-hours as electricity is billed (1 Wh = 3600 J).
constexpr std::array kEnergyUnits{Unit{"J", 1.0}, Unit{"kJ", 1e3}, Unit{"MJ", 1e6}, Unit{"Wh", 3600.0}, Unit{"kWh", 3.6e6}};

std::span<const Unit> units_of(Dimension dimension) {
  switch (dimension) {
    case Dimension::bytes: return kByteUnits;
    case Dimension::bandwidth: return kBandwidthUnits;
    case Dimension::flop_rate: return kFlopRateUnits;
    case Dimension::time: return kTimeUnits;
    case Dimension::power: return kPowerUnits;
    case Dimension::energy: return kEnergyUnits;
  }
  throw std::logic_error("unknown unit dimension");
}

std::string_view example_of(Dimension dimension) {
  switch (dimension) {
    case Dimension::bytes: return "'40 GiB'";
    case Dimension::bandwidth: return "'1555 GB/s'";
    case Dimension::flop_rate: return "'19.5 TFLOP/s'";
    case Dimension::time: return "'5 us'";
    case Dimension::power: return "'400 W'";
    case Dimension::energy: return "'2.5 J'";
  }
  throw std::logic_error("unknown unit dimension");
}

constexpr bool is_space(char c) { return c == ' ' || c == '\t'; }

// "%g" or another printf format of one double: short whatever the value.
std::string printed(const char* format, double value) {
  std::array<char, 64> buffer{};
  const int n = std::snprintf(buffer.data(), buffer.size(), format, value);
  return std::string(buffer.data(), n > 0 ? static_cast<std::size_t>(n) : 0);
}

// A number written with more characters than this is shown through %g in messages ("1e+300"),
// never as hundreds of digits; at most this many, as written (2^63 has 19 digits).
constexpr std::size_t kMaxShownNumberChars = 32;

// A quantity split into its number and its unit, before the unit is applied.
struct Parts {
  double number = 0;
  std::string_view number_text;  // the number as written
  std::string_view unit;         // empty for a bare 0
  double factor = 1;             // base units per unit

  double value() const { return number * factor; }
  // What was written ("9223372036854775808 B", never rounded through a double), or, for a
  // long number, its %g form ("1e+300 GB/s"): never hundreds of digits.
  std::string written() const {
    const std::string shown = number_text.size() <= kMaxShownNumberChars ? std::string(number_text) : printed("%g", number);
    return shown + (unit.empty() ? "" : " " + std::string(unit));
  }
};

Parts parse_parts(std::string_view text, Dimension dimension) {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);

  Parts parts;
  const char* const end = text.data() + text.size();
  const auto [rest, ec] = std::from_chars(text.data(), end, parts.number);
  if (ec == std::errc::result_out_of_range) throw std::invalid_argument("the number is out of range");
  if (ec != std::errc() || !std::isfinite(parts.number)) {
    throw std::invalid_argument("expected a number followed by a unit, e.g. " + std::string(example_of(dimension)));
  }
  parts.number_text = std::string_view(text.data(), static_cast<std::size_t>(rest - text.data()));
  std::string_view unit(rest, static_cast<std::size_t>(end - rest));
  while (!unit.empty() && is_space(unit.front())) unit.remove_prefix(1);

  if (unit.empty()) {
    if (parts.number == 0) return parts;
    throw std::invalid_argument("a quantity needs a unit (only 0 may be written bare), e.g. " + std::string(example_of(dimension)) +
                                "; valid units: " + valid_units(dimension));
  }
  for (const Unit& candidate : units_of(dimension)) {
    if (candidate.symbol == unit) {
      parts.unit = candidate.symbol;
      parts.factor = candidate.factor;
      return parts;
    }
  }
  throw std::invalid_argument("unknown unit '" + std::string(unit) + "'; valid units: " + valid_units(dimension));
}

// 2^63, exactly representable: a double at or above it does not fit in int64.
constexpr double kTwoTo63 = 9223372036854775808.0;

// 128-bit arithmetic for exact byte counts (__extension__: a GCC and Clang type, which
// -Wpedantic would otherwise warn about).
__extension__ typedef unsigned __int128 Wide;

// Significant decimal digits that always fit in a Wide (10^38 < 2^128).
constexpr int kMaxExactDigits = 38;

// |number as written| times `factor`, rounded to the nearest whole number (halves away from
// zero, as llround), computed exactly from the decimal digits: "9223372036854775807" is 2^63-1,
// which a double would round up to 2^63. Saturates at 2^64 (anything from 2^63 on is out of
// range anyway). Nothing when the number has more than kMaxExactDigits significant digits or
// an exponent beyond +-100000: the caller then goes through the double.
std::optional<Wide> exact_magnitude(std::string_view number, std::int64_t factor) {
  constexpr Wide kSaturated = Wide{1} << 64;
  std::size_t i = 0;
  if (i < number.size() && (number[i] == '-' || number[i] == '+')) ++i;
  Wide mantissa = 0;
  int digits = 0;            // significant digits in `mantissa`
  std::int64_t exponent = 0;  // the value is mantissa * 10^exponent
  bool fraction = false;
  for (; i < number.size(); ++i) {
    const char c = number[i];
    if (c == '.' && !fraction) {
      fraction = true;
      continue;
    }
    if (c < '0' || c > '9') break;
    if (fraction) --exponent;
    if (mantissa == 0 && c == '0') continue;  // a leading zero is not significant
    if (++digits > kMaxExactDigits) return std::nullopt;
    mantissa = mantissa * 10 + static_cast<Wide>(c - '0');
  }
  if (i < number.size() && (number[i] == 'e' || number[i] == 'E')) {
    ++i;
    bool negative = false;
    if (i < number.size() && (number[i] == '-' || number[i] == '+')) negative = number[i++] == '-';
    std::int64_t written_exponent = 0;
    for (; i < number.size() && number[i] >= '0' && number[i] <= '9'; ++i) {
      written_exponent = written_exponent * 10 + (number[i] - '0');
      if (written_exponent > 100000) return std::nullopt;
    }
    exponent += negative ? -written_exponent : written_exponent;
  }
  if (i != number.size()) return std::nullopt;  // not the plain decimal grammar: the double decides
  if (mantissa == 0) return Wide{0};
  while (mantissa % 10 == 0) {
    mantissa /= 10;
    ++exponent;
  }
  Wide value = 0;
  if (__builtin_mul_overflow(mantissa, static_cast<Wide>(factor), &value)) {
    if (exponent >= 0) return kSaturated;
    return std::nullopt;
  }
  if (exponent >= 0) {
    for (std::int64_t k = 0; k < exponent && value < kSaturated; ++k) value *= 10;
    return value < kSaturated ? value : kSaturated;
  }
  // value < 2^128 < 10^39: divided by 10^39 or more it is below 0.5.
  if (exponent < -kMaxExactDigits) return Wide{0};
  Wide divisor = 1;
  for (std::int64_t k = 0; k < -exponent; ++k) divisor *= 10;
  Wide quotient = value / divisor;
  if (2 * (value % divisor) >= divisor) ++quotient;  // 2 * remainder < 2 * 10^38 < 2^128
  return quotient;
}

std::string byte_bound(std::int64_t bytes) {
  if (bytes == kMaxByteCount) return "2^63-1 B (about 8 EiB), the largest representable byte count";
  return format_quantity(static_cast<double>(bytes), Dimension::bytes);
}

}  // namespace

std::string valid_units(Dimension dimension) {
  std::string list;
  for (const Unit& unit : units_of(dimension)) {
    if (!list.empty()) list += ", ";
    list += unit.symbol;
  }
  return list;
}

std::string_view base_unit_name(Dimension dimension) {
  switch (dimension) {
    case Dimension::bytes: return "bytes";
    case Dimension::bandwidth: return "bytes/s";
    case Dimension::flop_rate: return "FLOP/s";
    case Dimension::time: return "seconds";
    case Dimension::power: return "watts";
    case Dimension::energy: return "joules";
  }
  throw std::logic_error("unknown unit dimension");
}

OutOfRange::OutOfRange(std::string written, std::string expected)
    : std::invalid_argument(written + " is out of range; expected " + expected), written_(std::move(written)), expected_(std::move(expected)) {}

double parse_quantity(std::string_view text, Dimension dimension) {
  const Parts parts = parse_parts(text, dimension);
  const double value = parts.value();
  if (!std::isfinite(value)) {
    throw OutOfRange(parts.written(), "a finite number of " + std::string(base_unit_name(dimension)) + " (at most " +
                                          printed("%g", std::numeric_limits<double>::max()) + ")");
  }
  return value;
}

double parse_quantity(std::string_view text, Dimension dimension, Bounds bounds) {
  const Parts parts = parse_parts(text, dimension);
  const double value = parts.value();
  if (!(value >= bounds.min && value <= bounds.max && std::isfinite(value))) {
    throw OutOfRange(parts.written(), describe_bounds(bounds, dimension));
  }
  return value;
}

std::int64_t parse_byte_count(std::string_view text, std::int64_t min, std::int64_t max) {
  const Parts parts = parse_parts(text, Dimension::bytes);
  const std::string range = "between " + byte_bound(min) + " and " + byte_bound(max);
  const std::string too_large = max == kMaxByteCount ? "at most " + byte_bound(max) : range;
  std::int64_t bytes = 0;
  // Every byte unit is a whole number of bytes (kByteUnits), so the factor is exact as an int64.
  if (const std::optional<Wide> magnitude = exact_magnitude(parts.number_text, static_cast<std::int64_t>(parts.factor))) {
    if (*magnitude > static_cast<Wide>(kMaxByteCount)) {
      throw OutOfRange(parts.written(), parts.number_text.starts_with('-') ? range : too_large);
    }
    bytes = static_cast<std::int64_t>(*magnitude);
    if (parts.number_text.starts_with('-')) bytes = -bytes;
  } else {
    // More significant digits than exact arithmetic holds: through the double, both ends
    // checked first (llround of a value beyond int64 is undefined).
    const double value = parts.value();
    if (!(value < kTwoTo63)) throw OutOfRange(parts.written(), too_large);
    if (!(value > -kTwoTo63)) throw OutOfRange(parts.written(), range);
    bytes = std::llround(value);
  }
  if (bytes < min || bytes > max) throw OutOfRange(parts.written(), range);
  return bytes;
}

std::string format_quantity(double value, Dimension dimension) {
  const std::span<const Unit> units = units_of(dimension);
  const Unit* best = nullptr;
  double best_number = 0;
  if (std::isfinite(value) && value != 0) {
    for (const Unit& unit : units) {
      const double number = std::fabs(value / unit.factor);
      // Whole numbers below 10^15 print exactly in at most 15 digits.
      if (number >= 1 && number < 1e15 && number == std::round(number) && (!best || unit.factor > best->factor)) {
        best = &unit;
        best_number = value / unit.factor;
      }
    }
  }
  if (best) return printed("%.15g", best_number) + " " + std::string(best->symbol);
  return printed("%g", value) + " " + std::string(units.front().symbol);
}

std::string describe_bounds(Bounds bounds, Dimension dimension) {
  return "between " + format_quantity(bounds.min, dimension) + " and " + format_quantity(bounds.max, dimension);
}

}  // namespace comptrain::models::units

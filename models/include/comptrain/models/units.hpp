#pragma once
// Quantities with units, as written in platform descriptions: "40 GiB", "1555 GB/s",
// "19.5 TFLOP/s", "5 us", "400 W", "2.5 J". The grammar and the unit tables are documented in
// scenarios/platforms/README.md; keep the two in step.

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>

namespace comptrain::models::units {

// What a quantity measures, and so which units it accepts. Values are returned in the base
// unit of each: bytes, bytes/s, FLOP/s, seconds, watts, joules.
enum class Dimension { bytes, bandwidth, flop_rate, time, power, energy };

// An inclusive range of acceptable values, in the base unit of a dimension.
struct Bounds {
  double min = 0;
  double max = std::numeric_limits<double>::max();
};

// The largest byte count a std::int64_t holds: 2^63 - 1 B (about 8 EiB).
inline constexpr std::int64_t kMaxByteCount = std::numeric_limits<std::int64_t>::max();

// Thrown when a quantity parses but its value, in the base unit, is outside the accepted range
// (overflow to infinity when the unit is applied included). A std::invalid_argument, so callers
// that catch that keep working; what() reads "2000 GB/s is out of range; expected between
// 1 kB/s and 1 PB/s". Callers that name the field themselves use written() and expected():
// "'host_link.bandwidth' is 2000 GB/s; expected between 1 kB/s and 1 PB/s".
class OutOfRange : public std::invalid_argument {
 public:
  OutOfRange(std::string written, std::string expected);
  // The number as written (through %g when longer than 32 characters: never hundreds of
  // digits) and the unit.
  const std::string& written() const { return written_; }
  // "between 1 kB/s and 1 PB/s", "at most 9223372036854775807 B (2^63-1 B, about 8 EiB)", ...
  const std::string& expected() const { return expected_; }

 private:
  std::string written_;
  std::string expected_;
};

// Parses "NUMBER UNIT" (the space is optional) into the base unit of `dimension`.
// A bare number is accepted only when it is zero: "0" is 0 in every unit, but "5" for a
// latency could mean seconds or microseconds, and guessing wrong is a silent 10^6 error.
// The sign is kept (range checks belong to the caller, which can name the field), but the
// result is always finite: a value that overflows when the unit is applied ("1e300 GB/s")
// throws OutOfRange.
// Throws std::invalid_argument with a message naming the problem and the valid units.
double parse_quantity(std::string_view text, Dimension dimension);

// As above, and the value must lie in [bounds.min, bounds.max] (base units); OutOfRange
// otherwise. Use it for every quantity a model divides by or adds to a time, so that absurd
// values are rejected where they are written rather than as an infinite duration later.
double parse_quantity(std::string_view text, Dimension dimension, Bounds bounds);

// A byte quantity that must be stored in a std::int64_t ("4 GiB", "1.5 KiB", "0"), rounded to
// the nearest whole byte, in [min, max]. Computed exactly from the decimal digits as written
// (up to 38 significant digits; more go through a double): "9223372036854775807 B" is 2^63-1
// and accepted, "9223372036854775808 B" is refused as written. Anything at or beyond 2^63 B says
// it exceeds the largest representable byte count; never static_cast a parsed double to int64.
std::int64_t parse_byte_count(std::string_view text, std::int64_t min = 0, std::int64_t max = kMaxByteCount);

// `value` (base units) in the largest unit of `dimension` that writes it as a whole number
// ("1 MiB", "1 PB/s", "3600 s"), else "%g BASE_UNIT" ("1e-300 FLOP/s"). Short by design:
// for error messages.
std::string format_quantity(double value, Dimension dimension);

// "between MIN and MAX" with both ends formatted as by format_quantity.
std::string describe_bounds(Bounds bounds, Dimension dimension);

// The units `dimension` accepts, comma-separated, for error messages.
std::string valid_units(Dimension dimension);

// "bytes", "bytes/s", ... for messages.
std::string_view base_unit_name(Dimension dimension);

}  // namespace comptrain::models::units

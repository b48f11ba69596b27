#pragma once
// Quantities with units, as written in platform descriptions: "40 GiB", "1555 GB/s",
// "19.5 TFLOP/s", "5 us", "400 W". The grammar and the unit tables are documented in
// scenarios/platforms/README.md; keep the two in step.

#include <string>
#include <string_view>

namespace comptrain::models::units {

// What a quantity measures, and so which units it accepts. Values are returned in the base
// unit of each: bytes, bytes/s, FLOP/s, seconds, watts.
enum class Dimension { bytes, bandwidth, flop_rate, time, power };

// Parses "NUMBER UNIT" (the space is optional) into the base unit of `dimension`.
// A bare number is accepted only when it is zero: "0" is 0 in every unit, but "5" for a
// latency could mean seconds or microseconds, and guessing wrong is a silent 10^6 error.
// The sign is kept (range checks belong to the caller, which can name the field).
// Throws std::invalid_argument with a message naming the problem and the valid units.
double parse_quantity(std::string_view text, Dimension dimension);

// The units `dimension` accepts, comma-separated, for error messages.
std::string valid_units(Dimension dimension);

// "bytes", "bytes/s", ... for messages.
std::string_view base_unit_name(Dimension dimension);

}  // namespace comptrain::models::units

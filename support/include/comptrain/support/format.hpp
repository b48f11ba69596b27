#pragma once
// Human-readable numbers for reports: binary byte units, SI FLOP units, digit grouping.

#include <cstdint>
#include <string>

namespace comptrain {

std::string format_bytes(std::int64_t bytes);       // "1.50 GiB" (powers of 1024, said as such)
std::string format_flops(double flops);             // "785.31 GFLOP" (powers of 1000)
std::string group_digits(std::int64_t value);       // "25,557,032"
std::string format_seconds(double seconds);         // "12.3 ms", "1.25 s", "850 us"

}  // namespace comptrain

#pragma once
// Human-readable numbers for reports: binary byte units, SI FLOP units, digit grouping.

#include <cstdint>
#include <string>

namespace comptrain::cli {

std::string format_bytes(std::int64_t bytes);       // "1.50 GiB" (powers of 1024, said as such)
std::string format_flops(double flops);             // "785.31 GFLOP" (powers of 1000)
std::string group_digits(std::int64_t value);       // "25,557,032"

}  // namespace comptrain::cli

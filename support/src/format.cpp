#include "comptrain/support/format.hpp"

#include <fmt/format.h>

#include <array>
#include <cmath>

namespace comptrain {

std::string format_bytes(std::int64_t bytes) {
  static constexpr std::array<const char*, 6> units{"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (std::fabs(value) >= 1024.0 && unit + 1 < units.size()) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.2f} {}", value, units[unit]);
}

std::string format_flops(double flops) {
  static constexpr std::array<const char*, 6> units{"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP"};
  std::size_t unit = 0;
  while (std::fabs(flops) >= 1000.0 && unit + 1 < units.size()) {
    flops /= 1000.0;
    ++unit;
  }
  return fmt::format("{:.2f} {}", flops, units[unit]);
}

std::string group_digits(std::int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
}

std::string format_seconds(double seconds) {
  const double magnitude = std::fabs(seconds);
  if (magnitude >= 1.0 || magnitude == 0.0) return fmt::format("{:.3f} s", seconds);
  if (magnitude >= 1e-3) return fmt::format("{:.3f} ms", seconds * 1e3);
  if (magnitude >= 1e-6) return fmt::format("{:.3f} us", seconds * 1e6);
  return fmt::format("{:.1f} ns", seconds * 1e9);
}

}  // namespace comptrain

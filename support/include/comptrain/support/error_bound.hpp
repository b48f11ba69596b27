#pragma once
// How an error bound is meant, one type from the scenario to the kernels' streams: a
// compress rule's error_bound_mode (models::CompressAction) and the mode a compressed stream
// records (kernels/stream.hpp, header byte 8; the numeric values are that byte's and must not
// change).

#include <cstdint>
#include <optional>
#include <string_view>

namespace comptrain {

enum class ErrorBoundMode : std::uint8_t {
  none = 0,  // the codec has no bound (casts, quantisation); streams only
  abs = 1,   // in the values' own units: |x - x'| <= eb
  rel = 2,   // relative to the value range: |x - x'| <= eb * (max - min)
};

constexpr std::string_view to_string(ErrorBoundMode mode) {
  switch (mode) {
    case ErrorBoundMode::none: return "none";
    case ErrorBoundMode::abs: return "abs";
    case ErrorBoundMode::rel: return "rel";
  }
  return "?";
}

// "abs" or "rel" (what a scenario may say); nullopt otherwise.
constexpr std::optional<ErrorBoundMode> parse_error_bound_mode(std::string_view text) {
  if (text == "abs") return ErrorBoundMode::abs;
  if (text == "rel") return ErrorBoundMode::rel;
  return std::nullopt;
}

}  // namespace comptrain

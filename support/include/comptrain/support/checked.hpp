#pragma once
// The one place for arithmetic on sizes and counts (bytes, elements, FLOPs, chunks, ranks):
// int64 products and sums that say when they overflow instead of wrapping (signed overflow is
// undefined behaviour, and a wrapped size is a silent wrong result). The throwing forms name
// what was being computed, so that the caller's message can name the field that made it too large.

#include <cstdint>
#include <optional>
#include <string_view>

namespace comptrain {

// a * b, or nothing when it does not fit in int64.
inline std::optional<std::int64_t> checked_mul(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// a + b, or nothing when it does not fit in int64.
inline std::optional<std::int64_t> checked_add(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// a * b; throws InputError "WHAT: A * B overflows 64 bits" when it does not fit.
std::int64_t multiply_or_throw(std::int64_t a, std::int64_t b, std::string_view what);

// a + b; throws InputError "WHAT: A + B overflows 64 bits" when it does not fit.
std::int64_t add_or_throw(std::int64_t a, std::int64_t b, std::string_view what);

}  // namespace comptrain

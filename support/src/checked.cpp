#include "comptrain/support/checked.hpp"

#include <fmt/format.h>

#include "comptrain/support/input_error.hpp"

namespace comptrain {

std::int64_t multiply_or_throw(std::int64_t a, std::int64_t b, std::string_view what) {
  if (auto r = checked_mul(a, b)) return *r;
  throw InputError(fmt::format("{}: {} * {} overflows 64 bits", what, a, b));
}

std::int64_t add_or_throw(std::int64_t a, std::int64_t b, std::string_view what) {
  if (auto r = checked_add(a, b)) return *r;
  throw InputError(fmt::format("{}: {} + {} overflows 64 bits", what, a, b));
}

}  // namespace comptrain

#include "comptrain/support/checked.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "comptrain/support/input_error.hpp"

namespace comptrain {
namespace {

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

TEST(Checked, ProductsAndSumsThatFitAreExact) {
  EXPECT_EQ(checked_mul(1LL << 31, 1LL << 31), std::int64_t{1} << 62);
  EXPECT_EQ(checked_mul(-3, 7), -21);
  EXPECT_EQ(checked_add(kMax - 1, 1), kMax);
  EXPECT_EQ(multiply_or_throw(0, kMax, "x"), 0);
}

TEST(Checked, OverflowIsNothingOrAnErrorNamingWhat) {
  EXPECT_FALSE(checked_mul(1LL << 32, 1LL << 31).has_value());
  EXPECT_FALSE(checked_add(kMax, 1).has_value());
  try {
    multiply_or_throw(std::int64_t{1} << 50, 1 << 16, "model.vocab_size: the LM head's FLOPs");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "model.vocab_size: the LM head's FLOPs: 1125899906842624 * 65536 overflows 64 bits");
  }
  EXPECT_THROW(add_or_throw(kMax, kMax, "sum"), InputError);
}

}  // namespace
}  // namespace comptrain

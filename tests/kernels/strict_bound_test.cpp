// The strict guarantee of the error-bounded codecs (szp, szh), checked on every element of
// every data family, at bounds 1e-1 ... 1e-7, absolute and relative.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "comptrain/kernels/codec.hpp"
#include "data_families.hpp"

namespace comptrain::kernels {
namespace {

using testing::Family;

// |x - x'| <= eb for finite x; bit-exact for NaN, +-Inf and zeros (the ReLU mask and -0.0).
::testing::AssertionResult strictly_bounded(std::span<const float> x, std::span<const float> y, double eb) {
  if (x.size() != y.size()) return ::testing::AssertionFailure() << "size " << y.size() << " != " << x.size();
  for (std::size_t i = 0; i < x.size(); ++i) {
    const bool exact_required = !std::isfinite(x[i]) || x[i] == 0.0f;
    if (exact_required) {
      if (std::bit_cast<std::uint32_t>(x[i]) != std::bit_cast<std::uint32_t>(y[i])) {
        return ::testing::AssertionFailure() << "element " << i << ": " << x[i] << " (bits " << std::hex
                                             << std::bit_cast<std::uint32_t>(x[i]) << ") decoded as " << y[i] << " (bits "
                                             << std::bit_cast<std::uint32_t>(y[i]) << ")";
      }
    } else if (!(std::fabs(static_cast<double>(x[i]) - static_cast<double>(y[i])) <= eb)) {
      return ::testing::AssertionFailure() << "element " << i << ": " << x[i] << " decoded as " << y[i] << ", error "
                                           << std::fabs(static_cast<double>(x[i]) - y[i]) << " > eb " << eb;
    }
  }
  return ::testing::AssertionSuccess();
}

// Every codec that promises the strict bound.
constexpr CodecId kStrict[] = {CodecId::szp, CodecId::szh};

class StrictBound : public ::testing::TestWithParam<Family> {};

TEST_P(StrictBound, HoldsOnEveryElementAtEveryBound) {
  const Family& family = GetParam();
  for (CodecId codec : kStrict) {
    for (BoundMode mode : {BoundMode::abs, BoundMode::rel}) {
      for (double eb : {1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7}) {
        SCOPED_TRACE(std::string(codec_info(codec).name) + (mode == BoundMode::abs ? " abs " : " rel ") + std::to_string(eb));
        CompressOptions o{.codec = codec, .eb = eb, .mode = mode};
        const auto stream = compress(family.values, Shape::flat(family.values.size()), o);
        EXPECT_LE(stream.size(), max_compressed_size(codec, family.values.size()));
        const Header h = inspect(stream);
        EXPECT_EQ(h.eb_abs, absolute_bound(family.values, eb, mode));
        if (mode == BoundMode::abs) {
          EXPECT_EQ(h.eb_abs, eb);
        }
        const auto back = decompress(stream);
        ASSERT_TRUE(strictly_bounded(family.values, back, h.eb_abs));
        const ErrorStats s = compare(family.values, back, h.eb_abs);
        EXPECT_EQ(s.violations, 0u);
        EXPECT_EQ(s.zero_mismatches, 0u);
        EXPECT_EQ(s.nonfinite_mismatches, 0u);
      }
    }
  }
}

TEST_P(StrictBound, LosslessAtZeroBoundAndHugeBound) {
  const Family& family = GetParam();
  for (CodecId codec : kStrict) {
    SCOPED_TRACE(codec_info(codec).name);
    const auto lossless = compress(family.values, Shape::flat(family.values.size()), {.codec = codec, .eb = 0.0, .mode = BoundMode::abs});
    EXPECT_LE(lossless.size(), max_compressed_size(codec, family.values.size()));  // incompressible: worst case
    ASSERT_TRUE(strictly_bounded(family.values, decompress(lossless), 0.0));
    for (double eb : {1e30, 1e38, 1e300}) {
      const auto stream = compress(family.values, Shape::flat(family.values.size()), {.codec = codec, .eb = eb, .mode = BoundMode::abs});
      ASSERT_TRUE(strictly_bounded(family.values, decompress(stream), eb)) << "eb " << eb;
    }
  }
}

// The positive mask (CompressOptions::positive_mask): the same strict bound, and x' > 0 exactly
// where x > 0, on every family, at every bound (wide ones too, where most positives fall in
// (0, eb)); the stream is the maskless one's payload plus n / 8 bytes rounded up.
TEST_P(StrictBound, PositiveMaskKeepsTheSignAndTheBound) {
  const Family& family = GetParam();
  const std::size_t n = family.values.size();
  for (CodecId codec : kStrict) {
    for (BoundMode mode : {BoundMode::abs, BoundMode::rel}) {
      for (double eb : {1e30, 1e0, 1e-1, 1e-2, 1e-3, 1e-5, 1e-7, 0.0}) {
        SCOPED_TRACE(std::string(codec_info(codec).name) + (mode == BoundMode::abs ? " abs " : " rel ") + std::to_string(eb));
        const CompressOptions plain{.codec = codec, .eb = eb, .mode = mode};
        CompressOptions masked = plain;
        masked.positive_mask = true;
        const auto stream = compress(family.values, Shape::flat(n), masked);
        EXPECT_LE(stream.size(), max_compressed_size(codec, n));
        EXPECT_EQ(stream.size(), compress(family.values, Shape::flat(n), plain).size() + (n + 7) / 8);
        const Header h = inspect(stream);
        EXPECT_TRUE(has_positive_mask(h));
        const auto back = decompress(stream);
        ASSERT_TRUE(strictly_bounded(family.values, back, h.eb_abs));
        for (std::size_t i = 0; i < n; ++i) {
          ASSERT_EQ(family.values[i] > 0.0f, back[i] > 0.0f) << "element " << i << ": " << family.values[i] << " decoded as " << back[i];
        }
        EXPECT_EQ(compare(family.values, back, h.eb_abs).violations, 0u);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, StrictBound, ::testing::ValuesIn(testing::families()),
                         [](const ::testing::TestParamInfo<Family>& p) { return p.param.name; });

TEST(StrictBoundEdges, ValuesFarBeyondTwoToThe24Bins) {
  // |x| / eb up to 2^40: codes would saturate / lose integrality without the 2^22 cap.
  std::vector<float> x;
  for (int e = 0; e <= 40; ++e) {
    x.push_back(std::ldexp(1.0f, e) + 0.37f);
    x.push_back(-std::ldexp(1.3f, e));
  }
  for (CodecId codec : kStrict) {
    for (double eb : {1.0, 1e-3, 1e-7}) {
      const auto back = decompress(compress(x, Shape::flat(x.size()), {.codec = codec, .eb = eb, .mode = BoundMode::abs}));
      EXPECT_TRUE(strictly_bounded(x, back, eb)) << codec_info(codec).name << " " << eb;
    }
  }
}

TEST(StrictBoundEdges, DenormalBoundFallsBackToRaw) {
  std::vector<float> x = testing::relu_like(1000, 0.5, 9);
  const double eb = 1e-42;  // the step 2 eb is a float denormal, its reciprocal overflows
  for (CodecId codec : kStrict) {
    const auto back = decompress(compress(x, Shape::flat(x.size()), {.codec = codec, .eb = eb, .mode = BoundMode::abs}));
    EXPECT_TRUE(strictly_bounded(x, back, eb)) << codec_info(codec).name;
  }
}

TEST(StrictBoundEdges, ValuesAtHalfStepBoundaries) {
  // x = (k + 0.5) * 2 eb and neighbours: where float rounding of x / (2 eb) can go either way.
  std::vector<float> x;
  const double eb = 1e-3;
  for (int k = -3000; k < 3000; ++k) {
    const float c = static_cast<float>((k + 0.5) * 2 * eb);
    x.push_back(c);
    x.push_back(std::nextafter(c, 1e9f));
    x.push_back(std::nextafter(c, -1e9f));
    x.push_back(static_cast<float>(k * 2 * eb + eb));
  }
  for (CodecId codec : kStrict) {
    const auto back = decompress(compress(x, Shape::flat(x.size()), {.codec = codec, .eb = eb, .mode = BoundMode::abs}));
    EXPECT_TRUE(strictly_bounded(x, back, eb)) << codec_info(codec).name;
  }
}

TEST(StrictBoundEdges, RelativeBoundIgnoresNonFiniteForTheRange) {
  std::vector<float> x{1.0f, 3.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  EXPECT_DOUBLE_EQ(absolute_bound(x, 0.5, BoundMode::rel), 1.0);
  std::vector<float> only_nan{std::numeric_limits<float>::quiet_NaN()};
  EXPECT_EQ(absolute_bound(only_nan, 0.5, BoundMode::rel), 0.0);
}

TEST(StrictBoundEdges, RejectsBadBounds) {
  std::vector<float> x{1.0f};
  for (double eb : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    EXPECT_THROW(compress(x, Shape::flat(1), {.codec = CodecId::szp, .eb = eb, .mode = BoundMode::abs}), InputError);
  }
  EXPECT_THROW(compress(x, Shape::flat(2), {.codec = CodecId::szp, .eb = 1e-3}), InputError);
  EXPECT_THROW(compress(x, Shape::flat(1), {.codec = CodecId::szh, .eb = -1.0, .mode = BoundMode::abs}), InputError);
}

// szh's escapes: wide residuals (|delta| >= 2^15 codes) and raw values interleaved with coded
// ones, including at chunk starts, in the same order as the outlier list.
TEST(StrictBoundEdges, SzhWideResidualsAndRawValuesInterleave) {
  std::vector<float> x(3 * 8192 + 5);
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = u(rng);
    if (i % 17 == 0) x[i] = static_cast<float>(i % 2 ? 4000.0 : -4000.0) * u(rng);  // residual beyond 2^15 codes at eb 1e-3
    if (i % 8192 == 0) x[i] = std::numeric_limits<float>::quiet_NaN();
    if (i % 101 == 0) x[i] = -0.0f;
  }
  for (double eb : {1e-3, 1e-2, 0.5}) {
    const auto back = decompress(compress(x, Shape::flat(x.size()), {.codec = CodecId::szh, .eb = eb, .mode = BoundMode::abs}));
    EXPECT_TRUE(strictly_bounded(x, back, eb)) << eb;
  }
}

double ratio(std::size_t values, std::size_t bytes) { return 4.0 * static_cast<double>(values) / static_cast<double>(bytes); }

TEST(Compressibility, PostReluZerosAndConstantsCompress) {
  const auto relu = testing::relu_like(1 << 16, 0.5, 5);
  const auto s = compress(relu, Shape::flat(relu.size()), {.codec = CodecId::szp, .eb = 1e-3, .mode = BoundMode::rel});
  EXPECT_GT(ratio(relu.size(), s.size()), 2.5);
  std::vector<float> zeros(1 << 16, 0.0f);
  const auto z = compress(zeros, Shape::flat(zeros.size()), {.codec = CodecId::szp, .eb = 1e-3, .mode = BoundMode::abs});
  EXPECT_GT(ratio(zeros.size(), z.size()), 100.0);
  const auto zz = compress(zeros, Shape::flat(zeros.size()), {.codec = CodecId::zeros});
  EXPECT_GT(ratio(zeros.size(), zz.size()), 100.0);
  // Huffman needs >= 1 bit per value (cuSZ's CR <= 32 for f32), but beats szp on the ReLU family.
  const auto h = compress(relu, Shape::flat(relu.size()), {.codec = CodecId::szh, .eb = 1e-3, .mode = BoundMode::rel});
  EXPECT_GT(ratio(relu.size(), h.size()), ratio(relu.size(), s.size()));
  const auto hz = compress(zeros, Shape::flat(zeros.size()), {.codec = CodecId::szh, .eb = 1e-3, .mode = BoundMode::abs});
  EXPECT_GT(ratio(zeros.size(), hz.size()), 30.0);
}

}  // namespace
}  // namespace comptrain::kernels

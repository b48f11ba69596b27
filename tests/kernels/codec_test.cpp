// Round trips of every codec, multi-thread determinism, number formats, checksum, .npy I/O.

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <random>

#include "comptrain/kernels/array_io.hpp"
#include "comptrain/kernels/codec.hpp"
#include "comptrain/kernels/stages.hpp"
#include "cpu_driver.hpp"
#include "data_families.hpp"
#include "fp16_cpu.hpp"

namespace comptrain::kernels {
namespace {

std::vector<float> finite_only(std::vector<float> v) {
  for (auto& x : v) {
    if (!std::isfinite(x)) x = 1.0f;
  }
  return v;
}

TEST(Codecs, RegistryNamesAndFlags) {
  EXPECT_EQ(codec_from_name("szp"), CodecId::szp);
  EXPECT_EQ(codec_from_name("szh"), CodecId::szh);
  EXPECT_TRUE(codec_info(CodecId::szh).strict);
  EXPECT_THROW(codec_from_name("lz4"), InputError);
  EXPECT_TRUE(codec_info(CodecId::szp).strict);
  EXPECT_FALSE(codec_info(CodecId::quant).error_bounded);
  EXPECT_FALSE(codec_info(CodecId::zfp).strict);
}

TEST(Codecs, ZerosIsBitExactOnEveryFamily) {
  for (const auto& f : testing::families()) {
    const auto s = compress(f.values, Shape::flat(f.values.size()), {.codec = CodecId::zeros});
    EXPECT_LE(s.size(), max_compressed_size(CodecId::zeros, f.values.size())) << f.name;
    const auto back = decompress(s);
    ASSERT_EQ(back.size(), f.values.size());
    if (!back.empty()) {
      EXPECT_EQ(std::memcmp(back.data(), f.values.data(), 4 * back.size()), 0) << f.name;
    }
    EXPECT_EQ(inspect(s).mode, BoundMode::none);
  }
}

TEST(Codecs, QuantErrorWithinHalfStepOfItsGroup) {
  for (unsigned bits : {1u, 2u, 4u, 8u}) {
    const auto x = testing::relu_like(5000, 0.5, 11);
    const auto s = compress(x, Shape::flat(x.size()), {.codec = CodecId::quant, .quant_bits = bits});
    EXPECT_LE(s.size(), max_compressed_size(CodecId::quant, x.size(), bits)) << bits;
    const auto back = decompress(s);
    for (std::size_t g = 0; g < x.size(); g += 256) {
      const std::size_t end = std::min(x.size(), g + 256);
      const float lo = *std::min_element(x.begin() + static_cast<long>(g), x.begin() + static_cast<long>(end));
      const float hi = *std::max_element(x.begin() + static_cast<long>(g), x.begin() + static_cast<long>(end));
      const double step = (static_cast<double>(hi) - lo) / ((1u << bits) - 1);
      for (std::size_t i = g; i < end; ++i) ASSERT_LE(std::fabs(x[i] - back[i]), step * 0.5001 + 1e-6) << bits << " " << i;
    }
  }
  std::vector<float> one{1.0f};
  EXPECT_THROW(compress(one, Shape::flat(1), {.codec = CodecId::quant, .quant_bits = 3}), InputError);
}

TEST(Codecs, Fp16AndBf16CastsRoundToNearest) {
  const auto x = testing::families()[1].values;  // uniform noise in [-1, 1]
  const auto h = decompress(compress(x, Shape::flat(x.size()), {.codec = CodecId::fp16}));
  const auto b = decompress(compress(x, Shape::flat(x.size()), {.codec = CodecId::bf16}));
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_LE(std::fabs(x[i] - h[i]), std::ldexp(std::fabs(x[i]), -11) + 3e-8f) << i;  // half ulp, + subnormal step
    ASSERT_LE(std::fabs(x[i] - b[i]), std::ldexp(std::fabs(x[i]), -8)) << i;
  }
}

TEST(Stages, Fp16ConversionMatchesCompiler) {
  // Every half value converts to float and back unchanged (NaN stays NaN).
  for (std::uint32_t u = 0; u < 65536; ++u) {
    const auto hbits = static_cast<std::uint16_t>(u);
    const float f = fp16_to_float(hbits);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(f))));
    } else {
      ASSERT_EQ(float_to_fp16(f), hbits) << std::hex << u;
    }
  }
#if defined(__FLT16_MAX__)
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> any;
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(any(rng));
    if (std::isnan(f)) continue;
    const auto expect = std::bit_cast<std::uint16_t>(static_cast<_Float16>(f));
    ASSERT_EQ(float_to_fp16(f), expect) << f;
  }
#endif
}

// The CPU's fp16 casts (F16C where the CPU has it) against the scalar stages, bit for bit: every
// half value (signalling NaNs included, which the hardware quiets and the F16C path restores), and
// floats of every sign and exponent with each of the 2^10 leading mantissa patterns followed by
// the low bits that decide rounding (zero, one, just below / at / above the tie at the rounding
// position of normal results, and at every rounding position of subnormal results, all ones),
// plus 4 M random bit patterns. Arrays are converted whole, so the 8-wide loop and its scalar
// tail both run. (Exhaustive over all 2^32 floats the two agree too; that takes 6 s, done by hand.)
TEST(Codecs, Fp16CpuCastsMatchTheScalarStagesBitForBit) {
  std::vector<std::uint16_t> halves(65536 + 5);
  for (std::uint32_t u = 0; u < halves.size(); ++u) halves[u] = static_cast<std::uint16_t>(u);
  std::vector<float> got(halves.size()), expect(halves.size());
  detail::fp16_decode_cpu(reinterpret_cast<const std::uint8_t*>(halves.data()), halves.size(), got.data());
  detail::fp16_decode_scalar(reinterpret_cast<const std::uint8_t*>(halves.data()), halves.size(), expect.data());
  for (std::size_t i = 0; i < halves.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(expect[i])) << std::hex << "half 0x" << halves[i];
  }
  std::vector<std::uint32_t> bits;
  std::vector<std::uint32_t> low = {0, 1, 0x1fff, 0xfff, 0x1000, 0x1001};
  for (std::uint32_t shift = 14; shift <= 23; ++shift) {  // subnormal results round at bit shift - 1
    low.push_back(1u << (shift - 1));
    low.push_back((1u << (shift - 1)) - 1);
    low.push_back((1u << (shift - 1)) + 1);
  }
  for (std::uint32_t sign_exponent = 0; sign_exponent < 512; ++sign_exponent) {
    for (std::uint32_t top = 0; top < 1024; ++top) {
      for (std::uint32_t l : low) bits.push_back((sign_exponent << 23) | ((top << 13) ^ l));
    }
  }
  std::mt19937 rng(11);
  for (int i = 0; i < (1 << 22); ++i) bits.push_back(static_cast<std::uint32_t>(rng()));
  bits.push_back(0x7f800001u);  // signalling NaN whose payload is below the half's precision
  std::vector<std::uint8_t> a(2 * bits.size()), b(2 * bits.size());
  detail::fp16_encode_cpu(reinterpret_cast<const float*>(bits.data()), bits.size(), a.data());
  detail::fp16_encode_scalar(reinterpret_cast<const float*>(bits.data()), bits.size(), b.data());
  for (std::size_t i = 0; i < bits.size(); ++i) {
    ASSERT_TRUE(a[2 * i] == b[2 * i] && a[2 * i + 1] == b[2 * i + 1]) << std::hex << "float bits 0x" << bits[i];
  }
  std::cout << "fp16 CPU path: " << (detail::fp16_has_f16c() ? "F16C" : "scalar (no F16C on this CPU)") << ", " << bits.size()
            << " floats and 65536 halves compared\n";
}

TEST(Codecs, ZfpReportsViolationsInsteadOfHidingThem) {
  auto x = finite_only(testing::families()[0].values);
  x.resize(11 * 1819);
  Shape shape{2, {1819, 11, 1, 1}};
  ASSERT_EQ(shape.count(), x.size());
  const auto s = compress(x, shape, {.codec = CodecId::zfp, .eb = 1e-3, .mode = BoundMode::abs});
  const Header h = inspect(s);
  EXPECT_EQ(h.rank, 2);
  const auto back = decompress(s);
  const ErrorStats st = compare(x, back, h.eb_abs);
  std::uint64_t violations = 0;
  for (std::size_t i = 0; i < x.size(); ++i) violations += std::fabs(static_cast<double>(x[i]) - back[i]) <= 1e-3 ? 0 : 1;
  EXPECT_EQ(st.violations, violations);
  EXPECT_LE(st.max_abs_error, 1e-3 * 8);  // zfp's tolerance is a target, not a strict bound
  std::vector<float> with_nan{1.0f, std::nanf("")};
  EXPECT_THROW(compress(with_nan, Shape::flat(2), {.codec = CodecId::zfp, .eb = 1e-3, .mode = BoundMode::abs}), InputError);
  // 1-D data mixing 1e8 and O(1) values overshoots (reference doc section 6): reported, not hidden.
  std::vector<float> wide;
  for (int i = 0; i < 4096; ++i) wide.push_back(i % 4 == 0 ? 1e8f : static_cast<float>(i % 7) * 0.01f);
  const auto ws = compress(wide, Shape::flat(wide.size()), {.codec = CodecId::zfp, .eb = 1e-3, .mode = BoundMode::abs});
  const ErrorStats wst = compare(wide, decompress(ws), 1e-3);
  std::uint64_t wv = 0;
  const auto wback = decompress(ws);
  for (std::size_t i = 0; i < wide.size(); ++i) wv += std::fabs(static_cast<double>(wide[i]) - wback[i]) <= 1e-3 ? 0 : 1;
  EXPECT_EQ(wst.violations, wv);
}

TEST(Codecs, ShapesUpToFourDimensionsRoundTrip) {
  const auto x = testing::relu_like(2 * 3 * 5 * 7, 0.5, 3);
  for (CodecId c : {CodecId::szp, CodecId::szh, CodecId::zeros, CodecId::quant, CodecId::fp16, CodecId::bf16, CodecId::zfp}) {
    const Shape shape{4, {2, 3, 5, 7}};
    const auto s = compress(x, shape, {.codec = c, .eb = 1e-2, .mode = BoundMode::abs});
    const Header h = inspect(s);
    EXPECT_EQ(h.rank, 4);
    EXPECT_EQ(h.dims[3], 7u);
    EXPECT_EQ(decompress(s).size(), x.size());
  }
}

TEST(Determinism, MultiThreadedStreamsAreByteIdentical) {
  const auto x = testing::relu_like(200000, 0.5, 21);
  for (CodecId c : {CodecId::szp, CodecId::szh, CodecId::zeros, CodecId::quant, CodecId::fp16, CodecId::bf16}) {
    const auto one = compress(x, Shape::flat(x.size()), {.codec = c, .eb = 1e-3, .mode = BoundMode::rel, .threads = 1});
    for (unsigned t : {2u, 3u, 7u, 0u}) {
      const auto many = compress(x, Shape::flat(x.size()), {.codec = c, .eb = 1e-3, .mode = BoundMode::rel, .threads = t});
      ASSERT_EQ(one, many) << codec_info(c).name << " threads " << t;
    }
    const auto d1 = decompress(one, 1);
    const auto d3 = decompress(one, 3);
    ASSERT_EQ(std::memcmp(d1.data(), d3.data(), 4 * d1.size()), 0);
  }
}

// Threads beyond kMaxThreads are refused by compress and decompress (InputError: exit 2, a
// Python CodecError), before any thread starts; kMaxThreads itself and 0 (all cores) run.
TEST(Threads, MoreThanTheMaximumAreRefusedTheMaximumRuns) {
  const auto x = testing::relu_like(3 * kChunkValues + 5, 0.5, 22);
  const CompressOptions one{.codec = CodecId::szp, .eb = 1e-3, .mode = BoundMode::rel, .threads = 1};
  const auto expected = compress(x, Shape::flat(x.size()), one);
  CompressOptions too_many = one;
  too_many.threads = kMaxThreads + 1;
  try {
    (void)compress(x, Shape::flat(x.size()), too_many);
    ADD_FAILURE() << "threads " << too_many.threads << " accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "threads 257 is more than the kernels' maximum 256; expected 0 (all cores, up to 256) to 256");
  }
  EXPECT_THROW((void)decompress(expected, kMaxThreads + 1), InputError);
  std::vector<float> out(x.size());
  EXPECT_THROW(decompress_into(expected, out, 100000), InputError);
  CompressOptions most = one;
  most.threads = kMaxThreads;
  EXPECT_EQ(compress(x, Shape::flat(x.size()), most), expected);
  EXPECT_EQ(decompress(expected, kMaxThreads), decompress(expected, 1));
}

// The driver never starts more threads than kMaxThreads, nor more than there are items.
TEST(Threads, TheDriverClampsToTheMaximumAndToTheItems) {
  EXPECT_EQ(detail::resolve_threads(1000000, 1u << 20), kMaxThreads);
  EXPECT_EQ(detail::resolve_threads(100, 3), 3u);
  EXPECT_EQ(detail::resolve_threads(5, 0), 1u);
  EXPECT_GE(detail::resolve_threads(0, 1u << 20), 1u);
  EXPECT_LE(detail::resolve_threads(0, 1u << 20), kMaxThreads);
}

// A thread that cannot be started (here: an address-space limit leaves room for a few 8 MiB
// stacks, not for the 256 the driver asks for) is no error: its range runs in the calling thread,
// and the streams and values are those of one thread. Before, the std::system_error left joinable
// std::threads behind and std::terminate killed the process (shared/defects-2/03). In a child
// process (a death test), so that the limit does not outlive it.
std::uint64_t address_space_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with("VmSize:")) return std::stoull(line.substr(7)) * 1024;  // "VmSize:  123456 kB"
  }
  return 0;
}

// What the child of the death test below runs: 0 when compress_into and decompress_into with
// kMaxThreads threads give the one-thread results under an address-space limit of `headroom`
// bytes beyond what the process maps now; 1-3 say which result differed, 4 that the limit could
// not be set, 5 an exception.
int run_under_address_space_limit(std::uint64_t headroom, const std::vector<float>& x, const std::vector<std::byte>& expected,
                                  const std::vector<std::byte>& expected_fp16, const std::vector<float>& values,
                                  const std::vector<float>& values_fp16) {
  rlimit limit{};
  limit.rlim_cur = limit.rlim_max = address_space_bytes() + headroom;
  if (setrlimit(RLIMIT_AS, &limit) != 0) return 4;
  try {
    std::vector<std::byte> buffer(max_compressed_size(CodecId::szp, x.size()));
    std::vector<float> out(x.size());
    const CompressOptions many{.codec = CodecId::szp, .eb = 1e-3, .mode = BoundMode::rel, .threads = kMaxThreads};
    const std::size_t size = compress_into(x, Shape::flat(x.size()), many, buffer);
    if (size != expected.size() || std::memcmp(buffer.data(), expected.data(), size) != 0) return 1;
    decompress_into(expected, out, kMaxThreads);
    if (std::memcmp(out.data(), values.data(), 4 * out.size()) != 0) return 2;
    decompress_into(expected_fp16, out, kMaxThreads);  // the casts: ranges of values, not of chunks
    if (std::memcmp(out.data(), values_fp16.data(), 4 * out.size()) != 0) return 3;
  } catch (...) {
    return 5;
  }
  return 0;
}

TEST(ThreadsDeathTest, AThreadThatCannotStartRunsItsRangeInTheCallingThread) {
  GTEST_FLAG_SET(death_test_style, "fast");  // fork without exec: the child inherits the inputs below
  const auto x = testing::relu_like(kMaxThreads * kChunkValues, 0.5, 23);  // one chunk per thread
  const auto expected = compress(x, Shape::flat(x.size()), {.codec = CodecId::szp, .eb = 1e-3, .mode = BoundMode::rel, .threads = 1});
  const auto expected_fp16 = compress(x, Shape::flat(x.size()), {.codec = CodecId::fp16, .threads = 1});
  const auto values = decompress(expected, 1);
  const auto values_fp16 = decompress(expected_fp16, 1);
  ASSERT_GT(address_space_bytes(), 0u);
  // 96 MiB: room for the output buffers and a few thread stacks (8 MiB each by default), far
  // from the 256 stacks the driver asks for.
  EXPECT_EXIT(std::_Exit(run_under_address_space_limit(std::uint64_t{96} << 20, x, expected, expected_fp16, values, values_fp16)),
              ::testing::ExitedWithCode(0), "");
}

// compress_into writes the same stream as compress into a caller's buffer that is reused across
// calls (leftovers of the previous call must not leak into the next stream), refuses a buffer
// below max_compressed_size, and is thread-count independent like compress. The szh cases put
// incompressible values (eb = 0 on noise) in the last thread's chunks, so that thread's region,
// which is shorter than its worst case by the code table, overflows into the heap.
TEST(CompressInto, WritesCompressStreamIntoAReusedBuffer) {
  std::vector<std::vector<float>> inputs;
  inputs.push_back(testing::relu_like(200000, 0.5, 31));
  inputs.push_back(testing::families()[1].values);  // uniform noise
  std::vector<float> tail_noise(6 * kChunkValues + 123, 0.0f);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (std::size_t i = tail_noise.size() * 2 / 3; i < tail_noise.size(); ++i) tail_noise[i] = u(rng);
  inputs.push_back(tail_noise);
  inputs.push_back({});
  for (CodecId c : {CodecId::szp, CodecId::szh, CodecId::zeros, CodecId::quant, CodecId::fp16, CodecId::bf16, CodecId::zfp}) {
    std::uint64_t largest = 0;
    for (const auto& x : inputs) largest = std::max(largest, max_compressed_size(c, x.size(), 4));
    std::vector<std::byte> buffer(largest, std::byte{0xA5});
    for (const auto& x : inputs) {
      for (double eb : {1e-3, 0.0}) {
        for (unsigned threads : {1u, 3u}) {
          const CompressOptions o{.codec = c, .eb = eb, .mode = BoundMode::abs, .quant_bits = 4, .threads = threads};
          const auto expected = compress(x, Shape::flat(x.size()), o);
          const std::size_t size = compress_into(x, Shape::flat(x.size()), o, buffer);
          ASSERT_EQ(size, expected.size()) << codec_info(c).name << " eb " << eb << " threads " << threads;
          ASSERT_EQ(std::memcmp(buffer.data(), expected.data(), size), 0) << codec_info(c).name << " eb " << eb << " threads " << threads;
          ASSERT_LE(size, max_compressed_size(c, x.size(), 4));
        }
      }
    }
    const auto& x = inputs[0];
    std::vector<std::byte> small(max_compressed_size(c, x.size(), 4) - 1);
    EXPECT_THROW(compress_into(x, Shape::flat(x.size()), {.codec = c, .eb = 1e-3, .mode = BoundMode::abs, .quant_bits = 4}, small),
                 InputError)
        << codec_info(c).name;
  }
}

// Streams are part of the format: a refactoring of the codec dispatch (or of any stage) must not
// change a single byte. The data come from an integer hash (no std:: distributions, whose output
// is implementation-defined), the digests were taken before the codec table was introduced.
std::vector<float> golden_data(std::size_t n) {
  std::vector<float> v(n);
  std::uint64_t s = 0x9E3779B97F4A7C15ull;
  for (std::size_t i = 0; i < n; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    const auto u = static_cast<std::int32_t>(s >> 40) - (1 << 23);  // [-2^23, 2^23)
    const float smooth = static_cast<float>(i % 977) * 0.01f;
    v[i] = (u < 0) ? 0.0f : smooth + static_cast<float>(u) * 1e-7f;  // ReLU-like: half zeros
  }
  v[5] = std::numeric_limits<float>::quiet_NaN();
  v[77] = -0.0f;
  return v;
}

TEST(Determinism, StreamsMatchTheReferenceDigests) {
  const auto x = golden_data(50001);
  const struct {
    CodecId codec;
    BoundMode mode;
    std::uint64_t digest;
  } cases[] = {
      {CodecId::szp, BoundMode::rel, 0x24ed3546775c1ceeull},    {CodecId::szp, BoundMode::abs, 0x70b9afc2ac7dfdd5ull},
      {CodecId::szh, BoundMode::rel, 0x06a3189636da20b2ull},    {CodecId::szh, BoundMode::abs, 0x621141d85293bd4aull},
      {CodecId::zeros, BoundMode::none, 0x8550ec31c24d9c8full}, {CodecId::quant, BoundMode::none, 0x95380689cb40ec25ull},
      {CodecId::fp16, BoundMode::none, 0x6a212352d03863c2ull},  {CodecId::bf16, BoundMode::none, 0x1ba719b2a164118aull},
  };
  for (const auto& c : cases) {
    const auto s = compress(x, Shape{2, {3, 16667, 1, 1}}, {.codec = c.codec, .eb = 1e-3, .mode = c.mode, .quant_bits = 4});
    const std::uint64_t d = xxh64(s, 0);
    EXPECT_EQ(d, c.digest) << codec_info(c.codec).name << " mode " << static_cast<int>(c.mode) << std::hex << " digest 0x" << d;
  }
}

TEST(Checksum, Xxh64ReferenceVectors) {
  // Reference values of XXH64 with seed 0 (xxHash test vectors).
  EXPECT_EQ(xxh64({}, 0), 0xEF46DB3751D8E999ull);
  const char abc[] = "abc";
  EXPECT_EQ(xxh64(std::as_bytes(std::span(abc, 3)), 0), 0x44BC2CF5AD770999ull);
}

TEST(ArrayIo, NpyRoundTripAndStrictHeader) {
  const std::vector<float> v{1.0f, -2.0f, 3.5f, 0.0f, 5.0f, 6.0f};
  const Shape shape{2, {2, 3, 1, 1}};
  const std::string file = format_npy(v, shape);
  EXPECT_EQ((file.size() - v.size() * 4) % 64, 0u);
  const FloatArray a = parse_npy(file, "t.npy");
  EXPECT_EQ(a.shape.rank, 2);
  EXPECT_EQ(a.shape.dims[0], 2u);
  EXPECT_EQ(a.shape.dims[1], 3u);
  EXPECT_EQ(a.values, v);
  const FloatArray flat = parse_npy(format_npy(v, Shape::flat(6)), "f.npy");
  EXPECT_EQ(flat.shape.rank, 1);
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = file;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  EXPECT_THROW(parse_npy(replace("<f4", "<f8"), "x"), InputError);
  EXPECT_THROW(parse_npy(replace("<f4", ">f4"), "x"), InputError);
  EXPECT_THROW(parse_npy(replace("False", "True "), "x"), InputError);
  EXPECT_THROW(parse_npy(replace("(2, 3)", "(2, 4)"), "x"), InputError);
  EXPECT_THROW(parse_npy(replace("'shape'", "'shapf'"), "x"), InputError);
  EXPECT_THROW(parse_npy(file.substr(0, file.size() - 1), "x"), InputError);
  EXPECT_THROW(parse_npy("not numpy", "x"), InputError);
  EXPECT_THROW(parse_raw_f32("abc", "x"), InputError);
  EXPECT_EQ(parse_raw_f32(std::string(8, '\0'), "x").values.size(), 2u);
}

// One rule for the element count of every shape the kernels read: a 0 anywhere first, then the
// product without ever forming one beyond kMaxElements.
TEST(Shapes, ElementCountTakesTheZeroFirstAndNeverWraps) {
  using Dims = std::vector<std::uint64_t>;
  constexpr std::uint64_t k2p20 = std::uint64_t{1} << 20, k2p32 = std::uint64_t{1} << 32;
  EXPECT_EQ(element_count(Dims{std::uint64_t{1} << 41, 0}), 0u);
  EXPECT_EQ(element_count(Dims{~std::uint64_t{0}, ~std::uint64_t{0}, 0}), 0u);
  EXPECT_EQ(element_count(Dims{k2p20, k2p20}), kMaxElements);
  EXPECT_EQ(element_count(Dims{}), 1u);
  EXPECT_FALSE(element_count(Dims{k2p20, k2p20, 2}));
  EXPECT_FALSE(element_count(Dims{k2p32, k2p32}));  // 2^64 wraps to 0 in 64 bits
  EXPECT_THROW((void)(Shape{2, {k2p32, k2p32, 1, 1}}.count()), InputError);
}

// What decompress writes for a (2^41, 0) stream, compress reads back (shared/defects-2/22: the
// .npy reader divided before it saw the 0 and refused "more than 1099511627776 elements").
TEST(ArrayIo, AnEmptyArrayWithAHugeDimensionReadsBack) {
  const Shape shape{2, {std::uint64_t{1} << 41, 0, 1, 1}};
  const std::string npy = format_npy({}, shape);
  const FloatArray a = parse_npy(npy, "z.npy");
  EXPECT_EQ(a.shape.rank, 2);
  EXPECT_EQ(a.shape.dims[0], std::uint64_t{1} << 41);
  EXPECT_EQ(a.shape.dims[1], 0u);
  EXPECT_TRUE(a.values.empty());
  const CompressOptions o{.codec = CodecId::szp, .eb = 1e-3, .mode = BoundMode::rel};
  EXPECT_EQ(compress(a.values, a.shape, o), compress({}, shape, o));
  // A product beyond the maximum is still refused, at the shape.
  std::string big = npy;
  big.replace(big.find("(2199023255552, 0)"), 18, "(2097152, 1048576)");
  try {
    (void)parse_npy(big, "z.npy");
    ADD_FAILURE() << "parsed";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(": shape (2097152, 1048576) has more than 1099511627776 elements"), std::string::npos) << e.what();
  }
}

// The worst case of more values than the kernels take is refused, not wrapped (2^64 - 1 values
// gave 108 bytes: shared/defects-2/19).
TEST(Codecs, MaxCompressedSizeRefusesCountsBeyondTheMaximum) {
  for (CodecId c : {CodecId::szp, CodecId::szh, CodecId::zeros, CodecId::quant, CodecId::fp16, CodecId::bf16, CodecId::zfp}) {
    EXPECT_THROW((void)max_compressed_size(c, ~std::uint64_t{0}), InputError) << codec_info(c).name;
    EXPECT_THROW((void)max_compressed_size(c, kMaxElements + 1), InputError) << codec_info(c).name;
  }
  EXPECT_GT(max_compressed_size(CodecId::szp, kMaxElements), 4 * kMaxElements);  // incompressible data are stored whole
  EXPECT_GT(max_compressed_size(CodecId::fp16, kMaxElements), 2 * kMaxElements);
}

// `comptrain compress` input errors name the file, the byte offset and what was expected.
TEST(ArrayIo, ErrorsNameTheFileTheOffsetAndTheExpectation) {
  const std::vector<float> v{1.0f, -2.0f, 3.5f, 0.0f, 5.0f, 6.0f};
  const std::string file = format_npy(v, Shape{2, {2, 3, 1, 1}});  // dict at byte 10
  const auto message = [](const std::string& bytes) {
    try {
      (void)parse_npy(bytes, "a.npy");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(parsed)");
  };
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = file;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  const std::size_t descr = file.find("'<f4'"), shape = file.find("(2, 3)"), data = file.size() - 24;
  EXPECT_EQ(message(replace("<f4", "<f8")),
            "a.npy: not a supported .npy file: at byte " + std::to_string(descr) + ": dtype '<f8' (expected '<f4', little-endian float32)");
  EXPECT_EQ(message(replace("False", "True ")),
            "a.npy: not a supported .npy file: at byte " + std::to_string(file.find("False")) +
                ": fortran_order True (expected False, C order)");
  EXPECT_EQ(message(replace("(2, 3)", "(2, 4)")), "a.npy: not a supported .npy file: at byte " + std::to_string(data) +
                                                       ": the data is 24 bytes, the shape (2, 4) at byte " + std::to_string(shape) +
                                                       " needs 32 (4 per float32)");
  EXPECT_EQ(message(replace("(2, 3)", "(2, x)")),
            "a.npy: not a supported .npy file: at byte " + std::to_string(shape + 4) + ": bad shape (2, x) (expected non-negative integers)");
  EXPECT_EQ(message(replace("'shape'", "'shapf'")), "a.npy: not a supported .npy file: at byte " + std::to_string(file.find("'shape'")) +
                                                        ": unknown key 'shapf' (did you mean 'shape'? expected 'descr', 'fortran_order' and 'shape')");
  // No guess when no key is close.
  EXPECT_EQ(message(replace("'shape'", "'xyzzy'")), "a.npy: not a supported .npy file: at byte " + std::to_string(file.find("'shape'")) +
                                                        ": unknown key 'xyzzy' (expected 'descr', 'fortran_order' and 'shape')");
  EXPECT_EQ(message("not numpy at all"), "a.npy: not a supported .npy file: at byte 0: bad magic (expected \"\\x93NUMPY\")");
  EXPECT_EQ(message(replace(std::string("\x01\x00", 2), std::string("\x07\x00", 2))),
            "a.npy: not a supported .npy file: at byte 6: format version 7 (expected 1, 2 or 3)");
  EXPECT_EQ(message(file.substr(0, 40)), "a.npy: not a supported .npy file: at byte 8: header length " + std::to_string(data - 10) +
                                             " runs past the end of the file (30 bytes after the preamble)");
  try {
    (void)parse_raw_f32("abcdef", "a.f32");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "a.f32: raw float32 file size 6 is not a multiple of 4 (expected whole 4-byte values; the last 2 bytes from byte 4 are left over)");
  }
}

}  // namespace
}  // namespace comptrain::kernels

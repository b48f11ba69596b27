// Corrupted, truncated and foreign streams must throw StreamError and never read or write out
// of bounds.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>

#include "comptrain/kernels/codec.hpp"
#include "data_families.hpp"

namespace comptrain::kernels {
namespace {

std::vector<std::byte> sample(CodecId codec, std::size_t n = 3000) {
  auto x = testing::relu_like(n, 0.5, 17);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  if (codec == CodecId::zfp) x[5] = 1.0f;
  return compress(x, Shape::flat(x.size()), {.codec = codec, .eb = 1e-3, .mode = BoundMode::rel});
}

// Rewrites the checksum so that a deliberate change reaches the payload decoder.
void reseal(std::vector<std::byte>& s) {
  const std::uint64_t sum = stream_checksum(s);
  std::memcpy(s.data() + 88, &sum, 8);
}

constexpr CodecId kAll[] = {CodecId::szp, CodecId::szh, CodecId::zeros, CodecId::quant, CodecId::fp16, CodecId::bf16, CodecId::zfp};

TEST(Stream, TruncationAtEveryHeaderFieldBoundaryAndInThePayload) {
  for (CodecId c : kAll) {
    const auto s = sample(c);
    for (std::size_t cut : {0, 3, 4, 5, 6, 7, 8, 9, 10, 12, 16, 24, 48, 56, 64, 72, 80, 88, 95, 96, 97, 200}) {
      std::vector<std::byte> t(s.begin(), s.begin() + static_cast<long>(std::min(cut, s.size() - 1)));
      EXPECT_THROW(decompress(t), StreamError) << codec_info(c).name << " cut at " << cut;
    }
    std::vector<std::byte> t(s.begin(), s.end() - 1);
    EXPECT_THROW(decompress(t), StreamError);
    std::vector<std::byte> longer = s;
    longer.push_back(std::byte{0});
    EXPECT_THROW(decompress(longer), StreamError);
  }
}

TEST(Stream, EveryFlippedByteIsDetected) {
  for (CodecId c : kAll) {
    const auto s = sample(c, 700);
    for (std::size_t i = 0; i < s.size(); ++i) {
      auto t = s;
      t[i] ^= std::byte{0x5A};
      EXPECT_THROW(decompress(t), StreamError) << codec_info(c).name << " byte " << i;
    }
  }
}

TEST(Stream, ForeignAndFutureStreams) {
  auto s = sample(CodecId::szp);
  auto magic = s;
  magic[0] = std::byte{'X'};
  try {
    decompress(magic);
    FAIL();
  } catch (const StreamError& e) {
    EXPECT_NE(std::string(e.what()).find("magic"), std::string::npos);
  }
  auto version = s;
  version[4] = std::byte{2};
  try {
    decompress(version);
    FAIL();
  } catch (const StreamError& e) {
    EXPECT_NE(std::string(e.what()).find("version 2"), std::string::npos);
  }
  auto codec = s;
  codec[6] = std::byte{77};
  reseal(codec);
  EXPECT_THROW(decompress(codec), StreamError);
  std::vector<std::byte> npy(200, std::byte{0x93});
  EXPECT_THROW(decompress(npy), StreamError);
}

// Structurally corrupted payloads with a valid checksum (a forged stream): the decoders must
// validate every count and offset themselves. Any outcome but StreamError or a clean decode is a
// failure; under ASan/the fuzzer, out-of-bounds accesses would show.
TEST(Stream, ResealedPayloadCorruptionIsValidated) {
  for (CodecId c : {CodecId::szp, CodecId::szh, CodecId::zeros, CodecId::quant, CodecId::fp16}) {
    const auto s = sample(c, 20000);
    std::mt19937 rng(5);
    for (int trial = 0; trial < 400; ++trial) {
      auto t = s;
      std::uniform_int_distribution<std::size_t> pos(kHeaderSize, t.size() - 1);
      const int flips = 1 + trial % 4;
      for (int k = 0; k < flips; ++k) t[pos(rng)] ^= std::byte{static_cast<unsigned char>(1u << (trial % 8))};
      reseal(t);
      try {
        const auto out = decompress(t);
        EXPECT_EQ(out.size(), 20000u);
      } catch (const StreamError&) {
      }
    }
  }
  // Header fields forged consistently: counts that do not match the payload. A count off by one
  // may still describe a structurally valid stream (it then decodes); a huge one must be refused
  // before anything is allocated.
  auto s = sample(CodecId::szp, 20000);
  for (std::uint64_t count : {std::uint64_t{19999}, std::uint64_t{20001}, std::uint64_t{8193}, std::uint64_t{1} << 39}) {
    auto t = s;
    std::memcpy(t.data() + 16, &count, 8);
    std::memcpy(t.data() + 48, &count, 8);
    reseal(t);
    try {
      EXPECT_EQ(decompress(t).size(), count);
      EXPECT_LT(count, 30000u);
    } catch (const StreamError&) {
    }
  }
}

// Targeted forgeries of szh's own structures behind a valid checksum: the code table, the
// outlier count, the chunk table and the bitstream.
TEST(Stream, SzhForgedTableOutliersAndBitstream) {
  const auto s = sample(CodecId::szh, 20000);
  constexpr std::size_t kTable = kHeaderSize + 12;  // after the step, chunk-size and predictor words
  std::uint32_t m = 0;
  std::memcpy(&m, s.data() + kTable, 4);
  ASSERT_GT(m, 2u);
  const std::size_t chunk_table = kTable + 4 + 3 * std::size_t{m};
  const std::size_t chunk0 = chunk_table + 8 * 4;  // 20000 values = 3 chunks
  const auto expect_error = [](std::vector<std::byte> t, const char* what) {
    reseal(t);
    EXPECT_THROW(decompress(t), StreamError) << what;
  };
  auto t = s;
  t[kTable + 4 + 2] = std::byte{0};
  expect_error(t, "length 0");
  t = s;
  t[kTable + 4 + 3 + 2] = std::byte{25};
  expect_error(t, "length 25");
  t = s;
  std::swap(t[kTable + 4], t[kTable + 4 + 3]);  // first two symbols out of order
  std::swap(t[kTable + 5], t[kTable + 5 + 3]);
  expect_error(t, "order");
  t = s;
  for (std::size_t i = 0; i < m; ++i) t[kTable + 4 + 3 * i + 2] = std::byte{1};  // all 1-bit: Kraft > 1
  expect_error(t, "kraft");
  t = s;
  const std::uint32_t huge = 0x7FFFFFFF;
  std::memcpy(t.data() + kTable, &huge, 4);
  expect_error(t, "table count");
  t = s;
  const std::uint32_t more = m + 1;
  std::memcpy(t.data() + kTable, &more, 4);
  expect_error(t, "table count + 1");
  t = s;
  const std::uint32_t outliers = 20000;
  std::memcpy(t.data() + chunk0, &outliers, 4);
  expect_error(t, "outlier count");
  t = s;
  const std::uint64_t offset = 5;
  std::memcpy(t.data() + chunk_table + 8, &offset, 8);
  expect_error(t, "chunk offset");
  // Bitstream bytes: any outcome but a clean decode or StreamError is a failure.
  std::mt19937 rng(9);
  std::uniform_int_distribution<std::size_t> pos(chunk0 + 64, s.size() - 1);
  int detected = 0;
  for (int trial = 0; trial < 300; ++trial) {
    t = s;
    t[pos(rng)] ^= std::byte{static_cast<unsigned char>(1u + rng() % 255)};
    reseal(t);
    try {
      EXPECT_EQ(decompress(t).size(), 20000u);
    } catch (const StreamError&) {
      ++detected;
    }
  }
  EXPECT_GT(detected, 0);
  // A stream cut inside its chunks, with the chunk table and sizes forged to match.
  for (std::size_t cut : {std::size_t{1}, std::size_t{7}, std::size_t{100}}) {
    t = s;
    t.resize(t.size() - cut);
    std::uint64_t last = 0;
    std::memcpy(&last, t.data() + chunk_table + 8 * 3, 8);
    last -= cut;
    std::memcpy(t.data() + chunk_table + 8 * 3, &last, 8);
    const std::uint64_t payload = t.size() - kHeaderSize;
    std::memcpy(t.data() + 72, &payload, 8);
    expect_error(t, "cut chunk");
  }
}

// Defect 10 (shared/defects/10-stream-forged-count): header and payload fields forged one at a
// time, with the checksum recomputed as a forger would. Each must be refused with the exact
// offset of the field that contradicts the others.
std::string error_of(std::vector<std::byte> t) {
  reseal(t);
  try {
    (void)decompress(t);
  } catch (const StreamError& e) {
    return e.what();
  }
  return "(decoded)";
}
template <class T>
std::vector<std::byte> with(std::vector<std::byte> s, std::size_t offset, T value) {
  std::memcpy(s.data() + offset, &value, sizeof value);
  return s;
}

std::vector<std::byte> noise_stream(CodecId codec, std::size_t n = 70000) {
  std::vector<float> x(n);
  std::uint32_t state = 12345;
  for (auto& v : x) {
    state = state * 1664525u + 1013904223u;  // Numerical Recipes' LCG
    v = static_cast<float>(state >> 8) / 16777216.0f * 8.0f - 4.0f;
  }
  return compress(x, Shape::flat(n), {.codec = codec, .eb = 1e-3, .mode = BoundMode::abs});
}

TEST(Stream, ForgedQuantisationStepIsRefusedAtItsOffset) {
  // As make.py's forged-step0.ctk: step 0 would decode every value to 0 (max error 4 for eb 1e-3).
  for (CodecId c : {CodecId::szp, CodecId::szh}) {
    const auto s = noise_stream(c);
    ASSERT_EQ(decompress(s).size(), 70000u);
    EXPECT_EQ(error_of(with(s, 96, 0.0f)),
              "corrupted stream at byte 96: quantisation step 0 does not match the absolute error bound 0.001 at byte 64 "
              "(expected step 0.00200000009)")
        << codec_info(c).name;
    EXPECT_TRUE(error_of(with(s, 96, 0.004f)).starts_with("corrupted stream at byte 96: quantisation step 0.00400000019 does not match"));
    // The step is right but the bound was changed (abs: the given bound must follow).
    EXPECT_EQ(error_of(with(s, 64, 2e-3)),
              "corrupted stream at byte 64: absolute error bound 0.002 differs from the given absolute bound 0.001 (byte 56)");
    auto both = with(with(s, 64, 2e-3), 56, 2e-3);
    EXPECT_TRUE(error_of(both).starts_with("corrupted stream at byte 96: quantisation step 0.00200000009 does not match the absolute "
                                          "error bound 0.002 at byte 64 (expected step 0.00400000019)"));
  }
}

// make.py's forged.ctk (defect 10): count and dim0 raised from 70000 to 70001 with the checksum
// recomputed. 70000 is not a multiple of the 32-value block, and the encoder codes the padding of
// the last block as zeros, so the forged stream is byte for byte what the encoder writes for the
// same values followed by a 0.0: a valid stream of 70001 values, which decodes correctly. No
// check can refuse it without refusing that honest stream too (a checksum is not a signature).
TEST(Stream, ACountRaisedIntoTheLastBlocksPaddingIsTheStreamOfOneMoreZero) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> values(70000);
  for (float& v : values) v = u(rng);
  values[3] = 0.0f;  // the range (and so the absolute bound) is the same with one more 0.0
  std::vector<float> one_more = values;
  one_more.push_back(0.0f);
  const CompressOptions o{.codec = CodecId::szp, .eb = 1e-3, .mode = BoundMode::rel};
  const auto stream = compress(values, Shape::flat(values.size()), o);
  const auto honest = compress(one_more, Shape::flat(one_more.size()), o);
  ASSERT_EQ(stream.size(), honest.size());
  EXPECT_TRUE(std::equal(stream.begin() + kHeaderSize, stream.end(), honest.begin() + kHeaderSize));
  const std::vector<float> back = decompress(honest);
  ASSERT_EQ(back.size(), 70001u);
  EXPECT_EQ(back.back(), 0.0f);
}

TEST(Stream, ForgedHeaderFieldsAreRefusedAtTheirOffsets) {
  const auto s = noise_stream(CodecId::szp);
  EXPECT_EQ(error_of(with(s, 48, std::uint64_t{70001})),
            "corrupted stream at byte 48: element count 70001 is not the product of the shape 70000 (70000)");
  EXPECT_EQ(error_of(with(s, 16, std::uint64_t{70001})),
            "corrupted stream at byte 48: element count 70000 is not the product of the shape 70001 (70001)");
  EXPECT_EQ(error_of(with(s, 9, std::uint8_t{5})), "corrupted stream at byte 9: bad rank 5 (expected 1..4)");
  EXPECT_EQ(error_of(with(s, 32, std::uint64_t{2})), "corrupted stream at byte 32: shape dimension 2 beyond rank 1 is 2 (expected 1)");
  EXPECT_EQ(error_of(with(s, 8, std::uint8_t{0})),
            "corrupted stream at byte 8: error-bound mode 0 for codec szp, which needs abs (1) or rel (2)");
  EXPECT_EQ(error_of(with(s, 12, std::uint32_t{4})), "corrupted stream at byte 12: codec parameter 4 for codec szp (expected 0)");
  EXPECT_EQ(error_of(with(s, 100, std::uint32_t{128})), "corrupted stream at byte 100: chunk size 128 blocks (this build reads 256)");
  EXPECT_EQ(error_of(with(s, 104, std::uint64_t{8})), "corrupted stream at byte 104: first chunk offset is 8 (expected 0)");
  // 9 chunks: the table is at 104..184, the chunks start at 184.
  EXPECT_EQ(error_of(with(s, 112, std::uint64_t{1})), "corrupted stream at byte 184: chunk 0: shorter than its tag bytes");
  EXPECT_TRUE(error_of(with(s, 120, std::uint64_t{0})).starts_with("corrupted stream at byte 120: offset 0 of chunk 2 is before"));
  // A count that needs more blocks than the chunks hold: the chunk's tags are refused where they start.
  const auto t = with(with(s, 48, std::uint64_t{70017}), 16, std::uint64_t{70017});
  EXPECT_NE(error_of(t).find("corrupted stream at byte "), std::string::npos) << error_of(t);
  // A count so large that no payload of this size holds it.
  const auto big = with(with(s, 48, std::uint64_t{1} << 39), 16, std::uint64_t{1} << 39);
  EXPECT_TRUE(error_of(big).starts_with("corrupted stream at byte 48: element count 549755813888 needs a szp payload of at least"));

  const auto z = noise_stream(CodecId::zeros);
  EXPECT_EQ(error_of(with(z, 96, std::uint32_t{1})), "corrupted stream at byte 96: zeros has no quantiser: its state word is not 0");
  EXPECT_EQ(error_of(with(z, 56, 1e-3)), "corrupted stream at byte 56: error bound 0.001 with mode none (expected 0)");
  EXPECT_EQ(error_of(with(z, 8, std::uint8_t{1})),
            "corrupted stream at byte 8: error-bound mode 1 for codec zeros, which is not error-bounded (expected 0)");

  const auto q = sample(CodecId::quant, 1000);
  EXPECT_EQ(error_of(with(q, 12, std::uint32_t{3})), "corrupted stream at byte 12: quant bit count 3 (expected 1, 2, 4 or 8)");
  EXPECT_EQ(error_of(with(q, 12, std::uint32_t{4})),
            "corrupted stream at byte 72: payload size 1032 does not match the 532 bytes that quant with 4 bits needs for 1000 values "
            "(count at byte 48)");
  const auto h = sample(CodecId::fp16, 1000);
  EXPECT_EQ(error_of(with(with(h, 48, std::uint64_t{999}), 16, std::uint64_t{999})),
            "corrupted stream at byte 72: payload size 2000 does not match the 1998 bytes that 2-byte casts need for 999 values "
            "(count at byte 48)");
  // rel: the enforced bound cannot exceed the relative bound times the widest range of floats.
  const auto r = sample(CodecId::szp, 1000);
  EXPECT_EQ(error_of(with(r, 64, 1e300)),
            "corrupted stream at byte 64: absolute error bound 1.0000000000000001e+300 exceeds the relative bound 0.001 times the "
            "widest float range (6.8056469327705773e+35)");
}

// The header's shape follows element_count: a product beyond 2^40 is refused at the shape
// without being formed (2^32 x 2^32 wraps to 0 in 64 bits), and an empty array with a huge
// dimension is the empty array it is (shared/defects-2/22).
TEST(Stream, AShapeBeyondTheMaximumIsRefusedAndAZeroEmptiesIt) {
  const auto s = with(noise_stream(CodecId::szp), 9, std::uint8_t{2});
  const auto wrapped = with(with(with(s, 16, std::uint64_t{1} << 32), 24, std::uint64_t{1} << 32), 48, std::uint64_t{0});
  EXPECT_EQ(error_of(wrapped),
            "corrupted stream at byte 16: the shape 4294967296 x 4294967296 has more than 1099511627776 elements (the supported maximum)");
  const Shape empty{2, {std::uint64_t{1} << 41, 0, 1, 1}};
  const auto stream = compress({}, empty, {.codec = CodecId::szp, .eb = 1e-3, .mode = BoundMode::rel});
  const Header h = inspect(stream);
  EXPECT_EQ(h.count, 0u);
  EXPECT_EQ(h.dims[0], std::uint64_t{1} << 41);
  EXPECT_TRUE(decompress(stream).empty());
}

// Every StreamError about a stream's content says where: random forgeries of header and payload
// bytes behind a recomputed checksum.
TEST(Stream, EveryCorruptionMessageNamesAByteOffset) {
  for (CodecId c : kAll) {
    const auto s = sample(c, 20000);
    std::mt19937 rng(11);
    for (int trial = 0; trial < 300; ++trial) {
      auto t = s;
      std::uniform_int_distribution<std::size_t> pos(4, t.size() - 1);
      const std::size_t p = pos(rng);
      if (p >= 88 && p < 96) continue;  // the checksum itself
      t[p] ^= std::byte{static_cast<unsigned char>(1u + rng() % 255)};
      const std::string e = error_of(t);
      if (e != "(decoded)") {
        EXPECT_NE(e.find("byte"), std::string::npos) << codec_info(c).name << " byte " << p << ": " << e;
      }
    }
  }
}

TEST(Stream, DecompressIntoChecksTheOutputSize) {
  const auto s = sample(CodecId::szp, 100);
  std::vector<float> small(99);
  EXPECT_THROW(decompress_into(s, small), InputError);
}

// The positive mask's stream: a round trip through inspect, and forged masks refused at their
// offsets (a codec parameter szp does not know, a payload too short for the mask, bits set after
// the last value, the mask on a codec that has none).
TEST(Stream, PositiveMaskRoundTripAndForgeries) {
  for (CodecId codec : {CodecId::szp, CodecId::szh}) {
    SCOPED_TRACE(codec_info(codec).name);
    auto x = testing::relu_like(3001, 0.5, 17);  // 3001: the mask's last byte holds one value
    for (std::size_t i = 0; i < x.size(); i += 7) x[i] = 1e-6f;  // inside (0, eb): decoded 0 without the mask
    const CompressOptions o{.codec = codec, .eb = 1e-3, .mode = BoundMode::rel, .positive_mask = true};
    const auto s = compress(x, Shape::flat(x.size()), o);
    const Header h = inspect(s);
    EXPECT_EQ(h.codec_param, kPositiveMaskParam);
    const auto back = decompress(s);
    for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i] > 0.0f, back[i] > 0.0f) << i;
    std::vector<float> threaded(x.size());
    decompress_into(s, threaded, 3);
    EXPECT_EQ(0, std::memcmp(back.data(), threaded.data(), 4 * x.size()));
    CompressOptions o3 = o;
    o3.threads = 3;
    EXPECT_EQ(s, compress(x, Shape::flat(x.size()), o3));

    auto param = s;  // a parameter szp and szh do not define
    param[field::kCodecParam] = std::byte{2};
    reseal(param);
    EXPECT_THROW((void)decompress(param), StreamError);

    auto padding = s;  // a bit after the last value
    padding.back() |= std::byte{0x80};
    reseal(padding);
    try {
      (void)decompress(padding);
      ADD_FAILURE() << "padding bits accepted";
    } catch (const StreamError& e) {
      EXPECT_NE(std::string(e.what()).find("byte " + std::to_string(s.size() - 1)), std::string::npos) << e.what();
    }

    auto without = s;  // the flag cleared: the mask's bytes are then garbage after the codec's payload
    without[field::kCodecParam] = std::byte{0};
    reseal(without);
    EXPECT_THROW((void)decompress(without), StreamError);

    // The flag set on a stream without the mask: its codec payload is cut short.
    const auto plain = compress(x, Shape::flat(x.size()), {.codec = codec, .eb = 1e-3, .mode = BoundMode::rel});
    auto forged = plain;
    forged[field::kCodecParam] = std::byte{1};
    reseal(forged);
    EXPECT_THROW((void)decompress(forged), StreamError);
  }
  // A tiny stream whose payload cannot even hold the mask.
  auto tiny = compress(std::vector<float>(64, 1.0f), Shape::flat(64), {.codec = CodecId::szp, .eb = 0.5, .mode = BoundMode::abs});
  tiny[field::kCodecParam] = std::byte{1};
  const std::uint64_t four = 4;  // payload size 4 bytes < the 8-byte mask
  tiny.resize(kHeaderSize + four);
  std::memcpy(tiny.data() + field::kPayloadSize, &four, 8);
  reseal(tiny);
  EXPECT_THROW((void)decompress(tiny), StreamError);
  for (CodecId codec : {CodecId::zeros, CodecId::quant, CodecId::fp16, CodecId::bf16, CodecId::zfp}) {
    const std::vector<float> x(100, 1.0f);
    CompressOptions o{.codec = codec, .eb = 1e-3, .mode = BoundMode::abs, .positive_mask = true};
    EXPECT_THROW((void)compress(x, Shape::flat(x.size()), o), InputError) << codec_info(codec).name;
  }
}

// The threaded decoders record each range's first corrupt chunk and throw after the join (a range
// must not throw: kernels/src/cpu_driver.hpp, parallel_ranges): so the error is the lowest
// chunk's, the one a single thread meets first. Bytes are overwritten all over the chunks of
// szp and szh streams (checksum resealed, as a forger would), and whatever one thread says -
// the error, or the values - four threads must say too.
TEST(Stream, ThreadedDecodingReportsWhatOneThreadReports) {
  for (const CodecId codec : {CodecId::szp, CodecId::szh}) {
    SCOPED_TRACE(codec_info(codec).name);
    const auto s = noise_stream(codec);
    const auto answer = [](std::vector<std::byte> t, unsigned threads) -> std::string {
      reseal(t);
      std::vector<float> out(70000);
      try {
        decompress_into(t, out, threads);
      } catch (const StreamError& e) {
        return e.what();
      }
      return std::string(reinterpret_cast<const char*>(out.data()), 4 * out.size());
    };
    // Where the chunks start: szp's chunk table is at byte 104 (ForgedHeaderFieldsAreRefused...);
    // szh's follows its code table, so its bytes are hit anywhere after the fixed header.
    std::vector<std::size_t> chunk_starts;
    if (codec == CodecId::szp) {
      for (std::size_t c = 0; c < 9; ++c) {
        std::uint64_t offset = 0;
        std::memcpy(&offset, s.data() + 104 + 8 * c, 8);
        chunk_starts.push_back(184 + offset);
      }
    }
    int refused = 0;
    std::uint32_t state = 777;
    for (int trial = 0; trial < 60; ++trial) {
      auto t = s;
      for (int k = 0; k < 1 + trial % 3; ++k) {  // one to three bytes: szp's in a chunk's tag bytes
        state = state * 1664525u + 1013904223u;
        const std::size_t at = chunk_starts.empty() ? kHeaderSize + 40 + (state >> 8) % (t.size() - kHeaderSize - 40)
                                                    : chunk_starts[(state >> 8) % 9] + (state >> 16) % 32;
        t[at] = static_cast<std::byte>(state & 0xffu);
      }
      const std::string one = answer(t, 1);
      refused += one.starts_with("corrupted stream at byte ");
      EXPECT_EQ(one, answer(t, 4)) << "trial " << trial;
    }
    EXPECT_GT(refused, 10) << "the corruptions should often reach the chunks' checks, not only the values";
  }
}

}  // namespace
}  // namespace comptrain::kernels

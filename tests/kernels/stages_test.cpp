// The stage functions against their definitions, and the CPU fast paths against the generic
// block-by-block path the CUDA driver runs (same bytes, or the streams would differ).

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <random>

#include "comptrain/kernels/hd.hpp"
#include "comptrain/kernels/huffman.hpp"
#include "comptrain/kernels/stages.hpp"
#include "cpu_driver.hpp"
#include "data_families.hpp"

namespace comptrain::kernels {
namespace {

// Definition: output row r, column c (bit 31-c) = input row c, column r (bit 31-r).
void naive_transpose(const std::uint32_t in[32], std::uint32_t out[32]) {
  for (unsigned r = 0; r < 32; ++r) {
    out[r] = 0;
    for (unsigned c = 0; c < 32; ++c) out[r] |= ((in[c] >> (31 - r)) & 1u) << (31 - c);
  }
}

TEST(Stages, Transpose32MatchesTheDefinitionOnBothPaths) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 2000; ++trial) {
    std::uint32_t a[32], expect[32], scalar[32];
    for (auto& w : a) w = static_cast<std::uint32_t>(trial % 3 == 0 ? (rng() & rng()) : rng());
    naive_transpose(a, expect);
    std::memcpy(scalar, a, sizeof a);
    hd::transpose32(a);  // host path (vectorised short stages)
    ASSERT_EQ(std::memcmp(a, expect, sizeof a), 0) << trial;
    // The plain stage loops, as compiled for the device.
    hd::transpose_stage<16, 0x0000FFFFu>(scalar);
    hd::transpose_stage<8, 0x00FF00FFu>(scalar);
    hd::transpose_stage<4, 0x0F0F0F0Fu>(scalar);
    hd::transpose_stage<2, 0x33333333u>(scalar);
    hd::transpose_stage<1, 0x55555555u>(scalar);
    ASSERT_EQ(std::memcmp(scalar, expect, sizeof a), 0) << trial;
  }
}

// The positive mask's decode rule on its edge cases: a positive decoded to 0 or below becomes
// the smallest positive float, a non-positive decoded above 0 becomes +0.0, anything else (NaN,
// infinities, -0.0, agreeing signs) is untouched; pack and apply are inverse on the sign.
TEST(Stages, PositiveMaskRestoresTheSignAndNothingElse) {
  const float tiny = hd::bits_float(1u), nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(hd::float_bits(PositiveMask::restore(true, 0.0f)), 1u);
  EXPECT_EQ(hd::float_bits(PositiveMask::restore(true, -0.0f)), 1u);
  EXPECT_EQ(PositiveMask::restore(true, -0.25f), tiny);
  EXPECT_EQ(PositiveMask::restore(true, 0.5f), 0.5f);
  EXPECT_EQ(PositiveMask::restore(true, inf), inf);
  EXPECT_EQ(hd::float_bits(PositiveMask::restore(false, 0.25f)), 0u);
  EXPECT_EQ(hd::float_bits(PositiveMask::restore(false, -0.0f)), 0x80000000u);
  EXPECT_EQ(PositiveMask::restore(false, -0.5f), -0.5f);
  EXPECT_EQ(PositiveMask::restore(false, -inf), -inf);
  EXPECT_TRUE(std::isnan(PositiveMask::restore(false, nan)));
  const float x[8] = {1.0f, 0.0f, -1.0f, tiny, nan, inf, -0.0f, 3.0f};
  const std::uint8_t bits = PositiveMask::pack(x, 8);
  EXPECT_EQ(bits, 0b10101001);
  EXPECT_EQ(PositiveMask::pack(x, 3), 0b001);
  EXPECT_TRUE(PositiveMask::padding_clear(PositiveMask::pack(x, 5), 5));
  EXPECT_FALSE(PositiveMask::padding_clear(0b100000, 5));
  float y[8] = {0.0f, 0.5f, -1.0f, -0.0f, nan, inf, -0.0f, 2.0f};
  PositiveMask::apply(bits, 8, y);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(x[i] > 0.0f, y[i] > 0.0f) << i;
  EXPECT_EQ(PositiveMask::bytes(0), 0u);
  EXPECT_EQ(PositiveMask::bytes(8), 1u);
  EXPECT_EQ(PositiveMask::bytes(9), 2u);
}

TEST(Stages, RoundEvenSmallIsRintBelowTwoToThe22) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-4194303.0f, 4194303.0f);
  for (int i = 0; i < 100000; ++i) {
    const float v = i % 2 ? u(rng) : u(rng) * 1e-5f;
    ASSERT_EQ(hd::round_even_small(v), std::nearbyint(v)) << v;
  }
  for (float v : {0.5f, 1.5f, 2.5f, -0.5f, -2.5f, 4194303.5f, -4194302.5f}) EXPECT_EQ(hd::round_even_small(v), std::nearbyint(v));
}

// The CPU driver's szp worker (whole-chunk quantisation, then per-block stages, multi-versioned)
// must write exactly what the block-at-a-time encode writes (the CUDA kernel's order).
TEST(Stages, CpuChunkWorkerMatchesBlockAtATimeEncode) {
  for (const auto& f : testing::families(9000)) {
    for (double eb : {1e-1, 1e-3, 1e-6, 0.0}) {
      const SzpBlockCodec<> codec{make_linear_quantizer(eb)};
      const std::uint64_t n = std::min<std::uint64_t>(f.values.size(), kChunkValues);
      std::vector<std::uint8_t> a(max_chunk_bytes(kChunkValues) + 16), b(a.size());
      std::vector<float> side(kChunkValues);
      const std::uint64_t sa = detail::encode_chunk(codec, f.values.data(), n, a.data(), side.data());
      const std::uint64_t sb = detail::ChunkWorkers<SzpBlockCodec<>>::encode(codec, f.values.data(), n, b.data(), side.data());
      ASSERT_EQ(sa, sb) << f.name << " " << eb;
      ASSERT_EQ(std::memcmp(a.data(), b.data(), sa), 0) << f.name << " " << eb;
    }
  }
}

// --- szh's Huffman stage ---------------------------------------------------------------------

// Sum of 2^-length over the code (scaled by 2^kMaxLength): <= 1 for any prefix code.
std::uint64_t kraft_sum(const std::vector<std::uint64_t>& histogram, const HuffmanCode& code) {
  std::uint64_t k = 0;
  for (std::uint32_t s = 0; s < histogram.size(); ++s) {
    if (histogram[s] != 0) k += std::uint64_t{1} << (HuffmanCode::kMaxLength - code.length(static_cast<std::uint16_t>(s)));
  }
  return k;
}

// Encodes `symbols`, reloads the code from its serialised state and decodes them back.
void expect_round_trip(const HuffmanCode& code, const std::vector<std::uint16_t>& symbols) {
  std::vector<std::uint8_t> state(code.state_bytes());
  code.save(state.data());
  HuffmanCode loaded;
  std::uint64_t used = 0;
  ASSERT_EQ(HuffmanCode::load(state.data(), state.size(), loaded, used), nullptr);
  EXPECT_EQ(used, state.size());
  std::vector<std::uint8_t> bits(3 * symbols.size() + 8);
  HuffmanCode::Writer w{bits.data()};
  std::uint64_t total = 0;
  for (auto s : symbols) {
    w.put(code.code(s), code.length(s));
    total += code.length(s);
  }
  const std::uint64_t bytes = w.finish();
  EXPECT_EQ(bytes, (total + 7) / 8);
  HuffmanCode::Reader r{bits.data(), bytes};
  for (std::size_t i = 0; i < symbols.size(); ++i) {
    std::uint16_t s = 0;
    ASSERT_TRUE(loaded.decode(r, s)) << i;
    ASSERT_EQ(s, symbols[i]) << i;
  }
  EXPECT_EQ(r.consumed(), total);
}

TEST(Huffman, LengthLimitedOnFibonacciFrequencies) {
  // Fibonacci counts make the unrestricted Huffman tree a chain (depth 44 here): the limit must bite.
  std::vector<std::uint64_t> histogram(HuffmanCode::kAlphabet, 0);
  std::uint64_t a = 1, b = 1;
  std::vector<std::uint16_t> symbols;
  for (std::uint32_t i = 0; i < 45; ++i) {
    const auto s = static_cast<std::uint16_t>(1000 + 7 * i);
    histogram[s] = a;
    std::tie(a, b) = std::pair{b, a + b};
    symbols.push_back(s);
  }
  const HuffmanCode code = HuffmanCode::build(histogram);
  std::uint32_t longest = 0;
  for (auto s : symbols) longest = std::max(longest, code.length(s));
  EXPECT_LE(longest, HuffmanCode::kMaxLength);
  EXPECT_GE(longest, 20u);
  EXPECT_EQ(kraft_sum(histogram, code), std::uint64_t{1} << HuffmanCode::kMaxLength);  // complete
  expect_round_trip(code, symbols);
}

TEST(Huffman, RandomHistogramsRoundTripAndAreOptimalWhenUnlimited) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<std::uint64_t> histogram(HuffmanCode::kAlphabet, 0);
    std::geometric_distribution<int> geo(trial % 2 ? 0.3 : 0.01);
    std::vector<std::uint16_t> symbols(5000);
    for (auto& s : symbols) {
      s = static_cast<std::uint16_t>(32768 + (rng() % 2 ? 1 : -1) * std::min(geo(rng), 30000));
      ++histogram[s];
    }
    const HuffmanCode code = HuffmanCode::build(histogram);
    EXPECT_LE(kraft_sum(histogram, code), std::uint64_t{1} << HuffmanCode::kMaxLength);
    expect_round_trip(code, symbols);
  }
  std::vector<std::uint64_t> one(HuffmanCode::kAlphabet, 0);
  one[7] = 100;  // one symbol: a 1-bit code (incomplete, still decodable)
  const HuffmanCode single = HuffmanCode::build(one);
  EXPECT_EQ(single.length(7), 1u);
  expect_round_trip(single, std::vector<std::uint16_t>(100, 7));
  EXPECT_TRUE(HuffmanCode::build(std::vector<std::uint64_t>(HuffmanCode::kAlphabet, 0)).empty());
}

TEST(Huffman, LoadRejectsForgedTables) {
  const auto table = [](std::vector<std::array<int, 2>> entries) {
    std::vector<std::uint8_t> t(4 + 3 * entries.size());
    hd::store_u32(t.data(), static_cast<std::uint32_t>(entries.size()));
    for (std::size_t i = 0; i < entries.size(); ++i) {
      t[4 + 3 * i] = static_cast<std::uint8_t>(entries[i][0] & 0xFF);
      t[5 + 3 * i] = static_cast<std::uint8_t>(entries[i][0] >> 8);
      t[6 + 3 * i] = static_cast<std::uint8_t>(entries[i][1]);
    }
    return t;
  };
  const auto rejects = [](const std::vector<std::uint8_t>& t, std::uint64_t size) {
    HuffmanCode c;
    std::uint64_t used = 0;
    return HuffmanCode::load(t.data(), size, c, used) != nullptr;
  };
  const auto ok = table({{3, 1}, {9, 2}, {400, 2}});
  EXPECT_FALSE(rejects(ok, ok.size()));
  EXPECT_TRUE(rejects(ok, ok.size() - 1));                       // truncated
  EXPECT_TRUE(rejects(ok, 3));                                   // no count
  EXPECT_TRUE(rejects(table({{3, 0}, {9, 1}}), 10));             // length 0
  EXPECT_TRUE(rejects(table({{3, 1}, {9, 25}}), 10));            // longer than the limit
  EXPECT_TRUE(rejects(table({{9, 1}, {3, 1}}), 10));             // out of order
  EXPECT_TRUE(rejects(table({{3, 1}, {3, 1}}), 10));             // duplicate
  EXPECT_TRUE(rejects(table({{1, 1}, {2, 1}, {3, 1}}), 13));     // Kraft sum > 1
  auto huge = ok;
  hd::store_u32(huge.data(), 0xFFFFFFFFu);
  EXPECT_TRUE(rejects(huge, huge.size()));
  // An incomplete code: bit patterns outside it are refused by the decoder, not misread.
  HuffmanCode c;
  std::uint64_t used = 0;
  const auto sparse = table({{5, 2}});
  ASSERT_EQ(HuffmanCode::load(sparse.data(), sparse.size(), c, used), nullptr);
  const std::uint8_t ones[4] = {0xFF, 0xFF, 0xFF, 0xFF};
  HuffmanCode::Reader r{ones, 4};
  std::uint16_t s = 0;
  EXPECT_FALSE(c.decode(r, s));
}

// The sequential definition of szh's symbols (the stage's form before it was split into a
// vectorised pass and a correction after raw values): a raw value is an escape and does not move
// the predictor; residuals outside the symbol range are wide escapes.
std::uint32_t reference_forward(const float* x, const std::int32_t* q, const std::uint32_t* raw, std::uint32_t n, bool lorenzo,
                                std::uint16_t* symbols, std::uint32_t* outliers) {
  std::int32_t prev = 0;
  std::uint32_t k = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (raw[i]) {
      symbols[i] = ChunkLorenzo1D::kRawSymbol;
      outliers[k++] = hd::float_bits(x[i]);
      continue;
    }
    const std::int32_t d = q[i] - prev;
    if (lorenzo) prev = q[i];
    symbols[i] = ChunkLorenzo1D::symbol(d);
    if (symbols[i] == ChunkLorenzo1D::kWideSymbol) outliers[k++] = static_cast<std::uint32_t>(d);
  }
  return k;
}

TEST(Stages, ChunkLorenzoSymbolsMatchTheSequentialDefinition) {
  std::mt19937 rng(9);
  for (std::uint32_t n : {0u, 1u, 2u, 31u, 1000u, 8192u}) {
    for (int pattern = 0; pattern < 4; ++pattern) {
      std::vector<float> x(n);
      std::vector<std::int32_t> q(n);
      std::vector<std::uint32_t> raw(n);
      for (std::uint32_t i = 0; i < n; ++i) {
        x[i] = static_cast<float>(i) + 0.5f;
        // pattern 0: small codes, no escapes; 1: wide residuals; 2: raw runs (at 0, at the end,
        // consecutive); 3: both
        const bool wide = (pattern & 1) && rng() % 5 == 0;
        q[i] = wide ? static_cast<std::int32_t>(rng() % (1u << 22)) - (1 << 21) : static_cast<std::int32_t>(rng() % 41) - 20;
        raw[i] = (pattern & 2) && (i == 0 || i + 1 == n || rng() % 7 == 0 || (i > 3 && raw[i - 1] && rng() % 2 == 0)) ? 1u : 0u;
        if (raw[i]) q[i] = 0;
      }
      for (bool lorenzo : {false, true}) {
        std::vector<std::uint16_t> expect_sym(n), sym(n, 0xFFFF);
        std::vector<std::uint32_t> expect_out(n), out(n, 0xDEADBEEF);
        const std::uint32_t ek = reference_forward(x.data(), q.data(), raw.data(), n, lorenzo, expect_sym.data(), expect_out.data());
        const std::uint32_t k = ChunkLorenzo1D::forward(x.data(), q.data(), raw.data(), n, lorenzo, sym.data(), out.data());
        ASSERT_EQ(sym, expect_sym) << "n " << n << " pattern " << pattern << " lorenzo " << lorenzo;
        ASSERT_EQ(k, ek);
        ASSERT_TRUE(std::equal(out.begin(), out.begin() + k, expect_out.begin()));
        if (ek != 0) {
          EXPECT_TRUE(ChunkLorenzo1D::symbols(q.data(), raw.data(), n, lorenzo, sym.data()));
        }
      }
    }
  }
}

// szh's prediction stage: the decoder's running sum inverts the encoder's residuals, escapes
// included, and a raw value does not disturb the chain.
TEST(Stages, ChunkLorenzoInverseMatchesForward) {
  std::mt19937 rng(4);
  std::vector<float> x(1000);
  std::vector<std::int32_t> q(1000);
  std::vector<std::uint32_t> raw(1000), outliers(1000);
  std::vector<std::uint16_t> symbols(1000);
  for (std::size_t i = 0; i < q.size(); ++i) {
    q[i] = static_cast<std::int32_t>(rng() % 200000) - 100000;  // many wide residuals
    if (i % 3 == 0) q[i] = q[i] / 1000;
    raw[i] = i % 11 == 0 ? 1u : 0u;
    x[i] = static_cast<float>(i);
    if (raw[i]) q[i] = 0;
  }
  for (bool lorenzo : {false, true}) {
    const std::uint32_t k = ChunkLorenzo1D::forward(x.data(), q.data(), raw.data(), 1000, lorenzo, symbols.data(), outliers.data());
    constexpr std::uint32_t kWays = ChunkLorenzo1D::kWays;
    std::vector<std::uint64_t> spread_plain(ChunkLorenzo1D::kSymbols * kWays, 0), spread_delta(ChunkLorenzo1D::kSymbols * kWays, 0);
    std::vector<std::uint16_t> scratch(1000);
    ChunkLorenzo1D::histograms(q.data(), raw.data(), 1000, scratch.data(), spread_plain.data(), spread_delta.data());
    std::vector<std::uint64_t> plain(ChunkLorenzo1D::kSymbols, 0), delta(ChunkLorenzo1D::kSymbols, 0), mine(ChunkLorenzo1D::kSymbols, 0);
    for (std::uint32_t s = 0; s < ChunkLorenzo1D::kSymbols; ++s) {
      for (std::uint32_t w = 0; w < kWays; ++w) {
        plain[s] += spread_plain[s * kWays + w];
        delta[s] += spread_delta[s * kWays + w];
      }
    }
    for (auto s : symbols) ++mine[s];
    EXPECT_EQ(mine, lorenzo ? delta : plain);  // pass 1 counts exactly what pass 2 codes
    std::uint32_t prev = 0, used = 0;
    for (std::size_t i = 0; i < q.size(); ++i) {
      const std::uint16_t s = symbols[i];
      if (s == ChunkLorenzo1D::kRawSymbol) {
        EXPECT_EQ(hd::bits_float(outliers[used++]), x[i]);
        continue;
      }
      const std::uint32_t o = s == ChunkLorenzo1D::kWideSymbol ? outliers[used++] : 0u;
      EXPECT_EQ(ChunkLorenzo1D::inverse(s, o, lorenzo, prev), q[i]) << i;
    }
    EXPECT_EQ(used, k);
  }
}

}  // namespace
}  // namespace comptrain::kernels

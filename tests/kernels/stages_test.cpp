// The stage functions against their definitions, and the CPU fast paths against the generic
// block-by-block path the CUDA driver runs (same bytes, or the streams would differ).

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "comptrain/kernels/hd.hpp"
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

}  // namespace
}  // namespace comptrain::kernels

#pragma once
// Portability layer for the stage code that is compiled both by the host compiler and by nvcc.
//
// Everything here is __host__ __device__ (COMPTRAIN_HD) and free of host-only library calls, so
// a stage written once runs in the CPU driver (std::thread) and in the CUDA driver (.cu) and
// produces the same bits: both sides use IEEE-754 round-to-nearest single/double arithmetic with
// no FMA contraction (host: -ffp-contract=off, device: -fmad=false; see cmake/).

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define COMPTRAIN_HD __host__ __device__ __forceinline__
#else
#define COMPTRAIN_HD inline
#endif

namespace comptrain::kernels::hd {

COMPTRAIN_HD std::uint32_t float_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

COMPTRAIN_HD float bits_float(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// Unaligned little-endian loads and stores (streams are byte buffers with no alignment promise;
// both the host and the GPUs we target are little-endian, checked in stream.cpp).
COMPTRAIN_HD std::uint32_t load_u32(const std::uint8_t* p) {
  std::uint32_t u;
  std::memcpy(&u, p, sizeof u);
  return u;
}

COMPTRAIN_HD void store_u32(std::uint8_t* p, std::uint32_t u) { std::memcpy(p, &u, sizeof u); }

COMPTRAIN_HD int popcount32(std::uint32_t x) {
#if defined(__CUDA_ARCH__)
  return __popc(x);
#else
  return __builtin_popcount(x);
#endif
}

// Number of significant bits of x (0 for x == 0).
COMPTRAIN_HD std::uint32_t bit_width32(std::uint32_t x) {
#if defined(__CUDA_ARCH__)
  return static_cast<std::uint32_t>(32 - __clz(static_cast<int>(x)));
#else
  return x == 0 ? 0u : static_cast<std::uint32_t>(32 - __builtin_clz(x));
#endif
}

COMPTRAIN_HD float abs_f(float x) { return bits_float(float_bits(x) & 0x7fffffffu); }
// Next float towards zero for a positive finite x (host-side helper, no libm).
COMPTRAIN_HD float next_down(float x) { return x > 0.0f ? bits_float(float_bits(x) - 1u) : x; }

// Round to nearest, ties to even, for |v| < 2^22: adding 1.5 * 2^23 moves v into [2^23, 2^24),
// where the float spacing is 1, so the addition itself rounds (to even: the constant is even);
// subtracting it back is exact. Same bits on host and device (no FMA, no libm call, and it
// vectorises on baseline x86-64, which has no roundss). Meaningless for larger |v|: callers
// check the range first.
COMPTRAIN_HD float round_even_small(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  const float shifted = v + kMagic;
  return shifted - kMagic;
}

// One stage of transpose32: swaps the J x J off-diagonal sub-blocks selected by mask M.
// J and M are compile-time constants so the wide stages vectorise (shift by an immediate).
template <unsigned J, std::uint32_t M>
COMPTRAIN_HD void transpose_stage(std::uint32_t a[32]) {
  for (unsigned base = 0; base < 32; base += 2 * J) {
    for (unsigned k = base; k < base + J; ++k) {
      const std::uint32_t t = (a[k] ^ (a[k + J] >> J)) & M;
      a[k] ^= t;
      a[k + J] ^= (t << J);
    }
  }
}

// In-place transpose of a 32x32 bit matrix (Hacker's Delight, 2nd ed., Fig. 7-6, "transpose32"):
// row r, column c (column c = bit 31-c) moves to row c, column r. It is an involution, so the
// encoder and the decoder call the same function.
#if !defined(__CUDACC__) && defined(__GNUC__) && !defined(__clang__)
// Host-only form of the stages with J < 8 (partners inside one 8-word group): GCC vector
// extensions with constant shuffles, so the short stages vectorise too (plain loops leave them
// scalar). Pure integer operations: the result is the same bits as transpose_stage.
using U32x8 = std::uint32_t __attribute__((vector_size(32)));
template <unsigned J, std::uint32_t M>
inline void transpose_stage_in_group(std::uint32_t a[32]) {
  constexpr U32x8 partner = {0 ^ J, 1 ^ J, 2 ^ J, 3 ^ J, 4 ^ J, 5 ^ J, 6 ^ J, 7 ^ J};
  constexpr U32x8 is_low = {(0 & J) ? 0u : ~0u, (1 & J) ? 0u : ~0u, (2 & J) ? 0u : ~0u, (3 & J) ? 0u : ~0u,
                            (4 & J) ? 0u : ~0u, (5 & J) ? 0u : ~0u, (6 & J) ? 0u : ~0u, (7 & J) ? 0u : ~0u};
  for (unsigned g = 0; g < 32; g += 8) {
    U32x8 v;
    std::memcpy(&v, a + g, sizeof v);
    const U32x8 t = (v ^ (__builtin_shuffle(v, partner) >> J)) & M;  // meaningful in the low lanes
    const U32x8 t_for_high = __builtin_shuffle(t, partner) << J;       // moved to their partners
    v ^= (t & is_low) | (t_for_high & ~is_low);
    std::memcpy(a + g, &v, sizeof v);
  }
}
#endif

COMPTRAIN_HD void transpose32(std::uint32_t a[32]) {
  transpose_stage<16, 0x0000FFFFu>(a);
  transpose_stage<8, 0x00FF00FFu>(a);
#if !defined(__CUDACC__) && defined(__GNUC__) && !defined(__clang__)
  transpose_stage_in_group<4, 0x0F0F0F0Fu>(a);
  transpose_stage_in_group<2, 0x33333333u>(a);
  transpose_stage_in_group<1, 0x55555555u>(a);
#else
  transpose_stage<4, 0x0F0F0F0Fu>(a);
  transpose_stage<2, 0x33333333u>(a);
  transpose_stage<1, 0x55555555u>(a);
#endif
}

}  // namespace comptrain::kernels::hd

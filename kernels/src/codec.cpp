// Codec registry, the error-bound policy, the recipes' stream layouts and the CPU entry points.

#include "comptrain/kernels/codec.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "comptrain/kernels/stages.hpp"
#include "cpu_driver.hpp"
#include "fp16_cpu.hpp"
#include "szh_codec.hpp"
#include "zfp_codec.hpp"

namespace comptrain::kernels {
namespace {

// ActNN (Chen et al., ICML 2021) quantises activations per group of 256 values by default
// (actnn/conf.py `group_size = 256`), storing each group's min and scale.
constexpr std::uint32_t kQuantGroup = 256;

std::uint64_t quant_group_bytes(std::uint64_t values, unsigned bits) { return 8 + (values * bits + 7) / 8; }

void check_quant_bits(unsigned bits) {
  if (bits != 1 && bits != 2 && bits != 4 && bits != 8) {
    throw InputError("quant bits must be 1, 2, 4 or 8 (got " + std::to_string(bits) + ")");
  }
}

// --- quant: per-group min/scale + packed codes. Fixed size per group, so groups are independent.
std::uint64_t quant_encode(std::span<const float> x, unsigned bits, unsigned threads, std::span<std::byte> out) {
  const std::uint64_t n = x.size();
  const std::uint64_t groups = (n + kQuantGroup - 1) / kQuantGroup;
  const std::uint32_t levels = (1u << bits) - 1u;
  detail::parallel_ranges(groups, threads, [&](std::uint64_t g0, std::uint64_t g1, unsigned) noexcept {
    for (std::uint64_t g = g0; g < g1; ++g) {
      const float* v = x.data() + g * kQuantGroup;
      const auto m = static_cast<std::uint32_t>(std::min<std::uint64_t>(kQuantGroup, n - g * kQuantGroup));
      float lo = std::numeric_limits<float>::infinity(), hi = -lo;
      for (std::uint32_t i = 0; i < m; ++i) {
        if (std::isfinite(v[i])) {
          lo = std::min(lo, v[i]);
          hi = std::max(hi, v[i]);
        }
      }
      if (!(lo <= hi)) lo = hi = 0.0f;
      const auto scale = static_cast<float>(std::min((static_cast<double>(hi) - lo) / levels,
                                                     static_cast<double>(std::numeric_limits<float>::max())));
      const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
      std::byte* p = out.data() + g * quant_group_bytes(kQuantGroup, bits);
      std::memcpy(p, &lo, 4);
      std::memcpy(p + 4, &scale, 4);
      std::uint8_t* codes = reinterpret_cast<std::uint8_t*>(p + 8);
      std::memset(codes, 0, (std::uint64_t{m} * bits + 7) / 8);
      for (std::uint32_t i = 0; i < m; ++i) {
        float t = std::rint((v[i] - lo) * inv);
        t = std::isnan(t) ? 0.0f : std::clamp(t, 0.0f, static_cast<float>(levels));  // NaN -> 0, +Inf -> top
        const auto code = static_cast<std::uint32_t>(t);
        const std::uint32_t bit = i * bits;
        codes[bit / 8] = static_cast<std::uint8_t>(codes[bit / 8] | (code << (bit % 8)));
      }
    }
  });
  return groups == 0 ? 0 : (groups - 1) * quant_group_bytes(kQuantGroup, bits) + quant_group_bytes(n - (groups - 1) * kQuantGroup, bits);
}

void quant_decode(std::span<const std::byte> payload, unsigned bits, float* out, std::uint64_t n, unsigned threads) {
  const std::uint64_t groups = (n + kQuantGroup - 1) / kQuantGroup;
  const std::uint64_t expect = groups == 0 ? 0
                                           : (groups - 1) * quant_group_bytes(kQuantGroup, bits) +
                                                 quant_group_bytes(n - (groups - 1) * kQuantGroup, bits);
  if (payload.size() != expect) throw_corrupt_at(field::kPayloadSize, "quant payload has the wrong size");
  const std::uint32_t mask = (1u << bits) - 1u;
  detail::parallel_ranges(groups, threads, [&](std::uint64_t g0, std::uint64_t g1, unsigned) noexcept {
    for (std::uint64_t g = g0; g < g1; ++g) {
      const std::byte* p = payload.data() + g * quant_group_bytes(kQuantGroup, bits);
      const auto m = static_cast<std::uint32_t>(std::min<std::uint64_t>(kQuantGroup, n - g * kQuantGroup));
      float lo, scale;
      std::memcpy(&lo, p, 4);
      std::memcpy(&scale, p + 4, 4);
      const auto* codes = reinterpret_cast<const std::uint8_t*>(p + 8);
      float* o = out + g * kQuantGroup;
      for (std::uint32_t i = 0; i < m; ++i) {
        const std::uint32_t bit = i * bits;
        const std::uint32_t code = (codes[bit / 8] >> (bit % 8)) & mask;
        o[i] = lo + static_cast<float>(code) * scale;
      }
    }
  });
}

template <class Convert>
std::uint64_t cast_encode(std::span<const float> x, unsigned threads, std::span<std::byte> out, Convert convert) {
  detail::parallel_ranges(x.size(), threads, [&](std::uint64_t i0, std::uint64_t i1, unsigned) noexcept {
    auto* o = reinterpret_cast<unsigned char*>(out.data());
    for (std::uint64_t i = i0; i < i1; ++i) {
      const std::uint16_t h = convert(x[i]);
      std::memcpy(o + 2 * i, &h, 2);
    }
  });
  return 2 * x.size();
}

template <class Convert>
void cast_decode(std::span<const std::byte> payload, float* out, std::uint64_t n, unsigned threads, Convert convert) {
  if (payload.size() != 2 * n) throw_corrupt_at(field::kPayloadSize, "cast payload has the wrong size");
  detail::parallel_ranges(n, threads, [&](std::uint64_t i0, std::uint64_t i1, unsigned) noexcept {
    for (std::uint64_t i = i0; i < i1; ++i) {
      std::uint16_t h;
      std::memcpy(&h, payload.data() + 2 * i, 2);
      out[i] = convert(h);
    }
  });
}

}  // namespace

// ---- fp16 on the CPU (fp16_cpu.hpp) ----------------------------------------------------------
namespace detail {

void fp16_encode_scalar(const float* x, std::uint64_t n, std::uint8_t* out) {
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint16_t h = float_to_fp16(x[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}
void fp16_decode_scalar(const std::uint8_t* in, std::uint64_t n, float* out) {
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    out[i] = fp16_to_float(h);
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// VCVTPS2PH with round-to-nearest-even (imm 0, not MXCSR) gives float_to_fp16's bits for every
// float, NaN payloads included (checked over all 2^32 floats on the benchmark machine).
// VCVTPH2PS quiets signalling NaNs (sets float bit 22), which fp16_to_float keeps signalling:
// the lanes whose half is a signalling NaN (exponent all ones, quiet bit 0x200 clear, payload
// non-zero) get bit 22 cleared again. AVX + F16C only (Ivy Bridge has no AVX2).
__attribute__((target("avx,f16c"))) void fp16_encode_f16c(const float* x, std::uint64_t n, std::uint8_t* out) {
  std::uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
  }
  fp16_encode_scalar(x + i, n - i, out + 2 * i);
}
__attribute__((target("avx,f16c"))) void fp16_decode_f16c(const std::uint8_t* in, std::uint64_t n, float* out) {
  const __m128i exponent_quiet = _mm_set1_epi16(0x7e00), signalling = _mm_set1_epi16(0x7c00);
  const __m128i payload = _mm_set1_epi16(0x01ff), zero = _mm_setzero_si128(), quiet32 = _mm_set1_epi32(0x00400000);
  std::uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    const __m128i snan = _mm_andnot_si128(_mm_cmpeq_epi16(_mm_and_si128(h, payload), zero),
                                          _mm_cmpeq_epi16(_mm_and_si128(h, exponent_quiet), signalling));
    const __m128i lo = _mm_and_si128(_mm_cvtepi16_epi32(snan), quiet32);
    const __m128i hi = _mm_and_si128(_mm_cvtepi16_epi32(_mm_unpackhi_epi64(snan, snan)), quiet32);
    const __m256 clear = _mm256_castsi256_ps(_mm256_insertf128_si256(_mm256_castsi128_si256(lo), hi, 1));
    _mm256_storeu_ps(out + i, _mm256_andnot_ps(clear, _mm256_cvtph_ps(h)));
  }
  fp16_decode_scalar(in + 2 * i, n - i, out + i);
}
// CPUID leaf 1, ECX bit 27 OSXSAVE, 28 AVX, 29 F16C, and XCR0 bits 1-2 (the OS saves the XMM and
// YMM state): Intel SDM vol. 1, 14.3 "Detection of Intel AVX instructions" and 14.4.1 (F16C).
// (Clang 14's __builtin_cpu_supports does not know "f16c".)
bool fp16_has_f16c() {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(1, &a, &b, &c, &d) == 0) return false;
    constexpr unsigned kNeeded = (1u << 27) | (1u << 28) | (1u << 29);
    if ((c & kNeeded) != kNeeded) return false;
    unsigned lo = 0, hi = 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6u) == 6u;
  }();
  return has;
}
void fp16_encode_cpu(const float* x, std::uint64_t n, std::uint8_t* out) {
  if (fp16_has_f16c()) {
    fp16_encode_f16c(x, n, out);
  } else {
    fp16_encode_scalar(x, n, out);
  }
}
void fp16_decode_cpu(const std::uint8_t* in, std::uint64_t n, float* out) {
  if (fp16_has_f16c()) {
    fp16_decode_f16c(in, n, out);
  } else {
    fp16_decode_scalar(in, n, out);
  }
}
#else
bool fp16_has_f16c() { return false; }
void fp16_encode_cpu(const float* x, std::uint64_t n, std::uint8_t* out) { fp16_encode_scalar(x, n, out); }
void fp16_decode_cpu(const std::uint8_t* in, std::uint64_t n, float* out) { fp16_decode_scalar(in, n, out); }
#endif

}  // namespace detail

namespace {

// Chunked payload state: the quantiser's state (szp; zeros writes 4 zero bytes) + chunk blocks (u32).
constexpr std::uint32_t kSzpStateBytes = LinearQuantizer::kStateBytes + 4;

}  // namespace

// The per-chunk workers, compiled twice (x86-64 baseline and AVX2) and picked at load time by
// the CPU: the stage loops are written to vectorise and AVX2 doubles their width. Both clones
// execute the same IEEE operations (no FMA: AVX2 does not enable it and -ffp-contract=off), so
// the streams are identical on every x86-64 machine. The workers must not throw (GCC 12 lets no
// exception through the ifunc dispatch; it calls std::terminate), so errors are returned.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define COMPTRAIN_CPU_CLONES __attribute__((target_clones("avx2", "default"), flatten))
#else
#define COMPTRAIN_CPU_CLONES
#endif

namespace detail {
// szp: quantise the whole chunk first (one long vectorised loop), then run the remaining
// stages block by block (see SzpBlockCodec::encode_quantized for why).
COMPTRAIN_CPU_CLONES std::uint64_t encode_chunk_szp(const SzpBlockCodec<>& codec, const float* x, std::uint64_t values,
                                                    std::uint8_t* out, float* side) {
  const auto blocks = static_cast<std::uint32_t>((values + kBlockValues - 1) / kBlockValues);
  alignas(64) std::int32_t q33[kChunkBlocks * (kBlockValues + 1)];
  alignas(64) std::uint32_t raw[kChunkBlocks * kBlockValues];
  for (std::uint32_t b = 0; b < blocks; ++b) {
    const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(kBlockValues, values - std::uint64_t{b} * kBlockValues));
    q33[b * (kBlockValues + 1)] = 0;
    codec.quantizer.quantize_block(x + std::uint64_t{b} * kBlockValues, n, q33 + b * (kBlockValues + 1) + 1, raw + b * kBlockValues);
  }
  return pack_chunk(values, out, side, [&](std::uint32_t b, std::uint32_t n, std::uint8_t* body, float* block_side) {
    return codec.encode_quantized(x + std::uint64_t{b} * kBlockValues, n, q33 + b * (kBlockValues + 1), raw + b * kBlockValues,
                                  body, block_side);
  });
}
COMPTRAIN_CPU_CLONES const char* decode_chunk_szp(const SzpBlockCodec<>& codec, const std::uint8_t* in, std::uint64_t size,
                                                  std::uint64_t values, float* out) {
  return decode_chunk(codec, in, size, values, out);
}
// szh: quantise the chunk block by block (the same stage call as szp), then predict and map to
// symbols over the whole chunk (pass 2), or only count the symbols of both predictor choices
// (pass 1: nothing is stored between the passes, the quantisation is simply redone).
namespace {
void szh_quantize_chunk(const LinearQuantizer& quantizer, const float* x, std::uint64_t values, std::int32_t* q, std::uint32_t* raw) {
  const auto blocks = static_cast<std::uint32_t>((values + kBlockValues - 1) / kBlockValues);
  for (std::uint32_t b = 0; b < blocks; ++b) {
    const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(kBlockValues, values - std::uint64_t{b} * kBlockValues));
    quantizer.quantize_block(x + std::uint64_t{b} * kBlockValues, n, q + b * kBlockValues, raw + b * kBlockValues);
  }
}
}  // namespace
COMPTRAIN_CPU_CLONES void szh_histogram_chunk(const LinearQuantizer& quantizer, const float* x, std::uint64_t values,
                                              std::uint64_t* plain, std::uint64_t* lorenzo) {
  alignas(64) std::int32_t q[kChunkValues];
  alignas(64) std::uint32_t raw[kChunkValues];
  alignas(64) std::uint16_t symbols[kChunkValues];
  szh_quantize_chunk(quantizer, x, values, q, raw);
  ChunkLorenzo1D::histograms(q, raw, static_cast<std::uint32_t>(values), symbols, plain, lorenzo);
}
COMPTRAIN_CPU_CLONES std::uint32_t szh_symbols_chunk(const LinearQuantizer& quantizer, const float* x, std::uint64_t values,
                                                     bool lorenzo, std::uint16_t* symbols, std::uint32_t* outliers) {
  alignas(64) std::int32_t q[kChunkValues];
  alignas(64) std::uint32_t raw[kChunkValues];
  szh_quantize_chunk(quantizer, x, values, q, raw);
  return ChunkLorenzo1D::forward(x, q, raw, static_cast<std::uint32_t>(values), lorenzo, symbols, outliers);
}
COMPTRAIN_CPU_CLONES std::uint64_t encode_chunk_zeros(const ZerosBlockCodec& codec, const float* x, std::uint64_t values,
                                                      std::uint8_t* out, float* side) {
  return encode_chunk(codec, x, values, out, side);
}
COMPTRAIN_CPU_CLONES const char* decode_chunk_zeros(const ZerosBlockCodec& codec, const std::uint8_t* in, std::uint64_t size,
                                                    std::uint64_t values, float* out) {
  return decode_chunk(codec, in, size, values, out);
}
}  // namespace detail

namespace {

// Stream offset of payload byte `offset` (error messages name stream offsets).
constexpr std::uint64_t at(std::uint64_t offset) { return kHeaderSize + offset; }

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::uint32_t payload_u32(std::span<const std::byte> payload, std::uint64_t offset) {
  std::uint32_t v;
  std::memcpy(&v, payload.data() + offset, 4);
  return v;
}

// ---- Checks of a codec's payload state against the header, shared by the rows below ----------

void check_state_size(std::span<const std::byte> payload, std::uint64_t bytes, std::string_view codec) {
  if (payload.size() < bytes) {
    throw_corrupt_at(at(0), "the " + std::to_string(payload.size()) + "-byte payload ends before the " + std::to_string(bytes) +
                                "-byte " + std::string(codec) + " state");
  }
}

// The codecs without a parameter write 0 (szp and szh: 0 once the positive mask is split off,
// split_positive_mask below).
void check_no_param(const Header& h) {
  if (h.codec_param != 0) {
    throw_corrupt_at(field::kCodecParam, "codec parameter " + std::to_string(h.codec_param) + " for codec " +
                                             std::string(codec_info(h.codec).name) + " (expected 0)");
  }
}

// The step at payload byte 0 must be the one the encoder derives from the header's absolute
// bound (make_linear_quantizer): a step that does not match would decode values whose error is
// not what the header promises (a forged step 0 decodes everything to 0).
void check_step(const Header& h, std::span<const std::byte> payload) {
  const float expected = make_linear_quantizer(h.eb_abs).quantum;
  const std::uint32_t bits = payload_u32(payload, 0);
  if (bits != hd::float_bits(expected)) {
    throw_corrupt_at(at(0), "quantisation step " + number(hd::bits_float(bits)) + " does not match the absolute error bound " +
                                number(h.eb_abs) + " at byte " + std::to_string(field::kEbAbs) + " (expected step " +
                                number(expected) + ")");
  }
}

void check_chunk_blocks(std::span<const std::byte> payload, std::uint64_t offset) {
  const std::uint32_t blocks = payload_u32(payload, offset);
  if (blocks != kChunkBlocks) {
    throw_corrupt_at(at(offset), "chunk size " + std::to_string(blocks) + " blocks (this build reads " + std::to_string(kChunkBlocks) + ")");
  }
}

void check_exact_payload(const Header& h, std::uint64_t expected, const char* what) {
  if (h.payload_size != expected) {
    throw_corrupt_at(field::kPayloadSize, "payload size " + std::to_string(h.payload_size) + " does not match the " +
                                              std::to_string(expected) + " bytes " + what + " for " + std::to_string(h.count) +
                                              " values (count at byte " + std::to_string(field::kCount) + ")");
  }
}

// ---- szp: state = f32 step | u32 kChunkBlocks, then the chunk table and chunks --------------
// (zeros has the same layout with a zero word for the step.)

std::uint64_t chunked_max_payload(std::uint64_t n, unsigned) {
  // state + chunk table + tags (padded to 4 per chunk) + every value verbatim
  return kSzpStateBytes + detail::chunked_bytes_max(n);
}
// szp's worst case: zeros' plus the positive mask it may carry.
std::uint64_t szp_max_payload(std::uint64_t n, unsigned bits) { return chunked_max_payload(n, bits) + PositiveMask::bytes(n); }
std::uint64_t chunked_min_payload(std::uint64_t n) {  // state, table, >= 1 tag byte per block
  return kSzpStateBytes + 8 * (chunk_count(n) + 1) + (n + kBlockValues - 1) / kBlockValues;
}

// The fixed state of the chunked codecs: the quantiser's (szp; zeros writes 4 zero bytes) and the chunk size.
void write_chunked_state(const LinearQuantizer* quantizer, std::span<std::byte> out) {
  auto* p = reinterpret_cast<std::uint8_t*>(out.data());
  if (quantizer != nullptr) {
    quantizer->save(p);
  } else {
    hd::store_u32(p, 0);
  }
  hd::store_u32(p + LinearQuantizer::kStateBytes, kChunkBlocks);
}

std::uint64_t szp_encode(std::span<const float> x, const Shape&, const CompressOptions& o, Header& h, std::span<std::byte> out) {
  SzpBlockCodec<> codec{make_linear_quantizer(h.eb_abs)};
  write_chunked_state(&codec.quantizer, out);
  return kSzpStateBytes + detail::encode_chunked(codec, x.data(), x.size(), o.threads, out.subspan(kSzpStateBytes));
}
void szp_check(const Header& h, std::span<const std::byte> payload) {
  check_no_param(h);
  check_state_size(payload, kSzpStateBytes, "szp");
  check_step(h, payload);
  check_chunk_blocks(payload, LinearQuantizer::kStateBytes);
}
void szp_decode(const Header& h, std::span<const std::byte> payload, std::span<float> out, unsigned threads) {
  SzpBlockCodec<> codec;
  codec.quantizer.load(reinterpret_cast<const std::uint8_t*>(payload.data()));  // checked by szp_check
  detail::decode_chunked(codec, payload.subspan(kSzpStateBytes), out.data(), h.count, threads, at(kSzpStateBytes));
}

// ---- zeros ---------------------------------------------------------------------------------

std::uint64_t zeros_encode(std::span<const float> x, const Shape&, const CompressOptions& o, Header&, std::span<std::byte> out) {
  write_chunked_state(nullptr, out);
  return kSzpStateBytes + detail::encode_chunked(ZerosBlockCodec{}, x.data(), x.size(), o.threads, out.subspan(kSzpStateBytes));
}
void zeros_check(const Header& h, std::span<const std::byte> payload) {
  check_no_param(h);
  check_state_size(payload, kSzpStateBytes, "zeros");
  if (payload_u32(payload, 0) != 0) throw_corrupt_at(at(0), "zeros has no quantiser: its state word is not 0");
  check_chunk_blocks(payload, 4);
}
void zeros_decode(const Header& h, std::span<const std::byte> payload, std::span<float> out, unsigned threads) {
  detail::decode_chunked(ZerosBlockCodec{}, payload.subspan(kSzpStateBytes), out.data(), h.count, threads, at(kSzpStateBytes));
}

// ---- szh: state = f32 step | u32 kChunkBlocks | szh_codec.hpp's payload ----------------------

std::uint64_t szh_max(std::uint64_t n, unsigned) { return detail::szh_max_payload(n) + PositiveMask::bytes(n); }
std::uint64_t szh_encode_row(std::span<const float> x, const Shape&, const CompressOptions& o, Header& h, std::span<std::byte> out) {
  const LinearQuantizer quantizer = make_linear_quantizer(h.eb_abs);
  write_chunked_state(&quantizer, out);
  return kSzpStateBytes + detail::szh_encode(quantizer, x.data(), x.size(), o.threads, out.subspan(kSzpStateBytes));
}
void szh_check(const Header& h, std::span<const std::byte> payload) {
  check_no_param(h);
  check_state_size(payload, detail::kSzhStateBytes, "szh");
  check_step(h, payload);
  check_chunk_blocks(payload, LinearQuantizer::kStateBytes);
}
void szh_decode_row(const Header& h, std::span<const std::byte> payload, std::span<float> out, unsigned threads) {
  LinearQuantizer quantizer;
  quantizer.load(reinterpret_cast<const std::uint8_t*>(payload.data()));  // checked by szh_check
  constexpr std::uint64_t kRest = LinearQuantizer::kStateBytes + 4;
  detail::szh_decode(quantizer, payload.subspan(kRest), out.data(), h.count, threads, at(kRest));
}

// ---- quant: codec_param = bits; fixed size per group ----------------------------------------

std::uint64_t quant_payload(std::uint64_t n, unsigned bits) {
  const std::uint64_t groups = (n + kQuantGroup - 1) / kQuantGroup;
  return groups == 0 ? 0 : (groups - 1) * quant_group_bytes(kQuantGroup, bits) + quant_group_bytes(n - (groups - 1) * kQuantGroup, bits);
}
std::uint64_t quant_max(std::uint64_t n, unsigned bits) {
  check_quant_bits(bits);
  return ((n + kQuantGroup - 1) / kQuantGroup) * quant_group_bytes(kQuantGroup, bits);
}
std::uint64_t quant_min(std::uint64_t n) { return 8 * ((n + kQuantGroup - 1) / kQuantGroup) + n / 8; }  // 1 bit per value
std::uint64_t quant_encode_row(std::span<const float> x, const Shape&, const CompressOptions& o, Header& h, std::span<std::byte> out) {
  check_quant_bits(o.quant_bits);
  h.codec_param = o.quant_bits;
  return quant_encode(x, o.quant_bits, o.threads, out);
}
void quant_check(const Header& h, std::span<const std::byte>) {
  if (h.codec_param != 1 && h.codec_param != 2 && h.codec_param != 4 && h.codec_param != 8) {
    throw_corrupt_at(field::kCodecParam, "quant bit count " + std::to_string(h.codec_param) + " (expected 1, 2, 4 or 8)");
  }
  check_exact_payload(h, quant_payload(h.count, h.codec_param), ("that quant with " + std::to_string(h.codec_param) + " bits needs").c_str());
}
void quant_decode_row(const Header& h, std::span<const std::byte> payload, std::span<float> out, unsigned threads) {
  quant_decode(payload, h.codec_param, out.data(), h.count, threads);
}

// ---- fp16, bf16: 2 bytes per value -----------------------------------------------------------

std::uint64_t cast_max(std::uint64_t n, unsigned) { return 2 * n; }
std::uint64_t cast_min(std::uint64_t n) { return 2 * n; }
void cast_check(const Header& h, std::span<const std::byte>) {
  check_no_param(h);
  check_exact_payload(h, 2 * h.count, "that 2-byte casts need");
}
std::uint64_t fp16_encode(std::span<const float> x, const Shape&, const CompressOptions& o, Header&, std::span<std::byte> out) {
  detail::parallel_ranges(x.size(), o.threads, [&](std::uint64_t i0, std::uint64_t i1, unsigned) noexcept {
    detail::fp16_encode_cpu(x.data() + i0, i1 - i0, reinterpret_cast<std::uint8_t*>(out.data()) + 2 * i0);
  });
  return 2 * x.size();
}
void fp16_decode(const Header& h, std::span<const std::byte> payload, std::span<float> out, unsigned threads) {
  if (payload.size() != 2 * h.count) throw_corrupt_at(field::kPayloadSize, "cast payload has the wrong size");
  detail::parallel_ranges(h.count, threads, [&](std::uint64_t i0, std::uint64_t i1, unsigned) noexcept {
    detail::fp16_decode_cpu(reinterpret_cast<const std::uint8_t*>(payload.data()) + 2 * i0, i1 - i0, out.data() + i0);
  });
}
std::uint64_t bf16_encode(std::span<const float> x, const Shape&, const CompressOptions& o, Header&, std::span<std::byte> out) {
  return cast_encode(x, o.threads, out, float_to_bf16);
}
void bf16_decode(const Header& h, std::span<const std::byte> payload, std::span<float> out, unsigned threads) {
  cast_decode(payload, out.data(), h.count, threads, bf16_to_float);
}

// ---- zfp: libzfp's bit stream, no state of ours ----------------------------------------------

std::uint64_t zfp_max(std::uint64_t n, unsigned) { return detail::zfp_max_payload(Shape::flat(n), 0.0); }
std::uint64_t zfp_min(std::uint64_t n) { return n / 2048; }  // >= 1 bit per 4^4-value block
std::uint64_t zfp_encode(std::span<const float> x, const Shape& shape, const CompressOptions&, Header& h, std::span<std::byte> out) {
  return detail::zfp_compress(x, shape, h.eb_abs, out);
}
void zfp_check(const Header& h, std::span<const std::byte>) { check_no_param(h); }
void zfp_decode(const Header& h, std::span<const std::byte> payload, std::span<float> out, unsigned) {
  Shape s;
  s.rank = h.rank;
  s.dims = h.dims;
  detail::zfp_decompress(payload, s, h.eb_abs, out);
}

// ---- The codec table: one row per codec (after SZ3, where a compressor is one composition
// of its modules). Adding a codec = writing these functions and adding its row; nothing else
// in this file dispatches on CodecId.
struct CodecRow {
  CodecInfo info;
  // Largest payload for n values (compress never exceeds it); throws InputError for a bad
  // parameter.
  std::uint64_t (*max_payload)(std::uint64_t n, unsigned quant_bits);
  // Smallest payload that can hold n values: refuses a forged count before allocating.
  std::uint64_t (*min_payload)(std::uint64_t n);
  // Writes the payload at `out` (max_payload bytes or more) and returns its size; may set header
  // fields of its own (codec_param).
  std::uint64_t (*encode)(std::span<const float> data, const Shape& shape, const CompressOptions& options, Header& h,
                          std::span<std::byte> out);
  // Checks the header's codec fields and the payload's state against each other (throws
  // StreamError with the byte offset) before anything is allocated or decoded.
  void (*check)(const Header& h, std::span<const std::byte> payload);
  // Decodes a checked payload into out (h.count values); validates the rest of the structure.
  void (*decode)(const Header& h, std::span<const std::byte> payload, std::span<float> out, unsigned threads);
};

constexpr CodecRow kRows[] = {
    {{CodecId::szp, "szp", true, true,
      "prequantisation with verify-and-fallback, per-block Lorenzo, fixed-length bit-planes (cuSZp-like); strict bound"},
     szp_max_payload, chunked_min_payload, szp_encode, szp_check, szp_decode},
    {{CodecId::szh, "szh", true, true,
      "prequantisation with verify-and-fallback, 1-D Lorenzo on the codes, canonical Huffman (cuSZ-like); strict bound"},
     szh_max, detail::szh_min_payload, szh_encode_row, szh_check, szh_decode_row},
    {{CodecId::zeros, "zeros", false, true, "lossless zero elimination: per-32 bitmap + packed non-zero values"},
     chunked_max_payload, chunked_min_payload, zeros_encode, zeros_check, zeros_decode},
    {{CodecId::quant, "quant", false, false,
      "per-group k-bit min/max quantisation (ActNN-style, k = 1, 2, 4, 8); NOT error-bounded, NaN/Inf not kept"},
     quant_max, quant_min, quant_encode_row, quant_check, quant_decode_row},
    {{CodecId::fp16, "fp16", false, false, "cast to IEEE half (round to nearest even); NOT error-bounded"},
     cast_max, cast_min, fp16_encode, cast_check, fp16_decode},
    {{CodecId::bf16, "bf16", false, false, "cast to bfloat16 (round to nearest even); NOT error-bounded"},
     cast_max, cast_min, bf16_encode, cast_check, bf16_decode},
    {{CodecId::zfp, "zfp", true, false,
      "libzfp fixed-accuracy mode; the tolerance is not a strict bound (violations are reported); no NaN/Inf"},
     zfp_max, zfp_min, zfp_encode, zfp_check, zfp_decode},
};

// The public registry (codecs()) is the info column of the table.
constexpr auto kCodecs = [] {
  std::array<CodecInfo, std::size(kRows)> infos{};
  for (std::size_t i = 0; i < std::size(kRows); ++i) infos[i] = kRows[i].info;
  return infos;
}();

const CodecRow& row(CodecId id) {
  for (const auto& r : kRows) {
    if (r.info.id == id) return r;
  }
  throw InputError("unknown codec id " + std::to_string(static_cast<int>(id)));
}

}  // namespace

std::span<const CodecInfo> codecs() { return kCodecs; }

const CodecInfo* codec_info_or_null(CodecId id) {
  for (const auto& c : kCodecs) {
    if (c.id == id) return &c;
  }
  return nullptr;
}

const CodecInfo& codec_info(CodecId id) { return row(id).info; }

CodecId codec_from_name(std::string_view name) {
  std::string known;
  for (const auto& c : kCodecs) {
    if (c.name == name) return c.id;
    known += known.empty() ? "" : ", ";
    known += c.name;
  }
  throw InputError("unknown codec '" + std::string(name) + "' (known: " + known + ")");
}

std::optional<std::uint64_t> element_count(std::span<const std::uint64_t> dims) {
  // The zero first: a dimension of 0 empties the array whatever the others say.
  for (const std::uint64_t d : dims) {
    if (d == 0) return 0;
  }
  std::uint64_t n = 1;
  for (const std::uint64_t d : dims) {
    if (n > kMaxElements / d) return std::nullopt;  // n * d > kMaxElements, without forming it
    n *= d;
  }
  return n;
}

std::uint64_t Shape::count() const {
  const std::size_t r = std::min<std::size_t>(rank, kMaxRank);
  const std::optional<std::uint64_t> n = element_count(std::span(dims).first(r));
  if (!n) {
    std::string text;
    for (std::size_t i = 0; i < r; ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
    throw InputError("shape (" + text + ") has more than " + std::to_string(kMaxElements) + " elements (the supported maximum)");
  }
  return *n;
}

void check_error_bound(double eb) {
  if (!std::isfinite(eb) || eb < 0.0) {
    throw InputError("error bound must be a finite number >= 0 (got " + number(eb) + ")");
  }
}

void check_threads(unsigned threads) {
  if (threads > kMaxThreads) {
    throw InputError("threads " + std::to_string(threads) + " is more than the kernels' maximum " + std::to_string(kMaxThreads) +
                     "; expected 0 (all cores, up to " + std::to_string(kMaxThreads) + ") to " + std::to_string(kMaxThreads));
  }
}

COMPTRAIN_CPU_CLONES double absolute_bound(std::span<const float> data, double eb, BoundMode mode) {
  if (mode != BoundMode::rel) return mode == BoundMode::abs ? eb : 0.0;
  // Min/max over finite values on integer keys that order like the floats (sign-magnitude to
  // two's complement): integer min/max vectorise, float min/max do not under IEEE NaN rules.
  std::int32_t lo = std::numeric_limits<std::int32_t>::max(), hi = std::numeric_limits<std::int32_t>::min();
  const float* p = data.data();
  for (std::size_t i = 0; i < data.size(); ++i) {
    std::uint32_t u;
    std::memcpy(&u, p + i, 4);
    const std::uint32_t key = u ^ ((0u - (u >> 31)) & 0x7fffffffu);
    const std::uint32_t finite = 0u - static_cast<std::uint32_t>((u & 0x7f800000u) != 0x7f800000u);
    const auto key_lo = static_cast<std::int32_t>((key & finite) | (0x7fffffffu & ~finite));
    const auto key_hi = static_cast<std::int32_t>((key & finite) | (0x80000000u & ~finite));
    lo = std::min(lo, key_lo);
    hi = std::max(hi, key_hi);
  }
  if (lo > hi) return 0.0;
  const auto value = [](std::int32_t key) {
    const auto k = static_cast<std::uint32_t>(key);
    const std::uint32_t u = k ^ ((0u - (k >> 31)) & 0x7fffffffu);
    float f;
    std::memcpy(&f, &u, 4);
    return static_cast<double>(f);
  };
  return eb * (value(hi) - value(lo));
}

std::uint64_t max_compressed_size(CodecId codec, std::uint64_t n, unsigned quant_bits) {
  if (n > kMaxElements) {
    throw InputError("count " + std::to_string(n) + " is more than the kernels' maximum " + std::to_string(kMaxElements) +
                     " elements (2^40)");
  }
  return kHeaderSize + row(codec).max_payload(n, quant_bits);
}

namespace {

bool supports_positive_mask(CodecId codec) { return codec == CodecId::szp || codec == CodecId::szh; }

// The positive mask of data (PositiveMask::bytes(n) bytes) at out.
void write_positive_mask(std::span<const float> data, unsigned threads, std::span<std::byte> out) {
  const std::uint64_t n = data.size(), bytes = PositiveMask::bytes(n);
  auto* o = reinterpret_cast<std::uint8_t*>(out.data());
  detail::parallel_ranges(bytes, threads, [&](std::uint64_t k0, std::uint64_t k1, unsigned) noexcept {
    for (std::uint64_t k = k0; k < k1; ++k) {
      o[k] = PositiveMask::pack(data.data() + 8 * k, static_cast<std::uint32_t>(std::min<std::uint64_t>(8, n - 8 * k)));
    }
  });
}

// A stream's payload seen as its codec's payload and the positive mask after it (empty when the
// header has none): `codec` is the header the codec's row checks and decodes (no parameter, the
// codec's payload size). Throws StreamError when the payload cannot hold the mask.
struct MaskedPayload {
  Header codec;
  std::span<const std::byte> codec_payload;
  std::span<const std::byte> mask;
};
MaskedPayload split_positive_mask(const Header& h, std::span<const std::byte> payload) {
  MaskedPayload m{h, payload, {}};
  if (!has_positive_mask(h)) return m;
  const std::uint64_t bytes = PositiveMask::bytes(h.count);
  if (h.payload_size < bytes) {
    throw_corrupt_at(field::kPayloadSize, "payload size " + std::to_string(h.payload_size) + " cannot hold the " +
                                              std::to_string(bytes) + "-byte positive mask of " + std::to_string(h.count) +
                                              " values (codec parameter at byte " + std::to_string(field::kCodecParam) + ")");
  }
  m.codec.codec_param = 0;
  m.codec.payload_size = h.payload_size - bytes;
  m.codec_payload = payload.first(m.codec.payload_size);
  m.mask = payload.subspan(m.codec.payload_size, bytes);
  return m;
}

// The unused bits of the mask's last byte must be 0 (the encoder writes 0 there).
void check_positive_mask(const MaskedPayload& m) {
  if (m.mask.empty()) return;
  const auto last = std::to_integer<std::uint8_t>(m.mask.back());
  const auto used = static_cast<std::uint32_t>(m.codec.count - 8 * (m.mask.size() - 1));
  if (!PositiveMask::padding_clear(last, used)) {
    throw_corrupt_at(at(m.codec.payload_size + m.mask.size() - 1), "the positive mask's last byte has bits set after the last value");
  }
}

// Applies a checked mask to the decoded values.
void apply_positive_mask(std::span<const std::byte> mask, std::span<float> out, unsigned threads) {
  const std::uint64_t n = out.size();
  const auto* bits = reinterpret_cast<const std::uint8_t*>(mask.data());
  detail::parallel_ranges(mask.size(), threads, [&](std::uint64_t k0, std::uint64_t k1, unsigned) noexcept {
    for (std::uint64_t k = k0; k < k1; ++k) {
      PositiveMask::apply(bits[k], static_cast<std::uint32_t>(std::min<std::uint64_t>(8, n - 8 * k)), out.data() + 8 * k);
    }
  });
}

// Checks the arguments and fills the header's shape, codec and bound fields (the range pass).
Header make_header(std::span<const float> data, const Shape& shape, const CompressOptions& options) {
  const CodecInfo& info = row(options.codec).info;
  if (shape.rank < 1 || shape.rank > kMaxRank) throw InputError("shape rank must be 1..4");
  if (shape.count() != data.size()) {
    throw InputError("shape has " + std::to_string(shape.count()) + " elements but the data has " + std::to_string(data.size()));
  }
  if (data.size() > kMaxElements) throw InputError("array too large");
  check_threads(options.threads);
  Header h;
  h.codec = options.codec;
  h.rank = shape.rank;
  for (std::size_t i = 0; i < kMaxRank; ++i) h.dims[i] = i < shape.rank ? shape.dims[i] : 1;
  h.count = data.size();
  if (info.error_bounded) {
    check_error_bound(options.eb);
    if (options.mode == BoundMode::none) throw InputError("codec " + std::string(info.name) + " needs an abs or rel bound");
    h.mode = options.mode;
    h.eb_given = options.eb;
    h.eb_abs = absolute_bound(data, options.eb, options.mode);
    if (!std::isfinite(h.eb_abs)) throw InputError("relative error bound times the value range overflows");
  } else {
    h.mode = BoundMode::none;
  }
  if (options.positive_mask && !supports_positive_mask(options.codec)) {
    throw InputError("positive_mask applies to the strict codecs szp and szh only (codec " + std::string(info.name) + ")");
  }
  return h;
}

// Encodes after make_header into out (room for the codec's worst case); returns the stream size.
std::uint64_t encode_stream(std::span<const float> data, const Shape& shape, const CompressOptions& options, Header& h,
                            std::span<std::byte> out) {
  h.payload_size = row(options.codec).encode(data, shape, options, h, out.subspan(kHeaderSize));
  if (options.positive_mask) {
    write_positive_mask(data, options.threads, out.subspan(kHeaderSize + h.payload_size));
    h.payload_size += PositiveMask::bytes(data.size());
    h.codec_param = kPositiveMaskParam;
  }
  const auto stream = out.first(kHeaderSize + h.payload_size);
  write_header(h, stream.data());
  h.checksum = stream_checksum(stream);
  write_header(h, stream.data());
  return stream.size();
}

}  // namespace

std::size_t compress_into(std::span<const float> data, const Shape& shape, const CompressOptions& options, std::span<std::byte> out) {
  const std::uint64_t need = max_compressed_size(options.codec, data.size(), options.quant_bits);
  if (out.size() < need) {
    throw InputError("compress_into: the output buffer has " + std::to_string(out.size()) + " bytes; " +
                     std::string(codec_info(options.codec).name) + " needs max_compressed_size = " + std::to_string(need) +
                     " for " + std::to_string(data.size()) + " values");
  }
  Header h = make_header(data, shape, options);
  return encode_stream(data, shape, options, h, out);
}

std::vector<std::byte> compress(std::span<const float> data, const Shape& shape, const CompressOptions& options) {
  Header h = make_header(data, shape, options);
  std::uint64_t room = max_compressed_size(options.codec, data.size(), options.quant_bits);
  // zfp's worst case depends on the shape (partial 4^d blocks), which max_compressed_size does
  // not take; give it its own.
  if (options.codec == CodecId::zfp) room = std::max(room, kHeaderSize + detail::zfp_max_payload(shape, h.eb_abs));
  // Uninitialised on purpose: the worst-case space that is never written costs no memory traffic.
  std::unique_ptr<std::byte[]> buffer(new std::byte[room]);
  const std::uint64_t size = encode_stream(data, shape, options, h, {buffer.get(), room});
  return std::vector<std::byte>(buffer.get(), buffer.get() + size);
}

bool has_positive_mask(const Header& h) { return supports_positive_mask(h.codec) && h.codec_param == kPositiveMaskParam; }

Header inspect(std::span<const std::byte> stream) {
  const Header h = read_header(stream);
  const CodecRow& r = row(h.codec);
  const MaskedPayload m = split_positive_mask(h, stream.subspan(kHeaderSize));
  // Before allocating the output: a forged element count must not make us allocate terabytes
  // for a payload that cannot possibly hold it.
  const std::uint64_t min_payload = r.min_payload(h.count);
  if (m.codec.payload_size < min_payload) {
    throw_corrupt_at(field::kCount, "element count " + std::to_string(h.count) + " needs a " + std::string(r.info.name) +
                                        " payload of at least " + std::to_string(min_payload) + " bytes" +
                                        (m.mask.empty() ? "" : " before its positive mask") + ", the header says " +
                                        std::to_string(h.payload_size) + " (byte " + std::to_string(field::kPayloadSize) + ")");
  }
  r.check(m.codec, m.codec_payload);
  check_positive_mask(m);
  return h;
}

namespace {
// Decodes a stream that inspect() accepted.
void decode_checked(const Header& h, std::span<const std::byte> stream, std::span<float> out, unsigned threads) {
  const MaskedPayload m = split_positive_mask(h, stream.subspan(kHeaderSize));
  row(h.codec).decode(m.codec, m.codec_payload, out, threads);
  apply_positive_mask(m.mask, out, threads);
}
}  // namespace

std::vector<float> decompress(std::span<const std::byte> stream, unsigned threads) {
  check_threads(threads);
  const Header h = inspect(stream);
  std::vector<float> out(h.count);
  decode_checked(h, stream, out, threads);
  return out;
}

void decompress_into(std::span<const std::byte> stream, std::span<float> out, unsigned threads) {
  check_threads(threads);
  const Header h = inspect(stream);
  if (out.size() != h.count) throw InputError("output buffer size does not match the stream's element count");
  decode_checked(h, stream, out, threads);
}

ErrorStats compare(std::span<const float> original, std::span<const float> reconstructed, double eb_abs) {
  if (original.size() != reconstructed.size()) throw InputError("compare: sizes differ");
  ErrorStats s;
  s.count = original.size();
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  double sse = 0.0;
  bool sse_infinite = false;
  for (std::size_t i = 0; i < original.size(); ++i) {
    const float x = original[i], y = reconstructed[i];
    const bool same_bits = std::memcmp(&x, &y, 4) == 0;
    if (std::isfinite(x)) {
      lo = std::min(lo, x);
      hi = std::max(hi, x);
      if (std::isfinite(y)) {
        const double e = std::fabs(static_cast<double>(x) - static_cast<double>(y));
        s.max_abs_error = std::max(s.max_abs_error, e);
        sse += e * e;
      } else {
        s.max_abs_error = std::numeric_limits<double>::infinity();
        sse_infinite = true;
      }
    } else if (!same_bits) {
      ++s.nonfinite_mismatches;
    }
    if (x == 0.0f && !same_bits) ++s.zero_mismatches;
    const bool ok = same_bits || (std::isfinite(x) && std::isfinite(y) &&
                                  std::fabs(static_cast<double>(x) - static_cast<double>(y)) <= eb_abs);
    if (!ok) ++s.violations;
  }
  s.value_range = lo <= hi ? static_cast<double>(hi) - lo : 0.0;
  const double mse = sse / static_cast<double>(std::max<std::size_t>(original.size(), 1));
  if (sse_infinite) {
    s.psnr_db = -std::numeric_limits<double>::infinity();
  } else if (mse == 0.0) {
    s.psnr_db = std::numeric_limits<double>::infinity();
  } else {
    s.psnr_db = 20.0 * std::log10(s.value_range) - 10.0 * std::log10(mse);
  }
  return s;
}

}  // namespace comptrain::kernels

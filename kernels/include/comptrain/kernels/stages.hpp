#pragma once
// The compressor stages, each with one narrow interface, written once for host and device.
//
// Like SZ3's modules (compressor/SZGenericCompressor.hpp composes Decomposition, Predictor,
// Quantizer, Encoder, Lossless), a codec here is a composition of
//   quantiser  float  -> int32 code (or "unpredictable": the value goes to a raw side channel),
//   predictor  codes  -> residuals inside one block of 32 values,
//   encoder    residuals -> words (tag byte + body words).
// The quantiser owns the strict error check, so every predictor/encoder inherits the guarantee.
// Each stage that has state serialises it itself (LinearQuantizer::save/load; the per-block
// predictor and encoder state is the tag byte), and the stream is
// the concatenation of those states followed by the chunks.

#include <cstdint>

#include "comptrain/kernels/hd.hpp"

namespace comptrain::kernels {

// Values per block. 32 = one warp lane per value and one 32-bit word per bit-plane, as in cuSZp
// (SC'23) and FZ-GPU (HPDC'23).
inline constexpr std::uint32_t kBlockValues = 32;
inline constexpr std::uint32_t kInvalidCount = 0xFFFFFFFFu;

// ---------------------------------------------------------------------------------------------
// Quantisation stage: linear quantiser with verify-and-fallback (PFPL IPDPS'25, SZ3 PR #91).
//
// q = rint(x / (2 eb)) computed in float; the reconstruction r is recomputed with the exact
// expression the decoder uses and checked in float against eb_f, the largest float <= eb:
//   accept  iff  |fl(x - r)| < eb_f  or  x == r.
// Rounding is monotonic and eb_f is a float, so a true error >= eb_f always rounds to >= eb_f;
// hence fl(|x - r|) < eb_f proves |x - r| < eb_f <= eb whatever the rounding of the subtraction
// (no exactness argument needed, and the loop stays in float so it vectorises; the double
// version does not on baseline x86-64). `x == r` keeps exact values (zeros at eb = 0) lossy-free.
// NaN fails both tests and falls back; +-Inf gives an out-of-range code and falls back too.
// Codes are capped at |q| < 2^22 (PFPL) so they stay exact integers in float.
// -0.0 is sent raw so that the sign bit of a zero survives (q = 0 decodes to +0.0 exactly).
struct LinearQuantizer {
  double eb = 0.0;          // absolute bound (from the stream header)
  float eb_f = 0.0f;        // encoder only: largest float <= eb
  float quantum = 0.0f;     // reconstruction step, float(2 eb); serialised
  float inv_quantum = 0.0f; // encoder only: 1 / quantum (0 when quantum is 0)

  static constexpr float kMaxCode = 4194304.0f;  // 2^22, PFPL's bin cap (far below 2^24)

  // Quantises a whole block: q[i] = code, raw[i] = 1 where the value must be stored raw (then
  // q[i] = 0); values beyond n get code 0, raw 0. Branch-free with local copies of the state so
  // the host compiler vectorises it.
  COMPTRAIN_HD void quantize_block(const float* x, std::uint32_t n, std::int32_t* q, std::uint32_t* raw) const {
    const float bound = eb_f, step = quantum, inv = inv_quantum;
    if (n == kBlockValues) {
      for (std::uint32_t i = 0; i < kBlockValues; ++i) quantize_one(x[i], bound, step, inv, q[i], raw[i]);
    } else {
      for (std::uint32_t i = 0; i < n; ++i) quantize_one(x[i], bound, step, inv, q[i], raw[i]);
      for (std::uint32_t i = n; i < kBlockValues; ++i) {
        q[i] = 0;
        raw[i] = 0;
      }
    }
  }

  // Comparisons become all-ones/all-zero integer masks combined with & and |: with GCC's
  // default -ftrapping-math, `cond ? a : b` on float compares stays a branch and blocks
  // vectorisation.
  COMPTRAIN_HD static void quantize_one(float x, float bound, float step, float inv, std::int32_t& q, std::uint32_t& raw) {
    const float v = x * inv;
    const std::uint32_t in_range = mask(hd::abs_f(v) < kMaxCode);  // 0 for NaN
    const float t = hd::bits_float(hd::float_bits(hd::round_even_small(v)) & in_range);  // +0.0 when out of range
    const auto code = static_cast<std::int32_t>(t);
    const float r = static_cast<float>(code) * step;  // == recover(code)
    const std::uint32_t within = mask(hd::abs_f(x - r) < bound) | mask(x == r);
    const std::uint32_t not_negative_zero = mask(hd::float_bits(x) != 0x80000000u);
    const std::uint32_t ok = in_range & within & not_negative_zero;
    q = static_cast<std::int32_t>(static_cast<std::uint32_t>(code) & ok);
    raw = ~ok & 1u;
  }

  COMPTRAIN_HD static std::uint32_t mask(bool b) { return 0u - static_cast<std::uint32_t>(b); }

  COMPTRAIN_HD float recover(std::int32_t q) const { return static_cast<float>(q) * quantum; }

  // Serialised state: the step (f32). eb itself lives in the stream header.
  static constexpr std::uint32_t kStateBytes = 4;
  void save(std::uint8_t* out) const { hd::store_u32(out, hd::float_bits(quantum)); }
  // Returns false for a step no encoder writes (negative, NaN, Inf).
  bool load(const std::uint8_t* in) {
    quantum = hd::bits_float(hd::load_u32(in));
    return quantum >= 0.0f && quantum <= 3.40282346638528859811704183484516925e38f;
  }
};

// Host-side construction from the absolute bound; the step is clamped to FLT_MAX so a huge
// bound still gives a finite step (codes 0 and +-1 then cover every finite float).
inline LinearQuantizer make_linear_quantizer(double eb_abs) {
  constexpr double kFloatMax = 3.40282346638528859811704183484516925e38;
  LinearQuantizer q;
  q.eb = eb_abs;
  float f = static_cast<float>(eb_abs < kFloatMax ? eb_abs : kFloatMax);
  if (static_cast<double>(f) > eb_abs) f = hd::next_down(f);
  q.eb_f = f;
  const double step = 2.0 * eb_abs < kFloatMax ? 2.0 * eb_abs : kFloatMax;
  q.quantum = static_cast<float>(step);
  q.inv_quantum = q.quantum > 0.0f ? 1.0f / q.quantum : 0.0f;
  return q;
}

// ---------------------------------------------------------------------------------------------
// Prediction stage: 1-D Lorenzo on integer codes inside a block ("dual quantisation", cuSZ
// PACT'20), chosen per block against no prediction, whichever needs fewer bits. Post-ReLU data
// is often white noise, where a first difference doubles the range; smooth data wants Lorenzo.
// Unpredictable (raw) positions carry code 0, like any other value, so both directions are
// plain loops (the forward one vectorises); a raw value only costs bits in its own block.
struct BlockLorenzo1D {
  // q33[0] = 0 and the block's codes at q33[1..32] (zero beyond n; LinearQuantizer::
  // quantize_block guarantees it). Writes residuals d[0..32) (zero beyond n) and returns true
  // when Lorenzo was chosen. The leading zero makes every delta the same expression, so the loop
  // vectorises without a peeled first element.
  COMPTRAIN_HD static bool forward(const std::int32_t* q33, std::uint32_t n, std::int32_t* d) {
    std::int32_t delta[kBlockValues];
    std::uint32_t or_plain = 0, or_delta = 0;
    for (std::uint32_t i = 0; i < kBlockValues; ++i) {
      const std::int32_t cur = q33[i + 1];
      delta[i] = cur - q33[i];
      or_plain |= static_cast<std::uint32_t>(cur < 0 ? -cur : cur);
      or_delta |= static_cast<std::uint32_t>(delta[i] < 0 ? -delta[i] : delta[i]);
    }
    if (n < kBlockValues) {  // drop the step from the last value down to the zero padding
      delta[n] = 0;
      or_delta = 0;
      for (std::uint32_t i = 0; i < n; ++i) or_delta |= static_cast<std::uint32_t>(delta[i] < 0 ? -delta[i] : delta[i]);
    }
    const bool lorenzo = hd::bit_width32(or_delta) < hd::bit_width32(or_plain);
    for (std::uint32_t i = 0; i < kBlockValues; ++i) d[i] = lorenzo ? delta[i] : q33[i + 1];
    return lorenzo;
  }

  // Inverse: a prefix sum. Wrapping unsigned arithmetic: a forged stream must not cause signed
  // overflow (undefined behaviour); it only yields wrong values.
  COMPTRAIN_HD static void inverse(bool lorenzo, std::int32_t* d) {
    if (!lorenzo) return;
    std::uint32_t acc = 0;
    for (std::uint32_t i = 0; i < kBlockValues; ++i) {
      acc += static_cast<std::uint32_t>(d[i]);
      d[i] = static_cast<std::int32_t>(acc);
    }
  }
};

// ---------------------------------------------------------------------------------------------
// Encoding stage: fixed-length bit-plane coding of one block (cuSZp SC'23): `width` bit-planes
// of the magnitudes, plus a sign word and a raw-position word when needed. One 32x32 bit
// transpose produces all of them: value i's word carries its sign in bit 31, its raw flag in
// bit 30 and its magnitude (< 2^23) in the low bits, so after transpose32 row 0 is the sign
// word, row 1 the raw word and row 31-b bit-plane b (bit 31-i of each row belongs to value i).
// Body words in order: [signs] [raw] plane 0 .. plane width-1.
struct BitplaneEncoder {
  static constexpr std::uint32_t kMaxWidth = 23;  // |residual| < 2^23 when |code| < 2^22

  struct Shape {
    std::uint32_t width;
    bool has_signs;
    bool has_raw;
  };

  COMPTRAIN_HD static std::uint32_t words(Shape s) { return (s.has_signs ? 1u : 0u) + (s.has_raw ? 1u : 0u) + s.width; }

  // m[i] = sign << 31 | raw << 30 | magnitude; returns the block's shape.
  COMPTRAIN_HD static Shape pack(const std::int32_t* d, const std::uint32_t* raw, std::uint32_t* m) {
    std::uint32_t ored = 0;  // one reduction gives the width and both flags
    for (std::uint32_t i = 0; i < kBlockValues; ++i) {
      const auto u = static_cast<std::uint32_t>(d[i]);
      const std::uint32_t sign = u >> 31;
      const std::uint32_t mag = sign ? 0u - u : u;
      m[i] = (sign << 31) | (raw[i] << 30) | mag;
      ored |= m[i];
    }
    return {hd::bit_width32(ored & 0x3FFFFFFFu), (ored >> 31) != 0, ((ored >> 30) & 1u) != 0};
  }

  // Transposes m in place and writes words(s) words at out; returns the raw word.
  COMPTRAIN_HD static std::uint32_t encode(std::uint32_t* m, Shape s, std::uint8_t* out) {
    hd::transpose32(m);
    if (s.has_signs) {
      hd::store_u32(out, m[0]);
      out += 4;
    }
    if (s.has_raw) {
      hd::store_u32(out, m[1]);
      out += 4;
    }
    for (std::uint32_t b = 0; b < s.width; ++b) hd::store_u32(out + 4 * b, m[31 - b]);
    return m[1];
  }

  // Fills m as pack() left it (sign, raw flag, magnitude per value).
  COMPTRAIN_HD static void decode(const std::uint8_t* in, Shape s, std::uint32_t* m) {
    for (std::uint32_t i = 0; i < kBlockValues; ++i) m[i] = 0;
    if (s.has_signs) {
      m[0] = hd::load_u32(in);
      in += 4;
    }
    if (s.has_raw) {
      m[1] = hd::load_u32(in);
      in += 4;
    }
    for (std::uint32_t b = 0; b < s.width; ++b) m[31 - b] = hd::load_u32(in + 4 * b);
    hd::transpose32(m);
  }

  COMPTRAIN_HD static std::int32_t residual(std::uint32_t word) {
    const std::uint32_t mag = word & 0x3FFFFFFFu;
    return static_cast<std::int32_t>((word >> 31) ? 0u - mag : mag);
  }
};

// ---------------------------------------------------------------------------------------------
// Result of encoding one block, for the chunk drivers (cpu_driver.hpp, cuda_driver.cu).
struct EncodedBlock {
  std::uint8_t tag;
  std::uint32_t body_words;  // 32-bit words written at `body`
  std::uint32_t side_count;  // raw values written at `side`
};

// =============================================================================================
// Block codecs. A block codec is what the chunk drivers run; its contract:
//   EncodedBlock encode(const float* x, uint32 n, uint8* body, float* side) const;
//   uint32 body_words(uint8 tag, uint32 n) const;              // kInvalidCount: corrupt tag
//   uint32 side_count(uint8 tag, const uint8* body, uint32 n) const;  // kInvalidCount: corrupt
//   void decode(uint8 tag, const uint8* body, const uint8* side, uint32 n, float* out) const;
// with body_words(tag) + side_count <= n for every block it writes (never larger than raw).
// =============================================================================================

// The two block forms every block codec has besides its own: the block stored verbatim (tag
// `verbatim_tag`, n words of float bits in the body) and the all-zero block (tag 0, no body).
// Decodes them and returns true, or returns false for any other tag.
COMPTRAIN_HD bool decode_verbatim_or_zero(std::uint8_t tag, std::uint8_t verbatim_tag, const std::uint8_t* body, std::uint32_t n,
                                          float* out) {
  if (tag == verbatim_tag) {
    for (std::uint32_t i = 0; i < n; ++i) out[i] = hd::bits_float(hd::load_u32(body + 4 * i));
    return true;
  }
  if (tag == 0) {
    for (std::uint32_t i = 0; i < n; ++i) out[i] = 0.0f;
    return true;
  }
  return false;
}

// `szp` recipe: LinearQuantizer -> BlockLorenzo1D -> BitplaneEncoder, raw side channel.
// Tag byte: bits 0-4 width (0..23), 0x20 sign word present, 0x40 Lorenzo, 0x80 raw word present
// (the raw values themselves go to the chunk's side area, in block order). Tag 0x1F (width 31)
// = block stored verbatim. Tag 0 = all codes zero: the block costs one byte.
template <class Quantizer = LinearQuantizer, class Predictor = BlockLorenzo1D, class Encoder = BitplaneEncoder>
struct SzpBlockCodec {
  Quantizer quantizer;

  static constexpr std::uint8_t kRawBlock = 0x1F;
  static constexpr std::uint8_t kSigns = 0x20, kLorenzo = 0x40, kHasRaw = 0x80;

  COMPTRAIN_HD EncodedBlock encode(const float* x, std::uint32_t n, std::uint8_t* body, float* side) const {
    std::int32_t q33[kBlockValues + 1];
    std::uint32_t raw[kBlockValues];
    q33[0] = 0;
    quantizer.quantize_block(x, n, q33 + 1, raw);
    return encode_quantized(x, n, q33, raw, body, side);
  }

  // The stages after quantisation; q33 and raw as Predictor::forward and quantize_block define
  // them. The CPU driver quantises a whole chunk first and then calls this per block, so that
  // the codes are read back long after they were written (no store-to-load forwarding stalls on
  // the shifted Lorenzo loads); the per-element arithmetic is the same code either way.
  COMPTRAIN_HD EncodedBlock encode_quantized(const float* x, std::uint32_t n, const std::int32_t* q33, const std::uint32_t* raw,
                                             std::uint8_t* body, float* side) const {
    std::int32_t d[kBlockValues];
    const bool lorenzo = Predictor::forward(q33, n, d);
    std::uint32_t m[kBlockValues];
    const typename Encoder::Shape shape = Encoder::pack(d, raw, m);
    if (shape.width == 0 && !shape.has_signs && !shape.has_raw) return {0, 0, 0};
    std::uint32_t raw_count = 0;
    if (shape.has_raw) {
      for (std::uint32_t i = 0; i < kBlockValues; ++i) raw_count += raw[i];
    }
    const std::uint32_t words = Encoder::words(shape);
    if (words + raw_count >= n) {  // not smaller than verbatim: store verbatim (worst-case bound)
      for (std::uint32_t i = 0; i < n; ++i) hd::store_u32(body + 4 * i, hd::float_bits(x[i]));
      return {kRawBlock, n, 0};
    }
    Encoder::encode(m, shape, body);
    if (raw_count != 0) {
      std::uint32_t k = 0;
      for (std::uint32_t i = 0; i < n; ++i) {
        if (raw[i]) side[k++] = x[i];
      }
    }
    const auto tag = static_cast<std::uint8_t>(shape.width | (shape.has_signs ? kSigns : 0) | (lorenzo ? kLorenzo : 0) |
                                               (shape.has_raw ? kHasRaw : 0));
    return {tag, words, raw_count};
  }

  COMPTRAIN_HD std::uint32_t body_words(std::uint8_t tag, std::uint32_t n) const {
    if (tag == kRawBlock) return n;
    const std::uint32_t width = tag & 0x1Fu;
    if (width > Encoder::kMaxWidth) return kInvalidCount;
    const std::uint32_t words = Encoder::words({width, (tag & kSigns) != 0, (tag & kHasRaw) != 0});
    return words < n ? words : kInvalidCount;
  }

  // Raw values of the block: the raw word (MSB-first: bit 31-i = value i); none beyond n.
  COMPTRAIN_HD std::uint32_t side_count(std::uint8_t tag, const std::uint8_t* body, std::uint32_t n) const {
    if (tag == kRawBlock || !(tag & kHasRaw)) return 0;
    const std::uint32_t raw_word = hd::load_u32(body + ((tag & kSigns) ? 4 : 0));
    if (n < 32 && (raw_word << n) != 0) return kInvalidCount;
    return static_cast<std::uint32_t>(hd::popcount32(raw_word));
  }

  COMPTRAIN_HD void decode(std::uint8_t tag, const std::uint8_t* body, const std::uint8_t* side, std::uint32_t n,
                           float* out) const {
    if (decode_verbatim_or_zero(tag, kRawBlock, body, n, out)) return;
    const typename Encoder::Shape shape{tag & 0x1Fu, (tag & kSigns) != 0, (tag & kHasRaw) != 0};
    std::uint32_t m[kBlockValues];
    Encoder::decode(body, shape, m);
    std::int32_t d[kBlockValues];
    for (std::uint32_t i = 0; i < kBlockValues; ++i) d[i] = Encoder::residual(m[i]);
    Predictor::inverse((tag & kLorenzo) != 0, d);
    if (n == kBlockValues) {
      for (std::uint32_t i = 0; i < kBlockValues; ++i) out[i] = quantizer.recover(d[i]);
    } else {
      for (std::uint32_t i = 0; i < n; ++i) out[i] = quantizer.recover(d[i]);
    }
    if (shape.has_raw) {
      std::uint32_t s = 0;
      for (std::uint32_t i = 0; i < n; ++i) {
        if ((m[i] >> 30) & 1u) out[i] = hd::bits_float(hd::load_u32(side + 4 * s++));
      }
    }
  }
};

// `zeros` recipe: lossless zero elimination. Tag = number of non-zero values (bit pattern != 0,
// so -0.0 and NaN payloads are kept bit for bit); body = non-zero bitmap + the non-zero values.
// A block with more than 30 non-zeros is stored verbatim (tag 0xFF) to keep the raw bound.
struct ZerosBlockCodec {
  static constexpr std::uint8_t kRawBlock = 0xFF;

  COMPTRAIN_HD EncodedBlock encode(const float* x, std::uint32_t n, std::uint8_t* body, float*) const {
    std::uint32_t mask = 0;
    for (std::uint32_t i = 0; i < n; ++i) mask |= static_cast<std::uint32_t>(hd::float_bits(x[i]) != 0) << i;
    const auto count = static_cast<std::uint32_t>(hd::popcount32(mask));
    if (count + 1 >= n && count > 0) {
      for (std::uint32_t i = 0; i < n; ++i) hd::store_u32(body + 4 * i, hd::float_bits(x[i]));
      return {kRawBlock, n, 0};
    }
    if (count == 0) return {0, 0, 0};
    hd::store_u32(body, mask);
    // Branch-free compaction: every value is written at the next free slot and the slot only
    // advances for a non-zero. Slots stay below count + 2 <= n, inside the block's worst case.
    std::uint32_t k = 1;
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::uint32_t bits = hd::float_bits(x[i]);
      hd::store_u32(body + 4 * k, bits);
      k += bits != 0 ? 1u : 0u;
    }
    return {static_cast<std::uint8_t>(count), count + 1, 0};
  }

  COMPTRAIN_HD std::uint32_t body_words(std::uint8_t tag, std::uint32_t n) const {
    if (tag == kRawBlock) return n;
    if (tag == 0) return 0;
    return tag + 1u < n ? tag + 1u : kInvalidCount;
  }

  COMPTRAIN_HD std::uint32_t side_count(std::uint8_t tag, const std::uint8_t* body, std::uint32_t n) const {
    if (tag == kRawBlock || tag == 0) return 0;
    const std::uint32_t mask = hd::load_u32(body);
    if (n < 32 && (mask >> n) != 0) return kInvalidCount;
    return static_cast<std::uint32_t>(hd::popcount32(mask)) == tag ? 0u : kInvalidCount;
  }

  COMPTRAIN_HD void decode(std::uint8_t tag, const std::uint8_t* body, const std::uint8_t*, std::uint32_t n,
                           float* out) const {
    if (decode_verbatim_or_zero(tag, kRawBlock, body, n, out)) return;
    // Branch-free: always load the next slot (clamped to the last one, so the read stays inside
    // the block's body) and keep it only for a non-zero position.
    const std::uint32_t mask = hd::load_u32(body);
    const std::uint32_t last = tag;
    std::uint32_t k = 1;
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::uint32_t nz = (mask >> i) & 1u;
      const std::uint32_t bits = hd::load_u32(body + 4 * (k < last ? k : last));
      out[i] = hd::bits_float(bits & (0u - nz));
      k += nz;
    }
  }
};

// =============================================================================================
// Chunk layout shared by both drivers. A chunk is kChunkBlocks blocks encoded independently:
//   [tag byte per block, padded to a multiple of 4][body words of every block][side values]
// The payload of a chunked codec is: codec state | (chunks + 1) u64 offsets | chunks.
// 256 blocks = 8192 values = 32 KiB of input: one CUDA thread block of 256 threads (one thread
// per block, as cuSZp) and a unit of work for a CPU thread; offsets cost 8 B per 32 KiB.
// =============================================================================================
inline constexpr std::uint32_t kChunkBlocks = 256;
inline constexpr std::uint64_t kChunkValues = std::uint64_t{kChunkBlocks} * kBlockValues;

COMPTRAIN_HD std::uint64_t chunk_count(std::uint64_t n) { return (n + kChunkValues - 1) / kChunkValues; }
COMPTRAIN_HD std::uint32_t tag_bytes(std::uint32_t blocks) { return (blocks + 3u) & ~3u; }
// Worst case of one chunk of `values` values: tags + every block verbatim.
COMPTRAIN_HD std::uint64_t max_chunk_bytes(std::uint64_t values) {
  const auto blocks = static_cast<std::uint32_t>((values + kBlockValues - 1) / kBlockValues);
  return tag_bytes(blocks) + 4 * values;
}

// ---------------------------------------------------------------------------------------------
// Prediction stage of `szh`: 1-D Lorenzo over the integer codes of a whole chunk (cuSZ's dual
// quantisation: every value is prequantised first, so the prediction is exact integer arithmetic
// and the error is decided by the quantiser alone) or no prediction, and the mapping of residuals
// to the 16-bit symbols the (host) Huffman stage codes. The choice is made once per stream, on the
// exact coded size of both histograms (szh_codec.hpp): post-ReLU activations are close to white
// noise, where a first difference doubles the spread of the codes and costs ~1.5 bits per value
// more, while smooth data wants Lorenzo. The choice is the stage's serialised state (u32).
//
// Symbols: residual d with -kRadius + 2 <= d < kRadius is symbol d + kRadius; symbol 0 marks a
// raw value (quantiser fallback: NaN, Inf, -0.0, out-of-range, unverifiable) and symbol 1 a wide
// residual. Both escapes take the next slot of the chunk's outlier list (float bits, or the
// residual as int32), so no positions are stored. A raw value does not update the predictor:
// the chain continues from the last coded value, so one NaN costs one outlier, not two.
struct ChunkLorenzo1D {
  static constexpr std::int32_t kRadius = 1 << 15;  // SZ3's default 65536 bins
  static constexpr std::uint32_t kSymbols = 2u * kRadius;
  static constexpr std::uint16_t kRawSymbol = 0, kWideSymbol = 1;

  // Symbol of a residual, or kWideSymbol when it needs an outlier slot.
  COMPTRAIN_HD static std::uint16_t symbol(std::int32_t d) {
    return d > -kRadius + 1 && d < kRadius ? static_cast<std::uint16_t>(d + kRadius) : kWideSymbol;
  }

  // Symbols of n values for one predictor choice (q and raw as LinearQuantizer::quantize_block
  // leaves them: raw values carry code 0); returns false when no symbol is an escape, i.e. when
  // outliers() has nothing to collect (true may be a false alarm: cheap to compute in the loop). The main loop predicts every value from the code just
  // before it and is branch-free, so the host compiler vectorises it; a raw value, however, must
  // not move the predictor, so in Lorenzo mode the values that follow a raw one are redone by a
  // sequential pass, only in the (rare) chunks that hold raw values. Same symbols as the plain
  // sequential definition (tested against it).
  // (`sym` must not overlap q or raw: __restrict__ spares the vectorised loop a run-time overlap
  // check, with which GCC 12 kept the scalar loop; so does a compile-time predictor choice.)
  COMPTRAIN_HD static bool symbols(const std::int32_t* q, const std::uint32_t* raw, std::uint32_t n, bool lorenzo,
                                   std::uint16_t* __restrict__ sym) {
    return lorenzo ? symbols_of<true>(q, raw, n, sym) : symbols_of<false>(q, raw, n, sym);
  }
  template <bool Lorenzo>
  COMPTRAIN_HD static bool symbols_of(const std::int32_t* q, const std::uint32_t* raw, std::uint32_t n, std::uint16_t* __restrict__ sym) {
    if (n == 0) return false;
    std::uint32_t any_raw = raw[0], any_wide = 0;
    sym[0] = raw[0] ? kRawSymbol : symbol(q[0]);
    any_wide |= static_cast<std::uint32_t>(sym[0] == kWideSymbol);
    for (std::uint32_t i = 1; i < n; ++i) {
      const std::int32_t d = Lorenzo ? q[i] - q[i - 1] : q[i];  // |q| < 2^22: no overflow
      sym[i] = raw[i] ? kRawSymbol : symbol(d);
      any_raw |= raw[i];
      any_wide |= static_cast<std::uint32_t>(d <= -kRadius + 1) | static_cast<std::uint32_t>(d >= kRadius);  // 32-bit lanes
    }
    if (any_raw == 0) return any_wide != 0;
    if (Lorenzo) {
      std::int32_t prev = 0;
      for (std::uint32_t i = 0; i < n; ++i) {
        if (raw[i]) continue;
        if (i > 0 && raw[i - 1]) sym[i] = symbol(q[i] - prev);
        prev = q[i];
      }
    }
    return true;
  }

  // The outlier list of symbols() output: raw values' float bits and wide residuals, in order.
  // Returns their number.
  COMPTRAIN_HD static std::uint32_t outliers(const float* x, const std::int32_t* q, const std::uint16_t* sym, std::uint32_t n,
                                             bool lorenzo, std::uint32_t* out) {
    std::int32_t prev = 0;
    std::uint32_t k = 0;
    for (std::uint32_t i = 0; i < n; ++i) {
      if (sym[i] == kRawSymbol) {
        out[k++] = hd::float_bits(x[i]);
        continue;
      }
      if (sym[i] == kWideSymbol) out[k++] = static_cast<std::uint32_t>(q[i] - (lorenzo ? prev : 0));
      prev = q[i];
    }
    return k;
  }

  // Pass 2: writes n symbols and the outliers; returns the number of outliers.
  COMPTRAIN_HD static std::uint32_t forward(const float* x, const std::int32_t* q, const std::uint32_t* raw, std::uint32_t n,
                                            bool lorenzo, std::uint16_t* sym, std::uint32_t* outlier_list) {
    return symbols(q, raw, n, lorenzo, sym) ? outliers(x, q, sym, n, lorenzo, outlier_list) : 0u;
  }

  // Pass 1: adds the symbol counts of both choices (no prediction, Lorenzo), escapes included, to
  // the histograms; `scratch` holds n symbols. The counts of symbol s are spread over kWays
  // counters, s * kWays + i % kWays for value i (their sum is the count): runs of one symbol (the
  // zeros of post-ReLU data) then increment different words instead of each increment waiting for
  // the previous one through memory (measured: the single-counter loop ran at the store-to-load
  // forwarding latency and took most of pass 1).
  static constexpr std::uint32_t kWays = 4;
  COMPTRAIN_HD static void histograms(const std::int32_t* q, const std::uint32_t* raw, std::uint32_t n, std::uint16_t* scratch,
                                      std::uint64_t* plain, std::uint64_t* lorenzo) {
    symbols(q, raw, n, false, scratch);
    count(scratch, n, plain);
    symbols(q, raw, n, true, scratch);
    count(scratch, n, lorenzo);
  }
  COMPTRAIN_HD static void count(const std::uint16_t* sym, std::uint32_t n, std::uint64_t* h) {
    std::uint32_t i = 0;
    for (; i + kWays <= n; i += kWays) {
      for (std::uint32_t w = 0; w < kWays; ++w) ++h[std::uint32_t{sym[i + w]} * kWays + w];
    }
    for (; i < n; ++i) ++h[std::uint32_t{sym[i]} * kWays + i % kWays];
  }

  // Decoder, one value at a time (the Huffman decoder produces symbols sequentially). `prev` is
  // the running code in wrapping unsigned arithmetic: a forged stream must not cause signed
  // overflow, only wrong values. Returns the code of a non-raw symbol; `outlier` is the wide
  // residual when symbol == kWideSymbol.
  COMPTRAIN_HD static std::int32_t inverse(std::uint16_t symbol, std::uint32_t outlier, bool lorenzo, std::uint32_t& prev) {
    const std::uint32_t d = symbol == kWideSymbol ? outlier : static_cast<std::uint32_t>(static_cast<std::int32_t>(symbol) - kRadius);
    prev = (lorenzo ? prev : 0u) + d;
    return static_cast<std::int32_t>(prev);
  }
};

// ---------------------------------------------------------------------------------------------
// Sign stage, the positive mask: one bit per value saying x > 0, stored beside a strict codec's
// payload (codec.hpp, CompressOptions::positive_mask), so that a decoded value is > 0 exactly
// when the original was. Why: PyTorch's ReLU backward (ReluBackward0, threshold_backward) passes
// the gradient where its saved output is > 0; an output in (0, eb) that decodes to 0 drops its
// gradient, and that error, in the data path, dwarfs the bounded error of the weight path
// (kernels/README.md, "Measured against the prediction").
//
// The rule on decode keeps |x - x'| <= eb: where the bit says x > 0 but x' <= 0, x' becomes the
// smallest positive float (2^-149), which lies between x' and x, so nearer to x; where the bit
// says not > 0 (x <= 0 or NaN) but x' > 0, x' becomes +0.0, which lies between x and x'. A NaN,
// an infinity or a zero of the original is already bit-exact (the quantiser sends it raw or
// codes it exactly) and its bit agrees, so it is untouched. Comparisons and bit moves only: no
// arithmetic that FMA contraction could change, so the host and device results are identical.
// Layout: byte k holds values 8k..8k+7, value 8k+i in bit i; the bits after the last value are 0.
struct PositiveMask {
  COMPTRAIN_HD static std::uint64_t bytes(std::uint64_t n) { return n / 8 + (n % 8 != 0 ? 1u : 0u); }

  // The byte of values x[0..n), n <= 8.
  COMPTRAIN_HD static std::uint8_t pack(const float* x, std::uint32_t n) {
    std::uint32_t bits = 0;
    for (std::uint32_t i = 0; i < n; ++i) bits |= static_cast<std::uint32_t>(x[i] > 0.0f) << i;
    return static_cast<std::uint8_t>(bits);
  }

  // One decoded value y under its bit.
  COMPTRAIN_HD static float restore(bool positive, float y) {
    const bool y_positive = y > 0.0f;
    if (positive) return y_positive ? y : hd::bits_float(1u);  // 2^-149, the smallest positive float
    return y_positive ? 0.0f : y;
  }

  // Applies one byte to the decoded values y[0..n), n <= 8.
  COMPTRAIN_HD static void apply(std::uint8_t bits, std::uint32_t n, float* y) {
    for (std::uint32_t i = 0; i < n; ++i) y[i] = restore(((bits >> i) & 1u) != 0u, y[i]);
  }

  // The byte's bits at and after value n must be 0 (a stream check); true when they are.
  COMPTRAIN_HD static bool padding_clear(std::uint8_t bits, std::uint32_t n) { return n >= 8 || (bits >> n) == 0; }
};

// ---------------------------------------------------------------------------------------------
// Number-format stages for the non-error-bounded baselines (host and device).

// float -> bfloat16, round to nearest even; NaN stays a (quiet) NaN.
COMPTRAIN_HD std::uint16_t float_to_bf16(float x) {
  const std::uint32_t u = hd::float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}
COMPTRAIN_HD float bf16_to_float(std::uint16_t h) { return hd::bits_float(static_cast<std::uint32_t>(h) << 16); }

// float -> IEEE binary16, round to nearest even, overflow to Inf, subnormals kept.
COMPTRAIN_HD std::uint16_t float_to_fp16(float x) {
  const std::uint32_t u = hd::float_bits(x);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x1ffu));  // NaN
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: Inf
  if (a < 0x38800000u) {  // below 2^-14: fp16 subnormal (or zero)
    if (a < 0x33000000u) return static_cast<std::uint16_t>(sign);  // below 2^-25: rounds to 0
    const std::uint32_t e = a >> 23;
    const std::uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - e;  // 14 - (e - 127) + 13 - 1 ... value = mant * 2^(e-150)
    // result = mant * 2^(e-150) / 2^-24 = mant >> (126 - e)
    const std::uint32_t q = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    const std::uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
    return static_cast<std::uint16_t>(sign | r);
  }
  // normal: rebias exponent (127 -> 15) and round the 13 dropped mantissa bits to even
  const std::uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

COMPTRAIN_HD float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu;
  const std::uint32_t m = h & 0x3ffu;
  if (e == 0x1f) return hd::bits_float(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    // subnormal: m * 2^-24, exact in float
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;  // 2^-24
    return hd::bits_float(sign | hd::float_bits(v));
  }
  return hd::bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

}  // namespace comptrain::kernels

#pragma once
// `szh`: LinearQuantizer -> ChunkLorenzo1D (dual quantisation, cuSZ) -> canonical Huffman.
// Private to the library (included by codec.cpp only, so the fuzz target needs no new source).
//
// Payload:  f32 step | u32 kChunkBlocks | u32 predictor (0 none, 1 Lorenzo) | Huffman state |
//           (chunks + 1) u64 offsets | chunks
// Chunk (kChunkValues values, predicted independently so threads need no carry):
//   u32 0xFFFFFFFF, then the values verbatim (4 B each)       - when coding would not be smaller
//   u32 k, k x u32 outliers (raw float bits / wide residual), the bitstream (MSB first, zero-padded
//   to a byte)
// The codebook is global (one histogram over the whole array, built on the host as in cuSZ): a
// per-chunk table would cost up to 3 B per distinct symbol per 32 KiB chunk. Encoding is two
// parallel passes over the chunks: (1) quantise and count the symbols of both predictor choices;
// then, on the host, build both codes and keep the predictor whose stream is smaller; (2)
// quantise again (cheaper than keeping 2 bytes per value between the passes), predict, code.
// The stream does not depend on the thread count (integer histogram sums, a deterministic code
// construction, chunks assembled in order).
//
// Worst case: a chunk is at most 4 + 4 values bytes, and when the code table plus the chunks
// would not be smaller than the all-verbatim stream (empty table, every chunk verbatim), that
// stream is written instead, so max_payload() holds for incompressible data.

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "comptrain/kernels/huffman.hpp"
#include "comptrain/kernels/stages.hpp"
#include "cpu_driver.hpp"

namespace comptrain::kernels::detail {

inline constexpr std::uint32_t kSzhVerbatim = 0xFFFFFFFFu;
// Fixed state before the code table: step, chunk size, predictor choice.
inline constexpr std::uint64_t kSzhStateBytes = LinearQuantizer::kStateBytes + 4 + 4;

inline std::uint64_t szh_max_chunk_bytes(std::uint64_t values) { return 4 + 4 * values; }

// Largest payload for n values: fixed state, an empty table, the chunk table, every chunk verbatim.
inline std::uint64_t szh_max_payload(std::uint64_t n) {
  const std::uint64_t chunks = chunk_count(n);
  return kSzhStateBytes + 4 + 8 * (chunks + 1) + 4 * chunks + 4 * n;
}

// Smallest payload for n values (every symbol costs >= 1 bit): refuses forged counts early.
inline std::uint64_t szh_min_payload(std::uint64_t n) {
  const std::uint64_t chunks = chunk_count(n);
  return kSzhStateBytes + 4 + 8 * (chunks + 1) + 4 * chunks + n / 8;
}

// Per-chunk workers (codec.cpp, multi-versioned). Pass 1 adds the chunk's symbol counts of both
// predictor choices to the histograms; pass 2 writes its symbols and outliers and returns the
// outlier count.
void szh_histogram_chunk(const LinearQuantizer& quantizer, const float* x, std::uint64_t values, std::uint64_t* plain,
                         std::uint64_t* lorenzo);
std::uint32_t szh_symbols_chunk(const LinearQuantizer& quantizer, const float* x, std::uint64_t values, bool lorenzo,
                                std::uint16_t* symbols, std::uint32_t* outliers);

// Exact size in bytes of everything a code of these lengths would write for `histogram`, before
// the per-chunk verbatim fallback: table, bitstreams (rounded per chunk, ignored) and 4-byte
// outliers.
inline std::uint64_t szh_coded_bytes(const HuffmanCode::Lengths& lengths, const std::vector<std::uint64_t>& histogram) {
  std::uint64_t bits = 0;
  for (const auto& [symbol, length] : lengths) bits += histogram[symbol] * length;
  const std::uint64_t escapes = histogram[ChunkLorenzo1D::kRawSymbol] + histogram[ChunkLorenzo1D::kWideSymbol];
  return 4 + 3 * std::uint64_t{lengths.size()} + (bits + 7) / 8 + 4 * escapes;
}

// Pass 2 of one chunk: writes it at out (room for szh_max_chunk_bytes); returns its size. The
// coded form is kept when it is smaller than verbatim, i.e. when its bitstream stays below
// `limit` bytes: the bulk of the symbols go, two at a time, through the branch-free writer while 8
// bytes of room are left below the limit, the rest byte by byte; running into the limit means
// verbatim.
inline std::uint64_t szh_encode_chunk(const HuffmanCode& code, const float* x, const std::uint16_t* symbols, std::uint64_t values,
                                      const std::uint32_t* outliers, std::uint32_t outlier_count, std::uint8_t* out) {
  const std::uint64_t room = szh_max_chunk_bytes(values);
  const std::uint64_t head = 4 + 4 * std::uint64_t{outlier_count};
  if (!code.empty() && head < room) {
    const std::uint64_t limit = room - head;
    const std::uint32_t* const enc = code.encoder_table();
    HuffmanCode::Writer w{out + head};
    std::uint64_t i = 0;
    for (; i + 2 <= values && w.pos + 8 <= limit; i += 2) {
      const std::uint32_t a = enc[symbols[i]], b = enc[symbols[i + 1]];
      w.put_wide((std::uint64_t{a >> 5} << (b & 31u)) | (b >> 5), (a & 31u) + (b & 31u));
    }
    bool fits = true;
    for (; i < values && fits; ++i) {
      const std::uint32_t e = enc[symbols[i]];
      fits = w.put_bounded(e >> 5, e & 31u, limit);
    }
    if (fits && w.pos + (w.bits > 0 ? 1u : 0u) < limit) {
      const std::uint64_t bytes = w.finish();
      hd::store_u32(out, outlier_count);
      std::memcpy(out + 4, outliers, 4 * std::uint64_t{outlier_count});
      return head + bytes;
    }
  }
  hd::store_u32(out, kSzhVerbatim);
  std::memcpy(out + 4, x, 4 * values);
  return room;
}

// Decodes one chunk of `size` bytes, validating counts and the bitstream's extent; returns
// nullptr or what is wrong.
inline const char* szh_decode_chunk(const LinearQuantizer& quantizer, const HuffmanCode& code, bool lorenzo, const std::uint8_t* in,
                                    std::uint64_t size, std::uint64_t values, float* out) {
  if (size < 4) return "shorter than its header word";
  const std::uint32_t k = hd::load_u32(in);
  if (k == kSzhVerbatim) {
    if (size != szh_max_chunk_bytes(values)) return "verbatim chunk has the wrong size";
    std::memcpy(out, in + 4, 4 * values);
    return nullptr;
  }
  if (code.empty()) return "coded chunk but no code table";
  if (k > values) return "more outliers than values";
  if (4 + 4 * std::uint64_t{k} > size) return "outliers run past the chunk";
  const std::uint8_t* outliers = in + 4;
  HuffmanCode::Reader r{in + 4 + 4 * std::uint64_t{k}, size - 4 - 4 * std::uint64_t{k}};
  std::uint32_t prev = 0, used = 0;
  for (std::uint64_t i = 0; i < values; ++i) {
    std::uint16_t s;
    if (!code.decode(r, s)) return "invalid Huffman code";
    if (s == ChunkLorenzo1D::kRawSymbol || s == ChunkLorenzo1D::kWideSymbol) {
      if (used == k) return "more escapes than outliers";
      const std::uint32_t o = hd::load_u32(outliers + 4 * std::uint64_t{used++});
      if (s == ChunkLorenzo1D::kRawSymbol) {
        out[i] = hd::bits_float(o);
        continue;
      }
      out[i] = quantizer.recover(ChunkLorenzo1D::inverse(s, o, lorenzo, prev));
    } else {
      out[i] = quantizer.recover(ChunkLorenzo1D::inverse(s, 0, lorenzo, prev));
    }
    if (r.pos > r.size + 8) return "bitstream ends early";  // stop early on a forged chunk
  }
  if (used != k) return "unused outliers";
  const std::uint64_t consumed = r.consumed();
  if (consumed > 8 * r.size || (consumed + 7) / 8 != r.size) return "bitstream length does not match its symbols";
  return nullptr;
}

// Writes the predictor choice, the Huffman state, the chunk table and the chunks at `out` (room
// for szh_max_payload(n) - 8 bytes, the payload after the step and chunk-size words); returns
// the bytes written.
inline std::uint64_t szh_encode(const LinearQuantizer& quantizer, const float* x, std::uint64_t n, unsigned threads,
                                std::span<std::byte> out) {
  const std::uint64_t chunks = chunk_count(n);
  threads = resolve_threads(threads, chunks);
  // Pass 1's histograms, per thread: kWays counters per symbol for each predictor choice (4 MiB).
  // With one thread they stay allocated in the calling thread between calls: allocated per call,
  // glibc handed them back to the OS on free and every call page-faulted them in again (measured
  // 2.6 ms per call on an 8192-value array, 1.6 M page faults in 600 calls).
  // With more threads they are allocated here (per_range_scratch: fewer threads when memory is
  // short) and zeroed by each range in its own thread.
  constexpr std::size_t kSpread = std::size_t{HuffmanCode::kAlphabet} * ChunkLorenzo1D::kWays;
  thread_local std::vector<std::uint64_t> caller_histograms;
  RangeScratch<std::uint64_t> worker_histograms;
  if (threads > 1) {
    worker_histograms = per_range_scratch<std::uint64_t>(threads, 2 * kSpread);
    threads = worker_histograms.threads;
  }
  if (threads == 1) caller_histograms.resize(2 * kSpread);
  const auto histograms_of = [&](unsigned t) noexcept { return threads > 1 ? worker_histograms.of(t) : caller_histograms.data(); };
  parallel_ranges(chunks, threads, [&](std::uint64_t c0, std::uint64_t c1, unsigned t) noexcept {
    std::uint64_t* h = histograms_of(t);
    std::fill(h, h + 2 * kSpread, std::uint64_t{0});
    for (std::uint64_t c = c0; c < c1; ++c) {
      szh_histogram_chunk(quantizer, x + c * kChunkValues, chunk_values(n, c), h, h + kSpread);
    }
  });
  thread_local std::vector<std::uint64_t> plain, delta;  // the sums (1 MiB: kept for the same reason)
  plain.assign(HuffmanCode::kAlphabet, 0);
  delta.assign(HuffmanCode::kAlphabet, 0);
  for (unsigned t = 0; t < threads; ++t) {
    const std::uint64_t* h = histograms_of(t);
    for (std::uint32_t s = 0; s < HuffmanCode::kAlphabet; ++s) {
      for (std::uint32_t w = 0; w < ChunkLorenzo1D::kWays; ++w) {
        plain[s] += h[s * ChunkLorenzo1D::kWays + w];
        delta[s] += h[kSpread + s * ChunkLorenzo1D::kWays + w];
      }
    }
  }
  HuffmanCode::Lengths plain_lengths = HuffmanCode::lengths(plain);
  HuffmanCode::Lengths delta_lengths = HuffmanCode::lengths(delta);
  const bool lorenzo = szh_coded_bytes(delta_lengths, delta) < szh_coded_bytes(plain_lengths, plain);
  const HuffmanCode code = HuffmanCode::from_lengths(std::move(lorenzo ? delta_lengths : plain_lengths));

  // Pass 2 writes the chunks where they go when coded: after the predictor word, the code table
  // and the chunk table (range_outputs: in place with one thread).
  auto* const base = reinterpret_cast<std::uint8_t*>(out.data());
  const std::uint64_t chunks_at = 4 + code.state_bytes() + 8 * (chunks + 1);
  std::uint8_t* const data = base + std::min<std::uint64_t>(chunks_at, out.size());
  std::vector<std::uint64_t> sizes(chunks);
  const RangeScratch<std::uint16_t> symbols = per_range_scratch<std::uint16_t>(threads, kChunkValues);
  const RangeScratch<std::uint32_t> outliers = per_range_scratch<std::uint32_t>(symbols.threads, kChunkValues);
  threads = outliers.threads;
  std::vector<RangeOutput> ranges =
      range_outputs(data, out.size() - std::min<std::uint64_t>(chunks_at, out.size()), chunks, threads, szh_max_chunk_bytes(kChunkValues));
  parallel_ranges(chunks, threads, [&](std::uint64_t c0, std::uint64_t c1, unsigned t) noexcept {
    RangeOutput& r = ranges[t];
    for (std::uint64_t c = c0; c < c1; ++c) {
      const std::uint64_t v = chunk_values(n, c);
      std::uint8_t* at = r.reserve(szh_max_chunk_bytes(v));
      if (at == nullptr) return;
      const std::uint32_t k = szh_symbols_chunk(quantizer, x + c * kChunkValues, v, lorenzo, symbols.of(t), outliers.of(t));
      sizes[c] = szh_encode_chunk(code, x + c * kChunkValues, symbols.of(t), v, outliers.of(t), k, at);
      r.commit(sizes[c]);
    }
  });
  check_range_outputs(ranges);
  std::uint64_t total = 0;
  for (const auto& r : ranges) total += r.total();
  const std::uint64_t verbatim_total = 4 * chunks + 4 * n;
  const bool all_verbatim = code.state_bytes() + total >= 4 + verbatim_total;

  std::uint8_t* p = base;
  if (all_verbatim) {  // overwrites whatever pass 2 left in the buffer
    hd::store_u32(p, 0);      // no prediction
    hd::store_u32(p + 4, 0);  // empty code table
    p += 8;
    for (std::uint64_t c = 0; c <= chunks; ++c) {
      const std::uint64_t offset = 4 * c + 4 * std::min(n, c * kChunkValues);
      std::memcpy(p + 8 * c, &offset, 8);
    }
    p += 8 * (chunks + 1);
    for (std::uint64_t c = 0; c < chunks; ++c) {
      hd::store_u32(p, kSzhVerbatim);
      std::memcpy(p + 4, x + c * kChunkValues, 4 * chunk_values(n, c));
      p += szh_max_chunk_bytes(chunk_values(n, c));
    }
    return static_cast<std::uint64_t>(p - base);
  }
  // The coded stream is smaller than the all-verbatim one, so it fits in `out`.
  gather_ranges(data, ranges);
  hd::store_u32(p, lorenzo ? 1u : 0u);
  p += 4;
  code.save(p);
  p += code.state_bytes();
  std::uint64_t offset = 0;
  for (std::uint64_t c = 0; c <= chunks; ++c) {
    std::memcpy(p + 8 * c, &offset, 8);
    if (c < chunks) offset += sizes[c];
  }
  return chunks_at + total;
}

// Decodes the payload after the step and chunk-size words; `base`: the stream offset of rest[0].
inline void szh_decode(const LinearQuantizer& quantizer, std::span<const std::byte> rest, float* out, std::uint64_t n,
                       unsigned threads, std::uint64_t base) {
  if (rest.size() < 4) throw_corrupt_at(base, "payload ends before the szh predictor word");
  const std::uint32_t predictor = hd::load_u32(reinterpret_cast<const std::uint8_t*>(rest.data()));
  if (predictor > 1) throw_corrupt_at(base, "unknown szh predictor " + std::to_string(predictor) + " (expected 0 or 1)");
  const bool lorenzo = predictor == 1;
  rest = rest.subspan(4);
  HuffmanCode code;
  std::uint64_t table = 0;
  if (const char* e = HuffmanCode::load(reinterpret_cast<const std::uint8_t*>(rest.data()), rest.size(), code, table)) {
    throw_corrupt_at(base + 4, std::string("Huffman code table: ") + e);
  }
  const auto chunked = rest.subspan(table);
  const std::uint64_t table_at = base + 4 + table;
  const std::uint64_t chunks = chunk_count(n);
  const std::vector<std::uint64_t> offsets = read_chunk_table(chunked, n, table_at);
  const auto* data = reinterpret_cast<const std::uint8_t*>(chunked.data() + 8 * (chunks + 1));
  const std::uint64_t data_at = table_at + 8 * (chunks + 1);
  std::vector<RangeError> errors(resolve_threads(threads, chunks));
  parallel_ranges(chunks, threads, [&](std::uint64_t c0, std::uint64_t c1, unsigned t) noexcept {
    for (std::uint64_t c = c0; c < c1; ++c) {
      const std::uint64_t size = offsets[c + 1] - offsets[c];
      const char* error = size > szh_max_chunk_bytes(chunk_values(n, c))
                              ? "larger than its worst case"
                              : szh_decode_chunk(quantizer, code, lorenzo, data + offsets[c], size, chunk_values(n, c), out + c * kChunkValues);
      if (error != nullptr) {
        errors[t] = {error, c, data_at + offsets[c]};
        return;
      }
    }
  });
  throw_first_range_error(errors);
}

}  // namespace comptrain::kernels::detail

#pragma once
// CPU driver of the chunked block codecs (szp, zeros): std::thread over contiguous ranges of
// chunks, at most kMaxThreads and at most one per chunk. Chunks are encoded independently and
// assembled in order, so the stream does not depend on the thread count. Private to the library.

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "comptrain/kernels/codec.hpp"
#include "comptrain/kernels/stages.hpp"
#include "comptrain/kernels/stream.hpp"

namespace comptrain::kernels::detail {

// The threads that run `work_items` items: `threads` (0: the hardware threads), at most
// kMaxThreads (codec.hpp says why; compress and decompress refuse more) and at most one per item.
inline unsigned resolve_threads(unsigned threads, std::uint64_t work_items) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = std::min(threads, kMaxThreads);
  return static_cast<unsigned>(std::max<std::uint64_t>(1, std::min<std::uint64_t>(threads, work_items)));
}

// Runs f(begin, end, range) over [0, items) split into resolve_threads(threads, items)
// contiguous ranges, range 0 in the calling thread and each other one in a thread of its own.
//
// f must be noexcept and must not allocate: whatever a range needs is allocated before, in the
// calling thread (per_range_scratch below), and errors are recorded for the caller to throw
// after the join (RangeError, throw_first_range_error). Why: in a thread started from a
// dlopen'ed library (comptrain_codecs in a Python interpreter) the first exception makes
// libstdc++ allocate its thread-local data, and when the address space is exhausted glibc aborts
// the process ("cannot allocate memory for thread-local data"); that is the state in which a
// range's allocation would throw. Seen in CI with 256 threads under the address-space limit of
// shared/defects-2/03.
//
// A thread that cannot be started (std::system_error: an address-space limit, a container's pids
// limit) is no error: its range and every later one run in the calling thread instead, after
// range 0, so the stream, which does not depend on the thread count, is the same. Nothing
// between starting the first thread and joining the last can throw, so no joinable std::thread
// is ever destroyed, which would std::terminate the process.
template <class F>
void parallel_ranges(std::uint64_t items, unsigned threads, F&& f) {
  static_assert(std::is_nothrow_invocable_v<F&, std::uint64_t, std::uint64_t, unsigned>,
                "a range runs in a thread of its own: it must be noexcept (see above)");
  threads = resolve_threads(threads, items);
  if (threads == 1) {
    f(std::uint64_t{0}, items, 0u);
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);  // before any thread starts: emplace_back below never reallocates
  const auto run = [&](unsigned t) noexcept { f(items * t / threads, items * (t + 1) / threads, t); };
  unsigned started = 1;  // ranges [1, started) have their own thread
  for (; started < threads; ++started) {
    try {
      pool.emplace_back(run, started);
    } catch (...) {
      break;  // the rest run here
    }
  }
  run(0);
  for (unsigned t = started; t < threads; ++t) run(t);
  for (auto& th : pool) th.join();
}

// Scratch for the ranges of parallel_ranges: `per_range` T for each of `threads` ranges, in one
// block allocated here, in the calling thread. When the whole block cannot be allocated the
// thread count halves until it can (the streams do not depend on it), so a memory limit costs
// speed, not the call; std::bad_alloc only when not even one range's scratch fits. The contents
// are uninitialised: pages are touched by the range that uses them, in its own thread.
template <class T>
struct RangeScratch {
  std::unique_ptr<T[]> block;
  std::size_t per_range = 0;
  unsigned threads = 1;
  T* of(unsigned t) const noexcept { return block.get() + std::size_t{t} * per_range; }
};
template <class T>
RangeScratch<T> per_range_scratch(unsigned threads, std::size_t per_range) {
  RangeScratch<T> s{nullptr, per_range, std::max(1u, threads)};
  for (; s.threads > 1; s.threads /= 2) {
    s.block.reset(new (std::nothrow) T[std::size_t{s.threads} * per_range]);
    if (s.block) return s;
  }
  s.block.reset(new T[per_range]);
  return s;
}

// The first error of each range (a range stops at its first one), thrown by the caller after
// the join: no range allocates or throws (parallel_ranges says why). `what` is a string literal.
struct RangeError {
  const char* what = nullptr;
  std::uint64_t chunk = 0;
  std::uint64_t at = 0;  // stream offset of the chunk's first byte
};
[[noreturn]] inline void corrupt_chunk(std::uint64_t c, std::uint64_t at, const char* what) {
  throw_corrupt_at(at, "chunk " + std::to_string(c) + ": " + what);
}
inline void throw_first_range_error(const std::vector<RangeError>& errors) {
  for (const RangeError& e : errors) {
    if (e.what != nullptr) corrupt_chunk(e.chunk, e.at, e.what);
  }
}

inline std::uint64_t chunk_values(std::uint64_t n, std::uint64_t c) { return std::min(kChunkValues, n - c * kChunkValues); }

// Lays out one chunk of `values` values at `out` (room for max_chunk_bytes(values)): the tag
// bytes, then the blocks' bodies, then their side words; returns its size. encode_block(b, n,
// body, side) encodes block b (n values) at `body`, its side words at `side`. Every encoder of
// the chunked format goes through here, so the layout is written once.
template <class EncodeBlock>
inline std::uint64_t pack_chunk(std::uint64_t values, std::uint8_t* out, float* side, EncodeBlock&& encode_block) {
  const auto blocks = static_cast<std::uint32_t>((values + kBlockValues - 1) / kBlockValues);
  const std::uint32_t tb = tag_bytes(blocks);
  std::uint8_t* body = out + tb;
  std::uint32_t side_n = 0;
  for (std::uint32_t b = 0; b < blocks; ++b) {
    const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(kBlockValues, values - std::uint64_t{b} * kBlockValues));
    const EncodedBlock e = encode_block(b, n, body, side + side_n);
    out[b] = e.tag;
    body += 4 * std::uint64_t{e.body_words};
    side_n += e.side_count;
  }
  for (std::uint32_t b = blocks; b < tb; ++b) out[b] = 0;
  std::memcpy(body, side, 4 * std::uint64_t{side_n});
  return static_cast<std::uint64_t>(body - out) + 4 * std::uint64_t{side_n};
}

template <class BlockCodec>
std::uint64_t encode_chunk(const BlockCodec& codec, const float* x, std::uint64_t values, std::uint8_t* out, float* side);
template <class BlockCodec>
const char* decode_chunk(const BlockCodec& codec, const std::uint8_t* in, std::uint64_t size, std::uint64_t values, float* out);

// Dispatch points: the generic template, or an out-of-line (possibly multi-versioned) worker
// for a recipe that provides one (codec.cpp).
template <class BlockCodec>
struct ChunkWorkers {
  static std::uint64_t encode(const BlockCodec& c, const float* x, std::uint64_t v, std::uint8_t* o, float* s) {
    return encode_chunk(c, x, v, o, s);
  }
  static const char* decode(const BlockCodec& c, const std::uint8_t* in, std::uint64_t size, std::uint64_t v, float* o) {
    return decode_chunk(c, in, size, v, o);
  }
};
std::uint64_t encode_chunk_szp(const SzpBlockCodec<>& codec, const float* x, std::uint64_t values, std::uint8_t* out, float* side);
const char* decode_chunk_szp(const SzpBlockCodec<>& codec, const std::uint8_t* in, std::uint64_t size, std::uint64_t values,
                             float* out);
std::uint64_t encode_chunk_zeros(const ZerosBlockCodec& codec, const float* x, std::uint64_t values, std::uint8_t* out, float* side);
const char* decode_chunk_zeros(const ZerosBlockCodec& codec, const std::uint8_t* in, std::uint64_t size, std::uint64_t values,
                               float* out);
template <>
struct ChunkWorkers<ZerosBlockCodec> {
  static std::uint64_t encode(const ZerosBlockCodec& c, const float* x, std::uint64_t v, std::uint8_t* o, float* s) {
    return encode_chunk_zeros(c, x, v, o, s);
  }
  static const char* decode(const ZerosBlockCodec& c, const std::uint8_t* in, std::uint64_t size, std::uint64_t v, float* o) {
    return decode_chunk_zeros(c, in, size, v, o);
  }
};
template <>
struct ChunkWorkers<SzpBlockCodec<>> {
  static std::uint64_t encode(const SzpBlockCodec<>& c, const float* x, std::uint64_t v, std::uint8_t* o, float* s) {
    return encode_chunk_szp(c, x, v, o, s);
  }
  static const char* decode(const SzpBlockCodec<>& c, const std::uint8_t* in, std::uint64_t size, std::uint64_t v, float* o) {
    return decode_chunk_szp(c, in, size, v, o);
  }
};

// Encodes one chunk of `values` values at `out` (room for max_chunk_bytes(values)); returns its size.
template <class BlockCodec>
std::uint64_t encode_chunk(const BlockCodec& codec, const float* x, std::uint64_t values, std::uint8_t* out, float* side) {
  return pack_chunk(values, out, side, [&](std::uint32_t b, std::uint32_t n, std::uint8_t* body, float* block_side) {
    return codec.encode(x + std::uint64_t{b} * kBlockValues, n, body, block_side);
  });
}

// Decodes one chunk of `size` bytes, validating every count and offset before use. Returns
// nullptr, or what is wrong with the chunk. (No exceptions here: the x86 workers are
// multi-versioned with target_clones, and GCC 12 lets no exception through an ifunc dispatch -
// it terminates instead.)
template <class BlockCodec>
const char* decode_chunk(const BlockCodec& codec, const std::uint8_t* in, std::uint64_t size, std::uint64_t values, float* out) {
  const auto blocks = static_cast<std::uint32_t>((values + kBlockValues - 1) / kBlockValues);
  const std::uint32_t tb = tag_bytes(blocks);
  if (size < tb) return "shorter than its tag bytes";
  for (std::uint32_t b = blocks; b < tb; ++b) {
    if (in[b] != 0) return "non-zero tag padding";
  }
  std::uint64_t body_total = 0;
  for (std::uint32_t b = 0; b < blocks; ++b) {
    const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(kBlockValues, values - std::uint64_t{b} * kBlockValues));
    const std::uint32_t w = codec.body_words(in[b], n);
    if (w == kInvalidCount) return "invalid block tag";
    body_total += w;
  }
  if (tb + 4 * body_total > size) return "block bodies run past the chunk";
  const std::uint64_t side_start = tb + 4 * body_total;
  if ((size - side_start) % 4 != 0) return "side area is not a whole number of values";
  const std::uint64_t side_avail = (size - side_start) / 4;
  std::uint64_t pos = tb, side_pos = 0;
  for (std::uint32_t b = 0; b < blocks; ++b) {
    const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(kBlockValues, values - std::uint64_t{b} * kBlockValues));
    const std::uint8_t tag = in[b];
    const std::uint32_t s = codec.side_count(tag, in + pos, n);
    if (s == kInvalidCount || side_pos + s > side_avail) return "bad raw-value count";
    codec.decode(tag, in + pos, in + side_start + 4 * side_pos, n, out + std::uint64_t{b} * kBlockValues);
    pos += 4 * std::uint64_t{codec.body_words(tag, n)};
    side_pos += s;
  }
  if (side_pos != side_avail) return "unused bytes at the end";
  return nullptr;
}

// Where one thread's range of chunks is written. The chunk encoders write straight into the
// caller's output (no per-call scratch that would be page-faulted on every call): range t starts
// at the sum of the worst-case sizes of the chunks before it, so ranges never overlap, and
// gather_ranges() then moves them down to be contiguous (with one thread nothing moves). A range
// whose region runs out continues in a heap overflow; that happens only to szh, whose code table
// sits before the chunks, on data that ends up stored verbatim anyway. The overflow grows with
// malloc, which reports failure instead of throwing (a range must not throw: parallel_ranges).
struct RangeOutput {
  struct Free {
    void operator()(std::uint8_t* p) const noexcept { std::free(p); }
  };
  std::uint8_t* region = nullptr;
  std::uint64_t room = 0;  // bytes available at region
  std::uint64_t used = 0;  // bytes written at region
  bool overflowing = false;
  bool out_of_memory = false;  // the overflow could not grow: the range stopped
  std::unique_ptr<std::uint8_t[], Free> overflow;  // bytes after the region's ones
  std::uint64_t overflow_size = 0, overflow_capacity = 0;

  // Somewhere to write a chunk of at most `worst` bytes, or nullptr (out_of_memory); commit()
  // its size before the next one.
  std::uint8_t* reserve(std::uint64_t worst) noexcept {
    if (!overflowing && room - used >= worst) return region + used;
    overflowing = true;
    if (overflow_capacity - overflow_size < worst) {
      const std::uint64_t capacity = std::max(2 * overflow_capacity, overflow_size + worst);
      auto* grown = static_cast<std::uint8_t*>(std::realloc(overflow.get(), capacity));
      if (grown == nullptr) {
        out_of_memory = true;
        return nullptr;
      }
      static_cast<void>(overflow.release());
      overflow.reset(grown);
      overflow_capacity = capacity;
    }
    return overflow.get() + overflow_size;
  }
  void commit(std::uint64_t size) noexcept { (overflowing ? overflow_size : used) += size; }
  std::uint64_t total() const { return used + overflow_size; }
};

// std::bad_alloc, in the calling thread, when a range's overflow could not grow.
inline void check_range_outputs(const std::vector<RangeOutput>& ranges) {
  for (const RangeOutput& r : ranges) {
    if (r.out_of_memory) throw std::bad_alloc();
  }
}

// Regions for `threads` ranges of parallel_ranges(chunks, threads) over an area of `room` bytes
// at `dst`; `worst_full` = worst-case bytes of a full chunk (all chunks but the last are full).
inline std::vector<RangeOutput> range_outputs(std::uint8_t* dst, std::uint64_t room, std::uint64_t chunks, unsigned threads,
                                              std::uint64_t worst_full) {
  std::vector<RangeOutput> r(threads);
  for (unsigned t = 0; t < threads; ++t) {
    const std::uint64_t begin = std::min(room, worst_full * (chunks * t / threads));
    const std::uint64_t end = t + 1 == threads ? room : std::min(room, worst_full * (chunks * (t + 1) / threads));
    r[t].region = dst + begin;
    r[t].room = end - begin;
  }
  return r;
}

// Moves the ranges' bytes down to dst, in order; returns the total. Safe because range t's
// bytes never exceed its region's worst case, so its final place ends before range t+1's region
// begins (memmove handles the overlap with its own region).
inline std::uint64_t gather_ranges(std::uint8_t* dst, const std::vector<RangeOutput>& ranges) {
  std::uint64_t pos = 0;
  for (const auto& r : ranges) {
    if (r.used != 0 && dst + pos != r.region) std::memmove(dst + pos, r.region, r.used);
    pos += r.used;
    if (r.overflow_size != 0) std::memcpy(dst + pos, r.overflow.get(), r.overflow_size);
    pos += r.overflow_size;
  }
  return pos;
}

// Writes (chunks + 1) u64 offsets and the chunks at `out` (room for chunked_bytes_max(n));
// returns the bytes written.
inline std::uint64_t chunked_bytes_max(std::uint64_t n) {
  return 8 * (chunk_count(n) + 1) + (n + kBlockValues - 1) / kBlockValues + 3 * chunk_count(n) + 4 * n;
}
template <class BlockCodec>
std::uint64_t encode_chunked(const BlockCodec& codec, const float* x, std::uint64_t n, unsigned threads, std::span<std::byte> out) {
  const std::uint64_t chunks = chunk_count(n);
  threads = resolve_threads(threads, chunks);
  auto* table = reinterpret_cast<std::uint8_t*>(out.data());
  std::uint8_t* data = table + 8 * (chunks + 1);
  std::vector<std::uint64_t> sizes(chunks);
  const RangeScratch<float> sides = per_range_scratch<float>(threads, kChunkValues);
  threads = sides.threads;
  std::vector<RangeOutput> ranges = range_outputs(data, out.size() - 8 * (chunks + 1), chunks, threads, max_chunk_bytes(kChunkValues));
  parallel_ranges(chunks, threads, [&](std::uint64_t c0, std::uint64_t c1, unsigned t) noexcept {
    RangeOutput& r = ranges[t];
    for (std::uint64_t c = c0; c < c1; ++c) {
      const std::uint64_t worst = max_chunk_bytes(chunk_values(n, c));
      std::uint8_t* at = r.reserve(worst);  // never overflows: the output has every chunk's worst case
      if (at == nullptr) return;
      sizes[c] = ChunkWorkers<BlockCodec>::encode(codec, x + c * kChunkValues, chunk_values(n, c), at, sides.of(t));
      r.commit(sizes[c]);
    }
  });
  check_range_outputs(ranges);
  const std::uint64_t total = gather_ranges(data, ranges);
  std::uint64_t offset = 0;
  for (std::uint64_t c = 0; c <= chunks; ++c) {
    std::memcpy(table + 8 * c, &offset, 8);
    if (c < chunks) offset += sizes[c];
  }
  return 8 * (chunks + 1) + total;
}

// Reads and validates the chunk table at the start of `payload`: offsets relative to the end of
// the table, starting at 0, non-decreasing, each chunk within its worst-case size, the last
// one ending exactly at the end of the payload. `base`: the stream offset of payload[0], for
// the error messages.
inline std::vector<std::uint64_t> read_chunk_table(std::span<const std::byte> payload, std::uint64_t n, std::uint64_t base = 0) {
  const std::uint64_t chunks = chunk_count(n);
  if (payload.size() / 8 < chunks + 1) {
    throw_corrupt_at(base, "the " + std::to_string(payload.size()) + " bytes left cannot hold the chunk table of " +
                               std::to_string(chunks + 1) + " u64 offsets that " + std::to_string(n) + " values need");
  }
  const std::uint64_t data_size = payload.size() - 8 * (chunks + 1);
  std::vector<std::uint64_t> offsets(chunks + 1);
  std::memcpy(offsets.data(), payload.data(), 8 * (chunks + 1));
  if (offsets[0] != 0) throw_corrupt_at(base, "first chunk offset is " + std::to_string(offsets[0]) + " (expected 0)");
  if (offsets[chunks] != data_size) {
    throw_corrupt_at(base + 8 * chunks, "chunk table ends at " + std::to_string(offsets[chunks]) + " but the chunks hold " +
                                            std::to_string(data_size) + " bytes");
  }
  for (std::uint64_t c = 0; c < chunks; ++c) {
    if (offsets[c + 1] < offsets[c] || offsets[c + 1] - offsets[c] > max_chunk_bytes(chunk_values(n, c))) {
      throw_corrupt_at(base + 8 * (c + 1), "offset " + std::to_string(offsets[c + 1]) + " of chunk " + std::to_string(c + 1) +
                                               " is before the previous one or past chunk " + std::to_string(c) +
                                               "'s worst case (" + std::to_string(max_chunk_bytes(chunk_values(n, c))) + " bytes)");
    }
  }
  return offsets;
}

// Decodes the offsets table + chunks in `payload` (at stream offset `base`) into out[0..n).
template <class BlockCodec>
void decode_chunked(const BlockCodec& codec, std::span<const std::byte> payload, float* out, std::uint64_t n, unsigned threads,
                    std::uint64_t base = 0) {
  const std::uint64_t chunks = chunk_count(n);
  const std::vector<std::uint64_t> offsets = read_chunk_table(payload, n, base);
  const auto* data = reinterpret_cast<const std::uint8_t*>(payload.data() + 8 * (chunks + 1));
  std::vector<RangeError> errors(resolve_threads(threads, chunks));
  parallel_ranges(chunks, threads, [&](std::uint64_t c0, std::uint64_t c1, unsigned t) noexcept {
    for (std::uint64_t c = c0; c < c1; ++c) {
      const char* error =
          ChunkWorkers<BlockCodec>::decode(codec, data + offsets[c], offsets[c + 1] - offsets[c], chunk_values(n, c), out + c * kChunkValues);
      if (error != nullptr) {
        errors[t] = {error, c, base + 8 * (chunks + 1) + offsets[c]};
        return;
      }
    }
  });
  throw_first_range_error(errors);
}

}  // namespace comptrain::kernels::detail

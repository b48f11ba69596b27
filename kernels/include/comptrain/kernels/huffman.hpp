#pragma once
// Huffman stage of `szh` (host code, as in cuSZ, which builds the codebook on the host): a
// canonical, length-limited prefix code over 16-bit symbols, its serialised state, and MSB-first
// bit I/O that never touches memory outside the given buffer.
//
// Construction: Huffman's algorithm on the histogram; when the longest code exceeds kMaxLength,
// the frequencies are halved (rounding up, so no symbol disappears) and the tree rebuilt - the
// simple heuristic of SZ3/zlib-era encoders instead of package-merge: it costs a fraction of a
// percent of ratio only on pathological histograms. Codes are canonical (ordered by length, then
// symbol), so the state is just (symbol, length) pairs, like SZ3's HuffmanEncoder::save.
//
// State: u32 m | m x (u16 symbol, u8 length), symbols strictly increasing. load() validates
// everything a decoder relies on: m, order, lengths in 1..kMaxLength and the Kraft inequality
// (which makes the canonical assignment fit in each length).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <queue>
#include <span>
#include <utility>
#include <vector>

#include "comptrain/kernels/hd.hpp"

namespace comptrain::kernels {

class HuffmanCode {
 public:
  static constexpr std::uint32_t kAlphabet = 65536;
  static constexpr std::uint32_t kMaxLength = 24;  // codes fit a 32-bit flush with room to spare
  static_assert(7 + 2 * kMaxLength < 64, "Writer::put_wide joins two codes in a 64-bit accumulator");
  static constexpr std::uint32_t kLutBits = 12;    // 16 KiB decode table, in L1 (14 bits measured slower)

  // (symbol, code length) of every symbol present, by symbol: the serialised state.
  using Lengths = std::vector<std::pair<std::uint16_t, std::uint8_t>>;

  // From a histogram of kAlphabet counts. No symbol present -> the empty code.
  static HuffmanCode build(std::span<const std::uint64_t> histogram) { return from_lengths(lengths(histogram)); }

  // The code lengths build() assigns codes to, without building the tables (to compare codes).
  static Lengths lengths(std::span<const std::uint64_t> histogram) {
    Lengths entries;
    std::vector<std::uint64_t> freq;
    std::vector<std::uint16_t> present;
    for (std::uint32_t s = 0; s < kAlphabet && s < histogram.size(); ++s) {
      if (histogram[s] != 0) {
        present.push_back(static_cast<std::uint16_t>(s));
        freq.push_back(histogram[s]);
      }
    }
    if (present.size() == 1) entries.emplace_back(present[0], std::uint8_t{1});  // a prefix code needs >= 1 bit
    if (present.size() > 1) {
      for (;;) {
        const std::vector<std::uint8_t> len = code_lengths(freq);
        if (*std::max_element(len.begin(), len.end()) <= kMaxLength) {
          for (std::size_t i = 0; i < present.size(); ++i) entries.emplace_back(present[i], len[i]);
          break;
        }
        for (auto& f : freq) f = (f + 1) / 2;  // flattens the distribution; converges to a balanced tree
      }
    }
    return entries;
  }
  static HuffmanCode from_lengths(Lengths entries) {
    HuffmanCode c;
    c.assign(std::move(entries), true);
    return c;
  }

  bool empty() const { return entries_.empty(); }
  std::uint64_t state_bytes() const { return 4 + 3 * std::uint64_t{entries_.size()}; }

  void save(std::uint8_t* out) const {
    hd::store_u32(out, static_cast<std::uint32_t>(entries_.size()));
    out += 4;
    for (const auto& [symbol, length] : entries_) {
      out[0] = static_cast<std::uint8_t>(symbol & 0xFFu);
      out[1] = static_cast<std::uint8_t>(symbol >> 8);
      out[2] = length;
      out += 3;
    }
  }

  // Parses the state at in[0..size); on success sets `used` and returns nullptr, else says why.
  static const char* load(const std::uint8_t* in, std::uint64_t size, HuffmanCode& code, std::uint64_t& used) {
    if (size < 4) return "code table truncated";
    const std::uint32_t m = hd::load_u32(in);
    if (m > kAlphabet) return "code table has too many symbols";
    if (size - 4 < 3 * std::uint64_t{m}) return "code table truncated";
    std::vector<std::pair<std::uint16_t, std::uint8_t>> entries(m);
    std::uint64_t kraft = 0;  // sum of 2^(kMaxLength - length) <= 2^kMaxLength
    for (std::uint32_t i = 0; i < m; ++i) {
      const std::uint8_t* e = in + 4 + 3 * std::uint64_t{i};
      const auto symbol = static_cast<std::uint16_t>(e[0] | (e[1] << 8));
      const std::uint8_t length = e[2];
      if (length == 0 || length > kMaxLength) return "bad code length";
      if (i > 0 && symbol <= entries[i - 1].first) return "code table symbols out of order";
      entries[i] = {symbol, length};
      kraft += std::uint64_t{1} << (kMaxLength - length);
    }
    if (kraft > (std::uint64_t{1} << kMaxLength)) return "code lengths violate the Kraft inequality";
    code.assign(std::move(entries), false);
    used = 4 + 3 * std::uint64_t{m};
    return nullptr;
  }

  // Encoder table lookups (symbol must be present; built codes only, not loaded ones).
  std::uint32_t length(std::uint16_t s) const { return enc_[s] & 31u; }
  std::uint32_t code(std::uint16_t s) const { return enc_[s] >> 5; }
  bool has(std::uint16_t s) const { return enc_[s] != 0; }

  // The encoder table itself, for loops that must not reload it through the class on every
  // symbol (byte stores may alias it as far as the compiler knows): code << 5 | length.
  const std::uint32_t* encoder_table() const { return enc_.data(); }

  // MSB-first writer. put() is branch-free: it stores the 8 bytes at the current byte position
  // every time (the pending bits, left-aligned, zero below) and advances by the whole bytes
  // completed, so the buffer needs 8 bytes of room at out + pos before every put() - the caller
  // checks room() or sizes the buffer (kMaxLength bits per symbol + 8 bytes). put_bounded()
  // stores byte by byte and never writes at or past `limit`: for the end of a tight buffer.
  struct Writer {
    std::uint8_t* out;
    std::uint64_t pos = 0;   // whole bytes written
    std::uint64_t acc = 0;   // pending bits, left-aligned
    std::uint32_t bits = 0;  // pending bits (< 8 between calls)
    void put(std::uint32_t code, std::uint32_t length) { put_wide(code, length); }
    // Up to 56 bits at once (two codes of at most kMaxLength bits joined: the serial dependency of
    // the accumulator is then paid once per pair).
    void put_wide(std::uint64_t code, std::uint32_t length) {
      bits += length;  // <= 7 + 2 kMaxLength < 64
      acc |= code << (64 - bits);
      const std::uint64_t be = __builtin_bswap64(acc);
      std::memcpy(out + pos, &be, 8);
      pos += bits >> 3;
      acc <<= bits & ~7u;
      bits &= 7u;
    }
    // False (and nothing written at or past limit) when the code does not fit below limit.
    bool put_bounded(std::uint32_t code, std::uint32_t length, std::uint64_t limit) {
      bits += length;
      acc |= std::uint64_t{code} << (64 - bits);
      for (; bits >= 8; bits -= 8) {
        if (pos >= limit) return false;
        out[pos++] = static_cast<std::uint8_t>(acc >> 56);
        acc <<= 8;
      }
      return true;
    }
    // Flushes (zero-padding the last byte); returns the bytes written.
    std::uint64_t finish() {
      if (bits > 0) out[pos++] = static_cast<std::uint8_t>(acc >> 56);
      acc = 0;
      bits = 0;
      return pos;
    }
  };

  // MSB-first reader over in[0..size): bytes past the end read as zero, so a truncated or forged
  // bitstream never reads out of bounds; the caller checks consumed() against the size after.
  struct Reader {
    const std::uint8_t* in;
    std::uint64_t size;
    std::uint64_t pos = 0;   // next byte to load (may run past size: virtual zero bytes)
    std::uint64_t buf = 0;   // valid bits left-aligned
    std::uint32_t bits = 0;  // number of valid bits in buf

    void refill() {
      if (pos + 8 <= size) {
        // Branch-light refill: the bits below the new valid ones are the following bytes of the
        // stream, which later refills OR in again at the same positions (idempotent).
        std::uint64_t w;
        std::memcpy(&w, in + pos, 8);
        buf |= __builtin_bswap64(w) >> bits;
        const std::uint32_t advance = (63 - bits) >> 3;
        pos += advance;
        bits += 8 * advance;
        return;
      }
      while (bits <= 56) {
        const std::uint64_t byte = pos < size ? in[pos] : 0;
        buf |= byte << (56 - bits);
        ++pos;
        bits += 8;
      }
    }
    std::uint64_t consumed() const { return 8 * pos - bits; }
  };

  // Decodes one symbol; false for a bit pattern that is no code (incomplete code, forged stream).
  bool decode(Reader& r, std::uint16_t& symbol) const {
    r.refill();
    const std::uint32_t e = lut_[static_cast<std::size_t>(r.buf >> (64 - kLutBits))];
    if (e != 0) {
      const std::uint32_t len = e & 31u;
      symbol = static_cast<std::uint16_t>(e >> 8);
      r.buf <<= len;
      r.bits -= len;
      return true;
    }
    for (std::uint32_t len = kLutBits + 1; len <= kMaxLength; ++len) {
      const auto c = static_cast<std::uint32_t>(r.buf >> (64 - len));
      const std::uint32_t k = c - first_[len];  // wraps to a huge value below first_[len]
      if (k < count_[len]) {
        symbol = sorted_[offset_[len] + k];
        r.buf <<= len;
        r.bits -= len;
        return true;
      }
    }
    return false;
  }

 private:
  // Huffman code lengths of freq (size >= 2): min-heap with deterministic tie-breaking (by
  // node id), so every thread count and run builds the same code.
  static std::vector<std::uint8_t> code_lengths(const std::vector<std::uint64_t>& freq) {
    const std::size_t k = freq.size();
    std::vector<std::uint32_t> parent(2 * k - 1, 0);
    using Node = std::pair<std::uint64_t, std::uint32_t>;
    std::priority_queue<Node, std::vector<Node>, std::greater<>> heap;
    for (std::size_t i = 0; i < k; ++i) heap.emplace(freq[i], static_cast<std::uint32_t>(i));
    auto next = static_cast<std::uint32_t>(k);
    while (heap.size() > 1) {
      const Node a = heap.top();
      heap.pop();
      const Node b = heap.top();
      heap.pop();
      parent[a.second] = parent[b.second] = next;
      heap.emplace(a.first + b.first, next++);
    }
    // Parents are created after their children: one downward pass gives every depth.
    std::vector<std::uint32_t> depth(2 * k - 1, 0);
    for (std::size_t i = 2 * k - 1; i-- > 0;) {
      if (i != 2 * k - 2) depth[i] = depth[parent[i]] + 1;
    }
    std::vector<std::uint8_t> len(k);
    for (std::size_t i = 0; i < k; ++i) len[i] = static_cast<std::uint8_t>(std::min<std::uint32_t>(depth[i], 255));
    return len;
  }

  // Canonical assignment from (symbol, length) pairs sorted by symbol with Kraft sum <= 1. The
  // 256 KiB encoder table only for codes that encode (a decoder does not need it, and allocating
  // it per stream cost page faults on every call).
  void assign(Lengths entries, bool encoder) {
    entries_ = std::move(entries);
    enc_.assign(encoder ? kAlphabet : 0, 0);
    lut_.assign(std::size_t{1} << kLutBits, 0);
    std::fill(std::begin(count_), std::end(count_), 0u);
    for (const auto& e : entries_) ++count_[e.second];
    std::uint32_t code = 0, index = 0;
    for (std::uint32_t len = 1; len <= kMaxLength; ++len) {
      first_[len] = code;
      offset_[len] = index;
      code = (code + count_[len]) << 1;
      index += count_[len];
    }
    sorted_.assign(entries_.size(), 0);
    std::uint32_t next[kMaxLength + 1];
    std::copy(std::begin(offset_), std::end(offset_), next);
    for (const auto& [symbol, len] : entries_) {  // by symbol within each length: canonical order
      const std::uint32_t slot = next[len]++;
      sorted_[slot] = symbol;
      const std::uint32_t c = first_[len] + (slot - offset_[len]);
      if (encoder) enc_[symbol] = (c << 5) | len;
      if (len <= kLutBits) {
        const std::uint32_t lo = c << (kLutBits - len), span = 1u << (kLutBits - len);
        for (std::uint32_t j = 0; j < span; ++j) lut_[lo + j] = (std::uint32_t{symbol} << 8) | len;
      }
    }
  }

  std::vector<std::pair<std::uint16_t, std::uint8_t>> entries_;  // by symbol: the serialised state
  std::vector<std::uint32_t> enc_;     // symbol -> code << 5 | length (0: absent)
  std::vector<std::uint32_t> lut_;     // top kLutBits bits -> symbol << 8 | length (0: longer or no code)
  std::vector<std::uint16_t> sorted_;  // symbols in canonical order
  std::uint32_t count_[kMaxLength + 1]{};
  std::uint32_t first_[kMaxLength + 1]{};
  std::uint32_t offset_[kMaxLength + 1]{};
};

}  // namespace comptrain::kernels

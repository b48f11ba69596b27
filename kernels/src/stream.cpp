#include "comptrain/kernels/stream.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "comptrain/kernels/codec.hpp"

namespace comptrain::kernels {

static_assert(std::endian::native == std::endian::little, "streams are little-endian; big-endian hosts need byte swaps");

namespace {

// xxHash primes (xxHash specification, "XXH64 algorithm description").
constexpr std::uint64_t kP1 = 0x9E3779B185EBCA87ull;
constexpr std::uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
constexpr std::uint64_t kP3 = 0x165667B19E3779F9ull;
constexpr std::uint64_t kP4 = 0x85EBCA77C2B2AE63ull;
constexpr std::uint64_t kP5 = 0x27D4EB2F165667C5ull;

std::uint64_t rd64(const std::byte* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
std::uint32_t rd32(const std::byte* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
std::uint64_t xround(std::uint64_t acc, std::uint64_t input) {
  acc += input * kP2;
  acc = std::rotl(acc, 31);
  return acc * kP1;
}
std::uint64_t xmerge(std::uint64_t acc, std::uint64_t v) {
  acc ^= xround(0, v);
  return acc * kP1 + kP4;
}

template <class T>
void put(std::byte* out, std::size_t offset, T value) {
  std::memcpy(out + offset, &value, sizeof value);
}
template <class T>
T get(const std::byte* in, std::size_t offset) {
  T value;
  std::memcpy(&value, in + offset, sizeof value);
  return value;
}

constexpr std::size_t kChecksumOffset = 88;

}  // namespace

std::uint64_t xxh64(std::span<const std::byte> data, std::uint64_t seed) {
  const std::byte* p = data.data();
  const std::byte* const end = p + data.size();
  std::uint64_t h;
  if (data.size() >= 32) {
    std::uint64_t v1 = seed + kP1 + kP2, v2 = seed + kP2, v3 = seed, v4 = seed - kP1;
    const std::byte* const limit = end - 32;
    do {
      v1 = xround(v1, rd64(p));
      v2 = xround(v2, rd64(p + 8));
      v3 = xround(v3, rd64(p + 16));
      v4 = xround(v4, rd64(p + 24));
      p += 32;
    } while (p <= limit);
    h = std::rotl(v1, 1) + std::rotl(v2, 7) + std::rotl(v3, 12) + std::rotl(v4, 18);
    h = xmerge(h, v1);
    h = xmerge(h, v2);
    h = xmerge(h, v3);
    h = xmerge(h, v4);
  } else {
    h = seed + kP5;
  }
  h += static_cast<std::uint64_t>(data.size());
  while (p + 8 <= end) {
    h ^= xround(0, rd64(p));
    h = std::rotl(h, 27) * kP1 + kP4;
    p += 8;
  }
  if (p + 4 <= end) {
    h ^= static_cast<std::uint64_t>(rd32(p)) * kP1;
    h = std::rotl(h, 23) * kP2 + kP3;
    p += 4;
  }
  while (p < end) {
    h ^= static_cast<std::uint64_t>(std::to_integer<std::uint8_t>(*p)) * kP5;
    h = std::rotl(h, 11) * kP1;
    ++p;
  }
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

void write_header(const Header& h, std::byte* out) {
  std::memcpy(out, kMagic.data(), 4);
  put<std::uint16_t>(out, 4, kFormatVersion);
  put<std::uint8_t>(out, 6, static_cast<std::uint8_t>(h.codec));
  put<std::uint8_t>(out, 7, static_cast<std::uint8_t>(h.type));
  put<std::uint8_t>(out, 8, static_cast<std::uint8_t>(h.mode));
  put<std::uint8_t>(out, 9, h.rank);
  put<std::uint16_t>(out, 10, static_cast<std::uint16_t>(kHeaderSize));
  put<std::uint32_t>(out, 12, h.codec_param);
  for (std::size_t i = 0; i < kMaxRank; ++i) put<std::uint64_t>(out, 16 + 8 * i, h.dims[i]);
  put<std::uint64_t>(out, 48, h.count);
  put<double>(out, 56, h.eb_given);
  put<double>(out, 64, h.eb_abs);
  put<std::uint64_t>(out, 72, h.payload_size);
  put<std::uint64_t>(out, 80, 0);
  put<std::uint64_t>(out, kChecksumOffset, h.checksum);
}

std::uint64_t stream_checksum(std::span<const std::byte> stream) {
  const std::uint64_t seed = xxh64(stream.first(kChecksumOffset), 0);
  return xxh64(stream.subspan(kHeaderSize), seed);
}

Header read_header(std::span<const std::byte> s) {
  const std::byte* in = s.data();
  if (s.size() < 4 || std::memcmp(in, kMagic.data(), 4) != 0) {
    throw StreamError("not a comptrain compressed stream (bad magic; expected \"CTKZ\")");
  }
  if (s.size() < 6) throw StreamError("truncated stream: " + std::to_string(s.size()) + " bytes, no format version");
  const auto version = get<std::uint16_t>(in, 4);
  if (version != kFormatVersion) {
    throw StreamError("unsupported stream format version " + std::to_string(version) + " (this build reads version " +
                      std::to_string(kFormatVersion) + ")");
  }
  if (s.size() < kHeaderSize) {
    throw StreamError("truncated stream: " + std::to_string(s.size()) + " bytes, shorter than the " +
                      std::to_string(kHeaderSize) + "-byte header");
  }
  Header h;
  const auto codec = get<std::uint8_t>(in, 6);
  if (codec_info_or_null(static_cast<CodecId>(codec)) == nullptr) {
    throw StreamError("unknown codec id " + std::to_string(codec) + " in stream header");
  }
  h.codec = static_cast<CodecId>(codec);
  if (get<std::uint8_t>(in, 7) != static_cast<std::uint8_t>(ElementType::float32)) {
    throw StreamError("unsupported element type " + std::to_string(get<std::uint8_t>(in, 7)) + " (only 1 = float32)");
  }
  const auto mode = get<std::uint8_t>(in, 8);
  if (mode > static_cast<std::uint8_t>(BoundMode::rel)) throw StreamError("bad error-bound mode " + std::to_string(mode));
  h.mode = static_cast<BoundMode>(mode);
  h.rank = get<std::uint8_t>(in, 9);
  if (h.rank < 1 || h.rank > kMaxRank) throw StreamError("bad rank " + std::to_string(h.rank) + " (1..4)");
  if (get<std::uint16_t>(in, 10) != kHeaderSize) throw StreamError("bad header size field");
  h.codec_param = get<std::uint32_t>(in, 12);
  std::uint64_t product = 1;
  bool overflow = false;
  for (std::size_t i = 0; i < kMaxRank; ++i) {
    h.dims[i] = get<std::uint64_t>(in, 16 + 8 * i);
    if (i >= h.rank && h.dims[i] != 1) throw StreamError("shape dimension " + std::to_string(i) + " beyond the rank is not 1");
    if (h.dims[i] != 0 && product > std::numeric_limits<std::uint64_t>::max() / h.dims[i]) overflow = true;
    product *= h.dims[i];
  }
  h.count = get<std::uint64_t>(in, 48);
  if (overflow || product != h.count) throw StreamError("shape does not match the element count");
  if (h.count > kMaxElements) throw StreamError("element count " + std::to_string(h.count) + " exceeds the supported maximum");
  h.eb_given = get<double>(in, 56);
  h.eb_abs = get<double>(in, 64);
  if (!(h.eb_abs >= 0.0) || !std::isfinite(h.eb_abs) || !(h.eb_given >= 0.0) || !std::isfinite(h.eb_given)) {
    throw StreamError("bad error bound in stream header");
  }
  h.payload_size = get<std::uint64_t>(in, 72);
  if (get<std::uint64_t>(in, 80) != 0) throw StreamError("reserved header field is not zero");
  h.checksum = get<std::uint64_t>(in, kChecksumOffset);
  const std::uint64_t actual_payload = s.size() - kHeaderSize;
  if (h.payload_size != actual_payload) {
    throw StreamError(h.payload_size > actual_payload
                          ? "truncated stream: payload is " + std::to_string(actual_payload) + " bytes, header says " +
                                std::to_string(h.payload_size)
                          : "stream has " + std::to_string(actual_payload - h.payload_size) + " trailing bytes");
  }
  if (stream_checksum(s) != h.checksum) throw StreamError("stream checksum mismatch (corrupted data)");
  return h;
}

}  // namespace comptrain::kernels

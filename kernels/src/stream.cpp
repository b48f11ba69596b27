#include "comptrain/kernels/stream.hpp"

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>

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

void throw_corrupt_at(std::uint64_t offset, const std::string& what) {
  throw StreamError("corrupted stream at byte " + std::to_string(offset) + ": " + what);
}

namespace {
std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}
}  // namespace

Header read_header(std::span<const std::byte> s) {
  const std::byte* in = s.data();
  if (s.size() < 4 || std::memcmp(in, kMagic.data(), 4) != 0) {
    throw StreamError("not a comptrain compressed stream (bad magic at byte 0; expected \"CTKZ\")");
  }
  if (s.size() < 6) throw StreamError("truncated stream: " + std::to_string(s.size()) + " bytes, no format version (byte 4)");
  const auto version = get<std::uint16_t>(in, field::kVersion);
  if (version != kFormatVersion) {
    throw StreamError("unsupported stream format version " + std::to_string(version) + " at byte 4 (this build reads version " +
                      std::to_string(kFormatVersion) + ")");
  }
  if (s.size() < kHeaderSize) {
    throw StreamError("truncated stream: " + std::to_string(s.size()) + " bytes, shorter than the " +
                      std::to_string(kHeaderSize) + "-byte header");
  }
  Header h;
  const auto codec = get<std::uint8_t>(in, field::kCodec);
  const CodecInfo* info = codec_info_or_null(static_cast<CodecId>(codec));
  if (info == nullptr) throw_corrupt_at(field::kCodec, "unknown codec id " + std::to_string(codec));
  h.codec = static_cast<CodecId>(codec);
  if (get<std::uint8_t>(in, field::kType) != static_cast<std::uint8_t>(ElementType::float32)) {
    throw_corrupt_at(field::kType, "unsupported element type " + std::to_string(get<std::uint8_t>(in, field::kType)) + " (only 1 = float32)");
  }
  const auto mode = get<std::uint8_t>(in, field::kMode);
  if (mode > static_cast<std::uint8_t>(BoundMode::rel)) {
    throw_corrupt_at(field::kMode, "bad error-bound mode " + std::to_string(mode) + " (0 none, 1 abs, 2 rel)");
  }
  h.mode = static_cast<BoundMode>(mode);
  // The encoder stores mode none exactly for the codecs that ignore --eb.
  if (info->error_bounded != (h.mode != BoundMode::none)) {
    throw_corrupt_at(field::kMode, "error-bound mode " + std::to_string(mode) + " for codec " + std::string(info->name) +
                                (info->error_bounded ? ", which needs abs (1) or rel (2)" : ", which is not error-bounded (expected 0)"));
  }
  h.rank = get<std::uint8_t>(in, field::kRank);
  if (h.rank < 1 || h.rank > kMaxRank) throw_corrupt_at(field::kRank, "bad rank " + std::to_string(h.rank) + " (expected 1..4)");
  if (get<std::uint16_t>(in, field::kHeaderSize) != kHeaderSize) {
    throw_corrupt_at(field::kHeaderSize, "header size field is " + std::to_string(get<std::uint16_t>(in, field::kHeaderSize)) +
                                             " (expected " + std::to_string(kHeaderSize) + ")");
  }
  h.codec_param = get<std::uint32_t>(in, field::kCodecParam);
  for (std::size_t i = 0; i < kMaxRank; ++i) {
    h.dims[i] = get<std::uint64_t>(in, field::kDims + 8 * i);
    if (i >= h.rank && h.dims[i] != 1) {
      throw_corrupt_at(field::kDims + 8 * i, "shape dimension " + std::to_string(i) + " beyond rank " + std::to_string(h.rank) + " is " +
                                          std::to_string(h.dims[i]) + " (expected 1)");
    }
  }
  // The .npy reader's rule (element_count): a 0 anywhere makes the count 0; otherwise the
  // product must stay within kMaxElements.
  std::string shape;
  for (std::size_t i = 0; i < h.rank; ++i) shape += (i ? " x " : "") + std::to_string(h.dims[i]);
  const std::optional<std::uint64_t> product = element_count(std::span(h.dims).first(h.rank));
  if (!product) {
    throw_corrupt_at(field::kDims, "the shape " + shape + " has more than " + std::to_string(kMaxElements) +
                                       " elements (the supported maximum)");
  }
  h.count = get<std::uint64_t>(in, field::kCount);
  if (*product != h.count) {
    throw_corrupt_at(field::kCount, "element count " + std::to_string(h.count) + " is not the product of the shape " + shape + " (" +
                                        std::to_string(*product) + ")");
  }
  h.eb_given = get<double>(in, field::kEbGiven);
  h.eb_abs = get<double>(in, field::kEbAbs);
  if (!(h.eb_given >= 0.0) || !std::isfinite(h.eb_given)) {
    throw_corrupt_at(field::kEbGiven, "error bound " + number(h.eb_given) + " is not a finite number >= 0");
  }
  if (!(h.eb_abs >= 0.0) || !std::isfinite(h.eb_abs)) {
    throw_corrupt_at(field::kEbAbs, "absolute error bound " + number(h.eb_abs) + " is not a finite number >= 0");
  }
  switch (h.mode) {
    case BoundMode::none:  // the encoder leaves both at 0
      if (h.eb_given != 0.0) throw_corrupt_at(field::kEbGiven, "error bound " + number(h.eb_given) + " with mode none (expected 0)");
      if (h.eb_abs != 0.0) throw_corrupt_at(field::kEbAbs, "absolute error bound " + number(h.eb_abs) + " with mode none (expected 0)");
      break;
    case BoundMode::abs:  // enforced = given
      if (h.eb_abs != h.eb_given) {
        throw_corrupt_at(field::kEbAbs, "absolute error bound " + number(h.eb_abs) + " differs from the given absolute bound " +
                                     number(h.eb_given) + " (byte 56)");
      }
      break;
    case BoundMode::rel: {  // enforced = given x (max - min) of finite floats, a range below 2 FLT_MAX
      const double widest = h.eb_given * 2.0 * static_cast<double>(std::numeric_limits<float>::max());
      if (h.eb_abs > widest) {
        throw_corrupt_at(field::kEbAbs, "absolute error bound " + number(h.eb_abs) + " exceeds the relative bound " + number(h.eb_given) +
                                     " times the widest float range (" + number(widest) + ")");
      }
      break;
    }
  }
  h.payload_size = get<std::uint64_t>(in, field::kPayloadSize);
  if (get<std::uint64_t>(in, field::kReserved) != 0) throw_corrupt_at(field::kReserved, "reserved header field is not zero");
  h.checksum = get<std::uint64_t>(in, kChecksumOffset);
  const std::uint64_t actual_payload = s.size() - kHeaderSize;
  if (h.payload_size != actual_payload) {
    throw StreamError(h.payload_size > actual_payload
                          ? "truncated stream: payload is " + std::to_string(actual_payload) + " bytes, header says " +
                                std::to_string(h.payload_size) + " (byte 72)"
                          : "stream has " + std::to_string(actual_payload - h.payload_size) + " trailing bytes after byte " +
                                std::to_string(kHeaderSize + h.payload_size) + " (payload size at byte 72)");
  }
  if (stream_checksum(s) != h.checksum) {
    throw StreamError("stream checksum mismatch (corrupted data; checksum at byte 88 covers the header and the payload)");
  }
  return h;
}

}  // namespace comptrain::kernels

#pragma once
// The container every codec writes: a fixed 96-byte little-endian header, then the payload.
//
//   off size field
//     0    4 magic "CTKZ"
//     4    2 format version (kFormatVersion)
//     6    1 codec id (CodecId)
//     7    1 element type (1 = float32)
//     8    1 error-bound mode (BoundMode)
//     9    1 rank (1..4)
//    10    2 header size (96)
//    12    4 codec parameter (quant: bits; szp, szh: 0, or kPositiveMaskParam when the payload
//            ends with the positive mask, one bit per value (stages.hpp, PositiveMask); others 0)
//    16   32 shape, 4 x u64 (unused trailing dims are 1)
//    48    8 element count (product of the shape)
//    56    8 error bound as given (absolute, or relative to the value range)
//    64    8 absolute error bound actually enforced
//    72    8 payload size in bytes
//    80    8 reserved (0)
//    88    8 checksum: XXH64(payload, seed = XXH64(header bytes 0..88, seed 0))
// Fields are never reordered; a new field means a new version.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "comptrain/support/error_bound.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::kernels {

// A stream that is truncated, corrupted, from another program or from a newer version.
class StreamError : public InputError {
 public:
  using InputError::InputError;
};

inline constexpr std::array<char, 4> kMagic{'C', 'T', 'K', 'Z'};
inline constexpr std::uint16_t kFormatVersion = 1;
inline constexpr std::size_t kHeaderSize = 96;
inline constexpr std::size_t kMaxRank = 4;

enum class CodecId : std::uint8_t { szp = 1, zeros = 2, quant = 3, fp16 = 4, bf16 = 5, zfp = 6, szh = 7 };
// szp's and szh's codec parameter when their payload ends with the positive mask.
inline constexpr std::uint32_t kPositiveMaskParam = 1;
// The scenario's error_bound_mode and the stream's are one type (support/error_bound.hpp);
// its numeric values are this header byte's.
using BoundMode = ErrorBoundMode;
enum class ElementType : std::uint8_t { float32 = 1 };

struct Header {
  CodecId codec = CodecId::szp;
  ElementType type = ElementType::float32;
  BoundMode mode = BoundMode::abs;
  std::uint8_t rank = 1;
  std::uint32_t codec_param = 0;
  std::array<std::uint64_t, kMaxRank> dims{1, 1, 1, 1};
  std::uint64_t count = 0;
  double eb_given = 0.0;
  double eb_abs = 0.0;
  std::uint64_t payload_size = 0;
  std::uint64_t checksum = 0;
};

// Byte offsets of the header fields (the table above), for readers and for error messages.
namespace field {
inline constexpr std::size_t kMagic = 0, kVersion = 4, kCodec = 6, kType = 7, kMode = 8, kRank = 9, kHeaderSize = 10,
                             kCodecParam = 12, kDims = 16, kCount = 48, kEbGiven = 56, kEbAbs = 64, kPayloadSize = 72,
                             kReserved = 80, kChecksum = 88;
}  // namespace field

// Throws StreamError("corrupted stream at byte <offset>: <what>"): every message about a field
// of a stream names where that field is, so a forged or damaged file can be inspected with a
// hex dump. `offset` counts from the first byte of the stream (the header included).
[[noreturn]] void throw_corrupt_at(std::uint64_t offset, const std::string& what);

// XXH64 (Yann Collet, xxHash specification v0.1.1), written here to avoid a dependency.
std::uint64_t xxh64(std::span<const std::byte> data, std::uint64_t seed);

// Serialises the header (including `checksum` as given) into 96 bytes.
void write_header(const Header& h, std::byte* out);
// Computes the checksum of a complete stream whose header fields are already written.
std::uint64_t stream_checksum(std::span<const std::byte> stream);
// Parses and validates the header and the checksum of a complete stream; throws StreamError
// naming the first problem found and its byte offset. Checks every field against the others
// where the header alone allows it: the shape's product is the count, the rank is 1..4 and the
// dims beyond it are 1, the bound mode suits the codec (none exactly for the codecs that are not
// error-bounded, and then both bounds are 0), in abs mode the enforced bound is the given one, in
// rel mode it is at most the given one times the widest float range. The codec-specific checks
// of the payload against the header (codec parameter, quantiser step, sizes) are in `inspect`.
Header read_header(std::span<const std::byte> stream);

}  // namespace comptrain::kernels

#pragma once
// Public interface of the compressor kernels: compress / decompress float32 arrays.
//
// Codecs (see kernels/README.md):
//   szp    error-bounded, strict: |x - x'| <= eb for every element; NaN/Inf/-0.0 bit-exact.
//   szh    the same strict bound; Lorenzo on the codes + Huffman: higher ratio, lower speed.
//          Both can keep the positive mask (CompressOptions::positive_mask): x' > 0 iff x > 0.
//   zeros  lossless zero elimination.
//   quant  per-group k-bit quantisation (ActNN-style), NOT error-bounded.
//   fp16, bf16  casts, NOT error-bounded.
//   zfp    libzfp fixed-accuracy: a tolerance, not a strict bound (violations are reported).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "comptrain/kernels/stream.hpp"

namespace comptrain::kernels {

// Refuse absurd counts from a corrupted header before allocating (2^40 floats = 4 TiB).
inline constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 40;

// The number of elements of a shape: 0 when any dimension is 0 (whatever the others are, so
// that a (2^41, 0) array is the empty array it is), otherwise the product, or nothing when it
// exceeds kMaxElements (the product is never formed past it, so it cannot wrap). The one rule
// for every shape the kernels read: the stream header, the .npy reader, compress().
std::optional<std::uint64_t> element_count(std::span<const std::uint64_t> dims);

// The most CPU threads compress and decompress take (InputError above; 0, "all cores", means
// min(hardware threads, kMaxThreads)). Why 256: every thread costs 8 MiB of stack address space
// (glibc's default) and, for szh, 4 MiB of histograms, so 256 threads already take 3 GiB; and
// more cannot help: at szp's 2.4 GB/s per thread (README, "Benchmarks") 256 threads would move
// 614 GB/s, more than a 12-channel DDR5-4800 socket's 460.8 GB/s. The driver never starts more
// threads than there are chunks (or values, for the casts) either.
inline constexpr unsigned kMaxThreads = 256;

struct CodecInfo {
  CodecId id;
  std::string_view name;
  bool error_bounded;  // honours --eb at all
  bool strict;         // the bound holds for every element, NaN/Inf included (guaranteed)
  std::string_view summary;
};

std::span<const CodecInfo> codecs();
const CodecInfo* codec_info_or_null(CodecId id);
const CodecInfo& codec_info(CodecId id);
// Throws InputError listing the known names.
CodecId codec_from_name(std::string_view name);

struct Shape {
  std::uint8_t rank = 1;
  std::array<std::uint64_t, kMaxRank> dims{0, 1, 1, 1};
  static Shape flat(std::uint64_t n) { return Shape{1, {n, 1, 1, 1}}; }
  // element_count of the first `rank` dimensions; InputError when it exceeds kMaxElements.
  std::uint64_t count() const;
};

struct CompressOptions {
  CodecId codec = CodecId::szp;
  double eb = 1e-3;
  BoundMode mode = BoundMode::rel;  // ignored (stored as none) by codecs that are not error-bounded
  unsigned quant_bits = 8;          // quant: 1, 2, 4 or 8
  unsigned threads = 1;             // CPU threads, at most kMaxThreads; 0 = all cores. Output is identical for any value.
  // szp, szh only (InputError for the others): keep one bit per value, x > 0, beside the stream
  // (stages.hpp, PositiveMask; n / 8 bytes rounded up, in the payload), so that the decoded
  // value is > 0 exactly when the original was: what a ReLU's backward reads. The bound still
  // holds for every element. The header says so (codec parameter kPositiveMaskParam).
  bool positive_mask = false;
};

// True when a header's stream carries the positive mask (szp, szh with codec parameter
// kPositiveMaskParam).
bool has_positive_mask(const Header& h);

// InputError unless eb is a finite number >= 0: what every error bound must be.
void check_error_bound(double eb);
// InputError unless threads <= kMaxThreads.
void check_threads(unsigned threads);

// Absolute bound that `compress` enforces for these options: eb, or eb * (max - min) over the
// finite values in rel mode (0 when there are none).
double absolute_bound(std::span<const float> data, double eb, BoundMode mode);

// Upper bound of the compressed size of n elements (header included), a positive mask included
// for szp and szh; compress never exceeds it
// (zfp: for rank-1 shapes; its worst case grows with padded partial blocks of higher ranks).
// InputError when n exceeds kMaxElements (the products behind it would wrap far beyond).
std::uint64_t max_compressed_size(CodecId codec, std::uint64_t n, unsigned quant_bits = 8);

std::vector<std::byte> compress(std::span<const float> data, const Shape& shape, const CompressOptions& options);
// The same stream written into `out`, which must hold max_compressed_size(codec, n, quant_bits)
// bytes (InputError otherwise); returns the stream's size. Reusing one buffer across calls avoids
// compress()'s allocation, page faults and final copy: the codecs write straight into it.
std::size_t compress_into(std::span<const float> data, const Shape& shape, const CompressOptions& options, std::span<std::byte> out);

// Validates the header and checksum, then the codec's fields and payload state against the header
// (parameter, quantiser step vs the absolute bound, sizes); throws StreamError naming the byte
// offset of the offending field. decompress(_into) run it before allocating or decoding.
Header inspect(std::span<const std::byte> stream);
std::vector<float> decompress(std::span<const std::byte> stream, unsigned threads = 1);
// Decodes into `out`, whose size must equal the stream's element count.
void decompress_into(std::span<const std::byte> stream, std::span<float> out, unsigned threads = 1);

// Accuracy of a reconstruction against the original.
struct ErrorStats {
  std::uint64_t count = 0;
  double max_abs_error = 0.0;      // over elements where both are finite
  std::uint64_t violations = 0;    // elements with !(|x - x'| <= eb), or non-finite not preserved bit for bit
  std::uint64_t nonfinite_mismatches = 0;
  std::uint64_t zero_mismatches = 0;  // x == 0 but x' != 0 (the ReLU mask)
  double psnr_db = 0.0;            // 20 log10(range) - 10 log10(mse) over finite pairs; +inf if exact
  double value_range = 0.0;
};
ErrorStats compare(std::span<const float> original, std::span<const float> reconstructed, double eb_abs);

}  // namespace comptrain::kernels

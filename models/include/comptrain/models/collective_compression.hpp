#pragma once
// Error-bounded compressed collectives for data parallelism (a scenario's
// `parallelism.compression`): the gradient all-reduce (DDP) or reduce-scatter (ZeRO) and the
// parameter all-gathers move codec-compressed chunks, as C-Coll (Huang et al., arXiv 2304.03890)
// and gZCCL (Huang et al., ICS'24, arXiv 2308.05199) do it on a ring: each rank compresses the
// chunk it sends, a reduction step decompresses what it received, adds its own chunk and
// recompresses the sum for the next step, and the result is decompressed at the end. An
// all-reduce may instead run gZCCL's recursive doubling: log2 N rounds, each compressing the
// rank's whole partial sum and exchanging it with the rank 2^s away.
// models/transforms/README.md, "Compressed collectives", tells the tasks, the memory and the
// derivation of the error bounds below.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "comptrain/models/compression_model.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/support/error_bound.hpp"

namespace comptrain::models {

// How a compressed all-reduce moves its data. ring: C-Coll's reduce-scatter then all-gather of
// compressed chunks (2 (N - 1) steps on 1/N of the data each; every rank ends with the same
// result). recursive_doubling: gZCCL's (arXiv 2308.05199, §3: each round on the whole vector, so
// the codec runs on large inputs, and log2 N rounds); N must be a power of two, and each rank's
// result carries its own compression errors, so the ranks' results differ. Reduce-scatters and
// all-gathers run the ring either way.
enum class CompressedAllReduce : std::uint8_t { ring, recursive_doubling };
std::string_view to_string(CompressedAllReduce algorithm);
std::optional<CompressedAllReduce> parse_compressed_all_reduce(std::string_view text);
inline constexpr std::string_view kCompressedAllReduceChoices = "ring or recursive_doubling";

struct CollectiveCompressionSpec {
  // The codec's costs: a calibration profile's models for `codec` (the ratio from its `generic`
  // ratio model at `error_bound`, the seconds from its compress and decompress time models), or
  // explicit numbers, which override the profile's (as a strategy's compress rule does).
  std::shared_ptr<const CalibrationProfile> profile;
  bool profile_auto = false;  // `profile: auto`: picked for the platform (sim::set_platform re-picks it)
  std::string codec = "szp";
  std::optional<double> ratio;                 // bytes as they are / compressed bytes (>= 1)
  std::optional<double> compress_bandwidth;    // bytes of float32 input per second
  std::optional<double> decompress_bandwidth;  // bytes of float32 output per second
  std::optional<double> latency;               // seconds per codec call
  // The bound of every compression: rel, relative to the value range of what is compressed (the
  // profile's ratio models take it); abs, in the gradients' and parameters' units (then the
  // ratio must be given: traces carry no value range for gradients).
  double error_bound = 0;
  ErrorBoundMode error_bound_mode = ErrorBoundMode::rel;
  CompressedAllReduce all_reduce = CompressedAllReduce::ring;
};

// Throws std::invalid_argument naming the field: a bound > 0 and finite, a ratio >= 1 when given,
// abs mode only with a ratio, a profile holding `codec` unless the ratio and both bandwidths are
// given.
void check_collective_compression(const CollectiveCompressionSpec& spec);

// The ratio applied to data of `element_size` bytes per value: the explicit ratio as it is, or
// the profile's generic ratio model at the relative bound, converted from float32 (same bits per
// value: ratio x element_size / 4, floored at 1), as a compress rule does.
double collective_compression_ratio(const CollectiveCompressionSpec& spec, int element_size);
// The codec's time model (profile's, explicit numbers overriding): seconds of one call on
// `elements` values, costed as that many float32 values (the profiles are fitted on float32
// data; a 16-bit gradient is taken as upcast on the fly, an overestimate of its codec time).
TimeModel collective_codec_time(const CollectiveCompressionSpec& spec, bool compress);

// The worst-case error of one element of a compressed collective's result over `ranks` ranks
// on a ring, each compression bounded by `error_bound` (models/transforms/README.md,
// "Compressed collectives", derives it and the recursive doubling's):
//  - abs (|x - x'| <= e per compression): reduce-scatter (N - 1) e: the chunk's partial sum is
//    compressed once per hop; all-reduce N e: one more compression of the reduced chunk before
//    the all-gather relays it unchanged; all-gather e;
//  - rel (e = eb x the range of what is compressed), in units of R, the largest value range of
//    one rank's data: the partial sum of j ranks' chunks carrying an error of at most E has a
//    range of at most j R + 2 E, so E_0 = 0, E_j = E_(j-1) + eb (j R + 2 E_(j-1)); reduce-scatter
//    E_(N-1), all-reduce E_N, all-gather eb R.
// An all-reduce by recursive doubling (`algorithm`; N a power of two): after round s a rank's
// partial sum of 2^s ranks' data carries E_s = 2 E_(s-1) + the error of compressing the partner's
// (abs: e; rel: eb (2^(s-1) R + 2 E_(s-1)), the compressed sum's range bound), E_0 = 0: abs
// (N - 1) e, the N - 1 merges' compressions; rel about eb R (N / 2) log2 N against the ring's
// eb R N (N + 1) / 2.
// `compressions` is how many times a compression error enters one element (N - 1, N, 1).
struct CollectiveErrorBound {
  int compressions = 0;
  double bound = 0;  // abs: in the data's units; rel: in units of R
};
CollectiveErrorBound compressed_collective_error_bound(CollectiveKind kind, int ranks, double error_bound, ErrorBoundMode mode,
                                                       CompressedAllReduce algorithm = CompressedAllReduce::ring);
// Whether recursive doubling can run over `ranks` ranks: a power of two (at least 1).
bool recursive_doubling_ranks(int ranks);

}  // namespace comptrain::models

#pragma once
// Error-bounded compressed collectives for data parallelism (a scenario's
// `parallelism.compression`): the gradient all-reduce (DDP) or reduce-scatter (ZeRO) and the
// parameter all-gathers move codec-compressed chunks, as C-Coll (Huang et al., arXiv 2304.03890)
// and gZCCL (Huang et al., ICS'24, arXiv 2308.05199) do it on a ring: each rank compresses the
// chunk it sends, a reduction step decompresses what it received, adds its own chunk and
// recompresses the sum for the next step, and the result is decompressed at the end.
// models/transforms/README.md, "Compressed collectives", tells the tasks, the memory and the
// derivation of the error bound below.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "comptrain/models/compression_model.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/support/error_bound.hpp"

namespace comptrain::models {

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
// "Compressed collectives", derives it):
//  - abs (|x - x'| <= e per compression): reduce-scatter (N - 1) e: the chunk's partial sum is
//    compressed once per hop; all-reduce N e: one more compression of the reduced chunk before
//    the all-gather relays it unchanged; all-gather e;
//  - rel (e = eb x the range of what is compressed), in units of R, the largest value range of
//    one rank's data: the partial sum of j ranks' chunks carrying an error of at most E has a
//    range of at most j R + 2 E, so E_0 = 0, E_j = E_(j-1) + eb (j R + 2 E_(j-1)); reduce-scatter
//    E_(N-1), all-reduce E_N, all-gather eb R.
// `compressions` is how many times a compression error enters one element (N - 1, N, 1).
struct CollectiveErrorBound {
  int compressions = 0;
  double bound = 0;  // abs: in the data's units; rel: in units of R
};
CollectiveErrorBound compressed_collective_error_bound(CollectiveKind kind, int ranks, double error_bound, ErrorBoundMode mode);

}  // namespace comptrain::models

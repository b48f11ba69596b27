#include "comptrain/models/collective_compression.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace comptrain::models {

std::string_view to_string(CompressedAllReduce algorithm) {
  switch (algorithm) {
    case CompressedAllReduce::ring: return "ring";
    case CompressedAllReduce::recursive_doubling: return "recursive_doubling";
  }
  return "?";
}

std::optional<CompressedAllReduce> parse_compressed_all_reduce(std::string_view text) {
  if (text == "ring") return CompressedAllReduce::ring;
  if (text == "recursive_doubling") return CompressedAllReduce::recursive_doubling;
  return std::nullopt;
}

bool recursive_doubling_ranks(int ranks) { return ranks >= 1 && (ranks & (ranks - 1)) == 0; }

void check_collective_compression(const CollectiveCompressionSpec& spec) {
  if (!(spec.error_bound > 0) || !std::isfinite(spec.error_bound)) {
    throw std::invalid_argument("compressed collectives: error_bound must be finite and > 0");
  }
  if (spec.ratio && !(*spec.ratio >= 1 && std::isfinite(*spec.ratio))) {
    throw std::invalid_argument("compressed collectives: ratio must be finite and >= 1");
  }
  if (spec.error_bound_mode == ErrorBoundMode::abs && !spec.ratio) {
    throw std::invalid_argument("compressed collectives: error_bound_mode abs needs an explicit ratio (the profiles' ratio models take a bound relative to the value range)");
  }
  if (spec.error_bound_mode != ErrorBoundMode::abs && spec.error_bound_mode != ErrorBoundMode::rel) {
    throw std::invalid_argument("compressed collectives: error_bound_mode must be abs or rel");
  }
  const bool explicit_costs = spec.ratio && spec.compress_bandwidth && spec.decompress_bandwidth;
  if (!explicit_costs && (!spec.profile || !spec.profile->find(spec.codec))) {
    throw std::invalid_argument("compressed collectives: without a ratio and both bandwidths a profile holding codec '" + spec.codec + "' is needed");
  }
  for (const auto& bandwidth : {spec.compress_bandwidth, spec.decompress_bandwidth}) {
    if (bandwidth && !(*bandwidth > 0 && std::isfinite(*bandwidth))) throw std::invalid_argument("compressed collectives: bandwidths must be finite and > 0");
  }
  if (spec.latency && !(*spec.latency >= 0 && std::isfinite(*spec.latency))) {
    throw std::invalid_argument("compressed collectives: latency must be finite and not negative");
  }
}

double collective_compression_ratio(const CollectiveCompressionSpec& spec, int element_size) {
  if (spec.ratio) return *spec.ratio;
  const RatioModel& model = spec.profile->find(spec.codec)->ratio_model(TensorClass::generic);
  return std::max(1.0, model.ratio(spec.error_bound) * static_cast<double>(element_size) / 4.0);
}

TimeModel collective_codec_time(const CollectiveCompressionSpec& spec, bool compress) {
  TimeModel t;
  if (spec.profile && spec.profile->find(spec.codec)) {
    const CodecProfile& codec = *spec.profile->find(spec.codec);
    t = compress ? codec.compress : codec.decompress;
  }
  if (spec.latency || !spec.profile) t.latency = spec.latency.value_or(0.0);
  if (const auto& bandwidth = compress ? spec.compress_bandwidth : spec.decompress_bandwidth) t.bandwidth = *bandwidth;
  return t;
}

CollectiveErrorBound compressed_collective_error_bound(CollectiveKind kind, int ranks, double error_bound, ErrorBoundMode mode,
                                                       CompressedAllReduce algorithm) {
  if (ranks < 1) throw std::invalid_argument("compressed_collective_error_bound: ranks must be at least 1");
  if (kind == CollectiveKind::all_to_all) throw std::invalid_argument("compressed_collective_error_bound: all-to-all is not a compressed collective here");
  if (ranks == 1) return {};
  if (kind == CollectiveKind::all_reduce && algorithm == CompressedAllReduce::recursive_doubling) {
    if (!recursive_doubling_ranks(ranks)) {
      throw std::invalid_argument("compressed_collective_error_bound: recursive doubling needs a power-of-two number of ranks, not " + std::to_string(ranks));
    }
    // Round s merges two partial sums of 2^(s-1) ranks each carrying E_(s-1); the partner's is
    // compressed once more on the way (abs e; rel eb x its range, at most 2^(s-1) R + 2 E_(s-1)).
    double e = 0;
    for (int half = 1; half < ranks; half *= 2) {
      e = 2 * e + (mode == ErrorBoundMode::abs ? error_bound : error_bound * (static_cast<double>(half) + 2.0 * e));
    }
    return {ranks - 1, e};
  }
  // Compressions whose error reaches one element of the result.
  const int compressions = kind == CollectiveKind::all_gather ? 1 : kind == CollectiveKind::reduce_scatter ? ranks - 1 : ranks;
  if (mode == ErrorBoundMode::abs) return {compressions, compressions * error_bound};
  if (kind == CollectiveKind::all_gather) return {1, error_bound};
  // rel: the j-th compression is of a partial sum of j ranks' chunks (the reduced chunk of all N
  // for the all-reduce's last), whose range is at most j R plus twice the error it carries.
  double e = 0;
  for (int j = 1; j <= compressions; ++j) e += error_bound * (static_cast<double>(j) + 2.0 * e);
  return {compressions, e};
}

}  // namespace comptrain::models

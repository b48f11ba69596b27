// Error-bounded compressed collectives (models/collective_compression.hpp, DataParallelSpec::
// compression): the derived worst-case error by hand and against a ring run with an error-bounded
// quantiser, and the tasks, bytes and temporaries the transform gives DDP's and ZeRO's
// collectives.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "comptrain/models/collective_compression.hpp"
#include "comptrain/models/data_parallel.hpp"
#include "comptrain/models/op_time.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "common/data_parallel_schedules.hpp"
#include "common/must_apply.hpp"

namespace comptrain::models {
namespace {

using test_support::baseline_schedule;
using test_support::collective_tasks;
using test_support::small_gpt;


TEST(CompressedCollectives, ErrorBoundsByHand) {
  const double e = 1e-3;
  // abs: one error per compression that reaches an element.
  EXPECT_DOUBLE_EQ(compressed_collective_error_bound(CollectiveKind::reduce_scatter, 4, e, ErrorBoundMode::abs).bound, 3 * e);
  EXPECT_DOUBLE_EQ(compressed_collective_error_bound(CollectiveKind::all_reduce, 4, e, ErrorBoundMode::abs).bound, 4 * e);
  EXPECT_DOUBLE_EQ(compressed_collective_error_bound(CollectiveKind::all_gather, 4, e, ErrorBoundMode::abs).bound, e);
  EXPECT_EQ(compressed_collective_error_bound(CollectiveKind::all_reduce, 4, e, ErrorBoundMode::abs).compressions, 4);
  EXPECT_EQ(compressed_collective_error_bound(CollectiveKind::all_reduce, 1, e, ErrorBoundMode::abs).bound, 0);
  // rel, in units of R: N = 2, the reduce-scatter compresses one rank's chunk (range <= R): eb R.
  EXPECT_DOUBLE_EQ(compressed_collective_error_bound(CollectiveKind::reduce_scatter, 2, e, ErrorBoundMode::rel).bound, e);
  // The all-reduce then compresses the sum of 2 chunks carrying eb R: range <= 2 R + 2 eb R.
  EXPECT_DOUBLE_EQ(compressed_collective_error_bound(CollectiveKind::all_reduce, 2, e, ErrorBoundMode::rel).bound, e + e * (2 + 2 * e));
  // N = 3: E1 = eb, E2 = E1 + eb (2 + 2 E1), E3 = E2 + eb (3 + 2 E2).
  const double e1 = e;
  const double e2 = e1 + e * (2 + 2 * e1);
  const double e3 = e2 + e * (3 + 2 * e2);
  EXPECT_DOUBLE_EQ(compressed_collective_error_bound(CollectiveKind::reduce_scatter, 3, e, ErrorBoundMode::rel).bound, e2);
  EXPECT_DOUBLE_EQ(compressed_collective_error_bound(CollectiveKind::all_reduce, 3, e, ErrorBoundMode::rel).bound, e3);
  EXPECT_DOUBLE_EQ(compressed_collective_error_bound(CollectiveKind::all_gather, 3, e, ErrorBoundMode::rel).bound, e);
  EXPECT_THROW(compressed_collective_error_bound(CollectiveKind::all_to_all, 3, e, ErrorBoundMode::rel), std::invalid_argument);
}

// An error-bounded codec's worst behaviour within its bound: uniform quantisation to a grid of
// 2 e, |x - q(x)| <= e (rel: e = eb x the vector's range).
std::vector<double> quantised(const std::vector<double>& x, double eb, ErrorBoundMode mode) {
  double e = eb;
  if (mode == ErrorBoundMode::rel) {
    const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
    e = eb * (*hi - *lo);
  }
  std::vector<double> q(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) q[i] = e > 0 ? 2 * e * std::round(x[i] / (2 * e)) : x[i];
  return q;
}

struct RingResult {
  double max_error = 0;  // over every rank's result and every element
  double range = 0;      // R: the largest range of one rank's chunk
};

// A ring reduce-scatter (and, for the all-reduce, the all-gather of the reduced chunks) over N
// ranks of N chunks of m values, every transfer compressed: rank r sends chunk (r - s) mod N at
// step s, the receiver adds its own chunk to the decompressed partial sum.
RingResult ring(int ranks, int m, double eb, ErrorBoundMode mode, bool all_reduce, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  std::vector<std::vector<std::vector<double>>> data(ranks, std::vector<std::vector<double>>(ranks, std::vector<double>(m)));
  RingResult out;
  for (auto& rank : data) {
    for (auto& chunk : rank) {
      const double scale = 0.5 + value(rng) * 0.5 + 0.5;
      for (double& v : chunk) v = value(rng) * scale;
      const auto [lo, hi] = std::minmax_element(chunk.begin(), chunk.end());
      out.range = std::max(out.range, *hi - *lo);
    }
  }
  // partial[r][c]: what rank r holds of chunk c.
  auto partial = data;
  for (int s = 0; s < ranks - 1; ++s) {
    auto next = partial;
    for (int r = 0; r < ranks; ++r) {
      const int c = ((r - s) % ranks + ranks) % ranks;
      const int to = (r + 1) % ranks;
      const std::vector<double> received = quantised(partial[r][c], eb, mode);
      for (int i = 0; i < m; ++i) next[to][c][i] = received[i] + data[to][c][i];
    }
    partial = std::move(next);
  }
  for (int r = 0; r < ranks; ++r) {
    const int c = (r + 1) % ranks;  // the chunk rank r holds reduced
    std::vector<double> result = partial[r][c];
    if (all_reduce) result = quantised(result, eb, mode);  // what the all-gather relays to every rank
    for (int i = 0; i < m; ++i) {
      double exact = 0;
      for (int k = 0; k < ranks; ++k) exact += data[k][c][i];
      out.max_error = std::max(out.max_error, std::abs(result[i] - exact));
    }
  }
  return out;
}

TEST(CompressedCollectives, ARingWithAnErrorBoundedCodecStaysWithinTheDerivedBound) {
  for (const int ranks : {2, 3, 5, 8}) {
    for (const bool all_reduce : {false, true}) {
      const CollectiveKind kind = all_reduce ? CollectiveKind::all_reduce : CollectiveKind::reduce_scatter;
      const double e = 1e-2;
      const RingResult abs = ring(ranks, 4000, e, ErrorBoundMode::abs, all_reduce, 7u + static_cast<unsigned>(ranks));
      const double abs_bound = compressed_collective_error_bound(kind, ranks, e, ErrorBoundMode::abs).bound;
      EXPECT_LE(abs.max_error, abs_bound * (1 + 1e-12)) << ranks << " ranks";
      // The bound is the sum of the compressions' errors, which the worst element nearly reaches.
      EXPECT_GT(abs.max_error, 0.5 * abs_bound) << ranks << " ranks";
      const RingResult rel = ring(ranks, 4000, e, ErrorBoundMode::rel, all_reduce, 11u + static_cast<unsigned>(ranks));
      const double rel_bound = compressed_collective_error_bound(kind, ranks, e, ErrorBoundMode::rel).bound * rel.range;
      EXPECT_LE(rel.max_error, rel_bound * (1 + 1e-9)) << ranks << " ranks";
      EXPECT_GT(rel.max_error, 0.1 * rel_bound) << ranks << " ranks";
    }
  }
}

// gZCCL's recursive doubling: after round s a partial sum of 2^s ranks carries twice the error of
// the two halves plus the compression of the partner's (abs e; rel eb x its range bound).
TEST(CompressedCollectives, RecursiveDoublingErrorBoundsByHand) {
  const double e = 1e-3;
  constexpr auto rd = CompressedAllReduce::recursive_doubling;
  // abs: the N - 1 merges' compressions, against the ring's N.
  EXPECT_DOUBLE_EQ(compressed_collective_error_bound(CollectiveKind::all_reduce, 2, e, ErrorBoundMode::abs, rd).bound, e);
  EXPECT_DOUBLE_EQ(compressed_collective_error_bound(CollectiveKind::all_reduce, 4, e, ErrorBoundMode::abs, rd).bound, 3 * e);
  EXPECT_DOUBLE_EQ(compressed_collective_error_bound(CollectiveKind::all_reduce, 8, e, ErrorBoundMode::abs, rd).bound, 7 * e);
  EXPECT_EQ(compressed_collective_error_bound(CollectiveKind::all_reduce, 8, e, ErrorBoundMode::abs, rd).compressions, 7);
  // rel, in units of R (one rank's whole data): E1 = eb; E2 = 2 E1 + eb (2 + 2 E1); E3 = 2 E2 + eb (4 + 2 E2).
  const double e1 = e;
  const double e2 = 2 * e1 + e * (2 + 2 * e1);
  const double e3 = 2 * e2 + e * (4 + 2 * e2);
  EXPECT_DOUBLE_EQ(compressed_collective_error_bound(CollectiveKind::all_reduce, 2, e, ErrorBoundMode::rel, rd).bound, e1);
  EXPECT_DOUBLE_EQ(compressed_collective_error_bound(CollectiveKind::all_reduce, 4, e, ErrorBoundMode::rel, rd).bound, e2);
  EXPECT_DOUBLE_EQ(compressed_collective_error_bound(CollectiveKind::all_reduce, 8, e, ErrorBoundMode::rel, rd).bound, e3);
  // About eb R (N / 2) log2 N: at 64 ranks a tenth of the ring's eb R N (N + 1) / 2.
  const double rd64 = compressed_collective_error_bound(CollectiveKind::all_reduce, 64, e, ErrorBoundMode::rel, rd).bound;
  const double ring64 = compressed_collective_error_bound(CollectiveKind::all_reduce, 64, e, ErrorBoundMode::rel).bound;
  EXPECT_NEAR(rd64, e * 32 * 6, 0.05 * e * 32 * 6);
  EXPECT_LT(rd64, ring64 / 10);
  // The reduce-scatters and all-gathers keep the ring's bounds.
  EXPECT_DOUBLE_EQ(compressed_collective_error_bound(CollectiveKind::reduce_scatter, 4, e, ErrorBoundMode::abs, rd).bound, 3 * e);
  EXPECT_THROW(compressed_collective_error_bound(CollectiveKind::all_reduce, 6, e, ErrorBoundMode::abs, rd), std::invalid_argument);
  EXPECT_TRUE(recursive_doubling_ranks(1));
  EXPECT_TRUE(recursive_doubling_ranks(64));
  EXPECT_FALSE(recursive_doubling_ranks(0));
  EXPECT_FALSE(recursive_doubling_ranks(24));
  EXPECT_EQ(parse_compressed_all_reduce("recursive_doubling"), rd);
  EXPECT_EQ(to_string(rd), "recursive_doubling");
  EXPECT_FALSE(parse_compressed_all_reduce("tree"));
}

struct DoublingResult {
  double max_error = 0;      // over every rank's result and every element
  double max_disagree = 0;   // the largest difference between two ranks' results
  double range = 0;          // R: the largest range of one rank's data
};

// Recursive doubling over N = 2^k ranks of m values: at round s rank r adds the compressed
// partial sum of rank r XOR 2^s to its own.
DoublingResult doubling(int ranks, int m, double eb, ErrorBoundMode mode, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  std::vector<std::vector<double>> data(ranks, std::vector<double>(m));
  DoublingResult out;
  for (auto& rank : data) {
    const double scale = 0.5 + value(rng) * 0.5 + 0.5;
    for (double& v : rank) v = value(rng) * scale;
    const auto [lo, hi] = std::minmax_element(rank.begin(), rank.end());
    out.range = std::max(out.range, *hi - *lo);
  }
  auto partial = data;
  for (int distance = 1; distance < ranks; distance *= 2) {
    auto next = partial;
    for (int r = 0; r < ranks; ++r) {
      const std::vector<double> received = quantised(partial[r ^ distance], eb, mode);
      for (int i = 0; i < m; ++i) next[r][i] = partial[r][i] + received[i];
    }
    partial = std::move(next);
  }
  for (int i = 0; i < m; ++i) {
    double exact = 0;
    for (int k = 0; k < ranks; ++k) exact += data[k][i];
    for (int r = 0; r < ranks; ++r) {
      out.max_error = std::max(out.max_error, std::abs(partial[r][i] - exact));
      out.max_disagree = std::max(out.max_disagree, std::abs(partial[r][i] - partial[0][i]));
    }
  }
  return out;
}

TEST(CompressedCollectives, RecursiveDoublingWithAnErrorBoundedCodecStaysWithinTheDerivedBound) {
  constexpr auto rd = CompressedAllReduce::recursive_doubling;
  for (const int ranks : {2, 4, 8, 16}) {
    const double e = 1e-2;
    const DoublingResult abs = doubling(ranks, 4000, e, ErrorBoundMode::abs, 3u + static_cast<unsigned>(ranks));
    const double abs_bound = compressed_collective_error_bound(CollectiveKind::all_reduce, ranks, e, ErrorBoundMode::abs, rd).bound;
    EXPECT_LE(abs.max_error, abs_bound * (1 + 1e-12)) << ranks << " ranks";
    EXPECT_GT(abs.max_error, 0.25 * abs_bound) << ranks << " ranks";
    // Each rank's result has its own errors: they differ, by at most twice the bound.
    EXPECT_GT(abs.max_disagree, 0) << ranks << " ranks";
    EXPECT_LE(abs.max_disagree, 2 * abs_bound * (1 + 1e-12)) << ranks << " ranks";
    const DoublingResult rel = doubling(ranks, 4000, e, ErrorBoundMode::rel, 5u + static_cast<unsigned>(ranks));
    const double rel_bound = compressed_collective_error_bound(CollectiveKind::all_reduce, ranks, e, ErrorBoundMode::rel, rd).bound * rel.range;
    EXPECT_LE(rel.max_error, rel_bound * (1 + 1e-9)) << ranks << " ranks";
    EXPECT_GT(rel.max_error, 0.05 * rel_bound) << ranks << " ranks";
  }
}

CollectiveCompressionSpec explicit_codec() {
  CollectiveCompressionSpec z;
  z.ratio = 4;
  z.compress_bandwidth = 100e9;
  z.decompress_bandwidth = 200e9;
  z.latency = 10e-6;
  z.error_bound = 1e-3;
  return z;
}

// A schedule under `spec` (no compression) and the same with explicit_codec()'s compressed
// collectives, all-reduces by `algorithm`.
struct PlainAndCompressed {
  Schedule plain;
  Schedule compressed;
};
PlainAndCompressed plain_and_compressed(const traces::Trace& trace, DataParallelSpec spec, const Platform& platform, CompressedAllReduce algorithm) {
  PlainAndCompressed out{baseline_schedule(trace), baseline_schedule(trace)};
  apply_data_parallel(out.plain, trace, spec, platform);
  spec.compression = explicit_codec();
  spec.compression->all_reduce = algorithm;
  apply_data_parallel(out.compressed, trace, spec, platform);
  return out;
}

// DDP: each bucket's all-reduce becomes a compressed reduce-scatter and all-gather of a quarter
// of its bytes, with the codec calls of the ring around them on the comm stream.
TEST(CompressedCollectives, DdpAllReducesBecomeCompressedRings) {
  const Platform platform = builtin_platform("a100-80gb");
  const double bandwidth = platform.gpu.memory_bandwidth * platform.efficiency.memory_default;
  const double launch = platform.gpu.launch_overhead;
  const auto trace = small_gpt(zoo::Precision::fp32);
  DataParallelSpec spec;
  spec.ranks = 8;
  const auto [plain, s] = plain_and_compressed(trace, spec, platform, CompressedAllReduce::ring);
  const std::vector<TaskId> plain_reduces = collective_tasks(plain, CollectiveKind::all_reduce);
  ASSERT_FALSE(plain_reduces.empty());
  ASSERT_NO_THROW(s.validate());
  EXPECT_TRUE(collective_tasks(s, CollectiveKind::all_reduce).empty());
  const std::vector<TaskId> rs = collective_tasks(s, CollectiveKind::reduce_scatter);
  const std::vector<TaskId> ag = collective_tasks(s, CollectiveKind::all_gather);
  ASSERT_EQ(rs.size(), plain_reduces.size());
  ASSERT_EQ(ag.size(), plain_reduces.size());
  const double n = 8;
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const std::int64_t bytes = plain.tasks[plain_reduces[i]].bytes;
    const double chunk = static_cast<double>(bytes) / 4 / n;  // fp32 values per rank's chunk
    EXPECT_EQ(s.tasks[rs[i]].bytes, (bytes + 3) / 4);
    EXPECT_EQ(s.tasks[ag[i]].bytes, (bytes + 3) / 4);
    // compress, reduce-scatter, decompress and reduce, recompress, all-gather, decompress.
    ASSERT_EQ(ag[i], rs[i] + 3);
    const Task& first = s.tasks[rs[i] - 1];
    const Task& reduce = s.tasks[rs[i] + 1];
    const Task& recompress = s.tasks[rs[i] + 2];
    const Task& last = s.tasks[ag[i] + 1];
    for (const Task* t : {&first, &reduce, &recompress, &last}) EXPECT_EQ(t->stream, Stream::comm) << t->name;
    EXPECT_EQ(first.kind, TaskKind::compress);
    EXPECT_NEAR(first.seconds, 10e-6 + 4 * chunk / 100e9, 1e-12);
    EXPECT_EQ(reduce.kind, TaskKind::decompress);
    EXPECT_NEAR(reduce.seconds, (n - 1) * (10e-6 + 4 * chunk / 200e9) + (n - 1) * 3 * chunk * 4 / bandwidth + (n - 1) * launch, 1e-12);
    EXPECT_EQ(recompress.kind, TaskKind::compress);
    EXPECT_NEAR(recompress.seconds, (n - 1) * (10e-6 + 4 * chunk / 100e9), 1e-12);
    EXPECT_EQ(last.kind, TaskKind::decompress);
    EXPECT_NEAR(last.seconds, 10e-6 + 4 * (n - 1) * chunk / 200e9, 1e-12);
    // The compressed chunks and one decompressed chunk, from the first task to the last.
    const auto scratch = std::find_if(first.creates.begin(), first.creates.end(), [&](BufferId b) { return s.buffers[b].role == MemoryRole::temporary; });
    ASSERT_NE(scratch, first.creates.end());
    EXPECT_EQ(s.buffers[*scratch].bytes, (bytes + 3) / 4 + static_cast<std::int64_t>(std::ceil(chunk * 4)));
    EXPECT_NE(std::find(last.uses.begin(), last.uses.end(), *scratch), last.uses.end());
  }
}

// DDP with recursive doubling over 8 ranks: per bucket three rounds of a compression of the whole
// bucket, an exchange of its compressed bytes with the rank 1, 2 and 4 away (an all-gather of
// twice them over groups of 2), and a decompression and reduction of the whole bucket; 6 ranks
// are refused.
TEST(CompressedCollectives, DdpAllReducesByRecursiveDoublingExchangeWholeCompressedVectors) {
  const Platform platform = builtin_platform("a100-80gb");
  const double bandwidth = platform.gpu.memory_bandwidth * platform.efficiency.memory_default;
  const double launch = platform.gpu.launch_overhead;
  const auto trace = small_gpt(zoo::Precision::fp32);
  DataParallelSpec spec;
  spec.ranks = 8;
  const auto [plain, s] = plain_and_compressed(trace, spec, platform, CompressedAllReduce::recursive_doubling);
  const std::vector<TaskId> plain_reduces = collective_tasks(plain, CollectiveKind::all_reduce);
  ASSERT_FALSE(plain_reduces.empty());
  ASSERT_NO_THROW(s.validate());
  EXPECT_TRUE(collective_tasks(s, CollectiveKind::all_reduce).empty());
  EXPECT_TRUE(collective_tasks(s, CollectiveKind::reduce_scatter).empty());
  const std::vector<TaskId> exchanges = collective_tasks(s, CollectiveKind::all_gather);
  ASSERT_EQ(exchanges.size(), 3 * plain_reduces.size());
  for (std::size_t i = 0; i < plain_reduces.size(); ++i) {
    const std::int64_t bytes = plain.tasks[plain_reduces[i]].bytes;
    const double values = static_cast<double>(bytes) / 4;
    const std::int64_t compressed = (bytes + 3) / 4;
    for (int round = 0; round < 3; ++round) {
      const TaskId x = exchanges[3 * i + round];
      const Task& exchange = s.tasks[x];
      EXPECT_EQ(exchange.bytes, 2 * compressed) << exchange.name;
      EXPECT_EQ(exchange.groups, (RankGroups{2, 1 << round})) << exchange.name;
      const Task& compress = s.tasks[x - 1];
      const Task& reduce = s.tasks[x + 1];
      EXPECT_EQ(compress.kind, TaskKind::compress);
      EXPECT_EQ(reduce.kind, TaskKind::decompress);
      for (const Task* t : {&compress, &exchange, &reduce}) EXPECT_EQ(t->stream, Stream::comm) << t->name;
      EXPECT_NEAR(compress.seconds, 10e-6 + 4 * values / 100e9, 1e-12);
      EXPECT_NEAR(reduce.seconds, 10e-6 + 4 * values / 200e9 + 3 * values * 4 / bandwidth + launch, 1e-12);
      if (round > 0) {
        EXPECT_EQ(x - 1, exchanges[3 * i + round - 1] + 2) << "the rounds follow each other on the comm stream";
      }
    }
    // The compressed vector sent, the one received and the received one decompressed.
    const Task& first = s.tasks[exchanges[3 * i] - 1];
    const auto scratch = std::find_if(first.creates.begin(), first.creates.end(), [&](BufferId b) { return s.buffers[b].role == MemoryRole::temporary; });
    ASSERT_NE(scratch, first.creates.end());
    EXPECT_EQ(s.buffers[*scratch].bytes, 2 * compressed + bytes);
    const Task& last = s.tasks[exchanges[3 * i + 2] + 1];
    EXPECT_NE(std::find(last.uses.begin(), last.uses.end(), *scratch), last.uses.end());
  }
  spec.ranks = 6;
  EXPECT_THROW(plain_and_compressed(trace, spec, platform, CompressedAllReduce::recursive_doubling), std::invalid_argument);
  spec.ranks = 8;
  spec.compression = explicit_codec();
  spec.compression->all_reduce = CompressedAllReduce::recursive_doubling;
  spec.zero_stage = 1;
  EXPECT_THROW(check_data_parallel(spec), std::invalid_argument) << "ZeRO reduce-scatters";
}

// DDP over one rank (PyTorch runs its reducer on a one-GPU job): nothing to exchange, so the
// all-reduces stay as they are and no codec task runs, on the ring or by recursive doubling.
TEST(CompressedCollectives, OneRankLeavesTheCollectivesUncompressed) {
  const Platform platform = builtin_platform("a100-80gb");
  const auto trace = small_gpt(zoo::Precision::fp32);
  DataParallelSpec spec;
  spec.ranks = 1;
  for (const CompressedAllReduce algorithm : {CompressedAllReduce::ring, CompressedAllReduce::recursive_doubling}) {
    const auto [plain, s] = plain_and_compressed(trace, spec, platform, algorithm);
    ASSERT_NO_THROW(s.validate());
    const std::vector<TaskId> before = collective_tasks(plain, CollectiveKind::all_reduce);
    const std::vector<TaskId> after = collective_tasks(s, CollectiveKind::all_reduce);
    ASSERT_FALSE(before.empty());
    ASSERT_EQ(after.size(), before.size());
    for (std::size_t i = 0; i < after.size(); ++i) EXPECT_EQ(s.tasks[after[i]].bytes, plain.tasks[before[i]].bytes);
    EXPECT_TRUE(std::none_of(s.tasks.begin(), s.tasks.end(), [](const Task& t) { return t.kind == TaskKind::compress || t.kind == TaskKind::decompress; }))
        << to_string(algorithm);
  }
}

// ZeRO-3: the reduce-scatters and every parameter all-gather move compressed bytes; a gather's
// decompression makes the gathered parameters.
TEST(CompressedCollectives, ZeroReduceScattersAndGathersAreCompressed) {
  const Platform platform = builtin_platform("a100-80gb");
  const auto trace = small_gpt(zoo::Precision::mixed);
  DataParallelSpec spec;
  spec.ranks = 4;
  spec.zero_stage = 3;
  Schedule plain = baseline_schedule(trace);
  apply_data_parallel(plain, trace, spec, platform);
  spec.compression = explicit_codec();
  Schedule s = baseline_schedule(trace);
  apply_data_parallel(s, trace, spec, platform);
  ASSERT_NO_THROW(s.validate());
  for (const CollectiveKind kind : {CollectiveKind::reduce_scatter, CollectiveKind::all_gather}) {
    const auto before = collective_tasks(plain, kind);
    const auto after = collective_tasks(s, kind);
    ASSERT_EQ(after.size(), before.size());
    for (std::size_t i = 0; i < after.size(); ++i) EXPECT_EQ(s.tasks[after[i]].bytes, (plain.tasks[before[i]].bytes + 3) / 4) << s.tasks[after[i]].name;
  }
  for (const TaskId t : collective_tasks(s, CollectiveKind::all_gather)) {
    const Task& decompress = s.tasks[t + 1];
    EXPECT_EQ(decompress.kind, TaskKind::decompress);
    EXPECT_FALSE(decompress.creates.empty()) << "the gathered parameters";
    EXPECT_TRUE(s.tasks[t].creates.empty());
  }
}

TEST(CompressedCollectives, RefusesOtherCompressionOfTheSameCollectives) {
  DataParallelSpec spec;
  spec.ranks = 4;
  spec.compression = explicit_codec();
  EXPECT_NO_THROW(check_data_parallel(spec));
  spec.comm_hook = DdpCommHook::fp16;
  EXPECT_THROW(check_data_parallel(spec), std::invalid_argument);
  spec.comm_hook = DdpCommHook::none;
  spec.compression->ratio.reset();  // no profile then
  EXPECT_THROW(check_data_parallel(spec), std::invalid_argument);
  spec.compression = explicit_codec();
  spec.compression->error_bound = 0;
  EXPECT_THROW(check_data_parallel(spec), std::invalid_argument);
}

}  // namespace
}  // namespace comptrain::models

// Error-bounded compressed collectives (DataParallelSpec::compression; README.md, "Compressed
// collectives"), part of data parallelism as a schedule transform (data_parallel_transform.hpp).

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "comptrain/models/collective_compression.hpp"
#include "data_parallel_transform.hpp"

namespace comptrain::models::transform_detail {

// C-Coll's and gZCCL's ring (arXiv 2304.03890 §4, arXiv 2308.05199 §3) over N ranks of a
// collective of S bytes, e = S / element_size values, chunks of c = e / N values:
//  - reduce-scatter: each rank compresses the chunk it sends first (one call on c values); the
//    ring moves the compressed chunks (the collective of S / ratio bytes); at each of the N - 1
//    steps the received chunk is decompressed (c values) and added to the rank's own (a
//    memory-bound kernel: two chunks read, one written), and the sum recompressed for the next
//    step but the last (N - 2 calls);
//  - all-reduce: the reduce-scatter, then the reduced chunk compressed (one call) and an
//    all-gather of the compressed chunks, which the ring relays unchanged, decompressed at the
//    end in one call over the (N - 1) c values received;
//  - all-gather: the rank's share compressed (one call), the compressed all-gather, the
//    received (N - 1) c values decompressed in one call.
// A step's transfer waits for the previous step's recompression, so the ring's time is the sum of
// its transfers and its codec calls: the codec tasks run on the comm stream, serial with the
// collectives, the calls of one kind gathered in one task. The compressed chunks and one
// decompressed chunk live in a temporary from the first task to the last.
TaskId Transform::compressed_collective(Task c, int element_size, TaskId before) {
  const std::string what = c.name;
  if (platform_ == nullptr) throw std::invalid_argument("compressed collectives need the platform (its GPU's memory bandwidth for the reductions)");
  const CollectiveCompressionSpec& z = *spec_.compression;
  const CollectiveKind kind = *c.collective;
  const int ranks = std::max(1, group_ranks(c));
  // One rank has nothing to exchange: the collective stays as it is (the replay's over one rank
  // is free) and no codec runs.
  if (ranks < 2) return add_task(std::move(c), before);
  const auto bytes = static_cast<double>(c.bytes);
  const double values = bytes / element_size;
  const double chunk = values / ranks;
  const double ratio = collective_compression_ratio(z, element_size);
  const auto compressed = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(bytes / ratio)));
  const TimeModel compress_time = collective_codec_time(z, true);
  const TimeModel decompress_time = collective_codec_time(z, false);
  // `calls` codec calls on `per_call` values each, costed as float32 values (the profiles').
  const auto codec_seconds = [](const TimeModel& t, double calls, double per_call) { return calls * t.seconds(4.0 * per_call); };
  if (kind == CollectiveKind::all_reduce && z.all_reduce == CompressedAllReduce::recursive_doubling) {
    return recursive_doubling_all_reduce(std::move(c), element_size, ranks, compressed, compress_time, decompress_time, before);
  }
  const bool reduces = kind != CollectiveKind::all_gather;
  const auto scratch_bytes = compressed + (reduces ? static_cast<std::int64_t>(std::ceil(chunk * element_size)) : 0);
  const BufferId scratch = add_buffer("compressed chunks of " + what, scratch_bytes, MemoryRole::temporary, false);
  // What the gather writes is made by its decompression; what a reduction reads (a coalesced
  // input) is made before its first task.
  std::vector<BufferId> outputs;
  std::vector<BufferId> inputs;
  (reduces ? inputs : outputs) = std::move(c.creates);
  c.creates.clear();
  std::vector<BufferId> uses = c.uses;
  uses.push_back(scratch);
  const double n = ranks;
  const auto codec_task = [&](TaskKind task_kind, const std::string& name, double seconds) {
    Task t;
    t.kind = task_kind;
    t.stream = Stream::comm;
    t.seconds = seconds;
    t.uses = uses;
    t.name = name + " of " + what;
    return t;
  };
  Task first = codec_task(TaskKind::compress, "compression of the first chunk", codec_seconds(compress_time, 1, chunk));
  first.after = std::move(c.after);
  first.creates = inputs;
  first.creates.push_back(scratch);
  const TaskId compress = add_task(std::move(first), before);
  if (!reduces) {
    c.bytes = compressed;
    c.uses = uses;
    c.after = {compress};
    c.name = "compressed " + what;
    add_task(std::move(c), before);
    Task last = codec_task(TaskKind::decompress, "decompression of the gathered chunks", codec_seconds(decompress_time, 1, (n - 1) * chunk));
    last.creates = std::move(outputs);
    return add_task(std::move(last), before);
  }
  Task rs = c;
  rs.collective = CollectiveKind::reduce_scatter;
  rs.bytes = compressed;
  rs.uses = uses;
  rs.after = {compress};
  rs.name = kind == CollectiveKind::all_reduce ? "compressed reduce-scatter (all-reduce's first half) of " + what : "compressed " + what;
  add_task(std::move(rs), before);
  const KernelRun add = memory_bound_kernels(*platform_, (n - 1) * 3.0 * chunk * element_size, ranks - 1);
  TaskId last = add_task(codec_task(TaskKind::decompress, "decompression and reduction at each ring step",
                                    codec_seconds(decompress_time, n - 1, chunk) + add.seconds),
                         before);
  // The sums passed on (N - 2), and for the all-reduce the reduced chunk.
  const int recompressions = kind == CollectiveKind::all_reduce ? ranks - 1 : ranks - 2;
  if (recompressions > 0) {
    last = add_task(codec_task(TaskKind::compress, "recompression at each ring step", codec_seconds(compress_time, recompressions, chunk)), before);
  }
  if (kind != CollectiveKind::all_reduce) return last;
  Task ag = c;
  ag.collective = CollectiveKind::all_gather;
  ag.bytes = compressed;
  ag.uses = uses;
  ag.after.clear();
  ag.name = "compressed all-gather (all-reduce's second half) of " + what;
  add_task(std::move(ag), before);
  return add_task(codec_task(TaskKind::decompress, "decompression of the gathered chunks", codec_seconds(decompress_time, 1, (n - 1) * chunk)), before);
}

// gZCCL's recursive doubling (arXiv 2308.05199 §3; Thakur et al., IJHPCA 2005, for the
// exchange pattern) over N = 2^k ranks of an all-reduce of S bytes, e = S / element_size values:
// at round s (0 .. k - 1) each rank compresses its whole partial sum (one call on e values),
// exchanges it with the rank 2^s away (S / ratio bytes each way: an all-gather of twice that over
// groups of 2 ranks 2^s apart, so the replay puts the first rounds on the node's links and the
// later ones on the network as their strides fall), decompresses what it received (e values) and
// adds it to its own (two vectors read, one written). The rounds are serial on the comm stream;
// the compressed vector sent, the one received and the received one decompressed live in a
// temporary from the first task to the last. Not modelled: the multi-stream pipelining of a
// round's codec calls with its transfer.
TaskId Transform::recursive_doubling_all_reduce(Task c, int element_size, int ranks, std::int64_t compressed, const TimeModel& compress_time,
                                                const TimeModel& decompress_time, TaskId before) {
  const std::string what = c.name;
  if (!recursive_doubling_ranks(ranks)) {
    throw std::invalid_argument("parallelism.compression.algorithm recursive_doubling needs a power-of-two number of ranks in each all-reduce; " + what +
                                " runs over " + std::to_string(ranks) + " (expected 2, 4, 8, ...; or algorithm ring)");
  }
  const double values = static_cast<double>(c.bytes) / element_size;
  const BufferId scratch = add_buffer("compressed vectors of " + what, 2 * compressed + c.bytes, MemoryRole::temporary, false);
  std::vector<BufferId> uses = c.uses;
  uses.push_back(scratch);
  const RankGroups whole = c.groups.every_rank() ? RankGroups{ranks, 1} : c.groups;
  std::vector<TaskId> after = std::move(c.after);
  std::vector<BufferId> inputs = std::move(c.creates);
  const KernelRun add = memory_bound_kernels(*platform_, 3.0 * values * element_size, 1);
  TaskId last = 0;
  for (int s = 0, distance = 1; distance < ranks; ++s, distance *= 2) {
    const std::string round = " (recursive doubling, round " + std::to_string(s + 1) + ")";
    Task compress;
    compress.kind = TaskKind::compress;
    compress.stream = Stream::comm;
    compress.seconds = compress_time.seconds(4.0 * values);  // costed as float32 values, as the ring's
    compress.uses = uses;
    compress.name = "compression of the partial sum of " + what + round;
    compress.after = std::move(after);
    if (s == 0) {
      compress.creates = std::move(inputs);
      compress.creates.push_back(scratch);
    }
    const TaskId compressed_sum = add_task(std::move(compress), before);
    Task exchange = c;
    exchange.collective = CollectiveKind::all_gather;
    exchange.bytes = 2 * compressed;
    exchange.groups = RankGroups{2, whole.stride * distance};
    exchange.uses = uses;
    exchange.creates.clear();
    exchange.after = {compressed_sum};
    exchange.name = "compressed exchange of " + what + round;
    add_task(std::move(exchange), before);
    Task reduce;
    reduce.kind = TaskKind::decompress;
    reduce.stream = Stream::comm;
    reduce.seconds = decompress_time.seconds(4.0 * values) + add.seconds;
    reduce.uses = uses;
    reduce.name = "decompression and reduction of " + what + round;
    last = add_task(std::move(reduce), before);
    after.clear();
  }
  return last;
}

}  // namespace comptrain::models::transform_detail

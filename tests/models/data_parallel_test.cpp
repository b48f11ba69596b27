// Data parallelism as a schedule transform (models/data_parallel.hpp): DDP's buckets and their
// waits, ZeRO's per-GPU model-state bytes against the paper's formulas exactly, and ZeRO-3's
// gathered parameters.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>

#include "comptrain/models/data_parallel.hpp"
#include "comptrain/models/gradient_accumulation.hpp"
#include "comptrain/models/kernel_power.hpp"
#include "comptrain/models/op_time.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/traces/summary.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "common/data_parallel_schedules.hpp"
#include "common/must_apply.hpp"

namespace comptrain::models {
namespace {

using test_support::baseline_schedule;
using test_support::collective_tasks;
using test_support::small_gpt;


// The resident bytes of one role: what a GPU holds of it for the whole iteration.
std::int64_t resident_bytes(const Schedule& s, MemoryRole role) {
  std::set<BufferId> referenced;
  for (const Task& t : s.tasks) {
    referenced.insert(t.creates.begin(), t.creates.end());
    referenced.insert(t.uses.begin(), t.uses.end());
  }
  std::int64_t total = 0;
  for (BufferId b = 0; b < s.buffers.size(); ++b) {
    if (s.buffers[b].resident && s.buffers[b].role == role) total += s.buffers[b].bytes;
  }
  return total;
}

std::int64_t bytes_of_role(const Schedule& s, MemoryRole role, bool held) {
  std::int64_t total = 0;
  for (const Buffer& b : s.buffers) {
    if (b.role == role && (held ? b.held_to_end : b.resident)) total += b.bytes;
  }
  return total;
}

std::optional<traces::Phase> phase_of(const traces::Trace& trace, const Task& task) {
  if (!task.op) return std::nullopt;
  return trace.op(*task.op).phase;
}

TEST(DataParallel, OneRankLeavesTheScheduleAlone) {
  const auto trace = small_gpt(zoo::Precision::fp32);
  Schedule s = baseline_schedule(trace);
  const std::size_t tasks = s.tasks.size();
  apply_data_parallel(s, trace, DataParallelSpec{});
  EXPECT_EQ(s.tasks.size(), tasks);
  EXPECT_TRUE(collective_tasks(s).empty());
}

TEST(DataParallel, RejectsImpossibleSpecs) {
  DataParallelSpec spec;
  spec.ranks = 0;
  EXPECT_THROW(check_data_parallel(spec), std::invalid_argument);
  spec.ranks = 2;
  spec.zero_stage = 4;
  EXPECT_THROW(check_data_parallel(spec), std::invalid_argument);
}

// DDP: buckets of at least 25 MiB (the first 1 MiB) in the order gradients become ready, each
// all-reduced after the last backward op writing one of its gradients; all gradients reduced
// exactly once; the optimizer waits for the last all-reduce; the bucket copy holds one more
// gradient-sized buffer unless gradient_as_bucket_view.
// PyTorch's fp16 and bf16 compress hooks (DdpCommHook, default_hooks.py _compress_hook): fp32
// gradients are cast to 16 bits and divided by the world size on the compute stream (two
// memory-bound kernels: e x (4 + 2) bytes, then e x (2 + 2)), all-reduced at half the bytes
// through a half-size temporary, and copied back into the bucket on the comm stream (e x (2 + 4)
// bytes), before the optimizer; 16-bit gradients of the hook's type only divide in place.
TEST(DataParallel, DdpCompressHooksHalveTheAllReduceAndCastAroundIt) {
  const Platform platform = builtin_platform("a100-80gb");
  const double bandwidth = platform.gpu.memory_bandwidth * platform.efficiency.memory_default;
  const double launch = platform.gpu.launch_overhead;
  const auto trace = small_gpt(zoo::Precision::fp32, 4);
  const Schedule before = baseline_schedule(trace);
  DataParallelSpec spec;
  spec.ranks = 8;
  Schedule plain = before;
  apply_data_parallel(plain, trace, spec, platform);
  for (const DdpCommHook hook : {DdpCommHook::fp16, DdpCommHook::bf16}) {
    SCOPED_TRACE(std::string(to_string(hook)));
    Schedule s = before;
    spec.comm_hook = hook;
    apply_data_parallel(s, trace, spec, platform);
    ASSERT_NO_THROW(s.validate());
    const auto reduces = collective_tasks(s, CollectiveKind::all_reduce);
    const auto plain_reduces = collective_tasks(plain, CollectiveKind::all_reduce);
    ASSERT_EQ(reduces.size(), plain_reduces.size());
    ASSERT_GE(reduces.size(), 3u);
    for (std::size_t i = 0; i < reduces.size(); ++i) {
      const Task& c = s.tasks[reduces[i]];
      const std::int64_t fp32_bytes = plain.tasks[plain_reduces[i]].bytes;
      const double e = static_cast<double>(fp32_bytes / 4);
      EXPECT_EQ(c.bytes, fp32_bytes / 2) << c.name;
      // Just before: the cast and division, on the compute stream, which the all-reduce waits for.
      const Task& compress = s.tasks[reduces[i] - 1];
      EXPECT_EQ(compress.kind, TaskKind::compress);
      EXPECT_EQ(compress.stream, Stream::compute);
      ASSERT_EQ(c.after.size(), 1u);
      EXPECT_EQ(c.after[0], reduces[i] - 1);
      EXPECT_NEAR(compress.seconds, (e * 6 + e * 4) / bandwidth + 2 * launch, 1e-12);
      // The half-size temporary it makes, which the all-reduce and the copy back use.
      ASSERT_EQ(compress.creates.size(), 1u);
      const Buffer& copy = s.buffers[compress.creates[0]];
      EXPECT_EQ(copy.bytes, fp32_bytes / 2);
      EXPECT_EQ(copy.role, MemoryRole::temporary);
      EXPECT_FALSE(copy.resident);
      // Just after: the copy back, on the comm stream.
      const Task& back = s.tasks[reduces[i] + 1];
      EXPECT_EQ(back.kind, TaskKind::decompress);
      EXPECT_EQ(back.stream, Stream::comm);
      EXPECT_NEAR(back.seconds, e * 6 / bandwidth + launch, 1e-12);
      EXPECT_NE(std::find(back.uses.begin(), back.uses.end(), compress.creates[0]), back.uses.end());
    }
    // The optimizer waits for the last copy back.
    const auto first_optimizer = std::find_if(s.tasks.begin(), s.tasks.end(), [&](const Task& t) { return phase_of(trace, t) == traces::Phase::optimizer; });
    ASSERT_NE(first_optimizer, s.tasks.end());
    EXPECT_NE(std::find(first_optimizer->after.begin(), first_optimizer->after.end(), reduces.back() + 1), first_optimizer->after.end());
  }
  // fp16 gradients under the fp16 hook: the division only, in place; nothing to copy back.
  const auto half = small_gpt(zoo::Precision::fp16, 4);
  Schedule h = baseline_schedule(half);
  spec.comm_hook = DdpCommHook::fp16;
  apply_data_parallel(h, half, spec, platform);
  ASSERT_NO_THROW(h.validate());
  std::size_t compresses = 0;
  for (const TaskId r : collective_tasks(h, CollectiveKind::all_reduce)) {
    const Task& compress = h.tasks[r - 1];
    ASSERT_EQ(compress.kind, TaskKind::compress);
    EXPECT_TRUE(compress.creates.empty());
    EXPECT_NEAR(compress.seconds, static_cast<double>(h.tasks[r].bytes / 2) * 4 / bandwidth + launch, 1e-12);
    ++compresses;
  }
  EXPECT_GT(compresses, 0u);
  for (const Task& t : h.tasks) EXPECT_NE(t.kind, TaskKind::decompress) << t.name;
  // Without the platform the hook cannot be timed.
  Schedule no_platform = before;
  EXPECT_THROW(apply_data_parallel(no_platform, trace, spec), std::invalid_argument);
}

// PowerSGD (DdpCommHook::powersgd, rank 2, min_compression_rate 2) on an fp32 GPT-2: per bucket,
// the gradients whose shape[0] x rest matrix is worth compressing ((n + m) r 2 < n m) send n r and
// m r elements in two all-reduces, the others one all-reduce of their elements; the error feedback
// (the bucket's bytes) and the Ps and Qs stay resident; the compute stream runs the first stage,
// the comm stream the rest, and the optimizer waits for the last.
TEST(DataParallel, PowerSgdSendsLowRankFactorsAndTheRestAsTheyAre) {
  const Platform platform = builtin_platform("a100-80gb");
  const auto trace = small_gpt(zoo::Precision::fp32, 4);
  Schedule plain = baseline_schedule(trace);
  DataParallelSpec spec;
  spec.ranks = 8;
  apply_data_parallel(plain, trace, spec, platform);
  spec.comm_hook = DdpCommHook::powersgd;
  spec.powersgd.rank = 2;
  Schedule s = baseline_schedule(trace);
  apply_data_parallel(s, trace, spec, platform);
  ASSERT_NO_THROW(s.validate());
  // The expected factors, bucket by bucket, from the plain schedule's all-reduces (their gradients).
  std::int64_t p_total = 0, q_total = 0, rest_total = 0, bucket_total = 0;
  for (const TaskId r : collective_tasks(plain, CollectiveKind::all_reduce)) {
    for (const BufferId g : plain.tasks[r].uses) {
      if (!plain.buffers[g].tensor || plain.buffers[g].role != MemoryRole::gradient) continue;
      const traces::Tensor& t = trace.tensor(*plain.buffers[g].tensor);
      const std::int64_t n = t.shape.empty() ? 1 : t.shape[0];
      const std::int64_t m = t.elements() / n;
      const std::int64_t rank = std::min<std::int64_t>({n, m, 2});
      if ((n + m) * rank * 2 < n * m) {
        p_total += n * rank;
        q_total += m * rank;
      } else {
        rest_total += t.elements();
      }
    }
    bucket_total += plain.tasks[r].bytes;
  }
  ASSERT_GT(p_total, 0);
  ASSERT_GT(rest_total, 0) << "the biases and layer norms stay uncompressed";
  std::int64_t p_sent = 0, q_sent = 0, rest_sent = 0;
  for (const TaskId r : collective_tasks(s, CollectiveKind::all_reduce)) {
    const Task& c = s.tasks[r];
    if (c.name.find("the Ps") != std::string::npos) p_sent += c.bytes;
    else if (c.name.find("the Qs") != std::string::npos) q_sent += c.bytes;
    else if (c.name.find("uncompressed") != std::string::npos) rest_sent += c.bytes;
    else ADD_FAILURE() << c.name;
  }
  EXPECT_EQ(p_sent, 4 * p_total);
  EXPECT_EQ(q_sent, 4 * q_total);
  EXPECT_EQ(rest_sent, 4 * rest_total);
  EXPECT_LT(p_sent + q_sent + rest_sent, bucket_total / 10) << "the point of it";
  // Resident: the error feedback (every bucket's bytes) and the factors.
  std::int64_t error = 0, factors = 0;
  for (const Buffer& b : s.buffers) {
    if (b.name.find("PowerSGD error feedback") != std::string::npos && b.resident) error += b.bytes;
    if (b.name.find("PowerSGD P and Q") != std::string::npos && b.resident) factors += b.bytes;
  }
  EXPECT_EQ(error, bucket_total);
  EXPECT_EQ(factors, 4 * (p_total + q_total));
  // Streams: the first stage on the compute stream, the rest on the comm stream; the optimizer
  // waits for the last task of the last bucket.
  TaskId last = 0;
  for (TaskId t = 0; t < s.tasks.size(); ++t) {
    const Task& task = s.tasks[t];
    if (task.name.find("PowerSGD") == std::string::npos) continue;
    EXPECT_EQ(task.stream, task.name.find("error feedback, Q orthogonalization") != std::string::npos ? Stream::compute : Stream::comm) << task.name;
    if (task.kind != TaskKind::collective) {
      EXPECT_GT(task.seconds, 0.0) << task.name;
    }
    last = t;
  }
  const auto first_optimizer = std::find_if(s.tasks.begin(), s.tasks.end(), [&](const Task& t) { return phase_of(trace, t) == traces::Phase::optimizer; });
  ASSERT_NE(first_optimizer, s.tasks.end());
  EXPECT_NE(std::find(first_optimizer->after.begin(), first_optimizer->after.end(), last), first_optimizer->after.end());
  EXPECT_NE(s.tasks[last].name.find("M = P Q^T"), std::string::npos);
}

TEST(DataParallel, DdpBucketsFollowTheBackwardPassAndGateTheOptimizer) {
  const auto trace = small_gpt(zoo::Precision::fp32, 4);
  const Schedule before = baseline_schedule(trace);
  const std::int64_t gradient_bytes = bytes_of_role(before, MemoryRole::gradient, true);
  ASSERT_GT(gradient_bytes, std::int64_t{100} << 20);  // several buckets

  Schedule s = before;
  DataParallelSpec spec;
  spec.ranks = 8;
  apply_data_parallel(s, trace, spec);
  ASSERT_NO_THROW(s.validate());
  const auto reduces = collective_tasks(s, CollectiveKind::all_reduce);
  ASSERT_GE(reduces.size(), 3u);
  std::int64_t reduced = 0;
  std::set<BufferId> seen;
  for (std::size_t i = 0; i < reduces.size(); ++i) {
    const Task& c = s.tasks[reduces[i]];
    EXPECT_EQ(c.stream, Stream::comm);
    reduced += c.bytes;
    // Every bucket but the last of its dtype reaches its cap.
    if (i + 1 < reduces.size()) {
      EXPECT_GE(c.bytes, i == 0 ? spec.first_bucket_bytes : spec.bucket_cap_bytes) << c.name;
    }
    // It waits for the last backward op touching any of its gradients, and comes right after it.
    ASSERT_EQ(c.after.size(), 1u);
    const TaskId ready = c.after[0];
    EXPECT_EQ(phase_of(trace, s.tasks[ready]), traces::Phase::backward);
    for (BufferId b : c.uses) {
      if (s.buffers[b].role != MemoryRole::gradient || !s.buffers[b].tensor) continue;
      EXPECT_TRUE(seen.insert(b).second) << "gradient reduced twice";
      for (TaskId t = ready + 1; t < s.tasks.size(); ++t) {
        const Task& u = s.tasks[t];
        if (phase_of(trace, u) != traces::Phase::backward) continue;
        const bool writes = std::count(u.creates.begin(), u.creates.end(), b) + std::count(u.uses.begin(), u.uses.end(), b) > 0;
        EXPECT_FALSE(writes) << u.name << " writes a gradient after its bucket was reduced";
      }
    }
  }
  EXPECT_EQ(reduced, gradient_bytes);
  // The optimizer's first task waits for the last all-reduce.
  const auto first_optimizer = std::find_if(s.tasks.begin(), s.tasks.end(), [&](const Task& t) { return phase_of(trace, t) == traces::Phase::optimizer; });
  ASSERT_NE(first_optimizer, s.tasks.end());
  EXPECT_NE(std::find(first_optimizer->after.begin(), first_optimizer->after.end(), reduces.back()), first_optimizer->after.end());
  // One more gradient-sized buffer for the buckets, resident.
  EXPECT_EQ(resident_bytes(s, MemoryRole::gradient), gradient_bytes);

  Schedule view = before;
  spec.gradient_as_bucket_view = true;
  apply_data_parallel(view, trace, spec);
  EXPECT_EQ(resident_bytes(view, MemoryRole::gradient), 0);
  EXPECT_EQ(collective_tasks(view).size(), reduces.size());
}

// With the platform, DDP's copies between the gradients and the buckets (gradient_as_bucket_view
// false) are memory-bound kernels on the compute stream: per bucket a copy-in right after its last
// gradient is ready, which its all-reduce waits for (each gradient read and its bucket view
// written, one launch per gradient); after the last all-reduce one copy-out of every gradient,
// just before the optimizer. As views of the buckets there is nothing to copy.
TEST(DataParallel, DdpCopiesGradientsIntoAndOutOfTheBuckets) {
  const auto trace = small_gpt(zoo::Precision::fp32, 4);
  const Platform a100 = builtin_platform("a100-80gb");
  const auto kernel_seconds = [&](double bytes, int launches) {
    return run_kernel(a100.gpu, KernelWork{0.0, bytes / (a100.gpu.memory_bandwidth * a100.efficiency.memory_default),
                                           launches * a100.gpu.launch_overhead})
        .seconds;
  };
  const Schedule before = baseline_schedule(trace);
  const std::int64_t gradient_bytes = bytes_of_role(before, MemoryRole::gradient, true);
  Schedule s = before;
  DataParallelSpec spec;
  spec.ranks = 8;
  apply_data_parallel(s, trace, spec, a100);
  ASSERT_NO_THROW(s.validate());
  const auto reduces = collective_tasks(s, CollectiveKind::all_reduce);
  ASSERT_GE(reduces.size(), 3u);
  std::int64_t copied_in = 0;
  int launches = 0;
  for (const TaskId r : reduces) {
    ASSERT_EQ(s.tasks[r].after.size(), 1u);
    const TaskId in = s.tasks[r].after[0];
    const Task& copy = s.tasks[in];
    EXPECT_EQ(copy.kind, TaskKind::framework) << copy.name;
    EXPECT_EQ(copy.stream, Stream::compute);
    EXPECT_TRUE(copy.name.starts_with("DDP copy-in")) << copy.name;
    // Right after the backward op that made the bucket's last gradient.
    ASSERT_EQ(copy.after.size(), 1u);
    EXPECT_EQ(copy.after[0] + 1, in);
    EXPECT_EQ(phase_of(trace, s.tasks[copy.after[0]]), traces::Phase::backward);
    int gradients = 0;
    for (BufferId b : copy.uses) gradients += s.buffers[b].role == MemoryRole::gradient && s.buffers[b].tensor ? 1 : 0;
    EXPECT_DOUBLE_EQ(copy.seconds, kernel_seconds(2.0 * static_cast<double>(s.tasks[r].bytes), gradients));
    copied_in += s.tasks[r].bytes;
    launches += gradients;
  }
  EXPECT_EQ(copied_in, gradient_bytes);
  // The copy-out: after the last all-reduce, the task just before the optimizer's first.
  const auto first_optimizer = std::find_if(s.tasks.begin(), s.tasks.end(), [&](const Task& t) { return phase_of(trace, t) == traces::Phase::optimizer; });
  ASSERT_NE(first_optimizer, s.tasks.begin());
  const Task& out = *(first_optimizer - 1);
  EXPECT_TRUE(out.name.starts_with("DDP copy-out")) << out.name;
  EXPECT_EQ(out.kind, TaskKind::framework);
  EXPECT_EQ(out.stream, Stream::compute);
  EXPECT_EQ(out.after, std::vector<TaskId>{reduces.back()});
  EXPECT_DOUBLE_EQ(out.seconds, kernel_seconds(2.0 * static_cast<double>(gradient_bytes), launches));

  Schedule view = before;
  spec.gradient_as_bucket_view = true;
  apply_data_parallel(view, trace, spec, a100);
  EXPECT_EQ(std::count_if(view.tasks.begin(), view.tasks.end(), [](const Task& t) { return t.kind == TaskKind::framework; }), 0);
}

// PyTorch's DDP over a world of one still copies every gradient into its bucket and back (the DDP
// benchmark's '1 GPUs -- 1M/1G' row against 'no ddp'); ZeRO and FSDP2 over one GPU have nothing to
// partition and leave the schedule as it is.
TEST(DataParallel, DdpOverOneRankStillCopiesTheGradients) {
  const auto trace = small_gpt(zoo::Precision::fp32, 4);
  const Platform a100 = builtin_platform("a100-80gb");
  const Schedule before = baseline_schedule(trace);
  DataParallelSpec spec;
  spec.ranks = 1;
  Schedule ddp = before;
  ASSERT_TRUE(apply_data_parallel(ddp, trace, spec, a100));
  ASSERT_NO_THROW(ddp.validate());
  const auto copies = std::count_if(ddp.tasks.begin(), ddp.tasks.end(), [](const Task& t) { return t.kind == TaskKind::framework; });
  EXPECT_EQ(copies, static_cast<long>(collective_tasks(ddp, CollectiveKind::all_reduce).size()) + 1);  // a copy-in per bucket, one copy-out
  Schedule zero = before;
  spec.zero_stage = 1;
  EXPECT_FALSE(apply_data_parallel(zero, trace, spec, a100));
  EXPECT_EQ(zero.tasks.size(), before.tasks.size());
}

// ZeRO's per-GPU model-state bytes (Rajbhandari et al., SC20, Figure 1: with mixed-precision
// Adam, 2 + 2 + 12 bytes per parameter): stage 1 keeps 2Ψ + 2Ψ + 12Ψ/N, stage 2 2Ψ + (2 + 12)Ψ/N
// (plus DeepSpeed's reduction bucket, here the whole gradient of this small model), stage 3 (2 +
// 2 + 12)Ψ/N. Exact to the byte, each partition rounded up.
TEST(DataParallel, ZeroModelStateBytesAreThePapersFormulas) {
  const auto trace = small_gpt(zoo::Precision::mixed);
  const std::int64_t psi = traces::summarize(trace).parameters;
  const Schedule before = baseline_schedule(trace);
  ASSERT_EQ(bytes_of_role(before, MemoryRole::weight, false), 2 * psi);
  ASSERT_EQ(bytes_of_role(before, MemoryRole::gradient, true), 2 * psi);
  ASSERT_EQ(bytes_of_role(before, MemoryRole::optimizer_state, false), 12 * psi);
  const int n = 8;
  const auto part = [&](std::int64_t bytes) { return (bytes + n - 1) / n; };
  for (int stage = 1; stage <= 3; ++stage) {
    Schedule s = before;
    DataParallelSpec spec;
    spec.ranks = n;
    spec.zero_stage = stage;
    spec.max_reuse_distance_elements = 0;  // ZeRO-3 gathers anew in backward (ZeroStage3KeepsParametersReusedWithinTheReuseDistance: the reuse)
    apply_data_parallel(s, trace, spec);
    ASSERT_NO_THROW(s.validate()) << "stage " << stage;
    EXPECT_EQ(resident_bytes(s, MemoryRole::optimizer_state), part(12 * psi)) << "stage " << stage;
    EXPECT_EQ(resident_bytes(s, MemoryRole::weight), stage == 3 ? part(2 * psi) : 2 * psi) << "stage " << stage;
    if (stage == 1) {
      EXPECT_EQ(bytes_of_role(s, MemoryRole::gradient, true), 2 * psi);
      EXPECT_EQ(resident_bytes(s, MemoryRole::gradient), 0);
    } else {
      // The partition, and the reduction bucket: min(5e8 elements, Ψ) x 2 bytes.
      EXPECT_EQ(bytes_of_role(s, MemoryRole::gradient, true), 0);
      EXPECT_EQ(resident_bytes(s, MemoryRole::gradient), part(2 * psi) + 2 * psi) << "stage " << stage;
    }
    // Stage 1 and 2 exchange 2Ψ elements per step (reduce-scatter + all-gather), stage 3 3Ψ.
    std::int64_t scattered = 0;
    std::int64_t gathered = 0;
    for (TaskId t : collective_tasks(s, CollectiveKind::reduce_scatter)) scattered += s.tasks[t].bytes;
    for (TaskId t : collective_tasks(s, CollectiveKind::all_gather)) gathered += s.tasks[t].bytes;
    EXPECT_EQ(scattered, 2 * psi) << "stage " << stage;
    EXPECT_TRUE(collective_tasks(s, CollectiveKind::all_reduce).empty());
    if (stage < 3) {
      EXPECT_EQ(gathered, 2 * psi) << "stage " << stage;
    } else {
      // Forward and backward each gather every parameter an op reads: all of them in forward;
      // in backward, those a backward op reads (the embeddings' tables are not re-read by
      // their backward, which needs only the indices).
      EXPECT_GT(gathered, 2 * psi);
      EXPECT_LE(gathered, 4 * psi);
    }
  }
}

// ZeRO-3: every forward and backward op reads parameters only through a gathered copy made by
// an all-gather it waits for, and the optimizer reads the partition.
// ZeRO++ (DataParallelSpec::hpz_partition_size, quantized_weights) on ZeRO-3 over 16 ranks:
// hpZ's backward all-gathers run within groups of 8 from a resident secondary partition of 1/8 of
// the 16-bit weights, the forward ones over every rank from the primary partition; qwZ's
// all-gathers move one byte per element, after a quantization of the rank's share (16-bit read,
// int8 written) and before a dequantization that creates the gathered parameters (int8 read,
// 16-bit written), both memory-bound kernels on the comm stream, and the op waits for the latter.
TEST(DataParallel, ZeroPlusPlusGathersWithinGroupsAndInInt8) {
  const Platform platform = builtin_platform("a100-80gb");
  const double bandwidth = platform.gpu.memory_bandwidth * platform.efficiency.memory_default;
  const double launch = platform.gpu.launch_overhead;
  const auto trace = small_gpt(zoo::Precision::mixed);
  DataParallelSpec spec;
  spec.ranks = 16;
  spec.zero_stage = 3;
  spec.max_reuse_distance_elements = 0;  // every backward use gathers (the small model would keep all its weights otherwise)
  Schedule plain = baseline_schedule(trace);
  apply_data_parallel(plain, trace, spec, platform);
  const std::int64_t weight_bytes = [&] {
    std::int64_t total = 0;
    for (const Buffer& b : baseline_schedule(trace).buffers) total += b.role == MemoryRole::weight && b.resident ? b.bytes : 0;
    return total;
  }();

  spec.hpz_partition_size = 8;
  Schedule h = baseline_schedule(trace);
  apply_data_parallel(h, trace, spec, platform);
  ASSERT_NO_THROW(h.validate());
  const auto secondary = std::find_if(h.buffers.begin(), h.buffers.end(), [](const Buffer& b) { return b.name.find("hpZ secondary") != std::string::npos; });
  ASSERT_NE(secondary, h.buffers.end());
  EXPECT_EQ(secondary->bytes, (weight_bytes + 7) / 8);
  EXPECT_TRUE(secondary->resident);
  const BufferId secondary_id = static_cast<BufferId>(secondary - h.buffers.begin());
  int backward = 0;
  int forward = 0;
  for (const TaskId t : collective_tasks(h, CollectiveKind::all_gather)) {
    const Task& c = h.tasks[t];
    if (c.name.find("for backward") != std::string::npos) {
      EXPECT_EQ(c.groups, (RankGroups{8, 1})) << c.name;
      EXPECT_EQ(c.uses, std::vector<BufferId>{secondary_id});
      ++backward;
    } else {
      EXPECT_TRUE(c.groups.every_rank()) << c.name;
      EXPECT_NE(c.uses, std::vector<BufferId>{secondary_id});
      ++forward;
    }
  }
  EXPECT_GT(backward, 0);
  EXPECT_GT(forward, 0);
  EXPECT_EQ(collective_tasks(h, CollectiveKind::all_gather).size(), collective_tasks(plain, CollectiveKind::all_gather).size());

  spec.hpz_partition_size = 1;
  spec.quantized_weights = true;
  Schedule q = baseline_schedule(trace);
  apply_data_parallel(q, trace, spec, platform);
  ASSERT_NO_THROW(q.validate());
  const auto plain_gathers = collective_tasks(plain, CollectiveKind::all_gather);
  const auto gathers = collective_tasks(q, CollectiveKind::all_gather);
  ASSERT_EQ(gathers.size(), plain_gathers.size());
  for (std::size_t i = 0; i < gathers.size(); ++i) {
    const Task& c = q.tasks[gathers[i]];
    const std::int64_t bytes16 = plain.tasks[plain_gathers[i]].bytes;  // fp16 weights: 2 bytes per element
    const double e = static_cast<double>(bytes16 / 2);
    EXPECT_EQ(c.bytes, bytes16 / 2) << c.name;
    const Task& quantize = q.tasks[gathers[i] - 1];
    const Task& dequantize = q.tasks[gathers[i] + 1];
    EXPECT_EQ(quantize.kind, TaskKind::compress);
    EXPECT_EQ(quantize.stream, Stream::comm);
    EXPECT_NEAR(quantize.seconds, e / 16 * 3 / bandwidth + launch, 1e-12);
    EXPECT_EQ(dequantize.kind, TaskKind::decompress);
    EXPECT_EQ(dequantize.stream, Stream::comm);
    EXPECT_NEAR(dequantize.seconds, e * 3 / bandwidth + launch, 1e-12);
    EXPECT_EQ(dequantize.creates.size(), plain.tasks[plain_gathers[i]].creates.size()) << "the gathered parameters";
    ASSERT_EQ(c.creates.size(), 1u);
    EXPECT_EQ(q.buffers[c.creates[0]].bytes, bytes16 / 2);
    EXPECT_EQ(dequantize.uses, c.creates);
  }
  // Every op that reads a gathered parameter waits for its dequantization.
  std::map<BufferId, TaskId> made_by;
  for (TaskId t = 0; t < q.tasks.size(); ++t) {
    if (q.tasks[t].kind == TaskKind::decompress) {
      for (BufferId b : q.tasks[t].creates) made_by[b] = t;
    }
  }
  int waits = 0;
  for (const Task& task : q.tasks) {
    if (!task.op) continue;
    for (BufferId b : task.uses) {
      if (made_by.count(b) && std::find(task.after.begin(), task.after.end(), made_by[b]) != task.after.end()) ++waits;
    }
  }
  EXPECT_GT(waits, 0);
  // ZeRO++ is stage 3's; hpZ's groups divide the ranks.
  DataParallelSpec bad = spec;
  bad.zero_stage = 2;
  EXPECT_THROW(check_data_parallel(bad), std::invalid_argument);
  bad = spec;
  bad.hpz_partition_size = 3;
  EXPECT_THROW(check_data_parallel(bad), std::invalid_argument);
}

// ZeRO++'s qgZ (DataParallelSpec::quantized_gradients) on ZeRO-3 over 16 ranks, 4 per node: the
// gradients of more than one dimension that 2 x 16 divides (E values) leave the reduce-scatter
// for DeepSpeed's all_to_all_quant_reduce -- an int4 quantization (E 16-bit values read, E/2
// bytes written), an all-to-all of E/2 bytes within each node's 4 ranks, a reduction and
// requantization (E/2 read, E/8 written), an all-to-all of E/8 bytes among the 4 ranks of the
// same local index, a dequantization and the sum of the 4 chunks (E/8 read, E/4 16-bit values
// written, 3 adds of two E/16-value chunks into one and the division by 4) -- while the vectors
// keep a reduce-scatter of their bytes. One node (ranks_per_node = ranks) reduce-scatters as
// DeepSpeed falls back to.
TEST(DataParallel, ZeroPlusPlusQuantizedGradientsGoThroughTwoAllToAlls) {
  const Platform platform = builtin_platform("a100-80gb");
  const double bandwidth = platform.gpu.memory_bandwidth * platform.efficiency.memory_default;
  const double launch = platform.gpu.launch_overhead;
  const auto trace = small_gpt(zoo::Precision::mixed);
  DataParallelSpec spec;
  spec.ranks = 16;
  spec.zero_stage = 3;
  spec.ranks_per_node = 4;
  Schedule plain = baseline_schedule(trace);
  apply_data_parallel(plain, trace, spec, platform);
  ASSERT_EQ(collective_tasks(plain, CollectiveKind::reduce_scatter).size(), 1u) << "one bucket of reduce_bucket_size";
  const std::int64_t all_bytes = plain.tasks[collective_tasks(plain, CollectiveKind::reduce_scatter)[0]].bytes;
  // The quantized values and tensors, by the gradients' shapes.
  double e = 0;
  int matrices = 0;
  std::int64_t vector_bytes = 0;
  for (const Buffer& b : baseline_schedule(trace).buffers) {
    if (b.role != MemoryRole::gradient || !b.tensor) continue;
    const traces::Tensor& t = trace.tensor(*b.tensor);
    if (t.shape.size() >= 2 && t.elements() % 32 == 0) {
      e += static_cast<double>(t.elements());
      ++matrices;
    } else {
      vector_bytes += b.bytes;
    }
  }
  ASSERT_GT(matrices, 0);
  ASSERT_GT(vector_bytes, 0);
  EXPECT_EQ(static_cast<std::int64_t>(e) * 2 + vector_bytes, all_bytes);

  spec.quantized_gradients = true;
  ASSERT_NO_THROW(check_data_parallel(spec));
  Schedule q = baseline_schedule(trace);
  apply_data_parallel(q, trace, spec, platform);
  ASSERT_NO_THROW(q.validate());
  const auto scatters = collective_tasks(q, CollectiveKind::reduce_scatter);
  ASSERT_EQ(scatters.size(), 1u);
  EXPECT_EQ(q.tasks[scatters[0]].bytes, vector_bytes);
  const auto exchanges = collective_tasks(q, CollectiveKind::all_to_all);
  ASSERT_EQ(exchanges.size(), 2u);
  const Task& within = q.tasks[exchanges[0]];
  const Task& across = q.tasks[exchanges[1]];
  EXPECT_EQ(within.groups, (RankGroups{4, 1}));
  EXPECT_EQ(within.bytes, static_cast<std::int64_t>(e / 2));
  EXPECT_EQ(across.groups, (RankGroups{4, 4}));
  EXPECT_EQ(across.bytes, static_cast<std::int64_t>(std::ceil(e / 8)));
  // The kernels around them, in stream order on the comm stream.
  const Task& quantize = q.tasks[exchanges[0] - 1];
  const Task& reduce = q.tasks[exchanges[0] + 1];
  const Task& dequantize = q.tasks[exchanges[1] + 1];
  for (const Task* k : {&quantize, &reduce, &dequantize}) EXPECT_EQ(k->stream, Stream::comm) << k->name;
  EXPECT_EQ(quantize.kind, TaskKind::compress);
  EXPECT_EQ(reduce.kind, TaskKind::compress);
  EXPECT_EQ(dequantize.kind, TaskKind::decompress);
  EXPECT_EQ(exchanges[1], exchanges[0] + 2);
  EXPECT_NEAR(quantize.seconds, (2 * e + e / 2) / bandwidth + matrices * launch, 1e-12);
  EXPECT_NEAR(reduce.seconds, (e / 2 + e / 8) / bandwidth + matrices * launch, 1e-12);
  const double chunk = e / 16 * 2;
  EXPECT_NEAR(dequantize.seconds, (e / 8 + e / 4 * 2 + 3 * 3 * chunk + 2 * chunk) / bandwidth + matrices * 5 * launch, 1e-12);
  // The int4 temporaries: each exchange reads what the kernel before it wrote and writes what
  // the kernel after it reads.
  ASSERT_EQ(quantize.creates.size(), 1u);
  EXPECT_EQ(q.buffers[quantize.creates[0]].bytes, static_cast<std::int64_t>(e / 2));
  EXPECT_EQ(within.uses, quantize.creates);
  EXPECT_EQ(reduce.uses, within.creates);
  EXPECT_EQ(across.uses, reduce.creates);
  EXPECT_EQ(dequantize.uses, across.creates);
  EXPECT_EQ(q.buffers[across.creates[0]].bytes, static_cast<std::int64_t>(std::ceil(e / 8)));

  // One node: DeepSpeed's reduce-scatter, the schedule as without qgZ.
  DataParallelSpec one_node = spec;
  one_node.ranks_per_node = 16;
  Schedule f = baseline_schedule(trace);
  apply_data_parallel(f, trace, one_node, platform);
  EXPECT_TRUE(collective_tasks(f, CollectiveKind::all_to_all).empty());
  EXPECT_EQ(f.tasks.size(), plain.tasks.size());
  // qgZ is stage 3's, and its node groups divide the ranks.
  DataParallelSpec bad = spec;
  bad.zero_stage = 2;
  EXPECT_THROW(check_data_parallel(bad), std::invalid_argument);
  bad = spec;
  bad.ranks_per_node = 0;
  EXPECT_THROW(check_data_parallel(bad), std::invalid_argument);
  bad.ranks_per_node = 3;
  EXPECT_THROW(check_data_parallel(bad), std::invalid_argument);
}

// Megatron-LM's fp32 gradient buffer (DataParallelSpec::grad_reduce_in_fp32) under its
// distributed optimizer (ZeRO-1): every fp16 gradient is held as fp32 (twice its bytes), the
// buckets hold the same elements (reduce_bucket_size counts elements), and each reduce-scatter
// moves twice the bytes; the parameters' all-gather is unchanged.
TEST(DataParallel, Fp32GradientBufferDoublesTheGradientsAndTheirReductions) {
  const auto trace = small_gpt(zoo::Precision::mixed);
  DataParallelSpec spec;
  spec.ranks = 8;
  spec.zero_stage = 1;
  spec.overlap_comm = true;
  spec.reduce_bucket_elements = 200'000;
  Schedule plain = baseline_schedule(trace);
  apply_data_parallel(plain, trace, spec);
  spec.grad_reduce_in_fp32 = true;
  ASSERT_NO_THROW(check_data_parallel(spec));
  Schedule wide = baseline_schedule(trace);
  apply_data_parallel(wide, trace, spec);
  ASSERT_NO_THROW(wide.validate());
  const auto plain_scatters = collective_tasks(plain, CollectiveKind::reduce_scatter);
  const auto scatters = collective_tasks(wide, CollectiveKind::reduce_scatter);
  ASSERT_GT(plain_scatters.size(), 1u);
  ASSERT_EQ(scatters.size(), plain_scatters.size());
  for (std::size_t i = 0; i < scatters.size(); ++i) EXPECT_EQ(wide.tasks[scatters[i]].bytes, 2 * plain.tasks[plain_scatters[i]].bytes);
  const auto plain_gathers = collective_tasks(plain, CollectiveKind::all_gather);
  const auto gathers = collective_tasks(wide, CollectiveKind::all_gather);
  ASSERT_EQ(gathers.size(), plain_gathers.size());
  for (std::size_t i = 0; i < gathers.size(); ++i) EXPECT_EQ(wide.tasks[gathers[i]].bytes, plain.tasks[plain_gathers[i]].bytes);
  EXPECT_EQ(bytes_of_role(wide, MemoryRole::gradient, true), 2 * bytes_of_role(plain, MemoryRole::gradient, true));
  // Megatron's DDP and distributed optimizer only.
  DataParallelSpec bad = spec;
  bad.zero_stage = 2;
  EXPECT_THROW(check_data_parallel(bad), std::invalid_argument);
  bad = spec;
  bad.zero_stage = 0;
  bad.comm_hook = DdpCommHook::bf16;
  EXPECT_THROW(check_data_parallel(bad), std::invalid_argument);
}

// DeepSpeed's stage3_max_reuse_distance (DataParallelSpec::max_reuse_distance_elements): a
// weight's forward copy stays gathered into the backward pass when the weights read between its
// last forward use and its first backward use hold fewer elements than the distance. 0 keeps
// none (every backward use gathers again); a distance beyond the whole model keeps every weight
// both passes read (no backward gather of them); in between, the weights read last in the
// forward pass (nearest their backward use) are the ones kept.
TEST(DataParallel, ZeroStage3KeepsParametersReusedWithinTheReuseDistance) {
  const auto trace = small_gpt(zoo::Precision::mixed);
  DataParallelSpec spec;
  spec.ranks = 4;
  spec.zero_stage = 3;
  const auto backward_gathers = [&](std::int64_t distance, std::set<std::string>* kept = nullptr) {
    spec.max_reuse_distance_elements = distance;
    Schedule s = baseline_schedule(trace);
    apply_data_parallel(s, trace, spec);
    EXPECT_NO_THROW(s.validate());
    std::int64_t bytes = 0;
    for (const TaskId t : collective_tasks(s, CollectiveKind::all_gather)) {
      if (s.tasks[t].name.find("for backward") != std::string::npos) bytes += s.tasks[t].bytes;
    }
    if (kept != nullptr) {
      for (const Buffer& b : s.buffers) {
        if (b.name.find("(kept for backward)") != std::string::npos) kept->insert(b.name);
      }
    }
    return bytes;
  };
  const std::int64_t none_kept = backward_gathers(0);
  std::set<std::string> all;
  const std::int64_t all_kept = backward_gathers(std::int64_t{1} << 40, &all);
  EXPECT_GT(none_kept, 0);
  EXPECT_EQ(all_kept, 0) << "every weight the backward pass reads was kept from the forward pass";
  EXPECT_FALSE(all.empty());
  // A distance of one layer's worth keeps some weights, fewer than all: the last layer's.
  std::int64_t layer = 0;
  for (const Buffer& b : baseline_schedule(trace).buffers) {
    if (b.role == MemoryRole::weight && b.resident && b.tensor && trace.tensor(*b.tensor).name.find(".h.0.") != std::string::npos) {
      layer += trace.tensor(*b.tensor).elements();
    }
  }
  ASSERT_GT(layer, 0);
  std::set<std::string> some;
  const std::int64_t some_kept = backward_gathers(layer, &some);
  EXPECT_GT(some_kept, 0);
  EXPECT_LT(some_kept, none_kept);
  EXPECT_LT(some.size(), all.size());
  for (const std::string& name : some) EXPECT_EQ(name.find(".h.0."), std::string::npos) << name << ": the first layer is read first";
}

TEST(DataParallel, ZeroStage3OpsReadGatheredParameters) {
  const auto trace = small_gpt(zoo::Precision::mixed);
  Schedule s = baseline_schedule(trace);
  DataParallelSpec spec;
  spec.ranks = 4;
  spec.zero_stage = 3;
  apply_data_parallel(s, trace, spec);
  ASSERT_NO_THROW(s.validate());
  std::map<BufferId, TaskId> gathered_by;
  for (TaskId t : collective_tasks(s, CollectiveKind::all_gather)) {
    for (BufferId b : s.tasks[t].creates) gathered_by[b] = t;
  }
  int checked = 0;
  for (TaskId t = 0; t < s.tasks.size(); ++t) {
    const Task& task = s.tasks[t];
    const auto phase = phase_of(trace, task);
    if (!phase) continue;
    for (BufferId b : task.uses) {
      if (s.buffers[b].role != MemoryRole::weight) continue;
      if (*phase == traces::Phase::optimizer) {
        EXPECT_TRUE(s.buffers[b].resident) << task.name;
        continue;
      }
      ASSERT_TRUE(gathered_by.count(b)) << task.name << " reads " << s.buffers[b].name;
      EXPECT_FALSE(s.buffers[b].resident);
      if (std::find(task.after.begin(), task.after.end(), gathered_by[b]) != task.after.end()) ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

// The flat inputs of ZeRO-3's coalesced reduce-scatters (coalesced_collectives.py@v0.13.3
// reduce_scatter_coalesced): the buffers, with the task that creates each.
std::vector<std::pair<const Buffer*, const Task*>> flat_inputs(const Schedule& s) {
  std::vector<std::pair<const Buffer*, const Task*>> out;
  for (const Task& t : s.tasks) {
    for (BufferId b : t.creates) {
      if (s.buffers[b].name.rfind("flat input of coalesced reduce-scatter", 0) == 0) out.emplace_back(&s.buffers[b], &t);
    }
  }
  return out;
}

// ZeRO-3 concatenates a bucket's gradients, each padded to ranks x ceil(numel / ranks)
// elements, into a new flat tensor before the reduce-scatter, unless the bucket is one gradient
// the ranks divide. The 2-layer GPT-2's gradients (zoo gpt2, tied head: traces/zoo/README.md),
// in elements: wte 50257·768 = 38,597,376; wpe 1024·768 = 786,432; per layer ln_1 768 + 768,
// c_attn 768·2304 = 1,769,472 + 2304, attn c_proj 768·768 = 589,824 + 768, ln_2 768 + 768,
// c_fc 768·3072 = 2,359,296 + 3072, mlp c_proj 2,359,296 + 768 (7,087,872 a layer); ln_f 768 +
// 768. Ψ = 38,597,376 + 786,432 + 2·7,087,872 + 1,536 = 53,561,088, 28 tensors, 2 bytes each
// (mixed precision).
TEST(DataParallel, ZeroStage3ConcatenatesEachBucketBeforeItsReduceScatter) {
  const auto trace = small_gpt(zoo::Precision::mixed);
  const std::int64_t psi = 53'561'088;
  ASSERT_EQ(traces::summarize(trace).parameters, psi);
  const Schedule before = baseline_schedule(trace);
  const auto run = [&](int ranks, int stage, std::int64_t bucket_elements) {
    Schedule s = before;
    DataParallelSpec spec;
    spec.ranks = ranks;
    spec.zero_stage = stage;
    spec.reduce_bucket_elements = bucket_elements;
    apply_data_parallel(s, trace, spec);
    s.validate();
    return s;
  };
  // 4 ranks divide every tensor (768 = 4·192 is a factor of each): Ψ < 5e8, one bucket of all
  // 28 gradients, one flat input of 4·(Ψ/4) = Ψ elements: 2Ψ = 107,122,176 bytes.
  {
    const Schedule s = run(4, 3, 500'000'000);
    const auto flats = flat_inputs(s);
    ASSERT_EQ(flats.size(), 1u);
    EXPECT_EQ(flats[0].first->bytes, 107'122'176);
    EXPECT_EQ(flats[0].first->bytes, 2 * psi);
    EXPECT_FALSE(flats[0].first->resident);
    EXPECT_EQ(flats[0].first->role, MemoryRole::temporary);
    EXPECT_EQ(flats[0].first->allocation_stream, AllocationStream::zero_reduce);
    // Made by the reduce-scatter, on its stream; no other task holds it (no offload).
    EXPECT_EQ(flats[0].second->collective, CollectiveKind::reduce_scatter);
    EXPECT_EQ(flats[0].second->stream, Stream::comm);
    int users = 0;
    for (const Task& t : s.tasks) {
      for (BufferId b : t.uses) users += &s.buffers[b] == flats[0].first;
    }
    EXPECT_EQ(users, 0);
  }
  // 5 ranks pad: 768 = 5·153 + 3 (pad 2), 2304 = 5·460 + 4 (1), 3072 = 5·614 + 2 (3),
  // 1,769,472 = 5·353,894 + 2 (3), 589,824 = 5·117,964 + 4 (1), 2,359,296 = 5·471,859 + 1 (4),
  // 38,597,376 = 5·7,719,475 + 1 (4), 786,432 = 5·157,286 + 2 (3). A layer pads
  // 2+2 + 3+1 + 1+2 + 2+2 + 4+3 + 4+2 = 28, the rest 4 + 3 + 2+2 = 11: 2·28 + 11 = 67 elements.
  {
    const Schedule s = run(5, 3, 500'000'000);
    const auto flats = flat_inputs(s);
    ASSERT_EQ(flats.size(), 1u);
    EXPECT_EQ(flats[0].first->bytes, 2 * (psi + 67));
  }
  // One gradient a bucket: with 4 ranks each is reduced in place (no flat input); with 5 each
  // is padded (none of the 28 divides), the same 2(Ψ + 67) bytes over 28 flat inputs.
  EXPECT_TRUE(flat_inputs(run(4, 3, 1)).empty());
  {
    const auto flats = flat_inputs(run(5, 3, 1));
    ASSERT_EQ(flats.size(), 28u);
    std::int64_t total = 0;
    for (const auto& [b, t] : flats) total += b->bytes;
    EXPECT_EQ(total, 2 * (psi + 67));
  }
  // Stage 2 reduces slices of its contiguous bucket in place (stage_1_and_2.py average_tensor).
  EXPECT_TRUE(flat_inputs(run(4, 2, 500'000'000)).empty());
}

// DeepSpeed's stages 2 and 3 reduce the open bucket before a gradient that would take it past
// reduce_bucket_size elements. With a bucket of 7,087,872 elements (one layer's) over the ready
// order (ln_f's 768 + 768, layer 1's tensors, ln_1's last, layer 0's, the embeddings), no bucket
// exceeds it but wte's lone gradient: the old rule (close once at least the cap) put layer 0's
// ln_1 and wpe, or ln_1, with wte, a bucket larger than wte alone.
TEST(DataParallel, ZeroBucketsCloseBeforeTheyOverflow) {
  const auto trace = small_gpt(zoo::Precision::mixed);
  Schedule s = baseline_schedule(trace);
  DataParallelSpec spec;
  spec.ranks = 4;
  spec.zero_stage = 3;
  spec.reduce_bucket_elements = 7'087'872;
  apply_data_parallel(s, trace, spec);
  ASSERT_NO_THROW(s.validate());
  std::int64_t total = 0;
  int over = 0;
  for (TaskId t : collective_tasks(s, CollectiveKind::reduce_scatter)) {
    total += s.tasks[t].bytes;
    if (s.tasks[t].bytes > 2 * 7'087'872) {
      ++over;
      EXPECT_EQ(s.tasks[t].bytes, 2 * 38'597'376) << "only wte's lone gradient exceeds the bucket";
    }
  }
  EXPECT_EQ(over, 1);
  EXPECT_EQ(total, 2 * 53'561'088);
}

}  // namespace
}  // namespace comptrain::models

namespace comptrain::models {
namespace {

// Gradient accumulation: k micro-steps of forward and backward, one optimizer step; the
// gradients are shared (created once, written by every micro-step), everything else of a
// micro-step is its own; under DDP every all-reduce comes after the last micro-step's backward
// (no_sync on the others).
TEST(GradientAccumulation, RepeatsTheMicroStepAndReducesOnceAtTheEnd) {
  const auto trace = small_gpt(zoo::Precision::fp32);
  const Schedule one = baseline_schedule(trace);
  std::size_t optimizer_tasks = 0;
  for (const Task& t : one.tasks) optimizer_tasks += phase_of(trace, t) == traces::Phase::optimizer ? 1 : 0;
  const std::size_t micro = one.tasks.size() - optimizer_tasks;

  Schedule s = one;
  apply_gradient_accumulation(s, trace, 3);
  ASSERT_NO_THROW(s.validate());
  EXPECT_EQ(s.tasks.size(), 3 * micro + optimizer_tasks);
  // Same held gradients, created by the first micro-step only.
  EXPECT_EQ(bytes_of_role(s, MemoryRole::gradient, true), bytes_of_role(one, MemoryRole::gradient, true));
  std::map<BufferId, int> creations;
  for (const Task& t : s.tasks) {
    for (BufferId b : t.creates) ++creations[b];
  }
  for (BufferId b = 0; b < s.buffers.size(); ++b) {
    if (s.buffers[b].held_to_end) {
      EXPECT_LE(creations[b], 1) << s.buffers[b].name;
    }
  }
  // Each micro-step frees its own buffers; the gradients, though, live from the first backward pass
  // on, so a later forward pass runs with them: the peak grows by at most the gradients.
  EXPECT_GE(sequential_peak_bytes(s), sequential_peak_bytes(one));
  EXPECT_LE(sequential_peak_bytes(s), sequential_peak_bytes(one) + bytes_of_role(one, MemoryRole::gradient, true));

  DataParallelSpec spec;
  spec.ranks = 4;
  apply_data_parallel(s, trace, spec);
  ASSERT_NO_THROW(s.validate());
  const auto reduces = collective_tasks(s, CollectiveKind::all_reduce);
  ASSERT_FALSE(reduces.empty());
  for (TaskId c : reduces) EXPECT_GE(c, 2 * micro) << "an all-reduce before the last micro-step";

  Schedule same = one;
  apply_gradient_accumulation(same, trace, 1);
  EXPECT_EQ(same.tasks.size(), one.tasks.size());
  EXPECT_THROW(apply_gradient_accumulation(same, trace, 0), std::invalid_argument);
}

}  // namespace
}  // namespace comptrain::models

// The replay on more than one GPU: a collective on the comm stream overlapping compute (hand
// computed), host-link copies of a node's GPUs sharing its host memory, and the symmetric replay
// (one rank standing for all) against the replay of every rank, on hand-built schedules and on
// zoo models under DDP and ZeRO.

#include <algorithm>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "comptrain/models/data_parallel.hpp"
#include "comptrain/models/op_time.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/sim/engine/collectives.hpp"
#include "comptrain/sim/metrics/communication_time.hpp"
#include "comptrain/sim/report/simulate_report.hpp"
#include "comptrain/sim/run/run.hpp"
#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/sim/engine/replay.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "common/must_apply.hpp"
#include "common/schedule_builder.hpp"

namespace comptrain::sim {
namespace {

using models::CollectiveKind;
using models::MemoryRole;
using models::Stream;
using models::TaskKind;
using testing::ScheduleBuilder;

constexpr double kTol = 1e-9;

// One node of `gpus` GPUs joined by a 100 GB/s NVLink port each (per direction), no collective
// latency unless a test sets one.
models::Platform node_platform(int gpus) {
  models::Platform p = testing::test_platform();
  p.gpus_per_node = gpus;
  p.gpu_link.name = "test NVLink";
  p.gpu_link.bandwidth = 100e9;
  p.host.memory_bandwidth = 1e15;  // never the bottleneck unless a test says so
  return p;
}

models::Task collective_task(CollectiveKind kind, std::int64_t bytes, std::vector<models::TaskId> after) {
  models::Task c;
  c.name = "all-reduce";
  c.kind = TaskKind::collective;
  c.stream = Stream::comm;
  c.collective = kind;
  c.bytes = bytes;
  c.after = std::move(after);
  return c;
}

// Backward ops A and B (1 ms each); the bucket A made ready is all-reduced on the comm stream
// while B runs; the optimizer step D (1 ms) waits for it. On 2 GPUs the ring all-reduce of S
// bytes sends 2(p-1)/p x S = S over each GPU's NVLink port: S = 150 MB at 100 GB/s takes 1.5 ms.
// So C runs over [1, 2.5] ms, D over [2.5, 3.5] ms: 0.5 ms of it is exposed, 1 ms hidden by B.
TEST(ClusterReplay, ABucketAllReduceOverlapsTheRestOfBackward) {
  ScheduleBuilder b;
  const auto grad = b.buffer("grad A", 1000, MemoryRole::gradient, false, true);
  const auto a = b.task("A", TaskKind::op, Stream::compute, 1e-3, {grad}, {});
  b.task("B", TaskKind::op, Stream::compute, 1e-3, {}, {});
  b.s.tasks.push_back(collective_task(CollectiveKind::all_reduce, 150'000'000, {a}));
  b.s.tasks.back().uses = {grad};
  const models::TaskId c = b.s.tasks.size() - 1;
  const auto d = b.task("D", TaskKind::op, Stream::compute, 1e-3, {}, {grad}, {c});
  const SimulationResult r = simulate(node_platform(2), b.s, testing::bare_framework(), ClusterShape{1, 2});
  ASSERT_TRUE(r.fits());
  EXPECT_NEAR(r.tasks[c].start, 1e-3, kTol);
  EXPECT_NEAR(r.tasks[c].end, 2.5e-3, 1e-8);
  EXPECT_NEAR(r.tasks[d].start, 2.5e-3, 1e-8);
  EXPECT_NEAR(r.iteration_seconds, 3.5e-3, 1e-8);
  EXPECT_NEAR(r.seconds_by_task_kind[static_cast<std::size_t>(TaskKind::collective)], 1.5e-3, 1e-8);
  const CommunicationTime comm = communication_time(b.s, r);
  EXPECT_NEAR(comm.collective_seconds, 1.5e-3, 1e-8);
  EXPECT_NEAR(comm.exposed_seconds, 0.5e-3, 1e-8);
  EXPECT_NEAR(comm.hidden_seconds(), 1e-3, 1e-8);

  // The same on 4 GPUs: 2(p-1)/p = 1.5, so 225 MB over each port: 2.25 ms, D from 3.25 ms.
  const SimulationResult r4 = simulate(node_platform(4), b.s, testing::bare_framework(), ClusterShape{1, 4});
  EXPECT_NEAR(r4.tasks[c].end, 3.25e-3, 1e-8);
  EXPECT_NEAR(r4.iteration_seconds, 4.25e-3, 1e-8);

  // NCCL's latency term comes first: 10 us of base latency and 5 us per NVLink step, 2(p-1) = 2
  // steps on 2 GPUs, add 20 us.
  models::Platform with_latency = node_platform(2);
  with_latency.collectives.base = 10e-6;
  with_latency.collectives.intra_node_step = 5e-6;
  ASSERT_NEAR(collective_latency(with_latency, ClusterShape{1, 2}, CollectiveKind::all_reduce), 20e-6, 1e-12);
  const SimulationResult rl = simulate(with_latency, b.s, testing::bare_framework(), ClusterShape{1, 2});
  EXPECT_NEAR(rl.tasks[c].end, 2.52e-3, 1e-8);
}

// NCCL's thread blocks hold SMs while a data-parallel collective runs (gpu.collective_sms): 20 of
// 100 SMs here, so B, beside the 50 MB all-reduce C (0.5 ms over [1, 1.5] ms), runs at 0.8 of the
// GPU while C runs: 0.4 ms of its 1 ms by 1.5 ms, the other 0.6 ms alone, ending at 2.1 ms, not
// 2.0; D follows, the iteration 3.1 ms. C's own time does not change. A tensor-parallel collective
// (Transformer Engine's kernels may run it, which hold other counts) takes nothing.
TEST(ClusterReplay, ADataParallelCollectiveHoldsItsSmsFromTheComputeBesideIt) {
  ScheduleBuilder b;
  const auto grad = b.buffer("grad A", 1000, MemoryRole::gradient, false, true);
  const auto a = b.task("A", TaskKind::op, Stream::compute, 1e-3, {grad}, {});
  const auto b_op = b.task("B", TaskKind::op, Stream::compute, 1e-3, {}, {});
  b.s.tasks.push_back(collective_task(CollectiveKind::all_reduce, 50'000'000, {a}));
  b.s.tasks.back().uses = {grad};
  const models::TaskId c = b.s.tasks.size() - 1;
  const auto d = b.task("D", TaskKind::op, Stream::compute, 1e-3, {}, {grad}, {c});
  models::Platform p = node_platform(2);
  p.gpu.sms = 100;
  p.gpu.collective_sms = 20;
  const SimulationResult held = simulate(p, b.s, testing::bare_framework(), ClusterShape{1, 2});
  ASSERT_TRUE(held.fits());
  EXPECT_NEAR(held.tasks[c].start, 1e-3, kTol);
  EXPECT_NEAR(held.tasks[c].end, 1.5e-3, 1e-8);
  EXPECT_NEAR(held.tasks[b_op].end, 2.1e-3, 1e-8);
  EXPECT_NEAR(held.tasks[d].start, 2.1e-3, 1e-8);
  EXPECT_NEAR(held.iteration_seconds, 3.1e-3, 1e-8);

  // Without the field, or with 0 SMs held, B ends at 2 ms.
  p.gpu.collective_sms = 0;
  EXPECT_NEAR(simulate(p, b.s, testing::bare_framework(), ClusterShape{1, 2}).tasks[b_op].end, 2e-3, 1e-8);
  // The same collective over the tensor-parallel group holds nothing.
  p.gpu.collective_sms = 20;
  b.s.tasks[c].over = traces::ParallelGroup::tensor;
  EXPECT_NEAR(simulate(p, b.s, testing::bare_framework(), ClusterShape{1, 2}).tasks[b_op].end, 2e-3, 1e-8);
  // Replaying each rank (not one standing for all) holds the SMs of every GPU alike.
  b.s.tasks[c].over = traces::ParallelGroup::data;
  const SimulationResult every = simulate(p, b.s, testing::bare_framework(), ClusterShape{1, 2}, ReplayRanks::every_rank);
  EXPECT_NEAR(every.tasks[b_op].end, 2.1e-3, 1e-8);
}

// A copy to the host from each GPU of a node at once shares the node's host memory: 4 GPUs with
// a 10 GB/s PCIe link each and 20 GB/s of host memory move 1 GB each in 4 x 1 GB / 20 GB/s = 0.2
// s, not the 0.1 s one GPU alone takes, each way. The symmetric replay makes the other GPUs'
// copies too.
// A tensor of `bytes` bytes (u8) for the hand-made traces below.
traces::Tensor tensor(std::uint64_t id, const char* name, std::int64_t bytes, traces::TensorRole role) {
  traces::Tensor t;
  t.id = id;
  t.name = name;
  t.dtype = traces::DType::u8;
  t.shape = {bytes};
  t.role = role;
  return t;
}

// An op of a hand-made trace, measured at `seconds` on the platform's GPU (unmeasured when 0).
traces::Op measured_op(const models::Platform& platform, traces::Phase phase, std::uint64_t id, const char* name, traces::OpKind kind,
                       std::vector<traces::TensorIndex> in, std::vector<traces::TensorIndex> out, double seconds) {
  traces::Op o;
  o.id = id;
  o.name = name;
  o.phase = phase;
  o.kind = kind;
  o.inputs = std::move(in);
  o.outputs = std::move(out);
  if (seconds > 0) o.measured = traces::MeasuredDuration{seconds, platform.gpu.name, 1};
  return o;
}

// Megatron's backward overlap of a tensor-parallel linear, from the trace (traces/FORMAT.md
// "Communication", `overlap`) through build_schedule to the replay: the input-gradient GEMM D
// (1 ms), the all-reduce C of its output (overlap 1: the tensor stream, beside the next op), the
// weight-gradient GEMM W (w ms) and the op N after it (1 ms), which waits for C. On 2 GPUs the
// ring all-reduce of 150 MB sends 150 MB over each 100 GB/s NVLink port: 1.5 ms. C starts when D
// ends; the hidden part is min(1.5 ms, w), the rest exposed, and N starts at 1 + max(1.5, w) ms.
TEST(ClusterReplay, AnOverlappedTensorParallelAllReduceHidesBehindTheWeightGradient) {
  models::Platform platform = node_platform(2);
  platform.gpu.peak_fp16 = platform.gpu.peak_bf16 = platform.gpu.peak_tf32 = 1e14;  // the op-time model needs them; the ops are measured
  for (const double w : {0.5e-3, 1e-3, 2e-3}) {
    SCOPED_TRACE("weight gradient " + std::to_string(w) + " s");
    std::vector<traces::Tensor> tensors{tensor(0, "grad_out", 1000, traces::TensorRole::input), tensor(1, "weight", 1000, traces::TensorRole::weight),
                                        tensor(2, "grad_in", 150'000'000, traces::TensorRole::temporary),
                                        tensor(3, "grad_in.reduced", 150'000'000, traces::TensorRole::temporary),
                                        tensor(4, "weight.grad", 1000, traces::TensorRole::gradient), tensor(5, "next.out", 1000, traces::TensorRole::temporary)};
    tensors[3].view_of = 2;
    const auto op = [&](std::uint64_t id, const char* name, traces::OpKind kind, std::vector<traces::TensorIndex> in,
                        std::vector<traces::TensorIndex> out, double seconds) {
      return measured_op(platform, traces::Phase::backward, id, name, kind, std::move(in), std::move(out), seconds);
    };
    std::vector<traces::Op> ops{op(0, "D", traces::OpKind::linear, {0, 1}, {2}, 1e-3),
                                op(1, "C", traces::OpKind::communication, {2}, {3}, 0),
                                op(2, "W", traces::OpKind::linear, {0}, {4}, w),
                                op(3, "N", traces::OpKind::elementwise, {3}, {5}, 1e-3)};
    ops[1].communication = traces::Communication{traces::CommunicationKind::all_reduce, traces::ParallelGroup::tensor};
    ops[1].communication->overlap = 1;
    const traces::Trace trace("overlap", 1, std::move(tensors), std::move(ops));
    const models::OpTimeModel time_model(platform);
    const models::Schedule s = test_support::must_apply(models::build_schedule(trace, time_model, models::StrategySpec{}));
    models::TaskId c = 0, n = 0;
    for (models::TaskId t = 0; t < s.tasks.size(); ++t) {
      if (s.tasks[t].op == 1u) c = t;
      if (s.tasks[t].op == 3u) n = t;
    }
    ASSERT_EQ(s.tasks[c].stream, Stream::tensor);
    const SimulationResult r = simulate(platform, s, testing::bare_framework(), ClusterShape{1, 2});
    ASSERT_TRUE(r.fits());
    EXPECT_NEAR(r.tasks[c].start, 1e-3, 1e-8);
    EXPECT_NEAR(r.tasks[c].end, 2.5e-3, 1e-8);
    EXPECT_NEAR(r.tasks[n].start, 1e-3 + std::max(1.5e-3, w), 1e-8);
    const CommunicationTime comm = communication_time(s, r);
    const auto& tensor_group = comm.by_group[static_cast<std::size_t>(traces::ParallelGroup::tensor)];
    EXPECT_NEAR(tensor_group.collective_seconds, 1.5e-3, 1e-8);
    EXPECT_NEAR(tensor_group.collective_seconds - tensor_group.exposed_seconds, std::min(1.5e-3, w), 1e-8);
    EXPECT_NEAR(comm.hidden_seconds(), std::min(1.5e-3, w), 1e-8);
  }
}

// Transformer Engine's pipelined reduce-scatter (traces/FORMAT.md "Communication", `splits`),
// from the trace through build_schedule to the replay: a row-parallel GEMM G (g ms, measured), the
// reduce_scatter R of its 150 MB output in 4 pieces, and the op N after it (1 ms), which waits for
// R. On 2 GPUs a ring reduce-scatter of 150 MB sends 75 MB over each 100 GB/s NVLink port: 0.75 ms
// whole. The schedule runs G's first quarter (g/4), its other three (3g/4) beside the reduction of
// three quarters of the bytes (0.5625 ms from g/4), then the last quarter's (0.1875 ms) once both
// have ended: N starts at max(g, g/4 + 0.5625 ms) + 0.1875 ms, against g + 0.75 ms unsplit.
TEST(ClusterReplay, APipelinedReduceScatterHidesAllButItsLastPieceBehindItsGemm) {
  models::Platform platform = node_platform(2);
  platform.gpu.peak_fp16 = platform.gpu.peak_bf16 = platform.gpu.peak_tf32 = 1e14;  // the op-time model needs them; the ops are measured
  for (const double g : {0.4e-3, 1e-3}) {
    SCOPED_TRACE("GEMM " + std::to_string(g) + " s");
    const auto op = [&](std::uint64_t id, const char* name, traces::OpKind kind, std::vector<traces::TensorIndex> in,
                        std::vector<traces::TensorIndex> out, double seconds) {
      return measured_op(platform, traces::Phase::forward, id, name, kind, std::move(in), std::move(out), seconds);
    };
    const auto run = [&](std::int64_t splits) {
      std::vector<traces::Tensor> tensors{tensor(0, "x", 1000, traces::TensorRole::input), tensor(1, "weight", 1000, traces::TensorRole::weight),
                                          tensor(2, "partial", 150'000'000, traces::TensorRole::temporary),
                                          tensor(3, "reduced", 75'000'000, traces::TensorRole::temporary), tensor(4, "next.out", 1000, traces::TensorRole::temporary)};
      std::vector<traces::Op> ops{op(0, "G", traces::OpKind::linear, {0, 1}, {2}, g), op(1, "R", traces::OpKind::communication, {2}, {3}, 0),
                                  op(2, "N", traces::OpKind::elementwise, {3}, {4}, 1e-3)};
      ops[1].communication = traces::Communication{traces::CommunicationKind::reduce_scatter, traces::ParallelGroup::tensor};
      ops[1].communication->splits = splits;
      const traces::Trace trace("pipelined", 1, std::move(tensors), std::move(ops));
      const models::OpTimeModel time_model(platform);
      models::Schedule s = test_support::must_apply(models::build_schedule(trace, time_model, models::StrategySpec{}));
      const SimulationResult r = simulate(platform, s, testing::bare_framework(), ClusterShape{1, 2});
      return std::pair{std::move(s), r};
    };
    const auto [whole, whole_run] = run(0);
    ASSERT_EQ(whole.tasks.size(), 3u);
    ASSERT_TRUE(whole_run.fits());
    EXPECT_NEAR(whole_run.tasks[2].start, g + 0.75e-3, 1e-8);

    const auto [split, r] = run(4);
    ASSERT_TRUE(r.fits());
    // G's first piece, its rest, the reduction of three pieces and of the last; N.
    ASSERT_EQ(split.tasks.size(), 5u);
    EXPECT_EQ(split.tasks[0].op, 0u);
    EXPECT_EQ(split.tasks[1].op, 0u);
    EXPECT_EQ(split.tasks[1].stream, Stream::compute);
    EXPECT_NEAR(split.tasks[0].seconds, g / 4, 1e-12);
    EXPECT_NEAR(split.tasks[1].seconds, 3 * g / 4, 1e-12);
    EXPECT_EQ(split.tasks[2].stream, Stream::tensor);
    EXPECT_EQ(split.tasks[3].stream, Stream::tensor);
    EXPECT_EQ(split.tasks[2].bytes + split.tasks[3].bytes, 150'000'000);
    EXPECT_EQ(split.tasks[3].bytes, 37'500'000);
    EXPECT_NEAR(r.tasks[2].start, g / 4, 1e-8);
    EXPECT_NEAR(r.tasks[2].end, g / 4 + 0.5625e-3, 1e-8);
    EXPECT_NEAR(r.tasks[3].start, std::max(g, g / 4 + 0.5625e-3), 1e-8);
    EXPECT_NEAR(r.tasks[4].start, std::max(g, g / 4 + 0.5625e-3) + 0.1875e-3, 1e-8);
    const CommunicationTime comm = communication_time(split, r);
    const auto& tensor_group = comm.by_group[static_cast<std::size_t>(traces::ParallelGroup::tensor)];
    EXPECT_NEAR(tensor_group.collective_seconds, 0.75e-3, 1e-8);
    EXPECT_NEAR(tensor_group.exposed_seconds, r.tasks[4].start - g, 1e-8);
  }
}

TEST(ClusterReplay, HostLinkCopiesOfANodeShareItsHostMemory) {
  ScheduleBuilder b;
  const auto x = b.buffer("x", 1'000'000'000, MemoryRole::activation);
  b.task("f", TaskKind::op, Stream::compute, 0.0, {x}, {});
  const auto off = b.task("offload x", TaskKind::offload, Stream::d2h, 0.0, {}, {x}, {0}, 1'000'000'000);
  const auto y = b.buffer("x back", 1'000'000'000, MemoryRole::prefetch);
  const auto pre = b.task("prefetch x", TaskKind::prefetch, Stream::h2d, 0.0, {y}, {}, {off}, 1'000'000'000);
  models::Platform p = node_platform(4);
  p.host_link.latency = 0;
  p.host.memory_bandwidth = 20e9;
  const SimulationResult alone = simulate(p, b.s, testing::bare_framework(std::int64_t{8} << 30), ClusterShape{1, 1});
  EXPECT_NEAR(alone.tasks[off].end - alone.tasks[off].start, 0.1, 1e-6);
  const SimulationResult shared = simulate(p, b.s, testing::bare_framework(std::int64_t{8} << 30), ClusterShape{1, 4});
  EXPECT_NEAR(shared.tasks[off].end - shared.tasks[off].start, 0.2, 1e-6);
  const SimulationResult every = simulate(p, b.s, testing::bare_framework(std::int64_t{8} << 30), ClusterShape{1, 4}, ReplayRanks::every_rank);
  EXPECT_NEAR(every.tasks[off].end - every.tasks[off].start, 0.2, 1e-6);
  // Back to the GPUs the same (this caught SimGrid 3.32 dropping the PCIe link's bound from
  // host-to-GPU routes that cross the shared link first: sim/src/cluster_network.cpp).
  EXPECT_NEAR(shared.tasks[pre].end - shared.tasks[pre].start, 0.2, 1e-6);
  EXPECT_NEAR(every.tasks[pre].end - every.tasks[pre].start, 0.2, 1e-6);
}

models::Schedule zoo_schedule(const traces::Trace& trace, const models::Platform& platform, const models::DataParallelSpec& spec,
                              const models::StrategySpec& strategy) {
  const models::OpTimeModel time_model(platform);
  models::Schedule s = test_support::must_apply(models::build_schedule(trace, time_model, strategy));
  models::apply_data_parallel(s, trace, spec);
  return s;
}

// Every rank runs the same schedule, so replaying one rank with the network carrying all ranks'
// traffic gives what replaying each rank gives: the same timings to rounding and the same memory.
// Two nodes of two GPUs of the shipped DGX A100 cluster, GPT-2 (2 layers) under DDP, ZeRO-2 and
// ZeRO-3, with every activation offloaded so that host-link copies contend too.
TEST(ClusterReplay, TheSymmetricReplayEqualsTheReplayOfEveryRank) {
  const models::Platform platform = models::builtin_platform("dgx-a100-superpod");
  zoo::ModelRequest request;
  request.model = "gpt2";
  request.layers = 2;
  request.precision = zoo::Precision::mixed;
  request.batch_size = 2;
  const traces::Trace trace = zoo::build_model(request);
  models::StrategySpec offload;
  offload.name = "offload";
  offload.rules.push_back({{}, models::OffloadAction{}});
  const ClusterShape shape{2, 2};
  for (int stage : {0, 2, 3}) {
    for (const models::StrategySpec& strategy : {models::StrategySpec{}, offload}) {
      models::DataParallelSpec spec;
      spec.ranks = shape.ranks();
      spec.zero_stage = stage;
      const models::Schedule s = zoo_schedule(trace, platform, spec, strategy);
      const SimulationResult one = simulate(platform, s, testing::bare_framework(std::int64_t{80} << 30), shape);
      const SimulationResult every = simulate(platform, s, testing::bare_framework(std::int64_t{80} << 30), shape, ReplayRanks::every_rank);
      SCOPED_TRACE("stage " + std::to_string(stage) + ", " + (strategy.rules.empty() ? "baseline" : "offload"));
      ASSERT_TRUE(one.fits());
      EXPECT_NEAR(one.iteration_seconds, every.iteration_seconds, 1e-9 * every.iteration_seconds);
      EXPECT_EQ(one.peak_bytes, every.peak_bytes);
      EXPECT_EQ(one.device.peak_reserved, every.device.peak_reserved);
      EXPECT_GT(one.seconds_by_task_kind[static_cast<std::size_t>(TaskKind::collective)], 0.0);
      // The energy too, although the symmetric replay reuses the times of the collectives that
      // repeat (their links idle in SimGrid, what they drew added afterwards) and builds the other
      // node's host side not at all.
      ASSERT_TRUE(one.energy && every.energy);
      EXPECT_NEAR(one.energy->total_joules, every.energy->total_joules, 1e-9 * every.energy->total_joules);
      EXPECT_NEAR(one.energy->node_link_joules, every.energy->node_link_joules, 1e-9 * every.energy->node_link_joules);
      EXPECT_NEAR(one.energy->network_joules, every.energy->network_joules, 1e-9 * every.energy->network_joules);
      EXPECT_NEAR(one.energy->node_peak_watts, every.energy->node_peak_watts, 1e-9 * every.energy->node_peak_watts);
      EXPECT_NEAR(one.energy->gpu_joules, every.energy->gpu_joules, 1e-9 * every.energy->gpu_joules);
      for (std::size_t t = 0; t < s.tasks.size(); ++t) {
        ASSERT_NEAR(one.tasks[t].end, every.tasks[t].end, 1e-9 * every.iteration_seconds)
            << s.tasks[t].name << " start " << one.tasks[t].start << " vs " << every.tasks[t].start << " ready " << one.tasks[t].ready << " vs "
            << every.tasks[t].ready << " task " << t;
      }
    }
  }
}

// The run layer and the report: a scenario with a parallelism section runs on its GPUs and the
// report gives them, the global batch, the communication, DeepSpeed's estimate and the scaling.
// DDP's fp16 compress hook (parallelism.ddp.comm_hook) in a replay: an fp32 GPT-2 on 2 nodes of 4
// A100s spends less time in its all-reduces (half the bytes), some in the casts (compression on
// the compute stream, decompression on the comm stream), and the report names the hook.
TEST(ClusterReplay, TheFp16CompressHookHalvesTheAllReducesBytes) {
  const auto run = [](const std::string& hook) {
    const Scenario scenario = parse_scenario(
        "model: {zoo: gpt2, layers: 2}\ntraining: {batch_size: 2, precision: fp32}\nplatform: dgx-a100-superpod\n"
        "parallelism: {nodes: 2, gpus_per_node: 4, ddp: {comm_hook: " + hook + "}}\n",
        "c.yaml", ".");
    const PreparedScenario prepared(scenario);
    RunOutcome outcome = run_scenario(prepared, scenario.strategy, 2, Isolation::child_process);
    const auto& completed = std::get<CompletedRun>(outcome);
    return std::pair{completed.result, report(prepared, scenario.strategy, 2, outcome, false)};
  };
  const auto [plain, plain_text] = run("none");
  const auto [hooked, hooked_text] = run("fp16");
  const auto kind = [](const SimulationResult& r, TaskKind k) { return r.seconds_by_task_kind[static_cast<std::size_t>(k)]; };
  EXPECT_LT(kind(hooked, TaskKind::collective), kind(plain, TaskKind::collective));
  EXPECT_GT(kind(hooked, TaskKind::compress), 0.0);
  EXPECT_GT(kind(hooked, TaskKind::decompress), 0.0);
  EXPECT_EQ(kind(plain, TaskKind::compress), 0.0);
  EXPECT_THAT(hooked_text, ::testing::HasSubstr("PyTorch DDP with the fp16 compress hook"));
  EXPECT_THAT(plain_text, ::testing::Not(::testing::HasSubstr("compress hook")));
}

TEST(ClusterReplay, TheReportDescribesTheCluster) {
  const Scenario scenario = parse_scenario(
      "model: {zoo: gpt2, layers: 2}\ntraining: {batch_size: 2, precision: mixed}\nplatform: a100-80gb\n"
      "parallelism: {gpus_per_node: 4, zero: {stage: 3}}\n",
      "c.yaml", ".");
  const PreparedScenario prepared(scenario);
  RunOutcome outcome = run_scenario(prepared, scenario.strategy, 2, Isolation::child_process);
  auto& completed = std::get<CompletedRun>(outcome);
  completed.one_gpu_seconds = one_gpu_iteration_seconds(prepared, scenario.strategy, 2);
  ASSERT_TRUE(completed.one_gpu_seconds);
  const std::string text = report(prepared, scenario.strategy, 2, outcome, false);
  EXPECT_THAT(text, ::testing::HasSubstr("global batch 8)"));
  EXPECT_THAT(text, ::testing::HasSubstr("GPUs             4 (1 node x 4), DeepSpeed ZeRO stage 3; global batch 8 (2 per GPU)"));
  EXPECT_THAT(text, ::testing::HasSubstr("in collectives:"));
  EXPECT_THAT(text, ::testing::HasSubstr("DeepSpeed        its estimator gives"));
  EXPECT_THAT(text, ::testing::HasSubstr("% efficiency"));
  const auto json = nlohmann::json::parse(report(prepared, scenario.strategy, 2, outcome, true));
  const auto& cluster = json["results"]["cluster"];
  EXPECT_EQ(cluster["gpus"], 4);
  EXPECT_EQ(cluster["zero_stage"], 3);
  EXPECT_NEAR(cluster["scaling_efficiency"].get<double>(), *completed.one_gpu_seconds / completed.result.iteration_seconds, 1e-12);
  EXPECT_NEAR(json["results"]["samples_per_second"].get<double>(), 8 / completed.result.iteration_seconds, 1e-9);
  EXPECT_GT(cluster["deepspeed_estimate_bytes"].get<double>(), 0);
}

TEST(ClusterReplay, AShapeThePlatformLacksIsRejected) {
  ScheduleBuilder b;
  b.task("f", TaskKind::op, Stream::compute, 1e-3, {}, {});
  EXPECT_THROW(simulate(node_platform(2), b.s, testing::bare_framework(), ClusterShape{1, 4}), InputError);
  EXPECT_THROW(simulate(node_platform(2), b.s, testing::bare_framework(), ClusterShape{2, 2}), InputError);
}

}  // namespace
}  // namespace comptrain::sim

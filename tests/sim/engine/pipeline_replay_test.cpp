// The pipeline replay (sim/engine/pipeline_replay.hpp): every stage of a pipeline run together,
// on stage schedules that models::apply_pipeline_stage makes from a hand-made one-micro-batch
// chunk, against the textbook pipeline's time, bubble and peak; the transfers' time where it
// shows; the send-and-recv batches that keep 1F1B from deadlocking, and a real deadlock named; a
// stage's collectives over its own ranks only; the copies and transfers of a stage's other GPUs.

#include "comptrain/sim/engine/pipeline_replay.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "comptrain/models/pipeline_parallel.hpp"
#include "comptrain/models/pipeline_schedule.hpp"
#include "comptrain/sim/engine/replay.hpp"
#include "common/schedule_builder.hpp"
#include "traces/hand_traces.hpp"

namespace comptrain::sim {
namespace {

using ::testing::HasSubstr;
using models::MemoryRole;
using models::PipelineSchedule;
using models::Stream;
using models::TaskId;
using models::TaskKind;
using testing::ScheduleBuilder;

constexpr std::int64_t kWeight = 1'000'000;   // resident
constexpr std::int64_t kActivation = 10'000;  // saved by the forward op for the backward op
constexpr double kForward = 1e-3;
constexpr double kOptimizer = 0.5e-3;
constexpr double kNvlink = 100e9;  // bytes/s per direction of each GPU's NVLink port

// One node of `gpus` GPUs on 100 GB/s NVLink ports (no latency on them: cluster_network.hpp),
// with 8 GiB each.
models::Platform nvlink_node(int gpus) {
  models::Platform p = testing::test_platform(std::int64_t{8} << 30);
  p.gpus_per_node = gpus;
  p.gpu_link.name = "test NVLink";
  p.gpu_link.bandwidth = kNvlink;
  p.host.memory_bandwidth = 1e15;  // never the bottleneck unless a test says so
  return p;
}

FrameworkOnGpu framework() { return testing::bare_framework(std::int64_t{8} << 30); }

// The chunk's trace: a forward op, a backward op, an optimizer op (only their phases matter to
// the stage transform).
traces::Trace chunk_trace() {
  traces::testing::HandTrace h;
  const auto w = h.tensor("w", kWeight, traces::TensorRole::weight);
  const auto x = h.tensor("x", 16, traces::TensorRole::input);
  const auto a = h.tensor("a", kActivation, traces::TensorRole::activation);
  h.op("f", {x, w}, {a});
  h.op("b", {a, w}, {}, traces::Phase::backward);
  h.op("adam", {w}, {}, traces::Phase::optimizer);
  return h.build();
}

// One micro-batch of one chunk: the forward op (kForward) saves the activation the backward op
// (`backward` seconds) reads; the optimizer op (kOptimizer) updates the weight.
models::Schedule chunk_schedule(double backward) {
  ScheduleBuilder b;
  b.s.strategy = "hand chunk";
  const auto w = b.buffer("w", kWeight, MemoryRole::weight, true);
  const auto a = b.buffer("a", kActivation, MemoryRole::activation);
  b.task("f", TaskKind::op, Stream::compute, kForward, {a}, {w});
  b.task("b", TaskKind::op, Stream::compute, backward, {}, {a, w});
  b.task("adam", TaskKind::op, Stream::compute, kOptimizer, {}, {w});
  return b.s;
}

std::vector<models::Schedule> pipeline_stages(PipelineSchedule schedule, int stages, int micro_batches, double backward, std::int64_t boundary) {
  const traces::Trace trace = chunk_trace();
  const models::Schedule chunk = chunk_schedule(backward);
  const auto orders = models::pipeline_orders(schedule, stages, micro_batches);
  std::vector<models::Schedule> out;
  for (int p = 0; p < stages; ++p) {
    models::PipelineStageSpec spec;
    spec.rank = p;
    spec.stages = stages;
    spec.order = orders[static_cast<std::size_t>(p)];
    spec.boundary_bytes = boundary;
    out.push_back(models::apply_pipeline_stage({chunk}, {&trace}, spec));
  }
  return out;
}

// One stage per GPU of one NVLink node.
PipelineSimulationResult run_on_one_node(const std::vector<models::Schedule>& stages) {
  const int p = static_cast<int>(stages.size());
  return simulate_pipeline(nvlink_node(p), stages, framework(), ClusterShape{1, p}, 1);
}

// The textbook pipeline (GPipe and 1F1B alike, every stage the same, transfers free): the last
// stage starts after P - 1 forwards, runs M forwards and M backwards back to back, and its last
// gradient takes P - 1 backwards to reach stage 0, whose optimizer step ends the iteration.
double textbook_seconds(int stages, int micro_batches, double backward) {
  return (micro_batches + stages - 1) * (kForward + backward) + kOptimizer;
}

std::string label(PipelineSchedule schedule, int stages, int micro_batches) {
  return std::string(models::to_string(schedule)) + ", P " + std::to_string(stages) + ", M " + std::to_string(micro_batches);
}

// With 64-byte boundaries (0.64 ns a transfer), the replay is the textbook pipeline: its iteration
// time, and per stage p the bubble (P - 1 - p)(tf + tb): stage p starts p forwards late and ends p
// backwards early, and of the (P - 1)(tf + tb) that every stage is idle, the rest falls between its
// first and last compute task, each gap a wait for a neighbour's activation or gradient. Its peak:
// the weight, the activation of each micro-batch in flight (max_in_flight of its order) with its
// received input (every stage but the first), and one received gradient (every stage but the
// last), which the p2p stream allocates when it posts the receive: in the batch with the send of
// the forward that put the most micro-batches in flight. Stage 0 holds one more received gradient
// when M >= 2: it sends no gradients, so the receives that follow its last forward are batches of
// their own, and its p2p stream posts the next as soon as the previous has arrived, while the
// backward that frees that one has not run yet (and every micro-batch in flight is still held).
// SimGrid ends an activity within its timing precision (1e-9 s), so the ops' summed durations are
// within 1e-9 s per op of their sum.
TEST(PipelineReplay, TinyTransfersGiveTheTextbookPipeline) {
  constexpr std::int64_t kBoundary = 64;
  for (const PipelineSchedule schedule : {PipelineSchedule::one_f_one_b, PipelineSchedule::gpipe}) {
    for (const int stages : {2, 4}) {
      for (const int micro_batches : {1, 4, 8}) {
        for (const double backward : {kForward, 2 * kForward}) {
          SCOPED_TRACE(label(schedule, stages, micro_batches) + ", tb " + std::to_string(backward));
          const auto schedules = pipeline_stages(schedule, stages, micro_batches, backward, kBoundary);
          const PipelineSimulationResult r = run_on_one_node(schedules);
          ASSERT_TRUE(r.fits());
          ASSERT_EQ(r.stages.size(), static_cast<std::size_t>(stages));
          EXPECT_NEAR(r.iteration_seconds, textbook_seconds(stages, micro_batches, backward), 1e-7);
          const auto orders = models::pipeline_orders(schedule, stages, micro_batches);
          for (int p = 0; p < stages; ++p) {
            SCOPED_TRACE("stage " + std::to_string(p));
            const SimulationResult& s = r.stages[static_cast<std::size_t>(p)];
            EXPECT_NEAR(r.bubble_seconds[static_cast<std::size_t>(p)], (stages - 1 - p) * (kForward + backward), 1e-7);
            const std::int64_t received_input = p > 0 ? kBoundary : 0;
            const std::int64_t received_gradient = p < stages - 1 ? kBoundary : 0;
            const std::int64_t next_received_gradient = p == 0 && micro_batches >= 2 ? kBoundary : 0;
            const int in_flight = models::max_in_flight(orders[static_cast<std::size_t>(p)]);
            const std::int64_t one_micro_batch = kWeight + kActivation + received_input + received_gradient;
            EXPECT_EQ(s.peak_bytes, one_micro_batch + (in_flight - 1) * (kActivation + received_input) + next_received_gradient);
            // Every stage computes M forwards and backwards and one optimizer step.
            EXPECT_NEAR(s.seconds_by_task_kind[static_cast<std::size_t>(TaskKind::op)], micro_batches * (kForward + backward) + kOptimizer,
                        (2 * micro_batches + 1) * 1e-9);
            EXPECT_FALSE(s.energy.has_value());
          }
          // Stage 0 ends last (its optimizer step after the last gradient came back).
          EXPECT_DOUBLE_EQ(r.stages[0].iteration_seconds, r.iteration_seconds);
        }
      }
    }
  }
}

// Neither 1F1B nor GPipe deadlocks, whatever P and M: 1F1B's steady state sends each forward's
// activation while receiving a gradient, which only the batches make possible (a send that waits
// for its recv, the recv behind the peer's send that waits for ours).
TEST(PipelineReplay, OneFOneBAndGPipeNeverDeadlock) {
  for (const PipelineSchedule schedule : {PipelineSchedule::one_f_one_b, PipelineSchedule::gpipe}) {
    for (const int stages : {2, 3, 4}) {
      for (int micro_batches = 1; micro_batches <= 8; ++micro_batches) {
        SCOPED_TRACE(label(schedule, stages, micro_batches));
        const PipelineSimulationResult r = run_on_one_node(pipeline_stages(schedule, stages, micro_batches, kForward, 64));
        ASSERT_TRUE(r.fits());
        EXPECT_NEAR(r.iteration_seconds, textbook_seconds(stages, micro_batches, kForward), 1e-7);
      }
    }
  }
}

// 100 MB boundaries take x = 1 ms over a 100 GB/s NVLink port (each direction its own: a send and
// the opposite stage's send do not share). Any schedule then takes at least 2(P - 1) x more than the
// textbook: the first activation crosses P - 1 boundaries before the last stage can start, the
// last gradient P - 1 on its way back to stage 0. With tf = 1 ms, tb = 2 ms, P = 2, M = 4 (by hand):
//  - GPipe runs in exactly that: stage 0's forwards end every tf and each activation follows in x =
//    tf, stage 1's backwards end every tb and each gradient follows in x < tb: 15 + 2 ms.
//  - 1F1B has every steady-state exchange on its critical path: stage 0 sends the activation of
//    forward m + 1 in one batch with the receive of gradient m, which stage 1 sends after backward m
//    in one batch with that activation's receive; neither stage computes until the exchange (x)
//    has ended. Stage 1: F0 from 1 + x; then each of the M - 1 exchanges and the last gradient
//    cost x: 15 + (2 + (M - 1)) x = 15 + 5 ms (the first activation, M - 1 exchanges, the last
//    gradient).
TEST(PipelineReplay, LargeTransfersAddTheirTimeOnTheCriticalPath) {
  constexpr std::int64_t kBoundary = 100'000'000;
  const double x = static_cast<double>(kBoundary) / kNvlink;
  constexpr double kBackward = 2 * kForward;
  const double gpipe = run_on_one_node(pipeline_stages(PipelineSchedule::gpipe, 2, 4, kBackward, kBoundary)).iteration_seconds;
  EXPECT_NEAR(gpipe, textbook_seconds(2, 4, kBackward) + 2 * x, 1e-7);
  const PipelineSimulationResult one_f_one_b = run_on_one_node(pipeline_stages(PipelineSchedule::one_f_one_b, 2, 4, kBackward, kBoundary));
  EXPECT_NEAR(one_f_one_b.iteration_seconds, textbook_seconds(2, 4, kBackward) + (2 + 3) * x, 1e-7);
  // Each transfer task lasts its batch: at least x. Stage 0 sends 4 activations and receives 4
  // gradients.
  const auto& kinds = one_f_one_b.stages[0].seconds_by_task_kind;
  EXPECT_GE(kinds[static_cast<std::size_t>(TaskKind::send)], 4 * x - 1e-9);
  EXPECT_GE(kinds[static_cast<std::size_t>(TaskKind::recv)], 4 * x - 1e-9);

  // P = 4, M = 8: at least the 2(P - 1) x of the first activation and the last gradient (above).
  // At most one transfer x for each forward and each backward step of the textbook's critical
  // path of M + P - 1 steps, 2(M + P - 1) x: a compute task waits for one batch, whose transfers
  // start once both ends have posted them. (Measured: 19 x for 1F1B, 20 x for GPipe, whose middle
  // stages send a forward's activation in one batch with the next one's receive, so that each
  // forward waits for the next stage to have taken the previous one.)
  for (const PipelineSchedule schedule : {PipelineSchedule::one_f_one_b, PipelineSchedule::gpipe}) {
    SCOPED_TRACE(label(schedule, 4, 8));
    const double t = run_on_one_node(pipeline_stages(schedule, 4, 8, kBackward, kBoundary)).iteration_seconds;
    EXPECT_GE(t, textbook_seconds(4, 8, kBackward) + 2 * 3 * x - 1e-7);
    EXPECT_LE(t, textbook_seconds(4, 8, kBackward) + 2 * (8 + 3) * x + 1e-7);
  }
}

// Hand-made stage schedules with their own transfers.
models::TaskId transfer(ScheduleBuilder& b, const std::string& name, TaskKind kind, int peer, int micro_batch, std::int64_t bytes,
                        std::vector<TaskId> after = {}, std::vector<models::BufferId> creates = {}) {
  const TaskId t = b.task(name, kind, Stream::p2p, 0.0, std::move(creates), {}, std::move(after), bytes);
  b.s.tasks[t].message = models::PipelineMessage{.peer = peer, .gradient = false, .micro_batch = micro_batch, .chunk = 0};
  return t;
}

// The batching rule's dependency clause: stage 0's send of X and receive of Y follow each other in
// its tasks, but the receive waits for C, which waits for the send: they cannot be one batch (the
// receive could never be posted before the batch ended). Stage 1 receives X, computes D (1 ms),
// sends Y. Each transfer of 100 MB takes 1 ms: X over [1, 2] ms, C over [2, 3], D over [2, 3], Y
// over [3, 4], so stage 0's E ends at 5 ms.
TEST(PipelineReplay, ATransferThatWaitsForItsNeighbourThroughAnotherStreamIsNotInItsBatch) {
  constexpr std::int64_t kBytes = 100'000'000;
  ScheduleBuilder s0;
  const auto f = s0.task("F", TaskKind::op, Stream::compute, 1e-3, {}, {});
  const auto send_x = transfer(s0, "send X", TaskKind::send, 1, 0, kBytes, {f});
  const auto recv_y = transfer(s0, "recv Y", TaskKind::recv, 1, 1, kBytes, {send_x + 2});
  const auto c = s0.task("C", TaskKind::op, Stream::compute, 1e-3, {}, {}, {send_x});
  const auto e = s0.task("E", TaskKind::op, Stream::compute, 1e-3, {}, {}, {recv_y});
  ASSERT_EQ(c, send_x + 2);
  ScheduleBuilder s1;
  const auto recv_x = transfer(s1, "recv X", TaskKind::recv, 0, 0, kBytes);
  const auto d = s1.task("D", TaskKind::op, Stream::compute, 1e-3, {}, {}, {recv_x});
  const auto send_y = transfer(s1, "send Y", TaskKind::send, 0, 1, kBytes, {d});
  const PipelineSimulationResult r = run_on_one_node({s0.s, s1.s});
  const auto& t0 = r.stages[0].tasks;
  const auto& t1 = r.stages[1].tasks;
  EXPECT_NEAR(t0[send_x].end, 2e-3, 1e-9);
  EXPECT_NEAR(t1[recv_x].end, 2e-3, 1e-9);
  EXPECT_NEAR(t0[c].start, 2e-3, 1e-9);
  EXPECT_NEAR(t0[recv_y].start, 3e-3, 1e-9);  // posted once C ended: a batch of its own
  EXPECT_NEAR(t1[send_y].end, 4e-3, 1e-9);
  EXPECT_NEAR(t0[e].end, 5e-3, 1e-9);
  EXPECT_NEAR(r.iteration_seconds, 5e-3, 1e-9);
  // Stage 0's compute stream waited for Y's arrival from 3 to 4 ms.
  EXPECT_NEAR(r.bubble_seconds[0], 1e-3, 1e-9);
  EXPECT_NEAR(r.stages[1].seconds_by_task_kind[static_cast<std::size_t>(TaskKind::send)], 1e-3, 1e-9);
}

// A batch's tasks end together: stage 0 sends A and receives B in one batch; stage 1 receives A
// at once but sends B only after a 3 ms op. Stage 0's send of A could end at 1 ms but ends with the
// batch, when B has arrived at 4 ms; stage 1's receive of A ends at 1 ms (a batch of its own).
TEST(PipelineReplay, TheTasksOfABatchEndTogether) {
  constexpr std::int64_t kBytes = 100'000'000;
  ScheduleBuilder s0;
  const auto send_a = transfer(s0, "send A", TaskKind::send, 1, 0, kBytes);
  const auto recv_b = transfer(s0, "recv B", TaskKind::recv, 1, 1, kBytes);
  ScheduleBuilder s1;
  const auto recv_a = transfer(s1, "recv A", TaskKind::recv, 0, 0, kBytes);
  const auto wait = s1.task("W", TaskKind::op, Stream::compute, 3e-3, {}, {});
  const auto send_b = transfer(s1, "send B", TaskKind::send, 0, 1, kBytes, {wait});
  const PipelineSimulationResult r = run_on_one_node({s0.s, s1.s});
  EXPECT_NEAR(r.stages[1].tasks[recv_a].end, 1e-3, 1e-9);
  EXPECT_NEAR(r.stages[1].tasks[send_b].end, 4e-3, 1e-9);
  EXPECT_NEAR(r.stages[0].tasks[recv_b].end, 4e-3, 1e-9);
  EXPECT_NEAR(r.stages[0].tasks[send_a].end, 4e-3, 1e-9);
}

// Two transfers in opposite orders, each behind a compute task on the other side: stage 0 sends
// micro-batch 0 then 1, stage 1 receives 1 then 0. Each waits for the other: an error naming both
// stages' first task not run.
TEST(PipelineReplay, ADeadlockIsAnErrorNamingEachStagesStuckTask) {
  ScheduleBuilder s0;
  const auto first = transfer(s0, "send 0", TaskKind::send, 1, 0, 1000);
  s0.task("between", TaskKind::op, Stream::compute, 1e-3, {}, {}, {first});
  transfer(s0, "send 1", TaskKind::send, 1, 1, 1000, {first + 1});
  ScheduleBuilder s1;
  const auto recv_1 = transfer(s1, "recv 1", TaskKind::recv, 0, 1, 1000);
  s1.task("between", TaskKind::op, Stream::compute, 1e-3, {}, {}, {recv_1});
  transfer(s1, "recv 0", TaskKind::recv, 0, 0, 1000, {recv_1 + 1});
  try {
    run_on_one_node({s0.s, s1.s});
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("stage 0: task 0 (send 0)"));
    EXPECT_THAT(e.what(), HasSubstr("stage 1: task 0 (recv 1)"));
  }
}

TEST(PipelineReplay, RefusesTransfersWithoutAPartner) {
  ScheduleBuilder s0;
  transfer(s0, "send 0", TaskKind::send, 1, 0, 1000);
  ScheduleBuilder s1;
  transfer(s1, "recv 0, other bytes", TaskKind::recv, 0, 0, 2000);
  EXPECT_THROW(run_on_one_node({s0.s, s1.s}), std::invalid_argument);
  ScheduleBuilder lonely;
  transfer(lonely, "recv 5", TaskKind::recv, 0, 5, 1000);
  try {
    run_on_one_node({s0.s, lonely.s});
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("has no partner"));
  }
  // The shape must hold P x stage_ranks ranks.
  EXPECT_THROW(simulate_pipeline(nvlink_node(4), {s0.s, s1.s}, framework(), ClusterShape{1, 4}, 1), std::invalid_argument);
}

// 4 nodes of 2 GPUs sharing one 10 GB/s NIC, on one switch whose links carry 10 GB/s: each
// stage of 4 ranks is 2 nodes. Its all-reduce over groups of 2 ranks 2 apart ({0, 2} and {1, 3} in
// stage 0) crosses the network: each rank sends S (a ring of 2 sends 2(p - 1)/p S = S) to the
// other node, and the node's 2 groups share its NIC: 2 S / 10 GB/s. Both stages run theirs at once
// on their own nodes, so each takes that, as one stage's cluster (2 nodes) alone does. Were a
// stage's collective to run every group of the cluster, each NIC would carry both stages' groups
// and take twice as long.
TEST(PipelineReplay, AStagesCollectiveRunsItsOwnGroupsOnly) {
  const models::Platform platform = models::parse_platform(
      "name: hand\n"
      "gpu: {name: Test GPU, memory: 40 GiB, memory_bandwidth: 1555 GB/s, peak: {fp32: 19.5 TFLOP/s, tf32: 156 TFLOP/s, fp16: 312 TFLOP/s, bf16: 312 TFLOP/s}, launch_overhead: 5 us}\n"
      "host: {name: Test host, cores: 8, flops: 1 TFLOP/s, memory: 64 GiB, memory_bandwidth: 100 GB/s}\n"
      "host_link: {name: PCIe, bandwidth: 25 GB/s, latency: 1 us}\n"
      "gpu_link: {name: NVLink, bandwidth: 100 GB/s, latency: 0 us}\n"
      "gpus_per_node: 2\n"
      "nic: {name: NIC, bandwidth: 10 GB/s, latency: 0 us, per_node: 1}\n"
      "network:\n"
      "  topology: fat_tree\n"
      "  nodes: 4\n"
      "  fat_tree: {levels: 1, down: [4], up: [1], links: [1]}\n"
      "  link: {name: uplink, bandwidth: 10 GB/s, latency: 0}\n"
      "collectives: {base_latency: 0 us, intra_node_step: 0 us, inter_node_step: 0 us, network_overhead: 0 us, algorithm: ring}\n",
      "hand.yaml");
  constexpr std::int64_t kBytes = 1'000'000'000;
  ScheduleBuilder b;
  const auto op = b.task("op", TaskKind::op, Stream::compute, 1e-3, {}, {});
  const auto all_reduce = b.task("all-reduce", TaskKind::collective, Stream::comm, 0.0, {}, {}, {op}, kBytes);
  b.s.tasks[all_reduce].collective = models::CollectiveKind::all_reduce;
  b.s.tasks[all_reduce].groups = models::RankGroups{2, 2};
  const double expected = 2.0 * kBytes / 10e9;

  const SimulationResult one_stage = simulate(platform, b.s, testing::bare_framework(), ClusterShape{2, 2});
  const double alone = one_stage.tasks[all_reduce].end - one_stage.tasks[all_reduce].start;
  EXPECT_NEAR(alone, expected, 1e-9);
  const PipelineSimulationResult r = simulate_pipeline(platform, {b.s, b.s}, testing::bare_framework(), ClusterShape{4, 2}, 4);
  for (const SimulationResult& stage : r.stages) {
    EXPECT_NEAR(stage.tasks[all_reduce].start, 1e-3, 1e-12);
    EXPECT_NEAR(stage.tasks[all_reduce].end - stage.tasks[all_reduce].start, alone, 1e-9);
  }

  // The same 2 GPUs of each stage's node 0 send a transfer to their counterparts in the next
  // stage at once through that node's one NIC: 1 GB at 5 GB/s each, 0.2 s (the representative's
  // alone would take 0.1 s).
  ScheduleBuilder s0;
  const auto send = transfer(s0, "send", TaskKind::send, 1, 0, kBytes);
  ScheduleBuilder s1;
  const auto recv = transfer(s1, "recv", TaskKind::recv, 0, 0, kBytes);
  const PipelineSimulationResult p2p = simulate_pipeline(platform, {s0.s, s1.s}, testing::bare_framework(), ClusterShape{4, 2}, 4);
  EXPECT_NEAR(p2p.stages[0].tasks[send].end, 0.2, 1e-9);
  EXPECT_NEAR(p2p.stages[1].tasks[recv].end, 0.2, 1e-9);
}

// Two stages of 2 GPUs on one node of 4 (a stage that is half a node, as T = 4 on 8 GPUs): each
// stage's copy to the host is made by its 2 GPUs, 4 in all sharing the node's 20 GB/s of host
// memory: 1 GB in 4 x 1 GB / 20 GB/s = 0.2 s (PCIe, 10 GB/s, is not the bound).
TEST(PipelineReplay, AStageMirrorsItsCopiesOverItsGpusOnTheNode) {
  models::Platform p = nvlink_node(4);
  p.host_link.latency = 0;
  p.host.memory_bandwidth = 20e9;
  ScheduleBuilder b;
  const auto x = b.buffer("x", 1'000'000'000, MemoryRole::activation);
  b.task("f", TaskKind::op, Stream::compute, 0.0, {x}, {});
  const auto offload = b.task("offload x", TaskKind::offload, Stream::d2h, 0.0, {}, {x}, {0}, 1'000'000'000);
  const PipelineSimulationResult r = simulate_pipeline(p, {b.s, b.s}, framework(), ClusterShape{1, 4}, 2);
  for (const SimulationResult& stage : r.stages) EXPECT_NEAR(stage.tasks[offload].end - stage.tasks[offload].start, 0.2, 1e-6);
}

// A stage that does not fit: the lowest such stage is reported, and no iteration time.
TEST(PipelineReplay, AStageOutOfMemoryIsReportedWithItsStage) {
  // GPipe on 2 stages, 8 micro-batches of 100 MB boundaries: stage 1 holds 8 received inputs
  // (800 MB) on a GPU of which 500 MB are visible; stage 0, with 10 KB activations, fits.
  const auto schedules = pipeline_stages(PipelineSchedule::gpipe, 2, 8, kForward, 100'000'000);
  const PipelineSimulationResult r =
      simulate_pipeline(nvlink_node(2), schedules, testing::bare_framework(500'000'000), ClusterShape{1, 2}, 1);
  ASSERT_FALSE(r.fits());
  EXPECT_EQ(r.out_of_memory_stage, 1);
  EXPECT_TRUE(r.stages[0].fits());
  EXPECT_FALSE(r.stages[1].fits());
  EXPECT_EQ(r.iteration_seconds, 0);
}

}  // namespace
}  // namespace comptrain::sim

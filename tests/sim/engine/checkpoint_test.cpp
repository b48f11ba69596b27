// Checkpointing (sim/checkpoint.hpp, sim/io.hpp): the stall of a synchronous and of a
// DataStates-LLM-style asynchronous checkpoint against hand computations, the checkpoint's size
// by ZeRO stage, the interval for a target overhead, and the scenario's `checkpoint:` section.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "comptrain/models/platform.hpp"
#include "comptrain/models/zero_memory.hpp"
#include "comptrain/sim/config/checkpoint.hpp"
#include "comptrain/sim/engine/io_cost.hpp"
#include "comptrain/sim/engine/io_simulation.hpp"
#include "comptrain/sim/report/io_report.hpp"
#include "comptrain/sim/run/run.hpp"
#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/sim/studies/validate.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/zoo/zoo.hpp"

namespace comptrain::sim {
namespace {

// One GPU: PCIe at 10 GB/s (a 1 GB chunk in 0.1 s), the file system's client link at 1 GB/s (a
// chunk written in 1 s), no latencies, so every duration below is a sum of bytes / rate. No
// torch.save serialization stage unless a test gives host.torch_save_bandwidth.
IoInputs hand_inputs(CheckpointSpec checkpoint, double pcie = 1e10) {
  IoInputs in;
  in.platform = models::builtin_platform("a100-40gb");
  in.platform.host.torch_save_bandwidth = 0;
  in.platform.host_link.bandwidth = pcie;
  in.platform.host_link.latency = 0;
  in.platform.storage = models::StorageSpec{std::nullopt, models::SharedFileSystemSpec{"test", 1e12, 1e12, 1e9, 0}};
  in.profile.seconds = 1.0;
  in.profile.optimizer_start = 0.8;  // forward and backward 0.8 s, the step 0.2 s
  in.profile.samples = 16;
  in.checkpoint = checkpoint;
  in.sizes.parameter_count = 250'000'000;
  in.sizes.rank0 = {1'000'000'000, 3'000'000'000};  // 4 chunks of 1 GB
  return in;
}

CheckpointSpec spec(CheckpointMode mode, std::int64_t host_cache = 0) {
  CheckpointSpec c;
  c.every = 10;
  c.mode = mode;
  c.host_cache_bytes = host_cache;
  c.chunk_bytes = 1'000'000'000;
  return c;
}

TEST(Checkpoint, SynchronousSaveStallsForEveryCopyAndWrite) {
  const IoResult r = simulate_io(hand_inputs(spec(CheckpointMode::sync)));
  ASSERT_TRUE(r.checkpoint);
  const CheckpointResult& c = *r.checkpoint;
  EXPECT_DOUBLE_EQ(r.steady_iteration_seconds, 1.0);
  // 4 chunks, each copied (0.1 s) then written (1 s) before the next: 4.4 s.
  EXPECT_NEAR(c.stall_seconds, 4.4, 1e-9);
  EXPECT_NEAR(c.persist_seconds, 4.4, 1e-9);
  EXPECT_NEAR(c.extra_seconds_per_interval, 4.4, 1e-9);
  EXPECT_NEAR(c.seconds_per_iteration, 0.44, 1e-9);
  EXPECT_NEAR(c.overhead, 0.44, 1e-9);
  EXPECT_NEAR(r.mean_iteration_seconds, 1.44, 1e-9);
  EXPECT_EQ(c.host_bytes_per_node, 1'000'000'000);  // one chunk staged at a time
  EXPECT_FALSE(c.outlasts_interval);
}

TEST(Checkpoint, SynchronousSaveSerializesEveryChunkOnOneCoreOfTheHost) {
  // torch.save at 0.5 GB/s: each 1 GB chunk is copied (0.1 s), serialized (2 s) and written (1 s)
  // before the next: 4 x 3.1 = 12.4 s, 8 s of it serializing.
  IoInputs in = hand_inputs(spec(CheckpointMode::sync));
  in.platform.host.torch_save_bandwidth = 0.5e9;
  const IoResult r = simulate_io(in);
  ASSERT_TRUE(r.checkpoint);
  const CheckpointResult& c = *r.checkpoint;
  EXPECT_NEAR(c.stall_seconds, 12.4, 1e-9);
  EXPECT_NEAR(c.serialize_seconds, 8.0, 1e-9);
  EXPECT_NEAR(c.persist_seconds, 12.4, 1e-9);
  EXPECT_NEAR(c.extra_seconds_per_interval, 12.4, 1e-9);
  EXPECT_NEAR(r.mean_iteration_seconds, 1.0 + 1.24, 1e-9);
}

TEST(Checkpoint, SerializationOfSeveralGpusSharesTheHostsCores) {
  // Two GPUs each saving 4 chunks of 1 GB at once: their writes share the 1 GB/s client link
  // (2 s a chunk). With two cores each serialization takes 2 s: 4 x (0.1 + 2 + 2) = 16.4 s; with
  // one core the two share it and take 4 s: 4 x (0.1 + 4 + 2) = 24.4 s.
  IoInputs in = hand_inputs(spec(CheckpointMode::sync));
  in.platform.host.torch_save_bandwidth = 0.5e9;
  in.shape.gpus_per_node = 2;
  in.sizes.other = in.sizes.rank0;
  in.platform.host.cores = 2;
  const IoResult two = simulate_io(in);
  ASSERT_TRUE(two.checkpoint);
  EXPECT_NEAR(two.checkpoint->stall_seconds, 16.4, 1e-6);
  EXPECT_NEAR(two.checkpoint->serialize_seconds, 8.0, 1e-6);
  in.platform.host.cores = 1;
  const IoResult one = simulate_io(in);
  ASSERT_TRUE(one.checkpoint);
  EXPECT_NEAR(one.checkpoint->stall_seconds, 24.4, 1e-6);
  EXPECT_NEAR(one.checkpoint->serialize_seconds, 16.0, 1e-6);
}

TEST(Checkpoint, SynchronousCheckpointNeedsTheHostsTorchSaveRate) {
  IoInputs in = hand_inputs(spec(CheckpointMode::sync));
  try {
    check_io_inputs(in, "s.yaml");
    FAIL() << "a sync checkpoint without host.torch_save_bandwidth was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("host.torch_save_bandwidth"), std::string::npos) << e.what();
  }
  in.platform.host.torch_save_bandwidth = 1e9;
  EXPECT_NO_THROW(check_io_inputs(in, "s.yaml"));
  // An async checkpoint does not serialize with torch.save.
  EXPECT_NO_THROW(check_io_inputs(hand_inputs(spec(CheckpointMode::async)), "s.yaml"));
}

TEST(Checkpoint, AsynchronousCopyShorterThanForwardBackwardIsHidden) {
  const IoResult r = simulate_io(hand_inputs(spec(CheckpointMode::async)));
  ASSERT_TRUE(r.checkpoint);
  const CheckpointResult& c = *r.checkpoint;
  // The copy takes 4 x 0.1 = 0.4 s < 0.8 s of forward and backward: no wait before the step.
  EXPECT_DOUBLE_EQ(c.stall_seconds, 0.0);
  EXPECT_DOUBLE_EQ(c.extra_seconds_per_interval, 0.0);
  EXPECT_DOUBLE_EQ(r.mean_iteration_seconds, 1.0);
  // The flush starts after the first chunk's copy and writes 4 chunks of 1 s: 4.1 s.
  EXPECT_NEAR(c.persist_seconds, 4.1, 1e-9);
  EXPECT_EQ(c.host_bytes_per_node, 4'000'000'000);  // the whole checkpoint in the host cache
}

TEST(Checkpoint, AsynchronousCopyLongerThanForwardBackwardStallsForTheRest) {
  // PCIe at 2 GB/s: the copy takes 2 s; the step waits 2 - 0.8 = 1.2 s.
  const IoResult r = simulate_io(hand_inputs(spec(CheckpointMode::async), 2e9));
  ASSERT_TRUE(r.checkpoint);
  EXPECT_NEAR(r.checkpoint->stall_seconds, 1.2, 1e-9);
  EXPECT_NEAR(r.checkpoint->extra_seconds_per_interval, 1.2, 1e-9);
  EXPECT_NEAR(r.checkpoint->seconds_per_iteration, 0.12, 1e-9);
  // Copies of 0.5 s, writes of 1 s: the last write ends at 0.5 + 4 x 1 = 4.5 s.
  EXPECT_NEAR(r.checkpoint->persist_seconds, 4.5, 1e-9);
}

TEST(Checkpoint, AsynchronousCopyBlocksWhileTheHostCacheIsFull) {
  // A cache of two chunks: chunks 0 and 1 are copied by 0.2 s; chunk 2 waits for chunk 0's
  // write (0.1 to 1.1 s) and is copied by 1.2 s; chunk 3 waits for chunk 1's (1.1 to 2.1 s) and
  // is copied by 2.2 s. The step, due at 0.8 s, waits 1.4 s.
  const IoResult r = simulate_io(hand_inputs(spec(CheckpointMode::async, 2'000'000'000)));
  ASSERT_TRUE(r.checkpoint);
  EXPECT_NEAR(r.checkpoint->stall_seconds, 1.4, 1e-9);
  EXPECT_NEAR(r.checkpoint->extra_seconds_per_interval, 1.4, 1e-9);
  EXPECT_NEAR(r.checkpoint->persist_seconds, 4.1, 1e-9);  // chunk 3 written from 3.1 to 4.1 s
  EXPECT_EQ(r.checkpoint->host_bytes_per_node, 2'000'000'000);
}

TEST(Checkpoint, AsynchronousCopiesWaitedForAtTheSaveStallForAllOfThem) {
  // checkpoint.wait: save: the save returns once the 4 chunks are copied (4 x 0.1 s), though the
  // next forward and backward would have hidden them; the flush is as with wait: step.
  CheckpointSpec c = spec(CheckpointMode::async);
  c.wait = CheckpointWait::save;
  const IoResult r = simulate_io(hand_inputs(c));
  ASSERT_TRUE(r.checkpoint);
  EXPECT_NEAR(r.checkpoint->stall_seconds, 0.4, 1e-9);
  EXPECT_NEAR(r.checkpoint->extra_seconds_per_interval, 0.4, 1e-9);
  EXPECT_NEAR(r.checkpoint->persist_seconds, 4.1, 1e-9);
  EXPECT_NEAR(r.mean_iteration_seconds, 1.04, 1e-9);

  // With a cache of two chunks the last copy ends at 2.2 s (as in the test above): all of it is
  // stall at the save, where the step's wait lost 2.2 - 0.8 = 1.4 s.
  CheckpointSpec full = spec(CheckpointMode::async, 2'000'000'000);
  full.wait = CheckpointWait::save;
  const IoResult f = simulate_io(hand_inputs(full));
  ASSERT_TRUE(f.checkpoint);
  EXPECT_NEAR(f.checkpoint->stall_seconds, 2.2, 1e-9);
  EXPECT_NEAR(f.checkpoint->persist_seconds, 4.1, 1e-9);
}

TEST(Checkpoint, EachSaveFirstPaysTheFileSystemsCheckpointOverhead) {
  // storage.shared.checkpoint_overhead 0.5 s: paid once per save, before the bytes move, in both
  // modes. Sync: 0.5 + 4 x (0.1 + 1) = 4.9 s. Async waited for at the save: 0.5 + 4 x 0.1 = 0.9 s,
  // the flush 4 x 1 s from the first chunk's copy on: persisted 0.5 + 0.1 + 4 = 4.6 s after the
  // save began. Async waited for before the next step: the copies (0.4 s) hide behind the 0.8 s of
  // forward and backward, the overhead does not: 0.5 s.
  const auto with_overhead = [](CheckpointSpec c) {
    IoInputs in = hand_inputs(c);
    in.platform.storage->shared->checkpoint_overhead = 0.5;
    return in;
  };
  const IoResult sync = simulate_io(with_overhead(spec(CheckpointMode::sync)));
  ASSERT_TRUE(sync.checkpoint);
  EXPECT_NEAR(sync.checkpoint->stall_seconds, 4.9, 1e-9);
  EXPECT_DOUBLE_EQ(sync.checkpoint->save_overhead_seconds, 0.5);
  EXPECT_NEAR(sync.checkpoint->persist_seconds, 4.9, 1e-9);
  EXPECT_NEAR(sync.mean_iteration_seconds, 1.49, 1e-9);

  CheckpointSpec at_save = spec(CheckpointMode::async);
  at_save.wait = CheckpointWait::save;
  const IoResult save = simulate_io(with_overhead(at_save));
  ASSERT_TRUE(save.checkpoint);
  EXPECT_NEAR(save.checkpoint->stall_seconds, 0.9, 1e-9);
  EXPECT_NEAR(save.checkpoint->persist_seconds, 4.6, 1e-9);

  const IoResult step = simulate_io(with_overhead(spec(CheckpointMode::async)));
  ASSERT_TRUE(step.checkpoint);
  EXPECT_NEAR(step.checkpoint->stall_seconds, 0.5, 1e-9);
  EXPECT_NEAR(step.mean_iteration_seconds, 1.05, 1e-9);

  // The report says how much of the stall is the save's fixed cost; without one it says nothing.
  EXPECT_THAT(io_report_text(sync), ::testing::HasSubstr("of which the save's cost  0.500000 s before its bytes move"));
  EXPECT_THAT(io_report_json(sync), ::testing::HasSubstr("\"save_overhead_seconds\":0.5"));
  const IoResult plain = simulate_io(hand_inputs(spec(CheckpointMode::sync)));
  EXPECT_THAT(io_report_text(plain), ::testing::Not(::testing::HasSubstr("save's cost")));
  EXPECT_THAT(io_report_json(plain), ::testing::Not(::testing::HasSubstr("save_overhead_seconds")));

  // A checkpoint to the node's disk does not pay the shared file system's overhead.
  CheckpointSpec local = spec(CheckpointMode::sync);
  local.to = StorageTier::local;
  IoInputs disk = with_overhead(local);
  disk.platform.storage->local = models::LocalDiskSpec{"disk", 1e12, 1e9};
  const IoResult l = simulate_io(disk);
  ASSERT_TRUE(l.checkpoint);
  EXPECT_NEAR(l.checkpoint->stall_seconds, 4.4, 1e-9);
  EXPECT_DOUBLE_EQ(l.checkpoint->save_overhead_seconds, 0);
}

TEST(Checkpoint, AsynchronousCopiesRunAtTheLinksCheckpointCopyRate) {
  // host_link.checkpoint_copy_bandwidth 2 GB/s below the link's 10: each 1 GB chunk's copy takes
  // 0.5 s, the checkpoint's 2 s, of which the step waits 2 - 0.8 = 1.2 s; the synchronous save's
  // copies keep the link's rate (4 x (0.1 + 1) = 4.4 s).
  IoInputs in = hand_inputs(spec(CheckpointMode::async));
  in.platform.host_link.checkpoint_copy_bandwidth = 2e9;
  const IoResult r = simulate_io(in);
  ASSERT_TRUE(r.checkpoint);
  EXPECT_NEAR(r.checkpoint->stall_seconds, 1.2, 1e-6);
  IoInputs sync = hand_inputs(spec(CheckpointMode::sync));
  sync.platform.host_link.checkpoint_copy_bandwidth = 2e9;
  const IoResult s = simulate_io(sync);
  ASSERT_TRUE(s.checkpoint);
  EXPECT_NEAR(s.checkpoint->stall_seconds, 4.4, 1e-9);
  // Each GPU of a node has its own: two GPUs copying at once each still take 2 s.
  in.shape.gpus_per_node = 2;
  in.sizes.other = in.sizes.rank0;
  const IoResult two = simulate_io(in);
  ASSERT_TRUE(two.checkpoint);
  EXPECT_NEAR(two.checkpoint->stall_seconds, 1.2, 1e-6);
}

TEST(Checkpoint, IntervalForATargetOverheadIsTheSmallestMeetingIt) {
  IoInputs in = hand_inputs(spec(CheckpointMode::sync));
  in.target_overhead = 0.01;
  const IoResult r = simulate_io(in);
  ASSERT_TRUE(r.checkpoint && r.checkpoint->interval_for_target);
  // 4.4 s per checkpoint over N iterations of 1 s: 4.4 / N <= 0.01 from N = 440.
  EXPECT_EQ(*r.checkpoint->interval_for_target, 440);

  // Hidden entirely: the interval is the iterations until the flush has ended (no overlap of
  // one checkpoint's flush with the next).
  IoInputs hidden = hand_inputs(spec(CheckpointMode::async));
  hidden.target_overhead = 0.01;
  const IoResult h = simulate_io(hidden);
  ASSERT_TRUE(h.checkpoint && h.checkpoint->interval_for_target);
  EXPECT_EQ(*h.checkpoint->interval_for_target, h.checkpoint->affected_iterations);
  EXPECT_EQ(h.checkpoint->affected_iterations, 6);  // persisted 4.1 s after the checkpoint iteration ended: 5 more, and it
}

TEST(Checkpoint, FlushOutlastingTheIntervalIsAveragedOverWholeIntervals) {
  // Every 2 iterations, a 4.1 s flush with a cache of two chunks: each checkpoint's copy waits
  // for the previous flush. The steady state repeats every interval.
  CheckpointSpec c = spec(CheckpointMode::async, 2'000'000'000);
  c.every = 2;
  const IoResult r = simulate_io(hand_inputs(c));
  ASSERT_TRUE(r.checkpoint);
  EXPECT_TRUE(r.checkpoint->outlasts_interval);
  // The file system writes 4 GB per interval at 1 GB/s: an interval cannot take less than 4 s.
  EXPECT_NEAR(2.0 + r.checkpoint->extra_seconds_per_interval, 4.0, 1e-6);
}

TEST(Checkpoint, SizesFollowTheZeroStage) {
  zoo::ModelRequest request;
  request.model = "gpt2";
  request.precision = zoo::Precision::mixed;
  request.optimizer = zoo::Optimizer::adam;
  request.batch_size = 1;
  const traces::Trace trace = zoo::build_model(request);
  const CheckpointSizes one = checkpoint_sizes(trace, nullptr);
  const std::int64_t psi = one.parameter_count;
  ASSERT_GT(psi, 100'000'000);
  // Mixed-precision Adam: 2-byte parameters, a 12-byte master copy, momentum and variance.
  EXPECT_GE(one.rank0.parameters, 2 * psi);
  EXPECT_EQ(one.rank0.optimizer_states, 12 * psi);
  EXPECT_EQ(one.other.total(), 0);

  models::DataParallelSpec dp;
  dp.ranks = 8;
  dp.zero_stage = 3;
  const CheckpointSizes z3 = checkpoint_sizes(trace, &dp);
  const std::int64_t shard = models::zero::shard_elements(psi, 8);
  EXPECT_EQ(z3.other.parameters, 2 * shard);
  EXPECT_EQ(z3.other.optimizer_states, 12 * shard);
  dp.zero_stage = 1;
  const CheckpointSizes z1 = checkpoint_sizes(trace, &dp);
  EXPECT_EQ(z1.other.parameters, 0);
  EXPECT_EQ(z1.rank0.parameters, one.rank0.parameters);
  EXPECT_EQ(z1.other.optimizer_states, 12 * shard);
}

// An optimizer whose bytes per parameter are not whole (8-bit AdamW: uint8 moments and an fp32
// absmax per block of 256) is sharded by its bytes, not a rounded K. A one-layer GPT (hidden 64,
// sequence 16, vocabulary 100, tests/zoo/optimizer_test.cpp) has Ψ = 57536 parameters and
// 130760 B of state: with DeepSpeed's fp32 master copy 130760 + 4 x 57536 = 360904 B, over 3
// ranks ⌈360904 / 3⌉ = 120302 B each; fp32 parameters 4 x ⌈57536 / 3⌉ = 4 x 19179 at stage 3.
TEST(Checkpoint, ShardsFollowTheOptimizersBytes) {
  zoo::ModelRequest request;
  request.model = "gpt";
  request.layers = 1;
  request.hidden = 64;
  request.heads = 4;
  request.seq_len = 16;
  request.vocab = 100;
  request.optimizer = zoo::Optimizer::adamw8bit;
  const traces::Trace trace = zoo::build_model(request);
  const CheckpointSizes one = checkpoint_sizes(trace, nullptr);
  EXPECT_EQ(one.parameter_count, 57536);
  EXPECT_EQ(one.rank0.optimizer_states, 130760);
  models::DataParallelSpec dp;
  dp.ranks = 3;
  dp.zero_stage = 3;
  const CheckpointSizes z3 = checkpoint_sizes(trace, &dp);
  EXPECT_EQ(z3.other.optimizer_states, 120302);
  EXPECT_EQ(z3.other.parameters, 4 * 19179);
}

TEST(Checkpoint, ScenarioSection) {
  const std::string base = "model: {zoo: gpt2}\ntraining: {batch_size: 1, precision: mixed, optimizer: adam}\nplatform: polaris\n";
  const Scenario s = parse_scenario(base + "checkpoint: {every: 100, mode: async, host_cache: 8 GiB, chunk: 256 MiB, to: local, wait: save}\n"
                                           "plan: {checkpoint_overhead: 0.02}\n",
                                    "test.yaml", ".");
  ASSERT_TRUE(s.checkpoint);
  EXPECT_EQ(s.checkpoint->every, 100);
  EXPECT_EQ(s.checkpoint->mode, CheckpointMode::async);
  EXPECT_EQ(s.checkpoint->wait, CheckpointWait::save);
  EXPECT_EQ(parse_scenario(base + "checkpoint: {every: 10, mode: async}\n", "t.yaml", ".").checkpoint->wait, CheckpointWait::step);
  EXPECT_EQ(s.checkpoint->host_cache_bytes, std::int64_t{8} << 30);
  EXPECT_EQ(s.checkpoint->chunk_bytes, std::int64_t{256} << 20);
  EXPECT_EQ(s.checkpoint->to, StorageTier::local);
  ASSERT_TRUE(s.plan && s.plan->checkpoint_overhead);
  EXPECT_DOUBLE_EQ(*s.plan->checkpoint_overhead, 0.02);

  EXPECT_THROW(parse_scenario(base + "checkpoint: {mode: sync}\n", "t.yaml", "."), InputError);  // no interval
  EXPECT_THROW(parse_scenario(base + "checkpoint: {every: 10, mode: lazy}\n", "t.yaml", "."), InputError);
  EXPECT_THROW(parse_scenario(base + "checkpoint: {every: 10, mode: async, host_cache: 1 MiB}\n", "t.yaml", "."), InputError);
  EXPECT_THROW(parse_scenario(base + "checkpoint: {every: 10, to: tape}\n", "t.yaml", "."), InputError);
  EXPECT_THROW(parse_scenario(base + "checkpoint: {every: 10, mode: async, wait: later}\n", "t.yaml", "."), InputError);
  EXPECT_THROW(parse_scenario(base + "checkpoint: {every: 10, mode: sync, wait: save}\n", "t.yaml", "."), InputError);
  EXPECT_THROW(parse_scenario(base + "plan: {checkpoint_overhead: 1.5}\n", "t.yaml", "."), InputError);
  // A platform without the storage the section names is refused before any run.
  Scenario no_storage = parse_scenario(base + "checkpoint: {every: 10}\n", "t.yaml", ".");
  no_storage.platform->storage.reset();
  EXPECT_THROW(PreparedScenario{no_storage}, InputError);
  // So is a sync checkpoint on a platform without torch.save's rate.
  Scenario no_rate = parse_scenario(base + "checkpoint: {every: 10}\n", "t.yaml", ".");
  ASSERT_GT(no_rate.platform->host.torch_save_bandwidth, 0);  // polaris gives it
  no_rate.platform->host.torch_save_bandwidth = 0;
  EXPECT_THROW(PreparedScenario{no_rate}, InputError);
}

}  // namespace
}  // namespace comptrain::sim

namespace comptrain::sim {
namespace {

TEST(Checkpoint, MeasuredRunAveragesItsCheckpointsFromAnEmptyHostCache) {
  // A checkpoint after every iteration, waited for at the save, with a cache of four chunks: the
  // checkpoint fills it. Times from the run's start; iterations of 1 s.
  //   checkpoint 0 at 1.0 s: an empty cache, its 4 copies end at 1.4 s (stall 0.4 s); its chunks
  //     are written 1.1-2.1, 2.1-3.1, 3.1-4.1 and 4.1-5.1 s.
  //   checkpoint 1 at 2.4 s: 3 chunks still cached; its copies end at 2.5, then each waits for a
  //     write to free room: 3.1-3.2, 4.1-4.2, 5.1-5.2 s (stall 2.8 s).
  //   every later one likewise waits for the previous one's writes: stall 3.0 s, 4 s per
  //     iteration, the file system's 4 GB at 1 GB/s.
  CheckpointSpec c = spec(CheckpointMode::async, 4'000'000'000);
  c.every = 1;
  c.wait = CheckpointWait::save;
  IoInputs in = hand_inputs(c);
  const auto run = [&](int checkpoints) {
    in.run_checkpoints = checkpoints;
    return simulate_io(in);
  };
  const IoResult one = run(1);
  ASSERT_TRUE(one.checkpoint);
  EXPECT_EQ(one.checkpoint->run_checkpoints, 1);
  EXPECT_NEAR(one.checkpoint->stall_seconds, 0.4, 1e-9);
  EXPECT_NEAR(one.mean_iteration_seconds, 1.4, 1e-9);
  EXPECT_NEAR(one.checkpoint->persist_seconds, 4.1, 1e-9);
  EXPECT_FALSE(one.checkpoint->interval_for_target);

  const IoResult two = run(2);
  ASSERT_TRUE(two.checkpoint);
  EXPECT_NEAR(two.checkpoint->stall_seconds, (0.4 + 2.8) / 2, 1e-9);
  EXPECT_NEAR(two.mean_iteration_seconds, 5.2 / 2, 1e-9);
  EXPECT_EQ(two.checkpoint->affected_iterations, 2);

  const IoResult steady = run(0);
  ASSERT_TRUE(steady.checkpoint);
  EXPECT_EQ(steady.checkpoint->run_checkpoints, 0);
  EXPECT_NEAR(steady.checkpoint->stall_seconds, 3.0, 1e-6);
  EXPECT_NEAR(steady.mean_iteration_seconds, 4.0, 1e-6);
}

TEST(Checkpoint, ValidationPointsNameTheirSetup) {
  const std::string line =
      R"({"id": "x", "source": "s", "model": "m", "gpu": "g", "precision": "mixed", "metric": "checkpoint_throughput", "published": 4, )"
      R"("unit": "GB/s", "notes": "n", "platform": "polaris", "nodes": 2, "gpus_per_node": 4, )"
      R"("checkpoint": {"bytes_per_gpu": 1000, "forward_backward_seconds": 1.5, "update_seconds": 0.1, "mode": "async", "every": 1, "host_cache_bytes": 100000000}})";
  const ValidationTable table = parse_validation_table(line, "t.jsonl", ".");
  ASSERT_EQ(table.points.size(), 1u);
  const ValidationPoint& p = table.points.front();
  ASSERT_TRUE(p.checkpoint);
  EXPECT_EQ(p.checkpoint->nodes, 2);
  EXPECT_EQ(p.checkpoint->bytes_per_gpu, 1000);
  EXPECT_DOUBLE_EQ(p.checkpoint->forward_backward_seconds, 1.5);
  EXPECT_EQ(p.checkpoint->checkpoint.mode, CheckpointMode::async);
  EXPECT_EQ(p.checkpoint->checkpoint.host_cache_bytes, 100'000'000);
  EXPECT_EQ(p.checkpoint->checkpoint.wait, CheckpointWait::step);
  std::string at_save = line;
  at_save.insert(at_save.size() - 2, R"(, "wait": "save")");
  EXPECT_EQ(parse_validation_table(at_save, "t.jsonl", ".").points.front().checkpoint->checkpoint.wait, CheckpointWait::save);
  // The measured run's checkpoints: a count from 1; absent, the steady state.
  EXPECT_EQ(p.checkpoint->run_checkpoints, 0);
  std::string run = line;
  run.insert(run.size() - 2, R"(, "checkpoints": 5)");
  EXPECT_EQ(parse_validation_table(run, "t.jsonl", ".").points.front().checkpoint->run_checkpoints, 5);
  std::string no_run = line;
  no_run.insert(no_run.size() - 2, R"(, "checkpoints": 0)");
  try {
    parse_validation_table(no_run, "t.jsonl", ".");
    ADD_FAILURE() << "checkpoint.checkpoints: 0 was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint.checkpoints"), std::string::npos) << e.what();
  }
  std::string wait_on_sync = at_save;
  wait_on_sync.replace(wait_on_sync.find("\"async\""), 7, "\"sync\"");
  try {
    parse_validation_table(wait_on_sync, "t.jsonl", ".");
    ADD_FAILURE() << "checkpoint.wait on a sync point was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint.wait"), std::string::npos) << e.what();
  }
  // A mode it does not know, and a scenario besides the setup, are errors naming the line.
  std::string bad = line;
  bad.replace(bad.find("\"async\""), 7, "\"lazy\"");
  EXPECT_THROW(parse_validation_table(bad, "t.jsonl", "."), InputError);
  std::string with_scenario = line;
  with_scenario.insert(with_scenario.size() - 1, R"(, "scenario": "a.yaml")");
  EXPECT_THROW(parse_validation_table(with_scenario, "t.jsonl", "."), InputError);
}

// Where ranks write unequal shares, `bytes_per_gpu` is the largest (the ranks training waits for)
// and `job_bytes` the whole checkpoint: the throughput divides job_bytes by the same stall.
TEST(Checkpoint, JobBytesIsTheWholeCheckpointOverTheLargestSharesStall) {
  const auto point = [](const std::string& id, const std::string& extra) {
    return R"({"id": ")" + id + R"(", "source": "s", "model": "m", "gpu": "g", "precision": "mixed", "metric": "checkpoint_throughput", "published": 4, )"
           R"("unit": "GB/s", "notes": "n", "platform": "polaris", "nodes": 2, "gpus_per_node": 4, )"
           R"("checkpoint": {"bytes_per_gpu": 2000000000, "forward_backward_seconds": 1.5, "update_seconds": 0.1, "mode": "sync", "every": 1)" +
           extra + "}}\n";
  };
  const ValidationTable table = parse_validation_table(point("even", "") + point("uneven", R"(, "job_bytes": 6000000000)"), "t.jsonl", ".");
  ASSERT_EQ(table.points.size(), 2u);
  EXPECT_EQ(table.points[0].checkpoint->job_bytes, 0);
  EXPECT_EQ(table.points[1].checkpoint->job_bytes, 6'000'000'000);
  const auto results = validate(table, ValidateOptions{.fast = false, .jobs = 1});
  ASSERT_EQ(results.size(), 2u);
  ASSERT_TRUE(results[0].predicted && results[1].predicted) << results[0].why_none << results[1].why_none;
  // Eight GPUs of 2 GB each against 6 GB in all, over one stall.
  EXPECT_NEAR(*results[1].predicted / *results[0].predicted, 6.0 / 16.0, 1e-12);

  // Below the largest share, or above it times the GPUs: an error naming the field and the bounds.
  for (const char* bad : {R"(, "job_bytes": 1999999999)", R"(, "job_bytes": 16000000001)", R"(, "job_bytes": 0)"}) {
    SCOPED_TRACE(bad);
    try {
      parse_validation_table(point("bad", bad), "t.jsonl", ".");
      ADD_FAILURE() << "accepted";
    } catch (const InputError& e) {
      EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("t.jsonl:1: field 'checkpoint.job_bytes': "));
    }
  }
  EXPECT_NO_THROW(parse_validation_table(point("whole", R"(, "job_bytes": 16000000000)"), "t.jsonl", "."));
}

TEST(Checkpoint, ResultRoundTripsThroughTheChildsPipe) {
  IoResult r;
  r.data_loader = true;
  r.steady_iteration_seconds = 1.25;
  r.bound = IterationBound::storage;
  CheckpointResult c;
  c.mode = CheckpointMode::async;
  c.every = 7;
  c.sizes.rank0 = {1, 2};
  c.wait = CheckpointWait::save;
  c.stall_seconds = 0.5;
  c.serialize_seconds = 0.25;
  c.save_overhead_seconds = 0.125;
  c.interval_for_target = 12;
  c.run_checkpoints = 5;
  r.checkpoint = c;
  const IoResult back = wire::decode<IoResult>(wire::encode(r));
  EXPECT_TRUE(back.data_loader);
  EXPECT_DOUBLE_EQ(back.steady_iteration_seconds, 1.25);
  EXPECT_EQ(back.bound, IterationBound::storage);
  ASSERT_TRUE(back.checkpoint);
  EXPECT_EQ(back.checkpoint->every, 7);
  EXPECT_EQ(back.checkpoint->sizes.rank0.optimizer_states, 2);
  EXPECT_DOUBLE_EQ(back.checkpoint->stall_seconds, 0.5);
  EXPECT_DOUBLE_EQ(back.checkpoint->serialize_seconds, 0.25);
  EXPECT_DOUBLE_EQ(back.checkpoint->save_overhead_seconds, 0.125);
  EXPECT_EQ(back.checkpoint->wait, CheckpointWait::save);
  EXPECT_EQ(back.checkpoint->interval_for_target, 12);
  EXPECT_EQ(back.checkpoint->run_checkpoints, 5);
}

// The I/O simulation's cost is estimated and bounded before it runs (shared/defects-2/07, 08).
TEST(IoCost, ChunksAndTheLoadersWarmUpAreCountedAndBounded) {
  IoInputs in = hand_inputs(spec(CheckpointMode::async));
  in.shape = {1, 2};
  in.sizes.other = {0, 1'500'000'000};  // rank 0 4 GB in 4 chunks of 1 GB, the other 1.5 GB in 2
  EXPECT_EQ(estimate_io_cost(in).chunks_per_checkpoint, 6);
  EXPECT_EQ(estimate_io_cost(in).warmup_iterations, 0);
  EXPECT_NO_THROW(check_io_cost(in, "d: ", "c: "));
  in.checkpoint->chunk_bytes = 1;
  EXPECT_EQ(estimate_io_cost(in).chunks_per_checkpoint, 5'500'000'000);
  try {
    check_io_cost(in, "d: ", "c: ");
    ADD_FAILURE() << "1-byte chunks accepted";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("c: a chunk of 1 bytes cuts the node's 5500000000-byte checkpoint into 5500000000 chunks"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("expected at most 100000 per checkpoint: a chunk of at least 55001 bytes"));
  }
  in.checkpoint->chunk_bytes = 55'001;
  EXPECT_LE(estimate_io_cost(in).chunks_per_checkpoint, kMaxChunksPerCheckpoint);

  // The loader: 2 x prefetch x workers + 2 x workers + 2 iterations before a steady state is
  // looked for, and each of them wakes every GPU's workers and training loop twice.
  in.checkpoint.reset();
  in.data = DataSpec{};
  in.data->workers_per_gpu = 4;
  in.data->prefetch_factor = 2;
  EXPECT_EQ(estimate_io_cost(in).warmup_iterations, 2 * 2 * 4 + 2 * 4 + 2);
  EXPECT_EQ(estimate_io_cost(in).loader_wakeups, 26 * 2 * 2 * 5);
  EXPECT_NO_THROW(check_io_cost(in, "d: ", "c: "));
  in.data->workers_per_gpu = 1024;
  in.data->prefetch_factor = 1024;
  EXPECT_THROW(check_io_cost(in, "d: ", "c: "), InputError);
  try {
    check_io_cost(in, "d: ", "c: ");
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("d: data.prefetch_factor 1024 x data.workers_per_gpu 1024: the loader's warm-up is at least 2099202"));
  }
  in.data->prefetch_factor = 2;  // 6,146 iterations, 25 million wake-ups
  try {
    check_io_cost(in, "d: ", "c: ");
    ADD_FAILURE() << "1,024 workers per GPU accepted";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("would wake the node's workers about 25198600 times in the I/O simulation; expected at most 10000000"));
  }
}

}  // namespace
}  // namespace comptrain::sim

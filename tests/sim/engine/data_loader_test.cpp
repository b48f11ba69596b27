// The data loader (sim/data_loader.hpp, sim/io.hpp) against hand computations: a loader slower
// than the GPU makes the iteration loader-bound by exactly the time it lacks; workers on free
// cores hide it; a file system's client link binds whatever the workers; storage on the platform.

#include <gtest/gtest.h>

#include "comptrain/models/platform.hpp"
#include "comptrain/sim/engine/io_simulation.hpp"
#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::sim {
namespace {

// One GPU whose iteration takes 1 s on 16 samples; a host of `cores` cores; the file system's
// client link at 1 GB/s, a local disk reading 4 GB/s; no latencies.
IoInputs hand_inputs(DataSpec data, int cores = 2) {
  IoInputs in;
  in.platform = models::builtin_platform("a100-40gb");
  in.platform.host.cores = cores;
  in.platform.storage = models::StorageSpec{models::LocalDiskSpec{"disk", 4e9, 2e9}, models::SharedFileSystemSpec{"fs", 1e12, 1e12, 1e9, 0}};
  in.profile.seconds = 1.0;
  in.profile.optimizer_start = 0.8;
  in.profile.samples = 16;
  in.data = data;
  return in;
}

DataSpec decode_only(int workers) {
  DataSpec d;
  d.bytes_per_sample = 0;
  d.decode_seconds_per_sample = 0.1;  // 1.6 s per batch of 16 on one core
  d.workers_per_gpu = workers;
  return d;
}

TEST(DataLoader, LoaderSlowerThanTheGpuBindsTheIterationByExactlyTheDifference) {
  const IoResult r = simulate_io(hand_inputs(decode_only(1)));
  EXPECT_NEAR(r.steady_iteration_seconds, 1.6, 1e-9);
  EXPECT_NEAR(r.data_wait_seconds, 0.6, 1e-9);  // 1.6 s per batch - 1 s of GPU work
  EXPECT_NEAR(r.batch_decode_seconds, 1.6, 1e-9);
  EXPECT_EQ(r.bound, IterationBound::loader);
  EXPECT_NEAR(r.mean_iteration_seconds, 1.6, 1e-9);
}

TEST(DataLoader, TwoWorkersOnTwoCoresKeepUp) {
  // Two batches every 1.6 s: 0.8 s per batch, faster than the GPU's 1 s.
  const IoResult r = simulate_io(hand_inputs(decode_only(2)));
  EXPECT_NEAR(r.steady_iteration_seconds, 1.0, 1e-9);
  EXPECT_NEAR(r.data_wait_seconds, 0.0, 1e-12);
  EXPECT_EQ(r.bound, IterationBound::gpu);
}

TEST(DataLoader, WorkersBeyondTheCoresShareThem) {
  // Four workers on one core: four batches every 4 x 1.6 s, 1.6 s per iteration again.
  const IoResult r = simulate_io(hand_inputs(decode_only(4), 1));
  EXPECT_NEAR(r.steady_iteration_seconds, 1.6, 1e-9);
  EXPECT_NEAR(r.data_wait_seconds, 0.6, 1e-9);
  EXPECT_EQ(r.bound, IterationBound::loader);
}

// The training process's launching thread (0.5 s of CPU per iteration) shares the one core with
// the worker (0.8 s per batch). The launch starts as the iteration takes batch i, with the
// worker on batch i + 1: each runs at half speed, so the launch ends after 1 s (as the GPU does)
// and the worker has done 0.5 s of its 0.8 s; alone, it needs 0.3 s more. Every iteration then
// waits 0.3 s for its batch: 1.3 s, the core's 0.5 + 0.8 s of work per iteration.
TEST(DataLoader, LaunchingThreadSharesTheWorkersCore) {
  IoInputs in = hand_inputs(decode_only(1), 1);
  in.data->decode_seconds_per_sample = 0.05;  // 0.8 s per batch of 16
  in.profile.launch_seconds = 0.5;
  const IoResult r = simulate_io(in);
  EXPECT_NEAR(r.steady_iteration_seconds, 1.3, 1e-9);
  EXPECT_NEAR(r.data_wait_seconds, 0.3, 1e-9);
  EXPECT_NEAR(r.launch_wait_seconds, 0.0, 1e-9);
  EXPECT_NEAR(r.launch_seconds, 0.5, 1e-12);
  EXPECT_EQ(r.bound, IterationBound::loader);
  // A second core gives each its own: the GPU's 1 s again.
  in.platform.host.cores = 2;
  const IoResult two = simulate_io(in);
  EXPECT_NEAR(two.steady_iteration_seconds, 1.0, 1e-9);
  EXPECT_NEAR(two.launch_wait_seconds, 0.0, 1e-9);
  EXPECT_EQ(two.bound, IterationBound::gpu);
  // Without the launching thread's time the worker keeps up on one core.
  in.platform.host.cores = 1;
  in.profile.launch_seconds = 0;
  EXPECT_NEAR(simulate_io(in).steady_iteration_seconds, 1.0, 1e-9);
}

// A launch of 0.9 s and a worker of 0.3 s per batch on one core: the worker runs ahead (its
// batches are ready), the launch is always running, so the core does 1.2 s of work per
// iteration and the iteration waits 0.2 s past the GPU's 1 s for its launching thread.
TEST(DataLoader, LaunchingThreadSlowedByTheWorkersMakesTheIterationHostBound) {
  IoInputs in = hand_inputs(decode_only(1), 1);
  in.data->decode_seconds_per_sample = 0.3 / 16;
  in.profile.launch_seconds = 0.9;
  const IoResult r = simulate_io(in);
  EXPECT_NEAR(r.steady_iteration_seconds, 1.2, 1e-9);
  EXPECT_NEAR(r.data_wait_seconds, 0.0, 1e-9);
  EXPECT_NEAR(r.launch_wait_seconds, 0.2, 1e-9);
  EXPECT_EQ(r.bound, IterationBound::host);
}

// Two workers on one core and one disk, each batch a 0.6 s read (2.4 GB at 4 GB/s) and a 0.8 s
// decode, and a GPU of 0.5 s. Out of step, one worker reads while the other decodes and the
// core never idles: a batch every 0.8 s (the core's work per batch), 0.3 s of it waited for.
// In lockstep (both reading at half speed for 1.2 s, then both decoding for 1.6 s) it would be
// 2.8 s per two batches, 1.4 s per iteration: the workers' spread start keeps them out of step.
TEST(DataLoader, WorkersOutOfStepOverlapTheDiskAndTheCore) {
  DataSpec d = decode_only(2);
  d.bytes_per_sample = 150'000'000;
  d.decode_seconds_per_sample = 0.05;
  d.from = StorageTier::local;
  IoInputs in = hand_inputs(d, 1);
  in.profile.seconds = 0.5;
  in.profile.optimizer_start = 0.4;
  const IoResult r = simulate_io(in);
  EXPECT_NEAR(r.steady_iteration_seconds, 0.8, 1e-9);
  EXPECT_NEAR(r.data_wait_seconds, 0.3, 1e-9);
  EXPECT_EQ(r.bound, IterationBound::loader);
}

// Two GPUs, one worker each on its own core, 1.6 s per batch: the second GPU's worker starts
// 0.8 s later (the spread start), so the GPUs' batches arrive 0.8 s apart. They meet after
// every iteration, so the node waits for the later one: 1.6 s per iteration, 0.6 s of it the
// node's wait for a batch (the slower GPU's), loader-bound whichever GPU waited.
TEST(DataLoader, NodeWaitsForItsSlowestGpusBatch) {
  IoInputs in = hand_inputs(decode_only(1), 2);
  in.shape = ClusterShape{1, 2};
  const IoResult r = simulate_io(in);
  EXPECT_NEAR(r.steady_iteration_seconds, 1.6, 1e-9);
  EXPECT_NEAR(r.data_wait_seconds, 0.6, 1e-9);
  EXPECT_NEAR(r.batch_decode_seconds, 1.6, 1e-9);
  EXPECT_EQ(r.bound, IterationBound::loader);
}

TEST(DataLoader, FileSystemClientLinkBindsWhateverTheWorkers) {
  DataSpec d;
  d.bytes_per_sample = 100'000'000;  // 1.6 GB per batch over a 1 GB/s client link: 1.6 s
  d.decode_seconds_per_sample = 0;
  for (const int workers : {1, 2}) {
    d.workers_per_gpu = workers;
    const IoResult r = simulate_io(hand_inputs(d));
    EXPECT_NEAR(r.steady_iteration_seconds, 1.6, 1e-9) << workers << " workers";
    EXPECT_NEAR(r.data_wait_seconds, 0.6, 1e-9) << workers << " workers";
    EXPECT_EQ(r.bound, IterationBound::storage) << workers << " workers";
  }
  // The local disk reads at 4 GB/s: 0.4 s, hidden.
  d.workers_per_gpu = 1;
  d.from = StorageTier::local;
  const IoResult local = simulate_io(hand_inputs(d));
  EXPECT_NEAR(local.steady_iteration_seconds, 1.0, 1e-9);
  EXPECT_EQ(local.bound, IterationBound::gpu);
}

TEST(DataLoader, NodesShareTheFileSystemsAggregate) {
  DataSpec d;
  d.bytes_per_sample = 10'000'000;  // 160 MB per batch
  d.decode_seconds_per_sample = 0;
  IoInputs in = hand_inputs(d);
  // 100 GB/s aggregate over 1000 nodes: 100 MB/s per node, 1.6 s per batch.
  in.platform.storage->shared->read_bandwidth = 1e11;
  in.shape = ClusterShape{1000, 1};
  const IoResult r = simulate_io(in);
  EXPECT_NEAR(r.steady_iteration_seconds, 1.6, 1e-9);
  EXPECT_EQ(r.bound, IterationBound::storage);
}

TEST(DataLoader, ScenarioSectionAndPlatformStorage) {
  const std::string base = "model: {zoo: resnet50}\ntraining: {batch_size: 32}\nplatform: polaris\n";
  const Scenario s = parse_scenario(base + "data: {bytes_per_sample: 110 KiB, decode_per_sample: 4 ms, workers_per_gpu: 8, prefetch_factor: 4, from: local}\n",
                                    "test.yaml", ".");
  ASSERT_TRUE(s.data);
  EXPECT_EQ(s.data->bytes_per_sample, 110 * 1024);
  EXPECT_DOUBLE_EQ(s.data->decode_seconds_per_sample, 0.004);
  EXPECT_EQ(s.data->workers_per_gpu, 8);
  EXPECT_EQ(s.data->prefetch_factor, 4);
  EXPECT_EQ(s.data->from, StorageTier::local);
  EXPECT_THROW(parse_scenario(base + "data: {bytes_per_sample: 1 KiB}\n", "t.yaml", "."), InputError);  // no decode time
  EXPECT_THROW(parse_scenario(base + "data: {bytes_per_sample: 1 KiB, decode_per_sample: 5 s}\n", "t.yaml", "."), InputError);
  EXPECT_THROW(parse_scenario(base + "data: {bytes_per_sample: 1 KiB, decode_per_sample: 1 ms, workers: 2}\n", "t.yaml", "."), InputError);

  // Every shipped cluster names its storage.
  for (const char* name : {"polaris", "perlmutter-gpu", "dgx-a100-superpod", "dgx-h100-superpod", "dgx1-v100-cluster"}) {
    const models::Platform p = models::builtin_platform(name);
    ASSERT_TRUE(p.storage) << name;
    ASSERT_TRUE(p.storage->shared) << name;
    EXPECT_GT(p.storage->shared->read_bandwidth, p.storage->shared->per_node_bandwidth) << name;
  }
  EXPECT_THROW(models::parse_platform(R"(name: x
gpu: {name: g, memory: 1 GiB, memory_bandwidth: 1 TB/s, peak: {fp32: 1 TFLOP/s, tf32: 0, fp16: 1 TFLOP/s, bf16: 0}, launch_overhead: 1 us}
host: {name: h, cores: 1, flops: 1 TFLOP/s, memory: 1 GiB, memory_bandwidth: 1 GB/s}
host_link: {name: l, bandwidth: 1 GB/s, latency: 1 us}
storage: {}
)",
                                       "x.yaml"),
               InputError);
}

}  // namespace
}  // namespace comptrain::sim

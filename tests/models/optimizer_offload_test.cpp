// ZeRO-Offload and Deep Optimizer States as schedule transforms (models/data_parallel.hpp,
// models/transforms/README.md "Optimizer offload"): the fp32 state leaves the GPU, the gradients
// are copied to the host during the backward pass, the CPU step takes the CPU Adam model's
// time, and the subgroups go to the CPU or the GPU by Twin-Flow's ratio or Deep Optimizer
// States' rule.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/models/data_parallel.hpp"
#include "comptrain/models/op_time.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/traces/summary.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "common/must_apply.hpp"

namespace comptrain::models {
namespace {

traces::Trace gpt_mixed() {
  zoo::ModelRequest request;
  request.model = "gpt2";
  request.layers = 2;
  request.precision = zoo::Precision::mixed;
  request.optimizer = zoo::Optimizer::adam;
  request.batch_size = 2;
  return zoo::build_model(request);
}

const Platform& a100() {
  static const Platform platform = builtin_platform("a100-80gb");
  return platform;
}

Schedule baseline(const traces::Trace& trace) {
  static const OpTimeModel time_model(a100());
  return test_support::must_apply(build_schedule(trace, time_model, StrategySpec{}));
}

DataParallelSpec offloaded(int ranks, int stage, OptimizerOffloadSpec offload = {}) {
  DataParallelSpec spec;
  spec.ranks = ranks;
  spec.zero_stage = stage;
  spec.offload_optimizer = offload;
  return spec;
}

std::int64_t resident_bytes(const Schedule& s, MemoryRole role) {
  std::int64_t total = 0;
  for (const Buffer& b : s.buffers) {
    if (b.resident && b.role == role) total += b.bytes;
  }
  return total;
}

std::vector<const Task*> tasks_of(const Schedule& s, TaskKind kind, Stream stream) {
  std::vector<const Task*> out;
  for (const Task& t : s.tasks) {
    if (t.kind == kind && t.stream == stream) out.push_back(&t);
  }
  return out;
}

std::int64_t bytes_of(const std::vector<const Task*>& tasks, std::string_view name_prefix) {
  std::int64_t total = 0;
  for (const Task* t : tasks) {
    if (t->name.rfind(name_prefix, 0) == 0) total += t->bytes;
  }
  return total;
}

// The CPU steps of the subgroups (the host's other work: ZeRO-3's blocking gradient copies'
// conversion to fp32).
std::vector<const Task*> cpu_steps(const Schedule& s) {
  std::vector<const Task*> out;
  for (const Task& t : s.tasks) {
    if (t.kind == TaskKind::host_compute && t.name.rfind("CPU Adam of optimizer subgroup", 0) == 0) out.push_back(&t);
  }
  return out;
}

// The GPU step tasks that replace the optimizer's kernels for GPU subgroups.
std::vector<const Task*> gpu_steps(const Schedule& s) {
  std::vector<const Task*> out;
  for (const Task& t : s.tasks) {
    if (t.name.rfind("optimizer step on the GPU of subgroup", 0) == 0) out.push_back(&t);
  }
  return out;
}

// Ψ: the parameters that get a gradient, all of them in the zoo's GPT.
std::int64_t parameters(const traces::Trace& trace) { return traces::summarize(trace).parameters; }

// DeepSpeedCPUAdam's roofline, by hand: 15 FLOPs and 34 bytes of host memory per parameter
// (cpu_adam.h Step_AVX; the 16-bit copy's conversion). A host of 1e11 FLOP/s and 1e10 B/s is
// memory bound: 1e6 parameters take 34e6 / 1e10 = 3.4 ms (the FLOPs, 15e6 / 1e11 = 0.15 ms);
// with 1e12 B/s it is compute bound: 0.15 ms.
TEST(OptimizerOffload, CpuAdamSecondsAreTheRoofline) {
  HostSpec host;
  host.flops = 1e11;
  host.memory_bandwidth = 1e10;
  EXPECT_DOUBLE_EQ(cpu_adam_seconds(1'000'000, host), 3.4e-3);
  host.memory_bandwidth = 1e12;
  EXPECT_DOUBLE_EQ(cpu_adam_seconds(1'000'000, host), 1.5e-4);
  EXPECT_EQ(cpu_adam_seconds(0, host), 0.0);
  host.flops = 0;
  EXPECT_THROW(cpu_adam_seconds(1, host), std::invalid_argument);
}

TEST(OptimizerOffload, RejectsSpecsDeepSpeedRejects) {
  EXPECT_THROW(check_data_parallel(offloaded(2, 0)), std::invalid_argument);  // needs ZeRO
  OptimizerOffloadSpec twin;
  twin.ratio = 0.5;
  EXPECT_THROW(check_data_parallel(offloaded(2, 2, twin)), std::invalid_argument);  // Twin-Flow: stage 3
  EXPECT_NO_THROW(check_data_parallel(offloaded(2, 3, twin)));
  twin.ratio = 1.5;
  EXPECT_THROW(check_data_parallel(offloaded(2, 3, twin)), std::invalid_argument);
  OptimizerOffloadSpec dos;
  dos.prefetch_optimizer = true;
  EXPECT_THROW(check_data_parallel(offloaded(1, 3, dos)), std::invalid_argument);  // no gap
  dos.prefetch_optimizer_gap = 2;
  EXPECT_NO_THROW(check_data_parallel(offloaded(1, 3, dos)));
  EXPECT_THROW(check_data_parallel(offloaded(1, 2, dos)), std::invalid_argument);  // stage 3 only
  dos.ratio = 0.5;
  EXPECT_THROW(check_data_parallel(offloaded(1, 3, dos)), std::invalid_argument);
  // The step runs on a host: the overload without a platform refuses it.
  const auto trace = gpt_mixed();
  Schedule s = baseline(trace);
  EXPECT_THROW(apply_data_parallel(s, trace, offloaded(2, 2)), std::invalid_argument);
}

// With the optimizer offloaded the GPU holds none of the fp32 state (ZeRO's 12Ψ/N), and stage 2
// and 3 hold no gradient partition (DeepSpeed keeps it on the host): only the reduction bucket
// stays. The optimizer's kernels are gone; one CPU step covers this rank's partition, and its
// updated 16-bit parameters come back (2 bytes each).
TEST(OptimizerOffload, TheOptimizerStateLeavesTheGpu) {
  const auto trace = gpt_mixed();
  const std::int64_t psi = parameters(trace);
  const Schedule before = baseline(trace);
  const int n = 4;
  for (int stage = 1; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    Schedule on_gpu = before;
    DataParallelSpec plain;
    plain.ranks = n;
    plain.zero_stage = stage;
    apply_data_parallel(on_gpu, trace, plain, a100());
    Schedule s = before;
    apply_data_parallel(s, trace, offloaded(n, stage), a100());
    ASSERT_NO_THROW(s.validate());
    EXPECT_EQ(resident_bytes(on_gpu, MemoryRole::optimizer_state), (12 * psi + n - 1) / n);
    EXPECT_EQ(resident_bytes(s, MemoryRole::optimizer_state), 0);
    if (stage >= 2) {
      // The partition (2Ψ/N) is gone; the reduction bucket, min(5e8, Ψ) x 2 bytes, stays.
      EXPECT_EQ(resident_bytes(on_gpu, MemoryRole::gradient), (2 * psi + n - 1) / n + 2 * psi);
      EXPECT_EQ(resident_bytes(s, MemoryRole::gradient), 2 * psi);
    }
    // No optimizer kernel is left; the CPU steps the partition in one subgroup (stages 1 and 2,
    // and ZeRO-3 below its sub_group_size).
    for (const Task& t : s.tasks) {
      if (t.op) {
        EXPECT_NE(trace.op(*t.op).phase, traces::Phase::optimizer) << t.name;
      }
    }
    const auto host = cpu_steps(s);
    ASSERT_EQ(host.size(), 1u);
    const auto& shares = host.front()->name;
    EXPECT_NE(shares.find("parameters"), std::string::npos);
    const auto back = tasks_of(s, TaskKind::prefetch, Stream::h2d);
    const std::int64_t partition = bytes_of(back, "updated parameters");
    EXPECT_GE(partition, 2 * psi / n);
    EXPECT_LE(partition, 2 * psi / n + 2 * 64);  // each parameter's share rounded up
    EXPECT_NEAR(host.front()->seconds, cpu_adam_seconds(partition / 2, a100().host), 1e-15);
    EXPECT_TRUE(host.front()->blocks_host);
  }
}

// The gradients' way to the host during the backward pass, per element of this rank's share
// (2 bytes in the 16-bit dtype): stages 1 and 2 copy an fp32 upcast (4 bytes) without blocking;
// stage 3 copies the partition to the host's buffer and back (2 + 2), then the fp32 gradient
// with a blocking copy that converts on the host (2), or with part_grads_async an fp32 upcast
// (4) that does not block.
TEST(OptimizerOffload, GradientsReachTheHostDuringBackward) {
  const auto trace = gpt_mixed();
  const Schedule before = baseline(trace);
  const int n = 2;
  Schedule two = before;
  apply_data_parallel(two, trace, offloaded(n, 2), a100());
  const auto d2h = tasks_of(two, TaskKind::offload, Stream::d2h);
  const std::int64_t share = bytes_of(d2h, "fp32 gradient to the host") / 4;
  const std::int64_t psi = parameters(trace);
  EXPECT_GE(share, psi / n);
  EXPECT_LE(share, psi / n + 64);
  for (const Task* t : d2h) EXPECT_FALSE(t->blocks_host) << t->name;

  for (bool async : {false, true}) {
    SCOPED_TRACE(async ? "part_grads_async" : "blocking");
    OptimizerOffloadSpec o;
    o.part_grads_async = async;
    Schedule three = before;
    apply_data_parallel(three, trace, offloaded(n, 3, o), a100());
    ASSERT_NO_THROW(three.validate());
    const auto out = tasks_of(three, TaskKind::offload, Stream::d2h);
    const auto in = tasks_of(three, TaskKind::prefetch, Stream::h2d);
    EXPECT_EQ(bytes_of(out, "gradient partition to the host buffer"), 2 * share);
    EXPECT_EQ(bytes_of(in, "gradient partition back on the GPU"), 2 * share);
    // The norm for the host step's clipping upcasts each partition to fp64 on the GPU (8 bytes
    // an element, every part here below the 250e6 elements of a part), with the copy back.
    std::int64_t fp64 = 0;
    for (const Task* t : in) {
      for (BufferId b : t->creates) {
        if (three.buffers[b].name.find("(fp64 upcast for the gradient norm)") != std::string::npos) {
          EXPECT_EQ(three.buffers[b].role, MemoryRole::temporary);
          fp64 += three.buffers[b].bytes;
        }
      }
    }
    EXPECT_EQ(fp64, 8 * share);
    EXPECT_EQ(bytes_of(out, "fp32 gradient to the host"), (async ? 4 : 2) * share);
    for (const Task* t : out) {
      if (t->name.rfind("fp32 gradient", 0) == 0) {
        EXPECT_EQ(t->blocks_host, !async) << t->name;
      }
    }
    // Every copy of a gradient comes before the step; the CPU step waits for the last one.
    const auto host = cpu_steps(three);
    ASSERT_FALSE(host.empty());
    // A blocking copy's conversion runs on the host: 2 + 4 bytes per element at its bandwidth.
    double conversion = 0;
    for (const Task* t : tasks_of(three, TaskKind::host_compute, Stream::host)) {
      if (t->name.rfind("fp32 conversion on the host", 0) == 0) conversion += t->seconds;
    }
    EXPECT_NEAR(conversion, async ? 0.0 : static_cast<double>(6 * share) / a100().host.memory_bandwidth, 1e-12);
    const TaskId first_step = static_cast<TaskId>(host.front() - three.tasks.data());
    for (TaskId t = first_step; t < three.tasks.size(); ++t) {
      EXPECT_EQ(three.tasks[t].name.find("gradient partition"), std::string::npos) << three.tasks[t].name;
    }
  }
}

// DeepSpeed's _constant_buffered_norm2 upcasts at most 250e6 elements at a time: a 65,536 x 4,096
// embedding (268,435,456 elements, one rank) has a 2e9-byte fp64 temporary, not 8 x 268e6.
TEST(OptimizerOffload, TheNormsFp64TemporaryIsAtMostOnePart) {
  zoo::ModelRequest request;
  request.model = "gpt2";
  request.layers = 1;
  request.hidden = 4096;
  request.heads = 32;
  request.vocab = 65536;
  request.seq_len = 64;
  request.precision = zoo::Precision::mixed;
  request.optimizer = zoo::Optimizer::adam;
  const auto trace = zoo::build_model(request);
  Schedule s = baseline(trace);
  apply_data_parallel(s, trace, offloaded(1, 3), a100());
  ASSERT_NO_THROW(s.validate());
  std::int64_t largest = 0;
  int upcasts = 0;
  for (const Buffer& b : s.buffers) {
    if (b.name.find("(fp64 upcast for the gradient norm)") == std::string::npos) continue;
    ++upcasts;
    largest = std::max(largest, b.bytes);
  }
  EXPECT_GT(upcasts, 1);
  EXPECT_EQ(largest, 8 * std::int64_t{250'000'000});
}

// ZeRO-3's subgroups (sub_group_size) and where each is stepped. With a subgroup per parameter
// (sub_group_size 1): Deep Optimizer States with k = 2 steps the odd subgroups on the GPU
// ((x + 1) % 2 == 0 and x % 2 != 0); k = 1 steps none there (the fork tests x % k == 0 first,
// which every x passes), nor does a k beyond the subgroups; k = 3 steps x = 2, 5, 8, ... there.
// Twin-Flow's ratio 0 steps all on the GPU, 0.5 the last half.
TEST(OptimizerOffload, SubgroupsGoWhereTheRulesSay) {
  const auto trace = gpt_mixed();
  const Schedule before = baseline(trace);
  const std::int64_t psi = parameters(trace);
  const auto run = [&](OptimizerOffloadSpec o) {
    Schedule s = before;
    DataParallelSpec spec = offloaded(1, 3, o);
    spec.sub_group_elements = 1;
    apply_data_parallel(s, trace, spec, a100());
    s.validate();
    return s;
  };
  const Schedule all_cpu = run({});
  const std::size_t subgroups = cpu_steps(all_cpu).size();
  // One subgroup a gradient: wte, wpe, 12 tensors in each of 2 layers, ln_f's 2.
  ASSERT_EQ(subgroups, 28u);
  EXPECT_TRUE(gpu_steps(all_cpu).empty());
  // One rank: the CPU steps every parameter; the seconds add up to the model's for Ψ.
  double cpu_seconds = 0;
  for (const Task* t : cpu_steps(all_cpu)) cpu_seconds += t->seconds;
  EXPECT_NEAR(cpu_seconds, static_cast<double>(psi) * 34 / a100().host.memory_bandwidth, 1e-12);

  const auto dos = [&](int k) {
    OptimizerOffloadSpec o;
    o.prefetch_optimizer = true;
    o.prefetch_optimizer_gap = k;
    return run(o);
  };
  const auto gpu_indices = [](const Schedule& s) {
    std::set<std::size_t> out;
    for (const Task* t : gpu_steps(s)) out.insert(std::stoul(t->name.substr(std::string("optimizer step on the GPU of subgroup ").size())));
    return out;
  };
  const std::vector<std::pair<int, std::size_t>> cases = {{1, 0}, {2, subgroups / 2}, {3, (subgroups + 1) / 3}, {static_cast<int>(subgroups) + 1, 0}};
  for (const auto& [k, on_gpu] : cases) {
    SCOPED_TRACE("k = " + std::to_string(k));
    const Schedule s = dos(k);
    const auto gpu = gpu_indices(s);
    EXPECT_EQ(gpu.size(), on_gpu);
    for (std::size_t x : gpu) {
      EXPECT_TRUE(x % k != 0 && (x + 1) % k == 0) << x;
    }
    EXPECT_EQ(cpu_steps(s).size(), subgroups - on_gpu);
    // Each GPU subgroup's 12 bytes of fp32 state per parameter go in and back out, but the
    // last subgroup's with k = 2: x = 27 is a GPU subgroup (27 % 2 = 1, 28 % 2 = 0) and no
    // x % 2 == 0 follows to send it back; it is one of ln_f's 768-element tensors. With k = 3
    // the last GPU subgroup is x = 26 and x = 27 (27 % 3 = 0) sends it back.
    const std::int64_t in = bytes_of(tasks_of(s, TaskKind::prefetch, Stream::h2d), "fp32 optimizer state");
    const std::int64_t out = bytes_of(tasks_of(s, TaskKind::offload, Stream::d2h), "fp32 optimizer state");
    EXPECT_EQ(in - out, k == 2 ? 12 * 768 : 0);
    EXPECT_EQ(in % 12, 0);
    EXPECT_EQ(on_gpu == 0, in == 0);
  }

  OptimizerOffloadSpec twin;
  twin.ratio = 0;
  const Schedule gpu_only = run(twin);
  EXPECT_TRUE(cpu_steps(gpu_only).empty());
  EXPECT_EQ(gpu_steps(gpu_only).size(), subgroups);
  // Their fp32 state and gradients stay on the GPU: 12 + 4 bytes per parameter.
  EXPECT_EQ(resident_bytes(gpu_only, MemoryRole::optimizer_state), 12 * psi);
  twin.ratio = 0.5;
  const Schedule half = run(twin);
  EXPECT_EQ(cpu_steps(half).size(), subgroups / 2);  // int(0.5 x subgroups)
  EXPECT_EQ(gpu_steps(half).size(), subgroups - subgroups / 2);
}

// Deep Optimizer States' GPU memory: the gradients of the GPU subgroups stay on the GPU from the
// backward pass until their step (the fork's prefetch_optimizer_gpu_fp32_grads), and each GPU
// subgroup brings its fp32 parameters, momentum and variance (12 bytes per parameter) and an fp32
// copy of its gradients (4) for its step.
TEST(OptimizerOffload, DeepOptimizerStatesKeepsTheGpuSubgroupsGradients) {
  const auto trace = gpt_mixed();
  Schedule s = baseline(trace);
  DataParallelSpec spec;
  spec.zero_stage = 3;
  spec.sub_group_elements = 1;
  OptimizerOffloadSpec o;
  o.prefetch_optimizer = true;
  o.prefetch_optimizer_gap = 2;
  spec.offload_optimizer = o;
  apply_data_parallel(s, trace, spec, a100());
  ASSERT_NO_THROW(s.validate());
  std::int64_t kept = 0;
  std::int64_t state = 0;
  std::int64_t fp32_gradients = 0;
  for (const Buffer& b : s.buffers) {
    if (b.name.find("kept on the GPU") != std::string::npos) kept += b.bytes;
    if (b.name.rfind("fp32 parameters, momentum and variance", 0) == 0) state += b.bytes;
    if (b.name.rfind("fp32 gradients of optimizer subgroup", 0) == 0) fp32_gradients += b.bytes;
  }
  // Parameters of the GPU subgroups, from their state copies.
  const std::int64_t on_gpu = bytes_of(tasks_of(s, TaskKind::prefetch, Stream::h2d), "fp32 optimizer state") / 12;
  ASSERT_GT(on_gpu, 0);
  EXPECT_EQ(kept, 2 * on_gpu);
  EXPECT_EQ(state, 12 * on_gpu);
  EXPECT_EQ(fp32_gradients, 4 * on_gpu);
  // Their gradients are not copied to the host in fp32: only the CPU subgroups' are.
  const std::int64_t psi = parameters(trace);
  EXPECT_EQ(bytes_of(tasks_of(s, TaskKind::offload, Stream::d2h), "fp32 gradient to the host"), 2 * (psi - on_gpu));
}

// What the fork's step leaves on the GPU for the next iteration (DataStates/DeepSpeed@4570a955
// stage3.py opt_transfers): the last GPU subgroup's fp32 parameters, momentum and variance and
// its fp32 gradient, when no subgroup x with x % k == 0 follows it. The 2-layer GPT-2 with one
// subgroup a gradient has 28 subgroups (wte, wpe, 2 x 12 layer tensors, ln_f's weight and bias)
// in the model's order; the last, x = 27, is one of ln_f's, 768 elements.
TEST(OptimizerOffload, DeepOptimizerStatesCarriesTheLastGpuSubgroupsState) {
  const auto trace = gpt_mixed();
  const Schedule before = baseline(trace);
  const auto dos = [&](int k) {
    Schedule s = before;
    DataParallelSpec spec = offloaded(1, 3);
    spec.sub_group_elements = 1;
    spec.offload_optimizer->prefetch_optimizer = true;
    spec.offload_optimizer->prefetch_optimizer_gap = k;
    apply_data_parallel(s, trace, spec, a100());
    s.validate();
    return s;
  };
  const auto find = [](const Schedule& s, std::string_view prefix) -> std::optional<BufferId> {
    for (BufferId b = 0; b < s.buffers.size(); ++b) {
      if (s.buffers[b].name.rfind(prefix, 0) == 0) return b;
    }
    return std::nullopt;
  };
  const auto holds = [](const std::vector<BufferId>& v, BufferId b) { return std::find(v.begin(), v.end(), b) != v.end(); };
  // k = 2: subgroups 1, 3, ..., 27 on the GPU; 27 is carried: 12·768 = 9,216 bytes of state and
  // 4·768 = 3,072 of gradient, 16·768 = 12,288 in all between iterations.
  {
    const Schedule s = dos(2);
    const auto state = find(s, "previous step's fp32 parameters, momentum and variance of optimizer subgroup 27");
    const auto gradient = find(s, "previous step's fp32 gradients of optimizer subgroup 27");
    ASSERT_TRUE(state && gradient);
    EXPECT_EQ(s.buffers[*state].bytes, 9'216);
    EXPECT_EQ(s.buffers[*gradient].bytes, 3'072);
    EXPECT_EQ(s.buffers[*state].role, MemoryRole::optimizer_state);
    EXPECT_EQ(s.buffers[*gradient].role, MemoryRole::gradient);
    // Allocated when the iteration's first task starts; last held by the copy in of the first
    // GPU subgroup's state (subgroup 1, wpe: 786,432 elements, another size: new tensors).
    EXPECT_TRUE(holds(s.tasks[0].creates, *state));
    EXPECT_TRUE(holds(s.tasks[0].creates, *gradient));
    std::vector<std::string> users;
    for (const Task& t : s.tasks) {
      if (holds(t.uses, *state) || holds(t.uses, *gradient)) users.push_back(t.name);
    }
    EXPECT_EQ(users, std::vector<std::string>{"fp32 optimizer state of subgroup 1 to the GPU"});
    const auto state1 = find(s, "fp32 parameters, momentum and variance of optimizer subgroup 1 on the GPU");
    ASSERT_TRUE(state1);
    EXPECT_EQ(s.buffers[*state1].bytes, 12 * 786'432);
    // This step's state and gradient of subgroup 27 are kept to the end of the iteration.
    const auto state27 = find(s, "fp32 parameters, momentum and variance of optimizer subgroup 27 on the GPU");
    const auto gradient27 = find(s, "fp32 gradients of optimizer subgroup 27 on the GPU");
    ASSERT_TRUE(state27 && gradient27);
    EXPECT_EQ(s.buffers[*state27].bytes, 9'216);
    EXPECT_EQ(s.buffers[*gradient27].bytes, 3'072);
    EXPECT_TRUE(s.buffers[*state27].held_to_end);
    EXPECT_TRUE(s.buffers[*gradient27].held_to_end);
    EXPECT_FALSE(s.buffers[*state1].held_to_end);
  }
  // k = 28: subgroup 27 is the only GPU subgroup: its state tensors are the previous step's,
  // reused (the same size), and kept; only its fp32 gradient is new (4·768 = 3,072 bytes).
  {
    const Schedule s = dos(28);
    const auto state = find(s, "previous step's fp32 parameters, momentum and variance of optimizer subgroup 27");
    const auto gradient = find(s, "previous step's fp32 gradients of optimizer subgroup 27");
    ASSERT_TRUE(state && gradient);
    EXPECT_FALSE(find(s, "fp32 parameters, momentum and variance of optimizer subgroup 27 on the GPU"));
    EXPECT_TRUE(s.buffers[*state].held_to_end);
    EXPECT_FALSE(s.buffers[*gradient].held_to_end);
    const auto gradient27 = find(s, "fp32 gradients of optimizer subgroup 27 on the GPU");
    ASSERT_TRUE(gradient27);
    EXPECT_EQ(s.buffers[*gradient27].bytes, 3'072);
    EXPECT_TRUE(s.buffers[*gradient27].held_to_end);
  }
  // k = 3: subgroup 27 (27 % 3 = 0) sends subgroup 26's state back: nothing is carried.
  {
    const Schedule s = dos(3);
    EXPECT_FALSE(find(s, "previous step's"));
    for (const Buffer& b : s.buffers) EXPECT_FALSE(b.held_to_end && b.name.find("optimizer subgroup") != std::string::npos) << b.name;
  }
}

// One rank, ZeRO-3 with CPU Adam: the bucket of all 2-layer GPT-2 gradients (53,561,088
// elements, 2 bytes each: DataParallel.ZeroStage3ConcatenatesEachBucketBeforeItsReduceScatter)
// is still concatenated (a world of 1, several tensors): a flat input of 2·53,561,088 =
// 107,122,176 bytes, held until the bucket's copies to the host are done; the next bucket's
// reduce-scatter waits for them (they share DeepSpeed's reduce_and_partition_stream).
TEST(OptimizerOffload, OneRankStillConcatenatesTheBucket) {
  const auto trace = gpt_mixed();
  const Schedule before = baseline(trace);
  const auto run = [&](std::int64_t bucket_elements) {
    Schedule s = before;
    DataParallelSpec spec = offloaded(1, 3);
    spec.reduce_bucket_elements = bucket_elements;
    apply_data_parallel(s, trace, spec, a100());
    s.validate();
    return s;
  };
  const auto flats = [](const Schedule& s) {
    std::vector<BufferId> out;
    for (BufferId b = 0; b < s.buffers.size(); ++b) {
      if (s.buffers[b].name.rfind("flat input of coalesced reduce-scatter", 0) == 0) out.push_back(b);
    }
    return out;
  };
  {
    const Schedule s = run(500'000'000);
    const auto f = flats(s);
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(s.buffers[f[0]].bytes, 107'122'176);
    EXPECT_EQ(s.buffers[f[0]].allocation_stream, AllocationStream::zero_reduce);
    // Its users: the bucket's copies (to the host, back, and the blocking fp32 copies), 3 a
    // gradient of the 28.
    int copies = 0;
    for (const Task& t : s.tasks) {
      if (std::find(t.uses.begin(), t.uses.end(), f[0]) == t.uses.end()) continue;
      EXPECT_TRUE(t.kind == TaskKind::offload || t.kind == TaskKind::prefetch) << t.name;
      ++copies;
    }
    EXPECT_EQ(copies, 3 * 28);
  }
  // One gradient a bucket: a world of 1 divides every tensor, each is reduced in place; each
  // reduce-scatter after the previous bucket's copies.
  {
    const Schedule s = run(1);
    EXPECT_TRUE(flats(s).empty());
    std::vector<TaskId> reductions;
    for (TaskId t = 0; t < s.tasks.size(); ++t) {
      if (s.tasks[t].collective == CollectiveKind::reduce_scatter) reductions.push_back(t);
    }
    ASSERT_EQ(reductions.size(), 28u);
    for (std::size_t i = 1; i < reductions.size(); ++i) {
      const Task& r = s.tasks[reductions[i]];
      const bool waits_for_a_copy = std::any_of(r.after.begin(), r.after.end(), [&](TaskId a) {
        return s.tasks[a].kind == TaskKind::offload || s.tasks[a].kind == TaskKind::prefetch;
      });
      EXPECT_TRUE(waits_for_a_copy) << r.name;
    }
  }
}

}  // namespace
}  // namespace comptrain::models

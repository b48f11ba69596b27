// The planner with the scenario's I/O (data loader, checkpoints: sim/io.hpp) and its energy budget
// (plan.energy_budget): a loader-bound plan point is `simulate`'s mean iteration at the same batch,
// a scenario without I/O sections plans as it did, the best batch respects the budget, a budget no
// batch meets is a result, and a budget that cannot be read exits with its line.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "comptrain/sim/metrics/iteration_energy.hpp"
#include "comptrain/sim/report/plan_report.hpp"
#include "comptrain/sim/report/simulate_report.hpp"
#include "comptrain/sim/studies/plan.hpp"
#include "comptrain/sim/run/run.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::sim {
namespace {

// ResNet-18 on one Polaris A100: fast enough to plan in a few seconds, with the node's storage.
const std::string kBase = R"(model: {zoo: resnet18}
training: {batch_size: 1}
platform: polaris
)";

// Two workers decoding 4 ms per sample feed at most 500 samples/s, below the GPU's rate at large
// batches (decode dominates: 110 KB from the 2 GB/s local SSD is 55 us per sample).
const std::string kLoader = "data: {bytes_per_sample: 110 KB, decode_per_sample: 4 ms, workers_per_gpu: 2, prefetch_factor: 2, from: local}\n";

PlanOptions quiet(PlanOptions o) {
  o.jobs = 2;
  o.progress = false;
  return o;
}

BatchSizePlan plan_of(const std::string& yaml) {
  const Scenario scenario = parse_scenario(yaml, "t.yaml", ".");
  return make_plan(scenario, strategies_to_plan(scenario), quiet(plan_options_for(scenario)));
}

// What `comptrain simulate` reports at `batch`: the run layer's replay and I/O simulation.
CompletedRun simulate_at(const std::string& yaml, std::int64_t batch) {
  Scenario scenario = parse_scenario(yaml, "t.yaml", ".");
  scenario.batch_size = batch;
  const PreparedScenario prepared(scenario);
  RunOutcome outcome = run_scenario(prepared, scenario.strategy, batch, Isolation::child_process);
  return std::get<CompletedRun>(std::move(outcome));
}

TEST(PlanIo, ALoaderBoundPointIsSimulatesMeanIteration) {
  const std::string yaml = kBase + kLoader + "plan: {max_batch: 64, strategies: [baseline]}\n";
  const BatchSizePlan plan = plan_of(yaml);
  ASSERT_TRUE(plan.io_modelled);
  const StrategyPlan& s = plan.strategies.front();
  ASSERT_TRUE(s.best_batch.has_value());
  int loader_bound = 0;
  for (const PlanPoint& p : s.points) {
    if (!p.fits) continue;
    ASSERT_TRUE(p.io_modelled) << p.batch;
    const CompletedRun run = simulate_at(yaml, p.batch);
    ASSERT_TRUE(run.io.has_value()) << p.batch;
    EXPECT_DOUBLE_EQ(p.iteration_seconds, run.result.iteration_seconds) << p.batch;
    EXPECT_DOUBLE_EQ(p.mean_iteration_seconds, run.io->mean_iteration_seconds) << p.batch;
    EXPECT_DOUBLE_EQ(p.samples_per_second, static_cast<double>(p.batch) / run.io->mean_iteration_seconds) << p.batch;
    EXPECT_EQ(p.io_bound, run.io->bound) << p.batch;
    EXPECT_DOUBLE_EQ(p.data_wait_seconds, run.io->data_wait_seconds) << p.batch;
    if (p.io_bound == IterationBound::loader) {
      ++loader_bound;
      EXPECT_GT(p.mean_iteration_seconds, p.iteration_seconds) << p.batch;
      // Two workers at 4 ms per sample: at most 500 samples/s (the decode also takes the read's time, so a little less).
      EXPECT_LE(p.samples_per_second, 500.0 * (1 + 1e-9)) << p.batch;
    }
  }
  EXPECT_GE(loader_bound, 3) << "the test wants loader-bound batches";
  // The best batch is the fastest over the mean iterations, and the plan says what binds it.
  for (const PlanPoint& p : s.points) EXPECT_LE(p.samples_per_second, s.best_samples_per_second) << p.batch;
  EXPECT_EQ(s.limit, PlanLimit::loader);

  // Without the loader the same GPU runs far faster at the largest batch: the I/O changed the plan
  // (738.5 against 493.2 samples/s on polaris, A100-40GB, with its fitted convolutions).
  const BatchSizePlan gpu_only = plan_of(kBase + "plan: {max_batch: 64, strategies: [baseline]}\n");
  EXPECT_GT(gpu_only.strategies.front().best_samples_per_second, 1.3 * s.best_samples_per_second);
  const std::string text = plan_table_text(plan);
  EXPECT_NE(text.find("loader-bound: baseline at batches"), std::string::npos) << text;
  EXPECT_NE(text.find("mean iter."), std::string::npos) << text;
  const nlohmann::json j = nlohmann::json::parse(plan_json(plan));
  EXPECT_TRUE(j["io_modelled"].get<bool>());
  bool any_loader = false;
  for (const auto& p : j["strategies"][0]["points"]) {
    if (!p["io"].is_null() && p["io"]["bound"] == "loader") any_loader = true;
  }
  EXPECT_TRUE(any_loader);
  EXPECT_NE(plan_csv(plan).find(",loader,"), std::string::npos);
}

TEST(PlanIo, WithoutDataOrCheckpointThePlanIsTheReplays) {
  const BatchSizePlan plan = plan_of(kBase + "plan: {max_batch: 32, strategies: [baseline, recompute]}\n");
  EXPECT_FALSE(plan.io_modelled);
  for (const StrategyPlan& s : plan.strategies) {
    double best = 0;
    std::optional<std::int64_t> best_batch;
    for (const PlanPoint& p : s.points) {
      EXPECT_FALSE(p.io_modelled);
      EXPECT_TRUE(p.within_energy_budget);
      EXPECT_EQ(p.mean_iteration_seconds, p.iteration_seconds) << p.batch;
      if (!p.fits) continue;
      // Bit for bit the old samples/s: batch / the replay's iteration.
      EXPECT_EQ(p.samples_per_second, static_cast<double>(p.batch) / p.iteration_seconds) << p.batch;
      if (!best_batch || p.samples_per_second > best) {
        best = p.samples_per_second;
        best_batch = p.batch;
      }
    }
    EXPECT_EQ(s.best_batch, best_batch) << s.strategy;
    EXPECT_NE(s.limit, PlanLimit::loader);
    if (s.vs_baseline) {
      const PlanPoint* mine = nullptr;
      const PlanPoint* theirs = nullptr;
      for (const PlanPoint& p : s.points) mine = p.batch == s.vs_baseline->batch ? &p : mine;
      for (const PlanPoint& p : plan.strategies.front().points) theirs = p.batch == s.vs_baseline->batch ? &p : theirs;
      ASSERT_TRUE(mine && theirs);
      EXPECT_EQ(s.vs_baseline->slowdown, mine->iteration_seconds / theirs->iteration_seconds);
    }
  }
  const std::string text = plan_table_text(plan);
  EXPECT_EQ(text.find("I/O"), std::string::npos) << text;
  EXPECT_EQ(text.find("mean iter."), std::string::npos) << text;
  const nlohmann::json j = nlohmann::json::parse(plan_json(plan));
  EXPECT_FALSE(j["io_modelled"].get<bool>());
  for (const auto& p : j["strategies"][0]["points"]) EXPECT_TRUE(p["io"].is_null());
}

TEST(PlanIo, TheCheckpointIntervalForATargetOverheadIsInThePlan) {
  const std::string yaml = kBase + "checkpoint: {every: 5, mode: sync, to: local}\nplan: {max_batch: 16, strategies: [baseline], checkpoint_overhead: 0.02}\n";
  const BatchSizePlan plan = plan_of(yaml);
  ASSERT_TRUE(plan.checkpoint_overhead.has_value());
  EXPECT_DOUBLE_EQ(*plan.checkpoint_overhead, 0.02);
  const StrategyPlan& s = plan.strategies.front();
  ASSERT_TRUE(s.best_batch.has_value());
  for (const PlanPoint& p : s.points) {
    if (!p.fits) continue;
    const CompletedRun run = simulate_at(yaml, p.batch);
    ASSERT_TRUE(run.io && run.io->checkpoint) << p.batch;
    const CheckpointResult& c = *run.io->checkpoint;
    EXPECT_DOUBLE_EQ(p.checkpoint_seconds_per_iteration, c.seconds_per_iteration) << p.batch;
    EXPECT_DOUBLE_EQ(p.checkpoint_stall_seconds, c.stall_seconds) << p.batch;
    ASSERT_TRUE(c.interval_for_target.has_value()) << p.batch;
    EXPECT_EQ(p.checkpoint_interval_for_target, *c.interval_for_target) << p.batch;
    EXPECT_GT(p.checkpoint_seconds_per_iteration, 0) << p.batch;
    EXPECT_DOUBLE_EQ(p.mean_iteration_seconds, run.io->mean_iteration_seconds) << p.batch;
  }
  const std::string text = plan_table_text(plan);
  EXPECT_NE(text.find("plan.checkpoint_overhead (2.00% of the iteration)"), std::string::npos) << text;
  const nlohmann::json j = nlohmann::json::parse(plan_json(plan));
  EXPECT_DOUBLE_EQ(j["options"]["checkpoint_overhead"].get<double>(), 0.02);
}

// The shipped cluster scenario reports memory, time, energy (its links included), the loader and
// the checkpoint in one report, and the energy over the mean iteration adds the I/O's.
TEST(PlanIo, TheShippedClusterScenarioReportsLoaderCheckpointAndEnergy) {
  const Scenario scenario = load_scenario_file(std::string(COMPTRAIN_TEST_DATA_DIR) + "/../../scenarios/resnet50-io-energy-2x8.yaml");
  const PreparedScenario prepared(scenario);
  const RunOutcome outcome = run_scenario(prepared, scenario.strategy, prepared.batch_size(), Isolation::child_process);
  const nlohmann::json j = nlohmann::json::parse(report(prepared, scenario.strategy, prepared.batch_size(), outcome, true));
  EXPECT_EQ(j["schema"]["version"], 6);
  const auto& r = j["results"];
  EXPECT_GT(r["memory"]["max_memory_reserved_bytes"].get<double>(), 0);
  EXPECT_GT(r["iteration_seconds"].get<double>(), 0);
  ASSERT_FALSE(r["io"].is_null());
  EXPECT_EQ(r["io"]["bound"], "loader");
  ASSERT_FALSE(r["io"]["checkpoint"].is_null());
  EXPECT_GT(r["io"]["checkpoint"]["stall_seconds"].get<double>(), 0);
  ASSERT_FALSE(r["energy"].is_null());
  EXPECT_FALSE(r["energy"]["node"]["link_joules"].is_null()) << "the DGX platform's NICs and NVSwitch ports draw power";
  const auto& with_io = r["energy"]["with_io"];
  ASSERT_FALSE(with_io.is_null());
  EXPECT_DOUBLE_EQ(with_io["mean_iteration_seconds"].get<double>(), r["io"]["mean_iteration_seconds"].get<double>());
  EXPECT_GT(with_io["total_joules"].get<double>(), r["energy"]["total_joules"].get<double>());
  const std::string text = report(prepared, scenario.strategy, prepared.batch_size(), outcome, false);
  for (const char* section : {"peak memory", "with I/O", "Energy per iteration", "Data loading and checkpoints", "stall per checkpoint"}) {
    EXPECT_NE(text.find(section), std::string::npos) << section;
  }
}

// The mean iteration's energy: the replay's, the wait at the job's waiting power, the decode on
// the host's cores (sim/io_energy.hpp), by hand.
TEST(PlanIo, TheMeanIterationsEnergyAddsTheWaitAndTheDecode) {
  EnergyResult e;
  e.seconds = 2;
  e.nodes = 2;
  e.gpus_per_node = 4;
  e.host_modelled = true;
  e.gpu_in_job_watts = 50;
  e.gpu_joules = 600;
  e.node_gpu_joules = 2400;
  e.node_host_joules = 200;
  e.node_link_joules = 40;
  e.network_joules = 10;
  e.total_joules = 2 * 2640 + 10;
  e.node_waiting_watts = 4 * 50 + 100 + 20;  // GPUs in-job, host idle, links idle
  e.network_waiting_watts = 5;
  models::Platform platform = models::builtin_platform("a100-40gb");
  platform.host.cores = 10;
  platform.host.idle_power = 100;
  platform.host.max_power = 300;  // 20 W per busy core
  IoResult io;
  io.data_loader = true;
  io.gpu_iteration_seconds = 2;
  io.mean_iteration_seconds = 2.5;  // 0.5 s of waits
  io.batch_decode_seconds = 1.5;    // one core-second and a half per GPU and iteration

  const IterationEnergy none = iteration_energy(e, nullptr, platform);
  EXPECT_DOUBLE_EQ(none.total_joules, e.total_joules);
  EXPECT_DOUBLE_EQ(none.seconds, 2);

  const IterationEnergy w = iteration_energy(e, &io, platform);
  EXPECT_DOUBLE_EQ(w.seconds, 2.5);
  EXPECT_DOUBLE_EQ(w.waiting_joules, 0.5 * (2 * 320 + 5));
  EXPECT_DOUBLE_EQ(w.decode_joules, 2 * 4 * 1.5 * 20);
  EXPECT_DOUBLE_EQ(w.total_joules, e.total_joules + 0.5 * 645 + 240);
  EXPECT_DOUBLE_EQ(w.gpu_joules, 600 + 0.5 * 50);
  EXPECT_DOUBLE_EQ(w.node_joules, 2640 + 0.5 * 320 + 120);
  EXPECT_DOUBLE_EQ(w.node_average_watts(), (2640 + 160 + 120) / 2.5);
}

// plan.energy_budget: the best batch is the fastest among the points within it; a budget no point
// meets is a result.
TEST(PlanEnergyBudget, TheBestBatchIsTheFastestWithinTheBudget) {
  const BatchSizePlan unbounded = plan_of(kBase + "plan: {max_batch: 64, strategies: [baseline]}\n");
  const StrategyPlan& u = unbounded.strategies.front();
  ASSERT_TRUE(u.best_batch.has_value());
  // Small batches leave the GPU waiting for launches at its in-job power: the fastest batch draws
  // the most average power, and the most efficient one has the fewest joules per sample.
  double least_watts = 0, least_joules = 0, most_joules = 0, best_watts = 0;
  for (const PlanPoint& p : u.points) {
    if (!p.fits) continue;
    ASSERT_GT(p.samples_per_joule, 0) << p.batch;
    const double j = 1 / p.samples_per_joule;
    least_joules = least_joules == 0 ? j : std::min(least_joules, j);
    most_joules = std::max(most_joules, j);
    least_watts = least_watts == 0 ? p.gpu_average_watts : std::min(least_watts, p.gpu_average_watts);
    if (p.batch == *u.best_batch) best_watts = p.gpu_average_watts;
  }
  ASSERT_GT(best_watts, least_watts);
  ASSERT_LT(least_joules, most_joules);
  // The fastest among the points within every bound, by brute force over the simulated points.
  const auto check = [](const StrategyPlan& b, const std::function<bool(const PlanPoint&)>& within) {
    std::optional<std::int64_t> expected;
    double fastest = 0;
    for (const PlanPoint& p : b.points) {
      if (!p.fits) continue;
      EXPECT_EQ(p.within_energy_budget, within(p)) << p.batch;
      if (within(p) && (!expected || p.samples_per_second > fastest)) {
        expected = p.batch;
        fastest = p.samples_per_second;
      }
    }
    EXPECT_EQ(b.best_batch, expected);
  };

  // A GPU power budget below what the fastest batch draws moves the best batch.
  const double watts = (least_watts + best_watts) / 2;
  const BatchSizePlan by_power =
      plan_of(kBase + fmt::format("plan: {{max_batch: 64, strategies: [baseline], energy_budget: {{gpu_average_power: {} W}}}}\n", watts));
  const StrategyPlan& w = by_power.strategies.front();
  ASSERT_TRUE(w.best_batch.has_value());
  check(w, [&](const PlanPoint& p) { return p.gpu_average_watts <= watts; });
  EXPECT_NE(*w.best_batch, *u.best_batch);
  EXPECT_LT(w.best_samples_per_second, u.best_samples_per_second);

  // A joules-per-sample budget between the least and the most any point draws.
  const double joules = (least_joules + most_joules) / 2;
  const BatchSizePlan by_energy =
      plan_of(kBase + fmt::format("plan: {{max_batch: 64, strategies: [baseline], energy_budget: {{joules_per_sample: {} J}}}}\n", joules));
  const StrategyPlan& e = by_energy.strategies.front();
  ASSERT_TRUE(e.best_batch.has_value());
  check(e, [&](const PlanPoint& p) { return 1 / p.samples_per_joule <= joules; });
  EXPECT_LE(1 / e.best_samples_per_joule, joules);

  // A node power budget below anything the node draws: infeasible, reported, not thrown.
  const BatchSizePlan none = plan_of(kBase + "plan: {max_batch: 64, strategies: [baseline], energy_budget: {node_average_power: 10 W}}\n");
  const StrategyPlan& n = none.strategies.front();
  EXPECT_TRUE(n.max_batch.has_value());
  EXPECT_FALSE(n.best_batch.has_value());
  EXPECT_EQ(n.limit, PlanLimit::energy_budget);
  const std::string text = plan_table_text(none);
  EXPECT_NE(text.find("none within the energy budget"), std::string::npos) << text;
  EXPECT_NE(text.find("infeasible"), std::string::npos) << text;
  const nlohmann::json j = nlohmann::json::parse(plan_json(none));
  EXPECT_TRUE(j["strategies"][0]["best_batch"].is_null());
  EXPECT_EQ(j["strategies"][0]["limit"], "energy_budget");
  EXPECT_DOUBLE_EQ(j["options"]["energy_budget"]["node_average_watts"].get<double>(), 10.0);
}

TEST(PlanEnergyBudget, AClusterSearchChoosesAConfigurationWithinTheBudget) {
  // One node of Polaris, 1 or 4 GPUs under DDP: a per-node power budget above what the one-GPU
  // node draws at its best micro-batch and below what the four-GPU node draws at any leaves only
  // the one-GPU configuration.
  const std::string base = R"(model: {zoo: resnet18}
training: {batch_size: 8}
platform: polaris
parallelism: {nodes: 1, gpus_per_node: 4}
)";
  const BatchSizePlan free = plan_of(base + "plan: {gpus: [1, 4], max_batch: 16, strategies: [baseline]}\n");
  ASSERT_TRUE(free.cluster_search && free.cluster_search->fastest);
  const auto& candidates = free.cluster_search->candidates;
  ASSERT_EQ(candidates.size(), 2U);
  EXPECT_EQ(candidates[*free.cluster_search->fastest].shape.ranks(), 4);
  double one_node_watts = 0, four_node_watts = 0;  // the one-GPU node at its best; the least of the four-GPU node's
  for (const auto& c : candidates) {
    for (const PlanPoint& p : c.plan.points) {
      if (!p.fits) continue;
      if (c.shape.ranks() == 1 && p.batch == *c.plan.best_batch) one_node_watts = p.node_average_watts;
      if (c.shape.ranks() == 4) four_node_watts = four_node_watts == 0 ? p.node_average_watts : std::min(four_node_watts, p.node_average_watts);
    }
  }
  ASSERT_GT(one_node_watts, 0);
  ASSERT_GT(four_node_watts, one_node_watts);
  const double budget = (one_node_watts + four_node_watts) / 2;
  const BatchSizePlan bounded =
      plan_of(base + fmt::format("plan: {{gpus: [1, 4], max_batch: 16, strategies: [baseline], energy_budget: {{node_average_power: {} W}}}}\n", budget));
  ASSERT_TRUE(bounded.cluster_search && bounded.cluster_search->fastest);
  const ClusterCandidate& fastest = bounded.cluster_search->candidates[*bounded.cluster_search->fastest];
  EXPECT_EQ(fastest.shape.ranks(), 1);
  for (const auto& c : bounded.cluster_search->candidates) {
    if (c.shape.ranks() == 4) {
      // Every micro-batch of four GPUs draws more than the budget per node.
      EXPECT_FALSE(c.plan.best_batch.has_value());
      EXPECT_EQ(c.plan.limit, PlanLimit::energy_budget);
    }
  }
}

TEST(PlanEnergyBudget, ABudgetThatCannotBeReadNamesItsLine) {
  const auto error_of = [](const std::string& plan) {
    try {
      parse_scenario(kBase + plan, "budget.yaml", ".");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(error_of("plan:\n  energy_budget: {}\n").find("budget.yaml:5"), std::string::npos) << error_of("plan:\n  energy_budget: {}\n");
  EXPECT_NE(error_of("plan:\n  energy_budget: {joules: 1 J}\n").find("budget.yaml:5"), std::string::npos);
  EXPECT_NE(error_of("plan:\n  energy_budget: {joules_per_sample: 2}\n").find("needs a unit"), std::string::npos)
      << error_of("plan:\n  energy_budget: {joules_per_sample: 2}\n");
  EXPECT_NE(error_of("plan:\n  energy_budget: {joules_per_sample: 2 W}\n").find("unknown unit"), std::string::npos);
  EXPECT_NE(error_of("plan:\n  energy_budget: {node_average_power: -5 W}\n").find("budget.yaml:5"), std::string::npos);
  EXPECT_NE(error_of("plan:\n  energy_budget: {gpu_average_power: 0 W}\n").find("budget.yaml:5"), std::string::npos);
  EXPECT_NE(error_of("plan:\n  energy_budget: 3 J\n").find("budget.yaml:5"), std::string::npos);
  EXPECT_EQ(error_of("plan:\n  energy_budget: {joules_per_sample: 0.5 kJ, node_average_power: 3 kW}\n"), "accepted");
  // A platform without GPU power: no energy to hold against the budget.
  const std::string unpowered = R"(model: {zoo: resnet18}
platform:
  name: bare
  gpu: {name: g, memory: 16 GiB, memory_bandwidth: 900 GB/s, peak: {fp32: 15 TFLOP/s, tf32: 0, fp16: 120 TFLOP/s, bf16: 0}, launch_overhead: 5 us}
  host: {name: h, cores: 8, flops: 1 TFLOP/s, memory: 64 GiB, memory_bandwidth: 100 GB/s}
  host_link: {name: l, bandwidth: 12 GB/s, latency: 1 us}
plan: {energy_budget: {joules_per_sample: 1 J}}
)";
  try {
    parse_scenario(unpowered, "bare.yaml", ".");
    FAIL() << "a budget on a platform without power was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bare.yaml:7"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("gpu.power"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace comptrain::sim

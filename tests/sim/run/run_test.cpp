// The run layer: a scenario prepared once gives the trace, the schedule and the replay at any
// batch; the batch size has one home; a strategy that does not apply is a result.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <variant>

#include "comptrain/sim/engine/io_simulation.hpp"
#include "comptrain/sim/report/simulate_report.hpp"
#include "comptrain/sim/run/run.hpp"
#include "comptrain/sim/runtime/workers.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/traces/trace_json.hpp"
#include "comptrain/zoo/zoo.hpp"

namespace comptrain::sim {
namespace {

Scenario scenario(const std::string& yaml) { return parse_scenario(yaml, "s.yaml", COMPTRAIN_TEST_DATA_DIR); }

TEST(Run, TheBatchSizeHasOneHome) {
  const PreparedScenario zoo_default(scenario("model: {zoo: resnet18}\nplatform: a100-40gb\n"));
  EXPECT_EQ(zoo_default.batch_size(), 1);
  Scenario s = scenario("model: {zoo: resnet18}\ntraining: {batch_size: 8}\nplatform: a100-40gb\n");
  EXPECT_EQ(*s.batch_size, 8);
  s.batch_size = 3;  // an override writes one field
  const PreparedScenario prepared(s);
  EXPECT_EQ(prepared.batch_size(), 3);
  EXPECT_EQ(prepared.trace_at(prepared.batch_size()).batch_size(), 3);
  EXPECT_EQ(build_trace(s).batch_size(), 3);
}

TEST(Run, AZooTraceAtAnyBatchIsTheZoosModelAtThatBatch) {
  const PreparedScenario prepared(scenario("model: {zoo: resnet18}\ntraining: {batch_size: 2, optimizer: adam}\nplatform: a100-40gb\n"));
  zoo::ModelRequest request;
  request.model = "resnet18";
  request.optimizer = zoo::Optimizer::adam;
  request.batch_size = 5;
  const traces::Trace expected = zoo::build_model(request);
  const traces::Trace got = prepared.trace_at(5);
  EXPECT_EQ(got.batch_size(), 5);
  EXPECT_EQ(traces::trace_to_json(got), traces::trace_to_json(expected));
}

TEST(Run, ATraceFileIsReadOnceAndRescaledExactly) {
  const std::string file = std::string(COMPTRAIN_TEST_DATA_DIR) + "/traces/tiny_values.json";
  const PreparedScenario prepared(scenario("model: {trace: traces/tiny_values.json}\nplatform: a100-40gb\n"));
  const traces::Trace original = traces::read_trace_file(file);
  EXPECT_EQ(prepared.batch_size(), original.batch_size());
  EXPECT_EQ(traces::trace_to_json(prepared.trace_at(7)), traces::trace_to_json(original.rescaled(7)));
  EXPECT_EQ(traces::trace_to_json(prepared.trace_at(original.batch_size())), traces::trace_to_json(original));
}

TEST(Run, ScenariosThatCannotRunAreInputErrorsAtPreparation) {
  EXPECT_THROW(PreparedScenario(scenario("model: {zoo: resnet18}\n")), InputError);  // no platform
  Scenario bad = scenario("model: {zoo: resnet18}\nplatform: a100-40gb\nstrategy: offload\n");
  std::get<models::OffloadAction>(bad.strategy.rules[0].action).lookahead = -1;  // past the reader
  try {
    PreparedScenario prepared(bad);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "s.yaml:3:11: strategy: offload lookahead must be >= 0");
  }
}

// The message of the InputError preparing `s` throws, or "no error".
std::string preparation_error(const Scenario& s) {
  try {
    PreparedScenario prepared(s);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

// What is checked against the platform when the scenario is prepared (the platform may have come
// from --platform since it was read) names the line of the key that is wrong (shared/defects-2/21:
// "s.yaml: parallelism: 141 node(s) ...", "s.yaml: data.from: ..." named no line).
TEST(Run, PlatformChecksAtPreparationNameTheKeysLine) {
  const std::string head = "model: {zoo: resnet18}\ntraining: {batch_size: 2}\n";
  EXPECT_THAT(preparation_error(scenario(head + "platform: dgx-a100-superpod\nparallelism: {nodes: 141, gpus_per_node: 8}\n")),
              ::testing::StartsWith("s.yaml:4:22: parallelism.nodes: 141 node(s) on platform 'dgx-a100-superpod'"));
  // gpus_per_node within the scenario's platform, beyond the one that replaced it.
  Scenario replaced = scenario(head + "platform: dgx-a100-superpod\nparallelism:\n  nodes: 1\n  gpus_per_node: 8\n");
  set_platform(replaced, models::builtin_platform("perlmutter-gpu"));  // 4 GPUs per node
  EXPECT_THAT(preparation_error(replaced), ::testing::StartsWith("s.yaml:6:18: parallelism.gpus_per_node: 8 GPUs per node on platform 'perlmutter-gpu'"));
  EXPECT_THAT(preparation_error(scenario(head + "platform: perlmutter-gpu\ndata: {bytes_per_sample: 110 KB, decode_per_sample: 4 ms, from: local}\n")),
              ::testing::StartsWith("s.yaml:4:65: data.from: the platform 'perlmutter-gpu' has no storage.local; expected"));
  EXPECT_THAT(preparation_error(scenario(head + "platform: perlmutter-gpu\ncheckpoint:\n  every: 10\n  to: local\n")),
              ::testing::StartsWith("s.yaml:6:7: checkpoint.to: the platform 'perlmutter-gpu' has no storage.local"));
  // A key not given: the section's position. A sync checkpoint (the default mode) needs the
  // host's torch.save rate.
  Scenario no_rate = scenario(head + "platform: perlmutter-gpu\ncheckpoint: {every: 10}\n");
  no_rate.platform->host.torch_save_bandwidth = 0;
  EXPECT_THAT(preparation_error(no_rate), ::testing::StartsWith("s.yaml:4:13: checkpoint.mode: sync: the platform 'perlmutter-gpu' has no host.torch_save_bandwidth"));
}

TEST(Run, AStrategyThatDoesNotApplyIsAResult) {
  const PreparedScenario prepared(scenario(
      "model: {zoo: resnet18}\ntraining: {batch_size: 2}\nplatform: a100-40gb\n"
      "strategy: {name: tight, rules: [{recompute: {mode: budget, budget: 1 KiB}}]}\n"));
  const RunOutcome outcome = run_scenario(prepared, prepared.scenario().strategy, 2, Isolation::child_process);
  ASSERT_TRUE(std::holds_alternative<models::NotApplicable>(outcome));
  const std::string json = report(prepared, prepared.scenario().strategy, 2, outcome, true);
  EXPECT_NE(json.find("\"not_applicable\": \"strategy rule 0: recompute budget of 1024 bytes"), std::string::npos) << json;
  EXPECT_NE(report(prepared, prepared.scenario().strategy, 2, outcome, false).find("DOES NOT APPLY at batch 2"), std::string::npos);
}

// framework.optimizer_ops_per_parameter and host_syncs in the replay: the loop's launch gaps
// lengthen the step on the GPU; the sync before the step then makes the GPU wait for the
// launching thread, which issues the loop's ops one Python op at a time.
TEST(Run, AnOptimizerLoopAndAHostSyncBeforeTheStepSlowTheIteration) {
  const std::string base = "model: {zoo: bert-base, layers: 2}\ntraining: {batch_size: 2, optimizer: adam, optimizer_impl: for-loop}\nplatform: a100-80gb\n";
  const auto run = [&](const std::string& framework) {
    const PreparedScenario prepared(scenario(base + framework));
    const RunOutcome outcome = run_scenario(prepared, prepared.scenario().strategy, 2, Isolation::child_process);
    return std::get<CompletedRun>(outcome);
  };
  const CompletedRun plain = run("");
  const CompletedRun loop = run("framework: {optimizer_ops_per_parameter: 18}\n");
  const CompletedRun synced = run("framework: {optimizer_ops_per_parameter: 18, host_syncs: [backward_end]}\n");
  std::size_t steps = 0;
  for (const traces::Op& op : plain.scheduled.trace.ops()) steps += op.phase == traces::Phase::optimizer ? 1 : 0;
  ASSERT_GT(steps, 0u);
  const PreparedScenario prepared(scenario(base));
  const double gaps = static_cast<double>(steps) * 17 * prepared.platform().gpu.launch_overhead;
  EXPECT_GE(loop.result.iteration_seconds - plain.result.iteration_seconds, 0.99 * gaps);
  EXPECT_GT(synced.result.iteration_seconds, loop.result.iteration_seconds);
  EXPECT_GT(synced.result.host_wait_seconds, loop.result.host_wait_seconds);
  // The sync's task blocks the launching thread.
  const auto& tasks = synced.scheduled.schedule.tasks;
  EXPECT_EQ(std::count_if(tasks.begin(), tasks.end(), [](const models::Task& t) { return t.blocks_host; }), 1);
}

// framework.compile in the replay: Inductor's fused kernels shorten the iteration (fewer bytes
// and launches), leave the memory as eager's, and the report says what was compiled.
TEST(Run, TorchCompileFusesAndSaysSo) {
  const std::string base = "model: {zoo: bert-base, layers: 2}\ntraining: {batch_size: 2}\nplatform: a100-80gb\n";
  const PreparedScenario eager(scenario(base));
  const PreparedScenario compiled(scenario(base + "framework: {compile: true}\n"));
  const RunOutcome a = run_scenario(eager, eager.scenario().strategy, 2, Isolation::child_process);
  const RunOutcome b = run_scenario(compiled, compiled.scenario().strategy, 2, Isolation::child_process);
  const CompletedRun& e = std::get<CompletedRun>(a);
  const CompletedRun& c = std::get<CompletedRun>(b);
  EXPECT_LT(c.result.iteration_seconds, e.result.iteration_seconds);
  EXPECT_EQ(c.result.peak_bytes, e.result.peak_bytes);
  const std::string text = report(compiled, compiled.scenario().strategy, 2, b, false);
  EXPECT_NE(text.find("Compile    torch.compile (Inductor) over the whole model: "), std::string::npos) << text;
  EXPECT_EQ(report(eager, eager.scenario().strategy, 2, a, false).find("Compile    "), std::string::npos);
  EXPECT_NE(report(compiled, compiled.scenario().strategy, 2, b, true).find("\"fused_kernels\": "), std::string::npos);
}

// training.float8 in the replay: the linears' GEMMs on FP8 tensor cores shorten a GEMM-bound
// iteration despite their casts (hidden 4096; at GPT-2's 768 the casts cost more than the GEMMs
// gain, as torchao's float8 README says of small shapes), the memory stays 16-bit, and the
// report counts the linears.
TEST(Run, Float8LinearsShortenTheIterationAndSaySo) {
  const std::string base = "model: {zoo: gpt2, layers: 2, hidden: 4096, heads: 32}\nplatform: h100-80gb\nframework: {compile: true}\n";
  const PreparedScenario bf16(scenario(base + "training: {batch_size: 4, precision: mixed}\n"));
  const PreparedScenario float8(scenario(base + "training: {batch_size: 4, precision: mixed, float8: {skip: [lm_head]}}\n"));
  const RunOutcome a = run_scenario(bf16, bf16.scenario().strategy, 4, Isolation::child_process);
  const RunOutcome b = run_scenario(float8, float8.scenario().strategy, 4, Isolation::child_process);
  const CompletedRun& e = std::get<CompletedRun>(a);
  const CompletedRun& f = std::get<CompletedRun>(b);
  EXPECT_LT(f.result.iteration_seconds, e.result.iteration_seconds);
  EXPECT_EQ(f.result.peak_bytes, e.result.peak_bytes);
  const std::string text = report(float8, float8.scenario().strategy, 4, b, false);
  EXPECT_NE(text.find("Float8     torchao float8 training, tensorwise scaling: "), std::string::npos) << text;
  EXPECT_NE(text.find("(skipped: lm_head)"), std::string::npos) << text;
  EXPECT_EQ(report(bf16, bf16.scenario().strategy, 4, a, false).find("Float8     "), std::string::npos);
  EXPECT_NE(report(float8, float8.scenario().strategy, 4, b, true).find("\"linear_ops\": "), std::string::npos);
}

// Transformer Engine's delayed scaling runs eager (no compile) and recasts the weights once per
// optimizer step: a step of four micro-steps costs less than four steps of one; the report names
// the recipe, text and JSON.
TEST(Run, Float8DelayedScalingCastsTheWeightsOncePerStepAndSaysSo) {
  const std::string base = "model: {zoo: gpt2, layers: 2, hidden: 4096, heads: 32}\nplatform: h100-80gb\n";
  const auto seconds = [&](const std::string& training) {
    const PreparedScenario prepared(scenario(base + "training: {batch_size: 4, precision: mixed" + training + "}\n"));
    const RunOutcome outcome = run_scenario(prepared, prepared.scenario().strategy, 4, Isolation::child_process);
    return std::get<CompletedRun>(outcome).result.iteration_seconds;
  };
  const std::string delayed = ", float8: {recipe: delayed, skip: [lm_head]}";
  // What float8 saves over 16 bits: per micro-step, but for the weights' casts, three of which a
  // step of four micro-steps does not make.
  const auto saving = [&](const std::string& steps) { return seconds(steps) - seconds(delayed + steps); };
  EXPECT_GT(saving(""), 0);
  EXPECT_GT(saving(", gradient_accumulation_steps: 4"), 4 * saving("") * 1.001);
  const PreparedScenario prepared(scenario(base + "training: {batch_size: 4, precision: mixed" + delayed + "}\n"));
  const RunOutcome outcome = run_scenario(prepared, prepared.scenario().strategy, 4, Isolation::child_process);
  const std::string text = report(prepared, prepared.scenario().strategy, 4, outcome, false);
  EXPECT_NE(text.find("Float8     Transformer Engine's delayed scaling: "), std::string::npos) << text;
  EXPECT_NE(report(prepared, prepared.scenario().strategy, 4, outcome, true).find("\"recipe\": \"delayed\""), std::string::npos);
  // Its memory (models/float8_memory.hpp): GPT-2's four linears a layer each save an FP8 copy of
  // their input (the two norms' outputs, the attention's output, GELU's) and keep an FP8
  // workspace of their weight, counted in the trace; the weights' workspaces (2 x 12h² bytes a
  // layer) outweigh the copies' saving in this short model.
  EXPECT_NE(text.find("8 FP8 copies of saved inputs and 8 FP8 weight workspaces"), std::string::npos) << text;
  const PreparedScenario bf16(scenario(base + "training: {batch_size: 4, precision: mixed}\n"));
  const auto peak = [](const RunOutcome& run) { return std::get<CompletedRun>(run).result.device.peak_reserved; };
  EXPECT_GT(peak(outcome), peak(run_scenario(bf16, bf16.scenario().strategy, 4, Isolation::child_process)));
}

TEST(Run, OneRunInAChildEqualsTheSameRunInPlace) {
  const PreparedScenario prepared(scenario("model: {zoo: resnet18}\ntraining: {batch_size: 2}\nplatform: a100-40gb\nstrategy: offload\n"));
  const auto scheduled = std::get<ScheduledRun>(schedule_run(prepared, prepared.scenario().strategy, 2));
  const SimulationResult child = replay(prepared, scheduled, Isolation::child_process);
  const RunOutcome again = run_scenario(prepared, prepared.scenario().strategy, 2, Isolation::child_process);
  const auto& completed = std::get<CompletedRun>(again);
  EXPECT_EQ(child.peak_bytes, completed.result.peak_bytes);
  EXPECT_EQ(child.iteration_seconds, completed.result.iteration_seconds);
  EXPECT_EQ(report_json(simulation_run(prepared, completed)), report(prepared, prepared.scenario().strategy, 2, again, true));
}

// A worker that is itself a child (sweeps, calibration) runs a scenario in place; with a data
// section the replay and the I/O simulation must not share that process's one SimGrid engine
// (a second engine in a child forked after the first aborted). In place gives what a child does.
TEST(Run, AScenarioWithADataSectionRunsInPlaceAsInAChild) {
  const PreparedScenario prepared(scenario("model: {zoo: resnet18}\ntraining: {batch_size: 8}\nplatform: a100-80gb\n"
                                           "data: {bytes_per_sample: 110 KB, decode_per_sample: 50 ms, from: local}\n"));
  ChildProcess worker([&prepared] {
    const RunOutcome outcome = run_scenario(prepared, prepared.scenario().strategy, 8, Isolation::this_process);
    const auto& completed = std::get<CompletedRun>(outcome);
    return completed.io ? wire::encode(*completed.io) : std::string("no io");
  });
  const IoResult in_place = wire::decode<IoResult>(std::move(worker.wait()).result_or_throw());
  const RunOutcome in_child = run_scenario(prepared, prepared.scenario().strategy, 8, Isolation::child_process);
  const auto& completed = std::get<CompletedRun>(in_child);
  ASSERT_TRUE(completed.io.has_value());
  EXPECT_EQ(in_place.bound, IterationBound::loader);
  EXPECT_EQ(in_place.mean_iteration_seconds, completed.io->mean_iteration_seconds);
}

// Eager PyTorch launches every kernel from one CPU thread (the launching thread). The model's own
// prediction of where a run turns CPU-bound: the batch below which the launcher's CPU time
// exceeds the compute stream's GPU time. Below it the replayed iteration must follow the CPU
// (the GPU waits for launches), above it the GPU (the launcher runs ahead).
TEST(Run, TheIterationIsCpuBoundBelowTheBatchWhereGpuWorkOvertakesTheLaunches) {
  // A small GPT on an A100 whose host launches 4x slower than the shipped assumption (a slow
  // host CPU, or Python-heavy model code): small batches must come out CPU-bound.
  Scenario s = scenario("model: {zoo: gpt, layers: 2, hidden: 256, heads: 4, seq_len: 64, vocab: 512}\nplatform: a100-40gb\n");
  models::OpDispatch& dispatch = s.platform->host.dispatch;
  ASSERT_GT(dispatch.forward, 0) << "a100-40gb must give host.dispatch";
  dispatch.forward *= 4;
  dispatch.backward *= 4;
  dispatch.optimizer *= 4;
  const PreparedScenario prepared(std::move(s));
  int cpu_bound = 0;
  int gpu_bound = 0;
  std::int64_t predicted = 0;  // the first batch whose GPU time reaches its CPU time
  for (std::int64_t batch = 1; batch <= 256; batch *= 2) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const auto scheduled = std::get<ScheduledRun>(schedule_run(prepared, prepared.scenario().strategy, batch));
    double cpu = 0;
    double gpu = 0;
    for (const models::Task& task : scheduled.schedule.tasks) {
      cpu += task.host_seconds;
      if (task.stream == models::Stream::compute) gpu += task.seconds;
    }
    if (predicted == 0 && gpu >= cpu) predicted = batch;
    const SimulationResult r = replay(prepared, scheduled, Isolation::child_process);
    // Neither the CPU nor the GPU can finish early.
    EXPECT_GE(r.iteration_seconds, std::max(cpu, gpu) * (1 - 1e-9));
    if (batch < predicted || predicted == 0) {
      // Below the predicted batch the launches set the pace: the iteration is the CPU's time
      // plus the last kernels it launched, and the GPU spends much of it waiting.
      ++cpu_bound;
      EXPECT_LT(r.iteration_seconds, cpu * 1.25);
      EXPECT_GT(r.host_wait_seconds, 0.25 * r.iteration_seconds) << "the GPU waits for launches";
    } else if (gpu > 2 * cpu) {
      ++gpu_bound;
      EXPECT_LT(r.iteration_seconds, gpu * 1.05) << "GPU-bound: launches run ahead";
      EXPECT_LT(r.host_wait_seconds, 0.1 * r.iteration_seconds);
    }
  }
  EXPECT_GT(predicted, 1) << "CPU-bound at batch 1";
  EXPECT_GT(cpu_bound, 0);
  EXPECT_GT(gpu_bound, 0);
}

}  // namespace
}  // namespace comptrain::sim

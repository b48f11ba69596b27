#pragma once
// What a simulation gives its user: a readable report and its JSON (the memory timeline and the
// Perfetto trace: report/simulation_timeline.hpp).

#include <optional>
#include <string>

#include "comptrain/models/data_parallel.hpp"
#include "comptrain/models/kernel_fusion.hpp"
#include "comptrain/models/op_time.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/sim/engine/replay.hpp"
#include "comptrain/sim/engine/io_simulation.hpp"
#include "comptrain/sim/run/run.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::sim {

// Everything one simulation run was made of, for the outputs.
struct SimulationRun {
  std::string scenario_name;
  std::string scenario_source;  // file, or "<embedded scenarios/default.yaml>"
  const traces::Trace& trace;
  const models::Platform& platform;
  const models::Schedule& schedule;
  const SimulationResult& result;
  const models::StrategySpec* strategy;  // its rules, for the JSON report (nullptr: name only)
  // On more than one GPU: the GPUs it ran on, how they reduce gradients (nullptr: one GPU), and
  // the same per-GPU run's iteration time on one GPU alone, for the scaling efficiency.
  ClusterShape cluster{};
  int accumulation_steps = 1;  // micro-steps per iteration, each on the trace's batch
  const models::DataParallelSpec* data_parallel = nullptr;
  const IoResult* io = nullptr;  // the data loader and checkpoints (engine/io_simulation.hpp), when the scenario has them
  const SequenceBinsResult* sequence_bins = nullptr;  // with model.sequence_bins (run/run.hpp): the result above is the longest bin's
  std::optional<double> one_gpu_seconds{};  // {}: aggregate initialisations that leave it out stay -Wmissing-field-initializers clean
  // The model-parallel layout (nullptr: data parallelism only), and the ranks that train on
  // distinct samples (0: every GPU).
  const models::ParallelLayout* layout = nullptr;
  int data_parallel_ranks = 0;
  // torch.compile's regions (framework.compile; nullptr: eager): the report says what it fused.
  const models::CompileScope* compile = nullptr;
  // Float8 linears (training.float8; nullptr: none): the report counts them.
  const models::Float8Scope* float8 = nullptr;
};

std::string report_text(const SimulationRun& run);
std::string report_json(const SimulationRun& run);

// A strategy that does not apply at the batch simulated (models::NotApplicable): a result,
// reported like a run that does not fit (JSON: "fits": false, "not_applicable": the reason).
struct NotApplicableRun {
  std::string scenario_name;
  std::string scenario_source;
  std::string trace_name;
  std::int64_t batch_size = 0;
  const models::Platform& platform;
  const models::StrategySpec& strategy;
  std::string reason;
};
std::string report_text(const NotApplicableRun& run);
std::string report_json(const NotApplicableRun& run);
// The outputs' view of a completed run of a prepared scenario (its scenario, platform, cluster and
// data parallelism; it refers to `completed`, which must outlive it).
SimulationRun simulation_run(const PreparedScenario& prepared, const CompletedRun& completed);

// The simulate report of an outcome (report_text / report_json above; a NotApplicableRun for
// a strategy that does not apply).
std::string report(const PreparedScenario& prepared, const models::StrategySpec& strategy, std::int64_t batch, const RunOutcome& outcome,
                   bool json);

}  // namespace comptrain::sim

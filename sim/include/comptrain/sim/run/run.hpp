#pragma once
// The run layer: one simulation run, written once. A scenario is prepared once (platform and
// profiles resolved when it was read, strategies checked, a trace file parsed once), then for
// any batch size and any strategy it gives the trace, the schedule and the replay.
// `comptrain simulate`, sweeps, the planner's probes and the benchmark all go through here:
//
//   PreparedScenario prepared(scenario);                        // once
//   auto scheduled = schedule_run(prepared, strategy, batch);   // trace + schedule, or NotApplicable
//   SimulationResult r = replay(prepared, *scheduled, Isolation::child_process);

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "comptrain/models/op_time.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/sim/engine/io_simulation.hpp"
#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/sim/engine/pipeline_replay.hpp"
#include "comptrain/sim/engine/replay.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::sim {

class PreparedScenario {
 public:
  // Throws InputError naming the scenario when it cannot run at all: no platform, a trace
  // file that does not read, a zoo model that cannot be built, a malformed strategy rule.
  explicit PreparedScenario(Scenario scenario);

  const Scenario& scenario() const { return scenario_; }
  const models::Platform& platform() const { return time_model_.platform(); }
  const models::OpTimeModel& time_model() const { return time_model_; }
  // The scenario's framework section against its platform (sim/framework.hpp).
  const FrameworkOnGpu& framework() const { return framework_; }
  // The scenario's batch size: training.batch_size, else the trace file's, else 1.
  std::int64_t batch_size() const { return batch_size_; }
  // The GPUs the scenario trains on (its parallelism section; one GPU without one).
  ClusterShape cluster_shape() const;
  // The ranks that train on distinct samples (the data-parallel degree D = GPUs / (T x C x P):
  // tensor, context and pipeline ranks share their micro-batches), for the global batch.
  int data_parallel_ranks() const;

  // The iteration at `batch`: a zoo model built at that batch, or the trace file (parsed once)
  // rescaled exactly to it.
  traces::Trace trace_at(std::int64_t batch) const;

 private:
  void check_model_layout() const;
  void check_layer_recompute() const;

  Scenario scenario_;
  models::OpTimeModel time_model_;
  FrameworkOnGpu framework_;
  std::optional<traces::Trace> file_trace_;
  std::int64_t batch_size_ = 1;
};

// What a replay needs: one iteration's trace and its schedule under one strategy.
struct ScheduledRun {
  models::StrategySpec strategy;
  traces::Trace trace;
  models::Schedule schedule;
};

// The trace at `batch` and its schedule under `strategy`, through every schedule transform
// (models::transform_schedule: gradient accumulation, data parallelism, the framework's
// gradient lifetime, cuDNN workspaces and dispatch costs); NotApplicable when the strategy
// cannot apply there (a recompute budget below what the checkpoints alone need): a result for
// the caller to report, not an error.
std::variant<ScheduledRun, models::NotApplicable> schedule_run(const PreparedScenario& prepared, const models::StrategySpec& strategy,
                                                               std::int64_t batch);

// Where the replay runs: SimGrid's engine can run once per process, so a caller that runs
// more than one (or must survive a SimGrid abort) replays in a forked child; a worker that is
// itself a child replays in place.
enum class Isolation { child_process, this_process };

SimulationResult replay(const PreparedScenario& prepared, const ScheduledRun& run, Isolation isolation);

// One bin of model.sequence_bins (Scenario::sequence_bins), replayed at its padded length.
struct SequenceBinRun {
  std::int64_t seq_len = 0;          // the bin's padded length
  double weight = 0;                 // its share of the iterations
  double iteration_seconds = 0;
  std::int64_t reserved_peak = 0;    // max_memory_reserved
  bool fits = true;
};

// Every bin with a positive weight, shortest first; the last is the scenario's own run (its
// model.seq_len). What training sustains is the mean iteration over them: each iteration draws
// one bin, so the expected time is the weighted sum; the peak is the longest bin's.
struct SequenceBinsResult {
  std::int64_t bin_size = 0;
  std::vector<SequenceBinRun> bins;
  // sum of weight x iteration_seconds; nullopt when a bin does not fit.
  std::optional<double> mean_iteration_seconds() const;
};

// The scenario's bins shorter than its seq_len with a positive weight, each replayed at `batch`
// in a child process (run before any replay in this process: a child forked after SimGrid ran
// inherits its state). Each is the scenario at the bin's length, BERT's masked-LM positions
// scaled to it (rounded up: about 15% of the tokens, as BERT's masking picks). Empty without
// model.sequence_bins; NotApplicable when the strategy does not apply to a bin.
std::variant<std::vector<SequenceBinRun>, models::NotApplicable> run_shorter_sequence_bins(const PreparedScenario& prepared,
                                                                                           const models::StrategySpec& strategy, std::int64_t batch);
// The shorter bins and the scenario's own run at seq_len (`longest`) together.
SequenceBinsResult sequence_bins_result(const Scenario& scenario, std::vector<SequenceBinRun> shorter, const SimulationResult& longest);

// A replayed run (report/simulate_report.hpp: simulation_run gives the outputs' view of it).
struct CompletedRun {
  ScheduledRun scheduled;
  SimulationResult result;
  std::optional<double> one_gpu_seconds{};  // set by the caller that wants the scaling efficiency (one_gpu_iteration_seconds)
  std::optional<IoResult> io{};  // with a data or checkpoint section and a run that fits (simulate_run_io)
  std::optional<SequenceBinsResult> sequence_bins{};  // with model.sequence_bins: `result` is its longest bin's

  // The iteration a measurement over many iterations sees: with a data or checkpoint section the
  // I/O simulation's mean, with sequence bins the mean over them (nullopt when a shorter bin does
  // not fit), else the replayed one.
  std::optional<double> sustained_iteration_seconds() const;
};

// The scenario's data loader and checkpoints (sim/io.hpp) around a replayed run that fits;
// nullopt when the scenario has neither section or the run does not fit. In a forked child, or in
// this process where it has run no SimGrid engine yet (a planner's worker whose replay ran in a
// child: a child forked after an engine ran inherits its initialised state, which SimGrid refuses).
std::optional<IoResult> simulate_run_io(const PreparedScenario& prepared, const ScheduledRun& run, const SimulationResult& result,
                                        Isolation isolation = Isolation::child_process);

// schedule_run + replay (+ simulate_run_io, + the shorter sequence bins); NotApplicable passes through.
using RunOutcome = std::variant<CompletedRun, models::NotApplicable>;
RunOutcome run_scenario(const PreparedScenario& prepared, const models::StrategySpec& strategy, std::int64_t batch, Isolation isolation);

// A contiguous range of the model's decoder layers: one model chunk of a pipeline rank.
struct LayerRange {
  std::int64_t first = 0;
  std::int64_t count = 0;
  friend bool operator==(const LayerRange&, const LayerRange&) = default;
};

// A pipeline-parallel run (parallelism.pipeline > 1): each stage's representative rank, and the
// replay of every stage together (simulate_pipeline). A stage's model chunks (virtual_stages V of
// them; one without the interleaved schedule): chunk k of rank p is virtual stage k x P + p and
// holds the layers models::stage_layers gives that virtual stage, the first virtual stage (chunk 0
// of rank 0) the embedding, the last (chunk V-1 of rank P-1) the head and loss, as Megatron-LM
// builds them (pre_process / post_process of each chunk's GPTModel). Its trace: the zoo's stage of
// each chunk's layers, one tensor-parallel rank's shard, the chunks joined into one
// (models::join_chunk_traces); its schedule: each chunk's one micro-batch, through
// models::apply_pipeline_rank in the order of the scenario's pipeline schedule over
// gradient_accumulation_steps micro-batches, then data parallelism and the framework's transforms.
struct PipelineRun {
  std::vector<ScheduledRun> stages;
  std::vector<std::vector<LayerRange>> chunk_layers;  // per stage (pipeline rank), its chunks' layers in chunk order
  PipelineSimulationResult result;
};
using PipelineOutcome = std::variant<PipelineRun, models::NotApplicable>;
PipelineOutcome run_pipeline(const PreparedScenario& prepared, const models::StrategySpec& strategy, std::int64_t batch, Isolation isolation);
// Whether the scenario's layout has pipeline stages (run_pipeline runs it, not run_scenario).
bool is_pipeline(const Scenario& scenario);
// The traces of a pipeline scenario's virtual stages at `batch`, in model order (P x V of them:
// virtual stage j is chunk j / P of pipeline rank j % P), each as run_pipeline replays it: its
// layers, one tensor-parallel rank's shard, the first with the embedding, the last with the head,
// and each with its send and receive ops.
std::vector<traces::Trace> virtual_stage_traces(const Scenario& scenario, std::int64_t batch);

// A lower bound on a rank's peak, from the trace alone: the bytes of the weights, gradients and
// optimizer state of one rank of the layout's first stage (its most layers and the embedding;
// models::stage_layers; with virtual_stages, every chunk of it), at batch 1, with what the scenario's ZeRO stage shards over the
// data-parallel ranks divided by them and the optimizer state left out where it is offloaded.
// The planner's layout search leaves out a layout whose bound is over the limit (studies/plan.hpp).
std::int64_t resident_state_bytes(const PreparedScenario& prepared);

// The iteration time of the same per-GPU run on one GPU alone (the scenario without its
// parallelism section), the reference of the scaling efficiency; nullopt for a one-GPU scenario
// or when that run does not fit or does not apply.
std::optional<double> one_gpu_iteration_seconds(const PreparedScenario& prepared, const models::StrategySpec& strategy, std::int64_t batch);

}  // namespace comptrain::sim

#pragma once
// The planner: for each strategy, the largest batch that fits in GPU memory with a safety
// margin, and the batch with the highest throughput among those that fit.
//
// The peak compared with the limit is the plan's memory metric (scenario.hpp: MemoryMetric;
// by default the caching-allocator model's reserved bytes, where PyTorch runs out of memory).
//
// Search (per strategy), assuming the peak memory is monotone (non-decreasing) in the batch:
//   1. growth: powers of two from 1, `probes_per_round` of them per round, capped at max_batch,
//      until one does not fit;
//   2. bisection between the last fitting and the first failing batch, each round probing
//      `probes_per_round` evenly spaced batches inside the interval.
// Each round's probes run as one batch of simulations and the next round is decided from the
// whole round's results, so the simulated points (and the plan) do not depend on `jobs` or on
// completion order. The points simulated are checked for monotonicity; a violation is a warning.
// The best batch is chosen among every fitting point simulated, which include every power of
// two up to the largest fitting batch and that batch itself.
//
// Each strategy is then compared with the baseline at a batch both can run (the smaller of
// their largest batches; simulated once more where the search did not): the memory it saves
// there and its slowdown; and best against best throughput. The scenario is prepared once
// (sim/run.hpp) and every probe replays in the worker process it runs in.
//
// Clusters. With a `parallelism:` section the batches searched are per-GPU micro-batches and
// samples/s are global: micro-batch x GPUs / iteration time (with a target global batch G:
// G / (steps x iteration time), each GPU taking G / GPUs samples in ceil((G / GPUs) / b) steps
// of b). Each strategy's best micro-batch is simulated once more on one GPU alone (the scenario
// without its parallelism section, the GPU's memory unbounded so that a micro-batch that fits
// only thanks to ZeRO's sharding still has a reference): the scaling efficiency is that time
// over the cluster's iteration time.
//
// Cluster search. `plan.gpus` (or `plan.nodes`), `plan.zero_stages` and `plan.offload_optimizer`
// expand the scenario over cluster sizes x ZeRO stages (0: DDP) x optimizer places (the GPU,
// ZeRO-Offload, Deep Optimizer States with each gap of plan.prefetch_optimizer_gaps: the planner
// chooses k; only the pairs DeepSpeed has) x strategies, each a candidate planned as above through
// the same worker pool. With a target global batch G, a candidate of N GPUs runs micro-batches b
// that divide its share G / N, each simulated with (G / N) / b gradient accumulation steps
// (models/gradient_accumulation.hpp), so that every point trains G samples per optimizer step as
// DeepSpeed requires (train_batch_size = micro-batch x steps x GPUs): first the share in one step
// (one simulation); where that does not fit, bisection over the divisors below it (peak memory
// assumed monotone in the micro-batch). Sizes whose GPUs do not divide G are left out with a
// note. The plan reports the fastest candidate (time per sample, scaling efficiency) and what
// limits each one (PlanLimit).
//
// Outside a cluster search a target global batch is reached by estimated accumulation: ceil(share
// / b) steps of one simulated micro-batch each (the optimizer step counted on every micro-batch).
//
// I/O. Where the scenario has a data: or checkpoint: section, every fitting point runs the I/O
// simulation (sim/io.hpp, simulate_run_io) after its replay, in the same worker (the replay then
// runs in a child of it: SimGrid's engine runs once per process): samples/s and energy are over the mean iteration (the replay's, the wait
// for the next batch, the checkpoint's cost averaged over its interval), so a loader-bound batch
// gains nothing over a smaller one that keeps up, and each point says what bounds it (IterationBound).
// Points over the memory limit, and the one-GPU reference runs of the scaling efficiency (which
// compare replays), skip it. A scenario without those sections plans exactly as before.
//
// Energy budget (plan.energy_budget, scenario.hpp: EnergyBudget). The best batch is chosen among the
// fitting points within every bound (their energy over the mean iteration, sim/io_energy.hpp);
// a strategy with fitting points none of which is within has no best batch and the limit
// energy_budget, and a cluster search's fastest is among the configurations within it.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/models/collective_compression.hpp"
#include "comptrain/models/parallel_layout.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/sim/core/bottleneck.hpp"
#include "comptrain/sim/engine/collectives.hpp"
#include "comptrain/sim/engine/io_simulation.hpp"
#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/sim/config/sweep.hpp"

namespace comptrain::sim {

struct PlanOptions {
  double margin = 0.05;                          // keep peak <= (1 - margin) * capacity
  MemoryMetric memory_metric = MemoryMetric::reserved;  // which peak (scenario.hpp)
  std::int64_t max_batch = 65536;                // search ceiling
  std::optional<std::int64_t> target_global_batch;  // with gradient accumulation
  PlanObjective objective = PlanObjective::samples_per_second;  // what the best batch maximises (plan.objective)
  std::optional<EnergyBudget> energy_budget;     // plan.energy_budget: the best batch is within it
  int jobs = 0;                                  // worker processes; 0 = the core count
  bool progress = true;                          // progress on stderr
  int probes_per_round = 3;                      // simulations per search round (not tied to jobs,
                                                 // so that results are the same for any jobs)
  // A strategy is limited by the network (or the host) where the exposed collectives (or the
  // compute stream's wait for launches) take at least this share of its iteration, so that the
  // iteration would be at least that much shorter without them. 10% is a design choice, not a
  // measured constant: below it, the GPU's own work is what to speed up first.
  double bottleneck_share = kBottleneckShare;  // core/bottleneck.hpp
};

// What limits a strategy or a cluster candidate at its best batch:
//   memory          no batch fits (not even 1, or not even 1 per GPU)
//   energy_budget   batches fit, but none within plan.energy_budget
//   loader          the iteration waits for its batch, the loader workers decoding longer than reading (sim/io.hpp)
//   storage         it waits for its batch, the workers reading longer than decoding
//   checkpoint      the checkpoint's cost per iteration >= bottleneck_share of the mean iteration (and
//                   >= the exposed collectives' and the host's shares)
//   network         exposed collective time >= bottleneck_share of the iteration (and >= the host's)
//   bubble          a pipeline layout's stages wait for each other (the bubble) >= bottleneck_share
//                   of the iteration, and longer than the exposed collectives and the host
//   host            the compute stream idle waiting for the launching thread >= bottleneck_share
//   compute         none of these: the GPU's work (and any copies it waits for) sets the pace
//   not_applicable  the strategy applies at no batch tried; failed: the simulations failed
enum class PlanLimit { memory, network, host, compute, not_applicable, failed, loader, storage, checkpoint, energy_budget, bubble };
std::string_view to_string(PlanLimit limit);

// One simulated point.
struct PlanPoint {
  std::int64_t batch = 0;
  bool fits = false;                 // simulated without out-of-memory and within the margin
  bool out_of_memory = false;        // the simulation itself ran out of memory
  bool inapplicable = false;         // the strategy does not apply at this batch (models::NotApplicable; see warnings)
  bool simulation_failed = false;    // the simulation failed or its worker died here (see warnings); counted as not fitting
  std::int64_t peak_bytes = 0;       // in the plan's memory metric; for out-of-memory points: reserved + the segment that could not be reserved
  std::int64_t exact_peak_bytes = 0;      // the four metrics of a simulation that ran (0 otherwise)
  std::int64_t allocated_peak_bytes = 0;
  std::int64_t reserved_peak_bytes = 0;
  std::int64_t device_peak_bytes = 0;     // reserved + CUDA context
  double iteration_seconds = 0;      // the replay's; 0 for out-of-memory points
  double samples_per_second = 0;     // batch x GPUs x micro-steps / mean_iteration_seconds (global on a cluster)
  double stall_seconds = 0;
  double collective_seconds = 0;     // sim::communication_time of the run (0 on one GPU)
  double exposed_communication_seconds = 0;
  double host_wait_seconds = 0;      // SimulationResult::host_wait_seconds
  double joules = 0;                 // the whole job's energy per mean iteration (sim/io_energy.hpp); 0 without power values
  double samples_per_joule = 0;      // batch x GPUs x micro-steps / joules (0 when it does not fit or has no energy)
  double gpu_average_watts = 0;      // one GPU's average power over the mean iteration (0 without power values)
  double node_average_watts = 0;     // one node's
  bool within_energy_budget = true;  // plan.energy_budget holds here (true without a budget)
  // The I/O simulation (sim/io.hpp), for a fitting point of a scenario with a data or checkpoint
  // section; otherwise io_modelled is false, the waits 0 and the mean iteration the replay's.
  bool io_modelled = false;
  IterationBound io_bound = IterationBound::gpu;  // what sets the steady iteration's pace
  double mean_iteration_seconds = 0;   // the replay's + the wait for the batch + the checkpoint's cost per iteration
  double data_wait_seconds = 0;        // per steady iteration
  double checkpoint_seconds_per_iteration = 0;  // the checkpoint's cost averaged over its interval
  double checkpoint_stall_seconds = 0;          // per checkpoint
  int checkpoint_interval_for_target = 0;       // the smallest interval within plan.checkpoint_overhead (0: none asked or found)
  // A pipeline layout's: the most any stage's compute stream sat waiting for a receive between its
  // first and last compute task (sim/engine/pipeline_replay.hpp); 0 without pipeline stages.
  double bubble_seconds = 0;
};

struct StrategyPlan {
  std::string strategy;                       // StrategySpec::name
  models::StrategySpec spec;                  // the strategy planned (its rules, for the JSON)
  std::optional<std::int64_t> max_batch;      // empty: not even batch 1 fits
  bool max_is_ceiling = false;                // max_batch is PlanOptions::max_batch: larger may fit
  std::optional<std::int64_t> best_batch;     // highest samples/s among the fitting points
  double best_samples_per_second = 0;         // with target_global_batch G: G / (steps * t(b)); global on a cluster
  double best_samples_per_joule = 0;          // at best_batch (PlanPoint::samples_per_joule)
  std::int64_t best_peak_bytes = 0;
  std::int64_t accumulation_steps = 1;        // micro-steps per optimizer step at best_batch: to reach target_global_batch (per GPU: G / GPUs), or the scenario's own
  bool accumulation_simulated = true;         // false: estimated as steps x one micro-step's iteration (target_global_batch outside a cluster search)
  // On a cluster: the best micro-batch's iteration on one GPU alone (memory unbounded), and that
  // over the cluster's iteration time; empty on one GPU or where the reference did not run.
  std::optional<double> one_gpu_iteration_seconds;
  std::optional<double> scaling_efficiency;
  PlanLimit limit = PlanLimit::memory;        // at best_batch (see PlanLimit)
  // Against the baseline at a batch both run (the smaller of the two largest batches); empty
  // when there is no baseline, this is it, or either fits nowhere.
  struct Comparison {
    std::int64_t batch = 0;
    double peak_saved_fraction = 0;   // 1 - peak / baseline's peak, at `batch` (the plan's metric)
    // The same in PyTorch's terms: max_memory_allocated and max_memory_reserved (a compressed
    // buffer is an allocation of its own, with its rounding and its segment).
    double allocated_saved_fraction = 0;
    double reserved_saved_fraction = 0;
    double slowdown = 0;              // iteration time / baseline's, at `batch`
    double best_throughput_ratio = 0; // best_samples_per_second / the baseline's best
  };
  std::optional<Comparison> vs_baseline;
  std::vector<PlanPoint> points;              // every batch simulated, ascending
  std::vector<std::string> warnings;          // monotonicity violations, inapplicable points, worker diagnostics
};

// One configuration of a cluster search: a cluster size, a ZeRO stage, where the optimizer steps
// and a strategy, planned
// as a strategy is (its `plan`: per-GPU micro-batches; best_samples_per_second global).
struct ClusterCandidate {
  ClusterShape shape;
  int zero_stage = 0;   // 0: PyTorch DDP
  std::optional<models::OptimizerOffloadSpec> offload_optimizer;  // where the optimizer steps; nullopt: the GPU
  models::DdpCommHook comm_hook = models::DdpCommHook::none;       // DDP's communication hook
  bool compressed_collectives = false;                             // parallelism.compression applied
  models::CompressedAllReduce compressed_all_reduce = models::CompressedAllReduce::ring;  // its all-reduces' algorithm, when compressed
  ZeroPlusPlus zero_plus_plus;                                     // ZeRO++'s options on (ZeRO-3)
  int hpz_partition_size = 1;                                      // hpZ's ranks per secondary partition; 1: off
  std::optional<models::ParallelLayout> layout;  // a layout search's layout; nullopt: data parallelism only
  // Its configuration's index among the search's (expand order: size, stage, optimizer place,
  // hook, compression, ZeRO++ setting, layout); a shard's candidates keep the index of the whole search.
  std::size_t configuration = 0;
  StrategyPlan plan;
  bool fits() const { return plan.best_batch.has_value(); }
  bool accumulation_estimated() const { return plan.accumulation_steps > 1 && !plan.accumulation_simulated; }
};

struct ClusterSearch {
  std::vector<ClusterShape> shapes;   // as planned (sizes left out are in notes)
  std::vector<int> zero_stages;
  std::vector<std::optional<models::OptimizerOffloadSpec>> offload_optimizer;  // as planned (plan.offload_optimizer)
  std::vector<models::DdpCommHook> comm_hooks;  // as planned (plan.comm_hooks)
  std::vector<bool> compressed_collectives;     // as planned (plan.compressed_collectives)
  std::vector<models::CompressedAllReduce> compressed_all_reduce;  // as planned for the compressed ones (plan.compressed_all_reduce)
  std::vector<ZeroPlusPlus> zero_plus_plus;     // as planned (plan.zero_plus_plus)
  bool layouts = false;                         // plan.tensor or plan.pipeline: a layout search
  std::vector<ClusterCandidate> candidates;  // by size, then stage, then optimizer place, then strategy
  // The configurations expanded (each planned with every strategy); a shard plans only its own
  // of them (PlanRequest::shard), but counts and notes them all.
  std::size_t configuration_count = 0;
  std::optional<std::size_t> fastest;        // the highest global samples/s among those that fit
  std::vector<std::string> notes;
};

// The candidate a cluster search reports: the first, in candidate order, of the highest score by
// `objective` (samples/s, or samples per joule) among those that fit; none when none fits. The
// planner and the merge of a search's shards (report/plan_shards.hpp) both rank by it.
std::optional<std::size_t> fastest_candidate(const std::vector<ClusterCandidate>& candidates, PlanObjective objective);

// The planner's answer for one scenario: per strategy, the largest batch that fits and the
// fastest one.
struct BatchSizePlan {
  std::string scenario_name;
  std::string scenario_source;
  std::string platform_source;
  std::string gpu_name;
  std::string variant;                        // the sweep variant's label; empty outside sweeps
  std::string platform_name;
  // What the plan's metric is held against: the visible memory for `device`, else what PyTorch
  // can use (visible memory less the CUDA context).
  std::int64_t capacity_bytes = 0;
  std::int64_t cuda_context_bytes = 0;
  std::int64_t limit_bytes = 0;               // floor((1 - margin) * capacity)
  PlanOptions options;
  // The GPUs planned for (the parallelism section; 1 x 1 without one) and their ZeRO stage.
  ClusterShape cluster{};
  int zero_stage = 0;
  bool fsdp = false;  // parallelism.fsdp: PyTorch FSDP2 (zero_stage 3), for every configuration of the plan
  std::optional<models::OptimizerOffloadSpec> offload_optimizer;  // where the optimizer steps (parallelism section); nullopt: the GPU
  models::DdpCommHook comm_hook = models::DdpCommHook::none;       // parallelism.ddp.comm_hook
  bool compressed_collectives = false;                             // parallelism.compression
  models::CompressedAllReduce compressed_all_reduce = models::CompressedAllReduce::ring;  // parallelism.compression.algorithm
  ZeroPlusPlus zero_plus_plus;                                     // parallelism.zero's ZeRO++ options
  int hpz_partition_size = 1;                                      // parallelism.zero.zero_hpz_partition_size
  std::optional<models::ParallelLayout> layout;  // the parallelism section's model-parallel layout; nullopt: data parallelism only
  std::vector<StrategyPlan> strategies;       // empty for a cluster search
  std::optional<ClusterSearch> cluster_search;  // the scenario has plan.gpus, plan.nodes or plan.zero_stages
  // The scenario has a data: or checkpoint: section: fitting points carry the I/O simulation.
  bool io_modelled = false;
  std::optional<double> checkpoint_overhead;  // plan.checkpoint_overhead, with a checkpoint section
  std::vector<std::string> notes;             // strategies left out as identical to another
};

// The strategies a scenario asks to plan: its `plan.strategies` list, or by default baseline,
// offload (all), recompute (sqrt_n), plus its own `strategy` when it is not one of those.
std::vector<models::StrategySpec> strategies_to_plan(const Scenario& scenario);

// The scenario's `plan:` settings over PlanOptions' defaults (jobs and progress untouched).
PlanOptions plan_options_for(const Scenario& scenario, PlanOptions base = {});

// Runs the search. Each simulation is its own process; results do not depend on `jobs`.
// InputError (once, before any simulation) for a strategy no batch could run.
BatchSizePlan make_plan(const Scenario& scenario, const std::vector<models::StrategySpec>& strategies, const PlanOptions& options);

// Several plans at once (a sweep's variants) sharing one pool of `jobs` worker processes.
struct PlanRequest {
  Scenario scenario;
  std::vector<models::StrategySpec> strategies;
  PlanOptions options;  // jobs and progress are taken from make_plans' arguments
  std::string variant;
  // A cluster search's configurations I, I+N, ... only (--shard I/N without a sweep): the search
  // is expanded whole (its notes, what it left out before simulating, are all there) and only the
  // shard's configurations are planned; report/plan_shards.hpp joins the shards. Ignored without
  // a cluster search.
  std::optional<Shard> shard;
};
std::vector<BatchSizePlan> make_plans(const std::vector<PlanRequest>& requests, int jobs, bool progress);

// What the planner and its report (report/plan_report.hpp) both read of a plan:
// the point simulated at `batch`, or null;
const PlanPoint* point_at(const StrategyPlan& s, std::int64_t batch);
// "8 GPUs (1 node x 8)";
std::string describe_shape(ClusterShape shape);
// the data-parallel mode in the planner's short form ("DDP", "ZeRO-2", "FSDP2");
std::string data_parallel_name(int zero_stage, bool fsdp);
// a layout on `gpus` in the planner's short form: "TP 8 (SP) x PP 4 x DP 2" (VP, CP and EP where > 1).
std::string describe_layout(const models::ParallelLayout& layout, int gpus);

}  // namespace comptrain::sim

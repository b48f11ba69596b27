#pragma once
// The validation table: published measurements of real training runs, each with its exact
// source, set beside comptrain's prediction of the same setup, with the error shown whether it
// is good or bad (`comptrain validate`). The table is a JSON-lines file
// (scenarios/validation/published.jsonl; fields in scenarios/validation/README.md); each point
// it covers names a scenario that describes the measured setup.
//
// What is predicted, per metric (a point's `scenario` S, its `reference_scenario` R):
//   throughput_samples_per_s  batch / iteration time of S at the point's batch
//   peak_mem_bytes            the simulated peak of S, in the terms of the point's
//                             `measured_as`: max_memory_allocated, max_memory_reserved,
//                             nvidia-smi (reserved + CUDA context: sim/device_memory.hpp), or
//                             tensor_bytes (the live tensors' exact bytes: another framework's
//                             own accounting or a paper's estimate)
//   memory_reduction_x        peak of R / peak of S (R: the baseline), in the same terms
//   slowdown_x                iteration time of S / iteration time of R (R: the reference run)
//   max_batch                 the planner's largest batch for S's strategy (sim/plan.hpp,
//                             with S's plan settings: by default 5% of the memory kept free);
//                             with `bound` the published batch is a bound, not the largest
//   ran_at_batch              the source says S's configuration ran at its batch (no figure):
//                             S simulated at that batch, its reserved peak over the usable
//                             memory (above 1: predicted out of memory); met when at most 1
//   bus_bandwidth             nccl-tests' busbw in GB/s of one collective on a cluster
//                             (sim/collectives.hpp); the point names the platform, the shape,
//                             the collective and its size instead of a scenario
//   average_power_watts       one GPU's average power over S's iteration (sim/energy.hpp), as
//                             NVML reads it
//   energy_ratio_x            one GPU's energy per sample of S / of R at the same batch (Zeus's
//                             power-limit traces: S capped, R at the default limit)
//   checkpoint_throughput     the job's checkpoint bytes / the training time one checkpoint
//                             blocks, GB/s (DataStates-LLM's "checkpointing throughput"), from
//                             the I/O simulation (sim/io.hpp); the point names the platform, the
//                             shape, the checkpoint and the measured iteration phases instead of a
//                             scenario
//   checkpoint_iteration_seconds  the mean iteration time with that checkpoint (the same setup):
//                             the measured iteration plus the checkpoint's cost per iteration

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/models/platform.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/sim/config/checkpoint.hpp"

namespace comptrain::sim {

enum class ValidationMetric {
  throughput_samples_per_s,
  peak_mem_bytes,
  memory_reduction_x,
  slowdown_x,
  max_batch,
  bus_bandwidth,
  average_power_watts,
  energy_ratio_x,
  checkpoint_throughput,
  checkpoint_iteration_seconds,
  ran_at_batch,
  // The op-time model's seconds for the ops the point names (`ops`), against a kernel
  // microbenchmark's GPU time: checks kernel times one op at a time, without the replay.
  kernel_seconds
};

std::string_view metric_name(ValidationMetric metric);

// How a published memory figure was measured (the table's `measured_as`).
enum class MeasuredAs { unspecified, max_memory_allocated, max_memory_reserved, nvidia_smi, first_oom, tensor_bytes };
std::string_view to_string(MeasuredAs measured_as);

// A max_batch point whose published batch is one side of the largest batch rather than the
// largest itself (the table's `bound`): `lower` when the source only says that this batch ran
// (the largest is at least it), `upper` when it says the next batch ran out of memory without
// saying which smaller batch ran (the largest is at most it).
enum class Bound { none, lower, upper };
std::string_view to_string(Bound bound);

// A bus_bandwidth point's setup: nccl-tests' <collective>_perf on `nodes` x `gpus_per_node` GPUs
// of `platform`, at `bytes` (nccl-tests' size).
struct CollectivePoint {
  models::Platform platform;  // the table's `platform`: a shipped name or a .yaml beside the table
  int nodes = 1;
  int gpus_per_node = 1;
  models::CollectiveKind kind = models::CollectiveKind::all_reduce;
  std::int64_t bytes = 0;
};

// A checkpoint_throughput point's setup (its `checkpoint` object): every GPU of `nodes` x
// `gpus_per_node` of `platform` writes `bytes_per_gpu` every `every` iterations of the measured
// phases, in `mode` (sim/checkpoint.hpp). Where ranks write unequal shares (DeepSpeed's first
// data-parallel replica writes the layers besides its optimizer shard), `bytes_per_gpu` is the
// largest share, whose ranks training waits for, and `job_bytes` the whole checkpoint.
struct CheckpointPoint {
  models::Platform platform;
  int nodes = 1;
  int gpus_per_node = 1;
  std::int64_t bytes_per_gpu = 0;
  std::int64_t job_bytes = 0;  // `job_bytes`; 0: bytes_per_gpu x every GPU
  double forward_backward_seconds = 0;
  double update_seconds = 0;
  CheckpointSpec checkpoint;
  int run_checkpoints = 0;  // `checkpoints`: the measured run's count (IoInputs::run_checkpoints); 0, the steady state
};

struct ValidationPoint {
  std::string id;
  int line = 0;  // in the table, for messages
  std::string source;  // where the number is printed: repository@commit:file and table, or paper and passage
  std::string model, gpu, precision, unit, notes, published_raw;
  std::int64_t batch = 0;
  ValidationMetric metric = ValidationMetric::throughput_samples_per_s;
  MeasuredAs measured_as = MeasuredAs::unspecified;  // required for peak_mem_bytes and memory_reduction_x
  double published = 0;
  std::optional<double> published_upper;  // the published figure is a range [published, published_upper]
  Bound bound = Bound::none;  // max_batch only: the published batch is a lower or an upper bound
  // The measured hardware or setup cannot be known (issue 34): shown, left out of the
  // summaries. A point with a known setup is never suspect, however wrong its prediction.
  bool suspect = false;
  std::string suspect_reason;  // required on a suspect point, refused on another: what is unknown and why it matters
  // The workload family, for the summaries per family: cnn, encoder (BERT), decoder (GPT, Llama
  // and other decoder-only LLMs) or moe (mixture of experts). Empty: not given (bus_bandwidth
  // points, which run no model).
  std::string family;
  bool holdout = false;  // kept out of any fit, so that the error on unseen points stays known
  bool fast = false;     // one of `validate --fast`'s points
  // Covered points: the scenario of the run (absolute), and for the two-run metrics the other.
  std::filesystem::path scenario;
  std::filesystem::path reference_scenario;
  std::string not_covered;  // why comptrain cannot represent the setup; empty when covered
  std::optional<CollectivePoint> collective;  // bus_bandwidth points (they have no scenario)
  std::optional<CheckpointPoint> checkpoint;  // checkpoint_throughput points (they have no scenario)
  // kernel_seconds points: globs (fnmatch) over the scenario's op names, e.g.
  // "model.layers.0.input_layernorm" or "model.layers.0.mlp.*.backward"; the prediction sums the
  // op-time model's seconds of every forward, backward and optimizer op that one of them matches.
  std::vector<std::string> ops;

  bool covered() const { return not_covered.empty(); }
};

struct ValidationTable {
  std::string source;
  std::vector<ValidationPoint> points;
};

// Parses the table. `source` names it in errors and scenario paths resolve against `base_dir`.
// InputError "SOURCE:LINE: problem; expected ..." for malformed JSON, unknown or missing
// fields, wrong types, a duplicate id, a covered point without its scenarios.
ValidationTable parse_validation_table(std::string_view text, std::string_view source, const std::filesystem::path& base_dir);
ValidationTable load_validation_table(const std::filesystem::path& path);

// The table `comptrain validate` reads when given none: scenarios/validation/published.jsonl of
// the source tree this library was compiled from (its scenarios are files beside it, so the
// table is not embedded the way the default scenario is).
std::filesystem::path default_validation_table();

// predicted / published - 1 (signed; +0.4 = 40% too high). Against a range, 0 inside it and
// the error against the nearer end outside; against a bound, 0 on its side (lower: at or above
// it; upper: at or below) and the error against it beyond.
double relative_error(double predicted, double published, std::optional<double> published_upper = std::nullopt);
double relative_error(double predicted, const ValidationPoint& point);

struct ValidationResult {
  ValidationPoint point;
  std::optional<double> predicted;  // empty: not covered, or the run gave no value (see `why_none`)
  std::optional<double> error;      // relative_error, when predicted
  std::string why_none;             // "out of memory at batch 256 (...)", the not-covered reason
  // Bounded max_batch and ran_at_batch points: whether the prediction is on the bound's side
  // (ran_at_batch: the configuration is predicted to fit at its batch). Unset for the others.
  std::optional<bool> met;
  // The point's run went out of memory at its batch: a configuration that ran, predicted not to.
  bool out_of_memory = false;
  // The GPU generation of the platform the point runs on (gpu_generation), for the summaries per
  // generation; empty when the point has no platform (not covered) or it gives no compute capability.
  std::string generation{};
};

// The GPU generation (architecture) of a platform, from its compute capability (CUDA C
// Programming Guide, "Compute Capabilities"): 5.x Maxwell, 6.x Pascal, 7.0 and 7.2 Volta, 7.5
// Turing, 8.0 to 8.7 Ampere, 8.9 Ada, 9.x Hopper, 10.x and 12.x Blackwell; empty when the
// platform gives none or it is none of these.
std::string gpu_generation(const models::Platform& platform);

// The families a point's `family` may name, in the order the summaries list them.
inline constexpr std::array<std::string_view, 4> kWorkloadFamilies{"cnn", "encoder", "decoder", "moe"};

struct ValidateOptions {
  bool fast = false;  // only the points marked `fast`
  int jobs = 0;       // points predicted at once, each in its own worker process; 0 = the core count
  // Only the points whose id matches one of these shell patterns (fnmatch: *, ?, [...]); none:
  // every point.
  std::vector<std::string> points = {};
};

// Predicts every point (of the fast subset, of those `points` matches). The scenarios are read
// first, so a bad one is an InputError before any simulation; so is a pattern of `points` that
// matches no point of the table. Results are in table order whatever `jobs` is.
std::vector<ValidationResult> validate(const ValidationTable& table, const ValidateOptions& options);

// Per metric, over the predicted points that are not suspect.
struct MetricSummary {
  ValidationMetric metric = ValidationMetric::throughput_samples_per_s;
  MeasuredAs measured_as = MeasuredAs::unspecified;  // required for peak_mem_bytes and memory_reduction_x
  int count = 0;
  double median_abs_error = 0;
  double worst_abs_error = 0;
  std::string worst_id;
  int not_covered = 0;  // points of this metric (suspect or not) with no prediction
  int suspect = 0;      // predicted but left out as suspect
  int bounded = 0;      // of `count`: bounded max_batch or ran_at_batch points (a met / not met answer)
  int met = 0;          // of `bounded`: met
  // Of `count`: the held-out points with an error, and their median |error|: how the model does
  // on points no value was fitted to (0 and 0 when there are none).
  int holdout_count = 0;
  double holdout_median_abs_error = 0;
};
std::vector<MetricSummary> summarize(const std::vector<ValidationResult>& results);

// One metric's points of one GPU generation or one workload family, counted as MetricSummary
// counts them (predicted, not suspect).
struct GroupSummary {
  ValidationMetric metric = ValidationMetric::throughput_samples_per_s;
  std::string by;     // "generation" or "family"
  std::string group;  // "Volta", ...; "cnn", ...; "unknown" when the point gives none
  int count = 0;
  double median_abs_error = 0;  // over the points with an error (bounds met count 0)
  double worst_abs_error = 0;
  std::string worst_id;  // empty when no point of the group has an error
};
// Per metric, the groups of each dimension (generation, then family) for the metrics whose
// summarized points fall in two groups or more of it, in the order of kMetrics, then the
// dimension, then the group (generations by compute capability, families as kWorkloadFamilies).
std::vector<GroupSummary> summarize_groups(const std::vector<ValidationResult>& results);

// The points whose configuration ran at their batch (every point simulated at its batch: not
// max_batch, bus_bandwidth or checkpoint points) but is predicted out of memory there, suspect
// ones included, in table order.
std::vector<std::string> ran_but_predicted_out_of_memory(const std::vector<ValidationResult>& results);

}  // namespace comptrain::sim

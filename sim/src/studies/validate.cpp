#include "comptrain/sim/studies/validate.hpp"
#include "comptrain/sim/metrics/memory_peak.hpp"
#include "comptrain/sim/metrics/throughput.hpp"
#include "comptrain/sim/studies/prediction.hpp"

#include <fmt/format.h>
#include <fnmatch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>
#include <variant>

#include "comptrain/models/shipped_or_file.hpp"
#include "comptrain/sim/engine/collectives.hpp"
#include "comptrain/sim/engine/io_cost.hpp"
#include "comptrain/sim/engine/io_simulation.hpp"
#include "comptrain/sim/engine/replay_cost.hpp"
#include "comptrain/sim/studies/plan.hpp"
#include "comptrain/sim/run/run.hpp"
#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/sim/runtime/workers.hpp"
#include "comptrain/support/atomic_file.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/support/json_excerpt.hpp"

namespace comptrain::sim {
namespace {

using nlohmann::json;

// Published figures are positive numbers in the metric's unit (bytes, samples/s, x, W, GB/s, s),
// from 1e-9 to 1e18: the smallest real figure in the table is 0.42 samples/s and the largest
// 8.8e10 bytes; a throughput of one sample in 31 years is 3e-8 samples/s and 1e18 bytes (1 EB) is
// beyond any GPU's memory and any rate. The bound keeps predicted / published - 1 finite: a
// denormal such as 5e-324 made every error, and the summary's median, infinite (null in JSON).
constexpr double kMinPublished = 1e-9;
constexpr double kMaxPublished = 1e18;

// Text from the table (a field's name, an id) as a message shows it: at most
// kJsonExcerptChars bytes (support/json_excerpt.hpp), cut at a UTF-8 character's start.
std::string excerpt(const std::string& text) {
  if (text.size() <= kJsonExcerptChars) return text;
  std::size_t end = kJsonExcerptChars - 3;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end) + "...";
}

// The median of the summaries (0 of none).
double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

constexpr std::array kMetrics{ValidationMetric::throughput_samples_per_s, ValidationMetric::peak_mem_bytes,
                              ValidationMetric::memory_reduction_x, ValidationMetric::slowdown_x, ValidationMetric::max_batch,
                              ValidationMetric::bus_bandwidth, ValidationMetric::average_power_watts, ValidationMetric::energy_ratio_x,
                              ValidationMetric::checkpoint_throughput, ValidationMetric::checkpoint_iteration_seconds,
                              ValidationMetric::ran_at_batch, ValidationMetric::kernel_seconds};

bool two_runs(ValidationMetric metric) {
  return metric == ValidationMetric::memory_reduction_x || metric == ValidationMetric::slowdown_x || metric == ValidationMetric::energy_ratio_x;
}

// One line's fields, checked one by one; every message names the table's line.
class PointReader {
 public:
  PointReader(const json& object, std::string where) : object_(object), where_(std::move(where)) {}

  [[noreturn]] void fail(const std::string& what) const { throw InputError(where_ + ": " + what); }
  const std::string& where() const { return where_; }

  const json* find(const char* key) const {
    const auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }
  std::string text(const char* key, bool required) const {
    const json* value = find(key);
    if (!value) {
      if (required) fail(fmt::format("missing field '{}'; expected a string", key));
      return {};
    }
    if (!value->is_string() || value->get_ref<const std::string&>().empty()) {
      fail(fmt::format("field '{}': found {}; expected a non-empty string", key, json_excerpt(*value)));
    }
    return value->get<std::string>();
  }
  // A published figure: a number from kMinPublished to kMaxPublished.
  std::optional<double> figure(const char* key, bool required) const {
    const json* value = find(key);
    const std::string expected = fmt::format("a positive number from {:g} to {:g} in the metric's unit", kMinPublished, kMaxPublished);
    if (!value) {
      if (required) fail(fmt::format("missing field '{}'; expected {}", key, expected));
      return std::nullopt;
    }
    if (!value->is_number() || !(value->get<double>() >= kMinPublished && value->get<double>() <= kMaxPublished)) {
      fail(fmt::format("field '{}': found {}; expected {}", key, json_excerpt(*value), expected));
    }
    return value->get<double>();
  }
  bool flag(const char* key) const {
    const json* value = find(key);
    if (!value) return false;
    if (!value->is_boolean()) fail(fmt::format("field '{}': found {}; expected true or false", key, json_excerpt(*value)));
    return value->get<bool>();
  }

 private:
  const json& object_;
  std::string where_;
};

constexpr std::array kFields{"id",    "source", "model",   "gpu",  "precision", "batch",    "metric",
                             "published", "published_upper", "unit", "published_raw", "notes", "suspect", "suspect_reason", "holdout",
                             "fast",  "scenario", "reference_scenario", "not_covered", "measured_as",
                             "platform", "nodes", "gpus_per_node", "collective", "bytes", "checkpoint", "bound", "family", "ops"};

constexpr std::array kMeasuredAs{MeasuredAs::max_memory_allocated, MeasuredAs::max_memory_reserved, MeasuredAs::nvidia_smi,
                                 MeasuredAs::first_oom, MeasuredAs::tensor_bytes};

// A bus_bandwidth point's setup; its platform is read now, so that a bad one stops the table.
CollectivePoint read_collective(const PointReader& in, const std::filesystem::path& base_dir) {
  CollectivePoint c;
  try {
    c.platform = models::resolve_platform(in.text("platform", true), base_dir);
  } catch (const InputError& e) {
    in.fail(fmt::format("field 'platform': {}", e.what()));
  }
  const auto count = [&](const char* key, std::int64_t max) {
    const json* value = in.find(key);
    if (!value || !value->is_number_integer() || value->get<std::int64_t>() < 1 || value->get<std::int64_t>() > max) {
      in.fail(fmt::format("field '{}': found {}; expected an integer from 1 to {}", key, value ? json_excerpt(*value) : "nothing", max));
    }
    return value->get<std::int64_t>();
  };
  c.nodes = static_cast<int>(count("nodes", c.platform.max_nodes()));
  c.gpus_per_node = static_cast<int>(count("gpus_per_node", c.platform.gpus_per_node));
  try {
    check_whole_gpus({c.nodes, c.gpus_per_node});  // simulate_collective builds every GPU of the collective's platform (shared/defects-2/09)
  } catch (const InputError& e) {
    in.fail(fmt::format("fields 'nodes' and 'gpus_per_node': {}", e.what()));
  }
  c.bytes = count("bytes", std::int64_t{1} << 50);
  const std::string kind = in.text("collective", true);
  const std::optional<models::CollectiveKind> parsed = models::parse_collective_kind(kind);
  if (!parsed) in.fail(fmt::format("field 'collective': found {}; expected {}", json_excerpt(kind), models::kCollectiveKindChoices));
  c.kind = *parsed;
  return c;
}

// A checkpoint_throughput point's setup: the platform and shape as a bus_bandwidth point's, and
// its `checkpoint` object {bytes_per_gpu, job_bytes, forward_backward_seconds, update_seconds, mode,
// every, host_cache_bytes, chunk_bytes, to, wait, checkpoints}.
CheckpointPoint read_checkpoint_point(const PointReader& in, const std::filesystem::path& base_dir) {
  CheckpointPoint c;
  try {
    c.platform = models::resolve_platform(in.text("platform", true), base_dir);
  } catch (const InputError& e) {
    in.fail(fmt::format("field 'platform': {}", e.what()));
  }
  const auto integer = [&](const json* value, const std::string& key, std::int64_t max) {
    if (!value || !value->is_number_integer() || value->get<std::int64_t>() < 1 || value->get<std::int64_t>() > max) {
      in.fail(fmt::format("field '{}': found {}; expected an integer from 1 to {}", key, value ? json_excerpt(*value) : "nothing", max));
    }
    return value->get<std::int64_t>();
  };
  c.nodes = static_cast<int>(integer(in.find("nodes"), "nodes", c.platform.max_nodes()));
  c.gpus_per_node = static_cast<int>(integer(in.find("gpus_per_node"), "gpus_per_node", c.platform.gpus_per_node));
  const json* object = in.find("checkpoint");
  if (!object || !object->is_object()) in.fail("field 'checkpoint': expected an object {bytes_per_gpu, forward_backward_seconds, update_seconds, mode, every, ...}");
  for (const auto& [key, value] : object->items()) {
    constexpr std::array kKeys{"bytes_per_gpu", "job_bytes", "forward_backward_seconds", "update_seconds", "mode", "every", "host_cache_bytes", "chunk_bytes",
                               "to", "wait", "checkpoints"};
    if (std::find(kKeys.begin(), kKeys.end(), key) == kKeys.end()) in.fail(fmt::format("field 'checkpoint.{}': unknown", excerpt(key)));
  }
  const auto seconds = [&](const char* key) {
    const auto it = object->find(key);
    if (it == object->end() || !it->is_number() || !(it->get<double>() >= 0) || !(it->get<double>() < 1e6)) {
      in.fail(fmt::format("field 'checkpoint.{}': expected seconds from 0 to 1e6", key));
    }
    return it->get<double>();
  };
  const auto member = [&](const char* key) { return object->contains(key) ? &object->at(key) : nullptr; };
  c.bytes_per_gpu = integer(member("bytes_per_gpu"), "checkpoint.bytes_per_gpu", std::int64_t{1} << 50);
  if (const json* job = member("job_bytes")) {
    // The largest share times the GPUs bounds the whole from above; the largest share, from below.
    const std::int64_t gpus = std::int64_t{c.nodes} * c.gpus_per_node;
    c.job_bytes = integer(job, "checkpoint.job_bytes", std::int64_t{1} << 60);
    // job_bytes > bytes_per_gpu x gpus, without the product (which may overflow 64 bits).
    const bool above = (c.job_bytes - 1) / gpus >= c.bytes_per_gpu;
    if (c.job_bytes < c.bytes_per_gpu || above) {
      in.fail(fmt::format("field 'checkpoint.job_bytes': found {}; expected the whole job's checkpoint, from bytes_per_gpu ({}) to bytes_per_gpu x {} GPUs ({:.6g})",
                          c.job_bytes, c.bytes_per_gpu, gpus, static_cast<double>(c.bytes_per_gpu) * static_cast<double>(gpus)));
    }
  }
  c.forward_backward_seconds = seconds("forward_backward_seconds");
  c.update_seconds = seconds("update_seconds");
  if (!(c.forward_backward_seconds + c.update_seconds > 0)) in.fail("field 'checkpoint': the iteration's phases sum to 0; expected a positive iteration");
  c.checkpoint.every = static_cast<int>(integer(member("every"), "checkpoint.every", 10'000'000));
  if (const json* mode = member("mode"); mode && mode->is_string() && parse_checkpoint_mode(mode->get<std::string>())) {
    c.checkpoint.mode = *parse_checkpoint_mode(mode->get<std::string>());
  } else {
    in.fail("field 'checkpoint.mode': expected \"sync\" or \"async\"");
  }
  if (const json* cache = member("host_cache_bytes")) c.checkpoint.host_cache_bytes = integer(cache, "checkpoint.host_cache_bytes", std::int64_t{1} << 50);
  if (const json* chunk = member("chunk_bytes")) c.checkpoint.chunk_bytes = integer(chunk, "checkpoint.chunk_bytes", std::int64_t{1} << 50);
  if (const json* to = member("to")) {
    const auto tier = to->is_string() ? parse_storage_tier(to->get<std::string>()) : std::nullopt;
    if (!tier) in.fail("field 'checkpoint.to': expected \"shared\" or \"local\"");
    c.checkpoint.to = *tier;
  }
  if (const json* wait = member("wait")) {
    const auto parsed = wait->is_string() ? parse_checkpoint_wait(wait->get<std::string>()) : std::nullopt;
    if (!parsed) in.fail("field 'checkpoint.wait': expected \"step\" or \"save\"");
    if (c.checkpoint.mode == CheckpointMode::sync) in.fail("field 'checkpoint.wait': given for mode sync; expected it only with mode async");
    c.checkpoint.wait = *parsed;
  }
  // The measured run's checkpoints (IoInputs::run_checkpoints); absent: the steady state. At
  // most 1,000: each is simulated chunk by chunk (check_io_cost bounds one checkpoint's chunks).
  if (const json* run = member("checkpoints")) c.run_checkpoints = static_cast<int>(integer(run, "checkpoint.checkpoints", 1'000));
  // The platform's storage tier and torch.save rate, checked now, at the point's line, rather
  // than in the worker that simulates it; and the I/O simulation's chunks, bounded before the
  // point runs (shared/defects-2/07).
  IoInputs io;
  io.platform = c.platform;
  io.shape = {c.nodes, c.gpus_per_node};
  io.checkpoint = c.checkpoint;
  io.sizes.rank0 = io.sizes.other = {0, c.bytes_per_gpu};
  check_io_inputs(io, in.where());
  try {
    check_io_cost(io, "", "");
  } catch (const InputError& e) {
    in.fail(fmt::format("fields 'checkpoint.bytes_per_gpu' and 'checkpoint.chunk_bytes': {}", e.what()));
  }
  return c;
}

// The `bound` of a max_batch point, and a ran_at_batch point's published batch (its `batch`).
void read_bound(const PointReader& in, ValidationPoint& p) {
  const std::string bound = in.text("bound", false);
  if (!bound.empty()) {
    if (p.metric != ValidationMetric::max_batch) {
      in.fail(fmt::format("field 'bound' given for {}; expected it only on max_batch points", metric_name(p.metric)));
    }
    if (bound == "lower") {
      p.bound = Bound::lower;
    } else if (bound == "upper") {
      p.bound = Bound::upper;
    } else {
      in.fail(fmt::format("field 'bound': found {}; expected \"lower\" (the batch ran; the largest is at least it) or \"upper\" (the next "
                          "batch ran out of memory; the largest is at most it)",
                          json_excerpt(bound)));
    }
    if (p.published_upper) in.fail("field 'published_upper' given with 'bound'; expected one of them: a bound is open on one side");
    if (p.measured_as == MeasuredAs::first_oom) in.fail("field 'measured_as': first_oom given with 'bound'; expected a bound without a batch scan");
  }
  if (p.metric == ValidationMetric::ran_at_batch) {
    if (p.published_upper) in.fail("field 'published_upper' given for ran_at_batch; expected the one batch that ran");
    if (p.published != static_cast<double>(p.batch)) {
      in.fail(fmt::format("field 'published': found {:g}, not the point's batch {}; expected the batch that ran", p.published, p.batch));
    }
  }
}

ValidationPoint read_point(const json& object, const std::string& where, const std::filesystem::path& base_dir) {
  const PointReader in(object, where);
  if (!object.is_object()) in.fail(fmt::format("found {}; expected one JSON object per line", object.type_name()));
  for (const auto& [key, value] : object.items()) {
    if (std::find(kFields.begin(), kFields.end(), key) == kFields.end()) {
      std::string valid;
      for (const char* field : kFields) valid += (valid.empty() ? "" : ", ") + std::string(field);
      in.fail(fmt::format("unknown field '{}'; expected one of: {}", excerpt(key), valid));
    }
  }
  ValidationPoint p;
  p.id = in.text("id", true);
  p.source = in.text("source", true);
  const std::string metric = in.text("metric", true);
  const auto known = std::find_if(kMetrics.begin(), kMetrics.end(), [&](ValidationMetric m) { return metric_name(m) == metric; });
  if (known == kMetrics.end()) {
    in.fail(fmt::format("field 'metric': found {}; expected throughput_samples_per_s, peak_mem_bytes, memory_reduction_x, "
                        "slowdown_x, max_batch, bus_bandwidth, average_power_watts, energy_ratio_x, checkpoint_throughput, "
                        "checkpoint_iteration_seconds, ran_at_batch or kernel_seconds",
                        json_excerpt(metric)));
  }
  p.metric = *known;
  // A collective's bandwidth has no model, precision or batch: its setup is read below. Nor has a
  // checkpoint's throughput a batch: the measured iteration is given instead.
  const bool collective = p.metric == ValidationMetric::bus_bandwidth;
  const bool checkpoint =
      p.metric == ValidationMetric::checkpoint_throughput || p.metric == ValidationMetric::checkpoint_iteration_seconds;
  p.model = in.text("model", !collective);
  p.gpu = in.text("gpu", true);
  p.precision = in.text("precision", !collective);
  constexpr std::array kPrecisions{"fp32", "tf32", "amp", "amp-fp16", "amp-bf16", "fp16", "bf16", "mixed"};
  if (!p.precision.empty() && std::find(kPrecisions.begin(), kPrecisions.end(), p.precision) == kPrecisions.end()) {
    in.fail(fmt::format("field 'precision': found {}; expected fp32, tf32, amp, amp-fp16, amp-bf16, fp16, bf16 or mixed", json_excerpt(p.precision)));
  }
  const json* batch = in.find("batch");
  if (batch || !(collective || checkpoint)) {
    if (!batch || !batch->is_number_integer() || batch->get<std::int64_t>() < 1) {
      in.fail(fmt::format("field 'batch': found {}; expected a positive integer", batch ? json_excerpt(*batch) : "nothing"));
    }
    p.batch = batch->get<std::int64_t>();
  }
  for (const char* field : {"platform", "nodes", "gpus_per_node", "collective", "bytes"}) {
    const bool shape = std::string_view(field) != "collective" && std::string_view(field) != "bytes";
    if (!collective && !(checkpoint && shape) && in.find(field)) {
      in.fail(fmt::format("field '{}' given for {}; expected it only on bus_bandwidth points{}", field, metric,
                          shape ? " (and on checkpoint points)" : ""));
    }
  }
  if (!checkpoint && in.find("checkpoint")) in.fail(fmt::format("field 'checkpoint' given for {}; expected it only on checkpoint_throughput points", metric));
  if (collective) p.collective = read_collective(in, base_dir);
  if (checkpoint && !in.find("not_covered")) p.checkpoint = read_checkpoint_point(in, base_dir);
  const std::string measured_as = in.text("measured_as", false);
  if (!measured_as.empty()) {
    const auto m = std::find_if(kMeasuredAs.begin(), kMeasuredAs.end(), [&](MeasuredAs x) { return to_string(x) == measured_as; });
    if (m == kMeasuredAs.end()) {
      in.fail(fmt::format("field 'measured_as': found {}; expected max_memory_allocated, max_memory_reserved, nvidia-smi, first_oom or "
                          "tensor_bytes",
                          json_excerpt(measured_as)));
    }
    p.measured_as = *m;
  }
  if ((p.metric == ValidationMetric::peak_mem_bytes || p.metric == ValidationMetric::memory_reduction_x) &&
      (p.measured_as == MeasuredAs::unspecified || p.measured_as == MeasuredAs::first_oom)) {
    in.fail(fmt::format("field 'measured_as': {}; expected how the {} figure was measured: max_memory_allocated, max_memory_reserved, "
                        "nvidia-smi or tensor_bytes",
                        measured_as.empty() ? "missing" : "found " + json_excerpt(measured_as), metric));
  }
  p.published = *in.figure("published", true);
  p.published_upper = in.figure("published_upper", false);
  if (p.published_upper && *p.published_upper < p.published) {
    in.fail(fmt::format("field 'published_upper': found {:g}, below published {:g}; expected the range's upper end", *p.published_upper,
                        p.published));
  }
  read_bound(in, p);
  p.unit = in.text("unit", true);
  p.published_raw = in.text("published_raw", false);
  p.notes = in.text("notes", true);
  p.suspect = in.flag("suspect");
  // Suspect means that the measured hardware or setup cannot be known, never that the prediction
  // is poor (issue 34): the point says what is unknown, and a point with a reason is suspect.
  p.suspect_reason = in.text("suspect_reason", false);
  if (p.suspect && p.suspect_reason.empty()) {
    in.fail("missing field 'suspect_reason' on a suspect point; expected a sentence saying which part of the measured hardware or setup cannot be known "
            "and why it matters");
  }
  if (!p.suspect && !p.suspect_reason.empty()) {
    in.fail("field 'suspect_reason' given on a point that is not suspect; expected it only with \"suspect\": true");
  }
  p.family = in.text("family", false);
  if (!p.family.empty() && std::find(kWorkloadFamilies.begin(), kWorkloadFamilies.end(), p.family) == kWorkloadFamilies.end()) {
    in.fail(fmt::format("field 'family': found {}; expected cnn, encoder, decoder or moe", json_excerpt(p.family)));
  }
  if (collective && !p.family.empty()) in.fail("field 'family' given for bus_bandwidth; expected it only on points that run a model");
  if (const json* ops = in.find("ops")) {
    if (p.metric != ValidationMetric::kernel_seconds) in.fail(fmt::format("field 'ops' given for {}; expected it only on kernel_seconds points", metric));
    if (!ops->is_array() || ops->empty()) in.fail(fmt::format("field 'ops': found {}; expected a non-empty array of op-name patterns", json_excerpt(*ops)));
    for (const json& pattern : *ops) {
      if (!pattern.is_string() || pattern.get_ref<const std::string&>().empty()) {
        in.fail(fmt::format("field 'ops': found {}; expected op-name patterns (strings, fnmatch globs)", json_excerpt(pattern)));
      }
      p.ops.push_back(pattern.get<std::string>());
    }
  } else if (p.metric == ValidationMetric::kernel_seconds && !in.find("not_covered")) {
    in.fail("missing field 'ops'; expected the op-name patterns whose kernel times a kernel_seconds point sums");
  }
  p.holdout = in.flag("holdout");
  p.fast = in.flag("fast");
  p.not_covered = in.text("not_covered", false);
  const std::string scenario = in.text("scenario", false);
  const std::string reference = in.text("reference_scenario", false);
  if (!reference.empty() && !two_runs(p.metric)) {
    in.fail(fmt::format("field 'reference_scenario' given for {}, a one-run metric; expected it only for memory_reduction_x, slowdown_x and energy_ratio_x",
                        metric));
  }
  if (p.collective && !scenario.empty()) in.fail("field 'scenario' given for bus_bandwidth; expected the collective's fields instead");
  if (p.checkpoint && !scenario.empty()) in.fail("field 'scenario' given for checkpoint_throughput; expected the checkpoint's fields instead");
  if (p.covered() && !p.collective && !p.checkpoint) {
    if (scenario.empty()) in.fail("missing field 'scenario'; expected the scenario of a covered point, or 'not_covered' with the reason");
    if (two_runs(p.metric) && reference.empty()) {
      in.fail(fmt::format("missing field 'reference_scenario'; expected the other run of {}", metric));
    }
  }
  for (const auto& [name, file, target] : {std::tuple{"scenario", scenario, &p.scenario}, std::tuple{"reference_scenario", reference, &p.reference_scenario}}) {
    if (file.empty()) continue;
    *target = base_dir / file;
    if (!std::filesystem::is_regular_file(*target)) {
      // The path as resolved, unless the table's text is too long to show whole.
      in.fail(fmt::format("field '{}': {} is not a file; expected a scenario relative to the table", name,
                          file.size() > kJsonExcerptChars ? json_excerpt(file) : target->string()));
    }
  }
  return p;
}

// The memory metric a published figure was measured in: what PyTorch reports
// (max_memory_allocated, max_memory_reserved), what nvidia-smi shows, or else the tensors' bytes.
MemoryMetric metric_of(MeasuredAs measured_as) {
  switch (measured_as) {
    case MeasuredAs::max_memory_allocated: return MemoryMetric::allocated;
    case MeasuredAs::max_memory_reserved: return MemoryMetric::reserved;
    case MeasuredAs::nvidia_smi: return MemoryMetric::device;
    case MeasuredAs::unspecified:
    case MeasuredAs::first_oom:
    case MeasuredAs::tensor_bytes: break;
  }
  return MemoryMetric::exact;
}

// The simulated peak in the terms a published figure was measured in.
std::int64_t memory_as_measured(const SimulationResult& r, MeasuredAs measured_as) { return peak_in(metric_of(measured_as), memory_peaks(r)); }

// One run at `batch` (the replay, and the I/O simulation when the scenario has a data or
// checkpoint section), or why it gave nothing to compare. A pipeline-parallel scenario's run is
// every stage's replay together (run_pipeline): `stages` holds each stage's result and `result`
// the stage with the highest reserved peak.
struct OneRun {
  SimulationResult result;
  std::optional<IoResult> io;
  std::vector<SimulationResult> stages{};
  double pipeline_seconds = 0;  // the pipeline's iteration (when its last stage ends), 0 without one
  std::optional<double> sustained_seconds{};  // a run of one schedule's: CompletedRun::sustained_iteration_seconds
  // The iteration a measurement over many iterations sees: a run of one schedule's sustained
  // iteration (the I/O simulation's mean: the loader's waits, the launching thread sharing the
  // workers' cores, the checkpoint's cost per iteration; or the mean over sequence bins), a
  // pipeline's replayed one.
  double iteration_seconds() const { return sustained_seconds ? *sustained_seconds : pipeline_seconds; }
};

// The scenario's file name, not its path: a report (and docs/validation.md, which is generated)
// must read the same wherever the repository is checked out; the row names the point.
std::string scenario_name(const PreparedScenario& prepared) { return std::filesystem::path(prepared.scenario().source).filename().string(); }

// One run at `batch`, of a pipeline or not, before a point reads it: the run, or why it gave
// nothing (the strategy does not apply; or it ran out of memory, with the failing request, whose
// size a ran_at_batch point still reads).
struct RunAttempt {
  std::optional<OneRun> run;
  std::optional<OutOfMemory> out_of_memory;
  std::string why_none;  // set when `run` is empty
};

RunAttempt attempt_run(const PreparedScenario& prepared, std::int64_t batch) {
  const auto not_applicable = [&](const models::NotApplicable& n) {
    return RunAttempt{std::nullopt, std::nullopt,
                      fmt::format("{}: the strategy does not apply at batch {} ({})", scenario_name(prepared), batch, n.reason)};
  };
  const auto out_of_memory = [&](const OutOfMemory& oom, std::string_view where) {
    return RunAttempt{std::nullopt, oom,
                      fmt::format("{}: out of memory at batch {}{} ({})", scenario_name(prepared), batch, where, describe_out_of_memory(oom))};
  };
  if (is_pipeline(prepared.scenario())) {
    // Every stage's replay together (run_pipeline); the run's `result` is the stage with the
    // highest reserved peak, and a pipeline runs only where every stage fits.
    PipelineOutcome outcome = run_pipeline(prepared, prepared.scenario().strategy, batch, Isolation::child_process);
    if (const auto* n = std::get_if<models::NotApplicable>(&outcome)) return not_applicable(*n);
    PipelineSimulationResult& r = std::get<PipelineRun>(outcome).result;
    if (r.out_of_memory) return out_of_memory(*r.out_of_memory, fmt::format(" in pipeline stage {}", r.out_of_memory_stage.value_or(0)));
    OneRun run;
    const auto highest = std::max_element(r.stages.begin(), r.stages.end(), [](const SimulationResult& a, const SimulationResult& b) {
      return a.device.peak_reserved < b.device.peak_reserved;
    });
    run.result = *highest;
    run.stages = std::move(r.stages);
    run.pipeline_seconds = r.iteration_seconds;
    return RunAttempt{std::move(run), std::nullopt, {}};
  }
  RunOutcome outcome = run_scenario(prepared, prepared.scenario().strategy, batch, Isolation::child_process);
  if (const auto* n = std::get_if<models::NotApplicable>(&outcome)) return not_applicable(*n);
  CompletedRun& completed = std::get<CompletedRun>(outcome);
  if (completed.result.out_of_memory) return out_of_memory(*completed.result.out_of_memory, "");
  const std::optional<double> sustained = completed.sustained_iteration_seconds();
  if (!sustained) {
    return RunAttempt{std::nullopt, std::nullopt, fmt::format("{}: a shorter sequence bin does not fit at batch {} where the longest does", scenario_name(prepared), batch)};
  }
  OneRun run{std::move(completed.result), std::move(completed.io)};
  run.sustained_seconds = sustained;
  return RunAttempt{std::move(run), std::nullopt, {}};
}

// A run that gave nothing to compare is a Prediction without a value that says why (and whether
// it ran out of memory).
std::variant<OneRun, Prediction> run_once(const PreparedScenario& prepared, std::int64_t batch) {
  RunAttempt attempt = attempt_run(prepared, batch);
  if (attempt.run) return std::move(*attempt.run);
  if (attempt.out_of_memory) return Prediction::out_of_memory_at(std::move(attempt.why_none));
  return Prediction::none(std::move(attempt.why_none));
}

// A run's peak as the point measured it: a pipeline's is its highest stage's.
std::int64_t memory_as_measured(const OneRun& run, MeasuredAs measured_as) {
  if (run.stages.empty()) return memory_as_measured(run.result, measured_as);
  std::int64_t peak = 0;
  for (const SimulationResult& stage : run.stages) peak = std::max(peak, memory_as_measured(stage, measured_as));
  return peak;
}

// Runs in a worker process: a ran_at_batch point's reserved peak at its batch over the memory
// PyTorch may reserve (the GPU's visible memory less the CUDA context), a pipeline's highest
// stage's; out of memory, what the failing request needed over the same (above 1).
Prediction predict_ran_at_batch(const PreparedScenario& prepared, std::int64_t batch) {
  RunAttempt attempt = attempt_run(prepared, batch);
  if (attempt.out_of_memory) {
    const OutOfMemory& oom = *attempt.out_of_memory;
    Prediction p = Prediction::of(static_cast<double>(out_of_memory_peak(oom)) / static_cast<double>(oom.capacity));
    p.out_of_memory = true;
    p.why_none = std::move(attempt.why_none);
    return p;
  }
  if (!attempt.run) return Prediction::none(std::move(attempt.why_none));
  const OneRun& run = *attempt.run;
  const auto usage = [](const SimulationResult& r) {
    return static_cast<double>(r.device.peak_reserved) / static_cast<double>(r.device.framework.usable_bytes());
  };
  if (run.stages.empty()) return Prediction::of(usage(run.result));
  double highest = 0;
  for (const SimulationResult& stage : run.stages) highest = std::max(highest, usage(stage));
  return Prediction::of(highest);
}

// Runs in a worker process: a bus_bandwidth point's busbw in GB/s. With NCCL's ring forced: the
// table's points are rings (NCCL_ALGO=RING, or sizes and nodes where NCCL runs rings).
Prediction predict_collective(const CollectivePoint& c) {
  return Prediction::of(ring_bus_bandwidth(c.platform, {c.nodes, c.gpus_per_node}, c.kind, c.bytes) / 1e9);
}

// Runs in a worker process: a checkpoint_throughput point's GB/s, the job's checkpoint bytes over
// the time one checkpoint blocks training (the I/O simulation's stall, in its steady state or, with
// `checkpoints`, its mean over the measured run).
Prediction predict_checkpoint(const CheckpointPoint& c, ValidationMetric metric) {
  IoInputs in;
  in.platform = c.platform;
  in.shape = {c.nodes, c.gpus_per_node};
  in.profile.optimizer_start = c.forward_backward_seconds;
  in.profile.seconds = c.forward_backward_seconds + c.update_seconds;
  in.profile.samples = 1;
  in.checkpoint = c.checkpoint;
  in.run_checkpoints = c.run_checkpoints;
  in.sizes.rank0 = {0, c.bytes_per_gpu};
  in.sizes.other = {0, c.bytes_per_gpu};
  check_io_inputs(in, "the point");
  const IoResult r = simulate_io_in_this_process(in);
  if (metric == ValidationMetric::checkpoint_iteration_seconds) return Prediction::of(r.mean_iteration_seconds);
  if (!(r.checkpoint->stall_seconds > 0)) return Prediction::none("the checkpoint blocks no training time (hidden entirely)");
  const double bytes = c.job_bytes > 0 ? static_cast<double>(c.job_bytes) : static_cast<double>(c.bytes_per_gpu) * c.nodes * c.gpus_per_node;
  return Prediction::of(bytes / r.checkpoint->stall_seconds / 1e9);
}

// Runs in a worker process: a kernel_seconds point's seconds, the op-time model's kernel time
// (launches included) of the scenario's ops that the point's patterns name, summed. The schedule
// is built, not replayed: a microbenchmark times the kernels alone, with nothing beside them.
Prediction predict_kernel_seconds(const ValidationPoint& point, const PreparedScenario& prepared) {
  auto scheduled = schedule_run(prepared, prepared.scenario().strategy, point.batch);
  if (const auto* n = std::get_if<models::NotApplicable>(&scheduled)) {
    return Prediction::none(fmt::format("{}: the strategy does not apply at batch {} ({})", scenario_name(prepared), point.batch, n->reason));
  }
  const models::Schedule& schedule = std::get<ScheduledRun>(scheduled).schedule;
  double seconds = 0;
  std::set<std::string> unmatched(point.ops.begin(), point.ops.end());
  for (const models::Task& task : schedule.tasks) {
    if (task.kind != models::TaskKind::op) continue;
    bool named = false;  // an op two patterns name counts once
    for (const std::string& pattern : point.ops) {
      if (fnmatch(pattern.c_str(), task.name.c_str(), 0) != 0) continue;
      named = true;
      unmatched.erase(pattern);
    }
    if (named) seconds += task.seconds;
  }
  if (!unmatched.empty()) {
    return Prediction::none(fmt::format("{}: no op of the schedule is named like '{}'", scenario_name(prepared), *unmatched.begin()));
  }
  return Prediction::of(seconds);
}

// Runs in a worker process: the point's predicted value.
// The runs one worker has made, by scenario and batch: the points that read the same run (a
// throughput and a peak of one setup, a slowdown's reference) share it instead of each
// simulating it again.
using RunCache = std::map<std::pair<const PreparedScenario*, std::int64_t>, std::variant<OneRun, Prediction>>;

const std::variant<OneRun, Prediction>& cached_run(RunCache& cache, const PreparedScenario& prepared, std::int64_t batch) {
  const auto key = std::pair{&prepared, batch};
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, run_once(prepared, batch)).first;
  return it->second;
}

// Whether a point's prediction reads nothing but run_once's runs of its scenario (and
// reference) at its batch, so that points of one setup can share them (RunCache).
bool reads_runs_only(ValidationMetric metric) {
  return metric != ValidationMetric::max_batch && metric != ValidationMetric::ran_at_batch && metric != ValidationMetric::kernel_seconds;
}

Prediction predict(const ValidationPoint& point, const PreparedScenario& run, const PreparedScenario* reference, RunCache& cache) {
  if (point.metric == ValidationMetric::max_batch) {
    PlanOptions options = plan_options_for(run.scenario());
    options.jobs = 1;  // this worker is one of validate's jobs already
    options.progress = false;
    const BatchSizePlan plan = make_plan(run.scenario(), {run.scenario().strategy}, options);
    const StrategyPlan& strategy = plan.strategies.front();
    if (!strategy.max_batch) return Prediction::none(run.scenario().source + ": does not fit at batch 1");
    return Prediction::of(static_cast<double>(*strategy.max_batch));
  }
  if (point.metric == ValidationMetric::ran_at_batch) return predict_ran_at_batch(run, point.batch);
  if (point.metric == ValidationMetric::kernel_seconds) return predict_kernel_seconds(point, run);
  const auto& measured = cached_run(cache, run, point.batch);
  if (const auto* none = std::get_if<Prediction>(&measured)) return *none;
  const OneRun& run_result = std::get<OneRun>(measured);
  const SimulationResult& r = run_result.result;
  switch (point.metric) {
    case ValidationMetric::throughput_samples_per_s:
      // The whole job's samples/s, as multi-GPU sources publish it: `batch` is the per-GPU
      // micro-batch, an iteration runs training.gradient_accumulation_steps of them and every rank
      // steps in lockstep (the global throughput `comptrain simulate` reports).
      // With a data section the iteration includes the loader (sim/io.hpp).
      return Prediction::of(
          samples_per_second(global_batch(point.batch, run.data_parallel_ranks(), run.scenario().accumulation_steps), run_result.iteration_seconds()));
    case ValidationMetric::peak_mem_bytes:
      return Prediction::of(static_cast<double>(memory_as_measured(run_result, point.measured_as)));
    case ValidationMetric::average_power_watts:
      // One GPU's own power over the iteration, as NVML reads it (sim/energy.hpp).
      if (!r.energy) return Prediction::none(run.scenario().source + ": the platform gives no gpu.power");
      return Prediction::of(r.energy->gpu_average_watts());
    default:
      break;
  }
  const auto& baseline = cached_run(cache, *reference, point.batch);
  if (const auto* none = std::get_if<Prediction>(&baseline)) return *none;
  const OneRun& baseline_result = std::get<OneRun>(baseline);
  const SimulationResult& b = baseline_result.result;
  if (point.metric == ValidationMetric::memory_reduction_x) {
    return Prediction::of(static_cast<double>(memory_as_measured(baseline_result, point.measured_as)) /
                           static_cast<double>(memory_as_measured(run_result, point.measured_as)));
  }
  if (point.metric == ValidationMetric::energy_ratio_x) {
    // The GPU's energy per sample (NVML's view: the GPU alone), S over R; both run the point's batch.
    if (!r.energy || !b.energy) return Prediction::none("a platform gives no gpu.power");
    return Prediction::of(r.energy->gpu_joules / b.energy->gpu_joules);
  }
  // slowdown_x: e.g. real data (a data section) over synthetic data (none).
  return Prediction::of(run_result.iteration_seconds() / baseline_result.iteration_seconds());
}

// The scenario a point names, read and prepared once, and checked against the point's batch.
std::shared_ptr<const PreparedScenario> prepare(const std::filesystem::path& path, const ValidationPoint& point, const std::string& table) {
  Scenario scenario = load_scenario_file(path);
  if (scenario.has_sweep) throw InputError(fmt::format("{}:{}: {} has a sweep; expected one setup per scenario", table, point.line, path.string()));
  auto prepared = std::make_shared<const PreparedScenario>(std::move(scenario));
  if (point.metric != ValidationMetric::max_batch && prepared->batch_size() != point.batch) {
    throw InputError(fmt::format("{}:{}: the point is at batch {} but {} runs batch {}; expected the point's batch in training.batch_size",
                                 table, point.line, point.batch, path.string(), prepared->batch_size()));
  }
  return prepared;
}

}  // namespace

std::string_view to_string(MeasuredAs measured_as) {
  switch (measured_as) {
    case MeasuredAs::unspecified: return "";
    case MeasuredAs::max_memory_allocated: return "max_memory_allocated";
    case MeasuredAs::max_memory_reserved: return "max_memory_reserved";
    case MeasuredAs::nvidia_smi: return "nvidia-smi";
    case MeasuredAs::first_oom: return "first_oom";
    case MeasuredAs::tensor_bytes: return "tensor_bytes";
  }
  return "";
}

std::string_view to_string(Bound bound) {
  switch (bound) {
    case Bound::none: return "";
    case Bound::lower: return "lower";
    case Bound::upper: return "upper";
  }
  return "";
}

std::string_view metric_name(ValidationMetric metric) {
  switch (metric) {
    case ValidationMetric::throughput_samples_per_s:
      return "throughput_samples_per_s";
    case ValidationMetric::peak_mem_bytes:
      return "peak_mem_bytes";
    case ValidationMetric::memory_reduction_x:
      return "memory_reduction_x";
    case ValidationMetric::slowdown_x:
      return "slowdown_x";
    case ValidationMetric::max_batch:
      return "max_batch";
    case ValidationMetric::bus_bandwidth:
      return "bus_bandwidth";
    case ValidationMetric::average_power_watts:
      return "average_power_watts";
    case ValidationMetric::energy_ratio_x:
      return "energy_ratio_x";
    case ValidationMetric::checkpoint_throughput:
      return "checkpoint_throughput";
    case ValidationMetric::checkpoint_iteration_seconds:
      return "checkpoint_iteration_seconds";
    case ValidationMetric::ran_at_batch:
      return "ran_at_batch";
    case ValidationMetric::kernel_seconds:
      return "kernel_seconds";
  }
  return "?";
}

ValidationTable parse_validation_table(std::string_view text, std::string_view source, const std::filesystem::path& base_dir) {
  ValidationTable table;
  table.source = std::string(source);
  std::set<std::string> ids;
  std::istringstream lines{std::string(text)};
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;  // blank lines and comments
    const std::string where = fmt::format("{}:{}", source, number);
    json object;
    try {
      object = json::parse(line);
    } catch (const json::parse_error& e) {
      // nlohmann's text is "[json.exception...] parse error at line 1, column C: WHAT"; the
      // line is ours to give, the column is e.byte.
      std::string what = e.what();
      what = what.substr(what.find(": ") == std::string::npos ? 0 : what.find(": ") + 2);
      throw InputError(fmt::format("{}:{}: malformed JSON ({}); expected one JSON object per line", where, e.byte, what));
    }
    ValidationPoint point = read_point(object, where, base_dir);
    point.line = number;
    if (!ids.insert(point.id).second) throw InputError(fmt::format("{}: duplicate id '{}'; expected each point once", where, excerpt(point.id)));
    table.points.push_back(std::move(point));
  }
  if (table.points.empty()) throw InputError(fmt::format("{}: no points; expected one JSON object per line", source));
  return table;
}

ValidationTable load_validation_table(const std::filesystem::path& path) {
  // read_file refuses a directory (`comptrain validate .` said ".: no points" before), a FIFO
  // and a device, and bounds the size.
  return parse_validation_table(read_file(path), path.string(), path.parent_path());
}

std::filesystem::path default_validation_table() {
  // The source tree's root, from CMake (not __FILE__: a compiler launcher such as ccache with
  // base_dir, or -ffile-prefix-map, makes that path relative to the build directory).
  return std::filesystem::path(COMPTRAIN_SOURCE_DIR) / "scenarios" / "validation" / "published.jsonl";
}

double relative_error(double predicted, double published, std::optional<double> published_upper) {
  if (published_upper && predicted > published) {
    return predicted <= *published_upper ? 0.0 : predicted / *published_upper - 1;
  }
  return predicted / published - 1;
}

double relative_error(double predicted, const ValidationPoint& point) {
  switch (point.bound) {
    case Bound::lower: return predicted >= point.published ? 0.0 : predicted / point.published - 1;
    case Bound::upper: return predicted <= point.published ? 0.0 : predicted / point.published - 1;
    case Bound::none: break;
  }
  return relative_error(predicted, point.published, point.published_upper);
}

std::vector<ValidationResult> validate(const ValidationTable& table, const ValidateOptions& options) {
  // A pattern that selects nothing is a typo, not an empty table.
  const auto matches = [](const std::string& pattern, const std::string& id) { return ::fnmatch(pattern.c_str(), id.c_str(), 0) == 0; };
  for (const std::string& pattern : options.points) {
    if (std::none_of(table.points.begin(), table.points.end(), [&](const ValidationPoint& p) { return matches(pattern, p.id); })) {
      throw InputError(fmt::format("{}: no point's id matches {}; expected a shell pattern of the table's ids (e.g. 'nccl-p5-*')",
                                   table.source, json_excerpt(pattern)));
    }
  }
  std::vector<ValidationResult> results;
  for (const ValidationPoint& point : table.points) {
    if (options.fast && !point.fast) continue;
    if (!options.points.empty() &&
        std::none_of(options.points.begin(), options.points.end(), [&](const std::string& pattern) { return matches(pattern, point.id); })) {
      continue;
    }
    results.push_back({point, std::nullopt, std::nullopt, point.covered() ? "" : "not covered: " + point.not_covered, std::nullopt, false, ""});
  }
  // Every scenario is read before the first simulation, so a bad one stops the run at once.
  std::map<std::filesystem::path, std::shared_ptr<const PreparedScenario>> prepared;
  for (const ValidationResult& r : results) {
    if (!r.point.covered() || r.point.collective || r.point.checkpoint) continue;
    for (const auto& path : {r.point.scenario, r.point.reference_scenario}) {
      if (!path.empty() && !prepared.contains(path)) prepared[path] = prepare(path, r.point, table.source);
    }
  }
  // Each covered point's GPU generation, for the summaries per generation: the platform its
  // scenario runs on, or the one a collective or checkpoint point names.
  for (ValidationResult& r : results) {
    if (!r.point.covered()) continue;
    if (r.point.collective) {
      r.generation = gpu_generation(r.point.collective->platform);
    } else if (r.point.checkpoint) {
      r.generation = gpu_generation(r.point.checkpoint->platform);
    } else if (const auto& platform = prepared.at(r.point.scenario)->scenario().platform) {
      r.generation = gpu_generation(*platform);
    }
  }
  // One job per covered point, but the points that read the same runs (one scenario, reference
  // and batch: RunCache) share one job, which predicts each of them in the table's order. Every
  // job runs, and the outcomes are read in the table's order, so the error that stops the run is
  // the first point's whatever -j is.
  std::vector<ChildProcess::Work> jobs;
  std::vector<std::vector<std::size_t>> results_of_job;
  std::map<std::tuple<std::filesystem::path, std::filesystem::path, std::int64_t>, std::size_t> job_of_setup;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const ValidationPoint& point = results[i].point;
    if (!point.covered()) continue;
    if (!point.collective && !point.checkpoint && reads_runs_only(point.metric)) {
      const auto setup = std::tuple{point.scenario, point.reference_scenario, point.batch};
      if (const auto it = job_of_setup.find(setup); it != job_of_setup.end()) {
        results_of_job[it->second].push_back(i);
        continue;
      }
      job_of_setup[setup] = jobs.size();
    }
    results_of_job.push_back({i});
    if (point.collective) {
      jobs.emplace_back([&point] { return wire::encode(Predictions{{predict_collective(*point.collective)}}); });
    } else if (point.checkpoint) {
      jobs.emplace_back([&point] { return wire::encode(Predictions{{predict_checkpoint(*point.checkpoint, point.metric)}}); });
    } else {
      const std::size_t job = jobs.size();
      jobs.emplace_back([&results, &results_of_job, &prepared, job] {
        RunCache cache;
        Predictions predictions;
        for (const std::size_t index : results_of_job[job]) {
          const ValidationPoint& p = results[index].point;
          const PreparedScenario* reference = p.reference_scenario.empty() ? nullptr : prepared.at(p.reference_scenario).get();
          predictions.items.push_back(predict(p, *prepared.at(p.scenario), reference, cache));
        }
        return wire::encode(predictions);
      });
    }
  }
  std::vector<JobOutcome> outcomes = run_jobs(std::move(jobs), options.jobs, [&](std::size_t job, const JobOutcome& outcome) {
    if (!outcome.diagnostics.empty()) fmt::print(stderr, "{}", prefix_lines(results[results_of_job[job].front()].point.id + ": ", outcome.diagnostics));
  });
  std::vector<std::pair<std::size_t, std::variant<Prediction, std::string>>> answers;  // result index, its prediction or the job's failure
  for (std::size_t job = 0; job < outcomes.size(); ++job) {
    JobOutcome& outcome = outcomes[job];
    if (outcome.status == JobOutcome::Status::input_error) std::move(outcome).result_or_throw();
    if (outcome.status != JobOutcome::Status::result) {
      for (const std::size_t i : results_of_job[job]) answers.emplace_back(i, "simulation failed: " + outcome.text);
      continue;
    }
    Predictions predictions = wire::decode<Predictions>(outcome.text);
    if (predictions.items.size() != results_of_job[job].size()) throw std::runtime_error("validate: a worker sent the wrong number of predictions");
    for (std::size_t k = 0; k < predictions.items.size(); ++k) answers.emplace_back(results_of_job[job][k], std::move(predictions.items[k]));
  }
  for (auto& [index, answer] : answers) {
    ValidationResult& r = results[index];
    if (const auto* failure = std::get_if<std::string>(&answer)) {
      // A failed simulation is a point without a prediction, not the end of the table.
      r.why_none = *failure;
      continue;
    }
    const Prediction prediction = std::get<Prediction>(std::move(answer));
    r.out_of_memory = prediction.out_of_memory;
    if (prediction.value && r.point.metric == ValidationMetric::ran_at_batch) {
      // No error to give: the answer is whether the configuration fits at the batch that ran.
      r.predicted = *prediction.value;
      r.met = !prediction.out_of_memory;
      r.why_none = prediction.why_none;
    } else if (prediction.value) {
      r.predicted = *prediction.value;
      const double error = relative_error(*r.predicted, r.point);
      if (r.point.bound != Bound::none) r.met = error == 0;
      // Published figures are bounded (kMinPublished), so only an absurd prediction overflows:
      // a point without an error then, never an infinite one in the table and its summary.
      if (std::isfinite(error)) {
        r.error = error;
      } else {
        r.why_none = fmt::format("the error of {:g} against {:g} is not finite", *r.predicted, r.point.published);
      }
    } else {
      r.why_none = prediction.why_none;
    }
  }
  return results;
}

std::vector<MetricSummary> summarize(const std::vector<ValidationResult>& results) {
  std::vector<MetricSummary> summaries;
  for (ValidationMetric metric : kMetrics) {
    MetricSummary s;
    s.metric = metric;
    std::vector<double> errors, holdout_errors;
    bool any = false;
    for (const ValidationResult& r : results) {
      if (r.point.metric != metric) continue;
      any = true;
      if (!r.predicted || (!r.error && !r.met)) {
        ++s.not_covered;
      } else if (r.point.suspect) {
        ++s.suspect;
      } else {
        ++s.count;
        if (r.met) {
          ++s.bounded;
          if (*r.met) ++s.met;
        }
        if (!r.error) continue;  // ran_at_batch: met or not, no error
        errors.push_back(std::abs(*r.error));
        if (r.point.holdout) holdout_errors.push_back(errors.back());
        if (errors.back() >= s.worst_abs_error) {
          s.worst_abs_error = errors.back();
          s.worst_id = r.point.id;
        }
      }
    }
    if (!any) continue;
    s.median_abs_error = median(std::move(errors));
    s.holdout_count = static_cast<int>(holdout_errors.size());
    s.holdout_median_abs_error = median(std::move(holdout_errors));
    summaries.push_back(s);
  }
  return summaries;
}

std::string gpu_generation(const models::Platform& platform) {
  const int major = platform.gpu.compute_capability_major;
  const int minor = platform.gpu.compute_capability_minor;
  // CUDA C Programming Guide, "Compute Capabilities" and its table of architectures.
  switch (major) {
    case 5: return "Maxwell";
    case 6: return "Pascal";
    case 7: return minor == 5 ? "Turing" : "Volta";
    case 8: return minor == 9 ? "Ada" : "Ampere";
    case 9: return "Hopper";
    case 10:
    case 12: return "Blackwell";
    default: return "";
  }
}

namespace {

// The order the summaries list a dimension's groups in: generations by compute capability,
// families as kWorkloadFamilies; "unknown" (a point that gives none) last.
int group_rank(const std::string& by, const std::string& group) {
  static constexpr std::array<std::string_view, 8> kGenerations{"Maxwell", "Pascal", "Volta", "Turing", "Ampere", "Ada", "Hopper", "Blackwell"};
  const auto rank = [&](const auto& order) {
    const auto it = std::find(order.begin(), order.end(), group);
    return static_cast<int>(it - order.begin());
  };
  return by == "generation" ? rank(kGenerations) : rank(kWorkloadFamilies);
}

}  // namespace

std::vector<GroupSummary> summarize_groups(const std::vector<ValidationResult>& results) {
  std::vector<GroupSummary> summaries;
  for (ValidationMetric metric : kMetrics) {
    for (const char* dimension : {"generation", "family"}) {
      const std::string by = dimension;
      // The points summarize() counts for this metric: predicted, with an error or a met answer, not suspect.
      std::map<std::string, std::vector<const ValidationResult*>> groups;
      for (const ValidationResult& r : results) {
        if (r.point.metric != metric || !r.predicted || (!r.error && !r.met) || r.point.suspect) continue;
        const std::string& key = by == "generation" ? r.generation : r.point.family;
        groups[key.empty() ? "unknown" : key].push_back(&r);
      }
      if (groups.size() < 2) continue;
      std::vector<GroupSummary> of_metric;
      for (const auto& [group, members] : groups) {
        GroupSummary g;
        g.metric = metric;
        g.by = by;
        g.group = group;
        std::vector<double> errors;
        for (const ValidationResult* r : members) {
          ++g.count;
          if (!r->error) continue;  // ran_at_batch: met or not, no error
          errors.push_back(std::abs(*r->error));
          if (errors.back() >= g.worst_abs_error) {
            g.worst_abs_error = errors.back();
            g.worst_id = r->point.id;
          }
        }
        g.median_abs_error = median(std::move(errors));
        of_metric.push_back(std::move(g));
      }
      std::stable_sort(of_metric.begin(), of_metric.end(),
                       [](const GroupSummary& a, const GroupSummary& b) { return group_rank(a.by, a.group) < group_rank(b.by, b.group); });
      summaries.insert(summaries.end(), of_metric.begin(), of_metric.end());
    }
  }
  return summaries;
}

std::vector<std::string> ran_but_predicted_out_of_memory(const std::vector<ValidationResult>& results) {
  std::vector<std::string> ids;
  for (const ValidationResult& r : results) {
    if (r.out_of_memory) ids.push_back(r.point.id);
  }
  return ids;
}

}  // namespace comptrain::sim

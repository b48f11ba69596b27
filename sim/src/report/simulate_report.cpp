#include "comptrain/sim/report/simulate_report.hpp"
#include "comptrain/sim/core/data_parallel_name.hpp"
#include "comptrain/sim/report/io_report.hpp"
#include "comptrain/sim/metrics/communication_time.hpp"
#include "comptrain/sim/metrics/iteration_energy.hpp"
#include "comptrain/sim/metrics/throughput.hpp"

#include "comptrain/models/collective_compression.hpp"
#include "comptrain/models/fsdp_offload.hpp"
#include "comptrain/models/parallel_layout.hpp"
#include "comptrain/models/zero_memory.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comptrain/support/format.hpp"
#include "comptrain/traces/trace_json.hpp"
#include "report/documents.hpp"
#include "report/energy_report.hpp"
#include "report/run_view.hpp"

namespace comptrain::sim {
namespace {

using detail::bytes_by_role_json;
using detail::index_of;
using detail::kMemoryRoles;
using detail::kStreams;
using detail::live_after_each_event;
using detail::role_name;
using detail::sum;

using models::BufferId;
using models::MemoryRole;
using models::Stream;
using models::TaskId;
using models::TaskKind;
using nlohmann::ordered_json;

// How many of the buffers live at the peak the reports list.
constexpr std::size_t kLargestBuffers = 8;

// Appends one formatted line to `out` (as in cli/trace_report.cpp).
template <typename... Args>
void add_line(std::string& out, fmt::format_string<Args...> format, Args&&... args) {
  out += fmt::format(format, std::forward<Args>(args)...);
  out += '\n';
}

// part / whole; 0 when there is no whole (an empty schedule, a zero-capacity GPU).
double fraction(double part, double whole) { return whole > 0 ? part / whole : 0.0; }
double fraction(std::int64_t part, std::int64_t whole) { return fraction(static_cast<double>(part), static_cast<double>(whole)); }
double percent(double part, double whole) { return 100.0 * fraction(part, whole); }
double percent(std::int64_t part, std::int64_t whole) { return 100.0 * fraction(part, whole); }

// Every GPU trains on the trace's batch in each micro-step: the global batch is that times the
// GPUs and the micro-steps.
std::int64_t global_batch(const SimulationRun& run) {
  return sim::global_batch(run.trace.batch_size(), run.data_parallel_ranks > 0 ? run.data_parallel_ranks : run.cluster.ranks(), run.accumulation_steps);
}

std::optional<double> samples_per_second(const SimulationRun& run) {
  if (!run.result.fits() || run.result.iteration_seconds <= 0) return std::nullopt;
  return sim::samples_per_second(global_batch(run), run.result.iteration_seconds);
}

// Throughput on the cluster / (GPUs x throughput of one GPU alone).
std::optional<double> scaling_efficiency(const SimulationRun& run) {
  // Under model parallelism one GPU runs a shard of the model: no one-GPU run compares.
  if (run.layout != nullptr) return std::nullopt;
  if (!run.one_gpu_seconds || !(run.result.iteration_seconds > 0) || !run.result.fits()) return std::nullopt;
  return *run.one_gpu_seconds / run.result.iteration_seconds;
}

std::string data_parallel_name(const SimulationRun& run) {
  if (run.data_parallel == nullptr) return "one GPU";
  if (run.layout != nullptr && run.data_parallel_ranks == 1) return "no data parallelism";
  std::string name = sim::data_parallel_name(run.data_parallel->zero_stage, run.data_parallel->fsdp.has_value(), NameStyle::long_form);
  // FSDP2's CPU offload: the shards and the optimizer step on the host (models/transforms/README.md).
  if (const auto& fsdp = run.data_parallel->fsdp; fsdp && fsdp->cpu_offload) name += " with CPU offload";
  if (const auto& fsdp = run.data_parallel->fsdp; fsdp && fsdp->replicate > 1) {
    name += fmt::format(" (HSDP: {} replicas of {} shards)", fsdp->replicate, run.data_parallel->ranks / fsdp->replicate);
  }
  // ZeRO++ (models::DataParallelSpec).
  if (run.data_parallel->zero_stage == 3 && !run.data_parallel->fsdp) {
    const auto& dp = *run.data_parallel;
    std::vector<std::string> parts;
    if (dp.hpz_partition_size > 1) parts.push_back(fmt::format("hpZ over {} ranks", dp.hpz_partition_size));
    if (dp.quantized_weights) parts.push_back("qwZ");
    // qgZ on one node is DeepSpeed's reduce-scatter (models::DataParallelSpec::quantized_gradients; the spec here is the
    // scenario's, whose ranks_per_node the run fills in later: the cluster says how many nodes).
    if (dp.quantized_gradients) parts.push_back(run.cluster.nodes > 1 ? "qgZ" : "qgZ (one node: reduce-scatter)");
    for (std::size_t i = 0; i < parts.size(); ++i) name += (i == 0 ? " with ZeRO++ " : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  }
  // DDP's compression hook (models::DdpCommHook).
  if (run.data_parallel->zero_stage == 0 && run.data_parallel->comm_hook == models::DdpCommHook::powersgd) {
    name += fmt::format(" with the PowerSGD hook (rank {})", run.data_parallel->powersgd.rank);
  } else if (run.data_parallel->zero_stage == 0 && run.data_parallel->comm_hook != models::DdpCommHook::none) {
    name += fmt::format(" with the {} compress hook", models::to_string(run.data_parallel->comm_hook));
  }
  return name;
}

std::string metadata_or(const traces::Trace& trace, const std::string& key, const std::string& fallback) {
  auto it = trace.metadata().find(key);
  return it == trace.metadata().end() ? fallback : it->second;
}

// What was allocated when the allocation failed: the simulation stops at the failure, so this
// is every recorded event, and its total is OutOfMemory::in_use.
BytesByMemoryRole live_at_the_end(const SimulationRun& run) {
  const auto rows = live_after_each_event(run);
  return rows.empty() ? BytesByMemoryRole{} : rows.back();
}

// The buffers live at the peak, largest first (ties in buffer order, so the output is stable).
std::vector<BufferId> largest_live_at_peak(const SimulationRun& run) {
  std::vector<BufferId> live = run.result.live_at_peak;
  std::stable_sort(live.begin(), live.end(),
                   [&](BufferId a, BufferId b) { return run.schedule.buffers.at(a).bytes > run.schedule.buffers.at(b).bytes; });
  if (live.size() > kLargestBuffers) live.resize(kLargestBuffers);
  return live;
}


// The time breakdown rows, in report order. The pipeline's sends and receives (a pipeline stage's
// replay: sim/engine/pipeline_replay.hpp) come after the collectives, then a framework's own
// kernels; a run without them leaves their rows out of the text and the JSON (shown_when_nonzero),
// whose outputs stay what they were.
struct TimeRow {
  const char* label;
  const char* key;
  double seconds;
};

std::vector<TimeRow> time_rows(const SimulationResult& r) {
  const auto& k = r.seconds_by_task_kind;
  return {
      {"compute (op tasks)", "compute", k[index_of(TaskKind::op)]},
      {"recomputation", "recompute", k[index_of(TaskKind::recompute)]},
      {"offload copies", "offload", k[index_of(TaskKind::offload)]},
      {"prefetch copies", "prefetch", k[index_of(TaskKind::prefetch)]},
      {"compression", "compress", k[index_of(TaskKind::compress)]},
      {"decompression", "decompress", k[index_of(TaskKind::decompress)]},
      {"collectives", "collective", k[index_of(TaskKind::collective)]},
      {"pipeline sends", "send", k[index_of(TaskKind::send)]},
      {"pipeline receives", "recv", k[index_of(TaskKind::recv)]},
      {"framework kernels", "framework", k[index_of(TaskKind::framework)]},
      {"host CPU (optimizer)", "host_compute", k[index_of(TaskKind::host_compute)]},
      {"compute-stream stalls", "compute_stall", r.compute_stall_seconds},
      {"waiting for the CPU to launch", "host_wait", r.host_wait_seconds},
  };
}

// The rows only some runs have (a pipeline's transfers, a framework's own kernels): left out of
// the text and the JSON when zero, so that the other runs' reports stay as they were.
bool shown_when_nonzero(const TimeRow& row) {
  const std::string_view key = row.key;
  return key == "send" || key == "recv" || key == "framework";
}

// "'conv1' (forward)" for tasks that replay a trace op; empty otherwise.
std::optional<std::string> op_description(const SimulationRun& run, const models::Task& task) {
  if (!task.op) return std::nullopt;
  const traces::Op& op = run.trace.op(*task.op);
  return fmt::format("'{}' ({})", op.name, traces::to_string(op.phase));
}

ordered_json task_json(const SimulationRun& run, TaskId t) {
  const models::Task& task = run.schedule.tasks.at(t);
  ordered_json j;
  j["index"] = t;
  j["name"] = task.name;
  j["kind"] = models::to_string(task.kind);
  j["stream"] = models::to_string(task.stream);
  if (task.op) {
    const traces::Op& op = run.trace.op(*task.op);
    j["op"] = {{"index", *task.op}, {"id", op.id}, {"name", op.name}, {"phase", traces::to_string(op.phase)}};
  } else {
    j["op"] = nullptr;
  }
  return j;
}

ordered_json buffer_json(const SimulationRun& run, BufferId b) {
  const models::Buffer& buffer = run.schedule.buffers.at(b);
  return {{"index", b}, {"name", buffer.name}, {"role", models::to_string(buffer.role)}, {"bytes", buffer.bytes}};
}

// One line per role, then the total, for a by-role breakdown (at the peak, at the failure).
void add_role_table(std::string& out, const BytesByMemoryRole& bytes, const char* total_label) {
  const std::int64_t total = sum(bytes);
  add_line(out, "  {:<18}{:>14}{:>20}{:>9}", "role", "size", "bytes", "share");
  for (MemoryRole role : kMemoryRoles) {
    const std::int64_t b = bytes[index_of(role)];
    add_line(out, "  {:<18}{:>14}{:>20}{:>8.1f}%", models::to_string(role), format_bytes(b), group_digits(b), percent(b, total));
  }
  add_line(out, "  {:<18}{:>14}{:>20}", total_label, format_bytes(total), group_digits(total));
}

// How many of a compress rule's storages had their ratio from their own value features
// (nullptr when the schedule does not say).
const models::CompressionFeatureUse* feature_use(const models::Schedule& schedule, std::size_t rule) {
  for (const models::CompressionFeatureUse& f : schedule.compression_features) {
    if (f.rule == rule) return &f;
  }
  return nullptr;
}

// Per tensor, the bound, the ratio and the predicted weight-gradient error (models/README.md,
// "Gradient error of a compressed activation"): for an adaptive rule, or a fixed one on a trace
// with gradient statistics (where some tensor has a prediction); nothing otherwise.
void add_tensor_bounds(std::string& out, const models::CompressionModelUse& c) {
  const bool predicted = std::any_of(c.tensors.begin(), c.tensors.end(), [](const auto& t) { return t.predicted_gradient_error.has_value(); });
  if (c.tensors.empty() || (!c.gradient_error_tolerance && !predicted)) return;
  std::size_t width = 6;
  for (const auto& t : c.tensors) width = std::max(width, t.tensor.size());
  width = std::min<std::size_t>(width, 60);
  add_line(out, "             per tensor: bound relative to its value range and absolute, ratio, predicted weight-gradient error (sigma / RMS) of the layers it enters");
  add_line(out, "             {:<{}}  {:<8}  {:>10}  {:>10}  {:>7}  {:>11}  {}", "tensor", width, "bound", "relative", "absolute", "ratio", "grad. error", "layers");
  bool relu = false, masked = false, recomputed = false;
  for (const auto& t : c.tensors) {
    std::string layers;
    for (const std::string& name : t.consumers) layers += (layers.empty() ? "" : ", ") + name;
    if (t.from == models::TensorBoundUse::From::fallback) layers = t.why_fallback;
    const bool mask_kept = t.relu_mask && t.positive_mask;
    if (t.relu_mask) layers += mask_kept ? " [m]" : " [r]";
    if (t.read_by_recomputation) layers += " [c]";
    relu = relu || (t.relu_mask && !mask_kept);
    masked = masked || mask_kept;
    recomputed = recomputed || t.read_by_recomputation;
    add_line(out, "             {:<{}}  {:<8}  {:>10.3e}  {:>10}  {:>7.3g}  {:>11}  {}", t.tensor, width, models::to_string(t.from), t.relative_error_bound,
             t.absolute_error_bound ? fmt::format("{:.3e}", *t.absolute_error_bound) : "-", t.ratio,
             t.predicted_gradient_error ? fmt::format("{:.3g} %", 100 * *t.predicted_gradient_error) : "-", layers);
  }
  if (relu) {
    add_line(out, "             [r] a ReLU's backward reads it too: positive values below the bound decode to 0 and mask their gradients. Not in the prediction, and");
    add_line(out, "                 measured to dominate the error where it happens: 5-200x the prediction on ResNet-18 (README, \"Compressed activations: gradient error\");");
    add_line(out, "                 positive_mask: relu (the default under error_bound: adaptive) keeps its sign exact");
  }
  if (masked) {
    add_line(out, "             [m] a ReLU's backward reads it too, and its stream keeps the positive mask (1 bit per value, in the ratio): the ReLU reads its exact sign,");
    add_line(out, "                 so the prediction covers its error (kernels/README.md, \"Positive mask\")");
  }
  if (recomputed) add_line(out, "             [c] a recomputation reads the decompressed copy: the error enters the recomputed activations too (not in the prediction)");
  // Statistics measured at another batch: the prediction assumes the weight gradient's RMS does
  // not change with the batch; where gradient noise dominates it, it falls as 1/sqrt(batch) and the
  // real error is off by sqrt(batch / measured batch) (traces/FORMAT.md).
  std::optional<std::int64_t> measured;
  for (const auto& t : c.tensors) {
    if (t.statistics_batch && (!measured || *t.statistics_batch != *measured)) measured = measured ? std::optional<std::int64_t>(-1) : t.statistics_batch;
  }
  if (measured) {
    add_line(out, "             gradient statistics measured at {}, used at this batch: RMS(delta) scaled as 1/batch, the weight gradient's RMS kept; where gradient",
             *measured > 0 ? fmt::format("batch {}", *measured) : std::string("other batches"));
    add_line(out, "             noise dominates that RMS, the real error is sqrt(batch / measured batch) times the prediction (traces/FORMAT.md)");
  }
}

// Which costs a compress rule applied: the profile, its fitted models (with provenance), and
// the ratio per tensor class it compressed (the byte-weighted mean where tensors had their own
// value features).
void add_compression_line(std::string& out, const models::CompressionModelUse& c, const models::CompressionFeatureUse* f) {
  auto time = [](const models::TimeModel& t) {
    return fmt::format("{} + B / {:.4g} GB/s [{}]", format_seconds(t.latency), t.bandwidth / 1e9, models::to_string(t.provenance));
  };
  std::string ratios;
  for (const auto& [cls, ratio] : c.ratios) ratios += fmt::format("{}{} {:.3g}", ratios.empty() ? "" : ", ", models::to_string(cls), ratio);
  if (c.gradient_error_tolerance) {
    add_line(out, "           compress rule {}: profile {} ({}), codec {}, error bound adaptive: predicted weight-gradient error <= {:g} of each layer's RMS{}",
             c.rule, c.profile, c.profile_source, c.codec, *c.gradient_error_tolerance,
             c.fallback_error_bound ? fmt::format(" (fallback {:g}{})", *c.fallback_error_bound, c.error_bound_mode == ErrorBoundMode::abs ? " absolute" : "") : "");
  } else {
    add_line(out, "           compress rule {}: profile {} ({}), codec {}, error bound {:g}{}", c.rule, c.profile, c.profile_source, c.codec,
             c.error_bound, c.error_bound_mode == ErrorBoundMode::abs ? " (absolute)" : "");
  }
  add_line(out, "             compress {}, decompress {}", time(c.compress), time(c.decompress));
  std::string from = c.ratio_overridden ? " [explicit]" : " [fitted ratio model]";
  if (f != nullptr && f->with_features > 0) {
    from = fmt::format(" [fitted ratio model; byte-weighted means, {} of {} tensors from per-tensor features]", f->with_features,
                       f->storages);
  }
  add_line(out, "             ratio {}{}", ratios.empty() ? "(nothing compressed)" : ratios, from);
  if (c.ratio_converted_to_element_size) {
    add_line(out, "             (the profile is fitted on 32-bit data; ratios of tensors of other element types are converted: same bits per value)");
  }
  add_tensor_bounds(out, c);
}

void add_header(std::string& out, const SimulationRun& run) {
  const traces::Trace& trace = run.trace;
  std::string model = fmt::format("{} · batch {}", trace.name(), trace.batch_size());
  for (const char* key : {"precision", "optimizer"}) {
    if (auto it = trace.metadata().find(key); it != trace.metadata().end()) model += fmt::format(" · {} {}", key, it->second);
  }
  add_line(out, "Scenario   {}   (source: {})", run.scenario_name, run.scenario_source);
  add_line(out, "Model      {}   (trace source: {})", model, metadata_or(trace, "source", "file"));
  add_line(out, "Platform   {}: {}, {} of GPU memory ({} bytes)   (source: {})", run.platform.name, run.platform.gpu.name,
           format_bytes(run.platform.gpu.memory_bytes), group_digits(run.platform.gpu.memory_bytes), run.platform.source);
  add_line(out, "Strategy   {}", run.schedule.strategy);
  if (run.compile) {
    // What Inductor fuses (models/kernel_fusion.hpp): groups of ops that share one kernel.
    const models::KernelFusion fusion = models::fuse_like_inductor(trace, *run.compile);
    std::size_t compiled = 0;
    std::size_t fused = 0;
    for (traces::OpIndex o = 0; o < fusion.ops.size(); ++o) {
      if (trace.op(o).kind == traces::OpKind::view) continue;  // free: no kernel either way
      compiled += fusion.ops[o].compiled ? 1 : 0;
      fused += fusion.ops[o].group ? 1 : 0;
    }
    std::string scope = "the whole model";
    if (!run.compile->modules.empty()) scope = fmt::format("each instance of {}", fmt::join(run.compile->modules, ", "));
    add_line(out, "Compile    torch.compile (Inductor) over {}: {} memory-bound ops compiled, {} of them in {} fused kernels; memory as eager",
             scope, compiled, fused, fusion.groups);
  }
  if (run.float8) {
    const auto& ops = trace.ops();
    const auto linears = std::count_if(ops.begin(), ops.end(), [](const traces::Op& op) { return op.kind == traces::OpKind::linear; });
    const auto float8 = std::count_if(ops.begin(), ops.end(), [&](const traces::Op& op) { return models::in_float8_scope(*run.float8, op); });
    const std::string skip = run.float8->skip.empty() ? "" : fmt::format(" (skipped: {})", fmt::join(run.float8->skip, ", "));
    if (run.float8->recipe == models::Float8Recipe::delayed) {
      // What the trace holds of Transformer Engine's FP8 memory (models/float8_memory.hpp: zoo
      // traces only), counted rather than assumed.
      const auto& tensors = trace.tensors();
      const auto copies = std::count_if(tensors.begin(), tensors.end(), [](const traces::Tensor& t) {
        return t.dtype == traces::DType::u8 && t.role == traces::TensorRole::activation && t.name.ends_with(".fp8");
      });
      const auto workspaces = std::count_if(tensors.begin(), tensors.end(), [](const traces::Tensor& t) {
        return t.role == traces::TensorRole::buffer && t.name.ends_with(".fp8_workspace");
      });
      // Sequence parallelism's norm output shards, which the norm writes in FP8 itself.
      const auto norm_outputs = std::count_if(tensors.begin(), tensors.end(), [&](const traces::Tensor& t) {
        return t.dtype == traces::DType::u8 && t.role == traces::TensorRole::activation && t.producer &&
               trace.op(*t.producer).kind == traces::OpKind::layernorm;
      });
      const std::string gathered =
          norm_outputs > 0 ? fmt::format(", {} norm output shards written, all-gathered and saved in FP8 (sequence parallelism)", norm_outputs) : "";
      add_line(out, "Float8     Transformer Engine's delayed scaling: {} of {} linear ops on FP8 tensor cores{}, with their cast kernels (weights once "
                    "per optimizer step, a norm's output cast by the norm); {} FP8 copies of saved inputs{} and {} FP8 weight workspaces{}; "
                    "FLOPs utilisation against the 16-bit peak",
               float8, linears, skip, copies, gathered, workspaces, run.float8->fp8_weights ? " (the weights FP8 themselves)" : "");
    } else {
      add_line(out, "Float8     torchao float8 training, tensorwise scaling: {} of {} linear ops on FP8 tensor cores{}, with their amax and cast "
                    "kernels as torch.compile generates them{}; FLOPs utilisation against the 16-bit peak",
               float8, linears, skip,
               run.float8->fsdp_all_gather ? "; their weights gathered by FSDP2 in float8 (one byte an element), not cast again; other memory as 16-bit"
                                           : "; memory as 16-bit");
    }
  }
  for (const models::CompressionModelUse& c : run.schedule.compression) {
    add_compression_line(out, c, feature_use(run.schedule, c.rule));
  }
  out += '\n';
}

constexpr std::array<const char*, 3> kIterationNames{"the set-up, before the first iteration", "the first iteration",
                                                     "the steady iteration (every one after the first)"};

void add_out_of_memory(std::string& out, const SimulationRun& run, const OutOfMemory& oom) {
  add_line(out, "DOES NOT FIT: PyTorch would run out of GPU memory in {}, at t = {} ({:.9g} s)", kIterationNames.at(oom.iteration),
           format_seconds(oom.time), oom.time);
  if (oom.task) {
    const models::Task& task = run.schedule.tasks.at(*oom.task);
    std::string what = fmt::format("#{} '{}' ({} on the {} stream)", *oom.task, task.name, models::to_string(task.kind),
                                   models::to_string(task.stream));
    if (auto op = op_description(run, task)) what += fmt::format(", trace op {}", *op);
    if (task.tensor) what += fmt::format(", tensor '{}'", run.trace.tensor(*task.tensor).name);
    add_line(out, "  task        {}", what);
  } else {
    add_line(out, "  task        none: the weights, buffers and inputs, allocated before the first iteration");
  }
  if (oom.buffer) {
    const models::Buffer& buffer = run.schedule.buffers.at(*oom.buffer);
    add_line(out, "  buffer      '{}' ({}, {} = {} bytes)", buffer.name, models::to_string(buffer.role), format_bytes(buffer.bytes),
             group_digits(buffer.bytes));
  } else {
    add_line(out, "  buffer      the cuBLAS workspace ({})", format_bytes(run.result.device.framework.cublas_workspace_bytes));
  }
  add_line(out, "  new segment {} ({} bytes) with {} reserved ({} bytes) of the {} PyTorch can use ({} bytes:",
           format_bytes(oom.requested), group_digits(oom.requested), format_bytes(oom.in_use), group_digits(oom.in_use),
           format_bytes(oom.capacity), group_digits(oom.capacity));
  add_line(out, "              {} visible less a {} CUDA context), after releasing the allocator's cache",
           format_bytes(run.result.device.framework.visible_bytes), format_bytes(run.result.device.framework.cuda_context_bytes));
  const std::int64_t short_by = oom.in_use + oom.requested - oom.capacity;
  add_line(out, "  short by    {} ({} bytes)", format_bytes(short_by), group_digits(short_by));
  out += '\n';
  add_line(out, "Tensors live in the steady iteration when the allocation failed, exact bytes (KiB/MiB/GiB = 2^10/2^20/2^30 bytes)");
  add_role_table(out, live_at_the_end(run), "live");
}

// DeepSpeed's own estimate of the model states per GPU (its estimate_zero2/3_model_states_mem_needs,
// models/zero_memory.hpp, as DeepSpeed prints it today), for ZeRO 2 and 3 runs: the figure users
// compare with, shown beside the simulated peak. The largest layer is the largest parameter
// tensor (DeepSpeed takes the largest module's parameters).
std::optional<std::int64_t> deepspeed_estimate(const SimulationRun& run) {
  if (run.data_parallel == nullptr || run.data_parallel->zero_stage < 2 || run.data_parallel->fsdp) return std::nullopt;
  std::int64_t parameters = 0;
  std::int64_t largest = 0;
  for (const traces::Tensor& t : run.trace.tensors()) {
    if (t.role != traces::TensorRole::weight || t.is_view()) continue;
    parameters += t.elements();
    largest = std::max(largest, t.elements());
  }
  if (parameters <= 0) return std::nullopt;
  models::zero::DeepSpeedCluster cluster;
  cluster.nodes = run.cluster.nodes;
  cluster.gpus_per_node = run.cluster.gpus_per_node;
  if (run.data_parallel->zero_stage == 2) return models::zero::deepspeed_zero2_estimate(parameters, cluster, false).gpu_bytes;
  return models::zero::deepspeed_zero3_estimate(parameters, largest, cluster, {}).gpu_bytes;
}

// "TP 8 (sequence parallel) x PP 1 x CP 1 x EP 1 x DP 1"
std::string layout_text(const models::ParallelLayout& l, int data_parallel) {
  std::string text = fmt::format("TP {}{} x PP {}", l.tensor,
                                 l.tp_comm_overlap ? " (sequence parallel, Userbuffers overlap)" : l.sequence_parallel ? " (sequence parallel)" : "", l.pipeline);
  if (l.pipeline > 1) text += fmt::format(" ({}{})", models::to_string(l.schedule), l.virtual_stages > 1 ? fmt::format(", {} virtual stages", l.virtual_stages) : "");
  return text + fmt::format(" x CP {} x EP {} x DP {}", l.context, l.expert, data_parallel);
}

// Model and hardware FLOPs utilisation (Korthikanti et al. 2022, §6: MFU counts the model's
// FLOPs, HFU also the recomputed ones): this rank's FLOPs per second of the iteration over its
// GPU's dense 16-bit peak (fp32 for an fp32 model).
struct FlopsUtilisation {
  double model = 0;
  double hardware = 0;
};
std::optional<FlopsUtilisation> flops_utilisation(const SimulationRun& run) {
  const SimulationResult& r = run.result;
  if (!r.fits() || !(r.iteration_seconds > 0)) return std::nullopt;
  double model = 0;
  double recomputed = 0;
  traces::DType dtype = traces::DType::f32;
  for (models::TaskId t = 0; t < run.schedule.tasks.size(); ++t) {
    const models::Task& task = run.schedule.tasks[t];
    if (!task.op) continue;
    const traces::Op& op = run.trace.op(*task.op);
    if (op.phase == traces::Phase::optimizer) continue;
    const double flops = static_cast<double>(op.flops.at(run.trace.batch_size()));
    if (task.kind == models::TaskKind::op) model += flops;
    if (task.kind == models::TaskKind::recompute) recomputed += flops;
    if (op.kind == traces::OpKind::linear && !op.inputs.empty()) dtype = run.trace.tensor(op.inputs.front()).dtype;
  }
  const double peak = run.platform.peak_flops(dtype, false);
  if (!(peak > 0) || !(model > 0)) return std::nullopt;
  const double seconds = r.iteration_seconds * peak;
  return FlopsUtilisation{model / seconds, (model + recomputed) / seconds};
}

ordered_json layout_json(const SimulationRun& run) {
  if (run.layout == nullptr) return nullptr;
  const models::ParallelLayout& l = *run.layout;
  return {{"tensor", l.tensor},
          {"pipeline", l.pipeline},
          {"context", l.context},
          {"expert", l.expert},
          {"data", run.data_parallel_ranks},
          {"virtual_stages", l.virtual_stages},
          {"sequence_parallel", l.sequence_parallel},
          {"tp_comm_overlap", l.tp_comm_overlap},
          {"pipeline_schedule", models::to_string(l.schedule)}};
}

ordered_json communication_by_group_json(const CommunicationTime& c) {
  ordered_json groups = ordered_json::object();
  for (std::size_t g = 0; g < c.by_group.size(); ++g) {
    const CommunicationTime::Group& group = c.by_group[g];
    if (group.collectives == 0) continue;
    groups[std::string(traces::to_string(static_cast<traces::ParallelGroup>(g)))] = {
        {"collectives", group.collectives}, {"collective_seconds", group.collective_seconds}, {"exposed_seconds", group.exposed_seconds}};
  }
  return groups;
}

ordered_json flops_json(const SimulationRun& run, bool hardware) {
  const auto u = flops_utilisation(run);
  if (!u) return nullptr;
  return hardware ? u->hardware : u->model;
}

// parallelism.compression's figures (models::CollectiveCompressionSpec): the ratios on the
// gradients and the parameters, the largest temporary their codec tasks make (the comm stream's
// compress tasks: compressed collectives are the only ones there with it), and the derived
// worst-case error after each compressed collective. Their time is in the compression and
// decompression rows of the time breakdown (the replay's).
struct CompressedCollectivesSummary {
  const models::CollectiveCompressionSpec* spec = nullptr;
  int ranks = 0;
  double gradient_ratio = 1;
  double parameter_ratio = 1;
  std::int64_t largest_temporary = 0;
  struct Bound {
    const char* what;  // "gradient all-reduce", ...
    models::CollectiveKind kind;
    int ranks;  // of its group
    models::CollectiveErrorBound bound;
  };
  std::vector<Bound> bounds;
};

std::optional<CompressedCollectivesSummary> compressed_collectives(const SimulationRun& run) {
  if (run.data_parallel == nullptr || !run.data_parallel->compression) return std::nullopt;
  CompressedCollectivesSummary c;
  const models::CollectiveCompressionSpec& z = *run.data_parallel->compression;
  c.spec = &z;
  // The data-parallel group the collectives run over: under model parallelism Megatron's DP x CP
  // group (as the transforms take it, run.cpp's transform_steps), not every GPU.
  c.ranks = run.layout != nullptr ? models::rank_groups(*run.layout, run.cluster.ranks(), traces::ParallelGroup::data).size : run.data_parallel->ranks;
  if (c.ranks < 2) return std::nullopt;
  int gradient_size = 4;
  int weight_size = 2;
  for (const traces::Tensor& t : run.trace.tensors()) {
    if (t.role == traces::TensorRole::gradient) gradient_size = static_cast<int>(traces::element_size(t.dtype));
    if (t.role == traces::TensorRole::gradient) break;
  }
  for (const traces::Tensor& t : run.trace.tensors()) {
    if (t.role == traces::TensorRole::weight) weight_size = static_cast<int>(traces::element_size(t.dtype));
    if (t.role == traces::TensorRole::weight) break;
  }
  c.gradient_ratio = models::collective_compression_ratio(z, gradient_size);
  c.parameter_ratio = models::collective_compression_ratio(z, weight_size);
  for (const models::Task& task : run.schedule.tasks) {
    if (task.stream != Stream::comm) continue;
    if (task.kind == TaskKind::compress) {
      for (BufferId b : task.creates) {
        if (run.schedule.buffers.at(b).role == MemoryRole::temporary) c.largest_temporary = std::max(c.largest_temporary, run.schedule.buffers.at(b).bytes);
      }
    }
  }
  const bool ddp = run.data_parallel->zero_stage == 0;
  const auto add = [&](const char* what, models::CollectiveKind kind, int ranks) {
    c.bounds.push_back({what, kind, ranks, models::compressed_collective_error_bound(kind, ranks, z.error_bound, z.error_bound_mode, z.all_reduce)});
  };
  // An MoE's expert gradients are reduced over the expert-data group (models::DataParallelSpec::
  // expert_ranks), smaller than the data group under expert parallelism.
  const int expert_ranks = run.layout != nullptr && run.layout->expert > 1
                               ? models::rank_groups(*run.layout, run.cluster.ranks(), traces::ParallelGroup::expert_data).size
                               : c.ranks;
  if (ddp) {
    const bool doubling = z.all_reduce == models::CompressedAllReduce::recursive_doubling;
    add(doubling ? "gradient all-reduce (recursive doubling)" : "gradient all-reduce", models::CollectiveKind::all_reduce, c.ranks);
    if (expert_ranks != c.ranks && expert_ranks > 1) {
      add(doubling ? "expert gradient all-reduce (recursive doubling)" : "expert gradient all-reduce", models::CollectiveKind::all_reduce, expert_ranks);
    }
  } else {
    add("gradient reduce-scatter", models::CollectiveKind::reduce_scatter, c.ranks);
    add("parameter all-gather", models::CollectiveKind::all_gather, c.ranks);
    if (expert_ranks != c.ranks && expert_ranks > 1) {
      add("expert gradient reduce-scatter", models::CollectiveKind::reduce_scatter, expert_ranks);
      add("expert parameter all-gather", models::CollectiveKind::all_gather, expert_ranks);
    }
  }
  return c;
}

// DDP's all-reduces by recursive doubling: each round compresses a rank's whole partial sum.
bool recursive_doubling(const CompressedCollectivesSummary& c) {
  return c.spec->all_reduce == models::CompressedAllReduce::recursive_doubling &&
         std::any_of(c.bounds.begin(), c.bounds.end(), [](const auto& b) { return b.kind == models::CollectiveKind::all_reduce; });
}

// What R, the unit of a relative bound, is the range of (models/collective_compression.hpp).
const char* range_unit(const CompressedCollectivesSummary& c) { return recursive_doubling(c) ? "one rank's data" : "one rank's chunk"; }

std::string error_bound_text(const models::CollectiveCompressionSpec& z, const models::CollectiveErrorBound& b) {
  const char* plural = b.compressions == 1 ? "" : "s";
  if (z.error_bound_mode == ErrorBoundMode::abs) return fmt::format("{:.4g} ({} compression{} of {:.4g})", b.bound, b.compressions, plural, z.error_bound);
  return fmt::format("{:.4g} x R ({} compression{} at eb {:.4g})", b.bound, b.compressions, plural, z.error_bound);
}

void add_compressed_collectives(std::string& out, const SimulationRun& run) {
  const auto c = compressed_collectives(run);
  if (!c) return;
  const models::CollectiveCompressionSpec& z = *c->spec;
  add_line(out, "  compression      collectives through {}{} at error bound {:.4g} ({}): ratio {:.2f} on the gradients, {:.2f} on the parameters; temporaries up to {} "
                "(the codec's time: compression and decompression below)",
           z.profile ? z.codec : std::string("a codec"), z.profile ? fmt::format(" (profile {})", z.profile->name) : std::string(), z.error_bound,
           to_string(z.error_bound_mode), c->gradient_ratio, c->parameter_ratio, format_bytes(c->largest_temporary));
  for (const auto& b : c->bounds) {
    add_line(out, "    worst-case error after the {} over {} ranks: {}", b.what, b.ranks, error_bound_text(z, b.bound));
  }
  if (z.error_bound_mode == ErrorBoundMode::rel) add_line(out, "    (R: the largest value range of {}; models/transforms/README.md, \"Compressed collectives\")", range_unit(*c));
  if (recursive_doubling(*c)) {
    add_line(out, "    (recursive doubling: each rank's result carries its own compressions' errors, so the ranks' results differ, by up to twice the bound)");
  }
}

ordered_json compressed_collectives_json(const SimulationRun& run) {
  const auto c = compressed_collectives(run);
  if (!c) return nullptr;
  const models::CollectiveCompressionSpec& z = *c->spec;
  ordered_json bounds = ordered_json::array();
  for (const auto& b : c->bounds) {
    bounds.push_back({{"collective", b.what}, {"ranks", b.ranks}, {"compressions", b.bound.compressions}, {"bound", b.bound.bound},
                      {"unit", z.error_bound_mode == ErrorBoundMode::abs ? "the data's" : fmt::format("R, the largest value range of {}", range_unit(*c))}});
  }
  return {{"codec", z.profile ? ordered_json(z.codec) : ordered_json(nullptr)},
          {"profile", z.profile ? ordered_json(z.profile->name) : ordered_json(nullptr)},
          {"error_bound", z.error_bound},
          {"error_bound_mode", to_string(z.error_bound_mode)},
          {"all_reduce_algorithm", to_string(z.all_reduce)},
          {"gradient_ratio", c->gradient_ratio},
          {"parameter_ratio", c->parameter_ratio},
          {"largest_temporary_bytes", c->largest_temporary},
          {"error_bounds", bounds}};
}

void add_cluster_results(std::string& out, const SimulationRun& run) {
  if (run.cluster.ranks() == 1) return;
  if (run.layout != nullptr) add_line(out, "  layout           {} (Megatron-LM's rank order tp-cp-ep-dp-pp)", layout_text(*run.layout, run.data_parallel_ranks));
  add_line(out, "  GPUs             {} ({} node{} x {}), {}; global batch {} ({} per GPU{})", run.cluster.ranks(), run.cluster.nodes,
           run.cluster.nodes == 1 ? "" : "s", run.cluster.gpus_per_node, data_parallel_name(run), global_batch(run), run.trace.batch_size(),
           run.accumulation_steps > 1 ? fmt::format(" per micro-step, {} micro-steps", run.accumulation_steps) : std::string());
  const CommunicationTime c = communication_time(run.schedule, run.result);
  add_line(out, "  communication    {} in collectives: {} exposed (compute stream idle), {} hidden behind compute", format_seconds(c.collective_seconds),
           format_seconds(c.exposed_seconds), format_seconds(c.hidden_seconds()));
  if (run.layout != nullptr) {
    for (std::size_t g = 0; g < c.by_group.size(); ++g) {
      const CommunicationTime::Group& group = c.by_group[g];
      if (group.collectives == 0) continue;
      add_line(out, "    {:<14} {} collectives, {}: {} exposed, {} hidden", traces::to_string(static_cast<traces::ParallelGroup>(g)), group.collectives,
               format_seconds(group.collective_seconds), format_seconds(group.exposed_seconds),
               format_seconds(time_difference(group.collective_seconds, group.exposed_seconds)));
    }
  }
  if (const auto u = flops_utilisation(run)) {
    add_line(out, "  FLOPs            {:.1f}% model FLOPs utilisation, {:.1f}% hardware (with recomputation), of the GPU's dense peak", 100 * u->model,
             100 * u->hardware);
  }
  if (const std::int64_t host = run.data_parallel ? models::fsdp_offload_host_bytes(run.trace, *run.data_parallel) : 0; host > 0) {
    // FSDP2's CPU offload pins each rank's shards, gradients and optimizer state on the host.
    const std::int64_t node = host * run.cluster.gpus_per_node;
    const std::int64_t capacity = run.platform.host.memory_bytes;
    add_line(out, "  host memory      {} pinned per GPU by FSDP2's CPU offload (shards, gradients, optimizer state), {} for the node's {} GPUs{}", format_bytes(host),
             format_bytes(node), run.cluster.gpus_per_node,
             capacity <= 0 ? std::string() : node > capacity ? fmt::format(": more than the host's {}", format_bytes(capacity)) : fmt::format(" of the host's {}", format_bytes(capacity)));
  }
  add_compressed_collectives(out, run);
  if (const auto estimate = deepspeed_estimate(run)) {
    add_line(out, "  DeepSpeed        its estimator gives {} of model states per GPU (a formula: no activations, no buffers)", format_bytes(*estimate));
  }
  if (const auto e = scaling_efficiency(run)) {
    add_line(out, "  scaling          {:.1f}% efficiency: {:.2f} samples/s against {} x {:.2f} on one GPU alone", 100 * *e, *samples_per_second(run),
             run.cluster.ranks(), static_cast<double>(run.trace.batch_size() * run.accumulation_steps) / *run.one_gpu_seconds);
  }
}

void add_results(std::string& out, const SimulationRun& run) {
  const SimulationResult& r = run.result;
  const DeviceMemory& d = r.device;
  const std::int64_t usable = d.framework.usable_bytes();
  add_line(out, "FITS");
  add_line(out, "  iteration time   {} ({:.9g} s)", format_seconds(r.iteration_seconds), r.iteration_seconds);
  if (auto rate = samples_per_second(run)) {
    if (run.cluster.ranks() == 1 && run.accumulation_steps > 1) {
      add_line(out, "  throughput       {:.2f} samples/s (batch {} = {} micro-steps of {})", *rate, global_batch(run), run.accumulation_steps,
               run.trace.batch_size());
    } else if (run.cluster.ranks() == 1) {
      add_line(out, "  throughput       {:.2f} samples/s (batch {})", *rate, run.trace.batch_size());
    } else {
      add_line(out, "  throughput       {:.2f} samples/s (global batch {})", *rate, global_batch(run));
    }
  } else {
    add_line(out, "  throughput       n/a (the iteration takes no time)");
  }
  if (run.io != nullptr && run.io->mean_iteration_seconds > 0) {
    // The replay's figures above leave out the I/O; what training sustains is over the mean iteration.
    add_line(out, "  with I/O         {:.2f} samples/s over the mean iteration of {} ({}-bound; \"Data loading and checkpoints\" below)",
             sim::samples_per_second(global_batch(run), run.io->mean_iteration_seconds), format_seconds(run.io->mean_iteration_seconds), to_string(run.io->bound));
  }
  if (run.sequence_bins != nullptr) {
    // The replay above is the longest bin's; training draws a bin per iteration.
    if (const auto mean = run.sequence_bins->mean_iteration_seconds(); mean && *mean > 0) {
      add_line(out, "  over bins        {:.2f} samples/s over the mean iteration of {} across {} sequence bins (\"Sequence bins\" below)",
               sim::samples_per_second(global_batch(run), *mean), format_seconds(*mean), run.sequence_bins->bins.size());
    } else {
      add_line(out, "  over bins        n/a: a shorter sequence bin does not fit (\"Sequence bins\" below)");
    }
  }
  add_cluster_results(out, run);
  add_line(out, "  peak memory      {} reserved ({} bytes), {:.1f}% of the {} PyTorch can use", format_bytes(d.peak_reserved),
           group_digits(d.peak_reserved), percent(d.peak_reserved, usable), format_bytes(usable));
  out += '\n';
  add_line(out, "Peak memory, four ways (PyTorch's CUDA caching allocator modelled over set-up, first and steady iteration;");
  add_line(out, "{}gradients {}, expandable segments {})",
           d.framework.pytorch ? fmt::format("PyTorch {}.{}; ", d.framework.pytorch->major, d.framework.pytorch->minor) : "",
           d.framework.zero_grad == ZeroGrad::set_to_none ? "set to None between iterations" : "zeroed and kept",
           d.framework.expandable_segments ? "on" : "off");
  add_line(out, "  {:<22}{:>14}{:>20}  {}", "metric", "size", "bytes", "what it is");
  add_line(out, "  {:<22}{:>14}{:>20}  {}", "tensors (exact)", format_bytes(r.peak_bytes), group_digits(r.peak_bytes),
           fmt::format("live tensors' bytes, steady iteration, at t = {}", format_seconds(r.peak_time)));
  add_line(out, "  {:<22}{:>14}{:>20}  {}", "allocated", format_bytes(d.peak_allocated), group_digits(d.peak_allocated),
           fmt::format("torch.cuda.max_memory_allocated (blocks, cuBLAS workspace {})", format_bytes(d.framework.cublas_workspace_bytes)));
  add_line(out, "  {:<22}{:>14}{:>20}  {}", "reserved", format_bytes(d.peak_reserved), group_digits(d.peak_reserved),
           "torch.cuda.max_memory_reserved (segments, cache, fragmentation)");
  add_line(out, "  {:<22}{:>14}{:>20}  {}", "device", format_bytes(d.device_peak()), group_digits(d.device_peak()),
           fmt::format("nvidia-smi: reserved + CUDA context {}{}, of {} visible", format_bytes(d.framework.cuda_context_bytes),
                       d.framework.cuda_context_bytes == 0 ? " (the platform gives no gpu.cuda_context)" : "",
                       format_bytes(d.framework.visible_bytes)));
  if (d.framework.cudnn_workspace_bytes > 0) {
    add_line(out, "  each convolution also holds a {} cuDNN workspace while it runs (framework.cudnn_workspace)",
             format_bytes(d.framework.cudnn_workspace_bytes));
  }
  if (d.alloc_retries > 0) {
    add_line(out, "  the allocator had to release its cache {} time(s) to fit (num_alloc_retries): close to the limit", d.alloc_retries);
  }
  out += '\n';

  add_line(out, "Memory at the peak, by role (KiB/MiB/GiB = 2^10/2^20/2^30 bytes)");
  add_role_table(out, r.peak_by_role, "peak");
  out += '\n';

  add_line(out, "Time, by activity (copies and codec kernels overlap compute, so the rows do not sum to the iteration time)");
  add_line(out, "  {:<24}{:>14}{:>12}", "activity", "time", "% of iter.");
  for (const TimeRow& row : time_rows(r)) {
    // A one-GPU run has no communication: its report keeps the rows it always had.
    if ((std::string_view(row.key) == "collective" || std::string_view(row.key) == "host_compute" || shown_when_nonzero(row)) && row.seconds == 0) continue;
    add_line(out, "  {:<24}{:>14}{:>11.1f}%", row.label, format_seconds(row.seconds), percent(row.seconds, r.iteration_seconds));
  }
  add_line(out, "  {:<24}{:>14}{:>11.1f}%", "iteration", format_seconds(r.iteration_seconds), 100.0);
  out += '\n';

  const std::optional<IterationEnergy> with_io = r.energy && run.io != nullptr ? std::optional(iteration_energy(*r.energy, run.io, run.platform)) : std::nullopt;
  detail::add_energy_report(out, r.energy, global_batch(run), with_io ? &*with_io : nullptr);

  const auto largest = largest_live_at_peak(run);
  add_line(out, "Largest buffers live at the peak ({} of {})", largest.size(), r.live_at_peak.size());
  for (BufferId b : largest) {
    const models::Buffer& buffer = run.schedule.buffers.at(b);
    add_line(out, "  {:>12}  {:<16} {}", format_bytes(buffer.bytes), models::to_string(buffer.role), buffer.name);
  }
}

}  // namespace

// model.sequence_bins: each bin's replay (the figures above are the longest bin's).
void add_sequence_bins(std::string& out, const SimulationRun& run, const SequenceBinsResult& bins) {
  out += '\n';
  add_line(out, "Sequence bins (model.sequence_bins, bin size {}: each iteration pads its batch to one bin's longest; the figures above are the", bins.bin_size);
  add_line(out, "longest bin's)");
  add_line(out, "  {:>10}  {:>8}  {:>14}  {:>12}  {:>14}", "padded to", "weight", "iteration", "samples/s", "reserved peak");
  for (const SequenceBinRun& bin : bins.bins) {
    if (!bin.fits) {
      add_line(out, "  {:>10}  {:>7.2f}%  {:>14}", bin.seq_len, 100 * bin.weight, "DOES NOT FIT");
      continue;
    }
    add_line(out, "  {:>10}  {:>7.2f}%  {:>14}  {:>12.2f}  {:>14}", bin.seq_len, 100 * bin.weight, format_seconds(bin.iteration_seconds),
             bin.iteration_seconds > 0 ? sim::samples_per_second(global_batch(run), bin.iteration_seconds) : 0.0, format_bytes(bin.reserved_peak));
  }
  if (const auto mean = bins.mean_iteration_seconds()) add_line(out, "  {:>10}  {:>8}  {:>14}", "mean", "", format_seconds(*mean));
}

std::string report_text(const SimulationRun& run) {
  std::string out;
  add_header(out, run);
  if (run.result.out_of_memory) {
    add_out_of_memory(out, run, *run.result.out_of_memory);
  } else {
    add_results(out, run);
    if (run.sequence_bins != nullptr) add_sequence_bins(out, run, *run.sequence_bins);
    if (run.io != nullptr) out += io_report_text(*run.io);
  }
  return out;
}

std::string report_json(const SimulationRun& run) {
  const SimulationResult& r = run.result;
  ordered_json j = detail::document_header("simulate");
  j["scenario"] = detail::scenario_json(run.scenario_name, run.scenario_source);
  j["model"] = {{"trace", run.trace.name()}, {"batch_size", run.trace.batch_size()}, {"gradient_accumulation_steps", run.accumulation_steps}, {"metadata", ordered_json::parse(traces::metadata_to_json(run.trace))}};
  j["platform"] = detail::platform_json(run.platform);
  const FrameworkOnGpu& framework = run.result.device.framework;
  j["framework"] = {{"pytorch", framework.pytorch ? ordered_json(fmt::format("{}.{}", framework.pytorch->major, framework.pytorch->minor))
                                                  : ordered_json(nullptr)},
                    {"cuda", framework.cuda ? ordered_json(fmt::format("{}.{}", framework.cuda->major, framework.cuda->minor)) : ordered_json(nullptr)},
                    {"attention_kernel", models::to_string(framework.attention_kernel)},
                    {"zero_grad", to_string(framework.zero_grad)},
                    {"expandable_segments", framework.expandable_segments},
                    {"visible_bytes", framework.visible_bytes},
                    {"cuda_context_bytes", framework.cuda_context_bytes},
                    {"cublas_workspace_bytes", framework.cublas_workspace_bytes},
                    {"cudnn_workspace_bytes", framework.cudnn_workspace_bytes},
                    {"usable_bytes", framework.usable_bytes()}};
  // Only under torch.compile, so that an eager run's document keeps its keys.
  if (run.compile) j["framework"]["compile"] = {{"modules", run.compile->modules}, {"fused_kernels", models::fuse_like_inductor(run.trace, *run.compile).groups}};
  // Only with training.float8, likewise.
  if (run.float8) {
    const auto& ops = run.trace.ops();
    j["float8"] = {{"recipe", std::string(models::to_string(run.float8->recipe))},
                   {"skip", run.float8->skip},
                   {"fsdp_all_gather", run.float8->fsdp_all_gather},
                   {"linear_ops", std::count_if(ops.begin(), ops.end(), [&](const traces::Op& op) { return models::in_float8_scope(*run.float8, op); })}};
  }
  if (run.strategy != nullptr) {
    j["strategy"] = detail::strategy_json(*run.strategy);
  } else {
    j["strategy"] = {{"name", run.schedule.strategy.substr(0, run.schedule.strategy.find(':'))}, {"rules", nullptr}};
  }
  j["strategy"]["applied"] = run.schedule.strategy;
  if (!run.schedule.compression.empty()) {
    auto time = [](const models::TimeModel& t) {
      return ordered_json{{"latency_seconds", t.latency},
                          {"bandwidth_bytes_per_second", t.bandwidth},
                          {"provenance", models::to_string(t.provenance)},
                          {"source", t.source}};
    };
    ordered_json list = ordered_json::array();
    for (const models::CompressionModelUse& c : run.schedule.compression) {
      ordered_json ratios = ordered_json::object();
      for (const auto& [cls, ratio] : c.ratios) ratios[std::string(models::to_string(cls))] = ratio;
      list.push_back({{"rule", c.rule},
                      {"profile", c.profile.empty() ? ordered_json(nullptr) : ordered_json(c.profile)},
                      {"profile_source", c.profile_source.empty() ? ordered_json(nullptr) : ordered_json(c.profile_source)},
                      {"codec", c.codec.empty() ? ordered_json(nullptr) : ordered_json(c.codec)},
                      {"error_bound", c.gradient_error_tolerance ? ordered_json("adaptive") : ordered_json(c.error_bound)},
                      {"error_bound_mode", to_string(c.error_bound_mode)},
                      {"gradient_error_tolerance", c.gradient_error_tolerance ? ordered_json(*c.gradient_error_tolerance) : ordered_json(nullptr)},
                      {"fallback_error_bound", c.fallback_error_bound ? ordered_json(*c.fallback_error_bound) : ordered_json(nullptr)},
                      {"compress", time(c.compress)},
                      {"decompress", time(c.decompress)},
                      {"ratio_source", c.ratio_overridden ? "explicit" : "profile"},
                      {"ratio_converted_to_element_size", c.ratio_converted_to_element_size},
                      {"ratio_by_class", ratios}});
      // Counts of the storages compressed and of those whose own value features set their ratio;
      // when the latter is > 0, ratio_by_class holds byte-weighted means (bytes / compressed bytes).
      if (const models::CompressionFeatureUse* f = feature_use(run.schedule, c.rule)) {
        list.back()["storages"] = f->storages;
        list.back()["storages_with_value_features"] = f->with_features;
      }
      // Per storage: its bound (relative to its range, and absolute where the range is known), the
      // ratio it got and the predicted relative weight-gradient error of the layers it enters
      // (null where the model does not cover it or the trace has no statistics).
      ordered_json tensors = ordered_json::array();
      for (const models::TensorBoundUse& t : c.tensors) {
        tensors.push_back({{"tensor", t.tensor},
                           {"bound_from", models::to_string(t.from)},
                           {"why_fallback", t.why_fallback.empty() ? ordered_json(nullptr) : ordered_json(t.why_fallback)},
                           {"relative_error_bound", t.relative_error_bound},
                           {"absolute_error_bound", t.absolute_error_bound ? ordered_json(*t.absolute_error_bound) : ordered_json(nullptr)},
                           {"ratio", t.ratio},
                           {"predicted_relative_gradient_error", t.predicted_gradient_error ? ordered_json(*t.predicted_gradient_error) : ordered_json(nullptr)},
                           {"layers", t.consumers},
                           {"relu_mask_not_modelled", t.relu_mask && !t.positive_mask},
                           {"positive_mask", t.positive_mask},
                           {"statistics_batch_size", t.statistics_batch ? ordered_json(*t.statistics_batch) : ordered_json(nullptr)},
                           {"read_by_recomputation", t.read_by_recomputation}});
      }
      list.back()["tensors"] = std::move(tensors);
    }
    j["compression"] = list;
  }
  j["fits"] = r.fits();
  j["not_applicable"] = nullptr;
  if (r.out_of_memory) {
    const OutOfMemory& oom = *r.out_of_memory;
    ordered_json o;
    o["iteration"] = oom.iteration == 0 ? "setup" : oom.iteration == 1 ? "first" : "steady";
    o["time_seconds"] = oom.time;
    o["task"] = oom.task ? task_json(run, *oom.task) : ordered_json(nullptr);
    o["buffer"] = oom.buffer ? buffer_json(run, *oom.buffer) : ordered_json("cublas_workspace");
    o["requested_bytes"] = oom.requested;
    o["reserved_bytes"] = oom.in_use;
    o["usable_bytes"] = oom.capacity;
    o["live_tensors_by_role_bytes"] = bytes_by_role_json(live_at_the_end(run));
    j["out_of_memory"] = std::move(o);
    // Timings and a peak of an iteration cut short would mislead; there are none.
    j["results"] = nullptr;
  } else {
    j["out_of_memory"] = nullptr;
    ordered_json results;
    results["iteration_seconds"] = r.iteration_seconds;
    const auto rate = samples_per_second(run);
    results["samples_per_second"] = rate ? ordered_json(*rate) : ordered_json(nullptr);
    if (run.sequence_bins != nullptr) {
      // Only with model.sequence_bins: the other runs' documents stay as they were.
      ordered_json bins = ordered_json::array();
      for (const SequenceBinRun& bin : run.sequence_bins->bins) {
        bins.push_back({{"seq_len", bin.seq_len},
                        {"weight", bin.weight},
                        {"fits", bin.fits},
                        {"iteration_seconds", bin.fits ? ordered_json(bin.iteration_seconds) : ordered_json(nullptr)},
                        {"max_memory_reserved_bytes", bin.fits ? ordered_json(bin.reserved_peak) : ordered_json(nullptr)}});
      }
      const auto mean = run.sequence_bins->mean_iteration_seconds();
      results["sequence_bins"] = {{"bin_size", run.sequence_bins->bin_size},
                                  {"bins", std::move(bins)},
                                  {"mean_iteration_seconds", mean ? ordered_json(*mean) : ordered_json(nullptr)},
                                  {"samples_per_second", mean && *mean > 0 ? ordered_json(sim::samples_per_second(global_batch(run), *mean)) : ordered_json(nullptr)}};
    }
    if (run.cluster.ranks() > 1) {
      const CommunicationTime c = communication_time(run.schedule, r);
      const auto e = scaling_efficiency(run);
      results["cluster"] = {{"gpus", run.cluster.ranks()},
                            {"nodes", run.cluster.nodes},
                            {"gpus_per_node", run.cluster.gpus_per_node},
                            {"data_parallel", data_parallel_name(run)},
                            {"zero_stage", run.data_parallel ? run.data_parallel->zero_stage : 0},
                            {"global_batch", global_batch(run)},
                            {"collective_seconds", c.collective_seconds},
                            {"exposed_communication_seconds", c.exposed_seconds},
                            {"hidden_communication_seconds", c.hidden_seconds()},
                            {"layout", layout_json(run)},
                            {"communication_by_group", communication_by_group_json(c)},
                            {"model_flops_utilisation", flops_json(run, false)},
                            {"hardware_flops_utilisation", flops_json(run, true)},
                            {"one_gpu_iteration_seconds", run.one_gpu_seconds ? ordered_json(*run.one_gpu_seconds) : ordered_json(nullptr)},
                            {"scaling_efficiency", e ? ordered_json(*e) : ordered_json(nullptr)}};
      const auto estimate = deepspeed_estimate(run);
      results["cluster"]["deepspeed_estimate_bytes"] = estimate ? ordered_json(*estimate) : ordered_json(nullptr);
      // Only with parallelism.compression: the other runs' documents stay as they were.
      if (ordered_json compressed = compressed_collectives_json(run); !compressed.is_null()) results["cluster"]["compressed_collectives"] = std::move(compressed);
    }
    ordered_json largest = ordered_json::array();
    for (BufferId b : largest_live_at_peak(run)) largest.push_back(buffer_json(run, b));
    const DeviceMemory& d = r.device;
    results["memory"] = {{"peak_bytes", r.peak_bytes},
                         {"max_memory_allocated_bytes", d.peak_allocated},
                         {"max_memory_reserved_bytes", d.peak_reserved},
                         {"device_bytes", d.device_peak()},
                         {"steady_max_memory_allocated_bytes", d.steady_peak_allocated},
                         {"steady_max_memory_reserved_bytes", d.steady_peak_reserved},
                         {"alloc_retries", d.alloc_retries},
                         {"reserved_fraction_of_usable", fraction(d.peak_reserved, d.framework.usable_bytes())},
                         {"peak_time_seconds", r.peak_time},
                         {"peak_by_role_bytes", bytes_by_role_json(r.peak_by_role)},
                         {"buffers_live_at_peak", r.live_at_peak.size()},
                         {"largest_live_at_peak", std::move(largest)}};
    // Copies and codec kernels overlap compute: these do not sum to the iteration time.
    ordered_json seconds = ordered_json::object();
    for (const TimeRow& row : time_rows(r)) {
      if (!shown_when_nonzero(row) || row.seconds != 0) seconds[row.key] = row.seconds;
    }
    results["time_seconds"] = std::move(seconds);
    const std::optional<IterationEnergy> with_io = r.energy && run.io != nullptr ? std::optional(iteration_energy(*r.energy, run.io, run.platform)) : std::nullopt;
    results["energy"] = detail::energy_json(r.energy, global_batch(run), with_io ? &*with_io : nullptr);
    if (run.io != nullptr) results["io"] = ordered_json::parse(io_report_json(*run.io));
    j["results"] = std::move(results);
  }
  return j.dump(2) + "\n";
}

std::string report_text(const NotApplicableRun& run) {
  std::string out;
  add_line(out, "Scenario   {}   (source: {})", run.scenario_name, run.scenario_source);
  add_line(out, "Model      {} · batch {}", run.trace_name, run.batch_size);
  add_line(out, "Platform   {}: {}, {} of GPU memory   (source: {})", run.platform.name, run.platform.gpu.name,
           format_bytes(run.platform.gpu.memory_bytes), run.platform.source);
  add_line(out, "Strategy   {}", run.strategy.name);
  out += '\n';
  add_line(out, "DOES NOT APPLY at batch {}: {}", run.batch_size, run.reason);
  return out;
}

std::string report_json(const NotApplicableRun& run) {
  ordered_json j = detail::document_header("simulate");
  j["scenario"] = detail::scenario_json(run.scenario_name, run.scenario_source);
  j["model"] = {{"trace", run.trace_name}, {"batch_size", run.batch_size}};
  j["platform"] = detail::platform_json(run.platform);
  j["strategy"] = detail::strategy_json(run.strategy);
  j["fits"] = false;
  j["not_applicable"] = run.reason;
  j["out_of_memory"] = nullptr;
  j["results"] = nullptr;
  return j.dump(2) + "\n";
}

SimulationRun simulation_run(const PreparedScenario& prepared, const CompletedRun& completed) {
  SimulationRun run{prepared.scenario().name, prepared.scenario().source, completed.scheduled.trace, prepared.platform(), completed.scheduled.schedule,
                    completed.result,         &completed.scheduled.strategy};
  run.cluster = prepared.cluster_shape();
  run.data_parallel_ranks = prepared.data_parallel_ranks();
  if (prepared.scenario().parallelism && !prepared.scenario().parallelism->layout.is_data_parallel_only()) run.layout = &prepared.scenario().parallelism->layout;
  run.accumulation_steps = prepared.scenario().accumulation_steps;
  if (prepared.scenario().parallelism && run.cluster.ranks() > 1) run.data_parallel = &prepared.scenario().parallelism->data;
  run.one_gpu_seconds = completed.one_gpu_seconds;
  if (completed.io) run.io = &*completed.io;
  if (completed.sequence_bins) run.sequence_bins = &*completed.sequence_bins;
  if (prepared.scenario().framework.compile) run.compile = &*prepared.scenario().framework.compile;
  if (prepared.scenario().float8) run.float8 = &*prepared.scenario().float8;
  return run;
}

std::string report(const PreparedScenario& prepared, const models::StrategySpec& strategy, std::int64_t batch, const RunOutcome& outcome,
                   bool json) {
  if (const auto* completed = std::get_if<CompletedRun>(&outcome)) {
    const SimulationRun view = simulation_run(prepared, *completed);
    return json ? report_json(view) : report_text(view);
  }
  const Scenario& s = prepared.scenario();
  const NotApplicableRun run{s.name, s.source, s.zoo_model ? s.zoo_model->model : s.trace_file->stem().string(), batch, prepared.platform(),
                             strategy, std::get<models::NotApplicable>(outcome).reason};
  return json ? report_json(run) : report_text(run);
}

}  // namespace comptrain::sim

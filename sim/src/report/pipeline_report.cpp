#include "comptrain/sim/report/pipeline_report.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "comptrain/models/parallel_layout.hpp"
#include "comptrain/models/pipeline_schedule.hpp"
#include "comptrain/sim/metrics/communication_time.hpp"
#include "comptrain/sim/metrics/throughput.hpp"
#include "comptrain/sim/report/simulate_report.hpp"
#include "comptrain/sim/report/simulation_timeline.hpp"
#include "comptrain/support/format.hpp"
#include "report/documents.hpp"

namespace comptrain::sim {
namespace {

using nlohmann::ordered_json;

// A stage's model FLOPs over the iteration at its GPU's dense peak (the simulate report's
// model FLOPs utilisation, stage by stage): the forward and backward ops' FLOPs, recomputation
// left out.
double stage_flops_utilisation(const ScheduledRun& stage, const models::Platform& platform, double iteration_seconds) {
  double flops = 0;
  traces::DType dtype = traces::DType::f32;
  for (const models::Task& task : stage.schedule.tasks) {
    if (!task.op || task.kind != models::TaskKind::op) continue;
    const traces::Op& op = stage.trace.op(*task.op);
    if (op.phase == traces::Phase::optimizer) continue;
    flops += static_cast<double>(op.flops.at(stage.trace.batch_size()));
    if (op.kind == traces::OpKind::linear && !op.inputs.empty()) dtype = stage.trace.tensor(op.inputs.front()).dtype;
  }
  const double peak = platform.peak_flops(dtype, false);
  return peak > 0 && iteration_seconds > 0 ? flops / (iteration_seconds * peak) : 0;
}

struct StageView {
  std::vector<LayerRange> chunks;  // the stage's model chunks' layers, in chunk order
  std::int64_t layers = 0;         // all its chunks'
  const ScheduledRun* run = nullptr;
  const SimulationResult* result = nullptr;
  double bubble = 0;
  CommunicationTime communication;
  double mfu = 0;
};

std::vector<StageView> stage_views(const PreparedScenario& prepared, const PipelineRun& run) {
  std::vector<StageView> views;
  for (std::size_t p = 0; p < run.stages.size(); ++p) {
    StageView v;
    v.run = &run.stages[p];
    v.result = &run.result.stages[p];
    v.chunks = run.chunk_layers.at(p);
    for (const LayerRange& chunk : v.chunks) v.layers += chunk.count;
    // The stage's bubble: the iteration less the time its compute stream ran anything (its own
    // kernels and its exposed tensor-parallel collectives; one stream runs one task at a time).
    if (v.result->fits()) {
      double busy = 0;
      for (models::TaskId t = 0; t < v.run->schedule.tasks.size() && t < v.result->tasks.size(); ++t) {
        if (v.run->schedule.tasks[t].stream == models::Stream::compute) busy += v.result->tasks[t].end - v.result->tasks[t].start;
      }
      v.bubble = std::max(0.0, run.result.iteration_seconds - busy);
    }
    if (v.result->fits()) {
      v.communication = communication_time(v.run->schedule, *v.result);
      v.mfu = stage_flops_utilisation(*v.run, prepared.platform(), run.result.iteration_seconds);
    }
    views.push_back(v);
  }
  return views;
}

// A stage's layers as its chunks' ranges, in chunk order: "0-3", or "0-2,24-26" for two chunks.
std::string layer_ranges(const std::vector<LayerRange>& chunks) {
  std::string out;
  for (const LayerRange& chunk : chunks) out += fmt::format("{}{}-{}", out.empty() ? "" : ",", chunk.first, chunk.first + chunk.count - 1);
  return out;
}

std::string layout_line(const models::ParallelLayout& l, int data_parallel, int micro_batches) {
  return fmt::format("TP {}{} x PP {} ({}{}, {} micro-batches, ideal bubble {:.1f}%) x CP {} x EP {} x DP {}", l.tensor,
                     l.tp_comm_overlap ? " (sequence parallel, Userbuffers overlap)" : l.sequence_parallel ? " (sequence parallel)" : "", l.pipeline, models::to_string(l.schedule),
                     l.virtual_stages > 1 ? fmt::format(", {} chunks per stage", l.virtual_stages) : "", micro_batches,
                     100 * models::ideal_bubble_fraction(l.schedule, l.pipeline, micro_batches, l.virtual_stages), l.context, l.expert, data_parallel);
}

std::string text(const PreparedScenario& prepared, const PipelineRun& run, std::int64_t batch) {
  const Scenario& s = prepared.scenario();
  const models::ParallelLayout& layout = s.parallelism->layout;
  const ClusterShape shape = prepared.cluster_shape();
  std::string out;
  const auto line = [&out](const std::string& text) { out += text + "\n"; };
  line(fmt::format("Scenario   {}   (source: {})", s.name, s.source));
  line(fmt::format("Platform   {}: {}", prepared.platform().name, prepared.platform().gpu.name));
  line(fmt::format("GPUs       {} ({} node{} x {}), layout {}", shape.ranks(), shape.nodes, shape.nodes == 1 ? "" : "s", shape.gpus_per_node,
                   layout_line(layout, prepared.data_parallel_ranks(), s.accumulation_steps)));
  line("");
  const std::vector<StageView> views = stage_views(prepared, run);
  if (!run.result.fits()) {
    const int stage = run.result.out_of_memory_stage.value_or(0);
    const OutOfMemory& oom = *run.result.stages[static_cast<std::size_t>(stage)].out_of_memory;
    line(fmt::format("DOES NOT FIT: stage {} could not reserve {} with {} of {} in use", stage, format_bytes(oom.requested), format_bytes(oom.in_use),
                     format_bytes(oom.capacity)));
  } else {
    const std::int64_t global = global_batch(batch, prepared.data_parallel_ranks(), s.accumulation_steps);
    line("FITS");
    line(fmt::format("  iteration time   {} ({:.9g} s)", format_seconds(run.result.iteration_seconds), run.result.iteration_seconds));
    line(fmt::format("  throughput       {:.2f} samples/s (global batch {} = {} micro-batches of {} x {} data-parallel ranks)",
                     samples_per_second(global, run.result.iteration_seconds), global, s.accumulation_steps, batch, prepared.data_parallel_ranks()));
    double mfu = 0;
    for (const StageView& v : views) mfu += v.mfu;
    line(fmt::format("  FLOPs            {:.1f}% model FLOPs utilisation (mean over the stages)", 100 * mfu / static_cast<double>(views.size())));
  }
  line("");
  line("Per stage (its first rank; peaks: live tensors, and PyTorch's max_memory_reserved)");
  line(fmt::format("  {:>5}  {:>11}  {:>12}  {:>12}  {:>10}  {:>10}  {}", "stage", "layers", "exact peak", "reserved", "bubble", "share", "communication"));
  for (std::size_t p = 0; p < views.size(); ++p) {
    const StageView& v = views[p];
    std::string comm;
    for (std::size_t g = 0; g < v.communication.by_group.size(); ++g) {
      const auto& group = v.communication.by_group[g];
      if (group.collectives == 0) continue;
      comm += fmt::format("{}{} {} ({} exposed)", comm.empty() ? "" : ", ", traces::to_string(static_cast<traces::ParallelGroup>(g)),
                          format_seconds(group.collective_seconds), format_seconds(group.exposed_seconds));
    }
    const double p2p = v.result->seconds_by_task_kind[static_cast<std::size_t>(models::TaskKind::send)] +
                       v.result->seconds_by_task_kind[static_cast<std::size_t>(models::TaskKind::recv)];
    if (p2p > 0) comm += fmt::format("{}p2p tasks {} (waits for the peer included)", comm.empty() ? "" : ", ", format_seconds(p2p));
    line(fmt::format("  {:>5}  {:>11}  {:>12}  {:>12}  {:>10}  {:>9.1f}%  {}", p, layer_ranges(v.chunks),
                     format_bytes(v.result->peak_bytes), format_bytes(v.result->device.peak_reserved), format_seconds(v.bubble),
                     run.result.iteration_seconds > 0 ? 100 * v.bubble / run.result.iteration_seconds : 0.0, comm.empty() ? "-" : comm));
  }
  return out;
}

ordered_json json(const PreparedScenario& prepared, const PipelineRun& run, std::int64_t batch) {
  const Scenario& s = prepared.scenario();
  const models::ParallelLayout& l = s.parallelism->layout;
  ordered_json j = detail::document_header("pipeline");
  j["scenario"] = detail::scenario_json(s.name, s.source);
  j["platform"] = detail::platform_json(prepared.platform());
  j["layout"] = {{"tensor", l.tensor},
                 {"pipeline", l.pipeline},
                 {"context", l.context},
                 {"expert", l.expert},
                 {"data", prepared.data_parallel_ranks()},
                 {"sequence_parallel", l.sequence_parallel},
                 {"tp_comm_overlap", l.tp_comm_overlap},
                 {"pipeline_schedule", models::to_string(l.schedule)},
                 {"virtual_stages", l.virtual_stages},
                 {"micro_batches", s.accumulation_steps},
                 {"ideal_bubble_fraction", models::ideal_bubble_fraction(l.schedule, l.pipeline, s.accumulation_steps, l.virtual_stages)}};
  j["fits"] = run.result.fits();
  j["out_of_memory_stage"] = run.result.out_of_memory_stage ? ordered_json(*run.result.out_of_memory_stage) : ordered_json(nullptr);
  const std::int64_t global = global_batch(batch, prepared.data_parallel_ranks(), s.accumulation_steps);
  j["global_batch"] = global;
  j["iteration_seconds"] = run.result.fits() ? ordered_json(run.result.iteration_seconds) : ordered_json(nullptr);
  j["samples_per_second"] = run.result.fits() ? ordered_json(samples_per_second(global, run.result.iteration_seconds)) : ordered_json(nullptr);
  ordered_json stages = ordered_json::array();
  for (const StageView& v : stage_views(prepared, run)) {
    ordered_json groups = ordered_json::object();
    for (std::size_t g = 0; g < v.communication.by_group.size(); ++g) {
      const auto& group = v.communication.by_group[g];
      if (group.collectives == 0) continue;
      groups[std::string(traces::to_string(static_cast<traces::ParallelGroup>(g)))] = {
          {"collectives", group.collectives}, {"collective_seconds", group.collective_seconds}, {"exposed_seconds", group.exposed_seconds}};
    }
    ordered_json chunks = ordered_json::array();
    for (const LayerRange& chunk : v.chunks) chunks.push_back({{"first_layer", chunk.first}, {"layers", chunk.count}});
    stages.push_back({{"first_layer", v.chunks.front().first},
                      {"layers", v.layers},
                      {"chunks", chunks},
                      {"fits", v.result->fits()},
                      {"peak_bytes", v.result->peak_bytes},
                      {"max_memory_allocated_bytes", v.result->device.peak_allocated},
                      {"max_memory_reserved_bytes", v.result->device.peak_reserved},
                      {"device_bytes", v.result->device.device_peak()},
                      {"bubble_seconds", v.bubble},
                      {"send_seconds", v.result->seconds_by_task_kind[static_cast<std::size_t>(models::TaskKind::send)]},
                      {"recv_seconds", v.result->seconds_by_task_kind[static_cast<std::size_t>(models::TaskKind::recv)]},
                      {"communication_by_group", groups},
                      {"model_flops_utilisation", v.mfu}});
  }
  j["stages"] = stages;
  return j;
}

}  // namespace

std::string pipeline_report(const PreparedScenario& prepared, const models::StrategySpec& strategy, std::int64_t batch, const PipelineOutcome& outcome,
                            bool as_json) {
  if (const auto* run = std::get_if<PipelineRun>(&outcome)) return as_json ? json(prepared, *run, batch).dump(2) + "\n" : text(prepared, *run, batch);
  const std::string reason = std::get<models::NotApplicable>(outcome).reason;
  if (as_json) {
    ordered_json j = detail::document_header("pipeline");
    j["scenario"] = detail::scenario_json(prepared.scenario().name, prepared.scenario().source);
    j["strategy"] = strategy.name;
    j["fits"] = false;
    j["not_applicable"] = reason;
    return j.dump(2) + "\n";
  }
  return fmt::format("Scenario   {}\nNOT APPLICABLE: strategy {}: {}\n", prepared.scenario().name, strategy.name, reason);
}

std::string pipeline_perfetto_trace_json(const PreparedScenario& prepared, const PipelineRun& run) {
  const Scenario& s = prepared.scenario();
  std::vector<SimulationRun> views;
  views.reserve(run.stages.size());  // TimelineProcess holds references into it
  std::vector<TimelineProcess> processes;
  for (std::size_t p = 0; p < run.stages.size() && p < run.result.stages.size(); ++p) {
    const ScheduledRun& stage = run.stages[p];
    views.push_back(SimulationRun{s.name, s.source, stage.trace, prepared.platform(), stage.schedule, run.result.stages[p], &stage.strategy});
    processes.push_back({views.back(), fmt::format("stage {} (layers {}) · {} on {} · {}", p, layer_ranges(run.chunk_layers.at(p)), s.name,
                                                   prepared.platform().name, stage.schedule.strategy)});
  }
  return perfetto_trace_json(processes);
}

}  // namespace comptrain::sim

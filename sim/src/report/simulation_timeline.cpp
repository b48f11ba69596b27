// The run's timelines: the memory timeline as CSV (exact bytes per role after each event) and the
// Chrome/Perfetto trace (one track per stream, counter tracks for memory per role).

#include "comptrain/sim/report/simulation_timeline.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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

// Which tasks ran to their end. SimulationResult leaves zeros for tasks that never ran; when
// the iteration fits, every task ran. After an out-of-memory stop, a stream's tasks run in
// order, so every task before the last one that got anywhere (a nonzero time) ended, and that
// one ended if it has an end. (A zero-length task at time 0 after which nothing on its stream
// got going is indistinguishable from one that never ran; it is counted as not run.)
std::vector<bool> tasks_that_ran(const SimulationRun& run) {
  const auto& tasks = run.schedule.tasks;
  const auto& timings = run.result.tasks;
  if (run.result.fits()) return std::vector<bool>(tasks.size(), true);
  std::vector<bool> ran(tasks.size(), false);
  for (Stream stream : kStreams) {
    std::vector<TaskId> order;
    for (TaskId t = 0; t < tasks.size(); ++t) {
      if (tasks[t].stream == stream) order.push_back(t);
    }
    std::optional<std::size_t> last_reached;
    for (std::size_t i = 0; i < order.size(); ++i) {
      if (order[i] >= timings.size()) break;
      const TaskTiming& timing = timings[order[i]];
      if (timing.ready != 0 || timing.start != 0 || timing.end != 0) last_reached = i;
    }
    if (!last_reached) continue;
    for (std::size_t i = 0; i < *last_reached; ++i) ran[order[i]] = true;
    const TaskId last = order[*last_reached];
    ran[last] = timings[last].end > 0 && run.result.out_of_memory->task != last;
  }
  return ran;
}

// Chrome threads for streams: tid 1.. in stream order (0 is avoided: some viewers treat it
// as "no thread").
int tid_of(Stream stream) { return static_cast<int>(index_of(stream)) + 1; }

// Timestamps in microseconds, rounded to whole nanoseconds first so that the end of one slice
// and the start of the next, equal in the simulation, are equal in the file (viewers nest
// slices that overlap by a rounding error).
std::int64_t nanoseconds(double seconds) { return std::llround(seconds * 1e9); }
double microseconds(std::int64_t ns) { return static_cast<double>(ns) / 1e3; }

ordered_json complete_event(int pid, const std::string& name, const std::string& category, Stream stream, double start, double end) {
  const std::int64_t begin_ns = nanoseconds(start);
  ordered_json e;
  e["name"] = name;
  e["cat"] = category;
  e["ph"] = "X";
  e["ts"] = microseconds(begin_ns);
  e["dur"] = microseconds(nanoseconds(end) - begin_ns);
  e["pid"] = pid;
  e["tid"] = tid_of(stream);
  return e;
}

ordered_json task_args(const SimulationRun& run, TaskId t) {
  const models::Task& task = run.schedule.tasks[t];
  ordered_json args;
  args["task"] = t;
  if (task.op) {
    const traces::Op& op = run.trace.op(*task.op);
    args["op_index"] = *task.op;
    args["op_name"] = op.name;
    args["op_phase"] = traces::to_string(op.phase);
  }
  if (task.tensor) args["tensor"] = run.trace.tensor(*task.tensor).name;
  if (task.kind == TaskKind::offload || task.kind == TaskKind::prefetch) args["bytes"] = task.bytes;
  ordered_json creates = ordered_json::array();
  std::int64_t created_bytes = 0;
  for (BufferId b : task.creates) {
    const models::Buffer& buffer = run.schedule.buffers.at(b);
    creates.push_back(buffer.name);
    created_bytes += buffer.bytes;
  }
  args["creates"] = std::move(creates);
  args["created_bytes"] = created_bytes;
  return args;
}

}  // namespace

std::string memory_timeline_csv(const SimulationRun& run) {
  std::string out = "time_s";
  for (MemoryRole role : kMemoryRoles) out += "," + role_name(role);
  out += ",total\n";
  const auto rows = live_after_each_event(run);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    // {} is the shortest text that reads back as the same double: full precision.
    out += fmt::format("{}", run.result.memory_events[i].time);
    for (std::int64_t bytes : rows[i]) out += fmt::format(",{}", bytes);
    out += fmt::format(",{}\n", sum(rows[i]));
  }
  return out;
}

namespace {

// One run's events as Chrome process `pid` named `name`: a track per stream it used, a slice per
// task that ran (and a stall before each compute task that waited), its memory counters and its
// out-of-memory instant.
void append_process(std::vector<ordered_json>& events, const SimulationRun& run, int pid, const std::string& name) {
  const SimulationResult& r = run.result;
  const auto& tasks = run.schedule.tasks;
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", name}}}});
  // Keeps the processes (a pipeline's stages) in order rather than the viewer's.
  events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"sort_index", pid}}}});
  std::array<bool, models::kStreamCount> used{};
  for (const models::Task& task : tasks) used[index_of(task.stream)] = true;
  for (Stream stream : kStreams) {
    if (!used[index_of(stream)]) continue;
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", pid},
                      {"tid", tid_of(stream)},
                      {"args", {{"name", models::to_string(stream)}}}});
    // Keeps the tracks in stream order rather than the viewer's (alphabetical) one.
    events.push_back({{"name", "thread_sort_index"},
                      {"ph", "M"},
                      {"pid", pid},
                      {"tid", tid_of(stream)},
                      {"args", {{"sort_index", tid_of(stream)}}}});
  }

  const auto ran = tasks_that_ran(run);
  for (TaskId t = 0; t < tasks.size() && t < r.tasks.size(); ++t) {
    if (!ran[t]) continue;
    const models::Task& task = tasks[t];
    const TaskTiming& timing = r.tasks[t];
    if (task.stream == Stream::compute && timing.start > timing.ready) {
      ordered_json stall = complete_event(pid, "stall", "stall", task.stream, timing.ready, timing.start);
      ordered_json waiting_for = ordered_json::array();
      for (TaskId d : task.after) waiting_for.push_back(tasks.at(d).name);
      stall["args"] = {{"before", task.name}, {"waiting_for", std::move(waiting_for)}};
      events.push_back(std::move(stall));
    }
    ordered_json e = complete_event(pid, task.name, std::string(models::to_string(task.kind)), task.stream, timing.start, timing.end);
    e["args"] = task_args(run, t);
    events.push_back(std::move(e));
  }

  // Counters: one series per role under "memory" (stacked by chrome://tracing; one track per
  // role in Perfetto), and the total as its own counter.
  const auto rows = live_after_each_event(run);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const double ts = microseconds(nanoseconds(r.memory_events[i].time));
    events.push_back({{"name", "memory"}, {"ph", "C"}, {"ts", ts}, {"pid", pid}, {"args", bytes_by_role_json(rows[i])}});
    events.push_back({{"name", "memory total"}, {"ph", "C"}, {"ts", ts}, {"pid", pid}, {"args", {{"bytes", sum(rows[i])}}}});
  }

  if (r.out_of_memory) {
    const OutOfMemory& oom = *r.out_of_memory;
    ordered_json args = {{"buffer", oom.buffer ? run.schedule.buffers.at(*oom.buffer).name : std::string("cuBLAS workspace")},
                         {"requested_bytes", oom.requested},
                         {"reserved_bytes", oom.in_use},
                         {"usable_bytes", oom.capacity}};
    args["task"] = oom.task ? ordered_json(tasks.at(*oom.task).name) : ordered_json(nullptr);
    events.push_back({{"name", "out of memory"},
                      {"cat", "oom"},
                      {"ph", "i"},
                      {"s", "p"},  // a process-wide instant: a line across this run's tracks
                      {"ts", microseconds(nanoseconds(oom.time))},
                      {"pid", pid},
                      {"tid", tid_of(Stream::compute)},
                      {"args", std::move(args)}});
  }
}

// One event per line: valid JSON, yet readable and diffable.
std::string trace_document(const std::vector<ordered_json>& events) {
  std::string out = "{\"traceEvents\": [\n";
  for (std::size_t i = 0; i < events.size(); ++i) {
    out += events[i].dump();
    out += i + 1 < events.size() ? ",\n" : "\n";
  }
  out += "],\n\"displayTimeUnit\": \"ms\"}\n";
  return out;
}

}  // namespace

std::string perfetto_trace_json(const SimulationRun& run) {
  std::vector<ordered_json> events;
  append_process(events, run, 1, fmt::format("{} · {} on {} · {}", run.scenario_name, run.trace.name(), run.platform.name, run.schedule.strategy));
  return trace_document(events);
}

std::string perfetto_trace_json(const std::vector<TimelineProcess>& processes) {
  std::vector<ordered_json> events;
  for (std::size_t i = 0; i < processes.size(); ++i) append_process(events, processes[i].run, static_cast<int>(i) + 1, processes[i].name);
  return trace_document(events);
}

}  // namespace comptrain::sim

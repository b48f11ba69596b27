#include "comptrain/sim/report/simulate_report.hpp"
#include "comptrain/sim/report/simulation_timeline.hpp"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/schedule_builder.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "traces/hand_traces.hpp"
#include "comptrain/support/format.hpp"

namespace comptrain::sim {
namespace {

using models::Buffer;
using models::BufferId;
using models::MemoryRole;
using models::Schedule;
using models::Stream;
using models::Task;
using models::TaskId;
using models::TaskKind;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

// conv1 (forward) saves y for conv1_backward; the optimizer step reads the weight gradient.
traces::Trace mini_trace() {
  traces::testing::HandTrace h;
  const auto x = h.tensor("x", 400, traces::TensorRole::input);
  const auto w = h.tensor("w", 100, traces::TensorRole::weight);
  const auto y = h.tensor("y", 1000, traces::TensorRole::activation);
  const auto dw = h.tensor("dw", 100, traces::TensorRole::gradient);
  h.op("conv1", {x, w}, {y});
  h.op("conv1_backward", {y, x}, {dw}, traces::Phase::backward);
  h.op("sgd", {w, dw}, {}, traces::Phase::optimizer);
  return traces::Trace("mini", 4, h.tensors, h.ops, {{"precision", "fp32"}, {"optimizer", "sgd"}, {"source", "hand"}});
}


using testing::ScheduleBuilder;
using testing::test_platform;

// A trace, platform, schedule and the simulation's result, kept together because
// SimulationRun only refers to them.
struct Fixture {
  traces::Trace trace = mini_trace();
  models::Platform platform;
  Schedule schedule;
  SimulationResult result;

  SimulationRun run() const { return SimulationRun{"unit", "<test>", trace, platform, schedule, result, nullptr}; }
};

// Every task kind and stream: conv1 saves y, which is offloaded and prefetched; x is
// compressed and decompressed; conv1 is recomputed; the backward pass stalls for the prefetch.
Fixture make_every_kind() {
  Fixture f;
  f.platform = test_platform(1'000'000'000);
  ScheduleBuilder b;
  b.s.strategy = "offload y, compress x, recompute conv1";
  const auto w = b.buffer("w", 100, MemoryRole::weight, true);
  const auto state = b.buffer("momentum", 100, MemoryRole::optimizer_state, true);
  const auto x = b.buffer("x", 400'000, MemoryRole::input);
  const auto y = b.buffer("y", 1'000'000, MemoryRole::activation);
  const auto y_back = b.buffer("y (prefetched)", 1'000'000, MemoryRole::prefetch);
  const auto x_small = b.buffer("x (compressed)", 50'000, MemoryRole::compressed);
  const auto x_back = b.buffer("x (decompressed)", 400'000, MemoryRole::activation);
  const auto y_again = b.buffer("y (recomputed)", 1'000'000, MemoryRole::activation);
  const auto dw = b.buffer("dw", 100, MemoryRole::gradient, false, true);
  const auto work = b.buffer("workspace", 3'000, MemoryRole::temporary);

  auto& tasks = b.s.tasks;
  const auto conv = b.task("conv1", TaskKind::op, Stream::compute, 0.002, {x, y}, {w});
  tasks[conv].op = 0;
  const auto off = b.task("offload y", TaskKind::offload, Stream::d2h, 0, {}, {y}, {conv});
  tasks[off].bytes = 10'000'000;  // 1 ms + 1 us
  tasks[off].tensor = 2;
  const auto comp = b.task("compress x", TaskKind::compress, Stream::codec, 0.0005, {x_small}, {x}, {conv});
  tasks[comp].tensor = 0;
  const auto pre = b.task("prefetch y", TaskKind::prefetch, Stream::h2d, 0, {y_back}, {}, {off});
  tasks[pre].bytes = 10'000'000;
  tasks[pre].tensor = 2;
  const auto dec = b.task("decompress x", TaskKind::decompress, Stream::codec, 0.0005, {x_back}, {x_small});
  tasks[dec].tensor = 0;
  const auto re = b.task("conv1 (recompute)", TaskKind::recompute, Stream::compute, 0.0002, {y_again, work}, {w});
  tasks[re].op = 0;
  const auto back = b.task("conv1_backward", TaskKind::op, Stream::compute, 0.001, {dw}, {y_back, x_back, y_again, w}, {pre, dec});
  tasks[back].op = 1;
  const auto step = b.task("sgd", TaskKind::op, Stream::compute, 0.0001, {}, {w, dw, state});
  tasks[step].op = 2;
  f.schedule = std::move(b.s);
  f.result = simulate(f.platform, f.schedule);
  return f;
}

constexpr std::int64_t kMiB = 1 << 20;

// conv1_backward's 20 MiB gradient needs a new 20 MiB segment with 24 MiB reserved (w's 2 MiB
// small segment, x's 12 and y's 10 MiB) of the 40 MiB PyTorch may use: 4 MiB short.
Fixture make_out_of_memory() {
  Fixture f;
  f.platform = test_platform(40 * kMiB);
  ScheduleBuilder b;
  b.s.strategy = "baseline";
  const auto w = b.buffer("w", 100, MemoryRole::weight, true);
  const auto x = b.buffer("x", 12 * kMiB, MemoryRole::input);
  const auto y = b.buffer("y", 10 * kMiB, MemoryRole::activation);
  const auto dw = b.buffer("dw (big)", 20 * kMiB, MemoryRole::gradient, false, true);
  auto& tasks = b.s.tasks;
  const auto conv = b.task("fwd conv1", TaskKind::op, Stream::compute, 0.5, {x, y}, {w});
  tasks[conv].op = 0;
  const auto back = b.task("bwd conv1", TaskKind::op, Stream::compute, 0.5, {dw}, {x, y, w});
  tasks[back].op = 1;
  f.schedule = std::move(b.s);
  f.result = simulate(f.platform, f.schedule, testing::bare_framework(40 * kMiB));
  return f;
}

// Simulated once for the whole suite: each simulate() forks a SimGrid engine.
const Fixture& every_kind() {
  static const Fixture f = make_every_kind();
  return f;
}
const Fixture& out_of_memory() {
  static const Fixture f = make_out_of_memory();
  return f;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, separator)) parts.push_back(part);
  return parts;
}

constexpr std::size_t role_index(MemoryRole role) { return static_cast<std::size_t>(role); }
constexpr std::size_t kind_index(TaskKind kind) { return static_cast<std::size_t>(kind); }

TEST(Outputs, TheFixtureExercisesEveryKindAndStalls) {
  const SimulationResult& r = every_kind().result;
  ASSERT_TRUE(r.fits());
  for (std::size_t k = 0; k < r.seconds_by_task_kind.size(); ++k) {
    // One GPU: no collectives (the cluster fixture below has them), no optimizer offload
    // (tests/sim/cluster_replay_test.cpp has it), no pipeline transfers (the pipeline replay's:
    // tests/sim/engine/pipeline_replay_test.cpp), no framework kernels (FSDP2's copies:
    // tests/models/fsdp_test.cpp).
    if (k == kind_index(TaskKind::collective) || k == kind_index(TaskKind::host_compute) || k == kind_index(TaskKind::send) ||
        k == kind_index(TaskKind::recv) || k == kind_index(TaskKind::framework)) {
      continue;
    }
    EXPECT_GT(r.seconds_by_task_kind[k], 0.0) << models::to_string(static_cast<TaskKind>(k));
  }
  EXPECT_GT(r.compute_stall_seconds, 0.0);
}

TEST(Outputs, TextReportGivesTheKeyFigures) {
  const Fixture& f = every_kind();
  const SimulationResult& r = f.result;
  const std::string text = report_text(f.run());
  EXPECT_THAT(text, HasSubstr("Scenario   unit   (source: <test>)"));
  EXPECT_THAT(text, HasSubstr("mini · batch 4 · precision fp32 · optimizer sgd"));
  EXPECT_THAT(text, HasSubstr("test: TestGPU, " + format_bytes(1'000'000'000)));
  EXPECT_THAT(text, HasSubstr("Strategy   offload y, compress x, recompute conv1"));
  EXPECT_THAT(text, HasSubstr("FITS"));
  EXPECT_THAT(text, Not(HasSubstr("DOES NOT FIT")));
  EXPECT_THAT(text, HasSubstr("iteration time   " + format_seconds(r.iteration_seconds)));
  EXPECT_THAT(text, HasSubstr(fmt::format("{:.2f} samples/s", 4 / r.iteration_seconds)));
  EXPECT_THAT(text, HasSubstr("peak memory      " + format_bytes(r.device.peak_reserved) + " reserved (" + group_digits(r.device.peak_reserved) +
                              " bytes)"));
  EXPECT_THAT(text, HasSubstr(fmt::format("  {:<22}{:>14}{:>20}", "tensors (exact)", format_bytes(r.peak_bytes), group_digits(r.peak_bytes))));
  EXPECT_THAT(text, HasSubstr(fmt::format("  {:<22}{:>14}{:>20}", "reserved", format_bytes(r.device.peak_reserved),
                                          group_digits(r.device.peak_reserved))));
  for (std::size_t i = 0; i < models::kMemoryRoleCount; ++i) {
    EXPECT_THAT(text, HasSubstr(std::string(models::to_string(static_cast<MemoryRole>(i))))) << i;
  }
  for (const char* label : {"compute (op tasks)", "recomputation", "offload copies", "prefetch copies", "compression", "decompression",
                            "compute-stream stalls", "do not sum"}) {
    EXPECT_THAT(text, HasSubstr(label));
  }
  EXPECT_THAT(text, HasSubstr(format_seconds(r.compute_stall_seconds)));
  EXPECT_THAT(text, HasSubstr("Largest buffers live at the peak"));
  for (BufferId b : r.live_at_peak) EXPECT_THAT(text, HasSubstr(f.schedule.buffers[b].name));
}

TEST(Outputs, TextReportSaysWhichTaskRanOutOfMemory) {
  const Fixture& f = out_of_memory();
  ASSERT_FALSE(f.result.fits());
  const std::string text = report_text(f.run());
  EXPECT_THAT(text, HasSubstr("DOES NOT FIT"));
  EXPECT_THAT(text, HasSubstr("#1 'bwd conv1'"));
  EXPECT_THAT(text, HasSubstr("trace op 'conv1_backward' (backward)"));
  EXPECT_THAT(text, HasSubstr("the first iteration"));
  EXPECT_THAT(text, HasSubstr("'dw (big)' (gradient, 20.00 MiB = 20,971,520 bytes)"));
  EXPECT_THAT(text, HasSubstr("new segment 20.00 MiB (20,971,520 bytes) with 24.00 MiB reserved (25,165,824 bytes)"));
  EXPECT_THAT(text, HasSubstr("41,943,040 bytes"));
  EXPECT_THAT(text, HasSubstr("short by    4.00 MiB"));
  EXPECT_THAT(text, HasSubstr(format_seconds(0.5)));
  EXPECT_THAT(text, Not(HasSubstr("iteration time")));
}

TEST(Outputs, TextReportBlamesResidentStateThatDoesNotFit) {
  Fixture f;
  f.platform = test_platform(40 * kMiB);
  ScheduleBuilder b;
  b.buffer("weights", 50 * kMiB, MemoryRole::weight, true);
  b.task("f", TaskKind::op, Stream::compute, 1, {}, {});
  b.s.tasks[0].op = 0;
  f.schedule = std::move(b.s);
  f.result = simulate(f.platform, f.schedule, testing::bare_framework(40 * kMiB));
  const std::string text = report_text(f.run());
  EXPECT_THAT(text, HasSubstr("DOES NOT FIT"));
  EXPECT_THAT(text, HasSubstr("allocated before the first iteration"));
  EXPECT_THAT(text, HasSubstr("'weights' (weight, 50.00 MiB = 52,428,800 bytes)"));
  const json j = json::parse(report_json(f.run()));
  EXPECT_TRUE(j["out_of_memory"]["task"].is_null());
  // Nothing ran: the Perfetto trace has no slices.
  const json p = json::parse(perfetto_trace_json(f.run()));
  EXPECT_TRUE(std::none_of(p["traceEvents"].begin(), p["traceEvents"].end(), [](const json& e) { return e["ph"] == "X"; }));
}

TEST(Outputs, JsonReportHasTheResultsNumbers) {
  const Fixture& f = every_kind();
  const SimulationResult& r = f.result;
  const json j = json::parse(report_json(f.run()));
  EXPECT_EQ(j["scenario"]["name"], "unit");
  EXPECT_EQ(j["model"]["batch_size"], 4);
  EXPECT_EQ(j["model"]["metadata"]["precision"], "fp32");
  EXPECT_EQ(j["platform"]["memory_capacity_bytes"], 1'000'000'000);
  EXPECT_EQ(j["strategy"]["applied"], f.schedule.strategy);
  EXPECT_TRUE(j["strategy"]["rules"].is_null());  // the run gave no StrategySpec
  EXPECT_EQ(j["schema"]["name"], "comptrain.simulate");
  EXPECT_EQ(j["schema"]["version"], 6);
  EXPECT_EQ(j["framework"]["zero_grad"], "set_to_none");
  EXPECT_EQ(j["framework"]["cublas_workspace_bytes"], 8 * kMiB + 128 * 1024);
  EXPECT_EQ(j["results"]["memory"]["max_memory_reserved_bytes"], r.device.peak_reserved);
  EXPECT_EQ(j["results"]["memory"]["device_bytes"], r.device.device_peak());
  EXPECT_TRUE(j["comptrain_version"].is_string());
  EXPECT_EQ(j["fits"], true);
  EXPECT_TRUE(j["out_of_memory"].is_null());
  const json& res = j["results"];
  // Doubles are written with enough digits to read back exactly.
  EXPECT_EQ(res["iteration_seconds"].get<double>(), r.iteration_seconds);
  EXPECT_EQ(res["samples_per_second"].get<double>(), 4 / r.iteration_seconds);
  EXPECT_TRUE(res["memory"]["peak_bytes"].is_number_integer());
  EXPECT_EQ(res["memory"]["peak_bytes"].get<std::int64_t>(), r.peak_bytes);
  EXPECT_EQ(res["memory"]["peak_time_seconds"].get<double>(), r.peak_time);
  EXPECT_EQ(res["memory"]["buffers_live_at_peak"], r.live_at_peak.size());
  std::int64_t by_role = 0;
  for (std::size_t i = 0; i < models::kMemoryRoleCount; ++i) {
    const std::string role(models::to_string(static_cast<MemoryRole>(i)));
    EXPECT_EQ(res["memory"]["peak_by_role_bytes"][role].get<std::int64_t>(), r.peak_by_role[i]) << role;
    by_role += res["memory"]["peak_by_role_bytes"][role].get<std::int64_t>();
  }
  EXPECT_EQ(by_role, r.peak_bytes);
  const json& largest = res["memory"]["largest_live_at_peak"];
  ASSERT_FALSE(largest.empty());
  for (std::size_t i = 1; i < largest.size(); ++i) EXPECT_GE(largest[i - 1]["bytes"], largest[i]["bytes"]);
  const json& seconds = res["time_seconds"];
  EXPECT_EQ(seconds["compute"].get<double>(), r.seconds_by_task_kind[kind_index(TaskKind::op)]);
  EXPECT_EQ(seconds["recompute"].get<double>(), r.seconds_by_task_kind[kind_index(TaskKind::recompute)]);
  EXPECT_EQ(seconds["offload"].get<double>(), r.seconds_by_task_kind[kind_index(TaskKind::offload)]);
  EXPECT_EQ(seconds["prefetch"].get<double>(), r.seconds_by_task_kind[kind_index(TaskKind::prefetch)]);
  EXPECT_EQ(seconds["compress"].get<double>(), r.seconds_by_task_kind[kind_index(TaskKind::compress)]);
  EXPECT_EQ(seconds["decompress"].get<double>(), r.seconds_by_task_kind[kind_index(TaskKind::decompress)]);
  EXPECT_EQ(seconds["compute_stall"].get<double>(), r.compute_stall_seconds);
}

// A profile-driven compress rule's report: one ratio per class, or, where tensors had their own
// value features, the byte-weighted means and how many tensors had them.
TEST(Outputs, CompressionReportSaysWhenRatiosComeFromPerTensorFeatures) {
  Fixture f = every_kind();
  models::CompressionModelUse use;
  use.rule = 1;
  use.profile = "p";
  use.profile_source = "embedded:p";
  use.codec = "szp";
  use.error_bound = 1e-3;
  use.compress.bandwidth = use.decompress.bandwidth = 1e11;
  use.ratios = {{models::TensorClass::post_relu, 3.5}, {models::TensorClass::generic, 2.25}};
  f.schedule.compression = {use};
  f.schedule.compression_features = {models::CompressionFeatureUse{1, 5, 0}};
  std::string text = report_text(f.run());
  EXPECT_THAT(text, HasSubstr("ratio post_relu 3.5, generic 2.25 [fitted ratio model]\n"));
  json j = json::parse(report_json(f.run()));
  EXPECT_EQ(j["compression"][0]["ratio_by_class"]["post_relu"], 3.5);
  EXPECT_EQ(j["compression"][0]["storages"], 5);
  EXPECT_EQ(j["compression"][0]["storages_with_value_features"], 0);

  f.schedule.compression_features = {models::CompressionFeatureUse{1, 5, 3}};
  text = report_text(f.run());
  EXPECT_THAT(text, HasSubstr("ratio post_relu 3.5, generic 2.25 [fitted ratio model; byte-weighted means, 3 of 5 tensors from "
                              "per-tensor features]"));
  j = json::parse(report_json(f.run()));
  EXPECT_EQ(j["compression"][0]["ratio_source"], "profile");
  EXPECT_EQ(j["compression"][0]["storages_with_value_features"], 3);
}

TEST(Outputs, JsonReportDescribesTheOutOfMemory) {
  const Fixture& f = out_of_memory();
  const json j = json::parse(report_json(f.run()));
  EXPECT_EQ(j["fits"], false);
  EXPECT_TRUE(j["results"].is_null());
  const json& o = j["out_of_memory"];
  EXPECT_EQ(o["task"]["index"], 1);
  EXPECT_EQ(o["task"]["name"], "bwd conv1");
  EXPECT_EQ(o["task"]["op"]["name"], "conv1_backward");
  EXPECT_EQ(o["task"]["op"]["phase"], "backward");
  EXPECT_EQ(o["buffer"]["name"], "dw (big)");
  EXPECT_EQ(o["iteration"], "first");
  EXPECT_EQ(o["requested_bytes"], 20 * kMiB);
  EXPECT_EQ(o["reserved_bytes"], 24 * kMiB);
  EXPECT_EQ(o["usable_bytes"], 40 * kMiB);
  EXPECT_EQ(o["time_seconds"].get<double>(), f.result.out_of_memory->time);
  std::int64_t live = 0;
  for (const auto& [role, bytes] : o["live_tensors_by_role_bytes"].items()) live += bytes.get<std::int64_t>();
  EXPECT_EQ(live, 100 + 22 * kMiB);
}

void check_timeline(const Fixture& f) {
  const SimulationResult& r = f.result;
  const auto lines = split(memory_timeline_csv(f.run()), '\n');
  ASSERT_EQ(lines.size(), r.memory_events.size() + 1);
  EXPECT_EQ(lines[0], "time_s,input,weight,weight_copy,buffer,gradient,optimizer_state,activation,compressed,prefetch,temporary,total");
  std::int64_t live = 0;  // the tracker's total, replayed from its events
  std::int64_t max_total = 0;
  for (std::size_t i = 0; i < r.memory_events.size(); ++i) {
    const auto cells = split(lines[i + 1], ',');
    ASSERT_EQ(cells.size(), models::kMemoryRoleCount + 2) << lines[i + 1];
    EXPECT_EQ(std::stod(cells[0]), r.memory_events[i].time) << "full precision";
    std::int64_t row = 0;
    for (std::size_t c = 1; c <= models::kMemoryRoleCount; ++c) row += std::stoll(cells[c]);
    live += r.memory_events[i].delta;
    EXPECT_EQ(std::stoll(cells.back()), row) << lines[i + 1];
    EXPECT_EQ(row, live) << lines[i + 1];
    max_total = std::max(max_total, row);
  }
  EXPECT_EQ(max_total, r.peak_bytes);
}

TEST(Outputs, MemoryTimelineRowsSumToTheTrackerTotals) { check_timeline(every_kind()); }
TEST(Outputs, MemoryTimelineStopsAtTheFailedAllocation) { check_timeline(out_of_memory()); }

TEST(Outputs, MemoryTimelineAtThePeakMatchesThePeakBreakdown) {
  const Fixture& f = every_kind();
  const auto lines = split(memory_timeline_csv(f.run()), '\n');
  const auto peak_row = std::find_if(lines.begin() + 1, lines.end(),
                                     [&](const std::string& line) { return split(line, ',').back() == std::to_string(f.result.peak_bytes); });
  ASSERT_NE(peak_row, lines.end());
  const auto cells = split(*peak_row, ',');
  for (std::size_t i = 0; i < models::kMemoryRoleCount; ++i) EXPECT_EQ(std::stoll(cells[i + 1]), f.result.peak_by_role[i]) << i;
}

// The events of one phase type.
std::vector<json> events_of(const json& trace, const std::string& ph) {
  std::vector<json> out;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == ph) out.push_back(e);
  }
  return out;
}

TEST(Outputs, PerfettoTraceHasOneSlicePerTaskAtItsTimes) {
  const Fixture& f = every_kind();
  const SimulationResult& r = f.result;
  const json trace = json::parse(perfetto_trace_json(f.run()));
  EXPECT_EQ(trace["displayTimeUnit"], "ms");

  std::map<std::string, int> tid_of_thread;
  for (const json& e : events_of(trace, "M")) {
    if (e["name"] == "thread_name") tid_of_thread[e["args"]["name"]] = e["tid"];
  }
  std::vector<std::string> threads;
  for (const auto& [name, tid] : tid_of_thread) threads.push_back(name);
  EXPECT_THAT(threads, ::testing::UnorderedElementsAre("compute", "d2h", "h2d", "codec"));

  std::vector<json> slices;
  double stalls_us = 0;
  for (const json& e : events_of(trace, "X")) {
    if (e["cat"] == "stall") {
      EXPECT_EQ(e["tid"], tid_of_thread["compute"]) << "stalls are on the compute track";
      stalls_us += e["dur"].get<double>();
    } else {
      slices.push_back(e);
    }
  }
  ASSERT_EQ(slices.size(), f.schedule.tasks.size());
  constexpr double kHalfNanosecondInUs = 0.5e-3 + 1e-9;
  for (const json& e : slices) {
    const auto t = e["args"]["task"].get<TaskId>();
    const Task& task = f.schedule.tasks.at(t);
    EXPECT_EQ(e["name"], task.name);
    EXPECT_EQ(e["cat"], models::to_string(task.kind));
    EXPECT_NEAR(e["ts"].get<double>(), r.tasks[t].start * 1e6, kHalfNanosecondInUs) << task.name;
    EXPECT_NEAR(e["dur"].get<double>(), (r.tasks[t].end - r.tasks[t].start) * 1e6, 2 * kHalfNanosecondInUs) << task.name;
    if (task.op) {
      EXPECT_EQ(e["args"]["op_name"], f.trace.op(*task.op).name);
    }
    EXPECT_EQ(e["args"]["creates"].size(), task.creates.size());
  }
  EXPECT_NEAR(stalls_us, r.compute_stall_seconds * 1e6, 1e-2);

  std::size_t memory_counters = 0;
  for (const json& e : events_of(trace, "C")) {
    if (e["name"] != "memory") continue;
    EXPECT_EQ(e["args"].size(), models::kMemoryRoleCount);
    ++memory_counters;
  }
  EXPECT_EQ(memory_counters, r.memory_events.size());
}

// A pipeline's stages (pipeline_perfetto_trace_json): one process per run, in order, each named
// as given, with its own tracks, slices and counters on the shared time axis; a stage cut short
// by its out-of-memory shows its instant in its own process only.
TEST(Outputs, PerfettoTraceOfSeveralRunsHasOneProcessEach) {
  const Fixture& whole = every_kind();
  const Fixture& cut = out_of_memory();
  const SimulationRun first = whole.run();
  const SimulationRun second = cut.run();
  const json trace = json::parse(perfetto_trace_json(std::vector<TimelineProcess>{{first, "stage 0"}, {second, "stage 1"}}));
  std::map<int, std::string> names;
  std::map<int, int> sort_index;
  for (const json& e : events_of(trace, "M")) {
    if (e["name"] == "process_name") names[e["pid"].get<int>()] = e["args"]["name"];
    if (e["name"] == "process_sort_index") sort_index[e["pid"].get<int>()] = e["args"]["sort_index"];
  }
  EXPECT_EQ(names, (std::map<int, std::string>{{1, "stage 0"}, {2, "stage 1"}}));
  EXPECT_EQ(sort_index, (std::map<int, int>{{1, 1}, {2, 2}}));
  std::map<int, std::size_t> slices;
  for (const json& e : events_of(trace, "X")) {
    if (e["cat"] != "stall") ++slices[e["pid"].get<int>()];
  }
  EXPECT_EQ(slices[1], whole.schedule.tasks.size());
  EXPECT_EQ(slices[2], 1u);  // the tasks that ended before the out-of-memory
  const auto instants = events_of(trace, "i");
  ASSERT_EQ(instants.size(), 1u);
  EXPECT_EQ(instants[0]["pid"], 2);
  EXPECT_EQ(instants[0]["s"], "p");
  std::map<int, std::size_t> counters;
  for (const json& e : events_of(trace, "C")) {
    if (e["name"] == "memory") ++counters[e["pid"].get<int>()];
  }
  EXPECT_EQ(counters[1], whole.result.memory_events.size());
  EXPECT_EQ(counters[2], cut.result.memory_events.size());
}

TEST(Outputs, PerfettoTraceShowsOnlyTheTasksThatEndedBeforeTheOutOfMemory) {
  const Fixture& f = out_of_memory();
  const json trace = json::parse(perfetto_trace_json(f.run()));
  const auto slices = events_of(trace, "X");
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_EQ(slices[0]["name"], "fwd conv1");
  const auto instants = events_of(trace, "i");
  ASSERT_EQ(instants.size(), 1u);
  EXPECT_EQ(instants[0]["args"]["task"], "bwd conv1");
  EXPECT_DOUBLE_EQ(instants[0]["ts"].get<double>(), 0.5e6);
}

TEST(Outputs, OutputsAreDeterministic) {
  const Fixture& f = every_kind();
  EXPECT_EQ(perfetto_trace_json(f.run()), perfetto_trace_json(f.run()));
  EXPECT_EQ(report_json(f.run()), report_json(f.run()));
}

}  // namespace
}  // namespace comptrain::sim

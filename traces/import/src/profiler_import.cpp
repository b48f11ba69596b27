// PyTorch profiler Chrome traces (torch.profiler.profile(...).export_chrome_trace).
//
// Gives: the ops with their durations (CPU ops; with CUDA, the kernels they launched, matched
// by "External id"), FLOPs when recorded with with_flops=True, and the allocator's "[memory]"
// events (a per-device allocated-bytes timeline and its peak).
// Lacks: tensors and their data flow (so ops are chained in the recorded order), which tensors
// autograd saves, bytes moved, and batch scaling.

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>
#include <string>
#include <vector>

#include "importers.hpp"

namespace comptrain::trace_import::detail {

namespace {

struct Span {
  std::size_t event = 0;  // index in traceEvents
  std::string name;
  std::string category;
  std::int64_t pid = 0, tid = 0;
  double ts = 0, dur = 0;  // microseconds
  std::int64_t flops = 0;
  std::optional<std::int64_t> external_id;
};

// The legacy autograd profiler (builds without Kineto) writes its ops without a category.
bool is_op_category(const std::string& c) { return c.empty() || c == "cpu_op" || c == "operator" || c == "Operator"; }
bool is_annotation_category(const std::string& c) { return c == "user_annotation" || c == "cpu_op_annotation"; }
bool is_kernel_category(const std::string& c) { return c == "kernel" || c == "gpu_memcpy" || c == "gpu_memset"; }

// One "[memory]" instant event.
struct MemoryEvent {
  double ts = 0;  // microseconds
  std::int64_t bytes = 0;             // + allocated, - freed
  std::optional<std::int64_t> total;  // "Total Allocated" after the event, when recorded
  std::string path;                   // of the event's args, for errors
  std::string ts_path;
};

std::int64_t id_field(const JsonInput& in, const json& event, const std::string& path, const char* key) {
  const json* value = in.find(event, key);
  if (value == nullptr) return 0;
  if (value->is_string()) return 0;  // Chrome allows string pids ("Spans"); they only group events
  return in.integer(*value, child(path, key));
}

// Each device's allocator timeline, from its "[memory]" events.
std::vector<MemoryTimeline> memory_timelines(std::map<std::string, std::vector<MemoryEvent>>& memory_events, const JsonInput& in) {
  std::vector<MemoryTimeline> memory;
  for (auto& [dev, list] : memory_events) {
    std::stable_sort(list.begin(), list.end(), [](const MemoryEvent& a, const MemoryEvent& b) { return a.ts < b.ts; });
    MemoryTimeline timeline;
    timeline.device = dev;
    const double t0 = list.front().ts;
    // "Total Allocated" (after the event) is authoritative when present: it includes what was
    // allocated before profiling started.
    if (const MemoryEvent& first = list.front(); first.total) {
      timeline.baseline = in.subtract(*first.total, first.bytes, child(first.path, "Bytes"),
                                      "the bytes allocated before the first event (Total Allocated - Bytes)");
      if (timeline.baseline < 0) {
        in.fail(child(first.path, "Bytes"),
                "the event allocates " + std::to_string(first.bytes) + " bytes but leaves only " + std::to_string(*first.total) +
                    " allocated (Total Allocated), so " + std::to_string(timeline.baseline) + " bytes were allocated before it",
                "Bytes no larger than Total Allocated");
      }
    }
    std::int64_t running = timeline.baseline;
    timeline.peak = running;
    for (const MemoryEvent& event : list) {
      running = event.total ? *event.total : in.add(running, event.bytes, child(event.path, "Bytes"), "the bytes allocated on " + dev);
      const double t = in.finite(event.ts - t0, event.ts_path, "the time since the first event") * 1e-6;
      timeline.samples.emplace_back(t, running);
      if (running > timeline.peak) {
        timeline.peak = running;
        timeline.peak_time = t;
      }
    }
    timeline.events = static_cast<std::int64_t>(list.size());
    memory.push_back(std::move(timeline));
  }
  return memory;
}

}  // namespace

ImportResult import_profiler(const json& document, const JsonInput& in, const ImportOptions& options) {
  const json* events_ptr = document.is_array() ? &document : &in.member(document, "", "traceEvents");
  const std::string events_path = document.is_array() ? "" : "/traceEvents";
  const json& events = in.array(*events_ptr, events_path);

  std::vector<Span> ops, annotations, kernels;
  std::map<std::string, std::vector<MemoryEvent>> memory_events;  // per device
  for (std::size_t i = 0; i < events.size(); ++i) {
    const std::string path = child(events_path, i);
    const json& event = in.object(events[i], path);
    const std::string ph = in.string(in.member(event, path, "ph"), child(path, "ph"));
    const json* cat = in.find(event, "cat");
    const std::string category = cat ? in.string(*cat, child(path, "cat")) : "";
    if (ph == "X") {
      Span span;
      span.event = i;
      span.name = in.string(in.member(event, path, "name"), child(path, "name"));
      span.category = category;
      span.pid = id_field(in, event, path, "pid");
      span.tid = id_field(in, event, path, "tid");
      span.ts = in.number(in.member(event, path, "ts"), child(path, "ts"));
      span.dur = in.number(in.member(event, path, "dur"), child(path, "dur"));
      if (span.dur < 0) in.fail(child(path, "dur"), "negative duration", "a duration >= 0 (microseconds)");
      // Nesting compares ts + dur, which must not round to infinity.
      in.finite(span.ts + span.dur, child(path, "dur"), "the span's end (ts + dur)");
      if (const json* args = in.find(event, "args")) {
        in.object(*args, child(path, "args"));
        if (const json* f = in.find(*args, "flops")) span.flops = in.non_negative(*f, child(child(path, "args"), "flops"));
        if (const json* e = in.find(*args, "External id")) span.external_id = in.integer(*e, child(child(path, "args"), "External id"));
      }
      if (is_op_category(category)) ops.push_back(std::move(span));
      else if (is_annotation_category(category)) annotations.push_back(std::move(span));
      else if (is_kernel_category(category)) kernels.push_back(std::move(span));
    } else if ((ph == "i" || ph == "I") && event.contains("name") && event["name"] == "[memory]") {
      const std::string args_path = child(path, "args");
      const json& args = in.object(in.member(event, path, "args"), args_path);
      const double ts = in.number(in.member(event, path, "ts"), child(path, "ts"));
      const std::int64_t bytes = in.integer(in.member(args, args_path, "Bytes"), child(args_path, "Bytes"));
      std::int64_t type = 0, index = -1;
      std::optional<std::int64_t> total;
      if (const json* v = in.find(args, "Device Type")) type = in.integer(*v, child(args_path, "Device Type"));
      if (const json* v = in.find(args, "Device Id")) index = in.integer(*v, child(args_path, "Device Id"));
      // The allocator's total is a byte count: a negative one is not "absent", it is wrong.
      if (const json* v = in.find(args, "Total Allocated")) total = in.non_negative(*v, child(args_path, "Total Allocated"));
      // c10::DeviceType: 0 CPU, 1 CUDA; others keep their number.
      std::string device = type == 0 ? "cpu" : type == 1 ? "cuda" : "device" + std::to_string(type);
      if (index >= 0) device += ":" + std::to_string(index);
      memory_events[device].push_back({ts, bytes, total, args_path, child(path, "ts")});
    }
  }

  // Top-level ops per thread: an op inside another (aten::linear > aten::addmm) is part of it.
  std::sort(ops.begin(), ops.end(), [](const Span& a, const Span& b) {
    return std::tie(a.pid, a.tid, a.ts) < std::tie(b.pid, b.tid, b.ts) || (a.pid == b.pid && a.tid == b.tid && a.ts == b.ts && a.dur > b.dur);
  });
  std::vector<const Span*> top;
  std::map<std::int64_t, const Span*> top_of_external;  // External id -> the top-level op it is part of
  std::map<const Span*, std::int64_t> flops_of;          // FLOPs of a top-level op and the ops inside it
  {
    const Span* open = nullptr;
    for (const Span& s : ops) {
      if (!open || s.pid != open->pid || s.tid != open->tid || s.ts >= open->ts + open->dur) {
        open = &s;
        top.push_back(&s);
      }
      if (s.external_id) top_of_external[*s.external_id] = open;
      // with_flops annotates the inner aten::addmm, not aten::linear
      flops_of[open] = in.add(flops_of[open], s.flops, child(child(child(events_path, s.event), "args"), "flops"),
                              "the FLOPs of " + open->name);
    }
  }
  std::stable_sort(top.begin(), top.end(), [](const Span* a, const Span* b) { return a->ts < b->ts; });
  std::map<const Span*, std::size_t> position;
  for (std::size_t k = 0; k < top.size(); ++k) position[top[k]] = k;
  // With CUDA, an op's time on the device is the sum of the kernels it launched.
  std::vector<double> kernel_us(top.size(), 0.0);
  for (const Span& k : kernels) {
    if (!k.external_id) continue;
    if (const auto it = top_of_external.find(*k.external_id); it != top_of_external.end()) {
      const std::size_t at = position.at(it->second);
      kernel_us[at] = in.finite(kernel_us[at] + k.dur, child(child(events_path, k.event), "dur"),
                                "the kernel time of " + it->second->name);
    }
  }

  std::string device = options.device.empty() ? "cpu" : options.device;
  if (!kernels.empty()) {
    device = "GPU";
    if (const json* props = document.is_object() ? in.find(document, "deviceProperties") : nullptr) {
      if (props->is_array() && !props->empty() && (*props)[0].is_object() && (*props)[0].contains("name") && (*props)[0]["name"].is_string()) {
        device = (*props)[0]["name"].get<std::string>();
      }
    }
  }

  std::vector<traces::Op> trace_ops;
  bool any_flops = false;
  for (std::size_t k = 0; k < top.size(); ++k) {
    const Span& s = *top[k];
    traces::Op op;
    op.id = k;
    op.name = s.name;
    op.kind = kind_from_name(s.name);
    op.phase = phase_from_name(s.name);
    for (const Span& a : annotations) {  // Optimizer.step#SGD.step encloses the optimizer's ops
      if (a.pid == s.pid && a.tid == s.tid && a.ts <= s.ts && s.ts < a.ts + a.dur && a.name.rfind("Optimizer.", 0) == 0) {
        op.phase = traces::Phase::optimizer;
        op.kind = traces::OpKind::optimizer_update;
      }
    }
    op.flops.fixed = flops_of[&s];
    any_flops = any_flops || op.flops.fixed > 0;
    if (k > 0) op.after.push_back(k - 1);  // no data flow is known: keep the recorded order
    const double us = kernels.empty() ? s.dur : kernel_us[k];
    op.measured = traces::MeasuredDuration{us * 1e-6, device, options.batch_size};
    trace_ops.push_back(std::move(op));
  }

  std::vector<MemoryTimeline> memory = memory_timelines(memory_events, in);
  std::vector<std::string> missing;

  std::map<std::string, std::string> metadata{{"source", "pytorch-profiler"}, {"imported_from", in.source()}};
  add_memory_metadata(memory, metadata);
  missing.push_back("tensors and data flow: the profiler records no tensor identities, so the ops are chained in recorded order (after) and no memory is modelled from the trace");
  missing.push_back("saved activations: nothing says which tensors autograd keeps for backward");
  missing.push_back("bytes read and written per op");
  missing.push_back("batch scaling: the batch size is not recorded (taken as " + std::to_string(options.batch_size) + ", --batch) and every quantity is fixed");
  if (!any_flops) missing.push_back("FLOPs (record with torch.profiler.profile(with_flops=True))");
  if (memory.empty()) missing.push_back("allocator events (record with profile_memory=True)");
  if (trace_ops.empty()) missing.push_back("ops: no cpu_op events");
  return ImportResult{Format::pytorch_profiler, traces::Trace(options.name, options.batch_size, {}, std::move(trace_ops), std::move(metadata)), std::move(memory), std::move(missing)};
}

}  // namespace comptrain::trace_import::detail

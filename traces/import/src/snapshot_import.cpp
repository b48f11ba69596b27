// PyTorch CUDA memory snapshots (torch.cuda.memory._snapshot()), in the JSON form MemoryViz
// also reads: {"segments": [...], "device_traces": [[{action, addr, size, ...}, ...], ...]}.
//
// Gives: the allocator's alloc/free history per device -> an allocated-bytes timeline and its
// peak (what was allocated before the history began follows from the final segment state, as
// MemoryViz reconstructs it); each allocation becomes a tensor written by an `alloc` op and
// read by its `free` op, so `comptrain trace show` reproduces the lifetimes.
// Lacks: ops, FLOPs and durations (there is no compute in a snapshot), roles (every allocation
// is a temporary), batch scaling. The pickle that _dump_snapshot writes is read too: import.cpp
// unpickles it (pickle.cpp) into the same JSON.

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "importers.hpp"

namespace comptrain::trace_import::detail {

ImportResult import_snapshot(const json& document, const JsonInput& in, const ImportOptions& options) {
  in.object(document, "");
  const json& segments = in.array(in.member(document, "", "segments"), "/segments");
  const json& device_traces = in.array(in.member(document, "", "device_traces"), "/device_traces");

  // The final state: bytes in blocks still in use, per device.
  std::map<std::int64_t, std::int64_t> final_allocated;
  for (std::size_t s = 0; s < segments.size(); ++s) {
    const std::string path = child("/segments", s);
    const json& segment = in.object(segments[s], path);
    const std::int64_t device = in.integer(in.member(segment, path, "device"), child(path, "device"));
    const json& blocks = in.array(in.member(segment, path, "blocks"), child(path, "blocks"));
    for (std::size_t b = 0; b < blocks.size(); ++b) {
      const std::string bpath = child(child(path, "blocks"), b);
      const json& block = in.object(blocks[b], bpath);
      const std::int64_t size = in.non_negative(in.member(block, bpath, "size"), child(bpath, "size"));
      const std::string state = in.string(in.member(block, bpath, "state"), child(bpath, "state"));
      // The C++ binding writes active_pending_free, the docstring says active_awaiting_free.
      if (state == "active_allocated" || state == "active_pending_free" || state == "active_awaiting_free") {
        final_allocated[device] = in.add(final_allocated[device], size, child(bpath, "size"),
                                         "the bytes in use on device " + std::to_string(device));
      } else if (state != "inactive") {
        in.fail(child(bpath, "state"), "unknown block state \"" + state + "\"",
                "active_allocated, active_pending_free, active_awaiting_free or inactive");
      }
    }
  }

  std::vector<MemoryTimeline> memory;
  std::vector<std::string> missing;
  std::vector<traces::Tensor> tensors;
  std::vector<traces::Op> ops;
  for (std::size_t d = 0; d < device_traces.size(); ++d) {
    const std::string dpath = child("/device_traces", d);
    const json& entries = in.array(device_traces[d], dpath);
    const std::string device = "cuda:" + std::to_string(d);
    std::map<std::int64_t, traces::TensorIndex> live;  // address -> its allocation's tensor
    std::int64_t net = 0;
    struct Delta {
      double t;
      std::int64_t bytes;
      std::size_t entry;  // index in device_traces[d], for errors
    };
    std::vector<Delta> deltas;
    bool have_time = true;
    for (std::size_t e = 0; e < entries.size(); ++e) {
      const std::string path = child(dpath, e);
      const json& entry = in.object(entries[e], path);
      const std::string action = in.string(in.member(entry, path, "action"), child(path, "action"));
      const bool is_alloc = action == "alloc";
      const bool is_free = action == "free_completed" || action == "free";  // "free": older recordings
      if (!is_alloc && !is_free) continue;  // segment_*, free_requested, snapshot, oom, annotate, ...
      const std::int64_t addr = in.integer(in.member(entry, path, "addr"), child(path, "addr"));
      const std::int64_t size = in.non_negative(in.member(entry, path, "size"), child(path, "size"));
      double t = static_cast<double>(e);
      if (const json* time = in.find(entry, "time_us")) {
        t = in.number(*time, child(path, "time_us")) * 1e-6;  // finite; in seconds, differences stay finite
      } else {
        have_time = false;
      }
      char hex[32];
      std::snprintf(hex, sizeof hex, "%llx", static_cast<unsigned long long>(addr));
      traces::Op op;
      op.id = ops.size();
      op.kind = traces::OpKind::other;
      op.phase = traces::Phase::forward;
      if (is_alloc) {
        if (live.contains(addr)) in.fail(path, "address 0x" + std::string(hex) + " allocated twice without a free", "a free before the address is reused");
        traces::Tensor tensor;
        tensor.id = tensors.size();
        tensor.name = device + "@0x" + hex;
        tensor.dtype = traces::DType::u8;
        tensor.shape = {size};
        tensor.role = traces::TensorRole::temporary;
        live[addr] = tensors.size();
        op.name = "alloc " + tensor.name;
        op.outputs.push_back(tensors.size());
        op.bytes_written.fixed = size;
        tensors.push_back(std::move(tensor));
        net = in.add(net, size, child(path, "size"), "the net bytes allocated by the history");
        deltas.push_back({t, size, e});
      } else {
        op.name = "free " + device + "@0x" + hex;
        if (const auto it = live.find(addr); it != live.end()) {
          if (tensors[it->second].shape[0] != size) {
            in.fail(child(path, "size"), "freed " + std::to_string(size) + " bytes at 0x" + hex + ", allocated " +
                                             std::to_string(tensors[it->second].shape[0]),
                    "the size of the allocation");
          }
          op.inputs.push_back(it->second);
          live.erase(it);
        }
        net = in.subtract(net, size, child(path, "size"), "the net bytes allocated by the history");
        deltas.push_back({t, -size, e});
      }
      ops.push_back(std::move(op));
    }
    if (!live.empty()) {
      // Allocations still live when the history ends are read by a last op, so that their
      // lifetime runs to the end rather than ending at their allocation.
      traces::Op end;
      end.id = ops.size();
      end.name = "end of history " + device;
      end.kind = traces::OpKind::other;
      for (const auto& [addr, tensor] : live) end.inputs.push_back(tensor);
      ops.push_back(std::move(end));
    }
    MemoryTimeline timeline;
    timeline.device = device;
    timeline.baseline = in.subtract(final_allocated[static_cast<std::int64_t>(d)], net, dpath,
                                    "the bytes allocated before the history (final state minus the history's net)");
    if (timeline.baseline < 0) {
      missing.push_back(device + ": the history frees more than the final state and the allocations explain (a truncated ring buffer?); baseline taken as 0");
      timeline.baseline = 0;
    }
    std::int64_t running = timeline.baseline;
    timeline.peak = running;
    const double t0 = deltas.empty() ? 0.0 : deltas.front().t;
    for (const auto& [t, delta, e] : deltas) {
      running = in.add(running, delta, child(child(dpath, e), "size"), "the bytes allocated on " + device);
      timeline.samples.emplace_back(t - t0, running);
      if (running > timeline.peak) {
        timeline.peak = running;
        timeline.peak_time = t - t0;
      }
    }
    timeline.events = static_cast<std::int64_t>(deltas.size());
    if (!have_time && !deltas.empty()) missing.push_back(device + ": no time_us in the trace entries; the timeline is indexed by event");
    if (timeline.baseline > 0) {
      // What was allocated before the history began stays for the whole trace.
      traces::Tensor tensor;
      tensor.id = tensors.size();
      tensor.name = device + ".allocated_before_history";
      tensor.dtype = traces::DType::u8;
      tensor.shape = {timeline.baseline};
      tensor.role = traces::TensorRole::buffer;
      tensors.push_back(std::move(tensor));
    }
    memory.push_back(std::move(timeline));
  }

  std::map<std::string, std::string> metadata{{"source", "memory-snapshot"}, {"imported_from", in.source()}};
  add_memory_metadata(memory, metadata);
  missing.push_back("ops, FLOPs and durations: a memory snapshot records allocations only (ops here are the alloc/free events)");
  missing.push_back("tensor roles, dtypes and shapes: every allocation is a temporary byte buffer");
  missing.push_back("batch scaling: recorded at one batch size, every quantity is fixed");
  return ImportResult{Format::memory_snapshot, traces::Trace(options.name, options.batch_size, std::move(tensors), std::move(ops), std::move(metadata)), std::move(memory), std::move(missing)};
}

}  // namespace comptrain::trace_import::detail

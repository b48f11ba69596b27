#include "trace_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <nlohmann/json.hpp>

#include "comptrain/support/format.hpp"
#include "comptrain/traces/trace_json.hpp"

namespace comptrain::cli {
namespace {

using traces::Phase;
using traces::TensorRole;

constexpr const char* role_label(TensorRole role) {
  switch (role) {
    case TensorRole::input: return "input";
    case TensorRole::weight: return "weights";
    case TensorRole::weight_copy: return "weight copies";
    case TensorRole::buffer: return "buffers";
    case TensorRole::gradient: return "gradients";
    case TensorRole::optimizer_state: return "optimizer state";
    case TensorRole::activation: return "saved activations";
    case TensorRole::temporary: return "temporaries";
  }
  return "?";
}

std::string metadata_or(const traces::Trace& trace, const std::string& key, const std::string& fallback) {
  auto it = trace.metadata().find(key);
  return it == trace.metadata().end() ? fallback : it->second;
}

// Storages live at the peak, largest first.
std::vector<traces::TensorIndex> largest_at_peak(const traces::Trace& trace, const traces::TraceSummary& s) {
  std::vector<traces::TensorIndex> live = s.live_at_peak;
  std::stable_sort(live.begin(), live.end(), [&](auto a, auto b) { return trace.tensor(a).bytes() > trace.tensor(b).bytes(); });
  return live;
}

// Appends one formatted line to `out`.
template <typename... Args>
void add_line(std::string& out, fmt::format_string<Args...> format, Args&&... args) {
  out += fmt::format(format, std::forward<Args>(args)...);
  out += '\n';
}

double per_sample(std::int64_t value, std::int64_t batch) { return static_cast<double>(value) / static_cast<double>(batch); }

}  // namespace

std::string trace_report_text(const traces::Trace& trace, const traces::TraceSummary& s, std::size_t largest) {
  std::string out;
  std::string header = fmt::format("{} · batch {}", s.name, s.batch_size);
  for (const char* key : {"precision", "optimizer"}) {
    if (auto it = trace.metadata().find(key); it != trace.metadata().end()) header += fmt::format(" · {} {}", key, it->second);
  }
  add_line(out, "{}   (source: {})", header, metadata_or(trace, "source", "file"));
  out += '\n';
  add_line(out, "  ops          {:>12}   forward {}, backward {}, optimizer {}{}", group_digits(static_cast<std::int64_t>(s.ops)),
       s.ops_by_phase[0], s.ops_by_phase[1], s.ops_by_phase[2],
       s.host_sync_ops == 0 ? std::string() : fmt::format("; {} make the host wait for the GPU (host_sync)", s.host_sync_ops));
  add_line(out, "  tensors      {:>12}", group_digits(static_cast<std::int64_t>(s.tensors)));
  add_line(out, "  parameters   {:>12}", group_digits(s.parameters));
  add_line(out, "  FLOPs        {:>12}   per iteration; forward {}, backward {}, optimizer {}",
       format_flops(static_cast<double>(s.flops())), format_flops(static_cast<double>(s.flops_by_phase[0])),
       format_flops(static_cast<double>(s.flops_by_phase[1])), format_flops(static_cast<double>(s.flops_by_phase[2])));
  add_line(out, "               {:>12}   forward per sample ({:.3f} G multiply-adds; a multiply-add is 2 FLOPs)",
       format_flops(per_sample(s.flops_by_phase[0], s.batch_size)), per_sample(s.flops_by_phase[0], s.batch_size) / 2e9);
  out += '\n';
  add_line(out, "Memory: static accounting (each tensor at its exact size, no allocator overhead; KiB/MiB/GiB = 2^10/2^20/2^30 bytes)");
  add_line(out, "  {:<20}{:>14}{:>16}", "role", "allocated", "live at peak");
  for (TensorRole role : traces::all_tensor_roles()) {
    add_line(out, "  {:<20}{:>14}{:>16}", role_label(role), format_bytes(traces::at(s.allocated_by_role, role)),
         format_bytes(traces::at(s.live_at_peak_by_role, role)));
  }
  const auto& peak_op = trace.op(s.peak_op);
  add_line(out, "  {:<20}{:>14}{:>16}   while op #{} '{}' ({}) runs", "peak", "", format_bytes(s.peak_bytes), s.peak_op, peak_op.name,
       traces::to_string(peak_op.phase));
  out += '\n';
  add_line(out, "  saved for backward: {} in {} tensors; {} per sample", format_bytes(s.saved_activation_bytes),
       s.saved_activation_tensors, format_bytes(s.saved_activation_bytes_per_sample));
  if (largest > 0) {
    const auto live = largest_at_peak(trace, s);
    add_line(out, "  largest tensors live at the peak:");
    for (std::size_t i = 0; i < std::min(largest, live.size()); ++i) {
      const auto& t = trace.tensor(live[i]);
      add_line(out, "    {:>12}  {:<18} {}", format_bytes(t.bytes()), traces::to_string(t.role), t.name);
    }
  }
  return out;
}

std::string trace_report_json(const traces::Trace& trace, const traces::TraceSummary& s) {
  using nlohmann::ordered_json;
  ordered_json j;
  j["name"] = s.name;
  j["batch_size"] = s.batch_size;
  j["metadata"] = nlohmann::ordered_json::parse(traces::metadata_to_json(trace));
  j["ops"] = {{"total", s.ops},
              {"forward", s.ops_by_phase[0]},
              {"backward", s.ops_by_phase[1]},
              {"optimizer", s.ops_by_phase[2]},
              {"host_sync", s.host_sync_ops}};
  j["tensors"] = s.tensors;
  j["parameters"] = s.parameters;
  j["flops"] = {{"total", s.flops()},
                {"forward", s.flops_by_phase[0]},
                {"backward", s.flops_by_phase[1]},
                {"optimizer", s.flops_by_phase[2]}};
  ordered_json allocated = ordered_json::object();
  ordered_json at_peak = ordered_json::object();
  for (TensorRole role : traces::all_tensor_roles()) {
    allocated[std::string(traces::to_string(role))] = traces::at(s.allocated_by_role, role);
    at_peak[std::string(traces::to_string(role))] = traces::at(s.live_at_peak_by_role, role);
  }
  const auto& peak_op = trace.op(s.peak_op);
  ordered_json live = ordered_json::array();
  for (auto t : largest_at_peak(trace, s)) {
    const auto& tensor = trace.tensor(t);
    live.push_back({{"id", tensor.id}, {"name", tensor.name}, {"role", traces::to_string(tensor.role)}, {"bytes", tensor.bytes()}});
  }
  j["memory"] = {{"peak_bytes", s.peak_bytes},
                 {"peak_op", {{"index", s.peak_op}, {"id", peak_op.id}, {"name", peak_op.name}, {"phase", traces::to_string(peak_op.phase)}}},
                 {"allocated_bytes", allocated},
                 {"live_at_peak_bytes", at_peak},
                 {"saved_activation_bytes", s.saved_activation_bytes},
                 {"saved_activation_bytes_per_sample", s.saved_activation_bytes_per_sample},
                 {"saved_activation_tensors", s.saved_activation_tensors},
                 {"live_at_peak", live}};
  return j.dump(2) + "\n";
}

}  // namespace comptrain::cli

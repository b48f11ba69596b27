// Writing a platform as YAML (models/platform_yaml.hpp): the one writer of the format that
// platform.cpp reads, so that a platform written by calibrate reads back with every section.

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <stdexcept>

#include "comptrain/models/platform_yaml.hpp"

namespace comptrain::models {
namespace {

// The comment on the line of the value at `path` in the original platform's text, when the
// value sits alone on its line (a flow mapping's values share one, and its comment is about all
// of them); and the value as written.
class OriginalText {
 public:
  explicit OriginalText(std::string_view text) {
    if (text.empty()) return;
    root_ = YAML::Load(std::string(text));
    std::istringstream in{std::string(text)};
    for (std::string line; std::getline(in, line);) lines_.push_back(line);
  }

  struct Value {
    std::string written;  // the scalar as written (empty for a mapping)
    std::string comment;  // empty when none, or not its own
  };

  std::optional<Value> find(const std::vector<std::string>& path) const {
    if (!root_) return std::nullopt;
    YAML::Node map;
    map.reset(root_);
    for (std::size_t depth = 0;; ++depth) {
      if (!map.IsMap()) return std::nullopt;
      const auto entry = std::find_if(map.begin(), map.end(), [&](const auto& e) { return e.first.template as<std::string>("") == path[depth]; });
      if (entry == map.end()) return std::nullopt;
      if (depth + 1 < path.size()) {
        map.reset(entry->second);  // rebind: `map = ...` would assign into the document
        continue;
      }
      Value v;
      if (entry->second.IsScalar()) v.written = entry->second.Scalar();
      const YAML::Mark key = entry->first.Mark();
      // Alone on its line: no sibling key there, and not a flow mapping opened on it.
      bool alone = !(entry->second.IsMap() && entry->second.size() > 0 && entry->second.begin()->first.Mark().line == key.line);
      for (const auto& other : map) alone = alone && (other.first.Mark().line != key.line || other.first.Mark().pos == key.pos);
      if (alone) v.comment = comment_on(key.line, key.column);
      return v;
    }
  }

 private:
  // The text after the first '#' that starts a comment (outside quotes, after a blank).
  std::string comment_on(int line, int column) const {
    if (line < 0 || static_cast<std::size_t>(line) >= lines_.size()) return {};
    const std::string& text = lines_[static_cast<std::size_t>(line)];
    char quote = 0;
    for (std::size_t i = static_cast<std::size_t>(std::max(0, column)); i < text.size(); ++i) {
      const char c = text[i];
      if (quote) {
        if (c == quote) quote = 0;
      } else if (c == '"' || c == '\'') {
        quote = c;
      } else if (c == '#' && i > 0 && (text[i - 1] == ' ' || text[i - 1] == '\t')) {
        const std::size_t start = text.find_first_not_of(" \t", i + 1);
        return start == std::string::npos ? std::string() : text.substr(start);
      }
    }
    return {};
  }

  YAML::Node root_;
  std::vector<std::string> lines_;
};

std::string bytes_text(std::int64_t bytes) {
  constexpr std::int64_t kMiB = std::int64_t{1} << 20;
  constexpr std::int64_t kGiB = std::int64_t{1} << 30;
  if (bytes % kGiB == 0) return fmt::format("{} GiB", bytes / kGiB);
  if (bytes % kMiB == 0) return fmt::format("{} MiB", bytes / kMiB);
  return fmt::format("{} B", bytes);
}

// fmt's "{}" prints the shortest text that reads back as the same double.
std::string scaled_text(double value, double unit, std::string_view name) { return fmt::format("{} {}", value / unit, name); }

// The emitter with the comments' rules: each value written from the platform or copied as the
// original text has it.
class Writer {
 public:
  explicit Writer(const PlatformYamlComments& comments) : comments_(comments), original_(comments.original_text) {}

  // A value of the platform, `formatted`: as the original text has it, with its comment there,
  // unless the caller comments it.
  void value(const std::vector<std::string>& path, const std::string& formatted) {
    if (comments_.text_for) {
      if (auto text = comments_.text_for(path)) return entry(path.back(), *text, callers(path).value_or(comments_.otherwise));
    }
    if (auto own = callers(path)) return entry(path.back(), formatted, *own);
    const auto original = original_.find(path);
    const std::string text = original && !original->written.empty() ? original->written : formatted;
    entry(path.back(), text, original && !original->comment.empty() ? original->comment : comments_.otherwise);
  }
  // A list of whole numbers (a topology's shape), as a flow sequence; its comment as value's.
  void list(const std::vector<std::string>& path, const std::vector<int>& values) {
    std::optional<std::string> comment = callers(path);
    if (!comment) {
      const auto original = original_.find(path);
      comment = original && !original->comment.empty() ? original->comment : comments_.otherwise;
    }
    out_ << YAML::Key << path.back() << YAML::Value << YAML::Flow << values << YAML::Comment(*comment);
  }
  void begin(const std::vector<std::string>& path) {
    out_ << YAML::Key << path.back();
    std::optional<std::string> comment = callers(path);
    if (!comment) {
      const auto original = original_.find(path);
      if (original) comment = original->comment;
    }
    if (comment && !comment->empty()) out_ << YAML::Comment(*comment);
    out_ << YAML::Value << YAML::BeginMap;
  }
  void end() { out_ << YAML::EndMap; }
  // Whether the caller comments the value at `path` (it is written whatever the platform holds).
  bool commented(const std::vector<std::string>& path) const { return callers(path).has_value(); }
  YAML::Emitter& emitter() { return out_; }

  void entry(const std::string& key, const std::string& text, const std::string& comment) {
    out_ << YAML::Key << key << YAML::Value << text;
    if (!comment.empty()) out_ << YAML::Comment(comment);
  }

 private:
  std::optional<std::string> callers(const std::vector<std::string>& path) const {
    return comments_.comment_for ? comments_.comment_for(path) : std::nullopt;
  }

  const PlatformYamlComments& comments_;
  OriginalText original_;
  YAML::Emitter out_;
};

void write_gpu(Writer& w, const GpuSpec& g) {
  w.begin({"gpu"});
  w.value({"gpu", "name"}, g.name);
  w.value({"gpu", "memory"}, bytes_text(g.memory_bytes));
  w.value({"gpu", "memory_visible"}, bytes_text(g.memory_visible_bytes));
  if (g.cuda_context_bytes > 0) w.value({"gpu", "cuda_context"}, bytes_text(g.cuda_context_bytes));
  if (g.compute_capability_major > 0) {
    w.value({"gpu", "compute_capability"}, fmt::format("{}.{}", g.compute_capability_major, g.compute_capability_minor));
  }
  if (g.sms > 0) w.value({"gpu", "sms"}, std::to_string(g.sms));
  if (g.collective_sms > 0) w.value({"gpu", "collective_sms"}, std::to_string(g.collective_sms));
  w.value({"gpu", "memory_bandwidth"}, scaled_text(g.memory_bandwidth, 1e9, "GB/s"));
  w.begin({"gpu", "peak"});
  w.value({"gpu", "peak", "fp32"}, scaled_text(g.peak_fp32, 1e12, "TFLOP/s"));
  w.value({"gpu", "peak", "tf32"}, scaled_text(g.peak_tf32, 1e12, "TFLOP/s"));
  w.value({"gpu", "peak", "fp16"}, scaled_text(g.peak_fp16, 1e12, "TFLOP/s"));
  w.value({"gpu", "peak", "bf16"}, scaled_text(g.peak_bf16, 1e12, "TFLOP/s"));
  if (g.peak_fp8 > 0) w.value({"gpu", "peak", "fp8"}, scaled_text(g.peak_fp8, 1e12, "TFLOP/s"));
  w.end();
  w.value({"gpu", "launch_overhead"}, scaled_text(g.launch_overhead, 1e-6, "us"));
  if (g.max_power > 0) {
    w.begin({"gpu", "power"});
    w.value({"gpu", "power", "idle"}, scaled_text(g.idle_power, 1, "W"));
    w.value({"gpu", "power", "max"}, scaled_text(g.max_power, 1, "W"));
    if (g.in_job_power != g.idle_power) w.value({"gpu", "power", "in_job"}, scaled_text(g.in_job_power, 1, "W"));
    if (g.memory_bound_power > 0) w.value({"gpu", "power", "memory_bound"}, scaled_text(g.memory_bound_power, 1, "W"));
    if (g.dram_power > 0) w.value({"gpu", "power", "dram"}, scaled_text(g.dram_power, 1, "W"));
    if (g.power_limit > 0) w.value({"gpu", "power", "limit"}, scaled_text(g.power_limit, 1, "W"));
    if (g.floor_clock > 0) {
      w.begin({"gpu", "power", "dvfs"});
      w.value({"gpu", "power", "dvfs", "floor_clock"}, fmt::format("{:.6g}", g.floor_clock));
      w.value({"gpu", "power", "dvfs", "floor_voltage"}, fmt::format("{:.6g}", g.floor_voltage));
      if (g.min_clock > 0) w.value({"gpu", "power", "dvfs", "min_clock"}, fmt::format("{:.6g}", g.min_clock));
      w.end();
    }
    w.end();
  }
  w.end();
}

void write_host(Writer& w, const HostSpec& h) {
  w.begin({"host"});
  w.value({"host", "name"}, h.name);
  w.value({"host", "cores"}, std::to_string(h.cores));
  w.value({"host", "flops"}, scaled_text(h.flops, 1e12, "TFLOP/s"));
  w.value({"host", "memory"}, bytes_text(h.memory_bytes));
  w.value({"host", "memory_bandwidth"}, scaled_text(h.memory_bandwidth, 1e9, "GB/s"));
  if (h.dispatch.forward > 0 || h.dispatch.backward > 0 || h.dispatch.optimizer > 0) {
    w.begin({"host", "dispatch"});
    w.value({"host", "dispatch", "forward"}, scaled_text(h.dispatch.forward, 1e-6, "us"));
    w.value({"host", "dispatch", "backward"}, scaled_text(h.dispatch.backward, 1e-6, "us"));
    w.value({"host", "dispatch", "optimizer"}, scaled_text(h.dispatch.optimizer, 1e-6, "us"));
    w.end();
  }
  if (h.torch_save_bandwidth > 0) w.value({"host", "torch_save_bandwidth"}, scaled_text(h.torch_save_bandwidth, 1e9, "GB/s"));
  if (h.max_power > 0) {
    w.begin({"host", "power"});
    w.value({"host", "power", "idle"}, scaled_text(h.idle_power, 1, "W"));
    w.value({"host", "power", "max"}, scaled_text(h.max_power, 1, "W"));
    w.end();
  }
  w.end();
}

// A link's power, W per direction idle and busy; 0/0 is "not modelled", the reader's default.
void write_link_power(Writer& w, std::vector<std::string> path, double idle, double busy) {
  if (idle == 0 && busy == 0) return;
  path.emplace_back("power");
  w.begin(path);
  path.emplace_back("idle");
  w.value(path, scaled_text(idle, 1, "W"));
  path.back() = "busy";
  w.value(path, scaled_text(busy, 1, "W"));
  w.end();
}

// The link at `path`: {"host_link"}, {"gpu_link"} or {"network", "link"}.
void write_link(Writer& w, const std::vector<std::string>& path, const LinkSpec& l) {
  const auto at = [&path](const char* key) {
    std::vector<std::string> out = path;
    out.emplace_back(key);
    return out;
  };
  w.begin(path);
  w.value(at("name"), l.name);
  w.value(at("bandwidth"), scaled_text(l.bandwidth, 1e9, "GB/s"));
  w.value(at("latency"), scaled_text(l.latency, 1e-6, "us"));
  if (l.pageable_bandwidth > 0) w.value(at("pageable_bandwidth"), scaled_text(l.pageable_bandwidth, 1e9, "GB/s"));
  if (l.checkpoint_copy_bandwidth > 0) w.value(at("checkpoint_copy_bandwidth"), scaled_text(l.checkpoint_copy_bandwidth, 1e9, "GB/s"));
  write_link_power(w, path, l.idle_power, l.busy_power);
  w.end();
}

void write_nic(Writer& w, const NicSpec& nic) {
  w.begin({"nic"});
  w.value({"nic", "name"}, nic.name);
  w.value({"nic", "bandwidth"}, scaled_text(nic.bandwidth, 1e9, "GB/s"));
  w.value({"nic", "latency"}, scaled_text(nic.latency, 1e-6, "us"));
  w.value({"nic", "per_node"}, std::to_string(nic.per_node));
  write_link_power(w, {"nic"}, nic.idle_power, nic.busy_power);
  w.end();
}

void write_network(Writer& w, const NetworkSpec& n) {
  w.begin({"network"});
  w.value({"network", "topology"}, std::string(to_string(n.topology)));
  w.value({"network", "nodes"}, std::to_string(n.nodes));
  switch (n.topology) {
    case NetworkTopology::fat_tree:
      w.begin({"network", "fat_tree"});
      w.value({"network", "fat_tree", "levels"}, std::to_string(n.fat_tree.levels));
      w.list({"network", "fat_tree", "down"}, n.fat_tree.down);
      w.list({"network", "fat_tree", "up"}, n.fat_tree.up);
      w.list({"network", "fat_tree", "links"}, n.fat_tree.links);
      w.end();
      break;
    case NetworkTopology::dragonfly: {
      const DragonflyShape& d = n.dragonfly;
      w.begin({"network", "dragonfly"});
      w.list({"network", "dragonfly", "groups"}, {d.groups, d.group_links});
      w.list({"network", "dragonfly", "chassis"}, {d.chassis, d.chassis_links});
      w.list({"network", "dragonfly", "routers"}, {d.routers, d.router_links});
      w.value({"network", "dragonfly", "nodes"}, std::to_string(d.nodes));
      w.end();
      break;
    }
    case NetworkTopology::torus:
      w.list({"network", "torus"}, n.torus);
      break;
  }
  write_link(w, {"network", "link"}, n.link);
  if (n.routing != NetworkRouting::static_paths) w.value({"network", "routing"}, std::string(to_string(n.routing)));
  w.end();
}

// Written when it differs from what the reader takes for an absent section (bandwidth terms only,
// NCCL's tree constants, NCCL's own algorithm choice); then whole, every key given.
void write_collectives(Writer& w, const CollectiveLatency& c) {
  const CollectiveLatency absent;
  if (c.base == absent.base && c.intra_node_step == absent.intra_node_step && c.inter_node_step == absent.inter_node_step &&
      c.network_overhead == absent.network_overhead && c.tree_base == absent.tree_base && c.tree_intra_node_step == absent.tree_intra_node_step &&
      c.tree_inter_node_step == absent.tree_inter_node_step && c.algorithm == absent.algorithm) {
    return;
  }
  w.begin({"collectives"});
  w.value({"collectives", "base_latency"}, scaled_text(c.base, 1e-6, "us"));
  w.value({"collectives", "intra_node_step"}, scaled_text(c.intra_node_step, 1e-6, "us"));
  w.value({"collectives", "inter_node_step"}, scaled_text(c.inter_node_step, 1e-6, "us"));
  w.value({"collectives", "network_overhead"}, scaled_text(c.network_overhead, 1e-6, "us"));
  w.value({"collectives", "tree_base_latency"}, scaled_text(c.tree_base, 1e-6, "us"));
  w.value({"collectives", "tree_intra_node_step"}, scaled_text(c.tree_intra_node_step, 1e-6, "us"));
  w.value({"collectives", "tree_inter_node_step"}, scaled_text(c.tree_inter_node_step, 1e-6, "us"));
  w.value({"collectives", "algorithm"}, std::string(to_string(c.algorithm)));
  w.end();
}

void write_storage(Writer& w, const StorageSpec& storage) {
  w.begin({"storage"});
  if (const auto& local = storage.local) {
    w.begin({"storage", "local"});
    w.value({"storage", "local", "name"}, local->name);
    w.value({"storage", "local", "read_bandwidth"}, scaled_text(local->read_bandwidth, 1e9, "GB/s"));
    w.value({"storage", "local", "write_bandwidth"}, scaled_text(local->write_bandwidth, 1e9, "GB/s"));
    w.end();
  }
  if (const auto& shared = storage.shared) {
    w.begin({"storage", "shared"});
    w.value({"storage", "shared", "name"}, shared->name);
    w.value({"storage", "shared", "read_bandwidth"}, scaled_text(shared->read_bandwidth, 1e9, "GB/s"));
    w.value({"storage", "shared", "write_bandwidth"}, scaled_text(shared->write_bandwidth, 1e9, "GB/s"));
    w.value({"storage", "shared", "per_node_bandwidth"}, scaled_text(shared->per_node_bandwidth, 1e9, "GB/s"));
    w.value({"storage", "shared", "latency"}, scaled_text(shared->latency, 1e-6, "us"));
    if (shared->checkpoint_overhead > 0) w.value({"storage", "shared", "checkpoint_overhead"}, scaled_text(shared->checkpoint_overhead, 1e-3, "ms"));
    w.end();
  }
  w.end();
}

// `default`, then one entry per op kind that has its own value.
void write_fractions(Writer& w, const std::string& section, double fallback, const std::map<traces::OpKind, double>& per_kind) {
  w.begin({"efficiency", section});
  w.value({"efficiency", section, "default"}, fmt::format("{}", fallback));
  for (const auto& [kind, value] : per_kind) w.value({"efficiency", section, std::string(traces::to_string(kind))}, fmt::format("{}", value));
  w.end();
}

void write_efficiency(Writer& w, const Efficiency& e) {
  w.begin({"efficiency"});
  write_fractions(w, "compute", e.compute_default, e.compute);
  write_fractions(w, "memory", e.memory_default, e.memory);
  // 1 is the reader's value when none is given; a caller's own comment is written whatever it is.
  if (e.tensor_core != 1.0 || w.commented({"efficiency", "tensor_core"})) w.value({"efficiency", "tensor_core"}, fmt::format("{}", e.tensor_core));
  if (e.tensor_core_cuda11) w.value({"efficiency", "tensor_core_cuda11"}, fmt::format("{}", *e.tensor_core_cuda11));
  if (e.conv_wave_loss != 1.0 || w.commented({"efficiency", "conv_wave_loss"})) w.value({"efficiency", "conv_wave_loss"}, fmt::format("{}", e.conv_wave_loss));
  if (e.gemm_k_overhead != 0.0 || w.commented({"efficiency", "gemm_k_overhead"})) w.value({"efficiency", "gemm_k_overhead"}, fmt::format("{}", e.gemm_k_overhead));
  w.end();
}

}  // namespace

std::string platform_to_yaml(const Platform& platform, const PlatformYamlComments& comments) {
  Writer w(comments);
  YAML::Emitter& out = w.emitter();
  if (!comments.header.empty()) out << YAML::Comment(comments.header) << YAML::Newline;
  out << YAML::BeginMap;
  // The name is the written platform's own, never the original file's.
  w.entry("name", platform.name, comments.comment_for ? comments.comment_for({"name"}).value_or(comments.otherwise) : comments.otherwise);
  write_gpu(w, platform.gpu);
  write_host(w, platform.host);
  write_link(w, {"host_link"}, platform.host_link);
  if (platform.gpu_link.bandwidth > 0) write_link(w, {"gpu_link"}, platform.gpu_link);
  w.value({"gpus_per_node"}, std::to_string(platform.gpus_per_node));
  write_efficiency(w, platform.efficiency);
  if (platform.nic) write_nic(w, *platform.nic);
  if (platform.network) write_network(w, *platform.network);
  write_collectives(w, platform.collectives);
  if (platform.storage) write_storage(w, *platform.storage);
  out << YAML::EndMap;
  if (!out.good()) throw std::logic_error("platform_to_yaml: " + out.GetLastError());
  return std::string(out.c_str()) + "\n";
}

}  // namespace comptrain::models

#include "comptrain/models/platform.hpp"
#include "comptrain/models/platform_yaml.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <set>
#include <stdexcept>
#include <string>

#include "embedded_files.hpp"
#include "comptrain/support/atomic_file.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/models/units.hpp"
#include "comptrain/support/yaml_errors.hpp"

namespace comptrain::models {
namespace {

using units::Bounds;
using units::Dimension;
namespace limits = platform_limits;

// Whether 0 is accepted beside the bounds: tf32 and bf16 peaks write "0" for "unsupported".
constexpr const char* kMinEfficiencyText = "0.001";  // platform_limits::min_efficiency
static_assert(limits::min_efficiency == 1e-3);

enum class Zero { rejected, means_unsupported };

std::string join(std::initializer_list<const char*> names) {
  std::string list;
  for (const char* name : names) list += (list.empty() ? "" : ", ") + std::string(name);
  return list;
}

// Reads one platform document and reports every problem as "SOURCE:LINE:COLUMN: message",
// in the style of sim/src/scenario.cpp.
class PlatformReader {
 public:
  explicit PlatformReader(std::string_view source) : source_(source) {}

  Platform read(std::string_view text) {
    YAML::Node root;
    try {
      root = YAML::Load(std::string(text));
    } catch (const YAML::Exception& e) {
      throw InputError(where(e.mark) + "malformed YAML: " + e.msg);
    }
    return read(root);
  }

  // A platform that is one node of a larger document (a scenario's inline platform).
  Platform read(const YAML::Node& root) {
    const std::initializer_list<const char*> top_keys{"name", "gpu", "host", "host_link", "gpu_link", "gpus_per_node", "efficiency"};
    if (!root.IsMap()) throw InputError(where(root.Mark()) + "expected a mapping with the keys " + join(top_keys));
    check_keys(root, "the platform", top_keys);

    Platform platform;
    platform.source = source_;
    platform.name = text_field(root, "name", "");
    platform.gpu = read_gpu(section(root, "gpu", "", {"name", "memory", "memory_visible", "cuda_context", "compute_capability", "memory_bandwidth", "peak",
                                                         "launch_overhead", "sms", "power"}));
    platform.host = read_host(section(root, "host", "", {"name", "cores", "flops", "memory", "memory_bandwidth", "dispatch"}));
    platform.host_link = read_link(section(root, "host_link", "", {"name", "bandwidth", "latency", "pageable_bandwidth"}), "host_link");
    if (root["host_link"]["pageable_bandwidth"]) {
      platform.host_link.pageable_bandwidth =
          quantity(root["host_link"], "pageable_bandwidth", "host_link", Dimension::bandwidth, limits::bandwidth);
      // Staging through pinned buffers only adds work: a pageable copy is never faster.
      if (platform.host_link.pageable_bandwidth > platform.host_link.bandwidth) {
        throw InputError(where(root["host_link"]["pageable_bandwidth"].Mark()) + "'host_link.pageable_bandwidth' (" +
                         shortened(root["host_link"]["pageable_bandwidth"]) +
                         ") exceeds host_link.bandwidth; expected at most the pinned rate (pageable copies are staged through pinned buffers)");
      }
    }
    if (root["gpu_link"]) {
      platform.gpu_link = read_link(section(root, "gpu_link", "", {"name", "bandwidth", "latency"}), "gpu_link");
    }
    platform.gpus_per_node = optional_positive_int(root, "gpus_per_node", "", 1);
    if (root["efficiency"]) platform.efficiency = read_efficiency(section(root, "efficiency", "", {"compute", "memory", "tensor_core"}));
    return platform;
  }

 private:
  GpuSpec read_gpu(const YAML::Node& gpu) const {
    GpuSpec spec;
    spec.name = text_field(gpu, "name", "gpu");
    spec.memory_bytes = byte_count(gpu, "memory", "gpu");
    spec.memory_visible_bytes = spec.memory_bytes;
    if (gpu["memory_visible"]) {
      spec.memory_visible_bytes = byte_count(gpu, "memory_visible", "gpu");
      if (spec.memory_visible_bytes > spec.memory_bytes || spec.memory_visible_bytes < spec.memory_bytes / 2) {
        throw InputError(where(gpu["memory_visible"].Mark()) + "'gpu.memory_visible' (" + shortened(gpu["memory_visible"]) +
                         ") must lie between half of 'gpu.memory' (" + shortened(gpu["memory"]) +
                         ") and all of it: it is the datasheet memory less what the driver keeps");
      }
    }
    if (gpu["cuda_context"]) {
      spec.cuda_context_bytes = byte_count(gpu, "cuda_context", "gpu", 0);
      if (spec.cuda_context_bytes >= spec.memory_visible_bytes / 2) {
        throw InputError(where(gpu["cuda_context"].Mark()) + "'gpu.cuda_context' (" + shortened(gpu["cuda_context"]) +
                         ") must be less than half of the visible memory: a CUDA context takes hundreds of MiB, not the GPU");
      }
    }
    if (const YAML::Node cc = gpu["compute_capability"]) read_compute_capability(cc, spec);
    spec.memory_bandwidth = quantity(gpu, "memory_bandwidth", "gpu", Dimension::bandwidth, limits::bandwidth);
    // Every peak is required, tf32 and bf16 included: an omitted TF32 figure would silently
    // run fp32 matmuls 8x slower on an A100, so "0 = unsupported" must be written out.
    const YAML::Node peak = section(gpu, "peak", "gpu", {"fp32", "tf32", "fp16", "bf16"});
    spec.peak_fp32 = quantity(peak, "fp32", "gpu.peak", Dimension::flop_rate, limits::flop_rate);
    spec.peak_tf32 = quantity(peak, "tf32", "gpu.peak", Dimension::flop_rate, limits::flop_rate, Zero::means_unsupported);
    spec.peak_fp16 = quantity(peak, "fp16", "gpu.peak", Dimension::flop_rate, limits::flop_rate);
    spec.peak_bf16 = quantity(peak, "bf16", "gpu.peak", Dimension::flop_rate, limits::flop_rate, Zero::means_unsupported);
    spec.launch_overhead = quantity(gpu, "launch_overhead", "gpu", Dimension::time, limits::latency);
    // Optional: only the op-time model's wave quantization reads it, and a user-described GPU
    // may not know it (0 = not given, no quantization). 1 to 10000: a GPU has at least one SM,
    // and 10000 is ~75x an H100's 132, so no real or hypothetical-but-sane part is refused
    // while a typo (a core count, 16896) still is.
    if (const YAML::Node sms = gpu["sms"]) {
      constexpr int kMaxSms = 10000;
      int value = 0;
      if (!sms.IsScalar() || !YAML::convert<int>::decode(sms, value) || value < 1 || value > kMaxSms) {
        throw InputError(where(sms.Mark()) + "'gpu.sms' is '" + shortened(sms) +
                         "'; expected a whole number of streaming multiprocessors from 1 to " + std::to_string(kMaxSms) +
                         " (e.g. 108 on an A100)");
      }
      spec.sms = value;
    }
    // Power feeds energy estimates only, and user-described GPUs may not know it: optional,
    // 0/0 meaning unknown.
    if (gpu["power"]) {
      const YAML::Node power = section(gpu, "power", "gpu", {"idle", "max"});
      spec.idle_power = quantity(power, "idle", "gpu.power", Dimension::power, limits::idle_power);
      spec.max_power = quantity(power, "max", "gpu.power", Dimension::power, limits::max_power);
      if (spec.idle_power > spec.max_power) {
        throw InputError(where(power["idle"].Mark()) + "'gpu.power.idle' (" + shortened(power["idle"]) +
                         ") exceeds 'gpu.power.max' (" + shortened(power["max"]) + "); expected idle <= max");
      }
    }
    return spec;
  }

  // "8.0": CUDA's major.minor, each 1-2 digits (major 1 to 99).
  void read_compute_capability(const YAML::Node& node, GpuSpec& spec) const {
    const std::string text = node.IsScalar() ? node.Scalar() : std::string();
    int major = 0;
    int minor = 0;
    char dot = 0;
    int used = 0;
    const bool parsed = text.size() >= 3 && text.size() <= 5 && std::sscanf(text.c_str(), "%2d%c%2d%n", &major, &dot, &minor, &used) == 3 &&
                        dot == '.' && static_cast<std::size_t>(used) == text.size() && major >= 1 && minor >= 0 && std::isdigit(static_cast<unsigned char>(text.back()));
    if (!parsed) {
      throw InputError(where(node.Mark()) + "'gpu.compute_capability' is '" + shortened(node) +
                       "'; expected CUDA's major.minor, e.g. \"7.0\" (V100), \"8.0\" (A100), \"9.0\" (H100)");
    }
    spec.compute_capability_major = major;
    spec.compute_capability_minor = minor;
  }

  HostSpec read_host(const YAML::Node& host) const {
    HostSpec spec;
    spec.name = text_field(host, "name", "host");
    spec.cores = required_positive_int(host, "cores", "host");
    spec.flops = quantity(host, "flops", "host", Dimension::flop_rate, limits::flop_rate);
    spec.memory_bytes = byte_count(host, "memory", "host");
    spec.memory_bandwidth = quantity(host, "memory_bandwidth", "host", Dimension::bandwidth, limits::bandwidth);
    if (host["dispatch"]) {
      const YAML::Node d = section(host, "dispatch", "host", {"forward", "backward", "optimizer"});
      spec.dispatch.forward = quantity(d, "forward", "host.dispatch", Dimension::time, limits::latency);
      spec.dispatch.backward = quantity(d, "backward", "host.dispatch", Dimension::time, limits::latency);
      spec.dispatch.optimizer = quantity(d, "optimizer", "host.dispatch", Dimension::time, limits::latency);
    }
    return spec;
  }

  LinkSpec read_link(const YAML::Node& link, const std::string& section_name) const {
    LinkSpec spec;
    spec.name = text_field(link, "name", section_name);
    spec.bandwidth = quantity(link, "bandwidth", section_name, Dimension::bandwidth, limits::bandwidth);
    spec.latency = quantity(link, "latency", section_name, Dimension::time, limits::latency);
    return spec;
  }

  Efficiency read_efficiency(const YAML::Node& efficiency) const {
    Efficiency result;
    if (efficiency["compute"]) read_fractions(efficiency["compute"], "efficiency.compute", result.compute_default, result.compute);
    if (efficiency["memory"]) read_fractions(efficiency["memory"], "efficiency.memory", result.memory_default, result.memory);
    if (efficiency["tensor_core"]) result.tensor_core = fraction(efficiency["tensor_core"], "efficiency.tensor_core");
    return result;
  }

  // `default` and one entry per op kind, each a fraction of peak in [0.001, 1].
  void read_fractions(const YAML::Node& map, const std::string& field, double& fallback,
                      std::map<traces::OpKind, double>& per_kind) const {
    std::string valid = "default";
    for (const traces::OpKind kind : traces::all_op_kinds()) valid += ", " + std::string(traces::to_string(kind));
    if (!map.IsMap()) throw InputError(where(map.Mark()) + "'" + field + "' must be a mapping from op kinds to fractions of peak; valid keys: " + valid);
    std::set<std::string> seen;
    for (const auto& entry : map) {
      const std::string key = entry.first.as<std::string>("");
      const std::optional<traces::OpKind> kind = traces::parse_op_kind(key);
      if (key != "default" && !kind) {
        throw InputError(where(entry.first.Mark()) + "unknown key '" + key + "' in " + field + "; valid keys: " + valid);
      }
      if (!seen.insert(key).second) throw InputError(where(entry.first.Mark()) + "key '" + key + "' appears twice in " + field);
      const double value = fraction(entry.second, field + "." + key);
      if (kind) {
        per_kind[*kind] = value;
      } else {
        fallback = value;
      }
    }
  }

  double fraction(const YAML::Node& node, const std::string& field) const {
    double value = 0;
    if (!node.IsScalar() || !YAML::convert<double>::decode(node, value) || !std::isfinite(value) ||
        value < limits::min_efficiency || value > 1) {
      throw InputError(where(node.Mark()) + "'" + field + "' is '" + shortened(node) + "'; expected a fraction of peak between " +
                       kMinEfficiencyText + " and 1");
    }
    return value;
  }

  // A required quantity with a unit, in the base unit of `dimension`, within `bounds` (or 0 when
  // `zero` says 0 means unsupported).
  double quantity(const YAML::Node& map, const char* key, const std::string& section_name, Dimension dimension, Bounds bounds,
                  Zero zero = Zero::rejected) const {
    const YAML::Node node = required(map, key, section_name);
    const std::string field = qualified(section_name, key);
    if (!node.IsScalar() || node.Scalar().empty()) {
      throw InputError(where(node.Mark()) + "'" + field + "' must be a quantity in " + std::string(units::base_unit_name(dimension)) +
                       " with a unit (" + units::valid_units(dimension) + ")");
    }
    try {
      if (zero == Zero::means_unsupported && units::parse_quantity(node.Scalar(), dimension) == 0) return 0.0;
      return units::parse_quantity(node.Scalar(), dimension, bounds);
    } catch (const units::OutOfRange& e) {
      throw InputError(where(node.Mark()) + "'" + field + "' is " + e.written() + "; expected " +
                       (zero == Zero::means_unsupported ? "0 (unsupported) or " : "") + e.expected());
    } catch (const std::invalid_argument& e) {
      throw InputError(where(node.Mark()) + "'" + field + "' is '" + shortened(node) + "': " + e.what());
    }
  }

  // A memory size in bytes, rounded to a whole byte, within the platform bounds.
  std::int64_t byte_count(const YAML::Node& map, const char* key, const std::string& section_name,
                          std::int64_t min_bytes = limits::min_memory_bytes) const {
    const YAML::Node node = required(map, key, section_name);
    const std::string field = qualified(section_name, key);
    if (!node.IsScalar() || node.Scalar().empty()) {
      throw InputError(where(node.Mark()) + "'" + field + "' must be a quantity in bytes with a unit (" +
                       units::valid_units(Dimension::bytes) + ")");
    }
    try {
      return units::parse_byte_count(node.Scalar(), min_bytes, limits::max_memory_bytes);
    } catch (const units::OutOfRange& e) {
      throw InputError(where(node.Mark()) + "'" + field + "' is " + e.written() + "; expected " + e.expected());
    } catch (const std::invalid_argument& e) {
      throw InputError(where(node.Mark()) + "'" + field + "' is '" + shortened(node) + "': " + e.what());
    }
  }

  std::string text_field(const YAML::Node& map, const char* key, const std::string& section_name) const {
    const YAML::Node node = required(map, key, section_name);
    if (!node.IsScalar() || node.Scalar().empty()) {
      throw InputError(where(node.Mark()) + "'" + qualified(section_name, key) + "' must be a non-empty string");
    }
    return node.Scalar();
  }

  int required_positive_int(const YAML::Node& map, const char* key, const std::string& section_name) const {
    return positive_int(required(map, key, section_name), qualified(section_name, key));
  }

  int optional_positive_int(const YAML::Node& map, const char* key, const std::string& section_name, int fallback) const {
    const YAML::Node node = map[key];
    return node ? positive_int(node, qualified(section_name, key)) : fallback;
  }

  int positive_int(const YAML::Node& node, const std::string& field) const {
    int value = 0;
    if (!node.IsScalar() || !YAML::convert<int>::decode(node, value) || value < 1) {
      throw InputError(where(node.Mark()) + "'" + field + "' is '" + shortened(node) + "'; expected a positive integer");
    }
    return value;
  }

  // A required mapping whose keys must all be in `valid`.
  YAML::Node section(const YAML::Node& parent, const char* key, const std::string& parent_name,
                     std::initializer_list<const char*> valid) const {
    const YAML::Node node = required(parent, key, parent_name.empty() ? "the platform" : parent_name);
    const std::string name = qualified(parent_name, key);
    if (!node.IsMap()) throw InputError(where(node.Mark()) + "'" + name + "' must be a mapping with the keys " + join(valid));
    check_keys(node, name, valid);
    return node;
  }

  void check_keys(const YAML::Node& map, const std::string& section_name, std::initializer_list<const char*> valid) const {
    yaml::check_keys(source_, map, section_name, valid);
  }

  YAML::Node required(const YAML::Node& map, const char* key, const std::string& section_name) const {
    YAML::Node node = map[key];
    if (!node) {
      throw InputError(where(map.Mark()) + "missing key '" + key + "' in " + (section_name.empty() ? "the platform" : section_name));
    }
    return node;
  }

  static std::string qualified(const std::string& section_name, const char* key) {
    return section_name.empty() ? std::string(key) : section_name + "." + key;
  }

  static std::string describe(const YAML::Node& node) { return node.IsScalar() ? node.Scalar() : std::string("a collection"); }

  // A scalar as written, cut short: a 300-digit number must not fill the message.
  static std::string shortened(const YAML::Node& node) {
    std::string text = describe(node);
    if (text.size() > 40) text = text.substr(0, 37) + "...";
    return text;
  }

  std::string where(const YAML::Mark& mark) const { return yaml::location(source_, mark); }

  std::string source_;
};

}  // namespace

double Efficiency::compute_for(traces::OpKind kind) const {
  const auto it = compute.find(kind);
  return it == compute.end() ? compute_default : it->second;
}

double Efficiency::memory_for(traces::OpKind kind) const {
  const auto it = memory.find(kind);
  return it == memory.end() ? memory_default : it->second;
}

double Platform::peak_flops(traces::DType dtype, bool allow_tf32) const {
  switch (dtype) {
    case traces::DType::f32:
      return allow_tf32 && gpu.peak_tf32 > 0 ? gpu.peak_tf32 : gpu.peak_fp32;
    case traces::DType::f16:
      return gpu.peak_fp16;
    case traces::DType::bf16:
      // Without bf16 units (V100, Maxwell) frameworks still run bf16 by computing in fp32 on the
      // CUDA cores, so the fp32 rate is the honest estimate; an error would make every bf16
      // trace unusable on those GPUs for a what-if that real software can run.
      return gpu.peak_bf16 > 0 ? gpu.peak_bf16 : gpu.peak_fp32;
    case traces::DType::f64:
      // Datacenter GPUs run fp64 at half the fp32 rate (V100 7.8 vs 15.7, A100 9.7 vs 19.5,
      // H100 34 vs 67 TFLOP/s, non-tensor); consumer parts are far slower (GTX TITAN X 1/32),
      // but fp64 training is rare enough that one ratio without a datasheet field is enough.
      return gpu.peak_fp32 / 2;
    case traces::DType::i64:
    case traces::DType::i32:
    case traces::DType::i8:
    case traces::DType::u8:
    case traces::DType::boolean:
      // Integer work in training (indices, masks) is bookkeeping on the CUDA cores.
      return gpu.peak_fp32;
  }
  return gpu.peak_fp32;
}

Platform parse_platform(std::string_view yaml, std::string_view source) { return PlatformReader(source).read(yaml); }

Platform platform_from_yaml(const YAML::Node& node, std::string_view source) { return PlatformReader(source).read(node); }

Platform load_platform_file(const std::filesystem::path& path) { return parse_platform(read_file(path), path.string()); }

std::vector<std::string> builtin_platform_names() { return detail::embedded_names(detail::builtin_platform_sources()); }

Platform builtin_platform(std::string_view name) {
  if (const auto yaml = detail::embedded_text(detail::builtin_platform_sources(), name)) return parse_platform(*yaml, "embedded:" + std::string(name));
  throw InputError("unknown platform '" + std::string(name) + "'; expected one of: " + detail::embedded_name_list(detail::builtin_platform_sources()));
}

std::vector<std::string> builtin_platforms_with_gpu(std::string_view gpu_name) {
  std::vector<std::string> names;
  for (const std::string& name : builtin_platform_names()) {
    if (builtin_platform(name).gpu.name == gpu_name) names.push_back(name);
  }
  return names;
}

}  // namespace comptrain::models

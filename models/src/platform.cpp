#include "comptrain/models/platform.hpp"
#include "comptrain/models/network_size.hpp"
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
#include <vector>

#include "embedded_files.hpp"
#include "comptrain/models/kernel_power.hpp"
#include "comptrain/support/atomic_file.hpp"
#include "comptrain/support/did_you_mean.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/models/units.hpp"
#include "comptrain/support/yaml_reader.hpp"

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
class PlatformReader : public yaml::Reader {
 public:
  explicit PlatformReader(std::string_view source) : yaml::Reader(source) {}

  Platform read(std::string_view text) {
    const YAML::Node root = yaml::load_document(text, source());
    return read(root);
  }

  // A platform that is one node of a larger document (a scenario's inline platform).
  Platform read(const YAML::Node& root) {
    const std::initializer_list<const char*> top_keys{"name",          "gpu",        "host", "host_link", "gpu_link",
                                                      "gpus_per_node", "efficiency", "nic",  "network",   "collectives", "storage"};
    if (!root.IsMap()) throw InputError(where(root.Mark()) + "expected a mapping with the keys " + join(top_keys));
    check_keys(root, "the platform", top_keys);

    Platform platform;
    platform.source = source();
    platform.name = text_field(root, "name", "");
    platform.gpu = read_gpu(section(root, "gpu", "", {"name", "memory", "memory_visible", "cuda_context", "compute_capability", "memory_bandwidth", "peak",
                                                         "launch_overhead", "sms", "collective_sms", "power"}));
    platform.host = read_host(section(root, "host", "", {"name", "cores", "flops", "memory", "memory_bandwidth", "dispatch", "torch_save_bandwidth", "power"}));
    platform.host_link = read_link(section(root, "host_link", "", {"name", "bandwidth", "latency", "pageable_bandwidth", "checkpoint_copy_bandwidth", "power"}),
                                   "host_link");
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
    if (const YAML::Node copy = root["host_link"]["checkpoint_copy_bandwidth"]) {
      platform.host_link.checkpoint_copy_bandwidth =
          quantity(root["host_link"], "checkpoint_copy_bandwidth", "host_link", Dimension::bandwidth, limits::bandwidth);
      // A rate the engine reaches over the link cannot exceed the link's.
      if (platform.host_link.checkpoint_copy_bandwidth > platform.host_link.bandwidth) {
        throw InputError(where(copy.Mark()) + "'host_link.checkpoint_copy_bandwidth' (" + shortened(copy) +
                         ") exceeds host_link.bandwidth; expected at most the link's rate (the checkpoint's copies cross that link)");
      }
    }
    if (root["gpu_link"]) {
      platform.gpu_link = read_link(section(root, "gpu_link", "", {"name", "bandwidth", "latency", "power"}), "gpu_link");
    }
    platform.gpus_per_node = optional_positive_int(root, "gpus_per_node", "", 1);
    if (platform.gpus_per_node > limits::max_gpus_per_node) {
      throw InputError(where(root["gpus_per_node"].Mark()) + "'gpus_per_node' is " + std::to_string(platform.gpus_per_node) + "; expected at most " +
                       std::to_string(limits::max_gpus_per_node) +
                       " (a node's GPUs are routed pair by pair: the largest NVLink domain sold joins 72)");
    }
    if (root["efficiency"]) platform.efficiency = read_efficiency(section(root, "efficiency", "", {"compute", "memory", "tensor_core", "tensor_core_cuda11", "conv_wave_loss", "gemm_k_overhead"}));
    read_cluster(root, platform);
    // gpu.power.limit, once the GPU is read (yaml-cpp throws on a key of a missing node: step by step).
    if (const YAML::Node power = root["gpu"]["power"]; power && power.IsMap() && power["limit"]) {
      const double watts = quantity(power, "limit", "gpu.power", Dimension::power, limits::max_power);
      platform = with_power_limit(std::move(platform), watts, where(power["limit"].Mark()) + "'gpu.power.limit'");
    }
    if (root["storage"]) platform.storage = read_storage(section(root, "storage", "", {"local", "shared"}));
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
    // fp8 alone is optional (0 or absent: no FP8 tensor cores): only training.float8 reads it.
    const YAML::Node peak = section(gpu, "peak", "gpu", {"fp32", "tf32", "fp16", "bf16", "fp8"});
    spec.peak_fp32 = quantity(peak, "fp32", "gpu.peak", Dimension::flop_rate, limits::flop_rate);
    spec.peak_tf32 = quantity(peak, "tf32", "gpu.peak", Dimension::flop_rate, limits::flop_rate, Zero::means_unsupported);
    spec.peak_fp16 = quantity(peak, "fp16", "gpu.peak", Dimension::flop_rate, limits::flop_rate);
    spec.peak_bf16 = quantity(peak, "bf16", "gpu.peak", Dimension::flop_rate, limits::flop_rate, Zero::means_unsupported);
    if (peak["fp8"]) spec.peak_fp8 = quantity(peak, "fp8", "gpu.peak", Dimension::flop_rate, limits::flop_rate, Zero::means_unsupported);
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
    // How many of those SMs a collective's kernel holds while it runs (NCCL: a thread block per
    // channel). A share of the SMs, so it needs them and cannot exceed them.
    if (const YAML::Node held = gpu["collective_sms"]) {
      int value = -1;
      if (!held.IsScalar() || !YAML::convert<int>::decode(held, value) || value < 0 || (spec.sms > 0 && value > spec.sms)) {
        throw InputError(where(held.Mark()) + "'gpu.collective_sms' is '" + shortened(held) +
                         "'; expected a whole number of streaming multiprocessors from 0 to gpu.sms" +
                         (spec.sms > 0 ? " (" + std::to_string(spec.sms) + ")" : std::string()) +
                         " (NCCL's thread blocks, one per channel: e.g. 24 on an H100)");
      }
      if (value > 0 && spec.sms == 0) {
        throw InputError(where(held.Mark()) + "'gpu.collective_sms' is given without 'gpu.sms'; expected both (the share of the GPU a collective holds is collective_sms / sms)");
      }
      spec.collective_sms = value;
    }
    // Power feeds energy estimates only, and user-described GPUs may not know it: optional,
    // 0/0 meaning unknown. in_job (the stall power) defaults to idle; limit (a power cap) is
    // applied by the caller, once the whole GPU is read (with_power_limit).
    if (gpu["power"]) {
      const YAML::Node power = section(gpu, "power", "gpu", {"idle", "max", "in_job", "limit", "memory_bound", "dram", "dvfs"});
      spec.idle_power = quantity(power, "idle", "gpu.power", Dimension::power, limits::idle_power);
      spec.max_power = quantity(power, "max", "gpu.power", Dimension::power, limits::max_power);
      if (spec.idle_power > spec.max_power) {
        throw InputError(where(power["idle"].Mark()) + "'gpu.power.idle' (" + shortened(power["idle"]) +
                         ") exceeds 'gpu.power.max' (" + shortened(power["max"]) + "); expected idle <= max");
      }
      spec.in_job_power = spec.idle_power;
      if (power["in_job"]) {
        spec.in_job_power = quantity(power, "in_job", "gpu.power", Dimension::power, limits::idle_power);
        if (spec.in_job_power < spec.idle_power || spec.in_job_power >= spec.max_power) {
          throw InputError(where(power["in_job"].Mark()) + "'gpu.power.in_job' (" + shortened(power["in_job"]) +
                           ") must lie between 'gpu.power.idle' and 'gpu.power.max' (below max): a GPU in a job idles at or above "
                           "nvidia-smi's idle and below its busy power");
        }
      }
      read_kernel_power(power, spec);
    }
    return spec;
  }

  // gpu.power.memory_bound, .dram and .dvfs: the kernel power model's values (kernel_power.hpp).
  void read_kernel_power(const YAML::Node& power, GpuSpec& spec) const {
    if (power["memory_bound"]) {
      spec.memory_bound_power = quantity(power, "memory_bound", "gpu.power", Dimension::power, limits::max_power);
      if (spec.memory_bound_power <= spec.in_job_power || spec.memory_bound_power > spec.max_power) {
        throw InputError(where(power["memory_bound"].Mark()) + "'gpu.power.memory_bound' (" + shortened(power["memory_bound"]) +
                         ") must lie above the in-job power and at most 'gpu.power.max': a kernel that saturates the memory "
                         "draws more than a waiting GPU and no more than the TDP");
      }
    }
    if (power["dram"]) {
      spec.dram_power = quantity(power, "dram", "gpu.power", Dimension::power, limits::idle_power);
      const double memory = (spec.memory_bound_power > 0 ? spec.memory_bound_power : spec.max_power) - spec.in_job_power;
      if (spec.dram_power > memory) {
        throw InputError(where(power["dram"].Mark()) + "'gpu.power.dram' (" + shortened(power["dram"]) +
                         ") exceeds what a memory-bound kernel draws above the in-job power (" +
                         units::format_quantity(memory, Dimension::power) + "); expected the DRAM devices' share of it");
      }
    }
    if (power["dvfs"]) {
      const YAML::Node dvfs = section(power, "dvfs", "gpu.power", {"floor_clock", "floor_voltage", "min_clock"});
      spec.floor_clock = clock_ratio(required(dvfs, "floor_clock", "gpu.power.dvfs"), "gpu.power.dvfs.floor_clock");
      spec.floor_voltage = clock_ratio(required(dvfs, "floor_voltage", "gpu.power.dvfs"), "gpu.power.dvfs.floor_voltage");
      if (dvfs["min_clock"]) spec.min_clock = clock_ratio(dvfs["min_clock"], "gpu.power.dvfs.min_clock");
      if (spec.floor_clock >= 1 || spec.min_clock > spec.floor_clock) {
        throw InputError(where(dvfs.Mark()) + "'gpu.power.dvfs' has floor_clock " + shortened(dvfs["floor_clock"]) +
                         (dvfs["min_clock"] ? " and min_clock " + shortened(dvfs["min_clock"]) : std::string()) +
                         "; expected min_clock <= floor_clock < 1 (fractions of the clock the peaks are given at)");
      }
    }
  }

  // A fraction of the nominal clock or voltage: above 0, at most 1.
  double clock_ratio(const YAML::Node& node, const std::string& field) const {
    double value = 0;
    if (!node.IsScalar() || !YAML::convert<double>::decode(node, value) || !std::isfinite(value) || !(value > 0) || value > 1) {
      throw InputError(where(node.Mark()) + "'" + field + "' is '" + shortened(node) +
                       "'; expected a fraction of the nominal value, above 0 and at most 1");
    }
    return value;
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
    if (host["torch_save_bandwidth"]) {
      spec.torch_save_bandwidth = quantity(host, "torch_save_bandwidth", "host", Dimension::bandwidth, limits::bandwidth);
    }
    if (host["power"]) {
      const YAML::Node power = section(host, "power", "host", {"idle", "max"});
      spec.idle_power = quantity(power, "idle", "host.power", Dimension::power, limits::idle_power);
      spec.max_power = quantity(power, "max", "host.power", Dimension::power, limits::max_power);
      if (spec.idle_power > spec.max_power) {
        throw InputError(where(power["idle"].Mark()) + "'host.power.idle' (" + shortened(power["idle"]) + ") exceeds 'host.power.max' (" +
                         shortened(power["max"]) + "); expected idle <= max");
      }
    }
    return spec;
  }

  LinkSpec read_link(const YAML::Node& link, const std::string& section_name) const {
    LinkSpec spec;
    spec.name = text_field(link, "name", section_name);
    spec.bandwidth = quantity(link, "bandwidth", section_name, Dimension::bandwidth, limits::bandwidth);
    spec.latency = quantity(link, "latency", section_name, Dimension::time, limits::latency);
    // Per direction, what the link's own hardware draws (a NIC, a switch port): for the link
    // energy plugin. Optional: 0/0, not modelled.
    if (link["power"]) {
      const std::string name = section_name + ".power";
      const YAML::Node power = section(link, "power", section_name, {"idle", "busy"});
      spec.idle_power = quantity(power, "idle", name, Dimension::power, limits::idle_power);
      spec.busy_power = quantity(power, "busy", name, Dimension::power, limits::idle_power);
      if (spec.idle_power > spec.busy_power) {
        throw InputError(where(power["idle"].Mark()) + "'" + name + ".idle' (" + shortened(power["idle"]) + ") exceeds '" + name + ".busy' (" +
                         shortened(power["busy"]) + "); expected idle <= busy");
      }
    }
    return spec;
  }

  // nic, network and collectives: optional, and nic and network only together (a NIC without a
  // network, or a network no NIC reaches, is a description error, not a cluster).
  void read_cluster(const YAML::Node& root, Platform& platform) const {
    if (root["nic"] && !root["network"]) {
      throw InputError(where(root["nic"].Mark()) + "'nic' is given but 'network' is not; expected both (a cluster) or neither (one node)");
    }
    if (root["network"] && !root["nic"]) {
      throw InputError(where(root["network"].Mark()) + "'network' is given but 'nic' is not; expected the nodes' NICs (nic: {name, bandwidth, latency})");
    }
    if (root["nic"]) platform.nic = read_nic(section(root, "nic", "", {"name", "bandwidth", "latency", "per_node", "power"}), platform.gpus_per_node);
    if (root["network"]) {
      platform.network =
          read_network(section(root, "network", "", {"topology", "nodes", "fat_tree", "dragonfly", "torus", "link", "routing"}));
    }
    if (root["collectives"]) {
      const YAML::Node c = section(root, "collectives", "",
                                   {"base_latency", "intra_node_step", "inter_node_step", "network_overhead", "tree_base_latency",
                                    "tree_intra_node_step", "tree_inter_node_step", "algorithm"});
      platform.collectives.base = quantity(c, "base_latency", "collectives", Dimension::time, limits::latency);
      platform.collectives.intra_node_step = quantity(c, "intra_node_step", "collectives", Dimension::time, limits::latency);
      // A single node's collectives never cross the network: the network terms are optional there.
      if (c["inter_node_step"] || platform.network) {
        platform.collectives.inter_node_step = quantity(c, "inter_node_step", "collectives", Dimension::time, limits::latency);
      }
      if (c["network_overhead"] || platform.network) {
        platform.collectives.network_overhead = quantity(c, "network_overhead", "collectives", Dimension::time, limits::latency);
      }
      // The tree's terms are optional: absent, NCCL's own (the struct's defaults, models/platform.hpp).
      if (c["tree_base_latency"]) {
        platform.collectives.tree_base = quantity(c, "tree_base_latency", "collectives", Dimension::time, limits::latency);
      }
      if (c["tree_intra_node_step"]) {
        platform.collectives.tree_intra_node_step = quantity(c, "tree_intra_node_step", "collectives", Dimension::time, limits::latency);
      }
      if (c["tree_inter_node_step"]) {
        platform.collectives.tree_inter_node_step = quantity(c, "tree_inter_node_step", "collectives", Dimension::time, limits::latency);
      }
      if (const YAML::Node a = c["algorithm"]) platform.collectives.algorithm = nccl_algorithm(a);
    } else {
      // No NCCL terms at all: bandwidth only, for the tree as for the ring.
      platform.collectives.tree_base = platform.collectives.tree_intra_node_step = platform.collectives.tree_inter_node_step = 0;
    }
  }

  // collectives.algorithm: NCCL_ALGO's names, in any case as NCCL reads them (strcasecmp).
  NcclAlgorithm nccl_algorithm(const YAML::Node& node) const {
    std::string text = node.IsScalar() ? node.Scalar() : std::string();
    std::transform(text.begin(), text.end(), text.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    for (const NcclAlgorithm a : {NcclAlgorithm::automatic, NcclAlgorithm::ring, NcclAlgorithm::tree}) {
      if (text == to_string(a)) return a;
    }
    throw InputError(where(node.Mark()) + "'collectives.algorithm' is '" + shortened(node) +
                     "'; expected auto (NCCL's own choice per all-reduce), ring or tree (NCCL_ALGO's meaning)");
  }

  // storage: a node-local disk, a shared file system, or both; at least one.
  StorageSpec read_storage(const YAML::Node& storage) const {
    if (!storage["local"] && !storage["shared"]) {
      throw InputError(where(storage.Mark()) + "'storage' has neither 'local' nor 'shared'; expected a node-local disk, a shared file system or both");
    }
    StorageSpec spec;
    if (storage["local"]) {
      const YAML::Node local = section(storage, "local", "storage", {"name", "read_bandwidth", "write_bandwidth"});
      spec.local = LocalDiskSpec{text_field(local, "name", "storage.local"),
                                 quantity(local, "read_bandwidth", "storage.local", Dimension::bandwidth, limits::bandwidth),
                                 quantity(local, "write_bandwidth", "storage.local", Dimension::bandwidth, limits::bandwidth)};
    }
    if (storage["shared"]) {
      const YAML::Node shared =
          section(storage, "shared", "storage", {"name", "read_bandwidth", "write_bandwidth", "per_node_bandwidth", "latency", "checkpoint_overhead"});
      spec.shared = SharedFileSystemSpec{text_field(shared, "name", "storage.shared"),
                                         quantity(shared, "read_bandwidth", "storage.shared", Dimension::bandwidth, limits::bandwidth),
                                         quantity(shared, "write_bandwidth", "storage.shared", Dimension::bandwidth, limits::bandwidth),
                                         quantity(shared, "per_node_bandwidth", "storage.shared", Dimension::bandwidth, limits::bandwidth),
                                         quantity(shared, "latency", "storage.shared", Dimension::time, limits::latency)};
      if (shared["checkpoint_overhead"]) {
        spec.shared->checkpoint_overhead = quantity(shared, "checkpoint_overhead", "storage.shared", Dimension::time, limits::latency);
      }
    }
    return spec;
  }

  NicSpec read_nic(const YAML::Node& nic, int gpus_per_node) const {
    NicSpec spec;
    const LinkSpec link = read_link(nic, "nic");
    spec.name = link.name;
    spec.bandwidth = link.bandwidth;
    spec.latency = link.latency;
    spec.idle_power = link.idle_power;
    spec.busy_power = link.busy_power;
    spec.per_node = gpus_per_node;
    if (const YAML::Node per_node = nic["per_node"]) {
      spec.per_node = positive_int(per_node, "nic.per_node");
      // NCCL gives each NIC the GPUs nearest to it, the same number each on these nodes; a NIC
      // without a GPU carries no ring.
      if (spec.per_node > gpus_per_node || gpus_per_node % spec.per_node != 0) {
        throw InputError(where(per_node.Mark()) + "'nic.per_node' is " + shortened(per_node) + "; expected a divisor of gpus_per_node (" +
                         std::to_string(gpus_per_node) + "): the node's GPUs share its NICs evenly");
      }
    }
    return spec;
  }

  NetworkSpec read_network(const YAML::Node& network) const {
    NetworkSpec spec;
    const std::string topology = text_field(network, "topology", "network");
    const std::initializer_list<const char*> topologies{"fat_tree", "dragonfly", "torus"};
    if (topology == "fat_tree") {
      spec.topology = NetworkTopology::fat_tree;
    } else if (topology == "dragonfly") {
      spec.topology = NetworkTopology::dragonfly;
    } else if (topology == "torus") {
      spec.topology = NetworkTopology::torus;
    } else {
      throw InputError(where(network["topology"].Mark()) + "'network.topology' is '" + shortened(network["topology"]) + "'; expected one of " +
                       join(topologies));
    }
    // Exactly the parameters of the topology named: another topology's would be silently unused.
    for (const char* other : topologies) {
      if (other != topology && network[other]) {
        throw InputError(where(network[other].Mark()) + "'network." + other + "' is given but network.topology is " + topology +
                         "; expected network." + topology + " alone");
      }
    }
    spec.nodes = required_positive_int(network, "nodes", "network");
    switch (spec.topology) {
      case NetworkTopology::fat_tree: {
        const YAML::Node tree = section(network, "fat_tree", "network", {"levels", "down", "up", "links"});
        constexpr int kMaxLevels = 8;  // SimGrid's fat tree builds levels + 1 rows; real trees have 2-4
        spec.fat_tree.levels = required_positive_int(tree, "levels", "network.fat_tree");
        if (spec.fat_tree.levels > kMaxLevels) {
          throw InputError(where(tree["levels"].Mark()) + "'network.fat_tree.levels' is " + shortened(tree["levels"]) +
                           "; expected 1 to " + std::to_string(kMaxLevels) + " switch levels");
        }
        spec.fat_tree.down = int_list(tree, "down", "network.fat_tree", spec.fat_tree.levels);
        spec.fat_tree.up = int_list(tree, "up", "network.fat_tree", spec.fat_tree.levels);
        spec.fat_tree.links = int_list(tree, "links", "network.fat_tree", spec.fat_tree.levels);
        break;
      }
      case NetworkTopology::dragonfly: {
        const YAML::Node fly = section(network, "dragonfly", "network", {"groups", "chassis", "routers", "nodes"});
        const std::vector<int> groups = int_list(fly, "groups", "network.dragonfly", 2);
        const std::vector<int> chassis = int_list(fly, "chassis", "network.dragonfly", 2);
        const std::vector<int> routers = int_list(fly, "routers", "network.dragonfly", 2);
        spec.dragonfly = {groups[0], groups[1], chassis[0], chassis[1], routers[0], routers[1],
                          required_positive_int(fly, "nodes", "network.dragonfly")};
        // SimGrid 3.32 links group g to the g-th router of chassis 0 of every other group
        // (src/kernel/routing/DragonflyZone.cpp), so it needs a router per group there.
        if (spec.dragonfly.groups > spec.dragonfly.routers) {
          throw InputError(where(fly["groups"].Mark()) + "'network.dragonfly.groups' has " + std::to_string(spec.dragonfly.groups) +
                           " groups but only " + std::to_string(spec.dragonfly.routers) +
                           " routers per chassis; expected at most one group per router (SimGrid's dragonfly links group g to router g)");
        }
        break;
      }
      case NetworkTopology::torus:
        spec.torus = int_list(network, "torus", "network", -1);
        if (spec.torus.size() > static_cast<std::size_t>(limits::max_torus_dimensions)) {
          throw InputError(where(network["torus"].Mark()) + "'network.torus' has " + std::to_string(spec.torus.size()) +
                           " dimensions; expected 1 to " + std::to_string(limits::max_torus_dimensions));
        }
        break;
    }
    const std::int64_t leaves = spec.leaves();
    if (leaves > limits::max_network_nodes) {
      throw InputError(where(network[topology].Mark()) + "'network." + topology + "' has " + std::to_string(leaves) +
                       " places for nodes; expected at most " + std::to_string(limits::max_network_nodes));
    }
    if (spec.nodes > leaves) {
      throw InputError(where(network["nodes"].Mark()) + "'network.nodes' is " + std::to_string(spec.nodes) + " but network." + topology +
                       " has places for " + std::to_string(leaves) + "; expected at most as many nodes as the topology has leaves");
    }
    check_topology_size(spec, network[topology], topology);
    spec.link = read_link(section(network, "link", "network", {"name", "bandwidth", "latency", "power"}), "network.link");
    if (const YAML::Node routing = network["routing"]) spec.routing = network_routing(routing, spec);
    return spec;
  }

  // network.routing: static (SimGrid's fixed paths) or adaptive, which comptrain builds as one
  // switch over every node (NetworkRouting): exact only where the tree is non-blocking and each
  // node has one (aggregated) link into it, so anything else is refused rather than widened.
  NetworkRouting network_routing(const YAML::Node& node, const NetworkSpec& spec) const {
    const std::string text = node.IsScalar() ? node.Scalar() : std::string();
    if (text == to_string(NetworkRouting::static_paths)) return NetworkRouting::static_paths;
    if (text != to_string(NetworkRouting::adaptive)) {
      throw InputError(where(node.Mark()) + "'network.routing' is '" + shortened(node) +
                       "'; expected static (one fixed path per node pair, SimGrid's routes) or adaptive (a switch's least loaded up port)");
    }
    const auto refuse = [&](const std::string& why) {
      throw InputError(where(node.Mark()) + "'network.routing' is adaptive but " + why +
                       "; expected adaptive on a non-blocking fat tree whose nodes have one link each (up[0] and links[0] 1), or routing: static");
    };
    if (spec.topology != NetworkTopology::fat_tree) refuse("network.topology is " + std::string(to_string(spec.topology)));
    const FatTreeShape& tree = spec.fat_tree;
    if (tree.up.front() != 1 || tree.links.front() != 1) refuse("a node has " + std::to_string(tree.up.front() * tree.links.front()) + " links up");
    for (int level = 0; level + 1 < tree.levels; ++level) {
      const std::int64_t down_links = std::int64_t{tree.down[level]} * tree.links[level];
      const std::int64_t up_links = std::int64_t{tree.up[level + 1]} * tree.links[level + 1];
      if (up_links < down_links) {
        refuse("a switch of level " + std::to_string(level + 1) + " has " + std::to_string(down_links) + " links down and " +
               std::to_string(up_links) + " up (oversubscribed)");
      }
    }
    if (spec.link.idle_power > 0 || spec.link.busy_power > 0) {
      throw InputError(where(node.Mark()) + "'network.routing' is adaptive and network.link has a power; expected no network.link.power with " +
                       "adaptive routing, whose one-switch stand-in has no switch-to-switch links to draw it (or routing: static)");
    }
    return NetworkRouting::adaptive;
  }

  // What SimGrid will build of the topology, bounded before it is asked to (platform_limits):
  // each count with the section's place, the count and its bound.
  void check_topology_size(const NetworkSpec& spec, const YAML::Node& section_node, const std::string& topology) const {
    const std::string field = "'network." + topology + "'";
    const auto check = [&](std::int64_t count, std::int64_t bound, const std::string& what) {
      if (count <= bound) return;
      throw InputError(where(section_node.Mark()) + field + " builds " + (count >= (std::int64_t{1} << 62) ? "more than 2^62" : std::to_string(count)) +
                       " " + what + "; expected at most " + std::to_string(bound) +
                       " (SimGrid builds all of them for every run, whatever its nodes: scenarios/platforms/README.md, \"Clusters\")");
    };
    check(network_switches(spec), limits::max_network_switches, spec.topology == NetworkTopology::dragonfly ? "routers (groups x chassis x routers)" : "switches");
    check(network_links(spec), limits::max_network_links, "links");
    check(fat_tree_pairs(spec), limits::max_fat_tree_pairs, "pairs of elements of adjacent levels to wire (SimGrid examines each pair)");
  }

  // A list of positive whole numbers, of `size` entries (any size from 1 up when size < 0).
  std::vector<int> int_list(const YAML::Node& map, const char* key, const std::string& section_name, int size) const {
    const YAML::Node node = required(map, key, section_name);
    const std::string field = qualified(section_name, key);
    const std::string expected = size < 0 ? std::string("a list of positive integers, e.g. [4, 4, 4]")
                                          : "a list of " + std::to_string(size) + " positive integer" + (size == 1 ? "" : "s");
    if (!node.IsSequence() || node.size() == 0 || (size >= 0 && node.size() != static_cast<std::size_t>(size))) {
      throw InputError(where(node.Mark()) + "'" + field + "' is " + (node.IsSequence() ? "a list of " + std::to_string(node.size()) : "'" + shortened(node) + "'") +
                       "; expected " + expected);
    }
    std::vector<int> values;
    for (std::size_t i = 0; i < node.size(); ++i) {
      const int value = positive_int(node[i], field + "[" + std::to_string(i) + "]");
      if (value > limits::max_network_nodes) {
        throw InputError(where(node[i].Mark()) + "'" + field + "[" + std::to_string(i) + "]' is " + std::to_string(value) + "; expected at most " +
                         std::to_string(limits::max_network_nodes));
      }
      values.push_back(value);
    }
    return values;
  }

  Efficiency read_efficiency(const YAML::Node& efficiency) const {
    Efficiency result;
    if (efficiency["compute"]) read_fractions(efficiency["compute"], "efficiency.compute", result.compute_default, result.compute);
    if (efficiency["memory"]) read_fractions(efficiency["memory"], "efficiency.memory", result.memory_default, result.memory);
    if (efficiency["tensor_core"]) result.tensor_core = fraction(efficiency["tensor_core"], "efficiency.tensor_core");
    if (efficiency["tensor_core_cuda11"]) result.tensor_core_cuda11 = fraction(efficiency["tensor_core_cuda11"], "efficiency.tensor_core_cuda11");
    if (efficiency["conv_wave_loss"]) result.conv_wave_loss = fraction(efficiency["conv_wave_loss"], "efficiency.conv_wave_loss");
    if (efficiency["gemm_k_overhead"]) result.gemm_k_overhead = k_elements(efficiency["gemm_k_overhead"], "efficiency.gemm_k_overhead");
    return result;
  }

  // `default` and one entry per op kind, each a fraction of peak in [0.001, 1].
  void read_fractions(const YAML::Node& map, const std::string& field, double& fallback,
                      std::map<traces::OpKind, double>& per_kind) const {
    std::vector<std::string> names{"default"};
    for (const traces::OpKind kind : traces::all_op_kinds()) names.emplace_back(traces::to_string(kind));
    std::string valid;
    for (const std::string& name : names) valid += (valid.empty() ? "" : ", ") + name;
    if (!map.IsMap()) throw InputError(where(map.Mark()) + "'" + field + "' must be a mapping from op kinds to fractions of peak; valid keys: " + valid);
    std::set<std::string> seen;
    for (const auto& entry : map) {
      const std::string key = entry.first.as<std::string>("");
      const std::optional<traces::OpKind> kind = traces::parse_op_kind(key);
      if (key != "default" && !kind) {
        throw InputError(where(entry.first.Mark()) + "unknown key '" + key + "' in " + field + "; " +
                         did_you_mean_text(did_you_mean(key, names)) + "valid keys: " + valid);
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

  // A length along a GEMM's reduction dimension, in elements: a plain number from 0 to
  // limits::max_gemm_k_overhead.
  double k_elements(const YAML::Node& node, const std::string& field) const {
    double value = 0;
    if (!node.IsScalar() || !YAML::convert<double>::decode(node, value) || !std::isfinite(value) || value < 0 ||
        value > limits::max_gemm_k_overhead) {
      throw InputError(where(node.Mark()) + "'" + field + "' is '" + shortened(node) + "'; expected a number of elements of K from 0 to " +
                       std::to_string(static_cast<long>(limits::max_gemm_k_overhead)));
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

  // A top-level key's section is "the platform".
  YAML::Node required(const YAML::Node& map, const char* key, const std::string& section_name) const {
    return yaml::Reader::required(map, key, section_name.empty() ? "the platform" : section_name);
  }

  static std::string qualified(const std::string& section_name, const char* key) {
    return section_name.empty() ? std::string(key) : section_name + "." + key;
  }

  // A scalar as written, cut short: a 300-digit number must not fill the message.
  static std::string shortened(const YAML::Node& node) {
    std::string text = describe(node);
    if (text.size() > 40) text = text.substr(0, 37) + "...";
    return text;
  }
};

}  // namespace

std::string_view to_string(NcclAlgorithm algorithm) {
  switch (algorithm) {
    case NcclAlgorithm::automatic: return "auto";
    case NcclAlgorithm::ring: return "ring";
    case NcclAlgorithm::tree: return "tree";
  }
  return "unknown";
}

std::string_view to_string(NetworkRouting routing) {
  switch (routing) {
    case NetworkRouting::static_paths: return "static";
    case NetworkRouting::adaptive: return "adaptive";
  }
  return "unknown";
}

std::string_view to_string(NetworkTopology topology) {
  switch (topology) {
    case NetworkTopology::fat_tree: return "fat_tree";
    case NetworkTopology::dragonfly: return "dragonfly";
    case NetworkTopology::torus: return "torus";
  }
  return "unknown";
}

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

Platform with_power_limit(Platform platform, double watts, std::string_view where) {
  GpuSpec& gpu = platform.gpu;
  if (!(gpu.max_power > 0)) {
    throw InputError(std::string(where) + ": a power limit of " + units::format_quantity(watts, Dimension::power) + " on platform '" + platform.name +
                     "', whose GPU gives no power values; expected gpu.power {idle, max} in the platform");
  }
  if (!(watts > gpu.in_job_power) || !std::isfinite(watts)) {
    throw InputError(std::string(where) + ": a power limit of " + units::format_quantity(watts, Dimension::power) +
                     "; expected more than the GPU's in-job idle power (" + units::format_quantity(gpu.in_job_power, Dimension::power) +
                     "): below it no clock could run a kernel");
  }
  // Each kernel is slowed by the op-time model (kernel_power.hpp); here only what the report shows.
  gpu.power_limit = watts;
  gpu.clock_fraction = saturated_clock_fraction(gpu, watts);
  return platform;
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
    const Platform platform = builtin_platform(name);
    if (platform.gpu.name == gpu_name && !platform.network) names.push_back(name);
  }
  return names;
}

}  // namespace comptrain::models

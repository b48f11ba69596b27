#pragma once
// A modeled machine: one GPU, its host, and the links between them; optionally the node's GPUs,
// NICs and the network between nodes (a cluster). Described as data (scenarios/platforms/*.yaml,
// each value with its datasheet source), never as code.

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/models/units.hpp"
#include "comptrain/traces/vocabulary.hpp"

namespace comptrain::models {

// The physically plausible range of every platform value, enforced by parse_platform (an
// InputError at the value's line otherwise) and documented in scenarios/README.md ("Platform
// values"). They are wide, 3 to 6 orders of magnitude around today's hardware each way, so no real
// or hypothetical-but-sane machine is refused; their job is to keep every derived duration finite
// and meaningful: with FLOP and byte counts below 2^63 (traces/FORMAT.md), the slowest op the
// bounds allow takes 9.2e18 / (1e6 FLOP/s x 1e-3) = 9.2e15 s, finite, where 1e-300 FLOP/s gave
// infinity (and SimGrid aborted on 1e300 GB/s).
// Other readers of rates, latencies and sizes (a scenario's compress rule) use the same bounds.
namespace platform_limits {
// 1 MFLOP/s (below any CPU since the 1980s) to 10^18 FLOP/s (1 EFLOP/s: ~500x an H100's dense
// FP16 peak, 989 TFLOP/s, for one device). GPU peaks (tf32 and bf16 may also be 0 =
// unsupported) and the host's FLOP/s.
inline constexpr units::Bounds flop_rate{1e6, 1e18};
// 1 kB/s (slower than a 1990s modem link) to 1 PB/s (~200x an H200's 4.8 TB/s HBM3e). GPU and host
// memory bandwidths, host_link and gpu_link bandwidths.
inline constexpr units::Bounds bandwidth{1e3, 1e15};
// 0 to 1 s: a kernel launch takes ~5 us and a PCIe/NVLink transfer starts in ~1-10 us; a latency
// of a second per call is no GPU link or launch. launch_overhead and link latencies.
inline constexpr units::Bounds latency{0, 1};
// 1 MiB to 1 PiB of memory, GPU or host: the smallest GPU ever had megabytes, and 1 PiB is
// ~500x a DGX node's 2 TiB host memory.
inline constexpr std::int64_t min_memory_bytes = std::int64_t{1} << 20;
inline constexpr std::int64_t max_memory_bytes = std::int64_t{1} << 50;
// 0 to 1 MW for idle power, 1 W to 1 MW for max power: a GPU draws 50-1000 W; a megawatt is
// a whole data-centre row.
inline constexpr units::Bounds idle_power{0, 1e6};
inline constexpr units::Bounds max_power{1, 1e6};
// Efficiencies, fractions of peak: 0.001 to 1. Below 0.1% of peak a roofline says nothing
// about a kernel (and a fraction like 1e-300 would turn every duration infinite).
inline constexpr double min_efficiency = 1e-3;
// 0 to 65,536 elements of K for efficiency.gemm_k_overhead: fitted values are a few hundred
// (one to a few main-loop stages of 64); beyond 64K a GEMM would never get near its ceiling.
inline constexpr double max_gemm_k_overhead = 65536;
// 1 to 100,000 nodes in a network (network.nodes and the leaves of its topology): the largest GPU
// machines have about 10^4 nodes (Frontier: 9,408), and SimGrid builds every switch and link of
// the topology, so a typo of a few more digits must not start a build of millions of links.
inline constexpr int max_network_nodes = 100'000;
}  // namespace platform_limits

struct GpuSpec {
  std::string name;                 // "NVIDIA A100-SXM4-40GB"
  std::int64_t memory_bytes = 0;    // device memory, as the datasheet gives it
  // What cudaMemGetInfo and nvidia-smi report as the total (gpu.memory_visible): the datasheet
  // figure less what the driver keeps (and ECC's share on GDDR parts). Defaults to memory_bytes.
  std::int64_t memory_visible_bytes = 0;
  // What the CUDA context and the kernels loaded into it take, outside PyTorch's caching
  // allocator (gpu.cuda_context): nvidia-smi counts it, torch.cuda.memory_reserved does not.
  // 0 when the platform does not give it.
  std::int64_t cuda_context_bytes = 0;
  // gpu.compute_capability "major.minor"; 0.0 when not given.
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  double memory_bandwidth = 0;      // HBM/GDDR bytes/s
  double peak_fp32 = 0;             // dense FLOP/s
  double peak_tf32 = 0;             // dense tensor-core FLOP/s (0: no TF32)
  double peak_fp16 = 0;             // dense tensor-core FLOP/s
  double peak_bf16 = 0;             // dense tensor-core FLOP/s (0: no bf16)
  double peak_fp8 = 0;              // dense FP8 (e4m3/e5m2) tensor-core FLOP/s (0: no FP8; gpu.peak.fp8 is optional)
  double launch_overhead = 0;       // seconds added to every kernel
  // Streaming multiprocessors (gpu.sms, 1 to 10000): how many GEMM tiles run at once, for the
  // op-time model's wave quantization. 0 when not given: no wave quantization.
  int sms = 0;
  // SMs a running collective's kernel holds (gpu.collective_sms, 0 to sms; needs sms): NCCL runs
  // a collective as one thread block per channel, each resident on an SM for the collective's
  // whole length, so kernels beside it on other streams get the rest of the GPU. The replay
  // (sim/engine/replay.cpp) gives a data-parallel collective collective_sms / sms of the GPU
  // while it runs. 0 when not given: collectives take nothing from the kernels they overlap.
  int collective_sms = 0;
  // gpu.power (optional; 0 = unknown, no GPU energy is reported). The energy model
  // (sim/energy.hpp, models/kernel_power.hpp) gives each kernel its own power from the SMs' and the
  // memory's activity, and a GPU waiting inside the job in_job_power.
  double idle_power = 0;            // W: nvidia-smi's reading of an idle GPU (gpu.power.idle)
  // W (TDP, gpu.power.max): the board power limit, and what a kernel keeping the SMs saturated
  // draws at the clock the peaks are given at (kernel_power.hpp).
  double max_power = 0;
  // W (gpu.power.memory_bound; 0 = not given: memory traffic draws like arithmetic, max_power):
  // what a kernel keeping the memory bandwidth saturated draws at the nominal clock, the SMs'
  // loads and stores and the L2 included.
  double memory_bound_power = 0;
  // W (gpu.power.dram; 0 = not given): the DRAM devices' share of memory_bound_power - in_job, the
  // part that does not scale with the SM clock and voltage (the HBM clock is not lowered by a cap).
  double dram_power = 0;
  // gpu.power.dvfs (kernel_power.hpp): the voltage-frequency curve as fractions of the clock the
  // peaks are given at and of the voltage there. Above floor_clock the voltage falls linearly with
  // the clock to floor_voltage; below it stays there (dynamic power then linear in the clock);
  // min_clock is the lowest clock the GPU runs at. All 0 (not given): voltage proportional to the
  // clock, no floor (dynamic power cubic in the clock).
  double floor_clock = 0;
  double floor_voltage = 0;
  double min_clock = 0;
  // W (gpu.power.in_job; default idle_power): a GPU inside a training job with no kernel running
  // (memory held, clocks up) draws more than nvidia-smi's idle, so stalls are charged at this.
  double in_job_power = 0;
  // W (gpu.power.limit, or a scenario's power_limit; 0 = none): the power cap (nvidia-smi -pl).
  // Below max_power each kernel that would draw more runs at a lower SM clock until it draws the
  // cap (kernel_power.hpp; the op-time model applies it per kernel).
  double power_limit = 0;
  // The SM clock under power_limit, as a fraction of the nominal one, of a kernel that keeps the
  // SMs saturated (1 without a limit): what the report shows. The peaks above stay nominal.
  double clock_fraction = 1;
  double busy_power() const { return power_limit > 0 && power_limit < max_power ? power_limit : max_power; }
};

// CPU seconds eager PyTorch's launching thread spends per op, by phase (host.dispatch): the
// Python frontend, the dispatcher, autograd's bookkeeping and the kernel launch. All 0 (the
// default when a platform file gives none): the thread is never the bottleneck.
struct OpDispatch {
  double forward = 0;    // per forward op (and per forward op replayed by recomputation)
  double backward = 0;   // per backward op (autograd's C++ engine), and per copy or codec task
  double optimizer = 0;  // per optimizer op of the trace
};

struct HostSpec {
  std::string name;
  int cores = 1;
  double flops = 0;                 // FLOP/s of the whole host
  std::int64_t memory_bytes = 0;
  double memory_bandwidth = 0;      // bytes/s
  OpDispatch dispatch;
  // host.torch_save_bandwidth (optional; 0 = not given): bytes/s that one process's torch.save
  // reaches on one of this host's cores, end to end from device memory: pickling, each storage's
  // copy into fresh pageable host memory, CRC-32 and the writes into the page cache, all on the
  // process's one thread. A synchronous checkpoint needs it (sim/io.hpp).
  double torch_save_bandwidth = 0;
  // host.power (optional; 0 = unknown, no host energy): the node's CPUs while the job runs and
  // nothing is computed on them (idle), and with every core busy (max, the TDPs).
  double idle_power = 0;            // W
  double max_power = 0;             // W
};

// A full-duplex link: `bandwidth` is per direction.
struct LinkSpec {
  std::string name;                 // "PCIe 4.0 x16"
  double bandwidth = 0;             // bytes/s per direction
  double latency = 0;               // seconds
  // host_link only: bytes/s per direction of a copy to or from pageable (malloc'ed) host memory,
  // which the driver stages through its own pinned buffers, so the host's memcpy is in the
  // path (CUDA Runtime API, "API synchronization behavior"). 0 when the platform does not give
  // it; a strategy that copies to pageable memory then has no rate to use and is refused.
  double pageable_bandwidth = 0;
  // host_link only (optional; 0 = the link's bandwidth): bytes/s per GPU at which an asynchronous
  // checkpoint engine's device -> host copies into its pinned cache proceed while every GPU of the
  // node checkpoints at once (sim/io.hpp): what the engine reaches there, below the link's
  // bandwidthTest rate where the node's copies and the engine's own work contend. A fitted value
  // where a platform gives it (its comment names the fit).
  double checkpoint_copy_bandwidth = 0;
  // power (optional; 0/0 = not modelled): W per direction, idle and at full bandwidth (SimGrid's
  // link energy plugin: linear in the used share of the bandwidth in between).
  double idle_power = 0;
  double busy_power = 0;
};

// Fraction of peak reached by each op kind, for the roofline's compute and memory terms.
struct Efficiency {
  double compute_default = 1.0;
  double memory_default = 1.0;
  // Multiplies the compute efficiency of an op that runs on tensor cores (a TF32, FP16 or BF16
  // peak): real cuBLAS/cuDNN kernels reach a smaller share of the tensor-core peak than of the
  // CUDA cores' (efficiency.tensor_core; 1 when not given).
  double tensor_core = 1.0;
  // The same share for kernels built with a CUDA toolkit before 12.0 on a GPU whose tensor cores
  // need newer instructions (Hopper's wgmma: op_time.hpp, tensor_core_share);
  // efficiency.tensor_core_cuda11, unset when not given.
  std::optional<double> tensor_core_cuda11;
  // How much of the modelled wave-quantization loss convolutions see (op_time.cpp, gemm_shape_factor:
  // their efficiency is multiplied by fill^conv_wave_loss): 1, the default, is the loss of one
  // 128x128 tile per SM, a bound; below 1 the loss shrinks toward none at 0, as cuDNN's
  // algorithm search finds kernels that fill small grids better (efficiency.conv_wave_loss;
  // fitted, models/README.md, "Wave quantization").
  double conv_wave_loss = 1.0;
  // The fixed cost of a GEMM kernel's thread block (prologue, epilogue), in elements of the
  // reduction dimension K: a block that reduces K elements reaches K / (K + gemm_k_overhead) of
  // the efficiency of an endless one (op_time.cpp, gemm_k_factor; models/README.md, "Short
  // reductions"). For the kernels efficiency.tensor_core describes (linear and matmul ops on
  // tensor cores; not on Hopper under a toolkit before CUDA 12); 0, the default, charges none
  // (efficiency.gemm_k_overhead).
  double gemm_k_overhead = 0.0;
  std::map<traces::OpKind, double> compute;
  std::map<traces::OpKind, double> memory;
  double compute_for(traces::OpKind kind) const;
  double memory_for(traces::OpKind kind) const;
};

// A node's network interfaces (nic): `per_node` NICs of `bandwidth` each, per direction. NCCL
// drives one ring per NIC (rail-optimised networks); the node's GPUs share them evenly, GPU g
// using NIC g / (gpus_per_node / per_node).
struct NicSpec {
  std::string name;                 // "ConnectX-6 HDR InfiniBand 200 Gb/s"
  double bandwidth = 0;             // bytes/s per direction, effective (what NCCL reaches)
  double latency = 0;               // seconds, the hardware's; collectives use `collectives`
  int per_node = 0;                 // NICs per node (nic.per_node; default gpus_per_node)
  double idle_power = 0;            // nic.power, W per direction (LinkSpec's)
  double busy_power = 0;
};

enum class NetworkTopology : std::uint8_t { fat_tree, dragonfly, torus };
std::string_view to_string(NetworkTopology topology);

// How the switches choose a packet's path (network.routing). static_paths: SimGrid's routes, one
// fixed path per node pair (its fat tree picks a switch's up port from the destination's index,
// "as in d-mod-k": src/kernel/routing/FatTreeZone.cpp), so two flows whose destinations share
// that index share an uplink however many lie idle. adaptive: each switch sends a packet out of
// whichever up port is least loaded (InfiniBand's adaptive routing), which in a non-blocking fat
// tree leaves only the nodes' own links to bind; built as one switch over every node
// (scenarios/platforms/README.md, "Clusters").
enum class NetworkRouting : std::uint8_t { static_paths, adaptive };
std::string_view to_string(NetworkRouting routing);

// The topologies' parameters exactly as SimGrid's FatTreeParams / DragonflyParams / torus
// dimensions take them (simgrid/s4u/NetZone.hpp); their leaves are the nodes.
struct FatTreeShape {
  int levels = 0;
  std::vector<int> down;            // per level: children of a switch
  std::vector<int> up;              // per level: parents of an element
  std::vector<int> links;           // per level: parallel links between an element and a parent
};
struct DragonflyShape {
  int groups = 0, group_links = 0;      // groups, links between two groups (blue)
  int chassis = 0, chassis_links = 0;   // chassis per group, links between chassis (black)
  int routers = 0, router_links = 0;    // routers per chassis, links between routers (green)
  int nodes = 0;                        // nodes per router
};

// The network between nodes (network). Its links carry all of a node's rails at once: SimGrid
// routes a node's traffic over one link per hop, so `link.bandwidth` is the aggregate of the
// physical links it stands for (scenarios/platforms/README.md, "Clusters").
struct NetworkSpec {
  NetworkTopology topology = NetworkTopology::fat_tree;
  int nodes = 1;                    // the most nodes the system has (<= leaves())
  FatTreeShape fat_tree;            // topology fat_tree
  DragonflyShape dragonfly;         // topology dragonfly
  std::vector<int> torus;           // topology torus: the dimensions
  LinkSpec link;                    // every link of the topology, per direction
  NetworkRouting routing = NetworkRouting::static_paths;  // adaptive: non-blocking fat trees only
  std::int64_t leaves() const;      // places for nodes in the topology
};

// Storage (storage, optional): where training reads its samples and writes its checkpoints.
// A node-local disk (NVMe) is a SimGrid disk on the node's host; a shared parallel file system
// is reached from each node through its client link (per_node_bandwidth, each direction) and
// shares its aggregate rates among all nodes of the job (sim/io.hpp).
struct LocalDiskSpec {
  std::string name;                 // "4x 3.84 TB U.2 NVMe, RAID 0"
  double read_bandwidth = 0;        // bytes/s of the node's disks together
  double write_bandwidth = 0;
};
struct SharedFileSystemSpec {
  std::string name;                 // "Lustre, HPE ClusterStor E1000 (Grand)"
  double read_bandwidth = 0;        // bytes/s, aggregate over every client
  double write_bandwidth = 0;       // bytes/s, aggregate over every client
  double per_node_bandwidth = 0;    // bytes/s, one node's client limit per direction (its NICs)
  double latency = 0;               // seconds per request
  // storage.shared.checkpoint_overhead (optional; 0 = none): seconds each checkpoint save blocks
  // training on this file system before its bytes move, whatever their size: the save's
  // directory and files created, the framework's barriers around them (sim/io.hpp). Fitted
  // where a platform gives it (its comment names the fit).
  double checkpoint_overhead = 0;
};
struct StorageSpec {
  std::optional<LocalDiskSpec> local;
  std::optional<SharedFileSystemSpec> shared;
};

// NCCL's choice of algorithm for all-reduces, as the NCCL_ALGO environment variable makes it
// (collectives.algorithm): `automatic` lets NCCL's own model pick ring or tree per all-reduce
// (NCCL's default, sim/collectives.hpp `nccl_prediction`); `ring` and `tree` force one, as
// NCCL_ALGO=ring or NCCL_ALGO="allreduce:tree" do. Reduce-scatters and all-gathers always run rings
// (NCCL has no tree for them).
enum class NcclAlgorithm : std::uint8_t { automatic, ring, tree };
std::string_view to_string(NcclAlgorithm algorithm);  // "auto", "ring", "tree": the YAML spelling

// NCCL's latency terms (src/graph/tuning.cc, Simple protocol) and its algorithm choice.
// Ring: base + (steps - network steps) x intra + network steps x inter, where a ring over p ranks
// on N nodes takes 2(p-1) steps (all-reduce) or p-1 (reduce-scatter, all-gather), 2(N-1) or N-1 of
// them across the network, and intra = max(intra_node_step, 3 x network_overhead) when N > 1.
// Tree (all-reduce only): tree_base + 2 x ((ppn - 1) x tree_intra + floor(log2 N) x tree_inter).
// All 0 when the platform gives no `collectives`: bandwidth terms only. The tree terms default to
// NCCL's own (NVIDIA/nccl@5067397c = v2.30.7, src/graph/tuning.cc, ncclTunerConstantsDefaults,
// Tree/Simple; the same since v2.23.4) wherever the section is given or the struct is built in code.
struct CollectiveLatency {
  double base = 0;                  // collectives.base_latency
  double intra_node_step = 0;       // per step over NVLink (PCIe where there is no gpu_link)
  double inter_node_step = 0;       // per step over the network
  double network_overhead = 0;      // NCCL's per-step CPU proxy overhead (getNetOverhead)
  double tree_base = 8.4e-6;            // collectives.tree_base_latency: baseLatencies[Tree][Simple] = 8.4 us
  double tree_intra_node_step = 4e-6;   // collectives.tree_intra_node_step: hwLatencies[NVLINK and PCI][Tree][Simple] = 4.0 us
  double tree_inter_node_step = 14e-6;  // collectives.tree_inter_node_step: hwLatencies[NET][Tree][Simple] = 14 us
  NcclAlgorithm algorithm = NcclAlgorithm::automatic;  // collectives.algorithm
};

struct Platform {
  std::string name;                 // "a100-40gb"
  std::string source;               // file or "embedded:NAME", for messages and reports
  GpuSpec gpu;
  HostSpec host;
  LinkSpec host_link;               // GPU <-> host (PCIe)
  int gpus_per_node = 1;
  LinkSpec gpu_link;                // GPU <-> GPU (NVLink, through the NVSwitch); bandwidth 0 when absent
  Efficiency efficiency;
  // Clusters (optional): no `network` is one node, as before. nic and network come together.
  std::optional<NicSpec> nic;
  std::optional<NetworkSpec> network;
  CollectiveLatency collectives;
  std::optional<StorageSpec> storage;  // storage: none given, no I/O can be simulated

  int max_nodes() const { return network ? network->nodes : 1; }

  // Peak FLOP/s for arithmetic in `dtype` (fp32 uses TF32 tensor cores when `allow_tf32`).
  double peak_flops(traces::DType dtype, bool allow_tf32) const;
};

// The GPU of `platform` capped at `watts` (nvidia-smi -pl; a scenario's power_limit or the
// platform's gpu.power.limit). Records the cap; the op-time model then slows each kernel that would
// draw more than it (kernel_power.hpp, sim/README.md "Energy"), and clock_fraction becomes the clock
// of a kernel that keeps the SMs saturated. The peaks, the memory bandwidth and the launch overhead
// stay nominal. A cap at or above max records the limit and changes nothing. InputError (naming
// `where`) when the GPU has no power values or the cap is not above in_job.
Platform with_power_limit(Platform platform, double watts, std::string_view where);

// Parses a platform description (YAML). `source` names it in errors; every error is an
// InputError "SOURCE:LINE:COLUMN: problem; expected ...": unknown keys (listing the valid
// ones), missing keys, wrong types, values out of range. Quantities accept units:
// "40 GiB", "1555 GB/s", "19.5 TFLOP/s", "5 us", "400 W" (see scenarios/platforms/README.md).
Platform parse_platform(std::string_view yaml, std::string_view source);
Platform load_platform_file(const std::filesystem::path& path);

// The platforms shipped in scenarios/platforms/ (embedded in the binary at build time).
std::vector<std::string> builtin_platform_names();
Platform builtin_platform(std::string_view name);  // InputError listing the names if unknown
// The shipped single-node platforms whose gpu.name is `gpu_name` exactly (a device's name, as CUDA
// reports it): what a calibration of that device describes. The clusters built of the same GPUs
// (a `network`) copy those platforms' GPU sections and are left out.
std::vector<std::string> builtin_platforms_with_gpu(std::string_view gpu_name);

}  // namespace comptrain::models

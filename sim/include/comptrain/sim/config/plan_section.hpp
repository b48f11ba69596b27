#pragma once
// The scenario's `plan:` section (config/scenario.hpp), for `comptrain plan` (studies/plan.hpp):
// the strategies to compare, the memory metric and margin, the objective, the energy budget and
// the cluster and optimizer-offload searches.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/models/collective_compression.hpp"
#include "comptrain/models/data_parallel.hpp"
#include "comptrain/models/strategy.hpp"

namespace comptrain::sim {

// Which peak the planner keeps within (1 - margin) x capacity (sim/device_memory.hpp):
//   exact      the sum of the live tensors' bytes in the steady iteration (memory tracker);
//              capacity: what PyTorch's allocator may reserve (visible memory - CUDA context)
//   allocated  the caching-allocator model's max_memory_allocated (blocks rounded to 512 B,
//              the cuBLAS workspace, set-up and first iteration included); same capacity
//   reserved   its max_memory_reserved (segments, cached blocks, fragmentation): what PyTorch
//              must obtain from the GPU, so where it runs out of memory; same capacity. The
//              planner's default.
//   device     reserved + the CUDA context: what nvidia-smi shows as used; capacity: the
//              GPU's visible memory (gpu.memory_visible)
enum class MemoryMetric { exact, allocated, reserved, device };
std::string_view to_string(MemoryMetric metric);
std::optional<MemoryMetric> parse_memory_metric(std::string_view text);

// One ZeRO++ setting (Wang et al., arXiv 2306.10209; models::DataParallelSpec models it): which
// of DeepSpeed's three stage-3 options are on. hpz: zero_hpz_partition_size > 1 (the planner
// tries a node's GPUs, DeepSpeed's recommended partition); qwz: zero_quantized_weights; qgz:
// zero_quantized_gradients. The planner tries a list of them (plan.zero_plus_plus).
struct ZeroPlusPlus {
  bool hpz = false;
  bool qwz = false;
  bool qgz = false;
  friend bool operator==(const ZeroPlusPlus&, const ZeroPlusPlus&) = default;
};
// Its name in plan.zero_plus_plus and the JSON: none, hpz, qwz, qgz, hpz+qwz, hpz+qgz, qwz+qgz, all.
std::string_view to_string(ZeroPlusPlus setting);
std::optional<ZeroPlusPlus> parse_zero_plus_plus(std::string_view name);
// The setting a data-parallel spec runs.
ZeroPlusPlus zero_plus_plus_of(const models::DataParallelSpec& spec);

// The `plan:` section; unset fields take the planner's defaults (sim/plan.hpp).
// What the planner's best batch maximises (plan.objective): global samples/s (the default), or
// samples per joule of the whole job's energy (sim/energy.hpp; points without energy count 0).
enum class PlanObjective { samples_per_second, samples_per_joule };

// plan.energy_budget: the planner's best batch (and a cluster search's fastest configuration) is
// chosen among the points that stay within every bound given (sim/plan.hpp); a budget no point
// meets is a result ("energy budget" as the limit), not an error. Each bound is over the point's
// mean iteration (its data loader's wait and checkpoint cost included, sim/io.hpp):
//   joules_per_sample   the whole job's energy per trained sample (1 / samples per joule): an energy
//                       budget E for a run of N samples is E / N (Zeus reports energy to accuracy)
//   gpu_average_watts   one GPU's average power: energy / time, what nvidia-smi averages to
//   node_average_watts  one node's average power (its GPUs, CPUs and links): a per-node power budget
// (averages, not peaks: under the power model every GPU draws its TDP or cap whenever a kernel runs,
// so the peak is the same at every batch; a cap on it is power_limit.)
struct EnergyBudget {
  std::optional<double> joules_per_sample;
  std::optional<double> gpu_average_watts;
  std::optional<double> node_average_watts;
};

struct PlanSection {
  std::vector<models::StrategySpec> strategies;  // empty: the default list (strategies_to_plan); plan.recompute fills it too
  std::optional<double> margin;                  // fraction of the capacity kept free, in [0, 1)
  std::optional<std::int64_t> max_batch;
  std::optional<std::int64_t> target_global_batch;
  std::optional<MemoryMetric> memory_metric;
  std::optional<PlanObjective> objective;
  // A cluster search (sim/plan.hpp): the cluster sizes to try, from plan.gpus or plan.nodes,
  // each resolved against the parallelism section's GPUs per node (else the platform's), and
  // plan.zero_stages (0: PyTorch DDP). Empty: the scenario's own size or stage.
  struct ClusterSize {
    int nodes = 1;
    int gpus_per_node = 1;
  };
  std::vector<ClusterSize> cluster_sizes;
  std::vector<int> zero_stages;
  // plan.offload_optimizer (with plan.prefetch_optimizer_gaps): where the optimizer steps, one
  // candidate each: nullopt = on the GPU (`none`), ZeRO-Offload (`cpu`: every subgroup on the
  // CPU) and Deep Optimizer States with each gap k (`deep_optimizer_states`). The parallelism
  // section's other offload keys (part_grads_async) are kept. Empty: the scenario's own.
  std::vector<std::optional<models::OptimizerOffloadSpec>> offload_optimizer;
  // plan.comm_hooks: DDP's communication hooks to try (none, fp16, bf16, powersgd; one
  // candidate each, with PyTorch DDP only). Empty: the scenario's own.
  std::vector<models::DdpCommHook> comm_hooks;
  // plan.compressed_collectives: with and/or without the parallelism section's compression
  // (models::CollectiveCompressionSpec), one candidate each. Empty: the scenario's own.
  std::vector<bool> compressed_collectives;
  // plan.compressed_all_reduce: the compressed all-reduce's algorithms to try (ring,
  // recursive_doubling), one candidate each among the compressed ones (recursive doubling with
  // DDP only). Empty: the parallelism section's compression.algorithm.
  std::vector<models::CompressedAllReduce> compressed_all_reduce;
  // plan.zero_plus_plus: ZeRO++ settings to try, one candidate each, with DeepSpeed ZeRO-3 only
  // (hpz over a node's GPUs; hpz and qgz on layouts without model parallelism). Empty: the
  // scenario's own.
  std::vector<ZeroPlusPlus> zero_plus_plus;
  // plan.checkpoint_overhead: the checkpoint's cost per iteration as a fraction of the iteration
  // that the checkpoint interval may cost; the report gives the smallest interval meeting it (sim/io.hpp).
  std::optional<double> checkpoint_overhead;
  std::optional<EnergyBudget> energy_budget;  // plan.energy_budget
  // The layout search (studies/plan.hpp, "Layout search"): plan.tensor and plan.pipeline, each a
  // list of degrees or `all` (every degree that divides a node's GPUs, resp. the GPUs left,
  // and no more pipeline stages than layers); plan.micro_batches, the micro-batches tried in
  // each layout (default 1, 2 and 4, those that divide a replica's share of the global batch);
  // plan.sequence_parallel, Megatron's sequence parallelism on every layout with tensor > 1
  // (default true). Needs plan.target_global_batch. Empty lists: the scenario's own layout.
  std::vector<int> tensor_degrees;
  bool all_tensor_degrees = false;
  std::vector<int> pipeline_degrees;
  bool all_pipeline_degrees = false;
  std::vector<std::int64_t> micro_batches;
  bool sequence_parallel = true;
  // plan.virtual_stages: model chunks per pipeline rank to try (1: the scenario's schedule, or
  // 1F1B where it is interleaved; above 1: the interleaved schedule, with the micro-batch counts
  // that are multiples of P); `all` (all_virtual_stages): for each pipeline degree P, 1 and every
  // V >= 2 with P x V dividing the layers (Megatron's interleaved schedule: the same layers in
  // every chunk), none above 1 without a pipeline. plan.context and plan.expert: context- and expert-parallel degrees,
  // lists or `all` (every divisor of the GPUs the tensor and pipeline degrees leave); expert
  // needs an MoE model (expert_location: the key's line, for that error once the model is known).
  std::vector<int> virtual_stages;
  bool all_virtual_stages = false;
  std::vector<int> context_degrees;
  bool all_context_degrees = false;
  std::vector<int> expert_degrees;
  bool all_expert_degrees = false;
  std::string expert_location;  // "s.yaml:9:11: plan.expert"

  bool searches_layouts() const {
    return all_tensor_degrees || all_pipeline_degrees || !tensor_degrees.empty() || !pipeline_degrees.empty() || !virtual_stages.empty() || all_virtual_stages ||
           all_context_degrees || !context_degrees.empty() || all_expert_degrees || !expert_degrees.empty();
  }
  bool searches_clusters() const {
    return !cluster_sizes.empty() || !zero_stages.empty() || !offload_optimizer.empty() || !comm_hooks.empty() || !compressed_collectives.empty() || !compressed_all_reduce.empty() ||
           !zero_plus_plus.empty() ||
           searches_layouts();
  }
};

}  // namespace comptrain::sim

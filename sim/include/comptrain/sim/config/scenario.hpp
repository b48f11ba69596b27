#pragma once
// A scenario: what to simulate, written in YAML. Like Calculon's split of system, application
// and execution, it has one section per concern:
//   model:     the application (a zoo model and its shape options, or a trace file)
//   training:  how it is trained (batch size, precision, optimizer, TF32)
//   framework: what PyTorch holds besides the tensors (gradient lifetime, allocator options,
//              CUDA context, cuBLAS workspace; sim/framework.hpp)
//   platform:  the system (a shipped platform, a platform file, or an inline description)
//   strategy:  the memory-saving strategy (rules over the saved activations)
//   parallelism: optional, how many nodes and GPUs train data-parallel, with PyTorch DDP or
//              DeepSpeed ZeRO (models/data_parallel.hpp)
//   plan:      optional, for `comptrain plan`: strategies to compare, margin, search ceiling
//   sweep:     optional, scenario keys to vary (expanded by sim/sweep.hpp)
//   data:      optional, the input pipeline (sim/data_loader.hpp)
//   checkpoint: optional, checkpoints every N iterations, sync or async (sim/checkpoint.hpp)
// See scenarios/README.md.

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/models/data_parallel.hpp"
#include "comptrain/models/parallel_layout.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/sim/config/checkpoint.hpp"
#include "comptrain/sim/config/data_loader.hpp"
#include "comptrain/sim/config/framework.hpp"
#include "comptrain/sim/config/plan_section.hpp"
#include "comptrain/traces/trace.hpp"
#include "comptrain/zoo/zoo.hpp"

namespace comptrain::sim {

// The `parallelism:` section: `nodes` x `gpus_per_node` GPUs of the platform. Without model
// parallelism each trains one replica on training.batch_size samples (the per-GPU micro-batch),
// reducing gradients with PyTorch DDP, or with DeepSpeed ZeRO when `zero` is given (data.ranks =
// nodes x gpus_per_node). With `layout` (tensor, pipeline, context, expert degrees: Megatron-LM's
// and torchtitan's model parallelism, models/parallel_layout.hpp) the data-parallel degree is what
// the GPUs leave, and `zero`/`fsdp` shard over it (Megatron's distributed optimizer is ZeRO-1 over
// the data-parallel group).
struct ParallelismSection {
  int nodes = 1;
  int gpus_per_node = 1;
  models::DataParallelSpec data;
  models::ParallelLayout layout = {};
  // "FILE:LINE:COLUMN: " of each layout key (tensor, pipeline, ..., pipeline_layers), of the
  // section when the key is not given: the rules that need the model are checked when the
  // scenario is prepared, at the key they are about.
  std::map<std::string, std::string> layout_positions = {};
  // moe_token_dispatcher was written: it needs Megatron-LM's MoE layer (an MoE model under model
  // or expert parallelism), checked when the scenario is prepared.
  bool moe_token_dispatcher_given = false;
  // "FILE:LINE:COLUMN" of `nodes` and of `gpus_per_node` (of the section when a key is not
  // given; empty when built in code): the shape is checked against the platform when the
  // scenario is prepared (the command line's --platform may replace it), and that message names
  // the line of the count that is too large.
  std::string nodes_position = {};
  std::string gpus_per_node_position = {};
  std::string hpz_position = {};  // of zero.zero_hpz_partition_size: checked against the shape when prepared
  std::string qgz_position = {};  // of zero.zero_quantized_gradients: checked against the layout when prepared
  std::string overlap_param_gather_position = {};  // of zero.overlap_param_gather: checked against gradient accumulation when prepared
  std::string compression_algorithm_position = {};  // of compression.algorithm: recursive doubling's groups checked against the layout when prepared
};

// model.sequence_bins: sequence binning as NVIDIA's LDDL loader does it (NVIDIA/LDDL@e4006d2,
// README.md, "Sequence binning"; DeepLearningExamples' BERT phase 2 reads it with bin size 64):
// bin i (1-based) holds the samples of (i - 1) x bin_size + 1 to i x bin_size tokens, every
// iteration draws one bin with the dataset's share of it, and its batch is padded to the bin's
// longest, i x bin_size. The run layer replays one iteration per bin (run/run.hpp,
// run_shorter_sequence_bins) and weighs their times.
struct SequenceBins {
  std::int64_t bin_size = 0;
  std::vector<double> weights;  // one per bin, model.seq_len / bin_size of them, summing to 1
  std::string position;         // "FILE:LINE:COLUMN: " of model.sequence_bins, for the checks made when prepared
  // The padded length of bin `index` (0-based).
  std::int64_t seq_len_of(std::size_t index) const { return static_cast<std::int64_t>(index + 1) * bin_size; }
};

struct Scenario {
  std::string source;  // where it came from, for messages ("scenarios/default.yaml")
  std::string name;    // a label for reports; defaults to the model's name

  // Exactly one of the two: a zoo model (with its precision and optimizer) or a trace file
  // (path resolved against the scenario's directory).
  std::optional<zoo::ModelSpec> zoo_model;
  // Where the zoo model's keys are, for the errors found when it is built (run/run.cpp): key ->
  // "FILE:LINE:COLUMN: ". "" is the model's own key (hf_config, zoo or trace); the others are the model
  // section's keys that were given (layers, hidden, heads, seq_len, vocab, moe, ...). Empty for a
  // scenario made in code.
  std::map<std::string, std::string> model_locations;
  std::optional<std::filesystem::path> trace_file;
  std::optional<SequenceBins> sequence_bins;  // zoo models with model.seq_len only
  // training.batch_size, the one home of the batch size: unset means the trace file's own
  // batch, or 1 for a zoo model. The run layer (sim/run.hpp) builds or rescales the trace to it.
  std::optional<std::int64_t> batch_size;
  // training.tf32: fp32 matmuls (torch.backends.cuda.matmul.allow_tf32) and convolutions
  // (torch.backends.cudnn.allow_tf32) on TF32 tensor cores. Absent: PyTorch's defaults for
  // framework.pytorch (scenario_reader.cpp); a scenario made in code: neither.
  bool allow_tf32_matmul = false;
  bool allow_tf32_cudnn = false;
  bool channels_last = false;              // training.memory_format: channels_last (NHWC) or contiguous_format (NCHW)
  // training.float8: torchao's float8 training of the linear layers (models::Float8Scope); unset: none.
  std::optional<models::Float8Scope> float8;
  // training.gradient_accumulation_steps: micro-steps per optimizer step, each of batch_size
  // samples (models/gradient_accumulation.hpp; under DDP the earlier ones run in no_sync()).
  int accumulation_steps = 1;
  FrameworkSpec framework;

  std::optional<models::Platform> platform;  // required to simulate
  // power_limit: the GPU's power cap in W, applied to `platform` (and to one set_platform gives)
  // by models::with_power_limit.
  std::optional<double> power_limit;
  models::StrategySpec strategy;             // default: baseline
  std::optional<ParallelismSection> parallelism;  // unset: one GPU
  std::optional<PlanSection> plan;
  // data: and checkpoint: (sim/data_loader.hpp, sim/checkpoint.hpp), simulated by sim/io.hpp.
  std::optional<DataSpec> data;
  std::optional<CheckpointSpec> checkpoint;

  // Where some fields were read, as "SOURCE:LINE:COLUMN: " (the section's place when the field
  // itself is left out), for errors found after reading, once the model or the platform is known:
  // the cost bounds of the replay ("parallelism", "plan") and of the I/O simulation
  // ("data.workers_per_gpu", "data.prefetch_factor", "checkpoint.chunk"). location_of gives it.
  std::map<std::string, std::string, std::less<>> locations;

  // The document itself, kept so that a `sweep:` section can be expanded by re-reading it
  // with overrides (expand_sweep in sim/sweep.hpp). The reader checks the sweep section's shape
  // only; the scenario above is the document without its sweep.
  bool has_sweep = false;
  std::string yaml;
  std::filesystem::path base_dir;
};

// Parses a scenario. `source` names it in errors; relative trace paths resolve against
// `base_dir`. Throws InputError "SOURCE:LINE:COLUMN: problem; expected ..." for malformed YAML,
// unknown keys (listing the valid ones), wrong types and out-of-range values.
Scenario parse_scenario(std::string_view yaml, std::string_view source, const std::filesystem::path& base_dir);
Scenario load_scenario_file(const std::filesystem::path& path);

// The scenario shipped inside the binary (scenarios/default.yaml at build time).
std::string_view default_scenario_yaml();
Scenario default_scenario();

// The trace the scenario describes, at its batch size (implemented with the run layer,
// sim/run.hpp, which also prepares a scenario once for many batch sizes).
traces::Trace build_trace(const Scenario& scenario);

// Replaces the scenario's platform (the command line's --platform) and re-picks every compress
// rule's `profile: auto` for it, so the costs follow the GPU. InputError when no shipped profile
// stands for the new platform, or the one that does lacks a rule's codec.
void set_platform(Scenario& scenario, models::Platform platform);

// "SOURCE:LINE:COLUMN: " where `field` was read (Scenario::locations), or "SOURCE: " when it was
// not (a scenario built in code, a field left out with its section).
std::string location_of(const Scenario& scenario, std::string_view field);

// The scenario's platform; InputError naming the scenario when it has none.
const models::Platform& require_platform(const Scenario& scenario);

}  // namespace comptrain::sim

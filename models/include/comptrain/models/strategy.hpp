#pragma once
// Memory-saving strategies: plans over the trace's saved activations, turned into a
// Schedule that the simulator executes. Strategies combine per tensor: an ordered list of
// rules, each selecting activations and giving them an action; the first rule that selects a
// tensor decides, unselected tensors are kept.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "comptrain/models/compression_model.hpp"
#include "comptrain/models/op_time.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/support/error_bound.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::models {

// Whether `name` is `pattern` or matches it as a shell-style pattern (fnmatch(3), no flags).
bool name_matches(const std::string& pattern, const std::string& name);

// Which saved activations a rule applies to. A storage is selected when it is saved for
// backward and (if given) it is read by a forward op of one of `inputs_of`, or written by a
// forward op of one of `outputs_of`, and it is at least `min_bytes` large. Both lists empty:
// every saved activation.
//
// `names`, when given, further restricts the selection to the storages (base tensors) of those
// names: each entry is a name, or a shell-style pattern as POSIX fnmatch(3) reads it (`*`, `?`,
// `[...]`: "bert.encoder.layer.*"); a name always matches itself. A compress rule never takes an
// integer or boolean storage (indices, masks: a lossy codec would corrupt them) unless `names`
// matches it.
struct TensorSelector {
  std::vector<traces::OpKind> inputs_of;
  std::vector<traces::OpKind> outputs_of;
  std::int64_t min_bytes = 0;
  std::vector<std::string> names;
  // `modules`, when given, further restricts the selection to the storages whose (base
  // tensor's) name lies in a module one of these patterns names: dot-separated paths with `*`
  // (one component), `**` (any number) and numeric ranges `[a-b]`, matched at any component
  // ("layers.*.mlp", "layers.[0-15]"; models/module_pattern.hpp). validate_strategy checks them.
  std::vector<std::string> modules;
};

struct OffloadAction {
  int lookahead = 2;  // the prefetch starts when the compute stream starts the op this many
                      // ops before the consumer (>= 0; 0: at the consumer, which waits for it,
                      // as torchtune's OffloadActivations brings a tensor back in its unpack hook)
  // vDNN's synchronous mode (Rhu et al., MICRO'16): the copy starts as soon as the tensor is
  // complete and the compute stream does not run the op after the tensor's last forward use
  // until the copy has ended, so the forward pass never runs ahead of its offloads. Otherwise
  // the copy starts after the last forward use and nothing waits for it.
  bool synchronous = false;
  // Where the copies run. `copy`: dedicated copy streams (vDNN, PyTorch code that uses a side
  // stream), overlapping compute. `compute`: the compute stream itself, as
  // torch.autograd.graph.save_on_cpu issues them (`tensor.to("cpu")` in its pack hook and back
  // to the device in its unpack hook, on the current stream): each copy out runs right after
  // the tensor's last writer, each copy back right before its first backward use, and compute
  // waits for both (a naive swap). `lookahead` and `synchronous` apply to `copy` only.
  // The compute stream does not start the op this many ops after the tensor's last forward use
  // until the copy out has ended, so the tensor's bytes are free from that op on (>= 1; copy
  // stream, not with `synchronous`). Without it nothing waits for the copy out, and the bytes are
  // free whenever it ends. `comptrain plan --hybrid` exports its offload decisions with it.
  std::optional<int> free_by = std::nullopt;
  // torchtune's OffloadActivations (`max_fwd_stash_size`, its default 5): the copy out starts when
  // the tensor is saved (after its last writer, on the copy stream) and the GPU tensor stays
  // stashed until a later offloaded tensor is saved at least `stash` saved activations after it;
  // then the compute stream waits for the copy out before its next op, and the bytes are free.
  // The offloaded tensors that no later one releases (the forward pass's last) are used from the
  // GPU in the backward pass, with no copy back. Saved activations are counted in the order of
  // their last writers (models/strategies/README.md, "torchtune's stash"). Copy stream only, not
  // with `synchronous` or `free_by`.
  std::optional<int> stash = std::nullopt;
  enum class Stream { copy, compute };
  Stream stream = Stream::copy;
  // Host memory the copies go to: `pinned` (page-locked: cudaMallocHost / pin_memory=True; DMA
  // at the link's rate, asynchronous for the CPU), or `pageable` (plain malloc: save_on_cpu's
  // default pin_memory=False). Pageable copies run at host_link.pageable_bandwidth and block
  // the launching CPU thread until they end (CUDA Runtime API, "API synchronization behavior":
  // a device-to-pageable copy returns once complete; a pageable-to-device copy once the source
  // is staged, which for a copy larger than the staging buffers is nearly all of it).
  enum class HostMemory { pinned, pageable };
  HostMemory host_memory = HostMemory::pinned;
};

struct RecomputeAction {
  // checkpoints: keep the selected activations whose names match `keep` and drop every other
  // selected one, as torch.utils.checkpoint around blocks does: the block inputs are kept and
  // each block's forward is replayed before its backward (Hugging Face's
  // gradient_checkpointing keeps each transformer layer's input).
  // all: drop every selected activation and rebuild it from whatever is available (a plan that
  // names its storages one by one: `comptrain plan --hybrid` exports its recompute decisions so).
  // selective: checkpoints as PyTorch's selective activation checkpointing runs them
  // (torch.utils.checkpoint non-reentrant with create_selective_checkpoint_contexts, its policy
  // answering MUST_SAVE for the ops whose outputs `keep` names) around each module instance one
  // of `blocks` names; on top of checkpoints' split, the memory the checkpoint frame and the
  // policy's cache hold (models/strategies/README.md, "Selective activation checkpointing"):
  //   - each kept output a block's forward writes is cached from the forward until the block's
  //     recomputation consumes it (the block's first backward task), whether or not a backward op
  //     reads it; one the recomputation never reaches (it stops early, once every tensor the
  //     block saved is rebuilt) is held until the block's last backward task;
  //   - the block's inputs (the checkpoint's tensor arguments) are held until its last backward
  //     task.
  enum class Mode { every_k, sqrt_n, budget, checkpoints, all, selective };
  Mode mode = Mode::sqrt_n;
  int k = 2;                             // every_k: keep every k-th selected activation
  std::int64_t budget_bytes = 0;         // budget: peak bytes of saved activations allowed
  std::vector<std::string> keep;         // checkpoints, selective: name patterns (as TensorSelector::names)
  // selective: module patterns (models/module_pattern.hpp) naming the checkpointed regions; each
  // module instance a pattern matches (module_pattern_instance: `model.layers.*` gives
  // `model.layers.0`, `model.layers.1`, ...) is one checkpoint call.
  std::vector<std::string> blocks;
};

// Compression, costed by explicit numbers, by a calibration profile, or by a profile with some
// numbers overridden (what-if studies).
struct CompressAction {
  // Given explicitly, or (with a profile) left empty to come from the profile's models for
  // `codec`: the ratio from the ratio model of the tensor's class (derived from the op that
  // produces it) at `error_bound`, with the class's default features overridden field by field
  // by the value features the trace gives for the saved content (traces/FORMAT.md, "values");
  // the seconds from the compress / decompress time models. Without a profile the ratio and
  // both bandwidths are required and the latency defaults to 0.
  std::optional<double> ratio;                 // original bytes / compressed bytes (>= 1)
  std::optional<double> compress_bandwidth;    // bytes of input per second
  std::optional<double> decompress_bandwidth;  // bytes of output per second
  std::optional<double> latency;               // seconds per call (compress and decompress alike)

  std::shared_ptr<const CalibrationProfile> profile;
  bool profile_auto = false;  // `profile: auto`: picked for the platform, re-picked when it changes (sim::set_platform)
  std::string codec = "szp";
  // The error bound that picks the profile's ratio. rel: relative to each tensor's value range;
  // abs: in the tensor's own units, turned into the relative bound the ratio model takes
  // through the range the trace gives (traces/FORMAT.md, values.range); a storage without one
  // is an error. The same mode type the kernels' streams record.
  double error_bound = 0;
  ErrorBoundMode error_bound_mode = ErrorBoundMode::rel;

  // COMET's adaptive bound (`error_bound: adaptive`): each storage gets the largest bound whose
  // predicted weight-gradient error stays within `tolerance` of its conv/linear consumers'
  // weight-gradient RMS (gradient_error.hpp; models/README.md, "Gradient error of a compressed
  // activation"), from the trace's gradient statistics, capped at its value range; `error_bound`
  // is then unused. Storages the model does not cover (no statistics, a backward reader other
  // than conv/linear/ReLU) take `fallback_error_bound` (in error_bound_mode's units) when given,
  // and are an InputError otherwise. Needs a profile, a codec whose errors the model describes
  // (szp, szh: uniform quantisation, zeros exact) and no explicit ratio.
  struct Adaptive {
    double tolerance = 0;                        // relative gradient error allowed, finite > 0
    std::optional<double> fallback_error_bound;  // > 0
  };
  std::optional<Adaptive> adaptive;

  // `positive_mask`: which storages keep the kernels' positive mask, one bit per value saying
  // x > 0 beside the stream (kernels/README.md, "Positive mask"; szp and szh), so that a ReLU's
  // backward, which reads its saved output's sign, reads it exactly: the error of a storage a
  // ReLU also reads is then the weight path's alone, which the gradient-error model predicts.
  // Its bytes (1 bit per value) are added to the compressed size. Scenario values: false
  // (none), relu (the storages a ReLU's backward reads), true (all); not given: relu under
  // `error_bound: adaptive`, none otherwise. Needs a profile (which names the codec).
  enum class PositiveMask { none, relu, all };
  PositiveMask positive_mask = PositiveMask::none;
};

// The scenario's name of a positive_mask value (false, relu, true).
std::string_view to_string(CompressAction::PositiveMask mask);

// The class of an activation whose content an op of this kind wrote last (the strategy uses the
// storage's last forward writer): relu -> post_relu, batchnorm,
// gelu, linear and matmul -> linear, anything else -> generic.
TensorClass tensor_class_of_op(traces::OpKind kind);

using StrategyAction = std::variant<OffloadAction, RecomputeAction, CompressAction>;

struct StrategyRule {
  TensorSelector select;
  StrategyAction action;
  // Where the rule was written, "SOURCE:LINE:COLUMN: FIELD" ("s.yaml:7:7: strategy.rules[0]"),
  // when read_strategy read it from YAML; empty for a rule built in code (a hybrid plan's). It
  // travels with the rule so that an error found while a schedule is built, long after the
  // reader has gone, still names the file and the line (rule_context).
  std::string location = {};

  const OffloadAction* offload() const { return std::get_if<OffloadAction>(&action); }
  const RecomputeAction* recompute() const { return std::get_if<RecomputeAction>(&action); }
  const CompressAction* compress() const { return std::get_if<CompressAction>(&action); }
  CompressAction* compress() { return std::get_if<CompressAction>(&action); }
};

// Megatron-LM's activation recomputation settings (megatron/core/transformer/transformer_config.py:
// recompute_granularity, recompute_method, recompute_num_layers; the command line's
// --recompute-granularity, --recompute-method, --recompute-num-layers), applied to each pipeline
// stage's own layers as transformer_block.py's _checkpointed_forward does (models/strategies/README.md,
// "Megatron-LM's recomputation settings"). strategy_for_stage turns them into rules.
//   full, uniform: the stage's layers in order, split into groups of num_layers (the last one
//     shorter); each group one checkpoint: its inputs kept, the rest of the group dropped and
//     recomputed from them.
//   full, block: the stage's first num_layers layers, each one checkpoint; the others untouched.
//   selective: the attention core's softmax output, its casts and its dropout (Korthikanti et
//     al. 2022, "Reducing Activation Recomputation in Large Transformer Models", §4.2: the 5as/h
//     term of Table 2) dropped in every layer and recomputed from the kept scores' inputs.
// num_layers holds one value for every stage (Megatron's single flag) or one per pipeline stage
// (as Megatron-DeepSpeed's per-stage lists and some planners give it; 0: that stage recomputes
// nothing).
struct LayerRecompute {
  enum class Granularity { full, selective };
  enum class Method { uniform, block };
  Granularity granularity = Granularity::full;
  Method method = Method::uniform;  // full only
  std::vector<int> num_layers;      // full: one value, or one per pipeline stage; selective: empty
  // Where each was written ("s.yaml:7:5: strategy.recompute.num_layers"), for errors found once
  // the stages' layers are known; empty for settings built in code.
  std::string location = {};                          // "SOURCE:LINE:COLUMN: strategy.recompute"
  std::string num_layers_location = {};               // the num_layers value (number or list)
  std::vector<std::string> num_layers_locations = {};  // one per num_layers entry ("...num_layers[1]")
};

struct StrategySpec {
  std::string name = "baseline";
  std::vector<StrategyRule> rules;  // empty: baseline
  // Megatron-LM's settings, turned into rules per pipeline stage (strategy_for_stage); they come
  // after `rules`, so a hand-written rule selects first.
  std::optional<LayerRecompute> layer_recompute = std::nullopt;
  // strategy.first_stages K: `rules` apply on pipeline stages (ranks) 0 to K-1 only; the later
  // stages run without them (layer_recompute still applies on every stage). Why: under 1F1B
  // rank r holds min(P - r, M) micro-batches' activations in flight (Megatron-LM schedules.py:957,
  // its warm-up count; shared/reference/parallelism.md: the first stage the most, the last one), so compressing or
  // offloading where activations pile up saves the peak at the cost of the first stages only.
  // nullopt: every stage. 1 <= K <= P, and a pipeline (check_first_stages).
  std::optional<int> first_stages = std::nullopt;
  std::string first_stages_location = {};  // "s.yaml:7:17: strategy.first_stages", for errors found later
};

// Throws InputError at strategy.first_stages's location when the strategy restricts its rules to
// the first K stages but the run has `pipeline` stages with K > pipeline, or no pipeline (1).
void check_first_stages(const StrategySpec& strategy, int pipeline);

// Throws InputError at the setting's location when `recompute` cannot apply to a pipeline whose
// stages hold `stage_layers` layers each (one entry: no pipeline): a per-stage list of another
// length, or a num_layers above its stage's layers.
void check_layer_recompute(const LayerRecompute& recompute, const std::vector<int>& stage_layers);

// `strategy` for the trace of pipeline stage `stage` (nullopt: no pipeline, the trace is the
// rank's whole model): its rules followed by the rules its layer_recompute gives for the layers
// the trace holds, without layer_recompute; with first_stages K, `rules` only on stages below K
// (first_stages reset in the result; InputError without a stage). The layers are the trace's one outermost numbered
// module list holding weights (`transformer.h.N`, `model.layers.N`); the stage's first layer is
// the lowest index it holds. InputError (at the setting's location) when the trace has no such
// list or several, a num_layers exceeds its layers, or a per-stage list meets a trace without its
// stage.
StrategySpec strategy_for_stage(const StrategySpec& strategy, const traces::Trace& trace, std::optional<int> stage);

// How every message about rule `rule` of `strategy` begins: the rule's location and field
// ("s.yaml:7:7: strategy.rules[0]: ") when it has one, else "strategy 'NAME' rule I: ", preceded
// by "SOURCE: " when `source` (the document the strategy came from) is not empty.
std::string rule_context(const StrategySpec& strategy, std::size_t rule, std::string_view source = {});

// Throws InputError "CONTEXT: ..." (rule_context, with `source`) for a rule no trace could run:
// an offload lookahead < 1, recompute k < 1, a compress rule without the numbers its costs need,
// a profile without the rule's codec. Checked once, before any batch is tried.
void validate_strategy(const StrategySpec& strategy, std::string_view source = {});

// A saved activation a rule can act on (one with a gap: written by forward ops only, its last
// forward use before the backward pass and before its first backward read), in storage order.
// Steps are trace op indices, which are the baseline schedule's compute tasks.
struct SavedActivation {
  traces::TensorIndex storage = 0;          // the base tensor
  std::int64_t bytes = 0;
  traces::OpIndex last_forward_use = 0;
  traces::OpIndex first_backward_read = 0;
  std::vector<traces::OpIndex> writers;     // forward writers, ascending (a rebuild replays them all)
};
std::vector<SavedActivation> saved_activations(const traces::Trace& trace, const OpTimeModel& time_model);

// Why a valid strategy cannot apply to one trace (at one batch size): a recompute budget
// below what the checkpoints alone need. A result for the planner and the reports, not an
// input error.
struct NotApplicable {
  std::string reason;
};

// Builds the schedule: the trace's ops on the compute stream in recorded order, plus the
// copies, codec tasks and recomputations the rules call for. Validates the strategy
// (InputError) and the trace's fitness for it (InputError: an absolute error bound on a
// tensor without a value range); NotApplicable when the strategy cannot apply at this batch.
std::variant<Schedule, NotApplicable> build_schedule(const traces::Trace& trace, const OpTimeModel& time_model, const StrategySpec& strategy);

}  // namespace comptrain::models

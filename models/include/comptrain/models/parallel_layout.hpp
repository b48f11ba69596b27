#pragma once
// How a model is split over the GPUs of a run, as Megatron-LM and torchtitan split it: tensor (T),
// context (C), expert (E), data (D) and pipeline (P) parallelism, with the virtual pipeline
// stages of the interleaved schedule and sequence parallelism. The data-parallel degree is what
// the GPU count leaves: D = GPUs / (T x C x P). Expert parallelism splits the D x C ranks that
// share a tensor and pipeline index (Megatron-LM's MoE layers use ETP x EP x EDP x PP, the
// attention TP x CP x DP x PP: megatron/core/transformer/moe/README.md, "MoE parallel folding").
// Sources and formulas: shared/reference/parallelism.md and models/README.md, "Model parallelism".

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/models/schedule.hpp"
#include "comptrain/traces/vocabulary.hpp"

namespace comptrain::models {

// The pipeline schedules (models/pipeline_schedule.hpp builds their per-stage orders):
//   gpipe        all forwards, then all backwards (Huang et al. 2019, arXiv 1811.06965)
//   1f1b         PipeDream-Flush / Megatron's non-interleaved schedule (Megatron-LM schedules.py:2147, forward_backward_pipelining_without_interleaving)
//   interleaved  Megatron's interleaved 1F1B over virtual_stages chunks per rank (schedules.py:1019, _with_interleaving)
//   zero_bubble  ZB-H1 (Qi et al. 2024, arXiv 2401.10241 §2.1): the backward split into the
//                input-gradient and the weight-gradient pass, the latter filling the bubble
enum class PipelineSchedule : unsigned char { gpipe, one_f_one_b, interleaved, zero_bubble };
std::string_view to_string(PipelineSchedule schedule);  // as the scenario writes it: "1f1b", ...
std::optional<PipelineSchedule> pipeline_schedule_from_string(std::string_view text);

// A communication group of the layout, as the trace's communication ops name theirs: the trace's
// vocabulary owns the enum and its to_string (traces/vocabulary.hpp), so one name serves both.
using traces::ParallelGroup;

struct ParallelLayout {
  int tensor = 1;
  int pipeline = 1;
  int context = 1;
  int expert = 1;
  // The experts' tensor-parallel degree (ETP, Megatron-LM's --expert-tensor-parallel-size); 0:
  // the tensor degree T, Megatron's default (moe/README.md:523). Only T is modelled (the rank
  // groups above are those of EP within D x C; ETP != T is MoE parallel folding).
  int expert_tensor = 0;
  // How Megatron-LM's MoE layer moves the tokens to the experts (its --moe-token-dispatcher-type,
  // zoo::ExpertParallelSpec::TokenDispatcher): false, the alltoall dispatcher (comptrain's
  // default); true, the allgather dispatcher (Megatron's default), with E or T equal to 1.
  bool moe_allgather_dispatcher = false;
  int virtual_stages = 1;  // model chunks per pipeline rank (interleaved schedule only)
  bool sequence_parallel = false;
  // Megatron-LM before Megatron Core (--scatter-gather-tensors-in-pipeline, its default then):
  // under tensor parallelism without sequence parallelism each tensor-parallel rank sends 1/T of
  // a pipeline boundary tensor and the receiver all-gathers it over the tensor group
  // (zoo::PipelineStageSpec::scatter_gather). Megatron Core sends the whole tensor from every rank.
  bool pipeline_scatter_gather = false;
  // How context parallelism exchanges K and V (shared/reference/parallelism.md §3): false,
  // Transformer Engine's ring beside the attention (Megatron's --cp-comm-type p2p, the default);
  // true, an all-gather before it (PyTorch context_parallel's default rotation; Megatron's allgather).
  bool context_all_gather = false;
  // Megatron-LM's --tp-comm-overlap: Transformer Engine's Userbuffers overlap of the forward
  // tensor-parallel all-gathers and reduce-scatters with their GEMMs, and of the backward pass's
  // gradient all-gathers with the input-gradient GEMMs (zoo::TensorParallelSpec::comm_overlap).
  // Needs sequence parallelism, as Megatron-LM does.
  bool tp_comm_overlap = false;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  // Layers of each virtual pipeline stage in model order (P x virtual_stages entries, summing to
  // the model's layers; stage_layers below says which rank runs which); empty: as even as
  // possible, the first stages taking one more when the count does not divide (Megatron-
  // DeepSpeed's uniform partition, DeepSpeed's partition_uniform).
  std::vector<int> pipeline_layers;

  int model_parallel() const { return tensor * context * pipeline; }
  bool is_data_parallel_only() const { return model_parallel() == 1 && expert == 1; }
  friend bool operator==(const ParallelLayout&, const ParallelLayout&) = default;
};

// What of the model the layout's divisibility rules look at.
// layers, heads, seq_len 0: not known, and the rules about them are not checked.
struct LayoutModel {
  int layers = 0;
  int heads = 0;
  int kv_heads = 0;   // 0: as many as heads
  int experts = 0;    // routed experts per MoE layer; 0: a dense model
  long long vocab = 0;
  long long seq_len = 0;
};

// One broken rule: the scenario key it is about ("tensor", "pipeline_layers", ...) and what was
// expected, for the reader to place at that key's line.
struct LayoutProblem {
  std::string field;
  std::string message;
};

// Every rule the layout breaks for `model` on `gpus` GPUs, in the order of the keys: degrees >= 1;
// T x C x P divides the GPUs; T divides the heads and the KV heads; E divides the experts and
// D x C (the ranks it splits), and needs an MoE model; expert_tensor is 0 or T; C x 2 divides the sequence (load-balanced
// chunks); P x virtual_stages <= layers; virtual_stages > 1 only with the interleaved schedule
// (which needs P > 1, virtual_stages >= 2 and, as Megatron's asserts, micro-batches a multiple
// of P: checked where the micro-batch count is known); sequence_parallel needs T > 1;
// pipeline_layers has P x V positive entries summing to the layers. Degrees below 1 are
// reported alone (the other rules divide by them). Empty: the layout is valid.
std::vector<LayoutProblem> check_layout(const ParallelLayout& layout, const LayoutModel& model, int gpus);

// D = gpus / (T x C x P). Throws std::invalid_argument when a degree is below 1 or T x C x P
// does not divide the GPUs.
int data_parallel_degree(const ParallelLayout& layout, int gpus);

// The ranks a group runs over, as a dimension of the rank mesh in Megatron-LM's order
// tp-cp-ep-dp-pp (megatron/core/parallel_state.py): rank = t + T(c + C(d + D p)), the expert
// index splitting (c, d) with E consecutive blocks of T ranks. RankGroups{size, stride} as the
// replay takes it (models/schedule.hpp):
//   tensor {T, 1}   context {C, T}   data {D x C, T}   expert {E, T}
//   expert_data {D x C / E, T x E}   pipeline {P, T x C x D}
// Throws std::invalid_argument where data_parallel_degree does, and for the expert groups when
// E does not divide D x C.
RankGroups rank_groups(const ParallelLayout& layout, int gpus, ParallelGroup group);

// The layers of each virtual pipeline stage, in model order (P x virtual_stages entries): entry
// j is virtual stage j, which pipeline rank j mod P runs as its model chunk j / P (Megatron's
// interleaved assignment: rank r's chunk k holds virtual stage k x P + r). The given
// pipeline_layers, or the uniform partition of `layers` over the P x V virtual stages. Throws
// std::invalid_argument when a degree is below 1 or there are fewer layers than stages.
std::vector<int> stage_layers(const ParallelLayout& layout, int layers);

}  // namespace comptrain::models

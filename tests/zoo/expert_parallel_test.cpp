// Expert parallelism (zoo::ExpertParallelSpec, traces/zoo/README.md "Expert parallelism"): one
// expert-parallel rank of a tiny Mixtral-shaped decoder as Megatron-LM's MoE layer with the
// alltoall dispatcher -- its all_to_alls and their bytes counted by hand, the local experts and
// their parameter shards, the busiest rank under skewed routing, capacity padding, and the
// refusals; and with the allgather dispatcher (Megatron-LM's default) its gathers, waits and
// scatters op by op, and the SequentialMLP of its time.

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "comptrain/support/input_error.hpp"
#include "comptrain/traces/trace.hpp"
#include "comptrain/zoo/zoo.hpp"

namespace comptrain::zoo {
namespace {

using traces::CommunicationKind;
using traces::OpKind;
using traces::ParallelGroup;
using traces::Phase;
using traces::TensorRole;
using traces::Trace;

constexpr std::int64_t kHidden = 64;
constexpr std::int64_t kWidth = 128;  // each expert's MLP width
constexpr std::int64_t kSeq = 32;
constexpr std::int64_t kBatch = 2;
constexpr std::int64_t kLayers = 2;

// Mixtral's shape in miniature: 4 experts, top-2, bf16 (2 bytes per element).
ModelRequest tiny_mixtral(std::int64_t expert_degree, std::int64_t tensor = 1) {
  DecoderArchitecture arch;
  arch.family = "mixtral";
  arch.layers = kLayers;
  arch.hidden = kHidden;
  arch.heads = 4;
  arch.kv_heads = 2;
  arch.intermediate = kWidth;
  arch.vocab = 256;
  arch.max_positions = 1024;
  MoeArchitecture moe;
  moe.experts = 4;
  moe.top_k = 2;
  moe.intermediate = kWidth;
  arch.moe = moe;
  ModelRequest request;
  request.model = "llama";
  request.decoder = arch;
  request.seq_len = kSeq;
  request.batch_size = kBatch;
  request.precision = Precision::bf16;
  if (expert_degree > 0) request.expert_parallel = ExpertParallelSpec{expert_degree, 0};
  if (tensor > 1) request.tensor_parallel = TensorParallelSpec{tensor, true};
  return request;
}

struct Communications {
  int count = 0;
  std::int64_t bytes = 0;  // each op's larger side, as the schedule counts an all_to_all
  std::vector<std::int64_t> each;
};

Communications communications(const Trace& trace, CommunicationKind kind, ParallelGroup group, std::optional<Phase> phase = std::nullopt,
                              const std::string& containing = "") {
  Communications c;
  for (const auto& op : trace.ops()) {
    if (op.kind != OpKind::communication || !op.communication || op.communication->kind != kind || op.communication->group != group) continue;
    if (phase && op.phase != *phase) continue;
    if (op.name.find(containing) == std::string::npos) continue;
    std::int64_t in = 0;
    std::int64_t out = 0;
    for (const auto t : op.inputs) in += trace.tensor(t).bytes();
    for (const auto t : op.outputs) out += trace.tensor(t).bytes();
    ++c.count;
    c.each.push_back(std::max(in, out));
    c.bytes += std::max(in, out);
  }
  return c;
}

std::int64_t parameters(const Trace& trace, const std::string& containing) {
  std::int64_t count = 0;
  for (const auto& tensor : trace.tensors()) {
    if (tensor.role == TensorRole::weight && tensor.name.find(containing) != std::string::npos) count += tensor.elements();
  }
  return count;
}

bool has_parameter(const Trace& trace, const std::string& name) {
  for (const auto& tensor : trace.tensors()) {
    if (tensor.role == TensorRole::weight && tensor.name == name) return true;
  }
  return false;
}

// The ops whose host call waits for the GPU (traces::Op::host_sync), in order.
std::vector<std::string> host_synced(const Trace& trace) {
  std::vector<std::string> names;
  for (const auto& op : trace.ops()) {
    if (op.host_sync) names.push_back(op.name);
  }
  return names;
}

// Uniform routing: 32 tokens x top-2 = 64 routed rows per sample, 16 per expert. EP 2: rank 0
// holds experts 0 and 1 and receives E x 16 = 32 rows for each, 64 in all: what it sends. Each
// all_to_all moves 64 rows x 64 x 2 B = 8 KiB per sample, 16 KiB for the micro-batch of 2; per
// sparse layer a dispatch and a combine forward and their mirror images backward: 4 per layer.
TEST(ExpertParallel, FourAllToAllsPerLayerOfTheRoutedRows) {
  const Trace trace = build_model(tiny_mixtral(2));
  const std::int64_t each = kBatch * kSeq * 2 * kHidden * 2;
  const Communications forward = communications(trace, CommunicationKind::all_to_all, ParallelGroup::expert, Phase::forward);
  const Communications backward = communications(trace, CommunicationKind::all_to_all, ParallelGroup::expert, Phase::backward);
  EXPECT_EQ(forward.count, 2 * kLayers);
  EXPECT_EQ(backward.count, 2 * kLayers);
  for (const std::int64_t b : forward.each) EXPECT_EQ(b, each);
  for (const std::int64_t b : backward.each) EXPECT_EQ(b, each);
  EXPECT_EQ(trace.metadata().at("expert_parallel"), "2");
  EXPECT_EQ(trace.metadata().at("moe_simulated_expert_rank"), "0");
  EXPECT_EQ(trace.metadata().at("moe_local_expert_rows"), "0:32,1:32");
  // No tensor parallelism: no collective over the tensor group.
  EXPECT_EQ(communications(trace, CommunicationKind::all_gather, ParallelGroup::tensor).count, 0);
}

// The rank holds experts / E experts, whole: 2 of the 4, 3 x 64 x 128 weights each per layer;
// the router (4 x 64 per layer) is replicated. Over the expert-parallel ranks the experts add up
// to the whole model's, which Megatron's layer on one rank (E = 1) holds as Hugging Face's does.
TEST(ExpertParallel, LocalExpertsAndTheirParameters) {
  const Trace one = build_model(tiny_mixtral(1));
  const Trace hugging_face = build_model(tiny_mixtral(0));
  const Trace two = build_model(tiny_mixtral(2));
  const std::int64_t per_expert = 3 * kHidden * kWidth;
  EXPECT_EQ(parameters(one, ".experts."), kLayers * 4 * per_expert);
  EXPECT_EQ(parameters(hugging_face, ""), parameters(one, "")) << "the same model, built as Megatron's layer";
  EXPECT_EQ(parameters(two, ".experts."), kLayers * 2 * per_expert);
  EXPECT_EQ(parameters(two, ".gate.weight"), kLayers * 4 * kHidden);
  EXPECT_TRUE(has_parameter(two, "model.layers.1.block_sparse_moe.experts.1.w2.weight"));
  EXPECT_FALSE(has_parameter(two, "model.layers.1.block_sparse_moe.experts.2.w2.weight"));
  EXPECT_EQ(parameters(one, "") - parameters(two, ""), kLayers * 2 * per_expert) << "only the experts are split";
}

// With the experts' tensor parallelism (ETP = TP = 2, sequence parallel): every expert's w1/w3
// hold 64 of its 128 columns, w2 64 of its rows: the experts / (ETP x EP). The rank routes its 16
// tokens (32 rows): each all_to_all moves 32 x 64 x 2 B per sample; the all_gather after the
// dispatch and the reduce_scatter before the combine, over the tensor group, carry the expert
// group's 64 rows per sample.
TEST(ExpertParallel, ExpertTensorParallelismGathersAndScattersTheRows) {
  const Trace trace = build_model(tiny_mixtral(2, 2));
  EXPECT_EQ(parameters(trace, ".experts."), kLayers * 2 * 3 * kHidden * kWidth / 2);
  const Communications a2a = communications(trace, CommunicationKind::all_to_all, ParallelGroup::expert, Phase::forward);
  EXPECT_EQ(a2a.count, 2 * kLayers);
  for (const std::int64_t b : a2a.each) EXPECT_EQ(b, kBatch * kSeq / 2 * 2 * kHidden * 2);
  const Communications gather = communications(trace, CommunicationKind::all_gather, ParallelGroup::tensor, Phase::forward, "dispatch.all_gather");
  const Communications scatter =
      communications(trace, CommunicationKind::reduce_scatter, ParallelGroup::tensor, Phase::forward, "combine.reduce_scatter");
  EXPECT_EQ(gather.count, kLayers);
  EXPECT_EQ(scatter.count, kLayers);
  for (const std::int64_t b : gather.each) EXPECT_EQ(b, kBatch * kSeq * 2 * kHidden * 2);
  EXPECT_EQ(trace.metadata().at("expert_tensor_parallel"), "2");
}

// expert_load {1, 1, 3, 1} of 64 slots: 10.67, 10.67, 32, 10.67, largest remainders 11, 11, 32,
// 10. Rank 0 (experts 0, 1) takes 22 rows of a sequence, rank 1 (2, 3) 42: rank 1 is simulated, its
// experts processing 2 x 32 = 64 and 2 x 10 = 20 rows per sample; it receives 84 rows but sends 64,
// so each all_to_all counts the 84.
TEST(ExpertParallel, TheBusiestRankIsSimulated) {
  ModelRequest request = tiny_mixtral(2);
  request.routing = ExpertRouting{};
  request.routing->expert_load = {1, 1, 3, 1};
  const Trace trace = build_model(request);
  EXPECT_EQ(trace.metadata().at("moe_simulated_expert_rank"), "1");
  EXPECT_EQ(trace.metadata().at("moe_local_expert_rows"), "2:64,3:20");
  const Communications a2a = communications(trace, CommunicationKind::all_to_all, ParallelGroup::expert, Phase::forward);
  for (const std::int64_t b : a2a.each) EXPECT_EQ(b, kBatch * 84 * kHidden * 2);
  EXPECT_TRUE(has_parameter(trace, "model.layers.0.block_sparse_moe.experts.2.w1.weight"));
}

// A capacity factor pads every expert to its capacity ceil(64 x 1.25 / 4) = 20 rows per sequence:
// each rank sends 80 rows and receives E x 20 = 40 per expert.
TEST(ExpertParallel, CapacityPadsEveryExpert) {
  ModelRequest request = tiny_mixtral(2);
  request.routing = ExpertRouting{};
  request.routing->capacity_factor = 1.25;
  const Trace trace = build_model(request);
  EXPECT_EQ(trace.metadata().at("moe_local_expert_rows"), "0:40,1:40");
  const Communications a2a = communications(trace, CommunicationKind::all_to_all, ParallelGroup::expert, Phase::forward);
  for (const std::int64_t b : a2a.each) EXPECT_EQ(b, kBatch * 80 * kHidden * 2);
}

// Dropless, the dispatcher waits for the split sizes on the host once per layer, before the
// dispatch all_to_all: the permute is host_sync. Padded to capacity nothing waits.
TEST(ExpertParallel, DroplessDispatchWaitsForTheHostOncePerLayer) {
  EXPECT_EQ(host_synced(build_model(tiny_mixtral(2))),
            (std::vector<std::string>{"model.layers.0.block_sparse_moe.permute", "model.layers.1.block_sparse_moe.permute"}));
  ModelRequest padded = tiny_mixtral(2);
  padded.routing = ExpertRouting{};
  padded.routing->capacity_factor = 1.25;
  EXPECT_TRUE(host_synced(build_model(padded)).empty());
}

ModelRequest allgather(ModelRequest request) {
  request.expert_parallel->dispatcher = ExpertParallelSpec::TokenDispatcher::allgather;
  return request;
}

traces::TensorIndex index_of_tensor(const Trace& trace, const std::string& name) {
  for (traces::TensorIndex i = 0; i < trace.tensors().size(); ++i) {
    if (trace.tensor(i).name == name) return i;
  }
  throw std::out_of_range("no tensor " + name);
}

const traces::Op& op_named(const Trace& trace, const std::string& name) {
  for (const auto& op : trace.ops()) {
    if (op.name == name) return op;
  }
  throw std::out_of_range("no op " + name);
}

// On one rank at top-2 the allgather dispatcher gathers nothing but still picks the (token, slot)
// pairs by mask: masked_select of the experts and of the weights and nonzero size their outputs
// by the data, and the rows per expert are read back to the host: four waits per layer
// (Pai-Megatron-Patch@9fce17b3 token_dispatcher.py, MoEAllGatherTokenDispatcher), where the
// alltoall dispatcher waits once.
TEST(ExpertParallel, AllgatherDispatcherWaitsFourTimesPerLayer) {
  const Trace trace = build_model(allgather(tiny_mixtral(1)));
  std::vector<std::string> expected;
  for (int layer = 0; layer < kLayers; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".block_sparse_moe.";
    for (const char* op : {"masked_select_indices", "masked_select_probs", "nonzero", "histc"}) expected.push_back(p + op);
  }
  EXPECT_EQ(host_synced(trace), expected);
  EXPECT_EQ(trace.metadata().at("moe_dispatcher"), "allgather");
  EXPECT_EQ(trace.metadata().at("moe_local_expert_rows"), "0:16,1:16,2:16,3:16");
  EXPECT_EQ(communications(trace, CommunicationKind::all_gather, ParallelGroup::expert).count, 0);
  EXPECT_EQ(communications(trace, CommunicationKind::all_to_all, ParallelGroup::expert).count, 0);
  // The 64 routed rows per sample gathered twice (by token, then sorted by expert): 64 x 64 x 2 B
  // written each time for each of the 2 samples.
  const std::int64_t rows_bytes = kBatch * kSeq * 2 * kHidden * 2;
  for (const char* op : {"gather", "permute"}) {
    const traces::Op& gather = op_named(trace, std::string("model.layers.0.block_sparse_moe.") + op);
    EXPECT_EQ(trace.tensor(gather.outputs.front()).bytes(), rows_bytes) << op;
  }
  // On the way back each scatter starts from a zero tensor and its copy (scatter out of place):
  // the 64 rows, then the 32 token rows.
  for (const auto& [op, bytes] : {std::pair<const char*, std::int64_t>{"unpermute.scatter", rows_bytes}, {"unpermute.scatter_add", rows_bytes / 2}}) {
    const std::string p = std::string("model.layers.1.block_sparse_moe.") + op;
    EXPECT_EQ(trace.tensor(op_named(trace, p + ".zeros").outputs.front()).bytes(), bytes) << op;
    EXPECT_EQ(trace.tensor(op_named(trace, p + ".copy").outputs.front()).bytes(), bytes) << op;
    EXPECT_EQ(op_named(trace, p).kind, OpKind::scatter) << op;
  }
}

traces::OpIndex index_named(const Trace& trace, const std::string& name) {
  for (traces::OpIndex i = 0; i < trace.ops().size(); ++i) {
    if (trace.op(i).name == name) return i;
  }
  throw std::out_of_range("no op " + name);
}

// Megatron's TopKRouter with aux-loss load balancing (router.py and moe_utils.py at
// NVIDIA/Megatron-LM@core_v0.6.0, the same in Pai-Megatron-Patch@9fce17b3): top-k of the logits,
// the scores a softmax over the k picked, and the switch load-balancing loss on a softmax over
// every expert, attached to the scores by MoEAuxLossAutoScaler, whose backward starts the loss's
// and so reaches the logits a second way. Tiny Mixtral on one rank: [64 tokens, 4 experts], top-2.
TEST(ExpertParallel, MegatronRouterTakesTopKOfTheLogitsAndAddsTheLoadBalancingLoss) {
  const Trace trace = build_model(allgather(tiny_mixtral(1)));
  const std::string p = "model.layers.0.block_sparse_moe.";
  const std::string logits = trace.tensor(op_named(trace, p + "gate").outputs.front()).name;
  const traces::Op& topk = op_named(trace, p + "topk");
  EXPECT_EQ(trace.tensor(topk.inputs.front()).name, logits);  // the logits, not their softmax
  EXPECT_EQ(trace.tensor(op_named(trace, p + "softmax").inputs.front()).name, logits);
  const traces::Op& scores = op_named(trace, p + "scores.softmax");
  EXPECT_EQ(trace.tensor(scores.outputs.front()).dtype, traces::DType::f32);
  EXPECT_EQ(trace.tensor(op_named(trace, p + "scores.type_as").outputs.front()).dtype, traces::DType::bf16);
  // The loss's kernels, none waiting for the host; the one-hot mask [64, 2, 4] int64 per sample.
  const std::vector<std::string> forward = {"one_hot.zeros", "one_hot.scatter_",   "mask.sum",   "count_nonzero.ne",    "count_nonzero.sum",
                                            "mask.float",    "selection_mean.mean", "selection_mean.div", "gates_mean", "mul",
                                            "sum",           "mul_experts",         "mul_coeff_", "tracker.div",   "tracker.add_"};
  for (const std::string& name : forward) {
    const traces::Op& op = op_named(trace, p + "aux_loss." + name);
    EXPECT_EQ(op.phase, Phase::forward) << name;
    EXPECT_FALSE(op.host_sync) << name;
  }
  EXPECT_EQ(trace.tensor(op_named(trace, p + "aux_loss.one_hot.zeros").outputs.front()).bytes(), kBatch * kSeq * 2 * 4 * 8);
  // gates.mean(dim=0) and the sum: one value per expert, then one, whatever the batch.
  EXPECT_EQ(trace.tensor(op_named(trace, p + "aux_loss.gates_mean").outputs.front()).bytes(), 4 * 4);
  EXPECT_EQ(trace.tensor(op_named(trace, p + "aux_loss.sum").outputs.front()).bytes(), 4);
  // The auto-scaler hands the scores on without a kernel; its backward writes the loss's gradient,
  // which runs back through the loss to the softmax over every expert.
  const traces::Op& scaler = op_named(trace, p + "aux_loss.auto_scaler");
  EXPECT_EQ(scaler.kind, OpKind::view);
  EXPECT_EQ(scaler.bytes_written.at(kBatch), 0);
  EXPECT_EQ(op_named(trace, p + "aux_loss.auto_scaler.backward").bytes_written.at(kBatch), 4);
  for (const char* name : {"aux_loss.mul_coeff_.backward", "aux_loss.sum.backward", "aux_loss.gates_mean.backward", "softmax.backward",
                           "scores.softmax.backward", "topk.backward"}) {
    EXPECT_EQ(op_named(trace, p + name).phase, Phase::backward) << name;
  }
  EXPECT_LT(index_named(trace, p + "aux_loss.auto_scaler.backward"), index_named(trace, p + "aux_loss.gates_mean.backward"));
  EXPECT_LT(index_named(trace, p + "aux_loss.gates_mean.backward"), index_named(trace, p + "softmax.backward"));
  // The logits' gradient comes from the top-k and from the loss's softmax: one addition.
  EXPECT_NO_THROW(op_named(trace, p + "gate.out.grad.accumulate1"));
  // The dispatcher routes by the scaler's output.
  const traces::TensorIndex handed_on = scaler.outputs.front();
  bool read = false;
  for (const auto& op : trace.ops()) {
    for (const auto t : op.inputs) read = read || (t == handed_on && op.phase == Phase::forward);
  }
  EXPECT_TRUE(read);
}

// Under the allgather dispatcher SequentialMLP is Megatron-LM-240405's (Pai-Megatron-Patch@9fce17b3
// experts.py): each expert's rows sliced out of the sorted rows and its output copied into a zero
// tensor, not split and concatenated. Forward: one fill, then a copy of each expert's rows.
// Backward, in reverse: each copy's CopySlices copies the whole output gradient, clones its rows
// for the expert and zeroes them (a zeros_like and its copy); each slice's SliceBackward0 gives
// the sorted rows a whole zero-filled gradient of its own, so autograd adds four of them (three
// additions). Tiny Mixtral on one rank: 64 routed rows per sample, 16 for each of the 4 experts.
TEST(ExpertParallel, AllgatherSequentialMlpSlicesAndCopiesIntoAZeroTensor) {
  const Trace trace = build_model(allgather(tiny_mixtral(1)));
  const std::string p = "model.layers.0.block_sparse_moe.";
  const std::int64_t whole = kBatch * kSeq * 2 * kHidden * 2;  // [2 x 64, 64] bf16
  const std::int64_t rows = whole / 4;
  for (const auto& op : trace.ops()) {
    EXPECT_EQ(op.name.find("experts.cat"), std::string::npos) << op.name;
    EXPECT_EQ(op.name.find("experts.split"), std::string::npos) << op.name;
  }
  const traces::OpIndex fill = index_named(trace, p + "experts.output_local");
  EXPECT_EQ(trace.bytes_written(fill), whole);
  const traces::TensorIndex buffer = trace.storage_of(trace.op(fill).outputs.front());
  for (int e = 0; e < 4; ++e) {
    const std::string expert = p + "experts." + std::to_string(e) + ".";
    const traces::OpIndex copy = index_named(trace, expert + "copy_");
    EXPECT_EQ(trace.op(copy).kind, OpKind::scatter);  // the op-time model counts the rows it covers
    EXPECT_EQ(trace.storage_of(trace.op(copy).outputs.front()), buffer) << "in place";
    EXPECT_EQ(trace.tensor(trace.op(copy).inputs.back()).bytes(), rows);
    // The whole output gradient read; written: its copy (self's gradient, or scratch for the
    // first copy, whose self needs none), the rows' clone (the expert's), their zeros and the
    // zeros' copy into the rows (scratch, each one more kernel of the elementwise op).
    const traces::OpIndex copy_backward = index_named(trace, expert + "copy_.backward");
    EXPECT_EQ(trace.op(copy_backward).kind, OpKind::elementwise);
    EXPECT_EQ(trace.bytes_read(copy_backward), whole) << e;
    EXPECT_EQ(trace.bytes_written(copy_backward), whole + 3 * rows) << e;
    // The slice is a view; its backward writes a whole gradient of the sorted rows.
    const traces::OpIndex slice = index_named(trace, expert + "slice");
    EXPECT_EQ(trace.op(slice).kind, OpKind::view);
    EXPECT_EQ(trace.bytes_written(index_named(trace, expert + "slice.backward")), whole) << e;
  }
  int additions = 0;
  for (const auto& op : trace.ops()) {
    if (op.name.starts_with(p + "permute.out.grad.accumulate")) ++additions;
  }
  EXPECT_EQ(additions, 3);
}

ModelRequest grouped_gemm(ModelRequest request) {
  request.megatron = MegatronOptions{};
  request.megatron->moe_grouped_gemm = true;
  return request;
}

// --moe-grouped-gemm: Megatron-LM's GroupedMLP (experts.py at core_v0.6.0). EP 2 at TP 2: the
// rank's two local experts' w1 and w3 in one weight1 [64, 2 x 2 x 64] and their w2 in one
// weight2 [2 x 64, 64] (width 128 / TP 2); per layer two gmm calls over all 64 rows a sample
// (2 x 16 from each of the 2 ranks for each expert), a fused SwiGLU between, no split, no
// concatenation, no per-expert op. FLOPs: 2 x rows x in x out per call, twice that backward.
TEST(ExpertParallel, GroupedGemmRunsTheLocalExpertsAsTwoGroupedCalls) {
  const Trace trace = build_model(grouped_gemm(tiny_mixtral(2, 2)));
  const std::int64_t width = kWidth / 2;
  const std::int64_t rows = 64;
  EXPECT_EQ(trace.metadata().at("megatron_moe_grouped_gemm"), "true");
  EXPECT_EQ(parameters(trace, ".experts."), kLayers * 3 * 2 * kHidden * width);
  EXPECT_TRUE(has_parameter(trace, "model.layers.0.block_sparse_moe.experts.weight1"));
  EXPECT_FALSE(has_parameter(trace, "model.layers.0.block_sparse_moe.experts.0.w1.weight"));
  const std::string p = "model.layers.1.block_sparse_moe.experts.";
  const traces::OpIndex fc1 = index_named(trace, p + "linear_fc1");
  const traces::OpIndex fc2 = index_named(trace, p + "linear_fc2");
  EXPECT_EQ(trace.op(fc1).kind, OpKind::linear);
  EXPECT_EQ(trace.op(fc1).flops.at(kBatch), kBatch * 2 * rows * kHidden * 2 * width);
  EXPECT_EQ(trace.op(fc2).flops.at(kBatch), kBatch * 2 * rows * width * kHidden);
  EXPECT_EQ(trace.op(index_named(trace, p + "linear_fc1.backward")).flops.at(kBatch), 2 * trace.op(fc1).flops.at(kBatch));
  EXPECT_EQ(trace.tensor(trace.op(fc2).outputs.front()).bytes(), kBatch * rows * kHidden * 2);
  EXPECT_EQ(trace.op(index_named(trace, p + "glu")).kind, OpKind::elementwise);
  for (const auto& op : trace.ops()) {
    EXPECT_EQ(op.name.find("experts.split"), std::string::npos) << op.name;
    EXPECT_EQ(op.name.find("experts.cat"), std::string::npos) << op.name;
    EXPECT_EQ(op.name.find("experts.0."), std::string::npos) << op.name;
  }
  // The same under the allgather dispatcher: no zero-filled output, no slices.
  const Trace allgathered = build_model(grouped_gemm(allgather(tiny_mixtral(2))));
  for (const auto& op : allgathered.ops()) EXPECT_EQ(op.name.find("output_local"), std::string::npos) << op.name;
  // A dense model has no experts to group.
  ModelRequest dense = grouped_gemm(tiny_mixtral(0));
  dense.decoder->moe.reset();
  dense.decoder->family = "llama";
  dense.tensor_parallel = TensorParallelSpec{2, true};
  EXPECT_THROW(build_model(dense), InputError);
  // GroupedMLP's gated units are SiLU's only.
  ModelRequest gelu = grouped_gemm(tiny_mixtral(2, 2));
  gelu.decoder->activation = DecoderArchitecture::Activation::gelu;
  try {
    build_model(gelu);
    ADD_FAILURE() << "GroupedMLP with GELU experts accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("megatron.moe_grouped_gemm"), std::string::npos) << e.what();
  }
}

// Megatron's DDP hook (distributed_data_parallel.py, _make_param_hook, core_v0.6.0): the weights
// whose layer writes a plain 16-bit .grad -- GroupedMLP's two, the router, the word embedding --
// get an add into the fp32 main_grad once their gradient is complete, which from then on is the
// weight's gradient; the 16-bit one is a temporary. TE's linears write main_grad themselves.
TEST(ExpertParallel, MegatronAddsPlainGradientsIntoAnFp32MainGrad) {
  const Trace trace = build_model(grouped_gemm(tiny_mixtral(2, 2)));
  const std::string p = "model.layers.1.block_sparse_moe.";
  const std::int64_t elements = kHidden * 2 * 2 * (kWidth / 2);  // weight1 [64, 2 experts x 2 x 64]
  std::optional<traces::OpIndex> add;
  std::optional<traces::OpIndex> fc1_backward;
  for (traces::OpIndex i = 0; i < trace.ops().size(); ++i) {
    if (trace.op(i).name == p + "experts.weight1.main_grad.add_") add = i;
    if (trace.op(i).name == p + "experts.linear_fc1.backward") fc1_backward = i;
  }
  ASSERT_TRUE(add && fc1_backward);
  EXPECT_GT(*add, *fc1_backward);
  const traces::Op& op = trace.op(*add);
  EXPECT_EQ(op.phase, Phase::backward);
  EXPECT_EQ(op.kind, OpKind::elementwise);
  ASSERT_EQ(op.inputs.size(), 1u);
  ASSERT_EQ(op.outputs.size(), 1u);
  const traces::Tensor& grad = trace.tensor(op.inputs.front());
  const traces::Tensor& main_grad = trace.tensor(op.outputs.front());
  EXPECT_EQ(grad.dtype, traces::DType::bf16);
  EXPECT_EQ(grad.role, TensorRole::temporary);
  EXPECT_EQ(main_grad.dtype, traces::DType::f32);
  EXPECT_EQ(main_grad.role, TensorRole::gradient);
  EXPECT_EQ(main_grad.elements(), elements);
  // The 16-bit gradient and main_grad's running sum read (main_grad is Megatron's buffer, zeroed
  // each iteration: the add reads it from the first micro-batch on), main_grad written.
  EXPECT_EQ(op.bytes_read.at(kBatch), 2 * elements + 4 * elements);
  EXPECT_EQ(op.bytes_written.at(kBatch), 4 * elements);
  // The optimizer steps weight1 on main_grad.
  bool stepped = false;
  for (const auto& o : trace.ops()) {
    if (o.phase != Phase::optimizer) continue;
    for (const auto t : o.inputs) stepped = stepped || t == op.outputs.front();
  }
  EXPECT_TRUE(stepped);
  for (const std::string& weight : {p + "experts.weight2", p + "gate.weight", std::string("model.embed_tokens.weight")}) {
    EXPECT_NO_THROW(op_named(trace, weight + ".main_grad.add_")) << weight;
  }
  // The router's sequence-parallel all-reduce reduces its fp32 main_grad.
  const traces::Op& reduce = op_named(trace, "finalize_model_grads.sequence_parallel_grads.all_reduce");
  bool router_fp32 = false;
  for (const auto t : reduce.inputs) router_fp32 = router_fp32 || (trace.tensor(t).name == p + "gate.weight.main_grad" && trace.tensor(t).dtype == traces::DType::f32);
  EXPECT_TRUE(router_fp32);
  std::int64_t adds = 0;
  for (const auto& o : trace.ops()) {
    if (o.name.find("main_grad.add_") != std::string::npos) ++adds;
    EXPECT_EQ(o.name.find("q_proj.weight.main_grad"), std::string::npos) << o.name;
  }
  EXPECT_EQ(adds, 1 + kLayers * 3);  // the embedding; per layer the router and GroupedMLP's two
  // TE's linears write their weight gradients into main_grad from the GEMM: fp32 too.
  const traces::Tensor& q_grad = trace.tensor(index_of_tensor(trace, "model.layers.0.self_attn.q_proj.weight.grad"));
  EXPECT_EQ(q_grad.dtype, traces::DType::f32);
  EXPECT_EQ(q_grad.role, TensorRole::gradient);
  // 16-bit weights other than bf16 ('mixed' is fp16): main_grad in their dtype, or fp32 with
  // --accumulate-allreduce-grads-in-fp32 (MegatronOptions::main_grad_fp32).
  for (const bool fp32 : {false, true}) {
    ModelRequest mixed = grouped_gemm(tiny_mixtral(2, 2));
    mixed.precision = Precision::mixed;
    mixed.megatron->main_grad_fp32 = fp32;
    const Trace t = build_model(mixed);
    const traces::DType want = fp32 ? traces::DType::f32 : traces::DType::f16;
    const traces::Op& mixed_add = op_named(t, p + "experts.weight1.main_grad.add_");
    EXPECT_EQ(t.tensor(mixed_add.inputs.front()).dtype, traces::DType::f16);
    EXPECT_EQ(t.tensor(mixed_add.outputs.front()).dtype, want);
    EXPECT_EQ(t.tensor(index_of_tensor(t, "model.layers.0.self_attn.q_proj.weight.grad")).dtype, want);
  }
  // No step in the backward pass: Megatron steps on main_grad after it.
  ModelRequest in_backward = grouped_gemm(tiny_mixtral(2, 2));
  in_backward.optimizer_in_backward = true;
  try {
    build_model(in_backward);
    ADD_FAILURE() << "Megatron's layers with optimizer_in_backward accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer_in_backward"), std::string::npos) << e.what();
  }
  // Not Megatron's layers: no main_grad.
  const Trace hugging_face = build_model(tiny_mixtral(2, 2));
  for (const auto& o : hugging_face.ops()) EXPECT_EQ(o.name.find("main_grad"), std::string::npos) << o.name;
}

// EP 2 at TP 1: the group is the expert group. Each rank gathers both ranks' 32 tokens (their
// hidden states, top-2 experts and weights) and its experts 0 and 1 process 2 x 16 rows each per
// sample; the token rows go back by a reduce_scatter. Backward, the hidden states' and the
// weights' gathers reduce_scatter their gradients and the reduce_scatter all_gathers its own.
TEST(ExpertParallel, AllgatherDispatcherGathersOverTheExpertGroup) {
  const Trace trace = build_model(allgather(tiny_mixtral(2)));
  EXPECT_EQ(trace.metadata().at("moe_local_expert_rows"), "0:32,1:32");
  const Communications hidden = communications(trace, CommunicationKind::all_gather, ParallelGroup::expert, Phase::forward, "all_gather_hidden");
  ASSERT_EQ(hidden.count, kLayers);
  for (const std::int64_t b : hidden.each) EXPECT_EQ(b, kBatch * 2 * kSeq * kHidden * 2);
  const Communications indices = communications(trace, CommunicationKind::all_gather, ParallelGroup::expert, Phase::forward, "all_gather_indices");
  for (const std::int64_t b : indices.each) EXPECT_EQ(b, kBatch * 2 * kSeq * 2 * 8);  // int64
  EXPECT_EQ(communications(trace, CommunicationKind::all_gather, ParallelGroup::expert, Phase::forward).count, 3 * kLayers);
  const Communications back = communications(trace, CommunicationKind::reduce_scatter, ParallelGroup::expert, Phase::forward);
  ASSERT_EQ(back.count, kLayers);
  for (const std::int64_t b : back.each) EXPECT_EQ(b, kBatch * 2 * kSeq * kHidden * 2);
  EXPECT_EQ(communications(trace, CommunicationKind::reduce_scatter, ParallelGroup::expert, Phase::backward).count, 2 * kLayers);
  EXPECT_EQ(communications(trace, CommunicationKind::all_gather, ParallelGroup::expert, Phase::backward).count, kLayers);
  EXPECT_EQ(communications(trace, CommunicationKind::all_to_all, ParallelGroup::expert).count, 0);
  // Two of the four experts per rank, as with the alltoall dispatcher.
  EXPECT_EQ(parameters(trace, ".experts."), kLayers * 2 * 3 * kHidden * kWidth);
}

// EP 1 at TP 2 (sequence parallel): the group is the tensor group; each rank processes all 64
// rows of the gathered sequence with half of every expert's width, not rounded per expert.
TEST(ExpertParallel, AllgatherDispatcherGathersOverTheTensorGroup) {
  const Trace trace = build_model(allgather(tiny_mixtral(1, 2)));
  EXPECT_EQ(trace.metadata().at("moe_local_expert_rows"), "0:16,1:16,2:16,3:16");
  EXPECT_EQ(parameters(trace, ".experts."), kLayers * 4 * 3 * kHidden * kWidth / 2);
  const Communications hidden = communications(trace, CommunicationKind::all_gather, ParallelGroup::tensor, Phase::forward, "all_gather_hidden");
  ASSERT_EQ(hidden.count, kLayers);
  for (const std::int64_t b : hidden.each) EXPECT_EQ(b, kBatch * kSeq * kHidden * 2);
  EXPECT_EQ(communications(trace, CommunicationKind::reduce_scatter, ParallelGroup::tensor, Phase::forward, "combine.reduce_scatter").count, kLayers);
  // Both torch.gathers keep what they gather from (GatherBackward0 saves self): the gathered
  // hidden states [2 x 32 rows] and the masked rows [2 x 64]; index_select would keep neither.
  const std::string p = "model.layers.0.block_sparse_moe.";
  for (const auto& [op, rows] : {std::pair{std::string("gather"), kSeq}, std::pair{std::string("permute"), 2 * kSeq}}) {
    const traces::Op& gather = op_named(trace, p + op);
    const traces::Tensor& source = trace.tensor(gather.inputs.front());
    EXPECT_EQ(source.role, TensorRole::activation) << op;
    EXPECT_EQ(source.bytes(), kBatch * rows * kHidden * 2) << op;
    // Kept, not read: the backward op (zeros and a scatter_add_ of the gradient) reads the
    // gradient and the index only.
    const traces::Op& backward = op_named(trace, p + op + ".backward");
    std::int64_t read = 0;
    bool keeps_source = false;
    for (const auto t : backward.inputs) {
      keeps_source = keeps_source || t == gather.inputs.front();
      if (t != gather.inputs.front()) read += trace.tensor(t).bytes();
    }
    EXPECT_TRUE(keeps_source) << op;
    EXPECT_EQ(backward.bytes_read.at(kBatch), read) << op;
  }
}

TEST(ExpertParallel, BadLayoutsAreRefused) {
  // The allgather dispatcher over tensor x expert ranks, and with a capacity factor.
  EXPECT_THROW(build_model(allgather(tiny_mixtral(2, 2))), std::invalid_argument);
  ModelRequest capacity = allgather(tiny_mixtral(2));
  capacity.routing = ExpertRouting{};
  capacity.routing->capacity_factor = 1.25;
  EXPECT_THROW(build_model(capacity), std::invalid_argument);
  // 3 does not divide the 4 experts.
  EXPECT_THROW(build_model(tiny_mixtral(3)), std::invalid_argument);
  // The experts' tensor parallelism other than the layers' (MoE parallel folding).
  ModelRequest folding = tiny_mixtral(2);
  folding.expert_parallel->expert_tensor = 2;
  EXPECT_THROW(build_model(folding), std::invalid_argument);
  // MoE with tensor parallelism needs sequence parallelism (Megatron's arguments.py).
  ModelRequest no_sp = tiny_mixtral(2, 2);
  no_sp.tensor_parallel->sequence_parallel = false;
  EXPECT_THROW(build_model(no_sp), std::invalid_argument);
  // Hugging Face's block is not sharded: tensor parallelism needs Megatron's layer.
  ModelRequest hf_tp = tiny_mixtral(0, 2);
  EXPECT_THROW(build_model(hf_tp), std::invalid_argument);
  // A dense decoder has no experts to split.
  ModelRequest dense = tiny_mixtral(2);
  dense.decoder->family = "llama";
  dense.decoder->moe.reset();
  EXPECT_THROW(build_model(dense), std::invalid_argument);
}

}  // namespace
}  // namespace comptrain::zoo

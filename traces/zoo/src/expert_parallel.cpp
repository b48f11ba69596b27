// Megatron-LM's mixture-of-experts layer on one expert-parallel rank (traces/zoo/README.md,
// "Expert parallelism"): MoELayer with the TopKRouter, the alltoall token dispatcher and the
// SequentialMLP of its local experts, as NVIDIA/Megatron-LM@d98e8a64 writes them:
//   megatron/core/transformer/moe/moe_layer.py        MoELayer.forward: route, dispatch, experts, combine
//   megatron/core/transformer/moe/router.py           TopKRouter: a replicated linear, softmax, top-k
//   megatron/core/transformer/moe/token_dispatcher.py MoEAlltoAllTokenDispatcher: permute, all_to_all
//       over the expert group, all_gather over the expert-tensor group when ETP > 1 (:746-751),
//       sort_chunks_by_idxs when a rank holds several experts; the mirror image to combine
//       (reduce_scatter before the combine all_to_all, :829), then unpermute
//   megatron/core/transformer/moe/experts.py          SequentialMLP: one MLP per local expert over its
//       rows (torch.split of the tokens), outputs concatenated; under the allgather dispatcher, as
//       Megatron-LM-240405 wrote both, its rows sliced out and copied into a zero tensor (ExpertRows)
//   megatron/core/transformer/moe/moe_utils.py        permute / unpermute; capacity (:248-266)
// Sources: shared/reference/parallelism.md §4. The load of each expert comes from ExpertRouting
// (routed_tokens); the trace is the rank whose local experts receive the most tokens.

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "comptrain/support/checked.hpp"
#include "comptrain/support/input_error.hpp"
#include "models.hpp"

namespace comptrain::zoo::detail {

using traces::CommunicationKind;
using traces::DType;
using traces::OpKind;
using traces::ParallelGroup;

ExpertParallelPlan plan_expert_parallel(const MoeArchitecture& moe, const ExpertRouting& routing, std::int64_t seq_len, std::int64_t degree,
                                        std::int64_t expert_tensor, bool allgather) {
  if (degree < 1 || moe.experts % degree != 0) {
    throw std::invalid_argument("expert_parallel.degree: " + std::to_string(degree) + " does not divide the " + std::to_string(moe.experts) +
                                " routed experts; expected a divisor of them");
  }
  if (expert_tensor < 1 || seq_len % expert_tensor != 0) {
    throw std::invalid_argument("expert_parallel.expert_tensor: " + std::to_string(expert_tensor) + " does not divide the sequence of " +
                                std::to_string(seq_len) + " tokens");
  }
  if (allgather && degree > 1 && expert_tensor > 1) {
    // Megatron's allgather dispatcher then gathers over the tensor-and-expert group, T x E ranks,
    // which the trace's groups do not hold.
    throw std::invalid_argument("expert_parallel.token_dispatcher: allgather with an expert degree of " + std::to_string(degree) +
                                " and a tensor degree of " + std::to_string(expert_tensor) +
                                " is not modelled (its group, tensor x expert ranks, is not one of the trace's); expected one of them 1, or alltoall");
  }
  if (allgather && routing.capacity_factor) {
    throw std::invalid_argument(
        "expert_parallel.token_dispatcher: allgather with a capacity factor is not modelled (Megatron-LM-240405's allgather dispatcher is "
        "dropless); expected no capacity_factor, or alltoall");
  }
  ExpertParallelPlan plan;
  plan.degree = degree;
  plan.expert_tensor = expert_tensor;
  plan.allgather = allgather;
  // Each expert's rows per sequence of the whole tensor-parallel group (seq_len tokens, top-k
  // routed): ExpertRouting's counts, dropless. With a capacity factor Megatron's capacity
  // ceil(tokens x top_k / experts x factor) (moe_utils.py:248-266, get_capacity) for every
  // expert, padded to it (--moe-pad-expert-input-to-capacity): every expert processes exactly
  // its capacity, and the dispatch moves experts x capacity rows.
  std::vector<std::int64_t> load = routed_tokens(moe, routing, seq_len);
  if (routing.capacity_factor) {
    const std::int64_t slots = multiply_or_throw(seq_len, moe.top_k, "moe: the routed slots per sequence");
    const auto capacity =
        static_cast<std::int64_t>(std::ceil(static_cast<double>(slots) * *routing.capacity_factor / static_cast<double>(moe.experts)));
    std::fill(load.begin(), load.end(), capacity);
    plan.padded_to_capacity = true;
  }
  const std::int64_t local = moe.experts / degree;
  // Megatron assigns rank r the experts r x local .. (r + 1) x local - 1 (moe_layer.py,
  // local_expert_indices). The busiest rank -- the most rows over its experts, the lowest on a
  // tie -- gates every all_to_all of the layer and is the one simulated.
  std::int64_t best = -1;
  for (std::int64_t r = 0; r < degree; ++r) {
    std::int64_t rows = 0;
    for (std::int64_t e = r * local; e < (r + 1) * local; ++e) rows += load[static_cast<std::size_t>(e)];
    if (rows > best) {
      best = rows;
      plan.rank = r;
    }
  }
  // Per sample of this rank's micro-batch: every one of the E ranks of the expert group routes
  // its own samples, so expert e receives E x load[e] rows per sample (the routing assumption
  // holds on every rank alike); after the expert-tensor all_gather the whole group's tokens,
  // before it 1 / ETP of them (rounded up to a multiple of ETP per expert, at most ETP - 1 padded
  // rows).
  std::int64_t gathered = 0;
  for (std::int64_t e = plan.rank * local; e < (plan.rank + 1) * local; ++e) {
    std::int64_t rows = multiply_or_throw(degree, load[static_cast<std::size_t>(e)], "moe: an expert's rows");
    if (!allgather) rows = (rows + expert_tensor - 1) / expert_tensor * expert_tensor;
    plan.local_experts.push_back(e);
    plan.expert_rows.push_back(rows);
    gathered += rows;
  }
  const std::int64_t routed = std::accumulate(load.begin(), load.end(), std::int64_t{0});
  if (allgather) {
    // Every rank of the group picks its experts' rows out of the gathered ones itself.
    plan.received_rows = gathered;
    plan.dispatched_rows = routed;
    return plan;
  }
  plan.received_rows = gathered / expert_tensor;
  plan.dispatched_rows = (routed + expert_tensor - 1) / expert_tensor;
  return plan;
}


namespace {

// How SequentialMLP (experts.py) hands each local expert its rows and gathers their outputs.
enum class ExpertRows {
  // torch.split of the rows (views), the outputs concatenated (torch.cat): Megatron-LM since
  // 8f331e8c (2024-09-06, "FP8 support for MoE with conservative recipe").
  split_and_cat,
  // Before it (NVIDIA/Megatron-LM@ba773259; Megatron-LM-240405 as Pai-Megatron-Patch@9fce17b3
  // copies it, megatron_patch/model/qwen1_5/moe/experts.py, SequentialMLP.forward): each expert's
  // rows sliced out (`permuted_local_hidden_states[start:end]`) and its output copied into a zero
  // tensor (`output_local = torch.zeros_like(...)`, `output_local[start:end] = output`). Cheap
  // forward, dear backward: each slice hands the rows a whole zero-filled gradient, which autograd
  // adds up, and each copy a CopySlices that copies the whole output gradient.
  slice_and_copy,
};

// SequentialMLP (experts.py): the rows `tokens`, grouped by expert, one MLP each. Each local
// expert's width is split over the expert-tensor ranks; the tokens are already gathered
// (TEColumnParallelLinear / TERowParallelLinear of experts.py: no collective inside), and the
// dispatcher's reduce_scatter adds up w2's partial sums.
Value sequential_mlp(NetworkBuilder& nb, const DecoderArchitecture& arch, const ExpertParallelPlan& plan, const std::string& p, Value tokens,
                     const MegatronOptions* megatron, ExpertRows rows) {
  const std::int64_t width = arch.moe->intermediate / nb.tensor_parallel_degree();
  const bool fused = megatron && megatron->bias_activation_fusion;
  const auto expert = [&](std::size_t i) { return p + "experts." + std::to_string(plan.local_experts[i]) + "."; };
  if (rows == ExpertRows::slice_and_copy) {
    Value output = nb.zeros(p + "experts.output_local", nb.dtype(tokens), nb.sample_shape(tokens), true);
    for (std::size_t i = 0; i < plan.expert_rows.size(); ++i) {
      const Value input = nb.slice_rows(expert(i) + "slice", tokens, plan.expert_rows[i]);
      output = nb.copy_into_rows_(expert(i) + "copy_", output, swiglu_expert(nb, arch, expert(i), input, width, fused));
    }
    return output;
  }
  std::vector<std::vector<std::int64_t>> shapes;
  for (const std::int64_t expert_rows : plan.expert_rows) shapes.push_back({expert_rows, arch.hidden});
  const std::vector<Value> inputs = nb.split_into_views(p + "experts.split", tokens, shapes);
  std::vector<Value> outputs;
  for (std::size_t i = 0; i < inputs.size(); ++i) outputs.push_back(swiglu_expert(nb, arch, expert(i), inputs[i], width, fused));
  return outputs.size() == 1 ? outputs.front() : nb.cat_rows(p + "experts.cat", outputs);
}

// GroupedMLP (experts.py at NVIDIA/Megatron-LM@core_v0.6.0, --moe-grouped-gemm): the local
// experts' w1 and w3 as one weight1 [h, X·2w] and their w2 as one weight2 [X·w, h] (w the
// width over the expert-tensor ranks), gmm over all rows per projection, and between them glu
// (chunk, silu, product) under jit_fuser: one fused SwiGLU kernel. The rows need no split and
// the output no concatenation: gmm reads and writes them whole.
Value grouped_mlp(NetworkBuilder& nb, const DecoderArchitecture& arch, const ExpertParallelPlan& plan, const std::string& p, Value tokens) {
  const std::int64_t width = arch.moe->intermediate / nb.tensor_parallel_degree();
  const auto local = static_cast<std::int64_t>(plan.local_experts.size());
  const Value weight1 = nb.parameter(p + "experts.weight1", {arch.hidden, local * 2 * width});
  const Value weight2 = nb.parameter(p + "experts.weight2", {local * width, arch.hidden});
  // gmm writes 16-bit weight gradients; Megatron's DDP hook adds them into main_grad.
  nb.add_into_main_grad(weight1);
  nb.add_into_main_grad(weight2);
  const Value fc1 = nb.grouped_linear(p + "experts.linear_fc1", tokens, weight1, 2 * width);
  const std::vector<Value> halves = nb.chunk_last(p + "experts.glu.chunk", fc1, 2);
  return nb.grouped_linear(p + "experts.linear_fc2", nb.fused_swiglu(p + "experts.glu", halves[0], halves[1]), weight2, arch.hidden);
}

// The local experts over their rows, grouped by expert: GroupedMLP under --moe-grouped-gemm,
// else SequentialMLP in the form of the dispatcher's release.
Value local_experts(NetworkBuilder& nb, const DecoderArchitecture& arch, const ExpertParallelPlan& plan, const std::string& p, Value tokens,
                    const MegatronOptions* megatron, ExpertRows rows) {
  if (megatron && megatron->moe_grouped_gemm) return grouped_mlp(nb, arch, plan, p, tokens);
  return sequential_mlp(nb, arch, plan, p, tokens, megatron, rows);
}

// The alltoall dispatcher (token_dispatcher.py, MoEAlltoAllTokenDispatcher) around the local
// experts: the token rows `flat` [n, h] out to the experts' ranks and back, weighted and summed.
Value alltoall_dispatch(NetworkBuilder& nb, const DecoderArchitecture& arch, const ExpertParallelPlan& plan, const std::string& p, Value flat,
                        Value weights, Value selected, const MegatronOptions* megatron) {
  const std::int64_t t = nb.tensor_parallel_degree();
  const std::int64_t n = nb.dim(flat, 0);
  const std::int64_t h = arch.hidden;
  // permute (moe_utils.py): the (token, slot) pairs sorted by expert -- int64 index kernels, no
  // autograd -- and the rows gathered in that order: dispatched_rows rows to send.
  const std::int64_t d = plan.dispatched_rows;
  const Value pairs = nb.constant_op(p + "routing_map", selected, DType::i64, {d, 2});
  const std::vector<Value> pair = nb.columns(p + "routing_map.unbind", pairs);
  const Value slot = pair[0];
  const Value token = pair[1];
  const Value permuted = nb.index(p + "permute", flat, {token}, {d, h});
  // Dropless, the all_to_all needs the split sizes on the host, so the dispatcher waits for the
  // GPU once per layer (token_dispatcher.py, MoEAlltoAllTokenDispatcher: preprocess sets the
  // cuda_sync_point "before_ep_alltoall", _maybe_dtoh_and_synchronize runs the stream's
  // synchronize; NVIDIA/Megatron-LM@0014f137, whose later code moves it after the all_to_all,
  // "before_permutation_2", when several local experts are sorted unfused: one wait either way).
  // Padded to capacity every size is known in advance: no wait.
  if (!plan.padded_to_capacity) nb.synchronize_host();
  // The dispatch all_to_all over the expert group (token_dispatcher.py, token_permutation):
  // 1/E of the rows to each rank; this rank receives its experts' rows from all E.
  Value tokens = nb.communicate(p + "dispatch.all_to_all", permuted, CommunicationKind::all_to_all, CommunicationKind::all_to_all,
                                ParallelGroup::expert, {plan.received_rows, h});
  const std::int64_t gathered = plan.received_rows * t;
  // ETP > 1: the rows of the expert-tensor group gathered (:746-751; its backward a reduce_scatter).
  if (t > 1) {
    tokens = nb.communicate(p + "dispatch.all_gather", tokens, CommunicationKind::all_gather, CommunicationKind::reduce_scatter,
                            ParallelGroup::tensor, {gathered, h});
  }
  // Several local experts: the received chunks reordered by expert (sort_chunks_by_idxs, a gather).
  const bool several = plan.local_experts.size() > 1;
  const auto chunk_order = [&](const std::string& name, Value rows) {
    const Value order = nb.constant_op(name + ".indices", token, DType::i64, {gathered});
    return nb.index(name, rows, {order}, {gathered, h});
  };
  if (several) tokens = chunk_order(p + "sort_chunks_by_idxs", tokens);
  Value combined = local_experts(nb, arch, plan, p, tokens, megatron, ExpertRows::split_and_cat);
  if (several) combined = chunk_order(p + "unsort_chunks_by_idxs", combined);
  // ETP > 1: the partial sums of w2 reduced and scattered back (:829; backward an all_gather).
  if (t > 1) {
    combined = nb.communicate(p + "combine.reduce_scatter", combined, CommunicationKind::reduce_scatter, CommunicationKind::all_gather,
                              ParallelGroup::tensor, {plan.received_rows, h});
  }
  // The combine all_to_all: every row back to the rank that routed it.
  combined = nb.communicate(p + "combine.all_to_all", combined, CommunicationKind::all_to_all, CommunicationKind::all_to_all,
                            ParallelGroup::expert, {d, h});
  // unpermute: each row times its routing weight, added into its token's row (scatter_add_).
  const Value weight = nb.index(p + "routing_weights.index", weights, {token, slot}, {d, 1});
  Value output = nb.zeros(p + "zeros", nb.dtype(flat), {n, h}, true);
  const Value weighted = nb.to_dtype(p + "to", nb.mul_rows(p + "mul", combined, weight), nb.dtype(output));
  output = nb.index_add_(p + "unpermute", output, token, weighted);
  return output;
}

// The allgather dispatcher as Megatron-LM-240405 writes it (ExpertParallelSpec::TokenDispatcher;
// Pai-Megatron-Patch@9fce17b3 megatron_patch/model/qwen1_5/moe/token_dispatcher.py,
// MoEAllGatherTokenDispatcher) around the local experts, op by op: `flat` [n, h] this rank's
// tokens, `weights` and `selected` [n, k] their top-k weights and experts.
Value allgather_dispatch(NetworkBuilder& nb, const DecoderArchitecture& arch, const ExpertParallelPlan& plan, const std::string& p, Value flat,
                         Value weights, Value selected, const MegatronOptions* megatron) {
  const std::int64_t n = nb.dim(flat, 0);
  const std::int64_t h = arch.hidden;
  const std::int64_t k = arch.moe->top_k;
  const std::int64_t local = plan.received_rows;  // the rows of this rank's experts
  const std::int64_t group_ranks = plan.degree * plan.expert_tensor;  // one of the two is 1 (plan_expert_parallel)
  const std::int64_t global = n * group_ranks;
  const bool gathered = group_ranks > 1;
  const bool masked = gathered || k > 1;
  const ParallelGroup group = plan.degree > 1 ? ParallelGroup::expert : ParallelGroup::tensor;
  // token_permutation. Under sequence or expert parallelism the group's hidden states and top-k
  // experts are gathered (gather_from_sequence_parallel_region_to_moe; the hidden states'
  // backward a reduce_scatter), and the top-k weights too when k > 1.
  Value hidden = flat;
  Value indices = selected;
  Value probs = weights;
  if (gathered) {
    hidden = nb.communicate(p + "dispatch.all_gather_hidden", flat, CommunicationKind::all_gather, CommunicationKind::reduce_scatter, group, {global, h});
    indices = nb.communicate(p + "dispatch.all_gather_indices", selected, CommunicationKind::all_gather, CommunicationKind::reduce_scatter, group,
                             {global, k});
    if (k > 1) {
      probs = nb.communicate(p + "dispatch.all_gather_probs", weights, CommunicationKind::all_gather, CommunicationKind::reduce_scatter, group,
                             {global, k});
    }
  }
  Value local_indices = nb.reshape(p + "indices.view", indices, {global * k});
  Value local_probs = nb.reshape(p + "probs.view", probs, {nb.dim(probs, 0) * k});
  Value local_hidden = hidden;
  std::optional<Value> global_local_map;
  if (masked) {
    // The mask of the (token, slot) pairs routed to this rank's experts: two comparisons and
    // their conjunction over the gathered experts, or ones_like(...).bool() at k > 1 without a
    // gather; then masked_select of the experts and the weights, and nonzero for the rows: each
    // sizes its output by the data, so the host waits for the GPU three times.
    Value mask;
    if (gathered) {
      const Value lower = nb.constant_op(p + "global_local_mask.ge", indices, DType::boolean, {global, k});
      const Value upper = nb.constant_op(p + "global_local_mask.le", indices, DType::boolean, {global, k});
      mask = nb.constant_op(p + "global_local_mask.and", std::vector<Value>{lower, upper}, DType::boolean, {global, k});
    } else {
      mask = nb.constant_op(p + "global_local_mask.bool", nb.constant_op(p + "global_local_mask.ones_like", indices, DType::i64, {global, k}),
                            DType::boolean, {global, k});
    }
    local_indices = nb.data_sized_op(p + "masked_select_indices", {indices, mask}, DType::i64, {local});
    if (k > 1) {
      // masked_select of the weights, which need a gradient (MaskedSelectBackward0 scatters it
      // into zeros of the weights' shape): priced as the gather of its `local` elements, whose
      // backward scatters them back.
      local_probs = nb.index(p + "masked_select_probs", local_probs, {local_indices}, {local});
      nb.synchronize_host();
    }
    const Value positions = nb.data_sized_op(p + "nonzero", {mask}, DType::i64, {local, 2});
    global_local_map = nb.columns(p + "nonzero.select", positions)[0];
    // torch.gather of the rows by global_local_map (expanded over h: one index read per element,
    // from cache), whose backward is zeros and a scatter_add_ of the gradient: index_select's;
    // GatherBackward0 keeps the gathered hidden states for it.
    local_hidden = nb.gather_rows(p + "gather", hidden, *global_local_map);
  }
  // The rows sorted by expert: argsort of their experts, histc for the rows per expert, read by
  // the host (tokens_per_expert.cpu(), the wait SequentialMLP's split needs), and the gather.
  const Value order = nb.constant_op(p + "argsort", local_indices, DType::i64, {local});
  nb.constant_op(p + "histc", local_indices, DType::f32, {static_cast<std::int64_t>(plan.local_experts.size())});
  nb.synchronize_host();
  // torch.gather(local_hidden_states, 0, indices expanded): GatherBackward0 keeps its rows.
  const Value permuted = nb.gather_rows(p + "permute", local_hidden, order);
  const Value combined = local_experts(nb, arch, plan, p, permuted, megatron, ExpertRows::slice_and_copy);
  // token_unpermutation: zeros_like(...).scatter(0, indices, rows) -- scatter out of place copies
  // its zero self first (ATen's scatter: out.copy_(self), then scatter_) -- the rows times their
  // weights (k > 1), and scatter_add into zeros of the group's token rows, again a copy first.
  const Value scores = nb.to_dtype(p + "scores.to", local_probs, nb.dtype(combined));
  const auto scattered = [&](const std::string& name, std::int64_t rows, Value index, Value source) {
    const Value zeros = nb.zeros(name + ".zeros", nb.dtype(source), {rows, h}, true);
    return nb.index_add_(name, nb.constant_op(name + ".copy", zeros, nb.dtype(source), {rows, h}), index, source);
  };
  Value output = scattered(p + "unpermute.scatter", local, order, combined);
  if (k > 1) output = nb.mul_rows(p + "unpermute.mul", output, nb.reshape(p + "scores.view", scores, {local, 1}));
  if (masked) output = scattered(p + "unpermute.scatter_add", global, *global_local_map, output);
  if (gathered) {
    output = nb.communicate(p + "combine.reduce_scatter", output, CommunicationKind::reduce_scatter, CommunicationKind::all_gather, group, {n, h});
  }
  if (k == 1) output = nb.mul_rows(p + "unpermute.mul", output, nb.reshape(p + "scores.view", scores, {n, 1}));
  return output;
}

}  // namespace

Value megatron_moe_layer(NetworkBuilder& nb, const DecoderArchitecture& arch, const ExpertParallelPlan& plan, const std::string& p, Value x,
                         const MegatronOptions* megatron) {
  const MoeArchitecture& moe = *arch.moe;
  const std::int64_t t = nb.tensor_parallel_degree();
  if (t != plan.expert_tensor) throw std::logic_error(p + ": the experts' tensor-parallel degree must be the layer's");
  const std::int64_t n = nb.dim(x, 1);  // this rank's tokens per sample: S, or S / t under sequence parallelism
  const std::int64_t h = arch.hidden;
  const std::int64_t k = moe.top_k;
  const Value flat = nb.reshape(p + "view", x, {n, h});
  // TopKRouter (router.py): a linear without bias, replicated on every rank (not tensor-parallel),
  // over this rank's tokens; then aux_loss_load_balancing, the default and only routing modelled
  // (--moe-router-load-balancing-type aux_loss): top-k of the logits, the scores a softmax in
  // fp32 over the k picked (so normalised, whatever the Hugging Face config's norm_topk_prob),
  // cast back with type_as, and the load-balancing loss on a softmax in fp32 over every expert.
  const Value router = nb.parameter(p + "gate.weight", {moe.experts, h});
  // The router's weight is marked `sequence_parallel` (router.py): its gradient is partial.
  nb.mark_sequence_parallel_weight(router);
  // F.linear on a plain parameter: Megatron's DDP hook adds its gradient into main_grad.
  if (megatron) nb.add_into_main_grad(router);
  const Value logits = nb.linear(p + "gate", flat, router, std::nullopt);
  const auto [top_logits, selected] = nb.topk(p + "topk", logits, k);
  Value weights = nb.to_dtype(p + "scores.type_as", nb.softmax_fp32(p + "scores.softmax", top_logits), nb.dtype(logits));
  const Value probs = nb.softmax_fp32(p + "softmax", logits);
  weights = nb.load_balancing_loss(p + "aux_loss", probs, selected, weights);
  Value output = plan.allgather ? allgather_dispatch(nb, arch, plan, p, flat, weights, selected, megatron)
                                : alltoall_dispatch(nb, arch, plan, p, flat, weights, selected, megatron);
  Value y = nb.reshape(p + "reshape", output, {1, n, h});
  if (moe.shared_expert_intermediate > 0) {
    // Qwen2-MoE's shared expert as Megatron's SharedExpertMLP: a tensor-parallel MLP (gathered
    // and reduce-scattered under sequence parallelism) gated by a sigmoid of a replicated linear.
    const std::string s = p + "shared_expert.";
    const std::int64_t shared_width = moe.shared_expert_intermediate / t;
    const NetworkBuilder::ColumnParallelInput input = nb.column_parallel_input(s + "fc1", x);
    Value gate = nb.column_parallel_linear(s + "gate_proj", input, shared_width, false);
    gate = mlp_activation(nb, arch.activation, s + "act_fn", gate);
    const Value up = nb.column_parallel_linear(s + "up_proj", input, shared_width, false);
    const Value shared = nb.row_parallel_linear(s + "down_proj", nb.mul(s + "mul", gate, up), h, false);
    const Value shared_gate = nb.sigmoid(p + "sigmoid", nb.linear(p + "shared_expert_gate", x, 1, false));
    y = nb.add(p + "add", y, nb.mul_rows(s + "mul_gate", shared, shared_gate));
  }
  return y;
}

Value NetworkBuilder::communicate(const std::string& name, Value x, CommunicationKind forward, CommunicationKind backward, ParallelGroup group,
                                  std::vector<std::int64_t> sample_shape) {
  return {record_communication(unique_op_name(name), forward, x.index, std::move(sample_shape), false, backward, group)};
}

Value NetworkBuilder::cat_rows(const std::string& name, const std::vector<Value>& parts) {
  if (parts.empty()) throw std::logic_error(name + ": nothing to concatenate");
  std::int64_t rows = 0;
  bool grad = false;
  for (const Value part : parts) {
    expect_rank(part, 2, name);
    if (dim(part, 1) != dim(parts.front(), 1) || dtype(part) != dtype(parts.front()) ||
        tensors_[part.index].batch_dim != tensors_[parts.front().index].batch_dim) {
      throw std::logic_error(name + ": the parts must be rows of one width, dtype and batch dimension");
    }
    rows += dim(part, 0);
    grad = grad || requires_grad(part.index);
  }
  const std::string op = unique_op_name(name);
  const std::size_t y = new_output(op + ".out", dtype(parts.front()), {rows, dim(parts.front(), 1)}, tensors_[parts.front().index].batch_dim, grad);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::other;  // a copy: bytes, no FLOPs
  for (const Value part : parts) {
    f.inputs.push_back(part.index);
    f.grads.push_back({part.index, {}});
  }
  f.outputs = {y};
  f.differentiable_outputs = {y};
  f.backward_kind = OpKind::other;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::grouped_linear(const std::string& name, Value x, Value weight, std::int64_t out_features) {
  expect_rank(x, 2, name);
  const std::int64_t in_features = dim(x, 1);
  if (sample_shape(weight).size() != 2 || out_features < 1 || dim(weight, 0) * dim(weight, 1) % (in_features * out_features) != 0) {
    throw std::logic_error(name + ": the weight must hold whole [in, out] blocks");
  }
  const std::string op = unique_op_name(name);
  x = {autocast_lower(op, x.index)};
  weight = {autocast_lower(op, weight.index)};
  const std::size_t y = new_output(op + ".out", tensors_[x.index].dtype, {dim(x, 0), out_features}, tensors_[x.index].batch_dim, true);
  const traces::BatchLinear macs = scaled(elements(y), in_features);
  ForwardOp f;
  f.name = op;
  f.kind = OpKind::linear;
  f.inputs = {x.index, weight.index};
  f.outputs = {y};
  f.flops = scaled(macs, 2);
  f.differentiable_outputs = {y};
  f.saved = {x.index, weight.index};  // GroupedGemm.forward: ctx.save_for_backward(a, b, batch_sizes)
  f.grads = {{x.index, {}}, {weight.index, {}}};
  f.backward_flops = scaled(macs, (requires_grad(x.index) ? 2 : 0) + (requires_grad(weight.index) ? 2 : 0));
  f.backward_kind = OpKind::linear;
  record(std::move(f));
  return {y};
}

Value NetworkBuilder::slice_rows(const std::string& name, Value x, std::int64_t rows) {
  expect_rank(x, 2, name);
  if (rows < 1 || rows > dim(x, 0)) throw std::logic_error(name + ": the slice must hold rows of the tensor");
  // SliceBackward0: a zero tensor of x's shape with the gradient copied into the rows (counted as
  // the zero tensor's bytes, as select_first's).
  return part_view(name, x, {rows, dim(x, 1)});
}

Value NetworkBuilder::copy_into_rows_(const std::string& name, Value self, Value source) {
  expect_rank(self, 2, name);
  expect_rank(source, 2, name);
  if (dim(source, 1) != dim(self, 1) || dim(source, 0) > dim(self, 0) || dtype(source) != dtype(self) ||
      tensors_[source.index].batch_dim != tensors_[self.index].batch_dim) {
    throw std::logic_error(name + ": the source must be rows of self's width, dtype and batch dimension");
  }
  const std::string op = unique_op_name(name);
  const std::size_t y = new_view(op + ".out", self.index, sample_shape(self), tensors_[self.index].batch_dim);
  tensors_[y].requires_grad = requires_grad(self.index) || requires_grad(source.index);
  ForwardOp f;
  f.name = op;
  // In place over source's rows: the scatter rule counts them written and read (as index_add_
  // reads them; copy_ reads only the source, so the rows' bytes once more than the kernel).
  f.kind = OpKind::scatter;
  f.inputs = {self.index, source.index};
  f.outputs = {y};
  f.differentiable_outputs = {y};
  // CopySlices::apply_impl (pytorch/pytorch@00ee6511 torch/csrc/autograd/functions/tensor.cpp):
  // result = the whole gradient copied (self's gradient), grad_slice.clone() handed to copy_'s
  // CopyBackwards (source's gradient, passed on as it is), and CopyBackwards' zeros_like of the
  // rows copied into result's rows. An elementwise backward op counts each scratch tensor as one
  // more kernel that writes it and reads it: the rows' zeros and their copy into result. The
  // whole copy is made even when self needs no gradient (the first copy into a zero tensor).
  f.grads = {{self.index, {}}, {source.index, {}}};
  f.backward_kind = OpKind::elementwise;
  const auto scratch = [&](const std::string& suffix, Value like) {
    return new_output(op + suffix, dtype(like), sample_shape(like), tensors_[like.index].batch_dim, false);
  };
  f.backward_scratch = {scratch(".backward.zeros", source), scratch(".backward.copy", source)};
  if (!requires_grad(self.index)) f.backward_scratch.push_back(scratch(".backward.result", self));
  record(std::move(f));
  return {y};
}

}  // namespace comptrain::zoo::detail

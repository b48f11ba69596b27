// Megatron-LM tensor and sequence parallelism in the zoo: one tensor-parallel rank's trace, its
// saved activations (Korthikanti et al. 2022, arXiv 2205.05198, Table 2), its collectives and
// its parameters.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <ostream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "comptrain/zoo/zoo.hpp"
#include "zoo_test_support.hpp"

namespace comptrain::zoo {
namespace {

using test_support::Request;
using traces::CommunicationKind;
using traces::OpKind;
using traces::ParallelGroup;
using traces::Phase;
using traces::Trace;

ModelRequest gpt_request(std::int64_t layers, std::int64_t t, bool sequence_parallel, std::int64_t batch = 2) {
  ModelRequest request = Request("gpt").batch_size(batch).precision(Precision::mixed).layers(layers).hidden(256).heads(8).seq_len(384).vocab(1000);
  if (t > 0) request.tensor_parallel = TensorParallelSpec{t, sequence_parallel};
  return request;
}

// Korthikanti et al. 2022, Table 2, per layer of a 16-bit GPT on t tensor-parallel ranks:
//   TP:      s·b·h·(10 + 24/t + 5·a·s/(h·t))   (replicated: LayerNorm inputs 4, dropout masks 2,
//                                             QKV and FC1 inputs 4; split: Q, K, V 6, context 2,
//                                             GELU input 8, FC2 input 8, and 5·a·s² of attention)
//   TP + SP: s·b·h·(34/t + 5·a·s/(h·t))        (the replicated 10 on s/t rows; QKV and FC1 save
//                                             their s/t input shard and gather it again)
// plus PyTorch's fp32 LayerNorm mean and rstd, 2 LayerNorms x 2 x 4 bytes per row, rows = s (s/t
// under SP), which the paper leaves out. Per sample (b = 1); the extra layer of a 2-layer model.
TEST(TensorParallelGpt, SavedPerLayerMatchesKorthikantiTable2) {
  const std::int64_t s = 384;
  const std::int64_t h = 256;
  const std::int64_t a = 8;
  for (const std::int64_t t : {2, 4, 8}) {
    for (const bool sp : {false, true}) {
      SCOPED_TRACE("t " + std::to_string(t) + (sp ? " with SP" : ""));
      const auto one = test_support::saved_for_backward(build_model(gpt_request(1, t, sp)));
      const auto two = test_support::saved_for_backward(build_model(gpt_request(2, t, sp)));
      const std::int64_t paper = sp ? 34 * s * h / t + 5 * a * s * s / t : 10 * s * h + 24 * s * h / t + 5 * a * s * s / t;
      const std::int64_t rows = sp ? s / t : s;
      const std::int64_t layernorm_statistics = 2 * 2 * 4 * rows;
      EXPECT_EQ(two.per_sample - one.per_sample, paper + layernorm_statistics);
      EXPECT_EQ(two.fixed, one.fixed);
    }
  }
}

struct CommunicationCount {
  Phase phase;
  CommunicationKind kind;
  friend bool operator<(const CommunicationCount& x, const CommunicationCount& y) {
    return std::pair(x.phase, x.kind) < std::pair(y.phase, y.kind);
  }
  friend bool operator==(const CommunicationCount&, const CommunicationCount&) = default;
};

void PrintTo(const CommunicationCount& count, std::ostream* out) {
  *out << traces::to_string(count.phase) << " " << traces::to_string(count.kind);
}

// The communication ops whose names start with `prefix`, counted by phase and kind; each must be
// over the tensor group and move `whole` bytes of the unsharded tensor (all_reduce: its input
// and output; all_gather: its output, 1/t of it in; reduce_scatter: its input, 1/t of it out).
std::map<CommunicationCount, int> collectives(const Trace& trace, const std::string& prefix, std::int64_t whole, std::int64_t t) {
  std::map<CommunicationCount, int> counts;
  for (const auto& op : trace.ops()) {
    if (op.kind != OpKind::communication || !op.name.starts_with(prefix)) continue;
    SCOPED_TRACE(op.name);
    EXPECT_EQ(trace.flops(op.id), 0);
    EXPECT_TRUE(op.communication.has_value());
    if (!op.communication) continue;
    EXPECT_EQ(op.communication->group, ParallelGroup::tensor);
    switch (op.communication->kind) {
      case CommunicationKind::all_reduce:
        EXPECT_EQ(trace.bytes_read(op.id), whole);
        EXPECT_EQ(trace.bytes_written(op.id), whole);
        break;
      case CommunicationKind::all_gather:
        EXPECT_EQ(trace.bytes_read(op.id), whole / t);
        EXPECT_EQ(trace.bytes_written(op.id), whole);
        break;
      case CommunicationKind::reduce_scatter:
        EXPECT_EQ(trace.bytes_read(op.id), whole);
        EXPECT_EQ(trace.bytes_written(op.id), whole / t);
        break;
      default: ADD_FAILURE() << "unexpected collective";
    }
    ++counts[{op.phase, op.communication->kind}];
  }
  return counts;
}

// shared/reference/parallelism.md §1 (Megatron layers.py): per layer, over s·b·h 16-bit elements,
//   no SP: forward 2 all_reduce (after the attention's out-projection and FC2); backward 2
//          all_reduce (the QKV and FC1 input gradients);
//   SP:    forward 2 all_gather (before QKV, FC1) + 2 reduce_scatter (after out-proj, FC2);
//          backward their transposes, 2 reduce_scatter + 2 all_gather, and 2 all_gathers more
//          re-gathering the saved s/t input shards for the weight gradients.
TEST(TensorParallelGpt, LayerCollectives) {
  const std::int64_t s = 384;
  const std::int64_t h = 256;
  const std::int64_t b = 3;
  const std::int64_t whole = s * b * h * 2;
  for (const std::int64_t t : {2, 4}) {
    SCOPED_TRACE("t " + std::to_string(t));
    const Trace tp = build_model(gpt_request(2, t, false, b));
    const std::map<CommunicationCount, int> expected_tp{{{Phase::forward, CommunicationKind::all_reduce}, 2},
                                                        {{Phase::backward, CommunicationKind::all_reduce}, 2}};
    EXPECT_EQ(collectives(tp, "transformer.h.1.", whole, t), expected_tp);
    const Trace sp = build_model(gpt_request(2, t, true, b));
    const std::map<CommunicationCount, int> expected_sp{{{Phase::forward, CommunicationKind::all_gather}, 2},
                                                        {{Phase::forward, CommunicationKind::reduce_scatter}, 2},
                                                        {{Phase::backward, CommunicationKind::all_gather}, 2 + 2},
                                                        {{Phase::backward, CommunicationKind::reduce_scatter}, 2}};
    EXPECT_EQ(collectives(sp, "transformer.h.1.", whole, t), expected_sp);

    // The vocabulary-parallel cross-entropy: 3 all_reduces of s·b fp32 values in the forward
    // pass (max, predicted logit, sum of exp; cross_entropy.py:130, 146-152), nothing backward.
    for (const Trace* trace : {&tp, &sp}) {
      int loss_reductions = 0;
      for (const auto& op : trace->ops()) {
        if (op.kind != OpKind::communication || !op.name.starts_with("loss.")) continue;
        ++loss_reductions;
        EXPECT_EQ(op.phase, Phase::forward);
        EXPECT_EQ(op.communication->kind, CommunicationKind::all_reduce);
        EXPECT_EQ(trace->bytes_read(op.id), 4 * s * b);
      }
      EXPECT_EQ(loss_reductions, 3);
    }
    // The embedding's partial lookups: one forward all_reduce (learned positions are added
    // after it); under SP the scatter's backward all-gathers the gradient.
    const std::map<CommunicationCount, int> embedding{{{Phase::forward, CommunicationKind::all_reduce}, 1}};
    EXPECT_EQ(collectives(tp, "transformer.wte.", whole, t), embedding);
    EXPECT_EQ(collectives(sp, "transformer.wte.", whole, t), embedding);
    const std::map<CommunicationCount, int> scatter{{{Phase::backward, CommunicationKind::all_gather}, 1}};
    EXPECT_EQ(collectives(sp, "transformer.scatter_to_sequence_parallel", whole, t), scatter);
    // The fp32 softmax [s, V/t] is what the loss keeps (parallelism.md §6): 4·s·V'/t per sample.
    EXPECT_EQ(tp.metadata().at("padded_vocab"), std::to_string(tensor_parallel_vocab(1000, t)));
  }
}

// Megatron's vocab_size_with_padding: a multiple of 128·t (build_tokenizer.py:133-145).
// Megatron-LM's backward of a column-parallel linear (LinearWithGradAccumulationAndAsyncCommunication,
// layers.py:667-711; shared/reference/parallelism.md §1): the input gradient's GEMM, then its
// all-reduce (no SP) or reduce-scatter (SP) launched asynchronously and overlapping the weight
// gradient's GEMM, which follows; under SP the all-gather re-gathering the saved s/t input runs
// first, beside the input gradient's GEMM. Hand-checked order for GPT's c_attn and c_fc (one
// fused GEMM each): [all_gather (overlap 1)], backward_input, all_reduce / reduce_scatter
// (overlap 1), backward_weight; the FLOPs split 2·macs + 2·macs + the bias's row sums.
TEST(TensorParallelGpt, ColumnParallelBackwardOverlapsTheWeightGradient) {
  const std::int64_t s = 384;
  const std::int64_t h = 256;
  const std::int64_t b = 2;
  const std::int64_t t = 4;
  for (const bool sp : {false, true}) {
    SCOPED_TRACE(sp ? "SP" : "no SP");
    const Trace trace = build_model(gpt_request(2, t, sp, b));
    const auto index_of = [&](const std::string& name) {
      for (std::size_t o = 0; o < trace.ops().size(); ++o) {
        if (trace.op(o).name == name) return o;
      }
      ADD_FAILURE() << "no op " << name;
      return std::size_t{0};
    };
    for (const auto& [linear, width] : {std::pair<std::string, std::int64_t>{"transformer.h.1.attn.c_attn", 3 * h / t},
                                        {"transformer.h.1.mlp.c_fc", 4 * h / t}}) {
      SCOPED_TRACE(linear);
      const std::size_t input = index_of(linear + ".backward_input");
      const std::size_t weight = index_of(linear + ".backward_weight");
      ASSERT_EQ(weight, input + 2);
      const auto& reduce = trace.op(input + 1);
      ASSERT_EQ(reduce.kind, OpKind::communication);
      EXPECT_EQ(reduce.communication->kind, sp ? CommunicationKind::reduce_scatter : CommunicationKind::all_reduce);
      EXPECT_EQ(reduce.communication->group, ParallelGroup::tensor);
      EXPECT_EQ(reduce.communication->overlap, 1);
      // It reduces what the input-gradient GEMM wrote.
      EXPECT_EQ(trace.storage_of(reduce.inputs.at(0)), trace.storage_of(trace.op(input).outputs.at(0)));
      // 2·macs each, macs = tokens (s·b, whole sequence) x h x width; the bias's row sums on the weight side.
      const std::int64_t macs = s * h * width;  // per sample
      EXPECT_EQ(trace.op(input).flops.per_sample, 2 * macs);
      EXPECT_EQ(trace.op(weight).flops.per_sample, 2 * macs + s * width);
      EXPECT_EQ(trace.op(input).kind, OpKind::linear);
      EXPECT_EQ(trace.op(weight).kind, OpKind::linear);
      if (sp) {
        const auto& gather = trace.op(input - 1);
        ASSERT_EQ(gather.kind, OpKind::communication);
        EXPECT_EQ(gather.communication->kind, CommunicationKind::all_gather);
        EXPECT_EQ(gather.communication->overlap, 1);  // beside backward_input; backward_weight reads its output
        const auto& reads = trace.op(weight).inputs;
        EXPECT_NE(std::find(reads.begin(), reads.end(), gather.outputs.at(0)), reads.end());
        const auto& input_reads = trace.op(input).inputs;
        EXPECT_EQ(std::find(input_reads.begin(), input_reads.end(), gather.outputs.at(0)), input_reads.end());
      }
    }
    // The row-parallel linears' backward stays one op, and the forward collectives are not overlapped.
    index_of("transformer.h.1.attn.c_proj.backward");
    for (const auto& op : trace.ops()) {
      if (op.communication && op.phase == Phase::forward) {
        EXPECT_EQ(op.communication->overlap, 0) << op.name;
      }
    }
  }
}

// Under autocast the column-parallel linears read a 16-bit cast of their fp32 weight; the cast's
// backward (the weight gradient to fp32) needs the weight-gradient GEMM that runs behind the
// input gradient's collective, so it runs right after that GEMM, as autograd runs it.
TEST(TensorParallelGpt, AutocastWeightCastsFollowTheDeferredWeightGradient) {
  for (const bool sp : {false, true}) {
    SCOPED_TRACE(sp ? "SP" : "no SP");
    ModelRequest request = gpt_request(2, 2, sp);
    request.precision = Precision::amp_bf16;
    const Trace trace = build_model(request);
    const auto index_of = [&](const std::string& name) {
      for (std::size_t o = 0; o < trace.ops().size(); ++o) {
        if (trace.op(o).name == name) return o;
      }
      ADD_FAILURE() << "no op " << name;
      return std::size_t{0};
    };
    const std::size_t weight = index_of("transformer.h.1.mlp.c_fc.backward_weight");
    const std::size_t cast = index_of("transformer.h.1.mlp.c_fc.weight.cast.backward");
    EXPECT_GT(cast, weight);
    EXPECT_EQ(trace.tensor(trace.op(cast).outputs.at(0)).dtype, traces::DType::f32);
  }
}

TEST(TensorParallel, VocabularyPadding) {
  EXPECT_EQ(tensor_parallel_vocab(50257, 1), 50257);  // degree 1: the model as defined
  EXPECT_EQ(tensor_parallel_vocab(50257, 2), 50432);  // 197 x 256
  EXPECT_EQ(tensor_parallel_vocab(50257, 8), 51200);  // 50 x 1024
  EXPECT_EQ(tensor_parallel_vocab(32000, 4), 32256);  // 63 x 512
  EXPECT_EQ(tensor_parallel_vocab(1024, 8), 1024);
}

// Degree 1 is the whole model: the very trace the zoo made without the option.
TEST(TensorParallel, DegreeOneIsTodaysTrace) {
  ModelRequest gpt = gpt_request(2, 0, false);
  ModelRequest gpt_one = gpt;
  gpt_one.tensor_parallel = TensorParallelSpec{1, false};
  EXPECT_TRUE(build_model(gpt) == build_model(gpt_one));

  DecoderArchitecture arch;
  arch.layers = 2;
  arch.hidden = 64;
  arch.heads = 4;
  arch.kv_heads = 2;
  arch.intermediate = 176;
  arch.vocab = 1000;
  arch.max_positions = 4096;
  for (const Attention attention : {Attention::eager, Attention::flash}) {
    ModelRequest llama = Request("llama").batch_size(2).precision(Precision::bf16).seq_len(32).attention(attention);
    llama.decoder = arch;
    ModelRequest llama_one = llama;
    llama_one.tensor_parallel = TensorParallelSpec{1, false};
    const Trace whole = build_model(llama);
    const Trace one = build_model(llama_one);
    EXPECT_EQ(whole.ops().size(), one.ops().size());
    EXPECT_EQ(whole.tensors().size(), one.tensors().size());
    EXPECT_TRUE(whole == one);
  }
}

struct LlamaShape {
  std::int64_t s = 64;
  std::int64_t h = 128;
  std::int64_t a = 8;
  std::int64_t kv = 4;
  std::int64_t i = 352;
  std::int64_t vocab = 1000;
};

ModelRequest llama_request(const LlamaShape& shape, std::int64_t layers, std::int64_t t, bool sp, Attention attention,
                           bool tied = false, bool biases = false) {
  DecoderArchitecture arch;
  arch.layers = layers;
  arch.hidden = shape.h;
  arch.heads = shape.a;
  arch.kv_heads = shape.kv;
  arch.intermediate = shape.i;
  arch.vocab = shape.vocab;
  arch.max_positions = 4096;
  arch.tie_embeddings = tied;
  arch.qkv_bias = biases;
  ModelRequest request = Request("llama").batch_size(2).precision(Precision::bf16).seq_len(shape.s).attention(attention);
  request.decoder = arch;
  if (t > 0) request.tensor_parallel = TensorParallelSpec{t, sp};
  return request;
}

// Each rank holds 1/t of every sharded matrix and bias, the padded vocabulary's V'/t rows of
// the embedding and the (untied) head, and the replicated RMSNorm weights (2 per layer and the
// final one, h each): t x rank + (t - 1) x norms = the whole model + the padding rows.
TEST(TensorParallelLlama, ParametersSumToTheWholeModel) {
  const LlamaShape shape;
  for (const auto& [tied, biases] : {std::pair{false, false}, std::pair{true, true}}) {
    const std::int64_t layers = 2;
    const std::int64_t whole = test_support::resident_bytes(build_model(llama_request(shape, layers, 0, false, Attention::flash, tied, biases))).parameters;
    for (const std::int64_t t : {2, 4}) {
      SCOPED_TRACE("t " + std::to_string(t) + (tied ? " tied, biases" : ""));
      const std::int64_t rank =
          test_support::resident_bytes(build_model(llama_request(shape, layers, t, false, Attention::flash, tied, biases))).parameters;
      const std::int64_t norms = (2 * layers + 1) * shape.h;
      const std::int64_t padding = (tensor_parallel_vocab(shape.vocab, t) - shape.vocab) * shape.h * (tied ? 1 : 2);
      EXPECT_EQ(t * rank - (t - 1) * norms, whole + padding);
    }
  }
}

// decoder_test.cpp's Llama adaptation of Korthikanti's count, model.bfloat16(), per layer and
// sample: replicated across the ranks without SP are the RMSNorms' fp32 input copies 4 and
// normalised rows 2 (twice: 12·sbh) and their fp32 rsqrt per row (8·sb), and the q/k/v and
// gate/up inputs, the norms' outputs (2 + 2 = 4·sbh); everything after a column-parallel linear
// is split t ways:
//   eager: Q and K rotated 4, V's copy 2, o_proj's input 2 (8·sbh), the fp32 softmax and its
//          bf16 copy 6·as², the MLP's gate output, SiLU output, up output and down input 8·sbI;
//   flash: q 2, k and v 2 each at kv heads (2 + 4·kv/a)·sbh, the output (o_proj's input) 2,
//          the fp32 log-sum-exp 4·as; the MLP 8·sbI.
// So TP: 16·sbh + 8·sb + (8·sbh + 8·sbI + 6·as²)/t for eager, 16·sbh + 8·sb + ((4 + 4·kv/a)·sbh
// + 8·sbI + 4·as)/t for flash; under SP the replicated part is on s/t rows too (the norms run on
// the shard, q/k/v and gate/up save the shard): everything / t. t = 1 is decoder_test's formula.
TEST(TensorParallelLlama, SavedPerLayerSplitsAsTheShardingSays) {
  const LlamaShape shape;
  const auto [s, h, a, i] = std::tuple{shape.s, shape.h, shape.a, shape.i};
  const std::int64_t kv = shape.kv;
  const auto per_layer = [&](std::int64_t t, bool sp, Attention attention) {
    const auto one = test_support::saved_for_backward(build_model(llama_request(shape, 1, t, sp, attention)));
    const auto two = test_support::saved_for_backward(build_model(llama_request(shape, 2, t, sp, attention)));
    EXPECT_EQ(two.fixed, one.fixed);
    return two.per_sample - one.per_sample;
  };
  const std::int64_t replicated = 16 * s * h + 8 * s;
  const std::int64_t eager_split = 8 * s * h + 8 * s * i + 6 * a * s * s;
  const std::int64_t flash_split = 4 * s * h + 4 * s * h * kv / a + 8 * s * i + 4 * a * s;
  EXPECT_EQ(per_layer(0, false, Attention::eager), replicated + eager_split);  // decoder_test's 24·sbh + 8·sbI + 6·as²b + 8·sb
  EXPECT_EQ(per_layer(0, false, Attention::flash), replicated + flash_split);
  for (const std::int64_t t : {2, 4}) {
    SCOPED_TRACE("t " + std::to_string(t));
    EXPECT_EQ(per_layer(t, false, Attention::eager), replicated + eager_split / t);
    EXPECT_EQ(per_layer(t, false, Attention::flash), replicated + flash_split / t);
    EXPECT_EQ(per_layer(t, true, Attention::eager), replicated / t + eager_split / t);
    EXPECT_EQ(per_layer(t, true, Attention::flash), replicated / t + flash_split / t);
  }
}

// LLaMA's q, k and v (and gate, up) are GEMMs of their own sharing one input: the input
// gradients' GEMMs and their sums first, then the one collective overlapping the three weight
// gradients; under SP the all-gather overlaps every op from it to the collective.
TEST(TensorParallelLlama, SharedInputLinearsDeferTheirWeightGradients) {
  const Trace trace = build_model(llama_request(LlamaShape{}, 1, 2, true, Attention::flash));
  std::vector<std::string> names;
  for (const auto& op : trace.ops()) names.push_back(op.name);
  const auto at = [&](const std::string& name) {
    const auto it = std::find(names.begin(), names.end(), name);
    EXPECT_NE(it, names.end()) << name;
    return static_cast<std::size_t>(it - names.begin());
  };
  const std::size_t q_weight = at("model.layers.0.self_attn.q_proj.backward_weight");
  const std::size_t k_weight = at("model.layers.0.self_attn.k_proj.backward_weight");
  const std::size_t v_weight = at("model.layers.0.self_attn.v_proj.backward_weight");
  const std::size_t first_weight = std::min({q_weight, k_weight, v_weight});
  EXPECT_EQ(std::max({q_weight, k_weight, v_weight}), first_weight + 2);
  const auto& reduce = trace.op(first_weight - 1);
  ASSERT_EQ(reduce.kind, OpKind::communication);
  EXPECT_EQ(reduce.communication->kind, CommunicationKind::reduce_scatter);
  EXPECT_EQ(reduce.communication->overlap, 3);
  for (const char* proj : {"q_proj", "k_proj", "v_proj"}) {
    EXPECT_LT(at(std::string("model.layers.0.self_attn.") + proj + ".backward_input"), first_weight - 1);
  }
  // The re-gather before the first input-gradient GEMM, beside every op up to the collective.
  std::size_t gather = first_weight - 1;
  while (gather-- > 0) {
    const auto& op = trace.op(gather);
    if (op.communication && op.communication->kind == CommunicationKind::all_gather && op.phase == Phase::backward &&
        op.name.ends_with(".regather"))
      break;
  }
  EXPECT_EQ(gather + 1, std::min({at("model.layers.0.self_attn.q_proj.backward_input"),
                                  at("model.layers.0.self_attn.k_proj.backward_input"),
                                  at("model.layers.0.self_attn.v_proj.backward_input")}));
  EXPECT_EQ(trace.op(gather).communication->overlap, static_cast<std::int64_t>(first_weight - 1 - gather - 1));
}

// The same collectives per layer as the GPT's: q, k, v share one input (one f, or one gather
// and one re-gather, as Megatron's fused linear_qkv), gate and up too.
// Megatron-LM's --tp-comm-overlap (Transformer Engine's Userbuffers, TE initialize_ub's default
// methods): the forward all_gather of each column-parallel input overlaps the ops up to its GEMM
// (ring_exchange), each row-parallel GEMM's reduce_scatter is split into 4 pieces (pipeline,
// num_splits 4) right after it, and that reduce_scatter's backward all_gather overlaps the
// row-parallel linear's backward (ring_exchange); the collectives and their bytes are unchanged.
// Without sequence parallelism it is refused, as Megatron-LM refuses it.
TEST(TensorParallelGpt, UserbuffersOverlapMarksTheForwardCollectives) {
  const std::int64_t s = 384;
  const std::int64_t h = 256;
  const std::int64_t b = 2;
  const std::int64_t t = 4;
  ModelRequest request = gpt_request(2, t, true, b);
  request.tensor_parallel->comm_overlap = true;
  const Trace trace = build_model(request);
  EXPECT_EQ(trace.metadata().at("tp_comm_overlap"), "true");
  const Trace plain = build_model(gpt_request(2, t, true, b));
  EXPECT_EQ(collectives(trace, "transformer.h.1.", s * b * h * 2, t), collectives(plain, "transformer.h.1.", s * b * h * 2, t));
  const auto index_of = [&](const std::string& name) {
    for (std::size_t o = 0; o < trace.ops().size(); ++o) {
      if (trace.op(o).name == name) return o;
    }
    ADD_FAILURE() << "no op " << name;
    return std::size_t{0};
  };
  int gathers = 0, splits = 0, backward_gathers = 0;
  for (std::size_t o = 0; o < trace.ops().size(); ++o) {
    const auto& op = trace.op(o);
    if (!op.communication || !op.name.starts_with("transformer.h.1.")) continue;
    if (op.phase == Phase::forward && op.communication->kind == CommunicationKind::all_gather) {
      ++gathers;
      ASSERT_GE(op.communication->overlap, 1) << op.name;
      // The last op it runs beside is the GEMM that reads what it gathers.
      const auto& gemm = trace.op(o + static_cast<std::size_t>(op.communication->overlap));
      EXPECT_EQ(gemm.kind, OpKind::linear) << op.name;
      EXPECT_NE(std::find(gemm.inputs.begin(), gemm.inputs.end(), op.outputs.at(0)), gemm.inputs.end()) << op.name;
    } else if (op.phase == Phase::forward && op.communication->kind == CommunicationKind::reduce_scatter) {
      ++splits;
      EXPECT_EQ(op.communication->splits, 4) << op.name;
      EXPECT_EQ(op.communication->overlap, 0) << op.name;
      EXPECT_EQ(trace.op(o - 1).kind, OpKind::linear) << op.name;
      EXPECT_EQ(trace.storage_of(op.inputs.at(0)), trace.storage_of(trace.op(o - 1).outputs.at(0))) << op.name;
    }
  }
  for (const char* linear : {"transformer.h.1.attn.c_proj", "transformer.h.1.mlp.c_proj"}) {
    SCOPED_TRACE(linear);
    const std::size_t backward = index_of(std::string(linear) + ".backward");
    const auto& gather = trace.op(backward - 1);
    ASSERT_TRUE(gather.communication);
    EXPECT_EQ(gather.communication->kind, CommunicationKind::all_gather);
    EXPECT_EQ(gather.communication->overlap, 1);
    ++backward_gathers;
  }
  EXPECT_EQ(gathers, 2);
  EXPECT_EQ(splits, 2);
  EXPECT_EQ(backward_gathers, 2);

  ModelRequest no_sp = gpt_request(1, t, false, b);
  no_sp.tensor_parallel->comm_overlap = true;
  try {
    (void)build_model(no_sp);
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("needs sequence_parallel"), std::string::npos) << e.what();
  }
}

TEST(TensorParallelLlama, LayerCollectives) {
  const LlamaShape shape;
  const std::int64_t whole = shape.s * 2 * shape.h * 2;  // batch 2, bf16
  const std::int64_t t = 2;
  const std::map<CommunicationCount, int> expected_tp{{{Phase::forward, CommunicationKind::all_reduce}, 2},
                                                      {{Phase::backward, CommunicationKind::all_reduce}, 2}};
  EXPECT_EQ(collectives(build_model(llama_request(shape, 2, t, false, Attention::flash)), "model.layers.1.", whole, t), expected_tp);
  const std::map<CommunicationCount, int> expected_sp{{{Phase::forward, CommunicationKind::all_gather}, 2},
                                                      {{Phase::forward, CommunicationKind::reduce_scatter}, 2},
                                                      {{Phase::backward, CommunicationKind::all_gather}, 2 + 2},
                                                      {{Phase::backward, CommunicationKind::reduce_scatter}, 2}};
  EXPECT_EQ(collectives(build_model(llama_request(shape, 2, t, true, Attention::flash)), "model.layers.1.", whole, t), expected_sp);
  // Under SP the embedding's partial lookups are reduce-scattered (no position embeddings).
  const std::map<CommunicationCount, int> embedding{{{Phase::forward, CommunicationKind::reduce_scatter}, 1},
                                                    {{Phase::backward, CommunicationKind::all_gather}, 1}};
  EXPECT_EQ(collectives(build_model(llama_request(shape, 1, t, true, Attention::flash)), "model.embed_tokens.", whole, t), embedding);
}

// Megatron-LM's _allreduce_layernorm_grads (finalize_model_grads.py:416-452): under sequence
// parallelism each rank's norms and row-parallel biases see its S/t rows only, so their gradients
// are all-reduced over the tensor group, coalesced, once per iteration before the step. By hand,
// 16-bit gradients: gpt per layer ln_1 and ln_2 (weight and bias, 4h) and the two row-parallel
// biases (attention output and fc2, 2h), plus ln_f (2h): (6L + 2)h elements; llama (no biases)
// per layer two RMSNorm weights (2h) plus the final norm: (2L + 1)h. No such op without SP.
TEST(TensorParallel, SequenceParallelGradientsAreAllReducedOnceBeforeTheStep) {
  const std::string name = "finalize_model_grads.sequence_parallel_grads.all_reduce";
  struct Case {
    std::string label;
    ModelRequest request;
    std::int64_t elements;
    std::int64_t inputs;
  };
  const std::int64_t layers = 2;
  const LlamaShape shape;
  const std::vector<Case> cases{
      {"gpt", gpt_request(layers, 2, true), (6 * layers + 2) * 256, 6 * layers + 2},
      {"llama", llama_request(shape, layers, 2, true, Attention::flash), (2 * layers + 1) * shape.h, 2 * layers + 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    const Trace trace = build_model(c.request);
    std::vector<std::size_t> found;
    for (std::size_t o = 0; o < trace.ops().size(); ++o) {
      if (trace.ops()[o].name == name) found.push_back(o);
    }
    ASSERT_EQ(found.size(), 1U);
    const traces::Op& op = trace.ops()[found[0]];
    EXPECT_EQ(op.phase, Phase::optimizer);
    EXPECT_EQ(op.kind, OpKind::communication);
    ASSERT_TRUE(op.communication.has_value());
    EXPECT_EQ(op.communication->kind, CommunicationKind::all_reduce);
    EXPECT_EQ(op.communication->group, ParallelGroup::tensor);
    EXPECT_EQ(static_cast<std::int64_t>(op.inputs.size()), c.inputs);
    EXPECT_EQ(trace.bytes_read(op.id), 2 * c.elements);
    EXPECT_EQ(trace.bytes_written(op.id), 2 * c.elements);
    for (const auto input : op.inputs) EXPECT_EQ(trace.tensor(trace.storage_of(input)).role, traces::TensorRole::gradient);
    // After every backward op, before every optimizer op; the step reads what it reduced.
    for (std::size_t o = 0; o < trace.ops().size(); ++o) {
      if (trace.ops()[o].phase == Phase::backward) {
        EXPECT_LT(o, found[0]) << trace.ops()[o].name;
      }
      if (trace.ops()[o].phase == Phase::optimizer && o != found[0]) {
        EXPECT_GT(o, found[0]) << trace.ops()[o].name;
      }
    }
    bool read_by_step = false;
    for (const auto& other : trace.ops()) {
      if (other.kind != OpKind::optimizer_update) continue;
      for (const auto output : op.outputs) {
        read_by_step = read_by_step || std::find(other.inputs.begin(), other.inputs.end(), output) != other.inputs.end();
      }
    }
    EXPECT_TRUE(read_by_step);
  }
  for (const ModelRequest& request : {gpt_request(layers, 2, false), llama_request(shape, layers, 2, false, Attention::flash), gpt_request(layers, 0, false)}) {
    const Trace trace = build_model(request);
    EXPECT_TRUE(std::none_of(trace.ops().begin(), trace.ops().end(), [&](const traces::Op& op) { return op.name == name; }));
  }
}

TEST(TensorParallel, InvalidSpecsAreRefusedWithTheNumbers) {
  const auto message = [](const ModelRequest& request) -> std::string {
    try {
      (void)build_model(request);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    ADD_FAILURE() << "accepted";
    return {};
  };
  EXPECT_NE(message(gpt_request(1, 3, false)).find("3 does not divide the attention heads (8)"), std::string::npos);
  ModelRequest zero = gpt_request(1, 2, false);
  zero.tensor_parallel->degree = 0;
  EXPECT_NE(message(zero).find("expected an integer >= 1"), std::string::npos);
  EXPECT_NE(message(gpt_request(1, 1, true)).find("needs tensor_parallel.degree > 1"), std::string::npos);

  LlamaShape shape;
  EXPECT_NE(message(llama_request(shape, 1, 8, false, Attention::flash)).find("8 does not divide the key/value heads (4)"),
            std::string::npos);
  shape.i = 350;
  EXPECT_NE(message(llama_request(shape, 1, 4, false, Attention::flash)).find("4 does not divide the MLP width (350)"),
            std::string::npos);

  // GPT-NeoX's fused, interleaved QKV and parallel residual are not sharded yet.
  ModelRequest neox = llama_request(LlamaShape{}, 1, 2, false, Attention::flash);
  neox.decoder->family = "gpt_neox";
  neox.decoder->norm = DecoderArchitecture::Norm::layer;
  neox.decoder->activation = DecoderArchitecture::Activation::gelu;
  neox.decoder->gated_mlp = false;
  neox.decoder->kv_heads = neox.decoder->heads;
  EXPECT_NE(message(neox).find("not 'gpt_neox'"), std::string::npos);

  ModelRequest bert = Request("bert-base").seq_len(16);
  bert.tensor_parallel = TensorParallelSpec{2, false};
  EXPECT_NE(message(bert).find("not 'bert-base'"), std::string::npos);
  ModelRequest cnn = Request("resnet18");
  cnn.tensor_parallel = TensorParallelSpec{2, false};
  EXPECT_NE(message(cnn).find("not 'resnet18'"), std::string::npos);
}

}  // namespace
}  // namespace comptrain::zoo

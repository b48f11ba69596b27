// Megatron-LM pipeline stages in the zoo: one micro-batch of one stage, its boundary sends and
// receives (shared/reference/parallelism.md §2), its parameters and saved activations against the
// whole model's, the tied head's copy on the last stage, and the refusals.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "comptrain/support/input_error.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "zoo_test_support.hpp"

namespace comptrain::zoo {
namespace {

using test_support::Request;
using traces::CommunicationKind;
using traces::OpKind;
using traces::ParallelGroup;
using traces::Phase;
using traces::TensorRole;
using traces::Trace;

constexpr std::int64_t kLayers = 4;
constexpr std::int64_t kBatch = 2;
constexpr std::int64_t kSeq = 32;
constexpr std::int64_t kHidden = 64;
constexpr std::int64_t kHeads = 4;
constexpr std::int64_t kVocab = 1000;

// A 16-bit model (2 bytes per boundary element): `gpt` in Megatron's mixed precision, `llama` in
// bf16. t = 0: no tensor parallelism.
ModelRequest gpt_request(std::int64_t layers, Attention attention, std::int64_t t = 0, bool sp = false) {
  ModelRequest request = Request("gpt").batch_size(kBatch).precision(Precision::mixed).layers(layers).hidden(kHidden).heads(kHeads)
                             .seq_len(kSeq).vocab(kVocab).attention(attention);
  if (t > 0) request.tensor_parallel = TensorParallelSpec{t, sp};
  return request;
}

constexpr std::int64_t kLlamaKvHeads = 2;
constexpr std::int64_t kLlamaIntermediate = 176;

ModelRequest llama_request(std::int64_t layers, Attention attention, bool tied = false, std::int64_t t = 0, bool sp = false) {
  DecoderArchitecture arch;
  arch.layers = layers;
  arch.hidden = kHidden;
  arch.heads = kHeads;
  arch.kv_heads = kLlamaKvHeads;
  arch.intermediate = kLlamaIntermediate;
  arch.vocab = kVocab;
  arch.max_positions = 4096;
  arch.tie_embeddings = tied;
  ModelRequest request = Request("llama").batch_size(kBatch).precision(Precision::bf16).seq_len(kSeq).attention(attention);
  request.decoder = arch;
  if (t > 0) request.tensor_parallel = TensorParallelSpec{t, sp};
  return request;
}

ModelRequest staged(ModelRequest request, std::int64_t first_layer, std::int64_t layers, bool first, bool last) {
  request.pipeline_stage = PipelineStageSpec{first_layer, layers, first, last};
  return request;
}

// The 4-layer model cut [0, 1) [1, 3) [3, 4).
std::vector<Trace> three_stages(const ModelRequest& whole) {
  return {build_model(staged(whole, 0, 1, true, false)), build_model(staged(whole, 1, 2, false, false)),
          build_model(staged(whole, 3, 1, false, true))};
}

std::int64_t parameters(const Trace& trace) { return test_support::resident_bytes(trace).parameters; }

std::set<std::string> weight_names(const Trace& trace) {
  std::set<std::string> names;
  for (const auto& tensor : trace.tensors()) {
    if (tensor.role == TensorRole::weight && !tensor.is_view()) names.insert(tensor.name);
  }
  return names;
}

struct Transfer {
  Phase phase;
  CommunicationKind kind;
  friend bool operator<(const Transfer& x, const Transfer& y) { return std::pair(x.phase, x.kind) < std::pair(y.phase, y.kind); }
  friend bool operator==(const Transfer&, const Transfer&) = default;
};

void PrintTo(const Transfer& transfer, std::ostream* out) {
  *out << traces::to_string(transfer.phase) << " " << traces::to_string(transfer.kind);
}

// The trace's stage-boundary transfers by phase and kind; each moves `bytes` (a send reads its
// tensor, a recv writes it: traces/FORMAT.md, "Communication") and computes nothing. The tied
// embedding's exchange (optimizer phase) is TiedEmbeddingGradientIsExchangedBetweenTheEnds's.
std::map<Transfer, int> pipeline_transfers(const Trace& trace, std::int64_t bytes) {
  std::map<Transfer, int> counts;
  for (const auto& op : trace.ops()) {
    if (!op.communication || op.communication->group != ParallelGroup::pipeline || op.phase == Phase::optimizer) continue;
    SCOPED_TRACE(op.name);
    EXPECT_EQ(op.kind, OpKind::communication);
    EXPECT_EQ(trace.flops(op.id), 0);
    const bool send = op.communication->kind == CommunicationKind::send;
    EXPECT_TRUE(send || op.communication->kind == CommunicationKind::recv);
    EXPECT_EQ(trace.bytes_read(op.id), send ? bytes : 0);
    EXPECT_EQ(trace.bytes_written(op.id), send ? 0 : bytes);
    ++counts[{op.phase, op.communication->kind}];
  }
  return counts;
}

const std::map<Transfer, int> kFirstStage{{{Phase::forward, CommunicationKind::send}, 1}, {{Phase::backward, CommunicationKind::recv}, 1}};
const std::map<Transfer, int> kMiddleStage{{{Phase::forward, CommunicationKind::recv}, 1},
                                           {{Phase::forward, CommunicationKind::send}, 1},
                                           {{Phase::backward, CommunicationKind::send}, 1},
                                           {{Phase::backward, CommunicationKind::recv}, 1}};
const std::map<Transfer, int> kLastStage{{{Phase::forward, CommunicationKind::recv}, 1}, {{Phase::backward, CommunicationKind::send}, 1}};

// The models tested, by name, each as a function of its layer count.
struct Model {
  std::string name;
  ModelRequest (*request)(std::int64_t layers, Attention attention);
  std::vector<Attention> attentions;
};

ModelRequest gpt_model(std::int64_t layers, Attention attention) { return gpt_request(layers, attention); }
ModelRequest llama_model(std::int64_t layers, Attention attention) { return llama_request(layers, attention); }

const std::vector<Model>& models() {
  static const std::vector<Model> list{{"gpt", &gpt_model, {Attention::eager, Attention::flash, Attention::fused_softmax}},
                                       {"llama", &llama_model, {Attention::eager, Attention::flash}}};
  return list;
}

// Every parameter lives on exactly one stage, under its global layer index, except the LM head's
// copy of the word embedding that gpt's tied head needs on its last stage (V·h more).
TEST(PipelineStage, ParametersSumToTheWholeModel) {
  for (const Model& model : models()) {
    for (const Attention attention : model.attentions) {
      SCOPED_TRACE(model.name + " " + std::string(to_string(attention)));
      const ModelRequest whole = model.request(kLayers, attention);
      const Trace whole_trace = build_model(whole);
      const std::vector<Trace> stages = three_stages(whole);
      const bool tied_head = model.name == "gpt";
      std::int64_t sum = 0;
      std::set<std::string> names;
      for (const Trace& stage : stages) {
        sum += parameters(stage);
        for (const std::string& name : weight_names(stage)) EXPECT_TRUE(names.insert(name).second) << name << " on two stages";
      }
      EXPECT_EQ(sum, parameters(whole_trace) + (tied_head ? kVocab * kHidden : 0));
      std::set<std::string> expected = weight_names(whole_trace);
      if (tied_head) expected.insert("lm_head.weight");
      EXPECT_EQ(names, expected);
      // The middle stage holds layers 1 and 2 by their global names, nothing of layers 0 and 3.
      const std::string layer_prefix = model.name == "gpt" ? "transformer.h." : "model.layers.";
      const std::set<std::string> middle = weight_names(stages[1]);
      for (std::int64_t layer = 0; layer < kLayers; ++layer) {
        const bool held = std::any_of(middle.begin(), middle.end(), [&](const std::string& name) {
          return name.starts_with(layer_prefix + std::to_string(layer) + ".");
        });
        EXPECT_EQ(held, layer == 1 || layer == 2) << "layer " << layer;
      }
    }
  }
}

// Per layer, a middle stage saves what a layer of the whole model adds (the difference between 2-
// and 1-layer models, as tests/zoo/transformer_test.cpp computes it): that difference counts one
// layer input where a layer saves its input (gpt's ln_1), which on a middle stage is the received
// tensor for the first layer and the previous layer's output for the others; a bf16 Llama saves
// none (its RMSNorm keeps an fp32 copy), so the received tensor is then no activation. A stage's
// fixed bytes are the per-layer ones (gpt eager's causal masks) plus, for llama, the rotary cos and
// sin tables [s, head_dim] that every stage makes. And the stages together save what the whole
// model saves, the tables once per stage.
TEST(PipelineStage, SavedBytesPerLayerOfAMiddleStage) {
  for (const Model& model : models()) {
    for (const Attention attention : model.attentions) {
      SCOPED_TRACE(model.name + " " + std::string(to_string(attention)));
      const auto one = test_support::saved_for_backward(build_model(model.request(1, attention)));
      const auto two = test_support::saved_for_backward(build_model(model.request(2, attention)));
      const std::int64_t per_layer = two.per_sample - one.per_sample;
      const std::int64_t per_layer_fixed = two.fixed - one.fixed;
      const bool llama = model.name == "llama";
      const std::int64_t head_dim = kHidden / kHeads;
      const std::int64_t rotary_tables = llama ? 2 * kSeq * head_dim * 2 : 0;
      for (const std::int64_t layers : {1, 2}) {
        SCOPED_TRACE(std::to_string(layers) + " layers");
        const Trace middle = build_model(staged(model.request(kLayers, attention), 1, layers, false, false));
        const auto saved = test_support::saved_for_backward(middle);
        EXPECT_EQ(saved.per_sample, layers * per_layer);
        EXPECT_EQ(saved.fixed, layers * per_layer_fixed + rotary_tables);
        const auto received = std::find_if(middle.tensors().begin(), middle.tensors().end(),
                                           [](const traces::Tensor& tensor) { return tensor.name == "recv_forward.out"; });
        ASSERT_NE(received, middle.tensors().end());
        EXPECT_EQ(received->role, llama ? TensorRole::temporary : TensorRole::activation);
      }
      const ModelRequest whole = model.request(kLayers, attention);
      const auto whole_saved = test_support::saved_for_backward(build_model(whole));
      std::int64_t per_sample = 0;
      std::int64_t fixed = 0;
      for (const Trace& stage : three_stages(whole)) {
        const auto saved = test_support::saved_for_backward(stage);
        per_sample += saved.per_sample;
        fixed += saved.fixed;
      }
      EXPECT_EQ(per_sample, whole_saved.per_sample);
      EXPECT_EQ(fixed, whole_saved.fixed + 2 * rotary_tables);
    }
  }
}

// One [s, b, h] tensor per boundary each way in 16 bits (parallelism.md §2): s/t rows of it under
// sequence parallelism, the whole of it on each tensor-parallel rank without.
TEST(PipelineStage, SendsAndReceivesPerStage) {
  struct Case {
    std::string name;
    ModelRequest whole;
    std::int64_t rows;
  };
  const std::vector<Case> cases{
      {"gpt", gpt_request(kLayers, Attention::flash), kSeq},
      {"gpt eager", gpt_request(kLayers, Attention::eager), kSeq},
      {"gpt TP 2", gpt_request(kLayers, Attention::flash, 2, false), kSeq},
      {"gpt TP 2 SP", gpt_request(kLayers, Attention::fused_softmax, 2, true), kSeq / 2},
      {"llama eager", llama_request(kLayers, Attention::eager), kSeq},
      {"llama flash", llama_request(kLayers, Attention::flash), kSeq},
      {"llama TP 2 SP", llama_request(kLayers, Attention::flash, false, 2, true), kSeq / 2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::int64_t bytes = c.rows * kBatch * kHidden * 2;
    EXPECT_TRUE(pipeline_transfers(build_model(c.whole), bytes).empty());
    const std::vector<Trace> stages = three_stages(c.whole);
    EXPECT_EQ(pipeline_transfers(stages[0], bytes), kFirstStage);
    EXPECT_EQ(pipeline_transfers(stages[1], bytes), kMiddleStage);
    EXPECT_EQ(pipeline_transfers(stages[2], bytes), kLastStage);
    for (std::size_t k = 0; k < stages.size(); ++k) {
      SCOPED_TRACE("stage " + std::to_string(k));
      const Trace& trace = stages[k];
      const auto& ops = trace.ops();
      const auto first_backward = std::find_if(ops.begin(), ops.end(), [](const traces::Op& op) { return op.phase == Phase::backward; });
      const auto first_optimizer = std::find_if(ops.begin(), ops.end(), [](const traces::Op& op) { return op.phase == Phase::optimizer; });
      ASSERT_NE(first_backward, ops.end());
      ASSERT_NE(first_optimizer, ops.end());
      const auto last_backward = std::prev(first_optimizer);
      const auto is = [](const traces::Op& op, CommunicationKind kind) { return op.communication && op.communication->kind == kind; };
      if (k > 0) {
        // The stage starts by receiving its input, and its backward pass ends by sending the
        // input's gradient (all its parts summed), the last backward op.
        EXPECT_TRUE(is(ops.front(), CommunicationKind::recv)) << ops.front().name;
        EXPECT_TRUE(is(*last_backward, CommunicationKind::send)) << last_backward->name;
        ASSERT_EQ(last_backward->inputs.size(), 1U);
        EXPECT_EQ(trace.tensor(last_backward->inputs[0]).shape, (std::vector<std::int64_t>{kBatch, c.rows, kHidden}));
      }
      if (k < 2) {
        // Its forward pass ends with the send of its output, and its backward pass starts from
        // that output's gradient, received (Megatron's backward_step roots autograd there).
        EXPECT_TRUE(is(*std::prev(first_backward), CommunicationKind::send)) << std::prev(first_backward)->name;
        EXPECT_TRUE(is(*first_backward, CommunicationKind::recv)) << first_backward->name;
        ASSERT_EQ(first_backward->outputs.size(), 1U);
        EXPECT_EQ(trace.tensor(first_backward->outputs[0]).shape, (std::vector<std::int64_t>{kBatch, c.rows, kHidden}));
        EXPECT_TRUE(std::none_of(ops.begin(), ops.end(), [](const traces::Op& op) { return op.kind == OpKind::loss; }));
      }
    }
  }
}

// Megatron-LM's scatter-gather p2p of 2022 (PipelineStageSpec::scatter_gather): each
// tensor-parallel rank sends and receives 1/t of the boundary tensor, the receiver all-gathers it
// over the tensor group in the forward pass, and the sender all-gathers the gradient it receives
// in the backward pass; without sequence parallelism only, and with a tensor-parallel degree.
TEST(PipelineStage, ScatterGatherSendsOneTensorParallelShare) {
  for (const ModelRequest& whole : {gpt_request(kLayers, Attention::flash, 2, false), llama_request(kLayers, Attention::flash, false, 2, false)}) {
    SCOPED_TRACE(whole.model);
    const auto scattered = [&](std::int64_t first_layer, std::int64_t layers, bool first, bool last) {
      ModelRequest request = staged(whole, first_layer, layers, first, last);
      request.pipeline_stage->scatter_gather = true;
      return build_model(request);
    };
    const std::vector<Trace> stages{scattered(0, 1, true, false), scattered(1, 2, false, false), scattered(3, 1, false, true)};
    const std::int64_t share = kSeq / 2 * kBatch * kHidden * 2;  // half of the [b, s, h] boundary in 16 bits
    EXPECT_EQ(pipeline_transfers(stages[0], share), kFirstStage);
    EXPECT_EQ(pipeline_transfers(stages[1], share), kMiddleStage);
    EXPECT_EQ(pipeline_transfers(stages[2], share), kLastStage);
    // The tensor-parallel all-gathers a boundary adds: the received input's (forward) on the
    // stages after the first, the sent output's gradient's (backward) on those before the last,
    // each writing the whole [b, s, h] tensor.
    const auto boundary_gathers = [](const Trace& trace, Phase phase) {
      int count = 0;
      for (const auto& op : trace.ops()) {
        if (op.phase != phase || !op.communication || op.communication->group != ParallelGroup::tensor ||
            op.communication->kind != CommunicationKind::all_gather) {
          continue;
        }
        if (op.name.find("recv_forward.gather") == std::string::npos && op.name.find("send_forward.split") == std::string::npos) continue;
        EXPECT_EQ(trace.bytes_written(op.id), kSeq * kBatch * kHidden * 2) << op.name;
        ++count;
      }
      return count;
    };
    EXPECT_EQ(boundary_gathers(stages[0], Phase::forward), 0);
    EXPECT_EQ(boundary_gathers(stages[0], Phase::backward), 1);
    EXPECT_EQ(boundary_gathers(stages[1], Phase::forward), 1);
    EXPECT_EQ(boundary_gathers(stages[1], Phase::backward), 1);
    EXPECT_EQ(boundary_gathers(stages[2], Phase::forward), 1);
    EXPECT_EQ(boundary_gathers(stages[2], Phase::backward), 0);
    // Parameters are those of the stages without it.
    EXPECT_EQ(parameters(stages[1]), parameters(build_model(staged(whole, 1, 2, false, false))));
  }
  // Refused without a tensor-parallel degree, and under sequence parallelism.
  for (const ModelRequest& whole : {gpt_request(kLayers, Attention::flash), gpt_request(kLayers, Attention::flash, 2, true)}) {
    ModelRequest request = staged(whole, 1, 2, false, false);
    request.pipeline_stage->scatter_gather = true;
    try {
      build_model(request);
      ADD_FAILURE() << "scatter_gather accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("pipeline_stage.scatter_gather"), std::string::npos) << e.what();
    }
  }
}

// With tied embeddings, the last stage's head reads a copy of the word embedding of its own
// (Megatron keeps one, language_module.py:278-290): the two stages hold the whole model plus one
// embedding, V'/t rows of the padded vocabulary per tensor-parallel rank.
TEST(PipelineStage, TiedHeadReadsTheLastStagesOwnCopy) {
  struct Case {
    std::string name;
    ModelRequest whole;
    std::string embedding;  // the word embedding's weight on the first stage
    std::int64_t t;
  };
  const std::vector<Case> cases{
      {"gpt", gpt_request(kLayers, Attention::flash), "transformer.wte.weight", 1},
      {"gpt TP 2 SP", gpt_request(kLayers, Attention::flash, 2, true), "transformer.wte.weight", 2},
      {"llama tied", llama_request(kLayers, Attention::flash, true), "model.embed_tokens.weight", 1},
      {"llama tied TP 2", llama_request(kLayers, Attention::eager, true, 2, false), "model.embed_tokens.weight", 2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Trace whole = build_model(c.whole);
    const Trace first = build_model(staged(c.whole, 0, 2, true, false));
    const Trace last = build_model(staged(c.whole, 2, 2, false, true));
    const std::int64_t rows = tensor_parallel_vocab(kVocab, c.t) / c.t;
    EXPECT_EQ(parameters(first) + parameters(last), parameters(whole) + rows * kHidden);
    const auto named = [](const Trace& trace, const std::string& name) -> std::optional<traces::Tensor> {
      for (const auto& tensor : trace.tensors()) {
        if (tensor.name == name) return tensor;
      }
      return std::nullopt;
    };
    EXPECT_TRUE(named(first, c.embedding).has_value());
    EXPECT_FALSE(named(first, "lm_head.weight").has_value());
    EXPECT_FALSE(named(last, c.embedding).has_value());
    const auto copy = named(last, "lm_head.weight");
    ASSERT_TRUE(copy.has_value());
    EXPECT_EQ(copy->role, TensorRole::weight);
    EXPECT_EQ(copy->shape, (std::vector<std::int64_t>{rows, kHidden}));
    // The head's GEMM reads it; it gets a gradient and optimizer state of its own.
    const auto head = std::find_if(last.ops().begin(), last.ops().end(), [](const traces::Op& op) { return op.name == "lm_head"; });
    ASSERT_NE(head, last.ops().end());
    EXPECT_NE(std::find(head->inputs.begin(), head->inputs.end(), copy->id), head->inputs.end());
    const auto grad = named(last, "lm_head.weight.grad");
    ASSERT_TRUE(grad.has_value());
    EXPECT_EQ(last.tensor(last.storage_of(grad->id)).role, TensorRole::gradient);
    EXPECT_TRUE(named(last, "lm_head.weight.exp_avg").has_value());
  }
}

// The tied embedding's gradient all-reduce between the first and the last stage (Megatron's
// _allreduce_word_embedding_grads over the embedding group): on each end, in the optimizer phase
// after every backward op and before the step, a send of the gradient (V'/t x h, 16-bit) and a recv
// writing into it, over the pipeline group; the step reads what the recv wrote. Not on a middle
// stage, not on a whole model, not untied.
TEST(PipelineStage, TiedEmbeddingGradientIsExchangedBetweenTheEnds) {
  const std::string send = "finalize_model_grads.embedding_grads.send";
  const std::string recv = "finalize_model_grads.embedding_grads.recv";
  struct Case {
    std::string name;
    ModelRequest whole;
    std::string embedding;
    std::int64_t t;
  };
  const std::vector<Case> cases{
      {"gpt", gpt_request(kLayers, Attention::flash), "transformer.wte.weight", 1},
      {"gpt TP 2 SP", gpt_request(kLayers, Attention::flash, 2, true), "transformer.wte.weight", 2},
      {"llama tied", llama_request(kLayers, Attention::flash, true), "model.embed_tokens.weight", 1},
  };
  const auto find = [](const Trace& trace, const std::string& name) -> std::optional<std::size_t> {
    for (std::size_t o = 0; o < trace.ops().size(); ++o) {
      if (trace.ops()[o].name == name) return o;
    }
    return std::nullopt;
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::int64_t bytes = tensor_parallel_vocab(kVocab, c.t) / c.t * kHidden * 2;
    const std::vector<Trace> stages = three_stages(c.whole);
    for (std::size_t i : {std::size_t{0}, std::size_t{2}}) {
      SCOPED_TRACE("stage " + std::to_string(i));
      const Trace& trace = stages[i];
      const auto s = find(trace, send);
      const auto r = find(trace, recv);
      ASSERT_TRUE(s && r);
      EXPECT_EQ(*r, *s + 1);
      const traces::Op& send_op = trace.ops()[*s];
      const traces::Op& recv_op = trace.ops()[*r];
      for (const traces::Op* op : {&send_op, &recv_op}) {
        EXPECT_EQ(op->phase, Phase::optimizer);
        ASSERT_TRUE(op->communication.has_value());
        EXPECT_EQ(op->communication->group, ParallelGroup::pipeline);
      }
      EXPECT_EQ(send_op.communication->kind, CommunicationKind::send);
      EXPECT_EQ(recv_op.communication->kind, CommunicationKind::recv);
      EXPECT_EQ(trace.bytes_read(send_op.id), bytes);
      EXPECT_EQ(trace.bytes_written(recv_op.id), bytes);
      ASSERT_EQ(send_op.inputs.size(), 1U);
      ASSERT_EQ(recv_op.outputs.size(), 1U);
      EXPECT_TRUE(recv_op.inputs.empty());
      // The gradient of the stage's copy of the embedding, received into in place.
      const std::string weight = i == 0 ? c.embedding : "lm_head.weight";
      EXPECT_EQ(trace.tensor(trace.storage_of(send_op.inputs[0])).name, trace.tensor(trace.storage_of(recv_op.outputs[0])).name);
      EXPECT_EQ(trace.tensor(trace.storage_of(recv_op.outputs[0])).role, TensorRole::gradient);
      EXPECT_EQ(trace.tensor(trace.storage_of(send_op.inputs[0])).name.rfind(weight, 0), 0U) << trace.tensor(trace.storage_of(send_op.inputs[0])).name;
      for (std::size_t o = 0; o < trace.ops().size(); ++o) {
        if (trace.ops()[o].phase == Phase::backward) {
          EXPECT_LT(o, *s);
        }
        if (trace.ops()[o].kind == OpKind::optimizer_update) {
          EXPECT_GT(o, *r);
        }
      }
      const bool stepped = std::any_of(trace.ops().begin(), trace.ops().end(), [&](const traces::Op& op) {
        return op.kind == OpKind::optimizer_update && std::find(op.inputs.begin(), op.inputs.end(), recv_op.outputs[0]) != op.inputs.end();
      });
      EXPECT_TRUE(stepped);
    }
    EXPECT_FALSE(find(stages[1], send).has_value());
    EXPECT_FALSE(find(build_model(c.whole), send).has_value());
    ModelRequest untied = c.whole;
    untied.tie_embeddings = false;
    for (const Trace& trace : three_stages(untied)) EXPECT_FALSE(find(trace, send).has_value());
  }
}

// Elements of the trace's weights.
std::int64_t weight_elements(const Trace& trace) {
  std::int64_t total = 0;
  for (const auto& tensor : trace.tensors()) {
    if (tensor.role == TensorRole::weight) total += tensor.elements();
  }
  return total;
}

bool has_tensor(const Trace& trace, const std::string& name) {
  return std::any_of(trace.tensors().begin(), trace.tensors().end(), [&](const traces::Tensor& t) { return t.name == name; });
}

// Megatron-LM's --untie-embeddings-and-output-weights (tie_embeddings: false): the output layer's
// weight is its own, V'/t x h, on the whole model and on every last stage; no stage holds a copy.
// By hand, the 4-layer gpt (h 64, V 1000, 32 learned positions): per layer the two LayerNorms 4h,
// QKV 3h^2 + 3h, the attention's output h^2 + h, fc1 4h^2 + 4h, fc2 4h^2 + h = 12h^2 + 13h;
// wte V h, wpe 32 h, ln_f 2h; tied 266,112, untied 64,000 (V h) more.
TEST(PipelineStage, UntiedHeadIsTheOutputLayersOwnWeightOnTheLastStage) {
  constexpr std::int64_t h = kHidden;
  constexpr std::int64_t tied_elements = kLayers * (12 * h * h + 13 * h) + kVocab * h + kSeq * h + 2 * h;
  static_assert(tied_elements == 266'112);
  ModelRequest untied = gpt_request(kLayers, Attention::flash);
  untied.tie_embeddings = false;
  const Trace whole = build_model(untied);
  EXPECT_EQ(weight_elements(build_model(gpt_request(kLayers, Attention::flash))), tied_elements);
  EXPECT_EQ(weight_elements(whole), tied_elements + kVocab * h);
  EXPECT_TRUE(has_tensor(whole, "lm_head.weight"));
  EXPECT_TRUE(has_tensor(whole, "lm_head.weight.grad"));
  EXPECT_TRUE(has_tensor(whole, "lm_head.weight.exp_avg"));
  EXPECT_TRUE(has_tensor(whole, "lm_head.weight.master"));
  EXPECT_EQ(whole.metadata().at("tie_embeddings"), "false");
  EXPECT_EQ(build_model(gpt_request(kLayers, Attention::flash)).metadata().count("tie_embeddings"), 0U);
  // Under TP 2 each rank holds 1024 / 2 rows of the padded vocabulary (a multiple of 128 x 2).
  ModelRequest untied_tp = gpt_request(kLayers, Attention::flash, 2, true);
  untied_tp.tie_embeddings = false;
  const std::int64_t rows = tensor_parallel_vocab(kVocab, 2) / 2;
  ASSERT_EQ(rows, 512);
  EXPECT_EQ(weight_elements(build_model(untied_tp)) - weight_elements(build_model(gpt_request(kLayers, Attention::flash, 2, true))), rows * h);
  // Staged, untied: the first stage the embedding, the last the output layer, nothing twice.
  const Trace first = build_model(staged(untied, 0, 2, true, false));
  const Trace last = build_model(staged(untied, 2, 2, false, true));
  EXPECT_EQ(weight_elements(first) + weight_elements(last), weight_elements(whole));
  EXPECT_TRUE(has_tensor(first, "transformer.wte.weight"));
  EXPECT_FALSE(has_tensor(first, "lm_head.weight"));
  EXPECT_TRUE(has_tensor(last, "lm_head.weight"));
  EXPECT_FALSE(has_tensor(last, "transformer.wte.weight"));
  // llama: the key overrides the architecture's tie_word_embeddings, either way.
  ModelRequest llama_tied = llama_request(kLayers, Attention::flash, false);
  llama_tied.tie_embeddings = true;
  EXPECT_EQ(weight_elements(build_model(llama_request(kLayers, Attention::flash, false))) - weight_elements(build_model(llama_tied)), kVocab * h);
  ModelRequest llama_untied = llama_request(kLayers, Attention::flash, true);
  llama_untied.tie_embeddings = false;
  EXPECT_EQ(weight_elements(build_model(llama_untied)), weight_elements(build_model(llama_request(kLayers, Attention::flash, false))));
}

// gpt2's and BERT's Hugging Face heads are tied: false is refused, as is the key on a CNN.
TEST(PipelineStage, TieEmbeddingsFalseIsRefusedWhereTheHeadIsTiedByDefinition) {
  for (const std::string model : {"gpt2", "bert-base"}) {
    SCOPED_TRACE(model);
    try {
      build_model(Request(model).batch_size(1).layers(1).seq_len(16).tie_embeddings(false));
      ADD_FAILURE() << "accepted";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("tie_embeddings: false is written for models 'gpt' and 'llama'", 0), 0U) << e.what();
    }
    EXPECT_NO_THROW(build_model(Request(model).batch_size(1).layers(1).seq_len(16).tie_embeddings(true)));
  }
  try {
    build_model(Request("resnet18").batch_size(1).tie_embeddings(true));
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("tie_embeddings: a language model option", 0), 0U) << e.what();
  }
}

// Unset is today's trace; a stage spanning the whole model is the same program, only its metadata
// says so.
TEST(PipelineStage, UnsetOrWholeModelIsTodaysTrace) {
  std::vector<std::pair<std::string, ModelRequest>> cases;
  for (const Attention attention : {Attention::eager, Attention::flash}) {
    cases.emplace_back("gpt", gpt_request(kLayers, attention));
    cases.emplace_back("llama", llama_request(kLayers, attention));
    cases.emplace_back("llama tied TP 2 SP", llama_request(kLayers, attention, true, 2, true));
  }
  for (const auto& [name, request] : cases) {
    SCOPED_TRACE(name);
    const Trace unset = build_model(request);
    EXPECT_EQ(unset.metadata().count("pipeline_layers"), 0U);
    const Trace whole_stage = build_model(staged(request, 0, kLayers, true, true));
    EXPECT_TRUE(unset.ops() == whole_stage.ops());
    EXPECT_TRUE(unset.tensors() == whole_stage.tensors());
    std::map<std::string, std::string> metadata = whole_stage.metadata();
    EXPECT_EQ(metadata.at("pipeline_first_layer"), "0");
    EXPECT_EQ(metadata.at("pipeline_layers"), std::to_string(kLayers));
    EXPECT_EQ(metadata.at("pipeline_first"), "true");
    EXPECT_EQ(metadata.at("pipeline_last"), "true");
    for (const char* key : {"pipeline_first_layer", "pipeline_layers", "pipeline_first", "pipeline_last"}) metadata.erase(key);
    EXPECT_TRUE(metadata == unset.metadata());
  }
  const Trace middle = build_model(staged(llama_request(kLayers, Attention::flash), 1, 2, false, false));
  EXPECT_EQ(middle.metadata().at("pipeline_first_layer"), "1");
  EXPECT_EQ(middle.metadata().at("pipeline_layers"), "2");
  EXPECT_EQ(middle.metadata().at("pipeline_first"), "false");
  EXPECT_EQ(middle.metadata().at("pipeline_last"), "false");
}

TEST(PipelineStage, InvalidStagesAreRefusedWithTheNumbers) {
  const auto message = [](const ModelRequest& request) -> std::string {
    try {
      (void)build_model(request);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    ADD_FAILURE() << "accepted";
    return {};
  };
  const ModelRequest gpt = gpt_request(kLayers, Attention::flash);
  EXPECT_NE(message(staged(gpt, 3, 2, false, true)).find("first_layer 3, layers 2 is not a range of the 4 layers of 'gpt'"),
            std::string::npos);
  EXPECT_NE(message(staged(gpt, 1, 0, false, false)).find("first_layer 1, layers 0 is not a range"), std::string::npos);
  EXPECT_NE(message(staged(gpt, -1, 2, false, false)).find("first_layer -1, layers 2 is not a range"), std::string::npos);
  EXPECT_NE(message(staged(llama_request(kLayers, Attention::flash), 2, 3, false, true)).find("is not a range of the 4 layers of 'llama'"),
            std::string::npos);
  // The embedding feeds layer 0 and the head reads the last layer.
  EXPECT_NE(message(staged(gpt, 1, 1, true, false)).find("marked first"), std::string::npos);
  EXPECT_NE(message(staged(gpt, 1, 1, false, true)).find("marked last"), std::string::npos);

  for (const std::string model : {"gpt2", "bert-base", "resnet18"}) {
    ModelRequest other = Request(model);
    other.pipeline_stage = PipelineStageSpec{0, 1, true, false};
    EXPECT_NE(message(other).find("not '" + model + "'"), std::string::npos) << model;
  }
  ModelRequest lora = staged(llama_request(kLayers, Attention::flash), 0, 2, true, false);
  lora.lora = LoraSpec{};
  EXPECT_NE(message(lora).find("not written together with lora"), std::string::npos);
}

}  // namespace
}  // namespace comptrain::zoo

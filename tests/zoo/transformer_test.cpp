// The transformers: parameter counts, saved activations per layer (Korthikanti et al. 2022)
// and GEMM FLOPs per iteration (the same paper's model FLOPs formula).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>
#include <string>

#include "comptrain/support/input_error.hpp"
#include "comptrain/traces/liveness.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "zoo_test_support.hpp"

namespace comptrain::zoo {
namespace {

using test_support::Request;
using traces::OpKind;
using traces::Phase;
using traces::TensorRole;
using traces::Trace;

std::int64_t parameters_named(const Trace& trace, const std::string& prefix) {
  std::int64_t count = 0;
  for (const auto& tensor : trace.tensors()) {
    if (tensor.role == TensorRole::weight && tensor.name.starts_with(prefix)) count += tensor.elements();
  }
  return count;
}

const traces::Tensor& tensor_named(const Trace& trace, const std::string& name) {
  for (const auto& tensor : trace.tensors()) {
    if (tensor.name == name) return tensor;
  }
  throw std::runtime_error("no tensor " + name);
}

// Parameter counts of the Hugging Face models (sum(p.numel() for p in model.parameters()),
// tied weights once): GPT2LMHeadModel("gpt2"); BertForPreTraining and its BertModel for
// bert-base-uncased and bert-large-uncased.
TEST(Transformer, ParameterCounts) {
  const Trace gpt2 = build_model(Request("gpt2").seq_len(16));
  EXPECT_EQ(parameters_named(gpt2, ""), 124'439'808);

  const Trace base = build_model(Request("bert-base").seq_len(16));
  EXPECT_EQ(parameters_named(base, ""), 110'106'428);
  EXPECT_EQ(parameters_named(base, "bert."), 109'482'240);

  const Trace large = build_model(Request("bert-large").seq_len(16));
  EXPECT_EQ(parameters_named(large, ""), 336'226'108);
  EXPECT_EQ(parameters_named(large, "bert."), 335'141'888);
}

struct LayerCase {
  std::string model;
  Precision precision;
  std::int64_t hidden;  // the shape the case builds (the model's own unless it is `gpt`)
  std::int64_t heads;
  std::int64_t seq_len;
};

class SavedPerLayer : public testing::TestWithParam<LayerCase> {};

// Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
// §4.1, Eq. 1): one layer saves s·b·h·34 + 5·a·s²·b bytes in 16-bit training -- 2-byte tensors
// of 16·sbh elements (LayerNorm inputs 2+2, QKV input 2, Q, K, V 6, context 2, fc1 input 2,
// GELU input 8, fc2 input 8 bytes per sbh) and 2·as²b elements (softmax output, dropout
// output), and 1-byte dropout masks of 2·sbh + as²b elements. In fp32 the 2-byte tensors
// double, the masks do not. PyTorch's LayerNorm also saves an fp32 mean and rstd per row,
// which the paper leaves out: 2 x 4·s·b bytes per LayerNorm, two per layer.
// The extra layer of an (l+1)-layer model over an l-layer one is exactly one layer.
TEST_P(SavedPerLayer, MatchesKorthikanti) {
  const LayerCase& c = GetParam();
  const auto build = [&](std::int64_t layers) {
    ModelRequest request = Request(c.model).batch_size(2).precision(c.precision).layers(layers).seq_len(c.seq_len);
    if (c.model == "gpt") {
      request.hidden = c.hidden;
      request.heads = c.heads;
      request.vocab = 1000;
    }
    return test_support::saved_for_backward(build_model(request));
  };
  const auto one = build(1);
  const auto two = build(2);
  const auto four = build(4);

  const std::int64_t s = c.seq_len;
  const std::int64_t h = c.hidden;
  const std::int64_t a = c.heads;
  const std::int64_t element = c.precision == Precision::mixed ? 2 : 4;
  const std::int64_t paper = element * (16 * s * h + 2 * a * s * s) + (2 * s * h + a * s * s);
  const std::int64_t layernorm_statistics = 2 * 2 * 4 * s;
  if (c.precision == Precision::mixed) {
    EXPECT_EQ(paper, s * h * 34 + 5 * a * s * s);  // the paper's own form, per sample
  }
  EXPECT_EQ(two.per_sample - one.per_sample, paper + layernorm_statistics);
  EXPECT_EQ(four.per_sample - two.per_sample, 2 * (paper + layernorm_statistics));
  EXPECT_EQ(two.fixed, one.fixed);  // nothing a layer saves is batch-independent
}

INSTANTIATE_TEST_SUITE_P(
    Models, SavedPerLayer,
    testing::Values(LayerCase{"gpt2", Precision::mixed, 768, 12, 1024}, LayerCase{"gpt2", Precision::fp32, 768, 12, 1024},
                    LayerCase{"bert-base", Precision::mixed, 768, 12, 512},
                    LayerCase{"bert-base", Precision::fp32, 768, 12, 512},
                    LayerCase{"bert-large", Precision::mixed, 1024, 16, 512},
                    LayerCase{"gpt", Precision::mixed, 256, 8, 384}, LayerCase{"gpt", Precision::fp32, 256, 8, 384}),
    [](const auto& param_info) {
      std::string name = param_info.param.model + "_" + std::string(to_string(param_info.param.precision));
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

// The model FLOPs formula of Korthikanti et al. 2022 (arXiv 2205.05198, its model FLOPs per iteration; Megatron-LM's
// num_floating_point_operations computes the same): the GEMMs of one iteration (forward, backward at twice the
// forward) take 72·B·s·l·h²·(1 + s/(6h) + V/(12·h·l)) = 72·B·s·l·h² + 12·B·s²·l·h + 6·B·s·h·V
// FLOPs, the last term being the LM head (its weight gradient included).
// The formula leaves out the biases: each biased linear adds one FLOP per output element
// forward and one per output-gradient element for the bias gradient, and a layer's biases
// have 3h + h + 4h + h = 9h elements, so 2·9·B·s·h·l more.
TEST(Transformer, GemmFlopsMatchTheModelFlopsFormula) {
  struct Case {
    ModelRequest request;
    std::int64_t layers, hidden, seq_len, vocab;
  };
  const Case cases[] = {
      {Request("gpt2").batch_size(2), 12, 768, 1024, 50257},
      {Request("gpt").batch_size(3).precision(Precision::mixed), 24, 2048, 2048, 50257},  // gpt's defaults
      {Request("gpt").batch_size(5).layers(3).hidden(320).heads(5).seq_len(96).vocab(777),
       3, 320, 96, 777},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.request.model);
    const Trace trace = build_model(c.request);
    std::int64_t gemm_flops = 0;
    for (const auto& op : trace.ops()) {
      if (op.kind == OpKind::linear || op.kind == OpKind::matmul) gemm_flops += trace.flops(op.id);
    }
    const std::int64_t b = c.request.batch_size;
    const std::int64_t s = c.seq_len;
    const std::int64_t l = c.layers;
    const std::int64_t h = c.hidden;
    const std::int64_t v = c.vocab;
    const std::int64_t formula = 72 * b * s * l * h * h + 12 * b * s * s * l * h + 6 * b * s * h * v;
    const std::int64_t biases = 2 * 9 * b * s * h * l;
    EXPECT_EQ(gemm_flops, formula + biases);
  }
}

TEST(Transformer, TiedWeightsAccumulateTheirGradients) {
  // GPT-2's LM head and BERT's MLM decoder reuse the token embedding: its gradient is the sum
  // of two partial gradients, one weight-gradient storage, one optimizer update.
  for (const auto& [model, weight] : {std::pair<std::string, std::string>{"gpt2", "transformer.wte.weight"},
                                      {"bert-base", "bert.embeddings.word_embeddings.weight"}}) {
    SCOPED_TRACE(model);
    const Trace trace = build_model(Request(model).layers(1).seq_len(8));
    const auto& grad = tensor_named(trace, weight + ".grad");
    EXPECT_EQ(grad.role, TensorRole::gradient);
    EXPECT_EQ(tensor_named(trace, weight + ".grad.1").role, TensorRole::temporary);
    const auto& sum = tensor_named(trace, weight + ".grad.sum1");
    EXPECT_EQ(trace.storage_of(sum.id), grad.id);
    ASSERT_TRUE(sum.producer);
    EXPECT_EQ(trace.op(*sum.producer).kind, OpKind::elementwise);
    int updates = 0;
    for (const auto& op : trace.ops()) {
      if (op.name != "optimizer." + weight) continue;
      ++updates;
      EXPECT_THAT(op.inputs, testing::Contains(sum.id));  // the accumulated gradient
      EXPECT_THAT(op.inputs, testing::Not(testing::Contains(grad.id)));
    }
    EXPECT_EQ(updates, 1);
  }
}

// GPT-2 small (Hugging Face config "gpt2"): 12 heads of 768 / 12 = 64 features, vocabulary
// 50257; here a 64-token sequence at batch 1.
TEST(Transformer, AttentionSavesViewsOfTheFusedQkv) {
  const Trace trace = build_model(Request("gpt2").precision(Precision::mixed).layers(1).seq_len(64));
  const auto& qkv = tensor_named(trace, "transformer.h.0.attn.c_attn.out");
  EXPECT_EQ(qkv.role, TensorRole::activation);
  for (const char* part : {"q", "k", "v"}) {
    const auto& view = tensor_named(trace, std::string("transformer.h.0.attn.split_heads.") + part);
    EXPECT_EQ(trace.storage_of(view.id), qkv.id);
    EXPECT_EQ(view.shape, (std::vector<std::int64_t>{1, 12, 64, 64}));
  }
  // 16-bit activations, 1-byte masks, fp32 LayerNorm statistics and log-probabilities.
  EXPECT_EQ(qkv.dtype, traces::DType::f16);
  EXPECT_EQ(tensor_named(trace, "transformer.h.0.attn.attn_dropout.mask").dtype, traces::DType::boolean);
  EXPECT_EQ(tensor_named(trace, "transformer.h.0.ln_1.rstd").dtype, traces::DType::f32);
  EXPECT_EQ(tensor_named(trace, "transformer.h.0.ln_1.rstd").shape, (std::vector<std::int64_t>{1, 64}));
  const auto& log_probs = tensor_named(trace, "loss.log_softmax.out");
  EXPECT_EQ(log_probs.dtype, traces::DType::f32);
  EXPECT_EQ(log_probs.shape, (std::vector<std::int64_t>{64, 50257}));
  EXPECT_EQ(log_probs.batch_dim, 0u);
}

// Refused before building (defect list: `layers: 1000000` allocated until memory ran out).
TEST(Transformer, LayerCountsTheMachineCannotBuildAreRefusedFirst) {
  ModelRequest request;
  request.model = "gpt";
  request.layers = 1'000'000;
  try {
    (void)build_model(request);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("layers: 1000000 is above the zoo's limit of 8192 (about 48000000 ops"), std::string::npos) << e.what();
  }
  request.layers = std::int64_t{1} << 40;
  EXPECT_THROW((void)build_model(request), InputError);
}

// CUDA autocast (PyTorch's AMP doc, "CUDA Ops that can autocast to float16" / "to float32"):
// linear and matmul run in 16 bits, softmax and layer_norm in fp32, the rest in their inputs'
// dtype with type promotion; each weight a lower-precision op reads is copied once per forward.
TEST(Transformer, AutocastDtypesAndWeightCopies) {
  for (const auto& [precision, lower] : {std::pair{Precision::amp_fp16, traces::DType::f16},
                                         std::pair{Precision::amp_bf16, traces::DType::bf16}}) {
    SCOPED_TRACE(std::string(to_string(precision)));
    ModelRequest request = Request("bert-base").precision(precision).layers(1).seq_len(16);
    request.attention = Attention::eager;
    const Trace trace = build_model(request);
    const std::string self = "bert.encoder.layer.0.attention.self.";
    EXPECT_EQ(tensor_named(trace, self + "query.out").dtype, lower);
    EXPECT_EQ(tensor_named(trace, self + "softmax.out").dtype, traces::DType::f32);
    EXPECT_EQ(tensor_named(trace, self + "softmax.out").role, TensorRole::activation);
    // The scores plus the fp32 mask (the model's dtype) promote to fp32.
    EXPECT_EQ(tensor_named(trace, self + "scores.add_mask.out").dtype, traces::DType::f32);
    // The context GEMM saves a 16-bit cast of the fp32 dropout output.
    EXPECT_EQ(tensor_named(trace, self + "context.cast.out").dtype, lower);
    EXPECT_EQ(tensor_named(trace, self + "context.cast.out").role, TensorRole::activation);
    EXPECT_EQ(tensor_named(trace, self + "dropout.out").role, TensorRole::temporary);
    // A 16-bit dense output plus the fp32 residual is fp32, and so is the LayerNorm.
    EXPECT_EQ(tensor_named(trace, "bert.encoder.layer.0.attention.output.add.out").dtype, traces::DType::f32);
    EXPECT_EQ(tensor_named(trace, "bert.encoder.layer.0.output.LayerNorm.out").dtype, traces::DType::f32);
    EXPECT_EQ(tensor_named(trace, "masked_lm_loss.log_softmax.out").dtype, traces::DType::f32);
    EXPECT_EQ(tensor_named(trace, "bert.embeddings.word_embeddings.out").dtype, traces::DType::f32);

    // Exactly one copy per weight that a linear reads, the tied word embeddings included once.
    std::map<std::string, int> copies;
    std::int64_t linear_parameters = 0;
    for (const auto& tensor : trace.tensors()) {
      if (tensor.role == TensorRole::weight_copy) {
        ++copies[tensor.name];
        EXPECT_EQ(tensor.dtype, lower) << tensor.name;
        ASSERT_TRUE(tensor.producer);
        const auto& weight = trace.tensor(trace.op(*tensor.producer).inputs.at(0));
        EXPECT_EQ(weight.role, TensorRole::weight);
        EXPECT_EQ(tensor.name, weight.name + ".cast.out");
        EXPECT_EQ(tensor.shape, weight.shape);
      }
    }
    for (const auto& op : trace.ops()) {
      if (op.phase != Phase::forward || op.kind != OpKind::linear) continue;
      for (const auto input : op.inputs) {
        const auto& tensor = trace.tensor(input);
        if (tensor.role == TensorRole::weight_copy) linear_parameters += tensor.elements();
        EXPECT_NE(tensor.role, TensorRole::weight) << op.name;  // never the fp32 weight itself
      }
    }
    for (const auto& [name, count] : copies) EXPECT_EQ(count, 1) << name;
    EXPECT_EQ(copies.count("bert.embeddings.word_embeddings.weight.cast.out"), 1u);
    EXPECT_EQ(copies.count("bert.embeddings.position_embeddings.weight.cast.out"), 0u);
    EXPECT_EQ(copies.count("bert.encoder.layer.0.output.LayerNorm.weight.cast.out"), 0u);
    std::int64_t copied = 0;
    for (const auto& tensor : trace.tensors()) {
      if (tensor.role == TensorRole::weight_copy) copied += tensor.elements();
    }
    EXPECT_EQ(copied, linear_parameters - 0);  // each copy feeds linears only
    // The copy of a weight is read again by its linear's backward; its 16-bit gradient is a
    // temporary and the cast's backward writes the fp32 .grad.
    const auto& query_copy = tensor_named(trace, self + "query.weight.cast.out");
    bool read_by_backward = false;
    for (const auto consumer : query_copy.consumers) {
      read_by_backward |= trace.op(consumer).name == self + "query.backward";
    }
    EXPECT_TRUE(read_by_backward);
    EXPECT_EQ(tensor_named(trace, self + "query.weight.cast.out.grad").role, TensorRole::temporary);
    EXPECT_EQ(tensor_named(trace, self + "query.weight.cast.out.grad").dtype, lower);
    EXPECT_EQ(tensor_named(trace, self + "query.weight.grad").role, TensorRole::gradient);
    EXPECT_EQ(tensor_named(trace, self + "query.weight.grad").dtype, traces::DType::f32);
  }
  // ResNet under autocast: 16-bit convolutions, batch norm in its input's dtype with fp32
  // running statistics, the fp32 images cast once for conv1.
  const Trace resnet = build_model(Request("resnet18").precision(Precision::amp_fp16));
  EXPECT_EQ(tensor_named(resnet, "images").dtype, traces::DType::f32);
  EXPECT_EQ(tensor_named(resnet, "conv1.cast.out").dtype, traces::DType::f16);
  EXPECT_EQ(tensor_named(resnet, "conv1.cast.out").role, TensorRole::activation);
  EXPECT_EQ(tensor_named(resnet, "bn1.out").dtype, traces::DType::f16);
  EXPECT_EQ(tensor_named(resnet, "bn1.running_mean").dtype, traces::DType::f32);
  EXPECT_EQ(tensor_named(resnet, "bn1.weight").dtype, traces::DType::f32);
  // model.half(): batch-norm buffers are 16-bit too, its batch statistics fp32.
  const Trace half = build_model(Request("resnet18").precision(Precision::fp16));
  EXPECT_EQ(tensor_named(half, "bn1.running_mean").dtype, traces::DType::f16);
  EXPECT_EQ(tensor_named(half, "bn1.save_mean").dtype, traces::DType::f32);
  EXPECT_EQ(tensor_named(half, "loss.log_softmax.out").dtype, traces::DType::f16);
}

// Saved bytes per layer and sample of the three attention implementations, by hand from what
// each op saves (traces/zoo/README.md), as differences between 1- and 2-layer models.
TEST(Transformer, AttentionImplementationsSavedPerLayer) {
  constexpr std::int64_t s = 32;
  constexpr std::int64_t h = 64;
  constexpr std::int64_t a = 4;
  const auto per_layer = [&](const std::string& model, Precision precision, Attention attention) {
    const auto build = [&](std::int64_t layers) {
      ModelRequest request = Request(model).batch_size(2).precision(precision).layers(layers).hidden(h).heads(a).seq_len(s);
      request.vocab = 1000;
      request.attention = attention;
      return test_support::saved_for_backward(build_model(request));
    };
    const auto one = build(1);
    const auto two = build(2);
    return std::pair{two.per_sample - one.per_sample, two.fixed - one.fixed};
  };
  const std::int64_t layernorm_statistics = 2 * 2 * 4 * s;
  // fp32 BERT: the Megatron core and eager save the same bytes -- eager's copies of Q, Kᵀ and
  // V replace the views of the projections, its scale and mask add save nothing -- and flash
  // drops the S x S tensors (softmax output 4, mask 1, dropout output 4 bytes per element) for
  // an fp32 logsumexp per row and head.
  const std::int64_t fp32_megatron = 4 * (16 * s * h + 2 * a * s * s) + (2 * s * h + a * s * s) + layernorm_statistics;
  EXPECT_EQ(per_layer("bert-base", Precision::fp32, Attention::fused_softmax), std::pair(fp32_megatron, std::int64_t{0}));
  EXPECT_EQ(per_layer("bert-base", Precision::fp32, Attention::eager), std::pair(fp32_megatron, std::int64_t{0}));
  EXPECT_EQ(per_layer("bert-base", Precision::fp32, Attention::flash),
            std::pair(fp32_megatron - 9 * a * s * s + 4 * a * s, std::int64_t{0}));

  // amp-fp16 BERT, per sbh: three fp16 casts of the fp32 layer input (6), Q, K, V (6), the
  // context (2), the dense input of the MLP's cast (2), GELU input (8), fc2 input (8), two
  // dropout masks (1 + 1), two fp32 LayerNorm inputs (4 + 4): 42; per as²: Megatron keeps a
  // 16-bit softmax output (2), mask (1) and dropout output (2); eager saves an fp32 softmax
  // output (4), the mask (1) and the fp16 cast of the fp32 dropout output (2).
  const std::int64_t amp_common = 42 * s * h + layernorm_statistics;
  EXPECT_EQ(per_layer("bert-base", Precision::amp_fp16, Attention::fused_softmax).first, amp_common + 5 * a * s * s);
  EXPECT_EQ(per_layer("bert-base", Precision::amp_fp16, Attention::eager).first, amp_common + 7 * a * s * s);
  EXPECT_EQ(per_layer("bert-base", Precision::amp_fp16, Attention::flash).first, amp_common + 4 * a * s);

  // GPT-2 (pre-LN) under amp-fp16, per sbh: ln_1 input fp32 (4), the c_attn input cast (2),
  // Q, K, V (6), context (2), mask (1), ln_2 input fp32 (4), the c_fc input cast (2), GELU (8),
  // c_proj input (8), mask (1): 38. Eager's torch.where saves the bool causal mask, s² bytes
  // per layer whatever the batch; its softmax output is fp32 and the dropout runs on the
  // downcast copy (attn_weights.type(value.dtype)).
  const std::int64_t gpt_common = 38 * s * h + layernorm_statistics;
  EXPECT_EQ(per_layer("gpt", Precision::amp_fp16, Attention::fused_softmax), std::pair(gpt_common + 5 * a * s * s, std::int64_t{0}));
  EXPECT_EQ(per_layer("gpt", Precision::amp_fp16, Attention::eager), std::pair(gpt_common + 7 * a * s * s, s * s));
  EXPECT_EQ(per_layer("gpt", Precision::fp32, Attention::eager),
            std::pair(4 * (16 * s * h + 2 * a * s * s) + (2 * s * h + a * s * s) + layernorm_statistics, s * s));
}

// Flash: one attention op per layer, no S x S tensor anywhere in the trace.
TEST(Transformer, FlashAttentionHasNoQuadraticTensors) {
  ModelRequest request = Request("gpt2").precision(Precision::amp_bf16).layers(2).seq_len(128);
  request.attention = Attention::flash;
  const Trace trace = build_model(request);
  int attention_ops = 0;
  for (const auto& op : trace.ops()) {
    if (op.kind == OpKind::attention && op.phase == Phase::forward) ++attention_ops;
  }
  EXPECT_EQ(attention_ops, 2);
  for (const auto& tensor : trace.tensors()) {
    const auto& shape = tensor.shape;
    EXPECT_FALSE(shape.size() == 4 && shape[2] == 128 && shape[3] == 128) << tensor.name;
  }
  const auto& lse = tensor_named(trace, "transformer.h.0.attn.scaled_dot_product_attention.logsumexp");
  EXPECT_EQ(lse.dtype, traces::DType::f32);
  EXPECT_EQ(lse.shape, (std::vector<std::int64_t>{1, 12, 128}));
  EXPECT_EQ(lse.role, TensorRole::activation);
  EXPECT_EQ(tensor_named(trace, "transformer.h.0.attn.scaled_dot_product_attention.out").dtype, traces::DType::bf16);
}

// Flash FLOPs of the first layer's attention, forward and backward: 2 GEMMs forward and 5
// backward over the (query, key) pairs, 2 FLOPs a multiply-add, plus softmax (5, 4) and dropout
// (2, 2) per score. GPT-2's kernel is causal (is_causal: the S(S + 1)/2 pairs on or below the
// diagonal, FlashAttention-2 skipping the blocks above it); BERT's attends to all S x S.
// 12 heads of 64 at S = 128, one sample, by hand:
//   causal:  MACs 12·64·(128·129/2) = 6,340,608, scores 12·128·129/2 = 99,072;
//            forward 4·6,340,608 + 7·99,072 = 26,055,936; backward 10·6,340,608 + 6·99,072 = 64,000,512
//   full:    MACs 12·64·128·128 = 12,582,912, scores 196,608;
//            forward 4·12,582,912 + 7·196,608 = 51,707,904; backward 10·12,582,912 + 6·196,608 = 127,008,768
TEST(Transformer, FlashAttentionCountsOnlyTheCausalPairsOfACausalKernel) {
  const auto attention_flops = [](const std::string& model) {
    ModelRequest request = Request(model).layers(1).seq_len(128);
    request.attention = Attention::flash;
    const Trace trace = build_model(request);
    std::pair<std::int64_t, std::int64_t> flops{0, 0};
    for (const auto& op : trace.ops()) {
      if (op.kind != OpKind::attention) continue;
      (op.phase == Phase::forward ? flops.first : flops.second) += trace.flops(op.id);
    }
    return flops;
  };
  using Flops = std::pair<std::int64_t, std::int64_t>;
  EXPECT_EQ(attention_flops("gpt2"), Flops(26'055'936, 64'000'512));
  EXPECT_EQ(attention_flops("bert-base"), Flops(51'707'904, 127'008'768));
}

// ---- softmax_saves_input (PyTorch <= 1.10) ---------------------------------------------------

// Everything autograd saves, per storage (test_support::saved_for_backward), at the trace's
// batch size.
std::int64_t total_saved(const Trace& trace) {
  const auto saved = test_support::saved_for_backward(trace);
  return saved.per_sample * trace.batch_size() + saved.fixed;
}

// PyTorch up to 1.10 saved softmax's and log_softmax's input besides the result
// (derivatives.yaml's _softmax_backward_data(grad, result, dim, self); pytorch/pytorch issue
// 64000). A small BERT, by hand: each layer's attention softmax runs on the fp32 scores,
// a·s² elements of 4 bytes per sample, and each cross-entropy's log_softmax on its logits,
// [s, V] (MLM) and [1, 2] (NSP) per sample in fp32. Nothing else is saved in addition.
TEST(Transformer, SoftmaxSavesInputAddsTheScoresAndTheLogits) {
  constexpr std::int64_t layers = 2;
  constexpr std::int64_t h = 64;
  constexpr std::int64_t a = 4;
  constexpr std::int64_t s = 32;
  constexpr std::int64_t vocab = 1000;
  constexpr std::int64_t batch = 2;
  constexpr std::int64_t fp32 = 4;
  const auto build = [&](Attention attention, bool saves_input) {
    return build_model(Request("bert-base").batch_size(batch).layers(layers).hidden(h).heads(a).seq_len(s).vocab(vocab)
                           .attention(attention).softmax_saves_input(saves_input));
  };
  const std::int64_t logits = batch * (s * vocab + 2) * fp32;  // masked_lm_loss + next_sentence_loss
  for (const Attention attention : {Attention::fused_softmax, Attention::eager}) {
    SCOPED_TRACE(std::string(to_string(attention)));
    const Trace before = build(attention, false);
    const Trace after = build(attention, true);
    EXPECT_EQ(total_saved(after) - total_saved(before), a * s * s * fp32 * layers * batch + logits);
    EXPECT_EQ(test_support::saved_for_backward(after).fixed, test_support::saved_for_backward(before).fixed);
    EXPECT_EQ(after.metadata().at("softmax_saves_input"), "true");
    EXPECT_FALSE(before.metadata().contains("softmax_saves_input"));  // old traces' metadata unchanged
    // The softmax's backward reads its result and, now, its input: the scores.
    const std::string self = "bert.encoder.layer.1.attention.self.";
    const auto& input = tensor_named(after, attention == Attention::eager ? self + "scores.add_mask.out" : self + "scores.out");
    EXPECT_EQ(input.role, TensorRole::activation);
    EXPECT_EQ(tensor_named(before, input.name).role, TensorRole::temporary);
    bool read_by_softmax_backward = false;
    for (const auto consumer : input.consumers) read_by_softmax_backward |= after.op(consumer).name == self + "softmax.backward";
    EXPECT_TRUE(read_by_softmax_backward);
  }
  // Flash attention has no softmax op of its own: only the losses' inputs are added.
  const Trace flash_before = build(Attention::flash, false);
  const Trace flash_after = build(Attention::flash, true);
  EXPECT_EQ(total_saved(flash_after) - total_saved(flash_before), logits);
}

// Under autocast softmax and log_softmax run in fp32 on a cast copy: the copy is what is saved.
// GPT-2's eager scores are fp16 (torch.where keeps the GEMM's dtype), so softmax casts them:
// 4 bytes per a·s² element per layer; the fp16 LM-head logits [s, V] are cast for the loss,
// 4 bytes per element, while the fp16 logits themselves stay unsaved. A CNN's loss: the 1000
// fp32 logits per image.
TEST(Transformer, SoftmaxSavesTheFp32CopyUnderAutocast) {
  constexpr std::int64_t layers = 2;
  constexpr std::int64_t h = 64;
  constexpr std::int64_t a = 4;
  constexpr std::int64_t s = 32;
  constexpr std::int64_t vocab = 1000;
  constexpr std::int64_t batch = 3;
  const auto build = [&](bool saves_input) {
    return build_model(Request("gpt").batch_size(batch).precision(Precision::amp_fp16).layers(layers).hidden(h).heads(a)
                           .seq_len(s).vocab(vocab).attention(Attention::eager).softmax_saves_input(saves_input));
  };
  const Trace before = build(false);
  const Trace after = build(true);
  EXPECT_EQ(total_saved(after) - total_saved(before), (a * s * s * 4 * layers + s * vocab * 4) * batch);
  const auto& softmax_copy = tensor_named(after, "transformer.h.0.attn.softmax.cast.out");
  EXPECT_EQ(softmax_copy.dtype, traces::DType::f32);
  EXPECT_EQ(softmax_copy.role, TensorRole::activation);
  EXPECT_EQ(tensor_named(after, "transformer.h.0.attn.where.out").dtype, traces::DType::f16);
  EXPECT_EQ(tensor_named(after, "transformer.h.0.attn.where.out").role, TensorRole::temporary);
  const auto& loss_copy = tensor_named(after, "loss.log_softmax.cast.out");
  EXPECT_EQ(loss_copy.dtype, traces::DType::f32);
  EXPECT_EQ(loss_copy.role, TensorRole::activation);
  EXPECT_EQ(tensor_named(after, "lm_head.out").role, TensorRole::temporary);

  const Trace resnet_before = build_model(Request("resnet18").batch_size(batch));
  const Trace resnet_after = build_model(Request("resnet18").batch_size(batch).softmax_saves_input(true));
  EXPECT_EQ(total_saved(resnet_after) - total_saved(resnet_before), 1000 * 4 * batch);
  EXPECT_EQ(resnet_after.metadata().at("softmax_saves_input"), "true");
}

// ---- Gradient accumulation (autograd's InputBuffer) -------------------------------------------

// Where a tensor feeds two ops, autograd sums its gradients in InputBuffer::accumulate
// (torch/csrc/autograd/input_buffer.cpp): from PyTorch 2.0 in place into the first one, up to
// 1.13 into a new tensor. A GPT has 2 sums per layer (each block's input and its attention
// sum feed a LayerNorm and the residual add) and one for the tied wte.
TEST(Transformer, GradientSumsAreInPlaceFromPytorch2AndNewTensorsBefore) {
  constexpr std::int64_t layers = 3;
  const auto build = [&](bool in_place) {
    return build_model(Request("gpt").batch_size(2).layers(layers).hidden(64).heads(2).seq_len(16).vocab(100)
                           .accumulate_gradients_in_place(in_place));
  };
  const Trace in_place = build(true);
  const Trace new_tensors = build(false);
  // The same ops in the same order, with the same costs: only where the sums live differs.
  ASSERT_EQ(in_place.ops().size(), new_tensors.ops().size());
  for (std::size_t o = 0; o < in_place.ops().size(); ++o) {
    EXPECT_EQ(in_place.op(o).name, new_tensors.op(o).name);
    EXPECT_EQ(in_place.op(o).flops, new_tensors.op(o).flops);
    EXPECT_EQ(in_place.op(o).bytes_written, new_tensors.op(o).bytes_written);
  }
  const auto residual_sum_storages = [](const Trace& t) {
    std::set<traces::TensorIndex> storages;
    std::size_t sums = 0;
    for (traces::TensorIndex i = 0; i < t.tensors().size(); ++i) {
      const std::string& name = t.tensor(i).name;
      if (name.find(".grad.sum") == std::string::npos || name.rfind("transformer.wte.", 0) == 0) continue;
      ++sums;
      storages.insert(t.storage_of(i));
    }
    return std::pair{sums, storages.size()};
  };
  // In place, the residual stream's gradient is one storage from ln_f down to the embeddings.
  EXPECT_EQ(residual_sum_storages(in_place), std::pair(std::size_t{2 * layers}, std::size_t{1}));
  EXPECT_EQ(residual_sum_storages(new_tensors), std::pair(std::size_t{2 * layers}, std::size_t{2 * layers}));
  // The tied embedding's .grad: the LM head's gradient, with the embedding's added into it; or
  // the sum, the LM head's gradient being a temporary.
  EXPECT_EQ(tensor_named(in_place, "transformer.wte.weight.grad").role, TensorRole::gradient);
  EXPECT_TRUE(tensor_named(in_place, "transformer.wte.weight.grad.sum1").is_view());
  EXPECT_EQ(tensor_named(new_tensors, "transformer.wte.weight.grad").role, TensorRole::temporary);
  EXPECT_EQ(tensor_named(new_tensors, "transformer.wte.weight.grad.sum1").role, TensorRole::gradient);
  EXPECT_FALSE(tensor_named(new_tensors, "transformer.wte.weight.grad.sum1").is_view());
  EXPECT_FALSE(in_place.metadata().contains("accumulate_gradients_in_place"));  // default traces unchanged
  EXPECT_EQ(new_tensors.metadata().at("accumulate_gradients_in_place"), "false");
}

// What it costs, by hand: while an out-of-place sum runs, its two parts and the new sum are
// live, one tensor more than in place -- [b, s, h] fp32 for the residual stream, [V, h] fp32 for
// wte -- and at every other step the live bytes are the same.
TEST(Transformer, AnOutOfPlaceGradientSumHoldsOneMoreTensorWhileItRuns) {
  constexpr std::int64_t b = 2, s = 16, h = 64, vocab = 100, fp32 = 4;
  const auto build = [&](bool in_place) {
    return build_model(Request("gpt").batch_size(b).layers(2).hidden(h).heads(2).seq_len(s).vocab(vocab)
                           .accumulate_gradients_in_place(in_place));
  };
  const Trace in_place = build(true);
  const Trace new_tensors = build(false);
  const auto a = traces::compute_liveness(in_place, in_place.recorded_order());
  const auto n = traces::compute_liveness(new_tensors, new_tensors.recorded_order());
  int residual_sums = 0;
  for (std::size_t step = 0; step < in_place.ops().size(); ++step) {
    const std::string& name = in_place.op(step).name;
    std::int64_t expected = 0;
    if (name == "transformer.wte.weight.grad.accumulate1") {
      expected = vocab * h * fp32;
    } else if (name.find(".grad.accumulate") != std::string::npos) {
      expected = b * s * h * fp32;
      ++residual_sums;
    }
    EXPECT_EQ(traces::total(n.live_by_step[step]) - traces::total(a.live_by_step[step]), expected) << name;
  }
  EXPECT_EQ(residual_sums, 4);
}

// ---- BERT heads ------------------------------------------------------------------------------

// Hugging Face's BertForSequenceClassification (transformers v4.25.1) with the default two
// labels: BertModel's parameters (pooler included) plus the classifier's h·2 + 2.
TEST(Transformer, SequenceClassificationParameterCounts) {
  const Trace base = build_model(Request("bert-base").seq_len(16).head(BertHead::sequence_classification));
  EXPECT_EQ(parameters_named(base, "bert."), 109'482'240);
  EXPECT_EQ(parameters_named(base, "classifier."), 768 * 2 + 2);
  EXPECT_EQ(parameters_named(base, ""), 109'483'778);

  const Trace large = build_model(Request("bert-large").seq_len(16).head(BertHead::sequence_classification));
  EXPECT_EQ(parameters_named(large, "bert."), 335'141'888);
  EXPECT_EQ(parameters_named(large, ""), 335'143'938);
  EXPECT_EQ(335'141'888 + 1024 * 2 + 2, 335'143'938);
}

TEST(Transformer, SequenceClassificationHead) {
  constexpr std::int64_t batch = 3;
  constexpr std::int64_t s = 16;
  constexpr std::int64_t h = 64;
  for (const Attention attention : {Attention::fused_softmax, Attention::eager, Attention::flash}) {
    SCOPED_TRACE(std::string(to_string(attention)));
    const Trace trace = build_model(Request("bert-base").batch_size(batch).layers(2).hidden(h).heads(4).seq_len(s)
                                        .attention(attention).head(BertHead::sequence_classification));
    EXPECT_EQ(trace.metadata().at("head"), "sequence-classification");
    // No MLM or NSP head anywhere: no decoder, no prediction transform, no second loss.
    for (const auto& op : trace.ops()) {
      EXPECT_THAT(op.name, testing::Not(testing::AnyOf(testing::HasSubstr("decoder"), testing::HasSubstr("cls."),
                                                       testing::HasSubstr("masked_lm"), testing::HasSubstr("next_sentence"),
                                                       testing::HasSubstr("seq_relationship"))));
    }
    // The loss: log_softmax over [N, 2] logits from the classifier, nll_loss with [N] int64 labels.
    const traces::Op* log_softmax = nullptr;
    const traces::Op* nll = nullptr;
    for (const auto& op : trace.ops()) {
      if (op.name == "loss.log_softmax") log_softmax = &op;
      if (op.name == "loss.nll_loss") nll = &op;
    }
    ASSERT_NE(log_softmax, nullptr);
    ASSERT_NE(nll, nullptr);
    ASSERT_EQ(log_softmax->inputs.size(), 1u);
    const auto& logits = trace.tensor(log_softmax->inputs.front());
    EXPECT_EQ(logits.shape, (std::vector<std::int64_t>{batch, 2}));
    EXPECT_EQ(trace.storage_of(logits.id), tensor_named(trace, "classifier.out").id);
    const auto& labels = trace.tensor(nll->inputs.at(1));
    EXPECT_EQ(labels.shape, (std::vector<std::int64_t>{batch}));
    EXPECT_EQ(labels.dtype, traces::DType::i64);
    EXPECT_EQ(trace.tensor(trace.storage_of(labels.id)).role, TensorRole::input);
    // The classifier reads the dropout of the tanh-pooled first token.
    EXPECT_EQ(tensor_named(trace, "dropout.mask").shape, (std::vector<std::int64_t>{batch, h}));
    EXPECT_EQ(tensor_named(trace, "bert.pooler.activation.out").shape, (std::vector<std::int64_t>{batch, h}));
    // The embeddings stay, the word embeddings no longer tied to a decoder: one gradient.
    EXPECT_EQ(tensor_named(trace, "bert.embeddings.word_embeddings.weight").shape, (std::vector<std::int64_t>{30522, h}));
    EXPECT_EQ(tensor_named(trace, "bert.embeddings.token_type_embeddings.weight").role, TensorRole::weight);
    EXPECT_EQ(tensor_named(trace, "bert.embeddings.position_embeddings.weight").role, TensorRole::weight);
    EXPECT_THROW(tensor_named(trace, "bert.embeddings.word_embeddings.weight.grad.1"), std::runtime_error);
    EXPECT_EQ(tensor_named(trace, "bert.embeddings.word_embeddings.weight.grad").role, TensorRole::gradient);
  }
  // The default head is pre-training, as before the option existed.
  const Trace pretraining = build_model(Request("bert-base").layers(1).seq_len(s));
  EXPECT_EQ(pretraining.metadata().at("head"), "pretraining");
  EXPECT_EQ(tensor_named(pretraining, "cls.predictions.decoder.out").role, TensorRole::temporary);
}

// What each head saves beyond BertModel, per sample in fp32, by hand. Both save the last
// LayerNorm's output (the pooler's x[:, 0] is a view of it; 4·s·h) and the tanh output (4·h,
// read by the NSP linear or kept by TanhBackward0). Pre-training adds the MLM transform's GELU
// input, LayerNorm input and decoder input (4·s·h each), that LayerNorm's mean and rstd (8·s),
// the MLM log-probabilities (4·s·V) and labels (8·s), the NSP log-probabilities (8) and label
// (8); sequence classification the dropout mask (h), the classifier input (4·h), the
// log-probabilities (8) and the label (8). Batch-independent: one 4-byte total_weight per loss.
TEST(Transformer, SequenceClassificationSavesItsHeadOnly) {
  constexpr std::int64_t h = 64;
  constexpr std::int64_t s = 16;
  constexpr std::int64_t vocab = 1000;
  const auto saved = [&](BertHead head, std::int64_t layers) {
    return test_support::saved_for_backward(
        build_model(Request("bert-base").batch_size(2).layers(layers).hidden(h).heads(4).seq_len(s).vocab(vocab).head(head)));
  };
  const auto pretraining = saved(BertHead::pretraining, 1);
  const auto classification = saved(BertHead::sequence_classification, 1);
  const std::int64_t pretraining_head = 3 * 4 * s * h + 8 * s + 4 * s * vocab + 8 * s + 8 + 8;
  const std::int64_t classification_head = h + 4 * h + 8 + 8;
  EXPECT_EQ(pretraining.per_sample - classification.per_sample, pretraining_head - classification_head);
  EXPECT_EQ(pretraining.fixed - classification.fixed, 4);
  // A layer costs the same under both heads.
  EXPECT_EQ(saved(BertHead::sequence_classification, 2).per_sample - classification.per_sample,
            saved(BertHead::pretraining, 2).per_sample - pretraining.per_sample);
}


const traces::Op& op_named(const Trace& trace, const std::string& name) {
  for (const auto& op : trace.ops()) {
    if (op.name == name) return op;
  }
  throw std::runtime_error("no op " + name);
}

bool has_op(const Trace& trace, const std::string& name) {
  return std::any_of(trace.ops().begin(), trace.ops().end(), [&](const traces::Op& op) { return op.name == name; });
}

// ---- Question answering ----------------------------------------------------------------------

// Hugging Face's BertForQuestionAnswering (transformers v4.25.1): BertModel(add_pooling_layer=
// False) -- BertModel less the pooler's dense h·h + h -- plus qa_outputs Linear(h, 2): h·2 + 2.
TEST(Transformer, QuestionAnsweringParameterCounts) {
  const Trace base = build_model(Request("bert-base").seq_len(16).head(BertHead::question_answering));
  EXPECT_EQ(parameters_named(base, "bert."), 109'482'240 - (768 * 768 + 768));
  EXPECT_EQ(parameters_named(base, "qa_outputs."), 768 * 2 + 2);
  EXPECT_EQ(parameters_named(base, ""), 108'893'186);
  EXPECT_EQ(parameters_named(base, "bert.pooler."), 0);

  const Trace large = build_model(Request("bert-large").seq_len(16).head(BertHead::question_answering));
  EXPECT_EQ(parameters_named(large, "bert."), 334'092'288);
  EXPECT_EQ(335'141'888 - (1024 * 1024 + 1024), 334'092'288);
  EXPECT_EQ(parameters_named(large, ""), 334'094'338);
  EXPECT_EQ(334'092'288 + 1024 * 2 + 2, 334'094'338);
}

TEST(Transformer, QuestionAnsweringHead) {
  constexpr std::int64_t batch = 3;
  constexpr std::int64_t s = 16;
  constexpr std::int64_t h = 64;
  for (const Attention attention : {Attention::fused_softmax, Attention::eager, Attention::flash}) {
    SCOPED_TRACE(std::string(to_string(attention)));
    const Trace trace = build_model(Request("bert-base").batch_size(batch).layers(2).hidden(h).heads(4).seq_len(s)
                                        .attention(attention).head(BertHead::question_answering));
    // No pooler, no pre-training or classification head.
    for (const auto& op : trace.ops()) {
      EXPECT_THAT(op.name, testing::Not(testing::AnyOf(testing::HasSubstr("pooler"), testing::HasSubstr("cls."),
                                                       testing::HasSubstr("classifier"),
                                                       testing::HasSubstr("masked_lm"))));
      EXPECT_NE(op.name, "dropout");
    }
    // qa_outputs on every position, split into start and end logits [N, S] that are copied
    // (.contiguous()) and fed to one cross-entropy each.
    EXPECT_EQ(tensor_named(trace, "qa_outputs.weight").shape, (std::vector<std::int64_t>{2, h}));
    EXPECT_EQ(tensor_named(trace, "qa_outputs.out").shape, (std::vector<std::int64_t>{batch, s, 2}));
    for (const std::string which : {"start", "end"}) {
      const auto& logits = tensor_named(trace, which + "_logits.contiguous.out");
      EXPECT_EQ(logits.shape, (std::vector<std::int64_t>{batch, s}));
      EXPECT_FALSE(logits.is_view());
      EXPECT_EQ(logits.role, TensorRole::temporary);  // log_softmax saves its result only
      const auto& log_softmax = op_named(trace, which + "_loss.log_softmax");
      EXPECT_EQ(log_softmax.inputs, (std::vector<traces::TensorIndex>{logits.id}));
      // The positions are clamped (a kernel without autograd node) and saved by nll_loss.
      const auto& positions = tensor_named(trace, which + "_positions");
      EXPECT_EQ(positions.shape, (std::vector<std::int64_t>{batch}));
      EXPECT_EQ(positions.role, TensorRole::input);
      const auto& clamped = tensor_named(trace, which + "_positions.clamp.out");
      EXPECT_EQ(clamped.dtype, traces::DType::i64);
      EXPECT_EQ(clamped.role, TensorRole::activation);
      EXPECT_EQ(op_named(trace, which + "_loss.nll_loss").inputs.at(1), clamped.id);
      EXPECT_FALSE(has_op(trace, which + "_positions.clamp.backward"));
    }
    const auto& split = op_named(trace, "logits.split");
    EXPECT_EQ(split.kind, OpKind::view);
    EXPECT_EQ(split.outputs.size(), 2u);
    // SplitBackward0 builds the [N, S, 2] gradient of the logits from both halves.
    const auto& split_backward = op_named(trace, "logits.split.backward");
    ASSERT_EQ(split_backward.outputs.size(), 1u);
    EXPECT_EQ(trace.tensor(split_backward.outputs.front()).shape, (std::vector<std::int64_t>{batch, s, 2}));
    // total_loss = (start_loss + end_loss) / 2: the division is the last forward op.
    EXPECT_EQ(op_named(trace, "total_loss").phase, Phase::forward);
    const auto& div = op_named(trace, "total_loss.div");
    std::size_t last_forward = 0;
    for (const auto& op : trace.ops()) {
      if (op.phase == Phase::forward) last_forward = op.id;
    }
    EXPECT_EQ(div.id, last_forward);
    EXPECT_FALSE(trace.metadata().contains("mlm"));
  }
}

// What the question-answering head saves beyond BertModel's encoder, per sample in fp32, by
// hand: the last LayerNorm output read by qa_outputs (4·s·h), the start and end
// log-probabilities (4·s each) and clamped positions (8 each); batch-independent, one 4-byte
// total_weight per loss. Sequence classification saves the same LayerNorm output (through the
// pooler's x[:, 0]) plus tanh output (4·h), dropout mask (h), classifier input (4·h),
// log-probabilities (8) and label (8), and one total_weight.
TEST(Transformer, QuestionAnsweringSavesItsHeadOnly) {
  constexpr std::int64_t h = 64;
  constexpr std::int64_t s = 16;
  const auto saved = [&](BertHead head, std::int64_t layers) {
    return test_support::saved_for_backward(
        build_model(Request("bert-base").batch_size(2).layers(layers).hidden(h).heads(4).seq_len(s).vocab(1000).head(head)));
  };
  const auto qa = saved(BertHead::question_answering, 1);
  const auto classification = saved(BertHead::sequence_classification, 1);
  const std::int64_t qa_head = 4 * s * h + 2 * 4 * s + 2 * 8;
  const std::int64_t classification_head = 4 * s * h + 4 * h + h + 4 * h + 8 + 8;
  EXPECT_EQ(qa.per_sample - classification.per_sample, qa_head - classification_head);
  EXPECT_EQ(qa.fixed - classification.fixed, 4);
  EXPECT_EQ(saved(BertHead::question_answering, 2).per_sample - qa.per_sample,
            saved(BertHead::sequence_classification, 2).per_sample - classification.per_sample);
}

// ---- Masked-LM positions ---------------------------------------------------------------------

// NVIDIA DeepLearningExamples' dense sequence output: the final hidden states are flattened,
// the masked rows gathered (index_select), and the transform, decoder and loss run on those
// only. Here P = 5 of s = 32 positions per sample at batch 2.
TEST(Transformer, MaskedMlmGathersThePredictedPositions) {
  constexpr std::int64_t batch = 2;
  constexpr std::int64_t s = 32;
  constexpr std::int64_t h = 64;
  constexpr std::int64_t vocab = 1000;
  constexpr std::int64_t p = 5;
  const Trace trace = build_model(Request("bert-base").batch_size(batch).layers(1).hidden(h).heads(4).seq_len(s)
                                      .vocab(vocab).mlm(MlmPositions::masked).mlm_predictions(p));
  EXPECT_EQ(trace.metadata().at("mlm"), "masked");
  EXPECT_EQ(trace.metadata().at("mlm_predictions"), "5");
  // The labels are still one per position (-1 where nothing is masked).
  EXPECT_EQ(tensor_named(trace, "labels").shape, (std::vector<std::int64_t>{batch, s}));

  const auto& flat = tensor_named(trace, "cls.sequence_output.view.out");
  EXPECT_EQ(flat.shape, (std::vector<std::int64_t>{batch * s, h}));
  EXPECT_TRUE(flat.is_view());
  const auto& index = tensor_named(trace, "cls.nonzero.out");
  EXPECT_EQ(index.shape, (std::vector<std::int64_t>{batch * p}));
  EXPECT_EQ(index.dtype, traces::DType::i64);
  EXPECT_EQ(index.role, TensorRole::activation);  // IndexSelectBackward0 keeps the index
  EXPECT_EQ(tensor_named(trace, "cls.masked_lm_labels.ne.out").role, TensorRole::temporary);
  EXPECT_FALSE(has_op(trace, "cls.nonzero.backward"));

  const auto& gather = op_named(trace, "cls.index_select");
  EXPECT_EQ(gather.inputs, (std::vector<traces::TensorIndex>{flat.id, index.id}));
  EXPECT_EQ(trace.flops(gather.id), 0);
  const auto& selected = tensor_named(trace, "cls.index_select.out");
  EXPECT_EQ(selected.shape, (std::vector<std::int64_t>{batch * p, h}));
  EXPECT_EQ(selected.role, TensorRole::activation);  // the transform's dense saves it
  EXPECT_EQ(op_named(trace, "cls.predictions.transform.dense").inputs.front(), selected.id);
  // The backward scatters the rows' gradient into a zero tensor of the flattened hidden
  // states, reading the saved index and not the hidden states.
  const auto& scatter = op_named(trace, "cls.index_select.backward");
  EXPECT_THAT(scatter.inputs, testing::Contains(index.id));
  EXPECT_THAT(scatter.inputs, testing::Not(testing::Contains(flat.id)));
  ASSERT_EQ(scatter.outputs.size(), 1u);
  EXPECT_EQ(trace.tensor(scatter.outputs.front()).shape, (std::vector<std::int64_t>{batch * s, h}));
  EXPECT_EQ(trace.flops(scatter.id), batch * p * h);

  // The decoder and the loss see P rows per sample.
  EXPECT_EQ(tensor_named(trace, "cls.predictions.decoder.out").shape, (std::vector<std::int64_t>{batch * p, vocab}));
  EXPECT_EQ(tensor_named(trace, "masked_lm_loss.log_softmax.out").shape, (std::vector<std::int64_t>{batch * p, vocab}));
  const auto& mlm_labels = tensor_named(trace, "masked_lm_labels.index.out");
  EXPECT_EQ(mlm_labels.shape, (std::vector<std::int64_t>{batch * p}));
  EXPECT_EQ(mlm_labels.role, TensorRole::activation);
  EXPECT_EQ(op_named(trace, "masked_lm_loss.nll_loss").inputs.at(1), mlm_labels.id);
  EXPECT_EQ(op_named(trace, "masked_lm_labels.index").inputs.size(), 2u);  // labels and their mask

  // The default runs on every position, without any gather.
  const Trace all = build_model(Request("bert-base").batch_size(batch).layers(1).hidden(h).heads(4).seq_len(s).vocab(vocab));
  EXPECT_FALSE(has_op(all, "cls.index_select"));
  EXPECT_FALSE(has_op(all, "cls.nonzero"));
  EXPECT_EQ(tensor_named(all, "cls.predictions.decoder.out").shape, (std::vector<std::int64_t>{batch, s, vocab}));
  // Same parameters either way.
  EXPECT_EQ(parameters_named(trace, ""), parameters_named(all, ""));
}

// What the masked head saves, per sample in fp32, by hand (h 64, s 32, V 1000, P 5): the
// gather's index (8·P), the gathered rows the transform's dense reads (4·P·h), the GELU input,
// the LayerNorm input and the decoder input (4·P·h each), that LayerNorm's mean and rstd (8·P),
// the MLM log-probabilities (4·P·V) and gathered labels (8·P), the NSP log-probabilities (8)
// and label (8); the last encoder LayerNorm output (4·s·h) and the pooler's tanh output (4·h)
// as every BERT with a pooler. Compared with sequence classification (which saves, besides the
// two shared ones, the dropout mask h, classifier input 4·h, log-probabilities 8 and label 8)
// and with the head on all positions (3·4·s·h + 8·s + 4·s·V + 8·s + 16 beyond the shared two).
TEST(Transformer, MaskedMlmSavesByHand) {
  constexpr std::int64_t h = 64;
  constexpr std::int64_t s = 32;
  constexpr std::int64_t vocab = 1000;
  constexpr std::int64_t p = 5;
  const auto request = [&](std::int64_t layers) {
    return Request("bert-base").batch_size(2).layers(layers).hidden(h).heads(4).seq_len(s).vocab(vocab);
  };
  const auto masked = test_support::saved_for_backward(
      build_model(request(1).mlm(MlmPositions::masked).mlm_predictions(p)));
  const auto all = test_support::saved_for_backward(build_model(request(1)));
  const auto classification =
      test_support::saved_for_backward(build_model(request(1).head(BertHead::sequence_classification)));
  const std::int64_t masked_head = 8 * p + 4 * 4 * p * h + 8 * p + 4 * p * vocab + 8 * p + 8 + 8;
  const std::int64_t all_head = 3 * 4 * s * h + 8 * s + 4 * s * vocab + 8 * s + 8 + 8;
  const std::int64_t classification_head = h + 4 * h + 8 + 8;
  EXPECT_EQ(masked.per_sample - classification.per_sample, masked_head - classification_head);
  EXPECT_EQ(all.per_sample - masked.per_sample, all_head - masked_head);
  EXPECT_EQ(masked.per_sample - classification.per_sample, 25'256 - 336);  // the numbers, once
  EXPECT_EQ(masked.fixed, all.fixed);  // two losses' total_weight either way
  // bert-large at s = 512 with DLE's default 80 predictions (the README's figure): the formula
  // above at h 1024, V 30522.
  const auto large = [&](std::optional<MlmPositions> mlm) {
    ModelRequest r = Request("bert-large").layers(1);
    r.mlm = mlm;
    return test_support::saved_for_backward(build_model(r)).per_sample;
  };
  EXPECT_EQ(large(std::nullopt) - large(MlmPositions::masked), 57'729'024);
  // A layer costs the same.
  EXPECT_EQ(test_support::saved_for_backward(build_model(request(2).mlm(MlmPositions::masked).mlm_predictions(p))).per_sample -
                masked.per_sample,
            test_support::saved_for_backward(build_model(request(2))).per_sample - all.per_sample);
}

// The masked head's FLOPs (the transform, the decoder, the MLM loss and the gather, forward and
// backward) follow the predictions, not the sequence: the same at s = 32 and 64 for P = 5,
// twice as many for P = 10; the decoder's forward is P·(2·h·V + V) per sample.
TEST(Transformer, MaskedMlmFlopsFollowThePredictions) {
  constexpr std::int64_t batch = 2;
  constexpr std::int64_t h = 64;
  constexpr std::int64_t vocab = 1000;
  const auto head_flops = [&](std::int64_t s, std::optional<std::int64_t> p) {
    ModelRequest request = Request("bert-base").batch_size(batch).layers(1).hidden(h).heads(4).seq_len(s).vocab(vocab);
    if (p) {
      request.mlm = MlmPositions::masked;
      request.mlm_predictions = *p;
    }
    const Trace trace = build_model(request);
    std::int64_t flops = 0;
    for (const auto& op : trace.ops()) {
      if (op.name.starts_with("cls.predictions.") || op.name.starts_with("masked_lm_loss.") ||
          op.name.starts_with("cls.index_select")) {
        flops += trace.flops(op.id);
      }
    }
    return std::pair{flops, trace.flops(op_named(trace, "cls.predictions.decoder").id)};
  };
  const auto [p5, decoder5] = head_flops(32, 5);
  EXPECT_GT(p5, 0);
  EXPECT_EQ(head_flops(64, 5).first, p5);
  EXPECT_EQ(head_flops(32, 10).first, 2 * p5);
  EXPECT_EQ(decoder5, batch * 5 * (2 * h * vocab + vocab));
  // On every position the decoder is s / P times larger.
  EXPECT_EQ(head_flops(32, std::nullopt).second, batch * 32 * (2 * h * vocab + vocab));
}

}  // namespace
}  // namespace comptrain::zoo

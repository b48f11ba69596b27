// The zoo's catalogue and request validation, and the invariants every generated trace must
// keep: backward and optimizer ops, dense ids, storage roles, exact batch rescaling, byte
// accounting and mixed-precision sizes.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "comptrain/traces/liveness.hpp"
#include "comptrain/traces/summary.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "zoo_test_support.hpp"

// The helpers declared in zoo_test_support.hpp.
namespace comptrain::zoo::test_support {


ResidentBytes resident_bytes(const traces::Trace& trace) {
  ResidentBytes result;
  for (const auto& tensor : trace.tensors()) {
    if (tensor.is_view()) continue;  // count each storage once
    switch (tensor.role) {
      case traces::TensorRole::weight:
        result.parameters += tensor.elements();
        result.weight += tensor.bytes();
        break;
      case traces::TensorRole::gradient: result.gradient += tensor.bytes(); break;
      case traces::TensorRole::optimizer_state: result.optimizer_state += tensor.bytes(); break;
      default: break;
    }
  }
  return result;
}


// What autograd keeps for backward, counted the way a saved-tensor hook does
// (check_against_torch.py): each storage once, whether a saved tensor is it or a view of it,
// parameters excluded, everything else a backward op reads from the forward pass included --
// activations, the mini-batch (input role) and buffers (batch-norm running statistics).
SavedBytes saved_for_backward(const traces::Trace& trace) {
  std::vector<bool> read(trace.tensors().size(), false);
  for (const auto& op : trace.ops()) {
    if (op.phase != traces::Phase::backward) continue;
    for (const auto input : op.inputs) read[trace.storage_of(input)] = true;
  }
  SavedBytes result;
  for (std::size_t i = 0; i < trace.tensors().size(); ++i) {
    const traces::Tensor& tensor = trace.tensor(i);
    const bool forward_state = tensor.role == traces::TensorRole::activation ||
                               tensor.role == traces::TensorRole::input || tensor.role == traces::TensorRole::buffer;
    if (tensor.is_view() || !read[i] || !forward_state) continue;
    if (tensor.scales_with_batch()) {
      result.per_sample += tensor.bytes() / trace.batch_size();
    } else {
      result.fixed += tensor.bytes();
    }
  }
  return result;
}

}  // namespace comptrain::zoo::test_support

namespace comptrain::zoo {
namespace {

using test_support::Request;



using testing::HasSubstr;
using traces::Phase;
using traces::TensorRole;
using traces::Trace;

// A request for `model` small enough to build in milliseconds: transformers get two layers
// and short sequences; the CNNs are fixed.
ModelRequest small_request(const ModelInfo& info, std::int64_t batch) {
  ModelRequest request = Request(info.name).batch_size(batch);
  if (info.transformer) {
    request.layers = 2;
    request.seq_len = 64;
  }
  return request;
}

std::string error_of(const ModelRequest& request) {
  try {
    build_model(request);
  } catch (const InputError& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(Zoo, ListsTheModels) {
  std::vector<std::string> names;
  for (const ModelInfo& info : list_models()) {
    names.push_back(info.name);
    EXPECT_FALSE(info.description.empty()) << info.name;
    EXPECT_EQ(info.transformer, info.name.starts_with("bert") || info.name.starts_with("gpt") || info.name == "llama") << info.name;
  }
  EXPECT_THAT(names, testing::ElementsAre("alexnet", "vgg16", "resnet18", "resnet50", "resnet101", "resnet152", "bert-base",
                                          "bert-large", "gpt2", "gpt", "llama"));
}

TEST(Zoo, PrecisionOptimizerAndAttentionNames) {
  EXPECT_THAT(precision_names(), testing::ElementsAre("fp32", "amp-fp16", "amp-bf16", "fp16", "bf16", "mixed"));
  EXPECT_THAT(optimizer_names(), testing::ElementsAre("sgd", "momentum", "adam", "adamw", "adam8bit", "adamw8bit", "paged_adamw",
                                                     "paged_adamw8bit", "adafactor"));
  EXPECT_THAT(loss_kind_names(), testing::ElementsAre("cross_entropy", "fused_linear_cross_entropy", "chunked", "fused_cross_entropy"));
  EXPECT_THAT(optimizer_impl_names(), testing::ElementsAre("foreach", "fused", "for-loop"));
  EXPECT_THAT(attention_names(), testing::ElementsAre("fused-softmax", "eager", "flash", "sdpa-mem-efficient"));
  EXPECT_THAT(head_names(), testing::ElementsAre("pretraining", "sequence-classification", "question-answering"));
  EXPECT_THAT(mlm_positions_names(), testing::ElementsAre("all", "masked"));
  for (const std::string_view name : mlm_positions_names()) EXPECT_EQ(to_string(*parse_mlm_positions(name)), name);
  EXPECT_EQ(parse_mlm_positions("masked"), MlmPositions::masked);
  EXPECT_EQ(parse_mlm_positions("dense"), std::nullopt);
  EXPECT_EQ(parse_head("question-answering"), BertHead::question_answering);
  EXPECT_EQ(parse_head("qa"), std::nullopt);
  for (const std::string_view name : precision_names()) EXPECT_EQ(to_string(*parse_precision(name)), name);
  for (const std::string_view name : optimizer_names()) EXPECT_EQ(to_string(*parse_optimizer(name)), name);
  for (const std::string_view name : optimizer_impl_names()) EXPECT_EQ(to_string(*parse_optimizer_impl(name)), name);
  for (const std::string_view name : attention_names()) EXPECT_EQ(to_string(*parse_attention(name)), name);
  for (const std::string_view name : head_names()) EXPECT_EQ(to_string(*parse_head(name)), name);
  EXPECT_EQ(parse_head("sequence-classification"), BertHead::sequence_classification);
  EXPECT_EQ(parse_head("sequence_classification"), std::nullopt);
  EXPECT_EQ(parse_head("mlm"), std::nullopt);
  EXPECT_EQ(parse_precision("amp-fp16"), Precision::amp_fp16);
  EXPECT_EQ(parse_optimizer_impl("for-loop"), OptimizerImpl::for_loop);
  EXPECT_EQ(parse_attention("fused-softmax"), Attention::fused_softmax);
  EXPECT_EQ(parse_precision("tf32"), std::nullopt);  // the scenario reader's fp32 + allow_tf32
  EXPECT_EQ(parse_precision("amp_fp16"), std::nullopt);
  EXPECT_EQ(parse_optimizer("Adam"), std::nullopt);
  EXPECT_EQ(parse_optimizer_impl("for_loop"), std::nullopt);
  EXPECT_EQ(parse_attention("sdpa"), std::nullopt);
}

TEST(Zoo, RejectsBadRequests) {
  EXPECT_THAT(error_of(Request("resnet51")),
              AllOf(HasSubstr("model"), HasSubstr("resnet51"), HasSubstr("resnet50"), HasSubstr("gpt2")));
  EXPECT_THAT(error_of(Request("resnet18").batch_size(0)), HasSubstr("batch_size"));
  EXPECT_THAT(error_of(Request("gpt2").batch_size(-3)), HasSubstr("batch_size"));
  EXPECT_THAT(error_of(Request("resnet18").layers(2)), HasSubstr("layers"));
  EXPECT_THAT(error_of(Request("vgg16").seq_len(128)), HasSubstr("seq_len"));
  EXPECT_THAT(error_of(Request("alexnet").vocab(10)), HasSubstr("vocab"));
  EXPECT_THAT(error_of(Request("gpt").hidden(100).heads(3)), HasSubstr("heads"));
  EXPECT_THAT(error_of(Request("gpt").layers(0)), HasSubstr("layers"));
  EXPECT_THAT(error_of(Request("gpt").heads(0)), HasSubstr("heads"));
  EXPECT_THAT(error_of(Request("gpt").vocab(-1)), HasSubstr("vocab"));
  EXPECT_THAT(error_of(Request("gpt").hidden(0)), HasSubstr("hidden"));
  ModelRequest cnn_with_attention = Request("resnet50");
  cnn_with_attention.attention = Attention::flash;
  EXPECT_THAT(error_of(cnn_with_attention), AllOf(HasSubstr("attention"), HasSubstr("resnet50"), HasSubstr("CNN")));
  // The head is BERT's alone.
  for (const char* model : {"resnet50", "gpt2", "gpt"}) {
    EXPECT_THAT(error_of(Request(model).head(BertHead::sequence_classification)),
                AllOf(HasSubstr("head"), HasSubstr(model), HasSubstr("BERT")));
  }
  EXPECT_THAT(error_of(Request("gpt2").head(BertHead::pretraining)), HasSubstr("head"));
  EXPECT_THAT(error_of(Request("gpt2").head(BertHead::question_answering)), HasSubstr("head"));
  // The masked-LM options are BERT pre-training's alone.
  for (const char* model : {"resnet50", "gpt2", "gpt"}) {
    EXPECT_THAT(error_of(Request(model).mlm(MlmPositions::masked)),
                AllOf(HasSubstr("mlm"), HasSubstr(model), HasSubstr("BERT")));
    EXPECT_THAT(error_of(Request(model).mlm_predictions(20)),
                AllOf(HasSubstr("mlm_predictions"), HasSubstr(model), HasSubstr("BERT")));
  }
  for (const BertHead head : {BertHead::sequence_classification, BertHead::question_answering}) {
    EXPECT_THAT(error_of(Request("bert-base").seq_len(128).head(head).mlm(MlmPositions::masked)),
                AllOf(HasSubstr("mlm"), HasSubstr(to_string(head))));
    EXPECT_THAT(error_of(Request("bert-base").seq_len(128).head(head).mlm(MlmPositions::all)), HasSubstr("mlm"));
    EXPECT_THAT(error_of(Request("bert-base").seq_len(128).head(head).mlm_predictions(20)),
                HasSubstr("mlm_predictions"));
  }
  // A count without masked positions means nothing; masked needs one where DLE gives none.
  EXPECT_THAT(error_of(Request("bert-base").seq_len(128).mlm_predictions(20)), HasSubstr("mlm_predictions"));
  EXPECT_THAT(error_of(Request("bert-base").seq_len(128).mlm(MlmPositions::all).mlm_predictions(20)),
              HasSubstr("mlm_predictions"));
  EXPECT_THAT(error_of(Request("bert-base").layers(1).seq_len(64).mlm(MlmPositions::masked)),
              AllOf(HasSubstr("mlm_predictions"), HasSubstr("64")));
  EXPECT_THAT(error_of(Request("bert-base").layers(1).seq_len(64).mlm(MlmPositions::masked).mlm_predictions(0)),
              HasSubstr("mlm_predictions"));
  EXPECT_THAT(error_of(Request("bert-base").layers(1).seq_len(64).mlm(MlmPositions::masked).mlm_predictions(65)),
              HasSubstr("mlm_predictions"));
  EXPECT_NO_THROW(build_model(Request("bert-base").layers(1).seq_len(64).mlm(MlmPositions::masked).mlm_predictions(64)));
  EXPECT_NO_THROW(build_model(Request("bert-base").layers(1).seq_len(64).mlm(MlmPositions::all)));
  // BERT learns 512 positions, GPT-2 1024 (their Hugging Face configs).
  EXPECT_THAT(error_of(Request("bert-base").seq_len(513)), HasSubstr("seq_len"));
  EXPECT_THAT(error_of(Request("gpt2").seq_len(1025)), HasSubstr("seq_len"));
  EXPECT_THAT(error_of(Request("gpt2").seq_len(0)), HasSubstr("seq_len"));
  // The configurable decoder sizes its position table to the sequence.
  EXPECT_NO_THROW(build_model(Request("gpt").layers(1).hidden(64).heads(4).seq_len(4096).vocab(100)));
}

TEST(Zoo, MetadataAndDefaultOptimizers) {
  const Trace cnn = build_model(Request("resnet18").batch_size(2));
  EXPECT_EQ(cnn.name(), "resnet18");
  EXPECT_EQ(cnn.batch_size(), 2);
  EXPECT_EQ(cnn.metadata().at("source"), "zoo");
  EXPECT_EQ(cnn.metadata().at("model"), "resnet18");
  EXPECT_EQ(cnn.metadata().at("precision"), "fp32");
  EXPECT_EQ(cnn.metadata().at("optimizer"), "momentum");  // SGD with momentum for CNNs
  EXPECT_EQ(cnn.metadata().at("optimizer_impl"), "foreach");  // PyTorch 2.x's default on CUDA
  EXPECT_FALSE(cnn.metadata().contains("layers"));
  EXPECT_FALSE(cnn.metadata().contains("attention"));
  EXPECT_FALSE(cnn.metadata().contains("head"));
  EXPECT_FALSE(cnn.metadata().contains("softmax_saves_input"));

  const Trace gpt = build_model(Request("gpt").precision(Precision::mixed).layers(3).hidden(128).heads(4).seq_len(32).vocab(1000));
  EXPECT_EQ(gpt.metadata().at("precision"), "mixed");
  EXPECT_EQ(gpt.metadata().at("optimizer"), "adam");  // Adam for transformers
  EXPECT_EQ(gpt.metadata().at("attention"), "fused-softmax");
  EXPECT_EQ(gpt.metadata().at("layers"), "3");
  EXPECT_EQ(gpt.metadata().at("hidden"), "128");
  EXPECT_EQ(gpt.metadata().at("heads"), "4");
  EXPECT_EQ(gpt.metadata().at("seq_len"), "32");
  EXPECT_EQ(gpt.metadata().at("vocab"), "1000");
  EXPECT_FALSE(gpt.metadata().contains("head"));

  ModelRequest bert_request = Request("bert-base").optimizer(Optimizer::sgd).layers(1).seq_len(16);
  bert_request.optimizer_impl = OptimizerImpl::for_loop;
  bert_request.attention = Attention::eager;
  bert_request.precision = Precision::amp_bf16;
  const Trace bert = build_model(bert_request);
  EXPECT_EQ(bert.metadata().at("optimizer"), "sgd");
  EXPECT_EQ(bert.metadata().at("optimizer_impl"), "for-loop");
  EXPECT_EQ(bert.metadata().at("attention"), "eager");
  EXPECT_EQ(bert.metadata().at("precision"), "amp-bf16");
  EXPECT_EQ(bert.metadata().at("hidden"), "768");  // bert-base's default kept
  EXPECT_EQ(bert.metadata().at("head"), "pretraining");  // the default head, named
  // The masked-LM positions are recorded only when masked (the default traces keep their
  // metadata), with the count, DLE's default at seq_len 128 and 512.
  EXPECT_FALSE(bert.metadata().contains("mlm"));
  EXPECT_FALSE(bert.metadata().contains("mlm_predictions"));
  const Trace phase1 = build_model(Request("bert-base").layers(1).seq_len(128).mlm(MlmPositions::masked));
  EXPECT_EQ(phase1.metadata().at("mlm"), "masked");
  EXPECT_EQ(phase1.metadata().at("mlm_predictions"), "20");
  const Trace phase2 = build_model(Request("bert-base").layers(1).mlm(MlmPositions::masked));
  EXPECT_EQ(phase2.metadata().at("mlm_predictions"), "80");
  const Trace given = build_model(Request("bert-base").layers(1).seq_len(128).mlm(MlmPositions::masked).mlm_predictions(7));
  EXPECT_EQ(given.metadata().at("mlm_predictions"), "7");
  const Trace qa = build_model(Request("bert-base").layers(1).seq_len(16).head(BertHead::question_answering));
  EXPECT_EQ(qa.metadata().at("head"), "question-answering");
  EXPECT_FALSE(qa.metadata().contains("mlm"));
}

// The structural invariants, for every model in every precision, plus BERT's
// sequence-classification head and the PyTorch <= 1.10 softmax saves (on a CNN and a BERT).
class EveryModel : public testing::TestWithParam<Precision> {};

TEST_P(EveryModel, HasBackwardOptimizerAndConsistentAccounting) {
  std::vector<std::pair<ModelInfo, ModelRequest>> cases;
  for (const ModelInfo& info : list_models()) {
    cases.emplace_back(info, small_request(info, 3));
    if (info.name == "bert-base") {
      ModelRequest classification = small_request(info, 3);
      classification.head = BertHead::sequence_classification;
      cases.emplace_back(info, classification);
      ModelRequest old_softmax = classification;
      old_softmax.attention = Attention::eager;
      old_softmax.softmax_saves_input = true;
      cases.emplace_back(info, old_softmax);
      ModelRequest question_answering = small_request(info, 3);
      question_answering.head = BertHead::question_answering;
      cases.emplace_back(info, question_answering);
      ModelRequest masked = small_request(info, 3);
      masked.mlm = MlmPositions::masked;
      masked.mlm_predictions = 10;
      cases.emplace_back(info, masked);
    }
    if (info.name == "llama") {
      // A small grouped-query decoder with each attention implementation, and GPT-NeoX's blocks.
      DecoderArchitecture arch;
      arch.layers = 2;
      arch.hidden = 64;
      arch.heads = 4;
      arch.kv_heads = 2;
      arch.intermediate = 96;
      arch.vocab = 100;
      for (const Attention attention : {Attention::eager, Attention::sdpa_mem_efficient}) {
        ModelRequest gqa = small_request(info, 3);
        gqa.decoder = arch;
        gqa.attention = attention;
        cases.emplace_back(info, gqa);
      }
      DecoderArchitecture neox = arch;
      neox.family = "gpt_neox";
      neox.kv_heads = neox.heads;
      neox.norm = DecoderArchitecture::Norm::layer;
      neox.gated_mlp = false;
      neox.activation = DecoderArchitecture::Activation::gelu;
      neox.qkv_bias = neox.output_bias = neox.mlp_bias = true;
      neox.parallel_residual = true;
      neox.rotary_dims = 4;
      ModelRequest parallel = small_request(info, 3);
      parallel.decoder = neox;
      parallel.attention = Attention::eager;
      cases.emplace_back(info, parallel);
    }
    if (info.name == "resnet18") {
      ModelRequest old_softmax = small_request(info, 3);
      old_softmax.softmax_saves_input = true;
      cases.emplace_back(info, old_softmax);
    }
  }
  for (auto& [info, request] : cases) {
    SCOPED_TRACE(info.name + (request.head ? " " + std::string(to_string(*request.head)) : "") +
                 (request.mlm ? " mlm " + std::string(to_string(*request.mlm)) : "") +
                 (request.softmax_saves_input ? " softmax_saves_input" : ""));
    request.precision = GetParam();
    const Trace trace = build_model(request);
    const auto& ops = trace.ops();
    const auto& tensors = trace.tensors();

    // Dense ids in creation order.
    for (std::size_t i = 0; i < ops.size(); ++i) ASSERT_EQ(ops[i].id, i);
    for (std::size_t i = 0; i < tensors.size(); ++i) ASSERT_EQ(tensors[i].id, i);

    // Phases in recorded order: forward (with the loss), backward, optimizer.
    EXPECT_TRUE(std::is_sorted(ops.begin(), ops.end(),
                               [](const auto& a, const auto& b) { return a.phase < b.phase; }));

    // Every forward op has its backward op, but those computed from the mini-batch and buffers
    // alone (autocast's cast of the images, attention masks, the masked positions and clamped
    // labels), which autograd does not record.
    std::set<std::string> names;
    for (const auto& op : ops) EXPECT_TRUE(names.insert(op.name).second) << "duplicate op name " << op.name;
    std::set<traces::TensorIndex> constants;
    for (const auto& tensor : tensors) {
      if (tensor.role == TensorRole::input || tensor.role == TensorRole::buffer) constants.insert(tensor.id);
    }
    for (const auto& op : ops) {
      if (op.phase != Phase::forward) continue;
      const bool constant = std::all_of(op.inputs.begin(), op.inputs.end(), [&](auto input) {
        return constants.contains(input);
      });
      if (constant) constants.insert(op.outputs.begin(), op.outputs.end());
      EXPECT_NE(names.contains(op.name + ".backward"), constant) << op.name;
    }

    // One op named optimizer.<weight> per weight, reading its final gradient; every weight and
    // every optimizer state is read by the optimizer phase, and each weight has its states: an
    // fp32 master copy in mixed precision, plus Adam's two moments (transformers' default) or
    // SGD's momentum buffer (CNNs' default).
    const std::size_t states = (request.precision == Precision::mixed ? 1 : 0) + (info.transformer ? 2 : 1);
    std::map<std::string, int> named_updates;
    std::set<std::size_t> read_by_optimizer;
    for (const auto& op : ops) {
      if (op.phase != Phase::optimizer) continue;
      for (const auto input : op.inputs) read_by_optimizer.insert(input);
      if (op.name.starts_with("optimizer._foreach")) continue;
      EXPECT_EQ(op.kind, traces::OpKind::optimizer_update);
      EXPECT_TRUE(op.outputs.empty()) << op.name;  // the default foreach step writes its temporaries elsewhere
      ++named_updates[op.name];
    }
    std::map<std::string, std::size_t> state_count;
    for (const auto& tensor : tensors) {
      if (tensor.role == TensorRole::optimizer_state) {
        EXPECT_TRUE(read_by_optimizer.contains(tensor.id)) << tensor.name;
        ++state_count[tensor.name.substr(0, tensor.name.rfind('.'))];
      }
    }
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].role != TensorRole::weight) continue;
      EXPECT_EQ(named_updates["optimizer." + tensors[i].name], 1) << tensors[i].name;
      EXPECT_TRUE(read_by_optimizer.contains(i)) << tensors[i].name;
      EXPECT_EQ(state_count[tensors[i].name], states) << tensors[i].name;
    }

    // Storage roles, batch dimensions, byte accounting.
    for (const auto& tensor : tensors) {
      const auto& base = trace.tensor(trace.storage_of(tensor.id));
      EXPECT_EQ(tensor.role, base.role) << tensor.name;
      if (tensor.role == TensorRole::weight || tensor.role == TensorRole::gradient ||
          tensor.role == TensorRole::optimizer_state || tensor.role == TensorRole::buffer) {
        EXPECT_FALSE(tensor.scales_with_batch()) << tensor.name;
      }
      if (tensor.role == TensorRole::activation && tensor.dtype != traces::DType::boolean &&
          tensor.dtype != traces::DType::i64 && !tensor.scales_with_batch()) {
        // Only per-channel statistics and loss scalars are saved without a batch dimension:
        // fp32, but for the loss of a .half()/.bfloat16() model, in its dtype -- and a decoder's
        // rotary cos and sin [1, s, d], in the model's dtype.
        const bool pure16 = request.precision == Precision::fp16 || request.precision == Precision::bf16;
        const bool rotary = tensor.name.starts_with("model.rotary_emb.") || tensor.name.starts_with("gpt_neox.rotary_emb.");
        const bool model_16bit = pure16 || request.precision == Precision::mixed;
        if (rotary && model_16bit) {
          EXPECT_EQ(traces::element_size(tensor.dtype), 2) << tensor.name;
        } else if (!(pure16 && tensor.name.ends_with(".total_weight"))) {
          EXPECT_EQ(tensor.dtype, traces::DType::f32) << tensor.name;
        }
      }
    }
    for (const auto& op : ops) {
      if (op.kind == traces::OpKind::view) {
        EXPECT_EQ(op.bytes_read, traces::BatchLinear{}) << op.name;
        continue;
      }
      std::int64_t read = 0;
      for (const auto input : op.inputs) read += trace.tensor(input).bytes();
      EXPECT_EQ(trace.bytes_read(op.id), read) << op.name;
      EXPECT_GE(op.flops.fixed, 0);
      EXPECT_GE(op.flops.per_sample, 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, EveryModel,
                         testing::Values(Precision::fp32, Precision::amp_fp16, Precision::amp_bf16, Precision::fp16,
                                         Precision::bf16, Precision::mixed),
                         [](const auto& param_info) {
                           std::string name(to_string(param_info.param));
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(Zoo, RescalingIsExactAndInvertible) {
  for (const ModelInfo& info : list_models()) {
    SCOPED_TRACE(info.name);
    const Trace at3 = build_model(small_request(info, 3));
    const Trace at16 = build_model(small_request(info, 16));
    // b -> b' -> b gives the original trace, and b -> b' the trace built at b' directly.
    EXPECT_TRUE(at3.rescaled(16).rescaled(3) == at3);
    EXPECT_TRUE(at3.rescaled(16) == at16);
  }
}

// ZeRO (Rajbhandari et al. 2020, §3): mixed-precision Adam keeps 2 + 2 + 12 bytes per
// parameter -- fp16 weights and gradients, fp32 master weights, momentum and variance.
TEST(Zoo, MixedPrecisionBytesPerParameter) {
  struct Case {
    Precision precision;
    Optimizer optimizer;
    std::int64_t weight, gradient, state;  // bytes per parameter
  };
  const Case cases[] = {
      {Precision::mixed, Optimizer::adam, 2, 2, 12},   {Precision::mixed, Optimizer::momentum, 2, 2, 8},
      {Precision::mixed, Optimizer::sgd, 2, 2, 4},     {Precision::fp32, Optimizer::adam, 4, 4, 8},
      {Precision::fp32, Optimizer::momentum, 4, 4, 4}, {Precision::fp32, Optimizer::sgd, 4, 4, 0},
  };
  for (const std::string model : {"gpt2", "resnet18"}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(model + " " + std::string(to_string(c.precision)) + " " + std::string(to_string(c.optimizer)));
      ModelRequest request = Request(model).precision(c.precision).optimizer(c.optimizer);
      if (model == "gpt2") request.seq_len = 32;
      const Trace trace = build_model(request);
      const auto bytes = test_support::resident_bytes(trace);
      const std::int64_t parameters = bytes.parameters;
      EXPECT_EQ(bytes.weight, c.weight * parameters);
      EXPECT_EQ(bytes.gradient, c.gradient * parameters);
      EXPECT_EQ(bytes.optimizer_state, c.state * parameters);
    }
  }
}

TEST(Zoo, MixedPrecisionDtypes) {
  const Trace trace = build_model(Request("alexnet").precision(Precision::mixed));
  for (const auto& tensor : trace.tensors()) {
    SCOPED_TRACE(tensor.name);
    if (tensor.name.ends_with(".mask")) {
      EXPECT_EQ(tensor.dtype, traces::DType::boolean);
    }
    if (tensor.name.ends_with(".indices")) {
      EXPECT_EQ(tensor.dtype, traces::DType::i64);
    }
    if (tensor.name == "loss.log_softmax.out") {
      EXPECT_EQ(tensor.dtype, traces::DType::f32);
    }
    if (tensor.name == "images" || tensor.name == "features.0.out" || tensor.name == "features.0.weight" ||
        tensor.name == "features.0.weight.grad") {
      EXPECT_EQ(tensor.dtype, traces::DType::f16);
    }
    if (tensor.role == TensorRole::optimizer_state) {
      EXPECT_EQ(tensor.dtype, traces::DType::f32);
    }
  }
}

// Bytes per parameter of the weights, their autocast copies, the gradients and the optimizer
// state, read from the trace's summary (the storages per role). Hugging Face's "model memory
// anatomy" (docs/source/en/model_memory_anatomy.md, "Model Weights", "Optimizer States",
// "Gradients"): mixed-precision (AMP) training holds 6 bytes per parameter of weights (fp32 + an
// fp16 copy), 4 of gradients (fp32), AdamW 8 of states, SGD with momentum 4, plain SGD 0. The
// doc's 6 assumes a copy of every parameter; autocast copies only what its lower-precision ops
// read (linear and conv weights and biases, the tied embedding of the LM head), so the copies
// are counted here over those parameters, worked out by hand below. A .half()/.bfloat16()
// model keeps everything in 16 bits: 2 + 2 bytes plus 16-bit states (zeros_like(p)).
TEST(Zoo, BytesPerParameterByPrecision) {
  struct Case {
    Precision precision;
    std::int64_t weight, copy, gradient;  // bytes per parameter (copies: per copied parameter)
    std::int64_t state_size;              // bytes per element of an optimizer state
  };
  const Case cases[] = {
      {Precision::amp_fp16, 4, 2, 4, 4}, {Precision::amp_bf16, 4, 2, 4, 4}, {Precision::fp16, 2, 0, 2, 2},
      {Precision::bf16, 2, 0, 2, 2},     {Precision::fp32, 4, 0, 4, 4},
  };
  struct Model {
    std::string name;
    std::int64_t parameters;
    std::int64_t copied;  // parameters read by autocast's lower-precision ops
  };
  // GPT-2 small: everything but the position table (1024 x 768) and the 25 LayerNorms' weight
  // and bias (2 x 768 each). ResNet-18: everything but the batch norms' weight and bias, over
  // 64 + 4·64 + 5·128 + 5·256 + 5·512 = 4800 channels.
  const Model models[] = {
      {"gpt2", 124'439'808, 124'439'808 - 1024 * 768 - 25 * 2 * 768},
      {"resnet18", 11'689'512, 11'689'512 - 2 * 4800},
  };
  const std::pair<Optimizer, std::int64_t> optimizers[] = {
      {Optimizer::sgd, 0}, {Optimizer::momentum, 1}, {Optimizer::adam, 2}, {Optimizer::adamw, 2}};
  for (const Model& model : models) {
    for (const Case& c : cases) {
      for (const auto& [optimizer, states] : optimizers) {
        SCOPED_TRACE(model.name + " " + std::string(to_string(c.precision)) + " " + std::string(to_string(optimizer)));
        ModelRequest request = Request(model.name).precision(c.precision).optimizer(optimizer);
        if (model.name == "gpt2") request.seq_len = 32;
        const traces::TraceSummary summary = traces::summarize(build_model(request));
        const auto role = [&](TensorRole r) { return traces::at(summary.allocated_by_role, r); };
        EXPECT_EQ(summary.parameters, model.parameters);
        EXPECT_EQ(role(TensorRole::weight), c.weight * model.parameters);
        EXPECT_EQ(role(TensorRole::weight_copy), c.copy * model.copied);
        EXPECT_EQ(role(TensorRole::gradient), c.gradient * model.parameters);
        EXPECT_EQ(role(TensorRole::optimizer_state), states * c.state_size * model.parameters);
        if (c.copy != 0 && optimizer == Optimizer::adamw) {
          // The documented AMP + AdamW total, 18 bytes per parameter, less the copies autocast
          // does not make.
          EXPECT_EQ(role(TensorRole::weight) + role(TensorRole::weight_copy) + role(TensorRole::gradient) +
                        role(TensorRole::optimizer_state),
                    18 * model.parameters - 2 * (model.parameters - model.copied));
        }
      }
    }
  }
}

// Optimizer-step temporaries (torch/optim/adam.py, adamw.py at the commits cited in
// network_builder.cpp): foreach Adam keeps one sqrt(exp_avg_sq) per parameter, all alive from
// _foreach_sqrt to _foreach_addcdiv_; the for-loop makes sqrt(v) and denom for one parameter at
// a time; fused makes none; SGD makes none with its defaults.
TEST(Zoo, OptimizerTemporaries) {
  const auto build = [](Optimizer optimizer, OptimizerImpl impl, Precision precision) {
    ModelRequest request = Request("gpt").layers(2).hidden(64).heads(4).seq_len(16).vocab(100).precision(precision).optimizer(optimizer);
    request.optimizer_impl = impl;
    return build_model(request);
  };
  const auto temporaries = [](const Trace& trace) {
    std::vector<const traces::Tensor*> found;
    for (const auto& tensor : trace.tensors()) {
      if (tensor.producer && trace.op(*tensor.producer).phase == Phase::optimizer) found.push_back(&tensor);
    }
    return found;
  };
  for (const Optimizer optimizer : {Optimizer::adam, Optimizer::adamw}) {
    for (const Precision precision : {Precision::fp32, Precision::bf16, Precision::mixed}) {
      SCOPED_TRACE(std::string(to_string(optimizer)) + " " + std::string(to_string(precision)));
      // The dtype of the moments: fp32, or the .bfloat16() model's bf16.
      const std::int64_t state_bytes = precision == Precision::bf16 ? 2 : 4;

      const Trace foreach = build(optimizer, OptimizerImpl::foreach, precision);
      const std::int64_t parameters = traces::summarize(foreach).parameters;
      std::vector<traces::OpIndex> order(foreach.ops().size());
      std::iota(order.begin(), order.end(), traces::OpIndex{0});
      const traces::Liveness liveness = traces::compute_liveness(foreach, order);
      const auto found = temporaries(foreach);
      std::int64_t bytes = 0;
      std::size_t sqrt_op = 0;
      std::size_t addcdiv_op = 0;
      for (const auto& op : foreach.ops()) {
        if (op.name == "optimizer._foreach_sqrt") sqrt_op = op.id;
        if (op.name == "optimizer._foreach_addcdiv_") addcdiv_op = op.id;
      }
      ASSERT_GT(addcdiv_op, sqrt_op);
      for (const traces::Tensor* tensor : found) {
        EXPECT_TRUE(tensor->name.ends_with(".exp_avg_sq_sqrt")) << tensor->name;
        EXPECT_EQ(tensor->role, TensorRole::temporary);
        bytes += tensor->bytes();
        const auto& life = liveness.lifetimes.at(std::size_t(std::find_if(liveness.lifetimes.begin(), liveness.lifetimes.end(),
                                                                          [&](const auto& l) { return l.storage == tensor->id; }) -
                                                             liveness.lifetimes.begin()));
        EXPECT_EQ(life.first, sqrt_op);
        EXPECT_EQ(life.last, addcdiv_op);  // all alive until the step ends
      }
      EXPECT_EQ(bytes, state_bytes * parameters);

      const Trace loop = build(optimizer, OptimizerImpl::for_loop, precision);
      const auto loop_found = temporaries(loop);
      std::int64_t loop_bytes = 0;
      for (const traces::Tensor* tensor : loop_found) {
        loop_bytes += tensor->bytes();
        ASSERT_EQ(tensor->consumers.size(), 0u) << tensor->name;  // freed as its parameter's update ends
      }
      EXPECT_EQ(loop_bytes, 2 * state_bytes * parameters);  // sqrt(v) and denom, per parameter

      EXPECT_TRUE(temporaries(build(optimizer, OptimizerImpl::fused, precision)).empty());

      // The same update in every implementation: 13 FLOPs per element for Adam, 14 for AdamW.
      const std::int64_t per_element = optimizer == Optimizer::adam ? 13 : 14;
      for (const Trace* trace : {&foreach, &loop}) {
        EXPECT_EQ(traces::summarize(*trace).flops_by_phase[2], per_element * parameters);
      }
    }
  }
  for (const Optimizer optimizer : {Optimizer::sgd, Optimizer::momentum}) {
    for (const OptimizerImpl impl : {OptimizerImpl::foreach, OptimizerImpl::fused, OptimizerImpl::for_loop}) {
      EXPECT_TRUE(temporaries(build(optimizer, impl, Precision::fp32)).empty()) << to_string(optimizer) << " " << to_string(impl);
    }
  }
}

}  // namespace
}  // namespace comptrain::zoo

// The zoo's catalogue and request validation, and the invariants every generated trace must
// keep: backward and optimizer ops, dense ids, storage roles, exact batch rescaling, byte
// accounting and mixed-precision sizes.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

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
    EXPECT_EQ(info.transformer, info.name.starts_with("bert") || info.name.starts_with("gpt")) << info.name;
  }
  EXPECT_THAT(names, testing::ElementsAre("alexnet", "vgg16", "resnet18", "resnet50", "resnet152", "bert-base",
                                          "bert-large", "gpt2", "gpt"));
}

TEST(Zoo, PrecisionAndOptimizerNames) {
  for (const Precision precision : {Precision::fp32, Precision::mixed}) {
    EXPECT_EQ(parse_precision(to_string(precision)), precision);
  }
  for (const Optimizer optimizer : {Optimizer::sgd, Optimizer::momentum, Optimizer::adam}) {
    EXPECT_EQ(parse_optimizer(to_string(optimizer)), optimizer);
  }
  EXPECT_EQ(to_string(Precision::mixed), "mixed");
  EXPECT_EQ(to_string(Optimizer::adam), "adam");
  EXPECT_EQ(parse_precision("fp16"), std::nullopt);
  EXPECT_EQ(parse_optimizer("Adam"), std::nullopt);
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
  EXPECT_FALSE(cnn.metadata().contains("layers"));

  const Trace gpt = build_model(Request("gpt").precision(Precision::mixed).layers(3).hidden(128).heads(4).seq_len(32).vocab(1000));
  EXPECT_EQ(gpt.metadata().at("precision"), "mixed");
  EXPECT_EQ(gpt.metadata().at("optimizer"), "adam");  // Adam for transformers
  EXPECT_EQ(gpt.metadata().at("layers"), "3");
  EXPECT_EQ(gpt.metadata().at("hidden"), "128");
  EXPECT_EQ(gpt.metadata().at("heads"), "4");
  EXPECT_EQ(gpt.metadata().at("seq_len"), "32");
  EXPECT_EQ(gpt.metadata().at("vocab"), "1000");

  const Trace bert = build_model(Request("bert-base").optimizer(Optimizer::sgd).layers(1).seq_len(16));
  EXPECT_EQ(bert.metadata().at("optimizer"), "sgd");
  EXPECT_EQ(bert.metadata().at("hidden"), "768");  // bert-base's default kept
}

// The structural invariants, for every model in both precisions.
class EveryModel : public testing::TestWithParam<Precision> {};

TEST_P(EveryModel, HasBackwardOptimizerAndConsistentAccounting) {
  for (const ModelInfo& info : list_models()) {
    SCOPED_TRACE(info.name);
    ModelRequest request = small_request(info, 3);
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

    // Every forward op has its backward op.
    std::set<std::string> names;
    for (const auto& op : ops) EXPECT_TRUE(names.insert(op.name).second) << "duplicate op name " << op.name;
    for (const auto& op : ops) {
      if (op.phase == Phase::forward) {
        EXPECT_TRUE(names.contains(op.name + ".backward")) << op.name;
      }
    }

    // One optimizer update per weight, reading the weight, its gradient and its state: an fp32
    // master copy in mixed precision, plus Adam's two moments (transformers' default) or
    // SGD's momentum buffer (CNNs' default).
    const std::size_t states = (request.precision == Precision::mixed ? 1 : 0) + (info.transformer ? 2 : 1);
    std::map<std::size_t, int> updates;
    for (const auto& op : ops) {
      if (op.phase != Phase::optimizer) continue;
      EXPECT_EQ(op.kind, traces::OpKind::optimizer_update);
      EXPECT_TRUE(op.outputs.empty()) << op.name;
      ASSERT_EQ(op.inputs.size(), 2 + states) << op.name;
      ++updates[op.inputs[0]];
      EXPECT_EQ(trace.tensor(op.inputs[0]).role, TensorRole::weight);
      EXPECT_EQ(trace.tensor(op.inputs[1]).role, TensorRole::gradient);
      EXPECT_EQ(op.name, "optimizer." + trace.tensor(op.inputs[0]).name);
    }
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].role == TensorRole::weight) {
        EXPECT_EQ(updates[i], 1) << tensors[i].name;
      }
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
        // Only per-channel statistics and loss scalars are saved without a batch dimension.
        EXPECT_EQ(tensor.dtype, traces::DType::f32) << tensor.name;
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

INSTANTIATE_TEST_SUITE_P(Precisions, EveryModel, testing::Values(Precision::fp32, Precision::mixed),
                         [](const auto& param_info) { return std::string(to_string(param_info.param)); });

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

}  // namespace
}  // namespace comptrain::zoo

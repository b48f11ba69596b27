// The CNNs against PyTorch: parameter counts, FLOPs and the bytes autograd saves.

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "comptrain/zoo/zoo.hpp"
#include "zoo_test_support.hpp"

namespace comptrain::zoo {
namespace {

using test_support::Request;
using traces::OpKind;
using traces::Phase;
using traces::Trace;

// Ground truth per model.
//  - parameters, macs, saved_*, masks: traces/zoo/check_against_torch.py, run with PyTorch
//    1.13.0 and torchvision 0.14.1 on the CPU (parameters also match torchvision's
//    IMAGENET1K_V1 metadata, /work/shared/reference/memory-strategies.md §5);
//  - gflops: torchvision's IMAGENET1K_V1 "GFLOPS" metadata (a multiply-add counts once).
struct Reference {
  const char* model;
  std::int64_t parameters;
  std::int64_t macs;              // conv + linear multiply-accumulates per sample, forward
  double gflops;
  std::int64_t saved_per_sample;  // saved-tensor hook: batch 2 minus batch 1
  std::int64_t saved_fixed;       // batch 1 minus the per-sample part
  std::int64_t masks;             // dropout-mask elements per sample
};

constexpr Reference kReferences[] = {
    {"alexnet", 61'100'840, 714'188'480, 0.714, 3'745'192, 4, 13'312},
    {"vgg16", 138'357'544, 15'470'264'320, 15.47, 73'359'272, 4, 8'192},
    {"resnet18", 11'689'512, 1'814'073'344, 1.814, 22'183'848, 76'804, 0},
    {"resnet50", 25'557'032, 4'089'184'256, 4.09, 85'913'512, 424'964, 0},
    {"resnet101", 44'549'160, 7'801'405'440, 7.80, 126'857'128, 842'756, 0},
    {"resnet152", 60'192'808, 11'513'626'624, 11.51, 177'434'536, 1'211'396, 0},
};

// Each CNN is built once (ResNet-152 has ~2,500 ops), at batch 2 so that the per-sample
// figures below come from a real division.
const Trace& cnn(const std::string& model) {
  static std::map<std::string, Trace> cache;
  auto it = cache.find(model);
  if (it == cache.end()) it = cache.emplace(model, build_model(Request(model).batch_size(2))).first;
  return it->second;
}

class Cnn : public testing::TestWithParam<Reference> {};

TEST_P(Cnn, ParameterCount) {
  EXPECT_EQ(test_support::resident_bytes(cnn(GetParam().model)).parameters, GetParam().parameters);
}

TEST_P(Cnn, ConvAndLinearMacsMatchTorch) {
  const Trace& trace = cnn(GetParam().model);
  std::int64_t macs = 0;
  for (const auto& op : trace.ops()) {
    if (op.phase != Phase::forward || (op.kind != OpKind::conv && op.kind != OpKind::linear)) continue;
    // A multiply-add counts 2; a bias (the op's third input) adds one FLOP per output element.
    std::int64_t flops = op.flops.per_sample;
    if (op.inputs.size() == 3) flops -= trace.tensor(op.outputs[0]).elements() / trace.batch_size();
    EXPECT_EQ(op.flops.fixed, 0) << op.name;
    EXPECT_EQ(flops % 2, 0) << op.name;
    macs += flops / 2;
  }
  EXPECT_EQ(macs, GetParam().macs);
}

TEST_P(Cnn, ForwardFlopsWithinTwoPercentOfTorchvision) {
  const Trace& trace = cnn(GetParam().model);
  std::int64_t flops = 0;  // per sample, every forward op (pooling, BN, ReLU, loss included)
  for (const auto& op : trace.ops()) {
    if (op.phase == Phase::forward) flops += op.flops.per_sample;
  }
  const double gmacs = static_cast<double>(flops) / 2.0 / 1e9;
  EXPECT_NEAR(gmacs / GetParam().gflops, 1.0, 0.02) << gmacs << " GMACs per sample";
}

TEST_P(Cnn, SavedBytesMatchTorch) {
  const Trace& trace = cnn(GetParam().model);
  const auto saved = test_support::saved_for_backward(trace);
  // The CPU run saves float32 dropout masks; the zoo models CUDA's bool masks: 3 bytes less
  // per mask element (README, "What autograd saves").
  EXPECT_EQ(saved.per_sample, GetParam().saved_per_sample - 3 * GetParam().masks);
  // The batch-independent rest: batch-norm save_mean/save_invstd and running statistics
  // (4 x C fp32 per layer) and nll_loss's total_weight.
  EXPECT_EQ(saved.fixed, GetParam().saved_fixed);

  std::int64_t masks = 0;
  for (const auto& tensor : trace.tensors()) {
    if (tensor.dtype == traces::DType::boolean) masks += tensor.elements() / trace.batch_size();
  }
  EXPECT_EQ(masks, GetParam().masks);
}

INSTANTIATE_TEST_SUITE_P(Torchvision, Cnn, testing::ValuesIn(kReferences),
                         [](const auto& param_info) { return std::string(param_info.param.model); });

TEST(Cnn, ResNetBlocksWorkInPlace) {
  const Trace& trace = cnn("resnet18");
  std::map<std::string, const traces::Tensor*> by_name;
  for (const auto& tensor : trace.tensors()) by_name[tensor.name] = &tensor;
  const auto base_of = [&](const std::string& name) { return trace.tensor(trace.storage_of(by_name.at(name)->id)).name; };
  // relu(inplace=True) and `out += identity` write into the batch-norm output's storage.
  EXPECT_EQ(base_of("layer1.0.relu.out"), "layer1.0.bn1.out");
  EXPECT_EQ(base_of("layer1.0.add.out"), "layer1.0.bn2.out");
  EXPECT_EQ(base_of("layer1.0.relu_1.out"), "layer1.0.bn2.out");
  EXPECT_EQ(base_of("flatten.out"), "avgpool.out");
  EXPECT_EQ(by_name.at("layer1.0.bn2.out")->role, traces::TensorRole::activation);
  // The running statistics are buffers the forward pass updates in place.
  EXPECT_EQ(by_name.at("bn1.running_mean")->role, traces::TensorRole::buffer);
}

TEST(Cnn, FirstConvolutionComputesNoInputGradient) {
  const Trace& trace = cnn("resnet50");
  for (const auto& op : trace.ops()) {
    if (op.name != "conv1.backward") continue;
    ASSERT_EQ(op.outputs.size(), 1u);  // only conv1.weight.grad: the images need none
    EXPECT_EQ(trace.tensor(op.outputs[0]).name, "conv1.weight.grad");
    return;
  }
  FAIL() << "no conv1.backward";
}

TEST(Cnn, ConvolutionBackwardFlops) {
  // Backward runs two GEMMs as large as the forward one -- grad_input (a transposed
  // convolution) and grad_weight -- plus the bias gradient, one add per output element. The
  // first convolution's input, the images, needs no gradient.
  const Trace& trace = cnn("vgg16");
  std::map<std::string, const traces::Op*> by_name;
  for (const auto& op : trace.ops()) by_name[op.name] = &op;
  for (const auto& op : trace.ops()) {
    if (op.phase != Phase::forward || op.kind != OpKind::conv) continue;
    const std::int64_t bias = trace.tensor(op.outputs[0]).elements() / trace.batch_size();
    const std::int64_t gemm = op.flops.per_sample - bias;
    const std::int64_t gemms = op.name == "features.0" ? 1 : 2;
    EXPECT_EQ(by_name.at(op.name + ".backward")->flops.per_sample, gemms * gemm + bias) << op.name;
  }
}

}  // namespace
}  // namespace comptrain::zoo

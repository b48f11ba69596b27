// The CNNs, layer for layer as torchvision 0.14 defines them; op and parameter names are
// torchvision's module names, so that they match state_dict keys and torch.fx node names.

#include <array>
#include <string>

#include "models.hpp"

namespace comptrain::zoo::detail {
namespace {

constexpr std::int64_t kImageSize = 224;
constexpr std::int64_t kClasses = 1000;

struct Batch {
  Value images;
  Value labels;
};

Batch imagenet_batch(NetworkBuilder& nb) {
  return {nb.input("images", nb.compute_dtype(), {1, 3, kImageSize, kImageSize}),
          nb.input("labels", traces::DType::i64, {1})};
}

// torchvision.models.resnet.BasicBlock (expansion 1).
Value basic_block(NetworkBuilder& nb, const std::string& p, Value x, std::int64_t planes,
                  std::int64_t stride, bool downsample) {
  Value out = nb.conv2d(p + "conv1", x, planes, 3, stride, 1, false);
  out = nb.batchnorm2d(p + "bn1", out);
  out = nb.relu_(p + "relu", out);
  out = nb.conv2d(p + "conv2", out, planes, 3, 1, 1, false);
  out = nb.batchnorm2d(p + "bn2", out);
  Value identity = x;
  if (downsample) {
    identity = nb.conv2d(p + "downsample.0", x, planes, 1, stride, 0, false);
    identity = nb.batchnorm2d(p + "downsample.1", identity);
  }
  out = nb.add_(p + "add", out, identity);  // out += identity
  return nb.relu_(p + "relu", out);          // the block's one ReLU module, reused
}

// torchvision.models.resnet.Bottleneck (ResNet v1.5: the stride is on the 3x3 convolution).
Value bottleneck(NetworkBuilder& nb, const std::string& p, Value x, std::int64_t planes,
                 std::int64_t stride, bool downsample) {
  constexpr std::int64_t kExpansion = 4;
  Value out = nb.conv2d(p + "conv1", x, planes, 1, 1, 0, false);
  out = nb.batchnorm2d(p + "bn1", out);
  out = nb.relu_(p + "relu", out);
  out = nb.conv2d(p + "conv2", out, planes, 3, stride, 1, false);
  out = nb.batchnorm2d(p + "bn2", out);
  out = nb.relu_(p + "relu", out);
  out = nb.conv2d(p + "conv3", out, planes * kExpansion, 1, 1, 0, false);
  out = nb.batchnorm2d(p + "bn3", out);
  Value identity = x;
  if (downsample) {
    identity = nb.conv2d(p + "downsample.0", x, planes * kExpansion, 1, stride, 0, false);
    identity = nb.batchnorm2d(p + "downsample.1", identity);
  }
  out = nb.add_(p + "add", out, identity);
  return nb.relu_(p + "relu", out);
}

enum class Block { basic, bottleneck };

Value resnet(NetworkBuilder& nb, Block block, const std::array<int, 4>& blocks_per_stage) {
  const auto [images, labels] = imagenet_batch(nb);
  Value x = nb.conv2d("conv1", images, 64, 7, 2, 3, false);
  x = nb.batchnorm2d("bn1", x);
  x = nb.relu_("relu", x);
  x = nb.maxpool2d("maxpool", x, 3, 2, 1);
  const std::int64_t expansion = block == Block::basic ? 1 : 4;
  std::int64_t channels = 64;
  for (std::size_t stage = 0; stage < blocks_per_stage.size(); ++stage) {
    const std::int64_t planes = std::int64_t{64} << stage;
    for (int index = 0; index < blocks_per_stage[stage]; ++index) {
      const std::string p = "layer" + std::to_string(stage + 1) + "." + std::to_string(index) + ".";
      const std::int64_t stride = index == 0 && stage > 0 ? 2 : 1;
      const bool downsample = stride != 1 || channels != planes * expansion;
      x = block == Block::basic ? basic_block(nb, p, x, planes, stride, downsample)
                                : bottleneck(nb, p, x, planes, stride, downsample);
      channels = planes * expansion;
    }
  }
  x = nb.adaptive_avgpool2d("avgpool", x, 1, 1);
  x = nb.flatten("flatten", x);  // torch.flatten(x, 1)
  x = nb.linear("fc", x, kClasses, true);
  return nb.cross_entropy("loss", x, labels);
}

}  // namespace

Value alexnet(NetworkBuilder& nb) {
  const auto [images, labels] = imagenet_batch(nb);
  Value x = nb.conv2d("features.0", images, 64, 11, 4, 2, true);
  x = nb.relu_("features.1", x);
  x = nb.maxpool2d("features.2", x, 3, 2, 0);
  x = nb.conv2d("features.3", x, 192, 5, 1, 2, true);
  x = nb.relu_("features.4", x);
  x = nb.maxpool2d("features.5", x, 3, 2, 0);
  x = nb.conv2d("features.6", x, 384, 3, 1, 1, true);
  x = nb.relu_("features.7", x);
  x = nb.conv2d("features.8", x, 256, 3, 1, 1, true);
  x = nb.relu_("features.9", x);
  x = nb.conv2d("features.10", x, 256, 3, 1, 1, true);
  x = nb.relu_("features.11", x);
  x = nb.maxpool2d("features.12", x, 3, 2, 0);
  x = nb.adaptive_avgpool2d("avgpool", x, 6, 6);
  x = nb.flatten("flatten", x);
  x = nb.dropout("classifier.0", x);
  x = nb.linear("classifier.1", x, 4096, true);
  x = nb.relu_("classifier.2", x);
  x = nb.dropout("classifier.3", x);
  x = nb.linear("classifier.4", x, 4096, true);
  x = nb.relu_("classifier.5", x);
  x = nb.linear("classifier.6", x, kClasses, true);
  return nb.cross_entropy("loss", x, labels);
}

Value vgg16(NetworkBuilder& nb) {
  // Configuration "D": channels of the 3x3 convolutions, 0 for a 2x2 max-pool.
  constexpr std::array<std::int64_t, 18> kConfig = {64, 64, 0, 128, 128, 0, 256, 256, 256, 0,
                                                    512, 512, 512, 0, 512, 512, 512, 0};
  const auto [images, labels] = imagenet_batch(nb);
  Value x = images;
  int index = 0;  // position in the `features` nn.Sequential
  for (const std::int64_t channels : kConfig) {
    if (channels == 0) {
      x = nb.maxpool2d("features." + std::to_string(index++), x, 2, 2, 0);
    } else {
      x = nb.conv2d("features." + std::to_string(index++), x, channels, 3, 1, 1, true);
      x = nb.relu_("features." + std::to_string(index++), x);
    }
  }
  x = nb.adaptive_avgpool2d("avgpool", x, 7, 7);
  x = nb.flatten("flatten", x);
  x = nb.linear("classifier.0", x, 4096, true);
  x = nb.relu_("classifier.1", x);
  x = nb.dropout("classifier.2", x);
  x = nb.linear("classifier.3", x, 4096, true);
  x = nb.relu_("classifier.4", x);
  x = nb.dropout("classifier.5", x);
  x = nb.linear("classifier.6", x, kClasses, true);
  return nb.cross_entropy("loss", x, labels);
}

Value resnet18(NetworkBuilder& nb) { return resnet(nb, Block::basic, {2, 2, 2, 2}); }
Value resnet50(NetworkBuilder& nb) { return resnet(nb, Block::bottleneck, {3, 4, 6, 3}); }
Value resnet101(NetworkBuilder& nb) { return resnet(nb, Block::bottleneck, {3, 4, 23, 3}); }
Value resnet152(NetworkBuilder& nb) { return resnet(nb, Block::bottleneck, {3, 8, 36, 3}); }

}  // namespace comptrain::zoo::detail

// Writing a platform (models/platform_yaml.hpp): every shipped platform, written and read back,
// has every field the reader reads, equal; and a written file keeps the original's comments.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "comptrain/models/platform.hpp"
#include "comptrain/models/platform_yaml.hpp"
#include "common/expect_same_platform.hpp"

namespace comptrain::models {
namespace {

using ::testing::HasSubstr;
using test_support::expect_same_platform;

std::string text_of(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

const std::filesystem::path kShippedDir = std::filesystem::path(COMPTRAIN_TEST_DATA_DIR) / "../../scenarios/platforms";

TEST(PlatformYamlWriter, EveryShippedPlatformReadsBackEqual) {
  for (const std::string& name : builtin_platform_names()) {
    SCOPED_TRACE(name);
    const Platform shipped = builtin_platform(name);
    const std::string yaml = platform_to_yaml(shipped, {});
    expect_same_platform(shipped, parse_platform(yaml, name + " (written)"));
  }
}

// Copying the original file's text where a value is unchanged must not lose a value either.
TEST(PlatformYamlWriter, EveryShippedFileReadsBackEqualWithItsOwnText) {
  for (const std::string& name : builtin_platform_names()) {
    SCOPED_TRACE(name);
    const std::filesystem::path file = kShippedDir / (name + ".yaml");
    const Platform shipped = load_platform_file(file);
    const std::string text = text_of(file);  // original_text is a view of it
    PlatformYamlComments comments;
    comments.original_text = text;
    comments.otherwise = "copied";
    const std::string yaml = platform_to_yaml(shipped, comments);
    expect_same_platform(shipped, parse_platform(yaml, name + " (written)"));
  }
}

TEST(PlatformYamlWriter, ClustersKeepTheirNetworkNicCollectivesAndStorage) {
  const Platform superpod = builtin_platform("dgx-a100-superpod");
  ASSERT_TRUE(superpod.network && superpod.nic && superpod.storage);
  const std::string yaml = platform_to_yaml(superpod, {});
  for (const char* section : {"\nnic:", "\nnetwork:", "\ncollectives:", "\nstorage:", "torch_save_bandwidth:"}) {
    EXPECT_THAT(yaml, HasSubstr(section));
  }
  EXPECT_EQ(parse_platform(yaml, "written").max_nodes(), superpod.max_nodes());
}

// A power cap (gpu.power.limit) is part of the platform: written, it caps the read-back GPU too.
TEST(PlatformYamlWriter, APowerLimitIsWritten) {
  const Platform capped = with_power_limit(builtin_platform("a100-40gb"), 250, "test");
  const Platform back = parse_platform(platform_to_yaml(capped, {}), "written");
  EXPECT_DOUBLE_EQ(back.gpu.power_limit, 250);
  EXPECT_DOUBLE_EQ(back.gpu.clock_fraction, capped.gpu.clock_fraction);
}

TEST(PlatformYamlWriter, CommentsComeFromTheCallerThenTheOriginalThenOtherwise) {
  const std::string original =
      "name: p\n"
      "gpu:\n"
      "  name: G\n"
      "  memory: 40 GiB          # datasheet\n"
      "  memory_bandwidth: 1555 GB/s\n"
      "  peak: {fp32: 19.5 TFLOP/s, tf32: 156 TFLOP/s, fp16: 312 TFLOP/s, bf16: 312 TFLOP/s}  # about all four\n"
      "  launch_overhead: 5 us   # measured\n"
      "host: {name: H, cores: 8, flops: 1 TFLOP/s, memory: 64 GiB, memory_bandwidth: 100 GB/s}\n"
      "host_link: {name: PCIe, bandwidth: 25 GB/s, latency: 1 us}\n";
  const Platform platform = parse_platform(original, "p.yaml");
  PlatformYamlComments comments;
  comments.header = "a header";
  comments.original_text = original;
  comments.otherwise = "copied from p";
  comments.comment_for = [](const std::vector<std::string>& path) -> std::optional<std::string> {
    if (path == std::vector<std::string>{"gpu", "launch_overhead"}) return "mine";
    return std::nullopt;
  };
  const std::string yaml = platform_to_yaml(platform, comments);
  EXPECT_THAT(yaml, HasSubstr("# a header"));
  EXPECT_THAT(yaml, HasSubstr("memory: 40 GiB  # datasheet"));
  EXPECT_THAT(yaml, HasSubstr("fp32: 19.5 TFLOP/s  # copied from p"));
  EXPECT_THAT(yaml, HasSubstr("launch_overhead: 5 us  # mine"));
  expect_same_platform(platform, parse_platform(yaml, "written"));
}

}  // namespace
}  // namespace comptrain::models

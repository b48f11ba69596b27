// "A shipped name or a .yaml file": one rule for platforms and profiles (shipped_or_file.hpp).

#include "comptrain/models/shipped_or_file.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/input_error_of.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::models {
namespace {

using ::testing::HasSubstr;
using test_support::input_error_of;

TEST(ShippedOrFile, NamesFilesAndTheirBaseDirectory) {
  const std::vector<std::string> shipped{"alpha", "beta"};
  const ShippedOrFile name = shipped_or_file("beta", "/base", "thing", shipped);
  EXPECT_FALSE(name.file);
  EXPECT_EQ(name.name, "beta");
  EXPECT_EQ(shipped_or_file("sub/x.yaml", "/base", "thing", shipped).file, std::filesystem::path("/base/sub/x.yaml"));
  EXPECT_EQ(shipped_or_file("x.yml", "/base", "thing", shipped).file, std::filesystem::path("/base/x.yml"));
  EXPECT_EQ(shipped_or_file("/abs/x.yaml", "/base", "thing", shipped).file, std::filesystem::path("/abs/x.yaml"));
  // A file named like a shipped entry is still a file: the extension decides, not the stem.
  EXPECT_EQ(shipped_or_file("alpha.yaml", "/base", "thing", shipped).file, std::filesystem::path("/base/alpha.yaml"));
}

TEST(ShippedOrFile, EmptyAndUnknownAreErrorsListingTheShippedNames) {
  const std::vector<std::string> shipped{"alpha", "beta"};
  EXPECT_EQ(input_error_of([&] { shipped_or_file("", ".", "thing", shipped); }),
            "empty thing; expected a shipped thing name or a .yaml file; shipped: alpha, beta");
  EXPECT_EQ(input_error_of([&] { shipped_or_file("gamma", ".", "thing", shipped, "auto"); }),
            "unknown thing 'gamma'; expected auto, a shipped thing name or a .yaml file; shipped: alpha, beta");
  // Not a .yaml: a name, even with another extension, so the message lists the names.
  EXPECT_THAT(input_error_of([&] { shipped_or_file("alpha.json", ".", "thing", shipped); }), HasSubstr("unknown thing 'alpha.json'"));
}

TEST(ResolvePlatform, ShippedNameFileAndErrors) {
  EXPECT_EQ(resolve_platform("a100-40gb", ".").source, "embedded:a100-40gb");
  // `--platform ""` is a mistake, not "keep the scenario's platform".
  EXPECT_THAT(input_error_of([] { resolve_platform("", "."); }),
              HasSubstr("empty platform; expected a shipped platform name or a .yaml file; shipped: a100-40gb"));
  EXPECT_THAT(input_error_of([] { resolve_platform("a100-41gb", "."); }), HasSubstr("unknown platform 'a100-41gb'"));
  EXPECT_THAT(input_error_of([] { resolve_platform("missing.yaml", "/nonexistent"); }), HasSubstr("/nonexistent/missing.yaml"));

  // A file relative to the base directory: the shipped a100-40gb.yaml, read as a file.
  const std::filesystem::path platforms = std::filesystem::path(COMPTRAIN_TEST_DATA_DIR) / "../../scenarios/platforms";
  const Platform p = resolve_platform("a100-40gb.yaml", platforms);
  EXPECT_EQ(p.source, (platforms / "a100-40gb.yaml").string());
  EXPECT_EQ(p.gpu.name, builtin_platform("a100-40gb").gpu.name);
}

}  // namespace
}  // namespace comptrain::models

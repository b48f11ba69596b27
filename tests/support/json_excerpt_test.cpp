#include "comptrain/support/json_excerpt.hpp"

#include <gtest/gtest.h>

#include <string>

namespace comptrain {
namespace {

TEST(JsonExcerpt, ScalarsAsJsonWritesThemCutToAFewDozenCharacters) {
  EXPECT_EQ(json_excerpt(nlohmann::json(3)), "3");
  EXPECT_EQ(json_excerpt(nlohmann::json("gelu")), "\"gelu\"");
  const std::string cut = json_excerpt(nlohmann::json(std::string(1000, 'x')));
  EXPECT_EQ(cut.size(), kJsonExcerptChars);
  EXPECT_EQ(cut.substr(cut.size() - 3), "...");
}

TEST(JsonExcerpt, ContainersByKindAndSizeEvenWhenNestedTooDeepToDump) {
  EXPECT_EQ(json_excerpt(nlohmann::json::array({1, 2, 3})), "an array of 3 items");
  EXPECT_EQ(json_excerpt(nlohmann::json::object({{"a", 1}})), "an object of 1 key");
  // 100,000 levels: what made dump() overflow the stack in three readers (shared/defects-2/02).
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const nlohmann::json value = nlohmann::json::parse(deep);
  EXPECT_EQ(json_excerpt(value), "an array of 1 item");
}

}  // namespace
}  // namespace comptrain

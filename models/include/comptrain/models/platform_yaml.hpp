#pragma once
// Platform YAML beyond parse_platform: reading a platform from a node that is part of a larger
// document (a scenario's inline platform), and writing a platform back as a file that
// parse_platform reads (calibrate's fitted and measured platforms).

#include <yaml-cpp/yaml.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/models/platform.hpp"

namespace comptrain::models {

// As parse_platform, on an already-loaded mapping; `source` names the document in errors.
Platform platform_from_yaml(const YAML::Node& node, std::string_view source);

// How platform_to_yaml comments what it writes. Every value carries a comment saying where it
// comes from, since a written platform is read by people deciding whether to trust it.
struct PlatformYamlComments {
  std::string header;  // above the document; empty: none
  // The text of the file the platform was read from, when it was a file: a value the platform
  // still has is written as it was written there, with its own comment when it sits alone on its
  // line (a flow mapping's comment is about all of its values). Empty: every value is formatted.
  std::string_view original_text;
  // The comment of a value that neither `comment_for` nor the original text comments.
  std::string otherwise;
  // The comment of the value or section at a path ({"gpu", "peak", "fp32"}, {"host_link"}) when
  // the caller has its own (a fitted or measured value); such a value is formatted from the
  // platform, never copied from the original text. nullopt: as above. May be empty.
  std::function<std::optional<std::string>(const std::vector<std::string>& path)> comment_for;
  // The text of the value at a path when the caller has its own (a measured value at the digits
  // it was measured to); it must read back as the platform's value. nullopt: formatted from the
  // platform, or copied from the original text as above.
  std::function<std::optional<std::string>(const std::vector<std::string>& path)> text_for;
};

// `platform` as YAML that parse_platform reads back to the same values.
std::string platform_to_yaml(const Platform& platform, const PlatformYamlComments& comments);

}  // namespace comptrain::models

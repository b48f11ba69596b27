#pragma once
// How deep a parsed JSON document nests, found without recursion. nlohmann's parser is iterative,
// but dump(), comparisons and copies of a value recurse, so a 200 KB file of 100,000 nested
// brackets overflowed the stack in whatever touched it first (shared/defects-2/02). Readers check
// the depth once, right after parsing, against the trace format's limit (kMaxJsonDepth), before
// anything recurses. Header-only: the libraries that read JSON link nlohmann_json themselves.

#include <nlohmann/json.hpp>

#include <cstddef>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

namespace comptrain {

// The deepest nesting of arrays and objects a reader accepts: the trace format's own limit
// (traces/src/trace_json.cpp, kMaxDepth). No format comptrain reads needs more than a dozen
// levels (a trace: 4, /ops/0/flops/fixed; a Hugging Face config.json: 3, rope_scaling's lists).
inline constexpr std::size_t kMaxJsonDepth = 64;

// The JSON Pointer of the first container (in document order) that opens nesting level
// `limit` + 1 (the root container is level 1), or nothing when the document nests `limit`
// levels or fewer. The pointer names at most `limit` + 1 tokens, so it stays short enough for a
// message. Iterative: a stack of at most `limit` + 1 iterators.
inline std::optional<std::string> json_nested_deeper_than(const nlohmann::json& root, std::size_t limit = kMaxJsonDepth) {
  if (!root.is_structured()) return std::nullopt;
  struct Frame {
    const nlohmann::json* container;
    nlohmann::json::const_iterator next;
    std::size_t index;  // of `next`, for arrays
  };
  const auto token = [](const Frame& frame, const nlohmann::json::const_iterator& it, std::size_t index) {
    if (!frame.container->is_object()) return std::to_string(index);
    std::string escaped;
    for (const char c : it.key()) {
      if (c == '~') {
        escaped += "~0";
      } else if (c == '/') {
        escaped += "~1";
      } else {
        escaped += c;
      }
    }
    return escaped;
  };
  std::vector<Frame> stack;
  stack.push_back(Frame{&root, root.cbegin(), 0});
  while (!stack.empty()) {
    Frame& top = stack.back();
    if (top.next == top.container->cend()) {
      stack.pop_back();
      continue;
    }
    const auto it = top.next++;
    const std::size_t index = top.index++;
    if (!it->is_structured()) continue;
    if (stack.size() >= limit) {
      std::string pointer;
      for (std::size_t k = 0; k + 1 < stack.size(); ++k) {
        pointer += "/" + token(stack[k], std::prev(stack[k].next), stack[k].index - 1);
      }
      pointer += "/" + token(top, it, index);
      return pointer;
    }
    stack.push_back(Frame{&*it, it->cbegin(), 0});
  }
  return std::nullopt;
}

}  // namespace comptrain

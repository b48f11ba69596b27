#pragma once
// A JSON value as an error message shows it: a few dozen characters at most, and never by
// recursion. nlohmann's parser is iterative but dump() recurses, so a value nested 100,000
// deep (a 200 KB file) overflowed the stack when a message dumped it whole. Header-only: the
// libraries that read JSON link nlohmann_json themselves; support does not.

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>

namespace comptrain {

// At most this many characters of a scalar are shown; longer ones end in "...".
inline constexpr std::size_t kJsonExcerptChars = 40;

// A scalar as JSON writes it, cut to kJsonExcerptChars; an array or object by its kind and size
// ("an array of 3 items", "an object of 1 key"), without looking inside it.
inline std::string json_excerpt(const nlohmann::json& value) {
  if (value.is_array() || value.is_object()) {
    const std::size_t n = value.size();
    const char* kind = value.is_array() ? "an array of " : "an object of ";
    const char* unit = value.is_array() ? (n == 1 ? " item" : " items") : (n == 1 ? " key" : " keys");
    return kind + std::to_string(n) + unit;
  }
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > kJsonExcerptChars) text = text.substr(0, kJsonExcerptChars - 3) + "...";
  return text;
}

}  // namespace comptrain

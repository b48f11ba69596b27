#include "comptrain/models/module_pattern.hpp"

#include <fnmatch.h>

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comptrain/support/input_error.hpp"

namespace comptrain::models {
namespace {

// A component of decimal digits as a number (at most 18 digits: no overflow), else nothing.
std::optional<std::int64_t> decimal(std::string_view text) {
  if (text.empty() || text.size() > 18) return std::nullopt;
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.front() == '-' || text.front() == '+') return std::nullopt;
  return value;
}

struct Range {
  std::int64_t low = 0;
  std::int64_t high = 0;
};

// `[a-b]` as a range; nothing when the component is not bracketed.
std::optional<Range> range_of(std::string_view component, std::string_view pattern) {
  if (component.find_first_of("[]") == std::string_view::npos) return std::nullopt;
  const auto fail = [&](const std::string& what) {
    throw InputError("pattern '" + std::string(pattern) + "': " + what +
                     "; expected a numeric range [a-b] as a whole path component, e.g. layers.[0-15].mlp");
  };
  if (component.front() != '[' || component.back() != ']' || component.size() < 3) {
    fail("'" + std::string(component) + "' has a bracket that is not a whole component");
  }
  const std::string_view inner = component.substr(1, component.size() - 2);
  const std::size_t dash = inner.find('-');
  if (dash == std::string_view::npos) fail("'" + std::string(component) + "' has no '-' between two numbers");
  const auto low = decimal(inner.substr(0, dash));
  const auto high = decimal(inner.substr(dash + 1));
  if (!low || !high) fail("'" + std::string(component) + "' does not hold two non-negative decimal numbers");
  if (*low > *high) fail("the range '" + std::string(component) + "' is empty (" + std::to_string(*low) + " > " + std::to_string(*high) + ")");
  return Range{*low, *high};
}

bool component_matches(std::string_view pattern, std::string_view component, std::string_view whole) {
  if (const auto range = range_of(pattern, whole)) {
    const auto value = decimal(component);
    return value && *value >= range->low && *value <= range->high;
  }
  // fnmatch needs NUL-terminated strings; components are short.
  return pattern == component || fnmatch(std::string(pattern).c_str(), std::string(component).c_str(), 0) == 0;
}

// Where the match of pattern[p..] against name[n..] ends (the index of the first name component
// after it), trying `**` shortest first; nothing when it does not match.
std::optional<std::size_t> match_from(const std::vector<std::string_view>& pattern, std::size_t p, const std::vector<std::string_view>& name,
                                      std::size_t n, std::string_view whole) {
  if (p == pattern.size()) return n;  // the rest of the name lies inside the matched module
  if (pattern[p] == "**") {
    for (std::size_t k = n; k <= name.size(); ++k) {
      if (const auto end = match_from(pattern, p + 1, name, k, whole)) return end;
    }
    return std::nullopt;
  }
  if (n == name.size() || !component_matches(pattern[p], name[n], whole)) return std::nullopt;
  return match_from(pattern, p + 1, name, n + 1, whole);
}

}  // namespace

std::vector<std::string_view> path_components(std::string_view text) {
  std::vector<std::string_view> parts;
  for (std::size_t start = 0;;) {
    const std::size_t dot = text.find('.', start);
    parts.push_back(text.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) return parts;
    start = dot + 1;
  }
}

void validate_module_pattern(std::string_view pattern) {
  if (pattern.empty()) throw InputError("pattern '': empty; expected a module path such as layers.*.mlp");
  for (const std::string_view component : path_components(pattern)) {
    if (component.empty()) {
      throw InputError("pattern '" + std::string(pattern) + "': an empty path component (two dots, or a dot at an end); expected names separated by single dots");
    }
    if (component != "**" && component.find("**") != std::string_view::npos) {
      throw InputError("pattern '" + std::string(pattern) + "': '**' inside the component '" + std::string(component) +
                       "'; expected '**' as a whole component (any number of components)");
    }
    range_of(component, pattern);  // throws on a malformed bracket
  }
}

bool module_pattern_matches(std::string_view pattern, std::string_view name) { return module_pattern_instance(pattern, name).has_value(); }

std::optional<std::string_view> module_pattern_instance(std::string_view pattern, std::string_view name) {
  const std::vector<std::string_view> p = path_components(pattern);
  const std::vector<std::string_view> n = path_components(name);
  for (std::size_t start = 0; start < n.size(); ++start) {
    if (const auto end = match_from(p, 0, n, start, pattern)) {
      // The components name[0, end) joined by their dots: a prefix of `name`.
      std::size_t length = 0;
      for (std::size_t k = 0; k < *end; ++k) length += n[k].size() + (k > 0 ? 1 : 0);
      return name.substr(0, length);
    }
  }
  return std::nullopt;
}

}  // namespace comptrain::models

#include "comptrain/support/did_you_mean.hpp"

#include <algorithm>
#include <vector>

namespace comptrain {
namespace {

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

template <class Names>
std::optional<std::string> closest(std::string_view word, const Names& candidates) {
  const std::size_t tolerated = std::max<std::size_t>(1, word.size() / 3);
  std::optional<std::string> best;
  std::size_t best_distance = tolerated + 1;
  for (const auto& name : candidates) {
    const std::string_view candidate(name);
    const std::size_t distance = typo_distance(word, candidate);
    // Strictly smaller: on a tie the earlier candidate stays.
    if (distance < best_distance && distance < word.size() && distance < candidate.size()) {
      best_distance = distance;
      best = std::string(candidate);
    }
  }
  return best;
}

}  // namespace

std::size_t typo_distance(std::string_view a, std::string_view b) {
  // d[i][j]: distance between the first i characters of a and the first j of b. Three rows
  // suffice: a transposition looks two back.
  const std::size_t n = b.size();
  std::vector<std::size_t> before(n + 1), previous(n + 1), current(n + 1);
  for (std::size_t j = 0; j <= n; ++j) previous[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= n; ++j) {
      const bool same = lower(a[i - 1]) == lower(b[j - 1]);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (same ? 0U : 1U)});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1])) {
        current[j] = std::min(current[j], before[j - 2] + 1);
      }
    }
    std::swap(before, previous);
    std::swap(previous, current);
  }
  return previous[n];
}

std::optional<std::string> did_you_mean(std::string_view word, std::span<const std::string_view> candidates) {
  return closest(word, candidates);
}

std::optional<std::string> did_you_mean(std::string_view word, std::span<const std::string> candidates) {
  return closest(word, candidates);
}

std::optional<std::string> did_you_mean(std::string_view word, std::initializer_list<std::string_view> candidates) {
  return closest(word, candidates);
}

std::string did_you_mean_text(const std::optional<std::string>& guess) {
  return guess ? "did you mean '" + *guess + "'? " : std::string();
}

}  // namespace comptrain

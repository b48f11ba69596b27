#pragma once
// "did you mean 'precision'?": the valid name closest to a mistyped one, for every "unknown
// key / command / option" message, so that they all guess the same way.

#include <cstddef>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace comptrain {

// Damerau-Levenshtein distance in its optimal-string-alignment form (insertions, deletions,
// substitutions, and transpositions of two adjacent characters, each costing 1), ASCII case
// ignored: "Precision" is as close to "precision" as a typo can be.
std::size_t typo_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`, when one is close enough to be what was meant: at distance
// at most max(1, size of word / 3), and below the size of both (no guessing 'b' for 'a': that
// is a different name, not a typo). Ties go to the earlier candidate. Nothing when none is close.
std::optional<std::string> did_you_mean(std::string_view word, std::span<const std::string_view> candidates);
std::optional<std::string> did_you_mean(std::string_view word, std::span<const std::string> candidates);
std::optional<std::string> did_you_mean(std::string_view word, std::initializer_list<std::string_view> candidates);

// "did you mean 'X'? " (the trailing space included, so that it stands before "valid keys: ..." or
// "expected one of: ..."), or "" without a guess.
std::string did_you_mean_text(const std::optional<std::string>& guess);

}  // namespace comptrain

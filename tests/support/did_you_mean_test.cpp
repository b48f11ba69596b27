#include "comptrain/support/did_you_mean.hpp"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace comptrain {
namespace {

const std::vector<std::string> kTrainingKeys = {"batch_size", "precision", "optimizer", "tf32", "seed"};

TEST(TypoDistance, CountsEditsAndAdjacentTranspositionsOnce) {
  EXPECT_EQ(typo_distance("precision", "precision"), 0U);
  EXPECT_EQ(typo_distance("precison", "precision"), 1U);  // deletion
  EXPECT_EQ(typo_distance("precission", "precision"), 1U);  // insertion
  EXPECT_EQ(typo_distance("precixion", "precision"), 1U);  // substitution
  EXPECT_EQ(typo_distance("perc", "prec"), 1U);  // transposition: 2 in plain Levenshtein
  EXPECT_EQ(typo_distance("ab", "ba"), 1U);
  EXPECT_EQ(typo_distance("", "abc"), 3U);
  EXPECT_EQ(typo_distance("abc", ""), 3U);
  EXPECT_EQ(typo_distance("kitten", "sitting"), 3U);
  EXPECT_EQ(typo_distance("Precision", "precision"), 0U);  // case is not a typo
  // Optimal string alignment: a transposed pair is not edited again ("ca" -> "abc" is 3, not 2).
  EXPECT_EQ(typo_distance("ca", "abc"), 3U);
}

TEST(DidYouMean, SuggestsTheIntendedKeyOfATypo) {
  EXPECT_EQ(did_you_mean("precison", kTrainingKeys), "precision");
  EXPECT_EQ(did_you_mean("batch_szie", kTrainingKeys), "batch_size");  // transposition
  EXPECT_EQ(did_you_mean("optimiser", kTrainingKeys), "optimizer");
  EXPECT_EQ(did_you_mean("Precision", kTrainingKeys), "precision");
  EXPECT_EQ(did_you_mean("tf23", kTrainingKeys), "tf32");
}

TEST(DidYouMean, SuggestsNothingWhenNoCandidateIsClose) {
  EXPECT_EQ(did_you_mean("learning_rate", kTrainingKeys), std::nullopt);
  EXPECT_EQ(did_you_mean("", kTrainingKeys), std::nullopt);
  EXPECT_EQ(did_you_mean("precision", std::vector<std::string>{}), std::nullopt);
  // Within max(1, 8/3) = 2 edits, not 3.
  EXPECT_EQ(did_you_mean("prcsion", kTrainingKeys), "precision");
  EXPECT_EQ(did_you_mean("prcsin", kTrainingKeys), std::nullopt);
  // One letter for another is a different name, not a typo of it.
  EXPECT_EQ(did_you_mean("x", {"y", "z"}), std::nullopt);
  EXPECT_EQ(did_you_mean("ab", {"cd"}), std::nullopt);
}

TEST(DidYouMean, ShortWordsTolerateOneEdit) {
  EXPECT_EQ(did_you_mean("tp", {"to", "step"}), "to");
  EXPECT_EQ(did_you_mean("fro", {"from", "to", "step"}), "from");
  EXPECT_EQ(did_you_mean("sep", {"from", "to", "step"}), "step");
  EXPECT_EQ(did_you_mean("fr", {"from", "to", "step"}), std::nullopt);  // 2 edits from 'from'
}

TEST(DidYouMean, TiesGoToTheEarlierCandidate) {
  EXPECT_EQ(did_you_mean("cat", {"bat", "cap", "car"}), "bat");
  EXPECT_EQ(did_you_mean("cat", {"car", "cap", "bat"}), "car");
  // A closer candidate later in the list still wins.
  EXPECT_EQ(did_you_mean("cart", {"cat", "cars", "card", "cart"}), "cart");
}

TEST(DidYouMean, TakesViewsStringsAndLiterals) {
  const std::vector<std::string_view> views = {"--max-batch", "--margin", "--probes"};
  EXPECT_EQ(did_you_mean("--max-bach", views), "--max-batch");
  EXPECT_EQ(did_you_mean("simulat", {"trace", "simulate", "plan"}), "simulate");
}

TEST(DidYouMean, TextStandsBeforeTheList) {
  EXPECT_EQ(did_you_mean_text(std::string("precision")), "did you mean 'precision'? ");
  EXPECT_EQ(did_you_mean_text(std::nullopt), "");
}

}  // namespace
}  // namespace comptrain

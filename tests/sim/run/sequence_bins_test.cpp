// model.sequence_bins (LDDL's sequence binning): the reader refuses what is not a binning at its
// line, and the run replays each bin at its padded length and weighs the iteration times.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <variant>

#include "comptrain/sim/report/simulate_report.hpp"
#include "comptrain/sim/run/run.hpp"
#include "comptrain/support/input_error.hpp"
#include "common/scenario_error.hpp"

namespace comptrain::sim {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

Scenario scenario(const std::string& yaml) { return parse_scenario(yaml, "s.yaml", test_support::kShippedScenarios); }
std::string error_of(std::string_view yaml) { return test_support::scenario_error(yaml); }

// A two-layer BERT-base at sequence 128, DLE's masked-LM head on 20 positions, batch 4.
std::string bert(const std::string& bins) {
  return "model: {zoo: bert-base, layers: 2, seq_len: 128, mlm: masked, mlm_predictions: 20" + bins +
         "}\ntraining: {batch_size: 4, precision: mixed, optimizer: adam}\nplatform: a100-40gb\n";
}

TEST(SequenceBins, TheReaderTakesABinningAndRefusesWhatIsNot) {
  const Scenario s = scenario(bert(", sequence_bins: {bin_size: 64, weights: [0.25, 0.75]}"));
  ASSERT_TRUE(s.sequence_bins);
  EXPECT_EQ(s.sequence_bins->bin_size, 64);
  EXPECT_EQ(s.sequence_bins->weights, (std::vector<double>{0.25, 0.75}));
  EXPECT_EQ(s.sequence_bins->seq_len_of(0), 64);
  EXPECT_EQ(s.sequence_bins->seq_len_of(1), 128);

  EXPECT_THAT(error_of(bert(", sequence_bins: {bin_size: 48, weights: [1]}")),
              AllOf(HasSubstr("s.yaml:1:"), HasSubstr("'model.sequence_bins.bin_size' is 48; expected a divisor of model.seq_len (128)")));
  EXPECT_THAT(error_of(bert(", sequence_bins: {bin_size: 64, weights: [1]}")), HasSubstr("must be a list of 2 shares (seq_len 128 / bin_size 64)"));
  EXPECT_THAT(error_of(bert(", sequence_bins: {bin_size: 64, weights: [-0.5, 1.5]}")), HasSubstr("is '-0.5'; expected a share >= 0"));
  EXPECT_THAT(error_of(bert(", sequence_bins: {bin_size: 64, weights: [0.5, .nan]}")), HasSubstr("expected a share >= 0"));
  EXPECT_THAT(error_of(bert(", sequence_bins: {bin_size: 64, weights: [0.5, 0.6]}")), HasSubstr("sum to 1.1; expected shares that sum to 1"));
  EXPECT_THAT(error_of(bert(", sequence_bins: {bin_size: 64, weights: [1, 0]}")), HasSubstr("the longest bin (128 tokens, model.seq_len) has weight 0"));
  EXPECT_THAT(error_of(bert(", sequence_bins: {weights: [1]}")), HasSubstr("'model.sequence_bins' needs 'bin_size'"));
  EXPECT_THAT(error_of(bert(", sequence_bins: {bin_size: 64, weight: [0.5, 0.5]}")), HasSubstr("weights"));  // did-you-mean
  EXPECT_THAT(error_of("model: {zoo: bert-base, sequence_bins: {bin_size: 64, weights: [1]}}\n"), HasSubstr("needs 'model.seq_len'"));
  EXPECT_THAT(error_of("model: {zoo: llama, layers: 1, seq_len: 64, packing: {documents: 2}, sequence_bins: {bin_size: 64, weights: [1]}}\n"),
              HasSubstr("'model.sequence_bins' and 'model.packing'"));
  EXPECT_THAT(error_of("model: {trace: traces/x.json, sequence_bins: {bin_size: 64, weights: [1]}}\n"),
              HasSubstr("'sequence_bins' applies to zoo models only"));
}

TEST(SequenceBins, ARunWhoseBinsCannotBeReplayedIsAnInputErrorAtTheKey) {
  try {
    PreparedScenario prepared(scenario("model: {zoo: gpt, layers: 4, hidden: 256, heads: 4, seq_len: 128, vocab: 1024,\n"
                                       "        sequence_bins: {bin_size: 64, weights: [0.5, 0.5]}}\n"
                                       "training: {batch_size: 1, precision: mixed, optimizer: adam, gradient_accumulation_steps: 4}\n"
                                       "platform: dgx-h100-superpod\nparallelism: {nodes: 1, gpus_per_node: 2, pipeline: 2}\n"));
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("s.yaml:2:24"), HasSubstr("not modelled with pipeline stages")));
  }
}

double iteration_seconds(const std::string& yaml) {
  const PreparedScenario prepared(scenario(yaml));
  const RunOutcome outcome = run_scenario(prepared, prepared.scenario().strategy, prepared.batch_size(), Isolation::child_process);
  return std::get<CompletedRun>(outcome).result.iteration_seconds;
}

// Worked by hand: each bin is the scenario at the bin's length (its masked positions scaled, 20 x
// 64 / 128 = 10), and the mean is 0.25 x t(64) + 0.75 x t(128); a bin of weight 0 is not run.
TEST(SequenceBins, TheMeanIterationWeighsEachBinsOwnReplay) {
  const PreparedScenario prepared(scenario(bert(", sequence_bins: {bin_size: 64, weights: [0.25, 0.75]}")));
  const RunOutcome outcome = run_scenario(prepared, prepared.scenario().strategy, 4, Isolation::child_process);
  const CompletedRun& run = std::get<CompletedRun>(outcome);
  ASSERT_TRUE(run.sequence_bins);
  const SequenceBinsResult& bins = *run.sequence_bins;
  ASSERT_EQ(bins.bins.size(), 2u);
  const double t64 = iteration_seconds("model: {zoo: bert-base, layers: 2, seq_len: 64, mlm: masked, mlm_predictions: 10}\n"
                                       "training: {batch_size: 4, precision: mixed, optimizer: adam}\nplatform: a100-40gb\n");
  const double t128 = iteration_seconds(bert(""));
  EXPECT_LT(t64, t128);
  EXPECT_EQ(bins.bins[0].seq_len, 64);
  EXPECT_EQ(bins.bins[0].weight, 0.25);
  EXPECT_DOUBLE_EQ(bins.bins[0].iteration_seconds, t64);
  EXPECT_EQ(bins.bins[1].seq_len, 128);
  EXPECT_DOUBLE_EQ(bins.bins[1].iteration_seconds, t128);
  EXPECT_DOUBLE_EQ(run.result.iteration_seconds, t128);  // the replay reported is the longest bin's
  EXPECT_LT(bins.bins[0].reserved_peak, bins.bins[1].reserved_peak);
  ASSERT_TRUE(bins.mean_iteration_seconds());
  EXPECT_DOUBLE_EQ(*bins.mean_iteration_seconds(), 0.25 * t64 + 0.75 * t128);

  // The report says both: the longest bin's replay and what the bins sustain.
  const auto json = nlohmann::json::parse(report(prepared, prepared.scenario().strategy, 4, outcome, true));
  const auto& binned = json.at("results").at("sequence_bins");
  EXPECT_EQ(binned.at("bin_size"), 64);
  EXPECT_EQ(binned.at("bins").size(), 2u);
  EXPECT_DOUBLE_EQ(binned.at("samples_per_second").get<double>(), 4 / (0.25 * t64 + 0.75 * t128));
  EXPECT_DOUBLE_EQ(json.at("results").at("samples_per_second").get<double>(), 4 / t128);
  EXPECT_THAT(report(prepared, prepared.scenario().strategy, 4, outcome, false),
              AllOf(HasSubstr("over bins"), HasSubstr("Sequence bins (model.sequence_bins, bin size 64")));

  const PreparedScenario only_longest(scenario(bert(", sequence_bins: {bin_size: 64, weights: [0, 1]}")));
  const RunOutcome longest = run_scenario(only_longest, only_longest.scenario().strategy, 4, Isolation::child_process);
  ASSERT_EQ(std::get<CompletedRun>(longest).sequence_bins->bins.size(), 1u);
  EXPECT_DOUBLE_EQ(*std::get<CompletedRun>(longest).sequence_bins->mean_iteration_seconds(), t128);
}

// A shorter bin over many micro-steps replays 2 and 3 of them and extends the middle one
// (t(n) = t(2) + (n - 2) (t(3) - t(2))): the same as replaying all n, on one GPU and under DDP.
TEST(SequenceBins, AShorterBinsMicroStepsExtendToTheWholeReplay) {
  for (const std::string& layout : {std::string(), std::string("parallelism: {nodes: 1, gpus_per_node: 2}\n")}) {
    const std::string training = "training: {batch_size: 4, precision: mixed, optimizer: adam, gradient_accumulation_steps: 6}\nplatform: a100-80gb\n";
    const PreparedScenario prepared(scenario("model: {zoo: bert-base, layers: 2, seq_len: 128, mlm: masked, mlm_predictions: 20, "
                                             "sequence_bins: {bin_size: 64, weights: [0.5, 0.5]}}\n" +
                                             training + layout));
    const auto shorter = run_shorter_sequence_bins(prepared, prepared.scenario().strategy, 4);
    const auto& bins = std::get<std::vector<SequenceBinRun>>(shorter);
    ASSERT_EQ(bins.size(), 1u);
    const double whole = iteration_seconds("model: {zoo: bert-base, layers: 2, seq_len: 64, mlm: masked, mlm_predictions: 10}\n" + training + layout);
    EXPECT_NEAR(bins[0].iteration_seconds, whole, 1e-9 * whole) << layout;
  }
}

// A strategy that cannot apply at a shorter bin is not applicable for the run, and says at which
// bin, whether the bin replays all its micro-steps or folds them (more than 3: the whole
// schedule is then built only to say so).
TEST(SequenceBins, AStrategyThatCannotApplyAtAShorterBinSaysWhichBin) {
  for (const int steps : {2, 6}) {
    const PreparedScenario prepared(scenario("model: {zoo: bert-base, layers: 2, seq_len: 128, mlm: masked, mlm_predictions: 20, "
                                             "sequence_bins: {bin_size: 64, weights: [0.5, 0.5]}}\n"
                                             "training: {batch_size: 4, precision: mixed, optimizer: adam, gradient_accumulation_steps: " +
                                             std::to_string(steps) +
                                             "}\nplatform: a100-80gb\n"
                                             "strategy: {name: tight, rules: [{recompute: {mode: budget, budget: 1 KiB}}]}\n"));
    const auto shorter = run_shorter_sequence_bins(prepared, prepared.scenario().strategy, 4);
    const auto* not_applicable = std::get_if<models::NotApplicable>(&shorter);
    ASSERT_NE(not_applicable, nullptr) << steps;
    EXPECT_THAT(not_applicable->reason, AllOf(HasSubstr("at the sequence bin of 64 tokens: "), HasSubstr("recompute budget of 1024 bytes"))) << steps;
  }
}

}  // namespace
}  // namespace comptrain::sim

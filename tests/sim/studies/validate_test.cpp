// The validation table's reader (fields, comments, located errors), the error arithmetic, the
// summaries and a throughput point's prediction on one GPU and on several. The shipped table's
// predictions run in tests/cli/validate_test.sh.
#include "comptrain/sim/report/validation_report.hpp"
#include "comptrain/sim/studies/validate.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <variant>

#include "comptrain/sim/run/run.hpp"
#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/support/input_error.hpp"
#include "common/input_error_of.hpp"

namespace comptrain::sim {
namespace {

using ::testing::HasSubstr;

// The repository's scenarios/: default.yaml stands in for a point's scenario.
const std::filesystem::path kScenarios = std::filesystem::path(COMPTRAIN_TEST_DATA_DIR) / "../../scenarios";

const std::string kPoint =
    R"({"id": "p1", "source": "paper, table 2", "model": "resnet50", "gpu": "A100", "precision": "tf32", "batch": 32, )"
    R"("metric": "throughput_samples_per_s", "published": 900, "unit": "images/s", "notes": "n", "scenario": "default.yaml"})";

ValidationTable parse(const std::string& text) { return parse_validation_table(text, "t.jsonl", kScenarios); }

std::string error_of(const std::string& text) {
  return test_support::input_error_of([&] { parse(text); });
}

TEST(ValidationTable, ReadsPointsSkippingCommentsAndBlankLines) {
  const ValidationTable table = parse(
      "# comment\n\n" + kPoint + "\n" +
      R"({"id": "p2", "source": "s", "model": "m", "gpu": "g", "precision": "amp", "batch": 4, "metric": "memory_reduction_x", )"
      R"("published": 1.5, "published_upper": 2, "unit": "x", "notes": "n", "suspect": true, "suspect_reason": "the GPU is not named", "holdout": true, )"
      R"("fast": true, "measured_as": "nvidia-smi", "family": "encoder", )"
      R"("scenario": "default.yaml", "reference_scenario": "default.yaml"})" "\n" +
      R"({"id": "p3", "source": "s", "model": "m", "gpu": "g", "precision": "fp32", "batch": 4, "metric": "peak_mem_bytes", )"
      R"("published": 1e9, "unit": "bytes", "notes": "n", "not_covered": "optimizer Adafactor", "measured_as": "max_memory_allocated"})" "\n");
  ASSERT_EQ(table.points.size(), 3u);
  const ValidationPoint& p1 = table.points[0];
  EXPECT_EQ(p1.id, "p1");
  EXPECT_EQ(p1.line, 3);
  EXPECT_EQ(p1.metric, ValidationMetric::throughput_samples_per_s);
  EXPECT_EQ(p1.batch, 32);
  EXPECT_DOUBLE_EQ(p1.published, 900);
  EXPECT_EQ(p1.scenario, kScenarios / "default.yaml");
  EXPECT_TRUE(p1.covered());
  EXPECT_FALSE(p1.suspect || p1.holdout || p1.fast);
  const ValidationPoint& p2 = table.points[1];
  EXPECT_EQ(p2.metric, ValidationMetric::memory_reduction_x);
  EXPECT_EQ(p2.published_upper, 2.0);
  EXPECT_TRUE(p2.suspect && p2.holdout && p2.fast);
  EXPECT_EQ(p2.suspect_reason, "the GPU is not named");
  EXPECT_EQ(p2.family, "encoder");
  EXPECT_EQ(p1.family, "");
  EXPECT_EQ(p2.measured_as, MeasuredAs::nvidia_smi);
  EXPECT_EQ(table.points[2].measured_as, MeasuredAs::max_memory_allocated);
  EXPECT_FALSE(table.points[2].covered());
  EXPECT_EQ(table.points[2].not_covered, "optimizer Adafactor");
}

TEST(ValidationTable, ErrorsNameTheLine) {
  EXPECT_THAT(error_of("# c\n{\"id\": \n"), HasSubstr("t.jsonl:2:"));
  EXPECT_THAT(error_of("# c\n{\"id\": \n"), HasSubstr("malformed JSON"));
  EXPECT_THAT(error_of("[1, 2]\n"), HasSubstr("t.jsonl:1: found array; expected one JSON object per line"));
  std::string unknown = kPoint;
  unknown.insert(1, R"("colour": 1, )");
  EXPECT_THAT(error_of("\n" + unknown), HasSubstr("t.jsonl:2: unknown field 'colour'; expected one of: id, source"));
  EXPECT_THAT(error_of(kPoint + "\n" + kPoint), HasSubstr("t.jsonl:2: duplicate id 'p1'"));
  std::string metric = kPoint;
  metric.replace(metric.find("throughput_samples_per_s"), 24, "speed");
  EXPECT_THAT(error_of(metric), HasSubstr("t.jsonl:1: field 'metric': found \"speed\"; expected throughput_samples_per_s"));
  std::string batch = kPoint;
  batch.replace(batch.find("\"batch\": 32"), 11, "\"batch\": 0");
  EXPECT_THAT(error_of(batch), HasSubstr("field 'batch': found 0; expected a positive integer"));
  std::string precision = kPoint;
  precision.replace(precision.find("tf32"), 4, "fp8");
  EXPECT_THAT(error_of(precision), HasSubstr("expected fp32, tf32, amp, amp-fp16"));
  std::string peak = kPoint;
  peak.replace(peak.find("throughput_samples_per_s"), 24, "peak_mem_bytes");
  EXPECT_THAT(error_of(peak), HasSubstr("field 'measured_as': missing; expected how the peak_mem_bytes figure was measured"));
  peak.insert(1, R"("measured_as": "smi", )");
  EXPECT_THAT(error_of(peak), HasSubstr("field 'measured_as': found \"smi\"; expected max_memory_allocated"));
  std::string published = kPoint;
  published.replace(published.find("900"), 3, "-1");
  EXPECT_THAT(error_of(published), HasSubstr("field 'published': found -1; expected a positive number"));
  std::string missing = kPoint;
  missing.replace(missing.find(R"(, "scenario": "default.yaml")"), 28, "");
  EXPECT_THAT(error_of(missing), HasSubstr("missing field 'scenario'"));
  std::string absent = kPoint;
  absent.replace(absent.find("default.yaml"), 12, "nowhere.yaml");
  EXPECT_THAT(error_of(absent), HasSubstr("nowhere.yaml is not a file"));
  std::string reference = kPoint;
  reference.insert(reference.size() - 1, R"(, "reference_scenario": "default.yaml")");
  EXPECT_THAT(error_of(reference), HasSubstr("'reference_scenario' given for throughput_samples_per_s, a one-run metric"));
  std::string ratio = kPoint;
  ratio.replace(ratio.find("throughput_samples_per_s"), 24, "slowdown_x");
  EXPECT_THAT(error_of(ratio), HasSubstr("missing field 'reference_scenario'"));
  EXPECT_THAT(error_of("# only a comment\n"), HasSubstr("t.jsonl: no points"));
}

// Suspect means that the measured hardware or setup cannot be known (issue 34): a suspect point
// says what is unknown, and only a suspect point gives a reason. A family is one of four.
TEST(ValidationTable, SuspectPointsSayWhatCannotBeKnownAndFamiliesAreChecked) {
  const auto with = [](const std::string& fields) {
    std::string point = kPoint;
    return point.insert(1, fields);
  };
  EXPECT_THAT(error_of("# c\n" + with(R"("suspect": true, )")),
              HasSubstr("t.jsonl:2: missing field 'suspect_reason' on a suspect point; expected a sentence saying which part of the measured hardware"));
  EXPECT_THAT(error_of(with(R"("suspect_reason": "unknown GPU", )")),
              HasSubstr("t.jsonl:1: field 'suspect_reason' given on a point that is not suspect; expected it only with \"suspect\": true"));
  EXPECT_THAT(error_of(with(R"("suspect": false, "suspect_reason": "unknown GPU", )")), HasSubstr("field 'suspect_reason' given on a point that is not suspect"));
  EXPECT_THAT(error_of(with(R"("suspect": true, "suspect_reason": "", )")), HasSubstr("field 'suspect_reason': found \"\"; expected a non-empty string"));
  EXPECT_EQ(parse(with(R"("suspect": true, "suspect_reason": "unknown GPU", )")).points[0].suspect_reason, "unknown GPU");
  EXPECT_THAT(error_of(with(R"("family": "rnn", )")), HasSubstr("t.jsonl:1: field 'family': found \"rnn\"; expected cnn, encoder, decoder or moe"));
  for (const std::string_view family : kWorkloadFamilies) {
    EXPECT_EQ(parse(with(fmt::format(R"("family": "{}", )", family))).points[0].family, family);
  }
  EXPECT_THAT(error_of(R"({"id": "n", "source": "s", "gpu": "H100", "metric": "bus_bandwidth", "platform": "dgx-h100-superpod", "nodes": 1, )"
                       R"("gpus_per_node": 8, "collective": "all_reduce", "bytes": 1048576, "published": 100, "unit": "GB/s", "notes": "n", "family": "cnn"})"),
              HasSubstr("field 'family' given for bus_bandwidth; expected it only on points that run a model"));
}

// Published figures lie from 1e-9 to 1e18 in the metric's unit, so that predicted / published - 1
// is finite (shared/defects-2/17: 5e-324 made the point's error and the summary infinite, null
// in JSON).
TEST(ValidationTable, PublishedFiguresAreBounded) {
  const auto with = [](const std::string& published) {
    std::string point = kPoint;
    point.replace(point.find("900"), 3, published);
    return point;
  };
  EXPECT_THAT(error_of(with("5e-324")), HasSubstr("t.jsonl:1: field 'published': found 5e-324; expected a positive number from 1e-09 to 1e+18"));
  EXPECT_THAT(error_of(with("2e18")), HasSubstr("t.jsonl:1: field 'published': found 2e+18; expected a positive number from 1e-09"));
  EXPECT_THAT(error_of(with("100, \"published_upper\": 1e300")), HasSubstr("field 'published_upper': found 1e+300; expected"));
  EXPECT_DOUBLE_EQ(parse(with("1e-9")).points[0].published, 1e-9);
  EXPECT_DOUBLE_EQ(parse(with("1e18")).points[0].published, 1e18);
}

// A message shows a field's value cut to a few dozen characters, and never by recursion
// (shared/defects-2/02: an id nested 100,000 deep overflowed the stack in dump()).
TEST(ValidationTable, MessagesShowValuesCutShort) {
  std::string deep = kPoint;
  deep.replace(deep.find("\"p1\""), 4, std::string(100'000, '[') + std::string(100'000, ']'));
  EXPECT_EQ(error_of(deep), "t.jsonl:1: field 'id': found an array of 1 item; expected a non-empty string");
  std::string metric = kPoint;
  metric.replace(metric.find("throughput_samples_per_s"), 24, std::string(10'000, 'x'));
  const std::string message = error_of(metric);
  EXPECT_THAT(message, HasSubstr("t.jsonl:1: field 'metric': found \"xxxxxxxx"));
  EXPECT_THAT(message, HasSubstr("...; expected throughput_samples_per_s"));
  EXPECT_LT(message.size(), 400u);
  std::string key = kPoint;
  key.insert(1, "\"" + std::string(10'000, 'k') + "\": 1, ");
  EXPECT_THAT(error_of(key), HasSubstr("t.jsonl:1: unknown field '" + std::string(37, 'k') + "...'; expected one of"));
}

// A checkpoint point the platform cannot store is refused at its line when the table is read
// (shared/defects-2/21: "the point: checkpoint.to: ..." named neither the table nor the line).
TEST(ValidationTable, ACheckpointPointsStorageIsCheckedAtItsLine) {
  const std::string point =
      R"({"id": "c1", "source": "s", "model": "m", "gpu": "A100", "precision": "mixed", "metric": "checkpoint_throughput", "platform": "perlmutter-gpu", )"
      R"("nodes": 1, "gpus_per_node": 4, "checkpoint": {"bytes_per_gpu": 1073741824, "forward_backward_seconds": 1.0, "update_seconds": 0.1, "mode": "sync", )"
      R"("every": 1, "to": "TIER"}, "published": 4, "unit": "GB/s", "notes": "n"})";
  std::string local = point;
  local.replace(local.find("TIER"), 4, "local");
  EXPECT_THAT(error_of("# c\n" + local), HasSubstr("t.jsonl:2: checkpoint.to: the platform 'perlmutter-gpu' has no storage.local; expected a platform with"));
  std::string shared = point;
  shared.replace(shared.find("TIER"), 4, "shared");
  EXPECT_EQ(parse(shared).points.size(), 1u);
}

// A max_batch point may say only that its batch ran (`bound: lower`) or that the next one ran
// out of memory (`bound: upper`); a ran_at_batch point says its configuration ran at its batch.
TEST(ValidationTable, BoundsAndBatchesThatRan) {
  const std::string max_batch =
      R"({"id": "m", "source": "s", "model": "m", "gpu": "g", "precision": "bf16", "batch": 4, "metric": "max_batch", "published": 4, )"
      R"("unit": "samples", "notes": "n", "scenario": "default.yaml", BOUND})";
  const auto with = [](std::string point, const std::string& bound) { return point.replace(point.find("BOUND"), 5, bound); };
  const ValidationTable table = parse(with(max_batch, R"("bound": "lower")") + "\n" +
                                      R"({"id": "r", "source": "s", "model": "m", "gpu": "g", "precision": "bf16", "batch": 2, "metric": "ran_at_batch", )"
                                      R"("published": 2, "unit": "samples", "notes": "n", "scenario": "default.yaml"})" "\n");
  ASSERT_EQ(table.points.size(), 2u);
  EXPECT_EQ(table.points[0].bound, Bound::lower);
  EXPECT_EQ(table.points[1].metric, ValidationMetric::ran_at_batch);
  EXPECT_EQ(table.points[1].bound, Bound::none);
  EXPECT_EQ(parse(with(max_batch, R"("bound": "upper")")).points[0].bound, Bound::upper);
  EXPECT_THAT(error_of(with(max_batch, R"("bound": "below")")), HasSubstr("t.jsonl:1: field 'bound': found \"below\"; expected \"lower\""));
  EXPECT_THAT(error_of(with(max_batch, R"("bound": "lower", "published_upper": 6)")), HasSubstr("'published_upper' given with 'bound'"));
  EXPECT_THAT(error_of(with(max_batch, R"("bound": "lower", "measured_as": "first_oom")")), HasSubstr("first_oom given with 'bound'"));
  std::string bounded_throughput = kPoint;
  bounded_throughput.insert(1, R"("bound": "lower", )");
  EXPECT_THAT(error_of(bounded_throughput), HasSubstr("field 'bound' given for throughput_samples_per_s; expected it only on max_batch points"));
  EXPECT_THAT(error_of(R"({"id": "r", "source": "s", "model": "m", "gpu": "g", "precision": "bf16", "batch": 2, "metric": "ran_at_batch", )"
                       R"("published": 3, "unit": "samples", "notes": "n", "scenario": "default.yaml"})"),
              HasSubstr("field 'published': found 3, not the point's batch 2; expected the batch that ran"));
}

TEST(ValidationError, IsZeroOnABoundsSide) {
  ValidationPoint lower;
  lower.published = 8;
  lower.bound = Bound::lower;
  EXPECT_DOUBLE_EQ(relative_error(8, lower), 0);    // at the bound: met
  EXPECT_DOUBLE_EQ(relative_error(20, lower), 0);   // above: met
  EXPECT_DOUBLE_EQ(relative_error(6, lower), -0.25);  // 6 / 8 - 1
  ValidationPoint upper = lower;
  upper.bound = Bound::upper;
  EXPECT_DOUBLE_EQ(relative_error(3, upper), 0);
  EXPECT_DOUBLE_EQ(relative_error(10, upper), 0.25);  // 10 / 8 - 1
  ValidationPoint plain = lower;
  plain.bound = Bound::none;
  EXPECT_DOUBLE_EQ(relative_error(20, plain), 1.5);
}

TEST(ValidationTable, ShippedTableReads) {
  const ValidationTable table = load_validation_table(default_validation_table());
  EXPECT_GE(table.points.size(), 30u);
  int fast = 0, holdout = 0, not_covered = 0;
  for (const ValidationPoint& p : table.points) {
    fast += p.fast;
    holdout += p.holdout;
    not_covered += !p.covered();
    EXPECT_FALSE(p.source.empty()) << p.id;
  }
  EXPECT_GE(fast, 3);
  EXPECT_GE(holdout, 3);
  EXPECT_GE(not_covered, 1);
  // Every point that runs a model names its family, for the summaries per family; the reader
  // has checked that each suspect point gives its reason.
  for (const ValidationPoint& p : table.points) {
    if (p.metric != ValidationMetric::bus_bandwidth) {
      EXPECT_FALSE(p.family.empty()) << p.id << " (line " << p.line << ") has no family";
    }
    EXPECT_EQ(p.suspect, !p.suspect_reason.empty()) << p.id;
  }
}

// The generation comes from the platform's compute capability (CUDA C Programming Guide).
TEST(ValidationSummary, GenerationIsThePlatformsArchitecture) {
  EXPECT_EQ(gpu_generation(models::builtin_platform("titanx-maxwell")), "Maxwell");
  EXPECT_EQ(gpu_generation(models::builtin_platform("v100-16gb")), "Volta");
  EXPECT_EQ(gpu_generation(models::builtin_platform("a100-80gb")), "Ampere");
  EXPECT_EQ(gpu_generation(models::builtin_platform("h100-pcie")), "Hopper");
  EXPECT_EQ(gpu_generation(models::builtin_platform("h200")), "Hopper");
  models::Platform p = models::builtin_platform("a100-80gb");
  p.gpu.compute_capability_minor = 6;  // GA102, an RTX A6000
  EXPECT_EQ(gpu_generation(p), "Ampere");
  p.gpu.compute_capability_minor = 9;
  EXPECT_EQ(gpu_generation(p), "Ada");
  p.gpu.compute_capability_major = 7;
  p.gpu.compute_capability_minor = 5;
  EXPECT_EQ(gpu_generation(p), "Turing");
  p.gpu.compute_capability_major = 0;  // not given
  EXPECT_EQ(gpu_generation(p), "");
}

TEST(ValidationError, IsSignedRatioMinusOne) {
  EXPECT_DOUBLE_EQ(relative_error(140, 100), 0.4);
  EXPECT_DOUBLE_EQ(relative_error(60, 100), -0.4);
  EXPECT_DOUBLE_EQ(relative_error(100, 100), 0);
  // Against a range: zero inside, the nearer end outside.
  EXPECT_DOUBLE_EQ(relative_error(150, 100, 200.0), 0);
  EXPECT_DOUBLE_EQ(relative_error(300, 100, 200.0), 0.5);
  EXPECT_DOUBLE_EQ(relative_error(50, 100, 200.0), -0.5);
}

ValidationResult result(const std::string& id, ValidationMetric metric, std::optional<double> error, bool suspect = false) {
  ValidationResult r;
  r.point.id = id;
  r.point.metric = metric;
  r.point.suspect = suspect;
  r.error = error;
  if (error) r.predicted = 1 + *error;
  return r;
}

TEST(ValidationSummary, MedianAndWorstOfAbsoluteErrorsWithoutSuspects) {
  const auto summaries = summarize({
      result("a", ValidationMetric::throughput_samples_per_s, 0.4),
      result("b", ValidationMetric::throughput_samples_per_s, -0.1),
      result("c", ValidationMetric::throughput_samples_per_s, 0.2),
      result("d", ValidationMetric::throughput_samples_per_s, -0.6),
      result("e", ValidationMetric::throughput_samples_per_s, 5.0, true),  // suspect: left out
      result("f", ValidationMetric::peak_mem_bytes, -0.3),
      result("g", ValidationMetric::peak_mem_bytes, std::nullopt),  // not covered
  });
  ASSERT_EQ(summaries.size(), 2u);
  EXPECT_EQ(summaries[0].metric, ValidationMetric::throughput_samples_per_s);
  EXPECT_EQ(summaries[0].count, 4);
  EXPECT_DOUBLE_EQ(summaries[0].median_abs_error, 0.3);  // |errors| 0.1 0.2 0.4 0.6
  EXPECT_DOUBLE_EQ(summaries[0].worst_abs_error, 0.6);
  EXPECT_EQ(summaries[0].worst_id, "d");
  EXPECT_EQ(summaries[0].suspect, 1);
  EXPECT_EQ(summaries[1].count, 1);
  EXPECT_DOUBLE_EQ(summaries[1].median_abs_error, 0.3);
  EXPECT_EQ(summaries[1].not_covered, 1);
}

// The held-out points' median stands apart: how the model does where nothing was fitted.
TEST(ValidationSummary, HeldOutPointsHaveTheirOwnMedian) {
  const auto held_out = [](ValidationResult r) {
    r.point.holdout = true;
    return r;
  };
  const auto summaries = summarize({
      result("fit-a", ValidationMetric::throughput_samples_per_s, 0.01),
      result("fit-b", ValidationMetric::throughput_samples_per_s, -0.02),
      held_out(result("held-a", ValidationMetric::throughput_samples_per_s, 0.3)),
      held_out(result("held-b", ValidationMetric::throughput_samples_per_s, -0.1)),
      held_out(result("held-c", ValidationMetric::throughput_samples_per_s, 0.2)),
      held_out(result("held-suspect", ValidationMetric::throughput_samples_per_s, 9.0, true)),  // left out
      result("fit-peak", ValidationMetric::peak_mem_bytes, 0.05),
  });
  ASSERT_EQ(summaries.size(), 2u);
  EXPECT_EQ(summaries[0].count, 5);
  EXPECT_DOUBLE_EQ(summaries[0].median_abs_error, 0.1);  // 0.01 0.02 0.1 0.2 0.3
  EXPECT_EQ(summaries[0].holdout_count, 3);
  EXPECT_DOUBLE_EQ(summaries[0].holdout_median_abs_error, 0.2);  // 0.1 0.2 0.3
  EXPECT_EQ(summaries[1].holdout_count, 0);
  EXPECT_DOUBLE_EQ(summaries[1].holdout_median_abs_error, 0);
}

// Bounded points count as met or not met; a ran_at_batch point has no error, only met or not
// met; both are counted among the metric's points, and a point that ran but is predicted out of
// memory at its batch is listed.
TEST(ValidationSummary, CountsBoundsMetAndRunsPredictedOutOfMemory) {
  ValidationResult met = result("met", ValidationMetric::max_batch, 0.0);
  met.point.bound = Bound::lower;
  met.met = true;
  met.point.published = 1;
  ValidationResult missed = result("missed", ValidationMetric::max_batch, -0.5);
  missed.point.bound = Bound::lower;
  missed.met = false;
  ValidationResult fits = result("fits", ValidationMetric::ran_at_batch, std::nullopt);
  fits.predicted = 0.9;
  fits.met = true;
  ValidationResult oom = result("oom", ValidationMetric::ran_at_batch, std::nullopt);
  oom.predicted = 1.1;
  oom.met = false;
  oom.out_of_memory = true;
  ValidationResult oom_peak = result("oom-peak", ValidationMetric::peak_mem_bytes, std::nullopt, true);
  oom_peak.out_of_memory = true;
  const std::vector<ValidationResult> results{met, missed, result("exact", ValidationMetric::max_batch, 0.2), fits, oom, oom_peak};
  const auto summaries = summarize(results);
  ASSERT_EQ(summaries.size(), 3u);
  EXPECT_EQ(summaries[0].metric, ValidationMetric::peak_mem_bytes);
  EXPECT_EQ(summaries[0].not_covered, 1);
  const MetricSummary& max_batch = summaries[1];
  EXPECT_EQ(max_batch.count, 3);
  EXPECT_EQ(max_batch.bounded, 2);
  EXPECT_EQ(max_batch.met, 1);
  EXPECT_DOUBLE_EQ(max_batch.median_abs_error, 0.2);  // |errors| 0 0.2 0.5
  EXPECT_DOUBLE_EQ(max_batch.worst_abs_error, 0.5);
  const MetricSummary& ran = summaries[2];
  EXPECT_EQ(ran.metric, ValidationMetric::ran_at_batch);
  EXPECT_EQ(ran.count, 2);
  EXPECT_EQ(ran.bounded, 2);
  EXPECT_EQ(ran.met, 1);
  EXPECT_EQ(ran.not_covered, 0);
  EXPECT_TRUE(ran.worst_id.empty());  // no error to summarize
  EXPECT_EQ(ran_but_predicted_out_of_memory(results), (std::vector<std::string>{"oom", "oom-peak"}));
  const std::string text = validation_text(results);
  EXPECT_THAT(text, HasSubstr("not met, -50.0%"));
  EXPECT_THAT(text, HasSubstr("OOM 110.0%"));
  EXPECT_THAT(text, HasSubstr("fits 90.0%"));
  EXPECT_THAT(text, HasSubstr("1 of 2"));
  EXPECT_THAT(text, HasSubstr("predicted out of memory at their batch: 2 (oom, oom-peak)"));
  EXPECT_THAT(validation_markdown({met}), HasSubstr("| >= 1 | 1 | met |"));
}

// A ran_at_batch point simulates its scenario at its batch: met when it fits, with its reserved
// peak's share of the usable memory; out of memory, not met and listed.
TEST(ValidatePrediction, RanAtBatchIsWhetherTheBatchFits) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "comptrain_validate_ran_at_batch";
  std::filesystem::create_directories(dir);
  // ResNet-18 at batch 8 fits an 80 GB A100; at batch 4096 in fp32 its activations alone are
  // far beyond it (about 4096 x 25 MB of saved feature maps per image at 224 x 224).
  for (const int batch : {8, 4096}) {
    std::ofstream(dir / fmt::format("b{}.yaml", batch))
        << fmt::format("model: {{zoo: resnet18}}\ntraining: {{batch_size: {}, precision: fp32, optimizer: momentum}}\nplatform: a100-80gb\n", batch);
  }
  const auto point = [](int batch) {
    return fmt::format(R"({{"id": "b{0}", "source": "s", "model": "resnet18", "gpu": "A100", "precision": "fp32", "batch": {0}, )"
                       R"("metric": "ran_at_batch", "published": {0}, "unit": "samples", "notes": "n", "scenario": "b{0}.yaml"}})" "\n",
                       batch);
  };
  const ValidationTable table = parse_validation_table(point(8) + point(4096), "t.jsonl", dir);
  const auto results = validate(table, ValidateOptions{.fast = false, .jobs = 1});
  ASSERT_EQ(results.size(), 2u);
  const PreparedScenario prepared(load_scenario_file(dir / "b8.yaml"));
  const RunOutcome outcome = run_scenario(prepared, prepared.scenario().strategy, 8, Isolation::child_process);
  ASSERT_TRUE(std::holds_alternative<CompletedRun>(outcome));
  const DeviceMemory& device = std::get<CompletedRun>(outcome).result.device;
  ASSERT_TRUE(results[0].predicted.has_value()) << results[0].why_none;
  EXPECT_DOUBLE_EQ(*results[0].predicted, static_cast<double>(device.peak_reserved) / static_cast<double>(device.framework.usable_bytes()));
  EXPECT_LT(*results[0].predicted, 1);
  EXPECT_EQ(results[0].met, true);
  EXPECT_FALSE(results[0].out_of_memory);
  EXPECT_FALSE(results[0].error.has_value());
  ASSERT_TRUE(results[1].predicted.has_value());
  EXPECT_GT(*results[1].predicted, 1);
  EXPECT_EQ(results[1].met, false);
  EXPECT_TRUE(results[1].out_of_memory);
  EXPECT_THAT(results[1].why_none, HasSubstr("out of memory at batch 4096"));
  EXPECT_EQ(ran_but_predicted_out_of_memory(results), std::vector<std::string>{"b4096"});
  std::filesystem::remove_all(dir);
}

// Multi-GPU sources publish the whole job's samples/s: a throughput point predicts the per-GPU
// micro-batch times the scenario's GPUs and micro-steps over its iteration time, and a one-GPU
// point without accumulation the batch alone.
// --points keeps the points whose id matches one of its shell patterns, in table order; a pattern
// that matches nothing is an error naming the table, not an empty result.
TEST(ValidatePrediction, PointsSelectsByIdPattern) {
  const auto point = [](const std::string& id) {
    return R"({"id": ")" + id + R"(", "source": "s", "gpu": "A100", "metric": "bus_bandwidth", "platform": "a100-40gb", "nodes": 1, )"
           R"("gpus_per_node": 8, "collective": "all_reduce", "bytes": 1073741824, "published": 230, "unit": "GB/s", "notes": "n"})" "\n";
  };
  const ValidationTable table = parse(point("ring-a") + point("tree-b") + point("ring-c"));
  const auto ids = [](const std::vector<ValidationResult>& results) {
    std::vector<std::string> out;
    for (const ValidationResult& r : results) out.push_back(r.point.id);
    return out;
  };
  EXPECT_EQ(ids(validate(table, {.jobs = 1, .points = {"ring-*"}})), (std::vector<std::string>{"ring-a", "ring-c"}));
  EXPECT_EQ(ids(validate(table, {.jobs = 1, .points = {"tree-?", "ring-c"}})), (std::vector<std::string>{"tree-b", "ring-c"}));
  EXPECT_EQ(ids(validate(table, {.jobs = 1})).size(), 3u);
  try {
    validate(table, {.jobs = 1, .points = {"ring-*", "nope"}});
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("t.jsonl: no point's id matches \"nope\""));
  }
}

TEST(ValidatePrediction, ThroughputIsTheWholeJobs) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "comptrain_validate_global_throughput";
  std::filesystem::create_directories(dir);
  const std::string one = "model: {zoo: resnet18}\ntraining: {batch_size: 8, precision: fp32, optimizer: momentum}\nplatform: a100-80gb\n";
  std::ofstream(dir / "one.yaml") << one;
  std::ofstream(dir / "four.yaml") << one << "parallelism: {nodes: 1, gpus_per_node: 4}\n";
  std::ofstream(dir / "four-x3.yaml") << "model: {zoo: resnet18}\ntraining: {batch_size: 8, precision: fp32, optimizer: momentum, "
                                         "gradient_accumulation_steps: 3}\nplatform: a100-80gb\nparallelism: {nodes: 1, gpus_per_node: 4}\n";
  const auto point = [](const std::string& id, const std::string& scenario) {
    return R"({"id": ")" + id + R"(", "source": "s", "model": "resnet18", "gpu": "A100", "precision": "fp32", "batch": 8, )"
           R"("metric": "throughput_samples_per_s", "published": 1000, "unit": "images/s", "notes": "n", "scenario": ")" + scenario + "\"}\n";
  };
  const ValidationTable table =
      parse_validation_table(point("one", "one.yaml") + point("four", "four.yaml") + point("four-x3", "four-x3.yaml"), "t.jsonl", dir);
  const auto results = validate(table, ValidateOptions{.fast = false, .jobs = 1});
  ASSERT_EQ(results.size(), 3u);
  // Micro-batches one iteration trains: GPUs x micro-steps.
  for (const auto& [index, file, micro_batches] : {std::tuple{0, "one.yaml", 1}, std::tuple{1, "four.yaml", 4}, std::tuple{2, "four-x3.yaml", 12}}) {
    SCOPED_TRACE(file);
    const PreparedScenario prepared(load_scenario_file(dir / file));
    const RunOutcome outcome = run_scenario(prepared, prepared.scenario().strategy, 8, Isolation::child_process);
    ASSERT_TRUE(std::holds_alternative<CompletedRun>(outcome));
    const double iteration = std::get<CompletedRun>(outcome).result.iteration_seconds;
    ASSERT_TRUE(results[index].predicted.has_value()) << results[index].why_none;
    EXPECT_NEAR(*results[index].predicted, 8.0 * micro_batches / iteration, 1e-9 * 8.0 * micro_batches / iteration);
  }
  std::filesystem::remove_all(dir);
}

// A pipeline-parallel point replays every stage together: its throughput is the global batch
// (micro-batch x micro-batches x data-parallel replicas) over the time the last stage ends, its
// peak the highest stage's, and ran_at_batch the highest stage's share of the usable memory.
TEST(ValidatePrediction, PipelinePointsReplayEveryStage) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "comptrain_validate_pipeline";
  std::filesystem::create_directories(dir);
  // A 4-layer GPT on 4 GPUs: tensor 1 x pipeline 2 x data 2, 4 micro-batches of 2 per replica.
  std::ofstream(dir / "pp.yaml") << "model: {zoo: gpt, layers: 4, hidden: 256, heads: 4, seq_len: 128, vocab: 1000}\n"
                                    "training: {batch_size: 2, precision: mixed, optimizer: adam, gradient_accumulation_steps: 4}\n"
                                    "platform: dgx-a100-superpod\n"
                                    "parallelism: {nodes: 1, gpus_per_node: 4, pipeline: 2, pipeline_schedule: 1f1b}\n";
  const auto point = [](const std::string& id, const std::string& metric, const std::string& published, const std::string& extra) {
    return R"({"id": ")" + id + R"(", "source": "s", "model": "gpt", "gpu": "A100", "precision": "mixed", "batch": 2, "metric": ")" + metric +
           R"(", "published": )" + published + R"(, "unit": "u", "notes": "n", "scenario": "pp.yaml")" + extra + "}\n";
  };
  const ValidationTable table = parse_validation_table(point("tput", "throughput_samples_per_s", "1000", "") +
                                                           point("peak", "peak_mem_bytes", "1e9", R"(, "measured_as": "max_memory_reserved")") +
                                                           point("ran", "ran_at_batch", "2", ""),
                                                       "t.jsonl", dir);
  const auto results = validate(table, ValidateOptions{.fast = false, .jobs = 1});
  ASSERT_EQ(results.size(), 3u);
  const PreparedScenario prepared(load_scenario_file(dir / "pp.yaml"));
  const PipelineOutcome outcome = run_pipeline(prepared, prepared.scenario().strategy, 2, Isolation::child_process);
  ASSERT_TRUE(std::holds_alternative<PipelineRun>(outcome));
  const PipelineSimulationResult& r = std::get<PipelineRun>(outcome).result;
  ASSERT_EQ(r.stages.size(), 2u);
  ASSERT_TRUE(r.fits());
  ASSERT_TRUE(results[0].predicted.has_value()) << results[0].why_none;
  EXPECT_NEAR(*results[0].predicted, 2.0 * 4 * 2 / r.iteration_seconds, 1e-9 * 16 / r.iteration_seconds);
  std::int64_t highest = 0;
  double highest_share = 0;
  for (const SimulationResult& stage : r.stages) {
    highest = std::max(highest, stage.device.peak_reserved);
    highest_share = std::max(highest_share, static_cast<double>(stage.device.peak_reserved) / static_cast<double>(stage.device.framework.usable_bytes()));
  }
  // The two stages differ (the embedding on the first, the head and loss on the last).
  EXPECT_NE(r.stages[0].device.peak_reserved, r.stages[1].device.peak_reserved);
  ASSERT_TRUE(results[1].predicted.has_value()) << results[1].why_none;
  EXPECT_EQ(*results[1].predicted, static_cast<double>(highest));
  ASSERT_TRUE(results[2].predicted.has_value()) << results[2].why_none;
  EXPECT_DOUBLE_EQ(*results[2].predicted, highest_share);
  EXPECT_EQ(results[2].met, true);
  std::filesystem::remove_all(dir);
}

// A scenario with a data section is predicted with its loader: the throughput over the I/O
// simulation's iteration (its waits for the batch), and a slowdown of real over synthetic data
// (the same scenario without the section) is that iteration over the replayed one.
TEST(ValidatePrediction, DataSectionThroughputAndSlowdownIncludeTheLoader) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "comptrain_validate_data_loader";
  std::filesystem::create_directories(dir);
  const std::string synthetic = "model: {zoo: resnet18}\ntraining: {batch_size: 8, precision: fp32, optimizer: momentum}\nplatform: a100-80gb\n";
  std::ofstream(dir / "synthetic.yaml") << synthetic;
  // One worker decoding 8 samples at 50 ms: 0.4 s per batch, far slower than the GPU (a100-80gb's local disks: 50 GB/s).
  std::ofstream(dir / "real.yaml") << synthetic << "data: {bytes_per_sample: 110 KB, decode_per_sample: 50 ms, workers_per_gpu: 1, from: local}\n";
  const std::string common = R"("source": "s", "model": "resnet18", "gpu": "A100", "precision": "fp32", "batch": 8, "notes": "n", )";
  const ValidationTable table = parse_validation_table(
      R"({"id": "t", )" + common + R"("metric": "throughput_samples_per_s", "published": 20, "unit": "images/s", "scenario": "real.yaml"})" "\n" +
          R"({"id": "s", )" + common +
          R"("metric": "slowdown_x", "published": 2, "unit": "x", "scenario": "real.yaml", "reference_scenario": "synthetic.yaml"})" "\n",
      "t.jsonl", dir);
  const auto results = validate(table, ValidateOptions{.fast = false, .jobs = 1});
  ASSERT_EQ(results.size(), 2u);
  const PreparedScenario real(load_scenario_file(dir / "real.yaml"));
  const RunOutcome outcome = run_scenario(real, real.scenario().strategy, 8, Isolation::child_process);
  ASSERT_TRUE(std::holds_alternative<CompletedRun>(outcome));
  const CompletedRun& run = std::get<CompletedRun>(outcome);
  ASSERT_TRUE(run.io.has_value());
  EXPECT_EQ(run.io->bound, IterationBound::loader);
  // The worker's batch: 880 KB read from the node's disks, then 0.4 s of decode; the launching
  // thread has a core of its own.
  ASSERT_TRUE(real.platform().storage && real.platform().storage->local);
  const double batch_seconds = 8 * 110e3 / real.platform().storage->local->read_bandwidth + 8 * 0.05;
  EXPECT_NEAR(run.io->steady_iteration_seconds, batch_seconds, 1e-9);
  double launch = 0;
  for (const models::Task& task : run.scheduled.schedule.tasks) launch += task.host_seconds;
  EXPECT_GT(launch, 0);
  EXPECT_NEAR(run.io->launch_seconds, launch, 1e-12);
  ASSERT_TRUE(results[0].predicted.has_value()) << results[0].why_none;
  EXPECT_NEAR(*results[0].predicted, 8.0 / batch_seconds, 1e-6);
  ASSERT_TRUE(results[1].predicted.has_value()) << results[1].why_none;
  EXPECT_NEAR(*results[1].predicted, batch_seconds / run.result.iteration_seconds, 1e-6);
  EXPECT_GT(*results[1].predicted, 2.0);
  std::filesystem::remove_all(dir);
}

ValidationResult grouped(const std::string& id, ValidationMetric metric, double error, const std::string& generation, const std::string& family,
                          bool suspect = false) {
  ValidationResult r = result(id, metric, error, suspect);
  r.generation = generation;
  r.point.family = family;
  return r;
}

// A hand-made table whose medians per generation and per family are known: each metric with
// points in two groups or more of a dimension gets that dimension's groups, suspect points left
// out, groups in architecture order and family order, a point without a group under "unknown".
// A kernel_seconds point names ops of its scenario (fnmatch patterns); the prediction is the sum of
// those ops' kernel times in the schedule (the op-time model's, launches included), and a pattern
// that names no op leaves the point without a prediction, saying which. `ops` belongs to
// kernel_seconds points only and must be a non-empty array of strings.
TEST(ValidatePrediction, KernelSecondsSumsTheNamedOpsTimes) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "comptrain_validate_kernel_seconds";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "r.yaml") << "model: {zoo: resnet18}\ntraining: {batch_size: 8, precision: fp32, optimizer: momentum}\nplatform: a100-80gb\n";
  const auto point = [](const std::string& id, const std::string& ops) {
    return R"({"id": ")" + id + R"(", "source": "s", "model": "resnet18", "gpu": "A100", "precision": "fp32", "batch": 8, )"
           R"("metric": "kernel_seconds", "published": 0.001, "unit": "s", "notes": "n", "scenario": "r.yaml", "ops": )" + ops + "}\n";
  };
  const ValidationTable table = parse_validation_table(
      point("conv1", R"(["conv1"])") + point("both", R"(["conv1", "conv1.backward"])") + point("glob", R"(["conv1*"])") +
          point("none", R"(["conv1", "no.such.op"])") + point("overlap", R"(["conv1*", "conv1"])"),
      "t.jsonl", dir);
  ASSERT_EQ(table.points[1].ops, (std::vector<std::string>{"conv1", "conv1.backward"}));
  const auto results = validate(table, ValidateOptions{.fast = false, .jobs = 1});
  ASSERT_EQ(results.size(), 5u);
  const PreparedScenario prepared(load_scenario_file(dir / "r.yaml"));
  const auto scheduled = schedule_run(prepared, prepared.scenario().strategy, 8);
  ASSERT_TRUE(std::holds_alternative<ScheduledRun>(scheduled));
  double forward = 0, backward = 0;
  for (const models::Task& task : std::get<ScheduledRun>(scheduled).schedule.tasks) {
    if (task.kind != models::TaskKind::op) continue;
    if (task.name == "conv1") forward += task.seconds;
    if (task.name == "conv1.backward") backward += task.seconds;
  }
  ASSERT_GT(forward, 0);
  ASSERT_GT(backward, 0);
  ASSERT_TRUE(results[0].predicted.has_value()) << results[0].why_none;
  EXPECT_DOUBLE_EQ(*results[0].predicted, forward);
  ASSERT_TRUE(results[1].predicted.has_value()) << results[1].why_none;
  EXPECT_DOUBLE_EQ(*results[1].predicted, forward + backward);
  ASSERT_TRUE(results[2].predicted.has_value()) << results[2].why_none;
  EXPECT_DOUBLE_EQ(*results[2].predicted, forward + backward);
  EXPECT_FALSE(results[3].predicted.has_value());
  EXPECT_THAT(results[3].why_none, HasSubstr("no op of the schedule is named like 'no.such.op'"));
  // Two patterns naming one op: it counts once, and neither pattern is unmatched.
  ASSERT_TRUE(results[4].predicted.has_value()) << results[4].why_none;
  EXPECT_DOUBLE_EQ(*results[4].predicted, forward + backward);
  std::filesystem::remove_all(dir);

  const std::string kernel = R"({"id": "k", "source": "s", "model": "m", "gpu": "g", "precision": "fp32", "batch": 32, "metric": "kernel_seconds", )"
                             R"("published": 0.001, "unit": "s", "notes": "n", "scenario": "default.yaml")";
  EXPECT_THAT(error_of(kernel + "}"), HasSubstr("t.jsonl:1: missing field 'ops'; expected the op-name patterns"));
  EXPECT_THAT(error_of(kernel + R"(, "ops": []})"), HasSubstr("field 'ops': found an array of 0 items; expected a non-empty array of op-name patterns"));
  EXPECT_THAT(error_of(kernel + R"(, "ops": "conv1"})"), HasSubstr("expected a non-empty array of op-name patterns"));
  EXPECT_THAT(error_of(kernel + R"(, "ops": ["conv1", 3]})"), HasSubstr("field 'ops': found 3; expected op-name patterns"));
  std::string throughput = kPoint;
  throughput.insert(1, R"("ops": ["conv1"], )");
  EXPECT_THAT(error_of(throughput), HasSubstr("field 'ops' given for throughput_samples_per_s; expected it only on kernel_seconds points"));
}

TEST(ValidationSummary, MediansPerGenerationAndPerFamily) {
  const auto t = ValidationMetric::throughput_samples_per_s;
  std::vector<ValidationResult> results{
      grouped("v1", t, 0.10, "Volta", "cnn"),      grouped("v2", t, -0.30, "Volta", "encoder"), grouped("v3", t, 0.02, "Volta", "cnn"),
      grouped("h1", t, -0.04, "Hopper", "decoder"), grouped("h2", t, 0.08, "Hopper", "decoder"), grouped("a1", t, 0.5, "Ampere", "encoder"),
      grouped("h3", t, 9.0, "Hopper", "moe", true),  // suspect: left out everywhere
      grouped("x1", t, -0.2, "", "moe"),             // no generation: "unknown"
      // One generation and one family: no breakdown for this metric.
      grouped("p1", ValidationMetric::peak_mem_bytes, 0.3, "Ampere", "decoder"), grouped("p2", ValidationMetric::peak_mem_bytes, 0.1, "Ampere", "decoder"),
  };
  ValidationResult no_prediction = grouped("n1", t, 0, "Volta", "cnn");
  no_prediction.predicted.reset();
  no_prediction.error.reset();
  results.push_back(no_prediction);
  const std::vector<GroupSummary> groups = summarize_groups(results);
  ASSERT_EQ(groups.size(), 8u);
  const auto expect = [&](std::size_t i, const std::string& by, const std::string& group, int count, double median, double worst, const std::string& worst_id) {
    SCOPED_TRACE(fmt::format("group {}: {} {}", i, by, group));
    EXPECT_EQ(groups[i].metric, ValidationMetric::throughput_samples_per_s);
    EXPECT_EQ(groups[i].by, by);
    EXPECT_EQ(groups[i].group, group);
    EXPECT_EQ(groups[i].count, count);
    EXPECT_DOUBLE_EQ(groups[i].median_abs_error, median);
    EXPECT_DOUBLE_EQ(groups[i].worst_abs_error, worst);
    EXPECT_EQ(groups[i].worst_id, worst_id);
  };
  expect(0, "generation", "Volta", 3, 0.10, 0.30, "v2");  // |errors| 0.02 0.10 0.30
  expect(1, "generation", "Ampere", 1, 0.5, 0.5, "a1");
  expect(2, "generation", "Hopper", 2, 0.06, 0.08, "h2");  // |errors| 0.04 0.08; the suspect h3 left out
  expect(3, "generation", "unknown", 1, 0.2, 0.2, "x1");
  expect(4, "family", "cnn", 2, 0.06, 0.10, "v1");  // |errors| 0.02 0.10; n1 has no prediction
  expect(5, "family", "encoder", 2, 0.4, 0.5, "a1");  // |errors| 0.30 0.50
  expect(6, "family", "decoder", 2, 0.06, 0.08, "h2");
  expect(7, "family", "moe", 1, 0.2, 0.2, "x1");
  const std::string text = validation_text(results);
  EXPECT_THAT(text, HasSubstr("Summary per GPU generation"));
  EXPECT_THAT(text, ::testing::ContainsRegex("throughput_samples_per_s +generation Volta +3 +10.0% +30.0% +v2"));
  EXPECT_THAT(text, ::testing::ContainsRegex("throughput_samples_per_s +family encoder +2 +40.0% +50.0% +a1"));
  EXPECT_THAT(validation_markdown(results), HasSubstr("| throughput_samples_per_s | generation | Hopper | 2 | 6.0% | 8.0% | `h2` |"));
  EXPECT_THAT(validation_json("t.jsonl", results), HasSubstr(R"("by": "family")"));
}

// Each suspect point is listed with its reason below the summaries.
TEST(ValidationSummary, SuspectPointsAreListedWithTheirReasons) {
  ValidationResult r = result("s1", ValidationMetric::max_batch, 0.5, true);
  r.point.suspect_reason = "the GPU is not stated | nor its memory";
  const std::vector<ValidationResult> results{r, result("ok", ValidationMetric::max_batch, 0.1)};
  EXPECT_THAT(validation_text(results), HasSubstr("Suspect points (1: the measured hardware or setup cannot be known), left out of the summaries:\n"
                                                  "s1: the GPU is not stated | nor its memory\n"));
  EXPECT_THAT(validation_markdown(results), HasSubstr("| `s1` | the GPU is not stated \\| nor its memory |"));
  EXPECT_THAT(validation_json("t.jsonl", results), HasSubstr(R"("suspect_reason": "the GPU is not stated | nor its memory")"));
  EXPECT_THAT(validation_text({results[1]}), ::testing::Not(HasSubstr("Suspect points")));
}

TEST(ValidationSummary, TextShowsSignedErrorsAndTheSummary) {
  const std::string text = validation_text({result("a", ValidationMetric::slowdown_x, 0.25)});
  EXPECT_THAT(text, HasSubstr("+25.0%"));
  EXPECT_THAT(text, HasSubstr("slowdown_x"));
  EXPECT_THAT(text, HasSubstr("median |error|"));
}

}  // namespace
}  // namespace comptrain::sim

// `error_bound: adaptive` in scenarios (issue 16): the compress rule's keys and their errors at
// their line, the per-tensor bounds, ratios and predicted gradient errors in the text and JSON
// reports, and the bounds the run layer gives the planner at each batch (the tolerance holds at
// every batch). The model itself is tested in tests/models/gradient_error_test.cpp.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comptrain/models/strategy_yaml.hpp"
#include "comptrain/sim/studies/plan.hpp"
#include "comptrain/sim/report/simulate_report.hpp"
#include "comptrain/sim/run/run.hpp"
#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/traces/trace_json.hpp"
#include "models/gradient_mlp.hpp"

namespace comptrain::sim {
namespace {

using testing::HasSubstr;
using traces::OpKind;
using traces::Phase;
using traces::TensorRole;

// The error model's MLP (tests/models/gradient_mlp.hpp): a1 carries l2's gradient statistics and
// is also read by a ReLU's backward; p is read by softmax's backward (the model does not cover it).
traces::Trace mlp() { return test_support::Mlp().build(); }

std::filesystem::path trace_file() {
  static const std::filesystem::path path = [] {
    const auto dir = std::filesystem::temp_directory_path() / "comptrain_adaptive_bound_test";
    std::filesystem::create_directories(dir);
    const auto file = dir / "mlp.json";
    traces::write_trace_file(mlp(), file);
    return file;
  }();
  return path;
}

Scenario scenario(const std::string& compress, const std::string& select = "{names: [y1]}") {
  return parse_scenario("name: adaptive\nmodel: {trace: " + trace_file().string() + "}\nplatform: a100-40gb\nstrategy:\n  name: adaptive\n  rules:\n    - select: " +
                            select + "\n      compress: " + compress + "\n",
                        "s.yaml", ".");
}

std::string error_of(const std::string& compress) {
  try {
    scenario(compress);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(AdaptiveScenario, ReadsTheRule) {
  const Scenario s = scenario("{profile: auto, codec: szp, error_bound: adaptive, gradient_error_tolerance: 0.02, fallback_error_bound: 1e-3, error_bound_mode: abs}");
  const models::CompressAction* c = s.strategy.rules.at(0).compress();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->adaptive.has_value());
  EXPECT_EQ(c->adaptive->tolerance, 0.02);
  EXPECT_EQ(c->adaptive->fallback_error_bound, 1e-3);
  EXPECT_EQ(c->error_bound_mode, ErrorBoundMode::abs);
  const models::CompressAction* fixed = scenario("{profile: auto, error_bound: 1e-3}").strategy.rules.at(0).compress();
  EXPECT_FALSE(fixed->adaptive.has_value());
  EXPECT_EQ(fixed->error_bound, 1e-3);
  // positive_mask: relu by default under an adaptive bound, none under a fixed one; given, as given.
  using Mask = models::CompressAction::PositiveMask;
  EXPECT_EQ(c->positive_mask, Mask::relu);
  EXPECT_EQ(fixed->positive_mask, Mask::none);
  EXPECT_EQ(scenario("{profile: auto, error_bound: 1e-3, positive_mask: true}").strategy.rules.at(0).compress()->positive_mask, Mask::all);
  EXPECT_EQ(scenario("{profile: auto, error_bound: 1e-3, positive_mask: relu}").strategy.rules.at(0).compress()->positive_mask, Mask::relu);
  EXPECT_EQ(scenario("{profile: auto, error_bound: adaptive, gradient_error_tolerance: 0.01, positive_mask: false}").strategy.rules.at(0).compress()->positive_mask,
            Mask::none);
  // Written back (the scenarios plans write) where it differs from the reader's default.
  EXPECT_THAT(models::strategy_to_yaml(scenario("{profile: auto, error_bound: 1e-3, positive_mask: true}").strategy), HasSubstr("positive_mask: true"));
  EXPECT_THAT(models::strategy_to_yaml(scenario("{profile: auto, error_bound: adaptive, gradient_error_tolerance: 0.01, positive_mask: false}").strategy),
              HasSubstr("positive_mask: false"));
  EXPECT_THAT(models::strategy_to_yaml(s.strategy), testing::Not(HasSubstr("positive_mask")));
}

TEST(AdaptiveScenario, BadRulesExitAtTheirLine) {
  // Line 8 is the compress rule; columns point at the key.
  EXPECT_THAT(error_of("{profile: auto, error_bound: adaptive}"), HasSubstr("needs 'gradient_error_tolerance'"));
  EXPECT_THAT(error_of("{profile: auto, error_bound: adaptive, gradient_error_tolerance: 0}"), HasSubstr("s.yaml:8:"));
  EXPECT_THAT(error_of("{profile: auto, error_bound: adaptive, gradient_error_tolerance: 0}"), HasSubstr("expected a finite number > 0"));
  EXPECT_THAT(error_of("{profile: auto, error_bound: adaptive, gradient_error_tolerance: -1}"), HasSubstr("expected a finite number > 0"));
  EXPECT_THAT(error_of("{profile: auto, error_bound: adaptive, gradient_error_tolerance: .inf}"), HasSubstr("gradient_error_tolerance' is '.inf'; expected a number"));
  EXPECT_THAT(error_of("{profile: auto, error_bound: adaptive, gradient_error_tolerance: lots}"), HasSubstr("expected a number"));
  EXPECT_THAT(error_of("{profile: auto, error_bound: adaptive, gradient_error_tolerance: 0.01, fallback_error_bound: 0}"),
              HasSubstr("fallback_error_bound' is 0; expected a finite number > 0"));
  EXPECT_THAT(error_of("{profile: auto, error_bound: 1e-3, gradient_error_tolerance: 0.01}"), HasSubstr("applies with 'error_bound: adaptive' only"));
  EXPECT_THAT(error_of("{profile: auto, error_bound: 1e-3, fallback_error_bound: 0.01}"), HasSubstr("applies with 'error_bound: adaptive' only"));
  EXPECT_THAT(error_of("{ratio: 4, compress_bandwidth: 1 GB/s, decompress_bandwidth: 1 GB/s, error_bound: adaptive, gradient_error_tolerance: 0.01}"),
              HasSubstr("needs 'profile'"));
  EXPECT_THAT(error_of("{profile: auto, ratio: 4, error_bound: adaptive, gradient_error_tolerance: 0.01}"), HasSubstr("expected no ratio"));
  EXPECT_THAT(error_of("{profile: cpu-epyc-2core, codec: zfp, error_bound: adaptive, gradient_error_tolerance: 0.01}"), HasSubstr("needs szp or szh"));
  EXPECT_THAT(error_of("{profile: auto, error_bound: adaptive, gradient_error_tolerance: 0.01, error_bound_mode: relative}"),
              HasSubstr("error_bound_mode' is 'relative'"));
  EXPECT_THAT(error_of("{profile: auto, error_bound: 1e-3, positive_mask: maybe}"), HasSubstr("s.yaml:8:"));
  EXPECT_THAT(error_of("{profile: auto, error_bound: 1e-3, positive_mask: maybe}"),
              HasSubstr("positive_mask' is 'maybe'; expected relu (keep the sign of the tensors a ReLU's backward reads), true (of every tensor) or false"));
  EXPECT_THAT(error_of("{profile: auto, error_bound: 1e-3, positive_mask: [relu]}"), HasSubstr("s.yaml:8:"));
  EXPECT_THAT(error_of("{profile: cpu-epyc-2core, codec: zfp, error_bound: 1e-3, positive_mask: relu}"),
              HasSubstr("positive_mask' needs 'profile' and codec szp or szh (got codec 'zfp')"));
  EXPECT_THAT(error_of("{ratio: 4, compress_bandwidth: 1 GB/s, decompress_bandwidth: 1 GB/s, positive_mask: true}"),
              HasSubstr("positive_mask' needs 'profile' and codec szp or szh (got no profile)"));
  EXPECT_EQ(error_of("{profile: cpu-epyc-2core, codec: zfp, error_bound: 1e-3, positive_mask: false}"), "no error");
}

// The trace decides the rest when the strategy is built: a selected tensor the model does not
// cover, without a fallback, is an InputError naming it (exit 2).
TEST(AdaptiveScenario, UncoveredTensorsAreNamedWhenTheStrategyIsBuilt) {
  const PreparedScenario prepared(scenario("{profile: auto, error_bound: adaptive, gradient_error_tolerance: 0.01}", "{inputs_of: [linear]}"));
  try {
    schedule_run(prepared, prepared.scenario().strategy, 4);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot bound 'p'"));
    EXPECT_THAT(e.what(), HasSubstr("'sm.backward' (softmax)"));
  }
}

TEST(AdaptiveScenario, ReportsListTheBoundRatioAndPredictionPerTensor) {
  const PreparedScenario prepared(
      scenario("{profile: auto, error_bound: adaptive, gradient_error_tolerance: 0.01, fallback_error_bound: 1e-3}", "{inputs_of: [linear]}"));
  const RunOutcome outcome = run_scenario(prepared, prepared.scenario().strategy, 4, Isolation::child_process);
  const std::string text = report(prepared, prepared.scenario().strategy, 4, outcome, false);
  EXPECT_THAT(text, HasSubstr("error bound adaptive: predicted weight-gradient error <= 0.01 of each layer's RMS (fallback 0.001)"));
  // y1: eb = 0.01 * 2e-3 / (1e-3 * sqrt(0.5 * 4 / 3)) = 0.02449 absolute, / 4 = 6.124e-03 relative.
  // y1 is read by a ReLU's backward too: its stream keeps the positive mask (the adaptive default).
  EXPECT_THAT(text, testing::ContainsRegex("y1 +adaptive +6\\.124e-03 +2\\.449e-02 +[0-9.]+ +1 % +l2 \\[m\\]"));
  EXPECT_THAT(text, testing::ContainsRegex("p +fallback +1\\.000e-03 +1\\.000e-03 +[0-9.]+ +- +the backward op 'sm.backward'"));
  EXPECT_THAT(text, HasSubstr("[m] a ReLU's backward reads it too, and its stream keeps the positive mask"));
  EXPECT_THAT(text, testing::Not(HasSubstr("[r] a ReLU's backward reads it too")));
  EXPECT_THAT(text, testing::Not(HasSubstr("gradient statistics measured at")));  // at the captured batch
  const RunOutcome at16 = run_scenario(prepared, prepared.scenario().strategy, 16, Isolation::child_process);
  EXPECT_THAT(report(prepared, prepared.scenario().strategy, 16, at16, false), HasSubstr("gradient statistics measured at batch 4, used at this batch"));

  const auto j = nlohmann::json::parse(report(prepared, prepared.scenario().strategy, 4, outcome, true));
  EXPECT_EQ(j["schema"]["version"], 6);
  EXPECT_EQ(j["strategy"]["rules"][0]["compress"]["error_bound"], "adaptive");
  EXPECT_EQ(j["strategy"]["rules"][0]["compress"]["gradient_error_tolerance"], 0.01);
  EXPECT_EQ(j["strategy"]["rules"][0]["compress"]["fallback_error_bound"], 1e-3);
  const auto& c = j["compression"][0];
  EXPECT_EQ(c["error_bound"], "adaptive");
  EXPECT_EQ(c["gradient_error_tolerance"], 0.01);
  ASSERT_EQ(c["tensors"].size(), 2u);
  const auto& y1 = c["tensors"][0];
  EXPECT_EQ(y1["tensor"], "y1");
  EXPECT_EQ(y1["bound_from"], "adaptive");
  EXPECT_TRUE(y1["why_fallback"].is_null());
  EXPECT_NEAR(y1["absolute_error_bound"].get<double>(), 0.01 * 2e-3 / (1e-3 * std::sqrt(0.5 * 4.0 / 3.0)), 1e-15);
  EXPECT_NEAR(y1["predicted_relative_gradient_error"].get<double>(), 0.01, 1e-15);
  EXPECT_EQ(y1["layers"], nlohmann::json::array({"l2"}));
  EXPECT_FALSE(y1["relu_mask_not_modelled"].get<bool>());
  EXPECT_TRUE(y1["positive_mask"].get<bool>());
  EXPECT_TRUE(y1["statistics_batch_size"].is_null());
  EXPECT_GT(y1["ratio"].get<double>(), 1.0);
  const auto& p = c["tensors"][1];
  EXPECT_EQ(p["bound_from"], "fallback");
  EXPECT_TRUE(p["predicted_relative_gradient_error"].is_null());
  EXPECT_THAT(p["why_fallback"].get<std::string>(), HasSubstr("sm.backward"));
  EXPECT_FALSE(p["positive_mask"].get<bool>());  // no ReLU reads p

  // Without the mask: y1 is flagged [r], and its ratio lacks the mask's bit per value (float32:
  // 1/32 of the bytes), which the masked ratio adds: 1 / r_masked = 1 / r + 1 / 32.
  const PreparedScenario unmasked(scenario(
      "{profile: auto, error_bound: adaptive, gradient_error_tolerance: 0.01, fallback_error_bound: 1e-3, positive_mask: false}", "{inputs_of: [linear]}"));
  const RunOutcome plain = run_scenario(unmasked, unmasked.scenario().strategy, 4, Isolation::child_process);
  EXPECT_THAT(report(unmasked, unmasked.scenario().strategy, 4, plain, false), HasSubstr("[r] a ReLU's backward reads it too"));
  const auto jp = nlohmann::json::parse(report(unmasked, unmasked.scenario().strategy, 4, plain, true));
  const auto& y1_plain = jp["compression"][0]["tensors"][0];
  EXPECT_TRUE(y1_plain["relu_mask_not_modelled"].get<bool>());
  EXPECT_FALSE(y1_plain["positive_mask"].get<bool>());
  EXPECT_NEAR(1.0 / y1["ratio"].get<double>(), 1.0 / y1_plain["ratio"].get<double>() + 1.0 / 32.0, 1e-12);
  EXPECT_EQ(p["ratio"], jp["compression"][0]["tensors"][1]["ratio"]);
}

// The planner simulates each batch through schedule_run, which bounds every tensor for that batch:
// the tolerance holds at every batch, and the bound grows as √batch (RMS(δ) ∝ 1/batch, N ∝ batch,
// traces/FORMAT.md), so the ratio does not fall as the batch grows.
TEST(AdaptiveScenario, TheToleranceHoldsAtEveryBatchThePlannerTries) {
  const PreparedScenario prepared(scenario("{profile: auto, error_bound: adaptive, gradient_error_tolerance: 0.01}"));
  double last_ratio = 0;
  for (const std::int64_t batch : {1, 4, 16, 64}) {
    const auto run = schedule_run(prepared, prepared.scenario().strategy, batch);
    const auto& scheduled = std::get<ScheduledRun>(run);
    const models::TensorBoundUse& y1 = scheduled.schedule.compression.at(0).tensors.at(0);
    EXPECT_NEAR(*y1.predicted_gradient_error, 0.01, 1e-15) << batch;
    EXPECT_NEAR(*y1.absolute_error_bound, 0.01 * 2e-3 / (1e-3 * 4.0 / static_cast<double>(batch) * std::sqrt(0.5 * static_cast<double>(batch) / 3.0)), 1e-12)
        << batch;
    EXPECT_GE(y1.ratio, last_ratio);
    last_ratio = y1.ratio;
  }
  PlanOptions options;
  options.max_batch = 64;
  options.jobs = 1;
  options.progress = false;
  const BatchSizePlan plan = make_plan(prepared.scenario(), {prepared.scenario().strategy}, options);
  ASSERT_EQ(plan.strategies.size(), 1u);
  ASSERT_TRUE(plan.strategies[0].best_batch.has_value());
  const ScheduledRun best = std::get<ScheduledRun>(schedule_run(prepared, prepared.scenario().strategy, *plan.strategies[0].best_batch));
  EXPECT_LE(*best.schedule.compression.at(0).tensors.at(0).predicted_gradient_error, 0.01 * (1 + 1e-12));
}

}  // namespace
}  // namespace comptrain::sim

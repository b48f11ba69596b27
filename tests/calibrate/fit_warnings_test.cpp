// What `comptrain calibrate` prints after fitting: warnings on poor fits (against the thresholds
// calibrate/README.md states) and the summary, whose "ratio at eb" appears only for codecs that
// have an error bound.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "comptrain/calibrate/calibrate.hpp"

namespace comptrain::calibrate {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

models::CodecProfile codec(const std::string& name, double compress_r2, double decompress_r2, double gelu_error) {
  models::CodecProfile c;
  c.codec = name;
  c.compress = {.latency = 1e-5, .bandwidth = 1e9, .r2 = compress_r2, .max_relative_error = 0.46, .provenance = models::Provenance::measured, .source = "test"};
  c.decompress = {.latency = 1e-5, .bandwidth = 2e9, .r2 = decompress_r2, .max_relative_error = 0.05, .provenance = models::Provenance::measured, .source = "test"};
  models::RatioModel m;
  m.c0 = 8;
  m.max_ratio = 10;
  m.default_features = {.zero_fraction = 0.1, .spread = 0.2, .zero_block_fraction = 0, .block_scale = 0.3};
  m.heldout_max_relative_error = 0.05;
  c.ratio[models::TensorClass::generic] = m;
  m.heldout_max_relative_error = gelu_error;
  c.ratio[models::TensorClass::gelu] = m;
  return c;
}

TEST(FitWarnings, PoorTimeAndRatioFitsAreNamed) {
  models::CalibrationProfile p;
  p.codecs.push_back(codec("szp", 0.82, 0.98, 0.21));
  p.codecs.push_back(codec("szh", 0.95, 0.5, 0.54));
  const std::vector<std::string> w = fit_warnings(p);
  ASSERT_EQ(w.size(), 3u) << ::testing::PrintToString(w);
  EXPECT_THAT(w[0], HasSubstr("warning: szp compress time model: R² 0.820 is below 0.9 (max relative error 46 %)"));
  EXPECT_THAT(w[1], HasSubstr("warning: szh decompress time model: R² 0.500 is below 0.9"));
  EXPECT_EQ(w[2], "warning: szh ratio model, class gelu: held-back max relative error 54 % exceeds 25 %");
}

TEST(FitWarnings, AtTheThresholdsThereIsNone) {
  models::CalibrationProfile p;
  p.codecs.push_back(codec("szp", kMinTimeR2, 1.0, kMaxRatioHeldoutError));
  EXPECT_TRUE(fit_warnings(p).empty()) << ::testing::PrintToString(fit_warnings(p));
}

TEST(ProfileSummary, RatioAtAnErrorBoundOnlyForBoundedCodecs) {
  models::CalibrationProfile p;
  p.codecs.push_back(codec("szp", 1, 1, 0));
  p.codecs.push_back(codec("fp16", 1, 1, 0));
  const std::string s = profile_summary(p);
  const std::string szp = s.substr(0, s.find("fp16"));
  const std::string fp16 = s.substr(s.find("fp16"));
  EXPECT_THAT(szp, HasSubstr("ratio generic    at eb 1e-3:   4.00"));
  EXPECT_THAT(fp16, HasSubstr("ratio generic   :   4.00"));
  EXPECT_THAT(fp16, Not(HasSubstr("at eb")));
}

}  // namespace
}  // namespace comptrain::calibrate

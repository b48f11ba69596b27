// Profiles: YAML round trip, errors with file:line:col, the shipped profiles, lookup for
// scenarios; and the schedule's compress tasks costed exactly as the profile predicts.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "comptrain/models/op_time.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/models/profile_yaml.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "common/must_apply.hpp"

namespace comptrain::models {
namespace {

models::CalibrationProfile sample_profile() {
  models::CalibrationProfile p;
  p.name = "test";
  p.device = "Test GPU";
  p.device_kind = "cuda";
  p.platforms = {"a100-40gb"};
  p.date = "2026-11-22";
  p.comptrain_version = "0.1.0";
  models::CodecProfile c;
  c.codec = "szp";
  c.compress = {.latency = 2e-5, .bandwidth = 3e11, .r2 = 0.999, .max_relative_error = 0.03,
                .provenance = models::Provenance::literature, .source = "paper, Tab. 1"};
  c.decompress = {.latency = 1.5e-5, .bandwidth = 5e11, .r2 = 0.998, .max_relative_error = 0.04,
                  .provenance = models::Provenance::measured, .source = "here"};
  models::RatioModel relu;
  relu.c0 = 0.5;
  relu.c_log_eb = -1.4;
  relu.c_zero = -1.7;
  relu.c_zero_block = 0.25;
  relu.c_log_scale = 1.2;
  relu.c_log_spread = -0.1;
  relu.max_ratio = 40;
  relu.default_features = {.zero_fraction = 0.55, .spread = 0.12, .zero_block_fraction = 0.08, .block_scale = 0.21};
  relu.train_samples = 30;
  relu.heldout_samples = 10;
  relu.heldout_rms_log_error = 0.05;
  relu.heldout_max_relative_error = 0.11;
  relu.source = "synthetic";
  models::RatioModel generic = relu;
  generic.c_zero = 0.9;
  generic.default_features = {.zero_fraction = 0.1, .spread = 0.2, .zero_block_fraction = 0.01, .block_scale = 0.3};
  c.ratio[models::TensorClass::post_relu] = relu;
  c.ratio[models::TensorClass::generic] = generic;
  p.codecs.push_back(c);
  return p;
}

void expect_time_equal(const models::TimeModel& a, const models::TimeModel& b) {
  EXPECT_DOUBLE_EQ(a.latency, b.latency);
  EXPECT_DOUBLE_EQ(a.bandwidth, b.bandwidth);
  EXPECT_DOUBLE_EQ(a.r2, b.r2);
  EXPECT_DOUBLE_EQ(a.max_relative_error, b.max_relative_error);
  EXPECT_EQ(a.provenance, b.provenance);
  EXPECT_EQ(a.source, b.source);
}

TEST(Profile, YamlRoundTrip) {
  const auto p = sample_profile();
  CodecMeasurements raw;
  raw.codec = "szp";
  raw.compress = {{65536, 1e-4}, {262144, 3e-4}};
  raw.ratio = {{models::TensorClass::post_relu, RatioSample{1e-3, {0.5, 0.1, 0.05, 0.2}, 7.5, true}}};
  const std::string yaml = profile_to_yaml(p, {raw});
  const auto q = parse_profile(yaml, "round-trip");
  EXPECT_EQ(q.name, p.name);
  EXPECT_EQ(q.device, p.device);
  EXPECT_EQ(q.device_kind, p.device_kind);
  EXPECT_EQ(q.platforms, p.platforms);
  EXPECT_EQ(q.date, p.date);
  EXPECT_EQ(q.comptrain_version, p.comptrain_version);
  EXPECT_EQ(q.source, "round-trip");
  ASSERT_EQ(q.codecs.size(), 1u);
  expect_time_equal(q.codecs[0].compress, p.codecs[0].compress);
  expect_time_equal(q.codecs[0].decompress, p.codecs[0].decompress);
  ASSERT_EQ(q.codecs[0].ratio.size(), 2u);
  for (const auto& [cls, m] : p.codecs[0].ratio) {
    const auto& r = q.codecs[0].ratio.at(cls);
    EXPECT_DOUBLE_EQ(r.c0, m.c0);
    EXPECT_DOUBLE_EQ(r.c_log_eb, m.c_log_eb);
    EXPECT_DOUBLE_EQ(r.c_zero, m.c_zero);
    EXPECT_DOUBLE_EQ(r.c_zero_block, m.c_zero_block);
    EXPECT_DOUBLE_EQ(r.c_log_scale, m.c_log_scale);
    EXPECT_DOUBLE_EQ(r.c_log_spread, m.c_log_spread);
    EXPECT_DOUBLE_EQ(r.max_ratio, m.max_ratio);
    EXPECT_DOUBLE_EQ(r.default_features.zero_fraction, m.default_features.zero_fraction);
    EXPECT_DOUBLE_EQ(r.default_features.spread, m.default_features.spread);
    EXPECT_DOUBLE_EQ(r.default_features.zero_block_fraction, m.default_features.zero_block_fraction);
    EXPECT_DOUBLE_EQ(r.default_features.block_scale, m.default_features.block_scale);
    EXPECT_DOUBLE_EQ(r.ratio(1e-3), m.ratio(1e-3));
    EXPECT_EQ(r.train_samples, m.train_samples);
    EXPECT_EQ(r.heldout_samples, m.heldout_samples);
    EXPECT_DOUBLE_EQ(r.heldout_max_relative_error, m.heldout_max_relative_error);
    EXPECT_EQ(r.provenance, m.provenance);
    EXPECT_EQ(r.source, m.source);
  }
  // Written again, the same text (no drift through the emitter's precision).
  EXPECT_EQ(profile_to_yaml(q), profile_to_yaml(p));
}

TEST(Profile, ErrorsNameFileLineAndColumn) {
  std::string yaml = profile_to_yaml(sample_profile());
  const auto at = yaml.find("c_zero:");
  ASSERT_NE(at, std::string::npos);
  yaml.replace(at, 6, "c_zeros");
  try {
    parse_profile(yaml, "bad.yaml");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.yaml:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("unknown key 'c_zeros'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("valid keys: c0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_profile("format: other 2\n", "x.yaml"), InputError);
  EXPECT_THROW(parse_profile("[1, 2", "x.yaml"), InputError);
  // A format-1 profile (its ratio model was ln ratio, without the block features) is refused.
  std::string v1 = profile_to_yaml(sample_profile());
  v1.replace(v1.find("calibration-profile 2"), 21, "calibration-profile 1");
  try {
    parse_profile(v1, "old.yaml");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("expected 'comptrain-calibration-profile 2'"), std::string::npos) << e.what();
  }
}

// The sample profile with the first `key:`'s value replaced by `value`; `location` gets
// "bad.yaml:LINE:COLUMN:" of that value, where the error must point.
std::string with_value(const std::string& key, const std::string& value, std::string& location) {
  std::string yaml = profile_to_yaml(sample_profile());
  const auto at = yaml.find(" " + key + ": ");
  EXPECT_NE(at, std::string::npos) << key;
  const auto begin = at + key.size() + 3;
  const auto end = yaml.find('\n', begin);
  yaml.replace(begin, end - begin, value);
  const auto line_start = yaml.rfind('\n', begin) + 1;
  location = "bad.yaml:" + std::to_string(1 + std::count(yaml.begin(), yaml.begin() + static_cast<std::ptrdiff_t>(begin), '\n')) + ":" +
             std::to_string(begin - line_start + 1) + ": ";
  return yaml;
}

// Numbers are checked before they are narrowed or used: a count that is negative or fractional
// would wrap or truncate in size_t, a NaN would poison every ratio, a latency of seconds is a
// unit mistake. Each error points at the value and says what was expected (exit 2 in the CLI).
TEST(Profile, NumbersAreCheckedBeforeUse) {
  const struct {
    const char* key;
    const char* value;
    const char* expected;
  } cases[] = {
      {"train_samples", "-1", "'codecs[0].ratio.post_relu.train_samples' is '-1'; expected a whole number of samples in [0, 1000000000]"},
      {"train_samples", "1.5", "expected a whole number of samples"},
      {"heldout_samples", "1e12", "expected a whole number of samples"},
      {"heldout_samples", "10000000000", "expected a whole number of samples"},
      {"latency_s", "-1e-6", "'codecs[0].compress.latency_s' is '-1e-6'; expected seconds per call, >= 0 and < 1"},
      {"latency_s", "20", "expected seconds per call, >= 0 and < 1"},
      {"bandwidth_bytes_per_s", "0", "expected bytes per second, > 0"},
      {"bandwidth_bytes_per_s", ".inf", "expected bytes per second, > 0"},
      {"r2", ".nan", "'codecs[0].compress.r2' is '.nan'; expected a coefficient of determination, <= 1"},
      {"max_relative_error", "-0.1", "expected a number >= 0"},
      {"c0", ".nan", "'codecs[0].ratio.post_relu.c0' is '.nan'; expected a finite number"},
      {"c_log_eb", "-.inf", "expected a finite number"},
      {"c_zero", "many", "expected a finite number"},
      {"max_ratio", "0.5", "expected a ratio >= 1"},
      {"default_zero_fraction", "1.5", "expected a fraction in [0, 1]"},
      {"default_spread", "0", "expected a number > 0"},
      {"heldout_rms_log_error", "-1", "expected a number >= 0"},
      {"heldout_max_relative_error", ".nan", "expected a number >= 0"},
  };
  for (const auto& c : cases) {
    std::string location;
    const std::string yaml = with_value(c.key, c.value, location);
    try {
      parse_profile(yaml, "bad.yaml");
      ADD_FAILURE() << c.key << ": " << c.value << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(location), std::string::npos) << c.key << ": " << e.what() << " (expected at " << location << ")";
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << c.key << ": " << e.what();
    }
  }
  // The bounds themselves are accepted: a count of 0 and a latency of 0.
  std::string location;
  EXPECT_EQ(parse_profile(with_value("train_samples", "0", location), "ok.yaml").codecs[0].ratio.at(TensorClass::post_relu).train_samples, 0u);
  EXPECT_EQ(parse_profile(with_value("latency_s", "0", location), "ok.yaml").codecs[0].compress.latency, 0.0);
}

TEST(Profile, ShippedProfilesParseAndCarryProvenance) {
  const auto names = builtin_profile_names();
  for (const char* expected : {"a100-literature", "h100-literature", "h200-literature", "v100-literature"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
  }
  for (const auto& name : names) {
    const auto p = builtin_profile(name);
    ASSERT_NE(p.find("szp"), nullptr) << name;
    EXPECT_FALSE(p.codecs.front().compress.source.empty()) << name;
  }
  EXPECT_EQ(builtin_profile("a100-literature").find("szp")->compress.provenance, models::Provenance::literature);
  EXPECT_THROW(builtin_profile("no-such-profile"), InputError);
}

TEST(Profile, AutoPicksThePlatformsProfile) {
  EXPECT_EQ(resolve_profile("auto", ".", "a100-40gb")->name, "a100-literature");
  EXPECT_EQ(resolve_profile("auto", ".", "a100-80gb")->name, "a100-literature");
  EXPECT_EQ(resolve_profile("auto", ".", "h100-80gb")->name, "h100-literature");
  EXPECT_EQ(resolve_profile("auto", ".", "v100-32gb")->name, "v100-literature");
  EXPECT_EQ(resolve_profile("auto", ".", "h200")->name, "h200-literature");
  // The clusters of those GPUs too.
  for (const char* cluster : {"dgx-a100-superpod", "perlmutter-gpu", "polaris"}) {
    EXPECT_EQ(resolve_profile("auto", ".", cluster)->name, "a100-literature") << cluster;
  }
  EXPECT_EQ(resolve_profile("auto", ".", "dgx-h100-superpod")->name, "h100-literature");
  EXPECT_EQ(resolve_profile("auto", ".", "dgx1-v100-cluster")->name, "v100-literature");
  EXPECT_THROW(resolve_profile("auto", ".", "titanx-maxwell"), InputError);
  EXPECT_THROW(resolve_profile("auto", ".", ""), InputError);
  EXPECT_THROW(resolve_profile("missing.yaml", ".", "a100-40gb"), InputError);
}

TEST(Profile, ResolveTakesNamesAndFilesAndRefusesTheRest) {
  EXPECT_EQ(resolve_profile("h100-literature", ".", "")->source, "embedded:h100-literature");
  const auto dir = std::filesystem::temp_directory_path() / ("profile_yaml_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir / "mine.yml") << profile_to_yaml(sample_profile());
  }
  const auto p = resolve_profile("mine.yml", dir, "");  // relative to the base directory
  EXPECT_EQ(p->name, "test");
  EXPECT_EQ(p->source, (dir / "mine.yml").string());
  std::filesystem::remove_all(dir);
  for (const char* spec : {"", "no-such-profile"}) {
    try {
      resolve_profile(spec, ".", "a100-40gb");
      ADD_FAILURE() << "'" << spec << "' was accepted";
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("expected auto, a shipped calibration profile name or a .yaml file; shipped: a100-literature"));
    }
  }
}

// The compress and decompress tasks of a profile-driven rule take exactly the profile's time
// model, and each compressed buffer exactly the ratio model of the tensor's class.
TEST(ProfileInSchedule, CompressTasksMatchTheProfilesPrediction) {
  zoo::ModelRequest request;
  request.model = "resnet18";
  request.batch_size = 2;
  const traces::Trace trace = zoo::build_model(request);
  const models::OpTimeModel time_model(models::builtin_platform("a100-40gb"));
  auto profile = std::make_shared<const models::CalibrationProfile>(sample_profile());

  models::CompressAction action;
  action.profile = profile;
  action.codec = "szp";
  action.error_bound = 1e-3;
  models::StrategySpec spec;
  spec.name = "calibrated";
  spec.rules.push_back(models::StrategyRule{.select = {}, .action = action});
  const models::Schedule s = test_support::must_apply(models::build_schedule(trace, time_model, spec));

  const models::CodecProfile& codec = *profile->find("szp");
  std::set<models::TensorClass> seen;
  std::size_t compress_tasks = 0, decompress_tasks = 0;
  for (const models::Task& task : s.tasks) {
    if (task.kind != models::TaskKind::compress && task.kind != models::TaskKind::decompress) continue;
    ASSERT_TRUE(task.tensor.has_value());
    const double bytes = static_cast<double>(trace.tensor(*task.tensor).bytes());
    if (task.kind == models::TaskKind::decompress) {
      ++decompress_tasks;
      EXPECT_DOUBLE_EQ(task.seconds, 1.5e-5 + bytes / 5e11);
      continue;
    }
    ++compress_tasks;
    EXPECT_DOUBLE_EQ(task.seconds, codec.compress.seconds(bytes));
    EXPECT_DOUBLE_EQ(task.seconds, 2e-5 + bytes / 3e11);
    // The class from the op that produced the saved content (its last forward writer: the
    // zoo's ReLUs are in place, like torchvision's).
    models::TensorClass cls = models::TensorClass::generic;
    for (const auto& op : trace.ops()) {
      if (op.phase != traces::Phase::forward) continue;
      bool writes = false;
      for (auto t : op.outputs) writes = writes || trace.storage_of(t) == *task.tensor;
      if (writes) cls = models::tensor_class_of_op(op.kind);
    }
    seen.insert(cls);
    const double ratio = codec.ratio_model(cls).ratio(1e-3);
    ASSERT_EQ(task.creates.size(), 1u);
    EXPECT_EQ(s.buffers[task.creates[0]].bytes, static_cast<std::int64_t>(std::ceil(bytes / ratio)));
  }
  EXPECT_GT(compress_tasks, 0u);
  EXPECT_EQ(compress_tasks, decompress_tasks);
  EXPECT_TRUE(seen.count(models::TensorClass::post_relu));
  EXPECT_TRUE(seen.count(models::TensorClass::generic));
  // post_relu (0.55 zeros) and generic models give different ratios, so the class mattered.
  EXPECT_NE(codec.ratio_model(models::TensorClass::post_relu).ratio(1e-3), codec.ratio_model(models::TensorClass::generic).ratio(1e-3));
  ASSERT_EQ(s.compression.size(), 1u);
  EXPECT_EQ(s.compression[0].profile, "test");
  EXPECT_FALSE(s.compression[0].ratio_overridden);

  // Explicit numbers override the profile (what-if): ratio 4 and 100 GB/s everywhere.
  action.ratio = 4;
  action.compress_bandwidth = 1e11;
  spec.rules[0].action = action;
  const models::Schedule w = test_support::must_apply(models::build_schedule(trace, time_model, spec));
  for (const models::Task& task : w.tasks) {
    if (task.kind != models::TaskKind::compress) continue;
    const double bytes = static_cast<double>(trace.tensor(*task.tensor).bytes());
    EXPECT_DOUBLE_EQ(task.seconds, 2e-5 + bytes / 1e11);  // profile latency, explicit bandwidth
    EXPECT_EQ(w.buffers[task.creates[0]].bytes, static_cast<std::int64_t>(std::ceil(bytes / 4)));
  }
}

TEST(ProfileInSchedule, UnknownCodecIsAnInputError) {
  zoo::ModelRequest request;
  request.model = "resnet18";
  request.batch_size = 1;
  const traces::Trace trace = zoo::build_model(request);
  const models::OpTimeModel time_model(models::builtin_platform("a100-40gb"));
  models::CompressAction action;
  action.profile = std::make_shared<const models::CalibrationProfile>(sample_profile());
  action.codec = "zfp";
  action.error_bound = 1e-3;
  models::StrategySpec spec;
  spec.rules.push_back(models::StrategyRule{.select = {}, .action = action});
  EXPECT_THROW((void)models::build_schedule(trace, time_model, spec), InputError);
}

}  // namespace
}  // namespace comptrain::models

#include "comptrain/sim/scenario.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "comptrain/traces/trace_json.hpp"

namespace comptrain::sim {
namespace {

using ::testing::HasSubstr;

std::string error_of(std::string_view yaml) {
  try {
    parse_scenario(yaml, "s.yaml", ".");
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError for:\n" << yaml;
  return "";
}

TEST(Scenario, TheEmbeddedDefaultIsResNet50) {
  const Scenario s = default_scenario();
  ASSERT_TRUE(s.zoo_model);
  EXPECT_EQ(s.zoo_model->model, "resnet50");
  EXPECT_EQ(s.zoo_model->batch_size, 32);
  EXPECT_EQ(s.zoo_model->precision, zoo::Precision::fp32);
  EXPECT_EQ(s.zoo_model->optimizer, zoo::Optimizer::momentum);
  EXPECT_EQ(s.name, "resnet50-default");
}

TEST(Scenario, TheEmbeddedDefaultMatchesTheFileInTheRepository) {
  std::ifstream in(std::filesystem::path(COMPTRAIN_TEST_DATA_DIR) / "../../scenarios/default.yaml");
  ASSERT_TRUE(in);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(default_scenario_yaml(), text);
}

TEST(Scenario, ReadsTransformerShapeAndTraining) {
  const Scenario s = parse_scenario(
      "model:\n  zoo: gpt\n  layers: 2\n  hidden: 64\n  heads: 4\n  seq_len: 16\n  vocab: 100\n"
      "training:\n  batch_size: 3\n  precision: mixed\n  optimizer: adam\n",
      "s.yaml", ".");
  ASSERT_TRUE(s.zoo_model);
  EXPECT_EQ(s.zoo_model->layers, 2);
  EXPECT_EQ(s.zoo_model->hidden, 64);
  EXPECT_EQ(s.zoo_model->seq_len, 16);
  EXPECT_EQ(s.zoo_model->precision, zoo::Precision::mixed);
  EXPECT_EQ(s.name, "gpt");
  EXPECT_EQ(build_trace(s).batch_size(), 3);
}

TEST(Scenario, UnknownKeysAreRejectedWithTheValidOnes) {
  const std::string e = error_of("model:\n  zoo: resnet18\ntraining:\n  batchsize: 8\n");
  EXPECT_THAT(e, HasSubstr("s.yaml:4:3: unknown key 'batchsize' in training"));
  EXPECT_THAT(e, HasSubstr("valid keys: batch_size, precision, optimizer"));
  EXPECT_THAT(error_of("model:\n  zoo: resnet18\nplatfrom: a100\n"), HasSubstr("s.yaml:3:1: unknown key 'platfrom'"));
}

TEST(Scenario, ValuesAreRangeChecked) {
  EXPECT_THAT(error_of("model: {zoo: resnet18}\ntraining: {batch_size: -4}\n"),
              HasSubstr("'training.batch_size' is '-4'; expected a positive integer"));
  EXPECT_THAT(error_of("model: {zoo: resnet18}\ntraining: {batch_size: 2.5}\n"), HasSubstr("expected a positive integer"));
  EXPECT_THAT(error_of("model: {zoo: resnet18}\ntraining: {precision: fp8}\n"), HasSubstr("unknown precision 'fp8'"));
  EXPECT_THAT(error_of("model: {zoo: resnet18}\ntraining: {optimizer: lamb}\n"), HasSubstr("unknown optimizer 'lamb'"));
  EXPECT_THAT(error_of("model: {zoo: resnet51}\n"), HasSubstr("s.yaml:1:14: unknown zoo model 'resnet51'; expected one of:"));
}

TEST(Scenario, StructureErrorsNameTheProblem) {
  EXPECT_THAT(error_of("training: {batch_size: 2}\n"), HasSubstr("missing key 'model'"));
  EXPECT_THAT(error_of("model: {zoo: resnet18, trace: t.json}\n"), HasSubstr("exactly one of 'zoo'"));
  EXPECT_THAT(error_of("model: {trace: t.json, layers: 3}\n"), HasSubstr("'layers' applies to zoo models only"));
  EXPECT_THAT(error_of("model: {trace: t.json}\ntraining: {precision: mixed}\n"), HasSubstr("'precision' applies to zoo models only"));
  EXPECT_THAT(error_of("- just\n- a list\n"), HasSubstr("expected a mapping"));
  EXPECT_THAT(error_of("model: {zoo: resnet18\n"), HasSubstr("malformed YAML"));
  EXPECT_THAT(error_of("model:\n  zoo: resnet18\nmodel:\n  zoo: vgg16\n"), HasSubstr("appears twice"));
}

TEST(Scenario, ModelErrorsFromTheZooNameTheScenario) {
  const Scenario s = parse_scenario("model: {zoo: gpt, hidden: 100, heads: 3}\n", "s.yaml", ".");
  try {
    build_trace(s);
    FAIL() << "heads must divide hidden";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("s.yaml: model:"));
  }
}

TEST(Scenario, ATraceFileIsResolvedAgainstTheScenarioAndRescaled) {
  const auto dir = std::filesystem::temp_directory_path() / "comptrain_scenario_test";
  std::filesystem::create_directories(dir);
  zoo::ModelRequest request;
  request.model = "alexnet";
  request.batch_size = 2;
  traces::write_trace_file(zoo::build_model(request), dir / "alexnet.json");
  {
    std::ofstream out(dir / "s.yaml");
    out << "model:\n  trace: alexnet.json\ntraining:\n  batch_size: 6\n";
  }
  const Scenario s = load_scenario_file(dir / "s.yaml");
  EXPECT_EQ(s.trace_file, dir / "alexnet.json");
  EXPECT_EQ(s.name, "alexnet");
  const traces::Trace t = build_trace(s);
  EXPECT_EQ(t.batch_size(), 6);
  request.batch_size = 6;
  EXPECT_EQ(t, zoo::build_model(request));
  std::filesystem::remove_all(dir);
}

TEST(Scenario, AMissingFileIsAnInputError) {
  EXPECT_THROW(load_scenario_file("/nonexistent/scenario.yaml"), InputError);
}

}  // namespace
}  // namespace comptrain::sim

// Fitting a platform's efficiencies to measured throughputs (sim/fit.hpp): synthetic
// measurements simulated on a platform with known efficiencies are fitted from a platform whose
// efficiencies are off by known factors, and the fit must find the known values again; bad
// measurement files fail at their line.
#include "comptrain/sim/studies/platform_fit.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <variant>

#include "comptrain/models/platform.hpp"
#include "comptrain/sim/run/run.hpp"
#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/support/input_error.hpp"
#include "common/expect_same_platform.hpp"

namespace comptrain::sim {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using traces::OpKind;

// An A100-40GB without the launching thread's CPU cost (host.dispatch), so that every iteration
// is GPU-bound and its time depends on the efficiencies; EFFICIENCY is filled in per platform.
std::string platform_yaml(const std::string& name, const std::string& efficiency) {
  return "name: " + name + R"(
gpu:
  name: NVIDIA A100-SXM4-40GB
  memory: 40 GiB          # the A100 datasheet's capacity
  memory_bandwidth: 1555 GB/s
  peak: {fp32: 19.5 TFLOP/s, tf32: 156 TFLOP/s, fp16: 312 TFLOP/s, bf16: 312 TFLOP/s}
  launch_overhead: 5 us
host: {name: test host, cores: 8, flops: 1 TFLOP/s, memory: 64 GiB, memory_bandwidth: 100 GB/s}
host_link: {name: PCIe, bandwidth: 25 GB/s, latency: 1 us}
efficiency:
)" + efficiency;
}

// The known efficiencies, and the starting platform: GEMM kinds at half of them, the memory
// default 4/3 of it.
const std::string kTruth = "  compute: {default: 0.6, conv: 0.7, linear: 0.75, matmul: 0.75, attention: 0.5}\n  memory: {default: 0.6}\n";
const std::string kStart = "  compute: {default: 0.6, conv: 0.35, linear: 0.375, matmul: 0.375, attention: 0.25}\n  memory: {default: 0.8}\n";

// Small zoo models at small batches, so that each simulation takes milliseconds. The two fitted
// ones pull apart: a transformer with its GEMMs on the CUDA cores (fp32: d log throughput /
// d log GEMM efficiency 0.85, memory 0.13 at the known values) and one on tensor cores
// (amp-fp16: 0.14 and 0.52). Two runs that answered both alike (a ResNet-18 in fp32 and a
// smaller fp32 transformer, 0.6/0.2 and 0.5/0.2) leave a long flat valley and a fit 5-10 %
// off; the ResNet is the held-out run instead.
// fp32 convolutions on the CUDA cores (tf32: false, not PyTorch's default): at batch 4 TF32 ones
// would leave the ResNet launch-bound, blind to the GEMM scale it is held out to check.
const std::string kResNet = "model: {zoo: resnet18}\ntraining: {batch_size: 4, precision: fp32, tf32: false}\nplatform: truth.yaml\n";
const std::string kGptFp32 =
    "model: {zoo: gpt, layers: 2, hidden: 1024, heads: 16, seq_len: 256, vocab: 1000}\ntraining: {batch_size: 8, precision: fp32}\nplatform: "
    "truth.yaml\n";
const std::string kGptAmp =
    "model: {zoo: gpt, layers: 2, hidden: 512, heads: 8, seq_len: 128, vocab: 1000}\ntraining: {batch_size: 16, precision: amp-fp16}\n"
    "platform: truth.yaml\n";

class FitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("comptrain-fit-" + std::to_string(::getpid()) + "-" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write("truth.yaml", platform_yaml("truth", kTruth));
    write("start.yaml", platform_yaml("start", kStart));
    write("resnet.yaml", kResNet);
    write("gpt-fp32.yaml", kGptFp32);
    write("gpt-amp.yaml", kGptAmp);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& name, const std::string& text) const { std::ofstream(dir_ / name) << text; }

  // What the scenario runs at on its own platform (truth.yaml): the synthetic measurement.
  double simulated_throughput(const std::string& scenario_file) const {
    const PreparedScenario prepared(load_scenario_file(dir_ / scenario_file));
    const RunOutcome outcome = run_scenario(prepared, prepared.scenario().strategy, prepared.batch_size(), Isolation::child_process);
    const SimulationResult& r = std::get<CompletedRun>(outcome).result;
    return static_cast<double>(prepared.batch_size()) / r.iteration_seconds;
  }

  MeasurementSet parse(const std::string& text) const { return parse_measurements(text, "m.yaml", dir_); }

  std::string error_of(const std::string& text, const FitOptions& options = {}) const {
    try {
      fit_measurements(parse(text), options);
    } catch (const InputError& e) {
      return e.what();
    }
    return "no error";
  }

  fs::path dir_;
};

TEST_F(FitTest, RecoversKnownEfficienciesAndPredictsAHeldOutRun) {
  const auto line = [this](const std::string& scenario) {
    return "  - {scenario: " + scenario + ", samples_per_second: " + fmt::format("{:.17g}", simulated_throughput(scenario)) + "}\n";
  };
  const std::string measurements =
      "platform: start.yaml\nmeasurements:\n" + line("gpt-fp32.yaml") + line("gpt-amp.yaml") + line("resnet.yaml");
  FitOptions options;
  options.holdout = 1;  // the ResNet is left out: the fit on the other two must predict it
  options.output_name = "fitted";
  const FitResult result = fit_measurements(parse(measurements), options);

  // The start is off by 2x (GEMM kinds) and 3/4 (memory): the fit's scales are their inverse.
  // Tolerance: 2 %. The synthetic data are exact, so what is left is the optimizer's bracket
  // (0.1 % in log) and the written file's 4 digits; a wrong model of what the parameters touch
  // would miss by far more.
  ASSERT_EQ(result.parameters.size(), 2u);
  EXPECT_EQ(result.parameters[0].parameter, FitParameter::gemm);
  EXPECT_NEAR(result.parameters[0].scale, 2.0, 0.04);
  EXPECT_EQ(result.parameters[1].parameter, FitParameter::memory_default);
  EXPECT_NEAR(result.parameters[1].scale, 0.75, 0.015);
  EXPECT_GT(result.parameters[0].sensitivity, 0.01);
  EXPECT_GT(result.parameters[1].sensitivity, 0.01);

  // The written platform holds the known values, ratios between the GEMM kinds kept.
  const models::Efficiency& e = result.fitted.efficiency;
  EXPECT_NEAR(e.compute_for(OpKind::conv), 0.7, 0.014);
  EXPECT_NEAR(e.compute_for(OpKind::linear), 0.75, 0.015);
  EXPECT_NEAR(e.compute_for(OpKind::matmul), 0.75, 0.015);
  EXPECT_NEAR(e.compute_for(OpKind::attention), 0.5, 0.01);
  EXPECT_NEAR(e.memory_default, 0.6, 0.012);
  EXPECT_DOUBLE_EQ(e.compute_default, 0.6);  // not a parameter: copied

  EXPECT_GT(result.rms_before, 0.1);
  EXPECT_LT(result.rms_after, 0.01);
  ASSERT_TRUE(result.holdout_rms_after.has_value());
  EXPECT_GT(*result.holdout_rms_before, 0.1);
  EXPECT_LT(*result.holdout_rms_after, 0.02);
  ASSERT_EQ(result.rows.size(), 3u);
  EXPECT_TRUE(result.rows[2].held_out);
  EXPECT_FALSE(result.rows[0].held_out);
  EXPECT_EQ(result.rows[1].batch, 16);

  // The file: fitted values marked with their error, copied values with their own comment.
  EXPECT_THAT(result.platform_yaml, HasSubstr("name: fitted"));
  EXPECT_THAT(result.platform_yaml, HasSubstr("# fitted from 2 measurements of m.yaml: rms log error"));
  EXPECT_THAT(result.platform_yaml, HasSubstr("memory: 40 GiB"));
  EXPECT_THAT(result.platform_yaml, HasSubstr("# the A100 datasheet's capacity"));
  EXPECT_THAT(result.platform_yaml, HasSubstr("# copied from platform start"));
  EXPECT_THAT(fit_table(result), HasSubstr("held out (not fitted):"));
}

TEST_F(FitTest, AParameterNoMeasurementDependsOnKeepsItsValue) {
  // compute_default: the non-GEMM kinds are memory-bound on this roofline, so no prediction
  // moves with it; the fit must leave it where it was and say so.
  const std::string measurements = "platform: start.yaml\nmeasurements:\n  - {scenario: gpt-fp32.yaml, samples_per_second: " +
                                   fmt::format("{:.17g}", simulated_throughput("gpt-fp32.yaml")) + "}\n";
  FitOptions options;
  options.parameters = {FitParameter::compute_default};
  const FitResult result = fit_measurements(parse(measurements), options);
  ASSERT_EQ(result.parameters.size(), 1u);
  EXPECT_EQ(result.parameters[0].sensitivity, 0);
  EXPECT_EQ(result.parameters[0].scale, 1);
  EXPECT_DOUBLE_EQ(result.fitted.efficiency.compute_default, 0.6);
  EXPECT_THAT(result.platform_yaml, HasSubstr("not fitted: no measurement depends on it"));
}

TEST_F(FitTest, ConvAndMatmulPartTheGemmKinds) {
  // Only the convolutions start off (half the truth): fitted as two groups, conv must find its
  // value again from the ResNet while the transformer's kinds stay where they are; as one group
  // (gemm) they could not both be right.
  write("conv-off.yaml",
        platform_yaml("conv-off", "  compute: {default: 0.6, conv: 0.35, linear: 0.75, matmul: 0.75, attention: 0.5}\n  memory: {default: 0.6}\n"));
  const auto line = [this](const std::string& scenario) {
    return "  - {scenario: " + scenario + ", samples_per_second: " + fmt::format("{:.17g}", simulated_throughput(scenario)) + "}\n";
  };
  const std::string measurements = "platform: conv-off.yaml\nmeasurements:\n" + line("resnet.yaml") + line("gpt-fp32.yaml");
  FitOptions options;
  options.parameters = {FitParameter::conv, FitParameter::matmul};
  const FitResult result = fit_measurements(parse(measurements), options);
  ASSERT_EQ(result.parameters.size(), 2u);
  EXPECT_NEAR(result.parameters[0].scale, 2.0, 0.04);
  EXPECT_NEAR(result.parameters[1].scale, 1.0, 0.02);
  const models::Efficiency& e = result.fitted.efficiency;
  EXPECT_NEAR(e.compute_for(OpKind::conv), 0.7, 0.014);
  EXPECT_NEAR(e.compute_for(OpKind::linear), 0.75, 0.015);
  EXPECT_NEAR(e.compute_for(OpKind::attention), 0.5, 0.01);
  EXPECT_LT(result.rms_after, 0.01);
  EXPECT_THAT(result.platform_yaml, HasSubstr("conv: 0.7"));

  // gemm scales the same kinds: asked with either, the fit refuses.
  options.parameters = {FitParameter::gemm, FitParameter::conv};
  EXPECT_THAT(error_of(measurements, options), HasSubstr("either gemm or conv and matmul"));
}

TEST(FitParameters, NamesRoundTrip) {
  for (const FitParameter p : {FitParameter::gemm, FitParameter::conv, FitParameter::matmul, FitParameter::memory_default, FitParameter::compute_default, FitParameter::tensor_core,
                               FitParameter::tensor_core_cuda11, FitParameter::conv_wave_loss, FitParameter::gemm_k_overhead}) {
    EXPECT_EQ(parse_fit_parameter(to_string(p)), p);
  }
  EXPECT_EQ(parse_fit_parameter("tensor_core_cuda12"), std::nullopt);
  // What --fit-parameters' error offers: every name, from the same list.
  EXPECT_EQ(fit_parameter_choices(),
            "gemm, conv, matmul, memory_default, compute_default, tensor_core, tensor_core_cuda11, conv_wave_loss or gemm_k_overhead");
}

// gemm_k_overhead is a count of K elements, fitted from nothing where the base has none: a
// 16-bit transformer (K of 512 and 2048) measured on a platform with k0 = 300 gives it back
// from one without; an fp32 one (its GEMMs on the CUDA cores, which pay no k0) says nothing of
// it, and the base's absent value stays absent.
TEST_F(FitTest, TheShortReductionOverheadIsFoundFromNothing) {
  write("k-truth.yaml", platform_yaml("k-truth", kTruth + "  gemm_k_overhead: 300\n"));
  std::string amp = kGptAmp;
  amp.replace(amp.find("truth.yaml"), 10, "k-truth.yaml");
  write("gpt-amp-k.yaml", amp);
  std::string fp32 = kGptFp32;
  fp32.replace(fp32.find("truth.yaml"), 10, "k-truth.yaml");
  write("gpt-fp32-k.yaml", fp32);
  const auto line = [this](const std::string& scenario) {
    return "  - {scenario: " + scenario + ", samples_per_second: " + fmt::format("{:.17g}", simulated_throughput(scenario)) + "}\n";
  };
  FitOptions options;
  options.parameters = {FitParameter::gemm_k_overhead};
  options.output_name = "fitted";
  const FitResult found = fit_measurements(parse("platform: truth.yaml\nmeasurements:\n" + line("gpt-amp-k.yaml")), options);
  ASSERT_EQ(found.parameters.size(), 1u);
  EXPECT_GT(found.parameters[0].sensitivity, 0.01);
  EXPECT_NEAR(found.fitted.efficiency.gemm_k_overhead, 300, 3);
  EXPECT_EQ(found.fitted.efficiency.gemm_k_overhead, std::round(found.fitted.efficiency.gemm_k_overhead));  // written whole
  EXPECT_GT(found.rms_before, 0.01);
  EXPECT_LT(found.rms_after, 0.002);
  EXPECT_THAT(found.platform_yaml, HasSubstr("gemm_k_overhead: "));
  EXPECT_THAT(found.platform_yaml, HasSubstr("# fitted from 1 measurements of m.yaml"));
  EXPECT_THAT(fit_table(found), HasSubstr("gemm_k_overhead  = "));
  EXPECT_THAT(fit_table(found), HasSubstr("(base 0)"));

  const FitResult blind = fit_measurements(parse("platform: truth.yaml\nmeasurements:\n" + line("gpt-fp32-k.yaml")), options);
  EXPECT_EQ(blind.parameters[0].sensitivity, 0);
  EXPECT_EQ(blind.fitted.efficiency.gemm_k_overhead, 0);
  EXPECT_THAT(blind.platform_yaml, HasSubstr("not fitted: no measurement depends on it"));
}

TEST_F(FitTest, BadFilesNameTheirLine) {
  EXPECT_THAT(error_of("platform: start.yaml\nmeasurements:\n  - {scenario: resnet.yaml, samples_per_second: -3}\n"),
              HasSubstr("m.yaml:3:"));
  EXPECT_THAT(error_of("platform: start.yaml\nmeasurements:\n  - {scenario: resnet.yaml, samples_per_second: fast}\n"),
              HasSubstr("expected a number from 1e-9 to 1e18"));
  // A denormal rate passed a positive-number check and made the fit's log errors infinite.
  EXPECT_THAT(error_of("platform: start.yaml\nmeasurements:\n  - {scenario: resnet.yaml, samples_per_second: 4e-320}\n"),
              HasSubstr("m.yaml:3:49: 'measurements[0].samples_per_second' is \"4e-320\"; expected a number from 1e-9 to 1e18"));
  EXPECT_THAT(error_of("platform: start.yaml\nmeasurements:\n  - {scenario: resnet.yaml, samples_per_sec: 3}\n"),
              HasSubstr("m.yaml:3:"));
  EXPECT_THAT(error_of("platform: start.yaml\nmeasurements:\n  - {scenario: resnet.yaml, samples_per_sec: 3}\n"),
              HasSubstr("unknown key 'samples_per_sec'"));
  EXPECT_THAT(error_of("platform: start.yaml\nmeasurements: []\n"), HasSubstr("m.yaml:2:"));
  EXPECT_THAT(error_of("platform: no-such-gpu\nmeasurements:\n  - {scenario: resnet.yaml, samples_per_second: 3}\n"),
              HasSubstr("m.yaml:1:"));
  EXPECT_THAT(error_of("platform: start.yaml\nmeasurement:\n  - {scenario: resnet.yaml, samples_per_second: 3}\n"),
              HasSubstr("unknown key 'measurement'"));
  EXPECT_THAT(error_of("platform: start.yaml\nmeasurements:\n  - {scenario: resnet.yaml, samples_per_second: [3}\n"),
              HasSubstr("malformed YAML"));
  // A scenario that does not exist, or does not read: the measurement's line, then the cause.
  const std::string missing = error_of("platform: start.yaml\nmeasurements:\n  - {scenario: resnet.yaml, samples_per_second: 3}\n"
                                       "  - {scenario: nowhere.yaml, samples_per_second: 3}\n");
  EXPECT_THAT(missing, HasSubstr("m.yaml:4: measurement 2"));
  EXPECT_THAT(missing, HasSubstr("nowhere.yaml"));
  write("broken.yaml", "model: {zoo: resnet18}\ntraining: {batch_size: many}\nplatform: truth.yaml\n");
  const std::string broken = error_of("platform: start.yaml\nmeasurements:\n  - {scenario: broken.yaml, samples_per_second: 3}\n");
  EXPECT_THAT(broken, HasSubstr("m.yaml:3: measurement 1"));
  EXPECT_THAT(broken, HasSubstr("broken.yaml:2:"));
  // Holding out every measurement leaves nothing to fit.
  FitOptions all_held;
  all_held.holdout = 1;
  EXPECT_THAT(error_of("platform: start.yaml\nmeasurements:\n  - {scenario: resnet.yaml, samples_per_second: 3}\n", all_held),
              HasSubstr("--holdout 1"));
}

TEST_F(FitTest, CopiedCommentsAreTheValuesOwnOnly) {
  // A value alone on its line keeps its comment; values sharing a flow mapping's line do not
  // take its comment (it is about all of them), they say where they were copied from.
  const models::Platform start = models::load_platform_file(dir_ / "start.yaml");
  models::Platform fitted = start;
  fitted.name = "x";
  const std::string yaml = fitted_platform_yaml(start, platform_yaml("start", kStart), fitted, {}, "fitted");
  const models::Platform back = models::parse_platform(yaml, "x.yaml");
  EXPECT_EQ(back.gpu.memory_bytes, start.gpu.memory_bytes);
  EXPECT_DOUBLE_EQ(back.gpu.peak_tf32, start.gpu.peak_tf32);
  EXPECT_DOUBLE_EQ(back.efficiency.compute_for(OpKind::attention), 0.25);
  EXPECT_THAT(yaml, HasSubstr("memory: 40 GiB  # the A100 datasheet's capacity"));
  EXPECT_THAT(yaml, HasSubstr("fp32: 19.5 TFLOP/s  # copied from platform start"));
  EXPECT_THAT(yaml, ::testing::Not(HasSubstr("fitted  ")));
}

// A fitted shipped platform keeps every field that is not fitted: the memory the device model
// needs, the SM count the wave model needs, the launching thread's costs.
TEST_F(FitTest, EveryFieldOfAShippedPlatformSurvives) {
  const models::Platform start = models::builtin_platform("v100-16gb");
  const std::string yaml = fitted_platform_yaml(start, "", start, {}, "fitted");
  const models::Platform back = models::parse_platform(yaml, "x.yaml");
  EXPECT_EQ(back.gpu.memory_visible_bytes, start.gpu.memory_visible_bytes);
  EXPECT_EQ(back.gpu.cuda_context_bytes, start.gpu.cuda_context_bytes);
  EXPECT_EQ(back.gpu.compute_capability_major, 7);
  EXPECT_EQ(back.gpu.sms, 80);
  EXPECT_DOUBLE_EQ(back.host.dispatch.forward, start.host.dispatch.forward);
  EXPECT_DOUBLE_EQ(back.host.dispatch.optimizer, start.host.dispatch.optimizer);
  EXPECT_DOUBLE_EQ(back.gpu.launch_overhead, start.gpu.launch_overhead);
}

// A platform fitted on a cluster stays that cluster: its NICs, network, collectives, storage and
// the host's checkpoint rate survive the fit, so that a multi-node run and a synchronous
// checkpoint still simulate on the written file (tests/data/platform-fit-superpod/: a fit on
// dgx-a100-superpod, then a 2-node run and a checkpointing run on the fitted file).
TEST_F(FitTest, AFittedClusterKeepsEverySection) {
  const fs::path data = fs::path(COMPTRAIN_TEST_DATA_DIR) / "platform-fit-superpod";
  for (const char* name : {"m.yaml", "s.yaml", "s-cluster.yaml", "s-ckpt.yaml"}) fs::copy_file(data / name, dir_ / name);
  FitOptions options;
  options.parameters = {FitParameter::gemm};
  const FitResult fit = fit_measurements(load_measurements(dir_ / "m.yaml"), options);
  const models::Platform superpod = models::builtin_platform("dgx-a100-superpod");
  ASSERT_TRUE(fit.fitted.nic && fit.fitted.network && fit.fitted.storage);
  EXPECT_EQ(fit.fitted.max_nodes(), superpod.max_nodes());
  EXPECT_DOUBLE_EQ(fit.fitted.nic->bandwidth, superpod.nic->bandwidth);
  EXPECT_DOUBLE_EQ(fit.fitted.network->link.bandwidth, superpod.network->link.bandwidth);
  EXPECT_DOUBLE_EQ(fit.fitted.collectives.inter_node_step, superpod.collectives.inter_node_step);
  EXPECT_EQ(fit.fitted.storage->shared.has_value(), superpod.storage->shared.has_value());
  EXPECT_EQ(fit.fitted.storage->local.has_value(), superpod.storage->local.has_value());
  EXPECT_DOUBLE_EQ(fit.fitted.host.torch_save_bandwidth, superpod.host.torch_save_bandwidth);
  EXPECT_DOUBLE_EQ(fit.fitted.host.max_power, superpod.host.max_power);
  // Every field the platform reader sets is the base platform's but the name and the fitted
  // efficiencies (gemm: conv, linear, matmul, attention), as the written file reads back
  // (shared/defects-2/14: nic, network, collectives, storage and the powers were dropped).
  models::Platform expected = superpod;
  expected.name = fit.fitted.name;
  for (const OpKind kind : {OpKind::conv, OpKind::linear, OpKind::matmul, OpKind::attention}) {
    if (fit.fitted.efficiency.compute.contains(kind)) {
      expected.efficiency.compute[kind] = fit.fitted.efficiency.compute.at(kind);
    } else {
      expected.efficiency.compute.erase(kind);
    }
  }
  test_support::expect_same_platform(expected, fit.fitted);

  write("fitted.yaml", fit.platform_yaml);
  for (const char* scenario : {"s-cluster.yaml", "s-ckpt.yaml"}) {
    SCOPED_TRACE(scenario);
    const PreparedScenario prepared(load_scenario_file(dir_ / scenario));
    const RunOutcome outcome = run_scenario(prepared, prepared.scenario().strategy, prepared.batch_size(), Isolation::child_process);
    ASSERT_TRUE(std::holds_alternative<CompletedRun>(outcome));
    EXPECT_GT(std::get<CompletedRun>(outcome).result.iteration_seconds, 0);
  }
}

// A prediction is global samples/s, as `comptrain simulate` reports it and `validate` compares it
// with a measurement: every GPU's micro-batch in each micro-step of the iteration (here 2
// micro-steps of 4 samples on one GPU: 8 samples per iteration).
TEST_F(FitTest, PredictionsAreGlobalSamplesPerSecond) {
  write("accumulating.yaml",
        "model: {zoo: resnet18}\ntraining: {batch_size: 4, precision: fp32, gradient_accumulation_steps: 2}\nplatform: truth.yaml\n");
  const PreparedScenario prepared(load_scenario_file(dir_ / "accumulating.yaml"));
  const RunOutcome outcome = run_scenario(prepared, prepared.scenario().strategy, prepared.batch_size(), Isolation::child_process);
  const double seconds = std::get<CompletedRun>(outcome).result.iteration_seconds;
  FitOptions options;
  options.max_sweeps = 0;  // the prediction before the fit is enough
  const FitResult fit = fit_measurements(parse("platform: truth.yaml\nmeasurements:\n  - {scenario: accumulating.yaml, samples_per_second: 100}\n"), options);
  ASSERT_EQ(fit.rows.size(), 1U);
  EXPECT_DOUBLE_EQ(fit.rows[0].before, 4.0 * 1 * 2 / seconds);
}

}  // namespace
}  // namespace comptrain::sim

#include "comptrain/sim/report/plots.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "traces/hand_traces.hpp"
#include "comptrain/support/atomic_file.hpp"
#include "comptrain/support/input_error.hpp"

namespace comptrain::sim {
namespace {

namespace fs = std::filesystem;
using models::MemoryRole;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr std::int64_t kGiB = std::int64_t{1} << 30;

// A fresh directory per test, removed afterwards.
class PlotsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("comptrain-plots-" + std::to_string(::getpid()) + "-" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  // COMPTRAIN_KEEP_PLOTS=1 keeps the files for a person to look at (the tests cannot judge
  // whether a plot reads well).
  void TearDown() override {
    if (std::getenv("COMPTRAIN_KEEP_PLOTS") != nullptr) {
      std::cout << "plots kept in " << dir_.string() << "\n";
      return;
    }
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  static void require_gnuplot() {
    if (!gnuplot_available()) GTEST_SKIP() << "gnuplot is not installed (Debian: gnuplot-nox)";
  }
  fs::path dir_;
};

// Names that gnuplot would otherwise mangle: a quote ends a gnuplot string, an underscore is a
// subscript in enhanced text, and < & must be escaped in the SVG.
constexpr const char* kTrickyName = "it's compress_conv <r=6> & more";

PlanPoint point(std::int64_t batch, std::int64_t peak, double samples_per_second, bool fits, bool out_of_memory = false) {
  PlanPoint p;
  p.batch = batch;
  p.fits = fits;
  p.out_of_memory = out_of_memory;
  p.peak_bytes = peak;
  p.samples_per_second = samples_per_second;
  p.iteration_seconds = samples_per_second > 0 ? static_cast<double>(batch) / samples_per_second : 0;
  return p;
}

// Two strategies on a 16 GiB GPU: the baseline runs out of memory at batch 256, the tricky
// one fits up to 512.
BatchSizePlan hand_plan() {
  BatchSizePlan plan;
  plan.scenario_name = "resnet50_\"hand\"";
  plan.platform_name = "v100-16gb";
  plan.capacity_bytes = 16 * kGiB;
  plan.options.margin = 0.05;

  StrategyPlan baseline;
  baseline.strategy = "baseline";
  baseline.max_batch = 128;
  baseline.best_batch = 128;
  baseline.best_samples_per_second = 1100;
  for (std::int64_t b = 1; b <= 128; b *= 2) {
    baseline.points.push_back(point(b, kGiB / 2 + b * (kGiB / 10), 1100.0 * static_cast<double>(b) / static_cast<double>(b + 8), true));
  }
  baseline.points.push_back(point(256, 17 * kGiB, 0, false, true));
  plan.strategies.push_back(baseline);

  StrategyPlan tricky;
  tricky.strategy = kTrickyName;
  tricky.max_batch = 512;
  tricky.best_batch = 256;
  tricky.best_samples_per_second = 900;
  for (std::int64_t b = 1; b <= 512; b *= 2) {
    tricky.points.push_back(point(b, kGiB / 2 + b * (kGiB / 40), b == 256 ? 900 : 800.0 * static_cast<double>(b) / static_cast<double>(b + 8), true));
  }
  tricky.points.push_back(point(1024, 26 * kGiB, 0, false, true));
  plan.strategies.push_back(tricky);
  return plan;
}

// The checks of a well-formed, complete SVG file.
std::string read_svg(const fs::path& path) {
  EXPECT_TRUE(fs::is_regular_file(path)) << path;
  const std::string svg = read_file(path);
  EXPECT_THAT(svg, StartsWith("<?xml"));
  EXPECT_THAT(svg, HasSubstr("<svg"));
  EXPECT_THAT(svg.substr(0, svg.find_last_not_of(" \n") + 1), EndsWith("</svg>"));  // complete
  return svg;
}

// Only the files the plotter meant to write: no temporary left behind.
std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST_F(PlotsTest, ThroughputPlotHasTheStrategiesAndAxes) {
  require_gnuplot();
  const fs::path out = dir_ / "throughput.svg";
  write_throughput_plot(hand_plan(), out);
  const std::string svg = read_svg(out);
  EXPECT_THAT(svg, HasSubstr("throughput (samples/s)"));
  EXPECT_THAT(svg, HasSubstr("batch size"));
  EXPECT_THAT(svg, HasSubstr("baseline (best: batch 128"));
  // The tricky name arrives intact, XML-escaped, not as gnuplot enhanced text (no subscript).
  EXPECT_THAT(svg, HasSubstr("it's compress_conv &lt;r=6> &amp; more"));
  EXPECT_THAT(svg, HasSubstr("resnet50_\"hand\" on v100-16gb"));
  EXPECT_EQ(files_in(dir_), std::vector<std::string>{"throughput.svg"});
}

TEST_F(PlotsTest, PeakMemoryPlotHasTheCapacityAndMarginLines) {
  require_gnuplot();
  const fs::path out = dir_ / "peak.svg";
  write_peak_memory_plot(hand_plan(), out);
  const std::string svg = read_svg(out);
  EXPECT_THAT(svg, HasSubstr("peak GPU memory (GiB)"));
  EXPECT_THAT(svg, HasSubstr("GPU capacity (16.00 GiB)"));
  EXPECT_THAT(svg, HasSubstr("capacity (15.20 GiB, margin 5%)"));
  EXPECT_THAT(svg, HasSubstr("baseline (max batch 128)"));
  EXPECT_THAT(svg, HasSubstr("it's compress_conv &lt;r=6> &amp; more (max batch 512)"));
  EXPECT_THAT(svg, HasSubstr("out of memory (reserved + new segment)"));
}

TEST_F(PlotsTest, PlanPlotsGoIntoANewDirectory) {
  require_gnuplot();
  const fs::path plots = dir_ / "a" / "b";
  const auto written = write_plan_plots(hand_plan(), plots);
  ASSERT_EQ(written.size(), 2u);
  EXPECT_EQ(written[0], plots / "throughput.svg");
  EXPECT_EQ(written[1], plots / "peak_memory.svg");
  for (const fs::path& f : written) read_svg(f);
  EXPECT_EQ(files_in(plots), (std::vector<std::string>{"peak_memory.svg", "throughput.svg"}));
}

TEST_F(PlotsTest, APlanWhereNothingFitsStillDraws) {
  require_gnuplot();
  BatchSizePlan plan;
  plan.scenario_name = "too big";
  plan.capacity_bytes = 12 * kGiB;
  StrategyPlan s;
  s.strategy = "baseline";
  s.points.push_back(point(1, 30 * kGiB, 0, false, true));
  plan.strategies.push_back(s);
  write_plan_plots(plan, dir_);
  EXPECT_THAT(read_svg(dir_ / "throughput.svg"), HasSubstr("baseline (no batch fits)"));
  EXPECT_THAT(read_svg(dir_ / "peak_memory.svg"), HasSubstr("baseline (no batch fits)"));

  write_plan_plots(BatchSizePlan{}, dir_ / "empty");  // no strategy at all: empty axes, no gnuplot error
  read_svg(dir_ / "empty" / "throughput.svg");
}

TEST_F(PlotsTest, ReplacesAnExistingFile) {
  require_gnuplot();
  const fs::path out = dir_ / "throughput.svg";
  write_file_atomically(out, "old");
  write_throughput_plot(hand_plan(), out);
  read_svg(out);
  EXPECT_EQ(files_in(dir_), std::vector<std::string>{"throughput.svg"});
}

// Interrupted while gnuplot draws: no temporary file is left beside the plots (defect list:
// gnuplot's .NAME.svg.PID-N.tmp files were not registered with the signal handler).
TEST_F(PlotsTest, AnInterruptLeavesNoTemporaryFile) {
  require_gnuplot();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    for (int i = 0; i < 200; ++i) write_throughput_plot(hand_plan(), dir_ / "throughput.svg");
    ::_exit(0);
  }
  // Once the first plot exists the child is drawing the next ones, nearly all of the time
  // inside gnuplot, with its temporary file present.
  for (int i = 0; i < 5000 && !fs::exists(dir_ / "throughput.svg"); ++i) ::usleep(1000);
  ::usleep(20000);
  ::kill(child, SIGINT);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child finished 200 plots before the interrupt";
  ::usleep(100000);  // gnuplot, interrupted too, has exited
  EXPECT_EQ(files_in(dir_), std::vector<std::string>{"throughput.svg"});
}

TEST_F(PlotsTest, AMissingDirectoryIsAnInputError) {
  require_gnuplot();
  EXPECT_THROW(write_throughput_plot(hand_plan(), dir_ / "missing" / "t.svg"), InputError);
}

// A hand-made run: resident weights and optimizer state, two activations, a compressed copy
// and a transient temporary. No simulation needed: the plot reads only the memory events.
struct HandRun {
  traces::Trace trace = [] {
    traces::testing::HandTrace h;
    const auto x = h.tensor("x", 4, traces::TensorRole::input);
    const auto y = h.tensor("y", 4, traces::TensorRole::activation);
    const auto dx = h.tensor("dx", 4, traces::TensorRole::temporary);
    h.op("f", {x}, {y});
    h.op("f_backward", {y}, {dx}, traces::Phase::backward);
    return traces::Trace("hand", 1, h.tensors, h.ops, {{"source", "hand"}});
  }();
  models::Platform platform;
  models::Schedule schedule;
  SimulationResult result;

  HandRun() {
    platform.name = "test_gpu";
    platform.gpu.memory_bytes = 8 * kGiB;
    schedule.strategy = "compress_conv";
    auto add = [&](const char* name, std::int64_t bytes, MemoryRole role) {
      models::Buffer b;
      b.name = name;
      b.bytes = bytes;
      b.role = role;
      schedule.buffers.push_back(b);
      return schedule.buffers.size() - 1;
    };
    const auto w = add("w", kGiB, MemoryRole::weight);
    const auto m = add("m", kGiB, MemoryRole::optimizer_state);
    const auto a1 = add("a1", 2 * kGiB, MemoryRole::activation);
    const auto a2 = add("a2", 2 * kGiB, MemoryRole::activation);
    const auto c = add("c", kGiB / 4, MemoryRole::compressed);
    const auto t = add("t", kGiB / 2, MemoryRole::temporary);
    auto event = [&](double time, std::size_t buffer, bool allocate) {
      const std::int64_t bytes = schedule.buffers[buffer].bytes;
      result.memory_events.push_back({time, buffer, allocate ? bytes : -bytes, std::nullopt, allocate});
    };
    event(0, w, true);
    event(0, m, true);
    event(0.001, a1, true);
    event(0.002, a2, true);
    event(0.003, c, true);
    event(0.003, a1, false);  // same instant as the compressed copy: one step, no spike
    event(0.004, t, true);
    event(0.005, t, false);
    event(0.006, a2, false);
    event(0.007, c, false);
    result.iteration_seconds = 0.008;
    result.peak_bytes = 6 * kGiB + kGiB / 4;
    result.peak_time = 0.003;
    result.device.framework.visible_bytes = 8 * kGiB;  // no CUDA context: all of it usable
    result.device.peak_reserved = 7 * kGiB;
  }
  SimulationRun run() const { return SimulationRun{"hand_run", "<test>", trace, platform, schedule, result, nullptr}; }
};

TEST_F(PlotsTest, MemoryTimelineStacksTheRolesInUse) {
  require_gnuplot();
  const HandRun hand;
  const fs::path out = dir_ / "memory.svg";
  write_memory_timeline_plot(hand.run(), out);
  const std::string svg = read_svg(out);
  EXPECT_THAT(svg, HasSubstr("simulated time (ms)"));
  EXPECT_THAT(svg, HasSubstr("GPU memory in use (GiB)"));
  EXPECT_THAT(svg, HasSubstr("hand_run (compress_conv) on test_gpu"));
  EXPECT_THAT(svg, HasSubstr("tensors' peak 6.25 GiB at t = 3.00 ms (reserved 7.00 of 8.00 GiB usable)"));
  for (const char* role : {"weight", "optimizer_state", "activation", "compressed", "temporary"}) {
    EXPECT_THAT(svg, HasSubstr(std::string(">") + role + "</text>")) << role;
  }
  // Roles that never hold a byte get no band and no legend entry.
  for (const char* role : {"prefetch", "gradient", "input"}) {
    EXPECT_THAT(svg, Not(HasSubstr(std::string(">") + role + "</text>"))) << role;
  }
  EXPECT_THAT(svg, HasSubstr("GPU capacity (8.00 GiB)"));  // the peak is over half the GPU
}

TEST_F(PlotsTest, MemoryTimelineOfAnOutOfMemoryRunSaysSo) {
  require_gnuplot();
  HandRun hand;
  hand.result.memory_events.resize(4);  // stopped after a2
  hand.result.out_of_memory = OutOfMemory{2, std::nullopt, 4, 3 * kGiB, 6 * kGiB, 8 * kGiB, 0.003};
  const fs::path out = dir_ / "oom.svg";
  write_memory_timeline_plot(hand.run(), out);
  EXPECT_THAT(read_svg(out), HasSubstr("out of memory at t = 3.00 ms"));
}

// Without gnuplot on PATH: no file, and an error that says which package to install.
TEST_F(PlotsTest, MissingGnuplotNamesThePackage) {
  const char* old_path = std::getenv("PATH");
  const std::string saved = old_path ? old_path : "";
  ::setenv("PATH", dir_.c_str(), 1);  // an empty directory
  const bool available = gnuplot_available();
  std::string message;
  try {
    write_plan_plots(hand_plan(), dir_ / "plots");
  } catch (const InputError& e) {
    message = e.what();
  }
  ::setenv("PATH", saved.c_str(), 1);
  EXPECT_FALSE(available);
  EXPECT_THAT(message, HasSubstr("gnuplot-nox"));
  EXPECT_FALSE(fs::exists(dir_ / "plots"));
}

}  // namespace
}  // namespace comptrain::sim

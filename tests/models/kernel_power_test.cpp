// The kernel power model (models/kernel_power.hpp) against hand computations: the voltage-frequency
// curve with its floor, a kernel's power from its SMs' and memory's activity, and how a power cap
// slows (or does not slow) it.

#include "comptrain/models/kernel_power.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace comptrain::models {
namespace {

constexpr double kTol = 1e-9;

// in_job 100 W, TDP 400 W: the SMs saturated draw 300 W above in_job; the memory saturated 150 W,
// 30 W of it in the DRAM, 120 W on chip. Voltage: 1 at the nominal clock, falling linearly to 0.6
// at half of it (v = 0.2 + 0.8 x), 0.6 below; the lowest clock 0.1.
GpuSpec test_gpu() {
  GpuSpec g;
  g.name = "test";
  g.idle_power = 50;
  g.in_job_power = 100;
  g.max_power = 400;
  g.memory_bound_power = 250;
  g.dram_power = 30;
  g.floor_clock = 0.5;
  g.floor_voltage = 0.6;
  g.min_clock = 0.1;
  return g;
}

GpuSpec capped(GpuSpec g, double watts) {
  g.power_limit = watts;
  return g;
}

TEST(KernelPower, TheVoltageFallsLinearlyToItsFloorAndStaysThere) {
  const GpuSpec g = test_gpu();
  EXPECT_NEAR(voltage_fraction(g, 1.0), 1.0, kTol);
  EXPECT_NEAR(voltage_fraction(g, 0.75), 0.8, kTol);
  EXPECT_NEAR(voltage_fraction(g, 0.5), 0.6, kTol);
  EXPECT_NEAR(voltage_fraction(g, 0.3), 0.6, kTol);
  EXPECT_NEAR(voltage_fraction(g, 0.01), 0.6, kTol);  // below min_clock: taken at min_clock
  // Without a curve the voltage follows the clock (dynamic power cubic in it).
  GpuSpec cubic = g;
  cubic.floor_clock = cubic.floor_voltage = cubic.min_clock = 0;
  EXPECT_NEAR(voltage_fraction(cubic, 0.3), 0.3, kTol);
}

TEST(KernelPower, AKernelDrawsWhatItsSmsAndMemoryDo) {
  const GpuSpec g = test_gpu();
  EXPECT_NEAR(kernel_watts(g, {1.0, 0.0, 0.0}, 1.0), 400, kTol);              // SMs saturated: the TDP
  EXPECT_NEAR(kernel_watts(g, {0.0, 1.0, 0.0}, 1.0), 250, kTol);              // memory saturated: memory_bound
  EXPECT_NEAR(kernel_watts(g, {1.0, 0.5, 0.0}, 1.0), 100 + 300 + 60 + 15, kTol);  // both: above the TDP
  EXPECT_NEAR(kernel_watts(g, {1.0, 0.0, 1.0}, 1.0), 100 + 300.0 / 2, kTol);  // half of it a launch gap
  EXPECT_NEAR(kernel_watts(g, {0.0, 0.0, 1.0}, 1.0), 100, kTol);              // nothing but the gap
  // At 0.75 of the clock: v^2 = 0.64, the arithmetic 1 / 0.75 s long.
  EXPECT_NEAR(kernel_watts(g, {1.0, 0.0, 0.0}, 0.75), 100 + 300 * 0.64 * 0.75, kTol);
  // A memory-bound kernel keeps its duration; its on-chip part scales with v^2, the DRAM's not.
  EXPECT_NEAR(kernel_watts(g, {0.0, 1.0, 0.0}, 0.5), 100 + 120 * 0.36 + 30, kTol);
}

TEST(KernelPower, WithoutACapKernelsKeepTheirTimeAndDrawAtMostTheTdp) {
  const GpuSpec g = test_gpu();
  const KernelRun gemm = run_kernel(g, {1.0, 0.0, 0.0});
  EXPECT_NEAR(gemm.seconds, 1.0, kTol);
  EXPECT_NEAR(gemm.watts, 400, kTol);
  EXPECT_DOUBLE_EQ(gemm.clock_fraction, 1.0);
  const KernelRun stream = run_kernel(g, {0.0, 1.0, 0.0});
  EXPECT_NEAR(stream.seconds, 1.0, kTol);
  EXPECT_NEAR(stream.watts, 250, kTol);
  // One that would draw 475 W at the nominal clock draws the TDP: its nominal duration is the one
  // measured at the TDP (the fitted efficiencies include it).
  const KernelRun both = run_kernel(g, {1.0, 0.5, 0.0});
  EXPECT_NEAR(both.seconds, 1.0, kTol);
  EXPECT_NEAR(both.watts, 400, 1e-6);
  // Without power values: the nominal duration and 0 W.
  EXPECT_NEAR(run_kernel(GpuSpec{}, {1.0, 0.5, 0.25}).seconds, 1.25, kTol);
  EXPECT_EQ(run_kernel(GpuSpec{}, {1.0, 0.5, 0.25}).watts, 0);
}

TEST(KernelPower, ACapClocksASaturatedKernelDownUntilItDrawsTheCap) {
  const GpuSpec g = test_gpu();
  // Above the floor: at x = 0.75 it draws 100 + 300 x 0.64 x 0.75 = 244 W.
  const KernelRun above = run_kernel(capped(g, 244), {1.0, 0.0, 0.0});
  EXPECT_NEAR(above.clock_fraction, 0.75, 1e-9);
  EXPECT_NEAR(above.seconds, 1.0 / 0.75, 1e-9);
  EXPECT_NEAR(above.watts, 244, 1e-9);
  // At the floor the power is linear in the clock: x = 0.3 draws 100 + 300 x 0.36 x 0.3 = 132.4 W.
  const KernelRun floor = run_kernel(capped(g, 132.4), {1.0, 0.0, 0.0});
  EXPECT_NEAR(floor.clock_fraction, 0.3, 1e-9);
  EXPECT_NEAR(floor.seconds, 1.0 / 0.3, 1e-8);
  // The report's clock is the same kernel's.
  EXPECT_NEAR(saturated_clock_fraction(g, 244), 0.75, 1e-9);
  EXPECT_DOUBLE_EQ(saturated_clock_fraction(g, 400), 1.0);
}

TEST(KernelPower, AKernelDrawingLessThanTheCapIsNotSlowed) {
  const GpuSpec g = test_gpu();
  // The memory-bound kernel draws 250 W: a 300 W cap leaves it alone.
  const KernelRun free = run_kernel(capped(g, 300), {0.0, 1.0, 0.0});
  EXPECT_NEAR(free.seconds, 1.0, kTol);
  EXPECT_NEAR(free.watts, 250, kTol);
  EXPECT_DOUBLE_EQ(free.clock_fraction, 1.0);
  // Under 200 W it is clocked down until its on-chip part fits, 120 v^2 + 30 = 100, and keeps its
  // duration: the memory, not the SMs, sets it.
  const KernelRun clocked = run_kernel(capped(g, 200), {0.0, 1.0, 0.0});
  const double v = std::sqrt(70.0 / 120.0);
  EXPECT_NEAR(clocked.seconds, 1.0, kTol);
  EXPECT_NEAR(clocked.watts, 200, 1e-9);
  EXPECT_NEAR(clocked.clock_fraction, (v - 0.2) / 0.8, 1e-9);
}

TEST(KernelPower, AKernelOverTheCapEvenAtTheLowestClockIsThrottledToIt) {
  const GpuSpec g = test_gpu();
  // At the floor voltage the memory-bound kernel still draws 100 + 43.2 + 30 = 173.2 W; under a
  // 150 W cap its 73.2 J are spread over 73.2 / 50 = 1.464 s.
  const KernelRun throttled = run_kernel(capped(g, 150), {0.0, 1.0, 0.0});
  EXPECT_NEAR(throttled.seconds, 73.2 / 50, kTol);
  EXPECT_NEAR(throttled.watts, 150, kTol);
  EXPECT_NEAR(throttled.clock_fraction, 0.1, kTol);
}

TEST(KernelPower, ACapSlowsAKernelRelativeToItsOperatingPointAtTheTdp) {
  const GpuSpec g = test_gpu();
  const KernelWork both{1.0, 0.5, 0.0};  // 475 W at the nominal clock: at the TDP it already runs slower
  // Compute-bound while x <= 2, above the floor while x >= 0.5: P(x) = 100 + x (360 (0.2 + 0.8 x)^2 + 15).
  // The clock that draws `watts`, by Newton's method on that polynomial.
  const auto clock_for = [](double watts) {
    double x = 1.0;
    for (int i = 0; i < 50; ++i) {
      const double v = 0.2 + 0.8 * x;
      const double f = x * (360 * v * v + 15) - (watts - 100);
      const double df = 360 * v * v + 15 + x * 360 * 2 * v * 0.8;
      x -= f / df;
    }
    return x;
  };
  const double at_tdp = clock_for(400);
  const double at_300 = clock_for(300);
  ASSERT_GT(at_300, 0.5);
  ASSERT_LT(at_tdp, 1.0);
  const KernelRun run = run_kernel(capped(g, 300), both);
  EXPECT_NEAR(run.watts, 300, 1e-6);
  EXPECT_NEAR(run.clock_fraction, at_300 / at_tdp, 1e-9);
  // Its nominal second is the one at the TDP's clock: under the cap it takes x_TDP / x_300 as long.
  EXPECT_NEAR(run.seconds, at_tdp / at_300, 1e-9);
}

}  // namespace
}  // namespace comptrain::models

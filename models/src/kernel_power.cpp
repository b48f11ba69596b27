#include "comptrain/models/kernel_power.hpp"

#include <algorithm>

namespace comptrain::models {

namespace {

// The lowest clock fraction the search goes to when the GPU gives no min_clock: a kernel with
// arithmetic draws in_job + O(x) there, below any cap above in_job.
constexpr double kLowestClock = 1e-6;
// Bisection steps: the interval shrinks to 2^-80 of [min_clock, 1], far below double precision
// of any duration it gives.
constexpr int kBisectionSteps = 80;

double lowest_clock(const GpuSpec& gpu) { return std::max(gpu.min_clock, kLowestClock); }

double seconds_at(const KernelWork& work, double x) { return std::max(work.compute / x, work.memory) + work.launch; }

// The kernel's dynamic energy (J above in_job over its duration) at clock fraction x.
double dynamic_joules(const GpuSpec& gpu, const KernelWork& work, double x) {
  const double sm = gpu.max_power - gpu.in_job_power;
  const double memory = (gpu.memory_bound_power > 0 ? gpu.memory_bound_power : gpu.max_power) - gpu.in_job_power;
  const double dram = std::min(gpu.dram_power, memory);
  const double v = voltage_fraction(gpu, x);
  return v * v * (sm * work.compute + (memory - dram) * work.memory) + dram * work.memory;
}

struct OperatingPoint {
  double seconds = 0;
  double watts = 0;
  double clock = 1;
};

// The kernel run at the highest clock whose power is at most `limit` (module comment).
OperatingPoint operating_point(const GpuSpec& gpu, const KernelWork& work, double limit) {
  const auto at = [&](double x) { return OperatingPoint{seconds_at(work, x), kernel_watts(gpu, work, x), x}; };
  const OperatingPoint nominal = at(1.0);
  if (nominal.watts <= limit) return nominal;
  double lo = lowest_clock(gpu);
  const OperatingPoint slowest = at(lo);
  if (slowest.watts > limit) {
    // Even the lowest clock draws more: the kernel's energy at that voltage, spread so that it
    // draws the limit.
    return {dynamic_joules(gpu, work, lo) / (limit - gpu.in_job_power), limit, lo};
  }
  double hi = 1.0;
  for (int i = 0; i < kBisectionSteps; ++i) {
    const double mid = 0.5 * (lo + hi);
    (kernel_watts(gpu, work, mid) <= limit ? lo : hi) = mid;
  }
  return at(lo);
}

}  // namespace

double voltage_fraction(const GpuSpec& gpu, double clock_fraction) {
  const double x = std::clamp(clock_fraction, lowest_clock(gpu), 1.0);
  if (!(gpu.floor_clock > 0)) return x;
  if (x <= gpu.floor_clock) return gpu.floor_voltage;
  return gpu.floor_voltage + (1.0 - gpu.floor_voltage) * (x - gpu.floor_clock) / (1.0 - gpu.floor_clock);
}

double kernel_watts(const GpuSpec& gpu, const KernelWork& work, double clock_fraction) {
  const double x = std::clamp(clock_fraction, lowest_clock(gpu), 1.0);
  const double seconds = seconds_at(work, x);
  if (!(seconds > 0)) return gpu.in_job_power;
  return gpu.in_job_power + dynamic_joules(gpu, work, x) / seconds;
}

KernelRun run_kernel(const GpuSpec& gpu, const KernelWork& work) {
  const double nominal_seconds = seconds_at(work, 1.0);
  if (!(gpu.max_power > 0) || !(nominal_seconds > 0)) return {nominal_seconds, 0.0, 1.0};
  const OperatingPoint at_tdp = operating_point(gpu, work, gpu.max_power);
  const bool capped = gpu.power_limit > 0 && gpu.power_limit < gpu.max_power;
  if (!capped) return {nominal_seconds, at_tdp.watts, 1.0};
  const OperatingPoint at_limit = operating_point(gpu, work, gpu.power_limit);
  // The nominal duration is the one at the TDP's operating point (module comment).
  return {nominal_seconds * at_limit.seconds / at_tdp.seconds, at_limit.watts, at_limit.clock / at_tdp.clock};
}

double saturated_clock_fraction(const GpuSpec& gpu, double watts) {
  if (!(gpu.max_power > 0) || watts >= gpu.max_power) return 1.0;
  return operating_point(gpu, KernelWork{1.0, 0.0, 0.0}, watts).clock;
}

}  // namespace comptrain::models

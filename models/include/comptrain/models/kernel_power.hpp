#pragma once
// The power one kernel draws, and how a power cap lengthens it (sim/README.md, "Energy").
//
// A kernel is described as the roofline sees it at the nominal clock: `compute` seconds of
// arithmetic, `memory` seconds of memory traffic, `launch` seconds of launch gap; it takes
// max(compute, memory) + launch. At SM clock fraction x (voltage fraction v(x), gpu.power.dvfs)
// it takes T(x) = max(compute / x, memory) + launch and its dynamic energy is
//
//   E(x) = v(x)^2 (S compute + C memory) + D memory,
//
// with S = max - in_job (the SMs saturated at the nominal clock draw the TDP), C = memory_bound -
// in_job - dram (the on-chip part of memory traffic: loads, stores, L2, crossbar; it runs on the
// core's voltage) and D = dram (the HBM devices, clocked apart). Dynamic CMOS energy per
// operation scales with V^2 (P = a C V^2 f); energy per byte of DRAM does not. The kernel draws
// P(x) = in_job + E(x) / T(x), increasing in x.
//
// Under a limit L (the cap, or max when none), the GPU runs the kernel at the highest clock x with
// P(x) <= L; when even min_clock draws more, it is throttled at the floor voltage until it draws
// L: T = E(min_clock) / (L - in_job) (its energy at that voltage spread over as long as the cap
// allows). The op-time model's nominal durations are taken as measured at the TDP (their fitted
// efficiencies include whatever TDP throttling the measurements had), so a cap lengthens a kernel
// by T_L / T_max and it draws min(P(1), L); without a cap a kernel keeps its nominal duration and
// draws min(P(1), max).

#include "comptrain/models/platform.hpp"

namespace comptrain::models {

struct KernelWork {
  double compute = 0;  // seconds of arithmetic at the nominal clock (FLOPs / (peak x efficiency))
  double memory = 0;   // seconds of memory traffic (bytes / (bandwidth x efficiency))
  double launch = 0;   // seconds of launch gap, during which the kernel does no work
};

struct KernelRun {
  double seconds = 0;         // under the GPU's power limit (nominal without one)
  double watts = 0;           // what the GPU draws while it runs (0 when the GPU has no power values)
  double clock_fraction = 1;  // its SM clock under the limit, relative to the nominal one
};

// The voltage at clock fraction x as a fraction of the nominal one (gpu.power.dvfs): linear in x
// from (floor_clock, floor_voltage) to (1, 1), floor_voltage below floor_clock; x itself when the
// GPU gives no curve. x is taken as at least min_clock.
double voltage_fraction(const GpuSpec& gpu, double clock_fraction);

// The kernel's power at clock fraction x (in_job + E(x) / T(x)); in_job for a kernel that does
// nothing.
double kernel_watts(const GpuSpec& gpu, const KernelWork& work, double clock_fraction);

// `work` on `gpu` under its power limit (none: nominal). Without power values (max_power 0) the
// nominal duration and 0 W.
KernelRun run_kernel(const GpuSpec& gpu, const KernelWork& work);

// The clock fraction at which a kernel that keeps the SMs saturated (no memory traffic) draws
// `watts`: 1 at or above max_power; at least min_clock.
double saturated_clock_fraction(const GpuSpec& gpu, double watts);

}  // namespace comptrain::models

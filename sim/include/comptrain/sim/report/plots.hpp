#pragma once
// SVG plots, drawn by gnuplot (Debian's gnuplot-nox) driven by the program: readable in any
// browser, no plotting runtime needed to view them. Every file is written atomically.

#include <filesystem>
#include <vector>

#include "comptrain/sim/report/simulate_report.hpp"
#include "comptrain/sim/studies/plan.hpp"

namespace comptrain::sim {

// Whether gnuplot can be run; the plot writers throw InputError saying how to install it
// when it cannot.
bool gnuplot_available();

// Throughput (samples/s) against batch size, one line per strategy.
void write_throughput_plot(const BatchSizePlan& plan, const std::filesystem::path& svg);
// Peak memory against batch size, one line per strategy, with the GPU capacity and the
// margin as horizontal lines.
void write_peak_memory_plot(const BatchSizePlan& plan, const std::filesystem::path& svg);
// Memory over simulated time, stacked by role, for one simulation.
void write_memory_timeline_plot(const SimulationRun& run, const std::filesystem::path& svg);

// The plan's plots into `directory` (created if needed): throughput.svg, peak_memory.svg.
// Returns the files written.
std::vector<std::filesystem::path> write_plan_plots(const BatchSizePlan& plan, const std::filesystem::path& directory);

}  // namespace comptrain::sim

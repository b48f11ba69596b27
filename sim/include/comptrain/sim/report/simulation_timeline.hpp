#pragma once
// A run's timelines: the memory timeline as CSV and a Chrome/Perfetto trace (one track per
// stream, counter tracks for memory per role).

#include <string>
#include <vector>

#include "comptrain/sim/report/simulate_report.hpp"

namespace comptrain::sim {

// One row per memory event: time in seconds, then bytes live per role, then the total.
std::string memory_timeline_csv(const SimulationRun& run);
// Chrome trace event format (JSON), opens in ui.perfetto.dev and chrome://tracing.
std::string perfetto_trace_json(const SimulationRun& run);

// Several runs on one time axis, one Chrome process each (pid 1, 2, ... in this order): a
// pipeline's stages (pipeline_report.hpp, pipeline_perfetto_trace_json).
struct TimelineProcess {
  const SimulationRun& run;
  std::string name;
};
std::string perfetto_trace_json(const std::vector<TimelineProcess>& processes);

}  // namespace comptrain::sim

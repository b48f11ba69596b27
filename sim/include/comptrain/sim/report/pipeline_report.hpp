#pragma once
// The report of a pipeline-parallel run (run/run.hpp, run_pipeline): the iteration, the
// throughput, and per stage its layers, its peak memory four ways, its bubble and its
// communication per layout group, in text and JSON (docs/outputs.md, "Pipeline runs").

#include <cstdint>
#include <string>

#include "comptrain/models/strategy.hpp"
#include "comptrain/sim/run/run.hpp"

namespace comptrain::sim {

std::string pipeline_report(const PreparedScenario& prepared, const models::StrategySpec& strategy, std::int64_t batch, const PipelineOutcome& outcome,
                            bool json);

// The Chrome/Perfetto trace of every stage's representative rank on the pipeline's one time axis
// (simulation_timeline.hpp): process p + 1 is stage p, named after its layers; a stage cut short
// by its out-of-memory shows what ran before it.
std::string pipeline_perfetto_trace_json(const PreparedScenario& prepared, const PipelineRun& run);

}  // namespace comptrain::sim

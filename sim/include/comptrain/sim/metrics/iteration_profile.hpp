#pragma once
// A metric of a replayed run: what the I/O simulation takes from it (engine/io_simulation.hpp).

#include "comptrain/models/schedule.hpp"
#include "comptrain/sim/engine/io_simulation.hpp"
#include "comptrain/sim/engine/replay.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::sim {

// From a replayed run: the optimizer step starts at the first optimizer-phase task (a host
// compute task of an offloaded step counts), else at the end; the launching thread's CPU time
// is the sum of the tasks' host_seconds.
IterationProfile iteration_profile(const traces::Trace& trace, const models::Schedule& schedule, const SimulationResult& result,
                                   int accumulation_steps);

}  // namespace comptrain::sim

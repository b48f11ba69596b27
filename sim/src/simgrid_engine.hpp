#pragma once
// The SimGrid configuration comptrain runs with, shared by the replay (simulation.cpp) and the
// raw SimGrid baseline of the benchmark (bench/simulate_bench.cpp), so both measure the same
// models.

#include <simgrid/s4u.hpp>
#include <xbt/log.h>

namespace comptrain::sim::detail {

// Before the engine is created: silence SimGrid's informational output (set_config logs too).
inline void silence_simgrid() { xbt_log_control_set("root.thres:critical"); }

// Right after the engine is created: the flow model without the wide-area TCP corrections
// (shared/reference/simgrid.md §3): plain CM02 max-min, no reverse-direction cross traffic, no
// per-flow window cap.
inline void configure_flow_model() {
  simgrid::s4u::Engine::set_config("network/model:CM02");
  simgrid::s4u::Engine::set_config("network/crosstraffic:0");
  simgrid::s4u::Engine::set_config("network/TCP-gamma:0");
}

}  // namespace comptrain::sim::detail

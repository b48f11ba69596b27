#pragma once
// The SimGrid engine as comptrain starts it, written once for every engine run (the replay, the
// collectives, the I/O simulation) and the benchmarks' raw SimGrid baselines, so all of them
// run the same models.

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

// SimGrid's engine, silenced and configured: one per process (it cannot be reset), so each run
// lives in a forked child or in a worker that runs nothing else.
class ConfiguredEngine {
 public:
  ConfiguredEngine() : engine_((silence_simgrid(), &argc_), argv_) { configure_flow_model(); }
  void run() { engine_.run(); }

 private:
  int argc_ = 1;
  char program_[10] = "comptrain";
  char* argv_[2] = {program_, nullptr};
  simgrid::s4u::Engine engine_;
};

}  // namespace comptrain::sim::detail

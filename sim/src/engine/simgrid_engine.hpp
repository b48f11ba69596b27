#pragma once
// The SimGrid engine as comptrain starts it, written once for every engine run (the replay, the
// collectives, the I/O simulation) and the benchmarks' raw SimGrid baselines, so all of them
// run the same models.

#include <simgrid/s4u.hpp>
#include <xbt/log.h>

#include <string>

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

// Each SimGrid actor runs on a stack of its own, 8 MiB by default (contexts/stack-size, in KiB),
// reserved as address space whether used or not: 2,048 loader workers or the collective senders
// of 2,048 nodes reserved 16 GiB, and under an address-space limit (ulimit -v 8 GiB) SimGrid
// aborted with "Failed to allocate stack" (shared/defects-2/08, 09). comptrain's actors are
// shallow: a stream's loop over its tasks, a loader worker, a checkpoint copier or flusher, a
// node's collective sends. Measured with the stack size set from outside: every shipped scenario
// run for it (the default, the ZeRO-3 and Mixtral clusters, the I/O and energy ones, the data
// loader, async checkpoints, offload, compression, recomputation, the adaptive bound) and the
// cluster plan ran with 8 KiB stacks, and the ZeRO-3 cluster overflowed 4 KiB. 256 KiB is 32 times
// what they need, and 2,048 actors reserve 512 MiB.
inline constexpr int kActorStackKiB = 256;
inline void configure_actor_stacks() { simgrid::s4u::Engine::set_config("contexts/stack-size:" + std::to_string(kActorStackKiB)); }

// SimGrid's engine, silenced and configured: one per process (it cannot be reset), so each run
// lives in a forked child or in a worker that runs nothing else.
class ConfiguredEngine {
 public:
  ConfiguredEngine() : engine_((silence_simgrid(), &argc_), argv_) {
    configure_flow_model();
    configure_actor_stacks();
  }
  void run() { engine_.run(); }

 private:
  int argc_ = 1;
  char program_[10] = "comptrain";
  char* argv_[2] = {program_, nullptr};
  simgrid::s4u::Engine engine_;
};

}  // namespace comptrain::sim::detail

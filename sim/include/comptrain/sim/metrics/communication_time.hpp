#pragma once
// A metric of a replayed run: its collectives' time and the part the compute stream did not hide.

#include <array>

#include "comptrain/models/schedule.hpp"
#include "comptrain/sim/core/time_difference.hpp"
#include "comptrain/sim/engine/replay.hpp"

namespace comptrain::sim {

// Collective time and how much of it the compute stream did not hide (rank 0's timeline): the
// exposed part is when a collective ran and no compute-stream task did.
// A collective on the compute stream itself (tensor parallelism's forward ones) is exposed
// throughout: the compute stream's own kernels are the non-collective tasks on it. One on a side
// stream (the data-parallel comm stream, context parallelism's ring, the tensor stream's
// backward tensor-parallel collectives) is hidden while a compute-stream task runs.
struct CommunicationTime {
  double collective_seconds = 0;  // the union of the collectives' intervals
  double exposed_seconds = 0;     // of which with the compute stream idle (at most collective_seconds)
  double hidden_seconds() const { return time_difference(collective_seconds, exposed_seconds); }  // never negative
  // The same per layout group the collectives run over (models::Task::over: tensor, data, ...),
  // indexed by traces::ParallelGroup; zeros for a group with no collective.
  struct Group {
    double collective_seconds = 0;
    double exposed_seconds = 0;
    int collectives = 0;
  };
  std::array<Group, traces::kParallelGroupCount> by_group{};
};
CommunicationTime communication_time(const models::Schedule& schedule, const SimulationResult& result);

}  // namespace comptrain::sim

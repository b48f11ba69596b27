#pragma once
// What bounds an iteration besides its GPU work, decided once for the I/O simulation
// (engine/io_simulation.hpp, IterationBound) and the planner (studies/plan.hpp, PlanLimit).

namespace comptrain::sim {

// The share of an iteration above which a wait names what bounds it: 10%, a design choice (the
// planner's PlanOptions::bottleneck_share defaults to it).
inline constexpr double kBottleneckShare = 0.10;

enum class Bottleneck { none, network, host, checkpoint };

// From the iteration's waits, each as a fraction of it (>= 0): none when every one is below
// `share`; else the checkpoint's cost when it is the largest, else the exposed communication
// (network) or the compute stream's wait for the launching thread (host), whichever is larger,
// network on a tie.
constexpr Bottleneck dominant_wait(double network, double host, double checkpoint = 0, double share = kBottleneckShare) {
  const double largest = network > host ? network : host;
  if ((checkpoint > largest ? checkpoint : largest) < share) return Bottleneck::none;
  if (checkpoint > largest) return Bottleneck::checkpoint;
  return network >= host ? Bottleneck::network : Bottleneck::host;
}

}  // namespace comptrain::sim

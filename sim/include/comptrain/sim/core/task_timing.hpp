#pragma once
// When one task of a schedule ran in the replay: the engine writes it, the memory model and the
// metrics read it.

namespace comptrain::sim {

struct TaskTiming {
  double ready = 0;  // its stream was free and it started waiting for other streams
  double start = 0;  // its dependencies were met and it began
  double end = 0;
};

}  // namespace comptrain::sim

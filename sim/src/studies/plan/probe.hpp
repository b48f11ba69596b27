#pragma once
// One probe of the planner: a strategy at a batch, simulated in a worker process and reduced to
// the PlanPoint the search needs (studies/plan.hpp), sent back over the pipe in the wire format.

#include <cstdint>
#include <string>

#include "comptrain/models/strategy.hpp"
#include "comptrain/sim/metrics/memory_peak.hpp"
#include "comptrain/sim/run/run.hpp"
#include "comptrain/sim/runtime/wire.hpp"
#include "comptrain/sim/studies/plan.hpp"

namespace comptrain::sim::planner {

// Whether a probe runs the scenario's I/O simulation after its replay (plan.hpp, "I/O"): only for
// a point within the memory limit, so that points that do not fit cost no fork.
struct ProbeIo {
  bool run = false;
  MemoryMetric metric = MemoryMetric::reserved;
  std::int64_t limit_bytes = 0;
};

// What a probe sends back: the point, and where the strategy does not apply at its batch, why.
struct ProbedPoint {
  PlanPoint point;
  std::string note;
};

// The four peaks of a point whose simulation ran, as metrics/memory_peak.hpp counts them.
inline MemoryPeaks peaks_of(const PlanPoint& point) {
  return {point.exact_peak_bytes, point.allocated_peak_bytes, point.reserved_peak_bytes, point.device_peak_bytes};
}

// Runs in a worker process: one simulation, reduced to what the planner needs, replayed in
// this process (the worker is a fresh child already), or, where the I/O is simulated too, replayed
// in a child and the I/O simulated here. A strategy that does not apply at this batch is a point of
// its own, with its reason. `steps` > 0 replaces the scenario's gradient accumulation steps (the
// scenario is prepared again, in the worker). Returns wire::encode(ProbedPoint).
std::string probe(const PreparedScenario& given, const models::StrategySpec& spec, std::int64_t batch, const ProbeIo& io, int steps = 0);

}  // namespace comptrain::sim::planner

namespace comptrain::sim {

// Field by field (not the struct's bytes), with the tag and version the reader checks: a field
// added to PlanPoint is added here and the version bumped.
template <>
struct wire::Codec<planner::ProbedPoint> {
  static constexpr std::string_view tag = "ProbedPoint";
  static constexpr std::uint32_t version = 2;
  static void write(wire::Writer& w, const planner::ProbedPoint& probed) {
    const PlanPoint& p = probed.point;
    w.put(p.batch);
    w.put(p.fits);
    w.put(p.out_of_memory);
    w.put(p.inapplicable);
    w.put(p.simulation_failed);
    w.put(p.peak_bytes);
    w.put(p.exact_peak_bytes);
    w.put(p.allocated_peak_bytes);
    w.put(p.reserved_peak_bytes);
    w.put(p.device_peak_bytes);
    w.put(p.iteration_seconds);
    w.put(p.samples_per_second);
    w.put(p.stall_seconds);
    w.put(p.collective_seconds);
    w.put(p.exposed_communication_seconds);
    w.put(p.host_wait_seconds);
    w.put(p.joules);
    w.put(p.samples_per_joule);
    w.put(p.gpu_average_watts);
    w.put(p.node_average_watts);
    w.put(p.within_energy_budget);
    w.put(p.io_modelled);
    w.put(p.io_bound);
    w.put(p.mean_iteration_seconds);
    w.put(p.data_wait_seconds);
    w.put(p.checkpoint_seconds_per_iteration);
    w.put(p.checkpoint_stall_seconds);
    w.put(p.checkpoint_interval_for_target);
    w.put(p.bubble_seconds);
    w.put_string(probed.note);
  }
  static planner::ProbedPoint read(wire::Reader& in) {
    planner::ProbedPoint probed;
    PlanPoint& p = probed.point;
    p.batch = in.get<std::int64_t>();
    p.fits = in.get<bool>();
    p.out_of_memory = in.get<bool>();
    p.inapplicable = in.get<bool>();
    p.simulation_failed = in.get<bool>();
    p.peak_bytes = in.get<std::int64_t>();
    p.exact_peak_bytes = in.get<std::int64_t>();
    p.allocated_peak_bytes = in.get<std::int64_t>();
    p.reserved_peak_bytes = in.get<std::int64_t>();
    p.device_peak_bytes = in.get<std::int64_t>();
    p.iteration_seconds = in.get<double>();
    p.samples_per_second = in.get<double>();
    p.stall_seconds = in.get<double>();
    p.collective_seconds = in.get<double>();
    p.exposed_communication_seconds = in.get<double>();
    p.host_wait_seconds = in.get<double>();
    p.joules = in.get<double>();
    p.samples_per_joule = in.get<double>();
    p.gpu_average_watts = in.get<double>();
    p.node_average_watts = in.get<double>();
    p.within_energy_budget = in.get<bool>();
    p.io_modelled = in.get<bool>();
    p.io_bound = in.get<IterationBound>();
    p.mean_iteration_seconds = in.get<double>();
    p.data_wait_seconds = in.get<double>();
    p.checkpoint_seconds_per_iteration = in.get<double>();
    p.checkpoint_stall_seconds = in.get<double>();
    p.checkpoint_interval_for_target = in.get<int>();
    p.bubble_seconds = in.get<double>();
    probed.note = in.get_string();
    return probed;
  }
};

}  // namespace comptrain::sim

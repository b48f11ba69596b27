#include "studies/plan/probe.hpp"

#include <optional>
#include <utility>
#include <variant>

#include "comptrain/sim/engine/io_simulation.hpp"
#include "comptrain/sim/engine/replay.hpp"
#include "comptrain/sim/metrics/communication_time.hpp"
#include "comptrain/sim/metrics/iteration_energy.hpp"

namespace comptrain::sim::planner {
namespace {

// A pipeline layout's point: every stage replayed together (run_pipeline); its peaks are the
// highest stage's, its communication and bubble the stage where they take longest. No I/O: the
// pipeline replay does not run the loader or the checkpoint (sim/engine/pipeline_replay.hpp).
void probe_pipeline(const PreparedScenario& prepared, const models::StrategySpec& spec, std::int64_t batch, PlanPoint& point, std::string& note) {
  PipelineOutcome outcome = run_pipeline(prepared, spec, batch, Isolation::this_process);
  if (const auto* not_applicable = std::get_if<models::NotApplicable>(&outcome)) {
    point.inapplicable = true;
    note = not_applicable->reason;
    return;
  }
  const PipelineRun& run = std::get<PipelineRun>(outcome);
  if (!run.result.fits()) {
    point.out_of_memory = true;
    point.peak_bytes = out_of_memory_peak(*run.result.out_of_memory);
    return;
  }
  for (std::size_t p = 0; p < run.stages.size(); ++p) {
    const SimulationResult& r = run.result.stages[p];
    point.exact_peak_bytes = std::max(point.exact_peak_bytes, r.peak_bytes);
    point.allocated_peak_bytes = std::max(point.allocated_peak_bytes, r.device.peak_allocated);
    point.reserved_peak_bytes = std::max(point.reserved_peak_bytes, r.device.peak_reserved);
    point.device_peak_bytes = std::max(point.device_peak_bytes, r.device.device_peak());
    point.stall_seconds = std::max(point.stall_seconds, r.compute_stall_seconds);
    point.host_wait_seconds = std::max(point.host_wait_seconds, r.host_wait_seconds);
    const CommunicationTime communication = communication_time(run.stages[p].schedule, r);
    point.collective_seconds = std::max(point.collective_seconds, communication.collective_seconds);
    point.exposed_communication_seconds = std::max(point.exposed_communication_seconds, communication.exposed_seconds);
    point.bubble_seconds = std::max(point.bubble_seconds, run.result.bubble_seconds[p]);
  }
  point.iteration_seconds = run.result.iteration_seconds;
  point.mean_iteration_seconds = run.result.iteration_seconds;
}

}  // namespace

std::string probe(const PreparedScenario& given, const models::StrategySpec& spec, std::int64_t batch, const ProbeIo& io, int steps) {
  std::optional<PreparedScenario> accumulating;
  if (steps > 0 && steps != given.scenario().accumulation_steps) {
    Scenario scenario = given.scenario();
    scenario.accumulation_steps = steps;
    accumulating.emplace(std::move(scenario));
  }
  const PreparedScenario& prepared = accumulating ? *accumulating : given;
  ProbedPoint probed;
  PlanPoint& point = probed.point;
  point.batch = batch;
  if (is_pipeline(prepared.scenario())) {
    probe_pipeline(prepared, spec, batch, point, probed.note);
    return wire::encode(probed);
  }
  auto scheduled = schedule_run(prepared, spec, batch);
  // With model.sequence_bins the shorter bins replay first, each in a child (forked before this
  // process runs SimGrid); the point's iteration is then the mean over the bins.
  auto shorter = std::holds_alternative<ScheduledRun>(scheduled) ? run_shorter_sequence_bins(prepared, spec, batch)
                                                                : std::variant<std::vector<SequenceBinRun>, models::NotApplicable>{};
  if (const auto* not_applicable = std::get_if<models::NotApplicable>(&shorter)) scheduled = *not_applicable;
  if (const auto* not_applicable = std::get_if<models::NotApplicable>(&scheduled)) {
    point.inapplicable = true;
    probed.note = not_applicable->reason;
  } else {
    const ScheduledRun& run = std::get<ScheduledRun>(scheduled);
    // SimGrid's engine runs once per process and a child forked after it ran inherits its state:
    // with I/O to simulate, the replay runs in a child and the I/O here, in the worker.
    const SimulationResult r = replay(prepared, run, io.run ? Isolation::child_process : Isolation::this_process);
    if (r.out_of_memory) {
      point.out_of_memory = true;
      point.peak_bytes = out_of_memory_peak(*r.out_of_memory);
    } else {
      point.exact_peak_bytes = r.peak_bytes;
      point.allocated_peak_bytes = r.device.peak_allocated;
      point.reserved_peak_bytes = r.device.peak_reserved;
      point.device_peak_bytes = r.device.device_peak();
      point.iteration_seconds = r.iteration_seconds;
      if (prepared.scenario().sequence_bins) {
        const auto mean = sequence_bins_result(prepared.scenario(), std::get<std::vector<SequenceBinRun>>(std::move(shorter)), r).mean_iteration_seconds();
        if (!mean) {
          // A shorter bin that does not fit where the longest does (its own allocation pattern): the batch does not train.
          point.out_of_memory = true;
          point.peak_bytes = r.device.peak_reserved;
          probed.note = "a shorter sequence bin does not fit";
          return wire::encode(probed);
        }
        point.iteration_seconds = *mean;
      }
      point.mean_iteration_seconds = point.iteration_seconds;
      point.stall_seconds = r.compute_stall_seconds;
      point.host_wait_seconds = r.host_wait_seconds;
      const CommunicationTime communication = communication_time(run.schedule, r);
      point.collective_seconds = communication.collective_seconds;
      point.exposed_communication_seconds = communication.exposed_seconds;
      std::optional<IoResult> io_result;
      if (io.run && peak_in(io.metric, peaks_of(point)) <= io.limit_bytes) io_result = simulate_run_io(prepared, run, r, Isolation::this_process);
      if (io_result) {
        point.io_modelled = true;
        point.io_bound = io_result->bound;
        point.mean_iteration_seconds = io_result->mean_iteration_seconds;
        point.data_wait_seconds = io_result->data_wait_seconds;
        if (const auto& c = io_result->checkpoint) {
          point.checkpoint_seconds_per_iteration = c->seconds_per_iteration;
          point.checkpoint_stall_seconds = c->stall_seconds;
          point.checkpoint_interval_for_target = c->interval_for_target.value_or(0);
        }
      }
      if (r.energy) {
        const IterationEnergy energy = iteration_energy(*r.energy, io_result ? &*io_result : nullptr, prepared.platform());
        point.joules = energy.total_joules;
        point.gpu_average_watts = energy.gpu_average_watts();
        point.node_average_watts = energy.node_average_watts();
      }
    }
  }
  return wire::encode(probed);
}

}  // namespace comptrain::sim::planner

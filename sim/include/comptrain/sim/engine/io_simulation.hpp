#pragma once
// The iteration with its I/O: the data loader and checkpointing, simulated with SimGrid on one
// node of the job after the replay has given the iteration's GPU timeline.
//
// The node (its own SimGrid platform, one engine run in a forked child):
//   - one host per GPU, the node's CPU host (host.cores cores; a decode of s seconds is an
//     execution of s on one core, so more workers than cores share them), and a host standing
//     for the shared file system's servers;
//   - per GPU a split-duplex PCIe link to the CPU host (host_link), and, with more than one GPU,
//     one host-memory link all copies share (host.memory_bandwidth), as in the replay;
//   - the node-local disk: a SimGrid disk on the CPU host (storage.local read and write rates);
//   - the shared file system: the node's client link (storage.shared.per_node_bandwidth, each
//     direction) and the node's share of the aggregate rates (read_bandwidth / nodes and
//     write_bandwidth / nodes, latency per request). Every node of a data-parallel job does the
//     same I/O at the same time, so each gets 1/nodes of the aggregate, as the replay's
//     symmetric ranks carry every rank's share of the network.
// The actors: per GPU a training loop (it takes its batch, sleeps the replay's forward and
// backward, waits for an async checkpoint copy, sleeps the optimizer step, writes a sync
// checkpoint, its chunks' torch.save serialization run on one core of the CPU host at
// host.torch_save_bandwidth; with checkpoint.wait: save, waits there for an async checkpoint's
// copies; the node's GPUs meet at the end of every iteration, as their collectives make them),
// its loader workers on the CPU host (data_loader.hpp), and for async checkpoints a copier
// (device -> pinned host cache) and a flusher (cache -> file).
//
// What is averaged, exactly: warm-up iterations run until the iteration times repeat with the
// loader's period (its workers per GPU); that gives the steady iteration T. Then a checkpoint is
// taken and iterations run until its flush has ended and the iteration times are steady again:
// those iterations' extra time over T is the checkpoint's cost E, and every later iteration of
// the interval is steady, so the interval costs N·T + E without simulating it. When the
// checkpoint's effects outlast the interval (the next checkpoint comes before the flush ends),
// whole intervals are simulated until two in a row take the same time (at most 8), and E is the
// last one's excess.
//
// A measured run instead (IoInputs::run_checkpoints = N, validation points that ran N
// checkpoints): the first checkpoint is taken on an empty host cache after the warm-up, N are
// taken, one every `every` iterations, and the stall and the iteration time are the run's means
// (the slowest GPU's stall per checkpoint, averaged over the N), not the steady state's: a short
// run's first checkpoints find the host cache empty, while in a long one each checkpoint's copies
// may wait for the previous checkpoints' flushes to free it.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "comptrain/models/platform.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/sim/config/checkpoint.hpp"
#include "comptrain/sim/engine/collectives.hpp"
#include "comptrain/sim/config/data_loader.hpp"
#include "comptrain/sim/engine/replay.hpp"
#include "comptrain/sim/runtime/wire.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::sim {

// What the I/O simulation takes from the replay: one GPU's iteration.
struct IterationProfile {
  double seconds = 0;          // the replayed iteration
  double optimizer_start = 0;  // when its optimizer step starts (the async checkpoint's wait point)
  std::int64_t samples = 0;    // samples one GPU takes per iteration (the batch x accumulation steps)
  double exposed_communication_seconds = 0;
  double host_wait_seconds = 0;
  // The launching thread's CPU time per iteration (the schedule's host_seconds: Python, the
  // dispatcher, autograd and the CUDA launches; models::Task::host_seconds). With a data section
  // it runs on the node's CPU host next to the loader workers (data_loader.hpp).
  double launch_seconds = 0;
};

// What sets the pace of the steady iteration:
//   loader    the iteration waits for its batch and the workers spend more time decoding than reading
//   storage   it waits for its batch and the workers spend more time reading
//   host      no wait for the batch, but for the launching thread: slowed by the cores it shares
//             with the loader workers (data_loader.hpp), or, in the replay, the GPU waiting for it
//             >= 10% of the iteration and >= the exposed communication
//   network   no wait; exposed communication >= 10% of the iteration and >= the host's wait
//   gpu       none of these
// (10%: kBottleneckShare, core/bottleneck.hpp: dominant_wait decides, as for the planner.)
enum class IterationBound { gpu, network, host, loader, storage };
std::string_view to_string(IterationBound bound);

struct CheckpointResult {
  CheckpointMode mode = CheckpointMode::sync;
  CheckpointWait wait = CheckpointWait::step;  // async
  int every = 1;
  StorageTier to = StorageTier::shared;
  CheckpointSizes sizes;
  // The training time lost to one checkpoint: sync, the save after the step; async, the wait
  // before the next step (wait: save, at the end of the save) for copies not finished (the host
  // cache full included). The slowest GPU of the node's.
  double stall_seconds = 0;
  double persist_seconds = 0;             // from the checkpoint's start to its last byte in the file
  double serialize_seconds = 0;           // sync: the stall's time in torch.save's serialization (host.torch_save_bandwidth)
  double save_overhead_seconds = 0;       // the stall's fixed part, paid before the bytes move (storage.shared.checkpoint_overhead; 0 without)
  double extra_seconds_per_interval = 0;  // E: the interval's time over `every` steady iterations
  double seconds_per_iteration = 0;       // E / every: the checkpoint's cost averaged over the interval
  double overhead = 0;                    // seconds_per_iteration / the steady iteration
  std::int64_t host_bytes_per_node = 0;   // the most host memory the node's checkpoint copies held at once
  int affected_iterations = 0;            // iterations after the checkpoint's start until steady again
  bool outlasts_interval = false;         // the effects outlast the interval (whole intervals simulated)
  int run_checkpoints = 0;                // IoInputs::run_checkpoints: 0, the steady state; N, the means over a run of N checkpoints
  // plan.checkpoint_overhead: the smallest interval whose overhead E / (N·T) is at most the
  // target, with N >= affected_iterations so that one checkpoint's flush ends before the next
  // (E is then the same for every such N); nullopt without a target.
  std::optional<double> target_overhead;
  std::optional<int> interval_for_target;
};

struct IoResult {
  bool data_loader = false;             // the scenario has a data section (else batches are always ready)
  double gpu_iteration_seconds = 0;     // the replay's iteration
  double steady_iteration_seconds = 0;  // with the loader, no checkpoint
  double data_wait_seconds = 0;         // per steady iteration, the wait for the next batch (the node's GPUs meet: the slowest GPU's wait)
  double batch_read_seconds = 0;        // one batch's read by one worker, in the steady state (of the GPU that waited most)
  double batch_decode_seconds = 0;      // one batch's decode by one worker, in the steady state (likewise)
  // Per steady iteration, the wait for the launching thread's CPU time (IterationProfile::
  // launch_seconds) beyond the replayed iteration: it shares the node's cores with the workers.
  double launch_seconds = 0;       // the launching thread's CPU time per iteration (IterationProfile), with a data section
  double launch_wait_seconds = 0;
  IterationBound bound = IterationBound::gpu;
  std::optional<CheckpointResult> checkpoint;
  double mean_iteration_seconds = 0;    // steady + the checkpoint's cost per iteration
  int simulated_iterations = 0;
};

struct IoInputs {
  models::Platform platform;
  ClusterShape shape;
  IterationProfile profile;
  std::optional<DataSpec> data;
  std::optional<CheckpointSpec> checkpoint;
  CheckpointSizes sizes;  // with a checkpoint
  std::optional<double> target_overhead;
  // 0: the steady state (above). N >= 1: a run of N checkpoints from an empty host cache, as a
  // measurement over a fixed number of iterations saw it; the result's stall and mean iteration
  // are the run's means (no interval_for_target).
  int run_checkpoints = 0;
};

// InputError when the platform lacks the storage a section names (no storage.shared for
// `from: shared`, ...), a sync checkpoint's host.torch_save_bandwidth, or a section's sizes do
// not fit (a host cache smaller than one chunk). Each message begins with the position the
// field was read at (DataSpec::from_position, CheckpointSpec::to_position, mode_position), or
// with `source` for a spec built in code (a validation table's point: "t.jsonl:3").
void check_io_inputs(const IoInputs& inputs, std::string_view source);

// Runs the simulation in a forked child (SimGrid's engine runs once per process).
IoResult simulate_io(const IoInputs& inputs);
// The same in this process: once per process.
IoResult simulate_io_in_this_process(const IoInputs& inputs);

// How the result crosses from the I/O simulation's child process (runtime/wire.hpp).
template <>
struct wire::Codec<IoResult> {
  static constexpr std::string_view tag = "IoResult";
  static constexpr std::uint32_t version = 2;  // 2: CheckpointResult::run_checkpoints
  static void write(wire::Writer& w, const IoResult& result);
  static IoResult read(wire::Reader& in);
};

}  // namespace comptrain::sim

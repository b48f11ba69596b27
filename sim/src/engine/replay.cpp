#include "comptrain/sim/engine/replay.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <simgrid/s4u.hpp>
#include <stdexcept>
#include <string>

#include "comptrain/sim/engine/replay_cost.hpp"
#include "comptrain/sim/runtime/workers.hpp"
#include "engine/cluster_network.hpp"
#include "engine/energy_meter.hpp"
#include "engine/gpu_power_draw.hpp"
#include "engine/simgrid_engine.hpp"

namespace comptrain::sim {
namespace {

namespace sg4 = simgrid::s4u;
using models::BufferId;
using models::Stream;
using models::TaskId;
using models::TaskKind;
using detail::ClusterNetwork;

using detail::kGpuSpeed;

// One simulation: the SimGrid platform (a ClusterNetwork: one GPU, or every GPU of a cluster
// shape), one actor per stream of each replayed rank, and the bookkeeping they share. Actors run
// one at a time (SimGrid's maestro), so plain members need no locking.
//
// Ranks (sim/README.md, "Clusters and collectives"). Data-parallel ranks run the same schedule,
// so by default one rank is replayed (ReplayRanks::symmetric) and the network carries every
// rank's share of its traffic: a collective is the whole group's (ClusterNetwork::run_collective),
// and a host-link copy is made by every GPU of the node at once, sharing the node's host
// memory. ReplayRanks::every_rank replays each rank with its own actors instead: a collective
// starts when every rank's comm stream has reached it and ends for all at once, and each GPU
// makes its own copies. Only rank 0's timings and memory are recorded; the two agree where the
// ranks are symmetric (tests/sim/cluster_replay_test.cpp).
class Replay {
 public:
  Replay(const models::Platform& platform, const models::Schedule& schedule, const FrameworkOnGpu& framework, ClusterShape shape,
         ReplayRanks ranks)
      : platform_(platform),
        schedule_(schedule),
        framework_(framework),
        shape_(shape),
        replayed_ranks_(ranks == ReplayRanks::every_rank ? shape.ranks() : 1),
        tracker_(schedule),
        allocated_once_(schedule.buffers.size(), false),
        remaining_users_(schedule.buffers.size(), 0),
        task_buffers_(schedule.tasks.size()),
        first_launch_(schedule.tasks.size(), 0.0),
        gate_(schedule.tasks.size(), kNoGate) {
    result_.tasks.resize(schedule.tasks.size());
    for (TaskId t = 0; t < schedule.tasks.size(); ++t) {
      const models::Task& task = schedule.tasks[t];
      auto& buffers = task_buffers_[t];
      buffers = task.creates;
      buffers.insert(buffers.end(), task.uses.begin(), task.uses.end());
      std::sort(buffers.begin(), buffers.end());
      buffers.erase(std::unique(buffers.begin(), buffers.end()), buffers.end());
      for (BufferId b : buffers) ++remaining_users_[b];
      stream_tasks_[static_cast<std::size_t>(task.stream)].push_back(t);
    }
    // Eager PyTorch issues every kernel from one CPU thread, which spends each task's
    // host_seconds, in `tasks` order, before the task may start on its stream, and waits in a
    // task marked blocks_host until it has ended. That thread never waits for anything else, so
    // its launch times are known in advance up to the first blocking task, and after each one
    // from its end (finish_task): no actor needs to replay it. A stream that gets ahead of the
    // thread sleeps until the launch (run_stream).
    double clock = 0;
    TaskId gate = kNoGate;
    for (TaskId t = 0; t < schedule.tasks.size(); ++t) {
      if (gate == kNoGate) {
        clock += schedule.tasks[t].host_seconds;
        first_launch_[t] = clock;
      } else {
        gate_[t] = gate;
      }
      if (schedule.tasks[t].blocks_host) gate = t;
    }
  }

  SimulationResult run() {
    detail::ConfiguredEngine engine;
    // The energy plugins attach to hosts and links as they are created: before the platform.
    const bool energy = detail::has_power_values(platform_);
    if (energy) detail::init_energy_plugins(detail::has_link_power(platform_));
    // Replaying one rank, the other nodes' host sides run nothing.
    network_.emplace(platform_, shape_, node_detail());
    // Replaying one rank, a collective that repeats takes its first run's time: the comm stream
    // runs collectives one at a time, and on links that copies never take (sim/README.md,
    // "Collectives that repeat"). Every rank's replay, the reference, simulates each one.
    if (replayed_ranks_ == 1 && collective_times_reused(platform_, schedule_, shape_)) {
      network_->reuse_collective_times(energy && detail::has_link_power(platform_));
    }
    if (energy) energy_meter_.emplace(*network_, platform_, replayed_ranks_ == 1);

    // Weights, buffers and optimizer state are in GPU memory before the iteration starts.
    for (BufferId b = 0; b < schedule_.buffers.size(); ++b) {
      if (!schedule_.buffers[b].resident) continue;
      tracker_.allocate(b, 0.0, std::nullopt);
      allocated_once_[b] = true;
    }

    mutex_ = sg4::Mutex::create();
    if (replayed_ranks_ > 1) collective_barrier_ = sg4::Barrier::create(static_cast<unsigned>(replayed_ranks_));
    ranks_.reserve(static_cast<std::size_t>(replayed_ranks_));
    for (int r = 0; r < replayed_ranks_; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
    for (auto& rank : ranks_) rank->start();
    engine.run();
    if (energy_meter_) result_.energy = energy_meter_->finish();
    return finish();
  }

 private:
  // One replayed GPU: its streams' actors and what they wait on. Rank 0 also records the
  // timings and drives the memory tracker.
  class Rank {
   public:
    Rank(Replay& replay, int index)
        : replay_(replay),
          index_(index),
          gpu_(replay.network_->gpu(index)),
          power_(replay.network_->gpu_power(index), replay.platform_.gpu),
          node_(index / replay.shape_.gpus_per_node),
          done_(replay.schedule_.tasks.size(), false),
          launch_(replay.first_launch_),
          waiting_streams_(replay.schedule_.tasks.size(), 0) {
      for (auto& woken : stream_woken_) woken = sg4::ConditionVariable::create();
    }

    void start() {
      power_.start(index_ == 0 ? "power" : "power@" + std::to_string(index_));
      for (std::size_t s = 0; s < models::kStreamCount; ++s) {
        if (replay_.stream_tasks_[s].empty()) continue;
        const std::string name = std::string(models::to_string(static_cast<Stream>(s))) + (index_ == 0 ? "" : "@" + std::to_string(index_));
        // The host stream's work runs on the node's host (its CPU), the others on the GPU.
        sg4::Host* where = static_cast<Stream>(s) == Stream::host ? replay_.network_->host(node_) : gpu_;
        sg4::Actor::create(name, where, [this, s] { run_stream(s); });
      }
    }

    bool done(TaskId t) const { return done_[t]; }
    double launch(TaskId t) const { return launch_[t]; }

   private:
    bool records() const { return index_ == 0; }

    void run_stream(std::size_t stream) {
      for (TaskId t : replay_.stream_tasks_[stream]) {
        const models::Task& task = replay_.schedule_.tasks[t];
        const double free = sg4::Engine::get_clock();
        wait_for_launch(stream, t);
        const double ready = sg4::Engine::get_clock();
        wait_for(stream, task.after);
        const double start = sg4::Engine::get_clock();
        if (records()) {
          TaskTiming& timing = replay_.result_.tasks[t];
          timing.ready = ready;
          timing.start = start;
          if (task.stream == Stream::compute) replay_.result_.host_wait_seconds += ready - free;
          for (BufferId b : task.creates) {
            if (replay_.allocated_once_[b]) continue;
            replay_.tracker_.allocate(b, start, t);
            replay_.allocated_once_[b] = true;
          }
        }
        execute(task);
        const double end = sg4::Engine::get_clock();
        if (records()) replay_.result_.tasks[t].end = end;
        finish_task(t, end);
      }
    }

    // Until the launching thread has issued task `t` (the Replay constructor's comment).
    void wait_for_launch(std::size_t stream, TaskId t) {
      if (replay_.gate_[t] != kNoGate) wait_for(stream, {replay_.gate_[t]});
      if (launch_[t] > sg4::Engine::get_clock()) sg4::this_actor::sleep_until(launch_[t]);
    }

    // A blocking task has ended at `time`: the launching thread goes on from there, up to and
    // including the next blocking task.
    void resume_launches_after(TaskId blocking, double time) {
      double clock = time;
      const auto& tasks = replay_.schedule_.tasks;
      for (TaskId t = blocking + 1; t < tasks.size() && replay_.gate_[t] == blocking; ++t) {
        clock += tasks[t].host_seconds;
        launch_[t] = clock;
      }
    }

    // Blocks the actor of `stream` until every task in `dependencies` has ended. Each stream
    // waits on its own condition variable and says which task it waits for, so a task's end
    // wakes exactly the streams that wait for it (sim/bench: fewer wake-ups than one shared
    // variable notified at every end).
    void wait_for(std::size_t stream, const std::vector<TaskId>& dependencies) {
      for (TaskId d : dependencies) {
        if (done_[d]) continue;
        std::unique_lock<sg4::Mutex> lock(*replay_.mutex_);
        waiting_streams_[d] |= static_cast<std::uint8_t>(1u << stream);
        while (!done_[d]) stream_woken_[stream]->wait(lock);
      }
    }

    void execute(const models::Task& task) {
      switch (task.kind) {
        case TaskKind::offload:
          copy(task, /*to_host=*/true);
          return;
        case TaskKind::prefetch:
          copy(task, /*to_host=*/false);
          return;
        case TaskKind::op:
        case TaskKind::recompute:
        case TaskKind::compress:
        case TaskKind::decompress:
          // The actor lives on its GPU host, so this_actor::execute runs there (never
          // Host::exec_async, which runs on the caller's host: reference notes, pitfall 1).
          // The GPU draws the kernel's power meanwhile (GpuPowerDraw).
          if (task.seconds > 0) {
            power_.begin(task.watts);
            sg4::this_actor::execute(task.seconds * kGpuSpeed);
            power_.end(task.watts);
          }
          return;
        case TaskKind::collective:
          collective(task);
          return;
        case TaskKind::send:
        case TaskKind::recv:
          // A pipeline stage's messages need the stage at the other end, which this replay of
          // one schedule does not have; the run layer refuses pipeline layouts before this.
          throw std::logic_error("task " + task.name + " is a point-to-point transfer, which the replay of one schedule cannot run");
        case TaskKind::host_compute:
          // `seconds` with the host to itself; the node's ranks share it (SimGrid's fair sharing
          // of the host actor's executions). Replaying one rank, the node's others run the same
          // work at once: one execution of all of it takes as long.
          if (task.seconds > 0) {
            const int mirrored = replay_.replayed_ranks_ == 1 ? replay_.shape_.gpus_per_node : 1;
            sg4::this_actor::execute(task.seconds * sg4::this_actor::get_host()->get_speed() * mirrored);
          }
          return;
      }
    }

    // A collective over its groups of ranks (every rank by default). Replaying one rank, that rank
    // stands for all (the network carries every rank's share, every group's at once). Replaying each, the collective starts once every rank's comm
    // stream has reached it (NCCL's ring cannot progress without all of them), rank 0 runs the
    // group's traffic, and it ends for all ranks at once.
    void collective(const models::Task& task) {
      if (!task.collective) throw std::logic_error("task " + task.name + " is a collective that names none");
      if (replay_.replayed_ranks_ == 1) {
        replay_.network_->run_collective(*task.collective, task.bytes, task.groups);
        return;
      }
      replay_.collective_barrier_->wait();
      if (index_ == 0) replay_.network_->run_collective(*task.collective, task.bytes, task.groups);
      replay_.collective_barrier_->wait();
    }

    // A copy over this GPU's host link; one to or from pageable memory takes the staging route.
    // Replaying one rank, the node's other GPUs make the same copy at the same time, sharing
    // the node's host memory.
    void copy(const models::Task& task, bool to_host) {
      if (task.bytes <= 0) return;
      const ClusterNetwork& network = *replay_.network_;
      sg4::Host* host_end = network.host(node_);
      if (task.pageable) {
        host_end = network.pageable_staging(node_);
        if (host_end == nullptr) throw std::logic_error("a pageable copy on a platform without host_link.pageable_bandwidth");
      }
      const auto bytes = static_cast<std::uint64_t>(task.bytes);
      const int mirrored = replay_.replayed_ranks_ == 1 ? replay_.shape_.gpus_per_node : 1;
      if (mirrored == 1) {
        to_host ? sg4::Comm::sendto(gpu_, host_end, bytes) : sg4::Comm::sendto(host_end, gpu_, bytes);
        return;
      }
      std::vector<sg4::CommPtr> comms;
      comms.reserve(static_cast<std::size_t>(mirrored));
      for (int local = 0; local < mirrored; ++local) {
        sg4::Host* gpu = network.gpu(node_ * replay_.shape_.gpus_per_node + local);
        comms.push_back(to_host ? sg4::Comm::sendto_async(gpu, host_end, bytes) : sg4::Comm::sendto_async(host_end, gpu, bytes));
      }
      sg4::Comm::wait_all(comms);
    }

    void finish_task(TaskId t, double time) {
      if (replay_.schedule_.tasks[t].blocks_host) resume_launches_after(t, time);
      if (records()) replay_.release_buffers_of(t, time);
      done_[t] = true;
      // Most tasks have nobody waiting on them: no simcall at all then.
      if (const std::uint8_t streams = waiting_streams_[t]; streams != 0) {
        waiting_streams_[t] = 0;
        for (std::size_t s = 0; s < models::kStreamCount; ++s) {
          if (streams & (1u << s)) stream_woken_[s]->notify_one();
        }
      }
    }

    Replay& replay_;
    int index_ = 0;
    sg4::Host* gpu_ = nullptr;
    detail::GpuPowerDraw power_;
    int node_ = 0;
    std::vector<bool> done_;
    std::vector<double> launch_;  // when the launching thread issues each task (known once its gate has ended)
    std::array<sg4::ConditionVariablePtr, models::kStreamCount> stream_woken_;
    std::vector<std::uint8_t> waiting_streams_;  // per task: the streams blocked until it ends (bit per stream)
    static_assert(models::kStreamCount <= 8, "waiting_streams_ holds one bit per stream");
  };

  // Every rank's replay builds every node whole; one rank's, node 0 whole and the others folded
  // where the schedule's collectives fold (ClusterNetwork::folds), else with their collective
  // links only.
  ClusterNetwork::NodeDetail node_detail() const {
    if (replayed_ranks_ > 1) return ClusterNetwork::NodeDetail::every_node;
    return cluster_folds(platform_, schedule_, shape_) ? ClusterNetwork::NodeDetail::folded : ClusterNetwork::NodeDetail::node_zero;
  }

  void release_buffers_of(TaskId t, double time) {
    for (BufferId b : task_buffers_[t]) {
      const models::Buffer& buffer = schedule_.buffers[b];
      if (--remaining_users_[b] == 0 && !buffer.resident && !buffer.held_to_end && tracker_.is_live(b)) {
        tracker_.release(b, time, t);
      }
    }
  }

  // SimGrid's engine returns when no actor can progress. Every task must have run: a task left over means the streams waited on each other (a deadlock
  // that Schedule::validate should have ruled out) or SimGrid gave up on an activity. Either
  // way the timings would be a silently wrong result, so it is an error, never a report.
  void check_completed() const {
    std::size_t ran = 0;
    std::string first;
    for (const auto& rank : ranks_) {
      for (TaskId t = 0; t < schedule_.tasks.size(); ++t) {
        if (rank->done(t)) {
          ++ran;
        } else if (first.empty()) {
          first = fmt::format("task {} ({})", t, schedule_.tasks[t].name);
        }
      }
    }
    if (ran != schedule_.tasks.size() * ranks_.size()) {
      throw std::runtime_error(fmt::format("the replay stopped with {} of {} tasks run (first not run: {}): a deadlock in the schedule or in "
                                           "SimGrid; no result is reported",
                                           ran, schedule_.tasks.size() * ranks_.size(), first));
    }
    for (TaskId t = 0; t < schedule_.tasks.size(); ++t) {
      const TaskTiming& timing = result_.tasks[t];
      if (!std::isfinite(timing.end) || !std::isfinite(timing.start)) {
        throw std::runtime_error(fmt::format("task {} ({}) ended at a non-finite time; no result is reported", t, schedule_.tasks[t].name));
      }
    }
  }

  SimulationResult finish() {
    check_completed();
    // The launching thread is done once it has issued the last task (and, if that call
    // blocks, once the task has ended).
    if (!schedule_.tasks.empty()) {
      const TaskId last = schedule_.tasks.size() - 1;
      result_.host_seconds = schedule_.tasks[last].blocks_host ? result_.tasks[last].end : ranks_.front()->launch(last);
    }
    for (TaskId t = 0; t < schedule_.tasks.size(); ++t) {
      const TaskTiming& timing = result_.tasks[t];
      result_.iteration_seconds = std::max(result_.iteration_seconds, timing.end);
      result_.seconds_by_task_kind[static_cast<std::size_t>(schedule_.tasks[t].kind)] += timing.end - timing.start;
      if (schedule_.tasks[t].stream == Stream::compute) result_.compute_stall_seconds += timing.start - timing.ready;
    }
    result_.peak_bytes = tracker_.peak();
    result_.peak_time = tracker_.peak_time();
    result_.peak_by_role = tracker_.peak_by_role();
    result_.live_at_peak = tracker_.live_at_peak();
    result_.memory_events = tracker_.events();
    result_.device = model_device_memory(schedule_, result_.memory_events, result_.tasks, framework_);
    if (result_.device.out_of_memory) cut_at(*result_.device.out_of_memory);
    return std::move(result_);
  }

  // PyTorch raises at the failing allocation: the iteration ends there. The exact-byte stream
  // keeps what came before it, tasks that had not ended lose their end (those not yet started,
  // their timing), and the failure is described in the replay's terms.
  void cut_at(const DeviceOutOfMemory& d) {
    OutOfMemory oom;
    oom.iteration = d.iteration;
    oom.buffer = d.buffer;
    oom.requested = d.requested;
    oom.in_use = d.reserved;
    oom.capacity = d.usable;
    oom.time = d.time;
    auto& events = result_.memory_events;
    if (d.event) {
      oom.task = events[*d.event].task;
      events.resize(*d.event);
    } else if (d.iteration == 0) {
      events.erase(std::remove_if(events.begin(), events.end(), [](const MemoryEvent& e) { return e.task.has_value(); }), events.end());
    } else {
      // A lazily created buffer (or the cuBLAS workspace): before the first allocation at or
      // after its time, the task that first needs it.
      std::size_t keep = 0;
      while (keep < events.size() && (!events[keep].task || events[keep].time < d.time || !events[keep].allocation)) ++keep;
      if (keep < events.size()) oom.task = events[keep].task;
      events.resize(keep);
      if (d.buffer) oom.task = first_user(*d.buffer).value_or(oom.task.value_or(0));
    }
    const double cut = d.iteration == 0 ? 0.0 : d.time;
    for (TaskId t = 0; t < result_.tasks.size(); ++t) {
      TaskTiming& timing = result_.tasks[t];
      if (timing.start > cut || (d.iteration == 0)) {
        timing = TaskTiming{};
      } else if (timing.end > cut || (oom.task && *oom.task == t)) {
        timing.end = 0;
      }
    }
    if (d.iteration == 0) oom.task.reset();
    // The exact-byte figures of the stream as cut.
    MemoryTracker cut_tracker(schedule_);
    for (const MemoryEvent& e : events) {
      if (e.allocation) {
        cut_tracker.allocate(e.buffer, e.time, e.task);
      } else {
        cut_tracker.release(e.buffer, e.time, e.task.value_or(0));
      }
    }
    result_.peak_bytes = cut_tracker.peak();
    result_.peak_time = cut_tracker.peak_time();
    result_.peak_by_role = cut_tracker.peak_by_role();
    result_.live_at_peak = cut_tracker.live_at_peak();
    result_.iteration_seconds = 0;
    result_.seconds_by_task_kind = {};
    result_.compute_stall_seconds = 0;
    result_.host_wait_seconds = 0;
    result_.energy.reset();  // the iteration never ran to its end
    result_.out_of_memory = oom;
  }

  // The task that first creates or uses `buffer` (the earliest start).
  std::optional<TaskId> first_user(BufferId buffer) const {
    std::optional<TaskId> first;
    for (TaskId t = 0; t < schedule_.tasks.size(); ++t) {
      const models::Task& task = schedule_.tasks[t];
      const bool uses = std::find(task.creates.begin(), task.creates.end(), buffer) != task.creates.end() ||
                        std::find(task.uses.begin(), task.uses.end(), buffer) != task.uses.end();
      if (uses && (!first || result_.tasks[t].start < result_.tasks[*first].start)) first = t;
    }
    return first;
  }

  const models::Platform& platform_;
  const models::Schedule& schedule_;
  FrameworkOnGpu framework_;
  ClusterShape shape_;
  int replayed_ranks_ = 1;
  MemoryTracker tracker_;
  static constexpr TaskId kNoGate = static_cast<TaskId>(-1);
  std::vector<bool> allocated_once_;
  std::vector<std::size_t> remaining_users_;
  std::vector<std::vector<BufferId>> task_buffers_;  // creates ∪ uses, each once
  std::array<std::vector<TaskId>, models::kStreamCount> stream_tasks_;
  std::vector<double> first_launch_;  // launch times up to the first blocking task (each rank's start)
  std::vector<TaskId> gate_;          // the blocking task whose end a task's launch waits for, or kNoGate
  std::optional<ClusterNetwork> network_;
  std::optional<detail::EnergyMeter> energy_meter_;
  sg4::MutexPtr mutex_;
  sg4::BarrierPtr collective_barrier_;  // every_rank: the ranks' comm streams meet at each collective
  std::vector<std::unique_ptr<Rank>> ranks_;
  SimulationResult result_;
};

// DeviceMemory holds an optional of a struct with optionals: written field by field.
void put_device_memory(wire::Writer& w, const DeviceMemory& d) {
  w.put(d.framework);
  w.put(d.peak_allocated);
  w.put(d.peak_reserved);
  w.put(d.steady_peak_allocated);
  w.put(d.steady_peak_reserved);
  w.put(d.alloc_retries);
  w.put<bool>(d.out_of_memory.has_value());
  if (d.out_of_memory) w.put(*d.out_of_memory);
}

DeviceMemory get_device_memory(wire::Reader& in) {
  DeviceMemory d;
  d.framework = in.get<FrameworkOnGpu>();
  d.peak_allocated = in.get<std::int64_t>();
  d.peak_reserved = in.get<std::int64_t>();
  d.steady_peak_allocated = in.get<std::int64_t>();
  d.steady_peak_reserved = in.get<std::int64_t>();
  d.alloc_retries = in.get<std::int64_t>();
  if (in.get<bool>()) d.out_of_memory = in.get<DeviceOutOfMemory>();
  return d;
}

}  // namespace

void wire::Codec<SimulationResult>::write(wire::Writer& w, const SimulationResult& r) {
  w.put<bool>(r.out_of_memory.has_value());
  if (r.out_of_memory) {
    const OutOfMemory& o = *r.out_of_memory;
    w.put(o.iteration);
    w.put(o.task);
    w.put(o.buffer);
    w.put(o.requested);
    w.put(o.in_use);
    w.put(o.capacity);
    w.put(o.time);
  }
  w.put(r.iteration_seconds);
  w.put(r.peak_bytes);
  put_device_memory(w, r.device);
  w.put(r.peak_time);
  w.put(r.peak_by_role);
  w.put_vector(r.live_at_peak);
  w.put(r.seconds_by_task_kind);
  w.put(r.compute_stall_seconds);
  w.put(r.host_wait_seconds);
  w.put(r.host_seconds);
  w.put_vector(r.tasks);
  w.put_vector(r.memory_events);
  w.put<bool>(r.energy.has_value());
  if (r.energy) w.put(*r.energy);
}

SimulationResult wire::Codec<SimulationResult>::read(wire::Reader& in) {
  SimulationResult r;
  if (in.get<bool>()) {
    OutOfMemory o;
    o.iteration = in.get<int>();
    o.task = in.get<std::optional<TaskId>>();
    o.buffer = in.get<std::optional<BufferId>>();
    o.requested = in.get<std::int64_t>();
    o.in_use = in.get<std::int64_t>();
    o.capacity = in.get<std::int64_t>();
    o.time = in.get<double>();
    r.out_of_memory = o;
  }
  r.iteration_seconds = in.get<double>();
  r.peak_bytes = in.get<std::int64_t>();
  r.device = get_device_memory(in);
  r.peak_time = in.get<double>();
  r.peak_by_role = in.get<BytesByMemoryRole>();
  r.live_at_peak = in.get_vector<BufferId>();
  r.seconds_by_task_kind = in.get<std::array<double, models::kTaskKindCount>>();
  r.compute_stall_seconds = in.get<double>();
  r.host_wait_seconds = in.get<double>();
  r.host_seconds = in.get<double>();
  r.tasks = in.get_vector<TaskTiming>();
  r.memory_events = in.get_vector<MemoryEvent>();
  if (in.get<bool>()) r.energy = in.get<EnergyResult>();
  return r;
}

namespace {

// The replay of a schedule already validated.
SimulationResult replay_validated(const models::Platform& platform, const models::Schedule& schedule, const FrameworkOnGpu& framework,
                                  ClusterShape shape, ReplayRanks ranks) {
  Replay replay(platform, schedule, framework, shape, ranks);
  return replay.run();
}

}  // namespace

SimulationResult simulate_in_this_process(const models::Platform& platform, const models::Schedule& schedule, const FrameworkOnGpu& framework,
                                          ClusterShape shape, ReplayRanks ranks) {
  schedule.validate();
  check_cluster_shape(platform, shape);
  return replay_validated(platform, schedule, framework, shape, ranks);
}

SimulationResult simulate(const models::Platform& platform, const models::Schedule& schedule) {
  return simulate(platform, schedule, resolve_framework(FrameworkSpec{}, platform.gpu, platform.source));
}

SimulationResult simulate(const models::Platform& platform, const models::Schedule& schedule, const FrameworkOnGpu& framework,
                          ClusterShape shape, ReplayRanks ranks) {
  schedule.validate();  // fail in the caller, with its stack, rather than in the child, and only once
  check_cluster_shape(platform, shape);
  ChildProcess child([&] { return wire::encode(replay_validated(platform, schedule, framework, shape, ranks)); });
  JobOutcome outcome = child.wait();
  if (outcome.status == JobOutcome::Status::result) {
    // SimGrid's warnings, if any, reach the user as the child wrote them.
    if (!outcome.diagnostics.empty()) std::fputs(outcome.diagnostics.c_str(), stderr);
    return wire::decode<SimulationResult>(outcome.text);
  }
  outcome.text = "simulation failed: " + outcome.text;
  std::move(outcome).result_or_throw();
  return {};  // not reached: result_or_throw threw
}

}  // namespace comptrain::sim

#include "comptrain/sim/engine/replay.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <simgrid/s4u.hpp>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "comptrain/sim/engine/pipeline_replay.hpp"
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

// Where a replayed schedule's representative rank sits, and the ranks it stands for. The replay of
// one schedule stands for every rank of the shape (the defaults); the pipeline replay's stage p
// for its block of ranks [p x stage_ranks, (p + 1) x stage_ranks) (models/parallel_layout.hpp).
struct Placement {
  int first_rank = 0;  // the representative
  int ranks = 0;       // the ranks it stands for, from first_rank on (0: the shape's)
  int stage = -1;      // the pipeline stage (-1: no pipeline)
};

class PipelineTransfers;

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
         ReplayRanks ranks, Placement placement = {}, PipelineTransfers* transfers = nullptr)
      : platform_(platform),
        schedule_(schedule),
        framework_(framework),
        shape_(shape),
        placement_{placement.first_rank, placement.ranks == 0 ? shape.ranks() : placement.ranks, placement.stage},
        transfers_(transfers),
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
    if (transfers_ != nullptr) p2p_batches_ = p2p_batches();
  }

  SimulationResult run() {
    detail::ConfiguredEngine engine;
    // The energy plugins attach to hosts and links as they are created: before the platform.
    const bool energy = detail::has_power_values(platform_);
    if (energy) detail::init_energy_plugins(detail::has_link_power(platform_));
    // Replaying one rank, the other nodes' host sides run nothing.
    own_network_.emplace(platform_, shape_, node_detail());
    network_ = &*own_network_;
    // Replaying one rank, a collective that repeats takes its first run's time: the comm stream
    // runs collectives one at a time, and on links that copies never take (sim/README.md,
    // "Collectives that repeat"). Every rank's replay, the reference, simulates each one.
    if (replayed_ranks_ == 1 && collective_times_reused(platform_, schedule_, shape_)) {
      network_->reuse_collective_times(energy && detail::has_link_power(platform_));
    }
    if (energy) energy_meter_.emplace(*network_, platform_, replayed_ranks_ == 1);
    start();
    engine.run();
    if (energy_meter_) result_.energy = energy_meter_->finish();
    return finish();
  }

  // The pipeline replay: every stage's Replay on one network, inside one engine (`network` lives
  // as long as the replay does).
  void start_on(detail::ClusterNetwork& network) {
    network_ = &network;
    start();
  }

  // The first task left not run by the representative, if any (after the engine has run).
  std::optional<TaskId> first_not_run() const {
    for (const auto& rank : ranks_) {
      for (TaskId t = 0; t < schedule_.tasks.size(); ++t) {
        if (!rank->done(t)) return t;
      }
    }
    return std::nullopt;
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

 private:
  // Resident buffers, the actors' shared objects and the ranks' actors (inside the engine, with
  // network_ set).
  void start() {
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
  }

  // The ranks the representative stands for on its own node, from it on: the GPUs that make each
  // host-link copy (and share the host's work) at once in the symmetric replay. One schedule: the
  // node's GPUs. A pipeline stage: the stage's GPUs on that node (a stage of T = 4 ranks on 8-GPU
  // nodes holds half of one; a stage of whole nodes, every GPU of its representative's).
  int ranks_on_node() const {
    const int per_node = shape_.gpus_per_node;
    return std::min(per_node - placement_.first_rank % per_node, placement_.ranks);
  }

  // The p2p stream's batches (pipeline replay). Megatron issues a send and the receive that follows
  // it before the next step as one torch.distributed.batch_isend_irecv (send_forward_recv_backward,
  // send_backward_recv_forward: Megatron-LM@d98e8a6 megatron/core/pipeline_parallel/schedules.py:2416,
  // 2446; p2p_communication.py:22-56), which NCCL runs as one group, and waits for all of its
  // requests before the step uses what it received. The rule:
  //   a batch is a maximal run of p2p tasks that are consecutive in `tasks` (the launching thread
  //   issues them with no task of another stream between them: one call) in which no task depends
  //   on an earlier task of the run: through its `after` tasks, the tasks they wait for (their
  //   streams' predecessors, their `after`, the blocking task their launch waits for), and so on;
  //   only its p2p-stream predecessor, which the batch no longer waits for, is left out.
  // The p2p stream posts the tasks of a batch in order, each once it is launched and its `after`
  // tasks have ended, without waiting for the previous one's transfer; then it waits for every
  // transfer of the batch, and every task of the batch ends then. A task that waited for a task of
  // its own batch could never be posted (the batch's tasks end together, after it): the dependency
  // clause keeps such a task out. Run one at a time instead, each waiting for its peer, 1F1B
  // deadlocks (models/pipeline_parallel.hpp).
  std::vector<std::vector<TaskId>> p2p_batches() const {
    const auto& tasks = schedule_.tasks;
    const std::size_t n = tasks.size();
    // What each task waits for, and a topological order of that graph (Schedule::validate has
    // ruled out cycles): a task can only depend on tasks earlier in it, so a search back from a
    // candidate stops at tasks before the batch's earliest.
    std::vector<std::vector<TaskId>> waits(n);
    std::array<std::optional<TaskId>, models::kStreamCount> last_on_stream{};
    for (TaskId t = 0; t < n; ++t) {
      auto& w = waits[t];
      if (auto& last = last_on_stream[static_cast<std::size_t>(tasks[t].stream)]) w.push_back(*last);
      last_on_stream[static_cast<std::size_t>(tasks[t].stream)] = t;
      w.insert(w.end(), tasks[t].after.begin(), tasks[t].after.end());
      if (gate_[t] != kNoGate) w.push_back(gate_[t]);
    }
    std::vector<std::size_t> position(n, 0);
    {
      std::vector<std::vector<TaskId>> waited_by(n);
      std::vector<std::size_t> pending(n);
      for (TaskId t = 0; t < n; ++t) {
        pending[t] = waits[t].size();
        for (TaskId a : waits[t]) waited_by[a].push_back(t);
      }
      std::vector<TaskId> order;
      for (TaskId t = 0; t < n; ++t) {
        if (pending[t] == 0) order.push_back(t);
      }
      for (std::size_t i = 0; i < order.size(); ++i) {
        position[order[i]] = i;
        for (TaskId w : waited_by[order[i]]) {
          if (--pending[w] == 0) order.push_back(w);
        }
      }
    }
    std::vector<char> in_batch(n, 0);
    std::vector<char> seen(n, 0);
    std::vector<TaskId> stack;
    std::vector<TaskId> seen_list;
    const auto depends_on_batch = [&](TaskId candidate, TaskId stream_predecessor, std::size_t earliest) {
      bool found = false;
      stack.clear();
      for (TaskId a : waits[candidate]) {
        if (a != stream_predecessor) stack.push_back(a);
      }
      while (!stack.empty() && !found) {
        const TaskId x = stack.back();
        stack.pop_back();
        if (seen[x] || position[x] < earliest) continue;
        seen[x] = 1;
        seen_list.push_back(x);
        found = in_batch[x] != 0;
        stack.insert(stack.end(), waits[x].begin(), waits[x].end());
      }
      for (TaskId x : seen_list) seen[x] = 0;
      seen_list.clear();
      return found;
    };
    std::vector<std::vector<TaskId>> batches;
    std::size_t earliest = 0;
    for (TaskId t : stream_tasks_[static_cast<std::size_t>(Stream::p2p)]) {
      const bool joins = !batches.empty() && batches.back().back() + 1 == t && !depends_on_batch(t, batches.back().back(), earliest);
      if (!joins) {
        if (!batches.empty()) {
          for (TaskId b : batches.back()) in_batch[b] = 0;
        }
        batches.emplace_back();
        earliest = position[t];
      }
      batches.back().push_back(t);
      in_batch[t] = 1;
      earliest = std::min(earliest, position[t]);
    }
    return batches;
  }

  // One replayed GPU: its streams' actors and what they wait on. Rank 0 also records the
  // timings and drives the memory tracker.
  class Rank {
   public:
    Rank(Replay& replay, int index)
        : replay_(replay),
          index_(index),
          gpu_(replay.network_->gpu(replay.placement_.first_rank + index)),
          // The pipeline replay draws no energy (pipeline_replay.hpp): no power actors.
          power_(replay.placement_.stage < 0 ? replay.network_->gpu_power(index) : nullptr, replay.platform_.gpu),
          node_((replay.placement_.first_rank + index) / replay.shape_.gpus_per_node),
          done_(replay.schedule_.tasks.size(), false),
          launch_(replay.first_launch_),
          waiting_streams_(replay.schedule_.tasks.size(), 0) {
      for (auto& woken : stream_woken_) woken = sg4::ConditionVariable::create();
    }

    void start() {
      power_.start(index_ == 0 ? "power" : "power@" + std::to_string(index_));
      const int stage = replay_.placement_.stage;
      for (std::size_t s = 0; s < models::kStreamCount; ++s) {
        if (replay_.stream_tasks_[s].empty()) continue;
        const std::string name = std::string(models::to_string(static_cast<Stream>(s))) + (index_ == 0 ? "" : "@" + std::to_string(index_)) +
                                 (stage < 0 ? "" : " of stage " + std::to_string(stage));
        // The host stream's work runs on the node's host (its CPU), the others on the GPU.
        sg4::Host* where = static_cast<Stream>(s) == Stream::host ? replay_.network_->host(node_) : gpu_;
        if (static_cast<Stream>(s) == Stream::p2p && replay_.transfers_ != nullptr) {
          sg4::Actor::create(name, where, [this] { run_p2p_stream(); });
        } else {
          sg4::Actor::create(name, where, [this, s] { run_stream(s); });
        }
      }
    }

    bool done(TaskId t) const { return done_[t]; }
    double launch(TaskId t) const { return launch_[t]; }

   private:
    bool records() const { return index_ == 0; }

    void run_stream(std::size_t stream) {
      for (TaskId t : replay_.stream_tasks_[stream]) {
        begin_task(stream, t);
        execute(replay_.schedule_.tasks[t]);
        const double end = sg4::Engine::get_clock();
        if (records()) replay_.result_.tasks[t].end = end;
        finish_task(t, end);
      }
    }

    // Until task `t` may start on `stream` (launched, its `after` tasks ended); then its start
    // and its buffers' allocations.
    void begin_task(std::size_t stream, TaskId t) {
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
    }

    // The pipeline replay's p2p stream: batch after batch (Replay::p2p_batches says how), each
    // task of a batch posted as soon as it may start, the batch's tasks ending together once
    // every transfer of the batch has.
    void run_p2p_stream();

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
        waiting_streams_[d] |= static_cast<std::uint16_t>(1u << stream);
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
        case TaskKind::framework:
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
          // one schedule does not have (the pipeline replay runs them on its p2p stream actor,
          // run_p2p_stream); the run layer refuses pipeline layouts before this.
          throw std::logic_error("task " + task.name + " is a point-to-point transfer, which the replay of one schedule cannot run");
        case TaskKind::host_compute:
          // `seconds` with the host to itself; the node's ranks share it (SimGrid's fair sharing
          // of the host actor's executions). Replaying one rank, the node's others run the same
          // work at once: one execution of all of it takes as long.
          if (task.seconds > 0) {
            const int mirrored = replay_.replayed_ranks_ == 1 ? replay_.ranks_on_node() : 1;
            sg4::this_actor::execute(task.seconds * sg4::this_actor::get_host()->get_speed() * mirrored);
          }
          return;
      }
    }

    // The SMs a collective's kernel holds while it runs (gpu.collective_sms of gpu.sms: NCCL's
    // thread blocks, one per channel, resident for the whole collective): an execution on this
    // GPU bounded at that share, so a kernel beside it on another stream gets the rest (SimGrid
    // shares a host among its executions max-min fairly; the bounded one takes its bound). A
    // share of the SMs, not of each kernel's time: a memory-bound kernel loses as much as a GEMM
    // (an upper bound for it: fewer SMs may still saturate the memory). It ends with the
    // collective (the destructor cancels it); an exposed collective has nothing beside it to slow.
    // Only the data-parallel groups' collectives hold SMs here: every framework modelled runs
    // them through NCCL (DDP, FSDP, ZeRO, the distributed optimizer), whereas a trace's
    // tensor-parallel collectives may be Transformer Engine's Userbuffers kernels, which hold
    // other counts (TE's initialize_ub: 1 SM for a ring exchange, 16 for a pipelined
    // reduce-scatter) that the trace does not record.
    struct SmsHeld {
      sg4::ExecPtr exec;
      SmsHeld() = default;
      SmsHeld(const SmsHeld&) = delete;
      SmsHeld& operator=(const SmsHeld&) = delete;
      SmsHeld(SmsHeld&& other) noexcept : exec(std::exchange(other.exec, nullptr)) {}
      SmsHeld& operator=(SmsHeld&&) = delete;
      ~SmsHeld() {
        if (exec) exec->cancel();
      }
    };
    SmsHeld hold_collective_sms(const models::Task& task) const {
      SmsHeld held;
      const models::GpuSpec& gpu = replay_.platform_.gpu;
      if (gpu.collective_sms <= 0 || gpu.sms <= 0) return held;
      if (task.over != traces::ParallelGroup::data && task.over != traces::ParallelGroup::expert_data) return held;
      // Never-ending work at the bound: the exec ends only when cancelled.
      constexpr double kNeverEnding = 1e30;
      const double share = static_cast<double>(gpu.collective_sms) / gpu.sms;
      held.exec = sg4::Exec::init()->set_host(gpu_)->set_flops_amount(kNeverEnding)->set_bound(share * kGpuSpeed);
      held.exec->start();
      return held;
    }

    // A collective over its groups of ranks (every rank by default). Replaying one rank, that rank
    // stands for all (the network carries every rank's share, every group's at once). Replaying each, the collective starts once every rank's comm
    // stream has reached it (NCCL's ring cannot progress without all of them), rank 0 runs the
    // group's traffic, and it ends for all ranks at once. A pipeline stage's collective runs the
    // groups of its own ranks only: each stage's comm stream runs its own.
    void collective(const models::Task& task) {
      if (!task.collective) throw std::logic_error("task " + task.name + " is a collective that names none");
      const SmsHeld held = hold_collective_sms(task);
      if (replay_.replayed_ranks_ == 1) {
        if (replay_.placement_.stage < 0) {
          replay_.network_->run_collective(*task.collective, task.bytes, task.groups);
        } else {
          // Folded (pipeline_replay.hpp): only the block of size x stride ranks that holds the
          // representative's group runs -- its own group and the groups interleaved with it (the
          // other rails of the same nodes, which share those nodes' links with it). The stage's
          // other blocks run the same collective on other nodes at the same time; like the other
          // nodes' pipeline transfers, their flows are not simulated (they would share the
          // network's upper levels only). Every-rank groups (size 0) run the whole stage.
          int ranks = replay_.placement_.ranks;
          if (!task.groups.every_rank()) {
            const long long block = static_cast<long long>(task.groups.size) * task.groups.stride;
            if (block < ranks) ranks = static_cast<int>(block);
          }
          replay_.network_->run_collective(*task.collective, task.bytes, task.groups,
                                           ClusterNetwork::RankRange{replay_.placement_.first_rank, ranks});
        }
        return;
      }
      replay_.collective_barrier_->wait();
      if (index_ == 0) replay_.network_->run_collective(*task.collective, task.bytes, task.groups);
      replay_.collective_barrier_->wait();
    }

    // A copy over this GPU's host link; one to or from pageable memory takes the staging route.
    // Replaying one rank, the node's other GPUs make the same copy at the same time, sharing
    // the node's host memory (a pipeline stage's: its GPUs on the node, ranks_on_node).
    void copy(const models::Task& task, bool to_host) {
      if (task.bytes <= 0) return;
      const ClusterNetwork& network = *replay_.network_;
      sg4::Host* host_end = network.host(node_);
      if (task.pageable) {
        host_end = network.pageable_staging(node_);
        if (host_end == nullptr) throw std::logic_error("a pageable copy on a platform without host_link.pageable_bandwidth");
      }
      const auto bytes = static_cast<std::uint64_t>(task.bytes);
      const int mirrored = replay_.replayed_ranks_ == 1 ? replay_.ranks_on_node() : 1;
      if (mirrored == 1) {
        to_host ? sg4::Comm::sendto(gpu_, host_end, bytes) : sg4::Comm::sendto(host_end, gpu_, bytes);
        return;
      }
      std::vector<sg4::CommPtr> comms;
      comms.reserve(static_cast<std::size_t>(mirrored));
      for (int local = 0; local < mirrored; ++local) {
        sg4::Host* gpu = network.gpu(replay_.placement_.first_rank + local);
        comms.push_back(to_host ? sg4::Comm::sendto_async(gpu, host_end, bytes) : sg4::Comm::sendto_async(host_end, gpu, bytes));
      }
      sg4::Comm::wait_all(comms);
    }

    void finish_task(TaskId t, double time) {
      if (replay_.schedule_.tasks[t].blocks_host) resume_launches_after(t, time);
      if (records()) replay_.release_buffers_of(t, time);
      done_[t] = true;
      // Most tasks have nobody waiting on them: no simcall at all then.
      if (const std::uint16_t streams = waiting_streams_[t]; streams != 0) {
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
    std::vector<std::uint16_t> waiting_streams_;  // per task: the streams blocked until it ends (bit per stream)
    static_assert(models::kStreamCount <= 16, "waiting_streams_ holds one bit per stream");
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
  Placement placement_;
  PipelineTransfers* transfers_ = nullptr;  // the pipeline replay's: pairs this stage's sends and receives with its neighbours'
  std::vector<std::vector<TaskId>> p2p_batches_;  // the pipeline replay's p2p stream, batch by batch (p2p_batches)
  int replayed_ranks_ = 1;
  MemoryTracker tracker_;
  static constexpr TaskId kNoGate = static_cast<TaskId>(-1);
  std::vector<bool> allocated_once_;
  std::vector<std::size_t> remaining_users_;
  std::vector<std::vector<BufferId>> task_buffers_;  // creates ∪ uses, each once
  std::array<std::vector<TaskId>, models::kStreamCount> stream_tasks_;
  std::vector<double> first_launch_;  // launch times up to the first blocking task (each rank's start)
  std::vector<TaskId> gate_;          // the blocking task whose end a task's launch waits for, or kNoGate
  std::optional<ClusterNetwork> own_network_;  // the replay of one schedule's
  ClusterNetwork* network_ = nullptr;           // its own, or the pipeline replay's
  std::optional<detail::EnergyMeter> energy_meter_;
  sg4::MutexPtr mutex_;
  sg4::BarrierPtr collective_barrier_;  // every_rank: the ranks' comm streams meet at each collective
  std::vector<std::unique_ptr<Rank>> ranks_;
  SimulationResult result_;
};

// The pipeline replay's transfers: for every (sender stage, receiver stage, gradient, micro-batch,
// chunk), the mailbox its two ends meet in and what has been posted of it (pipeline_replay.hpp).
// Made before the engine runs (creating mailboxes from within actors would be simcalls); actors run
// one at a time, so the plain counters need no locking.
class PipelineTransfers {
 public:
  // (sender stage, receiver stage, gradient, micro-batch, chunk)
  using Key = std::tuple<int, int, bool, int, int>;

  // Pairs every send with its recv; std::invalid_argument naming the task that has no partner.
  static std::map<Key, std::int64_t> pair_up(const std::vector<models::Schedule>& stages) {
    const auto stage_count = static_cast<int>(stages.size());
    struct Ends {
      std::optional<std::pair<int, TaskId>> send;
      std::optional<std::pair<int, TaskId>> recv;
      std::int64_t bytes = 0;
    };
    std::map<Key, Ends> ends;
    const auto label = [&](int stage, TaskId t) { return fmt::format("stage {}'s task {} ({})", stage, t, stages[static_cast<std::size_t>(stage)].tasks[t].name); };
    for (int p = 0; p < stage_count; ++p) {
      const models::Schedule& schedule = stages[static_cast<std::size_t>(p)];
      for (TaskId t = 0; t < schedule.tasks.size(); ++t) {
        const models::Task& task = schedule.tasks[t];
        if (task.kind != TaskKind::send && task.kind != TaskKind::recv) continue;
        const models::PipelineMessage& m = *task.message;  // Schedule::validate: a send or recv has one
        if (m.peer == p || m.peer >= stage_count) {
          throw std::invalid_argument(fmt::format("{} names peer stage {}: expected another of the {} stages", label(p, t), m.peer, stage_count));
        }
        const bool send = task.kind == TaskKind::send;
        const Key key{send ? p : m.peer, send ? m.peer : p, m.gradient, m.micro_batch, m.chunk};
        Ends& e = ends[key];
        auto& end = send ? e.send : e.recv;
        if (end) throw std::invalid_argument(fmt::format("{} and {} are the same {}", label(end->first, end->second), label(p, t), models::to_string(task.kind)));
        end = std::pair{p, t};
        const auto& other = send ? e.recv : e.send;
        if (other && e.bytes != task.bytes) {
          throw std::invalid_argument(fmt::format("{} carries {} bytes, its partner {} {}", label(p, t), task.bytes, label(other->first, other->second), e.bytes));
        }
        e.bytes = task.bytes;
      }
    }
    std::map<Key, std::int64_t> bytes;
    for (const auto& [key, e] : ends) {
      if (!e.send || !e.recv) {
        const auto& [stage, t] = e.send ? *e.send : *e.recv;
        throw std::invalid_argument(fmt::format("{} has no partner: stage {} has no {} of that message", label(stage, t),
                                                e.send ? std::get<1>(key) : std::get<0>(key), e.send ? "recv" : "send"));
      }
      bytes[key] = e.bytes;
    }
    return bytes;
  }

  PipelineTransfers(const ClusterNetwork& network, const std::vector<models::Schedule>& stages, int stage_ranks)
      : network_(network), stage_ranks_(stage_ranks) {
    for (const auto& [key, bytes] : pair_up(stages)) {
      const auto& [from, to, gradient, micro_batch, chunk] = key;
      Transfer& x = transfers_[key];
      x.mailbox = sg4::Mailbox::by_name(fmt::format("pipeline {} from stage {} to stage {}, micro-batch {}, chunk {}", gradient ? "gradient" : "activation",
                                                    from, to, micro_batch, chunk));
      x.bytes = static_cast<std::uint64_t>(bytes);
    }
  }

  // Stage `stage`'s end of `task` (a send or recv), posted by its representative's p2p stream
  // actor: the mailbox communication goes into `comms`, and, from the end that posts second (the
  // transfer starts then), the flows of the sending stage's other GPUs on its representative's
  // node to their counterparts.
  void post(int stage, const models::Task& task, std::vector<sg4::CommPtr>& comms) {
    const models::PipelineMessage& m = *task.message;
    const bool send = task.kind == TaskKind::send;
    const int from = send ? stage : m.peer;
    const int to = send ? m.peer : stage;
    Transfer& x = transfers_.at(Key{from, to, m.gradient, m.micro_batch, m.chunk});
    comms.push_back(send ? x.mailbox->put_async(&payload_, x.bytes) : x.mailbox->get_async<int>(&x.received));
    if (++x.posted < 2 || x.bytes == 0) return;
    const int from_first = from * stage_ranks_;
    const int to_first = to * stage_ranks_;
    const int per_node = network_.shape().gpus_per_node;
    const int on_node = std::min(per_node - from_first % per_node, stage_ranks_);
    for (int i = 1; i < on_node; ++i) comms.push_back(sg4::Comm::sendto_async(network_.gpu(from_first + i), network_.gpu(to_first + i), x.bytes));
  }

 private:
  struct Transfer {
    sg4::Mailbox* mailbox = nullptr;
    std::uint64_t bytes = 0;
    int posted = 0;                     // ends posted so far
    int* received = nullptr;  // where the recv puts what it got: a pointer to payload_
  };
  int payload_ = 0;  // what a transfer carries (nothing: its size is simulated)
  const ClusterNetwork& network_;
  int stage_ranks_ = 1;
  std::map<Key, Transfer> transfers_;
};

void Replay::Rank::run_p2p_stream() {
  constexpr auto stream = static_cast<std::size_t>(Stream::p2p);
  std::vector<sg4::CommPtr> comms;
  for (const std::vector<TaskId>& batch : replay_.p2p_batches_) {
    comms.clear();
    for (TaskId t : batch) {
      begin_task(stream, t);
      replay_.transfers_->post(replay_.placement_.stage, replay_.schedule_.tasks[t], comms);
    }
    sg4::Comm::wait_all(comms);
    const double end = sg4::Engine::get_clock();
    for (TaskId t : batch) {
      if (records()) replay_.result_.tasks[t].end = end;
      finish_task(t, end);
    }
  }
}

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

namespace comptrain::sim {
namespace {

// PipelineSimulationResult::bubble_seconds of one stage.
double bubble_of(const models::Schedule& schedule, const SimulationResult& result) {
  double bubble = 0;
  std::optional<double> previous_end;
  for (TaskId t = 0; t < schedule.tasks.size(); ++t) {
    const models::Task& task = schedule.tasks[t];
    if (task.stream != Stream::compute) continue;
    const TaskTiming& timing = result.tasks[t];
    if (previous_end) {
      double received = 0;
      for (TaskId a : task.after) {
        if (schedule.tasks[a].kind == TaskKind::recv) received = std::max(received, result.tasks[a].end);
      }
      bubble += std::max(0.0, std::min(timing.start, received) - *previous_end);
    }
    previous_end = timing.end;
  }
  return bubble;
}

void check_pipeline(const models::Platform& platform, const std::vector<models::Schedule>& stages, ClusterShape shape, int stage_ranks) {
  if (stages.empty()) throw std::invalid_argument("a pipeline of no stages");
  if (stage_ranks < 1) throw std::invalid_argument(fmt::format("a pipeline stage of {} ranks", stage_ranks));
  for (const models::Schedule& schedule : stages) schedule.validate();
  check_cluster_shape(platform, shape);
  if (static_cast<std::int64_t>(stages.size()) * stage_ranks != shape.ranks()) {
    throw std::invalid_argument(fmt::format("{} pipeline stages of {} ranks on {} node(s) x {} GPUs: the shape has {} ranks", stages.size(), stage_ranks,
                                            shape.nodes, shape.gpus_per_node, shape.ranks()));
  }
  PipelineTransfers::pair_up(stages);
}

PipelineSimulationResult replay_pipeline_validated(const models::Platform& platform, const std::vector<models::Schedule>& stages,
                                                   const FrameworkOnGpu& framework, ClusterShape shape, int stage_ranks) {
  detail::ConfiguredEngine engine;
  // Every GPU built: the stages' collectives run at once on different ranks, which folding and
  // reuse assume they do not. Each stage's representative needs its node's host side (its host
  // stream and copies); the other nodes' host sides would carry nothing, and no node needs power
  // hosts (no energy here), so they are left out (NodeDetail::stage_nodes): SimGrid's cost of a
  // host grows with those already built.
  std::vector<int> representative_nodes;
  for (std::size_t p = 0; p < stages.size(); ++p) representative_nodes.push_back(static_cast<int>(p) * stage_ranks / shape.gpus_per_node);
  ClusterNetwork network(platform, shape, ClusterNetwork::NodeDetail::stage_nodes, representative_nodes);
  PipelineTransfers transfers(network, stages, stage_ranks);
  std::vector<std::unique_ptr<Replay>> replays;
  for (std::size_t p = 0; p < stages.size(); ++p) {
    const int stage = static_cast<int>(p);
    replays.push_back(std::make_unique<Replay>(platform, stages[p], framework, shape, ReplayRanks::symmetric,
                                               Placement{stage * stage_ranks, stage_ranks, stage}, &transfers));
  }
  for (auto& replay : replays) replay->start_on(network);
  engine.run();

  // A stage left with tasks not run waited for a neighbour that never came (or for itself): the
  // first task not run of each such stage says where.
  std::string stuck;
  for (std::size_t p = 0; p < stages.size(); ++p) {
    if (const std::optional<TaskId> t = replays[p]->first_not_run()) {
      stuck += fmt::format("{}stage {}: task {} ({})", stuck.empty() ? "" : "; ", p, *t, stages[p].tasks[*t].name);
    }
  }
  if (!stuck.empty()) {
    throw std::runtime_error("the pipeline replay stopped with tasks not run (a deadlock in the schedules or in SimGrid; no result is reported): first not run: " +
                             stuck);
  }
  PipelineSimulationResult result;
  for (std::size_t p = 0; p < stages.size(); ++p) {
    result.stages.push_back(replays[p]->finish());
    const SimulationResult& r = result.stages.back();
    result.bubble_seconds.push_back(r.fits() ? bubble_of(stages[p], r) : 0.0);
    result.iteration_seconds = std::max(result.iteration_seconds, r.iteration_seconds);
    if (!r.fits() && !result.out_of_memory) {
      result.out_of_memory_stage = static_cast<int>(p);
      result.out_of_memory = r.out_of_memory;
    }
  }
  // A stage that ran out of memory raised there: the iteration has no end to report.
  if (result.out_of_memory) result.iteration_seconds = 0;
  return result;
}

}  // namespace

void wire::Codec<PipelineSimulationResult>::write(wire::Writer& w, const PipelineSimulationResult& r) {
  w.put<std::uint64_t>(r.stages.size());
  for (const SimulationResult& stage : r.stages) wire::Codec<SimulationResult>::write(w, stage);
  w.put(r.iteration_seconds);
  w.put_vector(r.bubble_seconds);
  w.put(r.out_of_memory_stage);
  // The failure itself is its stage's (stages[stage].out_of_memory): not written twice.
}

PipelineSimulationResult wire::Codec<PipelineSimulationResult>::read(wire::Reader& in) {
  PipelineSimulationResult r;
  const auto count = in.get<std::uint64_t>();
  for (std::uint64_t p = 0; p < count; ++p) r.stages.push_back(wire::Codec<SimulationResult>::read(in));
  r.iteration_seconds = in.get<double>();
  r.bubble_seconds = in.get_vector<double>();
  r.out_of_memory_stage = in.get<std::optional<int>>();
  if (r.out_of_memory_stage) {
    if (*r.out_of_memory_stage < 0 || static_cast<std::uint64_t>(*r.out_of_memory_stage) >= count) {
      throw std::runtime_error("a worker process sent a pipeline result whose out-of-memory stage is not one of its stages");
    }
    r.out_of_memory = r.stages[static_cast<std::size_t>(*r.out_of_memory_stage)].out_of_memory;
  }
  return r;
}

PipelineSimulationResult simulate_pipeline_in_this_process(const models::Platform& platform, const std::vector<models::Schedule>& stages,
                                                           const FrameworkOnGpu& framework, ClusterShape shape, int stage_ranks) {
  check_pipeline(platform, stages, shape, stage_ranks);
  return replay_pipeline_validated(platform, stages, framework, shape, stage_ranks);
}

PipelineSimulationResult simulate_pipeline(const models::Platform& platform, const std::vector<models::Schedule>& stages,
                                           const FrameworkOnGpu& framework, ClusterShape shape, int stage_ranks) {
  check_pipeline(platform, stages, shape, stage_ranks);  // in the caller, with its stack
  ChildProcess child([&] { return wire::encode(replay_pipeline_validated(platform, stages, framework, shape, stage_ranks)); });
  JobOutcome outcome = child.wait();
  if (outcome.status == JobOutcome::Status::result) {
    if (!outcome.diagnostics.empty()) std::fputs(outcome.diagnostics.c_str(), stderr);
    return wire::decode<PipelineSimulationResult>(outcome.text);
  }
  outcome.text = "pipeline simulation failed: " + outcome.text;
  std::move(outcome).result_or_throw();
  return {};  // not reached: result_or_throw threw
}

}  // namespace comptrain::sim

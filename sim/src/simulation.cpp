#include "comptrain/sim/simulation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <simgrid/s4u.hpp>
#include <stdexcept>
#include <string>

#include "comptrain/sim/workers.hpp"
#include "simgrid_engine.hpp"

namespace comptrain::sim {
namespace {

namespace sg4 = simgrid::s4u;
using models::BufferId;
using models::Stream;
using models::TaskId;
using models::TaskKind;

// The GPU host's speed in SimGrid work units per second. A task of `s` seconds is an exec of
// s * kGpuSpeed units, so concurrent kernels share the GPU (SimGrid's fair sharing) and a
// kernel alone takes exactly its modeled time.
constexpr double kGpuSpeed = 1e9;

// One simulation: the SimGrid platform, one actor per stream, and the bookkeeping they share.
// Actors run one at a time (SimGrid's maestro), so plain members need no locking.
class Replay {
 public:
  Replay(const models::Platform& platform, const models::Schedule& schedule)
      : platform_(platform),
        schedule_(schedule),
        tracker_(schedule, platform.gpu.memory_bytes),
        done_(schedule.tasks.size(), false),
        allocated_once_(schedule.buffers.size(), false),
        remaining_users_(schedule.buffers.size(), 0),
        task_buffers_(schedule.tasks.size()) {
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
  }

  SimulationResult run() {
    int argc = 1;
    char program[] = "comptrain";
    char* argv[] = {program, nullptr};
    detail::silence_simgrid();
    sg4::Engine engine(&argc, argv);
    detail::configure_flow_model();
    build_platform();

    // Weights, buffers and optimizer state are in GPU memory before the iteration starts.
    for (BufferId b = 0; b < schedule_.buffers.size(); ++b) {
      if (!schedule_.buffers[b].resident) continue;
      if (!tracker_.allocate(b, 0.0)) {
        record_out_of_memory(std::nullopt, b, 0.0);
        return finish();
      }
      allocated_once_[b] = true;
    }

    mutex_ = sg4::Mutex::create();
    task_done_ = sg4::ConditionVariable::create();
    for (std::size_t s = 0; s < models::kStreamCount; ++s) {
      if (stream_tasks_[s].empty()) continue;
      sg4::Actor::create(std::string(models::to_string(static_cast<Stream>(s))), gpu_, [this, s] { run_stream(s); });
    }
    engine.run();
    return finish();
  }

 private:
  void build_platform() {
    auto* zone = sg4::create_full_zone("node");
    gpu_ = zone->create_host("gpu", kGpuSpeed)->seal();
    const double host_speed = platform_.host.flops > 0 ? platform_.host.flops : 1e9;
    host_ = zone->create_host("host", host_speed)->seal();
    // PCIe is full duplex: a split-duplex link gives each direction its own bandwidth.
    auto* pcie = zone->create_split_duplex_link("host_link", platform_.host_link.bandwidth)
                     ->set_latency(platform_.host_link.latency)
                     ->seal();
    zone->add_route(gpu_->get_netpoint(), host_->get_netpoint(), nullptr, nullptr,
                    {sg4::LinkInRoute(pcie, sg4::LinkInRoute::Direction::UP)}, true);
    zone->seal();
  }

  void run_stream(std::size_t stream) {
    for (TaskId t : stream_tasks_[stream]) {
      if (stopped_) return;
      const models::Task& task = schedule_.tasks[t];
      TaskTiming& timing = result_.tasks[t];
      timing.ready = sg4::Engine::get_clock();
      wait_for(task.after);
      if (stopped_) return;
      timing.start = sg4::Engine::get_clock();
      for (BufferId b : task.creates) {
        if (allocated_once_[b]) continue;
        if (!tracker_.allocate(b, timing.start)) {
          record_out_of_memory(t, b, timing.start);
          stop();
          return;
        }
        allocated_once_[b] = true;
      }
      execute(task);
      if (stopped_) return;  // another stream ran out of memory meanwhile: this task does not count
      timing.end = sg4::Engine::get_clock();
      finish_task(t, timing.end);
    }
  }

  // Ends the iteration after an out-of-memory: every actor returns at its next check. Actors
  // are not killed, because a killed actor blocked in a condition-variable wait unwinds through
  // a SimGrid mutex unlock, which aborts the process.
  void stop() {
    stopped_ = true;
    if (waiters_ > 0) task_done_->notify_all();
  }

  void wait_for(const std::vector<TaskId>& dependencies) {
    for (TaskId d : dependencies) {
      if (done_[d] || stopped_) continue;
      std::unique_lock<sg4::Mutex> lock(*mutex_);
      ++waiters_;
      while (!done_[d] && !stopped_) task_done_->wait(lock);
      --waiters_;
    }
  }

  void execute(const models::Task& task) {
    switch (task.kind) {
      case TaskKind::offload:
        if (task.bytes > 0) sg4::Comm::sendto(gpu_, host_, static_cast<std::uint64_t>(task.bytes));
        return;
      case TaskKind::prefetch:
        if (task.bytes > 0) sg4::Comm::sendto(host_, gpu_, static_cast<std::uint64_t>(task.bytes));
        return;
      case TaskKind::op:
      case TaskKind::recompute:
      case TaskKind::compress:
      case TaskKind::decompress:
        // The actor lives on the GPU host, so this_actor::execute runs there (never
        // Host::exec_async, which runs on the caller's host: reference notes, pitfall 1).
        if (task.seconds > 0) sg4::this_actor::execute(task.seconds * kGpuSpeed);
        return;
    }
  }

  void finish_task(TaskId t, double time) {
    for (BufferId b : task_buffers_[t]) {
      const models::Buffer& buffer = schedule_.buffers[b];
      if (--remaining_users_[b] == 0 && !buffer.resident && !buffer.held_to_end && tracker_.is_live(b)) {
        tracker_.release(b, time);
      }
    }
    done_[t] = true;
    // Most tasks have nobody waiting on them; skipping the simcall keeps the replay close to
    // raw SimGrid speed (sim/bench).
    if (waiters_ > 0) task_done_->notify_all();
  }

  // SimGrid's engine returns when no actor can progress. Without an out-of-memory stop every
  // task must have run: a task left over means the streams waited on each other (a deadlock
  // that Schedule::validate should have ruled out) or SimGrid gave up on an activity. Either
  // way the timings would be a silently wrong result, so it is an error, never a report.
  void check_completed() const {
    if (result_.out_of_memory) return;
    const auto ran = static_cast<std::size_t>(std::count(done_.begin(), done_.end(), true));
    if (ran != schedule_.tasks.size()) {
      std::string first;
      for (TaskId t = 0; t < schedule_.tasks.size() && first.empty(); ++t) {
        if (!done_[t]) first = fmt::format("task {} ({})", t, schedule_.tasks[t].name);
      }
      throw std::runtime_error(fmt::format("the replay stopped with {} of {} tasks run (first not run: {}): a deadlock in the schedule or in "
                                           "SimGrid; no result is reported",
                                           ran, schedule_.tasks.size(), first));
    }
    for (TaskId t = 0; t < schedule_.tasks.size(); ++t) {
      const TaskTiming& timing = result_.tasks[t];
      if (!std::isfinite(timing.end) || !std::isfinite(timing.start)) {
        throw std::runtime_error(fmt::format("task {} ({}) ended at a non-finite time; no result is reported", t, schedule_.tasks[t].name));
      }
    }
  }

  void record_out_of_memory(std::optional<TaskId> task, BufferId buffer, double time) {
    OutOfMemory oom;
    oom.task = task;
    oom.buffer = buffer;
    oom.requested = schedule_.buffers[buffer].bytes;
    oom.in_use = tracker_.in_use();
    oom.capacity = tracker_.capacity();
    oom.time = time;
    result_.out_of_memory = oom;
  }

  SimulationResult finish() {
    check_completed();
    for (TaskId t = 0; t < schedule_.tasks.size(); ++t) {
      const TaskTiming& timing = result_.tasks[t];
      if (!done_[t]) continue;
      result_.iteration_seconds = std::max(result_.iteration_seconds, timing.end);
      result_.seconds_by_task_kind[static_cast<std::size_t>(schedule_.tasks[t].kind)] += timing.end - timing.start;
      if (schedule_.tasks[t].stream == Stream::compute) result_.compute_stall_seconds += timing.start - timing.ready;
    }
    result_.peak_bytes = tracker_.peak();
    result_.allocator_peak_allocated = tracker_.allocator_peak_allocated();
    result_.allocator_peak_reserved = tracker_.allocator_peak_reserved();
    result_.peak_time = tracker_.peak_time();
    result_.peak_by_role = tracker_.peak_by_role();
    result_.live_at_peak = tracker_.live_at_peak();
    result_.memory_events = tracker_.events();
    return std::move(result_);
  }

  const models::Platform& platform_;
  const models::Schedule& schedule_;
  MemoryTracker tracker_;
  std::vector<bool> done_;
  std::vector<bool> allocated_once_;
  std::vector<std::size_t> remaining_users_;
  std::vector<std::vector<BufferId>> task_buffers_;  // creates ∪ uses, each once
  std::array<std::vector<TaskId>, models::kStreamCount> stream_tasks_;
  sg4::Host* gpu_ = nullptr;
  sg4::Host* host_ = nullptr;
  sg4::MutexPtr mutex_;
  sg4::ConditionVariablePtr task_done_;
  bool stopped_ = false;
  int waiters_ = 0;  // actors blocked in wait_for
  SimulationResult result_;
};

// --- Passing a result from the child process to the parent -------------------------------

class Writer {
 public:
  template <typename T>
  void put(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const char*>(&value);
    bytes_.append(p, sizeof(T));
  }
  template <typename T>
  void put_vector(const std::vector<T>& values) {
    put<std::uint64_t>(values.size());
    for (const T& v : values) put(v);
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

class Reader {
 public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}
  template <typename T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    if (offset_ + sizeof(T) > bytes_.size()) throw std::runtime_error("simulation child sent a truncated result");
    T value;
    std::memcpy(&value, bytes_.data() + offset_, sizeof(T));
    offset_ += sizeof(T);
    return value;
  }
  template <typename T>
  std::vector<T> get_vector() {
    const auto n = get<std::uint64_t>();
    if (n > (bytes_.size() - offset_) / sizeof(T)) throw std::runtime_error("simulation child sent a truncated result");
    std::vector<T> values(n);
    for (auto& v : values) v = get<T>();
    return values;
  }

 private:
  const std::string& bytes_;
  std::size_t offset_ = 0;
};

std::string serialize(const SimulationResult& r) {
  Writer w;
  w.put<bool>(r.out_of_memory.has_value());
  if (r.out_of_memory) {
    const OutOfMemory& o = *r.out_of_memory;
    w.put<bool>(o.task.has_value());
    w.put<TaskId>(o.task.value_or(0));
    w.put(o.buffer);
    w.put(o.requested);
    w.put(o.in_use);
    w.put(o.capacity);
    w.put(o.time);
  }
  w.put(r.iteration_seconds);
  w.put(r.peak_bytes);
  w.put(r.allocator_peak_allocated);
  w.put(r.allocator_peak_reserved);
  w.put(r.peak_time);
  w.put(r.peak_by_role);
  w.put_vector(r.live_at_peak);
  w.put(r.seconds_by_task_kind);
  w.put(r.compute_stall_seconds);
  w.put_vector(r.tasks);
  w.put_vector(r.memory_events);
  return w.bytes();
}

SimulationResult deserialize(const std::string& bytes) {
  Reader in(bytes);
  SimulationResult r;
  if (in.get<bool>()) {
    OutOfMemory o;
    const bool has_task = in.get<bool>();
    const auto task = in.get<TaskId>();
    if (has_task) o.task = task;
    o.buffer = in.get<BufferId>();
    o.requested = in.get<std::int64_t>();
    o.in_use = in.get<std::int64_t>();
    o.capacity = in.get<std::int64_t>();
    o.time = in.get<double>();
    r.out_of_memory = o;
  }
  r.iteration_seconds = in.get<double>();
  r.peak_bytes = in.get<std::int64_t>();
  r.allocator_peak_allocated = in.get<std::int64_t>();
  r.allocator_peak_reserved = in.get<std::int64_t>();
  r.peak_time = in.get<double>();
  r.peak_by_role = in.get<BytesByMemoryRole>();
  r.live_at_peak = in.get_vector<BufferId>();
  r.seconds_by_task_kind = in.get<std::array<double, 6>>();
  r.compute_stall_seconds = in.get<double>();
  r.tasks = in.get_vector<TaskTiming>();
  r.memory_events = in.get_vector<MemoryEvent>();
  return r;
}

}  // namespace

SimulationResult simulate_in_this_process(const models::Platform& platform, const models::Schedule& schedule) {
  schedule.validate();
  Replay replay(platform, schedule);
  return replay.run();
}

SimulationResult simulate(const models::Platform& platform, const models::Schedule& schedule) {
  schedule.validate();  // fail in the caller, with its stack, rather than in the child
  ChildProcess child([&] { return serialize(simulate_in_this_process(platform, schedule)); });
  JobOutcome outcome = child.wait();
  if (outcome.status == JobOutcome::Status::result) {
    // SimGrid's warnings, if any, reach the user as the child wrote them.
    if (!outcome.diagnostics.empty()) std::fputs(outcome.diagnostics.c_str(), stderr);
    return deserialize(outcome.text);
  }
  outcome.text = "simulation failed: " + outcome.text;
  std::move(outcome).result_or_throw();
  return {};  // not reached: result_or_throw threw
}

}  // namespace comptrain::sim

// The I/O simulation of sim/io.hpp: the node's training loops, data-loader workers and
// checkpoint copies on SimGrid.

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "comptrain/sim/engine/io_simulation.hpp"
#include "comptrain/sim/engine/io_cost.hpp"
#include "comptrain/sim/core/bottleneck.hpp"
#include "comptrain/sim/runtime/workers.hpp"
#include "comptrain/support/checked.hpp"
#include "comptrain/support/input_error.hpp"
#include "engine/simgrid_engine.hpp"

namespace sg4 = simgrid::s4u;

namespace comptrain::sim {

std::string_view to_string(IterationBound bound) {
  switch (bound) {
    case IterationBound::gpu: return "gpu";
    case IterationBound::network: return "network";
    case IterationBound::host: return "host";
    case IterationBound::loader: return "loader";
    case IterationBound::storage: return "storage";
  }
  return "?";
}

namespace {

constexpr int kMaxWarmupIterations = 20'000;

}  // namespace

IoCost estimate_io_cost(const IoInputs& inputs) {
  IoCost cost;
  const std::int64_t gpus = inputs.shape.gpus_per_node;
  if (inputs.data) {
    const std::int64_t workers = inputs.data->workers_per_gpu;
    cost.warmup_iterations = 2 * inputs.data->prefetch_factor * workers + 2 * workers + 2;  // IoModel::decide's minimum
    // Per GPU and iteration a batch is made ready and taken, and each wakes the GPU's workers and
    // its training loop (one condition variable per GPU).
    cost.loader_wakeups = cost.warmup_iterations * gpus * 2 * (workers + 1);
  }
  if (inputs.checkpoint) {
    const std::int64_t chunk = std::max<std::int64_t>(inputs.checkpoint->chunk_bytes, 1);
    const auto chunks = [chunk](std::int64_t bytes) { return bytes / chunk + (bytes % chunk != 0 ? 1 : 0); };
    cost.chunks_per_checkpoint = chunks(inputs.sizes.rank0.total()) + (gpus - 1) * chunks(inputs.sizes.other.total());
  }
  return cost;
}

void check_io_cost(const IoInputs& inputs, std::string_view data_where, std::string_view checkpoint_where) {
  const IoCost cost = estimate_io_cost(inputs);
  if (inputs.data) {
    const DataSpec& d = *inputs.data;
    // The bytes a worker reads per iteration, an int64 product (a wrapped one read "in 0 s").
    if (!checked_mul(d.bytes_per_sample, inputs.profile.samples)) {
      throw InputError(fmt::format("{}data.bytes_per_sample: {} bytes x {} samples per iteration overflows 64 bits; expected at most {} bytes "
                                   "per sample at this batch",
                                   data_where, d.bytes_per_sample, inputs.profile.samples,
                                   std::numeric_limits<std::int64_t>::max() / std::max<std::int64_t>(inputs.profile.samples, 1)));
    }
    if (cost.warmup_iterations > kMaxWarmupIterations) {
      throw InputError(fmt::format("{}data.prefetch_factor {} x data.workers_per_gpu {}: the loader's warm-up is at least {} simulated iterations "
                                   "(2 x prefetch_factor x workers_per_gpu + 2 x workers_per_gpu + 2, until the prefetch queue is full); "
                                   "expected at most {}: fewer workers or a smaller prefetch factor",
                                   data_where, d.prefetch_factor, d.workers_per_gpu, cost.warmup_iterations, kMaxWarmupIterations));
    }
    if (cost.loader_wakeups > kMaxLoaderWakeups) {
      throw InputError(fmt::format("{}data.workers_per_gpu {} on {} GPU(s) with prefetch_factor {}: the loader's warm-up of {} iterations would "
                                   "wake the node's workers about {} times in the I/O simulation; expected at most {} (about half a minute): "
                                   "fewer workers per GPU or a smaller prefetch factor",
                                   data_where, d.workers_per_gpu, inputs.shape.gpus_per_node, d.prefetch_factor, cost.warmup_iterations,
                                   cost.loader_wakeups, kMaxLoaderWakeups));
    }
  }
  if (inputs.checkpoint && cost.chunks_per_checkpoint > kMaxChunksPerCheckpoint) {
    const std::int64_t bytes = inputs.sizes.rank0.total() + (inputs.shape.gpus_per_node - 1) * inputs.sizes.other.total();
    const std::int64_t smallest = bytes / kMaxChunksPerCheckpoint + 1;
    throw InputError(fmt::format("{}a chunk of {} bytes cuts the node's {}-byte checkpoint into {} chunks, each a simulated copy and "
                                 "write; expected at most {} per checkpoint: a chunk of at least {} bytes",
                                 checkpoint_where, inputs.checkpoint->chunk_bytes, bytes, cost.chunks_per_checkpoint, kMaxChunksPerCheckpoint,
                                 smallest));
  }
}

void check_io_inputs(const IoInputs& inputs, std::string_view source) {
  const auto& storage = inputs.platform.storage;
  // Where the field was written when the reader kept it, else the caller's name for the inputs.
  const auto at = [&](const std::string& position) { return position.empty() ? source : std::string_view(position); };
  const auto need = [&](StorageTier tier, std::string_view section, const std::string& position) {
    const bool present = storage && (tier == StorageTier::shared ? storage->shared.has_value() : storage->local.has_value());
    if (!present) {
      throw InputError(fmt::format("{}: {}: the platform '{}' has no storage.{}; expected a platform with a `storage: {{{}: ...}}` section "
                                   "(scenarios/platforms/README.md, \"Storage\")",
                                   at(position), section, inputs.platform.name, to_string(tier), to_string(tier)));
    }
  };
  if (inputs.data) need(inputs.data->from, "data.from", inputs.data->from_position);
  if (inputs.checkpoint) {
    need(inputs.checkpoint->to, "checkpoint.to", inputs.checkpoint->to_position);
    const CheckpointSpec& c = *inputs.checkpoint;
    if (c.mode == CheckpointMode::sync && !(inputs.platform.host.torch_save_bandwidth > 0)) {
      throw InputError(fmt::format("{}: checkpoint.mode: sync: the platform '{}' has no host.torch_save_bandwidth; expected the rate one "
                                   "process's torch.save reaches on the host, which bounds a synchronous checkpoint "
                                   "(scenarios/platforms/README.md, \"Storage\")",
                                   at(c.mode_position), inputs.platform.name));
    }
    if (c.mode == CheckpointMode::async && c.host_cache_bytes > 0 && c.host_cache_bytes < c.chunk_bytes) {
      throw InputError(fmt::format("{}: checkpoint.host_cache ({} bytes) is smaller than checkpoint.chunk ({} bytes); expected a cache "
                                   "that holds at least one chunk",
                                   source, c.host_cache_bytes, c.chunk_bytes));
    }
  }
}

namespace {

constexpr double kRelativeTolerance = 1e-9;  // iteration times compared as equal (floating-point sums of the same durations)
constexpr int kMaxIntervals = 8;

bool same_time(double a, double b) { return std::abs(a - b) <= kRelativeTolerance * std::max(std::abs(a), std::abs(b)) + 1e-12; }

// One chunk in a GPU's host cache, waiting for the flusher.
struct Chunk {
  int checkpoint = 0;
  std::int64_t bytes = 0;
  bool last = false;
};

struct GpuState {
  // What this GPU's actors wait on (its training loop, loader workers, copier and flusher), and
  // what each of them notifies after a change: every wait is on one GPU's own state, so one
  // variable per GPU wakes only that GPU's actors, not the node's (with one for the node, each
  // batch woke every worker of every GPU: 2 GPUs x 1,024 workers took 54 s, shared/defects-2/08).
  sg4::ConditionVariablePtr changed;
  // loader
  int consumed = 0;                 // batches taken by the training loop
  std::map<int, double> ready;      // batch -> when it was decoded (erased once taken)
  std::vector<double> read_seconds;    // per batch (index = batch)
  std::vector<double> decode_seconds;
  // checkpoint
  std::int64_t checkpoint_bytes = 0;
  int copies_requested = 0, copies_started = 0, copies_done = 0;
  std::int64_t cache_used = 0;
  std::deque<Chunk> to_flush;
  std::map<int, double> checkpoint_start, persisted;  // checkpoint -> when it began / its last byte was written
  std::map<int, double> stall;                        // checkpoint -> training time lost to it
  std::map<int, double> serialize;                    // sync checkpoint -> its time in torch.save's serialization
  std::vector<double> data_wait;                      // per iteration
  std::vector<double> launch_wait;                    // per iteration: the wait for the launching thread's CPU time
};

class IoModel {
 public:
  explicit IoModel(const IoInputs& in) : in_(in) {
    gpus_ = in_.shape.gpus_per_node;
    workers_ = in_.data ? in_.data->workers_per_gpu : 1;
    state_.resize(static_cast<std::size_t>(gpus_));
    if (in_.checkpoint) {
      for (int g = 0; g < gpus_; ++g) {
        state_[static_cast<std::size_t>(g)].checkpoint_bytes = g == 0 ? in_.sizes.rank0.total() : in_.sizes.other.total();
      }
    }
  }

  IoResult run() {
    detail::ConfiguredEngine engine;
    build_platform();
    mutex_ = sg4::Mutex::create();
    for (GpuState& s : state_) s.changed = sg4::ConditionVariable::create();
    barrier_ = sg4::Barrier::create(static_cast<unsigned>(gpus_));
    for (int g = 0; g < gpus_; ++g) {
      sg4::Actor::create(fmt::format("train{}", g), gpus_host_[static_cast<std::size_t>(g)], [this, g] { train(g); });
      if (in_.data) {
        for (int w = 0; w < workers_; ++w) {
          sg4::Actor::create(fmt::format("loader{}.{}", g, w), cpu_, [this, g, w] { load(g, w); });
        }
      }
      if (in_.checkpoint && in_.checkpoint->mode == CheckpointMode::async && state_[static_cast<std::size_t>(g)].checkpoint_bytes > 0) {
        sg4::Actor::create(fmt::format("copier{}", g), gpus_host_[static_cast<std::size_t>(g)], [this, g] { copy(g); });
        sg4::Actor::create(fmt::format("flusher{}", g), cpu_, [this, g] { flush(g); });
      }
    }
    engine.run();
    if (!finished_) throw std::runtime_error("the I/O simulation ended before its iterations did (a deadlock)");
    return result_;
  }

 private:
  // ---- the platform -------------------------------------------------------------------------
  void build_platform() {
    const models::Platform& p = in_.platform;
    auto* zone = sg4::create_full_zone("io_node");
    cpu_ = zone->create_host("host", 1.0);
    cpu_->set_core_count(std::max(p.host.cores, 1));
    if (p.storage && p.storage->local) {
      disk_ = cpu_->create_disk("local_disk", p.storage->local->read_bandwidth, p.storage->local->write_bandwidth);
      disk_->seal();
    }
    cpu_->seal();
    sg4::Link* memory = nullptr;
    if (gpus_ > 1) memory = zone->create_link("host_memory", p.host.memory_bandwidth)->seal();
    for (int g = 0; g < gpus_; ++g) {
      sg4::Host* gpu = zone->create_host(fmt::format("gpu{}", g), 1.0)->seal();
      gpus_host_.push_back(gpu);
      sg4::Link* pcie = zone->create_split_duplex_link(fmt::format("pcie{}", g), p.host_link.bandwidth)->set_latency(p.host_link.latency)->seal();
      // The split-duplex link first, then the shared one (cluster_network.cpp, add_host_routes).
      std::vector<sg4::LinkInRoute> up{sg4::LinkInRoute(pcie, sg4::LinkInRoute::Direction::UP)};
      if (memory != nullptr) up.emplace_back(memory);
      zone->add_route(gpu->get_netpoint(), cpu_->get_netpoint(), nullptr, nullptr, up, false);
      // host_link.checkpoint_copy_bandwidth: the engine's copies into its pinned cache take the
      // same route and then a link of that rate (a route of its own to a host standing for the
      // cache, so that nothing else is held to it).
      if (const double cap = p.host_link.checkpoint_copy_bandwidth; cap > 0) {
        sg4::Host* cache = zone->create_host(fmt::format("cache{}", g), 1.0)->seal();
        caches_.push_back(cache);
        std::vector<sg4::LinkInRoute> to_cache = up;
        to_cache.emplace_back(zone->create_link(fmt::format("cache_copy{}", g), cap)->seal());
        zone->add_route(gpu->get_netpoint(), cache->get_netpoint(), nullptr, nullptr, to_cache, false);
      }
    }
    if (p.storage && p.storage->shared) {
      const models::SharedFileSystemSpec& fs = *p.storage->shared;
      const double nodes = in_.shape.nodes;
      pfs_ = zone->create_host("file_system", 1.0)->seal();
      sg4::Link* client = zone->create_split_duplex_link("fs_client", fs.per_node_bandwidth)->seal();
      sg4::Link* reads = zone->create_link("fs_read_share", fs.read_bandwidth / nodes)->set_latency(fs.latency)->seal();
      sg4::Link* writes = zone->create_link("fs_write_share", fs.write_bandwidth / nodes)->set_latency(fs.latency)->seal();
      zone->add_route(cpu_->get_netpoint(), pfs_->get_netpoint(), nullptr, nullptr,
                      {sg4::LinkInRoute(client, sg4::LinkInRoute::Direction::UP), sg4::LinkInRoute(writes)}, false);
      zone->add_route(pfs_->get_netpoint(), cpu_->get_netpoint(), nullptr, nullptr,
                      {sg4::LinkInRoute(client, sg4::LinkInRoute::Direction::DOWN), sg4::LinkInRoute(reads)}, false);
    }
    zone->seal();
  }

  void read_from_storage(std::int64_t bytes, StorageTier tier) {
    if (bytes <= 0) return;
    if (tier == StorageTier::local) {
      disk_->read(static_cast<sg_size_t>(bytes));
    } else {
      sg4::Comm::sendto(pfs_, cpu_, static_cast<std::uint64_t>(bytes));
    }
  }
  void write_to_storage(std::int64_t bytes, StorageTier tier) {
    if (bytes <= 0) return;
    if (tier == StorageTier::local) {
      disk_->write(static_cast<sg_size_t>(bytes));
    } else {
      sg4::Comm::sendto(cpu_, pfs_, static_cast<std::uint64_t>(bytes));
    }
  }
  void copy_to_host(int g, std::int64_t bytes) {
    if (bytes > 0) sg4::Comm::sendto(gpus_host_[static_cast<std::size_t>(g)], cpu_, static_cast<std::uint64_t>(bytes));
  }
  // An asynchronous engine's copy into its pinned cache: over the same route, at most at
  // host_link.checkpoint_copy_bandwidth where the platform gives it (models/platform.hpp).
  void copy_to_cache(int g, std::int64_t bytes) {
    if (bytes <= 0) return;
    if (caches_.empty()) {
      copy_to_host(g, bytes);
      return;
    }
    sg4::Comm::sendto(gpus_host_[static_cast<std::size_t>(g)], caches_[static_cast<std::size_t>(g)], static_cast<std::uint64_t>(bytes));
  }
  // storage.shared.checkpoint_overhead: what each save costs before its bytes move (0 when the
  // checkpoint goes to the local disk or the platform gives none).
  double checkpoint_overhead() const {
    if (in_.checkpoint->to != StorageTier::shared || !in_.platform.storage || !in_.platform.storage->shared) return 0;
    return in_.platform.storage->shared->checkpoint_overhead;
  }
  // torch.save's own work on a chunk, on one core of the node's CPU host (a core runs 1 flop/s,
  // so bytes / rate flops take bytes / rate seconds unless the cores are shared): pickling, the
  // storage's copy into fresh host memory, CRC-32 and the write into the page cache. No stage
  // when the platform gives no rate (hand-built inputs; check_io_inputs refuses a scenario's).
  void serialize_on_host(std::int64_t bytes) {
    const double rate = in_.platform.host.torch_save_bandwidth;
    if (bytes <= 0 || !(rate > 0)) return;
    const sg4::ExecPtr exec = sg4::Exec::init()->set_flops_amount(static_cast<double>(bytes) / rate)->set_host(cpu_);
    exec->start();
    exec->wait();
  }

  // ---- the loader ---------------------------------------------------------------------------
  // One batch's read alone on the storage `data.from` names (its rate and request latency; the
  // node's share of a shared file system), then its decode alone on a core.
  double uncontended_batch_seconds() const {
    const DataSpec& d = *in_.data;
    const double bytes = static_cast<double>(d.bytes_per_sample * in_.profile.samples);
    const double decode = d.decode_seconds_per_sample * static_cast<double>(in_.profile.samples);
    if (bytes <= 0) return decode;
    const models::StorageSpec& storage = *in_.platform.storage;
    if (d.from == StorageTier::local) return bytes / storage.local->read_bandwidth + decode;
    const models::SharedFileSystemSpec& fs = *storage.shared;
    return fs.latency + bytes / std::min(fs.per_node_bandwidth, fs.read_bandwidth / in_.shape.nodes) + decode;
  }

  // Worker w of GPU g loads batches w, w + workers, ... in order; batch i may start once batch
  // i - prefetch_factor x workers has been taken (DataLoader keeps that many outstanding).
  // The node's workers start spread evenly over one uncontended batch (data_loader.hpp): real
  // per-sample costs vary and keep workers out of step; identical simulated workers started
  // together would stay in lockstep, all reading and then all decoding, an unstable equilibrium.
  void load(int g, int w) {
    GpuState& s = state_[static_cast<std::size_t>(g)];
    const DataSpec& d = *in_.data;
    const int outstanding = d.prefetch_factor * workers_;
    const std::int64_t bytes = d.bytes_per_sample * in_.profile.samples;
    const double decode = d.decode_seconds_per_sample * static_cast<double>(in_.profile.samples);
    const int node_worker = w * gpus_ + g;
    if (node_worker > 0) sg4::this_actor::sleep_for(uncontended_batch_seconds() * node_worker / (gpus_ * workers_));
    for (int batch = w;; batch += workers_) {
      {
        std::unique_lock<sg4::Mutex> lock(*mutex_);
        while (s.consumed < batch - outstanding + 1 && !finished_) s.changed->wait(lock);
        if (finished_) return;
      }
      const double start = sg4::Engine::get_clock();
      read_from_storage(bytes, d.from);
      const double read_end = sg4::Engine::get_clock();
      if (decode > 0) sg4::this_actor::execute(decode);
      const double end = sg4::Engine::get_clock();
      std::unique_lock<sg4::Mutex> lock(*mutex_);
      if (finished_) return;
      if (s.read_seconds.size() <= static_cast<std::size_t>(batch)) {
        s.read_seconds.resize(static_cast<std::size_t>(batch) + 1);
        s.decode_seconds.resize(static_cast<std::size_t>(batch) + 1);
      }
      s.read_seconds[static_cast<std::size_t>(batch)] = read_end - start;
      s.decode_seconds[static_cast<std::size_t>(batch)] = end - read_end;
      s.ready[batch] = end;
      s.changed->notify_all();
    }
  }

  // ---- asynchronous checkpoints -------------------------------------------------------------
  std::int64_t cache_capacity(const GpuState& s) const {
    return in_.checkpoint->host_cache_bytes > 0 ? in_.checkpoint->host_cache_bytes : s.checkpoint_bytes;
  }

  void note_host_bytes() {
    std::int64_t total = 0;
    for (const GpuState& s : state_) total += s.cache_used;
    host_bytes_peak_ = std::max(host_bytes_peak_, total);
  }

  void copy(int g) {
    GpuState& s = state_[static_cast<std::size_t>(g)];
    const std::int64_t chunk = in_.checkpoint->chunk_bytes;
    for (;;) {
      int checkpoint = 0;
      {
        std::unique_lock<sg4::Mutex> lock(*mutex_);
        while (s.copies_started == s.copies_requested && !finished_) s.changed->wait(lock);
        if (finished_) return;
        checkpoint = s.copies_started++;
      }
      for (std::int64_t done = 0; done < s.checkpoint_bytes;) {
        const std::int64_t bytes = std::min(chunk, s.checkpoint_bytes - done);
        {
          std::unique_lock<sg4::Mutex> lock(*mutex_);
          // A FIFO ring: the copy waits for the flusher to free room.
          while (s.cache_used > 0 && s.cache_used + bytes > cache_capacity(s) && !finished_) s.changed->wait(lock);
          if (finished_) return;
          s.cache_used += bytes;
          note_host_bytes();
        }
        copy_to_cache(g, bytes);
        done += bytes;
        std::unique_lock<sg4::Mutex> lock(*mutex_);
        if (finished_) return;
        s.to_flush.push_back(Chunk{checkpoint, bytes, done == s.checkpoint_bytes});
        s.changed->notify_all();
      }
      std::unique_lock<sg4::Mutex> lock(*mutex_);
      if (finished_) return;
      ++s.copies_done;
      s.changed->notify_all();
    }
  }

  void flush(int g) {
    GpuState& s = state_[static_cast<std::size_t>(g)];
    for (;;) {
      Chunk chunk;
      {
        std::unique_lock<sg4::Mutex> lock(*mutex_);
        while (s.to_flush.empty() && !finished_) s.changed->wait(lock);
        if (finished_) return;
        chunk = s.to_flush.front();
        s.to_flush.pop_front();
      }
      write_to_storage(chunk.bytes, in_.checkpoint->to);
      std::unique_lock<sg4::Mutex> lock(*mutex_);
      if (finished_) return;
      s.cache_used -= chunk.bytes;
      if (chunk.last) s.persisted[chunk.checkpoint] = sg4::Engine::get_clock();
      s.changed->notify_all();
    }
  }

  // ---- the training loop --------------------------------------------------------------------
  // torch.save, one chunk (tensor) after the other: its copy to host memory, its serialization,
  // its write. In series, as torch.save runs them (torch/serialization.py, _save: each storage's
  // .cpu(), then the zip writer's write_record); the page cache would let the device's write-back
  // overlap the next chunk, which the model leaves out (it can only lengthen the stall by the
  // writes' share).
  // `start`: when the save began (before its fixed overhead).
  void save_synchronously(int g, int checkpoint, double start) {
    GpuState& s = state_[static_cast<std::size_t>(g)];
    const std::int64_t chunk = in_.checkpoint->chunk_bytes;
    double serializing = 0;
    for (std::int64_t done = 0; done < s.checkpoint_bytes;) {
      const std::int64_t bytes = std::min(chunk, s.checkpoint_bytes - done);
      {
        std::unique_lock<sg4::Mutex> lock(*mutex_);
        s.cache_used += bytes;  // the chunk staged in host memory until written
        note_host_bytes();
      }
      copy_to_host(g, bytes);
      const double serialize_start = sg4::Engine::get_clock();
      serialize_on_host(bytes);
      serializing += sg4::Engine::get_clock() - serialize_start;
      write_to_storage(bytes, in_.checkpoint->to);
      std::unique_lock<sg4::Mutex> lock(*mutex_);
      s.cache_used -= bytes;
      done += bytes;
    }
    const double end = sg4::Engine::get_clock();
    std::unique_lock<sg4::Mutex> lock(*mutex_);
    s.persisted[checkpoint] = end;
    s.stall[checkpoint] = end - start;
    s.serialize[checkpoint] = serializing;
  }

  // checkpoint.wait: save: the save returns once the checkpoint's copies are in the host cache.
  // `start`: when the save began (before its fixed overhead).
  void wait_for_copies(GpuState& s, int checkpoint, double start) {
    std::unique_lock<sg4::Mutex> lock(*mutex_);
    while (s.copies_done <= checkpoint) s.changed->wait(lock);
    s.stall[checkpoint] = sg4::Engine::get_clock() - start;
  }

  void train(int g) {
    GpuState& s = state_[static_cast<std::size_t>(g)];
    const double forward_backward = in_.profile.optimizer_start;
    const double step = in_.profile.seconds - in_.profile.optimizer_start;
    int pending_async = -1;  // the async checkpoint whose copy must end before this iteration's step
    for (int i = 0;; ++i) {
      const double begin = sg4::Engine::get_clock();
      if (in_.data) {
        std::unique_lock<sg4::Mutex> lock(*mutex_);
        while (s.ready.find(i) == s.ready.end()) s.changed->wait(lock);
        s.ready.erase(i);
        s.consumed = i + 1;
        s.changed->notify_all();
      }
      s.data_wait.push_back(sg4::Engine::get_clock() - begin);
      // The training process's launching thread issues this iteration's work on the node's CPU,
      // sharing its cores with the loader workers (data_loader.hpp); the replay timed it on a
      // free core, so it binds only when the sharing slows it past the GPU's time.
      sg4::ExecPtr launch;
      if (in_.data && in_.profile.launch_seconds > 0) {
        launch = sg4::Exec::init()->set_flops_amount(in_.profile.launch_seconds)->set_host(cpu_);
        launch->start();
      }
      if (forward_backward > 0) sg4::this_actor::sleep_for(forward_backward);
      if (pending_async >= 0) {
        const double wait_start = sg4::Engine::get_clock();
        std::unique_lock<sg4::Mutex> lock(*mutex_);
        while (s.copies_done <= pending_async) s.changed->wait(lock);
        // The save's own overhead blocked training when it was taken; the wait adds to it.
        s.stall[pending_async] = checkpoint_overhead() + sg4::Engine::get_clock() - wait_start;
        pending_async = -1;
      }
      if (step > 0) sg4::this_actor::sleep_for(step);
      const double launch_wait_start = sg4::Engine::get_clock();
      if (launch) launch->wait();
      s.launch_wait.push_back(sg4::Engine::get_clock() - launch_wait_start);
      if (const int checkpoint = checkpoint_at(i); checkpoint >= 0 && s.checkpoint_bytes > 0) {
        // Each save's fixed cost first, on the training thread, whatever the mode.
        const double save_start = sg4::Engine::get_clock();
        if (const double overhead = checkpoint_overhead(); overhead > 0) sg4::this_actor::sleep_for(overhead);
        if (in_.checkpoint->mode == CheckpointMode::sync) {
          save_synchronously(g, checkpoint, save_start);
        } else {
          {
            std::unique_lock<sg4::Mutex> lock(*mutex_);
            s.checkpoint_start[checkpoint] = save_start;
            ++s.copies_requested;
            s.changed->notify_all();
          }
          if (in_.checkpoint->wait == CheckpointWait::save) {
            wait_for_copies(s, checkpoint, save_start);
          } else {
            pending_async = checkpoint;
          }
        }
      }
      barrier_->wait();
      if (g == 0) decide(i);
      barrier_->wait();
      if (finished_) {
        // Wake the loader, copier and flusher actors so that they end too (SimGrid ends a run
        // when every actor has; killing daemons blocked on a condition variable aborted).
        std::unique_lock<sg4::Mutex> lock(*mutex_);
        for (GpuState& other : state_) other.changed->notify_all();
        return;
      }
    }
  }

  // ---- what to simulate next ----------------------------------------------------------------
  // -1, or the index of the checkpoint taken after iteration i.
  int checkpoint_at(int i) const {
    if (first_checkpoint_ < 0 || i < first_checkpoint_) return -1;
    const int every = in_.checkpoint->every;
    const int index = (i - first_checkpoint_) % every == 0 ? (i - first_checkpoint_) / every : -1;
    // A measured run takes its N checkpoints and no more; the iterations after it only let the
    // last flush end.
    if (in_.run_checkpoints > 0 && index >= in_.run_checkpoints) return -1;
    return index;
  }

  bool steady_at(int i, double period_seconds) const {
    const int p = workers_;
    return i >= p && same_time(end_[static_cast<std::size_t>(i)] - end_[static_cast<std::size_t>(i - p)], period_seconds * p);
  }

  // Whether every checkpoint up to `checkpoint` has reached the file by `time`.
  bool persisted_by(int checkpoint, double time) const {
    for (const GpuState& s : state_) {
      if (s.checkpoint_bytes == 0) continue;
      const auto it = s.persisted.find(checkpoint);
      if (it == s.persisted.end() || it->second > time) return false;
    }
    return true;
  }

  // Whether every GPU has recorded its stall for checkpoint `checkpoint` (with wait: step, the
  // stall falls in the iteration after the checkpoint's).
  bool stalled_for(int checkpoint) const {
    for (const GpuState& s : state_) {
      if (s.checkpoint_bytes > 0 && s.stall.find(checkpoint) == s.stall.end()) return false;
    }
    return true;
  }

  void decide(int i) {
    end_.push_back(sg4::Engine::get_clock());
    const auto e = [&](int k) { return k < 0 ? 0.0 : end_[static_cast<std::size_t>(k)]; };
    const int p = workers_;
    if (first_checkpoint_ < 0) {
      // Warm-up: the loader's prefetch fills, then iteration times repeat with period p.
      const int minimum = in_.data ? 2 * in_.data->prefetch_factor * p + 2 * p + 2 : 2;
      if (i + 1 < minimum || i < 2 * p) return;
      const double period = e(i) - e(i - p);
      if (!same_time(period, e(i - p) - e(i - 2 * p))) {
        if (i + 1 >= kMaxWarmupIterations) throw std::runtime_error("the loader reached no steady state in 20,000 iterations");
        return;
      }
      steady_ = period / p;
      steady_end_ = i;
      if (!in_.checkpoint) return finish(i);
      first_checkpoint_ = i + 1;
      return;
    }
    const int every = in_.checkpoint->every;
    if (const int n = in_.run_checkpoints; n > 0) {
      // A measured run: its N x every iterations, then until its last checkpoint has been
      // waited for and written.
      const int run_end = first_checkpoint_ + n * every - 1;
      if (i >= run_end && stalled_for(n - 1) && persisted_by(n - 1, e(i))) {
        extra_ = (e(run_end) - e(first_checkpoint_ - 1)) - n * every * steady_;
        affected_ = n * every;
        last_checkpoint_ = n - 1;
        return finish(i);
      }
      return;
    }
    const int since = i - first_checkpoint_;  // iterations since the first checkpoint's iteration
    const int interval = since / every;
    const int reference = first_checkpoint_ - 1;  // the last steady iteration before any checkpoint
    if (interval == 0 && since >= p - 1 && persisted_by(0, e(i)) && steady_at(i, steady_)) {
      // Back to steady within the first interval: the rest of the interval is steady.
      extra_ = (e(i) - e(reference)) - (since + 1) * steady_;
      affected_ = since + 1;
      last_checkpoint_ = 0;
      return finish(i);
    }
    if (since % every == every - 1) {
      interval_seconds_.push_back(e(i) - e(i - every));
      const std::size_t n = interval_seconds_.size();
      if (n >= 2 && (same_time(interval_seconds_[n - 1], interval_seconds_[n - 2]) || static_cast<int>(n) >= kMaxIntervals)) {
        extra_ = interval_seconds_.back() - every * steady_;
        affected_ = every;
        outlasts_ = true;
        // The stall of the interval's own checkpoint may fall in the next iteration (async, every
        // 1): report the one before it, which has run completely.
        last_checkpoint_ = std::max(0, interval - 1);
        return finish(i);
      }
    }
  }

  void finish(int i) {
    finished_ = true;
    IoResult& r = result_;
    r.data_loader = in_.data.has_value();
    r.gpu_iteration_seconds = in_.profile.seconds;
    r.steady_iteration_seconds = steady_;
    r.simulated_iterations = i + 1;
    // The steady window: the p iterations ending at steady_end_. The node's GPUs meet after
    // every iteration, so an iteration waits as long as its slowest GPU did (the workers' spread
    // start makes the GPUs' waits differ); the batches are those of the GPU that waited most.
    const int p = workers_;
    const auto window_total = [&](const std::vector<double> GpuState::*series) {
      double total = 0;
      for (int k = steady_end_ - p + 1; k <= steady_end_; ++k) {
        double slowest = 0;
        for (const GpuState& s : state_) slowest = std::max(slowest, (s.*series)[static_cast<std::size_t>(k)]);
        total += slowest;
      }
      return total;
    };
    const double wait = window_total(&GpuState::data_wait);
    const double launch_wait = window_total(&GpuState::launch_wait);
    const GpuState* pacing = &state_.front();
    double pacing_wait = -1;
    for (const GpuState& s : state_) {
      double own = 0;
      for (int k = steady_end_ - p + 1; k <= steady_end_; ++k) own += s.data_wait[static_cast<std::size_t>(k)];
      if (own > pacing_wait) {
        pacing_wait = own;
        pacing = &s;
      }
    }
    const GpuState& s0 = *pacing;
    double read = 0, decode = 0;
    for (int k = steady_end_ - p + 1; k <= steady_end_; ++k) {
      if (in_.data && static_cast<std::size_t>(k) < s0.read_seconds.size()) {
        read += s0.read_seconds[static_cast<std::size_t>(k)];
        decode += s0.decode_seconds[static_cast<std::size_t>(k)];
      }
    }
    r.data_wait_seconds = wait / p;
    r.launch_seconds = in_.data ? in_.profile.launch_seconds : 0;
    r.launch_wait_seconds = launch_wait / p;
    r.batch_read_seconds = read / p;
    r.batch_decode_seconds = decode / p;
    const double t = in_.profile.seconds;
    if (r.data_wait_seconds > kRelativeTolerance * steady_) {
      r.bound = r.batch_read_seconds > r.batch_decode_seconds ? IterationBound::storage : IterationBound::loader;
    } else if (r.launch_wait_seconds > kRelativeTolerance * steady_) {
      r.bound = IterationBound::host;
    } else {
      const double network = t > 0 ? in_.profile.exposed_communication_seconds / t : 0;
      const double host = t > 0 ? in_.profile.host_wait_seconds / t : 0;
      switch (dominant_wait(network, host)) {
        case Bottleneck::none:
        case Bottleneck::checkpoint: r.bound = IterationBound::gpu; break;  // no checkpoint share passed: never checkpoint
        case Bottleneck::network: r.bound = IterationBound::network; break;
        case Bottleneck::host: r.bound = IterationBound::host; break;
      }
    }
    r.mean_iteration_seconds = steady_;
    if (in_.checkpoint) {
      CheckpointResult c;
      c.mode = in_.checkpoint->mode;
      c.wait = in_.checkpoint->wait;
      c.every = in_.checkpoint->every;
      c.to = in_.checkpoint->to;
      c.save_overhead_seconds = checkpoint_overhead();
      c.sizes = in_.sizes;
      for (const GpuState& s : state_) {
        if (s.checkpoint_bytes == 0) continue;
        const auto stall = s.stall.find(last_checkpoint_);
        if (stall != s.stall.end() && stall->second >= c.stall_seconds) {
          c.stall_seconds = stall->second;
          const auto serialize = s.serialize.find(last_checkpoint_);
          c.serialize_seconds = serialize != s.serialize.end() ? serialize->second : 0.0;
        }
        const auto persisted = s.persisted.find(last_checkpoint_);
        if (persisted != s.persisted.end()) {
          const double start = c.mode == CheckpointMode::sync ? persisted->second - s.stall.at(last_checkpoint_)
                                                              : s.checkpoint_start.at(last_checkpoint_);
          c.persist_seconds = std::max(c.persist_seconds, persisted->second - start);
        }
      }
      if (const int n = in_.run_checkpoints; n > 0) {
        // The run's means: per checkpoint the node's slowest GPU, as every stall above.
        c.run_checkpoints = n;
        double stall = 0, serialize = 0;
        for (int k = 0; k < n; ++k) {
          double slowest = 0, its_serialize = 0;
          for (const GpuState& s : state_) {
            const auto it = s.stall.find(k);
            if (s.checkpoint_bytes == 0 || it == s.stall.end() || it->second < slowest) continue;
            slowest = it->second;
            const auto ser = s.serialize.find(k);
            its_serialize = ser != s.serialize.end() ? ser->second : 0.0;
          }
          stall += slowest;
          serialize += its_serialize;
        }
        c.stall_seconds = stall / n;
        c.serialize_seconds = serialize / n;
        extra_ /= n;  // E per interval, the run's mean
      }
      // A difference of sums of the same durations: a hidden checkpoint gives +-1e-16, not 0.
      c.extra_seconds_per_interval = std::abs(extra_) <= kRelativeTolerance * steady_ * (affected_ + 1) ? 0.0 : extra_;
      c.seconds_per_iteration = c.extra_seconds_per_interval / c.every;
      c.overhead = steady_ > 0 ? c.seconds_per_iteration / steady_ : 0;
      c.host_bytes_per_node = host_bytes_peak_;
      c.affected_iterations = affected_;
      c.outlasts_interval = outlasts_;
      if (in_.target_overhead && in_.run_checkpoints == 0) {
        c.target_overhead = in_.target_overhead;
        if (!outlasts_) {
          // E is the same for every interval of at least `affected_` iterations.
          const double target = *in_.target_overhead;
          int n = affected_;
          if (c.extra_seconds_per_interval > 0) {
            const double needed = c.extra_seconds_per_interval / (target * steady_);
            n = std::max(n, static_cast<int>(std::min(std::ceil(needed * (1 - 1e-12)), 1e9)));
          }
          c.interval_for_target = std::max(n, 1);
        }
      }
      r.mean_iteration_seconds = steady_ + c.seconds_per_iteration;
      r.checkpoint = c;
    }
  }

  const IoInputs& in_;
  int gpus_ = 1;
  int workers_ = 1;
  sg4::Host* cpu_ = nullptr;
  sg4::Host* pfs_ = nullptr;
  sg4::Disk* disk_ = nullptr;
  std::vector<sg4::Host*> gpus_host_;
  std::vector<sg4::Host*> caches_;  // per GPU, where host_link.checkpoint_copy_bandwidth applies (else empty)
  sg4::MutexPtr mutex_;
  sg4::BarrierPtr barrier_;
  std::vector<GpuState> state_;
  std::int64_t host_bytes_peak_ = 0;

  std::vector<double> end_;  // per iteration, when the node's GPUs met after it
  double steady_ = 0;
  int steady_end_ = 0;
  int first_checkpoint_ = -1;
  std::vector<double> interval_seconds_;
  double extra_ = 0;
  int affected_ = 0;
  bool outlasts_ = false;
  int last_checkpoint_ = 0;
  bool finished_ = false;
  IoResult result_;
};

}  // namespace

IoResult simulate_io_in_this_process(const IoInputs& inputs) {
  if (inputs.shape.gpus_per_node < 1 || !(inputs.profile.seconds > 0)) {
    throw std::invalid_argument("simulate_io: a shape with GPUs and an iteration of positive time");
  }
  if (inputs.data && (inputs.data->workers_per_gpu < 1 || inputs.data->prefetch_factor < 1)) {
    throw std::invalid_argument("simulate_io: at least one worker per GPU and a prefetch factor of at least 1");
  }
  if (inputs.checkpoint && (inputs.checkpoint->every < 1 || inputs.checkpoint->chunk_bytes < 1)) {
    throw std::invalid_argument("simulate_io: a checkpoint interval and chunk of at least 1");
  }
  if (inputs.run_checkpoints < 0 || (inputs.run_checkpoints > 0 && !inputs.checkpoint)) {
    throw std::invalid_argument("simulate_io: run_checkpoints is 0 or a count of checkpoints, with a checkpoint");
  }
  IoModel model(inputs);
  return model.run();
}

IoResult simulate_io(const IoInputs& inputs) {
  ChildProcess child([&inputs] { return wire::encode(simulate_io_in_this_process(inputs)); });
  return wire::decode<IoResult>(std::move(child.wait()).result_or_throw());
}

// Every field of an IoResult is a number, an enum or an optional of such: its bytes are its state.
static_assert(std::is_trivially_copyable_v<IoResult>, "IoResult crosses the pipe as its bytes (wire::Codec<IoResult>)");
void wire::Codec<IoResult>::write(wire::Writer& w, const IoResult& result) { w.put(result); }
IoResult wire::Codec<IoResult>::read(wire::Reader& in) { return in.get<IoResult>(); }

}  // namespace comptrain::sim

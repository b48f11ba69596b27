// A fixed plan -> its Schedule (Assembler), and the full measure of a plan (evaluate: build and
// replay sequentially). Split out of build_schedule.cpp.

#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "build_internal.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/traces/liveness.hpp"
#include "schedule_replay.hpp"

namespace comptrain::models::strategy_detail {

using traces::OpIndex;
using traces::Phase;
using traces::TensorIndex;
using traces::TensorRole;
using traces::Trace;

namespace {

// Transformer Engine's pipelined reduce-scatter (traces::Communication::splits, n pieces; TE
// `pipeline` Userbuffers overlap, the default for the row-parallel GEMMs' forward under Megatron-LM's
// --tp-comm-overlap: TE pytorch/module/base.py, initialize_ub, methods["pipeline"] = proj_fprop,
// fc2_fprop, num_splits 4). The GEMM computes its output in n pieces and each piece's reduction
// starts when it is made, beside the next piece; the reduction of the last piece is exposed.
// The collective task, on the tensor stream after the GEMM's task with the op after it waiting for
// it (emit()), becomes: the GEMM's first piece (its task, 1/n of the time), its other pieces (a
// task of its own, (n - 1)/n), the reduction of (n - 1)/n of the bytes beside them (waiting for the
// first piece only) and of the last 1/n after them; whatever waited for the GEMM or the collective
// waits for the last part of each. The SMs TE's reduction kernels take from the GEMM meanwhile are
// not charged (num_sm 16 of the GPU's, set_sm_margin 0), as NCCL's are not.
void split_pipelined_reductions(Schedule& schedule, const Trace& trace) {
  const auto pieces_of = [&](const Task& task) -> std::int64_t {
    if (task.kind != TaskKind::collective || !task.op || task.stream != Stream::tensor) return 0;
    const auto& communication = trace.op(*task.op).communication;
    return communication ? communication->splits : 0;
  };
  std::vector<Task>& tasks = schedule.tasks;
  if (std::none_of(tasks.begin(), tasks.end(), [&](const Task& t) { return pieces_of(t) > 0; })) return;
  // Old task id -> new id of the task that ends what it did, as known when a later task is
  // reached (every wait is on an earlier task: `tasks` order is a one-at-a-time execution). A
  // side task between the GEMM and its collective thus waits for the GEMM's first piece.
  std::vector<TaskId> end_of(tasks.size());
  std::vector<Task> out;
  out.reserve(tasks.size() + 8);
  constexpr TaskId kNoTask = std::numeric_limits<TaskId>::max();
  TaskId last_compute = kNoTask;  // old id of the latest compute-stream task
  for (TaskId t = 0; t < tasks.size(); ++t) {
    Task task = std::move(tasks[t]);
    for (TaskId& a : task.after) {
      if (a >= t) throw std::logic_error(task.name + ": waits for a task after it");
      a = end_of[a];
    }
    const std::int64_t n = pieces_of(task);
    if (n == 0) {
      if (task.stream == Stream::compute) last_compute = t;
      end_of[t] = out.size();
      out.push_back(std::move(task));
      continue;
    }
    if (last_compute == kNoTask || *task.op == 0 || out[end_of[last_compute]].op != *task.op - 1) {
      throw std::logic_error(task.name + ": a split reduce_scatter without the op that makes its input on the compute stream before it");
    }
    const double share = static_cast<double>(n - 1) / static_cast<double>(n);
    // The GEMM's other pieces: a compute task of their own right before the collective (no
    // compute-stream task came between: the collective follows the GEMM's task).
    Task& head = out[end_of[last_compute]];
    Task rest = head;
    rest.name += " (pieces 2-" + std::to_string(n) + ")";
    rest.seconds = head.seconds * share;
    rest.host_seconds = 0;  // one launch
    rest.uses.insert(rest.uses.end(), rest.creates.begin(), rest.creates.end());
    rest.creates.clear();
    rest.after.clear();  // the compute stream's order: after the first piece
    head.seconds -= rest.seconds;
    const TaskId rest_id = out.size();
    out.push_back(std::move(rest));
    end_of[last_compute] = rest_id;
    last_compute = kNoTask;  // nothing later may split the GEMM again
    // The reduction of the first n - 1 pieces waits for the first piece (its waits, remapped
    // above, name the head), the last piece's for the rest; what waits for the collective waits
    // for the last piece.
    Task tail = task;
    task.bytes = static_cast<std::int64_t>(static_cast<double>(task.bytes) * share);
    tail.bytes -= task.bytes;
    tail.name += " (last piece)";
    tail.uses.insert(tail.uses.end(), tail.creates.begin(), tail.creates.end());
    tail.creates.clear();
    tail.after = {rest_id};
    out.push_back(std::move(task));
    end_of[t] = out.size();
    out.push_back(std::move(tail));
  }
  tasks = std::move(out);
}

// Builds the schedule for a fixed plan. Compute tasks first (trace ops in recorded order with
// recomputations inserted before the backward ops that need them), then the copy and codec
// tasks, which are timed relative to compute positions, are slotted in after the compute
// task they wait for, so that `tasks` order is itself a valid one-at-a-time execution.
class Assembler {
 public:
  Assembler(const Analysis& a, const StrategySpec& spec, const StorageActions& plan) : a_(a), spec_(spec), plan_(plan) {}

  Built run(bool names) {
    names_ = names;
    const Trace& trace = *a_.trace;
    const std::size_t tensor_count = trace.tensors().size();
    original_.assign(tensor_count, kNone);
    restored_.assign(tensor_count, kNone);
    compressed_.assign(tensor_count, kNone);
    remat_.assign(tensor_count, kNone);
    consumers_.assign(tensor_count, {});
    op_task_.assign(trace.ops().size(), kNone);
    plan_stash();

    for (TensorIndex s : a_.storages) {
      const auto& tensor = trace.tensor(s);
      Buffer b;
      if (names_) b.name = tensor.name;
      b.bytes = tensor.bytes();
      b.role = memory_role_of(tensor.role);
      b.resident = !a_.info[s].written;  // held by its owner across iterations
      b.held_to_end = tensor.role == TensorRole::gradient && traces::gradients_held_to_end(trace);
      if (held(s)) b.role = MemoryRole::activation;  // held for the backward pass by a selective checkpoint
      b.tensor = s;
      original_[s] = add_buffer(std::move(b));
      if (action_of(s) == Action::offload) {
        restored_[s] = add_buffer(copy_buffer(s, MemoryRole::prefetch, tensor.bytes(), " (prefetched)"));
      } else if (action_of(s) == Action::compress) {
        const auto& c = *spec_.rules[plan_.rule[s]].compress();
        const traces::ValueFeatures& values = storage_values(trace, s, a_.info[s]);
        check_ranges(trace, spec_, plan_.rule[s], s, values);
        const StorageBound bound = storage_bound(trace, a_.info[s], spec_, plan_.rule[s], s, values);
        const double ratio = compress_ratio(c, storage_class(trace, a_.info[s]), tensor.dtype, bound.relative, values, bound.positive_mask);
        const std::int64_t bytes = compressed_bytes(spec_, plan_.rule[s], tensor.name, tensor.bytes(), ratio);
        compressed_[s] = add_buffer(copy_buffer(s, MemoryRole::compressed, bytes, " (compressed)"));
        restored_[s] = add_buffer(copy_buffer(s, MemoryRole::activation, tensor.bytes(), " (decompressed)"));
      }
    }

    std::vector<bool> allocated(tensor_count, false);
    std::optional<std::size_t> clamp;  // compute position of the op just before the backward pass
    for (OpIndex o = 0; o < trace.ops().size(); ++o) {
      const auto& op = trace.op(o);
      const bool forward = op.phase == Phase::forward;
      if (!forward) {
        if (!clamp && !compute_.empty()) clamp = compute_.size() - 1;
        std::vector<TensorIndex> needed;
        for (TensorIndex t : op.inputs) {
          const TensorIndex s = trace.storage_of(t);
          if (action_of(s) == Action::drop && remat_[s] == kNone) needed.push_back(s);
        }
        if (!needed.empty()) rematerialise(needed);
      }
      Task task;
      if (names_) task.name = op.name;
      task.kind = TaskKind::op;
      task.op = o;
      task.seconds = a_.op_seconds[o];
      task.watts = a_.op_watts[o];
      if (op.communication) make_communication(trace, op, task);
      for (TensorIndex t : op.inputs) task.uses.push_back(read_buffer(trace.storage_of(t), forward));
      for (TensorIndex t : op.outputs) {
        const TensorIndex s = trace.storage_of(t);
        task.uses.push_back(original_[s]);
        if (!allocated[s]) {
          allocated[s] = true;
          task.creates.push_back(original_[s]);
        }
      }
      sorted_unique(task.uses);
      op_task_[o] = compute_.size();
      compute_.push_back(std::move(task));
      compute_waits_.emplace_back();
    }

    // Selective checkpoints' holds: the backward op a storage is held to uses it.
    for (TensorIndex s : a_.storages) {
      if (!held(s)) continue;
      Task& task = compute_[op_task_[*plan_.held_until[s]]];
      task.uses.push_back(original_[s]);
      sorted_unique(task.uses);
    }

    add_side_tasks(clamp.value_or(0));
    return emit();
  }

 private:
  static constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();

  // A communication op of the trace (tensor parallelism's all-reduces, all-gathers and
  // reduce-scatters, traces/FORMAT.md "Communication") as a collective task over its group, on
  // the compute stream where the op is: the kernel that follows needs its result (Megatron-LM's
  // forward collectives are synchronous). One the trace overlaps with the ops after it
  // (traces::Communication::overlap: Megatron's backward collectives behind the weight- and
  // input-gradient GEMMs, which the zoo's traces emit as ops of their own) runs on the tensor
  // stream beside them instead (emit() gives it its waits). The size as nccl-tests counts it
  // (models::CollectiveKind).
  static void make_communication(const traces::Trace& trace, const traces::Op& op, Task& task) {
    const auto bytes_of = [&](const std::vector<TensorIndex>& tensors) {
      std::int64_t total = 0;
      for (TensorIndex t : tensors) total += trace.tensor(t).bytes();
      return total;
    };
    task.seconds = 0;
    task.over = op.communication->group;
    if (op.communication->overlap > 0 || op.communication->splits > 0) task.stream = Stream::tensor;
    switch (op.communication->kind) {
      case traces::CommunicationKind::all_reduce:
        task.kind = TaskKind::collective;
        task.collective = CollectiveKind::all_reduce;
        task.bytes = bytes_of(op.inputs);
        return;
      case traces::CommunicationKind::reduce_scatter:
        task.kind = TaskKind::collective;
        task.collective = CollectiveKind::reduce_scatter;
        task.bytes = bytes_of(op.inputs);  // the whole input; each rank keeps 1/p
        return;
      case traces::CommunicationKind::all_gather:
        task.kind = TaskKind::collective;
        task.collective = CollectiveKind::all_gather;
        task.bytes = bytes_of(op.outputs);  // the whole output; each rank gives 1/p
        if (op.communication->ring > 0) {
          // Context parallelism's ring exchange (traces::Communication::ring): the outputs are the
          // receive buffers, one block each, and every block passes ring - 1 hops -- an
          // all_gather's traffic whose whole is ring blocks -- on the context stream beside the
          // attention op after it (emit() gives it its waits).
          task.bytes = bytes_of(op.outputs) * op.communication->ring;
          task.stream = Stream::context;
        }
        return;
      case traces::CommunicationKind::send:
      case traces::CommunicationKind::recv: {
        // A pipeline stage's transfer on NCCL's point-to-point stream; apply_pipeline_stage
        // names its peer and micro-batch (models/pipeline_parallel.hpp).
        const bool send = op.communication->kind == traces::CommunicationKind::send;
        task.kind = send ? TaskKind::send : TaskKind::recv;
        task.stream = Stream::p2p;
        task.bytes = bytes_of(send ? op.inputs : op.outputs);
        task.message = PipelineMessage{};
        task.message->gradient = op.phase != traces::Phase::forward;
        return;
      }
      case traces::CommunicationKind::all_to_all:
        // Expert parallelism's token dispatch and combine (traces/zoo/README.md, "Expert
        // parallelism"): the larger of what this rank sends and what it receives -- the two differ
        // on the rank whose experts are busiest, which the trace describes and which gates the
        // exchange -- each rank sending 1/p of it to every rank of the group.
        task.kind = TaskKind::collective;
        task.collective = CollectiveKind::all_to_all;
        task.bytes = std::max(bytes_of(op.inputs), bytes_of(op.outputs));
        return;
    }
  }

  struct SideTask {
    Task task;
    std::size_t slot = 0;   // emitted right after this compute task
    int group = 0;          // order within a slot: offload, compress, prefetch, decompress
    std::size_t key = 0;    // order within a group
    TensorIndex storage = 0;
    std::vector<std::size_t> after_compute;
    std::vector<std::size_t> after_side;
  };

  // The plan's action for storage `s`, but keep for the offloaded tensors that torchtune's
  // stash never releases (plan_stash).
  Action action_of(TensorIndex s) const {
    if (!stash_kept_.empty() && stash_kept_[s]) return Action::keep;
    return plan_.action[s];
  }

  // torchtune's OffloadActivations (pytorch/torchtune@05cda5e9, training/_activation_offloading.py,
  // pack_tensor): each packed tensor takes the next id; packing an offloaded tensor first makes
  // the compute stream wait for the copy out of every stashed tensor whose id is at least
  // max_fwd_stash_size smaller and drops it from the stash. The trace does not record autograd's
  // packs, so the ids are the saved activations in the order of their last writers (the op that
  // makes a tensor is where it is saved; parameters and the tensors saved twice, which torchtune
  // counts too, are not counted). An offloaded tensor that no later one releases is still on the
  // GPU when the backward pass unpacks it (unpack_tensor_with_streams: `if unpack_tensor_id in
  // self.fwd_stash`) and is used from there: kept, with no copy back. Its copy out, which
  // torchtune has already issued, is left out.
  void plan_stash() {
    const Trace& trace = *a_.trace;
    const auto stash_of = [&](TensorIndex s) -> std::optional<int> {
      if (plan_.action[s] != Action::offload) return std::nullopt;
      return spec_.rules[plan_.rule[s]].offload()->stash;
    };
    std::vector<TensorIndex> saved;
    for (TensorIndex s : a_.storages) {
      if (a_.info[s].saved && !a_.info[s].writers.empty()) saved.push_back(s);
    }
    if (std::none_of(saved.begin(), saved.end(), [&](TensorIndex s) { return stash_of(s).has_value(); })) return;
    std::stable_sort(saved.begin(), saved.end(), [&](TensorIndex x, TensorIndex y) { return a_.info[x].writers.back() < a_.info[y].writers.back(); });
    stash_kept_.assign(trace.tensors().size(), false);
    stash_release_.assign(trace.tensors().size(), std::nullopt);
    for (std::size_t k = 0; k < saved.size(); ++k) {
      const std::optional<int> n = stash_of(saved[k]);
      if (!n) continue;
      for (std::size_t j = k + static_cast<std::size_t>(*n); j < saved.size(); ++j) {
        if (stash_of(saved[j])) {
          stash_release_[saved[k]] = a_.info[saved[j]].writers.back();
          break;
        }
      }
      if (!stash_release_[saved[k]]) stash_kept_[saved[k]] = true;
    }
  }

  BufferId add_buffer(Buffer b) {
    schedule_.buffers.push_back(std::move(b));
    return schedule_.buffers.size() - 1;
  }

  // Held by a selective checkpoint (and still kept: a budget rule may not have dropped it).
  bool held(TensorIndex s) const {
    return !plan_.held_until.empty() && plan_.held_until[s].has_value() && action_of(s) == Action::keep;
  }

  Buffer copy_buffer(TensorIndex s, MemoryRole role, std::int64_t bytes, const char* suffix) const {
    Buffer b;
    if (names_) b.name = a_.trace->tensor(s).name + suffix;
    b.bytes = bytes;
    b.role = role;
    b.tensor = s;
    return b;
  }

  // The buffer a compute task about to be appended reads for storage `s`.
  BufferId read_buffer(TensorIndex s, bool forward) {
    if (forward) return original_[s];
    switch (action_of(s)) {
      case Action::drop:
        if (remat_[s] == kNone) throw std::logic_error("strategy: dropped storage read before it was rebuilt");
        return remat_[s];
      case Action::offload:
      case Action::compress:
        consumers_[s].push_back(compute_.size());
        return restored_[s];
      case Action::keep:
        break;
    }
    return original_[s];
  }

  // Whether storage `s` can be read in the backward pass without replaying its producers.
  bool available(TensorIndex s) const {
    const StorageInfo& info = a_.info[s];
    if (!info.written) return true;  // resident
    if (plan_.pinned[s]) return true;  // kept by a checkpoints rule: recomputation starts from it
    if (held(s)) return true;          // a selective checkpoint's cached output or input
    if (remat_[s] != kNone) return true;
    switch (action_of(s)) {
      case Action::offload:
      case Action::compress: return true;
      case Action::drop: return false;
      case Action::keep: break;
    }
    // A kept storage that the backward pass reads lives on; reading it later extends it.
    // Anything read only in the forward pass (unsaved outputs) has been freed.
    return info.first_backward_read.has_value();
  }

  void collect(TensorIndex s, std::set<OpIndex>& replay) {
    if (available(s) || visiting_[s] == visit_) return;
    visiting_[s] = visit_;
    const Trace& trace = *a_.trace;
    for (OpIndex w : a_.info[s].writers) {
      if (!is_forward(trace, w) || !replay.insert(w).second) continue;
      for (TensorIndex t : trace.op(w).inputs) {
        const TensorIndex in = trace.storage_of(t);
        if (in != s) collect(in, replay);
      }
    }
  }

  // Replays, in forward order, the forward ops that rebuild `needed` from available storages.
  void rematerialise(const std::vector<TensorIndex>& needed) {
    const Trace& trace = *a_.trace;
    std::set<OpIndex> replay;
    // A new visit mark per replay (one array for all: clearing one per replay would cost the
    // number of tensors each time).
    if (visiting_.empty()) visiting_.assign(trace.tensors().size(), 0);
    ++visit_;
    for (TensorIndex s : needed) collect(s, replay);

    std::map<TensorIndex, BufferId> fresh;  // storages written in this replay -> new buffer
    for (OpIndex w : replay) {
      const auto& op = trace.op(w);
      Task task;
      if (names_) task.name = op.name + " (recompute)";
      task.kind = TaskKind::recompute;
      task.op = w;
      task.seconds = a_.op_seconds[w];
      task.watts = a_.op_watts[w];
      // Recomputing a layer repeats its forward collectives (Megatron's full recomputation does).
      if (op.communication) make_communication(trace, op, task);
      recompute_seconds_ += task.seconds;
      recompute_exact_.add(task.seconds);
      ++recompute_tasks_;
      for (TensorIndex t : op.inputs) {
        const TensorIndex s = trace.storage_of(t);
        if (const auto it = fresh.find(s); it != fresh.end()) {
          task.uses.push_back(it->second);
        } else if (remat_[s] != kNone) {
          task.uses.push_back(remat_[s]);
        } else if (available(s)) {
          task.uses.push_back(read_buffer(s, false));  // the restored copy for offload/compress
        } else {
          throw std::logic_error("strategy: recomputation reads a storage that is neither available nor rebuilt");
        }
      }
      for (TensorIndex t : op.outputs) {
        const TensorIndex s = trace.storage_of(t);
        auto it = fresh.find(s);
        if (it == fresh.end()) {
          // Kept beyond this replay only when it is a saved activation that was lost and
          // every op writing it is replayed here (so the copy holds the final content).
          const StorageInfo& info = a_.info[s];
          const bool complete = std::all_of(info.writers.begin(), info.writers.end(),
                                            [&](OpIndex x) { return replay.count(x) > 0; });
          const bool keep = complete && info.saved && !available(s);
          Buffer b;
          if (names_) b.name = trace.tensor(s).name + (keep ? " (recomputed)" : " (recompute scratch)");
          b.bytes = trace.tensor(s).bytes();
          b.role = keep ? MemoryRole::activation : MemoryRole::temporary;
          b.tensor = s;
          it = fresh.emplace(s, add_buffer(std::move(b))).first;
          task.creates.push_back(it->second);
          if (keep) remat_[s] = it->second;
        }
        task.uses.push_back(it->second);
      }
      sorted_unique(task.uses);
      compute_.push_back(std::move(task));
      compute_waits_.emplace_back();
    }
    for (TensorIndex s : needed) {
      if (remat_[s] == kNone) throw std::logic_error("strategy: recomputation did not rebuild a dropped storage");
    }
  }

  void add_side_tasks(std::size_t clamp) {
    const Trace& trace = *a_.trace;
    for (TensorIndex s : a_.storages) {
      const Action action = action_of(s);
      if (action != Action::offload && action != Action::compress) continue;
      auto& consumers = consumers_[s];
      if (consumers.empty()) continue;  // a pinned checkpoint input no replay reads (a storage with a gap has a reader)
      sorted_unique(consumers);
      const StorageInfo& info = a_.info[s];
      const std::size_t last_forward = op_task_[*info.last_forward_use];
      const std::size_t first_consumer = consumers.front();
      const std::int64_t bytes = trace.tensor(s).bytes();
      const std::string& name = trace.tensor(s).name;
      const auto& rule = spec_.rules[plan_.rule[s]];

      SideTask out;
      out.storage = s;
      out.task.tensor = s;
      const auto start_out_after = [&out](std::size_t compute_task) {
        out.slot = compute_task;
        out.key = compute_task;
        out.after_compute = {compute_task};
      };
      start_out_after(last_forward);
      // Where the tensor is saved (save_on_cpu, vDNN's synchronous mode, torchtune's stash).
      const std::size_t last_writer = op_task_[info.writers.back()];
      SideTask in;
      in.storage = s;
      in.key = first_consumer;
      in.task.tensor = s;
      in.task.creates = {restored_[s]};
      in.after_side = {side_.size()};  // waits for `out`, pushed just below
      if (action == Action::offload) {
        out.group = 0;
        out.task.kind = TaskKind::offload;
        out.task.stream = Stream::d2h;
        out.task.bytes = bytes;
        out.task.uses = {original_[s]};
        if (names_) out.task.name = "offload " + name;
        // Start the copy back when the compute stream starts the op `lookahead` positions
        // before the first consumer (= once the task before that one ends), but not before the
        // backward pass (nor before the copy out was issued). Lookahead 1 overlaps the copy
        // with the op just before the consumer, as vDNN prefetches during the previous layer.
        const auto lookahead = static_cast<std::size_t>(rule.offload()->lookahead);
        std::size_t trigger = first_consumer > lookahead ? first_consumer - lookahead - 1 : 0;
        trigger = std::max({trigger, clamp, last_forward});
        in.group = 2;
        in.slot = trigger;
        in.after_compute = {trigger};
        in.task.kind = TaskKind::prefetch;
        in.task.stream = Stream::h2d;
        in.task.bytes = bytes;
        if (names_) in.task.name = "prefetch " + name;
        const OffloadAction& o = *rule.offload();
        if (o.stream == OffloadAction::Stream::compute) {
          // save_on_cpu: the copy out is issued when the tensor is saved, on the compute
          // stream, so it runs right after its last writer and holds compute up; the copy back
          // runs on the compute stream just before the first backward use.
          start_out_after(last_writer);
          out.task.stream = Stream::compute;
          // The copy out is a blocking copy_ even into pinned memory (save_on_cpu's pack_to_cpu:
          // `packed.copy_(tensor)`, non_blocking left False, torch/autograd/graph.py), so the
          // launching thread waits for it, and for the compute stream before it; the copy back
          // is `tensor.to(device, non_blocking=pin_memory)`: blocking only from pageable memory.
          out.task.blocks_host = true;
          in.slot = std::max(first_consumer - 1, last_forward);
          in.after_compute = {in.slot};
          in.task.stream = Stream::compute;
        }
        if (o.host_memory == OffloadAction::HostMemory::pageable) {
          const double rate = a_.time_model->platform().host_link.pageable_bandwidth;
          if (!(rate > 0)) {
            throw InputError(rule_context(spec_, plan_.rule[s]) + "offload host_memory pageable needs the platform's "
                             "host_link.pageable_bandwidth, which platform '" + a_.time_model->platform().name +
                             "' does not give; expected a platform that gives it (comptrain calibrate on the GPU measures it) or host_memory: pinned");
          }
          out.task.pageable = true;
          in.task.pageable = true;
          out.task.blocks_host = true;
          in.task.blocks_host = true;
        }
      } else {
        const auto& c = *rule.compress();
        out.group = 1;
        out.task.kind = TaskKind::compress;
        out.task.stream = Stream::codec;
        out.task.seconds = codec_seconds(spec_, plan_.rule[s], c, true, name, bytes);
        out.task.creates = {compressed_[s]};
        out.task.uses = {original_[s]};
        if (names_) out.task.name = "compress " + name;
        // Decompress just in time: once the compute task before the first consumer ends.
        in.group = 3;
        in.slot = first_consumer - 1;
        in.after_compute = {first_consumer - 1};
        in.task.kind = TaskKind::decompress;
        in.task.stream = Stream::codec;
        in.task.seconds = codec_seconds(spec_, plan_.rule[s], c, false, name, bytes);
        in.task.uses = {compressed_[s]};
        if (names_) in.task.name = "decompress " + name;
      }
      const std::size_t out_index = side_.size();
      if (action == Action::offload && rule.offload()->synchronous && rule.offload()->stream == OffloadAction::Stream::copy) {
        // vDNN: copy as soon as the last writer is done (overlapping the readers), and hold the
        // compute stream before the op after the last forward use until the copy has ended.
        start_out_after(last_writer);
        if (last_forward + 1 < compute_.size()) compute_waits_[last_forward + 1].push_back(out_index);
      }
      if (action == Action::offload && rule.offload()->stash) {
        // torchtune: the copy out starts when the tensor is saved (after its last writer, once
        // the side stream has waited for the compute stream); the stash holds the GPU tensor
        // through the op that saves the tensor releasing it, after which the compute stream
        // waits for the copy out.
        start_out_after(last_writer);
        const std::size_t release = op_task_[*stash_release_[s]];
        compute_[release].uses.push_back(original_[s]);
        sorted_unique(compute_[release].uses);
        if (release + 1 < compute_.size()) compute_waits_[release + 1].push_back(out_index);
      }
      if (action == Action::offload && rule.offload()->free_by) {
        const std::size_t waiting = last_forward + static_cast<std::size_t>(*rule.offload()->free_by);
        if (waiting < compute_.size()) compute_waits_[waiting].push_back(out_index);
      }
      side_.push_back(std::move(out));
      const std::size_t in_index = side_.size();
      side_.push_back(std::move(in));
      for (std::size_t c : consumers) compute_waits_[c].push_back(in_index);
    }
  }

  Built emit() {
    std::vector<std::size_t> side_order(side_.size());
    std::iota(side_order.begin(), side_order.end(), std::size_t{0});
    std::sort(side_order.begin(), side_order.end(), [&](std::size_t x, std::size_t y) {
      const SideTask& p = side_[x];
      const SideTask& q = side_[y];
      return std::tie(p.slot, p.group, p.key, p.storage) < std::tie(q.slot, q.group, q.key, q.storage);
    });
    std::vector<TaskId> compute_id(compute_.size());
    std::vector<TaskId> side_id(side_.size());
    std::vector<std::pair<bool, std::size_t>> sequence;  // (is side task, index)
    sequence.reserve(compute_.size() + side_.size());
    std::size_t next_side = 0;
    for (std::size_t c = 0; c < compute_.size(); ++c) {
      compute_id[c] = sequence.size();
      sequence.emplace_back(false, c);
      while (next_side < side_order.size() && side_[side_order[next_side]].slot == c) {
        side_id[side_order[next_side]] = sequence.size();
        sequence.emplace_back(true, side_order[next_side]);
        ++next_side;
      }
    }
    // A pipeline transfer among the compute tasks runs on the p2p stream: a send waits for the
    // compute task before it (which made what it sends), and the compute task after a recv waits
    // for it (it reads what arrives).
    std::vector<bool> p2p(compute_.size(), false);
    for (std::size_t c = 0; c < compute_.size(); ++c) p2p[c] = compute_[c].stream == Stream::p2p;
    std::vector<std::vector<TaskId>> p2p_after(compute_.size());
    for (std::size_t c = 0; c < compute_.size(); ++c) {
      if (!p2p[c]) continue;
      if (compute_[c].kind == TaskKind::send) {
        for (std::size_t j = c; j-- > 0;) {
          if (!p2p[j]) {
            p2p_after[c].push_back(compute_id[j]);
            break;
          }
        }
      } else {
        for (std::size_t j = c + 1; j < compute_.size(); ++j) {
          if (!p2p[j]) {
            p2p_after[j].push_back(compute_id[c]);
            break;
          }
        }
      }
    }
    // A ring exchange on the context stream, or a collective the trace overlaps with the ops
    // after it on the tensor stream (make_communication), starts when the compute task before it
    // has ended (it sends what that task left: the K and V, an input gradient) and runs beside
    // the compute tasks after it (a ring: the attention kernel, which works on the blocks in hand
    // while the next ones move; an overlapped collective: its `overlap` ops, the GEMMs it hides
    // behind); the compute task after those waits for its end. Its time beyond theirs is thus
    // exposed, the rest hidden (sim/metrics/communication_time.hpp).
    for (std::size_t c = 0; c < compute_.size(); ++c) {
      if (compute_[c].stream != Stream::context && compute_[c].stream != Stream::tensor) continue;
      const traces::Communication& communication = *a_.trace->op(*compute_[c].op).communication;
      const std::int64_t beside = communication.ring > 0 ? 1 : communication.overlap;
      std::size_t before = kNone;
      for (std::size_t j = c; j-- > 0;) {
        if (compute_[j].stream == Stream::compute) {
          p2p_after[c].push_back(compute_id[j]);
          before = j;
          break;
        }
      }
      std::int64_t seen = 0;
      std::vector<BufferId> read_beside;  // buffers of the collective that the ops beside it read
      for (std::size_t j = c + 1; j < compute_.size(); ++j) {
        if (compute_[j].stream != Stream::compute) continue;
        if (++seen == beside + 1) {
          p2p_after[j].push_back(compute_id[c]);
          break;
        }
        for (BufferId b : compute_[c].creates) {
          const auto& uses = compute_[j].uses;
          if (std::find(uses.begin(), uses.end(), b) != uses.end()) read_beside.push_back(b);
        }
      }
      // Transformer Engine's ring exchange writes the gathered tensor into a buffer the GEMM beside
      // it reads block by block as the blocks arrive (its Userbuffers, allocated beforehand): the
      // buffer exists before either starts, allocated here with the compute task before them,
      // which both wait for.
      if (!read_beside.empty() && before != kNone) {
        sorted_unique(read_beside);
        std::erase_if(compute_[c].creates, [&](BufferId b) { return std::binary_search(read_beside.begin(), read_beside.end(), b); });
        compute_[c].uses.insert(compute_[c].uses.end(), read_beside.begin(), read_beside.end());
        sorted_unique(compute_[c].uses);
        compute_[before].creates.insert(compute_[before].creates.end(), read_beside.begin(), read_beside.end());
      }
    }
    schedule_.tasks.reserve(sequence.size());
    for (const auto& [is_side, index] : sequence) {
      if (is_side) {
        SideTask& side = side_[index];
        for (std::size_t c : side.after_compute) side.task.after.push_back(compute_id[c]);
        for (std::size_t s : side.after_side) side.task.after.push_back(side_id[s]);
        schedule_.tasks.push_back(std::move(side.task));
      } else {
        Task& task = compute_[index];
        for (std::size_t s : compute_waits_[index]) task.after.push_back(side_id[s]);
        task.after.insert(task.after.end(), p2p_after[index].begin(), p2p_after[index].end());
        sorted_unique(task.after);
        schedule_.tasks.push_back(std::move(task));
      }
    }
    split_pipelined_reductions(schedule_, *a_.trace);
    // The last line of defence (the op-time model and codec_seconds check at the source): the
    // simulator gets finite, non-negative durations and payloads only, or an InputError.
    for (TaskId t = 0; t < schedule_.tasks.size(); ++t) {
      const Task& task = schedule_.tasks[t];
      if (std::isfinite(task.seconds) && task.seconds >= 0 && task.bytes >= 0) continue;
      const std::string what = task.op ? "op " + std::to_string(*task.op) + " (" + a_.trace->op(*task.op).name + ")"
                                       : "task " + std::to_string(t) + (task.name.empty() ? "" : " (" + task.name + ")");
      throw InputError("strategy '" + spec_.name + "': " + what + " would take " + short_number(task.seconds) + " s and move " +
                       std::to_string(task.bytes) + " B; expected a finite time >= 0 and a payload >= 0");
    }
    Built built;
    built.schedule = std::move(schedule_);
    built.recompute_seconds = recompute_seconds_;
    built.recompute_exact = recompute_exact_.value();
    built.recompute_tasks = recompute_tasks_;
    return built;
  }

  const Analysis& a_;
  const StrategySpec& spec_;
  const StorageActions& plan_;
  bool names_ = true;
  Schedule schedule_;
  std::vector<BufferId> original_, restored_, compressed_, remat_;
  std::vector<std::vector<std::size_t>> consumers_;  // compute positions reading the restored copy
  std::vector<std::size_t> op_task_;
  std::vector<bool> stash_kept_;                              // plan_stash; empty: no stash rule
  std::vector<std::optional<traces::OpIndex>> stash_release_;  // plan_stash: the op that releases it
  std::vector<Task> compute_;
  std::vector<std::vector<std::size_t>> compute_waits_;  // side tasks each compute task waits for
  std::vector<SideTask> side_;
  std::vector<std::size_t> visiting_;  // == visit_: visited by the current replay's walk
  std::size_t visit_ = 0;
  double recompute_seconds_ = 0;
  ExactSum recompute_exact_;
  std::size_t recompute_tasks_ = 0;
};

}  // namespace

Built assemble(const Analysis& a, const StrategySpec& spec, const StorageActions& plan, bool names) {
  return Assembler(a, spec, plan).run(names);
}

// The full measure of a plan: build the schedule and replay it sequentially.
Evaluation evaluate(const Analysis& a, const StrategySpec& spec, const StorageActions& plan) {
  const Built built = assemble(a, spec, plan, false);
  return {detail::sequential_peak_bytes(built.schedule, detail::saved_activation_roles()), built.recompute_exact, built.recompute_tasks,
          built.recompute_seconds};
}

}  // namespace comptrain::models::strategy_detail

#include "comptrain/models/pipeline_parallel.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "micro_step.hpp"

namespace comptrain::models {
namespace {

using Kind = PipelineStep::Kind;

constexpr TaskId kNoTask = static_cast<TaskId>(-1);

bool is_p2p(const Task& task) { return task.kind == TaskKind::send || task.kind == TaskKind::recv; }
bool runs_op(const Task& task) { return task.kind == TaskKind::op || task.kind == TaskKind::recompute; }

// Whether a task belongs to the backward pass (the header lists the rule and why).
bool is_backward_task(const Task& task, const traces::Trace& trace) {
  switch (task.kind) {
    case TaskKind::op: return task.op && trace.op(*task.op).phase == traces::Phase::backward;
    case TaskKind::recompute:
    case TaskKind::prefetch:
    case TaskKind::decompress: return true;
    case TaskKind::send:
    case TaskKind::recv: return task.message && task.message->gradient;
    case TaskKind::offload:
    case TaskKind::compress:
    case TaskKind::collective:
    case TaskKind::host_compute:
    case TaskKind::framework: return false;  // added by data parallelism, after the pipeline's transform
  }
  return false;
}

// One chunk schedule cut into its forward part, backward part and optimizer step (old task ids,
// in schedule order), with the buffers its micro-batches share.
struct ChunkParts {
  std::vector<TaskId> forward;
  std::vector<TaskId> backward;
  std::vector<TaskId> optimizer;
  std::vector<bool> is_step;
  std::vector<bool> shared;  // per buffer
  bool has_own_p2p = false;  // the chunk schedule sends and receives itself
  // The first and last op (or recompute) task of each part: where the added transfers attach.
  TaskId first_forward_op = kNoTask;
  TaskId last_forward_op = kNoTask;
  TaskId first_backward_op = kNoTask;
  TaskId last_backward_op = kNoTask;
};

ChunkParts cut_chunk(const Schedule& chunk, const traces::Trace& trace, int k) {
  ChunkParts parts;
  parts.is_step = transform_detail::optimizer_step_tasks(chunk, trace, std::nullopt);
  parts.shared = transform_detail::shared_across_micro_steps(chunk, parts.is_step);
  bool in_backward = false;
  for (TaskId t = 0; t < chunk.tasks.size(); ++t) {
    const Task& task = chunk.tasks[t];
    if (parts.is_step[t]) {
      parts.optimizer.push_back(t);
      continue;
    }
    if (is_p2p(task)) {
      if (!task.message) {
        throw std::invalid_argument(fmt::format("pipeline stage: chunk {}'s task {} ({}) is a {} without a message", k, t, task.name,
                                                to_string(task.kind)));
      }
      parts.has_own_p2p = true;
    }
    in_backward = in_backward || is_backward_task(task, trace);
    (in_backward ? parts.backward : parts.forward).push_back(t);
    if (runs_op(task)) {
      TaskId& first = in_backward ? parts.first_backward_op : parts.first_forward_op;
      if (first == kNoTask) first = t;
      (in_backward ? parts.last_backward_op : parts.last_forward_op) = t;
    }
  }
  if (parts.first_forward_op == kNoTask) throw std::invalid_argument(fmt::format("pipeline stage: chunk {}'s schedule has no forward op", k));
  if (parts.first_backward_op == kNoTask) {
    throw std::invalid_argument(fmt::format("pipeline stage: chunk {}'s schedule has no backward op", k));
  }
  // The forward part of a micro-batch runs long before its backward part under a pipeline
  // schedule, so nothing of the forward may wait for the backward; nor may a transfer of one pass
  // sit in the other.
  std::vector<bool> backward(chunk.tasks.size(), false);
  for (TaskId t : parts.backward) backward[t] = true;
  for (TaskId t : parts.forward) {
    const Task& task = chunk.tasks[t];
    if (std::any_of(task.after.begin(), task.after.end(), [&](TaskId a) { return backward[a]; })) {
      throw std::logic_error(fmt::format("pipeline stage: chunk {}'s forward task {} ({}) waits for a task of the backward pass", k, t, task.name));
    }
  }
  for (TaskId t : parts.backward) {
    const Task& task = chunk.tasks[t];
    if (is_p2p(task) && !task.message->gradient) {
      throw std::invalid_argument(fmt::format("pipeline stage: chunk {}'s task {} ({}) is a forward {} after the backward pass began", k, t,
                                              task.name, to_string(task.kind)));
    }
  }
  return parts;
}

void check_spec(const std::vector<Schedule>& chunks, const std::vector<const traces::Trace*>& traces, const PipelineStageSpec& spec) {
  if (spec.stages < 1) throw std::invalid_argument(fmt::format("pipeline stage: stages is {}; expected >= 1", spec.stages));
  if (spec.virtual_stages < 1) {
    throw std::invalid_argument(fmt::format("pipeline stage: virtual_stages is {}; expected >= 1", spec.virtual_stages));
  }
  if (spec.rank < 0 || spec.rank >= spec.stages) {
    throw std::invalid_argument(fmt::format("pipeline stage: rank is {}; expected 0 to {}", spec.rank, spec.stages - 1));
  }
  const auto v = static_cast<std::size_t>(spec.virtual_stages);
  if (chunks.size() != v) {
    throw std::invalid_argument(fmt::format("pipeline stage: {} chunk schedules for {} virtual stages per rank", chunks.size(), v));
  }
  if (traces.size() != v) throw std::invalid_argument(fmt::format("pipeline stage: {} chunk traces for {} virtual stages per rank", traces.size(), v));
  for (std::size_t k = 0; k < v; ++k) {
    if (traces[k] == nullptr) throw std::invalid_argument(fmt::format("pipeline stage: chunk {}'s trace is null", k));
  }
  if (spec.boundary_bytes < 0) throw std::invalid_argument(fmt::format("pipeline stage: boundary_bytes is {}; expected >= 0", spec.boundary_bytes));

  // Per (micro-batch, chunk): the position of each of its steps in the order.
  struct Seen {
    std::optional<std::size_t> forward, backward, backward_input, backward_weight;
  };
  std::map<std::pair<int, int>, Seen> seen;
  std::vector<bool> chunk_runs(v, false);
  for (std::size_t i = 0; i < spec.order.size(); ++i) {
    const PipelineStep& s = spec.order[i];
    if (s.chunk < 0 || static_cast<std::size_t>(s.chunk) >= v) {
      throw std::invalid_argument(fmt::format("pipeline stage: order step {} names chunk {}; there are {} chunks", i, s.chunk, v));
    }
    if (s.micro_batch < 0) throw std::invalid_argument(fmt::format("pipeline stage: order step {} names micro-batch {}", i, s.micro_batch));
    chunk_runs[static_cast<std::size_t>(s.chunk)] = true;
    Seen& of = seen[{s.micro_batch, s.chunk}];
    std::optional<std::size_t>* slot = nullptr;
    const char* name = "";
    switch (s.kind) {
      case Kind::forward:
        slot = &of.forward;
        name = "forward";
        break;
      case Kind::backward:
        slot = &of.backward;
        name = "backward";
        break;
      case Kind::backward_input:
        slot = &of.backward_input;
        name = "backward_input";
        break;
      case Kind::backward_weight:
        slot = &of.backward_weight;
        name = "backward_weight";
        break;
    }
    if (*slot) {
      throw std::invalid_argument(fmt::format("pipeline stage: order steps {} and {} are both the {} of micro-batch {} of chunk {}", **slot, i,
                                              name, s.micro_batch, s.chunk));
    }
    *slot = i;
  }
  for (const auto& [key, of] : seen) {
    const auto [m, k] = key;
    const auto where = fmt::format("micro-batch {} of chunk {}", m, k);
    const std::optional<std::size_t> backward = of.backward ? of.backward : of.backward_input;
    if (of.backward && of.backward_input) throw std::invalid_argument("pipeline stage: " + where + " has both a backward and a backward_input");
    if (!of.forward) throw std::invalid_argument("pipeline stage: " + where + " has a backward but no forward");
    if (!backward) throw std::invalid_argument("pipeline stage: " + where + " has a forward but no backward");
    if (*backward < *of.forward) {
      throw std::invalid_argument(fmt::format("pipeline stage: the backward of {} (order step {}) comes before its forward (step {})", where,
                                              *backward, *of.forward));
    }
    if (of.backward_weight && !of.backward_input) {
      throw std::invalid_argument("pipeline stage: " + where + " has a backward_weight without a backward_input");
    }
    if (of.backward_input && !of.backward_weight) {
      throw std::invalid_argument("pipeline stage: " + where + " has a backward_input without a backward_weight");
    }
    if (of.backward_weight && *of.backward_weight < *of.backward_input) {
      throw std::invalid_argument(fmt::format("pipeline stage: the backward_weight of {} (order step {}) comes before its backward_input (step {})",
                                              where, *of.backward_weight, *of.backward_input));
    }
  }
  for (std::size_t k = 0; k < v; ++k) {
    if (!chunk_runs[k]) throw std::invalid_argument(fmt::format("pipeline stage: chunk {} runs no step of the order", k));
  }
}

// Builds the rank's schedule step by step.
class StageBuilder {
 public:
  StageBuilder(const std::vector<Schedule>& chunks, const std::vector<ChunkParts>& parts, const PipelineStageSpec& spec)
      : chunks_(chunks), parts_(parts), spec_(spec), shared_id_(chunks.size()), optimizer_id_(chunks.size()) {
    for (const PipelineStep& step : spec.order) micro_batches_ = std::max(micro_batches_, step.micro_batch + 1);
    // Room for every micro-batch's copy of every chunk (its tasks, buffers and up to four
    // transfers with their two boundary buffers) at once: a stage of the largest layouts holds
    // millions of tasks, and growing the vectors by doubling copied them and held up to twice
    // their memory while it did.
    std::size_t tasks = 0;
    std::size_t buffers = 0;
    for (const Schedule& chunk : chunks) {
      tasks += (chunk.tasks.size() + 4) * static_cast<std::size_t>(micro_batches_);
      buffers += (chunk.buffers.size() + 2) * static_cast<std::size_t>(micro_batches_);
    }
    out_.tasks.reserve(tasks);
    out_.buffers.reserve(buffers);
    created_.reserve(buffers);
    shared_.reserve(buffers);
    // The buffers every micro-batch of a chunk shares come first, once each.
    for (std::size_t k = 0; k < chunks.size(); ++k) {
      shared_id_[k].assign(chunks[k].buffers.size(), kNoBuffer);
      for (BufferId b = 0; b < chunks[k].buffers.size(); ++b) {
        if (!parts[k].shared[b]) continue;
        Buffer buffer = chunks[k].buffers[b];
        if (several_chunks()) buffer.name += fmt::format(" (chunk {})", k);
        shared_id_[k][b] = add_buffer(std::move(buffer), true);
      }
      out_.compression.insert(out_.compression.end(), chunks[k].compression.begin(), chunks[k].compression.end());
      out_.compression_features.insert(out_.compression_features.end(), chunks[k].compression_features.begin(),
                                       chunks[k].compression_features.end());
    }
  }

  // One step issued on its own (the loop without chunks): its receives just before it, its sends
  // just after it.
  void forward(int m, int k) {
    const Pending p = open_forward(m, k);
    forward_body(m, k, p);
    forward_sends(m, k);
  }

  void backward(int m, int k) {
    const Pending p = open_backward(m, k);
    backward_body(m, k, p);
    backward_sends(m, k);
  }

  // Megatron-LM's interleaved loop (forward_backward_pipelining_with_interleaving,
  // schedules.py:1019-1560, overlap_p2p_comm off): its steps run in units, a forward alone in the
  // warm-up, a forward and the backward after it in the steady state (forward_step(k + warm-up),
  // backward_step(k), then one send_forward_backward_recv_forward_backward), a backward alone in
  // the cool-down; after each unit one batch_isend_irecv carries the unit's sends and the
  // receives of the next unit (the first unit's receives come alone, before it: recv_forward). So
  // a steady-state forward's output is sent after the backward that follows it, and a step's
  // input is received before the unit ahead of it runs. Issued one step at a time instead (each
  // recv just before its step), two ranks each send a gradient the other receives only after its
  // own send (P 2, V 2, M 4: a deadlock).
  void run_interleaved(const std::vector<PipelineStep>& order) {
    std::vector<std::vector<PipelineStep>> units;
    for (std::size_t i = 0; i < order.size(); ++i) {
      const bool pair = order[i].kind == Kind::forward && i + 1 < order.size() &&
                        (order[i + 1].kind == Kind::backward || order[i + 1].kind == Kind::backward_input);
      units.push_back(pair ? std::vector<PipelineStep>{order[i], order[i + 1]} : std::vector<PipelineStep>{order[i]});
      if (pair) ++i;
    }
    // (micro-batch, chunk, forward) of a step whose receives are posted: a unit may hold the
    // forward and the backward of one (micro-batch, chunk).
    std::map<std::tuple<int, int, bool>, Pending> pending;
    const auto receive = [&](const std::vector<PipelineStep>& unit) {
      for (const PipelineStep& step : unit) {
        if (step.kind == Kind::backward_weight) continue;
        pending[{step.micro_batch, step.chunk, step.kind == Kind::forward}] = step.kind == Kind::forward ? open_forward(step.micro_batch, step.chunk)
                                                                              : open_backward(step.micro_batch, step.chunk);
      }
    };
    if (!units.empty()) receive(units.front());
    for (std::size_t u = 0; u < units.size(); ++u) {
      for (const PipelineStep& step : units[u]) {
        if (step.kind == Kind::backward_weight) continue;
        const Pending& p = pending.at({step.micro_batch, step.chunk, step.kind == Kind::forward});
        step.kind == Kind::forward ? forward_body(step.micro_batch, step.chunk, p) : backward_body(step.micro_batch, step.chunk, p);
      }
      for (const PipelineStep& step : units[u]) {
        if (step.kind == Kind::backward_weight) continue;
        step.kind == Kind::forward ? forward_sends(step.micro_batch, step.chunk) : backward_sends(step.micro_batch, step.chunk);
        pending.erase({step.micro_batch, step.chunk, step.kind == Kind::forward});
      }
      if (u + 1 < units.size()) receive(units[u + 1]);
    }
  }

  // Every chunk's optimizer step, in chunk order, its waits on the micro-step pointing at the
  // chunk's last backward.
  Schedule finish() {
    for (std::size_t k = 0; k < chunks_.size(); ++k) {
      const Schedule& chunk = chunks_[k];
      const ChunkParts& parts = parts_[k];
      const Copy& last = copies_.at({last_backward_.at(static_cast<int>(k)), static_cast<int>(k)});
      optimizer_id_[k].assign(chunk.tasks.size(), kNoTask);
      for (std::size_t i = 0; i < parts.optimizer.size(); ++i) optimizer_id_[k][parts.optimizer[i]] = out_.tasks.size() + i;
      for (TaskId t : parts.optimizer) {
        Task task = chunk.tasks[t];
        if (several_chunks()) task.name += fmt::format(" [chunk {}]", k);
        for (TaskId& a : task.after) a = parts.is_step[a] ? optimizer_id_[k][a] : last.task_id[a];
        remap_buffers(task, shared_id_[k]);
        if (task.message) fill_step_message(*task.message, task.kind, static_cast<int>(k), chunk.tasks[t].name);
        out_.tasks.push_back(std::move(task));
      }
    }
    return std::move(out_);
  }

 private:
  static constexpr BufferId kNoBuffer = static_cast<BufferId>(-1);

  // One (micro-batch, chunk)'s copy: where its tasks and buffers went.
  struct Copy {
    std::vector<TaskId> task_id;      // old task -> new id (kNoTask: not emitted yet)
    std::vector<BufferId> buffer_id;  // old buffer -> new id
    std::optional<BufferId> received_input;
  };

  // A step's receives, posted before the unit it is in (run_interleaved).
  struct Pending {
    std::optional<TaskId> recv;                  // the added recv its first op waits for
    std::optional<BufferId> received_gradient;   // a backward's received output gradient
  };

  // A part's tasks without its transfers: the chunk's own recvs and sends go before and after.
  std::vector<TaskId> of_part(const std::vector<TaskId>& part, int k, std::optional<TaskKind> kind) const {
    const Schedule& chunk = chunks_[static_cast<std::size_t>(k)];
    std::vector<TaskId> out;
    for (TaskId t : part) {
      const bool transfer = is_p2p(chunk.tasks[t]);
      if (kind ? transfer && chunk.tasks[t].kind == *kind : !transfer) out.push_back(t);
    }
    return out;
  }

  // The micro-batch's copy of the chunk's buffers, and the receive of its input.
  Pending open_forward(int m, int k) {
    Copy& copy = copies_[{m, k}];
    const Schedule& chunk = chunks_[static_cast<std::size_t>(k)];
    const ChunkParts& parts = parts_[static_cast<std::size_t>(k)];
    copy.task_id.assign(chunk.tasks.size(), kNoTask);
    copy.buffer_id.assign(chunk.buffers.size(), kNoBuffer);
    for (BufferId b = 0; b < chunk.buffers.size(); ++b) {
      if (parts.shared[b]) {
        copy.buffer_id[b] = shared_id_[static_cast<std::size_t>(k)][b];
        continue;
      }
      Buffer buffer = chunk.buffers[b];
      buffer.name += " (" + copy_label(m, k) + ")";
      copy.buffer_id[b] = add_buffer(std::move(buffer));
    }
    const int stage = virtual_stage(k);
    Pending p;
    if (!parts.has_own_p2p && stage > 0) {
      copy.received_input = add_buffer(boundary_buffer(fmt::format("received input ({})", copy_label(m, k)), MemoryRole::activation));
      p.recv = add_transfer(TaskKind::recv, fmt::format("recv activation from stage {}", stage - 1), message(stage - 1, false, m), k,
                            *copy.received_input);
    }
    emit_part(copy, m, k, of_part(parts.forward, k, TaskKind::recv), [](Task&, TaskId) {});
    return p;
  }

  void forward_body(int m, int k, const Pending& p) {
    Copy& copy = copies_.at({m, k});
    const ChunkParts& parts = parts_[static_cast<std::size_t>(k)];
    emit_part(copy, m, k, of_part(parts.forward, k, std::nullopt), [&](Task& task, TaskId old) {
      if (old == parts.first_forward_op && p.recv) {
        task.after.push_back(*p.recv);
        task.uses.push_back(*copy.received_input);
      }
    });
  }

  void forward_sends(int m, int k) {
    Copy& copy = copies_.at({m, k});
    const ChunkParts& parts = parts_[static_cast<std::size_t>(k)];
    const int stage = virtual_stage(k);
    emit_part(copy, m, k, of_part(parts.forward, k, TaskKind::send), [](Task&, TaskId) {});
    if (!parts.has_own_p2p && stage < last_stage()) {
      add_send(copy, k, parts.last_forward_op, fmt::format("send activation to stage {}", stage + 1), message(stage + 1, false, m, k));
    }
  }

  Pending open_backward(int m, int k) {
    Copy& copy = copies_.at({m, k});
    const ChunkParts& parts = parts_[static_cast<std::size_t>(k)];
    const int stage = virtual_stage(k);
    Pending p;
    if (!parts.has_own_p2p && stage < last_stage()) {
      p.received_gradient = add_buffer(boundary_buffer(fmt::format("received output gradient ({})", copy_label(m, k)), MemoryRole::temporary));
      p.recv = add_transfer(TaskKind::recv, fmt::format("recv gradient from stage {}", stage + 1), message(stage + 1, true, m), k, *p.received_gradient);
    }
    emit_part(copy, m, k, of_part(parts.backward, k, TaskKind::recv), [](Task&, TaskId) {});
    return p;
  }

  void backward_body(int m, int k, const Pending& p) {
    Copy& copy = copies_.at({m, k});
    const ChunkParts& parts = parts_[static_cast<std::size_t>(k)];
    emit_part(copy, m, k, of_part(parts.backward, k, std::nullopt), [&](Task& task, TaskId old) {
      if (old == parts.first_backward_op && p.recv) {
        task.after.push_back(*p.recv);
        task.uses.push_back(*p.received_gradient);
      }
      if (old == parts.last_backward_op && copy.received_input) task.uses.push_back(*copy.received_input);
    });
    last_backward_[k] = m;
  }

  void backward_sends(int m, int k) {
    Copy& copy = copies_.at({m, k});
    const ChunkParts& parts = parts_[static_cast<std::size_t>(k)];
    const int stage = virtual_stage(k);
    emit_part(copy, m, k, of_part(parts.backward, k, TaskKind::send), [](Task&, TaskId) {});
    if (!parts.has_own_p2p && stage > 0) {
      add_send(copy, k, parts.last_backward_op, fmt::format("send gradient to stage {}", stage - 1), message(stage - 1, true, m, k));
    }
  }

  bool several_chunks() const { return chunks_.size() > 1; }
  int virtual_stage(int k) const { return k * spec_.stages + spec_.rank; }
  int last_stage() const { return spec_.stages * spec_.virtual_stages - 1; }
  std::string copy_label(int m, int k) const {
    return several_chunks() ? fmt::format("micro-batch {}, chunk {}", m, k) : fmt::format("micro-batch {}", m);
  }

  // The message of a transfer with virtual stage `peer_stage`; `sender_chunk` for a send (the
  // chunk of this end), else the peer's chunk (the sending end's).
  PipelineMessage message(int peer_stage, bool gradient, int m, std::optional<int> sender_chunk = std::nullopt) const {
    return PipelineMessage{.peer = peer_stage % spec_.stages,
                           .gradient = gradient,
                           .micro_batch = m,
                           .chunk = sender_chunk ? *sender_chunk : peer_stage / spec_.stages};
  }

  Buffer boundary_buffer(std::string name, MemoryRole role) const {
    Buffer buffer;
    buffer.name = std::move(name);
    buffer.bytes = spec_.boundary_bytes;
    buffer.role = role;
    return buffer;
  }

  BufferId add_buffer(Buffer buffer, bool shared = false) {
    out_.buffers.push_back(std::move(buffer));
    created_.push_back(false);
    shared_.push_back(shared);
    return out_.buffers.size() - 1;
  }

  // A send or recv of the copy (m, k) on the p2p stream.
  TaskId add_transfer(TaskKind kind, std::string name, PipelineMessage msg, int k, std::optional<BufferId> creates, std::vector<TaskId> after = {}) {
    Task task;
    task.name = std::move(name) + fmt::format(" [{}]", copy_label(msg.micro_batch, k));
    task.kind = kind;
    task.stream = Stream::p2p;
    task.bytes = spec_.boundary_bytes;
    task.message = msg;
    if (creates) {
      task.creates.push_back(*creates);
      created_[*creates] = true;
    }
    task.after = std::move(after);
    out_.tasks.push_back(std::move(task));
    return out_.tasks.size() - 1;
  }

  // A send after old task `last_op` of the copy, reading the micro-batch's own buffers it created.
  void add_send(const Copy& copy, int k, TaskId last_op, std::string name, PipelineMessage msg) {
    const TaskId after = copy.task_id[last_op];
    const TaskId send = add_transfer(TaskKind::send, std::move(name), msg, k, std::nullopt, {after});
    for (BufferId b : out_.tasks[after].creates) {
      if (!shared_[b]) out_.tasks[send].uses.push_back(b);
    }
  }

  // Renumbers a task's buffers; a shared buffer an earlier task created is used, not created again
  // (a later micro-batch accumulates into the gradient the first one made).
  void remap_buffers(Task& task, const std::vector<BufferId>& buffer_id) {
    std::vector<BufferId> creates;
    std::vector<BufferId> uses;
    for (BufferId b : task.creates) {
      const BufferId r = buffer_id[b];
      (created_[r] ? uses : creates).push_back(r);
      created_[r] = true;
    }
    for (BufferId b : task.uses) uses.push_back(buffer_id[b]);
    std::sort(uses.begin(), uses.end());
    uses.erase(std::unique(uses.begin(), uses.end()), uses.end());
    uses.erase(std::remove_if(uses.begin(), uses.end(), [&](BufferId b) { return std::find(creates.begin(), creates.end(), b) != creates.end(); }),
               uses.end());
    task.creates = std::move(creates);
    task.uses = std::move(uses);
  }

  // Appends the copy's tasks of one part; `attach` adds the transfers' waits and buffers to a task
  // (given its old id) after its own are renumbered.
  template <typename Attach>
  void emit_part(Copy& copy, int m, int k, const std::vector<TaskId>& part, Attach attach) {
    const Schedule& chunk = chunks_[static_cast<std::size_t>(k)];
    const int stage = virtual_stage(k);
    // Ids first: a task may wait for a later one of its part (a valid schedule's `after` may name
    // a task further down another stream).
    for (std::size_t i = 0; i < part.size(); ++i) copy.task_id[part[i]] = out_.tasks.size() + i;
    for (TaskId t : part) {
      Task task = chunk.tasks[t];
      task.name += " [" + copy_label(m, k) + "]";
      for (TaskId& a : task.after) {
        if (copy.task_id[a] == kNoTask) {
          throw std::logic_error(fmt::format("pipeline stage: chunk {}'s task {} ({}) waits for task {}, which has not run", k, t,
                                             chunk.tasks[t].name, a));
        }
        a = copy.task_id[a];
      }
      remap_buffers(task, copy.buffer_id);
      if (task.message) fill_message(*task.message, task.kind, stage, m, k, chunk.tasks[t].name);
      attach(task, t);
      out_.tasks.push_back(std::move(task));
    }
  }

  // A transfer of the optimizer step (the tied embedding's gradient exchange, traces/zoo/README.md
  // "Pipeline stages"): between the first stage's first chunk (the embedding) and the last stage's
  // last chunk (the head), once per iteration. Its micro-batch is one past the last, so that the
  // replay pairs it apart from every micro-batch's transfers.
  void fill_step_message(PipelineMessage& msg, TaskKind kind, int k, const std::string& name) const {
    const int last_rank = spec_.stages - 1;
    const int last_chunk = spec_.virtual_stages - 1;
    const bool embedding_end = spec_.rank == 0 && k == 0;
    const bool head_end = spec_.rank == last_rank && k == last_chunk;
    if (last_rank == 0 || embedding_end == head_end) {
      throw std::invalid_argument(fmt::format("pipeline stage: chunk {} of pipeline rank {} of {} has an optimizer-step {} ({}); expected it on the "
                                              "first chunk of the first rank or the last chunk of the last, with two or more ranks",
                                              k, spec_.rank, spec_.stages, to_string(kind), name));
    }
    const int peer = embedding_end ? last_rank : 0;
    const int peer_chunk = embedding_end ? last_chunk : 0;
    msg = PipelineMessage{.peer = peer, .gradient = true, .micro_batch = micro_batches_, .chunk = kind == TaskKind::send ? k : peer_chunk};
  }

  // A transfer of the chunk schedule's own: its peer, micro-batch and chunk on this rank.
  void fill_message(PipelineMessage& msg, TaskKind kind, int stage, int m, int k, const std::string& name) const {
    // A forward activation goes downstream, a gradient upstream: a send of the forward and a recv
    // of the backward are with the next stage, the others with the previous one.
    const bool with_next = (kind == TaskKind::send) != msg.gradient;
    const int peer_stage = with_next ? stage + 1 : stage - 1;
    if (peer_stage < 0 || peer_stage > last_stage()) {
      throw std::invalid_argument(fmt::format("pipeline stage: chunk {} runs virtual stage {} of {}, which has no {} stage for its {} of the {} ({})", k,
                                              stage, last_stage() + 1, with_next ? "next" : "previous", to_string(kind),
                                              msg.gradient ? "gradient" : "activation", name));
    }
    msg = message(peer_stage, msg.gradient, m, kind == TaskKind::send ? std::optional<int>(k) : std::nullopt);
  }

  const std::vector<Schedule>& chunks_;
  const std::vector<ChunkParts>& parts_;
  const PipelineStageSpec& spec_;
  Schedule out_;
  std::vector<bool> created_;                      // per new buffer: a task already creates it
  std::vector<bool> shared_;                       // per new buffer: every micro-batch of its chunk uses it
  std::vector<std::vector<BufferId>> shared_id_;   // per chunk: old shared buffer -> new id
  std::vector<std::vector<TaskId>> optimizer_id_;  // per chunk: old optimizer task -> new id
  std::map<std::pair<int, int>, Copy> copies_;     // (micro-batch, chunk)
  std::map<int, int> last_backward_;               // chunk -> its micro-batch whose backward ran last
  int micro_batches_ = 0;                          // M: the step's transfers are micro-batch M's
};

}  // namespace

Schedule apply_pipeline_stage(const std::vector<Schedule>& chunks, const std::vector<const traces::Trace*>& traces, const PipelineStageSpec& spec) {
  check_spec(chunks, traces, spec);
  std::vector<ChunkParts> parts;
  parts.reserve(chunks.size());
  for (std::size_t k = 0; k < chunks.size(); ++k) parts.push_back(cut_chunk(chunks[k], *traces[k], static_cast<int>(k)));

  StageBuilder builder(chunks, parts, spec);
  std::set<int> micro_batches;
  for (const PipelineStep& s : spec.order) micro_batches.insert(s.micro_batch);
  if (spec.virtual_stages > 1) {
    builder.run_interleaved(spec.order);
  } else {
    for (const PipelineStep& s : spec.order) {
      switch (s.kind) {
        case Kind::forward: builder.forward(s.micro_batch, s.chunk); break;
        case Kind::backward:
        case Kind::backward_input: builder.backward(s.micro_batch, s.chunk); break;
        case Kind::backward_weight: break;  // the whole backward ran at backward_input (header)
      }
    }
  }
  Schedule out = builder.finish();
  out.strategy = fmt::format("{}, pipeline rank {} of {}", chunks.front().strategy, spec.rank, spec.stages);
  if (spec.virtual_stages > 1) out.strategy += fmt::format(" ({} chunks)", spec.virtual_stages);
  out.strategy += fmt::format(", {} micro-batches", micro_batches.size());
  return out;
}

RankTrace join_chunk_traces(const std::vector<traces::Trace>& chunks) {
  if (chunks.empty()) throw std::invalid_argument("pipeline rank: no chunk trace to join");
  if (chunks.size() == 1) return RankTrace{chunks.front(), {0}, {0}};
  std::vector<traces::Tensor> tensors;
  std::vector<traces::Op> ops;
  std::map<std::string, std::vector<std::string>> values;  // metadata key -> each chunk's value
  std::string name;
  struct {
    std::vector<traces::OpIndex> first_op;
    std::vector<traces::TensorIndex> first_tensor;
  } offsets;
  std::uint64_t next_tensor_id = 0;
  std::uint64_t next_op_id = 0;
  for (std::size_t k = 0; k < chunks.size(); ++k) {
    const traces::Trace& chunk = chunks[k];
    if (chunk.batch_size() != chunks.front().batch_size()) {
      throw std::invalid_argument(fmt::format("pipeline rank: chunk {}'s trace is at batch {}, chunk 0's at {}; expected one batch size",
                                              k, chunk.batch_size(), chunks.front().batch_size()));
    }
    const traces::TensorIndex first_tensor = tensors.size();
    const traces::OpIndex first_op = ops.size();
    offsets.first_tensor.push_back(first_tensor);
    offsets.first_op.push_back(first_op);
    const std::uint64_t tensor_id_shift = next_tensor_id;
    const std::uint64_t op_id_shift = next_op_id;
    for (traces::Tensor tensor : chunk.tensors()) {
      tensor.id += tensor_id_shift;
      next_tensor_id = std::max(next_tensor_id, tensor.id + 1);
      if (tensor.view_of) *tensor.view_of += first_tensor;
      tensor.producer.reset();  // derived again by the Trace constructor
      tensor.consumers.clear();
      tensors.push_back(std::move(tensor));
    }
    for (traces::Op op : chunk.ops()) {
      op.id += op_id_shift;
      next_op_id = std::max(next_op_id, op.id + 1);
      for (traces::TensorIndex& t : op.inputs) t += first_tensor;
      for (traces::TensorIndex& t : op.outputs) t += first_tensor;
      for (traces::OpIndex& o : op.after) o += first_op;
      ops.push_back(std::move(op));
    }
    name += (k == 0 ? "" : " + ") + chunk.name();
    for (const auto& [key, value] : chunk.metadata()) {
      std::vector<std::string>& of_key = values[key];
      of_key.resize(k, "");
      of_key.push_back(value);
    }
  }
  std::map<std::string, std::string> metadata;
  for (auto& [key, of_key] : values) {
    of_key.resize(chunks.size(), "");
    const bool same = std::all_of(of_key.begin(), of_key.end(), [&](const std::string& v) { return v == of_key.front(); });
    metadata[key] = same ? of_key.front() : fmt::format("{}", fmt::join(of_key, ","));
  }
  return RankTrace{traces::Trace(std::move(name), chunks.front().batch_size(), std::move(tensors), std::move(ops), std::move(metadata)),
                   std::move(offsets.first_op), std::move(offsets.first_tensor)};
}

void move_onto_rank_trace(Schedule& chunk, traces::OpIndex first_op, traces::TensorIndex first_tensor) {
  for (Task& task : chunk.tasks) {
    if (task.op) *task.op += first_op;
    if (task.tensor) *task.tensor += first_tensor;
  }
  for (Buffer& buffer : chunk.buffers) {
    if (buffer.tensor) *buffer.tensor += first_tensor;
  }
}

PipelineRank apply_pipeline_rank(std::vector<Schedule> chunks, const std::vector<traces::Trace>& chunk_traces, const PipelineStageSpec& spec) {
  if (chunks.size() != chunk_traces.size()) {
    throw std::invalid_argument(fmt::format("pipeline rank: {} chunk schedules and {} chunk traces; expected one trace per schedule", chunks.size(),
                                            chunk_traces.size()));
  }
  RankTrace rank = join_chunk_traces(chunk_traces);
  for (std::size_t k = 0; k < chunks.size(); ++k) move_onto_rank_trace(chunks[k], rank.first_op[k], rank.first_tensor[k]);
  const std::vector<const traces::Trace*> every_chunk(chunks.size(), &rank.trace);
  Schedule schedule = apply_pipeline_stage(chunks, every_chunk, spec);
  return PipelineRank{std::move(rank.trace), std::move(schedule)};
}

}  // namespace comptrain::models

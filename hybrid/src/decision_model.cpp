#include "comptrain/hybrid/decision_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>

namespace comptrain::hybrid {

using traces::OpIndex;
using traces::TensorIndex;

std::string_view to_string(ActionKind kind) {
  switch (kind) {
    case ActionKind::keep: return "keep";
    case ActionKind::compress: return "compress";
    case ActionKind::offload: return "offload";
    case ActionKind::recompute: return "recompute";
  }
  return "?";
}

double DecisionModel::baseline_seconds() const {
  double total = 0;
  for (double s : step_seconds) total += s;
  return total;
}

std::int64_t DecisionModel::baseline_peak() const {
  return live_bytes.empty() ? 0 : *std::max_element(live_bytes.begin(), live_bytes.end());
}

namespace {

constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();

// Live bytes while each compute task runs, replaying the schedule one task at a time (as
// models::sequential_peak_bytes does); a task of another stream between two compute tasks counts
// in the step before it.
std::vector<std::int64_t> live_bytes_per_step(const models::Schedule& schedule, const std::vector<std::size_t>& compute_tasks) {
  const std::size_t n = schedule.tasks.size();
  std::vector<std::size_t> first(schedule.buffers.size(), kNone);
  std::vector<std::size_t> last(schedule.buffers.size(), 0);
  for (std::size_t t = 0; t < n; ++t) {
    for (models::BufferId b : schedule.tasks[t].creates) {
      first[b] = std::min(first[b], t);
      last[b] = std::max(last[b], t);
    }
    for (models::BufferId b : schedule.tasks[t].uses) last[b] = std::max(last[b], t);
  }
  std::int64_t resident = 0;
  std::vector<std::int64_t> delta(n + 1, 0);
  for (models::BufferId b = 0; b < schedule.buffers.size(); ++b) {
    const models::Buffer& buffer = schedule.buffers[b];
    if (buffer.resident) {
      resident += buffer.bytes;
      continue;
    }
    if (first[b] == kNone) continue;
    delta[first[b]] += buffer.bytes;
    if (!buffer.held_to_end) delta[std::max(last[b], first[b]) + 1] -= buffer.bytes;
  }
  std::vector<std::int64_t> per_task(n);
  std::int64_t live = resident;
  for (std::size_t t = 0; t < n; ++t) {
    live += delta[t];
    per_task[t] = live;
  }
  std::vector<std::int64_t> steps(compute_tasks.size(), 0);
  for (std::size_t k = 0; k < compute_tasks.size(); ++k) {
    const std::size_t end = k + 1 < compute_tasks.size() ? compute_tasks[k + 1] : n;
    for (std::size_t t = compute_tasks[k]; t < end; ++t) steps[k] = std::max(steps[k], per_task[t]);
  }
  return steps;
}

// Per storage: compress and decompress seconds and the compressed bytes that one codec gives it,
// read off a schedule that compresses every saved activation with that codec.
struct CodecCost {
  double compress_seconds = 0;
  double decompress_seconds = 0;
  std::int64_t compressed_bytes = 0;
};

std::map<TensorIndex, CodecCost> probe_codec(const traces::Trace& trace, const models::OpTimeModel& time_model, const CodecOption& codec) {
  models::StrategySpec spec;
  spec.name = "hybrid probe " + codec.label;
  spec.rules.push_back({models::TensorSelector{}, codec.action});
  auto built = models::build_schedule(trace, time_model, spec);
  std::map<TensorIndex, CodecCost> costs;
  const auto* schedule = std::get_if<models::Schedule>(&built);
  if (!schedule) return costs;  // a compress rule is never NotApplicable; nothing to offer if it were
  for (const models::Task& task : schedule->tasks) {
    if (!task.tensor) continue;
    if (task.kind == models::TaskKind::compress) {
      CodecCost& c = costs[*task.tensor];
      c.compress_seconds = task.seconds;
      for (models::BufferId b : task.creates) c.compressed_bytes += schedule->buffers[b].bytes;
    } else if (task.kind == models::TaskKind::decompress) {
      costs[*task.tensor].decompress_seconds = task.seconds;
    }
  }
  return costs;
}

// What every candidate's options are built from.
struct OptionContext {
  const traces::Trace& trace;
  const models::OpTimeModel& time_model;
  const ModelOptions& options;
  const std::vector<std::map<TensorIndex, CodecCost>>& codec_costs;
  const std::vector<double>& start;                  // baseline start of each step
  const std::vector<std::vector<OpIndex>>& writers;  // the ops writing each storage
  const std::vector<std::size_t>& candidate_of;      // storage -> candidate, or kNone
  int lookahead;
  double link_bandwidth;
};

// Compress: one option per codec that compresses it, dominated ones left out (no faster and no
// smaller than another).
void add_compress_options(Candidate& c, const models::SavedActivation& s, const OptionContext& ctx) {
  const int a = c.last_forward_use;
  const int b = c.first_backward_read;
  std::vector<Option> compress;
  for (std::size_t k = 0; k < ctx.options.codecs.size(); ++k) {
    auto it = ctx.codec_costs[k].find(s.storage);
    if (it == ctx.codec_costs[k].end() || it->second.compressed_bytes >= s.bytes) continue;
    Option o;
    o.kind = ActionKind::compress;
    o.codec = static_cast<int>(k);
    o.compressed_bytes = it->second.compressed_bytes;
    // The codec shares the GPU with the compute stream (the replay's fair sharing) while the
    // next op runs, and the reader waits for the just-in-time decompression.
    o.work = {{a + 1, it->second.compress_seconds}, {b, it->second.decompress_seconds}};
    o.memory = {{a + 1, b, o.compressed_bytes - s.bytes}};
    compress.push_back(o);
  }
  auto seconds_of = [](const Option& o) {
    double t = 0;
    for (const AddedWork& w : o.work) t += w.seconds;
    return t;
  };
  for (std::size_t x = 0; x < compress.size(); ++x) {
    bool dominated = false;
    for (std::size_t y = 0; y < compress.size() && !dominated; ++y) {
      if (x == y) continue;
      const bool no_worse = seconds_of(compress[y]) <= seconds_of(compress[x]) && compress[y].compressed_bytes <= compress[x].compressed_bytes;
      const bool better = seconds_of(compress[y]) < seconds_of(compress[x]) || compress[y].compressed_bytes < compress[x].compressed_bytes;
      dominated = no_worse && (better || y < x);
    }
    if (!dominated) c.options.push_back(compress[x]);
  }
}

// Offload: the copy out starts when step a ends; its bytes are free from the release step on,
// where the compute stream waits for the copy if it has not ended. One option per release step:
// right after (vDNN's wait), and the first step starting after 1, 2, 4, ... copy times of the
// baseline's clock (later releases leave room for a busy copy queue), before the prefetch's start.
void add_offload_options(Candidate& c, const models::SavedActivation& s, const OptionContext& ctx) {
  if (!ctx.options.offload || !(ctx.link_bandwidth > 0)) return;
  const int a = c.last_forward_use;
  const int b = c.first_backward_read;
  const int prefetch_step = b - ctx.lookahead;
  int previous = -1;
  for (double m : {0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0}) {
    const double ready = ctx.start[static_cast<std::size_t>(a + 1)] + m * c.copy_seconds;
    int e = a + 1;
    while (e < prefetch_step && ctx.start[static_cast<std::size_t>(e)] < ready) ++e;
    if (e >= prefetch_step) break;
    if (e == previous) continue;
    previous = e;
    Option o;
    o.kind = ActionKind::offload;
    o.release_step = e;
    o.memory = {{e, prefetch_step, -s.bytes}};
    c.options.push_back(o);
  }
}

// Recompute: replay its forward writers, and behind them every unsaved storage they read (an
// intermediate freed after the forward pass), back to storages present in the backward pass. The
// replayed ops' other outputs are scratch at the rebuild.
void add_recompute_option(Candidate& c, const models::SavedActivation& s, const OptionContext& ctx) {
  if (!ctx.options.recompute) return;
  const int a = c.last_forward_use;
  const int b = c.first_backward_read;
  const std::size_t ops = ctx.trace.ops().size();
  std::vector<OpIndex> replay(s.writers.begin(), s.writers.end());
  std::vector<bool> seen_op(ops, false);
  std::vector<bool> seen_storage(ctx.trace.tensors().size(), false);
  for (OpIndex o : replay) seen_op[o] = true;
  seen_storage[s.storage] = true;
  std::int64_t scratch = 0;
  bool replayable = true;
  for (std::size_t q = 0; q < replay.size() && replayable; ++q) {
    const traces::Op& op = ctx.trace.op(replay[q]);
    for (TensorIndex t : op.outputs) {
      const TensorIndex st = ctx.trace.storage_of(t);
      if (seen_storage[st]) continue;
      seen_storage[st] = true;
      if (ctx.candidate_of[st] == kNone) scratch += ctx.trace.tensor(st).bytes();
    }
    for (TensorIndex t : op.inputs) {
      const TensorIndex st = ctx.trace.storage_of(t);
      if (seen_storage[st]) continue;
      seen_storage[st] = true;
      if (ctx.candidate_of[st] != kNone) {
        c.replay_reads.push_back(ctx.candidate_of[st]);
        continue;
      }
      const traces::Tensor& tensor = ctx.trace.tensor(st);
      if (ctx.writers[st].empty() || tensor.role == traces::TensorRole::activation) continue;  // resident, or saved
      for (OpIndex w : ctx.writers[st]) {
        if (ctx.trace.op(w).phase != traces::Phase::forward) {
          replayable = false;  // not rebuilt by a forward replay
          break;
        }
        if (!seen_op[w]) {
          seen_op[w] = true;
          replay.push_back(w);
        }
      }
      scratch += tensor.bytes();
    }
  }
  if (replayable) {
    for (OpIndex o : replay) c.replay_seconds += ctx.time_model.seconds(ctx.trace, o);
    Option o;
    o.kind = ActionKind::recompute;
    o.work = {{b, c.replay_seconds}};
    o.memory = {{a + 1, b, -s.bytes}};
    if (scratch > 0) o.memory.push_back({b, b + 1, scratch});
    c.options.push_back(o);
  }
}

}  // namespace

DecisionModel build_decision_model(const traces::Trace& trace, const models::OpTimeModel& time_model, const models::Schedule& baseline,
                                   const ModelOptions& options) {
  DecisionModel model;
  model.codecs = options.codecs;
  model.offload_lookahead = options.offload_lookahead;
  const std::size_t ops = trace.ops().size();
  std::vector<std::size_t> compute_tasks;
  for (std::size_t t = 0; t < baseline.tasks.size(); ++t) {
    const models::Task& task = baseline.tasks[t];
    if (task.stream != models::Stream::compute) continue;
    if (task.kind != models::TaskKind::op || !task.op || *task.op != compute_tasks.size()) {
      throw std::logic_error("hybrid decision model: the baseline schedule is not one compute task per trace op in recorded order");
    }
    compute_tasks.push_back(t);
  }
  if (compute_tasks.size() != ops) throw std::logic_error("hybrid decision model: the baseline schedule misses trace ops");
  model.step_seconds.resize(ops);
  for (std::size_t k = 0; k < ops; ++k) model.step_seconds[k] = baseline.tasks[compute_tasks[k]].seconds;
  model.live_bytes = live_bytes_per_step(baseline, compute_tasks);

  const std::vector<models::SavedActivation> saved = models::saved_activations(trace, time_model);
  std::vector<std::size_t> candidate_of(trace.tensors().size(), kNone);
  for (std::size_t i = 0; i < saved.size(); ++i) candidate_of[saved[i].storage] = i;

  std::vector<std::map<TensorIndex, CodecCost>> codec_costs;
  for (const CodecOption& codec : options.codecs) codec_costs.push_back(probe_codec(trace, time_model, codec));

  const models::Platform& platform = time_model.platform();
  const double link_bandwidth = platform.host_link.bandwidth;
  const double link_latency = platform.host_link.latency;
  const int lookahead = std::max(1, options.offload_lookahead);

  // Baseline start time of each step, to place the release steps an offload may reach.
  std::vector<double> start(ops + 1, 0.0);
  for (std::size_t k = 0; k < ops; ++k) start[k + 1] = start[k] + model.step_seconds[k];

  // Which storages are present in the backward pass without a replay: everything not written
  // (inputs, weights), and saved activations (kept, or candidates of their own).
  std::vector<std::vector<OpIndex>> writers(trace.tensors().size());
  for (OpIndex o = 0; o < ops; ++o) {
    for (TensorIndex t : trace.op(o).outputs) writers[trace.storage_of(t)].push_back(o);
  }

  const OptionContext context{trace, time_model, options, codec_costs, start, writers, candidate_of, lookahead, link_bandwidth};
  for (std::size_t i = 0; i < saved.size(); ++i) {
    const models::SavedActivation& s = saved[i];
    Candidate c;
    c.storage = s.storage;
    c.name = trace.tensor(s.storage).name;
    c.bytes = s.bytes;
    c.last_forward_use = static_cast<int>(s.last_forward_use);
    c.first_backward_read = static_cast<int>(s.first_backward_read);
    c.copy_seconds = link_bandwidth > 0 ? link_latency + static_cast<double>(s.bytes) / link_bandwidth : 0;
    c.options.push_back(Option{});  // keep
    add_compress_options(c, s, context);
    add_offload_options(c, s, context);
    add_recompute_option(c, s, context);
    std::sort(c.replay_reads.begin(), c.replay_reads.end());
    model.candidates.push_back(std::move(c));
  }
  return model;
}

Evaluation evaluate(const DecisionModel& model, const Assignment& assignment) {
  const int n = model.steps();
  const std::size_t count = model.candidates.size();
  if (assignment.size() != count) throw std::invalid_argument("hybrid evaluate: one option per candidate expected");
  Evaluation ev;
  std::vector<double> work(static_cast<std::size_t>(n) + 1, 0.0);
  std::vector<std::int64_t> delta(static_cast<std::size_t>(n) + 1, 0);
  auto add_memory = [&](int first, int last, std::int64_t bytes) {
    first = std::clamp(first, 0, n);
    last = std::clamp(last, 0, n);
    if (first >= last) return;
    delta[static_cast<std::size_t>(first)] += bytes;
    delta[static_cast<std::size_t>(last)] -= bytes;
  };
  const int lookahead = model.offload_lookahead;
  // Copies by the step after which they are issued: out when step a ends (forward order), back
  // when step b - L starts; the release step and the reader wait for them.
  std::vector<std::vector<std::size_t>> out_at(static_cast<std::size_t>(n) + 1), back_at(static_cast<std::size_t>(n) + 1),
      wait_at(static_cast<std::size_t>(n) + 1), release_at(static_cast<std::size_t>(n) + 1);
  for (std::size_t i = 0; i < count; ++i) {
    const Candidate& c = model.candidates[i];
    const Option& o = c.options.at(assignment[i]);
    for (const AddedWork& w : o.work) work[static_cast<std::size_t>(std::clamp(w.step, 0, n))] += w.seconds;
    for (const MemoryChange& m : o.memory) add_memory(m.first, m.last, m.bytes);
    if (o.kind == ActionKind::offload) {
      out_at[static_cast<std::size_t>(c.last_forward_use)].push_back(i);
      back_at[static_cast<std::size_t>(c.first_backward_read - lookahead)].push_back(i);
      wait_at[static_cast<std::size_t>(c.first_backward_read)].push_back(i);
      release_at[static_cast<std::size_t>(o.release_step)].push_back(i);
    }
  }
  ev.step_start.assign(static_cast<std::size_t>(n) + 1, 0.0);
  ev.copy_out_end.assign(count, 0.0);
  ev.copy_back_end.assign(count, 0.0);
  double out_queue = 0, back_queue = 0;
  for (int k = 0; k <= n; ++k) {
    const auto ks = static_cast<std::size_t>(k);
    if (k > 0) {
      // Step k - 1 has ended: its copies out join the queue.
      const double ended = ev.step_start[ks - 1] + model.step_seconds[ks - 1];
      for (std::size_t i : out_at[ks - 1]) {
        out_queue = std::max(out_queue, ended) + model.candidates[i].copy_seconds;
        ev.copy_out_end[i] = out_queue;
      }
    }
    double t = k == 0 ? work[0] : ev.step_start[ks - 1] + model.step_seconds[ks - 1] + work[ks];
    for (std::size_t i : wait_at[ks]) t = std::max(t, ev.copy_back_end[i]);
    for (std::size_t i : release_at[ks]) t = std::max(t, ev.copy_out_end[i]);
    ev.step_start[ks] = t;
    for (std::size_t i : back_at[ks]) {
      back_queue = std::max({back_queue, t, ev.copy_out_end[i]}) + model.candidates[i].copy_seconds;
      ev.copy_back_end[i] = back_queue;
    }
  }
  ev.seconds = ev.step_start[static_cast<std::size_t>(n)];

  // Replays need what they read present from the rebuild on: a dropped candidate's replay reads
  // at its b, a dropped one read there is rebuilt then too, and so on back to kept storages.
  ev.needed_from.resize(count);
  for (std::size_t i = 0; i < count; ++i) ev.needed_from[i] = model.candidates[i].first_backward_read;
  std::vector<std::size_t> dropped;
  for (std::size_t i = 0; i < count; ++i) {
    if (model.candidates[i].options[assignment[i]].kind == ActionKind::recompute) dropped.push_back(i);
  }
  std::sort(dropped.begin(), dropped.end(), [&](std::size_t x, std::size_t y) {
    return model.candidates[x].first_backward_read < model.candidates[y].first_backward_read;
  });
  std::vector<std::size_t> stack;
  for (std::size_t d : dropped) {
    const int when = model.candidates[d].first_backward_read;
    stack.assign(1, d);
    while (!stack.empty()) {
      const std::size_t x = stack.back();
      stack.pop_back();
      for (std::size_t j : model.candidates[x].replay_reads) {
        if (ev.needed_from[j] <= when) continue;
        ev.needed_from[j] = when;
        if (model.candidates[j].options[assignment[j]].kind == ActionKind::recompute) stack.push_back(j);
      }
    }
  }
  for (std::size_t j = 0; j < count; ++j) {
    const Candidate& c = model.candidates[j];
    if (ev.needed_from[j] < c.first_backward_read && c.options[assignment[j]].kind != ActionKind::keep) {
      add_memory(ev.needed_from[j], c.first_backward_read, c.bytes);
    }
  }

  ev.live_bytes.resize(static_cast<std::size_t>(n));
  std::int64_t change = 0;
  ev.peak_bytes = std::numeric_limits<std::int64_t>::min();
  for (int k = 0; k < n; ++k) {
    change += delta[static_cast<std::size_t>(k)];
    const std::int64_t live = model.live_bytes[static_cast<std::size_t>(k)] + change;
    ev.live_bytes[static_cast<std::size_t>(k)] = live;
    if (live > ev.peak_bytes) {
      ev.peak_bytes = live;
      ev.peak_step = k;
    }
  }
  if (n == 0) ev.peak_bytes = 0;
  return ev;
}

}  // namespace comptrain::hybrid

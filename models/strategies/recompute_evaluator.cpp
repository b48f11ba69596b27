// The budget mode's incremental plan evaluator; the model is described in
// recompute_evaluator.hpp. Every rule of the simulation below mirrors Assembler::rematerialise
// in assemble.cpp (the walk back, the replay in forward order, which outputs become
// rebuilt copies); a change there must be made here too, and the property test
// (tests/models/strategy_test.cpp, "IncrementalEvaluator") compares the two on random plans.

#include "recompute_evaluator.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "comptrain/models/schedule.hpp"

namespace comptrain::models::strategy_detail {

namespace {

using traces::OpIndex;
using traces::TensorIndex;

constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();
constexpr std::uint32_t kOpStep = std::numeric_limits<std::uint32_t>::max();

std::uint64_t pos(std::uint32_t chunk, std::uint32_t step) { return (std::uint64_t{chunk} << 32) | step; }
std::uint32_t chunk_of(std::uint64_t p) { return static_cast<std::uint32_t>(p >> 32); }
std::uint32_t step_of(std::uint64_t p) { return static_cast<std::uint32_t>(p & 0xffffffffu); }

}  // namespace

bool RecomputeEvaluator::supports(const StorageActions& plan) {
  return std::none_of(plan.action.begin(), plan.action.end(), [](Action x) { return x == Action::offload || x == Action::compress; }) &&
         std::none_of(plan.held_until.begin(), plan.held_until.end(), [](const std::optional<traces::OpIndex>& h) { return h.has_value(); });
}

RecomputeEvaluator::RecomputeEvaluator(const Analysis& a, const StorageActions& plan, std::vector<TensorIndex> candidates)
    : a_(a), trace_(*a.trace), tensors_(a.trace->tensors().size()), candidates_(std::move(candidates)), action_(plan.action) {
  if (!supports(plan)) throw std::logic_error("RecomputeEvaluator: offloaded or compressed storages and selective holds are not modelled");
  const std::size_t n_ops = trace_.ops().size();
  if (n_ops >= kNone || tensors_ >= kNone / 2) throw std::logic_error("RecomputeEvaluator: trace too large");
  pinned_.assign(plan.pinned.begin(), plan.pinned.end());

  in_begin_.reserve(n_ops + 1);
  out_begin_.reserve(n_ops + 1);
  forward_.resize(n_ops);
  for (OpIndex o = 0; o < n_ops; ++o) {
    const auto& op = trace_.op(o);
    forward_[o] = is_forward(trace_, o);
    in_begin_.push_back(static_cast<std::uint32_t>(in_.size()));
    for (TensorIndex t : op.inputs) in_.push_back(trace_.storage_of(t));
    out_begin_.push_back(static_cast<std::uint32_t>(out_.size()));
    for (TensorIndex t : op.outputs) out_.push_back(trace_.storage_of(t));
  }
  in_begin_.push_back(static_cast<std::uint32_t>(in_.size()));
  out_begin_.push_back(static_cast<std::uint32_t>(out_.size()));

  std::vector<char> candidate(tensors_, 0);
  for (TensorIndex s : candidates_) candidate[s] = 1;
  bytes_.assign(tensors_, 0);
  original_counted_.assign(tensors_, 0);
  first_writer_.assign(tensors_, kNone);
  last_use_.assign(tensors_, kNone);
  last_forward_use_.assign(tensors_, kNone);
  last_backward_read_.assign(tensors_, kNone);
  tracked_.assign(tensors_, 0);
  for (TensorIndex s : a_.storages) {
    const StorageInfo& info = a_.info[s];
    const auto& tensor = trace_.tensor(s);
    bytes_[s] = tensor.bytes();
    // The buffer roles the budget counts (activation, compressed, prefetch): originals count
    // when the storage's role is activation; a resident one counts throughout.
    const bool activation = memory_role_of(tensor.role) == MemoryRole::activation;
    if (activation && !info.written) resident_ += bytes_[s];
    original_counted_[s] = activation && info.written;
    if (info.written) first_writer_[s] = static_cast<std::uint32_t>(info.writers.front());
    std::uint32_t last = kNone;
    for (OpIndex o : info.writers) last = last == kNone ? static_cast<std::uint32_t>(o) : std::max(last, static_cast<std::uint32_t>(o));
    for (OpIndex o : info.readers) {
      last = last == kNone ? static_cast<std::uint32_t>(o) : std::max(last, static_cast<std::uint32_t>(o));
      if (!forward_[o]) last_backward_read_[s] = static_cast<std::uint32_t>(o);  // readers ascend
    }
    last_use_[s] = last;
    if (info.last_forward_use) last_forward_use_[s] = static_cast<std::uint32_t>(*info.last_forward_use);
    // Only a saved storage can be rebuilt (a replay keeps an output only if it is saved and not
    // available); whether it is available without a rebuild is fixed unless it is a candidate.
    bool fixed_available = true;
    if (!pinned_[s]) {
      switch (action_[s]) {
        case Action::offload:
        case Action::compress: break;
        case Action::drop: fixed_available = false; break;
        case Action::keep: fixed_available = info.first_backward_read.has_value(); break;
      }
    }
    tracked_[s] = candidate[s] || (info.written && info.saved && !fixed_available);
  }

  owner_.assign(tensors_, kNone);
  owner_step_.assign(tensors_, 0);
  inspectors_.resize(tensors_);
  inspectors_compact_at_.assign(tensors_, 16);
  records_.resize(n_ops);
  queued_.assign(n_ops, 0);
  touching_.resize(n_ops);
  buffers_.resize(2 * tensors_);
  reads_.resize(2 * tensors_);
  buffer_dirty_.assign(2 * tensors_, 0);
  chunk_dirty_.assign(n_ops, 0);
  while (leaves_ < std::max<std::size_t>(n_ops, 1)) leaves_ *= 2;
  tree_max_.assign(2 * leaves_, 0);
  tree_add_.assign(2 * leaves_, 0);
  visit_.assign(tensors_, 0);
  op_mark_.assign(n_ops, 0);
  fresh_.assign(tensors_, 0);
  seen_.assign(tensors_, 0);
  prev_mark_.assign(tensors_, 0);
  fresh_remat_.assign(tensors_, 0);
  prev_owner_.assign(tensors_, kNone);

  // From scratch: every non-forward op's chunk, every counted original.
  for (OpIndex o = 0; o < n_ops; ++o) {
    if (!forward_[o]) queue_chunk(static_cast<std::uint32_t>(o));
  }
  for (TensorIndex s : a_.storages) {
    if (original_counted_[s]) mark_buffer(static_cast<std::uint32_t>(s));
  }
}

void RecomputeEvaluator::set(std::size_t i, bool drop) {
  const TensorIndex s = candidates_[i];
  const Action want = drop ? Action::drop : Action::keep;
  if (action_[s] == want) return;
  action_[s] = want;
  mark_buffer(static_cast<std::uint32_t>(s));
  mark_buffer(static_cast<std::uint32_t>(tensors_ + s));
  queue_inspectors(s, 0, kNone);  // every chunk that looked at it, whenever
  // A chunk looks at all its op's inputs, so every non-forward reader is among them; a storage
  // no chunk has looked at yet (none before the first evaluation) needs nothing more.
}

Evaluation RecomputeEvaluator::evaluate() {
  while (!heap_.empty()) {
    const std::uint32_t chunk = heap_.top();
    heap_.pop();
    queued_[chunk] = 0;
    resimulate(chunk);
  }
  for (std::uint32_t b : dirty_buffers_) {
    buffer_dirty_[b] = 0;
    refresh_buffer(b);
  }
  dirty_buffers_.clear();
  for (std::uint32_t c : dirty_chunks_) {
    chunk_dirty_[c] = 0;
    tree_set(c, chunk_profile(c));
  }
  dirty_chunks_.clear();
  return {resident_ + std::max<std::int64_t>(0, tree_max_[1]), seconds_.value(), tasks_, std::nullopt};
}

// As Assembler adds them: chunk by chunk, each replay in forward order.
double RecomputeEvaluator::ordered_seconds() const {
  if (!heap_.empty() || !dirty_buffers_.empty() || !dirty_chunks_.empty()) {
    throw std::logic_error("RecomputeEvaluator::ordered_seconds before evaluate()");
  }
  double sum = 0;
  for (const Record& record : records_) {
    for (OpIndex w : record.replay) sum += a_.op_seconds[w];
  }
  return sum;
}

// Assembler::available, with "rebuilt" meaning "rebuilt by an earlier chunk": within a chunk,
// what its own replay rebuilt is read through the replay's fresh buffers first.
bool RecomputeEvaluator::available(TensorIndex s, std::uint32_t chunk) const {
  const StorageInfo& info = a_.info[s];
  if (!info.written) return true;
  if (pinned_[s]) return true;
  if (owner_[s] < chunk) return true;
  switch (action_[s]) {
    case Action::offload:
    case Action::compress: return true;
    case Action::drop: return false;
    case Action::keep: break;
  }
  return info.first_backward_read.has_value();
}

void RecomputeEvaluator::queue_chunk(std::uint32_t chunk) {
  if (queued_[chunk]) return;
  queued_[chunk] = 1;
  heap_.push(chunk);
}

// Queues the chunks in [from, to] that looked at `s` in their current simulation, and drops
// the stale entries on the way.
void RecomputeEvaluator::queue_inspectors(TensorIndex s, std::uint32_t from, std::uint32_t to) {
  auto& list = inspectors_[s];
  std::size_t kept = 0;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const auto [chunk, version] = list[i];
    if (records_[chunk].version != version) continue;
    list[kept++] = list[i];
    if (chunk >= from && chunk <= to) queue_chunk(chunk);
  }
  list.resize(kept);
}

void RecomputeEvaluator::add_inspector(TensorIndex s, std::uint32_t chunk) {
  auto& list = inspectors_[s];
  if (list.size() >= inspectors_compact_at_[s]) {
    list.erase(std::remove_if(list.begin(), list.end(), [&](const auto& e) { return records_[e.first].version != e.second; }), list.end());
    inspectors_compact_at_[s] = static_cast<std::uint32_t>(std::max<std::size_t>(16, 2 * list.size()));
  }
  list.emplace_back(chunk, records_[chunk].version);
}

void RecomputeEvaluator::mark_buffer(std::uint32_t b) {
  if (buffer_dirty_[b]) return;
  buffer_dirty_[b] = 1;
  dirty_buffers_.push_back(b);
}

void RecomputeEvaluator::mark_chunk(std::uint32_t chunk) {
  if (chunk_dirty_[chunk]) return;
  chunk_dirty_[chunk] = 1;
  dirty_chunks_.push_back(chunk);
}

void RecomputeEvaluator::next_stamp() {
  if (++stamp_ != 0) return;
  // Wrapped around: clear the marks so that no old mark equals a new stamp.
  for (auto* marks : {&visit_, &op_mark_, &fresh_, &seen_, &prev_mark_}) std::fill(marks->begin(), marks->end(), 0);
  stamp_ = 1;
}

void RecomputeEvaluator::inspect(TensorIndex s, std::uint32_t chunk) {
  if (!tracked_[s] || seen_[s] == stamp_) return;
  seen_[s] = stamp_;
  add_inspector(s, chunk);
}

void RecomputeEvaluator::record_read(std::uint32_t b, std::uint32_t chunk, std::uint32_t step) {
  records_[chunk].reads.emplace_back(b, step);
  auto& r = reads_[b];
  const Pos p = pos(chunk, step);
  r.insert(std::upper_bound(r.begin(), r.end(), p), p);
  mark_buffer(b);
}

// Assembler::collect: the walk back from a lost storage to available ones, in the same order
// (the set of replayed ops can depend on it).
void RecomputeEvaluator::collect(TensorIndex s, std::uint32_t chunk) {
  inspect(s, chunk);
  if (available(s, chunk) || visit_[s] == stamp_) return;
  visit_[s] = stamp_;
  for (OpIndex w : a_.info[s].writers) {
    if (!forward_[w] || op_mark_[w] == stamp_) continue;
    op_mark_[w] = stamp_;
    records_[chunk].replay.push_back(w);
    for (std::uint32_t i = in_begin_[w]; i < in_begin_[w + 1]; ++i) {
      if (in_[i] != s) collect(in_[i], chunk);
    }
  }
}

void RecomputeEvaluator::resimulate(std::uint32_t chunk) {
  Record& record = records_[chunk];
  next_stamp();
  const std::uint32_t stamp = stamp_;
  // Undo the chunk's last simulation, remembering who rebuilt what before.
  moved_.clear();
  auto remember_owner = [&](TensorIndex s) {
    if (prev_mark_[s] == stamp) return;
    prev_mark_[s] = stamp;
    prev_owner_[s] = owner_[s];
    moved_.push_back(s);
  };
  for (const auto& [s, step] : record.remats) {
    remember_owner(s);
    if (owner_[s] == chunk) owner_[s] = kNone;
  }
  for (const auto& [b, step] : record.reads) {
    auto& r = reads_[b];
    r.erase(std::lower_bound(r.begin(), r.end(), pos(chunk, step)));
    mark_buffer(b);
  }
  for (OpIndex w : record.replay) seconds_.subtract(a_.op_seconds[w]);
  tasks_ -= record.replay.size();
  const bool had_replay = !record.replay.empty();
  record.replay.clear();
  record.remats.clear();
  record.reads.clear();
  ++record.version;

  // Assembler::run before a non-forward op: the dropped inputs not yet rebuilt.
  needed_.clear();
  for (std::uint32_t i = in_begin_[chunk]; i < in_begin_[chunk + 1]; ++i) {
    const TensorIndex s = in_[i];
    inspect(s, chunk);
    if (action_[s] == Action::drop && !(owner_[s] < chunk)) needed_.push_back(s);
  }
  if (!needed_.empty()) {
    // Assembler::rematerialise.
    for (TensorIndex s : needed_) collect(s, chunk);
    std::sort(record.replay.begin(), record.replay.end());
    tasks_ += record.replay.size();
    for (std::uint32_t step = 0; step < record.replay.size(); ++step) {
      const OpIndex w = record.replay[step];
      seconds_.add(a_.op_seconds[w]);
      for (std::uint32_t i = in_begin_[w]; i < in_begin_[w + 1]; ++i) {
        const TensorIndex s = in_[i];
        inspect(s, chunk);
        if (fresh_[s] == stamp) {
          if (fresh_remat_[s]) record_read(static_cast<std::uint32_t>(tensors_ + s), chunk, step);
        } else if (owner_[s] < chunk) {
          record_read(static_cast<std::uint32_t>(tensors_ + s), chunk, step);
        } else if (available(s, chunk)) {
          if (action_[s] == Action::drop) throw std::logic_error("strategy: dropped storage read before it was rebuilt");
          if (original_counted_[s]) record_read(static_cast<std::uint32_t>(s), chunk, step);
        } else {
          throw std::logic_error("strategy: recomputation reads a storage that is neither available nor rebuilt");
        }
      }
      for (std::uint32_t i = out_begin_[w]; i < out_begin_[w + 1]; ++i) {
        const TensorIndex s = out_[i];
        inspect(s, chunk);
        if (fresh_[s] != stamp) {
          const StorageInfo& info = a_.info[s];
          const bool complete = std::all_of(info.writers.begin(), info.writers.end(), [&](OpIndex x) { return op_mark_[x] == stamp; });
          const bool keep = complete && info.saved && !available(s, chunk);
          fresh_[s] = stamp;
          fresh_remat_[s] = keep;
          if (keep) {
            remember_owner(s);
            owner_[s] = chunk;
            owner_step_[s] = step;
            record.remats.emplace_back(s, step);
            mark_buffer(static_cast<std::uint32_t>(tensors_ + s));
          }
        }
        if (fresh_remat_[s]) record_read(static_cast<std::uint32_t>(tensors_ + s), chunk, step);
      }
    }
    for (TensorIndex s : needed_) {
      if (owner_[s] != chunk) throw std::logic_error("strategy: recomputation did not rebuild a dropped storage");
    }
  }
  if (had_replay || !record.replay.empty()) mark_chunk(chunk);
  // Rebuilt elsewhere now: the chunks after this one that looked at the storage, up to where it
  // was or is rebuilt, see it differently.
  for (TensorIndex s : moved_) {
    if (prev_owner_[s] == owner_[s]) continue;
    mark_buffer(static_cast<std::uint32_t>(tensors_ + s));
    queue_inspectors(s, chunk + 1, std::max(prev_owner_[s], owner_[s]));
  }
}

// The buffer's first and last use from the plan and the recorded replays, and its place in the
// tree if that changed.
void RecomputeEvaluator::refresh_buffer(std::uint32_t b) {
  BufferState next;
  if (b < tensors_) {
    const TensorIndex s = b;
    next.exists = original_counted_[s] != 0;
    if (next.exists) {
      // Forward uses only when dropped (backward readers read the rebuilt copy); every use otherwise.
      next.start = pos(first_writer_[s], kOpStep);
      const std::uint32_t last = action_[s] == Action::drop && last_forward_use_[s] != kNone ? last_forward_use_[s] : last_use_[s];
      next.end = pos(last, kOpStep);
      if (!reads_[b].empty()) next.end = std::max(next.end, reads_[b].back());
      next.end = std::max(next.end, next.start);
    }
  } else {
    const TensorIndex s = b - tensors_;
    next.exists = owner_[s] != kNone;
    if (next.exists) {
      next.start = pos(owner_[s], owner_step_[s]);
      next.end = next.start;
      // A dropped storage's backward readers read the rebuilt copy.
      if (action_[s] == Action::drop && last_backward_read_[s] != kNone) next.end = std::max(next.end, pos(last_backward_read_[s], kOpStep));
      if (!reads_[b].empty()) next.end = std::max(next.end, reads_[b].back());
    }
  }
  BufferState& current = buffers_[b];
  if (next.exists == current.exists && (!next.exists || (next.start == current.start && next.end == current.end))) return;
  if (next.exists && current.exists && chunk_of(next.start) == chunk_of(current.start) && chunk_of(next.end) == chunk_of(current.end)) {
    // Other steps of the same chunks (a replay before it changed): the chunks it spans whole are
    // the same, only the profiles of its first and last chunk change.
    current.start = next.start;
    current.end = next.end;
    mark_chunk(chunk_of(current.start));
    mark_chunk(chunk_of(current.end));
    return;
  }
  if (current.exists) place(b, false);
  current.exists = next.exists;
  current.start = next.start;
  current.end = next.end;
  if (current.exists) place(b, true);
}

// Adds or removes a buffer: its bytes on the chunks it spans whole, an entry in the profile of
// the chunks where it starts and ends.
void RecomputeEvaluator::place(std::uint32_t b, bool add) {
  BufferState& state = buffers_[b];
  const std::int64_t bytes = bytes_[b < tensors_ ? b : b - tensors_];
  const std::uint32_t first = chunk_of(state.start);
  const std::uint32_t last = chunk_of(state.end);
  if (last > first + 1) tree_add(first + 1, last - 1, add ? bytes : -bytes);
  for (std::uint8_t which = 0; which < (last == first ? 1 : 2); ++which) {
    const std::uint32_t chunk = which == 0 ? first : last;
    auto& list = touching_[chunk];
    if (add) {
      state.slot[which] = static_cast<std::uint32_t>(list.size());
      list.emplace_back(b, which);
    } else {
      const std::uint32_t slot = state.slot[which];
      list[slot] = list.back();
      buffers_[list[slot].first].slot[list[slot].second] = slot;
      list.pop_back();
    }
    mark_chunk(chunk);
  }
}

// The most bytes live at one step of the chunk among the buffers that start or end in it.
std::int64_t RecomputeEvaluator::chunk_profile(std::uint32_t chunk) {
  const auto& list = touching_[chunk];
  const auto steps = static_cast<std::uint32_t>(records_[chunk].replay.size());  // the op task is step `steps`
  std::int64_t total = 0;
  if (steps == 0) {
    for (const auto& [b, which] : list) total += bytes_[b < tensors_ ? b : b - tensors_];
    return total;
  }
  diff_.assign(static_cast<std::size_t>(steps) + 2, 0);
  for (const auto& [b, which] : list) {
    const BufferState& state = buffers_[b];
    const std::int64_t bytes = bytes_[b < tensors_ ? b : b - tensors_];
    const auto clamp = [&](std::uint32_t step) { return step == kOpStep ? steps : step; };
    const std::uint32_t lo = chunk_of(state.start) == chunk ? clamp(step_of(state.start)) : 0;
    const std::uint32_t hi = chunk_of(state.end) == chunk ? clamp(step_of(state.end)) : steps;
    diff_[lo] += bytes;
    diff_[hi + 1] -= bytes;
  }
  std::int64_t live = 0;
  std::int64_t best = 0;
  for (std::uint32_t step = 0; step <= steps; ++step) best = std::max(best, live += diff_[step]);
  return best;
}

// Adds v to chunks [l, r]: bottom-up over the nodes that cover the range exactly, then the
// maxima of their ancestors (a node's add applies to its whole subtree, so nothing is pushed down).
void RecomputeEvaluator::tree_add(std::size_t l, std::size_t r, std::int64_t v) {
  std::size_t lo = l + leaves_;
  std::size_t hi = r + leaves_ + 1;
  const std::size_t first = lo;
  const std::size_t last = hi - 1;
  for (; lo < hi; lo /= 2, hi /= 2) {
    if (lo & 1) {
      tree_max_[lo] += v;
      tree_add_[lo++] += v;
    }
    if (hi & 1) {
      tree_max_[--hi] += v;
      tree_add_[hi] += v;
    }
  }
  tree_pull(first);
  tree_pull(last);
}

void RecomputeEvaluator::tree_set(std::size_t chunk, std::int64_t v) {
  const std::size_t node = leaves_ + chunk;
  if (tree_max_[node] == v + tree_add_[node]) return;
  tree_max_[node] = v + tree_add_[node];
  tree_pull(node);
}

void RecomputeEvaluator::tree_pull(std::size_t node) {
  for (node /= 2; node >= 1; node /= 2) tree_max_[node] = std::max(tree_max_[2 * node], tree_max_[2 * node + 1]) + tree_add_[node];
}

}  // namespace comptrain::models::strategy_detail

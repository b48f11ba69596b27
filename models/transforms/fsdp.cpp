// PyTorch FSDP2 (README.md, "FSDP2"). Sources: pytorch/pytorch's
// torch/distributed/_composable/fsdp (the December 2024 code, PyTorch 2.6: _fsdp_state.py,
// _fsdp_param_group.py, _fsdp_collectives.py, _fsdp_param.py). Part of data parallelism as a
// schedule transform (data_parallel_transform.hpp). run_fsdp gives the steps in order; each
// step is one of torch's: the groups and their state, the gathers of each pass, the gradients'
// reduce-scatters.

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/models/module_pattern.hpp"
#include "data_parallel_transform.hpp"

namespace comptrain::models::transform_detail {

using traces::Phase;

// FSDPParam pads a parameter's dim 0 to a multiple of the shard group's size (the world size
// without HSDP; _get_dim0_padded_size over the shard mesh dimension).
std::int64_t Transform::padded_elements(const traces::Tensor& t) const {
  const std::int64_t shards = shard_ranks();
  if (t.shape.empty()) return ceil_div(std::max<std::int64_t>(t.elements(), 1), shards) * shards;
  const std::int64_t dim0 = t.shape.front();
  const std::int64_t rest = dim0 > 0 ? t.elements() / dim0 : 0;
  return ceil_div(dim0, shards) * shards * rest;
}

void Transform::run_fsdp() {
  substitute_.assign(old_buffers_, kKeep);
  const FsdpGroups groups = fsdp_groups();
  const BufferId sharded_parameters = shard_fsdp_state(groups);
  if (spec_.fsdp->cpu_offload) keep_fsdp_state_on_the_host(sharded_parameters);
  const std::size_t gathers = gather_for_forward(groups.units, sharded_parameters);
  gather_for_backward(groups.units, sharded_parameters, gathers);
  reduce_scatter_gradients(groups.units);

  shard_optimizer_tasks();
  if (spec_.fsdp->cpu_offload) step_fsdp_on_the_host(groups);
  redirect_all();
  hold_fsdp_buffers();
  assemble();
}

// The groups: one per module instance of `units`, the root's for every other parameter; which
// old tasks read each group's parameters, per pass; whether each is resharded after forward.
Transform::FsdpGroups Transform::fsdp_groups() const {
  const FsdpSpec& f = *spec_.fsdp;
  FsdpGroups groups;
  std::vector<Unit>& units = groups.units;
  std::map<std::string, std::size_t> unit_index;
  const auto unit_of = [&](const std::string& name) {
    std::string instance;
    for (const std::string& pattern : f.units) {
      if (const auto i = module_pattern_instance(pattern, name)) {
        instance = std::string(*i);
        break;
      }
    }
    auto [it, added] = unit_index.emplace(instance, units.size());
    if (added) {
      Unit unit;
      unit.name = instance;
      units.push_back(std::move(unit));
    }
    return it->second;
  };
  // Float8 all-gather (FsdpSpec::float8_all_gather): the weights a converted linear's forward op
  // reads are cast on the shard and gathered in float8, one byte an element
  // (WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather in torchao's float8/fsdp_utils.py).
  const std::set<traces::TensorIndex> float8_gathered =
      f.float8_all_gather ? float8_weights(*f.float8_all_gather) : std::set<traces::TensorIndex>{};
  std::map<BufferId, std::size_t> weight_unit;
  std::int64_t& weight_elements = groups.weight_elements;
  std::int64_t& weight_element_size = groups.weight_element_size;
  for (BufferId w : weights_) {
    const auto& t = trace_.tensor(*s_.buffers[w].tensor);
    Unit& u = units[unit_of(t.name)];
    u.weights.push_back(w);
    const std::int64_t padded = padded_elements(t);
    u.padded_elements += padded;
    u.sharded_elements += padded / shard_ranks();
    const std::int64_t gathered_element = float8_gathered.contains(*s_.buffers[w].tensor) ? 1 : static_cast<std::int64_t>(traces::element_size(t.dtype));
    u.unsharded_bytes += padded * gathered_element;
    weight_unit[w] = unit_index.at(u.name);
    weight_elements += t.elements();
    weight_element_size = std::max<std::int64_t>(weight_element_size, traces::element_size(t.dtype));
  }
  std::map<BufferId, std::size_t> gradient_unit;
  for (BufferId g : gradients_) {
    const std::size_t u = unit_of(trace_.tensor(*s_.buffers[g].tensor).name);
    units[u].gradients.push_back(g);
    gradient_unit[g] = u;
  }
  // Which old tasks read each group's parameters, per pass; the post-backward also waits for
  // the group's gradients.
  for (TaskId t = 0; t < n_; ++t) {
    const Task& task = s_.tasks[t];
    const Phase pass = pass_of(task, trace_);
    if (!task.op || pass == Phase::optimizer) continue;
    const auto touch = [&](std::size_t u) {
      Unit& unit = units[u];
      if (pass == Phase::forward) {
        if (!unit.first_forward) unit.first_forward = t;
        unit.last_forward = t;
      } else {
        if (!unit.first_backward) unit.first_backward = t;
        unit.last_backward = t;
      }
    };
    for (const auto* list : {&task.uses, &task.creates}) {
      for (BufferId b : *list) {
        if (auto it = weight_unit.find(b); it != weight_unit.end()) touch(it->second);
        if (auto it = gradient_unit.find(b); it != gradient_unit.end() && pass == Phase::backward) {
          units[it->second].last_backward = std::max(units[it->second].last_backward.value_or(t), t);
        }
      }
    }
  }
  // reshard_after_forward: the root never (_lazy_init), the units as the spec says.
  std::optional<std::size_t> last_unit;  // the last non-root group in forward order
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (units[u].name.empty() || !units[u].first_forward) continue;
    if (!last_unit || *units[*last_unit].first_forward < *units[u].first_forward) last_unit = u;
  }
  for (std::size_t u = 0; u < units.size(); ++u) {
    Unit& unit = units[u];
    unit.reshard_after_forward = !unit.name.empty() && (f.reshard_after_forward == FsdpSpec::Reshard::all ||
                                                        (f.reshard_after_forward == FsdpSpec::Reshard::all_but_last && u != last_unit));
  }
  return groups;
}

// Model state: the sharded parameters in their original dtype (FSDPParam's _sharded_param_data,
// allocated with the model, before the first iteration) and the optimizer state of this rank's
// shards; under `mixed` precision the trace's optimizer state holds the fp32 masters of its
// 16-bit weights, which are FSDP2's sharded parameters and so are not counted twice.
// Returns the sharded parameters' buffer.
BufferId Transform::shard_fsdp_state(const FsdpGroups& groups) {
  const FsdpSpec& f = *spec_.fsdp;
  const std::vector<Unit>& units = groups.units;
  const std::int64_t weight_elements = groups.weight_elements;
  const std::int64_t weight_element_size = groups.weight_element_size;
  std::int64_t sharded = 0;
  for (const Unit& unit : units) sharded += unit.sharded_elements;
  const BufferId sharded_parameters =
      add_buffer(partition_name("sharded parameters"), sharded * f.sharded_parameter_bytes, MemoryRole::weight);
  {
    std::vector<BufferId> members;
    for (BufferId b = 0; b < old_buffers_; ++b) {
      if (s_.buffers[b].role == MemoryRole::optimizer_state && s_.buffers[b].resident) members.push_back(b);
    }
    const std::int64_t state = sum_bytes(members);
    const std::int64_t masters = weight_element_size < f.sharded_parameter_bytes && state > 0 ? weight_elements * f.sharded_parameter_bytes : 0;
    if (masters > state) {
      throw std::invalid_argument("data parallel: fsdp keeps " + std::to_string(f.sharded_parameter_bytes) +
                                  "-byte sharded parameters of the trace's " + std::to_string(weight_element_size) +
                                  "-byte weights, whose masters the trace's optimizer state does not hold (" + std::to_string(state) + " B)");
    }
    if (!members.empty()) {
      const BufferId part = add_buffer(partition_name("optimizer state partition"), ceil_div(state - masters, shard_ranks()), MemoryRole::optimizer_state);
      for (BufferId b : members) {
        substitute_[b] = part;
        s_.buffers[b].resident = false;
      }
    }
  }
  for (BufferId w : weights_) {
    s_.buffers[w].resident = false;
    optimizer_substitute_[w] = sharded_parameters;
  }
  return sharded_parameters;
}

// The parameters each pass reads: per group, the unsharded parameters (allocated on the
// compute stream by the copy-out, FSDPParam.alloc_all_gather_outputs) and the all-gather
// buffer they are copied out of (foreach_all_gather allocates it on the all-gather copy-in
// stream), with the copy-in's cast of the shards to param_dtype (FSDPParam.all_gather_inputs).
Transform::Gathered Transform::gathered_buffers(const Unit& unit, const char* pass) {
  const FsdpSpec& f = *spec_.fsdp;
  const std::string what = (unit.name.empty() ? std::string("root") : unit.name);
  Gathered g;
  g.unsharded = add_buffer(what + " parameters (unsharded for " + pass + ")", unit.unsharded_bytes, MemoryRole::weight, false);
  g.all_gather = add_buffer(what + " all-gather buffer (" + pass + ")", unit.unsharded_bytes, MemoryRole::weight, false);
  s_.buffers[g.all_gather].allocation_stream = AllocationStream::fsdp_all_gather;
  const std::int64_t element = unit.padded_elements > 0 ? unit.unsharded_bytes / unit.padded_elements : 0;
  if (element != f.sharded_parameter_bytes && unit.sharded_elements > 0) {
    g.cast = add_buffer(what + " shards cast for the all-gather (" + pass + ")", unit.sharded_elements * element, MemoryRole::temporary, false);
    s_.buffers[*g.cast].allocation_stream = AllocationStream::fsdp_all_gather;
  }
  for (BufferId w : unit.weights) {
    if (std::string_view(pass) == "forward") {
      gathered_[{static_cast<int>(Phase::forward), w}] = g.unsharded;
      if (!unit.reshard_after_forward) gathered_[{static_cast<int>(Phase::backward), w}] = g.unsharded;
    } else {
      gathered_[{static_cast<int>(Phase::backward), w}] = g.unsharded;
    }
  }
  return g;
}

TaskId Transform::fsdp_all_gather(const Unit& unit, const Gathered& g, const char* pass, std::size_t index, TaskId before, std::vector<TaskId> after,
                                  std::vector<BufferId> also_uses, BufferId sharded_parameters) {
  Task c;
  c.kind = TaskKind::collective;
  c.stream = Stream::comm;
  c.collective = CollectiveKind::all_gather;
  c.groups = shard_groups();
  c.bytes = unit.unsharded_bytes;
  c.creates = {g.all_gather};
  if (g.cast) c.creates.push_back(*g.cast);
  c.uses = {sharded_parameters};
  c.uses.insert(c.uses.end(), also_uses.begin(), also_uses.end());
  c.after = std::move(after);
  c.name = task_name((std::string("FSDP all-gather for ") + pass + " of " + (unit.name.empty() ? "root" : unit.name)).c_str(), index, c.bytes);
  if (spec_.fsdp->cpu_offload) copy_shards_in(unit, pass, index, before, c);
  return add_task(std::move(c), before);
}

// The copy-out of an all-gather (foreach_all_gather_copy_out in _fsdp_collectives.py, called by
// FSDPParamGroup.wait_for_unshard on the compute stream): one split_with_sizes_copy from the
// all-gather output into the parameters' unsharded tensors, which it allocates, so the unsharded
// bytes read and written by a memory-bound kernel just before the group's first task of the pass.
// Without a platform (apply_data_parallel's overload without one) it is not timed: the unsharded
// parameters are then created by that first task and nullopt returned.
std::optional<TaskId> Transform::fsdp_copy_out(const Unit& unit, const Gathered& g, const char* pass, std::size_t index, TaskId before) {
  if (platform_ == nullptr) return std::nullopt;
  Task copy = framework_kernel(
      task_name((std::string("FSDP copy-out for ") + pass + " of " + (unit.name.empty() ? "root" : unit.name)).c_str(), index, unit.unsharded_bytes),
      2.0 * static_cast<double>(unit.unsharded_bytes), 1);
  copy.after = {g.collective};
  copy.creates = {g.unsharded};
  copy.uses = {g.all_gather};
  return add_task(std::move(copy), before);
}

// Forward: each group gathered before its first forward task (pre_forward), the copy-out on
// the compute stream; the previous group's all-gather buffer is freed after this one's
// all-gather (wait_for_unshard keeps it in all_gather_state until the next copy-out) and the
// copy-in stream waits for the previous copy-out.
// Returns the number of all-gathers issued.
std::size_t Transform::gather_for_forward(const std::vector<Unit>& units, BufferId sharded_parameters) {
  std::vector<std::size_t> forward_order;
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (units[u].first_forward) forward_order.push_back(u);
  }
  std::sort(forward_order.begin(), forward_order.end(), [&](std::size_t a, std::size_t b) { return *units[a].first_forward < *units[b].first_forward; });
  std::size_t index = 0;
  std::optional<std::size_t> previous;
  std::optional<BufferId> previous_buffer;
  for (std::size_t u : forward_order) {
    const Unit& unit = units[u];
    Gathered g = gathered_buffers(unit, "forward");
    // Not resharded after forward: freed by the group's post-backward reshard.
    if (!unit.reshard_after_forward && unit.last_backward) extra_uses_[post_backward(unit)].push_back(g.unsharded);
    std::vector<TaskId> after;
    if (previous) after.push_back(*units[*previous].first_forward);
    std::vector<BufferId> also;
    if (previous_buffer) also.push_back(*previous_buffer);
    g.collective = fsdp_all_gather(unit, g, "forward", index, *unit.first_forward, after, also, sharded_parameters);
    extra_after_[*unit.first_forward].push_back(g.collective);
    if (!fsdp_copy_out(unit, g, "forward", index, *unit.first_forward)) create_at_[*unit.first_forward].push_back(g.unsharded);
    ++index;
    previous = u;
    previous_buffer = g.all_gather;
  }
  // The last forward all-gather buffer is freed by the root's post-forward (_post_forward:
  // all_gather_state = None): the last forward task that reads parameters holds it.
  if (previous_buffer) {
    std::optional<TaskId> last;
    for (const Unit& unit : units) {
      if (unit.last_forward) last = std::max(last.value_or(*unit.last_forward), *unit.last_forward);
    }
    if (last) extra_uses_[*last].push_back(*previous_buffer);
  }
  return index;
}

// Backward: a group resharded after forward is gathered again, prefetched when the group
// before it in backward order starts its backward (_backward_prefetch in pre_backward); its
// copy-out at its own pre_backward frees the all-gather buffer at once.
// `index`: the number of all-gathers issued before (their names' numbering).
void Transform::gather_for_backward(const std::vector<Unit>& units, BufferId sharded_parameters, std::size_t index) {
  std::vector<std::size_t> backward_order;
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (units[u].first_backward) backward_order.push_back(u);
  }
  std::sort(backward_order.begin(), backward_order.end(), [&](std::size_t a, std::size_t b) { return *units[a].first_backward < *units[b].first_backward; });
  for (std::size_t k = 0; k < backward_order.size(); ++k) {
    const Unit& unit = units[backward_order[k]];
    if (!unit.reshard_after_forward) continue;
    Gathered g = gathered_buffers(unit, "backward");
    extra_uses_[post_backward(unit)].push_back(g.unsharded);
    const TaskId issue = k > 0 ? *units[backward_order[k - 1]].first_backward : *unit.first_backward;
    g.collective = fsdp_all_gather(unit, g, "backward", index, issue, {}, {}, sharded_parameters);
    extra_after_[*unit.first_backward].push_back(g.collective);
    // The copy-out reads the all-gather buffer last: it is freed once the copy ends.
    if (!fsdp_copy_out(unit, g, "backward", index, *unit.first_backward)) {
      create_at_[*unit.first_backward].push_back(g.unsharded);
      extra_uses_[*unit.first_backward].push_back(g.all_gather);
    }
    ++index;
  }
}

// Gradients: each group's post-backward (after its last backward task; the root's in the
// final callback, after the whole backward pass) copies its gradients into a reduce-scatter
// input of reduce_dtype allocated on the compute stream, frees them, and reduce-scatters on
// its stream into an output allocated there, which stays as the group's sharded gradient
// until zero_grad. The input is held (ReduceScatterState) until the next post-backward, whose
// compute stream first waits for this reduce-scatter.
void Transform::reduce_scatter_gradients(const std::vector<Unit>& units) {
  const FsdpSpec& f = *spec_.fsdp;
  std::vector<std::size_t> reduce_order;
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (units[u].last_backward && !units[u].gradients.empty()) reduce_order.push_back(u);
  }
  std::sort(reduce_order.begin(), reduce_order.end(), [&](std::size_t a, std::size_t b) {
    // The root's post-backward runs last, in the final callback.
    if (units[a].name.empty() != units[b].name.empty()) return units[b].name.empty();
    return *units[a].last_backward < *units[b].last_backward;
  });
  std::optional<TaskId> previous_reduction;
  std::optional<TaskId> last_reduction;  // the last collective of the gradients: the optimizer waits for it
  std::optional<BufferId> previous_input;
  TaskId previous_ready = 0;
  std::size_t r = 0;
  for (std::size_t u : reduce_order) {
    const Unit& unit = units[u];
    const std::string what = unit.name.empty() ? std::string("root") : unit.name;
    const TaskId ready = post_backward(unit);
    // Two groups made ready by the same task reduce back to back (the wait would be a cycle).
    if (previous_reduction && previous_ready < ready) {
      extra_after_[ready].push_back(*previous_reduction);
      extra_uses_[ready].push_back(*previous_input);
    }
    previous_ready = ready;
    // reduce_bytes 0: MixedPrecisionPolicy's reduce_dtype None, the gradients' own dtype.
    const std::int64_t reduce_bytes =
        f.reduce_bytes > 0 ? f.reduce_bytes : static_cast<std::int64_t>(traces::element_size(trace_.tensor(*s_.buffers[unit.gradients.front()].tensor).dtype));
    const BufferId input = add_buffer(what + " reduce-scatter input", unit.padded_elements * reduce_bytes, MemoryRole::gradient, false);
    const BufferId output = add_buffer(partition_name((what + " sharded gradients").c_str()), unit.sharded_elements * reduce_bytes, MemoryRole::gradient, false);
    s_.buffers[output].held_to_end = true;
    s_.buffers[output].allocation_stream = AllocationStream::fsdp_reduce_scatter;
    Task c;
    c.kind = TaskKind::collective;
    c.stream = Stream::comm;
    c.collective = CollectiveKind::reduce_scatter;
    c.groups = shard_groups();
    c.bytes = unit.padded_elements * reduce_bytes;
    c.creates = {input, output};
    c.uses = unit.gradients;
    c.after = {ready};
    if (platform_ != nullptr) {
      // The copy-in (foreach_reduce_scatter_copy_in in foreach_reduce, on the compute stream since
      // PyTorch 2.6): the gradients read and cast into the input, a memory-bound kernel; the
      // gradients are freed once it ends ("Only after the copy-in finishes can we free the
      // gradients"), and the reduce-scatter waits for it.
      Task copy = framework_kernel(task_name(("FSDP copy-in of " + what + " gradients").c_str(), r, c.bytes),
                                   static_cast<double>(sum_bytes(unit.gradients) + c.bytes), 1);
      copy.after = {ready};
      copy.creates = {input};
      copy.uses = unit.gradients;
      c.after = {add_task(std::move(copy), ready + 1)};
      c.creates = {output};
      c.uses = {input};
    }
    c.name = task_name(("FSDP reduce-scatter of " + what + " gradients").c_str(), r, c.bytes);
    const TaskId reduction = add_task(std::move(c), ready + 1);
    // HSDP: the shard is all-reduced in place over the replicas (on the all-reduce stream, which
    // waits for the reduce-scatter: here the same comm stream, after it). The next post-backward
    // waits for the reduce-scatter only (reduce_scatter_state's event); the optimizer for all.
    if (f.replicate > 1) {
      Task a;
      a.kind = TaskKind::collective;
      a.stream = Stream::comm;
      a.collective = CollectiveKind::all_reduce;
      a.groups = RankGroups{f.replicate, shard_ranks()};
      a.bytes = unit.sharded_elements * reduce_bytes;
      a.uses = {output};
      a.name = task_name(("HSDP all-reduce of " + what + " gradient shards").c_str(), r, a.bytes);
      last_reduction = add_task(std::move(a), ready + 1);
    } else {
      last_reduction = reduction;
    }
    ++r;
    // CPU offload: the gradient shard goes to the host once reduced (after HSDP's all-reduce: FSDP2
    // copies it on the stream that reduced it last).
    if (f.cpu_offload) copy_gradient_shard_out(unit, output, *last_reduction, ready, reduce_bytes);
    for (BufferId g : unit.gradients) {
      s_.buffers[g].held_to_end = false;
      s_.buffers[g].resident = false;
      optimizer_substitute_[g] = output;
    }
    previous_reduction = reduction;
    previous_input = input;
  }
  if (last_reduction && first_optimizer_) extra_after_[*first_optimizer_].push_back(*last_reduction);
}

// After redirect_all: the unsharded parameters are created by their group's first task of the
// pass (the copy-out there); the buffers a task holds for FSDP2 beyond its own reads.
void Transform::hold_fsdp_buffers() {
  for (auto& [t, buffers] : create_at_) {
    Task& task = s_.tasks[t];
    for (BufferId b : buffers) {
      task.uses.erase(std::remove(task.uses.begin(), task.uses.end(), b), task.uses.end());
      if (std::find(task.creates.begin(), task.creates.end(), b) == task.creates.end()) task.creates.push_back(b);
    }
  }
  for (auto& [t, buffers] : extra_uses_) {
    Task& task = s_.tasks[t];
    for (BufferId b : buffers) {
      if (std::find(task.creates.begin(), task.creates.end(), b) == task.creates.end() &&
          std::find(task.uses.begin(), task.uses.end(), b) == task.uses.end()) {
        task.uses.push_back(b);
      }
    }
  }
}

}  // namespace comptrain::models::transform_detail

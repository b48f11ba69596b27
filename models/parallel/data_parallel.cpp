#include "comptrain/models/data_parallel.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace comptrain::models {
namespace {

using traces::Phase;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Which pass a task belongs to, for the parameters it needs: a replayed forward op runs in the
// backward pass; copies and codec kernels touch no parameter (their phase does not matter).
Phase pass_of(const Task& task, const traces::Trace& trace) {
  if (task.kind == TaskKind::recompute) return Phase::backward;
  if (task.op) return trace.op(*task.op).phase;
  return Phase::backward;
}

// Replaces every reference to a buffer by `resolve(b)`, keeping each buffer once per list. A
// resident replacement is never created: a creation becomes a use.
template <typename Resolve>
void redirect(Task& task, Resolve resolve, const std::vector<Buffer>& buffers) {
  std::vector<BufferId> creates;
  std::vector<BufferId> uses;
  for (BufferId b : task.creates) {
    const BufferId r = resolve(b);
    (buffers[r].resident ? uses : creates).push_back(r);
  }
  for (BufferId b : task.uses) uses.push_back(resolve(b));
  auto unique = [](std::vector<BufferId>& v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  };
  unique(creates);
  unique(uses);
  uses.erase(std::remove_if(uses.begin(), uses.end(), [&](BufferId b) { return std::binary_search(creates.begin(), creates.end(), b); }),
             uses.end());
  task.creates = std::move(creates);
  task.uses = std::move(uses);
}

// A task to insert, referring to old tasks by index (< n) and to other added tasks by n + index.
struct Added {
  Task task;
  TaskId before = 0;  // inserted just before old task `before` (n: at the end)
};

class Transform {
 public:
  Transform(Schedule& schedule, const traces::Trace& trace, const DataParallelSpec& spec)
      : s_(schedule), trace_(trace), spec_(spec), n_(schedule.tasks.size()), old_buffers_(schedule.buffers.size()) {}

  void run() {
    find_pass_bounds();
    const std::vector<Bucket> buckets = make_buckets();
    const std::int64_t gradient_bytes = sum_bytes(gradients_);
    substitute_.assign(old_buffers_, kKeep);

    // Memory first: the buffers the collectives use must exist when they are made.
    std::optional<BufferId> bucket_copy;
    if (spec_.zero_stage == 0 && !spec_.gradient_as_bucket_view && gradient_bytes > 0) {
      bucket_copy = add_buffer("DDP gradient buckets (a copy of the gradients)", gradient_bytes, MemoryRole::gradient);
    }
    if (spec_.zero_stage >= 1) partition_optimizer_state();
    std::optional<BufferId> reduction_bucket;
    if (spec_.zero_stage >= 2 && !gradients_.empty()) {
      // DeepSpeed copies each gradient into a contiguous reduction bucket of reduce_bucket_size
      // elements (stage_1_and_2.py and stage3.py, contiguous_gradients: true by default), reduces
      // it and keeps this rank's share in a partition of 1/ranks of the gradients; the full
      // gradient is freed once its bucket has been reduced.
      std::int64_t elements = 0;
      std::int64_t element_size = 1;
      for (BufferId g : gradients_) {
        const auto& t = trace_.tensor(*s_.buffers[g].tensor);
        elements += t.elements();
        element_size = std::max<std::int64_t>(element_size, traces::element_size(t.dtype));
      }
      reduction_bucket = add_buffer("ZeRO reduction bucket", std::min(elements, spec_.reduce_bucket_elements) * element_size, MemoryRole::gradient);
      const BufferId part = add_buffer(partition_name("gradient partition"), ceil_div(gradient_bytes, spec_.ranks), MemoryRole::gradient);
      for (BufferId g : gradients_) {
        s_.buffers[g].held_to_end = false;
        s_.buffers[g].resident = false;
        optimizer_substitute_[g] = part;
      }
    }
    if (spec_.zero_stage == 3) partition_parameters();

    // The reductions.
    std::optional<TaskId> last_reduction;  // as n + index into added_
    std::size_t index = 0;
    for (const Bucket& bucket : buckets) {
      Task c;
      c.kind = TaskKind::collective;
      c.stream = Stream::comm;
      c.collective = spec_.zero_stage == 0 ? CollectiveKind::all_reduce : CollectiveKind::reduce_scatter;
      c.bytes = bucket.bytes;
      c.uses = bucket.gradients;
      if (bucket_copy) c.uses.push_back(*bucket_copy);
      if (reduction_bucket) c.uses.push_back(*reduction_bucket);
      // Stage 1 reduces after the whole backward pass (DeepSpeed's reduce_gradients at the end of
      // backward when gradients are not partitioned); the others as soon as the bucket is ready.
      const TaskId ready = spec_.zero_stage == 1 ? last_backward_ : bucket.ready;
      c.after = {ready};
      c.name = task_name(spec_.zero_stage == 0 ? "all-reduce of gradient bucket" : "reduce-scatter of gradient bucket", index++, bucket.bytes);
      last_reduction = add_task(std::move(c), ready + 1);
      // Without overlap_comm DeepSpeed reduces on the compute stream's side: the next kernel waits.
      if (spec_.zero_stage >= 1 && !spec_.overlap_comm) {
        if (const auto next = next_compute_after(ready)) extra_after_[*next].push_back(*last_reduction);
      }
    }
    if (last_reduction && first_optimizer_) extra_after_[*first_optimizer_].push_back(*last_reduction);

    if (spec_.zero_stage >= 1) shard_optimizer_tasks();
    if (spec_.zero_stage == 3) {
      gather_parameters();
    } else if (spec_.zero_stage >= 1 && last_optimizer_) {
      // Stages 1 and 2 all-gather the updated parameters at the end of the step.
      if (const std::int64_t weight_bytes = sum_bytes(weights_); weight_bytes > 0) {
        Task c;
        c.kind = TaskKind::collective;
        c.stream = Stream::comm;
        c.collective = CollectiveKind::all_gather;
        c.bytes = weight_bytes;
        c.after = {*last_optimizer_};
        c.name = task_name("all-gather of the updated parameters", 0, weight_bytes);
        add_task(std::move(c), *last_optimizer_ + 1);
      }
    }

    for (TaskId t = 0; t < n_; ++t) {
      Task& task = s_.tasks[t];
      const Phase pass = pass_of(task, trace_);
      const bool optimizer = task.op && pass == Phase::optimizer;
      redirect(
          task,
          [&](BufferId b) {
            if (b >= old_buffers_) return b;
            if (optimizer) {
              if (auto it = optimizer_substitute_.find(b); it != optimizer_substitute_.end()) return it->second;
            } else if (auto it = gathered_.find({static_cast<int>(pass), b}); it != gathered_.end()) {
              return it->second;
            }
            return substitute_[b] == kKeep ? b : substitute_[b];
          },
          s_.buffers);
    }
    assemble();
  }

 private:
  static constexpr BufferId kKeep = static_cast<BufferId>(-1);

  struct Bucket {
    std::vector<BufferId> gradients;
    std::int64_t bytes = 0;
    TaskId ready = 0;
  };

  static std::string task_name(const char* what, std::size_t index, std::int64_t bytes) {
    return std::string(what) + " " + std::to_string(index) + " (" + std::to_string(bytes) + " B)";
  }
  std::string partition_name(const char* what) const { return std::string(what) + " (1/" + std::to_string(spec_.ranks) + ")"; }

  std::int64_t sum_bytes(const std::vector<BufferId>& buffers) const {
    std::int64_t total = 0;
    for (BufferId b : buffers) total += s_.buffers[b].bytes;
    return total;
  }

  BufferId add_buffer(std::string name, std::int64_t bytes, MemoryRole role, bool resident = true) {
    Buffer b;
    b.name = std::move(name);
    b.bytes = bytes;
    b.role = role;
    b.resident = resident;
    s_.buffers.push_back(std::move(b));
    return s_.buffers.size() - 1;
  }

  TaskId add_task(Task task, TaskId before) {
    added_.push_back({std::move(task), before});
    return n_ + added_.size() - 1;
  }

  // The weight gradients (held to the end of the iteration: what the optimizer reads), the
  // parameters, the optimizer's tasks and the last backward task.
  void find_pass_bounds() {
    for (BufferId b = 0; b < old_buffers_; ++b) {
      const Buffer& buffer = s_.buffers[b];
      if (!buffer.tensor) continue;
      if (buffer.role == MemoryRole::gradient && (buffer.held_to_end || buffer.resident)) gradients_.push_back(b);
      if (buffer.role == MemoryRole::weight && buffer.resident) weights_.push_back(b);
    }
    for (TaskId t = 0; t < n_; ++t) {
      const Task& task = s_.tasks[t];
      const Phase pass = pass_of(task, trace_);
      if (task.op && pass == Phase::optimizer) {
        if (!first_optimizer_) first_optimizer_ = t;
        last_optimizer_ = t;
      } else if (task.op && pass == Phase::backward && task.stream == Stream::compute) {
        last_backward_ = t;
      }
    }
  }

  // Buckets in the order the gradients become ready: the last backward op that writes each.
  std::vector<Bucket> make_buckets() const {
    std::vector<std::optional<TaskId>> last(old_buffers_);
    for (TaskId t = 0; t < n_; ++t) {
      const Task& task = s_.tasks[t];
      if (task.kind != TaskKind::op || pass_of(task, trace_) != Phase::backward) continue;
      for (BufferId b : task.creates) last[b] = t;
      for (BufferId b : task.uses) last[b] = t;
    }
    std::vector<std::pair<TaskId, BufferId>> ready;
    for (BufferId g : gradients_) {
      if (last[g]) ready.emplace_back(*last[g], g);
    }
    std::stable_sort(ready.begin(), ready.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    // One open bucket per dtype (DDP's compute_bucket_assignment_by_size keeps dtypes apart);
    // each closes once it holds at least its cap.
    std::map<traces::DType, Bucket> open;
    std::map<traces::DType, int> closed_count;
    std::vector<Bucket> buckets;
    for (const auto& [t, g] : ready) {
      const auto& tensor = trace_.tensor(*s_.buffers[g].tensor);
      Bucket& bucket = open[tensor.dtype];
      bucket.gradients.push_back(g);
      bucket.bytes += s_.buffers[g].bytes;
      bucket.ready = std::max(bucket.ready, t);
      const std::int64_t cap = spec_.zero_stage == 0
                                   ? (closed_count[tensor.dtype] == 0 ? spec_.first_bucket_bytes : spec_.bucket_cap_bytes)
                                   : spec_.reduce_bucket_elements * static_cast<std::int64_t>(traces::element_size(tensor.dtype));
      if (bucket.bytes >= cap) {
        buckets.push_back(std::move(bucket));
        open.erase(tensor.dtype);
        ++closed_count[tensor.dtype];
      }
    }
    for (auto& [dtype, bucket] : open) buckets.push_back(std::move(bucket));
    std::stable_sort(buckets.begin(), buckets.end(), [](const Bucket& a, const Bucket& b) { return a.ready < b.ready; });
    return buckets;
  }

  std::optional<TaskId> next_compute_after(TaskId t) const {
    for (TaskId u = t + 1; u < n_; ++u) {
      if (s_.tasks[u].stream == Stream::compute) return u;
    }
    return std::nullopt;
  }

  // The optimizer state becomes one resident partition of 1/ranks of its bytes.
  void partition_optimizer_state() {
    std::vector<BufferId> members;
    for (BufferId b = 0; b < old_buffers_; ++b) {
      if (s_.buffers[b].role == MemoryRole::optimizer_state && s_.buffers[b].resident) members.push_back(b);
    }
    if (members.empty()) return;
    const BufferId part = add_buffer(partition_name("optimizer state partition"), ceil_div(sum_bytes(members), spec_.ranks), MemoryRole::optimizer_state);
    for (BufferId b : members) {
      substitute_[b] = part;
      s_.buffers[b].resident = false;  // no longer referenced: never allocated
    }
  }

  // ZeRO-3: the parameters become one resident partition; the passes read gathered copies
  // (gather_parameters), the optimizer the partition.
  void partition_parameters() {
    if (weights_.empty()) return;
    parameter_partition_ = add_buffer(partition_name("parameter partition"), ceil_div(sum_bytes(weights_), spec_.ranks), MemoryRole::weight);
    for (BufferId w : weights_) {
      substitute_[w] = *parameter_partition_;
      optimizer_substitute_[w] = *parameter_partition_;
      s_.buffers[w].resident = false;
    }
  }

  // The step's kernels run over this rank's partition: 1/ranks of the elements, so of the time
  // and of the temporaries they make.
  void shard_optimizer_tasks() {
    for (TaskId t = 0; t < n_; ++t) {
      Task& task = s_.tasks[t];
      if (!task.op || pass_of(task, trace_) != Phase::optimizer) continue;
      task.seconds /= spec_.ranks;
      for (BufferId b : task.creates) {
        Buffer& buffer = s_.buffers[b];
        if (!buffer.resident && buffer.role == MemoryRole::temporary) buffer.bytes = ceil_div(buffer.bytes, spec_.ranks);
      }
    }
  }

  // ZeRO-3: each pass all-gathers an op's parameters before the op, into buffers that live
  // until the pass's last use of them. The gather of the k-th group waits for the end of the
  // first op of group k-2, so one group is fetched while the previous one computes (DeepSpeed
  // prefetches the modules about to run; one op of look-ahead is this model's simplification).
  void gather_parameters() {
    if (!parameter_partition_) return;
    std::vector<bool> is_weight(old_buffers_, false);
    for (BufferId w : weights_) is_weight[w] = true;
    struct Group {
      TaskId first_user = 0;
      std::vector<BufferId> buffers;
      std::int64_t bytes = 0;
      Phase pass = Phase::forward;
    };
    std::vector<Group> groups;
    for (TaskId t = 0; t < n_; ++t) {
      const Task& task = s_.tasks[t];
      const Phase pass = pass_of(task, trace_);
      if (!task.op || pass == Phase::optimizer) continue;
      Group group;
      group.first_user = t;
      group.pass = pass;
      for (BufferId b : task.uses) {
        if (b >= old_buffers_ || !is_weight[b]) continue;
        const auto key = std::make_pair(static_cast<int>(pass), b);
        if (gathered_.count(key) != 0) continue;
        Buffer full = s_.buffers[b];
        full.name += pass == Phase::forward ? " (gathered for forward)" : " (gathered for backward)";
        full.resident = false;
        full.held_to_end = false;
        group.bytes += full.bytes;
        s_.buffers.push_back(std::move(full));
        gathered_[key] = s_.buffers.size() - 1;
        group.buffers.push_back(s_.buffers.size() - 1);
      }
      if (!group.buffers.empty()) groups.push_back(std::move(group));
    }
    for (std::size_t k = 0; k < groups.size(); ++k) {
      const Group& group = groups[k];
      Task c;
      c.kind = TaskKind::collective;
      c.stream = Stream::comm;
      c.collective = CollectiveKind::all_gather;
      c.bytes = group.bytes;
      c.creates = group.buffers;
      c.uses = {*parameter_partition_};
      TaskId before = 0;
      if (k >= 2) {
        c.after = {groups[k - 2].first_user};
        before = groups[k - 2].first_user + 1;
      }
      c.name = task_name(group.pass == Phase::forward ? "all-gather of parameters for forward" : "all-gather of parameters for backward", k,
                         group.bytes);
      extra_after_[group.first_user].push_back(add_task(std::move(c), before));
    }
  }

  // The new task list: added tasks just before the old task they precede, every wait renumbered.
  void assemble() {
    std::vector<std::vector<std::size_t>> before(n_ + 1);
    for (std::size_t i = 0; i < added_.size(); ++i) before[added_[i].before].push_back(i);
    std::vector<TaskId> order;  // old ids and n + added index, in the new order
    order.reserve(n_ + added_.size());
    for (TaskId t = 0; t <= n_; ++t) {
      for (std::size_t i : before[t]) order.push_back(n_ + i);
      if (t < n_) order.push_back(t);
    }
    std::vector<TaskId> new_id(order.size());
    for (TaskId pos = 0; pos < order.size(); ++pos) new_id[order[pos]] = pos;
    std::vector<Task> tasks;
    tasks.reserve(order.size());
    for (TaskId id : order) {
      Task task = id < n_ ? std::move(s_.tasks[id]) : std::move(added_[id - n_].task);
      if (auto it = extra_after_.find(id); id < n_ && it != extra_after_.end()) {
        task.after.insert(task.after.end(), it->second.begin(), it->second.end());
      }
      for (TaskId& a : task.after) a = new_id[a];
      std::sort(task.after.begin(), task.after.end());
      task.after.erase(std::unique(task.after.begin(), task.after.end()), task.after.end());
      tasks.push_back(std::move(task));
    }
    s_.tasks = std::move(tasks);
  }

  Schedule& s_;
  const traces::Trace& trace_;
  const DataParallelSpec& spec_;
  const std::size_t n_;
  const std::size_t old_buffers_;
  std::vector<BufferId> gradients_;
  std::vector<BufferId> weights_;
  std::optional<TaskId> first_optimizer_;
  std::optional<TaskId> last_optimizer_;
  TaskId last_backward_ = 0;
  std::optional<BufferId> parameter_partition_;
  std::vector<Added> added_;
  std::vector<BufferId> substitute_;                        // per old buffer: its partition, or kKeep
  std::map<BufferId, BufferId> optimizer_substitute_;       // what the optimizer's tasks read instead
  std::map<std::pair<int, BufferId>, BufferId> gathered_;   // ZeRO-3: (pass, parameter) -> its gathered copy
  std::map<TaskId, std::vector<TaskId>> extra_after_;       // old task -> waits to add (old ids or n + added index)
};

}  // namespace

void check_data_parallel(const DataParallelSpec& spec) {
  if (spec.ranks < 1) throw std::invalid_argument("data parallel: ranks must be at least 1");
  if (spec.zero_stage < 0 || spec.zero_stage > 3) throw std::invalid_argument("data parallel: zero_stage must be 0, 1, 2 or 3");
  if (spec.bucket_cap_bytes < 1 || spec.first_bucket_bytes < 1) throw std::invalid_argument("data parallel: bucket sizes must be positive");
  if (spec.reduce_bucket_elements < 1) throw std::invalid_argument("data parallel: reduce_bucket_elements must be positive");
}

void apply_data_parallel(Schedule& schedule, const traces::Trace& trace, const DataParallelSpec& spec) {
  check_data_parallel(spec);
  if (spec.ranks == 1) return;
  Transform(schedule, trace, spec).run();
}

}  // namespace comptrain::models

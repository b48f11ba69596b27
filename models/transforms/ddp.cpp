// DDP's gradient buckets (README.md, "Buckets"), part of data parallelism as a schedule
// transform (data_parallel_transform.hpp).

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "data_parallel_transform.hpp"

namespace comptrain::models::transform_detail {

using traces::Phase;

// Buckets in the order the gradients become ready: the last backward op that writes each.
std::vector<Transform::Bucket> Transform::make_buckets() const {
  const std::vector<std::pair<TaskId, BufferId>> ready = ready_gradients();
  // One open bucket per dtype (DDP's compute_bucket_assignment_by_size keeps dtypes apart);
  // each closes once it holds at least its cap.
  // Expert parameters' gradients apart from the others when their group differs (expert_split),
  // as Megatron-LM keeps expert and dense parameters in separate buffers (its
  // param_and_grad_buffer per expert-data-parallel group).
  using Key = std::pair<traces::DType, bool>;
  std::map<Key, Bucket> open;
  std::map<Key, int> closed_count;
  std::vector<Bucket> buckets;
  // ZeRO-2 and ZeRO-3 reduce the open bucket before adding a gradient that would take it past
  // reduce_bucket_size elements (stage_1_and_2.py@v0.13.3 line 926 and stage3.py@v0.13.3 line
  // 1221, reduce_independent_p_g_buckets_and_remove_grads), so no bucket holds more (but a lone
  // larger gradient); DDP and stage 1 close a bucket once it holds at least its cap.
  const bool before_overflow = spec_.zero_stage >= 2;
  for (const auto& [t, g] : ready) {
    const auto& tensor = trace_.tensor(*s_.buffers[g].tensor);
    const Key key{tensor.dtype, expert_split() && is_expert_parameter(tensor.name)};
    if (before_overflow) {
      const auto it = open.find(key);
      if (it != open.end() && !it->second.gradients.empty() &&
          it->second.bytes + s_.buffers[g].bytes > spec_.reduce_bucket_elements * gradient_element_size(tensor)) {
        buckets.push_back(std::move(it->second));
        open.erase(it);
        ++closed_count[key];
      }
    }
    Bucket& bucket = open[key];
    bucket.expert = key.second;
    bucket.gradients.push_back(g);
    bucket.bytes += s_.buffers[g].bytes;
    bucket.ready = std::max(bucket.ready, t);
    const std::int64_t cap = spec_.zero_stage == 0
                                 ? (closed_count[key] == 0 ? spec_.first_bucket_bytes : spec_.bucket_cap_bytes)
                                 : spec_.reduce_bucket_elements * gradient_element_size(tensor);
    if (!before_overflow && bucket.bytes >= cap) {
      buckets.push_back(std::move(bucket));
      open.erase(key);
      ++closed_count[key];
    }
  }
  for (auto& [key, bucket] : open) buckets.push_back(std::move(bucket));
  std::stable_sort(buckets.begin(), buckets.end(), [](const Bucket& a, const Bucket& b) { return a.ready < b.ready; });
  return buckets;
}

// DDP's copies between the gradients and its buckets when they are not views of each other
// (gradient_as_bucket_view false, PyTorch's default; pytorch/pytorch@ad78a7b3
// torch/csrc/distributed/c10d/reducer.cpp). Copy-in: as each gradient becomes ready, the
// autograd hook (mark_variable_ready_dense) writes it into its bucket view on the backward
// pass's stream, one kernel per gradient (at::mul_out dividing by the world size as it copies,
// or copy_ under a comm hook): timed here as one task per bucket, once its last gradient is
// ready, which the bucket's reduction waits for. Without a platform it is not timed (nullopt).
std::optional<TaskId> Transform::ddp_copy_in(const Bucket& bucket, BufferId bucket_copy, TaskId ready, std::size_t index) {
  if (platform_ == nullptr) return std::nullopt;
  Task copy = framework_kernel(task_name("DDP copy-in of the gradients into bucket", index, bucket.bytes), 2.0 * static_cast<double>(bucket.bytes),
                               static_cast<int>(bucket.gradients.size()));
  copy.after = {ready};
  copy.uses = bucket.gradients;
  copy.uses.push_back(bucket_copy);
  return add_task(std::move(copy), ready + 1);
}

// Copy-out: finalize_backward waits for each bucket's reduction on the current stream, then
// finalize_bucket_dense copies every bucket view back into its gradient (copy_bucket_to_grad),
// one kernel per gradient, before the optimizer can read them. Without a platform not timed.
void Transform::ddp_copy_out(BufferId bucket_copy, TaskId last_reduction, TaskId first_optimizer) {
  if (platform_ == nullptr) return;
  const std::int64_t bytes = sum_bytes(gradients_);
  Task copy = framework_kernel(task_name("DDP copy-out of the reduced buckets into the gradients", 0, bytes), 2.0 * static_cast<double>(bytes),
                               static_cast<int>(gradients_.size()));
  copy.after = {last_reduction};
  copy.uses = gradients_;
  copy.uses.push_back(bucket_copy);
  add_task(std::move(copy), first_optimizer);
}

}  // namespace comptrain::models::transform_detail

#include "comptrain/traces/summary.hpp"

namespace comptrain::traces {

TraceSummary summarize(const Trace& trace) {
  TraceSummary s;
  s.name = trace.name();
  s.batch_size = trace.batch_size();
  s.ops = trace.ops().size();
  s.tensors = trace.tensors().size();
  for (OpIndex o = 0; o < trace.ops().size(); ++o) {
    const auto phase = static_cast<std::size_t>(trace.op(o).phase);
    ++s.ops_by_phase[phase];
    if (trace.op(o).host_sync) ++s.host_sync_ops;
    s.flops_by_phase[phase] += trace.flops(o);
  }
  for (TensorIndex t = 0; t < trace.tensors().size(); ++t) {
    const Tensor& tensor = trace.tensor(t);
    if (trace.storage_of(t) != t) continue;  // count each storage once
    at(s.allocated_by_role, tensor.role) += tensor.bytes();
    if (tensor.role == TensorRole::weight) s.parameters += tensor.elements();
    if (tensor.role == TensorRole::activation) {
      ++s.saved_activation_tensors;
      if (tensor.scales_with_batch()) s.saved_activation_bytes_per_sample += tensor.bytes() / trace.batch_size();
    }
  }
  s.saved_activation_bytes = at(s.allocated_by_role, TensorRole::activation);

  const auto order = trace.recorded_order();
  const Liveness liveness = compute_liveness(trace, order);
  s.peak_bytes = liveness.peak_bytes;
  if (!order.empty()) {
    s.peak_op = order[liveness.peak_step];
    s.live_at_peak_by_role = liveness.live_by_step[liveness.peak_step];
    s.live_at_peak = liveness.live_at_peak;
  }
  return s;
}

}  // namespace comptrain::traces

#pragma once
// One training iteration: operations over tensors, with their dependencies as a DAG.
//
// The trace is recorded at one batch size. Everything that grows with the batch is stored so
// that the trace can be materialised at any other batch size exactly:
//  - a tensor names its batch dimension; its extent there is a multiple of the batch size;
//  - an op's FLOPs and bytes are `fixed + per_sample * batch` (BatchLinear), so rescaling
//    never rounds and b -> b' -> b gives back the original bit for bit.

#include <array>
#include <boost/graph/compressed_sparse_row_graph.hpp>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/support/input_error.hpp"
#include "comptrain/traces/vocabulary.hpp"

namespace comptrain::traces {

using TensorIndex = std::size_t;  // position in Trace::tensors()
using OpIndex = std::size_t;      // position in Trace::ops()

// A quantity that is affine in the batch size: value(batch) = fixed + per_sample * batch.
struct BatchLinear {
  std::int64_t fixed = 0;
  std::int64_t per_sample = 0;

  constexpr std::int64_t at(std::int64_t batch) const { return fixed + per_sample * batch; }
  constexpr BatchLinear& operator+=(const BatchLinear& other) {
    fixed += other.fixed;
    per_sample += other.per_sample;
    return *this;
  }
  friend constexpr bool operator==(const BatchLinear&, const BatchLinear&) = default;
};

// The longest measured duration one op may carry: 1 hour. A single GPU op (its kernels) running
// longer than that is not a training trace but a unit or recording error (1e300 s reached the
// simulator as an infinite time, defect 07); traces/FORMAT.md, "Ops", documents it.
inline constexpr double kMaxMeasuredSeconds = 3600.0;

// A duration measured on a real device, at a given batch size, in [0, kMaxMeasuredSeconds]
// (checked by the Trace constructor). The op-time model scales it linearly to other batch sizes.
struct MeasuredDuration {
  double seconds = 0.0;
  std::string device;
  std::int64_t batch_size = 1;
  friend bool operator==(const MeasuredDuration&, const MeasuredDuration&) = default;
};

// Features of a tensor's values, measured on one captured batch (traces/FORMAT.md, "values"):
// what a compression-ratio model needs beyond the tensor's size. Each field is optional; a
// missing one means "not measured" (a consumer uses its own default). Values are in memory order,
// cut into blocks of 32 consecutive values (the last one may be shorter); min, max and the
// standard deviation count the finite values only.
struct ValueFeatures {
  std::optional<double> zero_fraction;        // fraction of the values that are exactly zero, in [0, 1]
  std::optional<double> spread;               // standard deviation / (max - min), in [0, 0.5]; 0 when max == min
  std::optional<double> zero_block_fraction;  // fraction of the blocks whose values are all zero, in [0, 1]
  // Geometric mean over the blocks that are not all zero of a block's coded magnitude relative to
  // max - min (FORMAT.md gives the definition), >= 0; 0 when max == min or every block is zero.
  std::optional<double> block_scale;
  // max - min over the finite values, in the tensor's own units, >= 0: turns an absolute error
  // bound into the relative one the ratio models take (eb_rel = eb_abs / range).
  std::optional<double> range;

  bool empty() const { return !zero_fraction && !spread && !zero_block_fraction && !block_scale && !range; }
  friend bool operator==(const ValueFeatures&, const ValueFeatures&) = default;
};

// The fields of ValueFeatures in file order, with their JSON keys and valid ranges [0, max]
// (the Trace constructor checks them; the reader and the writer follow this order).
struct ValueFeatureField {
  std::string_view key;
  std::optional<double> ValueFeatures::*member;
  double max;
  std::string_view expected;  // for messages: "a fraction in [0, 1]"
};
inline constexpr std::array<ValueFeatureField, 5> kValueFeatureFields{{
    {"zero_fraction", &ValueFeatures::zero_fraction, 1.0, "a fraction in [0, 1]"},
    {"spread", &ValueFeatures::spread, 0.5, "a number in [0, 0.5] (standard deviation / range)"},
    {"zero_block_fraction", &ValueFeatures::zero_block_fraction, 1.0, "a fraction in [0, 1]"},
    {"block_scale", &ValueFeatures::block_scale, std::numeric_limits<double>::infinity(), "a finite number >= 0"},
    {"range", &ValueFeatures::range, std::numeric_limits<double>::infinity(), "a finite number >= 0 (max - min)"},
}};

// Gradient statistics of a saved activation, measured on one captured training step
// (traces/FORMAT.md, "Gradient statistics"): what the error-propagation model of lossy
// compression needs (models/README.md, "Gradient error of a compressed activation"). They sit on
// the tensor a conv/linear op reads as its input, the one whose saved copy its weight gradient
// multiplies. Each field is optional; missing means "not measured". The activation's own zero
// fraction and range are in `values` (of the storage's last forward writer, FORMAT.md "values").
struct GradientStatistics {
  // RMS over all entries of the gradient of the loss with respect to the consuming op's output
  // (delta), the factor that multiplies this activation in the weight gradient; >= 0. Measured
  // at `batch_size`; with a mean-reduced loss delta scales as 1 / batch (delta_rms_at).
  std::optional<double> delta_rms;
  // RMS over all entries of the consuming op's weight gradient, the same step; >= 0. Measured at
  // `batch_size` and kept as measured at other batches (FORMAT.md says why).
  std::optional<double> weight_grad_rms;
  // Products each weight-gradient entry sums (N): batch x output positions for a convolution,
  // batch x tokens for a linear layer; at the trace's batch size; a whole number >= 1 (at most
  // 2^53, exact in a double), a multiple of the batch size on a tensor that scales with it
  // (Trace::rescaled scales it exactly).
  std::optional<double> terms;
  // The batch size delta_rms and weight_grad_rms were measured at; absent = the trace's batch
  // size. Trace::rescaled sets it (and drops it when the batch comes back to it); a value equal to
  // the trace's batch size is dropped when the trace is built, so that every trace has one form.
  // Only beside delta_rms or weight_grad_rms.
  std::optional<std::int64_t> batch_size;

  bool empty() const { return !delta_rms && !weight_grad_rms && !terms && !batch_size; }
  // delta_rms at the batch size `trace_batch` of the trace holding these statistics, under a
  // mean-reduced loss (each entry of delta is 1 / batch times a per-sample gradient):
  // delta_rms x measured batch / trace_batch. Empty when delta_rms is.
  std::optional<double> delta_rms_at(std::int64_t trace_batch) const {
    if (!delta_rms) return std::nullopt;
    return *delta_rms * static_cast<double>(batch_size.value_or(trace_batch)) / static_cast<double>(trace_batch);
  }
  friend bool operator==(const GradientStatistics&, const GradientStatistics&) = default;
};

// The number fields of GradientStatistics in file order, with their JSON keys and valid ranges
// [min, max] (the Trace constructor checks them; the reader and the writer follow this order).
// `batch_size`, an integer, comes after them.
struct GradientStatisticsField {
  std::string_view key;
  std::optional<double> GradientStatistics::*member;
  double min;
  double max;
  bool whole;                 // a count: a whole number
  std::string_view expected;  // for messages
};
inline constexpr double kMaxGradientTerms = 9007199254740992.0;  // 2^53: every whole number up to it is a double
inline constexpr std::array<GradientStatisticsField, 3> kGradientStatisticsFields{{
    {"delta_rms", &GradientStatistics::delta_rms, 0.0, std::numeric_limits<double>::infinity(), false,
     "a finite number >= 0 (an RMS)"},
    {"weight_grad_rms", &GradientStatistics::weight_grad_rms, 0.0, std::numeric_limits<double>::infinity(), false,
     "a finite number >= 0 (an RMS)"},
    {"terms", &GradientStatistics::terms, 1.0, kMaxGradientTerms, true,
     "a whole number in [1, 2^53] (products per weight-gradient entry)"},
}};

struct Tensor {
  std::uint64_t id = 0;  // as in the file; unique within the trace
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;          // at the trace's batch size
  TensorRole role = TensorRole::temporary;
  std::optional<std::size_t> batch_dim;     // the dimension that grows with the batch, if any
  std::optional<TensorIndex> view_of;       // shares storage with this tensor (in-place, reshape)
  // Features of this tensor's values as its producer wrote them (empty: not measured). For the
  // storage a compress rule compresses, the strategy reads those of the tensor written by the
  // storage's last forward writer (FORMAT.md, "values").
  ValueFeatures values;
  // Gradient statistics of this tensor as the input of a conv/linear op (empty: not measured;
  // FORMAT.md, "Gradient statistics").
  GradientStatistics gradient;

  // Derived from the ops when the trace is built; never read from a file.
  std::optional<OpIndex> producer;
  std::vector<OpIndex> consumers;

  std::int64_t elements() const;
  std::int64_t bytes() const { return elements() * element_size(dtype); }
  bool scales_with_batch() const { return batch_dim.has_value(); }
  bool is_view() const { return view_of.has_value(); }
  friend bool operator==(const Tensor&, const Tensor&) = default;
};

// What a communication op (OpKind::communication) does and over which group of ranks. Nothing
// else is stored: the bytes moved are its tensors' (vocabulary.hpp, CommunicationKind).
struct Communication {
  CommunicationKind kind = CommunicationKind::all_reduce;
  ParallelGroup group = ParallelGroup::data;
  // 0: an ordinary collective. > 0 (all_gather only): a ring exchange over `ring` ranks of the
  // group that overlaps the next op (context parallelism's ring attention, traces/FORMAT.md
  // "Communication"): the op's outputs are its receive buffers, one block each; every block
  // passes ring - 1 hops, the traffic of an all_gather whose whole is `ring` times the outputs.
  // It runs on a stream of its own beside the op that follows it, which does not wait for it;
  // the op after that one does.
  std::int64_t ring = 0;
  // 0: the ops after it wait for it (the compute stream's order). n > 0 (not with `ring`): it
  // runs on a stream of its own beside the next n ops that are not themselves overlapped
  // collectives, which do not wait for it; the op after those does (Megatron-LM's backward
  // tensor-parallel collectives behind the weight- and input-gradient GEMMs, traces/FORMAT.md
  // "Communication"). A ring overlaps the one op after it in the same way.
  std::int64_t overlap = 0;
  // 0: one collective after the op before it. n >= 2 (reduce_scatter only, not with `overlap`):
  // the op before it makes its input in n pieces and each piece is reduce-scattered as soon as it
  // is made, beside the next piece's computation; the last piece's reduction runs after the op,
  // and the op after the collective waits for it (Transformer Engine's `pipeline` Userbuffers
  // overlap of a row-parallel GEMM with its reduce-scatter, traces/FORMAT.md "Communication").
  std::int64_t splits = 0;
  Communication() = default;
  Communication(CommunicationKind what, ParallelGroup over, std::int64_t ring_ranks = 0) : kind(what), group(over), ring(ring_ranks) {}
  friend bool operator==(const Communication&, const Communication&) = default;
};

struct Op {
  std::uint64_t id = 0;  // as in the file; unique within the trace
  std::string name;
  Phase phase = Phase::forward;
  OpKind kind = OpKind::other;
  std::vector<TensorIndex> inputs;
  std::vector<TensorIndex> outputs;
  std::vector<OpIndex> after;  // control dependencies in addition to the data flow
  BatchLinear flops;           // floating-point operations; a multiply-add counts as 2
  BatchLinear bytes_read;
  BatchLinear bytes_written;
  std::optional<MeasuredDuration> measured;
  // Set exactly on ops of kind communication (the constructor checks it).
  std::optional<Communication> communication;
  // The op's host call returns only once the GPU has run it: its output's size depends on the
  // data (torch.nonzero, torch.where(mask): "When input is on CUDA, torch.nonzero() causes
  // host-device synchronization", PyTorch's torch.nonzero documentation), it reads a value back
  // (.item()), or the code synchronizes the stream right after it (Megatron-LM's token
  // dispatcher). The launching thread issues nothing after it until then (format version 8).
  bool host_sync = false;
  friend bool operator==(const Op&, const Op&) = default;
};

// Thrown when a trace is inconsistent. `location()` is a JSON path into the trace file
// format (e.g. "/ops/12/inputs/0"), so a reader can point at the offending element.
class TraceError : public InputError {
 public:
  TraceError(std::string location, const std::string& message)
      : InputError(location + ": " + message), location_(std::move(location)) {}
  const std::string& location() const { return location_; }

 private:
  std::string location_;
};

// The op DAG: vertex i is op i; an edge u -> v means v must wait for u: v reads a tensor u
// writes (data), names u in `after` (control), or writes a view of a storage that u read or
// wrote earlier in the recorded order (in place; traces/FORMAT.md, "Views and in-place ops").
// Only the in-place edges that the others do not already imply are stored, so the edge count
// is linear in the ops' inputs and outputs. Compressed sparse row: two arrays, no allocation
// per edge; out-edges only (nothing needs in-edges).
struct DependencyEdge {
  std::optional<TensorIndex> tensor;  // the tensor through which v depends on u; empty for `after`
};
using OpGraph = boost::compressed_sparse_row_graph<boost::directedS, boost::no_property, DependencyEdge>;

class Trace {
 public:
  // Validates and indexes the trace; throws TraceError on the first inconsistency found:
  // an index out of range, a duplicate id, a tensor written by two ops, a view that is not
  // of the same role as its base, a batch dimension whose extent is not a multiple of
  // `batch_size`, an activation that no backward op reads, a cycle, or an op list that is
  // not in dependency order (the op list is the recorded execution order).
  Trace(std::string name, std::int64_t batch_size, std::vector<Tensor> tensors, std::vector<Op> ops,
        std::map<std::string, std::string> metadata = {});

  const std::string& name() const { return name_; }
  std::int64_t batch_size() const { return batch_size_; }
  const std::vector<Tensor>& tensors() const { return tensors_; }
  const std::vector<Op>& ops() const { return ops_; }
  const Tensor& tensor(TensorIndex index) const { return tensors_.at(index); }
  const Op& op(OpIndex index) const { return ops_.at(index); }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const OpGraph& graph() const { return graph_; }

  // The tensor whose storage `index` uses (itself unless it is a view).
  TensorIndex storage_of(TensorIndex index) const { return storage_.at(index); }

  // Op quantities at this trace's batch size.
  std::int64_t flops(OpIndex op) const { return ops_.at(op).flops.at(batch_size_); }
  std::int64_t bytes_read(OpIndex op) const { return ops_.at(op).bytes_read.at(batch_size_); }
  std::int64_t bytes_written(OpIndex op) const { return ops_.at(op).bytes_written.at(batch_size_); }

  // The recorded execution order: 0, 1, ..., ops().size() - 1.
  std::vector<OpIndex> recorded_order() const;

  // The same iteration at another batch size (>= 1). Exact and invertible. Value features and
  // the gradient RMSs are kept as measured (gradient statistics gain the batch they were measured
  // at); gradient terms on tensors that scale with the batch scale with it.
  Trace rescaled(std::int64_t batch_size) const;

  // Same name, batch size, metadata, tensors and ops (the graph follows from them).
  friend bool operator==(const Trace& a, const Trace& b);

 private:
  std::string name_;
  std::int64_t batch_size_;
  std::vector<Tensor> tensors_;
  std::vector<Op> ops_;
  std::map<std::string, std::string> metadata_;
  std::vector<TensorIndex> storage_;
  OpGraph graph_;
};

// Throws TraceError when `order` is not a permutation of the trace's ops that respects every
// dependency.
void check_execution_order(const Trace& trace, std::span<const OpIndex> order);

}  // namespace comptrain::traces

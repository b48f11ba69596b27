#include "comptrain/traces/trace.hpp"

#include <array>
#include <boost/graph/depth_first_search.hpp>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <string>

namespace comptrain::traces {
namespace {

std::string describe(const Tensor& t) { return "tensor '" + t.name + "' (id " + std::to_string(t.id) + ")"; }
std::string describe(const Op& op) { return "op '" + op.name + "' (id " + std::to_string(op.id) + ")"; }
std::string tensor_path(std::size_t i) { return "/tensors/" + std::to_string(i); }
std::string op_path(std::size_t i) { return "/ops/" + std::to_string(i); }

void check_tensor_shapes(const std::vector<Tensor>& tensors, std::int64_t batch_size) {
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    std::int64_t elements = 1;
    for (std::size_t d = 0; d < t.shape.size(); ++d) {
      if (t.shape[d] < 0) {
        throw TraceError(tensor_path(i) + "/shape/" + std::to_string(d),
                         "extent " + std::to_string(t.shape[d]) + " is negative; expected >= 0");
      }
      if (__builtin_mul_overflow(elements, t.shape[d], &elements)) {
        throw TraceError(tensor_path(i) + "/shape", "the tensor's size in bytes overflows 64 bits");
      }
    }
    std::int64_t bytes = 0;
    if (__builtin_mul_overflow(elements, element_size(t.dtype), &bytes)) {
      throw TraceError(tensor_path(i) + "/shape", "the tensor's size in bytes overflows 64 bits");
    }
    if (t.batch_dim) {
      if (*t.batch_dim >= t.shape.size()) {
        throw TraceError(tensor_path(i) + "/batch_dim",
                         "batch dimension " + std::to_string(*t.batch_dim) + " is out of range for a tensor of rank " +
                             std::to_string(t.shape.size()));
      }
      const std::int64_t extent = t.shape[*t.batch_dim];
      if (extent <= 0 || extent % batch_size != 0) {
        throw TraceError(tensor_path(i) + "/shape/" + std::to_string(*t.batch_dim),
                         "extent " + std::to_string(extent) + " of the batch dimension is not a positive multiple of the batch size " +
                             std::to_string(batch_size));
      }
    }
  }
}

// Value features (FORMAT.md, "values"): each given field finite and within its range.
void check_value_features(const std::vector<Tensor>& tensors) {
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    for (const ValueFeatureField& field : kValueFeatureFields) {
      const std::optional<double>& value = tensors[i].values.*field.member;
      if (!value || (*value >= 0 && *value <= field.max && std::isfinite(*value))) continue;
      std::array<char, 32> text{};
      const auto written = std::to_chars(text.data(), text.data() + text.size(), *value);
      throw TraceError(tensor_path(i) + "/values/" + std::string(field.key),
                       "found " + std::string(text.data(), written.ptr) + "; expected " + std::string(field.expected));
    }
  }
}

// A cost is never negative and must be representable at the trace's batch size.
void check_quantity(const BatchLinear& q, std::int64_t batch_size, const std::string& path) {
  if (q.fixed < 0 || q.per_sample < 0) {
    throw TraceError(path, "fixed " + std::to_string(q.fixed) + " and per_sample " + std::to_string(q.per_sample) +
                               " must both be >= 0");
  }
  std::int64_t scaled = 0;
  if (__builtin_mul_overflow(q.per_sample, batch_size, &scaled) || __builtin_add_overflow(scaled, q.fixed, &scaled)) {
    throw TraceError(path, "fixed + per_sample * batch_size overflows 64 bits at batch size " + std::to_string(batch_size));
  }
}

}  // namespace

std::int64_t Tensor::elements() const {
  return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
}

Trace::Trace(std::string name, std::int64_t batch_size, std::vector<Tensor> tensors, std::vector<Op> ops,
             std::map<std::string, std::string> metadata)
    : name_(std::move(name)),
      batch_size_(batch_size),
      tensors_(std::move(tensors)),
      ops_(std::move(ops)),
      metadata_(std::move(metadata)),
      graph_(ops_.size()) {
  if (batch_size_ < 1) {
    throw TraceError("/batch_size", "batch size " + std::to_string(batch_size_) + " is not a positive integer");
  }
  const std::size_t n_tensors = tensors_.size();
  const std::size_t n_ops = ops_.size();

  // Ids are unique (they are how files refer to elements).
  {
    std::map<std::uint64_t, std::size_t> seen;
    for (std::size_t i = 0; i < n_tensors; ++i) {
      auto [it, fresh] = seen.emplace(tensors_[i].id, i);
      if (!fresh) {
        throw TraceError(tensor_path(i) + "/id", "id " + std::to_string(tensors_[i].id) + " is already used by " +
                                                     tensor_path(it->second) + "; expected unique tensor ids");
      }
    }
    seen.clear();
    for (std::size_t i = 0; i < n_ops; ++i) {
      auto [it, fresh] = seen.emplace(ops_[i].id, i);
      if (!fresh) {
        throw TraceError(op_path(i) + "/id", "id " + std::to_string(ops_[i].id) + " is already used by " +
                                                 op_path(it->second) + "; expected unique op ids");
      }
    }
  }

  check_tensor_shapes(tensors_, batch_size_);
  check_value_features(tensors_);

  // Views: resolve each tensor to the tensor that owns its storage.
  storage_.resize(n_tensors);
  for (std::size_t i = 0; i < n_tensors; ++i) {
    std::size_t current = i;
    std::size_t hops = 0;
    while (tensors_[current].view_of) {
      const std::size_t base = *tensors_[current].view_of;
      if (base >= n_tensors) {
        throw TraceError(tensor_path(current) + "/view_of", "refers to tensor index " + std::to_string(base) +
                                                                " but the trace has " + std::to_string(n_tensors) + " tensors");
      }
      if (++hops > n_tensors) {
        throw TraceError(tensor_path(i) + "/view_of", "views form a cycle; expected a chain ending at a tensor that owns its storage");
      }
      current = base;
    }
    storage_[i] = current;
    const Tensor& t = tensors_[i];
    const Tensor& base = tensors_[current];
    if (t.role != base.role) {
      throw TraceError(tensor_path(i) + "/role", describe(t) + " has role " + std::string(to_string(t.role)) +
                                                     " but it is a view of " + describe(base) + " with role " +
                                                     std::string(to_string(base.role)) + "; a storage has one role");
    }
    if (t.bytes() > base.bytes()) {
      throw TraceError(tensor_path(i) + "/view_of", describe(t) + " (" + std::to_string(t.bytes()) +
                                                        " bytes) is larger than the storage it views, " + describe(base) + " (" +
                                                        std::to_string(base.bytes()) + " bytes)");
    }
  }

  // Ops: references in range, one writer per tensor; derive producers and consumers.
  for (std::size_t o = 0; o < n_ops; ++o) {
    Op& op = ops_[o];
    for (std::size_t k = 0; k < op.inputs.size(); ++k) {
      if (op.inputs[k] >= n_tensors) {
        throw TraceError(op_path(o) + "/inputs/" + std::to_string(k), "refers to tensor index " + std::to_string(op.inputs[k]) +
                                                                           " but the trace has " + std::to_string(n_tensors) + " tensors");
      }
      auto& consumers = tensors_[op.inputs[k]].consumers;
      if (consumers.empty() || consumers.back() != o) consumers.push_back(o);
    }
    for (std::size_t k = 0; k < op.outputs.size(); ++k) {
      const TensorIndex t = op.outputs[k];
      if (t >= n_tensors) {
        throw TraceError(op_path(o) + "/outputs/" + std::to_string(k), "refers to tensor index " + std::to_string(t) +
                                                                            " but the trace has " + std::to_string(n_tensors) + " tensors");
      }
      Tensor& out = tensors_[t];
      if (out.producer) {
        throw TraceError(op_path(o) + "/outputs/" + std::to_string(k),
                         describe(out) + " is already written by " + describe(ops_[*out.producer]) +
                             "; a tensor has one producer (write an in-place update as a new tensor with view_of)");
      }
      if (is_resident(out.role) || out.role == TensorRole::input) {
        throw TraceError(op_path(o) + "/outputs/" + std::to_string(k),
                         describe(out) + " has role " + std::string(to_string(out.role)) +
                             ", which exists before the iteration and cannot be an op's output; an op that updates it in place lists it as an input");
      }
      for (TensorIndex in : op.inputs) {
        if (in == t) {
          throw TraceError(op_path(o) + "/outputs/" + std::to_string(k), describe(out) + " is both an input and an output of " + describe(op));
        }
      }
      out.producer = o;
    }
    for (auto [field, quantity] : {std::pair{"flops", &op.flops}, {"bytes_read", &op.bytes_read}, {"bytes_written", &op.bytes_written}}) {
      check_quantity(*quantity, batch_size_, op_path(o) + "/" + field);
    }
    if (op.measured) {
      // %g: std::to_string would print 1e300 with 301 digits.
      std::array<char, 32> text{};
      const int n = std::snprintf(text.data(), text.size(), "%g", op.measured->seconds);
      const std::string seconds(text.data(), n > 0 ? static_cast<std::size_t>(n) : 0);
      if (!std::isfinite(op.measured->seconds) || op.measured->seconds < 0) {
        throw TraceError(op_path(o) + "/measured/seconds", "duration " + seconds + " is not a finite number of seconds >= 0");
      }
      if (op.measured->seconds > kMaxMeasuredSeconds) {
        throw TraceError(op_path(o) + "/measured/seconds",
                         "duration " + seconds + " s exceeds " + std::to_string(static_cast<int>(kMaxMeasuredSeconds)) +
                             " s (1 hour); one GPU op running longer is not a training trace "
                         "(check the unit: seconds, not microseconds)");
      }
      if (op.measured->batch_size < 1) {
        throw TraceError(op_path(o) + "/measured/batch_size", "batch size " + std::to_string(op.measured->batch_size) +
                                                                  " is not a positive integer");
      }
    }
    for (std::size_t k = 0; k < op.after.size(); ++k) {
      if (op.after[k] >= n_ops || op.after[k] == o) {
        throw TraceError(op_path(o) + "/after/" + std::to_string(k),
                         "refers to op index " + std::to_string(op.after[k]) +
                             (op.after[k] == o ? ", the op itself" : " but the trace has " + std::to_string(n_ops) + " ops"));
      }
    }
  }

  // Dependency edges. Data: producer -> consumer. Control: `after`. In-place writes: every
  // op that reads a storage before an op writes a view of it (in the recorded order) must
  // finish before that write (write-after-read), and the writer waits for the base's producer.
  for (std::size_t o = 0; o < n_ops; ++o) {
    const Op& op = ops_[o];
    for (TensorIndex in : op.inputs) {
      if (auto p = tensors_[in].producer) boost::add_edge(*p, o, DependencyEdge{in}, graph_);
    }
    for (OpIndex before : op.after) boost::add_edge(before, o, DependencyEdge{}, graph_);
  }
  {
    std::vector<std::vector<TensorIndex>> members(n_tensors);
    for (std::size_t i = 0; i < n_tensors; ++i) members[storage_[i]].push_back(i);
    for (std::size_t root = 0; root < n_tensors; ++root) {
      if (members[root].size() < 2) continue;
      for (TensorIndex view : members[root]) {
        const auto writer = tensors_[view].producer;
        if (view == root || !writer) continue;
        for (TensorIndex member : members[root]) {
          if (member == view) continue;
          if (auto p = tensors_[member].producer; p && *p < *writer) {
            boost::add_edge(*p, *writer, DependencyEdge{member}, graph_);
          }
          for (OpIndex reader : tensors_[member].consumers) {
            if (reader < *writer) boost::add_edge(reader, *writer, DependencyEdge{member}, graph_);
          }
        }
      }
    }
  }

  // A cycle makes the iteration impossible; report it as a path of ops.
  {
    struct CycleFinder : boost::default_dfs_visitor {
      std::vector<OpIndex>* parent;
      std::optional<std::pair<OpIndex, OpIndex>>* back;
      void tree_edge(OpGraph::edge_descriptor e, const OpGraph& g) const { (*parent)[boost::target(e, g)] = boost::source(e, g); }
      void back_edge(OpGraph::edge_descriptor e, const OpGraph& g) const {
        if (!*back) *back = std::make_pair(boost::source(e, g), boost::target(e, g));
      }
    };
    std::vector<OpIndex> parent(n_ops, std::numeric_limits<OpIndex>::max());
    std::optional<std::pair<OpIndex, OpIndex>> back;
    CycleFinder finder;
    finder.parent = &parent;
    finder.back = &back;
    boost::depth_first_search(graph_, boost::visitor(finder));
    if (back) {
      auto [from, to] = *back;
      std::vector<OpIndex> path{from};
      while (path.back() != to && parent[path.back()] != std::numeric_limits<OpIndex>::max()) path.push_back(parent[path.back()]);
      std::string text;
      for (auto it = path.rbegin(); it != path.rend(); ++it) text += describe(ops_[*it]) + " -> ";
      text += describe(ops_[to]);
      throw TraceError(op_path(to), "the ops form a dependency cycle: " + text + "; expected a DAG");
    }
  }

  check_execution_order(*this, recorded_order());

  // An activation is, by definition, kept for the backward pass.
  {
    std::vector<bool> read_in_backward(n_tensors, false);
    for (std::size_t i = 0; i < n_tensors; ++i) {
      for (OpIndex c : tensors_[i].consumers) {
        if (ops_[c].phase == Phase::backward) read_in_backward[storage_[i]] = true;
      }
    }
    for (std::size_t i = 0; i < n_tensors; ++i) {
      if (storage_[i] == i && tensors_[i].role == TensorRole::activation && !read_in_backward[i]) {
        throw TraceError(tensor_path(i) + "/role", describe(tensors_[i]) +
                                                       " has role activation (saved for backward) but no backward op reads it or a view of it");
      }
    }
  }
}

std::vector<OpIndex> Trace::recorded_order() const {
  std::vector<OpIndex> order(ops_.size());
  std::iota(order.begin(), order.end(), OpIndex{0});
  return order;
}

Trace Trace::rescaled(std::int64_t batch_size) const {
  if (batch_size < 1) {
    throw InputError("batch size " + std::to_string(batch_size) + " is not a positive integer");
  }
  std::vector<Tensor> tensors = tensors_;
  for (Tensor& t : tensors) {
    t.producer.reset();
    t.consumers.clear();
    if (t.batch_dim) {
      std::int64_t& extent = t.shape[*t.batch_dim];
      // Exact: the extent is a multiple of batch_size_. Overflow of the new size is caught by
      // the constructor's size checks; the extent itself must fit first.
      if (__builtin_mul_overflow(extent / batch_size_, batch_size, &extent)) {
        throw InputError("batch size " + std::to_string(batch_size) + " makes " + describe(t) + " too large to represent");
      }
    }
  }
  return Trace(name_, batch_size, std::move(tensors), ops_, metadata_);
}

bool operator==(const Trace& a, const Trace& b) {
  return a.name_ == b.name_ && a.batch_size_ == b.batch_size_ && a.metadata_ == b.metadata_ && a.tensors_ == b.tensors_ &&
         a.ops_ == b.ops_;
}

void check_execution_order(const Trace& trace, std::span<const OpIndex> order) {
  const std::size_t n = trace.ops().size();
  if (order.size() != n) {
    throw TraceError("/ops", "the execution order has " + std::to_string(order.size()) + " entries but the trace has " +
                                 std::to_string(n) + " ops");
  }
  std::vector<std::size_t> position(n, n);
  for (std::size_t k = 0; k < n; ++k) {
    if (order[k] >= n || position[order[k]] != n) {
      throw TraceError("/ops", "the execution order is not a permutation of the ops (entry " + std::to_string(k) + " is " +
                                   std::to_string(order[k]) + ")");
    }
    position[order[k]] = k;
  }
  const OpGraph& g = trace.graph();
  for (auto [it, end] = boost::edges(g); it != end; ++it) {
    const OpIndex u = boost::source(*it, g);
    const OpIndex v = boost::target(*it, g);
    if (position[u] < position[v]) continue;
    const auto& tensor = g[*it].tensor;
    std::string why = tensor ? "it depends on " + describe(trace.tensor(*tensor)) + " through " + describe(trace.op(u))
                             : "it is declared to run after " + describe(trace.op(u));
    throw TraceError(op_path(v), describe(trace.op(v)) + " comes before " + describe(trace.op(u)) + " in the execution order, but " +
                                     why + "; expected ops in dependency order");
  }
}

}  // namespace comptrain::traces

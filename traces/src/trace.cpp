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

// Gradient statistics (FORMAT.md, "Gradient statistics"): each given number finite and within
// its range; terms a whole number, and a multiple of the batch size on a tensor that scales with
// it (so that rescaling is exact); batch_size >= 1 and only beside the RMSs it dates. A batch_size
// equal to the trace's is the default and is dropped here, so that each trace has one form and
// b -> b' -> b gives back the original (Trace::rescaled).
void check_gradient_statistics(std::vector<Tensor>& tensors, std::int64_t batch_size) {
  const auto shown = [](double value) {
    std::array<char, 32> text{};
    const auto written = std::to_chars(text.data(), text.data() + text.size(), value);
    return std::string(text.data(), written.ptr);
  };
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    GradientStatistics& g = tensors[i].gradient;
    const std::string path = tensor_path(i) + "/gradient/";
    for (const GradientStatisticsField& field : kGradientStatisticsFields) {
      const std::optional<double>& value = g.*field.member;
      if (!value || (std::isfinite(*value) && *value >= field.min && *value <= field.max &&
                     (!field.whole || std::floor(*value) == *value))) {
        continue;
      }
      throw TraceError(path + std::string(field.key), "found " + shown(*value) + "; expected " + std::string(field.expected));
    }
    if (g.terms && tensors[i].batch_dim && std::fmod(*g.terms, static_cast<double>(batch_size)) != 0) {
      throw TraceError(path + "terms", "found " + shown(*g.terms) + " on a tensor that scales with the batch; expected a multiple of the batch size " +
                                           std::to_string(batch_size) + " (batch x positions per sample)");
    }
    if (g.batch_size) {
      if (*g.batch_size < 1) {
        throw TraceError(path + "batch_size", "found " + std::to_string(*g.batch_size) + "; expected an integer >= 1");
      }
      if (!g.delta_rms && !g.weight_grad_rms) {
        throw TraceError(path + "batch_size", "a batch size without delta_rms or weight_grad_rms; expected it only beside "
                                              "the RMSs it says the batch of");
      }
      if (*g.batch_size == batch_size) g.batch_size.reset();
    }
  }
}

// A cost is never negative and must be representable at the trace's batch size.
// `path` is called only on an error (building the path string for every op is measurable).
template <typename Path>
void check_quantity(const BatchLinear& q, std::int64_t batch_size, const Path& path) {
  if (q.fixed < 0 || q.per_sample < 0) {
    throw TraceError(path(), "fixed " + std::to_string(q.fixed) + " and per_sample " + std::to_string(q.per_sample) +
                               " must both be >= 0");
  }
  std::int64_t scaled = 0;
  if (__builtin_mul_overflow(q.per_sample, batch_size, &scaled) || __builtin_add_overflow(scaled, q.fixed, &scaled)) {
    throw TraceError(path(), "fixed + per_sample * batch_size overflows 64 bits at batch size " + std::to_string(batch_size));
  }
}

// The op DAG's edges, in one pass over the ops for the data and control edges and one for the
// in-place orderings (edge insertion order is kept per source op, which keeps the cycle and
// order messages stable).
//
// In place (FORMAT.md): an op W that writes a view of a storage runs after every op that,
// earlier in the recorded order, read or wrote a member of that storage. Adding an edge from
// each of those ops is quadratic when one storage has many writers (a gradient accumulated in
// place across all layers). Per storage, only the *frontier* is kept: the last op that wrote a
// view of it and the ops that read it or wrote its base since. W gets an edge from each
// frontier op and then becomes the frontier alone. Every earlier reader or writer of the
// storage is either in the frontier or precedes the last view write, which by the same
// argument (by induction over the view writes) already waits for it; so the transitive closure,
// hence the set of valid execution orders, is that of the edge-per-pair rule, with at most one
// edge per (op, storage) it touches.
OpGraph build_dependency_graph(const std::vector<Op>& ops, const std::vector<Tensor>& tensors,
                               const std::vector<TensorIndex>& storage) {
  std::vector<std::pair<std::size_t, std::size_t>> edges;
  std::vector<DependencyEdge> labels;
  const auto add = [&](std::size_t from, std::size_t to, std::optional<TensorIndex> tensor) {
    edges.emplace_back(from, to);
    labels.push_back(DependencyEdge{tensor});
  };
  for (std::size_t o = 0; o < ops.size(); ++o) {
    for (TensorIndex in : ops[o].inputs) {
      if (auto p = tensors[in].producer) add(*p, o, in);
    }
    for (OpIndex before : ops[o].after) add(before, o, std::nullopt);
  }

  // Only a storage with a view can be written in place.
  std::vector<bool> has_views(tensors.size(), false);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (storage[i] != i) has_views[storage[i]] = true;
  }
  struct Touch {
    OpIndex op;
    TensorIndex via;  // the member of the storage the op read or wrote
  };
  std::vector<std::vector<Touch>> frontier(tensors.size());
  const auto touch = [&](std::size_t root, OpIndex o, TensorIndex via) {
    auto& f = frontier[root];
    if (f.empty() || f.back().op != o) f.push_back({o, via});  // an op's touches are contiguous
  };
  for (std::size_t o = 0; o < ops.size(); ++o) {
    for (TensorIndex out : ops[o].outputs) {
      const TensorIndex root = storage[out];
      if (!has_views[root]) continue;
      if (out != root) {
        for (const Touch& t : frontier[root]) {
          if (t.op != o) add(t.op, o, t.via);
        }
        frontier[root].clear();
      }
      touch(root, o, out);
    }
    for (TensorIndex in : ops[o].inputs) {
      const TensorIndex root = storage[in];
      if (has_views[root]) touch(root, o, in);
    }
  }
  return OpGraph(boost::edges_are_unsorted_multi_pass, edges.begin(), edges.end(), labels.begin(), ops.size());
}

// The pieces of the constructor's validation, in the order it runs them: each throws TraceError
// at the first problem, naming the element by its JSON path.

// Ids are unique (they are how files refer to elements).
void check_unique_ids(const std::vector<Tensor>& tensors, const std::vector<Op>& ops) {
  const auto check_unique = [](std::size_t count, const auto& id_of, const auto& path_of, const char* what) {
    // Ids below `count` (all of them when dense, as the zoo and the writer make them) are
    // checked in a table; larger ones in a map.
    std::vector<std::size_t> first(count, count);
    std::map<std::uint64_t, std::size_t> sparse;
    for (std::size_t i = 0; i < count; ++i) {
      const std::uint64_t id = id_of(i);
      std::size_t earlier = count;
      if (id < count) {
        if (first[id] == count) {
          first[id] = i;
        } else {
          earlier = first[id];
        }
      } else if (auto [it, fresh] = sparse.emplace(id, i); !fresh) {
        earlier = it->second;
      }
      if (earlier != count) {
        throw TraceError(path_of(i) + "/id", "id " + std::to_string(id) + " is already used by " + path_of(earlier) +
                                                 "; expected unique " + what + " ids");
      }
    }
  };
  check_unique(tensors.size(), [&](std::size_t i) { return tensors[i].id; }, tensor_path, "tensor");
  check_unique(ops.size(), [&](std::size_t i) { return ops[i].id; }, op_path, "op");
}

// Views: each tensor resolved to the tensor that owns its storage. A chain of views is walked
// once and resolved for all its members together, so long in-place chains stay linear.
std::vector<TensorIndex> resolve_views(const std::vector<Tensor>& tensors) {
  const std::size_t n_tensors = tensors.size();
  std::vector<TensorIndex> storage(n_tensors);
  enum class Resolved : std::uint8_t { no, on_path, yes };
  std::vector<Resolved> state(n_tensors, Resolved::no);
  std::vector<std::size_t> path;
  for (std::size_t i = 0; i < n_tensors; ++i) {
    path.clear();
    std::size_t current = i;
    while (state[current] == Resolved::no && tensors[current].view_of) {
      state[current] = Resolved::on_path;
      path.push_back(current);
      const std::size_t base = *tensors[current].view_of;
      if (base >= n_tensors) {
        throw TraceError(tensor_path(current) + "/view_of", "refers to tensor index " + std::to_string(base) +
                                                                " but the trace has " + std::to_string(n_tensors) + " tensors");
      }
      if (state[base] == Resolved::on_path) {
        throw TraceError(tensor_path(i) + "/view_of", "views form a cycle; expected a chain ending at a tensor that owns its storage");
      }
      current = base;
    }
    const std::size_t root = state[current] == Resolved::yes ? storage[current] : current;
    storage[current] = root;
    state[current] = Resolved::yes;
    for (std::size_t member : path) {
      storage[member] = root;
      state[member] = Resolved::yes;
    }

    const Tensor& t = tensors[i];
    const Tensor& base = tensors[root];
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
  return storage;
}

// An op's measured duration: finite, at most an hour, at a positive batch size.
void check_measured(const Op& op, std::size_t o) {
  if (!op.measured) return;
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

// The communication field is set exactly on the communication ops: the simulator needs a
// collective's kind and group, and a compute op has none.
// `before`: the op before it in the trace, if any.
void check_communication(const Op& op, std::size_t o, const Op* before) {
  if (op.kind == OpKind::communication && !op.communication) {
    throw TraceError(op_path(o) + "/communication", describe(op) +
                                                        " is of kind communication but says no communication; expected "
                                                        "its kind (all_reduce, ...) and group (tensor, ...)");
  }
  if (op.kind != OpKind::communication && op.communication) {
    throw TraceError(op_path(o) + "/communication", describe(op) + " is of kind " + std::string(to_string(op.kind)) +
                                                        "; only ops of kind communication have a communication");
  }
  if (op.communication && op.communication->ring != 0 &&
      (op.communication->ring < 2 || op.communication->kind != CommunicationKind::all_gather)) {
    throw TraceError(op_path(o) + "/communication/ring", describe(op) + " has ring " + std::to_string(op.communication->ring) + " on a " +
                                                             std::string(to_string(op.communication->kind)) +
                                                             "; expected a ring of >= 2 ranks on an all_gather, or none");
  }
  if (op.communication && (op.communication->overlap < 0 || (op.communication->overlap > 0 && op.communication->ring > 0))) {
    throw TraceError(op_path(o) + "/communication/overlap",
                     describe(op) + " has overlap " + std::to_string(op.communication->overlap) +
                         (op.communication->ring > 0 ? " beside a ring (which overlaps the op after it already)" : "") +
                         "; expected a count >= 1 of the ops it runs beside, on a collective without a ring, or none");
  }
  if (op.communication && op.communication->splits != 0 &&
      (op.communication->splits < 2 || op.communication->kind != CommunicationKind::reduce_scatter || op.communication->overlap > 0)) {
    throw TraceError(op_path(o) + "/communication/splits",
                     describe(op) + " has splits " + std::to_string(op.communication->splits) + " (kind " +
                         std::string(to_string(op.communication->kind)) + (op.communication->overlap > 0 ? ", with an overlap" : "") +
                         "); expected >= 2 pieces on a reduce_scatter without an overlap, or none");
  }
  if (op.communication && op.communication->splits > 0 && (before == nullptr || before->kind == OpKind::communication)) {
    throw TraceError(op_path(o) + "/communication/splits",
                     describe(op) + " is split over the op before it, which " + (before == nullptr ? "does not exist" : "is itself a communication") +
                         "; expected the op that makes the reduce_scatter's input right before it");
  }
}

// Ops: references in range, one writer per tensor; producers and consumers derived.
// read_by[t] == o: op o lists t among its inputs (checked against its outputs in linear time;
// a foreach optimizer op has inputs and outputs for every parameter).
void link_ops(std::vector<Op>& ops, std::vector<Tensor>& tensors, std::int64_t batch_size) {
  const std::size_t n_tensors = tensors.size();
  const std::size_t n_ops = ops.size();
  std::vector<std::size_t> read_by(n_tensors, n_ops);
  for (std::size_t o = 0; o < n_ops; ++o) {
    Op& op = ops[o];
    for (std::size_t k = 0; k < op.inputs.size(); ++k) {
      if (op.inputs[k] >= n_tensors) {
        throw TraceError(op_path(o) + "/inputs/" + std::to_string(k), "refers to tensor index " + std::to_string(op.inputs[k]) +
                                                                         " but the trace has " + std::to_string(n_tensors) + " tensors");
      }
      auto& consumers = tensors[op.inputs[k]].consumers;
      if (consumers.empty() || consumers.back() != o) consumers.push_back(o);
      read_by[op.inputs[k]] = o;
    }
    for (std::size_t k = 0; k < op.outputs.size(); ++k) {
      const TensorIndex t = op.outputs[k];
      if (t >= n_tensors) {
        throw TraceError(op_path(o) + "/outputs/" + std::to_string(k), "refers to tensor index " + std::to_string(t) +
                                                                          " but the trace has " + std::to_string(n_tensors) + " tensors");
      }
      Tensor& out = tensors[t];
      if (out.producer) {
        throw TraceError(op_path(o) + "/outputs/" + std::to_string(k),
                         describe(out) + " is already written by " + describe(ops[*out.producer]) +
                             "; a tensor has one producer (write an in-place update as a new tensor with view_of)");
      }
      if (is_resident(out.role) || out.role == TensorRole::input) {
        throw TraceError(op_path(o) + "/outputs/" + std::to_string(k),
                         describe(out) + " has role " + std::string(to_string(out.role)) +
                             ", which exists before the iteration and cannot be an op's output; an op that updates it in place lists it as an input");
      }
      if (read_by[t] == o) {
        throw TraceError(op_path(o) + "/outputs/" + std::to_string(k), describe(out) + " is both an input and an output of " + describe(op));
      }
      out.producer = o;
    }
    for (auto [field, quantity] : {std::pair{"flops", &op.flops}, {"bytes_read", &op.bytes_read}, {"bytes_written", &op.bytes_written}}) {
      check_quantity(*quantity, batch_size, [&, field = field] { return op_path(o) + "/" + field; });
    }
    check_measured(op, o);
    check_communication(op, o, o == 0 ? nullptr : &ops[o - 1]);
    for (std::size_t k = 0; k < op.after.size(); ++k) {
      if (op.after[k] >= n_ops || op.after[k] == o) {
        throw TraceError(op_path(o) + "/after/" + std::to_string(k),
                         "refers to op index " + std::to_string(op.after[k]) +
                             (op.after[k] == o ? ", the op itself" : " but the trace has " + std::to_string(n_ops) + " ops"));
      }
    }
  }
}

// A cycle makes the iteration impossible; it is reported as a path of ops.
void check_acyclic(const OpGraph& graph, const std::vector<Op>& ops) {
  struct CycleFinder : boost::default_dfs_visitor {
    std::vector<OpIndex>* parent;
    std::optional<std::pair<OpIndex, OpIndex>>* back;
    void tree_edge(OpGraph::edge_descriptor e, const OpGraph& g) const { (*parent)[boost::target(e, g)] = boost::source(e, g); }
    void back_edge(OpGraph::edge_descriptor e, const OpGraph& g) const {
      if (!*back) *back = std::make_pair(boost::source(e, g), boost::target(e, g));
    }
  };
  std::vector<OpIndex> parent(ops.size(), std::numeric_limits<OpIndex>::max());
  std::optional<std::pair<OpIndex, OpIndex>> back;
  CycleFinder finder;
  finder.parent = &parent;
  finder.back = &back;
  boost::depth_first_search(graph, boost::visitor(finder));
  if (!back) return;
  auto [from, to] = *back;
  std::vector<OpIndex> path{from};
  while (path.back() != to && parent[path.back()] != std::numeric_limits<OpIndex>::max()) path.push_back(parent[path.back()]);
  std::string text;
  for (auto it = path.rbegin(); it != path.rend(); ++it) text += describe(ops[*it]) + " -> ";
  text += describe(ops[to]);
  throw TraceError(op_path(to), "the ops form a dependency cycle: " + text + "; expected a DAG");
}

// An activation is, by definition, kept for the backward pass: some backward op reads it or a view of it.
void check_activations_read(const std::vector<Tensor>& tensors, const std::vector<Op>& ops, const std::vector<TensorIndex>& storage) {
  const std::size_t n_tensors = tensors.size();
  std::vector<bool> read_in_backward(n_tensors, false);
  for (std::size_t i = 0; i < n_tensors; ++i) {
    for (OpIndex c : tensors[i].consumers) {
      if (ops[c].phase == Phase::backward) read_in_backward[storage[i]] = true;
    }
  }
  for (std::size_t i = 0; i < n_tensors; ++i) {
    if (storage[i] == i && tensors[i].role == TensorRole::activation && !read_in_backward[i]) {
      throw TraceError(tensor_path(i) + "/role", describe(tensors[i]) +
                                                     " has role activation (saved for backward) but no backward op reads it or a view of it");
    }
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
  check_unique_ids(tensors_, ops_);
  check_tensor_shapes(tensors_, batch_size_);
  check_value_features(tensors_);
  check_gradient_statistics(tensors_, batch_size_);
  storage_ = resolve_views(tensors_);
  link_ops(ops_, tensors_, batch_size_);
  graph_ = build_dependency_graph(ops_, tensors_, storage_);
  check_acyclic(graph_, ops_);
  check_execution_order(*this, recorded_order());
  check_activations_read(tensors_, ops_, storage_);
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
    // Gradient statistics (FORMAT.md, "Gradient statistics"): terms count products over the
    // batch, so on a tensor that scales with it they scale exactly (a whole multiple of the batch
    // size, at most 2^53: integer arithmetic in doubles). The RMSs stay as measured and say at
    // which batch; back at that batch the mark is dropped again, so the round trip is exact.
    GradientStatistics& g = t.gradient;
    if (g.terms && t.batch_dim) {
      const auto per_sample = static_cast<std::int64_t>(*g.terms) / batch_size_;
      std::int64_t scaled = 0;
      if (__builtin_mul_overflow(per_sample, batch_size, &scaled) || scaled > static_cast<std::int64_t>(kMaxGradientTerms)) {
        throw InputError("batch size " + std::to_string(batch_size) + " makes the gradient terms of " + describe(t) +
                         " exceed 2^53");
      }
      g.terms = static_cast<double>(scaled);
    }
    if (g.delta_rms || g.weight_grad_rms) {
      const std::int64_t measured = g.batch_size.value_or(batch_size_);
      g.batch_size = measured == batch_size ? std::nullopt : std::optional<std::int64_t>(measured);
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

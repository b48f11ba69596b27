#include "comptrain/models/kernel_fusion.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <string_view>

#include <boost/range/iterator_range.hpp>

#include "comptrain/models/module_pattern.hpp"

namespace comptrain::models {
namespace {

using traces::OpIndex;
using traces::OpKind;
using traces::TensorIndex;

// The kinds Inductor generates as pointwise or reduction kernels (kernel_fusion.hpp).
bool fusible_kind(OpKind kind) {
  switch (kind) {
    case OpKind::relu:
    case OpKind::gelu:
    case OpKind::batchnorm:
    case OpKind::layernorm:
    case OpKind::pool:
    case OpKind::softmax:
    case OpKind::dropout:
    case OpKind::elementwise:
    case OpKind::loss:
    case OpKind::view: return true;
    default: return false;
  }
}

// The compiled region an op lies in: "" for the whole model, the module instance a pattern names,
// or nothing (eager).
std::optional<std::string> region_of(const traces::Op& op, const CompileScope& scope) {
  if (scope.modules.empty()) return std::string();
  for (const std::string& pattern : scope.modules) {
    if (const auto instance = module_pattern_instance(pattern, op.name)) return std::string(*instance);
  }
  return std::nullopt;
}

struct DisjointSets {
  std::vector<std::size_t> parent;
  explicit DisjointSets(std::size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), std::size_t{0}); }
  std::size_t find(std::size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  }
  void unite(std::size_t a, std::size_t b) {
    a = find(a);
    b = find(b);
    if (a != b) parent[std::max(a, b)] = std::min(a, b);
  }
};

}  // namespace

KernelFusion fuse_like_inductor(const traces::Trace& trace, const CompileScope& scope) {
  const std::size_t n = trace.ops().size();
  KernelFusion fusion;
  fusion.ops.resize(n);

  // Which ops may join a group: a fusible kind, forward or backward, inside a compiled region,
  // and writing no view of another tensor (an in-place op keeps its eager kernel: its storage's
  // other users are ordered around it).
  std::vector<std::optional<std::string>> region(n);
  std::vector<bool> member(n, false);
  for (OpIndex o = 0; o < n; ++o) {
    const traces::Op& op = trace.op(o);
    if (!fusible_kind(op.kind) || op.phase == traces::Phase::optimizer) continue;
    region[o] = region_of(op, scope);
    if (!region[o]) continue;
    const bool in_place = std::any_of(op.outputs.begin(), op.outputs.end(), [&](TensorIndex t) {
      return op.kind != OpKind::view && trace.tensor(t).is_view();
    });
    member[o] = !in_place;
    fusion.ops[o].compiled = member[o];
  }
  // Whether an edge u -> v may join u and v in one kernel: both members of the same phase and
  // region. Any other edge is a kernel boundary.
  auto joinable = [&](OpIndex u, OpIndex v) {
    return member[u] && member[v] && trace.op(u).phase == trace.op(v).phase && region[u] == region[v];
  };

  // Levels: the most kernel boundaries on any path into the op. Joining only the data edges
  // whose two ends have the same level never makes a cycle: a path from one op of a group to
  // another through an op outside it would cross a boundary and raise the level
  // (will_fusion_create_cycle's question, answered for every pair at once). The op list is in
  // dependency order, so one pass over it in order sees every edge's source before its target.
  std::vector<std::int64_t> level(n, 0);
  const traces::OpGraph& graph = trace.graph();
  DisjointSets sets(n);
  for (OpIndex u = 0; u < n; ++u) {
    for (const auto edge : boost::make_iterator_range(boost::out_edges(u, graph))) {
      const OpIndex v = boost::target(edge, graph);
      const bool data = graph[edge].tensor.has_value();
      level[v] = std::max(level[v], level[u] + (data && joinable(u, v) ? 0 : 1));
    }
  }
  for (OpIndex u = 0; u < n; ++u) {
    for (const auto edge : boost::make_iterator_range(boost::out_edges(u, graph))) {
      const OpIndex v = boost::target(edge, graph);
      if (graph[edge].tensor && joinable(u, v) && level[u] == level[v]) sets.unite(u, v);
    }
  }

  // Groups of two or more ops that launch something (views alone launch nothing).
  std::vector<std::size_t> size(n, 0);
  for (OpIndex o = 0; o < n; ++o) {
    if (member[o]) ++size[sets.find(o)];
  }
  // Every member is a kernel Inductor generates, alone or with its group: the elisions below
  // apply to all of them; launches and group numbers only to groups of two or more.
  std::vector<std::optional<std::size_t>> group_number(n);
  std::vector<bool> launched(n, false);  // by the group's root: whether a member launched already
  for (OpIndex o = 0; o < n; ++o) {
    if (!member[o] || size[sets.find(o)] < 2) continue;
    const std::size_t root = sets.find(o);
    if (!group_number[root]) group_number[root] = fusion.groups++;
    FusedOp& fused = fusion.ops[o];
    fused.group = group_number[root];
    // A view launches nothing; inside a compiled graph it costs the host nothing either.
    fused.launches = trace.op(o).kind != OpKind::view && !launched[root];
    if (trace.op(o).kind == OpKind::view) continue;
    launched[root] = true;
  }

  // Whether every op that reads tensor t (through the views of it that ops of the group make)
  // is in group `root`. A tensor nothing reads is kept (a graph output) unless it is an eager
  // composite's temporary, handled by the caller.
  auto read_only_within = [&](TensorIndex t, std::size_t root, auto&& self) -> bool {
    const traces::Tensor& tensor = trace.tensor(t);
    if (tensor.consumers.empty()) return false;
    for (const OpIndex c : tensor.consumers) {
      if (!member[c] || sets.find(c) != root) return false;
      if (trace.op(c).kind != OpKind::view) continue;
      for (const TensorIndex out : trace.op(c).outputs) {
        if (!self(out, root, self)) return false;
      }
    }
    return true;
  };
  // Tensors other tensors are views of (a reshape, an in-place update): their storage has other
  // users, so they stay written.
  std::vector<bool> has_views(trace.tensors().size(), false);
  for (TensorIndex t = 0; t < trace.tensors().size(); ++t) {
    if (trace.tensor(t).is_view()) has_views[trace.storage_of(t)] = true;
  }
  for (OpIndex o = 0; o < n; ++o) {
    if (!member[o] || trace.op(o).kind == OpKind::view) continue;
    const traces::Op& op = trace.op(o);
    const std::size_t root = sets.find(o);
    FusedOp& fused = fusion.ops[o];
    for (const TensorIndex t : op.outputs) {
      const traces::Tensor& tensor = trace.tensor(t);
      if (has_views[t]) continue;
      const bool temporary = tensor.consumers.empty() && tensor.role == traces::TensorRole::temporary;
      if (temporary || read_only_within(t, root, read_only_within)) fused.written_saved += static_cast<double>(tensor.bytes());
    }
    // Reads of what the group computed (directly, or through a view a member made).
    for (const TensorIndex t : op.inputs) {
      TensorIndex source = t;
      std::optional<OpIndex> producer = trace.tensor(source).producer;
      while (producer && trace.op(*producer).kind == OpKind::view && member[*producer] && sets.find(*producer) == root &&
             !trace.op(*producer).inputs.empty()) {
        source = trace.op(*producer).inputs.front();
        producer = trace.tensor(source).producer;
      }
      if (producer && member[*producer] && sets.find(*producer) == root) fused.read_saved += static_cast<double>(trace.tensor(t).bytes());
    }
  }

  // What the backward pass gets from a forward kernel. AOTAutograd's min-cut partitioner
  // (torch/_functorch/partitioners.py, min_cut_rematerialization_partition: the default with
  // Inductor) saves the cheapest set of tensors from which the backward graph can recompute what
  // it needs, recomputing fusible ops inside the backward kernels. For each forward unit (a group,
  // or one compiled op) whose outputs only compiled backward ops read outside it (an RMSNorm's
  // fp32 input copy and normalised value, an activation's output), the unit's inputs are the
  // alternative: when the inputs not saved anyway are fewer bytes than those outputs, the forward
  // kernel does not write the outputs and the backward kernels read the inputs instead.
  // Memory stays the trace's (kernel_fusion.hpp).
  struct Unit {
    std::vector<TensorIndex> saved;   // outputs only compiled backward ops read outside the unit
    std::vector<TensorIndex> inputs;  // what the unit reads from outside, floating point
    double saved_bytes = 0;
  };
  std::vector<Unit> units(n);
  auto compiled_backward = [&](OpIndex c) { return member[c] && trace.op(c).phase == traces::Phase::backward; };
  for (OpIndex o = 0; o < n; ++o) {
    const traces::Op& op = trace.op(o);
    if (!member[o] || op.kind == OpKind::view || op.phase != traces::Phase::forward) continue;
    const std::size_t root = sets.find(o);
    Unit& unit = units[root];
    for (const TensorIndex t : op.inputs) {
      const traces::Tensor& tensor = trace.tensor(t);
      const bool inside = tensor.producer && member[*tensor.producer] && sets.find(*tensor.producer) == root;
      if (!inside && traces::is_floating(tensor.dtype) && std::find(unit.inputs.begin(), unit.inputs.end(), t) == unit.inputs.end()) {
        unit.inputs.push_back(t);
      }
    }
    for (const TensorIndex t : op.outputs) {
      const traces::Tensor& tensor = trace.tensor(t);
      if (has_views[t]) continue;
      bool backward_reader = false;
      bool other_reader = false;
      for (const OpIndex c : tensor.consumers) {
        if (member[c] && sets.find(c) == root) continue;
        (compiled_backward(c) ? backward_reader : other_reader) = true;
      }
      if (backward_reader && !other_reader) {
        unit.saved.push_back(t);
        unit.saved_bytes += static_cast<double>(tensor.bytes());
      }
    }
  }
  for (std::size_t root = 0; root < n; ++root) {
    const Unit& unit = units[root];
    if (unit.saved.empty()) continue;
    // The inputs the backward pass would not have otherwise: what saving them instead costs.
    double extra = 0;
    for (const TensorIndex i : unit.inputs) {
      const auto& readers = trace.tensor(i).consumers;
      if (std::none_of(readers.begin(), readers.end(), [&](OpIndex c) { return trace.op(c).phase == traces::Phase::backward; })) {
        extra += static_cast<double>(trace.tensor(i).bytes());
      }
    }
    if (!(extra < unit.saved_bytes)) continue;
    bool inputs_read = false;
    for (const TensorIndex t : unit.saved) {
      const traces::Tensor& tensor = trace.tensor(t);
      const double bytes = static_cast<double>(tensor.bytes());
      fusion.ops[*tensor.producer].written_saved += bytes;
      for (const OpIndex c : tensor.consumers) {
        if (!compiled_backward(c)) continue;
        fusion.ops[c].read_saved += bytes;
        if (!inputs_read) fusion.ops[c].read_saved -= extra;  // the recomputation reads the inputs once
        inputs_read = true;
      }
    }
  }
  return fusion;
}

}  // namespace comptrain::models

// The per-storage analysis of a trace that every strategy starts from (Analysis, analyse) and
// what the rules' selectors match against it. Split out of build_schedule.cpp; the semantics are
// in models/strategies/README.md.

#include <algorithm>
#include <string>
#include <vector>

#include "build_internal.hpp"
#include "comptrain/models/module_pattern.hpp"
#include "comptrain/models/strategy.hpp"

namespace comptrain::models::strategy_detail {

using traces::OpIndex;
using traces::Phase;
using traces::TensorIndex;
using traces::TensorRole;
using traces::Trace;

namespace {

bool contains(const std::vector<traces::OpKind>& kinds, traces::OpKind kind) {
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

}  // namespace

void sorted_unique(std::vector<std::size_t>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

Analysis analyse(const Trace& trace, const OpTimeModel& time_model) {
  Analysis a;
  a.trace = &trace;
  a.time_model = &time_model;
  const auto& tensors = trace.tensors();
  a.info.resize(tensors.size());
  for (TensorIndex t = 0; t < tensors.size(); ++t) {
    if (trace.storage_of(t) == t) a.storages.push_back(t);
  }
  a.op_seconds.resize(trace.ops().size());
  a.op_watts.resize(trace.ops().size());
  // All ops at once: under torch.compile an op's time depends on its fusion group's.
  const std::vector<KernelRun> runs = time_model.run_all(trace);
  for (OpIndex o = 0; o < trace.ops().size(); ++o) {
    const KernelRun& run = runs[o];
    a.op_seconds[o] = run.seconds;
    a.op_watts[o] = run.watts;
    const auto& op = trace.op(o);
    if (op.phase != Phase::forward && !a.first_backward_op) a.first_backward_op = o;
    for (TensorIndex t : op.inputs) a.info[trace.storage_of(t)].readers.push_back(o);
    for (TensorIndex t : op.outputs) a.info[trace.storage_of(t)].writers.push_back(o);
  }
  for (TensorIndex s : a.storages) {
    StorageInfo& info = a.info[s];
    sorted_unique(info.readers);
    sorted_unique(info.writers);
    info.written = !info.writers.empty();
    for (OpIndex w : info.writers) {
      if (is_forward(trace, w)) {
        info.last_forward_use = std::max(info.last_forward_use.value_or(0), w);
        info.forward_seconds += a.op_seconds[w];
      } else {
        info.written_in_forward_only = false;
      }
    }
    for (OpIndex r : info.readers) {
      if (is_forward(trace, r)) {
        info.last_forward_use = std::max(info.last_forward_use.value_or(0), r);
      } else if (!info.first_backward_read) {
        info.first_backward_read = r;
      }
    }
    info.saved = info.written && trace.tensor(s).role == TensorRole::activation;
    // A gap: every forward use ends before the backward pass starts and before the first
    // backward read, and only forward ops write it (so a restored or rebuilt copy is the
    // final forward content).
    info.gap = info.saved && info.first_backward_read && used_up_before_backward(a, info) &&
               *info.last_forward_use < *info.first_backward_read;
  }
  return a;
}

bool matches_any(const std::vector<std::string>& patterns, const std::string& name) {
  return std::any_of(patterns.begin(), patterns.end(), [&](const std::string& p) { return name_matches(p, name); });
}

bool names_storage(const TensorSelector& selector, const std::string& name) { return matches_any(selector.names, name); }

bool selects(const Analysis& a, const TensorSelector& selector, TensorIndex s) {
  const Trace& trace = *a.trace;
  const StorageInfo& info = a.info[s];
  if (trace.tensor(s).bytes() < selector.min_bytes) return false;
  if (!selector.names.empty() && !names_storage(selector, trace.tensor(s).name)) return false;
  if (!selector.modules.empty() &&
      std::none_of(selector.modules.begin(), selector.modules.end(),
                   [&](const std::string& pattern) { return module_pattern_matches(pattern, trace.tensor(s).name); })) {
    return false;
  }
  if (selector.inputs_of.empty() && selector.outputs_of.empty()) return true;
  for (OpIndex r : info.readers) {
    if (is_forward(trace, r) && contains(selector.inputs_of, trace.op(r).kind)) return true;
  }
  for (OpIndex w : info.writers) {
    if (is_forward(trace, w) && contains(selector.outputs_of, trace.op(w).kind)) return true;
  }
  return false;
}

// The class of a storage's values: the op kind of its last forward writer, which decides the
// content that is saved (an in-place ReLU overwrites the batch-norm output it shares storage with).
TensorClass storage_class(const Trace& trace, const StorageInfo& info) {
  for (auto it = info.writers.rbegin(); it != info.writers.rend(); ++it) {
    if (is_forward(trace, *it)) return tensor_class_of_op(trace.op(*it).kind);
  }
  return TensorClass::generic;
}

// The value features the trace gives for a storage's saved content: those of the tensor its
// last forward writer wrote into it (the same op that decides the class; an in-place ReLU's
// output, not the batch-norm output it overwrote). Empty when that tensor has none.
const traces::ValueFeatures& storage_values(const Trace& trace, TensorIndex s, const StorageInfo& info) {
  static const traces::ValueFeatures kNone;
  for (auto it = info.writers.rbegin(); it != info.writers.rend(); ++it) {
    if (!is_forward(trace, *it)) continue;
    const auto& outputs = trace.op(*it).outputs;
    for (auto t = outputs.rbegin(); t != outputs.rend(); ++t) {
      if (trace.storage_of(*t) == s) return trace.tensor(*t).values;
    }
    break;
  }
  return kNone;
}

}  // namespace comptrain::models::strategy_detail

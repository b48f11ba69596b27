#pragma once
// Internal to models/strategies: what the steps of build_schedule share across their files --
// the trace's analysis and the selectors (analysis.cpp), a compress action's costs per storage
// (compress_costs.cpp), the assembly of a fixed plan into a Schedule (assemble.cpp) and the
// budget mode's search (recompute_budget.cpp). build_schedule.cpp runs them in that order.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comptrain/models/compression_model.hpp"
#include "comptrain/models/gradient_error.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/traces/trace.hpp"
#include "strategy_internal.hpp"

namespace comptrain::models::strategy_detail {

// analysis.cpp

void sorted_unique(std::vector<std::size_t>& v);
Analysis analyse(const traces::Trace& trace, const OpTimeModel& time_model);
bool matches_any(const std::vector<std::string>& patterns, const std::string& name);
bool names_storage(const TensorSelector& selector, const std::string& name);
bool selects(const Analysis& a, const TensorSelector& selector, traces::TensorIndex s);
// The class of a storage's values: the op kind of its last forward writer.
TensorClass storage_class(const traces::Trace& trace, const StorageInfo& info);
// The value features the trace gives for a storage's saved content.
const traces::ValueFeatures& storage_values(const traces::Trace& trace, traces::TensorIndex s, const StorageInfo& info);

// compress_costs.cpp

// The error bound a compress rule gives one storage, and what the gradient-error model
// (gradient_error.hpp) says of it. `relative` is what the ratio models take.
struct StorageBound {
  double relative = 0;             // eb / value range, <= 1 (a range of 0: 1, the whole range)
  std::optional<double> absolute;  // eb in the tensor's units, when its range is known
  TensorBoundUse::From from = TensorBoundUse::From::fixed;
  std::string why_fallback;
  StorageGradientModel model;
  std::optional<double> predicted;  // the worst consumer's relative gradient error, when covered
  std::size_t worst_consumer = 0;
  bool positive_mask = false;  // the stream keeps the positive mask (CompressAction::positive_mask)
};

StorageBound storage_bound(const traces::Trace& trace, const StorageInfo& info, const StrategySpec& spec, std::size_t rule, traces::TensorIndex s,
                           const traces::ValueFeatures& values);
// The codec's ratio; with `positive_mask`, the stream's, the mask's bytes included.
double compress_ratio(const CompressAction& c, TensorClass cls, traces::DType dtype, double relative_bound, const traces::ValueFeatures& values,
                      bool positive_mask);
double compress_ratio(const CompressAction& c, TensorClass cls, traces::DType dtype, double relative_bound, const traces::ValueFeatures& values = {});
bool uses_values(const CompressAction& c, const traces::ValueFeatures& values);
void check_ranges(const traces::Trace& trace, const StrategySpec& spec, std::size_t rule, traces::TensorIndex s, const traces::ValueFeatures& values);
TimeModel codec_time(const CompressAction& c, bool compress);
// %g: short whatever the value (1e+300, inf), for messages.
std::string short_number(double value);
double codec_seconds(const StrategySpec& spec, std::size_t rule, const CompressAction& c, bool compress, const std::string& tensor,
                     std::int64_t bytes);
std::int64_t compressed_bytes(const StrategySpec& spec, std::size_t rule, const std::string& tensor, std::int64_t bytes, double ratio);

// assemble.cpp

struct Built {
  Schedule schedule;
  double recompute_seconds = 0;  // the recompute tasks' seconds added in schedule order (the reported figure)
  double recompute_exact = 0;    // their exact sum, rounded once
  std::size_t recompute_tasks = 0;
};

// The schedule of a fixed plan; `names`: tasks and buffers named (the budget search's scoring
// builds leave them empty).
Built assemble(const Analysis& a, const StrategySpec& spec, const StorageActions& plan, bool names);
// The full measure of a plan: build the schedule and replay it sequentially.
Evaluation evaluate(const Analysis& a, const StrategySpec& spec, const StorageActions& plan);

// recompute_budget.cpp

std::size_t ceil_sqrt(std::size_t n);
// Budget mode: decides the candidates of one budget rule in `plan`, or says why no plan fits.
std::optional<NotApplicable> plan_budget(const Analysis& a, const StrategySpec& spec, StorageActions& plan,
                                         const std::vector<traces::TensorIndex>& candidates, std::int64_t budget, std::size_t rule_index);

}  // namespace comptrain::models::strategy_detail

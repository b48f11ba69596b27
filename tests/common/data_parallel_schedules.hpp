// A small zoo GPT's trace and its single-GPU schedule, the starting point of the data-parallel
// transforms' tests (tests/models/data_parallel_test.cpp, compressed_collectives_test.cpp), and
// the collective tasks of a schedule.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "comptrain/models/op_time.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "common/must_apply.hpp"

namespace comptrain::test_support {

// GPT-2 (the zoo's gpt2) of `layers` layers, Adam, batch 2.
inline traces::Trace small_gpt(zoo::Precision precision, std::int64_t layers = 2) {
  zoo::ModelRequest request;
  request.model = "gpt2";
  request.layers = layers;
  request.precision = precision;
  request.optimizer = zoo::Optimizer::adam;
  request.batch_size = 2;
  return zoo::build_model(request);
}

// The trace's baseline schedule on an A100 80GB.
inline models::Schedule baseline_schedule(const traces::Trace& trace) {
  static const models::OpTimeModel time_model(models::builtin_platform("a100-80gb"));
  return must_apply(models::build_schedule(trace, time_model, models::StrategySpec{}));
}

// The schedule's collective tasks, of `kind` when given, in task order.
inline std::vector<models::TaskId> collective_tasks(const models::Schedule& s, std::optional<models::CollectiveKind> kind = std::nullopt) {
  std::vector<models::TaskId> out;
  for (models::TaskId t = 0; t < s.tasks.size(); ++t) {
    if (s.tasks[t].kind == models::TaskKind::collective && (!kind || s.tasks[t].collective == kind)) out.push_back(t);
  }
  return out;
}

}  // namespace comptrain::test_support

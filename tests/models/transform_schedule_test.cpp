// The ordered pipeline of schedule transforms (models/transform_schedule.hpp): a schedule through
// transform_schedule is the schedule the run layer made by calling the transforms one by one, in
// the order it had (sim/src/run.cpp before transform_schedule), field for field.

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "comptrain/models/data_parallel.hpp"
#include "comptrain/models/framework_transforms.hpp"
#include "comptrain/models/gradient_accumulation.hpp"
#include "comptrain/models/op_time.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/models/transform_schedule.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "common/must_apply.hpp"

namespace comptrain::models {
namespace {

traces::Trace model(const char* name) {
  zoo::ModelRequest request;
  request.model = name;
  request.batch_size = 2;
  if (std::string(name) == "gpt2") request.layers = 2;
  return zoo::build_model(request);
}

Schedule baseline(const traces::Trace& trace) {
  static const OpTimeModel time_model(builtin_platform("a100-80gb"));
  return test_support::must_apply(build_schedule(trace, time_model, StrategySpec{}));
}

void expect_same(const Schedule& a, const Schedule& b) {
  EXPECT_EQ(a.strategy, b.strategy);
  ASSERT_EQ(a.buffers.size(), b.buffers.size());
  for (std::size_t i = 0; i < a.buffers.size(); ++i) {
    const Buffer& x = a.buffers[i];
    const Buffer& y = b.buffers[i];
    EXPECT_EQ(x.name, y.name) << "buffer " << i;
    EXPECT_EQ(x.bytes, y.bytes) << x.name;
    EXPECT_EQ(x.role, y.role) << x.name;
    EXPECT_EQ(x.resident, y.resident) << x.name;
    EXPECT_EQ(x.held_to_end, y.held_to_end) << x.name;
    EXPECT_EQ(x.tensor, y.tensor) << x.name;
    EXPECT_EQ(x.allocation_stream, y.allocation_stream) << x.name;
  }
  ASSERT_EQ(a.tasks.size(), b.tasks.size());
  for (std::size_t i = 0; i < a.tasks.size(); ++i) {
    const Task& x = a.tasks[i];
    const Task& y = b.tasks[i];
    EXPECT_EQ(x.name, y.name) << "task " << i;
    EXPECT_EQ(x.kind, y.kind) << x.name;
    EXPECT_EQ(x.stream, y.stream) << x.name;
    EXPECT_EQ(x.op, y.op) << x.name;
    EXPECT_EQ(x.tensor, y.tensor) << x.name;
    EXPECT_EQ(x.seconds, y.seconds) << x.name;
    EXPECT_EQ(x.watts, y.watts) << x.name;
    EXPECT_EQ(x.host_seconds, y.host_seconds) << x.name;
    EXPECT_EQ(x.bytes, y.bytes) << x.name;
    EXPECT_EQ(x.collective, y.collective) << x.name;
    EXPECT_EQ(x.pageable, y.pageable) << x.name;
    EXPECT_EQ(x.blocks_host, y.blocks_host) << x.name;
    EXPECT_EQ(x.creates, y.creates) << x.name;
    EXPECT_EQ(x.uses, y.uses) << x.name;
    EXPECT_EQ(x.after, y.after) << x.name;
  }
}

// The sequence of calls the run layer made before transform_schedule, with gradient
// accumulation after data parallelism when the gradients are reduced at every micro-step
// (ZeRO-2/3, FSDP2: transform_schedule.hpp).
Schedule one_by_one(Schedule s, const traces::Trace& trace, const TransformSteps& steps) {
  const bool per_micro_step = steps.data_parallel && steps.data_parallel->zero_stage >= 2;
  if (!per_micro_step) apply_gradient_accumulation(s, trace, steps.accumulation_steps);
  if (steps.data_parallel) apply_data_parallel(s, trace, *steps.data_parallel, *steps.platform);
  if (per_micro_step) apply_gradient_accumulation(s, trace, steps.accumulation_steps);
  apply_gradient_lifetime(s, steps.zero_grad);
  add_cudnn_workspaces(s, trace, steps.cudnn_workspace_bytes);
  assign_dispatch_costs(s, trace, steps.dispatch);
  return s;
}

TEST(TransformSchedule, IsTheRunLayersSequenceOfTransforms) {
  static const Platform platform = builtin_platform("a100-80gb");
  for (const auto& [name, stage] : {std::pair{"gpt2", 2}, std::pair{"alexnet", 2}, std::pair{"gpt2", 0}, std::pair{"gpt2", 1}}) {
    SCOPED_TRACE(std::string(name) + ", stage " + std::to_string(stage));
    const traces::Trace trace = model(name);
    const Schedule built = baseline(trace);
    TransformSteps steps;
    steps.accumulation_steps = 2;
    steps.data_parallel = DataParallelSpec{};
    steps.data_parallel->ranks = 4;
    steps.data_parallel->zero_stage = stage;
    steps.platform = &platform;
    steps.zero_grad = ZeroGrad::zeros;
    steps.cudnn_workspace_bytes = std::int64_t{64} << 20;
    steps.dispatch = OpDispatch{11e-6, 5e-6, 3e-6};
    const Schedule piped = transform_schedule(built, trace, steps);
    expect_same(piped, one_by_one(built, trace, steps));
    // The transforms did something: micro-steps, collectives, workspaces, dispatch costs.
    EXPECT_GT(piped.tasks.size(), built.tasks.size());
    EXPECT_GT(piped.buffers.size(), built.buffers.size());
  }
}

TEST(TransformSchedule, DefaultStepsLeaveTheScheduleAlone) {
  const traces::Trace trace = model("gpt2");
  const Schedule built = baseline(trace);
  const Schedule piped = transform_schedule(built, trace, TransformSteps{});
  expect_same(piped, built);  // a zero dispatch cost is the built schedule's 0
}

}  // namespace
}  // namespace comptrain::models

// How the cost of planning `recompute: {mode: budget}` grows with the model: build_schedule
// with one budget rule over every saved activation of a GPT (zoo model `gpt`, hidden 2048, 16
// heads, sequence 2048 -- the zoo's defaults) at 12 to 384 layers, batch 1, fp32, on the
// shipped a100-80gb platform. Two kinds of budget: the saved-activation peak of the sqrt_n plan
// of the same model (as the tests use it), and a fixed fraction of the baseline's. The trace,
// the time model and the budget are made outside the timed loop; the timed part is the whole
// build_schedule (analysis, the search, the final schedule). The timer is CPU time.
//
// Counters: s/layer (CPU time per layer: a flat row means linear growth), ops, the budget, and
// the plan's peak and recompute seconds (so that a change in the result shows beside the speed).
//
// BM_BuildSchedule times build_schedule on the same GPTs (12 to 384 layers) under each kind of
// strategy: the baseline (no rules), offload, recompute sqrt_n, recompute budget (half of the
// baseline's peak) and compress (fixed ratio), each rule over every saved activation. Counters:
// ops, tasks (of the built schedule) and s/op (CPU time per trace op: a flat row means linear
// growth). Building the trace itself is timed in traces/bench/trace_bench.

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <variant>
#include <vector>

#include "comptrain/models/op_time.hpp"
#include "comptrain/models/platform.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/traces/trace.hpp"
#include "comptrain/zoo/zoo.hpp"

namespace {

using namespace comptrain;

traces::Trace gpt(std::int64_t layers) {
  zoo::ModelRequest request;
  request.model = "gpt";
  request.layers = layers;
  request.batch_size = 1;
  return zoo::build_model(request);
}

models::StrategySpec recompute(models::RecomputeAction::Mode mode, std::int64_t budget = 0) {
  models::RecomputeAction action;
  action.mode = mode;
  action.budget_bytes = budget;
  models::StrategyRule rule;
  rule.action = action;
  models::StrategySpec spec;
  spec.name = "recompute";
  spec.rules = {rule};
  return spec;
}

// The sequential peak of the buffers holding saved activations (activation, compressed,
// prefetch): what a budget bounds. Computed here from the schedule's tasks.
std::int64_t activation_peak(const models::Schedule& s) {
  using models::MemoryRole;
  std::vector<std::int64_t> delta(s.tasks.size() + 1, 0);
  std::map<models::BufferId, std::pair<std::size_t, std::size_t>> span;
  for (std::size_t t = 0; t < s.tasks.size(); ++t) {
    for (auto b : s.tasks[t].creates) span.emplace(b, std::make_pair(t, t));
    for (auto b : s.tasks[t].uses) {
      if (auto it = span.find(b); it != span.end()) it->second.second = std::max(it->second.second, t);
    }
  }
  for (const auto& [b, range] : span) {
    const MemoryRole role = s.buffers[b].role;
    if (role != MemoryRole::activation && role != MemoryRole::compressed && role != MemoryRole::prefetch) continue;
    delta[range.first] += s.buffers[b].bytes;
    delta[range.second + 1] -= s.buffers[b].bytes;
  }
  std::int64_t live = 0;
  std::int64_t peak = 0;
  for (std::size_t t = 0; t < s.tasks.size(); ++t) peak = std::max(peak, live += delta[t]);
  return peak;
}

double recompute_seconds(const models::Schedule& s) {
  double total = 0;
  for (const auto& t : s.tasks) {
    if (t.kind == models::TaskKind::recompute) total += t.seconds;
  }
  return total;
}

// Plans the budget rule on a GPT of `layers` layers and reports the counters. `budget_of` gives
// the budget from the trace and the time model (outside the timed loop).
template <class Budget>
void plan_gpt(benchmark::State& state, std::int64_t layers, Budget budget_of) {
  const traces::Trace trace = gpt(layers);
  const models::OpTimeModel time_model(models::builtin_platform("a100-80gb"));
  const std::int64_t budget = budget_of(trace, time_model);
  const models::StrategySpec spec = recompute(models::RecomputeAction::Mode::budget, budget);
  double seconds = 0;
  std::int64_t peak = 0;
  for (auto _ : state) {
    auto built = models::build_schedule(trace, time_model, spec);
    const auto* schedule = std::get_if<models::Schedule>(&built);
    if (!schedule) {
      state.SkipWithError("the budget does not apply");
      return;
    }
    state.PauseTiming();  // the plan's figures, for the counters
    seconds = recompute_seconds(*schedule);
    peak = activation_peak(*schedule);
    state.ResumeTiming();
    benchmark::DoNotOptimize(built);
  }
  state.counters["ops"] = static_cast<double>(trace.ops().size());
  state.counters["s/layer"] =
      benchmark::Counter(static_cast<double>(layers), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["budget GiB"] = static_cast<double>(budget) / (1 << 30);
  state.counters["peak GiB"] = static_cast<double>(peak) / (1 << 30);
  state.counters["recompute s"] = seconds;
}

// The budget: the saved-activation peak of the sqrt_n plan of the same model (tight; at some
// depths no greedy plan fits and the search rests on the structured plans).
void BM_PlanBudgetGptSqrtN(benchmark::State& state) {
  plan_gpt(state, state.range(0), [&](const traces::Trace& trace, const models::OpTimeModel& time_model) {
    const auto sqrt_n = std::get<models::Schedule>(models::build_schedule(trace, time_model, recompute(models::RecomputeAction::Mode::sqrt_n)));
    state.counters["sqrt_n recompute s"] = recompute_seconds(sqrt_n);
    return activation_peak(sqrt_n);
  });
}

// The budget: a fixed fraction (percent, the second argument) of the baseline's
// saved-activation peak, so that the problem grows with the model.
void BM_PlanBudgetGptFraction(benchmark::State& state) {
  plan_gpt(state, state.range(0), [&](const traces::Trace& trace, const models::OpTimeModel& time_model) {
    models::StrategySpec baseline;
    baseline.name = "baseline";
    const auto schedule = std::get<models::Schedule>(models::build_schedule(trace, time_model, baseline));
    return activation_peak(schedule) * state.range(1) / 100;
  });
}

// The strategies BM_BuildSchedule compares, one rule each over every saved activation.
enum class Kind { baseline, offload, sqrt_n, budget_half, compress };

models::StrategySpec strategy_of(Kind kind, const traces::Trace& trace, const models::OpTimeModel& time_model) {
  models::StrategySpec spec;
  models::StrategyRule rule;
  switch (kind) {
    case Kind::baseline:
      spec.name = "baseline";
      return spec;
    case Kind::offload:
      rule.action = models::OffloadAction{};
      spec.name = "offload";
      break;
    case Kind::sqrt_n:
      return recompute(models::RecomputeAction::Mode::sqrt_n);
    case Kind::budget_half: {
      models::StrategySpec baseline;
      baseline.name = "baseline";
      const auto schedule = std::get<models::Schedule>(models::build_schedule(trace, time_model, baseline));
      return recompute(models::RecomputeAction::Mode::budget, activation_peak(schedule) / 2);
    }
    case Kind::compress: {
      // Explicit numbers, no profile: the path that costs each tensor by ratio and throughput
      // alone. The values only set task durations and buffer sizes, not the work of building
      // the schedule; they are round figures of the order of a GPU codec (ratio 4, 100 GB/s
      // compressing, 200 GB/s decompressing, 10 us a call), not measurements.
      models::CompressAction codec;
      codec.ratio = 4.0;
      codec.compress_bandwidth = 100e9;
      codec.decompress_bandwidth = 200e9;
      codec.latency = 10e-6;
      rule.action = codec;
      spec.name = "compress";
      break;
    }
  }
  spec.rules = {rule};
  return spec;
}

// build_schedule on a GPT of state.range(0) layers under `kind`; the trace, the time model and
// the strategy (for the budget, the baseline's peak) are made outside the timed loop.
void BM_BuildSchedule(benchmark::State& state, Kind kind) {
  const traces::Trace trace = gpt(state.range(0));
  const models::OpTimeModel time_model(models::builtin_platform("a100-80gb"));
  const models::StrategySpec spec = strategy_of(kind, trace, time_model);
  std::size_t tasks = 0;
  for (auto _ : state) {
    auto built = models::build_schedule(trace, time_model, spec);
    const auto* schedule = std::get_if<models::Schedule>(&built);
    if (!schedule) {
      state.SkipWithError("the strategy does not apply");
      return;
    }
    tasks = schedule->tasks.size();
    benchmark::DoNotOptimize(built);
  }
  const auto ops = static_cast<double>(trace.ops().size());
  state.counters["ops"] = ops;
  state.counters["tasks"] = static_cast<double>(tasks);
  // Rates divide by CPU time: this is CPU seconds per op.
  state.counters["s/op"] = benchmark::Counter(ops, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

}  // namespace

BENCHMARK(BM_PlanBudgetGptSqrtN)->Arg(12)->Arg(24)->Arg(48)->Arg(96)->Arg(192)->Arg(384)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PlanBudgetGptFraction)->ArgsProduct({{12, 24, 48, 96, 192, 384}, {50, 25, 10}})->Unit(benchmark::kMillisecond);
#define COMPTRAIN_BUILD_SCHEDULE(kind) \
  BENCHMARK_CAPTURE(BM_BuildSchedule, kind, Kind::kind)->Arg(12)->Arg(48)->Arg(96)->Arg(192)->Arg(384)->Unit(benchmark::kMillisecond)
COMPTRAIN_BUILD_SCHEDULE(baseline);
COMPTRAIN_BUILD_SCHEDULE(offload);
COMPTRAIN_BUILD_SCHEDULE(sqrt_n);
COMPTRAIN_BUILD_SCHEDULE(budget_half);
COMPTRAIN_BUILD_SCHEDULE(compress);
#undef COMPTRAIN_BUILD_SCHEDULE
BENCHMARK_MAIN();

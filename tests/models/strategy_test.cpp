// Strategies -> schedules: hand-computable traces first (every task, buffer and the static
// peak checked exactly), then a long chain for Chen's √n bound, then the zoo.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "comptrain/models/schedule.hpp"
#include "comptrain/models/strategy.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/traces/summary.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "common/must_apply.hpp"
#include "common/test_platform.hpp"
#include "common/trace_builder.hpp"
// The budget mode's evaluator is internal to the library; its test hook is declared here.
#include "../../models/strategies/recompute_evaluator.hpp"

namespace comptrain::models {
namespace {

using traces::OpKind;
using traces::Phase;
using traces::TensorRole;
using test_support::Builder;

Platform test_platform() { return test_support::roofline_platform(); }

const OpTimeModel& time_model() {
  static const OpTimeModel model(test_platform());
  return model;
}


// x (input 400) -a-> y (saved, 400) -b-> z (800) -c-> l (4); seed: l -> gl;
// b.backward: gl, y -> gy (400); a.backward: gy, y -> wg (gradient, 40).
traces::Trace tiny() {
  Builder b;
  const auto x = b.tensor("x", 400, TensorRole::input);
  const auto y = b.tensor("y", 400, TensorRole::activation);
  const auto z = b.tensor("z", 800, TensorRole::temporary);
  const auto l = b.tensor("l", 4, TensorRole::temporary);
  const auto gl = b.tensor("gl", 4, TensorRole::temporary);
  const auto gy = b.tensor("gy", 400, TensorRole::temporary);
  const auto wg = b.tensor("wg", 40, TensorRole::gradient);
  b.op("a", Phase::forward, OpKind::relu, {x}, {y}, 100);
  b.op("b", Phase::forward, OpKind::conv, {y}, {z}, 1000);
  b.op("c", Phase::forward, OpKind::loss, {z}, {l}, 10);
  b.op("seed", Phase::backward, OpKind::other, {l}, {gl});
  b.op("b.backward", Phase::backward, OpKind::conv, {gl, y}, {gy}, 2000);
  b.op("a.backward", Phase::backward, OpKind::relu, {gy, y}, {wg}, 100);
  return b.build("tiny");
}

// An n-layer chain of relu-like ops, each saving its output; `expensive` makes every other
// layer costly (matmul-like flops) so that the cost-aware budget mode has something to find.
traces::Trace chain(int n, bool expensive = false, std::int64_t bytes = 4096) {
  Builder b;
  std::vector<std::size_t> x{b.tensor("x0", bytes, TensorRole::input)};
  for (int i = 1; i <= n; ++i) x.push_back(b.tensor("x" + std::to_string(i), bytes, TensorRole::activation));
  const auto l = b.tensor("loss", 4, TensorRole::temporary);
  std::vector<std::size_t> g;
  for (int i = 0; i <= n; ++i) g.push_back(b.tensor("g" + std::to_string(i), bytes, TensorRole::temporary));
  const auto wg = b.tensor("wg", 4, TensorRole::gradient);
  auto cost = [&](int i) -> std::int64_t { return expensive && i % 2 == 0 ? std::int64_t{1} << 30 : 1024; };
  for (int i = 1; i <= n; ++i) {
    b.op("f" + std::to_string(i), Phase::forward, OpKind::relu, {x[static_cast<std::size_t>(i - 1)]},
         {x[static_cast<std::size_t>(i)]}, cost(i));
  }
  b.op("loss", Phase::forward, OpKind::loss, {x.back()}, {l});
  b.op("seed", Phase::backward, OpKind::other, {l}, {g.back()});
  for (int i = n; i >= 1; --i) {
    const auto ui = static_cast<std::size_t>(i);
    b.op("f" + std::to_string(i) + ".backward", Phase::backward, OpKind::relu, {g[ui], x[ui]},
         i == 1 ? std::vector<std::size_t>{wg} : std::vector<std::size_t>{g[ui - 1]}, cost(i));
  }
  return b.build("chain" + std::to_string(n));
}

StrategyRule offload_rule(int lookahead, TensorSelector select = {}) {
  StrategyRule r;
  r.select = std::move(select);
  OffloadAction a;
  a.lookahead = lookahead;
  r.action = a;
  return r;
}

CompressAction codec(double ratio) {
  CompressAction c;
  c.ratio = ratio;
  c.compress_bandwidth = 1000;
  c.decompress_bandwidth = 2000;
  c.latency = 0.5;
  return c;
}

StrategyRule compress_rule(CompressAction c, TensorSelector select = {}) {
  StrategyRule r;
  r.select = std::move(select);
  r.action = c;
  return r;
}

StrategyRule recompute_rule(RecomputeAction::Mode mode, int k = 2, std::int64_t budget = 0, TensorSelector select = {}) {
  StrategyRule r;
  r.select = std::move(select);
  RecomputeAction a;
  a.mode = mode;
  a.k = k;
  a.budget_bytes = budget;
  r.action = a;
  return r;
}

StrategySpec spec(std::string name, std::vector<StrategyRule> rules) {
  StrategySpec s;
  s.name = std::move(name);
  s.rules = std::move(rules);
  return s;
}

Schedule build(const traces::Trace& trace, const StrategySpec& s) {
  Schedule schedule = test_support::must_apply(build_schedule(trace, time_model(), s));
  EXPECT_NO_THROW(schedule.validate()) << s.name;
  return schedule;
}

std::vector<std::string> names(const Schedule& s) {
  std::vector<std::string> out;
  for (const auto& t : s.tasks) out.push_back(t.name);
  return out;
}

// Peak of the sequential replay counting only saved-activation roles (activation, compressed,
// prefetch), recomputed here independently of the library's own helper.
std::int64_t activation_peak(const Schedule& s) {
  const std::size_t n = s.tasks.size();
  std::vector<std::int64_t> delta(n + 1, 0);
  std::map<BufferId, std::pair<std::size_t, std::size_t>> span;
  for (std::size_t t = 0; t < n; ++t) {
    for (auto b : s.tasks[t].creates) {
      auto [it, fresh] = span.emplace(b, std::make_pair(t, t));
      if (!fresh) it->second.second = std::max(it->second.second, t);
    }
  }
  for (std::size_t t = 0; t < n; ++t) {
    for (auto b : s.tasks[t].uses) {
      if (auto it = span.find(b); it != span.end()) it->second.second = std::max(it->second.second, t);
    }
  }
  for (const auto& [b, range] : span) {
    const auto role = s.buffers[b].role;
    if (role != MemoryRole::activation && role != MemoryRole::compressed && role != MemoryRole::prefetch) continue;
    delta[range.first] += s.buffers[b].bytes;
    delta[range.second + 1] -= s.buffers[b].bytes;
  }
  std::int64_t live = 0;
  std::int64_t peak = 0;
  for (std::size_t t = 0; t < n; ++t) peak = std::max(peak, live += delta[t]);
  return peak;
}

double seconds_of(const Schedule& s, TaskKind kind) {
  double total = 0;
  for (const auto& t : s.tasks) {
    if (t.kind == kind) total += t.seconds;
  }
  return total;
}

std::size_t count_of(const Schedule& s, TaskKind kind) {
  return static_cast<std::size_t>(std::count_if(s.tasks.begin(), s.tasks.end(), [&](const Task& t) { return t.kind == kind; }));
}

// The message of the InputError `build` throws, or "" (with a failure) when it throws none.
template <class Build>
std::string input_error_of(Build build) {
  try {
    (void)build();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError";
  return "";
}

// ---------------------------------------------------------------------------------------------
// Hand-computed: the tiny trace.

TEST(Baseline, TinyTraceMatchesLivenessExactly) {
  const auto trace = tiny();
  const Schedule s = build(trace, spec("baseline", {}));
  EXPECT_EQ(s.strategy, "baseline");
  ASSERT_EQ(s.buffers.size(), 7u);
  EXPECT_TRUE(s.buffers[0].resident);   // x
  EXPECT_EQ(s.buffers[0].role, MemoryRole::input);
  EXPECT_FALSE(s.buffers[1].resident);  // y
  EXPECT_EQ(s.buffers[1].role, MemoryRole::activation);
  EXPECT_TRUE(s.buffers[6].held_to_end);  // wg
  EXPECT_EQ(names(s), (std::vector<std::string>{"a", "b", "c", "seed", "b.backward", "a.backward"}));
  for (std::size_t i = 0; i < s.tasks.size(); ++i) {
    EXPECT_EQ(s.tasks[i].op, i);
    EXPECT_EQ(s.tasks[i].stream, Stream::compute);
    EXPECT_DOUBLE_EQ(s.tasks[i].seconds, time_model().seconds(trace, i));
  }
  EXPECT_EQ(s.tasks[1].creates, (std::vector<BufferId>{2}));
  EXPECT_EQ(s.tasks[1].uses, (std::vector<BufferId>{1, 2}));
  EXPECT_EQ(s.tasks[4].uses, (std::vector<BufferId>{1, 4, 5}));
  // Steps: 800, 1600, 1604 (x y z l), 808, 1204, 1240.
  EXPECT_EQ(sequential_peak_bytes(s), 1604);
  EXPECT_EQ(traces::summarize(trace).peak_bytes, 1604);
}

TEST(Offload, TinyTraceTasksAndPeak) {
  const auto trace = tiny();
  const Schedule s = build(trace, spec("offload", {offload_rule(1)}));
  // Offload after y's last forward use (b). Lookahead 1: the prefetch starts when the compute
  // stream starts the op just before b.backward (seed), i.e. once c ends.
  EXPECT_EQ(names(s), (std::vector<std::string>{"a", "b", "offload y", "c", "prefetch y", "seed", "b.backward",
                                                "a.backward"}));
  const Task& off = s.tasks[2];
  EXPECT_EQ(off.kind, TaskKind::offload);
  EXPECT_EQ(off.stream, Stream::d2h);
  EXPECT_EQ(off.bytes, 400);
  EXPECT_EQ(off.tensor, 1u);
  EXPECT_EQ(off.after, (std::vector<TaskId>{1}));
  EXPECT_EQ(off.uses, (std::vector<BufferId>{1}));
  const Task& pre = s.tasks[4];
  EXPECT_EQ(pre.kind, TaskKind::prefetch);
  EXPECT_EQ(pre.stream, Stream::h2d);
  EXPECT_EQ(pre.after, (std::vector<TaskId>{3, 2}));
  ASSERT_EQ(pre.creates.size(), 1u);
  const BufferId p = pre.creates[0];
  EXPECT_EQ(s.buffers[p].role, MemoryRole::prefetch);
  EXPECT_EQ(s.buffers[p].bytes, 400);
  EXPECT_EQ(p, 2u);  // the prefetch buffer follows its storage's buffer: gl is now 5, gy 6
  EXPECT_EQ(s.tasks[6].uses, (std::vector<BufferId>{2, 5, 6}));
  EXPECT_EQ(s.tasks[6].after, (std::vector<TaskId>{4}));
  EXPECT_EQ(s.tasks[7].after, (std::vector<TaskId>{4}));
  // The peak is still while b runs (x y z), before y leaves.
  EXPECT_EQ(sequential_peak_bytes(s), 1600);

  // A longer lookahead is clamped: the prefetch never starts before the last forward op ends.
  const Schedule longer = build(trace, spec("offload", {offload_rule(2)}));
  EXPECT_EQ(names(longer), names(s));
  const Schedule clamped = build(trace, spec("offload", {offload_rule(10)}));
  EXPECT_EQ(names(clamped), names(s));
}

// torchtune's OffloadActivations on a 6-layer chain (x1..x6 saved, each by its writer f_i):
// with a stash of 2, x_i is held until x_{i+2} is saved (through f_{i+2}), and the op after that
// waits for x_i's copy out; x5 and x6, which nothing saved later releases, stay on the GPU for
// the backward pass (no copy either way). Lookahead 0: each copy back starts when the op before
// its consumer ends.
TEST(Offload, TorchtuneStashHoldsEachTensorUntilTwoLaterOnesAreSaved) {
  const auto trace = chain(6);
  StrategyRule rule = offload_rule(0);
  std::get<OffloadAction>(rule.action).stash = 2;
  const Schedule s = build(trace, spec("torchtune", {rule}));
  const auto task = [&](const std::string& name) -> TaskId {
    for (TaskId t = 0; t < s.tasks.size(); ++t) {
      if (s.tasks[t].name == name) return t;
    }
    ADD_FAILURE() << "no task " << name;
    return 0;
  };
  for (const std::string kept : {"x5", "x6"}) {
    for (const Task& t : s.tasks) {
      EXPECT_EQ(t.name.find(" " + kept), std::string::npos) << t.name;
    }
  }
  for (int i = 1; i <= 4; ++i) {
    const std::string x = "x" + std::to_string(i);
    SCOPED_TRACE(x);
    const TaskId out = task("offload " + x);
    const TaskId writer = task("f" + std::to_string(i));
    EXPECT_EQ(out, writer + 1);  // issued when the tensor is saved
    EXPECT_EQ(s.tasks[out].after, (std::vector<TaskId>{writer}));
    // Held through the op that saves x_{i+2}; the op after it waits for the copy out.
    const TaskId release = task("f" + std::to_string(i + 2));
    const BufferId original = s.tasks[out].uses.front();
    EXPECT_NE(std::find(s.tasks[release].uses.begin(), s.tasks[release].uses.end(), original), s.tasks[release].uses.end());
    TaskId next = release + 1;
    while (s.tasks[next].kind != TaskKind::op) ++next;
    const auto& waits = s.tasks[next].after;
    EXPECT_NE(std::find(waits.begin(), waits.end(), out), waits.end()) << s.tasks[next].name;
    // The copy back: after the op just before the consumer f_i.backward.
    const TaskId in = task("prefetch " + x);
    TaskId consumer = task("f" + std::to_string(i) + ".backward");
    TaskId before = consumer - 1;
    while (s.tasks[before].kind != TaskKind::op) --before;
    EXPECT_EQ(s.tasks[in].after.front(), before);
  }
  // x5 and x6 are read in the backward pass from their own buffers.
  EXPECT_EQ(count_of(s, TaskKind::offload), 4u);
  EXPECT_EQ(count_of(s, TaskKind::prefetch), 4u);
}

TEST(Compress, TinyTraceTasksAndPeak) {
  const auto trace = tiny();
  const Schedule s = build(trace, spec("compress", {compress_rule(codec(4))}));
  EXPECT_EQ(names(s), (std::vector<std::string>{"a", "b", "compress y", "c", "seed", "decompress y", "b.backward",
                                                "a.backward"}));
  const Task& c = s.tasks[2];
  EXPECT_EQ(c.kind, TaskKind::compress);
  EXPECT_EQ(c.stream, Stream::codec);
  EXPECT_DOUBLE_EQ(c.seconds, 0.5 + 400.0 / 1000);
  EXPECT_EQ(c.after, (std::vector<TaskId>{1}));
  EXPECT_EQ(c.uses, (std::vector<BufferId>{1}));
  ASSERT_EQ(c.creates.size(), 1u);
  EXPECT_EQ(s.buffers[c.creates[0]].role, MemoryRole::compressed);
  EXPECT_EQ(s.buffers[c.creates[0]].bytes, 100);
  const Task& d = s.tasks[5];
  EXPECT_EQ(d.kind, TaskKind::decompress);
  EXPECT_EQ(d.stream, Stream::codec);
  EXPECT_DOUBLE_EQ(d.seconds, 0.5 + 400.0 / 2000);
  EXPECT_EQ(d.after, (std::vector<TaskId>{4, 2}));  // seed (just before b.backward), compress
  EXPECT_EQ(d.uses, c.creates);
  ASSERT_EQ(d.creates.size(), 1u);
  EXPECT_EQ(s.buffers[d.creates[0]].role, MemoryRole::activation);
  EXPECT_EQ(s.buffers[d.creates[0]].bytes, 400);
  EXPECT_EQ(s.tasks[6].after, (std::vector<TaskId>{5}));
  // a 800, b 1600, compress 1700 (y and its compressed copy), c 1304, seed 508,
  // decompress 904, b.backward 1204, a.backward 1240.
  EXPECT_EQ(sequential_peak_bytes(s), 1700);

  // Ratio 3 rounds up: ceil(400 / 3) = 134.
  const Schedule r3 = build(trace, spec("compress", {compress_rule(codec(3))}));
  EXPECT_EQ(r3.buffers[r3.tasks[2].creates[0]].bytes, 134);
}

TEST(Recompute, TinyTraceEveryK) {
  const auto trace = tiny();
  // One candidate: k = 2 keeps none (the 2nd, 4th, ...), so y is dropped and rebuilt.
  const Schedule s = build(trace, spec("recompute", {recompute_rule(RecomputeAction::Mode::every_k, 2)}));
  EXPECT_EQ(names(s), (std::vector<std::string>{"a", "b", "c", "seed", "a (recompute)", "b.backward", "a.backward"}));
  const Task& r = s.tasks[4];
  EXPECT_EQ(r.kind, TaskKind::recompute);
  EXPECT_EQ(r.stream, Stream::compute);
  EXPECT_EQ(r.op, 0u);
  EXPECT_DOUBLE_EQ(r.seconds, time_model().seconds(trace, 0));
  ASSERT_EQ(r.creates.size(), 1u);
  const BufferId y2 = r.creates[0];
  EXPECT_EQ(s.buffers[y2].role, MemoryRole::activation);
  EXPECT_EQ(s.buffers[y2].bytes, 400);
  EXPECT_EQ(r.uses, (std::vector<BufferId>{0, y2}));
  EXPECT_EQ(s.tasks[5].uses, (std::vector<BufferId>{4, 5, y2}));
  EXPECT_EQ(s.tasks[6].uses, (std::vector<BufferId>{5, 6, y2}));
  // a 800, b 1600, c 1204, seed 408, recompute 804, 1204, 1240.
  EXPECT_EQ(sequential_peak_bytes(s), 1600);
  EXPECT_NE(s.strategy.find("recomputed ops 1"), std::string::npos) << s.strategy;

  // sqrt_n with n = 1: k = 1 keeps everything.
  const Schedule sq = build(trace, spec("sqrt", {recompute_rule(RecomputeAction::Mode::sqrt_n)}));
  EXPECT_EQ(count_of(sq, TaskKind::recompute), 0u);
}

TEST(Recompute, TinyTraceBudget) {
  const auto trace = tiny();
  // y must be materialised for the backward pass anyway: 400 is the floor.
  const auto at = [&](std::int64_t budget) {
    return test_support::must_apply(build_schedule(trace, time_model(), spec("budget", {recompute_rule(RecomputeAction::Mode::budget, 2, budget)})));
  };
  EXPECT_EQ(count_of(at(400), TaskKind::recompute), 0u);
  const auto below = build_schedule(trace, time_model(), spec("budget", {recompute_rule(RecomputeAction::Mode::budget, 2, 399)}));
  EXPECT_TRUE(std::holds_alternative<NotApplicable>(below));
}

TEST(Rules, SelectorsAndFirstMatchWins) {
  const auto trace = tiny();
  TensorSelector conv_inputs;
  conv_inputs.inputs_of = {OpKind::conv};
  TensorSelector relu_outputs;
  relu_outputs.outputs_of = {OpKind::relu};
  TensorSelector big;
  big.min_bytes = 401;
  TensorSelector pool_inputs;
  pool_inputs.inputs_of = {OpKind::pool};
  // y is read by a conv (b) and written by a relu (a); 400 bytes.
  EXPECT_EQ(count_of(build(trace, spec("s", {compress_rule(codec(2), conv_inputs)})), TaskKind::compress), 1u);
  EXPECT_EQ(count_of(build(trace, spec("s", {compress_rule(codec(2), relu_outputs)})), TaskKind::compress), 1u);
  EXPECT_EQ(count_of(build(trace, spec("s", {compress_rule(codec(2), big)})), TaskKind::compress), 0u);
  EXPECT_EQ(count_of(build(trace, spec("s", {compress_rule(codec(2), pool_inputs)})), TaskKind::compress), 0u);
  // First match wins.
  const Schedule s = build(trace, spec("s", {offload_rule(1, conv_inputs), compress_rule(codec(2))}));
  EXPECT_EQ(count_of(s, TaskKind::offload), 1u);
  EXPECT_EQ(count_of(s, TaskKind::compress), 0u);
}

// A rule with no action or two cannot be written (StrategyRule holds one variant); the numbers
// of an action are checked, once, by validate_strategy, which build_schedule calls too.
TEST(Rules, InvalidRulesAreInputErrors) {
  const auto trace = tiny();
  EXPECT_THROW(validate_strategy(spec("s", {offload_rule(-1)})), InputError);
  CompressAction no_ratio = codec(2);
  no_ratio.ratio.reset();  // without a profile the ratio is required
  EXPECT_THROW(validate_strategy(spec("s", {compress_rule(no_ratio)})), InputError);
  EXPECT_NO_THROW(validate_strategy(spec("s", {offload_rule(1), compress_rule(codec(2))})));
  EXPECT_THROW(build_schedule(trace, time_model(), spec("s", {offload_rule(-1)})), InputError);
  EXPECT_THROW(build_schedule(trace, time_model(), spec("s", {compress_rule(codec(0.5))})), InputError);
  CompressAction no_bandwidth = codec(2);
  no_bandwidth.decompress_bandwidth = 0;
  EXPECT_THROW(build_schedule(trace, time_model(), spec("s", {compress_rule(no_bandwidth)})), InputError);
  EXPECT_THROW(build_schedule(trace, time_model(), spec("s", {recompute_rule(RecomputeAction::Mode::every_k, 0)})),
               InputError);
}

// A rule read from a file carries its position (StrategyRule::location), so that an error found
// only when a trace meets it names the file, the line and the field, not an index (shared/
// defects-2/20: "strategy 's' rule 0: offload host_memory pageable needs ..." named neither).
TEST(Rules, ErrorsNameTheRulesLocationWhenItHasOne) {
  const auto trace = tiny();
  StrategyRule pageable = offload_rule(1);
  std::get<OffloadAction>(pageable.action).host_memory = OffloadAction::HostMemory::pageable;
  pageable.location = "s.yaml:7:7: strategy.rules[1]";
  // The test platform gives no host_link.pageable_bandwidth: found while the schedule is built,
  // for rule 1 (rule 0 selects nothing: every activation of the tiny trace is below 1 MiB).
  TensorSelector large;
  large.min_bytes = 1 << 20;
  const std::string built = input_error_of([&] { return build_schedule(trace, time_model(), spec("s", {compress_rule(codec(2), large), pageable})); });
  EXPECT_EQ(built.rfind("s.yaml:7:7: strategy.rules[1]: offload host_memory pageable needs the platform's host_link.pageable_bandwidth", 0), 0u) << built;
  // Found by validate_strategy: the location, and the source is not repeated.
  StrategyRule bad = offload_rule(-1);
  bad.location = "s.yaml:9:7: plan.strategies[2].rules[0]";
  const std::string checked = input_error_of([&] { validate_strategy(spec("s", {bad}), "s.yaml"); return 0; });
  EXPECT_EQ(checked, "s.yaml:9:7: plan.strategies[2].rules[0]: offload lookahead must be >= 0");
  // A rule built in code has no location: the strategy's name and the rule's index, after the source.
  EXPECT_EQ(input_error_of([&] { validate_strategy(spec("s", {offload_rule(-1)}), "s.yaml"); return 0; }),
            "s.yaml: strategy 's' rule 0: offload lookahead must be >= 0");
  EXPECT_EQ(rule_context(spec("s", {offload_rule(1)}), 0), "strategy 's' rule 0: ");
}

// ---------------------------------------------------------------------------------------------
// Compress with a profile: each storage's ratio from its class's model at the error bound, with
// the class's default features overridden by those the trace gives (traces/FORMAT.md, "values").

// A profile whose szp ratio depends on the zero fraction (and the error bound); post_relu and
// generic models with different defaults.
std::shared_ptr<const CalibrationProfile> ratio_profile() {
  CalibrationProfile p;
  p.name = "features-test";
  p.source = "embedded:features-test";
  CodecProfile codec;
  codec.codec = "szp";
  codec.compress.latency = 1e-5;
  codec.compress.bandwidth = 1e11;
  codec.decompress.latency = 1e-5;
  codec.decompress.bandwidth = 2e11;
  RatioModel post_relu;
  post_relu.c0 = 4;
  post_relu.c_log_eb = -1;
  post_relu.c_zero = -8;
  post_relu.max_ratio = 32;
  post_relu.default_features.zero_fraction = 0.5;
  post_relu.default_features.spread = 0.2;
  RatioModel generic = post_relu;
  generic.c_zero = -2;
  generic.default_features.zero_fraction = 0.1;
  codec.ratio[TensorClass::post_relu] = post_relu;
  codec.ratio[TensorClass::generic] = generic;
  p.codecs.push_back(codec);
  return std::make_shared<const CalibrationProfile>(p);
}

CompressAction profiled(std::shared_ptr<const CalibrationProfile> profile, double error_bound) {
  CompressAction c;
  c.profile = std::move(profile);
  c.codec = "szp";
  c.error_bound = error_bound;  // ratio, bandwidths and latency unset: all from the profile
  return c;
}

// x -a(relu)-> y1 -b(relu)-> y2 -c(conv)-> z -loss-> l; backward reads y1 and y2. Both saved
// activations are post_relu, 4000 bytes each; `values` gives them value features.
// The same with the saved activations' element types set (1000 elements each).
traces::Trace two_relus_of(traces::DType y1_type, traces::DType y2_type, const traces::ValueFeatures& y1_values = {},
                           const traces::ValueFeatures& y2_values = {}) {
  Builder b;
  const auto x = b.tensor("x", 4000, TensorRole::input);
  const auto y1 = b.tensor("y1", 4000, TensorRole::activation);
  const auto y2 = b.tensor("y2", 4000, TensorRole::activation);
  b.at(y1).dtype = y1_type;
  b.at(y2).dtype = y2_type;
  b.at(y1).values = y1_values;
  b.at(y2).values = y2_values;
  const auto z = b.tensor("z", 4000, TensorRole::temporary);
  const auto l = b.tensor("l", 4, TensorRole::temporary);
  const auto gl = b.tensor("gl", 4, TensorRole::temporary);
  const auto g2 = b.tensor("g2", 4000, TensorRole::temporary);
  const auto g1 = b.tensor("g1", 4000, TensorRole::temporary);
  const auto wg = b.tensor("wg", 40, TensorRole::gradient);
  b.op("a", Phase::forward, OpKind::relu, {x}, {y1}, 100);
  b.op("b", Phase::forward, OpKind::relu, {y1}, {y2}, 100);
  b.op("c", Phase::forward, OpKind::conv, {y2}, {z}, 1000);
  b.op("loss", Phase::forward, OpKind::loss, {z}, {l}, 10);
  b.op("seed", Phase::backward, OpKind::other, {l}, {gl});
  b.op("c.backward", Phase::backward, OpKind::conv, {gl, y2}, {g2}, 1000);
  b.op("b.backward", Phase::backward, OpKind::relu, {g2, y2}, {g1}, 100);
  b.op("a.backward", Phase::backward, OpKind::relu, {g1, y1}, {wg}, 100);
  return b.build("two-relus");
}

traces::Trace two_relus(const traces::ValueFeatures& y1_values, const traces::ValueFeatures& y2_values) {
  return two_relus_of(traces::DType::f32, traces::DType::f32, y1_values, y2_values);
}

// The compressed size of each compressed storage, by storage.
std::map<std::size_t, std::int64_t> compressed_bytes(const Schedule& s) {
  std::map<std::size_t, std::int64_t> out;
  for (const Task& t : s.tasks) {
    if (t.kind == TaskKind::compress && t.tensor && t.creates.size() == 1) out[*t.tensor] = s.buffers[t.creates[0]].bytes;
  }
  return out;
}

traces::ValueFeatures zeros(double fraction) {
  traces::ValueFeatures v;
  v.zero_fraction = fraction;
  return v;
}

TEST(CompressFeatures, TensorsOfOneClassGetTheRatioOfTheirOwnFeatures) {
  const auto profile = ratio_profile();
  const RatioModel& model = profile->find("szp")->ratio_model(TensorClass::post_relu);
  const traces::Trace trace = two_relus(zeros(0.2), zeros(0.8));
  const Schedule s = build(trace, spec("compress", {compress_rule(profiled(profile, 1e-3))}));
  // The profile's prediction for each tensor's own features: the class defaults with the zero
  // fraction replaced, nothing else.
  DataFeatures f1 = model.default_features;
  f1.zero_fraction = 0.2;
  DataFeatures f2 = model.default_features;
  f2.zero_fraction = 0.8;
  const double r1 = model.ratio(1e-3, f1);
  const double r2 = model.ratio(1e-3, f2);
  ASSERT_GT(r2, r1 * 1.5);  // the zero fraction matters in this profile
  ASSERT_LT(r2, model.max_ratio);
  const auto sizes = compressed_bytes(s);
  ASSERT_EQ(sizes.size(), 2u);
  EXPECT_EQ(sizes.at(1), static_cast<std::int64_t>(std::ceil(4000 / r1)));
  EXPECT_EQ(sizes.at(2), static_cast<std::int64_t>(std::ceil(4000 / r2)));
  EXPECT_NE(sizes.at(1), sizes.at(2));

  // The report does not claim one ratio for the class: it gives the byte-weighted mean and says
  // how many tensors had their own features.
  ASSERT_EQ(s.compression.size(), 1u);
  ASSERT_EQ(s.compression[0].ratios.size(), 1u);
  EXPECT_EQ(s.compression[0].ratios[0].first, TensorClass::post_relu);
  EXPECT_DOUBLE_EQ(s.compression[0].ratios[0].second, 8000 / (4000 / r1 + 4000 / r2));
  ASSERT_EQ(s.compression_features.size(), 1u);
  EXPECT_EQ(s.compression_features[0].rule, 0u);
  EXPECT_EQ(s.compression_features[0].storages, 2u);
  EXPECT_EQ(s.compression_features[0].with_features, 2u);
}

TEST(CompressFeatures, ATraceWithoutFeaturesGivesTheClassDefaultsExactly) {
  const auto profile = ratio_profile();
  const RatioModel& model = profile->find("szp")->ratio_model(TensorClass::post_relu);
  const Schedule s = build(two_relus({}, {}), spec("compress", {compress_rule(profiled(profile, 1e-3))}));
  const double ratio = model.ratio(1e-3);
  for (const auto& [storage, bytes] : compressed_bytes(s)) {
    EXPECT_EQ(bytes, static_cast<std::int64_t>(std::ceil(4000 / ratio))) << storage;
  }
  ASSERT_EQ(s.compression.size(), 1u);
  ASSERT_EQ(s.compression[0].ratios.size(), 1u);
  EXPECT_DOUBLE_EQ(s.compression[0].ratios[0].second, ratio);  // the class's one ratio (bytes / compressed bytes)
  EXPECT_EQ(s.compression_features[0].storages, 2u);
  EXPECT_EQ(s.compression_features[0].with_features, 0u);

  // An explicit ratio (what-if) ignores the features.
  CompressAction what_if = profiled(profile, 1e-3);
  what_if.ratio = 4;
  const Schedule w = build(two_relus(zeros(0.2), zeros(0.8)), spec("compress", {compress_rule(what_if)}));
  for (const auto& [storage, bytes] : compressed_bytes(w)) EXPECT_EQ(bytes, 1000) << storage;
  EXPECT_EQ(w.compression_features[0].with_features, 0u);
}

TEST(CompressFeatures, GivenFieldsOverrideTheDefaultsOneByOne) {
  const auto profile = ratio_profile();
  const RatioModel& model = profile->find("szp")->ratio_model(TensorClass::post_relu);
  traces::ValueFeatures spread_only;
  spread_only.spread = 0.05;
  traces::ValueFeatures all;
  all.zero_fraction = 0.7;
  all.spread = 0.3;
  all.zero_block_fraction = 0.25;
  all.block_scale = 0.01;
  const Schedule s = build(two_relus(spread_only, all), spec("compress", {compress_rule(profiled(profile, 1e-2))}));
  DataFeatures f1 = model.default_features;
  f1.spread = 0.05;
  DataFeatures f2;
  f2.zero_fraction = 0.7;
  f2.spread = 0.3;
  f2.zero_block_fraction = 0.25;
  f2.block_scale = 0.01;
  const auto sizes = compressed_bytes(s);
  EXPECT_EQ(sizes.at(1), static_cast<std::int64_t>(std::ceil(4000 / model.ratio(1e-2, f1))));
  EXPECT_EQ(sizes.at(2), static_cast<std::int64_t>(std::ceil(4000 / model.ratio(1e-2, f2))));
}

// error_bound_mode abs: each storage's relative bound is the absolute one over its own range.
TEST(CompressFeatures, AnAbsoluteBoundIsRelativeToEachTensorsRange) {
  const auto profile = ratio_profile();
  const RatioModel& model = profile->find("szp")->ratio_model(TensorClass::post_relu);
  traces::ValueFeatures narrow, wide;
  narrow.range = 0.5;
  wide.range = 50.0;
  CompressAction abs = profiled(profile, 0.05);
  abs.error_bound_mode = ErrorBoundMode::abs;
  const Schedule s = build(two_relus(narrow, wide), spec("compress", {compress_rule(abs)}));
  const double r1 = model.ratio(0.05 / 0.5);   // relative 1e-1
  const double r2 = model.ratio(0.05 / 50.0);  // relative 1e-3
  ASSERT_GT(r1, r2);
  const auto sizes = compressed_bytes(s);
  ASSERT_EQ(sizes.size(), 2u);
  EXPECT_EQ(sizes.at(1), static_cast<std::int64_t>(std::ceil(4000 / r1)));
  EXPECT_EQ(sizes.at(2), static_cast<std::int64_t>(std::ceil(4000 / r2)));
  ASSERT_EQ(s.compression.size(), 1u);
  EXPECT_EQ(s.compression[0].error_bound_mode, ErrorBoundMode::abs);
  EXPECT_DOUBLE_EQ(s.compression[0].ratios[0].second, 8000 / (4000 / r1 + 4000 / r2));  // per tensor: the mean

  // A tensor without a range cannot take an absolute bound: an input error naming it.
  try {
    build(two_relus(narrow, {}), spec("compress", {compress_rule(abs)}));
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'y2' has none in the trace"), std::string::npos) << e.what();
  }
  // Constant data (range 0): one value to code, the bound capped at the whole range.
  traces::ValueFeatures flat;
  flat.range = 0.0;
  const auto flat_sizes = compressed_bytes(build(two_relus(flat, wide), spec("compress", {compress_rule(abs)})));
  EXPECT_EQ(flat_sizes.at(1), static_cast<std::int64_t>(std::ceil(4000 / model.ratio(1.0))));
}

TEST(CompressFeatures, AStorageUsesTheFeaturesOfItsLastForwardWritersTensor) {
  // bn writes y, an in-place relu_ overwrites it (y_relu, a view of y): the compressor sees the
  // ReLU's output, so the class is post_relu and the features are y_relu's, not y's.
  const auto build_trace = [](const traces::ValueFeatures& base, const traces::ValueFeatures& view) {
    Builder b;
    const auto x = b.tensor("x", 4000, TensorRole::input);
    const auto y = b.tensor("y", 4000, TensorRole::activation);
    const auto y_relu = b.view("y_relu", y);
    const auto z = b.tensor("z", 4000, TensorRole::temporary);
    const auto gz = b.tensor("gz", 4000, TensorRole::temporary);
    const auto wg = b.tensor("wg", 40, TensorRole::gradient);
    b.at(y).values = base;
    b.at(y_relu).values = view;
    b.op("bn", Phase::forward, OpKind::batchnorm, {x}, {y}, 100);
    b.op("relu_", Phase::forward, OpKind::relu, {y}, {y_relu}, 100);
    b.op("c", Phase::forward, OpKind::conv, {y_relu}, {z}, 1000);
    b.op("seed", Phase::backward, OpKind::other, {z}, {gz});
    b.op("c.backward", Phase::backward, OpKind::conv, {gz, y_relu}, {wg}, 1000);
    return b.build("bn-relu");
  };
  const auto profile = ratio_profile();
  const RatioModel& model = profile->find("szp")->ratio_model(TensorClass::post_relu);
  const auto rule = spec("compress", {compress_rule(profiled(profile, 1e-3))});
  const auto default_bytes = static_cast<std::int64_t>(std::ceil(4000 / model.ratio(1e-3)));
  DataFeatures mostly_zero = model.default_features;
  mostly_zero.zero_fraction = 0.9;
  const auto own_bytes = static_cast<std::int64_t>(std::ceil(4000 / model.ratio(1e-3, mostly_zero)));
  ASSERT_NE(default_bytes, own_bytes);

  // Features on the storage owner (the batch-norm output) describe content the ReLU overwrote.
  const Schedule on_base = build(build_trace(zeros(0.9), {}), rule);
  EXPECT_EQ(compressed_bytes(on_base).at(1), default_bytes);
  EXPECT_EQ(on_base.compression_features[0].with_features, 0u);
  const Schedule on_view = build(build_trace(zeros(0.0), zeros(0.9)), rule);
  EXPECT_EQ(compressed_bytes(on_view).at(1), own_bytes);
  EXPECT_EQ(on_view.compression_features[0].with_features, 1u);
}

// ---------------------------------------------------------------------------------------------
// Chains: Chen et al.'s √n bound and the budget mode.

TEST(Recompute, SqrtNChainKeepsActivationPeakWithinConstantTimesSqrtN) {
  constexpr std::int64_t kLayer = 4096;
  for (const int n : {16, 64, 256}) {
    const auto trace = chain(n);
    const Schedule base = build(trace, spec("baseline", {}));
    const Schedule s = build(trace, spec("sqrt", {recompute_rule(RecomputeAction::Mode::sqrt_n)}));
    const auto k = static_cast<std::size_t>(std::ceil(std::sqrt(n)));
    const std::size_t kept = static_cast<std::size_t>(n) / k;
    // Every dropped activation is replayed exactly once (one recomputation per segment).
    EXPECT_EQ(count_of(s, TaskKind::recompute), static_cast<std::size_t>(n) - kept) << n;
    EXPECT_EQ(activation_peak(base), n * kLayer) << n;
    // Checkpoints (n/k) plus one segment being rebuilt (k) plus the layer in flight.
    const std::int64_t peak = activation_peak(s);
    EXPECT_LE(peak, static_cast<std::int64_t>(kept + k + 1) * kLayer) << n;
    EXPECT_LE(static_cast<double>(peak), 2.5 * std::sqrt(n) * kLayer) << n;
    EXPECT_LT(sequential_peak_bytes(s), sequential_peak_bytes(base)) << n;
  }
}

TEST(Recompute, EveryKDropsTheRightStorages) {
  const auto trace = chain(6);
  const Schedule s = build(trace, spec("k3", {recompute_rule(RecomputeAction::Mode::every_k, 3)}));
  // Keep x3 and x6; drop x1, x2, x4, x5: rebuilding x5 replays f4, f5 from x3.
  EXPECT_EQ(count_of(s, TaskKind::recompute), 4u);
  std::vector<std::string> replayed;
  for (const auto& t : s.tasks) {
    if (t.kind == TaskKind::recompute) replayed.push_back(t.name);
  }
  EXPECT_EQ(replayed, (std::vector<std::string>{"f4 (recompute)", "f5 (recompute)", "f1 (recompute)",
                                                "f2 (recompute)"}));
  // every_k with k = 1 keeps everything.
  const Schedule all = build(trace, spec("k1", {recompute_rule(RecomputeAction::Mode::every_k, 1)}));
  EXPECT_EQ(count_of(all, TaskKind::recompute), 0u);
}

// Checkpoints keep the named block inputs (names or fnmatch patterns) and drop the rest: the
// same plan as every_k 3 on a 6-chain, written as torch.utils.checkpoint users write it.
TEST(Recompute, CheckpointsKeepTheNamedInputs) {
  const auto trace = chain(6);
  for (const std::vector<std::string>& keep : {std::vector<std::string>{"x3", "x6"}, std::vector<std::string>{"x[36]"}}) {
    StrategyRule rule = recompute_rule(RecomputeAction::Mode::checkpoints);
    std::get<RecomputeAction>(rule.action).keep = keep;
    const Schedule s = build(trace, spec("checkpoints", {rule}));
    std::vector<std::string> replayed;
    for (const auto& t : s.tasks) {
      if (t.kind == TaskKind::recompute) replayed.push_back(t.name);
    }
    EXPECT_EQ(replayed, (std::vector<std::string>{"f4 (recompute)", "f5 (recompute)", "f1 (recompute)", "f2 (recompute)"}));
  }
  // A selector narrows what is dropped: outside it everything is kept.
  StrategyRule narrow = recompute_rule(RecomputeAction::Mode::checkpoints, 2, 0, TensorSelector{{}, {}, 0, {"x4", "x5", "x6"}, {}});
  std::get<RecomputeAction>(narrow.action).keep = {"x6"};
  const Schedule n = build(trace, spec("narrow", {narrow}));
  EXPECT_EQ(count_of(n, TaskKind::recompute), 2u);  // f4, f5 from the kept x3
  // Without `keep` the mode is an input error, as is `keep` on another mode.
  EXPECT_THROW(build_schedule(trace, time_model(), spec("c", {recompute_rule(RecomputeAction::Mode::checkpoints)})), InputError);
  StrategyRule stray = recompute_rule(RecomputeAction::Mode::sqrt_n);
  std::get<RecomputeAction>(stray.action).keep = {"x3"};
  EXPECT_THROW(build_schedule(trace, time_model(), spec("s", {stray})), InputError);
}

// x -f1-> a (temporary) -f2-> b (saved) -f3-> c (saved) -> loss, and the backward of f3 and f2:
// `a` is a block input autograd does not save.
traces::Trace unsaved_block_input_trace() {
  Builder b;
  const auto x = b.tensor("x", 400, TensorRole::input);
  const auto a = b.tensor("a", 400, TensorRole::temporary);
  const auto bb = b.tensor("b", 400, TensorRole::activation);
  const auto c = b.tensor("c", 400, TensorRole::activation);
  const auto l = b.tensor("l", 4, TensorRole::temporary);
  const auto gl = b.tensor("gl", 4, TensorRole::temporary);
  const auto gc = b.tensor("gc", 400, TensorRole::temporary);
  const auto wg = b.tensor("wg", 40, TensorRole::gradient);
  b.op("f1", Phase::forward, OpKind::relu, {x}, {a}, 100);
  b.op("f2", Phase::forward, OpKind::relu, {a}, {bb}, 100);
  b.op("f3", Phase::forward, OpKind::relu, {bb}, {c}, 100);
  b.op("loss", Phase::forward, OpKind::loss, {c}, {l}, 10);
  b.op("seed", Phase::backward, OpKind::other, {l}, {gl});
  b.op("f3.backward", Phase::backward, OpKind::relu, {gl, c}, {gc}, 100);
  b.op("f2.backward", Phase::backward, OpKind::relu, {gc, bb}, {wg}, 100);
  return b.build("block");
}

// A block input that autograd does not save (under autocast a linear saves its 16-bit copy, not
// the fp32 layer input) is kept all the same, and the replay starts from it: x -f1-> a
// (temporary) -f2-> b (saved) -f3-> c (saved); keeping `a` replays f2 and f3, never f1.
TEST(Recompute, CheckpointsKeepABlockInputAutogradDoesNotSave) {
  const auto trace = unsaved_block_input_trace();
  StrategyRule rule = recompute_rule(RecomputeAction::Mode::checkpoints);
  std::get<RecomputeAction>(rule.action).keep = {"a"};
  const Schedule s = build(trace, spec("checkpoints", {rule}));
  std::vector<std::string> replayed;
  for (const auto& t : s.tasks) {
    if (t.kind == TaskKind::recompute) replayed.push_back(t.name);
  }
  EXPECT_EQ(replayed, (std::vector<std::string>{"f2 (recompute)", "f3 (recompute)"}));
  // `a`'s buffer is the one the replay of f2 reads: it lives into the backward pass.
  const auto f1 = std::find_if(s.tasks.begin(), s.tasks.end(), [](const auto& t) { return t.name == "f1"; });
  const auto f2r = std::find_if(s.tasks.begin(), s.tasks.end(), [](const auto& t) { return t.name == "f2 (recompute)"; });
  ASSERT_TRUE(f1 != s.tasks.end() && f2r != s.tasks.end());
  ASSERT_EQ(f1->creates.size(), 1u);
  EXPECT_NE(std::find(f2r->uses.begin(), f2r->uses.end(), f1->creates[0]), f2r->uses.end());
}

// save_on_cpu around a checkpointed block (FSDP's offload_wrapper): the non-reentrant checkpoint
// saves the block's input through the enclosing hooks, so an offload rule ahead of the
// checkpoints rule takes that pinned input. The trace of the test above: `a` is copied out on
// the compute stream after its writer f1, back on the compute stream before the replay of f2,
// which reads the copy (the copy out holds the launching thread: save_on_cpu's blocking copy_);
// f1's buffer is not read in the backward pass. The first selecting rule
// decides: behind the checkpoints rule (which selects everything) the offload rule takes nothing.
TEST(Recompute, AnOffloadRuleAheadOfACheckpointsRuleTakesItsPinnedInput) {
  const auto trace = unsaved_block_input_trace();
  StrategyRule checkpoints = recompute_rule(RecomputeAction::Mode::checkpoints);
  std::get<RecomputeAction>(checkpoints.action).keep = {"a"};
  StrategyRule save_on_cpu = offload_rule(1, TensorSelector{{}, {}, 0, {"a"}, {}});
  std::get<OffloadAction>(save_on_cpu.action).stream = OffloadAction::Stream::compute;

  const Schedule s = build(trace, spec("save_on_cpu + checkpoints", {save_on_cpu, checkpoints}));
  const auto named = [&](const std::string& name) {
    const auto it = std::find_if(s.tasks.begin(), s.tasks.end(), [&](const auto& t) { return t.name == name; });
    EXPECT_TRUE(it != s.tasks.end()) << name;
    return it;
  };
  const auto f1 = named("f1"), out = named("offload a"), in = named("prefetch a"), f2r = named("f2 (recompute)");
  ASSERT_TRUE(f1 != s.tasks.end() && out != s.tasks.end() && in != s.tasks.end() && f2r != s.tasks.end());
  EXPECT_EQ(out->stream, Stream::compute);
  EXPECT_EQ(in->stream, Stream::compute);
  EXPECT_TRUE(out->blocks_host);   // save_on_cpu packs with a blocking copy_, pinned or not
  EXPECT_FALSE(in->blocks_host);   // and unpacks with non_blocking=pin_memory
  EXPECT_EQ(out->bytes, 400);
  EXPECT_LT(f1 - s.tasks.begin(), out - s.tasks.begin());
  ASSERT_EQ(f1->creates.size(), 1u);
  ASSERT_EQ(in->creates.size(), 1u);
  EXPECT_NE(std::find(f2r->uses.begin(), f2r->uses.end(), in->creates[0]), f2r->uses.end());
  for (const auto& t : s.tasks) {
    if (t.kind == TaskKind::op && t.op && trace.op(*t.op).phase == Phase::forward) continue;
    if (&t == &*out) continue;
    EXPECT_EQ(std::find(t.uses.begin(), t.uses.end(), f1->creates[0]), t.uses.end()) << t.name << " reads f1's buffer";
  }

  const Schedule behind = build(trace, spec("checkpoints + save_on_cpu", {checkpoints, save_on_cpu}));
  EXPECT_EQ(count_of(behind, TaskKind::offload), 0u);
  EXPECT_EQ(s.strategy.find("checkpoint inputs offloaded 1 (400 B)") != std::string::npos, true) << s.strategy;
  EXPECT_EQ(behind.strategy.find("checkpoint inputs"), std::string::npos) << behind.strategy;
  EXPECT_EQ(count_of(behind, TaskKind::recompute), 2u);
}

TEST(Models, NamePatternsAreFnmatchWithExactNamesAlwaysMatching) {
  EXPECT_TRUE(name_matches("bert.encoder.layer.*.output.LayerNorm.out", "bert.encoder.layer.11.output.LayerNorm.out"));
  EXPECT_FALSE(name_matches("bert.encoder.layer.*.output.LayerNorm.out", "bert.encoder.layer.11.output.LayerNorm.mean"));
  EXPECT_TRUE(name_matches("x[1]", "x[1]"));  // a name with pattern characters matches itself
  EXPECT_TRUE(name_matches("x?", "x7"));
}

TEST(Recompute, BudgetMeetsItsBudgetAndBeatsSqrtNOnAHeterogeneousChain) {
  for (const bool expensive : {false, true}) {
    const auto trace = chain(64, expensive);
    const Schedule sq = build(trace, spec("sqrt", {recompute_rule(RecomputeAction::Mode::sqrt_n)}));
    const std::int64_t budget = activation_peak(sq);
    const Schedule b = build(trace, spec("budget", {recompute_rule(RecomputeAction::Mode::budget, 2, budget)}));
    EXPECT_LE(activation_peak(b), budget);
    const double sq_seconds = seconds_of(sq, TaskKind::recompute);
    const double b_seconds = seconds_of(b, TaskKind::recompute);
    EXPECT_LE(b_seconds, sq_seconds * (1 + 1e-12)) << expensive;
    // With costly even layers, checkpoints move onto them: much less recomputation.
    if (expensive) {
      EXPECT_LT(b_seconds, 0.9 * sq_seconds);
    }
    // A looser budget recomputes less; an impossible one does not apply (a result, not an error).
    const Schedule loose =
        build(trace, spec("budget", {recompute_rule(RecomputeAction::Mode::budget, 2, activation_peak(sq) * 2)}));
    EXPECT_LE(seconds_of(loose, TaskKind::recompute), b_seconds);
    const auto impossible = build_schedule(trace, time_model(), spec("b", {recompute_rule(RecomputeAction::Mode::budget, 2, 4096)}));
    ASSERT_TRUE(std::holds_alternative<NotApplicable>(impossible));
    EXPECT_NE(std::get<NotApplicable>(impossible).reason.find("cannot be met"), std::string::npos);
  }
}

// ---------------------------------------------------------------------------------------------
// The zoo.

traces::Trace zoo_model(const std::string& name, std::int64_t batch) {
  zoo::ModelRequest request;
  request.model = name;
  request.batch_size = batch;
  if (name == "bert-base" || name == "gpt2") request.seq_len = 128;
  if (name == "gpt") {
    request.layers = 2;
    request.hidden = 256;
    request.heads = 4;
    request.seq_len = 128;
    request.vocab = 1000;
  }
  return zoo::build_model(request);
}

TEST(Baseline, SequentialPeakEqualsLivenessPeakForEveryZooModel) {
  for (const std::string name : {"alexnet", "vgg16", "resnet18", "resnet50", "resnet152", "bert-base", "gpt2", "gpt"}) {
    const auto trace = zoo_model(name, 2);
    const Schedule s = build(trace, spec("baseline", {}));
    EXPECT_EQ(sequential_peak_bytes(s), traces::summarize(trace).peak_bytes) << name;
    EXPECT_EQ(count_of(s, TaskKind::op), trace.ops().size()) << name;
    // The mixed-precision trace too (master weights, fp32 statistics).
    zoo::ModelRequest mixed;
    mixed.model = name;
    mixed.batch_size = 2;
    mixed.precision = zoo::Precision::mixed;
    if (name != "alexnet" && name != "vgg16" && name.rfind("resnet", 0) != 0) continue;
    const auto mixed_trace = zoo::build_model(mixed);
    EXPECT_EQ(sequential_peak_bytes(build(mixed_trace, spec("baseline", {}))), traces::summarize(mixed_trace).peak_bytes)
        << name;
  }
}

TEST(Zoo, OffloadRemovesOriginalsFromTheForwardPeak) {
  const auto trace = zoo_model("resnet50", 4);
  const Schedule base = build(trace, spec("baseline", {}));
  const Schedule off = build(trace, spec("offload-all", {offload_rule(2)}));
  EXPECT_GT(count_of(off, TaskKind::offload), 100u);
  EXPECT_EQ(count_of(off, TaskKind::offload), count_of(off, TaskKind::prefetch));
  EXPECT_LT(sequential_peak_bytes(off), sequential_peak_bytes(base));
  EXPECT_LT(activation_peak(off), activation_peak(base) / 4);
  // h2d in order of need, d2h in order of the forward pass.
  std::vector<std::size_t> first_need;
  for (std::size_t i = 0; i < off.tasks.size(); ++i) {
    if (off.tasks[i].kind != TaskKind::prefetch) continue;
    // The first later compute task that waits for this prefetch.
    for (std::size_t j = i + 1; j < off.tasks.size(); ++j) {
      const auto& after = off.tasks[j].after;
      if (off.tasks[j].stream == Stream::compute && std::find(after.begin(), after.end(), i) != after.end()) {
        first_need.push_back(j);
        break;
      }
    }
  }
  EXPECT_EQ(first_need.size(), count_of(off, TaskKind::prefetch));
  EXPECT_TRUE(std::is_sorted(first_need.begin(), first_need.end()));
}

TEST(Zoo, CompressHoldsOneRthBetweenCompressAndDecompress) {
  const auto trace = zoo_model("resnet50", 4);
  TensorSelector conv_inputs;
  conv_inputs.inputs_of = {OpKind::conv};
  const Schedule s = build(trace, spec("compress-conv", {compress_rule(codec(4), conv_inputs)}));
  ASSERT_GT(count_of(s, TaskKind::compress), 40u);
  EXPECT_EQ(count_of(s, TaskKind::compress), count_of(s, TaskKind::decompress));
  bool seen_decompress = false;
  for (const Task& t : s.tasks) {
    if (t.kind == TaskKind::compress) {
      EXPECT_FALSE(seen_decompress) << "codec stream: all compress tasks come first";
      const auto& original = s.buffers[t.uses.at(0)];
      const auto& packed = s.buffers[t.creates.at(0)];
      EXPECT_EQ(packed.bytes, (original.bytes + 3) / 4);
      EXPECT_EQ(packed.role, MemoryRole::compressed);
      EXPECT_EQ(packed.tensor, original.tensor);
    }
    if (t.kind == TaskKind::decompress) seen_decompress = true;
  }
  const Schedule base = build(trace, spec("baseline", {}));
  EXPECT_LT(sequential_peak_bytes(s), sequential_peak_bytes(base));
}

TEST(Zoo, SqrtNAndBudgetOnResNet) {
  const auto trace = zoo_model("resnet50", 4);
  const Schedule base = build(trace, spec("baseline", {}));
  const Schedule sq = build(trace, spec("sqrt", {recompute_rule(RecomputeAction::Mode::sqrt_n)}));
  EXPECT_GT(count_of(sq, TaskKind::recompute), 50u);
  // Literal every-k-th checkpoints cascade through ResNet's identity paths (see README): a
  // modest cut; the budget mode's separator plans do much better at the same budget.
  EXPECT_LT(activation_peak(sq), activation_peak(base));
  EXPECT_LT(sequential_peak_bytes(sq), sequential_peak_bytes(base));
  const std::int64_t budget = activation_peak(sq);
  const Schedule b = build(trace, spec("budget", {recompute_rule(RecomputeAction::Mode::budget, 2, budget)}));
  EXPECT_LE(activation_peak(b), budget);
  EXPECT_LE(seconds_of(b, TaskKind::recompute), seconds_of(sq, TaskKind::recompute) * (1 + 1e-12));
  const Schedule half = build(trace, spec("budget", {recompute_rule(RecomputeAction::Mode::budget, 2, budget / 2)}));
  EXPECT_LE(activation_peak(half), budget / 2);
}

TEST(Zoo, CombinedRulesWorkTogether) {
  for (const std::string name : {"resnet50", "gpt"}) {
    const auto trace = zoo_model(name, 2);
    TensorSelector conv_inputs;
    conv_inputs.inputs_of = {OpKind::conv, OpKind::linear};
    TensorSelector big;
    big.min_bytes = 1 << 20;
    const Schedule s = build(trace, spec("combined", {compress_rule(codec(4), conv_inputs), offload_rule(3, big),
                                                      recompute_rule(RecomputeAction::Mode::sqrt_n)}));
    EXPECT_GT(count_of(s, TaskKind::compress), 0u) << name;
    EXPECT_GT(count_of(s, TaskKind::recompute), 0u) << name;
    EXPECT_EQ(count_of(s, TaskKind::compress), count_of(s, TaskKind::decompress)) << name;
    EXPECT_EQ(count_of(s, TaskKind::offload), count_of(s, TaskKind::prefetch)) << name;
    EXPECT_LT(activation_peak(s), activation_peak(build(trace, spec("baseline", {})))) << name;
  }
}

TEST(Zoo, EveryStrategyValidatesOnTransformers) {
  for (const std::string name : {"gpt2", "bert-base"}) {
    auto request_trace = zoo_model(name, 1);
    for (const auto& rules : std::vector<std::vector<StrategyRule>>{
             {offload_rule(2)}, {compress_rule(codec(3))}, {recompute_rule(RecomputeAction::Mode::sqrt_n)},
             {recompute_rule(RecomputeAction::Mode::every_k, 3)}}) {
      const Schedule s = build(request_trace, spec("t", rules));
      EXPECT_LE(activation_peak(s), activation_peak(build(request_trace, spec("baseline", {})))) << name;
    }
  }
}

// ---- The budget mode's incremental evaluator -------------------------------------------------

// A random walk through the plans of recompute rule `rule` (single flips as the greedy makes,
// pairs as the move pass makes, whole plans as the structured ones are, all and none): at every
// step the evaluator's peak of saved-activation bytes, its recompute tasks and seconds (the
// exact sum, and the sum in schedule order that the schedule reports) equal exactly those of
// the built schedule replayed sequentially. Returns how many different peaks and how
// many recomputing plans the walk met, so that callers can check it was not a walk among
// look-alikes.
struct WalkCover {
  std::size_t peaks = 0;
  std::size_t recomputing = 0;
};
WalkCover expect_evaluator_agrees(const std::string& label, const traces::Trace& trace, const StrategySpec& s, std::size_t rule,
                                  unsigned seed, std::size_t steps = 150) {
  const std::size_t n = strategy_detail::recompute_candidate_count(trace, time_model(), s, rule);
  if (n == 0) return {};
  std::mt19937 rng(seed);
  auto pick = [&] { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); };
  std::vector<std::vector<bool>> plans;
  std::vector<bool> drop(n, false);
  for (std::size_t step = 0; step < steps; ++step) {
    const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
    if (kind <= 4) {
      const std::size_t i = pick();
      drop[i] = !drop[i];
    } else if (kind <= 6) {
      const std::size_t i = pick();
      const std::size_t j = i + 1 < n ? i + 1 : (i > 0 ? i - 1 : i);
      drop[i] = !drop[i];
      if (j != i) drop[j] = !drop[j];
    } else if (kind == 7) {
      std::bernoulli_distribution dropped(std::uniform_real_distribution<double>(0, 1)(rng));
      for (std::size_t i = 0; i < n; ++i) drop[i] = dropped(rng);
    } else if (kind == 8) {
      const std::size_t k = 1 + pick() % 8;
      for (std::size_t i = 0; i < n; ++i) drop[i] = (i + 1) % k != 0;
    } else {
      std::fill(drop.begin(), drop.end(), std::bernoulli_distribution(0.5)(rng));
    }
    plans.push_back(drop);
  }
  const auto checks = strategy_detail::check_recompute_evaluator(trace, time_model(), s, rule, plans);
  EXPECT_EQ(checks.size(), plans.size());
  std::set<std::int64_t> peaks;
  WalkCover cover;
  for (std::size_t p = 0; p < checks.size(); ++p) {
    const auto& [incremental, built] = checks[p];
    EXPECT_EQ(incremental.peak, built.peak) << label << ", plan " << p;
    EXPECT_EQ(incremental.exact, built.exact) << label << ", plan " << p;
    EXPECT_EQ(incremental.tasks, built.tasks) << label << ", plan " << p;
    EXPECT_EQ(incremental.ordered, built.ordered) << label << ", plan " << p;
    peaks.insert(built.peak);
    if (built.tasks > 0) ++cover.recomputing;
  }
  cover.peaks = peaks.size();
  return cover;
}

void expect_evaluator_agrees_widely(const std::string& label, const traces::Trace& trace, const StrategySpec& s, std::size_t rule,
                                    unsigned seed, std::size_t steps = 150) {
  const WalkCover cover = expect_evaluator_agrees(label, trace, s, rule, seed, steps);
  EXPECT_GT(cover.peaks, steps / 10) << label;
  EXPECT_GT(cover.recomputing, steps / 2) << label;
}

// A random training-like trace: forward ops reading one to three earlier storages and writing
// one or two new ones (saved activations or unsaved temporaries), some in place (a view of an
// earlier storage, so storages with several writers), then a backward chain that reads the
// saved activations in a random order, some temporaries too, and writes a few activations that
// later backward ops read. Seconds differ per op.
traces::Trace random_trace(std::mt19937& rng) {
  Builder b;
  auto uniform = [&](std::size_t lo, std::size_t hi) { return std::uniform_int_distribution<std::size_t>(lo, hi)(rng); };
  auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  auto bytes = [&] { return static_cast<std::int64_t>(4 * uniform(10, 250)); };
  std::vector<std::size_t> current{b.tensor("x", 400, TensorRole::input)};  // latest tensor of each storage
  std::vector<std::size_t> saved;  // indices into current of activation storages
  std::vector<std::size_t> temporaries;
  const std::size_t forward_ops = uniform(6, 14);
  for (std::size_t f = 0; f < forward_ops; ++f) {
    const std::string name = "f" + std::to_string(f);
    const auto flops = static_cast<std::int64_t>(uniform(1, 1000)) << uniform(0, 20);
    std::vector<std::size_t> in;
    for (std::size_t k = uniform(1, 3); k > 0; --k) {
      const std::size_t t = current[uniform(0, current.size() - 1)];
      if (std::find(in.begin(), in.end(), t) == in.end()) in.push_back(t);
    }
    std::vector<std::size_t> out;
    if (current.size() > 1 && chance(0.3)) {
      const std::size_t storage = uniform(1, current.size() - 1);  // in place on a forward storage
      if (std::find(in.begin(), in.end(), current[storage]) == in.end()) {
        in.push_back(current[storage]);
        out.push_back(b.view(name + ".out", current[storage]));
        current[storage] = out.back();
      }
    }
    for (std::size_t k = out.empty() ? uniform(1, 2) : uniform(0, 1); k > 0; --k) {
      const bool activation = chance(0.65);
      out.push_back(b.tensor(name + ".out" + std::to_string(k), bytes(), activation ? TensorRole::activation : TensorRole::temporary));
      (activation ? saved : temporaries).push_back(current.size());
      current.push_back(out.back());
    }
    b.op(name, Phase::forward, chance(0.5) ? OpKind::linear : OpKind::relu, in, out, flops);
  }
  const auto loss = b.tensor("loss", 4, TensorRole::temporary);
  b.op("loss", Phase::forward, OpKind::loss, {current.back()}, {loss});
  // Backward: every saved activation read at least once, in a random order, plus extra reads.
  std::vector<std::size_t> reads = saved;
  for (std::size_t k = uniform(0, saved.size()); k > 0 && !saved.empty(); --k) reads.push_back(saved[uniform(0, saved.size() - 1)]);
  for (std::size_t k = uniform(0, 2); k > 0 && !temporaries.empty(); --k) reads.push_back(temporaries[uniform(0, temporaries.size() - 1)]);
  std::shuffle(reads.begin(), reads.end(), rng);
  std::size_t gradient = b.tensor("g.seed", 4, TensorRole::temporary);
  b.op("seed", Phase::backward, OpKind::other, {loss}, {gradient});
  std::vector<std::size_t> backward_activations;  // written in backward, read by a later backward op
  std::size_t next = 0;
  for (std::size_t op = 0; next < reads.size() || !backward_activations.empty(); ++op) {
    const std::string name = "b" + std::to_string(op);
    std::vector<std::size_t> in{gradient};
    for (std::size_t k = uniform(1, 2); k > 0 && next < reads.size(); --k) {
      const std::size_t t = current[reads[next++]];
      if (std::find(in.begin(), in.end(), t) == in.end()) in.push_back(t);
    }
    if (!backward_activations.empty() && chance(0.5)) {
      in.push_back(backward_activations.back());
      backward_activations.pop_back();
    }
    gradient = b.tensor(name + ".grad", bytes(), TensorRole::temporary);
    std::vector<std::size_t> out{gradient};
    if (next < reads.size() && chance(0.2)) {
      out.push_back(b.tensor(name + ".saved", bytes(), TensorRole::activation));
      backward_activations.push_back(out.back());
    }
    b.op(name, Phase::backward, OpKind::linear, in, out, static_cast<std::int64_t>(uniform(1, 1000)) << uniform(0, 20));
  }
  const auto wg = b.tensor("wg", 40, TensorRole::gradient);
  b.op("last", Phase::backward, OpKind::relu, {gradient}, {wg}, 100);
  return b.build("random");
}

TEST(IncrementalEvaluator, AgreesExactlyOnRandomTraces) {
  std::mt19937 rng(2024);
  const StrategySpec budget = spec("budget", {recompute_rule(RecomputeAction::Mode::budget, 2, 1)});
  std::size_t peaks = 0;
  std::size_t recomputing = 0;
  constexpr std::size_t kTraces = 60;
  constexpr std::size_t kSteps = 60;
  for (std::size_t i = 0; i < kTraces; ++i) {
    const traces::Trace trace = random_trace(rng);
    const WalkCover cover = expect_evaluator_agrees("random trace " + std::to_string(i), trace, budget, 0, static_cast<unsigned>(i), kSteps);
    peaks += cover.peaks;
    recomputing += cover.recomputing;
  }
  EXPECT_GT(peaks, kTraces * 3);
  EXPECT_GT(recomputing, kTraces * kSteps / 2);
}

// The budget evaluator adds and removes replays' seconds in any order; the sum must be the
// exact one, rounded once, whatever the order (math.fsum's results).
TEST(IncrementalEvaluator, ExactSumIsExactAndOrderFree) {
  auto sum_of = [](const std::vector<double>& terms) {
    strategy_detail::ExactSum sum;
    for (double x : terms) sum.add(x);
    return sum.value();
  };
  EXPECT_EQ(sum_of({1e16, 1.0, -1e16}), 1.0);  // plain addition gives 0
  EXPECT_EQ(sum_of(std::vector<double>(10, 0.1)), 1.0);  // plain addition gives 0.9999999999999999
  EXPECT_EQ(sum_of({1e-16, 1.0, 1e16}), 10000000000000002.0);  // ties to even decided by the 1e-16
  std::mt19937 rng(7);
  std::vector<double> terms;
  for (int i = 0; i < 400; ++i) {
    terms.push_back(std::ldexp(std::uniform_real_distribution<double>(0, 1)(rng), std::uniform_int_distribution<int>(-40, 10)(rng)));
  }
  const double total = sum_of(terms);
  for (int round = 0; round < 5; ++round) {
    std::shuffle(terms.begin(), terms.end(), rng);
    EXPECT_EQ(sum_of(terms), total);
    // Added, some removed and added back in another order: still the same figure.
    strategy_detail::ExactSum sum;
    for (double x : terms) sum.add(x);
    for (std::size_t i = 0; i < terms.size(); i += 3) sum.subtract(terms[i]);
    for (std::size_t i = terms.size(); i-- > 0;) {
      if (i % 3 == 0) sum.add(terms[i]);
    }
    EXPECT_EQ(sum.value(), total);
  }
  strategy_detail::ExactSum empty;
  empty.add(0.25);
  empty.subtract(0.25);
  EXPECT_EQ(empty.value(), 0.0);
}

traces::Trace small_gpt(std::int64_t layers, zoo::Precision precision = zoo::Precision::fp32) {
  zoo::ModelRequest request;
  request.model = "gpt";
  request.batch_size = 2;
  request.precision = precision;
  request.layers = layers;
  request.hidden = 256;
  request.heads = 4;
  request.seq_len = 128;
  request.vocab = 1000;
  return zoo::build_model(request);
}

TEST(IncrementalEvaluator, AgreesExactlyWithTheBuiltScheduleOnRandomPlans) {
  const StrategySpec budget = spec("budget", {recompute_rule(RecomputeAction::Mode::budget, 2, 1)});
  expect_evaluator_agrees_widely("chain", chain(24, true), budget, 0, 1);
  expect_evaluator_agrees_widely("resnet18", zoo_model("resnet18", 2), budget, 0, 2);
  zoo::ModelRequest mixed;
  mixed.model = "resnet18";
  mixed.batch_size = 2;
  mixed.precision = zoo::Precision::mixed;
  expect_evaluator_agrees_widely("resnet18 mixed", zoo::build_model(mixed), budget, 0, 3);
  expect_evaluator_agrees_widely("gpt 2 layers", small_gpt(2), budget, 0, 4);
  expect_evaluator_agrees_widely("gpt 4 layers", small_gpt(4), budget, 0, 5);
  zoo::ModelRequest bert;
  bert.model = "bert-base";
  bert.batch_size = 2;
  bert.layers = 2;
  bert.seq_len = 64;
  expect_evaluator_agrees_widely("bert 2 layers", zoo::build_model(bert), budget, 0, 6);
}

// With other rules' decisions in place: a fixed recompute rule before the budget rule (its drops
// are rebuilt too, and budget drops cascade through them), and a checkpoints rule whose kept
// block inputs are pinned (replays start from them and extend their lives).
TEST(IncrementalEvaluator, AgreesWithOtherRulesInPlace) {
  TensorSelector linear_inputs;
  linear_inputs.inputs_of = {OpKind::linear, OpKind::conv};
  const StrategySpec every_3 = spec("every-3 + budget", {recompute_rule(RecomputeAction::Mode::every_k, 3, 0, linear_inputs),
                                                         recompute_rule(RecomputeAction::Mode::budget, 2, 1)});
  expect_evaluator_agrees_widely("gpt 4 layers, every-3 first", small_gpt(4), every_3, 1, 7);
  expect_evaluator_agrees_widely("resnet18, every-3 first", zoo_model("resnet18", 2), every_3, 1, 8);
  StrategyRule blocks = recompute_rule(RecomputeAction::Mode::checkpoints, 2, 0, TensorSelector{{}, {}, 0, {"transformer.h.1.*"}, {}});
  std::get<RecomputeAction>(blocks.action).keep = {"transformer.h.1.ln_1*", "transformer.h.0.add*"};
  const StrategySpec pinned = spec("checkpoints + budget", {blocks, recompute_rule(RecomputeAction::Mode::budget, 2, 1)});
  expect_evaluator_agrees_widely("gpt 3 layers mixed, checkpoints first", small_gpt(3, zoo::Precision::mixed), pinned, 1, 9);
}

// ---- Finite costs: the simulator never gets an infinite or absurd time (defect 07) ----------

TEST(FiniteCosts, AnAbsurdCodecLatencyIsAnInputErrorNamingTheRuleAndTheTensor) {
  const auto trace = tiny();
  CompressAction c = codec(4);
  c.latency = 1e300;  // defect 07, s3.yaml: SimGrid deadlocked and the report said FITS
  const std::string e = input_error_of([&] { return test_support::must_apply(build_schedule(trace, time_model(), spec("s3", {compress_rule(c)}))); });
  EXPECT_NE(e.find("strategy 's3' rule 0: compressing 'y' (400 B) takes 1e+300 s from a latency of 1e+300 s"), std::string::npos) << e;
  EXPECT_NE(e.find("expected a latency between 0 s and 1 s"), std::string::npos) << e;

  c.latency = std::numeric_limits<double>::infinity();
  EXPECT_THROW((void)test_support::must_apply(build_schedule(trace, time_model(), spec("s", {compress_rule(c)}))), InputError);
  c.latency = 1.5;
  EXPECT_THROW((void)test_support::must_apply(build_schedule(trace, time_model(), spec("s", {compress_rule(c)}))), InputError);
  c.latency = 1.0;  // the bound itself is accepted
  EXPECT_NO_THROW((void)test_support::must_apply(build_schedule(trace, time_model(), spec("s", {compress_rule(c)}))));
}

TEST(FiniteCosts, ACodecBandwidthBelowOneKilobytePerSecondIsAnInputError) {
  const auto trace = tiny();
  CompressAction c = codec(4);
  c.decompress_bandwidth = 1e-300;  // 400 B / 1e-300 B/s: an absurd, if finite, 4e302 s
  const std::string e = input_error_of([&] { return test_support::must_apply(build_schedule(trace, time_model(), spec("slow", {compress_rule(c)}))); });
  EXPECT_NE(e.find("strategy 'slow' rule 0: decompressing 'y' (400 B) takes 4e+302 s"), std::string::npos) << e;
  EXPECT_NE(e.find("a bandwidth of at least 1 kB/s"), std::string::npos) << e;
}

TEST(FiniteCosts, AnInfiniteOpTimeIsAnInputErrorNotAnInternalError) {
  // Was: "task 0 (conv1) has an invalid duration" from Schedule::validate, a logic_error (exit 1).
  Platform p = test_platform();
  p.gpu.peak_fp32 = 1e-307;  // only a hand-built platform can hold this (parse_platform bounds it)
  const OpTimeModel slow(p);
  const std::string e = input_error_of([&] { return test_support::must_apply(build_schedule(tiny(), slow, spec("baseline", {}))); });
  EXPECT_NE(e.find("op 0 (a): the modeled duration is inf s"), std::string::npos) << e;
}


// A lossy codec must not touch indices or masks: a compress rule skips integer and boolean
// storages unless it names them.
TEST(CompressGuards, IntegerStoragesAreCompressedOnlyWhenNamed) {
  for (traces::DType integer : {traces::DType::i64, traces::DType::boolean, traces::DType::u8}) {
    const auto trace = two_relus_of(integer, traces::DType::f32);
    const auto sizes = compressed_bytes(build(trace, spec("c", {compress_rule(codec(4))})));
    EXPECT_EQ(sizes, (std::map<std::size_t, std::int64_t>{{2, 1000}})) << traces::to_string(integer);
    TensorSelector named;
    named.names = {"y1"};
    const auto named_sizes = compressed_bytes(build(trace, spec("c", {compress_rule(codec(4), named)})));
    const std::int64_t y1_bytes = trace.tensor(1).bytes();
    EXPECT_EQ(named_sizes, (std::map<std::size_t, std::int64_t>{{1, (y1_bytes + 3) / 4}})) << traces::to_string(integer);
  }
  // Offload and recomputation move integer storages as they are.
  EXPECT_EQ(count_of(build(two_relus_of(traces::DType::i64, traces::DType::f32), spec("o", {offload_rule(1)})), TaskKind::offload), 2u);
}

// Profiles are fitted on float32 data (bits per value): a 16-bit tensor compresses to the same
// bits per value, so to half the float32 ratio; an explicit ratio is applied unchanged.
TEST(CompressGuards, ProfileRatiosAreConvertedToTheElementSize) {
  const auto profile = ratio_profile();
  const RatioModel& model = profile->find("szp")->ratio_model(TensorClass::post_relu);
  const double r32 = model.ratio(1e-3);
  ASSERT_GT(r32, 2.0);  // so that half of it is still above the floor of 1
  const auto trace = two_relus_of(traces::DType::f16, traces::DType::f32);
  const Schedule s = build(trace, spec("compress", {compress_rule(profiled(profile, 1e-3))}));
  const auto sizes = compressed_bytes(s);
  EXPECT_EQ(sizes.at(1), static_cast<std::int64_t>(std::ceil(2000 / (r32 * 0.5))));  // 1000 half values
  EXPECT_EQ(sizes.at(2), static_cast<std::int64_t>(std::ceil(4000 / r32)));
  ASSERT_EQ(s.compression.size(), 1u);
  EXPECT_TRUE(s.compression[0].ratio_converted_to_element_size);
  EXPECT_FALSE(build(two_relus_of(traces::DType::f32, traces::DType::f32), spec("compress", {compress_rule(profiled(profile, 1e-3))}))
                   .compression[0]
                   .ratio_converted_to_element_size);
  CompressAction what_if = profiled(profile, 1e-3);
  what_if.ratio = 4;
  EXPECT_EQ(compressed_bytes(build(trace, spec("w", {compress_rule(what_if)}))).at(1), 500);
}

}  // namespace
}  // namespace comptrain::models

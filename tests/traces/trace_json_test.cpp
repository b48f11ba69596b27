#include "comptrain/traces/trace_json.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "comptrain/support/atomic_file.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/zoo/zoo.hpp"

namespace comptrain::traces {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

const fs::path kDataDir = COMPTRAIN_TEST_DATA_DIR;
const fs::path kTraceDir = kDataDir / "traces";
constexpr std::uint64_t kMaxId = std::numeric_limits<std::uint64_t>::max();

std::string fixture_text(const std::string& name) { return read_file(kTraceDir / name); }

Tensor make_tensor(std::uint64_t id, std::string name, std::vector<std::int64_t> shape, TensorRole role,
                   std::optional<std::size_t> batch_dim = {}, std::optional<TensorIndex> view_of = {}) {
  Tensor tensor;
  tensor.id = id;
  tensor.name = std::move(name);
  tensor.dtype = DType::f32;
  tensor.shape = std::move(shape);
  tensor.role = role;
  tensor.batch_dim = batch_dim;
  tensor.view_of = view_of;
  return tensor;
}

Op make_op(std::uint64_t id, std::string name, Phase phase, OpKind kind, std::vector<TensorIndex> inputs,
           std::vector<TensorIndex> outputs, BatchLinear flops, BatchLinear read, BatchLinear written) {
  Op op;
  op.id = id;
  op.name = std::move(name);
  op.phase = phase;
  op.kind = kind;
  op.inputs = std::move(inputs);
  op.outputs = std::move(outputs);
  op.flops = flops;
  op.bytes_read = read;
  op.bytes_written = written;
  return op;
}

// tests/data/traces/tiny.json, built in code: a linear layer with an in-place ReLU, a loss and
// a momentum step. It exercises every optional field of version 1, sparse ids and the largest
// uint64 id. With `values`, tests/data/traces/tiny_values.json: the same with value features
// (version 2), all four on the linear output and on its in-place ReLU, one on the input. With
// `gradient` too, tests/data/traces/tiny_gradient.json (version 3): gradient statistics on the
// linear layer's input, every field, measured at batch 8 (the trace being at 2).
Trace tiny_trace(bool values = false, bool with_gradient = false) {
  using enum TensorRole;
  std::vector<Tensor> tensors{
      make_tensor(7, "x", {2, 4}, input, 0),
      make_tensor(9, "fc.weight", {3, 4}, weight),
      make_tensor(11, "fc.out", {2, 3}, activation, 0),
      make_tensor(12, "relu.out", {2, 3}, activation, 0, 2),
      make_tensor(13, "loss", {}, temporary),
      make_tensor(14, "relu.out.grad", {2, 3}, temporary, 0),
      make_tensor(15, "fc.weight.grad", {3, 4}, gradient),
      make_tensor(kMaxId, "fc.weight.momentum", {3, 4}, optimizer_state),
  };
  std::vector<Op> ops{
      make_op(1000, "fc", Phase::forward, OpKind::linear, {0, 1}, {2}, {0, 24}, {48, 16}, {0, 12}),
      make_op(1001, "relu_", Phase::forward, OpKind::relu, {2}, {3}, {0, 3}, {0, 12}, {0, 12}),
      make_op(1002, "loss", Phase::forward, OpKind::loss, {3}, {4}, {0, 6}, {0, 12}, {4, 0}),
      make_op(1003, "loss.backward", Phase::backward, OpKind::loss, {3}, {5}, {0, 6}, {0, 12}, {0, 12}),
      make_op(1004, "fc.backward_weight", Phase::backward, OpKind::linear, {0, 3, 5}, {6}, {0, 27}, {0, 40},
              {48, 0}),
      make_op(1005, "sgd.momentum", Phase::optimizer, OpKind::optimizer_update, {1, 6, 7}, {}, {48, 0},
              {144, 0}, {96, 0}),
  };
  ops[3].after = {2};
  ops[4].measured = MeasuredDuration{1.25e-05, "NVIDIA A100-SXM4-40GB", 32};
  if (values) {
    tensors[0].values.spread = 0.25;
    tensors[2].values = ValueFeatures{0.0, 0.2, 0.0, 0.35, std::nullopt};
    tensors[3].values = ValueFeatures{0.5, 0.18, 0.125, 0.03125, 2.5};
  }
  if (with_gradient) tensors[0].gradient = GradientStatistics{0.0625, 0.015625, 2.0, 8};
  return Trace("tiny-mlp", 2, std::move(tensors), std::move(ops),
               {{"source", "hand-written fixture"}, {"precision", "fp32"}});
}

// `base` with other tensors (their derived producers and consumers cleared, as the constructor
// derives them again).
Trace with_tensors(const Trace& base, std::vector<Tensor> tensors) {
  for (Tensor& tensor : tensors) {
    tensor.producer.reset();
    tensor.consumers.clear();
  }
  return Trace(base.name(), base.batch_size(), std::move(tensors), base.ops(), base.metadata());
}

// The message of the InputError that parsing `text` throws ("" and a failure if none).
std::string error_of(std::string_view text, std::string_view source = "t.json") {
  try {
    (void)trace_from_json(text, source);
  } catch (const InputError& error) {
    return error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << "not an InputError: " << error.what();
    return {};
  }
  ADD_FAILURE() << "accepted:\n" << text;
  return {};
}

// `text` with each `from` replaced (once) by its `to`; every `from` must occur.
std::string edited(std::string text, const std::vector<std::pair<std::string, std::string>>& edits) {
  for (const auto& [from, to] : edits) {
    const std::size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << "the fixture does not contain: " << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
  }
  return text;
}

// --- Round trips ---------------------------------------------------------------------------

TEST(TraceJson, FixtureReadsAsTheHandBuiltTrace) {
  const Trace read = trace_from_json(fixture_text("tiny.json"), "tiny.json");
  EXPECT_EQ(read, tiny_trace());
  // Ids are kept; references become indices; producers and consumers are derived.
  EXPECT_EQ(read.tensor(7).id, kMaxId);
  EXPECT_EQ(read.op(3).after, std::vector<OpIndex>{2});
  EXPECT_EQ(read.tensor(3).view_of, TensorIndex{2});
  EXPECT_EQ(read.storage_of(3), TensorIndex{2});
  EXPECT_EQ(read.tensor(2).producer, OpIndex{0});
  EXPECT_EQ(read.tensor(3).consumers, (std::vector<OpIndex>{2, 3, 4}));
  EXPECT_EQ(read.flops(0), 48);
  EXPECT_EQ(read.tensor(0).bytes(), 32);
}

// Reports give numbers as numbers: metadata values that are whole decimal integers become JSON
// numbers, the rest (leading zeros, fractions, words) stay strings.
TEST(TraceJson, MetadataForReportsHasNumbersAsNumbers) {
  const Trace t("m", 1, {}, {}, {{"layers", "12"}, {"delta", "-3"}, {"code", "007"}, {"ratio", "2.5"}, {"model", "gpt2"}, {"zero", "0"}});
  EXPECT_EQ(metadata_to_json(t), R"({"code":"007","delta":-3,"layers":12,"model":"gpt2","ratio":"2.5","zero":0})");
}

TEST(TraceJson, WriterOutputIsTheCanonicalFixture) {
  // The fixture is in the writer's exact layout, so this pins the layout down.
  EXPECT_EQ(trace_to_json(tiny_trace()) + "\n", fixture_text("tiny.json"));
}

TEST(TraceJson, RoundTripsAtEveryIndent) {
  const Trace trace = tiny_trace();
  for (int indent : {-1, 0, 1, 2, 4}) {
    SCOPED_TRACE("indent " + std::to_string(indent));
    const std::string text = trace_to_json(trace, indent);
    const Trace read = trace_from_json(text, "t.json");
    EXPECT_EQ(read, trace);
    EXPECT_EQ(trace_to_json(read, indent), text);
    EXPECT_EQ(text.find('\n') == std::string::npos, indent < 0);
  }
}

TEST(TraceJson, ValueFeaturesRoundTripByteForByte) {
  const Trace trace = tiny_trace(true);
  EXPECT_EQ(trace_from_json(fixture_text("tiny_values.json"), "tiny_values.json"), trace);
  // The writer's exact layout: `values` last in a tensor, fields in the documented order, only
  // those given; version 2 because the trace has values.
  EXPECT_EQ(trace_to_json(trace) + "\n", fixture_text("tiny_values.json"));
  for (int indent : {-1, 1, 2}) {
    const std::string text = trace_to_json(trace, indent);
    const Trace read = trace_from_json(text, "t.json");
    EXPECT_EQ(read, trace);
    EXPECT_EQ(read.tensor(0).values.spread, 0.25);
    EXPECT_FALSE(read.tensor(0).values.zero_fraction.has_value());
    EXPECT_EQ(read.tensor(3).values.block_scale, 0.03125);
    EXPECT_EQ(trace_to_json(read, indent), text);
  }
  // Values are per-value statistics: rescaling keeps them.
  EXPECT_EQ(trace.rescaled(8).tensor(3).values, trace.tensor(3).values);
  EXPECT_EQ(trace.rescaled(8).rescaled(2), trace);
  // Doubles survive at full precision, and an empty object is the same as none.
  const std::string precise = edited(fixture_text("tiny_values.json"),
                                     {{R"("block_scale": 0.35)", R"("block_scale": 0.1234567890123456789)"},
                                      {R"("values": {"spread": 0.25})", R"("values": {})"}});
  const Trace read = trace_from_json(precise, "t.json");
  EXPECT_EQ(read.tensor(2).values.block_scale, 0.1234567890123456789);
  EXPECT_TRUE(read.tensor(0).values.empty());
  EXPECT_EQ(trace_from_json(trace_to_json(read), "t.json"), read);
}

TEST(TraceJson, GradientStatisticsRoundTripByteForByte) {
  const Trace trace = tiny_trace(true, true);
  EXPECT_EQ(trace_from_json(fixture_text("tiny_gradient.json"), "tiny_gradient.json"), trace);
  // The writer's exact layout: `gradient` after `values`, fields in the documented order, terms
  // written as a double; version 3 because the trace has gradient statistics.
  EXPECT_EQ(trace_to_json(trace) + "\n", fixture_text("tiny_gradient.json"));
  for (int indent : {-1, 1, 2}) {
    const std::string text = trace_to_json(trace, indent);
    const Trace read = trace_from_json(text, "t.json");
    EXPECT_EQ(read, trace);
    EXPECT_EQ(read.tensor(0).gradient.delta_rms, 0.0625);
    EXPECT_EQ(read.tensor(0).gradient.batch_size, 8);
    EXPECT_TRUE(read.tensor(2).gradient.empty());
    EXPECT_EQ(trace_to_json(read, indent), text);
  }
  // Gradient statistics alone make a version-3 file; a subset of the fields is fine, `{}` is the
  // same as none, and doubles survive at full precision.
  std::vector<Tensor> tensors = tiny_trace().tensors();
  tensors[0].gradient.weight_grad_rms = 0.1234567890123456789;
  const Trace only_gradient = with_tensors(tiny_trace(), tensors);
  const std::string text = trace_to_json(only_gradient);
  EXPECT_THAT(text, HasSubstr(R"("version": 3,)"));
  EXPECT_THAT(text, HasSubstr(R"("batch_dim": 0, "gradient": {"weight_grad_rms": 0.12345678901234568}})"));
  EXPECT_EQ(trace_from_json(text, "t.json"), only_gradient);
  const Trace empty = trace_from_json(
      edited(fixture_text("tiny_gradient.json"),
             {{R"("gradient": {"delta_rms": 0.0625, "weight_grad_rms": 0.015625, "terms": 2.0, "batch_size": 8})",
               R"("gradient": {})"}}),
      "t.json");
  EXPECT_TRUE(empty.tensor(0).gradient.empty());
  EXPECT_EQ(empty, tiny_trace(true));
  // A batch_size equal to the trace's is the default: the same trace as without it.
  const Trace same_batch = trace_from_json(
      edited(fixture_text("tiny_gradient.json"), {{R"("batch_size": 8})", R"("batch_size": 2})"}}), "t.json");
  EXPECT_FALSE(same_batch.tensor(0).gradient.batch_size.has_value());
  EXPECT_THAT(trace_to_json(same_batch), HasSubstr(R"("terms": 2.0}})"));
}

TEST(TraceJson, GradientStatisticsOutOfRangeCannotMakeATrace) {
  // What JSON cannot write (NaN, infinity) can still come from code: the constructor names it.
  const auto error_with = [](GradientStatistics statistics) -> std::string {
    std::vector<Tensor> tensors = tiny_trace().tensors();
    tensors[0].gradient = statistics;
    try {
      (void)with_tensors(tiny_trace(), tensors);
    } catch (const TraceError& error) {
      return error.what();
    }
    return "accepted";
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_THAT(error_with({nan, {}, {}, {}}), StartsWith("/tensors/0/gradient/delta_rms: found nan; expected a finite number >= 0"));
  EXPECT_THAT(error_with({{}, inf, {}, {}}), StartsWith("/tensors/0/gradient/weight_grad_rms: found inf"));
  EXPECT_THAT(error_with({{}, {}, inf, {}}), StartsWith("/tensors/0/gradient/terms: found inf"));
  EXPECT_THAT(error_with({1.0, {}, {}, 0}), StartsWith("/tensors/0/gradient/batch_size: found 0; expected an integer >= 1"));
  EXPECT_EQ(error_with({0.0, 0.0, 2.0, 3}), "accepted");
}

// The shipped capture (scenarios/traces/resnet18-b4-captured.json, written by
// traces/capture/comptrain_capture.py; scenarios/traces/README.md) reads without torch, and every
// convolution and linear layer finds its gradient statistics on its input: what the error model
// and the adaptive error bound read. It rescales exactly.
TEST(TraceJson, ShippedCaptureCarriesGradientStatisticsOnEveryConvAndLinearInput) {
  const fs::path file = kDataDir / ".." / ".." / "scenarios" / "traces" / "resnet18-b4-captured.json";
  const Trace trace = read_trace_file(file);
  EXPECT_EQ(trace.batch_size(), 4);
  std::size_t weighted = 0;
  for (const Op& op : trace.ops()) {
    if (op.phase != Phase::forward || (op.kind != OpKind::conv && op.kind != OpKind::linear)) continue;
    ++weighted;
    std::size_t carriers = 0;
    for (TensorIndex in : op.inputs) {
      const GradientStatistics& g = trace.tensor(in).gradient;
      if (g.empty()) continue;
      ++carriers;
      EXPECT_TRUE(g.delta_rms && g.weight_grad_rms && g.terms) << op.name;
      EXPECT_GT(g.delta_rms.value_or(0), 0) << op.name;
      EXPECT_GT(g.weight_grad_rms.value_or(0), 0) << op.name;
    }
    EXPECT_EQ(carriers, 1u) << op.name;
  }
  EXPECT_EQ(weighted, 21u);  // resnet18: 20 convolutions and the classifier
  for (std::int64_t b : {1, 3, 256}) EXPECT_EQ(trace.rescaled(b).rescaled(4), trace) << "via batch " << b;
  const auto images = std::find_if(trace.tensors().begin(), trace.tensors().end(),
                                   [](const Tensor& t) { return t.name == "input"; });
  ASSERT_NE(images, trace.tensors().end());
  const Tensor& images_at_32 = trace.rescaled(32).tensor(static_cast<TensorIndex>(images - trace.tensors().begin()));
  EXPECT_EQ(images->gradient.terms, 4.0 * 112 * 112);  // conv1, stride 2: batch x 112 x 112
  EXPECT_EQ(images_at_32.gradient.terms, 32.0 * 112 * 112);
  EXPECT_EQ(images_at_32.gradient.batch_size, 4);
  EXPECT_EQ(images_at_32.gradient.delta_rms, images->gradient.delta_rms);
}

TEST(TraceJson, WriterPutsFormatAndVersionFirstAndIsDeterministic) {
  const std::string text = trace_to_json(tiny_trace());
  EXPECT_THAT(
      text, StartsWith("{\n \"format\": \"comptrain-trace\",\n \"version\": 1,\n \"name\": \"tiny-mlp\",\n"));
  EXPECT_EQ(trace_to_json(tiny_trace()), text);
  EXPECT_THAT(trace_to_json(tiny_trace(), -1), StartsWith(R"({"format":"comptrain-trace","version":1,)"));
}

// A trace of no op is written as it is, but not read back: an iteration of no work "fit" in 0 s
// at any batch (shared/defects-2/16), which is no prediction.
TEST(TraceJson, AnEmptyTraceIsWrittenButRefusedWhenRead) {
  const Trace trace("empty", 1, {}, {});
  const std::string text = trace_to_json(trace);
  EXPECT_THAT(text, HasSubstr("\"tensors\": [],\n \"ops\": []\n}"));
  EXPECT_THAT(text, Not(HasSubstr("metadata")));
  EXPECT_EQ(error_of(text), "t.json: /ops: an empty array; expected at least one op (a trace of no op has nothing to simulate)");
}

// A file nested 100,000 deep (200 KB) is refused at the trace format's limit, 64 levels, before
// anything recurses into it (shared/defects-2/02).
TEST(TraceJson, DeepNestingIsRefusedAtTheLimit) {
  const std::string deep = R"({"format": "comptrain-trace", "version": 1, "name": "n", "batch_size": 1, "tensors": [{"x": )" +
                           std::string(100000, '[') + std::string(100000, ']') + "}], \"ops\": []}";
  EXPECT_THAT(error_of(deep), AllOf(StartsWith("t.json: /tensors/0/x/0/0/"), HasSubstr("nested deeper than 64 levels")));
}

TEST(TraceJson, SecondsRoundTripBitForBit) {
  // Up to the 1-hour bound per op (kMaxMeasuredSeconds); beyond it, see AMeasuredDurationOverAnHour...
  for (double seconds : {0.0, 0.1 + 0.2, 1e-300, std::numeric_limits<double>::denorm_min(), kMaxMeasuredSeconds,
                         std::nextafter(kMaxMeasuredSeconds, 0.0), 1.0 / 3.0, 1234.56789, 1.0}) {
    SCOPED_TRACE(seconds);
    Trace base = tiny_trace();
    std::vector<Op> ops = base.ops();
    ops[0].measured = MeasuredDuration{seconds, "dev", 7};
    std::vector<Tensor> tensors = base.tensors();
    for (Tensor& t : tensors) {  // derived again by the constructor
      t.producer.reset();
      t.consumers.clear();
    }
    const Trace trace(base.name(), base.batch_size(), std::move(tensors), std::move(ops), base.metadata());
    const std::string text = trace_to_json(trace);
    const Trace read = trace_from_json(text, "t.json");
    EXPECT_EQ(std::bit_cast<std::uint64_t>(read.op(0).measured->seconds),
              std::bit_cast<std::uint64_t>(seconds));
    EXPECT_EQ(trace_to_json(read), text);
  }
}

// The message of the error that building tiny_trace() with op 4 measured at `seconds` raises
// ("" when it builds).
std::string error_building_with_measured(double seconds) {
  const Trace base = tiny_trace();
  std::vector<Op> ops = base.ops();
  ops[4].measured->seconds = seconds;
  std::vector<Tensor> tensors = base.tensors();
  for (Tensor& t : tensors) {  // derived fields, recomputed by the constructor
    t.producer.reset();
    t.consumers.clear();
  }
  try {
    const Trace trace(base.name(), base.batch_size(), std::move(tensors), std::move(ops));
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

TEST(TraceJson, AMeasuredDurationOverAnHourCannotMakeATrace) {
  for (double seconds : {std::nextafter(kMaxMeasuredSeconds, 1e4), 1e300, std::numeric_limits<double>::max()}) {
    SCOPED_TRACE(seconds);
    const std::string error = error_building_with_measured(seconds);
    EXPECT_THAT(error, AllOf(StartsWith("/ops/4/measured/seconds: duration "), HasSubstr("exceeds 3600 s (1 hour)")));
    EXPECT_LT(error.size(), 200u) << "no 300-digit numbers: " << error;
  }
}

// Defect 07's t.json, as written: an optimizer step measured at 1e+300 s.
TEST(TraceJson, TheDefect07TraceIsRejectedWithItsJsonPath) {
  Trace base = tiny_trace();
  std::string text = trace_to_json(base);
  const std::string from = "\"seconds\": 1.25e-05";
  const auto at = text.find(from);
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, from.size(), "\"seconds\": 1e+300");
  try {
    trace_from_json(text, "t.json");
    ADD_FAILURE() << "1e+300 s was accepted";
  } catch (const InputError& error) {
    EXPECT_THAT(error.what(), StartsWith("t.json: /ops/4/measured/seconds: found the number 1e+300; expected a duration of at most 3600 seconds"));
  }
}

TEST(TraceJson, LargeIntegersStayIntegers) {
  std::vector<Tensor> tensors{make_tensor(kMaxId, "big", {1, 1'000'000'000, 2}, TensorRole::input, 0)};
  std::vector<Op> ops{make_op(kMaxId - 1, "huge", Phase::forward, OpKind::other, {0}, {},
                              {9'000'000'000'000'000'000, 0}, {0, 4'000'000'000'000'000'000}, {0, 0})};
  const Trace trace("big", 1, std::move(tensors), std::move(ops));
  const std::string text = trace_to_json(trace);
  EXPECT_THAT(text, HasSubstr("\"id\": 18446744073709551615"));
  EXPECT_THAT(text, HasSubstr("\"fixed\": 9000000000000000000"));
  EXPECT_THAT(text, HasSubstr("\"per_sample\": 4000000000000000000"));
  EXPECT_THAT(text, HasSubstr("[1, 1000000000, 2]"));
  EXPECT_THAT(text, Not(HasSubstr("e+")));
  EXPECT_EQ(trace_from_json(text, "t.json"), trace);
}

TEST(TraceJson, StringsAreEscapedAndRoundTrip) {
  std::vector<Tensor> tensors{make_tensor(0, "quote\" backslash\\ newline\n tab\t ctrl\x01 µ 模型 🙂",
                                          {1}, TensorRole::input, 0)};
  Op op;  // a trace has at least one op
  op.name = "op";
  op.inputs = {0};
  const Trace trace("name/with~pointer chars", 1, std::move(tensors), {op},
                    {{"a/b~c", "value \"quoted\""}, {"", "empty key"}});
  const std::string text = trace_to_json(trace);
  EXPECT_THAT(text, HasSubstr(R"(quote\" backslash\\ newline\n tab\t ctrl\u0001 µ 模型 🙂)"));
  const Trace read = trace_from_json(text, "t.json");
  EXPECT_EQ(read, trace);
  EXPECT_EQ(trace_to_json(read), text);
}

TEST(TraceJson, WriterRejectsWhatJsonCannotHold) {
  {
    // A non-finite duration cannot even make a trace, so the writer never meets one.
    EXPECT_THAT(error_building_with_measured(std::numeric_limits<double>::quiet_NaN()),
                AllOf(HasSubstr("/ops/4/measured/seconds"), HasSubstr("finite")));
  }
  {
    const Trace trace("bad", 1, {make_tensor(0, "\xff\xfe", {1}, TensorRole::input, 0)}, {});
    try {
      (void)trace_to_json(trace);
      ADD_FAILURE() << "invalid UTF-8 written";
    } catch (const InputError& error) {
      EXPECT_THAT(error.what(), AllOf(HasSubstr("/tensors/0/name"), HasSubstr("UTF-8")));
    }
  }
}

// The example in traces/FORMAT.md must parse, and is written in the writer's canonical layout.
// Version 5: a communication op (Megatron's g, an all_reduce in place over the tensor group)
// keeps its kind and group through a round trip, and its trace is written as version 5.
TEST(TraceJson, CommunicationRoundTrips) {
  using enum TensorRole;
  std::vector<Tensor> tensors{make_tensor(1, "x", {2, 4}, input, 0), make_tensor(2, "fc.weight", {4, 4}, weight),
                              make_tensor(3, "fc.out", {2, 4}, temporary, 0), make_tensor(4, "fc.all_reduce.out", {2, 4}, temporary, 0, 2)};
  std::vector<Op> ops{make_op(10, "fc", Phase::forward, OpKind::linear, {0, 1}, {2}, {0, 32}, {64, 16}, {0, 16}),
                      make_op(11, "fc.all_reduce", Phase::forward, OpKind::communication, {2}, {3}, {}, {0, 16}, {0, 16})};
  ops[1].communication = traces::Communication{traces::CommunicationKind::all_reduce, traces::ParallelGroup::tensor};
  const Trace trace("tp-rank", 2, std::move(tensors), std::move(ops));
  const std::string text = trace_to_json(trace);
  EXPECT_THAT(text, HasSubstr(R"("version": 5)"));
  EXPECT_THAT(text, HasSubstr(R"("communication": {"kind": "all_reduce", "group": "tensor"})"));
  EXPECT_EQ(trace_from_json(text, "t.json"), trace);
  // The same tensors with other ops (the constructor fills in producers and consumers again).
  const auto with_ops = [&trace](std::vector<Op> other_ops) {
    std::vector<Tensor> plain = trace.tensors();
    for (Tensor& tensor : plain) {
      tensor.producer.reset();
      tensor.consumers.clear();
    }
    return Trace("tp-rank", 2, std::move(plain), std::move(other_ops));
  };
  for (const traces::CommunicationKind kind : traces::all_communication_kinds()) {
    for (const traces::ParallelGroup group : traces::all_parallel_groups()) {
      std::vector<Op> each = trace.ops();
      each[1].communication = traces::Communication{kind, group};
      const Trace variant = with_ops(std::move(each));
      EXPECT_EQ(trace_from_json(trace_to_json(variant), "t.json"), variant) << to_string(kind) << " " << to_string(group);
    }
  }
  // Version 6: an overlapped collective keeps its count through a round trip.
  {
    std::vector<Op> overlapped_ops = trace.ops();
    overlapped_ops[1].communication->overlap = 2;
    const Trace overlapped = with_ops(std::move(overlapped_ops));
    const std::string overlapped_text = trace_to_json(overlapped);
    EXPECT_THAT(overlapped_text, HasSubstr(R"("version": 6)"));
    EXPECT_THAT(overlapped_text, HasSubstr(R"("communication": {"kind": "all_reduce", "group": "tensor", "overlap": 2})"));
    EXPECT_EQ(trace_from_json(overlapped_text, "t.json"), overlapped);
  }
  // Version 7: a split reduce_scatter keeps its pieces through a round trip.
  {
    std::vector<Op> split_ops = trace.ops();
    split_ops[1].communication = traces::Communication{traces::CommunicationKind::reduce_scatter, traces::ParallelGroup::tensor};
    split_ops[1].communication->splits = 4;
    const Trace split = with_ops(std::move(split_ops));
    const std::string split_text = trace_to_json(split);
    EXPECT_THAT(split_text, HasSubstr(R"("version": 7)"));
    EXPECT_THAT(split_text, HasSubstr(R"("communication": {"kind": "reduce_scatter", "group": "tensor", "splits": 4})"));
    EXPECT_EQ(trace_from_json(split_text, "t.json"), split);
  }
  // Version 8: an op that synchronises the host keeps the mark through a round trip, and only a
  // trace that has one is written as version 8.
  {
    std::vector<Op> synced_ops = trace.ops();
    synced_ops[0].host_sync = true;
    const Trace synced = with_ops(std::move(synced_ops));
    const std::string synced_text = trace_to_json(synced);
    EXPECT_THAT(synced_text, HasSubstr(R"("version": 8)"));
    EXPECT_THAT(synced_text, HasSubstr(R"(, "host_sync": true})"));
    const Trace read = trace_from_json(synced_text, "t.json");
    EXPECT_EQ(read, synced);
    EXPECT_TRUE(read.op(0).host_sync);
    EXPECT_FALSE(read.op(1).host_sync);
    EXPECT_THAT(trace_to_json(trace), testing::Not(HasSubstr("host_sync")));
  }
  // The Trace constructor enforces "exactly on communication ops" for traces built in code.
  std::vector<Op> missing = trace.ops();
  missing[1].communication.reset();
  EXPECT_THROW(with_ops(std::move(missing)), traces::TraceError);
}

// A ring exchange (context parallelism's, traces::Communication::ring) keeps its ring through a
// round trip; a ring below 2 ranks or on another kind than all_gather is an error, in code and in
// a file.
TEST(TraceJson, RingRoundTripsAndIsCheckedOnAllGatherOnly) {
  using enum TensorRole;
  const auto make = [](traces::Communication communication) {
    std::vector<Tensor> tensors{make_tensor(1, "kv", {2, 4}, input, 0), make_tensor(2, "kv.ring.recv", {2, 4}, temporary, 0)};
    std::vector<Op> ops{make_op(10, "kv.ring", Phase::forward, OpKind::communication, {0}, {1}, {}, {0, 16}, {0, 16})};
    ops[0].communication = communication;
    return Trace("cp-rank", 2, std::move(tensors), std::move(ops));
  };
  const Trace ring = make({traces::CommunicationKind::all_gather, traces::ParallelGroup::context, 4});
  const std::string text = trace_to_json(ring);
  EXPECT_THAT(text, HasSubstr(R"("communication": {"kind": "all_gather", "group": "context", "ring": 4})"));
  EXPECT_EQ(trace_from_json(text, "t.json"), ring);
  EXPECT_THROW(make({traces::CommunicationKind::all_reduce, traces::ParallelGroup::context, 4}), traces::TraceError);
  EXPECT_THROW(make({traces::CommunicationKind::all_gather, traces::ParallelGroup::context, 1}), traces::TraceError);
  std::string bad = text;
  bad.replace(bad.find(R"("ring": 4)"), 9, R"("ring": 1)");
  EXPECT_THROW(trace_from_json(bad, "t.json"), InputError);
}

TEST(TraceJson, FormatDocumentExampleParses) {
  const std::string doc = read_file(kDataDir / ".." / ".." / "traces" / "FORMAT.md");
  const std::size_t heading = doc.find("## A complete example");
  ASSERT_NE(heading, std::string::npos);
  const std::size_t begin = doc.find("```json\n", heading);
  ASSERT_NE(begin, std::string::npos);
  const std::size_t body = begin + 8;
  const std::size_t end = doc.find("```", body);
  ASSERT_NE(end, std::string::npos);
  const std::string example = doc.substr(body, end - body);
  const Trace trace = trace_from_json(example, "FORMAT.md");
  EXPECT_EQ(trace.ops().size(), 3U);
  EXPECT_EQ(trace_to_json(trace) + "\n", example);
  EXPECT_EQ(trace.rescaled(8).tensor(0).shape, (std::vector<std::int64_t>{8, 4}));
  EXPECT_EQ(trace.rescaled(8).flops(0), 192);
}

TEST(TraceJson, EveryZooModelRoundTrips) {
  const std::vector<zoo::ModelInfo> models = zoo::list_models();
  ASSERT_FALSE(models.empty());
  for (const zoo::ModelInfo& model : models) {
    SCOPED_TRACE(model.name);
    zoo::ModelRequest request;
    request.model = model.name;
    request.batch_size = 2;
    std::optional<Trace> trace;
    try {
      trace = zoo::build_model(request);
    } catch (const std::exception& error) {  // the zoo's problem, reported; go on with the others
      ADD_FAILURE() << "build_model(" << model.name << "): " << error.what();
      continue;
    }
    const std::string text = trace_to_json(*trace);
    const Trace read = trace_from_json(text, model.name + ".json");
    EXPECT_TRUE(read == *trace);  // EXPECT_EQ would print both traces on failure
    EXPECT_TRUE(trace_to_json(read) == text);
  }
}

// --- Syntax errors: "SOURCE: line L, column C: ..." -----------------------------------------

// Where a parser that stops at the end of `text` reports the error: one past its last character.
std::string end_location(std::string_view text) {
  const std::size_t lines = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
  const std::size_t last_newline = text.rfind('\n');
  const std::size_t column =
      text.size() - (last_newline == std::string_view::npos ? 0 : last_newline + 1) + 1;
  return "line " + std::to_string(lines + 1) + ", column " + std::to_string(column);
}

TEST(TraceJsonSyntax, TruncatedFilesReportWhereTheyEnd) {
  const std::string text = fixture_text("tiny.json");
  const std::size_t last_brace = text.rfind('}');
  for (std::size_t cut = 0; cut < last_brace; cut += 37) {
    const std::string truncated = text.substr(0, cut);
    SCOPED_TRACE("cut at " + std::to_string(cut) + ": ..." + truncated.substr(cut > 20 ? cut - 20 : 0));
    EXPECT_THAT(error_of(truncated), AllOf(StartsWith("t.json: " + end_location(truncated) + ": "),
                                           HasSubstr("(is the file truncated?)")));
  }
  const std::string truncated = text.substr(0, text.find("\"dtype\""));
  EXPECT_THAT(error_of(truncated),
              AllOf(StartsWith("t.json: " + end_location(truncated) + ": "),
                    HasSubstr("unexpected end of input (is the file truncated?)"), HasSubstr("expected")));
}

TEST(TraceJsonSyntax, EmptyInput) {
  EXPECT_THAT(error_of(""),
              AllOf(StartsWith("t.json: line 1, column 1: "), HasSubstr("unexpected end of input")));
  EXPECT_THAT(error_of("  \n"), StartsWith("t.json: line 2, column 1: "));
}

TEST(TraceJsonSyntax, HandBrokenJsonPointsAtTheOffendingCharacter) {
  const std::string text = fixture_text("tiny.json");
  // A doubled comma: line 3 is ` "version": 1,,`.
  EXPECT_THAT(error_of(edited(text, {{"\"version\": 1,", "\"version\": 1,,"}})),
              AllOf(StartsWith("t.json: line 3, column 15: "), HasSubstr("unexpected ','"),
                    HasSubstr("expected"), Not(HasSubstr("truncated"))));
  // A missing comma between two tensors: the error is at the next tensor's '{' (line 9).
  EXPECT_THAT(error_of(edited(text, {{"\"batch_dim\": 0},\n", "\"batch_dim\": 0}\n"}})),
              StartsWith("t.json: line 9, column 3: "));
  // Trailing garbage after the document.
  EXPECT_THAT(error_of(text + "x"), StartsWith("t.json: " + end_location(text) + ": "));
  EXPECT_THAT(error_of("{\"a\": tru}"),
              AllOf(StartsWith("t.json: line 1, column 10: "), HasSubstr("invalid literal")));
  EXPECT_THAT(error_of("{\"a\": 1, // comment\n}"), StartsWith("t.json: line 1, column 10: "));
  EXPECT_THAT(error_of("{\"a\": NaN}"), StartsWith("t.json: line 1, column 7: "));
  EXPECT_THAT(error_of("{\"a\": 1e999}"),
              AllOf(StartsWith("t.json: line 1, column "), HasSubstr("number overflow"),
                    HasSubstr("range of a double")));
  // The offending byte is quoted as text, so that the message itself is valid UTF-8.
  EXPECT_THAT(error_of("{\"a\": \"\xff\"}"),
              AllOf(StartsWith("t.json: line 1, column 8: "), HasSubstr("UTF-8"), HasSubstr(R"('"\xFF')")));
}

TEST(TraceJsonSyntax, ColumnsCountCharactersNotBytes) {
  // 'x' is the 15th character of the line but its 16th byte.
  EXPECT_THAT(error_of("{\"name\": \"é\", x}"), StartsWith("t.json: line 1, column 15: "));
}

TEST(TraceJsonSyntax, PathologicalNestingIsAnErrorNotACrash) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_THAT(error_of(deep), AllOf(StartsWith("t.json: /0/0/0/"), HasSubstr("nested deeper than")));
  EXPECT_THAT(error_of("{\"x\": " + deep + "}"), StartsWith("t.json: /x/0/0/"));
}

// Whatever the damage, the reader either returns a trace or throws InputError: no crash, no
// other exception (run under the sanitizers, this also checks for out-of-bounds reads).
TEST(TraceJsonSyntax, MutatedFilesFailCleanly) {
  const std::string text = fixture_text("tiny.json");
  constexpr std::string_view kAlphabet = "{}[]\",:0123456789-+.eE tnfx\\\n";
  std::mt19937 random(20240601);  // fixed: a failure must be reproducible
  auto below = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(random); };
  int accepted = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string mutated = text;
    for (std::size_t edits = 1 + below(3); edits > 0; --edits) {
      const std::size_t at = below(mutated.size());
      switch (below(3)) {
        case 0:
          mutated[at] = kAlphabet[below(kAlphabet.size())];
          break;
        case 1:
          mutated.erase(at, 1 + below(8));
          break;
        default:
          mutated.insert(at, mutated.substr(below(mutated.size()), 1 + below(16)));
          break;
      }
      if (mutated.empty()) mutated = "{";
    }
    try {
      (void)trace_from_json(mutated, "t.json");
      ++accepted;
    } catch (const InputError& error) {
      EXPECT_THAT(error.what(), StartsWith("t.json: ")) << mutated;
    } catch (const std::exception& error) {
      ADD_FAILURE() << "not an InputError: " << error.what() << "\n" << mutated;
    }
  }
  EXPECT_LT(accepted, 3000);
}

// --- Schema and structure errors: "SOURCE: /json/path: ..." --------------------------------

struct BrokenCase {
  std::string name;
  std::vector<std::pair<std::string, std::string>> edits;  // applied to tests/data/traces/tiny.json
  std::string location;                                    // the JSON path the message must name
  std::vector<std::string> says;                           // substrings the message must contain
};

// Failures name the case rather than dumping its bytes.
void PrintTo(const BrokenCase& broken, std::ostream* out) { *out << broken.name; }

class BrokenTrace : public ::testing::TestWithParam<BrokenCase> {};

TEST_P(BrokenTrace, NamesTheLocationAndTheProblem) {
  const BrokenCase& broken = GetParam();
  const std::string message = error_of(edited(fixture_text("tiny.json"), broken.edits));
  EXPECT_THAT(message, StartsWith("t.json: " + broken.location + ": "));
  for (const std::string& text : broken.says) EXPECT_THAT(message, HasSubstr(text));
}

const std::string kTensorX =
    R"({"id": 7, "name": "x", "dtype": "f32", "shape": [2, 4], "role": "input", "batch_dim": 0})";
const std::string kFcFlops = R"("flops": {"fixed": 0, "per_sample": 24})";
const std::string kReluView = R"("view_of": 11)";
const std::pair<std::string, std::string> kVersion2{R"("version": 1,)", R"("version": 2,)"};
const std::pair<std::string, std::string> kVersion3{R"("version": 1,)", R"("version": 3,)"};
const std::pair<std::string, std::string> kVersion5{R"("version": 1,)", R"("version": 5,)"};
// The ReLU op's (/ops/1) last fields, the first op with these two, after which an op field can be added.
const std::string kReluBytesWritten =
    R"("bytes_read": {"fixed": 0, "per_sample": 12}, "bytes_written": {"fixed": 0, "per_sample": 12})";
// The input x (batch dimension 0, batch size 2) with gradient statistics `fields`.
std::pair<std::string, std::string> x_gradient(const std::string& fields) {
  return {R"("role": "input", "batch_dim": 0})", R"("role": "input", "batch_dim": 0, "gradient": )" + fields + "}"};
}

// Errors the reader finds itself.
INSTANTIATE_TEST_SUITE_P(
    Schema, BrokenTrace,
    ::testing::Values(
        // Missing fields.
        BrokenCase{"MissingTensorField",
                   {{R"("name": "x", "dtype": "f32", )", R"("name": "x", )"}},
                   "/tensors/0/dtype",
                   {R"(missing field "dtype")", "expected a dtype"}},
        BrokenCase{"MissingTopLevelField",
                   {{" \"name\": \"tiny-mlp\",\n", ""}},
                   "/name",
                   {R"(missing field "name")", "expected a string"}},
        BrokenCase{
            "MissingOpField", {{R"("kind": "relu", )", ""}}, "/ops/1/kind", {R"(missing field "kind")"}},
        BrokenCase{"MissingBatchLinearField",
                   {{R"({"fixed": 48, "per_sample": 16})", R"({"fixed": 48})"}},
                   "/ops/0/bytes_read/per_sample",
                   {R"(missing field "per_sample")", "expected an integer >= 0"}},
        BrokenCase{"MissingSeconds",
                   {{R"("seconds": 1.25e-05, )", ""}},
                   "/ops/4/measured/seconds",
                   {R"(missing field "seconds")"}},
        BrokenCase{"MissingFormat",
                   {{" \"format\": \"comptrain-trace\",\n", ""}},
                   "/format",
                   {R"(missing field "format")", R"(expected "comptrain-trace")"}},
        // Wrong types.
        BrokenCase{"ShapeIsAString",
                   {{R"("shape": [3, 4], "role": "weight")", R"("shape": "3x4", "role": "weight")"}},
                   "/tensors/1/shape",
                   {R"(found the string "3x4"; expected an array)"}},
        BrokenCase{"IdIsAString",
                   {{R"({"id": 1000,)", R"({"id": "1000",)"}},
                   "/ops/0/id",
                   {R"(found the string "1000"; expected an unsigned integer)"}},
        BrokenCase{"FlopsIsANumber",
                   {{R"("flops": {"fixed": 0, "per_sample": 3})", R"("flops": 3)"}},
                   "/ops/1/flops",
                   {"found the integer 3; expected an object"}},
        BrokenCase{"NameIsNull",
                   {{R"("name": "relu_")", R"("name": null)"}},
                   "/ops/1/name",
                   {"found null; expected a string"}},
        BrokenCase{"TensorIsAnArray",
                   {{kTensorX, "[7]"}},
                   "/tensors/0",
                   {"found an array; expected a tensor object"}},
        BrokenCase{"RoleIsANumber",
                   {{R"("role": "input")", R"("role": 0)"}},
                   "/tensors/0/role",
                   {"found the integer 0; expected a role, one of: input, weight, weight_copy, buffer"}},
        BrokenCase{"MetadataValueNotAString",
                   {{R"("precision": "fp32")", R"("precision": 32)"}},
                   "/metadata/precision",
                   {"found the integer 32; expected a string"}},
        BrokenCase{"MetadataKeyIsEscapedInThePath",
                   {{R"("precision": "fp32")", R"("a/b~c": true)"}},
                   "/metadata/a~1b~0c",
                   {"found the boolean true; expected a string"}},
        BrokenCase{"SecondsIsAString",
                   {{R"("seconds": 1.25e-05)", R"("seconds": "12us")"}},
                   "/ops/4/measured/seconds",
                   {R"(found the string "12us"; expected a number of seconds)"}},
        // Out-of-range numbers.
        BrokenCase{"NegativeExtent",
                   {{R"("shape": [3, 4], "role": "weight")", R"("shape": [3, -4], "role": "weight")"}},
                   "/tensors/1/shape/1",
                   {"found the integer -4; expected an integer >= 0"}},
        BrokenCase{"NegativeTensorId",
                   {{R"("inputs": [7, 9])", R"("inputs": [7, -9])"}},
                   "/ops/0/inputs/1",
                   {"found the integer -9 (negative); expected an unsigned integer"}},
        BrokenCase{"FractionalBatchSize",
                   {{R"("batch_size": 2,)", R"("batch_size": 2.5,)"}},
                   "/batch_size",
                   {"found the number 2.5 (not an integer); expected an integer >= 1"}},
        BrokenCase{"IntegerWrittenAsFloat",
                   {{kFcFlops, R"("flops": {"fixed": 0, "per_sample": 2.4e1})"}},
                   "/ops/0/flops/per_sample",
                   {"(written with a fraction or an exponent); expected an integer >= 0"}},
        BrokenCase{"NegativeFlops",
                   {{kFcFlops, R"("flops": {"fixed": -1, "per_sample": 24})"}},
                   "/ops/0/flops/fixed",
                   {"found the integer -1; expected an integer >= 0"}},
        BrokenCase{"ZeroBatchSize",
                   {{R"("batch_size": 2,)", R"("batch_size": 0,)"}},
                   "/batch_size",
                   {"found the integer 0; expected an integer >= 1"}},
        BrokenCase{"ZeroMeasuredBatchSize",
                   {{R"("batch_size": 32})", R"("batch_size": 0})"}},
                   "/ops/4/measured/batch_size",
                   {"expected an integer >= 1"}},
        BrokenCase{"NegativeSeconds",
                   {{R"("seconds": 1.25e-05)", R"("seconds": -1e-3)"}},
                   "/ops/4/measured/seconds",
                   {"expected a duration >= 0"}},
        // Defect 07 (s2.yaml): 1e300 s reached the simulator as an infinite time.
        BrokenCase{"AbsurdSeconds",
                   {{R"("seconds": 1.25e-05)", R"("seconds": 1e300)"}},
                   "/ops/4/measured/seconds",
                   {"found the number 1e+300; expected a duration of at most 3600 seconds (1 hour)"}},
        BrokenCase{"SecondsJustOverAnHour",
                   {{R"("seconds": 1.25e-05)", R"("seconds": 3600.5)"}},
                   "/ops/4/measured/seconds",
                   {"found the number 3600.5; expected a duration of at most 3600 seconds"}},
        BrokenCase{"BatchDimOutOfRange",
                   {{R"("role": "input", "batch_dim": 0)", R"("role": "input", "batch_dim": 2)"}},
                   "/tensors/0/batch_dim",
                   {"found 2 but the shape has 2 dimensions; expected an index below 2"}},
        BrokenCase{
            "BatchDimOnAScalar",
            {{R"("shape": [], "role": "temporary")", R"("shape": [], "role": "temporary", "batch_dim": 0)"}},
            "/tensors/4/batch_dim",
            {"expected no batch_dim on a scalar"}},
        // Overflow.
        BrokenCase{"ExtentBeyondInt64",
                   {{R"("shape": [3, 4], "role": "weight")",
                     R"("shape": [3, 9223372036854775808], "role": "weight")"}},
                   "/tensors/1/shape/1",
                   {"too large", "<= 9223372036854775807"}},
        BrokenCase{"IdBeyondUint64",
                   {{R"({"id": 9,)", R"({"id": 18446744073709551616,)"}},
                   "/tensors/1/id",
                   {"(out of the 64-bit range); expected an unsigned integer"}},
        BrokenCase{"ElementCountOverflows",
                   {{R"("shape": [3, 4], "role": "weight")",
                     R"("shape": [4611686018427387904, 4], "role": "weight")"}},
                   "/tensors/1/shape",
                   {"exceeds 9223372036854775807"}},
        BrokenCase{"ByteSizeOverflows",
                   {{R"("shape": [3, 4], "role": "weight")",
                     R"("shape": [2305843009213693952, 1], "role": "weight")"}},
                   "/tensors/1/shape",
                   {"size in bytes exceeds"}},
        BrokenCase{"TotalBytesOverflow",
                   {{R"("shape": [3, 4], "role": "weight")",
                     R"("shape": [1152921504606846976, 1], "role": "weight")"},
                    {R"("shape": [3, 4], "role": "gradient")",
                     R"("shape": [1152921504606846976, 1], "role": "gradient")"}},
                   "/tensors/6/shape",
                   {"total more than"}},
        BrokenCase{"FlopsOverflowAtTheBatchSize",
                   {{kFcFlops, R"("flops": {"fixed": 0, "per_sample": 4611686018427387904})"}},
                   "/ops/0/flops",
                   {"fixed + per_sample * 2 exceeds"}},
        // Dangling and duplicate ids.
        BrokenCase{"DanglingInput",
                   {{R"("inputs": [7, 9])", R"("inputs": [7, 99])"}},
                   "/ops/0/inputs/1",
                   {"no tensor has id 99; expected the id of a tensor listed in /tensors"}},
        BrokenCase{"DanglingOutput",
                   {{R"("outputs": [15])", R"("outputs": [16])"}},
                   "/ops/4/outputs/0",
                   {"no tensor has id 16"}},
        BrokenCase{"DanglingView",
                   {{R"("view_of": 11)", R"("view_of": 10)"}},
                   "/tensors/3/view_of",
                   {"no tensor has id 10"}},
        BrokenCase{"DanglingAfter",
                   {{R"("after": [1002])", R"("after": [1002, 999])"}},
                   "/ops/3/after/1",
                   {"no op has id 999; expected the id of an op listed in /ops"}},
        BrokenCase{"DuplicateTensorId",
                   {{R"({"id": 9, "name")", R"({"id": 7, "name")"}},
                   "/tensors/1/id",
                   {"duplicate tensor id 7 (also at /tensors/0)"}},
        BrokenCase{"DuplicateOpId",
                   {{R"({"id": 1001,)", R"({"id": 1000,)"}},
                   "/ops/1/id",
                   {"duplicate op id 1000 (also at /ops/0)"}},
        BrokenCase{"DuplicateKey",
                   {{R"({"id": 7, "name": "x",)", R"({"id": 7, "name": "x", "name": "y",)"}},
                   "/tensors/0/name",
                   {R"(duplicate key "name")"}},
        // Unknown fields.
        BrokenCase{"UnknownTopLevelField",
                   {{R"("batch_size": 2,)", R"("batch_size": 2, "batch": 4,)"}},
                   "/batch",
                   {R"(unknown field "batch")",
                    "expected one of: format, version, name, batch_size, metadata, tensors, ops"}},
        BrokenCase{"MisspeltTensorField",
                   {{R"("view_of": 11)", R"("veiw_of": 11)"}},
                   "/tensors/3/veiw_of",
                   {R"(unknown field "veiw_of" (did you mean "view_of"?))"}},
        BrokenCase{"MisspeltOpField",
                   {{kFcFlops, R"("flop": {"fixed": 0, "per_sample": 24})"}},
                   "/ops/0/flop",
                   {R"(unknown field "flop" (did you mean "flops"?))", "expected one of: id, name, phase"}},
        BrokenCase{"UnknownBatchLinearField",
                   {{kFcFlops, R"("flops": {"fixed": 0, "per_sample": 24, "scale": 1})"}},
                   "/ops/0/flops/scale",
                   {R"(unknown field "scale")", "expected one of: fixed, per_sample"}},
        BrokenCase{"UnknownMeasuredField",
                   {{R"("batch_size": 32})", R"("batch_size": 32, "stream": 7})"}},
                   "/ops/4/measured/stream",
                   {R"(unknown field "stream")"}},
        // Unknown vocabulary values.
        BrokenCase{
            "UnknownDtype",
            {{R"("name": "x", "dtype": "f32")", R"("name": "x", "dtype": "fp32")"}},
            "/tensors/0/dtype",
            {R"(unknown dtype "fp32" (did you mean "f32"?); expected one of: f64, f32, f16, bf16, i64, i32, i8, u8, bool)"}},
        BrokenCase{"UnknownPhase",
                   {{R"("phase": "optimizer")", R"("phase": "update")"}},
                   "/ops/5/phase",
                   {R"(unknown phase "update"; expected one of: forward, backward, optimizer)"}},
        BrokenCase{"UnknownKind",
                   {{R"("kind": "relu")", R"("kind": "Relu")"}},
                   "/ops/1/kind",
                   {R"(unknown op kind "Relu" (did you mean "relu"?))", "optimizer_update, view, communication, other"}},
        BrokenCase{
            "UnknownRole",
            {{R"("role": "gradient")", R"("role": "grad")"}},
            "/tensors/6/role",
            {R"(unknown role "grad")", "expected one of: input, weight, weight_copy, buffer, gradient, optimizer_state"}},
        // Format and version.
        BrokenCase{"NewerVersion",
                   {{R"("version": 1,)", R"("version": 9, "new_field": 1,)"}},
                   "/version",
                   {"unsupported version 9; expected version 1, 2, 3, 4, 5, 6, 7 or 8", "newer comptrain"}},
        BrokenCase{"VersionZero",
                   {{R"("version": 1,)", R"("version": 0,)"}},
                   "/version",
                   {"unsupported version 0; expected version 1, 2, 3, 4, 5, 6, 7 or 8"}},
        // The op kinds gather and scatter (version 4).
        BrokenCase{"GatherInVersion3",
                   {kVersion3, {R"("kind": "relu")", R"("kind": "gather")"}},
                   "/ops/1/kind",
                   {R"(op kind "gather" is a version-4 value but /version is 3)", R"(expected "version": 4)"}},
        // The op kind communication and its field (version 5).
        BrokenCase{"CommunicationInVersion4",
                   {{R"("version": 1,)", R"("version": 4,)"}, {R"("kind": "relu")", R"("kind": "communication")"}},
                   "/ops/1/kind",
                   {R"(op kind "communication" is a version-5 value but /version is 4)", R"(expected "version": 5)"}},
        BrokenCase{"CommunicationOpWithoutItsField",
                   {kVersion5, {R"("kind": "relu")", R"("kind": "communication")"}},
                   "/ops/1/communication",
                   {R"(op "relu_" is of kind communication but has no "communication")"}},
        BrokenCase{"CommunicationOnAnotherKind",
                   {kVersion5, {kReluBytesWritten, kReluBytesWritten + R"(, "communication": {"kind": "all_reduce", "group": "tensor"})"}},
                   "/ops/1/communication",
                   {R"(op "relu_" is of kind relu; only ops of kind communication have a communication)"}},
        BrokenCase{"UnknownCommunicationKind",
                   {kVersion5,
                    {R"("kind": "relu")", R"("kind": "communication")"},
                    {kReluBytesWritten, kReluBytesWritten + R"(, "communication": {"kind": "allreduce", "group": "tensor"})"}},
                   "/ops/1/communication/kind",
                   {R"(unknown communication kind "allreduce" (did you mean "all_reduce"?))"}},
        BrokenCase{"UnknownParallelGroup",
                   {kVersion5,
                    {R"("kind": "relu")", R"("kind": "communication")"},
                    {kReluBytesWritten, kReluBytesWritten + R"(, "communication": {"kind": "send", "group": "tensors"})"}},
                   "/ops/1/communication/group",
                   {R"(unknown parallel group "tensors")", "tensor, context, data, expert, expert_data, pipeline"}},
        // The communication's overlap (version 6).
        BrokenCase{"OverlapInVersion5",
                   {kVersion5,
                    {R"("kind": "relu")", R"("kind": "communication")"},
                    {kReluBytesWritten, kReluBytesWritten + R"(, "communication": {"kind": "all_reduce", "group": "tensor", "overlap": 1})"}},
                   "/ops/1/communication/overlap",
                   {R"(the communication's "overlap" is a version-6 field but /version is 5)", R"(expected "version": 6)"}},
        BrokenCase{"OverlapZero",
                   {{R"("version": 1,)", R"("version": 6,)"},
                    {R"("kind": "relu")", R"("kind": "communication")"},
                    {kReluBytesWritten, kReluBytesWritten + R"(, "communication": {"kind": "all_reduce", "group": "tensor", "overlap": 0})"}},
                   "/ops/1/communication/overlap",
                   {"expected an integer >= 1"}},
        BrokenCase{"OverlapBesideARing",
                   {{R"("version": 1,)", R"("version": 6,)"},
                    {R"("kind": "relu")", R"("kind": "communication")"},
                    {kReluBytesWritten, kReluBytesWritten + R"(, "communication": {"kind": "all_gather", "group": "context", "ring": 2, "overlap": 1})"}},
                   "/ops/1/communication/overlap",
                   {"has overlap 1 beside a ring", "expected a count >= 1 of the ops it runs beside, on a collective without a ring"}},
        // The ops' host_sync (version 8).
        BrokenCase{"HostSyncInVersion7",
                   {{R"("version": 1,)", R"("version": 7,)"}, {kReluBytesWritten, kReluBytesWritten + R"(, "host_sync": true)"}},
                   "/ops/1/host_sync",
                   {R"("host_sync" is a version-8 field but /version is 7)", R"(expected "version": 8)"}},
        BrokenCase{"HostSyncNotABoolean",
                   {{R"("version": 1,)", R"("version": 8,)"}, {kReluBytesWritten, kReluBytesWritten + R"(, "host_sync": 1)"}},
                   "/ops/1/host_sync",
                   {"expected true or false"}},
        // The communication's splits (version 7).
        BrokenCase{"SplitsInVersion6",
                   {{R"("version": 1,)", R"("version": 6,)"},
                    {R"("kind": "relu")", R"("kind": "communication")"},
                    {kReluBytesWritten, kReluBytesWritten + R"(, "communication": {"kind": "reduce_scatter", "group": "tensor", "splits": 4})"}},
                   "/ops/1/communication/splits",
                   {R"(the communication's "splits" is a version-7 field but /version is 6)", R"(expected "version": 7)"}},
        BrokenCase{"SplitsOne",
                   {{R"("version": 1,)", R"("version": 7,)"},
                    {R"("kind": "relu")", R"("kind": "communication")"},
                    {kReluBytesWritten, kReluBytesWritten + R"(, "communication": {"kind": "reduce_scatter", "group": "tensor", "splits": 1})"}},
                   "/ops/1/communication/splits",
                   {"expected an integer >= 2"}},
        BrokenCase{"SplitsOnAnAllGather",
                   {{R"("version": 1,)", R"("version": 7,)"},
                    {R"("kind": "relu")", R"("kind": "communication")"},
                    {kReluBytesWritten, kReluBytesWritten + R"(, "communication": {"kind": "all_gather", "group": "tensor", "splits": 4})"}},
                   "/ops/1/communication/splits",
                   {"has splits 4 (kind all_gather)", "expected >= 2 pieces on a reduce_scatter without an overlap"}},
        BrokenCase{"SplitsWithAnOverlap",
                   {{R"("version": 1,)", R"("version": 7,)"},
                    {R"("kind": "relu")", R"("kind": "communication")"},
                    {kReluBytesWritten, kReluBytesWritten + R"(, "communication": {"kind": "reduce_scatter", "group": "tensor", "overlap": 1, "splits": 4})"}},
                   "/ops/1/communication/splits",
                   {"has splits 4 (kind reduce_scatter, with an overlap)"}},
        BrokenCase{"CommunicationWithoutGroup",
                   {kVersion5,
                    {R"("kind": "relu")", R"("kind": "communication")"},
                    {kReluBytesWritten, kReluBytesWritten + R"(, "communication": {"kind": "recv"})"}},
                   "/ops/1/communication/group",
                   {R"(missing field "group"; expected a parallel group)"}},
        // Value features (version 2).
        BrokenCase{"ValuesInVersion1",
                   {{kReluView, R"("view_of": 11, "values": {"zero_fraction": 0.5})"}},
                   "/tensors/3/values",
                   {"version-2 field but /version is 1", R"(expected "version": 2)"}},
        BrokenCase{"ValuesUnknownKey",
                   {kVersion2, {kReluView, R"("view_of": 11, "values": {"zero_fractoin": 0.5})"}},
                   "/tensors/3/values/zero_fractoin",
                   {R"(unknown field "zero_fractoin" (did you mean "zero_fraction"?))",
                    "expected one of: zero_fraction, spread, zero_block_fraction, block_scale"}},
        BrokenCase{"ValuesWrongType",
                   {kVersion2, {kReluView, R"("view_of": 11, "values": {"spread": "0.2"})"}},
                   "/tensors/3/values/spread",
                   {R"(found the string "0.2"; expected a number in [0, 0.5])"}},
        BrokenCase{"ValuesNull",
                   {kVersion2, {kReluView, R"("view_of": 11, "values": {"block_scale": null})"}},
                   "/tensors/3/values/block_scale",
                   {"found null; expected a finite number >= 0"}},
        BrokenCase{"ValuesNotAnObject",
                   {kVersion2, {kReluView, R"("view_of": 11, "values": [0.5])"}},
                   "/tensors/3/values",
                   {R"(found an array; expected an object with any of "zero_fraction", "spread")"}},
        // Gradient statistics (version 3).
        BrokenCase{"GradientInVersion2",
                   {kVersion2, x_gradient(R"({"delta_rms": 0.5})")},
                   "/tensors/0/gradient",
                   {"version-3 field but /version is 2", R"(expected "version": 3)"}},
        BrokenCase{"GradientUnknownKey",
                   {kVersion3, x_gradient(R"({"delta_rsm": 0.5})")},
                   "/tensors/0/gradient/delta_rsm",
                   {R"(unknown field "delta_rsm" (did you mean "delta_rms"?))",
                    "expected one of: delta_rms, weight_grad_rms, terms, batch_size"}},
        BrokenCase{"GradientWrongType",
                   {kVersion3, x_gradient(R"({"terms": "4"})")},
                   "/tensors/0/gradient/terms",
                   {R"(found the string "4"; expected a whole number in [1, 2^53])"}},
        BrokenCase{"GradientNull",
                   {kVersion3, x_gradient(R"({"weight_grad_rms": null})")},
                   "/tensors/0/gradient/weight_grad_rms",
                   {"found null; expected a finite number >= 0"}},
        BrokenCase{"GradientNotAnObject",
                   {kVersion3, x_gradient("[0.5]")},
                   "/tensors/0/gradient",
                   {R"(found an array; expected an object with any of "delta_rms", "weight_grad_rms", "terms", "batch_size")"}},
        BrokenCase{"GradientBatchSizeNotAnInteger",
                   {kVersion3, x_gradient(R"({"delta_rms": 0.5, "batch_size": 2.5})")},
                   "/tensors/0/gradient/batch_size",
                   {"found the number 2.5 (not an integer); expected an integer >= 1"}},
        BrokenCase{"GradientBatchSizeZero",
                   {kVersion3, x_gradient(R"({"delta_rms": 0.5, "batch_size": 0})")},
                   "/tensors/0/gradient/batch_size",
                   {"found the integer 0; expected an integer >= 1"}},
        BrokenCase{"VersionIsAString",
                   {{R"("version": 1,)", R"("version": "1",)"}},
                   "/version",
                   {R"(found the string "1"; expected an unsigned integer)"}},
        BrokenCase{"WrongFormat",
                   {{R"("format": "comptrain-trace")", R"("format": "chakra")"}},
                   "/format",
                   {R"(found the string "chakra"; expected "comptrain-trace")"}}),
    [](const ::testing::TestParamInfo<BrokenCase>& case_info) { return case_info.param.name; });

// Errors the Trace constructor finds (TraceError), reported with the file name in front.
INSTANTIATE_TEST_SUITE_P(
    Structure, BrokenTrace,
    ::testing::Values(
        BrokenCase{"Cycle",
                   {{R"("outputs": [11], )", R"("outputs": [11], "after": [1001], )"}},
                   "/ops/0",
                   {"cycle"}},
        BrokenCase{
            "OutOfOrder",
            {{R"(, "after": [1002])", ""}, {R"("outputs": [13], )", R"("outputs": [13], "after": [1003], )"}},
            "/ops/2",
            {"expected ops in dependency order"}},
        BrokenCase{"TwoProducers",
                   {{R"("outputs": [13])", R"("outputs": [14])"}},
                   "/ops/3/outputs/0",
                   {"already written"}},
        BrokenCase{"WeightWrittenByAnOp",
                   {{R"("outputs": [])", R"("outputs": [9])"}},
                   "/ops/5/outputs/0",
                   {"weight"}},
        BrokenCase{"ViewRoleMismatch",
                   {{R"("role": "activation", "batch_dim": 0, "view_of": 11)",
                     R"("role": "temporary", "batch_dim": 0, "view_of": 11)"}},
                   "/tensors/3/role",
                   {"view"}},
        BrokenCase{"SelfView", {{R"("view_of": 11)", R"("view_of": 12)"}}, "/tensors/3/view_of", {"cycle"}},
        BrokenCase{
            "BatchExtentNotAMultiple",
            {{kTensorX,
              R"({"id": 7, "name": "x", "dtype": "f32", "shape": [3, 4], "role": "input", "batch_dim": 0})"}},
            "/tensors/0/shape/0",
            {"multiple of the batch size 2"}},
        BrokenCase{"ZeroFractionAboveOne",
                   {kVersion2, {kReluView, R"("view_of": 11, "values": {"zero_fraction": 1.5})"}},
                   "/tensors/3/values/zero_fraction",
                   {"found 1.5; expected a fraction in [0, 1]"}},
        BrokenCase{"NegativeZeroBlockFraction",
                   {kVersion2, {kReluView, R"("view_of": 11, "values": {"zero_block_fraction": -0.25})"}},
                   "/tensors/3/values/zero_block_fraction",
                   {"found -0.25; expected a fraction in [0, 1]"}},
        BrokenCase{"SpreadAboveHalf",
                   {kVersion2, {kReluView, R"("view_of": 11, "values": {"spread": 0.6})"}},
                   "/tensors/3/values/spread",
                   {"found 0.6; expected a number in [0, 0.5]"}},
        BrokenCase{"NegativeBlockScale",
                   {kVersion2, {kReluView, R"("view_of": 11, "values": {"block_scale": -1e-9})"}},
                   "/tensors/3/values/block_scale",
                   {"found -1e-09; expected a finite number >= 0"}},
        BrokenCase{"NegativeDeltaRms",
                   {kVersion3, x_gradient(R"({"delta_rms": -0.5})")},
                   "/tensors/0/gradient/delta_rms",
                   {"found -0.5; expected a finite number >= 0 (an RMS)"}},
        BrokenCase{"NegativeWeightGradRms",
                   {kVersion3, x_gradient(R"({"weight_grad_rms": -1e-300})")},
                   "/tensors/0/gradient/weight_grad_rms",
                   {"found -1e-300; expected a finite number >= 0 (an RMS)"}},
        BrokenCase{"ZeroTerms",
                   {kVersion3, x_gradient(R"({"terms": 0})")},
                   "/tensors/0/gradient/terms",
                   {"found 0; expected a whole number in [1, 2^53]"}},
        BrokenCase{"FractionalTerms",
                   {kVersion3, x_gradient(R"({"terms": 4.5})")},
                   "/tensors/0/gradient/terms",
                   {"found 4.5; expected a whole number in [1, 2^53]"}},
        BrokenCase{"TermsAbove2To53",
                   {kVersion3, x_gradient(R"({"terms": 1e16})")},
                   "/tensors/0/gradient/terms",
                   {"found 1e+16; expected a whole number in [1, 2^53]"}},
        BrokenCase{"TermsNotAMultipleOfTheBatch",
                   {kVersion3, x_gradient(R"({"terms": 3})")},
                   "/tensors/0/gradient/terms",
                   {"found 3 on a tensor that scales with the batch; expected a multiple of the batch size 2"}},
        BrokenCase{"GradientBatchSizeAlone",
                   {kVersion3, x_gradient(R"({"terms": 4, "batch_size": 8})")},
                   "/tensors/0/gradient/batch_size",
                   {"a batch size without delta_rms or weight_grad_rms"}},
        BrokenCase{"ActivationUnusedByBackward",
                   {{R"("shape": [], "role": "temporary")", R"("shape": [], "role": "activation")"}},
                   "/tensors/4/role",
                   {"no backward op reads it"}}),
    [](const ::testing::TestParamInfo<BrokenCase>& case_info) { return case_info.param.name; });

TEST(TraceJsonSchema, TopLevelMustBeAnObject) {
  EXPECT_EQ(error_of("[1, 2]"),
            R"(t.json: /: found an array; expected an object with "format": "comptrain-trace")");
  EXPECT_THAT(error_of("\"comptrain-trace\""), StartsWith("t.json: /: found the string \"comptrain-trace\""));
}

TEST(TraceJsonSchema, ContainersMustHaveTheirType) {
  const std::string head = R"({"format": "comptrain-trace", "version": 1, "name": "n", "batch_size": 1, )";
  EXPECT_EQ(error_of(head + R"("tensors": {}, "ops": []})"),
            "t.json: /tensors: found an object; expected an array of tensors");
  EXPECT_EQ(error_of(head + R"("tensors": [], "ops": [[]]})"),
            "t.json: /ops/0: found an array; expected an op object");
  EXPECT_EQ(error_of(head + R"("metadata": [], "tensors": [], "ops": []})"),
            "t.json: /metadata: found an array; expected an object of strings");
}

TEST(TraceJsonSchema, FormatAndVersionComeBeforeUnknownFields) {
  // A newer file may well have fields this reader does not know: say "newer version" instead.
  EXPECT_THAT(error_of(R"({"format": "comptrain-trace", "version": 9, "streams": []})"),
              StartsWith("t.json: /version: unsupported version 9"));
  EXPECT_THAT(error_of(R"({"schema": "1.0.3", "nodes": []})"),
              StartsWith(R"(t.json: /format: missing field "format"; expected "comptrain-trace")"));
}

TEST(TraceJsonSchema, LongValuesAreCutInMessages) {
  const std::string message = error_of(edited(
      fixture_text("tiny.json"), {{R"("dtype": "f32")", "\"dtype\": \"" + std::string(5000, 'z') + "\""}}));
  EXPECT_THAT(message, StartsWith("t.json: /tensors/0/dtype: unknown dtype \"zzz"));
  EXPECT_LT(message.size(), 400U);
}

// --- Files ----------------------------------------------------------------------------------

TEST(TraceJsonFile, ReadsTheFixture) { EXPECT_EQ(read_trace_file(kTraceDir / "tiny.json"), tiny_trace()); }

TEST(TraceJsonFile, MissingFileNamesThePath) {
  const fs::path path = kTraceDir / "does-not-exist.json";
  try {
    (void)read_trace_file(path);
    ADD_FAILURE() << "no error";
  } catch (const InputError& error) {
    EXPECT_THAT(error.what(), HasSubstr(path.string()));
  }
}

TEST(TraceJsonFile, ADirectoryIsAnInputError) { EXPECT_THROW((void)read_trace_file(kTraceDir), InputError); }

std::string file_error(const fs::path& path) {
  try {
    (void)read_trace_file(path);
  } catch (const InputError& error) {
    return error.what();
  }
  ADD_FAILURE() << "accepted " << path;
  return {};
}

TEST(TraceJsonFile, ErrorsNameTheFile) {
  const fs::path truncated = kTraceDir / "truncated.json";
  EXPECT_THAT(file_error(truncated), AllOf(StartsWith(truncated.string() + ": line 7, column 46: "),
                                           HasSubstr("is the file truncated?")));
  const fs::path typo = kTraceDir / "unknown_field.json";
  EXPECT_THAT(file_error(typo),
              StartsWith(typo.string() +
                         R"(: /tensors/1/veiw_of: unknown field "veiw_of" (did you mean "view_of"?))"));
}

class TraceJsonWrite : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("comptrain-trace-json-" + std::to_string(::getpid()) + "-" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<fs::path> files() const {
    std::vector<fs::path> found;
    for (const auto& entry : fs::directory_iterator(dir_)) found.push_back(entry.path().filename());
    return found;
  }

  fs::path dir_;
};

TEST_F(TraceJsonWrite, WritesAtomicallyAndReadsBack) {
  const fs::path path = dir_ / "tiny.json";
  write_trace_file(tiny_trace(), path);
  EXPECT_EQ(files(), std::vector<fs::path>{"tiny.json"});  // no temporary left behind
  EXPECT_EQ(read_file(path), trace_to_json(tiny_trace()) + "\n");
  EXPECT_EQ(read_trace_file(path), tiny_trace());

  // Replacing an existing file.
  Op op;
  op.name = "op";
  const Trace other("one-op", 1, {}, {op});
  write_trace_file(other, path);
  EXPECT_EQ(read_trace_file(path), other);
  EXPECT_EQ(files(), std::vector<fs::path>{"tiny.json"});
}

TEST_F(TraceJsonWrite, MissingDirectoryIsAnInputError) {
  const fs::path path = dir_ / "no-such-dir" / "t.json";
  EXPECT_THROW(write_trace_file(tiny_trace(), path), InputError);
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
}  // namespace comptrain::traces

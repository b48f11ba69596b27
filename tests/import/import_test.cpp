// The importers on small real and schema-built fixtures (tests/data/import/README.md): what each
// format yields, what it is reported to lack, and corrupt inputs rejected at their JSON path.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>

#include "comptrain/support/input_error.hpp"
#include "comptrain/trace_import/import.hpp"
#include "comptrain/traces/liveness.hpp"
#include "comptrain/traces/trace_json.hpp"

namespace comptrain::trace_import {
namespace {

using testing::HasSubstr;

const std::string kDir = std::string(COMPTRAIN_TEST_DATA_DIR) + "/import/";

ImportResult load(const std::string& file, ImportOptions options = {}) { return import_file(kDir + file, options); }

bool mentions(const ImportResult& result, const std::string& text) {
  return std::any_of(result.missing.begin(), result.missing.end(),
                     [&](const std::string& m) { return m.find(text) != std::string::npos; });
}

// Every import is a valid trace that survives the file format.
void expect_round_trip(const traces::Trace& trace) {
  EXPECT_EQ(traces::trace_from_json(traces::trace_to_json(trace), "round trip"), trace);
}

TEST(ProfilerImport, LegacyChromeTraceFromDebianTorch) {
  const auto result = load("profiler_legacy.json");
  EXPECT_EQ(result.format, Format::pytorch_profiler);
  const auto& trace = result.trace;
  ASSERT_GT(trace.ops().size(), 10u);
  // Top-level ops only (aten::linear, not the aten::addmm inside it), in recorded order, chained.
  std::size_t linear = 0, backward = 0, optimizer = 0;
  for (std::size_t i = 0; i < trace.ops().size(); ++i) {
    const auto& op = trace.op(i);
    EXPECT_NE(op.name, "aten::addmm");
    if (op.name == "aten::linear") ++linear;
    if (op.phase == traces::Phase::backward) ++backward;
    if (op.phase == traces::Phase::optimizer) ++optimizer;
    ASSERT_TRUE(op.measured.has_value());
    EXPECT_EQ(op.measured->device, "cpu");
    if (i > 0) {
      EXPECT_EQ(op.after, std::vector<traces::OpIndex>{i - 1});
    }
  }
  EXPECT_EQ(linear, 4u);  // two Linear layers, two steps
  EXPECT_GT(backward, 0u);
  EXPECT_TRUE(result.memory.empty());
  EXPECT_TRUE(mentions(result, "allocator events"));
  EXPECT_TRUE(mentions(result, "tensors and data flow"));
  expect_round_trip(trace);
}

TEST(ProfilerImport, KinetoTraceGivesKernelTimesFlopsAndMemoryPeak) {
  ImportOptions options;
  options.batch_size = 8;
  const auto result = load("profiler_kineto.json", options);
  EXPECT_EQ(result.trace.batch_size(), 8);
  ASSERT_EQ(result.memory.size(), 1u);
  const MemoryTimeline& memory = result.memory[0];
  EXPECT_EQ(memory.device, "cpu");
  EXPECT_EQ(memory.baseline, 4096);
  EXPECT_EQ(memory.peak, 4096 + 1024 + 512 + 2048 - 1024);
  EXPECT_EQ(memory.events, 6);
  EXPECT_EQ(result.trace.metadata().at("memory.cpu.peak_bytes"), "6656");
  // The addmm's FLOPs and its kernel's 5 us land on the aten::linear that contains it.
  const auto& ops = result.trace.ops();
  const auto linear = std::find_if(ops.begin(), ops.end(), [](const auto& op) { return op.name == "aten::linear"; });
  ASSERT_NE(linear, ops.end());
  EXPECT_EQ(linear->flops.fixed, 2 * 8 * 16 * 32);
  EXPECT_EQ(linear->kind, traces::OpKind::linear);
  ASSERT_TRUE(linear->measured.has_value());
  EXPECT_DOUBLE_EQ(linear->measured->seconds, 5e-6);
  EXPECT_EQ(linear->measured->device, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(linear->measured->batch_size, 8);
  EXPECT_FALSE(mentions(result, "FLOPs"));
  EXPECT_FALSE(mentions(result, "allocator events"));
  expect_round_trip(result.trace);
}

TEST(SnapshotImport, PeakFromHistoryAndFinalState) {
  const auto result = load("memory_snapshot.json");
  EXPECT_EQ(result.format, Format::memory_snapshot);
  ASSERT_EQ(result.memory.size(), 1u);
  constexpr std::int64_t MiB = 1 << 20;
  const MemoryTimeline& memory = result.memory[0];
  // Final state: 1 + 2 + 4 (pending free) MiB in use; the history nets +5 MiB, so 2 MiB were
  // allocated before it began. Then 2 -> 10 -> 14 -> 6 -> 8 -> 7 MiB.
  EXPECT_EQ(memory.baseline, 2 * MiB);
  EXPECT_EQ(memory.peak, 14 * MiB);
  EXPECT_DOUBLE_EQ(memory.peak_time, 10e-6);
  EXPECT_EQ(memory.samples.back().second, 7 * MiB);
  // The allocations as tensors: the static accounting of the trace sees the same peak.
  const auto liveness = traces::compute_liveness(result.trace, result.trace.recorded_order());
  EXPECT_EQ(liveness.peak_bytes, 14 * MiB);
  EXPECT_TRUE(mentions(result, "ops, FLOPs and durations"));
  expect_round_trip(result.trace);
}

TEST(SnapshotImport, PickleAsDumpSnapshotWritesIt) {
  const auto json = load("memory_snapshot.json");
  for (const char* file : {"memory_snapshot.p2.pickle", "memory_snapshot.p4.pickle"}) {
    const auto result = load(file);
    EXPECT_EQ(result.format, Format::memory_snapshot) << file;
    ASSERT_EQ(result.memory.size(), 1u);
    EXPECT_EQ(result.memory[0].peak, json.memory[0].peak) << file;
    EXPECT_EQ(result.memory[0].samples, json.memory[0].samples) << file;
    EXPECT_EQ(result.trace.tensors(), json.trace.tensors()) << file;
  }
}

TEST(ChakraImport, NodesDependenciesDurationsAndAttributes) {
  const auto result = load("chakra.json");
  EXPECT_EQ(result.format, Format::chakra_json);
  const auto& trace = result.trace;
  ASSERT_EQ(trace.ops().size(), 5u);
  EXPECT_EQ(trace.op(0).id, 10u);  // node ids kept
  EXPECT_EQ(trace.op(0).flops.fixed, 4096);
  EXPECT_EQ(trace.op(0).bytes_read.fixed, 2560);
  EXPECT_EQ(trace.op(0).kind, traces::OpKind::linear);
  EXPECT_EQ(trace.op(1).after, std::vector<traces::OpIndex>{0});
  EXPECT_EQ(trace.op(2).phase, traces::Phase::backward);
  EXPECT_EQ(trace.op(2).flops.fixed, 8192);  // uint64_val read as well as int64_val
  EXPECT_EQ(trace.op(3).kind, traces::OpKind::other);
  EXPECT_EQ(trace.op(4).phase, traces::Phase::optimizer);
  EXPECT_EQ(trace.op(4).flops.fixed, 1088);  // protobuf JSON: camelCase, int64 as a string
  ASSERT_TRUE(trace.op(4).measured.has_value());
  EXPECT_DOUBLE_EQ(trace.op(4).measured->seconds, 5e-6);
  EXPECT_EQ(trace.metadata().at("chakra_version"), "0.0.4");
  EXPECT_TRUE(mentions(result, "2176 bytes (comm_size)"));
  expect_round_trip(trace);
}

TEST(Import, DetectsEachFormat) {
  EXPECT_EQ(load("profiler_legacy.json").format, Format::pytorch_profiler);
  EXPECT_EQ(detect_format(R"({"traceEvents": []})"), Format::pytorch_profiler);
  EXPECT_EQ(detect_format(R"({"segments": [], "device_traces": []})"), Format::memory_snapshot);
  EXPECT_EQ(detect_format(R"({"nodes": []})"), Format::chakra_json);
  EXPECT_EQ(detect_format(R"({"format": "comptrain-trace"})"), std::nullopt);
  EXPECT_EQ(parse_format("chakra-json"), Format::chakra_json);
  EXPECT_EQ(parse_format("chakra"), std::nullopt);
  try {
    import_text(R"({"something": 1})", "x.json", {});
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("not a recognised format"));
  }
}

struct Corrupt {
  const char* file;
  const char* location;  // what the message must point at
};

class CorruptInput : public testing::TestWithParam<Corrupt> {};

TEST_P(CorruptInput, RejectedWithItsLocation) {
  try {
    load(GetParam().file);
    FAIL() << GetParam().file << " was accepted";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr(GetParam().location));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, CorruptInput,
    testing::Values(Corrupt{"corrupt_profiler_dur.json", "/traceEvents/0/dur: \"soon\" is not a finite decimal number; expected a finite number"},
                    Corrupt{"corrupt_profiler_memory.json", "/args/Bytes: missing"},
                    Corrupt{"corrupt_snapshot_size.json", "/device_traces/0/1/size: negative value -5"},
                    Corrupt{"corrupt_chakra_dep.json", "/nodes/2/data_deps/0: no node has id 99"},
                    Corrupt{"corrupt_chakra_cycle.json", "the dependencies form a cycle"},
                    Corrupt{"corrupt_truncated.json", "not valid JSON"},
                    Corrupt{"corrupt_snapshot_truncated.pickle", "the pickle ends early"},
                    // Adversarial inputs (make_adversarial.py): a memo bomb is refused before it
                    // is expanded, running totals that pass int64 are errors at the value that
                    // made them overflow, not wrapped peaks.
                    Corrupt{"corrupt_pickle_memo_bomb.pickle", "expands to more than"},
                    Corrupt{"corrupt_snapshot_overflow.json",
                            "/device_traces/0/1/size: the net bytes allocated by the history overflows int64"},
                    Corrupt{"corrupt_profiler_bytes_overflow.json",
                            "/traceEvents/1/args/Bytes: the bytes allocated before the first event (Total Allocated - Bytes) "
                            "overflows int64 (5120 - -9223372036854775808)"}),
    [](const auto& param_info) {
      std::string name = param_info.param.file;
      name = name.substr(0, name.find('.'));
      return name;
    });

// The message of the InputError that importing `text` raises ("" when it is accepted).
std::string rejection(const std::string& text, const std::string& source = "adversarial") {
  try {
    import_text(text, source, {});
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// A memo bomb like defect 01's 366-byte file, written as Python's pickler writes (x, x): the
// first half is the value on the stack, the second a memo reference to it. `levels` levels
// stand for 2^levels leaves (2^60 used to run for ~50 s and abort with bad_alloc).
std::string memo_bomb(int levels) {
  std::string data = "\x80\x04K\x01\x94";  // PROTO 4, BININT1 1, MEMOIZE (memo 0)
  for (int i = 0; i < levels; ++i) {
    data += 'h';  // BINGET i, TUPLE2, MEMOIZE (memo i + 1)
    data += static_cast<char>(i);
    data += "\x86\x94";
  }
  return data + ".";
}

TEST(PickleLimits, MemoBombIsRefusedBeforeItIsExpanded) {
  const auto start = std::chrono::steady_clock::now();
  const std::string message = rejection(memo_bomb(60), "bomb.pickle");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_THAT(message, HasSubstr("bomb.pickle: byte "));
  EXPECT_THAT(message, HasSubstr("expands to more than 1073741824 bytes"));
  // Pricing the shared graph is linear in the file: microseconds, not the old 50 s.
  EXPECT_LT(seconds, 1.0);
  // Format detection unpickles too, and must not blow up either.
  EXPECT_EQ(detect_format(memo_bomb(60)), std::nullopt);
}

TEST(PickleLimits, SharedValuesWithinTheBudgetAreCopiedOut) {
  // 2^10 leaves through the memo: the same structure, small enough to expand. Wrapped as the
  // "frames" of a snapshot entry, which the importer ignores, so the import succeeds.
  const std::string tree = memo_bomb(10).substr(2);  // without PROTO and STOP
  std::string data = "\x80\x04}(";  // PROTO 4, EMPTY_DICT, MARK (not memoized: the tree's memo starts at 0)
  const auto key = [&](const std::string& text) {
    data += '\x8c';  // SHORT_BINUNICODE
    data += static_cast<char>(text.size());
    data += text;
  };
  key("segments");
  data += "]";  // EMPTY_LIST
  key("device_traces");
  data += "}(";  // EMPTY_DICT, MARK: the one entry, made ((entry,),) by the two TUPLE1 below
  key("action");
  key("alloc");
  key("addr");
  data += "K\x10";
  key("size");
  data += std::string("M\x00\x04", 3);  // BININT2 1024
  key("frames");
  data += tree.substr(0, tree.size() - 1);
  data += "u\x85\x85u.";  // SETITEMS, TUPLE1, TUPLE1, SETITEMS, STOP
  const auto result = import_text(data, "shared.pickle", {});
  ASSERT_EQ(result.memory.size(), 1u);
  EXPECT_EQ(result.memory[0].peak, 1024);
}

TEST(PickleLimits, CyclesAndMemoGapsAreRefused) {
  // EMPTY_LIST, MEMOIZE, BINGET 0, APPEND: a list that contains itself.
  EXPECT_THAT(rejection(std::string("\x80\x04]\x94h\x00" "a.", 9)), HasSubstr("byte 2: a value that contains itself"));
  // LONG_BINPUT 2^20 with an empty memo: five bytes used to allocate a million memo slots.
  EXPECT_THAT(rejection(std::string("\x80\x02Nr\x00\x00\x10\x00.", 9)), HasSubstr("byte 3: memo index 1048576 skips entries"));
}

TEST(ImportOverflow, SnapshotTotalsAreChecked) {
  // The final state's blocks sum past int64.
  EXPECT_THAT(rejection(R"({"segments": [{"device": 0, "blocks": [
      {"size": 9223372036854775807, "state": "active_allocated"}, {"size": 1, "state": "active_allocated"}]}],
      "device_traces": []})"),
              HasSubstr("adversarial: /segments/0/blocks/1/size: the bytes in use on device 0 overflows int64"));
  // Frees of memory allocated before the history: net -(2^62 + 2^62) does not fit.
  EXPECT_THAT(rejection(R"({"segments": [], "device_traces": [[
      {"action": "free_completed", "addr": 1, "size": 4611686018427387904},
      {"action": "free_completed", "addr": 2, "size": 4611686018427387904},
      {"action": "free_completed", "addr": 3, "size": 1}]]})"),
              HasSubstr("/device_traces/0/2/size: the net bytes allocated by the history overflows int64"));
  // Final state 2^62, the history freed 2^62 it never allocated: 2^63 before the history.
  EXPECT_THAT(rejection(R"({"segments": [{"device": 0, "blocks": [{"size": 4611686018427387904, "state": "active_allocated"}]}],
      "device_traces": [[{"action": "free_completed", "addr": 1, "size": 4611686018427387904}]]})"),
              HasSubstr("/device_traces/0: the bytes allocated before the history"));
  // A size written as a double is not rounded into range.
  EXPECT_THAT(rejection(R"({"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": 1e19}]]})"),
              HasSubstr("/device_traces/0/0/size: the number 1e+19 is outside the int64 range; expected an integer"));
  EXPECT_THAT(rejection(R"({"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": 2.5}]]})"),
              HasSubstr("/device_traces/0/0/size: the non-integer number 2.5"));
}

TEST(ImportOverflow, ProfilerTotalsAndTimesAreChecked) {
  const auto memory = [](const std::string& args) {
    return R"({"traceEvents": [{"ph": "i", "name": "[memory]", "ts": 1, "args": )" + args + "}]}";
  };
  EXPECT_THAT(rejection(memory(R"({"Bytes": 8, "Total Allocated": -1})")),
              HasSubstr("/traceEvents/0/args/Total Allocated: negative value -1"));
  EXPECT_THAT(rejection(memory(R"({"Bytes": 8192, "Total Allocated": 4096})")),
              HasSubstr("/traceEvents/0/args/Bytes: the event allocates 8192 bytes but leaves only 4096 allocated"));
  // Without Total Allocated the running sum itself is checked.
  EXPECT_THAT(rejection(R"({"traceEvents": [
      {"ph": "i", "name": "[memory]", "ts": 1, "args": {"Bytes": 9223372036854775807}},
      {"ph": "i", "name": "[memory]", "ts": 2, "args": {"Bytes": 1}}]})"),
              HasSubstr("/traceEvents/1/args/Bytes: the bytes allocated on cpu overflows int64"));
  EXPECT_THAT(rejection(R"({"traceEvents": [
      {"ph": "i", "name": "[memory]", "ts": -1.7e308, "args": {"Bytes": 1}},
      {"ph": "i", "name": "[memory]", "ts": 1.7e308, "args": {"Bytes": 1}}]})"),
              HasSubstr("/traceEvents/1/ts: the time since the first event is not finite"));
  // FLOPs of the ops inside one top-level op are summed onto it.
  EXPECT_THAT(rejection(R"({"traceEvents": [
      {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "ts": 0, "dur": 10, "args": {"flops": 9223372036854775807}},
      {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "ts": 1, "dur": 5, "args": {"flops": 1}}]})"),
              HasSubstr("/traceEvents/1/args/flops: the FLOPs of aten::linear overflows int64"));
  EXPECT_THAT(rejection(R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1.7e308, "dur": 1.7e308}]})"),
              HasSubstr("/traceEvents/0/dur: the span's end (ts + dur) is not finite"));
  // Two kernels of one op whose durations add up to infinity.
  EXPECT_THAT(rejection(R"({"traceEvents": [
      {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 10, "args": {"External id": 7}},
      {"ph": "X", "cat": "kernel", "name": "k1", "ts": 1, "dur": 1.7e308, "args": {"External id": 7}},
      {"ph": "X", "cat": "kernel", "name": "k2", "ts": 2, "dur": 1.7e308, "args": {"External id": 7}}]})"),
              HasSubstr("/traceEvents/2/dur: the kernel time of aten::mm is not finite"));
}

TEST(ImportNumbers, TimesAsStringsAreFiniteDecimals) {
  const auto span = [](const std::string& ts) {
    return R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::relu", "ts": )" + ts + R"(, "dur": 2}]})";
  };
  EXPECT_EQ(rejection(span(R"("12.5")")), "");  // a decimal string is a number
  for (const char* text : {R"("nan")", R"("inf")", R"("1e400")", R"("0x10")", R"(" 5")", R"("5 ")", R"("")"}) {
    EXPECT_THAT(rejection(span(text)), HasSubstr("/traceEvents/0/ts: " + std::string(text) + " is not a finite decimal number")) << text;
  }
}

TEST(ImportOverflow, ChakraNumbersAreChecked) {
  const auto node = [](const std::string& fields) { return R"({"nodes": [{"id": 1, "name": "n")" + fields + "}]}"; };
  EXPECT_THAT(rejection(node(R"(, "attr": [{"name": "comm_size", "int64_val": 9223372036854775807},
                                            {"name": "comm_size", "int64_val": 1}])")),
              HasSubstr("/nodes/0/attr/1: the bytes of all comm_size attributes overflows int64"));
  EXPECT_THAT(rejection(node(R"(, "attr": [{"name": "num_ops", "uint64_val": 18446744073709551615}])")),
              HasSubstr("/nodes/0/attr/0/uint64_val: integer too large"));
  EXPECT_THAT(rejection(node(R"(, "attr": [{"name": "num_ops", "int64Val": "99999999999999999999"}])")),
              HasSubstr("/nodes/0/attr/0/int64Val: \"99999999999999999999\" is outside the int64 range"));
  EXPECT_THAT(rejection(node(R"(, "duration_micros": 1.5)")), HasSubstr("/nodes/0/duration_micros: the non-integer number 1.5"));
  EXPECT_THAT(rejection(node(R"(, "duration_micros": -3)")), HasSubstr("/nodes/0/duration_micros: negative value -3"));
  EXPECT_THAT(rejection(R"({"nodes": [{"id": -1, "name": "n"}]})"), HasSubstr("/nodes/0/id: negative id -1"));
  EXPECT_THAT(rejection(R"({"nodes": [{"id": 1e20, "name": "n"}]})"), HasSubstr("/nodes/0/id: the number 1e+20 is outside"));
}

}  // namespace
}  // namespace comptrain::trace_import

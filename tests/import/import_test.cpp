// The importers on small real and schema-built fixtures (tests/data/import/README.md): what each
// format yields, what it is reported to lack, and corrupt inputs rejected at their JSON path.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
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
    testing::Values(Corrupt{"corrupt_profiler_dur.json", "/traceEvents/0/dur: a string; expected a finite number"},
                    Corrupt{"corrupt_profiler_memory.json", "/args/Bytes: missing"},
                    Corrupt{"corrupt_snapshot_size.json", "/device_traces/0/1/size: negative value -5"},
                    Corrupt{"corrupt_chakra_dep.json", "/nodes/2/data_deps/0: no node has id 99"},
                    Corrupt{"corrupt_chakra_cycle.json", "the dependencies form a cycle"},
                    Corrupt{"corrupt_truncated.json", "not valid JSON"},
                    Corrupt{"corrupt_snapshot_truncated.pickle", "the pickle ends early"}),
    [](const auto& param_info) {
      std::string name = param_info.param.file;
      name = name.substr(0, name.find('.'));
      return name;
    });

}  // namespace
}  // namespace comptrain::trace_import

// Chakra's binary execution trace (.et), issue 19: the reader against fixtures written by a second,
// hand-written encoder (tests/data/import/make_chakra_et.py), the writer through a round trip on
// every zoo model, corrupt files rejected with the byte offset, and random damage never crashing.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <google/protobuf/util/json_util.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "comptrain/support/input_error.hpp"
#include "comptrain/trace_import/import.hpp"
#include "comptrain/traces/trace_json.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "proto/chakra_et.pb.h"

namespace comptrain::trace_import {
namespace {

using testing::AllOf;
using testing::HasSubstr;
using testing::StartsWith;

const std::string kDir = std::string(COMPTRAIN_TEST_DATA_DIR) + "/import/";

std::string read(const std::string& file) {
  std::ifstream in(kDir + file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

ImportOptions as_et() {
  ImportOptions options;
  options.format = Format::chakra_et;
  return options;
}

std::string error_of(const std::string& bytes, const std::string& source, ImportOptions options = {}) {
  try {
    import_text(bytes, source, options);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

traces::Trace zoo_trace(const std::string& model, std::int64_t batch = 2) {
  zoo::ModelRequest request;
  request.model = model;
  request.batch_size = batch;
  return zoo::build_model(request);
}

// A trace's tensors as the Trace constructor takes them (producers and consumers not derived).
std::vector<traces::Tensor> fresh(std::vector<traces::Tensor> tensors) {
  for (auto& t : tensors) {
    t.producer.reset();
    t.consumers.clear();
  }
  return tensors;
}

// Without the metadata entries that name where a trace was imported from (they differ by file).
traces::Trace without_provenance(const traces::Trace& t) {
  auto metadata = t.metadata();
  metadata.erase("source");
  metadata.erase("imported_from");
  return traces::Trace("x", t.batch_size(), fresh(t.tensors()), t.ops(), metadata);
}

// --- Reading what Chakra's tools write ------------------------------------------------------

// chakra.et holds the nodes of chakra.json: one importer behind both parsers gives the same
// trace and the same report of what is missing.
TEST(ChakraEt, BinaryAndJsonFormsImportAlike) {
  const ImportResult et = import_file(kDir + "chakra.et", {});
  const ImportResult js = import_file(kDir + "chakra.json", {});
  EXPECT_EQ(et.format, Format::chakra_et);
  EXPECT_EQ(js.format, Format::chakra_json);
  EXPECT_EQ(et.trace.metadata().at("source"), "chakra-et");
  EXPECT_EQ(et.trace.name(), "chakra");
  EXPECT_TRUE(without_provenance(et.trace) == without_provenance(js.trace));
  EXPECT_EQ(et.missing, js.missing);
  ASSERT_EQ(et.trace.ops().size(), 5u);
  EXPECT_EQ(et.trace.op(0).flops.fixed, 4096);
  EXPECT_EQ(et.trace.op(0).bytes_read.fixed, 2560);
  EXPECT_EQ(et.trace.op(4).flops.fixed, 1088);
  EXPECT_EQ(et.trace.metadata().at("chakra_version"), "0.0.4");
}

// The .et reader gives what chakra_jsonizer prints: the same document protobuf's JSON parser
// turns back into the same messages (libprotobuf's encoder vs the fixture's hand-written one).
TEST(ChakraEt, JsonFormParsesBackToTheSameMessages) {
  const std::string bytes = read("chakra.et");
  const auto doc = nlohmann::json::parse(chakra_et_to_json(bytes, "chakra.et"));
  ASSERT_EQ(doc.at("nodes").size(), 5u);
  std::string rebuilt;
  chakra::GlobalMetadata metadata;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(doc.at("global_metadata").dump(), &metadata).ok());
  const std::string m = metadata.SerializeAsString();
  rebuilt += static_cast<char>(m.size());  // below 128: a one-byte varint
  rebuilt += m;
  for (const auto& node_json : doc.at("nodes")) {
    chakra::Node node;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(node_json.dump(), &node).ok());
    const std::string n = node.SerializeAsString();
    ASSERT_LT(n.size(), 128u);
    rebuilt += static_cast<char>(n.size());
    rebuilt += n;
  }
  EXPECT_EQ(rebuilt, bytes);
  EXPECT_EQ(doc.at("nodes").at(3).at("type"), "COMM_COLL_NODE");
}

TEST(ChakraEt, FormatIsDetectedAndNamed) {
  EXPECT_EQ(detect_format(read("chakra.et")), Format::chakra_et);
  EXPECT_EQ(detect_format(read("tiny_comptrain.et")), Format::chakra_et);
  EXPECT_EQ(parse_format("chakra-et"), Format::chakra_et);
  EXPECT_EQ(to_string(Format::chakra_et), "chakra-et");
  // Without the .et extension the content decides.
  EXPECT_EQ(import_text(read("chakra.et"), "no-extension", {}).format, Format::chakra_et);
  // A .et whose GlobalMetadata is 123 bytes long starts with "{\n", as pretty-printed JSON does
  // (123 is '{', and the version's key 0x0a is '\n'): it does not parse as JSON, so it is read as
  // the .et it is.
  std::string et;
  traces::Op op;
  op.name = "op";
  for (std::string name = "n"; name.size() < 100; name += 'n') {
    et = trace_to_chakra_et(traces::Trace(name, 1, {}, {op}, {}));
    if (et[0] == '{') break;
  }
  ASSERT_EQ(et.substr(0, 2), "{\n");
  const ImportResult braced = import_text(et, "t", {});
  EXPECT_EQ(braced.format, Format::chakra_et);
  EXPECT_EQ(braced.trace.tensors().size(), 0u);
  // Pretty-printed JSON stays JSON, and a truncated one keeps its JSON error.
  const std::string json = read("chakra.json");
  ASSERT_EQ(json.substr(0, 2), "{\n");
  EXPECT_EQ(import_text(json, "c.json", {}).format, Format::chakra_json);
  EXPECT_THAT(error_of(json.substr(0, 200), "c.json"), HasSubstr("not valid JSON"));
}

// --- Writing and reading back ---------------------------------------------------------------

TEST(ChakraEt, EveryZooModelRoundTrips) {
  const std::vector<zoo::ModelInfo> models = zoo::list_models();
  ASSERT_FALSE(models.empty());
  for (const zoo::ModelInfo& model : models) {
    SCOPED_TRACE(model.name);
    const traces::Trace trace = zoo_trace(model.name);
    const std::string et = trace_to_chakra_et(trace);
    const ImportResult back = import_text(et, model.name + ".et", {});
    EXPECT_EQ(back.format, Format::chakra_et);
    EXPECT_TRUE(back.trace == trace);  // ops, tensors, shapes, FLOPs, bytes, metadata, name, batch
    EXPECT_TRUE(traces::trace_to_json(back.trace) == traces::trace_to_json(trace));
    // The zoo measures nothing: that is all an exported trace lacks.
    EXPECT_EQ(back.missing, std::vector<std::string>{"durations (duration_micros): the op-time model estimates every op"});
    // Its JSON form (chakra_jsonizer's output) imports to the same trace: one importer.
    const ImportResult via_json = import_text(chakra_et_to_json(et, "x.et"), model.name + ".json", {});
    EXPECT_EQ(via_json.format, Format::chakra_json);
    EXPECT_TRUE(via_json.trace == trace);
  }
}

// Measured durations, a host-synchronising op, view tensors, value features and gradient
// statistics survive too, and Chakra's own fields are filled for Chakra's tools.
TEST(ChakraEt, MeasuredDurationsAndTensorDetailsRoundTrip) {
  traces::Trace base = zoo_trace("resnet18", 4);
  std::vector<traces::Tensor> tensors = fresh(base.tensors());
  std::vector<traces::Op> ops = base.ops();
  ops[0].measured = traces::MeasuredDuration{1.2345678901234567e-4, "NVIDIA H100 80GB HBM3", 4};
  ops[3].measured = traces::MeasuredDuration{0.0, "cpu", 1};
  ops[1].after.push_back(0);
  ops[2].host_sync = true;  // the comptrain.host_sync attribute
  for (auto& t : tensors) {
    if (t.role == traces::TensorRole::activation && t.values == traces::ValueFeatures{}) {
      t.values = traces::ValueFeatures{0.5, 0.125, 0.25, 0.1, 3.75};
      break;
    }
  }
  const traces::Trace trace(base.name(), base.batch_size(), tensors, ops, base.metadata());
  const std::string et = trace_to_chakra_et(trace);
  const ImportResult back = import_text(et, "m.et", {});
  EXPECT_TRUE(back.trace == trace);
  EXPECT_TRUE(back.missing.empty());
  EXPECT_TRUE(back.trace.rescaled(16) == trace.rescaled(16));

  const auto doc = nlohmann::json::parse(chakra_et_to_json(et, "m.et"));
  const auto& node = doc.at("nodes").at(0);
  EXPECT_EQ(node.at("type"), "COMP_NODE");
  EXPECT_EQ(node.at("duration_micros"), "123");  // uint64 in protobuf's JSON mapping: a string
  EXPECT_EQ(node.at("id"), std::to_string(trace.op(0).id));
  const auto& attrs = node.at("attr");
  const auto num_ops = std::find_if(attrs.begin(), attrs.end(), [](const auto& a) { return a.at("name") == "num_ops"; });
  ASSERT_NE(num_ops, attrs.end());
  EXPECT_EQ(num_ops->at("int64_val"), std::to_string(trace.flops(0)));
  const auto inputs = nlohmann::json::parse(node.at("inputs").at("values").get<std::string>());
  ASSERT_EQ(inputs.size(), trace.op(0).inputs.size());
  EXPECT_EQ(inputs[0][0], trace.tensor(trace.op(0).inputs[0]).id);
  EXPECT_EQ(inputs[0][3], trace.tensor(trace.op(0).inputs[0]).elements());
  // data_deps: the producers of op 2's inputs.
  const auto& deps = doc.at("nodes").at(2).at("data_deps");
  for (const auto t : trace.op(2).inputs) {
    if (const auto p = trace.tensor(t).producer) {
      EXPECT_NE(std::find(deps.begin(), deps.end(), std::to_string(trace.op(*p).id)), deps.end());
    }
  }
}

TEST(ChakraEt, RecordedNameAndBatchAreKeptUnlessNamed) {
  const traces::Trace trace = zoo_trace("alexnet", 3);
  const std::string et = trace_to_chakra_et(trace);
  EXPECT_EQ(import_text(et, "other.et", {}).trace.name(), trace.name());
  ImportOptions named;
  named.name = "renamed";
  EXPECT_EQ(import_text(et, "other.et", named).trace.name(), "renamed");
  EXPECT_EQ(import_text(et, "other.et", {}).trace.batch_size(), 3);
}

// --- Corrupt files: exit 2 (InputError) naming the file and the byte offset -----------------

TEST(ChakraEt, CorruptFilesNameTheByteOffset) {
  const std::string good = read("chakra.et");
  const std::size_t meta = static_cast<std::size_t>(good[0]) + 1;  // the metadata message, prefix included
  struct Case {
    std::string file, message;
  };
  const std::string first_node_end = std::to_string(meta + static_cast<std::size_t>(good[meta]) + 1);
  for (const Case& c : {
           Case{"corrupt_et_truncated_prefix.et", ": byte " + std::to_string(meta) + ": the file ends inside the length prefix of Node message 1"},
           Case{"corrupt_et_truncated.et", "Node message 5 is declared"},
           Case{"corrupt_et_bad_message.et", ": byte " + first_node_end + ": Node message 2 (2 bytes) does not parse"},
           Case{"corrupt_et_missing_parent.et", "(node message 3): /nodes/2/data_deps/0: no node has id 99"},
           Case{"corrupt_et_missing_tensor.et", "(node message 1): /nodes/0/inputs/values[0]: no tensor has id 7"},
           Case{"corrupt_et_gzip.et", ": byte 0: the file is gzip-compressed"},
       }) {
    SCOPED_TRACE(c.file);
    std::string what;
    try {
      import_file(kDir + c.file, {});
      what = "no error";
    } catch (const InputError& e) {
      what = e.what();
    }
    EXPECT_THAT(what, HasSubstr(kDir + c.file + ": "));
    EXPECT_THAT(what, HasSubstr(c.message));
    EXPECT_THAT(what, HasSubstr("byte "));
  }
  // The truncated file's last node starts where the others end.
  std::size_t offset = 0;
  for (int k = 0; k < 5; ++k) offset += static_cast<std::size_t>(good[offset]) + 1;
  EXPECT_THAT(error_of(good.substr(0, good.size() - 5), "t.et", as_et()),
              HasSubstr("t.et: byte " + std::to_string(offset) + ": Node message 5 is declared"));
  EXPECT_THAT(error_of("", "e.et", as_et()), HasSubstr("e.et: byte 0: the file is empty"));
  // A length prefix past 32 bits (Chakra writes varint32).
  EXPECT_THAT(error_of(std::string("\xff\xff\xff\xff\x7f", 5), "l.et", as_et()),
              HasSubstr("l.et: byte 0: the length prefix of the GlobalMetadata message is longer than 32 bits"));
}

// A Chakra trace of no node imported as a trace of no op, which `simulate` said FITS in 0 s
// (shared/defects-2/16): refused at /nodes, in the binary form at the byte where a node would be.
TEST(ChakraEt, NoNodesIsRefusedAtImport) {
  EXPECT_EQ(error_of(R"({"nodes": []})", "empty.json"),
            "empty.json: /nodes: no nodes; expected at least one Chakra node (a trace of no op has nothing to simulate)");
  EXPECT_EQ(error_of(std::string("\x07\x0a\x05" "0.0.4", 8), "empty.et", as_et()),
            "empty.et: byte 8 (no Node message after the global metadata): /nodes: no nodes; expected at least one Chakra node "
            "(a trace of no op has nothing to simulate)");
  // A comptrain trace of no op, written as a .et, is refused the same way.
  const std::string written = trace_to_chakra_et(traces::Trace("t", 1, {}, {}, {}));
  EXPECT_THAT(error_of(written, "t.et", as_et()), HasSubstr("/nodes: no nodes; expected at least one Chakra node"));
}

// A value nested 100,000 deep (200 KB) killed the process with SIGSEGV in the JSON form and, inside
// comptrain.tensors, in the binary one (the trace document's dump() recursed): both are refused
// at the trace reader's limit, 64 levels, before anything recurses (shared/defects-2/02).
TEST(ChakraEt, DeepNestingIsRefusedBeforeAnythingRecurses) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_THAT(error_of(R"({"nodes": [{"id": 0, "name": "a", "x": )" + deep + "}]}", "deep.json"),
              AllOf(StartsWith("deep.json: /nodes/0/x/0/0/"), HasSubstr("nested deeper than 64 levels")));
  // A long value is shown cut, not whole.
  const std::string long_id = error_of(R"({"nodes": [{"id": ")" + std::string(100000, '7') + R"(x", "name": "a"}]})", "long.json");
  EXPECT_THAT(long_id, AllOf(HasSubstr("long.json: /nodes/0/id: \"777"), HasSubstr("...")));
  EXPECT_LT(long_id.size(), 200U);
  chakra::GlobalMetadata metadata;
  metadata.set_version("0.0.4");
  const auto attr = [&](const std::string& name) {
    chakra::AttributeProto* a = metadata.add_attr();
    a->set_name(name);
    return a;
  };
  attr("comptrain.format")->set_string_val("comptrain-trace");
  attr("comptrain.name")->set_string_val("t");
  attr("comptrain.batch_size")->set_int64_val(1);
  attr("comptrain.tensors")->set_string_val(R"([{"id": 0, "x": )" + deep + "}]");
  const std::string m = metadata.SerializeAsString();
  std::string et;
  for (std::size_t n = m.size(); ; n >>= 7) {  // the varint length prefix
    et += static_cast<char>((n & 0x7f) | (n >= 0x80 ? 0x80 : 0));
    if (n < 0x80) break;
  }
  et += m;
  const std::string what = error_of(et, "deep.et", as_et());
  EXPECT_THAT(what, AllOf(StartsWith("deep.et: byte 0 (the global metadata message): /global_metadata/attr/3: "),
                          HasSubstr("comptrain.tensors is nested deeper than 64 levels in the trace (at /0/x/0/0/"),
                          HasSubstr("expected the trace format's tensors array")));
}

// A comptrain trace whose nodes break the trace format's rules is reported at the node.
TEST(ChakraEt, InvalidComptrainTraceNamesTheNode) {
  traces::Trace trace = zoo_trace("alexnet");
  std::string et = trace_to_chakra_et(trace);
  // Change the kind of the second node to one the trace format does not know.
  const std::string kind = std::string(traces::to_string(trace.op(1).kind));
  const std::size_t first = et.find("comptrain.kind");
  const std::size_t at = et.find(kind, et.find("comptrain.kind", first + 1));
  ASSERT_NE(at, std::string::npos);
  et[at] = '#';
  const std::string what = error_of(et, "k.et");
  EXPECT_THAT(what, HasSubstr("k.et: byte "));
  EXPECT_THAT(what, HasSubstr("(node message 2)"));
  EXPECT_THAT(what, HasSubstr("/ops/1/kind"));
}

// Random damage to a valid file never crashes: it is either refused (InputError) or a valid trace.
TEST(ChakraEt, TruncationsAndBitFlipsNeverCrash) {
  const std::string good = trace_to_chakra_et(zoo_trace("alexnet"));
  std::mt19937_64 random(19);
  int refused = 0, read_back = 0;
  for (int k = 0; k < 1500; ++k) {
    std::string bytes = good;
    if (k % 3 == 0) {
      bytes.resize(std::uniform_int_distribution<std::size_t>(0, good.size() - 1)(random));
    } else {
      const int flips = 1 + k % 4;
      for (int f = 0; f < flips; ++f) {
        const std::size_t at = std::uniform_int_distribution<std::size_t>(0, good.size() - 1)(random);
        bytes[at] = static_cast<char>(bytes[at] ^ (1 << (random() % 8)));
      }
    }
    try {
      const ImportResult result = import_text(bytes, "fuzz.et", as_et());
      // A valid trace: it survives the trace file format.
      EXPECT_TRUE(traces::trace_from_json(traces::trace_to_json(result.trace), "again") == result.trace);
      ++read_back;
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), HasSubstr("fuzz.et: "));
      ++refused;
    }
  }
  EXPECT_GT(refused, 500);  // truncations at least
  RecordProperty("read_back", read_back);
}

}  // namespace
}  // namespace comptrain::trace_import

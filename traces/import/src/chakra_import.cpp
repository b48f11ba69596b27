// Chakra execution traces in JSON form: what `chakra_jsonizer` prints, or protobuf's JSON
// mapping of the .et messages (field names snake_case or lowerCamelCase, 64-bit integers as
// numbers or decimal strings): {"global_metadata": {...}, "nodes": [...]} or an array of nodes.
//
// Gives: the nodes (-> ops, ids kept), their dependencies (data_deps and ctrl_deps -> `after`:
// the tensors behind data_deps are not named), exclusive durations, `num_ops` (FLOPs) and
// `tensor_size` (bytes) where present.
// Lacks: tensors (so no memory model and no saved activations), phases (guessed from names),
// batch scaling, and collectives are kept as ops of kind `other` (their comm_size is noted).
//
// A trace written by comptrain (trace_to_chakra_et; its GlobalMetadata has the attribute
// comptrain.format = "comptrain-trace") carries the rest in comptrain.* attributes
// (chakra_et.hpp): it is read back as the comptrain trace it was written from, tensors, phases,
// kinds and batch scaling included, and checked as a trace file is.

#include <algorithm>
#include <charconv>
#include <map>
#include <set>
#include <queue>
#include <string>
#include <vector>

#include "chakra_et.hpp"
#include "comptrain/support/input_error.hpp"
#include "comptrain/support/json_depth.hpp"
#include "comptrain/traces/trace_json.hpp"
#include "importers.hpp"

namespace comptrain::trace_import::detail {

namespace {

const json* field(const JsonInput& in, const json& object, const char* snake, const char* camel) {
  if (const json* v = in.find(object, snake)) return v;
  return in.find(object, camel);
}

// NodeType, by name or number (et_def.proto); newer values are kept as plain ops.
std::string node_type(const JsonInput& in, const json& value, const std::string& path) {
  static const char* const names[] = {"INVALID_NODE", "METADATA_NODE", "MEM_LOAD_NODE", "MEM_STORE_NODE",
                                      "COMP_NODE", "COMM_SEND_NODE", "COMM_RECV_NODE", "COMM_COLL_NODE",
                                      "STORAGE_NODE", "BATCH_NODE", "CHECKPOINT_NODE"};
  if (value.is_string() && !value.get_ref<const std::string&>().empty() &&
      !std::isdigit(static_cast<unsigned char>(value.get_ref<const std::string&>()[0]))) {
    return value.get<std::string>();
  }
  const std::int64_t number = in.integer(value, path);
  if (number >= 0 && number < static_cast<std::int64_t>(std::size(names))) return names[number];
  return "TYPE_" + std::to_string(number);
}

// An attribute's integer value, whatever integer case it was stored in (the comm_size pitfall:
// formats.md, astra-sim issue #224).
std::optional<std::int64_t> integer_attr(const JsonInput& in, const json& attr, const std::string& path) {
  for (const char* key : {"int64_val", "int64Val", "uint64_val", "uint64Val", "int32_val", "int32Val", "uint32_val",
                          "uint32Val", "sint64_val", "sint64Val", "fixed64_val", "fixed64Val", "sint32_val", "sint32Val"}) {
    if (const json* v = in.find(attr, key)) return in.integer(*v, child(path, key));
  }
  return std::nullopt;
}

// An attribute's value under its snake_case or lowerCamelCase key ("string_val", "stringVal").
const json* attr_value(const JsonInput& in, const json& attr, const char* snake, const char* camel) {
  if (const json* v = in.find(attr, snake)) return v;
  return in.find(attr, camel);
}

// The named attributes of a node or of the global metadata: name -> (attribute, its path).
std::map<std::string, std::pair<const json*, std::string>> attributes(const JsonInput& in, const json& object, const std::string& path) {
  std::map<std::string, std::pair<const json*, std::string>> out;
  const json* attrs = in.find(object, "attr");
  if (attrs == nullptr) return out;
  const std::string apath = child(path, "attr");
  in.array(*attrs, apath);
  for (std::size_t k = 0; k < attrs->size(); ++k) {
    const std::string kpath = child(apath, k);
    const json& attr = in.object((*attrs)[k], kpath);
    out.emplace(in.string(in.member(attr, kpath, "name"), child(kpath, "name")), std::pair{&attr, kpath});
  }
  return out;
}

// Reads comptrain's attributes; `what` says what the attribute holds, for errors.
class ComptrainAttributes {
 public:
  ComptrainAttributes(const JsonInput& in, const json& object, const std::string& path)
      : in_(in), path_(path), attrs_(attributes(in, object, path)) {}

  bool has(const char* name) const { return attrs_.count(name) > 0; }
  const auto& all() const { return attrs_; }

  std::string string(const char* name) const {
    const auto& [attr, path] = get(name);
    const json* v = attr_value(in_, *attr, "string_val", "stringVal");
    if (v == nullptr) in_.fail(path, std::string("attribute \"") + name + "\" has no string_val", "a string value");
    return in_.string(*v, child(path, "string_val"));
  }
  std::int64_t integer(const char* name) const {
    const auto& [attr, path] = get(name);
    const json* v = attr_value(in_, *attr, "int64_val", "int64Val");
    if (v == nullptr) in_.fail(path, std::string("attribute \"") + name + "\" has no int64_val", "an int64 value");
    return in_.integer(*v, child(path, "int64_val"));
  }
  double number(const char* name) const {
    const auto& [attr, path] = get(name);
    const json* v = attr_value(in_, *attr, "double_val", "doubleVal");
    if (v == nullptr) in_.fail(path, std::string("attribute \"") + name + "\" has no double_val", "a double value");
    return in_.number(*v, child(path, "double_val"));
  }
  // An int64 list of two entries [fixed, per_sample], as the trace format's BatchLinear object.
  json batch_linear(const char* name) const {
    const auto& [attr, path] = get(name);
    const json* list = attr_value(in_, *attr, "int64_list", "int64List");
    const std::string lpath = child(path, "int64_list");
    if (list == nullptr) in_.fail(path, std::string("attribute \"") + name + "\" has no int64_list", "an int64 list [fixed, per_sample]");
    const json* values = in_.find(in_.object(*list, lpath), "values");
    const std::string vpath = child(lpath, "values");
    if (values == nullptr || !values->is_array() || values->size() != 2) {
      in_.fail(vpath, "not a list of two integers", "[fixed, per_sample]");
    }
    return json{{"fixed", in_.integer((*values)[0], child(vpath, 0))}, {"per_sample", in_.integer((*values)[1], child(vpath, 1))}};
  }

 private:
  const std::pair<const json*, std::string>& get(const char* name) const {
    const auto it = attrs_.find(name);
    if (it == attrs_.end()) in_.fail(child(path_, "attr"), std::string("no attribute \"") + name + "\"", "the attributes comptrain writes");
    return it->second;
  }

  const JsonInput& in_;
  std::string path_;
  std::map<std::string, std::pair<const json*, std::string>> attrs_;
};

// The tensor ids of a node's inputs or outputs: IOInfo.values is a list with one entry per
// operand, [tensor_id, storage_id, offset, elements, element_bytes, device] as Chakra's PyTorch
// converter writes tensors; comptrain reads the tensor id.
json operand_ids(const JsonInput& in, const json& node, const std::string& path, const char* field, const std::set<std::uint64_t>& tensors) {
  json ids = json::array();
  const json* io = in.find(node, field);
  if (io == nullptr) return ids;
  const std::string iopath = child(path, field);
  const json* values = in.find(in.object(*io, iopath), "values");
  if (values == nullptr) return ids;
  const std::string vpath = child(iopath, "values");
  const std::string text = in.string(*values, vpath);
  if (text.empty()) return ids;
  const json list = json::parse(text, nullptr, false);
  if (list.is_discarded() || !list.is_array()) in.fail(vpath, "not a list", "a JSON list of [tensor_id, storage_id, offset, elements, element_bytes, device]");
  for (std::size_t k = 0; k < list.size(); ++k) {
    const std::string epath = vpath + "[" + std::to_string(k) + "]";
    if (!list[k].is_array() || list[k].empty()) in.fail(epath, "not a tensor entry", "[tensor_id, storage_id, offset, elements, element_bytes, device]");
    const std::uint64_t id = in.id(list[k][0], epath + "[0]");
    if (tensors.count(id) == 0) in.fail(epath, "no tensor has id " + std::to_string(id), "the id of a tensor in the comptrain.tensors table");
    ids.push_back(id);
  }
  return ids;
}

// A .et (or its JSON form) written by trace_to_chakra_et: the comptrain trace it was written
// from, read through the trace format's reader so that it is checked as a trace file is.
ImportResult import_comptrain(const json& document, const JsonInput& in, const ImportOptions& options, const json& meta,
                              const std::string& meta_path) {
  const ComptrainAttributes global(in, meta, meta_path);
  json trace{{"format", traces::kTraceFormatName}, {"version", traces::kTraceFormatVersion}};
  trace["name"] = options.name.empty() ? global.string(chakra_attr::kName) : options.name;
  trace["batch_size"] = global.integer(chakra_attr::kBatchSize);
  json metadata = json::object();
  for (const auto& [name, attr] : global.all()) {
    if (name.rfind(chakra_attr::kMetadataPrefix, 0) == 0) metadata[name.substr(chakra_attr::kMetadataPrefix.size())] = global.string(name.c_str());
  }
  trace["metadata"] = std::move(metadata);
  const std::string tensors_text = global.string(chakra_attr::kTensors);
  json tensors = json::parse(tensors_text, nullptr, false);
  const std::string tensors_path = global.all().at(chakra_attr::kTensors).second;
  if (tensors.is_discarded() || !tensors.is_array()) in.fail(tensors_path, "comptrain.tensors is not a JSON array", "the trace format's tensors array");
  // The array becomes /tensors of the trace document, one level below its root: checked before
  // anything copies, prints or compares it (that recurses; 100,000 levels overflowed the stack).
  if (const auto deep = json_nested_deeper_than(tensors, kMaxJsonDepth - 1)) {
    in.fail(tensors_path, "comptrain.tensors is nested deeper than " + std::to_string(kMaxJsonDepth) + " levels in the trace (at " +
                              deep->substr(0, std::min<std::size_t>(deep->size(), 24)) + (deep->size() > 24 ? "..." : "") + ")",
            "the trace format's tensors array, which nests 4 levels");
  }
  std::set<std::uint64_t> tensor_ids;
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    const std::string tpath = tensors_path + "/string_val[" + std::to_string(k) + "]";
    tensor_ids.insert(in.id(in.member(tensors[k], tpath, "id"), child(tpath, "id")));
  }
  trace["tensors"] = std::move(tensors);

  const json& nodes = in.array(in.member(document, "", "nodes"), "/nodes");
  if (nodes.empty()) in.fail("/nodes", "no nodes", "at least one Chakra node (a trace of no op has nothing to simulate)");
  std::set<std::uint64_t> node_ids;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    node_ids.insert(in.id(in.member(in.object(nodes[i], child("/nodes", i)), child("/nodes", i), "id"), child(child("/nodes", i), "id")));
  }
  json ops = json::array();
  bool any_duration = false;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const std::string path = child("/nodes", i);
    const json& node = nodes[i];
    const ComptrainAttributes attrs(in, node, path);
    json op{{"id", in.id(node.at("id"), child(path, "id"))}, {"name", in.string(in.member(node, path, "name"), child(path, "name"))}};
    op["phase"] = attrs.string(chakra_attr::kPhase);
    op["kind"] = attrs.string(chakra_attr::kKind);
    op["inputs"] = operand_ids(in, node, path, "inputs", tensor_ids);
    op["outputs"] = operand_ids(in, node, path, "outputs", tensor_ids);
    json after = json::array();
    for (const auto& [snake, camel] : {std::pair{"data_deps", "dataDeps"}, std::pair{"ctrl_deps", "ctrlDeps"}}) {
      const json* list = field(in, node, snake, camel);
      if (list == nullptr) continue;
      const std::string lpath = child(path, snake);
      in.array(*list, lpath);
      for (std::size_t k = 0; k < list->size(); ++k) {
        const std::uint64_t dep = in.id((*list)[k], child(lpath, k));
        if (node_ids.count(dep) == 0) in.fail(child(lpath, k), "no node has id " + std::to_string(dep), "the id of a node in the trace");
        // data_deps follow from the tensors (their producers); ctrl_deps are the trace's `after`.
        if (std::string_view(snake) == "ctrl_deps") after.push_back(dep);
      }
    }
    if (!after.empty()) op["after"] = std::move(after);
    op["flops"] = attrs.batch_linear(chakra_attr::kFlops);
    op["bytes_read"] = attrs.batch_linear(chakra_attr::kBytesRead);
    op["bytes_written"] = attrs.batch_linear(chakra_attr::kBytesWritten);
    if (attrs.has(chakra_attr::kMeasuredSeconds)) {
      op["measured"] = json{{"seconds", attrs.number(chakra_attr::kMeasuredSeconds)},
                            {"device", attrs.string(chakra_attr::kMeasuredDevice)},
                            {"batch_size", attrs.integer(chakra_attr::kMeasuredBatchSize)}};
      any_duration = true;
    }
    if (attrs.has(chakra_attr::kHostSync)) op["host_sync"] = attrs.integer(chakra_attr::kHostSync) != 0;
    ops.push_back(std::move(op));
  }
  trace["ops"] = std::move(ops);

  // Errors of the trace format's reader point into the document built here: /ops/N is node N,
  // /tensors/... the comptrain.tensors attribute; say where that is in the input.
  const std::string source = in.source() + ": the comptrain trace it holds";
  try {
    ImportResult result{Format::chakra_json, traces::trace_from_json(trace.dump(), source), {}, {}};
    if (!any_duration) result.missing.push_back("durations (duration_micros): the op-time model estimates every op");
    return result;
  } catch (const InputError& e) {
    std::string rest = e.what();
    if (rest.rfind(source + ": ", 0) == 0) rest.erase(0, source.size() + 2);
    std::string where;
    if (rest.rfind("/ops/", 0) == 0) {
      std::size_t index = 0;
      const auto [end, ec] = std::from_chars(rest.data() + 5, rest.data() + rest.size(), index);
      if (ec == std::errc()) where = in.locate(child("/nodes", index));
      (void)end;
    } else if (rest.rfind("/tensors", 0) == 0) {
      where = in.locate(meta_path);
      where += (where.empty() ? "" : ": ") + tensors_path + " (comptrain.tensors)";
    }
    throw InputError(in.source() + ": " + (where.empty() ? std::string() : where + ": ") + "the comptrain trace it holds: " + rest);
  }
}

}  // namespace

ImportResult import_chakra(const json& document, const JsonInput& in, const ImportOptions& options_in, const std::string& default_name,
                           Format format) {
  if (document.is_object()) {
    const char* key = in.find(document, "global_metadata") ? "global_metadata" : "globalMetadata";
    if (const json* meta = in.find(document, key); meta && meta->is_object()) {
      const std::string meta_path = child("", key);
      const auto attrs = attributes(in, *meta, meta_path);
      if (const auto it = attrs.find(chakra_attr::kFormat); it != attrs.end()) {
        const json* v = attr_value(in, *it->second.first, "string_val", "stringVal");
        if (v != nullptr && v->is_string() && *v == traces::kTraceFormatName) {
          ImportResult result = import_comptrain(document, in, options_in, *meta, meta_path);
          result.format = format;
          return result;
        }
      }
    }
  }
  ImportOptions options = options_in;
  if (options.name.empty()) options.name = default_name;
  const bool bare = document.is_array();
  const std::string nodes_path = bare ? "" : "/nodes";
  const json& nodes = in.array(bare ? document : in.member(document, "", "nodes"), nodes_path);
  if (nodes.empty()) in.fail(nodes_path, "no nodes", "at least one Chakra node (a trace of no op has nothing to simulate)");

  std::vector<traces::Op> ops;
  std::vector<std::vector<std::pair<std::uint64_t, std::string>>> deps(nodes.size());  // (id, path)
  std::map<std::uint64_t, std::size_t> position;
  bool any_duration = false, any_flops = false, any_comm = false;
  std::int64_t comm_bytes = 0;
  const std::string device = options.device.empty() ? "unknown (Chakra trace)" : options.device;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const std::string path = child(nodes_path, i);
    const json& node = in.object(nodes[i], path);
    traces::Op op;
    op.id = in.id(in.member(node, path, "id"), child(path, "id"));
    if (!position.emplace(op.id, i).second) in.fail(child(path, "id"), "duplicate node id " + std::to_string(op.id), "ids unique within the rank");
    op.name = in.string(in.member(node, path, "name"), child(path, "name"));
    std::string type = "COMP_NODE";
    if (const json* t = in.find(node, "type")) type = node_type(in, *t, child(path, "type"));
    op.kind = type == "COMP_NODE" ? kind_from_name(op.name) : traces::OpKind::other;
    op.phase = phase_from_name(op.name);
    if (op.phase == traces::Phase::optimizer) op.kind = traces::OpKind::optimizer_update;
    for (const auto& [snake, camel] : {std::pair{"data_deps", "dataDeps"}, std::pair{"ctrl_deps", "ctrlDeps"}}) {
      if (const json* list = field(in, node, snake, camel)) {
        const std::string lpath = child(path, list == in.find(node, snake) ? snake : camel);
        in.array(*list, lpath);
        for (std::size_t k = 0; k < list->size(); ++k) deps[i].emplace_back(in.id((*list)[k], child(lpath, k)), child(lpath, k));
      }
    }
    if (const json* d = field(in, node, "duration_micros", "durationMicros")) {
      const std::string dpath = child(path, d == in.find(node, "duration_micros") ? "duration_micros" : "durationMicros");
      op.measured = traces::MeasuredDuration{static_cast<double>(in.non_negative(*d, dpath)) * 1e-6, device, options.batch_size};
      any_duration = true;
    }
    if (const json* attrs = in.find(node, "attr")) {
      const std::string apath = child(path, "attr");
      in.array(*attrs, apath);
      for (std::size_t k = 0; k < attrs->size(); ++k) {
        const std::string kpath = child(apath, k);
        const json& attr = in.object((*attrs)[k], kpath);
        const std::string name = in.string(in.member(attr, kpath, "name"), child(kpath, "name"));
        if (name != "num_ops" && name != "tensor_size" && name != "comm_size") continue;
        const auto value = integer_attr(in, attr, kpath);
        if (!value) in.fail(kpath, "attribute \"" + name + "\" has no integer value", "an integer value (int64_val, uint64_val, ...)");
        if (*value < 0) in.fail(kpath, "attribute \"" + name + "\" is negative", "a count >= 0");
        if (name == "num_ops") {
          op.flops.fixed = *value;
          any_flops = true;
        } else if (name == "tensor_size") {
          op.bytes_read.fixed = *value;
        } else {
          comm_bytes = in.add(comm_bytes, *value, kpath, "the bytes of all comm_size attributes");
        }
      }
    }
    any_comm = any_comm || type.rfind("COMM_", 0) == 0;
    ops.push_back(std::move(op));
  }

  // The ops array must be in dependency order: Kahn's algorithm, earliest listed first, so a
  // trace that is already ordered keeps its order.
  std::vector<std::vector<std::size_t>> successors(nodes.size());
  std::vector<std::size_t> pending(nodes.size(), 0);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    for (const auto& [dep, path] : deps[i]) {
      const auto it = position.find(dep);
      if (it == position.end()) in.fail(path, "no node has id " + std::to_string(dep), "the id of a node in the trace");
      if (it->second == i) in.fail(path, "node depends on itself", "a dependency on another node");
      successors[it->second].push_back(i);
      ++pending[i];
    }
  }
  std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> ready;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (pending[i] == 0) ready.push(i);
  }
  std::vector<std::size_t> order;
  while (!ready.empty()) {
    const std::size_t i = ready.top();
    ready.pop();
    order.push_back(i);
    for (const std::size_t s : successors[i]) {
      if (--pending[s] == 0) ready.push(s);
    }
  }
  if (order.size() != nodes.size()) {
    const auto stuck = std::find_if(pending.begin(), pending.end(), [](std::size_t p) { return p > 0; });
    in.fail(child(nodes_path, static_cast<std::size_t>(stuck - pending.begin())), "the dependencies form a cycle", "an acyclic graph");
  }
  std::vector<std::size_t> new_index(nodes.size());
  for (std::size_t k = 0; k < order.size(); ++k) new_index[order[k]] = k;
  std::vector<traces::Op> sorted;
  for (const std::size_t i : order) {
    traces::Op op = std::move(ops[i]);
    for (const auto& [dep, path] : deps[i]) op.after.push_back(new_index[position.at(dep)]);
    std::sort(op.after.begin(), op.after.end());
    op.after.erase(std::unique(op.after.begin(), op.after.end()), op.after.end());
    sorted.push_back(std::move(op));
  }

  std::vector<MemoryTimeline> memory;
  std::vector<std::string> missing;
  missing.push_back("tensors: data_deps name no tensors, so they become control dependencies (after) and no memory or saved activations are modelled");
  missing.push_back("phases: guessed from op names (backward, optimizer)");
  missing.push_back("batch scaling: the batch size is not recorded (taken as " + std::to_string(options.batch_size) + ", --batch) and every quantity is fixed");
  if (!any_duration) missing.push_back("durations (duration_micros): the op-time model estimates every op");
  if (!any_flops) missing.push_back("FLOPs (num_ops)");
  if (any_comm) missing.push_back("communication: collectives and send/recv are kept as ops of kind other; their " + std::to_string(comm_bytes) + " bytes (comm_size) are not simulated");
  std::map<std::string, std::string> metadata{{"source", std::string(to_string(format))}, {"imported_from", in.source()}};
  if (!bare) {
    if (const json* meta = field(in, document, "global_metadata", "globalMetadata"); meta && meta->is_object()) {
      if (const json* version = in.find(*meta, "version"); version && version->is_string()) metadata["chakra_version"] = version->get<std::string>();
    }
  }
  return ImportResult{format, traces::Trace(options.name, options.batch_size, {}, std::move(sorted), std::move(metadata)), std::move(memory), std::move(missing)};
}

}  // namespace comptrain::trace_import::detail

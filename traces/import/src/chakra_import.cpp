// Chakra execution traces in JSON form: what `chakra_jsonizer` prints, or protobuf's JSON
// mapping of the .et messages (field names snake_case or lowerCamelCase, 64-bit integers as
// numbers or decimal strings): {"global_metadata": {...}, "nodes": [...]} or an array of nodes.
//
// Gives: the nodes (-> ops, ids kept), their dependencies (data_deps and ctrl_deps -> `after`:
// the tensors behind data_deps are not named), exclusive durations, `num_ops` (FLOPs) and
// `tensor_size` (bytes) where present.
// Lacks: tensors (so no memory model and no saved activations), phases (guessed from names),
// batch scaling, and collectives are kept as ops of kind `other` (their comm_size is noted).

#include <algorithm>
#include <map>
#include <queue>
#include <string>
#include <vector>

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

}  // namespace

ImportResult import_chakra(const json& document, const JsonInput& in, const ImportOptions& options) {
  const bool bare = document.is_array();
  const std::string nodes_path = bare ? "" : "/nodes";
  const json& nodes = in.array(bare ? document : in.member(document, "", "nodes"), nodes_path);

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
  std::map<std::string, std::string> metadata{{"source", "chakra-json"}, {"imported_from", in.source()}};
  if (!bare) {
    if (const json* meta = field(in, document, "global_metadata", "globalMetadata"); meta && meta->is_object()) {
      if (const json* version = in.find(*meta, "version"); version && version->is_string()) metadata["chakra_version"] = version->get<std::string>();
    }
  }
  return ImportResult{Format::chakra_json, traces::Trace(options.name, options.batch_size, {}, std::move(sorted), std::move(metadata)), std::move(memory), std::move(missing)};
}

}  // namespace comptrain::trace_import::detail

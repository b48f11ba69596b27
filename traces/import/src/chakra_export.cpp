// A comptrain trace as a Chakra execution trace (.et): what `comptrain trace export --format
// chakra` writes. The file is what Chakra's tools read (encode_message's layout: each message
// preceded by its length as a varint), with every op a COMP_NODE whose standard fields are
// filled for them, and comptrain's own attributes (chakra_et.hpp) for the rest, so that the
// import gives back the same trace. traces/README.md, "Chakra's binary trace (.et)", lists the mapping.

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chakra_et.hpp"
#include "proto/chakra_et.pb.h"
#include "comptrain/trace_import/import.hpp"
#include "comptrain/traces/trace_json.hpp"

namespace comptrain::trace_import {

namespace {

// The Chakra schema version whose field numbers proto/chakra_et.proto follows (et_def.proto at
// the commit cited there; Chakra's own JSON fixtures give "0.0.4").
constexpr const char* kChakraSchemaVersion = "0.0.4";

// PyTorch's execution-trace type names, as Chakra's converter reads them (its
// src/converter/pytorch_node.py maps them to element sizes).
const char* pytorch_type(traces::DType dtype) {
  switch (dtype) {
    case traces::DType::f64: return "Tensor(double)";
    case traces::DType::f32: return "Tensor(float)";
    case traces::DType::f16: return "Tensor(c10::Half)";
    case traces::DType::bf16: return "Tensor(c10::BFloat16)";
    case traces::DType::i64: return "Tensor(long int)";
    case traces::DType::i32: return "Tensor(int)";
    case traces::DType::i8: return "Tensor(int8)";
    case traces::DType::u8: return "Tensor(unsigned char)";
    case traces::DType::boolean: return "Tensor(bool)";
  }
  return "Tensor(unknown)";
}

chakra::AttributeProto& add(google::protobuf::RepeatedPtrField<chakra::AttributeProto>& attrs, const std::string& name) {
  chakra::AttributeProto& attr = *attrs.Add();
  attr.set_name(name);
  return attr;
}

void add_batch_linear(chakra::Node& node, const char* name, const traces::BatchLinear& value) {
  auto* list = add(*node.mutable_attr(), name).mutable_int64_list();
  list->add_values(value.fixed);
  list->add_values(value.per_sample);
}

// IOInfo as Chakra's PyTorch converter fills it: Python-literal lists (here also valid JSON) of
// [tensor_id, storage_id, offset, elements, element_bytes, device], the shapes and the types.
// The storage id is that of the tensor owning the storage; offsets and devices are not in a
// comptrain trace (0 and "").
void fill_operands(const traces::Trace& trace, const std::vector<traces::TensorIndex>& operands, chakra::IOInfo& io) {
  nlohmann::json values = nlohmann::json::array(), shapes = nlohmann::json::array(), types = nlohmann::json::array();
  for (const traces::TensorIndex t : operands) {
    const traces::Tensor& tensor = trace.tensors()[t];
    const traces::Tensor& storage = trace.tensors()[trace.storage_of(t)];
    values.push_back({tensor.id, storage.id, 0, tensor.elements(), traces::element_size(tensor.dtype), ""});
    shapes.push_back(tensor.shape);
    types.push_back(pytorch_type(tensor.dtype));
  }
  io.set_values(values.dump());
  io.set_shapes(shapes.dump());
  io.set_types(types.dump());
}

void write_delimited(const google::protobuf::MessageLite& message, std::string& out) {
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.WriteVarint32(static_cast<std::uint32_t>(message.ByteSizeLong()));
  message.SerializeWithCachedSizes(&coded);
}

}  // namespace

std::string trace_to_chakra_et(const traces::Trace& trace) {
  namespace attr = detail::chakra_attr;
  // The tensors as the trace format writes them (ids, shapes, roles, batch dimensions, views,
  // value features, gradient statistics): the one place they are all defined.
  const nlohmann::json file = nlohmann::json::parse(traces::trace_to_json(trace, -1));

  chakra::GlobalMetadata metadata;
  metadata.set_version(kChakraSchemaVersion);
  add(*metadata.mutable_attr(), attr::kFormat).set_string_val(std::string(traces::kTraceFormatName));
  add(*metadata.mutable_attr(), attr::kName).set_string_val(trace.name());
  add(*metadata.mutable_attr(), attr::kBatchSize).set_int64_val(trace.batch_size());
  for (const auto& [key, value] : trace.metadata()) {
    add(*metadata.mutable_attr(), std::string(attr::kMetadataPrefix) + key).set_string_val(value);
  }
  add(*metadata.mutable_attr(), attr::kTensors).set_string_val(file.at("tensors").dump());

  std::string out;
  write_delimited(metadata, out);
  const auto& ops = trace.ops();
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const traces::Op& op = ops[i];
    chakra::Node node;
    node.set_id(op.id);
    node.set_name(op.name);
    node.set_type(chakra::COMP_NODE);
    for (const traces::OpIndex a : op.after) node.add_ctrl_deps(ops[a].id);
    // data_deps: the producers of the inputs, each once, as Chakra's converter links data flow.
    std::vector<std::uint64_t> producers;
    for (const traces::TensorIndex t : op.inputs) {
      const auto producer = trace.tensors()[t].producer;
      if (!producer || *producer == i) continue;
      const std::uint64_t id = ops[*producer].id;
      if (std::find(producers.begin(), producers.end(), id) == producers.end()) producers.push_back(id);
    }
    for (const std::uint64_t id : producers) node.add_data_deps(id);
    if (op.measured) node.set_duration_micros(static_cast<std::uint64_t>(std::llround(op.measured->seconds * 1e6)));
    fill_operands(trace, op.inputs, *node.mutable_inputs());
    fill_operands(trace, op.outputs, *node.mutable_outputs());
    // Chakra's own attributes at the trace's batch size (ASTRA-sim reads num_ops and
    // tensor_size; the Chakra JSON import reads them as FLOPs and bytes read).
    add(*node.mutable_attr(), "num_ops").set_int64_val(trace.flops(i));
    add(*node.mutable_attr(), "tensor_size").set_uint64_val(static_cast<std::uint64_t>(trace.bytes_read(i)));
    add(*node.mutable_attr(), attr::kPhase).set_string_val(std::string(traces::to_string(op.phase)));
    add(*node.mutable_attr(), attr::kKind).set_string_val(std::string(traces::to_string(op.kind)));
    add_batch_linear(node, attr::kFlops, op.flops);
    add_batch_linear(node, attr::kBytesRead, op.bytes_read);
    add_batch_linear(node, attr::kBytesWritten, op.bytes_written);
    if (op.measured) {
      add(*node.mutable_attr(), attr::kMeasuredSeconds).set_double_val(op.measured->seconds);
      add(*node.mutable_attr(), attr::kMeasuredDevice).set_string_val(op.measured->device);
      add(*node.mutable_attr(), attr::kMeasuredBatchSize).set_int64_val(op.measured->batch_size);
    }
    if (op.host_sync) add(*node.mutable_attr(), attr::kHostSync).set_int64_val(1);
    write_delimited(node, out);
  }
  return out;
}

}  // namespace comptrain::trace_import

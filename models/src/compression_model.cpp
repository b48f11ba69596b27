#include "comptrain/models/compression_model.hpp"

#include <algorithm>

#include "comptrain/models/strategy.hpp"

namespace comptrain::models {

std::string_view to_string(Provenance p) {
  switch (p) {
    case Provenance::measured: return "measured";
    case Provenance::literature: return "literature";
    case Provenance::assumed: return "assumed";
  }
  return "?";
}

std::optional<Provenance> parse_provenance(std::string_view text) {
  for (Provenance p : {Provenance::measured, Provenance::literature, Provenance::assumed}) {
    if (to_string(p) == text) return p;
  }
  return std::nullopt;
}

std::string_view to_string(TensorClass c) {
  switch (c) {
    case TensorClass::post_relu: return "post_relu";
    case TensorClass::batchnorm: return "batchnorm";
    case TensorClass::gelu: return "gelu";
    case TensorClass::linear: return "linear";
    case TensorClass::generic: return "generic";
  }
  return "?";
}

std::optional<TensorClass> parse_tensor_class(std::string_view text) {
  for (TensorClass c : kTensorClasses) {
    if (to_string(c) == text) return c;
  }
  return std::nullopt;
}

const RatioModel& CodecProfile::ratio_model(TensorClass c) const {
  if (auto it = ratio.find(c); it != ratio.end()) return it->second;
  return ratio.at(TensorClass::generic);
}

const CodecProfile* CalibrationProfile::find(std::string_view codec) const {
  auto it = std::find_if(codecs.begin(), codecs.end(), [&](const CodecProfile& p) { return p.codec == codec; });
  return it == codecs.end() ? nullptr : &*it;
}

TensorClass tensor_class_of_op(traces::OpKind kind) {
  switch (kind) {
    case traces::OpKind::relu: return TensorClass::post_relu;
    case traces::OpKind::batchnorm: return TensorClass::batchnorm;
    case traces::OpKind::gelu: return TensorClass::gelu;
    case traces::OpKind::linear:
    case traces::OpKind::matmul: return TensorClass::linear;
    default: return TensorClass::generic;
  }
}

}  // namespace comptrain::models

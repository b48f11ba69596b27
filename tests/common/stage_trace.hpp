#pragma once
// One pipeline stage of a scenario's zoo model at batch 1: layers [first_layer, first_layer +
// layers), with the embedding on the first stage and the head on the last (zoo::PipelineStageSpec).

#include <cstdint>

#include "comptrain/sim/config/scenario.hpp"
#include "comptrain/traces/trace.hpp"
#include "comptrain/zoo/zoo.hpp"

namespace comptrain::test_support {

inline traces::Trace stage_trace(const sim::Scenario& s, std::int64_t first_layer, std::int64_t layers) {
  zoo::ModelRequest request;
  static_cast<zoo::ModelSpec&>(request) = *s.zoo_model;
  request.batch_size = 1;
  const std::int64_t total = zoo::model_dimensions(request).layers;
  request.pipeline_stage = zoo::PipelineStageSpec{first_layer, layers, first_layer == 0, first_layer + layers == total};
  return zoo::build_model(request);
}

}  // namespace comptrain::test_support

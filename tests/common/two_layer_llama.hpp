#pragma once
// The two-layer LLaMA the data-parallel tests count by hand (fsdp_test.cpp,
// fsdp_offload_test.cpp, sharded_accumulation_test.cpp): hidden 64, 4 heads (as many key-value
// heads), the zoo's intermediate size for it (256), vocabulary 100, untied embeddings, sequence
// 32, batch 2, `mixed` precision, AdamW, the flash kernel; FSDP2 over its decoder layers as
// torchtitan applies it; and a schedule's buffers by name.

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "comptrain/models/data_parallel.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/zoo/zoo.hpp"

namespace comptrain::test_support {

inline traces::Trace two_layer_llama(zoo::OptimizerImpl impl = zoo::OptimizerImpl::foreach) {
  zoo::ModelRequest request;
  request.model = "llama";
  request.layers = 2;
  request.hidden = 64;
  request.heads = 4;
  request.vocab = 100;
  request.seq_len = 32;
  request.batch_size = 2;
  request.precision = zoo::Precision::mixed;
  request.optimizer = zoo::Optimizer::adamw;
  request.optimizer_impl = impl;
  request.attention = zoo::Attention::flash;
  return zoo::build_model(request);
}

// FSDP2 on `ranks` ranks: fully_shard on each decoder layer, fp32 shards and reduce-scatters.
inline models::DataParallelSpec fsdp_over_layers(int ranks, models::FsdpSpec::Reshard reshard = models::FsdpSpec::Reshard::all_but_last) {
  models::DataParallelSpec spec;
  spec.ranks = ranks;
  spec.zero_stage = 3;
  models::FsdpSpec f;
  f.units = {"model.layers.*"};
  f.reshard_after_forward = reshard;  // all_but_last: torchtitan's
  f.sharded_parameter_bytes = 4;
  f.reduce_bytes = 4;
  spec.fsdp = f;
  return spec;
}

inline std::optional<models::BufferId> find_buffer(const models::Schedule& s, const std::string& name) {
  for (models::BufferId b = 0; b < s.buffers.size(); ++b) {
    if (s.buffers[b].name == name) return b;
  }
  return std::nullopt;
}

// The buffer of that name; a test failure (and buffer 0) when there is none.
inline models::BufferId buffer(const models::Schedule& s, const std::string& name) {
  const auto b = find_buffer(s, name);
  if (!b) ADD_FAILURE() << "no buffer " << name;
  return b.value_or(0);
}

}  // namespace comptrain::test_support

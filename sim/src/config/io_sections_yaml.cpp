// The data and checkpoint sections: the input pipeline and checkpoints (config/data_loader.hpp, config/checkpoint.hpp).

#include "config/scenario_reader.hpp"

#include <string>
#include <vector>

namespace comptrain::sim {

DataSpec ScenarioReader::read_data(const YAML::Node& node) const {
  require_map(node, "data");
  check_keys(node, "data", {"bytes_per_sample", "decode_per_sample", "workers_per_gpu", "prefetch_factor", "from"});
  DataSpec data;
  data.bytes_per_sample = byte_count(required(node, "bytes_per_sample", "data"), "data.bytes_per_sample");
  // 0 to 1 s per sample: decoding an ImageNet JPEG takes milliseconds; a second per sample is
  // no training input pipeline.
  data.decode_seconds_per_sample =
      bounded_quantity(required(node, "decode_per_sample", "data"), models::units::Dimension::time, "data.decode_per_sample", {0, 1});
  // At most 1024 workers per GPU and a prefetch factor of 1024: a node has ~100 cores.
  const auto small_count = [&](const char* key, int fallback) {
    const std::int64_t value = optional_positive(node, key, "data").value_or(fallback);
    if (value > 1024) throw InputError(where(node[key].Mark()) + "'data." + key + "' is " + node[key].Scalar() + "; expected at most 1024");
    return static_cast<int>(value);
  };
  data.workers_per_gpu = small_count("workers_per_gpu", 1);
  data.prefetch_factor = small_count("prefetch_factor", 2);
  if (const YAML::Node from = node["from"]) data.from = storage_tier(from, "data.from");
  data.from_position = position_of(node["from"] ? node["from"].Mark() : node.Mark());
  return data;
}

// checkpoint: {every, mode, host_cache, chunk, to, wait} (sim/checkpoint.hpp)
CheckpointSpec ScenarioReader::read_checkpoint(const YAML::Node& node) const {
  require_map(node, "checkpoint");
  check_keys(node, "checkpoint", {"every", "mode", "host_cache", "chunk", "to", "wait"});
  CheckpointSpec spec;
  const std::int64_t every = optional_positive(node, "every", "checkpoint").value_or(0);
  if (every < 1 || every > 10'000'000) {
    throw InputError(where(node["every"] ? node["every"].Mark() : node.Mark()) +
                     "'checkpoint.every' must be given: iterations between checkpoints, from 1 to 10000000");
  }
  spec.every = static_cast<int>(every);
  if (const YAML::Node mode = node["mode"]) {
    const std::string text = scalar(mode, "checkpoint.mode");
    const auto parsed = parse_checkpoint_mode(text);
    if (!parsed) throw InputError(where(mode.Mark()) + "'checkpoint.mode' is '" + text + "'; expected sync or async");
    spec.mode = *parsed;
  }
  if (const YAML::Node cache = node["host_cache"]) spec.host_cache_bytes = byte_count(cache, "checkpoint.host_cache");
  if (const YAML::Node chunk = node["chunk"]) {
    spec.chunk_bytes = byte_count(chunk, "checkpoint.chunk");
    if (spec.chunk_bytes < 1) throw InputError(where(chunk.Mark()) + "'checkpoint.chunk' is 0; expected at least 1 byte");
  }
  if (spec.host_cache_bytes > 0 && spec.host_cache_bytes < spec.chunk_bytes) {
    throw InputError(where(node["host_cache"].Mark()) + "'checkpoint.host_cache' is smaller than checkpoint.chunk (" +
                     std::to_string(spec.chunk_bytes) + " bytes); expected a cache that holds at least one chunk");
  }
  if (spec.host_cache_bytes > 0 && spec.mode == CheckpointMode::sync) {
    throw InputError(where(node["host_cache"].Mark()) + "'checkpoint.host_cache' is for mode: async; a sync checkpoint has no host cache");
  }
  if (const YAML::Node to = node["to"]) spec.to = storage_tier(to, "checkpoint.to");
  spec.to_position = position_of(node["to"] ? node["to"].Mark() : node.Mark());
  spec.mode_position = position_of(node["mode"] ? node["mode"].Mark() : node.Mark());
  if (const YAML::Node wait = node["wait"]) {
    const std::string text = scalar(wait, "checkpoint.wait");
    const auto parsed = parse_checkpoint_wait(text);
    if (!parsed) {
      throw InputError(where(wait.Mark()) + "'checkpoint.wait' is '" + text +
                       "'; expected step (the copies wait before the next optimizer step) or save (at the end of the save)");
    }
    if (spec.mode == CheckpointMode::sync) {
      throw InputError(where(wait.Mark()) + "'checkpoint.wait' is for mode: async; a sync checkpoint waits for all of its writes");
    }
    spec.wait = *parsed;
  }
  return spec;
}

StorageTier ScenarioReader::storage_tier(const YAML::Node& node, const std::string& field) const {
  const std::string text = scalar(node, field);
  const auto tier = parse_storage_tier(text);
  if (!tier) throw InputError(where(node.Mark()) + "'" + field + "' is '" + text + "'; expected shared (the parallel file system) or local (the node's disk)");
  return *tier;
}

}  // namespace comptrain::sim

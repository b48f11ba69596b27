#pragma once
// FSDP2's CPU offload (FsdpSpec::cpu_offload; models/transforms/README.md, "FSDP2's CPU offload"):
// what it keeps on the host, for reports.

#include <cstdint>

#include "comptrain/models/data_parallel.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::models {

// The host memory one rank pins under `spec`'s CPU offload: its padded shards in the sharded
// dtype (FSDPParam._init_sharded_param), their gradients in the same dtype (foreach_reduce copies
// the shard cast to the parameters' dtype), and its share of the optimizer state (the trace's
// state less the fp32 masters the shards are, as shard_fsdp_state counts it). 0 without fsdp's
// cpu_offload. Not counted: the CPU optimizer's temporaries, the process's other host memory.
std::int64_t fsdp_offload_host_bytes(const traces::Trace& trace, const DataParallelSpec& spec);

}  // namespace comptrain::models

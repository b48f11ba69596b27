#pragma once
// The name of a data-parallel mode, written once: the planner's tables use the short form, the
// simulate report the long one.

#include <string>

namespace comptrain::sim {

enum class NameStyle {
  short_form,  // "DDP", "ZeRO-2", "FSDP2"
  long_form,   // "PyTorch DDP", "DeepSpeed ZeRO stage 2", "PyTorch FSDP2"
};

// FSDP2 shards as ZeRO-3 does (zero_stage 3) but is named as what it is.
std::string data_parallel_name(int zero_stage, bool fsdp, NameStyle style);

}  // namespace comptrain::sim

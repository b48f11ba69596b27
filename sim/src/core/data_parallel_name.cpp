#include "comptrain/sim/core/data_parallel_name.hpp"

#include <fmt/format.h>

namespace comptrain::sim {

std::string data_parallel_name(int zero_stage, bool fsdp, NameStyle style) {
  const bool long_form = style == NameStyle::long_form;
  if (zero_stage == 0) return long_form ? "PyTorch DDP" : "DDP";
  if (fsdp) return long_form ? "PyTorch FSDP2" : "FSDP2";
  return long_form ? fmt::format("DeepSpeed ZeRO stage {}", zero_stage) : fmt::format("ZeRO-{}", zero_stage);
}

}  // namespace comptrain::sim

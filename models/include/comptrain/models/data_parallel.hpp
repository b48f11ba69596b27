#pragma once
// Data parallelism as a schedule transform: one rank's iteration when `ranks` GPUs each train a
// replica on their own micro-batch and reduce the gradients, as PyTorch's DDP does (stage 0) or
// as DeepSpeed's ZeRO does with the model state sharded over the ranks (stages 1 to 3). Every
// rank runs the same schedule, so one rank's schedule describes them all; the collectives it
// gains (models::TaskKind::collective on Stream::comm) are run over the whole group by the
// replay's network (sim/). models/parallel/README.md tells what each stage changes and the
// sources.

#include <cstdint>

#include "comptrain/models/schedule.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::models {

struct DataParallelSpec {
  int ranks = 1;       // GPUs in the data-parallel group; 1: the schedule is left as it is
  int zero_stage = 0;  // 0: PyTorch DDP (full replicas); 1, 2, 3: DeepSpeed ZeRO

  // DDP (torch.nn.parallel.DistributedDataParallel). bucket_cap_mb=25 is 25 MiB and the first
  // bucket holds 1 MiB (torch/nn/parallel/distributed.py: bucket_cap_mb default 25,
  // dist._DEFAULT_FIRST_BUCKET_BYTES = 1024 * 1024).
  std::int64_t bucket_cap_bytes = std::int64_t{25} << 20;
  std::int64_t first_bucket_bytes = std::int64_t{1} << 20;
  // false (DDP's default): the buckets are a second copy of the gradients, allocated when DDP
  // wraps the model and kept; true: the gradients are views into the buckets.
  bool gradient_as_bucket_view = false;

  // ZeRO (DeepSpeed's zero_optimization section, deepspeed/runtime/zero/config.py defaults):
  // reduce_bucket_size 5e8 elements; overlap_comm false (the reductions hold the compute stream:
  // the next kernel waits for each one).
  std::int64_t reduce_bucket_elements = 500'000'000;
  bool overlap_comm = false;
};

// InputError-free check of a spec built in code: ranks >= 1, zero_stage 0..3, positive sizes.
// Throws std::invalid_argument naming the field.
void check_data_parallel(const DataParallelSpec& spec);

// One rank's schedule under `spec` (models/parallel/README.md):
//  - gradients are grouped into buckets in the order the backward pass makes them ready (DDP
//    rebuilds its buckets in that order after the first iteration; DeepSpeed fills its bucket in
//    that order) and each bucket is all-reduced (stage 0) or reduce-scattered (stages 1 to 3) on
//    the comm stream once its last gradient is ready (stage 1: after the whole backward pass);
//  - the optimizer waits for every reduction; under ZeRO it updates 1/ranks of the parameters
//    (its tasks take 1/ranks of their time) and stages 1 and 2 all-gather the updated parameters;
//  - memory: DDP's bucket copy unless gradient_as_bucket_view; the optimizer state (stage >= 1),
//    the gradients (>= 2, with DeepSpeed's reduction bucket) and the parameters (3) are held as
//    1/ranks partitions; stage 3 all-gathers each op's parameters before its forward and its
//    backward use (one op ahead) into buffers freed after their last use.
// Apply it after build_schedule and before the framework's gradient lifetime.
void apply_data_parallel(Schedule& schedule, const traces::Trace& trace, const DataParallelSpec& spec);

}  // namespace comptrain::models

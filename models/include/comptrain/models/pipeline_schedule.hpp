#pragma once
// The per-rank order of work of one training iteration under a pipeline schedule: which
// micro-batch's forward or backward each pipeline rank runs next, for each of its model chunks.
// The replay runs these orders (each step waits for its neighbour stage's activation or
// gradient); no timing is computed here. Sources: shared/reference/parallelism.md §2.

#include <vector>

#include "comptrain/models/parallel_layout.hpp"

namespace comptrain::models {

// One unit of a rank's pipeline work. `chunk` is the rank's model chunk (0 without the
// interleaved schedule); the virtual stage it runs is chunk x P + rank (Megatron's interleaved
// assignment, models/parallel_layout.hpp stage_layers). backward is the whole backward pass;
// zero_bubble splits it into backward_input (the activation gradient, which the previous stage
// waits for) and backward_weight (the weight gradient, which nothing downstream waits for).
struct PipelineStep {
  enum class Kind : unsigned char { forward, backward, backward_input, backward_weight };
  Kind kind = Kind::forward;
  int micro_batch = 0;
  int chunk = 0;
  friend bool operator==(const PipelineStep&, const PipelineStep&) = default;
};

// Per pipeline rank (0..stages-1), its steps in the order it runs them:
//   gpipe        every forward, then every backward, both in micro-batch order
//   1f1b         Megatron's forward_backward_pipelining_without_interleaving: min(P-1-rank, M)
//                warm-up forwards, then one forward and one backward at a time, then the rest
//                of the backwards
//   interleaved  Megatron's forward_backward_pipelining_with_interleaving over virtual_stages
//                chunks per rank; needs micro_batches a multiple of stages (Megatron's check)
//   zero_bubble  ZB-H1: 1f1b's order with each backward split into backward_input and
//                backward_weight, rank r holding back r weight passes to fill its cool-down
// Throws std::invalid_argument naming the argument when stages, micro_batches or
// virtual_stages is below 1, virtual_stages > 1 without the interleaved schedule, or the
// interleaved schedule's micro-batches are not a multiple of the stages.
std::vector<std::vector<PipelineStep>> pipeline_orders(PipelineSchedule schedule, int stages, int micro_batches,
                                                       int virtual_stages = 1);

// The most (micro-batch, chunk) pairs whose forward has run in `order` and whose activations
// are still held: until the backward, or with a split backward until the backward_weight (the
// weight-gradient pass still reads the layer inputs). The activations a rank holds at its peak,
// in micro-batch-chunk units.
int max_in_flight(const std::vector<PipelineStep>& order);

// The idle share of the iteration (idle time over stages x iteration time) when every
// micro-batch's work takes the same time on every stage, in the textbook forms:
//   gpipe, 1f1b  (P-1)/(M+P-1)
//   interleaved  (P-1)/(V M+P-1)
//   zero_bubble  (P-1)/(3M+P-1) for M >= P (ZB-H1 with T_F = T_B = T_W); for M < P, where no
//                steady phase is left to hide the weight passes in, 1 - 3M/(2M+2P-1)
// Throws std::invalid_argument as pipeline_orders does (but accepts any micro-batch count).
double ideal_bubble_fraction(PipelineSchedule schedule, int stages, int micro_batches, int virtual_stages = 1);

}  // namespace comptrain::models

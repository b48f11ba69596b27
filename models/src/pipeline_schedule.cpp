#include "comptrain/models/pipeline_schedule.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <stdexcept>
#include <utility>

namespace comptrain::models {
namespace {

using Kind = PipelineStep::Kind;

void check_arguments(PipelineSchedule schedule, int stages, int micro_batches, int virtual_stages) {
  if (stages < 1) throw std::invalid_argument(fmt::format("pipeline schedule: stages is {}; expected >= 1", stages));
  if (micro_batches < 1) {
    throw std::invalid_argument(fmt::format("pipeline schedule: micro_batches is {}; expected >= 1", micro_batches));
  }
  if (virtual_stages < 1) {
    throw std::invalid_argument(fmt::format("pipeline schedule: virtual_stages is {}; expected >= 1", virtual_stages));
  }
  if (virtual_stages > 1 && schedule != PipelineSchedule::interleaved) {
    throw std::invalid_argument(fmt::format("pipeline schedule: virtual_stages is {} with the {} schedule; expected 1 "
                                            "(model chunks are the interleaved schedule's)",
                                            virtual_stages, to_string(schedule)));
  }
}

PipelineStep step(Kind kind, int micro_batch, int chunk = 0) { return PipelineStep{kind, micro_batch, chunk}; }

// GPipe: fill, then drain. torch.distributed.pipelining's ScheduleGPipe runs every forward, then
// every backward in micro-batch order 0..M-1 (pytorch/pytorch@00722e6
// torch/distributed/pipelining/schedules.py, ScheduleGPipe._step_microbatches, its "Run backward"
// loop over range(self._n_microbatches); its _get_pipeline_order lists the same).
std::vector<PipelineStep> gpipe_order(int micro_batches) {
  std::vector<PipelineStep> order;
  order.reserve(2 * static_cast<std::size_t>(micro_batches));
  for (int mb = 0; mb < micro_batches; ++mb) order.push_back(step(Kind::forward, mb));
  for (int mb = 0; mb < micro_batches; ++mb) order.push_back(step(Kind::backward, mb));
  return order;
}

// The warm-up forwards of the non-interleaved 1F1B: P - rank - 1, at most M
// (NVIDIA/Megatron-LM@d98e8a6 megatron/core/pipeline_parallel/schedules.py:2277-2279).
int one_f_one_b_warmup(int stages, int rank, int micro_batches) {
  return std::min(stages - rank - 1, micro_batches);
}

// PipeDream-Flush as Megatron runs it (forward_backward_pipelining_without_interleaving,
// schedules.py:2147 at NVIDIA/Megatron-LM@d98e8a6): the warm-up forwards (:2334), then for each
// remaining micro-batch its forward followed by the oldest outstanding backward (:2378-2404),
// then the cool-down backwards (:2450). Backwards go in micro-batch order.
std::vector<PipelineStep> one_f_one_b_order(int stages, int rank, int micro_batches) {
  const int warmup = one_f_one_b_warmup(stages, rank, micro_batches);
  std::vector<PipelineStep> order;
  order.reserve(2 * static_cast<std::size_t>(micro_batches));
  for (int mb = 0; mb < warmup; ++mb) order.push_back(step(Kind::forward, mb));
  for (int k = 0; k < micro_batches - warmup; ++k) {
    order.push_back(step(Kind::forward, warmup + k));
    order.push_back(step(Kind::backward, k));
  }
  for (int mb = micro_batches - warmup; mb < micro_batches; ++mb) order.push_back(step(Kind::backward, mb));
  return order;
}

// ZB-H1 (Qi et al. 2024, arXiv 2401.10241 §2.1, Figure 3 top): 1F1B's warm-up and steady phase
// with each backward split into B (backward_input) and W (backward_weight). B is what the
// previous stage waits for, so it runs where 1F1B ran the whole backward; rank r holds back r
// W passes and runs each after a later B, the held-back ones at the end, where 1F1B's rank r
// idles r backward slots waiting for the last gradients from downstream. Every rank then holds
// at most P micro-batches (min(P, M)): 1F1B's peak on rank 0, which ZB-H1 keeps as its bound
// (no worker's peak above 1F1B's highest, §2.1), and the bubble shrinks to (P-1)(T_F+T_B-T_W).
// The paper gives the schedule as a figure; this order is ours, built to that description
// (tests/models/pipeline_schedule_test.cpp checks its makespan against the paper's bubble).
std::vector<PipelineStep> zero_bubble_h1_order(int stages, int rank, int micro_batches) {
  const int warmup = one_f_one_b_warmup(stages, rank, micro_batches);
  const std::size_t held_back = static_cast<std::size_t>(rank);
  std::vector<PipelineStep> order;
  order.reserve(3 * static_cast<std::size_t>(micro_batches));
  std::deque<int> pending_weight;  // micro-batches whose B has run and W not yet
  auto backward = [&](int mb) {
    order.push_back(step(Kind::backward_input, mb));
    pending_weight.push_back(mb);
    if (pending_weight.size() > held_back) {
      order.push_back(step(Kind::backward_weight, pending_weight.front()));
      pending_weight.pop_front();
    }
  };
  for (int mb = 0; mb < warmup; ++mb) order.push_back(step(Kind::forward, mb));
  for (int k = 0; k < micro_batches - warmup; ++k) {
    order.push_back(step(Kind::forward, warmup + k));
    backward(k);
  }
  for (int mb = micro_batches - warmup; mb < micro_batches; ++mb) backward(mb);
  for (const int mb : pending_weight) order.push_back(step(Kind::backward_weight, mb));
  return order;
}

// Megatron's interleaved 1F1B (forward_backward_pipelining_with_interleaving, schedules.py:1019
// at NVIDIA/Megatron-LM@d98e8a6), with microbatch_group_size_per_vp_stage at its default P.
//   The schedule table (get_schedule_table, :989-1016): micro-batches in groups of P; each
//   group runs through chunk 0, then chunk 1, ..., then chunk V-1. Forward k is table[k].
//   Backward k runs chunk V-1 - table[k].chunk (get_model_chunk_id with forward=False,
//   :1244-1249) on the oldest micro-batch whose forward ran on that chunk (input_tensors is a
//   FIFO per chunk, :1431), which is table[k].micro_batch, since every chunk sees the
//   micro-batches in the same order.
//   Warm-up (get_pp_rank_microbatches, :964-965, capped at :976-977): 2(P - rank - 1) +
//   (V - 1) P forwards, at most M V; then forward k + warm-up and backward k alternate
//   (:1733-1749, forward first without p2p overlap: :1901-1904), then the cool-down backwards
//   (:1971).
std::vector<PipelineStep> interleaved_order(int stages, int rank, int micro_batches, int virtual_stages) {
  const int total = micro_batches * virtual_stages;
  std::vector<std::pair<int, int>> table;  // (micro-batch, chunk) of each forward, in order
  table.reserve(static_cast<std::size_t>(total));
  for (int group_start = 0; group_start < micro_batches; group_start += stages) {
    const int group_end = std::min(group_start + stages, micro_batches);
    for (int chunk = 0; chunk < virtual_stages; ++chunk) {
      for (int mb = group_start; mb < group_end; ++mb) table.emplace_back(mb, chunk);
    }
  }
  const int warmup = std::min((stages - rank - 1) * 2 + (virtual_stages - 1) * stages, total);
  auto forward = [&](int k) {
    const auto [mb, chunk] = table[static_cast<std::size_t>(k)];
    return step(Kind::forward, mb, chunk);
  };
  auto backward = [&](int k) {
    const auto [mb, chunk] = table[static_cast<std::size_t>(k)];
    return step(Kind::backward, mb, virtual_stages - 1 - chunk);
  };
  std::vector<PipelineStep> order;
  order.reserve(2 * static_cast<std::size_t>(total));
  for (int k = 0; k < warmup; ++k) order.push_back(forward(k));
  for (int k = 0; k < total - warmup; ++k) {
    order.push_back(forward(k + warmup));
    order.push_back(backward(k));
  }
  for (int k = total - warmup; k < total; ++k) order.push_back(backward(k));
  return order;
}

}  // namespace

std::vector<std::vector<PipelineStep>> pipeline_orders(PipelineSchedule schedule, int stages, int micro_batches,
                                                       int virtual_stages) {
  check_arguments(schedule, stages, micro_batches, virtual_stages);
  // Megatron refuses a last micro-batch group smaller than P (schedules.py:1172-1181 at
  // NVIDIA/Megatron-LM@d98e8a6); with groups of P that is M mod P != 0.
  if (schedule == PipelineSchedule::interleaved && micro_batches % stages != 0) {
    throw std::invalid_argument(fmt::format("pipeline schedule: micro_batches is {}; the interleaved schedule expects a "
                                            "multiple of the {} stages",
                                            micro_batches, stages));
  }
  std::vector<std::vector<PipelineStep>> orders;
  orders.reserve(static_cast<std::size_t>(stages));
  for (int rank = 0; rank < stages; ++rank) {
    switch (schedule) {
      case PipelineSchedule::gpipe: orders.push_back(gpipe_order(micro_batches)); break;
      case PipelineSchedule::one_f_one_b: orders.push_back(one_f_one_b_order(stages, rank, micro_batches)); break;
      case PipelineSchedule::interleaved:
        orders.push_back(interleaved_order(stages, rank, micro_batches, virtual_stages));
        break;
      case PipelineSchedule::zero_bubble: orders.push_back(zero_bubble_h1_order(stages, rank, micro_batches)); break;
    }
  }
  return orders;
}

int max_in_flight(const std::vector<PipelineStep>& order) {
  // A split backward frees the activations at its weight pass; a whole backward at itself.
  int held = 0;
  int peak = 0;
  for (const PipelineStep& s : order) {
    if (s.kind == Kind::forward) {
      peak = std::max(peak, ++held);
    } else if (s.kind == Kind::backward || s.kind == Kind::backward_weight) {
      --held;
    }
  }
  return peak;
}

double ideal_bubble_fraction(PipelineSchedule schedule, int stages, int micro_batches, int virtual_stages) {
  check_arguments(schedule, stages, micro_batches, virtual_stages);
  const double p = stages;
  const double m = micro_batches;
  const double v = virtual_stages;
  switch (schedule) {
    case PipelineSchedule::gpipe:
      // (K-1)/(M+K-1) (Huang et al. 2019, arXiv 1811.06965 §2.3).
    case PipelineSchedule::one_f_one_b:
      // Bubble (p-1)(t_f+t_b) against m(t_f+t_b) of work: the p-1 warm-up slots the first stage
      // waits through (GPipe's (K-1)/(M+K-1), Huang et al., arXiv 1811.06965 §2.3; 1F1B reorders
      // the same slots, Megatron-LM schedules.py:957), as a share of the iteration: (p-1)/(m+p-1).
      return (p - 1) / (m + p - 1);
    case PipelineSchedule::interleaved:
      // Bubble (p-1)(t_f+t_b)/v: each of the v chunks runs 1/v of a stage's layers, so a warm-up
      // slot is 1/v as long (Megatron-LM schedules.py:963-965, v chunks per rank), as a share of
      // the iteration: (p-1)/(vm+p-1).
      return (p - 1) / (v * m + p - 1);
    case PipelineSchedule::zero_bubble: {
      // ZB-H1's bubble is (p-1)(T_F+T_B-T_W) (arXiv 2401.10241 §2.1); with T_F = T_B = T_W = 1
      // it is p-1 against 3m of work: (p-1)/(3m+p-1) (sail-sg/zero-bubble-pipeline-parallelism
      // @39f2c18 README.md:98-100 rounds this to 1/3 of 1F1B's). That needs a steady phase
      // (m >= p); with fewer micro-batches the iteration is the fill-drain critical path,
      // (m+p-1)(T_F+T_B) + T_W = 2m+2p-1 (our derivation; the two agree at m = p).
      const double iteration = std::max(3 * m + p - 1, 2 * m + 2 * p - 1);
      return 1 - 3 * m / iteration;
    }
  }
  throw std::invalid_argument("pipeline schedule: unknown schedule");
}

}  // namespace comptrain::models

#pragma once
// Pipeline parallelism as a schedule transform: one pipeline rank's iteration, built from the
// schedules of its model chunks (one micro-batch each) and its order of pipeline steps
// (models/pipeline_schedule.hpp), with the point-to-point transfers between neighbour stages.
// Sources: shared/reference/parallelism.md §2; Megatron-LM's 1F1B loop
// (NVIDIA/Megatron-LM@d98e8a6 megatron/core/pipeline_parallel/schedules.py:2147-2480).

#include <cstdint>
#include <vector>

#include "comptrain/models/pipeline_schedule.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::models {

struct PipelineStageSpec {
  int rank = 0;            // this pipeline rank
  int stages = 1;          // P
  int virtual_stages = 1;  // V (model chunks per rank)
  std::vector<PipelineStep> order;  // pipeline_orders(...)[rank]
  std::int64_t boundary_bytes = 0;  // bytes of one micro-batch's boundary activation (= its gradient)
};

// One pipeline rank's iteration. `chunks` holds one schedule per model chunk (V of them, in chunk
// order: chunk k runs virtual stage k x P + rank, as stage_layers in parallel_layout.hpp assigns
// them), each ONE micro-batch's forward and backward pass of that chunk's layers plus, where the
// chunk has one, its optimizer step, as build_schedule gives it for the chunk's trace; traces[k]
// is chunk k's trace (its ops' phases cut the schedule, below). Op and tensor indices of the
// result's tasks and buffers are those of their own chunk's trace; its compression reports are
// every chunk's, in chunk order.
//
// How a chunk schedule is cut: its optimizer step is what gradient accumulation takes for it (the
// optimizer's ops and every task that waits for one of them, models/gradient_accumulation.hpp);
// of the rest, the micro-step, the forward part is every task before the first task of the
// backward pass, the backward part that task and every later one. A task of the backward pass is
// an op task whose op's phase is backward, a recompute task (a forward op replayed for the
// backward), a prefetch or decompress task (an activation brought back for its backward use:
// MemoryRole::prefetch, TaskKind::decompress), or a send or recv whose message is a gradient.
//
// The result runs the steps of spec.order in order: a forward step the forward part of its chunk,
// a backward (or backward_input) step the backward part, each with per-(micro-batch, chunk) copies
// of the buffers that do not outlive a micro-batch (gradient accumulation's rule: everything but
// resident buffers, buffers held to the end, such as the gradients, which every micro-batch
// accumulates into in place, and buffers the optimizer step touches); then every chunk's
// optimizer step once, in chunk order, waiting for the chunk's last backward.
//
// zero_bubble's split backward: a chunk schedule has no weight-gradient pass of its own (a trace
// records each backward op whole, and no naming convention marks a weight-gradient op), so its
// whole backward part runs at backward_input, the step the previous stage waits for, and
// backward_weight runs nothing. The activations are then freed at backward_input, where
// max_in_flight (pipeline_schedule.hpp) holds them until backward_weight.
//
// The transfers (Megatron's recv_forward / send_forward / recv_backward / send_backward around
// forward_step and backward_step, schedules.py:2344-2474; one [s, b, h] tensor per micro-batch and
// boundary each way, parallelism.md §2), for virtual stage j = k x P + rank of P x V:
//   forward of (m, k)   unless j = 0, a recv of the activation from the rank of stage j-1, before
//                       the forward part: its first op waits for it; it creates an activation
//                       buffer of boundary_bytes (the stage's input, which its first layer saves
//                       for the backward), freed after the micro-batch's backward part.
//                       Unless j = P x V - 1, a send of the output to the rank of stage j+1 after
//                       the forward part's last op.
//   backward of (m, k)  unless j = P x V - 1, a recv of the output's gradient from the rank of stage
//                       j+1 before the backward part: its first op waits for it; it creates a
//                       temporary buffer of boundary_bytes, freed after that op. Unless j = 0, a
//                       send of the input's gradient to the rank of stage j-1 after the backward
//                       part's last op.
// A send reads what the last op before it created (its per-micro-batch buffers: the output, or
// the input's gradient), which it keeps allocated until it ends. Every transfer carries
// boundary_bytes, on Stream::p2p. If a chunk schedule already has send and recv tasks (a chunk
// trace with its own communication ops), none is added: each copy of them gets its message's
// peer, micro-batch and chunk filled (its `gradient` says which pass it is in; it must have one),
// and they go where the added ones would: a part's recvs before the rest of it, its sends after it
// (no other task of the part may wait for a send). A message's chunk is the sending stage's chunk on its rank, at both ends.
//
// With V > 1 chunks (Megatron's interleaved schedule, forward_backward_pipelining_with_interleaving,
// schedules.py:1019-1560, overlap_p2p_comm off) the transfers go where that loop issues them: its
// steps run in units (a warm-up forward, a steady-state forward with the backward after it, a
// cool-down backward), and after each unit one batch_isend_irecv carries the unit's sends and the
// next unit's receives (the first unit's receives come alone, before it). So a steady-state
// forward's send waits for the backward that follows it, and each step's receives are posted
// before the unit ahead of it. Issued one step at a time instead, P 2, V 2 deadlocks: each rank
// sends a gradient that the other receives only after its own send.
//
// Between two ops the p2p stream may hold a send followed by a recv: Megatron issues such a pair
// as one batch_isend_irecv (send_forward_recv_backward and send_backward_recv_forward,
// schedules.py:2416, 2446; p2p_communication.py:22-56), which NCCL runs as one group. The replay
// must start the p2p tasks between two compute tasks together: run one at a time, each waiting for
// its peer, rank r's send of forward m+1 and rank r+1's send of the gradient of m would wait for
// each other (1F1B, P = 2, M >= 2).
//
// Throws std::invalid_argument naming what is wrong when: stages, virtual_stages or rank is out
// of range; chunks or traces do not have V entries (or a trace is null); boundary_bytes < 0; an
// order step names a chunk >= V or a negative micro-batch; a (micro-batch, chunk) has the same
// step kind twice, both a backward and a backward_input, a backward before its forward, a forward
// without a backward, a backward_weight without an earlier backward_input or a backward_input
// without a backward_weight; a chunk runs no step; a chunk schedule has no forward or no backward
// op, or a send or recv without a message, or one that its stage cannot have (a forward recv on
// the first virtual stage, ...). std::logic_error when a chunk schedule cannot be cut (an op of
// the micro-step waits for the optimizer step, a forward task for a backward one).
Schedule apply_pipeline_stage(const std::vector<Schedule>& chunks, const std::vector<const traces::Trace*>& traces,
                              const PipelineStageSpec& spec);

// The traces of one rank's model chunks as one trace, for what takes a rank's iteration with ONE
// trace (transform_schedule's data parallelism and framework transforms, the reports): chunk k's
// tensors and ops follow those of the chunks before it, their indices (inputs, outputs, after,
// view_of) moved by first_tensor[k] and first_op[k], their ids by one more than the largest id of
// the chunks before (so that ids stay unique; chunk 0 keeps its own). The chunks share nothing: a
// chunk's boundary tensors are its own (its recv's output, its send's input), as each chunk of
// Megatron's interleaved schedule is a module of its own (one GPTModel per chunk). Its name is the
// chunks' names joined by " + "; its metadata every key the chunks give, a key whose values
// differ holding each chunk's value in chunk order, comma-separated. One chunk: that trace as it
// is. Throws std::invalid_argument when there is no chunk or the batch sizes differ.
struct RankTrace {
  traces::Trace trace;
  std::vector<traces::OpIndex> first_op;          // per chunk: the rank trace's index of its op 0
  std::vector<traces::TensorIndex> first_tensor;  // per chunk: the rank trace's index of its tensor 0
};
RankTrace join_chunk_traces(const std::vector<traces::Trace>& chunks);

// A chunk schedule (build_schedule's, for its chunk's trace) with its tasks' op and tensor indices
// and its buffers' tensor indices moved onto the rank trace: + first_op, + first_tensor.
void move_onto_rank_trace(Schedule& chunk, traces::OpIndex first_op, traces::TensorIndex first_tensor);

// One pipeline rank's iteration over its chunks' joined trace: join_chunk_traces, each chunk
// schedule moved onto it (move_onto_rank_trace), then apply_pipeline_stage with the rank trace as
// every chunk's trace. The schedule's op and tensor indices are the rank trace's, so that
// transform_schedule takes the pair as it takes one GPU's. Its data parallelism then reduces every
// chunk's gradients once per iteration, each after the last backward that writes it (the last
// backward of its chunk), in one bucket set over the rank's chunks: a bucket may take gradients
// of two chunks, and waits for the later. (Megatron wraps each chunk in a DistributedDataParallel
// of its own, the chunks after the first without bucketing: megatron/training/training.py,
// get_model, disable_bucketing=(model_chunk_idx > 0).) Throws as join_chunk_traces and
// apply_pipeline_stage do.
struct PipelineRank {
  traces::Trace trace;
  Schedule schedule;
};
PipelineRank apply_pipeline_rank(std::vector<Schedule> chunks, const std::vector<traces::Trace>& chunk_traces, const PipelineStageSpec& spec);

}  // namespace comptrain::models

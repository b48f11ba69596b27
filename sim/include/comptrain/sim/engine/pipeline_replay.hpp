#pragma once
// Replays every pipeline stage of one iteration together (shared/reference/parallelism.md §2, §9):
// one SimGrid run over the whole cluster in which each stage's representative rank runs its own
// schedule (models::apply_pipeline_stage gives one per pipeline rank) and the stages' sends and
// receives meet over the cluster's routes.
//
// Placement (models/parallel_layout.hpp: rank = t + T(c + C(d + D p))): stage p holds the ranks
// [p x stage_ranks, (p + 1) x stage_ranks), stage_ranks = T x C x D. Its representative is its first
// rank; its streams are actors on that GPU (the host stream on its node's host), as in the replay
// of one schedule (replay.hpp), whose rules it follows within the stage, the stage's ranks being
// symmetric:
//  - a collective runs the groups of the stage's ranks only (ClusterNetwork::RankRange), each
//    stage's comm stream its own, and of those only the block of size x stride consecutive ranks
//    that holds the representative's group (its own group and the groups interleaved with it on
//    the same nodes: a tensor group {T, 1} runs one group on one node, a context group {C, T} the
//    T groups of C x T ranks, one per rail); the stage's other blocks run the same collective on
//    other nodes at the same time and, like the other nodes' transfers below, their flows are not
//    simulated (they would share the network's upper levels only). Without this fold a 16,384-GPU
//    stage of 1,024 ranks ran every tensor-parallel collective as 1,024 flows instead of 8;
//  - a host-link copy (and host work) is made at once by every GPU of the stage on the
//    representative's node: all of them when the stage spans whole nodes, the stage's part of the
//    node otherwise (T = 4 on 8-GPU nodes: 4 GPUs, sharing the node's host memory with the other
//    stage on that node, whose representative makes its own copies);
//  - a send of stage p to stage q (its message's peer) pairs with q's recv whose message has the
//    same (gradient, micro-batch, chunk) and peer p. The representatives' transfer is a SimGrid
//    mailbox communication (one mailbox per message: a rendezvous, which starts once both ends have
//    posted it, as NCCL's send and recv), from p's representative's GPU to q's over the cluster's
//    routes (NVLink within a node, the NICs and the network across). Every rank of stage p sends to
//    its counterpart in q (the same t, c, d index) at the same time: the other GPUs of p on its
//    representative's node send theirs as flows of the same bytes to their counterparts, started
//    when the representatives' transfer starts (the end posting second starts them) and waited
//    for by that end. The other nodes of the stage send theirs over links no simulated flow
//    shares within their nodes; their flows across the network are not simulated (they would
//    share the network's upper levels only);
//  - the p2p stream posts its sends and receives in batches, as Megatron's batch_isend_irecv
//    (the rule is beside Replay::p2p_batches in replay.cpp), which is what keeps 1F1B from
//    deadlocking; every task of a batch ends when the last transfer of the batch has ended.
// The transfers add no NCCL latency term: a transfer takes its route's latency and its bytes at
// the rate SimGrid's flow model gives it.
//
// Left out here (unlike replay.hpp's simulate): collective times are never reused and the
// cluster is never folded (every GPU is built: the stages' collectives run at once on different
// ranks, which the reuse's and folding's preconditions exclude), and energy is not measured
// (SimulationResult::energy stays empty: the energy meter counts node 0's hosts and links for all
// nodes, which the stages' different schedules make wrong). Only the representatives' nodes get
// their host side (host memory, PCIe links, pageable staging), and no node its GPU power hosts
// (ClusterNetwork::NodeDetail::stage_nodes): nothing else would use them, and SimGrid 3.32's cost
// of each host grows with the hosts and zones already built.

#include <optional>
#include <string_view>
#include <vector>

#include "comptrain/models/platform.hpp"
#include "comptrain/models/schedule.hpp"
#include "comptrain/sim/core/cluster_shape.hpp"
#include "comptrain/sim/engine/replay.hpp"

namespace comptrain::sim {

struct PipelineSimulationResult {
  // Per pipeline rank, its representative's timings and memory, as simulate() gives them for one
  // schedule (energy empty); out of memory per stage, each stage cut at its own failing allocation.
  std::vector<SimulationResult> stages;
  // When the last task of any stage ended; 0 when a stage does not fit (the iteration did not run
  // to its end there, so no iteration time is reported).
  double iteration_seconds = 0;
  // Per stage: the seconds its compute stream sat idle between its first and its last compute task
  // waiting for a receive: before each compute task, the idle time since the previous compute
  // task ended up to the end of the latest recv task it waits for (its `after`), if that is later.
  // The pipeline bubble as the replay sees it (the idle time before the first and after the last
  // compute task is not in it).
  std::vector<double> bubble_seconds;
  // The lowest stage that does not fit, and its failure.
  std::optional<int> out_of_memory_stage;
  std::optional<OutOfMemory> out_of_memory;

  bool fits() const { return !out_of_memory.has_value(); }
};

template <>
struct wire::Codec<PipelineSimulationResult> {
  static constexpr std::string_view tag = "PipelineSimulationResult";
  static constexpr std::uint32_t version = 1;
  static void write(wire::Writer& w, const PipelineSimulationResult& result);
  static PipelineSimulationResult read(wire::Reader& in);
};

// Replays `stages` (stage p's schedule, as models::apply_pipeline_stage gives it for pipeline rank
// p) together in a child process, as simulate() does one schedule, and returns every stage's
// result. `shape` is the run's cluster shape, of stages.size() x stage_ranks ranks; `framework`
// applies to every stage. Throws std::invalid_argument when a schedule is invalid
// (Schedule::validate), the shape does not hold stages.size() x stage_ranks ranks, or a send or
// recv has no partner (no task of the peer stage with the matching message, a peer that is no
// other stage, two tasks with one message, ends with different bytes); InputError when the
// platform does not have the shape; std::runtime_error when the replay stops with tasks not run
// (a deadlock: the message names each stage's first task not run) or the child fails.
PipelineSimulationResult simulate_pipeline(const models::Platform& platform, const std::vector<models::Schedule>& stages,
                                           const FrameworkOnGpu& framework, ClusterShape shape, int stage_ranks);

// The same in this process: usable once per process (SimGrid's engine cannot be reset).
PipelineSimulationResult simulate_pipeline_in_this_process(const models::Platform& platform, const std::vector<models::Schedule>& stages,
                                                           const FrameworkOnGpu& framework, ClusterShape shape, int stage_ranks);

}  // namespace comptrain::sim

#pragma once
// What torch.compile's Inductor backend fuses: which of a trace's memory-bound ops run as one
// generated kernel, and the device-memory traffic and launches that saves (models/README.md,
// "torch.compile"). The op-time model applies it (OpTimeModel::run_all); the dispatch-cost
// transform reads the launches (assign_dispatch_costs).
//
// The rules, from Inductor's design (PyTorch 2 paper, Ansel et al., ASPLOS 2024, sections 4-5;
// torch/_inductor/scheduler.py, can_fuse / will_fusion_create_cycle):
//  - pointwise ops and reductions are generated as Triton kernels and fused with the ops they
//    feed when no other kernel lies on a path between them (which would make a cycle); here the
//    fusible kinds are relu, gelu, batchnorm, layernorm, pool, softmax, dropout, elementwise and
//    loss, views are free and join them, and every other kind (GEMMs, convolutions, attention,
//    embeddings, gathers and scatters, collectives, the optimizer) is a kernel of its own: cuBLAS,
//    cuDNN and the SDPA kernels are called as extern kernels outside Inductor's fusion by default
//    (no max-autotune epilogues);
//  - fusion stays within one phase (the forward and backward graphs are compiled apart by
//    AOTAutograd) and within one compiled region (CompileScope);
//  - a tensor that only ops of its own group read is never written to device memory; a read of
//    a value another op of the group computed comes from registers; an eager composite's
//    temporaries (outputs of role temporary that nothing reads) are not written;
//  - a group is one kernel: one launch, one host dispatch.
//  - AOTAutograd's min-cut partitioner saves a forward kernel's inputs rather than outputs only
//    the backward kernels read, when that is fewer bytes, and the backward kernels recompute
//    them (an RMSNorm's fp32 copy and normalised value from its bf16 input).
// Not modelled: the memory that partitioning saves (the trace's saved tensors stay allocated),
// Inductor's own kernel quality against the eager kernels, and the compiled region's lower
// per-kernel host cost for the kernels it does not fuse.

#include <optional>
#include <string>
#include <vector>

#include "comptrain/traces/trace.hpp"

namespace comptrain::models {

// Where torch.compile applies. No module patterns: the whole model is one compiled region
// (torch.compile(model)); patterns (module_pattern.hpp): each module instance they name is a
// region of its own (torchtitan compiles each TransformerBlock: `layers.*`), and ops outside
// every instance stay eager.
struct CompileScope {
  std::vector<std::string> modules;
  friend bool operator==(const CompileScope&, const CompileScope&) = default;
};

// One op under the fusion: the traffic its kernel no longer moves and whether it launches one.
struct FusedOp {
  // Bytes of its reads that come from registers; less than 0 when it reads a recomputation's
  // inputs instead of saved outputs (the partitioner, kernel_fusion.cpp).
  double read_saved = 0;
  double written_saved = 0;  // bytes of its writes that never reach memory
  bool launches = true;      // false: it runs inside the kernel of an earlier op of its group
  bool compiled = false;     // a kernel Inductor generates (a fusible op in a compiled region)
  std::optional<std::size_t> group;  // its fusion group; none: not fused with anything
};

struct KernelFusion {
  std::vector<FusedOp> ops;  // one per op of the trace
  std::size_t groups = 0;    // groups of two or more ops
};

// The fusion Inductor makes of `trace` under `scope`.
KernelFusion fuse_like_inductor(const traces::Trace& trace, const CompileScope& scope);

}  // namespace comptrain::models

// What Transformer Engine's FP8 linears hold in memory (training.float8 with recipe delayed;
// models/README.md, "Float8 linears"), written into a trace whose linears the op-time model runs
// as FP8 GEMMs (OpTimeOptions::float8) but whose tensors are 16-bit:
//
// - Each in-scope linear saves for its backward pass an FP8 copy of its input, one byte an
//   element, instead of the 16-bit input: Transformer Engine quantizes the input for the forward
//   GEMM with both its row- and column-wise data and, before saving it, discards the row-wise
//   data the backward pass does not read (NVIDIA/TransformerEngine@d0067d0d
//   transformer_engine/pytorch/module/linear.py:598-621, "Discard row-wise data since it is not
//   needed in backward pass"). The copy is a new output of the first in-scope linear that reads
//   the input (q, k and v of one norm output share one), dtype u8 (Float8Tensor's storage); the
//   16-bit input is then freed after its last forward use unless another op saves it (flash
//   attention saves its output, which the output projection also reads).
// - Unless the weights are FP8 themselves (Float8Scope::fp8_weights), each in-scope weight has an
//   FP8 workspace, its row- and column-wise copies, two bytes an element, which the module caches
//   across micro-batches and steps (linear.py:478-488, quantize_weight into the module's weight
//   workspace; base.py, _fp8_workspaces): a persistent buffer (role buffer) beside the 16-bit
//   weight, read by the linear's forward and backward ops.
//
// The tensorwise recipe (torchao) saves its 16-bit operands and casts them again in the backward
// pass (torchao float8_linear.py, matmul_with_hp_or_float8_args: ctx.save_for_backward(input_hp,
// weight_hp_t)): nothing changes for it. The op-time model's cast kernels are unchanged; its
// FP8 GEMMs read the copy at one byte an element, as before.

#ifndef COMPTRAIN_MODELS_FLOAT8_MEMORY_HPP
#define COMPTRAIN_MODELS_FLOAT8_MEMORY_HPP

#include "comptrain/models/op_time.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::models {

// `trace` with the FP8 copies and workspaces above when `scope` is the delayed recipe; the same
// trace otherwise. `weight_workspaces` false leaves the workspaces out (weights that are not the
// module's own full tensors, as under FSDP, where Transformer Engine does not cache them).
traces::Trace with_float8_memory(const traces::Trace& trace, const Float8Scope& scope, bool weight_workspaces = true);

}  // namespace comptrain::models

#endif

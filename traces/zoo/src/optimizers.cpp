// One parameter's optimizer step, as its own op: the optimizers outside torch.optim
// (bitsandbytes' 8-bit and paged AdamW, Hugging Face's Adafactor), and every optimizer when the
// step runs inside the backward pass (torchtune's optimizer_in_bwd). traces/zoo/README.md,
// "Optimizers outside torch.optim" and "The step in the backward pass".

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "comptrain/support/checked.hpp"
#include "network_builder.hpp"

namespace comptrain::zoo::detail {
namespace {

using traces::BatchLinear;
using traces::DType;
using traces::OpKind;
using traces::Phase;
using traces::TensorRole;

constexpr std::string_view kArithmetic = "an optimizer state size or FLOP count";

// bitsandbytes at 95f9af309d4d5793847169c39288dcd3fcbdf564, bitsandbytes/optim/optimizer.py,
// Optimizer2State.init_state (lines 492-529): a parameter of fewer than min_8bit_size elements
// keeps fp32 states whatever optim_bits says (line 502, default min_8bit_size=4096 in every
// 8-bit class: adam.py, adamw.py) ...
constexpr std::int64_t kBnbMin8bitSize = 4096;
// ... the 8-bit states are quantised in blocks of 256 elements, each with an fp32 absmax
// (lines 524-529: `blocksize = 256`, `blocks = (n // blocksize) + bool(n % blocksize)`,
// absmax1 and absmax2 torch.zeros((blocks,), dtype=torch.float32)) ...
constexpr std::int64_t kBnbBlockSize = 256;
// ... against the dynamic quantisation maps, one signed and one unsigned table of 256 fp32
// values (fill_qmap, line 158: F.create_dynamic_map), moved to the GPU once per optimizer and
// shared by every parameter (state["qmap1"] = self.name2qmap["dynamic"]).
constexpr std::int64_t kBnbQmapEntries = 256;
// get_state_buffer (line 383): `if not self.is_paged or p.numel() < 1e5` the state is an
// ordinary torch.zeros_like on the GPU; a paged optimizer puts larger states in CUDA managed
// memory (F.get_paged: cget_managed_ptr, cudaMallocManaged).
constexpr std::int64_t kBnbPagedMinElements = 100'000;

// FLOPs per element. torch.optim's Adam(W) arithmetic (network_builder.cpp's constants:
// moments 7, denominator 3, update 3, AdamW's decay 1) ...
constexpr std::int64_t kAdamFlops = 13;
constexpr std::int64_t kAdamWFlops = 14;
// ... and bitsandbytes' blockwise 8-bit kernel (csrc/kernels.cu at the commit above,
// kOptimizerStatic8bit2StateBlockwise) adds per element a dequantisation of each moment
// (codebook value times its block's absmax: 2), the new absmax's max-reduction over the block (2)
// and the requantisation's scaling (2); the codebook search is comparisons, not counted.
constexpr std::int64_t kBnb8bitExtraFlops = 6;
// Hugging Face's Adafactor.step (transformers@005edacb6b5dabbf0843e92c6623de9e07ca6241,
// src/transformers/optimization.py): RMS of the parameter (2), grad**2 + eps (2), the row and
// column means into the factors (2; a vector's exp_avg_sq.mul_().add_() instead), the outer
// product of the rsqrt factors (1; a vector's rsqrt), times grad (1), RMS of the update (2), the
// clip division (1), times lr (1), the negation (1) and the add into the parameter (1).
constexpr std::int64_t kAdafactorFlops = 14;

std::int64_t product(const std::vector<std::int64_t>& shape) {
  std::int64_t count = 1;
  for (const std::int64_t extent : shape) count = multiply_or_throw(count, extent, kArithmetic);
  return count;
}

bool is_bnb_8bit(Optimizer optimizer) {
  return optimizer == Optimizer::adam8bit || optimizer == Optimizer::adamw8bit || optimizer == Optimizer::paged_adamw8bit;
}

bool is_16bit(DType dtype) { return dtype == DType::f16 || dtype == DType::bf16; }

}  // namespace

std::int64_t library_optimizer_flops_per_element(Optimizer optimizer) {
  switch (optimizer) {
    case Optimizer::adam8bit: return kAdamFlops + kBnb8bitExtraFlops;
    case Optimizer::adamw8bit:
    case Optimizer::paged_adamw8bit: return kAdamWFlops + kBnb8bitExtraFlops;
    case Optimizer::paged_adamw: return kAdamWFlops;
    case Optimizer::adafactor: return kAdafactorFlops;
    case Optimizer::sgd:
    case Optimizer::momentum:
    case Optimizer::adam:
    case Optimizer::adamw: break;
  }
  throw std::logic_error("library_optimizer_flops_per_element: a torch.optim optimizer");
}

std::size_t NetworkBuilder::optimizer_state(std::size_t weight, const std::string& suffix, DType dtype,
                                            std::vector<std::int64_t> shape) {
  TensorRecord record;
  record.name = tensors_[weight].name + "." + suffix;
  record.dtype = dtype;
  record.sample_shape = std::move(shape);
  record.role = TensorRole::optimizer_state;
  return add_tensor(std::move(record));
}

void NetworkBuilder::emit_step(std::size_t weight) {
  const auto grad = tensors_[weight].grad;
  if (!grad) throw std::logic_error(tensors_[weight].name + ": the weight gets no gradient");
  const std::vector<std::int64_t> shape = tensors_[weight].sample_shape;
  const std::int64_t n = product(shape);
  const std::string name = tensors_[weight].name;  // a copy: adding tensors moves the records

  OpRecord op;
  op.name = "optimizer." + name;
  op.phase = Phase::optimizer;
  op.kind = OpKind::optimizer_update;
  op.inputs = {weight, *grad};
  op.updated = {weight};
  // `mixed`: the update runs on an fp32 master copy, copied back to the 16-bit weight.
  std::size_t target = weight;
  if (precision_ == Precision::mixed) {
    target = optimizer_state(weight, "master", DType::f32, shape);
    op.inputs.push_back(target);
    op.updated.push_back(target);
  }
  const auto add_state = [&](const std::string& suffix, DType dtype, std::vector<std::int64_t> state_shape) {
    const std::size_t state = optimizer_state(weight, suffix, dtype, std::move(state_shape));
    op.inputs.push_back(state);
    op.updated.push_back(state);
  };
  // Parameter-sized temporaries the step allocates and frees within this op.
  std::vector<std::pair<std::string, DType>> temporaries;
  std::int64_t flops = 0;
  switch (optimizer_) {
    case Optimizer::sgd:
    case Optimizer::momentum:
    case Optimizer::adam:
    case Optimizer::adamw:
      // torch.optim over one parameter (torchtune builds one optimizer per parameter): the states
      // of emit_optimizer_steps, and the temporaries of its implementation for that parameter.
      flops = optimizer_flops_per_element(optimizer_);
      if (optimizer_ == Optimizer::momentum) add_state("momentum_buffer", state_dtype(weight), shape);
      if (optimizer_ == Optimizer::adam || optimizer_ == Optimizer::adamw) {
        add_state("exp_avg", state_dtype(weight), shape);
        add_state("exp_avg_sq", state_dtype(weight), shape);
        if (optimizer_impl_ != OptimizerImpl::fused) temporaries.emplace_back("exp_avg_sq_sqrt", state_dtype(weight));
        if (optimizer_impl_ == OptimizerImpl::for_loop) temporaries.emplace_back("denom", state_dtype(weight));
      }
      break;
    case Optimizer::adam8bit:
    case Optimizer::adamw8bit:
    case Optimizer::paged_adamw:
    case Optimizer::paged_adamw8bit: {
      // One fused kernel updates the parameter and both states in place: no temporaries.
      // Managed memory is counted as GPU memory (traces/zoo/README.md: the states are resident
      // while the GPU has room, which is all a peak within the GPU's memory says).
      flops = library_optimizer_flops_per_element(optimizer_);
      const bool paged = optimizer_ == Optimizer::paged_adamw || optimizer_ == Optimizer::paged_adamw8bit;
      const std::string where = paged && n >= kBnbPagedMinElements ? ".paged" : "";
      if (is_bnb_8bit(optimizer_) && n >= kBnbMin8bitSize) {
        const std::int64_t blocks = n / kBnbBlockSize + (n % kBnbBlockSize != 0 ? 1 : 0);
        add_state("state1" + where, DType::u8, shape);
        add_state("state2" + where, DType::u8, shape);
        add_state("absmax1", DType::f32, {blocks});
        add_state("absmax2", DType::f32, {blocks});
        if (!qmaps_) {
          const auto qmap = [&](const std::string& qmap_name) {
            TensorRecord record;
            record.name = qmap_name;
            record.dtype = DType::f32;
            record.sample_shape = {kBnbQmapEntries};
            record.role = TensorRole::optimizer_state;
            return add_tensor(std::move(record));
          };
          qmaps_ = std::pair{qmap("optimizer.qmap.dynamic"), qmap("optimizer.qmap.udynamic")};
        }
        op.inputs.push_back(qmaps_->first);
        op.inputs.push_back(qmaps_->second);
      } else {
        // get_state_buffer(p, dtype=torch.float32): fp32 whatever the parameter's dtype.
        add_state("state1" + where, DType::f32, shape);
        add_state("state2" + where, DType::f32, shape);
      }
      break;
    }
    case Optimizer::adafactor: {
      flops = kAdafactorFlops;
      // The states take the gradient's dtype after `grad = grad.float()`: fp32. A matrix (or a
      // higher-rank tensor) is factored: exp_avg_sq_row of grad_shape[:-1] and exp_avg_sq_col of
      // grad_shape[:-2] + grad_shape[-1:]; a vector keeps a full exp_avg_sq. beta1 None: no exp_avg.
      if (shape.size() >= 2) {
        std::vector<std::int64_t> row(shape.begin(), shape.end() - 1);
        std::vector<std::int64_t> col(shape.begin(), shape.end() - 2);
        col.push_back(shape.back());
        add_state("exp_avg_sq_row", DType::f32, std::move(row));
        add_state("exp_avg_sq_col", DType::f32, std::move(col));
      } else {
        add_state("exp_avg_sq", DType::f32, shape);
      }
      // 16-bit gradients and parameters are upcast first (grad.float(), p.float()); the master
      // copy of `mixed` is fp32 already.
      if (is_16bit(tensors_[*grad].dtype)) temporaries.emplace_back("grad_fp32", DType::f32);
      if (is_16bit(tensors_[target].dtype)) temporaries.emplace_back("fp32", DType::f32);
      // Two fp32 parameter-sized tensors at once: grad**2 while `+ eps` is made from it, the
      // factors' outer product (a vector's exp_avg_sq.rsqrt()) while that sum is still bound to
      // `update`, and `-update` while update lives. (The last update of the previous parameter is
      // freed only when `update` is rebound, after this parameter's grad**2 + eps: not modelled,
      // as for torch.optim's for-loop.)
      temporaries.emplace_back("update", DType::f32);
      temporaries.emplace_back("update_negated", DType::f32);
      break;
    }
  }
  for (const auto& [suffix, dtype] : temporaries) {
    op.outputs.push_back(new_output(name + "." + suffix, dtype, shape, std::nullopt, false));
  }
  op.flops = {multiply_or_throw(n, flops, kArithmetic), 0};
  emit(std::move(op));
}

}  // namespace comptrain::zoo::detail

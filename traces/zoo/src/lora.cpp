// LoRA and QLoRA on the zoo's decoders (traces/zoo/README.md, "LoRA and QLoRA").
//
// LoRA as Hugging Face PEFT builds it (huggingface/peft@003369494699fedd543fe38d16e52df96aeae743,
// src/peft/tuners/lora/layer.py): get_peft_model freezes every parameter of the model
// (LoraModel._mark_only_adapters_as_trainable) and wraps each targeted nn.Linear in a
// lora.Linear whose forward is
//   result = self.base_layer(x)
//   x = self._cast_input_dtype(x, lora_A.weight.dtype)
//   result = result + lora_B(lora_A(dropout(x))) * scaling
//   result = result.to(torch_result_dtype)
// with lora_A = nn.Linear(in, r, bias=False), lora_B = nn.Linear(r, out, bias=False) and
// dropout nn.Dropout(p) when lora_dropout > 0, else nn.Identity (LoraLayer.update_layer). The
// adapters of a 16-bit model are upcast to fp32 (BaseTuner._cast_adapter_dtype with
// get_peft_model's default autocast_adapter_dtype=True, peft/tuners/tuners_utils.py), so the
// input is cast to fp32 for them and the sum is promoted to fp32 before the cast back.
//
// QLoRA's frozen linears are bitsandbytes Linear4bit layers
// (bitsandbytes-foundation/bitsandbytes@012c660699ccb92bfa97916f1a18bed0980eae00,
// bitsandbytes/autograd/_functions.py, MatMul4Bit): forward runs
//   torch.nn.functional.linear(A, F.dequantize_4bit(B, quant_state).to(A.dtype).t(), bias)
// inside a custom autograd Function that saves only the packed weight B (ctx.tensors = (None, B)),
// and backward dequantises it again for grad_A = grad_output @ W. The storage is quantize_4bit's
// (bitsandbytes/functional.py, bnb@8b3c0f355c779170d55a1975df981df9e53b59fa) with
// bnb_4bit_use_double_quant (compress_statistics=True), as the QLoRA paper trains (Dettmers et
// al. 2023, §3): two 4-bit codes per uint8 ((n + 1) // 2 bytes), one absmax per block of 64
// quantised to 8 bits (`qabsmax, state2 = quantize_blockwise(absmax - offset, blocksize=256)`:
// a uint8 per block) with one fp32 absmax per 256 blocks and the fp32 offset; the NF4 code (16
// fp32, get_4bit_type) per layer, and quantize_blockwise's 256-entry dynamic map once (its
// cached name2qmap["dynamic"]). That is 4 + 8/64 + 32/(64 * 256) = 4.127 bits per parameter, the
// paper's figure. dequantize_4bit first expands the absmax to fp32 (`absmax =
// dequantize_blockwise(quant_state.absmax, quant_state.state2); absmax += quant_state.offset`),
// then writes the weight in quant_state.dtype (the model's 16-bit dtype).

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "comptrain/support/checked.hpp"
#include "comptrain/support/input_error.hpp"
#include "network_builder.hpp"

namespace comptrain::zoo::detail {
namespace {

using traces::BatchLinear;
using traces::DType;
using traces::OpKind;

constexpr std::string_view kArithmetic = "a size or FLOP count of the LoRA model";

// bitsandbytes' NF4 block of 64 weights per absmax (Linear4bit's default blocksize=64), the
// second-level block of 256 absmax values (quantize_4bit: quantize_blockwise(..., blocksize=256))
// and the 16 values of the NF4 code (get_4bit_type("nf4")), 256 of the 8-bit dynamic map.
constexpr std::int64_t kNf4Block = 64;
constexpr std::int64_t kAbsmaxBlock = 256;
constexpr std::int64_t kNf4CodeValues = 16;
constexpr std::int64_t kDynamicMapValues = 256;
// Dequantising: a weight is code[q] * absmax[block] (one multiply; the table lookup is no
// FLOP); a block's absmax is dynamic_map[q] * absmax2[block / 256] + offset (two).
constexpr std::int64_t kDequantFlopsPerWeight = 1;
constexpr std::int64_t kDequantFlopsPerBlock = 2;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }


bool ends_with_module(const std::string& name, const std::string& target) {
  // PEFT's check_target_module_exists for a list: `key == target or key.endswith("." + target)`.
  if (name == target) return true;
  return name.size() > target.size() && name.compare(name.size() - target.size(), target.size(), target) == 0 &&
         name[name.size() - target.size() - 1] == '.';
}

}  // namespace

void NetworkBuilder::enable_lora(const LoraSpec& spec, std::vector<std::string> targets, std::string output_layer) {
  if (!weights_.empty() || !ops_.empty()) throw std::logic_error("NetworkBuilder: enable LoRA before building the model");
  lora_ = spec;
  lora_targets_ = std::move(targets);
  lora_target_used_.assign(lora_targets_.size(), false);
  lora_output_layer_ = std::move(output_layer);
}

void NetworkBuilder::check_lora_targets() const {
  for (std::size_t i = 0; i < lora_targets_.size(); ++i) {
    if (!lora_target_used_[i]) {
      throw InputError("lora.targets: '" + lora_targets_[i] + "' names no linear layer of '" + model_ +
                       "' (PEFT matches module names ending in it, e.g. q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
                       "down_proj for LLaMA; query_key_value, dense, dense_h_to_4h, dense_4h_to_h for GPT-NeoX)");
    }
  }
  bool any = false;
  for (const TensorRecord& t : tensors_) any = any || (t.role == traces::TensorRole::weight && t.requires_grad);
  if (!any) throw InputError("lora: no linear layer of '" + model_ + "' is targeted; expected targets naming some");
}

Value NetworkBuilder::lora_linear(const std::string& name, Value x, std::int64_t out_features, bool bias) {
  const bool output_layer = name == lora_output_layer_;
  Value y;
  if (lora_->nf4 && !output_layer) {
    // transformers' bitsandbytes integration replaces every nn.Linear but the output embedding
    // (get_keys_to_not_convert keeps lm_head in 16 bits); embeddings and norms stay 16-bit.
    y = nf4_linear(name, x, out_features, bias);
  } else {
    const Value weight = parameter(name + ".weight", {out_features, dim(x, -1)});
    const std::optional<Value> b = bias ? std::optional(parameter(name + ".bias", {out_features})) : std::nullopt;
    y = linear(name, x, weight, b);
  }
  // target_modules="all-linear": every nn.Linear but the output layer (PEFT's
  // _maybe_include_all_linear_layers); a list: the names ending in one of its entries.
  bool targeted = lora_->all_linear && !output_layer;
  for (std::size_t i = 0; i < lora_targets_.size(); ++i) {
    if (ends_with_module(name, lora_targets_[i])) {
      lora_target_used_[i] = true;
      targeted = true;
    }
  }
  return targeted ? lora_adapters(name, x, y) : y;
}

Value NetworkBuilder::lora_adapters(const std::string& name, Value x, Value base_out) {
  // The adapter dtype: fp32 for a 16-bit model (autocast_adapter_dtype), the model's otherwise.
  const DType adapter = compute_dtype() == DType::f16 || compute_dtype() == DType::bf16 ? DType::f32 : compute_dtype();
  const std::int64_t in_features = dim(x, -1);
  const std::int64_t out_features = dim(base_out, -1);
  Value h = to_dtype(name + ".lora_input.to", x, adapter);  // _cast_input_dtype: x.to(lora_A.weight.dtype)
  if (lora_->dropout > 0) h = dropout(name + ".lora_dropout.default", h);
  const Value a = new_parameter(name + ".lora_A.default.weight", {lora_->rank, in_features}, adapter, true);
  const Value b = new_parameter(name + ".lora_B.default.weight", {out_features, lora_->rank}, adapter, true);
  h = linear(name + ".lora_A.default", h, a, std::nullopt);
  h = linear(name + ".lora_B.default", h, b, std::nullopt);
  h = scale(name + ".scaling", h);  // * scaling, a Python float: MulBackward0 keeps only the number
  const Value summed = add(name + ".lora_add", base_out, h);  // bf16 + fp32 promotes to fp32
  return to_dtype(name + ".lora_output.to", summed, dtype(base_out));  // result.to(torch_result_dtype)
}

Value NetworkBuilder::nf4_linear(const std::string& name, Value x, std::int64_t out_features, bool bias) {
  const std::int64_t in_features = dim(x, -1);
  const std::int64_t n = multiply_or_throw(out_features, in_features, kArithmetic);
  const std::int64_t blocks = ceil_div(n, kNf4Block);
  // Params4bit's data: quantize_4bit's `out = torch.zeros(((n + 1) // 2, 1), dtype=torch.uint8)`.
  const Value packed = new_parameter(name + ".weight", {ceil_div(n, 2)}, DType::u8, false);
  const Value absmax = new_parameter(name + ".weight.absmax", {blocks}, DType::u8, false);
  const Value absmax2 = new_parameter(name + ".weight.state2.absmax", {ceil_div(blocks, kAbsmaxBlock)}, DType::f32, false);
  const Value state = new_parameter(name + ".weight.quant_state", {1 + kNf4CodeValues}, DType::f32, false);  // offset, NF4 code
  if (!nf4_dynamic_map_) nf4_dynamic_map_ = new_parameter("bitsandbytes.dynamic_map", {kDynamicMapValues}, DType::f32, false).index;
  // Linear4bit keeps its bias as an ordinary (frozen) 16-bit parameter.
  std::optional<std::size_t> b;
  if (bias) b = parameter(name + ".bias", {out_features}).index;

  const std::string op = unique_op_name(name);
  std::vector<std::int64_t> shape = sample_shape(x);
  shape.back() = out_features;
  const DType weight_dtype = compute_dtype();  // quant_state.dtype: what the weight was loaded in
  const std::size_t y = new_output(op + ".out", dtype(x), shape, tensors_[x.index].batch_dim, true);
  const std::size_t absmax_fp32 = new_output(op + ".absmax_fp32", DType::f32, {blocks}, std::nullopt, false);
  const std::size_t dequantized = new_output(op + ".dequantized", weight_dtype, {out_features, in_features}, std::nullopt, false);
  const BatchLinear macs = scaled(elements(y), in_features);
  const BatchLinear dequant{add_or_throw(multiply_or_throw(n, kDequantFlopsPerWeight, kArithmetic),
                                         multiply_or_throw(blocks, kDequantFlopsPerBlock, kArithmetic), kArithmetic),
                            0};
  const BatchLinear bias_flops = bias ? elements(y) : BatchLinear{};

  ForwardOp f;
  f.name = op;
  f.kind = OpKind::linear;
  f.inputs = {x.index, packed.index, absmax.index, absmax2.index, state.index, *nf4_dynamic_map_};
  if (b) f.inputs.push_back(*b);
  f.outputs = {y, absmax_fp32, dequantized};  // the two dequantised temporaries die with the op
  f.flops = sum(sum(scaled(macs, 2), dequant), bias_flops);
  f.differentiable_outputs = {y};
  // MatMul4Bit saves the packed weight (and the quant state with it), never the input.
  f.reads = {packed.index, absmax.index, absmax2.index, state.index, *nf4_dynamic_map_};
  f.grads = {{x.index, {}}};
  if (requires_grad(x.index)) {
    // grad_A = grad_output @ dequantize_4bit(B).t(): the same two temporaries again.
    f.backward_scratch = {new_output(op + ".backward.absmax_fp32", DType::f32, {blocks}, std::nullopt, false),
                          new_output(op + ".backward.dequantized", weight_dtype, {out_features, in_features}, std::nullopt, false)};
  }
  f.backward_flops = sum(scaled(macs, 2), dequant);
  f.backward_kind = OpKind::linear;
  record(std::move(f));
  return {y};
}

}  // namespace comptrain::zoo::detail

namespace comptrain::zoo::detail {

void configure_lora(NetworkBuilder& nb, const LoraSpec& spec, const DecoderArchitecture& arch, Precision precision,
                    std::map<std::string, std::string>& metadata) {
  if (spec.rank < 1) throw InputError("lora.rank: must be >= 1, got " + std::to_string(spec.rank));
  if (!(spec.dropout >= 0 && spec.dropout < 1)) {
    throw InputError("lora.dropout: must be in [0, 1), got " + std::to_string(spec.dropout));
  }
  if (precision == Precision::mixed) {
    throw InputError("lora: precision 'mixed' (Megatron's fp32 master weights) is not modelled with LoRA; expected bf16 or fp16 "
                     "(PEFT on a 16-bit model), amp-bf16, amp-fp16 or fp32");
  }
  if (spec.nf4 && precision != Precision::bf16 && precision != Precision::fp16) {
    throw InputError("lora.base: nf4 is modelled on a 16-bit model (precision bf16 or fp16: torch_dtype and "
                     "bnb_4bit_compute_dtype alike), not '" + std::string(to_string(precision)) + "'");
  }
  std::vector<std::string> targets = spec.targets;
  if (targets.empty() && !spec.all_linear) {
    // PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
    // (huggingface/peft@00073fe85ca790515f0b70caa69bea4c477d9db7, src/peft/utils/constants.py).
    // qwen3 is there (q_proj, v_proj); qwen2_moe, qwen3_moe and olmoe are not.
    if (arch.family == "llama" || arch.family == "mistral" || arch.family == "qwen2" || arch.family == "qwen3" || arch.family == "mixtral") {
      targets = {"q_proj", "v_proj"};
    } else if (arch.family == "gpt_neox") {
      targets = {"query_key_value"};
    } else {
      throw InputError("lora.targets: PEFT has no default target modules for model_type '" + arch.family +
                       "'; expected a list (e.g. [q_proj, k_proj, v_proj, o_proj]) or all-linear");
    }
  }
  metadata["lora_rank"] = std::to_string(spec.rank);
  std::string names;
  for (const std::string& t : targets) names += (names.empty() ? "" : ",") + t;
  metadata["lora_targets"] = spec.all_linear ? "all-linear" : names;
  if (spec.dropout > 0) metadata["lora_dropout"] = std::to_string(spec.dropout);
  if (spec.nf4) metadata["lora_base"] = "nf4";
  nb.enable_lora(spec, std::move(targets), arch.family == "gpt_neox" ? "embed_out" : "lm_head");
}

}  // namespace comptrain::zoo::detail

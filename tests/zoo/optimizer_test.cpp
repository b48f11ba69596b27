// The optimizers outside torch.optim (bitsandbytes' 8-bit and paged AdamW, Hugging Face's
// Adafactor) and the step in the backward pass (torchtune's optimizer_in_bwd): their state bytes
// per parameter, worked out by hand from the libraries' code (traces/zoo/src/optimizers.cpp
// cites it), and when the gradients live.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "comptrain/support/input_error.hpp"
#include "comptrain/traces/liveness.hpp"
#include "comptrain/traces/summary.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "zoo_test_support.hpp"

namespace comptrain::zoo {
namespace {

using test_support::Request;
using traces::DType;
using traces::Phase;
using traces::TensorRole;
using traces::Trace;

// A one-layer GPT, hidden 64, 4 heads, sequence 16, vocabulary 100: its weights are
//   wte [100, 64] = 6400, wpe [16, 64] = 1024, per layer ln_1 and ln_2 (weight, bias) [64],
//   c_attn [192, 64] = 12288 + bias 192, attention c_proj [64, 64] = 4096 + bias 64,
//   c_fc [256, 64] = 16384 + bias 256, mlp c_proj [64, 256] = 16384 + bias 64, ln_f [64] x 2.
ModelRequest small_gpt(Optimizer optimizer, Precision precision = Precision::fp32) {
  return Request("gpt").layers(1).hidden(64).heads(4).seq_len(16).vocab(100).precision(precision).optimizer(optimizer);
}

std::map<std::string, std::int64_t> state_bytes_by_weight(const Trace& trace) {
  std::map<std::string, std::int64_t> bytes;
  for (const auto& tensor : trace.tensors()) {
    if (tensor.role != TensorRole::optimizer_state || tensor.is_view()) continue;
    const auto dot = tensor.name.find(".weight.") != std::string::npos ? tensor.name.find(".weight.") + 7
                     : tensor.name.find(".bias.") != std::string::npos  ? tensor.name.find(".bias.") + 5
                                                                        : std::string::npos;
    bytes[dot == std::string::npos ? tensor.name : tensor.name.substr(0, dot)] += tensor.bytes();
  }
  return bytes;
}

// bitsandbytes' AdamW8bit: a parameter of at least 4096 elements keeps two uint8 states of its
// size and two fp32 absmax vectors of one value per block of 256; a smaller one two fp32 states.
// The two shared 256-entry fp32 quantisation maps count once.
TEST(Optimizers, AdamW8bitStateBytes) {
  for (const Optimizer optimizer : {Optimizer::adam8bit, Optimizer::adamw8bit, Optimizer::paged_adamw8bit}) {
    SCOPED_TRACE(std::string(to_string(optimizer)));
    const Trace trace = build_model(small_gpt(optimizer));
    const auto bytes = state_bytes_by_weight(trace);
    // wte: 6400 elements, 25 blocks: 2 x 6400 + 2 x 4 x 25 = 13000.
    EXPECT_EQ(bytes.at("transformer.wte.weight"), 13000);
    // wpe: 1024 < 4096 elements: 2 x 4 x 1024 = 8192.
    EXPECT_EQ(bytes.at("transformer.wpe.weight"), 8192);
    // c_attn: 12288 elements, 48 blocks: 2 x 12288 + 8 x 48 = 24960; its bias [192]: 8 x 192 = 1536.
    EXPECT_EQ(bytes.at("transformer.h.0.attn.c_attn.weight"), 24960);
    EXPECT_EQ(bytes.at("transformer.h.0.attn.c_attn.bias"), 1536);
    // The attention's c_proj: exactly 4096 elements is 8-bit (numel < 4096 is not): 8192 + 8 x 16 = 8320.
    EXPECT_EQ(bytes.at("transformer.h.0.attn.c_proj.weight"), 8320);
    // The maps: 2 x 256 x 4.
    EXPECT_EQ(bytes.at("optimizer.qmap.dynamic") + bytes.at("optimizer.qmap.udynamic"), 2048);
    // The whole model: weights of 16384 elements (c_fc, mlp c_proj) 2 x 16384 + 8 x 64 = 33280
    // each; the 7 vectors of 64 (ln_1, ln_2, ln_f weight and bias, and two c_proj biases...) and
    // the others as above.
    const std::int64_t vectors = 64 * 8 + 192 + 256;  // ln_1, ln_2, ln_f (x2 each), 2 c_proj biases; c_attn and c_fc biases
    const std::int64_t expected = 13000 + 8192 + 24960 + 8320 + 2 * 33280 + 8 * vectors + 2048;
    EXPECT_EQ(traces::at(traces::summarize(trace).allocated_by_role, TensorRole::optimizer_state), expected);
    for (const auto& tensor : trace.tensors()) {
      if (tensor.name.ends_with(".state1") || tensor.name.ends_with(".state2")) {
        EXPECT_EQ(tensor.dtype, tensor.elements() >= 4096 ? DType::u8 : DType::f32) << tensor.name;
      }
      // One fused kernel: the step allocates nothing.
      if (tensor.producer) {
        EXPECT_NE(trace.op(*tensor.producer).phase, Phase::optimizer) << tensor.name;
      }
    }
  }
}

// PagedAdamW: fp32 states whatever the parameter's size; the states of 100000 elements or more
// are in managed memory (named .paged), counted as GPU memory all the same.
TEST(Optimizers, PagedAdamWStateBytes) {
  ModelRequest request = small_gpt(Optimizer::paged_adamw, Precision::bf16);
  request.vocab = 2000;  // wte [2000, 64] = 128000 elements >= 100000
  const Trace trace = build_model(request);
  const std::int64_t parameters = traces::summarize(trace).parameters;
  // 8 bytes per parameter: two fp32 states, even for a bf16 model (get_state_buffer's float32).
  EXPECT_EQ(traces::at(traces::summarize(trace).allocated_by_role, TensorRole::optimizer_state), 8 * parameters);
  int paged = 0;
  for (const auto& tensor : trace.tensors()) {
    if (tensor.name.ends_with(".paged")) {
      ++paged;
      EXPECT_EQ(tensor.elements(), 128000) << tensor.name;
    }
  }
  EXPECT_EQ(paged, 2);  // wte's state1 and state2
}

// Hugging Face's Adafactor with its defaults: a matrix [R, C] keeps exp_avg_sq_row [R] and
// exp_avg_sq_col [C] in fp32, a vector [n] a full exp_avg_sq; no first moment.
TEST(Optimizers, AdafactorStateBytes) {
  for (const Precision precision : {Precision::fp32, Precision::bf16, Precision::amp_fp16}) {
    SCOPED_TRACE(std::string(to_string(precision)));
    const Trace trace = build_model(small_gpt(Optimizer::adafactor, precision));
    const auto bytes = state_bytes_by_weight(trace);
    EXPECT_EQ(bytes.at("transformer.wte.weight"), 4 * (100 + 64));
    EXPECT_EQ(bytes.at("transformer.h.0.attn.c_attn.weight"), 4 * (192 + 64));
    EXPECT_EQ(bytes.at("transformer.h.0.mlp.c_fc.weight"), 4 * (256 + 64));
    EXPECT_EQ(bytes.at("transformer.h.0.attn.c_attn.bias"), 4 * 192);
    // The model: wte 164, wpe 16 + 64, c_attn 256, attention c_proj 128, c_fc 320, mlp c_proj
    // 64 + 256 = 320 factor entries; the vectors as for 8-bit Adam (8 x 64 + 192 + 256 = 960).
    const std::int64_t entries = 164 + 80 + 256 + 128 + 320 + 320 + 960;
    EXPECT_EQ(traces::at(traces::summarize(trace).allocated_by_role, TensorRole::optimizer_state), 4 * entries);
    // Each step allocates two fp32 parameter-sized tensors (the update and its negation), plus
    // fp32 copies of a 16-bit gradient and parameter.
    for (const auto& op : trace.ops()) {
      if (op.name != "optimizer.transformer.wte.weight") continue;
      const std::size_t expected = precision == Precision::bf16 ? 4 : 2;
      ASSERT_EQ(op.outputs.size(), expected);
      for (const auto output : op.outputs) EXPECT_EQ(trace.tensor(output).bytes(), 4 * 6400);
    }
  }
}

TEST(Optimizers, Names) {
  EXPECT_EQ(parse_optimizer("adamw8bit"), Optimizer::adamw8bit);
  EXPECT_EQ(parse_optimizer("adamw_bnb_8bit"), Optimizer::adamw8bit);  // Hugging Face's TrainingArguments.optim
  EXPECT_EQ(parse_optimizer("paged_adamw_32bit"), Optimizer::paged_adamw);
  EXPECT_EQ(parse_optimizer("paged_adamw_8bit"), Optimizer::paged_adamw8bit);
  EXPECT_EQ(parse_optimizer("adafactor"), Optimizer::adafactor);
  EXPECT_FALSE(parse_optimizer("adam9bit"));
  EXPECT_TRUE(is_torch_optimizer(Optimizer::adamw));
  EXPECT_FALSE(is_torch_optimizer(Optimizer::adafactor));
}

// torchtune's optimizer_in_bwd: each weight steps as soon as its gradient is complete, and the
// gradient is freed right after, so the whole gradient set is never live at once.
TEST(Optimizers, StepInBackward) {
  ModelRequest request = small_gpt(Optimizer::adamw, Precision::bf16);
  request.layers = 2;
  request.optimizer_impl = OptimizerImpl::fused;
  request.optimizer_in_backward = true;
  const Trace trace = build_model(request);
  EXPECT_EQ(trace.metadata().at("optimizer_in_backward"), "true");
  EXPECT_FALSE(traces::gradients_held_to_end(trace));
  std::vector<traces::OpIndex> order(trace.ops().size());
  std::iota(order.begin(), order.end(), traces::OpIndex{0});
  // Each weight's step comes after every op writing its gradient, and a backward op follows it
  // (the first layer's weights step while the backward pass goes on; only the embeddings' steps
  // can end the iteration).
  std::size_t first_step = trace.ops().size();
  std::size_t last_backward = 0;
  for (const auto& op : trace.ops()) {
    if (op.phase == Phase::optimizer) first_step = std::min<std::size_t>(first_step, op.id);
    if (op.phase == Phase::backward) last_backward = op.id;
  }
  EXPECT_LT(first_step, last_backward);
  const traces::Liveness liveness = traces::compute_liveness(trace, order);
  const std::int64_t all_gradients = traces::at(traces::summarize(trace).allocated_by_role, TensorRole::gradient);
  EXPECT_EQ(all_gradients, 2 * traces::summarize(trace).parameters);  // bf16
  std::int64_t peak = 0;
  for (const auto& live : liveness.live_by_step) peak = std::max(peak, traces::at(live, TensorRole::gradient));
  EXPECT_LT(peak, all_gradients);
  // The states are those of fused AdamW (two bf16 moments), and each step reads its gradient last.
  EXPECT_EQ(traces::at(traces::summarize(trace).allocated_by_role, TensorRole::optimizer_state), 4 * traces::summarize(trace).parameters);
  // The last reader of each gradient storage (over its views: the in-place sums of a tied
  // weight's parts) is an optimizer op.
  std::map<traces::TensorIndex, traces::OpIndex> last_reader;
  for (const auto& tensor : trace.tensors()) {
    if (tensor.role != TensorRole::gradient) continue;
    for (const auto consumer : tensor.consumers) {
      auto& last = last_reader[trace.storage_of(tensor.id)];
      last = std::max(last, consumer);
    }
  }
  EXPECT_FALSE(last_reader.empty());
  for (const auto& [storage, reader] : last_reader) EXPECT_EQ(trace.op(reader).phase, Phase::optimizer) << trace.tensor(storage).name;

  // Without it, every gradient is live at the step.
  request.optimizer_in_backward = false;
  const Trace after = build_model(request);
  const traces::Liveness held = traces::compute_liveness(after, order);
  std::int64_t held_peak = 0;
  for (const auto& live : held.live_by_step) held_peak = std::max(held_peak, traces::at(live, TensorRole::gradient));
  EXPECT_EQ(held_peak, all_gradients);
}

}  // namespace
}  // namespace comptrain::zoo

// LoRA and QLoRA (issue 31, item 5): trainable and frozen bytes, adapter parameter counts as
// PEFT prints them, the saved bytes of a LoRA layer by hand, bitsandbytes' NF4 storage, and the
// errors.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "comptrain/support/input_error.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "zoo_test_support.hpp"

namespace comptrain::zoo {
namespace {

using testing::HasSubstr;
using traces::DType;
using traces::Phase;
using traces::TensorRole;
using traces::Trace;

std::string read_config(const std::string& name) {
  const std::string path = std::string(COMPTRAIN_HF_CONFIG_DIR) + "/" + name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

ModelRequest llama2_7b(LoraSpec lora, Precision precision = Precision::bf16) {
  ModelRequest request;
  static_cast<ModelSpec&>(request) = spec_from_hf_config(read_config("llama-2-7b.json"), "llama-2-7b.json");
  request.seq_len = 16;
  request.precision = precision;
  request.optimizer = Optimizer::adamw;
  request.lora = std::move(lora);
  return request;
}

bool is_adapter(const std::string& name) {
  return name.find(".lora_A.default.weight") != std::string::npos || name.find(".lora_B.default.weight") != std::string::npos;
}

struct Counts {
  std::int64_t trainable = 0;  // adapter parameters
  std::int64_t adapter_bytes = 0;
  std::int64_t frozen_bytes = 0;  // every other weight-role storage
};

Counts count(const Trace& trace) {
  Counts c;
  for (const auto& t : trace.tensors()) {
    if (t.is_view() || t.role != TensorRole::weight) continue;
    if (is_adapter(t.name)) {
      c.trainable += t.elements();
      c.adapter_bytes += t.bytes();
    } else {
      c.frozen_bytes += t.bytes();
    }
  }
  return c;
}

// Llama-2-7B: 6,738,415,616 parameters (decoder_test.cpp: the Hub's index, 13,476,839,424 B
// less the inv_freq buffers, / 2). PEFT's LoraConfig(r=8, target_modules=[q_proj, v_proj]) on
// it prints "trainable params: 4,194,304 || all params: 6,742,609,920": per layer q and v,
// each A 8 x 4096 + B 4096 x 8 = 65,536, so 32 x 2 x 65,536 = 4,194,304. bf16 model: the
// frozen weights 2 bytes each; the adapters upcast to fp32 (autocast_adapter_dtype), their
// gradients fp32 and AdamW's two moments fp32 (zeros_like), nothing for the frozen ones.
TEST(Lora, Llama2_7B_Rank8QV_TrainsWhatPeftPrints) {
  LoraSpec lora;
  lora.rank = 8;
  const Trace trace = build_model(llama2_7b(lora));
  const Counts c = count(trace);
  const std::int64_t adapters = 32 * 2 * (8 * 4096 + 4096 * 8);
  EXPECT_EQ(adapters, 4'194'304);
  EXPECT_EQ(c.trainable, 4'194'304);
  EXPECT_EQ(c.adapter_bytes, 4 * 4'194'304);
  EXPECT_EQ(c.frozen_bytes, 2 * std::int64_t{6'738'415'616});
  const auto resident = test_support::resident_bytes(trace);
  EXPECT_EQ(resident.parameters, 6'742'609'920);
  EXPECT_EQ(resident.gradient, 4 * 4'194'304);
  EXPECT_EQ(resident.optimizer_state, 2 * 4 * 4'194'304);
  EXPECT_EQ(trace.metadata().at("lora_targets"), "q_proj,v_proj");
  // No optimizer op touches a frozen weight.
  for (const auto& op : trace.ops()) {
    if (op.phase != Phase::optimizer) continue;
    for (const auto input : op.inputs) {
      const auto& t = trace.tensor(trace.storage_of(input));
      if (t.role == TensorRole::weight) {
        EXPECT_TRUE(is_adapter(t.name)) << op.name << " reads " << t.name;
      }
    }
  }
}

// all-linear, rank 16: every q, k, v, o (4096 x 4096) and gate, up (4096 -> 11008), down
// (11008 -> 4096) per layer, not lm_head: r·(in + out) each,
// 16·(4·8192 + 3·15104) = 16·78,080 = 1,249,280 per layer, x 32 = 39,976,960.
TEST(Lora, AllLinearSkipsTheOutputLayer) {
  LoraSpec lora;
  lora.rank = 16;
  lora.all_linear = true;
  const Counts c = count(build_model(llama2_7b(lora)));
  EXPECT_EQ(c.trainable, 32 * 16 * (4 * (4096 + 4096) + 3 * (4096 + 11008)));
  EXPECT_EQ(c.trainable, 39'976'960);
}

// A small decoder for the saved bytes (the shape of decoder_test.cpp's).
struct Shape {
  std::int64_t s = 40;
  std::int64_t h = 64;
  std::int64_t a = 4;
  std::int64_t i = 176;
  std::int64_t v = 1000;
  std::int64_t r = 8;
};

ModelRequest small(const Shape& shape, std::int64_t layers, double dropout) {
  DecoderArchitecture arch;
  arch.layers = layers;
  arch.hidden = shape.h;
  arch.heads = shape.a;
  arch.kv_heads = shape.a;
  arch.intermediate = shape.i;
  arch.vocab = shape.v;
  arch.max_positions = 4096;
  ModelRequest request = test_support::Request("llama").batch_size(2).precision(Precision::bf16).seq_len(shape.s).attention(Attention::flash);
  request.decoder = arch;
  LoraSpec lora;
  lora.rank = shape.r;
  lora.dropout = dropout;
  request.lora = lora;
  return request;
}

// What a LoRA layer (q, v targeted, bf16 model, flash attention) keeps for backward, per sample,
// by hand. The frozen linears save only their weights (no input: no weight gradient), and the
// RMSNorms with frozen weights do not keep their normalised rows:
//   two RMSNorms: the fp32 input 4·sh and the fp32 rsqrt per row 4·s each      8·sh + 8·s
//   q and v adapters: x cast to fp32 for lora_A 4·sh, lora_A's fp32 output [s, r] for lora_B
//     4·sr, each                                                              8·sh + 8·sr
//   the flash kernel: q, k, v and its output 2·sh each, the fp32 log-sum-exp 4·as  8·sh + 4·as
//   SwiGLU: SiLU's input (gate output), SiLU's output and up's output 2·si each     6·si
// = 24·sh + 8·s + 8·sr + 4·as + 6·si (full fine-tuning keeps 26·sh + 8·si + ...: the norms'
// rows and every projection's input). With lora_dropout > 0 each adapter's dropout keeps its
// bool mask (1·sh) and lora_A its fp32 output (the 4·sh it kept of the cast before): + 2·sh.
TEST(Lora, SavedBytesOfALayerByHand) {
  const Shape shape;
  const auto [s, h, a, i, r] = std::tuple{shape.s, shape.h, shape.a, shape.i, shape.r};
  for (const double dropout : {0.0, 0.05}) {
    const auto one = test_support::saved_for_backward(build_model(small(shape, 1, dropout)));
    const auto two = test_support::saved_for_backward(build_model(small(shape, 2, dropout)));
    const std::int64_t extra = dropout > 0 ? 2 * s * h : 0;
    EXPECT_EQ(two.per_sample - one.per_sample, 24 * s * h + 8 * s + 8 * s * r + 4 * a * s + 6 * s * i + extra) << dropout;
    EXPECT_EQ(two.fixed - one.fixed, 0) << dropout;
    // The first layer's input needs no gradient (the embedding is frozen), so its first RMSNorm
    // records no autograd node (4·sh + 4·s less), nor do the adapters' dropouts, whose input
    // needs none either: no masks (lora_A still keeps the dropout's fp32 output). The head: the
    // final RMSNorm 4·sh + 4·s, no input of the frozen lm_head, the fp32 log-probabilities 4·sv
    // and the int64 labels 8·s (the ids are not kept: the frozen embedding has no node either).
    const std::int64_t layer0 = 24 * s * h + 8 * s + 8 * s * r + 4 * a * s + 6 * s * i - (4 * s * h + 4 * s);
    EXPECT_EQ(one.per_sample, layer0 + 4 * s * h + 4 * s + 4 * s * shape.v + 8 * s) << dropout;
  }
}

// QLoRA: Llama-2-7B in NF4 (bitsandbytes' quantize_4bit with double quantisation), adapters
// as above. Each of the 7 linears of a layer with n = out x in weights stores n / 2 bytes of
// packed codes, n / 64 uint8 absmax values, one fp32 per 256 of those and 17 fp32 (offset and
// the NF4 code); q, k, v, o have n = 4096² = 16,777,216: 8,388,608 + 262,144 + 4·1,024 + 68;
// gate, up, down n = 4096·11008 = 45,088,768: 22,544,384 + 704,512 + 4·2,752 + 68. The shared
// 256-entry fp32 dynamic map once. 16-bit: the embedding and lm_head 32000·4096 each, 65 RMSNorm
// weights of 4096 (2 per layer and the final one), 2 bytes each.
TEST(Qlora, Nf4StorageByHand) {
  LoraSpec lora;
  lora.rank = 8;
  lora.nf4 = true;
  const Trace trace = build_model(llama2_7b(lora));
  const std::int64_t square = 8'388'608 + 262'144 + 4 * 1'024 + 68;
  const std::int64_t wide = 22'544'384 + 704'512 + 4 * 2'752 + 68;
  const std::int64_t quantized = 32 * (4 * square + 3 * wide) + 4 * 256;
  const std::int64_t sixteen_bit = 2 * (2 * 32'000 * 4096 + 65 * 4096);
  const Counts c = count(trace);
  EXPECT_EQ(c.frozen_bytes, quantized + sixteen_bit);
  EXPECT_EQ(c.trainable, 4'194'304);
  // The paper's 4.127 bits per parameter (Dettmers et al. 2023, §3: 4 + 8/64 + 32/(64·256)).
  const double linear_weights = 32.0 * (4 * 16'777'216.0 + 3 * 45'088'768.0);
  EXPECT_NEAR(8.0 * static_cast<double>(quantized) / linear_weights, 4.127, 0.001);
  // q_proj dequantises its weight into a 16-bit [4096, 4096] temporary in forward and again in
  // backward, and keeps nothing of its input.
  bool forward_temp = false;
  bool backward_temp = false;
  for (const auto& op : trace.ops()) {
    if (op.name.rfind("model.layers.1.self_attn.q_proj", 0) != 0) continue;
    for (const auto output : op.outputs) {
      const auto& t = trace.tensor(output);
      if (t.name.find("dequantized") == std::string::npos) continue;
      EXPECT_EQ(t.dtype, DType::bf16);
      EXPECT_EQ(t.bytes(), 2 * 16'777'216);
      (op.phase == Phase::forward ? forward_temp : backward_temp) = true;
    }
  }
  EXPECT_TRUE(forward_temp);
  EXPECT_TRUE(backward_temp);
}

// Other architectures, trainable parameters by hand (r = 8):
// - Mixtral-8x7B (hidden 4096, 8 K/V heads of 128: k, v 4096 -> 1024), one layer: PEFT's default
//   q, v: 8·(4096 + 4096) + 8·(4096 + 1024) = 106,496; all-linear adds k, o, the router gate
//   (4096 -> 8) and the 8 experts' w1, w3 (4096 -> 14336) and w2: 8·(2·8192 + 2·5120 + 4104 +
//   24·18432) = 3,784,768.
// - Pythia-160M (GPT-NeoX: hidden 768, 12 layers, fused query_key_value 768 -> 2304 with a
//   frozen bias, LayerNorm, parallel residual): PEFT's default query_key_value,
//   12·8·(768 + 2304) = 294,912.
ModelRequest config(const std::string& name, std::optional<std::int64_t> layers, LoraSpec lora) {
  ModelRequest request;
  static_cast<ModelSpec&>(request) = spec_from_hf_config(read_config(name), name);
  request.seq_len = 16;
  request.layers = layers;
  request.precision = Precision::bf16;
  request.lora = std::move(lora);
  return request;
}

TEST(Lora, MixtralAndGptNeox) {
  LoraSpec lora;
  EXPECT_EQ(count(build_model(config("mixtral-8x7b-v0.1.json", 1, lora))).trainable, 106'496);
  LoraSpec all = lora;
  all.all_linear = true;
  EXPECT_EQ(count(build_model(config("mixtral-8x7b-v0.1.json", 1, all))).trainable, 8 * (2 * 8192 + 2 * 5120 + 4104 + 24 * 18432));
  EXPECT_EQ(count(build_model(config("pythia-160m.json", std::nullopt, lora))).trainable, 12 * 8 * (768 + 2304));
}

// Under autocast (amp-bf16, an fp32 model) a frozen weight's bf16 copy is not cached (autocast
// caches leaves that require grad only) and its linear saves it for dX: per layer the 7 copies,
// q, k, v, o 4·64·64 and gate, up, down 3·64·176 elements, 2 bytes each = 100,352 fixed bytes
// (layer 1: in layer 0 the projections of the frozen embedding's stream have no autograd node).
TEST(Lora, AutocastKeepsTheFrozenWeightsCopies) {
  const auto fixed = [](std::int64_t layers) {
    ModelRequest request = small(Shape{}, layers, 0);
    request.precision = Precision::amp_bf16;
    return test_support::saved_for_backward(build_model(request)).fixed;
  };
  EXPECT_EQ(fixed(2) - fixed(1), 2 * (4 * 64 * 64 + 3 * 64 * 176));
}

TEST(Lora, Errors) {
  const auto message = [](const ModelRequest& request) {
    try {
      build_model(request);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  LoraSpec lora;
  ModelRequest gpt2 = test_support::Request("gpt2");
  gpt2.lora = lora;
  EXPECT_THAT(message(gpt2), HasSubstr("lora: LoRA is written for the decoders"));
  LoraSpec typo;
  typo.targets = {"q_proj", "v_prj"};
  EXPECT_THAT(message(llama2_7b(typo)), HasSubstr("lora.targets: 'v_prj' names no linear layer"));
  LoraSpec nf4;
  nf4.nf4 = true;
  EXPECT_THAT(message(llama2_7b(nf4, Precision::amp_bf16)), HasSubstr("lora.base: nf4"));
  EXPECT_THAT(message(llama2_7b(lora, Precision::mixed)), HasSubstr("lora: precision 'mixed'"));
  LoraSpec zero;
  zero.rank = 0;
  EXPECT_THAT(message(llama2_7b(zero)), HasSubstr("lora.rank: must be >= 1"));
  ModelRequest moe;
  static_cast<ModelSpec&>(moe) = spec_from_hf_config(read_config("qwen1.5-moe-a2.7b.json"), "qwen1.5-moe-a2.7b.json");
  moe.seq_len = 16;
  moe.lora = lora;
  EXPECT_THAT(message(moe), HasSubstr("lora.targets: PEFT has no default target modules for model_type 'qwen2_moe'"));
  // PEFT's mapping has qwen3 (q_proj, v_proj) but not qwen3_moe.
  ModelRequest qwen3;
  static_cast<ModelSpec&>(qwen3) = spec_from_hf_config(read_config("qwen3-0.6b.json"), "qwen3-0.6b.json");
  qwen3.seq_len = 16;
  qwen3.layers = 1;
  qwen3.lora = lora;
  EXPECT_EQ(build_model(qwen3).metadata().at("lora_targets"), "q_proj,v_proj");
  ModelRequest qwen3_moe;
  static_cast<ModelSpec&>(qwen3_moe) = spec_from_hf_config(read_config("qwen3-30b-a3b.json"), "qwen3-30b-a3b.json");
  qwen3_moe.seq_len = 16;
  qwen3_moe.lora = lora;
  EXPECT_THAT(message(qwen3_moe), HasSubstr("PEFT has no default target modules for model_type 'qwen3_moe'"));
}

}  // namespace
}  // namespace comptrain::zoo

// LLaMA-family decoders and Hugging Face configs (issue 19): parameter counts of the shipped
// configs against the published totals, saved bytes per layer against Korthikanti et al.'s
// formula adapted to LLaMA's blocks (eager) and its FlashAttention-reduced form, grouped-query
// attention, and the configs' errors.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "comptrain/support/input_error.hpp"
#include "comptrain/zoo/zoo.hpp"
#include "zoo_test_support.hpp"

namespace comptrain::zoo {
namespace {

using traces::TensorRole;
using traces::Trace;

std::int64_t parameters(const Trace& trace) {
  std::int64_t count = 0;
  for (const auto& tensor : trace.tensors()) {
    if (tensor.role == TensorRole::weight) count += tensor.elements();
  }
  return count;
}

std::string read_config(const std::string& name) {
  const std::string path = std::string(COMPTRAIN_HF_CONFIG_DIR) + "/" + name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

ModelRequest from_config(const std::string& name, std::int64_t seq_len) {
  ModelRequest request;
  static_cast<ModelSpec&>(request) = spec_from_hf_config(read_config(name), name);
  request.seq_len = seq_len;
  return request;
}

// Published exact totals. For the four 7-8B models: the Hugging Face Hub's
// model.safetensors.index.json, whose metadata.total_size is the bytes of every tensor the
// checkpoint stores; the weights are 16-bit (2 bytes per parameter). The Hub is not reachable
// from the build machine: each figure was read from a verbatim quotation of the index
// (scenarios/hf-configs/README.md names them). Where the quoted repository is a sibling of the
// shipped config's, the sibling has the same tensor shapes (say so below).
//   meta-llama/Llama-2-7b-hf: 13,476,839,424 B, which includes 32 rotary_emb.inv_freq buffers
//     (the index lists model.layers.N.self_attn.rotary_emb.inv_freq; 64 fp32 values each:
//     8,192 B), which are buffers, not parameters;
//   meta-llama/Meta-Llama-3-8B: 16,060,522,496 B;
//   mistralai/Mistral-7B-Instruct-v0.2: 14,483,464,192 B (v0.1's shapes: v0.2 changes only
//     rope_theta and the sliding window);
//   Qwen/Qwen2.5-7B-Instruct: 15,231,233,024 B (Qwen2-7B's shapes: hidden 3584, 28 layers, 28
//     heads, 4 KV heads, MLP 18944, vocabulary 152064, untied).
// Pythia-160M from the Pythia README's table (162,322,944 total, 85,056,000 non-embedding);
// GPT-2 and BERT-base (BertForPreTraining) as the zoo's own tests have them. Each is also
// computed by hand from its config in traces/zoo/README.md ("Parameter counts").
constexpr std::int64_t kBf16Bytes = 2;
constexpr std::int64_t kLlama2InvFreqBytes = 32 * 64 * 4;
TEST(HfConfig, ShippedConfigsHaveThePublishedParameterCounts) {
  EXPECT_EQ(parameters(build_model(from_config("llama-2-7b.json", 16))),
            (13'476'839'424 - kLlama2InvFreqBytes) / kBf16Bytes);
  EXPECT_EQ(parameters(build_model(from_config("llama-3-8b.json", 16))), 16'060'522'496 / kBf16Bytes);
  EXPECT_EQ(parameters(build_model(from_config("mistral-7b-v0.1.json", 16))), 14'483'464'192 / kBf16Bytes);
  EXPECT_EQ(parameters(build_model(from_config("qwen2-7b.json", 16))), 15'231'233'024 / kBf16Bytes);
  EXPECT_EQ(parameters(build_model(from_config("pythia-160m.json", 16))), 162'322'944);
  EXPECT_EQ(parameters(build_model(from_config("gpt2.json", 16))), 124'439'808);
  EXPECT_EQ(parameters(build_model(from_config("bert-base-uncased.json", 16))), 110'106'428);
}

// The configs aws-samples/awsome-distributed-training's FSDP test case builds (train_utils.py's
// LlamaConfig and MistralConfig from its sbatch shapes and arguments.py's defaults): the counts
// its sample logs print ("Created model with total parameters: ...", slurm/README.md@fbb28318;
// the Llama 3.1 8B one @bc1d5761).
TEST(HfConfig, TheAwsomeFsdpConfigsHaveTheirLogsParameterCounts) {
  EXPECT_EQ(parameters(build_model(from_config("awsome-llama-v2-7b.json", 16))), 6'889'410'560);
  EXPECT_EQ(parameters(build_model(from_config("awsome-mistral-7b.json", 16))), 7'248'023'552);
  EXPECT_EQ(parameters(build_model(from_config("awsome-llama-v3-8b.json", 16))), 7'392'727'040);
}

// Qwen3-0.6B (scenarios/hf-configs/qwen3-0.6b.json): heads of head_dim 128 where hidden / heads
// is 64, and Qwen3's q_norm and k_norm. By hand, per layer: q_proj 1024 x (16 x 128) = 2,097,152;
// k_proj and v_proj 1024 x (8 x 128) = 1,048,576 each; o_proj (16 x 128) x 1024 = 2,097,152;
// q_norm and k_norm 128 each; gate, up and down 3 x 1024 x 3072 = 9,437,184; two RMSNorms
// 2 x 1024: 15,730,944 in all; 28 layers: 440,466,432 (the model card's "Number of Parameters
// (Non-Embedding): 0.44B"); with the tied embedding 151,936 x 1024 = 155,582,464 and the final
// norm 1,024: 596,049,920 ("Number of Parameters: 0.6B"; huggingface.co/Qwen/Qwen3-0.6B).
TEST(HfConfig, Qwen3HasHeadsOfItsOwnWidthAndNormalisesQueriesAndKeys) {
  const Trace trace = build_model(from_config("qwen3-0.6b.json", 16));
  EXPECT_EQ(parameters(trace), 596'049'920);
  const auto shape_of = [&](const std::string& name) {
    for (const auto& tensor : trace.tensors()) {
      if (tensor.name == name) return tensor.shape;
    }
    return std::vector<std::int64_t>{};
  };
  EXPECT_EQ(shape_of("model.layers.0.self_attn.q_proj.weight"), (std::vector<std::int64_t>{2048, 1024}));
  EXPECT_EQ(shape_of("model.layers.0.self_attn.k_proj.weight"), (std::vector<std::int64_t>{1024, 1024}));
  EXPECT_EQ(shape_of("model.layers.0.self_attn.o_proj.weight"), (std::vector<std::int64_t>{1024, 2048}));
  EXPECT_EQ(shape_of("model.layers.0.self_attn.q_norm.weight"), (std::vector<std::int64_t>{128}));
  EXPECT_EQ(shape_of("model.layers.27.self_attn.k_norm.weight"), (std::vector<std::int64_t>{128}));
  // The norms' statistics are one per token and head: q_norm's rsqrt [1, 16 tokens, 16 heads, 1].
  EXPECT_EQ(shape_of("model.layers.0.self_attn.q_norm.rstd"), (std::vector<std::int64_t>{1, 16, 16, 1}));
  EXPECT_EQ(shape_of("model.layers.0.self_attn.k_norm.rstd"), (std::vector<std::int64_t>{1, 16, 8, 1}));
}

// gpt-oss-20b (scenarios/hf-configs/gpt-oss-20b.json): head_dim 64 on a 2880-wide model (q_proj
// 64 x 64 = 4096 wide), biases on the four attention projections, 64 sinks per layer, and 32
// experts per layer with biases. By hand: embedding and head 2 x 201,088 x 2880 = 1,158,266,880;
// attention per layer q 2880 x 4096 + 4096, k and v 2880 x 512 + 512 each, o 4096 x 2880 + 2880,
// sinks 64: 26,550,144 (x 24 = 637,203,456); experts per layer 32 x (2880 x 5760 + 5760 + 2880 x
// 2880 + 2880) = 796,538,880, router 2880 x 32 + 32 (x 24, with the router: 19,119,145,728); norms
// 24 x 2 x 2880 + 2880: 20,914,757,184 in all -- the 20.91B total of OpenAI's gpt-oss model card
// (arXiv 2508.10925, Table 1: MLP 19.12B, attention 0.64B, embedding and unembedding 1.16B).
TEST(HfConfig, GptOssHasSinksBiasedExpertsAndAlternatingSlidingWindows) {
  const Trace trace = build_model(from_config("gpt-oss-20b.json", 4096));
  EXPECT_EQ(parameters(trace), 20'914'757'184);
  const auto shape_of = [&](const std::string& name) {
    for (const auto& tensor : trace.tensors()) {
      if (tensor.name == name) return tensor.shape;
    }
    return std::vector<std::int64_t>{};
  };
  EXPECT_EQ(shape_of("model.layers.0.self_attn.q_proj.weight"), (std::vector<std::int64_t>{4096, 2880}));
  EXPECT_EQ(shape_of("model.layers.0.self_attn.o_proj.bias"), (std::vector<std::int64_t>{2880}));
  EXPECT_EQ(shape_of("model.layers.0.self_attn.sinks"), (std::vector<std::int64_t>{64}));
  EXPECT_EQ(shape_of("model.layers.3.mlp.experts.31.gate_up_proj.weight"), (std::vector<std::int64_t>{5760, 2880}));
  EXPECT_EQ(shape_of("model.layers.3.mlp.experts.31.down_proj.bias"), (std::vector<std::int64_t>{2880}));
  EXPECT_EQ(shape_of("model.layers.3.mlp.router.bias"), (std::vector<std::int64_t>{32}));
  // Layer 0 attends within 128 keys, layer 1 to the whole causal prefix of 4096: the kernel's
  // FLOPs (forward and backward) scale with the pairs, 128 x 129 / 2 + (4096 - 128) x 128 =
  // 516,160 against 4096 x 4097 / 2 = 8,390,656.
  const auto attention_op = [&](int layer) {
    for (const auto& op : trace.ops()) {
      if (op.name == "model.layers." + std::to_string(layer) + ".self_attn.scaled_dot_product_attention") return op;
    }
    ADD_FAILURE() << "no attention op in layer " << layer;
    return trace.ops().front();
  };
  const auto sliding = attention_op(0);
  const auto full = attention_op(1);
  EXPECT_EQ(sliding.flops.per_sample * 8'390'656, full.flops.per_sample * 516'160);
  EXPECT_GT(sliding.flops.per_sample, 0);
  // The sinks are an input of the kernel, whose backward gives their gradient.
  const auto sinks = std::find_if(trace.tensors().begin(), trace.tensors().end(),
                                  [](const auto& t) { return t.name == "model.layers.0.self_attn.sinks"; });
  ASSERT_NE(sinks, trace.tensors().end());
  const auto sinks_index = static_cast<std::size_t>(sinks - trace.tensors().begin());
  EXPECT_NE(std::find(sliding.inputs.begin(), sliding.inputs.end(), sinks_index), sliding.inputs.end());
  // Eager attention (its sinks concatenated to the S x S scores) is not written: an input error.
  ModelRequest eager = from_config("gpt-oss-20b.json", 64);
  eager.attention = Attention::eager;
  EXPECT_THAT([&] { build_model(eager); }, testing::ThrowsMessage<InputError>(testing::HasSubstr("expected flash")));
}

// The `llama` zoo entry without a config is Llama-2-7B.
TEST(HfConfig, LlamaEntryDefaultsToLlama2_7B) {
  ModelRequest request;
  request.model = "llama";
  request.seq_len = 16;
  const Trace trace = build_model(request);
  EXPECT_EQ(parameters(trace), 6'738'415'616);
  EXPECT_EQ(trace.metadata().at("attention"), "flash");
  // Meta's MLP width rule for another hidden size: int(2 * 4 * 2048 / 3) = 5461 -> 5632.
  request.hidden = 2048;
  request.heads = 16;
  request.layers = 1;
  EXPECT_EQ(build_model(request).metadata().at("intermediate"), "5632");
}

struct Shape {
  std::int64_t s = 40;  // not a multiple of 32: the memory-efficient kernel pads its log-sum-exp
  std::int64_t h = 64;
  std::int64_t a = 4;
  std::int64_t kv = 4;
  std::int64_t i = 176;
};

// Saved bytes of one layer per sample, and batch-independent, as the difference between a
// 2-layer and a 1-layer model.
std::pair<std::int64_t, std::int64_t> per_layer(const Shape& shape, Precision precision, Attention attention) {
  const auto build = [&](std::int64_t layers) {
    DecoderArchitecture arch;
    arch.layers = layers;
    arch.hidden = shape.h;
    arch.heads = shape.a;
    arch.kv_heads = shape.kv;
    arch.intermediate = shape.i;
    arch.vocab = 1000;
    arch.max_positions = 4096;
    ModelRequest request = test_support::Request("llama").batch_size(2).precision(precision).seq_len(shape.s).attention(attention);
    request.decoder = arch;
    return test_support::saved_for_backward(build_model(request));
  };
  const auto one = build(1);
  const auto two = build(2);
  return {two.per_sample - one.per_sample, two.fixed - one.fixed};
}

// Korthikanti et al. 2022 (arXiv 2205.05198, §4.1, Eq. 1) count, per layer of a 16-bit GPT,
// 34·sbh + 5·as²b bytes: attention 11·sbh + 5·as²b (QKV input 2, Q and K 4, V 2, output
// projection input 2, output dropout mask 1; softmax output 2, its dropout mask 1 and output 2),
// MLP 19·sbh (input 2, GELU input 8, fc2 input 8, dropout mask 1), two LayerNorm inputs 4·sbh.
// Adapted to Hugging Face's LLaMA block, model.bfloat16() (2-byte tensors), eager attention:
//   attention: QKV input 2, Q and K after the rotation 4, V's copy for matmul 2, o_proj input 2
//     = 10·sbh (no dropout, so no mask); softmax(dtype=torch.float32) keeps a 4-byte output and
//     its .to(bf16) copy, which the value matmul saves, 2: 6·as² for the paper's 5 (no mask);
//   MLP (SwiGLU, width I): input 2·sbh, gate output (SiLU's input), SiLU output, up output and
//     down_proj's input, 2·sbI each: 2·sbh + 8·sbI for the paper's 2·sbh + 16·sbh;
//   RMSNorm (twice): the fp32 copy of its input 4·sbh, the normalised bf16 rows 2·sbh and an fp32
//     rsqrt per row 4·sb: 12·sbh + 8·sb for the paper's 4·sbh;
// 24·sbh + 8·sbI + 6·as²b + 8·sb. Grouped K/V heads are repeated to every head before the
// matmuls (repeat_kv copies), so the same bytes.
TEST(DecoderSaved, EagerMatchesKorthikantiAdaptedToLlama) {
  for (const std::int64_t kv : {4, 2, 1}) {
    Shape shape;
    shape.kv = kv;
    const auto [s, h, a, i] = std::tuple{shape.s, shape.h, shape.a, shape.i};
    EXPECT_EQ(per_layer(shape, Precision::bf16, Attention::eager),
              std::pair(24 * s * h + 8 * s * i + 6 * a * s * s + 8 * s, std::int64_t{0}))
        << "kv heads " << kv;
    // amp-bf16 (an fp32 model under autocast): the residual stream is fp32, so each RMSNorm keeps
    // its fp32 input itself (4) and fp32 normalised rows (4); each projection casts the fp32 norm
    // output to bf16 on its own (q, k, v: 3 x 2; gate, up: 2 x 2); the rotation promotes q and k
    // to fp32 (cos and sin are fp32) and the score matmul saves their bf16 casts (2 + 2); V's copy
    // 2 and o_proj's input 2: 34·sbh, the paper's figure, by coincidence.
    EXPECT_EQ(per_layer(shape, Precision::amp_bf16, Attention::eager).first, 34 * s * h + 8 * s * i + 6 * a * s * s + 8 * s)
        << "kv heads " << kv;
  }
}

// The FlashAttention-reduced form: nothing S x S; the kernel keeps q, k, v, its output (which
// o_proj saves too: the same storage) and an fp32 log-sum-exp per row and head, 4·as·b. Under
// amp-bf16 with kv_heads = a: 34·sbh + 8·sbI + 8·sb + 4·asb. With grouped K/V the flash kernel
// keeps K and V at kv heads: (30 + 4·kv/a)·sbh. The memory-efficient kernel takes them repeated
// to every head and pads the log-sum-exp to 32 rows (s = 40 -> 64).
TEST(DecoderSaved, FlashAndMemEfficientDropTheQuadraticTerm) {
  for (const std::int64_t kv : {4, 2, 1}) {
    Shape shape;
    shape.kv = kv;
    const auto [s, h, a, i] = std::tuple{shape.s, shape.h, shape.a, shape.i};
    const std::int64_t common = 8 * s * i + 8 * s;
    EXPECT_EQ(per_layer(shape, Precision::amp_bf16, Attention::flash),
              std::pair(30 * s * h + 4 * s * h * kv / a + common + 4 * a * s, std::int64_t{0}))
        << "kv heads " << kv;
    EXPECT_EQ(per_layer(shape, Precision::amp_bf16, Attention::sdpa_mem_efficient),
              std::pair(34 * s * h + common + 4 * a * 64, std::int64_t{0}))
        << "kv heads " << kv;
    // Eager minus flash, multi-head: the S x S tensors for the log-sum-exp.
    if (kv == a) {
      EXPECT_EQ(per_layer(shape, Precision::amp_bf16, Attention::eager).first -
                    per_layer(shape, Precision::amp_bf16, Attention::flash).first,
                6 * a * s * s - 4 * a * s);
    }
  }
}

// The decoder's scaled_dot_product_attention is causal (is_causal=True): its FLOPs are those of
// the S(S + 1)/2 (query, key) pairs on or below the diagonal, per query head (grouped K/V heads
// change nothing). 4 heads of 16, 2 K/V heads, S = 32, one sample, no dropout, by hand: MACs
// 4·16·(32·33/2) = 33,792, scores 4·528 = 2,112; forward 2 GEMMs: 4·33,792 + 5·2,112 (softmax) =
// 145,728; backward 5 GEMMs: 10·33,792 + 4·2,112 = 346,368. The memory-efficient kernel the same.
TEST(DecoderFlops, CausalAttentionCountsThePairsOnOrBelowTheDiagonal) {
  for (const Attention attention : {Attention::flash, Attention::sdpa_mem_efficient}) {
    DecoderArchitecture arch;
    arch.layers = 1;
    arch.hidden = 64;
    arch.heads = 4;
    arch.kv_heads = attention == Attention::flash ? 2 : 4;
    arch.intermediate = 176;
    arch.vocab = 1000;
    arch.max_positions = 4096;
    ModelRequest request = test_support::Request("llama").batch_size(1).seq_len(32).attention(attention);
    request.decoder = arch;
    const Trace trace = build_model(request);
    std::int64_t forward = 0;
    std::int64_t backward = 0;
    for (const auto& op : trace.ops()) {
      if (op.kind != traces::OpKind::attention) continue;
      (op.phase == traces::Phase::forward ? forward : backward) += trace.flops(op.id);
    }
    EXPECT_EQ(forward, 145'728) << to_string(attention);
    EXPECT_EQ(backward, 346'368) << to_string(attention);
  }
}

// A two-layer GQA decoder (hidden 64, 4 heads, 2 KV heads, MLP 96, vocabulary 100) under
// `precision`, 2 sequences of 16 tokens, with the MLP activation `act` and, with `tie`, tied
// embeddings.
Trace small_decoder(DecoderArchitecture::Activation act, bool tie, Precision precision = Precision::amp_bf16) {
  DecoderArchitecture arch;
  arch.layers = 2;
  arch.hidden = 64;
  arch.heads = 4;
  arch.kv_heads = 2;
  arch.intermediate = 96;
  arch.vocab = 100;
  arch.activation = act;
  arch.tie_embeddings = tie;
  ModelRequest request = test_support::Request("llama").batch_size(2).precision(precision).seq_len(16);
  request.decoder = arch;
  return build_model(request);
}

// GeGLU (a gated MLP with GELU, hidden_act gelu / gelu_pytorch_tanh) saves what SwiGLU saves: GELU
// keeps its input as SiLU does. A tied LM head (tie_word_embeddings) has V·h parameters fewer and
// the same saved bytes.
TEST(DecoderSaved, GeGluAndTiedEmbeddings) {
  const auto build = [](DecoderArchitecture::Activation act, bool tie) { return small_decoder(act, tie); };
  const Trace swiglu = build(DecoderArchitecture::Activation::silu, false);
  const Trace geglu = build(DecoderArchitecture::Activation::gelu_tanh, false);
  const Trace tied = build(DecoderArchitecture::Activation::silu, true);
  EXPECT_EQ(test_support::saved_for_backward(geglu).per_sample, test_support::saved_for_backward(swiglu).per_sample);
  EXPECT_EQ(parameters(geglu), parameters(swiglu));
  EXPECT_EQ(parameters(swiglu) - parameters(tied), 100 * 64);
  EXPECT_EQ(test_support::saved_for_backward(tied).per_sample, test_support::saved_for_backward(swiglu).per_sample);
  int gelus = 0;
  for (const auto& op : geglu.ops()) gelus += op.kind == traces::OpKind::gelu && op.phase == traces::Phase::forward ? 1 : 0;
  EXPECT_EQ(gelus, 2);  // one per layer's mlp.act_fn
}

// hidden_act relu2 (transformers' ReLUSquaredActivation): F.relu, then torch.square. In bf16
// ReluBackward0 saves the relu's result and PowBackward0 the same tensor, so the MLP saves what
// SwiGLU saves (SiLU keeps its input, of the same size); the relu's input is saved by no one. Under
// autocast pow is on the fp32 list: the square runs on an fp32 copy of the relu's result, which
// PowBackward0 saves (4 bytes an element), and its fp32 result makes the gate-up product fp32,
// whose saved gate is then 4 bytes instead of 2: 6 bytes an element more than SwiGLU. The square's
// backward has PowBackward0's two intermediates as scratch.
TEST(DecoderSaved, SquaredReluSavesTheReluResultOnce) {
  const Trace swiglu = small_decoder(DecoderArchitecture::Activation::silu, false, Precision::bf16);
  const Trace relu2 = small_decoder(DecoderArchitecture::Activation::relu2, false, Precision::bf16);
  EXPECT_EQ(test_support::saved_for_backward(relu2).per_sample, test_support::saved_for_backward(swiglu).per_sample);
  EXPECT_EQ(parameters(relu2), parameters(swiglu));
  const Trace swiglu_amp = small_decoder(DecoderArchitecture::Activation::silu, false);
  const Trace relu2_amp = small_decoder(DecoderArchitecture::Activation::relu2, false);
  EXPECT_EQ(test_support::saved_for_backward(relu2_amp).per_sample - test_support::saved_for_backward(swiglu_amp).per_sample,
            2 * 16 * 96 * 6);  // layers x tokens x MLP width x 6 bytes
  const auto check = [](const Trace& trace, const std::string& square_input, traces::DType square_dtype) {
    int relus = 0, squares = 0;
    for (const auto& op : trace.ops()) {
      if (op.name == "model.layers.0.mlp.act_fn.relu") {
        ++relus;
        EXPECT_EQ(op.kind, traces::OpKind::relu);
      } else if (op.name == "model.layers.0.mlp.act_fn.square") {
        ++squares;
        ASSERT_EQ(op.inputs.size(), 1u);
        EXPECT_EQ(trace.tensor(op.inputs[0]).name, square_input);
        EXPECT_EQ(trace.tensor(op.outputs[0]).dtype, square_dtype);
      } else if (op.name == "model.layers.0.mlp.act_fn.square.backward") {
        EXPECT_EQ(op.outputs.size(), 3u);  // the input's gradient and the two intermediates
      }
    }
    EXPECT_EQ(relus, 1);
    EXPECT_EQ(squares, 1);
  };
  check(relu2, "model.layers.0.mlp.act_fn.relu.out", traces::DType::bf16);
  check(relu2_amp, "model.layers.0.mlp.act_fn.square.cast.out", traces::DType::f32);
}

TEST(DecoderSaved, NamesAreHuggingFaceModulePaths) {
  ModelRequest request = test_support::Request("llama").layers(2).seq_len(16).precision(Precision::amp_bf16).attention(Attention::eager);
  request.hidden = 64;
  request.heads = 4;
  request.vocab = 100;
  const Trace trace = build_model(request);
  std::vector<std::string> names;
  for (const auto& op : trace.ops()) names.push_back(op.name);
  for (const char* expected :
       {"model.embed_tokens", "model.layers.0.input_layernorm", "model.layers.0.self_attn.q_proj",
        "model.layers.0.self_attn.k_rotary", "model.layers.0.self_attn.softmax", "model.layers.0.self_attn.o_proj",
        "model.layers.0.add", "model.layers.0.post_attention_layernorm", "model.layers.0.mlp.gate_proj",
        "model.layers.0.mlp.act_fn", "model.layers.0.mlp.mul", "model.layers.1.mlp.down_proj", "model.layers.1.add_1",
        "model.norm", "lm_head", "loss.log_softmax"}) {
    EXPECT_THAT(names, testing::Contains(std::string(expected)));
  }
}

TEST(HfConfig, ErrorsNameTheFileTheFieldAndTheExpectation) {
  const auto error = [](const std::string& json) {
    try {
      spec_from_hf_config(json, "cfg.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string llama = R"("model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 64)";
  EXPECT_EQ(error("{" + llama + "}"), "no error");
  EXPECT_THAT(error(R"({"model_type": "deepseek_v2"})"), testing::AllOf(testing::HasSubstr("cfg.json"), testing::HasSubstr("model_type"),
                                                                       testing::HasSubstr("llama, mistral, qwen2")));
  EXPECT_EQ(error("{" + llama + R"(, "hidden_act": "relu2"})"), "no error");
  EXPECT_EQ(spec_from_hf_config("{" + llama + R"(, "hidden_act": "relu2"})", "cfg.json").decoder->activation,
            DecoderArchitecture::Activation::relu2);
  EXPECT_THAT(error("{" + llama + R"(, "hidden_act": "relu"})"),
              testing::AllOf(testing::HasSubstr("cfg.json: 'hidden_act'"), testing::HasSubstr("expected silu")));
  EXPECT_THAT(error("{" + llama + R"(, "num_local_experts": 8})"), testing::HasSubstr("'num_local_experts'"));
  // LLaMA's attention follows an explicit head_dim; GPT-NeoX's heads are hidden / heads wide.
  EXPECT_EQ(error("{" + llama + R"(, "head_dim": 32})"), "no error");
  EXPECT_THAT(error(R"({"model_type": "gpt_neox", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 256, "vocab_size": 100, "max_position_embeddings": 64, "head_dim": 32})"),
              testing::HasSubstr("cfg.json: 'head_dim' is 32; expected hidden_size / num_attention_heads = 16"));
  EXPECT_THAT(error("{" + llama + R"(, "pretraining_tp": 2})"), testing::HasSubstr("'pretraining_tp'"));
  EXPECT_THAT(error("{" + llama + R"(, "num_attention_heads": 4.5})"), testing::HasSubstr("expected a positive integer"));
  EXPECT_THAT(error(R"({"model_type": "llama"})"), testing::HasSubstr("'hidden_size' is missing"));
  EXPECT_THAT(error("[1]"), testing::HasSubstr("expected a JSON object"));
  EXPECT_THAT(error("{"), testing::HasSubstr("not a JSON document"));
  EXPECT_THAT(error(R"({"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 100, "vocab_size": 100})"),
              testing::HasSubstr("'intermediate_size' is 100; expected 4 * hidden_size = 256"));

  // seq_len is required, bounded by max_position_embeddings and by Mistral's sliding window.
  ModelRequest request;
  static_cast<ModelSpec&>(request) = spec_from_hf_config("{" + llama + "}", "cfg.json");
  EXPECT_THAT([&] { build_model(request); }, testing::ThrowsMessage<InputError>(testing::HasSubstr("seq_len: required")));
  request.seq_len = 65;
  EXPECT_THAT([&] { build_model(request); }, testing::ThrowsMessage<InputError>(testing::HasSubstr("max_position_embeddings")));
  request = from_config("mistral-7b-v0.1.json", 8192);
  EXPECT_THAT([&] { build_model(request); }, testing::ThrowsMessage<InputError>(testing::HasSubstr("sliding window of 4096")));
  // fused-softmax is the GPT/BERT Megatron core; sdpa-mem-efficient is the decoder's only.
  request = from_config("llama-2-7b.json", 16);
  request.layers = 1;
  request.attention = Attention::fused_softmax;
  EXPECT_THROW(build_model(request), InputError);
  EXPECT_THROW(build_model(test_support::Request("gpt2").seq_len(16).attention(Attention::sdpa_mem_efficient)), InputError);
  EXPECT_EQ(parse_attention("sdpa-flash"), Attention::flash);
}

}  // namespace
}  // namespace comptrain::zoo

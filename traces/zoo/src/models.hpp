#pragma once
// The model definitions of the zoo (private): each builds the forward pass of one network on a
// NetworkBuilder, in PyTorch's execution order, and returns the loss.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "network_builder.hpp"

namespace comptrain::zoo::detail {

// torchvision's definitions, 224x224x3 images, 1000 classes.
Value alexnet(NetworkBuilder& nb);
Value vgg16(NetworkBuilder& nb);
Value resnet18(NetworkBuilder& nb);
Value resnet50(NetworkBuilder& nb);
Value resnet101(NetworkBuilder& nb);
Value resnet152(NetworkBuilder& nb);

struct TransformerShape {
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t heads = 0;
  std::int64_t seq_len = 0;
  std::int64_t vocab = 0;
  std::int64_t max_positions = 0;  // rows of the learned position embedding
};

// What sits on top of BertModel and how it runs (zoo.hpp: ModelSpec::head, mlm, mlm_predictions).
struct BertOptions {
  BertHead head = BertHead::pretraining;
  MlmPositions mlm = MlmPositions::all;  // pre-training only
  std::int64_t mlm_predictions = 0;      // positions per sample with MlmPositions::masked
};

// Hugging Face's BertModel (post-LN encoder, pooler) with the head's class on top:
// BertForPreTraining (MLM head over every position, or over the masked ones as NVIDIA's
// DeepLearningExamples runs it, decoder tied to the word embeddings, and the next-sentence
// head), BertForSequenceClassification (dropout and a 2-label classifier on the pooled first
// token) or BertForQuestionAnswering (no pooler; start and end logits on every position).
Value bert(NetworkBuilder& nb, const TransformerShape& shape, Attention attention, const BertOptions& options);
// Hugging Face's GPT2LMHeadModel: pre-LN decoder, LM head tied to the token embedding, or with
// `tied` false an output layer of its own (`lm_head.weight`, Megatron-LM's
// --untie-embeddings-and-output-weights). `stage`: the pipeline stage built
// (ModelSpec::pipeline_stage; the whole model is {0, layers, true, true}). A stage short of the
// last returns its output, sent to the next stage (the autograd root finish() takes), the last
// stage its loss.
Value gpt2_lm_head(NetworkBuilder& nb, const TransformerShape& shape, Attention attention, const PipelineStageSpec& stage, bool tied = true);

// Hugging Face's LlamaForCausalLM (LLaMA, Mistral, Qwen2), MixtralForCausalLM,
// Qwen2MoeForCausalLM or GPTNeoXForCausalLM with the causal-LM loss, at `seq_len` tokens, with
// the given attention (eager, flash or sdpa-mem-efficient). With arch.moe, `expert_tokens` are
// the tokens each expert of a sparse layer processes per sequence (routed_tokens).
// `documents` per sample packed (ModelSpec::packed_documents; packing.cpp).
// `stage` as gpt2_lm_head's.
// With `expert_parallel` the sparse layers are Megatron-LM's MoE layer on that plan's rank
// (megatron_moe_layer) instead of Hugging Face's block. With `megatron` the layers are
// Megatron-LM's Transformer Engine ones (megatron_layers.cpp): fused RMSNorm, rotary, SwiGLU
// and bias-dropout-add kernels under the same module names.
struct ExpertParallelPlan;
// The MLP's activation module `name` on x: one op (SiLU, GELU) or, for relu2, transformers'
// ReLUSquaredActivation's two (`name.relu`, then `name.square`).
Value mlp_activation(NetworkBuilder& nb, DecoderArchitecture::Activation activation, const std::string& name, Value x);
Value decoder_lm(NetworkBuilder& nb, const DecoderArchitecture& arch, std::int64_t seq_len, Attention implementation,
                 const PipelineStageSpec& stage, const std::vector<std::int64_t>& expert_tokens = {}, std::int64_t documents = 1,
                 const ExpertParallelPlan* expert_parallel = nullptr, const MegatronOptions* megatron = nullptr);

// torchtitan's Llama (torchtitan_decoder.cpp): InputError ("implementation: ...") when the
// architecture or a request option is not what torchtitan's model code builds; then the model,
// at `seq_len` tokens, with flash or sdpa-mem-efficient attention.
void check_torchtitan_request(const DecoderArchitecture& arch, const ModelRequest& request, Attention implementation);
Value torchtitan_decoder_lm(NetworkBuilder& nb, const DecoderArchitecture& arch, std::int64_t seq_len, Attention implementation,
                            TorchtitanOptions::Norm norm);

// LoRA / QLoRA on a decoder (lora.cpp): checks `spec`, resolves PEFT's default targets for the
// architecture and turns the builder's LoRA mode on (before decoder_lm); records the choice in
// `metadata`. InputError ("lora...: ...") for what PEFT or the zoo does not take.
void configure_lora(NetworkBuilder& nb, const LoraSpec& spec, const DecoderArchitecture& arch, Precision precision,
                    std::map<std::string, std::string>& metadata);

// ---- Mixture of experts (moe_block.cpp) --------------------------------------------------------
// Whether decoder layer `layer` has the sparse MLP (Qwen2-MoE's decoder_sparse_step and
// mlp_only_layers; every layer of Mixtral).
bool is_sparse_layer(const MoeArchitecture& moe, std::int64_t layer);
// The sparse MLP's module name in a layer: Mixtral's `block_sparse_moe`, Qwen2-MoE's `mlp`.
std::string sparse_moe_module(const DecoderArchitecture& arch);
// One expert (or Qwen2-MoE's shared expert): down(act(gate(x)) * up(x)) of `width`, with Mixtral's
// names (w1, w3, w2) or Qwen2-MoE's (gate_proj, up_proj, down_proj). Under expert-tensor
// parallelism `width` is one rank's share: w1 and w3 column-parallel, w2 row-parallel. `fused`:
// Megatron's fused SwiGLU kernel (NetworkBuilder::fused_swiglu) for a SiLU activation.
Value swiglu_expert(NetworkBuilder& nb, const DecoderArchitecture& arch, const std::string& p, Value x, std::int64_t width, bool fused = false);
// MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock on x [N, S, H] under module prefix `p` (ending
// in '.'), expert e processing tokens[e] tokens per sequence.
Value sparse_moe_block(NetworkBuilder& nb, const DecoderArchitecture& arch, const std::vector<std::int64_t>& tokens,
                       const std::string& p, Value x);

// ---- Megatron-LM's MoE layer under expert parallelism (expert_parallel.cpp) ---------------------
// One expert-parallel rank's share of a sparse layer, rows counted per sample of its micro-batch.
struct ExpertParallelPlan {
  std::int64_t degree = 1;         // E
  std::int64_t expert_tensor = 1;  // ETP (= the tensor-parallel degree)
  std::int64_t rank = 0;           // the expert-parallel rank simulated: the busiest
  std::vector<std::int64_t> local_experts;  // its experts' global indices
  std::vector<std::int64_t> expert_rows;    // rows each processes (after the expert-tensor all_gather)
  std::int64_t dispatched_rows = 0;  // rows this rank sends in the dispatch all_to_all (its tokens x top-k, or capacity slots)
  std::int64_t received_rows = 0;    // rows it receives (before the expert-tensor all_gather)
  bool padded_to_capacity = false;   // a capacity factor: every expert's rows fixed in advance
  // The allgather dispatcher (ExpertParallelSpec::TokenDispatcher): its group is the tensor group
  // (expert degree 1) or the expert group (tensor degree 1), degree x expert_tensor ranks; the
  // experts' rows are not rounded to the expert-tensor degree (every tensor rank processes all of them).
  bool allgather = false;
};
// The plan for `degree` ranks and expert-tensor degree `expert_tensor` at `seq_len` tokens per
// sample, for the alltoall or the allgather dispatcher: InputError as routed_tokens';
// std::invalid_argument when the degree does not divide the experts or the expert-tensor degree
// the sequence, and for the allgather dispatcher with both degrees above 1 or a capacity factor.
ExpertParallelPlan plan_expert_parallel(const MoeArchitecture& moe, const ExpertRouting& routing, std::int64_t seq_len, std::int64_t degree,
                                        std::int64_t expert_tensor, bool allgather = false);
// MoELayer on x [N, S', H] (S' = S, or S / t under sequence parallelism) under module prefix `p`;
// with `megatron` the experts' SwiGLU as its fused kernel when bias_activation_fusion is on.
Value megatron_moe_layer(NetworkBuilder& nb, const DecoderArchitecture& arch, const ExpertParallelPlan& plan, const std::string& p, Value x,
                         const MegatronOptions* megatron = nullptr);

}  // namespace comptrain::zoo::detail

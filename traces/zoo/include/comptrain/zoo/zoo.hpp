#pragma once
// The model zoo: traces of one training iteration of well-known networks, generated from
// their definitions (torchvision for the CNNs, the original papers / Hugging Face configs for
// the transformers), with the backward pass and the optimizer step.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comptrain/traces/trace.hpp"

namespace comptrain::zoo {

// Numeric precision, named as PyTorch users set it up (traces/zoo/README.md, "Precision").
enum class Precision {
  fp32,      // an fp32 model, no autocast: everything in fp32
  amp_fp16,  // "amp-fp16": an fp32 model under torch.autocast(dtype=torch.float16) + GradScaler:
             // fp32 weights, gradients and optimizer state; each op runs in the dtype CUDA
             // autocast gives it, and linear/conv keep a cached fp16 copy of their weights
  amp_bf16,  // "amp-bf16": the same with torch.autocast(dtype=torch.bfloat16)
  fp16,      // model.half(): weights, activations, gradients and optimizer state all fp16
  bf16,      // model.bfloat16(): the same in bf16
  mixed,     // Megatron-LM / Apex O2 style: fp16 weights, activations and gradients, an fp32
             // master copy of every weight and fp32 optimizer state (ZeRO's 2 + 2 + 12 bytes
             // per parameter with Adam)
};
enum class Optimizer {
  sgd,       // torch.optim.SGD, momentum 0
  momentum,  // torch.optim.SGD(momentum=0.9): one momentum buffer
  adam,      // torch.optim.Adam, weight_decay 0 (PyTorch's default)
  adamw,     // torch.optim.AdamW, weight_decay 0.01 (PyTorch's default), decoupled and in place
  // The optimizers outside torch.optim (traces/zoo/src/optimizers.cpp; traces/zoo/README.md,
  // "Optimizers outside torch.optim"). Their steps are their own kernels: optimizer_impl does not
  // apply.
  adam8bit,         // bitsandbytes' Adam8bit: blockwise 8-bit moments, an fp32 absmax per block of
                    // 256; a parameter of fewer than 4096 elements keeps fp32 moments
  adamw8bit,        // bitsandbytes' AdamW8bit: the same with decoupled weight decay
  paged_adamw,      // bitsandbytes' PagedAdamW: fp32 moments, in CUDA managed memory
  paged_adamw8bit,  // bitsandbytes' PagedAdamW8bit: AdamW8bit's moments in managed memory
  adafactor,        // Hugging Face transformers' Adafactor with its defaults: a factored second
                    // moment (row and column vectors) per matrix, a full one per vector, no first
                    // moment (beta1 None)
};
// Whether torch.optim runs the step (sgd, momentum, adam, adamw), so that optimizer_impl applies.
bool is_torch_optimizer(Optimizer optimizer);

// The loss of a language model's head (traces/zoo/src/loss.cpp; traces/zoo/README.md, "Loss
// kinds"). Which kernels compute the cross-entropy over the vocabulary.
enum class LossKind {
  cross_entropy,               // "cross_entropy": the logits, an fp32 log_softmax over the whole
                               // vocabulary and nll_loss, as autograd runs them
  fused_linear_cross_entropy,  // Liger-Kernel's LigerFusedLinearCrossEntropyLoss: LM head and CE
                               // fused, chunked over tokens; the gradients of the hidden states
                               // and the head's weight computed in the forward pass
  chunked,                     // torchtune's CEWithChunkedOutputLoss: the logits as `chunks`
                               // pieces, each upcast and cross-entropied alone
  fused_cross_entropy,         // a fused CE kernel on the 16-bit logits (Megatron's fused
                               // vocab-parallel CE, FlashAttention's cross_entropy with
                               // inplace_backward): no fp32 log-probabilities, the gradient
                               // written over the logits
};
struct LossSpec {
  LossKind kind = LossKind::cross_entropy;
  std::int64_t chunks = 8;  // `chunked` only: torchtune's num_output_chunks (default 8)
  // `cross_entropy` only: whether the logits are copied to fp32 before the loss. Unset: as the
  // model's code does it (Hugging Face's LlamaForCausalLM given labels: ForCausalLMLoss's
  // `logits.float()`; GPT-2 and gpt: no copy). false: the loss in the logits' dtype, as a
  // training loop that calls the model without labels and applies nn.CrossEntropyLoss to the
  // 16-bit logits itself (transformers 4.45+ no longer upcasts the logits in the model's forward).
  std::optional<bool> upcast;
  // `cross_entropy` only: the loss function under torch.compile (torchtitan's
  // build_cross_entropy_loss with training.compile, pytorch/torchtitan@e7c0cae9
  // torchtitan/components/loss.py). Inductor fuses the upcast, log-softmax and nll into
  // kernels that keep the logits in their own dtype and a log-sum-exp per row, and the backward
  // writes one gradient of the logits' size: no fp32 copy, no log-probabilities ("memory-wise
  // it's ~0 for just fwd and ~d_input for fw+bw", StrongerXi of PyTorch's compiler team,
  // Dao-AILab/quack#48, 2025-10-07). Not with `upcast`, which the compiled kernels do in registers.
  bool compiled = false;
};
// Which of torch.optim's three implementations runs the step.
enum class OptimizerImpl {
  foreach,   // "foreach": _multi_tensor_* over lists of tensors, PyTorch 2.x's default on CUDA
  fused,     // "fused": one fused kernel (fused=True), no parameter-sized temporaries
  for_loop,  // "for-loop": _single_tensor_*, one parameter at a time (foreach=False)
};
// The attention core of the transformers.
enum class Attention {
  fused_softmax,  // "fused-softmax": Megatron-LM's core (scaled GEMM, fused 16-bit softmax)
  eager,          // "eager": Hugging Face's eager attention (transformers v4.25.1)
  flash,          // "flash" (also read as "sdpa-flash"): one fused SDPA / FlashAttention kernel,
                  // no S x S tensors
  // "sdpa-mem-efficient": scaled_dot_product_attention on the memory-efficient (xFormers /
  // CUTLASS) kernel: the flash kernel's saved set with the log-sum-exp padded to 32 rows, and
  // grouped K/V repeated to every head first (Hugging Face's repeat_kv). `llama` only.
  sdpa_mem_efficient,
};
// What a BERT model is trained for: which Hugging Face class sits on top of BertModel
// (transformers v4.25.1, modeling_bert.py).
enum class BertHead {
  pretraining,              // "pretraining": BertForPreTraining, MLM over every position + NSP
  sequence_classification,  // "sequence-classification": BertForSequenceClassification, the
                            // pooled first token -> dropout -> Linear(hidden, 2) -> cross-entropy
  question_answering,       // "question-answering": BertForQuestionAnswering (SQuAD fine-tuning):
                            // BertModel without pooler, Linear(hidden, 2) on every position split
                            // into start and end logits [N, S], (CE(start) + CE(end)) / 2
};
// Which positions the masked-LM head of BERT pre-training runs on.
enum class MlmPositions {
  all,     // "all": every position, as Hugging Face's BertForPreTraining does
  masked,  // "masked": only the masked ones, gathered with index_select first, as NVIDIA
           // DeepLearningExamples' run_pretraining.py does by default (dense sequence output)
};

std::string_view to_string(Precision precision);
std::string_view to_string(Optimizer optimizer);
std::string_view to_string(OptimizerImpl impl);
std::string_view to_string(Attention attention);
std::string_view to_string(BertHead head);
std::string_view to_string(MlmPositions mlm);
std::string_view to_string(LossKind kind);
std::optional<Precision> parse_precision(std::string_view text);
std::optional<Optimizer> parse_optimizer(std::string_view text);
std::optional<OptimizerImpl> parse_optimizer_impl(std::string_view text);
std::optional<Attention> parse_attention(std::string_view text);
std::optional<BertHead> parse_head(std::string_view text);
std::optional<MlmPositions> parse_mlm_positions(std::string_view text);
std::optional<LossKind> parse_loss_kind(std::string_view text);
// The valid names of each, in declaration order (for help texts and error messages).
std::vector<std::string_view> precision_names();
std::vector<std::string_view> optimizer_names();
std::vector<std::string_view> optimizer_impl_names();
std::vector<std::string_view> attention_names();
std::vector<std::string_view> head_names();
std::vector<std::string_view> mlm_positions_names();
std::vector<std::string_view> loss_kind_names();

// The sparse mixture-of-experts MLP of a decoder (Hugging Face's MixtralSparseMoeBlock and
// Qwen2MoeSparseMoeBlock; traces/zoo/README.md, "Mixture of experts"): a router linear, softmax,
// top-k, and per expert a SwiGLU MLP over the tokens routed to it, gathered by index and added
// back with index_add_; Qwen2-MoE adds a shared expert scaled by a sigmoid gate.
struct MoeArchitecture {
  std::int64_t experts = 8;          // num_local_experts (Mixtral), num_experts (Qwen2-MoE, Qwen3-MoE)
  std::int64_t top_k = 2;            // num_experts_per_tok
  std::int64_t intermediate = 14336; // each expert's MLP width (Mixtral: intermediate_size; Qwen2-, Qwen3-MoE: moe_intermediate_size)
  bool normalize_top_k = true;       // the top-k weights divided by their sum (Mixtral; Qwen2-MoE's norm_topk_prob)
  std::int64_t shared_expert_intermediate = 0;  // Qwen2-MoE's shared expert and its sigmoid gate; 0: none
  std::int64_t sparse_step = 1;      // decoder_sparse_step: layer i is sparse when (i + 1) % step == 0 ...
  std::vector<std::int64_t> dense_layers;  // ... and i is not in mlp_only_layers (a dense MLP of `intermediate`)
  // GPT-OSS (modeling_gpt_oss.py, GptOssTopKRouter and GptOssExperts): a router with a bias whose
  // top-k of the raw logits are softmaxed among themselves (not a softmax over every expert
  // first), and experts with biases whose fused gate_up projection feeds the clamped SwiGLU
  // (gate.clamp(max=limit), up.clamp(-limit, limit), gate * sigmoid(alpha * gate) * (up + 1)).
  bool gpt_oss_experts = false;
  // Not modelled: the load-balancing loss that output_router_logits adds (refused by the config
  // reader), the router's input jitter (router_jitter_noise).
};

// How many tokens each expert receives: routing depends on the data, so this is an assumption
// the user states (traces/zoo/README.md, "Mixture of experts", "Routed tokens").
struct ExpertRouting {
  // Relative share of the routed token slots (seq_len * top_k per sample) each expert takes,
  // one positive number per expert; empty: uniform, seq_len * top_k / experts each.
  std::vector<double> expert_load;
  // Instead of expert_load: the busiest expert's load over the mean (max / mean, >= 1, the
  // imbalance Switch Transformer and GShard report); the other experts share the rest equally.
  std::optional<double> load_imbalance;
  // GShard / Switch token dropping: an expert keeps at most ceil(top_k * seq_len * factor /
  // experts) tokens per sequence, the rest pass by on the residual stream. Unset: dropless,
  // as Hugging Face's Mixtral and Qwen2-MoE are.
  std::optional<double> capacity_factor;
};

// A LLaMA-family (LLaMA, Mistral, Qwen2) or GPT-NeoX decoder, as its Hugging Face config.json
// describes it (spec_from_hf_config; traces/zoo/README.md, "Decoders and Hugging Face configs").
struct DecoderArchitecture {
  enum class Norm { rms, layer };                 // LlamaRMSNorm, or nn.LayerNorm with a bias
  // F.silu, F.gelu, F.gelu(approximate="tanh"), and transformers' ReLUSquaredActivation
  // ("relu2": F.relu then torch.square, Primer's and Nemotron's squared ReLU).
  enum class Activation { silu, gelu, gelu_tanh, relu2 };
  // Hugging Face's model_type: "llama", "mistral", "qwen2" (modeling_llama.py's modules and
  // names), "qwen3" (LLaMA's blocks with qk_norm), "mixtral", "qwen2_moe" (their modeling files:
  // LLaMA's attention with `moe`'s sparse MLP), "qwen3_moe" (Qwen3's attention, Qwen2-MoE's sparse
  // MLP without the shared expert), "olmoe" (LLaMA's attention with q/k norms over the whole
  // projections, Mixtral's loop with gate_proj/up_proj/down_proj experts), "gpt_oss" (LLaMA's blocks with biases, sinks,
  // alternating sliding-window attention and GPT-OSS's experts) or "gpt_neox"
  // (modeling_gpt_neox.py's).
  std::string family = "llama";
  std::int64_t layers = 32;
  std::int64_t hidden = 4096;
  std::int64_t heads = 32;
  std::int64_t kv_heads = 32;        // num_key_value_heads: < heads is grouped-query, 1 multi-query
  // A config's explicit head_dim (Qwen3-0.6B: 128 with hidden 1024 and 16 heads), which the
  // projections follow: q_proj hidden -> heads x head_dim, k_proj and v_proj -> kv_heads x
  // head_dim, o_proj heads x head_dim -> hidden (LlamaAttention: getattr(config, "head_dim",
  // hidden_size // num_attention_heads)). 0: hidden / heads.
  std::int64_t head_dim = 0;
  std::int64_t head_size() const { return head_dim > 0 ? head_dim : hidden / heads; }
  // Norms of the query and the key, after their projections and before the rotary embedding:
  // none; Qwen3Attention's q_norm and k_norm, an RMSNorm over each head's head_dim channels
  // (statistics per token and head); or OlmoeAttention's, an RMSNorm over the whole projection
  // (heads x head_dim channels for q, kv_heads x head_dim for k; statistics per token).
  enum class QkNorm { none, per_head, projection };
  QkNorm qk_norm = QkNorm::none;
  std::int64_t intermediate = 11008;
  std::int64_t vocab = 32000;
  std::int64_t max_positions = 4096;  // max_position_embeddings: the longest seq_len allowed
  Norm norm = Norm::rms;
  Activation activation = Activation::silu;
  bool gated_mlp = true;         // down(act(gate(x)) * up(x)) (SwiGLU / GeGLU), else fc2(act(fc1(x)))
  bool qkv_bias = false;         // biases on the q, k, v projections (Qwen2, GPT-NeoX)
  bool output_bias = false;      // a bias on the attention's output projection
  bool mlp_bias = false;         // biases on the MLP's projections
  bool tie_embeddings = false;   // tie_word_embeddings: the LM head reads the input embedding
  std::int64_t rotary_dims = 0;  // channels per head that rotate; 0: all (GPT-NeoX: rotary_pct)
  bool parallel_residual = false;  // GPT-NeoX: x + attn(ln1(x)) + mlp(ln2(x))
  bool attention_dropout = false;  // a nonzero attention_dropout, applied in training
  std::optional<std::int64_t> sliding_window;  // Mistral's: seq_len may not exceed it
  // GPT-OSS's alternating attention (GptOssConfig.layer_types): sliding_layers[i] when layer i is
  // a "sliding_attention" layer, whose queries each attend to the `window` keys ending at their
  // own position (masking_utils' sliding-window causal mask: i - j < window); empty: none.
  std::vector<bool> sliding_layers;
  std::int64_t window = 0;
  // GptOssAttention.sinks: a learned logit per head that joins every row's softmax (and takes
  // part of its mass) without a value; a parameter of `heads` elements per layer.
  bool attention_sinks = false;
  std::optional<MoeArchitecture> moe;  // sparse MLPs (mixtral, qwen2_moe, qwen3_moe, olmoe, gpt_oss); unset: every layer dense
  std::string source;            // the config file it came from, for messages
};

// LoRA fine-tuning as Hugging Face PEFT does it (peft/tuners/lora; traces/zoo/README.md,
// "LoRA and QLoRA"): every parameter of the model is frozen (no gradient, no optimizer state,
// no fp32 master), and each targeted linear gets two trainable adapters beside it,
// result = base(x) + lora_B(lora_A(dropout(x))) * scaling. Decoders (`llama`) only.
struct LoraSpec {
  std::int64_t rank = 8;     // r (LoraConfig's default 8): lora_A [r, in], lora_B [out, r]
  double alpha = 8;          // lora_alpha (default 8): scaling = alpha / r, no memory of its own
  double dropout = 0;        // lora_dropout (default 0.0: nn.Identity, no dropout op)
  // target_modules: module-name suffixes ("q_proj" matches model.layers.0.self_attn.q_proj).
  // Empty: PEFT's default for the architecture (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING).
  std::vector<std::string> targets;
  bool all_linear = false;   // target_modules="all-linear": every linear but the output layer
  // QLoRA (Dettmers et al. 2023; bitsandbytes Linear4bit): the frozen linears (all but the
  // output layer, as transformers' bitsandbytes integration leaves lm_head) stored NF4 with
  // double-quantised block statistics; each dequantises its weight for its matmul.
  bool nf4 = false;
};

// The decoder as torchtitan builds it (torchtitan/models/llama/model.py at
// pytorch/torchtitan@1ea476e9f24be439eda358aa864f45c1c37a8a88) instead of Hugging Face's
// LlamaForCausalLM: the same parameters and GEMMs, other saved tensors (traces/zoo/README.md,
// "torchtitan's Llama"). Llama-shaped configs only (no biases, untied, full rotary, dense).
struct TorchtitanOptions {
  // The train config's [model] norm_type (torchtitan/models/norms.py create_norm): `rmsnorm`
  // (ModelArgs' default; the same tensors as Hugging Face's LlamaRMSNorm) or `fused_rmsnorm`
  // (its Triton kernel's autograd Function). layernorm / np_layernorm are not modelled.
  enum class Norm { rmsnorm, fused_rmsnorm };
  Norm norm = Norm::rmsnorm;
};
std::optional<TorchtitanOptions::Norm> parse_torchtitan_norm(std::string_view text);
std::vector<std::string_view> torchtitan_norm_names();

// The decoder layers as Megatron-LM builds them with Transformer Engine (--transformer-impl
// transformer_engine, megatron-core's GPT layer spec) instead of Hugging Face's eager modules:
// the same parameters and GEMMs, fused elementwise kernels (traces/zoo/README.md, "Megatron-LM's
// Transformer Engine layers"). Each field is the Megatron argument's, with its default.
struct MegatronOptions {
  // --hidden-dropout (0.1): the fused bias-dropout-add after the attention's and the MLP's
  // output projections draws a dropout mask (one byte per element, kept for backward).
  double hidden_dropout = 0.1;
  // --attention-dropout (0.1): dropout on the attention probabilities inside the flash kernel
  // (no mask kept: the backward draws it again).
  double attention_dropout = 0.1;
  // --no-rope-fusion clears it: Transformer Engine's fused rotary kernel, else Megatron's eager
  // _apply_rotary_pos_emb_bshd (Hugging Face's kernels).
  bool rope_fusion = true;
  // --no-bias-swiglu-fusion clears it: SwiGLU as one kernel (bias_swiglu_impl), else F.silu and a product.
  bool bias_activation_fusion = true;
  // --moe-grouped-gemm: a mixture of experts' local experts as megatron-core 0.6's GroupedMLP
  // (megatron/core/transformer/moe/experts.py at NVIDIA/Megatron-LM@core_v0.6.0): each projection
  // one call of the grouped_gemm package's gmm over all local experts' rows, their weights side
  // by side in one parameter, and a fused SwiGLU between; else SequentialMLP, one MLP per expert.
  bool moe_grouped_gemm = false;
  // --accumulate-allreduce-grads-in-fp32 (megatron/training/arguments.py at core_v0.6.0 turns it on
  // for --bf16): the DDP's main_grad buffer, which holds every weight gradient, in fp32 rather than
  // the weights' 16 bits. Not a model.megatron key: the scenario reader sets it from
  // parallelism.grad_reduce_in_fp32, the same flag. bf16 weights imply it.
  bool main_grad_fp32 = false;
};

// Megatron-LM's tensor parallelism (Shoeybi et al. 2019, arXiv 1909.08053 §3) and sequence
// parallelism (Korthikanti et al. 2022, arXiv 2205.05198 §4.2.2): the trace is one
// tensor-parallel rank's program, its collectives over the `tensor` group included
// (traces/zoo/README.md, "Tensor and sequence parallelism"). Models `gpt` and `llama` (families
// llama, mistral, qwen2, qwen3); `degree` must divide the heads, the KV heads and the MLP width,
// and with sequence_parallel the sequence. Degree 1 is the whole model, today's trace.
struct TensorParallelSpec {
  std::int64_t degree = 1;
  bool sequence_parallel = false;  // Megatron's --sequence-parallel; needs degree > 1
  // Megatron-LM's --tp-comm-overlap (Transformer Engine's Userbuffers; needs sequence_parallel):
  // the forward all-gathers overlap the GEMMs that read them (TE's ring exchange), the forward
  // reduce-scatters are pipelined with the row-parallel GEMMs that make them (4 pieces), and the
  // backward all-gathers of the output gradients overlap the row-parallel linears' backward
  // (traces/zoo/README.md, "Tensor and sequence parallelism").
  bool comm_overlap = false;
};

// Context parallelism (Megatron-LM's --context-parallel-size; shared/reference/parallelism.md §3):
// the trace is ONE context-parallel rank's program (traces/zoo/README.md, "Context parallelism").
// The sequence is cut into 2 x degree chunks and the rank keeps chunks r and 2 x degree - 1 - r
// (Megatron's load balancing, NVIDIA/Megatron-LM@d98e8a6 megatron/core/utils.py:2504-2560), so it
// holds seq_len / degree tokens: every token-proportional op (embedding, norms, linears, MLP,
// head, loss, activations) shrinks by the degree; its queries attend to the whole sequence's keys
// and values, 1 / degree of the causal attention's pairs. Its collectives run over the `context`
// group. Models `gpt` and `llama` (families llama, mistral, qwen2, qwen3), flash attention only;
// 2 x degree divides seq_len, and under sequence parallelism the tensor degree divides
// seq_len / degree. Degree 1 is the whole sequence, today's trace.
struct ContextParallelSpec {
  enum class Variant {
    // Transformer Engine's ring (Megatron's --cp-comm-type p2p, the default): degree - 1 steps
    // passing K,V blocks around the ring beside the attention kernel; backward also passes dK,dV.
    ring,
    // PyTorch context_parallel's default: an all-gather of K,V before the attention (exposed),
    // a reduce-scatter of dK,dV after its backward.
    all_gather,
  };
  std::int64_t degree = 1;
  Variant variant = Variant::ring;
};
std::string_view to_string(ContextParallelSpec::Variant variant);
// "ring" (also Megatron's "p2p") or "all_gather" (also "allgather"); nullopt otherwise.
std::optional<ContextParallelSpec::Variant> parse_context_parallel_variant(std::string_view text);

// One stage of Megatron-LM's pipeline parallelism (Megatron-LM megatron/core/pipeline_parallel/schedules.py),
// or one model chunk of its interleaved schedule -- the same thing, a contiguous range of decoder
// layers: the trace is then ONE micro-batch's forward and backward pass of that stage with its
// optimizer step (traces/zoo/README.md, "Pipeline stages"). `first`: the stage holds the
// embedding; otherwise it starts with a `recv` of the hidden states from the previous stage
// (group pipeline), whose backward is a `send` of their gradient. `last`: it holds the final norm,
// the LM head and the loss; otherwise it ends with a `send` of its output, and its backward pass
// starts from a `recv` of the output's gradient. Layers keep their global index in their names
// (model.layers.{first_layer + i}). Models `gpt` and `llama`. partition: models::stage_layers.
struct PipelineStageSpec {
  std::int64_t first_layer = 0;
  std::int64_t layers = 0;  // >= 1, first_layer + layers <= the model's layers
  bool first = true;        // requires first_layer 0
  bool last = true;         // requires first_layer + layers = the model's layers
  // Megatron-LM before Megatron Core (--scatter-gather-tensors-in-pipeline, on by default;
  // megatron/p2p_communication.py, _communicate: split_tensor_into_1d_equal_chunks before each
  // send, gather_split_1d_tensor after each receive): under tensor parallelism without sequence
  // parallelism each tensor-parallel rank sends and receives 1/t of the boundary tensor, and the
  // receiver all-gathers it over the tensor group, both ways. Needs a tensor-parallel degree > 1
  // without sequence parallelism (whose boundary tensor is split already).
  bool scatter_gather = false;
};

// Megatron-LM's expert parallelism for the mixture-of-experts decoders (families mixtral and
// qwen2_moe; traces/zoo/README.md, "Expert parallelism"): the experts of every sparse layer are
// spread over `degree` ranks (E, the `expert` group), each holding experts / E of them, and the
// tokens reach them through the alltoall token dispatcher (megatron/core/transformer/moe/
// token_dispatcher.py, MoEAlltoAllTokenDispatcher): per sparse layer and micro-batch a dispatch
// and a combine all_to_all over the `expert` group in the forward pass and two in the backward,
// with an all_gather over the tensor group after the dispatch and a reduce_scatter before the
// combine when the experts are tensor-parallel too (expert_tensor > 1). The layer is built as
// Megatron's MoELayer runs it (router, permute, dispatch, one SwiGLU per local expert, combine,
// unpermute), not Hugging Face's expert loop, and the trace is the rank whose local experts
// receive the most tokens under ExpertRouting. Set with degree 1 it is Megatron's layer on one
// rank; unset, Hugging Face's block (moe_block.cpp), which tensor parallelism does not shard.
struct ExpertParallelSpec {
  std::int64_t degree = 1;  // E: divides the routed experts
  // ETP, the tensor-parallel degree of the experts: each local expert's w1/w3 columns and w2 rows
  // split over ETP ranks. 0: the tensor-parallel degree, Megatron-LM's default
  // (--expert-tensor-parallel-size unset: moe/README.md, "ETP defaults to TP"). Only that value
  // is modelled: another (Megatron's "MoE parallel folding") is std::invalid_argument.
  std::int64_t expert_tensor = 0;
  // How the tokens reach the experts (Megatron-LM's --moe-token-dispatcher-type, whose default is
  // allgather: megatron/training/arguments.py:1592-1594 at NVIDIA/Megatron-LM@ba773259, the
  // Megatron-LM-240405 that Pai-Megatron-Patch pins; megatron/core/transformer/
  // transformer_config.py:891 at d98e8a64). alltoall: above. allgather:
  // MoEAllGatherTokenDispatcher as Megatron-LM-240405 writes it (Pai-Megatron-Patch@9fce17b3
  // megatron_patch/model/qwen1_5/moe/token_dispatcher.py, token_permutation and
  // token_unpermutation): every rank all_gathers the group's hidden states, top-k indices and
  // weights over the tensor (or expert) group, picks the rows of its local experts by mask
  // (masked_select, nonzero: each a wait for the GPU), sorts them by expert (argsort, gather; the
  // histc of the rows per expert read back to the host, a fourth wait), and on the way back
  // scatters them into place, weights them and scatter_adds them into the group's token rows,
  // which a reduce_scatter over the same group returns. Its SequentialMLP is the one of the same
  // release (experts.py there): each expert's rows sliced out and its output copied into a zero
  // tensor, whose backward pass copies whole gradients (CopySlices, SliceBackward0). Written for
  // an expert degree of 1 or a tensor degree of 1 (the gather's group is then the tensor or the
  // expert group), dropless.
  enum class TokenDispatcher : std::uint8_t { alltoall, allgather };
  TokenDispatcher dispatcher = TokenDispatcher::alltoall;
};

// The vocabulary Megatron-LM trains on `degree` tensor-parallel ranks: rounded up to a multiple
// of make_vocab_size_divisible_by (default 128, megatron/training/arguments.py:2441) times the
// degree (vocab_size_with_padding, megatron/core/tokenizers/utils/build_tokenizer.py:133-145 at
// NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553). Each rank holds padded / degree
// rows of the embedding and of the LM head. The zoo pads only when degree > 1, so that degree 1
// stays the Hugging Face / unpadded model.
std::int64_t tensor_parallel_vocab(std::int64_t vocab, std::int64_t degree);

// Which model, trained how: everything but the batch size. Unset optional fields take the
// model's defaults. A scenario holds one of these; its batch size lives in the scenario alone.
struct ModelSpec {
  std::string model;  // a name from list_models()
  Precision precision = Precision::fp32;
  std::optional<Optimizer> optimizer;  // default: momentum for CNNs, adam for transformers
  OptimizerImpl optimizer_impl = OptimizerImpl::foreach;
  // torchtune's optimizer_in_bwd: one optimizer per parameter, stepped by a
  // post-accumulate-grad hook as soon as that parameter's gradient is complete, which then frees
  // the gradient (zero_grad(set_to_none=True)), so the whole gradient set is never live.
  bool optimizer_in_backward = false;
  // The language models' loss (gpt2, gpt, llama); an error for another kind on BERT and the CNNs.
  LossSpec loss;
  // Transformers only (an error for the CNNs); default: fused-softmax.
  std::optional<Attention> attention;
  // BERT only (an error for GPT-2, gpt and the CNNs); default: pretraining.
  std::optional<BertHead> head;
  // BERT pre-training only (an error with another head or model); default: all.
  std::optional<MlmPositions> mlm;
  // With mlm: masked, the masked positions per sample (DLE's max_predictions_per_seq, an upper
  // bound on the positions its data mask). Default: 20 at seq_len 128 and 80 at seq_len 512, as
  // DLE's pre-training phases 1 and 2 run; any other seq_len requires it. 1 <= it <= seq_len;
  // an error without mlm: masked.
  std::optional<std::int64_t> mlm_predictions;
  // PyTorch up to 1.10 saved the input of softmax and log_softmax for backward besides the
  // result (derivatives.yaml: _softmax_backward_data(grad, result, dim, self); pytorch/pytorch
  // issue 64000, removed by pull request 65242, so 1.11 and later save the result only). Set,
  // every softmax and log_softmax op -- the loss's, and the attention softmax of fused-softmax
  // and eager attention (flash has none) -- also saves the tensor it ran on.
  bool softmax_saves_input = false;
  // How autograd sums the gradients that reach one tensor from several uses (a residual
  // stream's skip and branch, BERT's hidden state feeding query, key, value and the skip, a tied
  // embedding): InputBuffer's accumulate() in torch/csrc/autograd/input_buffer.cpp. Set (PyTorch
  // 2.0 and later): in place into the gradient that arrived first, `old_var.add_(var)`, which it
  // does when the buffer holds that tensor's only reference (pull request 90217, merged for 2.0)
  // -- always the case in the zoo's models, where the first gradient is a backward kernel's
  // fresh output (or a view of one nothing else holds) or the pass-through of an add whose
  // branch has already consumed it (traces/zoo/README.md, "Gradient sums"). So one
  // storage carries a residual stream's gradient down all the layers. Clear (PyTorch 1.13 and
  // earlier): `buffer[pos] = old_var + var`, a new tensor per sum; the parts are freed after it.
  bool accumulate_gradients_in_place = true;
  // Transformer shape (bert-*, gpt2, gpt only; an error for the CNNs).
  std::optional<std::int64_t> layers;
  std::optional<std::int64_t> hidden;
  std::optional<std::int64_t> heads;
  std::optional<std::int64_t> seq_len;
  std::optional<std::int64_t> vocab;
  // Whether the LM head reads the word embedding (tied) or has a weight of its own, Megatron-LM's
  // --untie-embeddings-and-output-weights (megatron/core/models/gpt/gpt_model.py,
  // share_embeddings_and_output_weights). Unset: the model's own: tied for `gpt`, `gpt2` and
  // BERT, the config's tie_word_embeddings for `llama` (false by default). `gpt` and `llama`
  // take either; gpt2 and BERT only true (their Hugging Face heads are tied); an InputError on a CNN.
  std::optional<bool> tie_embeddings;
  // `llama` only: the decoder's architecture (default: Llama-2-7B's, with the MLP width of
  // Meta's rule for another `hidden`); the shape fields above override its own.
  std::optional<DecoderArchitecture> decoder;
  // A decoder with mixture-of-experts layers only (an error otherwise): the routed token counts.
  std::optional<ExpertRouting> routing;
  // `llama` only: LoRA / QLoRA fine-tuning (an error for the other models).
  std::optional<LoraSpec> lora;
  // `llama` only: each sample of seq_len tokens packs this many documents (equal lengths, the
  // remainder one token each to the first), attended separately as the frameworks do it
  // (traces/zoo/README.md, "Packed sequences"): flash runs FlashAttention's varlen kernel over
  // cu_seqlens, eager adds a per-sample block-diagonal mask, sdpa-mem-efficient takes a bool
  // block mask as attn_mask. Rotary positions restart per document. Unset: one per sample.
  std::optional<std::int64_t> packed_documents;
  // `llama` only: build the decoder as torchtitan's model code does (TorchtitanOptions); unset:
  // Hugging Face's LlamaForCausalLM. Module names stay Hugging Face's either way.
  std::optional<TorchtitanOptions> torchtitan;
  // Llama-shaped decoders only: build the layers as Megatron-LM's Transformer Engine layers do
  // (MegatronOptions); unset: Hugging Face's. Module names stay Hugging Face's either way.
  std::optional<MegatronOptions> megatron;
  // `gpt` and `llama` only: one rank of Megatron-LM tensor (and sequence) parallelism; unset or
  // degree 1: the whole model. Invalid values are std::invalid_argument naming the numbers.
  std::optional<TensorParallelSpec> tensor_parallel;
  // `gpt` and `llama` only: one pipeline stage (PipelineStageSpec), composing with
  // tensor_parallel; unset: the whole model. Invalid ranges are std::invalid_argument naming the
  // numbers. A tied head on a last stage that is not also the first reads its own copy of the
  // word embedding (a parameter with its gradient and optimizer state), as Megatron keeps one.
  std::optional<PipelineStageSpec> pipeline_stage;
  // `gpt` and `llama` only: one rank of context parallelism (ContextParallelSpec), composing with
  // tensor_parallel and pipeline_stage; unset or degree 1: the whole sequence. Invalid values are
  // std::invalid_argument naming the field and the numbers.
  std::optional<ContextParallelSpec> context_parallel;
  // Mixture-of-experts decoders only: Megatron-LM's MoE layer with its experts over E ranks
  // (ExpertParallelSpec); composes with tensor_parallel and pipeline_stage. Invalid values are
  // std::invalid_argument naming the numbers.
  std::optional<ExpertParallelSpec> expert_parallel;
};

// The masked-LM positions per sample that `mlm: masked` defaults to at `seq_len`: DeepLearningExamples'
// max_predictions_per_seq of its two pre-training phases (20 at 128, 80 at 512); none at another length.
std::optional<std::int64_t> default_mlm_predictions(std::int64_t seq_len);

// What to generate: a model at a batch size.
struct ModelRequest : ModelSpec {
  std::int64_t batch_size = 1;
};

struct ModelInfo {
  std::string name;
  std::string description;
  bool transformer = false;
};

std::vector<ModelInfo> list_models();

// The model a Hugging Face config.json describes (`json_text`, read from `source`, which the
// messages name): model_type llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe, olmoe,
// gpt_oss or gpt_neox give `llama` with its
// DecoderArchitecture, gpt2 gives `gpt2` and bert gives `bert-base` with the config's shape.
// seq_len is left unset: the caller must give it (max_position_embeddings is the longest a
// model allows, not what it trains on). An unknown model_type, a missing field or a value the
// zoo does not model (hidden_act, head_dim, expert fields in a dense family's config, ...) is an InputError
// naming the file, the field and what is expected.
ModelSpec spec_from_hf_config(std::string_view json_text, const std::string& source);

// Throws InputError naming the field when the model is unknown or an option is out of range
// (batch < 1, heads not dividing hidden, ...).
traces::Trace build_model(const ModelRequest& request);

// The sizes a model-parallel layout is checked against (models/parallel_layout.hpp), resolved as
// build_model resolves them (shape fields over the model's or the config's), without building
// the trace. CNNs have no layers, heads or sequence here (all 0). InputError as build_model's for
// a bad shape field.
struct ModelDimensions {
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t intermediate = 0;  // the dense MLP's width
  std::int64_t experts = 0;       // routed experts of a mixture-of-experts decoder; 0: dense
  std::int64_t vocab = 0;
  std::int64_t seq_len = 0;
};
ModelDimensions model_dimensions(const ModelSpec& spec);

// The tokens each expert of a sparse layer processes per sequence of `seq_len` (the routed
// token counts the trace is built with; traces/zoo/README.md, "Routed tokens"). InputError
// naming the field when the routing is impossible (a share that gives an expert more than
// seq_len tokens, or none).
std::vector<std::int64_t> routed_tokens(const MoeArchitecture& moe, const ExpertRouting& routing, std::int64_t seq_len);

}  // namespace comptrain::zoo

"""Tiny mixture-of-experts causal LMs written from torch primitives, for the capture test
(tests/capture/capture_zoo_test.cpp, CaptureMoe): Hugging Face's MixtralForCausalLM
(modeling_mixtral.py: MixtralSparseMoeBlock, MixtralBlockSparseTop2MLP) and Qwen2MoeForCausalLM
(modeling_qwen2_moe.py: Qwen2MoeSparseMoeBlock with its shared expert and sigmoid gate, dense
layers by mlp_only_layers), with the same module names, so their captured traces can be set beside
the zoo's `llama` with `DecoderArchitecture::moe`. The attention, RMSNorm and rotary pieces are
tiny_llama.py's (Debian's torch 1.13 has no RMSNorm module, no SDPA, and no transformers package).

The sparse block is transformers' expert loop: router linear, softmax in fp32, top-k, the top-k
weights renormalised (Mixtral; Qwen2-MoE with norm_topk_prob), then per expert
`torch.where(expert_mask[e])`, the gather `hidden_states[None, top_x]`, the SwiGLU expert, the
product with `routing_weights[top_x, idx, None]` and `final_hidden_states.index_add_`.

Routing is data-dependent, so the models are built to route known token counts, the same at
every batch size (the capture records two batch sizes and needs the same ops at both):
  - the capture runs with --token-ids arange (position p of every sample holds token p mod V);
  - the embedding of token t scores expert t mod E highest and expert (t + 1) mod E second in the
    first E hidden channels, and the router reads only those channels (gate.weight is a scaled
    identity there, zero elsewhere);
  - no other module writes those channels of the residual stream (the rows of o_proj, of every
    expert's down projection and of the dense MLPs' down projections that write them are zero),
    and RMSNorm scales a row by a positive factor, which keeps the order of the router logits.
So token t goes to experts {t mod E, (t + 1) mod E} (top-2): with S = 16 tokens and E = 4, every
expert receives exactly S * k / E = 8 tokens per sample. The optimizer step between the probe and
the recorded run moves those zeros by about the learning rate, far from the margin of 1 between
the scores. The test checks the counts from the captured shapes.

    PYTHONPATH=tests/capture /usr/bin/python3 traces/capture/comptrain_capture.py \
        tiny_moe:make_tiny_mixtral --tokens 16 --vocab 64 --token-ids arange --causal-lm \
        --optimizer adamw -o tiny_mixtral.json
"""

import torch
from torch import nn
import torch.nn.functional as F

from tiny_llama import LlamaAttention, LlamaModel, LlamaRMSNorm

HIDDEN, HEADS, LAYERS, VOCAB = 32, 4, 2, 64
EXPERTS, TOP_K, EXPERT_INTERMEDIATE = 4, 2, 24
SHARED_INTERMEDIATE, DENSE_INTERMEDIATE = 40, 48
ROUTER_SCALE = 4.0  # the gate's identity block: logits 4 * c * score, c > 0 the RMSNorm scale


class SwiGLU(nn.Module):
    """LlamaMLP / Qwen2MoeMLP (gate_proj, up_proj, down_proj) or, with mixtral_names,
    MixtralBlockSparseTop2MLP (w1, w3, w2): down(act(gate(x)) * up(x))."""

    def __init__(self, hidden, intermediate, mixtral_names=False):
        super().__init__()
        self.mixtral_names = mixtral_names
        if mixtral_names:
            self.w1 = nn.Linear(hidden, intermediate, bias=False)
            self.w2 = nn.Linear(intermediate, hidden, bias=False)
            self.w3 = nn.Linear(hidden, intermediate, bias=False)
        else:
            self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
            self.up_proj = nn.Linear(hidden, intermediate, bias=False)
            self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        self.act_fn = nn.SiLU()

    def down(self):
        return self.w2 if self.mixtral_names else self.down_proj

    def forward(self, x):
        if self.mixtral_names:
            return self.w2(self.act_fn(self.w1(x)) * self.w3(x))
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class SparseMoeBlock(nn.Module):
    """MixtralSparseMoeBlock (normalize=True, no shared expert) or Qwen2MoeSparseMoeBlock."""

    def __init__(self, hidden, experts, top_k, intermediate, normalize, shared_intermediate=0, mixtral_names=True):
        super().__init__()
        self.num_experts, self.top_k, self.normalize = experts, top_k, normalize
        self.gate = nn.Linear(hidden, experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(hidden, intermediate, mixtral_names) for _ in range(experts))
        self.shared_expert = SwiGLU(hidden, shared_intermediate) if shared_intermediate else None
        self.shared_expert_gate = nn.Linear(hidden, 1, bias=False) if shared_intermediate else None

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits = self.gate(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        if self.normalize:
            routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)
        final_hidden_states = torch.zeros((batch_size * sequence_length, hidden_dim), dtype=hidden_states.dtype)
        expert_mask = torch.nn.functional.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
        for expert_idx in range(self.num_experts):
            expert_layer = self.experts[expert_idx]
            idx, top_x = torch.where(expert_mask[expert_idx])
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            current_hidden_states = expert_layer(current_state) * routing_weights[top_x, idx, None]
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
        if self.shared_expert is not None:
            shared_expert_output = self.shared_expert(hidden_states)
            # Hugging Face writes F.sigmoid, a deprecated alias of torch.sigmoid in torch 1.13 (the same op).
            shared_expert_output = torch.sigmoid(self.shared_expert_gate(hidden_states)) * shared_expert_output
            final_hidden_states = final_hidden_states + shared_expert_output
        final_hidden_states = final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return final_hidden_states, router_logits


class MoeDecoderLayer(nn.Module):
    def __init__(self, hidden, heads, kv_heads, mlp, mlp_name, qkv_bias):
        super().__init__()
        self.self_attn = LlamaAttention(hidden, heads, kv_heads)
        if qkv_bias:  # Qwen2MoeAttention: biases on q, k and v
            head_dim = hidden // heads
            self.self_attn.q_proj = nn.Linear(hidden, heads * head_dim, bias=True)
            self.self_attn.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=True)
            self.self_attn.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=True)
        self.mlp_name = mlp_name
        setattr(self, mlp_name, mlp)
        self.input_layernorm = LlamaRMSNorm(hidden)
        self.post_attention_layernorm = LlamaRMSNorm(hidden)

    def forward(self, hidden_states, position_embeddings, causal_mask):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states, position_embeddings, causal_mask)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = getattr(self, self.mlp_name)(hidden_states)
        if isinstance(hidden_states, tuple):
            hidden_states, _router_logits = hidden_states  # output_router_logits=False
        return residual + hidden_states


class MoeForCausalLM(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.model = LlamaModel(HIDDEN, HEADS, VOCAB, layers)
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)
        self.route_known_counts()

    @torch.no_grad()
    def route_known_counts(self):
        """See the module docstring: token t scores expert t mod E at 2 and (t + 1) mod E at 1 in
        the first E residual channels, which only the embedding writes and only the router reads."""
        weight = self.model.embed_tokens.weight
        weight[:, :EXPERTS] = 0
        for token in range(VOCAB):
            weight[token, token % EXPERTS] = 2.0
            weight[token, (token + 1) % EXPERTS] = 1.0
        for layer in self.model.layers:
            layer.self_attn.o_proj.weight[:EXPERTS] = 0
            block = getattr(layer, layer.mlp_name)
            if isinstance(block, SparseMoeBlock):
                block.gate.weight.zero_()
                block.gate.weight[:, :EXPERTS] = ROUTER_SCALE * torch.eye(EXPERTS)
                for expert in block.experts:
                    expert.down().weight[:EXPERTS] = 0
                if block.shared_expert is not None:
                    block.shared_expert.down().weight[:EXPERTS] = 0
            else:
                block.down().weight[:EXPERTS] = 0

    def forward(self, input_ids):
        return self.lm_head(self.model(input_ids))


def make_tiny_mixtral():
    """MixtralForCausalLM: every layer a `block_sparse_moe` of 4 experts (w1, w2, w3), top-2,
    the top-2 weights renormalised."""
    return MoeForCausalLM([
        MoeDecoderLayer(HIDDEN, HEADS, HEADS,
                        SparseMoeBlock(HIDDEN, EXPERTS, TOP_K, EXPERT_INTERMEDIATE, normalize=True),
                        'block_sparse_moe', qkv_bias=False)
        for _ in range(LAYERS)])


def make_tiny_qwen2_moe():
    """Qwen2MoeForCausalLM: q/k/v biases; layer 0 a sparse `mlp` of 4 experts (gate_proj,
    up_proj, down_proj) with a shared expert and its sigmoid gate, top-2 without renormalising
    (norm_topk_prob false); layer 1 in mlp_only_layers, a dense Qwen2MoeMLP of intermediate_size."""
    return MoeForCausalLM([
        MoeDecoderLayer(HIDDEN, HEADS, HEADS,
                        SparseMoeBlock(HIDDEN, EXPERTS, TOP_K, EXPERT_INTERMEDIATE, normalize=False,
                                       shared_intermediate=SHARED_INTERMEDIATE, mixtral_names=False),
                        'mlp', qkv_bias=True),
        MoeDecoderLayer(HIDDEN, HEADS, HEADS, SwiGLU(HIDDEN, DENSE_INTERMEDIATE), 'mlp', qkv_bias=True),
    ])

"""A tiny LLaMA-style causal LM written from torch primitives, for the capture test
(tests/capture/capture_zoo_test.cpp, CaptureLlama): Hugging Face's LlamaForCausalLM as
transformers v4.46+ writes it (modeling_llama.py: LlamaRMSNorm, LlamaRotaryEmbedding made once per
forward pass by the model, apply_rotary_pos_emb, repeat_kv, eager_attention_forward, LlamaMLP),
with the same module names, so its captured trace can be set beside the zoo's `llama`.

Written by hand because Debian's torch 1.13 has neither torch.nn.RMSNorm (added in PyTorch 2.4)
nor torch.nn.functional.scaled_dot_product_attention (2.0), and no transformers package: the
RMSNorm below is LlamaRMSNorm's Python, and only the eager attention exists here.

    /usr/bin/python3 traces/capture/comptrain_capture.py tiny_llama:make_tiny_llama \
        --tokens 16 --vocab 64 --causal-lm --optimizer adamw -o tiny_llama.json   (PYTHONPATH=tests/capture)
"""

import torch
from torch import nn

HIDDEN, HEADS, INTERMEDIATE, LAYERS, VOCAB = 32, 4, 48, 2, 64


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, dim, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer('inv_freq', inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded @ position_ids_expanded).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype=x.dtype), emb.sin().to(dtype=x.dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def repeat_kv(hidden_states, n_rep):
    batch, kv_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, kv_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, kv_heads * n_rep, slen, head_dim)


class LlamaAttention(nn.Module):
    def __init__(self, hidden, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.scaling = self.head_dim ** -0.5
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)

    def forward(self, hidden_states, position_embeddings, causal_mask):
        b, s, _ = hidden_states.shape
        q = self.q_proj(hidden_states).view(b, s, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(b, s, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(b, s, -1, self.head_dim).transpose(1, 2)
        cos, sin = position_embeddings
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k = repeat_kv(k, self.heads // self.kv_heads)
        v = repeat_kv(v, self.heads // self.kv_heads)
        weights = torch.matmul(q, k.transpose(2, 3)) * self.scaling
        weights = weights + causal_mask
        weights = nn.functional.softmax(weights, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(weights, v)
        out = out.transpose(1, 2).contiguous()
        return self.o_proj(out.reshape(b, s, -1))


class LlamaMLP(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, hidden, heads, kv_heads, intermediate):
        super().__init__()
        self.self_attn = LlamaAttention(hidden, heads, kv_heads)
        self.mlp = LlamaMLP(hidden, intermediate)
        self.input_layernorm = LlamaRMSNorm(hidden)
        self.post_attention_layernorm = LlamaRMSNorm(hidden)

    def forward(self, hidden_states, position_embeddings, causal_mask):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states, position_embeddings, causal_mask)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        return residual + hidden_states


class LlamaModel(nn.Module):
    """Embedding, the decoder layers given (tiny_moe.py passes its mixture-of-experts ones), final norm."""

    def __init__(self, hidden, heads, vocab, layers):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(layers)
        self.norm = LlamaRMSNorm(hidden)
        self.rotary_emb = LlamaRotaryEmbedding(hidden // heads)

    def forward(self, input_ids):
        hidden_states = self.embed_tokens(input_ids)
        s = input_ids.shape[1]
        position_ids = torch.arange(s).unsqueeze(0)
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        # LlamaModel._update_causal_mask for eager attention: the dtype's minimum above the diagonal.
        causal_mask = torch.full((s, s), torch.finfo(hidden_states.dtype).min, dtype=hidden_states.dtype).triu(1)[None, None]
        for layer in self.layers:
            hidden_states = layer(hidden_states, position_embeddings, causal_mask)
        return self.norm(hidden_states)


class LlamaForCausalLM(nn.Module):
    def __init__(self, kv_heads=HEADS):
        super().__init__()
        self.model = LlamaModel(HIDDEN, HEADS, VOCAB, [LlamaDecoderLayer(HIDDEN, HEADS, kv_heads, INTERMEDIATE) for _ in range(LAYERS)])
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, input_ids):
        return self.lm_head(self.model(input_ids))


def make_tiny_llama():
    return LlamaForCausalLM()


def make_tiny_llama_gqa():
    """Grouped-query attention: 2 key/value heads for 4 query heads (repeat_kv copies)."""
    return LlamaForCausalLM(kv_heads=2)

"""PyTorch FSDP2 reference for Pylon's llama preset: the same model (as Hugging Face's
LlamaForCausalLM computes it: RMSNorm, q/k/v/o projections without biases, grouped-query attention
through scaled_dot_product_attention(enable_gqa=True), rotate-half RoPE, SwiGLU MLP, a final norm,
an untied head), bf16 parameters and compute, fp32 (or bf16) gradient reduction, AdamW.

Launch: torchrun --nproc_per_node=N bench/torch_llama_fsdp2_bench.py [--compile] [--steps 20 ...]
Prints one line on rank 0: RESULT {json} with tokens/s/GPU, step time (median after warm-up) and
peak memory. Written for bench/h200_llama.sh, which runs it beside `pylon train --preset llama`.
"""
import argparse
import torch.nn as nn
import torch.nn.functional as F

from torch_rope_fsdp2 import add_benchmark_args, apply_rope, rope_tables, run


class Block(nn.Module):
    def __init__(self, dim, heads, kv_heads, head_dim, ffn, eps):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.input_layernorm = nn.RMSNorm(dim, eps=eps)
        self.q_proj = nn.Linear(dim, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(dim, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(dim, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, dim, bias=False)
        self.post_attention_layernorm = nn.RMSNorm(dim, eps=eps)
        self.gate_proj = nn.Linear(dim, ffn, bias=False)
        self.up_proj = nn.Linear(dim, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, dim, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(B, T, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads)
        x = x + self.o_proj(a.transpose(1, 2).reshape(B, T, self.heads * self.head_dim))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, a):
        super().__init__()
        head_dim = a.head_dim or a.dim // a.heads
        self.embed_tokens = nn.Embedding(a.vocab, a.dim)
        self.layers = nn.ModuleList(
            [Block(a.dim, a.heads, a.kv_heads, head_dim, a.ffn_dim, a.norm_eps) for _ in range(a.layers)])
        self.norm = nn.RMSNorm(a.dim, eps=a.norm_eps)
        self.lm_head = nn.Linear(a.dim, a.vocab, bias=False)
        self.head_dim, self.theta = head_dim, a.rope_theta

    def forward(self, idx):
        cos, sin = rope_tables(idx.shape[1], self.head_dim, self.theta, idx.device)
        x = self.embed_tokens(idx)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--dim", type=int, default=2048)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv_heads", type=int, default=8)
    p.add_argument("--head_dim", type=int, default=0, help="0: dim / heads")
    p.add_argument("--ffn_dim", type=int, default=5632)
    p.add_argument("--norm_eps", type=float, default=1e-5)
    add_benchmark_args(p, batch=4, seq=2048)
    a = p.parse_args()
    run("llama", lambda: Llama(a), a)


if __name__ == "__main__":
    main()

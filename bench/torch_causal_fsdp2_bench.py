"""PyTorch FSDP2 reference for Pylon's causal preset: the seed's MiniLLM (shared/bench/
torch_fsdp2_bench.py: RMSNorm, packed q/k/v projection with bias, output projection with bias, SiLU
MLP without biases, untied head, no final norm) with a causal mask and rotate-half rotary embeddings
on q and k (theta 10000), attention through scaled_dot_product_attention(is_causal=True) - the
flash kernel, which nn.MultiheadAttention with a mask would not reach. bf16 parameters and compute,
fp32 (or bf16) gradient reduction, AdamW with PyTorch's defaults as the seed benchmark.

Launch: torchrun --nproc_per_node=N bench/torch_causal_fsdp2_bench.py [--compile] [--batch 2 --seq 4096]
Prints one line on rank 0: RESULT {json} with tokens/s/GPU, step time (median after warm-up) and
peak memory. Written for bench/h200_train.sh (PRESET=causal), which runs it beside `pylon train`.
"""
import argparse
import torch.nn as nn
import torch.nn.functional as F

from torch_rope_fsdp2 import add_benchmark_args, apply_rope, rope_tables, run


class Attention(nn.Module):
    """nn.MultiheadAttention's parameters (in_proj_weight/bias as one (3D, D) projection, out_proj),
    with RoPE on q and k and a causal mask."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.in_proj = nn.Linear(dim, 3 * dim, bias=True)
        self.out_proj = nn.Linear(dim, dim, bias=True)

    def forward(self, h, cos, sin):
        B, T, D = h.shape
        q, k, v = self.in_proj(h).view(B, T, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = apply_rope(q, k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out_proj(a.transpose(1, 2).reshape(B, T, D))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.RMSNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.RMSNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, dim * 4, bias=False), nn.SiLU(),
                                 nn.Linear(dim * 4, dim, bias=False))

    def forward(self, x, cos, sin):
        x = x + self.attn(self.norm1(x), cos, sin)
        return x + self.ffn(self.norm2(x))


class CausalMiniLLM(nn.Module):
    def __init__(self, vocab, dim, layers, heads, theta):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head_dim, self.theta = dim // heads, theta

    def forward(self, idx):
        cos, sin = rope_tables(idx.shape[1], self.head_dim, self.theta, idx.device)
        x = self.embed(idx)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.head(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--dim", type=int, default=2048)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=16)
    add_benchmark_args(p, batch=8, seq=1024)
    a = p.parse_args()
    run("causal", lambda: CausalMiniLLM(a.vocab, a.dim, a.layers, a.heads, a.rope_theta), a)


if __name__ == "__main__":
    main()

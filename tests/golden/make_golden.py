#!/usr/bin/env python3
"""Golden data for Pylon's MiniLLM (DESIGN.md §1-§2), made with PyTorch on the CPU in float32.

Run from the repository root:   python3 tests/golden/make_golden.py
(on Debian the PyTorch 1.13 package belongs to /usr/bin/python3; PyTorch >= 2.4 works too).

Writes tests/golden/<case>/{tokens.bin, init.safetensors, grads_step0.safetensors,
after_step0.safetensors, expected.json} for every case in CASES. Needs only torch (no numpy,
no safetensors package). `--out DIR` writes elsewhere; `--compare DIR` also compares the new
results with an earlier set (e.g. the committed one) and prints the largest differences.

Conventions (the C++ side must match them; see README.md):
- model: torch_fsdp2_bench.py's MiniLLM; RMSNorm = x * rsqrt(mean(x^2, -1) + eps) * w with
  eps = finfo(float32).eps for every dtype; init = torch.manual_seed(0) then construct.
- preset seed: nn.MultiheadAttention as is (bidirectional, no positions).
- preset causal: same parameters; attention written out: q,k,v = h W_in^T + b_in (thirds), heads
  of D/H, rotary (rotate-half) on q and k with pos = 0..T-1 in the row, then q * 1/sqrt(hd),
  scores q k^T, keys j > query i masked to -inf, softmax over keys, heads concatenated, out_proj.
- data: micro-step m = t*K + a, row j (0..B-1) = token positions ((m*B + j)*T + u) mod len,
  u = 0..T; inputs = first T, targets = last T.
"""
import argparse
import array
import copy
import json
import math
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

EPS_F32 = torch.finfo(torch.float32).eps  # 1.1920928955078125e-07, nn.RMSNorm's default in fp32
ROPE_THETA = 10000.0

# The presets' traits, as src/model/preset.cpp's table has them (the golden test checks the
# expected.json of each case against that table): causal mask, rotary embeddings; `llama` marks
# Hugging Face's LlamaForCausalLM (grouped-query attention, SwiGLU, final norm, HF names).
PRESETS = {
    "seed": dict(causal=False, rope=False, llama=False),
    "causal": dict(causal=True, rope=True, llama=False),
    "llama": dict(causal=True, rope=True, llama=True),
}

CASES = [
    dict(case="seed_small", preset="seed", vocab=97, dim=32, layers=2, heads=4, batch=2, seq=16,
         steps=12, grad_accum=1, lr=1e-3, weight_decay=0.01, beta1=0.9, beta2=0.999, eps=1e-8,
         grad_clip=0.0, lr_schedule="constant", warmup=0, min_lr_frac=0.1, tokens_len=300),
    dict(case="causal_small", preset="causal", vocab=89, dim=48, layers=2, heads=4, batch=3, seq=11,
         steps=10, grad_accum=2, lr=3e-3, weight_decay=0.1, beta1=0.9, beta2=0.999, eps=1e-8,
         grad_clip=0.5, lr_schedule="cosine", warmup=3, min_lr_frac=0.1, tokens_len=500),
    # Llama: grouped-query heads (4 over 2), an MLP of odd width, no biases, its own head.
    dict(case="llama_small", preset="llama", vocab=83, dim=32, layers=2, heads=4, kv_heads=2,
         head_dim=8, ffn_dim=72, qkv_bias=False, out_bias=False, tied_head=False, norm_eps=1e-5,
         rope_theta=10000.0, batch=2, seq=12, steps=12, grad_accum=1, lr=2e-3, weight_decay=0.01,
         beta1=0.9, beta2=0.95, eps=1e-8, grad_clip=1.0, lr_schedule="cosine", warmup=2,
         min_lr_frac=0.1, tokens_len=250),
    # Qwen2-like: one key/value head (multi-query), q/k/v biases, a head size apart from dim/heads,
    # the head tied to the embedding, an odd vocabulary, Llama 3's theta and rope scaling (its
    # original context of 16 puts the head's frequencies in all three bands at these positions:
    # one blended, four divided by the factor).
    dict(case="llama_mqa_tied", preset="llama", vocab=61, dim=24, layers=2, heads=4, kv_heads=1,
         head_dim=10, ffn_dim=40, qkv_bias=True, out_bias=False, tied_head=True, norm_eps=1e-6,
         rope_theta=500000.0, rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                               high_freq_factor=4.0, original_max_position_embeddings=16),
         batch=3, seq=9, steps=10, grad_accum=2, lr=3e-3, weight_decay=0.1,
         beta1=0.9, beta2=0.999, eps=1e-8, grad_clip=0.0, lr_schedule="constant", warmup=0,
         min_lr_frac=0.1, tokens_len=400),
    # attention_bias: biases on q, k, v and o; multi-head (kv_heads = heads).
    dict(case="llama_biases", preset="llama", vocab=53, dim=16, layers=1, heads=2, kv_heads=2,
         head_dim=8, ffn_dim=44, qkv_bias=True, out_bias=True, tied_head=False, norm_eps=1e-5,
         rope_theta=10000.0, batch=2, seq=7, steps=8, grad_accum=1, lr=5e-3, weight_decay=0.0,
         beta1=0.9, beta2=0.999, eps=1e-8, grad_clip=0.5, lr_schedule="constant", warmup=1,
         min_lr_frac=0.1, tokens_len=100),
]
EVAL_STEPS = 3
INIT_SEED = 0
DATA_SEED = 1234


# ---------------------------------------------------------------------------------------------
# Model (same modules, construction order and state_dict names as torch_fsdp2_bench.py)

class RMSNorm(nn.Module):
    """nn.RMSNorm(dim) written out (PyTorch 1.13 has none); eps fixed to finfo(float32).eps."""

    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS_F32) * self.weight


def llama3_inv_freq(inv_freq, s):
    """transformers' _compute_llama3_parameters: wavelengths past original/low_freq_factor are
    slowed by the factor, those under original/high_freq_factor kept, those between blended."""
    old = s["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / s["low_freq_factor"], old / s["high_freq_factor"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / s["factor"], inv_freq)
    smooth = (old / wavelen - s["low_freq_factor"]) / (s["high_freq_factor"] - s["low_freq_factor"])
    smoothed = (1 - smooth) * scaled / s["factor"] + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rope_cos_sin(seq, head_dim, dtype, theta=ROPE_THETA, scaling=None):
    """cos/sin tables (seq, head_dim/2), computed in float64, then cast to dtype; scaling: a
    config.json's rope_scaling (llama3) or None."""
    half = head_dim // 2
    i = torch.arange(half, dtype=torch.float64)
    inv_freq = theta ** (-2.0 * i / head_dim)
    if scaling is not None:
        inv_freq = llama3_inv_freq(inv_freq, scaling)
    pos = torch.arange(seq, dtype=torch.float64)
    ang = pos[:, None] * inv_freq[None, :]
    return torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)


def apply_rope(x, cos, sin):
    """x: (B, H, T, hd). Rotate-half (GPT-NeoX/LLaMA): pairs (i, i + hd/2)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def manual_attention(attn, h, causal, rope):
    """nn.MultiheadAttention(D, H, batch_first=True)(h, h, h) written out, plus optional causal
    mask and rotary embeddings on q and k (after the in-projection bias, before the scaling)."""
    B, T, D = h.shape
    H = attn.num_heads
    hd = D // H
    w_q, w_k, w_v = attn.in_proj_weight.chunk(3, dim=0)
    b_q, b_k, b_v = attn.in_proj_bias.chunk(3, dim=0)
    q = F.linear(h, w_q, b_q).view(B, T, H, hd).transpose(1, 2)  # (B, H, T, hd)
    k = F.linear(h, w_k, b_k).view(B, T, H, hd).transpose(1, 2)
    v = F.linear(h, w_v, b_v).view(B, T, H, hd).transpose(1, 2)
    if rope:
        cos, sin = rope_cos_sin(T, hd, h.dtype)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
    q = q * (1.0 / math.sqrt(hd))
    scores = q @ k.transpose(-2, -1)  # (B, H, Tq, Tk)
    if causal:
        future = torch.ones(T, T, dtype=torch.bool).triu(1)  # key j > query i
        scores = scores.masked_fill(future, float("-inf"))
    p = torch.softmax(scores, dim=-1)
    o = (p @ v).transpose(1, 2).reshape(B, T, D)
    return F.linear(o, attn.out_proj.weight, attn.out_proj.bias)


class TransformerBlock(nn.Module):
    def __init__(self, dim, n_heads, preset):
        super().__init__()
        self.traits = PRESETS[preset]
        self.norm1 = RMSNorm(dim)
        self.attn = nn.MultiheadAttention(dim, n_heads, batch_first=True)
        self.norm2 = RMSNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, dim * 4, bias=False), nn.SiLU(),
                                 nn.Linear(dim * 4, dim, bias=False))

    def forward(self, x):
        h = self.norm1(x)
        if not self.traits["causal"] and not self.traits["rope"]:  # PyTorch's own module, as is
            a, _ = self.attn(h, h, h, need_weights=False)
        else:
            a = manual_attention(self.attn, h, causal=self.traits["causal"], rope=self.traits["rope"])
        x = x + a
        return x + self.ffn(self.norm2(x))


class MiniLLM(nn.Module):
    def __init__(self, vocab, dim, n_layers, n_heads, preset):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList([TransformerBlock(dim, n_heads, preset) for _ in range(n_layers)])
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        x = self.embed(idx)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


class LlamaRMSNorm(nn.Module):
    """LlamaRMSNorm in float32: x * rsqrt(mean(x^2, -1) + eps) * weight."""

    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LlamaAttention(nn.Module):
    """LlamaAttention / Qwen2Attention: q, k, v, o projections, grouped-query heads (k and v
    repeated over each group's query heads, repeat_kv), rotate-half rotary embeddings with theta
    from the config, scale 1/sqrt(head_dim), causal."""

    def __init__(self, c):
        super().__init__()
        D, H, KV, hd = c["dim"], c["heads"], c["kv_heads"], c["head_dim"]
        self.H, self.KV, self.hd, self.theta = H, KV, hd, c["rope_theta"]
        self.scaling = c.get("rope_scaling")
        self.q_proj = nn.Linear(D, H * hd, bias=c["qkv_bias"])
        self.k_proj = nn.Linear(D, KV * hd, bias=c["qkv_bias"])
        self.v_proj = nn.Linear(D, KV * hd, bias=c["qkv_bias"])
        self.o_proj = nn.Linear(H * hd, D, bias=c["out_bias"])

    def forward(self, h):
        B, T, _ = h.shape
        q = self.q_proj(h).view(B, T, self.H, self.hd).transpose(1, 2)   # (B, H, T, hd)
        k = self.k_proj(h).view(B, T, self.KV, self.hd).transpose(1, 2)  # (B, KV, T, hd)
        v = self.v_proj(h).view(B, T, self.KV, self.hd).transpose(1, 2)
        cos, sin = rope_cos_sin(T, self.hd, h.dtype, self.theta, self.scaling)
        cos, sin = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)  # HF's (T, hd) tables
        half = self.hd // 2
        rotate_half = lambda x: torch.cat([-x[..., half:], x[..., :half]], -1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(self.H // self.KV, dim=1)  # repeat_kv
        v = v.repeat_interleave(self.H // self.KV, dim=1)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.hd)
        future = torch.ones(T, T, dtype=torch.bool).triu(1)
        p = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        return self.o_proj((p @ v).transpose(1, 2).reshape(B, T, self.H * self.hd))


class LlamaMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c["dim"], c["ffn_dim"], bias=False)
        self.up_proj = nn.Linear(c["dim"], c["ffn_dim"], bias=False)
        self.down_proj = nn.Linear(c["ffn_dim"], c["dim"], bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = LlamaRMSNorm(c["dim"], c["norm_eps"])
        self.self_attn = LlamaAttention(c)
        self.post_attention_layernorm = LlamaRMSNorm(c["dim"], c["norm_eps"])
        self.mlp = LlamaMLP(c)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaForCausalLM(nn.Module):
    """Hugging Face's LlamaForCausalLM computed as its modeling code does, with its state_dict
    names (model.embed_tokens.weight, model.layers.{i}.self_attn.q_proj.weight, ..., lm_head.weight
    unless the head is tied to the embedding). Init: N(0, 0.02) for every matrix and bias (non-zero
    biases, so the comparison sees them), the norms' weights 1 + N(0, 0.1)."""

    def __init__(self, c):
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(c["vocab"], c["dim"])
        self.model.layers = nn.ModuleList([LlamaDecoderLayer(c) for _ in range(c["layers"])])
        self.model.norm = LlamaRMSNorm(c["dim"], c["norm_eps"])
        self.tied = c["tied_head"]
        if not self.tied:
            self.lm_head = nn.Linear(c["dim"], c["vocab"], bias=False)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("layernorm.weight") or name == "model.norm.weight":
                    p.copy_(1 + 0.1 * torch.randn_like(p))
                else:
                    p.normal_(0.0, 0.02)

    def forward(self, idx):
        x = self.model.embed_tokens(idx)
        for layer in self.model.layers:
            x = layer(x)
        x = self.model.norm(x)
        return F.linear(x, self.model.embed_tokens.weight if self.tied else self.lm_head.weight)


def hf_config(c):
    """config.json as transformers' LlamaConfig / Qwen2Config writes it for this case: model_type
    qwen2 for q/k/v biases without an o bias (Qwen2Attention), else llama with attention_bias."""
    qwen2 = c["qkv_bias"] and not c["out_bias"]
    cfg = {
        "architectures": ["Qwen2ForCausalLM" if qwen2 else "LlamaForCausalLM"],
        "model_type": "qwen2" if qwen2 else "llama",
        "vocab_size": c["vocab"], "hidden_size": c["dim"], "intermediate_size": c["ffn_dim"],
        "num_hidden_layers": c["layers"], "num_attention_heads": c["heads"],
        "num_key_value_heads": c["kv_heads"], "head_dim": c["head_dim"], "hidden_act": "silu",
        "max_position_embeddings": 2048, "initializer_range": 0.02, "rms_norm_eps": c["norm_eps"],
        "rope_theta": c["rope_theta"], "rope_scaling": c.get("rope_scaling"),
        "tie_word_embeddings": c["tied_head"],
        "torch_dtype": "float32", "use_cache": True, "bos_token_id": 1, "eos_token_id": 2,
    }
    if qwen2:
        cfg.update(use_sliding_window=False, sliding_window=None, max_window_layers=c["layers"])
    else:
        cfg.update(attention_bias=c["qkv_bias"], mlp_bias=False, pretraining_tp=1)
    return cfg


def expected_names(layers):
    names = ["embed.weight"]
    for i in range(layers):
        p = "layers.%d." % i
        names += [p + "norm1.weight", p + "attn.in_proj_weight", p + "attn.in_proj_bias",
                  p + "attn.out_proj.weight", p + "attn.out_proj.bias", p + "norm2.weight",
                  p + "ffn.0.weight", p + "ffn.2.weight"]
    return names + ["head.weight"]


# ---------------------------------------------------------------------------------------------
# Files

def f32_bytes(t):
    a = array.array("f", t.detach().to(torch.float32).contiguous().view(-1).tolist())
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


def write_safetensors(path, tensors):
    """tensors: list of (name, tensor) -> F32 safetensors, data in the given order, no gaps,
    header padded with spaces to a multiple of 8 bytes."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors:
        b = f32_bytes(t)
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    buf = data[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (path, name)
        b, e = info["data_offsets"]
        a = array.array("f")
        a.frombytes(buf[b:e])
        if sys.byteorder != "little":
            a.byteswap()
        out[name] = torch.tensor(a.tolist(), dtype=torch.float32).view(info["shape"])
    return out


def write_tokens(path, tokens):
    a = array.array("H", tokens)
    if sys.byteorder != "little":
        a.byteswap()
    with open(path, "wb") as f:
        f.write(a.tobytes())


# ---------------------------------------------------------------------------------------------
# Data order, schedule, loss

def micro_batch(tokens, m, B, T):
    """DESIGN §2 order, world size 1 (G = B): row j of micro-step m is positions
    (m*G + j)*T + u, u = 0..T, modulo the file length; returns (inputs, targets), each (B, T)."""
    n = tokens.numel()
    start = (m * B + torch.arange(B)) * T
    pos = (start[:, None] + torch.arange(T + 1)[None, :]) % n
    rows = tokens[pos]
    return rows[:, :T], rows[:, 1:]


def lr_at(c, t):
    lr, W, N = c["lr"], c["warmup"], c["steps"]
    if t < W:
        return lr * (t + 1) / W
    if c["lr_schedule"] == "constant":
        return lr
    min_lr = c["min_lr_frac"] * lr
    progress = (t - W) / max(1, N - W)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def loss_of(model, x, y, vocab):
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))


def global_grad_norm(params):
    """The norm clip_grad_norm_ computes: 2-norm of the per-parameter 2-norms (in their dtype)."""
    return torch.norm(torch.stack([torch.norm(p.grad.detach(), 2.0) for p in params]), 2.0)


# ---------------------------------------------------------------------------------------------
# Checks

def check_rmsnorm():
    if not hasattr(nn, "RMSNorm"):
        return "nn.RMSNorm absent (PyTorch %s): written out only" % torch.__version__
    torch.manual_seed(7)
    x = torch.randn(3, 5, 32)
    ref = nn.RMSNorm(32)
    with torch.no_grad():
        ref.weight.copy_(torch.rand(32) + 0.5)
    mine = RMSNorm(32)
    with torch.no_grad():
        mine.weight.copy_(ref.weight)
    d = (ref(x) - mine(x)).abs().max().item()
    assert d < 1e-6, "RMSNorm differs from nn.RMSNorm by %g" % d
    return "RMSNorm matches nn.RMSNorm (max abs diff %.3g)" % d


def check_manual_attention():
    torch.manual_seed(11)
    worst = 0.0
    for D, H, B, T in [(32, 4, 2, 16), (48, 4, 3, 11)]:
        attn = nn.MultiheadAttention(D, H, batch_first=True)
        with torch.no_grad():  # non-zero biases, so the check sees them
            attn.in_proj_bias.normal_(0, 0.1)
            attn.out_proj.bias.normal_(0, 0.1)
        h = torch.randn(B, T, D)
        ref, _ = attn(h, h, h, need_weights=False)
        mine = manual_attention(attn, h, causal=False, rope=False)
        d = (ref - mine).abs().max().item()
        assert d < 1e-6, "manual attention differs from nn.MultiheadAttention by %g" % d
        worst = max(worst, d)
        # causal mask alone == nn.MultiheadAttention with a boolean causal attn_mask
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        ref_c, _ = attn(h, h, h, need_weights=False, attn_mask=mask)
        mine_c = manual_attention(attn, h, causal=True, rope=False)
        d = (ref_c - mine_c).abs().max().item()
        assert d < 1e-6, "causal manual attention differs by %g" % d
        worst = max(worst, d)
    # rope: position 0 is the identity; rotation keeps the norm of each pair;
    # q_m . k_n depends only on m - n.
    hd = 12
    cos, sin = rope_cos_sin(8, hd, torch.float64)
    q = torch.randn(hd, dtype=torch.float64)
    k = torch.randn(hd, dtype=torch.float64)
    qs = apply_rope(q.expand(8, hd), cos, sin)
    ks = apply_rope(k.expand(8, hd), cos, sin)
    assert torch.allclose(qs[0], q)
    assert torch.allclose(qs.norm(dim=-1), q.norm().expand(8))
    assert abs((qs[5] @ ks[2]).item() - (qs[3] @ ks[0]).item()) < 1e-12
    # rope on element pairs (i, i + hd/2) with angle pos * theta^(-2i/hd)
    x = torch.zeros(1, 1, 3, hd, dtype=torch.float64)
    x[..., 1] = 1.0  # pair i = 1
    r = apply_rope(x, *rope_cos_sin(3, hd, torch.float64))
    a = 2 * ROPE_THETA ** (-2.0 / hd)
    assert abs(r[0, 0, 2, 1].item() - math.cos(a)) < 1e-12
    assert abs(r[0, 0, 2, 1 + hd // 2].item() - math.sin(a)) < 1e-12
    return "manual attention matches nn.MultiheadAttention (max abs diff %.3g); rope checks pass" % worst


# ---------------------------------------------------------------------------------------------
# One case

def run_case(c, out_root):
    V, D, L, H, B, T = c["vocab"], c["dim"], c["layers"], c["heads"], c["batch"], c["seq"]
    N, K = c["steps"], c["grad_accum"]
    out = os.path.join(out_root, c["case"])
    os.makedirs(out, exist_ok=True)

    g = torch.Generator()
    g.manual_seed(DATA_SEED)
    tokens = torch.randint(0, V, (c["tokens_len"],), generator=g, dtype=torch.int64)
    need = (N * K * B) * T + 1  # one past the last position the run reads
    assert need > tokens.numel(), "token file must be short enough for the run to wrap"
    write_tokens(os.path.join(out, "tokens.bin"), tokens.tolist())

    torch.manual_seed(INIT_SEED)
    llama = PRESETS[c["preset"]]["llama"]
    model = LlamaForCausalLM(c) if llama else MiniLLM(V, D, L, H, c["preset"])
    model.train()  # dropout is 0; train mode keeps nn.MultiheadAttention off its fused fast path
    names = [n for n, _ in model.named_parameters()]
    assert llama or names == expected_names(L), names
    assert list(model.state_dict().keys()) == names
    model64 = copy.deepcopy(model).double()

    write_safetensors(os.path.join(out, "init.safetensors"), list(model.state_dict().items()))

    # eval loss of the initial model: micro-steps 0..EVAL_STEPS-1 of the same data order
    with torch.no_grad():
        ev32 = [loss_of(model, *micro_batch(tokens, m, B, T), V).item() for m in range(EVAL_STEPS)]
        ev64 = [loss_of(model64, *micro_batch(tokens, m, B, T), V).item() for m in range(EVAL_STEPS)]
    eval_loss, eval_loss64 = sum(ev32) / EVAL_STEPS, sum(ev64) / EVAL_STEPS

    def make_opt(m):
        return torch.optim.AdamW(m.parameters(), lr=c["lr"], betas=(c["beta1"], c["beta2"]),
                                 eps=c["eps"], weight_decay=c["weight_decay"], foreach=False)
    opt, opt64 = make_opt(model), make_opt(model64)
    params, params64 = list(model.parameters()), list(model64.parameters())

    losses, losses64, norms, norms64, lrs = [], [], [], [], []
    for t in range(N):
        step_losses = {}
        for mdl, o, ps, key in ((model, opt, params, 32), (model64, opt64, params64, 64)):
            o.zero_grad(set_to_none=True)
            micro = []
            for a in range(K):
                x, y = micro_batch(tokens, t * K + a, B, T)
                loss = loss_of(mdl, x, y, V)
                (loss / K).backward()
                micro.append(loss.item())
            step_losses[key] = sum(micro) / K
            if key == 32 and t == 0:
                write_safetensors(os.path.join(out, "grads_step0.safetensors"),
                                  [(n, p.grad) for n, p in zip(names, ps)])
            norm = global_grad_norm(ps)
            if c["grad_clip"] > 0:
                clip_norm = torch.nn.utils.clip_grad_norm_(ps, c["grad_clip"])
                assert abs(clip_norm.item() - norm.item()) <= 1e-6 * norm.item()
            lr_t = lr_at(c, t)
            for group in o.param_groups:
                group["lr"] = lr_t
            o.step()
            if key == 32:
                norms.append(norm.item())
                lrs.append(lr_t)
            else:
                norms64.append(norm.item())
        losses.append(step_losses[32])
        losses64.append(step_losses[64])
        if t == 0:
            write_safetensors(os.path.join(out, "after_step0.safetensors"),
                              list(model.state_dict().items()))

    rel = lambda a, b: abs(a - b) / abs(b)
    exp = {k: c[k] for k in ("case", "preset", "vocab", "dim", "layers", "heads", "batch", "seq",
                             "steps", "grad_accum", "lr", "weight_decay", "beta1", "beta2", "eps",
                             "grad_clip", "lr_schedule", "warmup", "min_lr_frac")}
    if llama:  # the per-model options of the llama preset
        exp.update({k: c[k] for k in ("kv_heads", "head_dim", "ffn_dim", "qkv_bias", "out_bias", "tied_head")})
        exp["rope_scaling"] = c.get("rope_scaling")
    exp.update(
        losses=losses, grad_norms=norms, lrs=lrs,
        eval_loss=eval_loss, eval_steps=EVAL_STEPS, eval_tokens=EVAL_STEPS * B * T,
        fp32_vs_fp64_max_rel=max(rel(a, b) for a, b in zip(losses + [eval_loss],
                                                          losses64 + [eval_loss64])),
        fp32_vs_fp64_grad_norm_max_rel=max(rel(a, b) for a, b in zip(norms, norms64)),
        losses_fp64=losses64, grad_norms_fp64=norms64, eval_loss_fp64=eval_loss64,
        tokens_file="tokens.bin", tokens_len=tokens.numel(), tokens_dtype="uint16",
        data_seed=DATA_SEED, init_seed=INIT_SEED, rmsnorm_eps=c.get("norm_eps", EPS_F32),
        causal=PRESETS[c["preset"]]["causal"], rope=PRESETS[c["preset"]]["rope"],
        rope_theta=c.get("rope_theta", ROPE_THETA) if PRESETS[c["preset"]]["rope"] else None,
        params=sum(p.numel() for p in params),
        # without rotary embeddings the key bias gets a true gradient of exactly 0 (softmax is invariant to
        # adding q.b_k to every score of a query), so these slices of grads_step0 hold only
        # rounding noise (~1e-9) and after_step0 there moves by up to lr*|g|/(|g|+eps) ~ 1e-4:
        # compare them with an absolute tolerance only. Losses do not depend on them.
        zero_grad_slices=[{"name": "layers.%d.attn.in_proj_bias" % i, "begin": D, "end": 2 * D}
                          for i in range(L)] if not PRESETS[c["preset"]]["rope"] else [],
        torch_version=torch.__version__)
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(exp, f, indent=1)
        f.write("\n")
    if llama:  # Hugging Face's config.json of the model, beside init.safetensors (its weights)
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(hf_config(c), f, indent=2)
            f.write("\n")

    # round trip of what was written
    back = read_safetensors(os.path.join(out, "after_step0.safetensors"))
    assert list(back.keys()) == names
    return exp


def check_llama_attention():
    """LlamaAttention with as many key/value heads as query heads equals the causal preset's
    written-out attention (manual_attention, rope and mask) given the same weights; with fewer, it
    equals that attention over k and v repeated per group."""
    torch.manual_seed(13)
    worst = 0.0
    for H, KV in [(4, 4), (4, 2), (4, 1)]:
        D, hd, B, T = 32, 8, 2, 9
        c = dict(dim=D, heads=H, kv_heads=KV, head_dim=hd, rope_theta=ROPE_THETA, qkv_bias=True, out_bias=True)
        la = LlamaAttention(c)
        with torch.no_grad():
            for p in la.parameters():
                p.normal_(0, 0.1)
        mha = nn.MultiheadAttention(D, H, batch_first=True)
        g = H // KV
        rep = lambda w: w.view(KV, hd, *w.shape[1:]).repeat_interleave(g, dim=0).reshape(H * hd, *w.shape[1:])
        with torch.no_grad():
            mha.in_proj_weight.copy_(torch.cat([la.q_proj.weight, rep(la.k_proj.weight), rep(la.v_proj.weight)]))
            mha.in_proj_bias.copy_(torch.cat([la.q_proj.bias, rep(la.k_proj.bias), rep(la.v_proj.bias)]))
            mha.out_proj.weight.copy_(la.o_proj.weight)
            mha.out_proj.bias.copy_(la.o_proj.bias)
        h = torch.randn(B, T, D)
        d = (la(h) - manual_attention(mha, h, causal=True, rope=True)).abs().max().item()
        assert d < 1e-6, "LlamaAttention (H %d, KV %d) differs from the written-out attention by %g" % (H, KV, d)
        worst = max(worst, d)
    return "LlamaAttention matches the written-out attention at KV = H, H/2, 1 (max abs diff %.3g)" % worst


def compare(new_root, old_root):
    """Largest relative differences between two sets of golden files (e.g. two PyTorch versions)."""
    for c in CASES:
        a_dir, b_dir = os.path.join(new_root, c["case"]), os.path.join(old_root, c["case"])
        if not os.path.exists(os.path.join(b_dir, "expected.json")):
            print("  %s: new (not in %s)" % (c["case"], old_root))
            continue
        with open(os.path.join(a_dir, "expected.json")) as f:
            a = json.load(f)
        with open(os.path.join(b_dir, "expected.json")) as f:
            b = json.load(f)
        for key in ("losses", "grad_norms", "lrs"):
            d = max(abs(x - y) / abs(y) for x, y in zip(a[key], b[key]))
            print("  %s %s: max rel diff %.3g" % (c["case"], key, d))
        print("  %s eval_loss: rel diff %.3g" % (c["case"], abs(a["eval_loss"] - b["eval_loss"]) / b["eval_loss"]))
        for fn in ("init", "grads_step0", "after_step0"):
            ta = read_safetensors(os.path.join(a_dir, fn + ".safetensors"))
            tb = read_safetensors(os.path.join(b_dir, fn + ".safetensors"))
            assert ta.keys() == tb.keys()
            d = max(((ta[k] - tb[k]).abs().max() / tb[k].abs().max().clamp(min=1e-30)).item() for k in ta)
            print("  %s %s.safetensors: max diff / max |value| per tensor %.3g" % (c["case"], fn, d))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=here, help="root folder for the case folders (default: %(default)s)")
    ap.add_argument("--compare", default="", help="compare the new files with this root afterwards")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)
    print("PyTorch", torch.__version__)
    print(check_rmsnorm())
    print(check_manual_attention())
    print(check_llama_attention())
    for c in CASES:
        e = run_case(c, args.out)
        print("%s: losses[:3] %s  eval_loss %.7f  fp32 vs fp64 max rel %.2g" % (
            c["case"], ["%.7f" % v for v in e["losses"][:3]], e["eval_loss"], e["fp32_vs_fp64_max_rel"]))
    if args.compare:
        compare(args.out, args.compare)


if __name__ == "__main__":
    main()

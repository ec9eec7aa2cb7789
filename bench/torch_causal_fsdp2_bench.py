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
import argparse, json, os, time
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy


def rope_tables(seq, head_dim, theta, device):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)  # (seq, head_dim): both halves of a head
    return angles.cos(), angles.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


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
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
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
    p.add_argument("--rope_theta", type=float, default=10000.0)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--compile", action="store_true", help="torch.compile each block")
    p.add_argument("--reduce_bf16", action="store_true", help="reduce-scatter in bf16 instead of fp32")
    a = p.parse_args()

    dist.init_process_group(backend="nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    torch.manual_seed(0)
    model = CausalMiniLLM(a.vocab, a.dim, a.layers, a.heads, a.rope_theta).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                              reduce_dtype=torch.bfloat16 if a.reduce_bf16 else torch.float32)
    for i, layer in enumerate(model.layers):
        if a.compile:
            model.layers[i] = layer = torch.compile(layer)
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    g = torch.Generator(device=dev)
    g.manual_seed(1234 + rank)

    def step():
        tokens = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev, generator=g)
        targets = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev, generator=g)
        opt.zero_grad(set_to_none=True)
        logits = model(tokens)
        loss = F.cross_entropy(logits.view(-1, a.vocab), targets.view(-1))
        loss.backward()
        opt.step()
        return loss

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats(dev)
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    tok = a.batch * a.seq
    res = dict(model="causal", world=world, params=n_params, compile=a.compile, reduce_bf16=a.reduce_bf16,
               batch=a.batch, seq=a.seq, step_ms_median=med * 1e3, step_ms_min=times[0] * 1e3,
               tokens_per_s_per_gpu=tok / med, peak_mem_gb=torch.cuda.max_memory_allocated(dev) / 1e9,
               peak_reserved_gb=torch.cuda.max_memory_reserved(dev) / 1e9, final_loss=float(loss.item()),
               torch=torch.__version__)
    if rank == 0:
        print("RESULT " + json.dumps(res), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

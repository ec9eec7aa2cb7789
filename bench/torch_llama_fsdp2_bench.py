"""PyTorch FSDP2 reference for Pylon's llama preset: the same model (as Hugging Face's
LlamaForCausalLM computes it: RMSNorm, q/k/v/o projections without biases, grouped-query attention
through scaled_dot_product_attention(enable_gqa=True), rotate-half RoPE, SwiGLU MLP, a final norm,
an untied head), bf16 parameters and compute, fp32 (or bf16) gradient reduction, AdamW.

Launch: torchrun --nproc_per_node=N bench/torch_llama_fsdp2_bench.py [--compile] [--steps 20 ...]
Prints one line on rank 0: RESULT {json} with tokens/s/GPU, step time (median after warm-up) and
peak memory. Written for bench/h200_llama.sh, which runs it beside `pylon train --preset llama`.
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
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
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
    p.add_argument("--rope_theta", type=float, default=10000.0)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=2048)
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
    model = Llama(a).to(dev)
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
    res = dict(model="llama", world=world, params=n_params, compile=a.compile, reduce_bf16=a.reduce_bf16,
               batch=a.batch, seq=a.seq, step_ms_median=med * 1e3, step_ms_min=times[0] * 1e3,
               tokens_per_s_per_gpu=tok / med, peak_mem_gb=torch.cuda.max_memory_allocated(dev) / 1e9,
               peak_reserved_gb=torch.cuda.max_memory_reserved(dev) / 1e9, final_loss=float(loss.item()),
               torch=torch.__version__)
    if rank == 0:
        print("RESULT " + json.dumps(res), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

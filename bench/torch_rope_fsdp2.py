"""What the PyTorch FSDP2 references for Pylon's rotary presets share (bench/torch_causal_fsdp2_bench.py,
bench/torch_llama_fsdp2_bench.py): rotate-half RoPE, the common flags, and the benchmark itself -
per-block fully_shard (optionally torch.compile'd) with bf16 parameters and compute and fp32 (or bf16)
gradient reduction, AdamW(lr 3e-4), random tokens and targets, median step time after warm-up
(synchronised wall clock) and peak allocated memory, printed as one `RESULT {json}` line by rank 0.
"""
import json, os, time
import torch
import torch.nn.functional as F
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy


def rope_tables(seq, head_dim, theta, device):
    """cos and sin of (seq, head_dim): position x inverse frequency, both halves of a head alike."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(q, k, cos, sin):
    """q and k (B, heads, T, head_dim) rotated by the tables (cast to their dtype)."""
    cos, sin = cos.to(q.dtype), sin.to(q.dtype)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def add_benchmark_args(p, batch, seq):
    """The flags every reference takes; batch and seq are the preset's default per GPU."""
    p.add_argument("--rope_theta", type=float, default=10000.0)
    p.add_argument("--batch", type=int, default=batch)
    p.add_argument("--seq", type=int, default=seq)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--compile", action="store_true", help="torch.compile each block")
    p.add_argument("--reduce_bf16", action="store_true", help="reduce-scatter in bf16 instead of fp32")


def run(name, make_model, a):
    """Under torchrun: builds make_model() (seeded 0; it has .layers) on this rank's GPU, shards it and
    times a.steps steps after a.warmup; rank 0 prints the RESULT line."""
    dist.init_process_group(backend="nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    torch.manual_seed(0)
    model = make_model().to(dev)
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
    res = dict(model=name, world=world, params=n_params, compile=a.compile, reduce_bf16=a.reduce_bf16,
               batch=a.batch, seq=a.seq, step_ms_median=med * 1e3, step_ms_min=times[0] * 1e3,
               tokens_per_s_per_gpu=tok / med, peak_mem_gb=torch.cuda.max_memory_allocated(dev) / 1e9,
               peak_reserved_gb=torch.cuda.max_memory_reserved(dev) / 1e9, final_loss=float(loss.item()),
               torch=torch.__version__)
    if rank == 0:
        print("RESULT " + json.dumps(res), flush=True)
    dist.destroy_process_group()

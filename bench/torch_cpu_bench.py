"""PyTorch (CPU, fp32) baseline for Pylon's CPU reference: the seed MiniLLM of
shared/bench/torch_fsdp2_bench.py with RMSNorm written out (PyTorch 1.13 has no nn.RMSNorm),
trained with AdamW on random tokens. Prints one JSON line: median tokens/s after warm-up.

Run: python3 bench/torch_cpu_bench.py --vocab 32000 --dim 256 --layers 4 --heads 4 --batch 4 --seq 256
"""
import argparse, json, time
import torch
import torch.nn as nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=torch.finfo(torch.float32).eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(dim), RMSNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ffn = nn.Sequential(nn.Linear(dim, 4 * dim, bias=False), nn.SiLU(),
                                 nn.Linear(4 * dim, dim, bias=False))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.ffn(self.norm2(x))


def main():
    p = argparse.ArgumentParser()
    for name, default in [("vocab", 32000), ("dim", 256), ("layers", 4), ("heads", 4), ("batch", 4),
                          ("seq", 256), ("steps", 10), ("warmup", 2), ("threads", 2)]:
        p.add_argument("--" + name, type=int, default=default)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    embed = nn.Embedding(a.vocab, a.dim)
    blocks = nn.ModuleList([Block(a.dim, a.heads) for _ in range(a.layers)])
    head = nn.Linear(a.dim, a.vocab, bias=False)
    params = list(embed.parameters()) + list(blocks.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=3e-4)
    g = torch.Generator().manual_seed(1234)
    times = []
    for i in range(a.warmup + a.steps):
        x = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g)
        y = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g)
        t0 = time.perf_counter()
        h = embed(x)
        for b in blocks:
            h = b(h)
        loss = nn.functional.cross_entropy(head(h).view(-1, a.vocab), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    print(json.dumps({"framework": "pytorch " + torch.__version__, "threads": a.threads,
                      "step_s_median": med, "tokens_per_s": a.batch * a.seq / med,
                      "params": sum(p.numel() for p in params)}))


if __name__ == "__main__":
    main()

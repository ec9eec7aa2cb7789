# PyTorch beside pylon_bench_vulkan's decode: one token at a time through the seed model (DESIGN §1:
# V32000 D2048 L12 H16, unmasked attention over a KV cache, no position encoding) on one GPU, with
# the best a PyTorch user has for batch-1 decode:
#   eager       fp16 modules as written, a kernel launch per op;
#   graph       the same step captured once in a CUDA graph (static KV cache, keys past the current
#               position masked), replayed per token: no launch gaps;
#   compile     torch.compile(fullgraph=True) of the step (Inductor: fused norms, epilogues and
#               dequantisation), then captured in a CUDA graph as above;
#   int8 graph  weight-only int8 with one scale per output channel (Pylon's int8), dequantised in
#               the matmul's prologue by torch.compile (gpt-fast's recipe), in a CUDA graph.
# Each prints ms a token (median of --tokens decode steps after warm-up, CUDA events around each
# step) and the percentage of the bandwidth bound: weight bytes a token (every matrix, bias and norm
# weight, the head and one embedding row, as edge_bytes_per_token counts them) over --bandwidth GB/s
# (pylon_bench_vulkan's measured read bandwidth, printed by it in the same call).
# Usage: python3 bench/torch_decode_bench.py [--bandwidth 4561.5] [--prompt 16] [--tokens 48]
#        [--variants eager,graph,compile,int8]
import argparse
import time

import torch
import torch.nn.functional as F

V, D, L, H = 32000, 2048, 12, 16
HD = D // H
EPS = 1.1920929e-07


def rms_norm(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()).to(x.dtype)


class Linear:
    """y = x·Wᵀ (+ b); int8: W stored as int8 with a float scale per output row."""

    def __init__(self, rows, cols, bias, int8, g):
        w = (torch.rand(rows, cols, device="cuda", generator=g) * 2 - 1) * cols ** -0.5
        self.b = (torch.rand(rows, device="cuda", generator=g) * 0.02).half() if bias else None
        if int8:
            self.scale = (w.abs().amax(1) / 127).half()
            self.w = torch.round(w / self.scale.float()[:, None]).to(torch.int8)
        else:
            self.scale, self.w = None, w.half()

    def __call__(self, x):
        if self.scale is None:
            return F.linear(x, self.w, self.b)
        y = F.linear(x, self.w.to(x.dtype)) * self.scale
        return y if self.b is None else y + self.b

    def nbytes(self):
        return sum(t.numel() * t.element_size() for t in (self.w, self.b, self.scale) if t is not None)


class Model:
    def __init__(self, int8, max_len):
        g = torch.Generator(device="cuda").manual_seed(0)
        self.embed = (torch.rand(V, D, device="cuda", generator=g) * 2 - 1).half()
        self.blocks = []
        for _ in range(L):
            self.blocks.append(dict(
                norm1=torch.ones(D, device="cuda", dtype=torch.half),
                qkv=Linear(3 * D, D, True, int8, g), out=Linear(D, D, True, int8, g),
                norm2=torch.ones(D, device="cuda", dtype=torch.half),
                w1=Linear(4 * D, D, False, int8, g), w2=Linear(D, 4 * D, False, int8, g)))
        self.head = Linear(V, D, False, int8, g)
        # (layer, k or v, head, position, head dim): the static cache a graph can capture
        self.cache = torch.zeros(L, 2, H, max_len, HD, device="cuda", dtype=torch.half)

    def bytes_per_token(self):
        n = D * self.embed.element_size() + self.head.nbytes()
        for b in self.blocks:
            n += sum(b[k].nbytes() for k in ("qkv", "out", "w1", "w2")) + 2 * D * 2
        return n

    def step(self, token, pos, mask):
        """One decode step: token (1,) int64, pos (1,) int64 where its k and v go, mask (max_len,)
        additive (0 up to pos, -inf after). Returns the logits (1, V)."""
        x = self.embed[token]
        for i, b in enumerate(self.blocks):
            q, k, v = b["qkv"](rms_norm(x, b["norm1"])).view(3, H, HD).unbind(0)
            self.cache[i, 0].index_copy_(1, pos, k[:, None])
            self.cache[i, 1].index_copy_(1, pos, v[:, None])
            att = F.scaled_dot_product_attention(q[None, :, None], self.cache[i, 0][None], self.cache[i, 1][None],
                                                 attn_mask=mask[None, None, None])
            x = x + b["out"](att.reshape(1, D))
            x = x + b["w2"](F.silu(b["w1"](rms_norm(x, b["norm2"]))))
        return self.head(x)


def time_decode(run, prompt, tokens, warm_s=1.0):
    """run(i): decode step at position i. Prompt steps (untimed) then `tokens` timed steps, after
    warm_s seconds of repeated steps to bring the clocks up. Returns the median ms a step."""
    t0 = time.time()
    while time.time() - t0 < warm_s:
        for i in range(prompt):
            run(i)
    torch.cuda.synchronize()
    for i in range(prompt):
        run(i)
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(tokens)]
    for j, (a, b) in enumerate(ev):
        a.record()
        run(prompt + j)
        b.record()
    torch.cuda.synchronize()
    return sorted(a.elapsed_time(b) for a, b in ev)[tokens // 2]


def graphed(step, max_len):
    """A CUDA graph of step over static inputs; returns run(i) that fills them and replays."""
    token = torch.zeros(1, dtype=torch.long, device="cuda")
    pos = torch.zeros(1, dtype=torch.long, device="cuda")
    mask = torch.full((max_len,), float("-inf"), device="cuda", dtype=torch.half)
    ar = torch.arange(max_len, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step(token, pos, mask)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step(token, pos, mask)

    def run(i):
        token.fill_((i * 7919 + 13) % V)
        pos.fill_(i)
        mask.copy_(torch.where(ar <= i, 0.0, float("-inf")).half())
        g.replay()
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bandwidth", type=float, default=4561.5, help="GB/s the bound uses")
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--variants", default="eager,graph,compile,int8")
    a = ap.parse_args()
    max_len = a.prompt + a.tokens
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, seed V{V} D{D} L{L} H{H}, "
          f"prompt {a.prompt}, {a.tokens} decode steps, bound at {a.bandwidth} GB/s")
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    with torch.inference_mode():
        for variant in a.variants.split(","):
            m = Model(int8=variant == "int8", max_len=max_len)
            t0 = time.time()
            if variant == "eager":
                ar = torch.arange(max_len, device="cuda")

                def run(i, m=m, ar=ar):
                    m.step(torch.tensor([(i * 7919 + 13) % V], device="cuda"), torch.tensor([i], device="cuda"),
                           torch.where(ar <= i, 0.0, float("-inf")).half())
            elif variant == "graph":
                run = graphed(m.step, max_len)
            else:  # compile, int8
                step = torch.compile(m.step, fullgraph=True)
                run = graphed(step, max_len)
            setup = time.time() - t0
            ms = time_decode(run, a.prompt, a.tokens)
            nbytes = m.bytes_per_token()
            bound_ms = nbytes / (a.bandwidth * 1e9) * 1e3
            print(f"torch {variant:8s} decode: {ms:.3f} ms/token median, {1e3 / ms:.1f} tokens/s; weights "
                  f"{nbytes / 1e6:.1f} MB/token; {100 * bound_ms / ms:.0f}% of the bound "
                  f"({nbytes / ms / 1e6:.1f} GB/s effective; setup {setup:.0f} s)", flush=True)
            del m, run


if __name__ == "__main__":
    main()

"""PyTorch eager timings of the ops pylon_bench_kernels times, at the same seed-preset sizes and with
the same method (median of 20 after 3 warm-ups, CUDA events, L2 flushed before each run): the
competitor's numbers next to ours. Run on the GPU machine: python3 bench/torch_kernels_bench.py"""
import torch
import torch.nn.functional as F

N, D, V, FF, P = 8192, 2048, 32000, 8192, 735_199_232
dev = torch.device("cuda")
flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)


def median_us(fn, runs=20, warmup=3):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        flush.zero_()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)
    times.sort()
    return (times[runs // 2 - 1] + times[runs // 2]) / 2


def row(name, us, bytes_=None, flops=None):
    extra = f"{bytes_ / us / 1e3:9.0f} GB/s" if bytes_ else f"{flops / us / 1e6:9.0f} TFLOP/s"
    print(f"torch {name:34s} {us:10.1f} us {extra}")


def main():
    bf = torch.bfloat16
    torch.manual_seed(0)
    table = torch.randn(V, D, device=dev, dtype=bf)
    ids = torch.randint(0, V, (N,), device=dev)
    dout = torch.randn(N, D, device=dev, dtype=bf)
    row("embedding_forward", median_us(lambda: F.embedding(ids, table)), 4.0 * N * D)
    row("embedding_backward (bf16 grad)",
        median_us(lambda: torch.ops.aten.embedding_dense_backward(dout, ids, V, -1, False)), 2.0 * N * D)
    x, delta = torch.randn(N, D, device=dev, dtype=bf), torch.randn(N, D, device=dev, dtype=bf)
    w = torch.randn(D, device=dev, dtype=bf)
    row("residual add + rms_norm", median_us(lambda: F.rms_norm(x + delta, (D,), w, 1.1920929e-07)), 8.0 * N * D)
    a = torch.randn(N, FF, device=dev, dtype=bf)
    g = torch.randn(N, FF, device=dev, dtype=bf)
    row("silu_forward", median_us(lambda: F.silu(a)), 4.0 * N * FF)
    row("silu_backward", median_us(lambda: torch.ops.aten.silu_backward(g, a)), 6.0 * N * FF)
    logits = (2 * torch.randn(N, V, device=dev)).to(bf)
    targets = torch.randint(0, V, (N,), device=dev)

    def ce():
        z = logits.detach().requires_grad_()
        F.cross_entropy(z, targets).backward()
    row("cross_entropy fwd+bwd (bf16)", median_us(ce), 4.0 * N * V)
    grads = torch.randn(P, device=dev) * 1e-3
    row("sum of squares", median_us(lambda: torch.linalg.vector_norm(grads)), 4.0 * P)
    p = torch.nn.Parameter(torch.randn(P, device=dev) * 0.02)
    p.grad = grads
    opt = torch.optim.AdamW([p], lr=3e-4, fused=True)
    row("AdamW fused step", median_us(opt.step), 28.0 * P)
    del p, opt, grads
    for name, i, o in [("qkv", D, 3 * D), ("out_proj", D, D), ("ffn1", D, FF), ("ffn2", FF, D), ("head", D, V)]:
        xin = torch.randn(N, i, device=dev, dtype=bf)
        wt = torch.randn(o, i, device=dev, dtype=bf)
        row(f"linear {name} fwd", median_us(lambda: F.linear(xin, wt)), flops=2.0 * N * i * o)


if __name__ == "__main__":
    main()

# The competitor for bench/attention_bench.cpp: PyTorch's scaled_dot_product_attention at the same
# shapes and masks, per backend, bf16, median of 20 after warm-up with CUDA events.
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

CEILING = 790.0  # TFLOP/s, bf16 cuBLAS on this H200
RUNS, WARMUP = 20, 5


def median_ms(fn):
    for _ in range(WARMUP):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(RUNS)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(RUNS)]
    for a, b in zip(starts, stops):
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return sorted(a.elapsed_time(b) for a, b in zip(starts, stops))[RUNS // 2]


def bench(B, T, H, hd, causal, backend):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.rand(B, H, T, hd, device="cuda", generator=g, dtype=torch.bfloat16) * 2 - 1 for _ in range(3))
    for x in (q, k, v):
        x.requires_grad_(True)
    dout = torch.rand(B, H, T, hd, device="cuda", generator=g, dtype=torch.bfloat16) * 2 - 1
    with sdpa_kernel(backend):
        fwd = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        bwd = median_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
    flop = 4.0 * B * H * T * T * hd * (0.5 if causal else 1.0)
    for name, ms, f in (("fwd", fwd, flop), ("bwd", bwd, 2.5 * flop)):
        tf = f / (ms * 1e-3) / 1e12
        print(f"torch {backend.name:<18} B{B} T{T} H{H:<2} hd{hd:<3}  {'causal' if causal else 'full':<6}  {name}"
              f"  {ms:8.3f} ms  {tf:6.1f} TFLOP/s  {100 * tf / CEILING:5.1f}%")


def main():
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    for B, T, H, hd in ((8, 1024, 16, 128), (8, 1024, 32, 64)):
        for causal in (False, True):
            for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
                try:
                    bench(B, T, H, hd, causal, backend)
                except RuntimeError as e:  # a backend that does not take this shape
                    print(f"torch {backend.name}: {str(e).splitlines()[0]}", file=sys.stderr)


if __name__ == "__main__":
    main()

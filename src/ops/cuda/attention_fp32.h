// Multi-head attention in fp32 on CUDA, for the --dtype fp32 model (a CUDA run comparable with the
// CPU reference at fp32 tolerance). The same contract as the bf16 functions of ops/cuda/attention.h,
// overloaded on float: flash-style (online softmax, the (T, T) scores never stored), simple and
// slow (one warp per row, no tensor cores).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace pylon::cuda {

// out (B, T, D) = concat_h softmax(q_h k_hᵀ / sqrt(hd) [+ causal mask]) v_h, qkv (B, T, 3*D) as
// [q | k | v], hd = D / H in {64, 128}; lse (B, H, T) = ln Σ_j exp(q_i·k_j / sqrt(hd)) over the
// unmasked keys. Any T >= 1; pointers 16-byte aligned.
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int D, int H, bool causal,
                       cudaStream_t stream);

// dqkv (B, T, 3*D), every element written, given dout (B, T, D) and the forward's qkv, out and lse.
// workspace: attention_backward_workspace_bytes(B, T, D, H) (ops/cuda/attention.h), for
// D_i = Σ_c dout_ic·out_ic, fp32 (B, H, T). Deterministic: each gradient row is summed by one warp
// in key (dq) or query (dk, dv) order.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        int B, int T, int D, int H, bool causal, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream);

}  // namespace pylon::cuda

// Multi-head and grouped-query attention in fp32 on CUDA, for the --dtype fp32 model (a CUDA run
// comparable with the CPU reference at fp32 tolerance). The same contract as the bf16 functions of
// ops/cuda/attention.h, overloaded on float: flash-style (online softmax, the (T, T) scores never
// stored), simple and slow (one warp per row, no tensor cores: attention_rowwise.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "core/head_layout.h"
#include "ops/cuda/attention.h"

namespace pylon::cuda {

// qkv (B, T, heads.row()) = [q | k | v] per token as in ops/cuda/attention.h, query head h reading
// key/value head h / heads.group(); out (B, T, heads.q_dim()); lse (B, heads.heads, T) = ln Σ_j
// exp(q_i·k_j / sqrt(hd)) over the unmasked keys. Any even head dim up to 256; kv_heads divides
// heads; any T >= 1; pointers 8-byte aligned.
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, const HeadLayout& heads, bool causal,
                       cudaStream_t stream);

// dqkv (B, T, heads.row()), every element written, given dout (B, T, q_dim) and the forward's qkv,
// out and lse; a key/value head's dk, dv sum over its group's query heads. workspace:
// attention_backward_workspace_bytes(B, T, heads) (ops/cuda/attention.h), for D_i = Σ_c dout_ic·out_ic,
// fp32 (B, heads, T). Deterministic: each gradient row is summed by one warp in key (dq) or head-then-
// query (dk, dv) order.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int B,
                        int T, const HeadLayout& heads, bool causal, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream);

}  // namespace pylon::cuda

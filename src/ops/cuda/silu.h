// SiLU activation x·sigmoid(x), and SwiGLU SiLU(gate)·up, on bf16 or fp32 activations (one overload
// each), math in fp32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace pylon::cuda {

void silu_forward(__nv_bfloat16* out /* (n) */, const __nv_bfloat16* in /* (n) */, int64_t n,
                  cudaStream_t stream);
// din = dout · σ(x)·(1 + x·(1 − σ(x))); din may alias dout.
void silu_backward(__nv_bfloat16* din /* (n) */, const __nv_bfloat16* dout /* (n) */,
                   const __nv_bfloat16* in /* (n) */, int64_t n, cudaStream_t stream);
// Both in one pass over in and dout (the backward of a recomputed SiLU): act = SiLU(in), bitwise as
// silu_forward, and din as silu_backward. act may alias in, din may alias dout.
void silu_recompute_backward(__nv_bfloat16* act /* (n) */, __nv_bfloat16* din /* (n) */,
                             const __nv_bfloat16* dout /* (n) */, const __nv_bfloat16* in /* (n) */,
                             int64_t n, cudaStream_t stream);

// The same in fp32 (the --dtype fp32 model).
void silu_forward(float* out, const float* in, int64_t n, cudaStream_t stream);
void silu_backward(float* din, const float* dout, const float* in, int64_t n, cudaStream_t stream);
void silu_recompute_backward(float* act, float* din, const float* dout, const float* in, int64_t n,
                             cudaStream_t stream);

// SwiGLU, as cpu::swiglu_forward / swiglu_backward: in (N, 2F) holds rows [gate | up]; out (N, F) =
// SiLU(gate)·up, rounded once.
void swiglu_forward(__nv_bfloat16* out, const __nv_bfloat16* in, int64_t N, int64_t F, cudaStream_t stream);
void swiglu_forward(float* out, const float* in, int64_t N, int64_t F, cudaStream_t stream);
// din (N, 2F) = [dgate | dup] given dout (N, F); act (may be null) = SiLU(gate)·up, bitwise as
// swiglu_forward (the backward of a recomputed activation). din may alias in, act may alias dout.
void swiglu_backward(__nv_bfloat16* din, __nv_bfloat16* act, const __nv_bfloat16* dout, const __nv_bfloat16* in,
                     int64_t N, int64_t F, cudaStream_t stream);
void swiglu_backward(float* din, float* act, const float* dout, const float* in, int64_t N, int64_t F,
                     cudaStream_t stream);

}  // namespace pylon::cuda

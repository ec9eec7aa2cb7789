// RMSNorm on the GPU, fused with the residual add before it: bf16 (or fp32: the overloads at the
// end) activations, fp32 statistics, fp32 weight gradient.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace pylon::cuda {

// x_out = x + delta (rounded to bf16); h = x_out · rstd · w with rstd = 1/sqrt(mean(x_out²) + eps)
// summed in fp32 over the rounded x_out. With delta == nullptr: x_out is not written (may be
// nullptr) and h = RMSNorm(x). C ≤ 8192.
void residual_rmsnorm_forward(__nv_bfloat16* x_out /* (N, C) */, __nv_bfloat16* h /* (N, C) */,
                              float* rstd /* (N) */, const __nv_bfloat16* x /* (N, C) */,
                              const __nv_bfloat16* delta /* (N, C) or nullptr */,
                              const __nv_bfloat16* w /* (C) */, int N, int C, float eps,
                              cudaStream_t stream);

// Bytes of workspace rmsnorm_backward needs.
size_t rmsnorm_backward_workspace_bytes(int N, int C);
// dx = rstd·(w∘dh) − x·rstd³/C·Σ(w∘dh∘x) [+ dresidual];  dw += Σ_rows dh∘x·rstd (fixed order).
// x is the normalised input (x_out of the forward); dx may alias dresidual. dx_column_sum (may be
// null) += Σ_rows dx as stored in bf16 (fixed order): the gradient of a bias whose output's
// gradient dx is (the step's attention out-projection), without a pass over dx of its own.
void rmsnorm_backward(__nv_bfloat16* dx /* (N, C) */, float* dw /* (C) */,
                      const __nv_bfloat16* dh /* (N, C) */,
                      const __nv_bfloat16* dresidual /* (N, C) or nullptr */,
                      const __nv_bfloat16* x /* (N, C) */, const __nv_bfloat16* w /* (C) */,
                      const float* rstd /* (N) */, int N, int C, void* workspace, cudaStream_t stream,
                      float* dx_column_sum /* (C) */ = nullptr);

// The same in fp32 (the --dtype fp32 model): x_out is x + delta unrounded.
void residual_rmsnorm_forward(float* x_out, float* h, float* rstd, const float* x, const float* delta,
                              const float* w, int N, int C, float eps, cudaStream_t stream);
void rmsnorm_backward(float* dx, float* dw, const float* dh, const float* dresidual, const float* x,
                      const float* w, const float* rstd, int N, int C, void* workspace, cudaStream_t stream,
                      float* dx_column_sum = nullptr);

}  // namespace pylon::cuda

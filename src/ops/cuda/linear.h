// The linear layer y = x·Wᵀ + b on the GPU, mirroring cpu::linear_forward / cpu::linear_backward:
// bf16 activations and weights, fp32 weight and bias gradients.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "ops/cuda/gemm.h"

namespace pylon::cuda {

// out (N, O) = in (N, I) · Wᵀ + b; b may be nullptr.
void linear_forward(Gemm& gemm, __nv_bfloat16* out /* (N, O) */, const __nv_bfloat16* in /* (N, I) */,
                    const __nv_bfloat16* W /* (O, I) */, const __nv_bfloat16* b /* (O) or nullptr */,
                    int N, int I, int O, cudaStream_t stream);

// Bytes of workspace linear_backward needs (for the bias gradient).
size_t linear_backward_workspace_bytes(int N, int O);
// din (N, I) = dout · W (skipped if din is nullptr); dW (O, I) = dW_beta·dW + doutᵀ·in with
// dW_beta 0 (overwrite) or 1 (accumulate); db (O) += Σ_rows dout (skipped if db is nullptr).
void linear_backward(Gemm& gemm, __nv_bfloat16* din /* (N, I) or nullptr */, float* dW /* (O, I) */,
                     float dW_beta, float* db /* (O) or nullptr */, const __nv_bfloat16* dout /* (N, O) */,
                     const __nv_bfloat16* in /* (N, I) */, const __nv_bfloat16* W /* (O, I) */, int N,
                     int I, int O, void* workspace, cudaStream_t stream);

}  // namespace pylon::cuda

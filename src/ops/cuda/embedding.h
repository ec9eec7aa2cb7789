// Token embedding on the GPU: gather rows of a bf16 table, and the deterministic scatter-add of the
// gradient into an fp32 table gradient.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace pylon::cuda {

// out (N, D) = table[ids]; every id in [0, V).
void embedding_forward(__nv_bfloat16* out /* (N, D) */, const int32_t* ids /* (N) */,
                       const __nv_bfloat16* table /* (V, D) */, int N, int D, cudaStream_t stream);

// Bytes of workspace embedding_backward needs for N ids below V and rows of D.
size_t embedding_backward_workspace_bytes(int N, int D, int V);
// dtable (V, D) += scatter of dout (N, D) by ids, summed in a fixed order (bitwise reproducible).
void embedding_backward(float* dtable /* (V, D) */, const __nv_bfloat16* dout /* (N, D) */,
                        const int32_t* ids /* (N) */, int N, int D, int V, void* workspace,
                        cudaStream_t stream);

// The same on an fp32 table and fp32 dout (the --dtype fp32 model).
void embedding_forward(float* out, const int32_t* ids, const float* table, int N, int D, cudaStream_t stream);
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int N, int D, int V,
                        void* workspace, cudaStream_t stream);

}  // namespace pylon::cuda

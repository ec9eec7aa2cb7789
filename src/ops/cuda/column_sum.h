// Deterministic column sums of a row-major matrix on the GPU: the bias gradient and the second
// pass of every per-block-partials reduction (e.g. RMSNorm's weight gradient).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace pylon::cuda {

// Bytes of workspace column_sum_accumulate needs for an (R, C) input.
size_t column_sum_workspace_bytes(int64_t R, int C);
// out (C) += Σ_rows in (R, C), in fp32 with a fixed summation tree (bitwise reproducible).
void column_sum_accumulate(float* out /* (C) */, const float* in /* (R, C) */, int64_t R, int C,
                           void* workspace, cudaStream_t stream);
void column_sum_accumulate(float* out /* (C) */, const __nv_bfloat16* in /* (R, C) */, int64_t R,
                           int C, void* workspace, cudaStream_t stream);

// db (O) += Σ_rows dout (N, O): the gradient of a bias added to every row.
inline size_t bias_backward_workspace_bytes(int N, int O) { return column_sum_workspace_bytes(N, O); }
inline void bias_backward(float* db /* (O) */, const __nv_bfloat16* dout /* (N, O) */, int N, int O,
                          void* workspace, cudaStream_t stream) {
  column_sum_accumulate(db, dout, N, O, workspace, stream);
}
inline void bias_backward(float* db /* (O) */, const float* dout /* (N, O) */, int N, int O, void* workspace,
                          cudaStream_t stream) {
  column_sum_accumulate(db, dout, N, O, workspace, stream);
}

}  // namespace pylon::cuda

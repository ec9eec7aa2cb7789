// Deterministic whole-buffer sums on the GPU (fixed partition and tree, fp64 accumulation): the
// gradient norm's sum of squares and scaled sums such as the mean loss. Results stay on the device.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace pylon::cuda {

// Bytes of workspace for a sum over n values.
size_t reduce_workspace_bytes(int64_t n);
// out_scalar (1) = Σ x²  (or += when accumulate: several buffers into one total, in stream order).
void sum_of_squares(float* out_scalar /* (1) */, const float* x /* (n) */, int64_t n, void* workspace,
                    cudaStream_t stream, bool accumulate = false);
// out_scalar (1) += Σ partials, by the same fixed tree as the second pass above (count ≤ 1024):
// the end of a sum whose per-block partials another kernel wrote (adamw_update's grad norm).
void add_partial_sums(float* out_scalar /* (1) */, const double* partials /* (count) */, int count,
                      cudaStream_t stream);
// out_scalar (1) = scale · Σ x.
void sum_scaled(float* out_scalar /* (1) */, const float* x /* (n) */, int64_t n, double scale,
                void* workspace, cudaStream_t stream);

}  // namespace pylon::cuda

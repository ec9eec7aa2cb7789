// Small elementwise kernels of the training step: the last residual add and a device-side scalar
// accumulation (so losses never need the host inside a step).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace pylon::cuda {

// out (n) = a + b, in fp32, rounded to bf16. out may alias a or b.
void residual_add(__nv_bfloat16* out, const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t n,
                  cudaStream_t stream);
// The same in fp32 (no rounding).
void residual_add(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream);
// *acc += *x (both device scalars).
void add_scalar(float* acc, const float* x, cudaStream_t stream);

}  // namespace pylon::cuda

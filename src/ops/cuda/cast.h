// Dtype casts on the GPU: fp32 -> bf16 (round to nearest even) and bf16 -> fp32, n elements.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace pylon::cuda {

void cast_f32_to_bf16(__nv_bfloat16* out /* (n) */, const float* in /* (n) */, int64_t n,
                      cudaStream_t stream);
void cast_bf16_to_f32(float* out /* (n) */, const __nv_bfloat16* in /* (n) */, int64_t n,
                      cudaStream_t stream);

}  // namespace pylon::cuda

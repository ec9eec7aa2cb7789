// fp32 <-> bf16 casts with 16-byte accesses (8-byte for the bf16 side of bf16 -> fp32) when both
// pointers are 16-byte aligned; the last partial step and unaligned buffers go element by element.
#include "ops/cuda/cast.h"
#include "ops/cuda/check.h"
#include "ops/cuda/kernel_util.cuh"

namespace pylon::cuda {
namespace {

constexpr int kThreads = 256;

template <int VEC>
__global__ void cast_f32_to_bf16_kernel(__nv_bfloat16* out, const float* in, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * VEC;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * VEC; i < n;
       i += stride) {
    if constexpr (VEC == 8) {
      if (i + 8 <= n) {
        float v[8];
        detail::load_f32<8>(v, in + i);
        detail::store_bf16<8>(out + i, v);
        continue;
      }
    }
    for (int64_t j = i; j < n && j < i + VEC; ++j) out[j] = __float2bfloat16_rn(in[j]);
  }
}

// 4 elements per step: an 8-byte load and one 16-byte store per thread, both coalesced.
template <int VEC>
__global__ void cast_bf16_to_f32_kernel(float* out, const __nv_bfloat16* in, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * VEC;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * VEC; i < n;
       i += stride) {
    if constexpr (VEC == 4) {
      if (i + 4 <= n) {
        float v[4];
        detail::load_bf16<4>(v, in + i);
        detail::store_f32<4>(out + i, v);
        continue;
      }
    }
    for (int64_t j = i; j < n && j < i + VEC; ++j) out[j] = __bfloat162float(in[j]);
  }
}

}  // namespace

void cast_f32_to_bf16(__nv_bfloat16* out, const float* in, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (detail::aligned16(out) && detail::aligned16(in)) {
    const unsigned blocks = detail::grid_size(detail::ceil_div(n, 8), kThreads);
    cast_f32_to_bf16_kernel<8><<<blocks, kThreads, 0, stream>>>(out, in, n);
  } else {
    cast_f32_to_bf16_kernel<1><<<detail::grid_size(n, kThreads), kThreads, 0, stream>>>(out, in, n);
  }
  PYLON_CUDA_CHECK_LAUNCH();
}

void cast_bf16_to_f32(float* out, const __nv_bfloat16* in, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (detail::aligned16(out) && detail::aligned16(in)) {
    const unsigned blocks = detail::grid_size(detail::ceil_div(n, 4), kThreads);
    cast_bf16_to_f32_kernel<4><<<blocks, kThreads, 0, stream>>>(out, in, n);
  } else {
    cast_bf16_to_f32_kernel<1><<<detail::grid_size(n, kThreads), kThreads, 0, stream>>>(out, in, n);
  }
  PYLON_CUDA_CHECK_LAUNCH();
}

}  // namespace pylon::cuda

// SiLU forward and backward (alone, or with the forward recomputed from the same loads):
// elementwise, 8 bf16 per 16-byte access when the pointers allow.
#include "ops/cuda/check.h"
#include "ops/cuda/kernel_util.cuh"
#include "ops/cuda/silu.h"

namespace pylon::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

template <int VEC>
__global__ void silu_forward_kernel(__nv_bfloat16* out, const __nv_bfloat16* in, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * VEC;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * VEC; i < n;
       i += stride) {
    if (VEC == 1 || i + VEC <= n) {
      float x[VEC], y[VEC];
      detail::load_bf16<VEC>(x, in + i);
#pragma unroll
      for (int e = 0; e < VEC; ++e) y[e] = x[e] / (1.f + expf(-x[e]));
      detail::store_bf16<VEC>(out + i, y);
    } else {
      for (int64_t j = i; j < n; ++j) {
        const float x = __bfloat162float(in[j]);
        out[j] = __float2bfloat16_rn(x / (1.f + expf(-x)));
      }
    }
  }
}

// No __restrict__: din may alias dout and act may alias in (each element is read before it is
// written, by one thread). With act (the recompute), SiLU(in) is stored too, from the same loads.
template <int VEC>
__global__ void silu_backward_kernel(__nv_bfloat16* din, __nv_bfloat16* act, const __nv_bfloat16* dout,
                                     const __nv_bfloat16* in, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * VEC;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * VEC; i < n;
       i += stride) {
    if (VEC == 1 || i + VEC <= n) {
      float x[VEC], dy[VEC], dx[VEC], y[VEC];
      detail::load_bf16<VEC>(x, in + i);
      detail::load_bf16<VEC>(dy, dout + i);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const float s = sigmoid(x[e]);
        dx[e] = dy[e] * s * (1.f + x[e] * (1.f - s));
        y[e] = x[e] / (1.f + expf(-x[e]));  // as silu_forward_kernel, so the recompute is bitwise equal
      }
      detail::store_bf16<VEC>(din + i, dx);
      if (act) detail::store_bf16<VEC>(act + i, y);
    } else {
      for (int64_t j = i; j < n; ++j) {
        const float x = __bfloat162float(in[j]), s = sigmoid(x);
        din[j] = __float2bfloat16_rn(__bfloat162float(dout[j]) * s * (1.f + x * (1.f - s)));
        if (act) act[j] = __float2bfloat16_rn(x / (1.f + expf(-x)));
      }
    }
  }
}

void launch_silu_backward(__nv_bfloat16* din, __nv_bfloat16* act, const __nv_bfloat16* dout,
                          const __nv_bfloat16* in, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (detail::aligned16(din) && detail::aligned16(dout) && detail::aligned16(in) &&
      (!act || detail::aligned16(act))) {
    const unsigned blocks = detail::grid_size(detail::ceil_div(n, 8), kThreads);
    silu_backward_kernel<8><<<blocks, kThreads, 0, stream>>>(din, act, dout, in, n);
  } else {
    const unsigned blocks = detail::grid_size(n, kThreads);
    silu_backward_kernel<1><<<blocks, kThreads, 0, stream>>>(din, act, dout, in, n);
  }
  PYLON_CUDA_CHECK_LAUNCH();
}

}  // namespace

void silu_forward(__nv_bfloat16* out, const __nv_bfloat16* in, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (detail::aligned16(out) && detail::aligned16(in)) {
    const unsigned blocks = detail::grid_size(detail::ceil_div(n, 8), kThreads);
    silu_forward_kernel<8><<<blocks, kThreads, 0, stream>>>(out, in, n);
  } else {
    silu_forward_kernel<1><<<detail::grid_size(n, kThreads), kThreads, 0, stream>>>(out, in, n);
  }
  PYLON_CUDA_CHECK_LAUNCH();
}

void silu_backward(__nv_bfloat16* din, const __nv_bfloat16* dout, const __nv_bfloat16* in,
                   int64_t n, cudaStream_t stream) {
  launch_silu_backward(din, nullptr, dout, in, n, stream);
}

void silu_recompute_backward(__nv_bfloat16* act, __nv_bfloat16* din, const __nv_bfloat16* dout,
                             const __nv_bfloat16* in, int64_t n, cudaStream_t stream) {
  launch_silu_backward(din, act, dout, in, n, stream);
}

}  // namespace pylon::cuda

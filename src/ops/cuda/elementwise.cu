#include "ops/cuda/check.h"
#include "ops/cuda/elementwise.h"

namespace pylon::cuda {
namespace {

// 8 bf16 (16 bytes) per thread when n allows; the tail element by element.
__global__ void residual_add_kernel(__nv_bfloat16* out, const __nv_bfloat16* a,
                                    const __nv_bfloat16* b, int64_t n) {
  const int64_t i8 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  if (i8 + 8 <= n) {
    const uint4 va = *reinterpret_cast<const uint4*>(a + i8);
    const uint4 vb = *reinterpret_cast<const uint4*>(b + i8);
    uint4 vo;
    const auto* pa = reinterpret_cast<const __nv_bfloat162*>(&va);
    const auto* pb = reinterpret_cast<const __nv_bfloat162*>(&vb);
    auto* po = reinterpret_cast<__nv_bfloat162*>(&vo);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 fa = __bfloat1622float2(pa[k]), fb = __bfloat1622float2(pb[k]);
      po[k] = __floats2bfloat162_rn(fa.x + fb.x, fa.y + fb.y);
    }
    *reinterpret_cast<uint4*>(out + i8) = vo;
  } else {
    for (int64_t i = i8; i < n; ++i)
      out[i] = __float2bfloat16(__bfloat162float(a[i]) + __bfloat162float(b[i]));
  }
}

__global__ void add_scalar_kernel(float* acc, const float* x) { *acc += *x; }

}  // namespace

void residual_add(__nv_bfloat16* out, const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t n,
                  cudaStream_t stream) {
  if (n == 0) return;
  // 16-byte vectors need 16-byte aligned pointers; the arena aligns every buffer to 256.
  PYLON_ASSERT(reinterpret_cast<uintptr_t>(out) % 16 == 0 && reinterpret_cast<uintptr_t>(a) % 16 == 0 &&
               reinterpret_cast<uintptr_t>(b) % 16 == 0);
  const int threads = 256;
  const int64_t blocks = ((n + 7) / 8 + threads - 1) / threads;
  residual_add_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(out, a, b, n);
  PYLON_CUDA_CHECK_LAUNCH();
}

void add_scalar(float* acc, const float* x, cudaStream_t stream) {
  add_scalar_kernel<<<1, 1, 0, stream>>>(acc, x);
  PYLON_CUDA_CHECK_LAUNCH();
}

}  // namespace pylon::cuda

#include "ops/cuda/check.h"
#include "ops/cuda/elementwise.h"
#include "ops/cuda/kernel_util.cuh"

namespace pylon::cuda {
namespace {

// 8 elements per thread (one 16-byte access per operand in bf16, two in fp32) when n allows; the
// tail element by element.
template <typename Act>
__global__ void residual_add_kernel(Act* out, const Act* a, const Act* b, int64_t n) {
  const int64_t i8 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  if (i8 + 8 <= n) {
    float va[8], vb[8];
    detail::load_vec<8>(va, a + i8);
    detail::load_vec<8>(vb, b + i8);
#pragma unroll
    for (int k = 0; k < 8; ++k) va[k] += vb[k];
    detail::store_vec<8>(out + i8, va);
  } else {
    for (int64_t i = i8; i < n; ++i) out[i] = detail::from_float<Act>(detail::to_float(a[i]) + detail::to_float(b[i]));
  }
}

__global__ void add_scalar_kernel(float* acc, const float* x) { *acc += *x; }

template <typename Act>
void launch_residual_add(Act* out, const Act* a, const Act* b, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  // 16-byte vectors need 16-byte aligned pointers; the arena aligns every buffer to 256.
  PYLON_ASSERT(detail::aligned16(out) && detail::aligned16(a) && detail::aligned16(b));
  const int threads = 256;
  const int64_t blocks = ((n + 7) / 8 + threads - 1) / threads;
  residual_add_kernel<Act><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(out, a, b, n);
  PYLON_CUDA_CHECK_LAUNCH();
}

}  // namespace

void residual_add(__nv_bfloat16* out, const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t n,
                  cudaStream_t stream) {
  launch_residual_add(out, a, b, n, stream);
}

void residual_add(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream) {
  launch_residual_add(out, a, b, n, stream);
}

void add_scalar(float* acc, const float* x, cudaStream_t stream) {
  add_scalar_kernel<<<1, 1, 0, stream>>>(acc, x);
  PYLON_CUDA_CHECK_LAUNCH();
}

}  // namespace pylon::cuda

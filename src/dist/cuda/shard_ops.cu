#include "dist/cuda/shard_ops.h"

#include "ops/cuda/check.h"
#include "ops/cuda/kernel_util.cuh"

namespace pylon::cuda {
namespace {

__global__ void accumulate_f32_kernel(float* acc, const float* x, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    acc[i] += x[i];
}

}  // namespace

void accumulate_f32(float* acc, const float* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  accumulate_f32_kernel<<<detail::grid_size(n, kThreads), kThreads, 0, stream>>>(acc, x, n);
  PYLON_CUDA_CHECK_LAUNCH();
}

}  // namespace pylon::cuda

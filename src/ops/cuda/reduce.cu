// Two-pass sums: pass 1 has a block count fixed by n alone (so the tree does not depend on the
// device); each thread accumulates 4-wide fp32 loads into fp64, blocks reduce by a fixed tree into
// one fp64 partial each; pass 2, one block, reduces the partials the same way.
#include "core/error.h"
#include "ops/cuda/check.h"
#include "ops/cuda/kernel_util.cuh"
#include "ops/cuda/reduce.h"

namespace pylon::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kMaxBlocks = 1024;            // pass 2 reduces at most this many partials
constexpr int64_t kValuesPerThread = 16;    // below this many values per thread, fewer blocks

int reduce_blocks(int64_t n) {
  return static_cast<int>(std::clamp<int64_t>(detail::ceil_div(n, kThreads * kValuesPerThread), 1, kMaxBlocks));
}

template <bool kSquare>
__device__ __forceinline__ double term(float x) {
  return kSquare ? static_cast<double>(x) * x : static_cast<double>(x);
}

template <bool kSquare, bool kVec>
__global__ void __launch_bounds__(kThreads) sum_partials_kernel(double* partials, const float* x, int64_t n) {
  double acc = 0.0;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if constexpr (kVec) {
    const int64_t n4 = n / 4;
    for (int64_t i = tid; i < n4; i += stride) {
      float v[4];
      detail::load_f32<4>(v, x + 4 * i);
      acc += term<kSquare>(v[0]) + term<kSquare>(v[1]) + term<kSquare>(v[2]) + term<kSquare>(v[3]);
    }
    for (int64_t i = 4 * n4 + tid; i < n; i += stride) acc += term<kSquare>(x[i]);
  } else {
    for (int64_t i = tid; i < n; i += stride) acc += term<kSquare>(x[i]);
  }
  acc = detail::block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void __launch_bounds__(kMaxBlocks) sum_finish_kernel(float* out, const double* partials, int count,
                                                                double scale, bool accumulate) {
  double v = threadIdx.x < count ? partials[threadIdx.x] : 0.0;
  v = detail::block_sum(v) * scale;
  if (threadIdx.x == 0) *out = accumulate ? static_cast<float>(*out + v) : static_cast<float>(v);
}

template <bool kSquare>
void sum_launch(float* out, const float* x, int64_t n, double scale, bool accumulate, void* workspace,
                cudaStream_t stream) {
  auto* partials = static_cast<double*>(workspace);
  const int blocks = reduce_blocks(n);
  if (detail::aligned16(x)) {
    sum_partials_kernel<kSquare, true><<<blocks, kThreads, 0, stream>>>(partials, x, n);
  } else {
    sum_partials_kernel<kSquare, false><<<blocks, kThreads, 0, stream>>>(partials, x, n);
  }
  PYLON_CUDA_CHECK_LAUNCH();
  sum_finish_kernel<<<1, kMaxBlocks, 0, stream>>>(out, partials, blocks, scale, accumulate);
  PYLON_CUDA_CHECK_LAUNCH();
}

}  // namespace

size_t reduce_workspace_bytes(int64_t n) {
  return detail::align_up(sizeof(double) * static_cast<size_t>(reduce_blocks(n)));
}

void sum_of_squares(float* out, const float* x, int64_t n, void* workspace, cudaStream_t stream,
                    bool accumulate) {
  sum_launch<true>(out, x, n, 1.0, accumulate, workspace, stream);
}

void add_partial_sums(float* out, const double* partials, int count, cudaStream_t stream) {
  PYLON_CHECK(count >= 1 && count <= kMaxBlocks, "add_partial_sums: ", count, " partials (1 to ", kMaxBlocks, ")");
  sum_finish_kernel<<<1, kMaxBlocks, 0, stream>>>(out, partials, count, 1.0, true);
  PYLON_CUDA_CHECK_LAUNCH();
}

void sum_scaled(float* out, const float* x, int64_t n, double scale, void* workspace,
                cudaStream_t stream) {
  sum_launch<false>(out, x, n, scale, false, workspace, stream);
}

}  // namespace pylon::cuda

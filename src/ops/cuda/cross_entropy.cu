// Cross-entropy forward+backward, one block of 512 threads per row. Pass 1 reads the row from HBM
// (16-byte loads, 4 in flight per thread) into shared memory and takes the block max; pass 2 sums
// exp(z − max) from shared memory; pass 3 writes scale·p over the logits, then the target's
// scale·(p − 1). One HBM read and one write of the logits; a V = 32000 row takes 64 KB, so 3 rows
// share an SM and one's memory phases overlap another's exp and reduction phases. Rows too long
// for shared memory (V > ~110K in bf16, ~55K in fp32) are read from HBM in every pass instead.
#include "core/error.h"
#include "ops/cuda/check.h"
#include "ops/cuda/cross_entropy.h"
#include "ops/cuda/kernel_util.cuh"
#include "ops/cuda/reduce.h"

namespace pylon::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kBlocksPerSm = 3;
constexpr float kLog2e = 1.4426950408889634f;

template <typename Act, int VEC, bool kCached>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) cross_entropy_kernel(
    float* losses, Act* logits, const int32_t* targets, int V, float scale) {
  extern __shared__ uint4 row_cache[];  // (V) Act when kCached
  auto* cache = reinterpret_cast<Act*>(row_cache);
  __shared__ float target_logit;
  const int nvec = V / VEC;
  Act* z = logits + static_cast<int64_t>(blockIdx.x) * V;
  const int target = targets[blockIdx.x];
  if (threadIdx.x == 0) target_logit = detail::to_float(z[target]);  // read before any write below
  auto load = [&](int j, float (&f)[VEC]) { detail::load_vec<VEC>(f, (kCached ? cache : z) + j * VEC); };

  float mx = -INFINITY;
#pragma unroll 4
  for (int j = threadIdx.x; j < nvec; j += kThreads) {
    float f[VEC];
    detail::load_vec<VEC>(f, z + j * VEC);
    if constexpr (kCached) detail::store_vec<VEC>(cache + j * VEC, f);
#pragma unroll
    for (int e = 0; e < VEC; ++e) mx = fmaxf(mx, f[e]);
  }
  mx = detail::block_max(mx);  // its barriers also publish the cache

  // exp(z − max) = 2^(z·log2 e − max·log2 e): one FFMA and one MUFU.EX2 per element.
  const float mx_log2 = mx * kLog2e;
  float sum = 0.f;
#pragma unroll 4
  for (int j = threadIdx.x; j < nvec; j += kThreads) {
    float f[VEC];
    load(j, f);
#pragma unroll
    for (int e = 0; e < VEC; ++e) sum += exp2f(fmaf(f[e], kLog2e, -mx_log2));
  }
  sum = detail::block_sum(sum);
  if (threadIdx.x == 0) losses[blockIdx.x] = logf(sum) + mx - target_logit;

  const float scale_over_sum = scale / sum;
#pragma unroll 4
  for (int j = threadIdx.x; j < nvec; j += kThreads) {
    float f[VEC], d[VEC];
    load(j, f);
#pragma unroll
    for (int e = 0; e < VEC; ++e) d[e] = exp2f(fmaf(f[e], kLog2e, -mx_log2)) * scale_over_sum;
    detail::store_vec<VEC>(z + j * VEC, d);
  }
  __syncthreads();  // the target's scale·p above is written before it is replaced here
  if (threadIdx.x == 0)
    z[target] = detail::from_float<Act>(exp2f(fmaf(target_logit, kLog2e, -mx_log2)) * scale_over_sum - scale);
}

template <typename Act, int VEC>
void launch_rows(float* losses, Act* logits, const int32_t* targets, int N, int V, float scale,
                 cudaStream_t stream) {
  int device = 0, max_smem = 0;
  PYLON_CUDA_CHECK(cudaGetDevice(&device));
  PYLON_CUDA_CHECK(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const size_t cache_bytes = detail::ceil_div(static_cast<int64_t>(V) * static_cast<int64_t>(sizeof(Act)), 16) * 16;
  if (cache_bytes + 1024 <= static_cast<size_t>(max_smem)) {  // room for the reductions' scratch too
    auto* kernel = cross_entropy_kernel<Act, VEC, true>;
    PYLON_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(cache_bytes)));
    PYLON_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                          cudaSharedmemCarveoutMaxShared));
    kernel<<<N, kThreads, cache_bytes, stream>>>(losses, logits, targets, V, scale);
  } else {
    cross_entropy_kernel<Act, VEC, false><<<N, kThreads, 0, stream>>>(losses, logits, targets, V, scale);
  }
}

template <typename Act>
void launch_cross_entropy(float* losses, Act* logits, const int32_t* targets, int N, int V, float scale,
                          cudaStream_t stream) {
  if (N <= 0) return;
  PYLON_CHECK(V > 0, "cross_entropy_forward_backward: vocab must be positive, got ", V);
  if (V % 8 == 0 && detail::aligned16(logits)) {
    launch_rows<Act, 8>(losses, logits, targets, N, V, scale, stream);
  } else {
    launch_rows<Act, 1>(losses, logits, targets, N, V, scale, stream);
  }
  PYLON_CUDA_CHECK_LAUNCH();
}

}  // namespace

void cross_entropy_forward_backward(float* losses, __nv_bfloat16* logits, const int32_t* targets, int N,
                                    int V, float scale, cudaStream_t stream) {
  launch_cross_entropy(losses, logits, targets, N, V, scale, stream);
}

void cross_entropy_forward_backward(float* losses, float* logits, const int32_t* targets, int N, int V,
                                    float scale, cudaStream_t stream) {
  launch_cross_entropy(losses, logits, targets, N, V, scale, stream);
}

size_t loss_mean_workspace_bytes(int N) { return reduce_workspace_bytes(N); }

void loss_mean(float* out_scalar, const float* losses, int N, void* workspace, cudaStream_t stream) {
  sum_scaled(out_scalar, losses, N, N > 0 ? 1.0 / N : 0.0, workspace, stream);
}

}  // namespace pylon::cuda

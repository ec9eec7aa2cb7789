// AdamW: one elementwise pass, 4 parameters per thread step with 16-byte accesses to p, m, v, g
// (and an 8-byte bf16 store) when the buffers are aligned; the step's constants (bias corrections
// as train/adamw.cpp computes them, fp64 rounded to fp32) are read from device memory. Optionally the same pass sums
// the gradient's squares for the grad norm (per-block fp64 partials, then add_partial_sums).
#include <algorithm>
#include <cmath>

#include "ops/cuda/adamw.h"
#include "ops/cuda/check.h"
#include "ops/cuda/kernel_util.cuh"
#include "ops/cuda/reduce.h"

namespace pylon::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxNormBlocks = 1024;  // add_partial_sums' limit; ~8 blocks per SM on an H200

// Blocks of the norm-summing launch: one 4-wide step per thread at most, up to kMaxNormBlocks.
int norm_blocks(int64_t n) {
  return static_cast<int>(std::clamp<int64_t>(detail::ceil_div(n, 4 * kThreads), 1, kMaxNormBlocks));
}

__device__ __forceinline__ void adamw_element(float& p, float& m, float& v, float g, const AdamWConstants& s) {
  m = s.beta1 * m + (1.f - s.beta1) * g;
  v = s.beta2 * v + (1.f - s.beta2) * g * g;
  const float denom = sqrtf(v) / s.bc2_sqrt + s.eps;
  p = p * s.decay - s.step_size * m / denom;
}

// sumsq_partials (gridDim.x) or nullptr: each block's Σ g² (unscaled), fp64.
template <int VEC>
__global__ void adamw_kernel(float* params, float* m, float* v, const float* grads, __nv_bfloat16* params_bf16,
                             int64_t n, const AdamWConstants* constants, const float* grad_scale,
                             double* sumsq_partials) {
  const AdamWConstants s = *constants;
  const float gs = grad_scale ? *grad_scale : 1.f;
  double sumsq = 0.0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * VEC;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * VEC; i < n; i += stride) {
    if (VEC == 1 || i + VEC <= n) {
      float p[VEC], mv[VEC], vv[VEC], g[VEC];
      detail::load_f32<VEC>(p, params + i);
      detail::load_f32<VEC>(mv, m + i);
      detail::load_f32<VEC>(vv, v + i);
      detail::load_f32<VEC>(g, grads + i);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        sumsq += static_cast<double>(g[e]) * g[e];
        adamw_element(p[e], mv[e], vv[e], g[e] * gs, s);
      }
      detail::store_f32<VEC>(params + i, p);
      detail::store_f32<VEC>(m + i, mv);
      detail::store_f32<VEC>(v + i, vv);
      if (params_bf16) {
        if constexpr (VEC == 4) {
          uint2 packed;
          reinterpret_cast<__nv_bfloat162*>(&packed)[0] = __floats2bfloat162_rn(p[0], p[1]);
          reinterpret_cast<__nv_bfloat162*>(&packed)[1] = __floats2bfloat162_rn(p[2], p[3]);
          *reinterpret_cast<uint2*>(params_bf16 + i) = packed;
        } else {
          params_bf16[i] = __float2bfloat16_rn(p[0]);
        }
      }
    } else {
      for (int64_t j = i; j < n; ++j) {
        sumsq += static_cast<double>(grads[j]) * grads[j];
        adamw_element(params[j], m[j], v[j], grads[j] * gs, s);
        if (params_bf16) params_bf16[j] = __float2bfloat16_rn(params[j]);
      }
    }
  }
  if (sumsq_partials) {  // uniform across the block: every thread reaches the reduction
    sumsq = detail::block_sum(sumsq);
    if (threadIdx.x == 0) sumsq_partials[blockIdx.x] = sumsq;
  }
}

__global__ void clip_coefficient_kernel(float* coef, const float* sumsq_total, float max_norm) {
  // Like torch.nn.utils.clip_grad_norm_: clamp(max_norm / (norm + 1e-6), max=1).
  *coef = max_norm > 0.f ? fminf(1.f, max_norm / (sqrtf(*sumsq_total) + 1e-6f)) : 1.f;
}

}  // namespace

void clip_coefficient(float* coef, const float* sumsq_total, float max_norm, cudaStream_t stream) {
  clip_coefficient_kernel<<<1, 1, 0, stream>>>(coef, sumsq_total, max_norm);
  PYLON_CUDA_CHECK_LAUNCH();
}

size_t grad_sumsq_workspace_bytes(int64_t n) {
  return detail::align_up(sizeof(double) * static_cast<size_t>(norm_blocks(n)));
}

AdamWConstants adamw_constants(float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step) {
  const double t = static_cast<double>(step);
  AdamWConstants s{};
  s.beta1 = beta1, s.beta2 = beta2, s.eps = eps;
  s.step_size = lr / static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), t));
  s.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(beta2), t)));
  s.decay = 1.f - lr * weight_decay;
  return s;
}

void adamw_update(float* params, float* m, float* v, const float* grads, __nv_bfloat16* params_bf16, int64_t n,
                  const AdamWConstants* constants, const float* grad_scale, cudaStream_t stream,
                  const GradSumOfSquares* norm) {
  if (n <= 0) return;
  const bool vec = detail::aligned16(params) && detail::aligned16(m) && detail::aligned16(v) &&
                   detail::aligned16(grads) && (reinterpret_cast<uintptr_t>(params_bf16) & 7) == 0;
  // With the norm, a block count fixed by n alone (so is the sum) and at most kMaxNormBlocks.
  double* partials = norm ? static_cast<double*>(norm->workspace) : nullptr;
  if (vec) {
    const unsigned blocks = norm ? static_cast<unsigned>(norm_blocks(n))
                                 : detail::grid_size(detail::ceil_div(n, 4), kThreads);
    adamw_kernel<4><<<blocks, kThreads, 0, stream>>>(params, m, v, grads, params_bf16, n, constants, grad_scale,
                                                     partials);
  } else {
    const unsigned blocks = norm ? static_cast<unsigned>(norm_blocks(n)) : detail::grid_size(n, kThreads);
    adamw_kernel<1><<<blocks, kThreads, 0, stream>>>(params, m, v, grads, params_bf16, n, constants, grad_scale,
                                                     partials);
  }
  PYLON_CUDA_CHECK_LAUNCH();
  if (norm) add_partial_sums(norm->sumsq, partials, norm_blocks(n), stream);
}

}  // namespace pylon::cuda

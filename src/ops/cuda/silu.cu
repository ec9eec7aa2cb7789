// SiLU forward and backward (alone, or with the forward recomputed from the same loads), and SwiGLU
// (SiLU(gate)·up) forward and backward: elementwise on Act = bf16 or float, 8 elements per thread
// (16- or 32-byte accesses) when the pointers and widths allow.
#include "ops/cuda/check.h"
#include "ops/cuda/kernel_util.cuh"
#include "ops/cuda/silu.h"

namespace pylon::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

template <typename Act, int VEC>
__global__ void silu_forward_kernel(Act* out, const Act* in, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * VEC;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * VEC; i < n;
       i += stride) {
    if (VEC == 1 || i + VEC <= n) {
      float x[VEC], y[VEC];
      detail::load_vec<VEC>(x, in + i);
#pragma unroll
      for (int e = 0; e < VEC; ++e) y[e] = x[e] / (1.f + expf(-x[e]));
      detail::store_vec<VEC>(out + i, y);
    } else {
      for (int64_t j = i; j < n; ++j) {
        const float x = detail::to_float(in[j]);
        out[j] = detail::from_float<Act>(x / (1.f + expf(-x)));
      }
    }
  }
}

// No __restrict__: din may alias dout and act may alias in (each element is read before it is
// written, by one thread). With act (the recompute), SiLU(in) is stored too, from the same loads.
template <typename Act, int VEC>
__global__ void silu_backward_kernel(Act* din, Act* act, const Act* dout, const Act* in, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * VEC;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * VEC; i < n;
       i += stride) {
    if (VEC == 1 || i + VEC <= n) {
      float x[VEC], dy[VEC], dx[VEC], y[VEC];
      detail::load_vec<VEC>(x, in + i);
      detail::load_vec<VEC>(dy, dout + i);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const float s = sigmoid(x[e]);
        dx[e] = dy[e] * s * (1.f + x[e] * (1.f - s));
        y[e] = x[e] / (1.f + expf(-x[e]));  // as silu_forward_kernel, so the recompute is bitwise equal
      }
      detail::store_vec<VEC>(din + i, dx);
      if (act) detail::store_vec<VEC>(act + i, y);
    } else {
      for (int64_t j = i; j < n; ++j) {
        const float x = detail::to_float(in[j]), s = sigmoid(x);
        din[j] = detail::from_float<Act>(detail::to_float(dout[j]) * s * (1.f + x * (1.f - s)));
        if (act) act[j] = detail::from_float<Act>(x / (1.f + expf(-x)));
      }
    }
  }
}

template <typename Act>
void launch_silu_backward(Act* din, Act* act, const Act* dout, const Act* in, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (detail::aligned16(din) && detail::aligned16(dout) && detail::aligned16(in) &&
      (!act || detail::aligned16(act))) {
    const unsigned blocks = detail::grid_size(detail::ceil_div(n, 8), kThreads);
    silu_backward_kernel<Act, 8><<<blocks, kThreads, 0, stream>>>(din, act, dout, in, n);
  } else {
    const unsigned blocks = detail::grid_size(n, kThreads);
    silu_backward_kernel<Act, 1><<<blocks, kThreads, 0, stream>>>(din, act, dout, in, n);
  }
  PYLON_CUDA_CHECK_LAUNCH();
}

template <typename Act>
void launch_silu_forward(Act* out, const Act* in, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (detail::aligned16(out) && detail::aligned16(in)) {
    const unsigned blocks = detail::grid_size(detail::ceil_div(n, 8), kThreads);
    silu_forward_kernel<Act, 8><<<blocks, kThreads, 0, stream>>>(out, in, n);
  } else {
    silu_forward_kernel<Act, 1><<<detail::grid_size(n, kThreads), kThreads, 0, stream>>>(out, in, n);
  }
  PYLON_CUDA_CHECK_LAUNCH();
}

// SwiGLU over rows of [gate (F) | up (F)]: element j of the (N, F) output is row j / F, column
// j % F. VEC consecutive elements lie in one row (F % VEC == 0). silu(g) is the expression of
// silu_forward_kernel, so the forward and a recompute in backward are bitwise equal.
template <typename Act, int VEC>
__global__ void swiglu_forward_kernel(Act* out, const Act* in, int64_t n, int64_t F) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * VEC;
  for (int64_t j = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * VEC; j < n; j += stride) {
    const int64_t row = j / F, col = j % F;
    const Act* gate = in + row * 2 * F + col;
    float g[VEC], u[VEC], y[VEC];
    detail::load_vec<VEC>(g, gate);
    detail::load_vec<VEC>(u, gate + F);
#pragma unroll
    for (int e = 0; e < VEC; ++e) y[e] = g[e] / (1.f + expf(-g[e])) * u[e];
    detail::store_vec<VEC>(out + j, y);
  }
}

// din (N, 2F) = [dgate | dup] given dout (N, F): dgate = dout·up·σ(g)(1 + g(1 − σ(g))), dup =
// dout·SiLU(g); with act, SiLU(g)·up as the forward stored it. No __restrict__: din may alias in and
// act may alias dout (each element is read before it is written, by one thread).
template <typename Act, int VEC>
__global__ void swiglu_backward_kernel(Act* din, Act* act, const Act* dout, const Act* in, int64_t n, int64_t F) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * VEC;
  for (int64_t j = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * VEC; j < n; j += stride) {
    const int64_t row = j / F, col = j % F, at = row * 2 * F + col;
    float g[VEC], u[VEC], dy[VEC], dg[VEC], du[VEC], y[VEC];
    detail::load_vec<VEC>(g, in + at);
    detail::load_vec<VEC>(u, in + at + F);
    detail::load_vec<VEC>(dy, dout + j);
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      const float s = sigmoid(g[e]), silu = g[e] / (1.f + expf(-g[e]));
      dg[e] = dy[e] * u[e] * s * (1.f + g[e] * (1.f - s));
      du[e] = dy[e] * silu;
      y[e] = silu * u[e];
    }
    detail::store_vec<VEC>(din + at, dg);
    detail::store_vec<VEC>(din + at + F, du);
    if (act) detail::store_vec<VEC>(act + j, y);
  }
}

template <typename Act>
void launch_swiglu_forward(Act* out, const Act* in, int64_t N, int64_t F, cudaStream_t stream) {
  const int64_t n = N * F;
  if (n <= 0) return;
  if (F % 8 == 0 && detail::aligned16(out) && detail::aligned16(in)) {
    const unsigned blocks = detail::grid_size(detail::ceil_div(n, 8), kThreads);
    swiglu_forward_kernel<Act, 8><<<blocks, kThreads, 0, stream>>>(out, in, n, F);
  } else {
    swiglu_forward_kernel<Act, 1><<<detail::grid_size(n, kThreads), kThreads, 0, stream>>>(out, in, n, F);
  }
  PYLON_CUDA_CHECK_LAUNCH();
}

template <typename Act>
void launch_swiglu_backward(Act* din, Act* act, const Act* dout, const Act* in, int64_t N, int64_t F,
                            cudaStream_t stream) {
  const int64_t n = N * F;
  if (n <= 0) return;
  if (F % 8 == 0 && detail::aligned16(din) && detail::aligned16(dout) && detail::aligned16(in) &&
      (!act || detail::aligned16(act))) {
    const unsigned blocks = detail::grid_size(detail::ceil_div(n, 8), kThreads);
    swiglu_backward_kernel<Act, 8><<<blocks, kThreads, 0, stream>>>(din, act, dout, in, n, F);
  } else {
    swiglu_backward_kernel<Act, 1><<<detail::grid_size(n, kThreads), kThreads, 0, stream>>>(din, act, dout, in, n, F);
  }
  PYLON_CUDA_CHECK_LAUNCH();
}

}  // namespace

void silu_forward(__nv_bfloat16* out, const __nv_bfloat16* in, int64_t n, cudaStream_t stream) {
  launch_silu_forward(out, in, n, stream);
}
void silu_forward(float* out, const float* in, int64_t n, cudaStream_t stream) {
  launch_silu_forward(out, in, n, stream);
}

void silu_backward(__nv_bfloat16* din, const __nv_bfloat16* dout, const __nv_bfloat16* in,
                   int64_t n, cudaStream_t stream) {
  launch_silu_backward(din, static_cast<__nv_bfloat16*>(nullptr), dout, in, n, stream);
}
void silu_backward(float* din, const float* dout, const float* in, int64_t n, cudaStream_t stream) {
  launch_silu_backward(din, static_cast<float*>(nullptr), dout, in, n, stream);
}

void silu_recompute_backward(__nv_bfloat16* act, __nv_bfloat16* din, const __nv_bfloat16* dout,
                             const __nv_bfloat16* in, int64_t n, cudaStream_t stream) {
  launch_silu_backward(din, act, dout, in, n, stream);
}
void silu_recompute_backward(float* act, float* din, const float* dout, const float* in, int64_t n,
                             cudaStream_t stream) {
  launch_silu_backward(din, act, dout, in, n, stream);
}

void swiglu_forward(__nv_bfloat16* out, const __nv_bfloat16* in, int64_t N, int64_t F, cudaStream_t stream) {
  launch_swiglu_forward(out, in, N, F, stream);
}
void swiglu_forward(float* out, const float* in, int64_t N, int64_t F, cudaStream_t stream) {
  launch_swiglu_forward(out, in, N, F, stream);
}
void swiglu_backward(__nv_bfloat16* din, __nv_bfloat16* act, const __nv_bfloat16* dout, const __nv_bfloat16* in,
                     int64_t N, int64_t F, cudaStream_t stream) {
  launch_swiglu_backward(din, act, dout, in, N, F, stream);
}
void swiglu_backward(float* din, float* act, const float* dout, const float* in, int64_t N, int64_t F,
                     cudaStream_t stream) {
  launch_swiglu_backward(din, act, dout, in, N, F, stream);
}

}  // namespace pylon::cuda

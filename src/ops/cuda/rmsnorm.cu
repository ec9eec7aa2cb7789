// RMSNorm kernels on Act = bf16 or float activations. One block of 256 threads per row (forward) or per 16 rows (backward); thread t
// owns columns (k·256 + t)·VEC .. +VEC for k < CHUNKS, so a row lives in registers between the
// reduction and the output, and in the backward each thread keeps its columns' dw partial sums.
// dw: per-block partial rows (N/16, C), then column_sum_accumulate (fixed order); the column sums
// of dx (a following bias gradient) the same way.
#include "core/error.h"
#include "ops/cuda/check.h"
#include "ops/cuda/column_sum.h"
#include "ops/cuda/kernel_util.cuh"
#include "ops/cuda/rmsnorm.h"

namespace pylon::cuda {
namespace {

using detail::align_up;
using detail::ceil_div;
constexpr int kThreads = 256;
constexpr int kBackwardRows = 16;  // rows per backward block: the number of dw partial rows is N/16

template <typename Act, int VEC, int CHUNKS>
__global__ void __launch_bounds__(kThreads) residual_rmsnorm_forward_kernel(
    Act* x_out, Act* h, float* rstd, const Act* x, const Act* delta, const Act* w, int C, float eps) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * C;
  float v[CHUNKS][VEC];
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < CHUNKS; ++k) {
    const int c = (k * kThreads + threadIdx.x) * VEC;
    if (c >= C) continue;
    detail::load_vec<VEC>(v[k], x + base + c);
    if (delta) {
      float d[VEC];
      detail::load_vec<VEC>(d, delta + base + c);
#pragma unroll
      for (int e = 0; e < VEC; ++e) v[k][e] = detail::round_to<Act>(v[k][e] + d[e]);
      detail::store_vec<VEC>(x_out + base + c, v[k]);
    }
#pragma unroll
    for (int e = 0; e < VEC; ++e) ss += v[k][e] * v[k][e];
  }
  ss = detail::block_sum(ss);
  const float r = 1.f / sqrtf(ss / static_cast<float>(C) + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
#pragma unroll
  for (int k = 0; k < CHUNKS; ++k) {
    const int c = (k * kThreads + threadIdx.x) * VEC;
    if (c >= C) continue;
    float wv[VEC], y[VEC];
    detail::load_vec<VEC>(wv, w + c);
#pragma unroll
    for (int e = 0; e < VEC; ++e) y[e] = v[k][e] * r * wv[e];
    detail::store_vec<VEC>(h + base + c, y);
  }
}

// No __restrict__ on dx / dresidual: they may alias (each element is read, then written, by one
// thread). kSumDx: also the column partials of dx as stored (bf16), for a bias gradient; at least
// 4 blocks per SM then (64 registers), so the N/16 blocks of the seed step still fit one wave.
template <typename Act, int VEC, int CHUNKS, bool kSumDx>
__global__ void __launch_bounds__(kThreads, kSumDx ? 4 : 1) rmsnorm_backward_kernel(
    Act* dx, float* dw_partial, float* dx_partial, const Act* dh, const Act* dres, const Act* x, const Act* w,
    const float* rstd, int N, int C) {
  float wv[CHUNKS][VEC], dw_acc[CHUNKS][VEC], dx_acc[CHUNKS][VEC];
#pragma unroll
  for (int k = 0; k < CHUNKS; ++k) {
    const int c = (k * kThreads + threadIdx.x) * VEC;
#pragma unroll
    for (int e = 0; e < VEC; ++e) dw_acc[k][e] = 0.f, dx_acc[k][e] = 0.f;
    if (c < C) detail::load_vec<VEC>(wv[k], w + c);
  }
  const int row_end = min(N, static_cast<int>(blockIdx.x + 1) * kBackwardRows);
  for (int row = blockIdx.x * kBackwardRows; row < row_end; ++row) {
    const int64_t base = static_cast<int64_t>(row) * C;
    float dy[CHUNKS][VEC], xv[CHUNKS][VEC], dr[CHUNKS][VEC];
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < CHUNKS; ++k) {  // all of the row's loads issued before the reduction
      const int c = (k * kThreads + threadIdx.x) * VEC;
      if (c >= C) continue;
      detail::load_vec<VEC>(dy[k], dh + base + c);
      detail::load_vec<VEC>(xv[k], x + base + c);
      if (dres) {
        detail::load_vec<VEC>(dr[k], dres + base + c);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) dr[k][e] = 0.f;
      }
#pragma unroll
      for (int e = 0; e < VEC; ++e) dot += wv[k][e] * dy[k][e] * xv[k][e];
    }
    dot = detail::block_sum(dot);
    const float r = rstd[row];
    const float kx = dot * r * r * r / static_cast<float>(C);
#pragma unroll
    for (int k = 0; k < CHUNKS; ++k) {
      const int c = (k * kThreads + threadIdx.x) * VEC;
      if (c >= C) continue;
      float out[VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        out[e] = r * wv[k][e] * dy[k][e] - kx * xv[k][e] + dr[k][e];
        dw_acc[k][e] += dy[k][e] * xv[k][e] * r;
        if (kSumDx) dx_acc[k][e] += detail::round_to<Act>(out[e]);
      }
      detail::store_vec<VEC>(dx + base + c, out);
    }
  }
#pragma unroll
  for (int k = 0; k < CHUNKS; ++k) {
    const int c = (k * kThreads + threadIdx.x) * VEC;
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      if (c + e >= C) continue;
      dw_partial[static_cast<int64_t>(blockIdx.x) * C + c + e] = dw_acc[k][e];
      if (kSumDx) dx_partial[static_cast<int64_t>(blockIdx.x) * C + c + e] = dx_acc[k][e];
    }
  }
}

// Chunks per thread are a power of two up to 4 (VEC = 8) or 32 (VEC = 1): rows of at most 8192
// columns, which stay in registers without spilling.
template <int VEC>
constexpr int kMaxChunks = VEC == 8 ? 4 : 32;

// Calls f(integral_constant VEC, integral_constant CHUNKS) for rows of C columns.
template <typename F>
void dispatch_row(int C, bool vec, const char* op, F&& f) {
  const int vec_width = vec ? 8 : 1, max_chunks = vec ? kMaxChunks<8> : kMaxChunks<1>;
  const int64_t needed = ceil_div(C, static_cast<int64_t>(kThreads) * vec_width);
  PYLON_CHECK(needed <= max_chunks, op, ": rows of ", C, " columns are too long (at most ",
              kThreads * kMaxChunks<1>, ")");
  if (vec) {
    detail::dispatch_pow2<kMaxChunks<8>>(needed, [&](auto chunks) { f(std::integral_constant<int, 8>{}, chunks); });
  } else {
    detail::dispatch_pow2<kMaxChunks<1>>(needed, [&](auto chunks) { f(std::integral_constant<int, 1>{}, chunks); });
  }
}

template <typename Act>
void launch_residual_rmsnorm_forward(Act* x_out, Act* h, float* rstd, const Act* x, const Act* delta,
                                     const Act* w, int N, int C, float eps, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  PYLON_CHECK(!delta || x_out, "residual_rmsnorm_forward: x_out is required with a delta");
  const bool vec = C % 8 == 0 && detail::aligned16(x) && detail::aligned16(h) && detail::aligned16(w) &&
                   (!delta || (detail::aligned16(delta) && detail::aligned16(x_out)));
  dispatch_row(C, vec, "residual_rmsnorm_forward", [&](auto vec_c, auto chunks_c) {
    residual_rmsnorm_forward_kernel<Act, vec_c(), chunks_c()>
        <<<N, kThreads, 0, stream>>>(x_out, h, rstd, x, delta, w, C, eps);
  });
  PYLON_CUDA_CHECK_LAUNCH();
}

template <typename Act>
void launch_rmsnorm_backward(Act* dx, float* dw, const Act* dh, const Act* dresidual, const Act* x, const Act* w,
                             const float* rstd, int N, int C, void* workspace, cudaStream_t stream,
                             float* dx_column_sum) {
  if (N <= 0 || C <= 0) return;
  const int blocks = static_cast<int>(ceil_div(N, kBackwardRows));
  const size_t partial_bytes = align_up(sizeof(float) * static_cast<size_t>(blocks) * C);
  auto* partials = static_cast<float*>(workspace);
  auto* dx_partials = reinterpret_cast<float*>(static_cast<char*>(workspace) + partial_bytes);
  const bool vec = C % 8 == 0 && detail::aligned16(dx) && detail::aligned16(dh) && detail::aligned16(x) &&
                   detail::aligned16(w) && (!dresidual || detail::aligned16(dresidual));
  dispatch_row(C, vec, "rmsnorm_backward", [&](auto vec_c, auto chunks_c) {
    if (dx_column_sum) {
      rmsnorm_backward_kernel<Act, vec_c(), chunks_c(), true>
          <<<blocks, kThreads, 0, stream>>>(dx, partials, dx_partials, dh, dresidual, x, w, rstd, N, C);
    } else {
      rmsnorm_backward_kernel<Act, vec_c(), chunks_c(), false>
          <<<blocks, kThreads, 0, stream>>>(dx, partials, nullptr, dh, dresidual, x, w, rstd, N, C);
    }
  });
  PYLON_CUDA_CHECK_LAUNCH();
  void* rest = static_cast<char*>(workspace) + 2 * partial_bytes;
  column_sum_accumulate(dw, partials, blocks, C, rest, stream);
  if (dx_column_sum) column_sum_accumulate(dx_column_sum, dx_partials, blocks, C, rest, stream);
}

}  // namespace

void residual_rmsnorm_forward(__nv_bfloat16* x_out, __nv_bfloat16* h, float* rstd,
                              const __nv_bfloat16* x, const __nv_bfloat16* delta,
                              const __nv_bfloat16* w, int N, int C, float eps, cudaStream_t stream) {
  launch_residual_rmsnorm_forward(x_out, h, rstd, x, delta, w, N, C, eps, stream);
}

void residual_rmsnorm_forward(float* x_out, float* h, float* rstd, const float* x, const float* delta,
                              const float* w, int N, int C, float eps, cudaStream_t stream) {
  launch_residual_rmsnorm_forward(x_out, h, rstd, x, delta, w, N, C, eps, stream);
}

// Workspace: dw partials, dx partials (blocks, C) each, then column_sum's (used by one sum at a time).
size_t rmsnorm_backward_workspace_bytes(int N, int C) {
  const int64_t blocks = ceil_div(N, kBackwardRows);
  return 2 * align_up(sizeof(float) * static_cast<size_t>(blocks) * static_cast<size_t>(C)) +
         column_sum_workspace_bytes(blocks, C);
}

void rmsnorm_backward(__nv_bfloat16* dx, float* dw, const __nv_bfloat16* dh,
                      const __nv_bfloat16* dresidual, const __nv_bfloat16* x,
                      const __nv_bfloat16* w, const float* rstd, int N, int C, void* workspace,
                      cudaStream_t stream, float* dx_column_sum) {
  launch_rmsnorm_backward(dx, dw, dh, dresidual, x, w, rstd, N, C, workspace, stream, dx_column_sum);
}

void rmsnorm_backward(float* dx, float* dw, const float* dh, const float* dresidual, const float* x,
                      const float* w, const float* rstd, int N, int C, void* workspace, cudaStream_t stream,
                      float* dx_column_sum) {
  launch_rmsnorm_backward(dx, dw, dh, dresidual, x, w, rstd, N, C, workspace, stream, dx_column_sum);
}

}  // namespace pylon::cuda

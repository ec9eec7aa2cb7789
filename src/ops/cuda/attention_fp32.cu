// fp32 attention: one warp per query row (forward; dq and D_i) or per key row (dk, dv). Lane l holds
// elements l, l + 32, ... of the row's hd (HD / 32 each), so every row access is coalesced; a dot
// product is the lanes' partial sums added by warp_sum. The forward keeps the running max m, sum l
// and output o over the keys (online softmax); backward recomputes p = exp(s − lse) per pair.
// Scores s = (q·k) / sqrt(hd). No shared memory and no block barriers: a warp whose row is past T
// returns as a whole, so the shuffles of the others stay full-warp.
#include "core/error.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/attention_fp32.h"
#include "ops/cuda/check.h"
#include "ops/cuda/kernel_util.cuh"

namespace pylon::cuda {
namespace {

using detail::kWarpSize;
using detail::warp_sum;
constexpr int kWarps = 4;  // rows per block
constexpr int kThreads = kWarps * kWarpSize;

// Where the rows live: grid (ceil(T / kWarps), B·H); this warp's row and head.
struct RowPos {
  int row, b, h;
};
__device__ __forceinline__ RowPos row_pos(int H) {
  const int bh = static_cast<int>(blockIdx.y);
  return {static_cast<int>(blockIdx.x) * kWarps + static_cast<int>(threadIdx.x) / kWarpSize, bh / H, bh % H};
}

template <int E>
__device__ __forceinline__ void load_row(float (&dst)[E], const float* row, int lane) {
#pragma unroll
  for (int e = 0; e < E; ++e) dst[e] = row[e * kWarpSize + lane];
}

template <int E>
__device__ __forceinline__ float dot(const float (&a)[E], const float* row, int lane) {
  float s = 0.f;
#pragma unroll
  for (int e = 0; e < E; ++e) s += a[e] * row[e * kWarpSize + lane];
  return warp_sum(s);
}

// qkv row t of batch b: q at + h·hd, k at + D + h·hd, v at + 2D + h·hd.
__device__ __forceinline__ int64_t qkv_row(int b, int t, int T, int D) {
  return (static_cast<int64_t>(b) * T + t) * 3 * D;
}
__device__ __forceinline__ int64_t out_row(int b, int t, int T, int D) {
  return (static_cast<int64_t>(b) * T + t) * D;
}

template <int HD>
__global__ void __launch_bounds__(kThreads) attention_fp32_forward_kernel(float* out, float* lse, const float* qkv,
                                                                          int T, int D, int H, bool causal,
                                                                          float scale) {
  constexpr int E = HD / kWarpSize;
  const RowPos r = row_pos(H);
  if (r.row >= T) return;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize, hoff = r.h * HD;
  float q[E], o[E];
  load_row<E>(q, qkv + qkv_row(r.b, r.row, T, D) + hoff, lane);
#pragma unroll
  for (int e = 0; e < E; ++e) o[e] = 0.f;
  float m = -INFINITY, l = 0.f;
  const int keys = causal ? r.row + 1 : T;
  for (int j = 0; j < keys; ++j) {
    const float* kv = qkv + qkv_row(r.b, j, T, D) + hoff;
    const float s = dot<E>(q, kv + D, lane) * scale;
    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new);  // 0 at the first key (m = −inf)
    const float p = expf(s - m_new);
    l = l * correction + p;
#pragma unroll
    for (int e = 0; e < E; ++e) o[e] = o[e] * correction + p * kv[2 * D + e * kWarpSize + lane];
    m = m_new;
  }
  float* dst = out + out_row(r.b, r.row, T, D) + hoff;
#pragma unroll
  for (int e = 0; e < E; ++e) dst[e * kWarpSize + lane] = o[e] / l;
  if (lane == 0) lse[static_cast<int64_t>(blockIdx.y) * T + r.row] = m + logf(l);
}

// Warp per query row i: dsum_i = Σ_c dout_ic·out_ic (for the dk/dv pass), and
// dq_i = scale · Σ_j p_ij (dout_i·v_j − dsum_i) k_j.
template <int HD>
__global__ void __launch_bounds__(kThreads) attention_fp32_backward_dq_kernel(
    float* dqkv, float* dsum, const float* dout, const float* qkv, const float* out, const float* lse, int T, int D,
    int H, bool causal, float scale) {
  constexpr int E = HD / kWarpSize;
  const RowPos r = row_pos(H);
  if (r.row >= T) return;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize, hoff = r.h * HD;
  const int64_t stat = static_cast<int64_t>(blockIdx.y) * T + r.row;
  float q[E], dy[E], dq[E];
  load_row<E>(q, qkv + qkv_row(r.b, r.row, T, D) + hoff, lane);
  load_row<E>(dy, dout + out_row(r.b, r.row, T, D) + hoff, lane);
  const float d_i = dot<E>(dy, out + out_row(r.b, r.row, T, D) + hoff, lane);
  if (lane == 0) dsum[stat] = d_i;
  const float lse_i = lse[stat];
#pragma unroll
  for (int e = 0; e < E; ++e) dq[e] = 0.f;
  const int keys = causal ? r.row + 1 : T;
  for (int j = 0; j < keys; ++j) {
    const float* kv = qkv + qkv_row(r.b, j, T, D) + hoff;
    const float p = expf(dot<E>(q, kv + D, lane) * scale - lse_i);
    const float ds = p * (dot<E>(dy, kv + 2 * D, lane) - d_i);
#pragma unroll
    for (int e = 0; e < E; ++e) dq[e] += ds * kv[D + e * kWarpSize + lane];
  }
  float* dst = dqkv + qkv_row(r.b, r.row, T, D) + hoff;
#pragma unroll
  for (int e = 0; e < E; ++e) dst[e * kWarpSize + lane] = dq[e] * scale;
}

// Warp per key row j: dv_j = Σ_i p_ij dout_i, dk_j = scale · Σ_i p_ij (dout_i·v_j − dsum_i) q_i.
template <int HD>
__global__ void __launch_bounds__(kThreads) attention_fp32_backward_dkdv_kernel(
    float* dqkv, const float* dout, const float* qkv, const float* lse, const float* dsum, int T, int D, int H,
    bool causal, float scale) {
  constexpr int E = HD / kWarpSize;
  const RowPos r = row_pos(H);
  if (r.row >= T) return;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize, hoff = r.h * HD;
  const int64_t stats = static_cast<int64_t>(blockIdx.y) * T;
  float k[E], v[E], dk[E], dv[E];
  const float* kv = qkv + qkv_row(r.b, r.row, T, D) + hoff;
  load_row<E>(k, kv + D, lane);
  load_row<E>(v, kv + 2 * D, lane);
#pragma unroll
  for (int e = 0; e < E; ++e) dk[e] = 0.f, dv[e] = 0.f;
  for (int i = causal ? r.row : 0; i < T; ++i) {
    const float* q = qkv + qkv_row(r.b, i, T, D) + hoff;
    const float* dy = dout + out_row(r.b, i, T, D) + hoff;
    const float p = expf(dot<E>(k, q, lane) * scale - lse[stats + i]);
    const float ds = p * (dot<E>(v, dy, lane) - dsum[stats + i]);
#pragma unroll
    for (int e = 0; e < E; ++e) {
      dv[e] += p * dy[e * kWarpSize + lane];
      dk[e] += ds * q[e * kWarpSize + lane];
    }
  }
  float* dst = dqkv + qkv_row(r.b, r.row, T, D) + hoff;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    dst[D + e * kWarpSize + lane] = dk[e] * scale;
    dst[2 * D + e * kWarpSize + lane] = dv[e];
  }
}

// User errors: shapes the kernels cannot take. Returns hd.
int check_args(const char* op, int B, int T, int D, int H) {
  PYLON_CHECK(B >= 1 && T >= 1 && H >= 1 && D >= 1, op, ": B, T, D, H must be positive, got B=", B, " T=", T,
              " D=", D, " H=", H);
  PYLON_CHECK(D % H == 0, op, ": D=", D, " is not a multiple of H=", H);
  const int hd = D / H;
  PYLON_CHECK(hd == 64 || hd == 128, op, ": head dim D/H=", hd, " has no fp32 kernel (64 or 128)");
  PYLON_CHECK(static_cast<int64_t>(B) * H <= 65535, op, ": B*H=", static_cast<int64_t>(B) * H,
              " exceeds the grid's y limit 65535");
  return hd;
}

dim3 row_grid(int B, int T, int H) {
  return dim3(static_cast<unsigned>(detail::ceil_div(T, kWarps)), static_cast<unsigned>(B * H));
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int D, int H, bool causal,
                       cudaStream_t stream) {
  const int hd = check_args("attention_forward (fp32)", B, T, D, H);
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  if (hd == 64)
    attention_fp32_forward_kernel<64><<<row_grid(B, T, H), kThreads, 0, stream>>>(out, lse, qkv, T, D, H, causal, scale);
  else
    attention_fp32_forward_kernel<128><<<row_grid(B, T, H), kThreads, 0, stream>>>(out, lse, qkv, T, D, H, causal, scale);
  PYLON_CUDA_CHECK_LAUNCH();
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int B,
                        int T, int D, int H, bool causal, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream) {
  const int hd = check_args("attention_backward (fp32)", B, T, D, H);
  PYLON_CHECK(workspace_bytes >= attention_backward_workspace_bytes(B, T, D, H),
              "attention_backward (fp32): workspace of ", workspace_bytes, " bytes, needs ",
              attention_backward_workspace_bytes(B, T, D, H));
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  auto* dsum = static_cast<float*>(workspace);  // (B, H, T), written by the dq pass, read by the dk/dv pass
  const dim3 grid = row_grid(B, T, H);
  if (hd == 64) {
    attention_fp32_backward_dq_kernel<64><<<grid, kThreads, 0, stream>>>(dqkv, dsum, dout, qkv, out, lse, T, D, H,
                                                                         causal, scale);
    PYLON_CUDA_CHECK_LAUNCH();
    attention_fp32_backward_dkdv_kernel<64><<<grid, kThreads, 0, stream>>>(dqkv, dout, qkv, lse, dsum, T, D, H,
                                                                           causal, scale);
  } else {
    attention_fp32_backward_dq_kernel<128><<<grid, kThreads, 0, stream>>>(dqkv, dsum, dout, qkv, out, lse, T, D,
                                                                          H, causal, scale);
    PYLON_CUDA_CHECK_LAUNCH();
    attention_fp32_backward_dkdv_kernel<128><<<grid, kThreads, 0, stream>>>(dqkv, dout, qkv, lse, dsum, T, D, H,
                                                                            causal, scale);
  }
  PYLON_CUDA_CHECK_LAUNCH();
}

}  // namespace pylon::cuda

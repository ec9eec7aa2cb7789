// Attention with one warp per row, for any even head dim up to 256 and any grouped-query layout:
// the fp32 attention (attention_fp32.h) and the bf16 head dims without tensor-core kernels
// (attention.h). Elem = float or bf16 in memory, fp32 math. One warp per query row (forward; dq and
// D_i) or per key row (dk, dv, summed over the group's query heads). Lane l holds the column pairs
// 2c, 2c + 1 for c = l, l + 32, ... < hd / 2 (kPairs = ceil(hd / 64) of them, the ones past hd / 2 held
// as 0 and never stored), so every row access is coalesced; a dot product is the lanes' partial sums
// added by warp_sum. The forward keeps the running max m, sum l and output o over the keys (online
// softmax); backward recomputes p = exp(s − lse) per pair. Scores s = (q·k) / sqrt(hd). No shared
// memory and no block barriers: a warp whose row is past T returns as a whole, so the shuffles of
// the others stay full-warp.
#include <cmath>
#include <cstdint>

#include "ops/cuda/attention_launch.h"
#include "ops/cuda/check.h"
#include "ops/cuda/kernel_util.cuh"

namespace pylon::cuda {
namespace {

using bf16 = __nv_bfloat16;
using detail::kWarpSize;
using detail::warp_sum;
constexpr int kWarps = 4;  // rows per block
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kMaxPairs = 4;  // hd <= 256

__device__ __forceinline__ float2 load_pair(const float* p) { return *reinterpret_cast<const float2*>(p); }
__device__ __forceinline__ float2 load_pair(const bf16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}
__device__ __forceinline__ void store_pair(float* p, float x, float y) { *reinterpret_cast<float2*>(p) = make_float2(x, y); }
__device__ __forceinline__ void store_pair(bf16* p, float x, float y) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
}

// This lane's pairs of a row (head_dim values from `row`); pairs past `pairs` = hd / 2 are 0.
template <int kPairs, typename Elem>
__device__ __forceinline__ void load_row(float2 (&dst)[kPairs], const Elem* row, int lane, int pairs) {
#pragma unroll
  for (int e = 0; e < kPairs; ++e) {
    const int c = e * kWarpSize + lane;
    dst[e] = c < pairs ? load_pair(row + 2 * c) : make_float2(0.f, 0.f);
  }
}

// The whole warp's a · row (every lane gets it).
template <int kPairs, typename Elem>
__device__ __forceinline__ float dot(const float2 (&a)[kPairs], const Elem* row, int lane, int pairs) {
  float s = 0.f;
#pragma unroll
  for (int e = 0; e < kPairs; ++e) {
    const int c = e * kWarpSize + lane;
    if (c < pairs) {
      const float2 b = load_pair(row + 2 * c);
      s += a[e].x * b.x + a[e].y * b.y;
    }
  }
  return warp_sum(s);
}

// acc += w · row, this lane's pairs.
template <int kPairs, typename Elem>
__device__ __forceinline__ void add_scaled(float2 (&acc)[kPairs], float w, const Elem* row, int lane, int pairs) {
#pragma unroll
  for (int e = 0; e < kPairs; ++e) {
    const int c = e * kWarpSize + lane;
    if (c < pairs) {
      const float2 b = load_pair(row + 2 * c);
      acc[e].x += w * b.x;
      acc[e].y += w * b.y;
    }
  }
}

// row = scale · src, this lane's pairs below `pairs`.
template <int kPairs, typename Elem>
__device__ __forceinline__ void store_row(Elem* row, const float2 (&src)[kPairs], float scale, int lane, int pairs) {
#pragma unroll
  for (int e = 0; e < kPairs; ++e) {
    const int c = e * kWarpSize + lane;
    if (c < pairs) store_pair(row + 2 * c, src[e].x * scale, src[e].y * scale);
  }
}

// This warp's row: grid (ceil(T / kWarps), B·heads or B·kv_heads).
__device__ __forceinline__ int warp_row() {
  return static_cast<int>(blockIdx.x) * kWarps + static_cast<int>(threadIdx.x) / kWarpSize;
}

// Warp per query row i of query head h: o_i = Σ_j softmax_j(s_ij) v_j over key/value head h / group.
template <typename Elem, int kPairs>
__global__ void __launch_bounds__(kThreads) attention_rowwise_forward_kernel(Elem* out,        // (B, T, q_dim)
                                                                             float* lse,       // (B, heads, T)
                                                                             const Elem* qkv,  // (B, T, ld)
                                                                             int T, QkvLayout L, bool causal,
                                                                             float scale) {
  const int row = warp_row(), lane = static_cast<int>(threadIdx.x) % kWarpSize;
  if (row >= T) return;
  const int bh = static_cast<int>(blockIdx.y), b = bh / L.heads, h = bh % L.heads, kvh = h / L.group;
  const int pairs = L.head_dim / 2;
  const Elem* rows = qkv + static_cast<int64_t>(b) * T * L.ld;
  float2 q[kPairs], o[kPairs];
  load_row(q, rows + static_cast<int64_t>(row) * L.ld + L.q_col(h), lane, pairs);
#pragma unroll
  for (int e = 0; e < kPairs; ++e) o[e] = make_float2(0.f, 0.f);
  float m = -INFINITY, l = 0.f;
  const int keys = causal ? row + 1 : T;
  for (int j = 0; j < keys; ++j) {
    const Elem* kv = rows + static_cast<int64_t>(j) * L.ld;
    const float s = dot(q, kv + L.k_col(kvh), lane, pairs) * scale;
    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new);  // 0 at the first key (m = −inf)
    const float p = expf(s - m_new);
    l = l * correction + p;
#pragma unroll
    for (int e = 0; e < kPairs; ++e) o[e].x *= correction, o[e].y *= correction;
    add_scaled(o, p, kv + L.v_col(kvh), lane, pairs);
    m = m_new;
  }
  store_row(out + (static_cast<int64_t>(b) * T + row) * L.q_dim + L.q_col(h), o, 1.f / l, lane, pairs);
  if (lane == 0) lse[static_cast<int64_t>(bh) * T + row] = m + logf(l);
}

// Warp per query row i of query head h: dsum_i = Σ_c dout_ic·out_ic (for the dk/dv pass), and
// dq_i = scale · Σ_j p_ij (dout_i·v_j − dsum_i) k_j over key/value head h / group.
template <typename Elem, int kPairs>
__global__ void __launch_bounds__(kThreads) attention_rowwise_backward_dq_kernel(
    Elem* dqkv,        // (B, T, ld): the q columns
    float* dsum,       // (B, heads, T)
    const Elem* dout,  // (B, T, q_dim)
    const Elem* qkv,   // (B, T, ld)
    const Elem* out,   // (B, T, q_dim)
    const float* lse,  // (B, heads, T)
    int T, QkvLayout L, bool causal, float scale) {
  const int row = warp_row(), lane = static_cast<int>(threadIdx.x) % kWarpSize;
  if (row >= T) return;
  const int bh = static_cast<int>(blockIdx.y), b = bh / L.heads, h = bh % L.heads, kvh = h / L.group;
  const int pairs = L.head_dim / 2;
  const Elem* rows = qkv + static_cast<int64_t>(b) * T * L.ld;
  const int64_t stat = static_cast<int64_t>(bh) * T + row;
  const int64_t out_row = (static_cast<int64_t>(b) * T + row) * L.q_dim + L.q_col(h);
  float2 q[kPairs], dy[kPairs], dq[kPairs];
  load_row(q, rows + static_cast<int64_t>(row) * L.ld + L.q_col(h), lane, pairs);
  load_row(dy, dout + out_row, lane, pairs);
  const float d_i = dot(dy, out + out_row, lane, pairs);
  if (lane == 0) dsum[stat] = d_i;
  const float lse_i = lse[stat];
#pragma unroll
  for (int e = 0; e < kPairs; ++e) dq[e] = make_float2(0.f, 0.f);
  const int keys = causal ? row + 1 : T;
  for (int j = 0; j < keys; ++j) {
    const Elem* kv = rows + static_cast<int64_t>(j) * L.ld;
    const float p = expf(dot(q, kv + L.k_col(kvh), lane, pairs) * scale - lse_i);
    const float ds = p * (dot(dy, kv + L.v_col(kvh), lane, pairs) - d_i);
    add_scaled(dq, ds, kv + L.k_col(kvh), lane, pairs);
  }
  store_row(dqkv + static_cast<int64_t>(b) * T * L.ld + static_cast<int64_t>(row) * L.ld + L.q_col(h), dq, scale,
            lane, pairs);
}

// Warp per key row j of key/value head kvh: over the group's query heads h in order, then the queries
// i in order, dv_j = Σ p_ij dout_i and dk_j = scale · Σ p_ij (dout_i·v_j − dsum_i) q_i.
template <typename Elem, int kPairs>
__global__ void __launch_bounds__(kThreads) attention_rowwise_backward_dkdv_kernel(
    Elem* dqkv,         // (B, T, ld): the k and v columns
    const Elem* dout,   // (B, T, q_dim)
    const Elem* qkv,    // (B, T, ld)
    const float* lse,   // (B, heads, T)
    const float* dsum,  // (B, heads, T)
    int T, QkvLayout L, bool causal, float scale) {
  const int row = warp_row(), lane = static_cast<int>(threadIdx.x) % kWarpSize;
  if (row >= T) return;
  const int bkv = static_cast<int>(blockIdx.y), b = bkv / L.kv_heads, kvh = bkv % L.kv_heads;
  const int pairs = L.head_dim / 2;
  const Elem* rows = qkv + static_cast<int64_t>(b) * T * L.ld;
  const Elem* key_row = rows + static_cast<int64_t>(row) * L.ld;
  float2 k[kPairs], v[kPairs], dk[kPairs], dv[kPairs];
  load_row(k, key_row + L.k_col(kvh), lane, pairs);
  load_row(v, key_row + L.v_col(kvh), lane, pairs);
#pragma unroll
  for (int e = 0; e < kPairs; ++e) dk[e] = make_float2(0.f, 0.f), dv[e] = make_float2(0.f, 0.f);
  for (int h = kvh * L.group; h < (kvh + 1) * L.group; ++h) {
    const int64_t stats = (static_cast<int64_t>(b) * L.heads + h) * T;
    for (int i = causal ? row : 0; i < T; ++i) {
      const Elem* q = rows + static_cast<int64_t>(i) * L.ld + L.q_col(h);
      const Elem* dy = dout + (static_cast<int64_t>(b) * T + i) * L.q_dim + L.q_col(h);
      const float p = expf(dot(k, q, lane, pairs) * scale - lse[stats + i]);
      const float ds = p * (dot(v, dy, lane, pairs) - dsum[stats + i]);
      add_scaled(dv, p, dy, lane, pairs);
      add_scaled(dk, ds, q, lane, pairs);
    }
  }
  Elem* dst = dqkv + static_cast<int64_t>(b) * T * L.ld + static_cast<int64_t>(row) * L.ld;
  store_row(dst + L.k_col(kvh), dk, scale, lane, pairs);
  store_row(dst + L.v_col(kvh), dv, 1.f, lane, pairs);
}

dim3 row_grid(int B, int T, int heads) {
  return dim3(static_cast<unsigned>(detail::ceil_div(T, kWarps)), static_cast<unsigned>(B * heads));
}

// Calls f(std::integral_constant<int, kPairs>{}) for this head dim's pairs per lane, ceil(hd / 64).
template <typename F>
void dispatch_pairs(int head_dim, F&& f) {
  const int pairs_per_lane = (head_dim / 2 + kWarpSize - 1) / kWarpSize;
  PYLON_ASSERT(pairs_per_lane >= 1 && pairs_per_lane <= kMaxPairs, "attention (row per warp): head_dim=", head_dim,
               " passed the checks but has no kernel");
  switch (pairs_per_lane) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    default: return f(std::integral_constant<int, 4>{});
  }
}

}  // namespace

template <typename Elem>
void launch_attention_rowwise_forward(Elem* out, float* lse, const Elem* qkv, int B, int T, const QkvLayout& L,
                                      bool causal, cudaStream_t stream) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(L.head_dim));
  dispatch_pairs(L.head_dim, [&](auto pairs) {
    attention_rowwise_forward_kernel<Elem, decltype(pairs)::value>
        <<<row_grid(B, T, L.heads), kThreads, 0, stream>>>(out, lse, qkv, T, L, causal, scale);
  });
  PYLON_CUDA_CHECK_LAUNCH();
}

template <typename Elem>
void launch_attention_rowwise_backward(Elem* dqkv, float* dsum, const Elem* dout, const Elem* qkv, const Elem* out,
                                       const float* lse, int B, int T, const QkvLayout& L, bool causal,
                                       cudaStream_t stream) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(L.head_dim));
  dispatch_pairs(L.head_dim, [&](auto pairs) {
    constexpr int kPairs = decltype(pairs)::value;
    // dsum is written by the dq pass and read by the dk/dv pass after it on the stream.
    attention_rowwise_backward_dq_kernel<Elem, kPairs>
        <<<row_grid(B, T, L.heads), kThreads, 0, stream>>>(dqkv, dsum, dout, qkv, out, lse, T, L, causal, scale);
    PYLON_CUDA_CHECK_LAUNCH();
    attention_rowwise_backward_dkdv_kernel<Elem, kPairs>
        <<<row_grid(B, T, L.kv_heads), kThreads, 0, stream>>>(dqkv, dout, qkv, lse, dsum, T, L, causal, scale);
  });
  PYLON_CUDA_CHECK_LAUNCH();
}

template void launch_attention_rowwise_forward<float>(float*, float*, const float*, int, int, const QkvLayout&, bool,
                                                      cudaStream_t);
template void launch_attention_rowwise_forward<bf16>(bf16*, float*, const bf16*, int, int, const QkvLayout&, bool,
                                                     cudaStream_t);
template void launch_attention_rowwise_backward<float>(float*, float*, const float*, const float*, const float*,
                                                       const float*, int, int, const QkvLayout&, bool, cudaStream_t);
template void launch_attention_rowwise_backward<bf16>(bf16*, float*, const bf16*, const bf16*, const bf16*,
                                                      const float*, int, int, const QkvLayout&, bool, cudaStream_t);

}  // namespace pylon::cuda

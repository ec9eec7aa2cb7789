// The softmax step of the flash-attention backward kernels (mma.sync and wgmma alike, the dk/dv passes
// and the dq passes), on score tiles in the mma.m16n8k16 / wgmma accumulator layout of flash_softmax.cuh:
// p = exp(s / sqrt(hd) - lse), 0 for masked pairs, then ds = p ∘ (dp - dsum); with the mask's tile test
// and the dq passes' per-row lse and dsum. t = lane % 4; every function keeps to this lane's elements.
//   Transposed tiles (the dk/dv passes): rows are keys (this lane: key_base, key_base + 8), columns
//   queries q0 + 8nt + 2t, +1; the per-query lse and dsum come from shared memory.
//   Row tiles (the dq passes): rows are queries (row_base, row_base + 8), columns keys k0 + 8nt + 2t, +1;
//   the per-row lse and dsum are held in registers.
#pragma once

#include <cstdint>

#include "ops/cuda/mma_sm80.cuh"

namespace pylon::cuda::flash {

constexpr float kLog2e = 1.4426950408889634f;

// Whether a tile needs the mask (need_mask below): its columns (queries of a transposed tile, keys of
// a row tile) end at cols_end, past T, or (causal) its last key comes after its first query.
__device__ __forceinline__ bool tile_needs_mask(int cols_end, int last_key, int first_query, int T, bool causal) {
  return cols_end > T || (causal && last_key > first_query);
}

// sᵀ -> pᵀ; lse_t: the tile's lse values (natural log, one per query column); need_mask: the tile
// holds queries at or past T or (causal) keys after their query.
template <int kTilesN>
__device__ __forceinline__ void transposed_probabilities(float (&st)[kTilesN][4], const float* lse_t, int key_base,
                                                         int q0, int t, int T, bool causal, bool need_mask,
                                                         float scale_log2) {
#pragma unroll
  for (int nt = 0; nt < kTilesN; ++nt) {
    const float2 l = *reinterpret_cast<const float2*>(lse_t + nt * 8 + 2 * t);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float p = mma::exp2_approx(st[nt][e] * scale_log2 - ((e & 1) ? l.y : l.x) * kLog2e);
      const int key = key_base + 8 * (e >> 1), query = q0 + nt * 8 + 2 * t + (e & 1);
      st[nt][e] = need_mask && (query >= T || (causal && key > query)) ? 0.f : p;
    }
  }
}

// dpᵀ -> dsᵀ = pᵀ ∘ (dpᵀ - dsum_query); dsum_t: the tile's dsum values, one per query column.
template <int kTilesN>
__device__ __forceinline__ void transposed_score_grads(float (&dpt)[kTilesN][4], const float (&pt)[kTilesN][4],
                                                       const float* dsum_t, int t) {
#pragma unroll
  for (int nt = 0; nt < kTilesN; ++nt) {
    const float2 d = *reinterpret_cast<const float2*>(dsum_t + nt * 8 + 2 * t);
#pragma unroll
    for (int e = 0; e < 4; ++e) dpt[nt][e] = pt[nt][e] * (dpt[nt][e] - ((e & 1) ? d.y : d.x));
  }
}

// s -> p; row_lse_log2: this lane's two rows' lse times log2(e); need_mask: the tile holds keys at or
// past T or (causal) keys after their row.
template <int kTilesN>
__device__ __forceinline__ void row_probabilities(float (&s)[kTilesN][4], const float (&row_lse_log2)[2],
                                                  int row_base, int k0, int t, int T, bool causal, bool need_mask,
                                                  float scale_log2) {
#pragma unroll
  for (int nt = 0; nt < kTilesN; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float p = mma::exp2_approx(s[nt][e] * scale_log2 - row_lse_log2[e >> 1]);
      const int row = row_base + 8 * (e >> 1), col = k0 + nt * 8 + 2 * t + (e & 1);
      s[nt][e] = need_mask && (col >= T || (causal && col > row)) ? 0.f : p;
    }
  }
}

// The row tiles' per-row values for this lane's two rows (row_base, + 8) of head bh: lse times log2(e)
// and dsum, both (B, H, T); rows past T get 0 (they compute values that are never stored).
__device__ __forceinline__ void load_row_stats(float (&row_lse_log2)[2], float (&row_dsum)[2], const float* lse,
                                               const float* dsum, int bh, int row_base, int T) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row_base + 8 * r;
    row_lse_log2[r] = row < T ? lse[static_cast<int64_t>(bh) * T + row] * kLog2e : 0.f;
    row_dsum[r] = row < T ? dsum[static_cast<int64_t>(bh) * T + row] : 0.f;
  }
}

// dp -> ds = p ∘ (dp - dsum_row); row_dsum: this lane's two rows' dsum.
template <int kTilesN>
__device__ __forceinline__ void row_score_grads(float (&dp)[kTilesN][4], const float (&p)[kTilesN][4],
                                                const float (&row_dsum)[2]) {
#pragma unroll
  for (int nt = 0; nt < kTilesN; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dp[nt][e] = p[nt][e] * (dp[nt][e] - row_dsum[e >> 1]);
}

}  // namespace pylon::cuda::flash

// The masking and online-softmax step of the flash-attention forward kernels, on a score tile held in
// the mma.m16n8k16 / wgmma accumulator layout: this lane holds rows g and g+8 of its warp's 16 and
// columns 8nt + 2t, 8nt + 2t + 1 of every 8-column tile nt.
#pragma once

#include <cmath>

#include "ops/cuda/mma_sm80.cuh"

namespace pylon::cuda::flash {

// s = -inf where the key (column k0 + ...) is at or past T, or after the query when causal.
// row_base = this lane's first row (query index), t = lane % 4.
template <int kTilesN>
__device__ __forceinline__ void mask_scores(float (&s)[kTilesN][4], int row_base, int k0, int t, int T, bool causal) {
#pragma unroll
  for (int nt = 0; nt < kTilesN; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = row_base + 8 * (e >> 1), col = k0 + nt * 8 + 2 * t + (e & 1);
      if (col >= T || (causal && col > row)) s[nt][e] = -INFINITY;
    }
  }
}

// One key tile of the online softmax: updates the running row max (raw scores) and this lane's share
// of the row sum, replaces s by p = exp(scale·(s - max)), and returns in alpha the factor by which
// everything accumulated over earlier tiles must shrink.
template <int kTilesN>
__device__ __forceinline__ void online_softmax(float (&s)[kTilesN][4], float (&row_max)[2], float (&row_sum)[2],
                                               float (&alpha)[2], float scale_log2) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = row_max[r];
#pragma unroll
    for (int nt = 0; nt < kTilesN; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mx_scaled = mx == -INFINITY ? 0.f : mx * scale_log2;  // a fully masked row stays 0
    alpha[r] = mma::exp2_approx(row_max[r] * scale_log2 - mx_scaled);
    row_max[r] = mx;
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < kTilesN; ++nt) {
      s[nt][2 * r] = mma::exp2_approx(s[nt][2 * r] * scale_log2 - mx_scaled);
      s[nt][2 * r + 1] = mma::exp2_approx(s[nt][2 * r + 1] * scale_log2 - mx_scaled);
      sum += s[nt][2 * r] + s[nt][2 * r + 1];
    }
    row_sum[r] = row_sum[r] * alpha[r] + sum;
  }
}

}  // namespace pylon::cuda::flash

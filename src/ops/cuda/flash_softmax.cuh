// The masking and online-softmax step of the flash-attention forward kernels, on a score tile held in
// the mma.m16n8k16 / wgmma accumulator layout: this lane holds rows g and g+8 of its warp's 16 and
// columns 8nt + 2t, 8nt + 2t + 1 of every 8-column tile nt.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

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

// The forward's end for the wgmma layout (64 output columns per block cb): this lane's two rows of
// out (B, T, ld_out) = o / Σ exp in bf16 at columns col.. (the query head's), and, from the quad's first
// lane, lse (B, heads, T) = max · scale + log Σ at bh = b·heads + h (natural log; row_max holds raw
// scores, scale_log2 = log2(e) / sqrt(hd)). Rows at or past T are skipped.
template <int kColBlocks>
__device__ __forceinline__ void store_output_rows(__nv_bfloat16* out, float* lse, const float (&o)[kColBlocks][8][4],
                                                  const float (&row_max)[2], const float (&row_sum)[2], int b, int bh,
                                                  int col, int row_base, int t, int T, int ld_out, float scale_log2) {
  const float scale = scale_log2 * (1.0f / 1.4426950408889634f);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = row_sum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int row = row_base + 8 * r;
    if (row >= T) continue;
    const float inv = 1.f / sum;
    __nv_bfloat16* dst = out + (static_cast<int64_t>(b) * T + row) * ld_out + col + 2 * t;
#pragma unroll
    for (int cb = 0; cb < kColBlocks; ++cb)
#pragma unroll
      for (int dt = 0; dt < 8; ++dt)
        *reinterpret_cast<__nv_bfloat162*>(dst + cb * 64 + dt * 8) =
            __floats2bfloat162_rn(o[cb][dt][2 * r] * inv, o[cb][dt][2 * r + 1] * inv);
    if (t == 0) lse[static_cast<int64_t>(bh) * T + row] = row_max[r] * scale + logf(sum);
  }
}

}  // namespace pylon::cuda::flash

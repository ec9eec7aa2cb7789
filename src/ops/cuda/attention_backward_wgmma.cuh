// The pieces that the Hopper attention backward kernels share (attention_backward_wgmma.cu: two passes;
// attention_backward_one_pass_wgmma.cu): the products over the head dim and over a 64-row tile, and the
// softmax backward of one (64 keys, 64 queries) transposed score tile held in wgmma accumulators.
//
// Transposed tiles (sᵀ, pᵀ, dpᵀ, dsᵀ): this lane holds keys key_base and key_base + 8 (key_base = key of
// its warp's row g) and queries q0 + 8nt + 2t, +1 of every 8-column tile nt (the wgmma_sm90.cuh layout).
#pragma once

#include "ops/cuda/mma_sm80.cuh"
#include "ops/cuda/wgmma_sm90.cuh"

namespace pylon::cuda::attention_bwd {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kTile = 64;  // queries per tile of the key-block passes, keys per tile of the dq pass

// acc (64, 64) = a_rows (64 of them, K-major) · b_tileᵀ over the head dim, both swizzled in smem.
template <int kHeadDim, int kRowsA, int kRowsB>
__device__ __forceinline__ void product_over_head_dim(float (&acc)[8][4], uint32_t a_tile, int a_row0,
                                                      uint32_t b_tile) {
  wgmma::fence();
#pragma unroll
  for (int ks = 0; ks < kHeadDim / 16; ++ks)
    wgmma::wgmma_m64n64k16_ss(acc, wgmma::desc_k_major<kRowsA>(a_tile, a_row0, ks),
                              wgmma::desc_k_major<kRowsB>(b_tile, 0, ks), ks > 0);
  wgmma::commit();
}

// acc (64, hd) += x (64, kTile, registers as fp32 accumulators) · tile (kTile, hd), tile read MN-major.
// The bf16 copy of x is read by the tensor cores until the caller's wgmma::wait.
template <int kHeadDim>
__device__ __forceinline__ void product_over_tile(float (&acc)[kHeadDim / 64][8][4], const float (&x)[8][4],
                                                  uint32_t tile) {
  uint32_t frag[kTile / 16][4];
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) mma::accum_to_a(frag[kk], x[2 * kk], x[2 * kk + 1]);
#pragma unroll
  for (int cb = 0; cb < kHeadDim / 64; ++cb) wgmma::fence_accumulators(acc[cb]);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk)
#pragma unroll
    for (int cb = 0; cb < kHeadDim / 64; ++cb)
      wgmma::wgmma_m64n64k16_rs_mn(acc[cb], frag[kk], wgmma::desc_mn_major<kTile>(tile, kk, cb));
  wgmma::commit();
}

// sᵀ -> pᵀ = exp(sᵀ·scale - lse_query), 0 for queries at or past T and (causal) keys after the query.
// lse_t: the tile's kTile lse values (natural log); need_mask: the tile has any such pair.
__device__ __forceinline__ void transposed_probabilities(float (&st)[8][4], const float* lse_t, int key_base, int q0,
                                                         int t, int T, bool causal, bool need_mask,
                                                         float scale_log2) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    const float2 l = *reinterpret_cast<const float2*>(lse_t + nt * 8 + 2 * t);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float p = mma::exp2_approx(st[nt][e] * scale_log2 - ((e & 1) ? l.y : l.x) * kLog2e);
      const int key = key_base + 8 * (e >> 1), query = q0 + nt * 8 + 2 * t + (e & 1);
      st[nt][e] = need_mask && (query >= T || (causal && key > query)) ? 0.f : p;
    }
  }
}

// dpᵀ -> dsᵀ = pᵀ ∘ (dpᵀ - dsum_query); dsum_t: the tile's kTile dsum values.
__device__ __forceinline__ void transposed_score_grads(float (&dpt)[8][4], const float (&pt)[8][4],
                                                       const float* dsum_t, int t) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    const float2 d = *reinterpret_cast<const float2*>(dsum_t + nt * 8 + 2 * t);
#pragma unroll
    for (int e = 0; e < 4; ++e) dpt[nt][e] = pt[nt][e] * (dpt[nt][e] - ((e & 1) ? d.y : d.x));
  }
}

}  // namespace pylon::cuda::attention_bwd

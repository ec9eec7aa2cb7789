// The two products of the Hopper attention backward kernels (attention_backward_wgmma.cu), each a
// warpgroup's: over the head dim (s, dp) and over a 64-row tile (dv, dk, dq). Their softmax step is in
// flash_softmax_backward.cuh. (The one-pass backward of commit 9f49281 used them too;
// bench/attention_notes.md says why it was reverted.)
#pragma once

#include "ops/cuda/mma_sm80.cuh"
#include "ops/cuda/wgmma_sm90.cuh"

namespace pylon::cuda::attention_bwd {

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

}  // namespace pylon::cuda::attention_bwd

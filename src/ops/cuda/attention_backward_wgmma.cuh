// The Hopper attention backward's building blocks, each a warpgroup's (attention_backward_wgmma.cu and
// the warp-specialised attention_backward_ws.cu share them): the two products, over the head dim (s,
// dp) and over a 64-row tile (dv, dk, dq); one tile step of each pass; the passes' stores. The softmax
// step is in flash_softmax_backward.cuh. (The one-pass backward of commit 9f49281 used the products
// too; bench/attention_notes.md says why it was reverted.)
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "ops/cuda/flash_softmax_backward.cuh"
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

// The step functions' default turns: none (the warpgroup issues its products whenever it is ready).
struct NoTurns {
  __device__ __forceinline__ void take() const {}
  __device__ __forceinline__ void pass() const {}
};

// One query tile of the dk/dv pass for a warpgroup's 64 keys (rows key_row0.. of the swizzled k and v
// blocks of kKeyRows rows; the first of them is key group_key0): sᵀ (64 keys, kTile queries) = k · qᵀ
// and dpᵀ = v · doutᵀ issued together, pᵀ = exp(sᵀ - lse_query) (0 where masked) while dpᵀ runs, dsᵀ =
// pᵀ ∘ (dpᵀ - dsum_query), then dv += pᵀ · dout and dk += dsᵀ · q together; returns with every product
// complete. lse_t, dsum_t: the tile's per-query values in shared memory; key_base: this lane's first
// key; m0: the tile's first query. Each of the two issues (the products over the head dim, then those
// over the tile) is one turn: turns.take() before it, turns.pass() after (NoTurns, or the
// warp-specialised kernels' ping-pong between their two consumers).
template <int kHeadDim, int kKeyRows, class Turns = NoTurns>
__device__ __forceinline__ void dkdv_tile_step(float (&dk)[kHeadDim / 64][8][4], float (&dv)[kHeadDim / 64][8][4],
                                               uint32_t k_s, uint32_t v_s, int key_row0, uint32_t q_t,
                                               uint32_t do_t, const float* lse_t, const float* dsum_t,
                                               int group_key0, int key_base, int m0, int t, int T, bool causal,
                                               float scale_log2, const Turns& turns = {}) {
  float st[8][4], dpt[8][4];
  turns.take();
  product_over_head_dim<kHeadDim, kKeyRows, kTile>(st, k_s, key_row0, q_t);
  product_over_head_dim<kHeadDim, kKeyRows, kTile>(dpt, v_s, key_row0, do_t);
  turns.pass();
  wgmma::wait<1>();
  wgmma::fence_accumulators(st);
  const bool need_mask = flash::tile_needs_mask(m0 + kTile, group_key0 + 63, m0, T, causal);
  flash::transposed_probabilities(st, lse_t, key_base, m0, t, T, causal, need_mask, scale_log2);
  wgmma::wait<0>();
  wgmma::fence_accumulators(dpt);
  // dsᵀ in place of dpᵀ; then both products over the tile.
  flash::transposed_score_grads(dpt, st, dsum_t, t);
  turns.take();
  product_over_tile<kHeadDim>(dv, st, do_t);
  product_over_tile<kHeadDim>(dk, dpt, q_t);
  turns.pass();
  wgmma::wait<0>();
#pragma unroll
  for (int cb = 0; cb < kHeadDim / 64; ++cb) {
    wgmma::fence_accumulators(dv[cb]);
    wgmma::fence_accumulators(dk[cb]);
  }
}

// One key tile of the dq pass for a warpgroup's 64 query rows (rows row0.. of the swizzled q and dout
// blocks of kRows rows; the first of them is query group_row0): s = q · kᵀ and dp = dout · vᵀ issued
// together, p = exp(s - lse_row) (0 where masked) while dp runs, ds = p ∘ (dp - dsum_row), dq += ds · k;
// returns with every product complete. row_lse_log2, row_dsum: this lane's two rows'; k0: the tile's
// first key. Two turns, as in dkdv_tile_step: the products over the head dim, then dq's.
template <int kHeadDim, int kRows, class Turns = NoTurns>
__device__ __forceinline__ void dq_tile_step(float (&dq)[kHeadDim / 64][8][4], uint32_t q_s, uint32_t do_s, int row0,
                                             uint32_t k_t, uint32_t v_t, const float (&row_lse_log2)[2],
                                             const float (&row_dsum)[2], int group_row0, int row_base, int k0, int t,
                                             int T, bool causal, float scale_log2, const Turns& turns = {}) {
  float s[8][4], dp[8][4];
  turns.take();
  product_over_head_dim<kHeadDim, kRows, kTile>(s, q_s, row0, k_t);
  product_over_head_dim<kHeadDim, kRows, kTile>(dp, do_s, row0, v_t);
  turns.pass();
  wgmma::wait<1>();
  wgmma::fence_accumulators(s);
  const bool need_mask = flash::tile_needs_mask(k0 + kTile, k0 + kTile - 1, group_row0, T, causal);
  flash::row_probabilities(s, row_lse_log2, row_base, k0, t, T, causal, need_mask, scale_log2);
  wgmma::wait<0>();
  wgmma::fence_accumulators(dp);
  // ds in place of dp, then dq += ds · k.
  flash::row_score_grads(dp, s, row_dsum);
  turns.take();
  product_over_tile<kHeadDim>(dq, dp, k_t);
  turns.pass();
  wgmma::wait<0>();
#pragma unroll
  for (int cb = 0; cb < kHeadDim / 64; ++cb) wgmma::fence_accumulators(dq[cb]);
}

// The passes' stores, a lane's two rows (key_base / row_base and + 8) in the accumulator layout, into
// dqkv (B, T, ld): dk (times the softmax scale) at columns k_col.. and dv at k_col + kv_dim.. (the key/value
// head's), dq (times the scale) at q_col.. (the query head's). Rows at or past T are skipped.
template <int kHeadDim>
__device__ __forceinline__ void store_dkdv(__nv_bfloat16* dqkv, const float (&dk)[kHeadDim / 64][8][4],
                                           const float (&dv)[kHeadDim / 64][8][4], int b, int k_col, int kv_dim,
                                           int key_base, int t, int T, int ld, float scale) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key_base + 8 * r;
    if (key >= T) continue;
    __nv_bfloat16* dst = dqkv + (static_cast<int64_t>(b) * T + key) * ld + k_col + 2 * t;
#pragma unroll
    for (int cb = 0; cb < kHeadDim / 64; ++cb)
#pragma unroll
      for (int dt = 0; dt < 8; ++dt) {
        *reinterpret_cast<__nv_bfloat162*>(dst + cb * 64 + dt * 8) =
            __floats2bfloat162_rn(dk[cb][dt][2 * r] * scale, dk[cb][dt][2 * r + 1] * scale);
        *reinterpret_cast<__nv_bfloat162*>(dst + kv_dim + cb * 64 + dt * 8) =
            __floats2bfloat162_rn(dv[cb][dt][2 * r], dv[cb][dt][2 * r + 1]);
      }
  }
}
template <int kHeadDim>
__device__ __forceinline__ void store_dq(__nv_bfloat16* dqkv, const float (&dq)[kHeadDim / 64][8][4], int b,
                                         int q_col, int row_base, int t, int T, int ld, float scale) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row_base + 8 * r;
    if (row >= T) continue;
    __nv_bfloat16* dst = dqkv + (static_cast<int64_t>(b) * T + row) * ld + q_col + 2 * t;
#pragma unroll
    for (int cb = 0; cb < kHeadDim / 64; ++cb)
#pragma unroll
      for (int dt = 0; dt < 8; ++dt)
        *reinterpret_cast<__nv_bfloat162*>(dst + cb * 64 + dt * 8) =
            __floats2bfloat162_rn(dq[cb][dt][2 * r] * scale, dq[cb][dt][2 * r + 1] * scale);
  }
}

}  // namespace pylon::cuda::attention_bwd

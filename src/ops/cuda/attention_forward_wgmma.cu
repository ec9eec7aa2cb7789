// Flash-attention forward on Hopper warpgroup MMA (wgmma): each warpgroup owns 64 query rows;
// s = q·kᵀ reads q and k from swizzled shared memory, o += p·v takes p from registers. Keys and values
// stream through double-buffered cp.async tiles; online softmax and logsumexp as in the mma.sync kernel.
// The softmax of one block overlaps the products of the other block resident on the multiprocessor
// (overlapping within a warpgroup, FlashAttention-3 style, was measured slower here: see
// bench/attention_notes.md).
#include <cmath>

#include "ops/cuda/attention_launch.h"
#include "ops/cuda/attention_tiles.h"
#include "ops/cuda/check.h"
#include "ops/cuda/flash_softmax.cuh"
#include "ops/cuda/mma_sm80.cuh"
#include "ops/cuda/wgmma_sm90.cuh"

namespace pylon::cuda {
namespace {

using namespace mma;

template <int kHeadDim, int kGroups, int kBlockN>
__global__ void __launch_bounds__(kGroups * 128)
    flash_attention_forward_wgmma(bf16* __restrict__ out,        // (B, T, q_dim)
                                  float* __restrict__ lse,       // (B, heads, T)
                                  const bf16* __restrict__ qkv,  // (B, T, ld)
                                  int T, QkvLayout L, float scale_log2, bool causal) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // built without sm_90a: the host never picks this kernel
#else
  constexpr int kBlockM = 64 * kGroups, kThreads = 128 * kGroups;
  constexpr int kSteps = kHeadDim / 16, kTilesN = kBlockN / 8, kColBlocks = kHeadDim / 64;
  constexpr int kTileBytesN = kBlockN * kHeadDim * 2;
  extern __shared__ unsigned char smem[];
  const uint32_t q_s = (smem_addr(smem) + 1023) & ~1023u;  // (kBlockM, hd) swizzled
  const uint32_t k_s = q_s + kBlockM * kHeadDim * 2;       // 2 x (kBlockN, hd) swizzled
  const uint32_t v_s = k_s + 2 * kTileBytesN;              // 2 x (kBlockN, hd) swizzled

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int group = warp / 4;                      // warpgroup: rows 64*group .. of the block
  const int m_block = gridDim.x - 1 - blockIdx.x;  // heaviest causal tiles first
  const int bh = blockIdx.y, b = bh / L.heads, h = bh % L.heads, kvh = h / L.group;
  const int q0 = m_block * kBlockM;
  const int ld = L.ld;
  const bf16* row_g = qkv + static_cast<int64_t>(b) * T * ld;
  const bf16* q_g = row_g + L.q_col(h);
  const bf16* k_g = row_g + L.k_col(kvh);
  const bf16* v_g = row_g + L.v_col(kvh);
  const int kv_end = causal ? min(T, q0 + kBlockM) : T;
  const int n_tiles = (kv_end + kBlockN - 1) / kBlockN;

  wgmma::load_swizzled_tile_async<kBlockM, kHeadDim, kThreads>(q_s, q_g, ld, q0, T, tid);
  wgmma::load_swizzled_tile_async<kBlockN, kHeadDim, kThreads>(k_s, k_g, ld, 0, T, tid);
  cp_async_commit();
  wgmma::load_swizzled_tile_async<kBlockN, kHeadDim, kThreads>(v_s, v_g, ld, 0, T, tid);
  cp_async_commit();

  float o[kColBlocks][8][4] = {};              // unnormalised output, 64 columns per block
  float row_max[2] = {-INFINITY, -INFINITY};  // rows g and g+8 of this warp's 16
  float row_sum[2] = {0.f, 0.f};
  const int row_base = q0 + warp * 16 + g;

  for (int j = 0; j < n_tiles; ++j) {
    const int buf = j & 1, k0 = j * kBlockN;
    const bool has_next = j + 1 < n_tiles;
    cp_async_wait<1>();  // k tile j (and q on the first pass)
    wgmma::fence_async_proxy();
    __syncthreads();
    if (has_next) {
      wgmma::load_swizzled_tile_async<kBlockN, kHeadDim, kThreads>(k_s + (buf ^ 1) * kTileBytesN, k_g, ld,
                                                                    k0 + kBlockN, T, tid);
      cp_async_commit();
    }

    // s (64, kBlockN) = q · kᵀ for this warpgroup's rows.
    const uint32_t k_t = k_s + buf * kTileBytesN;
    float s[kTilesN][4];
    wgmma::fence();
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
      const uint64_t da = wgmma::desc_k_major<kBlockM>(q_s, group * 64, ks);
      const uint64_t db = wgmma::desc_k_major<kBlockN>(k_t, 0, ks);
      if constexpr (kBlockN == 64) wgmma::wgmma_m64n64k16_ss(s, da, db, ks > 0);
      else wgmma::wgmma_m64n128k16_ss(s, da, db, ks > 0);
    }
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_accumulators(s);

    if (k0 + kBlockN > T || (causal && k0 + kBlockN - 1 > q0 + group * 64))  // tail keys or the diagonal
      flash::mask_scores(s, row_base, k0, t, T, causal);

    // Online softmax: p = exp(s - max), and what was accumulated shrinks to the new max.
    float alpha[2];
    flash::online_softmax(s, row_max, row_sum, alpha, scale_log2);
#pragma unroll
    for (int cb = 0; cb < kColBlocks; ++cb)
#pragma unroll
      for (int dt = 0; dt < 8; ++dt) {
        o[cb][dt][0] *= alpha[0];
        o[cb][dt][1] *= alpha[0];
        o[cb][dt][2] *= alpha[1];
        o[cb][dt][3] *= alpha[1];
      }

    if (has_next) cp_async_wait<1>();
    else cp_async_wait<0>();
    wgmma::fence_async_proxy();
    __syncthreads();  // v tile j
    if (has_next) {
      wgmma::load_swizzled_tile_async<kBlockN, kHeadDim, kThreads>(v_s + (buf ^ 1) * kTileBytesN, v_g, ld,
                                                                    k0 + kBlockN, T, tid);
      cp_async_commit();
    }

    // o (64, hd) += p (64, kBlockN) · v (kBlockN, hd), p in registers as bf16.
    const uint32_t v_t = v_s + buf * kTileBytesN;
    uint32_t p_frag[kBlockN / 16][4];
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) accum_to_a(p_frag[kk], s[2 * kk], s[2 * kk + 1]);
#pragma unroll
    for (int cb = 0; cb < kColBlocks; ++cb) wgmma::fence_accumulators(o[cb]);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
      for (int cb = 0; cb < kColBlocks; ++cb)
        wgmma::wgmma_m64n64k16_rs_mn(o[cb], p_frag[kk], wgmma::desc_mn_major<kBlockN>(v_t, kk, cb));
    wgmma::commit();
    wgmma::wait<0>();
#pragma unroll
    for (int cb = 0; cb < kColBlocks; ++cb) wgmma::fence_accumulators(o[cb]);
  }

  flash::store_output_rows(out, lse, o, row_max, row_sum, b, bh, L.q_col(h), row_base, t, T, L.q_dim, scale_log2);
#endif
}

template <int kHeadDim, int kGroups, int kBlockN>
void launch_forward_wgmma(bf16* out, float* lse, const bf16* qkv, int B, int T, const QkvLayout& L, bool causal,
                          cudaStream_t stream) {
  constexpr int kBlockM = 64 * kGroups;
  constexpr int smem = (kBlockM + 4 * kBlockN) * kHeadDim * static_cast<int>(sizeof(bf16)) + 1024;  // + alignment
  auto kernel = flash_attention_forward_wgmma<kHeadDim, kGroups, kBlockN>;
  PYLON_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid((T + kBlockM - 1) / kBlockM, B * L.heads);
  const float scale_log2 = 1.4426950408889634f / std::sqrt(static_cast<float>(kHeadDim));
  kernel<<<grid, kGroups * 128, smem, stream>>>(out, lse, qkv, T, L, scale_log2, causal);
  PYLON_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool launch_attention_forward_wgmma(const detail::AttentionTiles& tiles, bf16* out, float* lse, const bf16* qkv,
                                    int B, int T, const QkvLayout& L, bool causal, cudaStream_t stream) {
#define PYLON_FORWARD_CASE(HD, WARPS, BN)                                            \
  if (L.head_dim == HD && tiles.fwd_warps == WARPS && tiles.fwd_block_n == BN) {     \
    static_assert(WARPS % 4 == 0, "whole warpgroups");                               \
    launch_forward_wgmma<HD, WARPS / 4, BN>(out, lse, qkv, B, T, L, causal, stream); \
    return true;                                                                     \
  }
  PYLON_ATTENTION_WGMMA_FORWARD_TILES(PYLON_FORWARD_CASE)
#undef PYLON_FORWARD_CASE
  return false;
}

}  // namespace pylon::cuda

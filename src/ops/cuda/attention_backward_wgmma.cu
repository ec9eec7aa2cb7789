// Flash-attention backward on Hopper warpgroup MMA (wgmma), the same deterministic two-pass scheme as
// attention_backward.cu: a key-tile pass owns dk and dv (each warpgroup 64 keys), a query-tile pass owns
// dq (each warpgroup 64 rows). Products contracting over the head dim read both operands K-major from
// swizzled shared memory; products contracting over keys or queries take p or ds from registers and
// read the other operand MN-major. Independent products are issued together, and the exp of one
// runs while the tensor cores do the other.
#include <cmath>

#include "ops/cuda/attention_backward_wgmma.cuh"
#include "ops/cuda/attention_launch.h"
#include "ops/cuda/attention_tiles.h"
#include "ops/cuda/check.h"
#include "ops/cuda/flash_softmax_backward.cuh"
#include "ops/cuda/mma_sm80.cuh"
#include "ops/cuda/wgmma_sm90.cuh"

namespace pylon::cuda {
namespace {

using namespace mma;
using namespace attention_bwd;
using flash::kLog2e;

// A block owns 64*kGroups keys of one (batch, key/value head); each warpgroup owns 64 of them and sums
// their dk, dv over the group's query heads in order, each head's query tiles in order (iteration it of
// group·n_m: query head kvh·group + it / n_m, query tile m_begin + it % n_m).
template <int kHeadDim, int kGroups>
__global__ void __launch_bounds__(kGroups * 128)
    flash_attention_backward_dkdv_wgmma(bf16* __restrict__ dqkv,        // (B, T, ld): k, v columns
                                        const bf16* __restrict__ dout,  // (B, T, q_dim)
                                        const bf16* __restrict__ qkv,   // (B, T, ld)
                                        const float* __restrict__ lse,  // (B, heads, T)
                                        const float* __restrict__ dsum, // (B, heads, T)
                                        int T, QkvLayout L, float scale, float scale_log2, bool causal) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();
#else
  constexpr int kBlockN = 64 * kGroups, kThreads = 128 * kGroups, kColBlocks = kHeadDim / 64;
  constexpr int kTileBytes = kTile * kHeadDim * 2;
  extern __shared__ unsigned char smem[];
  const uint32_t k_s = (smem_addr(smem) + 1023) & ~1023u;  // (kBlockN, hd) swizzled
  const uint32_t v_s = k_s + kBlockN * kHeadDim * 2;       // (kBlockN, hd)
  const uint32_t q_s = v_s + kBlockN * kHeadDim * 2;       // 2 x (kTile, hd)
  const uint32_t do_s = q_s + 2 * kTileBytes;              // 2 x (kTile, hd)
  float* lse_s = reinterpret_cast<float*>(smem + (do_s + 2 * kTileBytes - smem_addr(smem)));  // (2, kTile)
  float* dsum_s = lse_s + 2 * kTile;                                                          // (2, kTile)

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int group = warp / 4;
  const int bkv = blockIdx.y, b = bkv / L.kv_heads, kvh = bkv % L.kv_heads;
  const int n0 = blockIdx.x * kBlockN;
  const int ld = L.ld;
  const bf16* row_g = qkv + static_cast<int64_t>(b) * T * ld;
  const bf16* k_g = row_g + L.k_col(kvh);
  const bf16* v_g = row_g + L.v_col(kvh);
  const int m_begin = causal ? n0 / kTile : 0;
  const int n_m = (T + kTile - 1) / kTile - m_begin;  // query tiles per head, >= 1 (n0 < T)
  const int n_iter = L.group * n_m;

  const bf16* do_b = dout + static_cast<int64_t>(b) * T * L.q_dim;
  const float* lse_b = lse + static_cast<int64_t>(b) * L.heads * T;
  const float* dsum_b = dsum + static_cast<int64_t>(b) * L.heads * T;
  auto load_query_tile = [&](int it, int buf) {  // q, dout, lse, dsum of iteration it's head and query tile
    const int h = kvh * L.group + it / n_m, m0 = (m_begin + it % n_m) * kTile;
    wgmma::load_swizzled_tile_async<kTile, kHeadDim, kThreads>(q_s + buf * kTileBytes, row_g + h * kHeadDim, ld, m0,
                                                               T, tid);
    wgmma::load_swizzled_tile_async<kTile, kHeadDim, kThreads>(do_s + buf * kTileBytes, do_b + h * kHeadDim, L.q_dim,
                                                               m0, T, tid);
    load_row_stats_async<kTile, kThreads>(lse_s + buf * kTile, lse_b + static_cast<int64_t>(h) * T, m0, T, tid);
    load_row_stats_async<kTile, kThreads>(dsum_s + buf * kTile, dsum_b + static_cast<int64_t>(h) * T, m0, T, tid);
  };
  // cp.async groups: {k, v, iteration 0's query tile}, then one per iteration, issued one ahead.
  wgmma::load_swizzled_tile_async<kBlockN, kHeadDim, kThreads>(k_s, k_g, ld, n0, T, tid);
  wgmma::load_swizzled_tile_async<kBlockN, kHeadDim, kThreads>(v_s, v_g, ld, n0, T, tid);
  load_query_tile(0, 0);
  cp_async_commit();

  float dk[kColBlocks][8][4] = {}, dv[kColBlocks][8][4] = {};
  const int key_base = n0 + warp * 16 + g;  // this lane's keys: key_base and key_base + 8
  const int group_key0 = n0 + group * 64;

  for (int it = 0; it < n_iter; ++it) {
    const int buf = it & 1, m0 = (m_begin + it % n_m) * kTile;
    cp_async_wait<0>();  // iteration it's query tile; every warp is done with the buffer the next load overwrites
    wgmma::fence_async_proxy();
    __syncthreads();
    if (it + 1 < n_iter) load_query_tile(it + 1, buf ^ 1);
    cp_async_commit();
    dkdv_tile_step<kHeadDim, kBlockN>(dk, dv, k_s, v_s, group * 64, q_s + buf * kTileBytes, do_s + buf * kTileBytes,
                                      lse_s + buf * kTile, dsum_s + buf * kTile, group_key0, key_base, m0, t, T,
                                      causal, scale_log2);
  }
  store_dkdv<kHeadDim>(dqkv, dk, dv, b, L.k_col(kvh), L.kv_dim, key_base, t, T, ld, scale);
#endif
}

// Each warpgroup owns 64 query rows of the block's (batch, query head) and sums their dq over the key
// tiles of key/value head h / group, recomputing p and dp.
template <int kHeadDim, int kGroups>
__global__ void __launch_bounds__(kGroups * 128)
    flash_attention_backward_dq_wgmma(bf16* __restrict__ dqkv,        // (B, T, ld): q columns
                                      const bf16* __restrict__ dout,  // (B, T, q_dim)
                                      const bf16* __restrict__ qkv,   // (B, T, ld)
                                      const float* __restrict__ lse,  // (B, heads, T)
                                      const float* __restrict__ dsum, // (B, heads, T)
                                      int T, QkvLayout L, float scale, float scale_log2, bool causal) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();
#else
  constexpr int kBlockM = 64 * kGroups, kThreads = 128 * kGroups, kColBlocks = kHeadDim / 64;
  constexpr int kTileBytes = kTile * kHeadDim * 2;
  extern __shared__ unsigned char smem[];
  const uint32_t q_s = (smem_addr(smem) + 1023) & ~1023u;  // (kBlockM, hd) swizzled
  const uint32_t do_s = q_s + kBlockM * kHeadDim * 2;      // (kBlockM, hd)
  const uint32_t k_s = do_s + kBlockM * kHeadDim * 2;      // 2 x (kTile, hd)
  const uint32_t v_s = k_s + 2 * kTileBytes;               // 2 x (kTile, hd)

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int group = warp / 4;
  const int m_block = gridDim.x - 1 - blockIdx.x;
  const int bh = blockIdx.y, b = bh / L.heads, h = bh % L.heads, kvh = h / L.group;
  const int q0 = m_block * kBlockM;
  const int ld = L.ld;
  const bf16* row_g = qkv + static_cast<int64_t>(b) * T * ld;
  const bf16* q_g = row_g + L.q_col(h);
  const bf16* k_g = row_g + L.k_col(kvh);
  const bf16* v_g = row_g + L.v_col(kvh);
  const bf16* do_g = dout + static_cast<int64_t>(b) * T * L.q_dim + L.q_col(h);
  const int kv_end = causal ? min(T, q0 + kBlockM) : T;
  const int n_tiles = (kv_end + kTile - 1) / kTile;

  auto load_key_tile = [&](int j, int buf) {  // k and v of key tile j
    wgmma::load_swizzled_tile_async<kTile, kHeadDim, kThreads>(k_s + buf * kTileBytes, k_g, ld, j * kTile, T, tid);
    wgmma::load_swizzled_tile_async<kTile, kHeadDim, kThreads>(v_s + buf * kTileBytes, v_g, ld, j * kTile, T, tid);
  };
  // cp.async groups: {q, dout, key tile 0}, then one per key tile, issued a tile ahead.
  wgmma::load_swizzled_tile_async<kBlockM, kHeadDim, kThreads>(q_s, q_g, ld, q0, T, tid);
  wgmma::load_swizzled_tile_async<kBlockM, kHeadDim, kThreads>(do_s, do_g, L.q_dim, q0, T, tid);
  load_key_tile(0, 0);
  cp_async_commit();

  const int row_base = q0 + warp * 16 + g;
  float row_lse[2], row_dsum[2];
  flash::load_row_stats(row_lse, row_dsum, lse, dsum, bh, row_base, T);

  float dq[kColBlocks][8][4] = {};
  for (int j = 0; j < n_tiles; ++j) {
    const int buf = j & 1, k0 = j * kTile;
    cp_async_wait<0>();  // key tile j; every warp is done with the buffer the next load overwrites
    wgmma::fence_async_proxy();
    __syncthreads();
    if (j + 1 < n_tiles) load_key_tile(j + 1, buf ^ 1);
    cp_async_commit();
    dq_tile_step<kHeadDim, kBlockM>(dq, q_s, do_s, group * 64, k_s + buf * kTileBytes, v_s + buf * kTileBytes, row_lse,
                                    row_dsum, q0 + group * 64, row_base, k0, t, T, causal, scale_log2);
  }
  store_dq<kHeadDim>(dqkv, dq, b, L.q_col(h), row_base, t, T, ld, scale);
#endif
}

template <int kHeadDim, int kGroups>
void launch_dkdv_wgmma(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* dsum, int B,
                       int T, const QkvLayout& L, bool causal, cudaStream_t stream) {
  constexpr int kBlockN = 64 * kGroups;
  constexpr int smem = (2 * kBlockN + 4 * kTile) * kHeadDim * static_cast<int>(sizeof(bf16)) +
                       4 * kTile * static_cast<int>(sizeof(float)) + 1024;  // + alignment
  auto kernel = flash_attention_backward_dkdv_wgmma<kHeadDim, kGroups>;
  PYLON_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid((T + kBlockN - 1) / kBlockN, B * L.kv_heads);
  const float scale = 1.f / std::sqrt(static_cast<float>(kHeadDim));
  kernel<<<grid, kGroups * 128, smem, stream>>>(dqkv, dout, qkv, lse, dsum, T, L, scale, scale * kLog2e, causal);
  PYLON_CUDA_CHECK_LAUNCH();
}

template <int kHeadDim, int kGroups>
void launch_dq_wgmma(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* dsum, int B,
                     int T, const QkvLayout& L, bool causal, cudaStream_t stream) {
  constexpr int kBlockM = 64 * kGroups;
  constexpr int smem = (2 * kBlockM + 4 * kTile) * kHeadDim * static_cast<int>(sizeof(bf16)) + 1024;
  auto kernel = flash_attention_backward_dq_wgmma<kHeadDim, kGroups>;
  PYLON_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid((T + kBlockM - 1) / kBlockM, B * L.heads);
  const float scale = 1.f / std::sqrt(static_cast<float>(kHeadDim));
  kernel<<<grid, kGroups * 128, smem, stream>>>(dqkv, dout, qkv, lse, dsum, T, L, scale, scale * kLog2e, causal);
  PYLON_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool launch_attention_backward_dkdv_wgmma(const detail::AttentionTiles& tiles, bf16* dqkv, const bf16* dout,
                                          const bf16* qkv, const float* lse, const float* dsum, int B, int T,
                                          const QkvLayout& L, bool causal, cudaStream_t stream) {
#define PYLON_DKDV_CASE(HD, WARPS, BM)                                                     \
  if (L.head_dim == HD && tiles.dkdv_warps == WARPS && tiles.dkdv_block_m == BM) {         \
    static_assert(WARPS % 4 == 0 && BM == kTile, "whole warpgroups, query tiles of kTile"); \
    launch_dkdv_wgmma<HD, WARPS / 4>(dqkv, dout, qkv, lse, dsum, B, T, L, causal, stream);  \
    return true;                                                                           \
  }
  PYLON_ATTENTION_WGMMA_DKDV_TILES(PYLON_DKDV_CASE)
#undef PYLON_DKDV_CASE
  return false;
}

bool launch_attention_backward_dq_wgmma(const detail::AttentionTiles& tiles, bf16* dqkv, const bf16* dout,
                                        const bf16* qkv, const float* lse, const float* dsum, int B, int T,
                                        const QkvLayout& L, bool causal, cudaStream_t stream) {
#define PYLON_DQ_CASE(HD, WARPS, BN)                                                     \
  if (L.head_dim == HD && tiles.dq_warps == WARPS && tiles.dq_block_n == BN) {           \
    static_assert(WARPS % 4 == 0 && BN == kTile, "whole warpgroups, key tiles of kTile"); \
    launch_dq_wgmma<HD, WARPS / 4>(dqkv, dout, qkv, lse, dsum, B, T, L, causal, stream);  \
    return true;                                                                         \
  }
  PYLON_ATTENTION_WGMMA_DQ_TILES(PYLON_DQ_CASE)
#undef PYLON_DQ_CASE
  return false;
}

}  // namespace pylon::cuda

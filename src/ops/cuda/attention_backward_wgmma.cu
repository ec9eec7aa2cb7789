// Flash-attention backward on Hopper warpgroup MMA (wgmma), the same deterministic two-pass scheme as
// attention_backward.cu: a key-tile pass owns dk and dv (each warpgroup 64 keys), a query-tile pass owns
// dq (each warpgroup 64 rows). Products contracting over the head dim read both operands K-major from
// swizzled shared memory; products contracting over keys or queries take p or ds from registers and
// read the other operand MN-major. Independent products are issued together, and the exp of one
// runs while the tensor cores do the other.
#include <cmath>

#include "ops/cuda/attention_launch.h"
#include "ops/cuda/check.h"
#include "ops/cuda/mma_sm80.cuh"
#include "ops/cuda/wgmma_sm90.cuh"

namespace pylon::cuda {
namespace {

using namespace mma;
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kTile = 64;  // queries per tile of the dk/dv pass, keys per tile of the dq pass

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
template <int kHeadDim>
__device__ __forceinline__ void product_over_tile(float (&acc)[kHeadDim / 64][8][4], const float (&x)[8][4],
                                                  uint32_t tile) {
  uint32_t frag[kTile / 16][4];
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) accum_to_a(frag[kk], x[2 * kk], x[2 * kk + 1]);
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

// Where key block n's contribution to query tile m goes in the fixed order of dq's sum. Key block n
// starts at query tile s_n = n·kGroups (the first one it reaches when causal) and walks them cyclically,
// so in lockstep every block reaches a different tile at each step; the contributions to tile m are
// summed in the order of the step at which their blocks reach it. rank = how many come before n's;
// count = how many contribute to m (causal: the blocks with s_n <= m).
struct DqTurn {
  int rank, count;
};
__device__ __forceinline__ DqTurn dq_turn(int n, int m, int n_blocks, int m_tiles, int groups, bool causal) {
  const int my_step = (m - n * groups + m_tiles) % m_tiles;
  DqTurn turn{0, 0};
  for (int other = 0; other < n_blocks; ++other) {
    if (causal && other * groups > m) break;
    ++turn.count;
    turn.rank += (m - other * groups + m_tiles) % m_tiles < my_step;
  }
  return turn;
}

__device__ __forceinline__ int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Each warpgroup owns 64 keys of the block's 64*kGroups and sums their dk, dv over all query tiles; per
// query tile the block also forms dq's partial ds·k over its keys and adds it to the fp32 sum of that tile
// in global memory when its turn comes (dq_sem counts the contributions made), the last one writing bf16.
// Blocks wait only on blocks of the same (b, h) that reach the tile earlier; this relies on blocks being
// dispatched in index order (as FlashAttention-3's deterministic mode does), so a waited-on block is
// resident or will be once earlier (b, h) groups finish.
template <int kHeadDim, int kGroups>
__global__ void __launch_bounds__(kGroups * 128)
    flash_attention_backward_wgmma(bf16* __restrict__ dqkv,        // (B, T, 3*D)
                                   float* __restrict__ dq_acc,     // (B, H, T, hd) fp32 partial sums
                                   int* __restrict__ dq_sem,       // (B*H, m_tiles), zero at launch
                                   const bf16* __restrict__ dout,  // (B, T, D)
                                   const bf16* __restrict__ qkv,   // (B, T, 3*D)
                                   const float* __restrict__ lse,  // (B, H, T)
                                   const float* __restrict__ dsum, // (B, H, T)
                                   int T, int D, int H, float scale, float scale_log2, bool causal) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();
#else
  constexpr int kBlockN = 64 * kGroups, kThreads = 128 * kGroups, kColBlocks = kHeadDim / 64;
  constexpr int kDqBlocks = (kColBlocks + kGroups - 1) / kGroups;  // dq column blocks per warpgroup
  constexpr int kTileBytes = kTile * kHeadDim * 2;
  extern __shared__ unsigned char smem[];
  const uint32_t k_s = (smem_addr(smem) + 1023) & ~1023u;  // (kBlockN, hd) swizzled
  const uint32_t v_s = k_s + kBlockN * kHeadDim * 2;       // (kBlockN, hd)
  const uint32_t q_s = v_s + kBlockN * kHeadDim * 2;       // 2 x (kTile, hd)
  const uint32_t do_s = q_s + 2 * kTileBytes;              // 2 x (kTile, hd)
  const uint32_t ds_s = do_s + 2 * kTileBytes;             // dsᵀ (kBlockN, kTile) bf16, swizzled
  unsigned char* ds_p = smem + (ds_s - smem_addr(smem));
  float* lse_s = reinterpret_cast<float*>(ds_p + kBlockN * kTile * 2);  // (2, kTile)
  float* dsum_s = lse_s + 2 * kTile;                                   // (2, kTile)

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int group = warp / 4;
  const int bh = blockIdx.y, b = bh / H, h = bh % H;
  const int n0 = blockIdx.x * kBlockN;
  const int ld = 3 * D;
  const bf16* q_g = qkv + static_cast<int64_t>(b) * T * ld + h * kHeadDim;
  const bf16* k_g = q_g + D;
  const bf16* v_g = q_g + 2 * D;
  const bf16* do_g = dout + static_cast<int64_t>(b) * T * D + h * kHeadDim;
  const float* lse_g = lse + static_cast<int64_t>(bh) * T;
  const float* dsum_g = dsum + static_cast<int64_t>(bh) * T;
  const int m_tiles = (T + kTile - 1) / kTile;
  const int m_first = blockIdx.x * kGroups;  // = n0 / kTile: the first tile with an unmasked pair
  const int steps = causal ? m_tiles - m_first : m_tiles;
  int* sem = dq_sem + static_cast<int64_t>(bh) * m_tiles;

  auto load_query_tile = [&](int m, int buf) {  // q, dout, lse, dsum of query tile m
    wgmma::load_swizzled_tile_async<kTile, kHeadDim, kThreads>(q_s + buf * kTileBytes, q_g, ld, m * kTile, T, tid);
    wgmma::load_swizzled_tile_async<kTile, kHeadDim, kThreads>(do_s + buf * kTileBytes, do_g, D, m * kTile, T, tid);
    load_row_stats_async<kTile, kThreads>(lse_s + buf * kTile, lse_g, m * kTile, T, tid);
    load_row_stats_async<kTile, kThreads>(dsum_s + buf * kTile, dsum_g, m * kTile, T, tid);
  };
  // cp.async groups: {k, v, query tile m_first}, then one per query tile, issued a tile ahead.
  wgmma::load_swizzled_tile_async<kBlockN, kHeadDim, kThreads>(k_s, k_g, ld, n0, T, tid);
  wgmma::load_swizzled_tile_async<kBlockN, kHeadDim, kThreads>(v_s, v_g, ld, n0, T, tid);
  load_query_tile(m_first, 0);
  cp_async_commit();

  float dk[kColBlocks][8][4] = {}, dv[kColBlocks][8][4] = {};
  const int key_base = n0 + warp * 16 + g;  // this lane's keys: key_base and key_base + 8
  const int group_key0 = n0 + group * 64;

  for (int i = 0; i < steps; ++i) {
    const int m = (m_first + i) % m_tiles, buf = i & 1, m0 = m * kTile;
    cp_async_wait<0>();  // query tile m; every warp is done with the buffer the next load overwrites
    wgmma::fence_async_proxy();
    __syncthreads();
    // Every thread fenced its dq writes of the previous tile before the barrier: publish them.
    if (i > 0 && tid == 0) atomicAdd(sem + (m_first + i - 1) % m_tiles, 1);
    if (i + 1 < steps) load_query_tile((m_first + i + 1) % m_tiles, buf ^ 1);
    cp_async_commit();
    const uint32_t q_t = q_s + buf * kTileBytes, do_t = do_s + buf * kTileBytes;
    const float* lse_t = lse_s + buf * kTile;
    const float* dsum_t = dsum_s + buf * kTile;

    // sᵀ (64 keys, kTile queries) = k · qᵀ and dpᵀ = v · doutᵀ, issued together; pᵀ = exp(sᵀ - lse_query)
    // (0 where masked) is computed while dpᵀ runs.
    float st[8][4], dpt[8][4];
    product_over_head_dim<kHeadDim, kBlockN, kTile>(st, k_s, group * 64, q_t);
    product_over_head_dim<kHeadDim, kBlockN, kTile>(dpt, v_s, group * 64, do_t);
    wgmma::wait<1>();
    wgmma::fence_accumulators(st);
    const bool need_mask = m0 + kTile > T || (causal && group_key0 + 63 > m0);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const float2 l = *reinterpret_cast<const float2*>(lse_t + nt * 8 + 2 * t);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = exp2_approx(st[nt][e] * scale_log2 - ((e & 1) ? l.y : l.x) * kLog2e);
        const int key = key_base + 8 * (e >> 1), query = m0 + nt * 8 + 2 * t + (e & 1);
        st[nt][e] = need_mask && (query >= T || (causal && key > query)) ? 0.f : p;
      }
    }
    wgmma::wait<0>();
    wgmma::fence_accumulators(dpt);

    // dsᵀ = pᵀ ∘ (dpᵀ - dsum_query) in place of dpᵀ, also stored as bf16 for dq's product (keys of rows
    // past T give non-zero ds but meet zero-filled k rows there).
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const float2 d = *reinterpret_cast<const float2*>(dsum_t + nt * 8 + 2 * t);
#pragma unroll
      for (int e = 0; e < 4; ++e) dpt[nt][e] = st[nt][e] * (dpt[nt][e] - ((e & 1) ? d.y : d.x));
#pragma unroll
      for (int r = 0; r < 2; ++r) {  // row warp*16 + g + 8r of the swizzled tile, columns nt*8 + 2t, +1
        const int row = warp * 16 + g + 8 * r;
        *reinterpret_cast<__nv_bfloat162*>(ds_p + row * 128 + ((nt ^ g) * 16) + 4 * t) =
            __floats2bfloat162_rn(dpt[nt][2 * r], dpt[nt][2 * r + 1]);
      }
    }
    wgmma::fence_async_proxy();
    // dv += pᵀ · dout and dk += dsᵀ · q, then (once every warpgroup's dsᵀ is in shared memory)
    // dq_part (kTile, this warpgroup's 64-column blocks) = ds · k over the block's keys.
    product_over_tile<kHeadDim>(dv, st, do_t);
    product_over_tile<kHeadDim>(dk, dpt, q_t);
    __syncthreads();
    float dq[kDqBlocks][8][4];
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
      for (int j = 0; j < kDqBlocks; ++j)
        if (group + j * kGroups < kColBlocks)
          wgmma::wgmma_m64n64k16_ss_mn(dq[j], wgmma::desc_mn_major<kBlockN>(ds_s, kk, 0),
                                       wgmma::desc_mn_major<kBlockN>(k_s, kk, group + j * kGroups), kk > 0);
    wgmma::commit();
    wgmma::wait<0>();
#pragma unroll
    for (int cb = 0; cb < kColBlocks; ++cb) {
      wgmma::fence_accumulators(dv[cb]);
      wgmma::fence_accumulators(dk[cb]);
    }
#pragma unroll
    for (int j = 0; j < kDqBlocks; ++j) wgmma::fence_accumulators(dq[j]);

    // Add dq_part to tile m's sum when this block's turn comes: the first stores, the last reads the
    // sum of the others and writes bf16, the ones between add.
    const DqTurn turn = dq_turn(blockIdx.x, m, gridDim.x, m_tiles, kGroups, causal);
    if (lane == 0)
      while (load_acquire(sem + m) < turn.rank) {
      }
    __syncwarp();
#pragma unroll
    for (int j = 0; j < kDqBlocks; ++j) {
      const int cb = group + j * kGroups;
      if (cb >= kColBlocks) continue;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int query = m0 + (warp % 4) * 16 + g + 8 * r;
        if (query >= T) continue;
        float* acc = dq_acc + (static_cast<int64_t>(bh) * T + query) * kHeadDim + cb * 64 + 2 * t;
        bf16* dst = dqkv + (static_cast<int64_t>(b) * T + query) * ld + h * kHeadDim + cb * 64 + 2 * t;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          float2 v = make_float2(dq[j][nt][2 * r], dq[j][nt][2 * r + 1]);
          if (turn.rank + 1 == turn.count) {
            if (turn.rank > 0) {
              const float2 sum = __ldcg(reinterpret_cast<const float2*>(acc + nt * 8));
              v.x += sum.x;
              v.y += sum.y;
            }
            *reinterpret_cast<__nv_bfloat162*>(dst + nt * 8) = __floats2bfloat162_rn(v.x * scale, v.y * scale);
          } else if (turn.rank == 0) {
            __stcg(reinterpret_cast<float2*>(acc + nt * 8), v);
          } else {
            atomicAdd(reinterpret_cast<float2*>(acc + nt * 8), v);
          }
        }
      }
    }
    __threadfence();
  }
  __syncthreads();
  if (tid == 0 && steps > 0) atomicAdd(sem + (m_first + steps - 1) % m_tiles, 1);

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key_base + 8 * r;
    if (key >= T) continue;
    bf16* dst = dqkv + (static_cast<int64_t>(b) * T + key) * ld + D + h * kHeadDim + 2 * t;
#pragma unroll
    for (int cb = 0; cb < kColBlocks; ++cb)
#pragma unroll
      for (int dt = 0; dt < 8; ++dt) {
        *reinterpret_cast<__nv_bfloat162*>(dst + cb * 64 + dt * 8) =
            __floats2bfloat162_rn(dk[cb][dt][2 * r] * scale, dk[cb][dt][2 * r + 1] * scale);
        *reinterpret_cast<__nv_bfloat162*>(dst + D + cb * 64 + dt * 8) =
            __floats2bfloat162_rn(dv[cb][dt][2 * r], dv[cb][dt][2 * r + 1]);
      }
  }
#endif
}

template <int kHeadDim, int kGroups>
void launch_backward_wgmma(bf16* dqkv, float* dq_acc, int* dq_sem, const bf16* dout, const bf16* qkv, const float* lse,
                           const float* dsum, int B, int T, int D, int H, bool causal, cudaStream_t stream) {
  constexpr int kBlockN = 64 * kGroups;
  constexpr int smem = (2 * kBlockN + 4 * kTile) * kHeadDim * static_cast<int>(sizeof(bf16)) +
                       kBlockN * kTile * static_cast<int>(sizeof(bf16)) +
                       4 * kTile * static_cast<int>(sizeof(float)) + 1024;  // + alignment
  auto kernel = flash_attention_backward_wgmma<kHeadDim, kGroups>;
  PYLON_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid((T + kBlockN - 1) / kBlockN, B * H);
  const float scale = 1.f / std::sqrt(static_cast<float>(kHeadDim));
  kernel<<<grid, kGroups * 128, smem, stream>>>(dqkv, dq_acc, dq_sem, dout, qkv, lse, dsum, T, D, H, scale,
                                                scale * kLog2e, causal);
  PYLON_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool launch_attention_backward_wgmma(const detail::AttentionTiles& tiles, int head_dim, bf16* dqkv, float* dq_acc,
                                     int* dq_sem, const bf16* dout, const bf16* qkv, const float* lse,
                                     const float* dsum, int B, int T, int D, int H, bool causal,
                                     cudaStream_t stream) {
  if (tiles.dkdv_block_m != kTile) return false;
#define PYLON_BWD_CASE(HD, WARPS)                                                                          \
  if (head_dim == HD && tiles.dkdv_warps == WARPS) {                                                       \
    launch_backward_wgmma<HD, WARPS / 4>(dqkv, dq_acc, dq_sem, dout, qkv, lse, dsum, B, T, D, H, causal, stream); \
    return true;                                                                                           \
  }
  PYLON_BWD_CASE(64, 4)
  PYLON_BWD_CASE(64, 8)
  PYLON_BWD_CASE(128, 4)
  PYLON_BWD_CASE(128, 8)
#undef PYLON_BWD_CASE
  return false;
}

}  // namespace pylon::cuda

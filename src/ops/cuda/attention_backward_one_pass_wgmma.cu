// Flash-attention backward on Hopper in one pass, 5 products per (key block, query tile) instead of the
// two-pass scheme's 7: the key-block kernel of attention_backward_wgmma.cu (each warpgroup owns 64 keys
// and sums their dk, dv) also forms dq's partial over its keys, dq_part (64 queries, hd) = ds · k, once
// dk and dv have retired (to stay under 255 registers), each warpgroup a share of its 64-column blocks.
// The partial is staged in shared memory as fp32 and added to an fp32 sum (B, H, T, hd) in global memory
// by the copy engine (cp.reduce.async.bulk, one 4·hd-byte row per issuing thread), under the next tile's
// products. A second kernel writes the sum, scaled, as bf16 into dqkv's q third.
//
// Order of the adds. Unordered: as the copy engine performs them (dq's last bits vary between runs).
// Ordered (deterministic): the key blocks of one (b, h) start on different query tiles and walk them
// cyclically (causal: upwards from the first tile they see), and each tile's partials are added in the
// order in which the blocks reach it in that walk, (step, block) ascending. A per-tile counter of
// completed adds gives each block its turn; an add is released one tile later, when it has long
// completed. No wait cycle exists: a block only waits on one whose current step is smaller. It relies on
// blocks being dispatched in index order (the key blocks of one (b, h) are adjacent), so that a block
// waited on is resident or becomes so when earlier (b, h) finish.
#include <cmath>

#include "ops/cuda/attention_backward_wgmma.cuh"
#include "ops/cuda/attention_launch.h"
#include "ops/cuda/bulk_copy_sm90.cuh"
#include "ops/cuda/check.h"
#include "ops/cuda/mma_sm80.cuh"
#include "ops/cuda/wgmma_sm90.cuh"

namespace pylon::cuda {
namespace {

using namespace mma;
using namespace attention_bwd;

template <int kHeadDim>
constexpr int kDqStride = kHeadDim + 8;  // floats per staged dq row: 32 spare bytes spread rows over the banks

enum class DqAdd : int { unordered, ordered, unsummed };  // unsummed: stored, dq wrong (timing only)

// How many of the blocks that add into query tile m come before block n in the ordered scheme (above).
__device__ __forceinline__ int dq_turn_rank(int n, int m, int n_blocks, int m_tiles, int tiles_per_block,
                                            bool causal) {
  auto step = [&](int block) { return (m - block * tiles_per_block + m_tiles) % m_tiles; };
  const int mine = step(n);
  int rank = 0;
  for (int other = 0; other < n_blocks; ++other) {
    if (causal && other * tiles_per_block > m) break;  // its walk starts after tile m
    const int s = step(other);
    rank += s < mine || (s == mine && other < n);
  }
  return rank;
}

__device__ __forceinline__ int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// Orders generic-proxy accesses to global memory with the copy engine's (async proxy).
__device__ __forceinline__ void fence_async_proxy_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
// Barrier 1 among the first `threads` threads (whole warps) of the block.
__device__ __forceinline__ void named_barrier_sync(int threads) {
  asm volatile("bar.sync 1, %0;\n" ::"r"(threads) : "memory");
}

template <int kHeadDim, int kGroups>
__global__ void __launch_bounds__(kGroups * 128)
    flash_attention_backward_one_pass_wgmma(bf16* __restrict__ dqkv,        // (B, T, 3*D): k, v thirds
                                            float* __restrict__ dq_acc,     // (B, H, T, hd), zero at launch
                                            int* __restrict__ dq_turns,     // (B*H, ceil(T/64)), zero at launch
                                            const bf16* __restrict__ dout,  // (B, T, D)
                                            const bf16* __restrict__ qkv,   // (B, T, 3*D)
                                            const float* __restrict__ lse,  // (B, H, T)
                                            const float* __restrict__ dsum, // (B, H, T)
                                            int T, int D, int H, float scale, float scale_log2, bool causal,
                                            DqAdd dq_add) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();
#else
  constexpr int kBlockN = 64 * kGroups, kThreads = 128 * kGroups, kColBlocks = kHeadDim / 64;
  static_assert(kColBlocks % kGroups == 0, "each warpgroup forms whole 64-column blocks of dq");
  constexpr int kDqBlocks = kColBlocks / kGroups;  // dq column blocks per warpgroup
  constexpr int kTileBytes = kTile * kHeadDim * 2;
  constexpr int kStride = kDqStride<kHeadDim>;
  extern __shared__ unsigned char smem[];
  const uint32_t smem_base = smem_addr(smem);
  const uint32_t k_s = (smem_base + 1023) & ~1023u;  // (kBlockN, hd) swizzled
  const uint32_t v_s = k_s + kBlockN * kHeadDim * 2;  // (kBlockN, hd)
  const uint32_t q_s = v_s + kBlockN * kHeadDim * 2;  // 2 x (kTile, hd)
  const uint32_t do_s = q_s + 2 * kTileBytes;         // 2 x (kTile, hd)
  const uint32_t ds_s = do_s + 2 * kTileBytes;        // dsᵀ (kBlockN, kTile) bf16, swizzled
  const uint32_t dq_s = ds_s + kBlockN * kTile * 2;   // dq_part (kTile, kStride) fp32
  unsigned char* ds_p = smem + (ds_s - smem_base);
  float* dq_p = reinterpret_cast<float*>(smem + (dq_s - smem_base));
  float* lse_s = dq_p + kTile * kStride;  // (2, kTile)
  float* dsum_s = lse_s + 2 * kTile;      // (2, kTile)

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
  float* dq_acc_g = dq_acc + static_cast<int64_t>(bh) * T * kHeadDim;
  const int m_tiles = (T + kTile - 1) / kTile;
  // Causal: the first tile with an unmasked pair, walking up. Full: the blocks of one (b, h) start on
  // different tiles and walk them cyclically, so that their adds rarely meet on one tile.
  const int m_first = n0 / kTile;
  const int steps = causal ? m_tiles - m_first : m_tiles;

  auto load_query_tile = [&](int m, int buf) {  // q, dout, lse, dsum of query tile m
    wgmma::load_swizzled_tile_async<kTile, kHeadDim, kThreads>(q_s + buf * kTileBytes, q_g, ld, m * kTile, T, tid);
    wgmma::load_swizzled_tile_async<kTile, kHeadDim, kThreads>(do_s + buf * kTileBytes, do_g, D, m * kTile, T, tid);
    load_row_stats_async<kTile, kThreads>(lse_s + buf * kTile, lse_g, m * kTile, T, tid);
    load_row_stats_async<kTile, kThreads>(dsum_s + buf * kTile, dsum_g, m * kTile, T, tid);
  };
  int* turns = dq_turns + static_cast<int64_t>(bh) * m_tiles;  // adds completed into each tile's sum
  int in_flight_m = -1;  // ordered: the tile whose add this block issued and has not yet released
  // Ordered, threads 0..kTile-1: once this block's last add is complete, count it on its tile.
  auto release_add = [&] {
    if (in_flight_m < 0) return;
    bulk::wait_all();
    fence_async_proxy_global();
    named_barrier_sync(kTile);
    if (tid == 0) {
      __threadfence();
      atomicAdd(turns + in_flight_m, 1);
    }
    in_flight_m = -1;
  };
  // Threads 0..kTile-1 hand row tid of the staged partial of tile m to the copy engine (ordered: when
  // this block's turn on m comes). The staging writes were fenced (async proxy) and a barrier passed.
  auto add_staged_dq = [&](int m) {
    if (tid >= kTile) return;
    if (dq_add == DqAdd::ordered) {
      release_add();
      if (tid == 0) {
        const int rank = dq_turn_rank(blockIdx.x, m, gridDim.x, m_tiles, kGroups, causal);
        while (load_acquire(turns + m) < rank) __nanosleep(32);
      }
      named_barrier_sync(kTile);
      fence_async_proxy_global();
      in_flight_m = m;
    }
    const int q = m * kTile + tid;
    if (q >= T) return;
    float* dst = dq_acc_g + static_cast<int64_t>(q) * kHeadDim;
    const uint32_t src = dq_s + tid * kStride * 4;
    if (dq_add == DqAdd::unsummed) bulk::store(dst, src, kHeadDim * 4);
    else bulk::reduce_add_f32(dst, src, kHeadDim * 4);
    bulk::commit();
  };
  // cp.async groups: {k, v, query tile m_first}, then one per query tile, issued a tile ahead.
  wgmma::load_swizzled_tile_async<kBlockN, kHeadDim, kThreads>(k_s, k_g, ld, n0, T, tid);
  wgmma::load_swizzled_tile_async<kBlockN, kHeadDim, kThreads>(v_s, v_g, ld, n0, T, tid);
  load_query_tile(m_first, 0);
  cp_async_commit();

  float dk[kColBlocks][8][4] = {}, dv[kColBlocks][8][4] = {};
  const int key_base = n0 + warp * 16 + g;  // this lane's keys: key_base and key_base + 8
  const int group_key0 = n0 + group * 64;
  int staged_m = -1;  // the query tile whose partial waits in dq_s for its add

  for (int i = 0; i < steps; ++i) {
    const int m = (m_first + i) % m_tiles, buf = i & 1, m0 = m * kTile;
    cp_async_wait<0>();  // query tile m; every warp is done with the buffer the next load overwrites
    wgmma::fence_async_proxy();
    __syncthreads();
    if (i + 1 < steps) load_query_tile((m_first + i + 1) % m_tiles, buf ^ 1);
    cp_async_commit();
    if (staged_m >= 0) add_staged_dq(staged_m);  // runs under this tile's products
    const uint32_t q_t = q_s + buf * kTileBytes, do_t = do_s + buf * kTileBytes;
    const float* lse_t = lse_s + buf * kTile;
    const float* dsum_t = dsum_s + buf * kTile;

    // sᵀ (64 keys, kTile queries) = k · qᵀ and dpᵀ = v · doutᵀ, issued together; pᵀ while dpᵀ runs.
    float st[8][4], dpt[8][4];
    product_over_head_dim<kHeadDim, kBlockN, kTile>(st, k_s, group * 64, q_t);
    product_over_head_dim<kHeadDim, kBlockN, kTile>(dpt, v_s, group * 64, do_t);
    wgmma::wait<1>();
    wgmma::fence_accumulators(st);
    const bool need_mask = m0 + kTile > T || (causal && group_key0 + 63 > m0);
    transposed_probabilities(st, lse_t, key_base, m0, t, T, causal, need_mask, scale_log2);
    wgmma::wait<0>();
    wgmma::fence_accumulators(dpt);

    // dsᵀ in place of dpᵀ, also as bf16 into ds_s (row = key in the block, 128-byte swizzle) for dq's
    // product; keys at or past T give ds that meets the zero-filled k rows there.
    transposed_score_grads(dpt, st, dsum_t, t);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {  // columns nt*8 + 2t, +1 of row warp*16 + g + 8r
        const int row = warp * 16 + g + 8 * r;
        *reinterpret_cast<__nv_bfloat162*>(ds_p + row * 128 + ((nt ^ g) * 16) + 4 * t) =
            __floats2bfloat162_rn(dpt[nt][2 * r], dpt[nt][2 * r + 1]);
      }
    wgmma::fence_async_proxy();

    // dv += pᵀ · dout and dk += dsᵀ · q together, retired before dq's product.
    product_over_tile<kHeadDim>(dv, st, do_t);
    product_over_tile<kHeadDim>(dk, dpt, q_t);
    wgmma::wait<0>();
#pragma unroll
    for (int cb = 0; cb < kColBlocks; ++cb) {
      wgmma::fence_accumulators(dv[cb]);
      wgmma::fence_accumulators(dk[cb]);
    }
    if (tid < kTile) bulk::wait_read();  // the previous partial has left dq_s
    __syncthreads();                     // every warpgroup's dsᵀ is in ds_s

    // dq_part (kTile, 64-column blocks group*kDqBlocks ..) = ds · k over the block's keys: ds read
    // transposed from dsᵀ, k MN-major.
    float dq[kDqBlocks][8][4];
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
      for (int j = 0; j < kDqBlocks; ++j)
        wgmma::wgmma_m64n64k16_ss_mn(dq[j], wgmma::desc_mn_major<kBlockN>(ds_s, kk, 0),
                                     wgmma::desc_mn_major<kBlockN>(k_s, kk, group * kDqBlocks + j), kk > 0);
    wgmma::commit();
    wgmma::wait<0>();
#pragma unroll
    for (int j = 0; j < kDqBlocks; ++j) {
      wgmma::fence_accumulators(dq[j]);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float* row = dq_p + ((warp % 4) * 16 + g + 8 * r) * kStride + (group * kDqBlocks + j) * 64 + 2 * t;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
          *reinterpret_cast<float2*>(row + nt * 8) = make_float2(dq[j][nt][2 * r], dq[j][nt][2 * r + 1]);
      }
    }
    wgmma::fence_async_proxy();  // the copy engine reads dq_s after the next barrier
    staged_m = m;
  }
  __syncthreads();
  if (staged_m >= 0) add_staged_dq(staged_m);
  if (tid < kTile) {
    release_add();
    bulk::wait_all();  // dq_s stays valid until read; the adds are complete at exit
  }

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

// dqkv's q third (B, T, D) = scale · dq_acc (B, H, T, hd), 8 elements a thread.
template <int kHeadDim>
__global__ void attention_dq_sum_to_bf16(bf16* __restrict__ dqkv, const float* __restrict__ dq_acc, int T, int D,
                                         int H, float scale, int64_t chunks) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= chunks) return;
  const int64_t e = i * 8, row = e / kHeadDim;  // row = (b*H + h)*T + t
  const int c = static_cast<int>(e % kHeadDim), tt = static_cast<int>(row % T);
  const int64_t bh = row / T, b = bh / H;
  const int h = static_cast<int>(bh % H);
  const float4 lo = *reinterpret_cast<const float4*>(dq_acc + e);
  const float4 hi = *reinterpret_cast<const float4*>(dq_acc + e + 4);
  const uint4 packed = {pack_bf16(lo.x * scale, lo.y * scale), pack_bf16(lo.z * scale, lo.w * scale),
                        pack_bf16(hi.x * scale, hi.y * scale), pack_bf16(hi.z * scale, hi.w * scale)};
  *reinterpret_cast<uint4*>(dqkv + (b * T + tt) * 3 * D + h * kHeadDim + c) = packed;
}

template <int kHeadDim, int kGroups>
void launch_one_pass(bf16* dqkv, float* dq_acc, int* dq_turns, const bf16* dout, const bf16* qkv, const float* lse,
                     const float* dsum, int B, int T, int D, int H, bool causal, DqAdd dq_add,
                     cudaStream_t stream) {
  constexpr int kBlockN = 64 * kGroups;
  constexpr int smem = (2 * kBlockN + 4 * kTile) * kHeadDim * static_cast<int>(sizeof(bf16)) +
                       kBlockN * kTile * static_cast<int>(sizeof(bf16)) +
                       kTile * kDqStride<kHeadDim> * static_cast<int>(sizeof(float)) +
                       4 * kTile * static_cast<int>(sizeof(float)) + 1024;  // + alignment
  const int64_t dq_elems = static_cast<int64_t>(B) * H * T * kHeadDim;
  PYLON_CUDA_CHECK(cudaMemsetAsync(dq_acc, 0, dq_elems * sizeof(float), stream));
  const size_t turn_bytes = static_cast<size_t>(B) * H * ((T + kTile - 1) / kTile) * sizeof(int);
  PYLON_CUDA_CHECK(cudaMemsetAsync(dq_turns, 0, turn_bytes, stream));
  auto kernel = flash_attention_backward_one_pass_wgmma<kHeadDim, kGroups>;
  PYLON_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid((T + kBlockN - 1) / kBlockN, B * H);
  const float scale = 1.f / std::sqrt(static_cast<float>(kHeadDim));
  kernel<<<grid, kGroups * 128, smem, stream>>>(dqkv, dq_acc, dq_turns, dout, qkv, lse, dsum, T, D, H, scale,
                                                 scale * kLog2e, causal, dq_add);
  PYLON_CUDA_CHECK_LAUNCH();
  const int64_t chunks = dq_elems / 8;
  const int block = 256;
  attention_dq_sum_to_bf16<kHeadDim><<<static_cast<unsigned>((chunks + block - 1) / block), block, 0, stream>>>(
      dqkv, dq_acc, T, D, H, scale, chunks);
  PYLON_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool launch_attention_backward_one_pass_wgmma(const detail::AttentionTiles& tiles, int head_dim, bf16* dqkv,
                                              float* dq_acc, int* dq_turns, const bf16* dout, const bf16* qkv,
                                              const float* lse, const float* dsum, int B, int T, int D, int H,
                                              bool causal, cudaStream_t stream) {
  using detail::DqScheme;
  if (tiles.dkdv_block_m != kTile || tiles.dq_scheme == DqScheme::second_pass) return false;
  const DqAdd add = tiles.dq_scheme == DqScheme::one_pass_ordered_add ? DqAdd::ordered
                    : tiles.dq_scheme == DqScheme::one_pass_bulk_add  ? DqAdd::unordered
                                                                       : DqAdd::unsummed;
#define PYLON_ONE_PASS_CASE(HD, WARPS)                                                                        \
  if (head_dim == HD && tiles.dkdv_warps == WARPS) {                                                          \
    launch_one_pass<HD, WARPS / 4>(dqkv, dq_acc, dq_turns, dout, qkv, lse, dsum, B, T, D, H, causal, add, stream); \
    return true;                                                                                              \
  }
  PYLON_ONE_PASS_CASE(64, 4)
  PYLON_ONE_PASS_CASE(128, 4)
  PYLON_ONE_PASS_CASE(128, 8)
#undef PYLON_ONE_PASS_CASE
  return false;
}

}  // namespace pylon::cuda

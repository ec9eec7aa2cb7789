// Flash-attention forward on Hopper warpgroup MMA (wgmma): each warpgroup owns 64 query rows;
// s = q·kᵀ reads q and k from swizzled shared memory, o += p·v takes p from registers. Keys and values
// stream through double-buffered cp.async tiles loaded a tile ahead; the softmax of tile j+1 runs while
// the tensor cores do p_j·v_j (FlashAttention-3's intra-warpgroup overlap, without its producer warps).
#include <cmath>

#include "ops/cuda/attention_launch.h"
#include "ops/cuda/check.h"
#include "ops/cuda/flash_softmax.cuh"
#include "ops/cuda/mma_sm80.cuh"
#include "ops/cuda/wgmma_sm90.cuh"

namespace pylon::cuda {
namespace {

using namespace mma;

template <int kHeadDim, int kGroups, int kBlockN>
__global__ void __launch_bounds__(kGroups * 128)
    flash_attention_forward_wgmma(bf16* __restrict__ out,        // (B, T, D)
                                  float* __restrict__ lse,       // (B, H, T)
                                  const bf16* __restrict__ qkv,  // (B, T, 3*D)
                                  int T, int D, int H, float scale_log2, bool causal) {
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
  const int bh = blockIdx.y, b = bh / H, h = bh % H;
  const int q0 = m_block * kBlockM;
  const int ld = 3 * D;
  const bf16* q_g = qkv + static_cast<int64_t>(b) * T * ld + h * kHeadDim;
  const bf16* k_g = q_g + D;
  const bf16* v_g = q_g + 2 * D;
  const int kv_end = causal ? min(T, q0 + kBlockM) : T;
  const int n_tiles = (kv_end + kBlockN - 1) / kBlockN;

  const int row_base = q0 + warp * 16 + g;  // this lane's rows: row_base and row_base + 8
  const int group_row0 = q0 + group * 64;
  float o[kColBlocks][8][4] = {};              // unnormalised output, 64 columns per block
  float row_max[2] = {-INFINITY, -INFINITY};  // running max of raw scores, rows row_base and row_base + 8
  float row_sum[2] = {0.f, 0.f};              // this lane's share of Σ exp
  float s[kTilesN][4];                        // scores, then p, of the next tile
  uint32_t p_frag[kBlockN / 16][4];           // p of the current tile as bf16 A operands

  auto k_tile = [&](int j) { return k_s + (j & 1) * kTileBytesN; };
  auto v_tile = [&](int j) { return v_s + (j & 1) * kTileBytesN; };
  auto load_k = [&](int j) {
    wgmma::load_swizzled_tile_async<kBlockN, kHeadDim, kThreads>(k_tile(j), k_g, ld, j * kBlockN, T, tid);
  };
  auto load_v = [&](int j) {
    wgmma::load_swizzled_tile_async<kBlockN, kHeadDim, kThreads>(v_tile(j), v_g, ld, j * kBlockN, T, tid);
  };
  // s (64, kBlockN) = q · k_jᵀ for this warpgroup's rows, issued asynchronously.
  auto issue_scores = [&](float (&acc)[kTilesN][4], int j) {
    wgmma::fence();
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
      const uint64_t da = wgmma::desc_k_major<kBlockM>(q_s, group * 64, ks);
      const uint64_t db = wgmma::desc_k_major<kBlockN>(k_tile(j), 0, ks);
      if constexpr (kBlockN == 64) wgmma::wgmma_m64n64k16_ss(acc, da, db, ks > 0);
      else wgmma::wgmma_m64n128k16_ss(acc, da, db, ks > 0);
    }
    wgmma::commit();
  };
  auto softmax_tile = [&](float (&acc)[kTilesN][4], int j, float (&alpha)[2]) {
    const int k0 = j * kBlockN;
    if (k0 + kBlockN > T || (causal && k0 + kBlockN - 1 > group_row0))  // tail keys or the diagonal
      flash::mask_scores(acc, row_base, k0, t, T, causal);
    flash::online_softmax(acc, row_max, row_sum, alpha, scale_log2);
  };

  // cp.async groups: {q, k_0}, then one group {k_{j+1}, v_j} per tile, issued a tile ahead of its use.
  wgmma::load_swizzled_tile_async<kBlockM, kHeadDim, kThreads>(q_s, q_g, ld, q0, T, tid);
  load_k(0);
  cp_async_commit();
  if (n_tiles > 1) load_k(1);
  load_v(0);
  cp_async_commit();

  cp_async_wait<1>();  // q and k_0
  wgmma::fence_async_proxy();
  __syncthreads();
  {
    float alpha[2];
    issue_scores(s, 0);
    wgmma::wait<0>();
    wgmma::fence_accumulators(s);
    softmax_tile(s, 0, alpha);  // nothing accumulated yet: alpha unused
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) accum_to_a(p_frag[kk], s[2 * kk], s[2 * kk + 1]);
  }

  // Tile j: the tensor cores run s_{j+1} = q·k_{j+1}ᵀ, then o += p_j·v_j, while this warpgroup turns
  // s_{j+1} into p_{j+1} (softmax overlaps the second product).
  for (int j = 0; j < n_tiles; ++j) {
    const bool has_next = j + 1 < n_tiles;
    cp_async_wait<0>();  // k_{j+1} and v_j; every warp is done with the buffers the next loads overwrite
    wgmma::fence_async_proxy();
    __syncthreads();
    if (j + 2 < n_tiles) load_k(j + 2);  // into k_j's buffer (s_j finished last iteration)
    if (has_next) load_v(j + 1);         // into v_{j-1}'s buffer (o += p_{j-1}·v_{j-1} finished)
    cp_async_commit();

    if (has_next) issue_scores(s, j + 1);
#pragma unroll
    for (int cb = 0; cb < kColBlocks; ++cb) wgmma::fence_accumulators(o[cb]);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
      for (int cb = 0; cb < kColBlocks; ++cb)
        wgmma::wgmma_m64n64k16_rs_mn(o[cb], p_frag[kk], wgmma::desc_mn_major<kBlockN>(v_tile(j), kk, cb));
    wgmma::commit();

    float alpha[2] = {1.f, 1.f};
    if (has_next) {
      wgmma::wait<1>();  // s_{j+1}; o += p_j·v_j may still run
      wgmma::fence_accumulators(s);
      softmax_tile(s, j + 1, alpha);
    }
    wgmma::wait<0>();
#pragma unroll
    for (int cb = 0; cb < kColBlocks; ++cb) wgmma::fence_accumulators(o[cb]);
    if (has_next) {
#pragma unroll
      for (int cb = 0; cb < kColBlocks; ++cb)
#pragma unroll
        for (int dt = 0; dt < 8; ++dt) {
          o[cb][dt][0] *= alpha[0];
          o[cb][dt][1] *= alpha[0];
          o[cb][dt][2] *= alpha[1];
          o[cb][dt][3] *= alpha[1];
        }
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) accum_to_a(p_frag[kk], s[2 * kk], s[2 * kk + 1]);
    }
  }

  const float scale = scale_log2 * (1.0f / 1.4426950408889634f);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = row_sum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int row = row_base + 8 * r;
    if (row >= T) continue;
    const float inv = 1.f / sum;
    bf16* dst = out + (static_cast<int64_t>(b) * T + row) * D + h * kHeadDim + 2 * t;
#pragma unroll
    for (int cb = 0; cb < kColBlocks; ++cb)
#pragma unroll
      for (int dt = 0; dt < 8; ++dt)
        *reinterpret_cast<__nv_bfloat162*>(dst + cb * 64 + dt * 8) =
            __floats2bfloat162_rn(o[cb][dt][2 * r] * inv, o[cb][dt][2 * r + 1] * inv);
    if (t == 0) lse[static_cast<int64_t>(bh) * T + row] = row_max[r] * scale + logf(sum);
  }
#endif
}

template <int kHeadDim, int kGroups, int kBlockN>
void launch_forward_wgmma(bf16* out, float* lse, const bf16* qkv, int B, int T, int D, int H, bool causal,
                          cudaStream_t stream) {
  constexpr int kBlockM = 64 * kGroups;
  constexpr int smem = (kBlockM + 4 * kBlockN) * kHeadDim * static_cast<int>(sizeof(bf16)) + 1024;  // + alignment
  auto kernel = flash_attention_forward_wgmma<kHeadDim, kGroups, kBlockN>;
  PYLON_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid((T + kBlockM - 1) / kBlockM, B * H);
  const float scale_log2 = 1.4426950408889634f / std::sqrt(static_cast<float>(kHeadDim));
  kernel<<<grid, kGroups * 128, smem, stream>>>(out, lse, qkv, T, D, H, scale_log2, causal);
  PYLON_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool launch_attention_forward_wgmma(const detail::AttentionTiles& tiles, int head_dim, bf16* out, float* lse,
                                    const bf16* qkv, int B, int T, int D, int H, bool causal, cudaStream_t stream) {
#define PYLON_FORWARD_CASE(HD, WARPS, BN)                                                       \
  if (head_dim == HD && tiles.fwd_warps == WARPS && tiles.fwd_block_n == BN) {                  \
    launch_forward_wgmma<HD, WARPS / 4, BN>(out, lse, qkv, B, T, D, H, causal, stream);         \
    return true;                                                                                \
  }
  PYLON_FORWARD_CASE(64, 4, 64)
  PYLON_FORWARD_CASE(64, 4, 128)
  PYLON_FORWARD_CASE(64, 8, 64)
  PYLON_FORWARD_CASE(64, 8, 128)
  PYLON_FORWARD_CASE(128, 4, 64)
  PYLON_FORWARD_CASE(128, 4, 128)
  PYLON_FORWARD_CASE(128, 8, 64)
  PYLON_FORWARD_CASE(128, 8, 128)
#undef PYLON_FORWARD_CASE
  return false;
}

}  // namespace pylon::cuda

// Flash-attention forward on tensor cores (FlashAttention-2 scheme with mma.sync): one block per
// (query tile, batch*head), keys and values streamed through double-buffered shared memory, online
// softmax in registers, fp32 accumulation, per-row logsumexp saved for the backward pass.
#include <cmath>

#include "ops/cuda/attention_launch.h"
#include "ops/cuda/attention_tiles.h"
#include "ops/cuda/check.h"
#include "ops/cuda/flash_softmax.cuh"
#include "ops/cuda/mma_sm80.cuh"

namespace pylon::cuda {
namespace {

using namespace mma;

// Each warp owns 16 query rows; the block walks the key tiles [0, kv_end) of its (batch, query head),
// reading the key/value head h / group.
template <int kHeadDim, int kWarps, int kBlockN>
__global__ void __launch_bounds__(kWarps * 32)
    flash_attention_forward_mma(bf16* __restrict__ out,          // (B, T, q_dim)
                                float* __restrict__ lse,         // (B, heads, T)
                                const bf16* __restrict__ qkv,    // (B, T, ld)
                                int T, QkvLayout L, float scale_log2, bool causal) {
  constexpr int kBlockM = 16 * kWarps, kThreads = 32 * kWarps, kStride = kHeadDim + 8;
  constexpr int kSteps = kHeadDim / 16;  // k-steps of q·kᵀ
  constexpr int kTilesN = kBlockN / 8;   // 8-key column tiles of the scores
  constexpr int kTilesD = kHeadDim / 8;  // 8-wide column tiles of the output
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* q_s = reinterpret_cast<bf16*>(smem);  // (kBlockM, kStride)
  bf16* k_s = q_s + kBlockM * kStride;        // (2, kBlockN, kStride)
  bf16* v_s = k_s + 2 * kBlockN * kStride;    // (2, kBlockN, kStride)

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
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

  load_tile_async<kBlockM, kHeadDim, kThreads>(q_s, q_g, ld, q0, T, tid);
  load_tile_async<kBlockN, kHeadDim, kThreads>(k_s, k_g, ld, 0, T, tid);
  cp_async_commit();
  load_tile_async<kBlockN, kHeadDim, kThreads>(v_s, v_g, ld, 0, T, tid);
  cp_async_commit();
  cp_async_wait<1>();  // q and the first k tile
  __syncthreads();

  uint32_t q_frag[kSteps][4];  // the warp's 16 rows of q as A operands, kept for every key tile
#pragma unroll
  for (int ks = 0; ks < kSteps; ++ks) ldmatrix_x4(q_frag[ks], ldsm_addr_rows(q_s + warp * 16 * kStride, kStride, ks * 16, lane));

  float o[kTilesD][4] = {};                          // unnormalised output rows g and g+8
  float row_max[2] = {-INFINITY, -INFINITY};         // running max of raw scores, rows g and g+8
  float row_sum[2] = {0.f, 0.f};                     // this lane's share of Σ exp, rows g and g+8
  const int row_base = q0 + warp * 16 + g;

  for (int j = 0; j < n_tiles; ++j) {
    const int buf = j & 1, k0 = j * kBlockN;
    const bool has_next = j + 1 < n_tiles;
    if (j > 0) {
      cp_async_wait<1>();  // k tile j has landed; v tile j may still be in flight
      __syncthreads();
    }
    if (has_next) {
      load_tile_async<kBlockN, kHeadDim, kThreads>(k_s + (buf ^ 1) * kBlockN * kStride, k_g, ld, k0 + kBlockN, T, tid);
      cp_async_commit();
    }

    // s (16, kBlockN) = q · kᵀ for this warp's rows.
    const bf16* kt = k_s + buf * kBlockN * kStride;
    float s[kTilesN][4] = {};
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
#pragma unroll
      for (int np = 0; np < kTilesN / 2; ++np) {
        uint32_t kf[4];
        ldmatrix_x4(kf, ldsm_addr_cols(kt + np * 16 * kStride, kStride, ks * 16, lane));
        mma_bf16_16816(s[2 * np], q_frag[ks], kf[0], kf[1]);
        mma_bf16_16816(s[2 * np + 1], q_frag[ks], kf[2], kf[3]);
      }
    }

    if (k0 + kBlockN > T || (causal && k0 + kBlockN - 1 > q0))  // tail keys or the diagonal
      flash::mask_scores(s, row_base, k0, t, T, causal);

    // Online softmax: p = exp(s - max), and what was accumulated shrinks to the new max.
    float alpha[2];
    flash::online_softmax(s, row_max, row_sum, alpha, scale_log2);
#pragma unroll
    for (int dt = 0; dt < kTilesD; ++dt) {
      o[dt][0] *= alpha[0];
      o[dt][1] *= alpha[0];
      o[dt][2] *= alpha[1];
      o[dt][3] *= alpha[1];
    }

    if (has_next) cp_async_wait<1>();
    else cp_async_wait<0>();
    __syncthreads();  // v tile j has landed
    if (has_next) {
      load_tile_async<kBlockN, kHeadDim, kThreads>(v_s + (buf ^ 1) * kBlockN * kStride, v_g, ld, k0 + kBlockN, T, tid);
      cp_async_commit();
    }

    // o (16, hd) += p (16, kBlockN) · v (kBlockN, hd); p goes from accumulators to A operands in bf16.
    const bf16* vt = v_s + buf * kBlockN * kStride;
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      uint32_t p_frag[4];
      accum_to_a(p_frag, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
      for (int dp = 0; dp < kTilesD / 2; ++dp) {
        uint32_t vf[4];
        ldmatrix_x4_trans(vf, ldsm_addr_rows(vt + kk * 16 * kStride, kStride, dp * 16, lane));
        mma_bf16_16816(o[2 * dp], p_frag, vf[0], vf[1]);
        mma_bf16_16816(o[2 * dp + 1], p_frag, vf[2], vf[3]);
      }
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
    bf16* dst = out + (static_cast<int64_t>(b) * T + row) * L.q_dim + L.q_col(h) + 2 * t;
#pragma unroll
    for (int dt = 0; dt < kTilesD; ++dt)
      *reinterpret_cast<__nv_bfloat162*>(dst + dt * 8) = __floats2bfloat162_rn(o[dt][2 * r] * inv, o[dt][2 * r + 1] * inv);
    if (t == 0) lse[static_cast<int64_t>(bh) * T + row] = row_max[r] * scale + logf(sum);
  }
}

template <int kHeadDim, int kWarps, int kBlockN>
void launch_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, const QkvLayout& L, bool causal,
                    cudaStream_t stream) {
  constexpr int kBlockM = 16 * kWarps;
  constexpr int smem = (kBlockM + 4 * kBlockN) * (kHeadDim + 8) * static_cast<int>(sizeof(bf16));
  auto kernel = flash_attention_forward_mma<kHeadDim, kWarps, kBlockN>;
  PYLON_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid((T + kBlockM - 1) / kBlockM, B * L.heads);
  const float scale_log2 = 1.4426950408889634f / std::sqrt(static_cast<float>(kHeadDim));
  kernel<<<grid, kWarps * 32, smem, stream>>>(out, lse, qkv, T, L, scale_log2, causal);
  PYLON_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool launch_attention_forward(const detail::AttentionTiles& tiles, bf16* out, float* lse, const bf16* qkv, int B,
                              int T, const QkvLayout& L, bool causal, cudaStream_t stream) {
#define PYLON_FORWARD_CASE(HD, WARPS, BN)                                         \
  if (L.head_dim == HD && tiles.fwd_warps == WARPS && tiles.fwd_block_n == BN) {  \
    launch_forward<HD, WARPS, BN>(out, lse, qkv, B, T, L, causal, stream);        \
    return true;                                                                  \
  }
  PYLON_ATTENTION_MMA_FORWARD_TILES(PYLON_FORWARD_CASE)
#undef PYLON_FORWARD_CASE
  return false;
}

}  // namespace pylon::cuda

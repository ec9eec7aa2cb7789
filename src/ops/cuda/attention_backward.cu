// Flash-attention backward on tensor cores, deterministic: dsum = rowsum(dout ∘ out); then one pass
// over key tiles that owns dk and dv (FlashAttention-2's outer loop), and a second pass over query
// tiles that owns dq. The second pass recomputes s and dp (two extra products, 7 instead of 5) so that
// dq is summed in registers in a fixed order instead of by fp32 atomic adds into a scratch buffer.
#include <cmath>

#include "ops/cuda/attention_launch.h"
#include "ops/cuda/attention_tiles.h"
#include "ops/cuda/check.h"
#include "ops/cuda/flash_softmax_backward.cuh"
#include "ops/cuda/mma_sm80.cuh"

namespace pylon::cuda {
namespace {

using namespace mma;
using flash::kLog2e;

// dsum (B, heads, T) = Σ_c dout[b, t, h*hd + c] · out[b, t, h*hd + c]; kHeadDim/8 lanes per (b, t, h).
template <int kHeadDim>
__global__ void attention_backward_dsum(float* __restrict__ dsum, const bf16* __restrict__ dout,
                                        const bf16* __restrict__ out, int64_t rows, int T, int H) {
  constexpr int kLanes = kHeadDim / 8;  // each lane reads 8 bf16 of dout and of out
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = idx / kLanes;  // = (b*T + t)*H + h: dout and out (B, T, H·hd) are (B*T*H, hd)
  float acc = 0.f;
  if (row < rows) {
    const int64_t offset = row * kHeadDim + (idx % kLanes) * 8;
    const uint4 a = *reinterpret_cast<const uint4*>(dout + offset);
    const uint4 c = *reinterpret_cast<const uint4*>(out + offset);
    const __nv_bfloat162* x = reinterpret_cast<const __nv_bfloat162*>(&a);
    const __nv_bfloat162* y = reinterpret_cast<const __nv_bfloat162*>(&c);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 xf = __bfloat1622float2(x[i]), yf = __bfloat1622float2(y[i]);
      acc += xf.x * yf.x + xf.y * yf.y;
    }
  }
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (row < rows && idx % kLanes == 0) {
    const int64_t bt = row / H;
    const int h = static_cast<int>(row % H), t = static_cast<int>(bt % T);
    const int64_t b = bt / T;
    dsum[(b * H + h) * T + t] = acc;
  }
}

// The two passes' products, a warp's, in mma_sm80.cuh's fragment layouts; shared-memory tiles are
// row-major with kHeadDim columns and a row stride of kHeadDim + 8.
//
// acc (16 rows, 8·kTiles columns) += a (the 16 rows at a_w) · bᵀ (the 8·kTiles rows at b_t), over the head
// dim: the dk/dv pass's sᵀ = k·qᵀ and dpᵀ = v·doutᵀ, the dq pass's dp = dout·vᵀ.
template <int kHeadDim, int kTiles>
__device__ __forceinline__ void product_over_head_dim(float (&acc)[kTiles][4], const bf16* a_w, const bf16* b_t,
                                                      int lane) {
  constexpr int kStride = kHeadDim + 8;
#pragma unroll
  for (int ks = 0; ks < kHeadDim / 16; ++ks) {
    uint32_t af[4];
    ldmatrix_x4(af, ldsm_addr_rows(a_w, kStride, ks * 16, lane));
#pragma unroll
    for (int np = 0; np < kTiles / 2; ++np) {
      uint32_t bf[4];
      ldmatrix_x4(bf, ldsm_addr_cols(b_t + np * 16 * kStride, kStride, ks * 16, lane));
      mma_bf16_16816(acc[2 * np], af, bf[0], bf[1]);
      mma_bf16_16816(acc[2 * np + 1], af, bf[2], bf[3]);
    }
  }
}

// acc (16 rows, kHeadDim) += x (16 rows, 8·kTiles columns: accumulators, rounded to bf16) · the 8·kTiles
// rows at tile, over the tile's rows: the dk/dv pass's dv += pᵀ·dout and dk += dsᵀ·q, the dq pass's
// dq += ds·k.
template <int kHeadDim, int kTiles>
__device__ __forceinline__ void product_over_tile(float (&acc)[kHeadDim / 8][4], const float (&x)[kTiles][4],
                                                  const bf16* tile, int lane) {
  constexpr int kStride = kHeadDim + 8;
#pragma unroll
  for (int kk = 0; kk < kTiles / 2; ++kk) {
    uint32_t xf[4];
    accum_to_a(xf, x[2 * kk], x[2 * kk + 1]);
#pragma unroll
    for (int dp = 0; dp < kHeadDim / 16; ++dp) {
      uint32_t f[4];
      ldmatrix_x4_trans(f, ldsm_addr_rows(tile + kk * 16 * kStride, kStride, dp * 16, lane));
      mma_bf16_16816(acc[2 * dp], xf, f[0], f[1]);
      mma_bf16_16816(acc[2 * dp + 1], xf, f[2], f[3]);
    }
  }
}

// A block owns kBlockN keys of one (batch, key/value head); each warp owns 16 of them and sums their dk,
// dv over the group's query heads in order, each head's query tiles in order: iteration it of the
// block's group·n_m tiles is query head kvh·group + it / n_m, query tile m_begin + it % n_m.
template <int kHeadDim, int kWarps, int kBlockM>
__global__ void __launch_bounds__(kWarps * 32)
    flash_attention_backward_dkdv_mma(bf16* __restrict__ dqkv,        // (B, T, ld): writes the k, v columns
                                      const bf16* __restrict__ dout,  // (B, T, q_dim)
                                      const bf16* __restrict__ qkv,   // (B, T, ld)
                                      const float* __restrict__ lse,  // (B, heads, T)
                                      const float* __restrict__ dsum, // (B, heads, T)
                                      int T, QkvLayout L, float scale, float scale_log2, bool causal) {
  constexpr int kBlockN = 16 * kWarps, kThreads = 32 * kWarps, kStride = kHeadDim + 8;
  constexpr int kTilesM = kBlockM / 8, kTilesD = kHeadDim / 8;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* k_s = reinterpret_cast<bf16*>(smem);     // (kBlockN, kStride)
  bf16* v_s = k_s + kBlockN * kStride;           // (kBlockN, kStride)
  bf16* q_s = v_s + kBlockN * kStride;           // (2, kBlockM, kStride)
  bf16* do_s = q_s + 2 * kBlockM * kStride;      // (2, kBlockM, kStride)
  float* lse_s = reinterpret_cast<float*>(do_s + 2 * kBlockM * kStride);  // (2, kBlockM)
  float* dsum_s = lse_s + 2 * kBlockM;                                    // (2, kBlockM)

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int bkv = blockIdx.y, b = bkv / L.kv_heads, kvh = bkv % L.kv_heads;
  const int n0 = blockIdx.x * kBlockN;  // causal: low key tiles see the most queries and start first
  const int ld = L.ld;
  const bf16* row_g = qkv + static_cast<int64_t>(b) * T * ld;
  const bf16* k_g = row_g + L.k_col(kvh);
  const bf16* v_g = row_g + L.v_col(kvh);
  const int m_begin = causal ? n0 / kBlockM : 0;  // earlier query tiles cannot see these keys
  const int n_m = (T + kBlockM - 1) / kBlockM - m_begin;  // query tiles per head, >= 1 (n0 < T)
  const int n_iter = L.group * n_m;
  // Iteration it's query head (its q, dout columns and lse, dsum rows) and first query.
  auto head_of = [&](int it) { return kvh * L.group + it / n_m; };
  auto m0_of = [&](int it) { return (m_begin + it % n_m) * kBlockM; };
  auto q_of = [&](int it) { return row_g + L.q_col(head_of(it)); };
  auto do_of = [&](int it) { return dout + static_cast<int64_t>(b) * T * L.q_dim + L.q_col(head_of(it)); };
  auto lse_of = [&](int it) { return lse + (static_cast<int64_t>(b) * L.heads + head_of(it)) * T; };
  auto dsum_of = [&](int it) { return dsum + (static_cast<int64_t>(b) * L.heads + head_of(it)) * T; };

  load_tile_async<kBlockN, kHeadDim, kThreads>(k_s, k_g, ld, n0, T, tid);
  load_tile_async<kBlockM, kHeadDim, kThreads>(q_s, q_of(0), ld, m0_of(0), T, tid);
  load_row_stats_async<kBlockM, kThreads>(lse_s, lse_of(0), m0_of(0), T, tid);
  cp_async_commit();
  load_tile_async<kBlockN, kHeadDim, kThreads>(v_s, v_g, ld, n0, T, tid);
  load_tile_async<kBlockM, kHeadDim, kThreads>(do_s, do_of(0), L.q_dim, m0_of(0), T, tid);
  load_row_stats_async<kBlockM, kThreads>(dsum_s, dsum_of(0), m0_of(0), T, tid);
  cp_async_commit();

  float dk[kTilesD][4] = {}, dv[kTilesD][4] = {};  // rows: keys g and g+8 of this warp
  const int key_base = n0 + warp * 16 + g;
  const bf16* k_w = k_s + warp * 16 * kStride;
  const bf16* v_w = v_s + warp * 16 * kStride;

  for (int it = 0; it < n_iter; ++it) {
    const int buf = it & 1, m0 = m0_of(it);
    const bool has_next = it + 1 < n_iter;
    cp_async_wait<1>();  // q tile and lse (and k on the first pass) have landed
    __syncthreads();
    if (has_next) {
      load_tile_async<kBlockM, kHeadDim, kThreads>(q_s + (buf ^ 1) * kBlockM * kStride, q_of(it + 1), ld,
                                                   m0_of(it + 1), T, tid);
      load_row_stats_async<kBlockM, kThreads>(lse_s + (buf ^ 1) * kBlockM, lse_of(it + 1), m0_of(it + 1), T, tid);
      cp_async_commit();
    }
    const bf16* q_t = q_s + buf * kBlockM * kStride;
    const bf16* do_t = do_s + buf * kBlockM * kStride;

    // sᵀ (16 keys, kBlockM queries) = k · qᵀ, then pᵀ = exp(sᵀ - lse_query), 0 where masked.
    float st[kTilesM][4] = {};
    product_over_head_dim<kHeadDim>(st, k_w, q_t, lane);
    const float* lse_t = lse_s + buf * kBlockM;
    const bool need_mask = flash::tile_needs_mask(m0 + kBlockM, n0 + kBlockN - 1, m0, T, causal);
    flash::transposed_probabilities(st, lse_t, key_base, m0, t, T, causal, need_mask, scale_log2);

    if (has_next) cp_async_wait<1>();
    else cp_async_wait<0>();
    __syncthreads();  // dout tile and dsum (and v on the first pass) have landed
    if (has_next) {
      load_tile_async<kBlockM, kHeadDim, kThreads>(do_s + (buf ^ 1) * kBlockM * kStride, do_of(it + 1), L.q_dim,
                                                   m0_of(it + 1), T, tid);
      load_row_stats_async<kBlockM, kThreads>(dsum_s + (buf ^ 1) * kBlockM, dsum_of(it + 1), m0_of(it + 1), T, tid);
      cp_async_commit();
    }

    // dpᵀ (16 keys, kBlockM queries) = v · doutᵀ.
    float dpt[kTilesM][4] = {};
    product_over_head_dim<kHeadDim>(dpt, v_w, do_t, lane);

    // dv (16 keys, hd) += pᵀ · dout.
    product_over_tile<kHeadDim>(dv, st, do_t, lane);

    // dsᵀ = pᵀ ∘ (dpᵀ - dsum_query), in place of dpᵀ.
    flash::transposed_score_grads(dpt, st, dsum_s + buf * kBlockM, t);

    // dk (16 keys, hd) += dsᵀ · q (the 1/sqrt(hd) factor is applied once at the end).
    product_over_tile<kHeadDim>(dk, dpt, q_t, lane);
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key_base + 8 * r;
    if (key >= T) continue;
    bf16* dk_dst = dqkv + (static_cast<int64_t>(b) * T + key) * ld + L.k_col(kvh) + 2 * t;
    bf16* dv_dst = dk_dst + L.kv_dim;  // v_col(kvh) - k_col(kvh)
#pragma unroll
    for (int dt = 0; dt < kTilesD; ++dt) {
      *reinterpret_cast<__nv_bfloat162*>(dk_dst + dt * 8) =
          __floats2bfloat162_rn(dk[dt][2 * r] * scale, dk[dt][2 * r + 1] * scale);
      *reinterpret_cast<__nv_bfloat162*>(dv_dst + dt * 8) = __floats2bfloat162_rn(dv[dt][2 * r], dv[dt][2 * r + 1]);
    }
  }
}

// Each warp owns 16 query rows of the block's (batch, query head) and sums their dq over the key tiles
// of key/value head h / group, recomputing p and dp.
template <int kHeadDim, int kWarps, int kBlockN>
__global__ void __launch_bounds__(kWarps * 32)
    flash_attention_backward_dq_mma(bf16* __restrict__ dqkv,        // (B, T, ld): writes the q columns
                                    const bf16* __restrict__ dout,  // (B, T, q_dim)
                                    const bf16* __restrict__ qkv,   // (B, T, ld)
                                    const float* __restrict__ lse,  // (B, heads, T)
                                    const float* __restrict__ dsum, // (B, heads, T)
                                    int T, QkvLayout L, float scale, float scale_log2, bool causal) {
  constexpr int kBlockM = 16 * kWarps, kThreads = 32 * kWarps, kStride = kHeadDim + 8;
  constexpr int kSteps = kHeadDim / 16, kTilesN = kBlockN / 8, kTilesD = kHeadDim / 8;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* q_s = reinterpret_cast<bf16*>(smem);  // (kBlockM, kStride)
  bf16* do_s = q_s + kBlockM * kStride;       // (kBlockM, kStride)
  bf16* k_s = do_s + kBlockM * kStride;       // (2, kBlockN, kStride)
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
  const bf16* do_g = dout + static_cast<int64_t>(b) * T * L.q_dim + L.q_col(h);
  const int kv_end = causal ? min(T, q0 + kBlockM) : T;
  const int n_tiles = (kv_end + kBlockN - 1) / kBlockN;

  load_tile_async<kBlockM, kHeadDim, kThreads>(q_s, q_g, ld, q0, T, tid);
  load_tile_async<kBlockM, kHeadDim, kThreads>(do_s, do_g, L.q_dim, q0, T, tid);
  load_tile_async<kBlockN, kHeadDim, kThreads>(k_s, k_g, ld, 0, T, tid);
  cp_async_commit();
  load_tile_async<kBlockN, kHeadDim, kThreads>(v_s, v_g, ld, 0, T, tid);
  cp_async_commit();

  const int row_base = q0 + warp * 16 + g;
  float row_lse[2], row_dsum[2];  // rows g and g+8
  flash::load_row_stats(row_lse, row_dsum, lse, dsum, bh, row_base, T);

  cp_async_wait<1>();  // q, dout and the first k tile
  __syncthreads();
  uint32_t q_frag[kSteps][4];
#pragma unroll
  for (int ks = 0; ks < kSteps; ++ks) ldmatrix_x4(q_frag[ks], ldsm_addr_rows(q_s + warp * 16 * kStride, kStride, ks * 16, lane));
  const bf16* do_w = do_s + warp * 16 * kStride;

  float dq[kTilesD][4] = {};
  for (int j = 0; j < n_tiles; ++j) {
    const int buf = j & 1, k0 = j * kBlockN;
    const bool has_next = j + 1 < n_tiles;
    if (j > 0) {
      cp_async_wait<1>();  // k tile j
      __syncthreads();
    }
    if (has_next) {
      load_tile_async<kBlockN, kHeadDim, kThreads>(k_s + (buf ^ 1) * kBlockN * kStride, k_g, ld, k0 + kBlockN, T, tid);
      cp_async_commit();
    }
    const bf16* k_t = k_s + buf * kBlockN * kStride;
    const bf16* v_t = v_s + buf * kBlockN * kStride;

    // s (16, kBlockN) = q · kᵀ, then p = exp(s - lse_row), 0 where masked.
    float s[kTilesN][4] = {};
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
#pragma unroll
      for (int np = 0; np < kTilesN / 2; ++np) {
        uint32_t kf[4];
        ldmatrix_x4(kf, ldsm_addr_cols(k_t + np * 16 * kStride, kStride, ks * 16, lane));
        mma_bf16_16816(s[2 * np], q_frag[ks], kf[0], kf[1]);
        mma_bf16_16816(s[2 * np + 1], q_frag[ks], kf[2], kf[3]);
      }
    }
    const bool need_mask = flash::tile_needs_mask(k0 + kBlockN, k0 + kBlockN - 1, q0, T, causal);
    flash::row_probabilities(s, row_lse, row_base, k0, t, T, causal, need_mask, scale_log2);

    if (has_next) cp_async_wait<1>();
    else cp_async_wait<0>();
    __syncthreads();  // v tile j
    if (has_next) {
      load_tile_async<kBlockN, kHeadDim, kThreads>(v_s + (buf ^ 1) * kBlockN * kStride, v_g, ld, k0 + kBlockN, T, tid);
      cp_async_commit();
    }

    // dp (16, kBlockN) = dout · vᵀ, then ds = p ∘ (dp - dsum_row) in place of dp.
    float dp[kTilesN][4] = {};
    product_over_head_dim<kHeadDim>(dp, do_w, v_t, lane);
    flash::row_score_grads(dp, s, row_dsum);

    // dq (16, hd) += ds · k (the 1/sqrt(hd) factor is applied once at the end).
    product_over_tile<kHeadDim>(dq, dp, k_t, lane);
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row_base + 8 * r;
    if (row >= T) continue;
    bf16* dst = dqkv + (static_cast<int64_t>(b) * T + row) * ld + L.q_col(h) + 2 * t;
#pragma unroll
    for (int dt = 0; dt < kTilesD; ++dt)
      *reinterpret_cast<__nv_bfloat162*>(dst + dt * 8) =
          __floats2bfloat162_rn(dq[dt][2 * r] * scale, dq[dt][2 * r + 1] * scale);
  }
}

template <int kHeadDim, int kWarps, int kBlockM>
void launch_dkdv(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* dsum, int B, int T,
                 const QkvLayout& L, bool causal, cudaStream_t stream) {
  constexpr int kBlockN = 16 * kWarps;
  constexpr int smem = (2 * kBlockN + 4 * kBlockM) * (kHeadDim + 8) * static_cast<int>(sizeof(bf16)) +
                       4 * kBlockM * static_cast<int>(sizeof(float));
  auto kernel = flash_attention_backward_dkdv_mma<kHeadDim, kWarps, kBlockM>;
  PYLON_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid((T + kBlockN - 1) / kBlockN, B * L.kv_heads);
  const float scale = 1.f / std::sqrt(static_cast<float>(kHeadDim));
  kernel<<<grid, kWarps * 32, smem, stream>>>(dqkv, dout, qkv, lse, dsum, T, L, scale, scale * kLog2e, causal);
  PYLON_CUDA_CHECK_LAUNCH();
}

template <int kHeadDim, int kWarps, int kBlockN>
void launch_dq(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* dsum, int B, int T,
               const QkvLayout& L, bool causal, cudaStream_t stream) {
  constexpr int kBlockM = 16 * kWarps;
  constexpr int smem = (2 * kBlockM + 4 * kBlockN) * (kHeadDim + 8) * static_cast<int>(sizeof(bf16));
  auto kernel = flash_attention_backward_dq_mma<kHeadDim, kWarps, kBlockN>;
  PYLON_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid((T + kBlockM - 1) / kBlockM, B * L.heads);
  const float scale = 1.f / std::sqrt(static_cast<float>(kHeadDim));
  kernel<<<grid, kWarps * 32, smem, stream>>>(dqkv, dout, qkv, lse, dsum, T, L, scale, scale * kLog2e, causal);
  PYLON_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_attention_backward_dsum(float* dsum, const bf16* dout, const bf16* out, int B, int T, const QkvLayout& L,
                                    cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(B) * T * L.heads;
  const int64_t threads = rows * (L.head_dim / 8);
  const int block = 256;
  const auto grid = static_cast<unsigned>((threads + block - 1) / block);
  if (L.head_dim == 64) attention_backward_dsum<64><<<grid, block, 0, stream>>>(dsum, dout, out, rows, T, L.heads);
  else attention_backward_dsum<128><<<grid, block, 0, stream>>>(dsum, dout, out, rows, T, L.heads);
  PYLON_CUDA_CHECK_LAUNCH();
}

bool launch_attention_backward_dkdv(const detail::AttentionTiles& tiles, bf16* dqkv, const bf16* dout,
                                    const bf16* qkv, const float* lse, const float* dsum, int B, int T,
                                    const QkvLayout& L, bool causal, cudaStream_t stream) {
#define PYLON_DKDV_CASE(HD, WARPS, BM)                                               \
  if (L.head_dim == HD && tiles.dkdv_warps == WARPS && tiles.dkdv_block_m == BM) {   \
    launch_dkdv<HD, WARPS, BM>(dqkv, dout, qkv, lse, dsum, B, T, L, causal, stream); \
    return true;                                                                     \
  }
  PYLON_ATTENTION_MMA_DKDV_TILES(PYLON_DKDV_CASE)
#undef PYLON_DKDV_CASE
  return false;
}

bool launch_attention_backward_dq(const detail::AttentionTiles& tiles, bf16* dqkv, const bf16* dout,
                                  const bf16* qkv, const float* lse, const float* dsum, int B, int T,
                                  const QkvLayout& L, bool causal, cudaStream_t stream) {
#define PYLON_DQ_CASE(HD, WARPS, BN)                                               \
  if (L.head_dim == HD && tiles.dq_warps == WARPS && tiles.dq_block_n == BN) {     \
    launch_dq<HD, WARPS, BN>(dqkv, dout, qkv, lse, dsum, B, T, L, causal, stream); \
    return true;                                                                   \
  }
  PYLON_ATTENTION_MMA_DQ_TILES(PYLON_DQ_CASE)
#undef PYLON_DQ_CASE
  return false;
}

}  // namespace pylon::cuda

// Flash-attention forward on Hopper, warp-specialised (FlashAttention-3 style; bench/attention_notes.md).
// Chosen by AttentionTiles::fwd_ws: the default at hd 128 (bench/attention_notes.md), other head dims
// through warp_specialized_tiles; same outputs as attention_forward_wgmma.cu.
//
// A block owns 128 query rows of one (b, h) and has 3 warpgroups. Warpgroup 0 is the producer: it gives
// registers back (setmaxnreg 24) and its thread 0 loads q once and k, v tiles of kBlockN keys into a ring
// of kStages shared-memory stages with TMA (tensor maps of qkv built on the host; 128-byte swizzle, the
// layout the wgmma descriptors of wgmma_sm90.cuh read; rows past T land as zeros). Warpgroups 1 and 2
// are the consumers (setmaxnreg 240), 64 query rows each: s = q·kᵀ (wgmma, both operands in shared
// memory), the online softmax in registers, o += p·v (p from registers). They take turns issuing their
// products, so one consumer's softmax runs while the other's products are on the tensor cores.
//
// Protocol (all barriers in shared memory after the tiles):
//   q_full          1 arrival + q's bytes; consumers wait its first completion (parity 0).
//   k_full[s],      1 arrival (the producer's arrive_expect_tx) + one tile's bytes. Tile j lives in stage
//   v_full[s]       s = j % kStages and is the r-th completion (r = j / kStages) of its barriers: parity r & 1.
//   empty[s]        256 arrivals: every consumer thread, once its products that read tile j have completed.
//                   Before loading tile j >= kStages the producer waits completion r - 1 (tile j - kStages).
//   named 1, 2      the turn of consumer 0, 1 (256 threads: 128 sync, 128 arrive). A consumer syncs on its
//                   own barrier, issues its products, arrives on the other's. Consumer 1 arrives once up front
//                   (consumer 0 goes first) and skips its last arrive: each generation gets 128 + 128.
// Per consumer: turn {s_0}, softmax; for each tile j < n-1: turn {o += p_j·v_j, s_{j+1} = q·k_{j+1}ᵀ}, wait,
// release stage j, softmax of s_{j+1}; then turn {o += p_{n-1}·v_{n-1}}, wait, release. So the tensor cores
// see c0 {pv_j, s_j+1}, c1 {pv_j, s_j+1}, c0 ..., and each softmax runs under the other consumer's pair.
// 2 x (1 + n) turns per block.
#include <cmath>
#include <cstdint>

#include "ops/cuda/attention_launch.h"
#include "ops/cuda/attention_tiles.h"
#include "ops/cuda/check.h"
#include "ops/cuda/flash_softmax.cuh"
#include "ops/cuda/mma_sm80.cuh"
#include "ops/cuda/tma_map.h"
#include "ops/cuda/tma_sm90.cuh"
#include "ops/cuda/wgmma_sm90.cuh"

namespace pylon::cuda {
namespace {

using namespace mma;

constexpr int kBlockM = 128;                     // query rows per block: 2 consumer warpgroups x 64
constexpr int kConsumerThreads = 256;            // warpgroups 1 and 2
constexpr int kThreads = 128 + kConsumerThreads;  // + the producer warpgroup 0
constexpr int kTurnBarrier = 1;                  // named barriers 1 (consumer 0) and 2 (consumer 1)
// Registers per thread after setmaxnreg: 128 x 24 + 256 x 240 = 64512 <= 65536, and the kernel starts
// with 168 each (65536 / 384, rounded down to 8; __launch_bounds__(384, 1)), so what the producer gives
// back (128 x 144) is exactly what the consumers take (256 x 72).
constexpr int kProducerRegisters = 24, kConsumerRegisters = 240;

// Shared memory, byte offsets from the 1024-aligned base. Each tile is kColBlocks column blocks of
// (rows, 64 columns) = rows x 128 bytes, 128-byte swizzled (wgmma::load_swizzled_tile_async's layout).
template <int kHeadDim, int kBlockN, int kStages>
struct WsSmem {
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;     // q (128, hd)
  static constexpr int kTileBytes = kBlockN * kHeadDim * 2;  // one k or v tile (kBlockN, hd)
  static constexpr int kQ = 0;
  static constexpr int kK = kQ + kQBytes;                    // kStages k tiles
  static constexpr int kV = kK + kStages * kTileBytes;       // kStages v tiles
  static constexpr int kBarriers = kV + kStages * kTileBytes;  // q_full, k_full[], v_full[], empty[] (kStages)
  static constexpr int kBytes = kBarriers + 8 * (1 + 3 * kStages) + 1024;  // + slack to align the base
  static_assert(kQBytes % 1024 == 0 && kTileBytes % 1024 == 0, "tiles keep the 1024-byte swizzle alignment");
};

template <int kHeadDim, int kBlockN, int kStages>
__global__ void __launch_bounds__(kThreads, 1)
    flash_attention_forward_ws(bf16* __restrict__ out,                    // (B, T, q_dim)
                               float* __restrict__ lse,                   // (B, heads, T)
                               const __grid_constant__ CUtensorMap q_map,   // qkv (B, T, ld), boxes (128, 64)
                               const __grid_constant__ CUtensorMap kv_map,  // qkv, boxes (kBlockN rows, 64 cols)
                               int T, QkvLayout L, float scale_log2, bool causal) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // built without sm_90a: the host never picks this kernel
#else
  using Smem = WsSmem<kHeadDim, kBlockN, kStages>;
  constexpr int kColBlocks = kHeadDim / 64, kSteps = kHeadDim / 16, kTilesN = kBlockN / 8;
  extern __shared__ unsigned char smem[];
  const uint32_t base = (smem_addr(smem) + 1023) & ~1023u;
  const uint32_t q_s = base + Smem::kQ;
  const uint32_t q_full = base + Smem::kBarriers;
  auto k_tile = [&](int stage) { return base + Smem::kK + stage * Smem::kTileBytes; };
  auto v_tile = [&](int stage) { return base + Smem::kV + stage * Smem::kTileBytes; };
  auto k_full = [&](int stage) { return q_full + 8 * (1 + stage); };
  auto v_full = [&](int stage) { return q_full + 8 * (1 + kStages + stage); };
  auto empty = [&](int stage) { return q_full + 8 * (1 + 2 * kStages + stage); };

  const int tid = threadIdx.x, lane = tid % 32;
  // Warpgroup index read from lane 0, so the compiler sees it is uniform across each warp (roles branch
  // on it; wgmma in code it cannot prove warp-uniform gets serialised).
  const int warpgroup = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int m_block = gridDim.x - 1 - blockIdx.x;  // heaviest causal tiles first
  const int bh = blockIdx.y, b = bh / L.heads, h = bh % L.heads, kvh = h / L.group;
  const int q0 = m_block * kBlockM;
  const int kv_end = causal ? min(T, q0 + kBlockM) : T;
  const int n_tiles = (kv_end + kBlockN - 1) / kBlockN;  // >= 1: q0 < T

  if (tid == 0) {
    tma::mbar_init(q_full, 1);
    for (int st = 0; st < kStages; ++st) {
      tma::mbar_init(k_full(st), 1);
      tma::mbar_init(v_full(st), 1);
      tma::mbar_init(empty(st), kConsumerThreads);
    }
    tma::fence_mbar_init();
  }
  __syncthreads();  // the only block-wide barrier: producer threads 1-127 leave soon after it

  if (warpgroup == 0) {  // producer
    tma::set_max_registers_dec<kProducerRegisters>();
    if (tid == 0) {
      const int q_col = L.q_col(h), k_col = L.k_col(kvh), v_col = L.v_col(kvh);  // columns of qkv
      tma::mbar_arrive_expect_tx(q_full, Smem::kQBytes);
      for (int cb = 0; cb < kColBlocks; ++cb)
        tma::load_3d(q_s + cb * kBlockM * 128, &q_map, q_col + cb * 64, q0, b, q_full);
      for (int j = 0; j < n_tiles; ++j) {
        const int st = j % kStages, round = j / kStages;
        if (j >= kStages) tma::mbar_wait(empty(st), (round - 1) & 1);  // tile j - kStages released
        tma::mbar_arrive_expect_tx(k_full(st), Smem::kTileBytes);
        for (int cb = 0; cb < kColBlocks; ++cb)
          tma::load_3d(k_tile(st) + cb * kBlockN * 128, &kv_map, k_col + cb * 64, j * kBlockN, b, k_full(st));
        tma::mbar_arrive_expect_tx(v_full(st), Smem::kTileBytes);
        for (int cb = 0; cb < kColBlocks; ++cb)
          tma::load_3d(v_tile(st) + cb * kBlockN * 128, &kv_map, v_col + cb * 64, j * kBlockN, b, v_full(st));
      }
    }
    return;
  }
  tma::set_max_registers_inc<kConsumerRegisters>();

  // Consumer `group` owns rows q0 + 64*group .. + 63; this lane rows row_base and row_base + 8.
  const int group = warpgroup - 1, warp_in_block = (tid - 128) / 32, g = lane / 4, t = lane % 4;
  const int row_base = q0 + warp_in_block * 16 + g;
  float o[kColBlocks][8][4] = {};              // unnormalised output, 64 columns per block
  float row_max[2] = {-INFINITY, -INFINITY};  // raw scores
  float row_sum[2] = {0.f, 0.f};              // this lane's share
  float s[kTilesN][4];                        // scores, then p = exp(...) in place
  uint32_t p_frag[kBlockN / 16][4];           // p as bf16 A fragments of o += p·v

  auto take_turn = [&] { tma::named_sync(kTurnBarrier + group, kConsumerThreads); };
  auto pass_turn = [&] { tma::named_arrive(kTurnBarrier + (group ^ 1), kConsumerThreads); };
  // s (64, kBlockN) = q (this consumer's 64 rows) · k_jᵀ; issued, not waited.
  auto issue_scores = [&](int j) {
    const uint32_t k_t = k_tile(j % kStages);
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
      const uint64_t da = wgmma::desc_k_major<kBlockM>(q_s, group * 64, ks);
      const uint64_t db = wgmma::desc_k_major<kBlockN>(k_t, 0, ks);
      if constexpr (kBlockN == 64) wgmma::wgmma_m64n64k16_ss(s, da, db, ks > 0);
      else wgmma::wgmma_m64n128k16_ss(s, da, db, ks > 0);
    }
  };
  // o (64, hd) += p (64, kBlockN) · v_j (kBlockN, hd); issued, not waited.
  auto issue_pv = [&](int j) {
    const uint32_t v_t = v_tile(j % kStages);
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
      for (int cb = 0; cb < kColBlocks; ++cb)
        wgmma::wgmma_m64n64k16_rs_mn(o[cb], p_frag[kk], wgmma::desc_mn_major<kBlockN>(v_t, kk, cb));
  };
  auto fence_o = [&] {
#pragma unroll
    for (int cb = 0; cb < kColBlocks; ++cb) wgmma::fence_accumulators(o[cb]);
  };
  // Masks tile j's scores, updates the running max and sum, rescales o, and leaves p in p_frag.
  auto softmax = [&](int j) {
    const int k0 = j * kBlockN;
    if (k0 + kBlockN > T || (causal && k0 + kBlockN - 1 > q0 + group * 64))  // tail keys or the diagonal
      flash::mask_scores(s, row_base, k0, t, T, causal);
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
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) accum_to_a(p_frag[kk], s[2 * kk], s[2 * kk + 1]);
  };

  tma::mbar_wait(q_full, 0);
  if (group == 1) pass_turn();  // consumer 0 takes the first turn
  tma::mbar_wait(k_full(0), 0);
  take_turn();  // turn 0: s_0
  wgmma::fence();
  issue_scores(0);
  wgmma::commit();
  pass_turn();
  wgmma::wait<0>();
  wgmma::fence_accumulators(s);
  softmax(0);

  for (int j = 0; j + 1 < n_tiles; ++j) {  // turns 1 .. n-1: pv_j and s_{j+1}
    tma::mbar_wait(v_full(j % kStages), (j / kStages) & 1);
    tma::mbar_wait(k_full((j + 1) % kStages), ((j + 1) / kStages) & 1);
    take_turn();
    fence_o();
    wgmma::fence();
    issue_pv(j);
    issue_scores(j + 1);
    wgmma::commit();
    pass_turn();
    wgmma::wait<0>();
    fence_o();
    wgmma::fence_accumulators(s);
    tma::mbar_arrive(empty(j % kStages));  // this thread's reads of k_j and v_j are done
    softmax(j + 1);
  }

  const int last = n_tiles - 1;  // turn n: pv_{n-1}
  tma::mbar_wait(v_full(last % kStages), (last / kStages) & 1);
  take_turn();
  fence_o();
  wgmma::fence();
  issue_pv(last);
  wgmma::commit();
  if (group == 0) pass_turn();  // consumer 1's last turn has no successor
  wgmma::wait<0>();
  fence_o();
  tma::mbar_arrive(empty(last % kStages));  // not awaited (no later tile); keeps the count uniform

  flash::store_output_rows(out, lse, o, row_max, row_sum, b, bh, L.q_col(h), row_base, t, T, L.q_dim, scale_log2);
#endif
}

template <int kHeadDim, int kBlockN, int kStages>
void launch_forward_ws(bf16* out, float* lse, const bf16* qkv, int B, int T, const QkvLayout& L, bool causal,
                       cudaStream_t stream) {
  constexpr int smem = WsSmem<kHeadDim, kBlockN, kStages>::kBytes;
  static_assert(smem <= 227 * 1024, "over the 227 KB of shared memory a block may opt into");
  auto kernel = flash_attention_forward_ws<kHeadDim, kBlockN, kStages>;
  PYLON_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const CUtensorMap q_map = bf16_rows_tensor_map(qkv, L.ld, T, B, kBlockM, "attention_forward (ws)");
  const CUtensorMap kv_map = bf16_rows_tensor_map(qkv, L.ld, T, B, kBlockN, "attention_forward (ws)");
  const dim3 grid((T + kBlockM - 1) / kBlockM, B * L.heads);
  const float scale_log2 = 1.4426950408889634f / std::sqrt(static_cast<float>(kHeadDim));
  kernel<<<grid, kThreads, smem, stream>>>(out, lse, q_map, kv_map, T, L, scale_log2, causal);
  PYLON_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool launch_attention_forward_ws(const detail::AttentionTiles& tiles, bf16* out, float* lse, const bf16* qkv, int B,
                                 int T, const QkvLayout& L, bool causal, cudaStream_t stream) {
#define PYLON_FORWARD_WS_CASE(HD, BN, STAGES)                                       \
  if (L.head_dim == HD && tiles.fwd_block_n == BN && tiles.fwd_stages == STAGES) {  \
    launch_forward_ws<HD, BN, STAGES>(out, lse, qkv, B, T, L, causal, stream);      \
    return true;                                                                    \
  }
  PYLON_ATTENTION_WS_FORWARD_TILES(PYLON_FORWARD_WS_CASE)
#undef PYLON_FORWARD_WS_CASE
  return false;
}

}  // namespace pylon::cuda

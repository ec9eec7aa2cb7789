// Flash-attention backward, the dk/dv pass, on Hopper, warp-specialised (the forward's scheme,
// attention_forward_ws.cu): a producer warp loads the block's 128 keys' k and v once, then for each
// query tile of 64 its q and dout (TMA) and its lse and dsum (plain loads) into a ring of kStages
// shared-memory stages; two consumer warpgroups of 64 keys each run the math of
// attention_backward_wgmma.cu's dk/dv pass (unchanged: sᵀ and dpᵀ over the head dim, pᵀ and dsᵀ in
// registers, dv += pᵀ·dout and dk += dsᵀ·q) with no block-wide barrier between tiles, so each
// consumer runs as far ahead as the ring lets it. Chosen by AttentionTiles::bwd_ws (the default at hd 128,
// where it was measured faster: bench/attention_notes.md); same outputs as
// flash_attention_backward_dkdv_wgmma<hd, 2>. The dq pass in the same style follows (flash_attention_backward_dq_ws).
//
// With kPingPong the two consumers take turns issuing their products (named barriers 1 and 2, as in the
// forward): each tile step is two turns (sᵀ and dpᵀ, then dv and dk), so one consumer's exp and score
// gradients run while the other's products are on the tensor cores. Otherwise they drift freely.
//
// Protocol (barriers in shared memory after the tiles):
//   kv_full   1 arrival (arrive_expect_tx) + k's and v's bytes; consumers wait its completion 0.
//   full[s]   32 arrivals (each lane of the producer warp once its lse/dsum values are stored; lane 0's
//             with expect_tx) + q's and dout's bytes. The block's i-th query tile (with grouped-query
//             heads: query head kvh·group + i / n_m, query tile m_begin + i % n_m, so dk and dv sum the
//             group's heads in a fixed order) lives in stage
//             s = i % kStages as completion r = i / kStages of full[s]: parity r & 1.
//   empty[s]  256 arrivals: every consumer thread, once the products that read tile i have completed.
//             Before filling tile i >= kStages the producer warp waits completion r - 1 (tile i - kStages).
#include <cmath>
#include <cstdint>

#include "ops/cuda/attention_backward_wgmma.cuh"
#include "ops/cuda/attention_launch.h"
#include "ops/cuda/attention_tiles.h"
#include "ops/cuda/check.h"
#include "ops/cuda/flash_softmax_backward.cuh"
#include "ops/cuda/mma_sm80.cuh"
#include "ops/cuda/tma_map.h"
#include "ops/cuda/tma_sm90.cuh"
#include "ops/cuda/wgmma_sm90.cuh"

namespace pylon::cuda {
namespace {

using namespace mma;
using namespace attention_bwd;
using flash::kLog2e;

constexpr int kKeys = 128;                       // keys per block: 2 consumer warpgroups x 64
constexpr int kConsumerThreads = 256;            // warpgroups 1 and 2
constexpr int kThreads = 128 + kConsumerThreads;  // + the producer warpgroup 0 (one warp of it works)
// As in the forward: 168 registers at entry (65536 / 384); the producer gives back 128 x 144, the
// consumers take 256 x 72.
constexpr int kProducerRegisters = 24, kConsumerRegisters = 240;

// The consumers' ping-pong: consumer `group` syncs on named barrier 1 + group before issuing, arrives
// on the other's after. Each generation of a barrier is 128 syncs + 128 arrives: consumer 1 arrives on
// consumer 0's once up front (consumer 0 goes first) and skips its very last arrive (no turn follows
// it). `turns`: this consumer's number of turns (both consumers take as many).
struct PingPong {
  static constexpr int kBarrier = 1;  // named barriers 1 (consumer 0) and 2 (consumer 1); 0 is __syncthreads
  int group;
  mutable int turns_left;
  __device__ PingPong(int group_, int turns) : group(group_), turns_left(turns) {
    if (group == 1) tma::named_arrive(kBarrier, kConsumerThreads);
  }
  __device__ __forceinline__ void take() const { tma::named_sync(kBarrier + group, kConsumerThreads); }
  __device__ __forceinline__ void pass() const {
    if (--turns_left > 0 || group == 0) tma::named_arrive(kBarrier + (group ^ 1), kConsumerThreads);
  }
};

// Shared memory, byte offsets from the 1024-aligned base; tiles in wgmma::load_swizzled_tile_async's
// layout (column blocks of (rows, 64 columns), 128-byte swizzled), as TMA writes them.
template <int kHeadDim, int kStages>
struct DkdvWsSmem {
  static constexpr int kKVBytes = kKeys * kHeadDim * 2;    // k or v of the block (128, hd)
  static constexpr int kTileBytes = kTile * kHeadDim * 2;  // q or dout of a query tile (64, hd)
  static constexpr int kK = 0;
  static constexpr int kV = kK + kKVBytes;
  static constexpr int kQ = kV + kKVBytes;                  // kStages q tiles
  static constexpr int kDout = kQ + kStages * kTileBytes;   // kStages dout tiles
  static constexpr int kStats = kDout + kStages * kTileBytes;  // per stage: lse (64 floats), dsum (64)
  static constexpr int kBarriers = kStats + kStages * 2 * kTile * 4;  // kv_full, full[], empty[]
  static constexpr int kBytes = kBarriers + 8 * (1 + 2 * kStages) + 1024;  // + slack to align the base
  static_assert(kKVBytes % 1024 == 0 && kTileBytes % 1024 == 0, "tiles keep the 1024-byte swizzle alignment");
};

template <int kHeadDim, int kStages, bool kPingPong>
__global__ void __launch_bounds__(kThreads, 1)
    flash_attention_backward_dkdv_ws(bf16* __restrict__ dqkv,                     // (B, T, ld): k, v columns
                                     const float* __restrict__ lse,               // (B, heads, T)
                                     const float* __restrict__ dsum,              // (B, heads, T)
                                     const __grid_constant__ CUtensorMap kv_map,  // qkv, boxes (128 rows, 64)
                                     const __grid_constant__ CUtensorMap q_map,   // qkv, boxes (64, 64)
                                     const __grid_constant__ CUtensorMap do_map,  // dout (B, T, q_dim), (64, 64)
                                     int T, QkvLayout L, float scale, float scale_log2, bool causal) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // built without sm_90a: the host never picks this kernel
#else
  using Smem = DkdvWsSmem<kHeadDim, kStages>;
  constexpr int kColBlocks = kHeadDim / 64;
  extern __shared__ unsigned char smem[];
  const uint32_t base = (smem_addr(smem) + 1023) & ~1023u;
  float* stats = reinterpret_cast<float*>(smem + (base - smem_addr(smem)) + Smem::kStats);
  const uint32_t k_s = base + Smem::kK, v_s = base + Smem::kV;
  auto q_tile = [&](int stage) { return base + Smem::kQ + stage * Smem::kTileBytes; };
  auto do_tile = [&](int stage) { return base + Smem::kDout + stage * Smem::kTileBytes; };
  auto lse_tile = [&](int stage) { return stats + stage * 2 * kTile; };
  auto dsum_tile = [&](int stage) { return stats + stage * 2 * kTile + kTile; };
  const uint32_t kv_full = base + Smem::kBarriers;
  auto full = [&](int stage) { return kv_full + 8 * (1 + stage); };
  auto empty = [&](int stage) { return kv_full + 8 * (1 + kStages + stage); };

  const int tid = threadIdx.x, lane = tid % 32;
  const int warpgroup = __shfl_sync(0xffffffffu, tid / 128, 0);  // uniform per warp (see the forward)
  const int bkv = blockIdx.y, b = bkv / L.kv_heads, kvh = bkv % L.kv_heads;
  const int n0 = blockIdx.x * kKeys;
  const int m_begin = causal ? n0 / kTile : 0;      // causal: earlier queries see none of these keys
  const int n_m = (T + kTile - 1) / kTile - m_begin;  // query tiles per head, >= 1: n0 < T
  const int n_tiles = L.group * n_m;                  // the group's heads' query tiles, head by head

  if (tid == 0) {
    tma::mbar_init(kv_full, 1);
    for (int st = 0; st < kStages; ++st) {
      tma::mbar_init(full(st), 32);
      tma::mbar_init(empty(st), kConsumerThreads);
    }
    tma::fence_mbar_init();
  }
  __syncthreads();  // the only block-wide barrier

  if (warpgroup == 0) {  // producer: warp 0 loads, warps 1-3 leave
    tma::set_max_registers_dec<kProducerRegisters>();
    if (tid >= 32) return;
    if (lane == 0) {
      tma::mbar_arrive_expect_tx(kv_full, 2 * Smem::kKVBytes);
      for (int cb = 0; cb < kColBlocks; ++cb) {
        tma::load_3d(k_s + cb * kKeys * 128, &kv_map, L.k_col(kvh) + cb * 64, n0, b, kv_full);
        tma::load_3d(v_s + cb * kKeys * 128, &kv_map, L.v_col(kvh) + cb * 64, n0, b, kv_full);
      }
    }
    for (int i = 0; i < n_tiles; ++i) {
      const int st = i % kStages, round = i / kStages, m0 = (m_begin + i % n_m) * kTile;
      const int h = kvh * L.group + i / n_m;  // its query head
      const int col = L.q_col(h);             // q's columns in qkv, dout's in dout
      const float* lse_g = lse + (static_cast<int64_t>(b) * L.heads + h) * T;
      const float* dsum_g = dsum + (static_cast<int64_t>(b) * L.heads + h) * T;
      if (i >= kStages) tma::mbar_wait(empty(st), (round - 1) & 1);  // tile i - kStages released
      for (int r = lane; r < kTile; r += 32) {  // queries past T: 0 (their columns are masked)
        const bool valid = m0 + r < T;
        lse_tile(st)[r] = valid ? lse_g[m0 + r] : 0.f;
        dsum_tile(st)[r] = valid ? dsum_g[m0 + r] : 0.f;
      }
      if (lane == 0) {
        tma::mbar_arrive_expect_tx(full(st), 2 * Smem::kTileBytes);
        for (int cb = 0; cb < kColBlocks; ++cb) {
          tma::load_3d(q_tile(st) + cb * kTile * 128, &q_map, col + cb * 64, m0, b, full(st));
          tma::load_3d(do_tile(st) + cb * kTile * 128, &do_map, col + cb * 64, m0, b, full(st));
        }
      } else {
        tma::mbar_arrive(full(st));  // releases this lane's lse/dsum stores
      }
    }
    return;
  }
  tma::set_max_registers_inc<kConsumerRegisters>();

  // Consumer `group` owns keys n0 + 64*group .. + 63; this lane keys key_base and key_base + 8.
  const int group = warpgroup - 1, warp_in_block = (tid - 128) / 32, g = lane / 4, t = lane % 4;
  const int key_base = n0 + warp_in_block * 16 + g;
  const int group_key0 = n0 + group * 64;
  float dk[kColBlocks][8][4] = {}, dv[kColBlocks][8][4] = {};
  tma::mbar_wait(kv_full, 0);
  auto steps = [&](const auto& turns) {
    for (int i = 0; i < n_tiles; ++i) {
      const int st = i % kStages, m0 = (m_begin + i % n_m) * kTile;
      tma::mbar_wait(full(st), (i / kStages) & 1);
      dkdv_tile_step<kHeadDim, kKeys>(dk, dv, k_s, v_s, group * 64, q_tile(st), do_tile(st), lse_tile(st),
                                      dsum_tile(st), group_key0, key_base, m0, t, T, causal, scale_log2, turns);
      tma::mbar_arrive(empty(st));  // this thread's reads of tile i (products and stats) are done
    }
  };
  if constexpr (kPingPong) steps(PingPong(group, 2 * n_tiles));
  else steps(NoTurns{});

  store_dkdv<kHeadDim>(dqkv, dk, dv, b, L.k_col(kvh), L.kv_dim, key_base, t, T, L.ld, scale);
#endif
}

// The dq pass, warp-specialised the same way: the block's 128 query rows' q and dout (of one query head)
// loaded once, key tiles of 64 (k and v of key/value head h / group, TMA) through the ring; each consumer warpgroup owns 64 rows and runs
// attention_backward_wgmma.cu's dq math (s and dp over the head dim, p and ds in registers, dq += ds·k).
// Barriers: qd_full (1 arrival + q's and dout's bytes), full[s] (1 arrival + k's and v's bytes),
// empty[s] (256 arrivals), with the dk/dv pass's parities.
template <int kHeadDim, int kStages>
struct DqWsSmem {
  static constexpr int kRowBytes = kKeys * kHeadDim * 2;   // q or dout of the block (128 rows, hd)
  static constexpr int kTileBytes = kTile * kHeadDim * 2;  // k or v of a key tile (64, hd)
  static constexpr int kQ = 0;
  static constexpr int kDout = kQ + kRowBytes;
  static constexpr int kK = kDout + kRowBytes;               // kStages k tiles
  static constexpr int kV = kK + kStages * kTileBytes;       // kStages v tiles
  static constexpr int kBarriers = kV + kStages * kTileBytes;  // qd_full, full[], empty[]
  static constexpr int kBytes = kBarriers + 8 * (1 + 2 * kStages) + 1024;
  static_assert(kRowBytes % 1024 == 0 && kTileBytes % 1024 == 0, "tiles keep the 1024-byte swizzle alignment");
};

template <int kHeadDim, int kStages, bool kPingPong>
__global__ void __launch_bounds__(kThreads, 1)
    flash_attention_backward_dq_ws(bf16* __restrict__ dqkv,                     // (B, T, ld): q columns
                                   const float* __restrict__ lse,               // (B, heads, T)
                                   const float* __restrict__ dsum,              // (B, heads, T)
                                   const __grid_constant__ CUtensorMap q_map,   // qkv, boxes (128 rows, 64)
                                   const __grid_constant__ CUtensorMap do_map,  // dout, boxes (128, 64)
                                   const __grid_constant__ CUtensorMap kv_map,  // qkv, boxes (64, 64)
                                   int T, QkvLayout L, float scale, float scale_log2, bool causal) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();
#else
  using Smem = DqWsSmem<kHeadDim, kStages>;
  constexpr int kColBlocks = kHeadDim / 64;
  extern __shared__ unsigned char smem[];
  const uint32_t base = (smem_addr(smem) + 1023) & ~1023u;
  const uint32_t q_s = base + Smem::kQ, do_s = base + Smem::kDout;
  auto k_tile = [&](int stage) { return base + Smem::kK + stage * Smem::kTileBytes; };
  auto v_tile = [&](int stage) { return base + Smem::kV + stage * Smem::kTileBytes; };
  const uint32_t qd_full = base + Smem::kBarriers;
  auto full = [&](int stage) { return qd_full + 8 * (1 + stage); };
  auto empty = [&](int stage) { return qd_full + 8 * (1 + kStages + stage); };

  const int tid = threadIdx.x, lane = tid % 32;
  const int warpgroup = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int m_block = gridDim.x - 1 - blockIdx.x;  // heaviest causal blocks first
  const int bh = blockIdx.y, b = bh / L.heads, h = bh % L.heads, kvh = h / L.group;
  const int q0 = m_block * kKeys;
  const int kv_end = causal ? min(T, q0 + kKeys) : T;
  const int n_tiles = (kv_end + kTile - 1) / kTile;  // >= 1: q0 < T

  if (tid == 0) {
    tma::mbar_init(qd_full, 1);
    for (int st = 0; st < kStages; ++st) {
      tma::mbar_init(full(st), 1);
      tma::mbar_init(empty(st), kConsumerThreads);
    }
    tma::fence_mbar_init();
  }
  __syncthreads();

  if (warpgroup == 0) {  // producer: thread 0 loads
    tma::set_max_registers_dec<kProducerRegisters>();
    if (tid == 0) {
      const int col = L.q_col(h);  // q's columns in qkv, dout's in dout
      tma::mbar_arrive_expect_tx(qd_full, 2 * Smem::kRowBytes);
      for (int cb = 0; cb < kColBlocks; ++cb) {
        tma::load_3d(q_s + cb * kKeys * 128, &q_map, col + cb * 64, q0, b, qd_full);
        tma::load_3d(do_s + cb * kKeys * 128, &do_map, col + cb * 64, q0, b, qd_full);
      }
      for (int j = 0; j < n_tiles; ++j) {
        const int st = j % kStages, round = j / kStages;
        if (j >= kStages) tma::mbar_wait(empty(st), (round - 1) & 1);
        tma::mbar_arrive_expect_tx(full(st), 2 * Smem::kTileBytes);
        for (int cb = 0; cb < kColBlocks; ++cb) {
          tma::load_3d(k_tile(st) + cb * kTile * 128, &kv_map, L.k_col(kvh) + cb * 64, j * kTile, b, full(st));
          tma::load_3d(v_tile(st) + cb * kTile * 128, &kv_map, L.v_col(kvh) + cb * 64, j * kTile, b, full(st));
        }
      }
    }
    return;
  }
  tma::set_max_registers_inc<kConsumerRegisters>();

  const int group = warpgroup - 1, warp_in_block = (tid - 128) / 32, g = lane / 4, t = lane % 4;
  const int row_base = q0 + warp_in_block * 16 + g;
  float row_lse[2], row_dsum[2];
  flash::load_row_stats(row_lse, row_dsum, lse, dsum, bh, row_base, T);
  float dq[kColBlocks][8][4] = {};
  tma::mbar_wait(qd_full, 0);
  auto steps = [&](const auto& turns) {
    for (int j = 0; j < n_tiles; ++j) {
      const int st = j % kStages, k0 = j * kTile;
      tma::mbar_wait(full(st), (j / kStages) & 1);
      dq_tile_step<kHeadDim, kKeys>(dq, q_s, do_s, group * 64, k_tile(st), v_tile(st), row_lse, row_dsum,
                                    q0 + group * 64, row_base, k0, t, T, causal, scale_log2, turns);
      tma::mbar_arrive(empty(st));
    }
  };
  if constexpr (kPingPong) steps(PingPong(group, 2 * n_tiles));
  else steps(NoTurns{});

  store_dq<kHeadDim>(dqkv, dq, b, L.q_col(h), row_base, t, T, L.ld, scale);
#endif
}

template <int kHeadDim, int kStages, bool kPingPong>
void launch_dkdv_ws(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* dsum, int B,
                    int T, const QkvLayout& L, bool causal, cudaStream_t stream) {
  constexpr int smem = DkdvWsSmem<kHeadDim, kStages>::kBytes;
  static_assert(smem <= 227 * 1024, "over the 227 KB of shared memory a block may opt into");
  auto kernel = flash_attention_backward_dkdv_ws<kHeadDim, kStages, kPingPong>;
  PYLON_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  constexpr const char* who = "attention_backward (ws)";
  const CUtensorMap kv_map = bf16_rows_tensor_map(qkv, L.ld, T, B, kKeys, who);
  const CUtensorMap q_map = bf16_rows_tensor_map(qkv, L.ld, T, B, kTile, who);
  const CUtensorMap do_map = bf16_rows_tensor_map(dout, L.q_dim, T, B, kTile, who);
  const dim3 grid((T + kKeys - 1) / kKeys, B * L.kv_heads);
  const float scale = 1.f / std::sqrt(static_cast<float>(kHeadDim));
  kernel<<<grid, kThreads, smem, stream>>>(dqkv, lse, dsum, kv_map, q_map, do_map, T, L, scale, scale * kLog2e,
                                           causal);
  PYLON_CUDA_CHECK_LAUNCH();
}

template <int kHeadDim, int kStages, bool kPingPong>
void launch_dq_ws(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* dsum, int B,
                  int T, const QkvLayout& L, bool causal, cudaStream_t stream) {
  constexpr int smem = DqWsSmem<kHeadDim, kStages>::kBytes;
  static_assert(smem <= 227 * 1024, "over the 227 KB of shared memory a block may opt into");
  auto kernel = flash_attention_backward_dq_ws<kHeadDim, kStages, kPingPong>;
  PYLON_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  constexpr const char* who = "attention_backward (ws dq)";
  const CUtensorMap q_map = bf16_rows_tensor_map(qkv, L.ld, T, B, kKeys, who);
  const CUtensorMap do_map = bf16_rows_tensor_map(dout, L.q_dim, T, B, kKeys, who);
  const CUtensorMap kv_map = bf16_rows_tensor_map(qkv, L.ld, T, B, kTile, who);
  const dim3 grid((T + kKeys - 1) / kKeys, B * L.heads);
  const float scale = 1.f / std::sqrt(static_cast<float>(kHeadDim));
  kernel<<<grid, kThreads, smem, stream>>>(dqkv, lse, dsum, q_map, do_map, kv_map, T, L, scale, scale * kLog2e,
                                           causal);
  PYLON_CUDA_CHECK_LAUNCH();
}

// Calls launch.template operator()<head dim, stages, ping-pong>() for the compiled shape `tiles` names
// (attention_tiles.h); false when none matches.
template <class Launch>
bool dispatch_ws_shape(const detail::AttentionTiles& tiles, int head_dim, const Launch& launch) {
#define PYLON_WS_BACKWARD_CASE(HD, STAGES)                                         \
  if (head_dim == HD && tiles.bwd_stages == STAGES) {                              \
    if (tiles.bwd_pingpong) launch.template operator()<HD, STAGES, true>();        \
    else launch.template operator()<HD, STAGES, false>();                          \
    return true;                                                                   \
  }
  PYLON_ATTENTION_WS_BACKWARD_TILES(PYLON_WS_BACKWARD_CASE)
#undef PYLON_WS_BACKWARD_CASE
  return false;
}

}  // namespace

bool launch_attention_backward_dkdv_ws(const detail::AttentionTiles& tiles, bf16* dqkv, const bf16* dout,
                                       const bf16* qkv, const float* lse, const float* dsum, int B, int T,
                                       const QkvLayout& L, bool causal, cudaStream_t stream) {
  return dispatch_ws_shape(tiles, L.head_dim, [&]<int kHeadDim, int kStages, bool kPingPong>() {
    launch_dkdv_ws<kHeadDim, kStages, kPingPong>(dqkv, dout, qkv, lse, dsum, B, T, L, causal, stream);
  });
}

bool launch_attention_backward_dq_ws(const detail::AttentionTiles& tiles, bf16* dqkv, const bf16* dout,
                                     const bf16* qkv, const float* lse, const float* dsum, int B, int T,
                                     const QkvLayout& L, bool causal, cudaStream_t stream) {
  return dispatch_ws_shape(tiles, L.head_dim, [&]<int kHeadDim, int kStages, bool kPingPong>() {
    launch_dq_ws<kHeadDim, kStages, kPingPong>(dqkv, dout, qkv, lse, dsum, B, T, L, causal, stream);
  });
}

}  // namespace pylon::cuda

// Fused attention on CUDA (flash attention: the (T, T) scores never reach device memory), multi-head
// and grouped-query. Same semantics as pylon::cpu::attention_forward / attention_backward, in bf16 with
// fp32 accumulation.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "core/head_layout.h"

namespace pylon::cuda {

// qkv (B, T, heads.row()) = [q (heads·hd) | k (kv_heads·hd) | v (kv_heads·hd)] per token, hd =
// heads.head_dim; query head h reads key/value head h / heads.group().
// out (B, T, heads.q_dim()) = concat_h softmax(q_h k_{h/group}ᵀ / sqrt(hd) [+ causal mask]) v_{h/group}.
// lse (B, heads.heads, T) = ln Σ_j exp(q_i·k_j / sqrt(hd)) over the unmasked keys, kept for backward.
// Head dims 64 and 128 run the tensor-core kernels; any other even hd up to 256 a slower kernel (one
// warp per row, attention_rowwise.cu). kv_heads divides heads; any T >= 1; pointers 16-byte aligned.
// Asynchronous on `stream`. What cannot run throws pylon::Error (one line).
void attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T,
                       const HeadLayout& heads, bool causal, cudaStream_t stream);

// Scratch that attention_backward needs: D_i = Σ_c dout_ic·out_ic, fp32 (B, heads.heads, T).
size_t attention_backward_workspace_bytes(int B, int T, const HeadLayout& heads);

// dqkv (B, T, heads.row()), every element written: the gradient w.r.t. qkv given dout (B, T, q_dim),
// and the forward's qkv, out (B, T, q_dim) and lse (B, heads, T); a key/value head's dk and dv sum
// over the query heads of its group. Deterministic: dk, dv and dq are each summed by one thread block
// in a fixed order (dk and dv over the group's heads, then their query tiles; dq by a second pass
// over the keys instead of atomic adds).
void attention_backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                        const __nv_bfloat16* out, const float* lse, int B, int T, const HeadLayout& heads,
                        bool causal, void* workspace, size_t workspace_bytes, cudaStream_t stream);

namespace detail {
// Kernel family and tile shapes, exposed for bench/attention_bench.cpp and the tests; the functions above
// pick default_attention_tiles. wgmma: Hopper warpgroup kernels (16 rows per warp, 4 warps per group,
// tiles of 64 in the backward passes); otherwise mma.sync kernels (any sm_80+ GPU). Head dims other than
// 64 and 128 ignore the tiles (the row-per-warp kernel runs).
struct AttentionTiles {
  bool wgmma = false;
  int fwd_warps = 4;      // forward: 16 query rows per warp
  int fwd_block_n = 64;   // forward: keys per shared-memory tile
  int dkdv_warps = 4;     // backward dk/dv pass: 16 keys per warp
  int dkdv_block_m = 64;  // backward dk/dv pass: queries per tile
  int dq_warps = 4;       // backward dq pass: 16 query rows per warp
  int dq_block_n = 64;    // backward dq pass: keys per tile
  // Forward by the warp-specialised kernel (attention_forward_ws.cu; needs wgmma): 2 consumer warpgroups
  // of 64 query rows (fwd_warps = 8, not read) and a producer warpgroup, fwd_block_n keys per
  // shared-memory stage, fwd_stages stages. The default at hd 128 on Hopper (default_attention_tiles).
  bool fwd_ws = false;
  int fwd_stages = 3;
  // Backward dk/dv pass by the warp-specialised kernel (attention_backward_ws.cu; needs wgmma): 2 consumer
  // warpgroups of 64 keys and a producer warp, query tiles of 64 in a ring of bwd_stages stages. The
  // default at hd 128 on Hopper (default_attention_tiles).
  bool bwd_ws = false;
  int bwd_stages = 3;
  // The dq pass warp-specialised the same way (128 query rows per block, key tiles through the ring of
  // bwd_stages). On with bwd_ws by default (default_attention_tiles).
  bool dq_ws = false;
  // The warp-specialised backward passes' two consumers take turns issuing their products (ping-pong),
  // as the forward's do; otherwise they drift freely.
  bool bwd_pingpong = false;
};
// The fastest measured shapes for this head dim on the current device (wgmma on compute capability 9.x;
// the warp-specialised forward and backward at hd 128). Benchmarks and tests pass other tiles to the
// launchers (warp_specialized_tiles, compiled_attention_tiles).
AttentionTiles default_attention_tiles(int head_dim);
// default_attention_tiles with the warp-specialised forward and dk/dv pass on (wgmma devices only: callers
// check .wgmma).
AttentionTiles warp_specialized_tiles(int head_dim);
// Every compiled shape of this head dim's kernels (the lists of attention_tiles.h), each at least once (for
// the tile sweep and its test); wgmma and warp-specialised shapes only where default_attention_tiles picks
// wgmma. Empty for head dims without tensor-core kernels.
std::vector<AttentionTiles> compiled_attention_tiles(int head_dim);
// The functions above through `tiles`. Throws pylon::Error for a shape with no compiled kernel.
void attention_forward_tiled(const AttentionTiles& tiles, __nv_bfloat16* out, float* lse,
                             const __nv_bfloat16* qkv, int B, int T, const HeadLayout& heads, bool causal,
                             cudaStream_t stream);
void attention_backward_tiled(const AttentionTiles& tiles, __nv_bfloat16* dqkv, const __nv_bfloat16* dout,
                              const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse, int B,
                              int T, const HeadLayout& heads, bool causal, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream);
}  // namespace detail

}  // namespace pylon::cuda

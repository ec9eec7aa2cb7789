// Internal: what the attention kernels (attention_*.cu) share with their host API (attention.cu,
// attention_fp32.cu): the kernels' view of the head layout, the argument checks, and the launchers.
// The tile-shape dispatchers dispatch the shapes of their list in attention_tiles.h and return false
// for any other. Included only by CUDA sources.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <initializer_list>

#include "core/head_layout.h"
#include "ops/cuda/attention.h"

namespace pylon::cuda {

// Where a (batch, query head)'s rows live, from a HeadLayout checked by check_attention_args: qkv and
// dqkv (B, T, ld) = [q (heads·hd) | k (kv_heads·hd) | v (kv_heads·hd)], out and dout (B, T, q_dim),
// lse and dsum (B, heads, T). Query head h reads key/value head h / group. Kernel arguments by value.
struct QkvLayout {
  int heads;     // query heads; a forward or dq block's blockIdx.y = b·heads + h
  int kv_heads;  // key/value heads; a dk/dv block's blockIdx.y = b·kv_heads + kvh
  int group;     // query heads per key/value head
  int head_dim;
  int ld;        // qkv's row: (heads + 2·kv_heads)·head_dim
  int q_dim;     // heads·head_dim: out's row, and the first k column of qkv
  int kv_dim;    // kv_heads·head_dim

  __host__ __device__ int q_col(int h) const { return h * head_dim; }                // query head h
  __host__ __device__ int k_col(int kvh) const { return q_dim + kvh * head_dim; }    // key head kvh
  __host__ __device__ int v_col(int kvh) const { return q_dim + kv_dim + kvh * head_dim; }  // value head kvh
};
inline QkvLayout qkv_layout(const HeadLayout& l) {
  return {l.heads, l.kv_heads, l.group(), l.head_dim, l.row(), l.q_dim(), l.kv_dim()};
}

// User errors: shapes and pointers no kernel can take (one line naming `op` and the value). Pointers
// must be non-null and `alignment`-byte aligned. Defined in attention.cu.
void check_attention_args(const char* op, int B, int T, const HeadLayout& heads, size_t alignment,
                          std::initializer_list<const void*> ptrs);
// Whether the tensor-core kernels (mma.sync, wgmma, warp-specialised) have this head dim; the others run
// the row-per-warp kernels.
inline bool has_tensor_core_kernels(int head_dim) { return head_dim == 64 || head_dim == 128; }

// Row-per-warp kernels (attention_rowwise.cu), Elem = float or __nv_bfloat16 (fp32 math): any even head
// dim up to 256. The forward writes out and lse; the backward writes dsum (B, heads, T), then every
// element of dqkv.
template <typename Elem>
void launch_attention_rowwise_forward(Elem* out, float* lse, const Elem* qkv, int B, int T, const QkvLayout& L,
                                      bool causal, cudaStream_t stream);
template <typename Elem>
void launch_attention_rowwise_backward(Elem* dqkv, float* dsum, const Elem* dout, const Elem* qkv, const Elem* out,
                                       const float* lse, int B, int T, const QkvLayout& L, bool causal,
                                       cudaStream_t stream);

// mma.sync kernels (sm_80 and later) and wgmma kernels (sm_90a), same arguments.
bool launch_attention_forward(const detail::AttentionTiles& tiles, __nv_bfloat16* out, float* lse,
                              const __nv_bfloat16* qkv, int B, int T, const QkvLayout& L, bool causal,
                              cudaStream_t stream);
bool launch_attention_forward_wgmma(const detail::AttentionTiles& tiles, __nv_bfloat16* out, float* lse,
                                    const __nv_bfloat16* qkv, int B, int T, const QkvLayout& L, bool causal,
                                    cudaStream_t stream);
// Warp-specialised TMA forward (attention_forward_ws.cu, sm_90a): keyed by fwd_block_n and fwd_stages.
bool launch_attention_forward_ws(const detail::AttentionTiles& tiles, __nv_bfloat16* out, float* lse,
                                 const __nv_bfloat16* qkv, int B, int T, const QkvLayout& L, bool causal,
                                 cudaStream_t stream);

// dsum (B, heads, T) = rowsum(dout ∘ out) per query head, the D_i term of the softmax backward.
void launch_attention_backward_dsum(float* dsum, const __nv_bfloat16* dout, const __nv_bfloat16* out, int B,
                                    int T, const QkvLayout& L, cudaStream_t stream);

// The dk and dv columns of dqkv (a block per key tile and key/value head, looping over the group's
// query heads), then the q columns (a block per query tile and query head); both read dsum.
bool launch_attention_backward_dkdv(const detail::AttentionTiles& tiles, __nv_bfloat16* dqkv,
                                    const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const float* lse,
                                    const float* dsum, int B, int T, const QkvLayout& L, bool causal,
                                    cudaStream_t stream);
bool launch_attention_backward_dq(const detail::AttentionTiles& tiles, __nv_bfloat16* dqkv,
                                  const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const float* lse,
                                  const float* dsum, int B, int T, const QkvLayout& L, bool causal,
                                  cudaStream_t stream);
bool launch_attention_backward_dkdv_wgmma(const detail::AttentionTiles& tiles, __nv_bfloat16* dqkv,
                                          const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const float* lse,
                                          const float* dsum, int B, int T, const QkvLayout& L, bool causal,
                                          cudaStream_t stream);
bool launch_attention_backward_dq_wgmma(const detail::AttentionTiles& tiles, __nv_bfloat16* dqkv,
                                        const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const float* lse,
                                        const float* dsum, int B, int T, const QkvLayout& L, bool causal,
                                        cudaStream_t stream);
// Warp-specialised passes (attention_backward_ws.cu, sm_90a): keyed by bwd_stages.
bool launch_attention_backward_dkdv_ws(const detail::AttentionTiles& tiles, __nv_bfloat16* dqkv,
                                       const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const float* lse,
                                       const float* dsum, int B, int T, const QkvLayout& L, bool causal,
                                       cudaStream_t stream);
bool launch_attention_backward_dq_ws(const detail::AttentionTiles& tiles, __nv_bfloat16* dqkv,
                                     const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const float* lse,
                                     const float* dsum, int B, int T, const QkvLayout& L, bool causal,
                                     cudaStream_t stream);

}  // namespace pylon::cuda

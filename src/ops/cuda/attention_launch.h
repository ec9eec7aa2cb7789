// Internal: the tile-shape dispatchers of the attention kernels (attention_*.cu), called by attention.cu
// after it has checked the arguments. Each dispatches the shapes of its list in attention_tiles.h and
// returns false for any other.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "ops/cuda/attention.h"

namespace pylon::cuda {

// mma.sync kernels (sm_80 and later) and wgmma kernels (sm_90a), same arguments.
bool launch_attention_forward(const detail::AttentionTiles& tiles, int head_dim, __nv_bfloat16* out, float* lse,
                              const __nv_bfloat16* qkv, int B, int T, int D, int H, bool causal,
                              cudaStream_t stream);
bool launch_attention_forward_wgmma(const detail::AttentionTiles& tiles, int head_dim, __nv_bfloat16* out,
                                    float* lse, const __nv_bfloat16* qkv, int B, int T, int D, int H, bool causal,
                                    cudaStream_t stream);
// Warp-specialised TMA forward (attention_forward_ws.cu, sm_90a): keyed by fwd_block_n and fwd_stages.
bool launch_attention_forward_ws(const detail::AttentionTiles& tiles, int head_dim, __nv_bfloat16* out, float* lse,
                                 const __nv_bfloat16* qkv, int B, int T, int D, int H, bool causal,
                                 cudaStream_t stream);

// Warp-specialised dk/dv pass (attention_backward_ws.cu, sm_90a): keyed by bwd_stages.
bool launch_attention_backward_dkdv_ws(const detail::AttentionTiles& tiles, int head_dim, __nv_bfloat16* dqkv,
                                       const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const float* lse,
                                       const float* dsum, int B, int T, int D, int H, bool causal,
                                       cudaStream_t stream);

bool launch_attention_backward_dq_ws(const detail::AttentionTiles& tiles, int head_dim, __nv_bfloat16* dqkv,
                                     const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const float* lse,
                                     const float* dsum, int B, int T, int D, int H, bool causal, cudaStream_t stream);

// dsum (B, H, T) = rowsum(dout ∘ out) per head, the D_i term of the softmax backward.
void launch_attention_backward_dsum(float* dsum, const __nv_bfloat16* dout, const __nv_bfloat16* out, int B,
                                    int T, int D, int H, cudaStream_t stream);

// dk and dv thirds of dqkv, then the dq third; both read dsum.
bool launch_attention_backward_dkdv(const detail::AttentionTiles& tiles, int head_dim, __nv_bfloat16* dqkv,
                                    const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const float* lse,
                                    const float* dsum, int B, int T, int D, int H, bool causal,
                                    cudaStream_t stream);
bool launch_attention_backward_dq(const detail::AttentionTiles& tiles, int head_dim, __nv_bfloat16* dqkv,
                                  const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const float* lse,
                                  const float* dsum, int B, int T, int D, int H, bool causal,
                                  cudaStream_t stream);
bool launch_attention_backward_dkdv_wgmma(const detail::AttentionTiles& tiles, int head_dim, __nv_bfloat16* dqkv,
                                          const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const float* lse,
                                          const float* dsum, int B, int T, int D, int H, bool causal,
                                          cudaStream_t stream);
bool launch_attention_backward_dq_wgmma(const detail::AttentionTiles& tiles, int head_dim, __nv_bfloat16* dqkv,
                                        const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const float* lse,
                                        const float* dsum, int B, int T, int D, int H, bool causal,
                                        cudaStream_t stream);

}  // namespace pylon::cuda

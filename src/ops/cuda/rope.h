// Rotary position embedding (rotate-half form) in place on the q and k heads of a packed qkv buffer
// (bf16 or fp32), exactly cpu::rope_forward / cpu::rope_backward, angle math in fp32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "core/head_layout.h"
#include "core/rope_scaling.h"

namespace pylon::cuda {

// qkv (B, T, heads.row()) as core/head_layout.h lays it out; every query and key head h, i < hd/2
// (hd = heads.head_dim, even), position p = pos0 + t, angle = p·scaled_inv_freq(theta^(−2i/hd))
// (core/rope_scaling.h):
//   (x_i, x_{i+hd/2}) <- (x_i cos − x_{i+hd/2} sin, x_{i+hd/2} cos + x_i sin).
void rope_forward(__nv_bfloat16* qkv, int B, int T, const HeadLayout& heads, float theta,
                  const RopeScaling& scaling, int pos0, cudaStream_t stream);
// The inverse rotation, in place on dqkv: the gradient w.r.t. the un-rotated q and k.
void rope_backward(__nv_bfloat16* dqkv, int B, int T, const HeadLayout& heads, float theta,
                   const RopeScaling& scaling, int pos0, cudaStream_t stream);
// The same on fp32 qkv (the --dtype fp32 model).
void rope_forward(float* qkv, int B, int T, const HeadLayout& heads, float theta, const RopeScaling& scaling, int pos0,
                  cudaStream_t stream);
void rope_backward(float* dqkv, int B, int T, const HeadLayout& heads, float theta, const RopeScaling& scaling, int pos0,
                   cudaStream_t stream);

}  // namespace pylon::cuda

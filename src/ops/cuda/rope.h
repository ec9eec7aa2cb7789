// Rotary position embedding (rotate-half form) in place on the q and k thirds of a packed bf16
// qkv buffer (bf16 or fp32), exactly cpu::rope_forward / cpu::rope_backward, angle math in fp32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace pylon::cuda {

// For head h, i < hd/2 (hd = D/H), position p = pos0 + t, angle = p·theta^(−2i/hd):
//   (x_i, x_{i+hd/2}) <- (x_i cos − x_{i+hd/2} sin, x_{i+hd/2} cos + x_i sin).
void rope_forward(__nv_bfloat16* qkv /* (B, T, 3*D) */, int B, int T, int D, int H, float theta,
                  int pos0, cudaStream_t stream);
// The inverse rotation, in place on dqkv: the gradient w.r.t. the un-rotated q and k.
void rope_backward(__nv_bfloat16* dqkv /* (B, T, 3*D) */, int B, int T, int D, int H, float theta,
                   int pos0, cudaStream_t stream);
// The same on fp32 qkv (the --dtype fp32 model).
void rope_forward(float* qkv, int B, int T, int D, int H, float theta, int pos0, cudaStream_t stream);
void rope_backward(float* dqkv, int B, int T, int D, int H, float theta, int pos0, cudaStream_t stream);

}  // namespace pylon::cuda

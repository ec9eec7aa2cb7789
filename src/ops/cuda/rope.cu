// RoPE: one block per token row. The block's first threads compute the row's hd/2 (cos, sin)
// pairs into shared memory: theta^(−2i/hd) in double, scaled (core/rope_scaling.h) and rounded to
// fp32 (what the CPU's powf gives unscaled),
// the angle and its sin/cos in fp32 as on the CPU. Then each thread rotates VEC consecutive
// frequencies of one head of q or k (8 elements per access when hd/2 % 8 == 0), in bf16 or fp32.
#include "core/error.h"
#include "ops/cuda/check.h"
#include "ops/cuda/kernel_util.cuh"
#include "ops/cuda/rope.h"

namespace pylon::cuda {
namespace {

template <typename Act, int VEC>
__global__ void rope_kernel(Act* qkv, int T, int row_len, int rotated, int hd, float theta, RopeScaling scaling,
                            int pos0, float sign) {
  extern __shared__ float trig[];  // cos (hd/2), then sign·sin (hd/2)
  const int half = hd / 2, groups = half / VEC;
  const float pos = static_cast<float>(pos0 + static_cast<int>(blockIdx.x % T));
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float exponent = -static_cast<float>(2 * i) / static_cast<float>(hd);
    const float inv_freq = static_cast<float>(
        scaled_inv_freq(pow(static_cast<double>(theta), static_cast<double>(exponent)), scaling));
    float s, c;
    sincosf(pos * inv_freq, &s, &c);
    trig[i] = c;
    trig[half + i] = sign * s;
  }
  __syncthreads();
  Act* row = qkv + static_cast<int64_t>(blockIdx.x) * row_len;
  for (int item = threadIdx.x; item < rotated * groups; item += blockDim.x) {
    const int head = item / groups, i0 = (item % groups) * VEC;  // q heads, then k heads (contiguous)
    Act* x = row + head * hd + i0;
    float x1[VEC], x2[VEC], y1[VEC], y2[VEC];
    detail::load_vec<VEC>(x1, x);
    detail::load_vec<VEC>(x2, x + half);
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      const float c = trig[i0 + e], s = trig[half + i0 + e];
      y1[e] = x1[e] * c - x2[e] * s;
      y2[e] = x2[e] * c + x1[e] * s;
    }
    detail::store_vec<VEC>(x, y1);
    detail::store_vec<VEC>(x + half, y2);
  }
}

template <typename Act>
void rope_launch(Act* qkv, int B, int T, const HeadLayout& l, float theta, const RopeScaling& scaling, int pos0,
                 float sign, cudaStream_t stream) {
  if (B <= 0 || T <= 0) return;
  PYLON_CHECK(l.heads > 0 && l.kv_heads > 0 && l.heads % l.kv_heads == 0 && l.head_dim > 0 && l.head_dim % 2 == 0,
              "rope: ", l.heads, " heads over ", l.kv_heads, " key/value heads of size ", l.head_dim,
              " (the size must be even, the key/value heads divide the heads)");
  const int half = l.head_dim / 2, rotated = l.heads + l.kv_heads;
  const bool vec = half % 8 == 0 && l.row() % 8 == 0 && detail::aligned16(qkv);
  const int items = rotated * (half / (vec ? 8 : 1));
  const int threads = static_cast<int>(std::clamp<int64_t>(detail::ceil_div(items, 32) * 32, 32, 1024));
  const auto blocks = static_cast<unsigned>(B * T);
  const size_t smem = sizeof(float) * 2 * static_cast<size_t>(half);
  const int row = l.row(), hd = l.head_dim;
  if (vec) {
    rope_kernel<Act, 8><<<blocks, threads, smem, stream>>>(qkv, T, row, rotated, hd, theta, scaling, pos0, sign);
  } else {
    rope_kernel<Act, 1><<<blocks, threads, smem, stream>>>(qkv, T, row, rotated, hd, theta, scaling, pos0, sign);
  }
  PYLON_CUDA_CHECK_LAUNCH();
}

}  // namespace

void rope_forward(__nv_bfloat16* qkv, int B, int T, const HeadLayout& heads, float theta,
                  const RopeScaling& scaling, int pos0, cudaStream_t stream) {
  rope_launch(qkv, B, T, heads, theta, scaling, pos0, 1.f, stream);
}

void rope_backward(__nv_bfloat16* dqkv, int B, int T, const HeadLayout& heads, float theta,
                   const RopeScaling& scaling, int pos0, cudaStream_t stream) {
  rope_launch(dqkv, B, T, heads, theta, scaling, pos0, -1.f, stream);
}

void rope_forward(float* qkv, int B, int T, const HeadLayout& heads, float theta,
                  const RopeScaling& scaling, int pos0, cudaStream_t stream) {
  rope_launch(qkv, B, T, heads, theta, scaling, pos0, 1.f, stream);
}

void rope_backward(float* dqkv, int B, int T, const HeadLayout& heads, float theta,
                   const RopeScaling& scaling, int pos0, cudaStream_t stream) {
  rope_launch(dqkv, B, T, heads, theta, scaling, pos0, -1.f, stream);
}

}  // namespace pylon::cuda

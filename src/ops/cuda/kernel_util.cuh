// Device helpers shared by the .cu files: bf16/fp32 vector loads and stores (and converters for
// kernels templated on the activation type), deterministic warp and block reductions, launch
// arithmetic. Included only by CUDA sources.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace pylon::cuda::detail {

constexpr int kWarpSize = 32;

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Workspace carving: every region starts on a 256-byte boundary.
constexpr size_t align_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Blocks for a grid-stride loop over `items` with `threads` per block (the loop covers the rest).
inline unsigned grid_size(int64_t items, int threads) {
  return static_cast<unsigned>(std::clamp<int64_t>(ceil_div(items, threads), 1, int64_t{1} << 20));
}

// Calls f(std::integral_constant<int, K>{}) for the smallest power of two K >= needed, K <= MAX
// (K = MAX when needed is larger): picks a compile-time per-thread chunk count.
template <int MAX, int K = 1, typename F>
void dispatch_pow2(int64_t needed, F&& f) {
  if constexpr (K < MAX) {
    if (needed > K) return dispatch_pow2<MAX, K * 2>(needed, f);
  }
  f(std::integral_constant<int, K>{});
}

__device__ __forceinline__ float round_bf16(float f) { return __bfloat162float(__float2bfloat16_rn(f)); }

// VEC consecutive bf16 to/from fp32: one 16-byte access for VEC = 8, 8-byte for VEC = 4 (the
// pointer aligned to that), one at a time otherwise.
template <int VEC>
__device__ __forceinline__ void load_bf16(float (&dst)[VEC], const __nv_bfloat16* src) {
  if constexpr (VEC == 8 || VEC == 4) {
    using Word = std::conditional_t<VEC == 8, uint4, uint2>;
    const Word u = *reinterpret_cast<const Word*>(src);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < VEC / 2; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      dst[2 * i] = f.x;
      dst[2 * i + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) dst[i] = __bfloat162float(src[i]);
  }
}

template <int VEC>
__device__ __forceinline__ void store_bf16(__nv_bfloat16* dst, const float (&src)[VEC]) {
  if constexpr (VEC == 8) {
    uint4 u;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(src[2 * i], src[2 * i + 1]);
    *reinterpret_cast<uint4*>(dst) = u;
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) dst[i] = __float2bfloat16_rn(src[i]);
  }
}

// VEC consecutive floats: 16-byte accesses when VEC is a multiple of 4 (the pointer 16-byte
// aligned), one at a time otherwise.
template <int VEC>
__device__ __forceinline__ void load_f32(float (&dst)[VEC], const float* src) {
  if constexpr (VEC % 4 == 0) {
#pragma unroll
    for (int i = 0; i < VEC / 4; ++i) {
      const float4 f = reinterpret_cast<const float4*>(src)[i];
      dst[4 * i] = f.x, dst[4 * i + 1] = f.y, dst[4 * i + 2] = f.z, dst[4 * i + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) dst[i] = src[i];
  }
}

template <int VEC>
__device__ __forceinline__ void store_f32(float* dst, const float (&src)[VEC]) {
  if constexpr (VEC % 4 == 0) {
#pragma unroll
    for (int i = 0; i < VEC / 4; ++i)
      reinterpret_cast<float4*>(dst)[i] = make_float4(src[4 * i], src[4 * i + 1], src[4 * i + 2], src[4 * i + 3]);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) dst[i] = src[i];
  }
}

// The converters of the kernels templated on the activation type Act (bf16 or float): VEC
// consecutive Act to/from fp32 registers, and one value. For bf16 they are the functions above; for
// float, loads and stores (rounding to Act is the identity).
template <int VEC>
__device__ __forceinline__ void load_vec(float (&dst)[VEC], const __nv_bfloat16* src) { load_bf16<VEC>(dst, src); }
template <int VEC>
__device__ __forceinline__ void load_vec(float (&dst)[VEC], const float* src) { load_f32<VEC>(dst, src); }
template <int VEC>
__device__ __forceinline__ void store_vec(__nv_bfloat16* dst, const float (&src)[VEC]) { store_bf16<VEC>(dst, src); }
template <int VEC>
__device__ __forceinline__ void store_vec(float* dst, const float (&src)[VEC]) { store_f32<VEC>(dst, src); }

__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(float x) { return x; }

template <typename Act>
__device__ __forceinline__ Act from_float(float x) {
  if constexpr (std::is_same_v<Act, float>) {
    return x;
  } else {
    return __float2bfloat16_rn(x);
  }
}

// x rounded to Act and back: what a later load of a stored Act reads.
template <typename Act>
__device__ __forceinline__ float round_to(float x) {
  if constexpr (std::is_same_v<Act, float>) {
    return x;
  } else {
    return round_bf16(x);
  }
}

// Warp reductions by a fixed butterfly: every lane gets the same, reproducible result.
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block reductions (blockDim.x a multiple of 32, at most 1024): warps reduce, then every warp
// reduces the warps' results in the same order, so all threads return the same value. Every
// thread of the block must call them; calling again right away is safe (barrier before reuse).
template <typename T>
__device__ __forceinline__ T block_sum(T v) {
  __shared__ T partial[kWarpSize];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / kWarpSize) ? partial[lane] : T(0);
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v) {
  __shared__ float partial[kWarpSize];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / kWarpSize) ? partial[lane] : -INFINITY;
  return warp_max(v);
}

}  // namespace pylon::cuda::detail
